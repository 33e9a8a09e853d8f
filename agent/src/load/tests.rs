//! The three schedulers run against the simulator: knees, open-loop timing, drops, restarts,
//! cancels, lateness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latmesh_core::load::LoadKind;

use crate::phase::{NotRun, PhaseCtx};
use std::net::SocketAddr;

use latmesh_core::load::{KneeRule, LoadModel, StepPoint, elasticity};
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_sim::profile::ProviderProfile;
use tokio::sync::mpsc;

use super::*;
use crate::limits::Limiters;
use crate::outbox::Outbox;
use crate::probe::Prober;
use crate::slot::SlotEnv;

/// Serves `profile` with the simulator on a loopback port.
async fn sim(profile: ProviderProfile) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = latmesh_sim::SimConfig {
        profiles: vec![profile],
        ..latmesh_sim::SimConfig::default()
    };
    tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
    addr
}

/// A fixed-latency provider answering `tokens` tokens.
fn profile(name: &str, ttft_ms: u64, itl_ms: u64, tokens: u32, capacity: u32) -> ProviderProfile {
    ProviderProfile {
        output_tokens_min: tokens,
        output_tokens_max: tokens,
        capacity,
        ..ProviderProfile::fixed(name, ttft_ms * 1000, itl_ms * 1000)
    }
}

/// A one-provider plan whose only scenario has the load model `load_keys`.
fn plan(addr: SocketAddr, name: &str, load_keys: &str, provider_keys: &str) -> Plan {
    let text = format!(
        r#"
[campaign]
name = "t"
regions = ["us-east"]
[[scenarios]]
name = "load"
prompt_ids = ["short-qa-en-001"]
max_tokens = 64
timeout_total_s = 30
{load_keys}
[[providers]]
name = "{name}"
base_url = "http://{addr}/{name}/v1"
model_id = "m"
{provider_keys}
"#
    );
    latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
}

/// Runs the plan's only phase from now and returns every record once all finished.
async fn run_phase(plan: Plan) -> (Vec<ProbeRecord>, NotRun, Instant) {
    let start = Instant::now() + Duration::from_millis(50);
    run_phase_from(plan, Outbox::default(), start).await
}

/// Runs the plan's only phase from `start` (in the past: a restarted agent) with `outbox`
/// (what an earlier process left) and returns every record once all finished.
async fn run_phase_from(
    plan: Plan,
    outbox: Outbox,
    start: Instant,
) -> (Vec<ProbeRecord>, NotRun, Instant) {
    run_phase_with(plan, outbox, start, SlotEnv::default()).await
}

/// [`run_phase_from`] with `env` (e.g. a cancelled switch).
async fn run_phase_with(
    plan: Plan,
    outbox: Outbox,
    start: Instant,
    env: SlotEnv,
) -> (Vec<ProbeRecord>, NotRun, Instant) {
    let plan = Arc::new(plan);
    let (tx, mut rx) = mpsc::channel(4096);
    let ctx = PhaseCtx {
        campaign_id: "c".into(),
        plan: plan.clone(),
        prober: Arc::new(Prober::new(None).unwrap()),
        tx,
        env: SlotEnv {
            limits: Arc::new(Limiters::new(&plan, 1)),
            ..env
        },
        outbox,
        max_lateness: Duration::from_secs(1),
        turns_not_sent: Arc::default(),
        in_flight: Arc::new(crate::drain::InFlight::new(plan.providers.len())),
    };
    let not_run = match &plan.scenarios[0].load {
        LoadModel::Sweep(spec) => run_sweep(&ctx, 0, spec, start).await,
        LoadModel::Rate(spec) => run_rate(&ctx, 0, spec, start).await,
        LoadModel::Rounds => run_rounds(&ctx, start).await,
    };
    drop(ctx);
    let mut records = Vec::new();
    while let Some((rec, _)) = rx.recv().await {
        records.push(rec);
    }
    (records, not_run, start)
}

fn p50(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_finds_the_knee_at_the_provider_s_capacity() {
    // Capacity 4, ~114 ms per request: flat up to 4 workers, ×2 at 8, ×4 at 16.
    let addr = sim(profile("queue", 100, 2, 8, 4)).await;
    let plan = plan(
        addr,
        "queue",
        "[scenarios.sweep]\nconcurrency = [1, 2, 4, 8, 16]\nstep_s = 1.2",
        "",
    );
    let (records, not_run, _) = run_phase(plan).await;
    assert_eq!(not_run, NotRun::default());
    assert!(
        records.iter().all(|r| r.outcome() == Outcome::Ok),
        "{records:?}"
    );
    let steps: Vec<StepPoint> = [1u32, 2, 4, 8, 16]
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let e2e: Vec<u64> = records
                .iter()
                .filter(|r| r.step == k as u32)
                .inspect(|r| assert_eq!((r.load, r.concurrency), (LoadKind::Sweep, c)))
                .filter_map(|r| r.e2e_us)
                .collect();
            // Closed loop: each worker keeps one request going, ~1.2 s / 114 ms each.
            assert!(
                e2e.len() as u32 >= c * 2,
                "step {k}: {} requests",
                e2e.len()
            );
            StepPoint {
                concurrency: c,
                latency_us: Some(p50(e2e)),
                ..Default::default()
            }
        })
        .collect();
    let lat: Vec<u64> = steps.iter().map(|s| s.latency_us.unwrap() / 1000).collect();
    assert!(
        lat[0] >= 105 && lat[2] < 170,
        "P50 E2E per step, ms: {lat:?}"
    );
    assert!(
        lat[3] > 190 && lat[4] > 380,
        "P50 E2E per step, ms: {lat:?}"
    );
    // The first step whose latency elasticity reaches the default rule's 0.5 (the knee
    // rule's significance and sample-size parts are the coordinator's: see find_knee).
    let steep = (1..steps.len()).find(|&k| {
        let (a, b) = (steps[k - 1], steps[k]);
        elasticity(
            a.concurrency,
            a.latency_us.unwrap() as f64,
            b.concurrency,
            b.latency_us.unwrap() as f64,
        )
        .is_some_and(|e| e >= KneeRule::default().elasticity)
    });
    assert_eq!(steep, Some(3), "{lat:?}");
    // Every request's slot numbers its provider's requests in the step.
    let mut slots: Vec<u32> = records
        .iter()
        .filter(|r| r.step == 0)
        .map(|r| r.slot)
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..slots.len() as u32).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_requests_end_a_step_early() {
    let addr = sim(profile("quick", 20, 1, 4, 0)).await;
    let plan = plan(
        addr,
        "quick",
        "[scenarios.sweep]\nconcurrency = [2, 4]\nstep_s = 0.8\nstep_requests = 5",
        "",
    );
    let (records, _, _) = run_phase(plan).await;
    let per_step: Vec<usize> = (0..2)
        .map(|k| records.iter().filter(|r| r.step == k).count())
        .collect();
    assert_eq!(per_step, vec![5, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_arrivals_leave_at_their_intended_times() {
    let addr = sim(profile("open", 20, 1, 4, 0)).await;
    let plan = plan(
        addr,
        "open",
        "[scenarios.rate]\nrps = 40\narrivals = \"poisson\"\nduration_s = 1.5",
        "",
    );
    let LoadModel::Rate(spec) = &plan.scenarios[0].load else {
        unreachable!()
    };
    let arrivals = spec.arrivals_us(plan.seed, 0);
    let (mut records, not_run, _) = run_phase(plan.clone()).await;
    assert_eq!(not_run, NotRun::default());
    records.sort_by_key(|r| r.slot);
    assert_eq!(records.len(), arrivals.len());
    let t0 = records[0].send_agent_unix_us - records[0].sched_lag_us - arrivals[0] as i64;
    for (r, &at) in records.iter().zip(&arrivals) {
        assert_eq!((r.load, r.outcome()), (LoadKind::Rate, Outcome::Ok));
        // Sent at its own intended time (wall clock within a few ms of the schedule).
        let intended = r.send_agent_unix_us - r.sched_lag_us;
        assert!((intended - t0 - at as i64).abs() < 3_000, "slot {}", r.slot);
        assert!(
            r.sched_lag_us < 20_000,
            "slot {} lag {} µs",
            r.slot,
            r.sched_lag_us
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_and_every_agent_gets_the_same_arrivals() {
    // The demo's open loop in small: Poisson at 4/s per provider, here for 3 s, two
    // providers of different speed, run by two agents.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = latmesh_sim::SimConfig {
        profiles: vec![profile("fast", 5, 1, 2, 0), profile("slow", 40, 1, 2, 0)],
        ..latmesh_sim::SimConfig::default()
    };
    tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
    let text = format!(
        r#"
[campaign]
name = "t"
seed = 42
regions = ["us-east", "eu-west"]
[[scenarios]]
name = "open-loop"
prompt_ids = ["short-qa-en-001"]
max_tokens = 8
timeout_total_s = 30
[scenarios.rate]
rps = 4
arrivals = "poisson"
duration_s = 3
[[providers]]
name = "fast"
base_url = "http://{addr}/fast/v1"
model_id = "m"
[[providers]]
name = "slow"
base_url = "http://{addr}/slow/v1"
model_id = "m"
"#
    );
    let plan = latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap();
    let LoadModel::Rate(spec) = &plan.scenarios[0].load else {
        unreachable!()
    };
    let arrivals = spec.arrivals_us(plan.seed, 0);
    assert!(arrivals.len() >= 4, "{arrivals:?}");
    let (a, b) = tokio::join!(run_phase(plan.clone()), run_phase(plan.clone()));
    for (agent, (records, not_run, _)) in [("a", a), ("b", b)] {
        assert_eq!(not_run, NotRun::default());
        for provider in ["fast", "slow"] {
            let mut slots: Vec<u32> = records
                .iter()
                .filter(|r| r.provider == provider)
                .inspect(|r| assert_eq!(r.outcome(), Outcome::Ok))
                .map(|r| r.slot)
                .collect();
            slots.sort_unstable();
            // Every arrival of the one sequence (arrival i at `arrivals[i]` from the phase
            // start), to each provider, by each agent: the same offered load.
            assert_eq!(
                slots,
                (0..arrivals.len() as u32).collect::<Vec<_>>(),
                "agent {agent}, provider {provider}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_provider_grows_intended_time_latency_not_actual_latency() {
    // 40 arrivals at 20/s; 2 in flight at ~300 ms each serve ~6.6/s: the queue grows.
    let addr = sim(profile("stall", 300, 1, 4, 0)).await;
    let plan = plan(
        addr,
        "stall",
        "[scenarios.rate]\nrps = 20\nduration_s = 2\nmax_queue_s = 30",
        "max_in_flight = 2",
    );
    let (mut records, _, _) = run_phase(plan).await;
    records.sort_by_key(|r| r.slot);
    assert_eq!(records.len(), 40);
    let actual: Vec<u64> = records.iter().map(|r| r.ttft_us.unwrap() / 1000).collect();
    let intended: Vec<u64> = records
        .iter()
        .map(|r| (r.ttft_us.unwrap() + r.sched_lag_us as u64) / 1000)
        .collect();
    assert!(
        actual.iter().all(|&t| (295..450).contains(&t)),
        "TTFT ms: {actual:?}"
    );
    assert!(intended[..2].iter().all(|&t| t < 450), "{intended:?}");
    // Arrival k leaves after ~k/2 × 300 ms; intended at k × 50 ms: ~3.7 s late at the end.
    assert!(intended[39] > 3_000, "{intended:?}");
    assert!(
        intended.windows(2).filter(|w| w[1] + 50 < w[0]).count() == 0,
        "{intended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrivals_held_past_max_queue_are_dropped_and_recorded() {
    let addr = sim(profile("full", 300, 1, 4, 0)).await;
    let plan = plan(
        addr,
        "full",
        "[scenarios.rate]\nrps = 20\nduration_s = 1.5\nmax_queue_s = 0.5",
        "max_in_flight = 1",
    );
    let (records, _, _) = run_phase(plan).await;
    assert_eq!(records.len(), 30);
    let dropped: Vec<&ProbeRecord> = records
        .iter()
        .filter(|r| r.outcome() == Outcome::Dropped)
        .collect();
    let ok = records
        .iter()
        .filter(|r| r.outcome() == Outcome::Ok)
        .count();
    // ~1 request per 300 ms leaves; the rest waits 0.5 s and is dropped.
    assert!((3..=8).contains(&ok), "ok {ok}");
    assert_eq!(ok + dropped.len(), 30);
    for r in dropped {
        assert!(r.final_attempt && r.ttft_us.is_none());
        assert!(r.sched_lag_us >= 500_000, "{}", r.sched_lag_us);
        assert!(
            r.error_message
                .as_deref()
                .unwrap()
                .contains("caps (in flight")
        );
    }
}

/// Rounds behind a full `max_in_flight` follow the open-loop drop rule: a probe still
/// waiting `RoundsSpec::max_queue_ms` (here the 0.4 s interval) after its intended time
/// is recorded as dropped instead of being sent late, out of step with other regions
/// (they queued without limit: sent up to 104 s late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_held_past_their_queue_bound_behind_a_stalled_provider_are_dropped() {
    // Every answer stalls 1.5 s mid-stream: the one slot stays taken for ~1.5 s.
    let addr = sim(ProviderProfile {
        stall_prob: 1.0,
        stall_us: 1_500_000,
        ..profile("stalled", 20, 1, 4, 0)
    })
    .await;
    let plan = plan(
        addr,
        "stalled",
        "[rounds]\ncount = 5\ninterval_s = 0.4\ngap_ms = 10",
        "max_in_flight = 1",
    );
    assert_eq!(plan.rounds.max_queue_ms(), 400);
    let (mut records, not_run, _) = run_phase(plan).await;
    assert_eq!(not_run, NotRun::default());
    records.sort_by_key(|r| r.round);
    let rounds: Vec<(u32, Outcome, i64)> = records
        .iter()
        .map(|r| (r.round, r.outcome(), r.sched_lag_us / 1000))
        .collect();
    assert_eq!(records.len(), 5, "{rounds:?}");
    assert!(records.iter().all(|r| r.final_attempt), "{rounds:?}");
    // Round 0 holds the slot past rounds 1 and 2's drop times (0.8 s and 1.2 s).
    assert_eq!(records[0].outcome(), Outcome::Ok, "{rounds:?}");
    for r in &records[1..3] {
        assert_eq!(r.outcome(), Outcome::Dropped, "{rounds:?}");
        assert!(
            r.sched_lag_us >= 400_000 && r.ttft_us.is_none(),
            "{rounds:?}"
        );
        assert!(
            r.error_message
                .as_deref()
                .is_some_and(|m| m.contains("caps (in flight")),
            "{:?}",
            r.error_message
        );
    }
    // No probe is sent more than the bound late (a scheduling margin aside).
    for r in records.iter().filter(|r| r.outcome() != Outcome::Dropped) {
        assert!(r.sched_lag_us < 500_000, "{rounds:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_resends_no_arrival_and_skips_those_long_past() {
    let addr = sim(profile("open", 5, 1, 2, 0)).await;
    let plan = plan(
        addr,
        "open",
        "[scenarios.rate]\nrps = 40\nduration_s = 4\nmax_queue_s = 10",
        "",
    );
    let LoadModel::Rate(spec) = &plan.scenarios[0].load else {
        unreachable!()
    };
    let arrivals = spec.arrivals_us(plan.seed, 0);
    // The earlier process measured the first second's arrivals, then died; this one
    // reaches the phase 2.5 s after its start.
    let measured: Vec<u32> = (0..arrivals.len() as u32)
        .filter(|&i| arrivals[i as usize] < 1_000_000)
        .collect();
    let mut resume = crate::spool::Resume::default();
    for &i in &measured {
        resume.arrivals.insert(("load".into(), "open".into(), i));
    }
    let outbox = Outbox::resumed("c", resume);
    let start = Instant::now() - Duration::from_millis(2_500);
    let (records, not_run, _) = run_phase_from(plan, outbox, start).await;
    assert!(
        records.iter().all(|r| !measured.contains(&r.slot)),
        "an arrival measured before the restart was sent again"
    );
    // Past by more than 1 s at the restart (1.0-1.5 s): skipped, not sent in a burst.
    let between =
        |lo: u64, hi: u64| arrivals.iter().filter(|&&a| (lo..hi).contains(&a)).count() as u64;
    assert!(
        (between(1_000_000, 1_400_000)..=between(1_000_000, 1_600_000)).contains(&not_run.late),
        "late {}",
        not_run.late
    );
    assert_eq!(
        measured.len() + records.len() + not_run.late as usize,
        arrivals.len(),
        "every arrival measured once or skipped"
    );
    assert!(
        records.iter().all(|r| r.sched_lag_us < 1_100_000),
        "no arrival sent more than max_lateness late"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_counts_the_sweep_step_it_stopped_in_as_skipped() {
    let addr = sim(profile("quick", 5, 1, 2, 0)).await;
    let plan = plan(
        addr,
        "quick",
        "[scenarios.sweep]\nconcurrency = [1, 2, 3]\nstep_s = 1.2",
        "",
    );
    // Steps 0 and 1 started 2.6 and 1.4 s ago; step 2 0.2 s ago (still run).
    let start = || Instant::now() - Duration::from_millis(2_600);
    // The earlier process has records of steps 0 and 1: it finished step 0 and stopped
    // in step 1, whose 2 workers count as skipped.
    let resume = crate::spool::Resume {
        sweep_steps: [("load".to_string(), 0), ("load".to_string(), 1)].into(),
        ..Default::default()
    };
    let (records, not_run, _) =
        run_phase_from(plan.clone(), Outbox::resumed("c", resume), start()).await;
    assert_eq!(not_run.late, 2);
    assert!(!records.is_empty() && records.iter().all(|r| r.step == 2));
    // Without a journal (it died before spooling anything): steps 0 and 1, 1 + 2 workers.
    let (_, not_run, _) = run_phase_from(plan, Outbox::default(), start()).await;
    assert_eq!(not_run.late, 3);
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancel_counts_what_is_left_at_once_minus_what_ran_before() {
    // Nothing listens on port 9: nothing is sent anyway, the cancel comes first.
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cancelled = || {
        let env = SlotEnv::default();
        env.cancel.cancel();
        env
    };
    // A million rounds of 2 slots, 3 of them measured before a restart.
    let mut rounds = plan(
        addr,
        "a",
        "[rounds]\ncount = 1000000\ninterval_s = 1\ngap_ms = 10",
        "",
    );
    rounds.providers.push(rounds.providers[0].clone());
    rounds.providers[1].name = "b".into();
    let resume = crate::spool::Resume {
        slots: [(0, 0), (0, 1), (999_999, 1)].into(),
        ..Default::default()
    };
    let start = Instant::now() + Duration::from_secs(5);
    let (records, not_run, _) =
        run_phase_with(rounds, Outbox::resumed("c", resume), start, cancelled()).await;
    assert!(records.is_empty());
    assert_eq!(
        not_run,
        NotRun {
            late: 0,
            cancelled: 2_000_000 - 3
        }
    );
    // Open loop: 200 arrivals, 2 measured before.
    let rate = plan(addr, "a", "[scenarios.rate]\nrps = 20\nduration_s = 10", "");
    let resume = crate::spool::Resume {
        arrivals: [
            ("load".to_string(), "a".to_string(), 0),
            ("load".to_string(), "a".to_string(), 150),
        ]
        .into(),
        ..Default::default()
    };
    let (_, not_run, _) =
        run_phase_with(rate, Outbox::resumed("c", resume), start, cancelled()).await;
    assert_eq!(
        not_run,
        NotRun {
            late: 0,
            cancelled: 198
        }
    );
}

/// Runs the plan's only phase while its only thread is blocked (as by SIGSTOP) from
/// 20 ms to 1.62 s from now (the phase starts in 50 ms).
async fn run_phase_stopped(plan: Plan) -> (Vec<ProbeRecord>, NotRun) {
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        std::thread::sleep(Duration::from_millis(1_600));
    });
    let (records, not_run, _) = run_phase(plan).await;
    (records, not_run)
}

#[tokio::test(flavor = "current_thread")]
async fn a_slot_whose_wait_ended_past_max_lateness_is_skipped_not_sent() {
    let addr = sim(profile("solo", 5, 1, 2, 0)).await;
    let plan = plan(
        addr,
        "solo",
        "[rounds]\ncount = 3\ninterval_s = 1\ngap_ms = 10",
        "",
    );
    // Round 0, due at 50 ms, is reached 1.57 s late (after the scheduler began waiting
    // for it); round 1, due at 1.05 s, 0.57 s late (sent); round 2 on time.
    let (records, not_run) = run_phase_stopped(plan).await;
    let rounds: Vec<(u32, i64)> = records.iter().map(|r| (r.round, r.sched_lag_us)).collect();
    assert!(
        rounds.iter().all(|r| r.0 > 0),
        "round 0 sent late: {rounds:?}"
    );
    assert_eq!((records.len(), not_run.late), (2, 1), "{rounds:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn open_loop_arrivals_the_scheduler_reaches_too_late_are_skipped_not_burst() {
    let addr = sim(profile("solo", 5, 1, 2, 0)).await;
    // max_queue_s (for the provider's caps) does not let a stopped scheduler send late.
    let plan = plan(
        addr,
        "solo",
        "[scenarios.rate]\nrps = 20\nduration_s = 3\nmax_queue_s = 30",
        "",
    );
    let (records, not_run) = run_phase_stopped(plan).await;
    let worst = records.iter().map(|r| r.sched_lag_us).max().unwrap();
    assert!(worst < 1_100_000, "sent {worst} µs late");
    // Arrivals in the first ~0.57 s of the phase were over 1 s late when it woke.
    assert!((5..=18).contains(&not_run.late), "{not_run:?}");
    assert_eq!(records.len() as u64 + not_run.late, 60);
}

#[tokio::test(flavor = "current_thread")]
async fn a_sweep_step_the_agent_woke_too_late_for_is_skipped() {
    let addr = sim(profile("solo", 5, 1, 2, 0)).await;
    let plan = plan(
        addr,
        "solo",
        "[scenarios.sweep]\nconcurrency = [1, 2]\nstep_s = 1",
        "",
    );
    // Step 0 (from 50 ms) is reached at 1.62 s: skipped, its 1 worker counted; step 1
    // (from 1.05 s) runs.
    let (records, not_run) = run_phase_stopped(plan).await;
    assert_eq!(not_run.late, 1);
    assert!(!records.is_empty() && records.iter().all(|r| r.step == 1));
}

/// `plan`'s rate scenario with `f` applied to its spec.
fn with_rate(mut plan: Plan, f: impl FnOnce(&mut latmesh_core::load::RateSpec)) -> Plan {
    let LoadModel::Rate(spec) = &mut plan.scenarios[0].load else {
        unreachable!()
    };
    f(spec);
    plan
}

/// A rate sweep sends each step at its own rate: 10, 20, 40 per second for 0.5 s each are
/// 5, 10 and 20 arrivals, each step's in its own half second, records carrying the step and
/// its rate, slots numbered over the whole phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_steps_send_at_each_steps_rate() {
    let addr = sim(profile("steps", 5, 1, 2, 0)).await;
    let plan = with_rate(
        plan(
            addr,
            "steps",
            "[scenarios.rate]\nrps = 10\nduration_s = 0.5",
            "",
        ),
        |s| s.steps_rps = vec![10.0, 20.0, 40.0],
    );
    let (mut records, not_run, _) = run_phase(plan).await;
    assert_eq!(not_run, NotRun::default());
    records.sort_by_key(|r| r.slot);
    let per_step = |k: u32| records.iter().filter(|r| r.step == k).count();
    assert_eq!((per_step(0), per_step(1), per_step(2)), (5, 10, 20));
    assert_eq!(
        records.iter().map(|r| r.slot).collect::<Vec<_>>(),
        (0..35).collect::<Vec<_>>()
    );
    for r in &records {
        assert_eq!(
            r.target_rps,
            [10.0, 20.0, 40.0][r.step as usize],
            "slot {}",
            r.slot
        );
        assert_eq!(r.outcome(), Outcome::Ok);
    }
    // Each step's arrivals leave within its own half second.
    let t0 = records[0].send_agent_unix_us - records[0].sched_lag_us;
    for r in &records {
        let at = r.send_agent_unix_us - r.sched_lag_us - t0;
        let lo = i64::from(r.step) * 500_000;
        assert!(
            (lo - 3_000..lo + 503_000).contains(&at),
            "slot {} of step {} intended at {at} µs",
            r.slot,
            r.step
        );
    }
}

/// A restarted agent resends no arrival of an earlier step: the journal keys on the slot,
/// numbered over the whole phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_resends_no_arrival_of_an_earlier_step() {
    let addr = sim(profile("steps", 5, 1, 2, 0)).await;
    let plan = with_rate(
        plan(
            addr,
            "steps",
            "[scenarios.rate]\nrps = 10\nduration_s = 0.5",
            "",
        ),
        |s| s.steps_rps = vec![10.0, 20.0, 40.0],
    );
    // Steps 0 and 1 (slots 0..15) were measured; this process reaches the phase 1.2 s in.
    let mut resume = crate::spool::Resume::default();
    for i in 0..15 {
        resume.arrivals.insert(("load".into(), "steps".into(), i));
    }
    let start = Instant::now() - Duration::from_millis(1_200);
    let (records, not_run, _) = run_phase_from(plan, Outbox::resumed("c", resume), start).await;
    assert!(
        records.iter().all(|r| r.slot >= 15 && r.step == 2),
        "{records:?}"
    );
    assert_eq!(not_run.cancelled, 0);
    assert_eq!(
        records.len() as u64 + not_run.late,
        20,
        "every step-2 arrival sent or skipped"
    );
}

/// A cancel during a later step counts what is left of every step at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_a_later_step_counts_every_step_left() {
    let addr = sim(profile("steps", 5, 1, 2, 0)).await;
    let plan = with_rate(
        plan(
            addr,
            "steps",
            "[scenarios.rate]\nrps = 10\nduration_s = 0.5",
            "",
        ),
        |s| s.steps_rps = vec![10.0, 20.0, 40.0],
    );
    let env = SlotEnv::default();
    let cancel = env.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        cancel.cancel();
    });
    let start = Instant::now() + Duration::from_millis(50);
    let (records, not_run, _) = run_phase_with(plan, Outbox::default(), start, env).await;
    // About 11 arrivals sent (5 of step 0, ~6 of step 1), the rest of steps 1 and 2 not:
    // counted at once, whatever step they are in.
    assert!(not_run.cancelled > 0 && records.len() >= 5, "{not_run:?}");
    assert_eq!(
        records.len() as u64 + not_run.cancelled,
        35,
        "each arrival sent or counted once"
    );
}

/// The SLO search against a provider serving ~46 requests/s (capacity 2, ~43 ms each):
/// 20 and 40 per second meet TTFT ≤ 500 ms (with 450 ms to spare for a busy machine), 80
/// misses (its queue grows by ~34 a second: about half the step waits past the bound, many
/// still queued without a first token at the step's end, which count as missed), so the
/// rate doubles twice, then bisects to 60. Every record carries its step's rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slo_search_doubles_while_met_and_bisects_after_a_miss() {
    let addr = sim(profile("cap", 40, 1, 4, 2)).await;
    let mut plan = with_rate(
        plan(
            addr,
            "cap",
            "[scenarios.rate]\nrps = 20\nduration_s = 1.2",
            "",
        ),
        |s| {
            s.search = Some(latmesh_core::load::SloSearch {
                min_rps: 20.0,
                max_rps: 160.0,
                steps: 4,
                min_requests: 20,
                resolution_pct: 10.0,
            });
        },
    );
    plan.scenarios[0].slo = Some(latmesh_core::slo::Slo {
        ttft_ms: Some(500.0),
        tpot_ms: None,
        e2e_ms: None,
        percentiles: vec![],
        goodput_pct: 90.0,
    });
    let (records, not_run, _) = run_phase(plan).await;
    assert_eq!(not_run, NotRun::default());
    let rate_of = |k: u32| {
        let rates: std::collections::BTreeSet<u64> = records
            .iter()
            .filter(|r| r.step == k)
            .map(|r| r.target_rps as u64)
            .collect();
        rates.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(
        (rate_of(0), rate_of(1), rate_of(2), rate_of(3)),
        (vec![20], vec![40], vec![80], vec![60])
    );
    let met = |k: u32| {
        let judged: Vec<_> = records
            .iter()
            .filter(|r| r.step == k && r.final_attempt)
            .collect();
        judged.iter().filter(|r| r.slo_met == Some(true)).count() * 100 / judged.len()
    };
    assert!(met(0) >= 90 && met(1) >= 90, "{} {}", met(0), met(1));
    assert!(met(2) < 90, "{}", met(2));
}

/// A restarted agent cannot resume an SLO search (the verdicts were its earlier process's):
/// it sends nothing in the phase and counts each provider's steps not yet begun as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_does_not_resume_an_slo_search() {
    let addr = sim(profile("cap", 5, 1, 2, 0)).await;
    let mut plan = with_rate(
        plan(
            addr,
            "cap",
            "[scenarios.rate]\nrps = 20\nduration_s = 0.5",
            "",
        ),
        |s| {
            s.search = Some(latmesh_core::load::SloSearch {
                min_rps: 20.0,
                max_rps: 160.0,
                steps: 4,
                min_requests: 20,
                resolution_pct: 10.0,
            });
        },
    );
    plan.scenarios[0].slo = Some(latmesh_core::slo::Slo {
        ttft_ms: Some(300.0),
        tpot_ms: None,
        e2e_ms: None,
        percentiles: vec![],
        goodput_pct: 90.0,
    });
    // 1.3 s into a phase of 4 search steps of 0.5 s, each followed by a 0.5 s gap: step 1 has
    // begun, steps 2 and 3 have not.
    let start = Instant::now() - Duration::from_millis(1_300);
    let (records, not_run, _) = run_phase_from(plan, Outbox::default(), start).await;
    assert!(records.is_empty(), "{records:?}");
    assert_eq!(
        not_run,
        NotRun {
            late: 2,
            cancelled: 0
        }
    );
}
