//! The knee of a sweep: the first concurrency step where latency turns steep (elasticity and
//! non-overlapping percentile intervals) or errors rise significantly, per [`KneeRule`].

use serde::{Deserialize, Serialize};

use super::sweep::KneeRule;

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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

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
}
