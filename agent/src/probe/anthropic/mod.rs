//! The Anthropic Messages API (`api = "anthropic"`, as Claude Code speaks it): its request
//! body and headers, and how its events and documents become measurements
//! (<https://docs.anthropic.com/en/api/messages>, streaming events:
//! <https://docs.anthropic.com/en/docs/build-with-claude/streaming>). docs/metrics.md,
//! "Anthropic Messages API", is the contract; in short:
//!
//! * request: `POST {base_url}/messages` with `anthropic-version: 2023-06-01`; `system`
//!   (and `developer`) messages go to the top-level `system` string (several joined by a
//!   blank line); an
//!   assistant message that kept its thinking blocks sends them back before its text;
//! * each event is read by its JSON `type` (the `event:` line only when `type` is missing):
//!   `message_start` (model, usage), `content_block_start` (a `text`, `thinking`,
//!   `redacted_thinking` or `*tool_use*` block, whose initial text counts; a `*tool_result`
//!   block carries no token; another block's text is generated output, not the answer),
//!   `content_block_delta` (read by its `type`: `text_delta` is content, `thinking_delta`
//!   reasoning, `input_json_delta` a tool-call fragment of any block, `signature_delta` no
//!   token, `citations_delta` no token, a delta without a type by its fields, another type
//!   with text generated output that is not the answer), `message_delta` (`stop_reason`, cumulative
//!   usage), `message_stop` (the terminal event: `e2e`), `ping` (ignored, not a payload),
//!   `error` (a `stream_error` with the error's type); any other type is a payload with no
//!   token; a `data: [DONE]` (gateways translating from Chat Completions) ends it too;
//! * a body read whole is a `{"type":"message","content":[blocks],…}` or an error object.

pub mod blocks;

use std::borrow::Cow;
use std::time::Instant;

use http::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

use latmesh_core::prompts::{Message, ThinkingBlock};
use latmesh_core::record::{Outcome, Usage};

use super::ProbeRequest;
use super::chunk::{Args, ErrorWire, FunctionWire, Many, Num, Obj, ProviderError, Text};
use super::chunk::{ToolCallWire, decode_object};
use super::measure::state::State;
use super::outcome::Failure;
use super::sse::SseEvent;

/// The `anthropic-version` header sent (the only version the API has: what the SDKs and
/// Claude Code send).
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `user-agent` of a request to a provider that names none (see
/// [`super::request::default_user_agent`]).
pub const DEFAULT_USER_AGENT: &str = "Anthropic/Python 2.15.0";

/// The JSON body of `req`: `model`, the output cap (`max_tokens`, or the shape's
/// `max_tokens_field`), `system` when the prompt has system messages, `messages`, `stream`,
/// `temperature`/`top_p` when set, then the shape's `extra_body`
/// ([`super::shape::apply_shape`]: `thinking = { type = "enabled", budget_tokens = N }`
/// goes there).
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
    let mut system: Vec<&str> = Vec::new();
    let mut messages = Vec::with_capacity(req.messages.len());
    for m in req.messages {
        match m.role.as_str() {
            "system" | "developer" => system.push(&m.content),
            _ => messages.push(message_param(m)),
        }
    }
    let mut b = serde_json::Map::new();
    b.insert("model".into(), req.model_id.into());
    b.insert("max_tokens".into(), req.max_tokens.into());
    if !system.is_empty() {
        b.insert("system".into(), system.join("\n\n").into());
    }
    b.insert("messages".into(), messages.into());
    b.insert("stream".into(), req.stream.into());
    if let Some(t) = req.temperature {
        b.insert("temperature".into(), t.into());
    }
    if let Some(p) = req.top_p {
        b.insert("top_p".into(), p.into());
    }
    // `max_tokens_field`, then the scenario's and provider's `extra_body` (e.g. `thinking`).
    super::shape::apply_shape(&mut b, req.shape);
    serde_json::to_vec(&b).expect("the request body serializes")
}

/// One message of `messages`: its text as a string, or, for an assistant message that kept
/// thinking blocks, the blocks then a `text` block (left out when empty: the API refuses
/// an empty text block).
fn message_param(m: &Message) -> serde_json::Value {
    match &m.thinking_blocks {
        Some(blocks) if m.role == "assistant" && !blocks.is_empty() => {
            let mut content: Vec<serde_json::Value> = blocks
                .iter()
                .map(|b| serde_json::to_value(b).expect("a thinking block serializes"))
                .collect();
            if !m.content.is_empty() {
                content.push(serde_json::json!({"type": "text", "text": m.content}));
            }
            serde_json::json!({"role": m.role, "content": content})
        }
        _ => serde_json::json!({"role": m.role, "content": m.content}),
    }
}

/// The API's own headers, added to `h`: `anthropic-version` (the caller's headers, added
/// after, may replace it).
pub fn headers(_req: &ProbeRequest<'_>, h: &mut HeaderMap) {
    h.insert(
        HeaderName::from_static("anthropic-version"),
        HeaderValue::from_static(ANTHROPIC_VERSION),
    );
}

/// `stop_reason` in the Chat Completions vocabulary every record uses: `end_turn` and
/// `stop_sequence` → `stop`, `max_tokens` and `model_context_window_exceeded` → `length`,
/// `tool_use` → `tool_calls`, `refusal` → `content_filter`; any other (`pause_turn`, a
/// future one) as sent.
pub fn finish_reason(stop_reason: &str) -> &str {
    match stop_reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        other => other,
    }
}

/// An event's data (every event shape in one lenient struct: a field of another type is
/// absent).
#[derive(Deserialize, Default)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct EventWire<'a> {
    #[serde(rename = "type")]
    kind: Text<'a>,
    index: Num,
    message: Obj<MessageWire<'a>>,
    content_block: Obj<BlockWire<'a>>,
    delta: Obj<DeltaWire<'a>>,
    usage: Obj<UsageWire>,
    error: ErrorWire<'a>,
}

/// A message: `message_start`'s, or a body read whole.
#[derive(Deserialize, Default)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct MessageWire<'a> {
    #[serde(rename = "type")]
    kind: Text<'a>,
    model: Text<'a>,
    content: Many<BlockWire<'a>>,
    stop_reason: Text<'a>,
    usage: Obj<UsageWire>,
    error: ErrorWire<'a>,
}

/// A content block (whole in a body, its start in a stream).
#[derive(Deserialize, Default)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct BlockWire<'a> {
    #[serde(rename = "type")]
    kind: Text<'a>,
    text: Text<'a>,
    thinking: Text<'a>,
    signature: Text<'a>,
    data: Text<'a>,
    id: Text<'a>,
    name: Text<'a>,
    input: Args<'a>,
}

/// A `content_block_delta`'s or `message_delta`'s `delta`.
#[derive(Deserialize, Default)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct DeltaWire<'a> {
    #[serde(rename = "type")]
    kind: Text<'a>,
    text: Text<'a>,
    thinking: Text<'a>,
    signature: Text<'a>,
    partial_json: Text<'a>,
    stop_reason: Text<'a>,
}

/// Anthropic's `usage` (on `message_start`, cumulative on `message_delta`, on a message).
#[derive(Deserialize, Default)]
#[serde(default)]
struct UsageWire {
    input_tokens: Num,
    output_tokens: Num,
    cache_read_input_tokens: Num,
    cache_creation_input_tokens: Num,
    output_tokens_details: Obj<OutputDetails>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct OutputDetails {
    thinking_tokens: Num,
}

fn count(n: Num) -> Option<u32> {
    n.0.map(|v| u32::try_from(v).unwrap_or(u32::MAX))
}

impl UsageWire {
    /// The record's usage: `prompt_tokens` = `input_tokens` + `cache_read_input_tokens` +
    /// `cache_creation_input_tokens` (Anthropic's `input_tokens` counts only the tokens after
    /// the last cache breakpoint; the sum is every prompt token, as Chat Completions'
    /// `prompt_tokens`), `cached_tokens` = `cache_read_input_tokens`, `completion_tokens` =
    /// `output_tokens` (thinking included), `reasoning_tokens` =
    /// `output_tokens_details.thinking_tokens`; no total. `None` when it holds no count.
    fn to_usage(&self) -> Option<Usage> {
        let cached = count(self.cache_read_input_tokens);
        let created = count(self.cache_creation_input_tokens);
        let u = Usage {
            prompt_tokens: count(self.input_tokens).map(|i| {
                i.saturating_add(cached.unwrap_or(0))
                    .saturating_add(created.unwrap_or(0))
            }),
            completion_tokens: count(self.output_tokens),
            total_tokens: None,
            reasoning_tokens: self
                .output_tokens_details
                .0
                .as_ref()
                .and_then(|d| count(d.thinking_tokens)),
            cached_tokens: cached,
        };
        (u != Usage::default()).then_some(u)
    }
}

fn add_usage(st: &mut State, u: &Obj<UsageWire>) {
    if let Some(u) = u.0.as_ref().and_then(UsageWire::to_usage) {
        st.add_usage(u);
    }
}

/// Adds a tool-call fragment (any of `id`, `name`, `args` may be empty) to call `ordinal`.
fn tool_fragment(st: &mut State, ordinal: u32, id: &str, name: &str, args: &str) {
    let t = ToolCallWire {
        index: Num(Some(u64::from(ordinal))),
        id: Text(Some(Cow::Borrowed(id))),
        function: Obj(Some(FunctionWire {
            name: Text(Some(Cow::Borrowed(name))),
            arguments: Args(Some(Cow::Borrowed(args))),
        })),
    };
    st.add_tool_fragment(&t);
}

/// The arguments in a `tool_use` block's `input`: its JSON text, `""` for the empty object
/// a stream starts a block with (the arguments follow as `input_json_delta`s).
fn block_input<'b>(b: &'b BlockWire<'_>) -> &'b str {
    match b.input.0.as_deref() {
        Some("{}") | None => "",
        Some(s) => s,
    }
}

/// One event of a stream, read at `at`.
pub(super) fn on_event(st: &mut State, at: Instant, ev: SseEvent<'_>) {
    let (name, data, complete) = match ev {
        SseEvent::Data { data, complete } => (&b""[..], data, complete),
        SseEvent::Named {
            event,
            data,
            complete,
        } => (event, data, complete),
        SseEvent::ErrorField(v) => {
            st.provider_failure(ProviderError::from_payload(v), "error: field");
            return;
        }
    };
    let data = data.trim_ascii();
    if data.is_empty() {
        return;
    }
    // A terminator some gateways translating from Chat Completions add.
    if data == b"[DONE]" {
        st.mark_done(at);
        return;
    }
    let e: EventWire<'_> = match decode_object(data) {
        Ok(e) => e,
        Err(_) if name == b"error" => {
            st.count_payload();
            st.provider_failure(ProviderError::from_payload(data), "event: error");
            return;
        }
        // Half an event at the end of the body: a truncation, judged by what came before.
        Err(_) if !complete => return,
        Err(err) => {
            let index = st.count_payload();
            st.fail(Failure::new(
                Outcome::ProtocolError,
                format!("event {index} is not a JSON object: {err}"),
            ));
            return;
        }
    };
    let kind: &[u8] = match e.kind.as_str() {
        "" => name,
        k => k.as_bytes(),
    };
    // A keep-alive, like a comment line: not a payload.
    if kind == b"ping" {
        return;
    }
    let index = st.count_payload();
    if kind == b"error" || !matches!(e.error, ErrorWire::Absent) {
        st.provider_failure(ProviderError::from_payload(data), "event: error");
        return;
    }
    let block = e.index.0.unwrap_or(0);
    match kind {
        b"message_start" => {
            if let Some(m) = &e.message.0 {
                st.on_answered(m.model.as_str(), "");
                add_usage(st, &m.usage);
            }
        }
        b"content_block_start" => {
            if let Some(b) = &e.content_block.0 {
                on_block_start(st, at, index, block, b);
            }
        }
        b"content_block_delta" => {
            if let Some(d) = &e.delta.0 {
                on_delta(st, at, index, block, d, data);
            }
        }
        b"message_delta" => {
            if let Some(d) = &e.delta.0
                && !d.stop_reason.as_str().is_empty()
            {
                st.on_finish_reason(finish_reason(d.stop_reason.as_str()));
            }
        }
        b"message_stop" => st.mark_done(at),
        // `content_block_stop`, and event types added later: payloads without a token.
        _ => {}
    }
    // Usage wherever an event carries it (`message_delta`'s is cumulative: the last wins).
    add_usage(st, &e.usage);
}

/// Whether a content block `type` is a call of a tool whose input the model writes:
/// `tool_use`, `server_tool_use`, `mcp_tool_use` and any type naming `tool_use` added later
/// (a tool's result excepted).
fn is_tool_block(kind: &str) -> bool {
    kind.contains("tool_use") && !is_result_block(kind)
}

/// Whether a content block `type` is a tool's result (`web_search_tool_result`,
/// `mcp_tool_result`, …): written by the tool, not generated by the model.
fn is_result_block(kind: &str) -> bool {
    kind.ends_with("tool_result")
}

/// A `content_block_start`: a `text` block's initial text is the answer; a thinking block
/// is kept (with `keep_text`) and its initial thinking counts; a tool call starts; a tool's
/// result carries no token; a block of a type latmesh does not know that starts with text
/// is generated output, not the answer (docs/metrics.md, "Parsing rules").
fn on_block_start(st: &mut State, at: Instant, index: u32, block: u64, b: &BlockWire<'_>) {
    match b.kind.as_str() {
        // (A block without a `type`, from a lenient gateway, is read as text.)
        "text" | "" => st.on_tokens(at, index, b.text.as_str(), "", false),
        "thinking" => {
            st.on_reasoning_block();
            if st.keeps_text() {
                st.anthropic.start_thinking(
                    block,
                    ThinkingBlock::Thinking {
                        thinking: b.thinking.as_str().to_string(),
                        signature: b.signature.as_str().to_string(),
                    },
                );
            }
            st.on_tokens(at, index, "", b.thinking.as_str(), false);
        }
        "redacted_thinking" => {
            st.on_reasoning_block();
            if st.keeps_text() {
                st.anthropic.start_thinking(
                    block,
                    ThinkingBlock::RedactedThinking {
                        data: b.data.as_str().to_string(),
                    },
                );
            }
            if !b.data.as_str().is_empty() {
                st.on_hidden_reasoning(at, index);
            }
        }
        k if is_tool_block(k) => {
            let ordinal = st.anthropic.tool(block);
            let args = block_input(b);
            tool_fragment(st, ordinal, b.id.as_str(), b.name.as_str(), args);
            let generated = !(b.id.as_str().is_empty() && b.name.as_str().is_empty());
            st.on_tokens(at, index, "", "", generated || !args.is_empty());
        }
        k if is_result_block(k) => {}
        // A block latmesh does not know: its text is not the answer's, but it was
        // generated.
        _ if !b.text.as_str().is_empty() => st.on_other_output(at, index),
        _ => {}
    }
}

/// A `content_block_delta`, read by its `type` (docs/metrics.md, "Parsing rules"):
/// `text_delta` is the answer, `thinking_delta` reasoning, `input_json_delta` tool-call
/// input (of any block: a tool kind latmesh does not list too), `signature_delta` the
/// thinking block's signature (no token), `citations_delta` no token; a delta without a
/// `type` is read by its fields; a type latmesh does not know that carries a non-empty
/// string is generated output, not the answer. `data` is the event's JSON.
fn on_delta(st: &mut State, at: Instant, index: u32, block: u64, d: &DeltaWire<'_>, data: &[u8]) {
    let kind = d.kind.as_str();
    let known = matches!(
        kind,
        "" | "text_delta" | "thinking_delta" | "input_json_delta" | "signature_delta"
    );
    if !known {
        if kind != "citations_delta" && delta_has_text(data) {
            st.on_other_output(at, index);
        }
        return;
    }
    let (thinking, signature) = (d.thinking.as_str(), d.signature.as_str());
    if st.keeps_text()
        && !(thinking.is_empty() && signature.is_empty())
        && let ThinkingBlock::Thinking {
            thinking: t,
            signature: s,
        } = st.anthropic.thinking(block)
    {
        t.push_str(thinking);
        s.push_str(signature);
    }
    if !signature.is_empty() {
        st.on_reasoning_block();
    }
    let args = d.partial_json.as_str();
    if !args.is_empty() {
        let ordinal = st.anthropic.tool(block);
        tool_fragment(st, ordinal, "", "", args);
    }
    st.on_tokens(at, index, d.text.as_str(), thinking, !args.is_empty());
}

/// Whether the `delta` of event `data` has a member, other than its `type`, that is a
/// non-empty string (read again, only for a delta type latmesh does not know).
fn delta_has_text(data: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Event {
        #[serde(default)]
        delta: serde_json::Map<String, serde_json::Value>,
    }
    serde_json::from_slice::<Event>(data).is_ok_and(|e| {
        e.delta
            .iter()
            .any(|(k, v)| k != "type" && v.as_str().is_some_and(|s| !s.is_empty()))
    })
}

/// A body read whole (`streamed_request`: the request asked for a stream): a message, one
/// payload, whose text, thinking and tool-use blocks are read together; or an error object.
pub(super) fn on_json_body(st: &mut State, at: Instant, body: &[u8], streamed_request: bool) {
    let m: MessageWire<'_> = match decode_object(body) {
        Ok(m) => m,
        Err(e) => {
            st.fail(Failure::new(
                Outcome::ProtocolError,
                format!("body is not a JSON object: {e}"),
            ));
            return;
        }
    };
    if m.kind.as_str() == "error" || !matches!(m.error, ErrorWire::Absent) {
        st.provider_failure(
            ProviderError::from_payload(body),
            "error object in the response",
        );
        return;
    }
    if m.kind.as_str() != "message" && m.content.0.is_empty() {
        st.fail(Failure::new(
            Outcome::ProtocolError,
            format!(
                "body is not a Messages API message (type {:?})",
                m.kind.as_str()
            ),
        ));
        return;
    }
    let index = st.count_payload();
    st.on_answered(m.model.as_str(), "");
    let (mut content, mut reasoning) = (String::new(), String::new());
    let (mut tool, mut hidden) = (false, false);
    for (block, b) in (0u64..).zip(&m.content.0) {
        match b.kind.as_str() {
            "thinking" => {
                reasoning.push_str(b.thinking.as_str());
                if st.keeps_text() {
                    st.anthropic.start_thinking(
                        block,
                        ThinkingBlock::Thinking {
                            thinking: b.thinking.as_str().to_string(),
                            signature: b.signature.as_str().to_string(),
                        },
                    );
                }
            }
            "redacted_thinking" => {
                hidden |= !b.data.as_str().is_empty();
                if st.keeps_text() {
                    st.anthropic.start_thinking(
                        block,
                        ThinkingBlock::RedactedThinking {
                            data: b.data.as_str().to_string(),
                        },
                    );
                }
            }
            k if is_tool_block(k) => {
                let ordinal = st.anthropic.tool(block);
                let args = b.input.0.as_deref().unwrap_or("");
                tool_fragment(st, ordinal, b.id.as_str(), b.name.as_str(), args);
                tool = true;
            }
            // Only `text` blocks are the answer's text.
            "text" | "" => content.push_str(b.text.as_str()),
            _ => {}
        }
    }
    if content.is_empty() && reasoning.is_empty() && !tool && hidden {
        st.on_hidden_reasoning(at, index);
    } else {
        st.on_tokens(at, index, &content, &reasoning, tool);
    }
    if !m.stop_reason.as_str().is_empty() {
        st.on_finish_reason(finish_reason(m.stop_reason.as_str()));
    }
    add_usage(st, &m.usage);
    if streamed_request {
        st.fail(Failure::new(
            Outcome::ProtocolError,
            "streaming request answered with a whole JSON message (not an event stream)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::ToolCall;
    use crate::probe::measure::tests::{NO_SCRUB, head};
    use crate::probe::measure::{Flow, Measurement};
    use crate::probe::outcome::BodyEnd;
    use latmesh_core::api::{Api, RequestShape};
    use latmesh_core::plan::Timeouts;
    use latmesh_core::record::OutputTokensSource;
    use serde_json::{Value, json};

    /// Measures `events` (each one read, 1 ms apart) as an Anthropic stream, `end` after
    /// them; text kept.
    fn measure_events(events: &[String], end: BodyEnd) -> super::super::ProbeResult {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0, true, false, true, 64).with_api(Api::Anthropic);
        let mut at = t0;
        let mut end = end;
        for e in events {
            at += Duration::from_millis(1);
            if m.on_bytes(at, e.as_bytes()) == Flow::Stop {
                end = BodyEnd::Stopped;
                break;
            }
        }
        at += Duration::from_millis(1);
        m.on_end(at, end);
        m.finish(&head(t0, true), end, Some(at), &NO_SCRUB)
    }

    /// `event: {type}` and its data.
    fn ev(v: Value) -> String {
        format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap())
    }

    fn start(usage: Value) -> String {
        ev(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929",
            "stop_reason": null, "usage": usage}}),
        )
    }

    fn block(index: u32, b: Value) -> String {
        ev(json!({"type": "content_block_start", "index": index, "content_block": b}))
    }

    fn delta(index: u32, d: Value) -> String {
        ev(json!({"type": "content_block_delta", "index": index, "delta": d}))
    }

    fn stop_block(index: u32) -> String {
        ev(json!({"type": "content_block_stop", "index": index}))
    }

    fn message_delta(stop_reason: &str, usage: Value) -> String {
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
            "stop_sequence": null}, "usage": usage}),
        )
    }

    fn ping() -> String {
        ev(json!({"type": "ping"}))
    }

    fn message_stop() -> String {
        ev(json!({"type": "message_stop"}))
    }

    fn text(index: u32, t: &str) -> String {
        delta(index, json!({"type": "text_delta", "text": t}))
    }

    #[test]
    fn a_text_stream_with_pings() {
        let events = [
            start(json!({"input_tokens": 25, "output_tokens": 1})),
            block(0, json!({"type": "text", "text": ""})),
            ping(),
            text(0, "Hello"),
            text(0, "!"),
            stop_block(0),
            message_delta("end_turn", json!({"output_tokens": 15})),
            message_stop(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(r.content_text, "Hello!");
        // Read 4 (the first text delta) is payload 2: the ping is not a payload.
        assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(4_000), Some(4_000)));
        assert_eq!(
            (r.first_output_payload_index, r.first_content_payload_index),
            (Some(2), Some(2))
        );
        // e2e at message_stop (read 8), not at the end of the body.
        assert_eq!((rec.e2e_us, rec.saw_done), (Some(8_000), true));
        assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
        assert_eq!(
            (
                rec.usage.prompt_tokens,
                rec.usage.completion_tokens,
                rec.usage.total_tokens
            ),
            (Some(25), Some(15), None)
        );
        assert_eq!(
            (rec.output_tokens, rec.output_tokens_source),
            (15, OutputTokensSource::Usage)
        );
        assert_eq!(rec.usage_chunk_delta, Some(13));
        assert_eq!(
            rec.answered_model.as_deref(),
            Some("claude-sonnet-4-5-20250929")
        );
        assert_eq!(r.itl_gaps_us, vec![1_000]);
    }

    #[test]
    fn thinking_stamps_ttft_and_text_stamps_ttfc_and_the_blocks_are_kept_whole() {
        let events = [
            start(json!({"input_tokens": 10, "output_tokens": 1})),
            block(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
            delta(0, json!({"type": "thinking_delta", "thinking": "Let me"})),
            delta(0, json!({"type": "thinking_delta", "thinking": " think."})),
            delta(
                0,
                json!({"type": "signature_delta", "signature": "EqQBCgIYAh"}),
            ),
            stop_block(0),
            block(
                1,
                json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}),
            ),
            stop_block(1),
            block(2, json!({"type": "text", "text": ""})),
            text(2, "9.8"),
            stop_block(2),
            message_delta(
                "end_turn",
                json!({"output_tokens": 30, "output_tokens_details": {"thinking_tokens": 20}}),
            ),
            message_stop(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(
            (r.reasoning_text.as_str(), r.content_text.as_str()),
            ("Let me think.", "9.8")
        );
        // TTFT at the first thinking delta (read 3), TTFC at the first text delta (read 10);
        // the signature is no token, the redacted block is one.
        assert_eq!(
            (rec.ttft_us, rec.ttfc_us, rec.reasoning_us),
            (Some(3_000), Some(10_000), Some(7_000))
        );
        assert_eq!(
            (rec.reasoning_chunks, rec.content_chunks, rec.token_payloads),
            (3, 1, 4)
        );
        assert_eq!(rec.usage.reasoning_tokens, Some(20));
        assert_eq!(rec.output_tokens, 30);
        assert_eq!(
            r.thinking_blocks,
            vec![
                ThinkingBlock::Thinking {
                    thinking: "Let me think.".into(),
                    signature: "EqQBCgIYAh".into()
                },
                ThinkingBlock::RedactedThinking {
                    data: "EmwKAhgBEgy3va".into()
                },
            ]
        );
        // Without keep_text nothing is kept.
        let t0 = Instant::now();
        let mut m = Measurement::new(t0, false, false, true, 8).with_api(Api::Anthropic);
        m.on_bytes(t0, events.concat().as_bytes());
        m.on_end(t0, BodyEnd::Eof);
        let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
        assert_eq!(r.record.reasoning_chunks, 3);
        assert!(r.thinking_blocks.is_empty() && r.reasoning_text.is_empty());
    }

    #[test]
    fn tool_use_blocks_are_tool_calls_and_their_json_fragments_tokens() {
        let events = [
            start(json!({"input_tokens": 400, "output_tokens": 1})),
            block(0, json!({"type": "text", "text": "Checking."})),
            stop_block(0),
            block(
                1,
                json!({"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {}}),
            ),
            delta(1, json!({"type": "input_json_delta", "partial_json": ""})),
            delta(
                1,
                json!({"type": "input_json_delta", "partial_json": "{\"location\": "}),
            ),
            delta(
                1,
                json!({"type": "input_json_delta", "partial_json": "\"Paris\"}"}),
            ),
            stop_block(1),
            message_delta("tool_use", json!({"output_tokens": 89})),
            message_stop(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
        // The text in content_block_start counts (read 2); the empty fragment does not.
        assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(2_000), Some(2_000)));
        assert_eq!(
            (rec.content_chunks, rec.tool_call_chunks, rec.token_payloads),
            (1, 3, 4)
        );
        assert_eq!(
            r.tool_calls,
            vec![ToolCall {
                index: 0,
                id: Some("toolu_01".into()),
                name: "get_weather".into(),
                arguments: r#"{"location": "Paris"}"#.into(),
            }]
        );
    }

    /// Only the answer's known fields are its text: a citation carries no token, a delta
    /// of a type latmesh does not know is a token (TTFT) but not the answer (no TTFC, no
    /// text), a tool's input in a block of a kind latmesh does not list is a tool call, and
    /// a tool's result carries no token.
    #[test]
    fn only_known_fields_are_the_answer_and_unknown_deltas_are_tokens() {
        let events = [
            start(json!({"input_tokens": 5, "output_tokens": 1})),
            block(0, json!({"type": "text", "text": ""})),
            delta(
                0,
                json!({"type": "citations_delta", "citation": {"type": "char_location",
                "cited_text": "The grass is green.", "document_index": 0, "start_char_index": 0,
                "end_char_index": 20}}),
            ),
            delta(0, json!({"type": "future_text_delta", "text": "Green."})),
            delta(0, json!({"type": "text_delta", "text": "Grass."})),
            block(
                1,
                json!({"type": "future_tool_use_v2", "id": "t1", "name": "bash", "input": {}}),
            ),
            delta(
                1,
                json!({"type": "input_json_delta", "partial_json": "{\"cmd\":"}),
            ),
            block(2, json!({"type": "odd_block", "id": "o1"})),
            delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "\"ls\"}"}),
            ),
            block(
                3,
                json!({"type": "web_search_tool_result", "tool_use_id": "t1",
                "content": [{"type": "web_search_result", "title": "t", "url": "u"}]}),
            ),
            block(4, json!({"type": "mystery", "text": "not the answer"})),
            message_delta("end_turn", json!({"output_tokens": 9})),
            message_stop(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(r.content_text, "Grass.");
        assert_eq!(
            (r.first_output_payload_index, r.first_content_payload_index),
            (Some(3), Some(4))
        );
        assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(4_000), Some(5_000)));
        // The unknown delta, the text, the tool start and its two inputs, the mystery block.
        assert_eq!(
            (rec.token_payloads, rec.content_chunks, rec.tool_call_chunks),
            (6, 1, 3)
        );
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall {
                    index: 0,
                    id: Some("t1".into()),
                    name: "bash".into(),
                    arguments: "{\"cmd\":".into(),
                },
                ToolCall {
                    index: 1,
                    id: None,
                    name: String::new(),
                    arguments: "\"ls\"}".into(),
                },
            ]
        );
    }

    /// An `error` event's type and message win over a bare `stop_reason: "error"` (a
    /// gateway's), which is kept as the finish reason.
    #[test]
    fn an_error_event_wins_over_a_bare_error_stop_reason() {
        let events = [
            start(json!({"input_tokens": 5, "output_tokens": 1})),
            block(0, json!({"type": "text", "text": ""})),
            delta(0, json!({"type": "text_delta", "text": "a"})),
            message_delta("error", json!({"output_tokens": 1})),
            ev(json!({"type": "error", "error": {"type": "api_error", "message": "upstream 500"}})),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(
            (
                rec.outcome,
                rec.finish_reason.as_deref(),
                rec.error_type.as_deref(),
                rec.error_message.as_deref()
            ),
            (
                Some(Outcome::StreamError),
                Some("error"),
                Some("api_error"),
                Some("upstream 500")
            )
        );
    }

    /// Thinking that was not streamed (a thinking block with only its signature: Claude's
    /// omitted thinking) is left out of TPOT and the decode rate: with a thinking count, the
    /// output tokens less it; without one, they cannot be split and stay empty.
    #[test]
    fn omitted_thinking_is_not_in_tpot() {
        let events = |usage: Value| {
            [
                start(json!({"input_tokens": 5, "output_tokens": 1})),
                block(0, json!({"type": "thinking", "thinking": ""})),
                delta(
                    0,
                    json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}),
                ),
                stop_block(0),
                block(1, json!({"type": "text", "text": ""})),
                delta(1, json!({"type": "text_delta", "text": "9.8"})),
                delta(1, json!({"type": "text_delta", "text": " is"})),
                delta(1, json!({"type": "text_delta", "text": " larger."})),
                stop_block(1),
                message_delta("end_turn", usage),
                message_stop(),
            ]
        };
        // Events 1 ms apart: the text at 6, 7 and 8 ms, `message_stop` at 11 ms.
        let r = measure_events(&events(json!({"output_tokens": 503})), BodyEnd::Eof);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!((rec.ttft_us, rec.e2e_us), (Some(6_000), Some(11_000)));
        assert_eq!((rec.output_tokens, rec.reasoning_chunks), (503, 0));
        assert_eq!(
            (r.decode_tokens, rec.tpot_us, rec.decode_tps),
            (None, None, None)
        );
        let r = measure_events(
            &events(
                json!({"output_tokens": 503, "output_tokens_details": {"thinking_tokens": 497}}),
            ),
            BodyEnd::Eof,
        );
        assert_eq!(r.decode_tokens, Some(6));
        assert_eq!(r.record.tpot_us, Some(5_000 / 5));
        // Streamed thinking: every output token, from the first thinking delta.
        let mut streamed = events(json!({"output_tokens": 503}));
        streamed[2] = delta(0, json!({"type": "thinking_delta", "thinking": "Compare."}));
        let r = measure_events(&streamed, BodyEnd::Eof);
        assert_eq!(
            (r.decode_tokens, r.record.ttft_us),
            (Some(503), Some(3_000))
        );
        assert_eq!(r.record.tpot_us, Some(8_000 / 502));
    }

    #[test]
    fn events_are_read_by_their_json_type_and_the_event_line_only_without_one() {
        // No `event:` lines at all.
        let data = |v: Value| format!("data: {v}\n\n");
        let events = [
            data(
                json!({"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 3}}}),
            ),
            data(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}),
            ),
            data(
                json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 1}}),
            ),
            data(json!({"type": "message_stop"})),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(
            (
                r.record.outcome,
                r.record.finish_reason.as_deref(),
                r.record.saw_done
            ),
            (Some(Outcome::Ok), Some("length"), true)
        );
        // A gateway's `[DONE]` instead of message_stop is terminal too.
        let mut done = events[..3].to_vec();
        done.push("data: [DONE]\n\n".into());
        let r = measure_events(&done, BodyEnd::Eof);
        assert_eq!(
            (r.record.outcome, r.record.saw_done, r.record.e2e_us),
            (Some(Outcome::Ok), true, Some(4_000))
        );
        // An `event:` line that disagrees loses; one whose data has no type names it.
        let events = [
            "event: message_stop\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"text\":\"a\"}}\n\n".to_string(),
            "event: message_stop\ndata: {}\n\n".to_string(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(
            (r.content_text.as_str(), r.record.ttft_us, r.record.e2e_us),
            ("a", Some(1_000), Some(2_000))
        );
    }

    #[test]
    fn stop_reasons_in_the_chat_vocabulary() {
        for (given, want) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("model_context_window_exceeded", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("pause_turn", "pause_turn"),
            ("something_new", "something_new"),
        ] {
            assert_eq!(finish_reason(given), want);
        }
    }

    #[test]
    fn errors_in_the_stream_and_the_ends_of_a_stream() {
        let head = [
            start(json!({"input_tokens": 5, "output_tokens": 1})),
            block(0, json!({"type": "text", "text": ""})),
            text(0, "Hel"),
        ];
        // A mid-stream error event: stream_error with the error's type.
        let mut events = head.to_vec();
        events.push(ev(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})));
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(
            (
                r.record.outcome,
                r.record.error_type.as_deref(),
                r.record.error_message.as_deref()
            ),
            (
                Some(Outcome::StreamError),
                Some("overloaded_error"),
                Some("Overloaded")
            )
        );
        // message_delta with a stop_reason but no message_stop: complete, e2e at the end.
        let mut events = head.to_vec();
        events.push(message_delta("end_turn", json!({"output_tokens": 2})));
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(
            (r.record.outcome, r.record.saw_done, r.record.e2e_us),
            (Some(Outcome::Ok), false, Some(5_000))
        );
        // Cut before message_delta: truncated, cleanly or mid-event.
        let r = measure_events(&head, BodyEnd::Eof);
        assert_eq!(r.record.outcome, Some(Outcome::Truncated));
        let mut events = head.to_vec();
        events.push("event: content_block_delta\ndata: {\"type\":\"content_block_de".into());
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(r.record.outcome, Some(Outcome::Truncated), "{:?}", r.record);
        // A complete event that is not JSON is a protocol error.
        let mut events = head.to_vec();
        events.push("event: content_block_delta\ndata: {oops\n\n".into());
        events.push(message_stop());
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        assert!(
            r.record
                .error_message
                .unwrap()
                .starts_with("event 3 is not a JSON object")
        );
        // Only pings: no payload.
        let r = measure_events(&[ping(), ping()], BodyEnd::Eof);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        // Nothing after message_stop counts.
        let mut events = head.to_vec();
        events.extend([
            message_stop(),
            text(0, "late"),
            ev(json!({"type": "error", "error": {"type": "api_error"}})),
        ]);
        let r = measure_events(&events, BodyEnd::Eof);
        assert_eq!(
            (r.record.outcome, r.content_text.as_str()),
            (Some(Outcome::Ok), "Hel")
        );
    }

    #[test]
    fn prompt_tokens_include_cache_reads_and_writes() {
        let events = [
            start(
                json!({"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 300}),
            ),
            text(0, "a"),
            message_delta("end_turn", json!({"output_tokens": 4})),
            message_stop(),
        ];
        let r = measure_events(&events, BodyEnd::Eof);
        let u = &r.record.usage;
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
            (Some(2312), Some(2000), Some(4))
        );
        // Cumulative usage on message_delta (newer servers repeat every field) wins.
        let events = [
            start(json!({"input_tokens": 12, "output_tokens": 1})),
            text(0, "a"),
            message_delta(
                "end_turn",
                json!({"input_tokens": 12, "cache_read_input_tokens": 8,
                "cache_creation_input_tokens": 0, "output_tokens": 4}),
            ),
            message_stop(),
        ];
        let u = measure_events(&events, BodyEnd::Eof).record.usage;
        assert_eq!((u.prompt_tokens, u.cached_tokens), (Some(20), Some(8)));
    }

    fn measure_body(body: &[u8], stream: bool) -> super::super::ProbeResult {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0, true, !stream, stream, 8).with_api(Api::Anthropic);
        m.on_bytes(t0 + Duration::from_millis(1), body);
        m.on_end(t0 + Duration::from_millis(2), BodyEnd::Eof);
        m.finish(
            &head(t0, stream),
            BodyEnd::Eof,
            Some(t0 + Duration::from_millis(2)),
            &NO_SCRUB,
        )
    }

    #[test]
    fn a_whole_message_is_one_payload() {
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "thinking", "thinking": "2+2", "signature": "sig"},
                {"type": "text", "text": "Four"},
                {"type": "text", "text": "."},
                {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"x": 1}},
            ],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 9, "cache_read_input_tokens": 0}})
        .to_string();
        let r = measure_body(body.as_bytes(), false);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(
            (r.content_text.as_str(), r.reasoning_text.as_str()),
            ("Four.", "2+2")
        );
        assert_eq!(
            (rec.ttft_us, rec.ttfc_us, rec.e2e_us),
            (None, None, Some(2_000))
        );
        assert_eq!(
            (rec.token_payloads, rec.content_chunks, rec.reasoning_chunks),
            (1, 1, 1)
        );
        assert_eq!(
            (
                rec.output_tokens,
                rec.usage.prompt_tokens,
                rec.usage.cached_tokens
            ),
            (9, Some(12), Some(0))
        );
        assert_eq!(r.tool_calls[0].arguments, r#"{"x":1}"#);
        assert_eq!(r.thinking_blocks.len(), 1);
        // Answered to a streaming request: its fields are read, and it is a protocol error.
        let r = measure_body(body.as_bytes(), true);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        assert_eq!(r.content_text, "Four.");
        // An error object.
        let err = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#;
        for stream in [false, true] {
            let r = measure_body(err, stream);
            assert_eq!(
                (r.record.outcome, r.record.error_type.as_deref()),
                (Some(Outcome::StreamError), Some("overloaded_error"))
            );
        }
        // Not a message.
        let r = measure_body(br#"{"object":"chat.completion","choices":[]}"#, false);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    }

    #[test]
    fn the_request_body_and_headers() {
        let msgs = vec![
            Message::new("system", "Be brief."),
            Message::new("system", "Answer in English."),
            Message::new("user", "hi"),
            Message {
                reasoning_content: Some("r".into()),
                thinking_blocks: Some(vec![ThinkingBlock::Thinking {
                    thinking: "t".into(),
                    signature: "s".into(),
                }]),
                ..Message::new("assistant", "hello")
            },
            Message {
                thinking_blocks: Some(vec![ThinkingBlock::RedactedThinking { data: "d".into() }]),
                ..Message::new("assistant", "")
            },
            Message::new("user", "more"),
        ];
        let t = Timeouts::default();
        let shape = RequestShape::for_api(Api::Anthropic);
        let mut req = ProbeRequest {
            base_url: "http://h/anthropic/v1/",
            model_id: "deepseek-chat",
            api_key: Some("k"),
            messages: &msgs,
            stream: true,
            max_tokens: 16,
            temperature: Some(0.5),
            top_p: None,
            timeouts: &t,
            probe_id: None,
            user_agent: None,
            shape: &shape,
            secret_headers: &[],
        };
        let v: Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(
            v,
            json!({"model": "deepseek-chat", "max_tokens": 16, "system": "Be brief.\n\nAnswer in English.",
            "stream": true, "temperature": 0.5, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                    {"type": "text", "text": "hello"}]},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "d"}]},
                {"role": "user", "content": "more"},
            ]})
        );
        assert_eq!(
            super::super::request::url(req.base_url, Api::Anthropic),
            "http://h/anthropic/v1/messages"
        );
        let h = super::super::request::headers(&req);
        assert_eq!(h["anthropic-version"], ANTHROPIC_VERSION);
        assert_eq!(h[http::header::ACCEPT], "text/event-stream");
        // Another output-cap field; no system key without system messages.
        let capped = RequestShape {
            max_tokens_field: Some("max_output_tokens".into()),
            ..RequestShape::for_api(Api::Anthropic)
        };
        let user = [Message::new("user", "hi")];
        req.shape = &capped;
        req.messages = &user;
        req.stream = false;
        let v: Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(
            v,
            json!({"model": "deepseek-chat", "max_output_tokens": 16, "stream": false,
                "temperature": 0.5, "messages": [{"role": "user", "content": "hi"}]})
        );
        // The thinking toggle goes through extra_body, as every API's.
        let mut thinking = RequestShape::for_api(Api::Anthropic);
        thinking.extra_body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 1024}),
        );
        req.shape = &thinking;
        let v: Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(
            v["thinking"],
            json!({"type": "enabled", "budget_tokens": 1024})
        );
        assert_eq!(v["max_tokens"], 16);
    }
}
