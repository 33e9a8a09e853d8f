//! A stored campaign's [`ReportData`] read back from ClickHouse ([`report_data`]), and what
//! only ClickHouse keeps ([`extras`]): each row's time window and its time.
//!
//! - The summary is the one `latmesh query` rebuilds ([`stored_summary`]: matrix cells and
//!   sweep rows from the matrix and sweep queries), plus the open-loop rate rows, computed
//!   here with the same arithmetic as in memory ([`load_stats::rate_row`]).
//! - Histograms: [`merged_histograms`] (every stored bucket summed per value and recorded into
//!   an HdrHistogram of the agents' bounds: the coordinator's buckets and counts, same
//!   percentiles to the microsecond). `ALL` merges the regions.
//! - Time series: exact P50/P99 of TTFT and E2E per provider and time bucket (interval start
//!   on the coordinator's clock), every region and scenario merged.
//! - Windows: [`windows`] for TTFT P50 and E2E P50.
//! - What `latmesh compat` measured for the campaign: [`compat_report`] (its latest run).

use std::collections::BTreeMap;

use anyhow::Context as _;
use latmesh_core::hist_sparse::SparseHistogram;
use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::campaign::stored_plan;
use super::compat::compat_report;
use super::filter::QueryFilter;
use super::histograms::merged_histograms;
use super::percentile::Percentile;
use super::summary::stored_summary;
use super::windows::{WindowsReport, windows};
use latmesh_results::aggregate::counts_in_error_rates;
use latmesh_results::load_stats::{self, RateMeasure, RateRow};
use latmesh_results::report_data::{ALL, CellMetric, ReportData};
use latmesh_results::saturation::ArrivalLatency;
use latmesh_results::summary::Percentiles;

/// A provider's latency over time, all regions and scenarios merged.
#[derive(Clone, Debug, Serialize)]
pub struct TimeSeries {
    /// Provider.
    pub provider: String,
    /// `ttft` or `e2e`.
    pub metric: Metric,
    /// Bucket width, s.
    pub bucket_s: i64,
    /// One point per bucket with samples, ascending.
    pub points: Vec<TimePoint>,
}

/// One bucket of a [`TimeSeries`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimePoint {
    /// Bucket start, coordinator clock, UTC s.
    pub t_unix_s: i64,
    /// Samples in the bucket.
    pub samples: u64,
    /// P50, ms (exact over the bucket's merged histograms).
    pub p50_ms: f64,
    /// P99, ms.
    pub p99_ms: f64,
}

/// The sections that need per-row time, which only ClickHouse keeps: `None` means the source
/// cannot give them (the report then says so).
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// Peak vs off-peak reports (`None`: windows unknown to the source).
    pub windows: Option<Vec<WindowsReport>>,
    /// Per-provider time series (`None`: time unknown to the source).
    pub time_series: Option<Vec<TimeSeries>>,
}

#[derive(clickhouse::Row, Deserialize)]
struct OutcomeRow {
    region: String,
    provider: String,
    scenario: String,
    outcome: String,
    n: u64,
    firsts: u64,
    final_n: u64,
}

/// One `rate` request (final attempt of a first turn) for the provider saturation rule.
#[derive(clickhouse::Row, Deserialize)]
struct ArrivalRow {
    region: String,
    provider: String,
    scenario: String,
    slot: u32,
    outcome: String,
    stream: bool,
    ttft_us: Option<u64>,
    e2e_us: Option<u64>,
}

#[derive(clickhouse::Row, Deserialize)]
struct SpanRow {
    lo: i64,
    hi: i64,
    rows: u64,
}

#[derive(clickhouse::Row, Deserialize)]
struct SeriesRow {
    provider: String,
    metric: String,
    t: i64,
    samples: u64,
    q: Vec<u64>,
}

/// Time-series bucket widths, s: the first that gives at most [`MAX_BUCKETS`] buckets.
const BUCKET_WIDTHS_S: [i64; 13] = [
    2, 5, 10, 30, 60, 300, 600, 1_800, 3_600, 10_800, 21_600, 86_400, 604_800,
];

/// Most buckets a time series aims at.
const MAX_BUCKETS: i64 = 60;

/// The bucket width for a campaign whose interval starts span `span_s` seconds.
pub fn bucket_width_s(span_s: i64) -> i64 {
    BUCKET_WIDTHS_S
        .into_iter()
        .find(|w| span_s / w <= MAX_BUCKETS)
        .unwrap_or(BUCKET_WIDTHS_S[BUCKET_WIDTHS_S.len() - 1])
}

/// The stored campaign `campaign_id` of database `db` (see the module docs for what is rebuilt
/// and how).
///
/// # Errors
/// ClickHouse errors; a campaign that is not stored or has no results.
pub async fn report_data(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<ReportData> {
    check_identifier(db)?;
    let summary = stored_summary(client, db, &QueryFilter::campaign(campaign_id)).await?;
    let plan = stored_plan(client, db, campaign_id)
        .await?
        .with_context(|| format!("campaign {campaign_id:?} is not in {db}.campaigns"))?;
    let hists = histograms(client, db, campaign_id).await?;
    let compat = match compat_report(client, db, campaign_id).await {
        Ok(c) => c,
        // A database not migrated to version 9 has no compat tables: nothing was measured.
        Err(e) if e.is_schema_mismatch() => {
            tracing::warn!(db, error = %e, "no compat tables (run `latmesh db migrate`): the report shows no compatibility checks");
            Default::default()
        }
        Err(e) => return Err(e.into()),
    };
    let mut data = ReportData {
        summary,
        plan,
        hists,
        compat,
    };
    // A summary rebuilt from ClickHouse has no rate rows of its own.
    let rates = rate_rows(client, db, &data).await?;
    data.summary.rates = rates;
    Ok(data)
}

/// Every cell's merged histograms, per region and `ALL` ([`merged_histograms`]).
async fn histograms(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<BTreeMap<CellMetric, SparseHistogram>> {
    let filter = QueryFilter::campaign(campaign_id);
    let merged = merged_histograms(client, db, &filter, &Metric::ALL, false).await?;
    let mut out = BTreeMap::new();
    for (g, h) in merged {
        let key = CellMetric {
            region: g.region,
            provider: g.provider,
            scenario: g.scenario,
            metric: g.metric,
        };
        latmesh_results::report_data::insert_hist(&mut out, key, &h);
    }
    Ok(out)
}

/// The open-loop rows of `data`'s plan, as [`load_stats::rate_rows`] builds them in memory:
/// counts from `requests`, percentiles from `data.hists`, agents per region from the stored
/// agents.
async fn rate_rows(
    client: &clickhouse::Client,
    db: &str,
    data: &ReportData,
) -> anyhow::Result<Vec<RateRow>> {
    let plan = &data.plan;
    if !plan
        .scenarios
        .iter()
        .any(|s| matches!(s.load, LoadModel::Rate(_)))
    {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT region, provider, scenario, outcome, count() AS n, \
         countIf(attempt <= 1 AND turn <= 1) AS firsts, sum(final_attempt) AS final_n \
         FROM {db}.requests WHERE campaign_id = ? AND warmup = 0 \
         GROUP BY region, provider, scenario, outcome"
    );
    let rows: Vec<OutcomeRow> = client
        .query(&sql)
        .bind(&data.summary.campaign_id)
        .fetch_all()
        .await
        .map_err(StoreError::from)?;
    let arrivals: Vec<ArrivalRow> = client
        .query(&format!(
            "SELECT region, provider, scenario, slot, outcome, stream, ttft_us, e2e_us \
             FROM {db}.requests WHERE campaign_id = ? AND `load` = 'rate' \
             AND warmup = 0 AND final_attempt = 1 AND turn <= 1"
        ))
        .bind(&data.summary.campaign_id)
        .fetch_all()
        .await
        .map_err(StoreError::from)?;
    let mut per_region: BTreeMap<&str, u64> = BTreeMap::new();
    for a in &data.summary.agents {
        *per_region.entry(a.region.as_str()).or_default() += 1;
    }
    let mut out = Vec::new();
    for (i, s) in plan.scenarios.iter().enumerate() {
        let LoadModel::Rate(spec) = &s.load else {
            continue;
        };
        // Rate sweeps and SLO searches have rows per step instead (`Summary.rate_steps`).
        if latmesh_results::slo_stats::has_rate_steps(spec) {
            continue;
        }
        let regions = load_stats::row_regions(plan, None);
        for region in regions {
            let agents = match region {
                Some(r) => per_region.get(r).copied().unwrap_or(0),
                None => data.summary.agents.len() as u64,
            };
            let scheduled = load_stats::scheduled_arrivals(spec, plan.seed, i, s.warmup);
            for provider in &plan.providers {
                let mut m = RateMeasure {
                    agents,
                    stream: s.stream,
                    ..Default::default()
                };
                m.by_arrival = arrivals
                    .iter()
                    .filter(|r| {
                        r.provider == provider.name
                            && r.scenario == s.name
                            && region.is_none_or(|want| want == r.region)
                    })
                    .filter(|r| Outcome::parse(&r.outcome).is_none_or(counts_in_error_rates))
                    .map(|r| {
                        let ok = r.outcome == Outcome::Ok.as_str();
                        ArrivalLatency::of(r.slot, ok, r.stream, r.ttft_us, r.e2e_us)
                    })
                    .collect();
                for r in rows.iter().filter(|r| {
                    r.provider == provider.name
                        && r.scenario == s.name
                        && region.is_none_or(|want| want == r.region)
                }) {
                    let outcome = Outcome::parse(&r.outcome);
                    let measured = outcome.is_none_or(counts_in_error_rates);
                    if outcome == Some(Outcome::Dropped) {
                        m.dropped += r.n;
                    }
                    if measured {
                        m.sent += r.firsts;
                        m.requests += r.final_n;
                        if outcome != Some(Outcome::Ok) {
                            m.requests_failed += r.final_n;
                        }
                    }
                }
                let at = |metric| {
                    data.hist(region.unwrap_or(ALL), &provider.name, &s.name, metric)
                        .map(|h| Percentiles::of_list(&h, &plan.percentiles))
                };
                m.sched_lag = at(Metric::SchedLag);
                m.ttft = at(Metric::Ttft);
                m.e2e = at(Metric::E2e);
                m.ttft_intended = at(Metric::TtftIntended);
                m.e2e_intended = at(Metric::E2eIntended);
                // One step: the row's cached share is its matrix cell's.
                m.cached_share = data
                    .summary
                    .cell(region.unwrap_or(ALL), &provider.name, &s.name)
                    .and_then(|c| c.cached_share.clone());
                out.push(load_stats::rate_row(
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
    Ok(out)
}

/// What only ClickHouse knows about `data`'s campaign: peak vs off-peak (when the plan has
/// windows) and per-provider time series.
///
/// # Errors
/// ClickHouse errors.
pub async fn extras(
    client: &clickhouse::Client,
    db: &str,
    data: &ReportData,
) -> anyhow::Result<Extras> {
    check_identifier(db)?;
    let id = &data.summary.campaign_id;
    let reports = if data.plan.windows.is_empty() {
        Vec::new()
    } else {
        let filter = QueryFilter::campaign(id);
        let mut out = Vec::new();
        for metric in [Metric::Ttft, Metric::E2e] {
            out.push(windows(client, db, &filter, metric, Percentile::P50).await?);
        }
        out
    };
    Ok(Extras {
        windows: Some(reports),
        time_series: Some(time_series(client, db, id).await?),
    })
}

/// TTFT and E2E P50/P99 per provider and time bucket (coordinator clock).
async fn time_series(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<Vec<TimeSeries>> {
    const COORD_US: &str = "(toInt64(start_unix_us) + clock_offset_us)";
    let span: SpanRow = client
        .query(&format!(
            "SELECT min({COORD_US}) AS lo, max({COORD_US}) AS hi, count() AS n \
             FROM {db}.histograms WHERE campaign_id = ?"
        ))
        .bind(campaign_id)
        .fetch_one()
        .await
        .map_err(StoreError::from)?;
    if span.rows == 0 {
        return Ok(Vec::new());
    }
    let width_s = bucket_width_s((span.hi - span.lo) / 1_000_000);
    let width_us = width_s * 1_000_000;
    let sql = format!(
        "SELECT provider, metric, intDiv({COORD_US}, {width_us}) * {width_s} AS t, \
         sum(weight) AS samples, quantilesExactWeighted(0.5, 0.99)(value, weight) AS q \
         FROM {db}.histograms ARRAY JOIN `values` AS value, `counts` AS weight \
         WHERE campaign_id = ? AND metric IN ('ttft', 'e2e') \
         GROUP BY provider, metric, t ORDER BY provider, metric, t"
    );
    let rows: Vec<SeriesRow> = client
        .query(&sql)
        .bind(campaign_id)
        .fetch_all()
        .await
        .map_err(StoreError::from)?;
    let mut out: Vec<TimeSeries> = Vec::new();
    for r in rows {
        let Some(metric) = Metric::parse(&r.metric) else {
            continue;
        };
        let ms = |i: usize| r.q.get(i).copied().unwrap_or(0) as f64 / 1000.0;
        let point = TimePoint {
            t_unix_s: r.t,
            samples: r.samples,
            p50_ms: ms(0),
            p99_ms: ms(1),
        };
        match out.last_mut() {
            Some(ts) if ts.provider == r.provider && ts.metric == metric => ts.points.push(point),
            _ => out.push(TimeSeries {
                provider: r.provider,
                metric,
                bucket_s: width_s,
                points: vec![point],
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_widths_keep_series_short() {
        assert_eq!(bucket_width_s(0), 2);
        assert_eq!(bucket_width_s(40), 2);
        assert_eq!(bucket_width_s(121), 2);
        assert_eq!(bucket_width_s(122), 5);
        assert_eq!(bucket_width_s(3_600), 60);
        assert_eq!(bucket_width_s(86_400), 1_800);
        assert_eq!(bucket_width_s(100 * 86_400), 604_800);
    }
}
