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

use serde::{Deserialize, Serialize};

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
        }
    }
}

impl SloSearch {
    /// The highest rate met below the lowest missed one, and the lowest missed one, of
    /// `history` (judged steps only).
    fn bracket(history: &[(f64, StepVerdict)]) -> (Option<f64>, Option<f64>) {
        let missed = history
            .iter()
            .filter(|(_, v)| *v == StepVerdict::Missed)
            .map(|(r, _)| *r)
            .reduce(f64::min);
        let met = history
            .iter()
            .filter(|(r, v)| *v == StepVerdict::Met && missed.is_none_or(|m| *r < m))
            .map(|(r, _)| *r)
            .reduce(f64::max);
        (met, missed)
    }

    /// The outcome of the steps run so far (`history`: each step's rate and verdict, in
    /// order).
    pub fn outcome(&self, history: &[(f64, StepVerdict)]) -> SearchOutcome {
        let (met_rps, missed_rps) = Self::bracket(history);
        let end = self.end(history, met_rps, missed_rps);
        SearchOutcome {
            met_rps,
            missed_rps,
            end,
        }
    }

    fn end(
        &self,
        history: &[(f64, StepVerdict)],
        met: Option<f64>,
        missed: Option<f64>,
    ) -> SearchEnd {
        if history.last().is_some_and(|(_, v)| {
            matches!(v, StepVerdict::Insufficient | StepVerdict::AgentLimited)
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
    /// `core/src/load/search.rs`). `next_rps(&[])` is `min_rps`.
    pub fn next_rps(&self, history: &[(f64, StepVerdict)]) -> Option<f64> {
        let (met, missed) = Self::bracket(history);
        if self.end(history, met, missed) != SearchEnd::Running {
            return None;
        }
        Some(match (met, missed) {
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
        while let Some(r) = s.next_rps(&h) {
            h.push((r, if r <= truth { Met } else { Missed }));
        }
        let o = s.outcome(&h);
        (h, o)
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
        let h = [(1.0, Met), (2.0, Insufficient)];
        assert_eq!(s.next_rps(&h), None);
        assert_eq!(s.outcome(&h).end, SearchEnd::Unjudged);
        assert_eq!(s.outcome(&h).met_rps, Some(1.0));
    }

    #[test]
    fn a_noisy_met_above_a_miss_does_not_widen_the_bracket() {
        let s = search(12);
        let h = [
            (1.0, Met),
            (2.0, Met),
            (4.0, Missed),
            (3.0, Missed),
            (8.0, Met),
        ];
        let o = s.outcome(&h);
        assert_eq!((o.met_rps, o.missed_rps), (Some(2.0), Some(3.0)));
        assert_eq!(s.next_rps(&h), Some(2.5));
    }
}
