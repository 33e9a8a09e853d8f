//! Anthropic Messages (<https://docs.anthropic.com/en/docs/build-with-claude/streaming>).
//!
//! A stream: `message_start` (the message with empty `content`, `usage.input_tokens` and, as
//! Anthropic sends it, `output_tokens: 1`) and a `ping` with the headers; `ping` every
//! keep-alive period while prefilling; for each part of the answer a `content_block_start`
//! (`thinking` for the reasoning, then `text`), its `content_block_delta`s (`thinking_delta` /
//! `text_delta`, one per token chunk), a `signature_delta` closing a thinking block, and
//! `content_block_stop`; then `message_delta` (`stop_reason` `end_turn` or `max_tokens`,
//! cumulative `usage.output_tokens`, thinking included) and `message_stop`. The stream-error
//! fault sends `event: error` with an `overloaded_error`. Not streamed: the whole `message`
//! with its `thinking` (signed) and `text` blocks. A tool call ([`crate::script`]) is a
//! `tool_use` block (`input: {}` at its start, then one `input_json_delta` per argument
//! fragment; whole `input` in a body), `stop_reason: "tool_use"`; an answer cut before a
//! stop sequence has `stop_reason: "stop_sequence"` and that `stop_sequence`.

use axum::body::Bytes;
use latmesh_core::api::Api;
use serde_json::{Value, json};

use super::{Dialect, ErrorKind, Render, named_event};
use crate::plan::{AnswerPlan, FinishReason};
use crate::request::anthropic::thinking_signature;
use crate::text::TokenKind;

/// Anthropic's `stop_reason` for `f`.
pub fn stop_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::StopSequence => "stop_sequence",
        FinishReason::ToolCalls => "tool_use",
    }
}

/// The `stop_sequence` of a finished answer: the matched one when it ended at it.
fn stop_sequence(r: &Render, a: &AnswerPlan) -> Option<String> {
    (a.finish_reason == FinishReason::StopSequence)
        .then(|| r.stop_sequence().map(str::to_string))
        .flatten()
}

/// The `message` object: `content`, `stop_reason` and `usage` as given.
fn message(r: &Render, model: String, content: Value, stop: Option<String>, usage: Value) -> Value {
    json!({
        "id": r.id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage,
    })
}

/// The `tool_use` block of a tool call with `input` (the block a stream opens has `{}`).
fn tool_use(r: &Render, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": r.tool_call_id("toolu_"), "name": name, "input": input})
}

fn input_usage(r: &Render, output_tokens: u32) -> Value {
    r.echo.usage(json!({
        "input_tokens": r.prompt_tokens.saturating_sub(r.cached_tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": r.cached_tokens,
        "output_tokens": output_tokens,
    }))
}

fn ping() -> Bytes {
    Bytes::from_static(b"event: ping\ndata: {\"type\":\"ping\"}\n\n")
}

/// The Messages stream of one answer: which content block is open.
#[derive(Default)]
pub struct Anthropic {
    /// The open block's kind and index.
    open: Option<(TokenKind, usize)>,
    /// Blocks started so far.
    blocks: usize,
    /// The thinking text so far (signed when its block closes).
    thinking: String,
}

impl Anthropic {
    /// The events closing the open block, if any.
    fn close(&mut self) -> Vec<Bytes> {
        let Some((kind, index)) = self.open.take() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if kind == TokenKind::Reasoning {
            let signature = thinking_signature(&self.thinking);
            out.push(named_event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": signature}}),
            ));
        }
        out.push(named_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        out
    }
}

impl Dialect for Anthropic {
    fn open(&mut self, r: &Render, _early_role_chunk: bool) -> Vec<Bytes> {
        // A hostile provider's long `model` goes in this event alone.
        let msg = message(
            r,
            r.echo.pad(r.model.clone()),
            json!([]),
            None,
            input_usage(r, 1),
        );
        vec![
            named_event(
                "message_start",
                &json!({"type": "message_start", "message": msg}),
            ),
            ping(),
        ]
    }

    fn keepalive(&self) -> Bytes {
        ping()
    }

    fn tokens(&mut self, r: &Render, kind: TokenKind, text: &str) -> (Vec<Bytes>, Bytes) {
        let tool = r.tool().filter(|_| kind == TokenKind::Content);
        let mut before = Vec::new();
        if self.open.map(|(k, _)| k) != Some(kind) {
            before = self.close();
            let index = self.blocks;
            self.blocks += 1;
            self.open = Some((kind, index));
            let block = match kind {
                TokenKind::Reasoning => {
                    json!({"type": "thinking", "thinking": "", "signature": ""})
                }
                TokenKind::Content => match tool {
                    Some(name) => tool_use(r, name, json!({})),
                    None => json!({"type": "text", "text": ""}),
                },
            };
            before.push(named_event(
                "content_block_start",
                &json!({"type": "content_block_start", "index": index, "content_block": block}),
            ));
        }
        let index = self.blocks - 1;
        let delta = match kind {
            TokenKind::Reasoning => {
                self.thinking.push_str(text);
                json!({"type": "thinking_delta", "thinking": text})
            }
            TokenKind::Content if tool.is_some() => {
                json!({"type": "input_json_delta", "partial_json": text})
            }
            TokenKind::Content => json!({"type": "text_delta", "text": text}),
        };
        let token = named_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
        (before, token)
    }

    fn finish(&mut self, r: &Render, a: &AnswerPlan) -> Vec<Bytes> {
        let mut out = self.close();
        let stop = r.echo.padded(stop_reason(a.finish_reason));
        let usage = r
            .echo
            .usage(json!({"output_tokens": a.completion_tokens()}));
        out.push(named_event(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": stop_sequence(r, a)},
                "usage": usage}),
        ));
        out.push(named_event(
            "message_stop",
            &json!({"type": "message_stop"}),
        ));
        out
    }

    fn fail(&mut self, r: &Render, message: &str) -> Bytes {
        let err = super::error_json(
            Api::Anthropic,
            &r.echo,
            ErrorKind::Overloaded,
            message,
            None,
        );
        named_event("error", &err)
    }
}

/// The body of a non-streamed answer: the `message` with a signed `thinking` block (when
/// the answer reasons) and a `text` block.
pub fn body(r: &Render, a: &AnswerPlan) -> String {
    let mut content = Vec::new();
    if a.reasoning_tokens > 0 {
        let thinking = r.text(TokenKind::Reasoning, 0, a.reasoning_tokens);
        let signature = thinking_signature(&thinking);
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
    }
    if a.content_tokens > 0 {
        let text = r.text(TokenKind::Content, 0, a.content_tokens);
        content.push(match r.tool() {
            // Arguments cut by the cap do not parse: the input is then empty.
            Some(name) => tool_use(r, name, serde_json::from_str(&text).unwrap_or(json!({}))),
            None => json!({"type": "text", "text": r.echo.field(&text)}),
        });
    }
    let stop = r.echo.padded(stop_reason(a.finish_reason));
    let mut msg = message(
        r,
        r.echo.pad(r.model.clone()),
        Value::Array(content),
        Some(stop),
        input_usage(r, a.completion_tokens()),
    );
    msg["stop_sequence"] = json!(stop_sequence(r, a));
    msg.to_string()
}
