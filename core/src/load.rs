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
//! the order of the campaign file (`steps × step_ms`, `duration_ms`), with
//! [`PHASE_SETTLE_US`](crate::plan::PHASE_SETTLE_US) (2 s) between two phases so that the
//! requests still in flight at a phase's end mostly finish before the next one starts.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::metrics::Metric;

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
            LoadModel::Sweep(s) => s.concurrency.len() as u64 * s.step_ms * 1000,
            LoadModel::Rate(r) => r.duration_ms * 1000,
        }
    }
}

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
}

impl Default for KneeRule {
    /// E2E P50, elasticity 0.5, 5% errors.
    fn default() -> Self {
        KneeRule {
            metric: Metric::E2e,
            percentile: 50.0,
            elasticity: 0.5,
            error_pct: 5.0,
        }
    }
}

/// One step of a sweep as measured, for [`find_knee`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepPoint {
    /// Target concurrency of the step.
    pub concurrency: u32,
    /// The knee metric's percentile, µs (`None`: no successful request).
    pub latency_us: Option<u64>,
    /// Failed requests / requests of the step, % (0 when none ended).
    pub error_pct: f64,
}

/// Why a step is the knee.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// Index of the step (0-based).
    pub step: usize,
    /// Its target concurrency.
    pub concurrency: u32,
    /// Elasticity of latency against concurrency from the step before (`None` for step 0 or
    /// when latency is missing).
    pub elasticity: Option<f64>,
    /// Its error rate, %.
    pub error_pct: f64,
    /// `"latency"` (elasticity reached the rule's) or `"errors"` (error rate reached it).
    pub reason: String,
}

/// The first step whose latency growth per added concurrency reaches `rule.elasticity`
/// (measured against the step before), or whose error rate reaches `rule.error_pct` and
/// exceeds the first step's by as much; `None` when no step does (the provider kept up over
/// the whole sweep).
pub fn find_knee(steps: &[StepPoint], rule: &KneeRule) -> Option<Knee> {
    let base_error_pct = steps.first().map_or(0.0, |s| s.error_pct);
    for (k, s) in steps.iter().enumerate() {
        let elasticity = k.checked_sub(1).and_then(|j| {
            let prev = steps[j];
            let (l0, l1) = (prev.latency_us? as f64, s.latency_us? as f64);
            let dc = f64::from(s.concurrency) / f64::from(prev.concurrency.max(1)) - 1.0;
            (l0 > 0.0 && dc > 0.0).then(|| (l1 / l0 - 1.0) / dc)
        });
        let errors_grew = k > 0
            && s.error_pct >= rule.error_pct
            && s.error_pct - base_error_pct >= rule.error_pct;
        let reason = if errors_grew {
            Some("errors")
        } else if elasticity.is_some_and(|e| e >= rule.elasticity) {
            Some("latency")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Some(Knee {
                step: k,
                concurrency: s.concurrency,
                elasticity,
                error_pct: s.error_pct,
                reason: reason.to_string(),
            });
        }
    }
    None
}

/// Open-loop arrivals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSpec {
    /// Target arrivals per second, per provider and per agent.
    pub rps: f64,
    /// Constant spacing or a Poisson process.
    pub arrivals: Arrivals,
    /// How long arrivals are generated, ms.
    pub duration_ms: u64,
    /// An arrival still waiting for its provider's in-flight cap this long after its intended
    /// time is not sent (outcome `dropped`), ms.
    pub max_queue_ms: u64,
}

/// Default [`RateSpec::max_queue_ms`]: 10 s.
pub const DEFAULT_MAX_QUEUE_MS: u64 = 10_000;

/// How arrivals are spaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Exactly `1 / rps` apart, from the phase start.
    #[default]
    Constant,
    /// Exponential gaps with mean `1 / rps` (a Poisson process), from a generator seeded by
    /// the campaign seed and the scenario: the same for every provider and in every region.
    Poisson,
}

impl RateSpec {
    /// Intended send offsets of the scenario's arrivals, µs from the phase start, increasing,
    /// all below `duration_ms`: one sequence for the scenario (`seed` is mixed with the
    /// scenario index only), which every provider and every agent sends at, so every provider
    /// of the comparison gets the same offered load. Arrival `i` of a provider is its
    /// `i`-th offset (the `slot` of its record and its spool journal key).
    pub fn arrivals_us(&self, seed: u64, scenario: usize) -> Vec<u64> {
        let span_us = self.duration_ms as f64 * 1000.0;
        let gap_us = 1e6 / self.rps;
        let mut out = Vec::with_capacity((span_us / gap_us).ceil() as usize + 1);
        match self.arrivals {
            Arrivals::Constant => {
                let mut k = 0u64;
                loop {
                    let t = k as f64 * gap_us;
                    if t >= span_us {
                        break;
                    }
                    out.push(t as u64);
                    k += 1;
                }
            }
            Arrivals::Poisson => {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    seed ^ (scenario as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F),
                );
                let mut t = 0.0;
                loop {
                    let u: f64 = rng.random::<f64>();
                    t += -(1.0 - u).ln() * gap_us;
                    if t >= span_us {
                        break;
                    }
                    out.push(t as u64);
                }
            }
        }
        out
    }

    /// The providers (indexes `0..providers`) in the order the agent sends arrival `i` to
    /// them: every provider at the same instant, starting with provider `i mod providers` and
    /// rotating, so over the phase each provider is first, second, … equally often.
    pub fn send_order(i: usize, providers: usize) -> impl Iterator<Item = usize> {
        let n = providers.max(1);
        (0..providers).map(move |k| (i + k) % n)
    }
}

/// Per-provider politeness caps, enforced by each agent (the plan holds the campaign-wide
/// values; each agent keeps `1 / agents` of the rate caps, see
/// [`ProviderLimits::per_agent`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderLimits {
    /// Most requests in flight to the provider from one agent (not split: concurrency is
    /// local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Requests per minute over all agents sharing the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_min: Option<f64>,
    /// Tokens (prompt estimate + `max_tokens`) per minute over all agents sharing the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_min: Option<f64>,
    /// Minimum time between two requests to the provider from one agent (any load model), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gap_ms: Option<u64>,
}

impl ProviderLimits {
    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        *self == ProviderLimits::default()
    }

    /// One agent's share when `agents` agents share the key: rate caps divided by `agents`
    /// (at least 1); `max_in_flight` and `min_gap_ms` unchanged.
    pub fn per_agent(&self, agents: u32) -> ProviderLimits {
        let n = f64::from(agents.max(1));
        ProviderLimits {
            requests_per_min: self.requests_per_min.map(|r| r / n),
            tokens_per_min: self.tokens_per_min.map(|t| t / n),
            ..self.clone()
        }
    }
}

/// Prices of a provider, USD per million tokens (for the budget guard).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// USD per million prompt (input) tokens.
    pub input_usd_per_mtok: f64,
    /// USD per million completion (output) tokens, reasoning included.
    pub output_usd_per_mtok: f64,
}

impl Price {
    /// Cost in USD of `input` prompt and `output` completion tokens.
    pub fn cost_usd(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_usd_per_mtok + output as f64 * self.output_usd_per_mtok) / 1e6
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

#[cfg(test)]
mod tests {
    use super::*;

    fn point(c: u32, l: u64, e: f64) -> StepPoint {
        StepPoint {
            concurrency: c,
            latency_us: Some(l),
            error_pct: e,
        }
    }

    #[test]
    fn knee_is_the_first_steep_step() {
        let rule = KneeRule::default();
        // Flat to 8, then a queue: 16 → ×1.6 latency for ×2 concurrency (elasticity 0.6).
        let steps = [
            point(4, 100_000, 0.0),
            point(8, 104_000, 0.0),
            point(16, 160_000, 0.0),
            point(32, 320_000, 0.0),
        ];
        let knee = find_knee(&steps, &rule).unwrap();
        assert_eq!(
            (knee.step, knee.concurrency, knee.reason.as_str()),
            (2, 16, "latency")
        );
        assert!((knee.elasticity.unwrap() - 0.5385).abs() < 1e-3);
        // A flat curve has none; errors alone make a knee.
        let flat = [
            point(4, 100_000, 0.0),
            point(8, 110_000, 0.0),
            point(16, 120_000, 1.0),
        ];
        assert_eq!(find_knee(&flat, &rule), None);
        let errs = [point(4, 100_000, 0.0), point(8, 101_000, 12.0)];
        let knee = find_knee(&errs, &rule).unwrap();
        assert_eq!((knee.step, knee.reason.as_str()), (1, "errors"));
        // A provider failing 15% of the time at every step has no capacity knee.
        let flaky = [
            point(4, 100_000, 15.0),
            point(8, 101_000, 16.0),
            point(16, 102_000, 14.0),
        ];
        assert_eq!(find_knee(&flaky, &rule), None);
        let worse = [point(4, 100_000, 15.0), point(8, 101_000, 22.0)];
        assert_eq!(find_knee(&worse, &rule).map(|k| k.step), Some(1));
    }

    fn poisson_50_per_s_for_20_s() -> RateSpec {
        RateSpec {
            rps: 50.0,
            arrivals: Arrivals::Poisson,
            duration_ms: 20_000,
            max_queue_ms: DEFAULT_MAX_QUEUE_MS,
        }
    }

    #[test]
    fn arrivals_are_deterministic_and_at_the_rate() {
        let r = poisson_50_per_s_for_20_s();
        let a = r.arrivals_us(7, 1);
        assert_eq!(a, r.arrivals_us(7, 1));
        assert_ne!(a, r.arrivals_us(7, 2));
        assert_ne!(a, r.arrivals_us(8, 1));
        // 1,000 expected; a Poisson count has σ ≈ 32.
        assert!((850..1150).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]) && *a.last().unwrap() < 20_000_000);
        let c = RateSpec {
            arrivals: Arrivals::Constant,
            rps: 4.0,
            duration_ms: 1_000,
            ..r
        };
        assert_eq!(c.arrivals_us(7, 0), vec![0, 250_000, 500_000, 750_000]);
        // 1.1 s at 4/s: 0, 0.25, …, 1.0 s.
        let longer = RateSpec {
            duration_ms: 1_100,
            ..c
        };
        assert_eq!(longer.arrivals_us(7, 0).len(), 5);
    }

    #[test]
    fn every_provider_gets_the_same_arrivals_in_rotating_order() {
        // The demo's open loop: 4/s Poisson for 6 s, nine providers. One sequence for the
        // scenario: the offered load per provider is the same (it was 2.3 vs 5.7 rps when
        // each provider had its own process).
        let r = RateSpec {
            rps: 4.0,
            duration_ms: 6_000,
            ..poisson_50_per_s_for_20_s()
        };
        let a = r.arrivals_us(42, 3);
        assert!(!a.is_empty() && a.iter().all(|&t| t < 6_000_000));
        assert_eq!(a, r.arrivals_us(42, 3), "not the same for every agent");
        let orders: Vec<Vec<usize>> = (0..4)
            .map(|i| RateSpec::send_order(i, 3).collect())
            .collect();
        assert_eq!(
            orders,
            [vec![0, 1, 2], vec![1, 2, 0], vec![2, 0, 1], vec![0, 1, 2]]
        );
        assert_eq!(RateSpec::send_order(5, 0).count(), 0);
    }

    #[test]
    fn limits_split_rates_not_concurrency() {
        let l = ProviderLimits {
            max_in_flight: Some(8),
            requests_per_min: Some(600.0),
            tokens_per_min: Some(90_000.0),
            min_gap_ms: Some(50),
        };
        let a = l.per_agent(3);
        assert_eq!(a.max_in_flight, Some(8));
        assert_eq!(a.requests_per_min, Some(200.0));
        assert_eq!(a.tokens_per_min, Some(30_000.0));
        assert!(ProviderLimits::default().is_empty() && !l.is_empty());
        assert!(
            (Price {
                input_usd_per_mtok: 0.27,
                output_usd_per_mtok: 1.1
            }
            .cost_usd(1_000_000, 500_000)
                - 0.82)
                .abs()
                < 1e-9
        );
    }
}
