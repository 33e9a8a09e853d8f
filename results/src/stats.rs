//! Distribution-free confidence intervals of percentiles from HDR histograms, and the
//! pairwise comparisons built on them.
//!
//! # Order-statistic confidence intervals
//!
//! For `n` independent samples with order statistics `x(1) ≤ … ≤ x(n)` and the quantile `q`
//! (0.5 for P50), the number `B` of samples at or below the true quantile `ξq` is
//! Binomial(n, q), so for ranks `j < k`
//!
//! ```text
//! P( x(j) ≤ ξq ≤ x(k) ) ≥ P( j ≤ B ≤ k − 1 ) = Σ_{i=j}^{k−1} C(n, i) qⁱ (1 − q)ⁿ⁻ⁱ
//! ```
//!
//! whatever the distribution (Conover, *Practical Nonparametric Statistics*, 3rd ed. 1999,
//! §3.2; Hahn & Meeker, *Statistical Intervals*, 1991, §5.2). [`rank_interval`] picks
//! equal tails: `j` is the largest rank with `P(B ≤ j − 1) ≤ α/2` and `k` the smallest with
//! `P(B ≥ k) ≤ α/2` (α = 1 − [`CONFIDENCE`]), so the coverage is at least 95 %:
//!
//! * **exact binomial** for `n ≤` [`EXACT_MAX_N`] (the pmf summed in log space, so no term
//!   underflows where it matters), and the coverage reported is the exact
//!   `P(j ≤ B ≤ k − 1)`;
//! * **normal approximation** with continuity correction above it:
//!   `j = ⌊nq + ½ − z·σ⌋`, `k = ⌈nq + ½ + z·σ⌉`, `σ = √(nq(1 − q))`, `z = 1.96` (the same
//!   ranks as the exact rule up to one rank at such `n`), coverage from the normal CDF.
//!
//! When no such ranks exist within `1..=n` (`(1 − q)ⁿ > α/2` or `qⁿ > α/2`) the sample is too
//! small to bound that percentile on both sides: P50 needs `n ≥ 6`, P90 `n ≥ 36`, P95
//! `n ≥ 72`, P99 `n ≥ 368` ([`min_samples`]), and the interval is reported as "not enough
//! samples".
//!
//! # The sample-size policy
//!
//! That same bound is the one rule for showing a percentile anywhere (matrices, heatmaps,
//! reports, the JSON summary): a percentile of `n` samples is **supported** when
//! `n ≥ min_samples(q)` ([`supported`]). Below it the value is still computed and shown, but
//! marked: it is not yet a percentile one can decide with (with 12 samples, "P99" is the
//! maximum).
//!
//! The values at ranks `j` and `k` come from the merged histogram ([`value_at_rank`]): the
//! lower bound is the **lowest** value equivalent to the bucket holding `x(j)` and the upper
//! bound the **highest** value equivalent to the bucket of `x(k)`, so the HDR quantization
//! (≤ 0.1 % at 3 significant digits) can only widen the interval. The point estimate is
//! HdrHistogram's `value_at_quantile` (what the matrix shows).
//!
//! The samples must be independent draws: true of one value per request (TTFT, TTFC, E2E,
//! TPOT); not of ITL, whose many gaps per request are correlated, so ITL is not analysed.
//!
//! # Comparisons
//!
//! [`compare`]: "A faster than B" at a percentile only when A's interval lies entirely below
//! B's (A's upper bound < B's lower bound); overlapping intervals are "no clear difference";
//! a missing interval on either side is "not enough samples". Separated 95 % intervals are a
//! conservative test (they imply a difference at well below the 5 % level); overlapping ones
//! do not prove equality.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Confidence level of every interval: 95 %.
pub use latmesh_core::sample_size::CONFIDENCE;

/// Largest `n` for which ranks come from the exact binomial distribution; above it, from the
/// normal approximation.
pub const EXACT_MAX_N: u64 = 10_000;

/// The standard normal quantile at 0.975.
const Z_975: f64 = 1.959_963_984_540_054;

/// The percentiles analysed: P50, P95, P99.
pub const PERCENTILES: [f64; 3] = [50.0, 95.0, 99.0];

/// How an interval's ranks were found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CiMethod {
    /// Exact binomial probabilities (`n ≤` [`EXACT_MAX_N`]).
    ExactBinomial,
    /// Normal approximation with continuity correction (`n >` [`EXACT_MAX_N`]).
    NormalApprox,
}

/// Ranks (1-based) of the order statistics bounding a quantile's confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankInterval {
    /// Rank `j` of the lower bound.
    pub lower: u64,
    /// Rank `k` of the upper bound.
    pub upper: u64,
    /// `P(j ≤ B ≤ k − 1)` for B ~ Binomial(n, q): the coverage (exact, or its normal
    /// approximation).
    pub coverage: f64,
    /// How the ranks were found.
    pub method: CiMethod,
}

pub use latmesh_core::sample_size::{min_samples, supported};

/// The ranks `j < k` of a distribution-free two-sided confidence interval at [`CONFIDENCE`]
/// for the `q`-quantile (0 < q < 1) of `n` samples (see the [module docs](self)); `None` when
/// `n` is too small ([`min_samples`]).
pub fn rank_interval(n: u64, q: f64) -> Option<RankInterval> {
    if n == 0 || !(q > 0.0 && q < 1.0) || n < min_samples(q) {
        return None;
    }
    if n <= EXACT_MAX_N {
        exact_rank_interval(n, q)
    } else {
        normal_rank_interval(n, q)
    }
}

/// [`rank_interval`] from the exact binomial distribution whatever `n` (O(n)): the pmf in log
/// space, each tail summed from its own end. `None` when no ranks exist.
pub fn exact_rank_interval(n: u64, q: f64) -> Option<RankInterval> {
    if n == 0 || !(q > 0.0 && q < 1.0) {
        return None;
    }
    let half = (1.0 - CONFIDENCE) / 2.0;
    let len = n as usize + 1;
    let (lq, lp) = (q.ln(), (1.0 - q).ln());
    let mut log_pmf = Vec::with_capacity(len);
    let mut log_c = 0.0f64; // ln C(n, i)
    for i in 0..len {
        if i > 0 {
            log_c += ((n - i as u64 + 1) as f64).ln() - (i as f64).ln();
        }
        log_pmf.push(log_c + i as f64 * lq + (n - i as u64) as f64 * lp);
    }
    let pmf: Vec<f64> = log_pmf.iter().map(|l| l.exp()).collect();
    // lower: largest j ≥ 1 with P(B ≤ j − 1) ≤ half.
    let mut cdf = 0.0;
    let mut below = None; // (j, P(B ≤ j − 1))
    for (m, p) in pmf.iter().enumerate() {
        cdf += p;
        if cdf <= half {
            below = Some((m as u64 + 1, cdf));
        } else {
            break;
        }
    }
    // upper: smallest k ≤ n with P(B ≥ k) ≤ half.
    let mut tail = 0.0;
    let mut above = None; // (k, P(B ≥ k))
    for k in (0..len).rev() {
        tail += pmf[k];
        if tail <= half {
            above = Some((k as u64, tail));
        } else {
            break;
        }
    }
    let ((j, lo_tail), (k, hi_tail)) = (below?, above?);
    if j < 1 || k > n || j >= k {
        return None;
    }
    Some(RankInterval {
        lower: j,
        upper: k,
        coverage: 1.0 - lo_tail - hi_tail,
        method: CiMethod::ExactBinomial,
    })
}

/// [`rank_interval`] from the normal approximation with continuity correction whatever `n`.
/// `None` when the ranks fall outside `1..=n`.
pub fn normal_rank_interval(n: u64, q: f64) -> Option<RankInterval> {
    if n == 0 || !(q > 0.0 && q < 1.0) {
        return None;
    }
    let nf = n as f64;
    let mean = nf * q;
    let sd = (nf * q * (1.0 - q)).sqrt();
    let j = (mean + 0.5 - Z_975 * sd).floor();
    let k = (mean + 0.5 + Z_975 * sd).ceil();
    if j < 1.0 || k > nf || j >= k {
        return None;
    }
    let coverage = normal_cdf((k - 0.5 - mean) / sd) - normal_cdf((j - 0.5 - mean) / sd);
    Some(RankInterval {
        lower: j as u64,
        upper: k as u64,
        coverage,
        method: CiMethod::NormalApprox,
    })
}

/// Standard normal CDF, from the complementary error function (Numerical Recipes' Chebyshev
/// fit, relative error < 1.2 × 10⁻⁷).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Which end of a bucket [`value_at_rank`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketEnd {
    /// The lowest value equivalent to the bucket (for lower bounds).
    Lowest,
    /// The highest value equivalent to the bucket (for upper bounds and point estimates).
    Highest,
}

/// The `rank`-th smallest value (1-based) recorded in `h`, as the lowest or highest value
/// equivalent to its bucket; `None` when `rank` is 0 or above `h.len()`.
pub fn value_at_rank(h: &Histogram<u64>, rank: u64, end: BucketEnd) -> Option<u64> {
    if rank == 0 || rank > h.len() {
        return None;
    }
    let mut seen = 0u64;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= rank {
            let x = v.value_iterated_to();
            return Some(match end {
                BucketEnd::Lowest => h.lowest_equivalent(x),
                BucketEnd::Highest => h.highest_equivalent(x),
            });
        }
    }
    None
}

/// The 95 % interval of quantile `q` (0 < q < 1) of `h`, µs: (lowest value of the bucket at
/// rank `j`, highest value of the bucket at rank `k`) of [`rank_interval`]; `None` when `h`
/// has fewer than [`min_samples`]`(q)` samples. The bounds [`PercentileCi::of`] reports.
pub fn interval_us(h: &Histogram<u64>, q: f64) -> Option<(u64, u64)> {
    let r = rank_interval(h.len(), q)?;
    Some((
        value_at_rank(h, r.lower, BucketEnd::Lowest)?,
        value_at_rank(h, r.upper, BucketEnd::Highest)?,
    ))
}

/// The bounds of a percentile's confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CiBounds {
    /// Lower bound, ms.
    pub lower_ms: f64,
    /// Upper bound, ms.
    pub upper_ms: f64,
    /// Rank of the order statistic at the lower bound (1-based).
    pub lower_rank: u64,
    /// Rank of the order statistic at the upper bound.
    pub upper_rank: u64,
    /// Probability that the interval covers the true percentile (≥ 0.95).
    pub coverage: f64,
    /// How the ranks were found.
    pub method: CiMethod,
}

/// A percentile of one cell's histogram with its 95 % confidence interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PercentileCi {
    /// The percentile (50, 95, 99).
    pub percentile: f64,
    /// Samples in the histogram.
    pub n: u64,
    /// The point estimate (HdrHistogram's `value_at_quantile`), ms.
    pub estimate_ms: f64,
    /// The interval; `None` when `n < min_samples`.
    pub ci: Option<CiBounds>,
    /// Samples needed for an interval of this percentile ([`min_samples`]).
    pub min_samples: u64,
}

impl PercentileCi {
    /// Percentile `percentile` (0 < p < 100) of `h` with its interval.
    pub fn of(h: &Histogram<u64>, percentile: f64) -> PercentileCi {
        let q = percentile / 100.0;
        let n = h.len();
        let ms = |us: u64| us as f64 / 1000.0;
        let ci = rank_interval(n, q).and_then(|r| {
            Some(CiBounds {
                lower_ms: ms(value_at_rank(h, r.lower, BucketEnd::Lowest)?),
                upper_ms: ms(value_at_rank(h, r.upper, BucketEnd::Highest)?),
                lower_rank: r.lower,
                upper_rank: r.upper,
                coverage: r.coverage,
                method: r.method,
            })
        });
        PercentileCi {
            percentile,
            n,
            estimate_ms: if n == 0 {
                0.0
            } else {
                ms(h.value_at_quantile(q))
            },
            ci,
            min_samples: min_samples(q),
        }
    }

    /// `"134.0 [131.0, 137.2]"`, or `"134.0 (n 20 < 368)"` without an interval.
    pub fn text(&self) -> String {
        match &self.ci {
            Some(c) => format!(
                "{} [{}, {}]",
                fmt_ms(self.estimate_ms),
                fmt_ms(c.lower_ms),
                fmt_ms(c.upper_ms)
            ),
            None => format!(
                "{} (n {} < {})",
                fmt_ms(self.estimate_ms),
                self.n,
                self.min_samples
            ),
        }
    }
}

pub use latmesh_core::metrics::fmt_ms;

/// The outcome of comparing two providers at one percentile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A's interval lies below B's.
    AFaster,
    /// B's interval lies below A's.
    BFaster,
    /// The intervals overlap.
    NoClearDifference,
    /// One side has no interval (too few samples).
    NotEnoughSamples,
}

impl Verdict {
    /// Words for the verdict.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::AFaster => "A faster",
            Verdict::BFaster => "B faster",
            Verdict::NoClearDifference => "no clear difference",
            Verdict::NotEnoughSamples => "not enough samples",
        }
    }
}

/// "A faster than B" only when A's upper bound is below B's lower bound (and the other way
/// round); overlapping intervals: no clear difference; a missing interval: not enough
/// samples.
pub fn compare(a: &PercentileCi, b: &PercentileCi) -> Verdict {
    match (&a.ci, &b.ci) {
        (Some(x), Some(y)) if x.upper_ms < y.lower_ms => Verdict::AFaster,
        (Some(x), Some(y)) if y.upper_ms < x.lower_ms => Verdict::BFaster,
        (Some(_), Some(_)) => Verdict::NoClearDifference,
        _ => Verdict::NotEnoughSamples,
    }
}

/// Median of `values` (mean of the two middle ones for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Ranks of `values` ascending (1 = smallest), ties sharing their average rank; `None`
/// entries get no rank.
pub fn average_ranks(values: &[Option<f64>]) -> Vec<Option<f64>> {
    let mut idx: Vec<(usize, f64)> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .collect();
    idx.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = vec![None; values.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1].1 == idx[i].1 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for item in &idx[i..=j] {
            out[item.0] = Some(rank);
        }
        i = j + 1;
    }
    out
}

/// Kendall's coefficient of concordance W (Kendall & Babington Smith 1939; Siegel &
/// Castellan 1988, §9.4) of `m` rankings (rows: one ranking each, average ranks for ties) of
/// the same `n` objects, with the tie correction: `W = 12 S / (m²(n³ − n) − m Σ T)`, `S` the
/// sum of squared deviations of the objects' rank sums from their mean, `T = Σ (t³ − t)` over
/// each ranking's groups of `t` tied objects. 1: every ranking agrees; 0: no agreement.
/// `None` for fewer than 2 rankings or objects, or when every ranking is all ties.
pub fn kendall_w(rankings: &[Vec<f64>]) -> Option<f64> {
    let m = rankings.len();
    let n = rankings.first()?.len();
    if m < 2 || n < 2 || rankings.iter().any(|r| r.len() != n) {
        return None;
    }
    let sums: Vec<f64> = (0..n)
        .map(|i| rankings.iter().map(|r| r[i]).sum())
        .collect();
    let mean = sums.iter().sum::<f64>() / n as f64;
    let s: f64 = sums.iter().map(|x| (x - mean).powi(2)).sum();
    let ties: f64 = rankings
        .iter()
        .map(|r| {
            let mut v = r.clone();
            v.sort_by(f64::total_cmp);
            let mut t_sum = 0.0;
            let mut i = 0;
            while i < v.len() {
                let mut j = i;
                while j + 1 < v.len() && v[j + 1] == v[i] {
                    j += 1;
                }
                let t = (j - i + 1) as f64;
                t_sum += t * t * t - t;
                i = j + 1;
            }
            t_sum
        })
        .sum();
    let (mf, nf) = (m as f64, n as f64);
    let denom = mf * mf * (nf * nf * nf - nf) - mf * ties;
    (denom > 0.0).then(|| (12.0 * s / denom).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_starts_where_an_interval_exists() {
        for (p, n) in [(50.0, 6), (90.0, 36), (95.0, 72), (99.0, 368)] {
            assert_eq!(min_samples(p / 100.0), n, "P{p}");
            assert!(supported(n, p) && !supported(n - 1, p), "P{p}");
            assert!(
                rank_interval(n, p / 100.0).is_some() && rank_interval(n - 1, p / 100.0).is_none()
            );
        }
        assert!(!supported(1_000, 0.0) && !supported(1_000, 100.0));
    }
}
