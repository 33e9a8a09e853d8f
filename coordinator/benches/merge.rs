//! The coordinator's per-batch work, in-process (no network, no spool, no ClickHouse):
//! merging interval histograms into a campaign's aggregate, accepting result batches through
//! [`State::batch`] (decode + check + merge + progress, what an ack waits for), and the
//! ClickHouse row conversions the sink does per batch.
//!
//! ```sh
//! cargo bench -p latmesh-coordinator --bench merge                    # criterion groups
//! cargo bench -p latmesh-coordinator --bench merge -- --load          # throughput tables
//! cargo bench -p latmesh-coordinator --bench merge -- --load --write  # … into BENCHMARKS.md
//! cargo bench -p latmesh-coordinator --bench merge -- --smoke         # tiny tables (CI)
//! ```
//!
//! Criterion groups (throughput set): `rows` (`RequestRow::from_record` per record,
//! `HistogramRow::from_pb` per histogram), `merge` (`Aggregate::add_histogram`, dense decode +
//! add, sparse decode + add, `Aggregate::add_record`, `State::batch` per batch with 50 agents
//! connected).
//!
//! `--load` ("50 agents' worth of traffic"): 50 agents in 5 regions, one campaign, every
//! agent's batches of 100 records + 20 interval histograms (4 providers × 5 metrics, ITL of
//! every token gap) from a seeded generator, handed to [`State::batch`] round-robin over the
//! agents, from one thread and from two; and the histograms alone through
//! `Aggregate::add_histogram` (already decoded, and with `wire::histogram_from_pb`) and
//! `Aggregate::add_sparse_histogram` (with `wire::sparse_histogram_from_pb`, what
//! `State::batch` does).
//! Knob: `LATMESH_MERGE_BATCHES` (default 4,000; smoke 100).

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use hdrhistogram::Histogram;
use latmesh_coordinator::state::State;
use latmesh_core::hist::{self, HistKey};
use latmesh_core::hist_sparse::SparseHistogram;
use latmesh_core::metrics::Metric;
use latmesh_core::record::{Outcome, ProbeRecord, Usage};
use latmesh_core::seeded_rng::SeededRng;
use latmesh_core::wire;
use latmesh_proto::pb;
use latmesh_results::aggregate::Aggregate;
use latmesh_store::insert::BatchKey;
use latmesh_store::{HistogramRow, RequestRow};

const AGENTS: usize = 50;
const REGIONS: [&str; 5] = ["us-east", "us-west", "eu-west", "ap-southeast", "sa-east"];
const PROVIDERS: [(&str, f64, f64); 4] = [
    ("fast-lane", 180.0, 12.0),
    ("steady", 350.0, 20.0),
    ("budget-jitter", 600.0, 35.0),
    ("deep-think", 1200.0, 25.0),
];
const SCENARIO: &str = "chat-short";
const METRICS: [Metric; 5] = [
    Metric::Ttfb,
    Metric::Ttft,
    Metric::E2e,
    Metric::Tpot,
    Metric::Itl,
];
const RECORDS_PER_BATCH: usize = 100;
const BASE_UNIX_US: i64 = 1_764_436_912_000_000;

// ---------------------------------------------------------------------------------------
// Generated traffic

fn agent_id(i: usize) -> String {
    format!("{}-{}", REGIONS[i % REGIONS.len()], i / REGIONS.len() + 1)
}

fn region_of(i: usize) -> &'static str {
    REGIONS[i % REGIONS.len()]
}

/// One batch's content (campaign id and seq are set when it is sent): 100 records (~95 %
/// ok; 429s, 5xx, timeouts, connection errors) and the interval's 20 histograms.
fn template(seed: u64) -> pb::ResultBatch {
    let mut rng = SeededRng::new(seed);
    let start_us = BASE_UNIX_US + (seed as i64 % 1000) * 1_000_000;
    let mut hists: Vec<Histogram<u64>> = (0..PROVIDERS.len() * METRICS.len())
        .map(|_| hist::new_histogram())
        .collect();
    let mut rec_h = |p: usize, m: usize, v: u64| {
        hists[p * METRICS.len() + m]
            .record(v.clamp(hist::LOWEST_US, hist::HIGHEST_US))
            .expect("clamped");
    };
    let mut records = Vec::with_capacity(RECORDS_PER_BATCH);
    for i in 0..RECORDS_PER_BATCH {
        let p = i % PROVIDERS.len();
        let (provider, ttft_ms, gap_ms) = PROVIDERS[p];
        let mut rec = ProbeRecord {
            // Within the plan's 100,000 rounds (the coordinator refuses a round beyond it).
            round: ((seed % 3_000) as u32) * 25 + (i / PROVIDERS.len()) as u32,
            slot: p as u32,
            provider: provider.to_string(),
            scenario: SCENARIO.to_string(),
            prompt_id: format!("short-qa-en-{:03}", rng.range(1, 40)),
            attempt: 1,
            stream: true,
            send_agent_unix_us: start_us + i as i64 * 10_000,
            sched_lag_us: rng.lognormal(300.0, 0.8) as i64,
            final_attempt: true,
            turn: 1,
            ..Default::default()
        };
        let ttfb = (rng.lognormal(ttft_ms * 0.55, 0.35) * 1000.0) as u64;
        let roll = rng.unit();
        if roll < 0.95 {
            let tokens = rng.range(15, 300) as u32;
            let ttft = ttfb + (rng.lognormal(ttft_ms * 0.45, 0.5) * 1000.0) as u64;
            let mut e2e = ttft;
            let mut itl_max = 0;
            for _ in 1..tokens {
                let gap = (rng.lognormal(gap_ms, 0.55) * 1000.0) as u64;
                itl_max = itl_max.max(gap);
                e2e += gap;
                rec_h(p, 4, gap);
            }
            let tpot = (e2e - ttft) / u64::from(tokens - 1);
            for (m, v) in [ttfb, ttft, e2e, tpot].into_iter().enumerate() {
                rec_h(p, m, v);
            }
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
            rec.token_payloads = tokens;
            rec.usage = Usage {
                prompt_tokens: Some(38),
                completion_tokens: Some(tokens),
                total_tokens: Some(38 + tokens),
                reasoning_tokens: None,
                cached_tokens: Some(0),
            };
            rec.finish_reason = Some("stop".into());
            rec.saw_done = true;
            rec.itl_max_us = Some(itl_max);
            rec.response_bytes = u64::from(tokens) * 160 + 280;
            rec.conn_reused = true;
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
        } else if roll < 0.985 {
            rec.outcome = Some(Outcome::Http5xx);
            rec.http_status = Some(503);
            rec.ttfb_us = Some(ttfb);
            rec.error_type = Some("server_error".into());
            rec.error_message = Some("The server is overloaded or not ready yet.".into());
        } else if roll < 0.995 {
            rec.outcome = Some(Outcome::TimeoutTtft);
            rec.http_status = Some(200);
            rec.ttfb_us = Some(ttfb);
            rec.error_message = Some("no token within 30 s".into());
        } else {
            rec.outcome = Some(Outcome::ConnectionError);
            rec.error_message =
                Some("error sending request: connection reset by peer (os error 104)".into());
        }
        records.push(pb::ProbeRecord::from(&rec));
    }
    let histograms = hists
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let key = HistKey {
                provider: PROVIDERS[i / METRICS.len()].0.to_string(),
                scenario: SCENARIO.to_string(),
                metric: METRICS[i % METRICS.len()],
                step: 0,
            };
            wire::histogram_to_pb(&key, h, start_us, start_us + 1_000_000).expect("encode")
        })
        .collect();
    pb::ResultBatch {
        campaign_id: String::new(),
        seq: 0,
        histograms,
        records,
        clock_offset_us: rng.range(0, 4000) as i64 - 2000,
    }
}

/// Distinct batch contents, reused (with their own campaign id and seq) for every send.
const TEMPLATES: usize = 64;

fn templates() -> Vec<pb::ResultBatch> {
    (0..TEMPLATES as u64)
        .map(|s| template(0x5eed + s))
        .collect()
}

/// A state with 50 agents connected (5 regions) and one campaign launched to all of them;
/// the receivers of the agents' channels are kept (plans are pushed to them).
struct Setup {
    state: State,
    campaign_id: String,
    _rx: Vec<tokio::sync::mpsc::Receiver<Result<pb::CoordinatorMessage, tonic::Status>>>,
}

fn setup() -> Setup {
    let state = State::default();
    let mut rx = Vec::new();
    for i in 0..AGENTS {
        let (tx, r) = tokio::sync::mpsc::channel(16);
        state.connect(
            &pb::AgentHello {
                agent_id: agent_id(i),
                region: region_of(i).into(),
                version: "bench".into(),
                protocol_version: 1,
                ..Default::default()
            },
            tx,
        );
        rx.push(r);
    }
    let mut toml = format!(
        "[campaign]\nname = \"bench-merge\"\nregions = [{}]\n[rounds]\ncount = 100000\ninterval_s = 10\ngap_ms = 100\n[[scenarios]]\nname = \"{SCENARIO}\"\nprompt_ids = [\"short-qa-en-001\"]\nmax_tokens = 300\n",
        REGIONS
            .iter()
            .map(|r| format!("\"{r}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (p, _, _) in PROVIDERS {
        let _ = write!(
            toml,
            "[[providers]]\nname = \"{p}\"\nbase_url = \"http://127.0.0.1:9/{p}/v1\"\nmodel_id = \"m\"\n"
        );
    }
    let plan = latmesh_core::campaign::load_toml_str(&toml, Path::new(".")).expect("bench plan");
    let launched = state.launch(&plan.to_json(), 0).expect("launch");
    assert_eq!(launched.agent_ids.len(), AGENTS);
    Setup {
        state,
        campaign_id: launched.campaign_id,
        _rx: rx,
    }
}

/// `n` batches round-robin over the agents: (agent index, batch) with seqs 1, 2, … per agent.
fn traffic(
    templates: &[pb::ResultBatch],
    campaign_id: &str,
    n: usize,
) -> Vec<(usize, pb::ResultBatch)> {
    (0..n)
        .map(|i| {
            let agent = i % AGENTS;
            let mut b = templates[i % templates.len()].clone();
            b.campaign_id = campaign_id.to_string();
            b.seq = (i / AGENTS) as u64 + 1;
            (agent, b)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Criterion

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(20);
    g
}

fn criterion_rows(c: &mut Criterion, t: &pb::ResultBatch) {
    let key = BatchKey::new("bench-merge-1a2b3c4d", "us-east-1", "us-east", -1_250, 42);
    let records: Vec<ProbeRecord> = t
        .records
        .iter()
        .map(|r| ProbeRecord::try_from(r.clone()).expect("record"))
        .collect();
    let mut g = configure(c, "rows");
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("RequestRow::from_record (per record)", |b| {
        b.iter(|| {
            for (i, r) in records.iter().enumerate() {
                black_box(RequestRow::from_record(&key, i as u32, black_box(r)));
            }
        });
    });
    g.bench_function("ProbeRecord::try_from + RequestRow::from_record", |b| {
        b.iter(|| {
            for (i, r) in t.records.iter().enumerate() {
                let rec = ProbeRecord::try_from(black_box(r).clone()).expect("record");
                black_box(RequestRow::from_record(&key, i as u32, &rec));
            }
        });
    });
    g.throughput(Throughput::Elements(t.histograms.len() as u64));
    g.bench_function("HistogramRow::from_pb (per histogram)", |b| {
        b.iter(|| {
            t.histograms
                .iter()
                .enumerate()
                .map(|(i, h)| HistogramRow::from_pb(&key, i as u32, black_box(h)).expect("row"))
                .map(|r| r.values.len())
                .sum::<usize>()
        });
    });
    g.finish();
}

fn criterion_merge(c: &mut Criterion, templates: &[pb::ResultBatch]) {
    let t = &templates[0];
    let decoded: Vec<(HistKey, Histogram<u64>)> = t
        .histograms
        .iter()
        .map(|h| wire::histogram_from_pb(h).expect("histogram"))
        .collect();
    let records: Vec<ProbeRecord> = t
        .records
        .iter()
        .map(|r| ProbeRecord::try_from(r.clone()).expect("record"))
        .collect();
    let mut g = configure(c, "merge");
    g.throughput(Throughput::Elements(decoded.len() as u64));
    g.bench_function("Aggregate::add_histogram (per histogram)", |b| {
        let mut agg = Aggregate::default();
        b.iter(|| {
            for (k, h) in &decoded {
                agg.add_histogram("us-east", k.clone(), black_box(h));
            }
        });
    });
    g.bench_function("histogram_from_pb + add_histogram (per histogram)", |b| {
        let mut agg = Aggregate::default();
        b.iter(|| {
            for h in &t.histograms {
                let (k, h) = wire::histogram_from_pb(black_box(h)).expect("histogram");
                agg.add_histogram("us-east", k, &h);
            }
        });
    });
    g.bench_function(
        "sparse_histogram_from_pb + add_sparse_histogram (per histogram)",
        |b| {
            let mut agg = Aggregate::default();
            b.iter(|| {
                for h in &t.histograms {
                    let (k, h) = wire::sparse_histogram_from_pb(black_box(h)).expect("histogram");
                    agg.add_sparse_histogram("us-east", k, &h);
                }
            });
        },
    );
    g.throughput(Throughput::Elements(records.len() as u64));
    g.bench_function("Aggregate::add_record (per record)", |b| {
        let mut agg = Aggregate::default();
        b.iter(|| {
            for r in &records {
                agg.add_record("us-east", black_box(r));
            }
        });
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("State::batch (per batch, 50 agents)", |b| {
        let s = setup();
        let mut i = 0usize;
        b.iter_batched(
            || {
                let mut batch = templates[i % templates.len()].clone();
                batch.campaign_id = s.campaign_id.clone();
                batch.seq = (i / AGENTS) as u64 + 1;
                let agent = agent_id(i % AGENTS);
                i += 1;
                (agent, batch)
            },
            |(agent, batch)| assert!(s.state.batch(&agent, batch).expect("batch")),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

// ---------------------------------------------------------------------------------------
// --load: throughput tables

#[derive(Default)]
struct AckRun {
    threads: usize,
    batches: usize,
    secs: f64,
    /// Per batch, µs: P50, P99, max.
    p50: f64,
    p99: f64,
    max: f64,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `State::batch` over `n` batches from `threads` threads (agents split between them).
fn acks(templates: &[pb::ResultBatch], n: usize, threads: usize) -> AckRun {
    let s = setup();
    let traffic = traffic(templates, &s.campaign_id, n);
    let mut parts: Vec<Vec<(String, pb::ResultBatch)>> = (0..threads).map(|_| Vec::new()).collect();
    for (agent, b) in traffic {
        parts[agent % threads].push((agent_id(agent), b));
    }
    let t0 = Instant::now();
    let mut lat: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .into_iter()
            .map(|part| {
                let state = s.state.clone();
                scope.spawn(move || {
                    let mut lat = Vec::with_capacity(part.len());
                    for (agent, b) in part {
                        let t = Instant::now();
                        let new = state.batch(&agent, b).expect("batch");
                        lat.push(t.elapsed().as_secs_f64() * 1e6);
                        assert!(new);
                    }
                    lat
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    AckRun {
        threads,
        batches: n,
        secs,
        p50: pct(&lat, 50.0),
        p99: pct(&lat, 99.0),
        max: lat.last().copied().unwrap_or(0.0),
    }
}

struct MergeRun {
    what: &'static str,
    histograms: usize,
    secs: f64,
}

/// Times `merge` (which adds into a fresh aggregate and returns how many histograms it added)
/// as one row of the merge table.
fn merge_run(what: &'static str, merge: impl FnOnce(&mut Aggregate) -> usize) -> MergeRun {
    let mut agg = Aggregate::default();
    let t0 = Instant::now();
    let histograms = merge(&mut agg);
    let secs = t0.elapsed().as_secs_f64();
    black_box(agg);
    MergeRun {
        what,
        histograms,
        secs,
    }
}

/// Interval histograms into one campaign's aggregate (by region), already decoded or with
/// the decode.
fn merges(templates: &[pb::ResultBatch], n_batches: usize) -> Vec<MergeRun> {
    let decoded: Vec<Vec<(HistKey, Histogram<u64>)>> = templates
        .iter()
        .map(|t| {
            t.histograms
                .iter()
                .map(|h| wire::histogram_from_pb(h).expect("histogram"))
                .collect()
        })
        .collect();
    let batch = |i: usize| &templates[i % templates.len()].histograms;
    vec![
        merge_run("`Aggregate::add_histogram` (decoded histograms)", |agg| {
            let mut count = 0;
            for i in 0..n_batches {
                for (k, h) in &decoded[i % decoded.len()] {
                    agg.add_histogram(region_of(i % AGENTS), k.clone(), h);
                    count += 1;
                }
            }
            count
        }),
        // As `State::check` then `State::merge` do: a batch's histograms decoded together,
        // then merged, then dropped.
        merge_run(
            "`wire::histogram_from_pb` × 20, then `Aggregate::add_histogram` × 20 (dense)",
            |agg| {
                let mut count = 0;
                for i in 0..n_batches {
                    let decoded: Vec<(HistKey, Histogram<u64>)> = batch(i)
                        .iter()
                        .map(|h| wire::histogram_from_pb(h).expect("histogram"))
                        .collect();
                    for (k, h) in &decoded {
                        agg.add_histogram(region_of(i % AGENTS), k.clone(), h);
                        count += 1;
                    }
                }
                count
            },
        ),
        // One at a time: decode, merge, drop. Nothing else is allocated in between, so glibc
        // gives the two freed 188 KB arrays back to the kernel (heap trim) and the next
        // decode takes page faults to get them again: the allocator's worst case for this
        // path.
        merge_run(
            "the same (dense) one histogram at a time (decode, add, drop: heap trimmed after each)",
            |agg| {
                let mut count = 0;
                for i in 0..n_batches {
                    for h in batch(i) {
                        let (k, h) = wire::histogram_from_pb(h).expect("histogram");
                        agg.add_histogram(region_of(i % AGENTS), k, &h);
                        count += 1;
                    }
                }
                count
            },
        ),
        // What `State::check` + `State::merge` do: the non-empty buckets only.
        merge_run(
            "`wire::sparse_histogram_from_pb` × 20, then `Aggregate::add_sparse_histogram` × 20 (sparse: as `State::check` + `State::merge`)",
            |agg| {
                let mut count = 0;
                for i in 0..n_batches {
                    let decoded: Vec<(HistKey, SparseHistogram)> = batch(i)
                        .iter()
                        .map(|h| wire::sparse_histogram_from_pb(h).expect("histogram"))
                        .collect();
                    for (k, h) in &decoded {
                        agg.add_sparse_histogram(region_of(i % AGENTS), k.clone(), h);
                        count += 1;
                    }
                }
                count
            },
        ),
    ]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn load_main(smoke: bool, write: bool) {
    let n: usize = std::env::var("LATMESH_MERGE_BATCHES")
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(if smoke { 100 } else { 4_000 });
    let load_start = loadavg();
    let t_gen = Instant::now();
    let templates = templates();
    let gen_secs = t_gen.elapsed().as_secs_f64();
    let hist_bytes: usize = templates
        .iter()
        .flat_map(|t| t.histograms.iter().map(|h| h.hist_v2.len()))
        .sum::<usize>()
        / (TEMPLATES * PROVIDERS.len() * METRICS.len());
    let buckets: usize = templates
        .iter()
        .flat_map(|t| t.histograms.iter())
        .map(|h| {
            wire::histogram_from_pb(h)
                .expect("histogram")
                .1
                .iter_recorded()
                .count()
        })
        .sum::<usize>()
        / (TEMPLATES * PROVIDERS.len() * METRICS.len());
    eprintln!("merge: {TEMPLATES} batch templates in {gen_secs:.1} s");
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let m = if only.as_deref().is_none_or(|o| o == "merges") {
        merges(&templates, n)
    } else {
        Vec::new()
    };
    if only.as_deref() == Some("merges") {
        return;
    }
    let a1 = acks(&templates, n, 1);
    eprintln!(
        "merge: State::batch, 1 thread: {:.0} batches/s",
        a1.batches as f64 / a1.secs
    );
    let a2 = acks(&templates, n, 2);
    eprintln!(
        "merge: State::batch, 2 threads: {:.0} batches/s",
        a2.batches as f64 / a2.secs
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Measured on {} vCPU; load average at start: {load_start}, at end: {}. Command: `cargo bench -p latmesh-coordinator --bench merge -- --load{}`{}.\n",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        loadavg(),
        if smoke { " --smoke" } else { "" },
        if smoke { " (smoke sizes)" } else { "" }
    );
    let _ = writeln!(
        s,
        "Workload: {AGENTS} agents in {} regions connected to one `State`, one campaign launched to all of them; {} batches round-robin over the agents, each 100 records (~95 % ok) + 20 interval histograms (4 providers × 5 metrics; ITL of every token gap; on average {hist_bytes} B of `hist_v2`, {buckets} non-empty buckets), from {TEMPLATES} generated batch contents. In-process: no gRPC, no batch log, no sink.\n",
        REGIONS.len(),
        n
    );
    let _ = writeln!(
        s,
        "| path | histograms | seconds | histograms/s | µs per histogram |"
    );
    let _ = writeln!(s, "| :--- | ---: | ---: | ---: | ---: |");
    for r in &m {
        let _ = writeln!(
            s,
            "| {} | {} | {:.2} | {:.0} | {:.2} |",
            r.what,
            r.histograms,
            r.secs,
            r.histograms as f64 / r.secs,
            r.secs * 1e6 / r.histograms as f64
        );
    }
    let _ = writeln!(
        s,
        "\n| `State::batch` (decode + check + merge + progress) | batches | seconds | batches/s | records/s | histograms/s | per batch P50 / P99 / max (µs) |"
    );
    let _ = writeln!(s, "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for a in [&a1, &a2] {
        let bps = a.batches as f64 / a.secs;
        let _ = writeln!(
            s,
            "| {} thread{} ({} agents each) | {} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} |",
            a.threads,
            if a.threads == 1 { "" } else { "s" },
            AGENTS / a.threads,
            a.batches,
            a.secs,
            bps,
            bps * RECORDS_PER_BATCH as f64,
            bps * (PROVIDERS.len() * METRICS.len()) as f64,
            a.p50,
            a.p99,
            a.max
        );
    }
    let best = (a1.batches as f64 / a1.secs).max(a2.batches as f64 / a2.secs);
    let _ = writeln!(
        s,
        "\nFor scale: 50 agents flushing once a second send 50 batches/s; 50 agents each at 2,000 requests/s (the open-loop target) send 100,000 records/s, 1,000 batches/s of 100 records. Measured headroom over the latter: {:.1}×.",
        best / 1000.0
    );
    println!("{SECTION}\n\n{s}");
    if write {
        match write_markdown(&s) {
            Ok(p) => eprintln!("merge: wrote {}", p.display()),
            Err(e) => {
                eprintln!("merge: cannot write BENCHMARKS.md: {e}");
                std::process::exit(1);
            }
        }
    }
}

const SECTION: &str = "## Load: coordinator (merging, acking)";
const BEGIN: &str = "<!-- merge:begin: written by `cargo bench -p latmesh-coordinator --bench merge -- --load --write`; edit outside these markers -->";
const END: &str = "<!-- merge:end -->";

fn write_markdown(body: &str) -> std::io::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("coordinator/ has a parent")
        .join("BENCHMARKS.md");
    let old = match std::fs::read_to_string(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "# Benchmarks\n\nMeasured numbers of latmesh's benchmarks, one section per benchmark.\n"
                .into()
        }
        Err(e) => return Err(e),
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
    std::fs::write(&path, new)?;
    Ok(path)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |a: &str| args.iter().any(|x| x == a);
    let smoke = has("--smoke");
    if has("--load") || smoke {
        load_main(smoke, has("--write"));
        return;
    }
    let templates = templates();
    let mut c = Criterion::default().configure_from_args();
    criterion_rows(&mut c, &templates[0]);
    criterion_merge(&mut c, &templates);
    c.final_summary();
}
