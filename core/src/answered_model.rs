//! What answered: the `model` and `system_fingerprint` a provider put in its response, and
//! the rule that says whether an answered model is the one asked for (docs/metrics.md,
//! "What answered").
//!
//! Providers answer with a normalised or dated name (`gpt-4o` → `gpt-4o-2024-08-06`,
//! `deepseek-chat` → `deepseek-chat-v3-0324`), sometimes with or without an organisation
//! path (`meta-llama/Llama-3.1-8B-Instruct`). [`model_matches`] accepts those; a server that
//! ignores the model id and answers with its own name (llama-server answers with its
//! `--alias`, whatever id was sent) does not match, and the provider's `expect_model` names
//! what it should answer instead.

/// Longest `answered_model` / `system_fingerprint` kept, bytes (cut on a character boundary,
/// then marked with `…`).
pub const MAX_ANSWERED_BYTES: usize = 128;

/// Characters that may separate the requested name from a suffix the provider added
/// (a date, a version): `gpt-4o` + `-2024-08-06`.
pub const SUFFIX_SEPARATORS: [char; 5] = ['-', '_', '.', ':', '@'];

/// Whether `answered` names the model `expected`. Both are compared ASCII-case-insensitively
/// after dropping an organisation path (everything up to the last `/`), and a trailing
/// `-latest`/`:latest`/`@latest` alias is dropped from `expected`. They match when the names
/// are equal, or when `answered` is `expected` followed by one of [`SUFFIX_SEPARATORS`] and a
/// version whose first part (up to the next separator) is digits, `v` and digits, or `latest`
/// (`gpt-4o-2024-08-06`, `deepseek-chat-v3-0324`, `llama3.1:latest`). Any other suffix is
/// another model (`gpt-4o-mini` is not `gpt-4o`, `qwen3:8b` is not `qwen3`). An empty name
/// never matches.
pub fn model_matches(expected: &str, answered: &str) -> bool {
    let base = |s: &str| -> String {
        let s = s.trim();
        s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase()
    };
    let (mut want, got) = (base(expected), base(answered));
    for alias in ["-latest", ":latest", "@latest"] {
        if let Some(w) = want.strip_suffix(alias).filter(|w| !w.is_empty()) {
            want = w.to_string();
        }
    }
    if got.is_empty() || want.is_empty() {
        return false;
    }
    let Some(rest) = got.strip_prefix(want.as_str()) else {
        return false;
    };
    let Some(version) = rest.strip_prefix(SUFFIX_SEPARATORS) else {
        return rest.is_empty();
    };
    // The suffix's first part (up to the next separator) must be a version or a date.
    let part = version.split(SUFFIX_SEPARATORS).next().unwrap_or("");
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(part) || part.strip_prefix('v').is_some_and(digits) || part == "latest"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_and_normalised_names_match() {
        assert!(model_matches("gpt-4o", "gpt-4o"));
        assert!(model_matches("gpt-4o", "GPT-4o"));
        assert!(model_matches("gpt-4o", "gpt-4o-2024-08-06"));
        assert!(model_matches("deepseek-chat", "deepseek-chat-v3-0324"));
        assert!(model_matches("qwen3:8b", "qwen3:8b"));
        assert!(model_matches("gpt-4", "gpt-4-0613"));
        assert!(model_matches("llama3.1", "llama3.1:latest"));
        assert!(model_matches(
            "meta-llama/Llama-3.1-8B-Instruct",
            "Llama-3.1-8B-Instruct"
        ));
        assert!(model_matches("openai/gpt-4o", "openai/gpt-4o-2024-08-06"));
        assert!(model_matches(
            "claude-3-5-sonnet",
            "claude-3-5-sonnet@20241022"
        ));
        // An alias resolved to a dated version.
        assert!(model_matches("mistral-large-latest", "mistral-large-2411"));
    }

    #[test]
    fn other_models_do_not_match() {
        // A longer name without a separator is another model.
        assert!(!model_matches("gpt-4", "gpt-4o"));
        assert!(!model_matches("gpt-4o", "gpt-4omini"));
        assert!(!model_matches("gpt-4o", "gpt-4o-mini"));
        assert!(!model_matches("qwen2.5-72b", "qwen2.5-72b-instruct"));
        assert!(!model_matches("qwen3", "qwen3:8b"));
        assert!(!model_matches("gpt-4", "gpt-4-32k"));
        assert!(!model_matches("deepseek-chat", "deepseek-reasoner"));
        // llama-server answers with the model it loaded, whatever was asked.
        assert!(!model_matches("smollm2", "SmolLM2-135M-Instruct-Q4_1.gguf"));
        assert!(!model_matches("gpt-4o", ""));
        assert!(!model_matches("gpt-4o", "gpt-4o-"));
        // The requested name must be whole: a shorter answer is not it.
        assert!(!model_matches("gpt-4o-2024-08-06", "gpt-4o"));
    }
}
