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
use super::slo::{bound_metrics, keeps_row};
use latmesh_results::aggregate::counts_in_error_rates;
use latmesh_results::cache_share::CacheCounts;
use latmesh_results::context_refusal::is_context_refusal;
use latmesh_results::slo_stats::Goodput;
use latmesh_results::summary::ALL_REGIONS;
use latmesh_results::tiers::{
    TIER_METRICS, TierMeasure, TierRow, TokenCountRow, tier_rows_by, token_count_rows,
};

/// (region or `ALL`, provider, scenario).
type CellKey = (String, String, String);

/// The plan's tier scenarios (with `synth`), optionally only `only`.
fn tier_scenarios<'a>(plan: &'a Plan, only: Option<&str>) -> Vec<&'a ScenarioSpec> {
    plan.scenarios
        .iter()
        .filter(|s| s.synth.is_some() && only.is_none_or(|o| o == s.name))
        .collect()
}

/// ` AND warmup = 0 AND scenario IN (…)` of `scenarios`.
fn tier_where(
    filter: &QueryFilter,
    scenarios: &[&ScenarioSpec],
) -> (String, Vec<super::filter::Arg>) {
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
    cache_n: u64,
    cache_cached: u64,
    cache_prompt: u64,
    cache_hot: u64,
}

#[derive(clickhouse::Row, Deserialize)]
struct RefusalRow {
    region: String,
    provider: String,
    scenario: String,
    error_type: String,
    error_code: String,
    error_message: String,
    n: u64,
}

/// Metrics a tier row reads, with the SLO's bound metrics of `spec`.
fn tier_metrics(spec: &ScenarioSpec) -> Vec<Metric> {
    let mut metrics = TIER_METRICS.to_vec();
    for m in spec.slo.as_ref().map(bound_metrics).unwrap_or_default() {
        if !metrics.contains(&m) {
            metrics.push(m);
        }
    }
    metrics
}

/// The tier rows of the stored campaign of `plan` (rows `filter` selects):
/// [`tier_rows_by`] over counters with the rules of the in-memory summary (`ok` attempts;
/// requests ended and failed, `cancelled` and `dropped` left out; final attempts refused for
/// their length, [`is_context_refusal`]; `usage.prompt_tokens` of `ok` attempts that
/// reported it) and the merged TTFT, TTST, prefill-throughput and E2E-per-token histograms.
/// Warm-up rows are left out. `goodput(region, provider, scenario)` is the matrix cell's
/// (`None` without an SLO).
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn tiers(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    plan: &Plan,
    goodput: impl Fn(&str, &str, &str) -> Option<Goodput>,
) -> Result<Vec<TierRow>, StoreError> {
    check_identifier(db)?;
    let specs = tier_scenarios(plan, filter.scenario.as_deref());
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let (wh, args) = tier_where(filter, &specs);
    let sql = format!(
        "SELECT region, provider, scenario, outcome, count() AS n, \
         sum(final_attempt) AS final_n, count(prompt_tokens) AS usage_n, \
         sum(toUInt64(ifNull(prompt_tokens, 0))) AS prompt_sum, {cache} \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, outcome",
        cache = super::matrix::cache_columns()
    );
    let rows: Vec<TierOutcomeRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let mut acc: BTreeMap<CellKey, TierMeasure> = BTreeMap::new();
    let key = |region: &str, provider: &str, scenario: &str| {
        (
            region.to_string(),
            provider.to_string(),
            scenario.to_string(),
        )
    };
    for r in &rows {
        let outcome = Outcome::parse(&r.outcome);
        let measured = outcome.is_none_or(counts_in_error_rates);
        for region in [r.region.as_str(), ALL_REGIONS] {
            let a = acc
                .entry(key(region, &r.provider, &r.scenario))
                .or_default();
            if outcome == Some(Outcome::Ok) {
                a.samples += r.n;
                a.billed_prompt_tokens.0 = a.billed_prompt_tokens.0.saturating_add(r.prompt_sum);
                a.billed_prompt_tokens.1 += r.usage_n;
                a.cache.merge(&CacheCounts {
                    reports: r.cache_n,
                    cached_tokens: r.cache_cached,
                    prompt_tokens: r.cache_prompt,
                    hot: r.cache_hot,
                });
            }
            if measured {
                a.requests += r.final_n;
                if outcome != Some(Outcome::Ok) {
                    a.requests_failed += r.final_n;
                }
            }
        }
    }
    // Final `http_4xx` attempts, grouped by their error: the shared rule says which are
    // refusals for the prompt's length.
    let http_4xx = Outcome::Http4xx.as_str();
    let sql = format!(
        "SELECT region, provider, scenario, \
         ifNull(error_type, '') AS error_type, ifNull(error_code, '') AS error_code, \
         ifNull(error_message, '') AS error_message, count() AS n \
         FROM {db}.requests{wh} AND final_attempt = 1 AND outcome = '{http_4xx}' \
         GROUP BY region, provider, scenario, error_type, error_code, error_message"
    );
    let refusals: Vec<RefusalRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    let some = |t: &str| (!t.is_empty()).then_some(t.to_string());
    for r in &refusals {
        let (code, kind, message) = (
            some(&r.error_code),
            some(&r.error_type),
            some(&r.error_message),
        );
        if is_context_refusal(
            Outcome::Http4xx,
            code.as_deref(),
            kind.as_deref(),
            message.as_deref(),
        ) {
            for region in [r.region.as_str(), ALL_REGIONS] {
                acc.entry(key(region, &r.provider, &r.scenario))
                    .or_default()
                    .context_refused += r.n;
            }
        }
    }
    let mut hists: BTreeMap<CellKey, BTreeMap<Metric, Histogram<u64>>> = BTreeMap::new();
    for spec in &specs {
        let of_scenario = QueryFilter {
            scenario: Some(spec.name.clone()),
            ..filter.clone()
        };
        for (g, h) in
            merged_histograms(client, db, &of_scenario, &tier_metrics(spec), false).await?
        {
            hists
                .entry((g.region, g.provider, g.scenario))
                .or_default()
                .insert(g.metric, h);
        }
    }
    let rows = tier_rows_by(plan, |region, provider, spec| {
        let region = region.unwrap_or(ALL_REGIONS);
        let k = key(region, provider, &spec.name);
        let mut m = acc.get(&k).cloned().unwrap_or_default();
        m.hists = hists.get(&k).cloned().unwrap_or_default();
        m.goodput = goodput(region, provider, &spec.name);
        m
    });
    Ok(rows
        .into_iter()
        .filter(|r| keeps_row(filter, &r.region, &r.provider, &r.scenario))
        .collect())
}

#[derive(clickhouse::Row, Deserialize)]
struct BilledRow {
    provider: String,
    scenario: String,
    billed_sum: u64,
    n: u64,
}

/// How each provider of `plan` counted the generated prompts of the stored campaign (rows
/// `filter` selects, every region merged): [`token_count_rows`] of the sum and count of
/// `usage.prompt_tokens` over `ok`, non-warm-up attempts that reported it, per tier scenario.
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
        "SELECT provider, scenario, sum(toUInt64(assumeNotNull(prompt_tokens))) AS billed_sum, \
         count() AS n FROM {db}.requests{wh} AND outcome = 'ok' \
         AND prompt_tokens IS NOT NULL \
         GROUP BY provider, scenario"
    );
    let rows: Vec<BilledRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    Ok(token_count_rows(plan, |provider, scenario| {
        rows.iter()
            .find(|r| r.provider == provider && r.scenario == scenario)
            .map_or((0, 0), |r| (r.billed_sum, r.n))
    })
    .into_iter()
    .filter(|r| filter.provider.as_deref().is_none_or(|f| f == r.provider))
    .collect())
}
