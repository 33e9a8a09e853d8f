//! Criterion benchmarks of what every agent and the coordinator do per value, per histogram
//! and per batch: HDR histogram recording and merging, the V2 + DEFLATE codec, its dense and
//! sparse (`hist_sparse`) decoding for the coordinator's rows and merge, and the result
//! batch (`pb::ResultBatch` of 100 records + 20 interval histograms, the agent's flush) built,
//! prost-encoded, decoded and converted back.
//!
//! ```sh
//! cargo bench --bench hot_paths                     # this one and the agent's (SSE, chunks)
//! cargo bench -p latmesh-core --bench hot_paths -- hist_v2
//! cargo bench -p latmesh-core --bench hot_paths -- hist_sparse
//! ```
//!
//! Data comes from a seeded generator with realistic shapes: TTFT log-normal around 300 ms,
//! ITL log-normal around 20 ms (σ 0.55) with one value per token gap, E2E, TPOT, TTFB; an
//! ITL histogram of a busy interval holds about 25,000 values in about 3,900 non-empty buckets
//! (`hist_sparse` also decodes one of about 1,000 values in 500 buckets).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer as _, V2Serializer};
use latmesh_core::hist::{self, HistKey, HistogramSet};
use latmesh_core::hist_sparse;
use latmesh_core::metrics::Metric;
use latmesh_core::record::{Outcome, ProbeRecord, Usage};
use latmesh_core::seeded_rng::SeededRng;
use latmesh_core::wire;
use latmesh_proto::pb;
use prost::Message as _;

const PROVIDERS: [&str; 4] = ["fast-lane", "steady", "budget-jitter", "deep-think"];
const METRICS: [Metric; 5] = [
    Metric::Ttfb,
    Metric::Ttft,
    Metric::E2e,
    Metric::Tpot,
    Metric::Itl,
];

fn key(provider: &str, metric: Metric) -> HistKey {
    HistKey {
        provider: provider.to_string(),
        scenario: "chat-short".to_string(),
        metric,
        step: 0,
    }
}

/// One `ok` record with its ITL gaps (µs), as the probe engine produces it.
fn record(rng: &mut SeededRng, i: usize) -> (ProbeRecord, Vec<u64>) {
    let provider = PROVIDERS[i % PROVIDERS.len()];
    let tokens = rng.range(60, 400) as u32;
    let ttfb = (rng.lognormal(180.0, 0.35) * 1000.0) as u64;
    let ttft = ttfb + (rng.lognormal(120.0, 0.5) * 1000.0) as u64;
    let gaps: Vec<u64> = (1..tokens)
        .map(|_| (rng.lognormal(20.0, 0.55) * 1000.0) as u64)
        .collect();
    let e2e = ttft + gaps.iter().sum::<u64>();
    let tpot = (e2e - ttft) / u64::from(tokens - 1);
    let rec = ProbeRecord {
        round: i as u32 / 4,
        slot: i as u32 % 4,
        provider: provider.to_string(),
        scenario: "chat-short".to_string(),
        prompt_id: format!("short-qa-en-{:03}", rng.range(1, 40)),
        attempt: 1,
        stream: true,
        send_agent_unix_us: 1_764_436_912_000_000 + i as i64 * 10_000,
        sched_lag_us: rng.lognormal(300.0, 0.8) as i64,
        outcome: Some(Outcome::Ok),
        http_status: Some(200),
        ttfb_us: Some(ttfb),
        ttft_us: Some(ttft),
        ttfc_us: Some(ttft),
        e2e_us: Some(e2e),
        tpot_us: Some(tpot),
        decode_tps: Some(f64::from(tokens - 1) / ((e2e - ttft) as f64 / 1e6)),
        output_tokens: tokens,
        tokens_from_usage: true,
        content_chunks: tokens,
        usage: Usage {
            prompt_tokens: Some(38),
            completion_tokens: Some(tokens),
            total_tokens: Some(38 + tokens),
            reasoning_tokens: None,
            cached_tokens: Some(0),
        },
        finish_reason: Some("stop".into()),
        saw_done: true,
        itl_max_us: gaps.iter().copied().max(),
        response_bytes: u64::from(tokens) * 160 + 280,
        final_attempt: true,
        turn: 1,
        conn_reused: true,
        token_payloads: tokens,
        ..Default::default()
    };
    (rec, gaps)
}

/// A realistic batch: 100 records and the 20 interval histograms (4 providers × 5 metrics)
/// of the same interval, built from 400 records' worth of values (the interval histograms
/// of a busy agent hold more values than one batch's records).
fn batch(seed: u64) -> pb::ResultBatch {
    let mut rng = SeededRng::new(seed);
    let mut set = HistogramSet::new();
    let mut records = Vec::new();
    for i in 0..400 {
        let (rec, gaps) = record(&mut rng, i);
        set.record_probe(&rec, &gaps);
        if i < 100 {
            records.push(pb::ProbeRecord::from(&rec));
        }
    }
    let histograms = set
        .iter()
        .filter(|(k, _)| METRICS.contains(&k.metric))
        .map(|(k, h)| {
            wire::histogram_to_pb(k, h, 1_764_436_912_000_000, 1_764_436_913_000_000)
                .expect("encode")
        })
        .collect::<Vec<_>>();
    assert_eq!(histograms.len(), 20);
    pb::ResultBatch {
        campaign_id: "bench-3f9a1c2e".into(),
        seq: 42,
        histograms,
        records,
        clock_offset_us: -1_250,
    }
}

/// A busy interval's ITL histogram (about 25,000 gaps).
fn itl_histogram(seed: u64) -> Histogram<u64> {
    let mut rng = SeededRng::new(seed);
    let mut h = hist::new_histogram();
    for _ in 0..25_000 {
        h.record((rng.lognormal(20.0, 0.55) * 1000.0) as u64)
            .expect("in range");
    }
    h
}

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

fn hist_record(c: &mut Criterion) {
    let mut rng = SeededRng::new(1);
    let values: Vec<u64> = (0..10_000)
        .map(|_| (rng.lognormal(20.0, 0.55) * 1000.0) as u64)
        .collect();
    let mut g = configure(c, "hist_record");
    g.throughput(Throughput::Elements(values.len() as u64));
    g.bench_function("Histogram::record", |b| {
        let mut h = hist::new_histogram();
        b.iter(|| {
            for &v in &values {
                h.record(black_box(v)).expect("in range");
            }
        });
    });
    g.bench_function("HistogramSet::record (key clone + lookup)", |b| {
        let mut set = HistogramSet::new();
        let k = key("steady", Metric::Itl);
        b.iter(|| {
            for &v in &values {
                set.record(k.clone(), black_box(v));
            }
        });
    });
    // One record with its gaps: what the agent's collector does per probe.
    let mut rng = SeededRng::new(2);
    let probes: Vec<(ProbeRecord, Vec<u64>)> = (0..100).map(|i| record(&mut rng, i)).collect();
    g.throughput(Throughput::Elements(probes.len() as u64));
    g.bench_function("HistogramSet::record_probe (per record, ~230 gaps)", |b| {
        let mut set = HistogramSet::new();
        b.iter(|| {
            for (rec, gaps) in &probes {
                set.record_probe(black_box(rec), gaps);
            }
        });
    });
    g.finish();
}

fn hist_merge(c: &mut Criterion) {
    let src = itl_histogram(3);
    let mut g = configure(c, "hist_merge");
    g.throughput(Throughput::Elements(1));
    g.bench_function("Histogram::add (ITL, 25k values)", |b| {
        let mut into = itl_histogram(4);
        b.iter(|| into.add(black_box(&src)).expect("same bounds"));
    });
    g.bench_function("HistogramSet::merge (ITL, 25k values)", |b| {
        let mut set = HistogramSet::new();
        let k = key("steady", Metric::Itl);
        b.iter(|| set.merge(k.clone(), black_box(&src)));
    });
    g.bench_function("HistogramSet::merge_set (20 histograms)", |b| {
        let mut rng = SeededRng::new(5);
        let mut other = HistogramSet::new();
        for i in 0..400 {
            let (rec, gaps) = record(&mut rng, i);
            other.record_probe(&rec, &gaps);
        }
        let mut set = HistogramSet::new();
        b.iter(|| set.merge_set(black_box(&other)));
    });
    g.finish();
}

fn hist_v2(c: &mut Criterion) {
    let mut g = configure(c, "hist_v2");
    let mut rng = SeededRng::new(6);
    let ttft: Histogram<u64> = {
        let mut h = hist::new_histogram();
        for _ in 0..100 {
            h.record((rng.lognormal(300.0, 0.5) * 1000.0) as u64)
                .expect("in range");
        }
        h
    };
    for (name, h) in [("ttft-100", ttft), ("itl-25k", itl_histogram(7))] {
        let bytes = hist::encode_v2(&h).expect("encode");
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::new("encode_v2", name), &h, |b, h| {
            b.iter(|| hist::encode_v2(black_box(h)).expect("encode"));
        });
        g.bench_with_input(BenchmarkId::new("decode_v2", name), &bytes, |b, bytes| {
            b.iter(|| hist::decode_v2(black_box(bytes)).expect("decode"));
        });
    }
    g.finish();
}

/// Decoding one agent blob (V2 + DEFLATE) as the coordinator does, densely (inflate into a
/// 188 KB `Histogram`, then scan its 23,552 counters) and sparsely (`hist_sparse`: walk the
/// encoded counts, keep the non-empty buckets): for its ClickHouse row (the buckets) and for
/// its live merge (added into an aggregate that already holds values).
fn hist_sparse(c: &mut Criterion) {
    let mut g = configure(c, "hist_sparse");
    let mut rng = SeededRng::new(10);
    let ttft: Histogram<u64> = {
        let mut h = hist::new_histogram();
        for _ in 0..100 {
            h.record((rng.lognormal(300.0, 0.5) * 1000.0) as u64)
                .expect("in range");
        }
        h
    };
    // ITL gaps until 500 buckets are non-empty (~1,000 values): the size of the coordinator
    // merge bench's interval histograms (441 buckets on average).
    let itl_500: Histogram<u64> = {
        let mut h = hist::new_histogram();
        let mut buckets = 0;
        while buckets < 500 {
            let v = (rng.lognormal(20.0, 0.55) * 1000.0) as u64;
            buckets += usize::from(h.count_at(v) == 0);
            h.record(v).expect("in range");
        }
        h
    };
    for (name, h) in [
        ("ttft-100", ttft),
        ("itl-500b", itl_500),
        ("itl-25k", itl_histogram(7)),
    ] {
        let bytes = hist::encode_v2(&h).expect("encode");
        let mut plain = Vec::new();
        V2Serializer::new()
            .serialize(&h, &mut plain)
            .expect("encode");
        let buckets = h.iter_recorded().count();
        eprintln!(
            "hist_sparse/{name}: {buckets} non-empty buckets, {} B V2 + DEFLATE, {} B plain V2",
            bytes.len(),
            plain.len()
        );
        let id = |what: &str| BenchmarkId::new(what, format!("{name}, {buckets} buckets"));
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(id("dense: decode_v2 + buckets"), &bytes, |b, bytes| {
            b.iter(|| {
                let h = hist::decode_v2(black_box(bytes)).expect("decode");
                let (mut values, mut counts) = (Vec::new(), Vec::new());
                for v in h.iter_recorded() {
                    values.push(h.highest_equivalent(v.value_iterated_to()));
                    counts.push(v.count_at_value());
                }
                (values, counts, h.len())
            });
        });
        g.bench_with_input(id("sparse: decode_v2_sparse"), &bytes, |b, bytes| {
            b.iter(|| hist_sparse::decode_v2_sparse(black_box(bytes)).expect("decode"));
        });
        g.bench_with_input(
            id("sparse: decode_v2_sparse, plain V2"),
            &plain,
            |b, plain| {
                b.iter(|| hist_sparse::decode_v2_sparse(black_box(plain)).expect("decode"));
            },
        );
        let k = key("steady", Metric::Itl);
        g.bench_with_input(id("dense: decode_v2 + merge"), &bytes, |b, bytes| {
            let mut set = HistogramSet::new();
            set.merge(k.clone(), &itl_histogram(11));
            b.iter(|| {
                set.merge(
                    k.clone(),
                    &hist::decode_v2(black_box(bytes)).expect("decode"),
                )
            });
        });
        g.bench_with_input(
            id("sparse: decode_v2_sparse + merge_sparse"),
            &bytes,
            |b, bytes| {
                let mut set = HistogramSet::new();
                set.merge(k.clone(), &itl_histogram(11));
                b.iter(|| {
                    let s = hist_sparse::decode_v2_sparse(black_box(bytes)).expect("decode");
                    set.merge_sparse(k.clone(), &s);
                });
            },
        );
    }
    g.finish();
}

fn batch_codec(c: &mut Criterion) {
    let batch = batch(8);
    let bytes = batch.encode_to_vec();
    let mut g = configure(c, "batch_100r_20h");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("prost encode", |b| {
        let mut buf = Vec::with_capacity(bytes.len());
        b.iter(|| {
            buf.clear();
            black_box(&batch).encode(&mut buf).expect("capacity");
            buf.len()
        });
    });
    g.bench_function("prost decode", |b| {
        b.iter(|| pb::ResultBatch::decode(black_box(&bytes[..])).expect("decode"));
    });
    // The agent side (records → pb, histograms → V2) and the coordinator side
    // (pb → records, V2 → histograms), per batch.
    let mut rng = SeededRng::new(9);
    let mut set = HistogramSet::new();
    let mut recs = Vec::new();
    for i in 0..400 {
        let (rec, gaps) = record(&mut rng, i);
        set.record_probe(&rec, &gaps);
        if i < 100 {
            recs.push(rec);
        }
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("build (100 records to pb + 20 encode_v2)", |b| {
        b.iter(|| {
            let records: Vec<pb::ProbeRecord> = recs.iter().map(pb::ProbeRecord::from).collect();
            let histograms: Vec<pb::IntervalHistogram> = set
                .iter()
                .filter(|(k, _)| METRICS.contains(&k.metric))
                .map(|(k, h)| wire::histogram_to_pb(k, h, 0, 1).expect("encode"))
                .collect();
            (records.len(), histograms.len())
        });
    });
    g.bench_function("convert back (100 TryFrom + 20 histogram_from_pb)", |b| {
        b.iter(|| {
            let records = black_box(&batch)
                .records
                .iter()
                .map(|r| ProbeRecord::try_from(r.clone()).expect("record"))
                .collect::<Vec<_>>();
            let hists = batch
                .histograms
                .iter()
                .map(|h| wire::histogram_from_pb(h).expect("histogram"))
                .collect::<Vec<_>>();
            (records.len(), hists.len())
        });
    });
    g.finish();
    eprintln!(
        "batch_100r_20h: {} bytes encoded ({} of them histogram blobs)",
        bytes.len(),
        batch
            .histograms
            .iter()
            .map(|h| h.hist_v2.len())
            .sum::<usize>()
    );
}

criterion_group!(
    benches,
    hist_record,
    hist_merge,
    hist_v2,
    hist_sparse,
    batch_codec
);
criterion_main!(benches);
