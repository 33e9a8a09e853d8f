//! The simulated providers' HTTP API: `POST /{provider}/v1/chat/completions` (OpenAI Chat
//! Completions), `POST /{provider}/v1/messages` (Anthropic Messages),
//! `POST /{provider}/v1/responses` (OpenAI Responses), `GET /{provider}/v1/models`,
//! `GET /healthz`.
//!
//! Every API is served by one handler with the same profile, queue and plan: the request is
//! read into a [`SimRequest`] ([`crate::request`]), gets its own RNG ([`plan::request_rng`]),
//! a [`plan::Decision`] is made up front, and the response is played out with real sleeps:
//! the headers after the region delay (and, for a provider with a serving capacity, after a
//! free slot: see [`ProviderProfile`]'s *Serving capacity*), then each event at its planned
//! time, each token event its own body frame, written in the API's shape by
//! [`crate::render`]. Errors are in the API's shape too (OpenAI's `{"error":{…}}`,
//! Anthropic's `{"type":"error","error":{…}}`): 401 (or the profile's `wrong_key_status`)
//! for a wrong API key when the profile checks one (before anything else), HTTP 400 for an
//! unusable request or a feature the profile rejects, 404 for an unknown provider, 429 when throttled, 529 (Anthropic) or 503 (OpenAI APIs) when
//! overloaded.
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
use axum::routing::{MethodRouter, get, post};
use latmesh_core::api::Api;
use rand::Rng;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, sleep_until};

use crate::SimConfig;
use crate::cache::PromptCache;
use crate::hostile::Echo;
use crate::plan::{self, Decision, PlanInput};
use crate::profile::ProviderProfile;
use crate::region::REGION_HEADER;
use crate::render::{self, ErrorKind, Frame, Mark, Render};
use crate::request::SimRequest;
use crate::truth::{self, ConnTap, PROBE_ID_HEADER, Recorder, TruthLog};
use crate::{context_limit, script, text, tokens};

/// Response header: planned server-side delay from the response headers to the first
/// token chunk, in µs (region delay excluded).
pub const PLANNED_TTFT_HEADER: &str = "x-sim-planned-ttft-us";
/// Response header: planned server-side delay from the response headers to the second token
/// chunk, in µs ([`plan::AnswerPlan::ttst_us`]); absent with fewer than two token chunks.
pub const PLANNED_TTST_HEADER: &str = "x-sim-planned-ttst-us";
/// Response header: the region delay applied before the response headers, in µs.
pub const REGION_DELAY_HEADER: &str = "x-sim-region-delay-us";
/// Response header: the fault injected into this response (`none`, `throttle`, `overload`,
/// `truncate`, `stream_error`, `stall`).
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
    /// Requests that asked for stop sequences, JSON mode, tools (for
    /// [`crate::profile::Feature::OneInThree`]).
    feature_asks: [AtomicU64; 3],
    /// The prompt cache (used when `profile.prompt_cache`).
    cache: PromptCache,
    /// The serving slots (`profile.capacity` permits, FIFO); `None` when unlimited.
    slots: Option<Arc<Semaphore>>,
    /// When the first request arrived (the origin of `ttft_drift_us_per_s`).
    first_request: std::sync::OnceLock<Instant>,
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
                    feature_asks: Default::default(),
                    cache: PromptCache::default(),
                    first_request: std::sync::OnceLock::new(),
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
        .route("/{provider}/v1/chat/completions", api_route(Api::Chat))
        .route("/{provider}/v1/messages", api_route(Api::Anthropic))
        .route("/{provider}/v1/responses", api_route(Api::Responses))
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

fn unknown_provider(api: Api, name: &str) -> Response {
    let msg = format!("The provider `{name}` does not exist on this simulator");
    render::error_response(api, &Echo::default(), ErrorKind::NotFound, &msg, None)
}

async fn models(State(st): State<Arc<SimState>>, Path(name): Path<String>) -> Response {
    let Some(p) = st.providers.get(&name) else {
        return unknown_provider(Api::Chat, &name);
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

/// The `POST` route of `api`: every API is served by [`serve_api`].
fn api_route(api: Api) -> MethodRouter<Arc<SimState>> {
    post(
        move |State(st): State<Arc<SimState>>,
              Path(name): Path<String>,
              version: Version,
              extensions: Extensions,
              req_headers: HeaderMap,
              body: Bytes| async move {
            serve_api(api, &st, &name, version, &extensions, &req_headers, &body).await
        },
    )
}

/// One request on `api` to provider `name`: recorded in the ground truth, then answered.
async fn serve_api(
    api: Api,
    st: &SimState,
    name: &str,
    version: Version,
    extensions: &Extensions,
    req_headers: &HeaderMap,
    body: &Bytes,
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
            .and_then(|id| st.truth.start(id, name, api, t0.into_std(), conn())),
        // Recorded only by a log that records every request (`--truth-all`).
        None => st.truth.start_unlabeled(name, api, t0.into_std(), conn()),
    };
    let resp = answer(st, api, name, req_headers, body, t0, rec.clone()).await;
    if let Some(r) = &rec {
        r.responded(resp.status().as_u16());
    }
    resp
}

/// The response to one request on `api` received at `t0`; `rec` records a probe's frames.
async fn answer(
    st: &SimState,
    api: Api,
    name: &str,
    req_headers: &HeaderMap,
    body: &Bytes,
    t0: Instant,
    rec: Option<Recorder>,
) -> Response {
    let Some(provider) = st.providers.get(name) else {
        return unknown_provider(api, name);
    };
    let profile = &provider.profile;
    let echo = profile.hostile.for_request(req_headers);
    if let Some(want) = &profile.api_key
        && presented_key(req_headers) != Some(want.as_str())
    {
        let msg = "Incorrect API key provided. You can find your API key in your account settings.";
        let mut resp = render::error_response(api, &echo, ErrorKind::Unauthorized, msg, None);
        *resp.status_mut() =
            StatusCode::from_u16(profile.wrong_key_status).unwrap_or(StatusCode::UNAUTHORIZED);
        return resp;
    }
    let invalid = |msg: &str, param: Option<&str>| {
        render::error_response(api, &echo, ErrorKind::InvalidRequest, msg, param)
    };
    let mut req = match SimRequest::parse(api, body, profile) {
        Ok(r) => r,
        Err(e) => return invalid(&e.message, e.param.as_deref()),
    };
    if let Err(e) = req.apply_features(profile, |i| {
        provider.feature_asks[i].fetch_add(1, Ordering::Relaxed)
    }) {
        return invalid(&e.message, e.param.as_deref());
    }
    if let Some(msg) = req.reasoning_passback_error(profile.reasoning_passback) {
        return invalid(&msg, None);
    }
    let prompt_tokens = req.prompt_tokens(profile);
    // Refused for its length before it is counted, planned or queued.
    if let Some(e) = context_limit::check(api, profile, prompt_tokens, req.max_tokens) {
        return render::error_response(
            api,
            &echo,
            ErrorKind::ContextLengthExceeded,
            &e.message,
            e.param,
        );
    }
    let index = provider.requests.fetch_add(1, Ordering::Relaxed);
    let mut rng = plan::request_rng(st.seed, name, index);
    let answer_key = req.answer_key();
    let cjk = text::is_mostly_cjk(&req.prompt_text());
    let script = script::script(
        &req,
        profile,
        plan::natural_tokens(profile, answer_key),
        answer_key,
        cjk,
    );
    let cached_tokens = if profile.prompt_cache {
        provider
            .cache
            .lookup(&req.prompt_text(), prompt_tokens, |prefix| {
                // A cut may end on the space between two words.
                tokens::prompt_tokens(profile, [prefix.trim_end_matches(' ')])
                    .saturating_sub(profile.template_tokens)
            })
    } else {
        0
    };
    let input = PlanInput {
        cached_tokens,
        prompt_tokens,
        max_tokens: req.max_tokens,
        answer_key,
        thinking: req.thinking,
        scripted: script.as_ref().map(|s| {
            (
                u32::try_from(s.tokens.len()).unwrap_or(u32::MAX),
                s.finish(),
            )
        }),
        ignore_eos: req.ignore_eos,
        min_tokens: req.min_tokens,
    };
    let first = *provider.first_request.get_or_init(|| t0);
    let drifted;
    let planned_by = if profile.ttft_drift_us_per_s > 0 {
        drifted = ProviderProfile {
            ttft_base_us: profile.ttft_base_at_us(t0.saturating_duration_since(first)),
            ..profile.clone()
        };
        &drifted
    } else {
        profile
    };
    let decision = plan::plan(planned_by, &input, req.stream, st.time_scale, &mut rng);
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
            let msg =
                format!("Rate limit reached for {name}. Please try again in {retry_after_s}s.");
            let mut resp = render::error_response(api, &echo, ErrorKind::RateLimited, &msg, None);
            resp.headers_mut().extend(headers);
            return resp;
        }
        Decision::Overload => {
            sleep_until(region_end).await;
            set_header(&mut headers, FAULT_HEADER, "overload");
            let msg = format!("{name} is overloaded. Please try again later.");
            let mut resp = render::error_response(api, &echo, ErrorKind::Overloaded, &msg, None);
            resp.headers_mut().extend(headers);
            return resp;
        }
        Decision::Answer(a) => a,
    };
    set_header(&mut headers, PLANNED_TTFT_HEADER, answer.ttft_us);
    if let Some(ttst) = answer.ttst_us() {
        set_header(&mut headers, PLANNED_TTST_HEADER, ttst);
    }
    set_header(
        &mut headers,
        PLANNED_TOKENS_HEADER,
        answer.completion_tokens(),
    );
    let fault = if answer.truncate_at_chunk.is_some() {
        "truncate"
    } else if answer.error_at_chunk.is_some() {
        "stream_error"
    } else if answer.stalled {
        "stall"
    } else {
        "none"
    };
    set_header(&mut headers, FAULT_HEADER, fault);

    let (model, fingerprint) = truth::answered_identity(profile, index, req.model.as_deref());
    let ctx = Render {
        id: echo.field(&render::response_id(api, rng.random::<u64>())),
        created: unix_now_s(),
        model: echo.field(&model),
        // A hostile provider (echoing the key or padding fields) always sends a fingerprint,
        // so the field it pads or echoes into is there to bound.
        fingerprint: fingerprint
            .or_else(|| (echo.pad > 0 || echo.key.is_some()).then(|| "fp_hostile".to_string()))
            .map(|f| echo.field(&f)),
        include_usage: req.include_usage,
        reasoning_fields: profile.reasoning_tokens_max > 0,
        prompt_tokens: input.prompt_tokens,
        cached_tokens,
        answer_key: input.answer_key,
        cjk,
        echo,
        script,
    };

    if req.stream {
        let events = render::stream_events(api, &ctx, profile, &answer);
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
        // The slot lives in the body stream: freed with the last frame, or when hyper drops
        // the body because the client went away.
        let stream = futures::stream::unfold(
            (events.into_iter(), rec, slot),
            move |(mut events, rec, mut slot)| async move {
                let Frame { at_us, bytes, mark } = events.next()?;
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
        ctx.echo.apply(&mut resp);
        resp
    } else {
        let body = render::body(api, &ctx, &answer);
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

/// The API key a request presents: `Authorization: Bearer KEY`, else `x-api-key: KEY`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
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
