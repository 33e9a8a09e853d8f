//! Whether a failed request was refused because its prompt is longer than the provider's
//! context (docs/metrics.md "Generated prompts"): a generated-prompt tier past a provider's
//! limit shows as "refused (context)", not as a provider failure like any other.
//!
//! The one rule, shared by the in-memory summary ([`crate::aggregate`]) and the ClickHouse
//! queries (which match the same [`CONTEXT_ERROR_CODES`] exactly and the same
//! [`CONTEXT_MESSAGE_PHRASES`] case-insensitively, e.g. with `positionCaseInsensitive`): an
//! `http_4xx` attempt (400, 413, 422, …; never 429 or 5xx) whose error code or type is one
//! of the codes, or whose message contains one of the phrases.

use latmesh_core::record::{Outcome, ProbeRecord};

/// Error codes (the error object's `code`, or its `type`) that mean "the prompt does not fit
/// the context", compared exactly: OpenAI's and vLLM's `context_length_exceeded`,
/// llama-server's `exceed_context_size_error`.
pub const CONTEXT_ERROR_CODES: [&str; 2] = ["context_length_exceeded", "exceed_context_size_error"];

/// Message phrases that mean the same, lowercase, matched case-insensitively anywhere in the
/// message:
/// * OpenAI, vLLM, SGLang: "This model's **maximum context length** is 8192 tokens. However,
///   your messages resulted in 9000 tokens";
/// * Anthropic: "**prompt is too long**: 215000 tokens > 200000 maximum";
/// * llama-server: "the request **exceeds the available context size**, try increasing it";
/// * Gemini's OpenAI-compatible API: "The input token count (1200000) **exceeds the maximum
///   number of tokens** allowed (1048576)";
/// * any gateway that puts the code in the message (`context_length_exceeded`).
pub const CONTEXT_MESSAGE_PHRASES: [&str; 5] = [
    "maximum context length",
    "prompt is too long",
    "exceeds the available context size",
    "exceeds the maximum number of tokens",
    "context_length_exceeded",
];

/// Whether an attempt that ended with `outcome` and the provider's `error_code`,
/// `error_type` and `error_message` is a context refusal (see the [module](self)).
pub fn is_context_refusal(
    outcome: Outcome,
    error_code: Option<&str>,
    error_type: Option<&str>,
    error_message: Option<&str>,
) -> bool {
    if outcome != Outcome::Http4xx {
        return false;
    }
    let coded = [error_code, error_type]
        .into_iter()
        .flatten()
        .any(|c| CONTEXT_ERROR_CODES.contains(&c));
    coded
        || error_message.is_some_and(|m| {
            let m = m.to_lowercase();
            CONTEXT_MESSAGE_PHRASES.iter().any(|p| m.contains(p))
        })
}

/// [`is_context_refusal`] of a record.
pub fn record_is_context_refusal(rec: &ProbeRecord) -> bool {
    is_context_refusal(
        rec.outcome(),
        rec.error_code.as_deref(),
        rec.error_type.as_deref(),
        rec.error_message.as_deref(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_anthropic_and_llama_server_wordings_are_context_refusals() {
        let http4 = Outcome::Http4xx;
        // OpenAI: code and message.
        let openai = "This model's maximum context length is 128000 tokens. However, your \
                      messages resulted in 130012 tokens. Please reduce the length of the \
                      messages.";
        assert!(is_context_refusal(
            http4,
            Some("context_length_exceeded"),
            Some("invalid_request_error"),
            Some(openai)
        ));
        // vLLM sends no code: the message alone.
        assert!(is_context_refusal(
            http4,
            None,
            Some("BadRequestError"),
            Some(openai)
        ));
        // Anthropic: type invalid_request_error, message only.
        assert!(is_context_refusal(
            http4,
            None,
            Some("invalid_request_error"),
            Some("prompt is too long: 215000 tokens > 200000 maximum")
        ));
        // llama-server: its own type, and its message.
        assert!(is_context_refusal(
            http4,
            None,
            Some("exceed_context_size_error"),
            None
        ));
        assert!(is_context_refusal(
            http4,
            None,
            None,
            Some("The request EXCEEDS the available context size, try increasing it")
        ));
        assert!(is_context_refusal(
            http4,
            None,
            None,
            Some(
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
            )
        ));
    }

    #[test]
    fn other_errors_and_other_outcomes_are_not() {
        let http4 = Outcome::Http4xx;
        assert!(!is_context_refusal(
            http4,
            Some("invalid_api_key"),
            Some("invalid_request_error"),
            Some("Incorrect API key provided")
        ));
        assert!(!is_context_refusal(
            http4,
            None,
            None,
            Some("max_tokens: 100000 > 64000, which is the maximum allowed")
        ));
        assert!(!is_context_refusal(http4, None, None, None));
        // The same words on a 5xx or a throttled answer are the provider's trouble, not a
        // refusal of the prompt.
        for o in [Outcome::Http5xx, Outcome::Throttled, Outcome::Ok] {
            assert!(!is_context_refusal(
                o,
                Some("context_length_exceeded"),
                None,
                Some("prompt is too long")
            ));
        }
        let rec = ProbeRecord {
            outcome: Some(http4),
            http_status: Some(400),
            error_message: Some("prompt is too long: 9000 tokens > 8192 maximum".into()),
            ..ProbeRecord::default()
        };
        assert!(record_is_context_refusal(&rec));
    }
}
