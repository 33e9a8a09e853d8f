//! Provider ranks per (region, time window) of a stored campaign ([`window_ranks`]), from the
//! `windows` query; [`add_window_ranks`] adds them to an [`Analysis`].

use latmesh_core::metrics::Metric;

use super::super::StoreError;
use super::filter::QueryFilter;
use super::percentile::Percentile;
use super::windows::{WindowsReport, windows};
use crate::analysis::ranks::RankTable;
use crate::analysis::{Analysis, ranking_metric};
use crate::report_data::{ALL, ReportData};

/// Adds to `analysis`, per scenario, the providers' ranks per (region, time window) from
/// ClickHouse ([`window_ranks`], by the scenario's [`ranking_metric`]; its percentile when it
/// is 50, 90 or 99 — what `query windows` answers —, else P50) to
/// [`Analysis::window_ranks`]. Does nothing for a plan without `[windows]`. Returns the
/// tables added.
///
/// # Errors
/// As [`windows`].
pub async fn add_window_ranks(
    analysis: &mut Analysis,
    data: &ReportData,
    client: &clickhouse::Client,
    db: &str,
) -> Result<usize, StoreError> {
    if data.plan.windows.is_empty() {
        return Ok(0);
    }
    let mut added = 0;
    for scenario in &analysis.scenarios {
        let (metric, pc) = ranking_metric(data, scenario);
        let percentile = Some(pc)
            .filter(|p| p.fract() == 0.0)
            .and_then(|p| Percentile::from_number(p as u32))
            .unwrap_or(Percentile::P50);
        let t = window_ranks(
            client,
            db,
            &analysis.campaign_id,
            Some(scenario),
            metric,
            percentile,
        )
        .await?;
        if !t.columns.is_empty() {
            analysis.window_ranks.push(t);
            added += 1;
        }
    }
    Ok(added)
}

/// Ranks per (region, time window) from a `latmesh query windows` report: one column per
/// region (not `ALL`) and window with samples, labelled `region/window`.
pub fn from_windows_report(scenario: Option<String>, report: &WindowsReport) -> RankTable {
    let mut providers: Vec<String> = Vec::new();
    let mut columns: Vec<String> = Vec::new();
    for r in report.rows.iter().filter(|r| r.region != ALL) {
        if !providers.contains(&r.provider) {
            providers.push(r.provider.clone());
        }
        for w in r.windows.iter().filter(|w| w.stat.value_ms.is_some()) {
            let label = format!(
                "{}/{}",
                r.region,
                if w.window.is_empty() {
                    "(none)"
                } else {
                    &w.window
                }
            );
            if !columns.contains(&label) {
                columns.push(label);
            }
        }
    }
    let values: Vec<Vec<Option<f64>>> = providers
        .iter()
        .map(|p| {
            columns
                .iter()
                .map(|col| {
                    report
                        .rows
                        .iter()
                        .filter(|r| &r.provider == p && r.region != ALL)
                        .flat_map(|r| r.windows.iter().map(move |w| (r, w)))
                        .find(|(r, w)| {
                            let name = if w.window.is_empty() {
                                "(none)"
                            } else {
                                &w.window
                            };
                            *col == format!("{}/{name}", r.region)
                        })
                        .and_then(|(_, w)| w.stat.value_ms)
                })
                .collect()
        })
        .collect();
    let metric = Metric::parse(&report.metric).unwrap_or(Metric::Ttft);
    RankTable::from_values(
        scenario,
        metric,
        f64::from(report.percentile),
        "region/window",
        columns,
        &providers,
        values,
    )
}

/// Ranks per (region, time window) of campaign `campaign_id` (one scenario, or all merged)
/// from ClickHouse ([`windows`]); add them to [`Analysis::window_ranks`].
///
/// # Errors
/// As [`windows`].
pub async fn window_ranks(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
    scenario: Option<&str>,
    metric: Metric,
    percentile: Percentile,
) -> Result<RankTable, StoreError> {
    let filter = QueryFilter {
        campaign_id: Some(campaign_id.to_string()),
        scenario: scenario.map(str::to_string),
        ..Default::default()
    };
    let report = windows(client, db, &filter, metric, percentile).await?;
    Ok(from_windows_report(scenario.map(str::to_string), &report))
}
