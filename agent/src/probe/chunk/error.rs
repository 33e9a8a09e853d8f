//! Errors in payloads: an `error` member ([`ErrorWire`], [`ErrorObj`]) and what the
//! measurement keeps of it ([`ProviderError`]).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::lenient::{Scalar, Text};

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
}
