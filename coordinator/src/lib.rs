//! The latmesh coordinator and CLI (binary `latmesh`): serves agents and the control API,
//! merges results across agents, prints the region × provider matrix, and runs the demo.
//!
//! `main.rs` only calls [`cli::run`], so tests drive the real CLI in-process.

pub use latmesh_report::analysis_html;
pub mod auth;
pub mod budget;
pub mod check;
pub mod cli;
pub mod cli_query;
pub use latmesh_store as clickhouse;
pub mod delivery;
pub mod demo;
pub mod events;
pub mod intake;
pub mod keys;
pub mod metrics;
pub mod peer_warn;
pub mod persist;
pub mod progress;
pub mod progress_pages;
pub mod report;
pub mod schedule;
pub mod schedule_cli;
pub mod service;
pub mod sink;
pub mod spool;
pub mod state;
pub mod tls_listener;
pub mod ui;
pub mod watch;
