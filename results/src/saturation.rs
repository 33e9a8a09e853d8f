//! Whether a **provider** kept up with an open-loop phase (see `latmesh_core::load`, `rate`):
//! the rule behind [`RateRow::provider_saturated`](crate::load_stats::RateRow).
//!
//! In an open loop the offered rate does not slow down when the provider does. A provider
//! that serves the arrivals as fast as they come has the same latency at the end of the phase
//! as at its start; one that cannot queues them, and its latency grows for as long as the
//! phase lasts (an unstable queue), or it starts refusing or timing out. The rule compares
//! the two halves of the phase's arrivals (by arrival index: the first `⌈n/2⌉` of the
//! schedule against the rest), with each request's latency from the **actual** send (TTFT for
//! a streaming scenario, E2E otherwise; a request that ended without an answer ranks above
//! every answer), so the agent's own lag (its caps, its scheduler: agent saturation) does not
//! count against the provider:
//!
//! the provider is saturated when each half has at least [`MIN_REQUESTS_PER_HALF`] requests,
//! the second half's median is at least [`GROWTH_RATIO`] × the first half's, and a one-sided
//! Mann–Whitney test says the second half is slower with p < [`MAX_P_VALUE`].
//!
//! A provider that is slow from the first arrival on but does not get slower is not
//! saturated by this rule (compare its latency with the rounds' instead); one that fails at
//! random, at the same rate in both halves, is not either.

use serde::{Deserialize, Serialize};

/// Fewer requests than this in either half: no verdict (`None`).
pub const MIN_REQUESTS_PER_HALF: usize = 8;
/// The second half's median latency must be at least this multiple of the first half's.
pub const GROWTH_RATIO: f64 = 1.5;
/// The one-sided Mann–Whitney p-value (normal approximation, ties corrected) must be below
/// this.
pub const MAX_P_VALUE: f64 = 0.01;

/// One request of an open-loop phase, as the rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrivalLatency {
    /// Index of the arrival in the scenario's schedule (the record's `slot`).
    pub arrival: u32,
    /// Latency from the actual send, µs; `None`: the request ended without an answer.
    pub latency_us: Option<u64>,
}

impl ArrivalLatency {
    /// The request of arrival `arrival` as the rule judges it: TTFT when `stream`, else E2E,
    /// µs; `None` unless it ended `ok` with that value.
    pub fn of(
        arrival: u32,
        ok: bool,
        stream: bool,
        ttft_us: Option<u64>,
        e2e_us: Option<u64>,
    ) -> ArrivalLatency {
        ArrivalLatency {
            arrival,
            latency_us: ok
                .then_some(if stream { ttft_us } else { e2e_us })
                .flatten(),
        }
    }
}

/// The rule's verdict for one row, with what it measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderSaturation {
    /// Requests in the first and second half.
    pub requests: (u64, u64),
    /// Median latency of each half, ms (`None`: more than half of it had no answer).
    pub median_ms: (Option<f64>, Option<f64>),
    /// One-sided Mann–Whitney p-value that the second half is slower.
    pub p_value: f64,
    /// The rule fired.
    pub saturated: bool,
}

impl ProviderSaturation {
    /// `TTFT P50 1350 ms → 4350 ms, 1st → 2nd half of the arrivals (12/12 requests,
    /// p = 1.83e-5)`.
    pub fn describe(&self, metric: &str) -> String {
        let s = |v: Option<f64>| v.map_or("no answer".to_string(), |ms| format!("{ms:.0} ms"));
        format!(
            "{} P50 {} → {}, 1st → 2nd half of the arrivals ({}/{} requests, p = {:.2e})",
            metric.to_uppercase(),
            s(self.median_ms.0),
            s(self.median_ms.1),
            self.requests.0,
            self.requests.1,
            self.p_value
        )
    }
}

/// The median of `v` sorted ascending with `None` (no answer) above every value; `None` when
/// the median is such a request or `v` is empty. Lower median for an even count.
fn median(v: &[Option<u64>]) -> Option<u64> {
    let mut answered: Vec<u64> = v.iter().flatten().copied().collect();
    answered.sort_unstable();
    let at = v.len().checked_sub(1)? / 2;
    answered.get(at).copied()
}

/// Standard normal upper tail `P(Z > z)` (Abramowitz–Stegun 7.1.26 erfc, |error| < 1.5e-7).
fn normal_upper_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

/// One-sided Mann–Whitney p-value that `b` is stochastically larger than `a` (normal
/// approximation with tie correction and continuity correction; `None` ranks highest).
pub fn mann_whitney_greater(a: &[Option<u64>], b: &[Option<u64>]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    // Rank the pooled values (None = +∞), average ranks for ties.
    let key = |v: &Option<u64>| v.map_or(u128::MAX, u128::from);
    let mut pooled: Vec<(u128, bool)> = a
        .iter()
        .map(|v| (key(v), false))
        .chain(b.iter().map(|v| (key(v), true)))
        .collect();
    pooled.sort_unstable_by_key(|p| p.0);
    let n = pooled.len() as f64;
    let (mut rank_sum_b, mut tie_term) = (0.0, 0.0);
    let mut i = 0;
    while i < pooled.len() {
        let mut j = i;
        while j < pooled.len() && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i) as f64;
        let avg_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum_b += avg_rank * pooled[i..j].iter().filter(|p| p.1).count() as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let u_b = rank_sum_b - n2 * (n2 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = (u_b - mean - 0.5) / var.sqrt();
    normal_upper_tail(z)
}

/// The rule (see the [module documentation](self)) over a row's requests; `arrivals` is the
/// number of arrivals in the schedule (the halves split at `⌈arrivals / 2⌉`). `None` when a
/// half has fewer than [`MIN_REQUESTS_PER_HALF`] requests.
pub fn provider_saturation(
    arrivals: u64,
    requests: &[ArrivalLatency],
) -> Option<ProviderSaturation> {
    let split = arrivals.div_ceil(2);
    let (first, second): (Vec<ArrivalLatency>, Vec<ArrivalLatency>) =
        requests.iter().partition(|r| u64::from(r.arrival) < split);
    let first: Vec<Option<u64>> = first.iter().map(|r| r.latency_us).collect();
    let second: Vec<Option<u64>> = second.iter().map(|r| r.latency_us).collect();
    if first.len() < MIN_REQUESTS_PER_HALF || second.len() < MIN_REQUESTS_PER_HALF {
        return None;
    }
    let (m1, m2) = (median(&first), median(&second));
    let grew = match (m1, m2) {
        (Some(a), Some(b)) => b as f64 >= GROWTH_RATIO * a as f64,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let p_value = mann_whitney_greater(&first, &second);
    let ms = |v: Option<u64>| v.map(|us| us as f64 / 1000.0);
    Some(ProviderSaturation {
        requests: (first.len() as u64, second.len() as u64),
        median_ms: (ms(m1), ms(m2)),
        p_value,
        saturated: grew && p_value < MAX_P_VALUE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reqs(latencies: &[Option<u64>]) -> Vec<ArrivalLatency> {
        latencies
            .iter()
            .enumerate()
            .map(|(i, &l)| ArrivalLatency {
                arrival: i as u32,
                latency_us: l,
            })
            .collect()
    }

    #[test]
    fn a_queue_that_grows_over_the_phase_is_saturation() {
        // 24 arrivals; TTFT grows by 250 ms per arrival (a server serving fewer than arrive).
        let growing: Vec<Option<u64>> = (0..24).map(|i| Some(100_000 + i * 250_000)).collect();
        let s = provider_saturation(24, &reqs(&growing)).unwrap();
        assert!(s.saturated, "{s:?}");
        assert_eq!(s.requests, (12, 12));
        assert_eq!(s.median_ms, (Some(1_350.0), Some(4_350.0)));
        assert!(s.p_value < 1e-4, "{}", s.p_value);
        assert_eq!(
            s.describe("ttft"),
            "TTFT P50 1350 ms → 4350 ms, 1st → 2nd half of the arrivals (12/12 requests, p = 1.83e-5)"
        );
        // Timeouts in the second half (no answer) count as the slowest.
        let timing_out: Vec<Option<u64>> = (0..24)
            .map(|i| (i < 12).then_some(300_000 + i * 1_000))
            .collect();
        let s = provider_saturation(24, &reqs(&timing_out)).unwrap();
        assert!(s.saturated && s.median_ms.1.is_none(), "{s:?}");
    }

    #[test]
    fn steady_slow_random_failures_and_small_samples_are_not() {
        // Slow but steady: 6.5 s every time, with noise that does not trend.
        let noise = [0u64, 300, 100, 500, 200, 400];
        let steady: Vec<Option<u64>> = (0..24)
            .map(|i| Some(6_500_000 + noise[i % 6] * 1_000))
            .collect();
        let s = provider_saturation(24, &reqs(&steady)).unwrap();
        assert!(!s.saturated, "{s:?}");
        // Random failures at the same rate in both halves.
        let flaky: Vec<Option<u64>> = (0..24)
            .map(|i| (i % 4 != 1).then_some(200_000 + noise[i % 6] * 100))
            .collect();
        assert!(!provider_saturation(24, &reqs(&flaky)).unwrap().saturated);
        // One slow request at the end moves the median of neither half.
        let mut spike = steady.clone();
        spike[23] = Some(60_000_000);
        assert!(!provider_saturation(24, &reqs(&spike)).unwrap().saturated);
        // 14 arrivals: 7 per half, no verdict.
        assert_eq!(provider_saturation(14, &reqs(&growing_n(14))), None);
    }

    fn growing_n(n: u64) -> Vec<Option<u64>> {
        (0..n).map(|i| Some(100_000 + i * 250_000)).collect()
    }

    #[test]
    fn mann_whitney_matches_the_textbook() {
        // Completely separated samples of 5 and 5: exact p = 1/252 ≈ 0.004; the normal
        // approximation with continuity correction gives ≈ 0.0061.
        let a: Vec<Option<u64>> = (1..=5).map(Some).collect();
        let b: Vec<Option<u64>> = (6..=10).map(Some).collect();
        let p = mann_whitney_greater(&a, &b);
        assert!((p - 0.0061).abs() < 5e-4, "{p}");
        // Identical samples: no evidence either way.
        assert!(mann_whitney_greater(&a, &a) > 0.5);
        assert!((normal_upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_upper_tail(1.96) - 0.025).abs() < 1e-4);
    }
}
