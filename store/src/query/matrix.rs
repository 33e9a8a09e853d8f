//! The region × provider matrix ([`matrix`], [`matrix_percentiles`]): attempt counts by outcome,
//! answered models and fingerprints, and exact percentiles from the merged histograms, cell by
//! cell as the coordinator's summary builds them ([`MatrixRow::to_cell`]).

use std::collections::BTreeMap;

use latmesh_core::metrics::Metric;
use latmesh_core::plan::DEFAULT_PERCENTILES;
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::campaign::{agents, stored_plan};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use super::histograms::merged_histograms;
use super::slo::{bound_metrics, kept_agents, slo_counts};
use hdrhistogram::Histogram;
use latmesh_results::aggregate::{count_name, counts_in_error_rates};
use latmesh_results::cache_share::{CacheCounts, CachedShare, HOT_SHARE, caching_asked};
use latmesh_results::model_stats;
use latmesh_results::slo_stats::{self, Goodput};
use latmesh_results::summary::{ALL_REGIONS, MatrixCell, Percentiles};

/// One cell of the matrix from ClickHouse: a region (or `ALL`), a provider, a scenario.
/// Units match [`MatrixCell`]: percentiles in ms (µs / 1000 as `f64`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// Region, or `ALL` for every region (of the filter) merged.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Attempts of any outcome (`requests` rows).
    pub attempts: u64,
    /// `ok` attempts.
    pub samples: u64,
    /// `throttled` attempts.
    pub throttled: u64,
    /// Attempts by outcome name.
    pub outcomes: BTreeMap<String, u64>,
    /// Sum of `output_tokens` over `ok` attempts.
    pub ok_output_tokens: u64,
    /// `ok` attempts whose output tokens came from `usage`.
    pub tokens_from_usage: u64,
    /// `ok` attempts whose token payloads outnumbered usage and were the count.
    pub tokens_over_usage: u64,
    /// Attempts sent again on a new connection (`conn_retried`).
    pub conn_retried: u64,
    /// Attempts by the `model` the provider answered with.
    pub answered_models: BTreeMap<String, u64>,
    /// Attempts by the `system_fingerprint` the provider answered with.
    pub system_fingerprints: BTreeMap<String, u64>,
    /// Logical requests (rows with `final_attempt`; `cancelled` and `dropped` left out).
    pub requests: u64,
    /// Logical requests whose final attempt was not `ok`.
    pub requests_failed: u64,
    /// Over `ok` attempts that reported usage: their count, the sum of `usage_chunk_delta`,
    /// and how many had a non-zero delta.
    pub ok_usage_reports: u64,
    /// Sum of `usage_chunk_delta` over `ok` attempts.
    pub ok_usage_chunk_delta_sum: i64,
    /// `ok` attempts whose `usage_chunk_delta` was not 0.
    pub ok_usage_chunk_mismatches: u64,
    /// Warm-up rows (`warmup = 1`): stored, left out of every other figure of the row.
    #[serde(default)]
    pub warmup: u64,
    /// The most `phase_start_in_flight` of the row's records (phase hygiene).
    #[serde(default)]
    pub phase_start_in_flight: u64,
    /// Goodput under the scenario's SLO (stored plan), `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// TTFT percentiles (P50/P90/P95/P99, `n`, the campaign's list with support and
    /// intervals), ms.
    pub ttft: Option<Percentiles>,
    /// TTFC percentiles, ms.
    pub ttfc: Option<Percentiles>,
    /// E2E percentiles, ms.
    pub e2e: Option<Percentiles>,
    /// TPOT percentiles, ms.
    pub tpot: Option<Percentiles>,
    /// ITL percentiles, ms.
    pub itl: Option<Percentiles>,
    /// Values in the merged histograms, by metric name.
    pub hist_samples: BTreeMap<String, u64>,
    /// The latest failed attempt (by send time; `dropped` left out), described as the
    /// summary does (`outcome (status): type: message`), with its send time, agent µs.
    pub last_error: Option<(u64, String)>,
    /// Prompt-cache counters of `ok` attempts ([`latmesh_results::cache_share`]).
    #[serde(default)]
    pub cache: CacheCounts,
    /// The cached share of [`MatrixRow::cache`], judged against the stored plan's scenario
    /// (absent when no attempt reported a cached count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<CachedShare>,
}

impl MatrixRow {
    fn new(region: &str, provider: &str, scenario: &str) -> Self {
        MatrixRow {
            region: region.to_string(),
            provider: provider.to_string(),
            scenario: scenario.to_string(),
            attempts: 0,
            samples: 0,
            throttled: 0,
            outcomes: BTreeMap::new(),
            ok_output_tokens: 0,
            tokens_from_usage: 0,
            tokens_over_usage: 0,
            conn_retried: 0,
            answered_models: BTreeMap::new(),
            system_fingerprints: BTreeMap::new(),
            requests: 0,
            requests_failed: 0,
            ok_usage_reports: 0,
            ok_usage_chunk_delta_sum: 0,
            ok_usage_chunk_mismatches: 0,
            warmup: 0,
            phase_start_in_flight: 0,
            goodput: None,
            ttft: None,
            ttfc: None,
            e2e: None,
            tpot: None,
            itl: None,
            hist_samples: BTreeMap::new(),
            last_error: None,
            cache: CacheCounts::default(),
            cached_share: None,
        }
    }

    fn outcome(&self, o: Outcome) -> u64 {
        self.outcomes.get(o.as_str()).copied().unwrap_or(0)
    }

    /// Attempts neither aborted by a campaign cancel (outcome `cancelled`) nor dropped unsent
    /// (outcome `dropped`).
    fn measured(&self) -> u64 {
        self.attempts - self.outcome(Outcome::Cancelled) - self.outcome(Outcome::Dropped)
    }

    fn pct(&self, n: u64) -> f64 {
        let measured = self.measured();
        if measured == 0 {
            0.0
        } else {
            n as f64 * 100.0 / measured as f64
        }
    }

    /// Attempts whose outcome is not `ok`, % of attempts (0 without attempts; `cancelled`
    /// and `dropped` attempts left out of both).
    pub fn error_pct(&self) -> f64 {
        self.pct(self.measured() - self.samples)
    }

    /// `throttled` attempts, % of attempts.
    pub fn throttled_pct(&self) -> f64 {
        self.pct(self.throttled)
    }

    /// Mean output tokens of `ok` attempts.
    pub fn output_tokens_mean(&self) -> Option<f64> {
        (self.samples > 0).then(|| self.ok_output_tokens as f64 / self.samples as f64)
    }

    /// The same cell as the coordinator's in-memory summary builds it (same units, same
    /// arithmetic), except which failure is `last_error`: here the latest by send time (in
    /// memory the last to arrive, and for `ALL` the last region's).
    pub fn to_cell(&self) -> MatrixCell {
        let (answered_models, answered_models_more) =
            model_stats::most_frequent(&self.answered_models);
        let (system_fingerprints, system_fingerprints_more) =
            model_stats::most_frequent(&self.system_fingerprints);
        MatrixCell {
            region: self.region.clone(),
            provider: self.provider.clone(),
            scenario: self.scenario.clone(),
            attempts: self.attempts,
            samples: self.samples,
            ttft: self.ttft,
            ttfc: self.ttfc,
            e2e: self.e2e,
            tpot_p50_ms: self.tpot.map(|p| p.p50_ms),
            itl_p50_ms: self.itl.map(|p| p.p50_ms),
            error_pct: self.error_pct(),
            dropped: self.outcome(Outcome::Dropped),
            throttled_pct: self.throttled_pct(),
            output_tokens_mean: self.output_tokens_mean(),
            tokens_from_usage: self.tokens_from_usage,
            tokens_over_usage: self.tokens_over_usage,
            conn_retried: self.conn_retried,
            answered_models,
            answered_models_more,
            system_fingerprints,
            system_fingerprints_more,
            requests: self.requests,
            request_error_pct: if self.requests == 0 {
                0.0
            } else {
                self.requests_failed as f64 * 100.0 / self.requests as f64
            },
            usage_chunk_delta_mean: (self.ok_usage_reports > 0)
                .then(|| self.ok_usage_chunk_delta_sum as f64 / self.ok_usage_reports as f64),
            usage_chunk_mismatches: self.ok_usage_chunk_mismatches,
            last_error: self.last_error.as_ref().map(|e| e.1.clone()),
            outcomes: self.outcomes.clone(),
            goodput: self.goodput.clone(),
            warmup: self.warmup,
            cached_share: self.cached_share.clone(),
            phase_start_in_flight: self.phase_start_in_flight,
        }
    }
}

/// The matrix of campaign `campaign_id`, optionally of one scenario: [`matrix_filtered`] with
/// [`QueryFilter::campaign`].
///
/// # Errors
/// As [`matrix_filtered`].
pub async fn matrix(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
    scenario: Option<&str>,
) -> Result<Vec<MatrixRow>, StoreError> {
    let mut filter = QueryFilter::campaign(campaign_id);
    filter.scenario = scenario.map(str::to_string);
    matrix_filtered(client, db, &filter).await
}

#[derive(clickhouse::Row, Deserialize)]
struct OutcomeCount {
    region: String,
    provider: String,
    scenario: String,
    outcome: String,
    n: u64,
    output_tokens: u64,
    from_usage: u64,
    over_usage: u64,
    conn_retried: u64,
    final_n: u64,
    usage_n: u64,
    delta_sum: i64,
    mismatches: u64,
    last_us: u64,
    last_status: u16,
    last_type: String,
    last_message: String,
    cache_n: u64,
    cache_cached: u64,
    cache_prompt: u64,
    cache_hot: u64,
    loaded: u32,
}

#[derive(clickhouse::Row, Deserialize)]
struct AnsweredCount {
    region: String,
    provider: String,
    scenario: String,
    model: String,
    fingerprint: String,
    n: u64,
}

/// Attempts by the model and `system_fingerprint` they were answered with, per (region,
/// provider, scenario); rows with neither are left out (`""` stands for a missing one).
async fn answered(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<Vec<AnsweredCount>, StoreError> {
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    wh.push_str(if wh.is_empty() { " WHERE " } else { " AND " });
    wh.push_str("warmup = 0 AND (answered_model IS NOT NULL OR system_fingerprint IS NOT NULL)");
    let sql = format!(
        "SELECT region, provider, scenario, ifNull(answered_model, '') AS model, \
         ifNull(system_fingerprint, '') AS fingerprint, count() AS n \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, model, fingerprint"
    );
    Ok(bind_all(client.query(&sql), &args).fetch_all().await?)
}

/// The prompt-cache counters of [`CacheCounts`] as SQL aggregates over `requests` rows (the
/// caller keeps `ok` rows'): requests that reported prompt tokens (> 0) and a cached count,
/// their cached tokens (each capped at its prompt tokens), prompt tokens, and cache-hot ones
/// ([`HOT_SHARE`]).
pub(super) fn cache_columns() -> String {
    let cond = "ifNull(prompt_tokens, 0) > 0 AND cached_tokens IS NOT NULL";
    format!(
        "countIf({cond}) AS cache_n, \
         sum(if({cond}, toUInt64(least(assumeNotNull(cached_tokens), assumeNotNull(prompt_tokens))), 0)) AS cache_cached, \
         sum(if({cond}, toUInt64(assumeNotNull(prompt_tokens)), 0)) AS cache_prompt, \
         countIf({cond} AND toFloat64(assumeNotNull(cached_tokens)) >= {HOT_SHARE:?} * toFloat64(assumeNotNull(prompt_tokens))) AS cache_hot"
    )
}

/// Latency metrics of the matrix.
const MATRIX_METRICS: [Metric; 5] = [
    Metric::Ttft,
    Metric::Ttfc,
    Metric::E2e,
    Metric::Tpot,
    Metric::Itl,
];

/// [`matrix_percentiles`] at [`DEFAULT_PERCENTILES`].
///
/// # Errors
/// As [`matrix_percentiles`].
pub async fn matrix_filtered(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<Vec<MatrixRow>, StoreError> {
    matrix_percentiles(client, db, filter, &DEFAULT_PERCENTILES).await
}

/// The region × provider matrix of the rows `filter` selects: per (region, provider, scenario)
/// and per (`ALL`, provider, scenario), attempt counts by outcome from `requests`, and exact
/// percentiles (P50/P90/P95/P99, and `percentiles` with their sample count, support and
/// intervals) of TTFT, TTFC, E2E, TPOT and ITL from the merged interval histograms
/// ([`merged_histograms`], every sweep step merged).
///
/// Rows are sorted by scenario, then region (`ALL` last), then provider; only cells with data
/// appear.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn matrix_percentiles(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    percentiles: &[f64],
) -> Result<Vec<MatrixRow>, StoreError> {
    check_identifier(db)?;
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    // Warm-up rows are left out of every count (they are counted apart, `warmup`).
    and_where(&mut wh, "warmup = 0");
    // Requests end at final attempts, and (failover scenarios of the stored plan) at a
    // provider's last try before the client moved on (`aggregate::failover_hand_over`).
    let plan = match &filter.campaign_id {
        Some(id) => stored_plan(client, db, id).await?,
        None => None,
    };
    let hand_overs: Vec<String> = plan
        .iter()
        .flat_map(|p| &p.scenarios)
        .filter_map(|s| {
            let k = s.failover.as_ref()?.attempts.max(1);
            Some(format!(
                "(scenario = {} AND attempt % {k} = 0)",
                sql_string(&s.name)
            ))
        })
        .collect();
    let request_end = if hand_overs.is_empty() {
        "final_attempt".to_string()
    } else {
        format!(
            "(final_attempt OR (failover AND ({})))",
            hand_overs.join(" OR ")
        )
    };
    let sql = format!(
        "SELECT region, provider, scenario, outcome, count() AS n, \
         sum(output_tokens) AS tokens, sum(tokens_from_usage) AS from_usage_n, \
         sum(output_tokens_source = 'payloads_over_usage') AS over_usage_n, \
         sum(conn_retried) AS conn_retried_n, \
         sum({request_end}) AS final_n, count(usage_chunk_delta) AS usage_n, \
         sum(ifNull(usage_chunk_delta, 0)) AS delta_sum, \
         sum(ifNull(usage_chunk_delta, 0) != 0) AS mismatches, \
         max(send_unix_us) AS last_us, \
         argMax(ifNull(http_status, toUInt16(0)), send_unix_us) AS last_status, \
         argMax(ifNull(error_type, ''), send_unix_us) AS last_type, \
         argMax(ifNull(error_message, ''), send_unix_us) AS last_message, \
         {cache}, \
         max(phase_start_in_flight) AS loaded \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, outcome",
        cache = cache_columns()
    );
    let counts: Vec<OutcomeCount> = bind_all(client.query(&sql), &args).fetch_all().await?;

    // (scenario, ALL-last flag, region, provider) → row
    type Key = (String, bool, String, String);
    let mut cells: BTreeMap<Key, MatrixRow> = BTreeMap::new();
    let key = |region: &str, provider: &str, scenario: &str| -> Key {
        (
            scenario.to_string(),
            region == ALL_REGIONS,
            region.to_string(),
            provider.to_string(),
        )
    };
    for c in &counts {
        for region in [c.region.as_str(), ALL_REGIONS] {
            let cell = cells
                .entry(key(region, &c.provider, &c.scenario))
                .or_insert_with(|| MatrixRow::new(region, &c.provider, &c.scenario));
            cell.attempts += c.n;
            cell.conn_retried += c.conn_retried;
            cell.phase_start_in_flight = cell.phase_start_in_flight.max(u64::from(c.loaded));
            *cell.outcomes.entry(c.outcome.clone()).or_insert(0) += c.n;
            let measured = Outcome::parse(&c.outcome).is_none_or(counts_in_error_rates);
            if measured {
                cell.requests += c.final_n;
            }
            if c.outcome == Outcome::Ok.as_str() {
                cell.samples += c.n;
                cell.ok_output_tokens = cell.ok_output_tokens.saturating_add(c.output_tokens);
                cell.tokens_from_usage += c.from_usage;
                cell.tokens_over_usage += c.over_usage;
                cell.ok_usage_reports += c.usage_n;
                cell.ok_usage_chunk_delta_sum =
                    cell.ok_usage_chunk_delta_sum.saturating_add(c.delta_sum);
                cell.ok_usage_chunk_mismatches += c.mismatches;
                cell.cache.merge(&CacheCounts {
                    reports: c.cache_n,
                    cached_tokens: c.cache_cached,
                    prompt_tokens: c.cache_prompt,
                    hot: c.cache_hot,
                });
            } else if measured {
                cell.requests_failed += c.final_n;
            }
            if c.outcome == Outcome::Throttled.as_str() {
                cell.throttled += c.n;
            }
            let failed =
                c.outcome != Outcome::Ok.as_str() && c.outcome != Outcome::Dropped.as_str();
            if failed && cell.last_error.as_ref().is_none_or(|e| c.last_us >= e.0) {
                let text = latmesh_results::aggregate::describe_error_parts(
                    &c.outcome,
                    (c.last_status != 0).then_some(c.last_status),
                    [c.last_type.as_str(), c.last_message.as_str()]
                        .into_iter()
                        .filter(|p| !p.is_empty()),
                );
                cell.last_error = Some((c.last_us, text));
            }
        }
    }

    for a in answered(client, db, filter).await? {
        for region in [a.region.as_str(), ALL_REGIONS] {
            let cell = cells
                .entry(key(region, &a.provider, &a.scenario))
                .or_insert_with(|| MatrixRow::new(region, &a.provider, &a.scenario));
            let (model, fingerprint) = (a.model.as_str(), a.fingerprint.as_str());
            count_name(
                &mut cell.answered_models,
                (!model.is_empty()).then_some(model),
                a.n,
            );
            count_name(
                &mut cell.system_fingerprints,
                (!fingerprint.is_empty()).then_some(fingerprint),
                a.n,
            );
        }
    }

    // Scenarios with an SLO: their percentile bounds are judged on the cell's histograms.
    let slos: BTreeMap<&str, &latmesh_core::plan::ScenarioSpec> = plan
        .iter()
        .flat_map(|p| &p.scenarios)
        .filter(|s| s.slo.is_some())
        .map(|s| (s.name.as_str(), s))
        .collect();
    let mut metrics = MATRIX_METRICS.to_vec();
    for s in slos.values() {
        for m in s.slo.as_ref().map(bound_metrics).unwrap_or_default() {
            if !metrics.contains(&m) {
                metrics.push(m);
            }
        }
    }
    let mut bound_hists: BTreeMap<Key, BTreeMap<Metric, Histogram<u64>>> = BTreeMap::new();
    for (g, h) in merged_histograms(client, db, filter, &metrics, false).await? {
        if slos.contains_key(g.scenario.as_str()) {
            bound_hists
                .entry(key(&g.region, &g.provider, &g.scenario))
                .or_default()
                .insert(g.metric, h.clone());
        }
        if !MATRIX_METRICS.contains(&g.metric) {
            continue;
        }
        let cell = cells
            .entry(key(&g.region, &g.provider, &g.scenario))
            .or_insert_with(|| MatrixRow::new(&g.region, &g.provider, &g.scenario));
        let p = Percentiles::of_list(&h, percentiles);
        cell.hist_samples
            .insert(g.metric.as_str().to_string(), h.len());
        match g.metric {
            Metric::Ttft => cell.ttft = Some(p),
            Metric::Ttfc => cell.ttfc = Some(p),
            Metric::E2e => cell.e2e = Some(p),
            Metric::Tpot => cell.tpot = Some(p),
            Metric::Itl => cell.itl = Some(p),
            _ => {}
        }
    }

    // Warm-up rows, and goodput of the scenarios with an SLO (rows with data only).
    let counts = slo_counts(client, db, filter, false).await?;
    let per_region = match &filter.campaign_id {
        Some(id) if !slos.is_empty() => kept_agents(
            &latmesh_results::load_stats::agents_per_region(
                agents(client, db, id)
                    .await?
                    .iter()
                    .map(|a| a.region.as_str()),
            ),
            filter,
        ),
        _ => BTreeMap::new(),
    };
    for (k, cell) in cells.iter_mut() {
        let c = counts
            .get(&(k.2.clone(), k.3.clone(), k.0.clone(), 0))
            .copied()
            .unwrap_or_default();
        cell.warmup = c.warmup;
        let spec = plan
            .iter()
            .flat_map(|p| &p.scenarios)
            .find(|s| s.name == k.0);
        cell.cached_share = cell.cache.share(spec.and_then(caching_asked));
        if let (Some(spec), Some(plan)) = (slos.get(k.0.as_str()), &plan) {
            let n_agents = if k.1 {
                per_region.values().sum()
            } else {
                per_region.get(&k.2).copied().unwrap_or(0)
            };
            let hists = bound_hists.get(k);
            cell.goodput = slo_stats::cell_goodput(plan, spec, c.judged, c.met, n_agents, |m| {
                hists.and_then(|h| h.get(&m).cloned())
            });
        }
    }
    Ok(cells.into_values().collect())
}
