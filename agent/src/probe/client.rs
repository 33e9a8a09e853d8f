//! [`Prober`]: the HTTP side of a probe (reqwest), its deadlines, and the hand-off of every
//! body read to the [`Measurement`].

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use latmesh_core::record::Outcome;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use super::chunk::ProviderError;
use super::measure::{Flow, Head, Measurement};
use super::outcome::{
    BodyEnd, Failure, Scrubber, parse_retry_after, timeout_message, transport_message,
};
use super::{ProbeRequest, ProbeResult, request};

/// Header carrying the agent's region (the simulator keys its network delay on it).
pub const REGION_HEADER: &str = "x-latmesh-region";

/// After `[DONE]`, how long the rest of the body is awaited (so the connection can go back to
/// the pool) before it is dropped.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Bytes of an error response body read for its error object.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends probes. Cheap to share (`&Prober` from many tasks); connections are pooled.
///
/// reqwest's connect timeout is a property of a client, so one client is kept per distinct
/// connect timeout seen (in practice one per campaign); all share the default headers.
#[derive(Debug)]
pub struct Prober {
    default_headers: HeaderMap,
    clients: Mutex<Vec<(Option<Duration>, reqwest::Client)>>,
}

/// `s` seconds as a duration; `None` (no limit) for zero, negative or non-finite values.
fn secs(s: f64) -> Option<Duration> {
    if s.is_finite() && s > 0.0 {
        Duration::try_from_secs_f64(s).ok()
    } else {
        None
    }
}

/// The earliest of the candidate deadlines; on ties the first listed wins.
fn earliest<T: Copy>(candidates: &[Option<(Instant, T)>]) -> Option<(Instant, T)> {
    let mut best: Option<(Instant, T)> = None;
    for c in candidates.iter().flatten() {
        if best.is_none_or(|b| c.0 < b.0) {
            best = Some(*c);
        }
    }
    best
}

/// `f`, unless `deadline` passes first (`None`).
async fn within<F: Future>(deadline: Option<Instant>, f: F) -> Option<F::Output> {
    match deadline {
        None => Some(f.await),
        Some(d) => tokio::time::timeout_at(d.into(), f).await.ok(),
    }
}

fn unix_us_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The failure of a request that got no response.
fn send_failure(e: reqwest::Error) -> Failure {
    let outcome = if e.is_connect() && e.is_timeout() {
        Outcome::TimeoutConnect
    } else if e.is_timeout() {
        Outcome::TimeoutTotal
    } else {
        Outcome::ConnectionError
    };
    Failure::new(outcome, transport_message(&e.without_url()))
}

impl Prober {
    /// A prober whose requests carry `x-latmesh-region: {region}` when `region` is given.
    ///
    /// # Errors
    /// `region` is not a valid header value, or the HTTP client cannot be built (TLS setup).
    pub fn new(region: Option<&str>) -> anyhow::Result<Prober> {
        let mut default_headers = HeaderMap::new();
        if let Some(r) = region {
            let v = HeaderValue::from_str(r)
                .with_context(|| format!("region {r:?} is not a valid header value"))?;
            default_headers.insert(HeaderName::from_static(REGION_HEADER), v);
        }
        let p = Prober {
            default_headers,
            clients: Mutex::new(Vec::new()),
        };
        p.client(secs(latmesh_core::plan::Timeouts::default().connect_s))
            .context("building the HTTP client")?;
        Ok(p)
    }

    fn client(&self, connect: Option<Duration>) -> reqwest::Result<reqwest::Client> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = clients.iter().find(|(t, _)| *t == connect) {
            return Ok(c.clone());
        }
        let mut b = reqwest::Client::builder()
            .default_headers(self.default_headers.clone())
            .user_agent(concat!("latmesh/", env!("CARGO_PKG_VERSION")))
            // A redirected POST would be measured as another request: report it instead.
            .redirect(reqwest::redirect::Policy::none())
            // Latency is measured on the direct path, never through an environment proxy.
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90));
        if let Some(c) = connect {
            b = b.connect_timeout(c);
        }
        let c = b.build()?;
        clients.push((connect, c.clone()));
        Ok(c)
    }

    /// Sends `req` and measures it. Never fails: every path yields a record with an outcome
    /// (see the [module documentation](super) for timing, timeouts and outcomes). Texts are
    /// kept only with `keep_text`.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the attempt and yields no record; callers that must
    /// account for every attempt should rely on the timeouts instead.
    pub async fn probe(&self, req: &ProbeRequest<'_>, keep_text: bool) -> ProbeResult {
        let scrub = Scrubber {
            api_key: req.api_key,
            prompt: req.messages,
        };
        let t = req.timeouts;
        let built = self.client(secs(t.connect_s)).and_then(|client| {
            let r = client
                .post(request::url(req.base_url))
                .headers(request::headers(req))
                .body(request::body(req))
                .build()?;
            Ok((client, r))
        });
        let send_unix_us = unix_us_now();
        let t_send = Instant::now();
        let mut head = Head {
            stream: req.stream,
            t_send,
            send_unix_us,
            http_status: None,
            ttfb_at: None,
            retry_after_s: None,
        };
        let (client, http_req) = match built {
            Ok(x) => x,
            Err(e) => {
                let msg = format!(
                    "cannot build the request: {}",
                    transport_message(&e.without_url())
                );
                return head.failed(Failure::new(Outcome::ConnectionError, msg), &scrub, 0, None);
            }
        };
        // t_send again, right before the request is handed to reqwest.
        head.send_unix_us = unix_us_now();
        let t_send = Instant::now();
        head.t_send = t_send;
        let pending = client.execute(http_req);

        let total = secs(t.total_s).map(|d| (t_send + d, Outcome::TimeoutTotal));
        let ttft = if req.stream {
            secs(t.ttft_s).map(|d| (t_send + d, Outcome::TimeoutTtft))
        } else {
            None
        };
        let idle = secs(t.idle_s);

        let head_deadline = earliest(&[ttft, total]);
        let mut resp = match within(head_deadline.map(|d| d.0), pending).await {
            Some(Ok(r)) => r,
            Some(Err(e)) => return head.failed(send_failure(e), &scrub, 0, None),
            None => {
                let o = head_deadline.map_or(Outcome::TimeoutTotal, |d| d.1);
                return head.failed(Failure::new(o, timeout_message(o)), &scrub, 0, None);
            }
        };
        let ttfb_at = Instant::now();
        head.ttfb_at = Some(ttfb_at);
        let status = resp.status().as_u16();
        head.http_status = Some(status);
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };

        if !(200..300).contains(&status) {
            if status >= 400 {
                head.retry_after_s = parse_retry_after(
                    header("retry-after").as_deref(),
                    header("retry-after-ms").as_deref(),
                    SystemTime::now(),
                );
            }
            return error_response(&mut resp, head, &scrub, ttfb_at, total, idle).await;
        }

        let content_type = header(CONTENT_TYPE.as_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let whole = !content_type.contains("event-stream")
            && (content_type.contains("json") || !req.stream);
        let mut m = Measurement::new(t_send, keep_text, whole, req.stream, req.max_tokens);
        let mut last_read = ttfb_at;
        let (end, end_at) = loop {
            let timeout = earliest(&[
                ttft.filter(|_| m.waiting_for_first_token()),
                idle.map(|d| (last_read + d, Outcome::TimeoutIdle)),
                total,
            ])
            .map(|(at, o)| (at, Some(o)));
            let deadline = earliest(&[m.done_at().map(|d| (d + DRAIN_GRACE, None)), timeout]);
            match within(deadline.map(|d| d.0), resp.chunk()).await {
                Some(Ok(Some(bytes))) => {
                    // Stamped before any parsing.
                    let at = Instant::now();
                    last_read = at;
                    if m.on_bytes(at, &bytes) == Flow::Stop {
                        break (BodyEnd::Stopped, Some(at));
                    }
                }
                Some(Ok(None)) => break (BodyEnd::Eof, Some(Instant::now())),
                Some(Err(e)) => {
                    let at = Instant::now();
                    m.note_broken(transport_message(&e.without_url()));
                    break (BodyEnd::Broken, Some(at));
                }
                None => match deadline.and_then(|d| d.1) {
                    Some(o) if !m.saw_done() => break (BodyEnd::TimedOut(o), None),
                    _ => break (BodyEnd::Stopped, None),
                },
            }
        };
        m.on_end(end_at.unwrap_or_else(Instant::now), end);
        m.finish(&head, end, end_at, &scrub)
    }
}

/// Reads (up to 64 KiB of) a non-2xx body for its error object and builds the result.
async fn error_response(
    resp: &mut reqwest::Response,
    head: Head,
    scrub: &Scrubber<'_>,
    ttfb_at: Instant,
    total: Option<(Instant, Outcome)>,
    idle: Option<Duration>,
) -> ProbeResult {
    let status = head.http_status.unwrap_or_default();
    let mut body = Vec::new();
    let mut bytes = 0u64;
    let mut last_read = ttfb_at;
    let mut end_at = None;
    loop {
        let deadline = earliest(&[idle.map(|d| (last_read + d, Outcome::TimeoutIdle)), total]);
        match within(deadline.map(|d| d.0), resp.chunk()).await {
            Some(Ok(Some(b))) => {
                last_read = Instant::now();
                bytes += b.len() as u64;
                let room = MAX_ERROR_BODY - body.len();
                body.extend_from_slice(&b[..b.len().min(room)]);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
            Some(Ok(None)) => {
                end_at = Some(Instant::now());
                break;
            }
            // The status already says what happened; a body we cannot finish adds nothing.
            Some(Err(_)) | None => break,
        }
    }
    let pe = ProviderError::from_payload(&body);
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let failure = if status >= 400 {
        Failure {
            outcome: Outcome::from_http_status(status),
            error_type: pe.kind.or(pe.code.clone()),
            error_code: pe.code,
            message: pe
                .message
                .unwrap_or_else(|| format!("HTTP {status} {reason}").trim_end().to_string()),
        }
    } else {
        Failure::new(
            Outcome::ProtocolError,
            format!("unexpected HTTP status {status} {reason} (redirects are not followed)"),
        )
    };
    head.failed(failure, scrub, bytes, end_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines() {
        let t = Instant::now();
        let a = Some((t + Duration::from_secs(2), 'a'));
        let b = Some((t + Duration::from_secs(1), 'b'));
        let c = Some((t + Duration::from_secs(1), 'c'));
        assert_eq!(earliest(&[a, b, c]).unwrap().1, 'b');
        assert_eq!(earliest::<char>(&[None, None]), None);
        assert_eq!(secs(0.0), None);
        assert_eq!(secs(f64::NAN), None);
        assert_eq!(secs(1.5), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn bad_region_is_refused() {
        assert!(Prober::new(Some("eu\nwest")).is_err());
        assert!(Prober::new(Some("eu-west")).is_ok());
        assert!(Prober::new(None).is_ok());
    }
}
