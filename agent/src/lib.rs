//! The latmesh agent: keeps a session with the coordinator, estimates its clock offset, runs
//! the plan's rounds at the synchronized start, measures every probe, and sends numbered
//! result batches until each is acked.

pub mod batches;
pub mod clock;
pub mod limits;
pub mod load;
pub mod metrics;
pub mod outbox;
pub mod phase;
pub mod probe;
pub mod runner;
pub mod session;
pub mod shaping;
pub mod slot;
pub mod spool;
pub mod timer;
pub mod tls;

pub use session::{AgentConfig, run};
