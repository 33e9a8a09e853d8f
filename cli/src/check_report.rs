//! What `latmesh check` found ([`CheckReport`], also the webhook payload): the rules that
//! fired per cell, the changes that were not significant, what was skipped.

use serde::{Deserialize, Serialize};

/// A rule that fired on one cell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fired {
    /// Rule name.
    pub rule: String,
    /// Rule kind (`increase_pct`, `absolute`, `above_prev_day_mean`, `error_pct_above`,
    /// `goodput_below`, `slo_rps_below`, `model_changed`, `fingerprint_changed`,
    /// `answers_changed`).
    pub kind: String,
    /// Region (or `ALL`).
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario (`*` for a silent-swap rule over every scenario; the quality set's name for
    /// `answers_changed`).
    pub scenario: String,
    /// Metric (latency rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Percentile (latency rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<f64>,
    /// The current value (ms, or % for error and goodput rules, requests/s for
    /// `slo_rps_below` — 0 when no rate met the SLO; for `above_prev_day_mean` the current
    /// run's).
    pub current: f64,
    /// The baseline value it was compared with (the baseline's percentile, the previous
    /// day's mean), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// The limit the current value crossed (same unit).
    pub limit: f64,
    /// The current value's 95 % interval (lower, upper), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_ci: Option<(f64, f64)>,
    /// The baseline's 95 % interval (for `above_prev_day_mean`: the mean of the earlier
    /// runs' bounds), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_ci: Option<(f64, f64)>,
    /// `ms`, `%`, `rps` (`slo_rps_below`), or `attempts` (the attempts answered under new
    /// names).
    pub unit: String,
    /// In words.
    pub message: String,
    /// When the change was seen, UTC µs (the silent-swap rules): the first answer under a new
    /// name (ClickHouse), the campaign's start (summary files), the current compat run's
    /// start (`answers_changed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_unix_us: Option<i64>,
    /// `time_unix_us` in words (`2026-12-02 03:40 UTC`; `campaign started …` for a summary
    /// file's span).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// What `latmesh check` found (also the webhook payload).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The current side (campaign id, or `summary FILE`).
    pub campaign: String,
    /// The baseline side, when there is one.
    pub baseline: Option<String>,
    /// Rules that fired, per cell.
    pub fired: Vec<Fired>,
    /// Cells whose point estimate crossed a rule's threshold without the change being
    /// significant (the intervals overlap): reported, not fired.
    #[serde(default)]
    pub inconclusive: Vec<Fired>,
    /// (rule, cell) pairs evaluated.
    pub checked: u64,
    /// Rules or cells that could not be evaluated, and why.
    pub skipped: Vec<String>,
}

impl CheckReport {
    /// The exit status: 1 when a rule fired, 2 when nothing could be checked at all (every
    /// rule skipped: a gate must not pass on no evidence), else 0.
    pub fn exit_code(&self) -> u8 {
        if !self.fired.is_empty() {
            1
        } else if self.checked == 0 {
            2
        } else {
            0
        }
    }
}
