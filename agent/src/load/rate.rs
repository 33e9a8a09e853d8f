//! The rate load model (open loop): the scenario's arrivals at their intended instants, each
//! sent to every provider whatever the earlier ones do (see [`super`]).

use std::time::{Duration, Instant};

use latmesh_core::load::{LoadKind, RateSpec};
use latmesh_core::plan::Slot;

use crate::phase::{NotRun, PhaseCtx};
use crate::slot::SlotRef;

/// An open-loop phase of scenario `scenario`: the scenario's arrival sequence, each arrival
/// sent to every provider at the same intended instant, in [`RateSpec::send_order`].
pub async fn run_rate(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &RateSpec,
    phase_start: Instant,
) -> NotRun {
    let providers = ctx.plan.providers.len();
    let arrivals: Vec<(u64, usize, u32)> = spec
        .arrivals_us(ctx.plan.seed, scenario)
        .into_iter()
        .enumerate()
        .flat_map(|(i, at)| {
            RateSpec::send_order(i, providers).map(move |provider| (at, provider, i as u32))
        })
        .collect();
    let max_queue = Duration::from_millis(spec.max_queue_ms);
    let name = &ctx.plan.scenarios[scenario].name;
    let mut not_run = NotRun::default();
    let mut lagging = 0u64;
    // Per provider: its planned arrivals, and the index of the next one to reach.
    let mut planned = vec![0u32; providers];
    for &(_, provider, _) in &arrivals {
        planned[provider] += 1;
    }
    let mut next = vec![0u32; providers];
    // What a cancel leaves unrun, counted at once (as in `rounds_left`).
    let arrivals_left = |next: &[u32]| -> u64 {
        (0..providers)
            .map(|p| {
                u64::from(planned[p] - next[p]).saturating_sub(ctx.outbox.arrivals_ran_before_from(
                    &ctx.campaign_id,
                    name,
                    &ctx.plan.providers[p].name,
                    next[p],
                ))
            })
            .sum()
    };
    for (offset_us, provider, i) in arrivals {
        let intended = phase_start + Duration::from_micros(offset_us);
        let provider_name = &ctx.plan.providers[provider].name;
        if ctx.env.cancel.cancelled_at().is_some() {
            not_run.cancelled += arrivals_left(&next);
            break;
        }
        next[provider] = i + 1;
        if ctx
            .outbox
            .arrival_ran_before(&ctx.campaign_id, name, provider_name, i)
        {
            continue; // measured by this agent before a restart: neither resent nor skipped
        }
        // The scheduler itself more than `max_lateness` late (a restarted agent, a stopped
        // process): not sent, counted. Only a provider's caps may hold an arrival longer, up
        // to its drop time (`max_queue_ms`).
        let late = Instant::now().saturating_duration_since(intended);
        if late > ctx.max_lateness {
            not_run.late += 1;
            continue;
        }
        lagging += u64::from(late > Duration::from_millis(10));
        if !ctx.sleep_until(intended).await {
            next[provider] = i; // this one is not run either
            not_run.cancelled += arrivals_left(&next);
            break;
        }
        if Instant::now().saturating_duration_since(intended) > ctx.max_lateness {
            not_run.late += 1; // the process was stopped while it waited
            continue;
        }
        ctx.spawn_slot(SlotRef {
            round: 0,
            slot: i,
            s: Slot::new(provider, scenario),
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
    ctx.sleep_until(phase_end).await;
    not_run
}
