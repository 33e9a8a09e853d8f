//! An incremental Server-Sent Events parser for the hot path of a streamed answer.
//!
//! [`SseParser`] keeps one reused [`BytesMut`] buffer. [`SseParser::feed`] appends the bytes of
//! one body read; [`SseParser::next_event`] then yields every event those bytes complete, as
//! slices borrowed from the buffer (no allocation per line or per event: a multi-line `data`
//! is joined into a reused scratch buffer). Scanning resumes where it stopped, so a line cut
//! across reads is scanned once.
//!
//! Following the WHATWG event-stream rules, with the quirks real providers send:
//!
//! * lines end with LF, CR or CRLF (a CRLF cut between two reads is still one line end);
//! * `data:` with or without the space after the colon; several `data` lines are joined
//!   with `\n`; a leading UTF-8 BOM is ignored;
//! * comment lines (`: OPENROUTER PROCESSING`, `: keep-alive`) are counted, never dispatched;
//! * `event:` names the event: only unnamed events and events named `message` are chat
//!   payloads ([`SseEvent::Data`]); others come out as [`SseEvent::Named`] so the caller can
//!   skip them (or read `event: error`);
//! * `id:` and `retry:` are remembered ([`SseParser::last_event_id`], [`SseParser::retry_ms`]);
//! * the non-standard `error:` field (llama.cpp) comes out at once as [`SseEvent::ErrorField`];
//! * memory is bounded: a line longer than the line cap (default [`DEFAULT_MAX_LINE_BYTES`],
//!   any line: data, comment, unknown field, or an unterminated one) or a pending event longer
//!   than the event cap (default [`DEFAULT_MAX_EVENT_BYTES`]; its lines, comments included) is
//!   a protocol error ([`SseError::LineTooLong`], [`SseError::TooLong`]), detected as soon as
//!   the bytes fed pass the cap, without waiting for the line end; after it the parser yields
//!   only that error and drops whatever is fed. The buffer never holds more than the cap plus
//!   one read;
//! * at end of body ([`SseParser::finish`]), an unterminated last line is still parsed and a
//!   pending event without its closing blank line is still dispatched, marked
//!   `complete: false` (the caller decides whether a half payload means truncation).

use bytes::{Buf, BytesMut};

/// Default cap on one pending event (its lines, comments included), bytes.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 4 << 20;

/// Default cap on one line (without its line end), bytes. One `data:` line may carry a whole
/// answer (servers that do not really stream), so it is as large as the event cap; what it
/// adds is a bound on lines outside any event (comments, unknown fields) and its own message.
pub const DEFAULT_MAX_LINE_BYTES: usize = DEFAULT_MAX_EVENT_BYTES;

/// One dispatched item, borrowed from the parser until the next call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SseEvent<'a> {
    /// An unnamed (or `event: message`) event: its data, lines joined with `\n`.
    Data {
        /// The data, without the trailing line end.
        data: &'a [u8],
        /// `false` when the body ended before the event's closing blank line (or in the middle
        /// of its last line).
        complete: bool,
    },
    /// An event with another `event:` name; not a chat payload.
    Named {
        /// The event name.
        event: &'a [u8],
        /// Its data.
        data: &'a [u8],
        /// `false` when the body ended before the event's closing blank line (as for
        /// [`SseEvent::Data`]).
        complete: bool,
    },
    /// A non-standard `error:` field line; its value.
    ErrorField(&'a [u8]),
}

/// A stream the parser cannot follow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A pending event exceeded the event cap.
    #[error("SSE event longer than {limit} bytes")]
    TooLong {
        /// The cap, bytes.
        limit: usize,
    },
    /// A line exceeded the line cap.
    #[error("SSE line longer than {limit} bytes")]
    LineTooLong {
        /// The cap, bytes.
        limit: usize,
    },
}

/// Where the pending event's data is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DataLoc {
    /// No `data` field yet.
    None,
    /// One `data` line: this range of `buf`.
    Buf(usize, usize),
    /// Several lines, joined in `scratch`.
    Scratch,
}

/// What a processed line produced (ranges into `buf`; turned into slices by `next_event`).
enum Ready {
    Data(DataLoc, bool),
    Named((usize, usize), DataLoc, bool),
    ErrorField(usize, usize),
}

/// The incremental parser. See the module documentation.
#[derive(Debug)]
pub struct SseParser {
    buf: BytesMut,
    /// Start of the next unparsed line.
    pos: usize,
    /// Where the scan for a line end resumes (`pos <= scan <= buf.len()`).
    scan: usize,
    /// The last line ended with CR: an LF right after it belongs to that line end.
    skip_lf: bool,
    /// Start of the first line of the pending event (kept in `buf` until dispatched).
    event_start: Option<usize>,
    data: DataLoc,
    scratch: Vec<u8>,
    /// The pending event's name, a range of `buf`.
    event_name: Option<(usize, usize)>,
    /// The previous call dispatched an event: clear the pending state first.
    reset_pending: bool,
    bom_checked: bool,
    eof: bool,
    eof_done: bool,
    failed: Option<SseError>,
    max_event: usize,
    max_line: usize,
    comment_lines: u32,
    unknown_lines: u32,
    retry_ms: Option<u64>,
    last_event_id: Vec<u8>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser whose pending events may not exceed `max_event_bytes` (nor its lines: the
    /// line cap is the same).
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser::with_caps(max_event_bytes, max_event_bytes)
    }

    /// A parser whose lines may not exceed `max_line_bytes` and whose pending events may not
    /// exceed `max_event_bytes` (both at least 1).
    pub fn with_caps(max_line_bytes: usize, max_event_bytes: usize) -> Self {
        SseParser {
            // Grows as needed: most SSE events are a few hundred bytes, and at 10,000 open
            // streams every KiB per stream is 10 MiB.
            buf: BytesMut::with_capacity(1024),
            pos: 0,
            scan: 0,
            skip_lf: false,
            event_start: None,
            data: DataLoc::None,
            scratch: Vec::new(),
            event_name: None,
            reset_pending: false,
            bom_checked: false,
            eof: false,
            eof_done: false,
            failed: None,
            max_event: max_event_bytes.max(1),
            max_line: max_line_bytes.max(1),
            comment_lines: 0,
            unknown_lines: 0,
            retry_ms: None,
            last_event_id: Vec::new(),
        }
    }

    /// Appends the bytes of one body read. Call [`SseParser::next_event`] until it returns
    /// `Ok(None)` before feeding more. After a cap was exceeded the bytes are dropped.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            self.buf.clear();
            self.pos = 0;
            self.scan = 0;
            return;
        }
        self.clear_dispatched();
        // Drop what no pending event refers to any more.
        let keep_from = self.event_start.unwrap_or(self.pos);
        if keep_from > 0 {
            self.buf.advance(keep_from);
            self.pos -= keep_from;
            self.scan -= keep_from;
            self.event_start = self.event_start.map(|s| s - keep_from);
            if let DataLoc::Buf(s, e) = self.data {
                self.data = DataLoc::Buf(s - keep_from, e - keep_from);
            }
            self.event_name = self.event_name.map(|(s, e)| (s - keep_from, e - keep_from));
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Marks the end of the body: the following [`SseParser::next_event`] calls also yield
    /// an unterminated last line and a pending event without its closing blank line.
    pub fn finish(&mut self) {
        self.eof = true;
    }

    /// The next complete event, `Ok(None)` when the fed bytes hold no more.
    ///
    /// # Errors
    /// [`SseError::LineTooLong`] or [`SseError::TooLong`] once a line or a pending event
    /// exceeds its cap; every later call returns the same error.
    pub fn next_event(&mut self) -> Result<Option<SseEvent<'_>>, SseError> {
        self.clear_dispatched();
        match self.advance()? {
            None => Ok(None),
            Some(ready) => {
                self.reset_pending = !matches!(ready, Ready::ErrorField(..));
                Ok(Some(match ready {
                    Ready::Data(loc, complete) => SseEvent::Data {
                        data: self.data_slice(loc),
                        complete,
                    },
                    Ready::Named((s, e), loc, complete) => SseEvent::Named {
                        event: &self.buf[s..e],
                        data: self.data_slice(loc),
                        complete,
                    },
                    Ready::ErrorField(s, e) => SseEvent::ErrorField(&self.buf[s..e]),
                }))
            }
        }
    }

    /// Comment lines seen so far.
    pub fn comment_lines(&self) -> u32 {
        self.comment_lines
    }

    /// Lines with an unknown field name seen so far (a body that is not an event stream
    /// shows up here).
    pub fn unknown_lines(&self) -> u32 {
        self.unknown_lines
    }

    /// The last valid `retry:` value, ms.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// The last `id:` value (empty when none).
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    fn data_slice(&self, loc: DataLoc) -> &[u8] {
        match loc {
            DataLoc::None => &[],
            DataLoc::Buf(s, e) => &self.buf[s..e],
            DataLoc::Scratch => &self.scratch,
        }
    }

    fn clear_dispatched(&mut self) {
        if self.reset_pending {
            self.reset_pending = false;
            self.clear_event();
        }
    }

    fn clear_event(&mut self) {
        self.event_start = None;
        self.data = DataLoc::None;
        self.scratch.clear();
        self.event_name = None;
    }

    /// Scans lines until one completes an item.
    fn advance(&mut self) -> Result<Option<Ready>, SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            if self.skip_lf && self.pos < self.buf.len() {
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                }
                self.skip_lf = false;
                self.scan = self.scan.max(self.pos);
            }
            if !self.bom_checked {
                let rest = &self.buf[self.pos..];
                const BOM: &[u8] = b"\xEF\xBB\xBF";
                let n = rest.len().min(3);
                if rest[..n] != BOM[..n] {
                    self.bom_checked = true;
                } else if n == 3 {
                    self.bom_checked = true;
                    self.pos += 3;
                    self.scan = self.scan.max(self.pos);
                } else if !self.eof {
                    return Ok(None);
                } else {
                    self.bom_checked = true;
                }
            }
            let found = memchr::memchr2(b'\n', b'\r', &self.buf[self.scan..]);
            let (line_start, line_end) = match found {
                Some(i) => {
                    let end = self.scan + i;
                    let start = self.pos;
                    self.check_caps(start, end)?;
                    self.skip_lf = self.buf[end] == b'\r';
                    self.pos = end + 1;
                    self.scan = self.pos;
                    (start, end)
                }
                None => {
                    self.scan = self.buf.len();
                    // The line so far.
                    self.check_caps(self.pos, self.buf.len())?;
                    if !self.eof {
                        return Ok(None);
                    }
                    if self.pos < self.buf.len() {
                        // The body ended inside this line: parse it as if it had ended.
                        let start = self.pos;
                        self.pos = self.buf.len();
                        (start, self.buf.len())
                    } else {
                        if self.eof_done {
                            return Ok(None);
                        }
                        self.eof_done = true;
                        return Ok(self.dispatch(false));
                    }
                }
            };
            if let Some(ready) = self.line(line_start, line_end)? {
                return Ok(Some(ready));
            }
        }
    }

    /// Checks the line `start..end` (possibly unfinished) and the pending event it belongs to
    /// against the caps. When both are over, the error names the cap the stream passed first
    /// (the line cap on a tie), so the error does not depend on where reads were cut.
    fn check_caps(&mut self, start: usize, end: usize) -> Result<(), SseError> {
        let event_start = self.event_start.unwrap_or(start);
        let line_over = end - start > self.max_line;
        let event_over = end - event_start > self.max_event;
        if line_over && (!event_over || start + self.max_line <= event_start + self.max_event) {
            return Err(self.fail(SseError::LineTooLong {
                limit: self.max_line,
            }));
        }
        if event_over {
            return Err(self.fail(SseError::TooLong {
                limit: self.max_event,
            }));
        }
        Ok(())
    }

    fn fail(&mut self, e: SseError) -> SseError {
        self.failed = Some(e.clone());
        e
    }

    /// Processes one line (without its line end).
    fn line(&mut self, start: usize, end: usize) -> Result<Option<Ready>, SseError> {
        if start == end {
            return Ok(self.dispatch(true));
        }
        let line = &self.buf[start..end];
        if line[0] == b':' {
            self.comment_lines = self.comment_lines.saturating_add(1);
            return Ok(None);
        }
        let (field_end, value_start) = match memchr::memchr(b':', line) {
            Some(c) => (
                start + c,
                if line.get(c + 1) == Some(&b' ') {
                    start + c + 2
                } else {
                    start + c + 1
                },
            ),
            None => (end, end),
        };
        let field = &self.buf[start..field_end];
        match field {
            b"data" => {
                self.event_start.get_or_insert(start);
                match self.data {
                    DataLoc::None => self.data = DataLoc::Buf(value_start, end),
                    DataLoc::Buf(s, e) => {
                        self.scratch.clear();
                        self.scratch.extend_from_slice(&self.buf[s..e]);
                        self.scratch.push(b'\n');
                        self.scratch.extend_from_slice(&self.buf[value_start..end]);
                        self.data = DataLoc::Scratch;
                    }
                    DataLoc::Scratch => {
                        self.scratch.push(b'\n');
                        self.scratch.extend_from_slice(&self.buf[value_start..end]);
                    }
                }
                if self.scratch.len() > self.max_event {
                    return Err(self.fail(SseError::TooLong {
                        limit: self.max_event,
                    }));
                }
            }
            b"event" => {
                self.event_start.get_or_insert(start);
                self.event_name = Some((value_start, end));
            }
            b"id" => {
                let v = &self.buf[value_start..end];
                if !v.contains(&0) {
                    self.last_event_id.clear();
                    self.last_event_id.extend_from_slice(v);
                }
            }
            b"retry" => {
                let v = &self.buf[value_start..end];
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    self.retry_ms = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
                }
            }
            b"error" => return Ok(Some(Ready::ErrorField(value_start, end))),
            _ => self.unknown_lines = self.unknown_lines.saturating_add(1),
        }
        Ok(None)
    }

    /// The blank line (or end of body) that ends the pending event.
    fn dispatch(&mut self, complete: bool) -> Option<Ready> {
        if self.data == DataLoc::None {
            // Data-less events are never dispatched.
            self.clear_event();
            return None;
        }
        match self.event_name {
            Some((s, e)) if &self.buf[s..e] != b"message" && s != e => {
                Some(Ready::Named((s, e), self.data, complete))
            }
            _ => Some(Ready::Data(self.data, complete)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An owned copy of an event, for comparisons.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub(crate) enum Ev {
        Data(Vec<u8>, bool),
        Named(Vec<u8>, Vec<u8>),
        Error(Vec<u8>),
        Failed(SseError),
    }

    fn drain(p: &mut SseParser, out: &mut Vec<Ev>) {
        loop {
            match p.next_event() {
                Ok(Some(SseEvent::Data { data, complete })) => {
                    out.push(Ev::Data(data.to_vec(), complete))
                }
                Ok(Some(SseEvent::Named { event, data, .. })) => {
                    out.push(Ev::Named(event.to_vec(), data.to_vec()))
                }
                Ok(Some(SseEvent::ErrorField(v))) => out.push(Ev::Error(v.to_vec())),
                Ok(None) => return,
                Err(e) => {
                    out.push(Ev::Failed(e));
                    return;
                }
            }
        }
    }

    /// Parses `body` delivered as the given pieces; returns events and comment count.
    pub(crate) fn parse_pieces(pieces: &[&[u8]]) -> (Vec<Ev>, u32) {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for piece in pieces {
            p.feed(piece);
            drain(&mut p, &mut out);
        }
        p.finish();
        drain(&mut p, &mut out);
        (out, p.comment_lines())
    }

    pub(crate) fn parse(body: &[u8]) -> (Vec<Ev>, u32) {
        parse_pieces(&[body])
    }

    fn data(s: &str) -> Ev {
        Ev::Data(s.as_bytes().to_vec(), true)
    }

    pub(crate) fn corpus_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sse-cases")
    }

    /// Every `.sse` body of the corpus, by file name.
    pub(crate) fn corpus() -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(corpus_dir())
            .expect("corpus dir tests/fixtures/sse-cases")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "sse"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        out.sort();
        assert!(out.len() >= 15, "corpus has {} bodies", out.len());
        out
    }

    #[test]
    fn basic_fields_and_line_endings() {
        for nl in ["\n", "\r", "\r\n"] {
            let body = "retry: 3000\n\nid: 7\ndata: a\ndata:b\n\n: note\nevent: x\ndata: y\n\nerror: oops\n\ndata\n\n"
                .replace('\n', nl);
            let mut p = SseParser::default();
            let mut out = Vec::new();
            p.feed(body.as_bytes());
            drain(&mut p, &mut out);
            assert_eq!(
                out,
                vec![
                    data("a\nb"),
                    Ev::Named(b"x".to_vec(), b"y".to_vec()),
                    Ev::Error(b"oops".to_vec()),
                    data(""),
                ],
                "line end {nl:?}"
            );
            assert_eq!(p.comment_lines(), 1);
            assert_eq!(p.retry_ms(), Some(3000));
            assert_eq!(p.last_event_id(), b"7");
        }
    }

    #[test]
    fn message_name_is_a_chat_payload_and_dataless_events_vanish() {
        let (ev, _) = parse(b"event: message\ndata: m\n\nevent: ping\n\nid: 3\n\n\n\ndata: z\n\n");
        assert_eq!(ev, vec![data("m"), data("z")]);
    }

    #[test]
    fn only_one_space_is_stripped_and_bom_ignored() {
        let (ev, _) = parse(b"\xEF\xBB\xBFdata:  two\n\n");
        assert_eq!(ev, vec![data(" two")]);
        let (ev, _) = parse_pieces(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
        assert_eq!(ev, vec![data("x")]);
    }

    #[test]
    fn end_of_body_dispatches_pending_and_unterminated() {
        let (ev, _) = parse(b"data: [DONE]\n");
        assert_eq!(ev, vec![Ev::Data(b"[DONE]".to_vec(), false)]);
        let (ev, _) = parse(b"data: {\"a\":1}\n\ndata: {\"id\":\"x\",\"obj");
        assert_eq!(
            ev,
            vec![
                data("{\"a\":1}"),
                Ev::Data(b"{\"id\":\"x\",\"obj".to_vec(), false)
            ]
        );
        let (ev, _) = parse(b"data: a\r");
        assert_eq!(ev, vec![Ev::Data(b"a".to_vec(), false)]);
        // A named event says whether it was complete too.
        let mut p = SseParser::default();
        p.feed(b"event: e\ndata: {}\n\nevent: e\ndata: {\"ty");
        p.finish();
        let mut complete = Vec::new();
        while let Ok(Some(e)) = p.next_event() {
            if let SseEvent::Named { complete: c, .. } = e {
                complete.push(c);
            }
        }
        assert_eq!(complete, vec![true, false]);
    }

    #[test]
    fn crlf_cut_between_reads_is_one_line_end() {
        let (ev, _) = parse_pieces(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(ev, vec![data("a"), data("b")]);
        // A lone CR is a line end, and CR CR is a blank line.
        let (ev, _) = parse_pieces(&[b"data: a\r", b"\rdata: b\r\r"]);
        assert_eq!(ev, vec![data("a"), data("b")]);
    }

    #[test]
    fn cap_is_a_protocol_error() {
        let mut p = SseParser::new(64);
        let mut out = Vec::new();
        p.feed(b"data: ");
        p.feed(&[b'x'; 100]);
        drain(&mut p, &mut out);
        assert_eq!(out, vec![Ev::Failed(SseError::LineTooLong { limit: 64 })]);
        assert!(p.next_event().is_err());
        // Many short data lines in one event hit the cap too.
        let mut p = SseParser::new(64);
        let mut out = Vec::new();
        p.feed(&b"data: 0123456789\n".repeat(10));
        drain(&mut p, &mut out);
        assert_eq!(out, vec![Ev::Failed(SseError::TooLong { limit: 64 })]);
        // Long streams of short events never do.
        let mut p = SseParser::new(64);
        let mut out = Vec::new();
        for _ in 0..1000 {
            p.feed(b"data: 0123456789\n\n: c\n\n");
            drain(&mut p, &mut out);
        }
        assert_eq!(out.len(), 1000);
    }

    #[test]
    fn buffer_does_not_grow_over_a_long_stream() {
        let mut p = SseParser::default();
        let line = b"data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n";
        for _ in 0..10_000 {
            p.feed(line);
            while let Ok(Some(_)) = p.next_event() {}
        }
        assert!(
            p.buf.capacity() <= 16 * 1024,
            "capacity {}",
            p.buf.capacity()
        );
    }

    #[test]
    fn every_corpus_body_split_at_every_offset_gives_the_same_events() {
        for (name, body) in corpus() {
            let (whole, comments) = parse(&body);
            for i in 0..=body.len() {
                let got = parse_pieces(&[&body[..i], &body[i..]]);
                assert_eq!(got, (whole.clone(), comments), "{name} split at {i}");
            }
            // Byte by byte.
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(
                parse_pieces(&bytes),
                (whole.clone(), comments),
                "{name} byte by byte"
            );
        }
    }

    #[test]
    fn every_corpus_body_split_at_two_offsets_gives_the_same_events() {
        for (name, body) in corpus() {
            let whole = parse(&body);
            let n = body.len();
            // Every first cut × every second cut would be ~n²/2 parses; every first cut near
            // the second and a stride of first cuts far from it cover the same boundary kinds.
            // The stride grows with the body past 704 bytes (at most 64 far cuts per second
            // cut), so a long recorded stream costs n² bytes parsed, not n³.
            let stride = 11.max(n / 64);
            for j in 0..=n {
                let near = j.saturating_sub(8)..=j;
                let far = (0..j.saturating_sub(8)).step_by(stride);
                for i in near.chain(far) {
                    let got = parse_pieces(&[&body[..i], &body[i..j], &body[j..]]);
                    assert_eq!(got, whole, "{name} split at {i} and {j}");
                }
            }
        }
    }

    #[test]
    fn corpus_events_are_what_the_readme_says() {
        let body = std::fs::read(corpus_dir().join("08-named-event-id-retry.sse")).unwrap();
        let (ev, _) = parse(&body);
        let named = ev
            .iter()
            .filter(|e| matches!(e, Ev::Named(n, _) if n == b"hermes.tool.progress"))
            .count();
        assert_eq!(named, 2);
        assert_eq!(ev.iter().filter(|e| matches!(e, Ev::Data(..))).count(), 5);
        let body = std::fs::read(corpus_dir().join("04-crlf-line-endings.sse")).unwrap();
        let (ev, comments) = parse(&body);
        assert_eq!(comments, 1);
        assert_eq!(ev.last(), Some(&data("[DONE]")));
        let body = std::fs::read(corpus_dir().join("07-llamacpp-error-field.sse")).unwrap();
        let (ev, _) = parse(&body);
        assert!(matches!(&ev[0], Ev::Error(v) if v.starts_with(b"{\"code\":400")));
        assert_eq!(ev[1], data("[DONE]"));
    }

    #[test]
    fn line_cap_applies_to_lines_outside_events_and_to_unterminated_lines() {
        let mut p = SseParser::with_caps(16, 1024);
        let mut out = Vec::new();
        p.feed(b": short comment\n\n");
        drain(&mut p, &mut out);
        p.feed(b": a comment line far longer than sixteen bytes");
        drain(&mut p, &mut out);
        assert_eq!(out, vec![Ev::Failed(SseError::LineTooLong { limit: 16 })]);
        // What is fed after the failure is dropped, not buffered.
        for _ in 0..100 {
            p.feed(&[b'x'; 1024]);
        }
        assert!(p.buf.len() <= 1024, "{}", p.buf.len());
        assert!(p.next_event().is_err());
        // An event made of short lines is capped by the event cap, not the line cap.
        let (ev, _) = parse_with(
            16,
            40,
            &[b"data: 0123456789\ndata: 0123456789\ndata: 0123456789\n\n"],
        );
        assert_eq!(ev, vec![Ev::Failed(SseError::TooLong { limit: 40 })]);
        // Both caps passed: the error names the one the stream passed first, however split.
        let body = b"data: 0123456789\ndata: 0123456789012345678901234567890123456789\n\n";
        for i in 0..=body.len() {
            let (ev, _) = parse_with(24, 30, &[&body[..i], &body[i..]]);
            assert_eq!(
                ev,
                vec![Ev::Failed(SseError::TooLong { limit: 30 })],
                "split {i}"
            );
            let (ev, _) = parse_with(24, 60, &[&body[..i], &body[i..]]);
            assert_eq!(
                ev,
                vec![Ev::Failed(SseError::LineTooLong { limit: 24 })],
                "split {i}"
            );
        }
    }

    /// Parses `pieces` with the given caps, checking after every read that the buffer holds
    /// at most a cap plus that read.
    fn parse_with(max_line: usize, max_event: usize, pieces: &[&[u8]]) -> (Vec<Ev>, u32) {
        let mut p = SseParser::with_caps(max_line, max_event);
        let mut out = Vec::new();
        let failed = |out: &Vec<Ev>| matches!(out.last(), Some(Ev::Failed(_)));
        for piece in pieces {
            p.feed(piece);
            let bound = max_line.max(max_event).max(3) + piece.len();
            assert!(p.buf.len() <= bound, "buffer {} > {bound}", p.buf.len());
            drain(&mut p, &mut out);
            assert!(p.scratch.len() <= max_event, "scratch {}", p.scratch.len());
            assert!(p.last_event_id.len() <= max_line);
            if failed(&out) {
                // A reader stops here (the measurement ends the attempt).
                return (out, p.comment_lines());
            }
        }
        p.finish();
        drain(&mut p, &mut out);
        (out, p.comment_lines())
    }

    /// Cuts `body` at the given points (any values: taken modulo the length, sorted).
    pub(crate) fn cut<'a>(body: &'a [u8], points: &[prop::sample::Index]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = points.iter().map(|i| i.index(body.len() + 1)).collect();
        at.sort_unstable();
        let mut pieces = Vec::with_capacity(at.len() + 1);
        let mut from = 0;
        for a in at {
            pieces.push(&body[from..a]);
            from = a;
        }
        pieces.push(&body[from..]);
        pieces
    }

    use proptest::prelude::*;

    /// Bytes that look like an event stream often enough to reach every branch: field names,
    /// line ends of every kind, BOM pieces, payloads, and arbitrary bytes.
    fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop_oneof![
            4 => prop::sample::select(vec![
                &b"data:"[..], b"data: ", b"event:", b"event: message", b"event: error",
                b"event: x", b"id: 7", b"id:", b"retry: 150", b"retry: x", b"error: e", b":",
                b": keep-alive", b"\n", b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r", b"[DONE]",
                b"{\"a\":1}", b"\xEF\xBB\xBF", b"\xEF", b"\xBB", b"x", b" ", b"data", b"\0",
            ])
            .prop_map(<[u8]>::to_vec),
            1 => prop::collection::vec(any::<u8>(), 0..12),
        ];
        prop::collection::vec(token, 0..48).prop_map(|t| t.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Any bytes, any cuts: no panic, the same events (and comment count) as in one read,
        /// and bounded memory; with tiny caps the cap errors are split-independent too.
        #[test]
        fn any_split_of_any_bytes_gives_the_same_events(
            body in sse_bytes(),
            points in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            caps in prop_oneof![
                Just((DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_EVENT_BYTES)),
                (1usize..48, 1usize..96),
            ],
        ) {
            let (line, event) = caps;
            let whole = parse_with(line, event, &[&body]);
            prop_assert_eq!(&parse_with(line, event, &cut(&body, &points)), &whole);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(&parse_with(line, event, &bytes), &whole);
        }

        /// Fully arbitrary bytes (no SSE bias), arbitrary cuts.
        #[test]
        fn arbitrary_bytes_never_panic_and_do_not_depend_on_cuts(
            body in prop::collection::vec(any::<u8>(), 0..512),
            points in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let whole = parse_with(64, 128, &[&body]);
            prop_assert_eq!(parse_with(64, 128, &cut(&body, &points)), whole);
        }
    }
}
