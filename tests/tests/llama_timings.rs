//! latmesh's TTFT on a real llama-server (`scripts/real-servers.sh`) against the server's own
//! account of the same work: the `timings.prompt_ms` of its answers.
//!
//! # What each side covers
//! llama-server's `prompt_ms` runs from the moment its slot starts on the prompt (after the
//! HTTP request was read and parsed, the chat template applied, the text tokenized and the task
//! queued) until the first output token has been sampled (the last prompt token's logits are
//! computed in the prompt batch, so the first token's decode is inside it). latmesh's TTFT
//! runs from `t_send` to the read that brought the first generated text, so it is
//! `prompt_ms` plus: the TCP connect and request write on loopback (tens of µs), the server's
//! HTTP parse, template, tokenization and queueing, the first token's detokenization, the SSE
//! write and the client's read (all of it 2.5–3 ms for a raw client on this 2-core VM, idle:
//! its TTFT minus the `prompt_ms` of the same request); with another request in the other
//! slot, up to one decode step of waiting for the batch in flight. Nothing in that list is another token: per request, latmesh's TTFT
//! lies above `prompt_ms` and below `prompt_ms` + one decode step
//! (`timings.predicted_per_token_ms`, the server's time between two tokens; ≈ 18 ms on this
//! VM idle, 40–55 ms while it compiles).
//!
//! # The bounds
//! The two sides are medians of different requests (see How), so the causal bounds get a
//! margin for the noise between two medians of a busy machine: the median TTFT minus the
//! median `prompt_ms` must lie in (−½ step, +1 step). With one prompt token to evaluate,
//! `prompt_ms` is itself about one step, so a TTFT stamped at the response headers (sent before
//! the prompt is processed) comes out near −1 step, under the lower bound; one stamped a token
//! late, at +1 step plus the overhead above, over the upper one, as is a TTFT stamped at the
//! end of the stream (16 steps).
//!
//! # How
//! llama-server puts `timings` in its Chat Completions answers (streamed: in the last chunk)
//! and on its Responses stream's `response.completed`, never in its Anthropic Messages
//! answers, so the reference is always a raw Chat Completions request of the same messages (the bytes
//! of `latmesh_agent::probe::request::body`, the very request latmesh sends for `api = chat`).
//! llama-server renders every API's messages through the same chat template, so the prompt
//! tokens, and the work, are the same. A probe record has no field for a server's own timings
//! (they are llama.cpp's), so the comparison is in distribution: [`PAIRS`] reference requests
//! interleaved with as many latmesh probes of the same prompt, the medians compared. The same
//! prompt each time keeps the slot's prompt cache in one state (after the first request, every
//! request re-evaluates one token: `prompt_n` 1), and the medians keep a busy machine's
//! outliers out.

use std::io::{Read as _, Write as _};

use latmesh_agent::probe::{ProbeRequest, Prober, request};
use latmesh_core::api::{Api, RequestShape};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;
use latmesh_testkit::real_servers::{LLAMA_ADDR, LLAMA_BASE_URL};

/// Reference requests, and as many probes.
const PAIRS: usize = 21;

/// Output cap of every request: 16 tokens take ≈ 300 ms to decode here, far more than the
/// bounds are wide.
const MAX_TOKENS: u32 = 16;

/// One measurement at a time: the APIs' tests of this file would otherwise share the
/// server's two slots and disturb each other's timings.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// llama-server's `timings` object (the fields used here; milliseconds).
#[derive(Debug, serde::Deserialize)]
struct Timings {
    /// Prompt tokens evaluated (the rest came from the slot's cache).
    prompt_n: u64,
    /// Prompt processing through the first token's sampling, ms.
    prompt_ms: f64,
    /// Mean time between two generated tokens, ms.
    predicted_per_token_ms: f64,
}

/// Decodes a chunked HTTP/1.1 body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size = std::str::from_utf8(&b[..eol]).expect("ASCII chunk size");
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
            .unwrap_or_else(|_| panic!("chunk size {size:?}"));
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 2 + size + 2..];
    }
}

/// POSTs `body` (a streamed Chat Completions request) to llama-server on a new connection
/// and returns the `timings` of its last chunk.
fn llama_timings(body: &[u8]) -> Timings {
    let mut s = std::net::TcpStream::connect(LLAMA_ADDR).expect("connect to llama-server");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {LLAMA_ADDR}\r\ncontent-type: application/json\r\naccept: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(&raw[split + 4..])
    } else {
        raw[split + 4..].to_vec()
    };
    let text = String::from_utf8(body).expect("UTF-8 body");
    let last = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .rfind(|d| d.contains("\"timings\""))
        .unwrap_or_else(|| panic!("no chunk with timings in:\n{text}"));
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON chunk");
    serde_json::from_value(v["timings"].clone()).expect("timings")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Interleaves [`PAIRS`] reference requests with as many latmesh probes over `api` and
/// checks the medians against the bounds of the module documentation.
async fn ttft_within_one_decode_step_of_prompt_ms(api: Api) {
    let _one = ONE_AT_A_TIME.lock().await;
    let _servers = latmesh_testkit::real_servers::ensure();
    let messages = [
        Message::new("system", "Answer in one short sentence."),
        Message::new("user", "Why is the sky blue?"),
    ];
    let timeouts = Timeouts {
        connect_s: 10.0,
        ttft_s: 30.0,
        idle_s: 30.0,
        total_s: 60.0,
    };
    let shape = RequestShape::for_api(api);
    let request_over = |shape| ProbeRequest {
        base_url: LLAMA_BASE_URL,
        model_id: "smollm2",
        api_key: None,
        messages: &messages,
        stream: true,
        max_tokens: MAX_TOKENS,
        temperature: Some(0.0),
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: None,
        shape,
        secret_headers: &[],
    };
    let probe = request_over(&shape);
    let reference = request::body(&request_over(RequestShape::chat_default()));
    let prober = Prober::new(None).unwrap();

    // Warm-up: the first request evaluates the whole prompt, later ones find it cached.
    llama_timings(&reference);
    let warm = prober.probe(&probe, false).await;
    assert_eq!(
        warm.record.outcome(),
        Outcome::Ok,
        "{api}: {:?}",
        warm.record
    );

    let (mut prompt_ms, mut step_ms, mut ttft_ms) = (Vec::new(), Vec::new(), Vec::new());
    let mut prompt_n = Vec::new();
    for _ in 0..PAIRS {
        let t = llama_timings(&reference);
        prompt_ms.push(t.prompt_ms);
        step_ms.push(t.predicted_per_token_ms);
        prompt_n.push(t.prompt_n);
        let r = prober.probe(&probe, false).await;
        let rec = &r.record;
        assert_eq!(rec.outcome(), Outcome::Ok, "{api}: {rec:?}");
        assert!(
            rec.output_tokens > 0 && rec.output_tokens <= MAX_TOKENS,
            "{api}: {rec:?}"
        );
        ttft_ms.push(rec.ttft_us.expect("ttft") as f64 / 1000.0);
    }
    let (prompt, step, ttft) = (median(prompt_ms), median(step_ms), median(ttft_ms.clone()));
    let over = ttft - prompt;
    eprintln!(
        "{api}: median TTFT {ttft:.2} ms, median prompt_ms {prompt:.2} ms (prompt_n {prompt_n:?}), \
         TTFT - prompt_ms {over:.2} ms, decode step {step:.2} ms; TTFTs {ttft_ms:.1?}"
    );
    // Same prompt, same cache state: the references re-evaluate one token (the probes'
    // prompts render to the same tokens, or the next reference would evaluate more).
    assert_eq!(median(prompt_n.iter().map(|&n| n as f64).collect()), 1.0);
    assert!(
        over > -step / 2.0,
        "{api}: latmesh's median TTFT {ttft:.2} ms is more than half a decode step ({step:.2} ms) \
         under llama-server's median prompt_ms {prompt:.2} ms"
    );
    assert!(
        over < step,
        "{api}: latmesh's median TTFT {ttft:.2} ms is more than one decode step ({step:.2} ms) \
         over llama-server's median prompt_ms {prompt:.2} ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn chat_ttft_agrees_with_llama_server_prompt_ms() {
    ttft_within_one_decode_step_of_prompt_ms(Api::Chat).await;
}

#[tokio::test(flavor = "current_thread")]
async fn anthropic_ttft_agrees_with_llama_server_prompt_ms() {
    ttft_within_one_decode_step_of_prompt_ms(Api::Anthropic).await;
}

#[tokio::test(flavor = "current_thread")]
async fn responses_ttft_agrees_with_llama_server_prompt_ms() {
    ttft_within_one_decode_step_of_prompt_ms(Api::Responses).await;
}
