//! A new connection, phase by phase: DNS, TCP connect, TLS handshake, HTTP/1 handshake.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use latmesh_core::error_text::chain as error_chain;

use super::idle_peek::IdlePeek;
use super::read_count::{CountedIo, ReadCount};
#[cfg(target_os = "linux")]
use super::rx_stamp::RxStampedTcp;
use super::stamp::ReadStamp;
#[cfg(not(target_os = "linux"))]
use super::stamp::StampedIo;
use super::{Conn, Origin, Phases, ReqBody, Scheme};

/// The addresses of `origin`: the IP literal itself, or DNS (timed into `phases.dns`).
async fn resolve(origin: &Origin, phases: &mut Phases) -> Result<Vec<SocketAddr>, String> {
    if let Some(ip) = origin.ip() {
        return Ok(vec![SocketAddr::new(ip, origin.port)]);
    }
    let t = Instant::now();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((origin.host.as_str(), origin.port))
        .await
        .map_err(|e| format!("dns error: {}", error_chain(&e)))?
        .collect();
    if addrs.is_empty() {
        return Err("dns error: no addresses".to_string());
    }
    phases.dns = Some(t.elapsed());
    Ok(addrs)
}

/// TCP connect to the first of `addrs` that accepts, in order. (Messages name neither the
/// host nor the address: records leave the URL out.)
async fn tcp(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => {
                // Small writes (the request) go out at once.
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => format!("tcp connect error: {}", error_chain(&e)),
        None => "tcp connect error: no address".to_string(),
    })
}

/// The connection's socket, stamping `stamp` on every read that returns bytes: with the
/// kernel's receive time on Linux ([`RxStampedTcp`]), with the read's instant elsewhere.
#[cfg(target_os = "linux")]
fn stamped(tcp: TcpStream, stamp: ReadStamp) -> Result<RxStampedTcp, String> {
    RxStampedTcp::new(tcp, stamp).map_err(|e| format!("tcp error: {}", error_chain(&e)))
}

/// The connection's socket, stamping `stamp` with each read's instant.
#[cfg(not(target_os = "linux"))]
fn stamped(tcp: TcpStream, stamp: ReadStamp) -> Result<StampedIo<TcpStream>, String> {
    Ok(StampedIo::new(tcp, stamp))
}

/// What a user can do about a failed TLS handshake, as a parenthesis to append ("" when
/// there is nothing to say).
fn tls_hint(e: &std::io::Error) -> String {
    match crate::tls::TlsProblem::of(e) {
        Some(p) => p.hint("--provider-ca-file to the agent or --ca-file to latmesh probe"),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            " (the server closed the connection during the TLS handshake: is it plain http?)".into()
        }
        None => String::new(),
    }
}

/// What a new connection knows of its socket, besides the stream itself.
struct Socket {
    /// `io`'s socket stamps it.
    stamp: ReadStamp,
    /// The address connected to.
    peer: IpAddr,
    /// A look at the socket while the connection is idle in the pool.
    peek: Option<IdlePeek>,
}

/// HTTP/1 handshake over `io` (no I/O happens) and the task that drives the connection.
async fn handshake<T>(io: T, origin: &Origin, socket: Socket) -> Result<Conn, String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let reads = ReadCount::default();
    let io = CountedIo::new(io, reads.clone());
    // A fixed 8 KiB read buffer: hyper's default grows up to ~400 KiB when reads come faster
    // than the client consumes them, which at thousands of streams costs more memory than
    // it saves syscalls (SSE frames are small).
    let (sender, conn) = http1::Builder::new()
        .read_buf_exact_size(Some(8 << 10))
        .handshake::<_, ReqBody>(TokioIo::new(io))
        .await
        .map_err(|e| format!("http handshake error: {}", error_chain(&e)))?;
    let task = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("probe connection ended: {}", error_chain(&e));
        }
    });
    Ok(Conn {
        sender,
        task: task.abort_handle(),
        origin: origin.clone(),
        reused: false,
        stamp: socket.stamp,
        reads,
        peer: socket.peer,
        peek: socket.peek,
    })
}

/// A new connection to `origin`; each phase's duration goes into `phases` as soon as it
/// succeeds.
pub async fn connect(
    tls: &tokio_rustls::TlsConnector,
    origin: &Origin,
    phases: &mut Phases,
) -> Result<Conn, String> {
    let addrs = resolve(origin, phases).await?;
    let t = Instant::now();
    let stream = tcp(&addrs).await?;
    phases.connect = Some(t.elapsed());
    let peer = stream
        .peer_addr()
        .map_err(|e| format!("tcp error: {}", error_chain(&e)))?
        .ip();
    let socket = Socket {
        stamp: ReadStamp::default(),
        peer,
        peek: IdlePeek::of(&stream),
    };
    let stream = stamped(stream, socket.stamp.clone())?;
    match origin.scheme {
        Scheme::Http => handshake(stream, origin, socket).await,
        Scheme::Https => {
            let name = ServerName::try_from(origin.host.clone())
                .map_err(|e| format!("tls error: invalid server name: {e}"))?;
            let t = Instant::now();
            let stream = tls
                .connect(name, stream)
                .await
                .map_err(|e| format!("tls handshake error: {}{}", error_chain(&e), tls_hint(&e)))?;
            phases.tls = Some(t.elapsed());
            if let Some(p) = stream.get_ref().1.alpn_protocol()
                && p != b"http/1.1"
            {
                return Err(format!(
                    "tls error: the server chose ALPN protocol {:?}, not http/1.1",
                    String::from_utf8_lossy(p)
                ));
            }
            handshake(stream, origin, socket).await
        }
    }
}
