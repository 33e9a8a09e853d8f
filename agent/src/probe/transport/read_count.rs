//! Whether any byte of a response arrived: a count of the reads that returned bytes above
//! TLS (what hyper parses), so a TLS record that carries no HTTP byte (a `close_notify`, a
//! session ticket) does not count.
//!
//! A request sent on a pooled connection that fails while the count has not moved since the
//! send (closed or reset before the status line) is sent again on a new connection; once a
//! byte arrived, a failure is the provider's (the probe's `send`, docs/metrics.md
//! "Outcomes").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::on_read::{ObservedIo, OnRead};

/// Reads that returned bytes on one connection, since it was made; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ReadCount(Arc<AtomicU64>);

impl ReadCount {
    /// Reads that returned bytes so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

impl OnRead for ReadCount {
    /// Counts the read.
    fn on_read(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// I/O that counts its reads returning bytes in a [`ReadCount`]; writes pass through.
pub type CountedIo<T> = ObservedIo<T, ReadCount>;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_with_bytes_are_counted_and_writes_and_eof_are_not() {
        let (a, mut b) = tokio::io::duplex(64);
        let count = ReadCount::default();
        let mut io = CountedIo::new(a, count.clone());
        io.write_all(b"request").await.unwrap();
        assert_eq!(count.get(), 0, "a write is not a read");
        b.write_all(b"HTTP/1.1").await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 8);
        assert_eq!(count.get(), 1);
        drop(b);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(count.get(), 1, "end of stream is no byte");
    }
}
