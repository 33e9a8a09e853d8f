//! Criterion benchmarks of the probe engine's per-byte and per-chunk work: SSE parsing
//! ([`SseParser`]) and chunk decoding ([`chunk::decode_cached`], then [`chunk::decode`] for
//! what the fast path leaves), as `Measurement` does for every body read (agent/src/probe/
//! measure/body.rs and chat.rs: `feed`, `next_event` until `None`, then `on_data` per payload).
//!
//! ```sh
//! cargo bench --bench hot_paths                 # this one and core's (histograms, batches)
//! cargo bench -p latmesh-agent --bench hot_paths -- sse_stream   # a filter, as usual
//! ```
//!
//! Streams (generated, deterministic; what real providers send):
//! * `openai`: role chunk, 256 content chunks (`"logprobs":null,"finish_reason":null`,
//!   `system_fingerprint`), a finish chunk, a usage chunk, `[DONE]`; about 1 in 12 tokens
//!   has a JSON escape (`\n`, `\"`, `\u00e9`);
//! * `openai-obfuscation`: the same with OpenAI's per-chunk random `obfuscation` field, which
//!   defeats the template cache (every chunk takes `decode_lite`);
//! * `deepseek-reasoning`: 128 `reasoning_content` chunks then 128 content chunks.
//!
//! Each stream is fed whole (one read), in 4 KiB reads, 7-byte reads and 1-byte reads (the
//! split reads a slow or chunking server produces). A fresh parser and template cache per
//! stream iteration, as per probe. Groups report bytes/s (`sse_stream_bytes`) and token
//! chunks/s (`sse_stream_chunks`), plus the two halves alone (`sse_parse_only`,
//! `chunk_decode`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use latmesh_agent::probe::chunk::{self, LiteCache};
use latmesh_agent::probe::sse::{SseEvent, SseParser};

/// Tokens the generator cycles through (word pieces as tokenizers cut them).
const TOKENS: &[&str] = &[
    " The",
    " latency",
    " of",
    " a",
    " streamed",
    " answer",
    " depends",
    " on",
    " the",
    " provider",
    "'s",
    " queue",
    ",",
    " its",
    " prefill",
    " and",
    " the",
    " network",
    ".",
    "\\n",
    " Time",
    " to",
    " first",
    " token",
    " is",
    " measured",
    " from",
    " send",
    ";",
    " inter",
    "-token",
    " gaps",
    " follow",
    " café",
    " résumé",
    " \\\"quoted\\\"",
    " \\u00e9t\\u00e9",
    " 42",
    "%",
    " of",
    " requests",
    " finish",
    " under",
    " 1",
    " s",
    " naïve",
    " 東京",
    " 🙂",
];

/// Token chunks in a stream.
const CHUNKS: usize = 256;

/// A generated stream and how many token-bearing chunks it has.
struct Stream {
    name: &'static str,
    body: Vec<u8>,
    token_chunks: u64,
}

/// SplitMix64: deterministic filler for the obfuscation strings.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn obfuscation(i: usize) -> String {
    const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let r = mix(i as u64);
    let len = 3 + (r % 12) as usize;
    (0..len)
        .map(|k| ALPHA[(mix(r ^ k as u64) % ALPHA.len() as u64) as usize] as char)
        .collect()
}

fn openai_stream(obfuscate: bool) -> Stream {
    let head = r#"{"id":"chatcmpl-BvLq7XkQ2m9sYc4N1rTgHd0aWzPf","object":"chat.completion.chunk","created":1764436912,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":"#;
    let mut out = String::new();
    let extra = |i: usize| {
        if obfuscate {
            format!(",\"obfuscation\":\"{}\"", obfuscation(i))
        } else {
            String::new()
        }
    };
    out.push_str(&format!(
        "data: {head}{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null,\"annotations\":[]}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null{}}}\n\n",
        extra(0)
    ));
    for i in 0..CHUNKS {
        let tok = TOKENS[i % TOKENS.len()];
        out.push_str(&format!(
            "data: {head}{{\"content\":\"{tok}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null{}}}\n\n",
            extra(i + 1)
        ));
    }
    out.push_str(&format!(
        "data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":null{}}}\n\n",
        extra(CHUNKS + 1)
    ));
    out.push_str(r#"data: {"id":"chatcmpl-BvLq7XkQ2m9sYc4N1rTgHd0aWzPf","object":"chat.completion.chunk","created":1764436912,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[],"usage":{"prompt_tokens":38,"completion_tokens":256,"total_tokens":294,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#);
    out.push_str("\n\ndata: [DONE]\n\n");
    Stream {
        name: if obfuscate {
            "openai-obfuscation"
        } else {
            "openai"
        },
        body: out.into_bytes(),
        token_chunks: CHUNKS as u64,
    }
}

fn deepseek_stream() -> Stream {
    let head = r#"{"id":"5f0c1a52-8d3e-4b7a-9c1f-2e6d8b4a7c90","object":"chat.completion.chunk","created":1764436912,"model":"deepseek-reasoner","system_fingerprint":"fp_a1b2c3d4e5_prod0820_fp8_kvcache","choices":[{"index":0,"delta":"#;
    let mut out = String::new();
    out.push_str(&format!(
        "data: {head}{{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    ));
    for i in 0..CHUNKS {
        let tok = TOKENS[i % TOKENS.len()];
        let delta = if i < CHUNKS / 2 {
            format!("{{\"content\":null,\"reasoning_content\":\"{tok}\"}}")
        } else {
            format!("{{\"content\":\"{tok}\",\"reasoning_content\":null}}")
        };
        out.push_str(&format!(
            "data: {head}{delta},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    out.push_str(&format!(
        "data: {head}{{\"content\":\"\",\"reasoning_content\":null}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":21,\"completion_tokens\":256,\"total_tokens\":277,\"prompt_tokens_details\":{{\"cached_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":128}},\"prompt_cache_hit_tokens\":0,\"prompt_cache_miss_tokens\":21}}}}\n\n"
    ));
    out.push_str("data: [DONE]\n\n");
    Stream {
        name: "deepseek-reasoning",
        body: out.into_bytes(),
        token_chunks: CHUNKS as u64,
    }
}

fn streams() -> Vec<Stream> {
    vec![openai_stream(false), openai_stream(true), deepseek_stream()]
}

/// What one stream decoded to (returned so nothing is optimized away, and checked once).
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    payloads: u64,
    token_chunks: u64,
    text_bytes: u64,
    finish: u64,
    done: bool,
}

/// Parses and decodes `body` fed in reads of `read` bytes, as `Measurement` does: SSE
/// events out of every read, then per data payload the template/lite decoder and the full
/// decoder for what it leaves.
fn parse_and_decode(body: &[u8], read: usize) -> Tally {
    let mut parser = SseParser::default();
    let mut cache = LiteCache::default();
    let mut t = Tally::default();
    let mut on_data = |data: &[u8], t: &mut Tally| {
        if data.is_empty() {
            return;
        }
        if data == b"[DONE]" {
            t.done = true;
            return;
        }
        t.payloads += 1;
        if let Some(l) = chunk::decode_cached(data, &mut cache) {
            let n = l.content.len() + l.reasoning.len();
            t.text_bytes += n as u64;
            t.token_chunks += u64::from(n > 0);
            t.finish += u64::from(l.finish_reason.is_some());
            return;
        }
        if let Ok(c) = chunk::decode(data) {
            let n = c
                .delta()
                .map_or(0, |d| d.content().len() + d.reasoning().len());
            t.text_bytes += n as u64;
            t.token_chunks += u64::from(n > 0);
            t.finish += u64::from(c.finish_reason().is_some());
            black_box(c.usage());
        }
    };
    let mut drain = |parser: &mut SseParser, t: &mut Tally| {
        while let Ok(Some(ev)) = parser.next_event() {
            if let SseEvent::Data { data, .. } = ev {
                on_data(data, t);
            }
        }
    };
    for piece in body.chunks(read) {
        parser.feed(piece);
        drain(&mut parser, &mut t);
    }
    parser.finish();
    drain(&mut parser, &mut t);
    t
}

/// The SSE parser alone: events counted, payloads not decoded.
fn parse_only(body: &[u8], read: usize) -> u64 {
    let mut parser = SseParser::default();
    let mut events = 0u64;
    for piece in body.chunks(read) {
        parser.feed(piece);
        while let Ok(Some(ev)) = parser.next_event() {
            if let SseEvent::Data { data, .. } = ev {
                black_box(data);
                events += 1;
            }
        }
    }
    parser.finish();
    while let Ok(Some(_)) = parser.next_event() {
        events += 1;
    }
    events
}

/// The read sizes: the whole body in one read, 4 KiB, 7 bytes, 1 byte.
fn reads(len: usize) -> [(String, usize); 4] {
    [
        ("whole".to_string(), len),
        ("4KiB".to_string(), 4096),
        ("7B".to_string(), 7),
        ("1B".to_string(), 1),
    ]
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

fn sse_stream(c: &mut Criterion) {
    let streams = streams();
    // Sanity: every read size decodes every stream the same way, all tokens found.
    for s in &streams {
        let whole = parse_and_decode(&s.body, s.body.len());
        assert_eq!(whole.token_chunks, s.token_chunks, "{}", s.name);
        assert!(whole.done && whole.finish == 1, "{}: {whole:?}", s.name);
        for (_, r) in reads(s.body.len()) {
            assert_eq!(parse_and_decode(&s.body, r), whole, "{} read {r}", s.name);
        }
    }
    {
        let mut g = configure(c, "sse_stream_bytes");
        for s in &streams {
            g.throughput(Throughput::Bytes(s.body.len() as u64));
            for (label, r) in reads(s.body.len()) {
                g.bench_with_input(BenchmarkId::new(s.name, label), &r, |b, &r| {
                    b.iter(|| parse_and_decode(black_box(&s.body), r));
                });
            }
        }
        g.finish();
    }
    {
        let mut g = configure(c, "sse_stream_chunks");
        for s in &streams {
            g.throughput(Throughput::Elements(s.token_chunks));
            for (label, r) in reads(s.body.len()).into_iter().take(2) {
                g.bench_with_input(BenchmarkId::new(s.name, label), &r, |b, &r| {
                    b.iter(|| parse_and_decode(black_box(&s.body), r));
                });
            }
        }
        g.finish();
    }
    {
        let mut g = configure(c, "sse_parse_only");
        let s = &streams[0];
        g.throughput(Throughput::Bytes(s.body.len() as u64));
        for (label, r) in reads(s.body.len()) {
            g.bench_with_input(BenchmarkId::new(s.name, label), &r, |b, &r| {
                b.iter(|| parse_only(black_box(&s.body), r));
            });
        }
        g.finish();
    }
}

/// One payload of each kind through each decoder (elements = payloads).
fn chunk_decode(c: &mut Criterion) {
    let s = openai_stream(false);
    let text = String::from_utf8(s.body.clone()).expect("utf-8");
    let payloads: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    // Two consecutive plain content chunks (the template hit), and an obfuscated one.
    let (a, b) = (payloads[2], payloads[3]);
    let obf = openai_stream(true);
    let obf_text = String::from_utf8(obf.body).expect("utf-8");
    let o = obf_text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .nth(2)
        .expect("payload")
        .to_string();
    let mut g = configure(c, "chunk_decode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_cached/template_hit", |bench| {
        let mut cache = LiteCache::default();
        black_box(chunk::decode_cached(a.as_bytes(), &mut cache));
        bench.iter(|| {
            chunk::decode_cached(black_box(b.as_bytes()), &mut cache).map(|l| l.content.len())
        });
    });
    g.bench_function("decode_lite/plain", |bench| {
        let mut scratch = String::new();
        bench.iter(|| {
            chunk::decode_lite(black_box(b.as_bytes()), &mut scratch).map(|l| l.content.len())
        });
    });
    g.bench_function("decode_lite/obfuscation", |bench| {
        let mut scratch = String::new();
        bench.iter(|| {
            chunk::decode_lite(black_box(o.as_bytes()), &mut scratch).map(|l| l.content.len())
        });
    });
    g.bench_function("decode_full/plain", |bench| {
        bench.iter(|| {
            chunk::decode(black_box(b.as_bytes()))
                .ok()
                .map(|c| c.delta().map_or(0, |d| d.content().len()))
        });
    });
    let usage = payloads[payloads.len() - 2];
    g.bench_function("decode_full/usage_chunk", |bench| {
        bench.iter(|| {
            chunk::decode(black_box(usage.as_bytes()))
                .ok()
                .and_then(|c| c.usage())
        });
    });
    g.finish();
}

criterion_group!(benches, sse_stream, chunk_decode);
criterion_main!(benches);
