//! The rules that name how an attempt ended (docs/metrics.md "Outcomes"), and the
//! hygiene of what a record may say about it.

use std::time::{Duration, SystemTime};

use latmesh_core::provider_bounds;
use latmesh_core::record::{Outcome, ProbeRecord};

/// Longest error message kept in a record, bytes (the `…` of a cut included).
pub const MAX_ERROR_MESSAGE: usize = provider_bounds::ERROR_MESSAGE.max_bytes;

/// The first thing that went wrong during an attempt. Later failures never replace it: the
/// record names the cause, not its consequences (a stream that sent an error and then hung is
/// a `stream_error`, not a timeout).
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The outcome it leads to.
    pub outcome: Outcome,
    /// Provider error type (or code when there is no type).
    pub error_type: Option<String>,
    /// Provider error code.
    pub error_code: Option<String>,
    /// What happened, unscrubbed and untruncated (see [`Scrubber`]).
    pub message: String,
}

impl Failure {
    /// A failure with only a message.
    pub fn new(outcome: Outcome, message: impl Into<String>) -> Self {
        Failure {
            outcome,
            error_type: None,
            error_code: None,
            message: message.into(),
        }
    }
}

/// How the body of a 2xx response stopped being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyEnd {
    /// The body ended normally.
    Eof,
    /// The connection broke while reading it.
    Broken,
    /// A deadline passed while waiting for it (the outcome says which).
    TimedOut(Outcome),
    /// We stopped reading: `[DONE]` arrived and the rest was not worth waiting for, or the
    /// event stream could not be followed any more.
    Stopped,
}

/// What a streamed 2xx body showed; see [`classify_stream`].
#[derive(Clone, Copy, Debug)]
pub struct StreamFacts<'a> {
    /// `data: [DONE]` arrived.
    pub saw_done: bool,
    /// The last `finish_reason`.
    pub finish_reason: Option<&'a str>,
    /// JSON chat payloads dispatched (README "payload index" count).
    pub payloads: u32,
    /// Body bytes received.
    pub body_bytes: u64,
    /// How reading stopped.
    pub end: BodyEnd,
}

/// Finish reasons that mean the provider aborted generation (DeepSeek's
/// `insufficient_system_resource`, vLLM's `abort`, generic `error`): a `stream_error` that
/// keeps its finish_reason. Any other value (`stop`, `length`, `tool_calls`,
/// `content_filter`, `eos`, …) is a normal end.
pub fn is_abort_finish(reason: &str) -> bool {
    matches!(
        reason,
        "insufficient_system_resource" | "abort" | "aborted" | "error" | "cancelled" | "canceled"
    ) || reason.contains("error")
}

/// The outcome of a 2xx event stream without a recorded [`Failure`]: `Ok(())` when complete,
/// else the failure to record.
///
/// * `[DONE]` or a `finish_reason` followed by the end of the body → `ok` (a body that broke
///   after its `finish_reason` is still a complete answer);
/// * a body with no chat payload at all (empty, or only comments) → `protocol_error`, or
///   `connection_error` when the connection broke before the first payload;
/// * a deadline before either → that timeout;
/// * any other end (clean or broken) → `truncated`: the answer stopped short.
///
/// # Errors
/// The failure when the attempt is not `ok`.
pub fn classify_stream(f: &StreamFacts<'_>) -> Result<(), Failure> {
    if f.payloads == 0 && !f.saw_done && f.end == BodyEnd::Broken {
        return Err(Failure::new(
            Outcome::ConnectionError,
            "connection broke before any chat payload",
        ));
    }
    if f.payloads == 0 && (f.saw_done || !matches!(f.end, BodyEnd::TimedOut(_))) {
        let what = if f.body_bytes == 0 {
            "empty 200 body"
        } else {
            "200 body without any chat payload"
        };
        return Err(Failure::new(Outcome::ProtocolError, what));
    }
    if f.saw_done {
        return Ok(());
    }
    match f.end {
        BodyEnd::TimedOut(o) => Err(Failure::new(o, timeout_message(o))),
        BodyEnd::Eof | BodyEnd::Broken if f.finish_reason.is_some() => Ok(()),
        BodyEnd::Broken => Err(Failure::new(
            Outcome::Truncated,
            "connection broke before the end of the answer",
        )),
        BodyEnd::Eof | BodyEnd::Stopped => Err(Failure::new(
            Outcome::Truncated,
            "body ended with neither [DONE] nor a finish_reason",
        )),
    }
}

/// The configured limit, seconds, behind a timeout outcome (`None` for other outcomes).
pub fn timeout_limit_s(o: Outcome, t: &latmesh_core::plan::Timeouts) -> Option<f64> {
    match o {
        Outcome::TimeoutConnect => Some(t.connect_s),
        Outcome::TimeoutTtft => Some(t.ttft_s),
        Outcome::TimeoutIdle => Some(t.idle_s),
        Outcome::TimeoutTotal => Some(t.total_s),
        _ => None,
    }
}

/// A fixed message for a timeout outcome (the probe appends the limit, [`timeout_limit_s`]).
pub fn timeout_message(o: Outcome) -> &'static str {
    match o {
        Outcome::TimeoutConnect => "connect timeout",
        Outcome::TimeoutTtft => "no token before the TTFT timeout",
        Outcome::TimeoutIdle => "no body bytes within the idle timeout",
        Outcome::TimeoutTotal => "attempt exceeded the total timeout",
        _ => "timeout",
    }
}

/// Retry-After (or OpenAI's `retry-after-ms`) in seconds: delay-seconds (fractions accepted)
/// or an HTTP-date (RFC 9110), relative to `now`; a date in the past gives 0.
pub fn parse_retry_after(
    retry_after: Option<&str>,
    retry_after_ms: Option<&str>,
    now: SystemTime,
) -> Option<f64> {
    let ms = retry_after_ms
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0);
    if let Some(ms) = ms {
        return Some(ms / 1000.0);
    }
    let v = retry_after?.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then_some(s);
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64(),
    )
}

/// Removes secrets from provider text bound for a record: the API key (the only secret a
/// request carries: it is the `Authorization` header's whole secret part) and any prompt
/// message echoed back by a provider (whole, or its first 64 bytes). [`Scrubber::bound`]
/// applies it, with every bound of [`latmesh_core::provider_bounds`], to a whole record.
#[derive(Clone, Copy, Debug)]
pub struct Scrubber<'a> {
    /// The API key, if any.
    pub api_key: Option<&'a str>,
    /// The values of the provider's secret headers (`{ env = … }`), redacted like the key.
    pub secrets: &'a [super::secrets::SecretHeader],
    /// The prompt messages' contents.
    pub prompt: &'a [latmesh_core::prompts::Message],
}

/// Shortest run of the API key's bytes that is redacted where it appears (providers echo keys
/// whole, without their `sk-` prefix, or in pieces; a masked `sk-…wxyz` with 4 characters
/// shown stays readable).
pub const KEY_FRAGMENT_BYTES: usize = 8;

impl Scrubber<'_> {
    /// `text` with the API key, every run of at least [`KEY_FRAGMENT_BYTES`] bytes of it, and
    /// echoed prompt text replaced by `[redacted]`; not cut.
    pub fn redact(&self, text: &str) -> String {
        const REDACTED: &str = "[redacted]";
        let mut out = match self.api_key.filter(|k| !k.is_empty()) {
            Some(key) => redact_fragments(text, key.as_bytes(), REDACTED),
            None => text.to_string(),
        };
        for secret in self.secrets.iter().filter(|s| !s.value().is_empty()) {
            out = redact_fragments(&out, secret.value().as_bytes(), REDACTED);
        }
        for m in self.prompt {
            let c = m.content.as_str();
            if c.len() >= 16 && out.contains(c) {
                out = out.replace(c, REDACTED);
            }
            if c.len() > 64 {
                let mut end = 64;
                while !c.is_char_boundary(end) {
                    end -= 1;
                }
                if out.contains(&c[..end]) {
                    out = out.replace(&c[..end], REDACTED);
                }
            }
        }
        out
    }

    /// [`Scrubber::redact`], then cut to [`MAX_ERROR_MESSAGE`] bytes (`…` included).
    pub fn clean(&self, text: &str) -> String {
        self.clean_to(text, MAX_ERROR_MESSAGE)
    }

    /// [`Scrubber::redact`], then cut to `max_bytes` (on a character boundary, `…` included):
    /// [`latmesh_core::provider_bounds::bound_text`].
    pub fn clean_to(&self, text: &str, max_bytes: usize) -> String {
        provider_bounds::bound_text(text, max_bytes, &|t| self.redact(t)).0
    }

    /// Bounds every provider value of `rec` with this scrubber
    /// ([`provider_bounds::bound_record`]): the step every record of the probe engine takes
    /// before it is returned.
    pub fn bound(&self, rec: &mut ProbeRecord) {
        provider_bounds::bound_record(rec, &|t| self.redact(t));
    }
}

/// `text` with every byte range covered by a run of at least [`KEY_FRAGMENT_BYTES`] bytes of
/// `key` (or the whole key, when shorter) replaced by `with`. Ranges are widened to character
/// boundaries.
pub(crate) fn redact_fragments(text: &str, key: &[u8], with: &str) -> String {
    let window = KEY_FRAGMENT_BYTES.min(key.len());
    let hay = text.as_bytes();
    let mut covered = vec![false; hay.len()];
    let mut any = false;
    for w in key.windows(window) {
        for (at, _) in hay.windows(window).enumerate().filter(|(_, h)| *h == w) {
            covered[at..at + window].iter_mut().for_each(|c| *c = true);
            any = true;
        }
    }
    if !any {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < hay.len() {
        if covered[i] {
            let mut j = i;
            while j < hay.len() && (covered[j] || !text.is_char_boundary(j)) {
                j += 1;
            }
            out.push_str(with);
            i = j;
        } else {
            let start = i;
            while i < hay.len() && !covered[i] {
                i += 1;
            }
            // A covered range starting inside a character took the whole character.
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            if i == start {
                i += 1;
                while i < hay.len() && !text.is_char_boundary(i) {
                    i += 1;
                }
                out.push_str(with);
                continue;
            }
            out.push_str(&text[start..i]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_redacted_whole_and_in_fragments() {
        let scrub = Scrubber {
            api_key: Some("sk-CANARY-7f3e9d2a1b"),
            prompt: &[],
            secrets: &[],
        };
        for (text, want) in [
            ("bad key sk-CANARY-7f3e9d2a1b.", "bad key [redacted]."),
            // Echoed without its prefix, or cut.
            ("key=CANARY-7f3e9d2a1b", "key=[redacted]"),
            ("starts sk-CANARY-7f and", "starts [redacted] and"),
            // A masked key with 4 characters shown stays readable.
            ("sk-CAN****2a1b", "sk-CAN****2a1b"),
            ("no key here", "no key here"),
            ("ünï CANARY-7f3e9 ✓", "ünï [redacted] ✓"),
        ] {
            assert_eq!(scrub.clean(text), want, "{text}");
            assert!(!scrub.clean(text).contains("CANARY-7f"), "{text}");
        }
        assert_eq!(scrub.clean("sk-CANARY-7f3e9d2a1b"), "[redacted]");
        // A short key is redacted whole only.
        let short = Scrubber {
            api_key: Some("abc"),
            prompt: &[],
            secrets: &[],
        };
        assert_eq!(short.clean("x abc y ab"), "x [redacted] y ab");
    }

    #[test]
    fn secret_header_values_are_redacted_like_the_key() {
        let secrets =
            [crate::probe::request::SecretHeader::new("x-secret", "hdr-CANARY-55aa77").unwrap()];
        let scrub = Scrubber {
            api_key: Some("sk-other-key-000"),
            prompt: &[],
            secrets: &secrets,
        };
        assert_eq!(
            scrub.clean("bad header hdr-CANARY-55aa77 and CANARY-55a"),
            "bad header [redacted] and [redacted]"
        );
    }

    use latmesh_core::prompts::Message;

    fn facts(saw_done: bool, finish: Option<&str>, payloads: u32, end: BodyEnd) -> StreamFacts<'_> {
        StreamFacts {
            saw_done,
            finish_reason: finish,
            payloads,
            body_bytes: 100,
            end,
        }
    }

    #[test]
    fn stream_rules() {
        assert_eq!(
            classify_stream(&facts(true, None, 3, BodyEnd::Stopped)),
            Ok(())
        );
        assert_eq!(
            classify_stream(&facts(false, Some("stop"), 3, BodyEnd::Eof)),
            Ok(())
        );
        assert_eq!(
            classify_stream(&facts(false, Some("stop"), 3, BodyEnd::Broken)),
            Ok(())
        );
        let o = |f: StreamFacts<'_>| classify_stream(&f).unwrap_err().outcome;
        assert_eq!(o(facts(false, None, 3, BodyEnd::Eof)), Outcome::Truncated);
        assert_eq!(
            o(facts(false, None, 3, BodyEnd::Broken)),
            Outcome::Truncated
        );
        assert_eq!(
            o(facts(false, None, 0, BodyEnd::Eof)),
            Outcome::ProtocolError
        );
        assert_eq!(
            o(facts(true, None, 0, BodyEnd::Eof)),
            Outcome::ProtocolError
        );
        assert_eq!(
            o(facts(false, None, 0, BodyEnd::Broken)),
            Outcome::ConnectionError
        );
        assert_eq!(
            o(facts(
                false,
                Some("stop"),
                3,
                BodyEnd::TimedOut(Outcome::TimeoutIdle)
            )),
            Outcome::TimeoutIdle
        );
        assert_eq!(
            o(facts(
                false,
                None,
                0,
                BodyEnd::TimedOut(Outcome::TimeoutTtft)
            )),
            Outcome::TimeoutTtft
        );
        let empty = StreamFacts {
            body_bytes: 0,
            ..facts(false, None, 0, BodyEnd::Eof)
        };
        assert_eq!(
            classify_stream(&empty).unwrap_err().message,
            "empty 200 body"
        );
    }

    #[test]
    fn abort_finish_reasons() {
        assert!(is_abort_finish("insufficient_system_resource"));
        assert!(is_abort_finish("abort"));
        assert!(is_abort_finish("internal_error"));
        for ok in [
            "stop",
            "length",
            "tool_calls",
            "content_filter",
            "eos",
            "end_turn",
        ] {
            assert!(!is_abort_finish(ok), "{ok}");
        }
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after(Some("7"), None, now), Some(7.0));
        assert_eq!(parse_retry_after(Some(" 6.5 "), None, now), Some(6.5));
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:28:30 GMT"), None, now),
            Some(30.0)
        );
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:27:00 GMT"), None, now),
            Some(0.0)
        );
        assert_eq!(parse_retry_after(Some("soon"), None, now), None);
        assert_eq!(parse_retry_after(Some("-1"), None, now), None);
        assert_eq!(parse_retry_after(Some("7"), Some("1500"), now), Some(1.5));
        assert_eq!(parse_retry_after(None, None, now), None);
    }

    #[test]
    fn scrubbing_removes_key_and_prompt_and_truncates() {
        let prompt = vec![Message::new(
            "user",
            "What is the secret plan for tomorrow?",
        )];
        let s = Scrubber {
            api_key: Some("sk-live-123"),
            prompt: &prompt,
            secrets: &[],
        };
        let m = s.clean("bad key sk-live-123 for 'What is the secret plan for tomorrow?'");
        assert_eq!(m, "bad key [redacted] for '[redacted]'");
        let long = "x".repeat(1000);
        assert!(s.clean(&long).len() <= MAX_ERROR_MESSAGE);
        let long_prompt = vec![Message::new("user", "é".repeat(100))];
        let s = Scrubber {
            api_key: None,
            prompt: &long_prompt,
            secrets: &[],
        };
        let echoed = format!("context too long: {}", &long_prompt[0].content[..64]);
        assert_eq!(s.clean(&echoed), "context too long: [redacted]");
    }
}
