//! The OpenAI Responses API (`POST {base_url}/responses`, as Codex speaks it): its request
//! body, and how its events and documents become measurements (docs/metrics.md, "OpenAI
//! Responses API").
//!
//! # Request ([`body`])
//! `model`; the leading `system` messages joined (blank line between them) as
//! `instructions`, where Codex puts its system prompt; every other message, in order, as the
//! message item Codex sends, `{"type": "message", "role", "content": [{"type": "input_text",
//! "text"}]}` (`output_text` for an assistant's; a later `system` message becomes a
//! `developer` item, the Responses API's role for instructions; llama.cpp's server refuses an
//! assistant message whose content is a plain string); `max_output_tokens` (or the
//! provider's `max_tokens_field`); `stream`; `temperature`/`top_p` when set; `store: false`,
//! as Codex sends it (the probe's prompts are not kept by the provider, and nothing can be
//! chained to a stored response). An assistant message that carries reasoning items
//! ([`Message::reasoning_items`](latmesh_core::prompts::Message::reasoning_items)) is preceded
//! by them, as Codex passes reasoning back with `store: false`; [`with_reasoning_passback`]
//! adds the `include` that asks for their encrypted content.
//!
//! # Events (`on_event`)
//! Every event is read by its JSON `type` (the `event:` line may be missing or differ);
//! every JSON event is one payload (its index counts every event, `response.created`
//! included). Generated text, each delta event one token payload, by the rule of
//! `items::delta_kind` (docs/metrics.md, "Parsing rules"):
//! * content (TTFC): `response.output_text.delta`, `response.refusal.delta` (a refusal is
//!   what the user is shown) and the transcript of audio output
//!   (`response.audio.transcript.delta`, `response.output_audio_transcript.delta`): only
//!   these known fields are the answer's text;
//! * reasoning: `response.reasoning_summary_text.delta`, `response.reasoning_text.delta`
//!   (any `*.delta` type naming `reasoning`, or a delta of a `reasoning` item);
//! * tool call: `response.output_item.added` of a call item (`items::is_tool_item`: its
//!   name, or its type when it has none; the call's slot is its `output_index`, its id the
//!   `call_id`), and the input deltas of any tool kind: a delta of a `*_call` item (its
//!   type read from `response.output_item.added`), or whose name names a call's input
//!   (`function_call_arguments`, `custom_tool_call_input`, `mcp_call_arguments`,
//!   `code_interpreter_call_code`, `shell_call_command`, `apply_patch_call_operation_diff`,
//!   any `<kind>_call_<field>`);
//! * other generated output (a token: TTFT and ITL; never TTFC nor content text): audio
//!   bytes (`response.audio.delta`, `response.output_audio.delta`) and any other `*.delta`
//!   with a non-empty string, a content part of another type than `output_text`/`refusal`
//!   that starts with text.
//!
//! `*.done` events repeat text already streamed and are not counted. `response.created` /
//! `response.in_progress` give the answered model. The terminal events:
//! * `response.completed`: the end of the stream (e2e), usage, and the finish reason
//!   `stop` (`tool_calls` when the output holds a tool call);
//! * `response.incomplete`: the end too, finish reason from `incomplete_details.reason`
//!   (`max_output_tokens` → `length`, `content_filter` as is, none → `incomplete`);
//! * `response.failed`, an `error` event, or an `error:` line → `stream_error` with the
//!   error's code and message.
//!
//! A terminal event's response whose `status` says otherwise is read by its status
//! (`finish_of`). `data: [DONE]` (sent by some gateways) also ends the stream.

use std::borrow::Cow;
use std::time::Instant;

use serde::Deserialize;

use latmesh_core::api::RequestShape;
use latmesh_core::record::Outcome;

pub mod items;

use items::{DeltaKind, delta_kind, is_tool_item};

use super::ProbeRequest;
use super::chunk::{
    Args, ErrorObj, FunctionWire, Many, Num, Obj, ProviderError, Scalar, Text, ToolCallWire,
    UsageWire,
};
use super::measure::state::State;
use super::outcome::Failure;
use super::sse::SseEvent;

/// The output-cap field of the Responses API.
pub const MAX_TOKENS_FIELD: &str = "max_output_tokens";

/// What `include` asks for to get reasoning back with `store: false`.
pub const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// The JSON body of `req` (see the [module documentation](self)).
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
    use serde_json::{Map, Value, json};
    let lead = req
        .messages
        .iter()
        .take_while(|m| m.role == "system")
        .count();
    let instructions: Vec<&str> = req.messages[..lead]
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    let mut input = Vec::with_capacity(req.messages.len() - lead);
    for m in &req.messages[lead..] {
        let (role, part) = match m.role.as_str() {
            "assistant" => {
                input.extend(m.reasoning_items.iter().cloned());
                ("assistant", "output_text")
            }
            "system" => ("developer", "input_text"),
            role => (role, "input_text"),
        };
        input.push(json!({"type": "message", "role": role,
            "content": [{"type": part, "text": m.content}]}));
    }
    let mut b = Map::new();
    b.insert("model".into(), req.model_id.into());
    if !instructions.is_empty() {
        b.insert("instructions".into(), instructions.join("\n\n").into());
    }
    b.insert("input".into(), Value::Array(input));
    b.insert(MAX_TOKENS_FIELD.into(), req.max_tokens.into());
    b.insert("stream".into(), req.stream.into());
    if let Some(t) = req.temperature {
        b.insert("temperature".into(), t.into());
    }
    if let Some(p) = req.top_p {
        b.insert("top_p".into(), p.into());
    }
    b.insert("store".into(), false.into());
    // `max_tokens_field`, then the scenario's and provider's `extra_body` (`reasoning`,
    // `include`, `store`…).
    super::shape::apply_shape(&mut b, req.shape);
    serde_json::to_vec(&b).expect("the request body serializes")
}

/// `shape` with `include` asking for encrypted reasoning (added to an `include` list its
/// `extra_body` already has), for a Responses provider whose reasoning is passed back
/// (`pass_reasoning = true`); `None` when nothing changes (another API, or already asked).
pub fn with_reasoning_passback(shape: &RequestShape) -> Option<RequestShape> {
    if shape.api != latmesh_core::api::Api::Responses {
        return None;
    }
    let mut list = match shape.extra_body.get("include") {
        Some(serde_json::Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    };
    if list.iter().any(|v| v == INCLUDE_ENCRYPTED_REASONING) {
        return None;
    }
    list.push(INCLUDE_ENCRYPTED_REASONING.into());
    let mut out = shape.clone();
    out.extra_body
        .insert("include".into(), serde_json::Value::Array(list));
    Some(out)
}

/// One streamed event: the fields read of any event type (others skipped unbuilt).
#[derive(Deserialize, Default)]
#[serde(default)]
struct EventWire<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    /// The text of a `*.delta` event.
    #[serde(borrow)]
    delta: Text<'a>,
    output_index: Num,
    /// The item of `response.output_item.added`/`.done`.
    #[serde(borrow)]
    item: Obj<ItemWire<'a>>,
    /// The part of `response.content_part.added` / `response.reasoning_summary_part.added`
    /// (its text, normally empty, is generated text when not).
    #[serde(borrow)]
    part: Obj<PartWire<'a>>,
    /// The response of `response.created`/`.in_progress`/`.completed`/`.incomplete`/`.failed`.
    #[serde(borrow)]
    response: Obj<ResponseWire<'a>>,
    /// An `error` event: `code`/`message` at the top level, or an `error` object.
    code: Scalar,
    #[serde(borrow)]
    message: Text<'a>,
    #[serde(borrow)]
    error: Obj<ErrorObj<'a>>,
}

/// The Response object (streamed in the lifecycle events, or the whole non-streaming body).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResponseWire<'a> {
    #[serde(borrow)]
    object: Text<'a>,
    #[serde(borrow)]
    model: Text<'a>,
    #[serde(borrow)]
    status: Text<'a>,
    #[serde(borrow)]
    output: Many<ItemWire<'a>>,
    usage: Obj<UsageWire>,
    #[serde(borrow)]
    error: Obj<ErrorObj<'a>>,
    #[serde(borrow)]
    incomplete_details: Obj<Incomplete<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Incomplete<'a> {
    #[serde(borrow)]
    reason: Text<'a>,
}

/// The error of an error object ([`ProviderError::from_obj`]); a `"type": "error"` (the
/// event's own type repeated) names nothing.
fn to_error(o: &ErrorObj<'_>) -> ProviderError {
    let mut e = ProviderError::from_obj(o);
    e.kind = e.kind.filter(|k| k != "error");
    e
}

/// One output item: a `message`, a `reasoning` item or a tool call.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ItemWire<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    /// A message's parts (`output_text`, `refusal`) or a reasoning item's `reasoning_text`.
    #[serde(borrow)]
    content: Many<PartWire<'a>>,
    /// A reasoning item's summary parts.
    #[serde(borrow)]
    summary: Many<PartWire<'a>>,
    #[serde(borrow)]
    encrypted_content: Text<'a>,
    #[serde(borrow)]
    call_id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    /// A function call's arguments.
    #[serde(borrow)]
    arguments: Args<'a>,
    /// A custom tool call's input.
    #[serde(borrow)]
    input: Args<'a>,
    /// What a shell or computer-use call does (its input, without `arguments`).
    #[serde(borrow)]
    action: Args<'a>,
    /// An apply-patch call's operation (its input).
    #[serde(borrow)]
    operation: Args<'a>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PartWire<'a> {
    /// `output_text`, `refusal`, `reasoning_text`, `summary_text`…
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    text: Text<'a>,
    #[serde(borrow)]
    refusal: Text<'a>,
}

impl ItemWire<'_> {
    fn is_tool_call(&self) -> bool {
        is_tool_item(self.kind.as_str())
    }

    /// The call as a fragment at `index` (its id, name and, whole, its input: `arguments`,
    /// a custom tool's `input`, or the `action` / `operation` of a call without arguments,
    /// such as a shell or apply-patch call). A call without a `name` is named by its type.
    fn tool_fragment(&self, index: Option<u64>, with_args: bool) -> ToolCallWire<'_> {
        let args = [&self.input, &self.arguments, &self.action, &self.operation]
            .into_iter()
            .find_map(|a| a.0.as_deref());
        let name = match self.name.as_str() {
            "" => self.kind.as_str(),
            n => n,
        };
        ToolCallWire {
            index: Num(index),
            id: Text(self.call_id.0.as_deref().map(Cow::Borrowed)),
            function: Obj(Some(FunctionWire {
                name: Text(Some(Cow::Borrowed(name))),
                arguments: Args(args.filter(|_| with_args).map(Cow::Borrowed)),
            })),
        }
    }
}

/// The finish reason of a terminal response: `Ok(reason)`, or `Err` for a failed one.
///
/// `completed` → `stop` (`tool_calls` when `tool_call` is set); `incomplete` → its
/// `incomplete_details.reason`, `max_output_tokens` as `length`, `incomplete` when none;
/// `failed` → `Err`; any other status (`cancelled`, …) → that status.
fn finish_of(r: &ResponseWire<'_>, event_kind: &str, tool_call: bool) -> Result<String, ()> {
    let status = match r.status.as_str() {
        "" => match event_kind {
            "response.incomplete" => "incomplete",
            "response.failed" => "failed",
            _ => "completed",
        },
        s => s,
    };
    Ok(match status {
        "completed" if tool_call => "tool_calls".into(),
        "completed" => "stop".into(),
        "incomplete" => match r
            .incomplete_details
            .0
            .as_ref()
            .map_or("", |d| d.reason.as_str())
        {
            "max_output_tokens" | "max_tokens" => "length".into(),
            "" => "incomplete".into(),
            other => other.into(),
        },
        "failed" => return Err(()),
        other => other.into(),
    })
}

/// The failure of a failed response (its `error`, else a message naming the event).
fn failed(st: &mut State, r: &ResponseWire<'_>, what: &str) {
    let e = r.error.0.as_ref().map(to_error).unwrap_or_default();
    st.provider_failure(e, what);
}

/// The response's model, usage and reasoning pieces, and, for a terminal event, its finish
/// (and, in a stream, the end of the stream at `at`).
fn on_response(st: &mut State, at: Instant, r: &ResponseWire<'_>, kind: &str, stream: bool) {
    st.on_answered(r.model.as_str(), "");
    if let Some(u) = r.usage.0.as_ref().and_then(UsageWire::to_usage) {
        st.add_usage(u);
    }
    if !matches!(
        kind,
        "response.completed" | "response.incomplete" | "response.failed"
    ) {
        return;
    }
    if r.output.0.iter().any(|i| i.kind.as_str() == "reasoning") {
        st.on_reasoning_block();
    }
    if !st.has_reasoning_items() {
        for item in &r.output.0 {
            keep_reasoning_item(st, item);
        }
    }
    let tool_call = st.has_tool_calls() || r.output.0.iter().any(ItemWire::is_tool_call);
    match finish_of(r, kind, tool_call) {
        Ok(fr) => {
            st.on_finish_reason(&fr);
            if stream {
                st.mark_done(at);
            }
        }
        Err(()) => failed(st, r, "response.failed"),
    }
}

/// Keeps a `reasoning` item, as an input item to send back (`summary`, `content` when it
/// has any, `encrypted_content` when it has one; not its `id`, which means nothing with
/// `store: false`).
fn keep_reasoning_item(st: &mut State, item: &ItemWire<'_>) {
    if item.kind.as_str() != "reasoning" || !st.keeps_text() {
        return;
    }
    let parts = |ps: &Many<PartWire<'_>>, kind: &str| -> Vec<serde_json::Value> {
        ps.0.iter()
            .map(|p| serde_json::json!({"type": kind, "text": p.text.as_str()}))
            .collect()
    };
    let mut kept = serde_json::Map::new();
    kept.insert("type".into(), "reasoning".into());
    kept.insert(
        "summary".into(),
        parts(&item.summary, "summary_text").into(),
    );
    if !item.content.0.is_empty() {
        kept.insert(
            "content".into(),
            parts(&item.content, "reasoning_text").into(),
        );
    }
    if let Some(enc) = item
        .encrypted_content
        .0
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        kept.insert("encrypted_content".into(), enc.into());
    }
    st.keep_reasoning_item(kept.into());
}

/// One event of a stream, read at `at`.
pub(super) fn on_event(st: &mut State, at: Instant, ev: SseEvent<'_>) {
    let (name, data, complete) = match ev {
        SseEvent::Data { data, complete } => (&b""[..], data.trim_ascii(), complete),
        SseEvent::Named {
            event,
            data,
            complete,
        } => (event, data.trim_ascii(), complete && !st.body_ending()),
        SseEvent::ErrorField(v) => {
            return st.provider_failure(ProviderError::from_payload(v), "error: field");
        }
    };
    if data.is_empty() {
        return;
    }
    if data == b"[DONE]" {
        return st.mark_done(at);
    }
    // An `event: error` whose data is not JSON (plain text from a gateway).
    if name == b"error" && data.first() != Some(&b'{') {
        return st.provider_failure(ProviderError::from_payload(data), "event: error");
    }
    let e: EventWire<'_> = match serde_json::from_slice(data) {
        Ok(e) if data.first() == Some(&b'{') => e,
        // Half an event at the end of the body is a truncation, judged by what came before.
        _ if !complete => return,
        Ok(_) | Err(_) => {
            let index = st.count_payload();
            let what = match serde_json::from_slice::<serde::de::IgnoredAny>(data) {
                Ok(_) => "not an object".to_string(),
                Err(err) => err.to_string(),
            };
            return st.fail(Failure::new(
                Outcome::ProtocolError,
                format!("payload {index} is not a JSON object: {what}"),
            ));
        }
    };
    let index = st.count_payload();
    let kind = match e.kind.as_str() {
        "" => std::str::from_utf8(name).unwrap_or(""),
        k => k,
    };
    let item = st.responses.kind(e.output_index.0).map(str::to_owned);
    if let Some(dk) = delta_kind(kind, item.as_deref()) {
        let text = e.delta.as_str();
        match dk {
            DeltaKind::Content => st.on_tokens(at, index, text, "", false),
            DeltaKind::Reasoning => st.on_tokens(at, index, "", text, false),
            DeltaKind::Tool if !text.is_empty() => {
                // A call whose start registered none (a kind latmesh does not list) is
                // named by its item's type.
                let slot = e
                    .output_index
                    .0
                    .map(|i| u32::try_from(i).unwrap_or(u32::MAX));
                let name = item.as_deref().filter(|_| !st.has_tool_call_at(slot));
                let f = ToolCallWire {
                    index: e.output_index,
                    function: Obj(Some(FunctionWire {
                        name: Text(name.map(Cow::Borrowed)),
                        arguments: Args(Some(Cow::Borrowed(text))),
                    })),
                    ..ToolCallWire::default()
                };
                st.add_tool_fragment(&f);
                st.on_tokens(at, index, "", "", true);
            }
            DeltaKind::Other if !text.is_empty() => st.on_other_output(at, index),
            DeltaKind::Tool | DeltaKind::Other => {}
        }
        return;
    }
    match kind {
        // A part that starts with text already: that text is the first of its kind (only
        // an `output_text` or `refusal` part's is the answer's).
        "response.content_part.added" | "response.reasoning_summary_part.added" => {
            if let Some(p) = e.part.0.as_ref() {
                let text = if p.text.as_str().is_empty() {
                    p.refusal.as_str()
                } else {
                    p.text.as_str()
                };
                let part = p.kind.as_str();
                let reasoning = kind == "response.reasoning_summary_part.added"
                    || part.contains("reasoning")
                    || part.contains("summary");
                if reasoning {
                    st.on_tokens(at, index, "", text, false);
                } else if matches!(part, "" | "output_text" | "refusal") {
                    st.on_tokens(at, index, text, "", false);
                } else if !text.is_empty() {
                    st.on_other_output(at, index);
                }
            }
        }
        "response.output_item.added" => {
            if let Some(item) = e.item.0.as_ref() {
                if let Some(i) = e.output_index.0 {
                    st.responses.add(i, item.kind.as_str());
                }
                if item.kind.as_str() == "reasoning" {
                    st.on_reasoning_block();
                }
                if item.is_tool_call() {
                    st.add_tool_fragment(&item.tool_fragment(e.output_index.0, false));
                    let named = !item.name.as_str().is_empty();
                    st.on_tokens(at, index, "", "", named);
                }
            }
        }
        "response.output_item.done" => {
            if let Some(item) = e.item.0.as_ref() {
                if item.kind.as_str() == "reasoning" {
                    st.on_reasoning_block();
                }
                keep_reasoning_item(st, item);
            }
        }
        "error" => {
            let e = match e.error.0.as_ref() {
                Some(inner) => to_error(inner),
                None => to_error(&ErrorObj {
                    code: e.code,
                    message: e.message,
                    kind: Text::default(),
                }),
            };
            st.provider_failure(e, "error event");
        }
        k if k.starts_with("response.") => {
            if let Some(r) = e.response.0.as_ref() {
                on_response(st, at, r, k, true);
            } else if k == "response.failed" {
                st.provider_failure(ProviderError::default(), "response.failed");
            }
        }
        _ => {}
    }
}

/// A body read whole (`streamed_request`: the request asked for a stream): the Response
/// object, payload 0, its output's text, reasoning and tool calls counted once.
pub(super) fn on_json_body(st: &mut State, at: Instant, body: &[u8], streamed_request: bool) {
    let r: ResponseWire<'_> = match serde_json::from_slice(body) {
        Ok(r) if body.first() == Some(&b'{') => r,
        Ok(_) => {
            return st.fail(Failure::new(
                Outcome::ProtocolError,
                "body is not a JSON object",
            ));
        }
        Err(e) => {
            return st.fail(Failure::new(
                Outcome::ProtocolError,
                format!("body is not a JSON object: {e}"),
            ));
        }
    };
    if r.object.as_str() != "response" && r.output.0.is_empty() {
        // An error envelope (`{"error": {…}}`) sent with a 2xx, or something else.
        if r.error.0.is_some() {
            return failed(st, &r, "error object in the response");
        }
        return st.fail(Failure::new(
            Outcome::ProtocolError,
            "body is not a Response object (no \"object\": \"response\", no output)",
        ));
    }
    let index = st.count_payload();
    let (mut content, mut reasoning) = (String::new(), String::new());
    let mut tool = false;
    for (i, item) in r.output.0.iter().enumerate() {
        match item.kind.as_str() {
            "message" => {
                // Only the answer's text parts (an `output_audio` part is not text).
                for p in item
                    .content
                    .0
                    .iter()
                    .filter(|p| matches!(p.kind.as_str(), "" | "output_text" | "refusal"))
                {
                    content.push_str(p.text.as_str());
                    content.push_str(p.refusal.as_str());
                }
            }
            "reasoning" => {
                for p in item.summary.0.iter().chain(&item.content.0) {
                    reasoning.push_str(p.text.as_str());
                }
                keep_reasoning_item(st, item);
            }
            _ if item.is_tool_call() => {
                st.add_tool_fragment(&item.tool_fragment(Some(i as u64), true));
                tool = true;
            }
            _ => {}
        }
    }
    st.on_tokens(at, index, &content, &reasoning, tool);
    let kind = match r.status.as_str() {
        "incomplete" => "response.incomplete",
        "failed" => "response.failed",
        _ => "response.completed",
    };
    on_response(st, at, &r, kind, false);
    if r.error.0.is_some() && r.status.as_str() != "failed" {
        failed(st, &r, "error object in the response");
    }
    if streamed_request {
        st.fail(Failure::new(
            Outcome::ProtocolError,
            "streaming request answered with a whole JSON response (not an event stream)",
        ));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::probe::measure::tests::measure_api;
    use latmesh_core::api::Api;
    use latmesh_core::plan::Timeouts;
    use latmesh_core::prompts::Message;
    use latmesh_core::record::OutputTokensSource;
    use serde_json::{Value, json};

    fn req_body(msgs: &[Message], shape: &RequestShape, stream: bool) -> Value {
        let t = Timeouts::default();
        let req = ProbeRequest {
            base_url: "http://h/v1",
            model_id: "m",
            api_key: None,
            messages: msgs,
            stream,
            max_tokens: 16,
            temperature: Some(0.2),
            top_p: None,
            timeouts: &t,
            probe_id: None,
            user_agent: None,
            shape,
            secret_headers: &[],
        };
        serde_json::from_slice(&body(&req)).unwrap()
    }

    #[test]
    fn body_puts_leading_system_messages_in_instructions_and_the_rest_in_input() {
        let mut answer = Message::new("assistant", "four");
        let item = json!({"type": "reasoning", "summary": [], "encrypted_content": "blob1"});
        answer.reasoning_items = vec![item.clone()];
        let msgs = vec![
            Message::new("system", "Be brief."),
            Message::new("system", "Answer in English."),
            Message::new("user", "2+2?"),
            answer,
            Message::new("system", "Now be verbose."),
            Message::new("user", "Why?"),
        ];
        let shape = RequestShape::for_api(Api::Responses);
        assert_eq!(
            req_body(&msgs, &shape, true),
            json!({
                "model": "m",
                "instructions": "Be brief.\n\nAnswer in English.",
                "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "2+2?"}]},
                    item,
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "four"}]},
                    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Now be verbose."}]},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Why?"}]},
                ],
                "max_output_tokens": 16,
                "stream": true,
                "temperature": 0.2,
                "store": false,
            })
        );
        // No system message: no instructions; the provider's output-cap field is used.
        let shape = RequestShape {
            max_tokens_field: Some("max_tokens".into()),
            ..RequestShape::for_api(Api::Responses)
        };
        let v = req_body(&[Message::new("user", "hi")], &shape, false);
        assert_eq!(v.get("instructions"), None);
        assert_eq!(
            (v["max_tokens"].clone(), v.get("max_output_tokens")),
            (json!(16), None)
        );
        assert_eq!(v["stream"], false);
    }

    #[test]
    fn reasoning_passback_asks_for_encrypted_reasoning_once() {
        assert_eq!(with_reasoning_passback(RequestShape::chat_default()), None);
        let mut shape = RequestShape::for_api(Api::Responses);
        shape
            .extra_body
            .insert("include".into(), json!(["message.output_text.logprobs"]));
        let asked = with_reasoning_passback(&shape).unwrap();
        assert_eq!(
            asked.extra_body["include"],
            json!([
                "message.output_text.logprobs",
                "reasoning.encrypted_content"
            ])
        );
        assert_eq!(with_reasoning_passback(&asked), None);
        // The body carries it (extra_body goes through shape::apply_shape).
        let v = req_body(&[Message::new("user", "hi")], &asked, true);
        assert_eq!(v["include"], asked.extra_body["include"]);
        assert_eq!(v["store"], false);
    }

    /// `data:` lines of events `{"type": t, ...fields}`, with `event:` lines when `named`.
    fn stream(events: &[Value], named: bool) -> Vec<u8> {
        let mut out = String::new();
        for e in events {
            if named {
                out.push_str(&format!("event: {}\n", e["type"].as_str().unwrap()));
            }
            out.push_str(&format!("data: {e}\n\n"));
        }
        out.into_bytes()
    }

    fn ev(kind: &str, fields: Value) -> Value {
        let mut v = fields;
        v["type"] = kind.into();
        v
    }

    fn delta(kind: &str, d: &str) -> Value {
        ev(kind, json!({"output_index": 0, "delta": d}))
    }

    fn created() -> Value {
        ev(
            "response.created",
            json!({"response": {"object": "response", "status": "in_progress", "model": "gpt-x", "usage": null}}),
        )
    }

    fn completed(output: Value, usage: Value) -> Value {
        ev(
            "response.completed",
            json!({"response": {"object": "response", "status": "completed", "model": "gpt-x", "output": output, "usage": usage}}),
        )
    }

    fn lines(body: &[u8]) -> Vec<&[u8]> {
        body.split_inclusive(|&b| b == b'\n').collect()
    }

    #[test]
    fn reasoning_stamps_ttft_and_output_text_stamps_ttfc() {
        let usage = json!({"input_tokens": 20, "input_tokens_details": {"cached_tokens": 16},
            "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 6}, "total_tokens": 29});
        let body = stream(
            &[
                created(),
                delta("response.reasoning_summary_text.delta", "think"),
                delta("response.reasoning_text.delta", " more"),
                delta("response.output_text.delta", "Hi"),
                ev("response.output_text.done", json!({"text": "Hi"})),
                completed(
                    json!([{"type": "reasoning", "summary": [], "encrypted_content": "enc"}]),
                    usage,
                ),
            ],
            true,
        );
        let r = measure_api(Api::Responses, &lines(&body), false);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        // Three lines per event, one per ms: event k completes with read 3k + 3.
        assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(6_000), Some(12_000)));
        assert_eq!(rec.reasoning_us, Some(6_000));
        assert_eq!(rec.e2e_us, Some(18_000));
        assert_eq!(
            (r.reasoning_text.as_str(), r.content_text.as_str()),
            ("think more", "Hi")
        );
        assert_eq!(
            (rec.reasoning_chunks, rec.content_chunks, rec.token_payloads),
            (2, 1, 3)
        );
        assert_eq!(
            (r.first_output_payload_index, r.first_content_payload_index),
            (Some(1), Some(3))
        );
        assert_eq!(
            (
                rec.usage.prompt_tokens,
                rec.usage.cached_tokens,
                rec.usage.completion_tokens
            ),
            (Some(20), Some(16), Some(9))
        );
        assert_eq!(rec.usage.reasoning_tokens, Some(6));
        assert_eq!(
            (rec.output_tokens, rec.output_tokens_source),
            (9, OutputTokensSource::Usage)
        );
        assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
        assert_eq!(rec.answered_model.as_deref(), Some("gpt-x"));
        assert!(rec.saw_done);
        // Kept with the texts, for a later turn.
        assert_eq!(
            r.reasoning_items,
            vec![json!({"type": "reasoning", "summary": [], "encrypted_content": "enc"})]
        );
    }

    /// Every delta with generated text is a token; only the answer's known fields are its
    /// text (TTFC): a delta latmesh does not know, and audio bytes, are not.
    #[test]
    fn every_delta_that_carries_generated_text_is_a_token() {
        for (kind, visible) in [
            ("response.output_text.delta", true),
            ("response.refusal.delta", true),
            ("response.output_audio_transcript.delta", true),
            ("response.audio.transcript.delta", true),
            ("response.some_future_text.delta", false),
            ("response.audio.delta", false),
            ("response.reasoning_summary_text.delta", false),
            ("response.reasoning_text.delta", false),
            ("response.function_call_arguments.delta", false),
            ("response.custom_tool_call_input.delta", false),
            ("response.mcp_call_arguments.delta", false),
            ("response.code_interpreter_call_code.delta", false),
            ("response.shell_call_command.delta", false),
            ("response.apply_patch_call_operation_diff.delta", false),
        ] {
            let body = stream(
                &[
                    created(),
                    delta(kind, "x"),
                    completed(json!([]), json!(null)),
                ],
                false,
            );
            let r = measure_api(Api::Responses, &[&body], false);
            assert_eq!(r.record.token_payloads, 1, "{kind}");
            assert_eq!(r.first_output_payload_index, Some(1), "{kind}");
            assert_eq!(r.first_content_payload_index.is_some(), visible, "{kind}");
            assert_eq!(r.content_text, if visible { "x" } else { "" }, "{kind}");
        }
        // `*.done` events repeat the text: not counted.
        let body = stream(
            &[
                created(),
                ev(
                    "response.output_text.done",
                    json!({"text": "x", "delta": "x"}),
                ),
                completed(json!([]), json!(null)),
            ],
            false,
        );
        assert_eq!(
            measure_api(Api::Responses, &[&body], false)
                .record
                .token_payloads,
            0
        );
        // A part that starts with its first text: that text stamps TTFC.
        let body = stream(
            &[
                created(),
                ev(
                    "response.content_part.added",
                    json!({"item_id": "m", "part": {"type": "output_text", "text": "Hello "}}),
                ),
                delta("response.output_text.delta", "world"),
                completed(json!([]), json!(null)),
            ],
            false,
        );
        let r = measure_api(Api::Responses, &[&body], false);
        assert_eq!(r.first_content_payload_index, Some(1));
        assert_eq!(r.content_text, "Hello world");
        // A gateway that streams no delta at all and puts the whole answer in
        // response.completed: not an `ok` without TTFT.
        let body = stream(
            &[
                created(),
                completed(
                    json!([{"type": "message", "content": [{"type": "output_text", "text": "All of it."}]}]),
                    json!({"input_tokens": 5, "output_tokens": 30}),
                ),
            ],
            false,
        );
        let r = measure_api(Api::Responses, &[&body], false);
        assert_eq!(r.record.outcome(), Outcome::ProtocolError, "{:?}", r.record);
        assert!(
            r.record
                .error_message
                .as_deref()
                .unwrap()
                .contains("usage counts 30 output tokens")
        );
    }

    #[test]
    fn function_call_items_and_argument_deltas_build_the_call() {
        let body = stream(
            &[
                created(),
                ev(
                    "response.output_item.added",
                    json!({"output_index": 1,
                    "item": {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ""}}),
                ),
                ev(
                    "response.function_call_arguments.delta",
                    json!({"output_index": 1, "delta": "{\"city\""}),
                ),
                ev(
                    "response.function_call_arguments.delta",
                    json!({"output_index": 1, "delta": ":\"Paris\"}"}),
                ),
                completed(
                    json!([{"type": "function_call", "call_id": "call_1", "name": "get_weather"}]),
                    json!(null),
                ),
            ],
            true,
        );
        let r = measure_api(Api::Responses, &lines(&body), false);
        assert_eq!(r.record.outcome, Some(Outcome::Ok));
        assert_eq!(r.record.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.record.tool_call_chunks, 3);
        assert_eq!(r.first_output_payload_index, Some(1));
        assert_eq!(
            r.tool_calls,
            vec![crate::probe::ToolCall {
                index: 1,
                id: Some("call_1".into()),
                name: "get_weather".into(),
                arguments: "{\"city\":\"Paris\"}".into(),
            }]
        );
    }

    /// The input of a tool kind latmesh does not list is a tool call: by its item's type
    /// (a `*_call` item), a call without a name named by that type; never the answer.
    #[test]
    fn input_deltas_of_any_tool_kind_are_tool_calls() {
        let body = stream(
            &[
                created(),
                ev(
                    "response.output_item.added",
                    json!({"output_index": 0, "item": {"type": "shell_call", "call_id": "sh_1",
                    "action": {"commands": []}}}),
                ),
                ev(
                    "response.shell_call_command.delta",
                    json!({"output_index": 0, "command_index": 0, "delta": "ls -la"}),
                ),
                ev(
                    "response.output_item.added",
                    json!({"output_index": 1, "item": {"type": "robot_arm_call", "id": "ra_1"}}),
                ),
                ev(
                    "response.motion_plan.delta",
                    json!({"output_index": 1, "delta": "{\"x\":1}"}),
                ),
                ev(
                    "response.motion_plan.delta",
                    json!({"output_index": 1, "delta": ""}),
                ),
                ev(
                    "response.output_item.added",
                    json!({"output_index": 2, "item": {"type": "message", "content": []}}),
                ),
                ev(
                    "response.output_markdown.delta",
                    json!({"output_index": 2, "delta": "**not the answer**"}),
                ),
                ev(
                    "response.output_text.delta",
                    json!({"output_index": 2, "delta": "Done."}),
                ),
                completed(json!([]), json!({"input_tokens": 3, "output_tokens": 9})),
            ],
            true,
        );
        let r = measure_api(Api::Responses, &[&body], false);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(r.content_text, "Done.");
        assert_eq!(
            (r.first_output_payload_index, r.first_content_payload_index),
            (Some(2), Some(8))
        );
        assert_eq!(
            (rec.token_payloads, rec.tool_call_chunks, rec.content_chunks),
            (4, 2, 1)
        );
        assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.tool_calls,
            vec![
                crate::probe::ToolCall {
                    index: 0,
                    id: Some("sh_1".into()),
                    name: "shell_call".into(),
                    arguments: "ls -la".into(),
                },
                crate::probe::ToolCall {
                    index: 1,
                    id: None,
                    name: "robot_arm_call".into(),
                    arguments: "{\"x\":1}".into(),
                },
            ]
        );
        // Read whole: a shell call's `action` is its input; an audio part is not text.
        let whole = json!({"object": "response", "status": "completed", "output": [
            {"type": "shell_call", "call_id": "sh_1", "action": {"commands": ["ls"]}},
            {"type": "message", "content": [
                {"type": "output_audio", "text": "AAAA", "transcript": "Hi"},
                {"type": "output_text", "text": "Hi"}]},
        ]});
        let r = measure_api(Api::Responses, &[whole.to_string().as_bytes()], true);
        assert_eq!(r.content_text, "Hi");
        assert_eq!(
            (
                r.tool_calls[0].name.as_str(),
                r.tool_calls[0].arguments.as_str()
            ),
            ("shell_call", r#"{"commands":["ls"]}"#)
        );
    }

    /// An error that names something wins over a failure that names nothing (a
    /// `response.failed` with a null error), whichever comes first; a named one is kept.
    #[test]
    fn an_error_object_wins_over_a_bare_failure() {
        let bare = ev(
            "response.failed",
            json!({"response": {"status": "failed", "error": null}}),
        );
        let named = ev(
            "error",
            json!({"code": "server_error", "message": "invalid output"}),
        );
        let other = ev("error", json!({"code": "later", "message": "ignored"}));
        for events in [
            vec![created(), bare.clone(), named.clone()],
            vec![created(), named.clone(), bare.clone()],
            vec![created(), named.clone(), other.clone()],
        ] {
            let r = measure_api(Api::Responses, &[&stream(&events, true)], false);
            assert_eq!(
                (
                    r.record.outcome,
                    r.record.error_code.as_deref(),
                    r.record.error_message.as_deref()
                ),
                (
                    Some(Outcome::StreamError),
                    Some("server_error"),
                    Some("invalid output")
                )
            );
        }
        let r = measure_api(Api::Responses, &[&stream(&[created(), bare], true)], false);
        assert_eq!(
            (r.record.error_code, r.record.error_message.as_deref()),
            (None, Some("response.failed"))
        );
    }

    /// Reasoning kept in an encrypted item, not streamed: TPOT and the decode rate over the
    /// streamed tokens (output less reasoning); a streamed summary keeps every token.
    #[test]
    fn encrypted_reasoning_is_not_in_tpot() {
        let reasoning_item = ev(
            "response.output_item.done",
            json!({"output_index": 0, "item": {"type": "reasoning", "summary": [],
            "encrypted_content": "enc"}}),
        );
        let usage = json!({"input_tokens": 5, "output_tokens": 103,
            "output_tokens_details": {"reasoning_tokens": 100}});
        let events = [
            stream(&[created(), reasoning_item.clone()], true),
            stream(&[delta("response.output_text.delta", "a")], true),
            stream(&[delta("response.output_text.delta", "b")], true),
            stream(&[delta("response.output_text.delta", "c")], true),
            stream(&[completed(json!([]), usage.clone())], true),
        ];
        let pieces: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
        let r = measure_api(Api::Responses, &pieces, false);
        assert_eq!((r.record.output_tokens, r.decode_tokens), (103, Some(3)));
        assert_eq!(
            (r.record.ttft_us, r.record.e2e_us),
            (Some(2_000), Some(5_000))
        );
        assert_eq!(r.record.tpot_us, Some(1_500));
        let summary = stream(
            &[
                created(),
                delta("response.reasoning_summary_text.delta", "s"),
            ],
            true,
        );
        let with_summary = [
            summary.as_slice(),
            &events[1],
            &events[2],
            &events[3],
            &events[4],
        ];
        let r = measure_api(Api::Responses, &with_summary, false);
        assert_eq!(r.decode_tokens, Some(103));
    }

    #[test]
    fn terminal_events_map_to_finish_reasons_and_failures() {
        let incomplete = |reason: Value| {
            ev(
                "response.incomplete",
                json!({"response": {"status": "incomplete", "incomplete_details": reason}}),
            )
        };
        for (reason, want) in [
            (json!({"reason": "max_output_tokens"}), "length"),
            (json!({"reason": "content_filter"}), "content_filter"),
            (json!(null), "incomplete"),
        ] {
            let body = stream(
                &[
                    created(),
                    delta("response.output_text.delta", "a"),
                    incomplete(reason),
                ],
                true,
            );
            let r = measure_api(Api::Responses, &[&body], false);
            assert_eq!(r.record.outcome, Some(Outcome::Ok));
            assert_eq!(r.record.finish_reason.as_deref(), Some(want));
            assert!(r.record.e2e_us.is_some() && r.record.saw_done);
        }
        // A terminal response whose status says it was cancelled: an aborting finish.
        let cancelled = ev(
            "response.completed",
            json!({"response": {"status": "cancelled"}}),
        );
        let r = measure_api(
            Api::Responses,
            &[&stream(&[created(), cancelled], false)],
            false,
        );
        assert_eq!(r.record.outcome, Some(Outcome::StreamError));
        assert_eq!(r.record.finish_reason.as_deref(), Some("cancelled"));

        let failed = ev(
            "response.failed",
            json!({"response": {"status": "failed",
            "error": {"code": "server_error", "message": "boom"}}}),
        );
        let r = measure_api(
            Api::Responses,
            &[&stream(&[created(), failed], true)],
            false,
        );
        assert_eq!(r.record.outcome, Some(Outcome::StreamError));
        assert_eq!(
            (
                r.record.error_type.as_deref(),
                r.record.error_code.as_deref(),
                r.record.error_message.as_deref()
            ),
            (Some("server_error"), Some("server_error"), Some("boom"))
        );
        assert!(!r.record.saw_done);

        // The `error` event: fields at the top level, or in an `error` object; or plain text.
        for (data, code, message) in [
            (
                r#"{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null}"#,
                Some("rate_limit_exceeded"),
                "slow down",
            ),
            (
                r#"{"type":"error","error":{"type":"invalid_request_error","code":"bad","message":"no"}}"#,
                Some("bad"),
                "no",
            ),
            ("upstream timed out", None, "upstream timed out"),
        ] {
            let mut body = stream(&[created(), delta("response.output_text.delta", "a")], true);
            body.extend_from_slice(format!("event: error\ndata: {data}\n\n").as_bytes());
            let r = measure_api(Api::Responses, &[&body], false);
            assert_eq!(r.record.outcome, Some(Outcome::StreamError), "{data}");
            assert_eq!(r.record.error_code.as_deref(), code, "{data}");
            assert_eq!(r.record.error_message.as_deref(), Some(message), "{data}");
        }
        // Cut before the terminal event: truncated; not JSON: protocol error.
        let body = stream(&[created(), delta("response.output_text.delta", "a")], true);
        let r = measure_api(Api::Responses, &[&body], false);
        assert_eq!(r.record.outcome, Some(Outcome::Truncated));
        // A named event cut by the end of the body (no blank line after it): truncated too.
        let mut cut = body.clone();
        cut.extend_from_slice(b"event: response.output_text.delta\ndata: {\"type\":\"response.out");
        let r = measure_api(Api::Responses, &[&cut], false);
        assert_eq!(
            (r.record.outcome, r.record.content_chunks),
            (Some(Outcome::Truncated), 1)
        );
        let r = measure_api(
            Api::Responses,
            &[b"event: response.created\ndata: {oops\n\n"],
            false,
        );
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        assert!(
            r.record
                .error_message
                .unwrap()
                .starts_with("payload 0 is not a JSON object")
        );
    }

    #[test]
    fn whole_response_bodies() {
        let body = json!({"object": "response", "status": "completed", "model": "gpt-x",
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}],
                 "content": [{"type": "reasoning_text", "text": "raw"}], "encrypted_content": "enc"},
                {"type": "message", "content": [{"type": "output_text", "text": "Hi"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            ],
            "usage": {"input_tokens": 5, "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}}});
        let bytes = body.to_string().into_bytes();
        let r = measure_api(Api::Responses, &[&bytes], true);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
        assert_eq!(
            (r.content_text.as_str(), r.reasoning_text.as_str()),
            ("Hi", "sumraw")
        );
        assert_eq!(
            (rec.ttft_us, rec.saw_done, rec.token_payloads),
            (None, false, 1)
        );
        assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!((rec.output_tokens, rec.usage.prompt_tokens), (7, Some(5)));
        assert_eq!(r.tool_calls[0].arguments, "{}");
        assert_eq!(
            r.reasoning_items,
            vec![
                json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}],
                "content": [{"type": "reasoning_text", "text": "raw"}], "encrypted_content": "enc"})
            ]
        );
        // Incomplete, failed, an error envelope, something else.
        let inc = json!({"object": "response", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}, "output": []});
        let r = measure_api(Api::Responses, &[inc.to_string().as_bytes()], true);
        assert_eq!(
            (r.record.outcome, r.record.finish_reason.as_deref()),
            (Some(Outcome::Ok), Some("length"))
        );
        let failed = json!({"object": "response", "status": "failed", "output": [],
            "error": {"code": "server_error", "message": "boom"}});
        let r = measure_api(Api::Responses, &[failed.to_string().as_bytes()], true);
        assert_eq!(
            (r.record.outcome, r.record.error_code.as_deref()),
            (Some(Outcome::StreamError), Some("server_error"))
        );
        let env = br#"{"error":{"type":"invalid_request_error","code":"x","message":"bad"}}"#;
        let r = measure_api(Api::Responses, &[env], true);
        assert_eq!(
            (r.record.outcome, r.record.error_type.as_deref()),
            (Some(Outcome::StreamError), Some("invalid_request_error"))
        );
        let r = measure_api(Api::Responses, &[br#"{"choices":[]}"#], true);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        // A streaming request answered with a whole Response: read, then a protocol error.
        let r = measure_api(Api::Responses, &[&bytes], false);
        assert_eq!(
            (r.record.outcome, r.content_text.as_str()),
            (Some(Outcome::ProtocolError), "Hi")
        );
    }

    /// TTST is the second token-bearing event's read, after TTFT's (events read 1 ms apart).
    #[test]
    fn ttst_is_the_second_token_event() {
        let events = [
            stream(&[created()], true),
            stream(&[delta("response.output_text.delta", "a")], true),
            stream(&[delta("response.output_text.delta", "b")], true),
            stream(&[completed(json!([]), json!(null))], true),
        ];
        let pieces: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
        let r = measure_api(Api::Responses, &pieces, false);
        assert_eq!(
            (r.record.outcome, r.record.ttft_us, r.record.ttst_us),
            (Some(Outcome::Ok), Some(2_000), Some(3_000))
        );
        let one = [events[0].as_slice(), &events[1], &events[3]];
        let r = measure_api(Api::Responses, &one, false);
        assert_eq!((r.record.ttft_us, r.record.ttst_us), (Some(2_000), None));
    }

    #[test]
    fn nothing_after_the_terminal_event_changes_the_measurement() {
        let mut body = stream(
            &[
                created(),
                delta("response.output_text.delta", "a"),
                completed(json!([]), json!(null)),
            ],
            true,
        );
        body.extend_from_slice(&stream(
            &[
                delta("response.output_text.delta", "z"),
                ev("error", json!({"message": "late"})),
            ],
            true,
        ));
        let r = measure_api(Api::Responses, &[&body], false);
        assert_eq!(
            (r.record.outcome, r.content_text.as_str()),
            (Some(Outcome::Ok), "a")
        );
    }

    use proptest::prelude::*;

    /// Bodies built from the Responses API's event shapes (every generated-text delta,
    /// tool calls, terminal events, errors, `[DONE]`), with or without `event:` lines, and
    /// some arbitrary bytes.
    pub(crate) fn responses_body() -> impl Strategy<Value = Vec<u8>> {
        let events: Vec<Value> = vec![
            created(),
            delta("response.output_text.delta", "a"),
            delta("response.output_text.delta", "é"),
            delta("response.refusal.delta", "no"),
            delta("response.reasoning_summary_text.delta", "r"),
            delta("response.reasoning_text.delta", "t"),
            ev(
                "response.output_item.added",
                json!({"output_index": 0, "item": {"type": "function_call", "call_id": "c", "name": "f"}}),
            ),
            delta("response.function_call_arguments.delta", "{"),
            ev(
                "response.output_item.done",
                json!({"item": {"type": "reasoning", "encrypted_content": "e"}}),
            ),
            completed(json!([]), json!({"input_tokens": 3, "output_tokens": 5})),
            ev(
                "response.incomplete",
                json!({"response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}),
            ),
            ev(
                "response.failed",
                json!({"response": {"status": "failed", "error": {"code": "e", "message": "m"}}}),
            ),
            ev("error", json!({"code": "e1", "message": "boom"})),
        ];
        let item = prop_oneof![
            6 => (prop::sample::select(events), any::<bool>())
                .prop_map(|(e, named)| stream(&[e], named)),
            1 => prop::sample::select(vec![
                &b": keep-alive\n\n"[..], b"\n", b"\r\n", b"data: [DONE]\n\n", b"data: {oops\n\n",
                b"error: {\"code\":1}\n\n", b"data:", b"\r",
            ]).prop_map(<[u8]>::to_vec),
            1 => prop::collection::vec(any::<u8>(), 0..8),
        ];
        prop::collection::vec(item, 0..16).prop_map(|v| v.concat())
    }
}
