//! `latmesh query trend` as a text table ([`render`]).

use comfy_table::{Cell as TCell, Table, presets};

use super::right;
use super::windows::ms_marked;
use latmesh_store::query::TrendReport;

/// `report` as a text table (what `latmesh query trend` prints).
pub fn render(report: &TrendReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let when = match report.bucket.as_str() {
        "local-hour" => "local hour of day",
        "day" => "UTC day",
        _ => "UTC hour",
    };
    let _ = writeln!(
        out,
        "{}: {} P{} (ms) per {when}",
        report.provider,
        report.metric.to_uppercase(),
        report.percentile
    );
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    t.set_header(vec![
        "region",
        report.bucket.as_str(),
        &format!("P{}", report.percentile),
        "samples",
        "attempts",
        "err %",
    ]);
    let mut marked = false;
    for r in &report.rows {
        let (text, m) = ms_marked(&r.stat, report.percentile);
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
