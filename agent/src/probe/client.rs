//! [`Prober`]: one probe's deadlines over the `transport` module (its own
//! HTTP/1.1 connections, with timed phases), and the hand-off of every body read to the
//! [`Measurement`].

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, HOST, HeaderValue, USER_AGENT};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::{Body as _, Incoming};
use latmesh_core::record::Outcome;

use super::chunk::ProviderError;
use super::content_encoding::BodyDecoder;
use super::emulation::Emulation;
use super::measure::{BodyStamps, Flow, Head, Measurement};
use super::outcome::{
    BodyEnd, Failure, Scrubber, parse_retry_after, timeout_limit_s, timeout_message,
};
use super::transport::{Conn, Phases, ReqBody, Target, Transport};
use super::{ProbeOptions, ProbeRequest, ProbeResult, request};
use latmesh_core::error_text::chain as error_chain;

/// After `[DONE]`, how long the rest of the body is awaited (so the connection can go back to
/// the pool) before it is dropped.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// Bytes of an error response body read for its error object.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Sends probes. Cheap to share (`&Prober` from many tasks); connections are pooled per
/// origin (see the `transport` module).
#[derive(Debug)]
pub struct Prober {
    /// The region a simulator is told (`x-latmesh-region`), when emulating one.
    region: Option<HeaderValue>,
    pub(super) transport: Transport,
}

/// How sending on one connection failed.
enum SendFail {
    /// A deadline passed first.
    Timeout(Failure),
    /// The connection failed (the error chain); `before_response`: before any byte of the
    /// response arrived.
    Broken {
        error: String,
        before_response: bool,
    },
}

/// A copy of `r` to send again: method, target, headers (a sensitive value stays
/// sensitive) and body (the same bytes, shared).
fn copy_request(r: &Request<ReqBody>) -> Request<ReqBody> {
    let mut c = Request::new(r.body().clone());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.headers_mut() = r.headers().clone();
    c
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

/// The failure named by a deadline that passed (`TimeoutTotal` when there was none).
fn timed_out(deadline: Option<(Instant, Outcome)>) -> Failure {
    let o = deadline.map_or(Outcome::TimeoutTotal, |d| d.1);
    Failure::new(o, timeout_message(o))
}

/// The deadlines of one attempt, all from `t_send`.
#[derive(Clone, Copy, Debug)]
struct Deadlines {
    /// Connect timeout (DNS + TCP + TLS of a new connection).
    connect: Option<(Instant, Outcome)>,
    /// TTFT timeout (streaming requests only).
    ttft: Option<(Instant, Outcome)>,
    /// Total timeout.
    total: Option<(Instant, Outcome)>,
    /// Idle timeout (a gap between body reads).
    idle: Option<Duration>,
}

impl Prober {
    /// A prober. With `region` it emulates that region for a simulator: its requests to a
    /// loopback peer carry `x-latmesh-region: {region}` (never to another host, see
    /// [`emulation_headers`](super::emulation_headers)). Real providers get no latmesh header
    /// in any case.
    ///
    /// # Errors
    /// `region` is not a valid header value, or TLS cannot be set up.
    pub fn new(region: Option<&str>) -> anyhow::Result<Prober> {
        Self::with_root_certificates(region, &[])
    }

    /// Like [`Prober::new`], also trusting the root certificates in `extra_roots_pem` (PEM;
    /// e.g. a test CA, or a private CA in front of a self-hosted server).
    ///
    /// # Errors
    /// `region` is not a valid header value, or a certificate cannot be used.
    pub fn with_root_certificates(
        region: Option<&str>,
        extra_roots_pem: &[u8],
    ) -> anyhow::Result<Prober> {
        let region = region
            .map(|r| {
                HeaderValue::from_str(r)
                    .with_context(|| format!("region {r:?} is not a valid header value"))
            })
            .transpose()?;
        let transport = Transport::new(extra_roots_pem).context("setting up TLS")?;
        Ok(Prober { region, transport })
    }

    /// Like [`Prober::with_root_certificates`], with the extra roots read from the PEM file
    /// `ca_file` (`None`: the public webpki roots only).
    ///
    /// # Errors
    /// The file cannot be read or holds no usable certificate (the message names the file),
    /// or `region` is not a valid header value.
    pub fn with_root_certificate_file(
        region: Option<&str>,
        ca_file: Option<&std::path::Path>,
    ) -> anyhow::Result<Prober> {
        let Some(path) = ca_file else {
            return Self::new(region);
        };
        let pem = crate::tls::read_ca_file(path)?;
        Self::with_root_certificates(region, &pem)
            .with_context(|| format!("the CA file {}", path.display()))
    }

    /// The request for `req` (without the emulation headers, which depend on the
    /// connection), where it goes and the emulation headers it may carry.
    fn build(
        &self,
        req: &ProbeRequest<'_>,
    ) -> Result<(Target, Request<ReqBody>, Emulation), String> {
        let target = Target::parse(&request::target_url(req))?;
        let mut r = Request::new(ReqBody::new(Bytes::from(request::body(req))));
        *r.method_mut() = Method::POST;
        *r.uri_mut() = target.path.clone();
        let ua = req
            .user_agent
            .unwrap_or(request::default_user_agent(req.shape.api));
        let ua = HeaderValue::from_str(ua)
            .map_err(|_| format!("the user agent {ua:?} is not a valid header value"))?;
        let h = r.headers_mut();
        h.insert(HOST, target.host_header.clone());
        h.insert(USER_AGENT, ua);
        h.extend(request::headers(req));
        let emulation = Emulation {
            region: self.region.clone(),
            probe_id: req.probe_id.and_then(|id| HeaderValue::from_str(id).ok()),
        };
        Ok((target, r, emulation))
    }

    /// Sends `req` and measures it. Never fails: every path yields a record with an outcome
    /// and the connection phases (see the [module documentation](super) for timing,
    /// timeouts and outcomes). Texts are kept only with `keep_text`.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the attempt and yields no record; callers that must
    /// account for every attempt should rely on the timeouts instead.
    pub async fn probe(&self, req: &ProbeRequest<'_>, keep_text: bool) -> ProbeResult {
        let opts = ProbeOptions {
            keep_text,
            ..ProbeOptions::default()
        };
        self.probe_with(req, opts).await
    }

    /// [`Prober::probe`], keeping what `opts` asks for (texts, the read instant of every
    /// token-bearing payload).
    ///
    /// # Cancel safety
    /// As [`Prober::probe`].
    pub async fn probe_with(&self, req: &ProbeRequest<'_>, opts: ProbeOptions) -> ProbeResult {
        let mut phases = Phases::default();
        let mut r = self.attempt(req, opts, &mut phases).await;
        phases.apply(&mut r.record);
        r.record.usage_requested = request::usage_requested(req);
        // A timeout's message names the limit that passed: "… TTFT timeout (60 s)".
        if let (Some(o), Some(m)) = (r.record.outcome, r.record.error_message.as_mut())
            && let Some(limit_s) = timeout_limit_s(o, req.timeouts)
        {
            m.push_str(&format!(" ({limit_s} s)"));
        }
        r
    }

    async fn attempt(
        &self,
        req: &ProbeRequest<'_>,
        opts: ProbeOptions,
        phases: &mut Phases,
    ) -> ProbeResult {
        super::progress::attempt_started();
        let scrub = Scrubber {
            api_key: req.api_key,
            prompt: req.messages,
            secrets: req.secret_headers,
        };
        let t = req.timeouts;
        let built = self.build(req);
        let mut head = Head {
            stream: req.stream,
            t_send: Instant::now(),
            send_unix_us: unix_us_now(),
            http_status: None,
            ttfb_at: None,
            retry_after_s: None,
        };
        let (target, http_req, emulation) = match built {
            Ok(x) => x,
            Err(e) => {
                let msg = format!("cannot build the request: {e}");
                return head.failed(Failure::new(Outcome::ConnectionError, msg), &scrub, 0, None);
            }
        };
        // t_send: right before a connection is taken from the pool or opened.
        head.send_unix_us = unix_us_now();
        let t_send = Instant::now();
        head.t_send = t_send;
        let dl = Deadlines {
            connect: secs(t.connect_s).map(|d| (t_send + d, Outcome::TimeoutConnect)),
            ttft: if req.stream {
                secs(t.ttft_s).map(|d| (t_send + d, Outcome::TimeoutTtft))
            } else {
                None
            },
            total: secs(t.total_s).map(|d| (t_send + d, Outcome::TimeoutTotal)),
            idle: secs(t.idle_s),
        };

        let (conn, resp) = match self.send(&target, http_req, &emulation, phases, &dl).await {
            Ok(x) => x,
            Err(f) => return head.failed(f, &scrub, 0, None),
        };
        // The read that completed the response head.
        let ttfb_at = conn.read_at(t_send);
        head.ttfb_at = Some(ttfb_at);
        let (parts, mut body) = resp.into_parts();
        let status = parts.status.as_u16();
        head.http_status = Some(status);
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };

        if !(200..300).contains(&status) {
            if status >= 400 {
                let (after, after_ms) = (header("retry-after"), header("retry-after-ms"));
                head.retry_after_s =
                    parse_retry_after(after.as_deref(), after_ms.as_deref(), SystemTime::now())
                        // A Retry-After sent but unusable (`soon`, `-1`, `NaN`): NaN, which
                        // the record's bounds drop and name in `cut_fields`.
                        .or_else(|| (after.is_some() || after_ms.is_some()).then_some(f64::NAN));
            }
            let decoder = BodyDecoder::for_header(
                parts
                    .headers
                    .get(CONTENT_ENCODING)
                    .map(HeaderValue::as_bytes),
            );
            let (result, complete) = error_response(
                &mut body,
                decoder,
                &conn,
                head,
                &scrub,
                ttfb_at,
                (dl.total, dl.idle),
            )
            .await;
            if complete {
                drop(body);
                self.transport.release(conn).await;
            }
            return result;
        }

        let content_type = header(CONTENT_TYPE.as_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let whole = !content_type.contains("event-stream")
            && (content_type.contains("json") || !req.stream);
        let encoding = parts
            .headers
            .get(CONTENT_ENCODING)
            .map(HeaderValue::as_bytes);
        let mut m = Measurement::new(t_send, opts.keep_text, whole, req.stream, req.max_tokens)
            .with_api(req.shape.api)
            .with_reasoning_tags(req.shape.reasoning_tags.as_ref())
            .with_content_encoding(encoding);
        if opts.keep_timestamps {
            m = m.with_timestamps(req.max_tokens);
        }
        if let Some(n) = opts.max_response_bytes {
            m = m.with_max_body_bytes(n);
        }
        let mut last_read = ttfb_at;
        // One timer for the whole body, armed at the earliest deadline and moved only when
        // the deadline comes earlier (after `[DONE]`). The idle deadline moves later with
        // every read: the timer is left where it is and, when it fires, the deadlines are
        // checked again and it is re-armed if none has passed. (A timer per read would be
        // registered and removed again for every frame.)
        let timer = tokio::time::sleep_until(ttfb_at.into());
        tokio::pin!(timer);
        let mut armed: Option<Instant> = None;
        let mut first_token_told = false;
        let (end, end_at) = loop {
            let timeout = earliest(&[
                dl.ttft.filter(|_| m.waiting_for_first_token()),
                dl.idle.map(|d| (last_read + d, Outcome::TimeoutIdle)),
                dl.total,
            ])
            .map(|(at, o)| (at, Some(o)));
            let deadline = earliest(&[m.done_at().map(|d| (d + DRAIN_GRACE, None)), timeout]);
            match deadline {
                Some((at, _)) if armed.is_none_or(|a| at < a) => {
                    timer.as_mut().reset(at.into());
                    armed = Some(at);
                }
                _ => {}
            }
            let next = std::future::poll_fn(|cx| {
                // The body first: a frame that is there wins over a deadline that passed.
                if let Poll::Ready(f) = Pin::new(&mut body).poll_frame(cx) {
                    return Poll::Ready(Some(f));
                }
                if armed.is_some() && timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await;
            let next = match next {
                Some(f) => Some(f),
                // The timer fired: a deadline passed, or it was armed for one that has
                // moved since (then it is armed again).
                None => match deadline {
                    Some((at, _)) if Instant::now() < at => {
                        timer.as_mut().reset(at.into());
                        armed = Some(at);
                        continue;
                    }
                    Some(_) => None,
                    None => {
                        armed = None;
                        continue;
                    }
                },
            };
            match next {
                Some(Some(Ok(frame))) => {
                    // Stamped before any parsing: when the socket read that brought the
                    // frame got its bytes (never before the previous frame's stamp).
                    let at = conn.read_at(last_read);
                    // Anything but data (trailers) carries nothing to measure.
                    let Ok(bytes) = frame.into_data() else {
                        continue;
                    };
                    if bytes.is_empty() {
                        continue;
                    }
                    last_read = at;
                    let flow = m.on_bytes(at, &bytes);
                    if !first_token_told && !m.waiting_for_first_token() {
                        first_token_told = true;
                        super::progress::first_token_decided();
                    }
                    if flow == Flow::Stop {
                        break (BodyEnd::Stopped, Some(at));
                    }
                }
                Some(None) => break (BodyEnd::Eof, Some(Instant::now())),
                Some(Some(Err(e))) => {
                    let at = Instant::now();
                    m.note_broken(error_chain(&e));
                    break (BodyEnd::Broken, Some(at));
                }
                None => match deadline.and_then(|d| d.1) {
                    Some(o) if !m.saw_done() => break (BodyEnd::TimedOut(o), None),
                    _ => break (BodyEnd::Stopped, None),
                },
            }
        };
        m.on_end(end_at.unwrap_or_else(Instant::now), end);
        let result = m.finish(&head, end, end_at, &scrub);
        if end == BodyEnd::Eof {
            drop(body);
            self.transport.release(conn).await;
        }
        // Otherwise the response was abandoned: dropping `conn` closes its connection.
        result
    }

    /// Takes a pooled connection or opens one (within the connect deadline), sends the
    /// request on it and waits for the response head (within the TTFT and total deadlines).
    ///
    /// A pooled connection that fails before any byte of the response arrived (closed or
    /// reset by the server, before or after the request was written: it closed the idle
    /// connection, or closes every connection after one response although it said
    /// keep-alive) is dropped and the request is sent again, once and at once, on a new
    /// connection, as HTTP client libraries do; `phases.retried` says so. The deadlines stay
    /// those of the first send. A failure on a new connection, or after a response byte,
    /// is never retried: it is the provider's. `phases` describes the connection finally
    /// used.
    async fn send(
        &self,
        target: &Target,
        req: Request<ReqBody>,
        emulation: &Emulation,
        phases: &mut Phases,
        dl: &Deadlines,
    ) -> Result<(Conn, Response<Incoming>), Failure> {
        let connect_deadline = earliest(&[dl.connect, dl.ttft, dl.total]);
        let head_deadline = earliest(&[dl.ttft, dl.total]);
        *phases = Phases::default();
        let req = match self.transport.checkout(&target.origin) {
            None => req,
            Some(conn) => {
                phases.reused = true;
                let again = copy_request(&req);
                match send_on(conn, req, emulation, head_deadline).await {
                    Ok(sent) => return Ok(sent),
                    Err(SendFail::Broken {
                        error,
                        before_response: true,
                    }) => {
                        tracing::debug!(
                            "pooled connection failed before the response ({error}); \
                             sending again on a new connection"
                        );
                        *phases = Phases {
                            retried: true,
                            ..Phases::default()
                        };
                        again
                    }
                    Err(f) => return Err(f.into_failure()),
                }
            }
        };
        // Boxed: the connect future (DNS, TCP, TLS) is large and only needed for new
        // connections; inline, it would make every request's future ~12 KB.
        let connecting = Box::pin(self.transport.connect(&target.origin, phases));
        let conn = match within(connect_deadline.map(|d| d.0), connecting).await {
            Some(Ok(c)) => c,
            Some(Err(msg)) => return Err(Failure::new(Outcome::ConnectionError, msg)),
            None => return Err(timed_out(connect_deadline)),
        };
        send_on(conn, req, emulation, head_deadline)
            .await
            .map_err(SendFail::into_failure)
    }
}

impl SendFail {
    /// The attempt's failure: a timeout as such, a broken connection as `connection_error`.
    fn into_failure(self) -> Failure {
        match self {
            SendFail::Timeout(f) => f,
            SendFail::Broken { error, .. } => Failure::new(
                Outcome::ConnectionError,
                format!("error sending request: {error}"),
            ),
        }
    }
}

/// Sends `req` on `conn`, with the emulation headers its peer may receive, and waits for
/// the response head until `head_deadline`.
async fn send_on(
    mut conn: Conn,
    mut req: Request<ReqBody>,
    emulation: &Emulation,
    head_deadline: Option<(Instant, Outcome)>,
) -> Result<(Conn, Response<Incoming>), SendFail> {
    emulation.apply(req.headers_mut(), conn.peer());
    let reads = conn.reads();
    match within(head_deadline.map(|d| d.0), conn.send(req)).await {
        Some(Ok(resp)) => Ok((conn, resp)),
        Some(Err(e)) => Err(SendFail::Broken {
            error: error_chain(e.error()),
            before_response: conn.reads() == reads,
        }),
        None => Err(SendFail::Timeout(timed_out(head_deadline))),
    }
}

/// Reads (up to 64 KiB of, decoded by `decoder` when it is compressed) a non-2xx body for
/// its error object and builds the result; also says whether the body was read to its end
/// (then the connection can be reused). `decoder`: the body's content coding
/// ([`BodyDecoder::for_header`]); one latmesh does not decode, or a corrupt stream, is named
/// in the message after the status. `deadlines`: the total and idle timeouts.
async fn error_response(
    body: &mut Incoming,
    decoder: Result<Option<BodyDecoder>, String>,
    conn: &Conn,
    head: Head,
    scrub: &Scrubber<'_>,
    ttfb_at: Instant,
    deadlines: (Option<(Instant, Outcome)>, Option<Duration>),
) -> (ProbeResult, bool) {
    let (total, idle) = deadlines;
    let (mut decoder, mut unreadable) = match decoder {
        Ok(d) => (d, None),
        Err(e) => (None, Some(e)),
    };
    let status = head.http_status.unwrap_or_default();
    let mut buf = Vec::new();
    let mut stamps = BodyStamps::default();
    let mut last_read = ttfb_at;
    let mut end_at = None;
    loop {
        let deadline = earliest(&[idle.map(|d| (last_read + d, Outcome::TimeoutIdle)), total]);
        match within(deadline.map(|d| d.0), body.frame()).await {
            Some(Some(Ok(frame))) => {
                // Stamped before any parsing, at the socket read (as the 2xx path).
                let at = conn.read_at(last_read);
                let Ok(b) = frame.into_data() else {
                    continue;
                };
                if b.is_empty() {
                    continue;
                }
                last_read = at;
                stamps.on_wire(at, &b);
                if unreadable.is_some() {
                    // Drained to the end (the connection can be reused), not read.
                    continue;
                }
                let mut keep = |piece: &[u8]| {
                    stamps.on_decoded(at, piece);
                    let room = MAX_ERROR_BODY - buf.len();
                    buf.extend_from_slice(&piece[..piece.len().min(room)]);
                    if buf.len() >= MAX_ERROR_BODY {
                        Flow::Stop
                    } else {
                        Flow::Continue
                    }
                };
                let flow = match decoder.as_mut() {
                    None => Ok(keep(&b)),
                    Some(d) => d.feed(&b, keep),
                };
                match flow {
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Stop) => break,
                    Err(e) => unreadable = Some(e),
                }
            }
            Some(None) => {
                end_at = Some(Instant::now());
                break;
            }
            // The status already says what happened; a body we cannot finish adds nothing.
            Some(Some(Err(_))) | None => break,
        }
    }
    let pe = ProviderError::from_payload(&buf);
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let failure = if status >= 400 {
        let plain = format!("HTTP {status} {reason}").trim_end().to_string();
        Failure {
            outcome: Outcome::from_http_status(status),
            error_type: pe.kind.or(pe.code.clone()),
            error_code: pe.code,
            message: match (pe.message, unreadable) {
                (Some(m), _) => m,
                (None, Some(e)) => format!("{plain} ({e})"),
                (None, None) => plain,
            },
        }
    } else {
        Failure::new(
            Outcome::ProtocolError,
            format!("unexpected HTTP status {status} {reason} (redirects are not followed)"),
        )
    };
    let mut result = head.failed_with_body(failure, scrub, &stamps, end_at);
    if status >= 400 {
        result.error_body_fields = request::fields_named_in(&buf);
    }
    (result, end_at.is_some())
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

    /// The body's one timer, armed lazily, still ends the attempt at the right deadline:
    /// tokens that keep coming under the idle timeout (the timer fires at a stale idle
    /// deadline and is re-armed), a stall, comments before the first token, the total.
    #[tokio::test]
    async fn one_timer_per_body_keeps_every_deadline() {
        use latmesh_sim::{ProviderProfile, SimConfig};
        let n = |name: &str, ttft_us, itl_us| ProviderProfile {
            output_tokens_min: 8,
            output_tokens_max: 8,
            ..ProviderProfile::fixed(name, ttft_us, itl_us)
        };
        let cfg = SimConfig {
            profiles: vec![
                n("flow", 20_000, 60_000),
                ProviderProfile {
                    stall_prob: 1.0,
                    stall_us: 600_000,
                    ..n("stall", 20_000, 20_000)
                },
                ProviderProfile {
                    keepalive_interval_us: 20_000,
                    ..n("slow", 900_000, 20_000)
                },
            ],
            ..SimConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
        let prober = Prober::new(None).unwrap();
        let messages = [latmesh_core::prompts::Message::new("user", "hi")];
        let run = |provider: &'static str, ttft_s: f64, idle_s: f64, total_s: f64| {
            let (prober, messages) = (&prober, &messages);
            async move {
                let base = format!("http://{addr}/{provider}/v1");
                let timeouts = latmesh_core::plan::Timeouts {
                    connect_s: 5.0,
                    ttft_s,
                    idle_s,
                    total_s,
                };
                let req = ProbeRequest {
                    base_url: &base,
                    model_id: "m",
                    api_key: None,
                    messages,
                    stream: true,
                    max_tokens: 8,
                    temperature: None,
                    top_p: None,
                    timeouts: &timeouts,
                    probe_id: None,
                    user_agent: None,
                    shape: latmesh_core::api::RequestShape::chat_default(),
                    secret_headers: &[],
                };
                let t0 = Instant::now();
                let r = prober.probe(&req, false).await;
                (r.record, t0.elapsed())
            }
        };
        // 60 ms gaps under a 150 ms idle timeout: ok.
        let (rec, _) = run("flow", 5.0, 0.15, 5.0).await;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(rec.content_chunks, 8);
        // A 600 ms stall: idle timeout about 150 ms after the last token.
        let (rec, took) = run("stall", 5.0, 0.15, 5.0).await;
        assert_eq!(rec.outcome, Some(Outcome::TimeoutIdle), "{rec:?}");
        assert!(rec.content_chunks >= 1 && took < Duration::from_millis(550));
        assert_eq!(
            rec.error_message.as_deref(),
            Some("no body bytes within the idle timeout (0.15 s)")
        );
        // Comments every 20 ms, no token by 250 ms: TTFT timeout, not idle.
        let (rec, took) = run("slow", 0.25, 0.15, 5.0).await;
        assert_eq!(rec.outcome, Some(Outcome::TimeoutTtft), "{rec:?}");
        assert!(rec.comment_lines >= 3 && took < Duration::from_millis(700));
        assert_eq!(
            rec.error_message.as_deref(),
            Some("no token before the TTFT timeout (0.25 s)")
        );
        // Tokens flowing past the total timeout.
        let (rec, took) = run("flow", 5.0, 0.15, 0.2).await;
        assert_eq!(rec.outcome, Some(Outcome::TimeoutTotal), "{rec:?}");
        assert!(rec.content_chunks >= 2 && took < Duration::from_millis(450));
        assert_eq!(
            rec.error_message.as_deref(),
            Some("attempt exceeded the total timeout (0.2 s)")
        );
    }

    #[test]
    fn bad_region_is_refused() {
        assert!(Prober::new(Some("eu\nwest")).is_err());
        assert!(Prober::new(Some("eu-west")).is_ok());
        assert!(Prober::new(None).is_ok());
    }
}
