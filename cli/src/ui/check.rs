//! The text `latmesh check` prints without `--json`: what fired, what was not significant,
//! what was skipped.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::check_report::CheckReport;

/// A check report as text (what `latmesh check` prints without `--json`).
pub fn render(report: &CheckReport) -> String {
    let mut out = String::new();
    let vs = report
        .baseline
        .as_deref()
        .map_or(String::new(), |b| format!(" vs baseline {b}"));
    let rules: BTreeSet<&str> = report.fired.iter().map(|f| f.rule.as_str()).collect();
    if report.fired.is_empty() {
        let _ = writeln!(
            out,
            "check {}{vs}: {}, no rule fired ({} checks)",
            report.campaign,
            if report.checked == 0 {
                "NOTHING CHECKED (every rule was skipped; exit status 2)"
            } else {
                "ok"
            },
            report.checked
        );
    } else {
        let _ = writeln!(
            out,
            "check {}{vs}: {} rule(s) fired on {} cell(s) ({} checks)",
            report.campaign,
            rules.len(),
            report.fired.len(),
            report.checked
        );
    }
    for f in &report.fired {
        let _ = writeln!(
            out,
            "FIRED  {:<24} {:<14} {:<20} {:<14} {}",
            f.rule, f.region, f.provider, f.scenario, f.message
        );
    }
    for f in &report.inconclusive {
        let _ = writeln!(
            out,
            "not significant: {} {} {} {}: {}",
            f.rule, f.region, f.provider, f.scenario, f.message
        );
    }
    for s in &report.skipped {
        let _ = writeln!(out, "skipped: {s}");
    }
    out
}
