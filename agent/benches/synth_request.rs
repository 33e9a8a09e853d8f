//! Criterion benchmark of what a generated-prompt request costs the agent before it is sent
//! (issue 21: "a 32k-token request does not cost the agent more than its bytes"): one
//! request's text from its tier's prompt built once per run
//! ([`SynthPrompt::text`]), then its JSON body in each API's shape with a provider's
//! `exact_output` fields ([`request::body`]). The tier's one-off build
//! ([`SynthPrompt::build`]) is measured apart. Results in BENCHMARKS.md ("Generated prompts").
//!
//! ```sh
//! cargo bench -p latmesh-agent --bench synth_request
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use latmesh_agent::probe::ProbeRequest;
use latmesh_agent::probe::request;
use latmesh_core::api::{Api, RequestShape};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::shaping::exact_output_fields;
use latmesh_core::synth::{RequestKey, SynthPrompt, SynthSpec};

const TIERS: [u32; 3] = [1_000, 8_000, 32_000];

fn spec(n: u32) -> SynthSpec {
    SynthSpec {
        group: "ctx".into(),
        input_tokens: n,
        shared_prefix_tokens: 0,
        reuse_text: false,
    }
}

fn key(slot: u32) -> RequestKey<'static> {
    RequestKey {
        region: "eu-west",
        round: 0,
        step: 0,
        slot,
    }
}

/// A shape of `api` with vLLM's `exact_output` fields merged (as the runner does).
fn shape(api: Api) -> RequestShape {
    let exact = serde_json::json!({"ignore_eos": true, "min_tokens": "$output_tokens"});
    let mut s = RequestShape {
        api,
        exact_output: exact.as_object().unwrap().clone(),
        ..RequestShape::default()
    };
    let fields = exact_output_fields(&s, 256);
    s.extra_body.extend(fields);
    s
}

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("synth_build_once_per_tier");
    for n in TIERS {
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            b.iter(|| SynthPrompt::build(black_box(42), &spec(n)))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("synth_text_per_request");
    for n in TIERS {
        let p = SynthPrompt::build(42, &spec(n));
        g.throughput(Throughput::Bytes(p.text(key(0)).len() as u64));
        let mut slot = 0u32;
        g.bench_with_input(BenchmarkId::from_parameter(n), &p, |b, p| {
            b.iter(|| {
                slot = slot.wrapping_add(1);
                p.text(key(slot))
            })
        });
    }
    g.finish();

    let timeouts = Timeouts::default();
    let mut g = c.benchmark_group("synth_text_and_body_per_request");
    for api in [Api::Chat, Api::Anthropic, Api::Responses] {
        let shape = shape(api);
        for n in TIERS {
            let p = SynthPrompt::build(42, &spec(n));
            let messages = [Message::new("user", p.text(key(0)))];
            let req = ProbeRequest {
                base_url: "http://127.0.0.1:1/v1",
                model_id: "m",
                api_key: None,
                messages: &messages,
                stream: true,
                max_tokens: 256,
                temperature: None,
                top_p: None,
                timeouts: &timeouts,
                probe_id: None,
                user_agent: None,
                shape: &shape,
                secret_headers: &[],
            };
            let body_len = request::body(&req).len();
            eprintln!(
                "{api:?} {n} tokens: text {} B, body {body_len} B",
                messages[0].content.len()
            );
            g.throughput(Throughput::Bytes(body_len as u64));
            let mut slot = 0u32;
            g.bench_function(BenchmarkId::new(format!("{api:?}"), n), |b| {
                b.iter(|| {
                    slot = slot.wrapping_add(1);
                    let messages = [Message::new("user", p.text(key(slot)))];
                    let req = ProbeRequest {
                        messages: &messages,
                        ..req
                    };
                    request::body(&req)
                })
            });
        }
    }
    g.finish();
}

criterion_group! {
    name = synth;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = benches
}
criterion_main!(synth);
