//! The three load models' schedulers, one file each (definitions in `latmesh_core::load`): each runs one
//! phase of a campaign from its start instant, handing logical requests to
//! [`PhaseCtx`](crate::phase::PhaseCtx) and returning once the last one was started
//! (requests still in flight finish in the drain allowance before the next phase, which the
//! runner waits for and flags when it ends first: [`crate::drain`]).
//!
//! * [`run_rounds`]: slot `i` of round `r` at phase start + `r × interval + i × gap`, each in
//!   its own task, in the order shared by every region; the provider's caps may hold a probe
//!   back until its drop time (`RoundsSpec::max_queue_ms`: 10 s or the interval, whichever is
//!   shorter), after which it is recorded as `dropped`, so rounds stay in step.
//! * [`run_sweep`]: per step and provider, `concurrency` workers sending back to back until
//!   the step's end (or its `step_requests`), every provider stepping at the same instants.
//! * [`run_rate`]: the scenario's arrivals at their intended instants, each sent to every
//!   provider (the same instants for all, and in every region), each in its own task whatever
//!   the earlier ones do (open loop), in steps of increasing rate ([`rate`]); the provider's
//!   caps may hold an arrival back until its drop time (`max_queue_ms`), and `sched_lag` says
//!   how long. Under an SLO search each provider's rate per step is chosen from its own step
//!   verdicts ([`search`], [`verdict`]).
//!
//! A slot whose time passed by more than `max_lateness` before the scheduler reached it (a
//! restarted agent), or by the time its wait ended (a stopped process), is counted as late
//! and not sent; what an earlier process of this agent measured (its spool's journal) is
//! neither sent again nor counted; after a cancel nothing new starts.

pub mod rate;
pub mod rounds;
pub mod search;
pub mod sweep;
#[cfg(test)]
mod tests;
pub mod verdict;

pub use rate::run_rate;
pub use rounds::run_rounds;
pub use sweep::run_sweep;
