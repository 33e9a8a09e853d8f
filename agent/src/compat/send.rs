//! Sending one check's request (with its feature fields, the provider's caps, one retry of a
//! failure that says nothing about the feature) and the verdict of a request that did not
//! end `ok` ([`failed`]).

use std::time::{Duration, Instant};

use latmesh_core::api::StreamUsage;
use latmesh_core::compat::{Evidence, MAX_EVIDENCE_BYTES, Verdict};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::record::{Outcome, ProbeRecord};

use super::context::ProviderContext;
use crate::probe::{ProbeOptions, ProbeRequest, ProbeResult};

/// The wait before the one retry of an inconclusive failure.
pub const RETRY_WAIT: Duration = Duration::from_secs(1);

/// The longest `Retry-After` honoured before the retry; a longer one is not waited for (the
/// check is then inconclusive).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// One request of a check.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    /// Messages sent.
    pub messages: &'a [Message],
    /// Streamed.
    pub stream: bool,
    /// Output cap.
    pub max_tokens: u32,
    /// Feature fields put in the body (under the provider's `extra_body`).
    pub features: serde_json::Map<String, serde_json::Value>,
    /// Whether a chat stream asks for usage (`stream_options`): `Never` unless the check is
    /// about it.
    pub stream_usage: StreamUsage,
    /// Keep the answer's texts (in memory only).
    pub keep_text: bool,
    /// `temperature`, when set.
    pub temperature: Option<f64>,
    /// `top_p`, when set.
    pub top_p: Option<f64>,
    /// Total timeout, seconds.
    pub timeout_s: f64,
    /// Send this key instead of the provider's (the wrong-key check).
    pub wrong_key: Option<&'a str>,
    /// A timeout is the check's answer (the wrong-key check: a hang fails), not retried.
    pub timeout_is_answer: bool,
    /// Ask a Responses provider for its encrypted reasoning (to send it back).
    pub reasoning_passback: bool,
}

impl<'a> Call<'a> {
    /// A plain call: `messages`, streamed or not, capped at `max_tokens`, within `timeout_s`.
    pub fn new(messages: &'a [Message], stream: bool, max_tokens: u32, timeout_s: f64) -> Self {
        Call {
            messages,
            stream,
            max_tokens,
            features: serde_json::Map::new(),
            stream_usage: StreamUsage::Never,
            keep_text: false,
            temperature: None,
            top_p: None,
            timeout_s,
            wrong_key: None,
            timeout_is_answer: false,
            reasoning_passback: false,
        }
    }

    /// With a feature field in the body.
    pub fn with(mut self, key: &str, value: serde_json::Value) -> Self {
        self.features.insert(key.to_string(), value);
        self
    }

    /// Keeping the answer's texts.
    pub fn keep_text(mut self) -> Self {
        self.keep_text = true;
        self
    }
}

/// The timeouts of a request of `total_s` seconds: connect within 10 s (or the total),
/// the first token, the idle gap and the whole request within the total.
pub fn timeouts(total_s: f64) -> Timeouts {
    Timeouts {
        connect_s: total_s.min(10.0),
        ttft_s: total_s,
        idle_s: total_s,
        total_s,
    }
}

/// Whether an outcome says nothing about the feature checked: throttled, 5xx, a timeout, a
/// connection error, a stream that broke or stopped (retried once, then inconclusive).
pub fn is_inconclusive(o: Outcome) -> bool {
    matches!(
        o,
        Outcome::Throttled
            | Outcome::Http5xx
            | Outcome::TimeoutConnect
            | Outcome::TimeoutTtft
            | Outcome::TimeoutIdle
            | Outcome::TimeoutTotal
            | Outcome::ConnectionError
            | Outcome::StreamError
            | Outcome::Truncated
            | Outcome::Cancelled
            | Outcome::Dropped
    )
}

fn is_timeout(o: Outcome) -> bool {
    matches!(
        o,
        Outcome::TimeoutConnect
            | Outcome::TimeoutTtft
            | Outcome::TimeoutIdle
            | Outcome::TimeoutTotal
    )
}

/// How long to wait before retrying `rec`, or `None` when it is not retried: an
/// inconclusive outcome is retried once after [`RETRY_WAIT`], or after its `Retry-After`
/// when that is at most [`MAX_RETRY_AFTER`] (a longer one is not waited for).
pub fn retry_wait(rec: &ProbeRecord, timeout_is_answer: bool) -> Option<Duration> {
    let o = rec.outcome();
    if !is_inconclusive(o) || (timeout_is_answer && is_timeout(o)) {
        return None;
    }
    match rec.retry_after_s.filter(|s| s.is_finite() && *s > 0.0) {
        Some(s) if s <= MAX_RETRY_AFTER.as_secs_f64() => Some(Duration::from_secs_f64(s)),
        Some(_) => None,
        None => Some(RETRY_WAIT),
    }
}

/// Sends `call` to the provider of `ctx` (within its caps), retrying once as
/// [`retry_wait`] says.
pub async fn send(ctx: &ProviderContext<'_>, call: &Call<'_>) -> ProbeResult {
    let r = send_once(ctx, call).await;
    match retry_wait(&r.record, call.timeout_is_answer) {
        Some(wait) => {
            tokio::time::sleep(wait).await;
            send_once(ctx, call).await
        }
        None => r,
    }
}

async fn send_once(ctx: &ProviderContext<'_>, call: &Call<'_>) -> ProbeResult {
    let mut shape = ctx.shape_with(call.features.clone(), call.stream_usage);
    if call.reasoning_passback
        && let Some(s) = crate::probe::responses::with_reasoning_passback(&shape)
    {
        shape = s;
    }
    let timeouts = timeouts(call.timeout_s);
    let p = ctx.provider;
    let req = ProbeRequest {
        base_url: &p.base_url,
        model_id: &p.model_id,
        api_key: call.wrong_key.or(ctx.api_key()),
        messages: call.messages,
        stream: call.stream,
        max_tokens: call.max_tokens,
        temperature: call.temperature,
        top_p: call.top_p,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: p.user_agent.as_deref(),
        shape: &shape,
        secret_headers: ctx.secret_headers(),
    };
    let tokens = call
        .messages
        .iter()
        .map(|m| m.content.len() / 4)
        .sum::<usize>() as u32
        + call.max_tokens;
    let _permit = ctx.acquire(tokens).await;
    let opts = ProbeOptions {
        keep_text: call.keep_text,
        ..ProbeOptions::default()
    };
    let mut r = ctx.prober.probe_with(&req, opts).await;
    // The texts are the provider's: the key and secret values go before any judge quotes
    // (and cuts) them, so no fragment of them can survive a cut.
    if call.keep_text || !r.tool_calls.is_empty() {
        r.content_text = ctx.redact(&r.content_text);
        r.reasoning_text = ctx.redact(&r.reasoning_text);
        for t in &mut r.tool_calls {
            t.arguments = ctx.redact(&t.arguments);
            t.name = ctx.redact(&t.name);
        }
    }
    if r.record.outcome() == Outcome::Throttled
        && let Some(s) = r.record.retry_after_s.filter(|s| s.is_finite() && *s > 0.0)
    {
        ctx.pause(Instant::now() + Duration::from_secs_f64(s.min(3_600.0)));
    }
    r
}

/// Evidence of `status`, `field` and `message` (cut to [`MAX_EVIDENCE_BYTES`]).
pub fn evidence(status: Option<u16>, field: Option<&str>, message: impl Into<String>) -> Evidence {
    let message: String = message.into();
    Evidence {
        http_status: status,
        field: field.map(str::to_string),
        message: latmesh_core::provider_bounds::bound_text(&message, MAX_EVIDENCE_BYTES, &|t| {
            t.to_string()
        })
        .0,
    }
}

/// At most [`latmesh_core::compat::MAX_QUOTE_CHARS`] characters of an answer, quoted, for
/// evidence.
pub fn quote(text: &str) -> String {
    let t = text.trim();
    let cut: String = t
        .chars()
        .take(latmesh_core::compat::MAX_QUOTE_CHARS)
        .collect();
    if cut.len() < t.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// The provider's error of `rec` in words: `HTTP 400: message` (type, code when no message).
pub fn error_words(rec: &ProbeRecord) -> String {
    let what = rec
        .error_message
        .as_deref()
        .or(rec.error_type.as_deref())
        .or(rec.error_code.as_deref())
        .unwrap_or("");
    match rec.http_status {
        Some(s) if s >= 400 => format!("{} (HTTP {s}): {what}", rec.outcome()),
        _ => format!("{}: {what}", rec.outcome()),
    }
}

/// Whether the error of `r` (message, type, code, or the fields named in its whole body)
/// names any of `fields`.
pub fn names_any(r: &ProbeResult, fields: &[&str]) -> bool {
    let rec = &r.record;
    fields.iter().any(|f| {
        r.error_body_fields.contains(f)
            || [&rec.error_message, &rec.error_type, &rec.error_code]
                .into_iter()
                .flatten()
                .any(|t| t.contains(f))
    })
}

/// The verdict of a request that did not end `ok` (`None` when it did): inconclusive for
/// a failure that says nothing about the feature ([`is_inconclusive`]) and for a refused
/// API key (401/403: the key configured here, not the provider, is at fault); *not
/// offered* for a 4xx whose error names one of `fields` (evidence: the first of them);
/// otherwise *fail*.
pub fn failed(r: &ProbeResult, fields: &[&str]) -> Option<(Verdict, Evidence)> {
    let rec = &r.record;
    let o = rec.outcome();
    if o == Outcome::Ok {
        return None;
    }
    let words = error_words(rec);
    let field = fields.first().copied();
    let v = if is_inconclusive(o) {
        (
            Verdict::Inconclusive,
            evidence(rec.http_status, None, words),
        )
    } else if matches!(rec.http_status, Some(401 | 403)) {
        let msg = format!("the API key was refused, check api_key_env: {words}");
        (Verdict::Inconclusive, evidence(rec.http_status, None, msg))
    } else if o == Outcome::Http4xx && names_any(r, fields) {
        (Verdict::NotOffered, evidence(rec.http_status, field, words))
    } else {
        (Verdict::Fail, evidence(rec.http_status, field, words))
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn failed_with(o: Outcome, status: Option<u16>, msg: &str) -> ProbeResult {
        ProbeResult {
            record: ProbeRecord {
                outcome: Some(o),
                http_status: status,
                error_message: Some(msg.into()),
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        }
    }

    #[test]
    fn failures_are_judged_by_what_they_say_about_the_feature() {
        let f = |o, s, m: &str| failed(&failed_with(o, s, m), &["response_format"]).unwrap();
        let (v, e) = f(Outcome::Http4xx, Some(400), "unknown field response_format");
        assert_eq!(v, Verdict::NotOffered);
        assert_eq!(
            (e.http_status, e.field.as_deref()),
            (Some(400), Some("response_format"))
        );
        assert_eq!(
            e.message,
            "http_4xx (HTTP 400): unknown field response_format"
        );
        assert_eq!(
            f(Outcome::Http4xx, Some(400), "bad max_tokens").0,
            Verdict::Fail
        );
        assert_eq!(
            f(Outcome::Http4xx, Some(401), "no").0,
            Verdict::Inconclusive
        );
        assert_eq!(
            f(Outcome::Throttled, Some(429), "").0,
            Verdict::Inconclusive
        );
        assert_eq!(f(Outcome::Http5xx, Some(503), "").0, Verdict::Inconclusive);
        assert_eq!(f(Outcome::TimeoutTtft, None, "").0, Verdict::Inconclusive);
        assert_eq!(f(Outcome::ProtocolError, Some(200), "").0, Verdict::Fail);
        // No outcome reads as a protocol error; an `ok` is left to the check.
        assert_eq!(
            failed(&ProbeResult::default(), &[]).unwrap().0,
            Verdict::Fail
        );
        let mut ok = ProbeResult::default();
        ok.record.outcome = Some(Outcome::Ok);
        assert_eq!(failed(&ok, &[]), None);
    }

    #[test]
    fn retries_wait_a_second_or_a_short_retry_after() {
        let mut rec = failed_with(Outcome::Throttled, Some(429), "").record;
        assert_eq!(retry_wait(&rec, false), Some(RETRY_WAIT));
        rec.retry_after_s = Some(3.0);
        assert_eq!(retry_wait(&rec, false), Some(Duration::from_secs(3)));
        rec.retry_after_s = Some(30.0);
        assert_eq!(retry_wait(&rec, false), None);
        let t = failed_with(Outcome::TimeoutTotal, None, "").record;
        assert_eq!(retry_wait(&t, false), Some(RETRY_WAIT));
        assert_eq!(retry_wait(&t, true), None);
        let bad = failed_with(Outcome::Http4xx, Some(400), "").record;
        assert_eq!(retry_wait(&bad, false), None);
        let long = "0123456789".repeat(20);
        assert_eq!(quote(&format!("  {long}xyz ")), format!("{long:?}…"));
        assert_eq!(quote(&format!(" {long} ")), format!("{long:?}"));
    }
}
