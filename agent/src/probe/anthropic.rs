//! The Anthropic Messages API: its request body, and how its events and documents become measurements.
//!
//! PLACEHOLDER (issue 18, being built): every response is a `protocol_error`.

use std::time::Instant;

use latmesh_core::record::Outcome;

use super::ProbeRequest;
use super::measure::State;
use super::outcome::Failure;
use super::sse::SseEvent;

/// The JSON body of `req`.
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"model": req.model_id, "stream": req.stream}))
        .expect("the request body serializes")
}

/// One event of a stream, read at `at`.
pub(super) fn on_event(st: &mut State, _at: Instant, _ev: SseEvent<'_>) {
    st.fail(Failure::new(
        Outcome::ProtocolError,
        "api = \"anthropic\" is not read yet",
    ));
}

/// A body read whole (`streamed_request`: the request asked for a stream).
pub(super) fn on_json_body(st: &mut State, _at: Instant, _body: &[u8], _streamed_request: bool) {
    st.fail(Failure::new(
        Outcome::ProtocolError,
        "api = \"anthropic\" is not read yet",
    ));
}

/// The API's own headers (`anthropic-version`), added to `h`.
pub fn headers(_req: &ProbeRequest<'_>, _h: &mut http::HeaderMap) {}
