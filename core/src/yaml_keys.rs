//! Duplicate keys in YAML campaign files. figment reads YAML mappings into sorted maps where a
//! repeated key silently replaces the earlier one (`count: 10` then `count: 1000000`), so the
//! text is walked first and a key repeated in one mapping is an error naming it by its path
//! (`rounds.count`, `scenarios[1].name`) and line. TOML needs no such pass: the TOML parser
//! already refuses a duplicate key.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Checks that no mapping of the YAML `text` repeats a key.
///
/// # Errors
/// `duplicate key `PATH` in the mapping at line L column C`, or the parser's own message
/// when the text is not YAML (figment then reports the same problem too).
pub fn check_no_duplicate_keys(text: &str) -> Result<(), String> {
    // An empty document is no mapping at all (figment reports the missing `[campaign]`).
    if text.trim().is_empty() {
        return Ok(());
    }
    let found = RefCell::new(None);
    let de = serde_yaml::Deserializer::from_str(text);
    let result = Node {
        path: String::new(),
        found: &found,
    }
    .deserialize(de);
    match (result, found.into_inner()) {
        (Ok(()), _) => Ok(()),
        (Err(e), Some(path)) => Err(format!(
            "duplicate key `{path}`{} (a later value would silently replace the earlier one: keep one)",
            e.location().map_or_else(String::new, |l| format!(
                " in the mapping at line {} column {}",
                l.line(),
                l.column()
            ))
        )),
        (Err(e), None) => Err(e.to_string()),
    }
}

/// A YAML node at `path` (empty at the top), read only to see its keys; `found` gets the
/// path of the first duplicate key.
struct Node<'a> {
    path: String,
    found: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A tagged value (`!tag x`): its content is what counts.
        let (_, variant) = data.variant::<de::IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(variant, self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        while seq
            .next_element_seed(Node {
                path: format!("{}[{i}]", self.path),
                found: self.found,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<Key>()? {
            let path = if self.path.is_empty() {
                key.0.clone()
            } else {
                format!("{}.{}", self.path, key.0)
            };
            if !seen.insert(key.0) {
                // serde_yaml adds where the mapping is.
                *self.found.borrow_mut() = Some(path.clone());
                return Err(de::Error::custom(format!("duplicate key `{path}`")));
            }
            map.next_value_seed(Node {
                path,
                found: self.found,
            })?;
        }
        Ok(())
    }
}

/// A mapping key as text (YAML keys may be numbers or booleans too).
struct Key(String);

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Key, E> {
                Ok(Key("~".into()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_named_by_its_path_and_line() {
        let text =
            "campaign:\n  name: t\nrounds:\n  count: 10\n  interval_s: 1\n  count: 1000000\n";
        let e = check_no_duplicate_keys(text).unwrap_err();
        assert!(e.contains("duplicate key `rounds.count`"), "{e}");
        assert!(e.contains("in the mapping at line 4 column 3"), "{e}");
        let e = check_no_duplicate_keys(
            "scenarios:\n  - name: a\n    max_tokens: 1\n  - {name: b, max_tokens: 2, name: c}\n",
        )
        .unwrap_err();
        assert!(e.contains("duplicate key `scenarios[1].name`"), "{e}");
        let e = check_no_duplicate_keys("campaign: {}\ncampaign: {}\n").unwrap_err();
        assert!(e.contains("duplicate key `campaign`"), "{e}");
    }

    #[test]
    fn the_same_key_in_different_mappings_is_fine() {
        let text = "a:\n  name: x\nb:\n  name: x\nlist:\n  - {name: 1}\n  - {name: 2}\n";
        assert_eq!(check_no_duplicate_keys(text), Ok(()));
        assert_eq!(check_no_duplicate_keys(""), Ok(()));
        assert_eq!(check_no_duplicate_keys("x: !tagged {a: 1}\n"), Ok(()));
    }
}
