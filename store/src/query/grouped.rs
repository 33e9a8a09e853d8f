//! Grouped queries ([`grouped`]): attempts, errors and an exact percentile per (region,
//! provider, group expression), the engine of `windows` and `trend`.

use std::collections::{BTreeMap, BTreeSet};

use latmesh_core::metrics::Metric;
use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_scenario_in, and_where, bind_all, sql_string, where_clause};
use super::percentile::Percentile;
use latmesh_results::summary::ALL_REGIONS;

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
    pub(super) fn of(c: GroupCell) -> Self {
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
    and_where(&mut wh, "warmup = 0");
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
pub(super) struct GroupCell {
    pub(super) attempts: u64,
    pub(super) errors: u64,
    pub(super) excluded: u64,
    pub(super) samples: u64,
    pub(super) value_us: Option<u64>,
}

/// Cells of a grouped query: (provider, ALL-last, region) → group → cell.
pub(super) type Grouped = BTreeMap<(String, bool, String), BTreeMap<String, GroupCell>>;

/// Runs [`group_counts`] and [`group_quantiles`] (per region and, when the rows span more than
/// one region, merged as `ALL`) over `scenarios` (empty: every scenario the filter keeps) and
/// joins them.
#[allow(clippy::too_many_arguments)]
pub(super) async fn grouped(
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
