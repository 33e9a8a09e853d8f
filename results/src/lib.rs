//! latmesh results: pure aggregation and statistics of campaign results, shared by the
//! coordinator (live summaries), the store (rows rebuilt from ClickHouse), reports and the
//! CLI. No I/O, no async, no terminal rendering: every function maps data to data (the
//! terminal tables are in the CLI's `ui` module, HTML in reports).
//!
//! * [`aggregate`]: counters and merged HDR histograms per (region, provider, scenario);
//! * [`summary`]: the region × provider matrix of a campaign and its JSON, made of
//!   [`matrix`] cells and [`agent_summary`] rows;
//! * [`load_stats`], [`failover_stats`], [`model_stats`]: sweep/rate rows with the knee and
//!   saturation, failover rows, what model answered;
//! * [`slo_stats`], [`tiers`], [`context_refusal`]: goodput, rate steps and the SLO search's
//!   answer; generated-prompt tiers and how providers count their tokens; which errors are
//!   refusals for the prompt's length;
//! * [`percentiles`], [`stats`], [`saturation`], [`sync`], [`seq_gaps`]: the statistics;
//! * [`report_data`], [`analysis`]: what a report is built from, intervals, comparisons,
//!   flags, ranks and the selection matrix;
//! * [`budget`], [`delivery`]: the budget and delivery parts of a summary;
//! * [`fixtures`]: plans, aggregates and summaries for tests (this crate's and renderers').

pub mod agent_summary;
pub mod aggregate;
pub mod analysis;
pub mod budget;
pub mod cache_share;
pub mod context_refusal;
pub mod delivery;
pub mod failover_stats;
pub mod fixtures;
pub mod load_stats;
pub mod matrix;
pub mod model_stats;
pub mod parity;
pub mod percentiles;
pub mod phase_hygiene;
pub mod report_data;
pub mod saturation;
pub mod seq_gaps;
pub mod slo_stats;
pub mod stats;
pub mod summary;
pub mod swap;
pub mod sync;
pub mod tiers;
