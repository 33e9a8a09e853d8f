//! The rounds load model: slot `i` of round `r` at phase start + `r × interval + i × gap`,
//! each in its own task, in the order shared by every region (see [`super`]).

use std::time::{Duration, Instant};

use crate::phase::{NotRun, PhaseCtx};
use crate::slot::SlotRef;

/// The rounds phase: every `rounds` scenario's slots. A cancel counts the slots left at
/// once ([`rounds_left`]), however many rounds remain.
pub async fn run_rounds(ctx: &PhaseCtx, phase_start: Instant) -> NotRun {
    let plan = &ctx.plan;
    let max_queue = Duration::from_millis(plan.rounds.max_queue_ms());
    let mut not_run = NotRun::default();
    for round in 0..plan.rounds.count {
        for (slot, s) in plan.round_order(round).into_iter().enumerate() {
            let intended = phase_start + Duration::from_micros(plan.probe_offset_us(round, slot));
            if ctx.env.cancel.cancelled_at().is_some() {
                not_run.cancelled += rounds_left(ctx, round, slot as u32);
                return not_run;
            }
            if ctx.outbox.ran_before(&ctx.campaign_id, round, slot as u32) {
                continue; // measured by this agent before a restart: neither rerun nor skipped
            }
            if Instant::now().saturating_duration_since(intended) > ctx.max_lateness {
                not_run.late += 1;
                continue;
            }
            if !ctx.sleep_until(intended).await {
                not_run.cancelled += rounds_left(ctx, round, slot as u32);
                return not_run;
            }
            if Instant::now().saturating_duration_since(intended) > ctx.max_lateness {
                not_run.late += 1; // the process was stopped while it waited
                continue;
            }
            // Behind its provider's caps a probe waits at most `max_queue_ms`, as an
            // open-loop arrival does: then it is recorded as dropped, not sent late.
            ctx.spawn_slot(SlotRef {
                drop_at: Some(intended + max_queue),
                ..SlotRef::rounds(round, slot as u32, s, intended)
            });
        }
    }
    not_run
}

/// The rounds slots from slot `slot` of round `round` on (in plan order) that this agent
/// has not measured before a restart: what a cancel there leaves unrun. Arithmetic plus the
/// journal, never a walk over the remaining slots (a 1,000,000-round campaign cancelled early
/// has millions: visiting each kept the agent's only thread from its heartbeats).
fn rounds_left(ctx: &PhaseCtx, round: u32, slot: u32) -> u64 {
    let per_round = ctx.plan.slots_per_round() as u64;
    let planned = u64::from(ctx.plan.rounds.count - round) * per_round - u64::from(slot);
    planned.saturating_sub(ctx.outbox.ran_before_from(&ctx.campaign_id, round, slot))
}
