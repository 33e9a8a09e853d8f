//! The sample-size rule of every percentile latmesh shows or judges (docs/metrics.md
//! "Percentiles shown, and the sample-size rule"): a percentile is supported by `n` samples
//! when they are enough for a distribution-free 95 % confidence interval of it (order
//! statistics; `latmesh_results::stats` computes the intervals). Here, in core, so that the
//! agent (the SLO search's step verdicts) and the results (tables, reports, checks) apply
//! the one rule.

/// Confidence level of every interval: 95 %.
pub const CONFIDENCE: f64 = 0.95;

/// The smallest `n` for which `latmesh_results::stats::rank_interval` finds ranks for quantile `q`
/// at [`CONFIDENCE`]: both `(1 − q)ⁿ ≤ α/2` and `qⁿ ≤ α/2`.
pub fn min_samples(q: f64) -> u64 {
    let half = (1.0 - CONFIDENCE) / 2.0;
    let need = |p: f64| {
        if p <= 0.0 {
            1
        } else {
            (half.ln() / p.ln()).ceil().max(1.0) as u64
        }
    };
    let mut n = need(q).max(need(1.0 - q));
    // Guard the float rounding of the logarithms.
    while n > 1 && q.powf((n - 1) as f64) <= half && (1.0 - q).powf((n - 1) as f64) <= half {
        n -= 1;
    }
    while q.powf(n as f64) > half || (1.0 - q).powf(n as f64) > half {
        n += 1;
    }
    n
}

/// Whether `n` samples support the `percentile` (0 < p < 100, e.g. `95.0`): `n ≥`
/// [`min_samples`]`(percentile / 100)`, the smallest sample with a distribution-free 95 %
/// confidence interval of that percentile (P50 6, P90 36, P95 72, P99 368). The one
/// sample-size policy of every table, heatmap, report and summary (see the
/// [module docs](self)); `false` for a percentile outside (0, 100).
pub fn supported(n: u64, percentile: f64) -> bool {
    percentile > 0.0 && percentile < 100.0 && n >= min_samples(percentile / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_matches_the_documented_values() {
        assert_eq!(
            [0.5, 0.9, 0.95, 0.99].map(min_samples),
            [6, 36, 72, 368],
            "docs/metrics.md: P50 6, P90 36, P95 72, P99 368"
        );
        assert!(supported(36, 90.0) && !supported(35, 90.0));
        assert!(!supported(1000, 0.0) && !supported(1000, 100.0));
    }
}
