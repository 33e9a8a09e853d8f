//! The `sweep` load model (closed loop): concurrency steps, and the rule that says which step
//! is the knee (applied by [`super::knee::find_knee`]).

use serde::{Deserialize, Serialize};

use crate::metrics::Metric;

/// A closed-loop concurrency sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepSpec {
    /// Concurrency of each step, increasing (default 4, 8, 16, 32).
    pub concurrency: Vec<u32>,
    /// How long each step lasts, ms (every provider steps at the same moments).
    pub step_ms: u64,
    /// Per provider and step: stop sending once this many requests were sent (the step then
    /// idles until its time is over). `None`: send until the step's time is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_requests: Option<u32>,
    /// How the knee is found.
    pub knee: KneeRule,
}

/// Default sweep steps.
pub const DEFAULT_SWEEP_STEPS: [u32; 4] = [4, 8, 16, 32];

/// When a sweep step is the knee ([`find_knee`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KneeRule {
    /// Latency metric judged: `ttft` or `e2e`.
    pub metric: Metric,
    /// Its percentile, in (0, 100).
    pub percentile: f64,
    /// Step `k` is steep when `(L_k / L_{k−1} − 1) / (c_k / c_{k−1} − 1)` (latency growth per
    /// relative concurrency growth, i.e. its elasticity) reaches this. 0: latency flat; 1:
    /// latency grows as fast as concurrency (a saturated server queueing requests).
    pub elasticity: f64,
    /// Step `k > 0` is the knee also when its error rate (failed requests / requests, %)
    /// reaches this and exceeds the first step's by this much: errors that grow with
    /// concurrency (a provider failing as often at the lowest step has no capacity knee).
    pub error_pct: f64,
    /// Fewest ended requests a step needs before it is judged (default
    /// [`DEFAULT_KNEE_MIN_REQUESTS`]); a step with fewer makes the verdict "not enough
    /// requests" ([`InsufficientStep`]) instead of a knee or none.
    #[serde(default = "default_knee_min_requests")]
    pub min_requests: u32,
}

/// Default [`KneeRule::min_requests`]: 30 ended requests per step.
pub const DEFAULT_KNEE_MIN_REQUESTS: u32 = 30;

fn default_knee_min_requests() -> u32 {
    DEFAULT_KNEE_MIN_REQUESTS
}

impl Default for KneeRule {
    /// E2E P50, elasticity 0.5, 5% errors, 30 requests per step.
    fn default() -> Self {
        KneeRule {
            metric: Metric::E2e,
            percentile: 50.0,
            elasticity: 0.5,
            error_pct: 5.0,
            min_requests: DEFAULT_KNEE_MIN_REQUESTS,
        }
    }
}
