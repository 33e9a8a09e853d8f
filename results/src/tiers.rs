//! Generated-prompt tiers: per scenario group, region and provider, the latency by input
//! length (TTFT, TTST, prefill throughput, E2E per output token), and how each provider counts
//! the generated tokens (docs/metrics.md "Generated prompts", "Token counts").

use serde::{Deserialize, Serialize};

use crate::percentiles::Percentiles;
use crate::slo_stats::Goodput;

/// One tier (plan scenario `{group}.{tier}`) for one provider in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// The scenario's name in the campaign file.
    pub group: String,
    /// The plan scenario of this tier (`{group}.{tier}`).
    pub scenario: String,
    /// Input tokens asked for.
    pub input_tokens: u32,
    /// Latency samples (`ok`, warm-up left out).
    pub samples: u64,
    /// Failed requests / requests, %.
    pub error_pct: f64,
    /// Requests refused because the prompt is longer than the provider's context (HTTP 400
    /// or 413 whose error says so): the tier is past this provider's limit.
    pub context_refused: u64,
    /// TTFT percentiles, ms.
    pub ttft: Option<Percentiles>,
    /// TTST (time to second token) median, ms.
    pub ttst_p50_ms: Option<f64>,
    /// Prefill throughput median, tokens/s (prompt tokens ÷ TTFT).
    pub prefill_tps_p50: Option<f64>,
    /// E2E per output token median, ms.
    pub e2e_per_token_p50_ms: Option<f64>,
    /// Mean `usage.prompt_tokens` of `ok` requests (what the provider billed); `None` when it
    /// reported none.
    pub billed_prompt_tokens_mean: Option<f64>,
    /// Goodput (`None` without an SLO).
    pub goodput: Option<Goodput>,
}

/// How one provider counted the generated prompts, over every tier (every region merged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenCountRow {
    /// Provider.
    pub provider: String,
    /// Per tier: (input tokens asked for, mean billed prompt tokens, requests with usage).
    pub tiers: Vec<(u32, f64, u64)>,
    /// Billed tokens per generated word, from a least-squares line through the tiers (the
    /// mean ratio with one tier).
    pub tokens_per_word: Option<f64>,
    /// The line's intercept: tokens the provider adds per request (its chat template), with
    /// two tiers or more.
    pub overhead_tokens: Option<f64>,
    /// The provider counts differently from the generator's one-token-per-word (ratio off 1
    /// by more than [`COUNT_TOLERANCE`]): its tiers hold more or fewer tokens than their
    /// names say, so compare providers at the billed counts.
    pub counts_differently: bool,
    /// One sentence for tables and reports.
    pub note: String,
}

/// Tolerance of [`TokenCountRow::counts_differently`]: 10 %.
pub const COUNT_TOLERANCE: f64 = 0.10;
