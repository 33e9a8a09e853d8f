//! Runs one campaign's plan: waits for the synchronized start, sends every probe of every
//! round at its intended time in the shared order, records histograms, and seals numbered
//! batches into the [`Outbox`].
//!
//! Probe `i` of round `r` is intended at `start + r × interval + i × gap` (see
//! `latmesh_core::plan`). Probes are spawned at their intended time and may overlap, so a slow
//! provider never delays the next probe; `sched_lag_us` records how late each one left.
//!
//! # One slot: a logical request, its retries and its turns ([`run_slot`])
//! A slot runs inside its own task, so its retries and later turns never hold up the next
//! slots (they do add load: with retries and turns a slot can send up to
//! `turns × (max_retries + 1)` requests).
//!
//! * **Attempts.** Every attempt is one record with `attempt` (1-based). When the scenario's
//!   [`RetryPolicy`] retries the outcome, the task waits [`RetryPolicy::wait_ms`] (its backoff,
//!   or a longer Retry-After when honoured, capped) and sends the same request again. The last
//!   attempt of a logical request has `final_attempt = true` and `request_latency_us`: from
//!   the first attempt's start to this attempt's end (`e2e`, or the end of the attempt when it
//!   has none), backoff waits included; for a single attempt it equals `e2e`. Its outcome is
//!   the logical request's outcome. `sched_lag_us` of a retry is measured from the end of its
//!   wait, of a later turn from the end of the previous turn.
//! * **Turns.** A scenario with `turns = N` makes each slot a conversation: turn `k > 1` sends
//!   the prompt, then for each earlier turn its assistant answer (with `reasoning_content`
//!   when the provider has `pass_reasoning`, and for `api = "anthropic"` its thinking blocks
//!   whole with their signatures) and the next follow-up user message, in order.
//!   Records carry `turn`. Turns are sent back to back; answers are read with `keep_text`
//!   (all but the last turn). A turn whose logical outcome is not `ok` ends the conversation:
//!   later turns are not sent and leave no record (the agent logs how many); they are not
//!   "skipped" probes, which would mark the agent's campaign incomplete. A later turn refused
//!   with 400/413/422 is `history_rejected` (the provider refused the history sent back).
//! * **Cache nonce.** With `cache_nonce`, `[nonce XXXXXXXX] ` (8 random hex digits) goes in
//!   front of the first message's content (the very first tokens: provider prompt caches
//!   match prefixes, so a nonce after a long system message would leave that cacheable). One
//!   nonce per logical request: all attempts resend the identical request, and all turns of a
//!   conversation share it so the conversation's own prefix caching (turn k+1 extends turn k,
//!   as in any chat client) stays as realistic as it is for users, while no probe can hit a
//!   cache warmed by another probe, round or region. Records carry `cache_nonce`.
//!
//! Histograms count `ok` attempts of every turn (not split by turn; records carry it).
//!
//! # Cancel ([`Cancel`])
//! When the coordinator cancels the campaign, no further slot is scheduled, no retry and no
//! later turn is started, and attempts in flight get [`RunnerConfig::cancel_grace`] to finish.
//! One still running after it is aborted and recorded all the same: outcome `cancelled`
//! (left out of error rates: not the provider's doing), final attempt of its
//! logical request. A record held for a retry wait that the cancel interrupts becomes the
//! final attempt. Everything measured is sealed and sent; the slots not run are reported as
//! `skipped` in the campaign's done notice.
//!
//! # Memory per slot
//! Answers kept for a later turn's history are cut at [`MAX_KEPT_ANSWER_BYTES`] each (a
//! provider ignoring `max_tokens` cannot grow the conversation without bound); the body of
//! each attempt is bounded by the probe engine's limits and the scenario's timeouts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use latmesh_core::clock::ClockEstimate;
use latmesh_core::hist::HistogramSet;
use latmesh_core::load::{LoadKind, LoadModel, PhaseKind};
use latmesh_core::plan::{FailoverSpec, Plan, RetryPolicy, Slot};
use latmesh_core::prompts::{Message, ThinkingBlock, builtin_follow_ups, guess_lang};
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::wire;
use latmesh_proto::pb;
use tokio::sync::{mpsc, watch};

use crate::limits::Limiters;
use crate::load;
use crate::outbox::Outbox;
use crate::probe::{ProbeOptions, ProbeRequest, Prober};

/// Wall clock now, UTC µs.
pub fn now_unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

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
    /// Cancels the run ([module documentation](self#cancel-cancel)).
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
        }
    }
}

/// How long before the synchronized start the runner converts `start_at` again with the
/// clock estimate of that moment.
pub const CLOCK_REFRESH_BEFORE_START: Duration = Duration::from_millis(300);

/// Longest answer text (content, and reasoning, each) kept for a later turn's history.
pub const MAX_KEPT_ANSWER_BYTES: usize = 1 << 20;

/// A campaign's cancel switch: cloned into every slot of the run; [`Cancel::cancel`] is seen
/// by all of them at once.
#[derive(Clone, Debug)]
pub struct Cancel(watch::Sender<Option<Instant>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel(watch::Sender::new(None))
    }
}

impl Cancel {
    /// Cancels (the first call counts; later ones change nothing).
    pub fn cancel(&self) {
        self.0.send_if_modified(|at| {
            if at.is_some() {
                return false;
            }
            *at = Some(Instant::now());
            true
        });
    }

    /// When it was cancelled, if it was.
    pub fn cancelled_at(&self) -> Option<Instant> {
        *self.0.borrow()
    }

    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// Resolves `grace` after the cancel.
    async fn grace_over(&self, grace: Duration) {
        self.cancelled().await;
        if let Some(at) = self.cancelled_at() {
            tokio::time::sleep_until((at + grace).into()).await;
        }
    }
}

/// What a slot shares with its campaign run: the cancel switch, the grace after it, and the
/// agent's in-flight counter.
#[derive(Clone, Debug, Default)]
pub struct SlotEnv {
    /// The campaign's cancel switch.
    pub cancel: Cancel,
    /// How long attempts in flight may run on after a cancel.
    pub cancel_grace: Duration,
    /// Attempts in flight (incremented while an attempt runs).
    pub in_flight: Arc<AtomicU32>,
    /// Politeness caps per provider (none by default).
    pub limits: Arc<Limiters>,
    /// Secret headers and `stream_options` refusals per provider (none by default:
    /// secrets are then read per slot).
    pub shaping: Arc<crate::shaping::Shaping>,
}

/// Decrements the in-flight counter when the attempt ends (or is dropped).
struct InFlight<'a>(&'a AtomicU32);

impl<'a> InFlight<'a> {
    fn start(n: &'a AtomicU32) -> Self {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The local `Instant` at which `coord_unix_us` (coordinator clock) happens, given
/// `offset_us` = coordinator − agent.
pub fn local_instant_of(coord_unix_us: i64, offset_us: i64) -> Instant {
    let agent_unix_us = coord_unix_us - offset_us;
    let (now_i, now_w) = (Instant::now(), now_unix_us());
    let ahead_us = agent_unix_us - now_w;
    if ahead_us >= 0 {
        now_i + Duration::from_micros(ahead_us as u64)
    } else {
        now_i
            .checked_sub(Duration::from_micros(ahead_us.unsigned_abs()))
            .unwrap_or(now_i)
    }
}

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

    let (tx, rx) = mpsc::channel::<(ProbeRecord, Vec<u64>)>(1024);
    let collector = tokio::spawn(collect(
        run.campaign_id.clone(),
        rx,
        outbox.clone(),
        cfg.flush_interval,
        run.first_seq.max(1),
        cfg.metrics.clone(),
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
        },
        outbox: outbox.clone(),
        max_lateness: cfg.max_lateness,
        turns_not_sent: Arc::default(),
    };
    let mut not_run = NotRun::default();
    for phase in run.plan.phases() {
        let phase_start = start + Duration::from_micros(phase.start_us);
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
}

impl PhaseCtx {
    /// Runs `at` in its own task.
    pub fn spawn_slot(&self, at: SlotRef) {
        let ctx = self.clone();
        tokio::spawn(async move { ctx.run_slot(at).await });
    }

    /// Runs `at` here (a sweep worker's request).
    pub async fn run_slot(&self, at: SlotRef) {
        let done = run_slot_with(&self.plan, at, &self.prober, &self.tx, &self.env).await;
        self.turns_not_sent.fetch_add(
            u64::from(done.turns_not_sent),
            std::sync::atomic::Ordering::SeqCst,
        );
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

/// Where a slot's records go: each record with its ITL gaps.
pub type RecordTx = mpsc::Sender<(ProbeRecord, Vec<u64>)>;

/// One slot: a logical request of some load model.
#[derive(Clone, Copy, Debug)]
pub struct SlotRef {
    /// Round (0-based; 0 outside `rounds`).
    pub round: u32,
    /// `rounds`: index of the slot in the round's shared order; `sweep`: index of the request
    /// of its provider in its step; `rate`: index of the arrival in its provider's schedule.
    pub slot: u32,
    /// Which provider and scenario.
    pub s: Slot,
    /// When its first request is intended to leave.
    pub intended: Instant,
    /// Load model, and for sweeps the step (0-based) and its concurrency.
    pub load: LoadKind,
    /// `sweep`: step index.
    pub step: u32,
    /// `sweep`: the step's concurrency.
    pub concurrency: u32,
    /// `rate` and `rounds`: a first attempt still waiting for the provider's caps at this
    /// instant is not sent (outcome `dropped`).
    pub drop_at: Option<Instant>,
}

impl SlotRef {
    /// Slot `slot` of round `round`.
    pub fn rounds(round: u32, slot: u32, s: Slot, intended: Instant) -> SlotRef {
        SlotRef {
            round,
            slot,
            s,
            intended,
            load: LoadKind::Rounds,
            step: 0,
            concurrency: 0,
            drop_at: None,
        }
    }

    /// Which prompt of its scenario it sends: rounds rotate by round, other models by slot.
    fn prompt_index(&self) -> u32 {
        match self.load {
            LoadKind::Rounds => self.round,
            _ => self.slot,
        }
    }
}

/// What a slot did besides its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotDone {
    /// Records sent (attempts of every turn).
    pub records: u32,
    /// Turns of its conversation that were not sent because an earlier turn failed.
    pub turns_not_sent: u32,
}

/// `[nonce XXXXXXXX] `: 8 random hex digits, put in front of a prompt.
pub fn new_nonce() -> String {
    format!("[nonce {:08x}] ", rand::random::<u32>())
}

/// The plan fields every record of a slot carries.
struct Label<'a> {
    at: SlotRef,
    provider: &'a str,
    scenario: &'a str,
    prompt_id: &'a str,
    cache_nonce: bool,
}

impl Label<'_> {
    fn fill(&self, rec: &mut ProbeRecord, turn: u32, attempt: u32, sched_lag_us: i64) {
        rec.load = self.at.load;
        rec.step = self.at.step;
        rec.concurrency = self.at.concurrency;
        rec.round = self.at.round;
        rec.slot = self.at.slot;
        rec.provider = self.provider.to_string();
        rec.scenario = self.scenario.to_string();
        rec.prompt_id = self.prompt_id.to_string();
        rec.turn = turn;
        rec.attempt = attempt;
        rec.cache_nonce = self.cache_nonce;
        rec.sched_lag_us = sched_lag_us;
        rec.final_attempt = false;
        rec.request_latency_us = None;
    }
}

/// The logical request's outcome and, when kept, its answer's content and reasoning.
struct Answer {
    outcome: Outcome,
    content: String,
    reasoning: String,
    /// An Anthropic answer's thinking blocks (empty for the other APIs).
    thinking_blocks: Vec<ThinkingBlock>,
    /// Reasoning items (Responses API), passed back with `pass_reasoning`.
    reasoning_items: Vec<serde_json::Value>,
}

/// Runs one slot: its logical request (a conversation of `turns` turns, each with its
/// retries; see the [module documentation](self)), sending every attempt's record to `tx`
/// as soon as it is measured.
pub async fn run_slot(plan: &Plan, at: SlotRef, prober: &Prober, tx: &RecordTx) -> SlotDone {
    run_slot_with(plan, at, prober, tx, &SlotEnv::default()).await
}

/// [`run_slot`] within a campaign run: stops at its cancel, counts its attempts in flight.
pub async fn run_slot_with(
    plan: &Plan,
    at: SlotRef,
    prober: &Prober,
    tx: &RecordTx,
    env: &SlotEnv,
) -> SlotDone {
    let provider = &plan.providers[at.s.provider];
    let scenario = &plan.scenarios[at.s.scenario];
    let prompt = plan.prompt_for(at.s.scenario, at.prompt_index());
    let policy = &scenario.policy;
    // The providers its attempts may go to: this one, or the failover chain.
    let failover = scenario.failover.as_ref().filter(|_| at.s.failover);
    let chain: Vec<usize> = failover.map_or_else(|| vec![at.s.provider], |f| f.chain.clone());
    let api_keys: Vec<Option<String>> = chain
        .iter()
        .map(|&p| {
            plan.providers[p]
                .api_key_env
                .as_ref()
                .and_then(|name| crate::probe::request::api_key_from_env(name).ok().flatten())
        })
        .collect();
    let shapes: Vec<_> = chain
        .iter()
        .map(|&p| {
            let shape = env.shaping.shape(plan, p, scenario);
            // A Responses provider whose reasoning is passed back asks for it (`include`).
            let passback = plan.providers[p]
                .pass_reasoning
                .then(|| crate::probe::responses::with_reasoning_passback(&shape))
                .flatten();
            match passback {
                Some(s) => std::borrow::Cow::Owned(s),
                None => shape,
            }
        })
        .collect();
    let secrets: Vec<_> = chain
        .iter()
        .map(|&p| env.shaping.secrets(plan, p))
        .collect();
    let nonce = policy.cache_nonce.then(new_nonce);
    let label = Label {
        at,
        provider: &provider.name,
        scenario: &scenario.name,
        prompt_id: &prompt.id,
        cache_nonce: nonce.is_some(),
    };
    let mut messages = prompt.messages.clone();
    if let (Some(nonce), Some(first)) = (&nonce, messages.first_mut()) {
        first.content.insert_str(0, nonce);
    }
    let turns = policy.turns.max(1);
    let mut done = SlotDone::default();
    let mut intended = at.intended;
    for turn in 1..=turns {
        if turn > 1 && env.cancel.cancelled_at().is_some() {
            done.turns_not_sent = turns - turn + 1;
            break;
        }
        if turn > 1 {
            let k = (turn - 2) as usize;
            // Validation puts turns − 1 follow-ups in the plan; the builtin ones are only a
            // fallback for a hand-made plan.
            let text = prompt.follow_ups.get(k).cloned().unwrap_or_else(|| {
                let builtin = builtin_follow_ups(guess_lang(&prompt.messages));
                builtin[k % builtin.len()].to_string()
            });
            messages.push(Message::new("user", text));
            intended = Instant::now();
        }
        let targets: Vec<Target<'_>> = chain
            .iter()
            .zip(&api_keys)
            .zip(shapes.iter().zip(&secrets))
            .map(|((&p, key), (shape, secrets))| Target {
                provider: p,
                name: &plan.providers[p].name,
                req: ProbeRequest {
                    base_url: &plan.providers[p].base_url,
                    model_id: &plan.providers[p].model_id,
                    api_key: key.as_deref(),
                    messages: &messages,
                    stream: scenario.stream,
                    max_tokens: scenario.max_tokens,
                    temperature: scenario.temperature,
                    top_p: scenario.top_p,
                    timeouts: &scenario.timeouts,
                    probe_id: None,
                    user_agent: plan.providers[p].user_agent.as_deref(),
                    shape,
                    secret_headers: secrets,
                },
            })
            .collect();
        let again = match failover {
            Some(f) => Again::Failover(f),
            None => Again::Retry(policy.retry.as_ref()),
        };
        let last = turn == turns;
        let opts = ProbeOptions {
            keep_text: !last,
            max_response_bytes: Some(policy.max_response_bytes),
            ..ProbeOptions::default()
        };
        let (answer, records) = logical_request(
            prober, &targets, opts, again, &label, turn, intended, tx, env,
        )
        .await;
        done.records += records;
        if answer.outcome != Outcome::Ok {
            done.turns_not_sent = turns - turn;
            break;
        }
        if !last {
            let (mut content, mut reasoning) = (answer.content, answer.reasoning);
            cut_at_char_boundary(&mut content, MAX_KEPT_ANSWER_BYTES);
            cut_at_char_boundary(&mut reasoning, MAX_KEPT_ANSWER_BYTES);
            // Anthropic's thinking blocks go back whole (their signatures are checked), never cut.
            let thinking = answer.thinking_blocks;
            // Encrypted reasoning cannot be cut: past the bound no item is passed back.
            let mut items = answer.reasoning_items;
            let bytes: usize = items.iter().map(|i| i.to_string().len()).sum();
            if bytes > MAX_KEPT_ANSWER_BYTES {
                items.clear();
            }
            messages.push(Message {
                reasoning_content: provider.pass_reasoning.then_some(reasoning),
                thinking_blocks: (provider.pass_reasoning && !thinking.is_empty())
                    .then_some(thinking),
                reasoning_items: if provider.pass_reasoning {
                    items
                } else {
                    Vec::new()
                },
                ..Message::new("assistant", content)
            });
        }
    }
    done
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn cut_at_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.shrink_to_fit();
    }
}

/// The record of an attempt aborted `grace` after its campaign was cancelled.
fn aborted_record(send_agent_unix_us: i64, grace: Duration) -> crate::probe::ProbeResult {
    let record = ProbeRecord {
        outcome: Some(Outcome::Cancelled),
        send_agent_unix_us,
        error_message: Some(format!(
            "attempt aborted: still in flight {} ms after the campaign was cancelled",
            grace.as_millis()
        )),
        ..ProbeRecord::default()
    };
    crate::probe::ProbeResult {
        record,
        ..Default::default()
    }
}

/// Where an attempt of a logical request goes.
struct Target<'a> {
    /// Index into the plan's providers.
    provider: usize,
    /// Its name (the record's `provider`).
    name: &'a str,
    /// The request.
    req: ProbeRequest<'a>,
}

/// What follows an attempt that did not end the logical request.
#[derive(Clone, Copy)]
enum Again<'a> {
    /// The scenario's retries: the same target, after the policy's wait.
    Retry(Option<&'a RetryPolicy>),
    /// Failover: the same target while it has attempts left, then the next one, at once.
    Failover(&'a FailoverSpec),
}

impl Again<'_> {
    /// After attempt `attempt` (the `tries`-th at target `pos` of `targets`) ended with
    /// `outcome`: the next target and the wait before it, or `None` (the attempt is final).
    fn next(
        self,
        attempt: u32,
        tries: u32,
        pos: usize,
        targets: usize,
        outcome: Outcome,
        retry_after_s: Option<f64>,
    ) -> Option<(usize, Duration)> {
        match self {
            Again::Retry(retry) => retry.filter(|p| p.retries(attempt, outcome)).map(|p| {
                (
                    pos,
                    Duration::from_millis(p.wait_ms(attempt, retry_after_s)),
                )
            }),
            Again::Failover(f) if f.on.contains(&outcome) => {
                if tries < f.attempts {
                    Some((pos, Duration::ZERO))
                } else if pos + 1 < targets {
                    Some((pos + 1, Duration::ZERO))
                } else {
                    None
                }
            }
            Again::Failover(_) => None,
        }
    }
}

/// One logical request: attempts until one is not retried (or, with failover, until the
/// chain is exhausted). Returns its final answer and the number of records sent.
#[allow(clippy::too_many_arguments)]
async fn logical_request(
    prober: &Prober,
    targets: &[Target<'_>],
    opts: ProbeOptions,
    again: Again<'_>,
    label: &Label<'_>,
    turn: u32,
    mut intended: Instant,
    tx: &RecordTx,
    env: &SlotEnv,
) -> (Answer, u32) {
    let mut first: Option<Instant> = None;
    let mut attempt = 1u32;
    let (mut pos, mut tries) = (0usize, 1u32);
    // Only the tokens-per-minute cap needs it.
    let tokens = if targets.iter().any(|t| env.limits.is_limited(t.provider)) {
        estimate_tokens(&targets[0].req)
    } else {
        0
    };
    loop {
        let Target {
            provider,
            name,
            ref req,
        } = targets[pos];
        // Politeness: wait for the provider's caps (an open-loop arrival only until its
        // drop time). The wait is part of `sched_lag`.
        let drop_at = label.at.drop_at.filter(|_| attempt == 1 && turn == 1);
        let permit = tokio::select! {
            p = env.limits.acquire(provider, tokens, drop_at) => Some(p),
            _ = env.cancel.cancelled() => None,
        };
        let sched_lag_us = intended.elapsed().as_micros() as i64;
        let not_sent = match &permit {
            None => Some(Outcome::Cancelled),
            Some(None) => Some(Outcome::Dropped),
            Some(Some(_)) => None,
        };
        if let Some(outcome) = not_sent {
            let mut rec = ProbeRecord {
                outcome: Some(outcome),
                stream: req.stream,
                send_agent_unix_us: now_unix_us(),
                error_message: Some(match outcome {
                    Outcome::Dropped => format!(
                        "not sent: the provider's caps (in flight, rate, gap or Retry-After pause) held it {} ms past the intended send time",
                        sched_lag_us / 1000
                    ),
                    _ => "not sent: the campaign was cancelled while it waited for the provider's caps".into(),
                }),
                ..ProbeRecord::default()
            };
            label.fill(&mut rec, turn, attempt, sched_lag_us);
            rec.provider = name.to_string();
            rec.failover = matches!(again, Again::Failover(_));
            rec.final_attempt = true;
            let _ = tx.send((rec, Vec::new())).await;
            let answer = Answer {
                outcome,
                content: String::new(),
                reasoning: String::new(),
                thinking_blocks: Vec::new(),
                reasoning_items: Vec::new(),
            };
            return (answer, attempt);
        }
        let started = Instant::now();
        let first = *first.get_or_insert(started);
        let send_unix_us = now_unix_us();
        let result = {
            let _in_flight = InFlight::start(&env.in_flight);
            let _permit = permit;
            tokio::select! {
                r = prober.probe_with(req, opts) => r,
                _ = env.cancel.grace_over(env.cancel_grace) => aborted_record(send_unix_us, env.cancel_grace),
            }
        };
        let returned = Instant::now();
        env.shaping.after_attempt(
            provider,
            name,
            req.shape,
            &result.record,
            &result.error_body_fields,
        );
        let mut rec = result.record;
        label.fill(&mut rec, turn, attempt, sched_lag_us);
        rec.provider = name.to_string();
        rec.failover = matches!(again, Again::Failover(_));
        if rec.outcome() == Outcome::Throttled
            && let Some(s) = rec.retry_after_s.filter(|s| s.is_finite() && *s > 0.0)
        {
            env.limits
                .pause(provider, returned + Duration::from_secs_f64(s.min(3_600.0)));
        }
        if turn > 1
            && rec.outcome() == Outcome::Http4xx
            && matches!(rec.http_status, Some(400 | 413 | 422))
        {
            rec.outcome = Some(Outcome::HistoryRejected);
        }
        let outcome = rec.outcome();
        let end = rec.e2e_us.map_or(returned - started, Duration::from_micros);
        let latency_us = (started - first + end).as_micros() as u64;
        let next = again
            .next(
                attempt,
                tries,
                pos,
                targets.len(),
                outcome,
                rec.retry_after_s,
            )
            .filter(|_| env.cancel.cancelled_at().is_none());
        let wait_cancelled = match next {
            None => true,
            Some((_, w)) => {
                // The record waits with the request: a cancel during the wait makes it final.
                intended = Instant::now() + w;
                tokio::select! {
                    _ = tokio::time::sleep_until(intended.into()) => false,
                    _ = env.cancel.cancelled() => true,
                }
            }
        };
        if wait_cancelled {
            rec.final_attempt = true;
            rec.request_latency_us = Some(latency_us);
        }
        let _ = tx.send((rec, result.itl_gaps_us)).await;
        if wait_cancelled {
            let answer = Answer {
                outcome,
                content: result.content_text,
                reasoning: result.reasoning_text,
                thinking_blocks: result.thinking_blocks,
                reasoning_items: result.reasoning_items,
            };
            return (answer, attempt);
        }
        if let Some((next_pos, _)) = next {
            tries = if next_pos == pos { tries + 1 } else { 1 };
            pos = next_pos;
        }
        attempt += 1;
    }
}

/// Tokens a request may use, for the tokens-per-minute cap: its messages at ~4 bytes per
/// token plus `max_tokens`.
fn estimate_tokens(req: &ProbeRequest<'_>) -> u32 {
    let bytes: usize = req
        .messages
        .iter()
        .map(|m| m.content.len() + m.reasoning_content.as_ref().map_or(0, String::len))
        .sum();
    (bytes / 4).min(u32::MAX as usize) as u32 + req.max_tokens
}

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

/// Receives finished probes, records histograms, and seals a batch every `flush_interval`
/// (and at the end), numbering batches from `first_seq`. Returns (last seq, probes).
async fn collect(
    campaign_id: String,
    mut rx: mpsc::Receiver<(ProbeRecord, Vec<u64>)>,
    outbox: Outbox,
    flush_interval: Duration,
    first_seq: u64,
    metrics: crate::metrics::AgentMetrics,
) -> (u64, u64) {
    let mut hists = HistogramSet::new();
    let mut records: Vec<ProbeRecord> = Vec::new();
    let (mut seq, mut probes) = (first_seq - 1, 0u64);
    let mut interval_start = now_unix_us();
    let mut tick = tokio::time::interval(flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((rec, gaps)) => {
                    probes += 1;
                    if rec.outcome() != Outcome::Ok {
                        tracing::debug!(provider = %rec.provider, outcome = %rec.outcome(), "probe not ok");
                    }
                    hists.record_probe(&rec, &gaps);
                    metrics.record(&rec);
                    records.push(rec);
                }
                None => break,
            },
            _ = tick.tick() => seal(&campaign_id, &outbox, &mut hists, &mut records, &mut interval_start, &mut seq).await,
        }
    }
    seal(
        &campaign_id,
        &outbox,
        &mut hists,
        &mut records,
        &mut interval_start,
        &mut seq,
    )
    .await;
    (seq, probes)
}

/// Seals what was collected since `interval_start` as batches `seq + 1`, `seq + 2`, … into the
/// outbox (nothing when nothing was collected): as many as keep each under
/// [`wire::MAX_BATCH_BYTES`] encoded ([`crate::batches`]); a record or histogram larger than
/// that alone is quarantined, not sent. Encoding the interval histograms (V2 + DEFLATE, tens
/// of ms for a busy interval) runs on a blocking thread, so the schedulers on this runtime
/// keep sending on time; batches still enter the outbox in `seq` order (the collector awaits
/// each seal).
async fn seal(
    campaign_id: &str,
    outbox: &Outbox,
    hists: &mut HistogramSet,
    records: &mut Vec<ProbeRecord>,
    interval_start: &mut i64,
    seq: &mut u64,
) {
    if records.is_empty() && hists.is_empty() {
        return;
    }
    // Never before the interval's start: a wall clock stepped back (an NTP step) during the
    // interval must not make it end before it starts (the coordinator refuses such a batch).
    let end = now_unix_us().max(*interval_start);
    let (start, drained, recs) = (*interval_start, hists.drain(), std::mem::take(records));
    let (campaign, first_seq) = (campaign_id.to_string(), *seq + 1);
    let build = move || {
        crate::batches::split(
            &campaign,
            first_seq,
            drained
                .iter()
                .filter_map(|(k, h)| wire::histogram_to_pb(k, h, start, end).ok())
                .collect(),
            recs.iter().map(pb::ProbeRecord::from).collect(),
            wire::MAX_BATCH_BYTES,
        )
    };
    let split = match tokio::task::spawn_blocking(build).await {
        Ok(split) => split,
        Err(e) => {
            tracing::error!(error = %e, seq = first_seq, "sealing a batch failed");
            return;
        }
    };
    if let Some(oversized) = split.oversized {
        outbox.quarantine_oversized(oversized);
    }
    for batch in split.batches {
        *seq = batch.seq;
        outbox.push(batch);
    }
    *interval_start = end;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The issue's attack: one record with a 3 MB finish_reason among ordinary ones. Sealed,
    /// no batch passes the budget; the huge record is quarantined and reported, the others
    /// are sent.
    #[tokio::test]
    async fn a_huge_record_is_quarantined_and_the_interval_still_sent_within_the_budget() {
        let record = |slot: u32, finish: usize| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Ok),
            slot,
            finish_reason: Some("x".repeat(finish)),
            ..Default::default()
        };
        let mut records: Vec<ProbeRecord> = (0..2000).map(|i| record(i, 1000)).collect();
        records.insert(7, record(9999, 3 << 20));
        let outbox = Outbox::default();
        let (mut hists, mut start, mut seq) = (HistogramSet::new(), 0i64, 4u64);
        seal("c", &outbox, &mut hists, &mut records, &mut start, &mut seq).await;
        let sent = outbox.take_pending().batches;
        assert!(sent.len() >= 2, "{} batches", sent.len());
        assert_eq!(
            sent.iter().map(|b| b.seq).collect::<Vec<_>>(),
            (5..=seq).collect::<Vec<_>>(),
            "consecutive seqs from the next one"
        );
        for b in &sent {
            use prost::Message;
            assert!(b.encoded_len() <= wire::MAX_BATCH_BYTES, "seq {}", b.seq);
        }
        let slots: Vec<u32> = sent
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.slot))
            .collect();
        assert_eq!(slots, (0..2000).collect::<Vec<_>>());
        let q = outbox.quarantined("c");
        assert_eq!((q.records, q.histograms, q.seqs.len()), (1, 0, 0));
    }

    /// A wall clock stepped back during an interval (its start is later than now) seals an
    /// interval that ends where it starts, never before (the coordinator refuses those).
    #[tokio::test]
    async fn an_interval_never_ends_before_it_starts_when_the_clock_steps_back() {
        use latmesh_core::hist::HistKey;
        use latmesh_core::metrics::Metric;
        let mut hists = HistogramSet::new();
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        hists.record(key, 40_000);
        let outbox = Outbox::default();
        let ahead = now_unix_us() + 3_600_000_000;
        let (mut start, mut seq) = (ahead, 0u64);
        seal(
            "c",
            &outbox,
            &mut hists,
            &mut Vec::new(),
            &mut start,
            &mut seq,
        )
        .await;
        let sent = outbox.take_pending().batches;
        let h = &sent[0].histograms[0];
        assert_eq!((h.start_agent_unix_us, h.end_agent_unix_us), (ahead, ahead));
        assert_eq!(
            start, ahead,
            "the next interval starts where this one ended"
        );
    }

    /// Sealing a busy interval (hundreds of histograms to encode) must not hold up the other
    /// tasks of the runtime: on a single-threaded runtime, a timer task keeps firing on time
    /// while the collector seals.
    #[tokio::test(flavor = "current_thread")]
    async fn sealing_a_batch_does_not_block_the_schedulers() {
        use latmesh_core::hist::HistKey;
        use latmesh_core::metrics::Metric;
        let mut hists = HistogramSet::new();
        for p in 0..40 {
            for metric in Metric::ALL {
                for v in 0..2_000u64 {
                    let key = HistKey {
                        provider: format!("p{p}"),
                        scenario: "s".into(),
                        metric,
                        step: 0,
                    };
                    hists.record(key, 1 + v * v * 997);
                }
            }
        }
        // What encoding alone costs on this thread.
        let t = Instant::now();
        let copy = hists.clone().drain();
        for (k, h) in &copy {
            wire::histogram_to_pb(k, h, 0, 1).unwrap();
        }
        let encode = t.elapsed();
        // Meanwhile, a 1 ms ticker measures how late it gets to run.
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let ticker = tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut next = Instant::now();
            loop {
                next += Duration::from_millis(1);
                tokio::time::sleep_until(next.into()).await;
                worst = worst.max(Instant::now().saturating_duration_since(next));
                if stop_rx.try_recv().is_ok() {
                    return worst;
                }
            }
        });
        tokio::task::yield_now().await;
        let outbox = Outbox::default();
        let (mut records, mut start, mut seq) = (Vec::new(), 0i64, 0u64);
        seal("c", &outbox, &mut hists, &mut records, &mut start, &mut seq).await;
        let _ = stop_tx.send(());
        let worst = ticker.await.unwrap();
        assert_eq!(seq, 1);
        assert_eq!(
            outbox.take_pending().batches[0].histograms.len(),
            40 * Metric::ALL.len()
        );
        assert!(
            worst < encode / 2,
            "a task waited {worst:?} while the batch was sealed (encoding takes {encode:?})"
        );
    }

    #[test]
    fn coordinator_time_maps_to_local_instants() {
        // The coordinator is 2 s ahead: its "now + 500 ms" is our now − 1.5 s.
        let now_coord = now_unix_us() + 2_000_000;
        let at = local_instant_of(now_coord + 500_000, 2_000_000);
        let ahead = at.saturating_duration_since(Instant::now());
        assert!(
            ahead > Duration::from_millis(400) && ahead <= Duration::from_millis(500),
            "{ahead:?}"
        );
        let past = local_instant_of(now_coord - 1_000_000, 2_000_000);
        assert!(past <= Instant::now());
    }

    use std::net::SocketAddr;
    use std::sync::Mutex;

    use latmesh_sim::profile::{ProviderProfile, ReasoningPassback};
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves `profiles` with the simulator on a loopback port.
    async fn sim(profiles: Vec<ProviderProfile>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cfg = latmesh_sim::SimConfig {
            profiles,
            ..latmesh_sim::SimConfig::default()
        };
        tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
        addr
    }

    /// A validated one-provider, one-scenario plan (through the campaign file, so the
    /// follow-ups and policy are what validation makes of the keys).
    fn plan(base_url: &str, scenario_keys: &str, provider_keys: &str) -> Plan {
        let text = format!(
            r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 4
interval_s = 10.0
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 48
timeout_total_s = 20
{scenario_keys}
[[providers]]
name = "p"
base_url = "{base_url}"
model_id = "m"
{provider_keys}
"#
        );
        latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
    }

    /// Runs slot 0 of `round` now and returns its records and what it reports.
    async fn run(plan: &Plan, round: u32) -> (Vec<ProbeRecord>, SlotDone) {
        let prober = Prober::new(None).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let at = SlotRef::rounds(round, 0, Slot::new(0, 0), Instant::now());
        let done = run_slot(plan, at, &prober, &tx).await;
        drop(tx);
        let mut recs = Vec::new();
        while let Some((r, _)) = rx.recv().await {
            recs.push(r);
        }
        (recs, done)
    }

    type Reply = Box<dyn Fn(usize) -> (u16, &'static str, String) + Send + Sync>;

    /// A fake provider that keeps every request body: request `n` (0-based) is answered
    /// with `reply(n)` = (status, extra header lines, body).
    /// A server answering request `n` with `reply(n)`; returns its address and the JSON
    /// bodies it received, each with its request head (lowercase) under `"_head"`.
    async fn capture(reply: Reply) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (seen, reply) = (bodies.clone(), Arc::new(reply));
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let (seen, reply) = (seen.clone(), reply.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    let (head, head_end, len) = loop {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
                            let len = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (head, at + 4, len);
                        }
                    };
                    while buf.len() < head_end + len {
                        let n = sock.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let mut body: Value = serde_json::from_slice(&buf[head_end..head_end + len])
                        .unwrap_or(Value::Null);
                    if let Some(o) = body.as_object_mut() {
                        o.insert("_head".into(), Value::String(head));
                    }
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(body);
                        seen.len() - 1
                    };
                    let (status, extra, body) = reply(n);
                    let kind = if status == 200 {
                        "text/event-stream"
                    } else {
                        "application/json"
                    };
                    let resp = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(resp.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        (addr, bodies)
    }

    /// A streamed answer of request `n`: reasoning "thought n", then content "answer n".
    fn sse_answer(n: usize) -> String {
        let chunk = |delta: Value, finish: Value| {
            let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {c}\n\n")
        };
        let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}});
        [
            chunk(
                json!({"role": "assistant", "content": null, "reasoning_content": format!("thought {n}")}),
                Value::Null,
            ),
            chunk(json!({"content": format!("answer {n}")}), Value::Null),
            chunk(json!({}), json!("stop")),
            format!("data: {usage}\n\n"),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat()
    }

    fn ok_replies() -> Reply {
        Box::new(|n| (200, "", sse_answer(n + 1)))
    }

    fn summary(recs: &[ProbeRecord]) -> Vec<(u32, u32, Outcome, bool)> {
        recs.iter()
            .map(|r| (r.turn, r.attempt, r.outcome(), r.final_attempt))
            .collect()
    }

    fn quiet(name: &str) -> ProviderProfile {
        ProviderProfile {
            output_tokens_min: 40,
            output_tokens_max: 60,
            ..ProviderProfile::fixed(name, 20_000, 1_000)
        }
    }

    #[tokio::test]
    async fn a_cancel_aborts_attempts_after_the_grace_and_still_records_them() {
        // Slow: 20 s to the first token.
        let addr = sim(vec![ProviderProfile::fixed("slow", 20_000_000, 1_000)]).await;
        let p = plan(&format!("http://{addr}/slow/v1"), "turns = 2", "");
        let prober = Prober::new(None).unwrap();
        let env = SlotEnv {
            cancel_grace: Duration::from_millis(300),
            ..SlotEnv::default()
        };
        let (tx, mut rx) = mpsc::channel(64);
        let at = SlotRef::rounds(0, 0, Slot::new(0, 0), Instant::now());
        let (env2, p2) = (env.clone(), p.clone());
        let task = tokio::spawn(async move { run_slot_with(&p2, at, &prober, &tx, &env2).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(env.in_flight.load(Ordering::SeqCst), 1);
        let cancelled_at = Instant::now();
        env.cancel.cancel();
        let done = task.await.unwrap();
        let took = cancelled_at.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert_eq!(env.in_flight.load(Ordering::SeqCst), 0);
        assert_eq!(
            done,
            SlotDone {
                records: 1,
                turns_not_sent: 1
            }
        );
        let (rec, _) = rx.recv().await.unwrap();
        assert_eq!(rec.outcome(), Outcome::Cancelled);
        assert!(rec.final_attempt && rec.request_latency_us.is_some());
        assert_eq!((rec.turn, rec.attempt, rec.provider.as_str()), (1, 1, "p"));
        assert!(rec.send_agent_unix_us > 0);
    }

    #[tokio::test]
    async fn a_cancel_during_a_retry_wait_makes_the_last_attempt_final() {
        let throttler = ProviderProfile {
            throttle_prob: 1.0,
            ..quiet("throttler")
        };
        let addr = sim(vec![throttler]).await;
        let p = plan(
            &format!("http://{addr}/throttler/v1"),
            "retry = { max_retries = 3, backoff_s = [5], honour_retry_after = false }",
            "",
        );
        let prober = Prober::new(None).unwrap();
        let env = SlotEnv::default();
        let (tx, mut rx) = mpsc::channel(64);
        let at = SlotRef::rounds(0, 0, Slot::new(0, 0), Instant::now());
        let env2 = env.clone();
        let task = tokio::spawn(async move { run_slot_with(&p, at, &prober, &tx, &env2).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        env.cancel.cancel();
        let done = tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the wait ends at the cancel")
            .unwrap();
        assert_eq!(done.records, 1);
        let (rec, _) = rx.recv().await.unwrap();
        assert_eq!(rec.outcome(), Outcome::Throttled);
        assert!(rec.final_attempt && rec.request_latency_us.is_some());
    }

    #[test]
    fn kept_answers_are_cut_at_a_char_boundary() {
        let mut t = "é".repeat(10); // 20 bytes
        cut_at_char_boundary(&mut t, 5);
        assert_eq!(t, "éé");
        let mut short = "abc".to_string();
        cut_at_char_boundary(&mut short, 5);
        assert_eq!(short, "abc");
    }

    #[tokio::test]
    async fn a_single_turn_request_is_one_final_first_attempt() {
        let addr = sim(vec![quiet("fast")]).await;
        let p = plan(&format!("http://{addr}/fast/v1"), "", "");
        let (recs, done) = run(&p, 1).await;
        assert_eq!(summary(&recs), [(1, 1, Outcome::Ok, true)]);
        let r = &recs[0];
        assert_eq!((r.round, r.slot, r.cache_nonce), (1, 0, false));
        assert_eq!((r.provider.as_str(), r.scenario.as_str()), ("p", "chat"));
        assert_eq!(r.prompt_id, "short-qa-en-001");
        // One attempt: the logical request's latency is the attempt's e2e.
        assert!(r.e2e_us.is_some());
        assert_eq!(r.request_latency_us, r.e2e_us);
        assert_eq!(
            done,
            SlotDone {
                records: 1,
                turns_not_sent: 0
            }
        );
    }

    #[tokio::test]
    async fn throttled_attempts_are_retried_and_only_the_last_is_final() {
        let throttler = ProviderProfile {
            throttle_prob: 1.0,
            retry_after_s_min: 1,
            retry_after_s_max: 1,
            ..quiet("throttler")
        };
        let addr = sim(vec![throttler]).await;
        let url = format!("http://{addr}/throttler/v1");
        // Retry-After (1 s) is longer than the backoff but capped at 0.3 s: two waits of 0.3 s.
        let p = plan(
            &url,
            "retry = { max_retries = 2, backoff_s = [0.1], max_retry_after_s = 0.3 }",
            "",
        );
        let (recs, done) = run(&p, 0).await;
        assert_eq!(
            summary(&recs),
            [
                (1, 1, Outcome::Throttled, false),
                (1, 2, Outcome::Throttled, false),
                (1, 3, Outcome::Throttled, true),
            ]
        );
        assert_eq!(done.records, 3);
        assert!(
            recs.iter()
                .all(|r| r.retry_after_s == Some(1.0) && r.http_status == Some(429))
        );
        assert_eq!(recs[0].request_latency_us, None);
        assert_eq!(recs[1].request_latency_us, None);
        let total = recs[2].request_latency_us.unwrap();
        assert!((600_000..2_000_000).contains(&total), "{total} µs");
        let gap = recs[1].send_agent_unix_us - recs[0].send_agent_unix_us;
        assert!(gap >= 300_000, "second attempt {gap} µs after the first");

        // Honoured in full below the cap: the 1 s Retry-After wins over the 50 ms backoff.
        let p = plan(&url, "retry = { max_retries = 1, backoff_s = [0.05] }", "");
        let (recs, _) = run(&p, 0).await;
        assert_eq!(recs.len(), 2);
        let total = recs[1].request_latency_us.unwrap();
        assert!(total >= 1_000_000, "{total} µs");
        // Not honoured: only the backoff.
        let p = plan(
            &url,
            "retry = { max_retries = 1, backoff_s = [0.05], honour_retry_after = false }",
            "",
        );
        let (recs, _) = run(&p, 0).await;
        let total = recs[1].request_latency_us.unwrap();
        assert!((50_000..900_000).contains(&total), "{total} µs");
        // Outcomes not listed in `on` are not retried.
        let p = plan(&url, "retry = { on = [\"http_5xx\"] }", "");
        let (recs, _) = run(&p, 0).await;
        assert_eq!(summary(&recs), [(1, 1, Outcome::Throttled, true)]);
    }

    #[tokio::test]
    async fn a_retry_that_succeeds_makes_the_logical_request_ok() {
        let reply: Reply = Box::new(|n| match n {
            0 => (
                503,
                "",
                r#"{"error":{"message":"overloaded","type":"server_error"}}"#.to_string(),
            ),
            _ => (200, "", sse_answer(n)),
        });
        let (addr, bodies) = capture(reply).await;
        let p = plan(
            &format!("http://{addr}/v1"),
            "cache_nonce = true\nretry = { backoff_s = [0.2] }",
            "",
        );
        let (recs, done) = run(&p, 0).await;
        assert_eq!(
            summary(&recs),
            [(1, 1, Outcome::Http5xx, false), (1, 2, Outcome::Ok, true)]
        );
        assert_eq!(done.records, 2);
        let total = recs[1].request_latency_us.unwrap();
        assert!(total >= 200_000 + recs[1].e2e_us.unwrap(), "{total} µs");
        // A retry resends the identical request, nonce included.
        let bodies = bodies.lock().unwrap();
        assert_eq!(bodies.len(), 2);
        assert_eq!(bodies[0], bodies[1]);
        assert!(recs.iter().all(|r| r.cache_nonce));
    }

    fn first_content(body: &Value) -> String {
        body["messages"][0]["content"].as_str().unwrap().to_string()
    }

    /// The provider's `user_agent` from the campaign reaches the wire; without one, the
    /// default; never a latmesh header.
    #[tokio::test]
    async fn the_campaigns_user_agent_is_sent() {
        let (addr, bodies) = capture(ok_replies()).await;
        let url = format!("http://{addr}/v1");
        run(&plan(&url, "", "user_agent = \"acme-eval/3.1\""), 0).await;
        run(&plan(&url, "", ""), 0).await;
        let heads: Vec<String> = bodies
            .lock()
            .unwrap()
            .iter()
            .map(|b| b["_head"].as_str().unwrap().to_string())
            .collect();
        assert!(
            heads[0].contains("\r\nuser-agent: acme-eval/3.1\r\n"),
            "{}",
            heads[0]
        );
        let default = crate::probe::request::DEFAULT_USER_AGENT.to_ascii_lowercase();
        assert!(
            heads[1].contains(&format!("\r\nuser-agent: {default}\r\n")),
            "{}",
            heads[1]
        );
        assert!(heads.iter().all(|h| !h.contains("latmesh")), "{heads:?}");
    }

    #[tokio::test]
    async fn every_logical_request_gets_its_own_cache_nonce() {
        let (addr, bodies) = capture(ok_replies()).await;
        let url = format!("http://{addr}/v1");
        let original = plan(&url, "", "").scenarios[0].prompts[0].messages[0]
            .content
            .clone();
        let p = plan(&url, "cache_nonce = true", "");
        let (a, _) = run(&p, 0).await;
        let (b, _) = run(&p, 4).await; // the same prompt again
        assert!(a[0].cache_nonce && b[0].cache_nonce);
        assert_eq!(a[0].prompt_id, b[0].prompt_id);
        let (first, second) = {
            let bodies = bodies.lock().unwrap();
            (first_content(&bodies[0]), first_content(&bodies[1]))
        };
        for c in [&first, &second] {
            let rest = c.strip_prefix("[nonce ").unwrap();
            let (hex, prompt) = rest.split_once("] ").unwrap();
            assert!(
                hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()),
                "{c}"
            );
            assert_eq!(prompt, original);
        }
        assert_ne!(first, second);
        // Without the key the prompt goes as it is, and the record says so.
        let p = plan(&url, "", "");
        let (c, _) = run(&p, 0).await;
        assert!(!c[0].cache_nonce);
        assert_eq!(first_content(&bodies.lock().unwrap()[2]), original);
    }

    #[tokio::test]
    async fn later_turns_send_the_history_back_in_order() {
        for pass in [true, false] {
            let (addr, bodies) = capture(ok_replies()).await;
            let p = plan(
                &format!("http://{addr}/v1"),
                "turns = 3\ncache_nonce = true\nfollow_ups = [\"Second?\", \"Third?\"]",
                &format!("pass_reasoning = {pass}"),
            );
            let prompt = p.scenarios[0].prompts[0].messages.clone();
            let (recs, done) = run(&p, 0).await;
            assert_eq!(
                summary(&recs),
                [
                    (1, 1, Outcome::Ok, true),
                    (2, 1, Outcome::Ok, true),
                    (3, 1, Outcome::Ok, true),
                ]
            );
            assert_eq!(
                done,
                SlotDone {
                    records: 3,
                    turns_not_sent: 0
                }
            );
            assert!(recs.iter().all(|r| r.cache_nonce && r.ttft_us.is_some()));
            let bodies = bodies.lock().unwrap();
            let assistant = |n: usize| {
                if pass {
                    json!({"role": "assistant", "content": format!("answer {n}"),
                        "reasoning_content": format!("thought {n}")})
                } else {
                    json!({"role": "assistant", "content": format!("answer {n}")})
                }
            };
            let user = |t: &str| json!({"role": "user", "content": t});
            let turn1 = bodies[0]["messages"].as_array().unwrap().clone();
            assert_eq!(turn1.len(), prompt.len());
            // All turns share the nonce: turn 1's messages are the prefix of every turn.
            let mut want = turn1.clone();
            want.extend([assistant(1), user("Second?")]);
            assert_eq!(bodies[1]["messages"], Value::Array(want.clone()));
            want.extend([assistant(2), user("Third?")]);
            assert_eq!(bodies[2]["messages"], Value::Array(want));
        }
    }

    /// A streamed Anthropic answer of request `n`: a thinking block "thought n" with its
    /// signature (in two deltas), a redacted thinking block, then text "answer n".
    fn anthropic_answer(n: usize) -> String {
        let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
        [
            ev(
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [], "model": "m", "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            ev(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": format!("thought {n}")}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": format!("sig{n}a")}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "b"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": format!("enc{n}")}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 1})),
            ev(
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": format!("answer {n}")}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 2})),
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 6}}),
            ),
            ev(json!({"type": "message_stop"})),
        ]
        .concat()
    }

    /// A Responses API stream of request `n`: a reasoning summary "thought n" whose item
    /// carries encrypted reasoning "enc n", then the text "answer n".
    fn responses_answer(n: usize) -> String {
        let event = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
        let reasoning = json!({"type": "reasoning", "summary": [{"type": "summary_text",
            "text": format!("thought {n}")}], "encrypted_content": format!("enc {n}")});
        [
            event(json!({"type": "response.created", "response": {"status": "in_progress", "model": "m"}})),
            event(json!({"type": "response.reasoning_summary_text.delta", "output_index": 0,
                "delta": format!("thought {n}")})),
            event(json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning})),
            event(json!({"type": "response.output_text.delta", "output_index": 1,
                "delta": format!("answer {n}")})),
            event(json!({"type": "response.completed", "response": {"status": "completed",
                "usage": {"input_tokens": 10, "output_tokens": 4}}})),
        ]
        .concat()
    }

    #[tokio::test]
    async fn anthropic_turns_send_the_thinking_blocks_back_with_their_signatures() {
        for pass in [true, false] {
            let (addr, bodies) = capture(Box::new(|n| (200, "", anthropic_answer(n + 1)))).await;
            let p = plan(
                &format!("http://{addr}/v1"),
                "turns = 3\nfollow_ups = [\"Second?\", \"Third?\"]",
                &format!("api = \"anthropic\"\npass_reasoning = {pass}"),
            );
            let (recs, done) = run(&p, 0).await;
            assert_eq!(done.turns_not_sent, 0);
            assert!(recs.iter().all(|r| r.outcome() == Outcome::Ok
                && r.finish_reason.as_deref() == Some("stop")
                && r.reasoning_chunks == 2));
            let bodies = bodies.lock().unwrap();
            let head = bodies[0]["_head"].as_str().unwrap();
            assert!(head.starts_with("post /v1/messages "), "{head}");
            assert!(
                head.contains("\r\nanthropic-version: 2023-06-01\r\n"),
                "{head}"
            );
            // The Anthropic SDK's user agent, not the OpenAI one.
            assert!(
                head.contains("\r\nuser-agent: anthropic/python 2.15.0\r\n"),
                "{head}"
            );
            let assistant = |n: usize| {
                if pass {
                    json!({"role": "assistant", "content": [
                        {"type": "thinking", "thinking": format!("thought {n}"), "signature": format!("sig{n}ab")},
                        {"type": "redacted_thinking", "data": format!("enc{n}")},
                        {"type": "text", "text": format!("answer {n}")},
                    ]})
                } else {
                    json!({"role": "assistant", "content": format!("answer {n}")})
                }
            };
            let user = |t: &str| json!({"role": "user", "content": t});
            let mut want = bodies[0]["messages"].as_array().unwrap().clone();
            want.extend([assistant(1), user("Second?")]);
            assert_eq!(bodies[1]["messages"], Value::Array(want.clone()));
            want.extend([assistant(2), user("Third?")]);
            assert_eq!(bodies[2]["messages"], Value::Array(want));
        }
    }

    #[tokio::test]
    async fn responses_turns_pass_encrypted_reasoning_back_when_asked() {
        for pass in [true, false] {
            let (addr, bodies) = capture(Box::new(|n| (200, "", responses_answer(n + 1)))).await;
            let p = plan(
                &format!("http://{addr}/v1"),
                "turns = 2\nfollow_ups = [\"Second?\"]",
                &format!("api = \"responses\"\npass_reasoning = {pass}"),
            );
            let (recs, _) = run(&p, 0).await;
            assert_eq!(
                summary(&recs),
                [(1, 1, Outcome::Ok, true), (2, 1, Outcome::Ok, true)]
            );
            let bodies = bodies.lock().unwrap();
            assert!(
                bodies[0]["_head"]
                    .as_str()
                    .unwrap()
                    .starts_with("post /v1/responses ")
            );
            let turn1 = bodies[0]["input"].as_array().unwrap().clone();
            let mut want = turn1.clone();
            if pass {
                want.push(
                    json!({"type": "reasoning", "summary": [{"type": "summary_text",
                    "text": "thought 1"}], "encrypted_content": "enc 1"}),
                );
            }
            let message = |role: &str, part: &str, text: &str| json!({"type": "message", "role": role, "content": [{"type": part, "text": text}]});
            want.extend([
                message("assistant", "output_text", "answer 1"),
                message("user", "input_text", "Second?"),
            ]);
            assert_eq!(
                bodies[1]["input"],
                Value::Array(want),
                "pass_reasoning = {pass}"
            );
        }
    }

    fn thinker(passback: ReasoningPassback) -> ProviderProfile {
        ProviderProfile {
            prefill_us_per_input_token: 2_000,
            reasoning_tokens_min: 6,
            reasoning_tokens_max: 6,
            reasoning_passback: passback,
            ..quiet("thinker")
        }
    }

    #[tokio::test]
    async fn multi_turn_ttft_and_prompt_tokens_grow_with_the_history() {
        let addr = sim(vec![thinker(ReasoningPassback::Required)]).await;
        let p = plan(
            &format!("http://{addr}/thinker/v1"),
            "turns = 3",
            "pass_reasoning = true",
        );
        let (recs, done) = run(&p, 0).await;
        assert_eq!(done.turns_not_sent, 0);
        assert_eq!(
            summary(&recs),
            [
                (1, 1, Outcome::Ok, true),
                (2, 1, Outcome::Ok, true),
                (3, 1, Outcome::Ok, true),
            ]
        );
        let prompt: Vec<u32> = recs
            .iter()
            .map(|r| r.usage.prompt_tokens.unwrap())
            .collect();
        let ttft: Vec<u64> = recs.iter().map(|r| r.ttft_us.unwrap()).collect();
        // Each turn adds an answer (≥ 40 tokens + reasoning) and a follow-up: ≥ 40 more
        // prompt tokens, so ≥ 80 ms more prefill at 2 ms per token.
        for w in prompt.windows(2) {
            assert!(w[1] >= w[0] + 40, "prompt tokens {prompt:?}");
        }
        for w in ttft.windows(2) {
            assert!(w[1] >= w[0] + 60_000, "TTFT {ttft:?} µs");
        }
    }

    #[tokio::test]
    async fn a_provider_that_needs_the_reasoning_back_rejects_the_history() {
        let addr = sim(vec![thinker(ReasoningPassback::Required)]).await;
        let p = plan(
            &format!("http://{addr}/thinker/v1"),
            "turns = 3\nretry = {}",
            "pass_reasoning = false",
        );
        let (recs, done) = run(&p, 0).await;
        // Not retried (never is), and the conversation stops: turn 3 is not sent.
        assert_eq!(
            summary(&recs),
            [
                (1, 1, Outcome::Ok, true),
                (2, 1, Outcome::HistoryRejected, true)
            ]
        );
        assert_eq!(
            done,
            SlotDone {
                records: 2,
                turns_not_sent: 1
            }
        );
        let r = &recs[1];
        assert_eq!(r.http_status, Some(400));
        let msg = r.error_message.as_deref().unwrap();
        assert!(
            msg.contains("`reasoning_content` in assistant message 1"),
            "{msg}"
        );
        // DeepSeek's reasoner is the other way round: passing the reasoning back is refused.
        let addr = sim(vec![thinker(ReasoningPassback::Rejected)]).await;
        let p = plan(
            &format!("http://{addr}/thinker/v1"),
            "turns = 2",
            "pass_reasoning = true",
        );
        let (recs, _) = run(&p, 0).await;
        assert_eq!(recs[1].outcome(), Outcome::HistoryRejected);
        assert!(
            recs[1]
                .error_message
                .as_deref()
                .unwrap()
                .contains("not allowed")
        );
        // The builtin reasoner needs it back.
        let builtin = latmesh_sim::builtin_profiles()
            .into_iter()
            .find(|p| p.name == "reasoner")
            .unwrap();
        assert_eq!(builtin.reasoning_passback, ReasoningPassback::Required);
    }

    /// A failover campaign: `down` always throttles, `flaky5` always answers 503, `up` works.
    fn failover_plan(addr: SocketAddr, chain: &str, extra: &str) -> Plan {
        let mut text = format!(
            r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 1
interval_s = 10.0
gap_ms = 100
[[scenarios]]
name = "fo"
prompt_ids = ["short-qa-en-001"]
max_tokens = 16
failover = {{ chain = [{chain}]{extra} }}
"#
        );
        for name in ["down", "up", "spare"] {
            text.push_str(&format!(
                "[[providers]]\nname = \"{name}\"\nbase_url = \"http://{addr}/{name}/v1\"\nmodel_id = \"m\"\n"
            ));
        }
        latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
    }

    async fn failover_sim() -> SocketAddr {
        sim(vec![
            ProviderProfile {
                throttle_prob: 1.0,
                ..ProviderProfile::fixed("down", 20_000, 1_000)
            },
            ProviderProfile::fixed("up", 30_000, 1_000),
            ProviderProfile::fixed("spare", 30_000, 1_000),
        ])
        .await
    }

    #[tokio::test]
    async fn failover_retries_once_then_switches_and_reports_the_client_s_latency() {
        let addr = failover_sim().await;
        let plan = failover_plan(addr, r#""down", "up", "spare""#, "");
        // A round: the client request through the chain, then each backup on its own.
        let order = plan.round_order(0);
        assert_eq!(order.len(), 3);
        assert_eq!(order.iter().filter(|s| s.failover).count(), 1);
        let chain_slot = *order.iter().find(|s| s.failover).unwrap();
        assert_eq!(chain_slot.provider, 0);
        let prober = Prober::new(None).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let at = SlotRef::rounds(0, 0, chain_slot, Instant::now());
        let done = run_slot(&plan, at, &prober, &tx).await;
        drop(tx);
        let mut records = Vec::new();
        while let Some((r, _)) = rx.recv().await {
            records.push(r);
        }
        let seen: Vec<(&str, u32, Outcome, bool)> = records
            .iter()
            .map(|r| (r.provider.as_str(), r.attempt, r.outcome(), r.final_attempt))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("down", 1, Outcome::Throttled, false),
                ("down", 2, Outcome::Throttled, false),
                ("up", 3, Outcome::Ok, true),
            ]
        );
        assert_eq!(done.records, 3);
        assert!(records.iter().all(|r| r.failover && r.scenario == "fo"));
        // The client waited for both refusals and the backup's whole answer.
        let last = &records[2];
        let total = last.request_latency_us.unwrap();
        let refusals: u64 = records[..2].iter().map(|r| r.ttfb_us.unwrap()).sum();
        assert!(
            total >= last.e2e_us.unwrap() + refusals,
            "{total} µs vs {records:?}"
        );
        // The backups' own probes are plain slots of the same scenario.
        let plain = *order
            .iter()
            .find(|s| !s.failover && s.provider == 2)
            .unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        run_slot(
            &plan,
            SlotRef::rounds(0, 1, plain, Instant::now()),
            &prober,
            &tx,
        )
        .await;
        drop(tx);
        let r = rx.recv().await.unwrap().0;
        assert_eq!(
            (r.provider.as_str(), r.failover, r.outcome()),
            ("spare", false, Outcome::Ok)
        );
    }

    #[tokio::test]
    async fn failover_ends_when_the_chain_is_exhausted_or_the_outcome_is_not_listed() {
        let addr = failover_sim().await;
        let prober = Prober::new(None).unwrap();
        let run = |plan: Plan| {
            let prober = &prober;
            async move {
                let slot = *plan.round_order(0).iter().find(|s| s.failover).unwrap();
                let (tx, mut rx) = mpsc::channel(64);
                run_slot(
                    &plan,
                    SlotRef::rounds(0, 0, slot, Instant::now()),
                    prober,
                    &tx,
                )
                .await;
                drop(tx);
                let mut out = Vec::new();
                while let Some((r, _)) = rx.recv().await {
                    out.push((r.provider.clone(), r.outcome(), r.final_attempt));
                }
                out
            }
        };
        // One attempt per provider, both down: the client's request fails on the last.
        let both_down = run(failover_plan(
            addr,
            r#""down", "up""#,
            ", attempts = 1, on = [\"http_5xx\"]",
        ))
        .await;
        assert_eq!(
            both_down,
            vec![("down".to_string(), Outcome::Throttled, true)]
        );
        let plan = failover_plan(addr, r#""down", "up""#, ", attempts = 1");
        let switched = run(plan).await;
        assert_eq!(
            switched,
            vec![
                ("down".to_string(), Outcome::Throttled, false),
                ("up".to_string(), Outcome::Ok, true)
            ]
        );
    }

    /// `stream_usage = "auto"`: a 400 naming `stream_options` stays a record as it is, then
    /// this agent stops asking that provider (later requests go without the field and say
    /// so in `usage_requested`); the provider's shaping (query, scenario + provider
    /// `extra_body`, secret header, auth header) reaches the wire.
    #[tokio::test]
    async fn a_refused_stream_options_is_dropped_for_the_provider_after_one_attempt() {
        let (addr, bodies) = capture(Box::new(|n| {
            if n == 0 {
                (
                    400,
                    "",
                    r#"{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":"stream_options"}}"#.to_string(),
                )
            } else {
                (200, "", sse_answer(n))
            }
        }))
        .await;
        // SAFETY: a variable only this test uses.
        unsafe { std::env::set_var("LATMESH_TEST_RUNNER_HDR", "hdr-secret-9z8y7x") };
        let p = plan(
            &format!("http://{addr}/v1"),
            "extra_body = { chat_template_kwargs = { enable_thinking = false }, top_k = 5 }",
            "auth = { header = \"api-key\" }\nquery = { \"api-version\" = \"2024-10-21\" }\n\
             headers = { \"x-sec\" = { env = \"LATMESH_TEST_RUNNER_HDR\" } }\nextra_body = { top_k = 7 }",
        );
        let prober = Prober::new(None).unwrap();
        let env = SlotEnv {
            shaping: Arc::new(crate::shaping::Shaping::new(&p)),
            ..SlotEnv::default()
        };
        let (tx, mut rx) = mpsc::channel(64);
        for round in 0..3 {
            let at = SlotRef::rounds(round, 0, Slot::new(0, 0), Instant::now());
            run_slot_with(&p, at, &prober, &tx, &env).await;
        }
        drop(tx);
        let mut recs = Vec::new();
        while let Some((r, _)) = rx.recv().await {
            recs.push(r);
        }
        assert_eq!(
            recs.iter()
                .map(|r| (r.outcome(), r.usage_requested))
                .collect::<Vec<_>>(),
            [
                (Outcome::Http4xx, true),
                (Outcome::Ok, false),
                (Outcome::Ok, false)
            ]
        );
        let bodies = bodies.lock().unwrap();
        assert_eq!(bodies[0]["stream_options"]["include_usage"], true);
        for b in &bodies[1..] {
            assert_eq!(b.get("stream_options"), None, "{b}");
        }
        for b in bodies.iter() {
            assert_eq!(b["top_k"], 7, "the provider's extra_body wins");
            assert_eq!(b["chat_template_kwargs"]["enable_thinking"], false);
            let head = b["_head"].as_str().unwrap();
            assert!(
                head.starts_with("post /v1/chat/completions?api-version=2024-10-21 "),
                "{head}"
            );
            assert!(head.contains("\r\nx-sec: hdr-secret-9z8y7x"), "{head}");
            assert!(!head.contains("authorization"), "{head}");
        }
        // Another run (a new Shaping) asks again; `always` never stops asking.
        let fresh = crate::shaping::Shaping::new(&p);
        assert!(
            fresh.shape(&p, 0, &p.scenarios[0]).stream_usage
                == latmesh_core::api::StreamUsage::Auto
        );
        let mut always = p.clone();
        always.providers[0].request.stream_usage = latmesh_core::api::StreamUsage::Always;
        let sh = crate::shaping::Shaping::new(&always);
        sh.after_attempt(0, "p", &always.providers[0].request, &recs[0], &[]);
        assert_eq!(
            sh.shape(&always, 0, &always.scenarios[0]).stream_usage,
            latmesh_core::api::StreamUsage::Always
        );
    }
}
