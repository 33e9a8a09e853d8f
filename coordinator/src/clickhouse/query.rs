//! Queries: the region × provider matrix ([`matrix`]), the outcome mix ([`errors`]), peak vs
//! off-peak ([`windows`]), a provider's trend ([`trend`]), a campaign's concurrency sweeps
//! step by step ([`sweep`]), stored campaigns and agents, and row counts for
//! `latmesh campaign verify` ([`counts`]).
//!
//! Percentiles are exact over any grouping. The matrix and the sweeps rebuild each group's
//! merged histogram ([`merged_histograms`]: every stored bucket summed per value in SQL,
//! recorded into an HdrHistogram of the agents' bounds; a stored value is its bucket's highest
//! equivalent, so the buckets and counts are the coordinator's) and take their percentiles,
//! sample counts and intervals from it exactly as the coordinator's summary does
//! ([`Percentiles::of_list`]) — never an average of percentiles. Counts are summed in Rust
//! from one `GROUP BY region, provider, scenario, outcome`, so the `ALL` rows are exact sums.
//! No query needs `FINAL` (see the de-duplication guarantee in [`super::insert`]).
//!
//! Time windows ([`windows`]) and trends ([`trend`]) use `quantileExactWeighted(q)(value,
//! weight)` over `ARRAY JOIN values AS value, counts AS weight` (which equals HdrHistogram's
//! `value_at_quantile` of the merged histograms), grouped by the stored `window` label or by a
//! time bucket on the coordinator's clock. Local hours
//! are computed in SQL from each region's zone ([`local_hour_sql`]); there is no local-hour
//! column.

use std::collections::{BTreeMap, BTreeSet};

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};
use latmesh_core::load::SweepSpec;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use latmesh_core::windows::{WindowSpec, Zone, utc_label};
use serde::{Deserialize, Serialize};

use super::rows::{AgentRow, CampaignRow};
use super::{StoreError, check_identifier};
use hdrhistogram::Histogram;
use latmesh_core::hist::new_histogram;
use latmesh_core::plan::DEFAULT_PERCENTILES;
use latmesh_results::aggregate::{count_name, counts_in_error_rates};
use latmesh_results::load_stats::{self, RowFilter, StepMeasure, SweepRow};
use latmesh_results::model_stats;
use latmesh_results::stats;
use latmesh_results::summary::{ALL_REGIONS, MatrixCell, Percentiles};

/// Which rows a query looks at. Every field left `None` means "all".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryFilter {
    /// Campaign id.
    pub campaign_id: Option<String>,
    /// Scenario name.
    pub scenario: Option<String>,
    /// Region (the `ALL` rows then merge just that region).
    pub region: Option<String>,
    /// Provider name.
    pub provider: Option<String>,
    /// Named time window label (e.g. `peak`).
    pub window: Option<String>,
    /// From this time on, UTC µs on the agents' clocks (request send time; histogram interval
    /// start), inclusive.
    pub from_unix_us: Option<i64>,
    /// Before this time, UTC µs on the agents' clocks, exclusive.
    pub to_unix_us: Option<i64>,
}

impl QueryFilter {
    /// Everything of campaign `campaign_id`.
    pub fn campaign(campaign_id: &str) -> Self {
        QueryFilter {
            campaign_id: Some(campaign_id.to_string()),
            ..Default::default()
        }
    }
}

/// A value bound to a `?` of a query.
enum Arg {
    Str(String),
    U64(u64),
}

/// ` WHERE …` (or nothing) for `filter`; `time_us`/`time_s` name the µs and `DateTime` time
/// columns (the `DateTime` one lets ClickHouse skip partitions).
fn where_clause(filter: &QueryFilter, time_us: &str, time_s: &str) -> (String, Vec<Arg>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    for (col, v) in [
        ("campaign_id", &filter.campaign_id),
        ("scenario", &filter.scenario),
        ("region", &filter.region),
        ("provider", &filter.provider),
        ("`window`", &filter.window),
    ] {
        if let Some(v) = v {
            conds.push(format!("{col} = ?"));
            args.push(Arg::Str(v.clone()));
        }
    }
    if let Some(from) = filter.from_unix_us {
        let from = u64::try_from(from).unwrap_or(0);
        conds.push(format!("{time_s} >= toDateTime(?) AND {time_us} >= ?"));
        args.push(Arg::U64(from / 1_000_000));
        args.push(Arg::U64(from));
    }
    if let Some(to) = filter.to_unix_us {
        let to = u64::try_from(to).unwrap_or(0);
        conds.push(format!("{time_s} <= toDateTime(?) AND {time_us} < ?"));
        args.push(Arg::U64(to / 1_000_000));
        args.push(Arg::U64(to));
    }
    if conds.is_empty() {
        (String::new(), args)
    } else {
        (format!(" WHERE {}", conds.join(" AND ")), args)
    }
}

fn bind_all(mut q: clickhouse::query::Query, args: &[Arg]) -> clickhouse::query::Query {
    for a in args {
        q = match a {
            Arg::Str(s) => q.bind(s.as_str()),
            Arg::U64(n) => q.bind(*n),
        };
    }
    q
}

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
            ttft: None,
            ttfc: None,
            e2e: None,
            tpot: None,
            itl: None,
            hist_samples: BTreeMap::new(),
            last_error: None,
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
    wh.push_str("(answered_model IS NOT NULL OR system_fingerprint IS NOT NULL)");
    let sql = format!(
        "SELECT region, provider, scenario, ifNull(answered_model, '') AS model, \
         ifNull(system_fingerprint, '') AS fingerprint, count() AS n \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, model, fingerprint"
    );
    Ok(bind_all(client.query(&sql), &args).fetch_all().await?)
}

/// Latency metrics of the matrix.
const MATRIX_METRICS: [Metric; 5] = [
    Metric::Ttft,
    Metric::Ttfc,
    Metric::E2e,
    Metric::Tpot,
    Metric::Itl,
];

#[derive(clickhouse::Row, Deserialize)]
struct BucketRow {
    region: String,
    provider: String,
    scenario: String,
    metric: String,
    step: u32,
    value: u64,
    n: u64,
}

/// Which merged histogram: region (or `ALL`: every region the filter keeps), provider,
/// scenario, metric, sweep step (0 when the steps are merged).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HistGroup {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Metric.
    pub metric: Metric,
    /// Sweep step with `by_step`, else 0.
    pub step: u32,
}

/// The merged histograms (µs) of the `histograms` rows `filter` selects, of `metrics`: per
/// region and `ALL`, provider, scenario, metric, and with `by_step` sweep step (else every
/// step merged). Every stored bucket (`values`, `counts`) is summed per value in SQL and
/// recorded into an HdrHistogram of the agents' bounds; a stored value is its bucket's highest
/// equivalent, so each rebuilt histogram has the coordinator's buckets and counts (the same
/// percentiles to the microsecond, and the same order statistics for intervals).
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn merged_histograms(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    metrics: &[Metric],
    by_step: bool,
) -> Result<BTreeMap<HistGroup, Histogram<u64>>, StoreError> {
    check_identifier(db)?;
    let mut out = BTreeMap::new();
    if metrics.is_empty() {
        return Ok(out);
    }
    let (mut wh, args) = where_clause(filter, "start_unix_us", "interval_start");
    let list = metrics
        .iter()
        .map(|m| sql_string(m.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    and_where(&mut wh, &format!("metric IN ({list})"));
    let sql = format!(
        "SELECT region, provider, scenario, metric, step, value, sum(weight) AS n \
         FROM {db}.histograms ARRAY JOIN `values` AS value, `counts` AS weight{wh} \
         GROUP BY region, provider, scenario, metric, step, value"
    );
    let rows: Vec<BucketRow> = bind_all(client.query(&sql), &args).fetch_all().await?;
    for r in rows {
        let Some(metric) = Metric::parse(&r.metric) else {
            continue;
        };
        for region in [r.region.as_str(), ALL_REGIONS] {
            let h = out
                .entry(HistGroup {
                    region: region.to_string(),
                    provider: r.provider.clone(),
                    scenario: r.scenario.clone(),
                    metric,
                    step: if by_step { r.step } else { 0 },
                })
                .or_insert_with(new_histogram);
            if h.record_n(r.value, r.n).is_err() {
                h.saturating_record_n(r.value, r.n);
            }
        }
    }
    Ok(out)
}

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
    let (wh, args) = where_clause(filter, "send_unix_us", "send_time");
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
         argMax(ifNull(error_message, ''), send_unix_us) AS last_message \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, outcome"
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

    for (g, h) in merged_histograms(client, db, filter, &MATRIX_METRICS, false).await? {
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
    Ok(cells.into_values().collect())
}

/// One line of the outcome mix: attempts of one outcome (and HTTP status) for a region (or
/// `ALL`) and provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Outcome name.
    pub outcome: String,
    /// HTTP status, when responses of this outcome carried one.
    pub http_status: Option<u16>,
    /// Attempts.
    pub count: u64,
    /// `count` as % of the attempts of this region and provider.
    pub pct: f64,
    /// The latest (by agent send time) provider error type of these attempts.
    pub last_error_type: Option<String>,
    /// The latest provider or transport error message of these attempts.
    pub last_error_message: Option<String>,
}

#[derive(clickhouse::Row, Deserialize)]
struct ErrorCount {
    region: String,
    provider: String,
    outcome: String,
    status: u16,
    n: u64,
    last_us: u64,
    error_type: String,
    error_message: String,
}

/// The outcome mix per provider and region (and `ALL` regions) of the rows `filter` selects,
/// one line per (outcome, HTTP status). Sorted by provider, region (`ALL` last), then count
/// descending. `ok` lines are included, so each group's `pct` sums to 100.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn errors(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<Vec<ErrorRow>, StoreError> {
    check_identifier(db)?;
    let (wh, args) = where_clause(filter, "send_unix_us", "send_time");
    let sql = format!(
        "SELECT region, provider, outcome, ifNull(http_status, toUInt16(0)) AS status, \
         count() AS n, max(send_unix_us) AS last_us, \
         argMax(ifNull(error_type, ''), send_unix_us) AS last_type, \
         argMax(ifNull(error_message, ''), send_unix_us) AS last_message \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, outcome, status"
    );
    let rows: Vec<ErrorCount> = bind_all(client.query(&sql), &args).fetch_all().await?;

    // (provider, ALL-last, region) → (outcome, status) → (count, last_us, type, message)
    type Group = BTreeMap<(String, u16), (u64, u64, String, String)>;
    let mut groups: BTreeMap<(String, bool, String), Group> = BTreeMap::new();
    for r in rows {
        for region in [r.region.as_str(), ALL_REGIONS] {
            let g = groups
                .entry((
                    r.provider.clone(),
                    region == ALL_REGIONS,
                    region.to_string(),
                ))
                .or_default();
            let e = g.entry((r.outcome.clone(), r.status)).or_insert((
                0,
                0,
                String::new(),
                String::new(),
            ));
            e.0 += r.n;
            if r.last_us >= e.1 {
                e.1 = r.last_us;
                e.2.clone_from(&r.error_type);
                e.3.clone_from(&r.error_message);
            }
        }
    }
    let mut out = Vec::new();
    for ((provider, _, region), g) in groups {
        let total: u64 = g.values().map(|e| e.0).sum();
        let mut lines: Vec<ErrorRow> = g
            .into_iter()
            .map(|((outcome, status), (n, _, et, em))| ErrorRow {
                region: region.clone(),
                provider: provider.clone(),
                outcome,
                http_status: (status != 0).then_some(status),
                count: n,
                pct: if total == 0 {
                    0.0
                } else {
                    n as f64 * 100.0 / total as f64
                },
                last_error_type: (!et.is_empty()).then_some(et),
                last_error_message: (!em.is_empty()).then_some(em),
            })
            .collect();
        lines.sort_by(|a, b| b.count.cmp(&a.count).then(a.outcome.cmp(&b.outcome)));
        out.extend(lines);
    }
    Ok(out)
}

/// The stored campaign `campaign_id` (its latest row), if any.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn campaign(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<CampaignRow>, StoreError> {
    check_identifier(db)?;
    Ok(client
        .query(&format!(
            "SELECT ?fields FROM {db}.campaigns WHERE campaign_id = ? \
             ORDER BY launched_at_us DESC LIMIT 1"
        ))
        .bind(campaign_id)
        .fetch_optional()
        .await?)
}

/// The latest state of every agent of campaign `campaign_id`, by agent id.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn agents(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Vec<AgentRow>, StoreError> {
    check_identifier(db)?;
    Ok(client
        .query(&format!(
            "SELECT ?fields FROM {db}.agents WHERE campaign_id = ? \
             ORDER BY agent_id, seen_at_us DESC LIMIT 1 BY agent_id"
        ))
        .bind(campaign_id)
        .fetch_all()
        .await?)
}

/// Rows of one agent in ClickHouse.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCounts {
    /// Agent id.
    pub agent_id: String,
    /// Its region.
    pub region: String,
    /// Distinct batch seqs with at least one row in either table.
    pub batches: u64,
    /// Highest seq seen.
    pub max_seq: u64,
    /// Seqs in `1..=max_seq` without any row: lost batches — or batches that carried nothing
    /// (the first [`latmesh_results::seq_gaps::MAX_LISTED`]).
    pub missing_seqs: Vec<u64>,
    /// Missing seqs beyond those `missing_seqs` lists.
    #[serde(default)]
    pub missing_seqs_more: u64,
    /// `requests` rows.
    pub request_rows: u64,
    /// `requests` rows with outcome `ok`.
    pub ok_requests: u64,
    /// `histograms` rows.
    pub histogram_rows: u64,
    /// Values in its histograms (sum of `count`), all metrics.
    pub histogram_values: u64,
    /// Rows present more than once (same seq and row index), both tables.
    pub duplicate_rows: u64,
    /// `requests` rows of an attempt already stored from another batch of this agent: the
    /// same (load, scenario, provider, round, slot, step, turn, attempt) measured twice, as a
    /// restarted agent that ran again what it had measured would.
    pub measured_twice: u64,
}

/// A batch with duplicate rows still visible (not yet merged away).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchDuplicates {
    /// Agent id.
    pub agent_id: String,
    /// Batch seq.
    pub seq: u64,
    /// `requests` or `histograms`.
    pub table: String,
    /// Rows of the batch in the table.
    pub rows: u64,
    /// Distinct row indexes among them.
    pub distinct: u64,
}

/// What ClickHouse holds for one campaign, for `latmesh campaign verify`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignCounts {
    /// `requests` rows.
    pub request_rows: u64,
    /// `histograms` rows.
    pub histogram_rows: u64,
    /// `requests` rows beyond the first of their (agent, seq, row index).
    pub duplicate_request_rows: u64,
    /// `histograms` rows beyond the first of their (agent, seq, row index).
    pub duplicate_histogram_rows: u64,
    /// Per agent, by agent id.
    pub agents: Vec<AgentCounts>,
    /// Every (agent, seq, table) with duplicates, in order.
    pub duplicates: Vec<BatchDuplicates>,
}

#[derive(clickhouse::Row, Deserialize)]
struct SeqCount {
    agent_id: String,
    region: String,
    seq: u64,
    rows: u64,
    distinct: u64,
    extra: u64,
}

/// Row counts of campaign `campaign_id`: totals, per agent, and every (agent, seq) whose rows
/// are duplicated. Reads without `FINAL`, i.e. what queries see.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn counts(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<CampaignCounts, StoreError> {
    check_identifier(db)?;
    let per_seq = |table: &str, extra: &str| {
        format!(
            "SELECT agent_id, any(region) AS agent_region, seq, count() AS n, \
             uniqExact(row_index) AS distinct_rows, {extra} AS extra \
             FROM {db}.{table} WHERE campaign_id = ? GROUP BY agent_id, seq \
             ORDER BY agent_id, seq"
        )
    };
    let requests: Vec<SeqCount> = client
        .query(&per_seq("requests", "countIf(outcome = 'ok')"))
        .bind(campaign_id)
        .fetch_all()
        .await?;
    let histograms: Vec<SeqCount> = client
        .query(&per_seq("histograms", "sum(`count`)"))
        .bind(campaign_id)
        .fetch_all()
        .await?;
    let twice: Vec<(String, u64)> = client
        .query(&format!(
            "SELECT agent_id, sum(batches - 1) FROM (\
             SELECT agent_id, uniqExact(seq) AS batches FROM {db}.requests \
             WHERE campaign_id = ? \
             GROUP BY agent_id, load, scenario, provider, round, slot, step, turn, attempt \
             HAVING batches > 1) GROUP BY agent_id"
        ))
        .bind(campaign_id)
        .fetch_all()
        .await?;

    let mut out = CampaignCounts::default();
    let mut agents: BTreeMap<String, (AgentCounts, BTreeSet<u64>)> = BTreeMap::new();
    for (table, rows) in [("requests", &requests), ("histograms", &histograms)] {
        for r in rows {
            let (a, seqs) = agents.entry(r.agent_id.clone()).or_insert_with(|| {
                (
                    AgentCounts {
                        agent_id: r.agent_id.clone(),
                        region: r.region.clone(),
                        ..Default::default()
                    },
                    BTreeSet::new(),
                )
            });
            seqs.insert(r.seq);
            let dup = r.rows - r.distinct;
            a.duplicate_rows += dup;
            if table == "requests" {
                a.request_rows += r.rows;
                a.ok_requests += r.extra;
                out.request_rows += r.rows;
                out.duplicate_request_rows += dup;
            } else {
                a.histogram_rows += r.rows;
                a.histogram_values += r.extra;
                out.histogram_rows += r.rows;
                out.duplicate_histogram_rows += dup;
            }
            if dup > 0 {
                out.duplicates.push(BatchDuplicates {
                    agent_id: r.agent_id.clone(),
                    seq: r.seq,
                    table: table.to_string(),
                    rows: r.rows,
                    distinct: r.distinct,
                });
            }
        }
    }
    for (_, (mut a, seqs)) in agents {
        a.measured_twice = twice
            .iter()
            .find(|(id, _)| *id == a.agent_id)
            .map_or(0, |t| t.1);
        a.batches = seqs.len() as u64;
        a.max_seq = seqs.last().copied().unwrap_or(0);
        let missing = latmesh_results::seq_gaps::missing(&seqs);
        (a.missing_seqs, a.missing_seqs_more) = (missing.listed, missing.more);
        out.agents.push(a);
    }
    out.duplicates
        .sort_by(|a, b| (&a.agent_id, a.seq, &a.table).cmp(&(&b.agent_id, b.seq, &b.table)));
    Ok(out)
}

/// A percentile the `windows` and `trend` queries report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Percentile {
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
}

impl Percentile {
    /// Every percentile, ascending.
    pub const ALL: [Percentile; 4] = [
        Percentile::P50,
        Percentile::P90,
        Percentile::P95,
        Percentile::P99,
    ];

    /// `50` → [`Percentile::P50`], `90`, `95`, `99`; `None` otherwise.
    pub fn from_number(n: u32) -> Option<Percentile> {
        Percentile::ALL.into_iter().find(|p| p.number() == n)
    }

    /// 50, 90, 95 or 99.
    pub fn number(self) -> u32 {
        match self {
            Percentile::P50 => 50,
            Percentile::P90 => 90,
            Percentile::P95 => 95,
            Percentile::P99 => 99,
        }
    }

    /// The quantile, as HdrHistogram's `value_at_quantile` takes it (0.5, 0.9, 0.95, 0.99).
    pub fn quantile(self) -> f64 {
        f64::from(self.number()) / 100.0
    }

    /// The quantile as an SQL literal ([`quantile_sql`]).
    fn sql(self) -> String {
        quantile_sql(self.quantile())
    }
}

/// `text` as a single-quoted SQL string literal.
fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// ` WHERE …` of `filter` plus one more condition.
fn and_where(wh: &mut String, cond: &str) {
    wh.push_str(if wh.is_empty() { " WHERE " } else { " AND " });
    wh.push_str(cond);
}

/// Coordinator-clock UTC seconds of a `requests` row (its send time), as an SQL expression.
const REQUEST_COORD_SECS: &str = "toInt64(intDiv(send_coord_unix_us, 1000000))";
/// Coordinator-clock UTC seconds of a `histograms` row (its interval start corrected with the
/// batch's clock offset), as an SQL expression.
const HISTOGRAM_COORD_SECS: &str = "intDiv(toInt64(start_unix_us) + clock_offset_us, 1000000)";

/// An SQL expression (`UInt8`, 0..=23) for the local hour, in the zone of the row's `region`
/// under `spec`, of the UTC instant `secs` (an SQL expression of UTC seconds): `toHour` after
/// `toTimeZone` for IANA zones (DST from the server's time-zone database), arithmetic for fixed
/// offsets and for regions without a zone (UTC). Works on 18.16 and current ClickHouse, and
/// does not depend on the server's own time zone. This is how SQL groups by local hour: e.g.
/// `GROUP BY local_hour_sql(spec, "toInt64(intDiv(send_coord_unix_us, 1000000))")`.
pub fn local_hour_sql(spec: &WindowSpec, secs: &str) -> String {
    let of = |zone: &Zone| match zone {
        Zone::Iana(tz) => format!(
            "toHour(toTimeZone(toDateTime(toUInt32({secs})), {}))",
            sql_string(tz.name())
        ),
        Zone::Fixed { offset_s } => {
            format!("toUInt8(intDiv(modulo(toInt64({secs}) + ({offset_s}) + 86400, 86400), 3600))")
        }
    };
    let utc = of(&Zone::UTC);
    if spec.zones().is_empty() {
        return utc;
    }
    let mut parts: Vec<String> = spec
        .zones()
        .iter()
        .map(|(region, zone)| format!("region = {}, {}", sql_string(region), of(zone)))
        .collect();
    parts.push(utc);
    format!("multiIf({})", parts.join(", "))
}

/// The windows of the stored campaign `campaign_id`, from its plan; `None` when the campaign
/// is not stored.
///
/// # Errors
/// The server's or connection's error; [`StoreError::Rejected`] for a stored plan that does
/// not parse.
pub async fn stored_window_spec(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<WindowSpec>, StoreError> {
    let Some(plan) = stored_plan(client, db, campaign_id).await? else {
        return Ok(None);
    };
    WindowSpec::from_plan(&plan)
        .map(Some)
        .map_err(|e| StoreError::Rejected {
            code: None,
            message: format!("stored plan of campaign {campaign_id:?}: {e}"),
        })
}

/// The plan of the stored campaign `campaign_id`; `None` when the campaign is not stored.
///
/// # Errors
/// The server's or connection's error; [`StoreError::Rejected`] for a stored plan that does
/// not parse.
pub async fn stored_plan(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<Plan>, StoreError> {
    let Some(row) = campaign(client, db, campaign_id).await? else {
        return Ok(None);
    };
    serde_json::from_str(&row.plan_json)
        .map(Some)
        .map_err(|e| StoreError::Rejected {
            code: None,
            message: format!("stored plan of campaign {campaign_id:?}: {e}"),
        })
}

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

/// A quantile as an SQL literal: the shortest decimal that reads back as the same `f64`, so
/// ClickHouse's threshold `ceil(weights × level)` equals HdrHistogram's.
fn quantile_sql(q: f64) -> String {
    format!("{q}")
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
        &format!("`load` = 'sweep' AND scenario IN ({scenario_list})"),
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

/// What one group (a time window, a trend bucket) of a provider in a region holds: attempts
/// and errors from `requests`, and the percentile of the metric over its merged histograms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupStat {
    /// Attempts (`requests` rows) in the group.
    pub attempts: u64,
    /// Attempts whose outcome is not `ok`, `cancelled` (a campaign cancel cut them) or
    /// `dropped` (open-loop arrivals never sent).
    pub errors: u64,
    /// `cancelled` and `dropped` attempts: in `attempts`, left out of `error_pct`.
    #[serde(default)]
    pub excluded: u64,
    /// `errors` as % of `attempts − excluded` (0 without such attempts).
    pub error_pct: f64,
    /// Values of the metric in the group's histograms.
    pub samples: u64,
    /// The percentile of the metric over the group's merged histograms, µs (exact: what
    /// HdrHistogram's `value_at_quantile` gives for the merged histograms); `None` without
    /// samples.
    pub value_us: Option<u64>,
    /// `value_us` in ms.
    pub value_ms: Option<f64>,
}

impl GroupStat {
    fn of(c: GroupCell) -> Self {
        GroupStat {
            attempts: c.attempts,
            errors: c.errors,
            excluded: c.excluded,
            error_pct: pct_of(c.errors, c.attempts - c.excluded),
            samples: c.samples,
            value_us: c.value_us,
            value_ms: c.value_us.map(|v| v as f64 / 1000.0),
        }
    }
}

/// One window of a [`WindowsRow`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowStat {
    /// Window label (`""` for rows stored without one).
    pub window: String,
    /// The window's counts and percentile (flattened in JSON).
    #[serde(flatten)]
    pub stat: GroupStat,
}

/// A provider in a region (or `ALL` regions merged), window by window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowsRow {
    /// Provider.
    pub provider: String,
    /// Region, or `ALL`.
    pub region: String,
    /// One entry per window of [`WindowsReport::windows`], in that order.
    pub windows: Vec<WindowStat>,
    /// First window's value − second window's, ms (`None` unless both have samples, and for
    /// an `ALL` row whose two windows were observed in different sets of regions).
    pub change_ms: Option<f64>,
    /// `change_ms` as % of the second window's value.
    pub change_pct: Option<f64>,
}

/// What `latmesh query windows` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowsReport {
    /// The metric (`ttft`, `ttfc`, `e2e`, `tpot`).
    pub metric: String,
    /// 50, 90 or 99.
    pub percentile: u32,
    /// Window labels in column order: the campaign's declared windows, `off-peak`, then any
    /// other label found in the rows (e.g. `""`), sorted.
    pub windows: Vec<String>,
    /// The two windows the change compares (first − second), when there are two.
    pub compared: Option<(String, String)>,
    /// By provider, then region (`ALL` last).
    pub rows: Vec<WindowsRow>,
    /// The scenarios merged (empty: every scenario of the rows; no stored plan told them
    /// apart).
    #[serde(default)]
    pub scenarios: Vec<String>,
    /// The campaign's scenarios left out by default (`sweep` and `rate` ones).
    #[serde(default)]
    pub left_out_scenarios: Vec<String>,
}

#[derive(clickhouse::Row, Deserialize)]
struct GroupCount {
    region: String,
    provider: String,
    group: String,
    attempts: u64,
    errors: u64,
    excluded: u64,
}

#[derive(clickhouse::Row, Deserialize)]
struct GroupQuantile {
    region: String,
    provider: String,
    group: String,
    samples: u64,
    value: u64,
}

/// ` AND scenario IN (…)` of `scenarios` (nothing when empty: every scenario).
fn and_scenario_in(wh: &mut String, scenarios: &[String]) {
    if !scenarios.is_empty() {
        let list: Vec<String> = scenarios.iter().map(|s| sql_string(s)).collect();
        and_where(wh, &format!("scenario IN ({})", list.join(", ")));
    }
}

/// Attempts, failed attempts (not `ok`, `cancelled` or `dropped`) and `cancelled` or
/// `dropped` ones of `requests` per (region, provider, `group` expression).
async fn group_counts(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    scenarios: &[String],
    group: &str,
) -> Result<Vec<GroupCount>, StoreError> {
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    and_scenario_in(&mut wh, scenarios);
    let sql = format!(
        "SELECT region, provider, toString({group}) AS grp, count() AS attempts, \
         countIf(outcome NOT IN ('ok', 'cancelled', 'dropped')) AS errs, \
         countIf(outcome IN ('cancelled', 'dropped')) AS excl \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, grp"
    );
    Ok(bind_all(client.query(&sql), &args).fetch_all().await?)
}

/// Samples and the exact percentile of `metric` per (region — or `ALL` when `merged` —,
/// provider, `group` expression) over the merged interval histograms.
#[allow(clippy::too_many_arguments)]
async fn group_quantiles(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    scenarios: &[String],
    metric: Metric,
    percentile: Percentile,
    group: &str,
    merged: bool,
) -> Result<Vec<GroupQuantile>, StoreError> {
    let (mut wh, args) = where_clause(filter, "start_unix_us", "interval_start");
    and_scenario_in(&mut wh, scenarios);
    and_where(
        &mut wh,
        &format!("metric = {}", sql_string(metric.as_str())),
    );
    let (region, group_by) = if merged {
        (sql_string(ALL_REGIONS), "provider, grp")
    } else {
        ("region".to_string(), "row_region, provider, grp")
    };
    let q = percentile.sql();
    let sql = format!(
        "SELECT {region} AS row_region, provider, toString({group}) AS grp, \
         sum(weight) AS samples, quantileExactWeighted({q})(value, weight) AS v \
         FROM {db}.histograms \
         ARRAY JOIN `values` AS value, `counts` AS weight{wh} \
         GROUP BY {group_by}"
    );
    Ok(bind_all(client.query(&sql), &args).fetch_all().await?)
}

fn pct_of(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// One group of a grouped query.
#[derive(Clone, Copy, Debug, Default)]
struct GroupCell {
    attempts: u64,
    errors: u64,
    excluded: u64,
    samples: u64,
    value_us: Option<u64>,
}

/// Cells of a grouped query: (provider, ALL-last, region) → group → cell.
type Grouped = BTreeMap<(String, bool, String), BTreeMap<String, GroupCell>>;

/// Runs [`group_counts`] and [`group_quantiles`] (per region and, when the rows span more than
/// one region, merged as `ALL`) over `scenarios` (empty: every scenario the filter keeps) and
/// joins them.
#[allow(clippy::too_many_arguments)]
async fn grouped(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    scenarios: &[String],
    metric: Metric,
    percentile: Percentile,
    request_group: &str,
    histogram_group: &str,
) -> Result<Grouped, StoreError> {
    check_identifier(db)?;
    let counts = group_counts(client, db, filter, scenarios, request_group).await?;
    let mut quantiles = group_quantiles(
        client,
        db,
        filter,
        scenarios,
        metric,
        percentile,
        histogram_group,
        false,
    )
    .await?;
    let regions: BTreeSet<&str> = counts
        .iter()
        .map(|c| c.region.as_str())
        .chain(quantiles.iter().map(|q| q.region.as_str()))
        .collect();
    let merge = regions.len() > 1;
    if merge {
        quantiles.extend(
            group_quantiles(
                client,
                db,
                filter,
                scenarios,
                metric,
                percentile,
                histogram_group,
                true,
            )
            .await?,
        );
    }
    let mut out: Grouped = BTreeMap::new();
    let key = |region: &str, provider: &str| {
        (
            provider.to_string(),
            region == ALL_REGIONS,
            region.to_string(),
        )
    };
    for c in &counts {
        let regions: &[&str] = if merge {
            &[c.region.as_str(), ALL_REGIONS]
        } else {
            &[c.region.as_str()]
        };
        for region in regions {
            let e = out
                .entry(key(region, &c.provider))
                .or_default()
                .entry(c.group.clone())
                .or_default();
            e.attempts += c.attempts;
            e.errors += c.errors;
            e.excluded += c.excluded;
        }
    }
    for q in quantiles {
        let e = out
            .entry(key(&q.region, &q.provider))
            .or_default()
            .entry(q.group)
            .or_default();
        e.samples = q.samples;
        e.value_us = (q.samples > 0).then_some(q.value);
    }
    Ok(out)
}

/// Peak vs off-peak: per provider and region (and `ALL` regions merged, when the rows span
/// more than one), for every time window, the exact `percentile` of `metric` over the window's
/// merged interval histograms (`quantileExactWeighted` over `ARRAY JOIN`, grouped by
/// `window`), the window's attempts and error % (non-`ok` outcomes; `cancelled` and `dropped`
/// left out), and the change between the first two windows. Windows are ordered as the
/// campaign declares them (its stored plan, when `filter.campaign_id` names a stored
/// campaign), then `off-peak`, then any other label found (sorted; `""` for rows stored without a label). Scenarios are merged unless
/// `filter.scenario` picks one. Rows are sorted by provider, then region (`ALL` last).
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; [`StoreError::Rejected`] for a stored plan that
/// does not parse; the server's or connection's error otherwise.
pub async fn windows(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    metric: Metric,
    percentile: Percentile,
) -> Result<WindowsReport, StoreError> {
    check_identifier(db)?;
    let declared = match &filter.campaign_id {
        Some(id) => stored_window_spec(client, db, id)
            .await?
            .map(|s| s.labels())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let (scenarios, left_out) = windows_scenarios(client, db, filter).await?;
    let cells = grouped(
        client, db, filter, &scenarios, metric, percentile, "`window`", "`window`",
    )
    .await?;
    let mut order = declared;
    let seen: BTreeSet<&String> = cells.values().flat_map(|g| g.keys()).collect();
    for w in seen {
        if !order.contains(w) {
            order.push(w.clone());
        }
    }
    let rows = cells
        .into_iter()
        .map(|((provider, _, region), groups)| {
            let windows: Vec<WindowStat> = order
                .iter()
                .map(|w| WindowStat {
                    window: w.clone(),
                    stat: GroupStat::of(groups.get(w).copied().unwrap_or_default()),
                })
                .collect();
            let (change_ms, change_pct) = match (
                windows.first().and_then(|w| w.stat.value_us),
                windows.get(1).and_then(|w| w.stat.value_us),
            ) {
                (Some(a), Some(b)) => {
                    let d = (a as f64 - b as f64) / 1000.0;
                    (
                        Some(d),
                        (b > 0).then(|| (a as f64 - b as f64) * 100.0 / b as f64),
                    )
                }
                _ => (None, None),
            };
            WindowsRow {
                provider,
                region,
                windows,
                change_ms,
                change_pct,
            }
        })
        .collect();
    let rows = without_mixed_all_changes(rows);
    Ok(WindowsReport {
        metric: metric.as_str().to_string(),
        percentile: percentile.number(),
        compared: (order.len() >= 2).then(|| (order[0].clone(), order[1].clone())),
        windows: order,
        rows,
        scenarios,
        left_out_scenarios: left_out,
    })
}

/// Which scenarios `query windows` merges: the one `filter.scenario` names; else, for a
/// stored campaign, its `rounds` scenarios (the patrol, interleaved over the whole campaign, so
/// every window holds the same mix), leaving out its `sweep` and `rate` scenarios (load tests
/// that run at one time of day only: merged, they would make that window look slower); else
/// (no stored plan) every scenario, `(vec![], vec![])`. Returns (merged, left out).
///
/// # Errors
/// [`StoreError::Rejected`] when the campaign has no `rounds` scenario and none was named.
async fn windows_scenarios(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<(Vec<String>, Vec<String>), StoreError> {
    if let Some(s) = &filter.scenario {
        return Ok((vec![s.clone()], Vec::new()));
    }
    let plan = match &filter.campaign_id {
        Some(id) => stored_plan(client, db, id).await?,
        None => None,
    };
    let Some(plan) = plan else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (rounds, other): (Vec<_>, Vec<_>) = plan
        .scenarios
        .iter()
        .partition(|s| s.load.kind() == latmesh_core::load::LoadKind::Rounds);
    let names = |v: Vec<&latmesh_core::plan::ScenarioSpec>| -> Vec<String> {
        v.into_iter().map(|s| s.name.clone()).collect()
    };
    let (rounds, other) = (names(rounds), names(other));
    if rounds.is_empty() {
        return Err(StoreError::Rejected {
            code: None,
            message: format!(
                "the campaign has no rounds scenario to compare time windows with; pick one \
                 of its scenarios with --scenario ({})",
                other.join(", ")
            ),
        });
    }
    Ok((rounds, other))
}

/// Clears the change of an `ALL` row whose two compared windows were observed in different
/// sets of regions (e.g. `peak` in three regions, `night` in one): windows are local time, and
/// such a difference would measure the regions, not the time of day.
fn without_mixed_all_changes(mut rows: Vec<WindowsRow>) -> Vec<WindowsRow> {
    let regions_with = |rows: &[WindowsRow], provider: &str, i: usize| -> BTreeSet<String> {
        rows.iter()
            .filter(|r| r.provider == provider && r.region != ALL_REGIONS)
            .filter(|r| r.windows.get(i).is_some_and(|w| w.stat.samples > 0))
            .map(|r| r.region.clone())
            .collect()
    };
    let mixed: Vec<String> = rows
        .iter()
        .filter(|r| r.region == ALL_REGIONS)
        .filter(|r| regions_with(&rows, &r.provider, 0) != regions_with(&rows, &r.provider, 1))
        .map(|r| r.provider.clone())
        .collect();
    for r in rows
        .iter_mut()
        .filter(|r| r.region == ALL_REGIONS && mixed.contains(&r.provider))
    {
        r.change_ms = None;
        r.change_pct = None;
    }
    rows
}

fn ms_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A group's percentile `percentile` as [`ms_text`], marked `~` when its samples do not
/// support it ([`stats::supported`]); and whether it is marked.
fn ms_marked(stat: &GroupStat, percentile: u32) -> (String, bool) {
    let unsupported =
        stat.value_ms.is_some() && !stats::supported(stat.samples, f64::from(percentile));
    let mark = if unsupported {
        latmesh_results::percentiles::UNSUPPORTED_MARK
    } else {
        ""
    };
    (format!("{mark}{}", ms_text(stat.value_ms)), unsupported)
}

fn window_name(w: &str) -> &str {
    if w.is_empty() { "(none)" } else { w }
}

impl WindowsReport {
    /// The report as a text table (what `latmesh query windows` prints).
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let p = self.percentile;
        let _ = write!(
            out,
            "{} P{p} (ms) by time window",
            self.metric.to_uppercase()
        );
        if let Some((a, b)) = &self.compared {
            let _ = write!(
                out,
                "; change = {} − {} (ms, and % of {})",
                window_name(a),
                window_name(b),
                window_name(b)
            );
        }
        let _ = writeln!(out);
        let _ = write!(
            out,
            "scenarios: {}",
            match self.scenarios.as_slice() {
                [] => "every scenario merged".to_string(),
                [one] => one.clone(),
                many => format!("{} merged", many.join(", ")),
            }
        );
        if !self.left_out_scenarios.is_empty() {
            let _ = write!(
                out,
                " (left out: {}, load tests run at one time only; pick one with --scenario)",
                self.left_out_scenarios.join(", ")
            );
        }
        let _ = writeln!(out);
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        let mut header = vec![TCell::new("provider"), TCell::new("region")];
        for w in &self.windows {
            header.push(TCell::new(format!("{} P{p}", window_name(w))));
            header.push(TCell::new(format!("{} attempts / err %", window_name(w))));
        }
        header.push(TCell::new("change ms"));
        header.push(TCell::new("change %"));
        t.set_header(header);
        let right = |s: String| TCell::new(s).set_alignment(CellAlignment::Right);
        let mut marked = false;
        for r in &self.rows {
            let mut row = vec![TCell::new(&r.provider), TCell::new(&r.region)];
            for w in &r.windows {
                let (text, m) = ms_marked(&w.stat, p);
                marked |= m;
                row.push(right(text));
                row.push(right(format!(
                    "{} / {:.1}",
                    w.stat.attempts, w.stat.error_pct
                )));
            }
            row.push(right(
                r.change_ms.map_or("-".into(), |v| format!("{v:+.1}")),
            ));
            row.push(right(
                r.change_pct.map_or("-".into(), |v| format!("{v:+.1}%")),
            ));
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", latmesh_results::percentiles::legend());
        }
        out
    }
}

/// Time buckets of `latmesh query trend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrendBucket {
    /// UTC hours (what `toStartOfHour` gives on a UTC server).
    Hour,
    /// UTC days.
    Day,
    /// Hour of the day (0-23) in each region's local time, every day folded together (needs
    /// the campaign's time zones).
    LocalHour,
}

impl TrendBucket {
    /// `hour`, `day` or `local-hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            TrendBucket::Hour => "hour",
            TrendBucket::Day => "day",
            TrendBucket::LocalHour => "local-hour",
        }
    }

    /// Parses [`TrendBucket::as_str`]'s names.
    pub fn parse(s: &str) -> Option<TrendBucket> {
        [TrendBucket::Hour, TrendBucket::Day, TrendBucket::LocalHour]
            .into_iter()
            .find(|b| b.as_str() == s)
    }

    /// The bucket of UTC seconds `secs` (an SQL expression) as an `Int64` SQL expression:
    /// the bucket start in UTC seconds, or the local hour.
    fn sql(self, secs: &str, spec: &WindowSpec) -> String {
        match self {
            TrendBucket::Hour => format!("intDiv({secs}, 3600) * 3600"),
            TrendBucket::Day => format!("intDiv({secs}, 86400) * 86400"),
            TrendBucket::LocalHour => format!("toInt64({})", local_hour_sql(spec, secs)),
        }
    }
}

/// One bucket of a provider's trend in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendRow {
    /// Region, or `ALL`.
    pub region: String,
    /// The bucket: its start in UTC seconds (`hour`, `day`), or the local hour 0-23
    /// (`local-hour`).
    pub bucket: i64,
    /// The bucket as text: `2024-03-12 14:00` (UTC), `2024-03-12`, or `09h` (local).
    pub label: String,
    /// The bucket's counts (attempts sent in it) and percentile (over histograms whose
    /// interval starts in it), flattened in JSON.
    #[serde(flatten)]
    pub stat: GroupStat,
}

/// What `latmesh query trend` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendReport {
    /// The provider.
    pub provider: String,
    /// The metric.
    pub metric: String,
    /// 50, 90 or 99.
    pub percentile: u32,
    /// `hour`, `day` or `local-hour`.
    pub bucket: String,
    /// By region (`ALL` last), then bucket.
    pub rows: Vec<TrendRow>,
}

/// A provider's `percentile` of `metric` per time bucket, per region (and `ALL` regions
/// merged, when the rows span more than one): exact over the merged interval histograms whose
/// interval starts in the bucket, with the attempts sent in it and their error %. Buckets are
/// taken on the coordinator's clock (request send time, histogram interval start, corrected
/// with each batch's clock offset — the times window labels use); the `from`/`to` filter is
/// on the agents' clocks (see [`QueryFilter`]). `local-hour` folds every day together by the
/// hour of day in each region's zone (from the campaign's stored plan).
///
/// # Errors
/// [`StoreError::Rejected`] when `filter.provider` is missing, or for `local-hour` without a
/// stored campaign in `filter.campaign_id`; [`StoreError::InvalidName`] for a bad `db`; the
/// server's or connection's error otherwise.
pub async fn trend(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    metric: Metric,
    percentile: Percentile,
    bucket: TrendBucket,
) -> Result<TrendReport, StoreError> {
    check_identifier(db)?;
    let rejected = |message: String| StoreError::Rejected {
        code: None,
        message,
    };
    let provider = filter
        .provider
        .clone()
        .ok_or_else(|| rejected("a trend is of one provider: give one".into()))?;
    let spec = if bucket == TrendBucket::LocalHour {
        let id = filter.campaign_id.as_deref().ok_or_else(|| {
            rejected("local-hour buckets need a campaign (its time zones)".into())
        })?;
        stored_window_spec(client, db, id)
            .await?
            .ok_or_else(|| rejected(format!("campaign {id:?} is not stored")))?
    } else {
        WindowSpec::default()
    };
    let cells = grouped(
        client,
        db,
        filter,
        &[],
        metric,
        percentile,
        &bucket.sql(REQUEST_COORD_SECS, &spec),
        &bucket.sql(HISTOGRAM_COORD_SECS, &spec),
    )
    .await?;
    let mut rows = Vec::new();
    for ((_, _, region), groups) in cells {
        let mut buckets: Vec<(i64, GroupCell)> = groups
            .into_iter()
            .filter_map(|(g, v)| g.parse::<i64>().ok().map(|b| (b, v)))
            .collect();
        buckets.sort_by_key(|(b, _)| *b);
        for (b, cell) in buckets {
            rows.push(TrendRow {
                region: region.clone(),
                bucket: b,
                label: match bucket {
                    TrendBucket::Hour => utc_label(b, false),
                    TrendBucket::Day => utc_label(b, true),
                    TrendBucket::LocalHour => format!("{b:02}h"),
                },
                stat: GroupStat::of(cell),
            });
        }
    }
    Ok(TrendReport {
        provider,
        metric: metric.as_str().to_string(),
        percentile: percentile.number(),
        bucket: bucket.as_str().to_string(),
        rows,
    })
}

impl TrendReport {
    /// The report as a text table (what `latmesh query trend` prints).
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let when = match self.bucket.as_str() {
            "local-hour" => "local hour of day",
            "day" => "UTC day",
            _ => "UTC hour",
        };
        let _ = writeln!(
            out,
            "{}: {} P{} (ms) per {when}",
            self.provider,
            self.metric.to_uppercase(),
            self.percentile
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "region",
            self.bucket.as_str(),
            &format!("P{}", self.percentile),
            "samples",
            "attempts",
            "err %",
        ]);
        let right = |s: String| TCell::new(s).set_alignment(CellAlignment::Right);
        let mut marked = false;
        for r in &self.rows {
            let (text, m) = ms_marked(&r.stat, self.percentile);
            marked |= m;
            t.add_row(vec![
                TCell::new(&r.region),
                TCell::new(&r.label),
                right(text),
                right(r.stat.samples.to_string()),
                right(r.stat.attempts.to_string()),
                right(format!("{:.1}", r.stat.error_pct)),
            ]);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", latmesh_results::percentiles::legend());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    fn wrow(provider: &str, region: &str, samples: [u64; 2]) -> WindowsRow {
        let stat = |window: &str, samples: u64| WindowStat {
            window: window.into(),
            stat: GroupStat::of(GroupCell {
                attempts: samples,
                samples,
                value_us: (samples > 0).then_some(1_000),
                ..Default::default()
            }),
        };
        WindowsRow {
            provider: provider.into(),
            region: region.into(),
            windows: vec![stat("peak", samples[0]), stat("night", samples[1])],
            change_ms: Some(1.0),
            change_pct: Some(1.0),
        }
    }

    #[test]
    fn all_rows_do_not_compare_windows_seen_in_different_regions() {
        let rows = vec![
            wrow("p", "us-east", [5, 0]),
            wrow("p", "ap-southeast", [5, 5]),
            wrow("p", ALL_REGIONS, [10, 5]),
            wrow("q", "us-east", [5, 5]),
            wrow("q", ALL_REGIONS, [5, 5]),
        ];
        let rows = without_mixed_all_changes(rows);
        let change = |p: &str, r: &str| {
            rows.iter()
                .find(|x| x.provider == p && x.region == r)
                .unwrap()
                .change_ms
        };
        assert_eq!(change("p", ALL_REGIONS), None);
        assert_eq!(change("p", "ap-southeast"), Some(1.0));
        assert_eq!(change("q", ALL_REGIONS), Some(1.0));
    }

    use super::*;

    #[test]
    fn local_hour_sql_picks_each_region_s_zone() {
        let zones = [
            ("ap".to_string(), "+08:00".to_string()),
            ("us".to_string(), "America/New_York".to_string()),
        ]
        .into();
        let spec = WindowSpec::new(&zones, &[]).unwrap();
        let sql = local_hour_sql(&spec, "s");
        assert_eq!(
            sql,
            "multiIf(region = 'ap', toUInt8(intDiv(modulo(toInt64(s) + (28800) + 86400, 86400), 3600)), \
             region = 'us', toHour(toTimeZone(toDateTime(toUInt32(s)), 'America/New_York')), \
             toUInt8(intDiv(modulo(toInt64(s) + (0) + 86400, 86400), 3600)))"
        );
        assert!(!local_hour_sql(&WindowSpec::default(), "s").contains("multiIf"));
        assert_eq!(sql_string("it's \\"), "'it\\'s \\\\'");
    }

    #[test]
    fn percentiles_and_buckets_parse() {
        for n in [50, 90, 95, 99] {
            assert_eq!(Percentile::from_number(n).unwrap().number(), n);
        }
        assert_eq!(Percentile::from_number(98), None);
        assert_eq!(Percentile::P99.quantile(), 0.99);
        assert_eq!(Percentile::P95.sql(), "0.95");
        for b in ["hour", "day", "local-hour"] {
            assert_eq!(TrendBucket::parse(b).unwrap().as_str(), b);
        }
        assert_eq!(TrendBucket::parse("week"), None);
    }

    #[test]
    fn where_clause_binds_in_order() {
        let (wh, args) = where_clause(&QueryFilter::default(), "t_us", "t");
        assert!(wh.is_empty() && args.is_empty());
        let f = QueryFilter {
            campaign_id: Some("c".into()),
            window: Some("peak".into()),
            from_unix_us: Some(1_700_000_000_500_000),
            ..Default::default()
        };
        let (wh, args) = where_clause(&f, "t_us", "t");
        assert_eq!(
            wh,
            " WHERE campaign_id = ? AND `window` = ? AND t >= toDateTime(?) AND t_us >= ?"
        );
        assert_eq!(args.len(), 4);
        assert!(matches!(&args[2], Arg::U64(1_700_000_000)));
    }
}
