//! One measured attempt: [`ProbeRecord`] and its [`Outcome`].
//!
//! Field meanings follow the metric definitions of `docs/metrics.md` (metrics_version 9):
//! durations are microseconds on the monotonic clock from `t_send`, the moment the request was
//! handed to the HTTP client; wall-clock times are UTC microseconds.

use serde::{Deserialize, Serialize};

pub use crate::output_tokens::OutputTokensSource;

/// How an attempt ended (docs/metrics.md "Outcomes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A complete answer: `[DONE]`, or end of body after a `finish_reason`.
    Ok,
    /// HTTP 4xx other than 429 (see `http_status`).
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// HTTP 429; `retry_after_s` carries Retry-After when sent.
    Throttled,
    /// HTTP 5xx (see `http_status`).
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// The TCP/TLS connection was not established within the connect timeout.
    TimeoutConnect,
    /// No token arrived within the TTFT timeout.
    TimeoutTtft,
    /// The gap between two body reads exceeded the idle timeout.
    TimeoutIdle,
    /// The whole attempt exceeded the total timeout.
    TimeoutTotal,
    /// The body ended with neither `[DONE]` nor a `finish_reason`.
    Truncated,
    /// An error object inside a 200 response (e.g. `data: {"error":…}` or an `error:` line).
    StreamError,
    /// The body could not be understood (unparseable JSON, no chat payload at all).
    ProtocolError,
    /// The connection failed or broke (refused, reset, DNS failure).
    ConnectionError,
    /// A later turn of a multi-turn conversation was refused with 400/413/422 after an
    /// earlier turn succeeded: the provider rejected the history we sent back (e.g. it asks
    /// for, or forbids, `reasoning_content`). `http_status` and the message say which.
    HistoryRejected,
    /// The campaign was cancelled (`latmesh campaign cancel`) while the attempt was in flight
    /// and it was aborted after the grace period: not the provider's doing, so error rates
    /// leave it out.
    Cancelled,
    /// Open loop (`rate`): the arrival was not sent, because its provider's in-flight cap
    /// stayed full for `max_queue_ms` after its intended time (k6's "dropped iterations"):
    /// the agent could not keep the rate. Left out of error rates; counted and reported.
    Dropped,
}

impl Outcome {
    /// Every outcome, in report order.
    pub const ALL: [Outcome; 15] = [
        Outcome::Ok,
        Outcome::Http4xx,
        Outcome::Throttled,
        Outcome::Http5xx,
        Outcome::TimeoutConnect,
        Outcome::TimeoutTtft,
        Outcome::TimeoutIdle,
        Outcome::TimeoutTotal,
        Outcome::Truncated,
        Outcome::StreamError,
        Outcome::ProtocolError,
        Outcome::ConnectionError,
        Outcome::HistoryRejected,
        Outcome::Cancelled,
        Outcome::Dropped,
    ];

    /// The snake_case name used on the wire, in JSON and in ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Http4xx => "http_4xx",
            Outcome::Throttled => "throttled",
            Outcome::Http5xx => "http_5xx",
            Outcome::TimeoutConnect => "timeout_connect",
            Outcome::TimeoutTtft => "timeout_ttft",
            Outcome::TimeoutIdle => "timeout_idle",
            Outcome::TimeoutTotal => "timeout_total",
            Outcome::Truncated => "truncated",
            Outcome::StreamError => "stream_error",
            Outcome::ProtocolError => "protocol_error",
            Outcome::ConnectionError => "connection_error",
            Outcome::HistoryRejected => "history_rejected",
            Outcome::Cancelled => "cancelled",
            Outcome::Dropped => "dropped",
        }
    }

    /// Parses [`Outcome::as_str`]'s names; `None` for anything else.
    pub fn parse(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// The outcome of an HTTP error status (`status` ≥ 400): 429 → throttled, 500-599 →
    /// 5xx, other 4xx → 4xx; a status past 599 (no HTTP status class, e.g. 799) is a
    /// `protocol_error`, not a server error (it is neither retried as one nor counted in 5xx
    /// rates).
    pub fn from_http_status(status: u16) -> Outcome {
        match status {
            429 => Outcome::Throttled,
            500..=599 => Outcome::Http5xx,
            600.. => Outcome::ProtocolError,
            _ => Outcome::Http4xx,
        }
    }

    /// Whether this outcome is any kind of timeout.
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            Outcome::TimeoutConnect
                | Outcome::TimeoutTtft
                | Outcome::TimeoutIdle
                | Outcome::TimeoutTotal
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token counts as the provider reported them in `usage` (any field it was found under).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens`.
    pub completion_tokens: Option<u32>,
    /// `usage.total_tokens`.
    pub total_tokens: Option<u32>,
    /// `usage.completion_tokens_details.reasoning_tokens` (or `usage.reasoning_tokens`).
    pub reasoning_tokens: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens` or `usage.prompt_cache_hit_tokens`.
    pub cached_tokens: Option<u32>,
}

/// Everything measured about one attempt. Prompts and responses are not stored (ids only).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Load model of its scenario (`rounds`, `sweep`, `rate`).
    pub load: crate::load::LoadKind,
    /// Round of the plan (0-based; 0 outside `rounds`).
    pub round: u32,
    /// `rounds`: index of this probe in the round's shared order. `sweep`: index of the
    /// request among those of its provider in its step. `rate`: index of the arrival in its
    /// provider's schedule. 0-based.
    pub slot: u32,
    /// `sweep`: index of the concurrency step (0-based); 0 otherwise.
    pub step: u32,
    /// `sweep`: the step's target concurrency; 0 otherwise.
    pub concurrency: u32,
    /// The attempt belongs to a client request through a failover chain (the scenario's
    /// `failover`); `provider` is where this attempt went.
    pub failover: bool,
    /// Provider name from the plan.
    pub provider: String,
    /// Scenario name from the plan.
    pub scenario: String,
    /// Stable prompt id from the prompt set.
    pub prompt_id: String,
    /// 1 for the first attempt, > 1 for retries.
    pub attempt: u32,
    /// Whether this is the last attempt of its logical request (no retry followed it); the
    /// logical request's outcome is this record's outcome.
    pub final_attempt: bool,
    /// On the final attempt: the logical request's latency, from the first attempt's
    /// `t_send` to the end of this attempt (backoff waits included), µs.
    pub request_latency_us: Option<u64>,
    /// 1-based turn of a multi-turn conversation (1 for single-turn scenarios).
    pub turn: u32,
    /// Whether a per-request nonce prefix was put in front of the prompt to defeat provider
    /// prompt caches.
    pub cache_nonce: bool,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// Wall clock at `t_send` on the agent's clock, UTC µs.
    pub send_agent_unix_us: i64,
    /// `t_send` − intended send time, µs (negative never: clamped at 0).
    pub sched_lag_us: i64,
    /// How the attempt ended.
    pub outcome: Option<Outcome>,
    /// HTTP status, when a response arrived.
    pub http_status: Option<u16>,
    /// Whether the request went over a pooled connection (then `dns_us`, `connect_us` and
    /// `tls_us` are `None`).
    pub conn_reused: bool,
    /// The request was first sent on a pooled connection that failed before any byte of
    /// its response arrived (closed or reset by the server), and was sent again at once on a
    /// new connection (docs/metrics.md, "Outcomes"). The phases (`conn_reused` false,
    /// `dns_us`, `connect_us`, `tls_us`) are then the new connection's, and `t_send` stays
    /// the first send: every duration includes the failed try. `false` in older records.
    #[serde(default)]
    pub conn_retried: bool,
    /// Name resolution of a new connection, µs (`None` for an IP literal or a reused
    /// connection).
    pub dns_us: Option<u64>,
    /// TCP connect of a new connection (after DNS), µs.
    pub connect_us: Option<u64>,
    /// TLS handshake of a new connection (after TCP connect), µs; `None` for `http://`.
    pub tls_us: Option<u64>,
    /// Response headers received, µs from `t_send`.
    pub ttfb_us: Option<u64>,
    /// First response body byte, µs from `t_send`. `ttft − first_byte` is time spent on
    /// comment/keep-alive lines (or empty chunks) before the first token.
    pub first_byte_us: Option<u64>,
    /// First body byte that is not ASCII whitespace, µs from `t_send` (servers that send blank
    /// lines while a request is queued show here, mostly for non-streaming requests).
    pub first_nonblank_us: Option<u64>,
    /// First payload with a non-empty generated token of any kind, µs from `t_send`.
    pub ttft_us: Option<u64>,
    /// First payload with non-empty visible `content`, µs from `t_send`.
    pub ttfc_us: Option<u64>,
    /// Reasoning time: `ttfc − ttft` when reasoning tokens came before the first content
    /// token, µs.
    pub reasoning_us: Option<u64>,
    /// End of the response (`[DONE]`, or end of body after `finish_reason`), µs from `t_send`.
    pub e2e_us: Option<u64>,
    /// (`e2e` − `ttft`) / (`output_tokens` − 1) in µs, when `output_tokens` > 1.
    pub tpot_us: Option<u64>,
    /// (`output_tokens` − 1) / (`e2e` − `ttft`) in tokens per second.
    pub decode_tps: Option<f64>,
    /// Tokens generated: `usage.completion_tokens` when reported, else the count of
    /// token-bearing payloads; in an event stream the larger of the two (reasoning reported
    /// apart added to usage): [`crate::output_tokens::output_tokens`], docs/metrics.md.
    pub output_tokens: u32,
    /// Whether `output_tokens` came from `usage` (`output_tokens_source` is `usage` or
    /// `usage_plus_reasoning`).
    pub tokens_from_usage: bool,
    /// Which count `output_tokens` is. Records from agents that predate it read as `usage`
    /// or `payloads` by `tokens_from_usage`.
    #[serde(default)]
    pub output_tokens_source: OutputTokensSource,
    /// Payloads whose `content` was a non-empty string.
    pub content_chunks: u32,
    /// Payloads whose reasoning field was a non-empty string.
    pub reasoning_chunks: u32,
    /// Payloads carrying a tool-call fragment.
    pub tool_call_chunks: u32,
    /// Payloads carrying any generated token (content, reasoning or tool-call fragment; one
    /// payload counts once): the fallback for `output_tokens`.
    pub token_payloads: u32,
    /// `usage.completion_tokens − token_payloads` when usage was reported in an event stream:
    /// how far chunk counting is from the provider's own token count (multi-token chunks make
    /// it positive, reasoning left out of usage negative). `None` for a body read whole (one
    /// payload by definition).
    pub usage_chunk_delta: Option<i64>,
    /// Usage as reported.
    pub usage: Usage,
    /// The last `finish_reason` seen, scrubbed and cut to 64 bytes
    /// ([`crate::provider_bounds::FINISH_REASON`]).
    pub finish_reason: Option<String>,
    /// Whether `data: [DONE]` arrived.
    pub saw_done: bool,
    /// Retry-After of a 429 (or 503), seconds.
    pub retry_after_s: Option<f64>,
    /// Provider error type or code, when the provider sent an error object.
    pub error_type: Option<String>,
    /// Provider error code (`error.code`), when sent.
    pub error_code: Option<String>,
    /// Provider or transport error message, scrubbed and cut to 256 bytes
    /// ([`crate::provider_bounds::ERROR_MESSAGE`]); never the prompt.
    pub error_message: Option<String>,
    /// Largest inter-token gap, µs.
    pub itl_max_us: Option<u64>,
    /// SSE comment lines received (keep-alives, "PROCESSING" notes).
    pub comment_lines: u32,
    /// Response body bytes received.
    pub response_bytes: u64,
    /// The `model` the provider answered with: the first non-empty one of the stream or body,
    /// scrubbed like error messages and cut to
    /// [`crate::answered_model::MAX_ANSWERED_BYTES`]; `None` when none was sent.
    #[serde(default)]
    pub answered_model: Option<String>,
    /// The first non-empty `system_fingerprint` of the stream or body, scrubbed and cut as
    /// `answered_model`.
    #[serde(default)]
    pub system_fingerprint: Option<String>,
    /// Provider values that were cut, scrubbed, clamped or dropped on their way into this
    /// record, by field name (`finish_reason`, `error_message`, `usage.prompt_tokens`,
    /// `retry_after_s`, …), each once: [`crate::provider_bounds`], docs/metrics.md
    /// "Provider input bounds". Empty when the provider's values were kept as sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut_fields: Vec<String>,
    /// Whether usage was asked for or comes unasked: `false` only for a Chat Completions
    /// stream sent without `stream_options.include_usage` (the provider's `stream_usage` is
    /// `never`, or `auto` after the provider refused the field: README "Request shaping"),
    /// whose `output_tokens` then usually count payloads. `true` in records of older agents
    /// (which always asked); `false` for attempts never sent (`dropped`, `cancelled`).
    #[serde(default = "asked")]
    pub usage_requested: bool,
    /// A generated prompt ([`crate::synth`]): the input tokens asked for (the scenario's
    /// tier); the provider's own count is `usage.prompt_tokens`. 0 for a prompt of the
    /// prompt set.
    #[serde(default)]
    pub input_tokens: u32,
    /// A warm-up request (the scenario's first `warmup` requests per provider,
    /// [`crate::plan::ScenarioSpec::is_warmup`]): recorded and stored, left out of every
    /// statistic (histograms, counts, error rates, goodput).
    #[serde(default)]
    pub warmup: bool,
    /// Time to second token: the second payload carrying a generated token, µs from
    /// `t_send` (docs/metrics.md "TTST"). `None` with fewer than two token payloads.
    #[serde(default)]
    pub ttst_us: Option<u64>,
    /// `rate` scenarios: the arrival rate of the record's step, per provider and agent,
    /// requests/s (a fixed step's rate, or the rate an SLO search chose); 0 otherwise.
    #[serde(default)]
    pub target_rps: f64,
    /// On the final attempt of a scenario with an SLO ([`crate::slo::Slo::met`]): whether
    /// the request met every per-request bound. `None` without an SLO, on other attempts,
    /// and for `cancelled` and `dropped` attempts.
    #[serde(default)]
    pub slo_met: Option<bool>,
    /// Phase hygiene: requests of this provider from earlier phases still in flight on this
    /// agent when the record's phase started (the drain allowance ended first); 0: the phase
    /// started with the provider idle as far as this agent's requests go (docs/metrics.md
    /// "Phase hygiene"). Always 0 in the first phase.
    #[serde(default)]
    pub phase_start_in_flight: u32,
}

/// Records that predate `usage_requested` asked for usage.
fn asked() -> bool {
    true
}

impl ProbeRecord {
    /// The outcome, `protocol_error` when none was set (a record is never left unclassified).
    pub fn outcome(&self) -> Outcome {
        self.outcome.unwrap_or(Outcome::ProtocolError)
    }

    /// Whether this record finishes a request that progress counts: the final attempt of a
    /// first turn (a `rounds` slot, a `rate` arrival or a `sweep` request; retries and later
    /// turns of a conversation do not count again).
    pub fn ends_planned_slot(&self) -> bool {
        self.final_attempt && self.turn <= 1
    }
}

/// Truncates `s` to at most `max_bytes` bytes on a char boundary.
pub fn truncate_message(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes {
        return s.to_string();
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_names_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.as_str()));
        }
        assert_eq!(Outcome::parse("fine"), None);
    }

    #[test]
    fn http_status_classes() {
        assert_eq!(Outcome::from_http_status(429), Outcome::Throttled);
        assert_eq!(Outcome::from_http_status(404), Outcome::Http4xx);
        assert_eq!(Outcome::from_http_status(502), Outcome::Http5xx);
        assert_eq!(Outcome::from_http_status(599), Outcome::Http5xx);
        assert_eq!(Outcome::from_http_status(799), Outcome::ProtocolError);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_message("héllo", 2), "h…");
        assert_eq!(truncate_message("abc", 10), "abc");
    }
}
