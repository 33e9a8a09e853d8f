//! The part of an OpenAI Chat Completions request the simulator looks at
//! (<https://platform.openai.com/docs/api-reference/chat/create>).

use latmesh_core::api::Api;
use serde::Deserialize;
use serde_json::Value;

use super::{AssistantTurn, RequestError, SimRequest};
use crate::plan::Thinking;
use crate::profile::ProviderProfile;

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
    /// `{"type": "enabled" | "disabled"}` (DeepSeek, Zhipu, ...): the thinking switch.
    #[serde(default)]
    pub thinking: Option<Value>,
    /// `{"enable_thinking": bool}` (vLLM, SGLang and the Qwen family): the thinking switch.
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
    /// `"none"` switches thinking off; any other effort on.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Stop sequences: a string or an array of strings.
    #[serde(default)]
    pub stop: Option<Value>,
    /// `{"type": "json_object" | "json_schema" | "text", …}`: JSON mode when not `text`.
    #[serde(default)]
    pub response_format: Option<Value>,
    /// Declared tools: `[{"type": "function", "function": {"name", "parameters"}}]`.
    #[serde(default)]
    pub tools: Option<Value>,
    /// vLLM's `ignore_eos`: generate to the output cap.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// vLLM's `min_tokens`: the fewest output tokens.
    #[serde(default)]
    pub min_tokens: Option<i64>,
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
    /// A [`RequestError`] for the client (HTTP 400) when the body is not a usable request.
    pub fn parse(body: &[u8]) -> Result<Self, RequestError> {
        let req: ChatRequest = serde_json::from_slice(body)
            .map_err(|e| RequestError::new(format!("invalid request body: {e}")))?;
        if req.messages.is_empty() {
            return Err(RequestError::param(
                "'messages' must contain at least one message",
                "messages",
            ));
        }
        Ok(req)
    }

    /// The thinking switch: `thinking.type`, `chat_template_kwargs.enable_thinking`, or
    /// `reasoning_effort = "none"` (the first one given, in that order).
    fn thinking(&self) -> Thinking {
        if let Some(t) = self.thinking.as_ref().and_then(|t| t.get("type")?.as_str()) {
            return if t == "disabled" {
                Thinking::Off
            } else {
                Thinking::On {
                    budget_tokens: None,
                }
            };
        }
        let kwargs = self.chat_template_kwargs.as_ref();
        if let Some(on) = kwargs.and_then(|k| k.get("enable_thinking")?.as_bool()) {
            return if on {
                Thinking::On {
                    budget_tokens: None,
                }
            } else {
                Thinking::Off
            };
        }
        super::thinking_from_effort(self.reasoning_effort.as_deref())
    }
}

/// A Chat Completions body as a [`SimRequest`], refused as `profile` refuses fields.
///
/// # Errors
/// The body is not a usable request; `max_tokens` / `max_completion_tokens` below 1; a
/// field the profile refuses.
pub fn parse(body: &[u8], profile: &ProviderProfile) -> Result<SimRequest, RequestError> {
    let req = ChatRequest::parse(body)?;
    if profile.rejects_stream_options && req.stream_options.is_some() {
        return Err(RequestError::param(
            "Unrecognized request argument supplied: stream_options",
            "stream_options",
        ));
    }
    if profile.requires_max_completion_tokens && req.max_tokens.is_some() {
        return Err(RequestError::param(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "max_tokens",
        ));
    }
    let max_tokens = match req.max_completion_tokens {
        Some(m) => super::cap("max_completion_tokens", Some(m))?,
        None => super::cap("max_tokens", req.max_tokens)?,
    };
    let (ignore_eos, min_tokens) = super::exact_output(req.ignore_eos, req.min_tokens, max_tokens)?;
    let mut parts = Vec::new();
    let mut assistant_turns = Vec::new();
    let mut last_user = None;
    for (i, m) in req.messages.iter().enumerate() {
        parts.extend(super::content_texts(m.content.as_ref()));
        if m.role.as_deref() == Some("user") {
            last_user = Some(super::content_texts(m.content.as_ref()).join("\n"));
        }
        if m.role.as_deref() == Some("assistant") {
            assistant_turns.push(AssistantTurn {
                at: format!("messages[{i}]"),
                reasoning: m
                    .reasoning_content
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
    }
    Ok(SimRequest {
        api: Api::Chat,
        model: req.model.clone(),
        stream: req.stream.unwrap_or(false),
        max_tokens,
        include_usage: req
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        seed: req.seed,
        thinking: req.thinking(),
        parts,
        assistant_turns,
        last_user,
        stop: super::stop_sequences(req.stop.as_ref()),
        json_mode: super::json_format(req.response_format.as_ref()),
        tool: super::first_tool_name(req.tools.as_ref(), |t| t.get("function")?.get("name")),
        ignore_eos,
        min_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ReasoningPassback;

    fn p(body: &[u8]) -> SimRequest {
        parse(body, &ProviderProfile::default()).unwrap()
    }

    #[test]
    fn parses_string_and_part_contents() {
        let body = br#"{"model":"m","messages":[
            {"role":"system","content":"abcd"},
            {"role":"user","content":[{"type":"text","text":"efghi"},{"type":"image_url","image_url":{"url":"x"}}]},
            {"role":"assistant","content":null}],
            "stream":true,"max_tokens":12,"stream_options":{"include_usage":true},"seed":3}"#;
        let r = p(body);
        assert!(r.stream);
        assert!(r.include_usage);
        assert_eq!(r.max_tokens, Some(12));
        assert_eq!(r.prompt_text(), "abcd\nefghi");
        assert_eq!(r.prompt_tokens(&ProviderProfile::default()), 3); // 9 chars -> ceil(9/4)
        assert_eq!(r.thinking, Thinking::Default);
    }

    #[test]
    fn max_completion_tokens_wins_and_bad_bodies_fail() {
        let r = p(
            br#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"max_completion_tokens":9}"#,
        );
        assert_eq!(r.max_tokens, Some(9));
        assert!(!r.stream);
        let d = ProviderProfile::default();
        assert!(parse(b"not json", &d).is_err());
        assert_eq!(
            parse(br#"{"messages":[]}"#, &d)
                .unwrap_err()
                .param
                .as_deref(),
            Some("messages")
        );
        let e = parse(
            br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
            &d,
        )
        .unwrap_err();
        assert_eq!(e.message, "max_tokens must be at least 1, got 0");
    }

    #[test]
    fn profiles_refuse_stream_options_and_max_tokens_naming_the_field() {
        let body = br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}"#;
        let strict = ProviderProfile {
            rejects_stream_options: true,
            ..ProviderProfile::default()
        };
        let e = parse(body, &strict).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stream_options"));
        assert!(e.message.contains("stream_options"), "{}", e.message);
        let without =
            br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"stream":true}"#;
        assert_eq!(parse(without, &strict).unwrap().max_tokens, Some(4));

        let newer = ProviderProfile {
            requires_max_completion_tokens: true,
            ..ProviderProfile::default()
        };
        let e = parse(without, &newer).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        assert!(
            e.message.contains("'max_completion_tokens'"),
            "{}",
            e.message
        );
        let ok = br#"{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":4}"#;
        assert_eq!(parse(ok, &newer).unwrap().max_tokens, Some(4));
    }

    #[test]
    fn thinking_switches_are_read() {
        let with = |extra: &str| {
            p(format!(r#"{{"messages":[{{"role":"user","content":"x"}}]{extra}}}"#).as_bytes())
                .thinking
        };
        let on = Thinking::On {
            budget_tokens: None,
        };
        assert_eq!(with(r#","thinking":{"type":"disabled"}"#), Thinking::Off);
        assert_eq!(with(r#","thinking":{"type":"enabled"}"#), on);
        let kw = r#","chat_template_kwargs":{"enable_thinking":false}"#;
        assert_eq!(with(kw), Thinking::Off);
        let kw = r#","chat_template_kwargs":{"enable_thinking":true}"#;
        assert_eq!(with(kw), on);
        assert_eq!(with(r#","reasoning_effort":"none""#), Thinking::Off);
        assert_eq!(with(r#","reasoning_effort":"high""#), on);
    }

    #[test]
    fn reasoning_passback_is_checked_per_assistant_message() {
        let req = |assistant2: &str| {
            p(format!(
                r#"{{"messages":[
                {{"role":"user","content":"q1"}},
                {{"role":"assistant","content":"a1","reasoning_content":"thought one"}},
                {{"role":"user","content":"q2"}},
                {{"role":"assistant","content":"a2"{assistant2}}},
                {{"role":"user","content":"q3"}}]}}"#
            )
            .as_bytes())
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
        assert_eq!(full.prompt_tokens(&ProviderProfile::default()), 8);
        assert_eq!(partial.prompt_tokens(&ProviderProfile::default()), 6);
        // A single-turn request never fails the check.
        let single = p(br#"{"messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(
            single.reasoning_passback_error(ReasoningPassback::Required),
            None
        );
    }

    #[test]
    fn answer_key_depends_on_prompt_and_seed() {
        let mk = |s: &str| p(s.as_bytes()).answer_key();
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
