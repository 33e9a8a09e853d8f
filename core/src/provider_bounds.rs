//! Bounds on every value a provider puts into a record (docs/metrics.md, "Provider input
//! bounds"; README "Failure semantics").
//!
//! A provider is not trusted: its strings can be megabytes long or echo the API key, its
//! counts can be `4294967295` or `1e30`. [`bound_record`] is the one step every record takes
//! before it leaves the probe engine:
//!
//! * every provider string ([`provider_texts`]) has the secrets removed by the caller's
//!   `redact` (the API key, echoed prompt text) and is cut to its bound ([`TextBound`]) on a
//!   character boundary, a cut marked with a trailing `…` that counts in the bound;
//! * every `usage` count above [`MAX_USAGE_TOKENS`] is dropped ([`bound_usage`]): it is not a
//!   count, and a clamped value would still poison sums and means;
//! * `retry_after_s` that is not finite, or negative, is dropped; above
//!   [`MAX_RETRY_AFTER_S`] it is clamped;
//! * each field changed by any of these is named in `cut_fields` (`finish_reason`,
//!   `usage.prompt_tokens`, `retry_after_s`, …), once.
//!
//! The bounds are far below what one transport message can carry, so no record can outgrow
//! a batch whatever a provider sends.
//!
//! These are the agent's bounds. The coordinator does not trust agents either and checks
//! every record again where it enters (`coordinator/src/intake.rs`, README "Security"): it
//! drops a `usage` count or `output_tokens` above [`MAX_USAGE_TOKENS`] the same way, and
//! keeps its own, looser bounds for the rest (texts over 8 KiB cut, `http_status` outside
//! 100..=999 dropped, `decode_tps` above 10^7 dropped); values only the agent produces
//! (seq, round, slot, attempt, turn, step, durations, `cut_fields`) reject the batch there.

use crate::record::{ProbeRecord, Usage};

/// One provider string field of a record and its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextBound {
    /// The record field's name (as in JSON, ClickHouse and `cut_fields`).
    pub field: &'static str,
    /// Longest value kept, bytes, the `…` of a cut included.
    pub max_bytes: usize,
}

impl TextBound {
    /// The bound of `field`: `max_bytes` bytes.
    pub const fn new(field: &'static str, max_bytes: usize) -> TextBound {
        TextBound { field, max_bytes }
    }
}

/// `finish_reason`: 64 bytes (real ones are short words: `stop`, `length`,
/// `insufficient_system_resource`).
pub const FINISH_REASON: TextBound = TextBound::new("finish_reason", 64);
/// `error_type`: 128 bytes.
pub const ERROR_TYPE: TextBound = TextBound::new("error_type", 128);
/// `error_code`: 128 bytes.
pub const ERROR_CODE: TextBound = TextBound::new("error_code", 128);
/// `error_message`: 256 bytes.
pub const ERROR_MESSAGE: TextBound = TextBound::new("error_message", 256);
/// `answered_model`: [`crate::answered_model::MAX_ANSWERED_BYTES`] (128) bytes.
pub const ANSWERED_MODEL: TextBound =
    TextBound::new("answered_model", crate::answered_model::MAX_ANSWERED_BYTES);
/// `system_fingerprint`: 128 bytes.
pub const SYSTEM_FINGERPRINT: TextBound = TextBound::new(
    "system_fingerprint",
    crate::answered_model::MAX_ANSWERED_BYTES,
);

/// Every provider string field, in record order. The sum of the bounds (a record's whole
/// provider text) is 832 bytes.
pub const TEXT_BOUNDS: [TextBound; 6] = [
    FINISH_REASON,
    ERROR_TYPE,
    ERROR_CODE,
    ERROR_MESSAGE,
    ANSWERED_MODEL,
    SYSTEM_FINGERPRINT,
];

/// Largest `usage` token count kept: 100,000,000 (ten times the longest context window
/// offered in 2026). A larger count, or one that does not fit in 32 bits, is dropped.
pub const MAX_USAGE_TOKENS: u32 = 100_000_000;

/// Largest `retry_after_s` kept, seconds (one day); a larger one is clamped to it.
pub const MAX_RETRY_AFTER_S: f64 = 86_400.0;

/// The record's provider string fields with their bounds, mutable, in [`TEXT_BOUNDS`] order.
/// A new provider string field goes here (a test checks that every string field of a record
/// is either here or set by the plan).
pub fn provider_texts(rec: &mut ProbeRecord) -> [(TextBound, &mut Option<String>); 6] {
    [
        (FINISH_REASON, &mut rec.finish_reason),
        (ERROR_TYPE, &mut rec.error_type),
        (ERROR_CODE, &mut rec.error_code),
        (ERROR_MESSAGE, &mut rec.error_message),
        (ANSWERED_MODEL, &mut rec.answered_model),
        (SYSTEM_FINGERPRINT, &mut rec.system_fingerprint),
    ]
}

/// The `usage` counts with their `cut_fields` names, mutable.
pub fn usage_counts(u: &mut Usage) -> [(&'static str, &mut Option<u32>); 5] {
    [
        ("usage.prompt_tokens", &mut u.prompt_tokens),
        ("usage.completion_tokens", &mut u.completion_tokens),
        ("usage.total_tokens", &mut u.total_tokens),
        ("usage.reasoning_tokens", &mut u.reasoning_tokens),
        ("usage.cached_tokens", &mut u.cached_tokens),
    ]
}

/// Drops every count of `u` above [`MAX_USAGE_TOKENS`]; returns the `cut_fields` names of
/// those dropped. Call it before anything is computed from the counts (`output_tokens`).
pub fn bound_usage(u: &mut Usage) -> Vec<&'static str> {
    let mut cut = Vec::new();
    for (name, v) in usage_counts(u) {
        if v.is_some_and(|n| n > MAX_USAGE_TOKENS) {
            *v = None;
            cut.push(name);
        }
    }
    cut
}

/// `text` cut to at most `max_bytes` bytes on a character boundary, the `…` marking the cut
/// included (`max_bytes` ≥ 3); unchanged when it fits.
pub fn cut_text(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_string();
    }
    const MARK: &str = "…";
    let mut s = prefix(text, max_bytes.saturating_sub(MARK.len())).to_string();
    s.push_str(MARK);
    s
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
/// boundary.
pub fn prefix(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Bytes of a provider string that `redact` sees: 4 × its bound, so that a secret straddling
/// the final cut is still found, while a multi-megabyte value costs no more than a short one.
pub const REDACT_WINDOW_FACTOR: usize = 4;

/// One provider string, bounded: its first [`REDACT_WINDOW_FACTOR`] × `max_bytes` bytes,
/// redacted, then cut to `max_bytes`. Returns the value and whether anything was removed
/// or cut.
pub fn bound_text(text: &str, max_bytes: usize, redact: &dyn Fn(&str) -> String) -> (String, bool) {
    let window = prefix(text, max_bytes.saturating_mul(REDACT_WINDOW_FACTOR));
    let redacted = redact(window);
    let out = cut_text(&redacted, max_bytes);
    let changed = window.len() < text.len() || redacted != window || out != redacted;
    (out, changed)
}

/// Bounds every provider value of `rec` (see the [module documentation](self)) and names
/// what changed in `rec.cut_fields`. `redact` removes secrets from a text (it must not
/// lengthen a text that has none). Applying it twice changes nothing more.
pub fn bound_record(rec: &mut ProbeRecord, redact: &dyn Fn(&str) -> String) {
    let mut cut: Vec<&'static str> = bound_usage(&mut rec.usage);
    for (b, slot) in provider_texts(rec) {
        if let Some(v) = slot.as_deref() {
            let (out, changed) = bound_text(v, b.max_bytes, redact);
            if changed {
                cut.push(b.field);
                *slot = Some(out);
            }
        }
    }
    match rec.retry_after_s {
        Some(s) if !s.is_finite() || s < 0.0 => {
            rec.retry_after_s = None;
            cut.push("retry_after_s");
        }
        Some(s) if s > MAX_RETRY_AFTER_S => {
            rec.retry_after_s = Some(MAX_RETRY_AFTER_S);
            cut.push("retry_after_s");
        }
        _ => {}
    }
    for name in cut {
        if !rec.cut_fields.iter().any(|f| f == name) {
            rec.cut_fields.push(name.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_redact(t: &str) -> String {
        t.to_string()
    }

    #[test]
    fn every_string_field_of_a_record_is_bounded_or_set_by_the_plan() {
        // Every string field set to a marker: those that serialize as the marker must be
        // provider texts (bounded here) or plan fields (set by latmesh, not a provider).
        let mut rec = ProbeRecord::default();
        for (_, slot) in provider_texts(&mut rec) {
            *slot = Some("MARK".to_string());
        }
        rec.provider = "MARK".into();
        rec.scenario = "MARK".into();
        rec.prompt_id = "MARK".into();
        rec.cut_fields = vec!["MARK".into()];
        let json = serde_json::to_value(&rec).unwrap();
        let plan = ["provider", "scenario", "prompt_id", "cut_fields"];
        let bounded: Vec<&str> = TEXT_BOUNDS.iter().map(|b| b.field).collect();
        for (k, v) in json.as_object().unwrap() {
            if v.is_string() && v != "MARK" {
                // An enum's name (outcome, load, output_tokens_source): ours.
                continue;
            }
            if v.is_string() || v.is_array() {
                assert!(
                    bounded.contains(&k.as_str()) || plan.contains(&k.as_str()),
                    "record field {k} is a string neither bounded nor set by the plan: add it \
                     to provider_texts"
                );
            }
        }
        // And every bounded field exists under its name.
        for b in TEXT_BOUNDS {
            assert_eq!(json[b.field], "MARK", "{}", b.field);
        }
    }

    #[test]
    fn long_texts_are_cut_on_char_boundaries_and_named() {
        let mut rec = ProbeRecord {
            finish_reason: Some("x".repeat(3 << 20)),
            answered_model: Some("é".repeat(100)),
            error_message: Some("short".into()),
            ..ProbeRecord::default()
        };
        bound_record(&mut rec, &no_redact);
        let fr = rec.finish_reason.as_deref().unwrap();
        assert_eq!(fr, format!("{}…", "x".repeat(61)));
        assert_eq!(fr.len(), 64);
        let m = rec.answered_model.as_deref().unwrap();
        assert_eq!(m, format!("{}…", "é".repeat(62)));
        assert!(m.len() <= 128);
        assert_eq!(rec.error_message.as_deref(), Some("short"));
        assert_eq!(rec.cut_fields, vec!["finish_reason", "answered_model"]);
        // A second pass changes nothing.
        let before = rec.clone();
        bound_record(&mut rec, &no_redact);
        assert_eq!(rec, before);
    }

    #[test]
    fn secrets_are_redacted_in_every_text_field_even_past_the_cut() {
        let key = "sk-canary-0123456789";
        let redact = |t: &str| t.replace(key, "[redacted]");
        let mut rec = ProbeRecord::default();
        for (_, slot) in provider_texts(&mut rec) {
            *slot = Some(format!("a {key} b"));
        }
        bound_record(&mut rec, &redact);
        for (b, slot) in provider_texts(&mut rec) {
            assert_eq!(slot.as_deref(), Some("a [redacted] b"), "{}", b.field);
        }
        assert_eq!(rec.cut_fields.len(), 6, "{:?}", rec.cut_fields);
        // A key at the end of a long value: cut away, never half kept.
        let mut rec = ProbeRecord {
            finish_reason: Some(format!("{}{key}", "y".repeat(50))),
            ..ProbeRecord::default()
        };
        bound_record(&mut rec, &redact);
        assert!(!rec.finish_reason.unwrap().contains("sk-canary"));
    }

    #[test]
    fn absurd_counts_are_dropped_and_retry_after_bounded() {
        let mut rec = ProbeRecord {
            usage: Usage {
                prompt_tokens: Some(u32::MAX),
                completion_tokens: Some(7),
                total_tokens: Some(MAX_USAGE_TOKENS + 1),
                reasoning_tokens: Some(MAX_USAGE_TOKENS),
                cached_tokens: None,
            },
            retry_after_s: Some(1e30),
            ..ProbeRecord::default()
        };
        bound_record(&mut rec, &no_redact);
        assert_eq!(
            rec.usage,
            Usage {
                prompt_tokens: None,
                completion_tokens: Some(7),
                total_tokens: None,
                reasoning_tokens: Some(MAX_USAGE_TOKENS),
                cached_tokens: None,
            }
        );
        assert_eq!(rec.retry_after_s, Some(MAX_RETRY_AFTER_S));
        assert_eq!(
            rec.cut_fields,
            vec!["usage.prompt_tokens", "usage.total_tokens", "retry_after_s"]
        );
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let mut rec = ProbeRecord {
                retry_after_s: Some(bad),
                ..ProbeRecord::default()
            };
            bound_record(&mut rec, &no_redact);
            assert_eq!(rec.retry_after_s, None, "{bad}");
            assert_eq!(rec.cut_fields, vec!["retry_after_s"]);
        }
        let mut fine = ProbeRecord {
            retry_after_s: Some(3.5),
            usage: Usage {
                prompt_tokens: Some(12),
                ..Usage::default()
            },
            ..ProbeRecord::default()
        };
        let before = fine.clone();
        bound_record(&mut fine, &no_redact);
        assert_eq!(fine, before);
    }
}
