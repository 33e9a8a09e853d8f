//! What every phase of one campaign run shares ([`PhaseCtx`]), what a phase did not run
//! ([`NotRun`]): the context the runner hands to each load model's scheduler
//! ([`crate::load`]), which starts its slots ([`crate::slot`]) through it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latmesh_core::plan::Plan;

use crate::drain::InFlight;
use crate::outbox::Outbox;
use crate::probe::Prober;
use crate::slot::{RecordTx, SlotEnv, SlotRef, run_slot_with};
use crate::timer::precise_sleep_until;

/// What every phase of one campaign run shares.
#[derive(Clone)]
pub struct PhaseCtx {
    /// Campaign id.
    pub campaign_id: String,
    /// The plan.
    pub plan: Arc<Plan>,
    /// The probe engine.
    pub prober: Arc<Prober>,
    /// Where records go (the run's collector).
    pub tx: RecordTx,
    /// Cancel switch, grace, in-flight counter and limiters.
    pub env: SlotEnv,
    /// The outbox (which `rounds` slots ran before a restart).
    pub outbox: Outbox,
    /// A slot whose time passed by more than this is skipped.
    pub max_lateness: Duration,
    /// Turns not sent because an earlier turn of their conversation failed.
    pub turns_not_sent: Arc<std::sync::atomic::AtomicU64>,
    /// Each provider's logical requests of this run in flight, any phase (the drain wait
    /// before each phase, [`crate::drain`]).
    pub in_flight: Arc<InFlight>,
}

impl PhaseCtx {
    /// Runs `at` in its own task.
    pub fn spawn_slot(&self, at: SlotRef) {
        let ctx = self.clone();
        tokio::spawn(async move { ctx.run_slot(at).await });
    }

    /// Runs `at` here (a sweep worker's request), counted in flight for its provider until
    /// it ends.
    pub async fn run_slot(&self, at: SlotRef) {
        let _in_flight = self.in_flight.start(at.s.provider);
        let done = run_slot_with(&self.plan, at, &self.prober, &self.tx, &self.env).await;
        self.turns_not_sent.fetch_add(
            u64::from(done.turns_not_sent),
            std::sync::atomic::Ordering::SeqCst,
        );
    }

    /// Sleeps until `at` ([`precise_sleep_until`]); `false` when the campaign was cancelled
    /// first.
    pub async fn sleep_until(&self, at: Instant) -> bool {
        tokio::select! {
            _ = precise_sleep_until(at) => true,
            _ = self.env.cancel.cancelled() => false,
        }
    }
}

/// Planned slots a phase did not run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotRun {
    /// Their time had passed by more than `max_lateness` (e.g. after a restart).
    pub late: u64,
    /// The campaign was cancelled before them.
    pub cancelled: u64,
}
