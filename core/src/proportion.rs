//! Confidence intervals of a proportion (an error rate): the Wilson score interval, and the
//! "significantly higher" test built on it that knees, `latmesh check` and the selection
//! ranking use.
//!
//! For `k` failures in `n` trials, `p̂ = k / n`, `z = 1.96` (95 %):
//!
//! ```text
//! centre = (p̂ + z²/2n) / (1 + z²/n)
//! half   = z / (1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²)
//! ```
//!
//! (Wilson 1927; Agresti & Coull 1998 recommend it over the normal "Wald" interval, which
//! collapses to a point at 0 or n failures and undercovers for small `n`). It never leaves
//! `[0, 1]`, is defined for every `n ≥ 1`, and is wide for small `n`: 0 failures of 12 give
//! [0 %, 24.2 %].
//!
//! [`significantly_above`]: rate A is significantly above rate B when A's interval lies
//! entirely above B's (A's lower bound > B's upper bound) — the same separated-intervals rule
//! the percentile comparisons use; conservative (a difference at well below the 5 % level).

use serde::{Deserialize, Serialize};

/// The standard normal quantile at 0.975 (two-sided 95 %).
const Z_975: f64 = 1.959_963_984_540_054;

/// A 95 % interval of a proportion, as fractions in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProportionCi {
    /// Failures (or whatever is counted).
    pub k: u64,
    /// Trials.
    pub n: u64,
    /// Lower bound, fraction.
    pub lower: f64,
    /// Upper bound, fraction.
    pub upper: f64,
}

impl ProportionCi {
    /// The point estimate `k / n`, fraction.
    pub fn point(&self) -> f64 {
        self.k as f64 / self.n as f64
    }
}

/// The Wilson score interval (95 %) of `k` in `n`; `None` when `n` is 0 (`k` is capped at
/// `n`).
pub fn wilson(k: u64, n: u64) -> Option<ProportionCi> {
    if n == 0 {
        return None;
    }
    let k = k.min(n);
    let nf = n as f64;
    let p = k as f64 / nf;
    let z2 = Z_975 * Z_975;
    let denom = 1.0 + z2 / nf;
    let centre = (p + z2 / (2.0 * nf)) / denom;
    let half = Z_975 / denom * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt();
    Some(ProportionCi {
        k,
        n,
        // Exact ends at 0 and n failures (the formula gives them up to rounding).
        lower: if k == 0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        upper: if k == n {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}

/// Whether `a` failures in `a_n` is significantly above `b` in `b_n`: both intervals exist and
/// `a`'s lower bound exceeds `b`'s upper bound.
pub fn significantly_above(a: u64, a_n: u64, b: u64, b_n: u64) -> bool {
    match (wilson(a, a_n), wilson(b, b_n)) {
        (Some(x), Some(y)) => x.lower > y.upper,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_known_values() {
        // 0 of 12: [0, z²/(n + z²)] = [0, 0.2425].
        let c = wilson(0, 12).unwrap();
        assert_eq!(c.lower, 0.0);
        assert!((c.upper - 0.2425).abs() < 1e-3, "{c:?}");
        // 10 of 100 (Newcombe 1998's table: 0.0552, 0.1744).
        let c = wilson(10, 100).unwrap();
        assert!((c.lower - 0.0552).abs() < 1e-3, "{c:?}");
        assert!((c.upper - 0.1744).abs() < 1e-3, "{c:?}");
        // All failed.
        let c = wilson(7, 7).unwrap();
        assert_eq!(c.upper, 1.0);
        assert!(c.lower > 0.6 && c.lower < 0.7, "{c:?}");
        assert_eq!(wilson(0, 0), None);
        assert_eq!(c.point(), 1.0);
    }

    #[test]
    fn separated_intervals_only() {
        // 20 % vs 10 % of 100 each: overlapping intervals.
        assert!(!significantly_above(20, 100, 10, 100));
        // 30 % of 400 vs 10 % of 400: far apart.
        assert!(significantly_above(120, 400, 40, 400));
        assert!(!significantly_above(40, 400, 120, 400));
        assert!(!significantly_above(1, 0, 0, 10));
    }
}
