//! The probe's own HTTP/1.1 transport: connections it establishes itself, phase by phase,
//! so every request knows whether its connection was new and how long DNS, TCP connect and
//! the TLS handshake took.
//!
//! * [`connect`]: DNS with `tokio::net::lookup_host` (skipped for IP literals), TCP with
//!   `TcpStream::connect` over the resolved addresses in order (`TCP_NODELAY` set; on Linux
//!   the socket then reads with the kernel's receive timestamps, [`rx_stamp`]), TLS with
//!   rustls (ring provider, webpki roots plus any extra roots the [`Prober`](super::Prober)
//!   was given, SNI from the host, ALPN `http/1.1` only), then hyper's HTTP/1 handshake
//!   (no I/O) with the connection driven by a spawned task;
//! * [`pool`]: idle connections per origin (scheme, host, port), reused most recent first;
//! * [`idle_peek`]: the look at an idle connection's socket before it is reused;
//! * [`read_count`]: whether any byte of a response arrived on a connection ([`on_read`]:
//!   the I/O wrapper it and the portable read stamps use).
//!
//! HTTP/1.1 only, deliberately: it is what the OpenAI Python SDK (httpx) speaks by default,
//! so the numbers are those an SDK user sees, and one request per connection at a time makes
//! "was this connection new" a property of each request. No proxy is ever used and no
//! redirect is followed.
//!
//! A connection goes back to the pool only after its response body was read to the end and
//! hyper reports it ready for another request. One whose response was abandoned (a timeout,
//! an error, a drain grace that expired, a body too large to keep) is dropped, which closes
//! it: its connection task is aborted. Idle connections expire after [`pool::IDLE_TIMEOUT`]
//! and are checked for a close by the server before reuse (hyper's view of the connection,
//! and the socket itself: [`idle_peek`]); at most [`pool::MAX_IDLE_PER_ORIGIN`] are kept per
//! origin.

pub mod connect;
pub mod idle_peek;
pub mod on_read;
pub mod pool;
pub mod read_count;
#[cfg(target_os = "linux")]
pub mod rx_stamp;
pub mod stamp;

#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::{PathAndQuery, Scheme as UriScheme};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{TrySendError, http1};
use latmesh_core::record::ProbeRecord;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// Body of a probe request: the whole JSON document.
pub type ReqBody = http_body_util::Full<Bytes>;

/// How long, after a body was read to its end, hyper may take to report its connection ready
/// for another request before the connection is dropped instead of pooled.
const READY_WAIT: Duration = Duration::from_secs(1);

/// The connection phases of one request: how its connection was obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// The connection came from the pool (then no phase has a duration).
    pub reused: bool,
    /// The request went first on a pooled connection that failed before any byte of the
    /// response arrived; the phases are those of the new connection it was sent on again.
    pub retried: bool,
    /// Name resolution, when it ran and succeeded (never for an IP literal).
    pub dns: Option<Duration>,
    /// TCP connect (all addresses tried), when it succeeded.
    pub connect: Option<Duration>,
    /// TLS handshake, when it succeeded (never for `http://`).
    pub tls: Option<Duration>,
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Phases {
    /// Sets `conn_reused`, `conn_retried`, `dns_us`, `connect_us` and `tls_us` of `rec`.
    pub fn apply(&self, rec: &mut ProbeRecord) {
        rec.conn_reused = self.reused;
        rec.conn_retried = self.retried;
        rec.dns_us = self.dns.map(us);
        rec.connect_us = self.connect.map(us);
        rec.tls_us = self.tls.map(us);
    }
}

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain TCP.
    Http,
    /// TLS over TCP.
    Https,
}

/// Where connections go; the pool's key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// Scheme.
    pub scheme: Scheme,
    /// Host name (ASCII lowercase) or IP literal (without brackets).
    pub host: String,
    /// Port (the scheme's default when the URL has none).
    pub port: u16,
}

impl Origin {
    /// The host as an IP address when it is an IP literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// A parsed request URL: the origin to connect to, the `Host` header and the request target.
#[derive(Clone, Debug)]
pub struct Target {
    /// The origin.
    pub origin: Origin,
    /// `Host` header value: the URL's host, with its port when the URL names one.
    pub host_header: HeaderValue,
    /// Origin-form request target (`/path?query`).
    pub path: Uri,
}

impl Target {
    /// Parses an absolute `http://` or `https://` URL (user info, if any, is ignored).
    ///
    /// # Errors
    /// A message saying what is wrong with the URL.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
        let scheme = match uri.scheme() {
            Some(s) if *s == UriScheme::HTTP => Scheme::Http,
            Some(s) if *s == UriScheme::HTTPS => Scheme::Https,
            Some(s) => return Err(format!("unsupported URL scheme {s:?} (http or https)")),
            None => return Err(format!("URL {url:?} has no scheme (http or https)")),
        };
        let auth = uri
            .authority()
            .ok_or_else(|| format!("URL {url:?} has no host"))?;
        let host = auth.host();
        if host.is_empty() {
            return Err(format!("URL {url:?} has no host"));
        }
        let port = auth.port_u16().unwrap_or(match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        });
        let host_header = match auth.port() {
            Some(p) => format!("{host}:{}", p.as_str()),
            None => host.to_string(),
        };
        let host_header = HeaderValue::from_str(&host_header)
            .map_err(|e| format!("invalid host in URL {url:?}: {e}"))?;
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(Target {
            origin: Origin {
                scheme,
                host: bare.to_ascii_lowercase(),
                port,
            },
            host_header,
            path: Uri::from(path),
        })
    }
}

/// One HTTP/1.1 connection: hyper's request sender and the task driving the connection.
/// Dropping it aborts that task, which closes the connection.
pub struct Conn {
    sender: http1::SendRequest<ReqBody>,
    task: tokio::task::AbortHandle,
    origin: Origin,
    reused: bool,
    /// When the bytes of the socket's latest read arrived.
    stamp: stamp::ReadStamp,
    /// Reads above TLS that returned bytes.
    reads: read_count::ReadCount,
    /// The address the socket is connected to.
    peer: IpAddr,
    /// A look at the socket while idle (`None`: not available here).
    peek: Option<idle_peek::IdlePeek>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("origin", &self.origin)
            .field("reused", &self.reused)
            .field("closed", &self.sender.is_closed())
            .finish()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Conn {
    /// The address the connection's socket is connected to.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// Reads that returned response bytes (above TLS) on this connection so far: unchanged
    /// across a failed send means no byte of its response arrived.
    pub fn reads(&self) -> u64 {
        self.reads.get()
    }

    /// Whether an idle connection's socket has nothing to read and no end of stream
    /// ([`idle_peek`]); `true` where the socket cannot be looked at.
    pub fn idle_quiet(&self) -> bool {
        self.peek.as_ref().is_none_or(idle_peek::IdlePeek::quiet)
    }

    /// When bytes that just reached the probe arrived at the socket (the kernel's receive
    /// time on Linux, else the read's instant), not before `not_before`
    /// ([`stamp::ReadStamp::read_at`]); now when nothing was read yet.
    pub fn read_at(&self, not_before: Instant) -> Instant {
        self.stamp.read_at(not_before).unwrap_or_else(Instant::now)
    }

    /// Sends `req`. When it fails before the request was written, the error gives it back
    /// (hyper's [`TrySendError::take_message`]).
    pub fn send(
        &mut self,
        req: Request<ReqBody>,
    ) -> impl Future<Output = Result<Response<Incoming>, TrySendError<Request<ReqBody>>>> + use<>
    {
        self.sender.try_send_request(req)
    }
}

/// Connections: the TLS setup and the idle pool. Shared by reference; the pool's lock is
/// never held across an await.
pub struct Transport {
    tls: tokio_rustls::TlsConnector,
    pool: pool::Pool,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("idle", &self.pool.idle_count())
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// A transport trusting the webpki roots and the certificates in `extra_roots_pem` (PEM,
    /// any number, possibly none).
    ///
    /// # Errors
    /// `extra_roots_pem` holds a certificate that cannot be parsed or used as a root.
    pub fn new(extra_roots_pem: &[u8]) -> anyhow::Result<Transport> {
        // Receive timestamps on before the first connection (the kernel switches them on a
        // little after asking).
        #[cfg(target_os = "linux")]
        rx_stamp::keep_timestamping_on();
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in CertificateDer::pem_slice_iter(extra_roots_pem) {
            let cert = cert.map_err(|e| anyhow::anyhow!("extra root certificates: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("extra root certificate: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Transport {
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            pool: pool::Pool::default(),
        })
    }

    /// An idle pooled connection to `origin`, if one is usable.
    pub fn checkout(&self, origin: &Origin) -> Option<Conn> {
        self.pool.take(origin).map(|mut c| {
            c.reused = true;
            c
        })
    }

    /// A new connection to `origin`; `phases` receives each phase's duration as soon as that
    /// phase succeeds (so a caller that gives up on a deadline keeps the finished ones).
    ///
    /// # Errors
    /// What failed, without the URL: DNS, TCP connect, TLS handshake.
    pub async fn connect(&self, origin: &Origin, phases: &mut Phases) -> Result<Conn, String> {
        connect::connect(&self.tls, origin, phases).await
    }

    /// Returns a connection whose response body was read to its end: pooled once hyper says
    /// it is ready for another request (within a short wait), else dropped.
    pub async fn release(&self, mut conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, conn.sender.ready()).await {
            conn.reused = false;
            self.pool.put(conn);
        }
    }
}
