//! Load models: how a scenario's requests are scheduled, and the campaign's time layout.
//!
//! Each scenario runs under one [`LoadModel`]:
//!
//! * **`rounds`** (patrol, the default): slow interleaved probing. Round `r` sends every
//!   (provider, rounds-scenario) once, in an order shared by every region, probe `i` at round
//!   start + `i × gap` (see [`crate::plan::Plan::round_order`]), never two probes of one provider
//!   closer than its `min_gap_ms`.
//! * **`sweep`** (closed loop): per provider, concurrency steps (default 4, 8, 16, 32). During
//!   step `k` (`step_ms` long, every provider at once) `concurrency[k]` workers each send a
//!   request, wait for its end, and send the next, until the step's time is over (or the
//!   provider's `step_requests` are sent). A request belongs to the step in which it was sent
//!   (records carry `step` and `concurrency`); one still running at the step's end finishes
//!   and counts there. The step where latency turns steep is the knee ([`find_knee`]).
//! * **`rate`** (open loop): per provider, arrivals at `rps` (constant or Poisson), each sent
//!   at its intended time whatever the earlier ones do, as wrk2 and k6's arrival-rate
//!   executors do. The scenario has **one** arrival sequence ([`RateSpec::arrivals_us`]): every
//!   provider and every agent (region) gets the same instants, so a comparison between
//!   providers or regions compares the same offered load; at each instant the agent sends to
//!   every provider, the order rotating by one provider per arrival
//!   ([`RateSpec::send_order`]) so that none is always first. Latency is kept from the actual send
//!   (`ttft`, `e2e`) and from the intended send (`ttft_intended` = `sched_lag` + `ttft`, free
//!   of coordinated omission). An arrival that cannot be sent within `max_queue_ms` of its
//!   intended time (the provider's in-flight cap is full) is not sent: outcome `dropped`
//!   (k6's "dropped iterations"), so a saturated agent says so instead of silently sending less.
//!
//! # Time layout ([`Plan::phases`](crate::plan::Plan::phases))
//! Phases run one after another from `start_at`, the same in every region: first the rounds
//! of every `rounds` scenario (`count × interval`), then each `sweep` and `rate` scenario in
//! the order of the campaign file (`steps × step_ms`, `duration_ms`), with a pause after each
//! ([`pause_after_us`](crate::plan::pause_after_us)): a drain allowance of three times a
//! fixed-rate phase (10 s to 60 s), of [`PHASE_DRAIN_US`](crate::plan::PHASE_DRAIN_US) (10 s)
//! after a sweep, [`PHASE_SETTLE_US`](crate::plan::PHASE_SETTLE_US) (2 s) after the rounds and
//! an SLO search,
//! so that the requests still in flight at a phase's end finish before the next one starts;
//! each agent waits for them up to the next phase's start, and a phase that starts with some
//! still in flight is flagged on that provider's cells (docs/metrics.md "Phase hygiene").
//!
//! Where each part is: `sweep.rs` ([`SweepSpec`], [`KneeRule`]), `knee.rs` (the knee of a
//! measured sweep, [`find_knee`]), `rate.rs` ([`RateSpec`]: arrivals and send order),
//! `limits.rs` (a provider's politeness caps and prices); the kinds and phases here.

use serde::{Deserialize, Serialize};

mod contradiction;
mod knee;
mod limits;
mod rate;
mod search;
mod sweep;

pub use contradiction::{Contradiction, SearchInstability, SearchStep, StepGoodput};
pub use knee::{InsufficientStep, Knee, StepPoint, elasticity, find_knee};
pub use limits::{Price, ProviderLimits};
pub use rate::{Arrivals, DEFAULT_MAX_QUEUE_MS, RateSpec};
pub use search::{
    DEFAULT_SEARCH_MIN_REQUESTS, DEFAULT_SEARCH_RESOLUTION_PCT, MAX_SEARCH_STEPS, SearchAssessment,
    SearchEnd, SearchOutcome, SloSearch, StepVerdict,
};
pub use sweep::{DEFAULT_KNEE_MIN_REQUESTS, DEFAULT_SWEEP_STEPS, KneeRule, SweepSpec};

/// Which load model produced a record (`load` in records and ClickHouse).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// Interleaved rounds (patrol).
    #[default]
    Rounds,
    /// Closed-loop concurrency sweep.
    Sweep,
    /// Open-loop arrival rate.
    Rate,
}

impl LoadKind {
    /// The snake_case name on the wire and in ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadKind::Rounds => "rounds",
            LoadKind::Sweep => "sweep",
            LoadKind::Rate => "rate",
        }
    }

    /// Parses [`LoadKind::as_str`]'s names; `""` is `rounds` (records before metrics_version 3).
    pub fn parse(s: &str) -> Option<LoadKind> {
        match s {
            "" | "rounds" => Some(LoadKind::Rounds),
            "sweep" => Some(LoadKind::Sweep),
            "rate" => Some(LoadKind::Rate),
            _ => None,
        }
    }
}

impl std::fmt::Display for LoadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a scenario's requests are scheduled (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadModel {
    /// Interleaved rounds (the plan's `rounds`).
    #[default]
    Rounds,
    /// Closed-loop concurrency steps.
    Sweep(SweepSpec),
    /// Open-loop arrivals.
    Rate(RateSpec),
}

impl LoadModel {
    /// Its [`LoadKind`].
    pub fn kind(&self) -> LoadKind {
        match self {
            LoadModel::Rounds => LoadKind::Rounds,
            LoadModel::Sweep(_) => LoadKind::Sweep,
            LoadModel::Rate(_) => LoadKind::Rate,
        }
    }

    /// Whether it is [`LoadModel::Rounds`] (serde: absent from the plan JSON then).
    pub fn is_rounds(&self) -> bool {
        matches!(self, LoadModel::Rounds)
    }

    /// How long its phase lasts, µs (0 for rounds: the rounds phase is the plan's).
    pub fn span_us(&self) -> u64 {
        match self {
            LoadModel::Rounds => 0,
            LoadModel::Sweep(s) => (s.concurrency.len() as u64)
                .saturating_mul(s.step_ms)
                .saturating_mul(1000),
            LoadModel::Rate(r) => r.span_us(),
        }
    }
}

/// One phase of the campaign's time layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    /// What runs.
    pub kind: PhaseKind,
    /// Start, µs after `start_at`.
    pub start_us: u64,
    /// Length, µs.
    pub span_us: u64,
}

/// What a [`Phase`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseKind {
    /// The rounds of every `rounds` scenario.
    Rounds,
    /// One `sweep` or `rate` scenario (index into the plan's scenarios).
    Scenario(usize),
}
