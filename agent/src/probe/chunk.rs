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
//!   `{"object":"error","message","type","code"}`.

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
                Ok(Num((v.is_finite() && v >= 0.0).then_some(v as u64)))
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

/// `choices[].delta` of a chunk, or `choices[].message` of a whole completion.
#[derive(serde::Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(default)]
pub struct DeltaWire<'a> {
    /// Visible text.
    #[serde(borrow)]
    pub content: ContentField<'a>,
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
    /// Visible text of this delta.
    pub fn content(&self) -> &str {
        self.content.visible()
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
    fn from_obj(o: &ErrorObj<'_>) -> Self {
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
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(serde::de::Error::custom("expected a JSON object"));
    }
    serde_json::from_slice(bytes)
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
        assert_eq!((m.content(), m.reasoning().as_ref()), ("Four.", "r"));
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
}
