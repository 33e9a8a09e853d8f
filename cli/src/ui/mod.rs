//! Terminal rendering of results: every text table and line `latmesh` prints from a summary,
//! its sweeps, rates, rate steps and SLO searches, context tiers, failover rows, models,
//! budget and analysis, and the `query windows` and
//! `query trend` reports, one file per kind of table.
//! The data comes from the pure result modules (`summary`, `load_stats`, `failover_stats`,
//! `model_stats`, `analysis`); nothing here computes a figure.

pub mod agents;
pub mod analysis;
pub mod budget;
pub mod cache;
pub mod check;
pub mod compat;
pub mod failover;
pub mod matrix;
pub mod models;
pub mod progress;
pub mod rate;
pub mod series;
pub mod slo;
pub mod sweep;
pub mod tiers;
pub mod trend;
pub mod windows;

use comfy_table::{Cell as TCell, CellAlignment};

/// A latency in ms, compact: `1610`, `81.2`, `4.25`; `-` when missing.
pub(crate) fn ms_short(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A right-aligned table cell.
pub(crate) fn right(s: String) -> TCell {
    TCell::new(s).set_alignment(CellAlignment::Right)
}
