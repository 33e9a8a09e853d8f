//! Ground truth: when the simulator received each probe and when it wrote each token frame,
//! so a client's TTFT/ITL can be checked against the server's own clock on loopback.
//!
//! Only requests that carry [`PROBE_ID_HEADER`] (`x-latmesh-probe-id`, sent by
//! `latmesh_agent::probe::Prober` when `ProbeRequest::probe_id` is set) are recorded, in the
//! [`TruthLog`] of the [`SimConfig`](crate::SimConfig) (`SimConfig::truth`), unless the log
//! was made with [`TruthLog::recording_all`] (`latmesh-sim serve --truth-all`): then every
//! request is recorded, those without the header under a generated id
//! `unlabeled-N` (N = 1, 2, … in order of receipt), so clients that know nothing of latmesh
//! (other benchmark tools) can be checked against the same ground truth. All instants are
//! `std::time::Instant` (`CLOCK_MONOTONIC` on Linux), the clock the prober stamps with.
//!
//! # What is stamped
//! * `api`: the API whose route served the request (`chat`, `anthropic`, `responses`); the
//!   stamps below mean the same on each (see [`crate::render`]).
//! * `received`: the first statement of the request handler, i.e. after hyper parsed
//!   the request head and axum read the whole request body, before the simulated region
//!   delay, the wait for a serving slot and prefill. Everything before it (the client
//!   building and writing the request, loopback, hyper's parsing) is *not* server time.
//! * `queue_wait`: how long the request waited for a free serving slot of its provider
//!   (see [`ProviderProfile`](crate::ProviderProfile)'s *Serving capacity*), counted from the
//!   end of the region delay; zero when a slot was free, the capacity is unlimited, or the
//!   answer was decided before service (429, 400).
//! * each **token frame** (one SSE event carrying generated tokens, content or reasoning:
//!   a Chat chunk with `content` / `reasoning_content`, an Anthropic `text_delta` /
//!   `thinking_delta`, a Responses `response.output_text.delta` /
//!   `response.reasoning_summary_text.delta`; not the role chunk, block and item openings and
//!   closings, the `signature_delta`, keep-alive comments, `ping`s, the finish / usage
//!   events or the terminal event):
//!   * `handed`: right before the body stream hands the frame to hyper (after its planned
//!     time has come). hyper writes it to the socket in the same task poll, once the body has
//!     no further frame due: a few µs before the `write(2)` (longer when several frames are
//!     due at once and go out in one write). By causality no client can read the frame
//!     before `handed`.
//!   * `written`: when the frame has been written to the socket: the first flush of the
//!     connection after hyper's write buffer (which held the frame) was emptied into the
//!     kernel. Only for HTTP/1 connections accepted by [`serve_providers`](crate::serve_providers)
//!     (`write_tracked`); `None` otherwise (for example when [`providers_router`] is served
//!     by other code). A client on another core may stamp its read slightly *before*
//!     `written` (the kernel hands the bytes over inside the `write(2)` call).
//! * `end`: the same two stamps for the last frame of the body (the API's terminal event:
//!   `[DONE]`, `message_stop`, `response.completed` / `response.incomplete`; an in-band error
//!   event; or the cut line of a truncated stream; for a non-streamed or error response, the
//!   whole response).
//!
//! Server-side durations are measured from `received`: `server_ttft` = first token frame −
//! `received`, `server_ttfc` = first content frame − `received`, using `written` when known,
//! else `handed` ([`Stamp::at`]). They include the simulated region delay and the queue
//! wait. A client's TTFT (from its `t_send`, which is before `received`) minus
//! `server_ttft` is the delay the client path added: request write, loopback both ways, the
//! server's write, the client's read and parse.
//!
//! # Answer ground truth
//! Which quality prompts a quantized profile answers wrong is decided by
//! [`quantized_answers_wrong`] (and listed by [`wrong_prompt_ids`]); which model and
//! fingerprint a swapping profile answers request N with, by [`answered_identity`].
//!
//! # Bounds and cost
//! The log keeps the last `capacity` probe ids (default [`DEFAULT_TRUTH_CAPACITY`]); the
//! oldest is evicted first; a repeated probe id replaces the earlier entry. An entry costs
//! about 200 bytes plus 40 bytes per token frame (at most [`MAX_FRAMES`] frames are kept).
//! Capacity 0 records nothing. Locks are held for a few instructions and never across an
//! `.await`: one global lock per request (insert), one per-entry lock per frame.
//!
//! # Reading it
//! * in-process: [`TruthLog::get`] (instants) or [`TruthLog::report`] (µs offsets);
//! * over HTTP: `GET /_truth/{probe_id}` on the providers' server answers the
//!   [`TruthReport`] as JSON (404 when unknown or evicted);
//! * everything kept, without the per-frame detail: [`TruthLog::summaries`], or over HTTP
//!   `GET /_truth` (one [`TruthSummary`] per line, JSON lines, in order of receipt).
//!
//! [`providers_router`]: crate::providers_router

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use latmesh_core::api::Api;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::text::TokenKind;

/// Request header naming a probe; requests that carry it are recorded in the [`TruthLog`].
/// Same name as `latmesh_agent::probe::request::PROBE_ID_HEADER`.
pub const PROBE_ID_HEADER: &str = "x-latmesh-probe-id";

/// Probe ids kept by [`TruthLog::default`].
pub const DEFAULT_TRUTH_CAPACITY: usize = 100_000;

/// Token frames kept per probe; later frames are counted in [`ProbeTruth::frames_dropped`].
pub const MAX_FRAMES: usize = 1 << 16;

/// Longest probe id recorded (longer ids are ignored).
pub const MAX_PROBE_ID_LEN: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// When a frame was handed to hyper, and when it was written to the socket (if tracked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Right before the frame was handed to hyper.
    pub handed: Instant,
    /// After hyper wrote it to the socket (HTTP/1 over [`serve_providers`](crate::serve_providers) only).
    pub written: Option<Instant>,
}

impl Stamp {
    /// `written` when known, else `handed`.
    pub fn at(&self) -> Instant {
        self.written.unwrap_or(self.handed)
    }
}

/// One token frame: one SSE event carrying generated tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTruth {
    /// When it went out.
    pub stamp: Stamp,
    /// Content or reasoning.
    pub kind: TokenKind,
    /// Tokens in it.
    pub tokens: u32,
}

/// Everything recorded about one probe (a snapshot, see [`TruthLog::get`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeTruth {
    /// The `x-latmesh-probe-id` value.
    pub probe_id: String,
    /// The `{provider}` path segment.
    pub provider: String,
    /// The API the request came in on (its route).
    pub api: Api,
    /// When the handler started (see the [module documentation](self)).
    pub received: Instant,
    /// Time spent waiting for a serving slot, after the region delay (zero without a wait).
    pub queue_wait: Duration,
    /// The response status, once the response was handed to hyper.
    pub status: Option<u16>,
    /// The response body is an event stream.
    pub stream: bool,
    /// Token frames in order.
    pub frames: Vec<FrameTruth>,
    /// Token frames not kept (beyond [`MAX_FRAMES`]).
    pub frames_dropped: u64,
    /// The last frame of the body; `None` while the body is still going (or was abandoned).
    pub end: Option<Stamp>,
    /// The stream was cut mid-line by the truncation fault.
    pub truncated: bool,
    /// `written` stamps are taken for this request (HTTP/1 through `serve_providers`).
    pub write_tracked: bool,
}

impl ProbeTruth {
    /// Index in [`frames`](Self::frames) of the first token frame (0 when there is one).
    pub fn first_token_frame(&self) -> Option<usize> {
        (!self.frames.is_empty()).then_some(0)
    }

    /// Index of the first frame with visible content.
    pub fn first_content_frame(&self) -> Option<usize> {
        self.frames
            .iter()
            .position(|f| f.kind == TokenKind::Content)
    }

    /// `s` − `received`.
    pub fn since_received(&self, s: Instant) -> Duration {
        s.saturating_duration_since(self.received)
    }

    /// Server-side time to first token: first token frame ([`Stamp::at`]) − `received`.
    pub fn ttft(&self) -> Option<Duration> {
        self.frames
            .first()
            .map(|f| self.since_received(f.stamp.at()))
    }

    /// Server-side time to second token: the second token frame ([`Stamp::at`]) −
    /// `received` (latmesh's TTST, counted like TTFT; AIPerf's counts from the first token:
    /// this minus [`ttft`](Self::ttft)). `None` with fewer than two token frames.
    pub fn ttst(&self) -> Option<Duration> {
        self.frames
            .get(1)
            .map(|f| self.since_received(f.stamp.at()))
    }

    /// Server-side time to first content token.
    pub fn ttfc(&self) -> Option<Duration> {
        self.first_content_frame()
            .map(|i| self.since_received(self.frames[i].stamp.at()))
    }

    /// Server-side end: last frame ([`Stamp::at`]) − `received`.
    pub fn e2e(&self) -> Option<Duration> {
        self.end.map(|e| self.since_received(e.at()))
    }

    /// The JSON view (µs offsets from `received`), as served at `GET /_truth/{probe_id}`.
    pub fn report(&self) -> TruthReport {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let off = |s: &Stamp| FrameOffsets {
            handed_us: us(self.since_received(s.handed)),
            written_us: s.written.map(|w| us(self.since_received(w))),
        };
        TruthReport {
            probe_id: self.probe_id.clone(),
            provider: self.provider.clone(),
            api: self.api,
            status: self.status,
            stream: self.stream,
            write_tracked: self.write_tracked,
            queue_wait_us: us(self.queue_wait),
            finished: self.end.is_some(),
            truncated: self.truncated,
            server_ttft_us: self.ttft().map(us),
            server_ttst_us: self.ttst().map(us),
            server_ttfc_us: self.ttfc().map(us),
            server_e2e_us: self.e2e().map(us),
            first_token_frame: self.first_token_frame(),
            first_content_frame: self.first_content_frame(),
            frames: self
                .frames
                .iter()
                .map(|f| FrameReport {
                    kind: match f.kind {
                        TokenKind::Content => "content".to_string(),
                        TokenKind::Reasoning => "reasoning".to_string(),
                    },
                    tokens: f.tokens,
                    at: off(&f.stamp),
                })
                .collect(),
            frames_dropped: self.frames_dropped,
            end: self.end.as_ref().map(off),
        }
    }

    /// The summary view (no frames), as served in `GET /_truth`.
    pub fn summary(&self) -> TruthSummary {
        self.summary_at(Clocks::now())
    }

    fn summary_at(&self, now: Clocks) -> TruthSummary {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        TruthSummary {
            probe_id: self.probe_id.clone(),
            provider: self.provider.clone(),
            api: self.api,
            received_unix_us: now.unix_us_of(self.received),
            status: self.status,
            stream: self.stream,
            finished: self.end.is_some(),
            truncated: self.truncated,
            queue_wait_us: us(self.queue_wait),
            server_ttft_us: self.ttft().map(us),
            server_ttst_us: self.ttst().map(us),
            first_token_handed_us: self
                .frames
                .first()
                .map(|f| us(self.since_received(f.stamp.handed))),
            server_e2e_us: self.e2e().map(us),
            token_frames: self.frames.len() as u64 + self.frames_dropped,
            tokens: self.frames.iter().map(|f| u64::from(f.tokens)).sum(),
        }
    }
}

/// One reading of the monotonic and the wall clock, to date monotonic instants.
#[derive(Clone, Copy)]
struct Clocks {
    mono: Instant,
    unix_us: u64,
}

impl Clocks {
    fn now() -> Self {
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Clocks {
            mono: Instant::now(),
            unix_us,
        }
    }

    /// The wall-clock µs of `at` (an instant before the reading).
    fn unix_us_of(&self, at: Instant) -> u64 {
        let ago = self.mono.saturating_duration_since(at).as_micros();
        self.unix_us
            .saturating_sub(u64::try_from(ago).unwrap_or(u64::MAX))
    }
}

/// µs offsets of one stamp from `received` (floored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameOffsets {
    /// [`Stamp::handed`] − `received`.
    pub handed_us: u64,
    /// [`Stamp::written`] − `received`, when tracked.
    pub written_us: Option<u64>,
}

/// One token frame in a [`TruthReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameReport {
    /// `content` or `reasoning`.
    pub kind: String,
    /// Tokens in the frame.
    pub tokens: u32,
    /// When it went out.
    #[serde(flatten)]
    pub at: FrameOffsets,
}

/// The JSON answer of `GET /_truth/{probe_id}`: durations in µs (floored) from the moment
/// the request was received. `server_*` use `written` when tracked, else `handed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthReport {
    /// The probe id.
    pub probe_id: String,
    /// The provider path segment.
    pub provider: String,
    /// The API that served the request: `chat`, `anthropic` or `responses`.
    #[serde(default)]
    pub api: Api,
    /// Response status (`null` while the handler is still waiting).
    pub status: Option<u16>,
    /// Event-stream body.
    pub stream: bool,
    /// `written_us` is filled.
    pub write_tracked: bool,
    /// Time spent waiting for a serving slot, in µs (0 without a wait); part of the
    /// `server_*` durations.
    #[serde(default)]
    pub queue_wait_us: u64,
    /// The last frame went out.
    pub finished: bool,
    /// Cut by the truncation fault.
    pub truncated: bool,
    /// First token frame − receipt.
    pub server_ttft_us: Option<u64>,
    /// Second token frame − receipt (`null` with fewer than two token frames).
    #[serde(default)]
    pub server_ttst_us: Option<u64>,
    /// First content frame − receipt.
    pub server_ttfc_us: Option<u64>,
    /// Last frame − receipt.
    pub server_e2e_us: Option<u64>,
    /// Index in `frames` of the first token frame.
    pub first_token_frame: Option<usize>,
    /// Index in `frames` of the first content frame.
    pub first_content_frame: Option<usize>,
    /// Token frames in order.
    pub frames: Vec<FrameReport>,
    /// Token frames not kept.
    pub frames_dropped: u64,
    /// The last frame of the body.
    pub end: Option<FrameOffsets>,
}

/// One kept request without its frames: a line of `GET /_truth` ([`TruthLog::summaries`]).
/// Durations in µs (floored) from the moment the request was received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthSummary {
    /// The probe id (`unlabeled-N` for a request without one, see [`TruthLog::recording_all`]).
    pub probe_id: String,
    /// The provider path segment.
    pub provider: String,
    /// The API that served the request: `chat`, `anthropic` or `responses`.
    #[serde(default)]
    pub api: Api,
    /// When the request was received, UTC µs since the Unix epoch (the monotonic `received`
    /// converted with one reading of both clocks when the summary was made).
    pub received_unix_us: u64,
    /// Response status (`null` while the handler is still waiting).
    pub status: Option<u16>,
    /// Event-stream body.
    pub stream: bool,
    /// The last frame went out.
    pub finished: bool,
    /// Cut by the truncation fault.
    pub truncated: bool,
    /// Time spent waiting for a serving slot (part of the durations below).
    pub queue_wait_us: u64,
    /// First token frame − receipt, `written` when tracked, else `handed` (as
    /// [`TruthReport::server_ttft_us`]).
    pub server_ttft_us: Option<u64>,
    /// Second token frame − receipt, like `server_ttft_us` (`null` with fewer than two).
    #[serde(default)]
    pub server_ttst_us: Option<u64>,
    /// First token frame handed to hyper − receipt: the earliest instant any client could
    /// read the first token.
    pub first_token_handed_us: Option<u64>,
    /// Last frame − receipt.
    pub server_e2e_us: Option<u64>,
    /// Token frames sent (kept and dropped).
    pub token_frames: u64,
    /// Tokens in the kept frames.
    pub tokens: u64,
}

// ---------------------------------------------------------------------------------------
// The log.

#[derive(Default)]
struct Rec {
    queue_wait: Duration,
    status: Option<u16>,
    stream: bool,
    frames: Vec<FrameTruth>,
    frames_dropped: u64,
    end: Option<Stamp>,
    truncated: bool,
}

struct Entry {
    probe_id: Arc<str>,
    provider: String,
    api: Api,
    received: Instant,
    write_tracked: bool,
    rec: Mutex<Rec>,
}

impl Entry {
    fn snapshot(&self) -> ProbeTruth {
        let r = lock(&self.rec);
        ProbeTruth {
            probe_id: self.probe_id.to_string(),
            provider: self.provider.clone(),
            api: self.api,
            received: self.received,
            queue_wait: r.queue_wait,
            status: r.status,
            stream: r.stream,
            frames: r.frames.clone(),
            frames_dropped: r.frames_dropped,
            end: r.end,
            truncated: r.truncated,
            write_tracked: self.write_tracked,
        }
    }

    fn mark_written(&self, slot: Slot, at: Instant) {
        let mut r = lock(&self.rec);
        let stamp = match slot {
            Slot::Frame(i) => r.frames.get_mut(i).map(|f| &mut f.stamp),
            Slot::End => r.end.as_mut(),
        };
        if let Some(s) = stamp
            && s.written.is_none()
        {
            s.written = Some(at);
        }
    }
}

struct LogState {
    map: HashMap<Arc<str>, (u64, Arc<Entry>)>,
    /// Insertion order with the sequence number of each insert (a replaced id's stale
    /// position is skipped on eviction).
    order: VecDeque<(Arc<str>, u64)>,
    next_seq: u64,
}

struct LogInner {
    capacity: usize,
    /// Also record requests without a probe id (see [`TruthLog::recording_all`]).
    record_unlabeled: bool,
    /// Last `unlabeled-N` handed out.
    unlabeled: AtomicU64,
    state: Mutex<LogState>,
}

/// Prefix of the ids given to requests without a probe id by [`TruthLog::recording_all`].
pub const UNLABELED_PREFIX: &str = "unlabeled-";

/// The bounded ground-truth log (see the [module documentation](self)). Cheap to clone:
/// clones share one log. Keep a clone of `SimConfig::truth` before serving to read it.
#[derive(Clone)]
pub struct TruthLog {
    inner: Arc<LogInner>,
}

impl Default for TruthLog {
    /// A log of [`DEFAULT_TRUTH_CAPACITY`] probe ids.
    fn default() -> Self {
        TruthLog::new(DEFAULT_TRUTH_CAPACITY)
    }
}

impl fmt::Debug for TruthLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TruthLog")
            .field("capacity", &self.inner.capacity)
            .field("record_unlabeled", &self.inner.record_unlabeled)
            .field("len", &self.len())
            .finish()
    }
}

impl TruthLog {
    /// A log keeping the last `capacity` probe ids (0: record nothing).
    pub fn new(capacity: usize) -> Self {
        TruthLog::with_unlabeled(capacity, false)
    }

    /// A log keeping the last `capacity` requests that also records every request without a
    /// probe id, under the id `unlabeled-N` (N = 1, 2, … in order of receipt): for clients
    /// that do not send [`PROBE_ID_HEADER`] (`latmesh-sim serve --truth-all`). Read them all
    /// with [`summaries`](Self::summaries) (`GET /_truth`).
    pub fn recording_all(capacity: usize) -> Self {
        TruthLog::with_unlabeled(capacity, true)
    }

    fn with_unlabeled(capacity: usize, record_unlabeled: bool) -> Self {
        TruthLog {
            inner: Arc::new(LogInner {
                capacity,
                record_unlabeled,
                unlabeled: AtomicU64::new(0),
                state: Mutex::new(LogState {
                    map: HashMap::new(),
                    order: VecDeque::new(),
                    next_seq: 0,
                }),
            }),
        }
    }

    /// Probe ids it keeps at most.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Probe ids currently kept.
    pub fn len(&self) -> usize {
        lock(&self.inner.state).map.len()
    }

    /// Nothing recorded (or everything evicted).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of what is recorded for `probe_id` so far.
    pub fn get(&self, probe_id: &str) -> Option<ProbeTruth> {
        let entry = lock(&self.inner.state).map.get(probe_id)?.1.clone();
        Some(entry.snapshot())
    }

    /// [`get`](Self::get) as µs offsets ([`ProbeTruth::report`]).
    pub fn report(&self, probe_id: &str) -> Option<TruthReport> {
        self.get(probe_id).map(|t| t.report())
    }

    /// Requests without a probe id are recorded too ([`recording_all`](Self::recording_all)).
    pub fn records_unlabeled(&self) -> bool {
        self.inner.record_unlabeled
    }

    /// Every kept request in order of receipt (of its recording's start), without frames.
    pub fn summaries(&self) -> Vec<TruthSummary> {
        let mut entries: Vec<(u64, Arc<Entry>)> = lock(&self.inner.state)
            .map
            .values()
            .map(|(seq, e)| (*seq, e.clone()))
            .collect();
        entries.sort_unstable_by_key(|(seq, _)| *seq);
        let now = Clocks::now();
        entries
            .into_iter()
            .map(|(_, e)| e.snapshot().summary_at(now))
            .collect()
    }

    /// Start recording a request that carries no probe id, under the next `unlabeled-N`;
    /// `None` unless the log [records unlabeled requests](Self::recording_all).
    pub(crate) fn start_unlabeled(
        &self,
        provider: &str,
        api: Api,
        received: Instant,
        conn: Option<Arc<ConnWrites>>,
    ) -> Option<Recorder> {
        if !self.inner.record_unlabeled || self.inner.capacity == 0 {
            return None;
        }
        let n = self.inner.unlabeled.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{UNLABELED_PREFIX}{n}");
        self.start(&id, provider, api, received, conn)
    }

    /// Start recording `probe_id`, received at `received` on `api`. `conn` is the
    /// connection's write tracker when written stamps can be taken.
    pub(crate) fn start(
        &self,
        probe_id: &str,
        provider: &str,
        api: Api,
        received: Instant,
        conn: Option<Arc<ConnWrites>>,
    ) -> Option<Recorder> {
        if self.inner.capacity == 0 || probe_id.is_empty() || probe_id.len() > MAX_PROBE_ID_LEN {
            return None;
        }
        let id: Arc<str> = Arc::from(probe_id);
        let entry = Arc::new(Entry {
            probe_id: id.clone(),
            provider: provider.to_string(),
            api,
            received,
            write_tracked: conn.is_some(),
            rec: Mutex::new(Rec::default()),
        });
        {
            let mut st = lock(&self.inner.state);
            let seq = st.next_seq;
            st.next_seq += 1;
            st.map.insert(id.clone(), (seq, entry.clone()));
            st.order.push_back((id, seq));
            while st.map.len() > self.inner.capacity {
                let Some((old, old_seq)) = st.order.pop_front() else {
                    break;
                };
                if st.map.get(&old).is_some_and(|(s, _)| *s == old_seq) {
                    st.map.remove(&old);
                }
            }
            // Stale positions of replaced ids: keep the queue from growing without bound.
            if st.order.len() > 2 * self.inner.capacity.max(1) {
                let LogState { map, order, .. } = &mut *st;
                order.retain(|(id, s)| map.get(id).is_some_and(|(cur, _)| cur == s));
            }
        }
        Some(Recorder { entry, conn })
    }
}

/// Records one probe's response as it is played out (held by the handler and its body
/// stream).
#[derive(Clone)]
pub(crate) struct Recorder {
    entry: Arc<Entry>,
    conn: Option<Arc<ConnWrites>>,
}

impl Recorder {
    fn stamp_now(&self) -> Stamp {
        Stamp {
            handed: Instant::now(),
            written: None,
        }
    }

    /// The request waited `wait` for a serving slot.
    pub(crate) fn queued(&self, wait: Duration) {
        lock(&self.entry.rec).queue_wait = wait;
    }

    /// The body will be an event stream (frames and the end are recorded by the stream).
    pub(crate) fn streaming(&self) {
        lock(&self.entry.rec).stream = true;
    }

    /// The response (status `status`) is being handed to hyper. For a body that is not a
    /// stream, this is also its end.
    pub(crate) fn responded(&self, status: u16) {
        let stamp = self.stamp_now();
        let mut r = lock(&self.entry.rec);
        r.status = Some(status);
        if !r.stream {
            r.end = Some(stamp);
            drop(r);
            self.pending(Slot::End);
        }
    }

    /// A token frame is being handed to hyper now.
    pub(crate) fn tokens(&self, kind: TokenKind, tokens: u32) {
        let stamp = self.stamp_now();
        let mut r = lock(&self.entry.rec);
        if r.frames.len() >= MAX_FRAMES {
            r.frames_dropped += 1;
            return;
        }
        r.frames.push(FrameTruth {
            stamp,
            kind,
            tokens,
        });
        let i = r.frames.len() - 1;
        drop(r);
        self.pending(Slot::Frame(i));
    }

    /// The last frame of the body is being handed to hyper now (`truncated`: it is the cut
    /// line of a truncated stream).
    pub(crate) fn end(&self, truncated: bool) {
        let stamp = self.stamp_now();
        let mut r = lock(&self.entry.rec);
        r.end = Some(stamp);
        r.truncated = truncated;
        drop(r);
        self.pending(Slot::End);
    }

    fn pending(&self, slot: Slot) {
        if let Some(c) = &self.conn {
            lock(&c.pending).push((self.entry.clone(), slot));
            c.any.store(true, Ordering::Release);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Written stamps: a per-connection tracker, the socket wrapper and the listener.

#[derive(Clone, Copy)]
enum Slot {
    Frame(usize),
    End,
}

/// Frames of one connection handed to hyper and not yet known to be written.
#[derive(Default)]
pub(crate) struct ConnWrites {
    any: AtomicBool,
    pending: Mutex<Vec<(Arc<Entry>, Slot)>>,
}

impl ConnWrites {
    /// hyper flushes the socket only once its write buffer is empty: everything handed
    /// before now has been written.
    fn flushed(&self) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let done = {
            let mut p = lock(&self.pending);
            self.any.store(false, Ordering::Release);
            std::mem::take(&mut *p)
        };
        for (entry, slot) in done {
            entry.mark_written(slot, now);
        }
    }
}

/// The per-connection value the handler finds in its request extensions
/// (`ConnectInfo<ConnTap>`), present for connections accepted by [`TruthListener`].
#[derive(Clone)]
pub(crate) struct ConnTap {
    /// The connection's write tracker (the handler uses it for HTTP/1 requests only).
    pub(crate) writes: Arc<ConnWrites>,
}

/// A TCP stream whose flushes mark pending frames as written.
pub(crate) struct TruthIo {
    tcp: TcpStream,
    writes: Arc<ConnWrites>,
}

impl AsyncRead for TruthIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for TruthIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.tcp).poll_flush(cx);
        if r.is_ready() {
            self.writes.flushed();
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The providers' listener: `TCP_NODELAY` on every connection, each wrapped in a
/// [`TruthIo`] whose tracker reaches the handler as `ConnectInfo<ConnTap>`.
pub(crate) struct TruthListener(pub(crate) TcpListener);

impl axum::serve::Listener for TruthListener {
    type Io = TruthIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (TruthIo, std::net::SocketAddr) {
        let (tcp, addr) = axum::serve::Listener::accept(&mut self.0).await;
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("set_nodelay: {e}");
        }
        let io = TruthIo {
            tcp,
            writes: Arc::new(ConnWrites::default()),
        };
        (io, addr)
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.0.local_addr()
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TruthListener>>
    for ConnTap
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, TruthListener>) -> Self {
        ConnTap {
            writes: stream.io().writes.clone(),
        }
    }
}

/// Whether a profile whose [`quantized_wrong_share`](crate::ProviderProfile::quantized_wrong_share)
/// is `share` answers the quality prompt `prompt_id` wrong: when a fixed hash of the id,
/// mapped onto `0..1`, falls under `share`. The same prompts on every API, every time,
/// every run; a larger share keeps every prompt a smaller one answered wrong. Share 0 never,
/// share 1 always.
pub fn quantized_answers_wrong(share: f64, prompt_id: &str) -> bool {
    let h = crate::text::mix64(crate::text::fnv1a64(prompt_id.as_bytes()));
    let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
    unit < share
}

/// The ids of the shipped quality prompts ([`latmesh_core::quality::prompt_set`]) `profile`
/// answers wrong ([`quantized_answers_wrong`]), in set order: what a quality-parity run
/// must find wrong on that provider, and nothing else.
pub fn wrong_prompt_ids(profile: &crate::ProviderProfile) -> Vec<&'static str> {
    latmesh_core::quality::prompt_set()
        .prompts
        .iter()
        .filter(|p| quantized_answers_wrong(profile.quantized_wrong_share, &p.id))
        .map(|p| p.id.as_str())
        .collect()
}

/// The model and Chat `system_fingerprint` `profile` answers its request number
/// `request_index` (0-based, per provider and served router) with, when the request asked
/// for `asked`: after a swap ([`swap_after_requests`](crate::ProviderProfile::swap_after_requests))
/// the swap's; else the profile's `answer_model` (or the model asked for, or its first
/// listed one) and its `system_fingerprint`.
pub fn answered_identity(
    profile: &crate::ProviderProfile,
    request_index: u64,
    asked: Option<&str>,
) -> (String, Option<String>) {
    if profile.swap_after_requests > 0 && request_index >= profile.swap_after_requests {
        let fp = (!profile.swap_fingerprint.is_empty()).then(|| profile.swap_fingerprint.clone());
        return (profile.swap_model.clone(), fp);
    }
    let model = profile
        .answer_model
        .as_deref()
        .or(asked)
        .or(profile.models.first().map(String::as_str))
        .unwrap_or("unknown");
    (model.to_string(), profile.system_fingerprint.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_prompts_are_fixed_and_nested_by_share() {
        let ids: Vec<String> = (0..200).map(|i| format!("p-{i:03}")).collect();
        let wrong = |share: f64| -> Vec<&String> {
            ids.iter()
                .filter(|id| quantized_answers_wrong(share, id))
                .collect()
        };
        assert!(wrong(0.0).is_empty());
        assert_eq!(wrong(1.0).len(), 200);
        let (small, large) = (wrong(0.2), wrong(0.5));
        assert!(small.iter().all(|id| large.contains(id)));
        // Near the share, for 200 ids (binomial σ ≈ 6-7).
        assert!((20..=60).contains(&small.len()), "{}", small.len());
        assert!((75..=125).contains(&large.len()), "{}", large.len());
        let p = crate::ProviderProfile {
            quantized_wrong_share: 1.0,
            ..crate::ProviderProfile::default()
        };
        assert_eq!(
            wrong_prompt_ids(&p).len(),
            latmesh_core::quality::prompt_set().prompts.len()
        );
        assert!(wrong_prompt_ids(&crate::ProviderProfile::default()).is_empty());
    }

    #[test]
    fn answered_identity_follows_answer_model_and_the_swap() {
        let mut p = crate::ProviderProfile::default();
        assert_eq!(answered_identity(&p, 9, Some("m")), ("m".to_string(), None));
        assert_eq!(answered_identity(&p, 9, None).0, crate::DEFAULT_MODEL_ID);
        p.answer_model = Some("other".into());
        p.system_fingerprint = Some("fp_a".into());
        assert_eq!(
            answered_identity(&p, 9, Some("m")),
            ("other".to_string(), Some("fp_a".to_string()))
        );
        p.swap_after_requests = 10;
        p.swap_model = "swapped".into();
        assert_eq!(answered_identity(&p, 9, Some("m")).0, "other");
        assert_eq!(
            answered_identity(&p, 10, Some("m")),
            ("swapped".to_string(), None)
        );
        p.swap_fingerprint = "fp_b".into();
        assert_eq!(answered_identity(&p, 11, None).1.as_deref(), Some("fp_b"));
    }

    #[test]
    fn bounded_oldest_first_and_replacement() {
        let log = TruthLog::new(3);
        let t = Instant::now();
        for id in ["a", "b", "c", "d"] {
            log.start(id, "p", Api::Chat, t, None).unwrap();
        }
        assert_eq!(log.len(), 3);
        assert!(log.get("a").is_none());
        // Replacing "b" makes it the newest: the next eviction takes "c".
        let r = log.start("b", "q", Api::Chat, t, None).unwrap();
        r.tokens(TokenKind::Content, 1);
        log.start("e", "p", Api::Chat, t, None).unwrap();
        assert!(log.get("c").is_none());
        let b = log.get("b").unwrap();
        assert_eq!(b.provider, "q");
        assert_eq!(b.frames.len(), 1);
        assert_eq!(log.len(), 3);
        for i in 0..100 {
            log.start("b", "q", Api::Chat, t, None).unwrap();
            log.start(&format!("x{i}"), "q", Api::Chat, t, None)
                .unwrap();
        }
        assert_eq!(log.len(), 3);
        assert!(lock(&log.inner.state).order.len() <= 7);
        assert!(
            TruthLog::new(0)
                .start("a", "p", Api::Chat, t, None)
                .is_none()
        );
        assert!(
            log.start(&"x".repeat(300), "p", Api::Chat, t, None)
                .is_none()
        );
    }

    #[test]
    fn frames_flushes_and_report() {
        let log = TruthLog::new(10);
        let conn = Arc::new(ConnWrites::default());
        let t0 = Instant::now();
        let r = log
            .start("p1", "prov", Api::Chat, t0, Some(conn.clone()))
            .unwrap();
        r.streaming();
        r.responded(200);
        r.tokens(TokenKind::Reasoning, 1);
        conn.flushed();
        r.tokens(TokenKind::Content, 2);
        let mid = log.get("p1").unwrap();
        assert!(mid.frames[0].stamp.written.is_some());
        assert!(mid.frames[1].stamp.written.is_none());
        assert!(mid.end.is_none());
        r.end(false);
        conn.flushed();
        let t = log.get("p1").unwrap();
        assert!(t.write_tracked && t.stream);
        assert_eq!(t.status, Some(200));
        assert_eq!(t.first_token_frame(), Some(0));
        assert_eq!(t.first_content_frame(), Some(1));
        for f in &t.frames {
            assert!(f.stamp.written.unwrap() >= f.stamp.handed);
            assert!(f.stamp.handed >= t0);
        }
        assert!(t.ttft().unwrap() <= t.ttfc().unwrap());
        assert!(t.ttfc().unwrap() <= t.e2e().unwrap());
        let rep = t.report();
        assert_eq!(rep.frames.len(), 2);
        assert_eq!(rep.frames[1].kind, "content");
        assert_eq!(rep.frames[1].tokens, 2);
        assert!(rep.finished);
        let json = serde_json::to_value(&rep).unwrap();
        assert!(json["frames"][0]["handed_us"].is_u64());
        assert!(json["frames"][0]["written_us"].is_u64());
        let back: TruthReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn non_stream_response_ends_when_handed() {
        let log = TruthLog::new(10);
        let r = log
            .start("p", "prov", Api::Chat, Instant::now(), None)
            .unwrap();
        r.responded(429);
        let t = log.get("p").unwrap();
        assert_eq!(t.status, Some(429));
        assert!(!t.stream && t.end.is_some() && t.ttft().is_none());
        assert!(!t.write_tracked && t.end.unwrap().written.is_none());
    }
    #[test]
    fn recording_all_names_unlabeled_requests_and_summarises_them() {
        // A plain log ignores unlabeled requests.
        let t = Instant::now();
        assert!(
            TruthLog::new(10)
                .start_unlabeled("p", Api::Chat, t, None)
                .is_none()
        );
        assert!(!TruthLog::new(10).records_unlabeled());

        let log = TruthLog::recording_all(10);
        assert!(log.records_unlabeled());
        // Received 5 ms ago: the first frame, handed now, is at least 5,000 µs after it.
        let received = t.checked_sub(Duration::from_millis(5)).unwrap();
        let a = log
            .start_unlabeled("prov", Api::Chat, received, None)
            .unwrap();
        let labeled = log.start("probe-7", "prov", Api::Chat, t, None).unwrap();
        let b = log.start_unlabeled("other", Api::Chat, t, None).unwrap();
        a.streaming();
        a.responded(200);
        a.tokens(TokenKind::Reasoning, 2);
        a.tokens(TokenKind::Content, 1);
        a.tokens(TokenKind::Content, 3);
        a.end(false);
        labeled.responded(429);
        b.streaming();
        b.responded(200);

        let all = log.summaries();
        let ids: Vec<&str> = all.iter().map(|s| s.probe_id.as_str()).collect();
        assert_eq!(ids, ["unlabeled-1", "probe-7", "unlabeled-2"]);
        let s = &all[0];
        assert_eq!(s.provider, "prov");
        assert_eq!(s.status, Some(200));
        assert!(s.stream && s.finished && !s.truncated);
        assert_eq!((s.token_frames, s.tokens), (3, 6));
        let first = s.first_token_handed_us.unwrap();
        assert!(first >= 5_000, "{first}");
        assert!(first < 5_000 + 1_000_000, "{first}");
        // No written stamps without a connection tracker: server TTFT is the handed stamp.
        assert_eq!(s.server_ttft_us, Some(first));
        assert!(s.server_e2e_us.unwrap() >= first);
        assert_eq!(s.queue_wait_us, 0);
        // Dated on the wall clock: 5 ms before the labeled request, within the clocks' skew.
        let gap = all[1].received_unix_us as i64 - s.received_unix_us as i64;
        assert!((4_000..6_000).contains(&gap), "{gap}");
        let wall_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        assert!(s.received_unix_us < wall_now && wall_now - s.received_unix_us < 60_000_000);
        let mut again = log.get("unlabeled-1").unwrap().summary();
        assert!(again.received_unix_us.abs_diff(s.received_unix_us) < 1_000);
        again.received_unix_us = s.received_unix_us;
        assert_eq!(*s, again);
        // The throttled labeled request: no token, ended when answered.
        assert_eq!(all[1].status, Some(429));
        assert_eq!((all[1].token_frames, all[1].tokens), (0, 0));
        assert!(all[1].finished && all[1].server_ttft_us.is_none());
        // Still streaming: not finished, no frame yet.
        assert!(!all[2].finished && all[2].first_token_handed_us.is_none());
        let json = serde_json::to_string(s).unwrap();
        let back: TruthSummary = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, s);
        // Capacity still bounds what is kept; the numbering goes on.
        for _ in 0..20 {
            log.start_unlabeled("prov", Api::Chat, t, None).unwrap();
        }
        let all = log.summaries();
        assert_eq!(all.len(), 10);
        assert_eq!(all[0].probe_id, "unlabeled-13");
        assert_eq!(all[9].probe_id, "unlabeled-22");
    }
}
