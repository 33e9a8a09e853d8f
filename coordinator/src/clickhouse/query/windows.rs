//! Peak vs off-peak ([`windows`], `latmesh query windows`): a percentile per time window,
//! provider and region, and the change between the first two windows.

use std::collections::BTreeSet;

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};
use latmesh_core::metrics::Metric;
use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::campaign::{stored_plan, stored_window_spec};
use super::filter::QueryFilter;
use super::grouped::{GroupStat, grouped};
use super::percentile::Percentile;
use crate::analysis::stats;
use crate::summary::ALL_REGIONS;

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
pub(super) fn ms_marked(stat: &GroupStat, percentile: u32) -> (String, bool) {
    let unsupported =
        stat.value_ms.is_some() && !stats::supported(stat.samples, f64::from(percentile));
    let mark = if unsupported {
        crate::percentiles::UNSUPPORTED_MARK
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
            let _ = writeln!(out, "{}", crate::percentiles::legend());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::grouped::GroupCell;
    use super::*;

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
}
