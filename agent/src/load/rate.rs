//! The rate load model (open loop): the scenario's arrivals at their intended instants, each
//! sent whatever the earlier ones do (see [`super`]), in steps.
//!
//! The phase has [`RateSpec::step_count`] steps of `duration_ms` each; step `k` starts at
//! phase start + `k × duration`. A fixed rate sweep (`rps = [2, 4, 8]`, or one rate) sends
//! every provider step `k`'s arrivals at [`RateSpec::step_rps`]`(k)`; an SLO search
//! ([`super::search`]) gives each provider its own rate per step. A provider's arrivals of
//! step `k` at rate `r` are [`RateSpec::arrivals_at`]`(seed, scenario, k, r)`, the same on
//! every agent; providers at the same instant are sent in rotating order (as
//! [`RateSpec::send_order`]). An arrival's `slot` is its index among its provider's arrivals
//! over the whole phase (every step), which is also its spool journal key: a restarted agent
//! neither resends nor counts what an earlier process measured, in any step.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use latmesh_core::load::{LoadKind, RateSpec};
use latmesh_core::plan::Slot;

use crate::phase::{NotRun, PhaseCtx};
use crate::probe::progress;
use crate::slot::SlotRef;

/// A fixed-rate open-loop phase of scenario `scenario` (one step, or a rate sweep); an SLO
/// search runs [`super::search::run_search`].
pub async fn run_rate(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &RateSpec,
    phase_start: Instant,
) -> NotRun {
    if let Some(search) = &spec.search {
        return super::search::run_search(ctx, scenario, spec, search, phase_start).await;
    }
    let providers = ctx.plan.providers.len();
    let seed = ctx.plan.seed;
    let mut sender = Sender::new(ctx, scenario, spec, phase_start);
    // Every provider is planned every step's arrivals (O(1) per step but for gamma gaps).
    for k in 0..spec.step_count() {
        let n = spec
            .step_rps(k)
            .map_or(0, |r| spec.count_at(seed, scenario, k, r));
        for p in 0..providers {
            sender.planned[p] = sender.planned[p].saturating_add(n as u32);
        }
    }
    let mut first_slot = vec![0u32; providers];
    for k in 0..spec.step_count() {
        let rates = vec![spec.step_rps(k); providers];
        let arrivals = step_arrivals(spec, seed, scenario, k, &rates, &first_slot);
        for a in &arrivals {
            first_slot[a.provider] = first_slot[a.provider].max(a.slot + 1);
        }
        if !sender.send(&arrivals, |_, _| None).await {
            break;
        }
    }
    sender.finish().await
}

/// One arrival of a step for one provider.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Arrival {
    /// Intended send time, µs from the phase start.
    pub(super) offset_us: u64,
    /// Index into the plan's providers.
    pub(super) provider: usize,
    /// Index among the provider's arrivals over the whole phase.
    pub(super) slot: u32,
    /// Step, 0-based.
    pub(super) step: u32,
    /// The step's rate for this provider, requests/s.
    pub(super) rps: f64,
}

/// The arrivals of step `step` of every provider `p` at `rates[p]` (`None`: it sends none),
/// its slots numbered from `first_slot[p]`, in send order: by instant, then slot, then the
/// rotation of [`RateSpec::send_order`] (provider `slot mod providers` first).
pub(super) fn step_arrivals(
    spec: &RateSpec,
    seed: u64,
    scenario: usize,
    step: u32,
    rates: &[Option<f64>],
    first_slot: &[u32],
) -> Vec<Arrival> {
    let n = rates.len().max(1);
    let step_us = spec.step_start_us(step);
    let mut out = Vec::new();
    // Providers at the same rate share one sequence: generated once.
    let mut last: Option<(f64, Vec<u64>)> = None;
    for (p, rate) in rates.iter().enumerate() {
        let Some(rps) = *rate else { continue };
        if last
            .as_ref()
            .is_none_or(|(r, _)| r.to_bits() != rps.to_bits())
        {
            last = Some((rps, spec.arrivals_at(seed, scenario, step, rps)));
        }
        let offsets = &last.as_ref().expect("set above").1;
        out.extend(offsets.iter().enumerate().map(|(i, &at)| Arrival {
            offset_us: step_us.saturating_add(at),
            provider: p,
            slot: first_slot[p].saturating_add(i as u32),
            step,
            rps,
        }));
    }
    out.sort_by_key(|a| {
        (
            a.offset_us,
            a.slot,
            (a.provider + n - a.slot as usize % n) % n,
        )
    });
    out
}

/// Sends a phase's arrivals step after step, keeping what was not run.
pub(super) struct Sender<'a> {
    ctx: &'a PhaseCtx,
    scenario: usize,
    phase_start: Instant,
    phase_end: Instant,
    max_queue: Duration,
    /// Per provider: its arrivals planned so far (the whole phase's for fixed steps; up to
    /// the current step under a search).
    pub(super) planned: Vec<u32>,
    /// Per provider: the slot after the last one reached.
    next: Vec<u32>,
    not_run: NotRun,
    lagging: u64,
}

impl<'a> Sender<'a> {
    pub(super) fn new(
        ctx: &'a PhaseCtx,
        scenario: usize,
        spec: &RateSpec,
        phase_start: Instant,
    ) -> Sender<'a> {
        let providers = ctx.plan.providers.len();
        Sender {
            ctx,
            scenario,
            phase_start,
            phase_end: phase_start + Duration::from_micros(spec.span_us()),
            max_queue: Duration::from_millis(spec.max_queue_ms),
            planned: vec![0; providers],
            next: vec![0; providers],
            not_run: NotRun::default(),
            lagging: 0,
        }
    }

    /// The planned arrivals not reached and not measured by an earlier process: what a
    /// cancel now leaves unrun (arithmetic plus the journal, as `rounds_left`).
    fn arrivals_left(&self) -> u64 {
        let name = &self.ctx.plan.scenarios[self.scenario].name;
        (0..self.planned.len())
            .map(|p| {
                u64::from(self.planned[p].saturating_sub(self.next[p])).saturating_sub(
                    self.ctx.outbox.arrivals_ran_before_from(
                        &self.ctx.campaign_id,
                        name,
                        &self.ctx.plan.providers[p].name,
                        self.next[p],
                    ),
                )
            })
            .sum()
    }

    /// Counts what is left as cancelled, once.
    fn cancelled(&mut self) {
        self.not_run.cancelled += self.arrivals_left();
        self.planned.clone_from(&self.next);
    }

    /// Sends `arrivals` (in order) at their instants, each slot in its own task; `spawned`
    /// sees each arrival sent and its intended instant, and may give a flag the slot's task
    /// sets once its attempt has its first token ([`progress::watch_first_token`]). `false`
    /// when the campaign was cancelled (what is left of the planned arrivals is then counted).
    pub(super) async fn send(
        &mut self,
        arrivals: &[Arrival],
        mut spawned: impl FnMut(&Arrival, Instant) -> Option<Arc<AtomicBool>>,
    ) -> bool {
        let ctx = self.ctx;
        let name = &ctx.plan.scenarios[self.scenario].name;
        for a in arrivals {
            let intended = self.phase_start + Duration::from_micros(a.offset_us);
            let provider_name = &ctx.plan.providers[a.provider].name;
            if ctx.env.cancel.cancelled_at().is_some() {
                self.cancelled();
                return false;
            }
            self.next[a.provider] = a.slot + 1;
            if ctx
                .outbox
                .arrival_ran_before(&ctx.campaign_id, name, provider_name, a.slot)
            {
                continue; // measured by this agent before a restart: neither resent nor skipped
            }
            // The scheduler itself more than `max_lateness` late (a restarted agent, a stopped
            // process): not sent, counted. Only a provider's caps may hold an arrival longer,
            // up to its drop time (`max_queue_ms`).
            let late = Instant::now().saturating_duration_since(intended);
            if late > ctx.max_lateness {
                self.not_run.late += 1;
                continue;
            }
            self.lagging += u64::from(late > Duration::from_millis(10));
            if !ctx.sleep_until(intended).await {
                self.next[a.provider] = a.slot; // this one is not run either
                self.cancelled();
                return false;
            }
            if Instant::now().saturating_duration_since(intended) > ctx.max_lateness {
                self.not_run.late += 1; // the process was stopped while it waited
                continue;
            }
            let first_token = spawned(a, intended);
            let at = SlotRef {
                round: 0,
                slot: a.slot,
                s: Slot::new(a.provider, self.scenario),
                intended,
                load: LoadKind::Rate,
                step: a.step,
                concurrency: 0,
                target_rps: a.rps,
                drop_at: Some(intended + self.max_queue),
            };
            match first_token {
                Some(flag) => {
                    let ctx = ctx.clone();
                    tokio::spawn(progress::watch_first_token(flag, async move {
                        ctx.run_slot(at).await
                    }));
                }
                None => ctx.spawn_slot(at),
            }
        }
        true
    }

    /// Sleeps until `at`; `false` when the campaign was cancelled first (what is left is
    /// then counted).
    pub(super) async fn sleep_until(&mut self, at: Instant) -> bool {
        if self.ctx.sleep_until(at).await {
            return true;
        }
        self.cancelled();
        false
    }

    /// Adds skipped slots to what the phase did not run.
    pub(super) fn add_late(&mut self, n: u64) {
        self.not_run.late += n;
    }

    /// Logs the lag, waits for the phase's end (the next phase starts on the shared
    /// schedule) and returns what was not run.
    pub(super) async fn finish(self) -> NotRun {
        let ctx = self.ctx;
        if self.lagging > 0 {
            tracing::warn!(
                campaign = %ctx.campaign_id,
                scenario = %ctx.plan.scenarios[self.scenario].name,
                arrivals_over_10ms_late = self.lagging,
                "open loop: the agent's scheduler fell behind its arrivals (sched_lag records how far)"
            );
        }
        ctx.sleep_until(self.phase_end).await;
        self.not_run
    }
}

#[cfg(test)]
mod tests {
    use latmesh_core::load::{Arrivals, DEFAULT_MAX_QUEUE_MS};

    use super::*;

    fn spec() -> RateSpec {
        RateSpec {
            rps: 2.0,
            arrivals: Arrivals::Constant,
            duration_ms: 1_000,
            max_queue_ms: DEFAULT_MAX_QUEUE_MS,
            steps_rps: vec![2.0, 4.0],
            search: None,
        }
    }

    /// Providers at the same rate share the instants, sent in rotating order; step 1's
    /// arrivals are offset by one step and numbered after step 0's.
    #[test]
    fn step_arrivals_rotate_providers_and_number_slots_over_the_phase() {
        let s = spec();
        let a = step_arrivals(&s, 1, 0, 0, &[Some(2.0), Some(2.0)], &[0, 0]);
        let got: Vec<(u64, usize, u32)> = a
            .iter()
            .map(|a| (a.offset_us, a.provider, a.slot))
            .collect();
        assert_eq!(
            got,
            [(0, 0, 0), (0, 1, 0), (500_000, 1, 1), (500_000, 0, 1)]
        );
        let b = step_arrivals(&s, 1, 0, 1, &[Some(4.0), None], &[2, 2]);
        let got: Vec<(u64, usize, u32, u32)> = b
            .iter()
            .map(|a| (a.offset_us, a.provider, a.slot, a.step))
            .collect();
        assert_eq!(
            got,
            [
                (1_000_000, 0, 2, 1),
                (1_250_000, 0, 3, 1),
                (1_500_000, 0, 4, 1),
                (1_750_000, 0, 5, 1)
            ]
        );
        assert!(b.iter().all(|a| a.rps == 4.0));
        // Different rates in one step: each provider its own sequence, merged by instant.
        let c = step_arrivals(&s, 1, 0, 0, &[Some(1.0), Some(3.0)], &[0, 0]);
        assert_eq!(c.iter().filter(|a| a.provider == 0).count(), 1);
        assert_eq!(c.iter().filter(|a| a.provider == 1).count(), 3);
        assert!(c.windows(2).all(|w| w[0].offset_us <= w[1].offset_us));
        // Gamma gaps (bursty): the agent sends exactly the sequence core generates.
        let g = RateSpec {
            arrivals: Arrivals::Gamma { burstiness: 0.5 },
            duration_ms: 5_000,
            ..spec()
        };
        let a = step_arrivals(&g, 7, 0, 1, &[Some(8.0)], &[3]);
        let want = g.arrivals_at(7, 0, 1, 8.0);
        assert!(!want.is_empty());
        assert_eq!(
            a.iter()
                .map(|a| a.offset_us - 5_000_000)
                .collect::<Vec<_>>(),
            want
        );
        assert_eq!(a[0].slot, 3);
    }
}
