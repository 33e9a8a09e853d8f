//! `State`: everything measured so far in one response, and its primitives: the payload
//! count, the terminal event, the first failure, usage, the finish reason, what answered.
//! The stamping of token-bearing payloads is [`super::tokens`]; each API's reader
//! ([`super::chat`], `crate::probe::anthropic`, `crate::probe::responses`) turns its events
//! into these calls.

use std::time::Instant;

use latmesh_core::answered_model::MAX_ANSWERED_BYTES;
use latmesh_core::api::Api;
use latmesh_core::provider_bounds;
use latmesh_core::record::{Outcome, Usage};

use crate::probe::ToolCall;
use crate::probe::chunk::{self, ProviderError};
use crate::probe::outcome::{Failure, is_abort_finish};
use crate::probe::think_tags::ThinkTags;

/// Everything measured so far (the parser lives beside it so events can borrow the parser
/// while this is updated).
#[derive(Debug, Default)]
pub(in crate::probe) struct State {
    /// The API whose events are read (each API's module turns its events into the calls
    /// below: [`crate::probe::anthropic`], [`crate::probe::responses`]; Chat Completions here).
    pub(in crate::probe) api: Api,
    pub(super) keep_text: bool,
    pub(super) first_token: Option<(Instant, u32)>,
    /// When the second token-bearing payload was read (TTST).
    pub(super) second_token: Option<Instant>,
    pub(super) first_content: Option<(Instant, u32)>,
    /// Payload index of the first payload with reasoning text.
    pub(super) first_reasoning: Option<u32>,
    pub(super) last_token_at: Option<Instant>,
    pub(super) done_at: Option<Instant>,
    pub(super) itl_gaps_us: Vec<u64>,
    /// Keep the read instant of every token-bearing payload in `token_read_at`.
    pub(super) keep_timestamps: bool,
    pub(super) token_read_at: Vec<Instant>,
    /// The fast decoder's template and scratch buffer (`chunk::decode_cached`).
    pub(super) lite: chunk::LiteCache,
    /// The counters below saturate: a body is as long as `max_response_bytes` allows, which
    /// has no upper bound.
    pub(super) payloads: u32,
    pub(super) token_payloads: u32,
    pub(super) content_chunks: u32,
    pub(super) reasoning_chunks: u32,
    pub(super) tool_call_chunks: u32,
    pub(super) content_text: String,
    pub(super) reasoning_text: String,
    pub(super) tool_calls: Vec<ToolCall>,
    pub(super) usage: Option<Usage>,
    pub(super) finish_reason: Option<String>,
    pub(super) failure: Option<Failure>,
    /// The body was read as one JSON document (no token timing).
    pub(super) whole_body: bool,
    /// The first non-empty `model` and `system_fingerprint`, unscrubbed, at most
    /// [`KEPT_ANSWERED_BYTES`].
    pub(super) answered_model: Option<String>,
    pub(super) system_fingerprint: Option<String>,
    /// What an Anthropic Messages stream needs across events ([`crate::probe::anthropic`]).
    pub(in crate::probe) anthropic: crate::probe::anthropic::blocks::StreamState,
    /// Reasoning inside `content` between declared tags ([`super::Measurement::with_reasoning_tags`]).
    /// (Boxed: taken out and put back for every payload.)
    pub(super) think: Option<Box<ThinkTags>>,
    /// Reasoning arrived in a reasoning field of the API (not split out of `content`).
    pub(super) field_reasoning: bool,
    /// Where the first reasoning came from: a Chat Completions field (`reasoning_content`,
    /// `reasoning`, …), `thinking` (Anthropic), `reasoning` (a Responses item),
    /// `redacted_thinking`, or `reasoning_tags` (split out of `content`).
    pub(in crate::probe) reasoning_field: Option<&'static str>,
    /// The first payload whose content the tags split as reasoning, and when it was read.
    pub(super) first_tag_reasoning: Option<(Instant, u32)>,
    /// The answer's reasoning items (Responses API), kept with the texts (`keep_text`) for a
    /// later turn to pass back.
    pub(super) reasoning_items: Vec<serde_json::Value>,
    /// Reasoning text arrived (a reasoning field, a thinking delta, text between declared
    /// tags): the reasoning was streamed.
    pub(super) reasoning_streamed: bool,
    /// A reasoning block or item was seen ([`State::on_reasoning_block`]).
    pub(super) reasoning_block: bool,
    /// Payloads that carried only reasoning without text ([`State::on_hidden_reasoning`]).
    pub(super) hidden_reasoning_payloads: u32,
    /// When the first token-bearing payload other than hidden reasoning was read: where the
    /// streamed span of TPOT begins when reasoning was not streamed ([`super::decode`]).
    pub(super) first_streamed_token: Option<Instant>,
    /// The recorded failure came from an aborting finish reason or a provider error without
    /// a type, code or message: a provider error object read later replaces it
    /// ([`State::provider_failure`]).
    pub(super) failure_is_bare: bool,
    /// What a Responses stream needs across its events ([`crate::probe::responses`]).
    pub(in crate::probe) responses: crate::probe::responses::items::StreamItems,
    /// The body has ended: the events read now are the last, unterminated one (an API whose
    /// events are named reads a payload cut here as a truncation, as `complete: false`).
    pub(super) body_ending: bool,
}

/// Bytes of a `model` or `system_fingerprint` kept before scrubbing (cut to
/// [`MAX_ANSWERED_BYTES`] after): enough for a key fragment at the cut to still be found.
const KEPT_ANSWERED_BYTES: usize = 4 * MAX_ANSWERED_BYTES;

/// Keeps `value` in `slot` when the slot is empty and `value` is not, cut to
/// [`KEPT_ANSWERED_BYTES`] on a character boundary.
fn keep_first(slot: &mut Option<String>, value: &str) {
    if slot.is_some() || value.is_empty() {
        return;
    }
    let mut end = value.len().min(KEPT_ANSWERED_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    *slot = Some(value[..end].to_string());
}

impl State {
    pub(super) fn saw_done(&self) -> bool {
        self.done_at.is_some()
    }

    /// The stream's terminal event arrived at `at` (`[DONE]`; `message_stop` of the
    /// Anthropic API; `response.completed` of the Responses API): `e2e` is stamped there and
    /// later events change nothing.
    pub(in crate::probe) fn mark_done(&mut self, at: Instant) {
        self.done_at.get_or_insert(at);
    }

    /// Counts one decoded payload (an event's JSON, or a whole body); returns its 0-based
    /// index among the response's payloads.
    pub(in crate::probe) fn count_payload(&mut self) -> u32 {
        let index = self.payloads;
        self.payloads = self.payloads.saturating_add(1);
        index
    }

    /// Merges the usage a payload reported (field by field, the later value wins:
    /// [`chunk::merge_usage`]).
    pub(in crate::probe) fn add_usage(&mut self, usage: Usage) {
        chunk::merge_usage(&mut self.usage, usage);
    }

    /// Records `f` unless an earlier failure is recorded.
    pub(in crate::probe) fn fail(&mut self, f: Failure) {
        if self.failure.is_none() {
            self.failure = Some(f);
        }
    }

    /// Records the provider's error `e` as a `stream_error` (`what` is the message when it
    /// has none).
    ///
    /// The error object wins over a bare failure (docs/metrics.md, "Parsing rules"): when
    /// the failure recorded so far is a `stream_error` that names nothing (an aborting
    /// finish reason such as `finish_reason: "error"`, or an earlier error without a type,
    /// code or message), an error that names something replaces it, in the same payload or
    /// a later one, so the record keeps the provider's code and message.
    pub(in crate::probe) fn provider_failure(&mut self, e: ProviderError, what: &str) {
        let bare = e.kind.is_none() && e.code.is_none() && e.message.is_none();
        let message = e.message.clone().unwrap_or_else(|| what.to_string());
        let f = Failure {
            outcome: Outcome::StreamError,
            error_type: e.kind.or(e.code.clone()),
            error_code: e.code,
            message,
        };
        let replaces = !bare
            && self.failure_is_bare
            && self
                .failure
                .as_ref()
                .is_some_and(|old| old.outcome == Outcome::StreamError);
        if replaces {
            self.failure = Some(f);
            self.failure_is_bare = false;
        } else if self.failure.is_none() {
            self.failure = Some(f);
            self.failure_is_bare = bare;
        }
    }

    /// The `model` and `system_fingerprint` of a payload (`""` when absent): the first
    /// non-empty ones are kept.
    pub(in crate::probe) fn on_answered(&mut self, model: &str, system_fingerprint: &str) {
        keep_first(&mut self.answered_model, model);
        keep_first(&mut self.system_fingerprint, system_fingerprint);
    }

    /// A non-empty `finish_reason`.
    pub(in crate::probe) fn on_finish_reason(&mut self, fr: &str) {
        // Kept as far as the record's bound needs (a 3 MB one is not held whole).
        let kept = provider_bounds::prefix(
            fr,
            provider_bounds::FINISH_REASON.max_bytes * provider_bounds::REDACT_WINDOW_FACTOR,
        );
        if self.finish_reason.as_deref() != Some(kept) {
            self.finish_reason = Some(kept.to_string());
        }
        if is_abort_finish(fr) && self.failure.is_none() {
            self.failure = Some(Failure::new(
                Outcome::StreamError,
                format!("generation aborted: finish_reason {fr}"),
            ));
            self.failure_is_bare = true;
        }
    }

    /// Whether any tool call was read.
    pub(in crate::probe) fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }

    /// Whether a tool call with slot `index` was read (`None`: no slot named).
    pub(in crate::probe) fn has_tool_call_at(&self, index: Option<u32>) -> bool {
        index.is_some_and(|i| self.tool_calls.iter().any(|c| c.index == i))
    }

    /// Whether a reasoning item was kept.
    pub(in crate::probe) fn has_reasoning_items(&self) -> bool {
        !self.reasoning_items.is_empty()
    }

    /// Whether the body has ended: an event read now was cut by the end of the body (it
    /// lacks its closing blank line), whatever its kind.
    pub(in crate::probe) fn body_ending(&self) -> bool {
        self.body_ending
    }

    /// Whether generated text is kept (`keep_text`): an API's module keeps what a later
    /// turn sends back only then.
    pub(in crate::probe) fn keeps_text(&self) -> bool {
        self.keep_text
    }

    /// Keeps one reasoning item of the answer (its encrypted content is opaque: never
    /// scrubbed nor cut, so it stays valid to send back) when texts are kept.
    pub(in crate::probe) fn keep_reasoning_item(&mut self, item: serde_json::Value) {
        if self.keep_text {
            self.reasoning_items.push(item);
        }
    }
}
