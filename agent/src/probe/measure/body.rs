//! [`Measurement`], the byte-driven shell of the measurement: each body read with its
//! arrival instant, decoded when compressed, capped in size, fed to the event parser whose
//! events go to the measured state (or kept whole when the body is one JSON document).
//! It knows nothing about HTTP I/O (the client feeds it), so unit tests drive it with bytes
//! and synthetic instants.

use std::time::Instant;

use latmesh_core::api::{Api, ReasoningTags};
use latmesh_core::record::Outcome;

use crate::probe::content_encoding::BodyDecoder;
use crate::probe::outcome::{BodyEnd, Failure};
use crate::probe::sse::SseParser;
use crate::probe::think_tags::ThinkTags;

use super::flow::Flow;
use super::head::BodyStamps;
use super::state::State;

/// Bytes of a non-SSE body kept to be read as JSON (a whole completion, or a JSON body sent
/// to a streaming request): past them the attempt is a `protocol_error`, whatever
/// `max_response_bytes` allows (docs/metrics.md, "Provider input bounds").
pub const MAX_WHOLE_BODY: usize = 32 << 20;

/// The state machine. See the module documentation.
#[derive(Debug)]
pub struct Measurement {
    pub(super) t_send: Instant,
    pub(super) parser: SseParser,
    pub(super) st: State,
    pub(super) body: BodyStamps,
    /// Start of the body, kept while no event has been seen, in case it is JSON rather than
    /// an event stream.
    pub(super) sniff: Vec<u8>,
    pub(super) sniffing: bool,
    /// Transport error that broke the body, for the message.
    pub(super) broken: Option<String>,
    /// Body of a response read as one JSON document.
    pub(super) whole: Option<Vec<u8>>,
    /// The request asked for a stream.
    pub(super) stream_requested: bool,
    /// Largest body accepted ([`Measurement::with_max_body_bytes`]), on the wire and
    /// decoded.
    pub(super) max_body_bytes: u64,
    /// The decoder of a compressed body ([`Measurement::with_content_encoding`]).
    /// (Boxed: taken out and put back for every read.)
    pub(super) decoder: Option<Box<BodyDecoder>>,
    /// Decoded bytes so far (the wire's when the body is not compressed).
    pub(super) decoded_bytes: u64,
    /// The body's content coding (`identity`, `gzip`, `deflate`), for messages.
    pub(super) encoding: &'static str,
    /// The body is in a content coding latmesh does not decode.
    pub(super) unreadable: bool,
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
            body: BodyStamps::default(),
            sniff: Vec::new(),
            sniffing: !whole,
            broken: None,
            whole: whole.then(Vec::new),
            stream_requested,
            max_body_bytes: u64::MAX,
            decoder: None,
            decoded_bytes: 0,
            encoding: "identity",
            unreadable: false,
        }
    }

    /// Ends the attempt as `protocol_error` ("response larger than N bytes") once the body
    /// passes `n` bytes: a provider that ignores `max_tokens` and streams gigabytes is cut off.
    pub fn with_max_body_bytes(mut self, n: u64) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// Reads the body as `api`'s events and documents (default: Chat Completions).
    pub fn with_api(mut self, api: Api) -> Self {
        self.st.api = api;
        self
    }

    /// Reads the text between `tags` in every payload's content as reasoning (`None`, or an
    /// empty closing tag: content is all answer); see [`ThinkTags`].
    pub fn with_reasoning_tags(mut self, tags: Option<&ReasoningTags>) -> Self {
        self.st.think = tags.and_then(ThinkTags::new).map(Box::new);
        self
    }

    /// Decodes the body as its `content-encoding` header says (`None`: absent). An encoding
    /// latmesh does not decode makes the attempt a `protocol_error` naming it, at the first
    /// body read ([`BodyDecoder::for_header`]).
    pub fn with_content_encoding(mut self, header: Option<&[u8]>) -> Self {
        match BodyDecoder::for_header(header) {
            Ok(d) => {
                self.encoding = d.as_ref().map_or("identity", BodyDecoder::name);
                self.decoder = d.map(Box::new);
            }
            Err(message) => {
                self.unreadable = true;
                self.st.fail(Failure::new(Outcome::ProtocolError, message));
            }
        }
        self
    }

    /// Also keeps the read instant of every token-bearing payload
    /// ([`ProbeResult::token_read_at`]); sized for `max_tokens` payloads.
    pub fn with_timestamps(mut self, max_tokens: u32) -> Self {
        self.st.keep_timestamps = true;
        if self.whole.is_none() {
            self.st.token_read_at = Vec::with_capacity(max_tokens.min(8192) as usize);
        }
        self
    }

    /// One body read that arrived at `at`, as it came over the wire (compressed when the
    /// body is): decoded at once, every decoded byte measured with the read's instant.
    pub fn on_bytes(&mut self, at: Instant, bytes: &[u8]) -> Flow {
        self.body.on_wire(at, bytes);
        if self.body.bytes > self.max_body_bytes {
            self.st.fail(Failure::new(
                Outcome::ProtocolError,
                format!(
                    "response larger than {} bytes (max_response_bytes)",
                    self.max_body_bytes
                ),
            ));
            return Flow::Stop;
        }
        // An encoding that cannot be read: nothing to measure (the failure is recorded).
        if self.unreadable {
            return Flow::Stop;
        }
        let Some(mut decoder) = self.decoder.take() else {
            return self.on_decoded(at, bytes);
        };
        let fed = decoder.feed(bytes, |piece| self.on_decoded(at, piece));
        self.decoder = Some(decoder);
        match fed {
            Ok(flow) => flow,
            Err(message) => {
                self.st.fail(Failure::new(Outcome::ProtocolError, message));
                Flow::Stop
            }
        }
    }

    /// Decoded body bytes of the read that arrived at `at`.
    fn on_decoded(&mut self, at: Instant, bytes: &[u8]) -> Flow {
        self.body.on_decoded(at, bytes);
        self.decoded_bytes = self.decoded_bytes.saturating_add(bytes.len() as u64);
        if self.decoded_bytes > self.max_body_bytes {
            let encoding = self.encoding;
            self.st.fail(Failure::new(
                Outcome::ProtocolError,
                format!(
                    "response larger than {} bytes once decoded from {encoding} \
                     (max_response_bytes)",
                    self.max_body_bytes
                ),
            ));
            return Flow::Stop;
        }
        if let Some(w) = &mut self.whole {
            if w.len() + bytes.len() > MAX_WHOLE_BODY {
                self.st.fail(Failure::new(
                    Outcome::ProtocolError,
                    format!(
                        "JSON body larger than {MAX_WHOLE_BODY} bytes (the cap of a body read whole)"
                    ),
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
        // A compressed body that ended cleanly: its stream must end as it says.
        if end == BodyEnd::Eof
            && self.st.failure.is_none()
            && self.body.bytes > 0
            && let Some(Err(message)) = self.decoder.as_mut().map(|d| d.finish())
        {
            self.st.fail(Failure::new(Outcome::ProtocolError, message));
        }
        if let Some(w) = self.whole.take() {
            if end == BodyEnd::Eof && self.st.failure.is_none() {
                self.st.on_json_body(at, &w, self.stream_requested);
            }
            return;
        }
        if end == BodyEnd::Eof || end == BodyEnd::Broken {
            self.parser.finish();
            self.st.body_ending = true;
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

    pub(super) fn drain(&mut self, at: Instant) -> Flow {
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
}
