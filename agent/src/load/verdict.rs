//! The verdict of one SLO-search step for one provider, from this agent's own records of it
//! ([`step_verdict`], pure), and what is counted as evidence ([`StepEvidence`]).
//!
//! The rule is the one the reported answer is computed with from merged records
//! (`latmesh_results::slo_stats::goodput` then `step_verdict`): arrivals dropped →
//! `agent_limited`; fewer than `min_requests` judged → `insufficient`; a percentile bound
//! exceeded (with at least [`MIN_GOODPUT_REQUESTS`] judged) → `missed`; fewer than
//! [`MIN_GOODPUT_REQUESTS`] judged, or a percentile the step's sample does not support →
//! `insufficient`; else `met` when goodput ≥ `goodput_pct`. The agent does not depend on
//! `latmesh-results`, so the sample-size rule ([`min_samples`]) is repeated here; the two
//! must stay equal (a test pins the values of docs/metrics.md).

use latmesh_core::load::StepVerdict;
use latmesh_core::metrics::Metric;
use latmesh_core::slo::Slo;

/// Fewest judged requests for a goodput verdict (`latmesh_results::slo_stats::MIN_GOODPUT_REQUESTS`).
pub const MIN_GOODPUT_REQUESTS: u64 = 20;

/// What one provider's step showed this agent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepEvidence {
    /// Requests judged: final attempts of first turns (warm-up, `cancelled`, `dropped` left
    /// out), plus those still in flight that already broke a per-request bound.
    pub judged: u64,
    /// Of those, the ones that met every per-request bound (`slo_met`).
    pub met: u64,
    /// Arrivals `dropped` at the provider's caps (the agent could not send the load).
    pub dropped: u64,
    /// TTFT of the judged `ok` requests, µs (for percentile bounds).
    pub ttft_us: Vec<u64>,
    /// TPOT of the judged `ok` requests that have one, µs.
    pub tpot_us: Vec<u64>,
    /// E2E of the judged `ok` requests, µs.
    pub e2e_us: Vec<u64>,
}

impl StepEvidence {
    fn values(&self, metric: Metric) -> Option<&[u64]> {
        match metric {
            Metric::Ttft => Some(&self.ttft_us),
            Metric::Tpot => Some(&self.tpot_us),
            Metric::E2e => Some(&self.e2e_us),
            _ => None,
        }
    }
}

/// The verdict of a step with evidence `ev` against `slo`, needing `min_requests` judged
/// requests (see the [module](self)).
pub fn step_verdict(slo: &Slo, min_requests: u32, ev: &StepEvidence) -> StepVerdict {
    if ev.dropped > 0 {
        return StepVerdict::AgentLimited;
    }
    if ev.judged < u64::from(min_requests) {
        return StepVerdict::Insufficient;
    }
    let mut exceeded = false;
    let mut unjudged = ev.judged < MIN_GOODPUT_REQUESTS;
    for b in &slo.percentiles {
        match ev.values(b.metric) {
            Some(v) if supported(v.len() as u64, b.percentile) => {
                exceeded |= percentile_us(v, b.percentile) as f64 / 1000.0 > b.ms;
            }
            _ => unjudged = true,
        }
    }
    if exceeded && ev.judged >= MIN_GOODPUT_REQUESTS {
        return StepVerdict::Missed;
    }
    if unjudged {
        return StepVerdict::Insufficient;
    }
    let pct = ev.met.min(ev.judged) as f64 * 100.0 / ev.judged as f64;
    if pct >= slo.goodput_pct {
        StepVerdict::Met
    } else {
        StepVerdict::Missed
    }
}

/// The longest a request may stay in flight and still meet `slo`'s per-request bounds, µs
/// from its intended send: `e2e_ms`, or with both `ttft_ms` and `tpot_ms`
/// `ttft_ms + tpot_ms × (max_tokens − 1)` (the most a request within both can take when the
/// provider keeps to the cap), the smaller when both apply. `None`: no bound (in-flight
/// requests are then left out of a step's verdict).
pub fn in_flight_bound_us(slo: &Slo, max_tokens: u32) -> Option<u64> {
    let e2e = slo.e2e_ms;
    let by_tokens = match (slo.ttft_ms, slo.tpot_ms) {
        (Some(t), Some(p)) => Some(t + p * f64::from(max_tokens.saturating_sub(1))),
        _ => None,
    };
    let ms = match (e2e, by_tokens) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    Some((ms * 1000.0) as u64)
}

/// The `percentile` (0..100) of `values` by nearest rank, µs.
fn percentile_us(values: &[u64], percentile: f64) -> u64 {
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((percentile / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Whether `n` samples support `percentile`: `n ≥` [`min_samples`] (the results crate's
/// `stats::supported`).
fn supported(n: u64, percentile: f64) -> bool {
    percentile > 0.0 && percentile < 100.0 && n >= min_samples(percentile / 100.0)
}

/// The smallest sample with a distribution-free 95 % confidence interval of the
/// `q`-quantile: both `(1 − q)ⁿ ≤ 0.025` and `qⁿ ≤ 0.025` (the results crate's
/// `stats::min_samples`).
fn min_samples(q: f64) -> u64 {
    let half = 0.025f64;
    let need = |p: f64| {
        if p <= 0.0 {
            1
        } else {
            (half.ln() / p.ln()).ceil().max(1.0) as u64
        }
    };
    let mut n = need(q).max(need(1.0 - q));
    while n > 1 && q.powf((n - 1) as f64) <= half && (1.0 - q).powf((n - 1) as f64) <= half {
        n -= 1;
    }
    while q.powf(n as f64) > half || (1.0 - q).powf(n as f64) > half {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use latmesh_core::slo::PercentileBound;

    use super::*;

    fn slo(percentiles: Vec<PercentileBound>) -> Slo {
        Slo {
            ttft_ms: Some(500.0),
            tpot_ms: None,
            e2e_ms: None,
            percentiles,
            goodput_pct: 90.0,
        }
    }

    fn ev(judged: u64, met: u64) -> StepEvidence {
        StepEvidence {
            judged,
            met,
            ..StepEvidence::default()
        }
    }

    #[test]
    fn goodput_at_the_threshold_meets_below_it_misses() {
        let s = slo(vec![]);
        assert_eq!(step_verdict(&s, 20, &ev(40, 36)), StepVerdict::Met);
        assert_eq!(step_verdict(&s, 20, &ev(40, 35)), StepVerdict::Missed);
        assert_eq!(step_verdict(&s, 20, &ev(19, 19)), StepVerdict::Insufficient);
        // min_requests below the sample-size rule: still no verdict under 20.
        assert_eq!(step_verdict(&s, 5, &ev(10, 10)), StepVerdict::Insufficient);
        let dropped = StepEvidence {
            dropped: 1,
            ..ev(40, 40)
        };
        assert_eq!(step_verdict(&s, 20, &dropped), StepVerdict::AgentLimited);
    }

    #[test]
    fn percentile_bounds_are_judged_on_the_steps_own_values_when_supported() {
        let bound = PercentileBound {
            metric: Metric::Ttft,
            percentile: 90.0,
            ms: 400.0,
        };
        let s = slo(vec![bound]);
        // 40 values 10..400 ms: P90 360 ms ≤ 400 (P90 needs 36 samples).
        let mut e = ev(40, 40);
        e.ttft_us = (1..=40).map(|i| i * 10_000).collect();
        assert_eq!(step_verdict(&s, 20, &e), StepVerdict::Met);
        e.ttft_us = (1..=40).map(|i| i * 12_000).collect(); // P90 432 ms
        assert_eq!(step_verdict(&s, 20, &e), StepVerdict::Missed);
        e.ttft_us.truncate(30); // P90 not supported by 30 samples
        assert_eq!(step_verdict(&s, 20, &e), StepVerdict::Insufficient);
    }

    #[test]
    fn the_sample_size_rule_matches_the_documented_values() {
        assert_eq!(
            [0.5, 0.9, 0.95, 0.99].map(min_samples),
            [6, 36, 72, 368],
            "docs/metrics.md: P50 6, P90 36, P95 72, P99 368"
        );
    }

    #[test]
    fn in_flight_bound_is_the_tightest_per_request_bound() {
        let mut s = slo(vec![]);
        assert_eq!(in_flight_bound_us(&s, 64), None);
        s.tpot_ms = Some(10.0);
        assert_eq!(in_flight_bound_us(&s, 64), Some(1_130_000));
        s.e2e_ms = Some(800.0);
        assert_eq!(in_flight_bound_us(&s, 64), Some(800_000));
    }
}
