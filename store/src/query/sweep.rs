//! A campaign's concurrency sweeps step by step ([`sweep`], `latmesh query sweep`), computed as
//! the coordinator's summary computes them.

use std::collections::BTreeMap;

use latmesh_core::load::SweepSpec;
use latmesh_core::metrics::Metric;
use latmesh_core::record::Outcome;
use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::campaign::{agents, stored_plan};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use super::histograms::merged_histograms;
use latmesh_results::aggregate::counts_in_error_rates;
use latmesh_results::load_stats::{self, RowFilter, StepMeasure, SweepRow};
use latmesh_results::summary::{ALL_REGIONS, Percentiles};

#[derive(clickhouse::Row, Deserialize)]
struct StepOutcomeCount {
    region: String,
    provider: String,
    scenario: String,
    step: u32,
    outcome: String,
    final_n: u64,
    output_tokens: u64,
}

/// The sweep results of the stored campaign `filter.campaign_id`, exactly as the
/// coordinator's summary computes them ([`latmesh_results::load_stats::sweep_rows`]): per `sweep`
/// scenario (of the stored plan), region (and `ALL`: the regions the filter keeps, merged) and
/// provider, every step's requests, ok and error % (final attempts of `load = 'sweep'` rows of
/// `requests`, grouped by `step`; `cancelled` and `dropped` left out), TTFT and E2E at the
/// plan's percentiles with their support and intervals, and the knee metric's percentile (from
/// each step's merged histograms, [`merged_histograms`]), throughput over `step_ms`, and the knee ([`latmesh_core::load::find_knee`],
/// computed here from those rows). Ordered by scenario, region (`ALL` last), provider, each
/// in plan order; steps without data are present with zero counts.
///
/// # Errors
/// [`StoreError::Rejected`] without `filter.campaign_id`, for a campaign that is not stored or
/// whose plan does not parse; [`StoreError::InvalidName`] for a bad `db`; the server's or
/// connection's error otherwise.
pub async fn sweep(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<Vec<SweepRow>, StoreError> {
    check_identifier(db)?;
    let rejected = |message: String| StoreError::Rejected {
        code: None,
        message,
    };
    let id = filter
        .campaign_id
        .as_deref()
        .ok_or_else(|| rejected("sweep results are of one campaign: give one".into()))?;
    let plan = stored_plan(client, db, id)
        .await?
        .ok_or_else(|| rejected(format!("campaign {id:?} is not in {db}.campaigns")))?;
    let specs: Vec<(&str, &SweepSpec)> = load_stats::sweep_scenarios(&plan)
        .into_iter()
        .filter(|(s, _)| filter.scenario.as_deref().is_none_or(|f| f == *s))
        .collect();
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let scenario_list = specs
        .iter()
        .map(|(s, _)| sql_string(s))
        .collect::<Vec<_>>()
        .join(", ");

    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    and_where(
        &mut wh,
        &format!("`load` = 'sweep' AND warmup = 0 AND scenario IN ({scenario_list})"),
    );
    let sql = format!(
        "SELECT region, provider, scenario, step, outcome, sum(final_attempt) AS final_n, \
         sum(output_tokens) AS tokens \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, step, outcome"
    );
    let counts: Vec<StepOutcomeCount> = bind_all(client.query(&sql), &args).fetch_all().await?;
    // (region or ALL, provider, scenario, step)
    type StepKey = (String, String, String, u32);
    let mut steps: BTreeMap<StepKey, StepMeasure> = BTreeMap::new();
    for c in &counts {
        let measured = Outcome::parse(&c.outcome).is_none_or(counts_in_error_rates);
        let ok = c.outcome == Outcome::Ok.as_str();
        for region in [c.region.as_str(), ALL_REGIONS] {
            let m = steps
                .entry((
                    region.to_string(),
                    c.provider.clone(),
                    c.scenario.clone(),
                    c.step,
                ))
                .or_default();
            if measured {
                m.counts.requests += c.final_n;
                if ok {
                    m.counts.ok += c.final_n;
                }
            }
            if ok {
                m.counts.ok_output_tokens =
                    m.counts.ok_output_tokens.saturating_add(c.output_tokens);
            }
        }
    }

    // Each step's merged histograms give its percentiles (the plan's list) and the knee
    // metric's value, as in memory.
    for (scenario, spec) in &specs {
        let mut metrics = vec![Metric::Ttft, Metric::E2e];
        if !metrics.contains(&spec.knee.metric) {
            metrics.push(spec.knee.metric);
        }
        let of_scenario = QueryFilter {
            scenario: Some(scenario.to_string()),
            ..filter.clone()
        };
        for (g, h) in merged_histograms(client, db, &of_scenario, &metrics, true).await? {
            let m = steps
                .entry((
                    g.region.clone(),
                    g.provider.clone(),
                    g.scenario.clone(),
                    g.step,
                ))
                .or_default();
            match g.metric {
                Metric::Ttft => m.ttft = Some(Percentiles::of_list(&h, &plan.percentiles)),
                Metric::E2e => m.e2e = Some(Percentiles::of_list(&h, &plan.percentiles)),
                _ => {}
            }
            if spec.knee.metric == g.metric {
                let q = load_stats::knee_quantile(&spec.knee);
                m.knee_us = Some(h.value_at_quantile(q));
                m.knee_ci_us = latmesh_results::stats::interval_us(&h, q);
            }
        }
    }
    let only = RowFilter {
        region: filter.region.as_deref(),
        provider: filter.provider.as_deref(),
        scenario: filter.scenario.as_deref(),
    };
    let stored_agents = agents(client, db, id).await?;
    let per_region = load_stats::agents_per_region(stored_agents.iter().map(|a| a.region.as_str()));
    Ok(load_stats::sweep_rows_by(
        &plan,
        only,
        &per_region,
        |region, provider, scenario, _, step| {
            steps
                .get(&(
                    region.unwrap_or(ALL_REGIONS).to_string(),
                    provider.to_string(),
                    scenario.to_string(),
                    step,
                ))
                .copied()
                .unwrap_or_default()
        },
    ))
}
