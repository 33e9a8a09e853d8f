//! Quality parity and compatibility per provider (docs/metrics.md, "Quality parity",
//! "Compatibility checks"): what `latmesh compat` measured, turned into the numbers the
//! terminal, the HTML report and the selection matrix show. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use latmesh_core::compat::{CompatResult, CompatScore};
use latmesh_core::proportion::ProportionCi;
use latmesh_core::quality::QualitySample;
use serde::{Deserialize, Serialize};

/// One provider's quality-parity figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderQuality {
    /// Provider name.
    pub provider: String,
    /// Samples sent.
    pub samples: u64,
    /// Samples that ended `ok` (graded).
    pub graded: u64,
    /// Graded samples whose answer was correct.
    pub correct: u64,
    /// `correct / graded` (0..=1); `None` when nothing was graded.
    pub accuracy: Option<f64>,
    /// 95 % Wilson interval of `accuracy`, each prompt counted once ([`accuracy_interval`]).
    pub accuracy_ci: Option<(f64, f64)>,
    /// Share of graded samples whose answer equals the majority answer of the *other*
    /// providers to the same prompt (0..=1); `None` when no other provider answered.
    pub agreement: Option<f64>,
    /// Median output tokens of graded samples.
    pub median_output_tokens: Option<f64>,
    /// `median_output_tokens` / median of the other providers' medians.
    pub length_ratio: Option<f64>,
    /// The answers' fingerprint ([`latmesh_core::quality::answers_fingerprint`]).
    pub fingerprint: Option<String>,
    /// Set when the provider is clearly below the others: "possible quantization or
    /// different model", with the evidence in words.
    pub flag: Option<String>,
}

/// Quality parity over every provider of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QualityParity {
    /// The prompt set's version ([`latmesh_core::quality::QUALITY_SET_VERSION`]).
    pub set: String,
    /// One row per provider, in the order first seen in the samples.
    pub providers: Vec<ProviderQuality>,
}

/// A provider's compatibility results and their score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderCompat {
    /// Provider name.
    pub provider: String,
    /// Its results, in [`latmesh_core::compat::CompatCheck::ALL`] order.
    pub results: Vec<CompatResult>,
    /// [`latmesh_core::compat::score`] of them.
    pub score: Option<CompatScore>,
}

/// Measured scores per provider that the selection matrix uses where the user gave none
/// (`[selection.scores.NAME]` still overrides): both 0..=1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasuredScores {
    /// Compatibility score ([`latmesh_core::compat::score`]).
    pub compatibility: Option<f64>,
    /// Quality: the accuracy of the quality-parity run.
    pub quality: Option<f64>,
}

/// What one `latmesh compat` run measured, as a report shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompatReport {
    /// The run's id (empty when none ran).
    pub run_id: String,
    /// Compatibility results per provider (empty when the checks were not run).
    pub compat: Vec<ProviderCompat>,
    /// Quality parity (`None` when not run).
    pub quality: Option<QualityParity>,
}

impl CompatReport {
    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.compat.is_empty() && self.quality.is_none()
    }

    /// The measured scores per provider ([`measured_scores`]).
    pub fn measured(&self) -> BTreeMap<String, MeasuredScores> {
        measured_scores(
            &self.compat,
            self.quality.as_ref().unwrap_or(&QualityParity::default()),
        )
    }
}

/// Groups compatibility results by provider (order first seen), each scored.
pub fn compat_by_provider(results: &[CompatResult]) -> Vec<ProviderCompat> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<CompatResult>> = BTreeMap::new();
    for r in results {
        if !by.contains_key(&r.provider) {
            order.push(r.provider.clone());
        }
        by.entry(r.provider.clone()).or_default().push(r.clone());
    }
    order
        .into_iter()
        .map(|p| {
            let mut rs = by.remove(&p).unwrap_or_default();
            rs.sort_by_key(|r| r.check);
            let score = latmesh_core::compat::score(&rs);
            ProviderCompat {
                provider: p,
                results: rs,
                score,
            }
        })
        .collect()
}

/// Whether a sample was graded (its request ended `ok`).
fn graded(s: &QualitySample) -> bool {
    s.correct.is_some()
}

/// The 95 % interval of an accuracy of `correct` of `graded` samples over `prompts` distinct
/// prompts, **counting each prompt once** (a design effect of the whole cluster): several
/// samples of one prompt at temperature 0 are near-copies of one answer, not independent
/// trials, so the Wilson interval ([`latmesh_core::proportion::wilson`]) is taken over
/// `n = prompts` with `k = round(accuracy × n)`. `None` when nothing was graded.
pub fn accuracy_interval(correct: u64, graded: u64, prompts: u64) -> Option<ProportionCi> {
    if graded == 0 || prompts == 0 {
        return None;
    }
    let n = prompts.min(graded);
    let k = (correct as f64 / graded as f64 * n as f64).round() as u64;
    latmesh_core::proportion::wilson(k, n)
}

/// Correct, graded and distinct graded prompts of `samples`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Graded samples whose answer was correct.
    pub correct: u64,
    /// Graded samples.
    pub graded: u64,
    /// Distinct prompts with a graded sample.
    pub prompts: u64,
}

impl Tally {
    /// The tally of `samples`.
    pub fn of<'a>(samples: impl IntoIterator<Item = &'a QualitySample>) -> Tally {
        let mut t = Tally::default();
        let mut prompts = BTreeSet::new();
        for s in samples.into_iter().filter(|s| graded(s)) {
            t.graded += 1;
            t.correct += u64::from(s.correct == Some(true));
            prompts.insert(s.prompt_id.as_str());
        }
        t.prompts = prompts.len() as u64;
        t
    }

    /// `correct / graded`, `None` when nothing was graded.
    pub fn accuracy(&self) -> Option<f64> {
        (self.graded > 0).then(|| self.correct as f64 / self.graded as f64)
    }

    /// [`accuracy_interval`] of the tally.
    pub fn interval(&self) -> Option<ProportionCi> {
        accuracy_interval(self.correct, self.graded, self.prompts)
    }

    /// The sum of two tallies (prompts added: the same prompt of two providers counts twice).
    fn plus(self, o: Tally) -> Tally {
        Tally {
            correct: self.correct + o.correct,
            graded: self.graded + o.graded,
            prompts: self.prompts + o.prompts,
        }
    }
}

/// Whether accuracy `a` is significantly below `b`: both intervals ([`Tally::interval`])
/// exist and `a`'s upper bound is below `b`'s lower bound.
pub fn significantly_below(a: &Tally, b: &Tally) -> bool {
    match (a.interval(), b.interval()) {
        (Some(x), Some(y)) => x.upper < y.lower,
        _ => false,
    }
}

/// The text of the flag raised on a provider significantly below the others.
pub const FLAG: &str = "possible quantization or different model";

/// `58 % [46–69]`.
fn pct_ci(point: f64, ci: Option<ProportionCi>) -> String {
    match ci {
        Some(c) => format!(
            "{:.0} % [{:.0}–{:.0}]",
            point * 100.0,
            c.lower * 100.0,
            c.upper * 100.0
        ),
        None => format!("{:.0} %", point * 100.0),
    }
}

/// The majority answer hash of the other providers' modal answers to `prompt`: the most
/// frequent among them, `None` on a tie or when none answered it.
fn majority<'a>(others: &[&'a BTreeMap<String, String>], prompt: &str) -> Option<&'a str> {
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    for m in others {
        if let Some(h) = m.get(prompt) {
            *counts.entry(h.as_str()).or_default() += 1;
        }
    }
    let top = counts.values().copied().max()?;
    let mut at_top = counts.iter().filter(|(_, n)| **n == top);
    let (h, _) = at_top.next()?;
    at_top.next().is_none().then_some(*h)
}

/// The quality-parity figures of `samples` (docs/metrics.md, "Quality parity figures and the
/// flag"), per provider in the order first seen:
///
/// * **accuracy**: correct / graded samples (`ok` ones), with [`accuracy_interval`] (each
///   prompt counted once);
/// * **agreement**: the share of its graded samples whose `answer_hash` equals the *majority*
///   answer of the other providers to the same prompt — each other provider's modal answer
///   ([`latmesh_core::quality::modal_answers`]), pooled, the most frequent one; a tie gives no
///   majority and the prompt is not counted. `None` without another provider or a prompt
///   with a majority;
/// * **length**: the median output tokens of its graded samples, and its ratio to the median
///   of the other providers' medians;
/// * **the flag** [`FLAG`]: its accuracy significantly below the other providers' pooled
///   accuracy ([`significantly_below`]), with the evidence in words. Never with fewer than
///   two providers; a provider that only answers shorter is not flagged (its ratio is shown).
pub fn parity(samples: &[QualitySample]) -> QualityParity {
    let mut order: Vec<&str> = Vec::new();
    for s in samples {
        if !order.contains(&s.provider.as_str()) {
            order.push(&s.provider);
        }
    }
    let mine =
        |p: &str| -> Vec<&QualitySample> { samples.iter().filter(|s| s.provider == p).collect() };
    let by: Vec<Vec<&QualitySample>> = order.iter().map(|p| mine(p)).collect();
    let tallies: Vec<Tally> = by.iter().map(|v| Tally::of(v.iter().copied())).collect();
    let modal: Vec<BTreeMap<String, String>> = by
        .iter()
        .map(|v| latmesh_core::quality::modal_answers(v.iter().copied()))
        .collect();
    let medians: Vec<Option<f64>> = by
        .iter()
        .map(|v| {
            let tokens: Vec<f64> = v
                .iter()
                .filter(|s| graded(s))
                .map(|s| f64::from(s.output_tokens))
                .collect();
            crate::stats::median(&tokens)
        })
        .collect();
    let providers = order
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let others: Vec<usize> = (0..order.len()).filter(|j| *j != i).collect();
            let other_modal: Vec<&BTreeMap<String, String>> =
                others.iter().map(|j| &modal[*j]).collect();
            let (mut agree, mut counted) = (0u64, 0u64);
            for s in by[i].iter().filter(|s| graded(s)) {
                if let Some(m) = majority(&other_modal, &s.prompt_id) {
                    counted += 1;
                    agree += u64::from(s.answer_hash == m);
                }
            }
            let agreement = (counted > 0).then(|| agree as f64 / counted as f64);
            let other_medians: Vec<f64> = others.iter().filter_map(|j| medians[*j]).collect();
            let length_ratio = medians[i]
                .zip(crate::stats::median(&other_medians))
                .filter(|(_, o)| *o > 0.0)
                .map(|(m, o)| m / o);
            let t = tallies[i];
            let pooled = others
                .iter()
                .fold(Tally::default(), |acc, j| acc.plus(tallies[*j]));
            let flag = (!others.is_empty() && significantly_below(&t, &pooled)).then(|| {
                let mut why = format!(
                    "{FLAG}: accuracy {} ({}/{}) vs others {} ({}/{})",
                    pct_ci(t.accuracy().unwrap_or(0.0), t.interval()),
                    t.correct,
                    t.graded,
                    pct_ci(pooled.accuracy().unwrap_or(0.0), pooled.interval()),
                    pooled.correct,
                    pooled.graded
                );
                if let Some(a) = agreement {
                    let _ = write!(
                        why,
                        "; agrees with the others' majority on {:.0} %",
                        a * 100.0
                    );
                }
                if let Some(r) = length_ratio {
                    let _ = write!(why, "; answers {r:.2}× as long");
                }
                why
            });
            ProviderQuality {
                provider: p.to_string(),
                samples: by[i].len() as u64,
                graded: t.graded,
                correct: t.correct,
                accuracy: t.accuracy(),
                accuracy_ci: t.interval().map(|c| (c.lower, c.upper)),
                agreement,
                median_output_tokens: medians[i],
                length_ratio,
                fingerprint: latmesh_core::quality::answers_fingerprint(by[i].iter().copied()),
                flag,
            }
        })
        .collect();
    QualityParity {
        set: latmesh_core::quality::QUALITY_SET_VERSION.to_string(),
        providers,
    }
}

/// The measured scores of each provider from its compatibility results and its quality
/// parity row.
pub fn measured_scores(
    compat: &[ProviderCompat],
    quality: &QualityParity,
) -> BTreeMap<String, MeasuredScores> {
    let mut out: BTreeMap<String, MeasuredScores> = BTreeMap::new();
    for c in compat {
        out.entry(c.provider.clone()).or_default().compatibility = c.score.map(|s| s.score);
    }
    for q in &quality.providers {
        out.entry(q.provider.clone()).or_default().quality = q.accuracy;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::quality::answer_hash;
    use latmesh_core::record::Outcome;

    const PROMPTS: u32 = 32;
    const SAMPLES: u32 = 3;

    /// `provider`'s 32 prompts × 3 samples: wrong (a shared wrong answer) on the first
    /// `wrong` prompts, `tokens` output tokens each (right answers), `wrong_tokens` (wrong).
    fn answers(provider: &str, wrong: u32, tokens: u32, wrong_tokens: u32) -> Vec<QualitySample> {
        let mut out = Vec::new();
        for p in 0..PROMPTS {
            for s in 0..SAMPLES {
                let bad = p < wrong;
                let answer = if bad {
                    "wrong".to_string()
                } else {
                    format!("{p}")
                };
                out.push(QualitySample {
                    provider: provider.into(),
                    prompt_id: format!("arith-{p:02}"),
                    sample: s,
                    outcome: Outcome::Ok,
                    correct: Some(!bad),
                    answer_hash: answer_hash(&answer),
                    answer,
                    output_tokens: if bad { wrong_tokens } else { tokens + p % 3 },
                    answered_model: Some("m".into()),
                });
            }
        }
        out
    }

    fn row<'a>(q: &'a QualityParity, p: &str) -> &'a ProviderQuality {
        q.providers.iter().find(|r| r.provider == p).unwrap()
    }

    #[test]
    fn an_honest_set_of_four_providers_flags_nothing() {
        let mut s = Vec::new();
        for p in ["a", "b", "c", "d"] {
            s.extend(answers(p, 0, 100, 100));
        }
        // One provider answers shorter: its ratio is shown, it is not flagged.
        s.extend(answers("short", 0, 50, 50));
        let q = parity(&s);
        assert_eq!(q.providers.len(), 5);
        for r in &q.providers {
            assert_eq!(r.flag, None, "{r:?}");
            assert_eq!((r.samples, r.graded, r.correct), (96, 96, 96));
            assert_eq!(r.accuracy, Some(1.0));
            assert_eq!(r.agreement, Some(1.0));
            // 32 prompts counted once: 32 of 32 → [89.3 %, 100 %].
            let (lo, hi) = r.accuracy_ci.unwrap();
            assert!((lo - 0.8928).abs() < 1e-4 && hi == 1.0, "{lo} {hi}");
        }
        assert_eq!(row(&q, "a").median_output_tokens, Some(101.0));
        assert_eq!(row(&q, "a").length_ratio, Some(1.0));
        let short = row(&q, "short");
        assert_eq!(short.median_output_tokens, Some(51.0));
        assert!((short.length_ratio.unwrap() - 51.0 / 101.0).abs() < 1e-9);
        // Same answers, same fingerprint.
        assert_eq!(row(&q, "a").fingerprint, row(&q, "short").fingerprint);
    }

    #[test]
    fn a_provider_wrong_on_40_percent_is_flagged_with_the_evidence() {
        let mut s = Vec::new();
        for p in ["a", "b", "c"] {
            s.extend(answers(p, 0, 100, 100));
        }
        // 13 of 32 prompts (40.6 %) wrong, and those answers short.
        s.extend(answers("quant", 13, 100, 20));
        let q = parity(&s);
        let r = row(&q, "quant");
        assert_eq!((r.graded, r.correct), (96, 57));
        assert!((r.agreement.unwrap() - 57.0 / 96.0).abs() < 1e-9);
        let flag = r.flag.as_deref().expect("flagged");
        assert_eq!(
            flag,
            "possible quantization or different model: accuracy 59 % [42–74] (57/96) vs \
             others 100 % [96–100] (288/288); agrees with the others' majority on 59 %; \
             answers 0.99× as long"
        );
        for p in ["a", "b", "c"] {
            assert_eq!(row(&q, p).flag, None);
            // The majority of the others (two honest, one wrong) is the right answer.
            assert_eq!(row(&q, p).agreement, Some(1.0));
        }
        assert_ne!(row(&q, "a").fingerprint, r.fingerprint);
    }

    #[test]
    fn a_provider_wrong_on_5_percent_is_not_flagged() {
        let mut s = Vec::new();
        for p in ["a", "b", "c"] {
            s.extend(answers(p, 0, 100, 100));
        }
        // 2 of 32 prompts (6 %) wrong: 90 of 96 samples right, within the noise of 32 prompts.
        s.extend(answers("slightly", 2, 100, 100));
        let q = parity(&s);
        let r = row(&q, "slightly");
        assert_eq!((r.graded, r.correct), (96, 90));
        assert_eq!(r.flag, None, "{r:?}");
        // 4 of 32 wrong (12.5 %) is.
        let mut s: Vec<QualitySample> =
            s.into_iter().filter(|x| x.provider != "slightly").collect();
        s.extend(answers("worse", 4, 100, 100));
        assert!(row(&parity(&s), "worse").flag.is_some());
    }

    #[test]
    fn one_provider_alone_and_ties_give_no_flag_and_no_majority() {
        let q = parity(&answers("alone", 20, 100, 10));
        let r = row(&q, "alone");
        assert_eq!(
            (r.flag.clone(), r.agreement, r.length_ratio),
            (None, None, None)
        );
        assert_eq!(r.correct, 36);
        // Two others disagreeing on every prompt: no majority anywhere.
        let mut s = answers("x", 0, 100, 100);
        s.extend(answers("y", PROMPTS, 100, 100));
        s.extend(answers("z", 0, 100, 100));
        assert_eq!(row(&parity(&s), "z").agreement, None);
        // Failed samples are not graded.
        let mut s = answers("a", 0, 100, 100);
        s[0].outcome = Outcome::TimeoutTtft;
        s[0].correct = None;
        let t = Tally::of(&s);
        assert_eq!((t.graded, t.correct, t.prompts), (95, 95, 32));
    }
}
