//! One planner, three renderers: how a planned answer ([`AnswerPlan`]) is written on each
//! API. The timing is the plan's and the same on every API: [`stream_events`] walks the plan
//! once and asks the API's [`Dialect`] for the bytes of each step, so every token chunk of
//! the plan is exactly one token event (one body frame) at its planned time, whichever API
//! carries it, and the ground truth ([`crate::truth`]) stamps the same frames.
//!
//! * [`chat`]: OpenAI Chat Completions (`chat.completion.chunk` lines, `[DONE]`);
//! * [`anthropic`]: Anthropic Messages (`message_start`, content blocks, `message_delta`,
//!   `message_stop`, `ping`);
//! * [`responses`]: OpenAI Responses (`response.created` … `response.completed` /
//!   `response.incomplete` / `response.failed`).
//!
//! The steps of a stream, with their times (µs after the response headers):
//! 1. at 0: the hostile prelude if any ([`crate::hostile`]), then [`Dialect::open`] (Chat: the
//!    role chunk for a profile with `early_role_chunk`; Anthropic: `message_start` and a
//!    `ping`; Responses: `response.created` and `response.in_progress`);
//! 2. every `keepalive_interval_us` before the first token: [`Dialect::keepalive`] (Chat and
//!    Responses: a `: keep-alive` comment; Anthropic: a `ping` event);
//! 3. at each chunk's time: the events that open a new part (the role chunk, a content block,
//!    an output item), then the one token event, counted in the ground truth; the truncation
//!    fault cuts that event in half and ends the body; the stream-error fault sends
//!    [`Dialect::fail`] instead and ends the body;
//! 4. at the last chunk's time: [`Dialect::finish`] (closing events, usage, the terminal
//!    event).

pub mod anthropic;
pub mod chat;
pub mod responses;

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use latmesh_core::api::Api;
use serde_json::{Value, json};

use crate::hostile::Echo;
use crate::plan::AnswerPlan;
use crate::profile::ProviderProfile;
use crate::script::Script;
use crate::text::{self, TokenKind};

/// What a renderer needs besides the plan.
pub struct Render {
    /// The response id (`chatcmpl-…`, `msg_…`, `resp_…`; see [`response_id`]).
    pub id: String,
    /// Unix seconds of the response.
    pub created: u64,
    /// The model id echoed back.
    pub model: String,
    /// Chat's `system_fingerprint` (`None`: the field is left out).
    pub fingerprint: Option<String>,
    /// Chat: send the usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Chat, DeepSeek-style deltas: `content` and `reasoning_content` both present, one null.
    pub reasoning_fields: bool,
    /// Estimated prompt tokens (for usage).
    pub prompt_tokens: u32,
    /// Of those, the tokens read from the prompt cache (for usage).
    pub cached_tokens: u32,
    /// Fixes the token text.
    pub answer_key: u64,
    /// Answer in CJK characters.
    pub cjk: bool,
    /// What a hostile profile adds ([`crate::hostile`]; inactive otherwise).
    pub echo: Echo,
    /// The scripted content ([`crate::script`]), when the request gets one: its tokens
    /// replace the filler, and a tool call is rendered as the API writes one.
    pub script: Option<Script>,
}

impl Render {
    /// The text of tokens `first..first + count` of `kind` (content: the script's when
    /// there is one).
    pub fn text(&self, kind: TokenKind, first: u32, count: u32) -> String {
        if let (TokenKind::Content, Some(s)) = (kind, &self.script) {
            return s.text(first, count);
        }
        (first..first + count)
            .map(|i| text::token_text(self.answer_key, kind, i, self.cjk))
            .collect()
    }

    /// The tool the answer calls, when it is a tool call.
    pub fn tool(&self) -> Option<&str> {
        self.script.as_ref()?.tool.as_deref()
    }

    /// The stop sequence the content was cut before, when one matched.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.script.as_ref()?.stop_sequence.as_deref()
    }

    /// The id of this response's tool call: `prefix` (`call_`, `toolu_`, `fc_`) and the
    /// response id's random part.
    pub fn tool_call_id(&self, prefix: &str) -> String {
        let tail = self.id.rsplit('_').next().unwrap_or(&self.id);
        let tail = tail.strip_prefix("chatcmpl-").unwrap_or(tail);
        format!("{prefix}{tail}")
    }
}

/// The id of a response on `api` made from the random `n`: `chatcmpl-sim…`, `msg_sim…`,
/// `resp_sim…`.
pub fn response_id(api: Api, n: u64) -> String {
    let prefix = match api {
        Api::Chat => "chatcmpl-",
        Api::Anthropic => "msg_",
        Api::Responses => "resp_",
    };
    format!("{prefix}sim{n:016x}")
}

/// What a body frame is, for the ground-truth log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Any event that carries no generated token (role chunk, block / item openings and
    /// closings, keep-alives, pings, finish, usage).
    Other,
    /// A token event.
    Tokens(TokenKind, u32),
    /// The last frame: the API's terminal event, an in-band error, or the cut line of a
    /// truncated stream.
    Last {
        /// It is the cut line of a truncated stream.
        truncated: bool,
    },
}

/// One body frame of a streamed answer.
#[derive(Debug, Clone)]
pub struct Frame {
    /// When it is sent, in µs after the response headers.
    pub at_us: u64,
    /// Its bytes (whole SSE events, except the cut line of a truncated stream).
    pub bytes: Bytes,
    /// What it is.
    pub mark: Mark,
}

/// The per-API part of a streamed answer (see the [module documentation](self)).
pub trait Dialect {
    /// The events sent with the headers, before any token (`early_role_chunk`: the profile
    /// sends Chat's role chunk early).
    fn open(&mut self, r: &Render, early_role_chunk: bool) -> Vec<Bytes>;
    /// One keep-alive while prefilling (by default a `: keep-alive` comment).
    fn keepalive(&self) -> Bytes {
        Bytes::from_static(b": keep-alive\n\n")
    }

    /// The events for one token chunk of `kind` with text `text`: the events opening a new
    /// part first, then the token event itself.
    fn tokens(&mut self, r: &Render, kind: TokenKind, text: &str) -> (Vec<Bytes>, Bytes);
    /// The events after the last token; the last one ends the stream.
    fn finish(&mut self, r: &Render, a: &AnswerPlan) -> Vec<Bytes>;
    /// The in-band error event that ends a stream failing mid-way (the stream-error fault).
    fn fail(&mut self, r: &Render, message: &str) -> Bytes;
}

/// The message of the stream-error fault's in-band error.
pub const STREAM_ERROR_MESSAGE: &str = "Overloaded: the generation was interrupted";

fn dialect(api: Api) -> Box<dyn Dialect + Send> {
    match api {
        Api::Chat => Box::new(chat::Chat::default()),
        Api::Anthropic => Box::new(anthropic::Anthropic::default()),
        Api::Responses => Box::new(responses::Responses::default()),
    }
}

/// The body of a streamed answer on `api`: frames in order, with their times.
pub fn stream_events(
    api: Api,
    r: &Render,
    profile: &ProviderProfile,
    a: &AnswerPlan,
) -> Vec<Frame> {
    let mut d = dialect(api);
    let mut ev: Vec<Frame> = Vec::with_capacity(a.chunks.len() + 8);
    let mut push = |at_us: u64, bytes: Bytes, mark: Mark| ev.push(Frame { at_us, bytes, mark });
    if let Some(prelude) = r.echo.sse_prelude() {
        push(0, Bytes::from(prelude), Mark::Other);
    }
    for b in d.open(r, profile.early_role_chunk) {
        push(0, b, Mark::Other);
    }
    if a.keepalive_interval_us > 0 {
        let step = a.keepalive_interval_us;
        let mut at = step;
        while at < a.ttft_us {
            push(at, d.keepalive(), Mark::Other);
            at += step;
        }
    }
    for (i, c) in a.chunks.iter().enumerate() {
        if a.error_at_chunk == Some(i) {
            push(
                c.at_us,
                d.fail(r, STREAM_ERROR_MESSAGE),
                Mark::Last { truncated: false },
            );
            return ev;
        }
        let (before, token) = d.tokens(r, c.kind, &r.text(c.kind, c.first, c.count));
        for b in before {
            push(c.at_us, b, Mark::Other);
        }
        if a.truncate_at_chunk == Some(i) {
            // Stop mid-event: half of this token event, nothing after it.
            let cut = token.slice(..token.len() / 2);
            push(c.at_us, cut, Mark::Last { truncated: true });
            return ev;
        }
        push(c.at_us, token, Mark::Tokens(c.kind, c.count));
    }
    let end = a.end_us();
    let tail = d.finish(r, a);
    let n = tail.len();
    for (i, b) in tail.into_iter().enumerate() {
        let mark = if i + 1 == n {
            Mark::Last { truncated: false }
        } else {
            Mark::Other
        };
        push(end, b, mark);
    }
    ev
}

/// The body of a non-streamed answer on `api` (JSON).
pub fn body(api: Api, r: &Render, a: &AnswerPlan) -> String {
    match api {
        Api::Chat => chat::body(r, a),
        Api::Anthropic => anthropic::body(r, a),
        Api::Responses => responses::body(r, a),
    }
}

/// One `event: NAME` / `data: JSON` SSE event.
pub(crate) fn named_event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// What went wrong, for an error answer in the API's shape ([`error_response`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// HTTP 400: the request is not usable.
    InvalidRequest,
    /// HTTP 400: prompt and output cap exceed the context window (OpenAI's code
    /// `context_length_exceeded`; see [`crate::context_limit`]).
    ContextLengthExceeded,
    /// HTTP 404: no such provider.
    NotFound,
    /// HTTP 429: throttled.
    RateLimited,
    /// Overloaded: HTTP 529 on the Anthropic API, 503 on the OpenAI ones.
    Overloaded,
    /// HTTP 401: a wrong or missing API key.
    Unauthorized,
}

impl ErrorKind {
    /// The status on `api`.
    pub fn status(self, api: Api) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLengthExceeded => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Overloaded if api == Api::Anthropic => {
                StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
            }
            ErrorKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    /// OpenAI's `(type, code)`.
    fn openai(self) -> (&'static str, &'static str) {
        match self {
            ErrorKind::InvalidRequest => ("invalid_request_error", "invalid_request"),
            ErrorKind::ContextLengthExceeded => {
                ("invalid_request_error", "context_length_exceeded")
            }
            ErrorKind::NotFound => ("invalid_request_error", "model_not_found"),
            ErrorKind::RateLimited => ("rate_limit_error", "rate_limit_exceeded"),
            ErrorKind::Overloaded => ("server_error", "overloaded"),
            ErrorKind::Unauthorized => ("invalid_request_error", "invalid_api_key"),
        }
    }

    /// Anthropic's `error.type`.
    fn anthropic(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLengthExceeded => "invalid_request_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Unauthorized => "authentication_error",
        }
    }
}

/// An error body in the shape of `api`: OpenAI's `{"error":{"message","type","param","code"}}`
/// for Chat and Responses, Anthropic's `{"type":"error","error":{"type","message"}}`.
/// A hostile `echo` echoes the key into every field and pads the message.
pub fn error_json(
    api: Api,
    echo: &Echo,
    kind: ErrorKind,
    message: &str,
    param: Option<&str>,
) -> Value {
    let message = echo.padded(message);
    match api {
        Api::Anthropic => json!({"type": "error", "error": {
            "type": echo.field(kind.anthropic()),
            "message": message,
        }}),
        Api::Chat | Api::Responses => {
            let (kind, code) = kind.openai();
            let param = echo.key.as_deref().or(param);
            json!({"error": {
                "message": message,
                "type": echo.field(kind),
                "param": param,
                "code": echo.field(code),
            }})
        }
    }
}

/// An error answer in the shape of `api` ([`error_json`]) with its status ([`ErrorKind::status`]);
/// a hostile `echo` also goes into the reason phrase and headers.
pub fn error_response(
    api: Api,
    echo: &Echo,
    kind: ErrorKind,
    message: &str,
    param: Option<&str>,
) -> Response {
    let body = error_json(api, echo, kind, message, param);
    let mut resp = (
        kind.status(api),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    echo.apply(&mut resp);
    resp
}
