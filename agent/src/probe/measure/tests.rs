//! The measurement driven with bytes and synthetic instants: every field on every path, the
//! corpus of provider quirks, compressed bodies, and properties (any cut of the reads
//! measures the same).

use std::time::Duration;

use std::time::Instant;

use latmesh_core::answered_model::MAX_ANSWERED_BYTES;
use latmesh_core::api::{Api, ReasoningTags};
use latmesh_core::output_tokens::output_tokens;
use latmesh_core::record::{Outcome, Usage};

use super::body::MAX_WHOLE_BODY;
use super::*;
use crate::probe::outcome::{BodyEnd, Failure, Scrubber};
use crate::probe::sse::tests::{corpus, corpus_dir};
use crate::probe::{ProbeResult, ToolCall};
use latmesh_core::record::OutputTokensSource;

pub(crate) const NO_SCRUB: Scrubber<'static> = Scrubber {
    api_key: None,
    prompt: &[],
    secrets: &[],
};

pub(crate) fn head(t_send: Instant, stream: bool) -> Head {
    Head {
        stream,
        t_send,
        send_unix_us: 0,
        http_status: Some(200),
        ttfb_at: Some(t_send),
        retry_after_s: None,
    }
}

/// Measures `pieces` arriving 1 ms apart.
pub(crate) fn measure(pieces: &[&[u8]], whole: bool) -> ProbeResult {
    measure_api(Api::Chat, pieces, whole)
}

/// [`measure`] of a body of `api`.
pub(crate) fn measure_api(api: Api, pieces: &[&[u8]], whole: bool) -> ProbeResult {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, true, whole, !whole, 64).with_api(api);
    let mut at = t0;
    let mut end = BodyEnd::Eof;
    for p in pieces {
        at += Duration::from_millis(1);
        if m.on_bytes(at, p) == Flow::Stop {
            end = BodyEnd::Stopped;
            break;
        }
    }
    at += Duration::from_millis(1);
    m.on_end(at, end);
    m.finish(&head(t0, !whole), end, Some(at), &NO_SCRUB)
}

fn sse(lines: &[&str]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("data: {l}\n\n"))
        .collect::<String>()
        .into_bytes()
}

const C0: &str =
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
fn content(s: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"{s}"}},"finish_reason":null}}]}}"#)
}
fn stop(usage: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]{usage}}}"#)
}

#[test]
fn timing_follows_the_definitions() {
    let body = sse(&[
        C0,
        &content("a"),
        &content("b"),
        &content("c"),
        &stop(""),
        "[DONE]",
    ]);
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let r = measure(&pieces, false);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    // Lines are delivered one per ms and events complete on their blank line: content "a"
    // completes with read 4, [DONE] with read 12.
    assert_eq!(rec.ttft_us, Some(4_000));
    // TTST: the second token-bearing payload ("b", read 6), from t_send.
    assert_eq!(rec.ttst_us, Some(6_000));
    assert_eq!(rec.ttfc_us, Some(4_000));
    assert_eq!(rec.e2e_us, Some(12_000));
    assert_eq!(r.itl_gaps_us, vec![2_000, 2_000]);
    assert_eq!(rec.itl_max_us, Some(2_000));
    assert_eq!((rec.output_tokens, rec.tokens_from_usage), (3, false));
    assert_eq!(rec.tpot_us, Some(4_000));
    assert_eq!(rec.decode_tps, Some(250.0));
    assert_eq!(r.content_text, "abc");
    assert_eq!(r.first_output_payload_index, Some(1));
}

#[test]
fn ttst_needs_two_token_payloads_and_is_stamped_on_anthropic_streams_too() {
    // One token payload: TTFT, no TTST.
    let body = sse(&[C0, &content("a"), &stop(""), "[DONE]"]);
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let r = measure(&pieces, false);
    assert_eq!((r.record.ttft_us, r.record.ttst_us), (Some(4_000), None));
    // Anthropic Messages: a thinking delta then a text delta; each event read 1 ms apart.
    let events = [
        r#"{"type":"message_start","message":{"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a"}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let bodies: Vec<Vec<u8>> = events
        .iter()
        .map(|e| format!("data: {e}\n\n").into_bytes())
        .collect();
    let pieces: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    let r = measure_api(Api::Anthropic, &pieces, false);
    assert_eq!(
        r.record.outcome,
        Some(Outcome::Ok),
        "{:?}",
        r.record.error_message
    );
    assert_eq!(
        (r.record.ttft_us, r.record.ttst_us),
        (Some(3_000), Some(5_000))
    );
    assert!(r.record.ttst_us >= r.record.ttft_us);
}

#[test]
fn a_body_past_the_byte_cap_ends_as_a_protocol_error() {
    let body = sse(&[C0, &content("a"), &content("b"), &stop(""), "[DONE]"]);
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let cap = pieces[..4].iter().map(|p| p.len() as u64).sum::<u64>();
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 64).with_max_body_bytes(cap);
    let mut at = t0;
    let mut stopped_at = None;
    for (i, p) in pieces.iter().enumerate() {
        at += Duration::from_millis(1);
        if m.on_bytes(at, p) == Flow::Stop {
            stopped_at = Some(i);
            break;
        }
    }
    // Exactly at the cap is accepted; the first byte past it stops the attempt.
    assert_eq!(stopped_at, Some(4));
    m.on_end(at, BodyEnd::Stopped);
    let r = m.finish(&head(t0, true), BodyEnd::Stopped, Some(at), &NO_SCRUB);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert_eq!(
        r.record.error_message.as_deref(),
        Some(format!("response larger than {cap} bytes (max_response_bytes)").as_str())
    );
    assert_eq!(r.record.ttft_us, Some(4_000));
}

#[test]
fn nothing_after_done_changes_the_measurement() {
    // Content, an error object, an `error:` line and usage after `[DONE]`: drained as
    // bytes, never measured.
    let err = r#"{"error":{"message":"late","type":"server_error"}}"#;
    let late_usage = r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":99}}"#;
    let mut body = sse(&[
        C0,
        &content("a"),
        &stop(""),
        "[DONE]",
        &content("z"),
        err,
        late_usage,
    ]);
    body.extend_from_slice(b"error: {\"message\":\"later\"}\n\n");
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let r = measure(&pieces, false);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(rec.error_message, None);
    assert_eq!((rec.ttft_us, rec.e2e_us), (Some(4_000), Some(8_000)));
    assert_eq!((rec.content_chunks, rec.token_payloads), (1, 1));
    assert_eq!((rec.output_tokens, rec.tokens_from_usage), (1, false));
    assert_eq!(r.content_text, "a");
    assert_eq!(rec.response_bytes, body.len() as u64);
}

#[test]
fn reasoning_under_reasoning_counts_as_first_token() {
    let r1 = r#"{"choices":[{"index":0,"delta":{"content":null,"reasoning":"think"}}]}"#;
    let r2 = r#"{"choices":[{"index":0,"delta":{"content":"","reasoning":" more"}}]}"#;
    let body = sse(&[C0, r1, r2, &content("x"), &stop(""), "[DONE]"]);
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let r = measure(&pieces, false);
    assert_eq!((r.record.reasoning_chunks, r.record.content_chunks), (2, 1));
    assert_eq!(r.reasoning_text, "think more");
    assert_eq!(
        (r.first_output_payload_index, r.first_content_payload_index),
        (Some(1), Some(3))
    );
    assert!(r.record.ttft_us < r.record.ttfc_us);
}

#[test]
fn usage_on_the_finish_chunk_and_cumulative_usage() {
    let body = sse(&[
        &content("a"),
        &stop(r#","usage":{"prompt_tokens":5,"completion_tokens":7}"#),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(
        (r.record.output_tokens, r.record.tokens_from_usage),
        (7, true)
    );
    assert_eq!(r.record.usage.prompt_tokens, Some(5));
    // Totals repeated on every chunk: the last one counts.
    let cum = |n: u32| {
        format!(
            r#"{{"choices":[{{"delta":{{"content":"t"}}}}],"usage":{{"prompt_tokens":5,"completion_tokens":{n},"total_tokens":{}}}}}"#,
            5 + n
        )
    };
    let body = sse(&[
        &cum(1),
        &cum(2),
        &cum(3),
        &stop(r#","usage":null"#),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.usage.completion_tokens, Some(3));
    assert_eq!(r.record.usage.total_tokens, Some(8));
    assert_eq!(r.record.output_tokens, 3);
}

#[test]
fn cr_only_line_endings() {
    let body = String::from_utf8(sse(&[
        C0,
        &content("x"),
        &content("y"),
        &stop(""),
        "[DONE]",
    ]))
    .unwrap()
    .replace('\n', "\r");
    let r = measure(&[body.as_bytes()], false);
    assert_eq!(
        (r.record.outcome, r.content_text.as_str(), r.record.saw_done),
        (Some(Outcome::Ok), "xy", true)
    );
}

#[test]
fn empty_body_and_comment_only_body_are_protocol_errors() {
    let r = measure(&[], false);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert_eq!(r.record.error_message.as_deref(), Some("empty 200 body"));
    let r = measure(&[b": keep-alive\n\n"], false);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert_eq!(r.record.comment_lines, 1);
    let r = measure(&[b"data: [DONE]\n\n"], false);
    assert_eq!(
        (r.record.outcome, r.record.saw_done),
        (Some(Outcome::ProtocolError), true)
    );
    let r = measure(&[], true);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
}

#[test]
fn unparseable_payload_is_a_protocol_error_but_reading_goes_on() {
    let body = sse(&[&content("a"), "{oops", &content("b"), &stop(""), "[DONE]"]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert!(
        r.record
            .error_message
            .as_deref()
            .unwrap()
            .starts_with("payload 1 is not a JSON object")
    );
    assert!(r.record.saw_done);
    assert_eq!(r.record.content_chunks, 2);
}

#[test]
fn json_body_answered_to_a_streaming_request() {
    let body = br#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}"#;
    let r = measure(&[body], false);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    assert!(
        r.record
            .error_message
            .as_deref()
            .unwrap()
            .contains("whole JSON completion")
    );
    assert_eq!((r.content_text.as_str(), r.record.output_tokens), ("hi", 1));
    assert_eq!((r.record.ttft_us, r.record.e2e_us.is_some()), (None, true));
    // An error object sent that way is a stream error.
    let r = measure(
        &[br#"{"error":{"message":"quota","type":"insufficient_quota"}}"#],
        false,
    );
    assert_eq!(r.record.outcome, Some(Outcome::StreamError));
    assert_eq!(r.record.error_type.as_deref(), Some("insufficient_quota"));
}

#[test]
fn whole_completion() {
    let body = br#"{"choices":[{"index":0,"message":{"content":"Four.","reasoning_content":"2+2"},"finish_reason":"stop"}],"usage":{"completion_tokens":2,"prompt_tokens":12}}"#;
    let r = measure(&[&body[..10], &body[10..]], true);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.e2e_us),
        (None, None, Some(3_000))
    );
    assert_eq!(
        (rec.content_chunks, rec.reasoning_chunks, rec.output_tokens),
        (1, 1, 2)
    );
    assert_eq!(
        (r.first_output_payload_index, r.first_content_payload_index),
        (Some(0), Some(0))
    );
    let r = measure(&[b"<html>oops</html>"], true);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
    let r = measure(&[br#"{"choices":[]}"#], true);
    assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
}

#[test]
fn stream_errors_keep_the_first_failure_and_the_finish_reason() {
    let abort = r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"insufficient_system_resource"}]}"#;
    let body = sse(&[&content("a"), abort, "[DONE]"]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.outcome, Some(Outcome::StreamError));
    assert_eq!(
        r.record.finish_reason.as_deref(),
        Some("insufficient_system_resource")
    );
    assert_eq!(r.record.e2e_us, Some(1_000));
    let body = b"event: error\ndata: {\"error\":{\"message\":\"overloaded\",\"type\":\"overloaded_error\"}}\n\n";
    let r = measure(&[body], false);
    assert_eq!(r.record.outcome, Some(Outcome::StreamError));
    assert_eq!(r.record.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(r.record.error_message.as_deref(), Some("overloaded"));
    let vllm =
        r#"{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}"#;
    let r = measure(&[&sse(&[vllm])], false);
    assert_eq!(
        (r.record.outcome, r.record.error_code.as_deref()),
        (Some(Outcome::StreamError), Some("400"))
    );
}

/// An error object wins over a bare `finish_reason: "error"`: in the same chunk, or in
/// the chunk after it; an error that names nothing does not replace a finish reason, and
/// a named error is never replaced by a later one.
#[test]
fn an_error_object_wins_over_a_bare_error_finish_reason() {
    let both = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}],"error":{"code":"upstream_timeout","message":"the model server timed out","type":"server_error"}}"#;
    let bare = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#;
    let later = r#"{"error":{"code":503,"message":"backend overloaded"}}"#;
    let named_then_other = r#"{"error":{"code":"second","message":"later"}}"#;
    for (body, code, message) in [
        (
            sse(&[&content("a"), both, "[DONE]"]),
            Some("upstream_timeout"),
            "the model server timed out",
        ),
        (
            sse(&[&content("a"), bare, later, "[DONE]"]),
            Some("503"),
            "backend overloaded",
        ),
        (
            sse(&[&content("a"), bare, r#"{"error":{}}"#, "[DONE]"]),
            None,
            "generation aborted: finish_reason error",
        ),
        (
            sse(&[&content("a"), both, named_then_other, "[DONE]"]),
            Some("upstream_timeout"),
            "the model server timed out",
        ),
    ] {
        let r = measure(&[&body], false);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::StreamError), "{rec:?}");
        assert_eq!(rec.finish_reason.as_deref(), Some("error"));
        assert_eq!(rec.error_code.as_deref(), code, "{rec:?}");
        assert_eq!(rec.error_message.as_deref(), Some(message), "{rec:?}");
    }
    // Past the fast path's cache too: an `event: error` after the finish reason.
    let mut body = sse(&[&content("a"), bare]);
    body.extend_from_slice(b"event: error\ndata: {\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n");
    let r = measure(&[&body], false);
    assert_eq!(
        (
            r.record.error_type.as_deref(),
            r.record.error_message.as_deref()
        ),
        (Some("overloaded_error"), Some("Overloaded"))
    );
}

/// A tool call of any kind is read: a custom tool's `input` (under the key its `type`
/// names) is the call's arguments, never the answer.
#[test]
fn tool_calls_of_any_kind_are_read() {
    let f = |s: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{s}]}}}}]}}"#);
    let body = sse(&[
        &f(
            r#"{"index":0,"id":"call_c","type":"custom","custom":{"name":"run_sql","input":"SELECT"}}"#,
        ),
        &f(r#"{"index":0,"type":"custom","custom":{"input":" 1"}}"#),
        &f(
            r#"{"index":1,"id":"call_f","type":"future","future":{"name":"go","arguments":"{}"},"note":{"x":1}}"#,
        ),
        &stop(""),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_eq!(r.content_text, "");
    assert_eq!((r.record.tool_call_chunks, r.record.content_chunks), (3, 0));
    assert_eq!(r.record.ttfc_us, None);
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                index: 0,
                id: Some("call_c".into()),
                name: "run_sql".into(),
                arguments: "SELECT 1".into()
            },
            ToolCall {
                index: 1,
                id: Some("call_f".into()),
                name: "go".into(),
                arguments: "{}".into()
            },
        ]
    );
}

/// Reasoning the provider counted but did not stream is left out of TPOT and the decode
/// rate: they spread the streamed span over the streamed tokens. Streamed reasoning, and
/// no reasoning, keep every output token.
#[test]
fn unstreamed_reasoning_is_not_in_tpot() {
    let usage = |c: u32, r: u32| {
        format!(
            r#","usage":{{"prompt_tokens":5,"completion_tokens":{c},"completion_tokens_details":{{"reasoning_tokens":{r}}}}}"#
        )
    };
    // 4 content payloads 1 ms apart (TTFT at 1 ms), [DONE] at 6 ms: a 5 ms span.
    let body = |u: &str| {
        sse(&[
            &content("a"),
            &content("b"),
            &content("c"),
            &content("d"),
            &stop(u),
            "[DONE]",
        ])
    };
    let pieces = |b: &[u8]| -> Vec<Vec<u8>> {
        b.split_inclusive(|&c| c == b'\n')
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|c| c.concat())
            .collect()
    };
    let run = |b: Vec<u8>| {
        let p = pieces(&b);
        let refs: Vec<&[u8]> = p.iter().map(Vec::as_slice).collect();
        measure(&refs, false)
    };
    // 104 completion tokens of which 100 reasoning, none streamed: 4 decode tokens.
    let r = run(body(&usage(104, 100)));
    assert_eq!(r.record.output_tokens, 104);
    assert_eq!(r.decode_tokens, Some(4));
    assert_eq!(
        (r.record.ttft_us, r.record.e2e_us),
        (Some(1_000), Some(6_000))
    );
    assert_eq!(r.record.tpot_us, Some(5_000 / 3));
    assert_eq!(r.record.decode_tps, Some(3.0 * 1e6 / 5_000.0));
    // Without reasoning tokens: every output token.
    let r = run(body(&usage(8, 0)));
    assert_eq!(
        (r.decode_tokens, r.record.tpot_us),
        (Some(8), Some(5_000 / 7))
    );
    // Reasoning streamed: every output token too (the span holds the reasoning).
    let reasoning =
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}"#;
    let b = sse(&[
        reasoning,
        &content("a"),
        &content("b"),
        &content("c"),
        &stop(&usage(104, 100)),
        "[DONE]",
    ]);
    let r = run(b);
    assert_eq!(r.decode_tokens, Some(104));
    // A count that does not cover the streamed payloads: at least those.
    let r = run(body(&usage(102, 100)));
    assert_eq!(r.decode_tokens, Some(4));
}

#[test]
fn tool_calls_accumulate_per_index() {
    let f = |s: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{s}]}}}}]}}"#);
    let body = sse(&[
        &f(r#"{"index":0,"id":"call_a","type":"function","function":{"name":"a","arguments":""}}"#),
        &f(
            r#"{"index":1,"id":"call_b","type":"function","function":{"name":"b","arguments":"{"}}"#,
        ),
        &f(r#"{"index":0,"function":{"arguments":"{}"}}"#),
        &f(r#"{"index":1,"function":{"arguments":"}"}}"#),
        &stop(""),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.tool_call_chunks, 4);
    assert_eq!(r.record.output_tokens, 4);
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall {
                index: 0,
                id: Some("call_a".into()),
                name: "a".into(),
                arguments: "{}".into()
            },
            ToolCall {
                index: 1,
                id: Some("call_b".into()),
                name: "b".into(),
                arguments: "{}".into()
            },
        ]
    );
    // Without indices: a new id is a new call.
    let body = sse(&[
        &f(r#"{"id":"x","function":{"name":"a","arguments":"{}"}}"#),
        &f(r#"{"id":"y","function":{"name":"b","arguments":"{}"}}"#),
        &stop(""),
    ]);
    let r = measure(&[&body], false);
    assert_eq!(
        r.tool_calls
            .iter()
            .map(|c| (c.index, c.name.as_str()))
            .collect::<Vec<_>>(),
        vec![(0, "a"), (1, "b")]
    );
}

#[test]
fn keep_text_false_keeps_no_text() {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 8);
    m.on_bytes(t0, &sse(&[&content("secret"), &stop(""), "[DONE]"]));
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!((r.content_text.as_str(), r.record.content_chunks), ("", 1));
}

#[test]
fn broken_bodies() {
    let t0 = Instant::now();
    let run = |body: &[u8]| {
        let mut m = Measurement::new(t0, true, false, true, 8);
        m.on_bytes(t0, body);
        m.note_broken("connection reset".into());
        m.on_end(t0, BodyEnd::Broken);
        m.finish(&head(t0, true), BodyEnd::Broken, Some(t0), &NO_SCRUB)
    };
    let r = run(&sse(&[&content("a")]));
    assert_eq!(r.record.outcome, Some(Outcome::Truncated));
    assert!(
        r.record
            .error_message
            .as_deref()
            .unwrap()
            .ends_with("connection reset")
    );
    assert_eq!(run(b"").record.outcome, Some(Outcome::ConnectionError));
    assert_eq!(
        run(&sse(&[&content("a"), &stop("")])).record.outcome,
        Some(Outcome::Ok)
    );
}

/// How a body is measured in the split and fuzz tests: the API whose events it holds,
/// the content coding it is sent in, the reasoning tags declared. Each API's parser
/// plugs its bodies into [`check_every_split`] and [`check_cuts`] with one of these.
#[derive(Clone, Debug, Default)]
pub(crate) struct Setup {
    pub(crate) api: Api,
    /// `gzip`, `deflate` (zlib), `raw-deflate` (sent as `deflate`); `None`: plain.
    pub(crate) encoding: Option<&'static str>,
    pub(crate) tags: Option<ReasoningTags>,
}

impl Setup {
    /// `<think>` … `</think>` declared.
    pub(crate) fn think() -> Option<ReasoningTags> {
        Some(ReasoningTags {
            open: "<think>".into(),
            close: "</think>".into(),
        })
    }

    /// `plain` as it comes over the wire: compressed when the setup says, flushed after
    /// each `flush_at` offset (as a provider flushes per event).
    pub(crate) fn wire(&self, plain: &[u8], flush_at: &[usize]) -> Vec<u8> {
        match self.encoding {
            None => plain.to_vec(),
            Some(e) => crate::probe::content_encoding::tests::compress(e, plain, flush_at),
        }
    }

    /// Measures `pieces` of a streamed response's wire body, read `step_us` apart.
    pub(crate) fn run(&self, pieces: &[&[u8]], step_us: u64) -> ProbeResult {
        let t0 = Instant::now();
        let header = self
            .encoding
            .map(|e| if e == "raw-deflate" { "deflate" } else { e });
        let mut m = Measurement::new(t0, true, false, true, 8)
            .with_api(self.api)
            .with_reasoning_tags(self.tags.as_ref())
            .with_content_encoding(header.map(str::as_bytes));
        let mut at = t0;
        let mut end = BodyEnd::Eof;
        for p in pieces {
            at += Duration::from_micros(step_us);
            if m.on_bytes(at, p) == Flow::Stop {
                end = BodyEnd::Stopped;
                break;
            }
        }
        at += Duration::from_micros(step_us);
        m.on_end(at, end);
        m.finish(&head(t0, true), end, Some(at), &NO_SCRUB)
    }
}

/// `wire` split in two at every offset measures as it does whole.
pub(crate) fn check_every_split(setup: &Setup, wire: &[u8], name: &str) {
    let whole = summary(setup.run(&[wire], 0));
    for i in 0..=wire.len() {
        let two = summary(setup.run(&[&wire[..i], &wire[i..]], 0));
        assert_eq!(two, whole, "{name} ({setup:?}) split at {i}");
    }
}

/// A corpus case's sidecar: its API, whether it is a 2xx event stream, the compression
/// the replay server applies (`delivery.compress`, flushed at `delivery.split_after_bytes`)
/// and the reasoning tags its provider declares (`reasoning_tags`).
pub(crate) fn corpus_setup(name: &str) -> (Setup, bool, Vec<usize>) {
    let stem = name.trim_end_matches(".sse");
    let side = std::fs::read(corpus_dir().join(format!("{stem}.expect.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&side).unwrap();
    let api = v["api"]
        .as_str()
        .map_or(Api::Chat, |a| Api::parse(a).unwrap());
    let status = v["http"]["status"].as_u64().unwrap_or(200);
    let ctype = v["http"]["headers"]["content-type"].as_str().unwrap_or("");
    let stream = (200..300).contains(&status) && !ctype.contains("json");
    let encoding = match v["delivery"]["compress"].as_str() {
        None => None,
        Some("gzip") => Some("gzip"),
        Some("deflate") => Some("deflate"),
        Some(other) => panic!("{name}: no compressor for {other}"),
    };
    let tags = v.get("reasoning_tags").map(|t| ReasoningTags {
        open: t["open"].as_str().unwrap().into(),
        close: t["close"].as_str().unwrap().into(),
    });
    let cuts = v["delivery"]["split_after_bytes"]
        .as_array()
        .map(|a| a.iter().map(|n| n.as_u64().unwrap() as usize).collect())
        .unwrap_or_default();
    let setup = Setup {
        api,
        encoding,
        tags,
    };
    (setup, stream, cuts)
}

/// Feeds every corpus stream, in its API and as the replay server sends it (compressed
/// where its sidecar says), split at every offset: the measurement is the same.
#[test]
fn corpus_measurements_do_not_depend_on_read_boundaries() {
    for (name, body) in corpus() {
        let (setup, stream, cuts) = corpus_setup(&name);
        if !stream {
            continue;
        }
        check_every_split(&setup, &setup.wire(&body, &cuts), &name);
    }
    assert!(corpus_dir().exists());
}

type Summary = (
    Option<Outcome>,
    (u32, u32, u32, u32),
    Usage,
    (u32, bool, Option<i64>),
    Option<String>,
    bool,
    u32,
    (String, String, Vec<ToolCall>),
    (Option<u32>, Option<u32>),
    (Option<String>, Option<String>, Option<String>),
    (bool, bool),
);

/// What a measurement found, without its timing.
fn summary(r: ProbeResult) -> Summary {
    let rec = r.record;
    (
        rec.outcome,
        (
            rec.content_chunks,
            rec.reasoning_chunks,
            rec.tool_call_chunks,
            rec.token_payloads,
        ),
        rec.usage,
        (
            rec.output_tokens,
            rec.tokens_from_usage,
            rec.usage_chunk_delta,
        ),
        rec.finish_reason,
        rec.saw_done,
        rec.comment_lines,
        (r.content_text, r.reasoning_text, r.tool_calls),
        (r.first_output_payload_index, r.first_content_payload_index),
        (rec.error_type, rec.error_code, rec.error_message),
        (rec.reasoning_us.is_some(), rec.first_nonblank_us.is_some()),
    )
}

/// Counts this thread's heap allocations (the test binary's global allocator).
struct Counting;
thread_local! {
    static ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
// SAFETY: delegates to the system allocator; only counts.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.realloc(p, l, n) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations of 1000 reads of `read`, after 10 that warm up (the parser buffer
/// and the sniff buffer reach their steady state).
fn allocs_per_1000_reads(m: &mut Measurement, t0: Instant, read: &str) -> u64 {
    for _ in 0..10 {
        m.on_bytes(t0, read.as_bytes());
    }
    let before = ALLOCS.with(|c| c.get());
    for i in 0..1000u64 {
        m.on_bytes(t0 + Duration::from_micros(i), read.as_bytes());
    }
    ALLOCS.with(|c| c.get()) - before
}

#[test]
fn the_per_chunk_path_does_not_allocate() {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 4096);
    let chunk = concat!(
        r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","#,
        r#""choices":[{"index":0,"delta":{"content":"tok","reasoning_content":null},"finish_reason":null}],"#,
        r#""usage":null}"#,
        "\n\n: keep-alive\n\n"
    );
    assert_eq!(allocs_per_1000_reads(&mut m, t0, chunk), 0);
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!(r.record.content_chunks, 1010);
    assert_eq!(r.record.comment_lines, 1010);
}

/// Nor with reasoning tags declared (inside the thinking and after it), nor when each
/// chunk arrives gzip'd.
#[test]
fn the_per_chunk_path_does_not_allocate_with_tags_or_compression() {
    use std::io::Write as _;
    let chunk = |tok: &str| {
        format!(
            "data: {{\"id\":\"c\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{tok}\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let t0 = Instant::now();
    for tok in ["tok", "</think>x"] {
        let mut m = Measurement::new(t0, false, false, true, 4096)
            .with_reasoning_tags(Setup::think().as_ref());
        for _ in 0..10 {
            m.on_bytes(t0, chunk(tok).as_bytes());
        }
        let next = chunk("tok");
        let before = ALLOCS.with(|c| c.get());
        for i in 0..1000u64 {
            m.on_bytes(t0 + Duration::from_micros(i), next.as_bytes());
        }
        let allocs = ALLOCS.with(|c| c.get()) - before;
        assert_eq!(allocs, 0, "{tok}: allocations for 1000 chunks");
    }
    // gzip: one stream, flushed after every chunk.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut pieces = Vec::new();
    for _ in 0..1010 {
        enc.write_all(chunk("tok").as_bytes()).unwrap();
        enc.flush().unwrap();
        pieces.push(std::mem::take(enc.get_mut()));
    }
    let mut m = Measurement::new(t0, false, false, true, 4096).with_content_encoding(Some(b"gzip"));
    for p in &pieces[..10] {
        m.on_bytes(t0, p);
    }
    let before = ALLOCS.with(|c| c.get());
    for (i, p) in pieces[10..].iter().enumerate() {
        m.on_bytes(t0 + Duration::from_micros(i as u64), p);
    }
    let allocs = ALLOCS.with(|c| c.get()) - before;
    assert_eq!(allocs, 0, "allocations for 1000 gzip'd chunks");
    m.on_end(t0, BodyEnd::Stopped);
    let r = m.finish(&head(t0, true), BodyEnd::Stopped, Some(t0), &NO_SCRUB);
    assert_eq!(r.record.content_chunks, 1010);
}

#[test]
fn the_per_event_path_of_a_responses_stream_does_not_allocate() {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 4096).with_api(Api::Responses);
    let event = concat!(
        "event: response.output_text.delta\n",
        r#"data: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"tok"}"#,
        "\n\n"
    );
    assert_eq!(allocs_per_1000_reads(&mut m, t0, event), 0);
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!(r.record.content_chunks, 1010);
}

#[test]
fn the_per_event_path_of_an_anthropic_stream_does_not_allocate() {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 4096).with_api(Api::Anthropic);
    let event = concat!(
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok"}}"#,
        "\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n"
    );
    assert_eq!(allocs_per_1000_reads(&mut m, t0, event), 0);
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!(r.record.content_chunks, 1010);
}

#[test]
fn the_per_chunk_path_does_not_allocate_with_timestamps_either() {
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 2048).with_timestamps(2048);
    // The simulator's chunk (the fast decoder) and one with an escape (the full one).
    let chunk = concat!(
        r#"data: {"id":"chatcmpl-sim1","object":"chat.completion.chunk","created":1,"model":"m","#,
        r#""system_fingerprint":"s","choices":[{"index":0,"delta":{"content":" tok"},"#,
        r#""logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"a\nb"}}]}"#,
        "\n\n"
    );
    assert_eq!(allocs_per_1000_reads(&mut m, t0, chunk), 0);
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!(r.record.content_chunks, 2020);
    assert_eq!(r.token_read_at.len(), 2020);
}

#[test]
fn token_read_instants_only_when_asked_and_consistent_with_the_record() {
    let body = sse(&[
        C0,
        &content("a"),
        &content("b"),
        &content("c"),
        &stop(""),
        "[DONE]",
    ]);
    let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let t0 = Instant::now();
    let run = |timestamps: bool| {
        let mut m = Measurement::new(t0, false, false, true, 8);
        if timestamps {
            m = m.with_timestamps(8);
        }
        let mut at = t0;
        for p in &pieces {
            at += Duration::from_nanos(1_234_567);
            m.on_bytes(at, p);
        }
        m.on_end(at, BodyEnd::Eof);
        m.finish(&head(t0, true), BodyEnd::Eof, Some(at), &NO_SCRUB)
    };
    let plain = run(false);
    assert!(plain.token_read_at.is_empty());
    assert_eq!(plain.t_send, Some(t0));
    let r = run(true);
    assert_eq!(r.record, plain.record);
    assert_eq!(r.token_read_at.len(), r.record.token_payloads as usize);
    assert_eq!(r.token_read_at.len(), 3);
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap();
    assert_eq!(r.record.ttft_us, Some(us(r.token_read_at[0] - t0)));
    let gaps: Vec<u64> = r
        .token_read_at
        .windows(2)
        .map(|w| us(w[1] - w[0]))
        .collect();
    assert_eq!(gaps, r.itl_gaps_us);
    // A body read whole has no token timing.
    let mut m = Measurement::new(t0, false, true, false, 8).with_timestamps(8);
    m.on_bytes(
        t0,
        br#"{"choices":[{"index":0,"message":{"content":"x"}}]}"#,
    );
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, false), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!((r.record.content_chunks, r.token_read_at.len()), (1, 0));
}

#[test]
fn a_payload_split_across_reads_at_every_offset_is_stamped_at_its_last_read() {
    let body = sse(&[C0, &content("héllo"), &stop(""), "[DONE]"]);
    let start = body.windows(6).position(|w| w == b"data: ").unwrap() + C0.len() + 8;
    let end = start + content("héllo").len() + 8;
    for cut in start + 1..end {
        let r = measure(&[&body[..cut], &body[cut..]], false);
        assert_eq!(r.content_text, "héllo", "cut {cut}");
        // The content payload completes in the second read, at 2 ms.
        assert_eq!(r.record.ttft_us, Some(2_000), "cut {cut}");
    }
}

fn delta(fields: &str) -> String {
    format!(r#"{{"choices":[{{"index":0,"delta":{{{fields}}},"finish_reason":null}}]}}"#)
}

#[test]
fn first_byte_and_first_nonblank_precede_the_first_token() {
    // Reads 1 ms apart: a blank line, a keep-alive comment, the role chunk, a token.
    let c0 = format!("data: {C0}\n\n");
    let a = format!("data: {}\n\n", content("a"));
    let end = format!("data: {}\n\ndata: [DONE]\n\n", stop(""));
    let pieces: [&[u8]; 5] = [
        b"\n",
        b": keep-alive\n\n",
        c0.as_bytes(),
        a.as_bytes(),
        end.as_bytes(),
    ];
    let r = measure(&pieces, false);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(
        (rec.first_byte_us, rec.first_nonblank_us),
        (Some(1_000), Some(2_000))
    );
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.e2e_us),
        (Some(4_000), Some(4_000), Some(5_000))
    );
    assert_eq!(rec.comment_lines, 1);
    assert_eq!(rec.reasoning_us, None);
    assert_eq!((rec.token_payloads, rec.output_tokens), (1, 1));
    assert_eq!(
        (rec.tokens_from_usage, rec.usage_chunk_delta),
        (false, None)
    );
    // A body that starts with a comment: first byte and first non-blank byte coincide.
    let r = measure(&pieces[1..], false);
    assert_eq!(
        (
            r.record.first_byte_us,
            r.record.first_nonblank_us,
            r.record.ttft_us
        ),
        (Some(1_000), Some(1_000), Some(3_000))
    );
    // Empty reads stamp nothing; an empty body has no stamps.
    let r = measure(&[b"", b"  \r\n\t", pieces[2], pieces[3], pieces[4]], false);
    assert_eq!(
        (r.record.first_byte_us, r.record.first_nonblank_us),
        (Some(2_000), Some(3_000))
    );
    let r = measure(&[], false);
    assert_eq!(
        (r.record.first_byte_us, r.record.first_nonblank_us),
        (None, None)
    );
    let r = measure(&[b"\n\n\n"], false);
    assert_eq!(
        (
            r.record.outcome,
            r.record.first_byte_us,
            r.record.first_nonblank_us
        ),
        (Some(Outcome::ProtocolError), Some(1_000), None)
    );
}

#[test]
fn non_streaming_body_after_blank_lines() {
    let body = br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Four.","reasoning_content":"2+2"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_cache_hit_tokens":8}}"#;
    let r = measure(&[b"\n\n", b" \n\t\n", &body[..40], &body[40..]], true);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert!(!rec.stream);
    assert_eq!(
        (
            rec.ttfb_us,
            rec.first_byte_us,
            rec.first_nonblank_us,
            rec.e2e_us
        ),
        (Some(0), Some(1_000), Some(3_000), Some(5_000))
    );
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.reasoning_us),
        (None, None, None)
    );
    assert_eq!((rec.output_tokens, rec.tokens_from_usage), (9, true));
    assert_eq!(
        (rec.usage.prompt_tokens, rec.usage.cached_tokens),
        (Some(12), Some(8))
    );
    // The whole answer is one payload.
    assert_eq!(
        (rec.content_chunks, rec.reasoning_chunks, rec.token_payloads),
        (1, 1, 1)
    );
    // One payload by definition: nothing to compare usage with.
    assert_eq!(rec.usage_chunk_delta, None);
    assert_eq!(
        (r.content_text.as_str(), r.reasoning_text.as_str()),
        ("Four.", "2+2")
    );
    // Without usage: one payload, counted.
    let body = br#"{"choices":[{"index":0,"message":{"content":"Four."},"finish_reason":"stop"}]}"#;
    let r = measure(&[b"\n", body], true);
    assert_eq!(
        (
            r.record.output_tokens,
            r.record.tokens_from_usage,
            r.record.usage_chunk_delta
        ),
        (1, false, None)
    );
    assert_eq!(r.record.first_nonblank_us, Some(2_000));
}

#[test]
fn reasoning_time_under_every_reasoning_spelling() {
    // Each with the field `ProbeResult::reasoning_field` names.
    let spellings = [
        (
            r#""content":null,"reasoning_content":"R""#,
            "reasoning_content",
        ),
        (r#""content":"","reasoning":"R""#, "reasoning"),
        (r#""reasoning_text":"R""#, "reasoning_text"),
        (r#""content":null,"thinking":"R""#, "thinking"),
        (
            r#""reasoning_content":[{"type":"text","text":"R"}]"#,
            "reasoning_content",
        ),
        (
            r#""reasoning_details":[{"type":"reasoning.text","text":"R"}]"#,
            "reasoning_details",
        ),
        (
            r#""reasoning_details":[{"type":"reasoning.summary","summary":"R"}]"#,
            "reasoning_details",
        ),
        (
            r#""content":[{"type":"thinking","thinking":"R"}]"#,
            "content[].reasoning",
        ),
        (
            r#""content":[{"type":"reasoning","text":"R"}]"#,
            "content[].reasoning",
        ),
    ];
    for (sp, field) in spellings {
        let r1 = delta(sp);
        let body = sse(&[
            C0,
            &r1,
            &r1,
            &r1,
            &content("x"),
            &content("y"),
            &stop(""),
            "[DONE]",
        ]);
        let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
        let r = measure(&pieces, false);
        let rec = &r.record;
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{sp}");
        assert_eq!(r.reasoning_text, "RRR", "{sp}");
        assert_eq!(r.reasoning_field, Some(field), "{sp}");
        assert_eq!((rec.reasoning_chunks, rec.content_chunks), (3, 2), "{sp}");
        // Two lines per event, one per ms: payload k completes with read 2k + 2.
        assert_eq!(
            (rec.ttft_us, rec.ttfc_us),
            (Some(4_000), Some(10_000)),
            "{sp}"
        );
        assert_eq!(rec.reasoning_us, Some(6_000), "{sp}");
        assert_eq!((rec.token_payloads, rec.output_tokens), (5, 5), "{sp}");
    }
}

#[test]
fn reasoning_time_needs_reasoning_before_content() {
    let run = |payloads: &[&str]| {
        let mut all = vec![C0];
        all.extend_from_slice(payloads);
        let body = sse(&all);
        let pieces: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
        measure(&pieces, false).record
    };
    let both = delta(r#""content":"a","reasoning_content":"r""#);
    let tool =
        delta(r#""tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]"#);
    let reason = delta(r#""reasoning":"r""#);
    // Reasoning and content first in the same payload: no reasoning time.
    let rec = run(&[&both, &stop(""), "[DONE]"]);
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.reasoning_us),
        (Some(4_000), Some(4_000), None)
    );
    assert_eq!(
        (rec.token_payloads, rec.reasoning_chunks, rec.content_chunks),
        (1, 1, 1)
    );
    // A tool call before the content is not reasoning.
    let rec = run(&[&tool, &content("a"), &stop(""), "[DONE]"]);
    assert_eq!(
        (rec.ttft_us, rec.ttfc_us, rec.reasoning_us),
        (Some(4_000), Some(6_000), None)
    );
    assert_eq!((rec.token_payloads, rec.tool_call_chunks), (2, 1));
    // A tool call, then reasoning, then content: ttfc − ttft.
    let rec = run(&[&tool, &reason, &content("a"), &stop(""), "[DONE]"]);
    assert_eq!(rec.reasoning_us, Some(4_000));
    // Reasoning only (the stream stops before any content): none.
    let rec = run(&[&reason, &reason]);
    assert_eq!(
        (rec.outcome, rec.ttft_us, rec.ttfc_us, rec.reasoning_us),
        (Some(Outcome::Truncated), Some(4_000), None, None)
    );
    assert_eq!(rec.token_payloads, 2);
    // Reasoning and first content in one read: a reasoning time of 0.
    let body = sse(&[&reason, &content("a"), &stop(""), "[DONE]"]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.reasoning_us, Some(0));
}

#[test]
fn a_payload_with_content_reasoning_and_a_tool_call_counts_once() {
    let all = delta(
        r#""content":"a","reasoning_content":"r","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]"#,
    );
    let body = sse(&[&all, &content("b"), &stop(""), "[DONE]"]);
    let rec = measure(&[&body], false).record;
    assert_eq!(
        (
            rec.content_chunks,
            rec.reasoning_chunks,
            rec.tool_call_chunks
        ),
        (2, 1, 1)
    );
    assert_eq!(
        (rec.token_payloads, rec.output_tokens, rec.tokens_from_usage),
        (2, 2, false)
    );
    // Role-only, empty-content, null and empty tool-call chunks carry no token.
    let empty = [
        C0.to_string(),
        delta(r#""content":null,"reasoning_content":"""#),
        delta(r#""tool_calls":[{"index":0,"type":"function","function":{"arguments":""}}]"#),
        delta(r#""tool_calls":[]"#),
    ];
    let mut payloads: Vec<&str> = empty.iter().map(String::as_str).collect();
    let s = stop("");
    payloads.extend([s.as_str(), "[DONE]"]);
    let rec = measure(&[&sse(&payloads)], false).record;
    assert_eq!(
        (rec.token_payloads, rec.output_tokens, rec.ttft_us),
        (0, 0, None)
    );
}

#[test]
fn usage_wherever_providers_put_it() {
    let tokens = [content("a"), content("b"), content("c")];
    let run = |tail: &[&str]| {
        let mut all: Vec<&str> = tokens.iter().map(String::as_str).collect();
        all.extend_from_slice(tail);
        measure(&[&sse(&all)], false).record
    };
    let u = r#"{"prompt_tokens":9,"completion_tokens":7,"total_tokens":16}"#;
    let cases = [
        // A final chunk with empty choices (OpenAI include_usage).
        vec![
            stop(""),
            format!(r#"{{"choices":[],"usage":{u}}}"#),
            "[DONE]".into(),
        ],
        // Inside the finish chunk.
        vec![stop(&format!(r#","usage":{u}"#)), "[DONE]".into()],
        // Groq's envelope (and nothing at the top level).
        vec![
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop"}}],"x_groq":{{"id":"req_1","usage":{u}}}}}"#
            ),
            "[DONE]".into(),
        ],
        // Inside the choice (Moonshot).
        vec![
            format!(
                r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop","usage":{u}}}]}}"#
            ),
            "[DONE]".into(),
        ],
        // A usage-only chunk without any choices member, and no [DONE].
        vec![stop(""), format!(r#"{{"usage":{u}}}"#)],
        // Input/output spellings.
        vec![
            stop(""),
            r#"{"choices":[],"usage":{"input_tokens":9,"output_tokens":7,"total_tokens":16}}"#
                .into(),
            "[DONE]".into(),
        ],
    ];
    for tail in &cases {
        let tail: Vec<&str> = tail.iter().map(String::as_str).collect();
        let rec = run(&tail);
        assert_eq!(rec.outcome, Some(Outcome::Ok), "{tail:?}");
        assert_eq!(
            (
                rec.usage.prompt_tokens,
                rec.usage.completion_tokens,
                rec.usage.total_tokens
            ),
            (Some(9), Some(7), Some(16)),
            "{tail:?}"
        );
        assert_eq!(
            (rec.output_tokens, rec.tokens_from_usage),
            (7, true),
            "{tail:?}"
        );
        // Three one-token chunks against seven tokens: the chunks undercount by four.
        assert_eq!(
            (rec.token_payloads, rec.usage_chunk_delta),
            (3, Some(4)),
            "{tail:?}"
        );
    }
    // Cumulative totals on every chunk (vLLM continuous usage): the last one counts.
    let cum = |c: &str, n: u32| {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{c}"}}}}],"usage":{{"prompt_tokens":9,"completion_tokens":{n},"total_tokens":{}}}}}"#,
            9 + n
        )
    };
    let body = sse(&[
        &cum("", 0),
        &cum("a", 1),
        &cum("b", 2),
        &cum("", 2),
        &stop(r#","usage":null"#),
        "[DONE]",
    ]);
    let rec = measure(&[&body], false).record;
    assert_eq!(
        (
            rec.usage.completion_tokens,
            rec.usage.total_tokens,
            rec.output_tokens
        ),
        (Some(2), Some(11), 2)
    );
    assert_eq!((rec.token_payloads, rec.usage_chunk_delta), (2, Some(0)));
    // Fewer tokens reported than token payloads: a negative delta, and the payloads count.
    let rec = run(&[&stop(r#","usage":{"completion_tokens":2}"#), "[DONE]"]);
    assert_eq!(rec.usage_chunk_delta, Some(-1));
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.tokens_from_usage
        ),
        (3, OutputTokensSource::PayloadsOverUsage, false)
    );
    // No usage anywhere: counted from payloads.
    let rec = run(&[&stop(r#","usage":null"#), "[DONE]"]);
    assert_eq!(rec.usage, Usage::default());
    assert_eq!(
        (
            rec.output_tokens,
            rec.tokens_from_usage,
            rec.token_payloads,
            rec.usage_chunk_delta
        ),
        (3, false, 3, None)
    );
    // Usage with prompt tokens only: no completion count, so no delta.
    let rec = run(&[&stop(r#","usage":{"prompt_tokens":9}"#), "[DONE]"]);
    assert_eq!(
        (
            rec.usage.prompt_tokens,
            rec.output_tokens,
            rec.tokens_from_usage,
            rec.usage_chunk_delta
        ),
        (Some(9), 3, false, None)
    );
}

/// A reasoning stream whose usage counts only the answer: 23 reasoning payloads and 8
/// content payloads streamed, `completion_tokens` 8. The payloads are the count, and TPOT
/// spreads the decode time over 31 tokens, not 8.
#[test]
fn a_reasoning_stream_whose_usage_counts_only_the_answer_gets_the_payload_count() {
    let reason = |s: &str| delta(&format!(r#""content":null,"reasoning_content":"{s}""#));
    let mut lines: Vec<String> = (0..23).map(|i| reason(&format!("r{i}"))).collect();
    lines.extend((0..8).map(|i| content(&format!("c{i}"))));
    lines.push(stop(
        r#","usage":{"prompt_tokens":9,"completion_tokens":8}"#,
    ));
    lines.push("[DONE]".into());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    // One payload per read, 1 ms apart (the first at 1 ms, [DONE] at 33 ms).
    let reads: Vec<Vec<u8>> = lines.iter().map(|l| sse(&[l])).collect();
    let pieces: Vec<&[u8]> = reads.iter().map(Vec::as_slice).collect();
    let rec = measure(&pieces, false).record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(
        (rec.reasoning_chunks, rec.content_chunks, rec.token_payloads),
        (23, 8, 31)
    );
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.tokens_from_usage
        ),
        (31, OutputTokensSource::PayloadsOverUsage, false)
    );
    assert_eq!(rec.usage_chunk_delta, Some(8 - 31));
    let (ttft, e2e) = (rec.ttft_us.unwrap(), rec.e2e_us.unwrap());
    assert_eq!((ttft, e2e), (1_000, 33_000));
    // 32 ms over 30 gaps, not over 7.
    assert_eq!(rec.tpot_us, Some(32_000 / 30));
    assert_eq!(rec.decode_tps, Some(30.0 * 1e6 / 32_000.0));
    // The same stream with the reasoning reported apart, and larger than the answer.
    let mut lines = lines.clone();
    let with_reasoning = stop(
        r#","usage":{"completion_tokens":8,"completion_tokens_details":{"reasoning_tokens":40}}"#,
    );
    let n = lines.len();
    lines[n - 2] = &with_reasoning;
    let rec = measure(&[&sse(&lines)], false).record;
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.tokens_from_usage
        ),
        (48, OutputTokensSource::UsagePlusReasoning, true)
    );
}

/// Several tokens per payload: usage counts more than the payloads and wins.
#[test]
fn multi_token_payloads_keep_the_usage_count() {
    let body = sse(&[
        &content("one two"),
        &content("three four"),
        &stop(
            r#","usage":{"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":0}}"#,
        ),
        "[DONE]",
    ]);
    let rec = measure(&[&body], false).record;
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.tokens_from_usage
        ),
        (4, OutputTokensSource::Usage, true)
    );
    assert_eq!((rec.token_payloads, rec.usage_chunk_delta), (2, Some(2)));
}

/// A body read whole is one payload: its usage stands and no usage-vs-chunks delta is
/// recorded (it would say nothing but `completion − 1`).
#[test]
fn a_whole_body_has_no_usage_chunk_delta() {
    let body = br#"{"id":"x","object":"chat.completion","model":"deepseek-chat-v3-0324","system_fingerprint":"fp_8802369eaa","choices":[{"index":0,"message":{"role":"assistant","content":"Four."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}"#;
    let rec = measure(&[body], true).record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.tokens_from_usage
        ),
        (12, OutputTokensSource::Usage, true)
    );
    assert_eq!((rec.token_payloads, rec.usage_chunk_delta), (1, None));
    assert_eq!(
        (
            rec.answered_model.as_deref(),
            rec.system_fingerprint.as_deref()
        ),
        (Some("deepseek-chat-v3-0324"), Some("fp_8802369eaa"))
    );
    // Without usage: one payload, counted.
    let body = br#"{"choices":[{"index":0,"message":{"content":"Four."},"finish_reason":"stop"}]}"#;
    let rec = measure(&[body], true).record;
    assert_eq!(
        (
            rec.output_tokens,
            rec.output_tokens_source,
            rec.usage_chunk_delta
        ),
        (1, OutputTokensSource::Payloads, None)
    );
    assert_eq!((rec.answered_model, rec.system_fingerprint), (None, None));
}

/// The first non-empty `model` and `system_fingerprint` of a stream, whichever payload
/// and decoder brought them; scrubbed and cut like other provider text.
#[test]
fn the_answered_model_and_fingerprint_are_the_first_non_empty_ones() {
    let chunk = |model: &str, fp: &str, text: &str| {
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","model":{model},"system_fingerprint":{fp},"choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]}}"#
        )
    };
    let body = sse(&[
        // vLLM's role chunk: an empty model, no fingerprint.
        &chunk(r#""""#, "null", ""),
        &chunk(r#""gpt-4o-2024-08-06""#, "null", "a"),
        &chunk(r#""gpt-4o-2024-08-06""#, r#""fp_1""#, "b"),
        // A later swap inside the stream does not replace the first.
        &chunk(r#""gpt-4o-mini""#, r#""fp_2""#, "c"),
        &stop(r#","model":"other","usage":{"completion_tokens":3}"#),
        "[DONE]",
    ]);
    let rec = measure(&[&body], false).record;
    assert_eq!(
        (
            rec.answered_model.as_deref(),
            rec.system_fingerprint.as_deref()
        ),
        (Some("gpt-4o-2024-08-06"), Some("fp_1"))
    );
    // The full decoder's path (an escape in the model name).
    let body = sse(&[&chunk(r#""org\/m""#, r#""fp""#, "a"), &stop(""), "[DONE]"]);
    let rec = measure(&[&body], false).record;
    assert_eq!(rec.answered_model.as_deref(), Some("org/m"));
    // Kept on a failed attempt too: what answered before the stream broke.
    let body = sse(&[
        &chunk(r#""m1""#, "null", "a"),
        r#"{"error":{"message":"boom"}}"#,
    ]);
    let rec = measure(&[&body], false).record;
    assert_eq!(rec.outcome, Some(Outcome::StreamError));
    assert_eq!(rec.answered_model.as_deref(), Some("m1"));
    // Scrubbed of the API key, and cut to 128 bytes on a character boundary.
    let key = "sk-live-0123456789abcdef";
    let long = format!("{}{key}", "é".repeat(100));
    let body = sse(&[
        &chunk(&format!(r#""{long}""#), r#""x""#, "a"),
        &stop(""),
        "[DONE]",
    ]);
    let t0 = Instant::now();
    let mut m = Measurement::new(t0, false, false, true, 8);
    m.on_bytes(t0, &body);
    m.on_end(t0, BodyEnd::Eof);
    let scrub = Scrubber {
        api_key: Some(key),
        prompt: &[],
        secrets: &[],
    };
    let rec = m
        .finish(&head(t0, true), BodyEnd::Eof, Some(t0), &scrub)
        .record;
    let model = rec.answered_model.unwrap();
    assert_eq!(model, format!("{}…", "é".repeat(62)));
    assert!(model.len() <= MAX_ANSWERED_BYTES);
    assert_eq!(rec.cut_fields, vec!["answered_model"]);
    let short = sse(&[
        &chunk(&format!(r#""m-{key}""#), "null", "a"),
        &stop(""),
        "[DONE]",
    ]);
    let mut m = Measurement::new(t0, false, false, true, 8);
    m.on_bytes(t0, &short);
    m.on_end(t0, BodyEnd::Eof);
    let rec = m
        .finish(&head(t0, true), BodyEnd::Eof, Some(t0), &scrub)
        .record;
    assert_eq!(rec.answered_model.as_deref(), Some("m-[redacted]"));
}

#[test]
fn cached_prompt_tokens_under_every_field_name() {
    for usage in [
        r#"{"prompt_tokens":20,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":8}}"#,
        r#"{"prompt_tokens":20,"completion_tokens":1,"prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":12}"#,
        r#"{"prompt_tokens":20,"completion_tokens":1,"cached_tokens":8}"#,
        r#"{"input_tokens":20,"output_tokens":1,"cache_read_input_tokens":8,"cache_creation_input_tokens":5}"#,
        r#"{"input_tokens":20,"output_tokens":1,"input_tokens_details":{"cached_tokens":8}}"#,
    ] {
        let body = sse(&[
            &content("a"),
            &stop(&format!(r#","usage":{usage}"#)),
            "[DONE]",
        ]);
        let rec = measure(&[&body], false).record;
        assert_eq!(
            (
                rec.usage.prompt_tokens,
                rec.usage.cached_tokens,
                rec.output_tokens
            ),
            (Some(20), Some(8), 1),
            "{usage}"
        );
        assert_eq!(rec.usage_chunk_delta, Some(0), "{usage}");
    }
}

#[test]
fn the_provider_error_code_is_in_the_record_on_every_path() {
    // In a stream.
    let vllm =
        r#"{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}"#;
    let r = measure(&[&sse(&[vllm])], false);
    assert_eq!(r.record.outcome, Some(Outcome::StreamError));
    assert_eq!(r.record.error_code.as_deref(), Some("400"));
    // In a whole body.
    let r = measure(
        &[br#"{"error":{"message":"quota","type":"insufficient_quota","code":"quota_exceeded"}}"#],
        true,
    );
    assert_eq!(r.record.error_code.as_deref(), Some("quota_exceeded"));
    // Without a code, none.
    let r = measure(&[&sse(&[r#"{"error":{"message":"m"}}"#])], false);
    assert_eq!(r.record.error_code, None);
    // An error response (Head::failed), with and without body stamps.
    let t0 = Instant::now();
    let h = head(t0, true);
    let failure = Failure {
        outcome: Outcome::Http5xx,
        error_type: Some("server_error".into()),
        error_code: Some("overloaded".into()),
        message: "overloaded".into(),
    };
    let r = h.failed(
        failure.clone(),
        &NO_SCRUB,
        10,
        Some(t0 + Duration::from_millis(3)),
    );
    let rec = &r.record;
    assert_eq!(rec.error_code.as_deref(), Some("overloaded"));
    assert_eq!(
        (rec.response_bytes, rec.first_byte_us, rec.e2e_us),
        (10, None, Some(3_000))
    );
    let mut body = BodyStamps::default();
    body.on_bytes(t0 + Duration::from_millis(1), b"\n");
    body.on_bytes(t0 + Duration::from_millis(2), b"{\"error\":{}}");
    let r = h.failed_with_body(failure, &NO_SCRUB, &body, None);
    assert_eq!(
        (
            r.record.first_byte_us,
            r.record.first_nonblank_us,
            r.record.response_bytes
        ),
        (Some(1_000), Some(2_000), 13)
    );
    assert_eq!(r.record.error_code.as_deref(), Some("overloaded"));
    // Ok records carry no error fields.
    let r = measure(&[&sse(&[&content("a"), &stop(""), "[DONE]"])], false);
    assert_eq!(
        (
            r.record.error_code,
            r.record.error_type,
            r.record.error_message
        ),
        (None, None, None)
    );
}

#[test]
fn an_oversized_event_ends_the_attempt_as_a_protocol_error() {
    let t0 = Instant::now();
    let read = vec![b'x'; 64 * 1024];
    for start in [&b"data: "[..], b": "] {
        let mut m = Measurement::new(t0, true, false, true, 8);
        assert_eq!(m.on_bytes(t0, &sse(&[&content("a")])), Flow::Continue);
        assert_eq!(m.on_bytes(t0, start), Flow::Continue);
        let mut reads = 0usize;
        let stopped = loop {
            reads += 1;
            if m.on_bytes(t0, &read) == Flow::Stop {
                break true;
            }
            if reads > 200 {
                break false;
            }
        };
        assert!(stopped, "never stopped");
        // Stopped within one read past the 4 MiB cap.
        assert_eq!(
            reads,
            crate::probe::sse::DEFAULT_MAX_EVENT_BYTES / read.len()
        );
        m.on_end(t0, BodyEnd::Stopped);
        let r = m.finish(&head(t0, true), BodyEnd::Stopped, Some(t0), &NO_SCRUB);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError));
        let msg = r.record.error_message.unwrap();
        assert!(msg.contains("longer than 4194304 bytes"), "{msg}");
        assert_eq!((r.record.content_chunks, r.record.token_payloads), (1, 1));
    }
}

/// A gzip'd stream flushed per event is measured as the plain one: every decoded
/// event carries the instant of the compressed read that brought it.
#[test]
fn a_compressed_stream_keeps_the_timing_of_each_read() {
    let body = sse(&[C0, &content("a"), &content("b"), &stop(""), "[DONE]"]);
    let lines: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let mut cuts = Vec::new();
    let mut at = 0;
    for l in &lines[..lines.len() - 1] {
        at += l.len();
        cuts.push(at);
    }
    let plain = Setup::default().run(&lines, 1_000);
    for encoding in ["gzip", "deflate", "raw-deflate"] {
        let setup = Setup {
            encoding: Some(encoding),
            ..Setup::default()
        };
        let wire = setup.wire(&body, &cuts);
        // The wire cut where each flush ended: one read per line, as `plain` was read.
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut rest = &wire[..];
        let mut d = crate::probe::content_encoding::BodyDecoder::for_header(Some(
            if encoding == "raw-deflate" {
                b"deflate"
            } else {
                encoding.as_bytes()
            },
        ))
        .unwrap()
        .unwrap();
        let mut decoded = 0;
        while !rest.is_empty() && pieces.len() < lines.len() - 1 {
            // The shortest prefix that decodes to the next line.
            let want = decoded + lines[pieces.len()].len();
            let mut n = 0;
            while decoded < want {
                n += 1;
                d.feed(&rest[n - 1..n], |p| {
                    decoded += p.len();
                    Flow::Continue
                })
                .unwrap();
            }
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }
        pieces.push(rest);
        assert_eq!(pieces.len(), lines.len(), "{encoding}");
        let r = setup.run(&pieces, 1_000);
        let (a, b) = (&r.record, &plain.record);
        assert_eq!(a.outcome, Some(Outcome::Ok), "{encoding}: {a:?}");
        assert_eq!(
            (a.ttft_us, a.ttfc_us, a.e2e_us, a.first_nonblank_us),
            (b.ttft_us, b.ttfc_us, b.e2e_us, b.first_nonblank_us),
            "{encoding}"
        );
        assert_eq!((a.ttft_us, a.e2e_us), (Some(4_000), Some(10_000)));
        assert_eq!(r.itl_gaps_us, plain.itl_gaps_us);
        assert_eq!(r.content_text, "ab");
        // The record's bytes are the wire's.
        assert_eq!(a.response_bytes, wire.len() as u64);
    }
}

/// A coding latmesh does not decode, a corrupt stream, a bad checksum: a protocol error
/// naming it, never a parse error on binary bytes.
#[test]
fn undecodable_bodies_are_protocol_errors_naming_the_coding() {
    let body = sse(&[&content("a"), &stop(""), "[DONE]"]);
    let fail = |header: &str, wire: &[u8]| {
        let t0 = Instant::now();
        let mut m = Measurement::new(t0, true, false, true, 8)
            .with_content_encoding(Some(header.as_bytes()));
        let flow = m.on_bytes(t0, wire);
        let end = if flow == Flow::Stop {
            BodyEnd::Stopped
        } else {
            BodyEnd::Eof
        };
        m.on_end(t0, end);
        let r = m.finish(&head(t0, true), end, Some(t0), &NO_SCRUB);
        assert_eq!(r.record.outcome, Some(Outcome::ProtocolError), "{header}");
        assert_eq!(r.record.response_bytes, wire.len() as u64);
        assert!(r.record.first_byte_us.is_some());
        r.record.error_message.unwrap()
    };
    assert_eq!(
        fail("br", &body),
        "response body in content-encoding \"br\" that latmesh does not decode \
             (it asks for gzip, deflate)"
    );
    assert_eq!(
        fail("gzip", &body),
        "gzip stream corrupt at byte 0: invalid gzip header"
    );
    let mut wire = Setup {
        encoding: Some("gzip"),
        ..Setup::default()
    }
    .wire(&body, &[]);
    let n = wire.len();
    wire[n - 7] ^= 1;
    let e = fail("gzip", &wire);
    assert!(
        e.starts_with(&format!("gzip stream corrupt at its end (byte {n}): ")),
        "{e}"
    );
}

/// `max_response_bytes`, the event cap and the whole-body cap count decoded bytes: a
/// small compressed body that expands without bound is cut.
#[test]
fn decoded_bytes_are_capped() {
    let gz = Setup {
        encoding: Some("gzip"),
        ..Setup::default()
    };
    let t0 = Instant::now();
    let run = |m: Measurement, wire: &[u8]| {
        let mut m = m.with_content_encoding(Some(b"gzip"));
        let flow = m.on_bytes(t0, wire);
        assert_eq!(flow, Flow::Stop);
        m.on_end(t0, BodyEnd::Stopped);
        m.finish(&head(t0, true), BodyEnd::Stopped, Some(t0), &NO_SCRUB)
    };
    // 8 MiB of blank lines: under 16 KiB on the wire.
    let blanks = gz.wire(&vec![b'\n'; 8 << 20], &[]);
    assert!(blanks.len() < 16 << 10, "{}", blanks.len());
    let r = run(
        Measurement::new(t0, true, false, true, 8).with_max_body_bytes(1 << 20),
        &blanks,
    );
    assert_eq!(
        r.record.error_message.as_deref(),
        Some("response larger than 1048576 bytes once decoded from gzip (max_response_bytes)")
    );
    assert_eq!(r.record.response_bytes, blanks.len() as u64);
    // One 5 MiB event: the 4 MiB event cap.
    let mut big = b"data: ".to_vec();
    big.resize(5 << 20, b'x');
    let r = run(
        Measurement::new(t0, true, false, true, 8),
        &gz.wire(&big, &[]),
    );
    let msg = r.record.error_message.unwrap();
    assert!(msg.contains("longer than 4194304 bytes"), "{msg}");
    // A JSON body read whole: the 32 MiB cap.
    let mut doc = b"{\"choices\":[],\"x\":\"".to_vec();
    doc.resize(MAX_WHOLE_BODY + 10, b'x');
    let r = run(
        Measurement::new(t0, true, true, false, 8),
        &gz.wire(&doc, &[]),
    );
    let msg = r.record.error_message.unwrap();
    assert!(
        msg.contains("JSON body larger than 33554432 bytes"),
        "{msg}"
    );
}

/// Every field of a delta (or message) that carries generated output counts for TTFT,
/// and the answer's fields (content, refusal, audio) for TTFC, also past the fast path.
/// Streams whose answer latmesh does not read (a legacy `choices[].text`, an Anthropic
/// message whole inside `message_start`), while usage counts output tokens: a
/// `protocol_error`, never an `ok` without TTFT; without usage, or with tokens read, as
/// before.
#[test]
fn an_answer_in_no_streamed_field_is_not_an_ok() {
    let legacy = sse(&[
        r#"{"choices":[{"index":0,"text":"Hello there","finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"text":"","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        "[DONE]",
    ]);
    let anthropic = [
            r#"{"type":"message_start","message":{"model":"m","content":[{"type":"text","text":"All of it"}],"usage":{"input_tokens":3,"output_tokens":3}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
            r#"{"type":"message_stop"}"#,
        ]
        .iter()
        .map(|d| format!("data: {d}\n\n"))
        .collect::<String>();
    for (api, body) in [
        (Api::Chat, legacy.clone()),
        (Api::Anthropic, anthropic.into_bytes()),
    ] {
        let r = measure_api(api, &[&body], false);
        assert_eq!(
            r.record.outcome(),
            Outcome::ProtocolError,
            "{api}: {:?}",
            r.record
        );
        assert_eq!(r.record.ttft_us, None);
    }
    // Without usage there is nothing to say the stream carried an answer.
    let no_usage = String::from_utf8(legacy)
        .unwrap()
        .replace(r#","usage":{"prompt_tokens":3,"completion_tokens":2}"#, "");
    let r = measure_api(Api::Chat, &[no_usage.as_bytes()], false);
    assert_eq!(r.record.outcome(), Outcome::Ok);
}

/// A refusal is the answer's text; so is an audio answer's transcript. Audio bytes are a
/// token (TTFT, ITL) but not text: no TTFC, no content payload, nothing in the text.
#[test]
fn refusal_and_transcript_are_the_answer_and_audio_is_not_text() {
    let refusal = delta(r#""content":null,"refusal":"I can't help with that.""#);
    let body = sse(&[
        C0,
        &refusal,
        &delta(r#""refusal":" Sorry.""#),
        &stop(""),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.outcome, Some(Outcome::Ok));
    assert_eq!(r.content_text, "I can't help with that. Sorry.");
    assert_eq!((r.record.content_chunks, r.record.token_payloads), (2, 2));
    assert_eq!(
        (r.first_output_payload_index, r.first_content_payload_index),
        (Some(1), Some(1))
    );
    let audio = |f: &str| delta(&format!(r#""content":null,"audio":{{{f}}}"#));
    let body = sse(&[
        C0,
        &audio(r#""id":"au_1","data":"UklGRg==""#),
        &audio(r#""transcript":"Hel""#),
        &audio(r#""transcript":"lo.""#),
        &audio(r#""data":"AAAA","expires_at":1"#),
        &delta(r#""annotations":[{"type":"url_citation"}]"#),
        &stop(""),
        "[DONE]",
    ]);
    let r = measure(&[&body], false);
    assert_eq!(r.record.outcome, Some(Outcome::Ok), "{:?}", r.record);
    assert_eq!(r.content_text, "Hello.");
    assert_eq!((r.record.content_chunks, r.record.token_payloads), (2, 4));
    assert_eq!(
        (r.first_output_payload_index, r.first_content_payload_index),
        (Some(1), Some(2))
    );

    // A whole message with a refusal.
    let whole = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"No."},"finish_reason":"stop"}]}"#;
    let r = measure(&[whole], true);
    assert_eq!(
        (r.content_text.as_str(), r.record.content_chunks),
        ("No.", 1)
    );
}

/// With `<think>` … `</think>` declared, the tagged content is reasoning: TTFT at the
/// first of it, TTFC at the first answer text after the closing tag and its whitespace,
/// whatever the cuts; undeclared, it is all content (TTFC = TTFT).
#[test]
fn reasoning_tags_move_ttfc_to_the_answer() {
    let body = sse(&[
        C0,
        &content("<think>"),
        &content("\\nCompare"),
        &content(" digits.</th"),
        &content("ink>"),
        &content("\\n\\n"),
        &content("9.8"),
        &content(" <think>"),
        &stop(""),
        "[DONE]",
    ]);
    let lines: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let tagged = Setup {
        tags: Setup::think(),
        ..Setup::default()
    };
    let r = tagged.run(&lines, 1_000);
    let rec = &r.record;
    assert_eq!(rec.outcome, Some(Outcome::Ok));
    assert_eq!(r.reasoning_text, "\nCompare digits.");
    assert_eq!(r.content_text, "9.8 <think>");
    assert_eq!((rec.reasoning_chunks, rec.content_chunks), (5, 2));
    assert_eq!(rec.token_payloads, 7);
    assert_eq!(
        (r.first_output_payload_index, r.first_content_payload_index),
        (Some(1), Some(6))
    );
    // Read 2 ms apart, two lines a payload: payload k completes at read 2k + 2.
    assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(4_000), Some(14_000)));
    assert_eq!(rec.reasoning_us, Some(10_000));
    check_every_split(&tagged, &body, "tagged");
    // Not declared: content from the first tag on.
    let r = Setup::default().run(&lines, 1_000);
    assert_eq!(
        (r.record.ttft_us, r.record.ttfc_us),
        (Some(4_000), Some(4_000))
    );
    assert_eq!(r.record.reasoning_us, None);
    assert!(r.content_text.starts_with("<think>\nCompare"));
    // DeepSeek-R1 style: no opening tag; a whole message too.
    let whole = br#"{"choices":[{"index":0,"message":{"content":"Compare.</think>\n\n9.8"},"finish_reason":"stop"}]}"#;
    let t0 = Instant::now();
    let mut m =
        Measurement::new(t0, true, true, false, 8).with_reasoning_tags(Setup::think().as_ref());
    m.on_bytes(t0, whole);
    m.on_end(t0, BodyEnd::Eof);
    let r = m.finish(&head(t0, false), BodyEnd::Eof, Some(t0), &NO_SCRUB);
    assert_eq!(
        (r.reasoning_text.as_str(), r.content_text.as_str()),
        ("Compare.", "9.8")
    );
    assert_eq!((r.record.reasoning_chunks, r.record.content_chunks), (1, 1));
}

/// Tags declared, but the model did not think (thinking off, a direct answer): neither
/// tag ever appears, so the text is the answer: TTFC = TTFT, no reasoning. One tag seen
/// keeps the split; a reasoning field read keeps it too.
#[test]
fn declared_tags_that_never_appear_leave_the_answer_content() {
    let tagged = Setup {
        tags: Setup::think(),
        ..Setup::default()
    };
    let body = sse(&[
        C0,
        &content("9.8 is"),
        &content(" larger <thi"),
        &stop(""),
        "[DONE]",
    ]);
    let lines: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let r = tagged.run(&lines, 1_000);
    let rec = &r.record;
    assert_eq!(r.content_text, "9.8 is larger <thi");
    assert_eq!(r.reasoning_text, "");
    assert_eq!((rec.reasoning_chunks, rec.content_chunks), (0, 2));
    assert_eq!((rec.ttft_us, rec.ttfc_us), (Some(4_000), Some(4_000)));
    assert_eq!(rec.reasoning_us, None);
    check_every_split(&tagged, &body, "untagged");
    // A closing tag seen: the text before it was reasoning after all.
    let closed = sse(&[
        C0,
        &content("plan"),
        &content("</think>"),
        &stop(""),
        "[DONE]",
    ]);
    let r = tagged.run(&[&closed], 1_000);
    assert_eq!(
        (r.reasoning_text.as_str(), r.record.content_chunks),
        ("plan", 0)
    );
    assert_eq!(r.record.ttfc_us, None);
}

use proptest::prelude::*;

/// Bodies built from real payload shapes of `api` (for chat: every reasoning spelling,
/// tool calls, usage placements, errors; for anthropic: every event and block type,
/// named or not), comments, odd line ends and some arbitrary bytes.
fn stream_body(api: Api) -> impl Strategy<Value = Vec<u8>> {
    let payloads = match api {
        Api::Anthropic => anthropic_payloads(),
        _ => chat_payloads(),
    };
    let item = prop_oneof![
        6 => prop::sample::select(payloads).prop_map(|p| format!("{p}\n\n").into_bytes()),
        1 => prop::sample::select(vec![
            &b": keep-alive\n\n"[..], b"\n", b"\r\n", b"event: ping\ndata: x\n\n",
            b"error: {\"code\":1}\n\n", b"data:", b"\r",
        ]).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(item, 0..16).prop_map(|v| v.concat())
}

/// An API and a body of its events.
fn api_and_body() -> impl Strategy<Value = (Api, Vec<u8>)> {
    prop_oneof![
        prop::sample::select(vec![Api::Chat, Api::Anthropic])
            .prop_flat_map(|api| stream_body(api).prop_map(move |b| (api, b))),
        crate::probe::responses::tests::responses_body().prop_map(|b| (Api::Responses, b)),
    ]
}

/// Anthropic Messages events, each with its `event:` line or as bare data.
fn anthropic_payloads() -> Vec<String> {
    let events = [
        r#"{"type":"message_start","message":{"model":"m","usage":{"input_tokens":3,"output_tokens":1,"cache_read_input_tokens":2}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"a"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"é"}}"#,
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":""}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"t"}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"s"}}"#,
        r#"{"type":"content_block_start","index":2,"content_block":{"type":"redacted_thinking","data":"d"}}"#,
        r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}"#,
        r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"cited_text":"c"}}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"input_tokens":3,"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        r#"{"type":"future_event"}"#,
        "{oops",
    ];
    let mut out = Vec::new();
    for e in events {
        let name = e
            .split('"')
            .nth(3)
            .filter(|_| e.starts_with(r#"{"type""#))
            .unwrap_or("message_delta");
        out.push(format!("event: {name}\ndata: {e}"));
        out.push(format!("data: {e}"));
    }
    out
}

/// Chat Completions payloads, as `data:` lines.
fn chat_payloads() -> Vec<String> {
    let payloads: Vec<String> = vec![
            C0.into(),
            content("a"),
            content("é"),
            delta(r#""content":null,"reasoning_content":"r""#),
            delta(r#""reasoning":"r""#),
            delta(r#""reasoning_details":[{"type":"reasoning.text","text":"r"}]"#),
            delta(r#""content":[{"type":"thinking","thinking":"t"},{"type":"text","text":"v"}]"#),
            delta(r#""tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]"#),
            delta(r#""tool_calls":[{"index":0,"function":{"arguments":"}"}}]"#),
            stop(""),
            stop(r#","usage":{"prompt_tokens":3,"completion_tokens":5}"#),
            r#"{"choices":[],"usage":{"completion_tokens":4,"prompt_cache_hit_tokens":1}}"#.into(),
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"usage":{"completion_tokens":6}}}"#.into(),
            r#"{"error":{"message":"boom","type":"server_error","code":"e1"}}"#.into(),
            "{oops".into(),
            "[DONE]".into(),
        ];
    payloads.into_iter().map(|p| format!("data: {p}")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any body, any cuts: the same measurement; with reads stamped in order, the
    /// timestamps are ordered as the definitions say.
    #[test]
    fn measurements_do_not_depend_on_cuts_and_timestamps_are_ordered(
        (api, body) in api_and_body(),
        points in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        check_cuts(&Setup { api, ..Setup::default() }, &body, &points)?;
    }

    /// The same, for bodies sent compressed (flushed at some of the cut points, as a
    /// provider flushes per event) and read in other cuts.
    #[test]
    fn compressed_measurements_do_not_depend_on_cuts(
        body in stream_body(Api::Chat),
        flush in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        points in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
        encoding in prop::sample::select(vec!["gzip", "deflate", "raw-deflate"]),
    ) {
        let setup = Setup { encoding: Some(encoding), ..Setup::default() };
        let mut flush: Vec<usize> = flush.iter().map(|i| i.index(body.len() + 1)).collect();
        flush.sort_unstable();
        let wire = setup.wire(&body, &flush);
        check_cuts(&setup, &wire, &points)?;
        // What was decoded is what plain bytes give.
        prop_assert_eq!(summary(setup.run(&[&wire], 0)), summary(Setup::default().run(&[&body], 0)));
    }

    /// The same, with reasoning tags declared and `<think>` … `</think>` content.
    #[test]
    fn tagged_reasoning_measurements_do_not_depend_on_cuts(
        body in think_body(),
        points in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        let setup = Setup { tags: Setup::think(), ..Setup::default() };
        check_cuts(&setup, &body, &points)?;
    }
}

/// Event streams of every API's shapes (Chat chunks, Anthropic Messages events,
/// Responses events), named or not, with comments and arbitrary bytes.
fn any_api_body() -> impl Strategy<Value = Vec<u8>> {
    let named: Vec<(&str, &str)> = vec![
        (
            "message_start",
            r#"{"type":"message_start","message":{"id":"m","model":"m","usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
        ("ping", r#"{"type":"ping"}"#),
        (
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        (
            "response.created",
            r#"{"type":"response.created","response":{"id":"r","model":"m","status":"in_progress"}}"#,
        ),
        (
            "response.reasoning_summary_text.delta",
            r#"{"type":"response.reasoning_summary_text.delta","delta":"r"}"#,
        ),
        (
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"a"}"#,
        ),
        (
            "response.function_call_arguments.delta",
            r#"{"type":"response.function_call_arguments.delta","delta":"{"}"#,
        ),
        (
            "response.completed",
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":3,"output_tokens":4}}}"#,
        ),
        (
            "response.failed",
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"x"}}}"#,
        ),
        (
            "response.incomplete",
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}"#,
        ),
    ];
    let item = prop_oneof![
        4 => prop::sample::select(named).prop_map(|(e, d)| format!("event: {e}\ndata: {d}\n\n").into_bytes()),
        2 => stream_body(Api::Chat),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(item, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Every API's parser, on any event stream of any API's shapes, plain or gzip'd:
    /// the same measurement whatever the cuts, timestamps ordered.
    #[test]
    fn every_api_measures_the_same_whatever_the_cuts(
        body in any_api_body(),
        api in prop::sample::select(Api::ALL.to_vec()),
        gzip in any::<bool>(),
        points in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        let setup = Setup { api, encoding: gzip.then_some("gzip"), ..Setup::default() };
        check_cuts(&setup, &setup.wire(&body, &[]), &points)?;
    }
}

/// Stream bodies whose content carries think tags, whole or cut between payloads.
fn think_body() -> impl Strategy<Value = Vec<u8>> {
    let texts = prop::sample::select(vec![
        "<think>",
        "</think>",
        "<thi",
        "nk>",
        "</th",
        "ink>",
        "\\n\\n",
        " ",
        "plan",
        "4",
        "<think>\\nplan",
        "x</think>\\n\\nA",
        "é",
    ]);
    let item = prop_oneof![
        6 => texts.prop_map(|t| format!("data: {}\n\n", content(t)).into_bytes()),
        1 => prop::sample::select(vec![
            format!("data: {}\n\n", delta(r#""reasoning_content":"r""#)),
            format!("data: {}\n\n", stop("")),
            "data: [DONE]\n\n".to_string(),
            ": keep-alive\n\n".to_string(),
        ]).prop_map(String::into_bytes),
    ];
    prop::collection::vec(item, 0..14).prop_map(|v| v.concat())
}

/// The property every parser must have: `wire` (a body of `setup`'s API, as sent)
/// measures the same read whole and read in pieces cut at `points`, and with reads
/// stamped in order its timestamps and counts are ordered as the definitions say.
pub(crate) fn check_cuts(
    setup: &Setup,
    wire: &[u8],
    points: &[prop::sample::Index],
) -> Result<(), TestCaseError> {
    {
        let body = wire;
        let mut at: Vec<usize> = points.iter().map(|i| i.index(body.len() + 1)).collect();
        at.sort_unstable();
        let mut pieces: Vec<&[u8]> = Vec::new();
        let mut from = 0;
        for a in at {
            pieces.push(&body[from..a]);
            from = a;
        }
        pieces.push(&body[from..]);
        let whole = summary(setup.run(&[body], 0));
        prop_assert_eq!(&summary(setup.run(&pieces, 0)), &whole);

        let r = setup.run(&pieces, 1_000);
        let rec = &r.record;
        let le = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => a <= b,
            _ => true,
        };
        prop_assert!(le(rec.ttfb_us, rec.first_byte_us));
        prop_assert!(le(rec.first_byte_us, rec.first_nonblank_us));
        prop_assert!(le(rec.first_nonblank_us, rec.ttft_us));
        prop_assert!(le(rec.ttft_us, rec.ttfc_us));
        // (A token after an early [DONE] is still read: only then can e2e come first.)
        prop_assert!(le(rec.ttft_us, rec.e2e_us));
        prop_assert_eq!(rec.first_byte_us.is_some(), rec.response_bytes > 0);
        if let Some(reasoning) = rec.reasoning_us {
            prop_assert_eq!(
                Some(reasoning),
                rec.ttfc_us.zip(rec.ttft_us).map(|(c, t)| c - t)
            );
            prop_assert!(rec.reasoning_chunks > 0);
        }
        let (c, re, t) = (
            rec.content_chunks,
            rec.reasoning_chunks,
            rec.tool_call_chunks,
        );
        prop_assert!(rec.token_payloads >= c.max(re).max(t));
        prop_assert!(rec.token_payloads <= c + re + t);
        prop_assert_eq!(rec.ttft_us.is_some(), rec.token_payloads > 0);
        // The token rule, for an event stream or (a JSON document sent instead) a body.
        let u = &rec.usage;
        let got = (rec.output_tokens, rec.output_tokens_source);
        let rule = |stream| {
            output_tokens(
                u.completion_tokens,
                u.reasoning_tokens,
                rec.token_payloads,
                stream,
            )
        };
        prop_assert!(got == rule(true) || got == rule(false), "{:?}", got);
        prop_assert!(rec.output_tokens >= u.completion_tokens.unwrap_or(0));
        prop_assert_eq!(rec.tokens_from_usage, rec.output_tokens_source.from_usage());
        match u.completion_tokens {
            Some(n) => {
                if let Some(d) = rec.usage_chunk_delta {
                    prop_assert_eq!(d, i64::from(n) - i64::from(rec.token_payloads));
                }
            }
            None => prop_assert_eq!(rec.usage_chunk_delta, None),
        }
    }
    Ok(())
}
