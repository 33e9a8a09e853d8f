//! The terminal view of an [`Analysis`] (`latmesh report`, `latmesh check`): intervals and
//! ordering chains, flags, rank tables and selection tables.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};

use latmesh_results::analysis::text::{chain, chain_text, rank_text, rank_title};
use latmesh_results::analysis::{Analysis, CellCis, PRIMARY_METRICS, RankTable, SelectionTable};
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

/// One selection table: its title line (scenario, region, metric, weights, how components
/// score) and the ranked providers with each weighted component's score and raw value.
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
    let _ = writeln!(
        out,
        "selection {} · {} ({} P{}; weights {w}; scores 0–1: latency and price 0.5 at the region's median, ±0.5 per halving/doubling; stability 1 − the failure rate's 95 % upper bound; quality, compatibility, compliance: the typed score / scale, else the measured one)",
        t.scenario, t.region, t.metric, t.percentile
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
    let mut header = vec![TCell::new("#"), TCell::new("provider"), TCell::new("total")];
    header.extend(names.iter().map(TCell::new));
    table.set_header(header);
    for r in &t.rows {
        let mut row = vec![
            TCell::new(r.rank),
            TCell::new(&r.provider),
            TCell::new(format!("{:.2}", r.total)).set_alignment(CellAlignment::Right),
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
        table.add_row(row);
    }
    let _ = writeln!(out, "{table}");
    out
}
