//! What is known about an attempt before its body ([`Head`]: the request and the response
//! head), the result of an attempt without a readable 2xx body ([`Head::failed`]), and the
//! arrival stamps of a body's reads ([`BodyStamps`]).

use std::time::Instant;

use latmesh_core::record::{Outcome, ProbeRecord};

use crate::probe::ProbeResult;
use crate::probe::outcome::{Failure, Scrubber};

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
    pub(super) fn us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.t_send).as_micros()).unwrap_or(u64::MAX)
    }

    /// A record with the head's fields set and `failure` (or `ok` when `None`) as its outcome.
    pub(super) fn base_record(&self, failure: Option<&Failure>) -> ProbeRecord {
        ProbeRecord {
            stream: self.stream,
            send_agent_unix_us: self.send_unix_us,
            outcome: Some(failure.map_or(Outcome::Ok, |f| f.outcome)),
            http_status: self.http_status,
            ttfb_us: self.ttfb_at.map(|t| self.us(t)),
            retry_after_s: self.retry_after_s,
            // As sent: scrubbed and cut with every other provider value by `Scrubber::bound`.
            error_type: failure.and_then(|f| f.error_type.clone()),
            error_code: failure.and_then(|f| f.error_code.clone()),
            error_message: failure.map(|f| f.message.clone()),
            ..ProbeRecord::default()
        }
    }

    /// A record with the head's fields set and `failure` as its outcome (with its provider
    /// error type, code and message), bounded and scrubbed ([`Scrubber::bound`]).
    pub fn record(&self, failure: &Failure, scrub: &Scrubber<'_>) -> ProbeRecord {
        let mut record = self.base_record(Some(failure));
        scrub.bound(&mut record);
        record
    }

    /// The result of an attempt that ended without a readable 2xx body: `body_bytes` of an
    /// error body were read, which ended at `end_at`. (No body stamps: see
    /// [`Head::failed_with_body`].)
    pub fn failed(
        &self,
        failure: Failure,
        scrub: &Scrubber<'_>,
        body_bytes: u64,
        end_at: Option<Instant>,
    ) -> ProbeResult {
        let body = BodyStamps {
            bytes: body_bytes,
            ..BodyStamps::default()
        };
        self.failed_with_body(failure, scrub, &body, end_at)
    }

    /// [`Head::failed`] for a caller that stamped the reads of the error body: also sets
    /// `first_byte_us` and `first_nonblank_us`.
    pub fn failed_with_body(
        &self,
        failure: Failure,
        scrub: &Scrubber<'_>,
        body: &BodyStamps,
        end_at: Option<Instant>,
    ) -> ProbeResult {
        let mut record = self.record(&failure, scrub);
        record.response_bytes = body.bytes;
        record.first_byte_us = body.first_byte.map(|t| self.us(t));
        record.first_nonblank_us = body.first_nonblank.map(|t| self.us(t));
        record.e2e_us = end_at.map(|t| self.us(t));
        ProbeResult {
            record,
            t_send: Some(self.t_send),
            ..ProbeResult::default()
        }
    }
}

/// Arrival stamps of a body's reads: its first byte, its first byte that is not ASCII
/// whitespace, and its size. [`Measurement`] keeps one for a 2xx body; a caller reading an
/// error body can keep one for [`Head::failed_with_body`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyStamps {
    /// Arrival of the read that brought the first body byte.
    pub first_byte: Option<Instant>,
    /// Arrival of the read that brought the first byte that is not ASCII whitespace.
    pub first_nonblank: Option<Instant>,
    /// Body bytes received.
    pub bytes: u64,
}

impl BodyStamps {
    /// Accounts one read of `bytes` that arrived at `at`, of a body that is not compressed
    /// (an empty read changes nothing): [`BodyStamps::on_wire`] and
    /// [`BodyStamps::on_decoded`].
    #[cfg(test)]
    pub fn on_bytes(&mut self, at: Instant, bytes: &[u8]) {
        self.on_wire(at, bytes);
        self.on_decoded(at, bytes);
    }

    /// Accounts one read of `bytes` as they came over the wire (compressed or not): their
    /// size and the first byte.
    pub fn on_wire(&mut self, at: Instant, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.bytes = self.bytes.saturating_add(bytes.len() as u64);
        self.first_byte.get_or_insert(at);
    }

    /// Accounts decoded body bytes of the read that arrived at `at`: the first byte that is
    /// not ASCII whitespace.
    pub fn on_decoded(&mut self, at: Instant, bytes: &[u8]) {
        if self.first_nonblank.is_none() && !bytes.iter().all(u8::is_ascii_whitespace) {
            self.first_nonblank = Some(at);
        }
    }
}
