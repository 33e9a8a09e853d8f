//! Whether a failed request was refused because its prompt is longer than the provider's
//! context ([`is_context_refusal`]): the tier is past that provider's limit
//! ([`crate::tiers::TierRow::context_refused`]). One rule for the in-memory summary and the
//! rows rebuilt from ClickHouse.

/// HTTP statuses a provider refuses an over-long prompt with: 400, 413.
pub const CONTEXT_REFUSAL_STATUSES: [u16; 2] = [400, 413];

/// Words of an error's type, code or message (lower-cased) that say the prompt did not fit:
/// OpenAI and vLLM (`context_length_exceeded`, "maximum context length"), llama-server
/// ("exceeds the available context size"), Anthropic ("prompt is too long").
pub const CONTEXT_REFUSAL_WORDS: [&str; 2] = ["context", "too long"];

/// A request answered with one of [`CONTEXT_REFUSAL_STATUSES`] whose error type, code or
/// message (`texts`) holds one of [`CONTEXT_REFUSAL_WORDS`] (case-insensitive).
pub fn is_context_refusal<'a>(
    status: Option<u16>,
    texts: impl IntoIterator<Item = &'a str>,
) -> bool {
    status.is_some_and(|s| CONTEXT_REFUSAL_STATUSES.contains(&s))
        && texts.into_iter().any(|t| {
            let t = t.to_lowercase();
            CONTEXT_REFUSAL_WORDS.iter().any(|w| t.contains(w))
        })
}

/// [`is_context_refusal`] of a record's final status and error texts (merge of h4results and
/// h5store by H6: the in-memory aggregate and the ClickHouse rows apply the one rule).
pub fn record_is_context_refusal(rec: &latmesh_core::record::ProbeRecord) -> bool {
    is_context_refusal(
        rec.http_status,
        [&rec.error_type, &rec.error_code, &rec.error_message]
            .into_iter()
            .flatten()
            .map(String::as_str),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_400_naming_the_context_is_a_refusal_other_failures_are_not() {
        assert!(is_context_refusal(
            Some(400),
            ["invalid_request_error", "This model's maximum context length is 8192 tokens"]
        ));
        assert!(is_context_refusal(Some(413), ["Prompt is too long"]));
        assert!(is_context_refusal(Some(400), ["context_length_exceeded"]));
        assert!(!is_context_refusal(Some(400), ["bad temperature"]));
        assert!(!is_context_refusal(Some(500), ["context overflow"]));
        assert!(!is_context_refusal(None, ["context"]));
    }
}
