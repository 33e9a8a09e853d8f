//! The `latmesh` command line (binary `latmesh`): one module per command under [`cmd`], the
//! client of a coordinator's control API ([`watch`]) and all terminal rendering ([`ui`]).
//!
//! `main.rs` only calls [`cmd::run_with`], so tests drive the real CLI in-process. The server
//! itself (service, state, spool, sink) is the `latmesh-coordinator` crate.

pub mod check_report;
pub mod cmd;
pub mod exit_status;
pub mod ui;
pub mod watch;
pub mod webhook;

pub use cmd::{Cli, run_with};
