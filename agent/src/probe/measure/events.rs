//! Each event of a stream, or a body read whole, handed to its API's reader: [`super::chat`],
//! `crate::probe::anthropic` or `crate::probe::responses`.

use std::time::Instant;

use latmesh_core::api::Api;
use latmesh_core::record::Outcome;

use crate::probe::outcome::Failure;
use crate::probe::sse::SseEvent;
use crate::probe::{anthropic, responses};

use super::state::State;

impl State {
    /// One event read at `at`. (Inlined into the body's drain loop, as it was when this
    /// lived in one file with it: it runs for every event.)
    #[inline]
    pub(super) fn on_event(&mut self, at: Instant, ev: SseEvent<'_>) {
        // The response ended at `[DONE]`: what follows (drained so the connection can be
        // reused) counts as bytes only; it changes neither timings, tokens nor the outcome.
        if self.saw_done() {
            return;
        }
        match self.api {
            Api::Chat => self.on_chat_event(at, ev),
            Api::Anthropic => anthropic::on_event(self, at, ev),
            Api::Responses => responses::on_event(self, at, ev),
        }
    }

    /// A body read as one JSON document: a whole completion (`streamed_request = false`), or
    /// a JSON body answered to a streaming request (a protocol error whose fields are still
    /// read). The document is payload 0, stamped at the end of the body.
    pub(super) fn on_json_body(&mut self, at: Instant, body: &[u8], streamed_request: bool) {
        self.whole_body = true;
        let body = body
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(body)
            .trim_ascii();
        if body.is_empty() {
            self.fail(Failure::new(Outcome::ProtocolError, "empty 200 body"));
            return;
        }
        match self.api {
            Api::Chat => self.on_chat_json_body(at, body, streamed_request),
            Api::Anthropic => anthropic::on_json_body(self, at, body, streamed_request),
            Api::Responses => responses::on_json_body(self, at, body, streamed_request),
        }
    }
}
