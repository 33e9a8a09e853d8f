//! Text pieces of an [`Analysis`] shared by its terminal view (`crate::ui::analysis`) and its
//! HTML fragment ([`Analysis::to_html`]): the ordering chains of providers and the rank
//! tables' labels.

use std::fmt::Write as _;

use latmesh_core::metrics::Metric;

use super::{Analysis, CellCis, RankTable, Verdict};

/// A chain link between two providers sorted by estimate.
pub fn link(v: Option<Verdict>) -> &'static str {
    match v {
        Some(Verdict::AFaster) => "<",
        Some(Verdict::BFaster) => ">",
        Some(Verdict::NoClearDifference) => "≈",
        _ => "?",
    }
}

/// The providers of (region, scenario, metric) sorted by the estimate at `percentile`, with
/// the verdict between each one and the next.
pub fn chain<'a>(
    a: &'a Analysis,
    region: &str,
    scenario: &str,
    metric: Metric,
    percentile: f64,
) -> Vec<(&'a CellCis, Option<&'static str>)> {
    let mut row: Vec<&CellCis> = a
        .providers
        .iter()
        .filter_map(|p| a.cell(region, p, scenario, metric))
        .collect();
    let est = |c: &CellCis| c.at(percentile).map_or(f64::INFINITY, |p| p.estimate_ms);
    row.sort_by(|x, y| est(x).total_cmp(&est(y)));
    (0..row.len())
        .map(|i| {
            let next = row.get(i + 1).map(|n| {
                link(a.comparison(
                    region,
                    scenario,
                    metric,
                    percentile,
                    &row[i].provider,
                    &n.provider,
                ))
            });
            (row[i], next)
        })
        .collect()
}

/// The chain as text: `a 1.2 [1.0, 1.4] < b …` (see [`chain`]).
pub fn chain_text(items: &[(&CellCis, Option<&'static str>)], percentile: f64) -> String {
    let mut s = String::new();
    for (c, next) in items {
        let p = c.at(percentile).map_or("-".into(), |p| p.text());
        let _ = write!(s, "{} {p}", c.provider);
        if let Some(l) = next {
            let _ = write!(s, " {l} ");
        }
    }
    s
}

/// A rank: `2`, `1.5` (ties share the mean rank), `-` when missing.
pub fn rank_text(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(r) if r.fract() == 0.0 => format!("{r:.0}"),
        Some(r) => format!("{r:.1}"),
    }
}

/// The title line of a rank table (scenario, metric, percentile, Kendall's W).
pub fn rank_title(t: &RankTable) -> String {
    format!(
        "{}{} P{} ranks per {} (1 = fastest); Kendall's W {} over {} providers",
        t.scenario
            .as_deref()
            .map_or(String::new(), |s| format!("{s}: ")),
        t.metric,
        t.percentile,
        t.by,
        t.kendall_w.map_or("-".into(), |w| format!("{w:.2}")),
        t.w_providers
    )
}
