//! Decoding of OpenAI chat-completion payloads: streamed `chat.completion.chunk`s and whole
//! `chat.completion` bodies.
//!
//! Only the fields a measurement needs are read; everything else is skipped without being
//! built. Strings borrow from the payload when they hold no JSON escapes. Every field is read
//! leniently: a field of an unexpected JSON type (a `null` content, an object where a string
//! was expected, a number as a string) is treated as absent rather than failing the payload,
//! because providers disagree on all of these. A payload fails to decode only when it is not
//! JSON at all or not an object.
//!
//! Where providers put things (a fix must handle the whole kind):
//!
//! * text: `delta.content` (a string, or an array of parts `{"type":"text","text":…}`, whose
//!   `thinking`/`reasoning` parts are reasoning);
//! * reasoning: `reasoning_content` (DeepSeek, Qwen, older vLLM), `reasoning` (OpenRouter,
//!   vLLM, Ollama, Groq), `reasoning_text`, `thinking`, and OpenRouter's `reasoning_details`
//!   (used only when no plain field is set, since OpenRouter sends both);
//! * tool calls: `delta.tool_calls[]` fragments (`index`, optional `id`, `function.name`,
//!   `function.arguments` as a string or, for some servers, an object), and the legacy
//!   `delta.function_call`;
//! * usage: top-level `usage` (on any chunk: a final empty-`choices` chunk, the finish
//!   chunk, or cumulative totals repeated on every chunk, where the last one wins field by
//!   field, see [`merge_usage`]), `choices[].usage` (Moonshot), `x_groq.usage` (Groq);
//!   `input_tokens`/`output_tokens` spellings (Responses/Anthropic style);
//!   reasoning tokens from `completion_tokens_details`/`output_tokens_details
//!   .reasoning_tokens` or `usage.reasoning_tokens`; cached prompt tokens, first found of
//!   `prompt_tokens_details.cached_tokens` (OpenAI, xAI, OpenRouter, vLLM),
//!   `input_tokens_details.cached_tokens` (Responses style), `prompt_cache_hit_tokens`
//!   (DeepSeek), `usage.cached_tokens` (Moonshot) and `cache_read_input_tokens` (Anthropic
//!   style; `cache_creation_input_tokens` are written to the cache, not read, so not counted);
//! * errors: an `error` member (object or string), or a vLLM-style top-level
//!   `{"object":"error","message","type","code"}`;
//! * what answered: the top-level `model` and `system_fingerprint` strings.
//!
//! # Files
//! * [`lenient`]: the lenient field readers every API's payload is made of ([`Text`],
//!   [`Num`], [`Scalar`], [`Obj`], [`Many`], [`Args`]);
//! * [`content`]: a message text, a string or an array of parts ([`ContentField`]);
//! * [`delta`]: a delta or message and its generated output ([`DeltaWire`], tool calls,
//!   audio);
//! * [`usage`]: the usage object in any spelling ([`UsageWire`], [`merge_usage`]);
//! * [`error`]: error members and provider errors ([`ErrorWire`], [`ProviderError`]);
//! * [`payload`]: a whole payload ([`ChunkWire`]), its choices, [`decode`];
//! * [`lite`]: the single-pass fast path for the common chunk ([`decode_lite`],
//!   [`decode_cached`]).

/// Generates visitor methods that accept a JSON type and yield the default (absent) value.
macro_rules! ignore_types {
    (bool) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (num) => {
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (str) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (null) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
    (seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
    (map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
    ($($t:ident),+) => { $(ignore_types!($t);)+ };
}

pub mod content;
pub mod delta;
pub mod error;
pub mod lenient;
pub mod lite;
pub mod payload;
#[cfg(test)]
mod tests;
pub mod usage;

pub use content::ContentField;
pub use delta::{AudioWire, DeltaWire, FunctionWire, ToolCallWire};
pub use error::{ErrorObj, ErrorWire, ProviderError};
pub use lenient::{Args, Many, Num, Obj, Scalar, Text};
pub use lite::{LiteCache, LiteChunk, decode_cached, decode_lite};
pub use payload::{ChoiceWire, Choices, ChunkWire, decode, decode_object};
pub use usage::{UsageWire, merge_usage};
