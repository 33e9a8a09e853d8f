//! A whole decoded payload ([`ChunkWire`]: a streamed chunk or a whole completion), its
//! `choices` folded while decoding ([`Choices`]), and the full decoder ([`decode`],
//! [`decode_object`]).

use std::fmt;
use std::marker::PhantomData;

use latmesh_core::record::Usage;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::delta::DeltaWire;
use super::error::{ErrorObj, ErrorWire, ProviderError};
use super::lenient::{Num, Obj, Scalar, Text};
use super::usage::{UsageWire, merge_usage};

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

impl ProviderError {
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
