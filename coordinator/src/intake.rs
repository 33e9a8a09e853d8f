//! The coordinator's boundary for agents' result batches: every value of a
//! [`pb::ResultBatch`] is checked against the protocol's limits and the campaign's plan before
//! any costly work (histogram decoding, merging, spooling), so a hostile or broken agent
//! cannot make the coordinator allocate, compute or store more than its limits allow.
//!
//! An agent's hello is bounded too ([`check_hello`]): its id, region and version are listed
//! by `latmesh agents` and in progress messages.
//!
//! Checking and decoding run on blocking threads ([`check_off_runtime`]), one batch at a time
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
//!   - a timestamp (`send_agent_unix_us`, a histogram's interval) outside 0 to the end of
//!     year 9999 ([`MAX_UNIX_US`]), a `clock_offset_us` of more than a year either way
//!     ([`MAX_CLOCK_OFFSET_US`]; the same bounds apply to a `done` notice, [`check_done`]);
//!   - a duration (`*_us`) beyond the campaign's span (round 0 to its deadline: no attempt of
//!     the plan can last longer), a negative or out-of-span `sched_lag_us`;
//!   - a histogram blob longer than [`MAX_HISTOGRAM_BYTES`], one whose interval ends before it
//!     starts, or (when decoded) whose header does not carry latmesh's bounds
//!     ([`latmesh_core::hist_sparse::decode_v2_sparse_strict`]).
//! - **The value is cut or refused and the batch is stored** when the value is what a
//!   provider answered (the agent only relays it, and one provider must not silence an
//!   agent's other providers): the text fields `finish_reason`, `error_type`, `error_code`,
//!   `error_message`, `answered_model`, `system_fingerprint` are cut to [`MAX_TEXT_BYTES`]
//!   (on a character boundary, `…` appended); `decode_tps` and `retry_after_s` that are NaN,
//!   infinite or negative, and a `usage_chunk_delta` beyond ±`u32::MAX`, are dropped (absent);
//!   a token total beyond `u32` is absent ([`latmesh_core::wire`]). What was cut is counted
//!   in [`Sanitized`] and logged as a warning naming the agent.

use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
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

/// Longest agent id, region, version or API key variable name in an agent's hello, bytes:
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

/// Most API key variable names an agent's hello may list.
pub const MAX_KEY_ENV_NAMES: usize = 4096;

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
        .find(|n| n.len() > MAX_HELLO_FIELD_BYTES)
    {
        return Err(format!(
            "AgentHello.key_env_names has a name of {} bytes, longer than {MAX_HELLO_FIELD_BYTES}",
            long.len()
        ));
    }
    Ok(())
}

/// Checks the clock facts of an agent's `done` notice (its start on the coordinator's clock,
/// its clock offset and uncertainty) against [`MAX_UNIX_US`] and [`MAX_CLOCK_OFFSET_US`]:
/// the summary's start skew subtracts and adds them.
///
/// # Errors
/// A message naming the field and its limit.
pub fn check_done(done: &pb::CampaignDone) -> Result<(), String> {
    check_unix_us(
        "CampaignDone.started_coord_unix_us",
        done.started_coord_unix_us,
    )?;
    check_offset_us("CampaignDone.clock_offset_us", done.clock_offset_us)?;
    check_offset_us(
        "CampaignDone.clock_uncertainty_us",
        i64::try_from(done.clock_uncertainty_us).unwrap_or(i64::MAX),
    )
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
    /// Longest duration a record may report, µs: the campaign's span from round 0 to its
    /// deadline.
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

/// Concurrency steps of a load: a sweep's steps, 1 for other loads.
fn steps_of(load: &LoadModel) -> usize {
    match load {
        LoadModel::Sweep(sw) => sw.concurrency.len().max(1),
        _ => 1,
    }
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
    for (i, r) in batch.records.iter_mut().enumerate() {
        check_record(expected, r, &mut cut).map_err(|e| format!("records[{i}].{e}"))?;
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

/// A provider and scenario of the plan, and a step of that scenario; the scenario's load.
/// Errors start with the field's name.
fn check_names<'p>(
    plan: &'p Plan,
    provider: &str,
    scenario: &str,
    step: u32,
) -> Result<&'p LoadModel, String> {
    if !plan.providers.iter().any(|p| p.name == provider) {
        return Err(format!(
            "provider {:?} is not a provider of the plan",
            truncate_message(provider, 64)
        ));
    }
    let Some(s) = plan.scenarios.iter().find(|s| s.name == scenario) else {
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
    Ok(&s.load)
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
    r: &mut pb::ProbeRecord,
    cut: &mut Sanitized,
) -> Result<(), String> {
    check_names(expected.plan, &r.provider, &r.scenario, r.step)?;
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
                "{field} {v} µs is longer than the campaign's span ({max} µs)"
            ));
        }
    }
    if r.sched_lag_us < 0 || r.sched_lag_us as u64 > max {
        return Err(format!(
            "sched_lag_us {} µs is outside 0..={max} µs (the campaign's span)",
            r.sched_lag_us
        ));
    }
    for text in [
        &mut r.finish_reason,
        &mut r.error_type,
        &mut r.error_code,
        &mut r.error_message,
        &mut r.answered_model,
        &mut r.system_fingerprint,
    ]
    .into_iter()
    .flatten()
    {
        if text.len() > MAX_TEXT_BYTES {
            *text = truncate_message(text, MAX_TEXT_BYTES);
            cut.texts_cut += 1;
        }
    }
    for rate in [&mut r.decode_tps, &mut r.retry_after_s] {
        if rate.is_some_and(|v| !v.is_finite() || v < 0.0) {
            *rate = None;
            cut.numbers_dropped += 1;
        }
    }
    if r.usage_chunk_delta
        .is_some_and(|d| d.unsigned_abs() > u64::from(u32::MAX))
    {
        r.usage_chunk_delta = None;
        cut.numbers_dropped += 1;
    }
    Ok(())
}

/// Batches decoded at once over every session: half the cores (at least one), so that a
/// flood of batches leaves the other half to control calls and the runtime.
static DECODE_SLOTS: std::sync::LazyLock<tokio::sync::Semaphore> = std::sync::LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::sync::Semaphore::new((cores / 2).max(1))
});

/// [`crate::state::State::check`] on a blocking thread, once one of the decode slots is
/// free (a session awaits its batch, so each session has one batch in check at a time): the
/// limits and the campaign are checked first, then histograms and records decode, off the
/// async runtime. Returns the result with the batch (as sanitized by the check); `None` when
/// the task failed (logged).
pub async fn check_off_runtime(
    state: &crate::state::State,
    agent: &str,
    mut b: pb::ResultBatch,
) -> Option<(
    Result<Option<crate::state::CheckedBatch>, crate::state::StateError>,
    pb::ResultBatch,
)> {
    let _slot = DECODE_SLOTS.acquire().await.ok()?;
    let (state, agent_id) = (state.clone(), agent.to_string());
    match tokio::task::spawn_blocking(move || (state.check(&agent_id, &mut b), b)).await {
        Ok(checked) => Some(checked),
        Err(e) => {
            tracing::error!(%agent, error = %e, "batch check failed; batch not acked");
            None
        }
    }
}

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
                "31 histograms, more than the 30 keys of the plan",
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
                "records[0].e2e_us 18446744073709551615 µs is longer than the campaign's span",
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
    fn done_notices_with_absurd_clocks_are_refused_by_name() {
        let ok = pb::CampaignDone {
            started_coord_unix_us: 1_700_000_000_000_000,
            clock_offset_us: -40_000,
            clock_uncertainty_us: 300,
            ..Default::default()
        };
        assert_eq!(check_done(&ok), Ok(()));
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
        ] {
            let e = check_done(&done).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn hello_fields_beyond_their_limits_are_refused_by_name() {
        let ok = pb::AgentHello {
            agent_id: "a".repeat(MAX_HELLO_FIELD_BYTES),
            region: "us-east".into(),
            key_env_names: vec!["K".into(); MAX_KEY_ENV_NAMES],
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
                "lists 4097 names",
            ),
        ] {
            let e = check_hello(&hello).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn provider_values_beyond_their_limits_are_cut_or_dropped_and_the_batch_is_kept() {
        let plan = plan();
        let expected = Expected {
            plan: &plan,
            highest_seq: 0,
            max_duration_us: 60_000_000,
        };
        let mut b = batch(1);
        let r = &mut b.records[0];
        r.error_message = Some("é".repeat(2 << 20));
        r.finish_reason = Some("x".repeat(MAX_TEXT_BYTES + 1));
        r.answered_model = Some("m".repeat(MAX_TEXT_BYTES));
        r.decode_tps = Some(f64::NAN);
        r.retry_after_s = Some(-1.0);
        r.usage_chunk_delta = Some(i64::MIN);
        let cut = check_batch(&expected, &mut b).unwrap();
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
    }
}
