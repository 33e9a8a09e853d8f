//! The report as one self-contained HTML page: inline CSS, inline SVG charts
//! ([`super::charts`]), no script, no font or image to fetch, no URL at all. Sections:
//! region × provider heatmaps, TTFT/E2E CDFs, ITL spread, sweeps, open-loop rates, peak vs
//! off-peak, latency over time, the analysis ([`latmesh_results::analysis`]'s fragment), notes. Every chart sits in a
//! `<figure class="chart" data-kind="…">`, every heatmap in a `<figure class="heatmap">`.

use std::fmt::Write as _;

use latmesh_core::metrics::Metric;

use super::charts::{
    self, BarChart, BoxChart, BoxRow, Line, Marker, SIZE, XyChart, bar_chart, box_chart, xy_chart,
};
use super::model::ReportModel;
use latmesh_results::load_stats::{self, RateRow, SweepRow};
use latmesh_results::model_stats;
use latmesh_results::report_data::ALL;
use latmesh_results::summary::{MatrixCell, Percentiles};

/// `text` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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
    let mut out = String::with_capacity(1 << 20);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>latmesh report: {}</title><style>{CSS}</style></head><body>\n",
        escape(&c.name)
    );
    let start = latmesh_core::windows::utc_label(c.start_at_unix_us.div_euclid(1_000_000), false);
    let state = if c.cancelled {
        "<span class=\"flag bad\">cancelled</span>"
    } else if !c.complete {
        "<span class=\"flag bad\">incomplete</span>"
    } else {
        "<span class=\"flag ok\">complete</span>"
    };
    let _ = write!(
        out,
        "<header><h1>latmesh report: {}{state}</h1><p class=\"meta\">campaign {} · plan {} · \
         metrics v{} · started {start} UTC · {} regions × {} providers × {} scenarios · {} agents \
         · from {}</p>",
        escape(&c.name),
        escape(&c.campaign_id),
        escape(c.plan_hash.get(..12).unwrap_or(&c.plan_hash)),
        c.metrics_version,
        c.regions.len(),
        c.providers.len(),
        c.scenarios.len(),
        c.agents,
        escape(&m.source),
    );
    if let Some(skew) = &c.start_skew {
        let _ = write!(out, "<p class=\"meta\">{}</p>", escape(skew));
    }
    if let Some(reason) = &c.budget.stop_reason {
        let _ = write!(
            out,
            "<p class=\"meta\">STOPPED BY BUDGET: {}</p>",
            escape(reason)
        );
    }
    out.push_str("</header>\n<nav>");
    let mut sections: Vec<(&str, &str, String)> = vec![
        ("matrix", "Region × provider", matrix(m)),
        ("cdfs", "Latency CDFs", cdfs(m)),
        ("itl", "Inter-token latency", itl(m)),
    ];
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
    for (id, title, _) in &sections {
        let title = if title.is_empty() { "Analysis" } else { title };
        let _ = write!(out, "<a href=\"#{id}\">{title}</a>");
    }
    out.push_str("</nav>\n<main>\n");
    for (id, title, body) in &sections {
        let heading = if title.is_empty() {
            String::new()
        } else {
            format!("<h2>{title}</h2>")
        };
        let _ = writeln!(out, "<section id=\"{id}\">{heading}\n{body}</section>");
    }
    let _ = writeln!(
        out,
        "</main><footer class=\"small\" style=\"padding: 0 28px 20px\">latmesh {} · \
         percentiles are exact over merged HDR histograms (never averages of percentiles); \
         latencies in ms</footer></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    out
}

fn note(text: &str) -> String {
    format!("<p class=\"note\">{}</p>\n", escape(text))
}

fn analysis(m: &ReportModel) -> String {
    match &m.analysis_html {
        Some(html) => format!("<div class=\"analysis\">{html}</div>\n"),
        None => note("no analysis in this report"),
    }
}

/// A chart figure: the SVG, a legend of `(name, colour, dashed)`, and a caption.
fn figure(
    kind: &str,
    id: &str,
    svg: &str,
    legend: &[(String, usize, bool)],
    caption: &str,
) -> String {
    let mut out = format!(
        "<figure class=\"chart\" data-kind=\"{kind}\" id=\"{}\">{svg}<figcaption>",
        escape(id)
    );
    if !legend.is_empty() {
        out.push_str("<div class=\"legend\">");
        for (name, colour, dashed) in legend {
            let hex = charts::colour_hex(*colour);
            let _ = write!(
                out,
                "<span><i class=\"{}\" style=\"background:{hex};border-color:{hex}\"></i>{}</span>",
                if *dashed { "dashed" } else { "" },
                escape(name)
            );
        }
        out.push_str("</div>");
    }
    let _ = writeln!(out, "{}</figcaption></figure>", escape(caption));
    out
}

fn slug(parts: &[&str]) -> String {
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

fn provider_colour(m: &ReportModel, provider: &str) -> usize {
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
fn ms_marked(p: Option<Percentiles>, q: f64) -> String {
    match p.and_then(|p| p.point(q)) {
        None => "–".into(),
        Some(pt) if pt.supported => ms(Some(pt.ms)),
        Some(pt) => format!(
            "<span class=\"unsupported\" title=\"n {} &lt; {}: not supported\">{}</span>",
            p.map_or(0, |p| p.n),
            pt.min_samples,
            pt.text(|v| ms(Some(v)))
        ),
    }
}

/// The sample-size rule, once per section that marks values.
fn unsupported_legend() -> String {
    format!(
        "<p class=\"small\"><span class=\"unsupported\">&nbsp;~hatched&nbsp;</span> {}: the \
         value is computed, but too few samples stand behind it to decide with.</p>",
        escape(
            latmesh_results::percentiles::legend()
                .trim_start_matches(latmesh_results::percentiles::UNSUPPORTED_MARK)
                .trim_start()
        )
    )
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
) -> String {
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
        return String::new();
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
        Kind::Count => String::new(),
        _ => format!(" style=\"background:{}\"", heat_colour(scale(v))),
    };
    let mut out = format!(
        "<figure class=\"heatmap\" id=\"{}\"><figcaption>{}</figcaption><table><thead><tr><th class=\"row\">region</th>",
        escape(&slug(&["heat", scenario, title])),
        escape(title)
    );
    for p in &m.campaign.providers {
        let _ = write!(out, "<th>{}</th>", escape(p));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &regions {
        let _ = write!(
            out,
            "<tr{}><th class=\"row\">{}</th>",
            if *r == ALL { " class=\"all\"" } else { "" },
            escape(r)
        );
        for p in &m.campaign.providers {
            let cell = m.cell(r, p, scenario);
            match cell.and_then(value) {
                Some((v, true)) => {
                    let samples = cell.map_or(0, |c| c.samples);
                    let _ = write!(
                        out,
                        "<td{} title=\"{} {} {}: {v} ({samples} samples)\">{}</td>",
                        background(v),
                        escape(r),
                        escape(p),
                        escape(title),
                        fmt(Some(v))
                    );
                }
                Some((v, false)) => {
                    let samples = cell.map_or(0, |c| c.samples);
                    let _ = write!(
                        out,
                        "<td class=\"unsupported\" title=\"{} {} {}: {v} ({samples} samples: \
                         too few for this percentile)\">{}{}</td>",
                        escape(r),
                        escape(p),
                        escape(title),
                        latmesh_results::percentiles::UNSUPPORTED_MARK,
                        fmt(Some(v))
                    );
                }
                None => out.push_str("<td class=\"empty\">–</td>"),
            }
        }
        out.push_str("</tr>");
    }
    if kind == Kind::Count || values.is_empty() {
        out.push_str("</tbody></table></figure>\n");
        return out;
    }
    let _ = writeln!(
        out,
        "</tbody></table><div class=\"scale\"><span>{}</span><span class=\"bar\" style=\"background:{}\"></span><span>{}</span><span>{}</span></div></figure>",
        fmt(Some(lo)),
        heat_gradient(),
        fmt(Some(hi)),
        if log { "(log scale)" } else { "" }
    );
    out
}

fn matrix(m: &ReportModel) -> String {
    let mut out = String::from(
        "<p class=\"small\">Rows: regions, and ALL (every region's histograms merged). Colours \
         run from the fastest (green) to the slowest (red) value of each table.</p>\n",
    );
    out.push_str(&unsupported_legend());
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
    for (scenario, load) in &m.campaign.scenarios {
        let _ = write!(
            out,
            "<h3>{} <span class=\"small\">({load})</span></h3><div class=\"grid heat\">",
            escape(scenario)
        );
        for (name, of) in metrics {
            for &q in &list {
                let title = format!("{name} P{q} (ms)");
                let value = move |c: &MatrixCell| pick(of(c), q);
                out.push_str(&heat_table(m, scenario, &title, &value, Kind::Latency));
            }
        }
        out.push_str(&heat_table(
            m,
            scenario,
            "errors % of attempts",
            &|c| Some((c.error_pct, true)),
            Kind::Percent,
        ));
        out.push_str(&heat_table(
            m,
            scenario,
            "samples (ok attempts)",
            &|c| Some((c.samples as f64, true)),
            Kind::Count,
        ));
        out.push_str("</div>\n");
    }
    out
}

fn metric_name(metric: Metric) -> String {
    metric.as_str().to_uppercase()
}

fn cdfs(m: &ReportModel) -> String {
    let mut out = String::from(
        "<p class=\"small\">Fraction of ok attempts at or below each latency, all regions \
         merged (log x axis). A curve further left is faster; a long flat tail is jitter.</p>\n<div class=\"grid wide\">",
    );
    let mut any = false;
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
            any = true;
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
            out.push_str(&figure(
                "cdf",
                &slug(&["cdf", metric.as_str(), scenario]),
                &xy_chart(&chart),
                &legend,
                "provider (samples)",
            ));
        }
    }
    out.push_str("</div>\n");
    if !any {
        return note("no TTFT or E2E samples");
    }
    out
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

fn itl(m: &ReportModel) -> String {
    let mut out = String::from(
        "<p class=\"small\">Gaps between token-bearing chunks, all regions merged: whiskers \
         P5–P95, box P25–P75, black bar P50, dot P99 (log x axis). Providers that send several \
         tokens per chunk show fewer, longer gaps.</p>\n<div class=\"grid wide\">",
    );
    let mut any = false;
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
        any = true;
        let svg = box_chart(&BoxChart {
            title: format!("ITL: {scenario}"),
            x_desc: "ITL ms (log)".into(),
            rows,
        });
        out.push_str(&figure(
            "itl",
            &slug(&["itl", scenario]),
            &svg,
            &[],
            "P5 · P25 · P50 · P75 · P95 · P99 per provider",
        ));
    }
    out.push_str("</div>\n");
    if !any {
        return note("no ITL samples (non-streaming scenarios only?)");
    }
    out
}

fn sweeps(m: &ReportModel) -> String {
    let mut out = String::new();
    let scenarios: Vec<&str> = m
        .campaign
        .scenarios
        .iter()
        .filter(|(_, l)| l == "sweep")
        .map(|(s, _)| s.as_str())
        .collect();
    if !scenarios.is_empty() {
        out.push_str(&unsupported_legend());
    }
    for scenario in scenarios {
        let rows: Vec<&SweepRow> = m
            .sweeps
            .iter()
            .filter(|r| r.scenario == scenario && r.region == ALL)
            .collect();
        let Some(first) = rows.first() else {
            continue;
        };
        let rule = &first.knee_rule;
        let knee_desc = format!(
            "{} P{} ms",
            metric_name(rule.metric),
            load_stats::knee_quantile(rule) * 100.0
        );
        let _ = write!(
            out,
            "<h3>{}</h3><p class=\"small\">All regions merged; {} s per step. Knee (ringed): the \
             first step whose {knee_desc} elasticity reaches {} or whose errors reach {}%, each \
             significant (95 % intervals), every step up to it with at least {} requests.</p>\
             <div class=\"grid wide\">",
            escape(scenario),
            first.step_ms as f64 / 1000.0,
            rule.elasticity,
            rule.error_pct,
            rule.min_requests
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
        out.push_str(&figure(
            "sweep-latency",
            &slug(&["sweep-latency", scenario]),
            &xy_chart(&lat),
            &legend,
            "ringed: the knee",
        ));
        let thr = XyChart {
            title: format!("throughput by concurrency: {scenario}"),
            y_desc: "ok requests/s (all agents)".into(),
            lines: throughput,
            markers: Vec::new(),
            ..lat
        };
        out.push_str(&figure(
            "sweep-throughput",
            &slug(&["sweep-throughput", scenario]),
            &xy_chart(&thr),
            &legend,
            "",
        ));
        out.push_str("</div><table><thead><tr><th class=\"row\">provider</th>");
        for s in &first.steps {
            // Per agent, and the provider's total over every agent (all regions).
            let total = if first.agents == 0 {
                "?".to_string()
            } else {
                s.concurrency_total.to_string()
            };
            let _ = write!(
                out,
                "<th title=\"workers per agent and provider; total over {} agents\">c={} \
                 (total {total})</th>",
                first.agents, s.concurrency
            );
        }
        out.push_str("<th class=\"row\">knee</th></tr></thead><tbody>");
        for r in &rows {
            let _ = write!(out, "<tr><td class=\"row\">{}</td>", escape(&r.provider));
            for s in &r.steps {
                // A value its step's samples do not support is hatched and marked `~`.
                let supported = s.knee_value_ms.is_none() || s.knee_supported(rule);
                let _ = write!(
                    out,
                    "<td{} title=\"{} ok of {} requests, {:.1}% errors, {:.2} rps\">{}{}</td>",
                    if supported {
                        ""
                    } else {
                        " class=\"unsupported\""
                    },
                    s.ok,
                    s.requests,
                    s.error_pct,
                    s.throughput_rps,
                    if supported {
                        ""
                    } else {
                        latmesh_results::percentiles::UNSUPPORTED_MARK
                    },
                    ms(s.knee_value_ms)
                );
            }
            let _ = write!(
                out,
                "<td class=\"row\">{}</td></tr>",
                escape(&load_stats::knee_text(r))
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out
}

/// P50 / P95 / P99 of `p` for a table cell, each marked when not supported ([`ms_marked`]).
fn p50_p95_p99(p: Option<Percentiles>) -> String {
    match p {
        Some(_) => RATE_PERCENTILES
            .iter()
            .map(|q| ms_marked(p, *q))
            .collect::<Vec<_>>()
            .join(" / "),
        None => "–".into(),
    }
}

fn rates(m: &ReportModel) -> String {
    let mut out = String::new();
    if let Some(n) = m.note("open-loop") {
        out.push_str(&note(&n.text));
    }
    let scenarios: Vec<&str> = m
        .campaign
        .scenarios
        .iter()
        .filter(|(_, l)| l == "rate")
        .map(|(s, _)| s.as_str())
        .collect();
    if !scenarios.is_empty() {
        out.push_str(&unsupported_legend());
    }
    for scenario in scenarios {
        let rows: Vec<&RateRow> = m.rates.iter().filter(|r| r.scenario == scenario).collect();
        let all: Vec<&RateRow> = rows.iter().copied().filter(|r| r.region == ALL).collect();
        let Some(first) = all.first() else {
            continue;
        };
        let _ = write!(
            out,
            "<h3>{}</h3><p class=\"small\">Target {} requests/s per provider and agent for {} s. \
             Latency from the actual send vs from the intended send (the schedule's time: free \
             of coordinated omission). Agent saturated: the agents could not keep the schedule (the \
             provider got less than the offered load). Provider saturated: its latency grew from \
             the first to the second half of the arrivals (its queue grew).</p>",
            escape(scenario),
            first.target_rps,
            first.duration_ms as f64 / 1000.0
        );
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
        out.push_str(&figure(
            "rate",
            &slug(&["rate", scenario]),
            &bar_chart(&chart),
            &legend,
            "all regions merged",
        ));
        out.push_str(&rate_table(&all));
        let mut regional: Vec<&RateRow> = rows.into_iter().filter(|r| r.region != ALL).collect();
        regional.sort_by_key(|r| provider_colour(m, &r.provider));
        if !regional.is_empty() {
            let _ = write!(
                out,
                "<details><summary class=\"small\">per region</summary>{}</details>",
                rate_table(&regional)
            );
        }
    }
    out
}

/// The table of open-loop rows.
fn rate_table(rows: &[&RateRow]) -> String {
    let mut out = String::from(
        "<table><thead><tr><th class=\"row\">provider</th><th class=\"row\">region</th>\
         <th>achieved rps / scheduled</th><th>sent</th><th>dropped</th><th>errors %</th>\
         <th>sched lag P50 / P95 / P99</th><th>TTFT P50 / P95 / P99</th><th>TTFT intended</th>\
         <th>E2E P50 / P95 / P99</th><th>E2E intended</th><th class=\"row\">agent saturated</th>\
         <th class=\"row\">provider saturated</th></tr></thead><tbody>",
    );
    for r in rows {
        let _ = write!(
            out,
            "<tr><td class=\"row\">{}</td><td class=\"row\">{}</td><td>{} / {:.2}</td>\
             <td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"row\">{}</td><td class=\"row\">{}</td></tr>",
            escape(&r.provider),
            escape(&r.region),
            r.achieved_rps.map_or("–".into(), |a| format!("{a:.2}")),
            r.scheduled_rps,
            r.sent,
            r.dropped,
            r.error_pct,
            p50_p95_p99(r.sched_lag),
            p50_p95_p99(r.ttft),
            p50_p95_p99(r.ttft_intended),
            p50_p95_p99(r.e2e),
            p50_p95_p99(r.e2e_intended),
            escape(r.agent_saturated_reason.as_deref().unwrap_or("no")),
            escape(
                &match (&r.provider_saturation, &r.provider_saturated_reason) {
                    (None, _) => "– (too few requests per half)".to_string(),
                    (Some(_), Some(why)) => why.clone(),
                    (Some(_), None) => "no".to_string(),
                }
            )
        );
    }
    out.push_str("</tbody></table>\n");
    out
}

fn windows(m: &ReportModel) -> String {
    let mut out = String::new();
    if let Some(n) = m.note("windows") {
        out.push_str(&note(&n.text));
    }
    if m.windows.is_empty() {
        return out;
    }
    out.push_str("<div class=\"grid wide\">");
    for w in &m.windows {
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
        out.push_str(&figure(
            "windows",
            &slug(&["windows", &w.metric, &w.percentile.to_string()]),
            &bar_chart(&chart),
            &legend,
            "all regions merged, each region's rows in its own local time",
        ));
    }
    out.push_str("</div>");
    if let Some(w) = m.windows.first() {
        out.push_str(&format!(
            "<h3>{} P{} (ms), every region</h3>",
            w.metric.to_uppercase(),
            w.percentile
        ));
        out.push_str(
            "<table><thead><tr><th class=\"row\">provider</th><th class=\"row\">region</th>",
        );
        for name in &w.windows {
            let _ = write!(out, "<th>{}</th><th>attempts / err %</th>", escape(name));
        }
        out.push_str("<th>change ms</th></tr></thead><tbody>");
        for r in &w.rows {
            let _ = write!(
                out,
                "<tr{}><td class=\"row\">{}</td><td class=\"row\">{}</td>",
                if r.region == ALL {
                    " class=\"all\""
                } else {
                    ""
                },
                escape(&r.provider),
                escape(&r.region)
            );
            for s in &r.windows {
                let _ = write!(
                    out,
                    "<td>{}</td><td>{} / {:.1}</td>",
                    ms(s.stat.value_ms),
                    s.stat.attempts,
                    s.stat.error_pct
                );
            }
            let _ = write!(
                out,
                "<td>{}</td></tr>",
                r.change_ms.map_or("–".into(), |v| format!("{v:+.1}"))
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out
}

fn time_series(m: &ReportModel) -> String {
    let mut out = String::new();
    if let Some(n) = m.note("time-series") {
        out.push_str(&note(&n.text));
    }
    if m.time_series.is_empty() {
        return out;
    }
    let start_s = m.campaign.start_at_unix_us.div_euclid(1_000_000);
    let bucket = m.time_series.first().map_or(0, |t| t.bucket_s);
    let _ = write!(
        out,
        "<p class=\"small\">P50 (solid) and P99 (dashed) per {bucket} s bucket on the coordinator's \
         clock, all regions and scenarios merged (the load model phases follow one another).</p>\
         <div class=\"grid\">"
    );
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
        out.push_str(&figure(
            "time-series",
            &slug(&["ts", provider]),
            &xy_chart(&chart),
            &legend,
            "",
        ));
    }
    out.push_str("</div>\n");
    out
}

/// Per provider: the model id sent, the name expected, the models and `system_fingerprint`s
/// answered (attempts) and the flags; then per cell, the models answered.
fn answered(m: &ReportModel) -> String {
    let th = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| format!("<th class=\"row\">{n}</th>"))
            .collect()
    };
    let td = |text: &str| format!("<td class=\"row\">{}</td>", escape(text));
    let mut out = String::from(
        "<p class=\"small\">The <code>model</code> and <code>system_fingerprint</code> the \
         answers named, counted over attempts. An answered model is the one expected when, \
         case aside and without an organisation path, it is the same name or the name followed \
         by a version or date (<code>gpt-4o</code> → <code>gpt-4o-2024-08-06</code>); a \
         provider's <code>expect_model</code> replaces <code>model_id</code> as the name \
         expected (docs/metrics.md, \"What answered\").</p>\n",
    );
    let _ = write!(
        out,
        "<table><thead><tr>{}</tr></thead><tbody>",
        th(&[
            "provider",
            "model_id sent",
            "expected",
            "models answered",
            "system_fingerprints",
            "flags"
        ])
    );
    for r in &m.models {
        let flags = r.flags();
        let flags = if flags.is_empty() {
            "<td class=\"row\">none</td>".to_string()
        } else {
            format!(
                "<td class=\"row\"><strong>{}</strong></td>",
                flags
                    .iter()
                    .map(|f| escape(f))
                    .collect::<Vec<_>>()
                    .join("<br>")
            )
        };
        let _ = write!(
            out,
            "<tr>{}{}{}{}{}{flags}</tr>",
            td(&r.provider),
            td(&r.model_id),
            td(&r.expected),
            td(&model_stats::counted(&r.answered)),
            td(&model_stats::counted(&r.system_fingerprints)),
        );
    }
    out.push_str("</tbody></table>");
    let cells: Vec<&MatrixCell> = m
        .matrix
        .iter()
        .filter(|c| c.region != ALL && !c.answered_models.is_empty())
        .collect();
    if !cells.is_empty() {
        let _ = write!(
            out,
            "<h3>Models answered per cell</h3><table><thead><tr>{}</tr></thead><tbody>",
            th(&[
                "region",
                "provider",
                "scenario",
                "models answered (attempts)"
            ])
        );
        for c in cells {
            let _ = write!(
                out,
                "<tr>{}{}{}{}</tr>",
                td(&c.region),
                td(&c.provider),
                td(&c.scenario),
                td(&model_stats::counted(&c.answered_models))
            );
        }
        out.push_str("</tbody></table>");
    }
    out
}

fn notes(m: &ReportModel) -> String {
    let mut out = String::new();
    let failing: Vec<&MatrixCell> = m
        .matrix
        .iter()
        .filter(|c| c.region != ALL && c.last_error.is_some())
        .collect();
    if !failing.is_empty() {
        out.push_str("<h3>Last error per cell</h3><table><thead><tr><th class=\"row\">region</th><th class=\"row\">provider</th><th class=\"row\">scenario</th><th class=\"row\">error</th></tr></thead><tbody>");
        for c in failing {
            let _ = write!(
                out,
                "<tr><td class=\"row\">{}</td><td class=\"row\">{}</td><td class=\"row\">{}</td><td class=\"row\">{}</td></tr>",
                escape(&c.region),
                escape(&c.provider),
                escape(&c.scenario),
                escape(c.last_error.as_deref().unwrap_or_default())
            );
        }
        out.push_str("</tbody></table>");
    }
    if m.notes.is_empty() {
        out.push_str("<p class=\"small\">Every section had its data.</p>");
    } else {
        out.push_str("<ul class=\"small\">");
        for n in &m.notes {
            let _ = write!(out, "<li>{}: {}</li>", escape(&n.section), escape(&n.text));
        }
        out.push_str("</ul>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        assert_eq!(
            escape("<a href='x'>&\""),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;"
        );
        assert_eq!(ms(Some(1610.4)), "1610");
        assert_eq!(ms(Some(81.24)), "81.2");
        assert_eq!(ms(Some(4.254)), "4.25");
        assert_eq!(ms(None), "–");
        assert_eq!(heat_colour(0.0), "#c7e9c0");
        assert_eq!(heat_colour(1.0), "#f49a86");
        assert_eq!(slug(&["cdf", "chat short"]), "cdf-chat-short");
    }
}
