//! Load benchmark of one agent's probe engine and scheduler against `latmesh-sim` on
//! loopback (issue 9, "Performance"): prints markdown tables, and with `--write` puts them
//! into BENCHMARKS.md between this bench's markers.
//!
//! ```sh
//! cargo bench -p latmesh-agent --bench load                 # full run, about 2 minutes
//! cargo bench -p latmesh-agent --bench load -- --smoke      # tiny sizes, < 30 s (CI)
//! cargo bench -p latmesh-agent --bench load -- --write      # and update BENCHMARKS.md
//! scripts/bench-load.sh [--smoke] [--write]                 # this and the coordinator's
//! ```
//!
//! Every measurement runs in processes of its own: the simulator in a child pinned to core
//! 1 (`taskset -c 1`; `benches/load/sim.rs`), the client in another child pinned to core 0
//! (this executable re-run with `LATMESH_LOAD_ROLE`), both on single-threaded runtimes, a
//! fresh pair for every level; this process only starts them and prints. So the client's CPU
//! time (`getrusage`) and resident memory (`VmRSS` before, `VmHWM` after) are the client's
//! alone, from a fresh process. Without `taskset` or with one CPU nothing is pinned. (The
//! agent binary runs tokio's multi-thread runtime on every core; here the client has one core,
//! the other is the simulator's: the numbers are what one core of an agent does.) On a shared
//! machine other processes preempt the pinned children: every row reports the client's
//! involuntary context switches and the load average, to tell a slow client from a busy
//! machine.
//!
//! * **Concurrent streams** (`benches/load/streams.rs`): `n` streams (100 / 1,000 / 10,000)
//!   launched over a ramp of `n / 5` ms (100 ms to 2 s), each TTFT 1 s then 200 tokens at
//!   20 ms (one per SSE frame), long enough that all are open at once. Held by latmesh's
//!   [`Prober`](latmesh_agent::probe::Prober) and, for comparison, by the raw floor client of
//!   the accuracy bench (`benches/accuracy/raw.rs`: tokio sockets, hand-written HTTP, no
//!   parsing). Reported: streams in flight (sampled every 10 ms, and exact from each
//!   stream's start and end), client CPU per million token frames, resident memory per
//!   stream, TTFT error against the simulator's ground truth (client-added = latmesh −
//!   floor, percentile by percentile).
//! * **Open loop** (`benches/load/open_loop.rs`): 500 / 1,000 / 2,000 requests/s for 10 s
//!   each through `latmesh_agent::load::run_rate` (Poisson arrivals, spread over providers
//!   at 5 requests/s each; TTFT 50 ms, 16 tokens at 20 ms): `sched_lag` and the TTFT error
//!   against ground truth.
//!
//! Knobs (environment): `LATMESH_LOAD_API` (`chat`, the default, `anthropic` or
//! `responses`: the API the clients speak; `--write` puts a run of another API than chat in
//! a block of its own, `load-{api}`), `LATMESH_LOAD_STREAMS` (`100,1000,10000`), `LATMESH_LOAD_TTFT_US`
//! (1000000), `LATMESH_LOAD_TOKENS` (200), `LATMESH_LOAD_ITL_US` (20000),
//! `LATMESH_LOAD_RATES` (`500,1000,2000`), `LATMESH_LOAD_DURATION_S` (10),
//! `LATMESH_LOAD_CLIENTS` (`both` or `latmesh`: the floor's runs left out),
//! `LATMESH_LOAD_PIN=0` (no pinning), `LATMESH_LOAD_NICE=N` (children under `nice -n N`: on
//! a shared machine, a negative value keeps other processes from preempting the pinned
//! children, which cannot move to the other core). Arguments:
//! `--only streams|open`, `--smoke`, `--write`.
//!
//! The open-file limit is raised to the hard limit (10,000 streams need 10,000 sockets in
//! each process); 10,000 connections to one port use 10,000 of the 28,000 ephemeral ports
//! of 127.0.0.1, enough without spreading over other loopback addresses.

use std::fmt::Write as _;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

#[path = "accuracy/raw.rs"]
#[allow(dead_code)]
mod raw;

#[path = "load/open_loop.rs"]
mod open_loop;
#[path = "load/sim.rs"]
mod sim;
#[path = "load/stats.rs"]
mod stats;
#[path = "load/streams.rs"]
mod streams;
#[path = "load/sys.rs"]
mod sys;

use stats::int;
use streams::Which;

const ARGS_ENV: &str = "LATMESH_LOAD_ARGS";

/// The open loop's answers: short, so a rate's requests do not pile up.
const OPEN_TTFT_US: u64 = 50_000;
const OPEN_TOKENS: u32 = 16;
const OPEN_ITL_US: u64 = 20_000;

/// Targets (issue 9), on 2 cores.
const TARGET_STREAMS: usize = 10_000;
const TARGET_KIB_PER_STREAM: f64 = 40.0;
const TARGET_LAG_P99_US: i64 = 1_000;
const TARGET_LAG_RATE: f64 = 2_000.0;
const TARGET_ADDED_P99_US: i64 = 50;
const TARGET_ADDED_STREAMS: usize = 1_000;

#[derive(Clone, Debug)]
struct Knobs {
    /// The API spoken (`LATMESH_LOAD_API`).
    api: latmesh_core::api::Api,
    smoke: bool,
    write: bool,
    streams: bool,
    open: bool,
    levels: Vec<usize>,
    ttft_us: u64,
    tokens: u32,
    itl_us: u64,
    rates: Vec<f64>,
    duration_ms: u64,
    floor: bool,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .unwrap_or_else(|_| panic!("{name}: cannot read {s:?}"))
        })
        .collect()
}

impl Knobs {
    fn parse() -> Knobs {
        let (mut smoke, mut write, mut only) = (false, false, None::<String>);
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--smoke" => smoke = true,
                "--write" => write = true,
                "--only" => only = args.next(),
                s if s.starts_with("--only=") => only = Some(s["--only=".len()..].to_string()),
                // What `cargo bench` passes to every bench binary.
                "--bench" => {}
                "--help" | "-h" => {
                    println!(
                        "load [--smoke] [--write] [--only streams|open]\n\n--smoke  tiny sizes (< 30 s), for CI\n--write  update the load section of BENCHMARKS.md\n\nenv: LATMESH_LOAD_STREAMS, LATMESH_LOAD_TTFT_US, LATMESH_LOAD_TOKENS, LATMESH_LOAD_ITL_US,\n     LATMESH_LOAD_RATES, LATMESH_LOAD_DURATION_S, LATMESH_LOAD_CLIENTS (both|latmesh)"
                    );
                    std::process::exit(0);
                }
                other => eprintln!("load: ignoring argument {other:?}"),
            }
        }
        let (levels, ttft, tokens, rates, dur) = if smoke {
            ("20,200", 200_000, 20, "100", 2.0)
        } else {
            ("100,1000,10000", 1_000_000, 200, "500,1000,2000", 10.0)
        };
        Knobs {
            api: raw::api_from_env("LATMESH_LOAD_API"),
            smoke,
            write,
            streams: only.as_deref().is_none_or(|o| o == "streams"),
            open: only.as_deref().is_none_or(|o| o == "open"),
            levels: env_list("LATMESH_LOAD_STREAMS", levels),
            ttft_us: env_or("LATMESH_LOAD_TTFT_US", ttft),
            tokens: env_or("LATMESH_LOAD_TOKENS", tokens).max(1),
            itl_us: env_or("LATMESH_LOAD_ITL_US", 20_000),
            rates: env_list("LATMESH_LOAD_RATES", rates),
            duration_ms: (env_or("LATMESH_LOAD_DURATION_S", dur) * 1000.0) as u64,
            floor: std::env::var("LATMESH_LOAD_CLIENTS").as_deref() != Ok("latmesh"),
        }
    }

    fn ramp_ms(n: usize) -> u64 {
        (n as u64 / 5).clamp(100, 2_000)
    }
}

/// Where children are pinned: (simulator core, client core).
#[derive(Clone, Copy)]
struct Pinning {
    sim: Option<usize>,
    client: Option<usize>,
}

/// Runs this executable as a client child with `role` and `args`; its last `RESULT` line.
fn client_child<A: Serialize, O: DeserializeOwned>(
    role: &str,
    args: &A,
    pin: Pinning,
) -> anyhow::Result<O> {
    let mut cmd = sys::child_command(pin.client)?;
    let mut child = cmd
        .env(sim::ROLE_ENV, role)
        .env(ARGS_ENV, serde_json::to_string(args)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut result = None;
    for line in std::io::BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let line = line?;
        match line.strip_prefix("RESULT ") {
            Some(json) => result = Some(serde_json::from_str(json)?),
            None => eprintln!("{role}: {line}"),
        }
    }
    let status = child.wait()?;
    match result {
        Some(r) => Ok(r),
        None => anyhow::bail!("{role} child exited ({status}) without a result"),
    }
}

fn child_args<A: DeserializeOwned>() -> A {
    serde_json::from_str(&std::env::var(ARGS_ENV).expect("LATMESH_LOAD_ARGS")).expect("args")
}

fn print_result<O: Serialize>(out: &O) {
    println!("RESULT {}", serde_json::to_string(out).expect("json"));
}

/// One streams level: the floor's run and latmesh's.
struct StreamRow {
    n: usize,
    floor: Option<streams::Out>,
    latmesh: Option<streams::Out>,
}

fn run_streams(k: &Knobs, pin: Pinning) -> Vec<StreamRow> {
    let mut rows = Vec::new();
    for &n in &k.levels {
        let mut row = StreamRow {
            n,
            floor: None,
            latmesh: None,
        };
        let whichs: &[Which] = if k.floor {
            &[Which::Floor, Which::Latmesh]
        } else {
            &[Which::Latmesh]
        };
        for &which in whichs {
            std::thread::sleep(Duration::from_millis(if k.smoke { 200 } else { 1_000 }));
            let spec = sim::SimSpec {
                providers: vec![streams::PROVIDER.to_string()],
                ttft_us: k.ttft_us,
                itl_us: k.itl_us,
                tokens: k.tokens,
            };
            let sim = match sim::start(&spec, pin.sim) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("streams {n} {}: simulator: {e}", which.tag());
                    continue;
                }
            };
            let args = streams::Args {
                addr: sim.addr.clone(),
                api: k.api,
                n,
                ramp_ms: Knobs::ramp_ms(n),
                tokens: k.tokens,
                which,
                sim_pid: Some(sim.pid()),
            };
            let t = Instant::now();
            match client_child::<_, streams::Out>("streams", &args, pin) {
                Ok(o) => {
                    eprintln!(
                        "streams {n} {}: {} ok in {:.1} s (wall {:.1} s), in flight max {} / {}, CPU {:.2} s, RSS {} → {} KiB, TTFT error P50/P99 {} / {} µs{}",
                        which.tag(),
                        o.ok,
                        o.secs,
                        t.elapsed().as_secs_f64(),
                        o.max_in_flight_sampled,
                        o.max_in_flight_exact,
                        o.cpu_user_s + o.cpu_sys_s,
                        o.rss_before_kib,
                        o.rss_peak_kib,
                        o.ttft_err.p50,
                        o.ttft_err.p99,
                        o.first_error
                            .as_deref()
                            .map_or(String::new(), |e| format!("; first error: {e}"))
                    );
                    match which {
                        Which::Floor => row.floor = Some(o),
                        Which::Latmesh => row.latmesh = Some(o),
                    }
                }
                Err(e) => eprintln!("streams {n} {}: {e:#}", which.tag()),
            }
            drop(sim);
        }
        rows.push(row);
    }
    rows
}

fn run_open(k: &Knobs, pin: Pinning) -> Vec<open_loop::Out> {
    let mut rows = Vec::new();
    for &rate in &k.rates {
        std::thread::sleep(Duration::from_millis(if k.smoke { 200 } else { 1_000 }));
        let spec = sim::SimSpec {
            providers: open_loop::providers(rate),
            ttft_us: OPEN_TTFT_US,
            itl_us: OPEN_ITL_US,
            tokens: OPEN_TOKENS,
        };
        let sim = match sim::start(&spec, pin.sim) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("open loop {rate}/s: simulator: {e}");
                continue;
            }
        };
        let args = open_loop::Args {
            addr: sim.addr.clone(),
            api: k.api,
            rate,
            duration_ms: k.duration_ms,
            tokens: OPEN_TOKENS,
            sim_pid: Some(sim.pid()),
        };
        match client_child::<_, open_loop::Out>("open", &args, pin) {
            Ok(o) => {
                eprintln!(
                    "open loop {rate}/s: {} records ({} ok) in {:.1} s, sched_lag P50/P99/max {} µs, TTFT error P50/P99 {} / {} µs ({} unpaired)",
                    o.records,
                    o.ok,
                    o.secs,
                    o.sched_lag.ppm(),
                    o.ttft_err.p50,
                    o.ttft_err.p99,
                    o.unpaired
                );
                rows.push(o);
            }
            Err(e) => eprintln!("open loop {rate}/s: {e:#}"),
        }
        drop(sim);
    }
    rows
}

// ---------------------------------------------------------------------------------------
// Report.

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn per_stream_kib(o: &streams::Out) -> f64 {
    o.rss_peak_kib.saturating_sub(o.rss_before_kib) as f64 / o.n.max(1) as f64
}

fn cpu_per_m(o: &streams::Out) -> String {
    if o.frames == 0 {
        return "–".into();
    }
    format!(
        "{:.1}",
        (o.cpu_user_s + o.cpu_sys_s) / (o.frames as f64 / 1e6)
    )
}

/// CPU seconds over wall seconds, as a share of one core.
fn share(cpu: Option<f64>, secs: f64) -> String {
    cpu.filter(|_| secs > 0.0)
        .map_or("–".into(), |c| format!("{:.0} %", 100.0 * c / secs))
}

/// Involuntary context switches, minor page faults and steal time of the client's run.
fn interference(nivcsw: i64, wait: Option<f64>, minflt: i64, steal: Option<f64>) -> String {
    format!(
        "{} / {} / {} / {}",
        int(nivcsw),
        wait.map_or("–".into(), |s| format!("{s:.3}")),
        int(minflt),
        steal.map_or("–".into(), |s| format!("{s:.2}"))
    )
}

/// P50 minus P50 and P99 minus P99.
fn diff(a: &stats::Pcts, b: &stats::Pcts) -> String {
    if a.n == 0 || b.n == 0 {
        return "– / –".into();
    }
    format!("{} / {}", int(a.p50 - b.p50), int(a.p99 - b.p99))
}

fn verdict(met: bool) -> &'static str {
    if met { "**met**" } else { "**not met**" }
}

struct Context {
    started: String,
    load_start: String,
    load_end: String,
    pin: Pinning,
    nofile: Option<(u64, u64)>,
    secs: f64,
}

fn report(k: &Knobs, ctx: &Context, srows: &[StreamRow], orows: &[open_loop::Out]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Measured {} on {} vCPU ({}), {:.0} GiB RAM, Linux {}; {}; source: git {}; load average at start: {}, at end: {}; {:.0} s in all.\n",
        ctx.started,
        sys::nproc(),
        sys::cpu_model(),
        sys::mem_total_gib(),
        sys::kernel(),
        sys::rustc_version(),
        sys::git_rev(),
        ctx.load_start,
        ctx.load_end,
        ctx.secs
    );
    let pinning = match (ctx.pin.sim, ctx.pin.client) {
        (Some(a), Some(b)) => format!(
            "simulator in a child process pinned to core {a}, client in a child process pinned to core {b} (`taskset`), both on single-threaded tokio runtimes, a fresh pair per row"
        ),
        _ => "simulator and client in child processes, not pinned (`LATMESH_LOAD_PIN=0`, no `taskset` or one CPU), single-threaded runtimes, a fresh pair per row".into(),
    };
    let pinning = match std::env::var("LATMESH_LOAD_NICE") {
        Ok(n) if !n.trim().is_empty() => {
            format!("{pinning}; children run under `nice -n {}`", n.trim())
        }
        _ => pinning,
    };
    let _ = writeln!(
        s,
        "Command: `{}cargo bench -p latmesh-agent --bench load{}`{}. API: {} (`LATMESH_LOAD_API`). Setup: {pinning}; open files: {}.\n",
        command_env(),
        if k.smoke { " -- --smoke" } else { "" },
        if k.smoke {
            " (**smoke sizes: the targets are not judged**)"
        } else {
            ""
        },
        k.api,
        ctx.nofile
            .map_or("limit unknown".into(), |(soft, hard)| format!(
                "soft limit {soft} (hard {hard})"
            ))
    );
    if !srows.is_empty() {
        let _ = writeln!(s, "### Concurrent streams held by one client\n");
        let _ = writeln!(
            s,
            "Each stream: TTFT {} ms (σ 0.1), then {} tokens at {} ms (σ 0.15), one per SSE frame, HTTP/1.1 over loopback; `n` streams launched over n/5 ms (0.1–2 s). **latmesh** = the probe engine (`Prober::probe_with`); **floor** = the accuracy bench's raw client (tokio sockets, hand-written HTTP/1.1, 8 KiB read buffer per connection, no parsing): what any client pays on this machine. In flight: most streams between their start and end, sampled every 10 ms / exact. CPU = user + system of the client process over the row (`getrusage`), per million token frames received. Resident = (`VmHWM` at the end − `VmRSS` before the first launch) / n. TCP columns are machine-wide (both ends of loopback, `/proc/net/sockstat`; socket buffers are kernel memory, not in the RSS). TTFT error = client TTFT − the simulator's first-token `handed` stamp (µs after its handler's `received`), as in the accuracy bench; it splits into the **request path** (the simulator's arrival stamp, wall clock, taken by the bench's middleware right before the handler − the client's `t_send` on the wall clock: connect, the server's accept queue, request write and parse) and the **response path** (the rest: from the first token frame handed to hyper to the client's stamp of the read that held it). Every stream here opens a new connection within the ramp, so the request path carries the simulator's accept queue.\n",
            k.ttft_us as f64 / 1000.0,
            k.tokens,
            k.itl_us as f64 / 1000.0
        );
        let _ = writeln!(
            s,
            "| streams | client | ok | in flight max: sampled / exact | seconds | token frames | frames/s | client CPU s (user + sys) | CPU s per 1M tokens | simulator CPU | RSS before → peak (MiB) | resident per stream (KiB) | TCP sockets peak | socket buffers peak (MiB) | TTFT error P50 / P99 / max (µs) | … request path P50 / P99 | … response path P50 / P99 / max | client preempted / run-queue wait (s) / page faults / CPU 0 steal (s) | load avg (1 min) |"
        );
        let _ = writeln!(
            s,
            "| ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for r in srows {
            for (which, o) in [("floor", &r.floor), ("latmesh", &r.latmesh)] {
                let Some(o) = o else { continue };
                let _ = writeln!(
                    s,
                    "| {} | {which} | {} | {} / {} | {:.1} | {} | {} | {:.2} ({:.2} + {:.2}) | {} | {} | {} → {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} |",
                    int(r.n as i64),
                    int(o.ok as i64),
                    int(o.max_in_flight_sampled as i64),
                    int(o.max_in_flight_exact as i64),
                    o.secs,
                    int(o.frames as i64),
                    int((o.frames as f64 / o.secs.max(1e-9)) as i64),
                    o.cpu_user_s + o.cpu_sys_s,
                    o.cpu_user_s,
                    o.cpu_sys_s,
                    cpu_per_m(o),
                    share(o.sim_cpu_s, o.secs),
                    mib(o.rss_before_kib),
                    mib(o.rss_peak_kib),
                    per_stream_kib(o),
                    int(o.tcp_inuse_peak as i64),
                    o.tcp_mem_pages_peak as f64 * 4.0 / 1024.0,
                    o.ttft_err.ppm(),
                    o.req_path.pp(),
                    o.resp_err.ppm(),
                    interference(o.nivcsw, o.runqueue_wait_s, o.minflt, o.steal_s),
                    o.load1_start
                );
            }
        }
        let both: Vec<&StreamRow> = srows
            .iter()
            .filter(|r| r.floor.is_some() && r.latmesh.is_some())
            .collect();
        if !both.is_empty() {
            let _ = writeln!(
                s,
                "\nClient-added TTFT error = latmesh − floor, P50 minus P50 and P99 minus P99 (two runs one after the other, each with a fresh simulator: the streams do not pair up). CPU and memory likewise.\n"
            );
            let _ = writeln!(
                s,
                "| streams | latmesh TTFT error P50 / P99 (µs) | floor P50 / P99 (µs) | client-added P50 / P99 (µs) | … request path | … response path | CPU s per 1M tokens: latmesh / floor | resident per stream (KiB): latmesh / floor |"
            );
            let _ = writeln!(
                s,
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            );
            for r in both {
                let (l, f) = (
                    r.latmesh.as_ref().expect("both"),
                    r.floor.as_ref().expect("both"),
                );
                let _ = writeln!(
                    s,
                    "| {} | {} / {} | {} / {} | **{}** | {} | {} | {} / {} | {:.1} / {:.1} |",
                    int(r.n as i64),
                    int(l.ttft_err.p50),
                    int(l.ttft_err.p99),
                    int(f.ttft_err.p50),
                    int(f.ttft_err.p99),
                    diff(&l.ttft_err, &f.ttft_err),
                    diff(&l.req_path, &f.req_path),
                    diff(&l.resp_err, &f.resp_err),
                    cpu_per_m(l),
                    cpu_per_m(f),
                    per_stream_kib(l),
                    per_stream_kib(f)
                );
            }
        }
        for r in srows {
            for (name, o) in [("floor", &r.floor), ("latmesh", &r.latmesh)] {
                if let Some(o) = o
                    && (o.ok < o.n || o.no_truth > 0)
                {
                    let _ = writeln!(
                        s,
                        "\n{} streams ({name}): {} not ok, {} without ground truth{}.",
                        int(r.n as i64),
                        o.n - o.ok,
                        o.no_truth,
                        o.first_error
                            .as_deref()
                            .map_or(String::new(), |e| format!("; first error: `{e}`"))
                    );
                }
            }
        }
        let _ = writeln!(s);
    }
    if !orows.is_empty() {
        let _ = writeln!(
            s,
            "### Open loop through the agent's scheduler (`load::run_rate`)\n"
        );
        let _ = writeln!(
            s,
            "A plan with one `rate` scenario (Poisson arrivals, {} requests/s per provider, as many providers as the rate needs), run by `latmesh_agent::load::run_rate` with a `PhaseCtx` on the client's runtime; each answer TTFT {} ms, {} tokens at {} ms. `sched_lag` = how late each arrival left (the record's `sched_lag_us`; no politeness caps, so it is the scheduler's own precision); the bench checks it against the wall clock: the record's `send_agent_unix_us` − (phase start + the plan's offset of that arrival), and counts sends more than 100 µs early (an early send shows as `sched_lag` 0). TTFT error = client TTFT − the simulator's first-token `handed`, for records paired with the simulator's arrival log (the one arrival of the record's provider within 5 ms after its `send_agent_unix_us`, unique both ways; the rest are counted as unpaired), split into request and response path as above. Pooled connections: share of ok records sent over a kept-alive connection. CPU is a share of one core over the phase. Client preempted = involuntary context switches of the client process (`getrusage`: it was runnable but another process took its core), with the time its thread waited on the run queue (`/proc/thread-self/schedstat`), its minor page faults and the hypervisor's steal time on core 0: what the rest of the machine did to the run.\n",
            open_loop::RPS_PER_PROVIDER,
            OPEN_TTFT_US / 1000,
            OPEN_TOKENS,
            OPEN_ITL_US / 1000
        );
        let _ = writeln!(
            s,
            "| requests/s | providers | seconds | arrivals planned / records (late) | achieved requests/s | ok / dropped | sched_lag P50 / P99 / max (µs) | sched_lag > 1 ms | bench's check: send − intended P50 / P99 (early) | TTFT error P50 / P99 / max (µs) | … request path P50 / P99 | … response path P50 / P99 / max | paired / unpaired | pooled connections | client CPU (user + sys) | simulator CPU | in flight max | client preempted / run-queue wait (s) / page faults / CPU 0 steal (s) | load avg (1 min) |"
        );
        let _ = writeln!(
            s,
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for o in orows {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} / {} ({}) | {} | {} / {} | {} | {} ({:.2} %) | {} ({}) | {} | {} | {} | {} / {} | {:.0} % | {:.0} % ({:.0} + {:.0}) | {} | {} | {} | {} |",
                int(o.rate as i64),
                o.providers,
                o.duration_s,
                int(o.planned as i64),
                int(o.records as i64),
                o.late,
                int((o.records as f64 / o.duration_s.max(1e-9)) as i64),
                int(o.ok as i64),
                int(o.dropped as i64),
                o.sched_lag.ppm(),
                int(o.lag_over_1ms as i64),
                100.0 * o.lag_over_1ms as f64 / o.records.max(1) as f64,
                o.send_vs_intended.pp(),
                int(o.early as i64),
                o.ttft_err.ppm(),
                o.req_path.pp(),
                o.resp_err.ppm(),
                int(o.ttft_err.n as i64),
                int(o.unpaired as i64),
                100.0 * o.reused as f64 / o.ok.max(1) as f64,
                100.0 * (o.cpu_user_s + o.cpu_sys_s) / o.secs.max(1e-9),
                100.0 * o.cpu_user_s / o.secs.max(1e-9),
                100.0 * o.cpu_sys_s / o.secs.max(1e-9),
                share(o.sim_cpu_s, o.secs),
                int(i64::from(o.max_in_flight)),
                interference(o.nivcsw, o.runqueue_wait_s, o.minflt, o.steal_s),
                o.load1_start
            );
        }
        for o in orows {
            if let Some(e) = &o.first_error {
                let _ = writeln!(
                    s,
                    "\n{} requests/s: {} of {} records not ok; first: `{e}`.",
                    int(o.rate as i64),
                    o.records - o.ok,
                    o.records
                );
            }
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "### Targets (2 cores)\n");
    let _ = writeln!(s, "| target | measured | |");
    let _ = writeln!(s, "| :--- | :--- | :--- |");
    let judged = |met: bool| {
        if k.smoke {
            "not judged (smoke)"
        } else {
            verdict(met)
        }
    };
    let big = srows
        .iter()
        .filter(|r| r.latmesh.is_some())
        .max_by_key(|r| r.n)
        .filter(|r| r.n >= TARGET_STREAMS || k.smoke);
    match big.and_then(|r| r.latmesh.as_ref().map(|o| (r.n, o))) {
        Some((n, o)) => {
            let _ = writeln!(
                s,
                "| ≥ {} concurrent streams | {} of {} streams in flight at once ({} ok) | {} |",
                int(TARGET_STREAMS as i64),
                int(o.max_in_flight_exact as i64),
                int(n as i64),
                int(o.ok as i64),
                judged(o.max_in_flight_exact >= TARGET_STREAMS && o.ok == n)
            );
            let kib = per_stream_kib(o);
            let _ = writeln!(
                s,
                "| < {:.0} KiB resident per stream | {kib:.1} KiB at {} streams | {} |",
                TARGET_KIB_PER_STREAM,
                int(n as i64),
                judged(kib < TARGET_KIB_PER_STREAM)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| ≥ {} concurrent streams | not run | |",
                int(TARGET_STREAMS as i64)
            );
            let _ = writeln!(
                s,
                "| < {TARGET_KIB_PER_STREAM:.0} KiB resident per stream | not run | |"
            );
        }
    }
    let lag = orows
        .iter()
        .find(|o| (o.rate - TARGET_LAG_RATE).abs() < 0.5)
        .or_else(|| {
            orows
                .iter()
                .max_by(|a, b| a.rate.total_cmp(&b.rate))
                .filter(|_| k.smoke)
        });
    match lag {
        Some(o) => {
            let _ = writeln!(
                s,
                "| sched_lag P99 < 1 ms at {} requests/s | {} µs at {} requests/s | {} |",
                int(TARGET_LAG_RATE as i64),
                int(o.sched_lag.p99),
                int(o.rate as i64),
                judged(o.sched_lag.p99 < TARGET_LAG_P99_US)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| sched_lag P99 < 1 ms at {} requests/s | not run | |",
                int(TARGET_LAG_RATE as i64)
            );
        }
    }
    let added = srows
        .iter()
        .find(|r| r.n == TARGET_ADDED_STREAMS)
        .or_else(|| srows.iter().max_by_key(|r| r.n).filter(|_| k.smoke))
        .and_then(|r| Some((r.n, r.latmesh.as_ref()?, r.floor.as_ref()?)));
    match added {
        Some((n, l, f)) => {
            // Judged on the response path: the request path of these rows is mostly the
            // simulator's accept queue (every stream opens a connection within the ramp).
            // latmesh's own response-path error (its stamp − the simulator's hand-over of the
            // frame: the server's write, loopback and the client) bounds what the client adds:
            // under the target, met. Else the difference to the floor's run; a negative one
            // says the two runs differ by more than what the client adds: not resolved.
            let d = l.ttft_err.p99 - f.ttft_err.p99;
            let r = l.resp_err.p99 - f.resp_err.p99;
            let verdict = if k.smoke {
                "not judged (smoke)".to_string()
            } else if l.resp_err.p99 < TARGET_ADDED_P99_US {
                format!(
                    "{} (latmesh's whole response path is under it)",
                    verdict(true)
                )
            } else if r < 0 {
                "not resolved (latmesh below the floor: the runs' noise exceeds the difference)"
                    .to_string()
            } else {
                verdict(r < TARGET_ADDED_P99_US).to_string()
            };
            let _ = writeln!(
                s,
                "| client-added TTFT error P99 < {TARGET_ADDED_P99_US} µs at {} streams | response path (client stamp − the server's hand-over) P99 at {} streams: latmesh {} µs, floor {} µs, difference {} µs; whole TTFT error {} µs ({} − {}) | {verdict} |",
                int(TARGET_ADDED_STREAMS as i64),
                int(n as i64),
                int(l.resp_err.p99),
                int(f.resp_err.p99),
                int(r),
                int(d),
                int(l.ttft_err.p99),
                int(f.ttft_err.p99),
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| client-added TTFT error P99 < {TARGET_ADDED_P99_US} µs at {} streams | not run (needs both clients) | |",
                int(TARGET_ADDED_STREAMS as i64)
            );
        }
    }
    s
}

fn command_env() -> String {
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("LATMESH_LOAD_") && k != sim::ROLE_ENV && k != ARGS_ENV)
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    env.sort();
    env.concat()
}

// ---------------------------------------------------------------------------------------
// BENCHMARKS.md

const SECTION: &str = "## Load: one agent (concurrent streams, open loop)";
const BEGIN: &str = "<!-- load:begin: written by `cargo bench -p latmesh-agent --bench load -- --write`; edit outside these markers -->";
const END: &str = "<!-- load:end -->";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("agent/ has a parent")
        .to_path_buf()
}

/// The markers of the block of a run over `api`: chat's are [`BEGIN`] and [`END`] (the
/// block before the APIs); another API's block is `load-{api}`, after chat's.
fn markers(api: latmesh_core::api::Api) -> (String, String) {
    match api {
        latmesh_core::api::Api::Chat => (BEGIN.to_string(), END.to_string()),
        _ => (
            format!(
                "<!-- load-{api}:begin: written by `LATMESH_LOAD_API={api} cargo bench -p latmesh-agent --bench load -- --write`; edit outside these markers -->"
            ),
            format!("<!-- load-{api}:end -->"),
        ),
    }
}

/// Replaces the block of this bench's run over `api` in BENCHMARKS.md (creating it after
/// chat's block, or the section, when needed), keeping everything else.
fn write_markdown(body: &str, api: latmesh_core::api::Api) -> std::io::Result<PathBuf> {
    let path = repo_root().join("BENCHMARKS.md");
    let old = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "# Benchmarks\n\nMeasured numbers of latmesh's benchmarks, one section per benchmark.\n"
                .into()
        }
        Err(e) => return Err(e),
    };
    let (begin, end) = markers(api);
    let block = format!("{begin}\n\n{}\n{end}", body.trim_end());
    let new = match (old.find(&begin), old.find(&end)) {
        (Some(b), Some(e)) if e > b => format!("{}{block}{}", &old[..b], &old[e + end.len()..]),
        _ if api != latmesh_core::api::Api::Chat && old.contains(END) => {
            let at = old.find(END).expect("contains") + END.len();
            format!("{}\n\n{block}{}", &old[..at], &old[at..])
        }
        _ if old.contains(SECTION) => {
            let at = old.find(SECTION).expect("contains") + SECTION.len();
            format!("{}\n\n{block}\n{}", &old[..at], &old[at..])
        }
        _ => format!(
            "{}\n{SECTION}\n\n{block}\n",
            old.trim_end().to_string() + "\n"
        ),
    };
    std::fs::write(&path, new)?;
    Ok(path)
}

fn main() {
    match std::env::var(sim::ROLE_ENV).as_deref() {
        Ok("sim") => return sim::child_main(),
        Ok("streams") => return print_result(&streams::run(&child_args())),
        Ok("open") => return print_result(&open_loop::run(&child_args())),
        _ => {}
    }
    let k = Knobs::parse();
    let t0 = Instant::now();
    let nofile = sys::raise_nofile();
    let pin_wanted = std::env::var("LATMESH_LOAD_PIN").as_deref() != Ok("0");
    let pin = if pin_wanted && sys::nproc() >= 2 && sys::have_taskset() {
        Pinning {
            sim: Some(1),
            client: Some(0),
        }
    } else {
        Pinning {
            sim: None,
            client: None,
        }
    };
    let need = k.levels.iter().copied().max().unwrap_or(0) as u64 + 64;
    if k.streams
        && let Some((soft, _)) = nofile
        && soft < need
    {
        eprintln!(
            "load: the open-file limit is {soft}; {need} are needed for the largest level (raise the hard limit: `ulimit -Hn`)"
        );
    }
    let started = sys::utc_now();
    let load_start = sys::loadavg();
    let srows = if k.streams {
        run_streams(&k, pin)
    } else {
        Vec::new()
    };
    let orows = if k.open {
        run_open(&k, pin)
    } else {
        Vec::new()
    };
    let ctx = Context {
        started,
        load_start,
        load_end: sys::loadavg(),
        pin,
        nofile,
        secs: t0.elapsed().as_secs_f64(),
    };
    let body = report(&k, &ctx, &srows, &orows);
    println!("{SECTION}\n\n{body}");
    if k.write {
        match write_markdown(&body, k.api) {
            Ok(p) => eprintln!("load: wrote {}", p.display()),
            Err(e) => {
                eprintln!("load: cannot write BENCHMARKS.md: {e}");
                std::process::exit(1);
            }
        }
    }
    let expected = k.levels.len() * if k.floor { 2 } else { 1 } * usize::from(k.streams)
        + k.rates.len() * usize::from(k.open);
    let got = srows
        .iter()
        .map(|r| usize::from(r.floor.is_some()) + usize::from(r.latmesh.is_some()))
        .sum::<usize>()
        + orows.len();
    if got < expected {
        eprintln!("load: {} of {expected} runs failed", expected - got);
        std::process::exit(1);
    }
}
