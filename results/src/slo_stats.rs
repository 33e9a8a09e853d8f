//! SLO goodput per cell, open-loop rate steps, and the SLO search's answer per provider
//! (docs/metrics.md "SLOs and goodput", "Rate steps and the SLO search").
//!
//! Built from merged records the same way in memory (the coordinator's summary) and from
//! ClickHouse (`latmesh query slo`, reports): a step's or cell's goodput is counted from
//! records' `slo_met` (final attempts, warm-up, `cancelled` and `dropped` left out), its
//! latencies from the merged histograms of that step.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::load::{
    LoadModel, RateSpec, SearchInstability, SearchOutcome, SearchStep, StepVerdict,
};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::slo::Slo;
use serde::{Deserialize, Serialize};

use crate::aggregate::{Aggregate, RateStepCounts};
use crate::load_stats::row_regions;
use crate::matrix::ALL_REGIONS;
use crate::percentiles::Percentiles;

/// Goodput of one cell (region × provider × scenario) or one rate step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// Requests judged: final attempts of first turns, warm-up, `cancelled` and `dropped`
    /// left out.
    pub requests: u64,
    /// Those that met every per-request bound (`slo_met`).
    pub met: u64,
    /// `met / requests`, %.
    pub pct: f64,
    /// Wilson 95 % interval of `pct`, % (low, high).
    pub ci_pct: (f64, f64),
    /// Requests that met the SLO per second of the phase (or step) and per agent,
    /// requests/s; `None` when the phase length or the agents are unknown.
    pub rps: Option<f64>,
    /// Percentile bounds that were exceeded (`"P95 TTFT 1830 ms > 1500 ms"`), empty when all
    /// held or none were given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceeded: Vec<String>,
    /// Whether the cell or step meets the SLO: goodput ≥ `goodput_pct` and no percentile
    /// bound exceeded; `None` with fewer requests than the sample-size rule needs
    /// ([`crate::stats`]). A matrix cell's ([`cell_goodput`]) reads its interval instead
    /// ([`interval_meets`]): `None` also when the interval contains `goodput_pct`
    /// ([`Goodput::verdict`] tells undecided from too few).
    pub meets: Option<bool>,
}

/// One step of an open-loop (`rate`) scenario with several steps or an SLO search, for one
/// provider in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateStepRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Step index, 0-based.
    pub step: u32,
    /// The step's arrival rate per agent, requests/s (the records' `target_rps`; the lowest
    /// and highest when the agents of the row used different rates).
    pub target_rps: f64,
    /// Highest `target_rps` of the row's records (equal to `target_rps` unless agents
    /// differed).
    pub target_rps_max: f64,
    /// Arrivals sent (all agents).
    pub sent: u64,
    /// Arrivals dropped at the provider's in-flight cap.
    pub dropped: u64,
    /// Achieved sending rate per agent, requests/s.
    pub achieved_rps: Option<f64>,
    /// Failed requests / requests, %.
    pub error_pct: f64,
    /// TTFT percentiles of the step, ms.
    pub ttft: Option<Percentiles>,
    /// TPOT percentiles of the step, ms.
    pub tpot: Option<Percentiles>,
    /// E2E percentiles of the step, ms.
    pub e2e: Option<Percentiles>,
    /// Goodput of the step (`None` without an SLO).
    pub goodput: Option<Goodput>,
    /// The step's verdict against the SLO (`None` without an SLO).
    pub verdict: Option<StepVerdict>,
}

/// The answer of an SLO search for one provider in one region (or `ALL`): the highest rate
/// whose goodput stayed at or above the threshold, with the steps as evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// The SLO in one line ([`latmesh_core::slo::Slo::describe`]).
    pub slo: String,
    /// What the merged steps show (recomputed from the rows' verdicts and goodput in step
    /// order, [`latmesh_core::load::SloSearch::assess`]).
    pub outcome: SearchOutcome,
    /// Why the answer is unstable (`outcome.end` is `unstable`): the steps whose goodput
    /// contradicts their rates, before and after the re-run, with their intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unstable: Option<SearchInstability>,
    /// One sentence: `"meets the SLO up to 6.00 rps per agent (misses at 7.00 rps per agent); resolved"`.
    pub text: String,
}

/// Fewest judged requests for a goodput verdict ([`Goodput::meets`]): 20.
pub use latmesh_core::slo::MIN_GOODPUT_REQUESTS;

/// A cell goodput's verdict against its SLO, as every table shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GoodputVerdict {
    /// The SLO is met: goodput's 95 % interval at or above `goodput_pct`, every percentile
    /// bound held.
    Met,
    /// The SLO is missed: the interval lies below `goodput_pct`, or a percentile bound was
    /// exceeded.
    Missed,
    /// The interval contains `goodput_pct` (or a percentile bound's samples do not support
    /// it): more requests are needed to tell.
    Undecided,
    /// Fewer than [`MIN_GOODPUT_REQUESTS`] judged requests.
    TooFew,
}

impl GoodputVerdict {
    /// `met`, `missed`, `undecided`, `too few`.
    pub fn as_str(self) -> &'static str {
        match self {
            GoodputVerdict::Met => "met",
            GoodputVerdict::Missed => "missed",
            GoodputVerdict::Undecided => "undecided",
            GoodputVerdict::TooFew => "too few",
        }
    }
}

impl Goodput {
    /// The verdict [`Goodput::meets`] stands for (`None` split into undecided and too few).
    pub fn verdict(&self) -> GoodputVerdict {
        match self.meets {
            Some(true) => GoodputVerdict::Met,
            Some(false) => GoodputVerdict::Missed,
            None if self.requests < MIN_GOODPUT_REQUESTS => GoodputVerdict::TooFew,
            None => GoodputVerdict::Undecided,
        }
    }
}

/// The one met / missed / undecided rule for a goodput against `goodput_pct` (the rule of
/// `latmesh check`'s `goodput_below`, which fires when the 95 % Wilson interval's upper
/// bound lies below its limit): *missed* when the interval lies below `goodput_pct` or a
/// percentile bound was exceeded (`judged` = [`latmesh_core::slo::Slo::judge`]'s `meets`
/// was `Some(false)` for that), *met* when its lower bound is at or above it, else
/// undecided (`None`, as for too few requests). 19 of 23 met against 90 % (82.6 %, interval
/// 62.9–93.0 %) is undecided, not missed.
pub fn interval_meets(
    judged: Option<bool>,
    exceeded: bool,
    ci_pct: (f64, f64),
    goodput_pct: f64,
) -> Option<bool> {
    match judged {
        None => None,
        Some(false) if exceeded => Some(false),
        Some(_) if ci_pct.1 < goodput_pct => Some(false),
        Some(_) if ci_pct.0 >= goodput_pct => Some(true),
        Some(_) => None,
    }
}

/// The goodput of a cell or step of a scenario with `slo`: `met` of `requests` judged
/// requests; `secs_x_agents` is the phase's (or step's) length in seconds times the agents of
/// the row (for [`Goodput::rps`]); `hist` gives the merged histogram (µs) of `ttft`, `tpot`
/// and `e2e` for the percentile bounds. The verdict is [`latmesh_core::slo::Slo::judge`]'s
/// (the rule the agent's SLO search applies to its own steps too).
pub fn goodput(
    slo: &latmesh_core::slo::Slo,
    requests: u64,
    met: u64,
    secs_x_agents: Option<f64>,
    hist: impl Fn(latmesh_core::metrics::Metric) -> Option<hdrhistogram::Histogram<u64>>,
) -> Goodput {
    let met = met.min(requests);
    let ci_pct = latmesh_core::proportion::wilson(met, requests)
        .map_or((0.0, 100.0), |c| (c.lower * 100.0, c.upper * 100.0));
    let j = slo.judge(requests, met, |b| {
        hist(b.metric).map(|h| {
            (
                h.len(),
                h.value_at_quantile(b.percentile / 100.0) as f64 / 1000.0,
            )
        })
    });
    Goodput {
        requests,
        met,
        pct: j.pct,
        ci_pct,
        rps: secs_x_agents.filter(|s| *s > 0.0).map(|s| met as f64 / s),
        exceeded: j.exceeded,
        meets: j.meets,
    }
}

/// The verdict of one rate step ([`latmesh_core::slo::step_verdict`] of its goodput).
pub fn step_verdict(g: &Goodput, dropped: u64, min_requests: u32) -> StepVerdict {
    latmesh_core::slo::step_verdict(g.meets, g.requests, dropped, min_requests)
}

/// The search answer of one provider in one region from its step rows (in step order, each
/// with a verdict): [`latmesh_core::load::SloSearch::assess`] of (rate, verdict, goodput
/// counts), the rule the agent chose its rates by, and its sentence (an unstable answer says
/// so first, with the evidence).
pub fn search_row(
    slo: &latmesh_core::slo::Slo,
    search: &latmesh_core::load::SloSearch,
    steps: &[RateStepRow],
) -> Option<SearchRow> {
    let first = steps.first()?;
    let history: Vec<SearchStep> = steps
        .iter()
        .filter_map(|s| {
            s.verdict.map(|verdict| SearchStep {
                rps: s.target_rps,
                verdict,
                judged: s.goodput.as_ref().map_or(0, |g| g.requests),
                met: s.goodput.as_ref().map_or(0, |g| g.met),
            })
        })
        .collect();
    let assessed = search.assess(&history);
    let outcome = assessed.outcome;
    // Rates are per agent: every agent (region) of a row sent at them at once.
    let rps = |r: f64| format!("{r:.2} rps per agent");
    let text = match (outcome.met_rps, outcome.missed_rps) {
        (Some(m), Some(x)) => format!(
            "meets the SLO up to {} (misses at {}); {}",
            rps(m),
            rps(x),
            outcome.end.describe()
        ),
        (Some(m), None) => format!(
            "meets the SLO up to at least {}; {}",
            rps(m),
            outcome.end.describe()
        ),
        (None, Some(x)) => format!(
            "misses the SLO at every rate tried, from {}; {}",
            rps(x),
            outcome.end.describe()
        ),
        (None, None) => {
            "no step could be judged (too few requests, or arrivals the agent dropped)".to_string()
        }
    };
    let text = match &assessed.instability {
        Some(i) => format!(
            "UNSTABLE, no answer: {}; the steps kept: {text}",
            i.describe()
        ),
        None => text,
    };
    Some(SearchRow {
        region: first.region.clone(),
        provider: first.provider.clone(),
        scenario: first.scenario.clone(),
        slo: slo.describe(),
        outcome,
        unstable: assessed.instability,
        text,
    })
}

/// Whether a `rate` scenario has rate steps ([`RateStepRow`]s): several steps (`rps = [..]`
/// or a ramp) or an SLO search. Such a scenario has no [`crate::load_stats::RateRow`] (whose
/// scheduled rate, saturation rule and per-phase figures describe one rate): its rows are
/// per step, in `Summary.rate_steps`. ClickHouse's rate rows skip the same scenarios.
pub fn has_rate_steps(spec: &RateSpec) -> bool {
    spec.search.is_some() || spec.step_count() > 1
}

/// How long `scenario`'s phase lasts, s: the rounds phase (`rounds.count × interval`) for a
/// `rounds` scenario, else its own phase (every step of a sweep or rate scenario, a search's
/// idle steps included). Goodput's requests per second ([`Goodput::rps`]) divide by this.
pub fn phase_secs(plan: &Plan, scenario: &ScenarioSpec) -> f64 {
    match &scenario.load {
        LoadModel::Rounds => f64::from(plan.rounds.count) * plan.rounds.interval_ms as f64 / 1000.0,
        load => load.span_us() as f64 / 1e6,
    }
}

/// Whether `scenario` has a matrix-cell goodput ([`cell_goodput`]): it has an SLO and runs at
/// one load. A `sweep`, a rate sweep or an SLO search runs steps at different loads (a search
/// overloads each provider on purpose until it misses): a goodput pooling its steps would
/// judge no load anyone sends, so their goodput is per step ([`RateStepRow::goodput`]).
pub fn has_cell_goodput(scenario: &ScenarioSpec) -> bool {
    scenario.slo.is_some()
        && match &scenario.load {
            LoadModel::Rounds => true,
            LoadModel::Sweep(_) => false,
            LoadModel::Rate(r) => !has_rate_steps(r),
        }
}

/// The goodput of a matrix cell of `scenario` (`None` unless [`has_cell_goodput`]): `judged`
/// and `met` requests (warm-up left out), `agents` of the row (0: unknown, then no rate),
/// `hist` the cell's merged histograms (µs).
pub fn cell_goodput(
    plan: &Plan,
    scenario: &ScenarioSpec,
    judged: u64,
    met: u64,
    agents: u64,
    hist: impl Fn(Metric) -> Option<Histogram<u64>>,
) -> Option<Goodput> {
    if !has_cell_goodput(scenario) {
        return None;
    }
    let slo = scenario.slo.as_ref()?;
    let secs = (agents > 0).then(|| phase_secs(plan, scenario) * agents as f64);
    let mut g = goodput(slo, judged, met, secs, hist);
    // A cell's verdict says what its samples support ([`interval_meets`]).
    g.meets = interval_meets(g.meets, !g.exceeded.is_empty(), g.ci_pct, slo.goodput_pct);
    Some(g)
}

/// What one rate step of one provider in one region (or every region) was measured as: the
/// inputs of a [`RateStepRow`].
#[derive(Clone, Debug, Default)]
pub struct RateStepMeasure {
    /// Counters from the step's records.
    pub counts: RateStepCounts,
    /// The step's merged histograms (µs) by metric: TTFT, TPOT and E2E (those present).
    pub hists: BTreeMap<Metric, Histogram<u64>>,
}

/// The metrics a [`RateStepMeasure`] needs histograms of.
pub const STEP_METRICS: [Metric; 3] = [Metric::Ttft, Metric::Tpot, Metric::E2e];

/// The judged requests a rate step needs for a verdict: the search's `min_requests`, else
/// [`MIN_GOODPUT_REQUESTS`].
pub fn step_min_requests(spec: &RateSpec) -> u32 {
    spec.search
        .as_ref()
        .map_or(MIN_GOODPUT_REQUESTS as u32, |s| s.min_requests)
}

/// One rate step row: `agents` ran it (each for `duration_ms`); the rate is the records'
/// `target_rps` (the plan's step rate when no record carried one); percentiles of the
/// campaign's `percentiles` list; goodput and verdict against `slo` when given
/// ([`goodput`] with the step's length × agents, [`step_verdict`] with
/// [`step_min_requests`]).
#[allow(clippy::too_many_arguments)]
pub fn rate_step_row(
    region: Option<&str>,
    provider: &str,
    scenario: &str,
    step: u32,
    spec: &RateSpec,
    slo: Option<&Slo>,
    percentiles: &[f64],
    agents: u64,
    m: &RateStepMeasure,
) -> RateStepRow {
    let c = &m.counts;
    let secs = spec.duration_ms as f64 / 1000.0;
    let (lo, hi) = c.target_rps.unwrap_or_else(|| {
        let r = spec.step_rps(step).unwrap_or(0.0);
        (r, r)
    });
    let pct = |metric| {
        m.hists
            .get(&metric)
            .map(|h| Percentiles::of_list(h, percentiles))
    };
    let goodput = slo.map(|slo| {
        goodput(
            slo,
            c.slo_judged,
            c.slo_met,
            (agents > 0).then_some(secs * agents as f64),
            |metric| m.hists.get(&metric).cloned(),
        )
    });
    let verdict = goodput
        .as_ref()
        .map(|g| step_verdict(g, c.dropped, step_min_requests(spec)));
    RateStepRow {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        scenario: scenario.to_string(),
        step,
        target_rps: lo,
        target_rps_max: hi,
        sent: c.sent,
        dropped: c.dropped,
        achieved_rps: (agents > 0 && secs > 0.0).then(|| c.sent as f64 / secs / agents as f64),
        error_pct: if c.requests == 0 {
            0.0
        } else {
            c.failed as f64 * 100.0 / c.requests as f64
        },
        ttft: pct(Metric::Ttft),
        tpot: pct(Metric::Tpot),
        e2e: pct(Metric::E2e),
        goodput,
        verdict,
    }
}

/// Every rate step row of `plan` ([`has_rate_steps`] scenarios), from `measure(region,
/// provider, scenario, step)` (`region` `None`: every region merged); `agents` per region
/// ([`crate::load_stats::agents_per_region`]). A rate sweep has a row for every planned step
/// (empty ones when nothing arrived); a search only for the steps that have records (a
/// provider idles after its search ends). Ordered by scenario (plan order), region (plan
/// order, `ALL` last), provider (plan order), step.
pub fn rate_step_rows_by(
    plan: &Plan,
    agents: &BTreeMap<String, u64>,
    mut measure: impl FnMut(Option<&str>, &str, &str, u32) -> RateStepMeasure,
) -> Vec<RateStepRow> {
    let mut out = Vec::new();
    for s in &plan.scenarios {
        let LoadModel::Rate(spec) = &s.load else {
            continue;
        };
        if !has_rate_steps(spec) {
            continue;
        }
        for region in row_regions(plan, None) {
            let n_agents = match region {
                Some(r) => agents.get(r).copied().unwrap_or(0),
                None => agents.values().sum(),
            };
            for p in &plan.providers {
                for step in 0..spec.step_count() {
                    let m = measure(region, &p.name, &s.name, step);
                    if spec.search.is_some() && m.counts.is_empty() {
                        continue;
                    }
                    out.push(rate_step_row(
                        region,
                        &p.name,
                        &s.name,
                        step,
                        spec,
                        s.slo.as_ref(),
                        &plan.percentiles,
                        n_agents,
                        &m,
                    ));
                }
            }
        }
    }
    out
}

/// [`rate_step_rows_by`] from merged results in memory.
pub fn rate_step_rows(
    plan: &Plan,
    agg: &Aggregate,
    agents: &BTreeMap<String, u64>,
) -> Vec<RateStepRow> {
    rate_step_rows_by(plan, agents, |region, provider, scenario, step| {
        RateStepMeasure {
            counts: agg.rate_step_counts(region, provider, scenario, step),
            hists: STEP_METRICS
                .into_iter()
                .filter_map(|metric| {
                    let key = latmesh_core::hist::HistKey {
                        provider: provider.to_string(),
                        scenario: scenario.to_string(),
                        metric,
                        step,
                    };
                    Some((metric, agg.step_histogram(region, &key)?))
                })
                .collect(),
        }
    })
}

/// The SLO search answers of `plan`'s search scenarios (with an SLO) from their step rows
/// (`rows`, as [`rate_step_rows_by`] builds them): one per region (and `ALL`) × provider
/// with at least one step, in the rows' order.
pub fn search_rows(plan: &Plan, rows: &[RateStepRow]) -> Vec<SearchRow> {
    let mut out = Vec::new();
    for s in &plan.scenarios {
        let LoadModel::Rate(spec) = &s.load else {
            continue;
        };
        let (Some(search), Some(slo)) = (&spec.search, &s.slo) else {
            continue;
        };
        for region in row_regions(plan, None) {
            let region = region.unwrap_or(ALL_REGIONS);
            for p in &plan.providers {
                let mut steps: Vec<RateStepRow> = rows
                    .iter()
                    .filter(|r| r.scenario == s.name && r.region == region && r.provider == p.name)
                    .cloned()
                    .collect();
                steps.sort_by_key(|r| r.step);
                out.extend(search_row(slo, search, &steps));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use latmesh_core::hist::new_histogram;
    use latmesh_core::load::SearchEnd;
    use latmesh_core::metrics::Metric;
    use latmesh_core::slo::{PercentileBound, Slo};

    use super::*;

    fn slo() -> Slo {
        Slo {
            ttft_ms: Some(500.0),
            tpot_ms: None,
            e2e_ms: None,
            percentiles: vec![PercentileBound {
                metric: Metric::Ttft,
                percentile: 90.0,
                ms: 400.0,
            }],
            goodput_pct: 90.0,
        }
    }

    #[test]
    fn goodput_counts_met_requests_and_judges_percentile_bounds() {
        let mut h = new_histogram();
        for v in 1..=100u64 {
            h.record(v * 3_000).unwrap(); // 3..300 ms: P90 270 ms
        }
        let g = goodput(&slo(), 100, 95, Some(50.0), |_| Some(h.clone()));
        assert_eq!((g.met, g.pct, g.meets), (95, 95.0, Some(true)));
        assert_eq!(g.rps, Some(1.9));
        assert!(g.ci_pct.0 < 95.0 && g.ci_pct.1 > 95.0);
        let g = goodput(&slo(), 100, 80, None, |_| Some(h.clone()));
        assert_eq!(g.meets, Some(false));
        // P90 over its bound: missed whatever the goodput.
        let mut slow = new_histogram();
        for v in 1..=100u64 {
            slow.record(v * 5_000).unwrap(); // P90 450 ms
        }
        let g = goodput(&slo(), 100, 100, None, |_| Some(slow.clone()));
        assert_eq!(g.meets, Some(false));
        assert_eq!(g.exceeded.len(), 1, "{:?}", g.exceeded);
        // Too few requests: no verdict.
        let g = goodput(&slo(), 10, 10, None, |_| Some(h.clone()));
        assert_eq!(g.meets, None);
        assert_eq!(step_verdict(&g, 0, 20), StepVerdict::Insufficient);
        assert_eq!(step_verdict(&g, 1, 20), StepVerdict::AgentLimited);
    }

    #[test]
    fn a_cell_verdict_is_met_missed_or_undecided_by_its_interval() {
        let ci = |k, n| {
            let c = latmesh_core::proportion::wilson(k, n).unwrap();
            (c.lower * 100.0, c.upper * 100.0)
        };
        // 19 of 23 (82.6 %, [62.9, 93.0]) against 90 %: the point misses, the interval
        // contains the target: undecided.
        assert_eq!(interval_meets(Some(false), false, ci(19, 23), 90.0), None);
        // 10 of 23 ([25.6, 63.5]): missed.
        assert_eq!(
            interval_meets(Some(false), false, ci(10, 23), 90.0),
            Some(false)
        );
        // 23 of 23 ([85.7, 100]): the point meets, the interval does not yet: undecided.
        assert_eq!(interval_meets(Some(true), false, ci(23, 23), 90.0), None);
        // 100 of 100 ([96.3, 100]): met.
        assert_eq!(
            interval_meets(Some(true), false, ci(100, 100), 90.0),
            Some(true)
        );
        // A percentile bound exceeded misses whatever the goodput; too few stays None.
        assert_eq!(
            interval_meets(Some(false), true, ci(100, 100), 90.0),
            Some(false)
        );
        assert_eq!(interval_meets(None, false, ci(10, 10), 90.0), None);
        let g = Goodput {
            requests: 23,
            met: 19,
            pct: 82.6,
            ci_pct: ci(19, 23),
            rps: None,
            exceeded: Vec::new(),
            meets: None,
        };
        assert_eq!(g.verdict(), GoodputVerdict::Undecided);
        let few = Goodput {
            requests: 12,
            ..g.clone()
        };
        assert_eq!(few.verdict(), GoodputVerdict::TooFew);
        assert_eq!(
            Goodput {
                meets: Some(false),
                ..g
            }
            .verdict()
            .as_str(),
            "missed"
        );
    }

    /// A step row of provider `p` at `rps` where `met` of 100 judged requests met a plain
    /// TTFT SLO (90 % to meet).
    fn step_row(step: u32, rps: f64, met: u64) -> RateStepRow {
        let plain = Slo {
            percentiles: vec![],
            ..slo()
        };
        let g = goodput(&plain, 100, met, None, |_| None);
        RateStepRow {
            region: "r".into(),
            provider: "p".into(),
            scenario: "s".into(),
            step,
            target_rps: rps,
            target_rps_max: rps,
            sent: 100,
            dropped: 0,
            achieved_rps: None,
            error_pct: 0.0,
            ttft: None,
            tpot: None,
            e2e: None,
            verdict: Some(step_verdict(&g, 0, 20)),
            goodput: Some(g),
        }
    }

    /// The merged answer applies the search's contradiction rule to the rows' goodput: a
    /// re-run that still contradicts makes it unstable, said first in its sentence.
    #[test]
    fn a_search_whose_re_run_still_contradicts_is_unstable_with_its_evidence() {
        let search = latmesh_core::load::SloSearch {
            min_rps: 2.0,
            max_rps: 16.0,
            steps: 8,
            min_requests: 20,
            resolution_pct: 10.0,
        };
        let plain = Slo {
            percentiles: vec![],
            ..slo()
        };
        let mut rows = vec![
            step_row(0, 2.0, 100),
            step_row(1, 4.0, 100),
            step_row(2, 8.0, 84),
            step_row(3, 4.5, 65),
        ];
        // Not re-run yet, no step used up: still running, no verdict of instability.
        let r = search_row(&plain, &search, &rows).unwrap();
        assert_eq!((r.outcome.end, r.unstable), (SearchEnd::Running, None));
        rows.push(step_row(4, 4.5, 60));
        let r = search_row(&plain, &search, &rows).unwrap();
        assert_eq!(r.outcome.end, SearchEnd::Unstable);
        let i = r.unstable.unwrap();
        assert_eq!(
            (i.first.lower_rate.step, i.rerun.unwrap().lower_rate.step),
            (3, 4)
        );
        assert_eq!(
            r.text,
            "UNSTABLE, no answer: goodput does not fall as the rate rises: step 3 at 4.50 rps: \
             65.0 % [55.3, 73.6] of 100 is significantly below step 2 at 8.00 rps: 84.0 % \
             [75.6, 89.9] of 100; re-run, step 4 at 4.50 rps: 60.0 % [50.2, 69.1] of 100 is \
             significantly below step 2 at 8.00 rps: 84.0 % [75.6, 89.9] of 100; the steps \
             kept: meets the SLO up to 4.00 rps per agent (misses at 4.50 rps per agent); \
             unstable: the provider changed during the search"
        );
        // A re-run that agrees: the search goes on from it.
        rows[4] = step_row(4, 4.5, 95);
        let r = search_row(&plain, &search, &rows).unwrap();
        assert_eq!(
            (r.outcome.met_rps, r.outcome.missed_rps, r.unstable),
            (Some(4.5), Some(8.0), None)
        );
    }
}
