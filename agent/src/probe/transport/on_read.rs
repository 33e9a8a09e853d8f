//! I/O that tells an observer of every read that returned bytes; writes pass through. What
//! the observer keeps is its own: when the read happened ([`ReadStamp`](super::stamp),
//! where the kernel gives no receive times), how many reads brought response bytes
//! ([`ReadCount`](super::read_count)).

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Told of every read that returned bytes, right after it returned.
pub trait OnRead {
    /// A read returned bytes.
    fn on_read(&self);
}

/// `io`, telling its observer of every read that returned bytes (a read at end of stream
/// returns none); writes pass through.
#[derive(Debug)]
pub struct ObservedIo<T, O> {
    io: T,
    observer: O,
}

impl<T, O> ObservedIo<T, O> {
    /// `io`, observed by `observer`.
    pub fn new(io: T, observer: O) -> Self {
        ObservedIo { io, observer }
    }
}

impl<T: AsyncRead + Unpin, O: OnRead + Unpin> AsyncRead for ObservedIo<T, O> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.observer.on_read();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin, O: Unpin> AsyncWrite for ObservedIo<T, O> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}
