//! Results of the load models (see `latmesh_core::load`): concurrency sweeps step by step with
//! their knee ([`SweepRow`]), open-loop rates with their saturation verdict ([`RateRow`]), and
//! how synchronized the agents' start was ([`StartSync`]).
//!
//! Rows are per (region, provider, scenario), plus `ALL` rows that merge every region:
//! percentiles come from merged HDR histograms (a sweep step's own histograms, see
//! [`Aggregate::step_histogram`]), counts from records. Error rates are failed requests /
//! requests, where a request is a logical request that ended (its final attempt) and
//! `cancelled` and `dropped` ones are left out (see [`crate::aggregate`]).
//!
//! The same numbers come from the coordinator's memory ([`sweep_rows`], [`rate_rows`], used by
//! the campaign summary) and from ClickHouse (`latmesh query sweep`): both feed
//! [`sweep_rows_by`] with each step's [`StepMeasure`], so the arithmetic is shared and the two
//! agree to the last digit.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use latmesh_core::hist::HistKey;
use latmesh_core::load::{
    InsufficientStep, Knee, KneeRule, LoadModel, RateSpec, StepPoint, SweepSpec, find_knee,
};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};

use crate::agent_summary::AgentSummary;
use crate::aggregate::{Aggregate, StepCounts};
use crate::matrix::ALL_REGIONS;
use crate::percentiles::Percentiles;
use crate::saturation::{ArrivalLatency, ProviderSaturation, provider_saturation};
use crate::stats;
use crate::stats::interval_us;

/// An open-loop row is saturated when the P90 of `sched_lag` exceeds this, ms: one arrival in
/// ten left more than 10 ms late, so the agent did not keep the schedule (a single late
/// arrival, which is all a P99 of a few dozen arrivals says, does not make a row saturated).
pub const SATURATION_LAG_P90_MS: f64 = 10.0;

/// An open-loop row is saturated when its achieved rate is below this fraction of the
/// scheduled rate.
pub const SATURATION_ACHIEVED_FRACTION: f64 = 0.95;

/// The quantile (0, 1) of a knee rule's percentile (0, 100), as both HdrHistogram and the
/// ClickHouse queries take it.
pub fn knee_quantile(rule: &KneeRule) -> f64 {
    rule.percentile / 100.0
}

/// One concurrency step of a sweep, in one region (or `ALL`) for one provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepStep {
    /// Index of the step (0-based).
    pub step: u32,
    /// Its target concurrency (workers per agent and provider), from the plan.
    pub concurrency: u32,
    /// The provider's total concurrency over the row's agents: `concurrency × agents` (every
    /// agent of every region runs the step's workers at the same time).
    pub concurrency_total: u64,
    /// Logical requests sent in the step that ended (final attempts; `cancelled` and
    /// `dropped` left out).
    pub requests: u64,
    /// Those whose final attempt was `ok`.
    pub ok: u64,
    /// Failed requests / requests, % (0 without requests).
    pub error_pct: f64,
    /// TTFT percentiles over the step's merged histograms, ms (with `n`, support, intervals).
    pub ttft: Option<Percentiles>,
    /// E2E percentiles over the step's merged histograms, ms.
    pub e2e: Option<Percentiles>,
    /// The knee rule's metric at its percentile over the step's merged histograms, ms (what
    /// [`find_knee`] judged).
    pub knee_value_ms: Option<f64>,
    /// Its 95 % confidence interval (lower, upper), ms; `None` when the step's samples are too
    /// few to bound it (see `analysis::stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee_ci_ms: Option<(f64, f64)>,
    /// `ok` requests per second over the step's duration (`step_ms`), summed over the row's
    /// agents (an `ALL` row adds every region's), requests/s.
    pub throughput_rps: f64,
    /// Output tokens of `ok` requests per second over the step's duration, summed over the
    /// row's agents, tokens/s.
    pub output_tokens_per_s: f64,
}

impl SweepStep {
    /// Whether the step's samples support the knee rule's percentile ([`stats::supported`]):
    /// counted from the knee metric's histogram when the step carries it (TTFT, E2E), else
    /// from the step's `ok` requests.
    pub fn knee_supported(&self, rule: &KneeRule) -> bool {
        let n = match rule.metric {
            Metric::Ttft => self.ttft.map_or(0, |p| p.n),
            Metric::E2e => self.e2e.map_or(0, |p| p.n),
            _ => self.ok,
        };
        stats::supported(n, rule.percentile)
    }
}

/// A sweep scenario's steps for one provider in one region (or `ALL`), and its knee.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// Region, or `ALL` for every region merged.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario (a `sweep` one).
    pub scenario: String,
    /// Length of each step, ms (from the plan).
    pub step_ms: u64,
    /// Agents of the row (the region's agents; every agent for `ALL`), each running the
    /// step's `concurrency` workers: 0 when not known.
    pub agents: u64,
    /// How the knee is found (from the plan).
    pub knee_rule: KneeRule,
    /// Every step of the plan, in order (steps without data have zero counts).
    pub steps: Vec<SweepStep>,
    /// The first steep step ([`find_knee`]); `None`: no knee — the provider kept up over the
    /// sweep when `knee_insufficient` is `None` too, else the sweep could not be judged.
    pub knee: Option<Knee>,
    /// The step that had too few requests (or samples) to be judged, before any knee: the
    /// verdict is then "too few requests", neither a knee nor none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee_insufficient: Option<InsufficientStep>,
}

/// What was measured in one sweep step: the inputs of a [`SweepStep`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepMeasure {
    /// Counters from the step's records.
    pub counts: StepCounts,
    /// TTFT percentiles of the step's merged histograms (`None`: no value in them).
    pub ttft: Option<Percentiles>,
    /// E2E percentiles of the step's merged histograms.
    pub e2e: Option<Percentiles>,
    /// The knee metric at the knee rule's quantile ([`knee_quantile`]), µs.
    pub knee_us: Option<u64>,
    /// Its 95 % interval (lower, upper), µs ([`crate::stats::interval_us`] of the
    /// step's merged histogram); `None` when too few samples.
    pub knee_ci_us: Option<(u64, u64)>,
}

/// Which rows to build: every field `None` means all.
#[derive(Clone, Copy, Debug, Default)]
pub struct RowFilter<'a> {
    /// Only this region (the `ALL` row then merges just it).
    pub region: Option<&'a str>,
    /// Only this provider.
    pub provider: Option<&'a str>,
    /// Only this scenario.
    pub scenario: Option<&'a str>,
}

/// The `sweep` scenarios of `plan` with their specs, in plan order.
pub fn sweep_scenarios(plan: &Plan) -> Vec<(&str, &SweepSpec)> {
    plan.scenarios
        .iter()
        .filter_map(|s| match &s.load {
            LoadModel::Sweep(spec) => Some((s.name.as_str(), spec)),
            _ => None,
        })
        .collect()
}

/// Row regions: each region of `plan` (that `only` keeps) as `Some`, then `None` for the
/// `ALL` row; every per-region table of a summary or report iterates these.
pub fn row_regions<'a>(plan: &'a Plan, only: Option<&'a str>) -> Vec<Option<&'a str>> {
    plan.regions
        .iter()
        .map(String::as_str)
        .filter(|r| only.is_none_or(|o| o == *r))
        .map(Some)
        .chain([None])
        .collect()
}

/// Agents per region, from their regions (one entry per agent).
pub fn agents_per_region<'a>(regions: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in regions {
        *out.entry(r.to_string()).or_default() += 1;
    }
    out
}

/// One sweep row from its steps' measures (`steps[k]` is step `k` of `spec`; missing ones
/// count as empty); `agents` ran it.
pub fn sweep_row(
    region: Option<&str>,
    provider: &str,
    scenario: &str,
    spec: &SweepSpec,
    agents: u64,
    steps: &[StepMeasure],
) -> SweepRow {
    let secs = spec.step_ms as f64 / 1000.0;
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let ms = |us: u64| us as f64 / 1000.0;
    let rows: Vec<SweepStep> = spec
        .concurrency
        .iter()
        .enumerate()
        .map(|(k, &concurrency)| {
            let m = steps.get(k).copied().unwrap_or_default();
            SweepStep {
                step: k as u32,
                concurrency,
                concurrency_total: u64::from(concurrency) * agents,
                requests: m.counts.requests,
                ok: m.counts.ok,
                error_pct: m.counts.error_pct(),
                ttft: m.ttft,
                e2e: m.e2e,
                knee_value_ms: m.knee_us.map(ms),
                knee_ci_ms: m.knee_ci_us.map(|(lo, hi)| (ms(lo), ms(hi))),
                throughput_rps: per_s(m.counts.ok),
                output_tokens_per_s: per_s(m.counts.ok_output_tokens),
            }
        })
        .collect();
    let points: Vec<StepPoint> = rows
        .iter()
        .zip(spec.concurrency.iter().enumerate())
        .map(|(s, (k, &concurrency))| StepPoint {
            concurrency,
            requests: s.requests,
            failed: s.requests - s.ok,
            latency_us: steps.get(k).and_then(|m| m.knee_us),
            latency_ci_us: steps.get(k).and_then(|m| m.knee_ci_us),
        })
        .collect();
    let (knee, knee_insufficient) = match find_knee(&points, &spec.knee) {
        Ok(k) => (k, None),
        Err(i) => (None, Some(i)),
    };
    SweepRow {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        scenario: scenario.to_string(),
        step_ms: spec.step_ms,
        agents,
        knee,
        knee_insufficient,
        knee_rule: spec.knee.clone(),
        steps: rows,
    }
}

/// Every sweep row of `plan` that `only` keeps, from `measure(region, provider, scenario,
/// spec, step)`: `region` `None` means every region merged (the `ALL` row); when `only` keeps
/// one region, the `ALL` row merges just it and is measured as that region. `agents` are the
/// campaign's agents per region ([`agents_per_region`]). Ordered by scenario (plan order),
/// then region (plan order, `ALL` last), then provider (plan order).
pub fn sweep_rows_by(
    plan: &Plan,
    only: RowFilter<'_>,
    agents: &BTreeMap<String, u64>,
    mut measure: impl FnMut(Option<&str>, &str, &str, &SweepSpec, u32) -> StepMeasure,
) -> Vec<SweepRow> {
    let mut out = Vec::new();
    for (scenario, spec) in sweep_scenarios(plan) {
        if only.scenario.is_some_and(|s| s != scenario) {
            continue;
        }
        for region in row_regions(plan, only.region) {
            for provider in &plan.providers {
                let provider = provider.name.as_str();
                if only.provider.is_some_and(|p| p != provider) {
                    continue;
                }
                let measured_as = region.or(only.region);
                let n_agents = match measured_as {
                    Some(r) => agents.get(r).copied().unwrap_or(0),
                    None => agents.values().sum(),
                };
                let steps: Vec<StepMeasure> = (0..spec.concurrency.len() as u32)
                    .map(|k| measure(measured_as, provider, scenario, spec, k))
                    .collect();
                out.push(sweep_row(
                    region, provider, scenario, spec, n_agents, &steps,
                ));
            }
        }
    }
    out
}

/// Every sweep row of `plan` that `only` keeps, from merged results in memory; `agents` are
/// the campaign's agents.
pub fn sweep_rows(
    plan: &Plan,
    agg: &Aggregate,
    only: RowFilter<'_>,
    agents: &[AgentSummary],
) -> Vec<SweepRow> {
    let per_region = agents_per_region(agents.iter().map(|a| a.region.as_str()));
    sweep_rows_by(
        plan,
        only,
        &per_region,
        |region, provider, scenario, spec, step| {
            let hist = |metric| {
                agg.step_histogram(
                    region,
                    &HistKey {
                        provider: provider.to_string(),
                        scenario: scenario.to_string(),
                        metric,
                        step,
                    },
                )
            };
            let knee_hist = hist(spec.knee.metric);
            StepMeasure {
                counts: agg.step_counts(region, provider, scenario, step),
                ttft: hist(Metric::Ttft).map(|h| Percentiles::of_list(&h, &plan.percentiles)),
                e2e: hist(Metric::E2e).map(|h| Percentiles::of_list(&h, &plan.percentiles)),
                knee_us: knee_hist
                    .as_ref()
                    .map(|h| h.value_at_quantile(knee_quantile(&spec.knee))),
                knee_ci_us: knee_hist
                    .as_ref()
                    .and_then(|h| interval_us(h, knee_quantile(&spec.knee))),
            }
        },
    )
}

/// An open-loop (`rate`) scenario of one step (no rate sweep, no SLO search: those have
/// [`crate::slo_stats::RateStepRow`]s instead) for one provider in one region (or `ALL`).
///
/// **Achieved rate** means: arrivals actually sent (first attempts of first turns, neither
/// `dropped` nor `cancelled`) divided by the phase's duration (`duration_ms`) and by the number
/// of agents of the row (every agent the plan went to in the region; all of them for `ALL`),
/// i.e. the average over agents of each agent's sending rate, requests/s — the same unit as
/// the plan's `rps`, which is per provider and per agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateRow {
    /// Region, or `ALL` for every region merged.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario (a `rate` one).
    pub scenario: String,
    /// Target arrivals per second per agent (the plan's `rps`), requests/s.
    pub target_rps: f64,
    /// Arrivals the plan schedules per agent for this provider, warm-up arrivals left out (a
    /// Poisson schedule differs from `rps × duration` by chance; every agent has the same
    /// one).
    pub scheduled: u64,
    /// `scheduled` / duration, requests/s: what `achieved_rps` is compared with.
    pub scheduled_rps: f64,
    /// Length of the phase, ms.
    pub duration_ms: u64,
    /// Agents the rate is averaged over.
    pub agents: u64,
    /// Arrivals sent, all agents of the row together.
    pub sent: u64,
    /// `sent` / duration / `agents`, requests/s per agent (see the type's documentation);
    /// `None` without agents.
    pub achieved_rps: Option<f64>,
    /// Arrivals not sent because the provider's in-flight cap stayed full for `max_queue_ms`
    /// (outcome `dropped`).
    pub dropped: u64,
    /// Logical requests ended (`cancelled` and `dropped` left out).
    pub requests: u64,
    /// Failed requests / requests, % (0 without requests).
    pub error_pct: f64,
    /// `sched_lag` (actual − intended send time) percentiles of `ok` attempts, ms.
    pub sched_lag: Option<Percentiles>,
    /// TTFT from the actual send, percentiles, ms.
    pub ttft: Option<Percentiles>,
    /// E2E from the actual send, percentiles, ms.
    pub e2e: Option<Percentiles>,
    /// TTFT from the intended send (`sched_lag` + TTFT, free of coordinated omission),
    /// percentiles, ms.
    pub ttft_intended: Option<Percentiles>,
    /// E2E from the intended send, percentiles, ms.
    pub e2e_intended: Option<Percentiles>,
    /// The **agents** could not keep the schedule: arrivals were dropped, `sched_lag` P90 is
    /// over [`SATURATION_LAG_P90_MS`], or `achieved_rps` is below
    /// [`SATURATION_ACHIEVED_FRACTION`] of `scheduled_rps`. The provider then got less than
    /// the offered load, and latencies from the actual send understate what a client at this
    /// rate would see: read the `_intended` ones.
    pub agent_saturated: bool,
    /// Why the agents are saturated (every reason, `; `-separated); `None` when they are not.
    pub agent_saturated_reason: Option<String>,
    /// What the provider saturation rule measured ([`crate::saturation`]: the latency of the
    /// first vs the second half of the arrivals); `None` when a half has too few requests
    /// for a verdict.
    pub provider_saturation: Option<ProviderSaturation>,
    /// The **provider** did not keep up with the offered rate: its latency from the actual
    /// send grew over the phase ([`crate::saturation`]).
    pub provider_saturated: bool,
    /// Why the provider is saturated; `None` when it is not.
    pub provider_saturated_reason: Option<String>,
    /// The share of prompt tokens served from the provider's cache ([`crate::cache_share`]);
    /// absent when it reported no cached count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<crate::cache_share::CachedShare>,
}

/// What one rate row is built from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateMeasure {
    /// Agents of the row.
    pub agents: u64,
    /// Arrivals sent.
    pub sent: u64,
    /// `dropped` records.
    pub dropped: u64,
    /// Logical requests ended (`cancelled` and `dropped` left out).
    pub requests: u64,
    /// Those not `ok`.
    pub requests_failed: u64,
    /// `sched_lag` percentiles of the row's merged histograms.
    pub sched_lag: Option<Percentiles>,
    /// TTFT percentiles.
    pub ttft: Option<Percentiles>,
    /// E2E percentiles.
    pub e2e: Option<Percentiles>,
    /// Intended TTFT percentiles.
    pub ttft_intended: Option<Percentiles>,
    /// Intended E2E percentiles.
    pub e2e_intended: Option<Percentiles>,
    /// The scenario streams (the provider rule then judges TTFT, else E2E).
    pub stream: bool,
    /// Every request that ended (final attempts of first turns; `cancelled` and `dropped`
    /// left out), by arrival, for the provider saturation rule.
    pub by_arrival: Vec<ArrivalLatency>,
    /// The row's cached share ([`crate::cache_share`]; `None`: no cached count reported).
    pub cached_share: Option<crate::cache_share::CachedShare>,
}

/// The arrivals a rate row compares its sent ones with, per agent and provider: the plan's
/// arrival count of scenario `index` less its `warmup` arrivals (sent, but counted apart and
/// left out of `sent`, as of every statistic).
pub fn scheduled_arrivals(spec: &RateSpec, seed: u64, index: usize, warmup: u32) -> u64 {
    spec.arrival_count(seed, index)
        .saturating_sub(u64::from(warmup))
}

/// One rate row from its measure; `scheduled` is the plan's arrival count per agent (warm-up
/// left out: [`scheduled_arrivals`]).
pub fn rate_row(
    region: Option<&str>,
    provider: &str,
    scenario: &str,
    spec: &RateSpec,
    scheduled: u64,
    m: &RateMeasure,
) -> RateRow {
    let secs = spec.duration_ms as f64 / 1000.0;
    let scheduled_rps = if secs > 0.0 {
        scheduled as f64 / secs
    } else {
        0.0
    };
    let achieved_rps = (m.agents > 0 && secs > 0.0).then(|| m.sent as f64 / secs / m.agents as f64);
    let sched_lag = m.sched_lag;
    let mut reasons = Vec::new();
    if m.dropped > 0 {
        reasons.push(format!("{} arrivals dropped", m.dropped));
    }
    if let Some(lag) = sched_lag.filter(|l| l.p90_ms > SATURATION_LAG_P90_MS) {
        reasons.push(format!(
            "sched_lag P90 {:.1} ms > {SATURATION_LAG_P90_MS} ms",
            lag.p90_ms
        ));
    }
    if let Some(a) = achieved_rps.filter(|a| *a < SATURATION_ACHIEVED_FRACTION * scheduled_rps) {
        reasons.push(format!(
            "achieved {a:.2} rps < {:.0}% of scheduled {scheduled_rps:.2}",
            SATURATION_ACHIEVED_FRACTION * 100.0
        ));
    }
    let provider_saturation = provider_saturation(scheduled, &m.by_arrival);
    let provider_saturated = provider_saturation.as_ref().is_some_and(|p| p.saturated);
    let metric = if m.stream { Metric::Ttft } else { Metric::E2e };
    RateRow {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        scenario: scenario.to_string(),
        target_rps: spec.rps,
        scheduled,
        scheduled_rps,
        duration_ms: spec.duration_ms,
        agents: m.agents,
        sent: m.sent,
        achieved_rps,
        dropped: m.dropped,
        requests: m.requests,
        error_pct: if m.requests == 0 {
            0.0
        } else {
            m.requests_failed as f64 * 100.0 / m.requests as f64
        },
        sched_lag,
        ttft: m.ttft,
        e2e: m.e2e,
        ttft_intended: m.ttft_intended,
        e2e_intended: m.e2e_intended,
        agent_saturated: !reasons.is_empty(),
        agent_saturated_reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        provider_saturated_reason: provider_saturated
            .then(|| {
                provider_saturation
                    .as_ref()
                    .map(|p| p.describe(metric.as_str()))
            })
            .flatten(),
        provider_saturated,
        provider_saturation,
        cached_share: m.cached_share.clone(),
    }
}

/// Every rate row of `plan` from merged results in memory; `agents` are the campaign's agents
/// (their regions give each row's agent count). Ordered by scenario, region (`ALL` last),
/// provider, in plan order. Scenarios with several steps or an SLO search
/// ([`crate::slo_stats::has_rate_steps`]) have no rate row: one scheduled rate, one
/// saturation verdict over the phase and `target_rps` would describe only their first step;
/// their rows are per step ([`crate::slo_stats::rate_step_rows`]).
pub fn rate_rows(plan: &Plan, agg: &Aggregate, agents: &[AgentSummary]) -> Vec<RateRow> {
    let per_region = agents_per_region(agents.iter().map(|a| a.region.as_str()));
    let mut out = Vec::new();
    for (i, s) in plan.scenarios.iter().enumerate() {
        let LoadModel::Rate(spec) = &s.load else {
            continue;
        };
        if crate::slo_stats::has_rate_steps(spec) {
            continue;
        }
        for region in row_regions(plan, None) {
            let n_agents = match region {
                Some(r) => per_region.get(r).copied().unwrap_or(0),
                None => agents.len() as u64,
            };
            let scheduled = scheduled_arrivals(spec, plan.seed, i, s.warmup);
            for provider in &plan.providers {
                let hist = |metric| {
                    agg.histogram(
                        region,
                        &HistKey {
                            provider: provider.name.clone(),
                            scenario: s.name.clone(),
                            metric,
                            step: 0,
                        },
                    )
                    .map(|h| Percentiles::of_list(&h, &plan.percentiles))
                };
                let c = agg.counts(region, &provider.name, &s.name);
                let m = RateMeasure {
                    agents: n_agents,
                    sent: c.sent,
                    dropped: c.count(Outcome::Dropped),
                    requests: c.requests,
                    requests_failed: c.requests_failed,
                    sched_lag: hist(Metric::SchedLag),
                    ttft: hist(Metric::Ttft),
                    e2e: hist(Metric::E2e),
                    ttft_intended: hist(Metric::TtftIntended),
                    e2e_intended: hist(Metric::E2eIntended),
                    stream: s.stream,
                    by_arrival: agg.rate_requests(region, &provider.name, &s.name),
                    cached_share: c.cache.share(crate::cache_share::caching_asked(s)),
                };
                out.push(rate_row(
                    region,
                    &provider.name,
                    &s.name,
                    spec,
                    scheduled,
                    &m,
                ));
            }
        }
    }
    out
}

/// One agent's start, from its done notice.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentStart {
    /// Agent id.
    pub agent_id: String,
    /// Region.
    pub region: String,
    /// When it began the campaign's first phase, on the coordinator's clock as the agent
    /// estimated it, UTC µs; 0: it took no part in the synchronized start (cancelled before
    /// `start_at`, or joined more than a second after it: restarted, or the plan came late).
    pub started_coord_unix_us: i64,
    /// The clock offset it converted `start_at` with (coordinator − agent), µs.
    pub clock_offset_us: i64,
    /// That offset's uncertainty (half the round trip of its sample), ± µs.
    pub clock_uncertainty_us: u64,
}

/// How synchronized the agents' start was.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StartSync {
    /// Latest − earliest `started_coord_unix_us` over the agents that started, µs; `None`
    /// when none did.
    pub skew_us: Option<i64>,
    /// How far off the skew may be, µs: the two largest clock uncertainties among the agents
    /// that started, added (each agent's start is known within its own uncertainty).
    pub clock_uncertainty_us: Option<u64>,
    /// Every agent that sent its done notice, by agent id.
    pub agents: Vec<AgentStart>,
    /// Over every slot of the rounds: the spread of the agents' actual sends
    /// ([`crate::sync`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_skew: Option<crate::sync::SendSkew>,
}

impl StartSync {
    /// The start facts of `agents` (those that sent a done notice).
    pub fn of(mut agents: Vec<AgentStart>) -> StartSync {
        agents.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        let started: Vec<&AgentStart> = agents
            .iter()
            .filter(|a| a.started_coord_unix_us != 0)
            .collect();
        let min = started.iter().map(|a| a.started_coord_unix_us).min();
        let max = started.iter().map(|a| a.started_coord_unix_us).max();
        StartSync {
            skew_us: min.zip(max).map(|(lo, hi)| hi - lo),
            clock_uncertainty_us: (!started.is_empty()).then(|| {
                let mut u: Vec<u64> = started.iter().map(|a| a.clock_uncertainty_us).collect();
                u.sort_unstable_by(|a, b| b.cmp(a));
                u.iter().take(2).sum()
            }),
            agents,
            slot_skew: None,
        }
    }

    /// `start skew 0.42 ms over 3 agents (± 0.07 ms of clock uncertainty)`; `None` without any
    /// agent's start.
    pub fn line(&self) -> Option<String> {
        let skew = self.skew_us?;
        let started = self
            .agents
            .iter()
            .filter(|a| a.started_coord_unix_us != 0)
            .count();
        let mut s = format!(
            "start skew {:.2} ms over {started} agent{} (± {:.2} ms of clock uncertainty)",
            skew as f64 / 1000.0,
            if started == 1 { "" } else { "s" },
            self.clock_uncertainty_us.unwrap_or(0) as f64 / 1000.0
        );
        let never = self.agents.len() - started;
        if never > 0 {
            let _ = write!(
                s,
                "; {never} without a synchronized start (joined late, or cancelled before it)"
            );
        }
        if let Some(k) = &self.slot_skew {
            let _ = write!(
                s,
                "; sends of each round slot: spread P50 {:.2} ms, P99 {:.2} ms over {} slots",
                k.p50_us as f64 / 1000.0,
                k.p99_us as f64 / 1000.0,
                k.slots
            );
        }
        Some(s)
    }
}

/// A sweep row's knee verdict, compact: `c=16: latency, elasticity 0.54`, `c=8: errors
/// 12.0%`, `too few requests at c=2 (13 < 30)` (no verdict: `knee_min_requests` not met, or
/// too few ok requests for the knee percentile's interval), or `none`.
pub fn knee_text(row: &SweepRow) -> String {
    if let Some(i) = &row.knee_insufficient {
        let min = u64::from(row.knee_rule.min_requests);
        return if i.requests < min {
            format!(
                "too few requests at c={} ({} < {min})",
                i.concurrency, i.requests
            )
        } else {
            format!("too few ok requests at c={} for an interval", i.concurrency)
        };
    }
    match row.knee.as_ref() {
        None => "none".into(),
        Some(k) if k.reason == "errors" => {
            format!("c={}: errors {:.1}%", k.concurrency, k.error_pct)
        }
        Some(k) => match k.elasticity {
            Some(e) => format!("c={}: latency, elasticity {e:.2}", k.concurrency),
            None => format!("c={}: {}", k.concurrency, k.reason),
        },
    }
}
