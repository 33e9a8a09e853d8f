//! The profiles' answer traps over real loopback sockets: the prompt cache, quantized
//! answers, the mid-campaign model swap.

use latmesh_core::api::Api;
use latmesh_core::compat::{
    JSON_PROMPT, PLAIN_PROMPT, STOP_PROMPT, STOP_SEQUENCE, TOOL_PROMPT, cache_prefix,
};
use latmesh_core::quality::{self, prompt_set};
use serde_json::{Value, json};

use super::compat::{APIS, Reply, body, cfg, path, quick};
use super::{raw_request, start};
use crate::provider::PLANNED_TTFT_HEADER;
use crate::{ProviderProfile, SimConfig};

/// `extra` fields putting [`cache_prefix`] in the system prompt on `api`.
fn long_system(api: Api) -> Value {
    match api {
        Api::Chat => json!({"messages": [{"role": "system", "content": cache_prefix()},
            {"role": "user", "content": PLAIN_PROMPT}]}),
        Api::Anthropic => json!({"system": cache_prefix()}),
        Api::Responses => json!({"instructions": cache_prefix()}),
    }
}

#[tokio::test]
async fn a_repeated_long_prefix_is_reported_cached_and_prefilled_faster() {
    let caching = |name: &str| ProviderProfile {
        prompt_cache: true,
        prefill_us_per_input_token: 100,
        ..quick(name)
    };
    let plain = ProviderProfile {
        prefill_us_per_input_token: 100,
        ..quick("plain")
    };
    let addr = start(cfg(vec![
        caching("c-chat"),
        caching("c-anth"),
        caching("c-resp"),
        plain,
    ]))
    .await;
    for (api, name) in APIS.into_iter().zip(["c-chat", "c-anth", "c-resp"]) {
        let b = body(api, PLAIN_PROMPT, true, &long_system(api));
        let send = |provider: &'static str| {
            let b = b.clone();
            async move {
                let raw = raw_request(addr, "POST", &path(api, provider), &[], &b).await;
                (Reply::read(api, &raw), raw.header_u64(PLANNED_TTFT_HEADER))
            }
        };
        let name: &'static str = name;
        let (first, ttft1) = send(name).await;
        let (second, ttft2) = send(name).await;
        let prompt = first.input_tokens;
        assert!(prompt > 1024, "{api:?}: {prompt}");
        assert_eq!(first.cached_tokens, 0, "{api:?}");
        assert_eq!(second.cached_tokens, 1024, "{api:?}");
        assert_eq!(ttft1, 1_000 + 100 * prompt);
        assert_eq!(ttft2, 1_000 + 100 * (prompt - 1024));
        // Anthropic's input_tokens count what was not read from the cache.
        let uncached = if api == Api::Anthropic {
            prompt - 1024
        } else {
            prompt
        };
        assert_eq!(second.input_tokens, uncached);
        // No cache: nothing cached, the same prefill every time.
        let (a, t1) = send("plain").await;
        let (b2, t2) = send("plain").await;
        assert_eq!(
            (a.cached_tokens, b2.cached_tokens, t1, t2),
            (0, 0, ttft1, ttft1)
        );
        // A short prompt is never cached.
        let short = body(api, PLAIN_PROMPT, false, &json!({}));
        for _ in 0..2 {
            let raw = raw_request(addr, "POST", &path(api, name), &[], &short).await;
            assert_eq!(Reply::read(api, &raw).cached_tokens, 0);
        }
    }
}

#[tokio::test]
async fn a_quantized_profile_answers_exactly_the_ground_truths_prompts_wrong_and_shorter() {
    let quantized = ProviderProfile {
        quantized_wrong_share: 0.4,
        quantized_length_factor: 0.5,
        ..quick("quant")
    };
    let want_wrong = crate::truth::wrong_prompt_ids(&quantized);
    assert!(
        !want_wrong.is_empty(),
        "the set has prompts a 0.4 share answers wrong"
    );
    assert!(want_wrong.len() < prompt_set().prompts.len());
    let addr = start(cfg(vec![quick("honest"), quantized])).await;
    for api in APIS {
        for stream in [true, false] {
            let mut wrong = Vec::new();
            for p in &prompt_set().prompts {
                let b = body(api, &p.prompt, stream, &json!({}));
                let read = |provider: &'static str| {
                    let b = b.clone();
                    async move {
                        let raw = raw_request(addr, "POST", &path(api, provider), &[], &b).await;
                        Reply::read(api, &raw)
                    }
                };
                let (h, q) = (read("honest").await, read("quant").await);
                assert!(quality::grade(p, &h.text).correct, "{}", p.id);
                if !quality::grade(p, &q.text).correct {
                    wrong.push(p.id.as_str());
                }
                // Shorter: half the filler words, the same Answer line.
                assert!(
                    q.output_tokens + 4 <= h.output_tokens,
                    "{} {api:?}: {} vs {}",
                    p.id,
                    q.output_tokens,
                    h.output_tokens
                );
            }
            assert_eq!(wrong, want_wrong, "{api:?} stream={stream}");
        }
    }
    // Other prompts keep their length: latency campaigns see no difference.
    let plain = body(Api::Chat, "Tell me about latency.", false, &json!({}));
    let h = raw_request(addr, "POST", &path(Api::Chat, "honest"), &[], &plain).await;
    let q = raw_request(addr, "POST", &path(Api::Chat, "quant"), &[], &plain).await;
    assert_eq!(
        Reply::read(Api::Chat, &h).text,
        Reply::read(Api::Chat, &q).text
    );
}

#[tokio::test]
async fn a_swapper_answers_with_another_model_after_n_requests_from_any_region() {
    let swapper = ProviderProfile {
        system_fingerprint: Some("fp_sim_0a".into()),
        swap_after_requests: 3,
        swap_model: "deepseek-v4-flash-lite".into(),
        swap_fingerprint: "fp_sim_1b".into(),
        ..quick("swapper")
    };
    let addr = start(cfg(vec![swapper])).await;
    let regions = ["us-east", "eu-west", "ap-southeast"];
    for i in 0..7usize {
        let api = APIS[i % 3];
        let b = body(api, PLAIN_PROMPT, i % 2 == 0, &json!({}));
        let hdr = [(crate::REGION_HEADER, regions[i % 3])];
        let raw = raw_request(addr, "POST", &path(api, "swapper"), &hdr, &b).await;
        let r = Reply::read(api, &raw);
        let (model, fp) = if i < 3 {
            ("deepseek-v4-flash", "fp_sim_0a")
        } else {
            ("deepseek-v4-flash-lite", "fp_sim_1b")
        };
        assert!(
            !r.models.is_empty() && r.models.iter().all(|m| m == model),
            "{i}: {r:?}"
        );
        if api == Api::Chat {
            assert!(!r.fingerprints.is_empty() && r.fingerprints.iter().all(|f| f == fp));
        }
    }
}

/// What one built-in profile was seen to do, over loopback, on the Chat Completions API:
/// every behaviour that is not an honest provider's, by name.
async fn observed(addr: std::net::SocketAddr, name: &str) -> Vec<&'static str> {
    let key = format!("Bearer {}", crate::LOCKED_API_KEY);
    let auth = [("authorization", key.as_str())];
    let p = path(Api::Chat, name);
    let send = |user: &str, stream: bool, extra: Value| {
        let b = body(Api::Chat, user, stream, &extra);
        let p = p.clone();
        async move { Reply::read(Api::Chat, &raw_request(addr, "POST", &p, &auth, &b).await) }
    };
    let mut seen = Vec::new();
    let r = send(STOP_PROMPT, false, json!({"stop": STOP_SEQUENCE})).await;
    if r.text != "1 2 3 4 5 6 " {
        seen.push("stop_not_honoured");
    }
    let r = send(
        JSON_PROMPT,
        false,
        json!({"response_format": {"type": "json_object"}}),
    )
    .await;
    match (r.status, serde_json::from_str::<Value>(&r.text)) {
        (400, _) => seen.push("json_rejected"),
        (_, Err(_)) => seen.push("json_ignored"),
        (_, Ok(_)) => {}
    }
    let r = send(TOOL_PROMPT, false, super::compat::tools(Api::Chat)).await;
    match (r.status, &r.tool) {
        (400, _) => seen.push("tools_rejected"),
        (_, None) => seen.push("tools_ignored"),
        _ => {}
    }
    let r = send(PLAIN_PROMPT, true, json!({})).await;
    if r.status == 400 {
        seen.push("stream_options_rejected");
    }
    let r = send(PLAIN_PROMPT, false, json!({"max_tokens": 1})).await;
    if r.models.iter().any(|m| m != "deepseek-v4-flash") {
        seen.push("renamed");
    }
    if !r.fingerprints.is_empty() {
        seen.push("fingerprint");
    }
    let history = json!({"messages": [{"role": "user", "content": PLAIN_PROMPT},
        {"role": "assistant", "content": "Hello there, how are you?"},
        {"role": "user", "content": latmesh_core::compat::FOLLOW_UP_PROMPT}], "max_tokens": 1});
    if send(PLAIN_PROMPT, false, history).await.status == 400 {
        seen.push("needs_reasoning_back");
    }
    let long = json!({"messages": [{"role": "system", "content": cache_prefix()},
        {"role": "user", "content": PLAIN_PROMPT}], "max_tokens": 1});
    send(PLAIN_PROMPT, false, long.clone()).await;
    if send(PLAIN_PROMPT, false, long).await.cached_tokens > 0 {
        seen.push("prompt_cache");
    }
    let wrong_key = [("authorization", "Bearer sk-sim-not-the-key-0000000000")];
    let b = body(Api::Chat, PLAIN_PROMPT, false, &json!({"max_tokens": 1}));
    if raw_request(addr, "POST", &p, &wrong_key, &b).await.status == 401 {
        seen.push("key_checked");
    }
    let mut wrong = Vec::new();
    for q in &prompt_set().prompts {
        if !quality::grade(q, &send(&q.prompt, false, json!({})).await.text).correct {
            wrong.push(q.id.as_str());
        }
    }
    if !wrong.is_empty() {
        let profile = crate::all_builtin_profiles()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        assert_eq!(wrong, crate::truth::wrong_prompt_ids(&profile), "{name}");
        seen.push("quantized");
    }
    // Up to the 60th request: does the model change?
    let mut swapped = false;
    for _ in 0..60 {
        let r = send(PLAIN_PROMPT, false, json!({"max_tokens": 1})).await;
        swapped |= r.models.iter().any(|m| m != "deepseek-v4-flash");
    }
    if swapped && !seen.contains(&"renamed") {
        seen.push("swapped");
    }
    seen
}

#[tokio::test]
async fn every_built_in_profile_shows_exactly_its_documented_traps() {
    // Faults and queues off (latency behaviour, not compatibility), 200 times faster.
    let profiles = crate::all_builtin_profiles()
        .into_iter()
        .map(|p| ProviderProfile {
            throttle_prob: 0.0,
            truncate_prob: 0.0,
            stall_prob: 0.0,
            ttft_tail_prob: 0.0,
            capacity: 0,
            ..p
        })
        .collect();
    let addr = start(SimConfig {
        time_scale: 0.005,
        ..cfg(profiles)
    })
    .await;
    let want: &[(&str, &[&str])] = &[
        ("fast-lane", &["fingerprint", "prompt_cache"]),
        ("steady", &[]),
        ("budget", &["quantized"]),
        ("reasoner", &["needs_reasoning_back"]),
        ("throttler", &[]),
        ("flaky", &[]),
        ("keepalive", &["tools_rejected"]),
        ("bulk-chunk", &["json_ignored"]),
        ("slow-prefill", &[]),
        ("no-json", &["json_rejected"]),
        ("strict-gateway", &["stream_options_rejected"]),
        ("thinker", &["needs_reasoning_back"]),
        ("renamer", &["renamed"]),
        ("quantized", &["quantized"]),
        ("swapper", &["fingerprint", "swapped"]),
        ("locked", &["key_checked"]),
        ("slo-lab", &[]),
        ("long-ctx", &[]),
        ("short-ctx", &[]),
    ];
    assert_eq!(want.len(), crate::all_builtin_profiles().len());
    let seen = futures::future::join_all(want.iter().map(|(name, _)| observed(addr, name))).await;
    let all = crate::all_builtin_profiles();
    for ((name, want), seen) in want.iter().zip(seen) {
        assert_eq!(seen, *want, "{name}");
        // The verdicts the ground truth promises say the same.
        let p = all.iter().find(|p| p.name == *name).unwrap();
        assert_eq!(promised(p), seen, "{name}");
    }
}

/// What [`crate::compat_truth`] (and the quantized and swap ground truth) promise
/// [`observed`] sees on `p`.
fn promised(p: &ProviderProfile) -> Vec<&'static str> {
    use latmesh_core::compat::{CompatCheck as C, Verdict as V};
    let v = |c| crate::compat_truth::expected_verdict(p, Api::Chat, "deepseek-v4-flash", c);
    let mut out = Vec::new();
    let rules = [
        (C::Stop, V::Fail, "stop_not_honoured"),
        (C::Stop, V::NotOffered, "stop_not_honoured"),
        (C::JsonMode, V::NotOffered, "json_rejected"),
        (C::JsonMode, V::Fail, "json_ignored"),
        (C::ToolCall, V::NotOffered, "tools_rejected"),
        (C::ToolCall, V::Fail, "tools_ignored"),
        (C::StreamUsage, V::Fail, "stream_options_rejected"),
        (C::ModelName, V::Fail, "renamed"),
        (C::SystemFingerprint, V::Pass, "fingerprint"),
        (C::ReasoningHistory, V::Fail, "needs_reasoning_back"),
        (C::PromptCache, V::Pass, "prompt_cache"),
        (C::WrongKey, V::Pass, "key_checked"),
    ];
    for (check, verdict, name) in rules {
        if v(check) == verdict {
            out.push(name);
        }
    }
    if !crate::truth::wrong_prompt_ids(p).is_empty() {
        out.push("quantized");
    }
    if (1..60).contains(&p.swap_after_requests) {
        out.push("swapped");
    }
    out
}
