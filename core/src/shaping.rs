//! Request shaping as written (campaign file `[[providers]]` keys, `latmesh probe` options)
//! and its validation into a [`RequestShape`]: one set of rules for both.
//!
//! Rules (README "Campaign files", "Request shaping"):
//! * `headers`: names are HTTP tokens, lower-cased (two names equal but for case are one
//!   header written twice: an error); values are 1 to [`MAX_HEADER_VALUE_BYTES`] bytes of
//!   printable ASCII without blanks at either end, or `{ env = "NAME" }` (a variable name as
//!   for `api_key_env`, read on each agent; a secret). Headers latmesh sets itself or that
//!   would break the request are refused ([`OWNED_HEADERS`], `x-latmesh-*`, and the header
//!   that carries the key: `authorization` with `auth = "bearer"`, the named one with
//!   `auth = { header = … }`). A header whose name contains one of [`CREDENTIAL_WORDS`]
//!   takes `{ env = "NAME" }` only: a literal credential would be stored in plans, spools
//!   and reports.
//! * The written forms (`headers` values, `auth`, `reasoning_tags`) are read by hand: a
//!   wrong type, a sequence, or a table with an unknown or missing key is an error naming
//!   the accepted forms.
//! * `query`: names and values non-empty (sent URL-encoded).
//! * `extra_body`: a table merged into the JSON body, each top-level key replacing latmesh's
//!   own (no deep merge); keys that carry the prompt, the model, the stream switch, the
//!   output cap or the sampling parameters are refused ([`RESERVED_BODY_KEYS`]): those are
//!   set by `model_id`, the scenario and `max_tokens_field`, and a body that overrode them
//!   would measure something other than what the record says. At most
//!   [`MAX_EXTRA_BODY_BYTES`] as JSON.
//! * `auth`: `"bearer"` (default; for `api = "anthropic"` the default is
//!   `{ header = "x-api-key" }`, as the Anthropic SDK sends the key), `"none"` or
//!   `{ header = "name" }` (a valid header name, not one latmesh owns).
//! * `max_tokens_field`: a JSON key of 1-64 of `a-z 0-9 _` starting with a letter, not one of
//!   the reserved keys other than the cap names.
//! * `stream_usage`: `auto`, `always` or `never`; for `api = "chat"` only (an error for
//!   the other APIs, which report usage unasked).
//! * `reasoning_tags`: `open` and `close`, each 1-64 bytes without blanks at either end,
//!   different.
//! * `exact_output`: a table merged into the body of scenarios with `output_tokens` (after
//!   `extra_body`), the fields with which a provider keeps generating to the cap
//!   (`{ ignore_eos = true }`, `{ min_tokens = "$output_tokens" }`): checked as `extra_body`
//!   is, no key also in `extra_body` (one would replace the other), and the only string
//!   starting with `$` is [`OUTPUT_TOKENS_VAR`], replaced by the scenario's `output_tokens` as
//!   a number ([`exact_output_fields`]).

use std::collections::BTreeMap;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::api::{Api, AuthStyle, HeaderValueSource, ReasoningTags, RequestShape, StreamUsage};

/// Headers latmesh sets itself or that would break the request, refused in `headers` and as
/// the `auth` header: framing and connection headers, the content negotiation of the body it
/// sends and reads, and `user-agent` (the `user_agent` key sets it).
pub const OWNED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "accept",
    "accept-encoding",
    "user-agent",
];

/// Body keys `extra_body` may not set: the prompt (`messages`, `input`, `system`,
/// `instructions`, `prompt`), `model`, `stream`/`stream_options` (set by the scenario's
/// `stream` and the provider's `stream_usage`), the output cap (`max_tokens`,
/// `max_completion_tokens`, `max_output_tokens`: the scenario's `max_tokens`, its name by
/// `max_tokens_field`) and the sampling parameters the scenario sets (`temperature`,
/// `top_p`).
pub const RESERVED_BODY_KEYS: &[&str] = &[
    "model",
    "messages",
    "input",
    "system",
    "instructions",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "temperature",
    "top_p",
];

/// The output-cap names among [`RESERVED_BODY_KEYS`] (accepted as `max_tokens_field`).
const CAP_FIELDS: &[&str] = &["max_tokens", "max_completion_tokens", "max_output_tokens"];

/// Longest header value, bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;

/// Largest `extra_body` (provider's or scenario's), bytes of JSON.
pub const MAX_EXTRA_BODY_BYTES: usize = 64 * 1024;

/// The one `$` value `exact_output` may hold: replaced by the scenario's `output_tokens`.
pub const OUTPUT_TOKENS_VAR: &str = "$output_tokens";

/// Longest reasoning tag, bytes.
pub const MAX_REASONING_TAG_BYTES: usize = 64;

/// A header value as written: literal text or `{ env = "NAME" }`. Read by hand (not an
/// untagged enum) so a wrong type, a sequence or an unknown key is an error saying what is
/// accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderSection {
    /// The value itself.
    Literal(String),
    /// `{ env = "NAME" }`.
    Env(EnvRef),
}

/// `{ env = "NAME" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvRef {
    /// Environment variable name.
    pub env: String,
}

/// `auth` as written: `"bearer"`, `"none"` or `{ header = "x-api-key" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthSection {
    /// `"bearer"` or `"none"`.
    Name(String),
    /// `{ header = "name" }`.
    Header(AuthHeader),
}

/// `{ header = "name" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthHeader {
    /// The header that carries the key.
    pub header: String,
}

/// `reasoning_tags = { open = "<think>", close = "</think>" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasoningTagsSection {
    /// Opening tag.
    pub open: String,
    /// Closing tag.
    pub close: String,
}

const HEADER_FORMS: &str = "a string or { env = \"NAME\" }";
const AUTH_FORMS: &str = "\"bearer\", \"none\" or { header = \"name\" }";
const TAGS_FORMS: &str = "{ open = \"<think>\", close = \"</think>\" }";

/// One written form, read by hand: a string (when `string` is given) or a table whose keys
/// are exactly `keys` (each required, each a string). Anything else (another type, a
/// sequence, an unknown, missing or repeated key) is an error stating `forms`.
struct Form<T> {
    forms: &'static str,
    string: Option<fn(String) -> T>,
    keys: &'static [&'static str],
    table: fn(Vec<String>) -> T,
}

impl<'de, T> Visitor<'de> for Form<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.forms)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        match self.string {
            Some(make) => Ok(make(v.to_string())),
            None => Err(E::invalid_type(de::Unexpected::Str(v), &self)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let forms = self.forms;
        let mut got: Vec<Option<String>> = vec![None; self.keys.len()];
        while let Some(k) = map.next_key::<String>()? {
            let Some(i) = self.keys.iter().position(|w| *w == k) else {
                return Err(de::Error::custom(format!(
                    "unknown key {k:?}: expected {forms}"
                )));
            };
            let v = map
                .next_value::<serde_json::Value>()?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| de::Error::custom(format!("{k}: not a string: expected {forms}")))?;
            if got[i].replace(v).is_some() {
                return Err(de::Error::custom(format!("{k} is given twice")));
            }
        }
        let values = got
            .into_iter()
            .zip(self.keys)
            .map(|(v, k)| {
                v.ok_or_else(|| de::Error::custom(format!("{k} is missing: expected {forms}")))
            })
            .collect::<Result<Vec<_>, A::Error>>()?;
        Ok((self.table)(values))
    }
}

impl<'de> Deserialize<'de> for HeaderSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Form {
            forms: HEADER_FORMS,
            string: Some(HeaderSection::Literal),
            keys: &["env"],
            table: |mut v| HeaderSection::Env(EnvRef { env: v.remove(0) }),
        })
    }
}

impl<'de> Deserialize<'de> for AuthSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Form {
            forms: AUTH_FORMS,
            string: Some(AuthSection::Name),
            keys: &["header"],
            table: |mut v| {
                AuthSection::Header(AuthHeader {
                    header: v.remove(0),
                })
            },
        })
    }
}

impl<'de> Deserialize<'de> for ReasoningTagsSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Form {
            forms: TAGS_FORMS,
            string: None,
            keys: &["open", "close"],
            table: |mut v| ReasoningTagsSection {
                close: v.remove(1),
                open: v.remove(0),
            },
        })
    }
}

/// A provider's shaping keys as written, before validation ([`ShapeInput::validate`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShapeInput {
    /// `api`.
    pub api: Api,
    /// `headers`, names as written.
    pub headers: BTreeMap<String, HeaderSection>,
    /// `query`.
    pub query: BTreeMap<String, String>,
    /// `extra_body`.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// `auth`.
    pub auth: Option<AuthSection>,
    /// `max_tokens_field`.
    pub max_tokens_field: Option<String>,
    /// `stream_usage`.
    pub stream_usage: Option<String>,
    /// `reasoning_tags`.
    pub reasoning_tags: Option<ReasoningTagsSection>,
    /// `exact_output`.
    pub exact_output: serde_json::Map<String, serde_json::Value>,
}

/// A shaping value that is not acceptable: the key below the provider (`headers."x-foo"`,
/// `auth`) and what is wrong. Never quotes a header value (it may be a secret pasted in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError {
    /// Key path below the provider, e.g. `headers."x-foo"`.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

fn err(key: impl Into<String>, message: impl Into<String>) -> ShapeError {
    ShapeError {
        key: key.into(),
        message: message.into(),
    }
}

/// Whether `name` is an HTTP token (RFC 9110 §5.6.2): 1+ of `A-Z a-z 0-9` and
/// ``!#$%&'*+-.^_`|~``.
pub fn is_header_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks a header value: 1 to `max_bytes` bytes of printable ASCII (what a header carries
/// unchanged), without blanks at either end. With `quote`, the message quotes the value
/// (never for a value that may be a secret).
///
/// # Errors
/// A message saying what is wrong.
pub fn check_header_text(value: &str, max_bytes: usize, quote: bool) -> Result<(), String> {
    let shown = if quote {
        format!("{value:?} ")
    } else {
        String::new()
    };
    if value.trim().is_empty() {
        return Err("must not be empty (leave the key out for the default)".into());
    }
    if value.len() > max_bytes {
        return Err(format!(
            "is {} bytes long, at most {max_bytes}",
            value.len()
        ));
    }
    if let Some(c) = value.chars().find(|c| !(' '..='~').contains(c)) {
        let c = if quote {
            format!("{c:?}")
        } else {
            format!("U+{:04X}", c as u32)
        };
        return Err(format!(
            "{shown}has {c}: only printable ASCII can be sent in a header"
        ));
    }
    if value.trim() != value {
        return Err(format!("{shown}starts or ends with a blank"));
    }
    Ok(())
}

/// Checks an environment variable name (`api_key_env`, `{ env = … }`): letters, digits and
/// `_`, not starting with a digit.
///
/// # Errors
/// A message saying it must be a variable's name, never the secret itself (not quoting it).
pub fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err("must be the NAME of an environment variable (letters, digits, _), never the secret itself".into())
    }
}

/// Words that mark a header name as carrying a credential ([`credential_word`]).
pub const CREDENTIAL_WORDS: &[&str] = &[
    "auth",
    "cookie",
    "credential",
    "key",
    "password",
    "secret",
    "token",
];

/// The word of [`CREDENTIAL_WORDS`] that lower-case header `name` contains, if any
/// (`authorization`, `proxy-authorization`, `cookie`, `x-api-key`, `api-key`,
/// `x-auth-token`, …): such a header may not have a literal value in `headers`, which
/// would be stored in plans, spools and reports; it takes `{ env = "NAME" }`.
pub fn credential_word(name: &str) -> Option<&'static str> {
    CREDENTIAL_WORDS.iter().copied().find(|w| name.contains(w))
}

/// Checks a header name used in `headers` or `auth`, lower-cased: a token, not owned by
/// latmesh.
fn check_header_name(key: &str, name: &str) -> Result<String, ShapeError> {
    if !is_header_token(name) {
        return Err(err(
            key,
            format!("{name:?} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~)"),
        ));
    }
    let lower = name.to_ascii_lowercase();
    if OWNED_HEADERS.contains(&lower.as_str()) {
        let hint = if lower == "user-agent" {
            ": set it with the provider's user_agent key"
        } else {
            ""
        };
        return Err(err(
            key,
            format!("{lower:?} is set by latmesh itself and cannot be replaced{hint}"),
        ));
    }
    if lower.starts_with("x-latmesh-") {
        return Err(err(
            key,
            format!(
                "{lower:?}: x-latmesh-* headers are latmesh's own (sent to loopback simulators only)"
            ),
        ));
    }
    Ok(lower)
}

/// Checks an `extra_body` table (a provider's or a scenario's; `key` is its key, e.g.
/// `extra_body` or `scenarios[0].extra_body`).
///
/// # Errors
/// A reserved key ([`RESERVED_BODY_KEYS`]) or a table too large, naming the key.
pub fn check_extra_body(
    key: &str,
    body: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ShapeError> {
    for k in body.keys() {
        if RESERVED_BODY_KEYS.contains(&k.as_str()) {
            let by = match k.as_str() {
                "model" => "the provider's model_id",
                "stream" | "stream_options" => {
                    "the scenario's stream and the provider's stream_usage"
                }
                "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                    "the scenario's max_tokens (its field name: the provider's max_tokens_field)"
                }
                "temperature" | "top_p" => "the scenario's key of that name",
                _ => "the scenario's prompts",
            };
            let table = key.rsplit('.').next().unwrap_or(key);
            return Err(err(
                format!("{key}.{k}"),
                format!("latmesh sets {k:?} from {by}; {table} may not replace it"),
            ));
        }
        if k.is_empty() {
            return Err(err(key, "a key is empty"));
        }
    }
    let bytes = serde_json::to_vec(body).map_or(0, |v| v.len());
    if bytes > MAX_EXTRA_BODY_BYTES {
        return Err(err(
            key,
            format!("is {bytes} bytes of JSON, at most {MAX_EXTRA_BODY_BYTES}"),
        ));
    }
    Ok(())
}

impl ShapeInput {
    /// The validated shape.
    ///
    /// # Errors
    /// The first unacceptable value, naming its key below the provider
    /// (`headers."x-foo"`, `query."api-version"`, `extra_body.messages`, `auth`, …).
    pub fn validate(&self) -> Result<RequestShape, ShapeError> {
        let auth = match &self.auth {
            // The key as the API's own SDK sends it.
            None if self.api == Api::Anthropic => AuthStyle::Header("x-api-key".into()),
            None => AuthStyle::Bearer,
            Some(AuthSection::Name(n)) => match n.as_str() {
                "bearer" => AuthStyle::Bearer,
                "none" => AuthStyle::None,
                _ => {
                    return Err(err(
                        "auth",
                        format!("{n:?} is not \"bearer\", \"none\" or {{ header = \"name\" }}"),
                    ));
                }
            },
            Some(AuthSection::Header(h)) => {
                AuthStyle::Header(check_header_name("auth.header", &h.header)?)
            }
        };
        let key_header = match &auth {
            AuthStyle::Bearer => Some("authorization"),
            AuthStyle::Header(h) => Some(h.as_str()),
            AuthStyle::None => None,
        };
        let mut headers = BTreeMap::new();
        for (name, value) in &self.headers {
            let key = format!("headers.{name:?}");
            let lower = check_header_name(&key, name)?;
            if Some(lower.as_str()) == key_header {
                return Err(err(
                    &key,
                    format!(
                        "{lower:?} carries the API key (auth); to send your own value there, set auth = \"none\""
                    ),
                ));
            }
            if let (HeaderSection::Literal(_), Some(word)) = (value, credential_word(&lower)) {
                return Err(err(
                    &key,
                    format!(
                        "{lower:?} carries a credential (its name has {word:?}): a literal value would be stored in plans, spools and reports; write {{ env = \"NAME\" }} (a variable read on each agent, treated as a secret; latmesh probe: --header-env {lower}=NAME)"
                    ),
                ));
            }
            let value = match value {
                HeaderSection::Literal(v) => {
                    check_header_text(v, MAX_HEADER_VALUE_BYTES, false)
                        .map_err(|m| err(&key, m))?;
                    HeaderValueSource::Literal(v.clone())
                }
                HeaderSection::Env(EnvRef { env }) => {
                    check_env_name(env).map_err(|m| err(format!("{key}.env"), m))?;
                    HeaderValueSource::Env { env: env.clone() }
                }
            };
            if headers.insert(lower.clone(), value).is_some() {
                return Err(err(
                    &key,
                    format!("{lower:?} is given twice (header names are case-insensitive)"),
                ));
            }
        }
        for (name, value) in &self.query {
            let key = format!("query.{name:?}");
            if name.trim().is_empty() {
                return Err(err(key, "a query parameter needs a name"));
            }
            if value.is_empty() {
                return Err(err(key, "must not be empty"));
            }
        }
        check_extra_body("extra_body", &self.extra_body)?;
        if let Some(f) = &self.max_tokens_field {
            let plausible = (1..=64).contains(&f.len())
                && f.starts_with(|c: char| c.is_ascii_lowercase())
                && f.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !plausible {
                return Err(err(
                    "max_tokens_field",
                    format!(
                        "{f:?} is not a JSON field name (1-64 of a-z 0-9 _, starting with a letter), e.g. \"max_completion_tokens\""
                    ),
                ));
            }
            if RESERVED_BODY_KEYS.contains(&f.as_str()) && !CAP_FIELDS.contains(&f.as_str()) {
                return Err(err(
                    "max_tokens_field",
                    format!("{f:?} is a field latmesh sets for another purpose"),
                ));
            }
            if self.extra_body.contains_key(f) {
                return Err(err(
                    format!("extra_body.{f}"),
                    "is the output cap's field (max_tokens_field): the scenario's max_tokens sets it",
                ));
            }
        }
        self.check_exact_output()?;
        let stream_usage = match self.stream_usage.as_deref() {
            None | Some("auto") => StreamUsage::Auto,
            Some("always") => StreamUsage::Always,
            Some("never") => StreamUsage::Never,
            Some(s) => {
                return Err(err(
                    "stream_usage",
                    format!("{s:?} is not one of auto, always, never"),
                ));
            }
        };
        if self.stream_usage.is_some() && self.api != Api::Chat {
            return Err(err(
                "stream_usage",
                format!(
                    "applies to api = \"chat\" only (Chat Completions streams ask for usage; api = {:?} reports it unasked): leave it out",
                    self.api.name()
                ),
            ));
        }
        let reasoning_tags = match &self.reasoning_tags {
            None => None,
            Some(t) => {
                for (which, tag) in [("open", &t.open), ("close", &t.close)] {
                    if tag.trim().is_empty() || tag.trim() != tag {
                        return Err(err(
                            format!("reasoning_tags.{which}"),
                            format!("{tag:?}: a tag is not empty and has no blank at either end"),
                        ));
                    }
                    if tag.len() > MAX_REASONING_TAG_BYTES {
                        return Err(err(
                            format!("reasoning_tags.{which}"),
                            format!(
                                "is {} bytes long, at most {MAX_REASONING_TAG_BYTES}",
                                tag.len()
                            ),
                        ));
                    }
                }
                if t.open == t.close {
                    return Err(err("reasoning_tags", "open and close are the same tag"));
                }
                Some(ReasoningTags {
                    open: t.open.clone(),
                    close: t.close.clone(),
                })
            }
        };
        Ok(RequestShape {
            api: self.api,
            headers,
            query: self.query.clone(),
            extra_body: self.extra_body.clone(),
            auth,
            max_tokens_field: self.max_tokens_field.clone(),
            stream_usage,
            reasoning_tags,
            exact_output: self.exact_output.clone(),
        })
    }

    /// `exact_output`: as `extra_body` (under the key `exact_output`), no key shared with
    /// `extra_body` or naming the output cap's field, and no `$` string but
    /// [`OUTPUT_TOKENS_VAR`] (at any depth).
    fn check_exact_output(&self) -> Result<(), ShapeError> {
        check_extra_body("exact_output", &self.exact_output)?;
        for (k, v) in &self.exact_output {
            let key = format!("exact_output.{k}");
            if self.extra_body.contains_key(k) {
                return Err(err(
                    key,
                    "is also in extra_body: exact_output is merged over it; give the key once",
                ));
            }
            if self.max_tokens_field.as_deref() == Some(k.as_str()) {
                return Err(err(
                    key,
                    "is the output cap's field (max_tokens_field): output_tokens sets it",
                ));
            }
            check_no_other_var(&key, v)?;
        }
        Ok(())
    }
}

/// Every string of `v` that starts with `$` is [`OUTPUT_TOKENS_VAR`].
fn check_no_other_var(key: &str, v: &serde_json::Value) -> Result<(), ShapeError> {
    match v {
        serde_json::Value::String(s) if s.starts_with('$') && s != OUTPUT_TOKENS_VAR => Err(err(
            key,
            format!(
                "{s:?}: the only variable exact_output knows is {OUTPUT_TOKENS_VAR:?} (the scenario's output_tokens)"
            ),
        )),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(j, x)| check_no_other_var(&format!("{key}[{j}]"), x)),
        serde_json::Value::Object(map) => map
            .iter()
            .try_for_each(|(k, x)| check_no_other_var(&format!("{key}.{k}"), x)),
        _ => Ok(()),
    }
}

/// The fields `shape.exact_output` adds to the body of a request of a scenario with
/// `output_tokens`: the table, each string [`OUTPUT_TOKENS_VAR`] (at any depth) replaced by
/// `output_tokens` as a JSON number. Merged into the body after `extra_body`.
pub fn exact_output_fields(
    shape: &RequestShape,
    output_tokens: u32,
) -> serde_json::Map<String, serde_json::Value> {
    fn fill(v: &serde_json::Value, n: u32) -> serde_json::Value {
        match v {
            serde_json::Value::String(s) if s == OUTPUT_TOKENS_VAR => n.into(),
            serde_json::Value::Array(items) => items.iter().map(|x| fill(x, n)).collect(),
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter().map(|(k, x)| (k.clone(), fill(x, n))).collect(),
            ),
            other => other.clone(),
        }
    }
    shape
        .exact_output
        .iter()
        .map(|(k, v)| (k.clone(), fill(v, output_tokens)))
        .collect()
}

/// `query` as a URL query string (without `?`): `name=value` pairs joined by `&`, each part
/// `application/x-www-form-urlencoded`, in name order.
pub fn query_string(query: &BTreeMap<String, String>) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query)
        .finish()
}

/// `shape` with the scenario's `extra_body` under it: the scenario's keys first, the
/// provider's replacing any they share (top-level keys; values are not merged deeper).
/// Borrowed when the scenario has none.
pub fn with_scenario_body<'a>(
    shape: &'a RequestShape,
    scenario_body: &serde_json::Map<String, serde_json::Value>,
) -> std::borrow::Cow<'a, RequestShape> {
    if scenario_body.is_empty() {
        return std::borrow::Cow::Borrowed(shape);
    }
    let mut merged = scenario_body.clone();
    for (k, v) in &shape.extra_body {
        merged.insert(k.clone(), v.clone());
    }
    std::borrow::Cow::Owned(RequestShape {
        extra_body: merged,
        ..shape.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input() -> ShapeInput {
        ShapeInput::default()
    }

    fn e(i: ShapeInput) -> String {
        i.validate().unwrap_err().to_string()
    }

    #[test]
    fn the_default_auth_is_the_apis_own() {
        let mut i = input();
        assert_eq!(i.validate().unwrap().auth, AuthStyle::Bearer);
        i.api = Api::Anthropic;
        assert_eq!(
            i.validate().unwrap().auth,
            AuthStyle::Header("x-api-key".into())
        );
        i.auth = Some(AuthSection::Name("bearer".into()));
        assert_eq!(i.validate().unwrap().auth, AuthStyle::Bearer);
    }

    #[test]
    fn a_full_shape_validates_lower_cased() {
        let mut i = input();
        i.headers.insert(
            "X-Foo".into(),
            HeaderSection::Literal("literal value".into()),
        );
        i.headers.insert(
            "api-key".into(),
            HeaderSection::Env(EnvRef {
                env: "AZ_KEY".into(),
            }),
        );
        i.query.insert("api-version".into(), "2024-10-21".into());
        i.extra_body = json!({"provider": {"order": ["x"], "allow_fallbacks": false}})
            .as_object()
            .unwrap()
            .clone();
        i.auth = Some(AuthSection::Name("none".into()));
        i.max_tokens_field = Some("max_completion_tokens".into());
        i.stream_usage = Some("never".into());
        i.reasoning_tags = Some(ReasoningTagsSection {
            open: "<think>".into(),
            close: "</think>".into(),
        });
        let s = i.validate().unwrap();
        assert_eq!(s.headers.keys().collect::<Vec<_>>(), ["api-key", "x-foo"]);
        assert_eq!(
            s.headers["api-key"],
            HeaderValueSource::Env {
                env: "AZ_KEY".into()
            }
        );
        assert_eq!(s.auth, AuthStyle::None);
        assert_eq!(s.stream_usage, StreamUsage::Never);
        assert_eq!(s.max_tokens_field.as_deref(), Some("max_completion_tokens"));
        assert_eq!(s.extra_body["provider"]["order"], json!(["x"]));
        assert_eq!(s.reasoning_tags.unwrap().close, "</think>");
        assert!(input().validate().unwrap().is_default());
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_key() {
        let lit = |v: &str| HeaderSection::Literal(v.into());
        let with_header = |name: &str, v: HeaderSection| {
            let mut i = input();
            i.headers.insert(name.into(), v);
            i
        };
        let cases: Vec<(ShapeInput, &str)> = vec![
            (
                with_header("x foo", lit("v")),
                "headers.\"x foo\": \"x foo\" is not a valid header name",
            ),
            (
                with_header("Content-Type", lit("v")),
                "headers.\"Content-Type\": \"content-type\" is set by latmesh",
            ),
            (
                with_header("host", lit("v")),
                "headers.\"host\": \"host\" is set by latmesh",
            ),
            (with_header("user-agent", lit("v")), "user_agent key"),
            (
                with_header("x-latmesh-region", lit("v")),
                "x-latmesh-* headers",
            ),
            (
                with_header("Authorization", lit("Bearer x")),
                "headers.\"Authorization\": \"authorization\" carries the API key",
            ),
            (
                with_header("x-foo", lit("")),
                "headers.\"x-foo\": must not be empty",
            ),
            (
                with_header("x-foo", lit("a\nb")),
                "headers.\"x-foo\": has U+000A",
            ),
            (
                with_header("x-foo", lit(" a")),
                "headers.\"x-foo\": starts or ends with a blank",
            ),
            (
                with_header(
                    "x-foo",
                    HeaderSection::Env(EnvRef {
                        env: "sk-123 secret".into(),
                    }),
                ),
                "headers.\"x-foo\".env: must be the NAME of an environment variable",
            ),
        ];
        for (i, want) in cases {
            let got = e(i);
            assert!(got.contains(want), "{got:?} lacks {want:?}");
        }
        // A secret pasted as a literal value is never echoed.
        let got = e(with_header("x-key", lit("sk-SECRET\u{1}")));
        assert!(!got.contains("SECRET"), "{got}");
        let mut twice = with_header("x-foo", lit("a"));
        twice.headers.insert("X-FOO".into(), lit("b"));
        assert!(e(twice).contains("is given twice"));
        // With auth = "none" the authorization header is the user's; auth's own header is
        // refused in headers.
        // (from a variable: a literal credential is refused below).
        let mut own = with_header(
            "authorization",
            HeaderSection::Env(EnvRef { env: "TOK".into() }),
        );
        own.auth = Some(AuthSection::Name("none".into()));
        assert!(own.validate().is_ok());
        own.headers
            .insert("authorization".into(), lit("Token sk-abc"));
        let got = e(own);
        assert_eq!(
            got,
            "headers.\"authorization\": \"authorization\" carries a credential (its name has \"auth\"): a literal value would be stored in plans, spools and reports; write { env = \"NAME\" } (a variable read on each agent, treated as a secret; latmesh probe: --header-env authorization=NAME)"
        );
        for (name, word) in [
            ("X-Api-Key", Some("key")),
            ("api-key", Some("key")),
            ("x-goog-api-key", Some("key")),
            ("x-auth-token", Some("auth")),
            ("cookie", Some("cookie")),
            ("proxy-authorization", Some("auth")),
            ("x-client-secret", Some("secret")),
            ("x-title", None),
            ("http-referer", None),
            ("anthropic-version", None),
        ] {
            let lower = name.to_ascii_lowercase();
            assert_eq!(credential_word(&lower), word, "{name}");
            let r = with_header(name, lit("v")).validate();
            assert_eq!(r.is_err(), word.is_some(), "{name}: {r:?}");
        }

        // stream_usage is for chat only.
        for api in [Api::Anthropic, Api::Responses] {
            let mut i = input();
            i.api = api;
            i.stream_usage = Some("auto".into());
            assert_eq!(
                e(i),
                format!(
                    "stream_usage: applies to api = \"chat\" only (Chat Completions streams ask for usage; api = \"{}\" reports it unasked): leave it out",
                    api.name()
                )
            );
        }
        let mut az = with_header("api-key", lit("x"));
        az.auth = Some(AuthSection::Header(AuthHeader {
            header: "Api-Key".into(),
        }));
        assert!(e(az).contains("headers.\"api-key\": \"api-key\" carries the API key"));

        let mut q = input();
        q.query.insert("api-version".into(), String::new());
        assert_eq!(e(q), "query.\"api-version\": must not be empty");
        let mut q = input();
        q.query.insert(" ".into(), "x".into());
        assert!(e(q).starts_with("query.\" \": a query parameter needs a name"));

        for k in [
            "messages",
            "stream",
            "model",
            "input",
            "max_tokens",
            "stream_options",
        ] {
            let mut b = input();
            b.extra_body.insert(k.into(), json!(1));
            let got = e(b);
            assert!(
                got.starts_with(&format!("extra_body.{k}: latmesh sets")),
                "{got}"
            );
        }
        let mut big = input();
        big.extra_body
            .insert("x".into(), json!("y".repeat(MAX_EXTRA_BODY_BYTES)));
        assert!(e(big).contains("at most 65536"));

        let auth = |a: AuthSection| {
            let mut i = input();
            i.auth = Some(a);
            e(i)
        };
        assert!(auth(AuthSection::Name("basic".into())).starts_with("auth: \"basic\" is not"));
        assert!(
            auth(AuthSection::Header(AuthHeader {
                header: "x key".into()
            }))
            .starts_with("auth.header: \"x key\" is not a valid header name")
        );
        assert!(
            auth(AuthSection::Header(AuthHeader {
                header: "Host".into()
            }))
            .starts_with("auth.header: \"host\" is set by latmesh")
        );

        let field = |f: &str| {
            let mut i = input();
            i.max_tokens_field = Some(f.into());
            i.validate().map(|_| ()).map_err(|x| x.to_string())
        };
        assert!(field("max_completion_tokens").is_ok());
        assert!(
            field("Max Tokens")
                .unwrap_err()
                .starts_with("max_tokens_field: \"Max Tokens\" is not a JSON field name")
        );
        assert!(field("messages").unwrap_err().contains("another purpose"));
        assert!(field("").is_err());
        let mut dup = input();
        dup.max_tokens_field = Some("max_new_tokens".into());
        dup.extra_body.insert("max_new_tokens".into(), json!(5));
        assert!(e(dup).starts_with("extra_body.max_new_tokens: is the output cap's field"));

        let mut su = input();
        su.stream_usage = Some("sometimes".into());
        assert_eq!(
            e(su),
            "stream_usage: \"sometimes\" is not one of auto, always, never"
        );
        let tags = |open: &str, close: &str| {
            let mut i = input();
            i.reasoning_tags = Some(ReasoningTagsSection {
                open: open.into(),
                close: close.into(),
            });
            e(i)
        };
        assert!(tags("", "</think>").starts_with("reasoning_tags.open:"));
        assert!(tags("<think>", " </think>").starts_with("reasoning_tags.close:"));
        assert_eq!(
            tags("<t>", "<t>"),
            "reasoning_tags: open and close are the same tag"
        );
    }

    #[test]
    fn the_scenario_body_goes_under_the_providers() {
        let shape = RequestShape {
            extra_body: json!({"a": {"p": 1}, "b": 2}).as_object().unwrap().clone(),
            ..RequestShape::default()
        };
        let scenario = json!({"a": {"s": 1}, "c": 3}).as_object().unwrap().clone();
        let merged = with_scenario_body(&shape, &scenario);
        assert_eq!(
            serde_json::Value::Object(merged.extra_body.clone()),
            json!({"a": {"p": 1}, "b": 2, "c": 3})
        );
        assert!(matches!(
            with_scenario_body(&shape, &serde_json::Map::new()),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn exact_output_is_checked_and_filled_with_the_output_tokens() {
        let mut i = input();
        i.exact_output = json!({"ignore_eos": true, "min_tokens": "$output_tokens", "nested": {"n": ["$output_tokens", "x"]}})
            .as_object()
            .unwrap()
            .clone();
        let shape = i.validate().unwrap();
        assert_eq!(shape.exact_output["min_tokens"], json!("$output_tokens"));
        assert_eq!(
            serde_json::Value::Object(exact_output_fields(&shape, 256)),
            json!({"ignore_eos": true, "min_tokens": 256, "nested": {"n": [256, "x"]}})
        );
        assert!(exact_output_fields(&RequestShape::default(), 8).is_empty());
        let bad = |body: serde_json::Value, extra: serde_json::Value, field: Option<&str>| {
            let mut i = input();
            i.exact_output = body.as_object().unwrap().clone();
            i.extra_body = extra.as_object().unwrap().clone();
            i.max_tokens_field = field.map(str::to_string);
            e(i)
        };
        assert_eq!(
            bad(json!({"min_tokens": "$max_tokens"}), json!({}), None),
            "exact_output.min_tokens: \"$max_tokens\": the only variable exact_output knows is \"$output_tokens\" (the scenario's output_tokens)"
        );
        assert!(
            bad(json!({"a": {"b": ["$x"]}}), json!({}), None)
                .starts_with("exact_output.a.b[0]: \"$x\"")
        );
        assert!(
            bad(json!({"max_tokens": 5}), json!({}), None)
                .starts_with("exact_output.max_tokens: latmesh sets \"max_tokens\"")
        );
        assert!(
            bad(json!({"max_tokens": 5}), json!({}), None)
                .ends_with("exact_output may not replace it")
        );
        assert_eq!(
            bad(
                json!({"ignore_eos": true}),
                json!({"ignore_eos": false}),
                None
            ),
            "exact_output.ignore_eos: is also in extra_body: exact_output is merged over it; give the key once"
        );
        assert!(
            bad(
                json!({"max_new_tokens": 5}),
                json!({}),
                Some("max_new_tokens")
            )
            .starts_with("exact_output.max_new_tokens: is the output cap's field")
        );
    }
}
