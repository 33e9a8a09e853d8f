//! End-to-end tests over real loopback sockets, read with a raw HTTP/1.1 client so that
//! chunk boundaries and exact bytes are visible.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::{ProviderProfile, SimConfig};

mod answerer;
mod apis;
mod compat;
mod prober;
mod traps;
mod workloads;

/// A response read off the wire.
struct Raw {
    status: u16,
    /// The status line's reason phrase.
    reason: String,
    headers: Vec<(String, String)>,
    /// When the request was written.
    t_sent: Instant,
    /// When the end of the header block arrived.
    t_headers: Instant,
    /// Body frames (HTTP/1.1 chunks; one piece for a Content-Length body), with arrival time.
    chunks: Vec<(Instant, Vec<u8>)>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn header_u64(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name}"))
            .parse()
            .unwrap()
    }
    fn body(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|(_, c)| c.clone()).collect()
    }
    fn body_text(&self) -> String {
        String::from_utf8(self.body()).unwrap()
    }
    /// `data:` payloads in order (excluding comments), with the arrival time of their chunk.
    fn data_payloads(&self) -> Vec<(Instant, String)> {
        let mut out = Vec::new();
        let mut pending = String::new();
        for (t, c) in &self.chunks {
            pending.push_str(&String::from_utf8_lossy(c));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(d) = line.strip_prefix("data:") {
                        out.push((*t, d.trim_start().to_string()));
                    }
                }
            }
        }
        out
    }
    /// Every SSE event with a `data:` line, in order: its arrival, its `event:` name (if
    /// any) and its data parsed as JSON (`[DONE]` and other non-JSON data as a JSON string).
    fn events(&self) -> Vec<Ev> {
        let mut out = Vec::new();
        let mut pending = String::new();
        for (t, c) in &self.chunks {
            pending.push_str(&String::from_utf8_lossy(c));
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                let mut name = None;
                let mut data = None;
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event:") {
                        name = Some(n.trim().to_string());
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data = Some(d.trim_start().to_string());
                    }
                }
                if let Some(d) = data {
                    let data = serde_json::from_str(&d).unwrap_or(Value::String(d));
                    out.push(Ev { at: *t, name, data });
                }
            }
        }
        out
    }
    fn json_payloads(&self) -> Vec<Value> {
        self.data_payloads()
            .into_iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(_, d)| serde_json::from_str(&d).unwrap())
            .collect()
    }
}

/// One SSE event read off the wire.
#[derive(Debug, Clone)]
struct Ev {
    at: Instant,
    name: Option<String>,
    data: Value,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

async fn raw_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> Raw {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in extra {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let t_sent = Instant::now();
    s.write_all(req.as_bytes()).await.unwrap();

    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let head_end = loop {
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0, "eof in headers");
        buf.extend_from_slice(&tmp[..n]);
    };
    let t_headers = Instant::now();
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let mut status_line = lines.next().unwrap().splitn(3, ' ').skip(1);
    let status = status_line.next().unwrap().parse().unwrap();
    let reason = status_line.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let mut rest = buf[head_end + 4..].to_vec();
    let mut chunks = Vec::new();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        loop {
            // Parse every complete chunk in `rest`.
            while let Some(le) = find(&rest, b"\r\n") {
                let size_line = std::str::from_utf8(&rest[..le]).unwrap();
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16).unwrap();
                if size == 0 {
                    return Raw {
                        status,
                        reason,
                        headers,
                        t_sent,
                        t_headers,
                        chunks,
                    };
                }
                if rest.len() < le + 2 + size + 2 {
                    break;
                }
                chunks.push((Instant::now(), rest[le + 2..le + 2 + size].to_vec()));
                assert_eq!(&rest[le + 2 + size..le + 4 + size], b"\r\n");
                rest.drain(..le + 4 + size);
            }
            let n = s.read(&mut tmp).await.unwrap();
            assert!(n > 0, "eof inside a chunked body (no terminating chunk)");
            rest.extend_from_slice(&tmp[..n]);
        }
    } else {
        s.read_to_end(&mut rest).await.unwrap();
        let len: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map_or(rest.len(), |(_, v)| v.parse().unwrap());
        assert_eq!(rest.len(), len);
        chunks.push((Instant::now(), rest));
        Raw {
            status,
            reason,
            headers,
            t_sent,
            t_headers,
            chunks,
        }
    }
}

async fn start(cfg: SimConfig) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(crate::serve_providers(listener, cfg));
    addr
}

fn fast_builtins() -> SimConfig {
    SimConfig {
        time_scale: 0.05,
        ..SimConfig::default()
    }
}

fn chat_body(stream: bool, max_tokens: u32, usage: bool) -> String {
    serde_json::json!({
        "model": "deepseek-v4-flash",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compare the latency of nine providers."}],
        "stream": stream,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream_options": {"include_usage": usage},
    })
    .to_string()
}

async fn chat(addr: SocketAddr, provider: &str, body: &str) -> Raw {
    raw_request(
        addr,
        "POST",
        &format!("/{provider}/v1/chat/completions"),
        &[],
        body,
    )
    .await
}

fn content_of(p: &Value) -> Option<&str> {
    p["choices"][0]["delta"]["content"]
        .as_str()
        .filter(|s| !s.is_empty())
}

#[tokio::test]
async fn stream_has_requested_tokens_and_usage() {
    let addr = start(fast_builtins()).await;
    let r = chat(addr, "fast-lane", &chat_body(true, 16, true)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.header_u64(crate::PLANNED_TTFT_HEADER) > 0);
    assert_eq!(r.header_u64(crate::REGION_DELAY_HEADER), 0);
    let payloads = r.data_payloads();
    assert_eq!(payloads.last().unwrap().1, "[DONE]");
    let json = r.json_payloads();
    assert_eq!(json[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(json[0]["choices"][0]["delta"]["content"], "");
    assert_eq!(json.iter().filter(|p| content_of(p).is_some()).count(), 16);
    let finish = &json[json.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    let usage = json.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 16);
    // (9 + 38) chars -> ceil(47 / 4), plus fast-lane's 7 template tokens.
    assert_eq!(usage["usage"]["prompt_tokens"], 19);
    assert_eq!(usage["usage"]["total_tokens"], 35);
    assert!(
        json.iter()
            .all(|p| p["object"] == "chat.completion.chunk" && p["model"] == "deepseek-v4-flash")
    );
    // Each token chunk is its own body frame (HTTP chunk).
    assert!(r.chunks.len() >= 16 + 3);

    // Without include_usage there is no usage chunk.
    let r = chat(addr, "fast-lane", &chat_body(true, 4, false)).await;
    let json = r.json_payloads();
    assert!(json.iter().all(|p| p.get("usage").is_none()));
    assert_eq!(
        json.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );
}

#[tokio::test]
async fn bulk_chunk_sends_several_tokens_per_chunk() {
    let addr = start(fast_builtins()).await;
    let r = chat(addr, "bulk-chunk", &chat_body(true, 64, true)).await;
    let json = r.json_payloads();
    let content_chunks = json.iter().filter(|p| content_of(p).is_some()).count();
    assert!(
        (8..=16).contains(&content_chunks),
        "{content_chunks} chunks for 64 tokens"
    );
    assert_eq!(json.last().unwrap()["usage"]["completion_tokens"], 64);
    assert_eq!(r.header_u64(crate::provider::PLANNED_TOKENS_HEADER), 64);
}

#[tokio::test]
async fn reasoner_streams_reasoning_before_content() {
    let addr = start(fast_builtins()).await;
    let r = chat(addr, "reasoner", &chat_body(true, 64, true)).await;
    let json = r.json_payloads();
    let reasoning: Vec<usize> = (0..json.len())
        .filter(|&i| {
            json[i]["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .collect();
    let content: Vec<usize> = (0..json.len())
        .filter(|&i| content_of(&json[i]).is_some())
        .collect();
    assert!(
        (20..=40).contains(&reasoning.len()),
        "{} reasoning chunks",
        reasoning.len()
    );
    assert!(!content.is_empty());
    assert!(reasoning.last() < content.first());
    let usage = &json.last().unwrap()["usage"];
    assert_eq!(
        usage["completion_tokens_details"]["reasoning_tokens"],
        reasoning.len()
    );
    assert_eq!(usage["completion_tokens"], reasoning.len() + content.len());
    assert_eq!(usage["completion_tokens"], 64);

    // Non-streaming: one chat.completion with both texts and usage.
    let r = chat(addr, "reasoner", &chat_body(false, 64, false)).await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v: Value = serde_json::from_slice(&r.body()).unwrap();
    assert_eq!(v["object"], "chat.completion");
    let msg = &v["choices"][0]["message"];
    assert!(!msg["content"].as_str().unwrap().is_empty());
    assert!(!msg["reasoning_content"].as_str().unwrap().is_empty());
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 64);
    // The whole answer is waited for before the headers.
    let planned = r.header_u64(crate::PLANNED_TTFT_HEADER);
    assert!(r.t_headers - r.t_sent >= Duration::from_micros(planned));
}

#[tokio::test]
async fn natural_length_ends_with_stop() {
    let addr = start(fast_builtins()).await;
    let body =
        serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100_000})
            .to_string();
    let v: Value = serde_json::from_slice(&chat(addr, "fast-lane", &body).await.body()).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let n = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((32..=480).contains(&n));
    // Same prompt, same natural length.
    let again: Value =
        serde_json::from_slice(&chat(addr, "fast-lane", &body).await.body()).unwrap();
    assert_eq!(again["usage"]["completion_tokens"].as_u64(), Some(n));
}

#[tokio::test]
async fn throttled_requests_get_429_with_retry_after() {
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            throttle_prob: 1.0,
            retry_after_s_min: 2,
            retry_after_s_max: 2,
            ..ProviderProfile::fixed("t", 1_000, 1_000)
        }],
        ..SimConfig::default()
    };
    let addr = start(cfg).await;
    for stream in [true, false] {
        let r = chat(addr, "t", &chat_body(stream, 8, true)).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.header("retry-after"), Some("2"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: Value = serde_json::from_slice(&r.body()).unwrap();
        assert_eq!(v["error"]["code"], "rate_limit_exceeded");
        assert!(v["error"]["message"].as_str().unwrap().contains("2s"));
    }
    // The built-in throttler throttles some but not all of 40 requests.
    let addr = start(SimConfig {
        time_scale: 0.01,
        ..SimConfig::default()
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..40 {
        statuses.push(
            chat(addr, "throttler", &chat_body(false, 2, false))
                .await
                .status,
        );
    }
    let throttled = statuses.iter().filter(|&&s| s == 429).count();
    assert!((2..=20).contains(&throttled), "{throttled} of 40 throttled");
    assert!(statuses.iter().all(|&s| s == 200 || s == 429));
}

#[tokio::test]
async fn truncated_stream_stops_mid_line() {
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            truncate_prob: 1.0,
            ..ProviderProfile::fixed("cut", 1_000, 1_000)
        }],
        ..SimConfig::default()
    };
    let addr = start(cfg).await;
    let r = chat(addr, "cut", &chat_body(true, 20, true)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sim-fault"), Some("truncate"));
    let text = r.body_text();
    assert!(!text.contains("[DONE]"));
    assert!(!text.contains("\"finish_reason\":\"length\""));
    assert!(!text.ends_with('\n'));
    assert!(text.rsplit("\n\n").next().unwrap().starts_with("data: {"));
    let full = r
        .json_payloads()
        .iter()
        .filter(|p| content_of(p).is_some())
        .count();
    assert!(full < 20);
}

#[tokio::test]
async fn keepalive_comments_come_before_the_first_token() {
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            keepalive_interval_us: 20_000,
            ..ProviderProfile::fixed("ka", 110_000, 1_000)
        }],
        ..SimConfig::default()
    };
    let addr = start(cfg).await;
    let r = chat(addr, "ka", &chat_body(true, 3, false)).await;
    let text = r.body_text();
    let first_data = text.find("data:").unwrap();
    assert_eq!(text[..first_data].matches(": keep-alive\n\n").count(), 5);
    // The comments really arrive before the token: each is its own frame, sent earlier.
    let comment_frames: Vec<Instant> = r
        .chunks
        .iter()
        .filter(|(_, c)| c.as_slice() == b": keep-alive\n\n")
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(comment_frames.len(), 5);
    let first_token = r
        .data_payloads()
        .into_iter()
        .find(|(_, d)| d.contains("\"content\":\"") && !d.contains("\"content\":\"\""))
        .unwrap()
        .0;
    assert!(comment_frames[0] - r.t_sent >= Duration::from_millis(20));
    assert!(first_token - r.t_sent >= Duration::from_millis(110));

    // The built-in keepalive provider also sends them.
    let addr = start(fast_builtins()).await;
    let body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 2}).to_string();
    let r = chat(addr, "keepalive", &body).await;
    assert!(r.body_text().starts_with(": keep-alive\n\n"));
}

#[tokio::test]
async fn measured_ttft_respects_plan_and_region_delay() {
    let mut far = ProviderProfile::fixed("far", 5_000, 1_000);
    far.home_region = "ap-southeast".into();
    let cfg = SimConfig {
        profiles: vec![far],
        ..SimConfig::default()
    };
    let addr = start(cfg).await;
    let body = chat_body(true, 2, false);
    let measure = |region: &'static str| {
        let body = body.clone();
        async move {
            let r = raw_request(
                addr,
                "POST",
                "/far/v1/chat/completions",
                &[(crate::REGION_HEADER, region)],
                &body,
            )
            .await;
            let first = r
                .data_payloads()
                .into_iter()
                .find(|(_, d)| d.contains("\"content\":\"") && !d.contains("\"content\":\"\""))
                .unwrap()
                .0;
            (
                r.header_u64(crate::REGION_DELAY_HEADER),
                r.t_headers - r.t_sent,
                first - r.t_sent,
            )
        }
    };
    // Three tries each; the minimum filters scheduling noise on a loaded machine.
    let mut same = Vec::new();
    let mut far = Vec::new();
    for _ in 0..3 {
        same.push(measure("ap-southeast").await);
        far.push(measure("us-east").await);
    }
    let (none_delay, _, _) = measure("nowhere").await;
    assert_eq!((same[0].0, far[0].0, none_delay), (3_000, 110_000, 0));
    // Sleeps never end early: lower bounds are exact; upper bounds are loose.
    for (&(_, same_ttfb, same_ttft), &(_, far_ttfb, far_ttft)) in same.iter().zip(&far) {
        assert!(same_ttfb >= Duration::from_millis(3) && far_ttfb >= Duration::from_millis(110));
        assert!(same_ttft >= Duration::from_millis(8) && far_ttft >= Duration::from_millis(115));
    }
    let same_ttft = same.iter().map(|m| m.2).min().unwrap();
    let (_, far_ttfb, far_ttft) = far.into_iter().min_by_key(|m| m.2).unwrap();
    let raised = far_ttft.saturating_sub(same_ttft);
    assert!(
        raised >= Duration::from_millis(90) && raised <= Duration::from_millis(400),
        "raised by {raised:?}"
    );
    // Headers go out before the first token (TTFB < TTFT).
    assert!(far_ttft > far_ttfb);
}

#[tokio::test]
async fn same_seed_gives_same_plans() {
    let a = start(fast_builtins()).await;
    let b = start(fast_builtins()).await;
    let c = start(SimConfig {
        seed: 8,
        ..fast_builtins()
    })
    .await;
    let mut seq = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..4 {
        for (i, addr) in [a, b, c].into_iter().enumerate() {
            let r = chat(addr, "budget", &chat_body(false, 2, false)).await;
            seq[i].push(r.header_u64(crate::PLANNED_TTFT_HEADER));
        }
    }
    assert_eq!(seq[0], seq[1]);
    assert_ne!(seq[0], seq[2]);
}

#[tokio::test]
async fn routes_models_health_and_errors() {
    let addr = start(fast_builtins()).await;
    let r = raw_request(
        addr,
        "POST",
        "/nope/v1/chat/completions",
        &[],
        &chat_body(true, 4, false),
    )
    .await;
    assert_eq!(r.status, 404);
    let v: Value = serde_json::from_slice(&r.body()).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "model_not_found");
    assert!(v["error"]["message"].as_str().unwrap().contains("nope"));

    let r = raw_request(addr, "GET", "/steady/v1/models", &[], "").await;
    let v: Value = serde_json::from_slice(&r.body()).unwrap();
    assert_eq!(v["data"][0]["id"], crate::DEFAULT_MODEL_ID);
    assert_eq!(
        raw_request(addr, "GET", "/nope/v1/models", &[], "")
            .await
            .status,
        404
    );
    assert_eq!(
        raw_request(addr, "GET", "/healthz", &[], "")
            .await
            .body_text(),
        "ok\n"
    );

    let r = chat(addr, "steady", "{not json").await;
    assert_eq!(r.status, 400);
    let v: Value = serde_json::from_slice(&r.body()).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn invalid_config_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = SimConfig {
        profiles: vec![
            ProviderProfile::fixed("a", 1, 1),
            ProviderProfile::fixed("a", 1, 1),
        ],
        ..SimConfig::default()
    };
    let err = crate::serve_providers(listener, cfg).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

// ---- replay ----

async fn start_replay(sse: &std::path::Path) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    crate::ReplayCase::load(sse).unwrap();
    let sse = sse.to_path_buf();
    tokio::spawn(async move { crate::serve_replay(listener, &sse).await });
    addr
}

#[tokio::test]
async fn replay_serves_exact_bytes_with_splits() {
    let dir = tempfile::tempdir().unwrap();
    let sse = dir.path().join("99-made-up.sse");
    // CRLF line endings, a multi-byte character cut by a split, and no final newline.
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"你好\"}}]}\r\n\r\ndata: {\"choices\":[{\"del".as_bytes();
    std::fs::write(&sse, body).unwrap();
    let cut = body.iter().position(|&b| b >= 0x80).unwrap() + 1; // inside "你"
    std::fs::write(
        dir.path().join("99-made-up.expect.json"),
        serde_json::json!({
            "http": {"status": 200, "headers": {"content-type": "text/event-stream", "x-case": "99"}},
            "delivery": {"split_after_bytes": [cut, cut + 20]},
        })
        .to_string(),
    )
    .unwrap();
    let addr = start_replay(&sse).await;
    let r = raw_request(addr, "POST", "/v1/chat/completions", &[], "{}").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-case"), Some("99"));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.body(), body);
    let sizes: Vec<usize> = r.chunks.iter().map(|(_, c)| c.len()).collect();
    assert_eq!(sizes, vec![cut, 20, body.len() - cut - 20]);
    // Two 30 ms pauses between the three writes.
    assert!(r.chunks[2].0 - r.t_sent >= Duration::from_millis(60));

    // Any path ending in /chat/completions; other routes are 404.
    let r = raw_request(
        addr,
        "POST",
        "/some/provider/v1/chat/completions",
        &[],
        "{}",
    )
    .await;
    assert_eq!(r.body(), body);
    assert_eq!(
        raw_request(addr, "POST", "/v1/completions", &[], "{}")
            .await
            .status,
        404
    );
    assert_eq!(
        raw_request(addr, "GET", "/v1/chat/completions", &[], "")
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn replay_without_split_is_one_write_and_keeps_status_headers() {
    let dir = tempfile::tempdir().unwrap();
    let sse = dir.path().join("20-throttled.sse");
    std::fs::write(
        &sse,
        br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("20-throttled.expect.json"),
        r#"{"http":{"status":429,"headers":{"content-type":"application/json","retry-after":"7"}}}"#,
    )
    .unwrap();
    let addr = start_replay(&sse).await;
    let r = raw_request(addr, "POST", "/v1/chat/completions", &[], "{}").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.chunks.len(), 1);
    assert_eq!(r.body(), std::fs::read(&sse).unwrap());
}

/// The provider-quirk corpus: the repository's `tests/fixtures/sse-cases`, or the folder
/// `LATMESH_SSE_CASES` names.
fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("LATMESH_SSE_CASES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sse-cases")
        });
    assert!(dir.is_dir(), "no corpus at {}", dir.display());
    dir
}

/// `body` decoded as the sidecar's `delivery.compress` says (`gzip`, `deflate`: zlib-wrapped,
/// as the replay server writes it), or as it is.
fn decoded(compress: Option<&str>, body: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    match compress {
        None => out.extend_from_slice(body),
        Some("gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("deflate") => {
            flate2::read::ZlibDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some(other) => panic!("unknown delivery.compress {other:?}"),
    }
    out
}

#[tokio::test]
async fn replay_serves_every_corpus_case_exactly() {
    let dir = corpus_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty());
    for sse in cases {
        let expect: Value =
            serde_json::from_slice(&std::fs::read(crate::replay::sidecar_path(&sse)).unwrap())
                .unwrap();
        let addr = start_replay(&sse).await;
        let r = raw_request(addr, "POST", "/v1/chat/completions", &[], "{}").await;
        let name = sse.display();
        assert_eq!(
            u64::from(r.status),
            expect["http"]["status"].as_u64().unwrap(),
            "{name}"
        );
        for (k, v) in expect["http"]["headers"].as_object().unwrap() {
            assert_eq!(r.header(k), v.as_str(), "{name}: {k}");
        }
        // A compressed case (`delivery.compress`) holds the decoded body: its wire bytes are
        // one compressed stream, cut where the compressor was flushed, not at body offsets.
        let compress = expect["delivery"]["compress"].as_str();
        assert_eq!(
            decoded(compress, &r.body()),
            std::fs::read(&sse).unwrap(),
            "{name}"
        );
        if compress.is_some() {
            continue;
        }
        if let Some(splits) = expect["delivery"]["split_after_bytes"].as_array() {
            let ends: Vec<u64> = r
                .chunks
                .iter()
                .scan(0u64, |acc, (_, c)| {
                    *acc += c.len() as u64;
                    Some(*acc)
                })
                .collect();
            for s in splits {
                assert!(ends.contains(&s.as_u64().unwrap()), "{name}: no cut at {s}");
            }
        }
    }
}

fn reasoning_of(p: &Value) -> Option<&str> {
    p["choices"][0]["delta"]["reasoning_content"]
        .as_str()
        .filter(|s| !s.is_empty())
}

#[tokio::test]
async fn ground_truth_records_receipt_and_token_frames() {
    let cfg = SimConfig {
        profiles: vec![
            ProviderProfile {
                reasoning_tokens_min: 3,
                reasoning_tokens_max: 3,
                output_tokens_min: 5,
                output_tokens_max: 5,
                ..ProviderProfile::fixed("gt", 3_000, 1_000)
            },
            ProviderProfile {
                throttle_prob: 1.0,
                ..ProviderProfile::fixed("thr", 1_000, 1_000)
            },
        ],
        ..SimConfig::default()
    };
    let truth = cfg.truth.clone();
    let addr = start(cfg).await;
    let path = "/gt/v1/chat/completions";
    let r = raw_request(
        addr,
        "POST",
        path,
        &[(crate::PROBE_ID_HEADER, "gt-1")],
        &chat_body(true, 64, true),
    )
    .await;
    assert_eq!(r.status, 200);
    let t = truth.get("gt-1").expect("recorded");
    assert_eq!((t.probe_id.as_str(), t.provider.as_str()), ("gt-1", "gt"));
    assert_eq!(t.status, Some(200));
    assert!(t.stream && t.write_tracked && !t.truncated);
    // The client wrote the request before the server received it.
    assert!(r.t_sent.into_std() <= t.received);

    // One truth frame per token-bearing payload, in order, with its kind and token count.
    let tokens: Vec<(Instant, bool)> = r
        .data_payloads()
        .into_iter()
        .filter(|(_, d)| d != "[DONE]")
        .filter_map(|(at, d)| {
            let v: Value = serde_json::from_str(&d).unwrap();
            let content = content_of(&v).is_some();
            (content || reasoning_of(&v).is_some()).then_some((at, content))
        })
        .collect();
    assert_eq!(tokens.len(), 8);
    assert_eq!(t.frames.len(), tokens.len());
    assert_eq!(t.first_token_frame(), Some(0));
    assert_eq!(t.first_content_frame(), Some(3));
    for ((read_at, content), f) in tokens.iter().zip(&t.frames) {
        assert_eq!(*content, f.kind == crate::text::TokenKind::Content);
        assert_eq!(f.tokens, 1);
        // Causality: nobody reads a frame before it is handed to hyper.
        assert!(read_at.into_std() >= f.stamp.handed);
        let written = f.stamp.written.expect("written stamp over HTTP/1");
        assert!(written >= f.stamp.handed);
        assert!(f.stamp.handed >= t.received);
    }
    for w in t.frames.windows(2) {
        assert!(w[1].stamp.handed >= w[0].stamp.handed);
    }
    // The plan: the first token no earlier than the planned TTFT after the receipt.
    let planned = Duration::from_micros(r.header_u64(crate::PLANNED_TTFT_HEADER));
    assert!(t.ttft().unwrap() >= planned);
    // Frames written to the socket together (a busy machine coalesces them) share a written
    // stamp: the first content token comes no earlier than the first token, and is a later
    // frame (index 3 above).
    assert!(t.ttfc().unwrap() >= t.ttft().unwrap());
    let end = t.end.expect("[DONE] went out");
    assert!(end.handed >= t.frames.last().unwrap().stamp.handed);
    assert!(r.chunks.last().unwrap().0.into_std() >= end.handed);

    // The same over HTTP, as µs after the receipt.
    let rep = raw_request(addr, "GET", "/_truth/gt-1", &[], "").await;
    assert_eq!(rep.status, 200);
    let rep: crate::TruthReport = serde_json::from_slice(&rep.body()).unwrap();
    assert_eq!(rep, truth.report("gt-1").unwrap());
    assert_eq!(rep.frames.len(), 8);
    assert_eq!(rep.first_content_frame, Some(3));
    assert_eq!(rep.frames[3].kind, "content");
    assert_eq!(rep.server_ttft_us, rep.frames[0].at.written_us);
    assert!(rep.server_ttft_us.unwrap() >= planned.as_micros() as u64);
    assert!(rep.finished && rep.write_tracked);
    let missing = raw_request(addr, "GET", "/_truth/nope", &[], "").await;
    assert_eq!(missing.status, 404);

    // Requests without a probe id are not recorded; a throttled one is, without frames.
    let before = truth.len();
    chat(addr, "gt", &chat_body(true, 4, false)).await;
    assert_eq!(truth.len(), before);
    let r = raw_request(
        addr,
        "POST",
        "/thr/v1/chat/completions",
        &[(crate::PROBE_ID_HEADER, "thr-1")],
        &chat_body(true, 4, false),
    )
    .await;
    assert_eq!(r.status, 429);
    let t = truth.get("thr-1").unwrap();
    assert_eq!(t.status, Some(429));
    assert!(!t.stream && t.frames.is_empty() && t.ttft().is_none());
    assert!(t.end.unwrap().written.is_some());
}

#[tokio::test]
async fn truth_all_records_requests_without_probe_id() {
    // TTFT 20 ms, then 5 tokens 1 ms apart.
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            output_tokens_min: 5,
            output_tokens_max: 5,
            ..ProviderProfile::fixed("plain", 20_000, 1_000)
        }],
        truth: crate::TruthLog::recording_all(100),
        ..SimConfig::default()
    };
    let addr = start(cfg).await;
    for _ in 0..2 {
        let r = chat(addr, "plain", &chat_body(true, 64, true)).await;
        assert_eq!(r.status, 200);
    }
    let labeled = raw_request(
        addr,
        "POST",
        "/plain/v1/chat/completions",
        &[(crate::PROBE_ID_HEADER, "mine")],
        &chat_body(true, 3, false),
    )
    .await;
    assert_eq!(labeled.status, 200);
    let list = raw_request(addr, "GET", "/_truth", &[], "").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.header("content-type"), Some("application/x-ndjson"));
    let rows: Vec<crate::TruthSummary> = list
        .body_text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r.probe_id.as_str()).collect();
    assert_eq!(ids, ["unlabeled-1", "unlabeled-2", "mine"]);
    for r in &rows[..2] {
        assert_eq!(r.provider, "plain");
        assert_eq!(r.status, Some(200));
        assert!(r.stream && r.finished && !r.truncated);
        assert_eq!((r.token_frames, r.tokens), (5, 5));
        let handed = r.first_token_handed_us.unwrap();
        assert!((20_000..40_000).contains(&handed), "{handed}");
        // Written after handed; the last token planned 4 ITLs after the first (timers never
        // fire early).
        assert!(r.server_ttft_us.unwrap() >= handed);
        assert!(r.server_e2e_us.unwrap() >= 24_000);
    }
    assert_eq!((rows[2].token_frames, rows[2].tokens), (3, 3));
    // The per-request report works for generated ids too.
    let one = raw_request(addr, "GET", "/_truth/unlabeled-2", &[], "").await;
    assert_eq!(one.status, 200);
    let rep: crate::TruthReport = serde_json::from_slice(&one.body()).unwrap();
    assert_eq!(rep.frames.len(), 5);
    assert_eq!(rep.server_ttft_us, rows[1].server_ttft_us);
}

#[tokio::test]
async fn ground_truth_marks_truncated_streams() {
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            truncate_prob: 1.0,
            output_tokens_min: 6,
            output_tokens_max: 6,
            ..ProviderProfile::fixed("cut", 1_000, 500)
        }],
        ..SimConfig::default()
    };
    let truth = cfg.truth.clone();
    let addr = start(cfg).await;
    let r = raw_request(
        addr,
        "POST",
        "/cut/v1/chat/completions",
        &[(crate::PROBE_ID_HEADER, "cut-1")],
        &chat_body(true, 64, false),
    )
    .await;
    let complete_tokens = r
        .json_payloads()
        .iter()
        .filter(|p| content_of(p).is_some())
        .count();
    let t = truth.get("cut-1").unwrap();
    assert!(t.truncated && t.end.is_some());
    // The cut line is not a token frame: the client cannot parse it either.
    assert_eq!(t.frames.len(), complete_tokens);
}

// ---------------------------------------------------------------------------------------
// Serving capacity.

/// A provider serving `capacity` requests at once: TTFT 100 ms, ITL 0, 4 tokens (the body
/// ends right after the first token: service time ≈ 100 ms).
fn queued_cfg(capacity: u32) -> SimConfig {
    SimConfig {
        profiles: vec![ProviderProfile {
            capacity,
            output_tokens_min: 4,
            output_tokens_max: 4,
            ..ProviderProfile::fixed("cap", 100_000, 0)
        }],
        ..SimConfig::default()
    }
}

/// Arrival of the first content token of a streamed response.
fn first_token_at(r: &Raw) -> Instant {
    r.data_payloads()
        .into_iter()
        .find(|(_, d)| d.contains("\"content\":\"") && !d.contains("\"content\":\"\""))
        .expect("a content token")
        .0
}

/// `n` streamed requests to provider `cap`, the i-th sent `i × stagger` after the common
/// start, each with probe id `{tag}-{i}`. Returns the common start and the responses in
/// sending order.
async fn concurrent_streams(
    addr: SocketAddr,
    n: usize,
    stagger: Duration,
    tag: &str,
) -> (Instant, Vec<Raw>) {
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let id = format!("{tag}-{i}");
            tokio::spawn(async move {
                tokio::time::sleep_until(start + stagger * i as u32).await;
                let hdr = [(crate::PROBE_ID_HEADER, id.as_str())];
                let body = chat_body(true, 4, false);
                raw_request(addr, "POST", "/cap/v1/chat/completions", &hdr, &body).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    (start, out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_serves_up_to_capacity_without_waiting() {
    let addr = start(queued_cfg(2)).await;
    let (_, rs) = concurrent_streams(addr, 2, Duration::ZERO, "two").await;
    let ttfts: Vec<Duration> = rs.iter().map(|r| first_token_at(r) - r.t_sent).collect();
    eprintln!(
        "2 concurrent, capacity 2: TTFT ms {:?}",
        ttfts.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    for (r, ttft) in rs.iter().zip(&ttfts) {
        assert_eq!(r.status, 200);
        assert_eq!(r.header_u64(crate::QUEUE_WAIT_HEADER), 0);
        assert!(*ttft >= Duration::from_millis(100), "{ttft:?}");
        assert!(*ttft <= Duration::from_millis(180), "{ttft:?}");
    }
}

/// Within 1 ms (the timer wheel's resolution) of `want_ms`.
fn near(d: Duration, want_ms: u64) -> bool {
    d.abs_diff(Duration::from_millis(want_ms)) <= Duration::from_millis(1)
}

// On tokio's paused clock: time moves only when every task waits for a timer, so the waves
// come out to the millisecond however busy the machine is (real time made this test fail
// about 1 run in 5 on a loaded 2-core machine).
#[tokio::test(start_paused = true)]
async fn capacity_queues_the_rest_fifo_in_waves() {
    let addr = start(queued_cfg(2)).await;
    // Sent 2 ms apart: r0 and r1 take the two slots (100 ms each); r2 and r3 wait for them
    // (until 100 and 102 ms), r4 and r5 for r2 and r3 (until 200 and 202 ms).
    let (t_start, rs) = concurrent_streams(addr, 6, Duration::from_millis(2), "six").await;
    assert!(rs.iter().all(|r| r.status == 200));
    let waits: Vec<u64> = rs
        .iter()
        .map(|r| r.header_u64(crate::QUEUE_WAIT_HEADER))
        .collect();
    let ttfts: Vec<Duration> = rs.iter().map(|r| first_token_at(r) - r.t_sent).collect();
    let since_start: Vec<Duration> = rs.iter().map(|r| first_token_at(r) - t_start).collect();
    let text = format!("queue waits µs {waits:?}, TTFTs {ttfts:?}, first tokens {since_start:?}");
    let want_waits_ms = [0, 0, 96, 96, 192, 192];
    for (i, &w) in want_waits_ms.iter().enumerate() {
        assert!(near(Duration::from_micros(waits[i]), w), "r{i}: {text}");
        // TTFT from the request's own send: its queue wait, then the 100 ms of service.
        assert!(near(ttfts[i], w + 100), "r{i}: {text}");
        // First come, first served: waves at 100, 200 and 300 ms from the first send.
        assert!(
            near(since_start[i], [100, 102, 200, 202, 300, 302][i]),
            "r{i}: {text}"
        );
    }

    // A non-streamed answer holds its slot until it is handed over, too.
    let addr = start(queued_cfg(1)).await;
    let tasks: Vec<_> = (0..2)
        .map(|_| tokio::spawn(async move { chat(addr, "cap", &chat_body(false, 4, false)).await }))
        .collect();
    let mut waits = Vec::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        waits.push(Duration::from_micros(
            r.header_u64(crate::QUEUE_WAIT_HEADER),
        ));
    }
    waits.sort();
    assert!(near(waits[0], 0) && near(waits[1], 100), "{waits:?}");
}

// The same queue in real time, checking only what causality guarantees however late the
// machine runs each task: the ground truth records each wait, and the slots serve in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_waits_are_recorded_in_the_ground_truth() {
    let cfg = queued_cfg(2);
    let truth = cfg.truth.clone();
    let addr = start(cfg).await;
    let (t_start, rs) = concurrent_streams(addr, 6, Duration::from_millis(2), "six").await;
    assert!(rs.iter().all(|r| r.status == 200));
    let mut waits: Vec<u64> = rs
        .iter()
        .map(|r| r.header_u64(crate::QUEUE_WAIT_HEADER))
        .collect();
    waits.sort();
    // The first two requests received find a free slot.
    assert_eq!(&waits[..2], &[0, 0], "{waits:?}");
    // Each slot serves its ≥ 100 ms requests one after the other: counted from the common
    // start, only two first tokens can come before 200 ms and only four before 300 ms.
    let mut since_start: Vec<Duration> = rs.iter().map(|r| first_token_at(r) - t_start).collect();
    since_start.sort();
    assert!(
        since_start[2] >= Duration::from_millis(200),
        "{since_start:?}"
    );
    assert!(
        since_start[4] >= Duration::from_millis(300),
        "{since_start:?}"
    );

    // Ground truth: the receipt is still the handler's first statement, the wait is
    // recorded, and the server-side TTFT counts it. (Which of two requests received close
    // together is served first depends on when each handler reaches the queue, which a busy
    // machine decides: first come, first served is checked on the paused clock above.)
    for (i, r) in rs.iter().enumerate() {
        let t = truth.get(&format!("six-{i}")).expect("recorded");
        let wait = r.header_u64(crate::QUEUE_WAIT_HEADER);
        assert_eq!(t.queue_wait.as_micros() as u64, wait);
        assert_eq!(t.report().queue_wait_us, wait);
        assert!(r.t_sent.into_std() <= t.received);
        assert!(t.ttft().unwrap() >= t.queue_wait + Duration::from_millis(100));
        assert!(t.end.is_some());
    }
}

/// Reads a streamed response off `s` until the first content token has arrived.
async fn read_until_first_token(s: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    loop {
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0, "eof before the first token");
        buf.extend_from_slice(&tmp[..n]);
        let text = String::from_utf8_lossy(&buf);
        if text
            .match_indices("\"content\":\"")
            .any(|(i, m)| text[i + m.len()..].chars().next().is_some_and(|c| c != '"'))
        {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_gone_mid_stream_frees_its_slot() {
    // Capacity 1; a body of 100 tokens 50 ms apart: 5 s to play out in full.
    let cfg = SimConfig {
        profiles: vec![ProviderProfile {
            capacity: 1,
            output_tokens_min: 100,
            output_tokens_max: 100,
            ..ProviderProfile::fixed("cap", 20_000, 50_000)
        }],
        ..SimConfig::default()
    };
    let truth = cfg.truth.clone();
    let addr = start(cfg).await;
    let body = chat_body(true, 100, false);
    let mut a = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /cap/v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{}: gone\r\ncontent-length: {}\r\n\r\n{body}",
        crate::PROBE_ID_HEADER,
        body.len()
    );
    a.write_all(req.as_bytes()).await.unwrap();
    read_until_first_token(&mut a).await;

    // B queues behind A's slot while A keeps reading…
    let b = tokio::spawn(async move { chat(addr, "cap", &chat_body(true, 2, false)).await });
    let hold = Duration::from_millis(300);
    let keep_reading = async {
        let mut tmp = [0u8; 4096];
        loop {
            let n = a.read(&mut tmp).await.unwrap();
            assert!(n > 0, "A's body ended early");
        }
    };
    let _ = tokio::time::timeout(hold, keep_reading).await;
    // …and gets it soon after A goes away, ~4.7 s before A's body would have ended.
    let t_drop = Instant::now();
    drop(a);
    let b = b.await.unwrap();
    let wait = Duration::from_micros(b.header_u64(crate::QUEUE_WAIT_HEADER));
    let after_drop = first_token_at(&b) - t_drop;
    eprintln!(
        "dropped stream: B waited {:.1} ms in the queue, first token {:.1} ms after A's drop, TTFT {:.1} ms",
        ms(wait),
        ms(after_drop),
        ms(first_token_at(&b) - b.t_sent)
    );
    assert_eq!(b.status, 200);
    assert!(
        wait >= Duration::from_millis(250),
        "B did not wait: {wait:?}"
    );
    assert!(
        wait <= Duration::from_millis(1000),
        "slot not freed: {wait:?}"
    );
    assert!(after_drop <= Duration::from_millis(1000), "{after_drop:?}");
    // A's body was abandoned, not finished.
    let t = truth.get("gone").unwrap();
    assert!(t.end.is_none() && !t.frames.is_empty());
}

/// A hostile profile echoes the `Authorization` value into the reason phrase, headers, the
/// SSE `id:`/`event:`/comment lines and every string field; pads long fields each in its own
/// event; sends absurd usage and a raw Retry-After.
#[tokio::test]
async fn hostile_profiles_echo_the_key_everywhere_and_send_absurd_values() {
    const KEY: &str = "Bearer sk-sim-canary-42";
    let hostile = crate::hostile::Hostile {
        echo_key: true,
        field_bytes: 100_000,
        usage_value: Some(serde_json::json!(4294967295u64)),
        retry_after: Some("1e30".into()),
    };
    let calm = ProviderProfile {
        hostile: hostile.clone(),
        system_fingerprint: Some("fp_evil".into()),
        ..ProviderProfile::fixed("evil", 1_000, 100)
    };
    let throttling = ProviderProfile {
        name: "evil-429".into(),
        throttle_prob: 1.0,
        ..calm.clone()
    };
    let addr = start(SimConfig {
        profiles: vec![calm, throttling],
        ..SimConfig::default()
    })
    .await;
    let post = |provider: &'static str, stream: bool| async move {
        raw_request(
            addr,
            "POST",
            &format!("/{provider}/v1/chat/completions"),
            &[("authorization", KEY)],
            &chat_body(stream, 4, true),
        )
        .await
    };
    let r = post("evil", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.reason, format!("OK {KEY}"));
    assert_eq!(r.header("x-echo"), Some(KEY));
    let text = r.body_text();
    assert!(text.starts_with(&format!(
        "id: {KEY}\n: {KEY}\n\nevent: {KEY}\ndata: {KEY}\n\n"
    )));
    // The named event's data is the key itself, not JSON.
    let payloads: Vec<Value> = r
        .data_payloads()
        .into_iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(&d).ok())
        .collect();
    assert!(payloads.len() >= 4, "{}", payloads.len());
    for p in &payloads {
        for f in ["id", "model", "system_fingerprint", "service_tier"] {
            let v = p[f].as_str().unwrap();
            assert_eq!(v.matches(KEY).count(), 1, "{f}: {}", &v[..v.len().min(200)]);
        }
    }
    // The long fields, each in its own event.
    assert_eq!(payloads[0]["model"].as_str().unwrap().len(), 100_000);
    let finish = payloads
        .iter()
        .find_map(|p| p["choices"][0]["finish_reason"].as_str())
        .unwrap();
    assert_eq!(finish.len(), 100_000);
    let usage = payloads.last().unwrap();
    assert_eq!(usage["system_fingerprint"].as_str().unwrap().len(), 100_000);
    assert_eq!(usage["usage"]["prompt_tokens"], 4294967295u64);
    assert_eq!(
        usage["usage"]["completion_tokens_details"]["reasoning_tokens"],
        4294967295u64
    );
    // A whole completion: every field, the content too.
    let r = post("evil", false).await;
    let body: Value = serde_json::from_str(&r.body_text()).unwrap();
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .ends_with(KEY)
    );
    assert_eq!(body["model"].as_str().unwrap().len(), 100_000);
    assert_eq!(body["usage"]["total_tokens"], 4294967295u64);
    // An error answer: every field of the body, the reason phrase, Retry-After as given.
    let r = post("evil-429", true).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.reason, format!("Too Many Requests {KEY}"));
    assert_eq!(r.header("retry-after"), Some("1e30"));
    let body: Value = serde_json::from_str(&r.body_text()).unwrap();
    for f in ["message", "type", "code", "param"] {
        assert!(body["error"][f].as_str().unwrap().contains(KEY), "{f}");
    }
    assert_eq!(body["error"]["message"].as_str().unwrap().len(), 100_000);
    // The same on the Anthropic API, in its error shape.
    let r = raw_request(
        addr,
        "POST",
        "/evil-429/v1/messages",
        &[("authorization", KEY)],
        r#"{"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(r.status, 429);
    assert_eq!(r.reason, format!("Too Many Requests {KEY}"));
    let body: Value = serde_json::from_str(&r.body_text()).unwrap();
    assert!(body["error"]["type"].as_str().unwrap().contains(KEY));
    assert_eq!(body["error"]["message"].as_str().unwrap().len(), 100_000);
}
