//! The HTML fragment of an [`Analysis`] ([`ToHtml::to_html`]), embedded in `latmesh report`.

use maud::{Markup, PreEscaped, html};

use latmesh_core::metrics::Metric;
use latmesh_results::analysis::text::{chain, chain_text, rank_text, rank_title};
use latmesh_results::analysis::{ANALYSED_METRICS, Analysis, CellCis, Verdict};
use latmesh_results::stats::{PERCENTILES, fmt_ms};

/// A result rendered as an HTML fragment.
pub trait ToHtml {
    /// The fragment (see the implementations).
    fn to_html(&self) -> String;
}

impl ToHtml for Analysis {
    /// An HTML fragment (`<section class="latmesh-analysis">`, tables only, a small scoped
    /// `<style>`, no scripts or external resources): per scenario and analysed metric the
    /// P50/P95/P99 intervals of every cell and the ordering chains, the clear pairwise
    /// differences, the flags, the ranks and the selection tables.
    fn to_html(&self) -> String {
        html! {
            section class="latmesh-analysis" {
                "\n"
                style { (PreEscaped(STYLE)) }
                "\n"
                h2 { "Analysis" }
                "\n"
                p {
                    (format!("{:.0}", self.confidence * 100.0))
                    "% distribution-free confidence intervals of percentiles from order \
                     statistics (Conover 1999; Hahn & Meeker 1991), in ms. "
                    b { "A < B" }
                    ": A is clearly faster (A's upper bound below B's lower bound); "
                    b { "≈" }
                    ": no clear difference; "
                    b { "?" }
                    ": not enough samples for an interval (P50 needs 6, P95 72, P99 368)."
                }
                "\n"
                @for scenario in &self.scenarios {
                    @for metric in ANALYSED_METRICS {
                        (metric_tables(self, scenario, metric))
                    }
                }
                (flags_table(self))
                (rank_tables(self))
                (selection_tables(self))
            }
            "\n"
        }
        .into_string()
    }
}

/// The fragment's scoped style.
const STYLE: &str = ".latmesh-analysis table{border-collapse:collapse;margin:0.5em 0 1.2em}\
    .latmesh-analysis th,.latmesh-analysis td{border:1px solid #ccc;padding:2px 6px;text-align:right}\
    .latmesh-analysis td.l,.latmesh-analysis th.l{text-align:left}\
    .latmesh-analysis .na{color:#888}.latmesh-analysis .flag{color:#a40}";

/// Left-aligned column headings, then right-aligned ones.
fn heads(left: &[&str], right: &[&str]) -> Markup {
    html! {
        @for n in left { th class="l" { (n) } }
        @for n in right { th { (n) } }
    }
}

/// One scenario and metric: every cell's intervals, the ordering chains and the clear
/// pairwise differences; empty without cells.
fn metric_tables(a: &Analysis, scenario: &str, metric: Metric) -> Markup {
    let cells: Vec<&CellCis> = a
        .cells
        .iter()
        .filter(|c| c.scenario == scenario && c.metric == metric)
        .collect();
    if cells.is_empty() {
        return html! {};
    }
    let clear: Vec<_> = a
        .comparisons
        .iter()
        .filter(|c| {
            c.scenario == scenario
                && c.metric == metric
                && matches!(c.verdict, Verdict::AFaster | Verdict::BFaster)
        })
        .collect();
    html! {
        h3 { (scenario) " · " (metric) }
        "\n"
        table {
            tr { (heads(&["region", "provider"], &["n", "P50 [95% CI]", "P95 [95% CI]", "P99 [95% CI]"])) }
            "\n"
            @for region in a.rows() {
                @for c in cells.iter().filter(|c| c.region == region) {
                    tr {
                        td class="l" { (c.region) }
                        td class="l" { (c.provider) }
                        td { (c.n) }
                        @for p in &c.percentiles {
                            @match &p.ci {
                                Some(ci) => {
                                    td { (fmt_ms(p.estimate_ms)) " [" (fmt_ms(ci.lower_ms)) ", " (fmt_ms(ci.upper_ms)) "]" }
                                }
                                None => {
                                    td class="na" { (fmt_ms(p.estimate_ms)) " (n < " (p.min_samples) ")" }
                                }
                            }
                        }
                    }
                    "\n"
                }
            }
        }
        "\n"
        table {
            tr { (heads(&["percentile", "region", "providers, fastest first"], &[])) }
            "\n"
            @for pc in PERCENTILES {
                @for region in a.rows() {
                    @let items = chain(a, region, scenario, metric, pc);
                    @if !items.is_empty() {
                        tr {
                            td class="l" { "P" (pc) }
                            td class="l" { (region) }
                            td class="l" { (chain_text(&items, pc)) }
                        }
                        "\n"
                    }
                }
            }
        }
        "\n"
        @if !clear.is_empty() {
            details {
                summary { (clear.len()) " clear pairwise differences" }
                table {
                    tr { (heads(&["region", "percentile", "faster"], &["ms"])) th class="l" { "slower" } th { "ms" } }
                    "\n"
                    @for c in clear {
                        @let (f, fm, s, sm) = if c.verdict == Verdict::AFaster {
                            (&c.a, c.a_ms, &c.b, c.b_ms)
                        } else {
                            (&c.b, c.b_ms, &c.a, c.a_ms)
                        };
                        tr {
                            td class="l" { (c.region) }
                            td class="l" { "P" (c.percentile) }
                            td class="l" { (f) }
                            td { (fmt_ms(fm)) }
                            td class="l" { (s) }
                            td { (fmt_ms(sm)) }
                        }
                        "\n"
                    }
                }
            }
            "\n"
        }
    }
}

/// The flags, or "None.".
fn flags_table(a: &Analysis) -> Markup {
    html! {
        h3 { "Flags" }
        "\n"
        @if a.flags.is_empty() {
            p { "None." }
            "\n"
        } @else {
            table {
                tr { (heads(&["flag", "region", "provider", "scenario", "metric", "detail"], &[])) }
                "\n"
                @for f in &a.flags {
                    tr {
                        td class="l flag" { (f.kind.as_str()) }
                        td class="l" { (f.region) }
                        td class="l" { (f.provider) }
                        td class="l" { (f.scenario) }
                        td class="l" { (f.metric.map_or(String::new(), |m| m.to_string())) }
                        td class="l" {
                            (f.detail)
                            @if !f.confident {
                                " " span class="na" { "(few samples)" }
                            }
                        }
                    }
                    "\n"
                }
            }
            "\n"
        }
    }
}

/// The rank tables (per region, then per window) with their stability.
fn rank_tables(a: &Analysis) -> Markup {
    html! {
        @if !a.ranks.is_empty() || !a.window_ranks.is_empty() {
            h3 { "Ranks and their stability" }
            "\n"
        }
        @for t in a.ranks.iter().chain(&a.window_ranks) {
            p { (rank_title(t)) }
            "\n"
            table {
                tr {
                    th class="l" { "provider" }
                    @for c in &t.columns { th { (c) } }
                    (heads(&[], &["best", "worst", "mean", "range"]))
                }
                "\n"
                @for r in &t.rows {
                    tr {
                        td class="l" { (r.provider) }
                        @for (rank, v) in r.ranks.iter().zip(&r.values_ms) {
                            td title=(v.map_or("no samples".into(), |v| format!("{} ms", fmt_ms(v)))) {
                                (rank_text(*rank))
                            }
                        }
                        td { (rank_text(r.min_rank)) }
                        td { (rank_text(r.max_rank)) }
                        td { (r.mean_rank.map_or("-".into(), |m| format!("{m:.2}"))) }
                        td { (rank_text(r.rank_range)) }
                    }
                    "\n"
                }
            }
            "\n"
        }
    }
}

/// The selection tables: per scenario and region, providers by weighted score.
fn selection_tables(a: &Analysis) -> Markup {
    html! {
        @if !a.selection.is_empty() {
            h3 { "Selection" }
            "\n"
            p {
                "Scores 0–1 (1 best), each next to its raw value: latency and price relative \
                 to the median of the region's providers on a log scale (0.5 at the median, 1 \
                 at half of it or less, 0 at twice of it or more; a latency percentile the \
                 samples do not support is marked and scores 0); stability is 1 − the upper \
                 95 % bound of the failure rate of attempts (throttling and timeouts \
                 included); quality, compatibility and compliance are the user's scores \
                 divided by their scale. Total = weighted mean. Gates come first: a provider \
                 whose failure rate is significantly above the limit (its 95 % Wilson \
                 interval's lower bound above it), whose cell missed the scenario's SLO, or \
                 that did not pass a required compat check is excluded and listed with the \
                 reason; one at risk on a gate (the point fails, the interval does not confirm \
                 it) ranks after those at risk on fewer. Ranks tie (2=) when the totals' 95 % \
                 intervals (from the latency percentile's interval) do not separate. Price is \
                 USD per 1,000 requests ($/1k req)."
            }
            "\n"
        }
        @for t in &a.selection {
            @let weights = t.weights.named();
            @let active: Vec<&str> = weights.iter().filter(|(_, v)| *v > 0.0).map(|(n, _)| *n).collect();
            p {
                b { (t.scenario) " · " (t.region) }
                " — latency " (t.metric) " P" (t.percentile) "; weights "
                (weights.iter().filter(|(_, v)| *v > 0.0).map(|(n, v)| format!("{n} {v:.2}")).collect::<Vec<_>>().join(", "))
                "; gates: failed requests ≤ " (t.gates.max_failed_pct) "%"
                @if t.gates.slo { ", the SLO met" }
                @for c in &t.gates.require_compat { ", " (c.as_str()) " passes" }
            }
            "\n"
            table {
                tr {
                    th { "#" }
                    th class="l" { "provider" }
                    th { "total [95% CI]" }
                    @for n in &active { th { (n) } }
                    th class="l" { "gates" }
                }
                "\n"
                @for r in &t.rows {
                    tr {
                        td { (r.rank_text()) }
                        td class="l" { (r.provider) }
                        td { (format!("{:.2} [{:.2}, {:.2}]", r.total, r.total_interval.0, r.total_interval.1)) }
                        @for (name, c) in r.components() {
                            @if active.contains(&name) {
                                td {
                                    (c.score.map_or("-".into(), |s| format!("{s:.2}")))
                                    " " span class="na" { (c.text) }
                                }
                            }
                        }
                        @let notes = r.gate_notes();
                        td class="l" { @if notes.is_empty() { "passed" } @else { (notes) } }
                    }
                    "\n"
                }
            }
            "\n"
            @if t.rows.is_empty() {
                p { "No provider passed the gates: none to rank here." }
            }
            @if !t.excluded.is_empty() {
                ul {
                    @for x in &t.excluded {
                        li { "excluded " b { (x.provider) } ": " (x.reasons()) }
                    }
                }
                "\n"
            }
        }
    }
}
