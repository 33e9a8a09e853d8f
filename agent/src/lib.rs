//! The latmesh agent: keeps a session with the coordinator, estimates its clock offset, runs
//! the plan's rounds at the synchronized start, measures every probe, and sends numbered
//! result batches until each is acked.
//!
//! # Where things are
//! * the session with the coordinator, its batches and spool: `session`, `outbox`,
//!   `batches`, `spool`, `tls`, `metrics`;
//! * a campaign run: [`runner`] (start, phases, the collector sealing batches), [`load`]
//!   (one scheduler per load model: rounds, sweep, rate), [`phase`] (what the phases share),
//!   [`slot`] (one logical request: turns, attempts, retries, failover), [`limits`] and
//!   [`shaping`] (per-provider caps and request shape), [`clock`], [`timer`];
//! * the probe engine: [`probe`] (one request, measured per docs/metrics.md; TTFT/ITL are
//!   stamped in `probe/measure/tokens.rs`, the body's bytes enter in `probe/measure/body.rs`);
//! * compatibility checks and the quality set, run per provider through the probe engine:
//!   [`compat`], [`quality`].

pub mod batches;
pub mod clock;
pub mod compat;
pub mod drain;
pub mod limits;
pub mod load;
pub mod metrics;
pub mod outbox;
pub mod phase;
pub mod probe;
pub mod quality;
pub mod runner;
pub mod session;
pub mod shaping;
pub mod slot;
pub mod spool;
pub mod timer;
pub use latmesh_rpc::tls;

pub use session::{AgentConfig, run};
