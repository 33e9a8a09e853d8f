//! Credentials read on this agent, never sent to the coordinator nor logged: the API key
//! ([`api_key_from_env`]) and the secret headers of a request shape ([`secret_headers`],
//! [`SecretHeader`]).

use http::header::{HeaderName, HeaderValue};

use latmesh_core::api::{HeaderValueSource, RequestShape};

/// The API key in environment variable `name`, surrounding whitespace (a trailing newline
/// from `$(cat keyfile)`, a CR from a Windows file) removed. `Ok(None)` when the variable is
/// unset or blank.
///
/// # Errors
/// The value is not valid Unicode or cannot be sent in an `Authorization` header (a control
/// character inside it); the message names the variable, never the value.
pub fn api_key_from_env(name: &str) -> Result<Option<String>, String> {
    secret_from_env(name, "the API key")
}

/// A secret (`what`: "the API key", "the value of header x") in environment variable
/// `name`, as [`api_key_from_env`] reads it.
///
/// # Errors
/// As [`api_key_from_env`]; the message names the variable and `what`, never the value.
fn secret_from_env(name: &str, what: &str) -> Result<Option<String>, String> {
    let raw = match std::env::var(name) {
        Ok(v) => v,
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!("{what} in ${name} is not valid UTF-8"));
        }
    };
    let key = raw.trim();
    if key.is_empty() {
        return Ok(None);
    }
    if HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
        return Err(format!(
            "{what} in ${name} has a character that cannot be sent in an HTTP header"
        ));
    }
    Ok(Some(key.to_string()))
}

/// Why [`api_key_from_env`] read no secret from variable `name`: `"is not set"`, or
/// `"is empty"` when it is set to nothing but blanks.
pub fn unset_or_empty(name: &str) -> &'static str {
    if std::env::var_os(name).is_some() {
        "is empty"
    } else {
        "is not set"
    }
}

/// A header whose value is a secret read on this agent (`headers = { name = { env = … } }`):
/// sent as a sensitive header, redacted from every provider value like the API key
/// ([`super::outcome::Scrubber`]), never logged (its `Debug` shows the name only).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretHeader {
    pub(super) name: HeaderName,
    pub(super) value: String,
}

impl SecretHeader {
    /// `name: value`, or `None` when either cannot be sent in a header.
    pub fn new(name: &str, value: &str) -> Option<SecretHeader> {
        let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
        HeaderValue::from_str(value).ok()?;
        Some(SecretHeader {
            name,
            value: value.to_string(),
        })
    }

    /// The header's (lower-case) name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The secret value.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl std::fmt::Debug for SecretHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretHeader({}: [redacted])", self.name)
    }
}

/// The secret headers of `shape` (its `{ env = … }` headers) with their values read on this
/// agent, trimmed as API keys are, and for each one that cannot be sent (unset, blank,
/// unusable) a problem naming the header and the variable, never a value. Those headers are
/// left out of the requests (the coordinator refuses a launch to an agent that lacks one
/// unless allowed: `keys`).
pub fn secret_headers(shape: &RequestShape) -> (Vec<SecretHeader>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (name, source) in &shape.headers {
        let HeaderValueSource::Env { env } = source else {
            continue;
        };
        let what = format!("the value of header {name}");
        match secret_from_env(env, &what) {
            Ok(Some(v)) => match SecretHeader::new(name, &v) {
                Some(h) => out.push(h),
                None => problems.push(format!("header {name} cannot be sent")),
            },
            Ok(None) => problems.push(format!(
                "${env} (the value of header {name}) {} on this agent",
                unset_or_empty(env)
            )),
            Err(e) => problems.push(e),
        }
    }
    (out, problems)
}
