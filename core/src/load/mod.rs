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
            LoadModel::Sweep(s) => (s.concurrency.len() as u64)
                .saturating_mul(s.step_ms)
                .saturating_mul(1000),
            LoadModel::Rate(r) => r.duration_ms.saturating_mul(1000),
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

/// One step of a sweep as measured, for [`find_knee`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepPoint {
    /// Target concurrency of the step.
    pub concurrency: u32,
    /// Logical requests of the step that ended (`cancelled` and `dropped` left out).
    pub requests: u64,
    /// Those that failed.
    pub failed: u64,
    /// The knee metric's percentile, µs (`None`: no successful request).
    pub latency_us: Option<u64>,
    /// The 95 % confidence interval of that percentile, µs (lower, upper); `None` when the
    /// step's samples are too few to bound it (the coordinator's sample-size policy).
    pub latency_ci_us: Option<(u64, u64)>,
}

impl StepPoint {
    /// Failed requests / requests, % (0 without requests).
    pub fn error_pct(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.failed as f64 * 100.0 / self.requests as f64
        }
    }
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

/// The step that stopped [`find_knee`] before a verdict: too few requests to judge it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InsufficientStep {
    /// Index of the step (0-based).
    pub step: usize,
    /// Its target concurrency.
    pub concurrency: u32,
    /// Its ended requests.
    pub requests: u64,
    /// What was missing, in words (`"12 requests < 30 (knee_min_requests)"`, `"no interval
    /// of E2E P50 (too few ok requests)"`).
    pub reason: String,
}

/// Elasticity of latency against concurrency from `(c0, l0)` to `(c1, l1)`:
/// `(l1 / l0 − 1) / (c1 / c0 − 1)`; `None` when `l0` is 0 or concurrency did not grow.
pub fn elasticity(c0: u32, l0: f64, c1: u32, l1: f64) -> Option<f64> {
    let dc = f64::from(c1) / f64::from(c0.max(1)) - 1.0;
    (l0 > 0.0 && dc > 0.0).then(|| (l1 / l0 - 1.0) / dc)
}

/// The knee of a sweep: `Ok(Some(knee))`, `Ok(None)` (every step judged, none steep: the
/// provider kept up over the whole sweep), or `Err` naming the first step that could not be
/// judged before any knee was found. Steps are judged in order; step `k`:
///
/// 1. needs at least `rule.min_requests` ended requests (else `Err`);
/// 2. (`k > 0`) is the knee by **errors** when its error rate reaches `rule.error_pct`,
///    exceeds the first step's by `rule.error_pct` points, and is *significantly* above it
///    (its 95 % Wilson interval lies above the first step's, [`crate::proportion`]);
/// 3. (`k > 0`) needs the interval of the knee percentile at steps `k − 1` and `k` (else
///    `Err`), and is the knee by **latency** when the elasticity of the point estimates
///    ([`elasticity`]) reaches `rule.elasticity` *and* step `k`'s interval lies entirely
///    above step `k − 1`'s.
pub fn find_knee(steps: &[StepPoint], rule: &KneeRule) -> Result<Option<Knee>, InsufficientStep> {
    let Some(first) = steps.first() else {
        return Ok(None);
    };
    let what = format!("{} P{}", rule.metric, rule.percentile);
    for (k, s) in steps.iter().enumerate() {
        let insufficient = |reason: String| InsufficientStep {
            step: k,
            concurrency: s.concurrency,
            requests: s.requests,
            reason,
        };
        if s.requests < u64::from(rule.min_requests) {
            return Err(insufficient(format!(
                "{} requests < {} (knee_min_requests)",
                s.requests, rule.min_requests
            )));
        }
        let Some(prev) = k.checked_sub(1).map(|j| steps[j]) else {
            continue;
        };
        let errors_grew = s.error_pct() >= rule.error_pct
            && s.error_pct() - first.error_pct() >= rule.error_pct
            && crate::proportion::significantly_above(
                s.failed,
                s.requests,
                first.failed,
                first.requests,
            );
        let e = match (prev.latency_us, s.latency_us) {
            (Some(l0), Some(l1)) => {
                elasticity(prev.concurrency, l0 as f64, s.concurrency, l1 as f64)
            }
            _ => None,
        };
        if errors_grew {
            return Ok(Some(Knee {
                step: k,
                concurrency: s.concurrency,
                elasticity: e,
                error_pct: s.error_pct(),
                reason: "errors".into(),
            }));
        }
        let (Some((_, prev_upper)), Some((lower, _))) = (prev.latency_ci_us, s.latency_ci_us)
        else {
            let at = if prev.latency_ci_us.is_none() {
                &prev
            } else {
                s
            };
            let mut e = insufficient(format!(
                "no 95 % interval of {what} at c={} (too few ok requests)",
                at.concurrency
            ));
            if prev.latency_ci_us.is_none() {
                e.step = k - 1;
                e.concurrency = prev.concurrency;
                e.requests = prev.requests;
            }
            return Err(e);
        };
        if e.is_some_and(|e| e >= rule.elasticity) && lower > prev_upper {
            return Ok(Some(Knee {
                step: k,
                concurrency: s.concurrency,
                elasticity: e,
                error_pct: s.error_pct(),
                reason: "latency".into(),
            }));
        }
    }
    Ok(None)
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
    /// A Poisson process of rate `rps`: a count drawn from Poisson(`rps × duration`), then
    /// that many instants uniform over the phase, in increasing order (the same process as
    /// exponential gaps of mean `1 / rps`), from a generator seeded by the campaign seed and
    /// the scenario: the same for every provider and in every region.
    Poisson,
}

impl RateSpec {
    /// Intended send offsets of the scenario's arrivals, µs from the phase start, increasing,
    /// all below `duration_ms`: one sequence for the scenario (`seed` is mixed with the
    /// scenario index only), which every provider and every agent sends at, so every provider
    /// of the comparison gets the same offered load. Arrival `i` of a provider is its
    /// `i`-th offset (the `slot` of its record and its spool journal key). Its length is
    /// [`RateSpec::arrival_count`].
    pub fn arrivals_us(&self, seed: u64, scenario: usize) -> Vec<u64> {
        let n = self.arrival_count(seed, scenario);
        let span_us = self.span_us_f64();
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        match self.arrivals {
            Arrivals::Constant => {
                let gap_us = 1e6 / self.rps;
                out.extend((0..n).map(|k| (k as f64 * gap_us) as u64));
            }
            Arrivals::Poisson => {
                // After the count (drawn first by `poisson_count`), the instants: `n` uniform
                // points of the phase in increasing order, each the smallest of the points
                // left (1 − (1 − x) × U^(1/m) is the minimum of m uniforms above x).
                let mut rng = self.poisson_rng(seed, scenario);
                let _count = Self::poisson_count(&mut rng, self.rps * span_us / 1e6);
                let last_us = (span_us as u64).saturating_sub(1);
                let mut x = 0.0f64;
                for left in (1..=n).rev() {
                    let u = 1.0 - rng.random::<f64>(); // (0, 1]
                    x = 1.0 - (1.0 - x) * u.powf(1.0 / left as f64);
                    out.push(((x * span_us) as u64).min(last_us));
                }
            }
        }
        out
    }

    /// How many arrivals [`RateSpec::arrivals_us`] holds, computed without generating them
    /// (O(1), so that validation, estimates and progress stay fast at the largest plans):
    /// constant spacing has `⌈duration / gap⌉` (the arrivals at `k × gap` below the
    /// duration); a Poisson process draws its count from Poisson(`rps × duration`) before its
    /// instants. 0 for a rate that is not a positive finite number.
    pub fn arrival_count(&self, seed: u64, scenario: usize) -> u64 {
        if !(self.rps.is_finite() && self.rps > 0.0) {
            return 0;
        }
        let span_us = self.span_us_f64();
        match self.arrivals {
            Arrivals::Constant => {
                // The smallest k with k × gap ≥ span, as the float products the instants are
                // computed with (the quotient can be one off either way).
                let gap_us = 1e6 / self.rps;
                let below = |k: u64| (k as f64 * gap_us) < span_us;
                let mut k = (span_us / gap_us).ceil() as u64;
                while k > 0 && !below(k - 1) {
                    k -= 1;
                }
                while below(k) {
                    k += 1;
                }
                k
            }
            Arrivals::Poisson => Self::poisson_count(
                &mut self.poisson_rng(seed, scenario),
                self.rps * span_us / 1e6,
            ),
        }
    }

    fn span_us_f64(&self) -> f64 {
        self.duration_ms as f64 * 1000.0
    }

    /// The generator of the scenario's Poisson arrivals: its first draw is the count.
    fn poisson_rng(&self, seed: u64, scenario: usize) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(seed ^ (scenario as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F))
    }

    /// A Poisson(`mean`) count from `rng` (0 for a mean that is not a positive finite number).
    fn poisson_count(rng: &mut ChaCha8Rng, mean: f64) -> u64 {
        rand_distr::Poisson::new(mean).map_or(0, |d| rng.sample(d) as u64)
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

    /// A step of `n` requests, `failed` of them failed, the knee percentile at `l` µs with a
    /// ±2 % interval.
    fn point(c: u32, n: u64, failed: u64, l: u64) -> StepPoint {
        StepPoint {
            concurrency: c,
            requests: n,
            failed,
            latency_us: Some(l),
            latency_ci_us: Some((l * 98 / 100, l * 102 / 100)),
        }
    }

    #[test]
    fn knee_is_the_first_steep_and_significant_step() {
        let rule = KneeRule::default();
        // Flat to 8, then a queue: 16 → ×1.6 latency for ×2 concurrency (elasticity 0.54).
        let steps = [
            point(4, 100, 0, 100_000),
            point(8, 100, 0, 104_000),
            point(16, 100, 0, 160_000),
            point(32, 100, 0, 320_000),
        ];
        let knee = find_knee(&steps, &rule).unwrap().unwrap();
        assert_eq!(
            (knee.step, knee.concurrency, knee.reason.as_str()),
            (2, 16, "latency")
        );
        assert!((knee.elasticity.unwrap() - 0.5385).abs() < 1e-3);
        // A flat curve has none.
        let flat = [
            point(4, 100, 0, 100_000),
            point(8, 100, 0, 110_000),
            point(16, 100, 1, 120_000),
        ];
        assert_eq!(find_knee(&flat, &rule), Ok(None));
        // Steep point estimates whose intervals overlap are no knee: P50 100 → 160 ms, but
        // the second step's interval reaches down to 95 ms.
        let mut wide = steps;
        wide[2].latency_ci_us = Some((95_000, 200_000));
        assert_eq!(find_knee(&wide, &rule).unwrap().unwrap().step, 3);
    }

    #[test]
    fn an_error_knee_needs_a_significant_rise() {
        let rule = KneeRule::default();
        // 12 % of 200 vs 0 % of 200: far apart.
        let errs = [point(4, 200, 0, 100_000), point(8, 200, 24, 101_000)];
        let knee = find_knee(&errs, &rule).unwrap().unwrap();
        assert_eq!((knee.step, knee.reason.as_str()), (1, "errors"));
        assert_eq!(knee.error_pct, 12.0);
        // 15 % at every step: no capacity knee.
        let flaky = [
            point(4, 100, 15, 100_000),
            point(8, 100, 16, 101_000),
            point(16, 100, 14, 102_000),
        ];
        assert_eq!(find_knee(&flaky, &rule), Ok(None));
        // 15 % → 22 % of 100: over the thresholds on points, but the intervals overlap.
        let noisy = [point(4, 100, 15, 100_000), point(8, 100, 22, 101_000)];
        assert_eq!(find_knee(&noisy, &rule), Ok(None));
        // 15 % → 40 % of 400: significant.
        let worse = [point(4, 400, 60, 100_000), point(8, 400, 160, 101_000)];
        assert_eq!(find_knee(&worse, &rule).unwrap().map(|k| k.step), Some(1));
    }

    /// Load-independent failures (20 % of requests at every step, drawn at random) make an
    /// error knee in at most 1 % of sweeps of 30 to 120 requests per step (separated 95 %
    /// intervals: a test at about the 0.3 % level per step); the old rule (points only: ≥ 5 %
    /// and 5 points above the first step) called one in about half of them.
    #[test]
    fn random_load_independent_errors_make_no_knee() {
        let rule = KneeRule::default();
        let mut rng = ChaCha8Rng::seed_from_u64(16);
        let (mut knees, mut naive) = (0, 0);
        for _ in 0..1000 {
            let steps: Vec<StepPoint> = [2u32, 4, 8, 16]
                .iter()
                .map(|&c| {
                    let n = rng.random_range(30..=120u64);
                    let failed = (0..n).filter(|_| rng.random::<f64>() < 0.2).count() as u64;
                    point(c, n, failed, 100_000)
                })
                .collect();
            if find_knee(&steps, &rule).unwrap().is_some() {
                knees += 1;
            }
            let base = steps[0].error_pct();
            if steps[1..]
                .iter()
                .any(|s| s.error_pct() >= 5.0 && s.error_pct() - base >= 5.0)
            {
                naive += 1;
            }
        }
        assert!(knees <= 10, "{knees} error knees in 1000 sweeps");
        assert!(naive > 300, "the old rule would call {naive} knees of 1000");
    }

    #[test]
    fn too_few_requests_say_so_instead_of_a_knee() {
        let rule = KneeRule::default();
        // 2 and 13 requests per step (what a 3 s step of a slow provider gives): a latency
        // jump and an error rate of 50 % are not evidence.
        let few = [point(2, 13, 0, 100_000), point(4, 2, 1, 300_000)];
        let e = find_knee(&few, &rule).unwrap_err();
        assert_eq!((e.step, e.concurrency, e.requests), (0, 2, 13));
        assert_eq!(e.reason, "13 requests < 30 (knee_min_requests)");
        // Enough requests but no interval of the percentile (P99 of 40 samples).
        let mut no_ci = [point(2, 40, 0, 100_000), point(4, 40, 0, 300_000)];
        no_ci[1].latency_ci_us = None;
        let e = find_knee(&no_ci, &rule).unwrap_err();
        assert_eq!((e.step, e.concurrency), (1, 4));
        assert!(
            e.reason.contains("no 95 % interval of e2e P50"),
            "{}",
            e.reason
        );
        // A knee found before a short step stands.
        let late = [
            point(2, 40, 0, 100_000),
            point(4, 40, 0, 300_000),
            point(8, 3, 0, 900_000),
        ];
        assert_eq!(find_knee(&late, &rule).unwrap().unwrap().step, 1);
        // The rule's minimum is configurable.
        let lax = KneeRule {
            min_requests: 2,
            ..rule
        };
        assert_eq!(find_knee(&few, &lax).unwrap().map(|k| k.step), Some(1));
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

    /// The count is known without the instants (validation, estimates and progress of a
    /// 10-million-arrival plan used to generate them all, over and over) and is always the
    /// number of instants the agent sends at.
    #[test]
    fn the_arrival_count_is_the_length_of_the_sequence() {
        for (rps, duration_ms) in [
            (4.0, 1_000),
            (4.0, 1_100),
            (3.0, 1_000),
            (7.0, 999),
            (0.1, 86_400_000),
            (1e5, 1),
            (333.3, 12_345),
            (1e-3, 1),
        ] {
            for arrivals in [Arrivals::Constant, Arrivals::Poisson] {
                let r = RateSpec {
                    rps,
                    arrivals,
                    duration_ms,
                    max_queue_ms: DEFAULT_MAX_QUEUE_MS,
                };
                for (seed, scenario) in [(0, 0), (7, 1), (u64::MAX, 9)] {
                    let a = r.arrivals_us(seed, scenario);
                    assert_eq!(r.arrival_count(seed, scenario), a.len() as u64, "{r:?}");
                    assert!(a.windows(2).all(|w| w[0] <= w[1]), "{r:?}");
                    assert!(a.iter().all(|&t| t < duration_ms * 1000), "{r:?}");
                }
            }
        }
        // Constant spacing: ⌈duration / gap⌉ without generating (10 million here).
        let big = RateSpec {
            rps: 100_000.0,
            arrivals: Arrivals::Constant,
            duration_ms: 100_000,
            max_queue_ms: DEFAULT_MAX_QUEUE_MS,
        };
        assert_eq!(big.arrival_count(0, 0), 10_000_000);
        // Poisson at 10 million expected: within 6 σ (σ ≈ 3,162).
        let poisson = RateSpec {
            arrivals: Arrivals::Poisson,
            ..big
        };
        let n = poisson.arrival_count(3, 0);
        assert!(n.abs_diff(10_000_000) < 19_000, "{n}");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                RateSpec {
                    rps: bad,
                    ..poisson.clone()
                }
                .arrival_count(3, 0),
                0
            );
        }
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
