//! The prompt-cache parts of the campaign summary as text: which generated-prompt scenarios
//! sent fresh words and which reused them, the cached share of prompt tokens per cell next to
//! its TTFT (matrix and context tiers), and a line per flagged cell (cache-hot though the file
//! did not ask for caching; rule in `latmesh_results::cache_share`).

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};
use latmesh_core::synth::tier_label;
use latmesh_results::cache_share::{CachedShare, cell_text};
use latmesh_results::summary::{ALL_REGIONS, Summary};
use latmesh_results::tiers::TierRow;

use super::right;

/// A share with its support: `57 % (30)`, `!` when flagged; `–` when no cached count.
fn share_cell(share: Option<&CachedShare>) -> String {
    match share {
        Some(s) => format!("{} ({})", cell_text(Some(s)), s.requests),
        None => cell_text(None),
    }
}

/// The legend under a table with a flagged cell.
const FLAG_LEGEND: &str =
    "! cache-hot (most requests ≥ 50 % cached, significantly) though the file asked for no caching";

/// `out` with table `t` and, when a cell of it is flagged, the legend.
fn finish(mut out: String, t: &Table, flagged: bool) -> String {
    let _ = writeln!(out, "{t}");
    if flagged {
        let _ = writeln!(out, "{FLAG_LEGEND}");
    }
    out
}

/// One line per generated-prompt scenario: fresh words this run, or reused; empty without one.
pub fn render_text_modes(summary: &Summary) -> String {
    if summary.generated_text.is_empty() {
        return String::new();
    }
    let modes: Vec<String> = summary
        .generated_text
        .iter()
        .map(|(group, mode)| format!("{group}: {}", mode.as_str()))
        .collect();
    format!(
        "\ngenerated prompts: {} (fresh: new words this run; reuse: the same words as other runs of the plan)\n",
        modes.join(", ")
    )
}

/// The matrix of cached shares of `scenario` (rows regions and `ALL`, columns providers):
/// `cached % of prompt tokens (requests reporting)`; empty when no cell of it has a cached
/// count.
pub fn render_cached_matrix(summary: &Summary, scenario: &str) -> String {
    let of = |region: &str, provider: &str| {
        summary
            .cell(region, provider, scenario)
            .and_then(|c| c.cached_share.as_ref())
    };
    if !summary
        .cells
        .iter()
        .any(|c| c.scenario == scenario && c.cached_share.is_some())
    {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{scenario}: cached % of prompt tokens (requests reporting a cached count)"
    );
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    let mut header = vec![TCell::new("region")];
    header.extend(summary.providers.iter().map(TCell::new));
    t.set_header(header);
    let mut flagged = false;
    for region in summary
        .regions
        .iter()
        .map(String::as_str)
        .chain([ALL_REGIONS])
    {
        let mut row = vec![TCell::new(region)];
        for provider in &summary.providers {
            let share = of(region, provider);
            flagged |= share.is_some_and(|s| s.flagged);
            row.push(right(share_cell(share)));
        }
        t.add_row(row);
    }
    finish(out, &t, flagged)
}

/// The cached shares of one tier group's rows (`keys`: provider and region, in table order;
/// `tiers` in increasing size); empty when no row has a cached count.
pub fn render_tier_cached(
    group: &str,
    of: &[&TierRow],
    keys: &[(&str, &str)],
    tiers: &[u32],
) -> String {
    if !of.iter().any(|r| r.cached_share.is_some()) {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "context tiers {group}: cached % of prompt tokens (requests reporting a cached count)"
    );
    let mut t = Table::new();
    t.load_preset(presets::ASCII_MARKDOWN);
    let mut h = vec![TCell::new("provider"), TCell::new("region")];
    h.extend(tiers.iter().map(|t| TCell::new(tier_label(*t))));
    t.set_header(h);
    let mut flagged = false;
    for (provider, region) in keys {
        let mut row = vec![TCell::new(provider), TCell::new(region)];
        for tier in tiers {
            let share = of
                .iter()
                .find(|r| r.provider == *provider && r.region == *region && r.input_tokens == *tier)
                .and_then(|r| r.cached_share.as_ref());
            flagged |= share.is_some_and(|s| s.flagged);
            row.push(right(share_cell(share)));
        }
        t.add_row(row);
    }
    finish(out, &t, flagged)
}

/// One line per flagged cell of `summary` (regions, not `ALL`), with why; empty without one.
pub fn render_flags(summary: &Summary) -> String {
    let mut out = String::new();
    for c in summary.cells.iter().filter(|c| c.region != ALL_REGIONS) {
        if let Some(note) = c.cached_share.as_ref().and_then(|s| s.note.as_deref()) {
            if out.is_empty() {
                out.push_str("\ncache-hot cells (TTFT measured on cache hits):\n");
            }
            let _ = writeln!(
                out,
                "  {:<14} {:<20} {:<14} {note}",
                c.region, c.provider, c.scenario
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::synth::TextMode;
    use latmesh_results::cache_share::CacheCounts;
    use latmesh_results::fixtures::workloads;

    #[test]
    fn shares_modes_and_flags_are_shown() {
        let mut s = workloads::summary();
        let mut hot = CacheCounts::default();
        for _ in 0..10 {
            hot.add(1000, 900);
        }
        let scenario = s.tiers[0].scenario.clone();
        for c in s.cells.iter_mut().filter(|c| c.scenario == scenario) {
            c.cached_share = hot.share(None);
        }
        s.generated_text.insert("ctx".into(), TextMode::Fresh);
        let text = format!(
            "{}{}{}",
            render_text_modes(&s),
            render_cached_matrix(&s, &scenario),
            render_flags(&s)
        );
        for want in [
            "generated prompts: ctx: fresh (fresh: new words this run",
            &format!("{scenario}: cached % of prompt tokens (requests reporting a cached count)"),
            "90 % ! (10)",
            FLAG_LEGEND,
            "cache-hot cells (TTFT measured on cache hits):",
            "90 % of prompt tokens came from the provider's cache (10 of 10 requests cache-hot)",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // A scenario without a cached count has no table.
        assert_eq!(render_cached_matrix(&s, "nope"), "");
    }
}
