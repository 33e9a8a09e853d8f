//! A look at an idle pooled connection's socket before it is reused, as httpcore (the OpenAI
//! Python SDK's transport) and urllib3 do: nothing is expected on an idle HTTP/1.1
//! connection, so a socket with anything to read (the server's FIN, a TLS `close_notify`,
//! stray bytes) is not reused. hyper notices a close only when its connection task next
//! runs; the kernel knows as soon as the FIN arrived, which is what this asks. A server that
//! closes right after its response (llama-server) is then mostly caught here, before a
//! request is lost on it; the rest is what the probe's one retry on a new connection is for.
//!
//! The look is a `recv(MSG_PEEK | MSG_DONTWAIT)` of one byte on the socket's descriptor
//! number, which the connection task owns: it is only taken while hyper still holds the
//! connection open (the pool drops closed ones first). Holding a duplicate descriptor instead
//! would double the descriptors of every connection (10,000 streams are 10,000 sockets).
//! Should hyper close the socket in between on another thread, the number names a closed or
//! another descriptor: a peek reads nothing (`MSG_PEEK`), so the worst outcome is a wrong
//! answer, and a send on a closed connection fails at once and goes on a new connection.
//! Unix only; elsewhere every idle connection passes.

#[cfg(unix)]
use std::os::fd::{AsRawFd, RawFd};

/// A connection's socket descriptor number, to peek at while the connection is idle.
#[derive(Debug)]
pub struct IdlePeek {
    #[cfg(unix)]
    fd: RawFd,
}

impl IdlePeek {
    /// The look at `socket`, whose descriptor the connection keeps for its life.
    #[cfg(unix)]
    pub fn of(socket: &impl AsRawFd) -> Option<IdlePeek> {
        Some(IdlePeek {
            fd: socket.as_raw_fd(),
        })
    }

    /// Never made outside Unix.
    #[cfg(not(unix))]
    pub fn of<T>(_socket: &T) -> Option<IdlePeek> {
        None
    }

    /// Whether the idle socket has nothing to read and no end of stream (a peek of one byte,
    /// without waiting, would block). Only while the connection is open (module doc).
    #[cfg(unix)]
    pub fn quiet(&self) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: a one-byte buffer we own; MSG_PEEK leaves the data where it is,
        // MSG_DONTWAIT never blocks; any descriptor number is memory-safe to pass (a wrong
        // one fails with EBADF or ENOTSOCK: not quiet).
        let n = unsafe {
            libc::recv(
                self.fd,
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n < 0 && {
            let e = std::io::Error::last_os_error();
            e.kind() == std::io::ErrorKind::WouldBlock
        }
    }

    /// Always quiet outside Unix.
    #[cfg(not(unix))]
    pub fn quiet(&self) -> bool {
        true
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_quiet_socket_passes_and_a_closed_or_talking_one_does_not() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.set_nonblocking(true).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let peek = IdlePeek::of(&c).unwrap();
        assert!(peek.quiet());
        s.write_all(b"x").unwrap();
        // The byte is in the client's receive queue once a blocking peek sees it.
        c.set_nonblocking(false).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(c.peek(&mut b).unwrap(), 1);
        assert!(!peek.quiet(), "stray bytes");
        drop(c);
        // A closed server: the FIN reads as end of stream.
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s2, _) = l.accept().unwrap();
        let peek = IdlePeek::of(&c).unwrap();
        assert!(peek.quiet());
        drop(s2);
        c.set_nonblocking(false).unwrap();
        assert_eq!(c.peek(&mut b).unwrap(), 0);
        assert!(!peek.quiet(), "closed by the server");
        drop(s);
    }
}
