//! Long contexts over real loopback sockets: generated prompts billed by words (and the
//! profile's tokenizer and template), the context limit's HTTP 400 in each API's shape,
//! `ignore_eos` / `min_tokens`, TTFT growing with the prompt as [`crate::slo_truth`] says,
//! and the lab provider's serving slots.

use latmesh_core::synth::{RequestKey, SynthPrompt, SynthSpec};
use serde_json::{Value, json};

use super::{Raw, raw_request, start};
use crate::slo_truth;
use crate::tokens::generated_prompt_tokens;
use crate::{PLANNED_TTFT_HEADER, PROBE_ID_HEADER, ProviderProfile, SimConfig, TruthLog};

/// One request's generated message of `words` words (as an agent builds it).
fn generated(words: u32) -> String {
    let spec = SynthSpec {
        group: "ctx".into(),
        input_tokens: words,
        shared_prefix_tokens: 0,
        reuse_text: false,
    };
    SynthPrompt::build(11, &spec).text(RequestKey {
        region: "us-east",
        round: 0,
        step: 0,
        slot: 0,
    })
}

fn profile(name: &str) -> ProviderProfile {
    crate::all_builtin_profiles()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

/// `text` as the only user message of `api`'s body, with output cap `cap` and `extra` fields.
fn body(api: &str, text: &str, cap: u32, stream: bool, extra: &Value) -> String {
    let mut b = match api {
        "chat" => json!({"model": "m", "messages": [{"role": "user", "content": text}],
            "max_tokens": cap, "stream": stream,
            "stream_options": {"include_usage": true}}),
        "anthropic" => json!({"model": "m", "messages": [{"role": "user", "content": text}],
            "max_tokens": cap, "stream": stream}),
        _ => json!({"model": "m", "input": text, "max_output_tokens": cap, "stream": stream}),
    };
    if let (Some(b), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    b.to_string()
}

fn path(provider: &str, api: &str) -> String {
    let route = match api {
        "chat" => "chat/completions",
        "anthropic" => "messages",
        _ => "responses",
    };
    format!("/{provider}/v1/{route}")
}

async fn send(addr: std::net::SocketAddr, provider: &str, api: &str, body: &str) -> Raw {
    raw_request(addr, "POST", &path(provider, api), &[], body).await
}

fn json_body(r: &Raw) -> Value {
    serde_json::from_slice(&r.body()).unwrap()
}

/// `(prompt tokens, output tokens)` of a non-streamed answer's usage.
fn usage(api: &str, v: &Value) -> (u64, u64) {
    let u = &v["usage"];
    let (i, o) = match api {
        "chat" => (&u["prompt_tokens"], &u["completion_tokens"]),
        _ => (&u["input_tokens"], &u["output_tokens"]),
    };
    (i.as_u64().unwrap(), o.as_u64().unwrap())
}

const APIS: [&str; 3] = ["chat", "anthropic", "responses"];

fn fast() -> SimConfig {
    SimConfig {
        time_scale: 0.002,
        ..SimConfig::default()
    }
}

#[tokio::test]
async fn generated_prompts_are_billed_by_words_times_the_tokenizer_plus_the_template() {
    let addr = start(fast()).await;
    let text = generated(1000);
    // (provider, billed): one token per word; + 7 template tokens; 1.2 per word + 7;
    // 1.25 per word + 7.
    for (name, want) in [
        ("long-ctx", 1000),
        ("fast-lane", 1007),
        ("bulk-chunk", 1207),
        ("short-ctx", 1257),
    ] {
        assert_eq!(
            u64::from(generated_prompt_tokens(&profile(name), 1000)),
            want
        );
        for api in APIS {
            let r = send(addr, name, api, &body(api, &text, 4, false, &json!({}))).await;
            assert_eq!(r.status, 200, "{name} {api}: {}", r.body_text());
            assert_eq!(usage(api, &json_body(&r)), (want, 4), "{name} {api}");
        }
    }
    // Other text keeps its 4 characters per token (plus the template).
    let r = send(
        addr,
        "short-ctx",
        "chat",
        &body("chat", "Compare the latency.", 4, false, &json!({})),
    )
    .await;
    assert_eq!(usage("chat", &json_body(&r)).0, 5 + 7);
}

#[tokio::test]
async fn a_prompt_past_the_context_is_refused_with_each_api_s_error_before_service() {
    let addr = start(fast()).await;
    let long = generated(32_000);
    // short-ctx bills 1.25 × 32,000 + 7 = 40,007 tokens > 16,384.
    let chat = send(
        addr,
        "short-ctx",
        "chat",
        &body("chat", &long, 256, true, &json!({})),
    )
    .await;
    assert_eq!(chat.status, 400);
    assert_eq!(
        json_body(&chat),
        json!({"error": {
            "message": "This model's maximum context length is 16384 tokens. However, you requested 40263 tokens (40007 in the messages, 256 in the completion). Please reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }})
    );
    let anthropic = send(
        addr,
        "short-ctx",
        "anthropic",
        &body("anthropic", &long, 256, true, &json!({})),
    )
    .await;
    assert_eq!(anthropic.status, 400);
    assert_eq!(
        json_body(&anthropic),
        json!({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 40007 tokens > 16384 maximum",
        }})
    );
    let responses = send(
        addr,
        "short-ctx",
        "responses",
        &body("responses", &long, 256, false, &json!({})),
    )
    .await;
    assert_eq!(responses.status, 400);
    let e = &json_body(&responses)["error"];
    assert_eq!(
        (&e["code"], &e["param"], &e["type"]),
        (
            &json!("context_length_exceeded"),
            &json!("input"),
            &json!("invalid_request_error")
        )
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("40007 input tokens + 256")
    );
    // The prompt fits but not with the cap: 8,000 words bill 10,007; + 6,378 > 16,384.
    let mid = generated(8000);
    let r = send(
        addr,
        "short-ctx",
        "anthropic",
        &body("anthropic", &mid, 6378, false, &json!({})),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        json_body(&r)["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(
                "input length and `max_tokens` exceed context limit: 10007 + 6378 > 16384"
            )
    );
    // Refusals were not served: the first request served is the provider's request 0.
    let ok = send(
        addr,
        "short-ctx",
        "chat",
        &body("chat", &mid, 6377, false, &json!({})),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.body_text());
    assert_eq!(ok.header_u64(crate::provider::REQUEST_INDEX_HEADER), 0);
    // long-ctx (131,072) serves 32k words.
    let r = send(
        addr,
        "long-ctx",
        "chat",
        &body("chat", &long, 8, false, &json!({})),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(usage("chat", &json_body(&r)), (32_000, 8));
}

#[tokio::test]
async fn ignore_eos_runs_to_the_cap_and_min_tokens_lengthens_the_answer() {
    let addr = start(fast()).await;
    let text = generated(64);
    // fast-lane's natural answers are 32..=480 tokens: a cap of 600 is never reached
    // without ignore_eos.
    for api in APIS {
        let plain = send(
            addr,
            "fast-lane",
            api,
            &body(api, &text, 600, false, &json!({})),
        )
        .await;
        let natural = usage(api, &json_body(&plain)).1;
        assert!((32..=480).contains(&natural), "{api}: {natural}");
        let exact = json!({"ignore_eos": true});
        let r = send(
            addr,
            "fast-lane",
            api,
            &body(api, &text, 600, false, &exact),
        )
        .await;
        let v = json_body(&r);
        assert_eq!(usage(api, &v).1, 600, "{api}");
        let finish = match api {
            "chat" => v["choices"][0]["finish_reason"].clone(),
            "anthropic" => v["stop_reason"].clone(),
            _ => v["incomplete_details"]["reason"].clone(),
        };
        let want = match api {
            "chat" => "length",
            "anthropic" => "max_tokens",
            _ => "max_output_tokens",
        };
        assert_eq!(finish, want, "{api}");
        // Streamed: 600 content chunks (one token each), the planned count in the header.
        let r = send(addr, "fast-lane", api, &body(api, &text, 600, true, &exact)).await;
        assert_eq!(r.header_u64(crate::provider::PLANNED_TOKENS_HEADER), 600);
        // min_tokens: at least 500 (natural ≤ 480), ended naturally.
        let r = send(
            addr,
            "fast-lane",
            api,
            &body(api, &text, 600, false, &json!({"min_tokens": 500})),
        )
        .await;
        assert_eq!(usage(api, &json_body(&r)).1, 500, "{api}");
        // More than the cap: refused, naming the field.
        let r = send(
            addr,
            "fast-lane",
            api,
            &body(api, &text, 100, false, &json!({"min_tokens": 101})),
        )
        .await;
        assert_eq!(r.status, 400);
        assert!(r.body_text().contains("min_tokens"), "{}", r.body_text());
    }
}

#[tokio::test]
async fn long_context_ttft_grows_as_the_truth_says() {
    let scale = 0.1;
    let truth = TruthLog::new(100);
    let addr = start(SimConfig {
        time_scale: scale,
        truth: truth.clone(),
        ..SimConfig::default()
    })
    .await;
    let p = profile("long-ctx");
    for words in [1000, 8000, 32_000] {
        let id = format!("ctx-{words}");
        let r = raw_request(
            addr,
            "POST",
            &path("long-ctx", "chat"),
            &[(PROBE_ID_HEADER, id.as_str())],
            &body("chat", &generated(words), 8, true, &json!({})),
        )
        .await;
        assert_eq!(r.status, 200);
        // The plan is the truth, exactly (no jitter): 15 ms, 50 ms, 170 ms.
        let want = slo_truth::ttft_us(&p, generated_prompt_tokens(&p, words), scale);
        assert_eq!(want, (100_000 + 50 * u64::from(words)) / 10);
        assert_eq!(r.header_u64(PLANNED_TTFT_HEADER), want, "{words}");
        // The server's own stamps: not before the plan, and (generously) not long after.
        let t = truth.get(&id).unwrap();
        let ttft = t.ttft().unwrap().as_micros() as u64;
        assert!(
            ttft >= want && ttft < want + 1_000_000,
            "{words}: {ttft} µs vs {want}"
        );
        let ttst = t.ttst().unwrap().as_micros() as u64;
        let want_ttst = slo_truth::ttst_us(&p, generated_prompt_tokens(&p, words), scale);
        assert_eq!(
            r.header_u64(crate::PLANNED_TTST_HEADER),
            want_ttst,
            "{words}"
        );
        assert!(
            ttst >= want_ttst && ttst >= ttft,
            "{words}: {ttst} µs vs {want_ttst}"
        );
        assert_eq!(t.report().server_ttst_us, Some(ttst));
    }
}

#[tokio::test]
async fn the_slo_lab_holds_a_slot_for_the_truth_s_service_time() {
    // 3 slots, S = 500 ms for 41 output tokens: four requests at once, the fourth waits for
    // the first slot to free, about S after the first three started.
    let p = profile("slo-lab");
    let s = slo_truth::service_us(&p, 64, 41, 1.0);
    assert_eq!(s, 500_000);
    let addr = start(SimConfig::default()).await;
    let text = generated(64);
    let b = body("chat", &text, 41, true, &json!({}));
    let rs = futures::future::join_all((0..4).map(|_| send(addr, "slo-lab", "chat", &b))).await;
    let mut waits: Vec<u64> = rs
        .iter()
        .map(|r| r.header_u64(crate::QUEUE_WAIT_HEADER))
        .collect();
    waits.sort_unstable();
    assert_eq!(&waits[..3], &[0, 0, 0]);
    // Less than S by however much later the fourth arrived (loopback: well under 375 ms),
    // more by however late the first slot was freed (a busy machine's timers: well under
    // 500 ms).
    assert!(waits[3] > s / 4 && waits[3] <= s + 500_000, "{waits:?}");
    for r in &rs {
        assert_eq!(r.header_u64(crate::provider::PLANNED_TOKENS_HEADER), 41);
    }
}

/// `n` requests of 41 output tokens to `slo-lab` at a constant `rps` (each sent at its
/// time, whatever the others do): their waits for a serving slot, µs, in order of sending.
async fn constant_rate_waits(rps: f64, n: u32) -> Vec<u64> {
    let addr = start(SimConfig::default()).await;
    let b = body("chat", &generated(64), 41, true, &json!({}));
    let t0 = tokio::time::Instant::now();
    let sends = (0..n).map(|k| {
        let b = b.clone();
        async move {
            tokio::time::sleep_until(t0 + std::time::Duration::from_secs_f64(f64::from(k) / rps))
                .await;
            send(addr, "slo-lab", "chat", &b)
                .await
                .header_u64(crate::QUEUE_WAIT_HEADER)
        }
    });
    futures::future::join_all(sends).await
}

#[tokio::test]
async fn the_slo_lab_queues_only_above_the_truth_s_rate() {
    let p = profile("slo-lab");
    let w = slo_truth::Workload {
        prompt_tokens: generated_prompt_tokens(&p, 64),
        output_tokens: 41,
        region_delay_us: 0,
        time_scale: 1.0,
    };
    assert_eq!(slo_truth::capacity_rps(&p, 64, 41, 1.0), Some(6.0));
    // A third of the rate: at most one in service at once (a request would have to last
    // three times its 500 ms for a fourth to need a slot): nobody waits. Twice the rate: each
    // request waits ~83 ms more than the one before; the truth says the 24th waits ~1.75 s.
    let loose = latmesh_core::slo::Slo {
        ttft_ms: Some(300.0),
        tpot_ms: None,
        e2e_ms: None,
        percentiles: vec![],
        goodput_pct: 90.0,
    };
    let (_, truth_longest) = slo_truth::step_met_share(&loose, &p, &w, 12.0, 2_000);
    assert!(truth_longest > 1_500_000, "{truth_longest}");
    let (below, above) = tokio::join!(constant_rate_waits(2.0, 6), constant_rate_waits(12.0, 24));
    assert!(below.iter().all(|w| *w == 0), "{below:?}");
    let longest = *above.iter().max().unwrap();
    assert!(longest > 1_000_000, "{above:?}");
}
