//! Accuracy of the probe engine: how much the client adds to TTFT and ITL, measured against
//! the simulator's ground truth (`latmesh_sim::truth`) at 1, 100 and 1,000 concurrent streams,
//! next to the machine's floor measured the same way by a minimal raw client.
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
//!   as soon as another ends. At each level two clients run, one after the other, each
//!   against a simulator process of its own (in child mode; a run leaves state behind that
//!   worsened the next run's tail) and with an empty connection pool:
//!   * the **floor**: `raw::RawClient` (`benches/accuracy/raw.rs`), tokio `TcpStream` and a
//!     hand-written HTTP/1.1 request with the prober's own body and headers, the same
//!     connection reuse, stamping the first read that holds the first token frame (found by
//!     its marker bytes; no hyper, no SSE/JSON parsing, no timers). What it measures is what
//!     the machine costs any client: request write, loopback both ways, the simulator's
//!     timer tick and write, the wake-ups of halted vCPUs;
//!   * **latmesh**: [`Prober::probe`].
//! * Per stream, with the server's stamps from `GET /_truth/{probe_id}` (µs after the
//!   server received the request):
//!   * TTFT error = client TTFT − server first-token `handed_us` (the frame handed to hyper,
//!     right before `write(2)`); also shown against `written_us` (after `write(2)` returned);
//!   * ITL error = |client gap − server gap| for every gap (server gaps between `handed`).
//! * **Client-added** = latmesh − floor, P50 minus P50 and P99 minus P99: what the probe
//!   engine itself adds on top of the machine.
//!
//! Knobs (environment): `LATMESH_ACC_API` (`chat`, the default, `anthropic` or `responses`:
//! the API both clients speak, the probe's request shape `RequestShape::for_api` and the
//! floor's token marker `raw::mark`), `LATMESH_ACC_LEVELS` (`c:n,…`, default `1:300,100:2000,1000:3000`),
//! `LATMESH_ACC_TOKENS` (tokens per stream, default 16), `LATMESH_ACC_TTFT_US` (50000),
//! `LATMESH_ACC_ITL_US` (20000), `LATMESH_ACC_INPROCESS=1`, `LATMESH_ACC_CLIENTS`
//! (`both`, the default; `latmesh`; `raw`), `LATMESH_ACC_PROFILE=1` (no ground truth and no
//! table, one summary line per level on stderr: for instruction counts under callgrind, see
//! BENCHMARKS.md), `LATMESH_ACC_DUMP=FILE` (appends one line per measured stream:
//! client, level, TTFT error µs, pooled connection 0/1, server first-token `handed_us`).
//! About 4 minutes with the defaults (most of it the single stream level).

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latmesh_agent::probe::{ProbeRequest, ProbeResult, Prober};
use latmesh_core::api::Api;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use latmesh_sim::{ProviderProfile, SimConfig, TruthLog, TruthReport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

#[path = "accuracy/raw.rs"]
mod raw;
use raw::{RawClient, RawResult};

const CHILD_ENV: &str = "LATMESH_ACC_SIM_CHILD";
const PROVIDER: &str = "acc";

/// Which clients run (`LATMESH_ACC_CLIENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clients {
    /// The floor, then latmesh, at every level.
    Both,
    /// latmesh only.
    Latmesh,
    /// The floor only.
    Raw,
}

#[derive(Clone, Debug)]
struct Knobs {
    /// The API both clients speak (`LATMESH_ACC_API`).
    api: Api,
    levels: Vec<(usize, usize)>,
    tokens: u32,
    ttft_us: u64,
    itl_us: u64,
    inprocess: bool,
    clients: Clients,
    /// No ground truth, no table: for instruction counts under callgrind.
    profile: bool,
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
            api: raw::api_from_env("LATMESH_ACC_API"),
            levels,
            tokens: env_u64("LATMESH_ACC_TOKENS", 16).max(2) as u32,
            ttft_us: env_u64("LATMESH_ACC_TTFT_US", 50_000),
            itl_us: env_u64("LATMESH_ACC_ITL_US", 20_000),
            inprocess: std::env::var("LATMESH_ACC_INPROCESS").is_ok_and(|v| v == "1"),
            clients: match std::env::var("LATMESH_ACC_CLIENTS").as_deref() {
                Ok("latmesh") => Clients::Latmesh,
                Ok("raw" | "floor") => Clients::Raw,
                Ok("both") | Err(_) => Clients::Both,
                Ok(other) => panic!("LATMESH_ACC_CLIENTS: both, latmesh or raw, not {other:?}"),
            },
            profile: std::env::var("LATMESH_ACC_PROFILE").is_ok_and(|v| v == "1"),
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

// The open-file limit, `taskset` and the CPU count: the load bench's helpers.
#[path = "load/sys.rs"]
#[allow(dead_code)]
mod sys;
use sys::{have_taskset, nproc, raise_nofile};

// Nearest-rank percentiles: the load bench's.
#[path = "load/stats.rs"]
#[allow(dead_code)]
mod stats;
use stats::pct;

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

/// `GET /_truth/{id}` over one keep-alive HTTP/1.1 connection, opened again when it fails.
/// (One connection for all the reports: thousands of short connections between levels
/// would leave the kernel busy with them while the next level runs.)
struct TruthConn {
    addr: String,
    conn: Option<tokio::io::BufReader<tokio::net::TcpStream>>,
}

impl TruthConn {
    fn new(addr: &str) -> Self {
        TruthConn {
            addr: addr.to_string(),
            conn: None,
        }
    }

    async fn get(&mut self, id: &str) -> Option<TruthReport> {
        for _ in 0..2 {
            if let Some(r) = self.try_get(id).await {
                return r;
            }
            self.conn = None;
        }
        None
    }

    /// `None`: the connection failed; `Some(None)`: no report for `id`.
    async fn try_get(&mut self, id: &str) -> Option<Option<TruthReport>> {
        use tokio::io::AsyncBufReadExt as _;
        if self.conn.is_none() {
            let s = tokio::net::TcpStream::connect(&self.addr).await.ok()?;
            self.conn = Some(tokio::io::BufReader::new(s));
        }
        let conn = self.conn.as_mut()?;
        let req = format!("GET /_truth/{id} HTTP/1.1\r\nhost: {}\r\n\r\n", self.addr);
        conn.get_mut().write_all(req.as_bytes()).await.ok()?;
        let mut status = String::new();
        conn.read_line(&mut status).await.ok()?;
        let mut len = None;
        loop {
            let mut line = String::new();
            if conn.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse::<usize>().ok();
            }
        }
        let mut body = vec![0; len?];
        conn.read_exact(&mut body).await.ok()?;
        Some(
            status
                .starts_with("HTTP/1.1 200")
                .then(|| serde_json::from_slice(&body).ok())
                .flatten(),
        )
    }
}

// ---------------------------------------------------------------------------------------
// The measurement.

/// What one stream measured, whichever client ran it.
#[derive(Debug, Default)]
struct Summary {
    ok: bool,
    reused: bool,
    /// Client TTFT, µs from its `t_send`.
    ttft_us: Option<u64>,
    itl_gaps_us: Vec<u64>,
    /// Token payloads received.
    frames: u64,
    /// `t_send`.
    t_send: Option<Instant>,
}

impl Summary {
    fn of_probe(r: &ProbeResult) -> Summary {
        let rec = &r.record;
        Summary {
            ok: rec.outcome() == Outcome::Ok,
            reused: rec.conn_reused,
            ttft_us: rec.ttft_us,
            itl_gaps_us: r.itl_gaps_us.clone(),
            frames: u64::from(rec.token_payloads),
            t_send: r.t_send,
        }
    }

    fn of_raw(r: RawResult) -> Summary {
        Summary {
            ok: r.ok,
            reused: r.reused,
            ttft_us: r.ttft_us,
            itl_gaps_us: r.itl_gaps_us,
            frames: u64::from(r.frames),
            t_send: r.t_send,
        }
    }
}

struct Stream {
    id: String,
    s: Summary,
}

/// Which client a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Floor,
    Latmesh,
}

/// The client a level runs with.
#[derive(Clone)]
enum Client {
    /// latmesh's probe engine.
    Latmesh(Arc<Prober>),
    /// The floor: `raw::RawClient`.
    Raw(Arc<RawClient>),
}

impl Client {
    fn tag(&self) -> &'static str {
        match self {
            Client::Latmesh(_) => "latmesh",
            Client::Raw(_) => "floor",
        }
    }
}

const TIMEOUTS: Timeouts = Timeouts {
    connect_s: 10.0,
    ttft_s: 60.0,
    idle_s: 60.0,
    total_s: 120.0,
};

/// The request both clients send (the raw client serializes it with the prober's own body
/// and header functions).
fn probe_request<'a>(
    api: Api,
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
        shape: raw::shape(api),
        secret_headers: &[],
    }
}

async fn one(client: &Client, k: &Knobs, base: &str, addr: &str, id: &str) -> Summary {
    let messages = [Message::new("user", "Say something short.")];
    let req = probe_request(k.api, base, id, k.tokens, &messages);
    match client {
        Client::Latmesh(prober) => Summary::of_probe(&prober.probe(&req, false).await),
        Client::Raw(raw) => {
            // Built before t_send, as the prober builds its request before its t_send.
            let path = format!("/{PROVIDER}/v1{}", k.api.path());
            let bytes = raw::request_bytes(addr, &path, &req);
            Summary::of_raw(raw.probe(&bytes).await)
        }
    }
}

/// Runs one level: `c` in flight, the first `c` (the ramp) discarded, `n` kept. Also
/// returns the token frames received by all `c + n` streams.
async fn level(
    client: &Client,
    base: &Arc<String>,
    addr: &Arc<String>,
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
        let (client, base, addr) = (client.clone(), base.clone(), addr.clone());
        let id = format!("{}-c{c}-{i}", client.tag());
        let k = k.clone();
        tasks.spawn(async move {
            let s = one(&client, &k, &base, &addr, &id).await;
            drop(permit);
            (i, Stream { id, s })
        });
    }
    let mut kept = Vec::with_capacity(n);
    let mut frames = 0;
    while let Some(j) = tasks.join_next().await {
        let (i, s) = j.expect("probe task");
        frames += s.s.frames;
        if i >= c {
            kept.push(s);
        }
    }
    (kept, frames)
}

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
    /// ITL gaps of 0 µs (token payloads that arrived in one read), measured streams.
    zero_gaps: usize,
    ttft: Vec<i64>,
    /// TTFT errors of the streams that went over a pooled connection.
    ttft_reused: Vec<i64>,
    ttft_written: Vec<i64>,
    itl: Vec<i64>,
    /// One line per measured stream for `LATMESH_ACC_DUMP`.
    dump: Vec<String>,
    /// When the level started.
    start: Instant,
}

impl Default for Errors {
    fn default() -> Self {
        Errors {
            secs: 0.0,
            client_cpu: None,
            sim_cpu: None,
            frames: 0,
            streams: 0,
            ok: 0,
            reused: 0,
            no_truth: 0,
            frame_mismatch: 0,
            zero_gaps: 0,
            ttft: Vec::new(),
            ttft_reused: Vec::new(),
            ttft_written: Vec::new(),
            itl: Vec::new(),
            dump: Vec::new(),
            start: Instant::now(),
        }
    }
}

impl Errors {
    fn add(&mut self, s: &Stream, t: Option<&TruthReport>) {
        self.streams += 1;
        let s = &s.s;
        if !s.ok {
            return;
        }
        self.ok += 1;
        if s.reused {
            self.reused += 1;
        }
        self.zero_gaps += s.itl_gaps_us.iter().filter(|g| **g == 0).count();
        let Some(t) = t else {
            self.no_truth += 1;
            return;
        };
        let (Some(ttft), Some(first)) = (s.ttft_us, t.frames.first()) else {
            self.frame_mismatch += 1;
            return;
        };
        let e = ttft as i64 - first.at.handed_us as i64;
        self.ttft.push(e);
        if s.reused {
            self.ttft_reused.push(e);
        }
        // When the first token was read, ms after the level started.
        let read_ms = s.t_send.map_or(0.0, |t| {
            let at = t + Duration::from_micros(ttft);
            at.saturating_duration_since(self.start).as_secs_f64() * 1e3
        });
        self.dump.push(format!(
            "{e} {} {} {read_ms:.3}",
            u8::from(s.reused),
            first.at.handed_us
        ));
        if let Some(w) = first.at.written_us {
            self.ttft_written.push(ttft as i64 - w as i64);
        }
        if s.itl_gaps_us.len() + 1 != t.frames.len() {
            self.frame_mismatch += 1;
            return;
        }
        for (gap, w) in s.itl_gaps_us.iter().zip(t.frames.windows(2)) {
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

    fn cpu_per_frame(&self) -> String {
        match self.client_cpu {
            Some(cpu) if self.frames > 0 => format!("{:.1} µs", cpu * 1e6 / self.frames as f64),
            _ => "–".to_string(),
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

fn p99(v: &[i64]) -> String {
    if v.is_empty() {
        "–".to_string()
    } else {
        pct(v, 99.0).to_string()
    }
}

/// P50 and P99 of `a` minus those of `b` (a difference of percentiles: the two clients ran
/// one after the other, so their streams do not pair up).
fn pp_diff(a: &[i64], b: &[i64]) -> String {
    if a.is_empty() || b.is_empty() {
        return "– / –".to_string();
    }
    format!(
        "**{} / {}**",
        pct(a, 50.0) - pct(b, 50.0),
        pct(a, 99.0) - pct(b, 99.0)
    )
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

/// One level's results: the floor's and latmesh's (each `None` when not run).
struct Row {
    c: usize,
    floor: Option<Errors>,
    latmesh: Option<Errors>,
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

    if !k.profile {
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
            None => {
                println!("Open files: limit unknown (raise it with `ulimit -n 4096` if needed).")
            }
        }
        println!("\nCommand: `{}`\n", command_line());
        println!(
            "Workload: provider `{PROVIDER}` spoken to over the {} API (`LATMESH_ACC_API`) with TTFT {} ms (lognormal σ 0.1), ITL {} ms (σ 0.15), {} tokens per stream, one token per SSE frame, HTTP/1.1 over loopback; each level keeps c streams in flight, the first c (ramp-up) are not counted; at each level the floor (raw client) runs first, then latmesh, each with a fresh simulator process (child mode) and empty connection pools, reusing keep-alive connections the same way.\n",
            k.api,
            k.ttft_us as f64 / 1000.0,
            k.itl_us as f64 / 1000.0,
            k.tokens
        );
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rows = rt.block_on(async {
        let mut clients = Vec::new();
        if k.clients != Clients::Latmesh {
            clients.push(Which::Floor);
        }
        if k.clients != Clients::Raw {
            clients.push(Which::Latmesh);
        }
        let mut rows = Vec::new();
        // A simulator process of its own for each client at each level: a run leaves
        // state behind (in the simulator and in the kernel: a thousand connections just
        // closed) that made whichever client ran next measure worse tails, 3-8 ms at P99
        // at 1,000 streams. In-process, the one simulator is shared.
        let shared = Some(sim).filter(|s| matches!(s, Sim::InProcess { .. }));
        for &(c, n) in &k.levels {
            let mut row = Row {
                c,
                floor: None,
                latmesh: None,
            };
            for which in &clients {
                // Let the previous run's connections and truth reads settle.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let own;
                let sim: &Sim = match &shared {
                    Some(s) => s,
                    None => {
                        own = start_child(&k).expect("simulator child");
                        &own
                    }
                };
                // Fresh clients too: empty connection pools for both.
                let client = match which {
                    Which::Floor => Client::Raw(Arc::new(RawClient::new(sim.addr(), k.api))),
                    Which::Latmesh => {
                        Client::Latmesh(Arc::new(Prober::new(None).expect("prober")))
                    }
                };
                let base = Arc::new(format!("http://{}/{PROVIDER}/v1", sim.addr()));
                let addr = Arc::new(sim.addr().to_string());
                let mut truth_conn = TruthConn::new(sim.addr());
                let t0 = Instant::now();
                let (cpu0, sim0) = (
                    cpu_seconds(None),
                    sim.child_pid().and_then(|p| cpu_seconds(Some(p))),
                );
                let (streams, frames) = level(&client, &base, &addr, &k, c, n).await;
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
                    start: t0,
                    ..Errors::default()
                };
                for s in &streams {
                    let truth = if k.profile {
                        None
                    } else {
                        match &sim {
                            Sim::InProcess { truth, .. } => truth.report(&s.id),
                            Sim::Child { .. } => truth_conn.get(&s.id).await,
                        }
                    };
                    errs.add(s, truth.as_ref());
                }
                errs.sort();
                if let Ok(path) = std::env::var("LATMESH_ACC_DUMP") {
                    let lines: String = errs
                        .dump
                        .iter()
                        .map(|l| format!("{} {c} {l}\n", client.tag()))
                        .collect();
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&path)
                        .expect("LATMESH_ACC_DUMP file");
                    f.write_all(lines.as_bytes()).expect("LATMESH_ACC_DUMP write");
                }
                eprintln!(
                    "level c={c} {}: {n} streams in {secs:.1} s, {} ok, {frames} token frames, {} gaps of 0 µs, CPU {:.2} s ({} per frame)",
                    client.tag(),
                    errs.ok,
                    errs.zero_gaps,
                    errs.client_cpu.unwrap_or(0.0),
                    errs.cpu_per_frame()
                );
                match client {
                    Client::Raw(_) => row.floor = Some(errs),
                    Client::Latmesh(_) => row.latmesh = Some(errs),
                }
            }
            rows.push(row);
        }
        rows
    });
    if !k.profile {
        print_tables(&rows);
    }
}

fn print_tables(rows: &[Row]) {
    let empty = Errors::default();
    println!(
        "TTFT error = client TTFT − server first-token `handed` (µs). **latmesh**: the probe engine. **floor**: the raw client (tokio `TcpStream`, hand-written HTTP/1.1, stamps the first read holding the first token frame; no hyper, no SSE/JSON parsing, no timers): what the machine costs any client (request write, loopback, the simulator's write and timer tick, wake-ups). **client-added = latmesh − floor**: P50 minus P50, P99 minus P99 (two runs, one after the other): what the probe engine itself adds.\n"
    );
    println!(
        "| streams in flight | measured streams (ok): latmesh / floor | reused conns: latmesh / floor | latmesh TTFT error P50 / P99 / max | floor TTFT error P50 / P99 / max | client-added (latmesh − floor) P50 / P99 | … reused conns only: latmesh / floor P99 | latmesh vs `written` P50 / P99 |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        let (lm, fl) = (
            r.latmesh.as_ref().unwrap_or(&empty),
            r.floor.as_ref().unwrap_or(&empty),
        );
        println!(
            "| {} | {} ({}) / {} ({}) | {} % / {} % | {} | {} | {} | {} / {} | {} |",
            fmt_int(r.c),
            fmt_int(lm.streams),
            fmt_int(lm.ok),
            fmt_int(fl.streams),
            fmt_int(fl.ok),
            (lm.reused * 100).checked_div(lm.ok).unwrap_or(0),
            (fl.reused * 100).checked_div(fl.ok).unwrap_or(0),
            ppm(&lm.ttft),
            ppm(&fl.ttft),
            pp_diff(&lm.ttft, &fl.ttft),
            p99(&lm.ttft_reused),
            p99(&fl.ttft_reused),
            pp(&lm.ttft_written),
        );
    }
    println!(
        "\nITL error = |client gap − server gap| (µs); CPU from `/proc/PID/stat` (10 ms ticks) over the level, per token frame received (request costs included)."
    );
    println!();
    println!(
        "| streams in flight | latmesh ITL error P50 / P99 / max | floor ITL error P50 / P99 / max | ITL gaps: latmesh / floor | bench CPU per token frame: latmesh / floor | CPU busy during latmesh: bench / simulator | CPU busy during floor: bench / simulator |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in rows {
        let (lm, fl) = (
            r.latmesh.as_ref().unwrap_or(&empty),
            r.floor.as_ref().unwrap_or(&empty),
        );
        println!(
            "| {} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} |",
            fmt_int(r.c),
            ppm(&lm.itl),
            ppm(&fl.itl),
            fmt_int(lm.itl.len()),
            fmt_int(fl.itl.len()),
            lm.cpu_per_frame(),
            fl.cpu_per_frame(),
            busy(lm.client_cpu, lm.secs),
            busy(lm.sim_cpu, lm.secs),
            busy(fl.client_cpu, fl.secs),
            busy(fl.sim_cpu, fl.secs),
        );
    }
    for r in rows {
        for (name, e) in [("latmesh", &r.latmesh), ("floor", &r.floor)] {
            let Some(e) = e else { continue };
            if e.no_truth + e.frame_mismatch > 0 || e.ok < e.streams {
                println!(
                    "\nLevel {} ({name}): {} not ok, {} without ground truth, {} with a frame-count mismatch.",
                    r.c,
                    e.streams - e.ok,
                    e.no_truth,
                    e.frame_mismatch
                );
            }
        }
    }
    if let Some(r) = rows.iter().find(|r| r.c == 1000)
        && let Some(lm) = &r.latmesh
    {
        let p99 = pct(&lm.ttft, 99.0);
        println!(
            "\nAt 1,000 streams: latmesh TTFT error P99 {p99} µs ({} 1 ms).",
            if p99 < 1000 { "under" } else { "NOT under" }
        );
        if let Some(fl) = &r.floor {
            let added = p99 - pct(&fl.ttft, 99.0);
            println!(
                "Client-added (latmesh − floor) at P99: {added} µs ({} 1 ms; target 50 µs); floor P99 {} µs.",
                if added < 1000 { "under" } else { "NOT under" },
                pct(&fl.ttft, 99.0)
            );
        }
    }
}
