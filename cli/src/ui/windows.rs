//! `latmesh query windows` as a text table ([`render`]), and how a group's percentile is
//! written in the windows and trend tables ([`ms_marked`]).

use comfy_table::{Cell as TCell, Table, presets};

use super::right;
use latmesh_results::percentiles;
use latmesh_results::stats;
use latmesh_store::query::{GroupStat, WindowsReport};

fn ms_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A group's percentile `percentile` as [`ms_text`], marked `~` when its samples do not
/// support it ([`stats::supported`]); and whether it is marked.
pub(crate) fn ms_marked(stat: &GroupStat, percentile: u32) -> (String, bool) {
    let unsupported =
        stat.value_ms.is_some() && !stats::supported(stat.samples, f64::from(percentile));
    let mark = if unsupported {
        percentiles::UNSUPPORTED_MARK
    } else {
        ""
    };
    (format!("{mark}{}", ms_text(stat.value_ms)), unsupported)
}

fn window_name(w: &str) -> &str {
    if w.is_empty() { "(none)" } else { w }
}

/// `report` as a text table (what `latmesh query windows` prints).
pub fn render(report: &WindowsReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let p = report.percentile;
    let _ = write!(
        out,
        "{} P{p} (ms) by time window",
        report.metric.to_uppercase()
    );
    if let Some((a, b)) = &report.compared {
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
        match report.scenarios.as_slice() {
            [] => "every scenario merged".to_string(),
            [one] => one.clone(),
            many => format!("{} merged", many.join(", ")),
        }
    );
    if !report.left_out_scenarios.is_empty() {
        let _ = write!(
            out,
            " (left out: {}, load tests run at one time only; pick one with --scenario)",
            report.left_out_scenarios.join(", ")
        );
    }
    let _ = writeln!(out);
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    let mut header = vec![TCell::new("provider"), TCell::new("region")];
    for w in &report.windows {
        header.push(TCell::new(format!("{} P{p}", window_name(w))));
        header.push(TCell::new(format!("{} attempts / err %", window_name(w))));
    }
    header.push(TCell::new("change ms"));
    header.push(TCell::new("change %"));
    t.set_header(header);
    let mut marked = false;
    for r in &report.rows {
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
        let _ = writeln!(out, "{}", percentiles::legend());
    }
    out
}
