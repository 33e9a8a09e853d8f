//! The context-tier tables of the campaign summary: per tier group, TTFT by input length for
//! every provider × region (a tier past a provider's context shows `refused (context)`), the
//! medians of TTST, prefill throughput and E2E per output token, and how each provider
//! counted the generated tokens.

use std::fmt::Write as _;

use comfy_table::{Cell as TCell, Table, presets};
use latmesh_core::synth::tier_label;
use latmesh_results::percentiles;
use latmesh_results::summary::ALL_REGIONS;
use latmesh_results::tiers::{TierRow, TokenCountRow};

use super::{ms_short, right};

/// A tier's TTFT cell: `P50/P95 (n)` (`~` marks a percentile the samples do not support),
/// `refused (context)` when every request was refused for its length, both when some were;
/// and whether a percentile is marked.
fn ttft_cell(r: &TierRow) -> (String, bool) {
    let refused = match (r.context_refused, r.samples) {
        (0, _) => None,
        (_, 0) => return ("refused (context)".into(), false),
        (n, _) => Some(format!(", {n} refused (context)")),
    };
    let (text, marked) = match &r.ttft {
        Some(p) => {
            let (t, m) = p.text(&[50.0, 95.0], |v| ms_short(Some(v)));
            (format!("{t} ({})", r.samples), m)
        }
        None => ("-".into(), false),
    };
    (format!("{text}{}", refused.unwrap_or_default()), marked)
}

/// The medians cell: `TTST ms · prefill tokens/s · E2E per token ms`.
fn medians_cell(r: &TierRow) -> String {
    if r.samples == 0 {
        return if r.context_refused > 0 {
            "refused (context)".into()
        } else {
            "-".into()
        };
    }
    format!(
        "{} · {} · {}",
        ms_short(r.ttst_p50_ms),
        r.prefill_tps_p50.map_or("-".into(), |v| format!("{v:.0}")),
        ms_short(r.e2e_per_token_p50_ms)
    )
}

/// The tiers as text: per group, a TTFT table and a medians table (rows provider × region,
/// columns the group's tiers in increasing size; with one region its `ALL` rows are left
/// out), then the token-count notes.
pub fn render_tiers(rows: &[TierRow], counts: &[TokenCountRow]) -> String {
    let mut out = String::new();
    let regions = rows
        .iter()
        .filter(|r| r.region != ALL_REGIONS)
        .map(|r| r.region.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mut groups: Vec<&str> = Vec::new();
    for r in rows {
        if !groups.contains(&r.group.as_str()) {
            groups.push(&r.group);
        }
    }
    for group in groups {
        let of: Vec<&TierRow> = rows
            .iter()
            .filter(|r| r.group == group && (regions > 1 || r.region != ALL_REGIONS))
            .collect();
        let mut tiers: Vec<u32> = of.iter().map(|r| r.input_tokens).collect();
        tiers.sort_unstable();
        tiers.dedup();
        // Row keys in the rows' order: providers first seen, then their regions.
        let mut keys: Vec<(&str, &str)> = Vec::new();
        for r in &of {
            if !keys.contains(&(&r.provider, &r.region)) {
                keys.push((&r.provider, &r.region));
            }
        }
        keys.sort_by_key(|(p, _)| of.iter().position(|r| r.provider == *p));
        let header = || {
            let mut h = vec![TCell::new("provider"), TCell::new("region")];
            h.extend(tiers.iter().map(|t| TCell::new(tier_label(*t))));
            h
        };
        let find = |provider: &str, region: &str, tier: u32| {
            of.iter()
                .find(|r| r.provider == provider && r.region == region && r.input_tokens == tier)
                .copied()
        };
        let _ = writeln!(
            out,
            "\ncontext tiers {group}: TTFT ms P50/P95 (samples) by input tokens"
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(header());
        let mut marked = false;
        for (provider, region) in &keys {
            let mut row = vec![TCell::new(provider), TCell::new(region)];
            for tier in &tiers {
                let (text, m) =
                    find(provider, region, *tier).map_or(("-".into(), false), ttft_cell);
                marked |= m;
                row.push(right(text));
            }
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", percentiles::legend_for(&[50.0, 95.0]));
        }
        let _ = writeln!(
            out,
            "context tiers {group}: medians TTST ms · prefill tokens/s · E2E per output token ms"
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(header());
        for (provider, region) in &keys {
            let mut row = vec![TCell::new(provider), TCell::new(region)];
            for tier in &tiers {
                row.push(right(
                    find(provider, region, *tier).map_or("-".into(), medians_cell),
                ));
            }
            t.add_row(row);
        }
        let _ = writeln!(out, "{t}");
        out.push_str(&super::cache::render_tier_cached(group, &of, &keys, &tiers));
    }
    if !counts.is_empty() {
        let _ = writeln!(
            out,
            "\ntoken counts (billed usage.prompt_tokens vs the words generated, all regions):"
        );
        for c in counts {
            let tiers: Vec<String> = c
                .tiers
                .iter()
                .map(|(asked, billed, _)| format!("{} → {billed:.0}", tier_label(*asked)))
                .collect();
            let _ = writeln!(out, "  {} ({})", c.note, tiers.join(", "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_results::fixtures::workloads;

    #[test]
    fn tiers_show_ttft_by_input_length_refusals_and_token_counts() {
        let s = workloads::summary();
        let text = render_tiers(&s.tiers, &s.token_counts);
        println!("{text}");
        for want in [
            "context tiers ctx: TTFT ms P50/P95 (samples) by input tokens",
            "| provider | region  | 1k            | 8k                |",
            "| p        | us-east | 200/~800 (30) |   1200/~1200 (30) |",
            "| q        | ALL     | 200/~200 (60) | refused (context) |",
            // 30 and 60 samples do not support a P95: marked, with the legend.
            "~ marks a percentile with fewer samples than a 95% interval needs (P50 6, P95 72)",
            "context tiers ctx: medians TTST ms · prefill tokens/s · E2E per output token ms",
            "| q        | ALL     | 250 · 2000 · 20.0 | refused (context) |",
            "token counts (billed usage.prompt_tokens vs the words generated, all regions):",
            "  p counts 1.00 tokens per generated word, +12 tokens per request (its template) (1k → 1012, 8k → 8012)",
            "  q counts 1.21 tokens per generated word: its tiers hold more tokens than their names say; compare at billed counts (1k → 1210)",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }
}
