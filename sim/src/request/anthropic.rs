//! The part of an Anthropic Messages request the simulator looks at
//! (<https://docs.anthropic.com/en/api/messages>).
//!
//! Read: `model`, `max_tokens` (required, as Anthropic requires it: HTTP 400 without it),
//! `system` (a string or text blocks), `messages` (each `content` a string or an array of
//! blocks: `text` blocks are the prompt; `thinking` blocks sent back in assistant turns are
//! their reasoning, counted as prompt, and must carry the `signature` the simulator gave that
//! text ([`thinking_signature`]), as Anthropic checks), `stream`, `thinking`
//! (`{"type":"enabled","budget_tokens":N}` or `{"type":"disabled"}`), and vLLM's
//! `ignore_eos` / `min_tokens` (not Anthropic's, read as on Chat: see [`super`]).

use latmesh_core::api::Api;
use serde::Deserialize;
use serde_json::Value;

use super::{AssistantTurn, RequestError, SimRequest, content_texts};
use crate::plan::Thinking;
use crate::text;

#[derive(Deserialize)]
struct MessagesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    thinking: Option<ThinkingConfig>,
    #[serde(default)]
    stop_sequences: Option<Value>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    min_tokens: Option<i64>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize)]
struct ThinkingConfig {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    budget_tokens: Option<i64>,
}

/// The `signature` of a thinking block whose text is `thinking`: what the simulator sends in
/// its `signature_delta` and checks when the block comes back in a later turn.
pub fn thinking_signature(thinking: &str) -> String {
    format!("sim-sig-{:016x}", text::fnv1a64(thinking.as_bytes()))
}

/// A Messages body as a [`SimRequest`].
///
/// # Errors
/// Not JSON, no `max_tokens` (or below 1), no `messages`, an unknown `thinking.type`, or a
/// `thinking` block sent back without its signature or with one that does not match its
/// text. Messages name the field as Anthropic does (`messages.1.content.0`).
pub fn parse(body: &[u8]) -> Result<SimRequest, RequestError> {
    let req: MessagesRequest = serde_json::from_slice(body)
        .map_err(|e| RequestError::new(format!("invalid request body: {e}")))?;
    let Some(max) = req.max_tokens else {
        return Err(RequestError::param(
            "max_tokens: Field required",
            "max_tokens",
        ));
    };
    let max_tokens = super::cap("max_tokens", Some(max))?;
    let (ignore_eos, min_tokens) = super::exact_output(req.ignore_eos, req.min_tokens, max_tokens)?;
    let messages = match req.messages {
        Some(m) if !m.is_empty() => m,
        _ => {
            return Err(RequestError::param(
                "messages: at least one message is required",
                "messages",
            ));
        }
    };
    let thinking = match req.thinking {
        None => Thinking::Default,
        Some(t) if t.kind == "disabled" => Thinking::Off,
        Some(t) if t.kind == "enabled" => Thinking::On {
            budget_tokens: t
                .budget_tokens
                .map(|b| u32::try_from(b.max(0)).unwrap_or(u32::MAX)),
        },
        Some(t) => {
            return Err(RequestError::param(
                format!(
                    "thinking.type: Input should be 'enabled' or 'disabled', got {:?}",
                    t.kind
                ),
                "thinking",
            ));
        }
    };
    let mut parts = content_texts(req.system.as_ref());
    let mut assistant_turns = Vec::new();
    let mut last_user = None;
    for (i, m) in messages.iter().enumerate() {
        parts.extend(content_texts(m.content.as_ref()));
        if m.role.as_deref() == Some("user") {
            last_user = Some(content_texts(m.content.as_ref()).join("\n"));
        }
        if m.role.as_deref() != Some("assistant") {
            continue;
        }
        let mut reasoning: Option<String> = None;
        if let Some(Value::Array(blocks)) = &m.content {
            for (j, b) in blocks.iter().enumerate() {
                if b.get("type").and_then(Value::as_str) != Some("thinking") {
                    continue;
                }
                let at = format!("messages.{i}.content.{j}");
                let thought = b.get("thinking").and_then(Value::as_str).unwrap_or("");
                match b.get("signature").and_then(Value::as_str) {
                    None => {
                        return Err(RequestError::param(
                            format!("{at}.thinking.signature: Field required"),
                            "messages",
                        ));
                    }
                    Some(sig) if sig != thinking_signature(thought) => {
                        return Err(RequestError::param(
                            format!("{at}: Invalid `signature` in `thinking` block"),
                            "messages",
                        ));
                    }
                    Some(_) => reasoning.get_or_insert_default().push_str(thought),
                }
            }
        }
        assistant_turns.push(AssistantTurn {
            at: format!("messages[{i}]"),
            reasoning,
        });
    }
    Ok(SimRequest {
        api: Api::Anthropic,
        model: req.model,
        stream: req.stream.unwrap_or(false),
        max_tokens,
        include_usage: true,
        seed: None,
        thinking,
        parts,
        assistant_turns,
        last_user,
        stop: super::stop_sequences(req.stop_sequences.as_ref()),
        json_mode: false,
        tool: super::first_tool_name(req.tools.as_ref(), |t| t.get("name")),
        ignore_eos,
        min_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ReasoningPassback;

    #[test]
    fn reads_system_blocks_and_thinking() {
        let body = br#"{"model":"m","max_tokens":12,"stream":true,
            "system":[{"type":"text","text":"abcd"}],
            "thinking":{"type":"enabled","budget_tokens":5},
            "messages":[{"role":"user","content":[{"type":"text","text":"efghi"},{"type":"image","source":{}}]}]}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.api, Api::Anthropic);
        assert!(r.stream && r.include_usage);
        assert_eq!(r.max_tokens, Some(12));
        assert_eq!(r.prompt_text(), "abcd\nefghi");
        assert_eq!(r.prompt_tokens(&crate::ProviderProfile::default()), 3);
        assert_eq!(
            r.thinking,
            Thinking::On {
                budget_tokens: Some(5)
            }
        );
        let plain = parse(br#"{"max_tokens":1,"system":"abcd","messages":[{"role":"user","content":"efghi"}],"thinking":{"type":"disabled"}}"#).unwrap();
        assert_eq!(plain.prompt_text(), "abcd\nefghi");
        assert_eq!(plain.thinking, Thinking::Off);
        // The same prompt as a chat request: the same answer.
        let chat = super::super::chat::parse(
            br#"{"messages":[{"role":"system","content":"abcd"},{"role":"user","content":"efghi"}]}"#,
            &crate::ProviderProfile::default(),
        )
        .unwrap();
        assert_eq!(chat.answer_key(), plain.answer_key());
    }

    #[test]
    fn max_tokens_is_required_and_errors_name_the_field() {
        let e = parse(br#"{"messages":[{"role":"user","content":"x"}]}"#).unwrap_err();
        assert_eq!(e.message, "max_tokens: Field required");
        let e =
            parse(br#"{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}"#).unwrap_err();
        assert!(e.message.starts_with("max_tokens"), "{}", e.message);
        let e = parse(br#"{"max_tokens":3,"messages":[]}"#).unwrap_err();
        assert!(e.message.starts_with("messages"), "{}", e.message);
        let e = parse(br#"{"max_tokens":3,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"sometimes"}}"#).unwrap_err();
        assert!(e.message.starts_with("thinking.type"), "{}", e.message);
    }

    #[test]
    fn thinking_blocks_come_back_signed() {
        let turn = |block: &str| {
            format!(
                r#"{{"max_tokens":8,"messages":[{{"role":"user","content":"q1"}},{{"role":"assistant","content":[{block}{{"type":"text","text":"a1"}}]}},{{"role":"user","content":"q2"}}]}}"#
            )
        };
        let sig = thinking_signature("thought");
        let good = parse(
            turn(&format!(
                r#"{{"type":"thinking","thinking":"thought","signature":"{sig}"}},"#
            ))
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            good.assistant_turns[0].reasoning.as_deref(),
            Some("thought")
        );
        assert_eq!(
            good.reasoning_passback_error(ReasoningPassback::Required),
            None
        );
        let e = good
            .reasoning_passback_error(ReasoningPassback::Rejected)
            .unwrap();
        assert!(
            e.contains("`thinking` block is not allowed in assistant message 1 (messages[1])"),
            "{e}"
        );
        // 2 + 2 + 2 text chars and 7 of thinking.
        assert_eq!(good.prompt_tokens(&crate::ProviderProfile::default()), 4);

        let bare = parse(turn("").as_bytes()).unwrap();
        let e = bare
            .reasoning_passback_error(ReasoningPassback::Required)
            .unwrap();
        assert!(
            e.contains("Missing `thinking` block in assistant message 1 (messages[1])"),
            "{e}"
        );

        let forged = turn(r#"{"type":"thinking","thinking":"thought","signature":"sim-sig-0"},"#);
        let e = parse(forged.as_bytes()).unwrap_err();
        assert_eq!(
            e.message,
            "messages.1.content.0: Invalid `signature` in `thinking` block"
        );
        let unsigned = turn(r#"{"type":"thinking","thinking":"thought"},"#);
        let e = parse(unsigned.as_bytes()).unwrap_err();
        assert!(
            e.message.contains("signature: Field required"),
            "{}",
            e.message
        );
    }
}
