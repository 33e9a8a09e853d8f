//! The SLO search of a `rate` scenario (`[scenarios.rate.search]`, the rule is
//! [`SloSearch::next_rps`]): each provider runs its own rate per step, chosen from its own
//! step verdicts on this agent.
//!
//! Step 0 is at `next_rps(&[])` (`min_rps`). Each step is followed by a quiet gap as long as
//! the step ([`RateSpec::step_stride_us`]). At the gap's end the agent judges each
//! provider's step from the records of it it has seen ([`Tally`], fed by a tap on the
//! phase's record channel): the final attempts of first turns of that step (warm-up,
//! `cancelled` and `dropped` left out of the judged; `dropped` counted apart), plus the
//! step's arrivals still in flight that have certainly missed, counted as missed: in flight
//! longer than [`in_flight_bound_us`] since their intended send, or still without a first
//! token ([`crate::probe::progress`]) past the TTFT bound. Other in-flight ones are left
//! out. (Times run from the intended send: an arrival held by politeness caps is judged as
//! its user would see it.) The
//! verdict is [`step_verdict`]; `next_rps` of the provider's history (each step's rate,
//! verdict and goodput counts) gives its next rate — the re-run of a step whose goodput
//! contradicts an earlier one's ([`SloSearch::assess`]) — or `None`: it idles for the rest of
//! the phase. The phase lasts `span_us` whatever the providers do.
//!
//! A cancel counts the arrivals of the current step not yet sent (later steps' rates were never
//! chosen, so they have no planned arrivals).
//!
//! A restarted agent cannot resume a search (the verdicts were its earlier process's): when
//! it reaches the phase after its start, it sends nothing in it and counts each provider's
//! steps not yet begun as one skipped slot each (their arrival counts were never planned).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latmesh_core::load::{RateSpec, SearchEnd, SearchStep, SloSearch};
use latmesh_core::record::{Outcome, ProbeRecord};
use tokio::sync::mpsc;

use super::rate::{Sender, step_arrivals};
use super::verdict::{StepEvidence, in_flight_bound_us, step_verdict};
use crate::phase::{NotRun, PhaseCtx};

/// An SLO-search phase of scenario `scenario` (see the [module](self)).
pub async fn run_search(
    ctx: &PhaseCtx,
    scenario: usize,
    spec: &RateSpec,
    search: &SloSearch,
    phase_start: Instant,
) -> NotRun {
    let plan = &ctx.plan;
    let sc = &plan.scenarios[scenario];
    let providers = plan.providers.len();
    let stride = Duration::from_micros(spec.step_stride_us());
    let steps = spec.step_count();
    let Some(slo) = sc.slo.clone() else {
        // Validation refuses a search without an SLO; a hand-made plan is told.
        tracing::error!(campaign = %ctx.campaign_id, scenario = %sc.name, "SLO search without an SLO: the phase is not run");
        let mut sender = Sender::new(ctx, scenario, spec, phase_start);
        sender.add_late(u64::from(steps) * providers as u64);
        return sender.finish().await;
    };
    if Instant::now().saturating_duration_since(phase_start) > ctx.max_lateness {
        let begun = (Instant::now()
            .saturating_duration_since(phase_start)
            .as_micros()
            / stride.as_micros().max(1)) as u64;
        let left = u64::from(steps).saturating_sub(begun + 1) * providers as u64;
        tracing::warn!(campaign = %ctx.campaign_id, scenario = %sc.name, steps_left = left / providers.max(1) as u64, "SLO search joined after its start: a search cannot resume without its earlier verdicts; its steps left count as skipped");
        let mut sender = Sender::new(ctx, scenario, spec, phase_start);
        sender.add_late(left);
        return sender.finish().await;
    }
    let max_tokens = sc.output_tokens.unwrap_or(sc.max_tokens);
    let bounds = Bounds {
        total: in_flight_bound_us(&slo, max_tokens).map(Duration::from_micros),
        first_token: slo
            .ttft_ms
            .map(|ms| Duration::from_micros((ms * 1000.0) as u64)),
    };
    let tally = Arc::new(Mutex::new(Tally::new(plan)));
    let ctx = tapped(ctx, &tally);
    let mut sender = Sender::new(&ctx, scenario, spec, phase_start);
    let mut history: Vec<Vec<SearchStep>> = vec![Vec::new(); providers];
    let mut first_slot = vec![0u32; providers];
    for k in 0..steps {
        let rates: Vec<Option<f64>> = history.iter().map(|h| search.next_rps(h)).collect();
        if rates.iter().all(Option::is_none) {
            break;
        }
        let arrivals = step_arrivals(spec, plan.seed, scenario, k, &rates, &first_slot);
        for a in &arrivals {
            sender.planned[a.provider] = sender.planned[a.provider].max(a.slot + 1);
            first_slot[a.provider] = first_slot[a.provider].max(a.slot + 1);
        }
        let sent = sender
            .send(&arrivals, |a, intended| {
                let first_token = Arc::new(AtomicBool::new(false));
                lock(&tally).in_flight(a.provider, a.slot, a.step, intended, &first_token);
                Some(first_token)
            })
            .await;
        // The verdict after the step and its quiet gap (`RateSpec::step_stride_us`): the
        // step's requests have ended, or certainly missed.
        let step_end = phase_start + stride * (k + 1);
        if !sent || !sender.sleep_until(step_end).await {
            break;
        }
        // Records sent just before the step's end reach the tally first.
        tokio::task::yield_now().await;
        let now = Instant::now();
        for (p, rate) in rates.iter().enumerate() {
            let Some(rps) = *rate else { continue };
            let ev = lock(&tally).evidence(p, k, now, bounds);
            let verdict = step_verdict(&slo, search.min_requests, &ev);
            tracing::info!(
                campaign = %ctx.campaign_id,
                scenario = %sc.name,
                provider = %plan.providers[p].name,
                step = k,
                rps,
                judged = ev.judged,
                met = ev.met,
                dropped = ev.dropped,
                ?verdict,
                "SLO search step judged"
            );
            history[p].push(SearchStep {
                rps,
                verdict,
                judged: ev.judged,
                met: ev.met,
            });
            let a = search.assess(&history[p]);
            if let Some(i) = a
                .instability
                .filter(|_| a.outcome.end == SearchEnd::Unstable)
            {
                tracing::warn!(
                    campaign = %ctx.campaign_id,
                    scenario = %sc.name,
                    provider = %plan.providers[p].name,
                    "SLO search unstable: {}", i.describe()
                );
            } else if let Some(again) = a.rerun_rps {
                tracing::info!(
                    campaign = %ctx.campaign_id,
                    scenario = %sc.name,
                    provider = %plan.providers[p].name,
                    rps = again,
                    "SLO search step contradicts an earlier one: re-run once"
                );
            }
        }
    }
    sender.finish().await
}

/// `ctx` with its records going through a tap that notes each in `tally` before passing it
/// on to the run's collector.
fn tapped(ctx: &PhaseCtx, tally: &Arc<Mutex<Tally>>) -> PhaseCtx {
    let (tx, mut rx) = mpsc::channel::<(ProbeRecord, Vec<u64>)>(1024);
    let (out, tally) = (ctx.tx.clone(), tally.clone());
    tokio::spawn(async move {
        while let Some((rec, gaps)) = rx.recv().await {
            lock(&tally).note(&rec);
            if out.send((rec, gaps)).await.is_err() {
                break;
            }
        }
    });
    PhaseCtx { tx, ..ctx.clone() }
}

fn lock(t: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long an arrival may stay in flight, from its intended send, before it counts as
/// missed: in all ([`in_flight_bound_us`]), and without its first token (the TTFT bound).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Bounds {
    pub(super) total: Option<Duration>,
    pub(super) first_token: Option<Duration>,
}

/// What this agent has seen of each provider's steps: judged requests by (provider, step),
/// and arrivals in flight by (provider, slot).
#[derive(Debug, Default)]
pub(super) struct Tally {
    providers: HashMap<String, usize>,
    steps: HashMap<(usize, u32), StepEvidence>,
    in_flight: HashMap<(usize, u32), InFlight>,
}

/// An arrival in flight: its step, intended send and first-token flag.
#[derive(Debug)]
struct InFlight {
    step: u32,
    intended: Instant,
    first_token: Arc<AtomicBool>,
}

impl InFlight {
    /// Whether it has certainly missed the SLO by `now`: in flight past the total bound, or
    /// without its first token past the TTFT bound.
    fn missed(&self, now: Instant, b: Bounds) -> bool {
        let elapsed = now.saturating_duration_since(self.intended);
        b.total.is_some_and(|t| elapsed > t)
            || b.first_token
                .is_some_and(|t| elapsed > t && !self.first_token.load(Ordering::Relaxed))
    }
}

impl Tally {
    pub(super) fn new(plan: &latmesh_core::plan::Plan) -> Tally {
        Tally {
            providers: plan
                .providers
                .iter()
                .enumerate()
                .map(|(i, p)| (p.name.clone(), i))
                .collect(),
            ..Tally::default()
        }
    }

    /// Arrival `slot` of step `step` to provider `p` was handed to its task at `intended`;
    /// the task sets `first_token` once its attempt has its first token.
    pub(super) fn in_flight(
        &mut self,
        p: usize,
        slot: u32,
        step: u32,
        intended: Instant,
        first_token: &Arc<AtomicBool>,
    ) {
        let f = InFlight {
            step,
            intended,
            first_token: first_token.clone(),
        };
        self.in_flight.insert((p, slot), f);
    }

    /// Notes one record: a final attempt of a first turn ends its arrival's flight and,
    /// unless warm-up, `cancelled` or `dropped`, is judged.
    pub(super) fn note(&mut self, rec: &ProbeRecord) {
        if !rec.final_attempt || rec.turn > 1 {
            return;
        }
        let Some(&p) = self.providers.get(&rec.provider) else {
            return;
        };
        self.in_flight.remove(&(p, rec.slot));
        let ev = self.steps.entry((p, rec.step)).or_default();
        match rec.outcome() {
            Outcome::Dropped => ev.dropped += 1,
            Outcome::Cancelled => {}
            _ if rec.warmup => {}
            outcome => {
                ev.judged += 1;
                ev.met += u64::from(rec.slo_met == Some(true));
                if outcome == Outcome::Ok {
                    ev.ttft_us.extend(rec.ttft_us);
                    ev.tpot_us.extend(rec.tpot_us);
                    ev.e2e_us.extend(rec.e2e_us);
                }
            }
        }
    }

    /// The evidence of provider `p`'s step `step` at `now`: its judged requests, plus its
    /// arrivals in flight that have certainly missed ([`Bounds`]), as missed.
    pub(super) fn evidence(&self, p: usize, step: u32, now: Instant, b: Bounds) -> StepEvidence {
        let mut ev = self.steps.get(&(p, step)).cloned().unwrap_or_default();
        ev.judged += self
            .in_flight
            .iter()
            .filter(|((q, _), f)| *q == p && f.step == step && f.missed(now, b))
            .count() as u64;
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> latmesh_core::plan::Plan {
        let text = r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 1
interval_s = 1.0
gap_ms = 10
[[scenarios]]
name = "s"
prompt_ids = ["short-qa-en-001"]
max_tokens = 8
[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
[[providers]]
name = "b"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;
        latmesh_core::campaign::load_toml_str(text, std::path::Path::new(".")).unwrap()
    }

    fn rec(provider: &str, slot: u32, step: u32, outcome: Outcome, met: bool) -> ProbeRecord {
        ProbeRecord {
            provider: provider.into(),
            slot,
            step,
            turn: 1,
            final_attempt: true,
            outcome: Some(outcome),
            slo_met: (outcome != Outcome::Dropped).then_some(met),
            ttft_us: Some(100_000),
            ..ProbeRecord::default()
        }
    }

    /// A step's evidence: final first-turn records of that step and provider, warm-up left
    /// out, drops apart, and in-flight arrivals past the bound counted as missed.
    #[test]
    fn the_tally_judges_a_providers_step_from_its_own_records() {
        let mut t = Tally::new(&plan());
        let t0 = Instant::now();
        let flags: Vec<Arc<AtomicBool>> = (0..6).map(|_| Arc::default()).collect();
        for slot in 0..6 {
            t.in_flight(0, slot, 0, t0, &flags[slot as usize]);
        }
        t.note(&rec("a", 0, 0, Outcome::Ok, true));
        t.note(&rec("a", 1, 0, Outcome::Ok, false));
        t.note(&rec("a", 2, 0, Outcome::Dropped, false));
        let mut warm = rec("a", 3, 0, Outcome::Ok, true);
        warm.warmup = true;
        t.note(&warm);
        let mut retry = rec("a", 4, 0, Outcome::Http5xx, false);
        retry.final_attempt = false;
        t.note(&retry); // not final: still in flight
        t.note(&rec("b", 0, 0, Outcome::Ok, true)); // another provider
        t.note(&rec("a", 9, 1, Outcome::Ok, true)); // another step
        let later = t0 + Duration::from_secs(5);
        let total = |s| Bounds {
            total: Some(Duration::from_secs(s)),
            first_token: None,
        };
        let ev = t.evidence(0, 0, later, total(1));
        // judged: slots 0, 1, plus in flight past the bound: slots 4 and 5.
        assert_eq!((ev.judged, ev.met, ev.dropped), (4, 1, 1));
        assert_eq!(ev.ttft_us.len(), 2);
        let within = t.evidence(0, 0, later, total(10));
        assert_eq!(within.judged, 2, "in flight within the bound: left out");
        assert_eq!(t.evidence(0, 0, later, Bounds::default()).judged, 2);
        assert_eq!(t.evidence(1, 0, later, Bounds::default()).judged, 1);
        // Past the TTFT bound: only the one still without its first token has missed.
        flags[4].store(true, Ordering::Relaxed);
        let ttft = Bounds {
            total: None,
            first_token: Some(Duration::from_secs(1)),
        };
        assert_eq!(t.evidence(0, 0, later, ttft).judged, 3);
    }
}
