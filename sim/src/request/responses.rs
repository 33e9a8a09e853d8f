//! The part of an OpenAI Responses request the simulator looks at
//! (<https://platform.openai.com/docs/api-reference/responses/create>).
//!
//! Read: `model`, `instructions` (the system prompt), `input` (a string, or items: messages
//! with `role` and `content` as a string or `input_text` / `output_text` parts, and
//! `reasoning` items, whose summary (or `reasoning_text` content) is the reasoning sent back
//! for the assistant message after them), `max_output_tokens`, `stream`, `reasoning.effort`
//! (`"none"` switches thinking off), and vLLM's `ignore_eos` / `min_tokens` (not OpenAI's,
//! read as on Chat: see [`super`]).

use latmesh_core::api::Api;
use serde::Deserialize;
use serde_json::Value;

use super::{AssistantTurn, RequestError, SimRequest, content_texts};

#[derive(Deserialize)]
struct ResponsesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    max_output_tokens: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    reasoning: Option<Value>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    min_tokens: Option<i64>,
}

/// The text of a `reasoning` item: its summary texts, else its `reasoning_text` contents.
fn reasoning_text(item: &Value) -> String {
    let summary = content_texts(item.get("summary"));
    if summary.is_empty() {
        content_texts(item.get("content")).concat()
    } else {
        summary.concat()
    }
}

/// A Responses body as a [`SimRequest`].
///
/// # Errors
/// Not JSON, no `input` (or an empty one, or one that is neither a string nor an array),
/// `max_output_tokens` below 1. Messages name the field.
pub fn parse(body: &[u8]) -> Result<SimRequest, RequestError> {
    let req: ResponsesRequest = serde_json::from_slice(body)
        .map_err(|e| RequestError::new(format!("invalid request body: {e}")))?;
    let max_tokens = super::cap("max_output_tokens", req.max_output_tokens)?;
    let (ignore_eos, min_tokens) = super::exact_output(req.ignore_eos, req.min_tokens, max_tokens)?;
    let mut parts: Vec<String> = req.instructions.into_iter().collect();
    let mut assistant_turns = Vec::new();
    let mut last_user = None;
    match req.input {
        Some(Value::String(s)) if !s.is_empty() => {
            last_user = Some(s.clone());
            parts.push(s);
        }
        Some(Value::Array(items)) if !items.is_empty() => {
            // Reasoning items belong to the assistant message that follows them.
            let mut pending: Option<String> = None;
            for (i, item) in items.iter().enumerate() {
                let kind = item.get("type").and_then(Value::as_str);
                if kind == Some("reasoning") {
                    pending
                        .get_or_insert_default()
                        .push_str(&reasoning_text(item));
                    continue;
                }
                parts.extend(content_texts(item.get("content")));
                if item.get("role").and_then(Value::as_str) == Some("user") {
                    last_user = Some(content_texts(item.get("content")).join("\n"));
                }
                match item.get("role").and_then(Value::as_str) {
                    Some("assistant") => assistant_turns.push(AssistantTurn {
                        at: format!("input[{i}]"),
                        reasoning: pending.take(),
                    }),
                    Some(_) => pending = None,
                    None => {}
                }
            }
        }
        _ => {
            return Err(RequestError::param(
                "input: a non-empty string or array of input items is required",
                "input",
            ));
        }
    }
    let effort = req.reasoning.as_ref().and_then(|r| r.get("effort"));
    let thinking = super::thinking_from_effort(effort.and_then(Value::as_str));
    Ok(SimRequest {
        api: Api::Responses,
        model: req.model,
        stream: req.stream.unwrap_or(false),
        max_tokens,
        include_usage: true,
        seed: None,
        thinking,
        parts,
        assistant_turns,
        last_user,
        stop: Vec::new(),
        json_mode: super::json_format(req.text.as_ref().and_then(|t| t.get("format"))),
        tool: super::first_tool_name(req.tools.as_ref(), |t| t.get("name")),
        ignore_eos,
        min_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Thinking;
    use crate::profile::ReasoningPassback;

    #[test]
    fn reads_string_and_item_input() {
        let r = parse(br#"{"model":"m","instructions":"abcd","input":"efghi","max_output_tokens":12,"stream":true}"#).unwrap();
        assert_eq!(r.api, Api::Responses);
        assert!(r.stream && r.include_usage);
        assert_eq!(r.max_tokens, Some(12));
        assert_eq!(r.prompt_text(), "abcd\nefghi");
        assert_eq!(r.thinking, Thinking::Default);
        let items = parse(br#"{"instructions":"abcd","input":[{"role":"user","content":[{"type":"input_text","text":"efghi"},{"type":"input_image","image_url":"x"}]}],"reasoning":{"effort":"none"}}"#).unwrap();
        assert_eq!(items.prompt_text(), "abcd\nefghi");
        assert_eq!(items.answer_key(), r.answer_key());
        assert_eq!(items.thinking, Thinking::Off);
        assert_eq!(items.max_tokens, None);
    }

    #[test]
    fn bad_input_names_the_field() {
        for body in [
            r#"{"input":""}"#,
            r#"{"input":[]}"#,
            r#"{"model":"m"}"#,
            r#"{"input":3}"#,
        ] {
            let e = parse(body.as_bytes()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("input"), "{body}");
        }
        let e = parse(br#"{"input":"x","max_output_tokens":0}"#).unwrap_err();
        assert_eq!(e.message, "max_output_tokens must be at least 1, got 0");
    }

    #[test]
    fn reasoning_items_go_with_the_next_assistant_message() {
        let body = br#"{"input":[
            {"role":"user","content":"q1"},
            {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"thought"}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"a1"}]},
            {"role":"user","content":"q2"},
            {"type":"message","role":"assistant","content":"a2"},
            {"role":"user","content":"q3"}]}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.assistant_turns.len(), 2);
        assert_eq!(r.assistant_turns[0].reasoning.as_deref(), Some("thought"));
        let e = r
            .reasoning_passback_error(ReasoningPassback::Required)
            .unwrap();
        assert!(
            e.contains("Missing `reasoning` item in assistant message 2 (input[4])"),
            "{e}"
        );
        // 5 × 2 text chars, 7 of reasoning.
        assert_eq!(r.prompt_tokens(&crate::ProviderProfile::default()), 5);
    }
}
