//! The part of an OpenAI Chat Completions request the simulator looks at.

use serde::Deserialize;
use serde_json::Value;

use crate::profile::ReasoningPassback;
use crate::text;

/// A Chat Completions request, read leniently: unknown fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// Requested model id (echoed back; any id is accepted).
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation. Each `content` is a string, an array of parts, or null.
    pub messages: Vec<Message>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Output token cap (older name).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Output token cap (newer name; wins over `max_tokens`).
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature (accepted, not used).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling (accepted, not used).
    #[serde(default)]
    pub top_p: Option<f64>,
    /// `stream_options.include_usage` asks for a final usage-only chunk.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Request seed: with the prompt, it picks the answer's natural length and text.
    #[serde(default)]
    pub seed: Option<i64>,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, ...
    #[serde(default)]
    pub role: Option<String>,
    /// A string, an array of parts (`{"type":"text","text":..}` counted, others ignored) or null.
    #[serde(default)]
    pub content: Option<Value>,
    /// An assistant message's reasoning sent back in a multi-turn history (a string; `null`
    /// counts as absent).
    #[serde(default)]
    pub reasoning_content: Option<Value>,
}

/// `stream_options` of a request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a usage-only chunk before `[DONE]`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

impl ChatRequest {
    /// Parse and check a request body.
    ///
    /// # Errors
    /// A message for the client (HTTP 400) when the body is not a usable request.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let req: ChatRequest =
            serde_json::from_slice(body).map_err(|e| format!("invalid request body: {e}"))?;
        if req.messages.is_empty() {
            return Err("'messages' must contain at least one message".to_string());
        }
        if let Some(m) = req.max_completion_tokens.or(req.max_tokens)
            && m < 1
        {
            return Err(format!("max_tokens must be at least 1, got {m}"));
        }
        Ok(req)
    }

    /// Whether the client asked for a stream.
    pub fn is_stream(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// Whether the client asked for a usage chunk at the end of the stream.
    pub fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// The output token cap, if any (`max_completion_tokens`, else `max_tokens`).
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_completion_tokens
            .or(self.max_tokens)
            .map(|m| u32::try_from(m.max(1)).unwrap_or(u32::MAX))
    }

    /// All text of all message contents, joined by newlines.
    pub fn prompt_text(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        for m in &self.messages {
            match &m.content {
                Some(Value::String(s)) => parts.push(s),
                Some(Value::Array(items)) => {
                    for item in items {
                        if let Some(t) = item.get("text").and_then(Value::as_str) {
                            parts.push(t);
                        }
                    }
                }
                _ => {}
            }
        }
        parts.join("\n")
    }

    /// Estimated prompt tokens: `ceil(chars / 4)` over the characters of all message
    /// contents and of the `reasoning_content` sent back in assistant messages (the newlines
    /// that `prompt_text` puts between contents are not counted).
    pub fn prompt_tokens(&self) -> u32 {
        let text = self.prompt_text();
        let joins = self.count_parts().saturating_sub(1);
        let reasoning: usize = self
            .messages
            .iter()
            .filter_map(|m| m.reasoning_content.as_ref()?.as_str())
            .map(|r| r.chars().count())
            .sum();
        text::estimate_prompt_tokens(text.chars().count() - joins + reasoning)
    }

    /// The HTTP 400 message a provider with `policy` answers to this request's history, if
    /// any: with [`ReasoningPassback::Required`] the first assistant message without a
    /// string `reasoning_content`, with [`ReasoningPassback::Rejected`] the first one with
    /// one. Assistant messages are numbered from 1 in the message; `messages[i]` names the
    /// index in the request.
    pub fn reasoning_passback_error(&self, policy: ReasoningPassback) -> Option<String> {
        let assistants = self
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role.as_deref() == Some("assistant"));
        for (n, (i, m)) in assistants.enumerate() {
            let has = m.reasoning_content.as_ref().is_some_and(Value::is_string);
            match policy {
                ReasoningPassback::Required if !has => {
                    return Some(format!(
                        "Missing `reasoning_content` in assistant message {} (messages[{i}]): in thinking mode the reasoning_content of every earlier assistant turn must be passed back",
                        n + 1
                    ));
                }
                ReasoningPassback::Rejected if has => {
                    return Some(format!(
                        "`reasoning_content` is not allowed in assistant message {} (messages[{i}]): remove the reasoning_content of earlier turns from the input messages",
                        n + 1
                    ));
                }
                _ => {}
            }
        }
        None
    }

    fn count_parts(&self) -> usize {
        self.messages
            .iter()
            .map(|m| match &m.content {
                Some(Value::String(_)) => 1,
                Some(Value::Array(items)) => items
                    .iter()
                    .filter(|i| i.get("text").and_then(Value::as_str).is_some())
                    .count(),
                _ => 0,
            })
            .sum()
    }

    /// Key that fixes the answer's natural length and text: a hash of the prompt and `seed`.
    pub fn answer_key(&self) -> u64 {
        let h = text::fnv1a64(self.prompt_text().as_bytes());
        match self.seed {
            Some(s) => text::mix64(h ^ text::mix64(s as u64)),
            None => text::mix64(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_string_and_part_contents() {
        let body = br#"{"model":"m","messages":[
            {"role":"system","content":"abcd"},
            {"role":"user","content":[{"type":"text","text":"efghi"},{"type":"image_url","image_url":{"url":"x"}}]},
            {"role":"assistant","content":null}],
            "stream":true,"max_tokens":12,"stream_options":{"include_usage":true},"seed":3}"#;
        let r = ChatRequest::parse(body).unwrap();
        assert!(r.is_stream());
        assert!(r.include_usage());
        assert_eq!(r.max_tokens(), Some(12));
        assert_eq!(r.prompt_text(), "abcd\nefghi");
        assert_eq!(r.prompt_tokens(), 3); // 9 chars -> ceil(9/4)
    }

    #[test]
    fn max_completion_tokens_wins_and_bad_bodies_fail() {
        let r = ChatRequest::parse(
            br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":9}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens(), Some(9));
        assert!(!r.is_stream());
        assert!(ChatRequest::parse(b"not json").is_err());
        assert!(ChatRequest::parse(br#"{"messages":[]}"#).is_err());
        assert!(
            ChatRequest::parse(br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#)
                .is_err()
        );
    }

    #[test]
    fn reasoning_passback_is_checked_per_assistant_message() {
        let req = |assistant2: &str| {
            ChatRequest::parse(
                format!(
                    r#"{{"messages":[
                {{"role":"user","content":"q1"}},
                {{"role":"assistant","content":"a1","reasoning_content":"thought one"}},
                {{"role":"user","content":"q2"}},
                {{"role":"assistant","content":"a2"{assistant2}}},
                {{"role":"user","content":"q3"}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap()
        };
        let partial = req("");
        assert_eq!(
            partial.reasoning_passback_error(ReasoningPassback::Ignored),
            None
        );
        let e = partial
            .reasoning_passback_error(ReasoningPassback::Required)
            .unwrap();
        assert!(
            e.contains("`reasoning_content` in assistant message 2 (messages[3])"),
            "{e}"
        );
        // null is absent.
        assert!(
            req(r#","reasoning_content":null"#)
                .reasoning_passback_error(ReasoningPassback::Required)
                .is_some()
        );
        let full = req(r#","reasoning_content":"thought two""#);
        assert_eq!(
            full.reasoning_passback_error(ReasoningPassback::Required),
            None
        );
        let e = full
            .reasoning_passback_error(ReasoningPassback::Rejected)
            .unwrap();
        assert!(e.contains("assistant message 1 (messages[1])"), "{e}");
        // The reasoning sent back counts as prompt: 2+2+2+2+2 content chars, 11+11 reasoning.
        assert_eq!(full.prompt_tokens(), 8);
        assert_eq!(partial.prompt_tokens(), 6);
        // A single-turn request never fails the check.
        let single =
            ChatRequest::parse(br#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(
            single.reasoning_passback_error(ReasoningPassback::Required),
            None
        );
    }

    #[test]
    fn answer_key_depends_on_prompt_and_seed() {
        let mk = |s: &str| ChatRequest::parse(s.as_bytes()).unwrap().answer_key();
        let a = mk(r#"{"messages":[{"role":"user","content":"hi"}],"seed":1}"#);
        assert_eq!(
            a,
            mk(r#"{"messages":[{"role":"user","content":"hi"}],"seed":1}"#)
        );
        assert_ne!(
            a,
            mk(r#"{"messages":[{"role":"user","content":"hi"}],"seed":2}"#)
        );
        assert_ne!(
            a,
            mk(r#"{"messages":[{"role":"user","content":"ho"}],"seed":1}"#)
        );
    }
}
