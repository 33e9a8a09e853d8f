//! Slots run against the simulator and fake providers: attempts, retries, turns, cancel,
//! failover, shaping.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use latmesh_core::plan::{Plan, Slot};
use latmesh_core::record::{Outcome, ProbeRecord};
use tokio::sync::mpsc;

use super::*;
use crate::probe::Prober;

use std::net::SocketAddr;
use std::sync::Mutex;

use latmesh_sim::profile::{ProviderProfile, ReasoningPassback};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serves `profiles` with the simulator on a loopback port.
async fn sim(profiles: Vec<ProviderProfile>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = latmesh_sim::SimConfig {
        profiles,
        ..latmesh_sim::SimConfig::default()
    };
    tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
    addr
}

/// A validated one-provider, one-scenario plan (through the campaign file, so the
/// follow-ups and policy are what validation makes of the keys).
fn plan(base_url: &str, scenario_keys: &str, provider_keys: &str) -> Plan {
    let text = format!(
        r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 4
interval_s = 10.0
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 48
timeout_total_s = 20
{scenario_keys}
[[providers]]
name = "p"
base_url = "{base_url}"
model_id = "m"
{provider_keys}
"#
    );
    latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
}

/// Runs slot 0 of `round` now and returns its records and what it reports.
async fn run(plan: &Plan, round: u32) -> (Vec<ProbeRecord>, SlotDone) {
    let prober = Prober::new(None).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let at = SlotRef::rounds(round, 0, Slot::new(0, 0), Instant::now());
    let done = run_slot(plan, at, &prober, &tx).await;
    drop(tx);
    let mut recs = Vec::new();
    while let Some((r, _)) = rx.recv().await {
        recs.push(r);
    }
    (recs, done)
}

type Reply = Box<dyn Fn(usize) -> (u16, &'static str, String) + Send + Sync>;

/// A fake provider that keeps every request body: request `n` (0-based) is answered
/// with `reply(n)` = (status, extra header lines, body).
/// A server answering request `n` with `reply(n)`; returns its address and the JSON
/// bodies it received, each with its request head (lowercase) under `"_head"`.
async fn capture(reply: Reply) -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let (seen, reply) = (bodies.clone(), Arc::new(reply));
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (seen, reply) = (seen.clone(), reply.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                let (head, head_end, len) = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        break (head, at + 4, len);
                    }
                };
                while buf.len() < head_end + len {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let mut body: Value =
                    serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or(Value::Null);
                if let Some(o) = body.as_object_mut() {
                    o.insert("_head".into(), Value::String(head));
                }
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(body);
                    seen.len() - 1
                };
                let (status, extra, body) = reply(n);
                let kind = if status == 200 {
                    "text/event-stream"
                } else {
                    "application/json"
                };
                let resp = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, bodies)
}

/// A streamed answer of request `n`: reasoning "thought n", then content "answer n".
fn sse_answer(n: usize) -> String {
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n")
    };
    let usage = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}});
    [
            chunk(
                json!({"role": "assistant", "content": null, "reasoning_content": format!("thought {n}")}),
                Value::Null,
            ),
            chunk(json!({"content": format!("answer {n}")}), Value::Null),
            chunk(json!({}), json!("stop")),
            format!("data: {usage}\n\n"),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat()
}

fn ok_replies() -> Reply {
    Box::new(|n| (200, "", sse_answer(n + 1)))
}

fn summary(recs: &[ProbeRecord]) -> Vec<(u32, u32, Outcome, bool)> {
    recs.iter()
        .map(|r| (r.turn, r.attempt, r.outcome(), r.final_attempt))
        .collect()
}

fn quiet(name: &str) -> ProviderProfile {
    ProviderProfile {
        output_tokens_min: 40,
        output_tokens_max: 60,
        ..ProviderProfile::fixed(name, 20_000, 1_000)
    }
}

#[tokio::test]
async fn a_cancel_aborts_attempts_after_the_grace_and_still_records_them() {
    // Slow: 20 s to the first token.
    let addr = sim(vec![ProviderProfile::fixed("slow", 20_000_000, 1_000)]).await;
    let p = plan(&format!("http://{addr}/slow/v1"), "turns = 2", "");
    let prober = Prober::new(None).unwrap();
    let env = SlotEnv {
        cancel_grace: Duration::from_millis(300),
        ..SlotEnv::default()
    };
    let (tx, mut rx) = mpsc::channel(64);
    let at = SlotRef::rounds(0, 0, Slot::new(0, 0), Instant::now());
    let (env2, p2) = (env.clone(), p.clone());
    let task = tokio::spawn(async move { run_slot_with(&p2, at, &prober, &tx, &env2).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(env.in_flight.load(Ordering::SeqCst), 1);
    let cancelled_at = Instant::now();
    env.cancel.cancel();
    let done = task.await.unwrap();
    let took = cancelled_at.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(env.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(
        done,
        SlotDone {
            records: 1,
            turns_not_sent: 1
        }
    );
    let (rec, _) = rx.recv().await.unwrap();
    assert_eq!(rec.outcome(), Outcome::Cancelled);
    assert!(rec.final_attempt && rec.request_latency_us.is_some());
    assert_eq!((rec.turn, rec.attempt, rec.provider.as_str()), (1, 1, "p"));
    assert!(rec.send_agent_unix_us > 0);
}

#[tokio::test]
async fn a_cancel_during_a_retry_wait_makes_the_last_attempt_final() {
    let throttler = ProviderProfile {
        throttle_prob: 1.0,
        ..quiet("throttler")
    };
    let addr = sim(vec![throttler]).await;
    let p = plan(
        &format!("http://{addr}/throttler/v1"),
        "retry = { max_retries = 3, backoff_s = [5], honour_retry_after = false }",
        "",
    );
    let prober = Prober::new(None).unwrap();
    let env = SlotEnv::default();
    let (tx, mut rx) = mpsc::channel(64);
    let at = SlotRef::rounds(0, 0, Slot::new(0, 0), Instant::now());
    let env2 = env.clone();
    let task = tokio::spawn(async move { run_slot_with(&p, at, &prober, &tx, &env2).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.cancel.cancel();
    let done = tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the wait ends at the cancel")
        .unwrap();
    assert_eq!(done.records, 1);
    let (rec, _) = rx.recv().await.unwrap();
    assert_eq!(rec.outcome(), Outcome::Throttled);
    assert!(rec.final_attempt && rec.request_latency_us.is_some());
}

#[tokio::test]
async fn a_single_turn_request_is_one_final_first_attempt() {
    let addr = sim(vec![quiet("fast")]).await;
    let p = plan(&format!("http://{addr}/fast/v1"), "", "");
    let (recs, done) = run(&p, 1).await;
    assert_eq!(summary(&recs), [(1, 1, Outcome::Ok, true)]);
    let r = &recs[0];
    assert_eq!((r.round, r.slot, r.cache_nonce), (1, 0, false));
    assert_eq!((r.provider.as_str(), r.scenario.as_str()), ("p", "chat"));
    assert_eq!(r.prompt_id, "short-qa-en-001");
    // One attempt: the logical request's latency is the attempt's e2e.
    assert!(r.e2e_us.is_some());
    assert_eq!(r.request_latency_us, r.e2e_us);
    assert_eq!(
        done,
        SlotDone {
            records: 1,
            turns_not_sent: 0
        }
    );
}

#[tokio::test]
async fn throttled_attempts_are_retried_and_only_the_last_is_final() {
    let throttler = ProviderProfile {
        throttle_prob: 1.0,
        retry_after_s_min: 1,
        retry_after_s_max: 1,
        ..quiet("throttler")
    };
    let addr = sim(vec![throttler]).await;
    let url = format!("http://{addr}/throttler/v1");
    // Retry-After (1 s) is longer than the backoff but capped at 0.3 s: two waits of 0.3 s.
    let p = plan(
        &url,
        "retry = { max_retries = 2, backoff_s = [0.1], max_retry_after_s = 0.3 }",
        "",
    );
    let (recs, done) = run(&p, 0).await;
    assert_eq!(
        summary(&recs),
        [
            (1, 1, Outcome::Throttled, false),
            (1, 2, Outcome::Throttled, false),
            (1, 3, Outcome::Throttled, true),
        ]
    );
    assert_eq!(done.records, 3);
    assert!(
        recs.iter()
            .all(|r| r.retry_after_s == Some(1.0) && r.http_status == Some(429))
    );
    assert_eq!(recs[0].request_latency_us, None);
    assert_eq!(recs[1].request_latency_us, None);
    let total = recs[2].request_latency_us.unwrap();
    assert!((600_000..2_000_000).contains(&total), "{total} µs");
    let gap = recs[1].send_agent_unix_us - recs[0].send_agent_unix_us;
    assert!(gap >= 300_000, "second attempt {gap} µs after the first");

    // Honoured in full below the cap: the 1 s Retry-After wins over the 50 ms backoff.
    let p = plan(&url, "retry = { max_retries = 1, backoff_s = [0.05] }", "");
    let (recs, _) = run(&p, 0).await;
    assert_eq!(recs.len(), 2);
    let total = recs[1].request_latency_us.unwrap();
    assert!(total >= 1_000_000, "{total} µs");
    // Not honoured: only the backoff.
    let p = plan(
        &url,
        "retry = { max_retries = 1, backoff_s = [0.05], honour_retry_after = false }",
        "",
    );
    let (recs, _) = run(&p, 0).await;
    let total = recs[1].request_latency_us.unwrap();
    assert!((50_000..900_000).contains(&total), "{total} µs");
    // Outcomes not listed in `on` are not retried.
    let p = plan(&url, "retry = { on = [\"http_5xx\"] }", "");
    let (recs, _) = run(&p, 0).await;
    assert_eq!(summary(&recs), [(1, 1, Outcome::Throttled, true)]);
}

#[tokio::test]
async fn a_retry_that_succeeds_makes_the_logical_request_ok() {
    let reply: Reply = Box::new(|n| match n {
        0 => (
            503,
            "",
            r#"{"error":{"message":"overloaded","type":"server_error"}}"#.to_string(),
        ),
        _ => (200, "", sse_answer(n)),
    });
    let (addr, bodies) = capture(reply).await;
    let p = plan(
        &format!("http://{addr}/v1"),
        "cache_nonce = true\nretry = { backoff_s = [0.2] }",
        "",
    );
    let (recs, done) = run(&p, 0).await;
    assert_eq!(
        summary(&recs),
        [(1, 1, Outcome::Http5xx, false), (1, 2, Outcome::Ok, true)]
    );
    assert_eq!(done.records, 2);
    let total = recs[1].request_latency_us.unwrap();
    assert!(total >= 200_000 + recs[1].e2e_us.unwrap(), "{total} µs");
    // A retry resends the identical request, nonce included.
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1]);
    assert!(recs.iter().all(|r| r.cache_nonce));
}

fn first_content(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap().to_string()
}

/// The provider's `user_agent` from the campaign reaches the wire; without one, the
/// default; never a latmesh header.
#[tokio::test]
async fn the_campaigns_user_agent_is_sent() {
    let (addr, bodies) = capture(ok_replies()).await;
    let url = format!("http://{addr}/v1");
    run(&plan(&url, "", "user_agent = \"acme-eval/3.1\""), 0).await;
    run(&plan(&url, "", ""), 0).await;
    let heads: Vec<String> = bodies
        .lock()
        .unwrap()
        .iter()
        .map(|b| b["_head"].as_str().unwrap().to_string())
        .collect();
    assert!(
        heads[0].contains("\r\nuser-agent: acme-eval/3.1\r\n"),
        "{}",
        heads[0]
    );
    let default = crate::probe::request::DEFAULT_USER_AGENT.to_ascii_lowercase();
    assert!(
        heads[1].contains(&format!("\r\nuser-agent: {default}\r\n")),
        "{}",
        heads[1]
    );
    assert!(heads.iter().all(|h| !h.contains("latmesh")), "{heads:?}");
}

#[tokio::test]
async fn every_logical_request_gets_its_own_cache_nonce() {
    let (addr, bodies) = capture(ok_replies()).await;
    let url = format!("http://{addr}/v1");
    let original = plan(&url, "", "").scenarios[0].prompts[0].messages[0]
        .content
        .clone();
    let p = plan(&url, "cache_nonce = true", "");
    let (a, _) = run(&p, 0).await;
    let (b, _) = run(&p, 4).await; // the same prompt again
    assert!(a[0].cache_nonce && b[0].cache_nonce);
    assert_eq!(a[0].prompt_id, b[0].prompt_id);
    let (first, second) = {
        let bodies = bodies.lock().unwrap();
        (first_content(&bodies[0]), first_content(&bodies[1]))
    };
    for c in [&first, &second] {
        let rest = c.strip_prefix("[nonce ").unwrap();
        let (hex, prompt) = rest.split_once("] ").unwrap();
        assert!(
            hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "{c}"
        );
        assert_eq!(prompt, original);
    }
    assert_ne!(first, second);
    // Without the key the prompt goes as it is, and the record says so.
    let p = plan(&url, "", "");
    let (c, _) = run(&p, 0).await;
    assert!(!c[0].cache_nonce);
    assert_eq!(first_content(&bodies.lock().unwrap()[2]), original);
}

#[tokio::test]
async fn later_turns_send_the_history_back_in_order() {
    for pass in [true, false] {
        let (addr, bodies) = capture(ok_replies()).await;
        let p = plan(
            &format!("http://{addr}/v1"),
            "turns = 3\ncache_nonce = true\nfollow_ups = [\"Second?\", \"Third?\"]",
            &format!("pass_reasoning = {pass}"),
        );
        let prompt = p.scenarios[0].prompts[0].messages.clone();
        let (recs, done) = run(&p, 0).await;
        assert_eq!(
            summary(&recs),
            [
                (1, 1, Outcome::Ok, true),
                (2, 1, Outcome::Ok, true),
                (3, 1, Outcome::Ok, true),
            ]
        );
        assert_eq!(
            done,
            SlotDone {
                records: 3,
                turns_not_sent: 0
            }
        );
        assert!(recs.iter().all(|r| r.cache_nonce && r.ttft_us.is_some()));
        let bodies = bodies.lock().unwrap();
        let assistant = |n: usize| {
            if pass {
                json!({"role": "assistant", "content": format!("answer {n}"),
                        "reasoning_content": format!("thought {n}")})
            } else {
                json!({"role": "assistant", "content": format!("answer {n}")})
            }
        };
        let user = |t: &str| json!({"role": "user", "content": t});
        let turn1 = bodies[0]["messages"].as_array().unwrap().clone();
        assert_eq!(turn1.len(), prompt.len());
        // All turns share the nonce: turn 1's messages are the prefix of every turn.
        let mut want = turn1.clone();
        want.extend([assistant(1), user("Second?")]);
        assert_eq!(bodies[1]["messages"], Value::Array(want.clone()));
        want.extend([assistant(2), user("Third?")]);
        assert_eq!(bodies[2]["messages"], Value::Array(want));
    }
}

/// A streamed Anthropic answer of request `n`: a thinking block "thought n" with its
/// signature (in two deltas), a redacted thinking block, then text "answer n".
fn anthropic_answer(n: usize) -> String {
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    [
            ev(
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [], "model": "m", "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            ev(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": format!("thought {n}")}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": format!("sig{n}a")}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "b"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": format!("enc{n}")}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 1})),
            ev(
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": format!("answer {n}")}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 2})),
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 6}}),
            ),
            ev(json!({"type": "message_stop"})),
        ]
        .concat()
}

/// A Responses API stream of request `n`: a reasoning summary "thought n" whose item
/// carries encrypted reasoning "enc n", then the text "answer n".
fn responses_answer(n: usize) -> String {
    let event = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    let reasoning = json!({"type": "reasoning", "summary": [{"type": "summary_text",
            "text": format!("thought {n}")}], "encrypted_content": format!("enc {n}")});
    [
            event(json!({"type": "response.created", "response": {"status": "in_progress", "model": "m"}})),
            event(json!({"type": "response.reasoning_summary_text.delta", "output_index": 0,
                "delta": format!("thought {n}")})),
            event(json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning})),
            event(json!({"type": "response.output_text.delta", "output_index": 1,
                "delta": format!("answer {n}")})),
            event(json!({"type": "response.completed", "response": {"status": "completed",
                "usage": {"input_tokens": 10, "output_tokens": 4}}})),
        ]
        .concat()
}

#[tokio::test]
async fn anthropic_turns_send_the_thinking_blocks_back_with_their_signatures() {
    for pass in [true, false] {
        let (addr, bodies) = capture(Box::new(|n| (200, "", anthropic_answer(n + 1)))).await;
        let p = plan(
            &format!("http://{addr}/v1"),
            "turns = 3\nfollow_ups = [\"Second?\", \"Third?\"]",
            &format!("api = \"anthropic\"\npass_reasoning = {pass}"),
        );
        let (recs, done) = run(&p, 0).await;
        assert_eq!(done.turns_not_sent, 0);
        assert!(recs.iter().all(|r| r.outcome() == Outcome::Ok
            && r.finish_reason.as_deref() == Some("stop")
            && r.reasoning_chunks == 2));
        let bodies = bodies.lock().unwrap();
        let head = bodies[0]["_head"].as_str().unwrap();
        assert!(head.starts_with("post /v1/messages "), "{head}");
        assert!(
            head.contains("\r\nanthropic-version: 2023-06-01\r\n"),
            "{head}"
        );
        // The Anthropic SDK's user agent, not the OpenAI one.
        assert!(
            head.contains("\r\nuser-agent: anthropic/python 2.15.0\r\n"),
            "{head}"
        );
        let assistant = |n: usize| {
            if pass {
                json!({"role": "assistant", "content": [
                    {"type": "thinking", "thinking": format!("thought {n}"), "signature": format!("sig{n}ab")},
                    {"type": "redacted_thinking", "data": format!("enc{n}")},
                    {"type": "text", "text": format!("answer {n}")},
                ]})
            } else {
                json!({"role": "assistant", "content": format!("answer {n}")})
            }
        };
        let user = |t: &str| json!({"role": "user", "content": t});
        let mut want = bodies[0]["messages"].as_array().unwrap().clone();
        want.extend([assistant(1), user("Second?")]);
        assert_eq!(bodies[1]["messages"], Value::Array(want.clone()));
        want.extend([assistant(2), user("Third?")]);
        assert_eq!(bodies[2]["messages"], Value::Array(want));
    }
}

#[tokio::test]
async fn responses_turns_pass_encrypted_reasoning_back_when_asked() {
    for pass in [true, false] {
        let (addr, bodies) = capture(Box::new(|n| (200, "", responses_answer(n + 1)))).await;
        let p = plan(
            &format!("http://{addr}/v1"),
            "turns = 2\nfollow_ups = [\"Second?\"]",
            &format!("api = \"responses\"\npass_reasoning = {pass}"),
        );
        let (recs, _) = run(&p, 0).await;
        assert_eq!(
            summary(&recs),
            [(1, 1, Outcome::Ok, true), (2, 1, Outcome::Ok, true)]
        );
        let bodies = bodies.lock().unwrap();
        assert!(
            bodies[0]["_head"]
                .as_str()
                .unwrap()
                .starts_with("post /v1/responses ")
        );
        let turn1 = bodies[0]["input"].as_array().unwrap().clone();
        let mut want = turn1.clone();
        if pass {
            want.push(
                json!({"type": "reasoning", "summary": [{"type": "summary_text",
                    "text": "thought 1"}], "encrypted_content": "enc 1"}),
            );
        }
        let message = |role: &str, part: &str, text: &str| json!({"type": "message", "role": role, "content": [{"type": part, "text": text}]});
        want.extend([
            message("assistant", "output_text", "answer 1"),
            message("user", "input_text", "Second?"),
        ]);
        assert_eq!(
            bodies[1]["input"],
            Value::Array(want),
            "pass_reasoning = {pass}"
        );
    }
}

fn thinker(passback: ReasoningPassback) -> ProviderProfile {
    ProviderProfile {
        prefill_us_per_input_token: 2_000,
        reasoning_tokens_min: 6,
        reasoning_tokens_max: 6,
        reasoning_passback: passback,
        ..quiet("thinker")
    }
}

#[tokio::test]
async fn multi_turn_ttft_and_prompt_tokens_grow_with_the_history() {
    let addr = sim(vec![thinker(ReasoningPassback::Required)]).await;
    let p = plan(
        &format!("http://{addr}/thinker/v1"),
        "turns = 3",
        "pass_reasoning = true",
    );
    let (recs, done) = run(&p, 0).await;
    assert_eq!(done.turns_not_sent, 0);
    assert_eq!(
        summary(&recs),
        [
            (1, 1, Outcome::Ok, true),
            (2, 1, Outcome::Ok, true),
            (3, 1, Outcome::Ok, true),
        ]
    );
    let prompt: Vec<u32> = recs
        .iter()
        .map(|r| r.usage.prompt_tokens.unwrap())
        .collect();
    let ttft: Vec<u64> = recs.iter().map(|r| r.ttft_us.unwrap()).collect();
    // Each turn adds an answer (≥ 40 tokens + reasoning) and a follow-up: ≥ 40 more
    // prompt tokens, so ≥ 80 ms more prefill at 2 ms per token.
    for w in prompt.windows(2) {
        assert!(w[1] >= w[0] + 40, "prompt tokens {prompt:?}");
    }
    for w in ttft.windows(2) {
        assert!(w[1] >= w[0] + 60_000, "TTFT {ttft:?} µs");
    }
}

#[tokio::test]
async fn a_provider_that_needs_the_reasoning_back_rejects_the_history() {
    let addr = sim(vec![thinker(ReasoningPassback::Required)]).await;
    let p = plan(
        &format!("http://{addr}/thinker/v1"),
        "turns = 3\nretry = {}",
        "pass_reasoning = false",
    );
    let (recs, done) = run(&p, 0).await;
    // Not retried (never is), and the conversation stops: turn 3 is not sent.
    assert_eq!(
        summary(&recs),
        [
            (1, 1, Outcome::Ok, true),
            (2, 1, Outcome::HistoryRejected, true)
        ]
    );
    assert_eq!(
        done,
        SlotDone {
            records: 2,
            turns_not_sent: 1
        }
    );
    let r = &recs[1];
    assert_eq!(r.http_status, Some(400));
    let msg = r.error_message.as_deref().unwrap();
    assert!(
        msg.contains("`reasoning_content` in assistant message 1"),
        "{msg}"
    );
    // DeepSeek's reasoner is the other way round: passing the reasoning back is refused.
    let addr = sim(vec![thinker(ReasoningPassback::Rejected)]).await;
    let p = plan(
        &format!("http://{addr}/thinker/v1"),
        "turns = 2",
        "pass_reasoning = true",
    );
    let (recs, _) = run(&p, 0).await;
    assert_eq!(recs[1].outcome(), Outcome::HistoryRejected);
    assert!(
        recs[1]
            .error_message
            .as_deref()
            .unwrap()
            .contains("not allowed")
    );
    // The builtin reasoner needs it back.
    let builtin = latmesh_sim::builtin_profiles()
        .into_iter()
        .find(|p| p.name == "reasoner")
        .unwrap();
    assert_eq!(builtin.reasoning_passback, ReasoningPassback::Required);
}

/// A failover campaign: `down` always throttles, `flaky5` always answers 503, `up` works.
fn failover_plan(addr: SocketAddr, chain: &str, extra: &str) -> Plan {
    let mut text = format!(
        r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 1
interval_s = 10.0
gap_ms = 100
[[scenarios]]
name = "fo"
prompt_ids = ["short-qa-en-001"]
max_tokens = 16
failover = {{ chain = [{chain}]{extra} }}
"#
    );
    for name in ["down", "up", "spare"] {
        text.push_str(&format!(
                "[[providers]]\nname = \"{name}\"\nbase_url = \"http://{addr}/{name}/v1\"\nmodel_id = \"m\"\n"
            ));
    }
    latmesh_core::campaign::load_toml_str(&text, std::path::Path::new(".")).unwrap()
}

async fn failover_sim() -> SocketAddr {
    sim(vec![
        ProviderProfile {
            throttle_prob: 1.0,
            ..ProviderProfile::fixed("down", 20_000, 1_000)
        },
        ProviderProfile::fixed("up", 30_000, 1_000),
        ProviderProfile::fixed("spare", 30_000, 1_000),
    ])
    .await
}

#[tokio::test]
async fn failover_retries_once_then_switches_and_reports_the_client_s_latency() {
    let addr = failover_sim().await;
    let plan = failover_plan(addr, r#""down", "up", "spare""#, "");
    // A round: the client request through the chain, then each backup on its own.
    let order = plan.round_order(0);
    assert_eq!(order.len(), 3);
    assert_eq!(order.iter().filter(|s| s.failover).count(), 1);
    let chain_slot = *order.iter().find(|s| s.failover).unwrap();
    assert_eq!(chain_slot.provider, 0);
    let prober = Prober::new(None).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let at = SlotRef::rounds(0, 0, chain_slot, Instant::now());
    let done = run_slot(&plan, at, &prober, &tx).await;
    drop(tx);
    let mut records = Vec::new();
    while let Some((r, _)) = rx.recv().await {
        records.push(r);
    }
    let seen: Vec<(&str, u32, Outcome, bool)> = records
        .iter()
        .map(|r| (r.provider.as_str(), r.attempt, r.outcome(), r.final_attempt))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("down", 1, Outcome::Throttled, false),
            ("down", 2, Outcome::Throttled, false),
            ("up", 3, Outcome::Ok, true),
        ]
    );
    assert_eq!(done.records, 3);
    assert!(records.iter().all(|r| r.failover && r.scenario == "fo"));
    // The client waited for both refusals and the backup's whole answer.
    let last = &records[2];
    let total = last.request_latency_us.unwrap();
    let refusals: u64 = records[..2].iter().map(|r| r.ttfb_us.unwrap()).sum();
    assert!(
        total >= last.e2e_us.unwrap() + refusals,
        "{total} µs vs {records:?}"
    );
    // The backups' own probes are plain slots of the same scenario.
    let plain = *order
        .iter()
        .find(|s| !s.failover && s.provider == 2)
        .unwrap();
    let (tx, mut rx) = mpsc::channel(8);
    run_slot(
        &plan,
        SlotRef::rounds(0, 1, plain, Instant::now()),
        &prober,
        &tx,
    )
    .await;
    drop(tx);
    let r = rx.recv().await.unwrap().0;
    assert_eq!(
        (r.provider.as_str(), r.failover, r.outcome()),
        ("spare", false, Outcome::Ok)
    );
}

#[tokio::test]
async fn failover_ends_when_the_chain_is_exhausted_or_the_outcome_is_not_listed() {
    let addr = failover_sim().await;
    let prober = Prober::new(None).unwrap();
    let run = |plan: Plan| {
        let prober = &prober;
        async move {
            let slot = *plan.round_order(0).iter().find(|s| s.failover).unwrap();
            let (tx, mut rx) = mpsc::channel(64);
            run_slot(
                &plan,
                SlotRef::rounds(0, 0, slot, Instant::now()),
                prober,
                &tx,
            )
            .await;
            drop(tx);
            let mut out = Vec::new();
            while let Some((r, _)) = rx.recv().await {
                out.push((r.provider.clone(), r.outcome(), r.final_attempt));
            }
            out
        }
    };
    // One attempt per provider, both down: the client's request fails on the last.
    let both_down = run(failover_plan(
        addr,
        r#""down", "up""#,
        ", attempts = 1, on = [\"http_5xx\"]",
    ))
    .await;
    assert_eq!(
        both_down,
        vec![("down".to_string(), Outcome::Throttled, true)]
    );
    let plan = failover_plan(addr, r#""down", "up""#, ", attempts = 1");
    let switched = run(plan).await;
    assert_eq!(
        switched,
        vec![
            ("down".to_string(), Outcome::Throttled, false),
            ("up".to_string(), Outcome::Ok, true)
        ]
    );
}

/// `stream_usage = "auto"`: a 400 naming `stream_options` stays a record as it is, then
/// this agent stops asking that provider (later requests go without the field and say
/// so in `usage_requested`); the provider's shaping (query, scenario + provider
/// `extra_body`, secret header, auth header) reaches the wire.
#[tokio::test]
async fn a_refused_stream_options_is_dropped_for_the_provider_after_one_attempt() {
    let (addr, bodies) = capture(Box::new(|n| {
            if n == 0 {
                (
                    400,
                    "",
                    r#"{"error":{"message":"Unrecognized request argument supplied: stream_options","type":"invalid_request_error","param":"stream_options"}}"#.to_string(),
                )
            } else {
                (200, "", sse_answer(n))
            }
        }))
        .await;
    // SAFETY: a variable only this test uses.
    unsafe { std::env::set_var("LATMESH_TEST_RUNNER_HDR", "hdr-secret-9z8y7x") };
    let p = plan(
        &format!("http://{addr}/v1"),
        "extra_body = { chat_template_kwargs = { enable_thinking = false }, top_k = 5 }",
        "auth = { header = \"api-key\" }\nquery = { \"api-version\" = \"2024-10-21\" }\n\
             headers = { \"x-sec\" = { env = \"LATMESH_TEST_RUNNER_HDR\" } }\nextra_body = { top_k = 7 }",
    );
    let prober = Prober::new(None).unwrap();
    let env = SlotEnv {
        shaping: Arc::new(crate::shaping::Shaping::new(&p)),
        ..SlotEnv::default()
    };
    let (tx, mut rx) = mpsc::channel(64);
    for round in 0..3 {
        let at = SlotRef::rounds(round, 0, Slot::new(0, 0), Instant::now());
        run_slot_with(&p, at, &prober, &tx, &env).await;
    }
    drop(tx);
    let mut recs = Vec::new();
    while let Some((r, _)) = rx.recv().await {
        recs.push(r);
    }
    assert_eq!(
        recs.iter()
            .map(|r| (r.outcome(), r.usage_requested))
            .collect::<Vec<_>>(),
        [
            (Outcome::Http4xx, true),
            (Outcome::Ok, false),
            (Outcome::Ok, false)
        ]
    );
    let bodies = bodies.lock().unwrap();
    assert_eq!(bodies[0]["stream_options"]["include_usage"], true);
    for b in &bodies[1..] {
        assert_eq!(b.get("stream_options"), None, "{b}");
    }
    for b in bodies.iter() {
        assert_eq!(b["top_k"], 7, "the provider's extra_body wins");
        assert_eq!(b["chat_template_kwargs"]["enable_thinking"], false);
        let head = b["_head"].as_str().unwrap();
        assert!(
            head.starts_with("post /v1/chat/completions?api-version=2024-10-21 "),
            "{head}"
        );
        assert!(head.contains("\r\nx-sec: hdr-secret-9z8y7x"), "{head}");
        assert!(!head.contains("authorization"), "{head}");
    }
    // Another run (a new Shaping) asks again; `always` never stops asking.
    let fresh = crate::shaping::Shaping::new(&p);
    assert!(
        fresh.shape(&p, 0, &p.scenarios[0]).stream_usage == latmesh_core::api::StreamUsage::Auto
    );
    let mut always = p.clone();
    always.providers[0].request.stream_usage = latmesh_core::api::StreamUsage::Always;
    let sh = crate::shaping::Shaping::new(&always);
    sh.after_attempt(0, "p", &always.providers[0].request, &recs[0], &[]);
    assert_eq!(
        sh.shape(&always, 0, &always.scenarios[0]).stream_usage,
        latmesh_core::api::StreamUsage::Always
    );
}

/// `p`'s only scenario as one tier of generated prompts of `n` input tokens (what the
/// campaign file's `input_tokens` makes of it).
fn tier(mut p: Plan, n: u32) -> Plan {
    let label = latmesh_core::synth::tier_label(n);
    let s = &mut p.scenarios[0];
    s.synth = Some(latmesh_core::synth::SynthSpec {
        group: s.name.clone(),
        input_tokens: n,
        shared_prefix_tokens: 0,
        reuse_text: false,
    });
    s.name = format!("{}.{label}", s.name);
    s.prompts.truncate(1);
    s.prompts[0].id = format!("gen-{label}");
    s.prompts[0].messages.clear();
    p
}

/// Runs slot `slot` of round `round` with `env` and returns its records.
async fn run_in(plan: &Plan, round: u32, slot: u32, env: &SlotEnv) -> Vec<ProbeRecord> {
    let prober = Prober::new(None).unwrap();
    let (tx, mut rx) = mpsc::channel(64);
    let at = SlotRef::rounds(round, slot, Slot::new(0, 0), Instant::now());
    run_slot_with(plan, at, &prober, &tx, env).await;
    drop(tx);
    let mut recs = Vec::new();
    while let Some((r, _)) = rx.recv().await {
        recs.push(r);
    }
    recs
}

fn region(name: &str) -> SlotEnv {
    SlotEnv {
        region: Arc::from(name),
        ..SlotEnv::default()
    }
}

/// A tier scenario sends one user message of exactly its input tokens in words; the same
/// request key gives the same bytes in another run (a fresh environment: prompts built
/// again); another region differs only in the header words; another slot too.
#[tokio::test]
async fn tier_requests_are_exact_length_and_the_same_bytes_for_the_same_key() {
    let (addr, bodies) = capture(ok_replies()).await;
    let p = tier(plan(&format!("http://{addr}/v1"), "", ""), 1000);
    let a = run_in(&p, 0, 3, &region("eu-west")).await;
    run_in(&p, 0, 3, &region("eu-west")).await; // a second run
    run_in(&p, 0, 3, &region("us-east")).await; // another region
    run_in(&p, 0, 4, &region("eu-west")).await; // another slot
    assert_eq!(
        (
            a[0].input_tokens,
            a[0].prompt_id.as_str(),
            a[0].scenario.as_str()
        ),
        (1000, "gen-1k", "chat.1k")
    );
    let bodies = bodies.lock().unwrap();
    let texts: Vec<String> = bodies.iter().map(first_content).collect();
    let messages = bodies[0]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    for t in &texts {
        assert_eq!(t.split(' ').count(), 1000, "exactly 1000 words");
    }
    assert_eq!(
        texts[0], texts[1],
        "the same key gave other bytes in another run"
    );
    let header = latmesh_core::synth::HEADER_WORDS as usize;
    for other in [&texts[2], &texts[3]] {
        let (x, y): (Vec<&str>, Vec<&str>) =
            (texts[0].split(' ').collect(), other.split(' ').collect());
        assert_ne!(x[..header], y[..header], "the header words must differ");
        assert_eq!(x[header..], y[header..], "only the header may differ");
    }
}

/// `output_tokens`: the cap is the output length wanted, and the provider's `exact_output`
/// fields go into the body over `extra_body`, `"$output_tokens"` replaced by the number.
#[tokio::test]
async fn exact_output_fields_and_the_cap_are_in_the_body() {
    let (addr, bodies) = capture(ok_replies()).await;
    let mut p = tier(
        plan(
            &format!("http://{addr}/v1"),
            "",
            "extra_body = { ignore_eos = false, top_k = 5 }",
        ),
        64,
    );
    p.scenarios[0].output_tokens = Some(256);
    p.providers[0].request.exact_output = serde_json::from_value(
        json!({"ignore_eos": true, "min_tokens": "$output_tokens", "vllm": {"min": "$output_tokens"}}),
    )
    .unwrap();
    run_in(&p, 0, 0, &SlotEnv::default()).await;
    // Without output_tokens the exact_output fields are not sent.
    p.scenarios[0].output_tokens = None;
    run_in(&p, 0, 0, &SlotEnv::default()).await;
    let bodies = bodies.lock().unwrap();
    let b = &bodies[0];
    assert_eq!(
        (
            &b["max_tokens"],
            &b["ignore_eos"],
            &b["min_tokens"],
            &b["vllm"],
            &b["top_k"]
        ),
        (
            &json!(256),
            &json!(true),
            &json!(256),
            &json!({"min": 256}),
            &json!(5)
        )
    );
    let b = &bodies[1];
    assert_eq!(
        (&b["max_tokens"], &b["ignore_eos"], b.get("min_tokens")),
        (&json!(48), &json!(false), None)
    );
}

/// Warm-up requests are marked on every attempt; `slo_met` is on final attempts only.
#[tokio::test]
async fn warmup_is_marked_and_slo_met_is_on_the_final_attempt() {
    let (addr, _) = capture(Box::new(|n| {
        if n == 0 {
            (429, "", r#"{"error":{"message":"slow down"}}"#.to_string())
        } else {
            (200, "", sse_answer(n))
        }
    }))
    .await;
    let mut p = plan(
        &format!("http://{addr}/v1"),
        "retry = { max_retries = 1, backoff_s = [0.01], honour_retry_after = false }",
        "",
    );
    p.scenarios[0].warmup = 1;
    p.scenarios[0].slo = Some(latmesh_core::slo::Slo {
        ttft_ms: Some(20_000.0),
        tpot_ms: None,
        e2e_ms: None,
        percentiles: vec![],
        goodput_pct: 90.0,
    });
    let warm = run_in(&p, 0, 0, &SlotEnv::default()).await;
    assert_eq!(
        warm.iter()
            .map(|r| (r.attempt, r.warmup, r.final_attempt, r.slo_met))
            .collect::<Vec<_>>(),
        [(1, true, false, None), (2, true, true, Some(true))]
    );
    let after = run_in(&p, 1, 0, &SlotEnv::default()).await;
    assert_eq!(
        after
            .iter()
            .map(|r| (r.warmup, r.slo_met))
            .collect::<Vec<_>>(),
        [(false, Some(true))]
    );
    // A bound the request cannot meet.
    p.scenarios[0].slo.as_mut().unwrap().ttft_ms = Some(0.000_001);
    let missed = run_in(&p, 1, 0, &SlotEnv::default()).await;
    assert_eq!(missed[0].slo_met, Some(false));
    assert!(missed[0].ttst_us >= missed[0].ttft_us && missed[0].ttst_us.is_some());
    // Without an SLO: none.
    p.scenarios[0].slo = None;
    assert_eq!(run_in(&p, 1, 0, &SlotEnv::default()).await[0].slo_met, None);
}
