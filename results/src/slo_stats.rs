//! SLO goodput per cell, open-loop rate steps, and the SLO search's answer per provider
//! (docs/metrics.md "SLOs and goodput", "Rate steps and the SLO search").
//!
//! Built from merged records the same way in memory (the coordinator's summary) and from
//! ClickHouse (`latmesh query slo`, reports): a step's or cell's goodput is counted from
//! records' `slo_met` (final attempts, warm-up, `cancelled` and `dropped` left out), its
//! latencies from the merged histograms of that step.

use latmesh_core::load::{SearchOutcome, StepVerdict};
use serde::{Deserialize, Serialize};

use crate::percentiles::Percentiles;

/// Goodput of one cell (region × provider × scenario) or one rate step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goodput {
    /// Requests judged: final attempts of first turns, warm-up, `cancelled` and `dropped`
    /// left out.
    pub requests: u64,
    /// Those that met every per-request bound (`slo_met`).
    pub met: u64,
    /// `met / requests`, %.
    pub pct: f64,
    /// Wilson 95 % interval of `pct`, % (low, high).
    pub ci_pct: (f64, f64),
    /// Requests that met the SLO per second of the phase (or step) and per agent,
    /// requests/s; `None` when the phase length or the agents are unknown.
    pub rps: Option<f64>,
    /// Percentile bounds that were exceeded (`"P95 TTFT 1830 ms > 1500 ms"`), empty when all
    /// held or none were given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceeded: Vec<String>,
    /// Whether the cell meets the SLO: goodput ≥ `goodput_pct` and no percentile bound
    /// exceeded; `None` with fewer requests than the sample-size rule needs
    /// ([`crate::stats`]).
    pub meets: Option<bool>,
}

/// One step of an open-loop (`rate`) scenario with several steps or an SLO search, for one
/// provider in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateStepRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Step index, 0-based.
    pub step: u32,
    /// The step's arrival rate per agent, requests/s (the records' `target_rps`; the lowest
    /// and highest when the agents of the row used different rates).
    pub target_rps: f64,
    /// Highest `target_rps` of the row's records (equal to `target_rps` unless agents
    /// differed).
    pub target_rps_max: f64,
    /// Arrivals sent (all agents).
    pub sent: u64,
    /// Arrivals dropped at the provider's in-flight cap.
    pub dropped: u64,
    /// Achieved sending rate per agent, requests/s.
    pub achieved_rps: Option<f64>,
    /// Failed requests / requests, %.
    pub error_pct: f64,
    /// TTFT percentiles of the step, ms.
    pub ttft: Option<Percentiles>,
    /// TPOT percentiles of the step, ms.
    pub tpot: Option<Percentiles>,
    /// E2E percentiles of the step, ms.
    pub e2e: Option<Percentiles>,
    /// Goodput of the step (`None` without an SLO).
    pub goodput: Option<Goodput>,
    /// The step's verdict against the SLO (`None` without an SLO).
    pub verdict: Option<StepVerdict>,
}

/// The answer of an SLO search for one provider in one region (or `ALL`): the highest rate
/// whose goodput stayed at or above the threshold, with the steps as evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// The SLO in one line ([`latmesh_core::slo::Slo::describe`]).
    pub slo: String,
    /// What the merged steps show (recomputed from the rows' verdicts in step order).
    pub outcome: SearchOutcome,
    /// One sentence: `"meets the SLO up to 6.0 rps (misses at 7.0 rps); resolved"`.
    pub text: String,
}
