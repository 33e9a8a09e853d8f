//! The three load models' schedulers (definitions in `latmesh_core::load`): each runs one
//! phase of a campaign from its start instant, handing logical requests to
//! [`PhaseCtx`](crate::runner::PhaseCtx) and returning once the last one was started
//! (requests still in flight finish during the next phase).
//!
//! * [`run_rounds`]: slot `i` of round `r` at phase start + `r × interval + i × gap`, each in
//!   its own task, in the order shared by every region.
//! * [`run_sweep`]: per step and provider, `concurrency` workers sending back to back until
//!   the step's end (or its `step_requests`), every provider stepping at the same instants.
//! * [`run_rate`]: every provider's arrivals at their intended instants, each in its own task
//!   whatever the earlier ones do (open loop); the provider's caps may hold an arrival back
//!   until its drop time (`max_queue_ms`), and `sched_lag` says how long.
//!
//! A slot whose time passed by more than `max_lateness` before the scheduler reached it (a
//! restarted agent) is counted as late and not sent; after a cancel nothing new starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use latmesh_core::load::{LoadKind, RateSpec, SweepSpec};
use latmesh_core::plan::Slot;

use crate::runner::{NotRun, PhaseCtx, SlotRef};

/// Sleeps until `at`; `false` when the campaign was cancelled first.
async fn sleep_until(ctx: &PhaseCtx, at: Instant) -> bool {
    tokio::select! {
        _ = tokio::time::sleep_until(at.into()) => true,
        _ = ctx.env.cancel.cancelled() => false,
    }
}

/// The rounds phase: every `rounds` scenario's slots.
pub async fn run_rounds(ctx: &PhaseCtx, phase_start: Instant) -> NotRun {
    let plan = &ctx.plan;
    let mut not_run = NotRun::default();
    for round in 0..plan.rounds.count {
        for (slot, s) in plan.round_order(round).into_iter().enumerate() {
            let intended = phase_start + Duration::from_micros(plan.probe_offset_us(round, slot));
            if ctx.outbox.ran_before(&ctx.campaign_id, round, slot as u32) {
                continue; // measured by this agent before a restart: neither rerun nor skipped
            }
            if ctx.env.cancel.cancelled_at().is_some() {
                not_run.cancelled += 1;
                continue;
            }
            if Instant::now().saturating_duration_since(intended) > ctx.max_lateness {
                not_run.late += 1;
                continue;
            }
            if !sleep_until(ctx, intended).await {
                not_run.cancelled += 1;
                continue;
            }
            ctx.spawn_slot(SlotRef::rounds(round, slot as u32, s, intended));
        }
    }
    not_run
}

/// A closed-loop sweep of scenario `scenario`. Nothing in it is planned slot by slot, so it
/// reports nothing as not run: steps already over when a restarted agent reaches them are
/// left out (logged), and a cancel stops the workers.
pub async fn run_sweep(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &SweepSpec,
    phase_start: Instant,
) -> NotRun {
    let step_len = Duration::from_millis(spec.step_ms);
    for (k, &concurrency) in spec.concurrency.iter().enumerate() {
        let step_start = phase_start + step_len * k as u32;
        let step_end = step_start + step_len;
        if ctx.env.cancel.cancelled_at().is_some() {
            break;
        }
        if Instant::now().saturating_duration_since(step_start) > ctx.max_lateness {
            tracing::warn!(campaign = %ctx.campaign_id, scenario = %ctx.plan.scenarios[scenario].name, step = k, "sweep step left out: its start had passed");
            continue;
        }
        if !sleep_until(ctx, step_start).await {
            break;
        }
        for provider in 0..ctx.plan.providers.len() {
            let sent = Arc::new(AtomicU32::new(0));
            for _ in 0..concurrency {
                let (ctx, sent) = (ctx.clone(), sent.clone());
                let step_requests = spec.step_requests;
                tokio::spawn(async move {
                    loop {
                        if Instant::now() >= step_end || ctx.env.cancel.cancelled_at().is_some() {
                            break;
                        }
                        let i = sent.fetch_add(1, Ordering::SeqCst);
                        if step_requests.is_some_and(|max| i >= max) {
                            break;
                        }
                        let at = SlotRef {
                            round: 0,
                            slot: i,
                            s: Slot { provider, scenario },
                            intended: Instant::now(),
                            load: LoadKind::Sweep,
                            step: k as u32,
                            concurrency,
                            drop_at: None,
                        };
                        ctx.run_slot(at).await;
                    }
                });
            }
        }
    }
    // Return at the phase's end, so the next phase starts on the shared schedule.
    let phase_end = phase_start + step_len * spec.concurrency.len() as u32;
    sleep_until(ctx, phase_end).await;
    NotRun::default()
}

/// An open-loop phase of scenario `scenario`: every provider's arrivals, merged in time.
pub async fn run_rate(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &RateSpec,
    phase_start: Instant,
) -> NotRun {
    let providers = ctx.plan.providers.len();
    let mut arrivals: Vec<(u64, usize, u32)> = Vec::new();
    for provider in 0..providers {
        let offsets = spec.arrivals_us(ctx.plan.seed, scenario, provider, providers);
        arrivals.extend(
            offsets
                .into_iter()
                .enumerate()
                .map(|(i, at)| (at, provider, i as u32)),
        );
    }
    arrivals.sort_unstable();
    let max_queue = Duration::from_millis(spec.max_queue_ms);
    // A restarted agent skips arrivals already too late to be sent or dropped on time.
    let too_late = ctx.max_lateness.max(max_queue);
    let mut not_run = NotRun::default();
    let mut lagging = 0u64;
    for (offset_us, provider, i) in arrivals {
        let intended = phase_start + Duration::from_micros(offset_us);
        if ctx.env.cancel.cancelled_at().is_some() {
            not_run.cancelled += 1;
            continue;
        }
        let late = Instant::now().saturating_duration_since(intended);
        if late > too_late {
            not_run.late += 1;
            continue;
        }
        lagging += u64::from(late > Duration::from_millis(10));
        if !sleep_until(ctx, intended).await {
            not_run.cancelled += 1;
            continue;
        }
        ctx.spawn_slot(SlotRef {
            round: 0,
            slot: i,
            s: Slot { provider, scenario },
            intended,
            load: LoadKind::Rate,
            step: 0,
            concurrency: 0,
            drop_at: Some(intended + max_queue),
        });
    }
    if lagging > 0 {
        tracing::warn!(
            campaign = %ctx.campaign_id,
            scenario = %ctx.plan.scenarios[scenario].name,
            arrivals_over_10ms_late = lagging,
            "open loop: the agent's scheduler fell behind its arrivals (sched_lag records how far)"
        );
    }
    let phase_end = phase_start + Duration::from_millis(spec.duration_ms);
    sleep_until(ctx, phase_end).await;
    not_run
}
