//! How a simulated provider counts a request's prompt tokens: the count `usage` reports,
//! prefill is paid for and the context limit judges (see [`ProviderProfile`]'s
//! *Prompt tokens*).
//!
//! The simulator has no tokenizer. Text made of latmesh's generated words
//! ([`latmesh_core::synth`]: lower-case ASCII words separated by single spaces, one token
//! each by design) is counted by words, times the profile's
//! [`tokens_per_word`](ProviderProfile::tokens_per_word); any other text at 4 characters per
//! token ([`text::estimate_prompt_tokens`]); then the profile's chat template adds
//! [`template_tokens`](ProviderProfile::template_tokens).

use latmesh_core::synth::MIN_INPUT_TOKENS;

use crate::profile::ProviderProfile;
use crate::text;

/// The words of `part` when it is generated text: at least
/// [`MIN_INPUT_TOKENS`] words of lower-case ASCII letters, separated by single spaces, with
/// no space at either end. `None` for any other text (shorter text, capitals, punctuation,
/// digits, newlines, double spaces), which is counted by characters.
pub fn generated_words(part: &str) -> Option<u32> {
    let bytes = part.as_bytes();
    if bytes.first() == Some(&b' ') || bytes.last() == Some(&b' ') {
        return None;
    }
    let mut words: u32 = 1;
    let mut prev_space = false;
    for &b in bytes {
        match b {
            b'a'..=b'z' => prev_space = false,
            b' ' if !prev_space => {
                prev_space = true;
                words = words.saturating_add(1);
            }
            _ => return None,
        }
    }
    (words >= MIN_INPUT_TOKENS).then_some(words)
}

/// Tokens `profile` makes of `words` generated words: `ceil(words × tokens_per_word)`.
pub fn word_tokens(profile: &ProviderProfile, words: u64) -> u64 {
    (words as f64 * profile.tokens_per_word).ceil() as u64
}

/// The prompt tokens `profile` counts for a prompt whose parts are `parts` (system prompt,
/// message texts, reasoning sent back: each part judged on its own by [`generated_words`]):
/// `ceil(generated words × tokens_per_word) + ceil(other characters / 4) + template_tokens`,
/// saturating at `u32::MAX`.
pub fn prompt_tokens<'a>(
    profile: &ProviderProfile,
    parts: impl IntoIterator<Item = &'a str>,
) -> u32 {
    let (mut words, mut chars) = (0u64, 0usize);
    for part in parts {
        match generated_words(part) {
            Some(w) => words += u64::from(w),
            None => chars += part.chars().count(),
        }
    }
    let total = word_tokens(profile, words)
        + u64::from(text::estimate_prompt_tokens(chars))
        + u64::from(profile.template_tokens);
    u32::try_from(total).unwrap_or(u32::MAX)
}

/// The prompt tokens `profile` bills for one of latmesh's generated prompts of `words` words
/// sent alone as the only message (a tier of `input_tokens = words`):
/// `ceil(words × tokens_per_word) + template_tokens`. Ground truth for
/// `usage.prompt_tokens` and for [`crate::slo_truth::ttft_us`].
pub fn generated_prompt_tokens(profile: &ProviderProfile, words: u32) -> u32 {
    prompt_tokens(profile, std::iter::empty())
        .saturating_add(u32::try_from(word_tokens(profile, u64::from(words))).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_text_is_counted_by_words_other_text_by_characters() {
        let words16 = vec!["word"; 16].join(" ");
        assert_eq!(generated_words(&words16), Some(16));
        assert_eq!(generated_words(&vec!["ab"; 15].join(" ")), None); // too short
        for bad in [
            format!(" {words16}"),
            format!("{words16} "),
            words16.replacen(' ', "  ", 1),
            words16.replacen(' ', "\n", 1),
            words16.replacen("word", "Word", 1),
            format!("{words16}."),
            format!("{words16} 42"),
        ] {
            assert_eq!(generated_words(&bad), None, "{bad:?}");
        }
        let plain = ProviderProfile::default();
        // 16 words (79 chars: would be 20 tokens by characters) + "abcd" (1 token).
        assert_eq!(prompt_tokens(&plain, [words16.as_str(), "abcd"]), 17);
        assert_eq!(prompt_tokens(&plain, ["abcd", "efghi"]), 3); // ceil(9 / 4)
        let other = ProviderProfile {
            tokens_per_word: 1.25,
            template_tokens: 7,
            ..ProviderProfile::default()
        };
        // ceil(16 × 1.25) + 1 + 7.
        assert_eq!(prompt_tokens(&other, [words16.as_str(), "abcd"]), 28);
        assert_eq!(prompt_tokens(&other, std::iter::empty()), 7);
        assert_eq!(generated_prompt_tokens(&other, 1000), 1257);
        assert_eq!(generated_prompt_tokens(&other, 8000), 10_007);
        assert_eq!(generated_prompt_tokens(&plain, 32_000), 32_000);
        let wordy = ProviderProfile {
            tokens_per_word: 1.2,
            ..ProviderProfile::default()
        };
        assert_eq!(generated_prompt_tokens(&wordy, 1001), 1202); // ceil(1201.2)
    }

    #[test]
    fn real_generated_prompts_count_one_token_per_word() {
        use latmesh_core::synth::{RequestKey, SynthPrompt, SynthSpec};
        for n in [MIN_INPUT_TOKENS, 1000, 8000] {
            let spec = SynthSpec {
                group: "ctx".into(),
                input_tokens: n,
                shared_prefix_tokens: 0,
                reuse_text: false,
            };
            let text = SynthPrompt::build(7, &spec).text(RequestKey {
                region: "us-east",
                round: 0,
                step: 0,
                slot: 3,
            });
            assert_eq!(generated_words(&text), Some(n));
            assert_eq!(
                prompt_tokens(&ProviderProfile::default(), [text.as_str()]),
                n
            );
        }
    }
}
