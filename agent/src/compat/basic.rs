//! The basic checks: stream, non-stream, usage in streams, output cap, stop sequence, the
//! model answered, `system_fingerprint`. Each judge is a pure function of what came back.

use latmesh_core::api::{Api, StreamUsage};
use latmesh_core::compat::{
    Evidence, LONG_ANSWER_PROMPT, OUTPUT_CAP_TOKENS, STOP_PROMPT, STOP_SEQUENCE, Verdict,
};
use latmesh_core::prompts::Message;
use serde_json::json;

use super::context::ProviderContext;
use super::send::{Call, error_words, evidence, failed, quote, send};
use crate::probe::ProbeResult;
use crate::probe::request::refuses_stream_usage;

/// Output cap of the requests that only need some answer (room for a reasoning model's
/// thinking before its few words).
pub const PLAIN_MAX_TOKENS: u32 = 1024;

/// Output cap of the stop-sequence check's request.
pub const STOP_MAX_TOKENS: u32 = 128;

/// `finish_reason=…` in evidence.
fn finish(r: &ProbeResult) -> String {
    format!(
        "finish_reason {}",
        r.record.finish_reason.as_deref().unwrap_or("none")
    )
}

/// [`latmesh_core::compat::CompatCheck::Stream`] and
/// [`latmesh_core::compat::CompatCheck::NonStream`]: ended `ok` with visible content.
pub fn judge_answer(r: &ProbeResult) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[]) {
        return v;
    }
    let rec = &r.record;
    if rec.content_chunks > 0 {
        let msg = format!("{} content payload(s), {}", rec.content_chunks, finish(r));
        (Verdict::Pass, evidence(rec.http_status, None, msg))
    } else {
        let msg = format!(
            "no visible content ({}, {} reasoning payload(s))",
            finish(r),
            rec.reasoning_chunks
        );
        (
            Verdict::Fail,
            evidence(rec.http_status, Some("content"), msg),
        )
    }
}

/// [`latmesh_core::compat::CompatCheck::StreamUsage`]: on Chat Completions, a stream sent
/// with `stream_options.include_usage` is not refused (a 4xx naming the field fails) and
/// carries `usage.completion_tokens`; on the other APIs, usage is in the stream. A count of
/// 0 after streamed text fails: the usage arrived and is false (aimock over Messages and
/// Responses: `output_tokens` 0 after ~35 text deltas), of no use to a client counting cost.
pub fn judge_stream_usage(r: &ProbeResult, api: Api) -> (Verdict, Evidence) {
    let rec = &r.record;
    if api == Api::Chat
        && rec.outcome() == latmesh_core::record::Outcome::Http4xx
        && refuses_stream_usage(rec, &r.error_body_fields)
    {
        let msg = format!("stream_options refused: {}", error_words(rec));
        return (
            Verdict::Fail,
            evidence(rec.http_status, Some("stream_options"), msg),
        );
    }
    if let Some(v) = failed(r, &[]) {
        return v;
    }
    let field = Some("usage.completion_tokens");
    let streamed = rec.content_chunks + rec.reasoning_chunks;
    match rec.usage.completion_tokens {
        Some(0) if streamed > 0 => (
            Verdict::Fail,
            evidence(
                rec.http_status,
                field,
                format!("0 completion tokens reported after {streamed} streamed payload(s)"),
            ),
        ),
        Some(n) => (
            Verdict::Pass,
            evidence(
                rec.http_status,
                field,
                format!("{n} completion tokens reported in the stream"),
            ),
        ),
        None => {
            let asked = if api == Api::Chat {
                " although stream_options.include_usage was sent"
            } else {
                ""
            };
            (
                Verdict::Fail,
                evidence(
                    rec.http_status,
                    field,
                    format!("no usage in the stream{asked}"),
                ),
            )
        }
    }
}

/// [`latmesh_core::compat::CompatCheck::OutputCap`]: finish reason `length` and completion
/// tokens (usage, else the payloads counted) ≤ `cap`.
pub fn judge_output_cap(r: &ProbeResult, cap: u32, cap_field: &str) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[cap_field]) {
        return v;
    }
    let rec = &r.record;
    let (tokens, source) = match rec.usage.completion_tokens {
        Some(n) => (n, "completion tokens"),
        None => (rec.output_tokens, "payloads (no usage)"),
    };
    let msg = format!("{}, {tokens} {source}, cap {cap}", finish(r));
    let ok = rec.finish_reason.as_deref() == Some("length") && tokens <= cap;
    let (verdict, field) = match (ok, tokens <= cap) {
        (true, _) => (Verdict::Pass, "finish_reason"),
        (false, true) => (Verdict::Fail, "finish_reason"),
        (false, false) => (Verdict::Fail, "usage.completion_tokens"),
    };
    (verdict, evidence(rec.http_status, Some(field), msg))
}

/// The number [`STOP_PROMPT`]'s count writes just before [`STOP_SEQUENCE`]. An answer
/// without it never got near the stop sequence (a canned reply, prose), so it cannot show
/// whether the sequence is honoured: aimock and llmock ignore `stop`, and their fixed answers,
/// which never contain a 7, would otherwise pass.
pub const BEFORE_STOP: &str = "6";

/// [`latmesh_core::compat::CompatCheck::Stop`]: finish reason `stop`, visible content
/// without [`STOP_SEQUENCE`]. Inconclusive when the answer cannot tell: it never counted up
/// to [`BEFORE_STOP`], or it reached the output cap without writing the stop sequence (a
/// model that loops, `123456; 123456; …`, would have done the same against a provider that
/// ignores `stop`).
pub fn judge_stop(r: &ProbeResult, stop_field: &str) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[stop_field]) {
        return v;
    }
    let rec = &r.record;
    let text = &r.content_text;
    let field = Some(stop_field);
    if let Some(at) = text.find(STOP_SEQUENCE) {
        let from = text[..at]
            .char_indices()
            .rev()
            .nth(15)
            .map_or(0, |(i, _)| i);
        let msg = format!(
            "the answer goes on past the stop sequence {STOP_SEQUENCE:?}: …{}",
            quote(&text[from..])
        );
        return (Verdict::Fail, evidence(rec.http_status, field, msg));
    }
    if text.trim().is_empty() {
        let msg = format!("no visible content ({})", finish(r));
        return (Verdict::Fail, evidence(rec.http_status, field, msg));
    }
    if !text.contains(BEFORE_STOP) {
        let msg = format!(
            "the answer never counted up to the stop sequence {STOP_SEQUENCE:?}, so it cannot \
             show whether it is honoured ({}): {}",
            finish(r),
            quote(text)
        );
        return (Verdict::Inconclusive, evidence(rec.http_status, field, msg));
    }
    if rec.finish_reason.as_deref() == Some("length") {
        let msg = format!(
            "the answer reached the output cap ({STOP_MAX_TOKENS} tokens) without writing the \
             stop sequence {STOP_SEQUENCE:?}, so it cannot show whether it is honoured: {}",
            quote(text)
        );
        return (Verdict::Inconclusive, evidence(rec.http_status, field, msg));
    }
    if rec.finish_reason.as_deref() != Some("stop") {
        let msg = format!("{} instead of stop", finish(r));
        return (Verdict::Fail, evidence(rec.http_status, field, msg));
    }
    let msg = format!("stopped before {STOP_SEQUENCE:?}: {}", quote(text));
    (Verdict::Pass, evidence(rec.http_status, field, msg))
}

/// [`latmesh_core::compat::CompatCheck::ModelName`]: the `model` answered names `expected`
/// (*not offered* when no model was sent).
pub fn judge_model_name(r: &ProbeResult, expected: &str) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[]) {
        return v;
    }
    let rec = &r.record;
    let field = Some("model");
    match rec.answered_model.as_deref() {
        None => (
            Verdict::NotOffered,
            evidence(rec.http_status, field, "no model in the answer"),
        ),
        Some(m) if latmesh_core::answered_model::model_matches(expected, m) => (
            Verdict::Pass,
            evidence(rec.http_status, field, format!("answered {m}")),
        ),
        Some(m) => (
            Verdict::Fail,
            evidence(
                rec.http_status,
                field,
                format!("answered {m}, expected {expected}"),
            ),
        ),
    }
}

/// [`latmesh_core::compat::CompatCheck::SystemFingerprint`]: the answer carries one (*not
/// offered* when absent).
pub fn judge_fingerprint(r: &ProbeResult) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[]) {
        return v;
    }
    let rec = &r.record;
    let field = Some("system_fingerprint");
    match rec.system_fingerprint.as_deref() {
        Some(fp) => (
            Verdict::Pass,
            evidence(rec.http_status, field, format!("system_fingerprint {fp}")),
        ),
        None => (
            Verdict::NotOffered,
            evidence(
                rec.http_status,
                field,
                "no system_fingerprint in the answer",
            ),
        ),
    }
}

/// Sends the stream-usage check's request: a chat stream asking for usage
/// (`stream_usage = always`), or a plain stream on the other APIs.
pub async fn stream_usage(
    ctx: &ProviderContext<'_>,
    messages: &[Message],
    timeout_s: f64,
) -> (Verdict, Evidence) {
    let mut call = Call::new(messages, true, PLAIN_MAX_TOKENS, timeout_s);
    call.stream_usage = StreamUsage::Always;
    let r = send(ctx, &call).await;
    judge_stream_usage(&r, ctx.provider.request.api)
}

/// Sends the output-cap check's request (not streamed: usage comes with the body).
pub async fn output_cap(ctx: &ProviderContext<'_>, timeout_s: f64) -> (Verdict, Evidence) {
    let messages = [Message::new("user", LONG_ANSWER_PROMPT)];
    let call = Call::new(&messages, false, OUTPUT_CAP_TOKENS, timeout_s);
    let r = send(ctx, &call).await;
    let shape = &ctx.provider.request;
    let cap_field = shape
        .max_tokens_field
        .as_deref()
        .unwrap_or(crate::probe::request::default_max_tokens_field(shape.api));
    judge_output_cap(&r, OUTPUT_CAP_TOKENS, cap_field)
}

/// The stop field of `api` (`stop`, Anthropic's `stop_sequences`); `None` on the
/// Responses API, which has none.
pub fn stop_field(api: Api) -> Option<&'static str> {
    match api {
        Api::Chat => Some("stop"),
        Api::Anthropic => Some("stop_sequences"),
        Api::Responses => None,
    }
}

/// Sends the stop check's request (callers skip the Responses API: [`stop_field`]).
pub async fn stop(ctx: &ProviderContext<'_>, field: &str, timeout_s: f64) -> (Verdict, Evidence) {
    let messages = [Message::new("user", STOP_PROMPT)];
    let call = Call::new(&messages, false, STOP_MAX_TOKENS, timeout_s)
        .with(field, json!([STOP_SEQUENCE]))
        .keep_text();
    let r = send(ctx, &call).await;
    judge_stop(&r, field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::record::{Outcome, ProbeRecord, Usage};

    fn ok(f: impl FnOnce(&mut ProbeRecord)) -> ProbeResult {
        let mut record = ProbeRecord {
            outcome: Some(Outcome::Ok),
            http_status: Some(200),
            finish_reason: Some("stop".into()),
            ..ProbeRecord::default()
        };
        f(&mut record);
        ProbeResult {
            record,
            ..ProbeResult::default()
        }
    }

    #[test]
    fn an_answer_needs_visible_content() {
        assert_eq!(judge_answer(&ok(|r| r.content_chunks = 3)).0, Verdict::Pass);
        let (v, e) = judge_answer(&ok(|r| r.reasoning_chunks = 9));
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "no visible content (finish_reason stop, 9 reasoning payload(s))"
        );
    }

    #[test]
    fn usage_in_streams() {
        let with = ok(|r| r.usage.completion_tokens = Some(7));
        assert_eq!(judge_stream_usage(&with, Api::Chat).0, Verdict::Pass);
        let zero = ok(|r| {
            r.usage.completion_tokens = Some(0);
            r.content_chunks = 35;
        });
        let (v, e) = judge_stream_usage(&zero, Api::Anthropic);
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "0 completion tokens reported after 35 streamed payload(s)"
        );
        let (v, e) = judge_stream_usage(&ok(|_| {}), Api::Chat);
        assert_eq!(v, Verdict::Fail);
        assert!(e.message.contains("although stream_options"), "{e:?}");
        assert_eq!(
            judge_stream_usage(&ok(|_| {}), Api::Anthropic).1.message,
            "no usage in the stream"
        );
        let refused = ProbeResult {
            record: ProbeRecord {
                outcome: Some(Outcome::Http4xx),
                http_status: Some(400),
                error_message: Some("Unrecognized request argument: stream_options".into()),
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        };
        let (v, e) = judge_stream_usage(&refused, Api::Chat);
        assert_eq!(
            (v, e.field.as_deref(), e.http_status),
            (Verdict::Fail, Some("stream_options"), Some(400))
        );
    }

    #[test]
    fn the_output_cap_needs_length_and_few_tokens() {
        let capped = |fr: &str, n| {
            ok(|r| {
                r.finish_reason = Some(fr.into());
                r.usage = Usage {
                    completion_tokens: Some(n),
                    ..Usage::default()
                };
            })
        };
        assert_eq!(
            judge_output_cap(&capped("length", 8), 8, "max_tokens").0,
            Verdict::Pass
        );
        let (v, e) = judge_output_cap(&capped("stop", 300), 8, "max_tokens");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "finish_reason stop, 300 completion tokens, cap 8"
        );
        assert_eq!(e.field.as_deref(), Some("usage.completion_tokens"));
        let (v, e) = judge_output_cap(&capped("stop", 5), 8, "max_tokens");
        assert_eq!(
            (v, e.field.as_deref()),
            (Verdict::Fail, Some("finish_reason"))
        );
        assert_eq!(
            judge_output_cap(&capped("length", 9), 8, "max_tokens").0,
            Verdict::Fail
        );
    }

    #[test]
    fn a_stop_sequence_ends_the_answer_before_it() {
        let answer = |text: &str, fr: &str| {
            let mut r = ok(|r| r.finish_reason = Some(fr.into()));
            r.content_text = text.into();
            r
        };
        assert_eq!(
            judge_stop(&answer("1 2 3 4 5 6 ", "stop"), "stop").0,
            Verdict::Pass
        );
        let (v, e) = judge_stop(&answer("1 2 3 4 5 6 7 8 9 10", "stop"), "stop");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "the answer goes on past the stop sequence \"7\": …\"1 2 3 4 5 6 7 8 9 10\""
        );
        // Answers that cannot tell: prose that never counts, a count that loops to the cap.
        let (v, e) = judge_stop(&answer("Paris is the capital of France.", "stop"), "stop");
        assert_eq!(v, Verdict::Inconclusive);
        assert!(
            e.message.starts_with("the answer never counted up to"),
            "{e:?}"
        );
        assert_eq!(
            judge_stop(&answer("1 2 3", "length"), "stop").0,
            Verdict::Inconclusive
        );
        let (v, e) = judge_stop(&answer("123456; 123456; 123456", "length"), "stop");
        assert_eq!(v, Verdict::Inconclusive);
        assert!(e.message.contains("output cap (128 tokens)"), "{e:?}");
        assert_eq!(
            judge_stop(&answer("1 2 3 4 5 6 ", "content_filter"), "stop").0,
            Verdict::Fail
        );
        assert_eq!(
            STOP_SEQUENCE.parse::<u32>().unwrap() - 1,
            BEFORE_STOP.parse::<u32>().unwrap(),
            "BEFORE_STOP is the number the count writes before the stop sequence"
        );
        assert_eq!(judge_stop(&answer("", "stop"), "stop").0, Verdict::Fail);
        assert_eq!(stop_field(Api::Responses), None);
    }

    #[test]
    fn model_and_fingerprint() {
        let m = |name: Option<&str>| ok(|r| r.answered_model = name.map(str::to_string));
        assert_eq!(
            judge_model_name(&m(Some("org/Model-A")), "model-a").0,
            Verdict::Pass
        );
        let (v, e) = judge_model_name(&m(Some("other")), "model-a");
        assert_eq!(
            (v, e.message.as_str()),
            (Verdict::Fail, "answered other, expected model-a")
        );
        assert_eq!(judge_model_name(&m(None), "model-a").0, Verdict::NotOffered);
        let fp = ok(|r| r.system_fingerprint = Some("fp_1".into()));
        assert_eq!(judge_fingerprint(&fp).0, Verdict::Pass);
        assert_eq!(judge_fingerprint(&ok(|_| {})).0, Verdict::NotOffered);
    }
}
