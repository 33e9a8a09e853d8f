//! The run's salt of generated prompts: new words in every run unless the scenario asks to
//! reuse them (docs/metrics.md "Generated prompts", "Fresh text per run").
//!
//! A plan's words are a pure function of its seed; without more, every run of one campaign
//! file sends byte-identical prompts and a rerun measures the provider's prompt cache (a
//! persistent prefix cache answers the second run from cache). So the coordinator stamps each
//! run's plan with a random salt ([`run_salt`], [`crate::plan::Plan::text_salt`]) when it
//! launches it, and the agents draw the words from [`text_seed`]: the plan's seed mixed with
//! that salt. The salt is in the plan, so every agent, region and provider of one run agrees
//! on it (every provider of an arrival gets the same text, a retry resends the same text, two
//! regions still differ only in their header words); each launch (a `campaign launch`, each
//! run of a series, each demo) draws a new one. The words stay common English words: the salt
//! only changes which are drawn.
//!
//! A scenario with `reuse_text = true` ignores the salt: the same words in every run of the
//! plan, to measure caching on purpose ([`TextMode::Reuse`]).

use serde::{Deserialize, Serialize};

use super::{SynthSpec, mix};

/// Whether a generated-prompt scenario's words were new in this run or the same as in every
/// run of its plan (the summary records it per scenario).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextMode {
    /// New words in this run (the run's salt mixed in; the default).
    Fresh,
    /// The same words as every other run of the plan (`reuse_text = true`, or a plan run
    /// without a salt).
    Reuse,
}

impl TextMode {
    /// `fresh` or `reuse`.
    pub fn as_str(self) -> &'static str {
        match self {
            TextMode::Fresh => "fresh",
            TextMode::Reuse => "reuse",
        }
    }

    /// The mode of `spec` in a plan whose salt is `salt`: [`TextMode::Reuse`] when the
    /// scenario reuses text or the plan has no salt, else [`TextMode::Fresh`].
    pub fn of(salt: Option<u64>, spec: &SynthSpec) -> TextMode {
        if spec.reuse_text || salt.is_none() {
            TextMode::Reuse
        } else {
            TextMode::Fresh
        }
    }
}

/// A new run's salt: 64 random bits from the operating system's generator, never 0.
pub fn run_salt() -> u64 {
    rand::random::<u64>().max(1)
}

/// The seed the words of `spec` are drawn from ([`super::SynthPrompt::build`]): the plan's
/// `seed` alone when the scenario reuses text or the plan has no salt ([`TextMode::of`]),
/// else `seed` mixed with the run's `salt` (FNV-1a of both, so two salts give unrelated
/// words).
pub fn text_seed(seed: u64, salt: Option<u64>, spec: &SynthSpec) -> u64 {
    match (TextMode::of(salt, spec), salt) {
        (TextMode::Fresh, Some(salt)) => mix(&[&seed.to_le_bytes(), b"salt", &salt.to_le_bytes()]),
        _ => seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{HEADER_WORDS, RequestKey, SynthPrompt};

    fn spec(reuse_text: bool) -> SynthSpec {
        SynthSpec {
            group: "ctx".into(),
            input_tokens: 1000,
            shared_prefix_tokens: 0,
            reuse_text,
        }
    }

    fn text(seed: u64, salt: Option<u64>, reuse: bool, region: &str, slot: u32) -> String {
        let s = spec(reuse);
        SynthPrompt::build(text_seed(seed, salt, &s), &s).text(RequestKey {
            region,
            round: 2,
            step: 0,
            slot,
        })
    }

    #[test]
    fn one_run_sends_the_same_text_to_every_agent_and_provider() {
        // Two agents of one region build their prompts apart from the same plan: same bytes
        // (the provider and the attempt are not part of the key, so every provider of an
        // arrival and every retry get these bytes too).
        let salt = Some(0x1234_5678_9abc_def0);
        assert_eq!(
            text(42, salt, false, "eu", 7),
            text(42, salt, false, "eu", 7)
        );
        // Two regions differ only in their header words.
        let (eu, us) = (
            text(42, salt, false, "eu", 7),
            text(42, salt, false, "us", 7),
        );
        let (eu, us): (Vec<&str>, Vec<&str>) = (eu.split(' ').collect(), us.split(' ').collect());
        let h = HEADER_WORDS as usize;
        assert_ne!(eu[..h], us[..h]);
        assert_eq!(eu[h..], us[h..]);
    }

    #[test]
    fn two_runs_send_different_words_unless_the_scenario_reuses_them() {
        let (a, b) = (Some(1), Some(2));
        let (one, two) = (text(42, a, false, "eu", 7), text(42, b, false, "eu", 7));
        assert_ne!(one, two);
        // Not only the header: the body (what a prefix cache would match) is new too.
        let common = one
            .split(' ')
            .zip(two.split(' '))
            .filter(|(x, y)| x == y)
            .count();
        assert!(common < 50, "{common} of 1000 words at the same place");
        // reuse_text: byte-identical across runs, and the same as a plan without a salt.
        assert_eq!(text(42, a, true, "eu", 7), text(42, b, true, "eu", 7));
        assert_eq!(text(42, a, true, "eu", 7), text(42, None, false, "eu", 7));
        // The text stays words of the vocabulary.
        let words = crate::synth::words();
        assert!(one.split(' ').all(|w| words.contains(&w)));
    }

    #[test]
    fn the_mode_says_which_was_sent() {
        assert_eq!(TextMode::of(Some(9), &spec(false)), TextMode::Fresh);
        assert_eq!(TextMode::of(Some(9), &spec(true)), TextMode::Reuse);
        assert_eq!(TextMode::of(None, &spec(false)), TextMode::Reuse);
        assert_eq!(text_seed(5, Some(9), &spec(true)), 5);
        assert_ne!(text_seed(5, Some(9), &spec(false)), 5);
        assert_ne!(run_salt(), 0);
    }
}
