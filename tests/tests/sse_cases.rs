//! The provider-quirk corpus (`tests/fixtures/sse-cases/`, the repository's one copy; with
//! `LATMESH_SSE_CASES` naming another copy, [`corpus_matches_upstream`] checks it against that
//! one) through the real probe path: each recorded body is served over
//! loopback HTTP by the simulator's replay server (`latmesh_sim::serve_replay`, which honours
//! the sidecar's status, headers and `delivery.split_after_bytes`), probed with
//! `latmesh_agent::probe::Prober`, and every field of its `.expect.json` is checked.
//!
//! A case whose sidecar says `200` with a JSON content type answers a non-streaming request
//! (case 02); every other case is probed with `stream: true`.

use std::path::{Path, PathBuf};

use latmesh_agent::probe::{ProbeOutput, ProbeRequest, ProbeResult, Prober, ToolCall};
use latmesh_core::api::{Api, ReasoningTags, RequestShape};
use latmesh_core::output_tokens::output_tokens;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::{Outcome, OutputTokensSource};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/sse-cases")
}

/// Generates one test per case, and `CASES`, the list the completeness test checks.
macro_rules! cases {
    ($($test:ident => $case:literal,)*) => {
        const CASES: &[&str] = &[$($case),*];
        $(
            #[tokio::test]
            async fn $test() {
                run_case($case).await;
            }
        )*
    };
}

cases! {
    case_01_openrouter_processing_comment => "01-openrouter-processing-comment",
    case_02_deepseek_nonstream_blank_lines => "02-deepseek-nonstream-blank-lines",
    case_03_data_no_space => "03-data-no-space",
    case_04_crlf_line_endings => "04-crlf-line-endings",
    case_06_bare_error_envelope => "06-bare-error-envelope",
    case_07_llamacpp_error_field => "07-llamacpp-error-field",
    case_08_named_event_id_retry => "08-named-event-id-retry",
    case_10_usage_only_final_chunk => "10-usage-only-final-chunk",
    case_13_deepseek_reasoning_content => "13-deepseek-reasoning-content",
    case_15_utf8_split_reads => "15-utf8-split-reads",
    case_17_no_done_after_finish => "17-no-done-after-finish",
    case_18_truncated_midstream => "18-truncated-midstream",
    case_20_http429_retry_after => "20-http429-retry-after",
    case_21_http502_html => "21-http502-html",
    case_22_tool_calls_no_id => "22-tool-calls-no-id",
    case_40_anthropic_text_pings => "40-anthropic-text-pings",
    case_41_anthropic_extended_thinking => "41-anthropic-extended-thinking",
    case_42_anthropic_tool_use => "42-anthropic-tool-use",
    case_43_anthropic_midstream_overloaded => "43-anthropic-midstream-overloaded",
    case_44_anthropic_http529_overloaded => "44-anthropic-http529-overloaded",
    case_45_anthropic_no_message_stop => "45-anthropic-no-message-stop",
    case_46_anthropic_cut_midstream => "46-anthropic-cut-midstream",
    case_47_anthropic_nonstream_thinking => "47-anthropic-nonstream-thinking",
    case_48_anthropic_cache_usage => "48-anthropic-cache-usage",
    case_49_anthropic_redacted_thinking => "49-anthropic-redacted-thinking",
    case_50_anthropic_no_event_lines => "50-anthropic-no-event-lines",
    case_51_llamacpp_anthropic_cache_read => "51-llamacpp-anthropic-cache-read",
    case_52_anthropic_omitted_thinking => "52-anthropic-omitted-thinking",
    case_53_anthropic_server_tools_and_unknown_kinds => "53-anthropic-server-tools-and-unknown-kinds",
    case_54_anthropic_gateway_error_stop_then_error => "54-anthropic-gateway-error-stop-then-error",
    case_60_responses_text_stream => "60-responses-text-stream",
    case_61_responses_reasoning_summary_then_text => "61-responses-reasoning-summary-then-text",
    case_62_responses_function_call_argument_deltas => "62-responses-function-call-argument-deltas",
    case_63_responses_failed => "63-responses-failed",
    case_64_responses_incomplete_max_output_tokens => "64-responses-incomplete-max-output-tokens",
    case_65_responses_error_event => "65-responses-error-event",
    case_66_responses_cut_before_completed => "66-responses-cut-before-completed",
    case_67_responses_nonstream_reasoning_message_usage => "67-responses-nonstream-reasoning-message-usage",
    case_68_responses_no_event_lines_and_done => "68-responses-no-event-lines-and-done",
    case_69_responses_refusal_deltas => "69-responses-refusal-deltas",
    case_70_responses_llamacpp_minimal_events => "70-responses-llamacpp-minimal-events",
    case_71_responses_tool_inputs_of_every_kind => "71-responses-tool-inputs-of-every-kind",
    case_72_responses_audio_output => "72-responses-audio-output",
    case_73_responses_encrypted_reasoning_only => "73-responses-encrypted-reasoning-only",
    case_74_responses_failed_then_error_event => "74-responses-failed-then-error-event",
    case_80_openai_refusal_only => "80-openai-refusal-only",
    case_81_openai_audio_transcript => "81-openai-audio-transcript",
    case_82_gzip_event_stream => "82-gzip-event-stream",
    case_83_gzip_http429_error => "83-gzip-http429-error",
    case_84_brotli_not_accepted => "84-brotli-not-accepted",
    case_85_think_tags_in_content => "85-think-tags-in-content",
    case_86_think_close_tag_only => "86-think-close-tag-only",
    case_87_deflate_nonstream_json => "87-deflate-nonstream-json",
    case_88_brotli_http503_error => "88-brotli-http503-error",
    case_89_openai_custom_tool_input => "89-openai-custom-tool-input",
    case_90_openrouter_midstream_error_finish => "90-openrouter-midstream-error-finish",
    case_91_openai_unstreamed_reasoning_tokens => "91-openai-unstreamed-reasoning-tokens",
    case_92_openai_audio_before_transcript => "92-openai-audio-before-transcript",
}

/// The corpus README's outcome names mapped to latmesh's (docs/metrics.md).
fn map_outcome(name: &str) -> Outcome {
    match name {
        "ok" => Outcome::Ok,
        "truncated" => Outcome::Truncated,
        "error:stream_error" | "error:insufficient_system_resource" => Outcome::StreamError,
        "error:http_429" => Outcome::Throttled,
        "error:empty_response" | "error:protocol_error" => Outcome::ProtocolError,
        other => match other
            .strip_prefix("error:http_")
            .and_then(|s| s.chars().next())
        {
            Some('5') => Outcome::Http5xx,
            Some('4') => Outcome::Http4xx,
            _ => panic!("unknown corpus outcome {other:?}: map it in sse_cases.rs"),
        },
    }
}

fn opt_u32(v: &Value) -> Option<u32> {
    v.as_u64().map(|n| u32::try_from(n).unwrap())
}

fn opt_str(v: &Value) -> Option<&str> {
    v.as_str()
}

/// Serves `case` with the simulator's replay server and probes it in `shape`.
async fn probe_case(case: &str, stream: bool, shape: &RequestShape) -> ProbeResult {
    let sse = fixtures().join(format!("{case}.sse"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { latmesh_sim::serve_replay(listener, &sse).await });
    let messages = vec![Message::new("user", "Which is larger, 9.8 or 9.11?")];
    let timeouts = Timeouts {
        connect_s: 5.0,
        ttft_s: 10.0,
        idle_s: 10.0,
        total_s: 20.0,
    };
    let base_url = format!("http://{addr}/v1");
    let req = ProbeRequest {
        base_url: &base_url,
        model_id: "deepseek-v4-flash",
        api_key: Some("sk-corpus-test"),
        messages: &messages,
        stream,
        max_tokens: 64,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: None,
        shape,
        secret_headers: &[],
    };
    let prober = Prober::new(Some("test-region")).unwrap();
    let r = prober.probe(&req, true).await;
    if server.is_finished() {
        panic!("{case}: replay server stopped: {:?}", server.await);
    }
    server.abort();
    r
}

async fn run_case(case: &str) {
    let expect: Value = serde_json::from_slice(
        &std::fs::read(fixtures().join(format!("{case}.expect.json"))).unwrap(),
    )
    .unwrap();
    let status = expect["http"]["status"].as_u64().unwrap() as u16;
    let content_type = expect["http"]["headers"]["content-type"]
        .as_str()
        .unwrap_or("");
    let stream = !((200..300).contains(&status) && content_type.contains("json"));
    // The API whose body this is (`"api"`: chat when absent).
    let api = expect
        .get("api")
        .and_then(Value::as_str)
        .map_or(Ok(Api::Chat), Api::parse)
        .unwrap();
    // The reasoning tags its provider declares (`"reasoning_tags"`, latmesh's addition).
    let mut shape = RequestShape::for_api(api);
    shape.reasoning_tags = expect.get("reasoning_tags").map(|t| ReasoningTags {
        open: t["open"].as_str().unwrap().to_string(),
        close: t["close"].as_str().unwrap().to_string(),
    });
    let r = probe_case(case, stream, &shape).await;
    let rec = &r.record;
    let ctx = format!("{case}: {rec:#?}");

    let mut accepted = vec![map_outcome(expect["outcome"].as_str().unwrap())];
    if let Some(alt) = expect
        .get("acceptable_alternative_outcome")
        .and_then(Value::as_str)
    {
        accepted.push(map_outcome(alt));
    }
    assert!(
        accepted.contains(&rec.outcome()),
        "outcome {:?} not in {accepted:?}; {ctx}",
        rec.outcome
    );
    assert_eq!(rec.http_status, Some(status), "{ctx}");
    assert_eq!(rec.stream, stream, "{ctx}");

    assert_eq!(
        r.content_text,
        expect["content_text"].as_str().unwrap(),
        "{ctx}"
    );
    assert_eq!(
        r.reasoning_text,
        expect["reasoning_text"].as_str().unwrap(),
        "{ctx}"
    );
    assert_eq!(
        Some(rec.content_chunks),
        opt_u32(&expect["content_chunks"]),
        "{ctx}"
    );
    assert_eq!(
        Some(rec.reasoning_chunks),
        opt_u32(&expect["reasoning_chunks"]),
        "{ctx}"
    );

    let usage = &expect["usage"];
    if usage.is_null() {
        assert_eq!(rec.usage, Default::default(), "usage; {ctx}");
        assert!(!rec.tokens_from_usage, "{ctx}");
    } else {
        assert_eq!(
            rec.usage.prompt_tokens,
            opt_u32(&usage["prompt_tokens"]),
            "{ctx}"
        );
        assert_eq!(
            rec.usage.completion_tokens,
            opt_u32(&usage["completion_tokens"]),
            "{ctx}"
        );
        assert_eq!(
            rec.usage.total_tokens,
            opt_u32(&usage["total_tokens"]),
            "{ctx}"
        );
        assert_eq!(
            rec.usage.reasoning_tokens,
            opt_u32(&usage["reasoning_tokens"]),
            "{ctx}"
        );
        // The count by the documented rule (a stream: the larger of usage and payloads).
        let (tokens, source) = output_tokens(
            rec.usage.completion_tokens,
            rec.usage.reasoning_tokens,
            rec.token_payloads,
            stream,
        );
        assert_eq!(
            (rec.output_tokens, rec.output_tokens_source),
            (tokens, source),
            "{ctx}"
        );
        assert!(
            rec.output_tokens >= rec.usage.completion_tokens.unwrap(),
            "{ctx}"
        );
        assert_eq!(rec.tokens_from_usage, source.from_usage(), "{ctx}");
        if let Some(cached) = usage.get("cached_tokens") {
            assert_eq!(rec.usage.cached_tokens, opt_u32(cached), "{ctx}");
        }
        // How far counting token payloads is from the provider's count, in a stream only
        // (a body read whole is one payload).
        assert_eq!(
            rec.usage_chunk_delta,
            rec.usage
                .completion_tokens
                .filter(|_| stream)
                .map(|c| i64::from(c) - i64::from(rec.token_payloads)),
            "{ctx}"
        );
    }
    if rec.usage.completion_tokens.is_none() {
        assert_eq!(rec.usage_chunk_delta, None, "{ctx}");
        assert_eq!(
            (rec.output_tokens, rec.output_tokens_source),
            (rec.token_payloads, OutputTokensSource::Payloads),
            "{ctx}"
        );
    }

    assert_eq!(
        rec.finish_reason.as_deref(),
        opt_str(&expect["finish_reason"]),
        "{ctx}"
    );
    assert_eq!(rec.saw_done, expect["saw_done"].as_bool().unwrap(), "{ctx}");
    assert_eq!(
        r.first_output_payload_index,
        opt_u32(&expect["first_output_payload_index"]),
        "{ctx}"
    );
    assert_eq!(
        r.first_content_payload_index,
        opt_u32(&expect["first_content_payload_index"]),
        "{ctx}"
    );

    let want_tools: Vec<ToolCall> = match expect.get("tool_calls") {
        Some(v) => serde_json::from_value(v.clone()).unwrap(),
        None => Vec::new(),
    };
    assert_eq!(r.tool_calls, want_tools, "{ctx}");

    assert_eq!(
        rec.retry_after_s,
        expect.get("retry_after_s").and_then(Value::as_f64),
        "{ctx}"
    );

    if let Some(err) = expect.get("error") {
        if let Some(t) = err.get("type") {
            assert_eq!(rec.error_type.as_deref(), t.as_str(), "{ctx}");
        }
        if let Some(code) = err.get("code") {
            let code = code
                .as_str()
                .map_or_else(|| code.to_string(), str::to_string);
            assert_eq!(r.record.error_code.as_deref(), Some(code.as_str()), "{ctx}");
            assert_eq!(rec.error_code.as_deref(), Some(code.as_str()), "{ctx}");
        }
        if let Some(m) = err.get("message") {
            assert_eq!(rec.error_message.as_deref(), m.as_str(), "{ctx}");
        }
    }

    // Timing is consistent with the definitions. The bytes are those on the wire
    // (compressed where the sidecar's `delivery.compress` says).
    let wire = latmesh_sim::replay::ReplayCase::load(&fixtures().join(format!("{case}.sse")))
        .unwrap()
        .pieces();
    let body_len: u64 = wire.iter().map(|p| p.len() as u64).sum();
    assert_eq!(rec.response_bytes, body_len, "{ctx}");
    assert!(rec.ttfb_us.is_some(), "{ctx}");
    // Body stamps: every 2xx body here has bytes, and a byte that is not whitespace
    // (case 02's blank lines come before its JSON) once decoded (a body in a coding that
    // is not decoded has none). Error bodies may carry them too.
    let undecoded = rec
        .error_message
        .as_deref()
        .is_some_and(|m| m.starts_with("response body in content-encoding"));
    if (200..300).contains(&status) {
        assert!(rec.first_byte_us.is_some(), "{ctx}");
        assert_eq!(rec.first_nonblank_us.is_some(), !undecoded, "{ctx}");
    }
    let le = |a: Option<u64>, b: Option<u64>| a.zip(b).is_none_or(|(a, b)| a <= b);
    assert!(le(rec.ttfb_us, rec.first_byte_us), "{ctx}");
    assert!(le(rec.first_byte_us, rec.first_nonblank_us), "{ctx}");
    assert!(le(rec.first_nonblank_us, rec.ttft_us), "{ctx}");
    assert!(le(rec.first_nonblank_us, rec.e2e_us), "{ctx}");
    if !stream {
        assert_eq!((rec.ttft_us, rec.ttfc_us), (None, None), "{ctx}");
        assert_eq!(rec.reasoning_us, None, "{ctx}");
    }
    if stream && r.first_output_payload_index.is_some() {
        let (ttfb, ttft) = (rec.ttfb_us.unwrap(), rec.ttft_us.unwrap());
        assert!(ttfb <= ttft, "{ctx}");
        if let Some(ttfc) = rec.ttfc_us {
            assert!(ttft <= ttfc, "{ctx}");
        }
        if let Some(e2e) = rec.e2e_us {
            assert!(rec.ttfc_us.unwrap_or(ttft) <= e2e, "{ctx}");
        }
    }
    // Reasoning time: exactly when reasoning (readable or not: an Anthropic
    // `redacted_thinking` block) came before the first content payload.
    let reasoning_first = expect["reasoning_chunks"].as_u64().unwrap() > 0
        && matches!(
            (r.first_output_payload_index, r.first_content_payload_index),
            (Some(t), Some(c)) if t < c
        );
    if stream && reasoning_first {
        assert_eq!(
            rec.reasoning_us,
            Some(rec.ttfc_us.unwrap() - rec.ttft_us.unwrap()),
            "{ctx}"
        );
    } else {
        assert_eq!(rec.reasoning_us, None, "{ctx}");
    }
    if rec.outcome() == Outcome::Ok {
        assert!(rec.e2e_us.is_some(), "{ctx}");
        assert!(rec.error_message.is_none(), "{ctx}");
    } else {
        assert!(rec.error_message.is_some(), "{ctx}");
    }
    // A payload with any generated token counts once; `other_token_payloads` (latmesh's
    // addition) are those with generated output that is neither text, reasoning nor a tool
    // call (audio bytes, a delta of a kind latmesh does not know).
    let (c, re, t) = (
        rec.content_chunks,
        rec.reasoning_chunks,
        rec.tool_call_chunks,
    );
    let other = expect
        .get("other_token_payloads")
        .map_or(0, |v| opt_u32(v).unwrap());
    assert!(rec.token_payloads >= c.max(re).max(t).max(other), "{ctx}");
    assert!(rec.token_payloads <= c + re + t + other, "{ctx}");
    if let Some(n) = expect.get("token_payloads") {
        assert_eq!(Some(rec.token_payloads), opt_u32(n), "{ctx}");
    }
    if let Some(n) = expect.get("tool_call_chunks") {
        assert_eq!(Some(rec.tool_call_chunks), opt_u32(n), "{ctx}");
    }
    // TPOT and the decode rate spread the streamed span over the streamed tokens
    // (`decode_tokens`, latmesh's addition: the output tokens less reasoning generated but
    // not streamed, `null` when that cannot be told; absent: every output token).
    let decode_tokens = match expect.get("decode_tokens") {
        Some(v) => opt_u32(v),
        None => Some(rec.output_tokens),
    };
    // (Measured for a 2xx event stream only: an error status has no answer to decode.)
    let measured = stream && (200..300).contains(&status);
    assert_eq!(r.decode_tokens, decode_tokens.filter(|_| measured), "{ctx}");
    match (r.decode_tokens, rec.ttft_us, rec.e2e_us) {
        (Some(n), Some(ttft), Some(e2e)) if n >= 2 && e2e > ttft => {
            let tpot = rec.tpot_us.unwrap();
            assert!(tpot * u64::from(n - 1) <= e2e - ttft, "{ctx}");
            let tps = rec.decode_tps.unwrap();
            assert!(
                tps >= f64::from(n - 1) * 1e6 / (e2e - ttft) as f64 - 1e-6,
                "{ctx}"
            );
        }
        (None, ..) => assert_eq!((rec.tpot_us, rec.decode_tps), (None, None), "{ctx}"),
        _ => {}
    }
    if !want_tools.is_empty() {
        assert!(rec.tool_call_chunks > 0, "{ctx}");
    }
    assert_eq!(
        rec.token_payloads > 0,
        r.first_output_payload_index.is_some(),
        "{ctx}"
    );

    // The CLI's JSON view says the same.
    let out = serde_json::to_value(ProbeOutput::new(&r, true)).unwrap();
    eprintln!("{case}: {out}");
    assert_eq!(out["outcome"], rec.outcome().as_str(), "{ctx}");
    assert_eq!(out["content_text"], expect["content_text"], "{ctx}");
    assert_eq!(
        out["first_output_payload_index"], expect["first_output_payload_index"],
        "{ctx}"
    );
}

fn sse_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every recorded body has a test: a new case can't be silently skipped.
#[test]
fn every_corpus_case_has_a_test() {
    let local = sse_names(&fixtures());
    for name in &local {
        assert!(
            CASES.contains(&name.as_str()),
            "tests/fixtures/sse-cases/{name}.sse has no test: add it to cases!"
        );
        assert!(
            fixtures().join(format!("{name}.expect.json")).exists(),
            "{name} has no .expect.json"
        );
    }
    for case in CASES {
        assert!(
            local.iter().any(|n| n == case),
            "case {case} has no fixture"
        );
    }
}

/// The repository's corpus is a byte-exact copy of an upstream one (the corpus shared with
/// other projects): run only when asked, with `LATMESH_SSE_CASES=<dir>` (the variable that also
/// has the simulator's replay test replay that copy); a directory that is named but missing
/// fails.
#[test]
fn corpus_matches_upstream() {
    let Some(upstream) = std::env::var_os("LATMESH_SSE_CASES") else {
        return;
    };
    let shared = PathBuf::from(upstream);
    assert!(
        shared.is_dir(),
        "LATMESH_SSE_CASES={} is not a directory",
        shared.display()
    );
    let local = sse_names(&fixtures());
    for name in sse_names(&shared) {
        assert!(
            local.contains(&name),
            "upstream {name}.sse is missing from tests/fixtures/sse-cases: copy it (cp) and add a test"
        );
        for ext in ["sse", "expect.json"] {
            let a = std::fs::read(shared.join(format!("{name}.{ext}"))).unwrap();
            let b = std::fs::read(fixtures().join(format!("{name}.{ext}"))).unwrap();
            assert!(
                a == b,
                "tests/fixtures/sse-cases/{name}.{ext} differs from the upstream copy: copy it again"
            );
        }
    }
}
