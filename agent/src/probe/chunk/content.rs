//! A message text ([`ContentField`]): a string, or an array of content parts split into
//! visible text and reasoning.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::lenient::Text;

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
    pub(super) fn all(&self) -> Cow<'_, str> {
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
