//! The three APIs over real loopback sockets: each stream read by the test's own SSE reader
//! ([`Raw::events`]) and checked event by event against the plan (event order, token counts,
//! usage, terminal events, the cap, errors), and the ground truth of one prompt on each API.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Ev, Raw, raw_request, start};
use crate::request::anthropic::thinking_signature;
use crate::{ProviderProfile, SimConfig};

const SYSTEM: &str = "Be brief.";
const USER: &str = "Compare the latency of nine providers.";

/// The prompt of `super::chat_body` in Anthropic's shape.
fn anthropic_body(stream: bool, max_tokens: u32) -> String {
    json!({
        "model": "deepseek-v4-flash",
        "system": SYSTEM,
        "messages": [{"role": "user", "content": [{"type": "text", "text": USER}]}],
        "stream": stream,
        "max_tokens": max_tokens,
    })
    .to_string()
}

/// The prompt of `super::chat_body` in the Responses shape.
fn responses_body(stream: bool, max_tokens: u32) -> String {
    json!({
        "model": "deepseek-v4-flash",
        "instructions": SYSTEM,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": USER}]}],
        "stream": stream,
        "max_output_tokens": max_tokens,
    })
    .to_string()
}

async fn post(addr: std::net::SocketAddr, path: &str, body: &str, probe: Option<&str>) -> Raw {
    let hdr: Vec<(&str, &str)> = probe
        .map(|p| (crate::PROBE_ID_HEADER, p))
        .into_iter()
        .collect();
    raw_request(addr, "POST", path, &hdr, body).await
}

/// A provider that thinks 3 tokens, then answers 5, at 2 ms TTFT and 1 ms ITL.
fn thinker(name: &str) -> ProviderProfile {
    ProviderProfile {
        reasoning_tokens_min: 3,
        reasoning_tokens_max: 3,
        output_tokens_min: 5,
        output_tokens_max: 5,
        ..ProviderProfile::fixed(name, 2_000, 1_000)
    }
}

fn cfg(profiles: Vec<ProviderProfile>) -> SimConfig {
    SimConfig {
        profiles,
        ..SimConfig::default()
    }
}

/// The event names, each checked against its data's `type`.
fn names(evs: &[Ev]) -> Vec<String> {
    evs.iter()
        .map(|e| {
            let n = e.name.clone().expect("every event is named");
            assert_eq!(e.data["type"], n.as_str(), "{:?}", e.data);
            n
        })
        .collect()
}

fn count(names: &[String], want: &str) -> usize {
    names.iter().filter(|n| *n == want).count()
}

fn body_json(r: &Raw) -> Value {
    serde_json::from_slice(&r.body()).unwrap()
}

#[tokio::test]
async fn anthropic_stream_follows_the_messages_event_order() {
    let addr = start(cfg(vec![thinker("t")])).await;
    let r = post(addr, "/t/v1/messages", &anthropic_body(true, 64), None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header_u64(crate::provider::PLANNED_TOKENS_HEADER), 8);
    let evs = r.events();
    let n = names(&evs);
    let deltas = |kind: &str| -> Vec<&Value> {
        evs.iter()
            .filter(|e| e.data["delta"]["type"] == kind)
            .map(|e| &e.data)
            .collect()
    };
    let mut want = vec!["message_start", "ping", "content_block_start"];
    want.extend(["content_block_delta"; 3 + 1]); // 3 thinking deltas, the signature
    want.extend(["content_block_stop", "content_block_start"]);
    want.extend(["content_block_delta"; 5]);
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(n, want);
    // message_start: the message, empty, with the prompt's tokens (as chat counts them).
    let start = &evs[0].data["message"];
    assert_eq!(start["role"], "assistant");
    assert_eq!(start["content"], json!([]));
    assert!(start["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(start["usage"]["input_tokens"], 12);
    // The thinking block, then the text block, each delta one token, the signature last.
    assert_eq!(evs[2].data["content_block"]["type"], "thinking");
    assert_eq!(evs[2].data["index"], 0);
    let thinking: String = deltas("thinking_delta")
        .iter()
        .map(|d| {
            assert_eq!(d["index"], 0);
            d["delta"]["thinking"].as_str().unwrap()
        })
        .collect();
    assert_eq!(deltas("thinking_delta").len(), 3);
    let sig = deltas("signature_delta");
    assert_eq!(sig.len(), 1);
    assert_eq!(sig[0]["delta"]["signature"], thinking_signature(&thinking));
    assert_eq!(evs[6].data["delta"]["type"], "signature_delta");
    assert_eq!(evs[8].data["content_block"]["type"], "text");
    assert_eq!(evs[8].data["index"], 1);
    assert_eq!(deltas("text_delta").len(), 5);
    let streamed_text: String = deltas("text_delta")
        .iter()
        .map(|d| d["delta"]["text"].as_str().unwrap())
        .collect();
    assert!(deltas("text_delta").iter().all(|d| d["index"] == 1));
    // message_delta: why it stopped and the cumulative output tokens, thinking included.
    let md = &evs[evs.len() - 2].data;
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["output_tokens"], 8);
    // Each token delta is its own body frame.
    let token_frames = r
        .chunks
        .iter()
        .filter(|(_, c)| {
            let c = String::from_utf8_lossy(c);
            c.contains("\"thinking_delta\"") || c.contains("\"text_delta\"")
        })
        .count();
    assert_eq!(token_frames, 8);

    // The cap: the thinking and one text token, stop_reason max_tokens.
    let r = post(addr, "/t/v1/messages", &anthropic_body(true, 4), None).await;
    let evs = r.events();
    let md = evs
        .iter()
        .find(|e| e.data["type"] == "message_delta")
        .unwrap();
    assert_eq!(md.data["delta"]["stop_reason"], "max_tokens");
    assert_eq!(md.data["usage"]["output_tokens"], 4);
    assert_eq!(names(&evs).last().unwrap(), "message_stop");

    // Thinking switched off: one text block only.
    let mut off: Value = serde_json::from_str(&anthropic_body(true, 64)).unwrap();
    off["thinking"] = json!({"type": "disabled"});
    let r = post(addr, "/t/v1/messages", &off.to_string(), None).await;
    let evs = r.events();
    assert!(
        evs.iter()
            .all(|e| e.data["delta"]["type"] != "thinking_delta")
    );
    let md = evs
        .iter()
        .find(|e| e.data["type"] == "message_delta")
        .unwrap();
    assert_eq!(md.data["usage"]["output_tokens"], 5);

    // Not streamed: the whole message, its thinking signed.
    let r = post(addr, "/t/v1/messages", &anthropic_body(false, 64), None).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let m = body_json(&r);
    assert_eq!(m["type"], "message");
    assert_eq!(m["content"][0]["type"], "thinking");
    assert_eq!(
        m["content"][0]["signature"],
        thinking_signature(m["content"][0]["thinking"].as_str().unwrap())
    );
    assert_eq!(m["content"][1]["type"], "text");
    // The same request, the same answer: streamed or not.
    assert_eq!(m["content"][1]["text"], streamed_text.as_str());
    assert_eq!(m["stop_reason"], "end_turn");
    assert_eq!(m["usage"]["input_tokens"], 12);
    assert_eq!(m["usage"]["output_tokens"], 8);
}

#[tokio::test]
async fn anthropic_multi_turn_needs_its_signed_thinking_back() {
    let reasoner = ProviderProfile {
        reasoning_passback: crate::profile::ReasoningPassback::Required,
        ..thinker("r")
    };
    let addr = start(cfg(vec![reasoner])).await;
    let first = body_json(&post(addr, "/r/v1/messages", &anthropic_body(false, 64), None).await);
    let content = first["content"].clone();
    let turn = |assistant: Value| {
        json!({"max_tokens": 16, "messages": [
            {"role": "user", "content": USER},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": "And now?"}]})
        .to_string()
    };
    // The answer sent back as it came: accepted.
    let r = post(addr, "/r/v1/messages", &turn(content.clone()), None).await;
    assert_eq!(r.status, 200, "{}", r.body_text());
    // Without the thinking block: 400 naming the turn, in Anthropic's shape.
    let text_only = json!([content[1]]);
    let r = post(addr, "/r/v1/messages", &turn(text_only), None).await;
    assert_eq!(r.status, 400);
    let e = body_json(&r);
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "invalid_request_error");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`thinking` block in assistant message 1 (messages[1])"),
        "{msg}"
    );
    // With the thinking edited: the signature no longer matches.
    let mut forged = content.clone();
    forged[0]["thinking"] = json!("something else");
    let r = post(addr, "/r/v1/messages", &turn(forged), None).await;
    assert_eq!(r.status, 400);
    let msg = body_json(&r)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        msg,
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );
}

#[tokio::test]
async fn responses_stream_follows_the_responses_event_order() {
    let addr = start(cfg(vec![thinker("t")])).await;
    let r = post(addr, "/t/v1/responses", &responses_body(true, 64), None).await;
    assert_eq!(r.status, 200);
    let evs = r.events();
    let n = names(&evs);
    let mut want = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
    ];
    want.extend(["response.reasoning_summary_text.delta"; 3]);
    want.extend([
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]);
    want.extend(["response.output_text.delta"; 5]);
    want.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(n, want);
    // Sequence numbers count the events from 0.
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e.data["sequence_number"], i, "{}", e.data);
    }
    assert_eq!(evs[0].data["response"]["status"], "in_progress");
    assert!(
        evs[0].data["response"]["id"]
            .as_str()
            .unwrap()
            .starts_with("resp_")
    );
    // Deltas, one token each, concatenate to the done texts.
    let joined = |kind: &str| -> String {
        evs.iter()
            .filter(|e| e.data["type"] == kind)
            .map(|e| e.data["delta"].as_str().unwrap())
            .collect()
    };
    let reasoning = joined("response.reasoning_summary_text.delta");
    let text = joined("response.output_text.delta");
    assert_eq!(evs[7].data["text"], reasoning.as_str());
    assert_eq!(evs[17].data["text"], text.as_str());
    assert_eq!(evs[10].data["output_index"], 1);
    assert_eq!(evs[10].data["item"]["type"], "message");
    let done = &evs.last().unwrap().data["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["incomplete_details"], Value::Null);
    assert_eq!(done["output"][0]["type"], "reasoning");
    assert_eq!(done["output"][0]["summary"][0]["text"], reasoning.as_str());
    assert_eq!(done["output"][1]["content"][0]["text"], text.as_str());
    let u = &done["usage"];
    assert_eq!(u["input_tokens"], 12);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["output_tokens"], 8);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 3);
    assert_eq!(u["total_tokens"], 20);

    // The cap: response.incomplete, reason max_output_tokens, the message incomplete.
    let r = post(addr, "/t/v1/responses", &responses_body(true, 4), None).await;
    let evs = r.events();
    let last = &evs.last().unwrap().data;
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["usage"]["output_tokens"], 4);
    assert_eq!(last["response"]["output"][1]["status"], "incomplete");

    // Not streamed: the response object.
    let r = post(addr, "/t/v1/responses", &responses_body(false, 64), None).await;
    let b = body_json(&r);
    assert_eq!(b["object"], "response");
    assert_eq!(b["status"], "completed");
    assert_eq!(b["output"][1]["content"][0]["text"], text.as_str());
    assert_eq!(b["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
    let r = post(addr, "/t/v1/responses", &responses_body(false, 2), None).await;
    let b = body_json(&r);
    assert_eq!(b["status"], "incomplete");
    assert_eq!(b["incomplete_details"]["reason"], "max_output_tokens");
    // Reasoning switched off.
    let mut off: Value = serde_json::from_str(&responses_body(false, 64)).unwrap();
    off["reasoning"] = json!({"effort": "none"});
    let b = body_json(&post(addr, "/t/v1/responses", &off.to_string(), None).await);
    assert_eq!(b["output"][0]["type"], "message");
    assert_eq!(b["usage"]["output_tokens"], 5);
}

/// Errors in each API's shape: a bad request, an unknown provider, throttling, overload.
#[tokio::test]
async fn errors_come_in_each_apis_shape() {
    let throttled = ProviderProfile {
        throttle_prob: 1.0,
        retry_after_s_min: 2,
        retry_after_s_max: 2,
        ..ProviderProfile::fixed("thr", 1_000, 1_000)
    };
    let overloaded = ProviderProfile {
        overload_prob: 1.0,
        ..ProviderProfile::fixed("busy", 1_000, 1_000)
    };
    let strict = ProviderProfile {
        rejects_stream_options: true,
        ..ProviderProfile::fixed("strict", 1_000, 1_000)
    };
    let addr = start(cfg(vec![throttled, overloaded, strict, thinker("ok")])).await;

    // Anthropic: {"type":"error","error":{"type","message"}}.
    let anth = |status: u16, kind: &str, r: &Raw| {
        assert_eq!(r.status, status, "{}", r.body_text());
        let e = body_json(r);
        assert_eq!(e["type"], "error");
        assert_eq!(e["error"]["type"], kind);
        assert!(!e["error"]["message"].as_str().unwrap().is_empty());
    };
    let no_cap = json!({"messages": [{"role": "user", "content": "x"}]}).to_string();
    let r = post(addr, "/ok/v1/messages", &no_cap, None).await;
    anth(400, "invalid_request_error", &r);
    assert_eq!(
        body_json(&r)["error"]["message"],
        "max_tokens: Field required"
    );
    anth(
        404,
        "not_found_error",
        &post(addr, "/nope/v1/messages", &anthropic_body(true, 4), None).await,
    );
    let r = post(addr, "/thr/v1/messages", &anthropic_body(true, 4), None).await;
    anth(429, "rate_limit_error", &r);
    assert_eq!(r.header("retry-after"), Some("2"));
    let r = post(addr, "/busy/v1/messages", &anthropic_body(true, 4), None).await;
    anth(529, "overloaded_error", &r);
    assert_eq!(r.header("x-sim-fault"), Some("overload"));

    // Responses (and Chat): {"error":{"message","type","param","code"}}.
    let openai = |status: u16, kind: &str, r: &Raw| {
        assert_eq!(r.status, status, "{}", r.body_text());
        let e = body_json(r);
        assert_eq!(e["error"]["type"], kind);
        assert!(!e["error"]["message"].as_str().unwrap().is_empty());
        e
    };
    let e = openai(
        400,
        "invalid_request_error",
        &post(addr, "/ok/v1/responses", r#"{"model":"m"}"#, None).await,
    );
    assert_eq!(e["error"]["param"], "input");
    openai(
        404,
        "invalid_request_error",
        &post(addr, "/nope/v1/responses", &responses_body(true, 4), None).await,
    );
    let r = post(addr, "/thr/v1/responses", &responses_body(true, 4), None).await;
    openai(429, "rate_limit_error", &r);
    assert_eq!(r.header("retry-after"), Some("2"));
    openai(
        503,
        "server_error",
        &post(addr, "/busy/v1/responses", &responses_body(true, 4), None).await,
    );
    openai(
        503,
        "server_error",
        &post(
            addr,
            "/busy/v1/chat/completions",
            &super::chat_body(true, 4, true),
            None,
        )
        .await,
    );
    // A gateway that refuses `stream_options`: 400 naming it; the same request without it passes.
    let r = post(
        addr,
        "/strict/v1/chat/completions",
        &super::chat_body(true, 4, true),
        None,
    )
    .await;
    let e = openai(400, "invalid_request_error", &r);
    assert_eq!(e["error"]["param"], "stream_options");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_options")
    );
    let mut plain: Value = serde_json::from_str(&super::chat_body(true, 4, false)).unwrap();
    plain.as_object_mut().unwrap().remove("stream_options");
    let r = post(
        addr,
        "/strict/v1/chat/completions",
        &plain.to_string(),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
}

/// The stream-error fault ends each API with its own in-band error; the truncation fault cuts
/// each API's token event in half. Neither sends the API's terminal event.
#[tokio::test]
async fn faults_end_every_api_without_its_terminal_event() {
    let failing = ProviderProfile {
        stream_error_prob: 1.0,
        ..thinker("fail")
    };
    let cut = ProviderProfile {
        truncate_prob: 1.0,
        ..thinker("cut")
    };
    let addr = start(cfg(vec![failing, cut])).await;

    let r = post(
        addr,
        "/fail/v1/chat/completions",
        &super::chat_body(true, 64, true),
        None,
    )
    .await;
    assert_eq!(r.header("x-sim-fault"), Some("stream_error"));
    let evs = r.events();
    let last = &evs.last().unwrap().data;
    assert_eq!(last["error"]["type"], "server_error");
    assert!(!r.body_text().contains("[DONE]"));

    let r = post(addr, "/fail/v1/messages", &anthropic_body(true, 64), None).await;
    let evs = r.events();
    let last = evs.last().unwrap();
    assert_eq!(last.name.as_deref(), Some("error"));
    assert_eq!(last.data["error"]["type"], "overloaded_error");
    assert!(!names(&evs).contains(&"message_stop".to_string()));

    let r = post(addr, "/fail/v1/responses", &responses_body(true, 64), None).await;
    let evs = r.events();
    let last = &evs.last().unwrap().data;
    assert_eq!(last["type"], "response.failed");
    assert_eq!(last["response"]["status"], "failed");
    assert_eq!(last["response"]["error"]["code"], "server_error");
    assert_eq!(count(&names(&evs), "response.completed"), 0);

    for (path, body, terminal) in [
        ("/cut/v1/messages", anthropic_body(true, 64), "message_stop"),
        (
            "/cut/v1/responses",
            responses_body(true, 64),
            "response.completed",
        ),
    ] {
        let r = post(addr, path, &body, None).await;
        assert_eq!(r.header("x-sim-fault"), Some("truncate"));
        let text = r.body_text();
        assert!(!text.ends_with("\n\n"), "{path}: ends with a whole event");
        assert!(!text.contains(terminal), "{path}");
    }
}

/// One prompt on each API: the same plan, the same token frames in the ground truth (kinds,
/// counts), the API recorded; each API's token events are exactly the truth's frames.
#[tokio::test]
async fn ground_truth_is_the_same_on_every_api() {
    let c = cfg(vec![thinker("gt")]);
    let truth = c.truth.clone();
    let addr = start(c).await;
    let cases = [
        (
            "chat",
            "/gt/v1/chat/completions",
            super::chat_body(true, 64, true),
        ),
        ("anthropic", "/gt/v1/messages", anthropic_body(true, 64)),
        ("responses", "/gt/v1/responses", responses_body(true, 64)),
    ];
    let mut frames = Vec::new();
    for (api, path, body) in &cases {
        let id = format!("gt-{api}");
        let r = post(addr, path, body, Some(&id)).await;
        assert_eq!(r.status, 200, "{api}");
        let t = truth.get(&id).unwrap();
        assert_eq!(t.api.name(), *api);
        assert!(t.stream && t.end.is_some() && !t.truncated);
        // The client's token events, in order: (reasoning?, arrival).
        let tokens: Vec<(bool, Instant)> = r
            .events()
            .into_iter()
            .filter_map(|e| {
                let d = &e.data;
                let reasoning = d["choices"][0]["delta"]["reasoning_content"].is_string()
                    || d["delta"]["type"] == "thinking_delta"
                    || d["type"] == "response.reasoning_summary_text.delta";
                let content = d["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
                    || d["delta"]["type"] == "text_delta"
                    || d["type"] == "response.output_text.delta";
                (reasoning || content).then_some((reasoning, e.at))
            })
            .collect();
        assert_eq!(tokens.len(), t.frames.len(), "{api}");
        for ((reasoning, at), f) in tokens.iter().zip(&t.frames) {
            assert_eq!(
                *reasoning,
                f.kind == crate::text::TokenKind::Reasoning,
                "{api}"
            );
            assert!(at.into_std() >= f.stamp.handed, "{api}: read before handed");
        }
        assert!(
            t.ttft().unwrap() >= Duration::from_micros(r.header_u64(crate::PLANNED_TTFT_HEADER))
        );
        frames.push(
            t.frames
                .iter()
                .map(|f| (f.kind, f.tokens))
                .collect::<Vec<_>>(),
        );
        // Over HTTP too, with its API.
        let rep = raw_request(addr, "GET", &format!("/_truth/{id}"), &[], "").await;
        let rep: Value = serde_json::from_slice(&rep.body()).unwrap();
        assert_eq!(rep["api"], *api);
        assert_eq!(rep["first_content_frame"], 3);
    }
    assert_eq!(frames[0].len(), 8);
    assert_eq!(frames[0], frames[1]);
    assert_eq!(frames[0], frames[2]);
    let list = raw_request(addr, "GET", "/_truth", &[], "").await;
    let apis: Vec<String> = list
        .body_text()
        .lines()
        .map(|l| {
            serde_json::from_str::<crate::TruthSummary>(l)
                .unwrap()
                .api
                .name()
                .to_string()
        })
        .collect();
    assert_eq!(apis, ["chat", "anthropic", "responses"]);
}
