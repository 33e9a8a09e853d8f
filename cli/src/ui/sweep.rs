//! The sweep tables: per scenario the knee metric by concurrency step with each provider's
//! knee ([`render_sweeps`], in the campaign summary), and every step in detail
//! ([`render_sweep_steps`], `latmesh query sweep`).

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};

use super::{ms_short, right};
use latmesh_results::load_stats::{SweepRow, knee_text};
use latmesh_results::percentiles::{self, Percentiles};
use latmesh_results::summary::ALL_REGIONS;

/// `P50`, `P99.9`.
fn percentile_label(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("P{p:.0}")
    } else {
        format!("P{p}")
    }
}

/// The sweeps as text: per scenario, a table of providers (all regions merged) × steps of the
/// knee metric's percentile (the knee step marked `*`, a value its step's samples do not
/// support `~`, with the legend), with each provider's knee and why; then, when rows of
/// several regions exist, each region's knee per provider.
pub fn render_sweeps(rows: &[SweepRow]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for scenario in scenarios {
        let of: Vec<&SweepRow> = rows.iter().filter(|r| r.scenario == scenario).collect();
        let Some(first) = of.first() else { continue };
        let rule = &first.knee_rule;
        let all: Vec<&&SweepRow> = of.iter().filter(|r| r.region == ALL_REGIONS).collect();
        let agents = all.first().map_or(first.agents, |r| r.agents);
        let _ = writeln!(
            out,
            "\nsweep {scenario}: {} {} ms by concurrency, all regions ({} s steps); knee: \
             elasticity ≥ {} or errors ≥ {}%\n  each significant (95 % intervals), with ≥ {} \
             requests in every step up to it",
            rule.metric.as_str().to_uppercase(),
            percentile_label(rule.percentile),
            first.step_ms as f64 / 1000.0,
            rule.elasticity,
            rule.error_pct,
            rule.min_requests
        );
        let _ = writeln!(
            out,
            "c = workers per agent and provider; total = the provider's concurrency, c × {}",
            if agents == 0 {
                "every agent (count not known)".to_string()
            } else {
                format!(
                    "{agents} agent{} (all regions)",
                    if agents == 1 { "" } else { "s" }
                )
            }
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        let mut header = vec![TCell::new("provider")];
        let total_text = |n: u64| {
            if agents == 0 {
                "?".to_string()
            } else {
                n.to_string()
            }
        };
        header.extend(first.steps.iter().map(|s| {
            TCell::new(format!(
                "c={} (total {})",
                s.concurrency,
                total_text(u64::from(s.concurrency) * agents)
            ))
        }));
        header.push(TCell::new("knee"));
        t.set_header(header);
        let mut marked = false;
        for r in &all {
            let mut row = vec![TCell::new(&r.provider)];
            for s in &r.steps {
                let mark = if r.knee.as_ref().is_some_and(|k| k.step == s.step as usize) {
                    "*"
                } else {
                    ""
                };
                let unsupported = s.knee_value_ms.is_some() && !s.knee_supported(rule);
                marked |= unsupported;
                let tilde = if unsupported {
                    percentiles::UNSUPPORTED_MARK
                } else {
                    ""
                };
                row.push(right(format!("{tilde}{}{mark}", ms_short(s.knee_value_ms))));
            }
            row.push(TCell::new(knee_text(r)));
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", percentiles::legend());
        }
        let regional: Vec<&&SweepRow> = of.iter().filter(|r| r.region != ALL_REGIONS).collect();
        let regions: Vec<&str> = {
            let mut v: Vec<&str> = Vec::new();
            for r in &regional {
                if !v.contains(&r.region.as_str()) {
                    v.push(&r.region);
                }
            }
            v
        };
        if regions.len() > 1 {
            let _ = writeln!(out, "knee per region:");
            for a in &all {
                let parts: Vec<String> = regional
                    .iter()
                    .filter(|r| r.provider == a.provider)
                    .map(|r| {
                        let k = match (&r.knee, &r.knee_insufficient) {
                            (Some(k), _) => format!("c={} ({})", k.concurrency, k.reason),
                            (None, Some(i)) => {
                                format!("too few requests at c={}", i.concurrency)
                            }
                            (None, None) => "none".into(),
                        };
                        format!("{} {k}", r.region)
                    })
                    .collect();
                let _ = writeln!(out, "  {:<16} {}", a.provider, parts.join(", "));
            }
        }
    }
    out
}

/// Every step of every row as one detailed table per scenario (what `latmesh query sweep`
/// prints after [`render_sweeps`]): provider, region, concurrency per agent and in total,
/// requests, error %, TTFT and E2E at the campaign's percentiles (P50/P90/P95/P99 by default;
/// `~` marks one the step's samples do not support, with the legend under the table),
/// throughput; the knee step marked `*`.
pub fn render_sweep_steps(rows: &[SweepRow]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    let list = percentiles::list_of(
        rows.iter()
            .flat_map(|r| &r.steps)
            .flat_map(|s| s.ttft.iter().chain(&s.e2e)),
    );
    let names = percentiles::header(&list);
    let marked = std::cell::Cell::new(false);
    let p = |v: &Option<Percentiles>| match v {
        Some(p) => {
            let (text, m) = p.text(&list, |v| ms_short(Some(v)));
            marked.set(marked.get() | m);
            text
        }
        None => "-".into(),
    };
    for scenario in scenarios {
        let _ = writeln!(
            out,
            "\nsweep {scenario}: every step (ms; throughput of ok requests; c/agent: workers per \
             agent and provider, c total: over the row's agents)"
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "provider",
            "region",
            "c/agent",
            "c total",
            "requests",
            "err %",
            &format!("TTFT {names}"),
            &format!("E2E {names}"),
            "req/s",
            "tok/s",
        ]);
        for r in rows.iter().filter(|r| r.scenario == scenario) {
            for s in &r.steps {
                let knee = r.knee.as_ref().is_some_and(|k| k.step == s.step as usize);
                t.add_row(vec![
                    TCell::new(&r.provider),
                    TCell::new(&r.region),
                    right(format!("{}{}", s.concurrency, if knee { "*" } else { "" })),
                    right(if r.agents == 0 {
                        "?".to_string()
                    } else {
                        s.concurrency_total.to_string()
                    }),
                    right(s.requests.to_string()),
                    right(format!("{:.1}", s.error_pct)),
                    right(p(&s.ttft)),
                    right(p(&s.e2e)),
                    right(format!("{:.2}", s.throughput_rps)),
                    right(format!("{:.0}", s.output_tokens_per_s)),
                ]);
            }
        }
        let _ = writeln!(out, "{t}");
        if marked.take() {
            let _ = writeln!(out, "{}", percentiles::legend());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::fixtures::{agent, plan, plan_with_knee, sweep_aggregate};
    use latmesh_results::load_stats::{RowFilter, sweep_rows};

    #[test]
    fn sweep_values_the_steps_cannot_support_are_marked() {
        // Knee on E2E P90 (36 samples needed): ALL has 20, 29 and 40 samples at c = 2, 4, 8.
        let plan = plan_with_knee(|k| k.percentile = 90.0);
        let rows = sweep_rows(&plan, &sweep_aggregate(), RowFilter::default(), &[]);
        let text = render_sweeps(&rows);
        assert!(
            // No knee on values without an interval.
            text.contains(
                "| p        |         ~1.00 |         ~1.04 |          2.00 | too few ok requests at c=2 for an interval |"
            ),
            "{text}"
        );
        assert!(text.contains(&percentiles::legend()), "{text}");
    }

    #[test]
    fn sweep_tables_show_each_steps_total_and_the_regional_knees() {
        // Two agents in us-east, one in eu-west.
        let agents = [
            agent("a1", "us-east"),
            agent("a2", "us-east"),
            agent("b1", "eu-west"),
        ];
        let rows = sweep_rows(&plan(), &sweep_aggregate(), RowFilter::default(), &agents);
        let text = render_sweeps(&rows);
        assert!(
            text.contains("c = workers per agent and provider; total = the provider's concurrency, c × 3 agents (all regions)")
                && text.contains("| c=2 (total 6) | c=4 (total 12) | c=8 (total 24) |"),
            "{text}"
        );
        let steps = render_sweep_steps(&rows);
        assert!(steps.contains("| c/agent | c total |"), "{steps}");

        // With the default 30 requests per step, us-east's 10 at c = 2 are not enough: no
        // verdict rather than a knee.
        let strict = plan_with_knee(|k| k.min_requests = 30);
        let rows30 = sweep_rows(&strict, &sweep_aggregate(), RowFilter::default(), &[]);
        assert!(render_sweeps(&rows30).contains("us-east too few requests at c=2"));
    }
}
