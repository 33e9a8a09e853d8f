//! latmesh's end-to-end tests, one binary: one module per concern (the former
//! `tests/tests/*.rs` binaries), test names prefixed by their module (`chaos::…`). The support
//! code (stack launcher, raw agent, ClickHouse helpers) is the `latmesh-testkit` crate.
//!
//! `scripts/test.sh` runs them under cargo-nextest (`.config/nextest.toml`: one process per
//! test; the ClickHouse-bound tests in a group of two at a time, the chaos and real-server tests
//! one at a time). Plain `cargo test` runs them too, on the threads of one process: each
//! module's own locks (chaos, llama_timings) still hold, but only nextest keeps those tests
//! apart from the other modules' tests.

mod accuracy;
mod auth;
mod cancel;
mod chaos;
mod chaos_coordinator;
mod check;
mod clickhouse;
mod clickhouse_sink;
mod clickhouse_slo;
mod clickhouse_stall;
mod compat;
mod compat_store;
mod demo;
mod distributed;
mod exit_status;
mod grafana;
mod hostile_agent;
mod hostile_provider;
mod launch_checks;
mod llama_timings;
mod load_models;
mod local_stack;
mod metrics;
mod phase_hygiene;
mod probe_cli;
mod quarantine;
mod real_servers;
mod real_servers_compat;
mod real_servers_context;
mod report;
mod schedule;
mod sse_cases;
mod windows;
mod workloads;
