//! SLO goodput, open-loop rate steps and the SLO search's answers of a stored campaign
//! ([`slo_counts`], [`rate_steps`], [`searches`]), built by the same functions as the
//! coordinator's summary in memory ([`latmesh_results::slo_stats`]: `cell_goodput`,
//! `rate_step_rows_by`, `search_rows`) from counters that follow
//! [`latmesh_results::aggregate`]'s rules.
//!
//! Warm-up rows (`warmup = 1`) are left out of every figure; the matrix counts their final
//! attempts apart. Judged requests are rows with a stored `slo_met` (the agent sets it on
//! final attempts of first turns of SLO scenarios, never on `cancelled` or `dropped` ones). A
//! step's latencies come from its merged histograms (`histograms.step`).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use latmesh_core::slo::Slo;
use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use super::histograms::merged_histograms;
use latmesh_results::aggregate::{RateStepCounts, counts_in_error_rates};
use latmesh_results::slo_stats::{
    self, RateStepMeasure, RateStepRow, STEP_METRICS, SearchRow, has_rate_steps,
};
use latmesh_results::summary::ALL_REGIONS;

/// The SQL condition of a request judged against the SLO (`CellCounts::slo_judged`): not
/// warm-up, with a stored `slo_met`.
pub(super) const JUDGED_SQL: &str = "warmup = 0 AND slo_met IS NOT NULL";

/// (region or `ALL`, provider, scenario, step).
pub(super) type StepKey = (String, String, String, u32);

/// Warm-up requests and judged requests of one (region, provider, scenario, step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SloCounts {
    /// Warm-up requests: final attempts of `warmup = 1` rows (`CellCounts::warmup`).
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

/// Warm-up requests and judged/met requests of the `requests` rows `filter` selects, per
/// region and `ALL`, provider, scenario and, with `by_step`, step (else every step merged
/// under 0).
pub(super) async fn slo_counts(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    by_step: bool,
) -> Result<BTreeMap<StepKey, SloCounts>, StoreError> {
    check_identifier(db)?;
    let (wh, args) = where_clause(filter, "send_unix_us", "send_time");
    let sql = format!(
        "SELECT region, provider, scenario, step, \
         countIf(warmup = 1 AND final_attempt = 1) AS warmup_n, \
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

/// Agents per region of the regions `filter` keeps (all of them without a region filter):
/// the `ALL` rows count these.
pub(super) fn kept_agents(
    agents: &BTreeMap<String, u64>,
    filter: &QueryFilter,
) -> BTreeMap<String, u64> {
    agents
        .iter()
        .filter(|(r, _)| filter.region.as_ref().is_none_or(|f| f == *r))
        .map(|(r, n)| (r.clone(), *n))
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
    rps_n: u64,
    rps_min: f64,
    rps_max: f64,
    judged: u64,
    met: u64,
}

/// The rate steps of the stored campaign of `plan` (rows `filter` selects):
/// [`slo_stats::rate_step_rows_by`] over counters grouped by `step` with the rules of
/// [`RateStepCounts`] (arrivals sent: first attempts of first turns, neither `cancelled`
/// nor `dropped`; `dropped` arrivals; requests ended and failed; judged and met requests;
/// the lowest and highest positive `target_rps`) and each step's merged TTFT, TPOT and E2E
/// histograms (plus the metrics of the SLO's percentile bounds). Warm-up rows are left out.
/// `agents` holds the agents per region.
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
    let specs: Vec<_> = plan
        .scenarios
        .iter()
        .filter(|s| filter.scenario.as_deref().is_none_or(|o| o == s.name))
        .filter(|s| matches!(&s.load, LoadModel::Rate(r) if has_rate_steps(r)))
        .collect();
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let list = specs
        .iter()
        .map(|s| sql_string(&s.name))
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
         countIf(target_rps > 0) AS rps_n, \
         minIf(target_rps, target_rps > 0) AS rps_min, \
         maxIf(target_rps, target_rps > 0) AS rps_max, \
         countIf({JUDGED_SQL}) AS judged, \
         countIf({JUDGED_SQL} AND ifNull(slo_met, 0) = 1) AS met \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, step, outcome"
    );
    let rows: Vec<StepOutcomeRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let mut counts: BTreeMap<StepKey, RateStepCounts> = BTreeMap::new();
    for r in &rows {
        let outcome = Outcome::parse(&r.outcome);
        let measured = outcome.is_none_or(counts_in_error_rates);
        let mut c = RateStepCounts::default();
        if measured {
            c.sent = r.firsts;
            c.requests = r.final_n;
            if outcome != Some(Outcome::Ok) {
                c.failed = r.final_n;
            }
        }
        if outcome == Some(Outcome::Dropped) {
            c.dropped = r.n;
        }
        if r.rps_n > 0 {
            c.see_rps(r.rps_min);
            c.see_rps(r.rps_max);
        }
        c.slo_judged = r.judged;
        c.slo_met = r.met;
        for region in [r.region.as_str(), ALL_REGIONS] {
            counts
                .entry((
                    region.to_string(),
                    r.provider.clone(),
                    r.scenario.clone(),
                    r.step,
                ))
                .or_default()
                .add(&c);
        }
    }
    let mut hists: BTreeMap<StepKey, BTreeMap<Metric, Histogram<u64>>> = BTreeMap::new();
    for spec in &specs {
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
        for (g, h) in merged_histograms(client, db, &of_scenario, &metrics, true).await? {
            hists
                .entry((g.region, g.provider, g.scenario, g.step))
                .or_default()
                .insert(g.metric, h);
        }
    }
    let kept = kept_agents(agents, filter);
    let rows = slo_stats::rate_step_rows_by(plan, &kept, |region, provider, scenario, step| {
        let key = (
            region.unwrap_or(ALL_REGIONS).to_string(),
            provider.to_string(),
            scenario.to_string(),
            step,
        );
        RateStepMeasure {
            counts: counts.get(&key).copied().unwrap_or_default(),
            hists: hists.get(&key).cloned().unwrap_or_default(),
        }
    });
    Ok(rows.into_iter().filter(|r| keeps(filter, r)).collect())
}

/// Whether `filter` keeps a row of `region` (or `ALL`), `provider` and `scenario`.
pub(super) fn keeps_row(
    filter: &QueryFilter,
    region: &str,
    provider: &str,
    scenario: &str,
) -> bool {
    (region == ALL_REGIONS || filter.region.as_deref().is_none_or(|f| f == region))
        && filter.provider.as_deref().is_none_or(|f| f == provider)
        && filter.scenario.as_deref().is_none_or(|f| f == scenario)
}

fn keeps(filter: &QueryFilter, r: &RateStepRow) -> bool {
    keeps_row(filter, &r.region, &r.provider, &r.scenario)
}

/// The SLO search answers of `plan` from its step rows (`steps`, as [`rate_steps`] returns
/// them): [`slo_stats::search_rows`].
pub fn searches(plan: &Plan, steps: &[RateStepRow]) -> Vec<SearchRow> {
    slo_stats::search_rows(plan, steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_filter_keeps_that_region_and_all() {
        let agents: BTreeMap<String, u64> = [("a".to_string(), 2), ("b".to_string(), 3)].into();
        let f = QueryFilter {
            region: Some("b".into()),
            provider: Some("p".into()),
            ..QueryFilter::campaign("c")
        };
        assert_eq!(kept_agents(&agents, &f), [("b".to_string(), 3)].into());
        assert_eq!(kept_agents(&agents, &QueryFilter::campaign("c")), agents);
        assert!(keeps_row(&f, "b", "p", "s") && keeps_row(&f, ALL_REGIONS, "p", "s"));
        assert!(!keeps_row(&f, "a", "p", "s") && !keeps_row(&f, "b", "q", "s"));
    }
}
