//! The latmesh coordinator server: serves agents and the control API, merges results across
//! agents, spools them and writes them to ClickHouse. The `latmesh` binary and its commands
//! are the `latmesh-cli` crate.

pub mod aggregate;
pub mod analysis;
pub mod auth;
pub mod budget;
pub mod clickhouse;
pub mod delivery;
pub mod events;
pub mod failover_stats;
pub mod intake;
pub mod keys;
pub mod load_stats;
pub mod metrics;
pub mod model_stats;
pub mod peer_warn;
pub mod percentiles;
pub mod persist;
pub mod progress;
pub mod progress_pages;
pub mod report;
pub mod report_data;
pub mod saturation;
pub mod schedule;
pub mod seq_gaps;
pub mod service;
pub mod sink;
pub mod spool;
pub mod state;
pub mod summary;
pub mod sync;
pub mod tls_listener;
