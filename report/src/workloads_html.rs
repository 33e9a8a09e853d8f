//! The report's workload sections (HTML): context tiers (TTFT by input length, with a chart
//! of TTFT P50 against input tokens), how each provider counted the generated tokens, SLO
//! goodput per cell, and the rate steps with each SLO search's answer and its evidence.
//! Every number is the model's ([`ReportModel`]: the summary's rows, verbatim).

use maud::{Markup, html};

use latmesh_core::load::StepVerdict;
use latmesh_results::report_data::ALL;
use latmesh_results::slo_stats::{Goodput, RateStepRow};
use latmesh_results::tiers::TierRow;

use crate::charts::{Line, SIZE, XyChart, xy_chart};
use crate::html::{figure, ms, ms_marked, note, provider_colour, slug, unsupported_legend};
use crate::model::ReportModel;

/// The tier scenarios' groups, in the order their rows come.
fn groups(m: &ReportModel) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for r in &m.tiers {
        if !out.contains(&r.group.as_str()) {
            out.push(&r.group);
        }
    }
    out
}

/// "Context tiers": per scenario group, the chart of TTFT P50 against input tokens (log x,
/// one line per provider, all regions merged), the provider × tier table of TTFT P50 / P95
/// for `ALL` and, folded, per region, and the details per tier.
pub fn tiers(m: &ReportModel) -> Markup {
    html! {
        (unsupported_legend())
        @for group in groups(m) {
            (tier_group(m, group))
        }
    }
}

fn tier_group(m: &ReportModel, group: &str) -> Markup {
    let rows: Vec<&TierRow> = m.tiers.iter().filter(|r| r.group == group).collect();
    let mut tiers: Vec<(u32, &str)> = rows
        .iter()
        .map(|r| (r.input_tokens, r.scenario.as_str()))
        .collect();
    tiers.sort_unstable();
    tiers.dedup();
    let mut providers: Vec<&str> = rows.iter().map(|r| r.provider.as_str()).collect();
    providers.sort_by_key(|p| provider_colour(m, p));
    providers.dedup();
    let mut regions: Vec<&str> = m.campaign.regions.iter().map(String::as_str).collect();
    regions.retain(|r| rows.iter().any(|t| t.region == *r));
    let lines: Vec<Line> = providers
        .iter()
        .map(|p| Line {
            name: p.to_string(),
            colour: provider_colour(m, p),
            dashed: false,
            points: rows
                .iter()
                .filter(|r| r.region == ALL && r.provider == *p)
                .filter_map(|r| Some((f64::from(r.input_tokens), r.ttft?.p50_ms)))
                .collect(),
        })
        .collect();
    let legend: Vec<(String, usize, bool)> = lines
        .iter()
        .map(|l| (l.name.clone(), l.colour, false))
        .collect();
    let chart = XyChart {
        size: SIZE,
        title: format!("TTFT P50 by input tokens: {group}"),
        x_desc: "input tokens (log)".into(),
        y_desc: "TTFT P50 ms".into(),
        x_log: true,
        y_log: false,
        y_range: None,
        lines,
        markers: Vec::new(),
    };
    let find = |region: &str, provider: &str, scenario: &str| {
        rows.iter()
            .find(|r| r.region == region && r.provider == provider && r.scenario == scenario)
            .copied()
    };
    let table = |region: &str| {
        html! {
            table {
                thead {
                    tr {
                        th class="row" { "provider" }
                        @for (tokens, scenario) in &tiers {
                            th title=(scenario) { (latmesh_core::synth::tier_label(*tokens)) " TTFT P50 / P95" }
                        }
                    }
                }
                tbody {
                    @for p in &providers {
                        tr {
                            td class="row" { (p) }
                            @for (_, scenario) in &tiers {
                                @match find(region, p, scenario) {
                                    None => td { "–" },
                                    Some(r) => td title={ (r.samples) " samples, " (format!("{:.1}", r.error_pct)) "% errors" } {
                                        (ms_marked(r.ttft, 50.0)) " / " (ms_marked(r.ttft, 95.0))
                                        @if r.context_refused > 0 {
                                            br; span class="small" { (r.context_refused) " refused: past its context" }
                                        }
                                    },
                                }
                            }
                        }
                    }
                }
            }
            "\n"
        }
    };
    html! {
        h3 { (group) }
        p class="small" {
            "Generated prompts of exact length (words of the generator; each provider bills its \
             own count: see Token counts). TTFT in ms, all regions merged unless stated; warm-up \
             requests left out."
        }
        (figure("tiers", &slug(&["tiers", group]), &xy_chart(&chart), &legend, "all regions merged; x on a log scale"))
        (table(ALL))
        @if !regions.is_empty() {
            details {
                summary class="small" { "per region" }
                @for region in &regions {
                    h3 { (region) }
                    (table(region))
                }
            }
        }
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    th class="row" { "tier" }
                    th { "samples" }
                    th { "errors %" }
                    th { "refused (context)" }
                    th { "TTST P50" }
                    th { "prefill tokens/s P50" }
                    th { "E2E per output token P50" }
                    th { "billed prompt tokens (mean)" }
                    th { "goodput" }
                    th { "cached % of prompt tokens" }
                }
            }
            tbody {
                @for p in &providers {
                    @for (_, scenario) in &tiers {
                        @if let Some(r) = find(ALL, p, scenario) {
                            tr {
                                td class="row" { (p) }
                                td class="row" { (latmesh_core::synth::tier_label(r.input_tokens)) }
                                td { (r.samples) }
                                td { (format!("{:.1}", r.error_pct)) }
                                td { (r.context_refused) }
                                td { (ms(r.ttst_p50_ms)) }
                                td { (r.prefill_tps_p50.map_or("–".into(), |v| format!("{v:.0}"))) }
                                td { (ms(r.e2e_per_token_p50_ms)) }
                                td { (r.billed_prompt_tokens_mean.map_or("–".into(), |v| format!("{v:.1}"))) }
                                td { (goodput_text(r.goodput.as_ref())) }
                                td { (latmesh_results::cache_share::cell_text(r.cached_share.as_ref())) }
                            }
                        }
                    }
                }
            }
        }
        "\n"
    }
}

/// "Token counts": one line per provider, and the billed count per tier.
pub fn token_counts(m: &ReportModel) -> Markup {
    html! {
        p class="small" {
            "The generator writes one word per token asked for; providers tokenize it their own \
             way. A provider whose count is off by more than "
            (format!("{:.0}", latmesh_results::tiers::COUNT_TOLERANCE * 100.0))
            " % holds more or fewer tokens per tier than the tier's name says: compare providers \
             at their billed counts."
        }
        ul {
            @for r in &m.token_counts {
                li {
                    @if r.counts_differently { strong { (r.note) } } @else { (r.note) }
                }
            }
        }
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    th { "tokens per word" }
                    th { "added per request" }
                    th class="row" { "asked → billed (mean, requests)" }
                }
            }
            tbody {
                @for r in &m.token_counts {
                    tr {
                        td class="row" { (r.provider) }
                        td { (r.tokens_per_word.map_or("–".into(), |v| format!("{v:.3}"))) }
                        td { (r.overhead_tokens.map_or("–".into(), |v| format!("{v:+.1}"))) }
                        td class="row" {
                            @for (i, (asked, billed, n)) in r.tiers.iter().enumerate() {
                                @if i > 0 { "; " }
                                (asked) " → " (format!("{billed:.1}")) " (" (n) ")"
                            }
                        }
                    }
                }
            }
        }
        "\n"
    }
}

/// `"93.0% [88.1–96.0] 45/48"`, or `–`.
fn goodput_text(g: Option<&Goodput>) -> String {
    match g {
        None => "–".into(),
        Some(g) => format!(
            "{:.1}% [{:.1}–{:.1}] {}/{}",
            g.pct, g.ci_pct.0, g.ci_pct.1, g.met, g.requests
        ),
    }
}

/// `met`, `missed` (with the bounds exceeded), `undecided` or `too few`.
fn meets_text(g: &Goodput) -> String {
    use latmesh_results::slo_stats::GoodputVerdict;
    match g.verdict() {
        GoodputVerdict::Met => "met".into(),
        GoodputVerdict::Missed if g.exceeded.is_empty() => "missed".into(),
        GoodputVerdict::Missed => format!("missed: {}", g.exceeded.join("; ")),
        GoodputVerdict::Undecided => "undecided".into(),
        GoodputVerdict::TooFew => format!(
            "too few (fewer than {} requests)",
            latmesh_results::slo_stats::MIN_GOODPUT_REQUESTS
        ),
    }
}

/// "SLO goodput": each scenario's SLO, then per cell with goodput (`ALL` rows first) the
/// judged and met requests, goodput with its 95 % interval, met requests/s per agent and the
/// verdict.
pub fn goodput(m: &ReportModel) -> Markup {
    let mut cells: Vec<_> = m.matrix.iter().filter(|c| c.goodput.is_some()).collect();
    cells.sort_by_key(|c| c.region != ALL);
    html! {
        ul {
            @for (scenario, slo) in &m.slos {
                li { (scenario) ": " (slo) }
            }
        }
        p class="small" {
            "Goodput: requests that met every per-request bound, of the final attempts of first \
             turns (warm-up, cancelled and dropped left out), with its Wilson 95 % interval. A \
             cell has met the SLO when the interval's lower bound reaches the SLO's share and \
             every percentile bound holds, missed it when the interval lies below the share or \
             a percentile bound was exceeded, and is undecided when the interval contains the \
             share or a percentile bound's samples do not support it (the rule of `latmesh \
             check`)."
        }
        table {
            thead {
                tr {
                    th class="row" { "scenario" }
                    th class="row" { "region" }
                    th class="row" { "provider" }
                    th { "goodput % [95 % CI]" }
                    th { "met / judged" }
                    th { "met/s per agent" }
                    th { "warm-up" }
                    th class="row" { "verdict" }
                }
            }
            tbody {
                @for c in &cells {
                    @if let Some(g) = &c.goodput {
                        tr {
                            td class="row" { (c.scenario) }
                            td class="row" { (c.region) }
                            td class="row" { (c.provider) }
                            td { (format!("{:.1} [{:.1}–{:.1}]", g.pct, g.ci_pct.0, g.ci_pct.1)) }
                            td { (g.met) " / " (g.requests) }
                            td { (g.rps.map_or("–".into(), |r| format!("{r:.2}"))) }
                            td { (c.warmup) }
                            td class="row" { (meets_text(g)) }
                        }
                    }
                }
            }
        }
        "\n"
    }
}

/// A step verdict in words.
pub fn verdict_text(v: Option<StepVerdict>) -> &'static str {
    match v {
        None => "–",
        Some(StepVerdict::Met) => "met",
        Some(StepVerdict::Missed) => "missed",
        Some(StepVerdict::Insufficient) => "too few requests",
        Some(StepVerdict::AgentLimited) => "agent limited (arrivals dropped)",
    }
}

/// "Rate steps and SLO search": per scenario, each search's answer per provider and region
/// in one line, then the evidence per step (`ALL` rows; regions folded).
pub fn rate_steps(m: &ReportModel) -> Markup {
    let mut scenarios: Vec<&str> = Vec::new();
    for r in &m.rate_steps {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    html! {
        (unsupported_legend())
        @for scenario in scenarios {
            (rate_scenario(m, scenario))
        }
    }
}

fn rate_scenario(m: &ReportModel, scenario: &str) -> Markup {
    let rows: Vec<&RateStepRow> = m
        .rate_steps
        .iter()
        .filter(|r| r.scenario == scenario)
        .collect();
    let mut answers: Vec<_> = m
        .searches
        .iter()
        .filter(|s| s.scenario == scenario)
        .collect();
    answers.sort_by_key(|s| (s.region != ALL, provider_colour(m, &s.provider)));
    let all: Vec<&RateStepRow> = rows.iter().copied().filter(|r| r.region == ALL).collect();
    let regional: Vec<&RateStepRow> = rows.iter().copied().filter(|r| r.region != ALL).collect();
    let slo = m.slos.iter().find(|(s, _)| s == scenario).map(|(_, d)| d);
    html! {
        h3 { (scenario) }
        @if let Some(slo) = slo {
            p class="small" { "SLO: " (slo) }
        }
        @if !answers.is_empty() {
            ul {
                @for a in &answers {
                    li { strong { (a.provider) } " in " (a.region) ": " (a.text) }
                }
            }
        } @else if slo.is_none() {
            (note("no SLO: the steps have no verdict"))
        }
        (step_table(&all))
        @if !regional.is_empty() {
            details {
                summary class="small" { "per region" }
                (step_table(&regional))
            }
        }
    }
}

fn step_table(rows: &[&RateStepRow]) -> Markup {
    html! {
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    th class="row" { "region" }
                    th { "step" }
                    th { "rps (per agent)" }
                    th { "achieved rps" }
                    th { "sent" }
                    th { "dropped" }
                    th { "errors %" }
                    th { "goodput % [95 % CI]" }
                    th { "TTFT P95" }
                    th class="row" { "verdict" }
                }
            }
            tbody {
                @for r in rows {
                    tr {
                        td class="row" { (r.provider) }
                        td class="row" { (r.region) }
                        td { (r.step) }
                        td {
                            (format!("{:.2}", r.target_rps))
                            @if r.target_rps_max > r.target_rps { "–" (format!("{:.2}", r.target_rps_max)) }
                        }
                        td { (r.achieved_rps.map_or("–".into(), |a| format!("{a:.2}"))) }
                        td { (r.sent) }
                        td { (r.dropped) }
                        td { (format!("{:.1}", r.error_pct)) }
                        td { (goodput_text(r.goodput.as_ref())) }
                        td { (ms_marked(r.ttft, 95.0)) }
                        td class="row" { (verdict_text(r.verdict)) }
                    }
                }
            }
        }
        "\n"
    }
}
