//! The open-loop rate tables of the campaign summary: load (achieved vs scheduled rate,
//! drops, lag, saturation) and latency from the actual and the intended send.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};

use super::{ms_short, right};
use latmesh_results::load_stats::RateRow;
use latmesh_results::percentiles::{self, Percentiles};
use latmesh_results::summary::ALL_REGIONS;

/// The rates as text: per scenario, a load table (achieved vs scheduled rate per agent, drops,
/// `sched_lag`, errors, agent and provider saturation) and a latency table (P50/P95/P99 from
/// the actual and from the intended send; `~` marks a percentile its samples do not support,
/// with the legend under the table), then why each saturated row is. With one region its `ALL`
/// rows are left out (they repeat it).
pub fn render_rates(rows: &[RateRow]) -> String {
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
    let marked = std::cell::Cell::new(false);
    let at = |v: &Option<Percentiles>, list: &[f64]| match v {
        Some(p) => {
            let (text, m) = p.text(list, |v| ms_short(Some(v)));
            marked.set(marked.get() | m);
            text
        }
        None => "-".into(),
    };
    const LAG: [f64; 2] = [50.0, 99.0];
    const LATENCY: [f64; 3] = [50.0, 95.0, 99.0];
    for scenario in scenarios {
        let mut of: Vec<&RateRow> = rows
            .iter()
            .filter(|r| r.scenario == scenario && (regions > 1 || r.region != ALL_REGIONS))
            .collect();
        // By provider, regions in row order (ALL last).
        of.sort_by_key(|r| rows.iter().position(|x| x.provider == r.provider));
        let Some(first) = of.first() else { continue };
        let _ = writeln!(
            out,
            "\nrate {scenario}: target {} rps per provider and agent for {} s; rps sent per agent \
             vs scheduled",
            first.target_rps,
            first.duration_ms as f64 / 1000.0,
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "provider",
            "region",
            "rps sent/sched",
            "dropped",
            "lag P50/P99",
            "err %",
            "agent sat.",
            "provider sat.",
        ]);
        for r in &of {
            let provider_verdict = match &r.provider_saturation {
                None => "- (too few)",
                Some(p) if p.saturated => "YES",
                Some(_) => "no",
            };
            t.add_row(vec![
                TCell::new(&r.provider),
                TCell::new(&r.region),
                right(format!(
                    "{}/{:.2}",
                    r.achieved_rps.map_or("-".into(), |a| format!("{a:.2}")),
                    r.scheduled_rps
                )),
                right(r.dropped.to_string()),
                right(at(&r.sched_lag, &LAG)),
                right(format!("{:.1}", r.error_pct)),
                TCell::new(if r.agent_saturated { "YES" } else { "no" }),
                TCell::new(provider_verdict),
            ]);
        }
        let _ = writeln!(out, "{t}");
        let _ = writeln!(
            out,
            "agent sat.: the agents did not keep the schedule; provider sat.: its latency grew \
             over the phase"
        );
        let _ = writeln!(
            out,
            "rate {scenario}: latency ms {} from the actual send and from the intended send",
            percentiles::header(&LATENCY)
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        let mut header = vec![
            "provider",
            "region",
            "TTFT",
            "TTFT intended",
            "E2E",
            "E2E intended",
        ];
        // The cached share of prompt tokens, when the provider reported a cached count.
        let cached = of.iter().any(|r| r.cached_share.is_some());
        if cached {
            header.push("cached %");
        }
        t.set_header(header);
        for r in &of {
            let mut row = vec![
                TCell::new(&r.provider),
                TCell::new(&r.region),
                right(at(&r.ttft, &LATENCY)),
                right(at(&r.ttft_intended, &LATENCY)),
                right(at(&r.e2e, &LATENCY)),
                right(at(&r.e2e_intended, &LATENCY)),
            ];
            if cached {
                row.push(right(latmesh_results::cache_share::cell_text(
                    r.cached_share.as_ref(),
                )));
            }
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        if marked.take() {
            let _ = writeln!(out, "{}", percentiles::legend());
        }
        for r in &of {
            for (who, why) in [
                ("agent", &r.agent_saturated_reason),
                ("provider", &r.provider_saturated_reason),
            ] {
                if let Some(why) = why {
                    let _ = writeln!(out, "  {who} saturated: {} {}: {why}", r.provider, r.region);
                }
            }
        }
    }
    out
}

/// Phase hygiene: one line per cell whose phase started with its provider still loaded by
/// earlier phases' requests ([`latmesh_results::phase_hygiene::loaded_starts`]); empty when
/// every phase started idle.
pub fn render_loaded_starts(cells: &[latmesh_results::summary::MatrixCell]) -> String {
    let lines = latmesh_results::phase_hygiene::loaded_starts(cells);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nPhases that started loaded (the drain allowance before them ended with requests in flight):\n",
    );
    for l in lines {
        out.push_str("  ");
        out.push_str(&l);
        out.push('\n');
    }
    out
}
