//! Accuracy of the probe engine: how much the client adds to TTFT and ITL, measured against
//! the simulator's ground truth (`latmesh_sim::truth`) at 1, 100 and 1,000 concurrent streams.
//!
//! ```sh
//! cargo bench -p latmesh-agent --bench accuracy
//! ```
//!
//! * The simulator runs in a separate process pinned to core 1 (`taskset -c 1`, this same
//!   executable re-run with `LATMESH_ACC_SIM_CHILD=1`), serving on a single-threaded runtime;
//!   the bench pins itself to core 0 (`taskset -a -cp 0`) and probes from a single-threaded
//!   runtime. Without `taskset`, with fewer than 2 CPUs, or with `LATMESH_ACC_INPROCESS=1`,
//!   the simulator runs in this process on its own thread and runtime instead.
//! * Each level keeps `c` streams in flight: the first `c` launches are spread over one
//!   stream's duration and not counted (the ramp); the next `n` are measured, each launched
//!   as soon as another ends.
//! * Per stream, with the server's stamps from `GET /_truth/{probe_id}` (µs after the
//!   server received the request):
//!   * TTFT error = client `ttft_us` − server first-token `handed_us` (the frame handed to
//!     hyper, right before `write(2)`). It contains everything that is not the provider's
//!     time: building and writing the request, loopback both ways, the server's parse and
//!     write, the client's wake-up, read and parse. So it bounds the client's own share from
//!     above. Also shown against `written_us` (after `write(2)` returned).
//!   * ITL error = |client gap − server gap| for every gap (server gaps between `handed`).
//!
//! Knobs (environment): `LATMESH_ACC_LEVELS` (`c:n,…`, default `1:300,100:2000,1000:3000`),
//! `LATMESH_ACC_TOKENS` (tokens per stream, default 16), `LATMESH_ACC_TTFT_US` (50000),
//! `LATMESH_ACC_ITL_US` (20000), `LATMESH_ACC_INPROCESS=1`.
//! About 2 minutes with the defaults (most of it the single stream level).

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latmesh_agent::probe::{ProbeRequest, ProbeResult, Prober};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use latmesh_sim::{ProviderProfile, SimConfig, TruthLog, TruthReport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

const CHILD_ENV: &str = "LATMESH_ACC_SIM_CHILD";
const PROVIDER: &str = "acc";

#[derive(Clone, Debug)]
struct Knobs {
    levels: Vec<(usize, usize)>,
    tokens: u32,
    ttft_us: u64,
    itl_us: u64,
    inprocess: bool,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

impl Knobs {
    fn from_env() -> Knobs {
        let levels = std::env::var("LATMESH_ACC_LEVELS")
            .unwrap_or_else(|_| "1:300,100:2000,1000:3000".to_string());
        let levels = levels
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                let (c, n) = s.split_once(':').expect("LATMESH_ACC_LEVELS: c:n,c:n,…");
                (
                    c.trim().parse().expect("concurrency"),
                    n.trim().parse().expect("streams"),
                )
            })
            .collect();
        Knobs {
            levels,
            tokens: env_u64("LATMESH_ACC_TOKENS", 16).max(2) as u32,
            ttft_us: env_u64("LATMESH_ACC_TTFT_US", 50_000),
            itl_us: env_u64("LATMESH_ACC_ITL_US", 20_000),
            inprocess: std::env::var("LATMESH_ACC_INPROCESS").is_ok_and(|v| v == "1"),
        }
    }

    /// Fixed median TTFT and ITL with some jitter (so streams do not tick in lockstep), one
    /// token per frame, exactly `tokens` tokens, no faults.
    fn profile(&self) -> ProviderProfile {
        ProviderProfile {
            ttft_jitter_sigma: 0.1,
            itl_sigma: 0.15,
            output_tokens_min: self.tokens,
            output_tokens_max: self.tokens,
            ..ProviderProfile::fixed(PROVIDER, self.ttft_us, self.itl_us)
        }
    }

    fn stream_duration(&self) -> Duration {
        Duration::from_micros(self.ttft_us + u64::from(self.tokens - 1) * self.itl_us)
    }
}

// ---------------------------------------------------------------------------------------
// Process setup: open-file limit, pinning, the simulator.

/// Raises the soft open-file limit to the hard one (1,000 streams need 1,000+ sockets on
/// each side). Returns (soft, hard) after the change.
#[cfg(target_os = "linux")]
fn raise_nofile() -> Option<(u64, u64)> {
    #[repr(C)]
    struct RLimit {
        cur: u64,
        max: u64,
    }
    unsafe extern "C" {
        fn getrlimit(resource: i32, rlim: *mut RLimit) -> i32;
        fn setrlimit(resource: i32, rlim: *const RLimit) -> i32;
    }
    const RLIMIT_NOFILE: i32 = 7;
    let mut r = RLimit { cur: 0, max: 0 };
    // SAFETY: plain libc calls with a valid, properly laid out struct.
    unsafe {
        if getrlimit(RLIMIT_NOFILE, &mut r) != 0 {
            return None;
        }
        if r.cur < r.max {
            let want = RLimit {
                cur: r.max,
                max: r.max,
            };
            if setrlimit(RLIMIT_NOFILE, &want) == 0 {
                r.cur = r.max;
            }
        }
    }
    Some((r.cur, r.max))
}

#[cfg(not(target_os = "linux"))]
fn raise_nofile() -> Option<(u64, u64)> {
    None
}

fn have_taskset() -> bool {
    Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let s = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!("unix {s}")
        })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// CPU seconds (user + system) used so far by process `pid` (`None`: this process), from
/// `/proc/PID/stat`; `None` where there is no procfs.
fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_string(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

fn sim_config(k: &Knobs) -> SimConfig {
    SimConfig {
        profiles: vec![k.profile()],
        ..SimConfig::default()
    }
}

/// The child: serve the simulator on a single-threaded runtime, print the address, exit
/// when stdin closes (the parent is gone or done).
fn sim_child() {
    let k = Knobs::from_env();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        println!("{}", listener.local_addr().expect("addr"));
        let _ = std::io::stdout().flush();
        if let Err(e) = latmesh_sim::serve_providers(listener, sim_config(&k)).await {
            eprintln!("simulator: {e}");
        }
    });
}

/// Where the ground truth is read.
enum Sim {
    /// A child process: truth over HTTP.
    Child { child: Child, addr: String },
    /// This process, another thread: truth in memory.
    InProcess { addr: String, truth: TruthLog },
}

impl Sim {
    /// The child's pid (its CPU time is read from procfs).
    fn child_pid(&self) -> Option<u32> {
        match self {
            Sim::Child { child, .. } => Some(child.id()),
            Sim::InProcess { .. } => None,
        }
    }

    fn addr(&self) -> &str {
        match self {
            Sim::Child { addr, .. } | Sim::InProcess { addr, .. } => addr,
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Sim::Child { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_child(k: &Knobs) -> std::io::Result<Sim> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new("taskset")
        .arg("-c")
        .arg("1")
        .arg(exe)
        .env(CHILD_ENV, "1")
        .env("LATMESH_ACC_TOKENS", k.tokens.to_string())
        .env("LATMESH_ACC_TTFT_US", k.ttft_us.to_string())
        .env("LATMESH_ACC_ITL_US", k.itl_us.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
    let addr = line.trim().to_string();
    if addr.is_empty() {
        let _ = child.kill();
        return Err(std::io::Error::other(
            "the simulator child printed no address",
        ));
    }
    Ok(Sim::Child { child, addr })
}

fn start_inprocess(k: &Knobs) -> Sim {
    let cfg = sim_config(k);
    let truth = cfg.truth.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("simulator".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("addr").to_string())
                    .expect("send");
                let _ = latmesh_sim::serve_providers(listener, cfg).await;
            });
        })
        .expect("thread");
    let addr = rx.recv().expect("simulator address");
    Sim::InProcess { addr, truth }
}

/// `GET /_truth/{id}` over a raw HTTP/1.1 connection.
async fn fetch_truth(addr: &str, id: &str) -> Option<TruthReport> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET /_truth/{id} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        return None;
    }
    serde_json::from_slice(&buf[head_end + 4..]).ok()
}

// ---------------------------------------------------------------------------------------
// The measurement.

struct Stream {
    id: String,
    result: ProbeResult,
}

async fn one(prober: &Prober, base: &str, id: &str, tokens: u32) -> ProbeResult {
    let messages = [Message::new("user", "Say something short.")];
    let timeouts = Timeouts {
        connect_s: 10.0,
        ttft_s: 60.0,
        idle_s: 60.0,
        total_s: 120.0,
    };
    let req = ProbeRequest {
        base_url: base,
        model_id: "deepseek-v4-flash",
        api_key: None,
        messages: &messages,
        stream: true,
        max_tokens: tokens,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: Some(id),
    };
    prober.probe(&req, false).await
}

/// Runs one level: `c` in flight, the first `c` (the ramp) discarded, `n` kept. Also
/// returns the token frames received by all `c + n` streams.
async fn level(
    prober: &Arc<Prober>,
    base: &Arc<String>,
    k: &Knobs,
    c: usize,
    n: usize,
) -> (Vec<Stream>, u64) {
    let sem = Arc::new(Semaphore::new(c));
    let spacing = k.stream_duration() / u32::try_from(c.max(1)).unwrap_or(u32::MAX);
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..c + n {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        if i < c {
            tokio::time::sleep_until(start + spacing * u32::try_from(i).unwrap_or(0)).await;
        }
        let (prober, base) = (prober.clone(), base.clone());
        let id = format!("c{c}-{i}");
        let tokens = k.tokens;
        tasks.spawn(async move {
            let result = one(&prober, &base, &id, tokens).await;
            drop(permit);
            (i, Stream { id, result })
        });
    }
    let mut kept = Vec::with_capacity(n);
    let mut frames = 0;
    while let Some(j) = tasks.join_next().await {
        let (i, s) = j.expect("probe task");
        let rec = &s.result.record;
        frames += u64::from(rec.content_chunks + rec.reasoning_chunks);
        if i >= c {
            kept.push(s);
        }
    }
    (kept, frames)
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Default)]
struct Errors {
    /// Wall seconds of the level, client CPU seconds, simulator CPU seconds (child only).
    secs: f64,
    client_cpu: Option<f64>,
    sim_cpu: Option<f64>,
    /// Token frames received in the level, ramp included (for CPU per frame).
    frames: u64,
    streams: usize,
    ok: usize,
    reused: usize,
    no_truth: usize,
    frame_mismatch: usize,
    ttft: Vec<i64>,
    ttft_reused: Vec<i64>,
    ttft_written: Vec<i64>,
    itl: Vec<i64>,
}

impl Errors {
    fn add(&mut self, s: &Stream, t: Option<&TruthReport>) {
        self.streams += 1;
        let rec = &s.result.record;
        if rec.outcome() != Outcome::Ok {
            return;
        }
        self.ok += 1;
        let Some(t) = t else {
            self.no_truth += 1;
            return;
        };
        let (Some(ttft), Some(first)) = (rec.ttft_us, t.frames.first()) else {
            self.frame_mismatch += 1;
            return;
        };
        let e = ttft as i64 - first.at.handed_us as i64;
        self.ttft.push(e);
        if rec.conn_reused {
            self.reused += 1;
            self.ttft_reused.push(e);
        }
        if let Some(w) = first.at.written_us {
            self.ttft_written.push(ttft as i64 - w as i64);
        }
        if s.result.itl_gaps_us.len() + 1 != t.frames.len() {
            self.frame_mismatch += 1;
            return;
        }
        for (gap, w) in s.result.itl_gaps_us.iter().zip(t.frames.windows(2)) {
            let server = w[1].at.handed_us as i64 - w[0].at.handed_us as i64;
            self.itl.push((*gap as i64 - server).abs());
        }
    }

    fn sort(&mut self) {
        for v in [
            &mut self.ttft,
            &mut self.ttft_reused,
            &mut self.ttft_written,
            &mut self.itl,
        ] {
            v.sort_unstable();
        }
    }
}

fn ppm(v: &[i64]) -> String {
    if v.is_empty() {
        return "– / – / –".to_string();
    }
    format!(
        "{} / {} / {}",
        pct(v, 50.0),
        pct(v, 99.0),
        v.last().copied().unwrap_or(0)
    )
}

fn pp(v: &[i64]) -> String {
    if v.is_empty() {
        return "– / –".to_string();
    }
    format!("{} / {}", pct(v, 50.0), pct(v, 99.0))
}

/// CPU seconds over wall seconds, as a percentage of one core.
fn busy(cpu: Option<f64>, secs: f64) -> String {
    match cpu {
        Some(c) if secs > 0.0 => format!("{:.0} %", 100.0 * c / secs),
        _ => "–".to_string(),
    }
}

fn fmt_int(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn command_line() -> String {
    let mut env: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("LATMESH_ACC_") && k != CHILD_ENV)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    env.push("cargo bench -p latmesh-agent --bench accuracy".to_string());
    env.join(" ")
}

fn main() {
    if std::env::var_os(CHILD_ENV).is_some() {
        sim_child();
        return;
    }
    let k = Knobs::from_env();
    let nofile = raise_nofile();
    // Before pinning: afterwards this process sees one CPU.
    let cpus = nproc();
    let separate = !k.inprocess && cpus >= 2 && have_taskset();
    let pinned = separate
        && Command::new("taskset")
            .args(["-a", "-cp", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let sim = if separate {
        match start_child(&k) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("cannot start the pinned simulator ({e}); running it in-process");
                start_inprocess(&k)
            }
        }
    } else {
        start_inprocess(&k)
    };
    let mode = match &sim {
        Sim::Child { .. } if pinned => {
            "simulator in a separate process pinned to core 1 (`taskset -c 1`), bench pinned to core 0, both single-threaded runtimes"
        }
        Sim::Child { .. } => {
            "simulator in a separate process pinned to core 1; the bench could not pin itself"
        }
        Sim::InProcess { .. } => {
            "simulator in this process on its own thread and single-threaded runtime (no pinning)"
        }
    };

    println!("## Accuracy (client-added error against the simulator's ground truth)\n");
    println!(
        "Measured {} on {} CPUs ({}); load average at start: {}; {}.",
        utc_now(),
        cpus,
        cpu_model(),
        loadavg(),
        mode
    );
    match nofile {
        Some((soft, hard)) => println!("Open files: soft limit {soft} (hard {hard})."),
        None => println!("Open files: limit unknown (raise it with `ulimit -n 4096` if needed)."),
    }
    println!("\nCommand: `{}`\n", command_line());
    println!(
        "Workload: provider `{PROVIDER}` with TTFT {} ms (lognormal σ 0.1), ITL {} ms (σ 0.15), {} tokens per stream, one token per SSE frame, HTTP/1.1 over loopback; each level keeps c streams in flight, the first c (ramp-up) are not counted. TTFT error = client `ttft_us` − server first-token `handed_us` (µs after the server received the request); ITL error = |client gap − server gap|.\n",
        k.ttft_us as f64 / 1000.0,
        k.itl_us as f64 / 1000.0,
        k.tokens
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let results = rt.block_on(async {
        let prober = Arc::new(Prober::new(None).expect("prober"));
        let base = Arc::new(format!("http://{}/{PROVIDER}/v1", sim.addr()));
        let mut out = Vec::new();
        for &(c, n) in &k.levels {
            let t0 = Instant::now();
            let (cpu0, sim0) = (
                cpu_seconds(None),
                sim.child_pid().and_then(|p| cpu_seconds(Some(p))),
            );
            let (streams, frames) = level(&prober, &base, &k, c, n).await;
            let secs = t0.elapsed().as_secs_f64();
            let (cpu1, sim1) = (
                cpu_seconds(None),
                sim.child_pid().and_then(|p| cpu_seconds(Some(p))),
            );
            let mut errs = Errors {
                secs,
                client_cpu: cpu0.zip(cpu1).map(|(a, b)| b - a),
                sim_cpu: sim0.zip(sim1).map(|(a, b)| b - a),
                frames,
                ..Errors::default()
            };
            for s in &streams {
                let truth = match &sim {
                    Sim::InProcess { truth, .. } => truth.report(&s.id),
                    Sim::Child { addr, .. } => fetch_truth(addr, &s.id).await,
                };
                errs.add(s, truth.as_ref());
            }
            errs.sort();
            eprintln!("level c={c}: {n} streams in {secs:.1} s");
            out.push((c, errs));
        }
        out
    });

    println!(
        "| streams in flight | measured streams (ok) | reused conns | TTFT error P50 / P99 / max (µs) | … reused conns P50 / P99 | … vs `written` P50 / P99 | ITL error P50 / P99 / max (µs) | ITL gaps | CPU busy: bench / simulator | bench CPU per token frame |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (c, e) in &results {
        println!(
            "| {} | {} ({}) | {} % | {} | {} | {} | {} | {} | {} / {} | {} |",
            fmt_int(*c),
            fmt_int(e.streams),
            fmt_int(e.ok),
            (e.reused * 100).checked_div(e.ok).unwrap_or(0),
            ppm(&e.ttft),
            pp(&e.ttft_reused),
            pp(&e.ttft_written),
            ppm(&e.itl),
            fmt_int(e.itl.len()),
            busy(e.client_cpu, e.secs),
            busy(e.sim_cpu, e.secs),
            match e.client_cpu {
                Some(cpu) if e.frames > 0 => format!("{:.1} µs", cpu * 1e6 / e.frames as f64),
                _ => "–".to_string(),
            },
        );
    }
    for (c, e) in &results {
        if e.no_truth + e.frame_mismatch > 0 || e.ok < e.streams {
            println!(
                "\nLevel {c}: {} not ok, {} without ground truth, {} with a frame-count mismatch.",
                e.streams - e.ok,
                e.no_truth,
                e.frame_mismatch
            );
        }
    }
    let done_when = results
        .iter()
        .find(|(c, _)| *c == 1000)
        .map(|(_, e)| pct(&e.ttft, 99.0));
    if let Some(p99) = done_when {
        println!(
            "\nTTFT error P99 at 1,000 streams: {p99} µs ({} 1 ms; target 50 µs).",
            if p99 < 1000 { "under" } else { "NOT under" }
        );
    }
    drop(sim);
}
