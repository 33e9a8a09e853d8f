//! Connection phases and reuse, over real loopback servers: the simulator, scripted raw-TCP
//! servers and a rustls server with a self-signed certificate for `localhost`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_sim::{ProviderProfile, RegionTable, SimConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::super::{ProbeRequest, ProbeResult, Prober};
use super::{Scheme, Target};

/// The simulator with a fast provider, a slow one (3 s TTFT) and one that always throttles.
async fn sim() -> SocketAddr {
    let cfg = SimConfig {
        seed: 1,
        profiles: vec![
            ProviderProfile::fixed("fast", 2_000, 200),
            ProviderProfile::fixed("slow", 3_000_000, 200),
            ProviderProfile {
                throttle_prob: 1.0,
                ..ProviderProfile::fixed("busy", 1_000, 200)
            },
        ],
        regions: RegionTable::default(),
        time_scale: 1.0,
        ..SimConfig::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
    addr
}

fn timeouts(connect: f64, ttft: f64) -> Timeouts {
    Timeouts {
        connect_s: connect,
        ttft_s: ttft,
        idle_s: 5.0,
        total_s: 10.0,
    }
}

async fn run(p: &Prober, base: &str, t: &Timeouts) -> ProbeResult {
    let msgs = vec![Message::new("user", "Say hi.")];
    let req = ProbeRequest {
        base_url: base,
        model_id: latmesh_sim::DEFAULT_MODEL_ID,
        api_key: Some("sk-transport-secret"),
        messages: &msgs,
        stream: true,
        max_tokens: 8,
        temperature: None,
        top_p: None,
        timeouts: t,
        probe_id: None,
        user_agent: None,
        shape: latmesh_core::api::RequestShape::chat_default(),
        secret_headers: &[],
    };
    p.probe(&req, true).await
}

fn phases(r: &ProbeRecord) -> (bool, Option<u64>, Option<u64>, Option<u64>) {
    (r.conn_reused, r.dns_us, r.connect_us, r.tls_us)
}

fn assert_new(r: &ProbeRecord, dns: bool, tls: bool) {
    assert!(!r.conn_reused, "{r:?}");
    assert_eq!(r.dns_us.is_some(), dns, "{r:?}");
    assert!(r.connect_us.is_some_and(|c| c > 0), "{r:?}");
    assert_eq!(r.tls_us.is_some_and(|c| c > 0), tls, "{r:?}");
}

#[tokio::test]
async fn new_then_reused_connection_to_the_simulator() {
    let addr = sim().await;
    let t = timeouts(2.0, 5.0);
    let p = Prober::new(None).unwrap();
    let base = format!("http://{addr}/fast/v1");
    let r = run(&p, &base, &t).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    // An IP literal needs no DNS.
    assert_new(&r.record, false, false);
    // The connection went back to the pool: TTFB then includes no connect.
    for _ in 0..2 {
        let r = run(&p, &base, &t).await;
        assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
        assert_eq!(phases(&r.record), (true, None, None, None));
    }
    // A host name is resolved, on a new prober's new connection.
    let p = Prober::new(None).unwrap();
    let r = run(&p, &format!("http://localhost:{}/fast/v1", addr.port()), &t).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_new(&r.record, true, false);
}

#[tokio::test]
async fn an_abandoned_response_does_not_give_its_connection_back() {
    let addr = sim().await;
    let p = Prober::new(None).unwrap();
    let fast = format!("http://{addr}/fast/v1");
    let r = run(&p, &fast, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    // Takes the pooled connection, then gives up on it before the first token.
    let r = run(&p, &format!("http://{addr}/slow/v1"), &timeouts(2.0, 0.2)).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::TimeoutTtft),
        "{:?}",
        r.record
    );
    assert_eq!(phases(&r.record), (true, None, None, None));
    let r = run(&p, &fast, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_new(&r.record, false, false);
    assert_eq!(p.transport.pool.idle_count(), 1);
}

#[tokio::test]
async fn an_error_response_read_to_its_end_keeps_the_connection() {
    let addr = sim().await;
    let p = Prober::new(None).unwrap();
    let busy = format!("http://{addr}/busy/v1");
    let r = run(&p, &busy, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Throttled), "{:?}", r.record);
    assert_new(&r.record, false, false);
    let r = run(&p, &busy, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Throttled), "{:?}", r.record);
    assert!(r.record.conn_reused, "{:?}", r.record);
}

/// Reads one request (headers and a Content-Length body); `false` at end of stream.
async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return false;
        }
        req.extend_from_slice(&buf[..n]);
        if let Some(h) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            let headers = String::from_utf8_lossy(&req[..h]).to_ascii_lowercase();
            let len: usize = headers
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if req.len() >= h + 4 + len {
                return true;
            }
        }
    }
}

/// A complete, keep-alive SSE answer.
fn sse_response() -> Vec<u8> {
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers every request on `s` with [`sse_response`]; after the first when `close_after`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, close_after: bool) {
    while read_request(&mut s).await {
        if s.write_all(&sse_response()).await.is_err() {
            return;
        }
        let _ = s.flush().await;
        if close_after {
            tokio::time::sleep(Duration::from_millis(20)).await;
            break;
        }
    }
    let _ = s.shutdown().await;
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(answer(s, true));
        }
    });
    let p = Prober::new(None).unwrap();
    let base = format!("http://{addr}/v1");
    let r = run(&p, &base, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_eq!(p.transport.pool.idle_count(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = run(&p, &base, &timeouts(2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_new(&r.record, false, false);
}

/// What a scripted server does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    /// A complete keep-alive answer ([`sse_response`]).
    Answer,
    /// Closes the connection (FIN) without a byte of response.
    Close,
    /// Closes it with a TCP reset, without a byte of response.
    Reset,
    /// The first bytes of a status line, then a close.
    PartialHead,
    /// The head and the first event of the body, then a close.
    PartialBody,
}

/// A server whose `c`-th connection (0-based, in accept order) does `act(c, r)` with its
/// `r`-th request (0-based on that connection), keeping the connection after `Answer` only
/// (whatever the response said: it advertises keep-alive). Returns a new prober, the
/// server's base URL and the count of connections it accepted.
async fn scripted(act: fn(usize, usize) -> Act) -> (Prober, String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let c = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut r = 0;
                while read_request(&mut s).await {
                    let whole = sse_response();
                    let head_end = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                    let bytes = match act(c, r) {
                        Act::Answer => &whole[..],
                        Act::Close => &[][..],
                        Act::Reset => {
                            // A zero linger makes the close a reset (and does not block).
                            #[allow(deprecated)]
                            let _ = s.set_linger(Some(Duration::ZERO));
                            return;
                        }
                        Act::PartialHead => &whole[..11],
                        Act::PartialBody => {
                            let event = whole[head_end..].windows(2).position(|w| w == b"\n\n");
                            &whole[..head_end + event.unwrap() + 2]
                        }
                    };
                    if s.write_all(bytes).await.is_err() || act(c, r) != Act::Answer {
                        break;
                    }
                    r += 1;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    (
        Prober::new(None).unwrap(),
        format!("http://{addr}/v1"),
        accepted,
    )
}

/// A server that closes each connection after one response although it says keep-alive
/// (llama-server): the request that finds the pooled connection closed before any response
/// byte (FIN or reset) is sent again at once on a new connection, recorded, and is `ok`.
#[tokio::test]
async fn a_pooled_connection_closed_before_the_response_is_retried_on_a_new_one() {
    let fin: fn(usize, usize) -> Act = |_, r| if r == 0 { Act::Answer } else { Act::Close };
    let reset: fn(usize, usize) -> Act = |_, r| if r == 0 { Act::Answer } else { Act::Reset };
    for (close, act) in [("fin", fin), ("reset", reset)] {
        let (p, base, accepted) = scripted(act).await;
        let t = timeouts(2.0, 5.0);
        assert_eq!(how(&run(&p, &base, &t).await.record), OK_NEW, "{close}");
        for i in 2..=4 {
            let r = run(&p, &base, &t).await.record;
            assert_eq!(how(&r), (Some(Outcome::Ok), false, true), "{close} {r:?}");
            // The phases are the new connection's; TTFB includes the failed try and them.
            assert_new(&r, false, false);
            assert!(r.ttfb_us.unwrap() >= r.connect_us.unwrap(), "{r:?}");
            let n = accepted.load(Ordering::SeqCst);
            assert_eq!(n, i, "{close}: one new connection per request");
        }
    }
}

/// A pooled connection the server closed while it was idle is not reused when the close
/// reached the socket, even before hyper's connection task has run to see it (this
/// runtime has one thread, blocked while the FIN arrives): no request is lost on it, so
/// none needs the retry.
#[tokio::test]
async fn a_close_on_the_idle_socket_is_seen_before_reuse() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let (close_tx, close_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for c in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 8192];
            let mut req = Vec::new();
            while !req.windows(4).any(|w| w == b"\r\n\r\n") || !req.ends_with(b"}") {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "request cut short");
                req.extend_from_slice(&buf[..n]);
            }
            s.write_all(&sse_response()).unwrap();
            if c == 0 {
                close_rx.recv().unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                closed_tx.send(()).unwrap();
            }
            kept.push(s);
        }
    });
    let p = Prober::new(None).unwrap();
    let base = format!("http://{addr}/v1");
    let t = timeouts(2.0, 5.0);
    assert_eq!(how(&run(&p, &base, &t).await.record), OK_NEW);
    close_tx.send(()).unwrap();
    // Blocks the runtime's only thread: hyper's task cannot run while the FIN arrives
    // (on loopback it is delivered by the shutdown call itself; the wait is a margin).
    closed_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let r = run(&p, &base, &t).await.record;
    assert_eq!(how(&r), OK_NEW, "{r:?}");
    server.join().unwrap();
}

/// `(outcome, conn_reused, conn_retried)` of a record.
fn how(r: &ProbeRecord) -> (Option<Outcome>, bool, bool) {
    (r.outcome, r.conn_reused, r.conn_retried)
}

const OK_NEW: (Option<Outcome>, bool, bool) = (Some(Outcome::Ok), false, false);

/// Once a byte of the response arrived, a close is the provider's fault: not retried.
#[tokio::test]
async fn a_close_after_response_bytes_is_the_providers_error() {
    let (p, base, accepted) = scripted(|c, r| match (c, r) {
        (_, 0) => Act::Answer,
        (0, _) => Act::PartialHead,
        _ => Act::PartialBody,
    })
    .await;
    let t = timeouts(2.0, 5.0);
    assert_eq!(how(&run(&p, &base, &t).await.record), OK_NEW);
    // Part of a status line on the pooled connection, then a close.
    let r = run(&p, &base, &t).await.record;
    let failed = (Some(Outcome::ConnectionError), true, false);
    assert_eq!(how(&r), failed, "{r:?}");
    assert_eq!(how(&run(&p, &base, &t).await.record), OK_NEW);
    // The head and a token, then a close.
    let r = run(&p, &base, &t).await.record;
    assert!(r.ttft_us.is_some(), "{r:?}");
    assert_eq!(how(&r), (Some(Outcome::Truncated), true, false), "{r:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "no connection for a retry"
    );
}

/// A new connection that fails is never retried: neither the first one of a request nor
/// the one a retry opened.
#[tokio::test]
async fn a_new_connection_is_never_retried() {
    let (p, base, accepted) = scripted(|c, r| {
        if (c, r) == (0, 0) {
            Act::Answer
        } else {
            Act::Close
        }
    })
    .await;
    let t = timeouts(2.0, 5.0);
    assert_eq!(how(&run(&p, &base, &t).await.record), OK_NEW);
    // Pooled connection closed → retried once on a new one, which closes too.
    let r = run(&p, &base, &t).await.record;
    assert_eq!(
        how(&r),
        (Some(Outcome::ConnectionError), false, true),
        "{r:?}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    // Nothing pooled: a new connection, closed, not retried.
    let r = run(&p, &base, &t).await.record;
    assert_eq!(
        how(&r),
        (Some(Outcome::ConnectionError), false, false),
        "{r:?}"
    );
    let msg = r.error_message.unwrap();
    assert!(
        msg.contains("connection closed before message completed"),
        "{msg}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_refused_connection_still_has_its_dns_time() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let p = Prober::new(None).unwrap();
    let r = run(
        &p,
        &format!("http://localhost:{port}/v1"),
        &timeouts(2.0, 5.0),
    )
    .await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::ConnectionError),
        "{:?}",
        r.record
    );
    assert!(r.record.dns_us.is_some(), "{:?}", r.record);
    assert_eq!((r.record.connect_us, r.record.tls_us), (None, None));
    assert!(!r.record.conn_retried, "a new connection is not retried");
    let msg = r.record.error_message.unwrap();
    assert!(msg.contains("tcp connect error"), "{msg}");
}

/// A TLS server for `localhost` with a fresh self-signed certificate; returns its port and
/// the certificate (PEM).
async fn tls_server() -> (u16, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let pem = ck.cert.pem();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key.into())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(s).await {
                    answer(tls, false).await;
                }
            });
        }
    });
    (port, pem)
}

#[tokio::test]
async fn tls_handshake_is_timed_and_its_connection_reused() {
    let (port, pem) = tls_server().await;
    let base = format!("https://localhost:{port}/v1");
    let t = timeouts(2.0, 5.0);
    let p = Prober::with_root_certificates(Some("eu-west"), pem.as_bytes()).unwrap();
    let r = run(&p, &base, &t).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_eq!(r.content_text, "hi");
    assert_new(&r.record, true, true);
    let r = run(&p, &base, &t).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_eq!(phases(&r.record), (true, None, None, None));
}

#[tokio::test]
async fn a_private_ca_file_is_trusted_and_a_file_without_certificates_is_refused() {
    let (port, pem) = tls_server().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pem).unwrap();
    let p = Prober::with_root_certificate_file(None, Some(&ca)).unwrap();
    let r = run(
        &p,
        &format!("https://localhost:{port}/v1"),
        &timeouts(2.0, 5.0),
    )
    .await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);

    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = Prober::with_root_certificate_file(None, Some(&empty)).unwrap_err();
    assert!(
        format!("{e:#}").contains("empty.pem holds no PEM certificate"),
        "{e:#}"
    );
    let e =
        Prober::with_root_certificate_file(None, Some(&dir.path().join("gone.pem"))).unwrap_err();
    assert!(
        format!("{e:#}").contains("cannot read the CA file"),
        "{e:#}"
    );
}

#[tokio::test]
async fn https_to_a_plain_http_server_says_it_may_be_plain_http() {
    let addr = sim().await;
    let p = Prober::new(None).unwrap();
    let r = run(&p, &format!("https://{addr}/v1"), &timeouts(2.0, 5.0)).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::ConnectionError),
        "{:?}",
        r.record
    );
    let msg = r.record.error_message.unwrap();
    assert!(msg.contains("tls handshake error"), "{msg}");
    assert!(msg.contains("plain http"), "{msg}");
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_connection_error_after_connect() {
    let (port, _pem) = tls_server().await;
    let p = Prober::new(None).unwrap();
    let r = run(
        &p,
        &format!("https://localhost:{port}/v1"),
        &timeouts(2.0, 5.0),
    )
    .await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::ConnectionError),
        "{:?}",
        r.record
    );
    let msg = r.record.error_message.clone().unwrap();
    assert!(msg.contains("certificate"), "{msg}");
    assert!(msg.contains("--provider-ca-file"), "says what to do: {msg}");
    assert!(!msg.contains("sk-transport-secret"), "{msg}");
    assert!(
        r.record.dns_us.is_some() && r.record.connect_us.is_some(),
        "{:?}",
        r.record
    );
    assert_eq!((r.record.conn_reused, r.record.tls_us), (false, None));
}

#[tokio::test]
async fn a_tls_handshake_that_never_completes_is_a_connect_timeout() {
    // Accepts TCP connections and never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let p = Prober::new(None).unwrap();
    let t0 = Instant::now();
    let r = run(&p, &format!("https://{addr}/v1"), &timeouts(0.3, 5.0)).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::TimeoutConnect),
        "{:?}",
        r.record
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(
        r.record.error_message.as_deref(),
        Some("connect timeout (0.3 s)")
    );
    assert!(r.record.connect_us.is_some(), "{:?}", r.record);
    assert_eq!((r.record.dns_us, r.record.tls_us), (None, None));
    // A TTFT timeout shorter than the connect timeout names the TTFT.
    let r = run(&p, &format!("https://{addr}/v1"), &timeouts(5.0, 0.2)).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::TimeoutTtft),
        "{:?}",
        r.record
    );
}

#[test]
fn targets() {
    let t = Target::parse("https://api.example.com/v1/chat/completions").unwrap();
    assert_eq!(
        (t.origin.scheme, t.origin.host.as_str(), t.origin.port),
        (Scheme::Https, "api.example.com", 443)
    );
    assert_eq!(
        (t.host_header.to_str().unwrap(), t.path.to_string().as_str()),
        ("api.example.com", "/v1/chat/completions")
    );
    let t = Target::parse("http://[::1]:8080/x?a=b").unwrap();
    assert_eq!((t.origin.host.as_str(), t.origin.port), ("::1", 8080));
    assert_eq!(t.origin.ip(), Some("::1".parse().unwrap()));
    assert_eq!(t.host_header, "[::1]:8080");
    assert_eq!(t.path, "/x?a=b");
    let t = Target::parse("http://Example.COM").unwrap();
    assert_eq!((t.origin.host.as_str(), t.origin.port), ("example.com", 80));
    assert_eq!(t.path, "/");
    assert!(Target::parse("ftp://h/v1").unwrap_err().contains("scheme"));
    assert!(Target::parse("/v1/chat").is_err());
    assert!(Target::parse("http://h /v1").is_err());
}

#[test]
fn bad_extra_roots_are_refused() {
    let bad = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(Prober::with_root_certificates(None, bad).is_err());
    assert!(Prober::with_root_certificates(None, b"").is_ok());
}
