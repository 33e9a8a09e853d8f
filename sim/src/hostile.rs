//! Hostile providers: what a broken or malicious OpenAI-compatible server sends, for tests
//! that keep latmesh's provider input bounds closed (docs/metrics.md, "Provider input
//! bounds"; README "Failure semantics").
//!
//! A profile's [`Hostile`] (`"hostile": {…}` in a `--profiles` file, all off by default)
//! turns on, for every answer of that provider:
//!
//! * `echo_key`: the value of the request's first key header ([`KEY_HEADERS`]:
//!   `Authorization` (`Bearer <key>`), else `x-api-key` (Anthropic), else `api-key` (Azure))
//!   echoed everywhere a server can put text: the status line's reason
//!   phrase, two response headers (`x-echo`, `openai-organization`), every string field of
//!   every JSON chunk and of the non-streamed body (`id`, `model`, `system_fingerprint`,
//!   `finish_reason`, `service_tier`, the answer's content), every field of error bodies
//!   (`message`, `type`, `code`, `param`), and in the event stream an `id:` line, a comment
//!   and a named event (`event: <value>` / `data: <value>`) before the first chunk;
//! * `field_bytes`: `finish_reason`, `model`, `system_fingerprint` and error messages padded
//!   to that many bytes (each in its own event, so that one event stays within the agent's
//!   4 MiB SSE-line cap: `model` in the role chunk, `system_fingerprint` in the usage chunk,
//!   `finish_reason` in the finish chunk);
//! * `usage_value`: every usage count (`prompt_tokens`, `completion_tokens`, `total_tokens`,
//!   the details) sent as this JSON value (`4294967295`, `-5`, `1e30`, `"lots"`);
//! * `retry_after`: the raw `Retry-After` header of throttled answers (`1e30`, `NaN`, `-1`).
//!
//! Coverage per API: everything above on Chat Completions. On the Anthropic and Responses
//! APIs: the reason phrase, the headers, the stream prelude, `Retry-After`, the ids, the
//! `model` (echoed and padded, in `message_start` / `response.created`), the stop reason /
//! status (padded), the non-streamed answer's text, every usage count, and every field of
//! error bodies and in-band error events; their token deltas carry the plain answer.

use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use serde::{Deserialize, Serialize};

/// The headers a key travels in, by API and auth style: the first one present is echoed.
pub const KEY_HEADERS: [&str; 3] = ["authorization", "x-api-key", "api-key"];

/// Largest [`Hostile::field_bytes`]: below the agent's 4 MiB SSE-line cap with room for the
/// rest of the event.
pub const MAX_FIELD_BYTES: u32 = 4_000_000;

/// Hostile behaviour of a simulated provider (see the [module documentation](self)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Hostile {
    /// Echo the request's key header ([`KEY_HEADERS`]) into every field of every answer.
    pub echo_key: bool,
    /// Pad `finish_reason`, `model`, `system_fingerprint` and error messages to this many
    /// bytes (0: off; at most [`MAX_FIELD_BYTES`]).
    pub field_bytes: u32,
    /// Every usage count sent as this JSON value instead of the true one (`None`: the true
    /// counts).
    pub usage_value: Option<serde_json::Value>,
    /// The `Retry-After` header of throttled answers, sent as is (`None`: the planned
    /// seconds).
    pub retry_after: Option<String>,
}

impl Hostile {
    /// Checks `field_bytes` and `retry_after` (named after profile `name`).
    ///
    /// # Errors
    /// A message naming the bad field.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if self.field_bytes > MAX_FIELD_BYTES {
            return Err(format!(
                "{name}.hostile.field_bytes = {}: must be at most {MAX_FIELD_BYTES}",
                self.field_bytes
            ));
        }
        if let Some(v) = &self.retry_after
            && HeaderValue::from_str(v).is_err()
        {
            return Err(format!(
                "{name}.hostile.retry_after {v:?} is not a valid header value"
            ));
        }
        Ok(())
    }

    /// What this profile does to one request carrying `req_headers`.
    pub fn for_request(&self, req_headers: &HeaderMap) -> Echo {
        let key = self
            .echo_key
            .then(|| KEY_HEADERS.iter().find_map(|h| req_headers.get(*h)))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Echo {
            key,
            pad: self.field_bytes as usize,
            usage: self.usage_value.clone(),
        }
    }
}

/// The hostile part of one answer (inactive by default: every method returns its input).
#[derive(Debug, Clone, Default)]
pub struct Echo {
    /// The echoed key header's value, when echoing.
    pub key: Option<String>,
    /// Bytes to pad long fields to (0: none).
    pub pad: usize,
    /// The value every usage count is replaced with.
    pub usage: Option<serde_json::Value>,
}

impl Echo {
    /// `base`, followed by the echoed key when echoing.
    pub fn field(&self, base: &str) -> String {
        match &self.key {
            Some(k) => format!("{base} {k}"),
            None => base.to_string(),
        }
    }

    /// [`Echo::field`] padded with `x` to [`Echo::pad`] bytes.
    pub fn padded(&self, base: &str) -> String {
        self.pad(self.field(base))
    }

    /// `s` (a field already echoed) padded with `x` to [`Echo::pad`] bytes.
    pub fn pad(&self, mut s: String) -> String {
        if s.len() < self.pad {
            s.push(' ');
            let n = self.pad.saturating_sub(s.len());
            s.extend(std::iter::repeat_n('x', n));
        }
        s
    }

    /// `usage` with every number (at any depth) replaced by the hostile value.
    pub fn usage(&self, usage: serde_json::Value) -> serde_json::Value {
        let Some(v) = &self.usage else {
            return usage;
        };
        fn replace(u: serde_json::Value, v: &serde_json::Value) -> serde_json::Value {
            match u {
                serde_json::Value::Number(_) => v.clone(),
                serde_json::Value::Object(m) => {
                    m.into_iter().map(|(k, x)| (k, replace(x, v))).collect()
                }
                other => other,
            }
        }
        replace(usage, v)
    }

    /// The lines sent before the first chunk of an event stream: an `id:` line and a
    /// comment, and a named event carrying the key (`None` when not echoing).
    pub fn sse_prelude(&self) -> Option<String> {
        let k = self.key.as_deref()?;
        let k = k.replace(['\r', '\n'], " ");
        Some(format!("id: {k}\n: {k}\n\nevent: {k}\ndata: {k}\n\n"))
    }

    /// Puts the key in the response's reason phrase and in two headers.
    pub fn apply(&self, resp: &mut Response) {
        let Some(k) = &self.key else {
            return;
        };
        if let Ok(v) = HeaderValue::from_str(k) {
            resp.headers_mut().insert("x-echo", v.clone());
            resp.headers_mut().insert("openai-organization", v);
        }
        let reason = format!(
            "{} {k}",
            resp.status().canonical_reason().unwrap_or("Status")
        );
        if let Ok(r) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes()) {
            resp.extensions_mut().insert(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn echoes_pads_and_replaces_usage() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k1"));
        let off = Hostile::default().for_request(&h);
        assert_eq!(off.padded("stop"), "stop");
        assert_eq!(off.sse_prelude(), None);
        let on = Hostile {
            echo_key: true,
            field_bytes: 32,
            usage_value: Some(serde_json::json!(4294967295u64)),
            retry_after: None,
        }
        .for_request(&h);
        assert_eq!(on.field("m"), "m Bearer k1");
        let p = on.padded("stop");
        assert_eq!(p.len(), 32);
        assert!(p.starts_with("stop Bearer k1 x"));
        let u = on.usage(serde_json::json!({"prompt_tokens": 3, "details": {"cached_tokens": 0}}));
        assert_eq!(
            u,
            serde_json::json!({"prompt_tokens": 4294967295u64, "details": {"cached_tokens": 4294967295u64}})
        );
        assert!(on.sse_prelude().unwrap().contains("event: Bearer k1\n"));
        // An Anthropic or Azure key header is echoed too.
        let hostile = Hostile {
            echo_key: true,
            ..Hostile::default()
        };
        for name in ["x-api-key", "api-key"] {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static("sk-k2"));
            assert_eq!(hostile.for_request(&h).field("m"), "m sk-k2", "{name}");
        }
        let bad = Hostile {
            field_bytes: MAX_FIELD_BYTES + 1,
            ..Hostile::default()
        };
        assert!(
            bad.validate("p")
                .unwrap_err()
                .contains("p.hostile.field_bytes")
        );
    }

    #[test]
    fn profiles_files_turn_it_on_and_typos_are_refused() {
        let p: crate::ProviderProfile = serde_json::from_str(
            r#"{"name":"h","hostile":{"echo_key":true,"usage_value":"lots","retry_after":"NaN"}}"#,
        )
        .unwrap();
        p.validate().unwrap();
        assert!(p.hostile.echo_key);
        assert_eq!(p.hostile.usage_value, Some(serde_json::json!("lots")));
        assert_eq!(p.hostile.retry_after.as_deref(), Some("NaN"));
        let typo = r#"{"name":"h","hostile":{"echo_keys":true}}"#;
        assert!(serde_json::from_str::<crate::ProviderProfile>(typo).is_err());
        let off: crate::ProviderProfile = serde_json::from_str(r#"{"name":"h"}"#).unwrap();
        assert_eq!(off.hostile, Hostile::default());
    }
}
