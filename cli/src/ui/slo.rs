//! The SLO tables of the campaign summary: goodput as a matrix cell shows it, the rate steps
//! of rate sweeps and SLO searches (per provider: step, rate, goodput, P95 TTFT, verdict), and
//! the searches' answers, one line per provider × region.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};
use latmesh_core::load::StepVerdict;
use latmesh_results::percentiles;
use latmesh_results::slo_stats::{Goodput, RateStepRow, SearchRow};
use latmesh_results::summary::ALL_REGIONS;

use super::{ms_short, right};

/// A goodput's share: `93.3 [78.7, 98.2]` (%, 95 % interval).
pub fn goodput_pct_text(g: &Goodput) -> String {
    format!("{:.1} [{:.1}, {:.1}]", g.pct, g.ci_pct.0, g.ci_pct.1)
}

/// A goodput as a table cell: `93.3 [78.7, 98.2] met` (%, 95 % interval, the SLO verdict:
/// `met`, `missed`, `undecided` when the interval contains the target, `too few` requests).
pub fn goodput_text(g: &Goodput) -> String {
    format!("{} {}", goodput_pct_text(g), g.verdict().as_str())
}

/// A step verdict in a word or two.
pub fn verdict_text(v: Option<StepVerdict>) -> &'static str {
    match v {
        None => "-",
        Some(StepVerdict::Met) => "met",
        Some(StepVerdict::Missed) => "missed",
        Some(StepVerdict::Insufficient) => "too few",
        Some(StepVerdict::AgentLimited) => "agent-limited",
    }
}

/// The rate steps as text: per scenario a table of every step of every provider (and
/// region; with one region its `ALL` rows are left out, they repeat it): the step's rate per
/// agent, arrivals sent and dropped, goodput % with its 95 % interval (a failed request never
/// meets the SLO: errors are in it), P95 TTFT (`~` when its samples do not support it, legend
/// under the table) and the verdict. Then the percentile bounds each step exceeded.
pub fn render_rate_steps(rows: &[RateStepRow]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    let regions = rows
        .iter()
        .filter(|r| r.region != ALL_REGIONS)
        .map(|r| r.region.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    for scenario in scenarios {
        let mut of: Vec<&RateStepRow> = rows
            .iter()
            .filter(|r| r.scenario == scenario && (regions > 1 || r.region != ALL_REGIONS))
            .collect();
        // By provider (first seen), then regions in row order, steps in order.
        of.sort_by_key(|r| rows.iter().position(|x| x.provider == r.provider));
        let _ = writeln!(
            out,
            "\nrate steps {scenario}: rps per provider and agent; goodput % [95 % CI] of judged \
             requests; TTFT ms; verdict vs the SLO"
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "provider",
            "region",
            "step",
            "rps",
            "sent/dropped",
            "goodput %",
            "TTFT P95",
            "verdict",
        ]);
        let mut marked = false;
        for r in &of {
            let rps = if r.target_rps_max > r.target_rps {
                format!("{:.2}–{:.2}", r.target_rps, r.target_rps_max)
            } else {
                format!("{:.2}", r.target_rps)
            };
            let p95 = match &r.ttft {
                Some(p) => {
                    let (text, m) = p.text(&[95.0], |v| ms_short(Some(v)));
                    marked |= m;
                    text
                }
                None => "-".into(),
            };
            t.add_row(vec![
                TCell::new(&r.provider),
                TCell::new(&r.region),
                right(r.step.to_string()),
                right(rps),
                right(format!("{}/{}", r.sent, r.dropped)),
                right(r.goodput.as_ref().map_or("-".into(), goodput_pct_text)),
                right(p95),
                TCell::new(verdict_text(r.verdict)),
            ]);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", percentiles::legend_for(&[95.0]));
        }
        let _ = writeln!(
            out,
            "too few: fewer judged requests than the step needs, or a percentile bound its \
             samples cannot judge; agent-limited: arrivals dropped by the agent"
        );
        for r in &of {
            if let Some(g) = r.goodput.as_ref().filter(|g| !g.exceeded.is_empty()) {
                let _ = writeln!(
                    out,
                    "  {} {} step {}: {}",
                    r.provider,
                    r.region,
                    r.step,
                    g.exceeded.join("; ")
                );
            }
        }
    }
    out
}

/// The SLO searches' answers: per scenario its SLO, then one line per provider × region (with
/// one region its `ALL` line is left out).
pub fn render_searches(rows: &[SearchRow]) -> String {
    let mut out = String::new();
    let regions = rows
        .iter()
        .filter(|r| r.region != ALL_REGIONS)
        .map(|r| r.region.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for scenario in scenarios {
        let mut of: Vec<&SearchRow> = rows
            .iter()
            .filter(|r| r.scenario == scenario && (regions > 1 || r.region != ALL_REGIONS))
            .collect();
        of.sort_by_key(|r| rows.iter().position(|x| x.provider == r.provider));
        let Some(first) = of.first() else { continue };
        let _ = writeln!(
            out,
            "\nSLO search {scenario} ({}): the highest rate per agent meeting it",
            first.slo
        );
        let width = of
            .iter()
            .map(|r| r.provider.len())
            .max()
            .unwrap_or(0)
            .max(8);
        for r in of {
            let _ = writeln!(out, "  {:<width$} {:<14} {}", r.provider, r.region, r.text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::fixtures::workloads;

    #[test]
    fn rate_steps_show_rate_goodput_p95_and_verdict() {
        let s = workloads::summary();
        let text = render_rate_steps(&s.rate_steps);
        println!("{text}");
        for want in [
            "rate steps ramp: rps per provider and agent",
            "| p        | us-east |    0 | 2.00 |         20/0 | 100.0 [83.9, 100.0] |     ~100 | too few |",
            "| p        | ALL     |    0 | 2.00 |         40/0 | 100.0 [91.2, 100.0] |     ~100 | met     |",
            "| p        | us-east |    1 | 4.00 |         40/0 |   75.0 [59.8, 85.8] |     ~900 | missed  |",
            "  p us-east step 1: P90 TTFT 900 > 400 ms",
            "rate steps find:",
            "| p        | ALL     |    2 | 8.00 |        160/0 |   50.0 [42.3, 57.7] |      700 | missed  |",
            "| q        | ALL     |    0 | 2.00 |         40/0 |   75.0 [59.8, 85.8] |     ~700 | missed  |",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // 20 samples do not support a P95: marked, with the legend.
        assert!(text.contains("~100"), "{text}");
        for line in text.lines().filter(|l| l.starts_with('|')) {
            assert!(line.chars().count() <= 100, "{line}");
        }
        assert!(text.contains(&percentiles::legend_for(&[95.0])), "{text}");
    }

    #[test]
    fn search_answers_are_one_line_per_provider_and_region() {
        let s = workloads::summary();
        let text = render_searches(&s.searches);
        assert!(
            text.contains("SLO search find (TTFT ≤ 500 ms; goodput ≥ 90 %): the highest rate per agent meeting it"),
            "{text}"
        );
        assert!(
            text.contains("  p        us-east        meets the SLO up to 4.00 rps per agent (misses at 6.00 rps per agent); steps used up"),
            "{text}"
        );
        assert!(
            text.contains("  q        ALL            misses the SLO at every rate tried, from 2.00 rps per agent; missed at min_rps"),
            "{text}"
        );
        assert_eq!(text.lines().filter(|l| l.starts_with("  ")).count(), 6);
    }
}
