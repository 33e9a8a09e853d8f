//! Concurrent streams held by one client process: `n` streams launched over a short ramp,
//! each long enough (TTFT plus its tokens) that all are open at once, against a simulator
//! child. Runs in a client child process of its own (`LATMESH_LOAD_ROLE=streams`, pinned to
//! core 0), so its CPU time and resident memory are the client's alone, from a fresh
//! process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use latmesh_agent::probe::{ProbeOptions, ProbeRequest, Prober};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};

use crate::raw::RawClient;
use crate::sim;
use crate::stats::{Pcts, max_overlap};
use crate::sys;

/// The provider every stream asks.
pub const PROVIDER: &str = "load";

/// Which client holds the streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Which {
    /// latmesh's probe engine ([`Prober`]).
    Latmesh,
    /// The raw client of the accuracy bench (`benches/accuracy/raw.rs`): the machine's floor.
    Floor,
}

impl Which {
    pub fn tag(self) -> &'static str {
        match self {
            Which::Latmesh => "latmesh",
            Which::Floor => "floor",
        }
    }
}

/// One level.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Args {
    pub addr: String,
    /// The API both clients speak.
    pub api: latmesh_core::api::Api,
    pub n: usize,
    pub ramp_ms: u64,
    pub tokens: u32,
    pub which: Which,
    /// The simulator child (its CPU time is read from procfs).
    pub sim_pid: Option<u32>,
}

/// What a level measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Out {
    pub n: usize,
    pub ok: usize,
    pub first_error: Option<String>,
    /// Most streams in flight at a 10 ms sample.
    pub max_in_flight_sampled: usize,
    /// Most streams in flight at once, exactly (from each stream's start and end).
    pub max_in_flight_exact: usize,
    /// From the first launch to the last stream's end, s.
    pub secs: f64,
    /// Client CPU over the level (user, system), s.
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    /// Token frames received.
    pub frames: u64,
    /// Streams whose connection came from the pool.
    pub reused: usize,
    /// Resident memory right before the first launch, and the process's peak (`VmHWM`), KiB.
    pub rss_before_kib: u64,
    pub rss_peak_kib: u64,
    /// Machine-wide TCP sockets in use and socket buffer pages at their sampled peak, and
    /// before the level.
    pub tcp_inuse_before: u64,
    pub tcp_inuse_peak: u64,
    pub tcp_mem_pages_before: u64,
    pub tcp_mem_pages_peak: u64,
    /// Client TTFT − the simulator's first-token `handed` stamp, µs (as the accuracy bench:
    /// request path and response path together).
    pub ttft_err: Pcts,
    /// Request path: the simulator's arrival stamp − the client's `t_send`, both on the wall
    /// clock, µs (connect, the server's accept queue, request write and read).
    pub req_path: Pcts,
    /// Response path: `ttft_err` − `req_path`, µs: from the first token frame handed to the
    /// server's socket to the client's stamp of the read that held it.
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
    /// Simulator CPU over the level (user + system), s; filled in by the parent.
    #[serde(default)]
    pub sim_cpu_s: Option<f64>,
    /// Streams without ground truth (or without a first token in it).
    pub no_truth: usize,
    /// Client TTFT, µs.
    pub ttft: Pcts,
    pub load1_start: String,
}

/// One stream, as either client saw it.
struct Stream {
    ok: bool,
    /// The client's `t_send`.
    t_send: Option<Instant>,
    start: Instant,
    end: Instant,
    ttft_us: Option<u64>,
    frames: u64,
    reused: bool,
    error: Option<String>,
}

const TIMEOUTS: Timeouts = Timeouts {
    connect_s: 30.0,
    ttft_s: 120.0,
    idle_s: 120.0,
    total_s: 600.0,
};

fn probe_request<'a>(
    api: latmesh_core::api::Api,
    base: &'a str,
    id: &'a str,
    tokens: u32,
    messages: &'a [Message],
) -> ProbeRequest<'a> {
    ProbeRequest {
        base_url: base,
        model_id: "deepseek-v4-flash",
        api_key: None,
        messages,
        stream: true,
        max_tokens: tokens,
        temperature: None,
        top_p: None,
        timeouts: &TIMEOUTS,
        probe_id: Some(id),
        user_agent: None,
        shape: crate::raw::shape(api),
        secret_headers: &[],
    }
}

enum Client {
    Latmesh(Prober),
    Floor(RawClient),
}

async fn one(
    client: &Client,
    api: latmesh_core::api::Api,
    base: &str,
    addr: &str,
    i: usize,
    tokens: u32,
) -> Stream {
    let id = format!("s{i}");
    let messages = [Message::new("user", "Say something short.")];
    let req = probe_request(api, base, &id, tokens, &messages);
    match client {
        Client::Latmesh(p) => {
            let start = Instant::now();
            let r = p.probe_with(&req, ProbeOptions::default()).await;
            let end = Instant::now();
            let rec = r.record;
            Stream {
                ok: rec.outcome() == Outcome::Ok,
                t_send: r.t_send,
                start,
                end,
                ttft_us: rec.ttft_us,
                frames: u64::from(rec.token_payloads),
                reused: rec.conn_reused,
                error: rec
                    .error_message
                    .map(|m| format!("{}: {m}", rec.outcome.map_or("?", |o| o.as_str()))),
            }
        }
        Client::Floor(raw) => {
            let path = format!("/{PROVIDER}/v1{}", api.path());
            let bytes = crate::raw::request_bytes(addr, &path, &req);
            let start = Instant::now();
            let r = raw.probe(&bytes).await;
            let end = Instant::now();
            Stream {
                ok: r.ok,
                t_send: r.t_send,
                start,
                end,
                ttft_us: r.ttft_us,
                frames: u64::from(r.frames),
                reused: r.reused,
                error: r.error,
            }
        }
    }
}

/// Runs one level in this (child) process.
pub fn run(args: &Args) -> Out {
    sys::raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(level(args))
}

async fn level(args: &Args) -> Out {
    let client = Arc::new(match args.which {
        Which::Latmesh => Client::Latmesh(Prober::new(None).expect("prober")),
        Which::Floor => Client::Floor(RawClient::new(&args.addr, args.api)),
    });
    let base = Arc::new(format!("http://{}/{PROVIDER}/v1", args.addr));
    let addr = Arc::new(args.addr.clone());
    let in_flight = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::with_capacity(args.n);
    // Sampler: in flight and machine-wide TCP sockets, every 10 ms.
    let (inuse0, mem0) = sys::tcp_sockstat().unwrap_or_default();
    let sampler = tokio::spawn({
        let (in_flight, stop) = (in_flight.clone(), stop.clone());
        async move {
            let (mut max_if, mut max_inuse, mut max_mem) = (0, 0, 0);
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                max_if = max_if.max(in_flight.load(Ordering::Relaxed));
                if let Some((inuse, mem)) = sys::tcp_sockstat() {
                    max_inuse = max_inuse.max(inuse);
                    max_mem = max_mem.max(mem);
                }
            }
            (max_if, max_inuse, max_mem)
        }
    });
    let load1_start = sys::load1();
    // Wall clock of an `Instant` (the simulator's arrival stamps are wall clock).
    let anchor = (Instant::now(), sys::unix_us());
    let wall_us = |t: Instant| {
        anchor.1 + t.saturating_duration_since(anchor.0).as_micros() as i64
            - anchor.0.saturating_duration_since(t).as_micros() as i64
    };
    let rss_before_kib = sys::status_kib("VmRSS").unwrap_or(0);
    let (u0, s0) = sys::cpu_self();
    let (use0, steal0, wait0) = (sys::usage(), sys::steal_ticks(0), sys::runqueue_wait_s());
    let sim0 = args.sim_pid.and_then(sys::cpu_of_pid);
    let t0 = Instant::now() + Duration::from_millis(20);
    let ramp = Duration::from_millis(args.ramp_ms);
    for i in 0..args.n {
        let at = t0 + ramp.mul_f64(i as f64 / args.n as f64);
        tokio::time::sleep_until(at.into()).await;
        let (client, base, addr, in_flight) = (
            client.clone(),
            base.clone(),
            addr.clone(),
            in_flight.clone(),
        );
        let (api, tokens) = (args.api, args.tokens);
        handles.push(tokio::spawn(async move {
            in_flight.fetch_add(1, Ordering::Relaxed);
            let s = one(&client, api, &base, &addr, i, tokens).await;
            in_flight.fetch_sub(1, Ordering::Relaxed);
            s
        }));
    }
    let mut streams = Vec::with_capacity(args.n);
    for h in handles {
        streams.push(h.await.expect("stream task"));
    }
    let (u1, s1) = sys::cpu_self();
    let (use1, steal1, wait1) = (sys::usage(), sys::steal_ticks(0), sys::runqueue_wait_s());
    let sim1 = args.sim_pid.and_then(sys::cpu_of_pid);
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (max_if, max_inuse, max_mem) = sampler.await.unwrap_or_default();
    let rss_peak_kib = sys::status_kib("VmHWM").unwrap_or(0);

    let origin = streams.iter().map(|s| s.start).min().unwrap_or(t0);
    let us = |t: Instant| t.saturating_duration_since(origin).as_micros() as u64;
    let intervals: Vec<(u64, u64)> = streams.iter().map(|s| (us(s.start), us(s.end))).collect();
    let mut ttft: Vec<i64> = streams
        .iter()
        .filter(|s| s.ok)
        .filter_map(|s| s.ttft_us.map(|v| v as i64))
        .collect();

    // Ground truth: one dump of every request the simulator noted.
    let truth: std::collections::HashMap<String, (i64, u64)> =
        match sim::fetch_dump(&args.addr).await {
            Ok(list) => list
                .into_iter()
                .filter_map(|a| Some((a.id, (a.at_unix_us, a.first_handed_us?))))
                .collect(),
            Err(e) => {
                eprintln!("streams: no ground truth: {e}");
                Default::default()
            }
        };
    let (mut err, mut req, mut resp) = (Vec::new(), Vec::new(), Vec::new());
    let mut no_truth = 0;
    for (i, s) in streams.iter().enumerate() {
        if !s.ok {
            continue;
        }
        match (s.ttft_us, s.t_send, truth.get(&format!("s{i}"))) {
            (Some(c), Some(t_send), Some(&(at, h))) => {
                let e = c as i64 - h as i64;
                let r = at - wall_us(t_send);
                err.push(e);
                req.push(r);
                resp.push(e - r);
            }
            _ => no_truth += 1,
        }
    }
    Out {
        n: args.n,
        ok: streams.iter().filter(|s| s.ok).count(),
        first_error: streams.iter().find_map(|s| s.error.clone()),
        max_in_flight_sampled: max_if,
        max_in_flight_exact: max_overlap(&intervals),
        secs,
        cpu_user_s: u1 - u0,
        cpu_sys_s: s1 - s0,
        frames: streams.iter().map(|s| s.frames).sum(),
        reused: streams.iter().filter(|s| s.reused).count(),
        rss_before_kib,
        rss_peak_kib,
        tcp_inuse_before: inuse0,
        tcp_inuse_peak: max_inuse,
        tcp_mem_pages_before: mem0,
        tcp_mem_pages_peak: max_mem,
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
        no_truth,
        ttft: Pcts::of(&mut ttft),
        load1_start,
    }
}
