//! Ranks of providers per region (in memory) or per region and time window (ClickHouse:
//! `clickhouse::query::window_ranks`), and how stable they are.
//!
//! In each column (a region, or a region's time window) the providers with samples are
//! ranked by the point estimate of one percentile of one metric ([`super::ranking_metric`]):
//! 1 = fastest, ties share their average rank. Per provider: its rank in every column, the
//! best (min), worst (max) and mean rank and the range max − min (0: the same place
//! everywhere). Over the table, Kendall's coefficient of concordance W
//! ([`super::stats::kendall_w`], tie-corrected) of the columns' rankings, restricted to the
//! providers ranked in every column (re-ranked among themselves): 1 when every region
//! (window) orders the providers the same way, near 0 when the orders are unrelated; `None`
//! with fewer than two columns or providers.

use latmesh_core::metrics::Metric;
use serde::Serialize;

use super::stats::{average_ranks, kendall_w};
use super::{Analysis, ranking_metric};
use crate::report_data::ReportData;

/// One provider's ranks across a [`RankTable`]'s columns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProviderRanks {
    /// Provider.
    pub provider: String,
    /// Its value in each column, ms (`None`: no samples there).
    pub values_ms: Vec<Option<f64>>,
    /// Its rank in each column (1 = fastest; ties averaged).
    pub ranks: Vec<Option<f64>>,
    /// Best rank.
    pub min_rank: Option<f64>,
    /// Worst rank.
    pub max_rank: Option<f64>,
    /// Mean rank over the columns where it has one.
    pub mean_rank: Option<f64>,
    /// `max_rank − min_rank`.
    pub rank_range: Option<f64>,
}

/// Providers ranked in every column of a scenario, and the stability of those ranks.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankTable {
    /// Scenario (`None`: scenarios merged).
    pub scenario: Option<String>,
    /// The metric ranked by.
    pub metric: Metric,
    /// Its percentile.
    pub percentile: f64,
    /// What the columns are: `region`, or `region/window`.
    pub by: String,
    /// Column labels (regions, or `region/window`).
    pub columns: Vec<String>,
    /// One row per provider, in plan (or report) order.
    pub rows: Vec<ProviderRanks>,
    /// Kendall's W over the columns, for the providers ranked in every column.
    pub kendall_w: Option<f64>,
    /// How many providers W is over.
    pub w_providers: usize,
}

impl RankTable {
    /// The table of `providers` × `columns` values (ms; `None`: no samples).
    pub fn from_values(
        scenario: Option<String>,
        metric: Metric,
        percentile: f64,
        by: &str,
        columns: Vec<String>,
        providers: &[String],
        values: Vec<Vec<Option<f64>>>,
    ) -> RankTable {
        let ncols = columns.len();
        let col_ranks: Vec<Vec<Option<f64>>> = (0..ncols)
            .map(|j| average_ranks(&values.iter().map(|row| row[j]).collect::<Vec<_>>()))
            .collect();
        let rows: Vec<ProviderRanks> = providers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let ranks: Vec<Option<f64>> = (0..ncols).map(|j| col_ranks[j][i]).collect();
                let have: Vec<f64> = ranks.iter().flatten().copied().collect();
                let min = have.iter().copied().reduce(f64::min);
                let max = have.iter().copied().reduce(f64::max);
                ProviderRanks {
                    provider: p.clone(),
                    values_ms: values[i].clone(),
                    ranks,
                    min_rank: min,
                    max_rank: max,
                    mean_rank: (!have.is_empty())
                        .then(|| have.iter().sum::<f64>() / have.len() as f64),
                    rank_range: min.zip(max).map(|(a, b)| b - a),
                }
            })
            .collect();
        // W over the providers with a value in every column, re-ranked among themselves.
        let complete: Vec<usize> = (0..providers.len())
            .filter(|&i| values[i].iter().all(Option::is_some))
            .collect();
        let rankings: Vec<Vec<f64>> = (0..ncols)
            .map(|j| {
                average_ranks(&complete.iter().map(|&i| values[i][j]).collect::<Vec<_>>())
                    .into_iter()
                    .flatten()
                    .collect()
            })
            .collect();
        RankTable {
            scenario,
            metric,
            percentile,
            by: by.to_string(),
            columns,
            rows,
            kendall_w: kendall_w(&rankings),
            w_providers: complete.len(),
        }
    }
}

/// Per scenario: the providers ranked in each region (not `ALL`) by the scenario's
/// [`ranking_metric`], from the merged histograms.
pub fn region_ranks(data: &ReportData, analysis: &Analysis) -> Vec<RankTable> {
    let mut out = Vec::new();
    for scenario in &analysis.scenarios {
        let (metric, percentile) = ranking_metric(data, scenario);
        let values: Vec<Vec<Option<f64>>> = analysis
            .providers
            .iter()
            .map(|p| {
                analysis
                    .regions
                    .iter()
                    .map(|r| {
                        data.hist(r, p, scenario, metric)
                            .filter(|h| !h.is_empty())
                            .map(|h| h.value_at_quantile(percentile / 100.0) as f64 / 1000.0)
                    })
                    .collect()
            })
            .collect();
        if values.iter().flatten().all(Option::is_none) {
            continue;
        }
        out.push(RankTable::from_values(
            Some(scenario.clone()),
            metric,
            percentile,
            "region",
            analysis.regions.clone(),
            &analysis.providers,
            values,
        ));
    }
    out
}
