//! Kernel receive timestamps (Linux): when a read's bytes reached this host, not when the
//! agent got round to reading them.
//!
//! [`RxStampedTcp`] is the probe's TCP socket. It asks the kernel to timestamp received
//! packets (`SO_TIMESTAMPNS`, socket(7)) and reads with `recvmsg`, which hands back, with the
//! bytes, the receive time of the last packet those bytes came from (`SCM_TIMESTAMPNS`,
//! wall clock, taken when the packet entered the host's network stack). The read's
//! [`ReadStamp`] is that instant on the monotonic clock: the read's instant minus the packet's
//! age (wall clock now − receive time). So a frame that waited in the socket while the agent
//! was busy with a thousand other streams is stamped when it arrived, and the agent's own
//! load stops adding to TTFT and ITL. (Per read, not per packet: frames that waited in the
//! socket together share the arrival of the last one.)
//!
//! When the kernel's time is not trusted, the read's own instant is used (what the stamp was
//! before, and never later than the truth by more than the agent's delay in reading):
//! * the kernel gave no timestamp (the option was refused, or a control message truncated);
//! * the age is negative beyond the clocks' granularity or over [`MAX_AGE`] (the wall clock
//!   stepped between arrival and read);
//! * the age is over [`UNCHECKED_AGE`] and TCP reports packets received out of order since
//!   it was last asked (`tcpi_rcv_ooopack` of `TCP_INFO`, Linux ≥ 5.4; a kernel without it
//!   counts as out of order), or the packet arrived before the counter was last seen to
//!   change (the counter moves when a packet is queued out of order, not when the gap fills:
//!   a read before the retransmission can see the change, and the read after it not). After
//!   a loss, the bytes behind the gap arrived before the retransmission that made them
//!   readable, and carry the earlier time; the reader could not have had them then
//!   (head-of-line blocking is part of what a client sees), so the read's instant is the
//!   honest one. Ages up to [`UNCHECKED_AGE`] (200 µs) are taken without asking: that bounds
//!   the error of a reordering the check would have caught.
//!
//! Reads and writes go through tokio's reactor ([`AsyncFd`]); like tokio's own `TcpStream`,
//! a read that returns less than the buffer's room clears the read readiness (edge-triggered
//! epoll: the socket was drained), so a frame costs one `recvmsg`, not one more for `EAGAIN`.

use std::io::{self, Write as _};
use std::mem::{MaybeUninit, offset_of, size_of};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::stamp::ReadStamp;

/// A packet younger than this at its read is stamped with the kernel's time without asking
/// TCP about reordering (a system call): the most a reordering could then shift the stamp,
/// and only one resolved this fast, which a loss is not on any network where a
/// retransmission takes a round trip of more than this. Younger is the common case on a
/// quiet agent (a wake-up and a read take tens of µs), so the check costs nothing there.
pub const UNCHECKED_AGE: Duration = Duration::from_micros(200);

/// A packet older than this at its read (or one from the future by more than
/// [`CLOCK_SLACK`]) means the wall clock stepped: the read's own instant is used.
pub const MAX_AGE: Duration = Duration::from_secs(5);

/// How far the kernel's receive time may lie after the wall clock read just after it (the two
/// are read from the same clock, with different granularity) and still count as age 0.
const CLOCK_SLACK: Duration = Duration::from_micros(2);

/// A TCP connection whose reads stamp a [`ReadStamp`] with the kernel's receive time.
#[derive(Debug)]
pub struct RxStampedTcp {
    fd: AsyncFd<std::net::TcpStream>,
    stamp: ReadStamp,
    /// What TCP said about reordering when last asked.
    reordering: Reordering,
}

/// TCP's count of packets received out of order (`tcpi_rcv_ooopack`), as last asked.
#[derive(Debug)]
pub struct Reordering {
    /// The count; `None` when the kernel does not report it.
    seen: Option<u32>,
    /// The wall clock (since the Unix epoch) when the count was last seen to change.
    since: Duration,
}

impl Reordering {
    /// Starting from the count `seen` (when the connection was made).
    pub fn new(seen: Option<u32>) -> Self {
        Reordering {
            seen,
            since: Duration::ZERO,
        }
    }

    /// Whether a packet received at `received` (wall clock) came in order, now that the count
    /// is `now` (asked at `wall`): the count is known and has not moved since last asked, and
    /// the packet arrived after the count was last seen to change. (The count moves when a
    /// packet is queued out of order, not when the gap before it fills: a read before the
    /// retransmission can see the change, and the read after it not.)
    pub fn in_order(&mut self, now: Option<u32>, received: Duration, wall: Duration) -> bool {
        if now != self.seen {
            self.seen = now;
            self.since = wall;
            return false;
        }
        now.is_some() && received > self.since
    }
}

impl RxStampedTcp {
    /// `tcp`, stamping `stamp` on every read that returns bytes. When the kernel refuses
    /// receive timestamps the reads are stamped with their own instant.
    ///
    /// # Errors
    /// The socket cannot be moved to the reactor as an [`AsyncFd`] (what tokio's
    /// registration returns).
    pub fn new(tcp: TcpStream, stamp: ReadStamp) -> io::Result<Self> {
        keep_timestamping_on();
        let std = tcp.into_std()?; // non-blocking, as it was
        if let Err(e) = set_rx_timestamps(std.as_raw_fd()) {
            tracing::debug!("no kernel receive timestamps (SO_TIMESTAMPNS): {e}");
        }
        let reordering = Reordering::new(rcv_ooopack(std.as_raw_fd()));
        // SAFETY: a `std::net::TcpStream` owns its descriptor until it is dropped, and its
        // `as_raw_fd` always returns that descriptor.
        let fd = unsafe { AsyncFd::register(std) }.map_err(|e| e.into_parts().1)?;
        Ok(RxStampedTcp {
            fd,
            stamp,
            reordering,
        })
    }

    /// Stamps a read that returned bytes at `read_at` with `received` (the kernel's time, and
    /// the wall clock read just before `read_at`; `None`: the read's own instant).
    fn stamp_read(&mut self, read_at: Instant, received: Option<(Duration, Duration)>) {
        let Some((received, wall)) = received else {
            self.stamp.mark_at(read_at);
            return;
        };
        let fd = self.fd.get_ref().as_raw_fd();
        let at = arrival(read_at, age(received, wall), || {
            self.reordering.in_order(rcv_ooopack(fd), received, wall)
        });
        self.stamp.mark_at(at);
    }
}

/// Keeps the kernel's receive timestamping switched on for the rest of the process: one UDP
/// socket with `SO_TIMESTAMPNS`, made once and never closed. The kernel turns timestamping on
/// when the first socket asks for it, and off when the last one closes, both on a work queue
/// a little later: without this, the first packets of a connection made while no other probe
/// connection was open could arrive before it is on, and get no time.
pub fn keep_timestamping_on() {
    static KEEPER: std::sync::OnceLock<Option<std::net::UdpSocket>> = std::sync::OnceLock::new();
    KEEPER.get_or_init(|| {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
        set_rx_timestamps(s.as_raw_fd()).ok()?;
        Some(s)
    });
}

/// The wall clock now, as a duration since the Unix epoch.
fn wall_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// How long before `now` a packet received at `received` arrived (both since the Unix
/// epoch); `None` when it makes no sense: from the future beyond [`CLOCK_SLACK`], or older
/// than [`MAX_AGE`].
pub fn age(received: Duration, now: Duration) -> Option<Duration> {
    match now.checked_sub(received) {
        Some(a) if a <= MAX_AGE => Some(a),
        Some(_) => None,
        None if received - now <= CLOCK_SLACK => Some(Duration::ZERO),
        None => None,
    }
}

/// When a read at `read_at` got bytes that are `age` old (`None`: no usable kernel time):
/// `read_at − age` when the age is at most [`UNCHECKED_AGE`], or when `in_order()` says no
/// packet came out of order since it was last asked; else `read_at`. `in_order` is called
/// only for older packets (it costs a system call).
pub fn arrival(
    read_at: Instant,
    age: Option<Duration>,
    in_order: impl FnOnce() -> bool,
) -> Instant {
    match age {
        Some(a) if a <= UNCHECKED_AGE || in_order() => read_at.checked_sub(a).unwrap_or(read_at),
        _ => read_at,
    }
}

/// `setsockopt(SO_TIMESTAMPNS, 1)`.
fn set_rx_timestamps(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is an open socket; the option value is a c_int that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `tcpi_rcv_ooopack` of `TCP_INFO`: packets this socket received out of order; `None` when
/// the call fails or the kernel's `tcp_info` is too short to hold it (before Linux 5.4).
fn rcv_ooopack(fd: RawFd) -> Option<u32> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` has room for `len` bytes, and the kernel writes at most `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let end = offset_of!(libc::tcp_info, tcpi_rcv_ooopack) + size_of::<u32>();
    if rc != 0 || (len as usize) < end {
        return None;
    }
    // SAFETY: zeroed, then (partly) written by the kernel: every bit pattern is a valid
    // `tcp_info` (plain integers).
    Some(unsafe { info.assume_init() }.tcpi_rcv_ooopack)
}

/// One `sendmsg` of `bufs` with `MSG_NOSIGNAL`: a peer that has gone is an `EPIPE` error,
/// never a SIGPIPE (`writev`, what std and tokio use for vectored writes, raises one, which
/// kills a process that set SIGPIPE back to its default action).
fn send_vectored(fd: RawFd, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it); the kernel only
    // reads through the pointer.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len().min(1024) as _; // IOV_MAX; the rest goes in the next call
    // SAFETY: `msg` points at `bufs`, alive for the call; no control data.
    let n = unsafe { libc::sendmsg(fd, &raw const msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `recvmsg` into `buf`: the byte count and the kernel's receive time of the last packet
/// read (since the Unix epoch), when it gave one.
fn recv_stamped(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<Duration>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one SCM_TIMESTAMPNS (a cmsghdr and a timespec: 32 bytes), 8-byte aligned.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid (no name, no iovecs, no control).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control) as _;
    // SAFETY: `msg` points at `iov` (into `buf`, which the kernel may fill up to its length)
    // and `control`, all alive for the call.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = None;
    if msg.msg_flags & libc::MSG_CTRUNC == 0 {
        // SAFETY: the CMSG_* walk stays within `msg.msg_controllen` bytes of `control`, which
        // the kernel filled; the timespec is read unaligned from its data.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET
                    && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                    && (*c).cmsg_len as usize
                        >= libc::CMSG_LEN(size_of::<libc::timespec>() as u32) as usize
                {
                    let ts: libc::timespec =
                        std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    if let (Ok(s), Ok(ns)) = (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) {
                        received = Some(Duration::new(s, ns));
                    }
                }
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
    }
    Ok((n as usize, received))
}

impl AsyncRead for RxStampedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let (n, received) = loop {
            let mut guard = ready!(this.fd.poll_read_ready(cx))?;
            // SAFETY: the kernel only writes initialised bytes into the unfilled part, and
            // only `n` of them are marked initialised below.
            let unfilled = unsafe { buf.unfilled_mut() };
            let room = unfilled.len();
            match recv_stamped(guard.get_inner().as_raw_fd(), unfilled) {
                Ok((n, received)) => {
                    if n > 0 && n < room {
                        guard.clear_ready(); // drained: wait for the next edge
                    }
                    break (n, received);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        };
        // SAFETY: `recvmsg` wrote `n` bytes at the start of the unfilled part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        if n > 0 {
            // The wall clock first, then the read's instant: a preemption between the two
            // then makes the packet's age too small (its arrival late, never before the
            // bytes were handed over), where the other order made it too early by the
            // preemption (seen: 35 µs on a busy CI machine).
            let wall = received.map(|_| wall_now());
            let read_at = Instant::now();
            this.stamp_read(read_at, received.zip(wall));
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for RxStampedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            if let Ok(res) = guard.try_io(|s| s.get_ref().write(data)) {
                return Poll::Ready(res);
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            if let Ok(res) = guard.try_io(|s| send_vectored(s.as_raw_fd(), bufs)) {
                return Poll::Ready(res);
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // As tokio's `TcpStream`: a connection the peer already closed is shut down.
        Poll::Ready(match self.fd.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_age_is_now_minus_the_receive_time_within_bounds() {
        let now = Duration::from_secs(1_700_000_000);
        assert_eq!(age(now - 300 * US, now), Some(300 * US));
        assert_eq!(age(now, now), Some(Duration::ZERO));
        // A receive time a hair after the wall clock read after it: granularity, age 0.
        assert_eq!(age(now + CLOCK_SLACK, now), Some(Duration::ZERO));
        // Further in the future, or older than MAX_AGE: the wall clock stepped.
        assert_eq!(age(now + CLOCK_SLACK + US, now), None);
        assert_eq!(age(now - MAX_AGE, now), Some(MAX_AGE));
        assert_eq!(age(now - MAX_AGE - US, now), None);
    }

    #[test]
    fn old_packets_are_trusted_only_when_nothing_came_out_of_order() {
        let read_at = Instant::now() + Duration::from_secs(1);
        let calls = std::cell::Cell::new(0);
        let asked = &calls;
        let ask = |answer: bool| {
            move || {
                asked.set(asked.get() + 1);
                answer
            }
        };
        // Young: the kernel's time, without asking TCP.
        assert_eq!(
            arrival(read_at, Some(UNCHECKED_AGE), ask(false)),
            read_at - UNCHECKED_AGE
        );
        assert_eq!(asked.get(), 0);
        // Older: the kernel's time only when TCP saw nothing out of order.
        let old = UNCHECKED_AGE + US;
        assert_eq!(arrival(read_at, Some(old), ask(true)), read_at - old);
        assert_eq!(arrival(read_at, Some(old), ask(false)), read_at);
        assert_eq!(asked.get(), 2);
        // No usable kernel time: the read's instant, without asking.
        assert_eq!(arrival(read_at, None, ask(true)), read_at);
        assert_eq!(asked.get(), 2);
    }

    /// A count that moved is out of order, and so is every packet received before the move was
    /// seen, even when later reads find the count unchanged (the retransmission that filled
    /// the gap came after the check that saw the change).
    #[test]
    fn packets_from_before_a_seen_reordering_are_not_trusted() {
        let s = |secs: u64| Duration::from_secs(1_700_000_000 + secs);
        let mut r = Reordering::new(Some(0));
        assert!(r.in_order(Some(0), s(1), s(2)), "nothing reordered");
        // A packet queued out of order: the next check sees the count move.
        assert!(!r.in_order(Some(1), s(3), s(5)));
        // The gap fills; the bytes behind it carry their early arrival (s(4), before the
        // check at s(5) that saw the move): not trusted, though the count stayed 1.
        assert!(!r.in_order(Some(1), s(4), s(6)));
        // A packet received after that check, the count unchanged: in order.
        assert!(r.in_order(Some(1), s(7), s(8)));
        // A kernel without the count: never trusted.
        let mut none = Reordering::new(None);
        assert!(!none.in_order(None, s(9), s(10)));
    }

    /// The stamp is when the bytes arrived, not when they were read: the reader sleeps 30 ms
    /// after the server wrote, and the stamp still falls within the write's instant (on
    /// loopback the kernel timestamps the packet as the writer sends it).
    #[tokio::test]
    async fn a_read_is_stamped_when_its_bytes_arrived_not_when_it_ran() {
        // Timestamping switched on (the kernel does it on a work queue) before any packet.
        keep_timestamping_on();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let stamp = ReadStamp::default();
        let mut io = RxStampedTcp::new(client, stamp.clone()).unwrap();
        // The reordering check reads the kernel's counter (Linux ≥ 5.4); nothing came out of
        // order on a fresh loopback connection.
        assert_eq!(io.reordering.seen, Some(0));

        io.write_all(b"request").await.unwrap();
        let mut req = [0u8; 7];
        server.read_exact(&mut req).await.unwrap();
        assert_eq!(&req, b"request");
        assert_eq!(stamp.last(), None, "a write is not a read");

        let mut buf = [0u8; 64];
        for round in 0..3 {
            let before = Instant::now();
            server.write_all(b"data: frame\n\n").await.unwrap();
            let written = Instant::now();
            tokio::time::sleep(Duration::from_millis(30)).await;
            let n = io.read(&mut buf).await.unwrap();
            let read = Instant::now();
            assert_eq!(&buf[..n], b"data: frame\n\n", "round {round}");
            let at = stamp.last().expect("stamped");
            assert!(
                before <= at + CLOCK_SLACK && at <= written + Duration::from_millis(5),
                "round {round}: stamped {:?} after the write began, read {:?} after it",
                at.saturating_duration_since(before),
                read - before
            );
        }
        // End of stream: a read of 0 bytes leaves the stamp alone.
        let last = stamp.last();
        drop(server);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(stamp.last(), last);
    }
}
