//! The terminal view of an [`Analysis`] (`latmesh report`, `latmesh check`): intervals and
//! ordering chains, flags, rank tables and selection tables.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};

use latmesh_results::analysis::text::{chain, chain_text, rank_text, rank_title};
use latmesh_results::analysis::{Analysis, CellCis, PRIMARY_METRICS, RankTable, SelectionTable};
use latmesh_results::report_data::ALL;
use latmesh_results::stats::{self, PERCENTILES};

fn rank_table_text(t: &RankTable) -> String {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    let mut header = vec![TCell::new("provider")];
    header.extend(t.columns.iter().map(TCell::new));
    header.extend(["best", "worst", "mean", "range"].map(TCell::new));
    table.set_header(header);
    let right = |s: String| TCell::new(s).set_alignment(CellAlignment::Right);
    for r in &t.rows {
        let mut row = vec![TCell::new(&r.provider)];
        row.extend(r.ranks.iter().map(|v| right(rank_text(*v))));
        row.push(right(rank_text(r.min_rank)));
        row.push(right(rank_text(r.max_rank)));
        row.push(right(r.mean_rank.map_or("-".into(), |m| format!("{m:.2}"))));
        row.push(right(rank_text(r.rank_range)));
        table.add_row(row);
    }
    table.to_string()
}

/// A compact terminal view: per scenario and primary metric (TTFT, E2E), for P50, P95 and
/// P99 and every row (`ALL`, then each region), the providers sorted by estimate with
/// their 95 % intervals and `<` (clearly faster than the next), `≈` (no clear difference)
/// or `?` (not enough samples) between neighbours; then the flags, the ranks and the
/// selection tables.
pub fn render(a: &Analysis) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "analysis of {} ({}): {:.0}% distribution-free intervals of percentiles (order statistics), ms",
        a.name,
        a.campaign_id,
        a.confidence * 100.0
    );
    let _ = writeln!(
        out,
        "  A < B: A clearly faster (its upper bound below B's lower bound); ≈ no clear difference; ? not enough samples (n < needed)"
    );
    for scenario in &a.scenarios {
        for metric in PRIMARY_METRICS {
            if !a
                .cells
                .iter()
                .any(|c| &c.scenario == scenario && c.metric == metric)
            {
                continue;
            }
            let _ = writeln!(out, "\n{scenario} · {metric}");
            let cells: Vec<&CellCis> = a
                .cells
                .iter()
                .filter(|c| &c.scenario == scenario && c.metric == metric)
                .collect();
            for pc in PERCENTILES {
                // Rows where no provider has an interval take one short line.
                let none = |cells: &[&CellCis]| {
                    cells
                        .iter()
                        .all(|c| c.at(pc).is_none_or(|p| p.ci.is_none()))
                };
                let short = |cells: &[&CellCis]| {
                    format!(
                        "not enough samples for an interval (n ≤ {} < {})",
                        cells.iter().map(|c| c.n).max().unwrap_or(0),
                        stats::min_samples(pc / 100.0)
                    )
                };
                if none(&cells) {
                    let _ = writeln!(out, "  P{pc:<3} {:<14} {}", "every row", short(&cells));
                    continue;
                }
                for (i, region) in a.rows().into_iter().enumerate() {
                    let items = chain(a, region, scenario, metric, pc);
                    if items.is_empty() {
                        continue;
                    }
                    let head = if i == 0 {
                        format!("P{pc:<3}")
                    } else {
                        "    ".into()
                    };
                    let row: Vec<&CellCis> = items.iter().map(|(c, _)| *c).collect();
                    let text = if none(&row) {
                        short(&row)
                    } else {
                        chain_text(&items, pc)
                    };
                    let _ = writeln!(out, "  {head} {region:<14} {text}");
                }
            }
        }
    }
    if a.flags.is_empty() {
        let _ = writeln!(out, "\nflags: none");
    } else {
        let _ = writeln!(out, "\nflags:");
        for f in &a.flags {
            let metric = f.metric.map_or(String::new(), |m| format!(" {m}"));
            let _ = writeln!(
                out,
                "  {:<8} {:<14} {:<20} {}{metric}: {}{}",
                f.kind.as_str(),
                f.region,
                f.provider,
                f.scenario,
                f.detail,
                if f.confident { "" } else { " [few samples]" }
            );
        }
    }
    for t in a.ranks.iter().chain(&a.window_ranks) {
        let _ = writeln!(out, "\n{}", rank_title(t));
        let _ = writeln!(out, "{}", rank_table_text(t));
    }
    for t in &a.selection {
        let _ = write!(out, "\n{}", render_selection(t));
    }
    out
}

/// One selection table: its title line (scenario, region, metric, weights, gates, how
/// components score), the ranked providers (`2=`: tied, their total intervals overlap) with
/// their total and its interval, each weighted component's score and raw value and the gates
/// they are at risk on or undecided, then the providers a gate excluded, with the reasons.
pub fn render_selection(t: &SelectionTable) -> String {
    let mut out = String::new();
    let w = t
        .weights
        .named()
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(n, v)| format!("{n} {v:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut gates = vec![format!("failed requests ≤ {}%", t.gates.max_failed_pct)];
    if t.gates.slo {
        gates.push("the SLO met".into());
    }
    if !t.gates.require_compat.is_empty() {
        let names: Vec<&str> = t.gates.require_compat.iter().map(|c| c.as_str()).collect();
        gates.push(format!("compat {} pass", names.join(", ")));
    }
    let _ = writeln!(
        out,
        "selection {} · {} ({} P{}; gates first: {} — excluded when the 95 % interval shows a gate failed, ranked last when at risk; weights {w}; scores 0–1: latency and price 0.5 at the region's median, ±0.5 per halving/doubling; stability 1 − the failure rate's 95 % upper bound; quality, compatibility, compliance: the typed score / scale, else the measured one; `2=`: tied, the totals' intervals overlap)",
        t.scenario,
        t.region,
        t.metric,
        t.percentile,
        gates.join(", ")
    );
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    let names: Vec<&str> = t
        .weights
        .named()
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(n, _)| *n)
        .collect();
    let mut header = vec![
        TCell::new("#"),
        TCell::new("provider"),
        TCell::new("total [95% CI]"),
    ];
    header.extend(names.iter().map(TCell::new));
    header.push(TCell::new("gates"));
    table.set_header(header);
    for r in &t.rows {
        let mut row = vec![
            TCell::new(r.rank_text()),
            TCell::new(&r.provider),
            TCell::new(format!(
                "{:.2} [{:.2}, {:.2}]",
                r.total, r.total_interval.0, r.total_interval.1
            ))
            .set_alignment(CellAlignment::Right),
        ];
        for (name, c) in r.components() {
            if names.contains(&name) {
                row.push(TCell::new(format!(
                    "{} ({})",
                    c.score.map_or("-".into(), |s| format!("{s:.2}")),
                    c.text
                )));
            }
        }
        let notes = r.gate_notes();
        row.push(TCell::new(if notes.is_empty() {
            "passed".into()
        } else {
            notes
        }));
        table.add_row(row);
    }
    let _ = writeln!(out, "{table}");
    if t.rows.is_empty() {
        let _ = writeln!(
            out,
            "  no provider passed the gates: none to rank in {} · {}",
            t.scenario, t.region
        );
    }
    for x in &t.excluded {
        let _ = writeln!(out, "  excluded {}: {}", x.provider, x.reasons());
    }
    out
}

/// Which selection tables the terminal prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SelectionShown {
    /// The first scenario over every region (`ALL`), and a line saying how many more there
    /// are and where.
    First,
    /// Every scenario × region (each region, then `ALL`).
    All,
}

/// The selection tables of `tables` that `shown` asks for, then (for [`SelectionShown::First`])
/// how to see the rest; empty without tables.
pub fn render_selections(tables: &[SelectionTable], shown: SelectionShown) -> String {
    let mut out = String::new();
    let first = tables.first().map(|t| t.scenario.as_str());
    let picked: Vec<&SelectionTable> = match shown {
        SelectionShown::All => tables.iter().collect(),
        SelectionShown::First => tables
            .iter()
            .filter(|t| Some(t.scenario.as_str()) == first && t.region == ALL)
            .take(1)
            .collect(),
    };
    for t in &picked {
        out.push('\n');
        out.push_str(&render_selection(t));
    }
    if shown == SelectionShown::First && tables.len() > picked.len() {
        let _ = writeln!(
            out,
            "({} more selection tables, every scenario × region: --selection all, the HTML report's analysis, or the JSON summary's `selection`)",
            tables.len() - picked.len()
        );
    }
    out
}
