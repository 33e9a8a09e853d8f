//! Runs one campaign's plan: waits for the synchronized start, runs the plan's phases one
//! after another, each with its load model's scheduler ([`crate::load`]), before each but the
//! first waiting for the earlier phases' requests to end up to its planned start (and flagging
//! it when they did not: [`crate::drain`]), and seals numbered batches of what was measured
//! into the [`Outbox`] ([`collect`]).
//!
//! Probe `i` of round `r` is intended at `start + r × interval + i × gap` (see
//! `latmesh_core::plan`). Probes are spawned at their intended time and may overlap, so a slow
//! provider never delays the next probe; `sched_lag_us` records how late each one left.
//!
//! What one slot does (attempts, retries, turns, cache nonce, cancel) is [`crate::slot`].

pub mod collect;

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use latmesh_core::clock::ClockEstimate;
use latmesh_core::load::{LoadModel, PhaseKind};
use latmesh_core::plan::Plan;
use latmesh_core::record::ProbeRecord;
use latmesh_proto::pb;
use tokio::sync::{mpsc, watch};

use crate::clock::local_instant_of;
use crate::drain::{InFlight, PhaseFlags};
use crate::limits::Limiters;
use crate::load;
use crate::outbox::Outbox;
use crate::phase::{NotRun, PhaseCtx};
use crate::probe::Prober;
use crate::slot::{SlotEnv, SynthPrompts};

/// The agent's wall clock (re-exported for the session: [`crate::clock`]).
pub use crate::clock::now_unix_us;
/// A campaign's cancel switch (re-exported for the session: [`crate::slot::Cancel`]).
pub use crate::slot::Cancel;

/// One campaign to run.
#[derive(Clone, Debug)]
pub struct CampaignRun {
    /// Campaign id from the coordinator.
    pub campaign_id: String,
    /// The plan.
    pub plan: Arc<Plan>,
    /// Round 0 start on the coordinator's clock, UTC µs.
    pub start_at_coord_unix_us: i64,
    /// Seq of the first batch this run seals (the coordinator's `next_seq`: past every batch
    /// it already has from this agent, e.g. from before a restart).
    pub first_seq: u64,
    /// Cancels the run ([slot documentation](crate::slot#cancel-cancel)).
    pub cancel: Cancel,
    /// Agents the plan went to (politeness caps are split between them; at least 1).
    pub agents: u32,
}

/// Settings of the runner.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// How often a batch is sealed while probes complete.
    pub flush_interval: Duration,
    /// How long to wait for a first clock estimate before starting without one.
    pub clock_wait: Duration,
    /// A probe whose intended time passed by more than this is skipped, not sent late (it
    /// would no longer be synchronized with the other regions): e.g. the rounds already
    /// past when a restarted agent receives its plan again.
    pub max_lateness: Duration,
    /// After a cancel, how long attempts in flight may still run before they are aborted
    /// (and recorded as aborted).
    pub cancel_grace: Duration,
    /// Attempts in flight right now, over every campaign (heartbeats report it).
    pub in_flight: Arc<AtomicU32>,
    /// Prometheus metrics of the agent ([`crate::metrics`]): every collected record counts.
    pub metrics: crate::metrics::AgentMetrics,
    /// The agent's region (the session sets it): part of every generated prompt's request
    /// key, so two regions' texts differ (only in their header words).
    pub region: String,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            flush_interval: Duration::from_millis(1000),
            clock_wait: Duration::from_secs(3),
            max_lateness: Duration::from_secs(1),
            cancel_grace: Duration::from_secs(2),
            in_flight: Arc::default(),
            metrics: Default::default(),
            region: String::new(),
        }
    }
}

/// How long before the synchronized start the runner converts `start_at` again with the
/// clock estimate of that moment.
pub const CLOCK_REFRESH_BEFORE_START: Duration = Duration::from_millis(300);

/// Runs `run` to completion (or until it is cancelled) and returns the number of probes made.
///
/// Waits for a clock estimate, converts `start_at` to a local instant with it, sleeps until
/// then and notes when it actually woke (on the coordinator's clock: the synchronized start
/// reported in the done notice), then runs the plan's phases one after another
/// ([`crate::load`]).
pub async fn run_campaign(
    run: CampaignRun,
    prober: Arc<Prober>,
    mut clock: watch::Receiver<Option<ClockEstimate>>,
    outbox: Outbox,
    cfg: RunnerConfig,
) -> u64 {
    let cancel = run.cancel.clone();
    tokio::select! {
        _ = tokio::time::timeout(cfg.clock_wait, clock.wait_for(Option::is_some)) => {}
        _ = cancel.cancelled() => {}
    }
    let mut estimate = clock.borrow().unwrap_or_default();
    if estimate.samples == 0 {
        tracing::warn!(campaign = %run.campaign_id, "starting without a clock estimate: start may be skewed");
    }
    let mut start = local_instant_of(run.start_at_coord_unix_us, estimate.offset_us);
    // The session pings the coordinator in a burst when a plan arrives: shortly before the
    // start, convert `start_at` again with the best estimate by then.
    if let Some(refresh) = start.checked_sub(CLOCK_REFRESH_BEFORE_START)
        && refresh > Instant::now()
    {
        tokio::select! {
            _ = tokio::time::sleep_until(refresh.into()) => {}
            _ = cancel.cancelled() => {}
        }
        if let Some(e) = *clock.borrow() {
            estimate = e;
            start = local_instant_of(run.start_at_coord_unix_us, estimate.offset_us);
        }
    }
    tracing::info!(
        campaign = %run.campaign_id,
        offset_us = estimate.offset_us,
        uncertainty_us = estimate.uncertainty_us,
        starts_in_ms = start.saturating_duration_since(Instant::now()).as_millis() as u64,
        "campaign received"
    );
    warn_missing_keys(&run.plan);

    // Generated prompts: each tier's text built once, before the start (not in a request's
    // path).
    let synth = Arc::new(SynthPrompts::default());
    synth.prepare(&run.plan);
    let (tx, rx) = mpsc::channel::<(ProbeRecord, Vec<u64>)>(1024);
    let flags = Arc::new(PhaseFlags::default());
    let collector = tokio::spawn(collect::collect(
        run.campaign_id.clone(),
        rx,
        outbox.clone(),
        cfg.flush_interval,
        run.first_seq.max(1),
        cfg.metrics.clone(),
        flags.clone(),
    ));
    let started_coord_unix_us = tokio::select! {
        _ = crate::timer::precise_sleep_until(start) => now_unix_us() + estimate.offset_us,
        _ = cancel.cancelled() => 0,
    };
    // An agent that joins after the start (restarted, or a plan that came late) took no part
    // in the synchronized start: it reports none, so the start skew is the others'.
    let joined_late = Instant::now().saturating_duration_since(start) > cfg.max_lateness;
    let started_coord_unix_us = if joined_late {
        tracing::info!(campaign = %run.campaign_id, "joined the campaign after its start: what has passed is skipped, and its start is left out of the start skew");
        0
    } else {
        started_coord_unix_us
    };
    let ctx = PhaseCtx {
        campaign_id: run.campaign_id.clone(),
        plan: run.plan.clone(),
        prober,
        tx,
        env: SlotEnv {
            cancel: cancel.clone(),
            cancel_grace: cfg.cancel_grace,
            in_flight: cfg.in_flight.clone(),
            limits: Arc::new(Limiters::new(&run.plan, run.agents)),
            shaping: Arc::new(crate::shaping::Shaping::new(&run.plan)),
            region: Arc::from(cfg.region.as_str()),
            synth,
        },
        outbox: outbox.clone(),
        max_lateness: cfg.max_lateness,
        turns_not_sent: Arc::default(),
        in_flight: Arc::new(InFlight::new(run.plan.providers.len())),
    };
    let mut not_run = NotRun::default();
    for (k, phase) in run.plan.phases().into_iter().enumerate() {
        let phase_start = start + Duration::from_micros(phase.start_us);
        if k > 0 && !joined_late {
            drain_before(&ctx, &flags, phase.kind, phase_start).await;
        }
        let n = match phase.kind {
            PhaseKind::Rounds => load::run_rounds(&ctx, phase_start).await,
            PhaseKind::Scenario(i) => match &run.plan.scenarios[i].load {
                LoadModel::Sweep(spec) => load::run_sweep(&ctx, i, spec, phase_start).await,
                LoadModel::Rate(spec) => load::run_rate(&ctx, i, spec, phase_start).await,
                LoadModel::Rounds => NotRun::default(),
            },
        };
        not_run.late += n.late;
        not_run.cancelled += n.cancelled;
    }
    let turns_not_sent = ctx.turns_not_sent.clone();
    drop(ctx);
    if not_run.late > 0 {
        tracing::warn!(campaign = %run.campaign_id, skipped = not_run.late, "probes skipped: their time had passed");
    }
    if not_run.cancelled > 0 {
        tracing::warn!(campaign = %run.campaign_id, not_run = not_run.cancelled, "campaign cancelled: slots not run, reported as skipped");
    }
    let skipped = not_run.late + not_run.cancelled;
    let (last_seq, probes) = collector.await.unwrap_or((0, 0));
    let turns_not_sent = turns_not_sent.load(std::sync::atomic::Ordering::SeqCst);
    if turns_not_sent > 0 {
        tracing::info!(campaign = %run.campaign_id, turns_not_sent, "conversation turns not sent: an earlier turn of their conversation failed");
    }
    outbox.push_done(pb::CampaignDone {
        campaign_id: run.campaign_id.clone(),
        last_seq,
        probes,
        skipped,
        started_coord_unix_us,
        clock_offset_us: estimate.offset_us,
        clock_uncertainty_us: estimate.uncertainty_us,
        // Filled from the outbox's quarantine each time the notice is sent.
        ..Default::default()
    });
    let cancelled = cancel.cancelled_at().is_some();
    tracing::info!(campaign = %run.campaign_id, probes, skipped, last_seq, cancelled, "campaign finished");
    probes
}

/// The drain wait before a phase (`crate::drain`): waits for every provider's requests of
/// earlier phases to end, up to `phase_start`; when some are still in flight then, logs it
/// and flags the phase's records of those providers (`phase_start_in_flight`).
async fn drain_before(ctx: &PhaseCtx, flags: &PhaseFlags, kind: PhaseKind, phase_start: Instant) {
    let waited = Instant::now();
    let left = tokio::select! {
        left = ctx.in_flight.drained_by(phase_start) => left,
        _ = ctx.env.cancel.cancelled() => return,
    };
    let plan = &ctx.plan;
    let scenarios: Vec<&str> = match kind {
        PhaseKind::Rounds => plan
            .rounds_scenarios()
            .into_iter()
            .map(|s| plan.scenarios[s].name.as_str())
            .collect(),
        PhaseKind::Scenario(i) => vec![plan.scenarios[i].name.as_str()],
    };
    let loaded: Vec<String> = left
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(p, n)| format!("{} {n}", plan.providers[p].name))
        .collect();
    if loaded.is_empty() {
        tracing::debug!(
            campaign = %ctx.campaign_id,
            phase = %scenarios.join(", "),
            drained_in_ms = waited.elapsed().as_millis() as u64,
            "earlier phases' requests all ended before the phase's start"
        );
        return;
    }
    for (p, n) in left.iter().enumerate().filter(|(_, n)| **n > 0) {
        for s in &scenarios {
            flags.set(s, &plan.providers[p].name, *n);
        }
    }
    tracing::warn!(
        campaign = %ctx.campaign_id,
        phase = %scenarios.join(", "),
        "phase starts with providers still loaded: the drain allowance ended with their requests of earlier phases in flight ({}); their records of this phase carry phase_start_in_flight",
        loaded.join(", ")
    );
}

/// Warns, once per run, of every provider whose API key variable is unset or unreadable.
fn warn_missing_keys(plan: &Plan) {
    for p in &plan.providers {
        if let Some(name) = &p.api_key_env {
            match crate::probe::request::api_key_from_env(name) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::warn!(provider = %p.name, env = %name, "API key variable is not set on this agent; requests go without Authorization")
                }
                Err(e) => {
                    tracing::warn!(provider = %p.name, "{e}; requests go without Authorization")
                }
            }
        }
    }
}
