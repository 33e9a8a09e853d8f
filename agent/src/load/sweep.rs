//! The sweep load model (closed loop): per step and provider, `concurrency` workers sending
//! back to back until the step's end (see [`super`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use latmesh_core::load::{LoadKind, SweepSpec};
use latmesh_core::plan::Slot;

use crate::phase::{NotRun, PhaseCtx};
use crate::slot::SlotRef;

/// A closed-loop sweep of scenario `scenario`. Nothing in it is planned slot by slot, so its
/// unit of "not run" is the worker: a step whose start had passed when this process reached
/// it (a restarted agent) is left out, and counts its `concurrency` × providers workers as
/// late unless an earlier process of this agent ran it to its end (its journal has records
/// of a later step or a later phase); the step it stopped in and the steps it never reached
/// make the campaign incomplete. A cancel stops the workers.
pub async fn run_sweep(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &SweepSpec,
    phase_start: Instant,
) -> NotRun {
    let step_len = Duration::from_millis(spec.step_ms);
    let name = &ctx.plan.scenarios[scenario].name;
    let steps_before = ctx.outbox.sweep_steps_before(&ctx.campaign_id, name);
    let later_phase_before = ctx.plan.scenarios[scenario + 1..]
        .iter()
        .any(|s| ctx.outbox.scenario_ran_before(&ctx.campaign_id, &s.name));
    let mut not_run = NotRun::default();
    for (k, &concurrency) in spec.concurrency.iter().enumerate() {
        let step_start = phase_start + step_len * k as u32;
        let step_end = step_start + step_len;
        if ctx.env.cancel.cancelled_at().is_some() {
            break;
        }
        if Instant::now().saturating_duration_since(step_start) > ctx.max_lateness {
            let finished_before =
                later_phase_before || steps_before.iter().any(|&s| s as usize > k);
            if !finished_before {
                let workers = u64::from(concurrency) * ctx.plan.providers.len() as u64;
                not_run.late += workers;
                tracing::warn!(campaign = %ctx.campaign_id, scenario = %name, step = k, workers, "sweep step not run: its start had passed (its workers count as skipped)");
            }
            continue;
        }
        if !ctx.sleep_until(step_start).await {
            break;
        }
        if Instant::now().saturating_duration_since(step_start) > ctx.max_lateness {
            // The process was stopped while it waited: the step's time has (mostly) passed,
            // and running it now would overlap the next one.
            let workers = u64::from(concurrency) * ctx.plan.providers.len() as u64;
            not_run.late += workers;
            tracing::warn!(campaign = %ctx.campaign_id, scenario = %name, step = k, workers, "sweep step not run: the agent woke too late for it (its workers count as skipped)");
            continue;
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
                            s: Slot::new(provider, scenario),
                            intended: Instant::now(),
                            load: LoadKind::Sweep,
                            step: k as u32,
                            concurrency,
                            target_rps: 0.0,
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
    ctx.sleep_until(phase_end).await;
    not_run
}
