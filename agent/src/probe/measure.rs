//! The measurement state machine: consumes the body of a 2xx response, read by read, each
//! read with its arrival instant, and produces the [`ProbeResult`].
//!
//! It knows nothing about HTTP I/O (the client feeds it), so unit tests drive it with bytes
//! and synthetic instants.

use std::time::Instant;

use latmesh_core::metrics;
use latmesh_core::record::{Outcome, ProbeRecord, Usage};

use super::chunk::{self, ChunkWire, DeltaWire, ProviderError, ToolCallWire};
use super::outcome::{BodyEnd, Failure, Scrubber, StreamFacts, classify_stream, is_abort_finish};
use super::sse::{SseEvent, SseParser};
use super::{ProbeResult, ToolCall};

/// Bytes of a non-SSE body kept to be read as JSON (a whole completion, or a JSON body sent
/// to a streaming request).
pub const MAX_WHOLE_BODY: usize = 32 << 20;

/// What is known about the attempt before its body: the request and the response head.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    /// The request asked for a stream.
    pub stream: bool,
    /// `t_send`.
    pub t_send: Instant,
    /// Wall clock at `t_send`, UTC µs.
    pub send_unix_us: i64,
    /// Response status, when headers arrived.
    pub http_status: Option<u16>,
    /// When the headers arrived.
    pub ttfb_at: Option<Instant>,
    /// Retry-After, seconds.
    pub retry_after_s: Option<f64>,
}

impl Head {
    fn us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.t_send).as_micros()).unwrap_or(u64::MAX)
    }

    /// A record with the head's fields set and `failure` as its outcome.
    pub fn record(&self, failure: &Failure, scrub: &Scrubber<'_>) -> ProbeRecord {
        ProbeRecord {
            stream: self.stream,
            send_agent_unix_us: self.send_unix_us,
            outcome: Some(failure.outcome),
            http_status: self.http_status,
            ttfb_us: self.ttfb_at.map(|t| self.us(t)),
            retry_after_s: self.retry_after_s,
            error_type: failure.error_type.clone(),
            error_message: Some(scrub.clean(&failure.message)),
            ..ProbeRecord::default()
        }
    }

    /// The result of an attempt that ended without a readable 2xx body.
    pub fn failed(
        &self,
        failure: Failure,
        scrub: &Scrubber<'_>,
        body_bytes: u64,
        end_at: Option<Instant>,
    ) -> ProbeResult {
        let mut record = self.record(&failure, scrub);
        record.response_bytes = body_bytes;
        record.e2e_us = end_at.map(|t| self.us(t));
        ProbeResult {
            record,
            error_code: failure.error_code,
            ..ProbeResult::default()
        }
    }
}

/// Whether more reads are worth making.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Continue,
    /// The event stream cannot be followed any more (a failure is recorded).
    Stop,
}

/// Everything measured so far (the parser lives beside it so events can borrow the parser
/// while this is updated).
#[derive(Debug, Default)]
struct State {
    keep_text: bool,
    first_token: Option<(Instant, u32)>,
    first_content: Option<(Instant, u32)>,
    last_token_at: Option<Instant>,
    done_at: Option<Instant>,
    itl_gaps_us: Vec<u64>,
    payloads: u32,
    token_payloads: u32,
    content_chunks: u32,
    reasoning_chunks: u32,
    tool_call_chunks: u32,
    content_text: String,
    reasoning_text: String,
    tool_calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    failure: Option<Failure>,
    /// The body was read as one JSON document (no token timing).
    whole_body: bool,
}

/// The state machine. See the module documentation.
#[derive(Debug)]
pub struct Measurement {
    t_send: Instant,
    parser: SseParser,
    st: State,
    response_bytes: u64,
    /// Start of the body, kept while no event has been seen, in case it is JSON rather than
    /// an event stream.
    sniff: Vec<u8>,
    sniffing: bool,
    /// Transport error that broke the body, for the message.
    broken: Option<String>,
    /// Body of a response read as one JSON document.
    whole: Option<Vec<u8>>,
    /// The request asked for a stream.
    stream_requested: bool,
}

const SNIFF_BYTES: usize = 64 * 1024;

impl Measurement {
    /// A measurement of an event stream (`whole = false`) or of a JSON body read whole, for
    /// a request that asked for a stream (`stream_requested`) or not. `max_tokens` sizes the
    /// ITL buffer.
    pub fn new(
        t_send: Instant,
        keep_text: bool,
        whole: bool,
        stream_requested: bool,
        max_tokens: u32,
    ) -> Self {
        Measurement {
            t_send,
            parser: SseParser::default(),
            st: State {
                keep_text,
                itl_gaps_us: Vec::with_capacity(if whole {
                    0
                } else {
                    max_tokens.min(8192) as usize
                }),
                ..State::default()
            },
            response_bytes: 0,
            sniff: Vec::new(),
            sniffing: !whole,
            broken: None,
            whole: whole.then(Vec::new),
            stream_requested,
        }
    }

    /// One body read that arrived at `at`.
    pub fn on_bytes(&mut self, at: Instant, bytes: &[u8]) -> Flow {
        self.response_bytes += bytes.len() as u64;
        if let Some(w) = &mut self.whole {
            if w.len() + bytes.len() > MAX_WHOLE_BODY {
                self.st.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!("body larger than {MAX_WHOLE_BODY} bytes"),
                ));
                return Flow::Stop;
            }
            w.extend_from_slice(bytes);
            return Flow::Continue;
        }
        if self.sniffing {
            if self.sniff.len() + bytes.len() <= SNIFF_BYTES {
                self.sniff.extend_from_slice(bytes);
            } else {
                self.sniffing = false;
                self.sniff = Vec::new();
            }
        }
        self.parser.feed(bytes);
        self.drain(at)
    }

    /// The body ended (normally or not) at `at`.
    pub fn on_end(&mut self, at: Instant, end: BodyEnd) {
        if let Some(w) = self.whole.take() {
            if end == BodyEnd::Eof && self.st.failure.is_none() {
                self.st.on_json_body(at, &w, self.stream_requested);
            }
            return;
        }
        if end == BodyEnd::Eof || end == BodyEnd::Broken {
            self.parser.finish();
            self.drain(at);
        }
        // A JSON document sent where an event stream was asked for.
        if end == BodyEnd::Eof
            && self.sniffing
            && self.st.payloads == 0
            && self.st.failure.is_none()
            && !self.st.saw_done()
            && self.sniff.trim_ascii_start().first() == Some(&b'{')
        {
            let body = std::mem::take(&mut self.sniff);
            self.st.on_json_body(at, &body, true);
        }
    }

    /// The body was broken by a transport error.
    pub fn note_broken(&mut self, message: String) {
        self.broken = Some(message);
    }

    /// `[DONE]` arrived.
    pub fn saw_done(&self) -> bool {
        self.st.saw_done()
    }

    /// When `[DONE]` arrived.
    pub fn done_at(&self) -> Option<Instant> {
        self.st.done_at
    }

    /// Whether the TTFT deadline still applies: no token, no end and no failure yet.
    pub fn waiting_for_first_token(&self) -> bool {
        self.whole.is_none()
            && self.st.first_token.is_none()
            && self.st.failure.is_none()
            && self.st.finish_reason.is_none()
            && !self.st.saw_done()
    }

    fn drain(&mut self, at: Instant) -> Flow {
        let Measurement {
            parser,
            st,
            sniffing,
            ..
        } = self;
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => {
                    *sniffing = false;
                    st.on_event(at, ev);
                }
                Ok(None) => return Flow::Continue,
                Err(e) => {
                    st.fail(Failure::new(Outcome::ProtocolError, e.to_string()));
                    return Flow::Stop;
                }
            }
        }
    }

    /// The result, given how reading stopped and when (`end_at`: the instant of the end of
    /// the body, for `e2e` after a finish_reason or of a whole body).
    pub fn finish(
        self,
        head: &Head,
        end: BodyEnd,
        end_at: Option<Instant>,
        scrub: &Scrubber<'_>,
    ) -> ProbeResult {
        debug_assert_eq!(head.t_send, self.t_send);
        let st = self.st;
        let failure = st.failure.clone().or_else(|| {
            if st.whole_body {
                return match end {
                    BodyEnd::Eof => None,
                    BodyEnd::TimedOut(o) => {
                        Some(Failure::new(o, super::outcome::timeout_message(o)))
                    }
                    _ => Some(Failure::new(Outcome::Truncated, "body ended early")),
                };
            }
            let facts = StreamFacts {
                saw_done: st.saw_done(),
                finish_reason: st.finish_reason.as_deref(),
                payloads: st.payloads,
                body_bytes: self.response_bytes,
                end,
            };
            classify_stream(&facts).err()
        });
        let failure = failure.map(|mut f| {
            let cause = self
                .broken
                .as_ref()
                .filter(|_| matches!(f.outcome, Outcome::Truncated | Outcome::ConnectionError));
            if let Some(b) = cause {
                f.message = format!("{}: {b}", f.message);
            }
            f
        });
        let mut record = match &failure {
            Some(f) => head.record(f, scrub),
            None => ProbeRecord {
                stream: head.stream,
                send_agent_unix_us: head.send_unix_us,
                outcome: Some(Outcome::Ok),
                http_status: head.http_status,
                ttfb_us: head.ttfb_at.map(|t| head.us(t)),
                retry_after_s: head.retry_after_s,
                ..ProbeRecord::default()
            },
        };
        let e2e_at = if st.whole_body {
            end_at.filter(|_| end == BodyEnd::Eof)
        } else if let Some(d) = st.done_at {
            Some(d)
        } else if st.finish_reason.is_some() && matches!(end, BodyEnd::Eof | BodyEnd::Broken) {
            end_at
        } else {
            None
        };
        record.e2e_us = e2e_at.map(|t| head.us(t));
        if !st.whole_body {
            record.ttft_us = st.first_token.map(|(t, _)| head.us(t));
            record.ttfc_us = st.first_content.map(|(t, _)| head.us(t));
        }
        let usage = st.usage.clone().unwrap_or_default();
        match usage.completion_tokens {
            Some(n) => {
                record.output_tokens = n;
                record.tokens_from_usage = true;
            }
            None => record.output_tokens = st.token_payloads,
        }
        if let (Some(ttft), Some(e2e)) = (record.ttft_us, record.e2e_us) {
            record.tpot_us = metrics::tpot_us(ttft, e2e, record.output_tokens);
            record.decode_tps = metrics::decode_tps(ttft, e2e, record.output_tokens);
        }
        record.content_chunks = st.content_chunks;
        record.reasoning_chunks = st.reasoning_chunks;
        record.tool_call_chunks = st.tool_call_chunks;
        record.usage = usage;
        record.finish_reason = st.finish_reason.clone();
        record.saw_done = st.saw_done();
        record.itl_max_us = st.itl_gaps_us.iter().copied().max();
        record.comment_lines = self.parser.comment_lines();
        record.response_bytes = self.response_bytes;
        ProbeResult {
            record,
            first_output_payload_index: st.first_token.map(|(_, i)| i),
            first_content_payload_index: st.first_content.map(|(_, i)| i),
            itl_gaps_us: st.itl_gaps_us,
            content_text: st.content_text,
            reasoning_text: st.reasoning_text,
            tool_calls: st.tool_calls,
            error_code: failure.and_then(|f| f.error_code),
        }
    }
}

impl State {
    fn saw_done(&self) -> bool {
        self.done_at.is_some()
    }

    /// Records `f` unless an earlier failure is recorded.
    fn fail(&mut self, f: Failure) {
        if self.failure.is_none() {
            self.failure = Some(f);
        }
    }

    fn provider_failure(&mut self, e: ProviderError, what: &str) {
        let message = e.message.clone().unwrap_or_else(|| what.to_string());
        self.fail(Failure {
            outcome: Outcome::StreamError,
            error_type: e.kind.or(e.code.clone()),
            error_code: e.code,
            message,
        });
    }

    fn on_event(&mut self, at: Instant, ev: SseEvent<'_>) {
        match ev {
            SseEvent::Data { data, complete } => self.on_data(at, data.trim_ascii(), complete),
            SseEvent::Named { event, data } => {
                if event == b"error" {
                    self.provider_failure(ProviderError::from_payload(data), "event: error");
                }
            }
            SseEvent::ErrorField(v) => {
                self.provider_failure(ProviderError::from_payload(v), "error: field")
            }
        }
    }

    fn on_data(&mut self, at: Instant, data: &[u8], complete: bool) {
        if data.is_empty() {
            return;
        }
        if data == b"[DONE]" {
            self.done_at.get_or_insert(at);
            return;
        }
        let index = self.payloads;
        match chunk::decode(data) {
            Ok(c) => {
                self.payloads += 1;
                self.on_chunk(at, index, &c, true);
            }
            // Half a payload at the end of the body is a truncation, judged by what came before.
            Err(_) if !complete => {}
            Err(e) => {
                self.payloads += 1;
                self.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!("payload {index} is not a JSON object: {e}"),
                ));
            }
        }
    }

    /// Accounts one decoded payload: a streamed chunk (`streamed`) or a whole completion.
    fn on_chunk(&mut self, at: Instant, index: u32, c: &ChunkWire<'_>, streamed: bool) {
        let delta = if streamed { c.delta() } else { c.message() };
        if let Some(d) = delta {
            self.on_delta(at, index, d);
        }
        if let Some(fr) = c.finish_reason() {
            if self.finish_reason.as_deref() != Some(fr) {
                self.finish_reason = Some(fr.to_string());
            }
            if is_abort_finish(fr) {
                self.fail(Failure::new(
                    Outcome::StreamError,
                    format!("generation aborted: finish_reason {fr}"),
                ));
            }
        }
        if let Some(u) = c.usage() {
            chunk::merge_usage(&mut self.usage, u);
        }
        if let Some(e) = c.error() {
            self.provider_failure(e, "error object in the response");
        }
    }

    fn on_delta(&mut self, at: Instant, index: u32, d: &DeltaWire<'_>) {
        let content = d.content();
        let reasoning = d.reasoning();
        let tool = d.has_tool_fragment();
        if !content.is_empty() {
            self.content_chunks += 1;
            self.first_content.get_or_insert((at, index));
            if self.keep_text {
                self.content_text.push_str(content);
            }
        }
        if !reasoning.is_empty() {
            self.reasoning_chunks += 1;
            if self.keep_text {
                self.reasoning_text.push_str(&reasoning);
            }
        }
        if tool {
            self.tool_call_chunks += 1;
        }
        for t in &d.tool_calls.0 {
            self.add_tool_fragment(t);
        }
        if let Some(f) = &d.function_call.0 {
            let t = ToolCallWire {
                function: chunk::Obj(Some(f.clone())),
                ..ToolCallWire::default()
            };
            self.add_tool_fragment(&t);
        }
        if !content.is_empty() || !reasoning.is_empty() || tool {
            self.token_payloads += 1;
            if let Some(last) = self.last_token_at {
                let gap = at.saturating_duration_since(last).as_micros();
                self.itl_gaps_us
                    .push(u64::try_from(gap).unwrap_or(u64::MAX));
            }
            self.last_token_at = Some(at);
            self.first_token.get_or_insert((at, index));
        }
    }

    fn add_tool_fragment(&mut self, t: &ToolCallWire<'_>) {
        let id = t.id.0.as_deref().filter(|s| !s.is_empty());
        let f = t.function.0.as_ref();
        let name = f.map(|f| f.name.as_str()).unwrap_or("");
        let args = f.and_then(|f| f.arguments.0.as_deref()).unwrap_or("");
        if id.is_none() && name.is_empty() && args.is_empty() && t.index.0.is_none() {
            return;
        }
        let slot = match t.index.0 {
            Some(i) => {
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                self.tool_calls
                    .iter()
                    .position(|c| c.index == i)
                    .unwrap_or_else(|| {
                        self.tool_calls.push(ToolCall {
                            index: i,
                            ..ToolCall::default()
                        });
                        self.tool_calls.len() - 1
                    })
            }
            // No index: a new id starts a new call; anything else continues the last one.
            None => match (self.tool_calls.last(), id) {
                (Some(last), Some(id)) if last.id.as_deref().is_some_and(|l| l != id) => {
                    self.push_call()
                }
                (Some(_), _) => self.tool_calls.len() - 1,
                (None, _) => self.push_call(),
            },
        };
        let call = &mut self.tool_calls[slot];
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        if !name.is_empty() {
            if call.name.is_empty() {
                call.name = name.to_string();
            } else if call.name != name {
                call.name.push_str(name);
            }
        }
        call.arguments.push_str(args);
    }

    fn push_call(&mut self) -> usize {
        let index = self
            .tool_calls
            .iter()
            .map(|c| c.index + 1)
            .max()
            .unwrap_or(0);
        self.tool_calls.push(ToolCall {
            index,
            ..ToolCall::default()
        });
        self.tool_calls.len() - 1
    }

    /// A body read as one JSON document: a whole completion (`streamed_request = false`), or
    /// a JSON body answered to a streaming request (a protocol error whose fields are still
    /// read). The document is payload 0, stamped at the end of the body.
    fn on_json_body(&mut self, at: Instant, body: &[u8], streamed_request: bool) {
        self.whole_body = true;
        let body = body
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(body)
            .trim_ascii();
        if body.is_empty() {
            self.fail(Failure::new(Outcome::ProtocolError, "empty 200 body"));
            return;
        }
        let c = match chunk::decode(body) {
            Ok(c) => c,
            Err(e) => {
                self.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!("body is not a JSON object: {e}"),
                ));
                return;
            }
        };
        if let Some(e) = c.error() {
            self.provider_failure(e, "error object in the response");
            return;
        }
        if c.primary().is_none() {
            self.fail(Failure::new(
                Outcome::ProtocolError,
                "completion without choices",
            ));
            return;
        }
        self.payloads = 1;
        self.on_chunk(at, 0, &c, false);
        if streamed_request {
            self.fail(Failure::new(
                Outcome::ProtocolError,
                "streaming request answered with a whole JSON completion (not an event stream)",
            ));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::probe::sse::tests::{corpus, corpus_dir};

    pub(crate) const NO_SCRUB: Scrubber<'static> = Scrubber {
        api_key: None,
        prompt: &[],
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
        let t0 = Instant::now();
        let mut m = Measurement::new(t0, true, whole, !whole, 64);
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

    const C0: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
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
        let vllm = r#"{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}"#;
        let r = measure(&[&sse(&[vllm])], false);
        assert_eq!(
            (r.record.outcome, r.error_code.as_deref()),
            (Some(Outcome::StreamError), Some("400"))
        );
    }

    #[test]
    fn tool_calls_accumulate_per_index() {
        let f =
            |s: &str| format!(r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{s}]}}}}]}}"#);
        let body = sse(&[
            &f(
                r#"{"index":0,"id":"call_a","type":"function","function":{"name":"a","arguments":""}}"#,
            ),
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

    /// Feeds every corpus stream split at every offset: the measurement is the same.
    #[test]
    fn corpus_measurements_do_not_depend_on_read_boundaries() {
        for (name, body) in corpus() {
            if name.starts_with("02-") || name.starts_with("20-") || name.starts_with("21-") {
                continue;
            }
            let summary = |r: ProbeResult| {
                let rec = r.record;
                (
                    rec.outcome,
                    rec.content_chunks,
                    rec.reasoning_chunks,
                    rec.tool_call_chunks,
                    rec.usage,
                    rec.finish_reason,
                    rec.saw_done,
                    rec.comment_lines,
                    (r.content_text, r.reasoning_text, r.tool_calls),
                    (r.first_output_payload_index, r.first_content_payload_index),
                )
            };
            let t0 = Instant::now();
            let run = |pieces: &[&[u8]]| {
                let mut m = Measurement::new(t0, true, false, true, 8);
                for p in pieces {
                    m.on_bytes(t0, p);
                }
                m.on_end(t0, BodyEnd::Eof);
                summary(m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB))
            };
            let whole = run(&[&body]);
            for i in 0..=body.len() {
                assert_eq!(run(&[&body[..i], &body[i..]]), whole, "{name} split at {i}");
            }
        }
        assert!(corpus_dir().exists());
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
        // Warm up: the parser buffer and the sniff buffer reach their steady state.
        for _ in 0..10 {
            m.on_bytes(t0, chunk.as_bytes());
        }
        let before = ALLOCS.with(|c| c.get());
        for i in 0..1000u64 {
            m.on_bytes(t0 + Duration::from_micros(i), chunk.as_bytes());
        }
        let allocs = ALLOCS.with(|c| c.get()) - before;
        assert_eq!(allocs, 0, "allocations for 1000 chunks");
        m.on_end(t0, BodyEnd::Eof);
        let r = m.finish(&head(t0, true), BodyEnd::Eof, Some(t0), &NO_SCRUB);
        assert_eq!(r.record.content_chunks, 1010);
        assert_eq!(r.record.comment_lines, 1010);
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
}
