//! Which HTTP API a provider is spoken to with, and how each request to it is shaped.
//!
//! A provider's [`RequestShape`] travels in the plan (`ProviderSpec::request`); every field
//! is absent from the plan JSON at its default, so plans that do not use it keep their hash.
//! The defaults are what latmesh always sent before: OpenAI Chat Completions, the key as a
//! Bearer token, the output cap in `max_tokens`, usage asked for in streams.
//!
//! Secret header values never travel: a header whose value is `{ env = "NAME" }` carries the
//! variable's name only, read on each agent and treated like the API key.
//!
//! APIs (their specifications):
//! * [`Api::Chat`]: OpenAI Chat Completions, `POST {base_url}/chat/completions`
//!   (<https://platform.openai.com/docs/api-reference/chat>);
//! * [`Api::Anthropic`]: Anthropic Messages, `POST {base_url}/messages`
//!   (<https://docs.anthropic.com/en/api/messages>, streaming events:
//!   <https://docs.anthropic.com/en/docs/build-with-claude/streaming>);
//! * [`Api::Responses`]: OpenAI Responses, `POST {base_url}/responses`
//!   (<https://platform.openai.com/docs/api-reference/responses>).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The HTTP API of a provider (campaign key `api`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// OpenAI Chat Completions (`/chat/completions`).
    #[default]
    Chat,
    /// Anthropic Messages (`/messages`), as Claude Code speaks it.
    Anthropic,
    /// OpenAI Responses (`/responses`), as Codex speaks it.
    Responses,
}

impl Api {
    /// Every API, in the order they are documented.
    pub const ALL: [Api; 3] = [Api::Chat, Api::Anthropic, Api::Responses];

    /// The campaign-file spelling: `chat`, `anthropic`, `responses`.
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Anthropic => "anthropic",
            Api::Responses => "responses",
        }
    }

    /// The path appended to a provider's `base_url` (one slash between them):
    /// `/chat/completions`, `/messages` or `/responses`.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/chat/completions",
            Api::Anthropic => "/messages",
            Api::Responses => "/responses",
        }
    }

    /// The API named `s` (`chat`, `anthropic`, `responses`).
    ///
    /// # Errors
    /// A message listing the accepted names.
    pub fn parse(s: &str) -> Result<Api, String> {
        Api::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("unknown api {s:?}: expected one of chat, anthropic, responses"))
    }

    fn is_chat(&self) -> bool {
        *self == Api::Chat
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the API key is sent (campaign key `auth`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthStyle {
    /// `Authorization: Bearer KEY`.
    #[default]
    Bearer,
    /// The key alone in the named header (`x-api-key` for Anthropic, `api-key` for Azure),
    /// lower-case.
    Header(String),
    /// The key is not sent (a provider authenticated by a header of `headers`, or none).
    None,
}

impl AuthStyle {
    fn is_bearer(&self) -> bool {
        *self == AuthStyle::Bearer
    }
}

/// The value of an extra request header: literal text from the campaign file, or the name
/// of an environment variable read on each agent (a secret, handled like the API key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HeaderValueSource {
    /// `{ env = "NAME" }`: the value of `$NAME` on the agent.
    Env {
        /// Variable name (letters, digits, `_`).
        env: String,
    },
    /// The value itself (not secret: it is in the plan).
    Literal(String),
}

/// Whether a streamed request asks for usage (`stream_options.include_usage` in Chat
/// Completions; the other APIs always report usage, so this applies to `chat` only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamUsage {
    /// Ask; a 400 whose error names the field makes that agent stop asking this provider,
    /// and say so once.
    #[default]
    Auto,
    /// Always ask.
    Always,
    /// Never ask.
    Never,
}

impl StreamUsage {
    fn is_auto(&self) -> bool {
        *self == StreamUsage::Auto
    }
}

/// Tags around reasoning inside `content` (a model served without a reasoning parser:
/// `<think>` … `</think>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningTags {
    /// Opening tag, e.g. `<think>`.
    pub open: String,
    /// Closing tag, e.g. `</think>`.
    pub close: String,
}

/// How requests to one provider are built beyond the scenario's prompt and sampling
/// parameters. Every field is absent from the plan JSON at its default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestShape {
    /// The API spoken.
    #[serde(default, skip_serializing_if = "Api::is_chat")]
    pub api: Api,
    /// Extra headers, lower-case name → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderValueSource>,
    /// Query parameters appended to the URL, name → value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    /// Merged into the JSON body last (a key here replaces latmesh's own); the scenario's
    /// `extra_body` is merged first, so the provider's wins.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// How the API key is sent.
    #[serde(default, skip_serializing_if = "AuthStyle::is_bearer")]
    pub auth: AuthStyle,
    /// The body field that carries the output cap; `None`: the API's own (`max_tokens` for
    /// chat and anthropic, `max_output_tokens` for responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<String>,
    /// Whether streams ask for usage (chat only).
    #[serde(default, skip_serializing_if = "StreamUsage::is_auto")]
    pub stream_usage: StreamUsage,
    /// Reasoning inside `content` between these tags; `None`: content is all visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tags: Option<ReasoningTags>,
    /// Merged into the body of scenarios with `output_tokens` (an exact output length), after
    /// `extra_body`: the fields with which this provider keeps generating to the cap (e.g.
    /// `{"ignore_eos": true}` for vLLM, SGLang and llama.cpp, `{"min_tokens": "$output_tokens"}`
    /// for vLLM). A string value `"$output_tokens"` is replaced by the scenario's
    /// `output_tokens` as a number.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub exact_output: serde_json::Map<String, serde_json::Value>,
}

impl RequestShape {
    /// Whether every field is at its default (the shape latmesh always sent).
    pub fn is_default(&self) -> bool {
        *self == RequestShape::default()
    }

    /// A shared default shape (Chat Completions, Bearer, `max_tokens`, usage asked).
    pub fn chat_default() -> &'static RequestShape {
        static DEFAULT: std::sync::LazyLock<RequestShape> =
            std::sync::LazyLock::new(RequestShape::default);
        &DEFAULT
    }

    /// The default shape of `api`.
    pub fn for_api(api: Api) -> RequestShape {
        RequestShape {
            api,
            ..RequestShape::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_shape_is_absent_from_json_and_each_field_round_trips() {
        assert_eq!(
            serde_json::to_string(&RequestShape::default()).unwrap(),
            "{}"
        );
        let mut s = RequestShape::for_api(Api::Anthropic);
        s.auth = AuthStyle::Header("x-api-key".into());
        s.headers.insert(
            "anthropic-beta".into(),
            HeaderValueSource::Literal("x".into()),
        );
        s.headers.insert(
            "x-secret".into(),
            HeaderValueSource::Env { env: "S".into() },
        );
        s.stream_usage = StreamUsage::Never;
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""api":"anthropic""#), "{json}");
        assert!(json.contains(r#""auth":{"header":"x-api-key"}"#), "{json}");
        assert!(json.contains(r#""x-secret":{"env":"S"}"#), "{json}");
        let back: RequestShape = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(Api::parse("responses"), Ok(Api::Responses));
        assert!(
            Api::parse("messages")
                .unwrap_err()
                .contains("chat, anthropic, responses")
        );
        assert_eq!(Api::Anthropic.path(), "/messages");
    }
}
