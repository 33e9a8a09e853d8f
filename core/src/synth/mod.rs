//! Generated prompts of an exact length (docs/metrics.md "Generated prompts").
//!
//! A scenario with `input_tokens = [1000, 8000, 32000]` sends, instead of prompts of the
//! prompt set, one user message of exactly that many **words** per request, each word one of
//! [`words`] (common lower-case English words, each one token, with its leading space, in the
//! BPE vocabularies of the GPT, Llama, Qwen and DeepSeek families). The provider's own count
//! (`usage.prompt_tokens`) adds its chat template and may tokenize differently: records keep
//! both, and the summary says when a provider counts differently.
//!
//! # Layout of one request's text
//! `[shared prefix: M words] [header: HEADER_WORDS words] [body: N − M − HEADER_WORDS words]`,
//! one space between words, no trailing space:
//! * the **shared prefix** is the same for every request of the scenario (every tier, every
//!   region): a prefix a provider may cache, on purpose (`shared_prefix_tokens`; 0: none);
//! * the **header** is drawn per request from its [`RequestKey`] (seed, scenario, region,
//!   round, step, slot): it makes every request differ right after the shared prefix, so no
//!   prefix cache (they all match prefixes) shares the rest of the text, between requests,
//!   rounds, or regions sending at the same instant;
//! * the **body** is drawn once per (scenario, tier) and is the same for every request.
//!
//! The text of a request is a pure function of the plan's *text seed* ([`text_seed`]: its seed,
//! mixed with the run's salt unless the scenario reuses text), the scenario and tier, and its
//! [`RequestKey`]: byte-identical on every agent of a region, for every provider and every
//! retry of one run; two regions differ only in the header words. Each run draws new words
//! (its salt, [`run_salt`]), so a rerun does not meet the provider's prompt cache;
//! `reuse_text = true` keeps the same words in every run of the plan (caching on purpose). The prefix and body are built once
//! ([`SynthPrompt::build`]); a request costs one allocation of its own length
//! ([`SynthPrompt::text`]), never a regeneration.
//!
//! The generator is ChaCha8 ([`rand_chacha`], whose output is fixed by its seed across
//! versions) read 64 bits at a time, a word being `next_u64 % words().len()`.

use std::sync::OnceLock;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

mod salt;
pub use salt::{TextMode, run_salt, text_seed};

/// The word list, one per line (embedded).
const WORDS_TXT: &str = include_str!("words.txt");

/// Words drawn per request right after the shared prefix (see the [module](self)).
pub const HEADER_WORDS: u32 = 8;

/// Fewest input tokens a generated prompt may ask for (its header and at least as many body
/// words).
pub const MIN_INPUT_TOKENS: u32 = 2 * HEADER_WORDS;

/// Most input tokens a generated prompt may ask for: 2,000,000 (about 12 MB of text).
pub const MAX_INPUT_TOKENS: u32 = 2_000_000;

/// The generator's vocabulary: common lower-case English words of 3 to 8 letters.
pub fn words() -> &'static [&'static str] {
    static WORDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    WORDS.get_or_init(|| WORDS_TXT.lines().filter(|l| !l.is_empty()).collect())
}

/// A scenario's generated prompts (in [`crate::plan::ScenarioSpec::synth`]): one tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SynthSpec {
    /// The scenario's name in the campaign file; each tier is a plan scenario named
    /// `{group}.{tier_label(input_tokens)}` (e.g. `ctx.8k`).
    pub group: String,
    /// Input tokens asked for (words of the message), in
    /// [`MIN_INPUT_TOKENS`]`..=`[`MAX_INPUT_TOKENS`].
    pub input_tokens: u32,
    /// The first this many words are the same for every request of the scenario (a prefix a
    /// provider may cache on purpose); 0: none. At most `input_tokens − 2 × HEADER_WORDS`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shared_prefix_tokens: u32,
    /// The file's `reuse_text = true`: the same words in every run of the plan (the run's salt
    /// is not mixed in, see [`text_seed`]); false (the default): fresh words per run. Absent
    /// from the JSON when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse_text: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The short label of a tier: `1k` for 1000, `32k` for 32000, `1m` for 1,000,000, else the
/// number (`1500`, `4096`).
pub fn tier_label(input_tokens: u32) -> String {
    if input_tokens >= 1_000_000 && input_tokens.is_multiple_of(1_000_000) {
        format!("{}m", input_tokens / 1_000_000)
    } else if input_tokens >= 1000 && input_tokens.is_multiple_of(1000) {
        format!("{}k", input_tokens / 1000)
    } else {
        input_tokens.to_string()
    }
}

/// What makes one request's text its own (see the [module](self)): every part but the
/// provider and the attempt (a retry resends the same text; every provider of an arrival
/// gets the same text, so they are compared on equal input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestKey<'a> {
    /// The agent's region.
    pub region: &'a str,
    /// Round (rounds), else 0.
    pub round: u32,
    /// Step (sweep, rate), else 0.
    pub step: u32,
    /// Slot (see [`crate::record::ProbeRecord::slot`]).
    pub slot: u32,
}

/// The built prefix and body of one scenario tier; [`SynthPrompt::text`] makes a request's
/// message from them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthPrompt {
    seed: u64,
    spec: SynthSpec,
    /// The shared prefix, words joined by spaces (empty without one).
    prefix: String,
    /// The body, words joined by spaces.
    body: String,
}

/// FNV-1a 64 of `parts`, each followed by a 0 byte (so `("ab","c")` ≠ `("a","bc")`).
pub(crate) fn mix(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `n` words from `rng`, joined by single spaces, appended to `out`.
fn push_words(out: &mut String, rng: &mut ChaCha8Rng, n: u32) {
    let w = words();
    for _ in 0..n {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w[(rng.next_u64() % w.len() as u64) as usize]);
    }
}

impl SynthPrompt {
    /// Builds the prefix and body of `spec` under `seed`, the scenario's text seed
    /// ([`text_seed`], [`crate::plan::Plan::text_seed`]; once per scenario tier;
    /// O(`input_tokens`)).
    pub fn build(seed: u64, spec: &SynthSpec) -> SynthPrompt {
        let seed_bytes = seed.to_le_bytes();
        let group = spec.group.as_bytes();
        let mut prefix = String::new();
        if spec.shared_prefix_tokens > 0 {
            // The same for every tier of the scenario: not mixed with the tier.
            let mut rng = ChaCha8Rng::seed_from_u64(mix(&[&seed_bytes, group, b"prefix"]));
            push_words(&mut prefix, &mut rng, spec.shared_prefix_tokens);
        }
        let body_words = spec
            .input_tokens
            .saturating_sub(spec.shared_prefix_tokens)
            .saturating_sub(HEADER_WORDS);
        let mut body = String::new();
        let mut rng = ChaCha8Rng::seed_from_u64(mix(&[
            &seed_bytes,
            group,
            b"body",
            &spec.input_tokens.to_le_bytes(),
        ]));
        push_words(&mut body, &mut rng, body_words);
        SynthPrompt {
            seed,
            spec: spec.clone(),
            prefix,
            body,
        }
    }

    /// Its spec.
    pub fn spec(&self) -> &SynthSpec {
        &self.spec
    }

    /// The user message of the request `key`: prefix, header, body (see the [module](self)),
    /// exactly `input_tokens` words. One allocation of the text's length.
    pub fn text(&self, key: RequestKey<'_>) -> String {
        let mut out = String::with_capacity(
            self.prefix.len() + self.body.len() + 2 + 9 * HEADER_WORDS as usize,
        );
        out.push_str(&self.prefix);
        let mut rng = ChaCha8Rng::seed_from_u64(mix(&[
            &self.seed.to_le_bytes(),
            self.spec.group.as_bytes(),
            &self.spec.input_tokens.to_le_bytes(),
            key.region.as_bytes(),
            &key.round.to_le_bytes(),
            &key.step.to_le_bytes(),
            &key.slot.to_le_bytes(),
        ]));
        push_words(&mut out, &mut rng, HEADER_WORDS);
        if !self.body.is_empty() {
            out.push(' ');
            out.push_str(&self.body);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(n: u32, m: u32) -> SynthSpec {
        SynthSpec {
            group: "ctx".into(),
            input_tokens: n,
            shared_prefix_tokens: m,
            reuse_text: false,
        }
    }

    fn key(region: &str, slot: u32) -> RequestKey<'_> {
        RequestKey {
            region,
            round: 0,
            step: 0,
            slot,
        }
    }

    #[test]
    fn the_vocabulary_is_distinct_single_words() {
        let w = words();
        assert!(w.len() >= 400, "{}", w.len());
        let mut sorted = w.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), w.len(), "a word is listed twice");
        assert!(
            w.iter()
                .all(|x| (3..=8).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_lowercase()))
        );
    }

    #[test]
    fn a_request_has_exactly_the_words_asked_for() {
        for (n, m) in [(16, 0), (1000, 0), (8000, 512), (32_000, 0), (100, 84)] {
            let p = SynthPrompt::build(42, &spec(n, m));
            let t = p.text(key("eu", 3));
            assert_eq!(t.split(' ').count() as u32, n, "{n} {m}");
            assert!(!t.starts_with(' ') && !t.ends_with(' ') && !t.contains("  "));
        }
    }

    #[test]
    fn requests_differ_right_after_the_shared_prefix_and_nowhere_before() {
        let p = SynthPrompt::build(42, &spec(2000, 100));
        let (a, b) = (p.text(key("eu", 1)), p.text(key("eu", 2)));
        let words_a: Vec<&str> = a.split(' ').collect();
        let words_b: Vec<&str> = b.split(' ').collect();
        assert_eq!(words_a[..100], words_b[..100], "the shared prefix differs");
        assert_ne!(
            words_a[100..108],
            words_b[100..108],
            "two requests share their header"
        );
        // Another region at the same slot: same prefix and body, another header.
        let c = p.text(key("us", 1));
        assert_ne!(a, c);
        assert_eq!(a.len() - a.find(&p.body).unwrap(), p.body.len());
        assert!(c.ends_with(&p.body));
        // Without a shared prefix the very first words differ.
        let q = SynthPrompt::build(42, &spec(2000, 0));
        assert_ne!(q.text(key("eu", 1))[..40], q.text(key("eu", 2))[..40]);
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_another_seed_other_bytes() {
        let a = SynthPrompt::build(7, &spec(8000, 0)).text(key("eu", 5));
        let b = SynthPrompt::build(7, &spec(8000, 0)).text(key("eu", 5));
        assert_eq!(a, b);
        assert_ne!(a, SynthPrompt::build(8, &spec(8000, 0)).text(key("eu", 5)));
        // Pinned: the generator's output is part of the measurement (the same prompt in every
        // run of a plan); a change here changes every generated prompt.
        let pinned = SynthPrompt::build(1, &spec(16, 0)).text(key("r", 0));
        assert_eq!(
            pinned,
            "some cloud close trip move little storm star prince border they give law used film within"
        );
    }

    #[test]
    fn tiers_have_short_labels() {
        assert_eq!(tier_label(1000), "1k");
        assert_eq!(tier_label(32_000), "32k");
        assert_eq!(tier_label(1_000_000), "1m");
        assert_eq!(tier_label(4096), "4096");
        assert_eq!(tier_label(1500), "1500");
    }
}
