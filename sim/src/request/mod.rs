//! The part of a request the simulator looks at, read from any of the three APIs into one
//! [`SimRequest`]: the planner ([`crate::plan`]) sees the same prompt, cap and thinking
//! switch whichever API carried them, so one prompt gets the same answer (length, text,
//! timing law) on every API.
//!
//! * [`chat`]: OpenAI Chat Completions (`messages`, `max_completion_tokens` / `max_tokens`,
//!   `stream_options`);
//! * [`anthropic`]: Anthropic Messages (`system`, `messages` with string or block content,
//!   `max_tokens` required, `thinking`);
//! * [`responses`]: OpenAI Responses (`instructions`, `input` as a string or items,
//!   `max_output_tokens`, `reasoning`).
//!
//! On every API, vLLM's `ignore_eos` (run to the output cap) and `min_tokens` (the fewest
//! output tokens; at most the cap) are read too ([`SimRequest::ignore_eos`],
//! [`SimRequest::min_tokens`]): latmesh's exact output lengths send them through a
//! provider's `exact_output` fields.
//!
//! Requests are read leniently (unknown fields are ignored); what makes a request unusable is
//! a [`RequestError`], answered with HTTP 400 in the API's error shape.

pub mod anthropic;
pub mod chat;
pub mod responses;

use latmesh_core::api::Api;

use crate::plan::Thinking;
use crate::profile::{Feature, ProviderProfile, ReasoningPassback};
use crate::text;

/// Why a request is refused (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The message for the client; it names the field at fault.
    pub message: String,
    /// The field at fault, when one is (OpenAI's `param`).
    pub param: Option<String>,
}

impl RequestError {
    /// A refusal with `message`, blaming no single field.
    pub fn new(message: impl Into<String>) -> Self {
        RequestError {
            message: message.into(),
            param: None,
        }
    }

    /// A refusal with `message`, blaming `param`.
    pub fn param(message: impl Into<String>, param: &str) -> Self {
        RequestError {
            message: message.into(),
            param: Some(param.to_string()),
        }
    }
}

/// An assistant turn of a multi-turn history, with the reasoning sent back with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssistantTurn {
    /// Where it is in the request: `messages[3]`, `input[2]`.
    pub at: String,
    /// The reasoning sent back for it (Chat `reasoning_content`, the text of an Anthropic
    /// `thinking` block, the summary text of the Responses `reasoning` item before it).
    pub reasoning: Option<String>,
}

/// A request of any API, as the planner and renderers need it.
#[derive(Debug, Clone)]
pub struct SimRequest {
    /// The API it came in on.
    pub api: Api,
    /// Requested model id (echoed back; any id is accepted).
    pub model: Option<String>,
    /// Stream the answer as server-sent events.
    pub stream: bool,
    /// The output cap (reasoning included, as every API counts it).
    pub max_tokens: Option<u32>,
    /// Chat only: `stream_options.include_usage` (the other APIs always report usage).
    pub include_usage: bool,
    /// Chat only: the request `seed`.
    pub seed: Option<i64>,
    /// The thinking switch.
    pub thinking: Thinking,
    /// Prompt texts in order: system / instructions first, then every message's text parts.
    pub parts: Vec<String>,
    /// The assistant turns of the history, in order.
    pub assistant_turns: Vec<AssistantTurn>,
    /// The text of the last user message (its text parts joined by newlines): what the
    /// answer oracle ([`crate::script`]) looks at.
    pub last_user: Option<String>,
    /// Stop sequences asked for (Chat `stop`, a string or an array; Anthropic
    /// `stop_sequences`); empty when none. The Responses API has none.
    pub stop: Vec<String>,
    /// JSON mode asked for (Chat `response_format.type` `json_object` or `json_schema`;
    /// Responses `text.format.type` likewise). The Anthropic API has none.
    pub json_mode: bool,
    /// The name of the first declared tool (Chat `tools[0].function.name`, Anthropic and
    /// Responses `tools[0].name`), when tools are declared.
    pub tool: Option<String>,
    /// `ignore_eos: true` (vLLM, SGLang; read on every API): the answer runs to the output
    /// cap (finish reason `length`), see [`crate::plan::PlanInput::ignore_eos`].
    pub ignore_eos: bool,
    /// `min_tokens` (vLLM; read on every API): the natural answer is at least this long
    /// (0 when absent). At most the output cap.
    pub min_tokens: u32,
}

impl SimRequest {
    /// Parse a request body that came in on `api` for a provider with `profile`.
    ///
    /// # Errors
    /// A [`RequestError`] naming the field when the body is not a usable request of that API
    /// (or one the profile refuses: [`ProviderProfile::rejects_stream_options`],
    /// [`ProviderProfile::requires_max_completion_tokens`]).
    pub fn parse(api: Api, body: &[u8], profile: &ProviderProfile) -> Result<Self, RequestError> {
        match api {
            Api::Chat => chat::parse(body, profile),
            Api::Anthropic => anthropic::parse(body),
            Api::Responses => responses::parse(body),
        }
    }

    /// All prompt text, the parts joined by newlines.
    pub fn prompt_text(&self) -> String {
        self.parts.join("\n")
    }

    /// The prompt tokens `profile` counts ([`crate::tokens::prompt_tokens`]) over all prompt
    /// parts and the reasoning sent back with assistant turns (the newlines that
    /// [`prompt_text`](Self::prompt_text) puts between parts are not counted): generated
    /// text by words, other text at `ceil(chars / 4)`, plus the profile's template tokens.
    pub fn prompt_tokens(&self, profile: &ProviderProfile) -> u32 {
        let reasoning = self
            .assistant_turns
            .iter()
            .filter_map(|t| t.reasoning.as_deref());
        crate::tokens::prompt_tokens(
            profile,
            self.parts.iter().map(String::as_str).chain(reasoning),
        )
    }

    /// Key that fixes the answer's natural length and text: a hash of the prompt text and
    /// `seed`, so the same prompt gets the same answer on every API.
    pub fn answer_key(&self) -> u64 {
        let h = text::fnv1a64(self.prompt_text().as_bytes());
        match self.seed {
            Some(s) => text::mix64(h ^ text::mix64(s as u64)),
            None => text::mix64(h),
        }
    }

    /// Applies the profile's [`Feature`] switches to what the request asks: a feature the
    /// profile ignores is dropped from the request (answered as if not asked); one it rejects
    /// is refused; one it honours sometimes ([`Feature::applied`]) is dropped or kept by
    /// `next_ask(i)`, the 0-based count of earlier requests of this provider that asked for
    /// feature `i` (0 stop, 1 JSON mode, 2 tools), called once per asked feature.
    ///
    /// # Errors
    /// A [`RequestError`] naming the field (`stop` / `stop_sequences`, `response_format` /
    /// `text.format`, `tools`) of the first asked feature the profile rejects.
    pub fn apply_features(
        &mut self,
        profile: &ProviderProfile,
        mut next_ask: impl FnMut(usize) -> u64,
    ) -> Result<(), RequestError> {
        let (stop_field, json_field) = match self.api {
            Api::Chat => ("stop", "response_format"),
            Api::Anthropic => ("stop_sequences", "response_format"),
            Api::Responses => ("stop", "text.format"),
        };
        let asks = [
            (!self.stop.is_empty(), profile.stop, stop_field, ""),
            (
                self.json_mode,
                profile.json_mode,
                json_field,
                " (JSON mode: json_object, json_schema)",
            ),
            (self.tool.is_some(), profile.tool_calls, "tools", ""),
        ];
        for (asked, feature, field, what) in asks {
            if asked && feature == Feature::Rejected {
                return Err(RequestError::param(
                    format!(
                        "Unsupported parameter: '{field}'{what} is not supported by this model"
                    ),
                    field,
                ));
            }
        }
        if !self.stop.is_empty() && !profile.stop.applied(next_ask(0)) {
            self.stop.clear();
        }
        if self.json_mode && !profile.json_mode.applied(next_ask(1)) {
            self.json_mode = false;
        }
        if self.tool.is_some() && !profile.tool_calls.applied(next_ask(2)) {
            self.tool = None;
        }
        Ok(())
    }

    /// The HTTP 400 message a provider with `policy` answers to this request's history, if
    /// any: with [`ReasoningPassback::Required`] the first assistant turn sent back without
    /// its reasoning, with [`ReasoningPassback::Rejected`] the first one with it. Assistant
    /// turns are numbered from 1; the position in the request is named too.
    pub fn reasoning_passback_error(&self, policy: ReasoningPassback) -> Option<String> {
        let (field, noun) = match self.api {
            Api::Chat => ("`reasoning_content`", "reasoning_content"),
            Api::Anthropic => ("`thinking` block", "thinking block"),
            Api::Responses => ("`reasoning` item", "reasoning item"),
        };
        for (n, turn) in self.assistant_turns.iter().enumerate() {
            let has = turn.reasoning.is_some();
            let (n, at) = (n + 1, &turn.at);
            match policy {
                ReasoningPassback::Required if !has => {
                    return Some(format!(
                        "Missing {field} in assistant message {n} ({at}): in thinking mode the {noun} of every earlier assistant turn must be passed back"
                    ));
                }
                ReasoningPassback::Rejected if has => {
                    return Some(format!(
                        "{field} is not allowed in assistant message {n} ({at}): remove the {noun} of earlier turns from the input"
                    ));
                }
                _ => {}
            }
        }
        None
    }
}

/// The text parts of a content value: a string, or an array of parts / blocks whose `text`
/// strings are taken (other parts, images and the like, are not counted).
pub(crate) fn content_texts(content: Option<&serde_json::Value>) -> Vec<String> {
    match content {
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|i| i.get("text").and_then(serde_json::Value::as_str))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Stop sequences of a `stop` / `stop_sequences` value: a string, or an array whose
/// non-empty strings are taken.
pub(crate) fn stop_sequences(value: Option<&serde_json::Value>) -> Vec<String> {
    match value {
        Some(serde_json::Value::String(s)) if !s.is_empty() => vec![s.clone()],
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a `response_format` / `text.format` value asks for JSON (`type` `json_object`
/// or `json_schema`).
pub(crate) fn json_format(format: Option<&serde_json::Value>) -> bool {
    matches!(
        format.and_then(|f| f.get("type")?.as_str()),
        Some("json_object" | "json_schema")
    )
}

/// The name of the first tool of a `tools` array, read with `name`.
pub(crate) fn first_tool_name(
    tools: Option<&serde_json::Value>,
    name: impl Fn(&serde_json::Value) -> Option<&serde_json::Value>,
) -> Option<String> {
    let first = tools?.as_array()?.first()?;
    name(first)?.as_str().map(str::to_string)
}

/// The thinking switch of an OpenAI `reasoning_effort` / `reasoning.effort`: `"none"` off,
/// any other effort on, absent: the model's default.
pub(crate) fn thinking_from_effort(effort: Option<&str>) -> Thinking {
    match effort {
        Some("none") => Thinking::Off,
        Some(_) => Thinking::On {
            budget_tokens: None,
        },
        None => Thinking::Default,
    }
}

/// The `ignore_eos` and `min_tokens` of a request (vLLM's extra sampling fields, read on
/// every API): `(ignore_eos, min_tokens)`.
///
/// # Errors
/// `min_tokens` below 0 or above the output cap `max_tokens` (as vLLM refuses it).
pub(crate) fn exact_output(
    ignore_eos: Option<bool>,
    min_tokens: Option<i64>,
    max_tokens: Option<u32>,
) -> Result<(bool, u32), RequestError> {
    let min = match min_tokens {
        None => 0,
        Some(m) if m < 0 => {
            return Err(RequestError::param(
                format!("min_tokens must be greater than or equal to 0, got {m}"),
                "min_tokens",
            ));
        }
        Some(m) => u32::try_from(m).unwrap_or(u32::MAX),
    };
    if let Some(cap) = max_tokens
        && min > cap
    {
        return Err(RequestError::param(
            format!("min_tokens must be less than or equal to max_tokens={cap}, got {min}"),
            "min_tokens",
        ));
    }
    Ok((ignore_eos.unwrap_or(false), min))
}

/// An output cap read from `field`: at least 1.
pub(crate) fn cap(field: &str, value: Option<i64>) -> Result<Option<u32>, RequestError> {
    match value {
        Some(m) if m < 1 => Err(RequestError::param(
            format!("{field} must be at least 1, got {m}"),
            field,
        )),
        Some(m) => Ok(Some(u32::try_from(m).unwrap_or(u32::MAX))),
        None => Ok(None),
    }
}
