//! The HTML fragment of an [`Analysis`] ([`ToHtml::to_html`]), embedded in `latmesh report`.

use std::fmt::Write as _;

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
        let mut h = String::new();
        h.push_str("<section class=\"latmesh-analysis\">\n");
        h.push_str(
            "<style>.latmesh-analysis table{border-collapse:collapse;margin:0.5em 0 1.2em}\
             .latmesh-analysis th,.latmesh-analysis td{border:1px solid #ccc;padding:2px 6px;text-align:right}\
             .latmesh-analysis td.l,.latmesh-analysis th.l{text-align:left}\
             .latmesh-analysis .na{color:#888}.latmesh-analysis .flag{color:#a40}</style>\n",
        );
        let _ = writeln!(
            h,
            "<h2>Analysis</h2>\n<p>{:.0}% distribution-free confidence intervals of percentiles from order statistics (Conover 1999; Hahn &amp; Meeker 1991), in ms. \
             <b>A &lt; B</b>: A is clearly faster (A's upper bound below B's lower bound); <b>≈</b>: no clear difference; \
             <b>?</b>: not enough samples for an interval (P50 needs 6, P95 72, P99 368).</p>",
            self.confidence * 100.0
        );
        for scenario in &self.scenarios {
            for metric in ANALYSED_METRICS {
                let cells: Vec<&CellCis> = self
                    .cells
                    .iter()
                    .filter(|c| &c.scenario == scenario && c.metric == metric)
                    .collect();
                if cells.is_empty() {
                    continue;
                }
                let _ = writeln!(h, "<h3>{} · {}</h3>", esc(scenario), metric);
                h.push_str("<table><tr><th class=\"l\">region</th><th class=\"l\">provider</th><th>n</th><th>P50 [95% CI]</th><th>P95 [95% CI]</th><th>P99 [95% CI]</th></tr>\n");
                for region in self.rows() {
                    for c in cells.iter().filter(|c| c.region == region) {
                        let _ = write!(
                            h,
                            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td>",
                            esc(&c.region),
                            esc(&c.provider),
                            c.n
                        );
                        for p in &c.percentiles {
                            match &p.ci {
                                Some(ci) => {
                                    let _ = write!(
                                        h,
                                        "<td>{} [{}, {}]</td>",
                                        fmt_ms(p.estimate_ms),
                                        fmt_ms(ci.lower_ms),
                                        fmt_ms(ci.upper_ms)
                                    );
                                }
                                None => {
                                    let _ = write!(
                                        h,
                                        "<td class=\"na\">{} (n &lt; {})</td>",
                                        fmt_ms(p.estimate_ms),
                                        p.min_samples
                                    );
                                }
                            }
                        }
                        h.push_str("</tr>\n");
                    }
                }
                h.push_str("</table>\n");
                h.push_str("<table><tr><th class=\"l\">percentile</th><th class=\"l\">region</th><th class=\"l\">providers, fastest first</th></tr>\n");
                for pc in PERCENTILES {
                    for region in self.rows() {
                        let items = chain(self, region, scenario, metric, pc);
                        if items.is_empty() {
                            continue;
                        }
                        let _ = writeln!(
                            h,
                            "<tr><td class=\"l\">P{pc}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                            esc(region),
                            esc(&chain_text(&items, pc))
                        );
                    }
                }
                h.push_str("</table>\n");
                let clear: Vec<_> = self
                    .comparisons
                    .iter()
                    .filter(|c| {
                        &c.scenario == scenario
                            && c.metric == metric
                            && matches!(c.verdict, Verdict::AFaster | Verdict::BFaster)
                    })
                    .collect();
                if !clear.is_empty() {
                    let _ = writeln!(
                        h,
                        "<details><summary>{} clear pairwise differences</summary><table><tr><th class=\"l\">region</th><th class=\"l\">percentile</th><th class=\"l\">faster</th><th>ms</th><th class=\"l\">slower</th><th>ms</th></tr>",
                        clear.len()
                    );
                    for c in clear {
                        let (f, fm, s, sm) = if c.verdict == Verdict::AFaster {
                            (&c.a, c.a_ms, &c.b, c.b_ms)
                        } else {
                            (&c.b, c.b_ms, &c.a, c.a_ms)
                        };
                        let _ = writeln!(
                            h,
                            "<tr><td class=\"l\">{}</td><td class=\"l\">P{}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td></tr>",
                            esc(&c.region),
                            c.percentile,
                            esc(f),
                            fmt_ms(fm),
                            esc(s),
                            fmt_ms(sm)
                        );
                    }
                    h.push_str("</table></details>\n");
                }
            }
        }
        h.push_str("<h3>Flags</h3>\n");
        if self.flags.is_empty() {
            h.push_str("<p>None.</p>\n");
        } else {
            h.push_str("<table><tr><th class=\"l\">flag</th><th class=\"l\">region</th><th class=\"l\">provider</th><th class=\"l\">scenario</th><th class=\"l\">metric</th><th class=\"l\">detail</th></tr>\n");
            for f in &self.flags {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"l flag\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}{}</td></tr>",
                    f.kind.as_str(),
                    esc(&f.region),
                    esc(&f.provider),
                    esc(&f.scenario),
                    f.metric.map_or(String::new(), |m| m.to_string()),
                    esc(&f.detail),
                    if f.confident {
                        ""
                    } else {
                        " <span class=\"na\">(few samples)</span>"
                    }
                );
            }
            h.push_str("</table>\n");
        }
        if !self.ranks.is_empty() || !self.window_ranks.is_empty() {
            h.push_str("<h3>Ranks and their stability</h3>\n");
        }
        for t in self.ranks.iter().chain(&self.window_ranks) {
            let _ = writeln!(h, "<p>{}</p>", esc(&rank_title(t)));
            h.push_str("<table><tr><th class=\"l\">provider</th>");
            for c in &t.columns {
                let _ = write!(h, "<th>{}</th>", esc(c));
            }
            h.push_str("<th>best</th><th>worst</th><th>mean</th><th>range</th></tr>\n");
            for r in &t.rows {
                let _ = write!(h, "<tr><td class=\"l\">{}</td>", esc(&r.provider));
                for (rank, v) in r.ranks.iter().zip(&r.values_ms) {
                    let _ = write!(
                        h,
                        "<td title=\"{}\">{}</td>",
                        v.map_or("no samples".into(), |v| format!("{} ms", fmt_ms(v))),
                        rank_text(*rank)
                    );
                }
                let _ = writeln!(
                    h,
                    "<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    rank_text(r.min_rank),
                    rank_text(r.max_rank),
                    r.mean_rank.map_or("-".into(), |m| format!("{m:.2}")),
                    rank_text(r.rank_range)
                );
            }
            h.push_str("</table>\n");
        }
        if !self.selection.is_empty() {
            h.push_str("<h3>Selection</h3>\n<p>Scores 0–1 (1 best), each next to its raw value: latency and price relative to the median of the region's providers on a log scale (0.5 at the median, 1 at half of it or less, 0 at twice of it or more; a latency percentile the samples do not support is marked and scores 0); stability is 1 − the upper 95 % bound of the failure rate of attempts (throttling and timeouts included); quality, compatibility and compliance are the user's scores divided by their scale. Total = weighted mean.</p>\n");
        }
        for t in &self.selection {
            let active: Vec<&str> = t
                .weights
                .named()
                .iter()
                .filter(|(_, v)| *v > 0.0)
                .map(|(n, _)| *n)
                .collect();
            let _ = writeln!(
                h,
                "<p><b>{} · {}</b> — latency {} P{}; weights {}</p>",
                esc(&t.scenario),
                esc(&t.region),
                t.metric,
                t.percentile,
                t.weights
                    .named()
                    .iter()
                    .filter(|(_, v)| *v > 0.0)
                    .map(|(n, v)| format!("{n} {v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            h.push_str("<table><tr><th>#</th><th class=\"l\">provider</th><th>total</th>");
            for n in &active {
                let _ = write!(h, "<th>{n}</th>");
            }
            h.push_str("</tr>\n");
            for r in &t.rows {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"l\">{}</td><td>{:.2}</td>",
                    r.rank,
                    esc(&r.provider),
                    r.total
                );
                for (name, c) in r.components() {
                    if active.contains(&name) {
                        let _ = write!(
                            h,
                            "<td>{} <span class=\"na\">{}</span></td>",
                            c.score.map_or("-".into(), |s| format!("{s:.2}")),
                            esc(&c.text)
                        );
                    }
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
        }
        h.push_str("</section>\n");
        h
    }
}

/// `s` escaped for HTML: the templates' escaping ([`crate::html::escape`]).
fn esc(s: &str) -> String {
    crate::html::escape(s)
}
