//! The SLO search of a `rate` scenario (`[scenarios.rate.search]`): per provider, the highest
//! arrival rate whose goodput stays at or above the SLO's `goodput_pct`, found in a bounded
//! number of open-loop steps (AIPerf's adaptive search, `vllm bench sweep serve_sla`).
//!
//! Each step lasts the scenario's `duration_s`; every provider steps at the same moments,
//! each at its own rate. Step 0 is at `min_rps`. After a step that met the SLO the rate
//! doubles (never past `max_rps`); after the first step that missed, the next rate is the
//! middle of the bracket (highest rate met, lowest rate missed). The search stops, and the
//! provider idles for the steps left, when the steps are used up, the bracket is narrower than
//! `resolution_pct` of its lower end, `max_rps` was met, `min_rps` was missed, or a step could
//! not be judged (fewer than `min_requests` judged requests, or arrivals dropped by the agent:
//! a client limit, never the provider's). [`SloSearch::next_rps`] is the rule, pure: the
//! agent applies it to its own step verdicts to pick rates; the reported answer is computed
//! again from every region's merged records ([`SloSearch::outcome`]).
//!
//! A step whose goodput contradicts an earlier step's (significantly higher goodput at the
//! higher rate) is re-run once, and the search ends `unstable` when the re-run contradicts
//! too (`core/src/load/contradiction.rs`, applied by [`SloSearch::assess`]).

use serde::{Deserialize, Serialize};

use super::contradiction::{Contradiction, SearchInstability, SearchStep, contradicted};

/// Default [`SloSearch::min_requests`]: 20 judged requests per step.
pub const DEFAULT_SEARCH_MIN_REQUESTS: u32 = 20;

/// Default [`SloSearch::resolution_pct`]: stop once the bracket is within 10 % of its low end.
pub const DEFAULT_SEARCH_RESOLUTION_PCT: f64 = 10.0;

/// Most steps a search may have.
pub const MAX_SEARCH_STEPS: u32 = 32;

/// How one provider's SLO search runs (the rule: the documentation of
/// `core/src/load/search.rs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SloSearch {
    /// The first step's rate, requests/s per provider and agent.
    pub min_rps: f64,
    /// The highest rate tried (at most the provider's politeness caps allow), requests/s.
    pub max_rps: f64,
    /// Most steps, 2..=[`MAX_SEARCH_STEPS`].
    pub steps: u32,
    /// Fewest judged requests a step needs for a verdict.
    pub min_requests: u32,
    /// Stop refining once `(missed − met) / met` is at most this, %.
    pub resolution_pct: f64,
}

/// What one step of a search showed for one provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepVerdict {
    /// Goodput at or above the threshold, and every percentile bound held.
    Met,
    /// Goodput below the threshold, or a percentile bound exceeded.
    Missed,
    /// Fewer judged requests than `min_requests`: no verdict; the search stops.
    Insufficient,
    /// The agent could not send the step's arrivals (some were `dropped` at the provider's
    /// in-flight cap): a client limit; the search stops.
    AgentLimited,
}

/// Why a search ended, and what it found.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchOutcome {
    /// The highest rate that met the SLO (below the lowest missed one); `None` when none did.
    pub met_rps: Option<f64>,
    /// The lowest rate that missed it; `None` when none did (then `met_rps` is a lower bound).
    pub missed_rps: Option<f64>,
    /// Why it ended.
    pub end: SearchEnd,
}

/// Why a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchEnd {
    /// The bracket is within `resolution_pct`.
    Resolved,
    /// Every step was used.
    StepsUsed,
    /// `max_rps` met the SLO: the answer is at least `max_rps`.
    MaxMet,
    /// `min_rps` missed the SLO: the answer is below `min_rps`.
    MinMissed,
    /// A step could not be judged (too few requests, or the agent dropped arrivals).
    Unjudged,
    /// Still running (fewer steps than planned, and none of the above).
    Running,
    /// A step's goodput contradicted an earlier step's at another rate, and its re-run did
    /// too (or it could not be re-run): the provider changed during the search
    /// (`core/src/load/contradiction.rs`); the bracket is no answer.
    Unstable,
}

impl SearchEnd {
    /// A short phrase for tables.
    pub fn describe(self) -> &'static str {
        match self {
            SearchEnd::Resolved => "resolved",
            SearchEnd::StepsUsed => "steps used up",
            SearchEnd::MaxMet => "met at max_rps",
            SearchEnd::MinMissed => "missed at min_rps",
            SearchEnd::Unjudged => "a step could not be judged",
            SearchEnd::Running => "running",
            SearchEnd::Unstable => "unstable: the provider changed during the search",
        }
    }
}

/// What the steps of a search so far show ([`SloSearch::assess`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchAssessment {
    /// The answer so far.
    pub outcome: SearchOutcome,
    /// Why the search is unstable (`outcome.end` is then [`SearchEnd::Unstable`]).
    pub instability: Option<SearchInstability>,
    /// The last step contradicts an earlier one and has not been re-run yet: the rate its
    /// re-run runs at.
    pub rerun_rps: Option<f64>,
}

impl SloSearch {
    /// The highest rate met below the lowest missed one, and the lowest missed one, of
    /// `history` (judged steps only).
    fn bracket(history: &[SearchStep]) -> (Option<f64>, Option<f64>) {
        let missed = history
            .iter()
            .filter(|s| s.verdict == StepVerdict::Missed)
            .map(|s| s.rps)
            .reduce(f64::min);
        let met = history
            .iter()
            .filter(|s| s.verdict == StepVerdict::Met && missed.is_none_or(|m| s.rps < m))
            .map(|s| s.rps)
            .reduce(f64::max);
        (met, missed)
    }

    /// The steps run so far (`steps`, in order), judged by the search's rules: the bracket of
    /// the steps kept (a re-run replaces the step it re-runs) and the sanity rule of
    /// `core/src/load/contradiction.rs` (a step that contradicts an earlier one is re-run
    /// once; still contradicting, the search is unstable). A step is the re-run of the step
    /// before it when that one awaited a re-run and it ran at the same rate.
    pub fn assess(&self, steps: &[SearchStep]) -> SearchAssessment {
        let mut kept: Vec<(usize, SearchStep)> = Vec::new();
        let mut pending: Option<(usize, Contradiction)> = None;
        let mut instability = None;
        for (i, s) in steps.iter().enumerate() {
            if let Some((j, first)) = pending.take() {
                if steps[j].rps.to_bits() != s.rps.to_bits() {
                    // Not re-run (a merged row whose agents went on): unresolved.
                    instability = Some(SearchInstability { first, rerun: None });
                    break;
                }
                kept.retain(|(k, _)| *k != j);
                if let Some(again) = contradicted(&kept, i, s) {
                    kept.push((i, *s));
                    instability = Some(SearchInstability {
                        first,
                        rerun: Some(again),
                    });
                    break;
                }
                kept.push((i, *s));
                continue;
            }
            if let Some(c) = contradicted(&kept, i, s) {
                pending = Some((i, c));
            }
            kept.push((i, *s));
        }
        let kept: Vec<SearchStep> = kept.into_iter().map(|(_, s)| s).collect();
        let (met_rps, missed_rps) = Self::bracket(&kept);
        let mut end = self.end(steps, met_rps, missed_rps);
        let mut rerun_rps = None;
        if let Some((j, first)) = pending {
            if steps.len() as u32 >= self.steps || end == SearchEnd::Unjudged {
                instability = Some(SearchInstability { first, rerun: None });
            } else {
                rerun_rps = Some(steps[j].rps);
                end = SearchEnd::Running;
            }
        }
        if instability.is_some() {
            end = SearchEnd::Unstable;
        }
        SearchAssessment {
            outcome: SearchOutcome {
                met_rps,
                missed_rps,
                end,
            },
            instability,
            rerun_rps,
        }
    }

    /// The outcome of the steps run so far (`history`: each step, in order):
    /// [`SloSearch::assess`]'s.
    pub fn outcome(&self, history: &[SearchStep]) -> SearchOutcome {
        self.assess(history).outcome
    }

    fn end(&self, history: &[SearchStep], met: Option<f64>, missed: Option<f64>) -> SearchEnd {
        if history.last().is_some_and(|s| {
            matches!(
                s.verdict,
                StepVerdict::Insufficient | StepVerdict::AgentLimited
            )
        }) {
            return SearchEnd::Unjudged;
        }
        match (met, missed) {
            (None, Some(_)) => return SearchEnd::MinMissed,
            (Some(lo), None) if lo >= self.max_rps => return SearchEnd::MaxMet,
            (Some(lo), Some(hi)) if (hi - lo) / lo * 100.0 <= self.resolution_pct => {
                return SearchEnd::Resolved;
            }
            _ => {}
        }
        if history.len() as u32 >= self.steps {
            SearchEnd::StepsUsed
        } else {
            SearchEnd::Running
        }
    }

    /// The rate of the next step after `history`, or `None` when the search has ended (see
    /// `core/src/load/search.rs`): the re-run of a contradicting last step, else doubling
    /// then bisection over the steps kept. `next_rps(&[])` is `min_rps`.
    pub fn next_rps(&self, history: &[SearchStep]) -> Option<f64> {
        let a = self.assess(history);
        if a.outcome.end != SearchEnd::Running {
            return None;
        }
        if let Some(r) = a.rerun_rps {
            return Some(r);
        }
        Some(match (a.outcome.met_rps, a.outcome.missed_rps) {
            (None, None) => self.min_rps,
            (Some(lo), None) => (lo * 2.0).min(self.max_rps),
            (Some(lo), Some(hi)) => (lo + hi) / 2.0,
            (None, Some(_)) => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::StepVerdict::{Insufficient, Met, Missed};
    use super::*;

    fn search(steps: u32) -> SloSearch {
        SloSearch {
            min_rps: 1.0,
            max_rps: 64.0,
            steps,
            min_requests: DEFAULT_SEARCH_MIN_REQUESTS,
            resolution_pct: DEFAULT_SEARCH_RESOLUTION_PCT,
        }
    }

    /// Runs the search against a provider that meets the SLO up to `truth` requests/s.
    fn run(s: &SloSearch, truth: f64) -> (Vec<(f64, StepVerdict)>, SearchOutcome) {
        let mut h = Vec::new();
        while let Some(r) = s.next_rps(&steps(&h)) {
            h.push((r, if r <= truth { Met } else { Missed }));
        }
        let o = s.outcome(&steps(&h));
        (h, o)
    }

    /// Steps known by rate and verdict only.
    fn steps(h: &[(f64, StepVerdict)]) -> Vec<SearchStep> {
        h.iter()
            .map(|&(r, v)| SearchStep::verdict_only(r, v))
            .collect()
    }

    /// A step at `rps` where `met` of 100 judged requests met the SLO (90 % goodput to meet).
    fn step(rps: f64, met: u64) -> SearchStep {
        SearchStep {
            rps,
            verdict: if met >= 90 { Met } else { Missed },
            judged: 100,
            met,
        }
    }

    #[test]
    fn doubling_then_bisection_brackets_the_true_rate() {
        let (h, o) = run(&search(12), 11.0);
        let rates: Vec<f64> = h.iter().map(|(r, _)| *r).collect();
        assert_eq!(rates[..6], [1.0, 2.0, 4.0, 8.0, 16.0, 12.0]);
        let (lo, hi) = (o.met_rps.unwrap(), o.missed_rps.unwrap());
        assert!(lo <= 11.0 && 11.0 < hi && (hi - lo) / lo <= 0.1, "{o:?}");
        assert_eq!(o.end, SearchEnd::Resolved);
        assert!(h.len() <= 12);
    }

    #[test]
    fn the_search_ends_at_its_bounds_and_on_unjudged_steps() {
        assert_eq!(run(&search(12), 100.0).1.end, SearchEnd::MaxMet);
        assert_eq!(run(&search(12), 100.0).1.met_rps, Some(64.0));
        let (h, o) = run(&search(12), 0.5);
        assert_eq!((h.len(), o.end, o.met_rps), (1, SearchEnd::MinMissed, None));
        let (h, o) = run(&search(3), 11.0);
        assert_eq!(
            (h.len(), o.end, o.met_rps),
            (3, SearchEnd::StepsUsed, Some(4.0))
        );
        let s = search(12);
        let h = steps(&[(1.0, Met), (2.0, Insufficient)]);
        assert_eq!(s.next_rps(&h), None);
        assert_eq!(s.outcome(&h).end, SearchEnd::Unjudged);
        assert_eq!(s.outcome(&h).met_rps, Some(1.0));
    }

    #[test]
    fn a_noisy_met_above_a_miss_does_not_widen_the_bracket() {
        let s = search(12);
        let h = steps(&[
            (1.0, Met),
            (2.0, Met),
            (4.0, Missed),
            (3.0, Missed),
            (8.0, Met),
        ]);
        let o = s.outcome(&h);
        assert_eq!((o.met_rps, o.missed_rps), (Some(2.0), Some(3.0)));
        assert_eq!(s.next_rps(&h), Some(2.5));
    }

    /// The llama-server search of the issue: goodput fell as the rate fell (84 % at 8 rps,
    /// then 65 % at 4.5). 65 of 100 against 84 of 100: Wilson [55.3, 73.6] vs [75.6, 89.9],
    /// separated: the 4.5 step is re-run next, though the bracket (4, 4.5) is resolved.
    #[test]
    fn a_contradicting_step_is_re_run_and_still_contradicting_is_unstable() {
        let s = SloSearch {
            min_rps: 2.0,
            max_rps: 16.0,
            steps: 8,
            ..search(8)
        };
        let mut h = vec![step(2.0, 100), step(4.0, 100), step(8.0, 84), step(6.0, 80)];
        assert_eq!(s.assess(&h).rerun_rps, None, "80 vs 84: within noise");
        assert_eq!(s.next_rps(&h), Some(5.0));
        h.push(step(5.0, 76));
        assert_eq!(s.next_rps(&h), Some(4.5));
        h.push(step(4.5, 65));
        let a = s.assess(&h);
        assert_eq!(a.rerun_rps, Some(4.5));
        assert_eq!(a.outcome.end, SearchEnd::Running);
        assert_eq!(s.next_rps(&h), Some(4.5), "the re-run");
        // The re-run still contradicts: unstable, with both as evidence; no more steps.
        h.push(step(4.5, 60));
        let a = s.assess(&h);
        assert_eq!(a.outcome.end, SearchEnd::Unstable);
        assert_eq!(s.next_rps(&h), None);
        let i = a.instability.unwrap();
        assert_eq!(
            (
                i.first.lower_rate.step,
                i.first.lower_rate.rps,
                i.first.lower_rate.met
            ),
            (5, 4.5, 65)
        );
        assert_eq!(
            (i.first.higher_rate.step, i.first.higher_rate.rps),
            (2, 8.0)
        );
        let again = i.rerun.unwrap();
        assert_eq!((again.lower_rate.step, again.lower_rate.met), (6, 60));
        assert_eq!(again.higher_rate.step, 2);
        assert!((again.lower_rate.ci_pct.1 - 69.0).abs() < 0.5, "{again:?}");
        assert!(
            i.describe()
                .contains("step 5 at 4.50 rps: 65.0 % [55.3, 73.6] of 100"),
            "{}",
            i.describe()
        );
    }

    /// A re-run that agrees with the earlier steps replaces the step it re-runs: the search
    /// goes on from it, and the contradicting step no longer counts.
    #[test]
    fn a_re_run_that_resolves_the_contradiction_keeps_the_search_going() {
        let s = search(8);
        let mut h = vec![step(1.0, 100), step(2.0, 100), step(4.0, 80), step(3.0, 50)];
        assert_eq!(s.next_rps(&h), Some(3.0));
        h.push(step(3.0, 95));
        let a = s.assess(&h);
        assert_eq!(a.instability, None);
        assert_eq!(
            (a.outcome.met_rps, a.outcome.missed_rps, a.outcome.end),
            (Some(3.0), Some(4.0), SearchEnd::Running)
        );
        assert_eq!(s.next_rps(&h), Some(3.5));
        // A rise with the rate counts too: 2 rps at 50 % below 1 rps at 100 %? No: lower
        // goodput at the higher rate is what a queue does.
        let fine = vec![step(1.0, 100), step(2.0, 50)];
        assert_eq!(s.assess(&fine).rerun_rps, None);
        // Higher goodput at the higher rate (a cold start), significantly: re-run.
        let cold = vec![step(1.0, 50), step(2.0, 100)];
        assert_eq!(s.assess(&cold).rerun_rps, Some(2.0));
    }

    /// A contradiction with no step left to re-run it leaves the answer unstable; one in a
    /// merged row whose next step ran at another rate too.
    #[test]
    fn a_contradiction_without_its_re_run_is_unstable() {
        let s = search(4);
        let h = vec![step(1.0, 100), step(2.0, 100), step(4.0, 80), step(3.0, 50)];
        let a = s.assess(&h);
        assert_eq!(a.outcome.end, SearchEnd::Unstable);
        assert_eq!(a.instability.unwrap().rerun, None);
        assert_eq!(s.next_rps(&h), None);
        let s = search(8);
        let h = vec![
            step(1.0, 100),
            step(2.0, 100),
            step(4.0, 80),
            step(3.0, 50),
            step(3.5, 60),
        ];
        assert_eq!(s.outcome(&h).end, SearchEnd::Unstable);
        // Steps without goodput counts never contradict.
        let h = steps(&[(1.0, Missed), (2.0, Met)]);
        assert_eq!(s.outcome(&h).end, SearchEnd::MinMissed);
    }
}
