//! Generated-prompt tiers of a stored campaign ([`tiers`]) and how each provider counted
//! their tokens ([`token_counts`]), with the rules of [`latmesh_results::tiers`] the
//! coordinator's summary applies in memory. Warm-up rows are left out.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{Plan, ScenarioSpec};
use latmesh_core::record::Outcome;
use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use super::histograms::merged_histograms;
use super::slo::{SloCounts, StepKey, bound_metrics, goodput_of, goodput_secs_x_agents};
use latmesh_results::aggregate::counts_in_error_rates;
use latmesh_results::context_refusal::is_context_refusal;
use latmesh_results::load_stats::row_regions;
use latmesh_results::summary::{ALL_REGIONS, Percentiles};
use latmesh_results::tiers::{TierRow, TokenCountRow, token_count_row};

/// The plan's tier scenarios (with `synth`), optionally only `only`.
fn tier_scenarios<'a>(plan: &'a Plan, only: Option<&str>) -> Vec<&'a ScenarioSpec> {
    plan.scenarios
        .iter()
        .filter(|s| s.synth.is_some() && only.is_none_or(|o| o == s.name))
        .collect()
}

/// ` AND warmup = 0 AND scenario IN (…)` of `scenarios`.
fn tier_where(filter: &QueryFilter, scenarios: &[&ScenarioSpec]) -> (String, Vec<super::filter::Arg>) {
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    let list = scenarios
        .iter()
        .map(|s| sql_string(&s.name))
        .collect::<Vec<_>>()
        .join(", ");
    and_where(&mut wh, &format!("warmup = 0 AND scenario IN ({list})"));
    (wh, args)
}

#[derive(clickhouse::Row, Deserialize)]
struct TierOutcomeRow {
    region: String,
    provider: String,
    scenario: String,
    outcome: String,
    n: u64,
    final_n: u64,
    usage_n: u64,
    prompt_sum: u64,
    judged: u64,
    met: u64,
}

#[derive(clickhouse::Row, Deserialize)]
struct RefusalRow {
    region: String,
    provider: String,
    scenario: String,
    status: u16,
    error_type: String,
    error_code: String,
    error_message: String,
    n: u64,
}

/// What a tier cell's rows add up to.
#[derive(Clone, Copy, Debug, Default)]
struct TierAcc {
    ok: u64,
    requests: u64,
    failed: u64,
    usage_n: u64,
    prompt_sum: u64,
    refused: u64,
    slo: SloCounts,
}

/// Metrics a tier row reads.
const TIER_METRICS: [Metric; 4] = [
    Metric::Ttft,
    Metric::Ttst,
    Metric::PrefillTps,
    Metric::E2ePerToken,
];

/// The tier rows of the stored campaign of `plan` (rows `filter` selects): per tier scenario
/// (plan order), region (plan order, then `ALL`) and provider (plan order) with data, the
/// `ok` attempts (`samples`), failed requests % (final attempts, `cancelled` and `dropped`
/// left out), requests refused for their length ([`is_context_refusal`] of final attempts),
/// TTFT at the plan's percentiles and the TTST, prefill-throughput (tokens/s) and
/// E2E-per-token medians from the merged histograms, the mean billed `prompt_tokens` of `ok`
/// attempts that reported usage, and goodput under the scenario's SLO. Warm-up rows are left
/// out. `agents` holds the agents per region.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn tiers(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    plan: &Plan,
    agents: &BTreeMap<String, u64>,
) -> Result<Vec<TierRow>, StoreError> {
    check_identifier(db)?;
    let specs = tier_scenarios(plan, filter.scenario.as_deref());
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let (wh, args) = tier_where(filter, &specs);
    let judged = super::slo::JUDGED_SQL;
    let sql = format!(
        "SELECT region, provider, scenario, outcome, count() AS n, \
         sum(final_attempt) AS final_n, count(prompt_tokens) AS usage_n, \
         sum(toUInt64(ifNull(prompt_tokens, 0))) AS prompt_sum, \
         countIf({judged}) AS judged, countIf({judged} AND ifNull(slo_met, 0) = 1) AS met \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, outcome"
    );
    let rows: Vec<TierOutcomeRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let mut acc: BTreeMap<StepKey, TierAcc> = BTreeMap::new();
    let key = |region: &str, provider: &str, scenario: &str| {
        (
            region.to_string(),
            provider.to_string(),
            scenario.to_string(),
            0,
        )
    };
    for r in &rows {
        let outcome = Outcome::parse(&r.outcome);
        let measured = outcome.is_none_or(counts_in_error_rates);
        for region in [r.region.as_str(), ALL_REGIONS] {
            let a = acc.entry(key(region, &r.provider, &r.scenario)).or_default();
            if outcome == Some(Outcome::Ok) {
                a.ok += r.n;
                a.usage_n += r.usage_n;
                a.prompt_sum = a.prompt_sum.saturating_add(r.prompt_sum);
            }
            if measured {
                a.requests += r.final_n;
                if outcome != Some(Outcome::Ok) {
                    a.failed += r.final_n;
                }
            }
            a.slo.judged += r.judged;
            a.slo.met += r.met;
        }
    }
    let sql = format!(
        "SELECT region, provider, scenario, ifNull(http_status, toUInt16(0)) AS status, \
         ifNull(error_type, '') AS error_type, ifNull(error_code, '') AS error_code, \
         ifNull(error_message, '') AS error_message, count() AS n \
         FROM {db}.requests{wh} AND final_attempt = 1 AND outcome != 'ok' \
         AND http_status IN (400, 413) \
         GROUP BY region, provider, scenario, status, error_type, error_code, error_message"
    );
    let refusals: Vec<RefusalRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    for r in &refusals {
        let texts = [
            r.error_type.as_str(),
            r.error_code.as_str(),
            r.error_message.as_str(),
        ];
        if is_context_refusal(Some(r.status), texts) {
            for region in [r.region.as_str(), ALL_REGIONS] {
                acc.entry(key(region, &r.provider, &r.scenario))
                    .or_default()
                    .refused += r.n;
            }
        }
    }

    let mut out = Vec::new();
    for spec in specs {
        let Some(synth) = &spec.synth else { continue };
        let mut metrics = TIER_METRICS.to_vec();
        for m in spec.slo.as_ref().map(bound_metrics).unwrap_or_default() {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
        let of_scenario = QueryFilter {
            scenario: Some(spec.name.clone()),
            ..filter.clone()
        };
        let mut hists: BTreeMap<(String, String), BTreeMap<Metric, Histogram<u64>>> =
            BTreeMap::new();
        for (g, h) in merged_histograms(client, db, &of_scenario, &metrics, false).await? {
            hists
                .entry((g.region, g.provider))
                .or_default()
                .insert(g.metric, h);
        }
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
                let a = acc.get(&key(region_name, provider, &spec.name)).copied();
                let h = hists.get(&(region_name.to_string(), provider.to_string()));
                if a.is_none() && h.is_none() {
                    continue;
                }
                let a = a.unwrap_or_default();
                let empty = BTreeMap::new();
                let h = h.unwrap_or(&empty);
                let p50 = |m: Metric| h.get(&m).map(|h| h.value_at_quantile(0.5));
                out.push(TierRow {
                    region: region_name.to_string(),
                    provider: provider.to_string(),
                    group: synth.group.clone(),
                    scenario: spec.name.clone(),
                    input_tokens: synth.input_tokens,
                    samples: a.ok,
                    error_pct: if a.requests == 0 {
                        0.0
                    } else {
                        a.failed as f64 * 100.0 / a.requests as f64
                    },
                    context_refused: a.refused,
                    ttft: h
                        .get(&Metric::Ttft)
                        .map(|h| Percentiles::of_list(h, &plan.percentiles)),
                    ttst_p50_ms: p50(Metric::Ttst).map(|us| us as f64 / 1000.0),
                    // Prefill throughput's histogram holds tokens/s, not µs.
                    prefill_tps_p50: p50(Metric::PrefillTps).map(|v| v as f64),
                    e2e_per_token_p50_ms: p50(Metric::E2ePerToken).map(|us| us as f64 / 1000.0),
                    billed_prompt_tokens_mean: (a.usage_n > 0)
                        .then(|| a.prompt_sum as f64 / a.usage_n as f64),
                    goodput: spec.slo.as_ref().map(|slo| {
                        goodput_of(slo, a.slo, goodput_secs_x_agents(spec, n_agents, false), h)
                    }),
                });
            }
        }
    }
    Ok(out)
}

#[derive(clickhouse::Row, Deserialize)]
struct BilledRow {
    provider: String,
    input_tokens: u32,
    billed_sum: u64,
    n: u64,
}

/// How each provider (plan order) counted the generated prompts of the stored campaign of
/// `plan` (rows `filter` selects, every region merged): the mean `usage.prompt_tokens` of
/// `ok`, non-warm-up attempts that reported it, per tier (`input_tokens`), through
/// [`token_count_row`]. Providers without such an attempt are left out.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn token_counts(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    plan: &Plan,
) -> Result<Vec<TokenCountRow>, StoreError> {
    check_identifier(db)?;
    let specs = tier_scenarios(plan, filter.scenario.as_deref());
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let (wh, args) = tier_where(filter, &specs);
    let sql = format!(
        "SELECT provider, input_tokens, sum(toUInt64(assumeNotNull(prompt_tokens))) AS billed_sum, \
         count() AS n FROM {db}.requests{wh} AND outcome = 'ok' \
         AND prompt_tokens IS NOT NULL AND input_tokens > 0 \
         GROUP BY provider, input_tokens"
    );
    let rows: Vec<BilledRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    Ok(plan
        .providers
        .iter()
        .filter_map(|p| {
            let tiers: Vec<(u32, f64, u64)> = rows
                .iter()
                .filter(|r| r.provider == p.name)
                .map(|r| (r.input_tokens, r.billed_sum as f64 / r.n.max(1) as f64, r.n))
                .collect();
            token_count_row(&p.name, tiers)
        })
        .collect())
}
