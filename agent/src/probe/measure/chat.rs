//! The Chat Completions reader: `data:` payloads (`[DONE]`, the common chunk by the fast
//! decoder, anything else by the full one: `crate::probe::chunk`), `event: error`, and a
//! whole `chat.completion` body.

use std::time::Instant;

use latmesh_core::record::Outcome;

use crate::probe::chunk::{self, ChunkWire, DeltaWire, ProviderError, ToolCallWire};
use crate::probe::outcome::Failure;
use crate::probe::sse::SseEvent;

use super::state::State;
use super::tokens::Output;

impl State {
    /// One event of a Chat Completions stream read at `at` (inlined into the per-event
    /// dispatch: it runs for every event).
    #[inline]
    pub(super) fn on_chat_event(&mut self, at: Instant, ev: SseEvent<'_>) {
        match ev {
            SseEvent::Data { data, complete } => self.on_data(at, data.trim_ascii(), complete),
            SseEvent::Named { event, data, .. } => {
                if event == b"error" {
                    self.provider_failure(ProviderError::from_payload(data), "event: error");
                }
            }
            SseEvent::ErrorField(v) => {
                self.provider_failure(ProviderError::from_payload(v), "error: field")
            }
        }
    }

    /// One `data:` payload read at `at`: `[DONE]`, or a chunk (read by the fast decoder when
    /// it can, else by the full one; half a payload cut by the end of the body is left to
    /// the stream's end to judge). Inlined: it runs for every event.
    #[inline]
    fn on_data(&mut self, at: Instant, data: &[u8], complete: bool) {
        if data.is_empty() {
            return;
        }
        if data == b"[DONE]" {
            self.done_at.get_or_insert(at);
            return;
        }
        let index = self.payloads;
        // The common chunk, read in one pass without building anything (or, when it is the
        // previous one with another token, not parsed again); the full decoder for
        // everything else (see `chunk::decode_lite` and `chunk::decode_cached`).
        let mut cache = std::mem::take(&mut self.lite);
        let lite = chunk::decode_cached(data, &mut cache);
        if let Some(l) = lite {
            self.payloads = self.payloads.saturating_add(1);
            self.on_answered(l.model, l.system_fingerprint);
            if self.reasoning_field.is_none() {
                self.reasoning_field = l.reasoning_field;
            }
            self.on_tokens(at, index, l.content, l.reasoning, false);
            if let Some(fr) = l.finish_reason {
                self.on_finish_reason(fr);
            }
        }
        let lite = lite.is_some();
        self.lite = cache;
        if lite {
            return;
        }
        match chunk::decode(data) {
            Ok(c) => {
                self.payloads = self.payloads.saturating_add(1);
                self.on_chunk(at, index, &c, true);
            }
            // Half a payload at the end of the body is a truncation, judged by what came before.
            Err(_) if !complete => {}
            Err(e) => {
                self.payloads = self.payloads.saturating_add(1);
                self.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!("payload {index} is not a JSON object: {e}"),
                ));
            }
        }
    }

    /// Accounts one decoded payload: a streamed chunk (`streamed`) or a whole completion.
    fn on_chunk(&mut self, at: Instant, index: u32, c: &ChunkWire<'_>, streamed: bool) {
        self.on_answered(c.model(), c.system_fingerprint());
        let delta = if streamed { c.delta() } else { c.message() };
        if let Some(d) = delta {
            self.on_delta(at, index, d);
        }
        if let Some(fr) = c.finish_reason() {
            self.on_finish_reason(fr);
        }
        if let Some(u) = c.usage() {
            chunk::merge_usage(&mut self.usage, u);
        }
        if let Some(e) = c.error() {
            self.provider_failure(e, "error object in the response");
        }
    }

    /// The delta of a streamed chunk, or the message of a whole completion.
    fn on_delta(&mut self, at: Instant, index: u32, d: &DeltaWire<'_>) {
        for t in &d.tool_calls.0 {
            self.add_tool_fragment(t);
        }
        if let Some(f) = &d.function_call.0 {
            let t = ToolCallWire {
                function: chunk::Obj(Some(f.clone())),
                ..ToolCallWire::default()
            };
            self.add_tool_fragment(&t);
        }
        let reasoning = d.reasoning();
        if !reasoning.is_empty() && self.reasoning_field.is_none() {
            self.reasoning_field = d.reasoning_field();
        }
        let output = Output {
            content: &d.content(),
            reasoning: &reasoning,
            tool: d.has_tool_fragment(),
            other: d.has_audio_data(),
        };
        self.on_output(at, index, output);
    }

    /// A whole Chat Completions body (see [`State::on_json_body`]), trimmed and not empty.
    pub(super) fn on_chat_json_body(&mut self, at: Instant, body: &[u8], streamed_request: bool) {
        let c = match chunk::decode(body) {
            Ok(c) => c,
            Err(e) => {
                self.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!("body is not a JSON object: {e}"),
                ));
                return;
            }
        };
        if let Some(e) = c.error() {
            self.provider_failure(e, "error object in the response");
            return;
        }
        if c.primary().is_none() {
            self.fail(Failure::new(
                Outcome::ProtocolError,
                "completion without choices",
            ));
            return;
        }
        self.payloads = 1;
        self.on_chunk(at, 0, &c, false);
        if streamed_request {
            self.fail(Failure::new(
                Outcome::ProtocolError,
                "streaming request answered with a whole JSON completion (not an event stream)",
            ));
        }
    }
}
