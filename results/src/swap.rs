//! Silent-swap detection (docs/metrics.md, "`latmesh check`"): what `latmesh check`'s rules
//! `model_changed`, `fingerprint_changed` and `answers_changed` compare between a current
//! campaign and its baseline. Pure: the check command gathers the names and samples (from
//! summary files or ClickHouse) and turns these verdicts into fired rules.
//!
//! * **Names** ([`compare_names`]): the `model`s (or `system_fingerprint`s) one region ×
//!   provider answered with. It *changed* when the current side answered with a name the
//!   baseline never answered with there; names are compared exactly (`gpt-4o-2024-08-06`
//!   answered in both runs is no change, `gpt-4o-2024-11-20` after it is). A baseline that
//!   answered with no name gives nothing to compare with.
//! * **Answers** ([`compare_answers`]): the quality samples of two `latmesh compat` runs. Per
//!   prompt answered in both, the modal answer hash ([`latmesh_core::quality::modal_answers`])
//!   changed or not; the rule fires when the share of changed prompts exceeds its threshold,
//!   or when the accuracy fell significantly (the intervals of
//!   [`crate::parity::Tally::interval`], each prompt counted once, separated).

use std::collections::{BTreeMap, BTreeSet};

use latmesh_core::quality::{QualitySample, modal_answers};
use serde::{Deserialize, Serialize};

use crate::parity::{Tally, significantly_below};

/// How often, and first when, a name was answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Attempts answered with it.
    pub count: u64,
    /// The first time it was seen (UTC µs), when the source keeps per-row time (ClickHouse).
    pub first_unix_us: Option<i64>,
}

impl Seen {
    /// Adds `other` (counts summed, the earlier first time).
    pub fn merge(&mut self, other: Seen) {
        self.count += other.count;
        self.first_unix_us = match (self.first_unix_us, other.first_unix_us) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Names answered (models or fingerprints) → how often and since when.
pub type Names = BTreeMap<String, Seen>;

/// What [`compare_names`] found on one region × provider.
#[derive(Clone, Debug, PartialEq)]
pub enum NameVerdict {
    /// The baseline answered with no name: nothing to compare with.
    NoBaseline,
    /// Every current name was answered in the baseline too.
    Unchanged,
    /// Names the baseline never answered with.
    Changed {
        /// The new names, with how often and since when (earliest first).
        new: Vec<(String, Seen)>,
        /// The baseline's names.
        baseline: Vec<String>,
    },
}

/// Compares the names one region × provider answered with (see the module docs).
pub fn compare_names(current: &Names, baseline: &Names) -> NameVerdict {
    if baseline.is_empty() {
        return NameVerdict::NoBaseline;
    }
    let mut new: Vec<(String, Seen)> = current
        .iter()
        .filter(|(n, _)| !baseline.contains_key(*n))
        .map(|(n, s)| (n.clone(), *s))
        .collect();
    if new.is_empty() {
        return NameVerdict::Unchanged;
    }
    new.sort_by_key(|(n, s)| (s.first_unix_us.unwrap_or(i64::MAX), n.clone()));
    NameVerdict::Changed {
        new,
        baseline: baseline.keys().cloned().collect(),
    }
}

/// What [`compare_answers`] found for one provider.
#[derive(Clone, Debug, PartialEq)]
pub struct AnswersComparison {
    /// Prompts with a modal answer on both sides.
    pub compared: u64,
    /// Of those, prompts whose modal answer hash changed.
    pub changed: u64,
    /// 95 % Wilson interval of `changed / compared` (fractions).
    pub changed_ci: Option<(f64, f64)>,
    /// The current run's accuracy.
    pub current: Tally,
    /// The baseline run's accuracy.
    pub baseline: Tally,
    /// The current accuracy is significantly below the baseline's.
    pub accuracy_fell: bool,
}

impl AnswersComparison {
    /// `changed / compared`, %.
    pub fn changed_pct(&self) -> f64 {
        if self.compared == 0 {
            0.0
        } else {
            self.changed as f64 / self.compared as f64 * 100.0
        }
    }

    /// Whether the rule fires at `threshold_pct`: more changed prompts than the threshold,
    /// or the accuracy fell significantly.
    pub fn fires(&self, threshold_pct: f64) -> bool {
        self.changed_pct() > threshold_pct || self.accuracy_fell
    }

    /// The comparison in words.
    pub fn message(&self, threshold_pct: f64) -> String {
        let acc = |t: &Tally| match (t.accuracy(), t.interval()) {
            (Some(a), Some(c)) => format!(
                "{:.0}% [{:.0}–{:.0}] ({}/{})",
                a * 100.0,
                c.lower * 100.0,
                c.upper * 100.0,
                t.correct,
                t.graded
            ),
            _ => "-".into(),
        };
        format!(
            "modal answer changed on {} of {} prompts ({:.0}%{}; threshold {threshold_pct}%); accuracy {} vs baseline {}{}",
            self.changed,
            self.compared,
            self.changed_pct(),
            self.changed_ci.map_or(String::new(), |(lo, hi)| format!(
                " [{:.0}–{:.0}]",
                lo * 100.0,
                hi * 100.0
            )),
            acc(&self.current),
            acc(&self.baseline),
            if self.accuracy_fell {
                " (significantly lower)"
            } else {
                ""
            }
        )
    }
}

/// Compares one provider's quality samples of two runs (see the module docs); `None` when no
/// prompt has a modal answer on both sides.
pub fn compare_answers(
    current: &[&QualitySample],
    baseline: &[&QualitySample],
) -> Option<AnswersComparison> {
    let cur = modal_answers(current.iter().copied());
    let base = modal_answers(baseline.iter().copied());
    let both: BTreeSet<&String> = cur.keys().filter(|k| base.contains_key(*k)).collect();
    if both.is_empty() {
        return None;
    }
    let changed = both.iter().filter(|k| cur[**k] != base[**k]).count() as u64;
    let compared = both.len() as u64;
    let current = Tally::of(current.iter().copied());
    let baseline = Tally::of(baseline.iter().copied());
    Some(AnswersComparison {
        compared,
        changed,
        changed_ci: latmesh_core::proportion::wilson(changed, compared).map(|c| (c.lower, c.upper)),
        accuracy_fell: significantly_below(&current, &baseline),
        current,
        baseline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::quality::answer_hash;
    use latmesh_core::record::Outcome;

    fn seen(count: u64, first: i64) -> Seen {
        Seen {
            count,
            first_unix_us: Some(first),
        }
    }

    #[test]
    fn new_names_are_found_and_the_same_dated_name_is_no_change() {
        let base = Names::from([("gpt-4o-2024-08-06".to_string(), seen(10, 5))]);
        assert_eq!(compare_names(&base, &base), NameVerdict::Unchanged);
        assert_eq!(compare_names(&base, &Names::new()), NameVerdict::NoBaseline);
        let mut cur = base.clone();
        cur.insert("gpt-4o-2024-11-20".into(), seen(3, 90));
        cur.insert("gpt-4o-mini".into(), seen(1, 40));
        let NameVerdict::Changed { new, baseline } = compare_names(&cur, &base) else {
            panic!("changed");
        };
        // Earliest first.
        assert_eq!(
            new,
            vec![
                ("gpt-4o-mini".to_string(), seen(1, 40)),
                ("gpt-4o-2024-11-20".to_string(), seen(3, 90)),
            ]
        );
        assert_eq!(baseline, vec!["gpt-4o-2024-08-06".to_string()]);
        let mut s = seen(1, 9);
        s.merge(seen(2, 4));
        s.merge(Seen {
            count: 1,
            first_unix_us: None,
        });
        assert_eq!(s, seen(4, 4));
    }

    /// 20 prompts × 2 samples; `answers(p)` gives prompt p's answer and whether it is right.
    fn run(answers: impl Fn(u32) -> (String, bool)) -> Vec<QualitySample> {
        let mut out = Vec::new();
        for p in 0..20 {
            for sample in 0..2 {
                let (answer, right) = answers(p);
                out.push(QualitySample {
                    provider: "a".into(),
                    prompt_id: format!("q{p:02}"),
                    sample,
                    outcome: Outcome::Ok,
                    correct: Some(right),
                    answer_hash: answer_hash(&answer),
                    answer,
                    output_tokens: 5,
                    answered_model: None,
                });
            }
        }
        out
    }

    fn refs(v: &[QualitySample]) -> Vec<&QualitySample> {
        v.iter().collect()
    }

    #[test]
    fn answers_change_by_share_or_by_a_significant_accuracy_drop() {
        let base = run(|p| (p.to_string(), true));
        let same = compare_answers(&refs(&base), &refs(&base)).unwrap();
        assert_eq!((same.compared, same.changed), (20, 0));
        assert!(!same.fires(25.0));
        // 4 of 20 answers worded differently but right: 20 % ≤ 25 %, no accuracy drop.
        let reworded = run(|p| {
            (
                if p < 4 {
                    format!("{p}.0")
                } else {
                    p.to_string()
                },
                true,
            )
        });
        let c = compare_answers(&refs(&reworded), &refs(&base)).unwrap();
        assert_eq!(c.changed, 4);
        assert!(!c.fires(25.0) && c.fires(15.0), "{}", c.message(25.0));
        // 10 of 20 wrong: 50 % changed, and accuracy 50 % [30–70] below 100 % [84–100].
        let swapped = run(|p| {
            if p < 10 {
                ("x".into(), false)
            } else {
                (p.to_string(), true)
            }
        });
        let c = compare_answers(&refs(&swapped), &refs(&base)).unwrap();
        assert!(c.accuracy_fell && c.fires(60.0));
        assert_eq!(
            c.message(25.0),
            "modal answer changed on 10 of 20 prompts (50% [30–70]; threshold 25%); accuracy \
             50% [30–70] (20/40) vs baseline 100% [84–100] (40/40) (significantly lower)"
        );
        assert_eq!(compare_answers(&refs(&base), &[]), None);
    }
}
