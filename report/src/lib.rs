//! Campaign reports people would rather look at: `latmesh report CAMPAIGN` (from ClickHouse)
//! and the report `latmesh demo` writes (from the coordinator's memory).
//!
//! A [`ReportData`] (summary, plan, merged histograms) becomes a [`ReportModel`] (every number
//! the report shows: [`model`]), rendered as one self-contained HTML page ([`html`], charts
//! in [`charts`]), as JSON (the model itself) or as a long CSV ([`csv`]). The three carry the
//! same numbers, and the matrix cells are the summary's own. Sections that need each row's
//! time (peak vs off-peak, latency over time) come from ClickHouse only
//! (`latmesh_store::query::extras`); from memory the report says so.

pub mod analysis_html;
pub mod cache_html;
pub mod charts;
pub mod compat_html;
pub mod csv;
pub mod html;
pub mod model;
pub mod phases_html;
pub mod workloads_html;

use std::path::Path;

use anyhow::Context as _;

pub use model::{Extras, ReportModel};

use latmesh_results::report_data::ReportData;

/// Output format of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// One self-contained HTML page (inline CSS and SVG, no script, nothing fetched).
    Html,
    /// The report model as JSON.
    Json,
    /// One long CSV table (`section,scenario,region,provider,metric,stat,x,value`).
    Csv,
}

impl Format {
    /// `html`, `json` or `csv`.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Html => "html",
            Format::Json => "json",
            Format::Csv => "csv",
        }
    }
}

/// The analysis part of a report: its JSON (under `"analysis"`) and its HTML fragment.
struct AnalysisPart {
    json: serde_json::Value,
    html: String,
}

/// The one call site of the analysis module ([`latmesh_results::analysis`]): its JSON goes under
/// `"analysis"`, its HTML fragment into the "Analysis" section.
fn analysis(data: &ReportData) -> Option<AnalysisPart> {
    let a = latmesh_results::analysis::analyze(data);
    Some(AnalysisPart {
        json: serde_json::to_value(&a).ok()?,
        html: crate::analysis_html::ToHtml::to_html(&a),
    })
}

/// The report model of `data`, with its analysis; `source` names where the
/// data came from (`memory`, `clickhouse`), `extras` what only that source knows.
pub fn model(data: &ReportData, source: &str, extras: Extras) -> ReportModel {
    let mut m = ReportModel::build(data, source, extras);
    if let Some(a) = analysis(data) {
        m.analysis = Some(a.json);
        m.analysis_html = Some(a.html);
    }
    m
}

/// `m` rendered as `format`.
///
/// # Errors
/// JSON serialization failures (none expected).
pub fn render(m: &ReportModel, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Html => html::page(m),
        Format::Json => serde_json::to_string_pretty(m)? + "\n",
        Format::Csv => csv::render(m),
    })
}

/// Writes `m` as `format` to `path` (`-`: standard output), creating missing directories.
///
/// # Errors
/// The file cannot be written.
pub fn write(m: &ReportModel, format: Format, path: &Path) -> anyhow::Result<()> {
    let text = render(m, format)?;
    if path == Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
