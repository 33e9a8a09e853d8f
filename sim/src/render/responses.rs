//! OpenAI Responses (<https://platform.openai.com/docs/api-reference/responses-streaming>).
//!
//! A stream (every event `event: TYPE` + `data: {"type":TYPE,"sequence_number":N,…}`):
//! `response.created` and `response.in_progress` with the headers; `: keep-alive` comments
//! while prefilling; for the reasoning a `reasoning` output item
//! (`response.output_item.added`, `response.reasoning_summary_part.added`, one
//! `response.reasoning_summary_text.delta` per token chunk, `…text.done`, `…part.done`,
//! `response.output_item.done`), then a `message` item (`response.output_item.added`,
//! `response.content_part.added`, one `response.output_text.delta` per token chunk,
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done`);
//! then `response.completed`, or `response.incomplete` (status `incomplete`,
//! `incomplete_details.reason = "max_output_tokens"`) when the cap cut the answer, with the
//! whole response and its `usage` (`input_tokens`, `input_tokens_details.cached_tokens`,
//! `output_tokens` (reasoning included), `output_tokens_details.reasoning_tokens`,
//! `total_tokens`). The stream-error fault sends `response.failed` (status `failed`, `error`
//! with code `server_error`). Not streamed: the whole response object. A tool call
//! ([`crate::script`]) is a `function_call` output item (`response.output_item.added`, one
//! `response.function_call_arguments.delta` per argument fragment,
//! `response.function_call_arguments.done`, `response.output_item.done`), status
//! `completed`.

use axum::body::Bytes;
use serde_json::{Value, json};

use super::{Dialect, Render};
use crate::plan::{AnswerPlan, FinishReason};
use crate::text::TokenKind;

/// The item ids of a response: `rs_…` for the reasoning, `msg_…` for the message.
fn item_id(r: &Render, kind: TokenKind) -> String {
    let tail = r.id.strip_prefix("resp_").unwrap_or(&r.id);
    match kind {
        TokenKind::Reasoning => format!("rs_{tail}"),
        TokenKind::Content => format!("msg_{tail}"),
    }
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"id": id, "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}]})
}

/// The `function_call` item of the answer's tool call `name` with `arguments`.
fn function_call_item(r: &Render, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": r.tool_call_id("fc_"), "type": "function_call", "status": status,
        "arguments": arguments, "call_id": r.tool_call_id("call_"), "name": name})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn usage(r: &Render, a: &AnswerPlan) -> Value {
    let output = a.completion_tokens();
    r.echo.usage(json!({
        "input_tokens": r.prompt_tokens,
        "input_tokens_details": {"cached_tokens": r.cached_tokens},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": a.reasoning_tokens},
        "total_tokens": r.prompt_tokens.saturating_add(output),
    }))
}

/// `status` and `incomplete_details` of a finished answer.
fn status(a: &AnswerPlan) -> (&'static str, Value) {
    match a.finish_reason {
        FinishReason::Stop | FinishReason::StopSequence | FinishReason::ToolCalls => {
            ("completed", Value::Null)
        }
        FinishReason::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
    }
}

/// The `response` object.
fn response(r: &Render, model: String, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": r.id,
        "object": "response",
        "created_at": r.created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "model": model,
        "output": output,
        "usage": usage,
    })
}

/// The Responses stream of one answer: its sequence numbers and output items.
#[derive(Default)]
pub struct Responses {
    seq: u64,
    /// Output items already closed.
    done: Vec<Value>,
    /// The open item: its kind, id and text so far.
    open: Option<(TokenKind, String, String)>,
}

impl Responses {
    fn event(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        super::named_event(kind, &data)
    }

    /// The events closing the open item, if any (a message cut by the cap is `incomplete`).
    fn close(&mut self, r: &Render, message_status: &str) -> Vec<Bytes> {
        let Some((kind, id, text)) = self.open.take() else {
            return Vec::new();
        };
        let index = self.done.len();
        let tool = r.tool().filter(|_| kind == TokenKind::Content);
        let (item, events) = match kind {
            TokenKind::Content if tool.is_some() => (
                function_call_item(r, tool.unwrap_or_default(), &text, message_status),
                vec![self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "arguments": text}),
                )],
            ),
            TokenKind::Reasoning => {
                let part = json!({"type": "summary_text", "text": text});
                (
                    reasoning_item(&id, &text),
                    vec![
                        self.event(
                            "response.reasoning_summary_text.done",
                            json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                        ),
                        self.event(
                            "response.reasoning_summary_part.done",
                            json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                        ),
                    ],
                )
            }
            TokenKind::Content => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                (
                    message_item(&id, &text, message_status),
                    vec![
                        self.event(
                            "response.output_text.done",
                            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                        ),
                        self.event(
                            "response.content_part.done",
                            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                        ),
                    ],
                )
            }
        };
        let mut events = events;
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.done.push(item);
        events
    }
}

impl Dialect for Responses {
    fn open(&mut self, r: &Render, _early_role_chunk: bool) -> Vec<Bytes> {
        // A hostile provider's long `model` goes in these events.
        let resp = response(
            r,
            r.echo.pad(r.model.clone()),
            "in_progress",
            Vec::new(),
            Value::Null,
        );
        vec![
            self.event("response.created", json!({"response": resp})),
            self.event("response.in_progress", json!({"response": resp})),
        ]
    }

    fn tokens(&mut self, r: &Render, kind: TokenKind, text: &str) -> (Vec<Bytes>, Bytes) {
        let mut before = Vec::new();
        if self.open.as_ref().map(|(k, _, _)| *k) != Some(kind) {
            before = self.close(r, "completed");
        }
        if let (None, TokenKind::Content, Some(name)) = (&self.open, kind, r.tool()) {
            // A tool call: a `function_call` item, announced without parts.
            let item = function_call_item(r, name, "", "in_progress");
            let index = self.done.len();
            before.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            self.open = Some((kind, r.tool_call_id("fc_"), String::new()));
        }
        if self.open.is_none() {
            let id = item_id(r, kind);
            let index = self.done.len();
            let (item, part_kind, part) = match kind {
                TokenKind::Reasoning => (
                    json!({"id": id, "type": "reasoning", "summary": []}),
                    "response.reasoning_summary_part.added",
                    json!({"item_id": id, "output_index": index, "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""}}),
                ),
                TokenKind::Content => (
                    json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}),
                    "response.content_part.added",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []}}),
                ),
            };
            // The item is announced before its first part.
            before.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            ));
            before.push(self.event(part_kind, part));
            self.open = Some((kind, id, String::new()));
        }
        let Some((_, id, so_far)) = self.open.as_mut() else {
            unreachable!("an item was opened above")
        };
        so_far.push_str(text);
        let id = id.clone();
        let index = self.done.len();
        let token = match kind {
            TokenKind::Content if r.tool().is_some() => self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": text}),
            ),
            TokenKind::Reasoning => self.event(
                "response.reasoning_summary_text.delta",
                json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": text}),
            ),
            TokenKind::Content => self.event(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}),
            ),
        };
        (before, token)
    }

    fn finish(&mut self, r: &Render, a: &AnswerPlan) -> Vec<Bytes> {
        let (status, incomplete) = status(a);
        let message_status = if status == "incomplete" {
            "incomplete"
        } else {
            "completed"
        };
        let mut out = self.close(r, message_status);
        let mut resp = response(
            r,
            r.model.clone(),
            &r.echo.padded(status),
            self.done.clone(),
            usage(r, a),
        );
        resp["incomplete_details"] = incomplete;
        let kind = if status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(kind, json!({"response": resp})));
        out
    }

    fn fail(&mut self, r: &Render, message: &str) -> Bytes {
        let mut resp = response(r, r.model.clone(), "failed", self.done.clone(), Value::Null);
        resp["error"] =
            json!({"code": r.echo.field("server_error"), "message": r.echo.padded(message)});
        self.event("response.failed", json!({"response": resp}))
    }
}

/// The body of a non-streamed answer: the whole `response` object.
pub fn body(r: &Render, a: &AnswerPlan) -> String {
    let (status, incomplete) = status(a);
    let mut output = Vec::new();
    if a.reasoning_tokens > 0 {
        let text = r.text(TokenKind::Reasoning, 0, a.reasoning_tokens);
        output.push(reasoning_item(&item_id(r, TokenKind::Reasoning), &text));
    }
    if a.content_tokens > 0 {
        let text = r.text(TokenKind::Content, 0, a.content_tokens);
        output.push(match r.tool() {
            Some(name) => function_call_item(r, name, &text, status),
            None => message_item(
                &item_id(r, TokenKind::Content),
                &r.echo.field(&text),
                status,
            ),
        });
    }
    let mut resp = response(
        r,
        r.echo.pad(r.model.clone()),
        &r.echo.padded(status),
        output,
        usage(r, a),
    );
    resp["incomplete_details"] = incomplete;
    resp.to_string()
}
