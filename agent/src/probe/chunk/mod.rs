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

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use latmesh_core::record::Usage;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

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

/// A string field: a JSON string, or absent (null, missing or any other type).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Option<Cow<'a, str>>);

impl Text<'_> {
    /// The string, `""` when absent.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            ignore_types!(bool, num, null, seq, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A count: a non-negative JSON number (or a string of one); absent otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Num(pub Option<u64>);

impl Num {
    fn u32(self) -> Option<u32> {
        self.0.map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a count")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(Some(v)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(u64::try_from(v).ok()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Num, E> {
                // A whole number (`12.0` from a float formatter); `1.5` tokens is no count.
                Ok(Num(
                    (v.is_finite() && v >= 0.0 && v.fract() == 0.0).then_some(v as u64)
                ))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Num, E> {
                Ok(Num(v.trim().parse().ok()))
            }
            ignore_types!(bool, null, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// An error code: a string or a number, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scalar(pub Option<String>);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_owned())))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_string())))
            }
            ignore_types!(bool, null, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// A JSON object decoded as `T`; absent when the value is not an object.
#[derive(Clone, Debug, PartialEq)]
pub struct Obj<T>(pub Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Obj(Some(t)))
            }
            ignore_types!(bool, num, str, null, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A JSON array of objects decoded as `T` (other elements skipped); empty when absent.
#[derive(Clone, Debug, PartialEq)]
pub struct Many<T>(pub Vec<T>);

impl<T> Default for Many<T> {
    fn default() -> Self {
        Many(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Many<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Many<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Many<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(Obj(item)) = seq.next_element::<Obj<T>>()? {
                    out.extend(item);
                }
                Ok(Many(out))
            }
            ignore_types!(bool, num, str, null, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A message text: a string, or an array of content parts split into visible text and
/// reasoning (`{"type":"thinking"|"reasoning",…}` parts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ContentField<'a> {
    /// Null, missing, or a type that holds no text.
    #[default]
    Absent,
    /// A plain string.
    Str(Cow<'a, str>),
    /// An array of parts.
    Parts {
        /// Text of the `text` parts (and bare strings).
        content: String,
        /// Text of the thinking/reasoning parts.
        reasoning: String,
    },
}

impl ContentField<'_> {
    /// The visible text (`""` when none).
    pub fn visible(&self) -> &str {
        match self {
            ContentField::Absent => "",
            ContentField::Str(s) => s,
            ContentField::Parts { content, .. } => content,
        }
    }

    /// Reasoning carried inside content parts.
    pub fn part_reasoning(&self) -> &str {
        match self {
            ContentField::Parts { reasoning, .. } => reasoning,
            _ => "",
        }
    }

    /// Everything, for a field that is reasoning as a whole.
    fn all(&self) -> Cow<'_, str> {
        match self {
            ContentField::Absent => Cow::Borrowed(""),
            ContentField::Str(s) => Cow::Borrowed(s),
            ContentField::Parts { content, reasoning } if content.is_empty() => {
                Cow::Borrowed(reasoning)
            }
            ContentField::Parts { content, reasoning } if reasoning.is_empty() => {
                Cow::Borrowed(content)
            }
            ContentField::Parts { content, reasoning } => {
                Cow::Owned(format!("{reasoning}{content}"))
            }
        }
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct PartFields<'a> {
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    #[serde(borrow)]
    text: Text<'a>,
    #[serde(borrow)]
    thinking: ContentField<'a>,
    #[serde(borrow)]
    reasoning: Text<'a>,
}

/// One element of a parts array: a bare string or a part object.
#[derive(Default)]
enum Part<'a> {
    #[default]
    Skip,
    Str(Cow<'a, str>),
    Fields(PartFields<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Part<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Part<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a content part")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Part<'a>, E> {
                Ok(Part::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Part<'a>, E> {
                Ok(Part::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Part<'a>, A::Error> {
                PartFields::deserialize(MapAccessDeserializer::new(map)).map(Part::Fields)
            }
            ignore_types!(bool, num, null, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ContentField<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ContentField<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(ContentField::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ContentField::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(ContentField::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let (mut content, mut reasoning) = (String::new(), String::new());
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    match part {
                        Part::Skip => {}
                        Part::Str(s) => content.push_str(&s),
                        Part::Fields(p) => match p.kind.as_str() {
                            "thinking" | "reasoning" | "reasoning_text" | "reasoning.text"
                            | "reasoning_content" => {
                                reasoning.push_str(&p.thinking.all());
                                reasoning.push_str(p.reasoning.as_str());
                                reasoning.push_str(p.text.as_str());
                            }
                            "" | "text" | "output_text" => content.push_str(p.text.as_str()),
                            _ => {}
                        },
                    }
                }
                Ok(ContentField::Parts { content, reasoning })
            }
            ignore_types!(bool, num, null, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `function.arguments`: a string, or (some servers) a JSON value, kept as its JSON text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args<'a>(pub Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Args<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Args<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("tool-call arguments")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Args<'a>, E> {
                Ok(Args(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Args<'a>, E> {
                Ok(Args(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Args<'a>, E> {
                Ok(Args(Some(Cow::Owned(v))))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Args<'a>, A::Error> {
                let v = serde_json::Value::deserialize(MapAccessDeserializer::new(map))?;
                Ok(Args(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Args<'a>, A::Error> {
                let v = serde_json::Value::deserialize(SeqAccessDeserializer::new(seq))?;
                Ok(Args(Some(Cow::Owned(v.to_string()))))
            }
            ignore_types!(bool, num, null);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `function` of a tool call (or a legacy `function_call`).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct FunctionWire<'a> {
    /// Function name (or a fragment of it).
    #[serde(borrow)]
    pub name: Text<'a>,
    /// Arguments (or a fragment of them).
    #[serde(borrow)]
    pub arguments: Args<'a>,
}

/// One tool-call entry of a delta (a fragment) or of a message (whole).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ToolCallWire<'a> {
    /// Which call this fragment belongs to; missing for some servers.
    pub index: Num,
    /// Call id; often only on the first fragment, missing entirely for some servers.
    #[serde(borrow)]
    pub id: Text<'a>,
    /// The function part.
    #[serde(borrow)]
    pub function: Obj<FunctionWire<'a>>,
}

impl ToolCallWire<'_> {
    /// Whether the fragment carries anything generated (an id, a name or arguments).
    pub fn is_nonempty(&self) -> bool {
        !self.id.as_str().is_empty()
            || self.function.0.as_ref().is_some_and(|f| {
                !f.name.as_str().is_empty()
                    || f.arguments.0.as_deref().is_some_and(|a| !a.is_empty())
            })
    }
}

#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct ReasoningDetail<'a> {
    #[serde(borrow)]
    text: Text<'a>,
    #[serde(borrow)]
    summary: Text<'a>,
}

/// `audio` of a delta or message (a model asked for audio output): its transcript is the
/// answer's text, its `data` (base64 audio) the answer itself.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct AudioWire<'a> {
    /// Text of the audio (or a fragment of it).
    #[serde(borrow)]
    pub transcript: Text<'a>,
    /// Base64 audio bytes (or a fragment).
    #[serde(borrow)]
    pub data: Text<'a>,
}

/// `choices[].delta` of a chunk, or `choices[].message` of a whole completion.
///
/// Every field of the Chat Completions specification that carries generated output is
/// read (<https://platform.openai.com/docs/api-reference/chat-streaming>, and `message` of
/// <https://platform.openai.com/docs/api-reference/chat/object>): `content`, `refusal`,
/// `audio` (`transcript`, `data`), `tool_calls`, the legacy `function_call`, and the
/// reasoning fields servers add. `annotations` (citations of the content) and `role` carry
/// no generated text.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct DeltaWire<'a> {
    /// Visible text.
    #[serde(borrow)]
    pub content: ContentField<'a>,
    /// The model's refusal, shown instead of content.
    #[serde(borrow)]
    pub refusal: Text<'a>,
    /// Audio output.
    #[serde(borrow)]
    pub audio: Obj<AudioWire<'a>>,
    #[serde(borrow)]
    reasoning_content: ContentField<'a>,
    #[serde(borrow)]
    reasoning: ContentField<'a>,
    #[serde(borrow)]
    reasoning_text: ContentField<'a>,
    #[serde(borrow)]
    thinking: ContentField<'a>,
    #[serde(borrow)]
    reasoning_details: Many<ReasoningDetail<'a>>,
    /// Tool-call fragments.
    #[serde(borrow)]
    pub tool_calls: Many<ToolCallWire<'a>>,
    /// Legacy function call (treated as tool call 0).
    #[serde(borrow)]
    pub function_call: Obj<FunctionWire<'a>>,
}

impl DeltaWire<'_> {
    /// The answer's text in this delta: `content`, then `refusal`, then the audio
    /// transcript (each usually alone in a delta; joined when several are there).
    pub fn content(&self) -> Cow<'_, str> {
        let transcript = self.audio.0.as_ref().map_or("", |a| a.transcript.as_str());
        let parts = [self.content.visible(), self.refusal.as_str(), transcript];
        match parts.iter().filter(|p| !p.is_empty()).count() {
            0 => Cow::Borrowed(""),
            1 => Cow::Borrowed(parts.into_iter().find(|p| !p.is_empty()).unwrap_or("")),
            _ => Cow::Owned(parts.concat()),
        }
    }

    /// Whether the delta carries audio bytes (the answer, without text).
    pub fn has_audio_data(&self) -> bool {
        self.audio
            .0
            .as_ref()
            .is_some_and(|a| !a.data.as_str().is_empty())
    }

    /// Reasoning text of this delta, from the first field (in the module's order) that is
    /// non-empty: one provider field is never counted twice.
    pub fn reasoning(&self) -> Cow<'_, str> {
        for f in [
            &self.reasoning_content,
            &self.reasoning,
            &self.reasoning_text,
            &self.thinking,
        ] {
            let t = f.all();
            if !t.is_empty() {
                return t;
            }
        }
        let parts = self.content.part_reasoning();
        if !parts.is_empty() {
            return Cow::Borrowed(parts);
        }
        let mut out = String::new();
        for d in &self.reasoning_details.0 {
            out.push_str(d.text.as_str());
            out.push_str(d.summary.as_str());
        }
        Cow::Owned(out)
    }

    /// Whether a tool-call fragment (or legacy function call) with content is present.
    pub fn has_tool_fragment(&self) -> bool {
        self.tool_calls.0.iter().any(ToolCallWire::is_nonempty)
            || self.function_call.0.as_ref().is_some_and(|f| {
                !f.name.as_str().is_empty()
                    || f.arguments.0.as_deref().is_some_and(|a| !a.is_empty())
            })
    }
}

/// The usage object (any spelling).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct UsageWire {
    prompt_tokens: Num,
    completion_tokens: Num,
    total_tokens: Num,
    input_tokens: Num,
    output_tokens: Num,
    reasoning_tokens: Num,
    completion_tokens_details: Obj<Details>,
    output_tokens_details: Obj<Details>,
    prompt_tokens_details: Obj<Details>,
    input_tokens_details: Obj<Details>,
    prompt_cache_hit_tokens: Num,
    cached_tokens: Num,
    cache_read_input_tokens: Num,
}

#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct Details {
    reasoning_tokens: Num,
    cached_tokens: Num,
}

impl UsageWire {
    /// The counts found, `None` when the object holds none.
    pub fn to_usage(&self) -> Option<Usage> {
        let detail =
            |o: &Obj<Details>, f: fn(&Details) -> Num| o.0.as_ref().and_then(|d| f(d).u32());
        let u = Usage {
            prompt_tokens: self.prompt_tokens.u32().or(self.input_tokens.u32()),
            completion_tokens: self.completion_tokens.u32().or(self.output_tokens.u32()),
            total_tokens: self.total_tokens.u32(),
            reasoning_tokens: detail(&self.completion_tokens_details, |d| d.reasoning_tokens)
                .or(detail(&self.output_tokens_details, |d| d.reasoning_tokens))
                .or(self.reasoning_tokens.u32()),
            cached_tokens: detail(&self.prompt_tokens_details, |d| d.cached_tokens)
                .or(detail(&self.input_tokens_details, |d| d.cached_tokens))
                .or(self.prompt_cache_hit_tokens.u32())
                .or(self.cached_tokens.u32())
                .or(self.cache_read_input_tokens.u32()),
        };
        (u != Usage::default()).then_some(u)
    }
}

/// Merges `newer` over `older` field by field (a field the newer object lacks is kept).
pub fn merge_usage(older: &mut Option<Usage>, newer: Usage) {
    match older {
        None => *older = Some(newer),
        Some(o) => {
            o.prompt_tokens = newer.prompt_tokens.or(o.prompt_tokens);
            o.completion_tokens = newer.completion_tokens.or(o.completion_tokens);
            o.total_tokens = newer.total_tokens.or(o.total_tokens);
            o.reasoning_tokens = newer.reasoning_tokens.or(o.reasoning_tokens);
            o.cached_tokens = newer.cached_tokens.or(o.cached_tokens);
        }
    }
}

/// One element of `choices`.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ChoiceWire<'a> {
    /// Choice index (0 for the only choice of an `n = 1` request).
    pub index: Num,
    /// Streamed delta.
    #[serde(borrow)]
    pub delta: Obj<DeltaWire<'a>>,
    /// Whole message (non-streaming).
    #[serde(borrow)]
    pub message: Obj<DeltaWire<'a>>,
    /// Why generation stopped.
    #[serde(borrow)]
    pub finish_reason: Text<'a>,
    /// Usage inside the choice (Moonshot).
    pub usage: Obj<UsageWire>,
}

/// `choices`, folded while decoding: the first choice with index 0 (or none) is kept; usage
/// found in the others is kept too. No vector is built.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choices<'a> {
    /// The choice measured.
    pub primary: Option<ChoiceWire<'a>>,
    /// Usage from other choices.
    pub other_usage: Option<UsageWire>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices<'a>, A::Error> {
                let mut out = Choices::default();
                while let Some(Obj(c)) = seq.next_element::<Obj<ChoiceWire<'de>>>()? {
                    let Some(c) = c else { continue };
                    if out.primary.is_none() && c.index.0.unwrap_or(0) == 0 {
                        out.primary = Some(c);
                    } else if let Some(u) = c.usage.0 {
                        out.other_usage = Some(u);
                    }
                }
                Ok(out)
            }
            ignore_types!(bool, num, str, null, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An `error` member.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ErrorWire<'a> {
    /// None (or `null`/`false`).
    #[default]
    Absent,
    /// A bare string.
    Message(Cow<'a, str>),
    /// An object.
    Object(ErrorObj<'a>),
}

/// The fields of an error object.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ErrorObj<'a> {
    /// Message.
    #[serde(borrow)]
    pub message: Text<'a>,
    /// Type.
    #[serde(borrow, rename = "type")]
    pub kind: Text<'a>,
    /// Code (string or number).
    pub code: Scalar,
}

impl<'de: 'a, 'a> Deserialize<'de> for ErrorWire<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ErrorWire<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an error")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(ErrorWire::Message(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ErrorWire::Message(Cow::Owned(v.to_owned())))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    ErrorWire::Object(ErrorObj::default())
                } else {
                    ErrorWire::Absent
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                ErrorObj::deserialize(MapAccessDeserializer::new(map)).map(ErrorWire::Object)
            }
            ignore_types!(num, null, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
struct XGroq {
    usage: Obj<UsageWire>,
}

/// A decoded payload (a streamed chunk or a whole completion).
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct ChunkWire<'a> {
    /// Folded `choices`.
    #[serde(borrow)]
    pub choices: Choices<'a>,
    /// Top-level usage.
    pub usage: Obj<UsageWire>,
    x_groq: Obj<XGroq>,
    /// `error` member.
    #[serde(borrow)]
    pub error: ErrorWire<'a>,
    #[serde(borrow)]
    object: Text<'a>,
    #[serde(borrow)]
    message: Text<'a>,
    #[serde(borrow, rename = "type")]
    kind: Text<'a>,
    code: Scalar,
    /// `model`: the model that answered.
    #[serde(borrow)]
    pub model: Text<'a>,
    /// `system_fingerprint`: the backend configuration that answered.
    #[serde(borrow)]
    pub system_fingerprint: Text<'a>,
}

/// A provider error: type, code and message, any of which may be missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderError {
    /// `type`.
    pub kind: Option<String>,
    /// `code`, as text.
    pub code: Option<String>,
    /// `message` (untruncated, unscrubbed).
    pub message: Option<String>,
}

impl ProviderError {
    /// The error of an error object: its non-empty `type`, `code` and `message`.
    pub fn from_obj(o: &ErrorObj<'_>) -> Self {
        let own = |t: &Text<'_>| t.0.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
        ProviderError {
            kind: own(&o.kind),
            code: o.code.0.clone(),
            message: own(&o.message),
        }
    }

    /// Reads an error from any payload: `{"error": {…}}`, `{"error": "…"}`, a bare error
    /// object (`{"message","type","code"}`), or plain text.
    pub fn from_payload(bytes: &[u8]) -> Self {
        if let Ok(c) = serde_json::from_slice::<ChunkWire<'_>>(bytes) {
            if let Some(e) = c.error() {
                return e;
            }
            let bare = ErrorObj {
                message: c.message,
                kind: c.kind,
                code: c.code,
            };
            let e = ProviderError::from_obj(&bare);
            if e != ProviderError::default() {
                return e;
            }
        }
        let text = String::from_utf8_lossy(bytes);
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        ProviderError {
            message: (!text.is_empty()).then_some(text),
            ..Default::default()
        }
    }
}

impl<'a> ChunkWire<'a> {
    /// The choice measured (see [`Choices`]).
    pub fn primary(&self) -> Option<&ChoiceWire<'a>> {
        self.choices.primary.as_ref()
    }

    /// The streamed delta of the measured choice (its `message` when a server sends that).
    pub fn delta(&self) -> Option<&DeltaWire<'a>> {
        let c = self.primary()?;
        c.delta.0.as_ref().or(c.message.0.as_ref())
    }

    /// The whole message of the measured choice (its `delta` when a server sends that).
    pub fn message(&self) -> Option<&DeltaWire<'a>> {
        let c = self.primary()?;
        c.message.0.as_ref().or(c.delta.0.as_ref())
    }

    /// `finish_reason` of the measured choice, when non-empty.
    pub fn finish_reason(&self) -> Option<&str> {
        self.primary()
            .map(|c| c.finish_reason.as_str())
            .filter(|s| !s.is_empty())
    }

    /// Usage found anywhere in the payload (top level over `choices[]` over `x_groq`).
    pub fn usage(&self) -> Option<Usage> {
        let mut out = None;
        let sources = [
            self.x_groq.0.as_ref().and_then(|x| x.usage.0.as_ref()),
            self.choices.other_usage.as_ref(),
            self.primary().and_then(|c| c.usage.0.as_ref()),
            self.usage.0.as_ref(),
        ];
        for u in sources.into_iter().flatten() {
            if let Some(u) = u.to_usage() {
                merge_usage(&mut out, u);
            }
        }
        out
    }

    /// `model`, `""` when absent (or not a string).
    pub fn model(&self) -> &str {
        self.model.as_str()
    }

    /// `system_fingerprint`, `""` when absent (or not a string).
    pub fn system_fingerprint(&self) -> &str {
        self.system_fingerprint.as_str()
    }

    /// The error this payload carries, if any.
    pub fn error(&self) -> Option<ProviderError> {
        match &self.error {
            ErrorWire::Object(o) => Some(ProviderError::from_obj(o)),
            ErrorWire::Message(m) => Some(ProviderError {
                message: Some(m.to_string()),
                ..Default::default()
            }),
            ErrorWire::Absent if self.object.as_str() == "error" => {
                Some(ProviderError::from_obj(&ErrorObj {
                    message: self.message.clone(),
                    kind: self.kind.clone(),
                    code: self.code.clone(),
                }))
            }
            ErrorWire::Absent => None,
        }
    }
}

/// Decodes one payload.
///
/// # Errors
/// The bytes are not a JSON object (serde would otherwise read an array positionally).
pub fn decode(bytes: &[u8]) -> Result<ChunkWire<'_>, serde_json::Error> {
    decode_object(bytes)
}

/// Decodes one JSON object as `T` (any API's payload).
///
/// # Errors
/// The bytes are not a JSON object (serde would otherwise read an array positionally).
pub fn decode_object<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, serde_json::Error> {
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(serde::de::Error::custom("expected a JSON object"));
    }
    serde_json::from_slice(bytes)
}

/// What a measurement reads from a common streamed chunk, found by [`decode_lite`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiteChunk<'a> {
    /// Visible text of the measured choice's delta (`""` when none).
    pub content: &'a str,
    /// Its reasoning text: the first non-empty of `reasoning_content`, `reasoning`,
    /// `reasoning_text`, `thinking` (as [`DeltaWire::reasoning`]).
    pub reasoning: &'a str,
    /// Its non-empty `finish_reason`.
    pub finish_reason: Option<&'a str>,
    /// Top-level `model` (`""` when absent or null), as [`ChunkWire::model`].
    pub model: &'a str,
    /// Top-level `system_fingerprint` (`""` when absent or null).
    pub system_fingerprint: &'a str,
}

/// The fast path of [`decode`] for the chunks nearly every stream is made of:
/// `{…,"choices":[{"index":0,"delta":{"content":"…"},"finish_reason":null,…}],"usage":null,…}`.
///
/// One pass over the bytes, nothing built but the fields of [`LiteChunk`]: strings
/// without escapes borrow from `bytes`, the others are unescaped into `scratch` (cleared
/// first; no allocation once it has grown to the longest such text). It answers only when it
/// can answer exactly what [`decode`] and the accessors of [`ChunkWire`] would (same
/// `content`, `reasoning`, `finish_reason`, `model`, `system_fingerprint`; no tool call, no
/// usage, no error), and `None`
/// otherwise, for the full decoder to handle: bytes that are not valid UTF-8 or not JSON
/// exactly as serde_json reads it, any control character (even the whitespace `\t`, `\n`,
/// `\r` between tokens), a key with an escape, a field present twice, more than one
/// choice, a choice `index` other than a literal `0`, a `\u` escape of a UTF-16 surrogate
/// in a string it returns, a non-null `usage`, `error`, `x_groq`, `message`, `tool_calls`,
/// `function_call`, `reasoning_details`, `refusal` or `audio` in the delta, an `object` of
/// `"error"` (or with an escape), a
/// top-level `message`, `type` or `code`, a `model` or `system_fingerprint` that is neither
/// null nor a string, or a field of a type it does not expect. Values
/// of other fields are skipped with serde_json's own rules for ignored values (strings with
/// valid escapes, numbers by its grammar, nested arrays and objects).
pub fn decode_lite<'a>(bytes: &'a [u8], scratch: &'a mut String) -> Option<LiteChunk<'a>> {
    // A control character is an error inside a string and allowed outside only as
    // whitespace (\t, \n, \r), which one-line SSE payloads do not carry: any of them sends
    // the payload to the full decoder, so strings below are only scanned for `"` and `\`.
    // (A fold rather than `any`: it compiles to a vector loop.)
    if bytes.iter().fold(false, |ctl, &c| ctl | (c < 0x20)) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    scratch.clear();
    let mut c = Cursor {
        s: text,
        b: bytes,
        i: 0,
        scratch: &mut *scratch,
    };
    let found = c.chunk()?;
    c.ws();
    if c.i != bytes.len() {
        return None;
    }
    let scratch: &'a str = scratch;
    let text = |s: Span<'a>| match s {
        Span::Empty => "",
        Span::Raw(s) => s,
        Span::Scratch(a, b) => &scratch[a..b],
    };
    let reasoning = found.reasoning.into_iter().find(|s| !s.is_empty());
    Some(LiteChunk {
        content: text(found.content),
        reasoning: reasoning.map_or("", text),
        finish_reason: found.finish_reason.map(text),
        model: text(found.model),
        system_fingerprint: text(found.system_fingerprint),
    })
}

/// Where a range of a payload is, and which text of [`LiteChunk`] it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Content,
    Reasoning,
}

/// The last chunk [`decode_lite`] read whole, kept by [`decode_cached`] for the next ones.
///
/// The chunks of one stream usually differ only in their token: same id, same `created`,
/// same model, same shape. When a payload is this one with only the token string changed
/// (same bytes before it, same bytes after it), it reads exactly as this one did with the
/// new token, so it need not be parsed again.
#[derive(Debug, Default)]
pub struct LiteCache {
    /// The payload the template was taken from.
    buf: Vec<u8>,
    /// Its token string (between the quotes): start, end, which text; `None`: no template.
    slot: Option<(usize, usize, SlotKind)>,
    /// Where its other texts are in `buf` (`None`: absent or empty).
    content: Option<(usize, usize)>,
    reasoning: Option<(usize, usize)>,
    finish_reason: Option<(usize, usize)>,
    model: Option<(usize, usize)>,
    system_fingerprint: Option<(usize, usize)>,
    /// Unescaped texts for [`decode_lite`].
    scratch: String,
}

/// [`decode_lite`], remembering the payload in `cache` as a template: a payload that is the
/// template with only its token string replaced by another non-empty string without `"`,
/// `\`, control characters or invalid UTF-8 is answered from the template without being
/// parsed (the same answer [`decode_lite`] gives: the rest of its bytes are the template's,
/// which parsed to the same structure). Anything else is read by [`decode_lite`], which
/// replaces the template when what it read has a token and no escaped text. No allocation
/// once `cache` has grown to the longest payload.
pub fn decode_cached<'a>(bytes: &'a [u8], cache: &'a mut LiteCache) -> Option<LiteChunk<'a>> {
    // Does the payload match the template? (Decided first, answered after: the answer
    // borrows the cache, which the other path changes.)
    let hit = cache.slot.and_then(|(start, end, kind)| {
        let tail = cache.buf.len() - end;
        let token_end = bytes.len().checked_sub(tail)?;
        let matches = token_end > start
            && bytes[..start] == cache.buf[..start]
            && bytes[token_end..] == cache.buf[end..];
        let token = bytes.get(start..token_end).filter(|_| matches)?;
        let plain = !token.iter().fold(false, |bad, &c| {
            bad | (c < 0x20) | (c == b'"') | (c == b'\\')
        });
        (plain && std::str::from_utf8(token).is_ok()).then_some((start, token_end, kind))
    });
    if let Some((start, token_end, kind)) = hit {
        let cache: &'a LiteCache = cache;
        let token = std::str::from_utf8(&bytes[start..token_end]).unwrap_or("");
        let text = |r: Option<(usize, usize)>| {
            r.map_or("", |(a, b)| {
                std::str::from_utf8(&cache.buf[a..b]).unwrap_or("")
            })
        };
        let (content, reasoning) = match kind {
            SlotKind::Content => (token, text(cache.reasoning)),
            SlotKind::Reasoning => (text(cache.content), token),
        };
        return Some(LiteChunk {
            content,
            reasoning,
            finish_reason: cache.finish_reason.map(|r| text(Some(r))),
            model: text(cache.model),
            system_fingerprint: text(cache.system_fingerprint),
        });
    }
    let LiteCache {
        buf,
        slot,
        content,
        reasoning,
        finish_reason,
        model,
        system_fingerprint,
        scratch,
    } = cache;
    let found = decode_lite(bytes, scratch)?;
    // A template only from texts that are slices of `bytes` (no escapes), with a token.
    let range = |t: &str| {
        let a = (t.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
        (a <= bytes.len() && a + t.len() <= bytes.len()).then_some((a, a + t.len()))
    };
    let texts = [
        Some(found.content),
        Some(found.reasoning),
        found.finish_reason,
        Some(found.model),
        Some(found.system_fingerprint),
    ];
    let raw = texts
        .iter()
        .flatten()
        .all(|t| t.is_empty() || range(t).is_some());
    let token = if !found.content.is_empty() {
        Some((found.content, SlotKind::Content))
    } else if !found.reasoning.is_empty() {
        Some((found.reasoning, SlotKind::Reasoning))
    } else {
        None
    };
    match token {
        Some((t, kind)) if raw => {
            let (a, b) = range(t).unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(bytes);
            *slot = Some((a, b, kind));
            let nonempty = |t: &str| range(t).filter(|r| r.0 < r.1);
            *content = nonempty(found.content);
            *reasoning = nonempty(found.reasoning);
            *finish_reason = found.finish_reason.and_then(nonempty);
            *model = nonempty(found.model);
            *system_fingerprint = nonempty(found.system_fingerprint);
        }
        // Keep the template: the next token chunk will likely match it again.
        _ => {}
    }
    Some(found)
}

/// A JSON value as the fast path sees it.
enum Val<'a> {
    Null,
    /// A string without escapes.
    Str(&'a str),
    /// A string with escapes (validated), as it is between its quotes.
    Escaped(&'a str),
}

/// A text found: borrowed from the payload, or unescaped into the scratch buffer.
#[derive(Clone, Copy, Debug, Default)]
enum Span<'a> {
    #[default]
    Empty,
    Raw(&'a str),
    Scratch(usize, usize),
}

impl Span<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Span::Empty => true,
            Span::Raw(s) => s.is_empty(),
            Span::Scratch(a, b) => a == b,
        }
    }
}

/// The texts of a chunk, before the scratch buffer can be borrowed.
#[derive(Default)]
struct Found<'a> {
    content: Span<'a>,
    /// `reasoning_content`, `reasoning`, `reasoning_text`, `thinking`.
    reasoning: [Span<'a>; 4],
    finish_reason: Option<Span<'a>>,
    model: Span<'a>,
    system_fingerprint: Span<'a>,
}

/// Appends the JSON string `raw` (escapes validated, as between its quotes) to `out`,
/// unescaped as serde_json unescapes strings it returns; `None` for a `\u` escape of a
/// UTF-16 surrogate (paired or not: left to serde_json).
fn unescape(raw: &str, out: &mut String) -> Option<()> {
    let mut rest = raw;
    while let Some(p) = rest.find('\\') {
        out.push_str(&rest[..p]);
        let (ch, used) = match *rest.as_bytes().get(p + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => {
                let n = u32::from_str_radix(rest.get(p + 2..p + 6)?, 16).ok()?;
                if (0xD800..=0xDFFF).contains(&n) {
                    return None;
                }
                (char::from_u32(n)?, 6)
            }
            _ => return None,
        };
        out.push(ch);
        rest = rest.get(p + used..)?;
    }
    out.push_str(rest);
    Some(())
}

/// Position of the first `"` or `\\` in `b`, eight bytes at a time. (The strings of a chunk
/// are short, keys, ids, a token: memchr's setup costs more than it saves there.)
#[inline(always)]
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // High bit of every zero byte of `x` (the lowest one exactly: a borrow only goes up).
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        let hit =
            zero_bytes(w ^ (ONES * u64::from(b'"'))) | zero_bytes(w ^ (ONES * u64::from(b'\\')));
        if hit != 0 {
            return Some(at + (hit.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = words.remainder();
    tail.iter()
        .position(|&c| c == b'"' || c == b'\\')
        .map(|p| at + p)
}

struct Cursor<'a, 's> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    scratch: &'s mut String,
}

impl<'a> Cursor<'a, '_> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// After an opening quote: the string up to its closing quote, and whether it holds
    /// an escape (validated as serde_json validates ignored strings). The payload holds no
    /// control character (checked by [`decode_lite`]).
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i += quote_or_backslash(self.b.get(self.i..)?)?;
            if self.b[self.i] == b'"' {
                let s = &self.s[start..self.i];
                self.i += 1;
                return Some((s, escaped));
            }
            escaped = true;
            match *self.b.get(self.i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                b'u' => {
                    let hex = self.b.get(self.i + 2..self.i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    self.i += 6;
                }
                _ => return None,
            }
        }
    }

    /// An object key (no escape) and its colon.
    #[inline(always)]
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (k, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.eat(b':')?;
        Some(k)
    }

    /// Null or a string; anything else is not for the fast path.
    #[inline(always)]
    fn null_or_str(&mut self) -> Option<Val<'a>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Val::Null),
            b'"' => {
                self.i += 1;
                match self.string()? {
                    (s, false) => Some(Val::Str(s)),
                    (s, true) => Some(Val::Escaped(s)),
                }
            }
            _ => None,
        }
    }

    fn null(&mut self) -> Option<()> {
        match self.null_or_str()? {
            Val::Null => Some(()),
            Val::Str(_) | Val::Escaped(_) => None,
        }
    }

    /// A text field: null (absent) or a string, unescaped into the scratch buffer when it
    /// has escapes.
    fn text(&mut self) -> Option<Span<'a>> {
        Some(match self.null_or_str()? {
            Val::Null => Span::Empty,
            Val::Str(s) => Span::Raw(s),
            Val::Escaped(raw) => {
                let from = self.scratch.len();
                unescape(raw, self.scratch)?;
                Span::Scratch(from, self.scratch.len())
            }
        })
    }

    #[inline(always)]
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// A number by serde_json's grammar for ignored numbers.
    fn number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let digits = |c: &mut Self| {
            let from = c.i;
            while c.b.get(c.i).is_some_and(u8::is_ascii_digit) {
                c.i += 1;
            }
            c.i > from
        };
        match *self.b.get(self.i)? {
            b'0' => {
                self.i += 1;
                if self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        Some(())
    }

    /// Skips any value (serde_json's `ignore_value`); nesting deeper than 64 is left to the
    /// full decoder.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > 64 {
            return None;
        }
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'"' => {
                self.i += 1;
                self.string().map(|_| ())
            }
            b'-' | b'0'..=b'9' => self.number(),
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.eat(b'"')?;
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }

    /// The members of an object, after its `{`: `f(self, key)` reads each value. A known
    /// key seen twice (bit `seen` of the mask `f` returns) is left to the full decoder,
    /// whose derived structs refuse duplicate fields.
    fn members(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<u32>) -> Option<()> {
        let mut seen = 0u32;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let k = self.key()?;
            let bit = f(self, k)?;
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn chunk(&mut self) -> Option<Found<'a>> {
        self.eat(b'{')?;
        let mut out = Found::default();
        self.members(|c, k| {
            Some(match k {
                "choices" => {
                    c.choices(&mut out)?;
                    1
                }
                "usage" | "x_groq" | "error" => {
                    c.null()?;
                    match k {
                        "usage" => 2,
                        "x_groq" => 4,
                        _ => 8,
                    }
                }
                "object" => {
                    match c.null_or_str()? {
                        Val::Str("error") | Val::Escaped(_) => return None,
                        Val::Str(_) | Val::Null => {}
                    }
                    16
                }
                "message" | "type" | "code" => return None,
                "model" => {
                    out.model = c.text()?;
                    32
                }
                "system_fingerprint" => {
                    out.system_fingerprint = c.text()?;
                    64
                }
                _ => {
                    c.skip(0)?;
                    0
                }
            })
        })?;
        Some(out)
    }

    /// `choices`: an empty array or one choice object.
    fn choices(&mut self, out: &mut Found<'a>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        self.eat(b'{')?;
        self.members(|c, k| {
            Some(match k {
                "index" => {
                    c.peek()?;
                    c.literal(b"0")?;
                    if c.b
                        .get(c.i)
                        .is_some_and(|b| b.is_ascii_digit() || b".eE".contains(b))
                    {
                        return None;
                    }
                    1
                }
                "delta" => {
                    match c.peek()? {
                        b'n' => c.literal(b"null")?,
                        b'{' => {
                            c.i += 1;
                            c.delta(out)?;
                        }
                        _ => return None,
                    }
                    2
                }
                "message" | "usage" => {
                    c.null()?;
                    if k == "message" { 4 } else { 8 }
                }
                "finish_reason" => {
                    out.finish_reason = Some(c.text()?).filter(|s| !s.is_empty());
                    16
                }
                _ => {
                    c.skip(0)?;
                    0
                }
            })
        })?;
        self.eat(b']')
    }

    /// The members of a delta, after its `{`.
    fn delta(&mut self, out: &mut Found<'a>) -> Option<()> {
        self.members(|c, k| {
            let slot = match k {
                "content" => None,
                "reasoning_content" => Some(0),
                "reasoning" => Some(1),
                "reasoning_text" => Some(2),
                "thinking" => Some(3),
                "reasoning_details" | "tool_calls" | "function_call" | "refusal" | "audio" => {
                    c.null()?;
                    return Some(match k {
                        "reasoning_details" => 1 << 5,
                        "tool_calls" => 1 << 6,
                        "function_call" => 1 << 7,
                        "refusal" => 1 << 8,
                        _ => 1 << 9,
                    });
                }
                _ => {
                    c.skip(0)?;
                    return Some(0);
                }
            };
            let v = c.text()?;
            Some(match slot {
                None => {
                    out.content = v;
                    1
                }
                Some(i) => {
                    out.reasoning[i] = v;
                    2 << i
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta_of(json: &str) -> (String, String, bool) {
        let c = decode(json.as_bytes()).unwrap();
        let d = c.delta().cloned().unwrap_or_default();
        (
            d.content().to_string(),
            d.reasoning().into_owned(),
            d.has_tool_fragment(),
        )
    }

    #[test]
    fn content_and_every_reasoning_spelling() {
        assert_eq!(
            delta_of(r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#).0,
            "a\nb"
        );
        for field in [
            "reasoning_content",
            "reasoning",
            "reasoning_text",
            "thinking",
        ] {
            let j = format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":null,"{field}":"hm"}}}}]}}"#
            );
            assert_eq!(
                delta_of(&j),
                (String::new(), "hm".to_string(), false),
                "{field}"
            );
        }
        // OpenRouter sends reasoning and reasoning_details with the same text: counted once.
        let j = r#"{"choices":[{"delta":{"reasoning":"x","reasoning_details":[{"type":"reasoning.text","text":"x"}]}}]}"#;
        assert_eq!(delta_of(j).1, "x");
        let j = r#"{"choices":[{"delta":{"reasoning_details":[{"type":"reasoning.text","text":"y"}]}}]}"#;
        assert_eq!(delta_of(j).1, "y");
        // Content parts (Mistral thinking parts).
        let j = r#"{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"t"}]},{"type":"text","text":"v"}]}}]}"#;
        assert_eq!(delta_of(j), ("v".to_string(), "t".to_string(), false));
    }

    #[test]
    fn odd_types_are_absent_not_errors() {
        let j = r#"{"choices":[{"index":0,"delta":{"content":5,"reasoning":{"x":1},"tool_calls":null},"finish_reason":7}],"usage":"n/a"}"#;
        let c = decode(j.as_bytes()).unwrap();
        assert_eq!(c.delta().unwrap().content(), "");
        assert_eq!(c.finish_reason(), None);
        assert_eq!(c.usage(), None);
        assert!(decode(b"[1,2]").is_err());
        assert!(decode(b"{\"id\":\"x\",\"obj").is_err());
        assert!(decode(b"{}").unwrap().delta().is_none());
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let j = r#"{"choices":[{"delta":{"content":"plain"}}]}"#;
        let c = decode(j.as_bytes()).unwrap();
        assert!(matches!(
            c.delta().unwrap().content,
            ContentField::Str(Cow::Borrowed("plain"))
        ));
    }

    #[test]
    fn tool_call_fragments() {
        let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"get_weather","arguments":"{\""}}]}}]}"#;
        let c = decode(j.as_bytes()).unwrap();
        let d = c.delta().unwrap();
        assert!(d.has_tool_fragment());
        let t = &d.tool_calls.0[0];
        assert_eq!((t.index.0, t.id.0.as_deref()), (Some(0), None));
        let f = t.function.0.as_ref().unwrap();
        assert_eq!(
            (f.name.as_str(), f.arguments.0.as_deref()),
            ("get_weather", Some("{\""))
        );
        let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"city":"Paris"}}}]}}]}"#;
        let c = decode(j.as_bytes()).unwrap();
        let f = c.delta().unwrap().tool_calls.0[0]
            .function
            .0
            .clone()
            .unwrap();
        assert_eq!(f.arguments.0.as_deref(), Some(r#"{"city":"Paris"}"#));
        let j = r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"type":"function","function":{"arguments":""}}]}}]}"#;
        assert!(!delta_of(j).2);
        let j = r#"{"choices":[{"delta":{"function_call":{"name":"f","arguments":""}}}]}"#;
        assert!(delta_of(j).2);
    }

    #[test]
    fn usage_wherever_it_is() {
        let u = |j: &str| decode(j.as_bytes()).unwrap().usage();
        let top = u(
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}"#,
        )
        .unwrap();
        assert_eq!(
            (top.prompt_tokens, top.completion_tokens, top.total_tokens),
            (Some(9), Some(3), Some(12))
        );
        // A float that is a whole number is that count; a fraction is no count.
        let floats =
            u(r#"{"usage":{"prompt_tokens":9.0,"completion_tokens":1.5,"total_tokens":1e-30}}"#)
                .unwrap();
        assert_eq!(
            (
                floats.prompt_tokens,
                floats.completion_tokens,
                floats.total_tokens
            ),
            (Some(9), None, None)
        );
        let groq = u(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"r","usage":{"completion_tokens":4}}}"#,
        );
        assert_eq!(groq.unwrap().completion_tokens, Some(4));
        let moon = u(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop","usage":{"completion_tokens":5}}]}"#,
        );
        assert_eq!(moon.unwrap().completion_tokens, Some(5));
        let ds = u(r#"{"usage":{"prompt_tokens":15,"completion_tokens":6,"completion_tokens_details":{"reasoning_tokens":3},"prompt_cache_hit_tokens":8}}"#).unwrap();
        assert_eq!((ds.reasoning_tokens, ds.cached_tokens), (Some(3), Some(8)));
        let oa = u(r#"{"usage":{"prompt_tokens":15,"prompt_tokens_details":{"cached_tokens":4},"prompt_cache_hit_tokens":8}}"#).unwrap();
        assert_eq!(oa.cached_tokens, Some(4));
        let alt = u(r#"{"usage":{"input_tokens":"7","output_tokens":2.0,"reasoning_tokens":1}}"#)
            .unwrap();
        assert_eq!(
            (
                alt.prompt_tokens,
                alt.completion_tokens,
                alt.reasoning_tokens
            ),
            (Some(7), Some(2), Some(1))
        );
        assert_eq!(u(r#"{"usage":null}"#), None);
        assert_eq!(u(r#"{"usage":{}}"#), None);
        let mut acc = None;
        merge_usage(
            &mut acc,
            Usage {
                completion_tokens: Some(1),
                prompt_tokens: Some(9),
                ..Default::default()
            },
        );
        merge_usage(
            &mut acc,
            Usage {
                completion_tokens: Some(2),
                ..Default::default()
            },
        );
        assert_eq!(
            acc.unwrap(),
            Usage {
                completion_tokens: Some(2),
                prompt_tokens: Some(9),
                ..Default::default()
            }
        );
    }

    #[test]
    fn errors_in_every_shape() {
        let e = ProviderError::from_payload(br#"{"error":{"message":"m","type":"server_error"}}"#);
        assert_eq!(
            (e.kind.as_deref(), e.code, e.message.as_deref()),
            (Some("server_error"), None, Some("m"))
        );
        let e = ProviderError::from_payload(
            br#"{"code":400,"message":"too long","type":"invalid_request_error"}"#,
        );
        assert_eq!(
            (e.kind.as_deref(), e.code.as_deref()),
            (Some("invalid_request_error"), Some("400"))
        );
        let e = ProviderError::from_payload(
            br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
        );
        assert_eq!(e.kind.as_deref(), Some("BadRequestError"));
        let e = ProviderError::from_payload(b"<html>\n <b>502</b>\n</html>");
        assert_eq!(e.message.as_deref(), Some("<html> <b>502</b> </html>"));
        let e = ProviderError::from_payload(br#"{"error":"overloaded"}"#);
        assert_eq!(e.message.as_deref(), Some("overloaded"));
        let c = decode(br#"{"choices":[{"delta":{"content":"x"}}],"error":null}"#).unwrap();
        assert_eq!(c.error(), None);
        let c = decode(br#"{"object":"chat.completion.chunk","choices":[]}"#).unwrap();
        assert_eq!(c.error(), None);
    }

    #[test]
    fn whole_completion_with_leading_blank_lines() {
        let body = "\n\n\n\n{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Four.\",\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"stop\"}],\"usage\":{\"completion_tokens\":2}}\n";
        let c = decode(body.as_bytes()).unwrap();
        let m = c.message().unwrap();
        assert_eq!(
            (m.content().as_ref(), m.reasoning().as_ref()),
            ("Four.", "r")
        );
        assert_eq!(m.tool_calls.0[0].id.as_str(), "c1");
        assert_eq!(c.finish_reason(), Some("stop"));
    }

    #[test]
    fn only_the_first_choice_is_measured() {
        let j = r#"{"choices":[{"index":1,"delta":{"content":"b"},"usage":{"completion_tokens":1}},{"index":0,"delta":{"content":"a"}}]}"#;
        let c = decode(j.as_bytes()).unwrap();
        assert_eq!(c.delta().unwrap().content(), "a");
        assert_eq!(c.usage().unwrap().completion_tokens, Some(1));
    }

    type Facts = (
        String,
        String,
        bool,
        Option<String>,
        Option<Usage>,
        Option<ProviderError>,
        (String, String),
    );

    /// What a measurement reads from a payload, by the full decoder.
    fn full_facts(b: &[u8]) -> Option<Facts> {
        let c = decode(b).ok()?;
        let d = c.delta().cloned().unwrap_or_default();
        let tools =
            d.has_tool_fragment() || !d.tool_calls.0.is_empty() || d.function_call.0.is_some();
        Some((
            d.content().to_string(),
            d.reasoning().into_owned(),
            tools,
            c.finish_reason().map(str::to_string),
            c.usage(),
            c.error(),
            (c.model().to_string(), c.system_fingerprint().to_string()),
        ))
    }

    /// Whenever the fast path answers, it answers what the full decoder does.
    fn agrees(b: &[u8]) -> Result<bool, String> {
        let mut scratch = String::from("left over");
        let Some(l) = decode_lite(b, &mut scratch) else {
            return Ok(false);
        };
        let lite: Facts = (
            l.content.to_string(),
            l.reasoning.to_string(),
            false,
            l.finish_reason.map(str::to_string),
            None,
            None,
            (l.model.to_string(), l.system_fingerprint.to_string()),
        );
        match full_facts(b) {
            Some(f) if f == lite => Ok(true),
            f => Err(format!(
                "{:?}: lite {lite:?}, full {f:?}",
                String::from_utf8_lossy(b)
            )),
        }
    }

    #[test]
    fn the_fast_path_reads_common_chunks_as_the_full_decoder() {
        let common = [
            // The simulator, OpenAI, DeepSeek, vLLM, a finish chunk, a role chunk.
            r#"{"id":"chatcmpl-sim1","object":"chat.completion.chunk","created":1764445200,"model":"deepseek-v4-flash","system_fingerprint":"latmesh-sim","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1,"model":"gpt-4o","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"a1B"}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"think"},"logprobs":null,"finish_reason":null}],"created":1,"model":"deepseek-reasoner","object":"chat.completion.chunk"}"#,
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":"","reasoning":"r","tool_calls":null},"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]},"finish_reason":null,"stop_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"é ü 中"},"finish_reason":"length"}]}"#,
            " {  \"choices\" : [ { \"delta\" : { \"thinking\" : \"t\" , \"reasoning\" : \"r\" } } ] } ",
            r#"{"choices":[],"created":-1.5e+3,"a":[[{}],{"b":[true,false,null]}],"s":"\"\\\/\b\f\n\r\t\u00e9"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":""}],"error":null,"x_groq":null,"object":null}"#,
        ];
        for j in common {
            assert_eq!(agrees(j.as_bytes()), Ok(true), "{j}");
        }
        let mut scratch = String::new();
        let c = decode_lite(common[2].as_bytes(), &mut scratch).unwrap();
        assert_eq!((c.content, c.reasoning), ("", "think"));
        let c = decode_lite(common[7].as_bytes(), &mut scratch).unwrap();
        assert_eq!(c.reasoning, "r");
        let j = r#"{"choices":[{"delta":{"content":"a\nb\"\u00e9\/","reasoning":"","thinking":"\tt"},"finish_reason":"s\u0074op"}]}"#;
        let c = decode_lite(j.as_bytes(), &mut scratch).unwrap();
        assert_eq!(
            (c.content, c.reasoning, c.finish_reason),
            ("a\nb\"é/", "\tt", Some("stop"))
        );
        assert_eq!(agrees(j.as_bytes()), Ok(true));
        // Left to the full decoder (which may accept or refuse them).
        let other = [
            r#"{"choices":[{"index":0,"delta":{"content":"\ud83d\ude00"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"\udc00"}}]}"#,
            r#"{"object":"err\u006fr"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"con\u0074ent":"a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"v"}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":5}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":0.0,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"index":00,"delta":{"content":"a"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}"#,
            r#"{"choices":[],"usage":{}}"#,
            r#"{"object":"error","message":"m","type":"t","code":1}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[{"delta":{"content":"a"}}]} x"#,
            r#"{"choices":[{"delta":{"content":"a"}}],}"#,
            r#"{"created":01}"#,
            r#"{"created":1.}"#,
            r#"{"created":1e}"#,
            r#"{"s":"\x"}"#,
            r#"{"s":"\u12G4"}"#,
            "{\"s\":\"a\tb\"}",
            "{\n\"choices\":[]}",
            "[1]",
            "",
            "{",
        ];
        for j in other {
            assert_eq!(agrees(j.as_bytes()), Ok(false), "{j}");
        }
        assert_eq!(
            agrees(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}"),
            Ok(false)
        );
    }

    #[test]
    fn what_answered_is_read_by_both_decoders_and_the_template() {
        let p = |t: &str| {
            format!(
                r#"{{"id":"c1","object":"chat.completion.chunk","model":"gpt-4o-2024-08-06","system_fingerprint":"fp_50cad350e4","choices":[{{"index":0,"delta":{{"content":"{t}"}},"finish_reason":null}}]}}"#
            )
        };
        let first = p("a");
        let full = decode(first.as_bytes()).unwrap();
        assert_eq!(
            (full.model(), full.system_fingerprint()),
            ("gpt-4o-2024-08-06", "fp_50cad350e4")
        );
        let mut cache = LiteCache::default();
        for t in ["a", "bcd", "e"] {
            let next = p(t);
            let c = decode_cached(next.as_bytes(), &mut cache).unwrap();
            assert_eq!(
                (c.content, c.model, c.system_fingerprint),
                (t, "gpt-4o-2024-08-06", "fp_50cad350e4")
            );
        }
        // A null fingerprint (vLLM) and an escaped model name.
        let j = r#"{"model":"org\/m\u00e9","system_fingerprint":null,"choices":[{"index":0,"delta":{"content":"x"}}]}"#;
        assert_eq!(agrees(j.as_bytes()), Ok(true));
        let mut scratch = String::new();
        let c = decode_lite(j.as_bytes(), &mut scratch).unwrap();
        assert_eq!((c.model, c.system_fingerprint), ("org/mé", ""));
        // A whole completion.
        let body = br#"{"id":"x","object":"chat.completion","model":"deepseek-chat-v3-0324","system_fingerprint":"fp_8802369eaa","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        let c = decode(body).unwrap();
        assert_eq!(
            (c.model(), c.system_fingerprint()),
            ("deepseek-chat-v3-0324", "fp_8802369eaa")
        );
        // Not a string: absent for the full decoder, left to it by the fast path.
        for j in [
            r#"{"model":5,"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
            r#"{"system_fingerprint":{"a":1},"choices":[]}"#,
            r#"{"model":"a","model":"b","choices":[]}"#,
        ] {
            assert_eq!(agrees(j.as_bytes()), Ok(false), "{j}");
        }
        assert_eq!(decode(br#"{"model":5,"choices":[]}"#).unwrap().model(), "");
    }

    #[test]
    fn quote_or_backslash_finds_the_first() {
        for n in 0..40 {
            for at in 0..=n {
                for c in [b'"', b'\\'] {
                    let mut b = vec![b'a'; n];
                    if at < n {
                        b[at] = c;
                        // Bytes that a carry could turn into a false hit, after the real one.
                        for (i, x) in b.iter_mut().enumerate().skip(at + 1) {
                            *x = [b'"', b'\\', 0x21, 0x5b, 0xa2, 0x01][i % 6];
                        }
                    }
                    let want = b.iter().position(|&c| c == b'"' || c == b'\\');
                    assert_eq!(quote_or_backslash(&b), want, "{n} {at}");
                }
            }
        }
    }

    #[test]
    fn the_fast_path_agrees_on_every_corpus_payload() {
        let mut answered = 0;
        for (name, body) in crate::probe::sse::tests::corpus() {
            for line in body.split(|&b| b == b'\n' || b == b'\r') {
                let Some(data) = line.strip_prefix(b"data:") else {
                    continue;
                };
                let data = data.trim_ascii();
                if let Err(e) = agrees(data) {
                    panic!("{name}: {e}");
                }
                answered += usize::from(agrees(data) == Ok(true));
            }
        }
        assert!(
            answered > 20,
            "the fast path answered {answered} corpus payloads"
        );
    }

    use proptest::prelude::*;

    /// A JSON scalar, or something close to one that is not.
    fn leaf() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "null",
            "true",
            "false",
            "0",
            "1",
            "-0",
            "01",
            "1.5",
            "-2e+3",
            "1e400",
            "1.",
            "-",
            "\"\"",
            "\"x\"",
            "\"stop\"",
            "\"error\"",
            "\"a\\nb\"",
            "\"\\u00e9\"",
            "\"\\x\"",
            "\"é\"",
            "\"tab\there\"",
            "nul",
            "\"unterminated",
        ])
        .prop_map(str::to_string)
    }

    /// JSON-like text over the decoder's own keys, with invalid numbers, strings, escapes,
    /// duplicates and odd whitespace mixed in.
    fn json_text() -> impl Strategy<Value = String> {
        let keys = prop::sample::select(vec![
            "choices",
            "index",
            "delta",
            "message",
            "content",
            "reasoning_content",
            "reasoning",
            "reasoning_text",
            "thinking",
            "reasoning_details",
            "tool_calls",
            "function_call",
            "finish_reason",
            "usage",
            "x_groq",
            "error",
            "object",
            "type",
            "code",
            "role",
            "id",
            "logprobs",
            "text",
            "completion_tokens",
            "con\\u0074ent",
        ]);
        let leaf = leaf();
        let ws = prop::sample::select(vec!["", "", "", " ", "\n", "\t ", "\u{c}"]);
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec((keys.clone(), inner.clone(), ws.clone()), 0..6).prop_map(
                    |members| {
                        let m: Vec<String> = members
                            .into_iter()
                            .map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}"))
                            .collect();
                        format!("{{{}}}", m.join(","))
                    }
                ),
                prop::collection::vec(inner, 0..3).prop_map(|v| format!("[{}]", v.join(","))),
            ]
        })
    }

    /// Chunk-shaped text: one choice with a delta, members drawn as in [`json_text`].
    fn chunk_text() -> impl Strategy<Value = String> {
        let keys = prop::sample::select(vec![
            "content",
            "reasoning_content",
            "reasoning",
            "reasoning_text",
            "thinking",
            "role",
            "tool_calls",
            "refusal",
            "content",
        ]);
        let top = prop::sample::select(vec![
            "\"id\":\"c1\"",
            "\"object\":\"chat.completion.chunk\"",
            "\"usage\":null",
            "\"created\":17",
            "\"model\":\"m\"",
            "\"error\":null",
            "\"x_groq\":null",
            "\"object\":\"error\"",
            "\"usage\":{\"completion_tokens\":2}",
            "\"type\":\"t\"",
            "\"id\":\"c1\"",
            "\"usage\":null",
            "\"model\":\"m\"",
            "\"created\":17",
        ]);
        let index = prop::sample::select(vec![
            "",
            "\"index\":0,",
            "\"index\":0,",
            "\"index\":1,",
            "\"index\":null,",
        ]);
        let good = prop::sample::select(vec!["null", "\"\"", "\"x\"", "\"stop\"", "\"é\""])
            .prop_map(str::to_string);
        let value = prop_oneof![12 => good, 2 => leaf(), 1 => json_text()];
        (
            prop::collection::vec((keys, value.clone()), 0..4),
            value,
            prop::collection::vec(top, 0..4),
            index,
        )
            .prop_map(|(delta, finish, top, index)| {
                let d: Vec<String> = delta.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                let mut members = vec![format!(
                    "\"choices\":[{{{index}\"delta\":{{{}}},\"finish_reason\":{finish}}}]",
                    d.join(",")
                )];
                members.extend(top.into_iter().map(str::to_string));
                format!("{{{}}}", members.join(","))
            })
    }

    /// Payloads of one shape with tokens put in as they are (some break the JSON, escape
    /// themselves out of the string, or are not UTF-8).
    fn payload_runs() -> impl Strategy<Value = Vec<Vec<u8>>> {
        let shapes = prop::sample::select(vec![
            r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"TOK"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"TOK"},"finish_reason":null}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"TOK","reasoning":"r"},"finish_reason":null}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"reasoning":"","thinking":"TOK","content":"v"},"finish_reason":"length"}]}"#,
            r#"{"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"TOK","content":""},"finish_reason":"stop"}]}"#,
            r#"{"id":"c2","choices":[{"index":0,"delta":{"content":"TOK"}}],"obfuscation":"TOK"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a\nb"},"finish_reason":"TOK"}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"completion_tokens":3}}"#,
        ]);
        let tokens = prop::sample::select(vec![
            &b"x"[..],
            b"hello",
            b" world",
            "é".as_bytes(),
            "中文".as_bytes(),
            b"",
            b"\\n",
            b"a\\\"b",
            b"\"",
            b"\\",
            b"\x01",
            b"\t",
            b"\\u00e9",
            b"\\ud83d",
            b"\xff",
            b"\xc3",
            br#"x"}],"usage":{"completion_tokens":1},"a":[{"b":""#,
            br#"","content":"y"#,
        ]);
        let item = (shapes, tokens).prop_map(|(shape, token)| {
            let (a, b) = shape.split_once("TOK").unwrap_or((shape, ""));
            let b = b.replacen("TOK", "o", 1);
            [a.as_bytes(), token, b.as_bytes()].concat()
        });
        prop::collection::vec(item, 1..12)
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// The template gives, payload after payload, what a fresh parse gives.
        #[test]
        fn the_template_answers_as_the_parser(run in payload_runs()) {
            let mut cache = LiteCache::default();
            for p in &run {
                let mut scratch = String::new();
                let want = decode_lite(p, &mut scratch);
                prop_assert_eq!(
                    decode_cached(p, &mut cache),
                    want,
                    "{:?}",
                    String::from_utf8_lossy(p)
                );
            }
        }
    }

    #[test]
    fn the_template_is_used_for_the_next_token_only() {
        let p = |t: &str| {
            format!(
                r#"{{"id":"c1","choices":[{{"index":0,"delta":{{"content":"{t}"}},"finish_reason":null}}]}}"#
            )
        };
        let mut cache = LiteCache::default();
        assert_eq!(
            decode_cached(p("a").as_bytes(), &mut cache)
                .unwrap()
                .content,
            "a"
        );
        assert_eq!(cache.slot.map(|s| s.2), Some(SlotKind::Content));
        let hit = p("bcd");
        let c = decode_cached(hit.as_bytes(), &mut cache).unwrap();
        // Answered from the payload itself, not from the template.
        assert_eq!(c.content, "bcd");
        assert_eq!(c.content.as_ptr(), hit[hit.find("bcd").unwrap()..].as_ptr());
        // Not parsed: a parse would have made it the template.
        assert_eq!(&cache.buf[..], p("a").as_bytes());
        // Another shape is parsed and becomes the template.
        let other = p("z").replace("null", r#""stop""#);
        assert_eq!(
            decode_cached(other.as_bytes(), &mut cache)
                .unwrap()
                .finish_reason,
            Some("stop")
        );
        assert_eq!(&cache.buf[..], other.as_bytes());
        let next = p("w").replace("null", r#""stop""#);
        let c = decode_cached(next.as_bytes(), &mut cache).unwrap();
        assert_eq!((c.content, c.finish_reason), ("w", Some("stop")));
        assert_eq!(&cache.buf[..], other.as_bytes());
        let a = p("a");
        decode_cached(a.as_bytes(), &mut cache).unwrap();
        // An escaped token is parsed (and leaves the template as it was).
        let escaped = p(r"x\ny");
        let c = decode_cached(escaped.as_bytes(), &mut cache).unwrap();
        assert_eq!(c.content, "x\ny");
        assert_eq!(&cache.buf[..], p("a").as_bytes());
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 3000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn the_fast_path_agrees_on_chunk_shapes(j in chunk_text()) {
            prop_assert_eq!(agrees(j.as_bytes()).err(), None);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 4000,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn the_fast_path_never_disagrees_with_the_full_decoder(j in json_text(), cut in 0usize..4) {
            prop_assert_eq!(agrees(j.as_bytes()).err(), None);
            // And with the end cut off (half a payload).
            let b = j.as_bytes();
            let b = &b[..b.len().saturating_sub(cut)];
            prop_assert_eq!(agrees(b).err(), None);
        }
    }
}
