//! Sink throughput: durable spool → ClickHouse, measured against a real server.
//!
//! ```text
//! cargo bench -p latmesh-coordinator --bench sink_throughput              # print the tables
//! cargo bench -p latmesh-coordinator --bench sink_throughput -- --write   # and update BENCHMARKS.md
//! ```
//!
//! Uses the ClickHouse at `LATMESH_CLICKHOUSE_URL` when set; otherwise starts one of its own
//! with `scripts/clickhouse.sh` (Debian's 18.16 server) on free loopback ports in a temporary
//! state dir and stops it at the end. Every run works in fresh databases
//! (`latmesh_bench_<pid>_<n>`, created by the project's migrations) and drops them at the end
//! (`LATMESH_BENCH_KEEP_DB=1` keeps them).
//!
//! For each workload mix (`LATMESH_BENCH_MIXES`, default `patrol,busy`: see [`MIXES`]) and
//! size (`LATMESH_BENCH_SIZES`, records, default `100000,1000000`):
//!
//! 1. **Spool append**: generates realistic result batches (seeded RNG, 8 agents in 4 regions,
//!    4 providers, 2 scenarios, ~5 % non-ok outcomes, one interval histogram per provider,
//!    scenario and metric of the batch) and appends them to a fresh [`Spool`] one by one, as
//!    the coordinator does (each append fsyncs). Only the `append` calls are timed, not the
//!    generation.
//! 2. **Sink drain**: runs the real [`sink::run`] on that spool and times it until the spool's
//!    committed id reaches the last appended entry, then checks with
//!    [`clickhouse::query::counts`] that every row arrived exactly once.
//! 3. **Stage profile** (diagnostic, off unless `LATMESH_BENCH_PROFILE_CHUNKS` lists batches
//!    per round, e.g. `64,256`): drains a copy of the same spool with the sink's earlier,
//!    sequential steps (read, dense decode, histogram rows with a re-encode, presence queries,
//!    request rows, the two inserts, commit), timing each. The same rows also go into
//!    `Null`-engine copies of the tables (timed apart, not counted) to split an insert's cost
//!    into "client + HTTP + server parse" and "MergeTree part write".
//! 4. **CPU micro-costs** of each conversion, per record and per histogram (patrol mix).
//!
//! Everything is bounded by `LATMESH_BENCH_TIMEOUT_S` (default 1800 s): past it the bench stops,
//! reports what it has, cleans up and fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use hdrhistogram::Histogram;
use latmesh_coordinator::sink::{self, SinkTarget};
use latmesh_coordinator::spool::{Entry, Spool, SpoolConfig};
use latmesh_coordinator::state::State;
use latmesh_core::hist::{self, HistKey};
use latmesh_core::metrics::Metric;
use latmesh_core::record::{Outcome, ProbeRecord, Usage};
use latmesh_core::seeded_rng::SeededRng;
use latmesh_core::wire;
use latmesh_proto::pb;
use latmesh_store::{self as store, BatchKey, HistogramRow, IntervalHistogram, RequestRow};
use prost::Message as _;

/// A workload: what one agent's batches hold.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Mix {
    /// Name (`LATMESH_BENCH_MIXES`).
    name: &'static str,
    /// Records per batch.
    records_per_batch: usize,
    /// Time a batch covers (interval histograms' span), µs.
    span_us: i64,
    /// Every batch holds both scenarios (`true`) or one, alternating (`false`).
    both_scenarios: bool,
    /// Metrics with an interval histogram per provider and scenario.
    metrics: &'static [Metric],
}

/// The mixes, by name.
const MIXES: [Mix; 2] = [
    // Patrol agents: 10 requests/s per agent, a batch every 10 s (one scenario at a time).
    // Many histograms per record: 20 per 100 records.
    Mix {
        name: "patrol",
        records_per_batch: 100,
        span_us: 10_000_000,
        both_scenarios: false,
        metrics: &[
            Metric::Ttfb,
            Metric::Ttft,
            Metric::E2e,
            Metric::Tpot,
            Metric::Itl,
        ],
    },
    // Busy agents: what an agent sends at 2,000 requests/s (a batch per second, the agent's
    // flush interval), every provider in both scenarios, the 7 metrics an agent records for
    // a streamed request (4 × 2 × 7 = 56 histograms per 2,000 records).
    Mix {
        name: "busy",
        records_per_batch: 2_000,
        span_us: 1_000_000,
        both_scenarios: true,
        // Ttfb … SchedLag: what a streamed request without a rate or failover records.
        metrics: Metric::ALL.split_at(7).0,
    },
];
/// The sink's `READ_ENTRIES` (coordinator/src/sink.rs): batches per read and per insert.
const SINK_READ_ENTRIES: usize = 64;
/// `clickhouse::insert`'s `PRESENCE_CHUNK`: batches whose presence one query checks.
const PRESENCE_CHUNK: usize = 100;
/// The target of issue 4.
const TARGET_RECORDS_PER_S: f64 = 200_000.0;
/// Seed of the generator.
const SEED: u64 = 0x1a7_3e5b;
/// Cap of the bench spools (far above what any size needs).
const SPOOL_MAX_BYTES: u64 = 16 << 30;

const REGIONS: [(&str, f64); 4] = [
    // region, extra network round trip to the providers, ms
    ("us-east", 8.0),
    ("eu-west", 85.0),
    ("ap-southeast", 170.0),
    ("sa-east", 120.0),
];
/// provider, median TTFT (ms), median inter-token gap (ms)
const PROVIDERS: [(&str, f64, f64); 4] = [
    ("openai", 420.0, 16.0),
    ("anthropic", 650.0, 21.0),
    ("groq", 160.0, 3.5),
    ("together", 330.0, 11.0),
];
const SCENARIOS: [&str; 2] = ["short-qa", "long-gen"];
const AGENTS_PER_REGION: usize = 2;
/// Agent clock time of the first batch: 2025-06-02T06:00:00Z. Batches of one agent follow
/// each other (each mix's span apart), so even 1M records stay within one day (one
/// partition).
const BASE_UNIX_US: i64 = 1_748_844_000_000_000;

// ---------------------------------------------------------------------------------------------
// Configuration, time bound

struct Config {
    mixes: Vec<Mix>,
    sizes: Vec<u64>,
    profile_chunks: Vec<usize>,
    write: bool,
    keep_db: bool,
    deadline: Instant,
    timeout: Duration,
    work_dir: Option<PathBuf>,
}

impl Config {
    fn from_env() -> anyhow::Result<Config> {
        let list = |name: &str, default: &str| -> anyhow::Result<Vec<u64>> {
            let raw = std::env::var(name).unwrap_or_else(|_| default.to_string());
            raw.split(',')
                .map(|s| s.trim().replace('_', ""))
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.parse::<u64>()
                        .with_context(|| format!("{name}: {s:?} is not a number"))
                })
                .collect()
        };
        let sizes = list("LATMESH_BENCH_SIZES", "100000,1000000")?;
        ensure!(
            sizes.iter().all(|&s| s > 0),
            "LATMESH_BENCH_SIZES: sizes must be > 0"
        );
        let mixes = std::env::var("LATMESH_BENCH_MIXES")
            .unwrap_or_else(|_| "patrol,busy".into())
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|name| {
                MIXES
                    .iter()
                    .find(|m| m.name == name)
                    .copied()
                    .with_context(|| {
                        format!("LATMESH_BENCH_MIXES: unknown mix {name:?} (patrol, busy)")
                    })
            })
            .collect::<anyhow::Result<Vec<Mix>>>()?;
        ensure!(!mixes.is_empty(), "LATMESH_BENCH_MIXES: no mix given");
        let profile_chunks = list("LATMESH_BENCH_PROFILE_CHUNKS", "")?
            .into_iter()
            .map(|c| c as usize)
            .collect::<Vec<_>>();
        ensure!(
            profile_chunks.iter().all(|&c| c > 0),
            "LATMESH_BENCH_PROFILE_CHUNKS: chunks must be > 0"
        );
        let timeout = Duration::from_secs(
            list("LATMESH_BENCH_TIMEOUT_S", "1800")?
                .first()
                .copied()
                .unwrap_or(1800),
        );
        let mut write = false;
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "--write" => write = true,
                "--bench" => {} // passed by `cargo bench`
                "-h" | "--help" => {
                    println!(
                        "sink_throughput [--write]\n\n--write  update the \"Sink throughput (ClickHouse)\" section of BENCHMARKS.md\n\nenv: LATMESH_CLICKHOUSE_URL, LATMESH_BENCH_MIXES (patrol,busy), LATMESH_BENCH_SIZES (records, default 100000,1000000),\n     LATMESH_BENCH_PROFILE_CHUNKS (batches per round of the stage profile; off by default, e.g. 64,256),\n     LATMESH_BENCH_TIMEOUT_S (default 1800), LATMESH_BENCH_DIR (spool dir parent),\n     LATMESH_BENCH_KEEP_DB=1"
                    );
                    std::process::exit(0);
                }
                other if other.starts_with('-') => {} // other harness flags
                other => eprintln!("sink_throughput: ignoring argument {other:?}"),
            }
        }
        Ok(Config {
            mixes,
            sizes,
            profile_chunks,
            write,
            keep_db: std::env::var("LATMESH_BENCH_KEEP_DB").is_ok_and(|v| v == "1"),
            deadline: Instant::now() + timeout,
            timeout,
            work_dir: std::env::var_os("LATMESH_BENCH_DIR").map(PathBuf::from),
        })
    }

    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn check_time(&self, what: &str) -> anyhow::Result<()> {
        ensure!(
            !self.left().is_zero(),
            "time is up (LATMESH_BENCH_TIMEOUT_S = {} s) during {what}",
            self.timeout.as_secs()
        );
        Ok(())
    }
}

/// Runs `fut` on `rt`, bounded by the bench deadline.
fn block<T>(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    what: &str,
    fut: impl Future<Output = Result<T, store::StoreError>>,
) -> anyhow::Result<T> {
    let left = cfg.left();
    match rt.block_on(async move { tokio::time::timeout(left, fut).await }) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow!("{what}: {e}")),
        Err(_) => bail!(
            "{what}: time is up (LATMESH_BENCH_TIMEOUT_S = {} s)",
            cfg.timeout.as_secs()
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// ClickHouse of our own

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("coordinator/ has a parent")
        .to_path_buf()
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A server started with `scripts/clickhouse.sh`; stopped on drop.
struct OwnClickhouse {
    state: tempfile::TempDir,
    http_port: u16,
    tcp_port: u16,
}

impl OwnClickhouse {
    fn start() -> anyhow::Result<OwnClickhouse> {
        let ch = OwnClickhouse {
            state: tempfile::Builder::new()
                .prefix("latmesh-bench-ch-")
                .tempdir()?,
            http_port: free_port()?,
            tcp_port: free_port()?,
        };
        let out = ch.script("start")?;
        ensure!(
            out.status.success(),
            "scripts/clickhouse.sh start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(ch)
    }

    fn script(&self, cmd: &str) -> anyhow::Result<std::process::Output> {
        Command::new("bash")
            .arg(repo_root().join("scripts/clickhouse.sh"))
            .arg(cmd)
            .env("LATMESH_CLICKHOUSE_STATE_DIR", self.state.path())
            .env("LATMESH_CLICKHOUSE_HTTP_PORT", self.http_port.to_string())
            .env("LATMESH_CLICKHOUSE_TCP_PORT", self.tcp_port.to_string())
            .env("LATMESH_CLICKHOUSE_START_TIMEOUT_S", "60")
            .output()
            .context("running scripts/clickhouse.sh")
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }
}

impl Drop for OwnClickhouse {
    fn drop(&mut self) {
        match self.script("stop") {
            Ok(out) if out.status.success() => {
                eprintln!("sink_throughput: stopped the ClickHouse server it started")
            }
            Ok(out) => eprintln!(
                "sink_throughput: stopping ClickHouse failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("sink_throughput: stopping ClickHouse failed: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Realistic batches from a seeded RNG

struct Agent {
    id: String,
    region: &'static str,
    rtt_ms: f64,
    next_seq: u64,
    round: u32,
}

/// Generates batches round-robin over the agents, as a coordinator receives them.
struct Generator {
    mix: Mix,
    rng: SeededRng,
    campaign_id: String,
    agents: Vec<Agent>,
    next_agent: usize,
}

/// One generated batch.
struct GenBatch {
    agent_id: String,
    region: String,
    batch: pb::ResultBatch,
}

impl Generator {
    fn new(mix: Mix, seed: u64, campaign_id: String) -> Generator {
        let mut agents = Vec::new();
        for (region, rtt_ms) in REGIONS {
            for n in 1..=AGENTS_PER_REGION {
                agents.push(Agent {
                    id: format!("{region}-{n}"),
                    region,
                    rtt_ms,
                    next_seq: 1,
                    round: 0,
                });
            }
        }
        Generator {
            mix,
            rng: SeededRng::new(seed),
            campaign_id,
            agents,
            next_agent: 0,
        }
    }

    fn next_batch(&mut self) -> GenBatch {
        let ai = self.next_agent;
        self.next_agent = (self.next_agent + 1) % self.agents.len();
        let (seq, round0, rtt_ms, agent_id, region) = {
            let a = &mut self.agents[ai];
            let seq = a.next_seq;
            a.next_seq += 1;
            let round0 = a.round;
            a.round += (self.mix.records_per_batch / PROVIDERS.len()) as u32;
            (seq, round0, a.rtt_ms, a.id.clone(), a.region.to_string())
        };
        let mix = self.mix;
        let rng = &mut self.rng;
        let span_us = mix.span_us;
        let start_us = BASE_UNIX_US + (seq as i64 - 1) * span_us + ai as i64 * 137_000;
        let end_us = start_us + span_us;
        // (provider, scenario, metric index in `mix.metrics`) → histogram.
        type Hists = BTreeMap<(usize, usize, usize), Histogram<u64>>;
        let mut hists: Hists = BTreeMap::new();
        let record = |hists: &mut Hists, p: usize, sc: usize, m: Metric, v: u64| {
            if let Some(mi) = mix.metrics.iter().position(|&x| x == m) {
                hists
                    .entry((p, sc, mi))
                    .or_insert_with(hist::new_histogram)
                    .record(v.clamp(hist::LOWEST_US, hist::HIGHEST_US))
                    .expect("clamped");
            }
        };
        let n = mix.records_per_batch;
        let mut records = Vec::with_capacity(n);
        for i in 0..n {
            let p = i % PROVIDERS.len();
            let (provider, ttft_ms, gap_ms) = PROVIDERS[p];
            let scenario_i = if mix.both_scenarios {
                (i / PROVIDERS.len()) % SCENARIOS.len()
            } else {
                (seq % SCENARIOS.len() as u64) as usize
            };
            let scenario = SCENARIOS[scenario_i];
            let long = scenario_i == 1;
            let send = start_us + (i as i64) * (span_us / n as i64) + rng.range(0, 20_000) as i64;
            let prompt_tokens = if long {
                rng.range(400, 1800)
            } else {
                rng.range(20, 90)
            } as u32;
            let mut rec = ProbeRecord {
                round: round0 + (i / PROVIDERS.len()) as u32,
                slot: i as u32,
                provider: provider.to_string(),
                scenario: scenario.to_string(),
                prompt_id: format!(
                    "{scenario}-{}-{:03}",
                    if rng.unit() < 0.8 { "en" } else { "de" },
                    rng.range(1, 40)
                ),
                attempt: 1,
                stream: true,
                send_agent_unix_us: send,
                sched_lag_us: rng.lognormal(300.0, 0.8) as i64,
                ..Default::default()
            };
            record(
                &mut hists,
                p,
                scenario_i,
                Metric::SchedLag,
                rec.sched_lag_us as u64,
            );
            let ttfb = ((rtt_ms + rng.lognormal(ttft_ms * 0.55, 0.35)) * 1000.0) as u64;
            let roll = rng.unit();
            if roll < 0.95 {
                let tokens = if long {
                    rng.range(200, 900)
                } else {
                    rng.range(15, 140)
                } as u32;
                let ttft = ttfb + (rng.lognormal(ttft_ms * 0.45, 0.5) * 1000.0) as u64;
                let mut e2e = ttft;
                let mut itl_max = 0;
                for _ in 1..tokens {
                    let gap = (rng.lognormal(gap_ms, 0.55) * 1000.0) as u64;
                    itl_max = itl_max.max(gap);
                    e2e += gap;
                    record(&mut hists, p, scenario_i, Metric::Itl, gap);
                }
                let tpot = (e2e - ttft) / u64::from(tokens - 1);
                record(&mut hists, p, scenario_i, Metric::Ttfb, ttfb);
                record(&mut hists, p, scenario_i, Metric::Ttft, ttft);
                record(&mut hists, p, scenario_i, Metric::Ttfc, ttft);
                record(&mut hists, p, scenario_i, Metric::E2e, e2e);
                record(&mut hists, p, scenario_i, Metric::Tpot, tpot);
                rec.outcome = Some(Outcome::Ok);
                rec.http_status = Some(200);
                rec.ttfb_us = Some(ttfb);
                rec.ttft_us = Some(ttft);
                rec.ttfc_us = Some(ttft);
                rec.e2e_us = Some(e2e);
                rec.tpot_us = Some(tpot);
                rec.decode_tps = Some(f64::from(tokens - 1) / ((e2e - ttft) as f64 / 1e6));
                rec.output_tokens = tokens;
                rec.tokens_from_usage = true;
                rec.content_chunks = tokens;
                rec.usage = Usage {
                    prompt_tokens: Some(prompt_tokens),
                    completion_tokens: Some(tokens),
                    total_tokens: Some(prompt_tokens + tokens),
                    reasoning_tokens: None,
                    cached_tokens: (rng.unit() < 0.3).then_some(0),
                };
                rec.finish_reason = Some(if long && rng.unit() < 0.05 {
                    "length".into()
                } else {
                    "stop".into()
                });
                rec.saw_done = true;
                rec.itl_max_us = Some(itl_max);
                rec.comment_lines = u32::from(rng.unit() < 0.02);
                rec.response_bytes = u64::from(tokens) * 160 + 280;
            } else if roll < 0.97 {
                rec.outcome = Some(Outcome::Throttled);
                rec.http_status = Some(429);
                rec.ttfb_us = Some(ttfb / 3);
                rec.retry_after_s = Some(rng.range(1, 30) as f64);
                rec.error_type = Some("rate_limit_exceeded".into());
                rec.error_message = Some(format!(
                    "Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in {}ms.",
                    rng.range(100, 9000)
                ));
                rec.response_bytes = 310;
            } else if roll < 0.985 {
                rec.outcome = Some(Outcome::Http5xx);
                rec.http_status = Some(if rng.unit() < 0.7 { 503 } else { 500 });
                rec.ttfb_us = Some(ttfb);
                rec.error_type = Some("server_error".into());
                rec.error_message = Some("The server is overloaded or not ready yet.".into());
                rec.response_bytes = 120;
            } else if roll < 0.995 {
                rec.outcome = Some(Outcome::TimeoutTtft);
                rec.http_status = Some(200);
                rec.ttfb_us = Some(ttfb);
                rec.comment_lines = rng.range(0, 3) as u32;
                rec.error_message = Some("no token within 30 s".into());
            } else {
                rec.outcome = Some(Outcome::ConnectionError);
                rec.error_message =
                    Some("error sending request: connection reset by peer (os error 104)".into());
            }
            records.push(pb::ProbeRecord::from(&rec));
        }
        let histograms = hists
            .into_iter()
            .map(|((p, sc, m), h)| {
                let key = HistKey {
                    provider: PROVIDERS[p].0.to_string(),
                    scenario: SCENARIOS[sc].to_string(),
                    metric: mix.metrics[m],
                    step: 0,
                };
                wire::histogram_to_pb(&key, &h, start_us, end_us).expect("encodable")
            })
            .collect();
        GenBatch {
            agent_id,
            region,
            batch: pb::ResultBatch {
                campaign_id: self.campaign_id.clone(),
                seq,
                histograms,
                records,
                clock_offset_us: rng.range(0, 4000) as i64 - 2000,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements

#[derive(Clone, Debug, Default)]
struct AppendResult {
    batches: u64,
    records: u64,
    histograms: u64,
    bytes: u64,
    append_secs: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    gen_secs: f64,
}

#[derive(Clone, Debug, Default)]
struct DrainResult {
    records: u64,
    histograms: u64,
    secs: f64,
    open_secs: f64,
    verified: String,
    /// (table, active parts, rows, uncompressed bytes, compressed bytes) right after the drain.
    tables: Vec<(String, u64, u64, u64, u64)>,
}

/// Time per stage of one profile run (seconds), as `sink::run` + `insert_batches` do them.
#[derive(Clone, Debug, Default)]
struct Stages {
    chunk: usize,
    rounds: u64,
    records: u64,
    histograms: u64,
    read: f64,
    decode: f64,
    hist_rows: f64,
    presence: f64,
    req_rows: f64,
    insert_req: f64,
    insert_hist: f64,
    commit: f64,
    wall: f64,
    /// The same rows into `Null` tables (not part of `wall`'s stages).
    null_req: f64,
    null_hist: f64,
    /// Rows the presence queries returned (0 on fresh data).
    present_rows: u64,
    verified: String,
}

impl Stages {
    fn sink_secs(&self) -> f64 {
        self.read
            + self.decode
            + self.hist_rows
            + self.presence
            + self.req_rows
            + self.insert_req
            + self.insert_hist
            + self.commit
    }
}

#[derive(Clone, Debug, Default)]
struct MicroCosts {
    batches: u64,
    records: u64,
    histograms: u64,
    /// µs per record / per histogram.
    prost_decode_per_record: f64,
    record_try_from: f64,
    request_row: f64,
    hist_deserialize: f64,
    hist_inflate: f64,
    hist_buckets: f64,
    hist_deflate: f64,
    hist_row_total: f64,
    /// `HistogramRow::from_pb`: what the sink runs (sparse walk of the blob).
    hist_row_from_pb: f64,
    avg_buckets: f64,
    avg_hist_v2_bytes: f64,
    avg_batch_bytes: f64,
}

struct SizeReport {
    mix: Mix,
    size: u64,
    append: AppendResult,
    drain: Option<DrainResult>,
    profiles: Vec<Stages>,
}

struct Bench<'a> {
    cfg: &'a Config,
    /// The workload being run.
    mix: Mix,
    rt: &'a tokio::runtime::Runtime,
    client: clickhouse::Client,
    work: PathBuf,
    db_prefix: String,
    dbs: Vec<String>,
}

impl Bench<'_> {
    fn fresh_db(&mut self) -> anyhow::Result<String> {
        let db = format!("{}_{}", self.db_prefix, self.dbs.len() + 1);
        self.dbs.push(db.clone());
        let client = self.client.clone();
        let dbc = db.clone();
        block(self.rt, self.cfg, "DROP DATABASE", async move {
            client
                .query(&format!("DROP DATABASE IF EXISTS {dbc}"))
                .execute()
                .await
                .map_err(store::StoreError::from)
        })?;
        let client = self.client.clone();
        let dbc = db.clone();
        block(self.rt, self.cfg, "migrate", async move {
            store::migrate(&client, &dbc, None).await
        })?;
        // Null-engine twins of the row tables, for the insert split.
        for table in ["requests", "histograms"] {
            let client = self.client.clone();
            let sql = format!("CREATE TABLE {db}.{table}_null AS {db}.{table} ENGINE = Null");
            block(
                self.rt,
                self.cfg,
                "CREATE TABLE … ENGINE = Null",
                async move {
                    client
                        .query(&sql)
                        .execute()
                        .await
                        .map_err(store::StoreError::from)
                },
            )?;
        }
        Ok(db)
    }

    fn drop_dbs(&mut self) {
        if self.cfg.keep_db {
            eprintln!("sink_throughput: keeping databases {:?}", self.dbs);
            return;
        }
        for db in std::mem::take(&mut self.dbs) {
            let client = self.client.clone();
            let sql = format!("DROP DATABASE IF EXISTS {db}");
            let r = self.rt.block_on(async move {
                tokio::time::timeout(Duration::from_secs(60), client.query(&sql).execute()).await
            });
            if !matches!(r, Ok(Ok(()))) {
                eprintln!("sink_throughput: could not drop database {db}: {r:?}");
            }
        }
    }

    fn campaign_id(&self, size: u64) -> String {
        format!(
            "bench-{}-{size}-{:08x}",
            self.mix.name,
            SeededRng::new(SEED ^ size).next_u64() as u32
        )
    }

    /// Step 1: generate and append `size` records to a fresh spool in `dir`.
    fn append(&self, size: u64, dir: &Path) -> anyhow::Result<AppendResult> {
        let spool = Spool::open(SpoolConfig::new(dir, SPOOL_MAX_BYTES))?;
        let mut g = Generator::new(self.mix, SEED ^ size, self.campaign_id(size));
        let batches = size.div_ceil(self.mix.records_per_batch as u64);
        let mut out = AppendResult::default();
        let mut lat = Vec::with_capacity(batches as usize);
        let mut gen_time = Duration::ZERO;
        for i in 0..batches {
            if i % 256 == 0 {
                self.cfg.check_time("spool append")?;
            }
            let t = Instant::now();
            let b = g.next_batch();
            gen_time += t.elapsed();
            let t = Instant::now();
            spool.append(&b.agent_id, &b.region, &b.batch)?;
            lat.push(t.elapsed());
            out.batches += 1;
            out.records += b.batch.records.len() as u64;
            out.histograms += b.batch.histograms.len() as u64;
        }
        out.bytes = spool.pending_bytes();
        out.append_secs = lat.iter().sum::<Duration>().as_secs_f64();
        out.gen_secs = gen_time.as_secs_f64();
        lat.sort_unstable();
        let pct = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
        out.p50_us = pct(0.5);
        out.p99_us = pct(0.99);
        out.max_us = pct(1.0);
        Ok(out)
    }

    /// Checks that ClickHouse holds exactly the generated rows of `size`'s campaign in `db`.
    fn verify(&self, db: &str, size: u64, a: &AppendResult) -> anyhow::Result<String> {
        let client = self.client.clone();
        let dbc = db.to_string();
        let campaign = self.campaign_id(size);
        let c = block(self.rt, self.cfg, "counts", async move {
            store::counts(&client, &dbc, &campaign).await
        })?;
        let agents = REGIONS.len() * AGENTS_PER_REGION;
        let missing: usize = c.agents.iter().map(|a| a.missing_seqs.len()).sum();
        let batches: u64 = c.agents.iter().map(|a| a.batches).sum();
        ensure!(
            c.request_rows == a.records
                && c.histogram_rows == a.histograms
                && c.duplicate_request_rows == 0
                && c.duplicate_histogram_rows == 0
                && c.duplicates.is_empty()
                && c.agents.len() == agents
                && missing == 0
                && batches == a.batches,
            "ClickHouse does not hold every row exactly once: expected {} requests and {} histograms in {} batches of {agents} agents, found {} + {} rows ({} + {} duplicates) in {batches} batches of {} agents, {missing} missing seqs",
            a.records,
            a.histograms,
            a.batches,
            c.request_rows,
            c.histogram_rows,
            c.duplicate_request_rows,
            c.duplicate_histogram_rows,
            c.agents.len()
        );
        Ok(format!(
            "{} + {} rows, 0 duplicates, 0 missing",
            c.request_rows, c.histogram_rows
        ))
    }

    /// Step 2: the real `sink::run` drains `dir` into a fresh database.
    fn drain_with_sink(
        &mut self,
        size: u64,
        dir: &Path,
        a: &AppendResult,
    ) -> anyhow::Result<DrainResult> {
        let db = self.fresh_db()?;
        let t = Instant::now();
        let spool = Arc::new(Spool::open(SpoolConfig::new(dir, SPOOL_MAX_BYTES))?);
        let open_secs = t.elapsed().as_secs_f64();
        let pending = spool.pending_entries();
        ensure!(
            pending == a.batches,
            "spool holds {pending} entries, expected {}",
            a.batches
        );
        let last_id = spool.committed_id() + pending;
        let target = SinkTarget::with_client(
            self.client.clone(),
            "",
            &db,
            latmesh_store::Timeouts::default(),
        );
        let t = Instant::now();
        let task = self
            .rt
            .spawn(sink::run(spool.clone(), State::with_store_events(), target));
        let mut result = Ok(());
        while spool.committed_id() < last_id {
            if task.is_finished() {
                result = Err(anyhow!("sink::run ended before the spool was drained"));
                break;
            }
            if self.cfg.left().is_zero() {
                let done = spool.committed_id();
                result = Err(anyhow!(
                    "time is up while the sink drained: {done} of {pending} batches committed after {:.1} s ({:.0} records/s)",
                    t.elapsed().as_secs_f64(),
                    (done * self.mix.records_per_batch as u64) as f64 / t.elapsed().as_secs_f64()
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let secs = t.elapsed().as_secs_f64();
        task.abort();
        let _ = self.rt.block_on(task);
        result?;
        let verified = self.verify(&db, size, a)?;
        let client = self.client.clone();
        let q = client
            .query(
                "SELECT table, count(), sum(rows), sum(data_uncompressed_bytes), \
                 sum(data_compressed_bytes) FROM system.parts \
                 WHERE database = ? AND active AND table IN ('requests', 'histograms') \
                 GROUP BY table ORDER BY table DESC",
            )
            .bind(db.as_str());
        let tables = block(self.rt, self.cfg, "system.parts", async move {
            q.fetch_all::<(String, u64, u64, u64, u64)>()
                .await
                .map_err(store::StoreError::from)
        })?;
        Ok(DrainResult {
            tables,
            records: a.records,
            histograms: a.histograms,
            secs,
            open_secs,
            verified,
        })
    }

    /// Step 3: the sink's steps one by one, timed, `chunk` batches per round.
    fn profile(
        &mut self,
        size: u64,
        dir: &Path,
        chunk: usize,
        a: &AppendResult,
    ) -> anyhow::Result<Stages> {
        let db = self.fresh_db()?;
        let spool = Spool::open(SpoolConfig::new(dir, SPOOL_MAX_BYTES))?;
        let mut s = Stages {
            chunk,
            ..Default::default()
        };
        let wall = Instant::now();
        loop {
            self.cfg.check_time("the stage profile")?;
            // read: file read, CRC, prost decode (Spool::read_from)
            let t = Instant::now();
            let entries = spool.read_from(None, chunk)?;
            s.read += t.elapsed().as_secs_f64();
            if entries.is_empty() {
                break;
            }
            s.rounds += 1;
            // decode: as sink::decode
            let t = Instant::now();
            let decoded: Vec<(&Entry, Vec<ProbeRecord>, Vec<IntervalHistogram>)> = entries
                .iter()
                .map(|e| {
                    let records = e
                        .batch
                        .records
                        .iter()
                        .map(|r| ProbeRecord::try_from(r.clone()))
                        .collect::<Result<Vec<_>, _>>()?;
                    let hists = e
                        .batch
                        .histograms
                        .iter()
                        .map(|h| {
                            wire::histogram_from_pb(h).map(|(k, hist)| {
                                (k, hist, h.start_agent_unix_us, h.end_agent_unix_us)
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((e, records, hists))
                })
                .collect::<Result<_, wire::WireError>>()?;
            let keys: Vec<BatchKey<'_>> = decoded
                .iter()
                .map(|(e, _, _)| {
                    BatchKey::new(
                        &e.batch.campaign_id,
                        &e.agent_id,
                        &e.region,
                        e.batch.clock_offset_us,
                        e.batch.seq,
                    )
                })
                .collect();
            s.decode += t.elapsed().as_secs_f64();
            // histogram rows: buckets + V2/DEFLATE re-encode (insert_batches, first step)
            let t = Instant::now();
            let mut hist_rows: Vec<Vec<HistogramRow>> = Vec::with_capacity(decoded.len());
            for ((_, _, hists), key) in decoded.iter().zip(&keys) {
                let mut rows = Vec::with_capacity(hists.len());
                for (i, (hk, h, start, end)) in hists.iter().enumerate() {
                    rows.push(HistogramRow::from_histogram(
                        key, i as u32, hk, h, *start, *end,
                    )?);
                }
                hist_rows.push(rows);
            }
            s.hist_rows += t.elapsed().as_secs_f64();
            // presence: the two queries of insert_batches (same SQL)
            let t = Instant::now();
            let mut present: [HashMap<(String, String, u64), HashSet<u32>>; 2] = Default::default();
            for (ti, table) in ["requests", "histograms"].into_iter().enumerate() {
                for part in keys.chunks(PRESENCE_CHUNK) {
                    let cond = vec!["(campaign_id = ? AND agent_id = ? AND seq = ?)"; part.len()]
                        .join(" OR ");
                    let mut q = self.client.query(&format!(
                        "SELECT campaign_id, agent_id, seq, row_index FROM {db}.{table} WHERE {cond}"
                    ));
                    for k in part {
                        q = q.bind(k.campaign_id).bind(k.agent_id).bind(k.seq);
                    }
                    let rows = block(self.rt, self.cfg, "presence query", async move {
                        q.fetch_all::<(String, String, u64, u32)>()
                            .await
                            .map_err(store::StoreError::from)
                    })?;
                    s.present_rows += rows.len() as u64;
                    for (c, a, seq, row) in rows {
                        present[ti].entry((c, a, seq)).or_default().insert(row);
                    }
                }
            }
            s.presence += t.elapsed().as_secs_f64();
            // request rows (and the histogram rows' filter)
            let t = Instant::now();
            let none = HashSet::new();
            let mut req_out: Vec<RequestRow> = Vec::new();
            let mut hist_out: Vec<HistogramRow> = Vec::new();
            for (((_, records, _), key), rows) in decoded.iter().zip(&keys).zip(hist_rows) {
                let id = (
                    key.campaign_id.to_string(),
                    key.agent_id.to_string(),
                    key.seq,
                );
                let have = present[0].get(&id).unwrap_or(&none);
                req_out.extend(
                    records
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !have.contains(&(*i as u32)))
                        .map(|(i, rec)| RequestRow::from_record(key, i as u32, rec)),
                );
                let have = present[1].get(&id).unwrap_or(&none);
                hist_out.extend(rows.into_iter().filter(|r| !have.contains(&r.row_index)));
            }
            s.req_rows += t.elapsed().as_secs_f64();
            s.records += req_out.len() as u64;
            s.histograms += hist_out.len() as u64;
            // inserts
            for (table, secs, null_secs) in [
                ("requests", &mut s.insert_req, &mut s.null_req),
                ("histograms", &mut s.insert_hist, &mut s.null_hist),
            ] {
                for (suffix, acc) in [("", secs), ("_null", null_secs)] {
                    let name = format!("{table}{suffix}");
                    let client = self.client.clone();
                    let dbc = db.clone();
                    let t = Instant::now();
                    if table == "requests" {
                        let rows = &req_out;
                        block(self.rt, self.cfg, "insert", async move {
                            store::insert_rows(&client, &dbc, &name, rows).await
                        })?;
                    } else {
                        let rows = &hist_out;
                        block(self.rt, self.cfg, "insert", async move {
                            store::insert_rows(&client, &dbc, &name, rows).await
                        })?;
                    }
                    *acc += t.elapsed().as_secs_f64();
                }
            }
            // commit: ledger write + fsync + rename + dir fsync
            let t = Instant::now();
            spool.commit(entries.last().expect("not empty").id)?;
            s.commit += t.elapsed().as_secs_f64();
        }
        s.wall = wall.elapsed().as_secs_f64();
        s.verified = self.verify(&db, size, a)?;
        Ok(s)
    }
}

/// Step 4: CPU cost of each conversion, on `n` generated batches.
fn micro_costs(n: u64) -> anyhow::Result<MicroCosts> {
    let mut g = Generator::new(MIXES[0], SEED ^ 0x5eed, "bench-micro-00000000".into());
    let batches: Vec<GenBatch> = (0..n).map(|_| g.next_batch()).collect();
    let encoded: Vec<Vec<u8>> = batches.iter().map(|b| b.batch.encode_to_vec()).collect();
    let mut m = MicroCosts {
        batches: n,
        ..Default::default()
    };
    m.records = batches.iter().map(|b| b.batch.records.len() as u64).sum();
    m.histograms = batches
        .iter()
        .map(|b| b.batch.histograms.len() as u64)
        .sum();
    m.avg_batch_bytes = encoded.iter().map(Vec::len).sum::<usize>() as f64 / n as f64;
    m.avg_hist_v2_bytes = batches
        .iter()
        .flat_map(|b| &b.batch.histograms)
        .map(|h| h.hist_v2.len())
        .sum::<usize>() as f64
        / m.histograms as f64;
    let per = |d: Duration, k: u64| d.as_secs_f64() * 1e6 / k as f64;

    let t = Instant::now();
    let decoded: Vec<pb::ResultBatch> = encoded
        .iter()
        .map(|b| pb::ResultBatch::decode(b.as_slice()))
        .collect::<Result<_, _>>()?;
    m.prost_decode_per_record = per(t.elapsed(), m.records);

    let t = Instant::now();
    let records: Vec<Vec<ProbeRecord>> = decoded
        .iter()
        .map(|b| {
            b.records
                .iter()
                .map(|r| ProbeRecord::try_from(r.clone()))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    m.record_try_from = per(t.elapsed(), m.records);

    let t = Instant::now();
    let mut rows = 0usize;
    for (b, recs) in decoded.iter().zip(&records) {
        let key = BatchKey::new(&b.campaign_id, "agent", "region", b.clock_offset_us, b.seq);
        for (i, r) in recs.iter().enumerate() {
            rows += std::hint::black_box(RequestRow::from_record(&key, i as u32, r)).slot as usize;
        }
    }
    std::hint::black_box(rows);
    m.request_row = per(t.elapsed(), m.records);

    // Histograms one at a time, as a sink round would hold them only briefly: a decoded
    // histogram with latmesh's bounds is ~188 KB of counts, whatever it holds.
    let (mut deser, mut inflate, mut bucket_t, mut deflate, mut row_t, mut from_pb_t) = (
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
        Duration::ZERO,
    );
    let mut buckets = 0usize;
    let key = BatchKey::new("c", "a", "r", 0, 1);
    for (i, ph) in decoded.iter().flat_map(|b| &b.histograms).enumerate() {
        let t = Instant::now();
        let raw: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut std::io::Cursor::new(&ph.hist_v2))
            .map_err(|e| anyhow!("{e:?}"))?;
        deser += t.elapsed();
        std::hint::black_box(raw);
        let t = Instant::now();
        let (hk, h) = wire::histogram_from_pb(ph)?;
        inflate += t.elapsed();
        let t = Instant::now();
        buckets += std::hint::black_box(store::rows::buckets(&h)).0.len();
        bucket_t += t.elapsed();
        let t = Instant::now();
        std::hint::black_box(hist::encode_v2(&h)?);
        deflate += t.elapsed();
        let t = Instant::now();
        std::hint::black_box(HistogramRow::from_histogram(&key, i as u32, &hk, &h, 0, 1)?);
        row_t += t.elapsed();
        let t = Instant::now();
        std::hint::black_box(HistogramRow::from_pb(&key, i as u32, ph)?);
        from_pb_t += t.elapsed();
    }
    m.hist_deserialize = per(deser, m.histograms);
    m.hist_inflate = per(inflate, m.histograms);
    m.hist_buckets = per(bucket_t, m.histograms);
    m.avg_buckets = buckets as f64 / m.histograms as f64;
    m.hist_deflate = per(deflate, m.histograms);
    m.hist_row_total = per(row_t, m.histograms);
    m.hist_row_from_pb = per(from_pb_t, m.histograms);
    Ok(m)
}

// ---------------------------------------------------------------------------------------------
// Report

fn cmd_out(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", head.join(" | "));
    let _ = writeln!(
        s,
        "|{}|",
        head.iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { " :--- " } else { " ---: " })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

struct Env {
    date: String,
    nproc: String,
    cpu: String,
    mem: String,
    kernel: String,
    ch_version: String,
    ch_where: String,
    rustc: String,
    spool_fs: String,
    command: String,
    load: String,
    git: String,
}

fn render(
    env: &Env,
    reports: &[SizeReport],
    micro: Option<&MicroCosts>,
    error: Option<&str>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Measured {date} on {nproc} vCPU ({cpu}), {mem} RAM, Linux {kernel}; ClickHouse {ch} ({chw}) on the same machine; spool on {fs}; {rustc}; source: git {git}; load average at start: {load}.\n\nCommand: `{cmd}`\n",
        date = env.date,
        nproc = env.nproc,
        cpu = env.cpu,
        mem = env.mem,
        kernel = env.kernel,
        ch = env.ch_version,
        chw = env.ch_where,
        fs = env.spool_fs,
        rustc = env.rustc,
        load = env.load,
        git = env.git,
        cmd = env.command
    );
    let _ = writeln!(
        s,
        "Workload: result batches from a seeded RNG: {} agents in {} regions, {} providers, {} scenarios, ~5 % non-ok outcomes (429 / 5xx / timeout / connection errors with messages), an interval histogram per provider, scenario and metric of the batch (ITL histograms hold every token gap). Two mixes: **patrol** = what an agent probing at 10 requests/s sends (a batch of 100 records every 10 s, one scenario per batch, 5 metrics: 20 histograms per 100 records); **busy** = what an agent at 2,000 requests/s sends (a batch per second, the agent's flush interval: 2,000 records, both scenarios, the 7 metrics of a streamed request: 56 histograms per 2,000 records). Target (issue 4): ≥ {} records/s through the sink.\n",
        REGIONS.len() * AGENTS_PER_REGION,
        REGIONS.len(),
        PROVIDERS.len(),
        SCENARIOS.len(),
        thousands(TARGET_RECORDS_PER_S)
    );
    if let Some(e) = error {
        let _ = writeln!(s, "**The run did not complete:** {e}\n");
    }

    let _ = writeln!(
        s,
        "### Spool append (one `Spool::append` per batch, fsync each)\n"
    );
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let a = &r.append;
            vec![
                r.mix.name.to_string(),
                thousands(a.records as f64),
                thousands(a.batches as f64),
                format!("{:.1}", a.bytes as f64 / (1 << 20) as f64),
                format!("{:.2}", a.append_secs),
                thousands(a.batches as f64 / a.append_secs),
                thousands(a.records as f64 / a.append_secs),
                format!("{:.1}", a.bytes as f64 / (1 << 20) as f64 / a.append_secs),
                format!("{:.0} / {:.0} / {:.0}", a.p50_us, a.p99_us, a.max_us),
            ]
        })
        .collect();
    s += &table(
        &[
            "mix",
            "records",
            "batches",
            "MiB on disk",
            "seconds",
            "batches/s",
            "records/s",
            "MiB/s",
            "append p50 / p99 / max (µs)",
        ],
        &rows,
    );

    let _ = writeln!(
        s,
        "\n### Sink drain end to end (spool → `sink::run` → ClickHouse, verified with `query::counts`)\n"
    );
    let rows: Vec<Vec<String>> = reports
        .iter()
        .filter_map(|r| r.drain.as_ref().map(|d| (r, d)))
        .map(|(r, d)| {
            vec![
                r.mix.name.to_string(),
                thousands(d.records as f64),
                format!("{:.1}", 100.0 * d.histograms as f64 / d.records as f64),
                format!("{:.2}", d.secs),
                thousands(d.records as f64 / d.secs),
                thousands(d.histograms as f64 / d.secs),
                if d.records as f64 / d.secs >= TARGET_RECORDS_PER_S {
                    "met".into()
                } else {
                    format!(
                        "**not met** ({:.0} %)",
                        100.0 * d.records as f64 / d.secs / TARGET_RECORDS_PER_S
                    )
                },
                format!("{:.2}", d.open_secs),
                d.verified.clone(),
            ]
        })
        .collect();
    s += &table(
        &[
            "mix",
            "records",
            "histograms per 100 records",
            "seconds",
            "records/s",
            "histogram rows/s",
            "target ≥ 200,000/s",
            "spool open (s)",
            "check",
        ],
        &rows,
    );

    let rows: Vec<Vec<String>> = reports
        .iter()
        .filter_map(|r| r.drain.as_ref().map(|d| (r, d)))
        .flat_map(|(r, d)| {
            d.tables
                .iter()
                .map(move |(table, parts, rows, raw, packed)| {
                    vec![
                        r.mix.name.to_string(),
                        thousands(r.size as f64),
                        format!("`{table}`"),
                        thousands(*rows as f64),
                        format!("{:.0}", *raw as f64 / *rows as f64),
                        format!("{:.1}", *raw as f64 / (1 << 20) as f64),
                        format!("{:.1}", *packed as f64 / (1 << 20) as f64),
                        format!("{:.1}", *raw as f64 / (1 << 20) as f64 / d.secs),
                        parts.to_string(),
                    ]
                })
        })
        .collect();
    if !rows.is_empty() {
        let _ = writeln!(
            s,
            "\nWhat the drain wrote (`system.parts`, active parts right after the drain):\n"
        );
        s += &table(
            &[
                "mix",
                "records",
                "table",
                "rows",
                "bytes/row (uncompressed)",
                "MiB uncompressed",
                "MiB compressed",
                "MiB/s uncompressed",
                "active parts",
            ],
            &rows,
        );
    }

    let profiles: Vec<(&SizeReport, &Stages)> = reports
        .iter()
        .flat_map(|r| r.profiles.iter().map(move |p| (r, p)))
        .collect();
    if !profiles.is_empty() {
        let _ = writeln!(
            s,
            "\n### Where the time goes: the sink's steps timed one by one\n\nThe same steps as `sink::run` + `insert_batches`, sequential, `batches/round` batches per read and per insert (the sink reads {SINK_READ_ENTRIES}). Seconds per stage, share of the sum in parentheses. `null insert` = the same rows into `ENGINE = Null` twins (client serialization + LZ4 + HTTP + server parse, no part written; not part of the sum).\n"
        );
        let rows: Vec<Vec<String>> = profiles
            .iter()
            .map(|(r, p)| {
                let sum = p.sink_secs();
                let f = |x: f64| format!("{x:.2} ({:.0} %)", 100.0 * x / sum);
                vec![
                    r.mix.name.to_string(),
                    thousands(r.size as f64),
                    p.chunk.to_string(),
                    p.rounds.to_string(),
                    f(p.read),
                    f(p.decode),
                    f(p.hist_rows),
                    f(p.presence),
                    f(p.req_rows),
                    f(p.insert_req),
                    f(p.insert_hist),
                    f(p.commit),
                    format!("{sum:.2}"),
                    thousands(p.records as f64 / sum),
                    format!("{:.2} / {:.2}", p.null_req, p.null_hist),
                ]
            })
            .collect();
        s += &table(
            &[
                "mix",
                "records",
                "batches/round",
                "rounds",
                "spool read+decode (prost, CRC)",
                "to ProbeRecord + inflate hists",
                "histogram rows (buckets + re-deflate)",
                "presence queries",
                "request rows",
                "INSERT requests",
                "INSERT histograms",
                "spool commit",
                "sum (s)",
                "records/s",
                "null insert req / hist (s)",
            ],
            &rows,
        );
        let rows: Vec<Vec<String>> = profiles
            .iter()
            .map(|(r, p)| {
                let per_round = |x: f64| format!("{:.1}", 1e3 * x / p.rounds as f64);
                vec![
                    r.mix.name.to_string(),
                    thousands(r.size as f64),
                    p.chunk.to_string(),
                    per_round(p.read + p.decode + p.hist_rows + p.req_rows),
                    per_round(p.presence),
                    per_round(p.insert_req),
                    per_round(p.null_req),
                    per_round(p.insert_hist),
                    per_round(p.null_hist),
                    per_round(p.commit),
                    p.verified.clone(),
                ]
            })
            .collect();
        let _ = writeln!(s, "\nPer round (ms):\n");
        s += &table(
            &[
                "mix",
                "records",
                "batches/round",
                "CPU stages (read, decode, rows)",
                "presence (2 queries)",
                "INSERT requests",
                "… into Null",
                "INSERT histograms",
                "… into Null",
                "commit",
                "check",
            ],
            &rows,
        );
    }
    if let Some(m) = micro {
        let _ = writeln!(
            s,
            "\n### CPU micro-costs (one core, {} generated batches of the patrol mix; avg batch {:.1} KiB protobuf, {:.0} B `hist_v2`, {:.0} non-empty buckets per histogram)\n",
            m.batches,
            m.avg_batch_bytes / 1024.0,
            m.avg_hist_v2_bytes,
            m.avg_buckets
        );
        let hpr = m.histograms as f64 / m.records as f64;
        let rows = vec![
            vec![
                "prost decode of the batch (in `Spool::read_from`)".into(),
                format!("{:.2} µs / record", m.prost_decode_per_record),
                format!("{:.2}", m.prost_decode_per_record),
            ],
            vec![
                "`ProbeRecord::try_from` (clone + convert)".into(),
                format!("{:.2} µs / record", m.record_try_from),
                format!("{:.2}", m.record_try_from),
            ],
            vec![
                "`RequestRow::from_record`".into(),
                format!("{:.2} µs / record", m.request_row),
                format!("{:.2}", m.request_row),
            ],
            vec![
                "V2 + DEFLATE deserialize alone (`Deserializer::deserialize`)".into(),
                format!("{:.1} µs / histogram", m.hist_deserialize),
                format!("{:.2}", hpr * m.hist_deserialize),
            ],
            vec![
                "`wire::histogram_from_pb` (deserialize + `new_histogram` + `add`)".into(),
                format!("{:.1} µs / histogram", m.hist_inflate),
                format!("{:.2}", hpr * m.hist_inflate),
            ],
            vec![
                "`rows::buckets`".into(),
                format!("{:.1} µs / histogram", m.hist_buckets),
                format!("{:.2}", hpr * m.hist_buckets),
            ],
            vec![
                "`hist::encode_v2` (V2 + DEFLATE)".into(),
                format!("{:.1} µs / histogram", m.hist_deflate),
                format!("{:.2}", hpr * m.hist_deflate),
            ],
            vec![
                "`HistogramRow::from_histogram` (buckets + encode_v2)".into(),
                format!("{:.1} µs / histogram", m.hist_row_total),
                format!("{:.2}", hpr * m.hist_row_total),
            ],
            vec![
                "**`HistogramRow::from_pb`** (what the sink runs: the blob walked sparsely, kept as sent)".into(),
                format!("{:.1} µs / histogram", m.hist_row_from_pb),
                format!("{:.2}", hpr * m.hist_row_from_pb),
            ],
        ];
        s += &table(
            &[
                "step",
                "cost",
                "µs per record (20 histograms per 100 records)",
            ],
            &rows,
        );
    }
    s
}

const SECTION: &str = "## Sink throughput (ClickHouse)";
const BEGIN: &str = "<!-- sink_throughput:begin: written by `cargo bench -p latmesh-coordinator --bench sink_throughput -- --write`; edit outside these markers -->";
const END: &str = "<!-- sink_throughput:end -->";

/// Replaces the generated block of the sink section of BENCHMARKS.md (creating the file or
/// the section if needed), keeping everything else.
fn write_markdown(body: &str) -> anyhow::Result<PathBuf> {
    let path = repo_root().join("BENCHMARKS.md");
    let old = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "# Benchmarks\n\nMeasured numbers of latmesh's benchmarks, one section per benchmark.\n"
                .into()
        }
        Err(e) => return Err(e).context("reading BENCHMARKS.md"),
    };
    let block = format!("{BEGIN}\n\n{}\n{END}", body.trim_end());
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{block}{}", &old[..b], &old[e + END.len()..]),
        _ if old.contains(SECTION) => {
            let at = old.find(SECTION).expect("contains") + SECTION.len();
            format!("{}\n\n{block}\n{}", &old[..at], &old[at..])
        }
        _ => format!(
            "{}\n{SECTION}\n\n{block}\n",
            old.trim_end().to_string() + "\n"
        ),
    };
    std::fs::write(&path, new).context("writing BENCHMARKS.md")?;
    Ok(path)
}

// ---------------------------------------------------------------------------------------------

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

fn run(cfg: &Config, bench: &mut Bench<'_>, reports: &mut Vec<SizeReport>) -> anyhow::Result<()> {
    for &mix in &cfg.mixes {
        bench.mix = mix;
        run_mix(cfg, bench, reports)?;
    }
    Ok(())
}

/// Every size of `bench.mix`.
fn run_mix(
    cfg: &Config,
    bench: &mut Bench<'_>,
    reports: &mut Vec<SizeReport>,
) -> anyhow::Result<()> {
    let mix = bench.mix;
    for &size in &cfg.sizes {
        let dir = bench.work.join(format!("spool-{}-{size}", mix.name));
        eprintln!(
            "sink_throughput: mix {}, {size} records: generating and appending to the spool…",
            mix.name
        );
        let append = bench.append(size, &dir)?;
        eprintln!(
            "sink_throughput:   appended {} batches in {:.2} s ({:.0} records/s; generating them took {:.1} s)",
            append.batches,
            append.append_secs,
            append.records as f64 / append.append_secs,
            append.gen_secs
        );
        let copies: Vec<(usize, PathBuf)> = cfg
            .profile_chunks
            .iter()
            .map(|&c| (c, bench.work.join(format!("spool-{size}-profile-{c}"))))
            .collect();
        for (_, d) in &copies {
            copy_dir(&dir, d)?;
        }
        reports.push(SizeReport {
            mix,
            size,
            append: append.clone(),
            drain: None,
            profiles: Vec::new(),
        });
        eprintln!("sink_throughput:   draining with sink::run…");
        let drain = bench.drain_with_sink(size, &dir, &append)?;
        eprintln!(
            "sink_throughput:   drained in {:.2} s: {:.0} records/s ({})",
            drain.secs,
            drain.records as f64 / drain.secs,
            drain.verified
        );
        let _ = std::fs::remove_dir_all(&dir);
        reports.last_mut().expect("pushed").drain = Some(drain);
        for (chunk, d) in copies {
            eprintln!("sink_throughput:   stage profile, {chunk} batches per round…");
            let p = bench.profile(size, &d, chunk, &append)?;
            eprintln!(
                "sink_throughput:   {:.2} s of stages: {:.0} records/s",
                p.sink_secs(),
                p.records as f64 / p.sink_secs()
            );
            let _ = std::fs::remove_dir_all(&d);
            reports.last_mut().expect("pushed").profiles.push(p);
        }
        bench.drop_dbs();
    }
    Ok(())
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sink_throughput: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn main_inner() -> anyhow::Result<()> {
    let cfg = Config::from_env()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into());

    let (own, url) = match std::env::var("LATMESH_CLICKHOUSE_URL") {
        Ok(url) if !url.is_empty() => (None, url),
        _ => {
            eprintln!("sink_throughput: starting a ClickHouse of its own (scripts/clickhouse.sh)…");
            let ch = OwnClickhouse::start()?;
            let url = ch.url();
            (Some(ch), url)
        }
    };
    let client = store::client(&url);
    let ch_version = {
        let c = client.clone();
        block(&rt, &cfg, "SELECT version()", async move {
            c.query("SELECT version()")
                .fetch_one::<String>()
                .await
                .map_err(store::StoreError::from)
        })?
    };
    let work = match &cfg.work_dir {
        Some(d) => tempfile::Builder::new()
            .prefix("latmesh-bench-")
            .tempdir_in(d)?,
        None => tempfile::Builder::new()
            .prefix("latmesh-bench-")
            .tempdir()?,
    };
    let spool_fs = {
        let out = cmd_out(
            "df",
            &["--output=fstype,source", &work.path().to_string_lossy()],
        );
        let line = out
            .lines()
            .last()
            .unwrap_or("?")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "{} ({line})",
            work.path().parent().unwrap_or(work.path()).display()
        )
    };
    let env = Env {
        date: cmd_out("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        nproc: cmd_out("nproc", &[]),
        cpu: cpu_model(),
        mem: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| {
                        l.split_whitespace()
                            .nth(1)
                            .and_then(|k| k.parse::<f64>().ok())
                    })
            })
            .map(|kb| format!("{:.0} GiB", kb / (1 << 20) as f64))
            .unwrap_or_else(|| "?".into()),
        kernel: cmd_out("uname", &["-r"]),
        ch_where: if own.is_some() {
            "Debian package, started by the bench with scripts/clickhouse.sh".into()
        } else {
            "LATMESH_CLICKHOUSE_URL".into()
        },
        ch_version,
        rustc: cmd_out("rustc", &["--version"]),
        spool_fs,
        command: {
            let mut c = String::new();
            for var in [
                "LATMESH_BENCH_SIZES",
                "LATMESH_BENCH_PROFILE_CHUNKS",
                "LATMESH_BENCH_TIMEOUT_S",
            ] {
                if let Ok(v) = std::env::var(var) {
                    let _ = write!(c, "{var}={v} ");
                }
            }
            c + "cargo bench -p latmesh-coordinator --bench sink_throughput -- --write"
        },
        load,
        git: {
            let root = repo_root();
            let root = root.to_string_lossy();
            let head = cmd_out("git", &["-C", &root, "rev-parse", "--short", "HEAD"]);
            let dirty = !cmd_out(
                "git",
                &["-C", &root, "status", "--porcelain", "--untracked-files=no"],
            )
            .is_empty();
            if dirty {
                format!("{head} + uncommitted changes")
            } else {
                head
            }
        },
    };
    eprintln!(
        "sink_throughput: ClickHouse {} at {url}; work dir {}",
        env.ch_version,
        work.path().display()
    );

    let mut bench = Bench {
        cfg: &cfg,
        mix: cfg.mixes[0],
        rt: &rt,
        client,
        work: work.path().to_path_buf(),
        db_prefix: format!("latmesh_bench_{}", std::process::id()),
        dbs: Vec::new(),
    };
    let mut reports = Vec::new();
    let result = run(&cfg, &mut bench, &mut reports);
    bench.drop_dbs();
    let micro = if result.is_ok() {
        eprintln!("sink_throughput: CPU micro-costs…");
        Some(micro_costs(500)?)
    } else {
        None
    };
    let error = result.as_ref().err().map(|e| format!("{e:#}"));
    let body = render(&env, &reports, micro.as_ref(), error.as_deref());
    println!("\n{SECTION}\n\n{body}");
    if cfg.write {
        let path = write_markdown(&body)?;
        eprintln!("sink_throughput: wrote {}", path.display());
    }
    drop(work);
    drop(own);
    result
}
