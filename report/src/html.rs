//! The report as one self-contained HTML page: inline CSS, inline SVG charts
//! ([`super::charts`]), no script, no font or image to fetch, no URL at all. Sections:
//! region × provider heatmaps, compatibility and quality parity when `latmesh compat` ran
//! ([`super::compat_html`]), context tiers, token counts, SLO goodput, rate steps and SLO
//! searches when the campaign has them ([`super::workloads_html`]), TTFT/E2E CDFs, ITL spread, sweeps, open-loop rates, peak vs
//! off-peak, latency over time, the analysis ([`latmesh_results::analysis`]'s fragment), notes. Every chart sits in a
//! `<figure class="chart" data-kind="…">`, every heatmap in a `<figure class="heatmap">`.
//!
//! The markup is written as [`maud`] templates, which escape every interpolated value; only the
//! CSS, the plotters SVG and the analysis fragment (escaped where they are built) go in as
//! [`PreEscaped`].

use maud::{DOCTYPE, Markup, PreEscaped, html};

use latmesh_core::metrics::Metric;

use crate::charts::{
    self, BarChart, BoxChart, BoxRow, Line, Marker, SIZE, XyChart, bar_chart, box_chart, xy_chart,
};
use crate::model::ReportModel;
use crate::workloads_html;
use crate::{cache_html, compat_html};
use latmesh_results::load_stats::{self, RateRow, SweepRow};
use latmesh_results::model_stats;
use latmesh_results::report_data::ALL;
use latmesh_results::summary::{MatrixCell, Percentiles};
use latmesh_store::query::WindowsReport;

/// `text` escaped for HTML text and attributes (`&`, `<`, `>`, `"`): the escaping of the
/// templates ([`maud`]), for the few places that build markup outside them (SVG text, the
/// analysis fragment).
pub fn escape(text: &str) -> String {
    html! { (text) }.into_string()
}

/// A latency in ms for a table cell: `1610`, `81.2`, `4.25`; `–` when missing.
pub fn ms(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  margin: 0; color: #1d2329; background: #f6f7f9; line-height: 1.4; }
header { background: #1d2b3a; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 6px; font-size: 22px; }
header .meta { margin: 0; font-size: 13px; color: #c9d3dd; }
header .flag { display: inline-block; padding: 1px 8px; border-radius: 9px; font-weight: 600; font-size: 12px; margin-left: 6px; }
.flag.ok { background: #2f7d4a; } .flag.bad { background: #b3412e; }
nav { padding: 8px 28px; background: #e9edf1; font-size: 13px; position: sticky; top: 0; z-index: 2; }
nav a { margin-right: 14px; color: #1d4e89; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1600px; }
section { background: #fff; border: 1px solid #dde2e7; border-radius: 6px; padding: 8px 18px 16px; margin: 16px 0; }
h2 { font-size: 18px; margin: 10px 0; } h3 { font-size: 15px; margin: 14px 0 6px; }
p.note { color: #6a4b00; background: #fff6db; border: 1px solid #f1dfa4; padding: 6px 10px; border-radius: 4px; font-size: 13px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 440px), 1fr)); gap: 14px; }
.grid.wide { grid-template-columns: repeat(auto-fill, minmax(min(100%, 640px), 1fr)); }
.grid.heat { grid-template-columns: repeat(auto-fill, minmax(min(100%, 700px), 1fr)); }
figure { margin: 0; }
figure.chart { max-width: 1000px; }
figure.chart svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; color: #4a5561; margin-top: 4px; }
.legend span { display: inline-block; margin-right: 12px; white-space: nowrap; }
.legend i { display: inline-block; width: 14px; height: 4px; margin-right: 4px; vertical-align: middle; }
.legend i.dashed { height: 0; border-top: 3px dashed; background: none !important; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { border: 1px solid #dde2e7; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f3f6; font-weight: 600; }
th.row, td.row { text-align: left; }
tr.all td, tr.all th { font-weight: 700; border-top: 2px solid #9aa5b1; }
figure.heatmap { overflow-x: auto; }
figure.heatmap figcaption { font-size: 13px; font-weight: 600; color: #1d2329; margin: 0 0 4px; }
.scale { display: flex; align-items: center; gap: 6px; font-size: 11px; color: #4a5561; margin-top: 4px; }
.scale .bar { width: 140px; height: 10px; border-radius: 2px; }
td.empty { color: #9aa5b1; background: #fafbfc; }
td.unsupported, span.unsupported { color: #5b6570;
  background-image: repeating-linear-gradient(45deg, rgba(255,255,255,.8) 0 3px, transparent 3px 7px); }
.small { font-size: 12px; color: #4a5561; }
.analysis { font-size: 14px; overflow-x: auto; }
.analysis section { border: none; padding: 0; margin: 0; }
"#;

/// Heat colour stops (pastel green → yellow → salmon): fast to slow.
const HEAT: [(f64, f64, f64); 3] = [
    (199.0, 233.0, 192.0),
    (255.0, 242.0, 174.0),
    (244.0, 154.0, 134.0),
];

fn heat_colour(t: f64) -> String {
    let t = t.clamp(0.0, 1.0) * 2.0;
    let (a, b, f) = if t <= 1.0 {
        (HEAT[0], HEAT[1], t)
    } else {
        (HEAT[1], HEAT[2], t - 1.0)
    };
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

fn heat_gradient() -> String {
    format!(
        "linear-gradient(to right, {}, {}, {})",
        heat_colour(0.0),
        heat_colour(0.5),
        heat_colour(1.0)
    )
}

/// The whole page.
pub fn page(m: &ReportModel) -> String {
    let c = &m.campaign;
    let start = latmesh_core::windows::utc_label(c.start_at_unix_us.div_euclid(1_000_000), false);
    let mut sections: Vec<(&str, &str, Markup)> = vec![("matrix", "Region × provider", matrix(m))];
    // What `latmesh compat` measured, next to the matrix.
    if !m.compat.compat.is_empty() {
        sections.push(("compat", "Compatibility", compat_html::compat(&m.compat)));
    }
    if let Some(q) = &m.compat.quality {
        sections.push(("quality", "Quality parity", compat_html::quality(q)));
    }
    // Workloads: generated-prompt tiers, token counts, SLO goodput, rate steps and searches.
    if !m.tiers.is_empty() {
        sections.push(("tiers", "Context tiers", workloads_html::tiers(m)));
    }
    if !m.token_counts.is_empty() {
        sections.push((
            "token-counts",
            "Token counts",
            workloads_html::token_counts(m),
        ));
    }
    if m.matrix.iter().any(|c| c.goodput.is_some()) {
        sections.push(("goodput", "SLO goodput", workloads_html::goodput(m)));
    }
    if cache_html::shown(m) {
        sections.push(("prompt-cache", "Prompt cache", cache_html::prompt_cache(m)));
    }
    if !m.rate_steps.is_empty() {
        sections.push((
            "rate-steps",
            "Rate steps and SLO search",
            workloads_html::rate_steps(m),
        ));
    }
    if m.matrix.iter().any(|c| c.phase_start_in_flight > 0) {
        sections.push((
            "phase-hygiene",
            "Phases that started loaded",
            crate::phases_html::loaded_starts(m),
        ));
    }
    sections.push(("cdfs", "Latency CDFs", cdfs(m)));
    sections.push(("itl", "Inter-token latency", itl(m)));
    if !m.sweeps.is_empty() {
        sections.push(("sweeps", "Concurrency sweeps", sweeps(m)));
    }
    if !m.rates.is_empty() || m.note("open-loop").is_some() {
        sections.push(("open-loop", "Open loop", rates(m)));
    }
    if !m.windows.is_empty() || m.note("windows").is_some() {
        sections.push(("windows", "Peak vs off-peak", windows(m)));
    }
    if !m.models.is_empty() {
        sections.push(("answered", "What answered", answered(m)));
    }
    sections.push(("time-series", "Over time", time_series(m)));
    // The analysis fragment brings its own heading.
    let analysis_title = if m.analysis_html.is_some() {
        ""
    } else {
        "Analysis"
    };
    sections.push(("analysis", analysis_title, analysis(m)));
    sections.push(("notes", "Notes", notes(m)));
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "latmesh report: " (c.name) }
                style {
                    (PreEscaped(CSS))
                    @if !m.compat.is_empty() { (PreEscaped(compat_html::CSS)) }
                }
            }
            body {
                "\n"
                header {
                    h1 {
                        "latmesh report: " (c.name)
                        @if c.cancelled {
                            span class="flag bad" { "cancelled" }
                        } @else if !c.complete {
                            span class="flag bad" { "incomplete" }
                        } @else {
                            span class="flag ok" { "complete" }
                        }
                    }
                    p class="meta" {
                        "campaign " (c.campaign_id) " · plan "
                        (c.plan_hash.get(..12).unwrap_or(&c.plan_hash))
                        " · metrics v" (c.metrics_version) " · started " (start) " UTC · "
                        (c.regions.len()) " regions × " (c.providers.len()) " providers × "
                        (c.scenarios.len()) " scenarios · " (c.agents) " agents · from " (m.source)
                    }
                    @if let Some(skew) = &c.start_skew {
                        p class="meta" { (skew) }
                    }
                    @if let Some(reason) = &c.budget.stop_reason {
                        p class="meta" { "STOPPED BY BUDGET: " (reason) }
                    }
                }
                "\n"
                nav {
                    @for (id, title, _) in &sections {
                        a href={ "#" (id) } { (if title.is_empty() { "Analysis" } else { title }) }
                    }
                }
                "\n"
                main {
                    "\n"
                    @for (id, title, body) in &sections {
                        section id=(id) {
                            @if !title.is_empty() {
                                h2 { (title) }
                            }
                            "\n" (body)
                        }
                        "\n"
                    }
                }
                footer class="small" style="padding: 0 28px 20px" {
                    "latmesh " (env!("CARGO_PKG_VERSION")) " · percentiles are exact over merged \
                     HDR histograms (never averages of percentiles); latencies in ms"
                }
            }
        }
        "\n"
    }
    .into_string()
}

pub(crate) fn note(text: &str) -> Markup {
    html! { p class="note" { (text) } "\n" }
}

fn analysis(m: &ReportModel) -> Markup {
    match &m.analysis_html {
        // The analysis fragment is built by `analysis_html`, its text escaped there.
        Some(fragment) => html! { div class="analysis" { (PreEscaped(fragment)) } "\n" },
        None => note("no analysis in this report"),
    }
}

/// A chart figure: the SVG, a legend of `(name, colour, dashed)`, and a caption.
pub(crate) fn figure(
    kind: &str,
    id: &str,
    svg: &str,
    legend: &[(String, usize, bool)],
    caption: &str,
) -> Markup {
    html! {
        figure class="chart" data-kind=(kind) id=(id) {
            // The SVG is drawn by plotters, its text escaped there.
            (PreEscaped(svg))
            figcaption {
                @if !legend.is_empty() {
                    div class="legend" {
                        @for (name, colour, dashed) in legend {
                            @let hex = charts::colour_hex(*colour);
                            span {
                                i class=(if *dashed { "dashed" } else { "" })
                                    style={ "background:" (hex) ";border-color:" (hex) } {}
                                (name)
                            }
                        }
                    }
                }
                (caption)
            }
        }
        "\n"
    }
}

pub(crate) fn slug(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| {
            p.chars()
                .map(|c| if c.is_alphanumeric() { c } else { '-' })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("-")
}

pub(crate) fn provider_colour(m: &ReportModel, provider: &str) -> usize {
    m.campaign
        .providers
        .iter()
        .position(|p| p == provider)
        .unwrap_or(0)
}

/// A heatmap cell's value, and whether its samples support it (a count or a rate always
/// does; a percentile when `n ≥ min_samples`).
type CellValue<'a> = &'a dyn Fn(&MatrixCell) -> Option<(f64, bool)>;

/// The percentiles of the open-loop table's latency columns (the campaign's list is in the
/// heatmaps).
const RATE_PERCENTILES: [f64; 3] = [50.0, 95.0, 99.0];

/// Percentile `q` of `p`, and whether it is supported.
fn pick(p: Option<Percentiles>, q: f64) -> Option<(f64, bool)> {
    p?.point(q).map(|pt| (pt.ms, pt.supported))
}

/// A percentile for a table cell: `ms(v)`, or `~ms(v)` hatched when its samples do not support
/// it (the rule is in [`unsupported_legend`]).
pub(crate) fn ms_marked(p: Option<Percentiles>, q: f64) -> Markup {
    html! {
        @match p.and_then(|p| p.point(q)) {
            None => { "–" }
            Some(pt) if pt.supported => { (ms(Some(pt.ms))) }
            Some(pt) => {
                span class="unsupported"
                    title={ "n " (p.map_or(0, |p| p.n)) " < " (pt.min_samples) ": not supported" } {
                    (pt.text(|v| ms(Some(v))))
                }
            }
        }
    }
}

/// The sample-size rule, once per section that marks values.
pub(crate) fn unsupported_legend() -> Markup {
    let rule = latmesh_results::percentiles::legend();
    let rule = rule
        .trim_start_matches(latmesh_results::percentiles::UNSUPPORTED_MARK)
        .trim_start();
    html! {
        p class="small" {
            span class="unsupported" { (PreEscaped("&nbsp;")) "~hatched" (PreEscaped("&nbsp;")) }
            " " (rule) ": the value is computed, but too few samples stand behind it to decide with."
        }
    }
}

/// What a heatmap table holds.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Latencies, ms: colours on a log scale.
    Latency,
    /// Percentages: colours on a linear scale.
    Percent,
    /// Counts: no colours.
    Count,
}

/// One heatmap table: rows regions and `ALL`, columns providers; colours from the table's
/// lowest (green) to highest (red) supported value; values the samples do not support are
/// hatched, marked `~` and left out of the colour scale (an unsupported maximum does not set
/// the red end). Empty when no cell has a value.
fn heat_table(
    m: &ReportModel,
    scenario: &str,
    title: &str,
    value: CellValue,
    kind: Kind,
) -> Markup {
    let log = kind == Kind::Latency;
    let regions: Vec<&str> = m
        .campaign
        .regions
        .iter()
        .map(String::as_str)
        .chain([ALL])
        .collect();
    let shown: Vec<(f64, bool)> = regions
        .iter()
        .flat_map(|r| m.campaign.providers.iter().map(move |p| (*r, p)))
        .filter_map(|(r, p)| m.cell(r, p, scenario).and_then(value))
        .collect();
    if shown.is_empty() {
        return html! {};
    }
    let values: Vec<f64> = shown
        .iter()
        .filter(|(v, supported)| *supported && v.is_finite() && (!log || *v > 0.0))
        .map(|(v, _)| *v)
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let scale = |v: f64| {
        if hi <= lo {
            0.0
        } else if log {
            (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    let fmt = |v: Option<f64>| match kind {
        Kind::Latency => ms(v),
        Kind::Percent => v.map_or("–".into(), |v| format!("{v:.1}")),
        Kind::Count => v.map_or("–".into(), |v| format!("{v:.0}")),
    };
    let background = |v: f64| match kind {
        Kind::Count => None,
        _ => Some(format!("background:{}", heat_colour(scale(v)))),
    };
    let mark = latmesh_results::percentiles::UNSUPPORTED_MARK;
    html! {
        figure class="heatmap" id=(slug(&["heat", scenario, title])) {
            figcaption { (title) }
            table {
                thead {
                    tr {
                        th class="row" { "region" }
                        @for p in &m.campaign.providers {
                            th { (p) }
                        }
                    }
                }
                tbody {
                    @for r in &regions {
                        tr class=[(*r == ALL).then_some("all")] {
                            th class="row" { (r) }
                            @for p in &m.campaign.providers {
                                @let cell = m.cell(r, p, scenario);
                                @let samples = cell.map_or(0, |c| c.samples);
                                @match cell.and_then(value) {
                                    Some((v, true)) => {
                                        td style=[background(v)]
                                            title={ (r) " " (p) " " (title) ": " (v) " (" (samples) " samples)" } {
                                            (fmt(Some(v)))
                                        }
                                    }
                                    Some((v, false)) => {
                                        td class="unsupported"
                                            title={ (r) " " (p) " " (title) ": " (v) " (" (samples) " samples: too few for this percentile)" } {
                                            (mark) (fmt(Some(v)))
                                        }
                                    }
                                    None => {
                                        td class="empty" { "–" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if kind != Kind::Count && !values.is_empty() {
                div class="scale" {
                    span { (fmt(Some(lo))) }
                    span class="bar" style={ "background:" (heat_gradient()) } {}
                    span { (fmt(Some(hi))) }
                    span { (if log { "(log scale)" } else { "" }) }
                }
            }
        }
        "\n"
    }
}

fn matrix(m: &ReportModel) -> Markup {
    // The campaign's percentiles (P50/P90/P95/P99 by default), one heatmap each.
    let blocks: Vec<Percentiles> = m
        .matrix
        .iter()
        .flat_map(|c| [c.ttft, c.ttfc, c.e2e])
        .flatten()
        .collect();
    let list = latmesh_results::percentiles::list_of(&blocks);
    type Of = fn(&MatrixCell) -> Option<Percentiles>;
    let metrics: [(&str, Of); 3] = [
        ("TTFT", |c| c.ttft),
        ("TTFC", |c| c.ttfc),
        ("E2E", |c| c.e2e),
    ];
    html! {
        p class="small" {
            "Rows: regions, and ALL (every region's histograms merged). Colours run from the \
             fastest (green) to the slowest (red) value of each table."
        }
        "\n"
        (unsupported_legend())
        @for (scenario, load) in &m.campaign.scenarios {
            h3 { (scenario) " " span class="small" { "(" (load) ")" } }
            div class="grid heat" {
                @for (name, of) in metrics {
                    @for &q in &list {
                        @let title = format!("{name} P{q} (ms)");
                        (heat_table(m, scenario, &title, &move |c: &MatrixCell| pick(of(c), q), Kind::Latency))
                    }
                }
                (heat_table(m, scenario, "errors % of attempts", &|c| Some((c.error_pct, true)), Kind::Percent))
                (heat_table(m, scenario, "samples (ok attempts)", &|c| Some((c.samples as f64, true)), Kind::Count))
            }
            "\n"
        }
    }
}

fn metric_name(metric: Metric) -> String {
    metric.as_str().to_uppercase()
}

fn cdfs(m: &ReportModel) -> Markup {
    let mut figures = Vec::new();
    for (scenario, _) in &m.campaign.scenarios {
        for metric in [Metric::Ttft, Metric::E2e] {
            let lines: Vec<Line> = m
                .cdfs
                .iter()
                .filter(|c| &c.scenario == scenario && c.metric == metric && !c.points.is_empty())
                .map(|c| Line {
                    name: format!("{} ({})", c.provider, c.samples),
                    colour: provider_colour(m, &c.provider),
                    dashed: false,
                    points: steps(&c.points),
                })
                .collect();
            if lines.is_empty() {
                continue;
            }
            let chart = XyChart {
                size: SIZE,
                title: format!("{} CDF: {scenario}", metric_name(metric)),
                x_desc: format!("{} ms (log)", metric_name(metric)),
                y_desc: "fraction ≤ x".into(),
                x_log: true,
                y_log: false,
                y_range: Some(0.0..1.02),
                lines,
                markers: Vec::new(),
            };
            let legend = legend_of(&chart.lines);
            figures.push(figure(
                "cdf",
                &slug(&["cdf", metric.as_str(), scenario]),
                &xy_chart(&chart),
                &legend,
                "provider (samples)",
            ));
        }
    }
    if figures.is_empty() {
        return note("no TTFT or E2E samples");
    }
    html! {
        p class="small" {
            "Fraction of ok attempts at or below each latency, all regions merged (log x axis). \
             A curve further left is faster; a long flat tail is jitter."
        }
        "\n"
        div class="grid wide" { @for f in figures { (f) } }
        "\n"
    }
}

/// An empirical CDF's points drawn as steps: from 0 at the first value, each value raises
/// the line vertically to its fraction.
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    let mut prev = 0.0;
    for &(x, f) in points {
        out.push((x, prev));
        out.push((x, f));
        prev = f;
    }
    out
}

fn legend_of(lines: &[Line]) -> Vec<(String, usize, bool)> {
    lines
        .iter()
        .map(|l| (l.name.clone(), l.colour, l.dashed))
        .collect()
}

fn itl(m: &ReportModel) -> Markup {
    let mut figures = Vec::new();
    for (scenario, _) in &m.campaign.scenarios {
        let rows: Vec<BoxRow> = m
            .itl
            .iter()
            .filter(|s| &s.scenario == scenario && s.samples > 0)
            .map(|s| {
                let q = |x: f64| s.at(x).unwrap_or(0.0).max(0.001);
                BoxRow {
                    name: s.provider.clone(),
                    colour: provider_colour(m, &s.provider),
                    q: [q(0.05), q(0.25), q(0.5), q(0.75), q(0.95), q(0.99)],
                }
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let svg = box_chart(&BoxChart {
            title: format!("ITL: {scenario}"),
            x_desc: "ITL ms (log)".into(),
            rows,
        });
        figures.push(figure(
            "itl",
            &slug(&["itl", scenario]),
            &svg,
            &[],
            "P5 · P25 · P50 · P75 · P95 · P99 per provider",
        ));
    }
    if figures.is_empty() {
        return note("no ITL samples (non-streaming scenarios only?)");
    }
    html! {
        p class="small" {
            "Gaps between token-bearing chunks, all regions merged: whiskers P5–P95, box \
             P25–P75, black bar P50, dot P99 (log x axis). Providers that send several tokens \
             per chunk show fewer, longer gaps."
        }
        "\n"
        div class="grid wide" { @for f in figures { (f) } }
        "\n"
    }
}

fn sweeps(m: &ReportModel) -> Markup {
    let scenarios: Vec<&str> = m
        .campaign
        .scenarios
        .iter()
        .filter(|(_, l)| l == "sweep")
        .map(|(s, _)| s.as_str())
        .collect();
    html! {
        @if !scenarios.is_empty() {
            (unsupported_legend())
        }
        @for scenario in scenarios {
            (sweep(m, scenario))
        }
    }
}

/// One sweep scenario: its latency and throughput charts by concurrency (knees ringed) and
/// the table of steps; empty without an `ALL` row.
fn sweep(m: &ReportModel, scenario: &str) -> Markup {
    let rows: Vec<&SweepRow> = m
        .sweeps
        .iter()
        .filter(|r| r.scenario == scenario && r.region == ALL)
        .collect();
    let Some(first) = rows.first() else {
        return html! {};
    };
    let rule = &first.knee_rule;
    let knee_desc = format!(
        "{} P{} ms",
        metric_name(rule.metric),
        load_stats::knee_quantile(rule) * 100.0
    );
    let mut latency = Vec::new();
    let mut throughput = Vec::new();
    let mut markers = Vec::new();
    for r in &rows {
        let colour = provider_colour(m, &r.provider);
        let pts: Vec<(f64, f64)> = r
            .steps
            .iter()
            .filter_map(|s| s.knee_value_ms.map(|v| (f64::from(s.concurrency), v)))
            .collect();
        if let Some(k) = &r.knee
            && let Some(v) = r.steps.get(k.step).and_then(|s| s.knee_value_ms)
        {
            markers.push(Marker {
                colour,
                at: (f64::from(k.concurrency), v),
                label: format!(" knee {}", r.provider),
            });
        }
        latency.push(Line {
            name: r.provider.clone(),
            colour,
            dashed: false,
            points: pts,
        });
        throughput.push(Line {
            name: r.provider.clone(),
            colour,
            dashed: false,
            points: r
                .steps
                .iter()
                .map(|s| (f64::from(s.concurrency), s.throughput_rps))
                .collect(),
        });
    }
    let legend = legend_of(&latency);
    let lat = XyChart {
        size: SIZE,
        title: format!("{knee_desc} by concurrency: {scenario}"),
        x_desc: "concurrency (workers per agent and provider)".into(),
        y_desc: knee_desc.clone(),
        x_log: false,
        y_log: false,
        y_range: None,
        lines: latency,
        markers,
    };
    let lat_svg = xy_chart(&lat);
    let thr = XyChart {
        title: format!("throughput by concurrency: {scenario}"),
        y_desc: "ok requests/s (all agents)".into(),
        lines: throughput,
        markers: Vec::new(),
        ..lat
    };
    let mark = latmesh_results::percentiles::UNSUPPORTED_MARK;
    html! {
        h3 { (scenario) }
        p class="small" {
            "All regions merged; " (first.step_ms as f64 / 1000.0) " s per step. Knee (ringed): \
             the first step whose " (knee_desc) " elasticity reaches " (rule.elasticity)
            " or whose errors reach " (rule.error_pct) "%, each significant (95 % intervals), \
             every step up to it with at least " (rule.min_requests) " requests."
        }
        div class="grid wide" {
            (figure("sweep-latency", &slug(&["sweep-latency", scenario]), &lat_svg, &legend, "ringed: the knee"))
            (figure("sweep-throughput", &slug(&["sweep-throughput", scenario]), &xy_chart(&thr), &legend, ""))
        }
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    @for s in &first.steps {
                        // Per agent, and the provider's total over every agent (all regions).
                        th title={ "workers per agent and provider; total over " (first.agents) " agents" } {
                            "c=" (s.concurrency) " (total "
                            @if first.agents == 0 { "?" } @else { (s.concurrency_total) }
                            ")"
                        }
                    }
                    th class="row" { "knee" }
                }
            }
            tbody {
                @for r in &rows {
                    tr {
                        td class="row" { (r.provider) }
                        @for s in &r.steps {
                            // A value its step's samples do not support is hatched and marked `~`.
                            @let supported = s.knee_value_ms.is_none() || s.knee_supported(rule);
                            td class=[(!supported).then_some("unsupported")]
                                title={ (s.ok) " ok of " (s.requests) " requests, " (format!("{:.1}", s.error_pct)) "% errors, " (format!("{:.2}", s.throughput_rps)) " rps" } {
                                @if !supported { (mark) }
                                (ms(s.knee_value_ms))
                            }
                        }
                        td class="row" { (load_stats::knee_text(r)) }
                    }
                }
            }
        }
        "\n"
    }
}

/// P50 / P95 / P99 of `p` for a table cell, each marked when not supported ([`ms_marked`]).
pub(crate) fn p50_p95_p99(p: Option<Percentiles>) -> Markup {
    html! {
        @if p.is_some() {
            @for (i, q) in RATE_PERCENTILES.iter().enumerate() {
                @if i > 0 { " / " }
                (ms_marked(p, *q))
            }
        } @else {
            "–"
        }
    }
}

fn rates(m: &ReportModel) -> Markup {
    let scenarios: Vec<&str> = m
        .campaign
        .scenarios
        .iter()
        .filter(|(_, l)| l == "rate")
        .map(|(s, _)| s.as_str())
        .collect();
    html! {
        @if let Some(n) = m.note("open-loop") {
            (note(&n.text))
        }
        @if !scenarios.is_empty() {
            (unsupported_legend())
        }
        @for scenario in scenarios {
            (rate(m, scenario))
        }
    }
}

/// One open-loop scenario: E2E actual vs intended send by provider, the table of its `ALL`
/// rows and, folded, its regional rows; empty without an `ALL` row.
fn rate(m: &ReportModel, scenario: &str) -> Markup {
    let rows: Vec<&RateRow> = m.rates.iter().filter(|r| r.scenario == scenario).collect();
    let all: Vec<&RateRow> = rows.iter().copied().filter(|r| r.region == ALL).collect();
    let Some(first) = all.first() else {
        return html! {};
    };
    let categories: Vec<String> = all.iter().map(|r| r.provider.clone()).collect();
    let series = |name: &str, colour: usize, f: fn(&RateRow) -> Option<f64>| {
        (name.to_string(), colour, all.iter().map(|r| f(r)).collect())
    };
    let chart = BarChart {
        title: format!("E2E, actual vs intended send: {scenario}"),
        y_desc: "E2E ms".into(),
        categories,
        series: vec![
            series("P50 actual", 0, |r| r.e2e.map(|p| p.p50_ms)),
            series("P50 intended", 3, |r| r.e2e_intended.map(|p| p.p50_ms)),
            series("P99 actual", 1, |r| r.e2e.map(|p| p.p99_ms)),
            series("P99 intended", 2, |r| r.e2e_intended.map(|p| p.p99_ms)),
        ],
    };
    let legend: Vec<(String, usize, bool)> = chart
        .series
        .iter()
        .map(|(n, c, _)| (n.clone(), *c, false))
        .collect();
    let mut regional: Vec<&RateRow> = rows.into_iter().filter(|r| r.region != ALL).collect();
    regional.sort_by_key(|r| provider_colour(m, &r.provider));
    html! {
        h3 { (scenario) }
        p class="small" {
            "Target " (first.target_rps) " requests/s per provider and agent for "
            (first.duration_ms as f64 / 1000.0) " s. Latency from the actual send vs from the \
             intended send (the schedule's time: free of coordinated omission). Agent saturated: \
             the agents could not keep the schedule (the provider got less than the offered \
             load). Provider saturated: its latency grew from the first to the second half of \
             the arrivals (its queue grew)."
        }
        (figure("rate", &slug(&["rate", scenario]), &bar_chart(&chart), &legend, "all regions merged"))
        (rate_table(&all))
        @if !regional.is_empty() {
            details {
                summary class="small" { "per region" }
                (rate_table(&regional))
            }
        }
    }
}

/// The table of open-loop rows.
fn rate_table(rows: &[&RateRow]) -> Markup {
    html! {
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    th class="row" { "region" }
                    th { "achieved rps / scheduled" }
                    th { "sent" }
                    th { "dropped" }
                    th { "errors %" }
                    th { "sched lag P50 / P95 / P99" }
                    th { "TTFT P50 / P95 / P99" }
                    th { "TTFT intended" }
                    th { "E2E P50 / P95 / P99" }
                    th { "E2E intended" }
                    th class="row" { "agent saturated" }
                    th class="row" { "provider saturated" }
                }
            }
            tbody {
                @for r in rows {
                    tr {
                        td class="row" { (r.provider) }
                        td class="row" { (r.region) }
                        td {
                            (r.achieved_rps.map_or("–".into(), |a| format!("{a:.2}")))
                            " / " (format!("{:.2}", r.scheduled_rps))
                        }
                        td { (r.sent) }
                        td { (r.dropped) }
                        td { (format!("{:.1}", r.error_pct)) }
                        td { (p50_p95_p99(r.sched_lag)) }
                        td { (p50_p95_p99(r.ttft)) }
                        td { (p50_p95_p99(r.ttft_intended)) }
                        td { (p50_p95_p99(r.e2e)) }
                        td { (p50_p95_p99(r.e2e_intended)) }
                        td class="row" { (r.agent_saturated_reason.as_deref().unwrap_or("no")) }
                        td class="row" {
                            @match (&r.provider_saturation, &r.provider_saturated_reason) {
                                (None, _) => { "– (too few requests per half)" }
                                (Some(_), Some(why)) => { (why) }
                                (Some(_), None) => { "no" }
                            }
                        }
                    }
                }
            }
        }
        "\n"
    }
}

fn windows(m: &ReportModel) -> Markup {
    html! {
        @if let Some(n) = m.note("windows") {
            (note(&n.text))
        }
        @if !m.windows.is_empty() {
            div class="grid wide" {
                @for w in &m.windows {
                    (windows_chart(m, w))
                }
            }
            @if let Some(w) = m.windows.first() {
                (windows_table(w))
            }
        }
    }
}

/// The bar chart of one peak vs off-peak report: per provider (all regions merged, or the one
/// region), one bar per window.
fn windows_chart(m: &ReportModel, w: &WindowsReport) -> Markup {
    let all: Vec<_> = m
        .campaign
        .providers
        .iter()
        .filter_map(|p| w.rows.iter().find(|r| &r.provider == p && r.region == ALL))
        .collect();
    let rows = if all.is_empty() {
        // One region only: its rows stand for the whole.
        w.rows.iter().collect()
    } else {
        all
    };
    let chart = BarChart {
        title: format!(
            "{} P{} by time window",
            w.metric.to_uppercase(),
            w.percentile
        ),
        y_desc: format!("{} P{} ms", w.metric.to_uppercase(), w.percentile),
        categories: rows.iter().map(|r| r.provider.clone()).collect(),
        series: w
            .windows
            .iter()
            .enumerate()
            .map(|(i, name)| {
                (
                    if name.is_empty() {
                        "(none)".into()
                    } else {
                        name.clone()
                    },
                    i,
                    rows.iter()
                        .map(|r| r.windows.get(i).and_then(|s| s.stat.value_ms))
                        .collect(),
                )
            })
            .collect(),
    };
    let legend: Vec<(String, usize, bool)> = chart
        .series
        .iter()
        .map(|(n, c, _)| (n.clone(), *c, false))
        .collect();
    figure(
        "windows",
        &slug(&["windows", &w.metric, &w.percentile.to_string()]),
        &bar_chart(&chart),
        &legend,
        "all regions merged, each region's rows in its own local time",
    )
}

/// The table of one peak vs off-peak report, every region and `ALL`.
fn windows_table(w: &WindowsReport) -> Markup {
    html! {
        h3 { (w.metric.to_uppercase()) " P" (w.percentile) " (ms), every region" }
        table {
            thead {
                tr {
                    th class="row" { "provider" }
                    th class="row" { "region" }
                    @for name in &w.windows {
                        th { (name) }
                        th { "attempts / err %" }
                    }
                    th { "change ms" }
                }
            }
            tbody {
                @for r in &w.rows {
                    tr class=[(r.region == ALL).then_some("all")] {
                        td class="row" { (r.provider) }
                        td class="row" { (r.region) }
                        @for s in &r.windows {
                            td { (ms(s.stat.value_ms)) }
                            td { (s.stat.attempts) " / " (format!("{:.1}", s.stat.error_pct)) }
                        }
                        td { (r.change_ms.map_or("–".into(), |v| format!("{v:+.1}"))) }
                    }
                }
            }
        }
        "\n"
    }
}

fn time_series(m: &ReportModel) -> Markup {
    let note_text = m.note("time-series").map(|n| n.text.as_str());
    if m.time_series.is_empty() {
        return html! { @if let Some(n) = note_text { (note(n)) } };
    }
    let start_s = m.campaign.start_at_unix_us.div_euclid(1_000_000);
    let bucket = m.time_series.first().map_or(0, |t| t.bucket_s);
    let mut figures = Vec::new();
    for (i, provider) in m.campaign.providers.iter().enumerate() {
        let mut lines = Vec::new();
        for (k, metric) in [Metric::Ttft, Metric::E2e].into_iter().enumerate() {
            let Some(ts) = m
                .time_series
                .iter()
                .find(|t| &t.provider == provider && t.metric == metric)
            else {
                continue;
            };
            let x = |t: i64| (t - start_s) as f64;
            let colour = if k == 0 { 0 } else { 1 };
            lines.push(Line {
                name: format!("{} P50", metric_name(metric)),
                colour,
                dashed: false,
                points: ts
                    .points
                    .iter()
                    .map(|p| (x(p.t_unix_s), p.p50_ms))
                    .collect(),
            });
            lines.push(Line {
                name: format!("{} P99", metric_name(metric)),
                colour,
                dashed: true,
                points: ts
                    .points
                    .iter()
                    .map(|p| (x(p.t_unix_s), p.p99_ms))
                    .collect(),
            });
        }
        if lines.is_empty() {
            continue;
        }
        let chart = XyChart {
            size: (440, 260),
            title: provider.clone(),
            x_desc: "s since start".into(),
            y_desc: "ms".into(),
            x_log: false,
            y_log: false,
            y_range: None,
            lines,
            markers: Vec::new(),
        };
        let legend = if i == 0 {
            legend_of(&chart.lines)
        } else {
            Vec::new()
        };
        figures.push(figure(
            "time-series",
            &slug(&["ts", provider]),
            &xy_chart(&chart),
            &legend,
            "",
        ));
    }
    html! {
        @if let Some(n) = note_text { (note(n)) }
        p class="small" {
            "P50 (solid) and P99 (dashed) per " (bucket) " s bucket on the coordinator's clock, \
             all regions and scenarios merged (the load model phases follow one another)."
        }
        div class="grid" { @for f in figures { (f) } }
        "\n"
    }
}

/// Per provider: the model id sent, the name expected, the models and `system_fingerprint`s
/// answered (attempts) and the flags; then per cell, the models answered.
fn answered(m: &ReportModel) -> Markup {
    let cells: Vec<&MatrixCell> = m
        .matrix
        .iter()
        .filter(|c| c.region != ALL && !c.answered_models.is_empty())
        .collect();
    html! {
        p class="small" {
            "The " code { "model" } " and " code { "system_fingerprint" } " the answers named, \
             counted over attempts. An answered model is the one expected when, case aside and \
             without an organisation path, it is the same name or the name followed by a version \
             or date (" code { "gpt-4o" } " → " code { "gpt-4o-2024-08-06" } "); a provider's "
            code { "expect_model" } " replaces " code { "model_id" } " as the name expected \
             (docs/metrics.md, " (PreEscaped("\"What answered\"")) ")."
        }
        "\n"
        table {
            thead {
                tr {
                    (row_heads(&["provider", "model_id sent", "expected", "models answered", "system_fingerprints", "flags"]))
                }
            }
            tbody {
                @for r in &m.models {
                    @let flags = r.flags();
                    tr {
                        td class="row" { (r.provider) }
                        td class="row" { (r.model_id) }
                        td class="row" { (r.expected) }
                        td class="row" { (model_stats::counted(&r.answered)) }
                        td class="row" { (model_stats::counted(&r.system_fingerprints)) }
                        td class="row" {
                            @if flags.is_empty() {
                                "none"
                            } @else {
                                strong {
                                    @for (i, f) in flags.iter().enumerate() {
                                        @if i > 0 { br; }
                                        (f)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !cells.is_empty() {
            (cell_table("Models answered per cell", "models answered (attempts)", &cells, |c| {
                model_stats::counted(&c.answered_models)
            }))
        }
    }
}

/// Left-aligned column headings.
fn row_heads(names: &[&str]) -> Markup {
    html! { @for n in names { th class="row" { (n) } } }
}

/// A `title`d table of matrix cells: region, provider, scenario and a `last` column.
fn cell_table(
    title: &str,
    last: &str,
    cells: &[&MatrixCell],
    value: fn(&MatrixCell) -> String,
) -> Markup {
    html! {
        h3 { (title) }
        table {
            thead {
                tr { (row_heads(&["region", "provider", "scenario", last])) }
            }
            tbody {
                @for c in cells {
                    tr {
                        td class="row" { (c.region) }
                        td class="row" { (c.provider) }
                        td class="row" { (c.scenario) }
                        td class="row" { (value(c)) }
                    }
                }
            }
        }
    }
}

fn notes(m: &ReportModel) -> Markup {
    let failing: Vec<&MatrixCell> = m
        .matrix
        .iter()
        .filter(|c| c.region != ALL && c.last_error.is_some())
        .collect();
    html! {
        @if !failing.is_empty() {
            (cell_table("Last error per cell", "error", &failing, |c| {
                c.last_error.clone().unwrap_or_default()
            }))
        }
        @if m.notes.is_empty() {
            p class="small" { "Every section had its data." }
        } @else {
            ul class="small" {
                @for n in &m.notes {
                    li { (n.section) ": " (n.text) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        assert_eq!(escape("<a href='x'>&\""), "&lt;a href='x'&gt;&amp;&quot;");
        assert_eq!(ms(Some(1610.4)), "1610");
        assert_eq!(ms(Some(81.24)), "81.2");
        assert_eq!(ms(Some(4.254)), "4.25");
        assert_eq!(ms(None), "–");
        assert_eq!(heat_colour(0.0), "#c7e9c0");
        assert_eq!(heat_colour(1.0), "#f49a86");
        assert_eq!(slug(&["cdf", "chat short"]), "cdf-chat-short");
    }
}
