//! The lenient field readers every payload is made of: a field of an unexpected JSON type is
//! absent rather than an error (see [`super`]).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

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
    pub(super) fn u32(self) -> Option<u32> {
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
