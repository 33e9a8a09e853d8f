//! The coordinator's state: connected agents and running campaigns, split into the parts
//! that own them.
//!
//! Handlers in `service.rs` only unpack messages and call into here. Batches are
//! de-duplicated by (campaign, agent, seq) before merging, so a batch resent after a
//! reconnect is acked again but counted once. Series of scheduled runs are not part of the
//! state: [`crate::schedule::Scheduler`] drives them through this public API.
//!
//! # Parts
//!
//! - `agents`: connected agents, their hello (key variable names), sessions, liveness.
//! - `campaigns`: running campaigns, their plans and lifecycle (launch, cancel, deadline,
//!   budget guard).
//! - `intake`: a batch's acceptance into its campaign's aggregate (limits checked by
//!   [`crate::intake`], the validation boundary), done notices, refused batches.
//! - `publish`: progress and summary publication to watchers, and the store events queued
//!   for the sink.
//! - `restore`: the state directory: campaign records, batch logs, restart.
//!
//! # Locks
//!
//! Three mutexes, each owned by one part:
//!
//! | lock     | protects                                                                 |
//! |----------|--------------------------------------------------------------------------|
//! | `core`   | agents and campaigns (and the campaigns whose summary is being built)    |
//! | `dir`    | the state directory ([`StateDir`]): campaign records, batch logs, series |
//! | `events` | the [`StoreEvent`] queue for the sink                                    |
//!
//! **Ordering rule**: `core` first; `dir` or `events` may be taken while holding `core`, never
//! the other way round, and `dir` and `events` are never held together. No lock is held
//! across an `.await` (they are `std` mutexes, held for short sections only). Agents and
//! campaigns share one lock because launch, connect and publication read both atomically.
//!
//! The costly work runs without `core`: decoding a batch ([`State::check`]), and building and
//! serializing a finished campaign's summary: publication snapshots what the summary needs
//! under the lock, and the summary is built once the lock is released (see `publish.rs`), so a
//! large campaign's publication does not stall intake.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::events::EventQueue;
use crate::persist::StateDir;

mod agents;
#[cfg(test)]
mod budget_tests;
mod campaigns;
mod intake;
mod publish;
mod restore;
#[cfg(test)]
pub(crate) mod tests;

pub use crate::store_event::StoreEvent;
pub use agents::{AgentTx, DEFAULT_HEARTBEAT_MS, SILENT_HEARTBEATS};
pub use campaigns::{
    CANCEL_DEADLINE_US, CampaignBrief, DEADLINE_GRACE_US, LaunchOptions, Launched,
};
pub use intake::{CheckedBatch, check_off_runtime};

/// Now on the coordinator's wall clock, UTC µs.
pub fn now_unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Errors of state operations, turned into `Status` in `service.rs`.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No such campaign.
    #[error("unknown campaign {0:?}")]
    UnknownCampaign(String),
    /// A region of the plan has no connected agent.
    #[error("no connected agent in region {region:?} (connected: {connected})")]
    NoAgent {
        /// The region.
        region: String,
        /// Regions with connected agents.
        connected: String,
    },
    /// An agent of the plan's regions is still running another campaign.
    #[error(
        "agent {agent:?} is still running campaign {campaign:?}: launch again when it has finished"
    )]
    Busy {
        /// Agent id.
        agent: String,
        /// The running campaign.
        campaign: String,
    },
    /// The plan JSON does not parse.
    #[error("plan_json: {0}")]
    BadPlan(String),
    /// The campaign has already finished (e.g. cancelling it is too late).
    #[error("campaign {campaign:?} has already finished ({how}): nothing to cancel")]
    Finished {
        /// Campaign id.
        campaign: String,
        /// `complete`, `incomplete` or `cancelled`.
        how: String,
    },
    /// Targeted agents lack API key variables of the plan's providers (see
    /// [`crate::keys`]); the launch was not allowed to go on without them.
    #[error("{0}")]
    MissingKeys(String),
    /// The state directory cannot take the campaign's facts.
    #[error("state directory: {0}")]
    Storage(String),
    /// A batch from an agent does not decode.
    #[error("batch {seq} from {agent}: {message}")]
    BadBatch {
        /// Agent id.
        agent: String,
        /// Batch seq.
        seq: u64,
        /// What failed.
        message: String,
    },
}

/// Shared coordinator state (cheap to clone: a handle).
#[derive(Clone, Debug, Default)]
pub struct State {
    inner: Arc<Shared>,
}

/// The parts and their locks (see the module docs for the ordering rule).
#[derive(Debug, Default)]
struct Shared {
    core: Mutex<Core>,
    /// `Some` when campaigns persist in a state directory ([`State::with_state_dir`]).
    dir: Mutex<Option<StateDir>>,
    /// `Some` when a sink wants [`StoreEvent`]s.
    events: Mutex<Option<EventQueue>>,
}

/// What `core` protects.
#[derive(Debug, Default)]
struct Core {
    agents: agents::Agents,
    campaigns: campaigns::Campaigns,
    /// Campaigns that finished under this lock: their summaries are built once it is
    /// released ([`CoreGuard`]'s drop).
    finishing: Vec<publish::SummaryJob>,
}

/// `core`, locked. Dropping it releases the lock, then builds the summaries of the campaigns
/// that finished meanwhile and installs them (taking the lock again briefly).
struct CoreGuard<'a> {
    state: &'a State,
    guard: Option<MutexGuard<'a, Core>>,
}

impl std::ops::Deref for CoreGuard<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for CoreGuard<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for CoreGuard<'_> {
    fn drop(&mut self) {
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        let finishing = std::mem::take(&mut guard.finishing);
        drop(guard);
        // Not while unwinding from a panic under the lock (a panic in a build would abort).
        if !finishing.is_empty() && !std::thread::panicking() {
            self.state.finish(finishing);
        }
    }
}

/// A poisoned lock is taken over: the state stays usable after a panicking handler.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// The `core` lock (agents and campaigns).
    fn core(&self) -> CoreGuard<'_> {
        CoreGuard {
            state: self,
            guard: Some(lock(&self.inner.core)),
        }
    }

    /// The `dir` lock (the state directory); taken after `core` or alone.
    fn dir(&self) -> MutexGuard<'_, Option<StateDir>> {
        lock(&self.inner.dir)
    }

    /// The `events` lock (the store event queue); taken after `core` or alone.
    fn events(&self) -> MutexGuard<'_, Option<EventQueue>> {
        lock(&self.inner.events)
    }

    /// Queues `ev` for the sink when there is one.
    fn push_event(&self, ev: StoreEvent) {
        if let Some(events) = self.events().as_mut() {
            events.push(ev);
        }
    }
}
