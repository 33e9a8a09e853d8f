//! SLO goodput, open-loop rate steps and the SLO search's answers of a stored campaign
//! ([`slo_counts`], [`rate_steps`], [`searches`]), computed with the rules of
//! [`latmesh_results::slo_stats`] the coordinator's summary applies in memory.
//!
//! Judged requests are final attempts of first turns with a stored `slo_met` (the agent sets
//! it on final attempts of SLO scenarios that were neither `cancelled` nor `dropped`);
//! warm-up rows (`warmup = 1`) are counted apart and left out of every figure. A step's
//! latencies come from its merged histograms (`histograms.step`).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::load::{DEFAULT_SEARCH_MIN_REQUESTS, LoadModel, RateSpec};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::record::Outcome;
use latmesh_core::slo::Slo;
use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use super::histograms::merged_histograms;
use latmesh_results::aggregate::counts_in_error_rates;
use latmesh_results::load_stats::row_regions;
use latmesh_results::slo_stats::{self, Goodput, RateStepRow, SearchRow};
use latmesh_results::summary::{ALL_REGIONS, Percentiles};

/// The SQL condition of a judged request: a final attempt of a first turn, not warm-up, with
/// a verdict (`slo_met` not NULL), neither `cancelled` nor `dropped`.
pub(super) const JUDGED_SQL: &str = "warmup = 0 AND final_attempt = 1 AND turn <= 1 \
     AND slo_met IS NOT NULL AND outcome NOT IN ('cancelled', 'dropped')";

/// (region or `ALL`, provider, scenario, step).
pub(super) type StepKey = (String, String, String, u32);

/// Warm-up rows and judged requests of one (region, provider, scenario, step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SloCounts {
    /// Warm-up rows (`warmup = 1`), any attempt.
    pub warmup: u64,
    /// Judged requests ([`JUDGED_SQL`]).
    pub judged: u64,
    /// Those that met the SLO (`slo_met = 1`).
    pub met: u64,
}

#[derive(clickhouse::Row, Deserialize)]
struct SloCountRow {
    region: String,
    provider: String,
    scenario: String,
    step: u32,
    warmup_n: u64,
    judged: u64,
    met: u64,
}

/// Warm-up rows and judged/met requests of the `requests` rows `filter` selects, per region
/// and `ALL`, provider, scenario and, with `by_step`, step (else every step merged under 0).
pub(super) async fn slo_counts(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    by_step: bool,
) -> Result<BTreeMap<StepKey, SloCounts>, StoreError> {
    check_identifier(db)?;
    let (wh, args) = where_clause(filter, "send_unix_us", "send_time");
    let sql = format!(
        "SELECT region, provider, scenario, step, countIf(warmup = 1) AS warmup_n, \
         countIf({JUDGED_SQL}) AS judged, \
         countIf({JUDGED_SQL} AND ifNull(slo_met, 0) = 1) AS met \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, step"
    );
    let rows: Vec<SloCountRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let mut out: BTreeMap<StepKey, SloCounts> = BTreeMap::new();
    for r in rows {
        for region in [r.region.as_str(), ALL_REGIONS] {
            let c = out
                .entry((
                    region.to_string(),
                    r.provider.clone(),
                    r.scenario.clone(),
                    if by_step { r.step } else { 0 },
                ))
                .or_default();
            c.warmup += r.warmup_n;
            c.judged += r.judged;
            c.met += r.met;
        }
    }
    Ok(out)
}

/// Seconds × agents a scenario's goodput rate ([`Goodput::rps`]) is counted over: a `rate`
/// scenario's whole phase (`step = None`) or one step, times `agents`; `None` for other load
/// models (their phase length is not in the plan) or without agents.
pub fn goodput_secs_x_agents(spec: &ScenarioSpec, agents: u64, step: bool) -> Option<f64> {
    let LoadModel::Rate(rate) = &spec.load else {
        return None;
    };
    let secs = if step {
        rate.duration_ms as f64 / 1000.0
    } else {
        rate.span_us() as f64 / 1e6
    };
    (agents > 0 && secs > 0.0).then(|| secs * agents as f64)
}

/// The metrics an SLO's percentile bounds are judged on.
pub(super) fn bound_metrics(slo: &Slo) -> Vec<Metric> {
    let mut out: Vec<Metric> = Vec::new();
    for b in &slo.percentiles {
        if !out.contains(&b.metric) {
            out.push(b.metric);
        }
    }
    out
}

/// The goodput of `counts` under `slo`, its percentile bounds judged on `hists`.
pub(super) fn goodput_of(
    slo: &Slo,
    counts: SloCounts,
    secs_x_agents: Option<f64>,
    hists: &BTreeMap<Metric, Histogram<u64>>,
) -> Goodput {
    slo_stats::goodput(slo, counts.judged, counts.met, secs_x_agents, |m| {
        hists.get(&m).cloned()
    })
}

/// The `rate` scenarios with rows per step: several steps, or an SLO search.
pub(super) fn stepped_scenarios<'a>(
    plan: &'a Plan,
    only: Option<&str>,
) -> Vec<(&'a ScenarioSpec, &'a RateSpec)> {
    plan.scenarios
        .iter()
        .filter(|s| only.is_none_or(|o| o == s.name))
        .filter_map(|s| match &s.load {
            LoadModel::Rate(r) if r.step_count() > 1 || r.search.is_some() => Some((s, r)),
            _ => None,
        })
        .collect()
}

#[derive(clickhouse::Row, Deserialize)]
struct StepOutcomeRow {
    region: String,
    provider: String,
    scenario: String,
    step: u32,
    outcome: String,
    n: u64,
    firsts: u64,
    final_n: u64,
    rps_min: f64,
    rps_max: f64,
    judged: u64,
    met: u64,
}

/// What one step's rows add up to.
#[derive(Clone, Copy, Debug, Default)]
struct StepAcc {
    sent: u64,
    dropped: u64,
    requests: u64,
    failed: u64,
    rps_min: Option<f64>,
    rps_max: f64,
    slo: SloCounts,
}

/// Metrics a step row shows.
const STEP_METRICS: [Metric; 3] = [Metric::Ttft, Metric::Tpot, Metric::E2e];

/// The rate steps of the stored campaign of `plan` (rows `filter` selects): per `rate`
/// scenario with several steps or an SLO search, region (plan order, then `ALL`), provider
/// (plan order) and step, the step's rate (`target_rps`, lowest and highest), arrivals sent
/// (first attempts of first turns, neither `cancelled` nor `dropped`) and dropped, the
/// achieved rate per agent over `duration_s`, failed requests %, TTFT/TPOT/E2E at the plan's
/// percentiles from the step's merged histograms, goodput ([`slo_stats::goodput`]) and the
/// verdict ([`slo_stats::step_verdict`], `min_requests` of the search or
/// [`DEFAULT_SEARCH_MIN_REQUESTS`]). Warm-up rows are left out. A fixed-rate sweep lists
/// every planned step (empty ones too, at the planned rate); a search lists the steps that
/// ran. `agents` holds the agents per region.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn rate_steps(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    plan: &Plan,
    agents: &BTreeMap<String, u64>,
) -> Result<Vec<RateStepRow>, StoreError> {
    check_identifier(db)?;
    let specs = stepped_scenarios(plan, filter.scenario.as_deref());
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let list = specs
        .iter()
        .map(|(s, _)| sql_string(&s.name))
        .collect::<Vec<_>>()
        .join(", ");
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    and_where(
        &mut wh,
        &format!("`load` = 'rate' AND warmup = 0 AND scenario IN ({list})"),
    );
    let sql = format!(
        "SELECT region, provider, scenario, step, outcome, count() AS n, \
         countIf(attempt <= 1 AND turn <= 1) AS firsts, sum(final_attempt) AS final_n, \
         min(target_rps) AS rps_min, max(target_rps) AS rps_max, \
         countIf({JUDGED_SQL}) AS judged, \
         countIf({JUDGED_SQL} AND ifNull(slo_met, 0) = 1) AS met \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, step, outcome"
    );
    let rows: Vec<StepOutcomeRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let mut acc: BTreeMap<StepKey, StepAcc> = BTreeMap::new();
    for r in &rows {
        let outcome = Outcome::parse(&r.outcome);
        let measured = outcome.is_none_or(counts_in_error_rates);
        for region in [r.region.as_str(), ALL_REGIONS] {
            let a = acc
                .entry((
                    region.to_string(),
                    r.provider.clone(),
                    r.scenario.clone(),
                    r.step,
                ))
                .or_default();
            if measured {
                a.sent += r.firsts;
                a.requests += r.final_n;
                if outcome != Some(Outcome::Ok) {
                    a.failed += r.final_n;
                }
            }
            if outcome == Some(Outcome::Dropped) {
                a.dropped += r.n;
            }
            if r.rps_max > 0.0 {
                a.rps_min = Some(a.rps_min.map_or(r.rps_min, |m: f64| m.min(r.rps_min)));
                a.rps_max = a.rps_max.max(r.rps_max);
            }
            a.slo.judged += r.judged;
            a.slo.met += r.met;
        }
    }

    let mut out = Vec::new();
    for (spec, rate) in &specs {
        let mut metrics = STEP_METRICS.to_vec();
        for m in spec.slo.as_ref().map(bound_metrics).unwrap_or_default() {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        let of_scenario = QueryFilter {
            scenario: Some(spec.name.clone()),
            ..filter.clone()
        };
        // (region, provider, step) → metric → histogram
        let mut hists: BTreeMap<(String, String, u32), BTreeMap<Metric, Histogram<u64>>> =
            BTreeMap::new();
        for (g, h) in merged_histograms(client, db, &of_scenario, &metrics, true).await? {
            hists
                .entry((g.region, g.provider, g.step))
                .or_default()
                .insert(g.metric, h);
        }
        let min_requests = rate
            .search
            .as_ref()
            .map_or(DEFAULT_SEARCH_MIN_REQUESTS, |s| s.min_requests);
        let empty = BTreeMap::new();
        for region in row_regions(plan, filter.region.as_deref()) {
            let region_name = region.unwrap_or(ALL_REGIONS);
            let n_agents = match region {
                Some(r) => agents.get(r).copied().unwrap_or(0),
                None => agents
                    .iter()
                    .filter(|(r, _)| filter.region.as_ref().is_none_or(|f| f == *r))
                    .map(|(_, n)| n)
                    .sum(),
            };
            for provider in &plan.providers {
                let provider = provider.name.as_str();
                if filter.provider.as_deref().is_some_and(|p| p != provider) {
                    continue;
                }
                let mut steps: Vec<u32> = acc
                    .keys()
                    .filter(|k| k.0 == region_name && k.1 == provider && k.2 == spec.name)
                    .map(|k| k.3)
                    .chain(
                        hists
                            .keys()
                            .filter(|k| k.0 == region_name && k.1 == provider)
                            .map(|k| k.2),
                    )
                    .collect();
                if rate.search.is_none() {
                    steps.extend(0..rate.step_count());
                }
                steps.sort_unstable();
                steps.dedup();
                for step in steps {
                    let a = acc
                        .get(&(
                            region_name.to_string(),
                            provider.to_string(),
                            spec.name.clone(),
                            step,
                        ))
                        .copied()
                        .unwrap_or_default();
                    let h = hists
                        .get(&(region_name.to_string(), provider.to_string(), step))
                        .unwrap_or(&empty);
                    let pct = |m: Metric| {
                        h.get(&m)
                            .map(|h| Percentiles::of_list(h, &plan.percentiles))
                    };
                    let planned = rate.step_rps(step).unwrap_or(0.0);
                    let secs = rate.duration_ms as f64 / 1000.0;
                    let goodput = spec.slo.as_ref().map(|slo| {
                        goodput_of(slo, a.slo, goodput_secs_x_agents(spec, n_agents, true), h)
                    });
                    let verdict = goodput
                        .as_ref()
                        .map(|g| slo_stats::step_verdict(g, a.dropped, min_requests));
                    out.push(RateStepRow {
                        region: region_name.to_string(),
                        provider: provider.to_string(),
                        scenario: spec.name.clone(),
                        step,
                        target_rps: a.rps_min.unwrap_or(planned),
                        target_rps_max: if a.rps_min.is_some() {
                            a.rps_max
                        } else {
                            planned
                        },
                        sent: a.sent,
                        dropped: a.dropped,
                        achieved_rps: (n_agents > 0 && secs > 0.0)
                            .then(|| a.sent as f64 / secs / n_agents as f64),
                        error_pct: if a.requests == 0 {
                            0.0
                        } else {
                            a.failed as f64 * 100.0 / a.requests as f64
                        },
                        ttft: pct(Metric::Ttft),
                        tpot: pct(Metric::Tpot),
                        e2e: pct(Metric::E2e),
                        goodput,
                        verdict,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// The SLO search answers of `plan` from its step rows (`steps`, as [`rate_steps`] returns
/// them): per search scenario, region and provider with steps, [`slo_stats::search_row`]
/// of its steps in order.
pub fn searches(plan: &Plan, steps: &[RateStepRow]) -> Vec<SearchRow> {
    let mut out = Vec::new();
    for (spec, rate) in stepped_scenarios(plan, None) {
        let (Some(search), Some(slo)) = (&rate.search, &spec.slo) else {
            continue;
        };
        // Rows come grouped by region, then provider, in step order.
        let mut start = 0;
        while start < steps.len() {
            let first = &steps[start];
            let end = start
                + steps[start..]
                    .iter()
                    .take_while(|s| {
                        s.region == first.region
                            && s.provider == first.provider
                            && s.scenario == first.scenario
                    })
                    .count();
            if first.scenario == spec.name
                && let Some(row) = slo_stats::search_row(slo, search, &steps[start..end])
            {
                out.push(row);
            }
            start = end;
        }
    }
    out
}
