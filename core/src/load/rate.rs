//! The `rate` load model (open loop): one arrival sequence per scenario (constant or Poisson),
//! shared by every provider and agent, and the rotating send order at each arrival.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::search::SloSearch;

/// Open-loop arrivals: one step at `rps`, steps of increasing rate (`steps_rps`), or an SLO
/// search that picks each step's rate per provider (`search`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateSpec {
    /// Target arrivals per second, per provider and per agent: the only step's rate, or the
    /// first step's (`steps_rps[0]`, or `search.min_rps`).
    pub rps: f64,
    /// Constant spacing, a Poisson process, or gamma-distributed gaps.
    pub arrivals: Arrivals,
    /// How long arrivals are generated, ms: of each step when there are several.
    pub duration_ms: u64,
    /// An arrival still waiting for its provider's in-flight cap this long after its intended
    /// time is not sent (outcome `dropped`), ms.
    pub max_queue_ms: u64,
    /// A rate sweep: the rate of each step, increasing (from a list or a ramp); empty: one
    /// step at `rps`. Every provider steps at the same moments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_rps: Vec<f64>,
    /// An SLO search: each provider's next step's rate is chosen from its earlier steps'
    /// goodput ([`SloSearch::next_rps`]); the scenario has an SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SloSearch>,
}

/// Default [`RateSpec::max_queue_ms`]: 10 s.
pub const DEFAULT_MAX_QUEUE_MS: u64 = 10_000;

/// How arrivals are spaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
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
    /// Gaps drawn from a gamma distribution of shape `burstiness` and mean `1 / rps` (scale
    /// `1 / (rps × burstiness)`), as vLLM's `bench serve --burstiness`: 1 is a Poisson
    /// process, below 1 burstier, above 1 more regular. Seeded as `Poisson`.
    Gamma {
        /// The gamma shape, in [0.01, 100] (a campaign file's range: below 1 arrivals
        /// cluster, about `1 / burstiness` at once).
        burstiness: f64,
    },
}

impl RateSpec {
    /// How many steps the phase has: `search.steps`, `steps_rps.len()`, or 1.
    pub fn step_count(&self) -> u32 {
        match &self.search {
            Some(search) => search.steps,
            None => (self.steps_rps.len() as u32).max(1),
        }
    }

    /// The rate of step `k` when it is fixed by the plan (`rps`, or `steps_rps[k]`); `None`
    /// under an SLO search (each provider's rate is chosen while it runs) or past the steps.
    pub fn step_rps(&self, k: u32) -> Option<f64> {
        if self.search.is_some() {
            return None;
        }
        if self.steps_rps.is_empty() {
            return (k == 0).then_some(self.rps);
        }
        self.steps_rps.get(k as usize).copied()
    }

    /// Time from one step's start to the next's, µs: `duration_ms`, and under an SLO search
    /// twice that: each search step is followed by a quiet gap as long as the step, in which
    /// its last requests end before the verdict and the queue a missed step left drains (the
    /// search never offers more than twice a rate that was met, so a provider that kept up
    /// with half the rate clears such a step's backlog within one step's length) — the next
    /// step starts from an idle provider, as its verdict assumes.
    pub fn step_stride_us(&self) -> u64 {
        let step_us = self.duration_ms.saturating_mul(1000);
        if self.search.is_some() {
            step_us.saturating_mul(2)
        } else {
            step_us
        }
    }

    /// Start of step `k`, µs from the phase start: `k × step_stride_us`.
    pub fn step_start_us(&self, k: u32) -> u64 {
        u64::from(k).saturating_mul(self.step_stride_us())
    }

    /// Length of the whole phase, µs: `step_count × step_stride_us` (an SLO search's last
    /// step keeps its gap too, so its requests end before the next phase).
    pub fn span_us(&self) -> u64 {
        u64::from(self.step_count()).saturating_mul(self.step_stride_us())
    }

    /// Intended send offsets of the scenario's arrivals, µs from the phase start, increasing,
    /// all below `duration_ms`: one sequence for the scenario (`seed` is mixed with the
    /// scenario index only), which every provider and every agent sends at, so every provider
    /// of the comparison gets the same offered load. Arrival `i` of a provider is its
    /// `i`-th offset (the `slot` of its record and its spool journal key). Its length is
    /// [`RateSpec::arrival_count`]. The first step's at `rps`: [`RateSpec::arrivals_at`].
    pub fn arrivals_us(&self, seed: u64, scenario: usize) -> Vec<u64> {
        self.arrivals_at(seed, scenario, 0, self.rps)
    }

    /// Intended send offsets of step `step` at `rps`, µs from the **step's** start,
    /// increasing, all below `duration_ms`; the same for every agent and provider sent at
    /// that rate in that step (the generator is seeded by `seed`, the scenario, the step and
    /// the rate). Step 0 at `self.rps` is [`RateSpec::arrivals_us`].
    pub fn arrivals_at(&self, seed: u64, scenario: usize, step: u32, rps: f64) -> Vec<u64> {
        let n = self.count_at(seed, scenario, step, rps);
        let span_us = self.span_us_f64();
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        match self.arrivals {
            Arrivals::Constant => {
                let gap_us = 1e6 / rps;
                out.extend((0..n).map(|k| (k as f64 * gap_us) as u64));
            }
            Arrivals::Poisson => {
                // After the count (drawn first by `poisson_count`), the instants: `n` uniform
                // points of the phase in increasing order, each the smallest of the points
                // left (1 − (1 − x) × U^(1/m) is the minimum of m uniforms above x).
                let mut rng = Self::step_rng(seed, scenario, step, rps);
                let _count = Self::poisson_count(&mut rng, rps * span_us / 1e6);
                let last_us = (span_us as u64).saturating_sub(1);
                let mut x = 0.0f64;
                for left in (1..=n).rev() {
                    let u = 1.0 - rng.random::<f64>(); // (0, 1]
                    x = 1.0 - (1.0 - x) * u.powf(1.0 / left as f64);
                    out.push(((x * span_us) as u64).min(last_us));
                }
            }
            Arrivals::Gamma { burstiness } => {
                out.extend(Self::gamma_instants(
                    seed, scenario, step, rps, burstiness, span_us,
                ));
            }
        }
        out
    }

    /// How many arrivals [`RateSpec::arrivals_us`] holds, computed without generating them
    /// (O(1), so that validation, estimates and progress stay fast at the largest plans):
    /// constant spacing has `⌈duration / gap⌉` (the arrivals at `k × gap` below the
    /// duration); a Poisson process draws its count from Poisson(`rps × duration`) before its
    /// instants. Gamma gaps are generated and counted (O(count)). 0 for a rate that is not a
    /// positive finite number.
    pub fn arrival_count(&self, seed: u64, scenario: usize) -> u64 {
        self.count_at(seed, scenario, 0, self.rps)
    }

    /// Arrivals of the whole phase per provider and agent: the sum of every step's
    /// [`RateSpec::count_at`] at its rate, exactly; under an SLO search every step at
    /// `max_rps`, an upper bound (the search starts at `min_rps` and may stop early).
    pub fn planned_arrivals(&self, seed: u64, scenario: usize) -> u64 {
        (0..self.step_count())
            .map(|k| match &self.search {
                Some(search) => self.count_at(seed, scenario, k, search.max_rps),
                None => self
                    .step_rps(k)
                    .map_or(0, |rps| self.count_at(seed, scenario, k, rps)),
            })
            .fold(0, u64::saturating_add)
    }

    /// [`RateSpec::arrival_count`] of step `step` at `rps`.
    pub fn count_at(&self, seed: u64, scenario: usize, step: u32, rps: f64) -> u64 {
        if !(rps.is_finite() && rps > 0.0) {
            return 0;
        }
        let span_us = self.span_us_f64();
        match self.arrivals {
            Arrivals::Constant => {
                // The smallest k with k × gap ≥ span, as the float products the instants are
                // computed with (the quotient can be one off either way).
                let gap_us = 1e6 / rps;
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
                &mut Self::step_rng(seed, scenario, step, rps),
                rps * span_us / 1e6,
            ),
            Arrivals::Gamma { burstiness } => {
                Self::gamma_instants(seed, scenario, step, rps, burstiness, span_us).count() as u64
            }
        }
    }

    fn span_us_f64(&self) -> f64 {
        self.duration_ms as f64 * 1000.0
    }

    /// The generator of a step's random arrivals: its first draw is a Poisson count. Step 0
    /// is seeded by the campaign seed and the scenario only (the sequence of plans before
    /// rate steps existed); later steps also by the step and the rate's bits.
    fn step_rng(seed: u64, scenario: usize, step: u32, rps: f64) -> ChaCha8Rng {
        let base = seed ^ (scenario as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F);
        if step == 0 {
            return ChaCha8Rng::seed_from_u64(base);
        }
        ChaCha8Rng::seed_from_u64(
            base ^ u64::from(step).wrapping_mul(0xE703_7ED1_A0B4_28DB)
                ^ rps.to_bits().rotate_left(17),
        )
    }

    /// Gamma-gap instants below `span_us` (µs from the step start), lazily.
    fn gamma_instants(
        seed: u64,
        scenario: usize,
        step: u32,
        rps: f64,
        burstiness: f64,
        span_us: f64,
    ) -> impl Iterator<Item = u64> {
        let mut rng = Self::step_rng(seed, scenario, step, rps);
        let dist = rand_distr::Gamma::new(burstiness, 1e6 / (rps * burstiness)).ok();
        // The first arrival at a gap from the start too (a renewal process observed from 0).
        let mut t = 0.0f64;
        std::iter::from_fn(move || {
            t += dist.as_ref().map_or(f64::INFINITY, |d| rng.sample(d));
            (t < span_us).then_some(t as u64)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn poisson_50_per_s_for_20_s() -> RateSpec {
        RateSpec {
            rps: 50.0,
            arrivals: Arrivals::Poisson,
            duration_ms: 20_000,
            max_queue_ms: DEFAULT_MAX_QUEUE_MS,
            steps_rps: vec![],
            search: None,
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
                    steps_rps: vec![],
                    search: None,
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
            steps_rps: vec![],
            search: None,
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
}
