//! Open loop through the agent's own scheduler: a plan with one `rate` scenario (Poisson
//! arrivals) is built with `latmesh_core::campaign::load_toml_str` and run with
//! `latmesh_agent::load::run_rate` and a `PhaseCtx` (as agent/src/load/tests.rs does), in a
//! client child process (`LATMESH_LOAD_ROLE=open`, pinned to core 0).
//!
//! Measured: `sched_lag` of every record (how late each arrival left: the scheduler's
//! precision), and the TTFT error against the simulator's ground truth. The scheduler sends
//! no probe id, so the simulator child names each request itself (`{provider}.{k}`) and
//! notes its arrival time (`sim.rs`); a record is paired with the arrival of its provider
//! that came within 5 ms after its `send_agent_unix_us` when that pairing is unique both
//! ways. The rate is spread over many providers (5 requests/s each) so that two requests of
//! one provider rarely fall within 5 ms of each other; the ambiguous ones are left out and
//! counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use latmesh_agent::limits::Limiters;
use latmesh_agent::load::run_rate;
use latmesh_agent::outbox::Outbox;
use latmesh_agent::phase::PhaseCtx;
use latmesh_agent::probe::Prober;
use latmesh_agent::slot::SlotEnv;
use latmesh_core::load::LoadModel;
use latmesh_core::record::{Outcome, ProbeRecord};
use serde::{Deserialize, Serialize};

use crate::sim;
use crate::stats::Pcts;
use crate::sys;

/// Requests per second each provider gets.
pub const RPS_PER_PROVIDER: f64 = 5.0;

/// A pairing window: a request arrives at the simulator within this long after it was sent.
const PAIR_WINDOW_US: i64 = 5_000;

/// Provider names for `rate` requests/s.
pub fn providers(rate: f64) -> Vec<String> {
    let n = (rate / RPS_PER_PROVIDER).ceil().max(1.0) as usize;
    (0..n).map(|i| format!("p{i:04}")).collect()
}

/// One rate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Args {
    pub addr: String,
    /// The API the plan's providers are spoken to with.
    pub api: latmesh_core::api::Api,
    pub rate: f64,
    pub duration_ms: u64,
    pub tokens: u32,
    /// The simulator child (its CPU time is read from procfs).
    pub sim_pid: Option<u32>,
}

/// What one rate measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Out {
    pub rate: f64,
    pub providers: usize,
    pub duration_s: f64,
    /// Arrivals the plan has over the phase.
    pub planned: usize,
    /// Records received (one per arrival: ok, failed, or dropped).
    pub records: usize,
    pub ok: usize,
    /// Ok records whose connection came from the pool.
    #[serde(default)]
    pub reused: usize,
    pub dropped: usize,
    /// Not sent: too late (`NotRun::late`).
    pub late: u64,
    pub first_error: Option<String>,
    /// `sched_lag`, µs, every record.
    pub sched_lag: Pcts,
    /// Records with `sched_lag` over 1 ms.
    pub lag_over_1ms: usize,
    /// The bench's own check of `sched_lag`: `send_agent_unix_us` − the arrival's intended
    /// time (phase start + the plan's offset, on the wall clock), µs; negative = sent early
    /// (which `sched_lag_us`, an `Instant::elapsed`, reports as 0).
    #[serde(default)]
    pub send_vs_intended: Pcts,
    /// Records sent more than 100 µs before their intended time.
    #[serde(default)]
    pub early: usize,
    /// Client TTFT − simulator first-token `handed`, µs, paired records.
    pub ttft_err: Pcts,
    /// Request path (simulator arrival − `send_agent_unix_us`) and response path
    /// (`ttft_err` − request path), µs, paired records.
    pub req_path: Pcts,
    pub resp_err: Pcts,
    /// The client's involuntary context switches and minor page faults over the run.
    #[serde(default)]
    pub nivcsw: i64,
    #[serde(default)]
    pub minflt: i64,
    /// Time the client's thread waited on a run queue (runnable, another task on its core),
    /// s (`/proc/thread-self/schedstat`).
    #[serde(default)]
    pub runqueue_wait_s: Option<f64>,
    /// Time the hypervisor took from CPU 0 (the client's) over the run, s (`steal`).
    #[serde(default)]
    pub steal_s: Option<f64>,
    /// Simulator CPU over the phase (user + system), s; filled in by the parent.
    #[serde(default)]
    pub sim_cpu_s: Option<f64>,
    /// Ok records without a unique pairing (ambiguous or none within the window).
    pub unpaired: usize,
    /// From the phase start to the last record, s.
    pub secs: f64,
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// Most attempts in flight at a 10 ms sample.
    pub max_in_flight: u32,
    pub load1_start: String,
}

fn plan_toml(addr: &str, providers: &[String], args: &Args) -> String {
    let mut s = format!(
        r#"
[campaign]
name = "bench-open-loop"
seed = 11
regions = ["us-east"]

[[scenarios]]
name = "open"
prompt_ids = ["short-qa-en-001"]
max_tokens = {tokens}
timeout_total_s = 60
[scenarios.rate]
rps = {rps}
arrivals = "poisson"
duration_s = {dur}
"#,
        tokens = args.tokens,
        rps = args.rate / providers.len() as f64,
        dur = args.duration_ms as f64 / 1000.0,
    );
    for p in providers {
        s.push_str(&format!(
            "\n[[providers]]\nname = \"{p}\"\nbase_url = \"http://{addr}/{p}/v1\"\nmodel_id = \"deepseek-v4-flash\"\napi = \"{}\"\n",
            args.api
        ));
    }
    s
}

/// Runs one rate in this (child) process.
pub fn run(args: &Args) -> Out {
    sys::raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(phase(args))
}

async fn phase(args: &Args) -> Out {
    let names = providers(args.rate);
    let plan = latmesh_core::campaign::load_toml_str(
        &plan_toml(&args.addr, &names, args),
        std::path::Path::new("."),
    )
    .expect("bench plan");
    let plan = Arc::new(plan);
    let LoadModel::Rate(spec) = plan.scenarios[0].load.clone() else {
        panic!("the bench plan's scenario is not `rate`")
    };
    let planned: usize = spec.arrivals_us(plan.seed, 0).len() * names.len();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(ProbeRecord, Vec<u64>)>(8192);
    let env = SlotEnv {
        limits: Arc::new(Limiters::new(&plan, 1)),
        ..SlotEnv::default()
    };
    let in_flight = env.in_flight.clone();
    let ctx = PhaseCtx {
        campaign_id: "bench".into(),
        plan: plan.clone(),
        prober: Arc::new(Prober::new(None).expect("prober")),
        tx,
        env,
        outbox: Outbox::default(),
        max_lateness: Duration::from_secs(1),
        turns_not_sent: Arc::default(),
        in_flight: Arc::new(latmesh_agent::drain::InFlight::new(plan.providers.len())),
    };
    let collector = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some((rec, _)) = rx.recv().await {
            v.push(rec);
        }
        v
    });
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut max = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                max = max.max(in_flight.load(Ordering::Relaxed));
            }
            max
        }
    });
    let load1_start = sys::load1();
    let (u0, s0) = sys::cpu_self();
    let (use0, steal0, wait0) = (sys::usage(), sys::steal_ticks(0), sys::runqueue_wait_s());
    let sim0 = args.sim_pid.and_then(sys::cpu_of_pid);
    let start = Instant::now() + Duration::from_millis(200);
    let start_wall = sys::unix_us() + 200_000;
    let not_run = run_rate(&ctx, 0, &spec, start).await;
    drop(ctx);
    let records = collector.await.expect("collector");
    let (u1, s1) = sys::cpu_self();
    let (use1, steal1, wait1) = (sys::usage(), sys::steal_ticks(0), sys::runqueue_wait_s());
    let sim1 = args.sim_pid.and_then(sys::cpu_of_pid);
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let max_in_flight = sampler.await.unwrap_or(0);

    let mut lag: Vec<i64> = records.iter().map(|r| r.sched_lag_us).collect();
    let offsets: Vec<Vec<u64>> = vec![spec.arrivals_us(plan.seed, 0); names.len()];
    let index: HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut vs: Vec<i64> = records
        .iter()
        .filter_map(|r| {
            let off = offsets
                .get(*index.get(r.provider.as_str())?)?
                .get(r.slot as usize)?;
            Some(r.send_agent_unix_us - (start_wall + *off as i64))
        })
        .collect();
    let early = vs.iter().filter(|&&v| v < -100).count();
    let lag_over_1ms = lag.iter().filter(|&&l| l > 1_000).count();
    let ok: Vec<&ProbeRecord> = records
        .iter()
        .filter(|r| r.outcome() == Outcome::Ok)
        .collect();

    // Pair records with the simulator's arrivals, per provider.
    let arrivals = sim::fetch_dump(&args.addr).await.unwrap_or_else(|e| {
        eprintln!("open loop: no ground truth: {e}");
        Vec::new()
    });
    let mut by_provider: HashMap<&str, Vec<&sim::Arrival>> = HashMap::new();
    for a in &arrivals {
        by_provider.entry(&a.provider).or_default().push(a);
    }
    for v in by_provider.values_mut() {
        v.sort_by_key(|a| a.at_unix_us);
    }
    let mut sends: HashMap<&str, Vec<i64>> = HashMap::new();
    for r in &records {
        sends
            .entry(r.provider.as_str())
            .or_default()
            .push(r.send_agent_unix_us);
    }
    for v in sends.values_mut() {
        v.sort_unstable();
    }
    let in_window = |sorted: &[i64], lo: i64, hi: i64| {
        sorted.partition_point(|&t| t <= hi) - sorted.partition_point(|&t| t < lo)
    };
    let mut err = Vec::with_capacity(ok.len());
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    let mut unpaired = 0;
    for r in &ok {
        let (Some(list), Some(ttft)) = (by_provider.get(r.provider.as_str()), r.ttft_us) else {
            unpaired += 1;
            continue;
        };
        let s = r.send_agent_unix_us;
        let times: Vec<i64> = list.iter().map(|a| a.at_unix_us).collect();
        let lo = times.partition_point(|&t| t < s);
        let hi = times.partition_point(|&t| t <= s + PAIR_WINDOW_US);
        let unique = hi - lo == 1 && {
            let a = list[lo].at_unix_us;
            // No other send of this provider could have been this arrival.
            in_window(&sends[r.provider.as_str()], a - PAIR_WINDOW_US, a) == 1
        };
        match (unique, list.get(lo)) {
            (true, Some(a)) if a.first_handed_us.is_some() => {
                let e = ttft as i64 - a.first_handed_us.unwrap_or(0) as i64;
                let path = a.at_unix_us - s;
                err.push(e);
                req.push(path);
                resp.push(e - path);
            }
            _ => unpaired += 1,
        }
    }
    Out {
        rate: args.rate,
        providers: names.len(),
        duration_s: args.duration_ms as f64 / 1000.0,
        planned,
        records: records.len(),
        ok: ok.len(),
        reused: ok.iter().filter(|r| r.conn_reused).count(),
        dropped: records
            .iter()
            .filter(|r| r.outcome() == Outcome::Dropped)
            .count(),
        late: not_run.late,
        first_error: records
            .iter()
            .find(|r| r.outcome() != Outcome::Ok)
            .map(|r| {
                format!(
                    "{}: {}",
                    r.outcome().as_str(),
                    r.error_message.as_deref().unwrap_or("")
                )
            }),
        sched_lag: Pcts::of(&mut lag),
        send_vs_intended: Pcts::of(&mut vs),
        early,
        lag_over_1ms,
        ttft_err: Pcts::of(&mut err),
        req_path: Pcts::of(&mut req),
        resp_err: Pcts::of(&mut resp),
        sim_cpu_s: sim0.zip(sim1).map(|(a, b)| b - a),
        nivcsw: use1.nivcsw - use0.nivcsw,
        minflt: use1.minflt - use0.minflt,
        steal_s: steal0
            .zip(steal1)
            .map(|(a, b)| b.saturating_sub(a) as f64 / 100.0),
        runqueue_wait_s: wait0.zip(wait1).map(|(a, b)| b - a),
        unpaired,
        secs,
        cpu_user_s: u1 - u0,
        cpu_sys_s: s1 - s0,
        max_in_flight,
        load1_start,
    }
}
