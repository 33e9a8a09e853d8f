//! The probe over real loopback HTTP against a scripted raw-TCP server: kinds of fault beyond
//! the corpus (timeouts, resets, HTTP-date Retry-After, empty bodies, JSON answered to a
//! stream, secrets in error bodies).

use std::time::{Duration, Instant};

use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// One step of a scripted response.
#[derive(Clone, Debug)]
enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
    /// Close with a TCP reset instead of a clean FIN.
    Reset,
}

fn w(s: impl AsRef<[u8]>) -> Step {
    Step::Write(s.as_ref().to_vec())
}

fn ms(n: u64) -> Step {
    Step::Sleep(Duration::from_millis(n))
}

fn head200(content_type: &str) -> Step {
    w(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n"
    ))
}

/// Reads one HTTP request (headers and a Content-Length body).
async fn read_request(sock: &mut TcpStream) -> Vec<u8> {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.read(&mut buf).await.unwrap();
        if n == 0 {
            return req;
        }
        req.extend_from_slice(&buf[..n]);
        if let Some(h) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            let headers = String::from_utf8_lossy(&req[..h]).to_ascii_lowercase();
            let len: usize = headers
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if req.len() >= h + 4 + len {
                return req;
            }
        }
    }
}

/// Serves `script` to one connection; returns the base URL and the request it received.
async fn serve(script: Vec<Step>) -> (String, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let req = read_request(&mut sock).await;
        for step in script {
            match step {
                Step::Write(b) => {
                    if sock.write_all(&b).await.is_err() {
                        break;
                    }
                    let _ = sock.flush().await;
                }
                Step::Sleep(d) => tokio::time::sleep(d).await,
                Step::Reset => {
                    // A zero linger makes the close a reset (and does not block).
                    #[allow(deprecated)]
                    let _ = sock.set_linger(Some(Duration::ZERO));
                    drop(sock);
                    return req;
                }
            }
        }
        let _ = sock.shutdown().await;
        req
    });
    (format!("http://{addr}/v1"), task)
}

fn messages() -> Vec<Message> {
    vec![Message::new(
        "user",
        "Tell me the launch codes, please, right now.",
    )]
}

fn timeouts(ttft: f64, idle: f64, total: f64) -> Timeouts {
    Timeouts {
        connect_s: 2.0,
        ttft_s: ttft,
        idle_s: idle,
        total_s: total,
    }
}

async fn probe_with(base: &str, stream: bool, t: &Timeouts, key: Option<&str>) -> ProbeResult {
    let msgs = messages();
    let req = ProbeRequest {
        base_url: base,
        model_id: "deepseek-v4-flash",
        api_key: key,
        messages: &msgs,
        stream,
        max_tokens: 32,
        temperature: Some(0.0),
        top_p: None,
        timeouts: t,
        probe_id: None,
        user_agent: None,
        shape: latmesh_core::api::RequestShape::chat_default(),
        secret_headers: &[],
    };
    Prober::new(Some("eu-west"))
        .unwrap()
        .probe(&req, true)
        .await
}

async fn probe(base: &str, stream: bool, t: &Timeouts) -> ProbeResult {
    probe_with(base, stream, t, None).await
}

fn token(s: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{s}\"}},\"finish_reason\":null}}]}}\n\n"
    )
}

const STOP: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

#[tokio::test]
async fn sends_region_key_and_body_and_measures_a_stream() {
    let (base, server) = serve(vec![
        head200("text/event-stream"),
        ms(30),
        w(token("a")),
        ms(30),
        w(token("b")),
        w(STOP),
        w("data: [DONE]\n\n"),
    ])
    .await;
    let r = probe_with(&base, true, &Timeouts::default(), Some("sk-test-123")).await;
    let req = String::from_utf8(server.await.unwrap()).unwrap();
    let lower = req.to_ascii_lowercase();
    assert!(
        req.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
        "{req}"
    );
    assert!(
        lower.contains(&format!("{REGION_HEADER}: eu-west\r\n")),
        "{req}"
    );
    assert!(
        lower.contains("authorization: bearer sk-test-123\r\n"),
        "{req}"
    );
    assert!(
        req.contains(r#""stream_options":{"include_usage":true}"#),
        "{req}"
    );
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
    assert_eq!(
        (r.content_text.as_str(), rec.saw_done, rec.output_tokens),
        ("ab", true, 2)
    );
    let (ttfb, ttft, e2e) = (
        rec.ttfb_us.unwrap(),
        rec.ttft_us.unwrap(),
        rec.e2e_us.unwrap(),
    );
    assert!(ttfb < ttft && ttft <= e2e, "{rec:?}");
    assert!(ttft >= 25_000, "{rec:?}");
    assert!(r.itl_gaps_us[0] >= 25_000, "{:?}", r.itl_gaps_us);
    assert!(rec.send_agent_unix_us > 1_600_000_000_000_000);
    let out = ProbeOutput::new(&r, false);
    assert_eq!(out.record.outcome(), latmesh_core::record::Outcome::Ok);
    assert_eq!(out.itl_p50_us, Some(r.itl_gaps_us[0]));
    let json = serde_json::to_value(&out).unwrap();
    assert!(json.get("content_text").is_none());
    assert!(serde_json::to_value(ProbeOutput::new(&r, true)).unwrap()["content_text"] == "ab");
    // The texts printed with `--show-text` lose an echoed key.
    let mut echoed = r.clone();
    echoed.content_text = "your key is sk-abcdefghijklmnop, really".into();
    echoed.reasoning_text = "abcdefghijklmnop".into();
    let shown = serde_json::to_value(
        ProbeOutput::new(&echoed, true).without_key(Some("sk-abcdefghijklmnop")),
    )
    .unwrap();
    assert_eq!(shown["content_text"], "your key is [redacted], really");
    assert_eq!(shown["reasoning_text"], "[redacted]");
    // What `latmesh probe` prints: the record's order, no plan fields, the same values.
    let text = out.to_json_pretty();
    let printed: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut expected = json.as_object().unwrap().clone();
    for k in super::PLAN_FIELDS {
        assert!(expected.remove(*k).is_some(), "{k} is not a record field");
    }
    assert_eq!(printed.as_object().unwrap(), &expected);
    let at = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(
        at("attempt") < at("outcome") && at("outcome") < at("tool_calls"),
        "{text}"
    );
}

/// What a provider receives from a prober with the default settings: a common client's
/// user agent and nothing that names latmesh or a region; a campaign's user agent replaces
/// the default.
#[tokio::test]
async fn a_provider_receives_nothing_that_identifies_latmesh() {
    let regions = ["us-east", "eu-west", "ap-southeast"];
    for user_agent in [None, Some("my-app/2.1 (+ops@example.com)")] {
        let (base, server) = serve(vec![
            head200("text/event-stream"),
            w(token("a")),
            w(STOP),
            w("data: [DONE]\n\n"),
        ])
        .await;
        let msgs = vec![Message::new("user", "Say hi.")];
        let t = Timeouts::default();
        let req = ProbeRequest {
            base_url: &base,
            model_id: "m",
            api_key: Some("sk-test-123"),
            messages: &msgs,
            stream: true,
            max_tokens: 8,
            temperature: None,
            top_p: None,
            timeouts: &t,
            probe_id: None,
            user_agent,
            shape: latmesh_core::api::RequestShape::chat_default(),
            secret_headers: &[],
        };
        let r = Prober::new(None).unwrap().probe(&req, false).await;
        assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
        let raw = String::from_utf8(server.await.unwrap()).unwrap();
        let lower = raw.to_ascii_lowercase();
        assert!(!lower.contains("latmesh"), "{raw}");
        for region in regions {
            assert!(!lower.contains(region), "{raw}");
        }
        let ua = user_agent.unwrap_or(request::DEFAULT_USER_AGENT);
        assert!(raw.contains(&format!("user-agent: {ua}\r\n")), "{raw}");
        let mut names: Vec<&str> = raw
            .split("\r\n\r\n")
            .next()
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| l.split(':').next().unwrap())
            .collect();
        names.sort_unstable();
        let only = [
            "accept",
            "accept-encoding",
            "authorization",
            "content-length",
            "content-type",
            "host",
            "user-agent",
        ];
        assert_eq!(names, only, "no other header: {raw}");
    }
}

/// The region and probe-id headers go to a loopback peer only, whatever the prober was
/// asked to send.
#[test]
fn emulation_headers_never_leave_for_a_host_that_is_not_loopback() {
    let region = http::HeaderValue::from_static("eu-west");
    let id = http::HeaderValue::from_static("probe-7");
    for peer in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
        let h = emulation_headers(peer.parse().unwrap(), Some(&region), Some(&id));
        assert_eq!(h.len(), 2, "{peer}");
        assert_eq!(h[REGION_HEADER], "eu-west");
        assert_eq!(h[PROBE_ID_HEADER], "probe-7");
        assert!(emulation_headers(peer.parse().unwrap(), None, None).is_empty());
    }
    for peer in [
        "203.0.113.9",
        "10.0.0.1",
        "192.168.1.2",
        "0.0.0.0",
        "2001:db8::1",
        "::ffff:203.0.113.9",
        "fe80::1",
    ] {
        let h = emulation_headers(peer.parse().unwrap(), Some(&region), Some(&id));
        assert!(h.is_empty(), "{peer}: {h:?}");
    }
}

#[test]
fn region_header_matches_the_simulator() {
    assert_eq!(REGION_HEADER, latmesh_sim::REGION_HEADER);
}

#[test]
fn debug_output_has_no_secrets() {
    let msgs = messages();
    let t = Timeouts::default();
    let req = ProbeRequest {
        base_url: "http://127.0.0.1:1/v1",
        model_id: "m",
        api_key: Some("sk-secret-9"),
        messages: &msgs,
        stream: true,
        max_tokens: 1,
        temperature: None,
        top_p: None,
        timeouts: &t,
        probe_id: None,
        user_agent: None,
        shape: latmesh_core::api::RequestShape::chat_default(),
        secret_headers: &[],
    };
    let dbg = format!("{req:?}");
    assert!(
        !dbg.contains("sk-secret-9") && !dbg.contains("launch codes"),
        "{dbg}"
    );
}

#[tokio::test]
async fn http_503_with_retry_after_as_http_date() {
    let at = std::time::SystemTime::now() + Duration::from_secs(120);
    let (base, _s) = serve(vec![w(format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: {}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{{\"error\":{{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":\"overloaded\"}}}}",
        httpdate::fmt_http_date(at)
    ))])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    let rec = &r.record;
    assert_eq!(
        (rec.outcome, rec.http_status),
        (Some(Outcome::Http5xx), Some(503))
    );
    let ra = rec.retry_after_s.unwrap();
    assert!((117.0..=120.0).contains(&ra), "{ra}");
    assert_eq!(rec.error_type.as_deref(), Some("server_error"));
    assert_eq!(r.record.error_code.as_deref(), Some("overloaded"));
    assert_eq!(rec.error_code.as_deref(), Some("overloaded"));
    assert_eq!(rec.error_message.as_deref(), Some("overloaded"));
    assert!(rec.e2e_us.is_some() && rec.ttft_us.is_none());
}

#[tokio::test]
async fn http_429_with_retry_after_ms_and_401_without_body() {
    let (base, _s) = serve(vec![w(
        "HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\nretry-after-ms: 1500\r\ncontent-length: 0\r\n\r\n",
    )])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(
        (r.record.outcome, r.record.retry_after_s),
        (Some(Outcome::Throttled), Some(1.5))
    );
    assert_eq!(
        r.record.error_message.as_deref(),
        Some("HTTP 429 Too Many Requests")
    );
    let (base, _s) = serve(vec![w(
        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
    )])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(
        (r.record.outcome, r.record.http_status),
        (Some(Outcome::Http4xx), Some(404))
    );
}

#[tokio::test]
async fn error_bodies_never_carry_the_key_or_the_prompt() {
    let body = format!(
        "{{\"error\":{{\"message\":\"Incorrect API key sk-test-123 for prompt '{}'\",\"type\":\"invalid_request_error\"}}}}",
        messages()[0].content
    );
    let (base, _s) = serve(vec![w(format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))])
    .await;
    let r = probe_with(&base, true, &Timeouts::default(), Some("sk-test-123")).await;
    let msg = r.record.error_message.unwrap();
    assert_eq!(msg, "Incorrect API key [redacted] for prompt '[redacted]'");
}

#[tokio::test]
async fn empty_200_body_is_a_protocol_error() {
    let (base, _s) = serve(vec![head200("text/event-stream")]).await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert_eq!(r.record.error_message.as_deref(), Some("empty 200 body"));
    assert_eq!(r.record.response_bytes, 0);
    let (base, _s) = serve(vec![head200("application/json")]).await;
    let r = probe(&base, false, &Timeouts::default()).await;
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
}

#[tokio::test]
async fn json_body_answered_to_a_streaming_request() {
    let body = r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"Four."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    for ct in ["application/json", "text/plain"] {
        let (base, _s) = serve(vec![head200(ct), w(body)]).await;
        let r = probe(&base, true, &Timeouts::default()).await;
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError), "{ct}");
        assert!(
            r.record
                .error_message
                .as_deref()
                .unwrap()
                .contains("whole JSON completion"),
            "{ct}"
        );
        assert_eq!(
            (r.content_text.as_str(), r.record.output_tokens),
            ("Four.", 2),
            "{ct}"
        );
        assert_eq!(r.record.finish_reason.as_deref(), Some("stop"));
    }
}

#[tokio::test]
async fn connection_refused_is_a_connection_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let r = probe(&format!("http://{addr}/v1"), true, &Timeouts::default()).await;
    assert_eq!(r.record.outcome, Some(Outcome::ConnectionError));
    assert_eq!((r.record.http_status, r.record.ttfb_us), (None, None));
    let msg = r.record.error_message.unwrap();
    assert!(!msg.contains("127.0.0.1"), "the URL is left out: {msg}");
}

#[tokio::test]
async fn ttft_timeout_while_only_comments_arrive() {
    let mut script = vec![head200("text/event-stream")];
    for _ in 0..200 {
        script.push(w(": keep-alive\n\n"));
        script.push(ms(25));
    }
    let (base, _s) = serve(script).await;
    let t0 = Instant::now();
    let r = probe(&base, true, &timeouts(0.3, 1.0, 10.0)).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::TimeoutTtft),
        "{:?}",
        r.record
    );
    assert!(t0.elapsed() < Duration::from_millis(2_500));
    assert!(r.record.comment_lines >= 5);
}

#[tokio::test]
async fn ttft_timeout_before_headers_for_streams_and_total_for_whole_answers() {
    let (base, _s) = serve(vec![ms(2_000)]).await;
    let r = probe(&base, true, &timeouts(0.2, 0.1, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::TimeoutTtft));
    assert_eq!(r.record.ttfb_us, None);
    let (base, _s) = serve(vec![ms(2_000)]).await;
    let r = probe(&base, false, &timeouts(0.1, 0.1, 0.3)).await;
    assert_eq!(r.record.outcome, Some(Outcome::TimeoutTotal));
}

#[tokio::test]
async fn idle_timeout_after_a_token() {
    let (base, _s) = serve(vec![head200("text/event-stream"), w(token("a")), ms(2_000)]).await;
    let r = probe(&base, true, &timeouts(5.0, 0.2, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::TimeoutIdle));
    assert!(r.record.ttft_us.is_some() && r.record.e2e_us.is_none());
}

#[tokio::test]
async fn total_timeout_while_tokens_trickle() {
    let mut script = vec![head200("text/event-stream")];
    for _ in 0..200 {
        script.push(w(token("t")));
        script.push(ms(25));
    }
    let (base, _s) = serve(script).await;
    let r = probe(&base, true, &timeouts(5.0, 1.0, 0.3)).await;
    assert_eq!(r.record.outcome, Some(Outcome::TimeoutTotal));
    assert!(r.record.content_chunks >= 5);
}

#[tokio::test]
async fn a_stream_error_then_a_stall_stays_a_stream_error() {
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        w(token("a")),
        w("data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n"),
        ms(2_000),
    ])
    .await;
    let r = probe(&base, true, &timeouts(5.0, 0.2, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::StreamError));
    assert_eq!(r.record.error_message.as_deref(), Some("boom"));
}

#[tokio::test]
async fn reset_or_close_mid_stream_is_truncated() {
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        w(token("a")),
        ms(20),
        Step::Reset,
    ])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(r.record.outcome, Some(Outcome::Truncated), "{:?}", r.record);
    assert_eq!(r.content_text, "a");
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        w(token("a")),
        w("data: {\"choices\":[{\"delta\":"),
    ])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(r.record.outcome, Some(Outcome::Truncated));
    assert_eq!(r.record.e2e_us, None);
}

#[tokio::test]
async fn done_without_end_of_body_is_ok_after_a_short_drain() {
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        w(token("a")),
        w(STOP),
        w("data: [DONE]\n\n"),
        ms(3_000),
    ])
    .await;
    let t0 = Instant::now();
    let r = probe(&base, true, &timeouts(5.0, 2.0, 5.0)).await;
    assert_eq!(r.record.outcome, Some(Outcome::Ok));
    assert!(t0.elapsed() < Duration::from_millis(2_500));
    assert!(r.record.e2e_us.unwrap() < 1_000_000);
}

#[tokio::test]
async fn split_payloads_over_http_at_many_offsets() {
    let body = format!(
        "{}{}{}data: [DONE]\n\n",
        token("你好"),
        token("，世界"),
        STOP
    );
    let bytes = body.as_bytes().to_vec();
    for cut in (1..bytes.len()).step_by(7) {
        let (base, _s) = serve(vec![
            head200("text/event-stream"),
            Step::Write(bytes[..cut].to_vec()),
            ms(5),
            Step::Write(bytes[cut..].to_vec()),
        ])
        .await;
        let r = probe(&base, true, &Timeouts::default()).await;
        assert_eq!(
            (r.record.outcome, r.content_text.as_str()),
            (Some(Outcome::Ok), "你好，世界"),
            "cut {cut}"
        );
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (base, _s) = serve(vec![w(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n",
    )])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    assert_eq!(
        (r.record.outcome, r.record.http_status),
        (Some(Outcome::ProtocolError), Some(307))
    );
}

/// A listener whose accept queue is full drops SYNs, so connecting hangs.
#[tokio::test]
async fn connect_timeout() {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = sock.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // Fill the queue (never accepted).
    let mut fillers = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(100), TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    if fillers.len() == 8 {
        // The kernel did not hold back any connect: nothing to assert about timeouts here.
        eprintln!("accept queue never filled; skipped");
        return;
    }
    let t = Timeouts {
        connect_s: 0.3,
        ttft_s: 5.0,
        idle_s: 5.0,
        total_s: 5.0,
    };
    let r = probe(&format!("http://{addr}/v1"), true, &t).await;
    assert_eq!(
        r.record.outcome,
        Some(Outcome::TimeoutConnect),
        "{:?}",
        r.record
    );
}

/// A stream that opens with blank lines, then keep-alive comments, each after a known sleep:
/// first byte, first non-blank byte and first token are stamped at their own reads.
#[tokio::test]
async fn first_byte_and_first_nonblank_before_the_first_token() {
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        ms(50),
        w("\n\n"),
        ms(150),
        w(": keep-alive\n\n"),
        ms(150),
        w(": keep-alive\n\n"),
        ms(150),
        w(token("a")),
        w(STOP),
        w("data: [DONE]\n\n"),
    ])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
    let (ttfb, first_byte, first_nonblank, ttft, e2e) = (
        rec.ttfb_us.unwrap(),
        rec.first_byte_us.unwrap(),
        rec.first_nonblank_us.unwrap(),
        rec.ttft_us.unwrap(),
        rec.e2e_us.unwrap(),
    );
    assert!(
        ttfb < first_byte && first_byte < first_nonblank && first_nonblank < ttft && ttft <= e2e,
        "{rec:?}"
    );
    // 150 ms of blank lines, then 300 ms of keep-alive comments before the token (each gap
    // is at least its sleep minus how late the earlier read was stamped; allow 50 ms).
    assert!(first_nonblank - first_byte >= 100_000, "{rec:?}");
    assert!(ttft - first_nonblank >= 250_000, "{rec:?}");
    assert_eq!(ttft, rec.ttfc_us.unwrap());
    assert_eq!(
        (rec.comment_lines, rec.token_payloads, rec.reasoning_us),
        (2, 1, None)
    );
}

/// Non-streaming, measured on its own: a JSON body after blank lines sent while the request
/// is queued (DeepSeek), tokens from usage.
#[tokio::test]
async fn non_streaming_answer_after_blank_lines() {
    let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Four.","reasoning_content":"2+2=4"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"completion_tokens_details":{"reasoning_tokens":6},"prompt_tokens_details":{"cached_tokens":4}}}"#;
    let (base, _s) = serve(vec![
        head200("application/json"),
        ms(50),
        w("\n\n"),
        ms(150),
        w("\n"),
        ms(150),
        w(&body[..30]),
        ms(100),
        w(&body[30..]),
    ])
    .await;
    let r = probe(&base, false, &Timeouts::default()).await;
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
    assert!(!rec.stream);
    let (ttfb, first_byte, first_nonblank, e2e) = (
        rec.ttfb_us.unwrap(),
        rec.first_byte_us.unwrap(),
        rec.first_nonblank_us.unwrap(),
        rec.e2e_us.unwrap(),
    );
    assert!(
        ttfb < first_byte && first_byte < first_nonblank && first_nonblank < e2e,
        "{rec:?}"
    );
    assert!(first_nonblank - first_byte >= 250_000, "{rec:?}");
    assert!(e2e - first_nonblank >= 50_000, "{rec:?}");
    // No token timing for a whole answer.
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.reasoning_us, rec.tpot_us),
        (None, None, None, None)
    );
    assert_eq!((rec.output_tokens, rec.tokens_from_usage), (9, true));
    assert_eq!(
        (rec.usage.reasoning_tokens, rec.usage.cached_tokens),
        (Some(6), Some(4))
    );
    // A body read whole is one payload: no usage-vs-chunks delta.
    assert_eq!((rec.token_payloads, rec.usage_chunk_delta), (1, None));
    assert_eq!(
        (r.content_text.as_str(), r.reasoning_text.as_str()),
        ("Four.", "2+2=4")
    );
    assert_eq!(rec.response_bytes, (body.len() + 3) as u64);
}

/// A reasoning model: reasoning payloads before the first content payload give the reasoning
/// time; usage in the final empty-choices chunk gives the tokens and the chunk delta.
#[tokio::test]
async fn reasoning_time_and_usage_over_http() {
    let reason = |s: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":null,\"reasoning_content\":\"{s}\"}}}}]}}\n\n"
        )
    };
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        ms(20),
        w(reason("think")),
        ms(100),
        w(reason(" more")),
        ms(100),
        w(token("x")),
        w(STOP),
        w("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":10,\"total_tokens\":15}}\n\n"),
        w("data: [DONE]\n\n"),
    ])
    .await;
    let r = probe(&base, true, &Timeouts::default()).await;
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
    let (ttft, ttfc) = (rec.ttft_us.unwrap(), rec.ttfc_us.unwrap());
    assert_eq!(rec.reasoning_us, Some(ttfc - ttft), "{rec:?}");
    assert!(ttfc - ttft >= 150_000, "{rec:?}");
    assert_eq!(
        (rec.reasoning_chunks, rec.content_chunks, rec.token_payloads),
        (2, 1, 3)
    );
    assert_eq!(
        (
            rec.output_tokens,
            rec.tokens_from_usage,
            rec.usage_chunk_delta
        ),
        (10, true, Some(7))
    );
}

/// An event larger than the 4 MiB cap ends the attempt as a protocol error without reading
/// the rest.
#[tokio::test]
async fn an_oversized_event_is_a_protocol_error() {
    let mut script = vec![head200("text/event-stream"), w(token("a")), w("data: ")];
    for _ in 0..80 {
        script.push(Step::Write(vec![b'x'; 64 * 1024]));
    }
    let (base, _s) = serve(script).await;
    let r = probe(&base, true, &Timeouts::default()).await;
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::ProtocolError), "{rec:?}");
    let msg = rec.error_message.as_deref().unwrap();
    assert!(msg.contains("longer than 4194304 bytes"), "{msg}");
    assert_eq!((rec.content_chunks, rec.token_payloads), (1, 1));
    assert!(rec.response_bytes < 5 << 20, "{rec:?}");
}

/// A hostile stream: the key echoed into the id/event/comment lines and into every JSON
/// field, a 3 MB `finish_reason`, absurd usage. The record keeps none of the key, every
/// string within its bound, no absurd count, and names what was cut.
#[tokio::test]
async fn a_hostile_stream_is_bounded_scrubbed_and_says_what_was_cut() {
    let key = "sk-hostile-canary-0123456789abcdef";
    let huge = format!("{key}{}", "x".repeat(3 << 20));
    let fp = format!("{key}{}", "f".repeat(1 << 20));
    let chunk = |fp: &str, finish: &str, usage: &str| {
        format!(
            "event: {key}\ndata: {key}\n\nid: {key}\n: {key}\ndata: {{\"id\":\"{key}\",\"model\":\"m-{key}\",\"system_fingerprint\":\"{fp}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{key}\"}},\"finish_reason\":{finish}}}]{usage}}}\n\n"
        )
    };
    let (base, _s) = serve(vec![
        head200("text/event-stream"),
        w(chunk(&fp, "null", "")),
        w(chunk(
            "",
            &format!("\"{huge}\""),
            r#","usage":{"prompt_tokens":4294967295,"completion_tokens":1e30,"total_tokens":-5,"completion_tokens_details":{"reasoning_tokens":"lots"}}"#,
        )),
        w("data: [DONE]\n\n"),
    ])
    .await;
    let r = probe_with(&base, true, &timeouts(10.0, 10.0, 30.0), Some(key)).await;
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok), "{rec:?}");
    let json = serde_json::to_string(rec).unwrap();
    assert!(!json.contains("hostile-canary"), "{json}");
    assert!(json.len() < 4096, "{} bytes", json.len());
    let fr = rec.finish_reason.as_deref().unwrap();
    assert_eq!(fr, format!("[redacted]{}…", "x".repeat(51)));
    assert_eq!(rec.answered_model.as_deref(), Some("m-[redacted]"));
    assert!(rec.system_fingerprint.as_deref().unwrap().len() <= 128);
    // 4294967295 and 1e30 are no counts; -5 and "lots" never were.
    assert_eq!(rec.usage, latmesh_core::record::Usage::default());
    // Output tokens then come from the payloads.
    assert_eq!(rec.output_tokens, 2);
    assert_eq!(
        rec.cut_fields,
        vec![
            "usage.prompt_tokens",
            "usage.completion_tokens",
            "finish_reason",
            "answered_model",
            "system_fingerprint",
        ]
    );
}

/// An error answer echoing the key in its status line, headers and every field of its body,
/// with an absurd Retry-After: nothing of the key is kept, Retry-After is bounded.
#[tokio::test]
async fn a_hostile_error_answer_is_scrubbed_and_its_retry_after_bounded() {
    let key = "sk-hostile-canary-fedcba9876543210";
    for (retry_after, want) in [("1e30", Some(86_400.0)), ("NaN", None), ("-3", None)] {
        let body = format!(
            "{{\"error\":{{\"message\":\"bad {key} {}\",\"type\":\"{key}\",\"code\":\"{key}\",\"param\":\"{key}\"}}}}",
            "m".repeat(30_000)
        );
        let (base, _s) = serve(vec![w(format!(
            "HTTP/1.1 429 Slow down {key}\r\ncontent-type: application/json\r\nx-echo: {key}\r\nretry-after: {retry_after}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))])
        .await;
        let r = probe_with(&base, false, &Timeouts::default(), Some(key)).await;
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Throttled));
        assert_eq!(rec.retry_after_s, want, "{retry_after}");
        let json = serde_json::to_string(rec).unwrap();
        assert!(!json.contains("hostile-canary"), "{json}");
        assert_eq!(rec.error_type.as_deref(), Some("[redacted]"));
        assert_eq!(rec.error_code.as_deref(), Some("[redacted]"));
        assert!(rec.error_message.as_deref().unwrap().len() <= 256);
        assert_eq!(
            rec.cut_fields,
            vec!["error_type", "error_code", "error_message", "retry_after_s"],
            "{retry_after}"
        );
    }
}
