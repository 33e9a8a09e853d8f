//! The report's "Prompt cache" section (HTML): which generated-prompt scenarios sent fresh
//! words and which reused them, and per cell with a cached count its TTFT P50 next to the
//! share of prompt tokens the provider served from its cache, flagged cells with why
//! (`latmesh_results::cache_share`). Every number is the model's ([`ReportModel`]).

use maud::{Markup, html};

use crate::html::ms;
use crate::model::ReportModel;

/// Whether the section has anything to show: a generated-prompt scenario or a cell with a
/// cached count.
pub fn shown(m: &ReportModel) -> bool {
    !m.generated_text.is_empty() || m.matrix.iter().any(|c| c.cached_share.is_some())
}

/// The section: the text modes, then a table of every cell with a cached count (`ALL` rows
/// first): TTFT P50, cached % of prompt tokens, requests reporting, cache-hot requests,
/// and the flag with its note.
pub fn prompt_cache(m: &ReportModel) -> Markup {
    let mut cells: Vec<_> = m
        .matrix
        .iter()
        .filter(|c| c.cached_share.is_some())
        .collect();
    cells.sort_by_key(|c| {
        (
            c.region != latmesh_results::report_data::ALL,
            c.scenario.clone(),
        )
    });
    html! {
        @if !m.generated_text.is_empty() {
            p class="small" {
                "Generated prompts: "
                @for (i, (group, mode)) in m.generated_text.iter().enumerate() {
                    @if i > 0 { ", " }
                    b { (group) } " " (mode.as_str())
                }
                ". Fresh: new words this run (a rerun does not meet the provider's prompt cache); \
                 reuse: the same words as other runs of the plan (reuse_text = true)."
            }
        }
        p class="small" {
            "Cached share: Σ cached ÷ Σ prompt tokens over ok requests that reported both; \
             – when the provider reports no cached count. Flagged: most requests at least half \
             cached (Wilson 95 % lower bound ≥ 50 %) where the file asked for no caching: \
             that TTFT measures cache hits, not prefill."
        }
        @if !cells.is_empty() {
            table {
                thead {
                    tr {
                        th class="row" { "scenario" }
                        th class="row" { "region" }
                        th class="row" { "provider" }
                        th { "TTFT P50 ms" }
                        th { "cached % of prompt tokens" }
                        th { "requests reporting" }
                        th { "cache-hot" }
                        th class="row" { "flag" }
                    }
                }
                tbody {
                    @for c in &cells {
                        @if let Some(s) = &c.cached_share {
                            tr {
                                td class="row" { (c.scenario) }
                                td class="row" { (c.region) }
                                td class="row" { (c.provider) }
                                td { (ms(c.ttft.map(|p| p.p50_ms))) }
                                td { (format!("{:.1}", s.share_pct)) }
                                td { (s.requests) }
                                td { (s.hot_requests) }
                                td class="row" {
                                    (s.note.as_deref().or(s.asked_by.as_deref().map(|_| "asked for")).unwrap_or(""))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
