//! The latmesh coordinator server: serves agents and the control API, merges results across
//! agents, spools them and writes them to ClickHouse. The `latmesh` binary and its commands
//! are the `latmesh-cli` crate.

pub mod auth;
pub mod budget;
pub mod delivery;
pub mod events;
pub mod intake;
pub mod keys;
pub mod metrics;
pub mod peer_warn;
pub mod persist;
pub mod progress;
pub mod progress_pages;
pub mod schedule;
pub mod service;
pub mod sink;
pub mod spool;
pub mod state;
pub mod store_event;
pub mod store_health;
pub mod tls_listener;
