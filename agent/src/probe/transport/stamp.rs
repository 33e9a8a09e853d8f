//! Read stamps: when the bytes of a connection's latest read arrived.
//!
//! The probe measures a frame at the moment its bytes arrived, not when the probe's task gets
//! to look at it. Between the two, hyper's connection task hands the frame over a channel to
//! the probe's task, and on a busy runtime the probe's task waits behind every other task
//! woken by the same burst of socket events (at 1,000 streams, a burst of frames arriving on
//! one timer tick of the server). The connection's socket stamps a shared [`ReadStamp`] on
//! every read that returns bytes, and the probe reads the stamp when a frame reaches it
//! ([`ReadStamp::read_at`]). On Linux the socket stamps the kernel's receive time of the
//! read's bytes ([`RxStampedTcp`](super::rx_stamp::RxStampedTcp)), so even the wait before
//! the read is left out; elsewhere [`StampedIo`] stamps the read's own instant.
//!
//! Why the stamp belongs to the frame: the frame's bytes came in some read `R`, and the stamp
//! is the connection's latest read `L`, so `R ≤ L ≤ now`. An HTTP/1 connection reads the
//! next bytes only after the frame before was taken, so `L` is normally `R` itself; when it is
//! later, it is still no later than the probe's own clock, the stamp taken before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::on_read::{ObservedIo, OnRead};

/// The process's reference instant for stamps (stamps are ns after it, plus 1; 0 = none).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// When the bytes of a connection's latest read that returned bytes arrived (or when that
/// read ran, where the kernel gives no receive time); clones share it.
#[derive(Clone, Debug)]
pub struct ReadStamp(Arc<AtomicU64>);

impl Default for ReadStamp {
    /// No stamp yet. Fixes the process's reference instant, if it was not: every stamp of
    /// this one (bytes that arrived after it was made) can be told from it.
    fn default() -> Self {
        epoch();
        ReadStamp(Arc::new(AtomicU64::new(0)))
    }
}

impl ReadStamp {
    /// Stamps `at` (an instant before the process's first stamp counts as that one).
    pub fn mark_at(&self, at: Instant) {
        let ns = at.saturating_duration_since(epoch()).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX - 1);
        self.0.store(ns + 1, Ordering::Release);
    }

    /// When the bytes of the connection's latest read arrived; `None` before its first read.
    pub fn last(&self) -> Option<Instant> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }

    /// When bytes that just reached the probe arrived: [`ReadStamp::last`], but not before
    /// `not_before` (the probe's previous stamp, or its send instant: stamps never go
    /// backwards); `None` before any read (the caller then stamps now). No later than now:
    /// the read happened before its bytes reached the probe, on the same monotonic clock.
    pub fn read_at(&self, not_before: Instant) -> Option<Instant> {
        self.last().map(|at| at.max(not_before))
    }
}

impl OnRead for ReadStamp {
    /// Stamps the read's instant.
    fn on_read(&self) {
        self.mark_at(Instant::now());
    }
}

/// I/O that stamps its [`ReadStamp`] with the instant of every read that returned bytes;
/// writes pass through. The probe's sockets use it where the kernel gives no receive times
/// (not Linux; there [`RxStampedTcp`](super::rx_stamp::RxStampedTcp)).
#[cfg_attr(target_os = "linux", allow(dead_code))]
pub type StampedIo<T> = ObservedIo<T, ReadStamp>;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_with_bytes_are_stamped_and_writes_are_not() {
        let (a, mut b) = tokio::io::duplex(64);
        let stamp = ReadStamp::default();
        let mut io = StampedIo::new(a, stamp.clone());
        assert_eq!(stamp.last(), None);
        io.write_all(b"request").await.unwrap();
        assert_eq!(stamp.last(), None, "a write is not a read");
        let before = Instant::now();
        b.write_all(b"frame").await.unwrap();
        let mut buf = [0u8; 16];
        let n = io.read(&mut buf).await.unwrap();
        let after = Instant::now();
        assert_eq!(&buf[..n], b"frame");
        let first = stamp.last().expect("stamped");
        assert!(
            before <= first && first <= after,
            "{before:?} {first:?} {after:?}"
        );
        // End of stream: a read of 0 bytes leaves the stamp alone.
        drop(b);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(stamp.last(), Some(first));

        // The probe's view: the read's instant, not before `not_before`.
        assert_eq!(stamp.read_at(first - Duration::from_millis(1)), Some(first));
        assert_eq!(
            stamp.read_at(first + Duration::from_millis(2)),
            Some(first + Duration::from_millis(2))
        );
        assert_eq!(ReadStamp::default().read_at(first), None);
    }
}
