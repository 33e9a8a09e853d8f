//! The SLO search's sanity rule: a provider whose goodput does not fall as the rate rises
//! has changed during the search (drift: a queue filled by someone else, a throttle, a
//! restart), and the bracket the search found is no answer about it.
//!
//! Step B **contradicts** an earlier judged step A (both `met` or `missed`) when they ran at
//! different rates and the step at the higher rate had significantly higher goodput: the
//! Wilson 95 % interval of its `met / judged` lies entirely above the other's
//! ([`crate::proportion::significantly_above`], the rule `check`, knees and the selection
//! ranking use). The search re-runs a contradicting step once, at the same rate, as its next
//! step, and the re-run replaces it; when the re-run still contradicts an earlier step, the
//! search ends [`SearchEnd::Unstable`](super::SearchEnd::Unstable) with both contradictions
//! as evidence ([`SearchInstability`]); when it does not, the search goes on from it. A
//! contradiction left without a re-run (no step left, or a merged row whose next step ran at
//! another rate) leaves the answer unstable too. [`SloSearch::assess`](super::SloSearch::assess)
//! applies the rule, the same for the agent's own steps and for merged records.

use serde::{Deserialize, Serialize};

use super::search::StepVerdict;
use crate::proportion::{significantly_above, wilson};

/// One step of an SLO search as the search rule sees it: its rate, verdict and goodput
/// counts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchStep {
    /// The step's rate, requests/s per agent.
    pub rps: f64,
    /// Its verdict.
    pub verdict: StepVerdict,
    /// Requests judged against the SLO (0: unknown, then the step contradicts nothing).
    pub judged: u64,
    /// Of those, the ones that met it.
    pub met: u64,
}

impl SearchStep {
    /// A step known only by its rate and verdict (no goodput counts: it never takes part in
    /// a contradiction).
    pub fn verdict_only(rps: f64, verdict: StepVerdict) -> SearchStep {
        SearchStep {
            rps,
            verdict,
            judged: 0,
            met: 0,
        }
    }

    fn judged_verdict(&self) -> bool {
        matches!(self.verdict, StepVerdict::Met | StepVerdict::Missed)
    }
}

/// One step's goodput, as evidence of a contradiction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepGoodput {
    /// The step's index in the search, 0-based.
    pub step: u32,
    /// Its rate, requests/s per agent.
    pub rps: f64,
    /// Requests judged.
    pub judged: u64,
    /// Requests that met the SLO.
    pub met: u64,
    /// `met / judged`, %.
    pub pct: f64,
    /// Wilson 95 % interval of `pct`, % (low, high).
    pub ci_pct: (f64, f64),
}

impl StepGoodput {
    fn of(step: usize, s: &SearchStep) -> StepGoodput {
        let ci = wilson(s.met, s.judged);
        StepGoodput {
            step: step as u32,
            rps: s.rps,
            judged: s.judged,
            met: s.met,
            pct: ci.map_or(0.0, |c| c.point() * 100.0),
            ci_pct: ci.map_or((0.0, 100.0), |c| (c.lower * 100.0, c.upper * 100.0)),
        }
    }

    /// `step 3 at 4.50 rps: 65.3 % [55.6, 74.0] of 98`.
    pub fn describe(&self) -> String {
        format!(
            "step {} at {:.2} rps: {:.1} % [{:.1}, {:.1}] of {}",
            self.step, self.rps, self.pct, self.ci_pct.0, self.ci_pct.1, self.judged
        )
    }
}

/// Two steps whose goodput contradicts their rates.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contradiction {
    /// The step at the lower rate, with the significantly lower goodput.
    pub lower_rate: StepGoodput,
    /// The step at the higher rate, with the significantly higher goodput.
    pub higher_rate: StepGoodput,
}

impl Contradiction {
    /// `goodput at step 3 at 4.50 rps: … is significantly below step 2 at 8.00 rps: …`.
    pub fn describe(&self) -> String {
        format!(
            "{} is significantly below {}",
            self.lower_rate.describe(),
            self.higher_rate.describe()
        )
    }
}

/// Why a search is unstable: the contradiction, and the one its re-run still showed (`None`
/// when it could not be re-run).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchInstability {
    /// The first contradiction found.
    pub first: Contradiction,
    /// What the re-run of the contradicting step still contradicted; `None`: not re-run.
    pub rerun: Option<Contradiction>,
}

impl SearchInstability {
    /// One sentence with the evidence.
    pub fn describe(&self) -> String {
        match &self.rerun {
            Some(r) => format!(
                "goodput does not fall as the rate rises: {}; re-run, {}",
                self.first.describe(),
                r.describe()
            ),
            None => format!(
                "goodput does not fall as the rate rises: {}; no step was left to re-run it",
                self.first.describe()
            ),
        }
    }
}

/// The first contradiction between `step` (index `i`) and the steps in `kept` (index, step),
/// earliest kept step first.
pub(super) fn contradicted(
    kept: &[(usize, SearchStep)],
    i: usize,
    step: &SearchStep,
) -> Option<Contradiction> {
    if !step.judged_verdict() || step.judged == 0 {
        return None;
    }
    kept.iter().find_map(|(j, e)| {
        if !e.judged_verdict() || e.judged == 0 || e.rps == step.rps {
            return None;
        }
        let (lo, hi) = if e.rps < step.rps {
            ((*j, e), (i, step))
        } else {
            ((i, step), (*j, e))
        };
        significantly_above(hi.1.met, hi.1.judged, lo.1.met, lo.1.judged).then(|| Contradiction {
            lower_rate: StepGoodput::of(lo.0, lo.1),
            higher_rate: StepGoodput::of(hi.0, hi.1),
        })
    })
}
