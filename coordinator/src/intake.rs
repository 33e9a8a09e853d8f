//! The coordinator's boundary for agents' result batches: every value of a
//! [`pb::ResultBatch`] is checked against the protocol's limits and the campaign's plan before
//! any costly work (histogram decoding, merging, spooling), so a hostile or broken agent
//! cannot make the coordinator allocate, compute or store more than its limits allow.
//!
//! An agent's hello is bounded too ([`check_hello`]): its id, region and version are listed
//! by `latmesh agents` and in progress messages; at most [`MAX_KEY_ENV_NAMES`] key variable
//! names of at most [`MAX_KEY_ENV_NAME_BYTES`] (kept while its session lasts, dropped when it
//! disconnects).
//!
//! Checking and decoding run on blocking threads ([`crate::state::check_off_runtime`]), one batch at a time
//! per session and on at most half the cores at once, so control calls keep the async runtime.
//!
//! # The rule (README "Security")
//!
//! - **The batch is rejected** ([`crate::state::StateError::BadBatch`], the message naming the
//!   field) when a value only the agent produces is out of its limits: that agent is broken
//!   or hostile, and a batch is stored whole or not at all (it is de-duplicated by its seq):
//!   - `seq` is 0 or more than [`SEQ_WINDOW`] past the highest seq received from the agent in
//!     this campaign (so `u64::MAX` never is; no seq arithmetic can overflow);
//!   - more than [`MAX_RECORDS_PER_BATCH`] records, or more histograms than the plan has keys
//!     ([`max_histograms`]);
//!   - a provider or scenario that is not in the campaign's plan, a `step` beyond the
//!     scenario's sweep steps (0 for other loads), a `prompt_id` longer than
//!     [`MAX_TEXT_BYTES`];
//!   - a record's plan numbers: a `load` other than its scenario's, a `round` not below the
//!     plan's rounds (0 outside `rounds`), a `slot` not below its scenario's slots (a round's
//!     slots, a rate's arrivals, a sweep's `step_requests`), an `attempt` outside 1 to the
//!     scenario's attempts ([`latmesh_core::plan::ScenarioSpec::max_attempts`]: retries, failover chain), a `turn` outside 1 to
//!     its turns, a `concurrency` other than its sweep step's (0 for other loads); more than
//!     [`MAX_CUT_FIELDS`] `cut_fields` or one longer than [`MAX_CUT_FIELD_BYTES`];
//!   - a timestamp (`send_agent_unix_us`, a histogram's interval) outside 0 to the end of
//!     year 9999 ([`MAX_UNIX_US`]), a `clock_offset_us` of more than a year either way
//!     ([`MAX_CLOCK_OFFSET_US`]; the same bounds apply to a `done` notice, [`check_done`]);
//!   - a duration (`*_us`) or `sched_lag_us` longer than twice the campaign's span (round 0 to
//!     its deadline) plus a day, or a negative `sched_lag_us`: a loose bound on purpose, since
//!     honest attempts can outlast the deadline (a provider's Retry-After pause of up to an
//!     hour, caps on later turns): only values no agent of the plan can measure are refused;
//!   - a histogram blob longer than [`MAX_HISTOGRAM_BYTES`], one whose interval ends before it
//!     starts, or (when decoded) whose header does not carry latmesh's bounds
//!     ([`latmesh_core::hist_sparse::decode_v2_sparse_strict`]).
//! - **The value is cut or refused and the batch is stored** when the value is what a
//!   provider answered (the agent only relays it, and one provider must not silence an
//!   agent's other providers): the text fields `finish_reason`, `error_type`, `error_code`,
//!   `error_message`, `answered_model`, `system_fingerprint` are cut to [`MAX_TEXT_BYTES`]
//!   (on a character boundary, `…` appended); `decode_tps` and `retry_after_s` that are NaN,
//!   infinite or negative, a `decode_tps` above [`MAX_DECODE_TPS`], a `usage_chunk_delta`
//!   beyond ±`u32::MAX`, an `http_status` outside 100..=999 (three digits: any status an
//!   HTTP client can report is stored as the provider sent it, 799 included) and a token
//!   count (`output_tokens`, `prompt_tokens`, …) above
//!   [`latmesh_core::provider_bounds::MAX_USAGE_TOKENS`] (the agent's own bound) are dropped
//!   (absent; `output_tokens` 0); a token total beyond `u32` is absent
//!   ([`latmesh_core::wire`]). What was cut is counted in [`Sanitized`] and logged as a
//!   warning naming the agent.
//!
//! A `done` notice is checked too ([`check_done`]: its clock facts, its quarantine counts
//! against what the plan can produce, at most [`MAX_QUARANTINED_SEQS`] quarantined seqs
//! within the seq window; else it is refused naming the field), and so is a heartbeat
//! ([`heartbeat_facts`]: a clock offset or uncertainty over a year, an `in_flight` over
//! [`MAX_IN_FLIGHT`], a `batches_quarantined` over [`SEQ_WINDOW`] is ignored with a warning,
//! the last sane value staying shown).
//!
//! These are the coordinator's checks; the agent bounds what providers send before it
//! relays it ([`latmesh_core::provider_bounds`]), and the coordinator does not rely on it.

use latmesh_core::load::{LoadKind, LoadModel, RateSpec};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::provider_bounds::MAX_USAGE_TOKENS;
use latmesh_core::record::truncate_message;
use latmesh_proto::pb;

/// How far past the highest seq received from an agent (in a campaign) its next batch's seq
/// may be: batches an agent numbered while disconnected arrive later, a million of them is
/// more than a week of one-second batches.
pub const SEQ_WINDOW: u64 = 1_000_000;

/// Most records in one batch.
pub const MAX_RECORDS_PER_BATCH: usize = 100_000;

/// Longest text field of a record, bytes: longer provider texts are cut, a longer
/// `prompt_id` rejects the batch. At least the agents' own bounds, so an agent's records pass
/// whole.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// Longest encoded histogram, bytes: a blob in latmesh's bounds holds at most
/// [`latmesh_core::hist_sparse::MAX_PAYLOAD_BYTES`] of payload, plus its header and the
/// DEFLATE framing.
pub const MAX_HISTOGRAM_BYTES: usize = 256 * 1024;

/// Longest agent id, region or version in an agent's hello, bytes:
/// they are listed by `latmesh agents` and in every progress message.
pub const MAX_HELLO_FIELD_BYTES: usize = 256;

/// Latest wall-clock time an agent may report, UTC µs (the end of year 9999): timestamps
/// and offsets within their limits add without overflow.
pub const MAX_UNIX_US: i64 = 253_402_300_799_999_999;

/// Largest clock offset or uncertainty an agent may report, µs (a year: an agent clock off
/// by more is broken).
pub const MAX_CLOCK_OFFSET_US: i64 = 366 * 86_400 * 1_000_000;

/// Most agents the coordinator keeps (connected or not): `latmesh agents` lists them all in
/// one message, each at most ~1 KiB with the hello's limits.
pub const MAX_KNOWN_AGENTS: usize = 2_000;

/// Most API key variable names an agent's hello may list; each at most
/// [`MAX_KEY_ENV_NAME_BYTES`] long (the agent keeps to both).
pub use latmesh_core::wire::{MAX_KEY_ENV_NAME_BYTES, MAX_KEY_ENV_NAMES};

/// Most seqs a `done` notice may list as quarantined (the proto's bound).
pub const MAX_QUARANTINED_SEQS: usize = 1024;

/// Most entries of a record's `cut_fields`: an agent names each provider field it cut once,
/// and a record has far fewer provider fields.
pub const MAX_CUT_FIELDS: usize = 32;

/// Longest entry of a record's `cut_fields`, bytes (field names such as
/// `usage.prompt_tokens`).
pub const MAX_CUT_FIELD_BYTES: usize = 64;

/// Largest `decode_tps` kept, tokens per second: no provider decodes ten million tokens a
/// second, a larger rate is a broken clock or count and would poison means.
pub const MAX_DECODE_TPS: f64 = 1e7;

/// Largest `in_flight` a heartbeat may report (an agent's attempts in flight): more is
/// ignored (the last sane value stays shown).
pub const MAX_IN_FLIGHT: u32 = 1_000_000;

/// Checks an agent's hello against the limits above.
///
/// # Errors
/// A message naming the field and its limit.
pub fn check_hello(hello: &pb::AgentHello) -> Result<(), String> {
    for (field, value) in [
        ("agent_id", &hello.agent_id),
        ("region", &hello.region),
        ("version", &hello.version),
    ] {
        if value.len() > MAX_HELLO_FIELD_BYTES {
            return Err(format!(
                "AgentHello.{field} of {} bytes is longer than {MAX_HELLO_FIELD_BYTES}",
                value.len()
            ));
        }
    }
    if hello.key_env_names.len() > MAX_KEY_ENV_NAMES {
        return Err(format!(
            "AgentHello.key_env_names lists {} names, more than {MAX_KEY_ENV_NAMES}",
            hello.key_env_names.len()
        ));
    }
    if let Some(long) = hello
        .key_env_names
        .iter()
        .find(|n| n.len() > MAX_KEY_ENV_NAME_BYTES)
    {
        return Err(format!(
            "AgentHello.key_env_names has a name of {} bytes, longer than {MAX_KEY_ENV_NAME_BYTES}",
            long.len()
        ));
    }
    Ok(())
}

/// Checks an agent's `done` notice before it is noted: its clock facts (its start on the
/// coordinator's clock, its clock offset and uncertainty) against [`MAX_UNIX_US`] and
/// [`MAX_CLOCK_OFFSET_US`] (the summary's start skew subtracts and adds them); its quarantine
/// counts against what `plan` can produce ([`max_attempt_records`], and as many histograms per
/// metric), its `quarantined_seqs` against [`MAX_QUARANTINED_SEQS`] and the seq window
/// (1 to [`SEQ_WINDOW`] past `highest_seq`, the highest seq received from the agent).
///
/// # Errors
/// A message naming the field and its limit.
pub fn check_done(done: &pb::CampaignDone, plan: &Plan, highest_seq: u64) -> Result<(), String> {
    check_unix_us(
        "CampaignDone.started_coord_unix_us",
        done.started_coord_unix_us,
    )?;
    check_offset_us("CampaignDone.clock_offset_us", done.clock_offset_us)?;
    check_offset_us(
        "CampaignDone.clock_uncertainty_us",
        i64::try_from(done.clock_uncertainty_us).unwrap_or(i64::MAX),
    )?;
    let records = max_attempt_records(plan);
    let histograms = records.saturating_mul(Metric::ALL.len() as u64);
    for (field, value, max) in [
        ("records_quarantined", done.records_quarantined, records),
        (
            "histograms_quarantined",
            done.histograms_quarantined,
            histograms,
        ),
    ] {
        if value > max {
            return Err(format!(
                "CampaignDone.{field} {value} is more than the plan can produce ({max})"
            ));
        }
    }
    if done.quarantined_seqs.len() > MAX_QUARANTINED_SEQS {
        return Err(format!(
            "CampaignDone.quarantined_seqs lists {} seqs, more than {MAX_QUARANTINED_SEQS}",
            done.quarantined_seqs.len()
        ));
    }
    let last = highest_seq.saturating_add(SEQ_WINDOW);
    if let Some(seq) = done
        .quarantined_seqs
        .iter()
        .find(|&&s| !(1..=last).contains(&s))
    {
        return Err(format!(
            "CampaignDone.quarantined_seqs has seq {seq}, outside 1..={last} (the seq window)"
        ));
    }
    Ok(())
}

/// What an agent's heartbeat may change of its row in `latmesh agents`, each value within
/// its bounds: `None` for a value ignored (logged as a warning by [`heartbeat_facts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatFacts {
    /// Clock offset and uncertainty (µs), both within [`MAX_CLOCK_OFFSET_US`].
    pub clock: Option<(i64, u64)>,
    /// Attempts in flight, at most [`MAX_IN_FLIGHT`].
    pub in_flight: Option<u32>,
    /// Batches quarantined by the agent process, at most [`SEQ_WINDOW`] (each a seq it
    /// numbered; more is not a count).
    pub batches_quarantined: Option<u64>,
}

/// Heartbeat values ignored, logged: at most 20 a minute (an agent sends a heartbeat every
/// few seconds), the rest counted in the next line.
static HEARTBEAT_WARNINGS: latmesh_core::log_limit::LogLimit =
    latmesh_core::log_limit::LogLimit::new(20, std::time::Duration::from_secs(60));

/// The facts of `hb` within their bounds (the same clock bounds as a `done` notice); a value
/// beyond them is ignored with a warning naming the agent and the field (at most 20 such
/// lines a minute).
pub fn heartbeat_facts(agent: &str, hb: &pb::Heartbeat) -> HeartbeatFacts {
    let clock = check_offset_us("Heartbeat.clock_offset_us", hb.clock_offset_us)
        .and_then(|()| {
            check_offset_us(
                "Heartbeat.clock_uncertainty_us",
                i64::try_from(hb.clock_uncertainty_us).unwrap_or(i64::MAX),
            )
        })
        .map(|()| (hb.clock_offset_us, hb.clock_uncertainty_us));
    let in_flight = if hb.in_flight <= MAX_IN_FLIGHT {
        Ok(hb.in_flight)
    } else {
        Err(format!(
            "Heartbeat.in_flight {} is more than {MAX_IN_FLIGHT}",
            hb.in_flight
        ))
    };
    let quarantined = if hb.batches_quarantined <= SEQ_WINDOW {
        Ok(hb.batches_quarantined)
    } else {
        Err(format!(
            "Heartbeat.batches_quarantined {} is more than {SEQ_WINDOW}",
            hb.batches_quarantined
        ))
    };
    fn ignored<T>(agent: &str, r: Result<T, String>) -> Option<T> {
        r.map_err(|e| {
            if let Some(suppressed) = HEARTBEAT_WARNINGS.allow() {
                tracing::warn!(%agent, suppressed, "heartbeat value ignored: {e}");
            }
        })
        .ok()
    }
    HeartbeatFacts {
        clock: ignored(agent, clock),
        in_flight: ignored(agent, in_flight),
        batches_quarantined: ignored(agent, quarantined),
    }
}

fn check_unix_us(field: &str, us: i64) -> Result<(), String> {
    if (0..=MAX_UNIX_US).contains(&us) {
        Ok(())
    } else {
        Err(format!("{field} {us} is outside 0..={MAX_UNIX_US} µs"))
    }
}

fn check_offset_us(field: &str, us: i64) -> Result<(), String> {
    if (-MAX_CLOCK_OFFSET_US..=MAX_CLOCK_OFFSET_US).contains(&us) {
        Ok(())
    } else {
        Err(format!(
            "{field} {us} µs is more than a year ({MAX_CLOCK_OFFSET_US} µs) either way"
        ))
    }
}

/// What [`check_batch`] checks a batch against: the campaign's plan and the agent's seqs.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The campaign's plan.
    pub plan: &'a Plan,
    /// The highest seq received from this agent in this campaign (0: none yet).
    pub highest_seq: u64,
    /// Longest duration a record may report, µs: twice the campaign's span (round 0 to its
    /// deadline) plus a day.
    pub max_duration_us: u64,
}

/// What [`check_batch`] cut or dropped from a batch it accepted (provider values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sanitized {
    /// Text fields cut to [`MAX_TEXT_BYTES`].
    pub texts_cut: u64,
    /// Numbers dropped as out of range (NaN, infinite, negative rates and waits).
    pub numbers_dropped: u64,
}

impl Sanitized {
    /// Whether nothing was cut or dropped.
    pub fn is_clean(&self) -> bool {
        *self == Sanitized::default()
    }
}

/// Most histograms a batch of `plan` can carry: one per (provider, scenario, metric, step).
pub fn max_histograms(plan: &Plan) -> usize {
    let steps: usize = plan.scenarios.iter().map(|s| steps_of(&s.load)).sum();
    plan.providers
        .len()
        .saturating_mul(steps)
        .saturating_mul(Metric::ALL.len())
}

/// Steps of a load: a sweep's concurrency steps, a rate's steps (its `rps` list or ramp, or
/// its SLO search's steps), 1 for rounds.
fn steps_of(load: &LoadModel) -> usize {
    match load {
        LoadModel::Sweep(sw) => sw.concurrency.len().max(1),
        LoadModel::Rate(r) => r.step_count().max(1) as usize,
        LoadModel::Rounds => 1,
    }
}

/// Arrivals the rate phase `r` of scenario `i` gives one provider on one agent, at most, over
/// every step (a record's `slot` counts them over the whole phase): each fixed step's count;
/// under an SLO search, whose rates are chosen while it runs (each at most `max_rps`), twice
/// a step's count at `max_rps` plus 64 per step (a Poisson or gamma draw at a lower rate can
/// exceed the draw at `max_rps`, never by that much).
fn rate_arrivals_bound(plan: &Plan, i: usize, r: &RateSpec) -> u64 {
    (0..r.step_count())
        .map(|k| match (&r.search, r.step_rps(k)) {
            (Some(search), _) => r
                .count_at(plan.seed, i, k, search.max_rps)
                .saturating_mul(2)
                .saturating_add(64),
            (None, Some(rps)) => r.count_at(plan.seed, i, k, rps),
            (None, None) => 0,
        })
        .fold(0, u64::saturating_add)
}

/// Logical requests scenario `i` of `plan` makes on one agent, at most: every round's slots,
/// every arrival of a rate, every request a sweep's workers can send (its `step_requests`,
/// else one per microsecond of the step per worker: a bound, not an estimate).
fn max_requests(plan: &Plan, i: usize) -> u64 {
    let s = &plan.scenarios[i];
    let slots = plan.scenario_slots(i).len() as u64;
    match &s.load {
        LoadModel::Rounds => u64::from(plan.rounds.count).saturating_mul(slots),
        LoadModel::Rate(r) => rate_arrivals_bound(plan, i, r).saturating_mul(slots),
        LoadModel::Sweep(sw) => sw
            .concurrency
            .iter()
            .map(|&c| match sw.step_requests {
                Some(n) => u64::from(n),
                None => u64::from(c).saturating_mul(sw.step_ms.saturating_mul(1000)),
            })
            .fold(0u64, u64::saturating_add)
            .saturating_mul(slots),
    }
}

/// Most records (attempts of every turn) one agent can make in `plan`: what a `done` notice
/// may count as quarantined.
pub fn max_attempt_records(plan: &Plan) -> u64 {
    (0..plan.scenarios.len())
        .map(|i| {
            let s = &plan.scenarios[i];
            max_requests(plan, i)
                .saturating_mul(u64::from(s.max_attempts()))
                .saturating_mul(u64::from(s.policy.turns.max(1)))
        })
        .fold(0u64, u64::saturating_add)
}

/// What a record of one scenario may carry ([`check_batch`] builds them once per batch).
#[derive(Clone, Debug)]
struct ScenarioBounds {
    load: LoadKind,
    /// A sweep's step concurrencies (empty for other loads: their step and concurrency are 0).
    concurrency: Vec<u32>,
    /// Rounds of the plan (rounds scenarios; 1 for others, whose round is 0).
    rounds: u64,
    /// Slots a record's `slot` indexes (`None`: unbounded, a sweep without `step_requests`).
    slots: Option<u64>,
    max_attempts: u32,
    turns: u32,
}

fn scenario_bounds(plan: &Plan) -> Vec<ScenarioBounds> {
    let per_round = plan.slots_per_round() as u64;
    plan.scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (concurrency, rounds, slots) = match &s.load {
                LoadModel::Rounds => (Vec::new(), u64::from(plan.rounds.count), Some(per_round)),
                LoadModel::Rate(r) => (Vec::new(), 1, Some(rate_arrivals_bound(plan, i, r))),
                LoadModel::Sweep(sw) => {
                    (sw.concurrency.clone(), 1, sw.step_requests.map(u64::from))
                }
            };
            ScenarioBounds {
                load: s.load.kind(),
                concurrency,
                rounds,
                slots,
                max_attempts: s.max_attempts(),
                turns: s.policy.turns.max(1),
            }
        })
        .collect()
}

/// The plan numbers of a record of scenario bounds `b`. Errors start with the field's name.
fn check_plan_numbers(b: &ScenarioBounds, r: &pb::ProbeRecord) -> Result<(), String> {
    let load = LoadKind::parse(&r.load).ok_or_else(|| {
        format!(
            "load {:?} is not a load model",
            truncate_message(&r.load, 64)
        )
    })?;
    if load != b.load {
        return Err(format!(
            "load {:?} is not its scenario's ({:?})",
            load.as_str(),
            b.load.as_str()
        ));
    }
    if u64::from(r.round) >= b.rounds {
        return Err(format!(
            "round {} is out of range: the plan has {} round(s) for it",
            r.round, b.rounds
        ));
    }
    if let Some(slots) = b.slots
        && u64::from(r.slot) >= slots
    {
        return Err(format!(
            "slot {} is out of range: its scenario has {slots} slot(s)",
            r.slot
        ));
    }
    if !(1..=b.max_attempts).contains(&r.attempt) {
        return Err(format!(
            "attempt {} is outside 1..={} (its scenario's attempts)",
            r.attempt, b.max_attempts
        ));
    }
    if !(1..=b.turns).contains(&r.turn) {
        return Err(format!(
            "turn {} is outside 1..={} (its scenario's turns)",
            r.turn, b.turns
        ));
    }
    let want = b.concurrency.get(r.step as usize).copied().unwrap_or(0);
    if r.concurrency != want {
        return Err(format!(
            "concurrency {} is not its step's ({want})",
            r.concurrency
        ));
    }
    if r.cut_fields.len() > MAX_CUT_FIELDS {
        return Err(format!(
            "cut_fields lists {} fields, more than {MAX_CUT_FIELDS}",
            r.cut_fields.len()
        ));
    }
    if let Some(long) = r.cut_fields.iter().find(|f| f.len() > MAX_CUT_FIELD_BYTES) {
        return Err(format!(
            "cut_fields has a name of {} bytes, longer than {MAX_CUT_FIELD_BYTES}",
            long.len()
        ));
    }
    Ok(())
}

/// Checks `batch` against `expected` before anything decodes it; cuts and drops the provider
/// values beyond their limits in place (see the [module docs](self) for which field does
/// what).
///
/// # Errors
/// A message naming the field and its limit when the batch must be rejected whole.
pub fn check_batch(expected: &Expected, batch: &mut pb::ResultBatch) -> Result<Sanitized, String> {
    check_seq(batch.seq, expected.highest_seq)?;
    check_offset_us("clock_offset_us", batch.clock_offset_us)?;
    if batch.records.len() > MAX_RECORDS_PER_BATCH {
        return Err(format!(
            "{} records, more than {MAX_RECORDS_PER_BATCH} in one batch",
            batch.records.len()
        ));
    }
    let max_histograms = max_histograms(expected.plan);
    if batch.histograms.len() > max_histograms {
        return Err(format!(
            "{} histograms, more than the {max_histograms} keys of the plan (provider × scenario × metric × step)",
            batch.histograms.len()
        ));
    }
    for (i, h) in batch.histograms.iter().enumerate() {
        check_histogram(expected.plan, h).map_err(|e| format!("histograms[{i}].{e}"))?;
    }
    let mut cut = Sanitized::default();
    let bounds = if batch.records.is_empty() {
        Vec::new()
    } else {
        scenario_bounds(expected.plan)
    };
    for (i, r) in batch.records.iter_mut().enumerate() {
        check_record(expected, &bounds, r, &mut cut).map_err(|e| format!("records[{i}].{e}"))?;
    }
    Ok(cut)
}

/// `seq` within the continuity window past `highest`.
fn check_seq(seq: u64, highest: u64) -> Result<(), String> {
    if seq == 0 {
        return Err("seq 0: batches are numbered from 1".into());
    }
    let limit = highest.saturating_add(SEQ_WINDOW);
    if seq > limit {
        return Err(format!(
            "seq {seq} is more than {SEQ_WINDOW} past the highest seq received ({highest})"
        ));
    }
    Ok(())
}

/// A provider and scenario of the plan, and a step of that scenario; the scenario's index.
/// Errors start with the field's name.
fn check_names(plan: &Plan, provider: &str, scenario: &str, step: u32) -> Result<usize, String> {
    if !plan.providers.iter().any(|p| p.name == provider) {
        return Err(format!(
            "provider {:?} is not a provider of the plan",
            truncate_message(provider, 64)
        ));
    }
    let Some((i, s)) = plan
        .scenarios
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == scenario)
    else {
        return Err(format!(
            "scenario {:?} is not a scenario of the plan",
            truncate_message(scenario, 64)
        ));
    };
    let steps = steps_of(&s.load);
    if step as usize >= steps {
        return Err(format!(
            "step {step} is out of range: scenario {scenario:?} has {steps} step(s)"
        ));
    }
    Ok(i)
}

fn check_histogram(plan: &Plan, h: &pb::IntervalHistogram) -> Result<(), String> {
    check_names(plan, &h.provider, &h.scenario, h.step)?;
    if Metric::parse(&h.metric).is_none() {
        return Err(format!(
            "metric {:?} is not a metric",
            truncate_message(&h.metric, 64)
        ));
    }
    if h.hist_v2.len() > MAX_HISTOGRAM_BYTES {
        return Err(format!(
            "hist_v2 of {} bytes is longer than {MAX_HISTOGRAM_BYTES}",
            h.hist_v2.len()
        ));
    }
    check_unix_us("start_agent_unix_us", h.start_agent_unix_us)?;
    check_unix_us("end_agent_unix_us", h.end_agent_unix_us)?;
    if h.end_agent_unix_us < h.start_agent_unix_us {
        return Err(format!(
            "end_agent_unix_us {} is before start_agent_unix_us {}",
            h.end_agent_unix_us, h.start_agent_unix_us
        ));
    }
    Ok(())
}

fn check_record(
    expected: &Expected,
    bounds: &[ScenarioBounds],
    r: &mut pb::ProbeRecord,
    cut: &mut Sanitized,
) -> Result<(), String> {
    let scenario = check_names(expected.plan, &r.provider, &r.scenario, r.step)?;
    check_plan_numbers(&bounds[scenario], r)?;
    if r.prompt_id.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "prompt_id of {} bytes is longer than {MAX_TEXT_BYTES}",
            r.prompt_id.len()
        ));
    }
    check_unix_us("send_agent_unix_us", r.send_agent_unix_us)?;
    let max = expected.max_duration_us;
    let durations = [
        ("ttfb_us", r.ttfb_us),
        ("ttft_us", r.ttft_us),
        ("ttfc_us", r.ttfc_us),
        ("e2e_us", r.e2e_us),
        ("tpot_us", r.tpot_us),
        ("itl_max_us", r.itl_max_us),
        ("request_latency_us", r.request_latency_us),
        ("dns_us", r.dns_us),
        ("connect_us", r.connect_us),
        ("tls_us", r.tls_us),
        ("first_byte_us", r.first_byte_us),
        ("first_nonblank_us", r.first_nonblank_us),
        ("reasoning_us", r.reasoning_us),
    ];
    for (field, value) in durations {
        if let Some(v) = value
            && v > max
        {
            return Err(format!(
                "{field} {v} µs is longer than any attempt of the campaign can last ({max} µs)"
            ));
        }
    }
    if r.sched_lag_us < 0 || r.sched_lag_us as u64 > max {
        return Err(format!(
            "sched_lag_us {} µs is outside 0..={max} µs (longer than the campaign can last)",
            r.sched_lag_us
        ));
    }
    // What is cut or dropped here is named in the record's `cut_fields`, as the agent names
    // what it changed (an older or buggy agent's record says so too).
    let mut named: Vec<&'static str> = Vec::new();
    for (field, text) in [
        ("finish_reason", &mut r.finish_reason),
        ("error_type", &mut r.error_type),
        ("error_code", &mut r.error_code),
        ("error_message", &mut r.error_message),
        ("answered_model", &mut r.answered_model),
        ("system_fingerprint", &mut r.system_fingerprint),
    ] {
        if let Some(text) = text
            && text.len() > MAX_TEXT_BYTES
        {
            *text = truncate_message(text, MAX_TEXT_BYTES);
            cut.texts_cut += 1;
            named.push(field);
        }
    }
    for (field, rate) in [
        ("decode_tps", &mut r.decode_tps),
        ("retry_after_s", &mut r.retry_after_s),
    ] {
        if rate.is_some_and(|v| !v.is_finite() || v < 0.0) {
            *rate = None;
            cut.numbers_dropped += 1;
            named.push(field);
        }
    }
    if r.decode_tps.is_some_and(|v| v > MAX_DECODE_TPS) {
        r.decode_tps = None;
        cut.numbers_dropped += 1;
        named.push("decode_tps");
    }
    if r.http_status.is_some_and(|s| !(100..=999).contains(&s)) {
        r.http_status = None;
        cut.numbers_dropped += 1;
        named.push("http_status");
    }
    if r.output_tokens > MAX_USAGE_TOKENS {
        // Not optional on the wire: 0, as for an answer with no token counted.
        r.output_tokens = 0;
        cut.numbers_dropped += 1;
        named.push("output_tokens");
    }
    for (field, count) in [
        ("usage.prompt_tokens", &mut r.prompt_tokens),
        ("usage.completion_tokens", &mut r.completion_tokens),
        ("usage.reasoning_tokens", &mut r.reasoning_tokens),
        ("usage.cached_tokens", &mut r.cached_tokens),
    ] {
        if count.is_some_and(|c| c > MAX_USAGE_TOKENS) {
            *count = None;
            cut.numbers_dropped += 1;
            named.push(field);
        }
    }
    if r.usage_chunk_delta
        .is_some_and(|d| d.unsigned_abs() > u64::from(u32::MAX))
    {
        r.usage_chunk_delta = None;
        cut.numbers_dropped += 1;
        named.push("usage_chunk_delta");
    }
    for field in named {
        if !r.cut_fields.iter().any(|f| f == field) {
            r.cut_fields.push(field.to_string());
        }
    }
    Ok(())
}

/// Batches decoded at once over every session: half the cores (at least one), so that a
/// flood of batches leaves the other half to control calls and the runtime.
static DECODE_SLOTS: std::sync::LazyLock<tokio::sync::Semaphore> = std::sync::LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::sync::Semaphore::new((cores / 2).max(1))
});

/// One of the decode slots (half the cores), for work on an agent's batch off the runtime.
pub async fn decode_slot() -> Option<tokio::sync::SemaphorePermit<'static>> {
    DECODE_SLOTS.acquire().await.ok()
}

#[cfg(test)]
mod tests {
    use latmesh_core::hist::{HistKey, new_histogram};
    use latmesh_core::record::{Outcome, ProbeRecord};
    use latmesh_core::wire;

    use super::*;

    const CAMPAIGN: &str = r#"
[campaign]
name = "t"
regions = ["us-east"]

[rounds]
count = 2
interval_s = 1.0
gap_ms = 10

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8

[[scenarios]]
name = "knee"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
[scenarios.sweep]
concurrency = [1, 2]
step_s = 1

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;

    fn plan() -> Plan {
        latmesh_core::campaign::load_toml_str(CAMPAIGN, std::path::Path::new(".")).unwrap()
    }

    fn batch(seq: u64) -> pb::ResultBatch {
        let rec = ProbeRecord {
            provider: "a".into(),
            scenario: "chat".into(),
            attempt: 1,
            turn: 1,
            outcome: Some(Outcome::Ok),
            ttft_us: Some(1_000),
            sched_lag_us: 5,
            decode_tps: Some(40.0),
            finish_reason: Some("stop".into()),
            ..Default::default()
        };
        let key = HistKey {
            provider: "a".into(),
            scenario: "knee".into(),
            metric: Metric::Ttft,
            step: 1,
        };
        let mut h = new_histogram();
        h.record(1_000).unwrap();
        pb::ResultBatch {
            campaign_id: "c".into(),
            seq,
            histograms: vec![wire::histogram_to_pb(&key, &h, 0, 1).unwrap()],
            records: vec![pb::ProbeRecord::from(&rec)],
            clock_offset_us: 0,
        }
    }

    /// Rate steps (`rps = [1, 2]`) and an SLO search (3 steps up to 4 requests/s): records of
    /// every step are in the plan, their slots counted over the whole phase; a step past the
    /// last, or a slot past the phase's arrivals, is refused by name.
    #[test]
    fn rate_records_of_every_step_and_of_a_search_are_in_the_plan() {
        let text = r#"
[campaign]
name = "t"
regions = ["us-east"]

[[scenarios]]
name = "steps"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
[scenarios.rate]
rps = [1, 2]
duration_s = 2
arrivals = "constant"

[[scenarios]]
name = "find"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
slo = { ttft_ms = 500 }
[scenarios.rate]
duration_s = 2
arrivals = "constant"
[scenarios.rate.search]
min_rps = 10
max_rps = 40
steps = 3
min_requests = 20

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;
        let plan = latmesh_core::campaign::load_toml_str(text, std::path::Path::new(".")).unwrap();
        let check = |scenario: &str, step: u32, slot: u32| {
            let rec = ProbeRecord {
                provider: "a".into(),
                scenario: scenario.into(),
                load: LoadKind::Rate,
                step,
                slot,
                attempt: 1,
                turn: 1,
                outcome: Some(Outcome::Ok),
                ttft_us: Some(1_000),
                ..Default::default()
            };
            let mut b = pb::ResultBatch {
                campaign_id: "c".into(),
                seq: 1,
                histograms: Vec::new(),
                records: vec![pb::ProbeRecord::from(&rec)],
                clock_offset_us: 0,
            };
            let expected = Expected {
                plan: &plan,
                highest_seq: 0,
                max_duration_us: 60_000_000,
            };
            check_batch(&expected, &mut b).map(|_| ())
        };
        // Fixed steps: 2 + 4 arrivals, slots 0..6.
        assert_eq!(check("steps", 1, 5), Ok(()));
        let e = check("steps", 1, 6).unwrap_err();
        assert!(e.contains("slot 6 is out of range"), "{e}");
        let e = check("steps", 2, 0).unwrap_err();
        assert!(e.contains("step 2 is out of range"), "{e}");
        // The search: 3 steps; each at most twice its 80 arrivals at max_rps plus 64.
        assert_eq!(check("find", 2, 671), Ok(()));
        let e = check("find", 2, 672).unwrap_err();
        assert!(e.contains("slot 672 is out of range"), "{e}");
        let e = check("find", 3, 0).unwrap_err();
        assert!(e.contains("step 3 is out of range"), "{e}");
    }

    /// Checks `b` as the first batch of an agent (no seq received yet).
    fn check_fresh(b: &mut pb::ResultBatch) -> Result<Sanitized, String> {
        let plan = plan();
        let expected = Expected {
            plan: &plan,
            highest_seq: 0,
            max_duration_us: 60_000_000,
        };
        check_batch(&expected, b)
    }

    /// The error of checking `batch(seq)` changed by `change`, after 10 batches arrived.
    fn refused(seq: u64, change: impl FnOnce(&mut pb::ResultBatch)) -> String {
        let plan = plan();
        let expected = Expected {
            plan: &plan,
            highest_seq: 10,
            max_duration_us: 60_000_000,
        };
        let mut b = batch(seq);
        change(&mut b);
        check_batch(&expected, &mut b).unwrap_err()
    }

    #[test]
    fn an_agent_s_own_values_beyond_their_limits_reject_the_batch_naming_the_field() {
        let plan = plan();
        let expected = Expected {
            plan: &plan,
            highest_seq: 10,
            max_duration_us: 60_000_000,
        };
        let mut b = batch(11 + SEQ_WINDOW - 1);
        assert_eq!(check_batch(&expected, &mut b), Ok(Sanitized::default()));
        assert_eq!(b, batch(11 + SEQ_WINDOW - 1), "a clean batch is unchanged");

        type Change = Box<dyn FnOnce(&mut pb::ResultBatch)>;
        let cases: Vec<(u64, Change, &str)> = vec![
            (
                u64::MAX,
                Box::new(|_| {}),
                "seq 18446744073709551615 is more than 1000000 past the highest seq received (10)",
            ),
            (0, Box::new(|_| {}), "seq 0"),
            (
                11 + SEQ_WINDOW,
                Box::new(|_| {}),
                "past the highest seq received (10)",
            ),
            (
                1,
                Box::new(|b| b.records[0].provider = "evil".into()),
                "records[0].provider \"evil\" is not a provider of the plan",
            ),
            (
                1,
                Box::new(|b| b.records[0].scenario = "x".repeat(1 << 20)),
                "records[0].scenario \"xxxx",
            ),
            (
                1,
                Box::new(|b| b.records[0].step = 1),
                "records[0].step 1 is out of range: scenario \"chat\" has 1 step(s)",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].step = 2),
                "histograms[0].step 2 is out of range: scenario \"knee\" has 2 step(s)",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].provider = "b".into()),
                "histograms[0].provider \"b\"",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].metric = "nope".into()),
                "histograms[0].metric \"nope\" is not a metric",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].hist_v2 = vec![0; MAX_HISTOGRAM_BYTES + 1]),
                "histograms[0].hist_v2 of 262145 bytes",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].start_agent_unix_us = 5),
                "histograms[0].end_agent_unix_us 1 is before start_agent_unix_us 5",
            ),
            (
                1,
                Box::new(|b| {
                    b.histograms = vec![b.histograms[0].clone(); 3 * Metric::ALL.len() + 1]
                }),
                // 1 provider × (1 rounds scenario + 2 sweep steps) × 13 metrics (metrics
                // version 8).
                "40 histograms, more than the 39 keys of the plan",
            ),
            (
                1,
                Box::new(|b| b.records = vec![b.records[0].clone(); MAX_RECORDS_PER_BATCH + 1]),
                "100001 records, more than 100000",
            ),
            (
                1,
                Box::new(|b| b.records[0].sched_lag_us = -5_000_000),
                "records[0].sched_lag_us -5000000 µs is outside 0..=60000000",
            ),
            (
                1,
                Box::new(|b| b.records[0].e2e_us = Some(u64::MAX)),
                "records[0].e2e_us 18446744073709551615 µs is longer than any attempt of the campaign can last",
            ),
            (
                1,
                Box::new(|b| b.records[0].send_agent_unix_us = i64::MIN),
                "records[0].send_agent_unix_us -9223372036854775808 is outside",
            ),
            (
                1,
                Box::new(|b| b.clock_offset_us = i64::MAX),
                "clock_offset_us 9223372036854775807 µs is more than a year",
            ),
            (
                1,
                Box::new(|b| b.histograms[0].start_agent_unix_us = i64::MIN),
                "histograms[0].start_agent_unix_us",
            ),
            (
                1,
                Box::new(|b| b.records[0].prompt_id = "p".repeat(MAX_TEXT_BYTES + 1)),
                "records[0].prompt_id of 8193 bytes",
            ),
        ];
        for (seq, change, want) in cases {
            let e = refused(seq, change);
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(e.len() < 300, "the message stays short: {e}");
        }
    }

    #[test]
    fn done_notices_with_absurd_clocks_or_quarantine_counts_are_refused_by_name() {
        let plan = plan();
        // 2 rounds × 1 slot + 2 sweep steps × (c × 1 s per µs) requests, 1 attempt, 1 turn.
        let max = max_attempt_records(&plan);
        assert_eq!(max, 2 + 3_000_000);
        let ok = pb::CampaignDone {
            started_coord_unix_us: 1_700_000_000_000_000,
            clock_offset_us: -40_000,
            clock_uncertainty_us: 300,
            records_quarantined: max,
            histograms_quarantined: 3,
            quarantined_seqs: vec![1; MAX_QUARANTINED_SEQS],
            ..Default::default()
        };
        assert_eq!(check_done(&ok, &plan, 10), Ok(()));
        for (done, want) in [
            (
                pb::CampaignDone {
                    started_coord_unix_us: i64::MIN,
                    ..ok.clone()
                },
                "CampaignDone.started_coord_unix_us -9223372036854775808 is outside",
            ),
            (
                pb::CampaignDone {
                    clock_offset_us: i64::MAX,
                    ..ok.clone()
                },
                "CampaignDone.clock_offset_us 9223372036854775807 µs is more than a year",
            ),
            (
                pb::CampaignDone {
                    clock_uncertainty_us: u64::MAX,
                    ..ok.clone()
                },
                "CampaignDone.clock_uncertainty_us",
            ),
            (
                pb::CampaignDone {
                    records_quarantined: u64::MAX,
                    ..ok.clone()
                },
                "CampaignDone.records_quarantined 18446744073709551615 is more than the plan can produce (3000002)",
            ),
            (
                pb::CampaignDone {
                    histograms_quarantined: u64::MAX,
                    ..ok.clone()
                },
                "CampaignDone.histograms_quarantined 18446744073709551615 is more than",
            ),
            (
                pb::CampaignDone {
                    quarantined_seqs: vec![1; 4999],
                    ..ok.clone()
                },
                "CampaignDone.quarantined_seqs lists 4999 seqs, more than 1024",
            ),
            (
                pb::CampaignDone {
                    quarantined_seqs: vec![0],
                    ..ok.clone()
                },
                "CampaignDone.quarantined_seqs has seq 0, outside 1..=1000010",
            ),
            (
                pb::CampaignDone {
                    quarantined_seqs: vec![u64::MAX],
                    ..ok.clone()
                },
                "has seq 18446744073709551615",
            ),
        ] {
            let e = check_done(&done, &plan, 10).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn hello_fields_beyond_their_limits_are_refused_by_name() {
        let ok = pb::AgentHello {
            agent_id: "a".repeat(MAX_HELLO_FIELD_BYTES),
            region: "us-east".into(),
            key_env_names: vec!["K".repeat(MAX_KEY_ENV_NAME_BYTES); MAX_KEY_ENV_NAMES],
            ..Default::default()
        };
        assert_eq!(check_hello(&ok), Ok(()));
        let long = "x".repeat(3 << 20);
        for (hello, want) in [
            (
                pb::AgentHello {
                    agent_id: long.clone(),
                    ..ok.clone()
                },
                "AgentHello.agent_id of 3145728 bytes",
            ),
            (
                pb::AgentHello {
                    region: long.clone(),
                    ..ok.clone()
                },
                "AgentHello.region of 3145728 bytes",
            ),
            (
                pb::AgentHello {
                    key_env_names: vec![long.clone()],
                    ..ok.clone()
                },
                "AgentHello.key_env_names has a name of 3145728 bytes",
            ),
            (
                pb::AgentHello {
                    key_env_names: vec!["K".into(); MAX_KEY_ENV_NAMES + 1],
                    ..ok.clone()
                },
                "lists 1025 names",
            ),
            (
                pb::AgentHello {
                    key_env_names: vec!["K".repeat(MAX_KEY_ENV_NAME_BYTES + 1)],
                    ..ok.clone()
                },
                "AgentHello.key_env_names has a name of 129 bytes, longer than 128",
            ),
        ] {
            let e = check_hello(&hello).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn provider_values_beyond_their_limits_are_cut_or_dropped_and_the_batch_is_kept() {
        let mut b = batch(1);
        let r = &mut b.records[0];
        r.error_message = Some("é".repeat(2 << 20));
        r.finish_reason = Some("x".repeat(MAX_TEXT_BYTES + 1));
        r.answered_model = Some("m".repeat(MAX_TEXT_BYTES));
        r.decode_tps = Some(f64::NAN);
        r.retry_after_s = Some(-1.0);
        r.usage_chunk_delta = Some(i64::MIN);
        let cut = check_fresh(&mut b).unwrap();
        assert_eq!(
            cut,
            Sanitized {
                texts_cut: 2,
                numbers_dropped: 3
            }
        );
        let r = &b.records[0];
        let message = r.error_message.as_deref().unwrap();
        assert!(
            message.len() <= MAX_TEXT_BYTES + "…".len(),
            "{}",
            message.len()
        );
        assert!(message.ends_with("é…"), "cut on a character boundary");
        assert_eq!(
            r.finish_reason.as_deref().unwrap().len(),
            MAX_TEXT_BYTES + "…".len()
        );
        assert_eq!(
            r.answered_model.as_deref().unwrap().len(),
            MAX_TEXT_BYTES,
            "at the limit: whole"
        );
        assert_eq!(
            (r.decode_tps, r.retry_after_s, r.usage_chunk_delta),
            (None, None, None)
        );
        assert_eq!(
            b.records[0].ttft_us,
            Some(1_000),
            "the measurement itself is kept"
        );
        assert_eq!(
            b.records[0].cut_fields,
            [
                "finish_reason",
                "error_message",
                "decode_tps",
                "retry_after_s",
                "usage_chunk_delta"
            ],
            "the record names what the coordinator changed"
        );
    }

    #[test]
    fn record_numbers_beyond_the_plan_reject_the_batch_naming_the_field() {
        type Change = Box<dyn FnOnce(&mut pb::ProbeRecord)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|r| r.round = u32::MAX),
                "records[0].round 4294967295 is out of range: the plan has 2 round(s)",
            ),
            (Box::new(|r| r.round = 2), "records[0].round 2"),
            (
                Box::new(|r| r.slot = u32::MAX),
                "records[0].slot 4294967295 is out of range: its scenario has 1 slot(s)",
            ),
            (
                Box::new(|r| r.attempt = 0),
                "records[0].attempt 0 is outside 1..=1",
            ),
            (Box::new(|r| r.attempt = 2), "records[0].attempt 2"),
            (
                Box::new(|r| r.turn = 0),
                "records[0].turn 0 is outside 1..=1",
            ),
            (Box::new(|r| r.turn = 2), "records[0].turn 2"),
            (
                Box::new(|r| r.concurrency = u32::MAX),
                "records[0].concurrency 4294967295 is not its step's (0)",
            ),
            (
                Box::new(|r| r.load = "sweep".into()),
                "records[0].load \"sweep\" is not its scenario's (\"rounds\")",
            ),
            (
                Box::new(|r| r.load = "x".repeat(1 << 20)),
                "records[0].load \"xxx",
            ),
            (
                Box::new(|r| r.cut_fields = vec!["finish_reason".into(); MAX_CUT_FIELDS + 1]),
                "records[0].cut_fields lists 33 fields, more than 32",
            ),
            (
                Box::new(|r| r.cut_fields = vec!["f".repeat(MAX_CUT_FIELD_BYTES + 1)]),
                "records[0].cut_fields has a name of 65 bytes, longer than 64",
            ),
            (
                Box::new(|r| {
                    r.scenario = "knee".into();
                    r.load = "sweep".into();
                    r.step = 1;
                    r.concurrency = 1;
                }),
                "records[0].concurrency 1 is not its step's (2)",
            ),
        ];
        for (change, want) in cases {
            let e = refused(1, |b| change(&mut b.records[0]));
            assert!(e.contains(want), "{e:?} lacks {want:?}");
            assert!(e.len() < 300, "the message stays short: {e}");
        }
        // A sweep record of the plan's step, at any slot (closed loop: unbounded), passes.
        let mut b = batch(1);
        let r = &mut b.records[0];
        (r.scenario, r.load, r.step, r.concurrency, r.slot) =
            ("knee".into(), "sweep".into(), 1, 2, u32::MAX);
        r.cut_fields = vec!["f".repeat(MAX_CUT_FIELD_BYTES); MAX_CUT_FIELDS];
        assert_eq!(check_fresh(&mut b), Ok(Sanitized::default()));
    }

    #[test]
    fn attempts_allowed_follow_retries_and_failover() {
        let mut plan = plan();
        assert_eq!(plan.scenarios[0].max_attempts(), 1);
        plan.scenarios[0].policy.retry = Some(latmesh_core::plan::RetryPolicy {
            max_retries: 3,
            ..Default::default()
        });
        assert_eq!(plan.scenarios[0].max_attempts(), 4);
        plan.scenarios[0].failover = Some(latmesh_core::plan::FailoverSpec {
            chain: vec![0, 0, 0],
            attempts: 2,
            on: Vec::new(),
        });
        assert_eq!(plan.scenarios[0].max_attempts(), 6);
    }

    #[test]
    fn odd_statuses_and_absurd_counts_from_a_provider_are_dropped_and_the_batch_is_kept() {
        for (status, kept) in [
            (799, Some(799)),
            (100, Some(100)),
            (999, Some(999)),
            (99, None),
            (1000, None),
            (u32::MAX, None),
        ] {
            let mut b = batch(1);
            b.records[0].http_status = Some(status);
            let cut = check_fresh(&mut b).unwrap();
            assert_eq!(b.records[0].http_status, kept, "{status}");
            assert_eq!(cut.numbers_dropped, u64::from(kept.is_none()), "{status}");
            assert!(
                latmesh_core::record::ProbeRecord::try_from(b.records[0].clone()).is_ok(),
                "{status}: what intake stores converts"
            );
        }
        let mut b = batch(1);
        let r = &mut b.records[0];
        r.output_tokens = u32::MAX;
        r.prompt_tokens = Some(u32::MAX);
        r.completion_tokens = Some(MAX_USAGE_TOKENS + 1);
        r.cached_tokens = Some(MAX_USAGE_TOKENS);
        r.decode_tps = Some(1e308);
        let cut = check_fresh(&mut b).unwrap();
        assert_eq!(cut.numbers_dropped, 4);
        let r = &b.records[0];
        assert_eq!(
            (
                r.output_tokens,
                r.prompt_tokens,
                r.completion_tokens,
                r.decode_tps
            ),
            (0, None, None, None)
        );
        assert_eq!(
            r.cached_tokens,
            Some(MAX_USAGE_TOKENS),
            "at the bound: kept"
        );
        let mut b = batch(1);
        b.records[0].decode_tps = Some(MAX_DECODE_TPS);
        assert_eq!(check_fresh(&mut b), Ok(Sanitized::default()));
    }

    #[test]
    fn heartbeat_values_beyond_their_bounds_are_ignored() {
        let ok = pb::Heartbeat {
            clock_offset_us: -40_000,
            clock_uncertainty_us: 300,
            in_flight: 7,
            batches_quarantined: 2,
            ..Default::default()
        };
        assert_eq!(
            heartbeat_facts("a", &ok),
            HeartbeatFacts {
                clock: Some((-40_000, 300)),
                in_flight: Some(7),
                batches_quarantined: Some(2),
            }
        );
        let absurd = pb::Heartbeat {
            clock_offset_us: 1 << 62,
            in_flight: u32::MAX,
            batches_quarantined: u64::MAX,
            ..ok
        };
        assert_eq!(heartbeat_facts("a", &absurd), HeartbeatFacts::default());
        let uncertain = pb::Heartbeat {
            clock_uncertainty_us: u64::MAX,
            ..ok
        };
        assert_eq!(heartbeat_facts("a", &uncertain).clock, None);
        assert_eq!(heartbeat_facts("a", &uncertain).in_flight, Some(7));
    }
}
