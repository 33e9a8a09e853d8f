//! The campaign summary: the region × provider matrix per scenario, as JSON (`--json PATH`)
//! and as terminal tables, plus the load models' results (sweep steps and knees, open-loop
//! rates, the agents' start skew; see [`crate::load_stats`]). Percentiles come from merged HDR
//! histograms, never from averaging percentiles, and carry their sample count, support and
//! 95 % intervals ([`Percentiles`]).

use latmesh_core::hist::HistKey;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use crate::agent_summary::AgentSummary;
use crate::aggregate::Aggregate;
use crate::failover_stats::{self, FailoverRow, PolitenessNote};
use crate::load_stats::{self, RowFilter};
pub use crate::load_stats::{AgentStart, RateRow, StartSync, SweepRow};
use crate::model_stats::{self, ModelRow};
use crate::{slo_stats, tiers};

pub use crate::matrix::{ALL_REGIONS, MatrixCell};
pub use crate::percentiles::{PercentilePoint, Percentiles};

/// The summary of one campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Campaign id.
    pub campaign_id: String,
    /// Campaign name.
    pub name: String,
    /// SHA-256 of the plan.
    pub plan_hash: String,
    /// Metric definitions version.
    pub metrics_version: u32,
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
    /// Regions (rows), in plan order.
    pub regions: Vec<String>,
    /// Providers (columns), in plan order.
    pub providers: Vec<String>,
    /// Scenarios, in plan order.
    pub scenarios: Vec<String>,
    /// The percentiles the tables show and each [`Percentiles::points`] holds (the plan's
    /// `percentiles`; P50/P90/P95/P99 in older summaries).
    #[serde(default = "latmesh_core::plan::default_percentiles")]
    pub percentiles: Vec<f64>,
    /// Every (region, provider, scenario) cell, plus `ALL` rows.
    pub cells: Vec<MatrixCell>,
    /// Agents.
    pub agents: Vec<AgentSummary>,
    /// Whether every agent delivered all its results (false when the campaign's deadline
    /// passed first, e.g. an agent died).
    pub complete: bool,
    /// Whether `latmesh campaign cancel` stopped the campaign (what was measured before is
    /// kept; slots not run count as skipped).
    #[serde(default)]
    pub cancelled: bool,
    /// Per `sweep` scenario, region (and `ALL`) and provider: every concurrency step and the
    /// knee.
    #[serde(default)]
    pub sweeps: Vec<SweepRow>,
    /// Per `rate` scenario of one step (rate sweeps and SLO searches are in `rate_steps`),
    /// region (and `ALL`) and provider: achieved rate, drops, lag, latencies from the actual
    /// and the intended send, saturation.
    #[serde(default)]
    pub rates: Vec<RateRow>,
    /// How synchronized the agents' start was (from their done notices; empty for a summary
    /// rebuilt from ClickHouse, which does not store them).
    #[serde(default)]
    pub start: StartSync,
    /// Per failover scenario and region (and `ALL`): the clients' requests through the chain
    /// and the backups' own probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover: Vec<FailoverRow>,
    /// Providers with politeness caps that answered 429 anyway (the agents kept within the
    /// caps: the provider's own limit is lower than configured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub politeness: Vec<PolitenessNote>,
    /// Per provider whose answers named a model or a `system_fingerprint`: what answered
    /// over the campaign, and whether it was another model or changed
    /// ([`crate::model_stats`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelRow>,
    // Budget guard (coordinator/src/budget.rs): `stopped_by`, `stop_reason`, `caps` and
    // `spent` at the top level of the JSON, each absent when unknown.
    /// Per `rate` scenario with several steps or an SLO search, region (and `ALL`), provider
    /// and step: rate, goodput, latencies, verdict ([`crate::slo_stats`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_steps: Vec<crate::slo_stats::RateStepRow>,
    /// Per SLO-search scenario, region (and `ALL`) and provider: the highest rate meeting the
    /// SLO.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<crate::slo_stats::SearchRow>,
    /// Per generated-prompt tier, region (and `ALL`) and provider: latency by input length
    /// ([`crate::tiers`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<crate::tiers::TierRow>,
    /// Per provider that got generated prompts: how it counted their tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_counts: Vec<crate::tiers::TokenCountRow>,
    /// Budget guard: caps, what the records used, whether the guard stopped the campaign.
    #[serde(default, flatten)]
    pub guard: crate::budget::BudgetSummary,
    /// Per generated-prompt scenario (its name in the campaign file): whether this run sent
    /// fresh words or reused the plan's ([`crate::cache_share::text_modes`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub generated_text: BTreeMap<String, latmesh_core::synth::TextMode>,
}

/// Builds the summary of `plan` from merged results (`start` is left empty: the caller fills
/// it from the agents' done notices).
pub fn build(
    campaign_id: &str,
    plan: &Plan,
    start_at_unix_us: i64,
    agg: &Aggregate,
    agents: Vec<AgentSummary>,
) -> Summary {
    let mut cells = Vec::new();
    let rows = load_stats::row_regions(plan, None);
    let per_region = load_stats::agents_per_region(agents.iter().map(|a| a.region.as_str()));
    for scenario in &plan.scenarios {
        for region in &rows {
            let n_agents = match region {
                Some(r) => per_region.get(*r).copied().unwrap_or(0),
                None => agents.len() as u64,
            };
            for provider in &plan.providers {
                cells.push(cell(agg, plan, *region, &provider.name, scenario, n_agents));
            }
        }
    }
    let rate_steps = slo_stats::rate_step_rows(plan, agg, &per_region);
    let searches = slo_stats::search_rows(plan, &rate_steps);
    let tiers = tiers::tier_rows(plan, agg, |region, provider, scenario| {
        let region = region.unwrap_or(ALL_REGIONS);
        cells
            .iter()
            .find(|c| c.region == region && c.provider == provider && c.scenario == scenario)
            .and_then(|c| c.goodput.clone())
    });
    let token_counts = tiers::token_count_rows(plan, |provider, scenario| {
        let c = agg.counts(None, provider, scenario);
        (c.billed_prompt_tokens, c.billed_prompt_reports)
    });
    let politeness = failover_stats::politeness_notes(plan, &cells);
    let models = model_stats::model_rows(&plan.providers, &cells);
    Summary {
        campaign_id: campaign_id.to_string(),
        name: plan.name.clone(),
        plan_hash: plan.hash(),
        metrics_version: plan.metrics_version,
        start_at_unix_us,
        regions: plan.regions.clone(),
        providers: plan.providers.iter().map(|p| p.name.clone()).collect(),
        scenarios: plan.scenarios.iter().map(|s| s.name.clone()).collect(),
        percentiles: plan.percentiles.clone(),
        cells,
        complete: agents.iter().all(|a| a.complete),
        cancelled: false,
        sweeps: load_stats::sweep_rows(plan, agg, RowFilter::default(), &agents),
        rates: load_stats::rate_rows(plan, agg, &agents),
        start: StartSync::default(),
        failover: failover_stats::failover_rows(plan, agg),
        politeness,
        models,
        agents,
        guard: Default::default(),
        rate_steps,
        searches,
        tiers,
        token_counts,
        generated_text: crate::cache_share::text_modes(plan),
    }
}

/// One matrix cell; `agents` ran the row (for goodput per second).
fn cell(
    agg: &Aggregate,
    plan: &Plan,
    region: Option<&str>,
    provider: &str,
    spec: &ScenarioSpec,
    agents: u64,
) -> MatrixCell {
    let scenario = spec.name.as_str();
    let percentiles = &plan.percentiles;
    let hist = |metric| {
        agg.histogram(
            region,
            &HistKey {
                provider: provider.into(),
                scenario: scenario.into(),
                metric,
                step: 0,
            },
        )
    };
    let counts = agg.counts(region, provider, scenario);
    let attempts = counts.attempts();
    let ok = counts.count(Outcome::Ok);
    // Attempts aborted by a campaign cancel, and arrivals or rounds probes dropped unsent, are
    // left out of the rates.
    let dropped = counts.count(Outcome::Dropped);
    let measured = attempts - counts.count(Outcome::Cancelled) - dropped;
    let pct = |n: u64| {
        if measured == 0 {
            0.0
        } else {
            n as f64 * 100.0 / measured as f64
        }
    };
    let p50 = |metric| hist(metric).map(|h| h.value_at_quantile(0.5) as f64 / 1000.0);
    let (answered_models, answered_models_more) =
        model_stats::most_frequent(&counts.answered_models);
    let (system_fingerprints, system_fingerprints_more) =
        model_stats::most_frequent(&counts.system_fingerprints);
    MatrixCell {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        scenario: scenario.to_string(),
        attempts,
        samples: ok,
        ttft: hist(Metric::Ttft).map(|h| Percentiles::of_list(&h, percentiles)),
        ttfc: hist(Metric::Ttfc).map(|h| Percentiles::of_list(&h, percentiles)),
        e2e: hist(Metric::E2e).map(|h| Percentiles::of_list(&h, percentiles)),
        tpot_p50_ms: p50(Metric::Tpot),
        itl_p50_ms: p50(Metric::Itl),
        error_pct: pct(measured - ok),
        dropped,
        requests: counts.requests,
        request_error_pct: if counts.requests == 0 {
            0.0
        } else {
            counts.requests_failed as f64 * 100.0 / counts.requests as f64
        },
        throttled_pct: pct(counts.count(Outcome::Throttled)),
        output_tokens_mean: (ok > 0).then(|| counts.ok_output_tokens as f64 / ok as f64),
        tokens_from_usage: counts.ok_tokens_from_usage,
        tokens_over_usage: counts.ok_tokens_over_usage,
        conn_retried: counts.conn_retried,
        usage_chunk_delta_mean: (counts.ok_usage_reports > 0)
            .then(|| counts.ok_usage_chunk_delta_sum as f64 / counts.ok_usage_reports as f64),
        usage_chunk_mismatches: counts.ok_usage_chunk_mismatches,
        answered_models,
        answered_models_more,
        system_fingerprints,
        system_fingerprints_more,
        last_error: counts.last_error.clone(),
        outcomes: counts
            .outcomes
            .iter()
            .map(|(o, n)| (o.as_str().to_string(), *n))
            .collect(),
        goodput: slo_stats::cell_goodput(
            plan,
            spec,
            counts.slo_judged,
            counts.slo_met,
            agents,
            hist,
        ),
        warmup: counts.warmup,
        cached_share: counts.cache.share(crate::cache_share::caching_asked(spec)),
        phase_start_in_flight: counts.phase_start_in_flight,
    }
}

impl Summary {
    /// The cell of (`region`, `provider`, `scenario`).
    pub fn cell(&self, region: &str, provider: &str, scenario: &str) -> Option<&MatrixCell> {
        self.cells
            .iter()
            .find(|c| c.region == region && c.provider == provider && c.scenario == scenario)
    }
}
