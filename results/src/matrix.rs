//! One cell of a campaign's region × provider matrix (per scenario): attempts, samples,
//! percentiles, error rates and what answered; the [`crate::summary`] holds them all.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::percentiles::Percentiles;

/// The region label of the row that merges every region.
pub const ALL_REGIONS: &str = "ALL";

/// One cell of the matrix: a region (or [`ALL_REGIONS`]), a provider, a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixCell {
    /// Region, or `ALL` for every region merged.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Attempts of any outcome.
    pub attempts: u64,
    /// Latency samples (`ok` attempts).
    pub samples: u64,
    /// TTFT percentiles (streaming scenarios), with `n`, support and intervals.
    pub ttft: Option<Percentiles>,
    /// TTFC percentiles (streaming scenarios).
    pub ttfc: Option<Percentiles>,
    /// E2E percentiles.
    pub e2e: Option<Percentiles>,
    /// TPOT median, ms.
    pub tpot_p50_ms: Option<f64>,
    /// ITL median, ms.
    pub itl_p50_ms: Option<f64>,
    /// Attempts whose outcome is not `ok`, % of attempts (attempts aborted by a campaign
    /// cancel, outcome `cancelled`, and open-loop arrivals never sent, outcome `dropped`, are
    /// left out of both).
    pub error_pct: f64,
    /// Open-loop arrivals not sent because the provider's in-flight cap stayed full (outcome
    /// `dropped`; counted in `attempts` and `outcomes`, not in error rates).
    #[serde(default)]
    pub dropped: u64,
    /// Logical requests (a first attempt and its retries count once; `cancelled` and
    /// `dropped` ones left out).
    pub requests: u64,
    /// Logical requests whose final attempt was not `ok`, % of requests (equals `error_pct`
    /// without a retry policy).
    pub request_error_pct: f64,
    /// `throttled` attempts, % of attempts.
    pub throttled_pct: f64,
    /// Mean output tokens of `ok` attempts.
    pub output_tokens_mean: Option<f64>,
    /// `ok` attempts whose output tokens came from the provider's `usage` (the rest were
    /// counted from chunks).
    pub tokens_from_usage: u64,
    /// `ok` attempts of event streams whose token payloads outnumbered usage's count and
    /// were the output token count (`output_tokens_source = payloads_over_usage`).
    #[serde(default)]
    pub tokens_over_usage: u64,
    /// Attempts (any outcome) sent again on a new connection because the pooled one they
    /// were sent on closed before any response byte (`conn_retried`): not errors; their
    /// TTFT and E2E include the failed try and the new connection's setup.
    #[serde(default)]
    pub conn_retried: u64,
    /// Mean of `usage.completion_tokens − token_payloads` over `ok` event-stream attempts that
    /// reported usage: how far counting chunks would be from the provider's token count.
    pub usage_chunk_delta_mean: Option<f64>,
    /// `ok` event-stream attempts whose usage disagreed with the chunk count (a body read
    /// whole has no chunks to count: never one).
    pub usage_chunk_mismatches: u64,
    /// Attempts (any outcome) by the `model` the provider answered with: the
    /// [`model_stats::MAX_NAMES_PER_CELL`] most frequent names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answered_models: BTreeMap<String, u64>,
    /// Attempts answered under model names `answered_models` leaves out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub answered_models_more: u64,
    /// Attempts (any outcome) by the `system_fingerprint` the provider answered with (the
    /// most frequent, as `answered_models`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_fingerprints: BTreeMap<String, u64>,
    /// Attempts answered under fingerprints `system_fingerprints` leaves out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub system_fingerprints_more: u64,
    /// The latest failed attempt of this cell, described (outcome, status, provider error).
    pub last_error: Option<String>,
    /// Attempts by outcome name.
    pub outcomes: BTreeMap<String, u64>,
    /// Goodput against the scenario's SLO ([`crate::slo_stats`]); absent without an SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<crate::slo_stats::Goodput>,
    /// Warm-up requests of the cell (recorded, left out of every figure above).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup: u64,
    /// The share of prompt tokens the provider served from its cache, and whether that is
    /// flagged ([`crate::cache_share`]); absent when the provider reported no cached count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<crate::cache_share::CachedShare>,
    /// Phase hygiene: the cell's phase started while its provider still had this many of
    /// the agents' requests of earlier phases in flight (the most on one agent; the drain
    /// allowance ended first, docs/metrics.md "Phase hygiene"); its figures may carry the
    /// earlier phase's load. 0 (absent): it started idle.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub phase_start_in_flight: u64,
}

/// Whether a count is 0 (fields left out of the JSON then).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}
