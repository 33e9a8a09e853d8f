//! The simulated providers' HTTP API: `POST /{provider}/v1/chat/completions`,
//! `GET /{provider}/v1/models`, `GET /healthz`.
//!
//! Each request gets its own RNG ([`plan::request_rng`]), a [`plan::Decision`] is made up
//! front, and the response is played out with real sleeps: the headers after the region
//! delay (and, for a provider with a serving capacity, after a free slot: see
//! [`ProviderProfile`]'s *Serving capacity*), then each SSE chunk at its planned time, each
//! chunk its own body frame.
//!
//! Requests carrying `x-latmesh-probe-id` are recorded in the ground-truth log
//! ([`crate::truth`]), readable at `GET /_truth/{probe_id}`; with
//! [`TruthLog::recording_all`] every other request too (as `unlabeled-N`). `GET /_truth`
//! lists every kept request, one [`crate::TruthSummary`] per line.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::Rng;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, sleep_until};

use crate::SimConfig;
use crate::hostile::Echo;
use crate::plan::{self, AnswerPlan, Decision, PlanInput};
use crate::profile::ProviderProfile;
use crate::region::REGION_HEADER;
use crate::request::ChatRequest;
use crate::text::{self, TokenKind};
use crate::truth::{ConnTap, PROBE_ID_HEADER, Recorder, TruthLog};

/// Response header: planned server-side delay from the response headers to the first
/// token chunk, in µs (region delay excluded).
pub const PLANNED_TTFT_HEADER: &str = "x-sim-planned-ttft-us";
/// Response header: the region delay applied before the response headers, in µs.
pub const REGION_DELAY_HEADER: &str = "x-sim-region-delay-us";
/// Response header: the fault injected into this response (`none`, `throttle`, `truncate`,
/// `stall`).
pub const FAULT_HEADER: &str = "x-sim-fault";
/// Response header: 0-based index of this request among the provider's requests.
pub const REQUEST_INDEX_HEADER: &str = "x-sim-request-index";
/// Response header: completion tokens the simulator planned (reasoning included).
pub const PLANNED_TOKENS_HEADER: &str = "x-sim-planned-completion-tokens";
/// Response header: how long the request waited for a free serving slot, in µs (0 when a
/// slot was free or the provider's capacity is unlimited). Only on answered (200) responses.
pub const QUEUE_WAIT_HEADER: &str = "x-sim-queue-wait-us";

struct Provider {
    profile: ProviderProfile,
    requests: AtomicU64,
    /// The serving slots (`profile.capacity` permits, FIFO); `None` when unlimited.
    slots: Option<Arc<Semaphore>>,
}

impl Provider {
    /// Take a serving slot once the region delay is over (at `ready`). Returns the slot
    /// (`None` when unlimited) and the instant service starts: `ready` when a slot was free,
    /// else the moment one was handed over (FIFO among the waiters).
    async fn take_slot(&self, ready: Instant) -> (Option<OwnedSemaphorePermit>, Instant) {
        let Some(slots) = &self.slots else {
            return (None, ready);
        };
        sleep_until(ready).await;
        // `try_acquire` never jumps the queue: released permits go to waiters first.
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            return (Some(slot), ready);
        }
        // The semaphore is never closed.
        let slot = slots.clone().acquire_owned().await.ok();
        (slot, Instant::now().max(ready))
    }
}

struct SimState {
    seed: u64,
    time_scale: f64,
    regions: crate::region::RegionTable,
    providers: HashMap<String, Provider>,
    truth: TruthLog,
}

/// The providers' router (what [`crate::serve_providers`] serves), for embedding.
///
/// # Errors
/// `InvalidInput` when the config does not validate (see [`SimConfig::validate`]).
pub fn providers_router(cfg: SimConfig) -> std::io::Result<Router> {
    cfg.validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let providers = cfg
        .profiles
        .into_iter()
        .map(|p| {
            (
                p.name.clone(),
                Provider {
                    slots: (p.capacity > 0).then(|| Arc::new(Semaphore::new(p.capacity as usize))),
                    profile: p,
                    requests: AtomicU64::new(0),
                },
            )
        })
        .collect();
    let state = Arc::new(SimState {
        seed: cfg.seed,
        time_scale: cfg.time_scale,
        regions: cfg.regions,
        providers,
        truth: cfg.truth,
    });
    Ok(Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/{provider}/v1/chat/completions", post(chat_completions))
        .route("/{provider}/v1/models", get(models))
        .route("/_truth/{probe_id}", get(truth_report))
        .route("/_truth", get(truth_summaries))
        .fallback(|| async {
            openai_error(
                StatusCode::NOT_FOUND,
                "no such route",
                "invalid_request_error",
                "not_found",
            )
        })
        .with_state(state))
}

/// An error response in OpenAI's shape: `{"error":{"message","type","code"}}`.
pub fn openai_error(status: StatusCode, message: &str, kind: &str, code: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// [`openai_error`] from a provider that may be hostile: the key echoed in every field, the
/// reason phrase and headers; the message padded ([`crate::hostile`]).
fn hostile_error(
    echo: &Echo,
    status: StatusCode,
    message: &str,
    kind: &str,
    code: &str,
) -> Response {
    let Some(k) = &echo.key else {
        return openai_error(status, &echo.padded(message), kind, code);
    };
    let body = json!({"error": {"message": echo.padded(message), "type": echo.field(kind), "param": k, "code": echo.field(code)}});
    let mut resp = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    echo.apply(&mut resp);
    resp
}

fn unknown_provider(name: &str) -> Response {
    openai_error(
        StatusCode::NOT_FOUND,
        &format!("The provider `{name}` does not exist on this simulator"),
        "invalid_request_error",
        "model_not_found",
    )
}

async fn models(State(st): State<Arc<SimState>>, Path(name): Path<String>) -> Response {
    let Some(p) = st.providers.get(&name) else {
        return unknown_provider(&name);
    };
    let data: Vec<_> = p
        .profile
        .models
        .iter()
        .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": name}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

async fn truth_report(State(st): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    match st.truth.report(&id) {
        Some(r) => axum::Json(r).into_response(),
        None => openai_error(
            StatusCode::NOT_FOUND,
            &format!(
                "no ground truth for probe id {:?} (never seen, or evicted)",
                id.chars().take(100).collect::<String>()
            ),
            "invalid_request_error",
            "not_found",
        ),
    }
}

/// `GET /_truth`: every kept request, one JSON object per line, in order of receipt.
async fn truth_summaries(State(st): State<Arc<SimState>>) -> Response {
    let mut body = String::new();
    for s in st.truth.summaries() {
        if let Ok(line) = serde_json::to_string(&s) {
            body.push_str(&line);
            body.push('\n');
        }
    }
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn set_header(headers: &mut HeaderMap, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
        headers.insert(name, v);
    }
}

async fn chat_completions(
    State(st): State<Arc<SimState>>,
    Path(name): Path<String>,
    version: Version,
    extensions: Extensions,
    req_headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Ground truth's `received` (see crate::truth): the handler's first statement.
    let t0 = Instant::now();
    // Written stamps only where one connection carries one response at a time.
    let conn = || {
        extensions
            .get::<ConnectInfo<ConnTap>>()
            .filter(|_| version <= Version::HTTP_11)
            .map(|c| c.0.writes.clone())
    };
    let rec = match req_headers.get(PROBE_ID_HEADER) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|id| st.truth.start(id, &name, t0.into_std(), conn())),
        // Recorded only by a log that records every request (`--truth-all`).
        None => st.truth.start_unlabeled(&name, t0.into_std(), conn()),
    };
    let resp = answer(&st, &name, &req_headers, &body, t0, rec.clone()).await;
    if let Some(r) = &rec {
        r.responded(resp.status().as_u16());
    }
    resp
}

/// The response to one chat completion received at `t0`; `rec` records a probe's frames.
async fn answer(
    st: &SimState,
    name: &str,
    req_headers: &HeaderMap,
    body: &Bytes,
    t0: Instant,
    rec: Option<Recorder>,
) -> Response {
    let Some(provider) = st.providers.get(name) else {
        return unknown_provider(name);
    };
    let profile = &provider.profile;
    let echo = profile.hostile.for_request(req_headers);
    let req = match ChatRequest::parse(body) {
        Ok(r) => r,
        Err(msg) => {
            let kind = "invalid_request_error";
            return hostile_error(
                &echo,
                StatusCode::BAD_REQUEST,
                &msg,
                kind,
                "invalid_request",
            );
        }
    };
    if let Some(msg) = req.reasoning_passback_error(profile.reasoning_passback) {
        let (kind, code) = ("invalid_request_error", "invalid_request");
        return hostile_error(&echo, StatusCode::BAD_REQUEST, &msg, kind, code);
    }
    let index = provider.requests.fetch_add(1, Ordering::Relaxed);
    let mut rng = plan::request_rng(st.seed, name, index);
    let input = PlanInput {
        prompt_tokens: req.prompt_tokens(),
        max_tokens: req.max_tokens(),
        answer_key: req.answer_key(),
    };
    let decision = plan::plan(profile, &input, req.is_stream(), st.time_scale, &mut rng);
    let caller = req_headers.get(REGION_HEADER).and_then(|v| v.to_str().ok());
    let region_delay_us = st.regions.delay_us(&profile.home_region, caller);
    let region_end = t0 + Duration::from_micros(region_delay_us);

    let mut headers = HeaderMap::new();
    set_header(&mut headers, REGION_DELAY_HEADER, region_delay_us);
    set_header(&mut headers, REQUEST_INDEX_HEADER, index);
    let answer = match decision {
        Decision::Throttle { retry_after_s } => {
            sleep_until(region_end).await;
            set_header(&mut headers, FAULT_HEADER, "throttle");
            match &profile.hostile.retry_after {
                Some(raw) => set_header(&mut headers, "retry-after", raw),
                None => set_header(&mut headers, "retry-after", retry_after_s),
            }
            let mut resp = hostile_error(
                &echo,
                StatusCode::TOO_MANY_REQUESTS,
                &format!("Rate limit reached for {name}. Please try again in {retry_after_s}s."),
                "rate_limit_error",
                "rate_limit_exceeded",
            );
            resp.headers_mut().extend(headers);
            return resp;
        }
        Decision::Answer(a) => a,
    };
    set_header(&mut headers, PLANNED_TTFT_HEADER, answer.ttft_us);
    set_header(
        &mut headers,
        PLANNED_TOKENS_HEADER,
        answer.completion_tokens(),
    );
    let fault = if answer.truncate_at_chunk.is_some() {
        "truncate"
    } else if answer.stalled {
        "stall"
    } else {
        "none"
    };
    set_header(&mut headers, FAULT_HEADER, fault);

    let model = req.model.clone().unwrap_or_else(|| {
        profile
            .models
            .first()
            .cloned()
            .unwrap_or_else(|| "unknown".to_string())
    });
    let ctx = Render {
        id: echo.field(&format!("chatcmpl-sim{:016x}", rng.random::<u64>())),
        created: unix_now_s(),
        model: echo.field(&model),
        fingerprint: echo.field("latmesh-sim"),
        include_usage: req.include_usage(),
        reasoning_fields: profile.reasoning_tokens_max > 0,
        prompt_tokens: input.prompt_tokens,
        answer_key: input.answer_key,
        cjk: text::is_mostly_cjk(&req.prompt_text()),
        echo,
    };

    if req.is_stream() {
        let events = stream_events(&ctx, profile, &answer);
        let (slot, base) =
            serve_after_queue(provider, region_end, &mut headers, rec.as_ref()).await;
        sleep_until(base).await;
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if let Some(r) = &rec {
            r.streaming();
        }
        let echo = ctx.echo.clone();
        // The slot lives in the body stream: freed with the last frame, or when hyper drops
        // the body because the client went away.
        let stream = futures::stream::unfold(
            (events.into_iter(), rec, slot),
            move |(mut events, rec, mut slot)| async move {
                let (at_us, bytes, mark) = events.next()?;
                let when = base + Duration::from_micros(at_us);
                if when > Instant::now() {
                    sleep_until(when).await;
                }
                // Stamped right before the frame goes to hyper.
                if let Some(r) = &rec {
                    match mark {
                        Mark::Other => {}
                        Mark::Tokens(kind, count) => r.tokens(kind, count),
                        Mark::Last { truncated } => r.end(truncated),
                    }
                }
                if let Mark::Last { .. } = mark {
                    drop(slot.take());
                }
                Some((Ok::<Bytes, Infallible>(bytes), (events, rec, slot)))
            },
        );
        let mut resp = (StatusCode::OK, headers, Body::from_stream(stream)).into_response();
        echo.apply(&mut resp);
        resp
    } else {
        let body = completion_body(&ctx, &answer);
        let (slot, base) =
            serve_after_queue(provider, region_end, &mut headers, rec.as_ref()).await;
        sleep_until(base + Duration::from_micros(answer.end_us())).await;
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        // The whole body goes out with the response, in one write: the slot is free now.
        drop(slot);
        let mut resp = (StatusCode::OK, headers, body).into_response();
        ctx.echo.apply(&mut resp);
        resp
    }
}

/// Wait for a serving slot of `provider` (see [`Provider::take_slot`]); note the wait in the
/// response headers and the ground truth. Returns the slot and the instant service starts
/// (the headers go out then; planned times count from it).
async fn serve_after_queue(
    provider: &Provider,
    region_end: Instant,
    headers: &mut HeaderMap,
    rec: Option<&Recorder>,
) -> (Option<OwnedSemaphorePermit>, Instant) {
    let (slot, base) = provider.take_slot(region_end).await;
    let wait = base.saturating_duration_since(region_end);
    set_header(headers, QUEUE_WAIT_HEADER, wait.as_micros());
    if let Some(r) = rec {
        r.queued(wait);
    }
    (slot, base)
}

/// What the renderer needs besides the plan.
struct Render {
    id: String,
    created: u64,
    model: String,
    fingerprint: String,
    include_usage: bool,
    /// DeepSeek-style deltas: `content` and `reasoning_content` both present, one null.
    reasoning_fields: bool,
    prompt_tokens: u32,
    answer_key: u64,
    cjk: bool,
    /// What a hostile profile adds ([`crate::hostile`]; inactive otherwise).
    echo: Echo,
}

impl Render {
    fn text(&self, kind: TokenKind, first: u32, count: u32) -> String {
        (first..first + count)
            .map(|i| text::token_text(self.answer_key, kind, i, self.cjk))
            .collect()
    }

    fn data_line(&self, choices: &str) -> Bytes {
        let usage = if self.include_usage {
            ",\"usage\":null"
        } else {
            ""
        };
        self.line(&self.model, &self.fingerprint, choices, usage)
    }

    /// One chunk's `data:` line with `model`, `system_fingerprint`, `choices` and a `tail`
    /// (`,"usage":…` or nothing) after them.
    fn line(&self, model: &str, fingerprint: &str, choices: &str, tail: &str) -> Bytes {
        let s = |v: &str| serde_json::to_string(v).unwrap_or_default();
        let tier = match &self.echo.key {
            Some(k) => format!(",\"service_tier\":{}", s(k)),
            None => String::new(),
        };
        Bytes::from(format!(
            "data: {{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"system_fingerprint\":{}{tier},\"choices\":[{choices}]{tail}}}\n\n",
            s(&self.id),
            self.created,
            s(model),
            s(fingerprint),
        ))
    }

    fn delta_chunk(&self, delta: &str, finish: Option<&str>) -> Bytes {
        let finish = finish.map_or("null".to_string(), |f| {
            serde_json::to_string(&self.echo.padded(f)).unwrap_or_default()
        });
        self.data_line(&format!(
            "{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}"
        ))
    }

    fn usage(&self, a: &AnswerPlan) -> serde_json::Value {
        let completion = a.completion_tokens();
        self.echo.usage(json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens.saturating_add(completion),
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": a.reasoning_tokens},
        }))
    }
}

const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// What a body frame is, for the ground-truth log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Role chunk, keep-alive comment, finish or usage chunk.
    Other,
    /// A token frame.
    Tokens(TokenKind, u32),
    /// The last frame: `[DONE]`, or the cut line of a truncated stream.
    Last { truncated: bool },
}

/// The body of a streamed answer: `(µs after the headers, bytes, what it is)` in order.
fn stream_events(r: &Render, profile: &ProviderProfile, a: &AnswerPlan) -> Vec<(u64, Bytes, Mark)> {
    let mut ev: Vec<(u64, Bytes, Mark)> = Vec::with_capacity(a.chunks.len() + 8);
    if let Some(prelude) = r.echo.sse_prelude() {
        ev.push((0, Bytes::from(prelude), Mark::Other));
    }
    let role_choice = r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#;
    // A hostile provider's long `model` goes in this event alone (crate::hostile).
    let usage_null = if r.include_usage {
        ",\"usage\":null"
    } else {
        ""
    };
    let role = r.line(
        &r.echo.pad(r.model.clone()),
        &r.fingerprint,
        role_choice,
        usage_null,
    );
    if profile.early_role_chunk {
        ev.push((0, role.clone(), Mark::Other));
    }
    if a.keepalive_interval_us > 0 {
        let step = a.keepalive_interval_us;
        let mut at = step;
        while at < a.ttft_us {
            ev.push((at, Bytes::from_static(KEEPALIVE), Mark::Other));
            at += step;
        }
    }
    if !profile.early_role_chunk {
        ev.push((a.ttft_us, role, Mark::Other));
    }
    for (i, c) in a.chunks.iter().enumerate() {
        let text = serde_json::to_string(&r.text(c.kind, c.first, c.count)).unwrap_or_default();
        let delta = match (c.kind, r.reasoning_fields) {
            (TokenKind::Content, false) => format!("{{\"content\":{text}}}"),
            (TokenKind::Content, true) => {
                format!("{{\"content\":{text},\"reasoning_content\":null}}")
            }
            (TokenKind::Reasoning, _) => {
                format!("{{\"content\":null,\"reasoning_content\":{text}}}")
            }
        };
        let bytes = r.delta_chunk(&delta, None);
        if a.truncate_at_chunk == Some(i) {
            // Stop mid-line: half of this data line, no finish_reason, no [DONE].
            ev.push((
                c.at_us,
                bytes.slice(..bytes.len() / 2),
                Mark::Last { truncated: true },
            ));
            return ev;
        }
        ev.push((c.at_us, bytes, Mark::Tokens(c.kind, c.count)));
    }
    let end = a.end_us();
    ev.push((
        end,
        r.delta_chunk("{}", Some(a.finish_reason.as_str())),
        Mark::Other,
    ));
    if r.include_usage {
        let usage = format!(",\"usage\":{}", r.usage(a));
        // A hostile provider's long `system_fingerprint` goes in this event alone.
        let fp = r.echo.pad(r.fingerprint.clone());
        ev.push((end, r.line(&r.model, &fp, "", &usage), Mark::Other));
    }
    ev.push((
        end,
        Bytes::from_static(b"data: [DONE]\n\n"),
        Mark::Last { truncated: false },
    ));
    ev
}

/// The body of a non-streamed answer (`chat.completion`).
fn completion_body(r: &Render, a: &AnswerPlan) -> String {
    let mut message = json!({
        "role": "assistant",
        "content": r.echo.field(&r.text(TokenKind::Content, 0, a.content_tokens)),
    });
    if r.reasoning_fields {
        message["reasoning_content"] = json!(r.text(TokenKind::Reasoning, 0, a.reasoning_tokens));
    }
    let mut body = json!({
        "id": r.id,
        "object": "chat.completion",
        "created": r.created,
        "model": r.echo.pad(r.model.clone()),
        "system_fingerprint": r.echo.pad(r.fingerprint.clone()),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": r.echo.padded(a.finish_reason.as_str())}],
        "usage": r.usage(a),
    });
    if let Some(k) = &r.echo.key {
        body["service_tier"] = json!(k);
    }
    body.to_string()
}
