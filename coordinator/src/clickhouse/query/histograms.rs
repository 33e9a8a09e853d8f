//! Merged histograms rebuilt from the stored buckets ([`merged_histograms`]): the exact
//! percentiles of the matrix, the sweeps and the reports come from them.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::hist::new_histogram;
use latmesh_core::metrics::Metric;
use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, sql_string, where_clause};
use crate::summary::ALL_REGIONS;

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
