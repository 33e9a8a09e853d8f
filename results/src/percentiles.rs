//! Percentiles of one metric's merged HDR histogram as the summary, matrices and reports carry
//! them: the point estimates, the sample count, and per percentile whether the samples
//! support it and its 95 % confidence interval (the sample-size policy of
//! [`crate::stats::supported`]).
//!
//! JSON shape (one metric of one cell; `points` follows the campaign's percentile list):
//!
//! ```json
//! {
//!   "p50_ms": 101.2, "p90_ms": 130.0, "p95_ms": 131.0, "p99_ms": 131.0,
//!   "n": 12,
//!   "points": [
//!     {"percentile": 50.0, "ms": 101.2, "supported": true,  "min_samples": 6,
//!      "lo_ms": 98.0, "hi_ms": 120.0},
//!     {"percentile": 99.0, "ms": 131.0, "supported": false, "min_samples": 368,
//!      "lo_ms": null, "hi_ms": null}
//!   ]
//! }
//! ```
//!
//! The four `pNN_ms` fields are always there (summaries written before P95, `n` and `points`
//! existed still parse: `p95_ms` is then `null`, `n` 0 and `points` empty, i.e. unknown).

use std::ops::Deref;

use hdrhistogram::Histogram;
use latmesh_core::plan::{DEFAULT_PERCENTILES, MAX_PERCENTILES};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::stats::{self, PercentileCi};

/// One percentile of a metric: its estimate, whether the samples support it, its interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PercentilePoint {
    /// The percentile, in (0, 100): `95.0` for P95.
    pub percentile: f64,
    /// The point estimate (HdrHistogram's `value_at_quantile` of the merged histogram), ms.
    pub ms: f64,
    /// Whether the samples support this percentile: `n ≥ min_samples`
    /// ([`stats::supported`]). An unsupported value is shown marked, never plainly.
    pub supported: bool,
    /// Samples this percentile needs ([`stats::min_samples`]): 6 for P50, 36 for P90, 72 for
    /// P95, 368 for P99.
    pub min_samples: u64,
    /// Lower bound of the distribution-free 95 % confidence interval, ms; `null` when not
    /// supported.
    pub lo_ms: Option<f64>,
    /// Upper bound of the 95 % confidence interval, ms; `null` when not supported.
    pub hi_ms: Option<f64>,
}

impl PercentilePoint {
    /// The point of `percentile` of `n` samples whose estimate is `ms`, without an interval
    /// (it is supported or not by `n` alone; what a summary older than intervals gives).
    pub fn without_interval(percentile: f64, n: u64, ms: f64) -> PercentilePoint {
        PercentilePoint {
            percentile,
            ms,
            supported: stats::supported(n, percentile),
            min_samples: stats::min_samples(percentile / 100.0),
            lo_ms: None,
            hi_ms: None,
        }
    }

    /// The estimate as the terminal tables print it: `fmt(ms)`, after [`UNSUPPORTED_MARK`]
    /// when not supported (`~812`).
    pub fn text(&self, fmt: impl Fn(f64) -> String) -> String {
        let mark = if self.supported { "" } else { UNSUPPORTED_MARK };
        format!("{mark}{}", fmt(self.ms))
    }
}

/// What terminal tables put before a percentile the samples do not support: `~812`.
pub const UNSUPPORTED_MARK: &str = "~";

/// The legend line printed under a table that shows a marked percentile: the rule, once,
/// with the samples each of the default percentiles (P50, P90, P95, P99) needs.
pub fn legend() -> String {
    legend_for(&latmesh_core::plan::DEFAULT_PERCENTILES)
}

/// [`legend`] naming the samples each percentile of `list` (e.g. a campaign's
/// `percentiles`) needs: `~ marks … (P50 6, P99.9 3688)`.
pub fn legend_for(list: &[f64]) -> String {
    let needs: Vec<String> = list
        .iter()
        .map(|&p| format!("P{p} {}", stats::min_samples(p / 100.0)))
        .collect();
    format!(
        "{UNSUPPORTED_MARK} marks a percentile with fewer samples than a 95% interval needs \
         ({})",
        needs.join(", ")
    )
}

/// Up to [`MAX_PERCENTILES`] points, in order: a list that is `Copy` (so [`Percentiles`]
/// stays `Copy`), read as a slice, serialized as a JSON list.
#[derive(Clone, Copy, Default, PartialEq)]
pub struct Points {
    len: usize,
    items: [PercentilePoint; MAX_PERCENTILES],
}

impl Points {
    /// The first [`MAX_PERCENTILES`] of `points` (campaign validation allows no more).
    pub fn new(points: impl IntoIterator<Item = PercentilePoint>) -> Points {
        let mut out = Points::default();
        for p in points.into_iter().take(MAX_PERCENTILES) {
            out.items[out.len] = p;
            out.len += 1;
        }
        out
    }
}

impl Deref for Points {
    type Target = [PercentilePoint];
    fn deref(&self) -> &[PercentilePoint] {
        &self.items[..self.len]
    }
}

impl std::fmt::Debug for Points {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Points {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Points {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Points, D::Error> {
        let list = Vec::<PercentilePoint>::deserialize(d)?;
        if list.len() > MAX_PERCENTILES {
            return Err(serde::de::Error::custom(format!(
                "{} percentile points: at most {MAX_PERCENTILES}",
                list.len()
            )));
        }
        Ok(Points::new(list))
    }
}

/// Percentiles of one metric, milliseconds: P50/P90/P95/P99 always, `n`, and the campaign's
/// percentiles with their support and intervals (see the [module docs](self) for the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 95th percentile, ms; `None` only in summaries written before P95 was stored.
    #[serde(default)]
    pub p95_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Samples in the merged histogram (0 in summaries written before it was stored:
    /// unknown).
    #[serde(default)]
    pub n: u64,
    /// The campaign's percentiles (the plan's `percentiles`, ascending), each with its
    /// support and 95 % interval; empty in summaries written before they were stored.
    #[serde(default)]
    pub points: Points,
}

impl Percentiles {
    /// [`DEFAULT_PERCENTILES`] of `h` (µs) in ms: [`Percentiles::of_list`].
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles::of_list(h, &DEFAULT_PERCENTILES)
    }

    /// The percentiles of `h` (µs) in ms, `points` at `list` (each in (0, 100)) with their
    /// intervals ([`PercentileCi::of`]: order statistics of the merged histogram).
    pub fn of_list(h: &Histogram<u64>, list: &[f64]) -> Percentiles {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let n = h.len();
        Percentiles {
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p95_ms: Some(ms(0.95)),
            p99_ms: ms(0.99),
            n,
            points: Points::new(list.iter().map(|&p| {
                let ci = PercentileCi::of(h, p);
                PercentilePoint {
                    percentile: p,
                    ms: ci.estimate_ms,
                    supported: stats::supported(n, p),
                    min_samples: ci.min_samples,
                    lo_ms: ci.ci.map(|c| c.lower_ms),
                    hi_ms: ci.ci.map(|c| c.upper_ms),
                }
            })),
        }
    }

    /// Percentile `percentile`: from `points` when there, else from the fixed fields (50, 90,
    /// 95, 99) without an interval, supported by `n` (an older summary with `n` 0: not
    /// supported); `None` when neither holds it.
    pub fn point(&self, percentile: f64) -> Option<PercentilePoint> {
        if let Some(p) = self.points.iter().find(|p| p.percentile == percentile) {
            return Some(*p);
        }
        let fixed = [
            (50.0, Some(self.p50_ms)),
            (90.0, Some(self.p90_ms)),
            (95.0, self.p95_ms),
            (99.0, Some(self.p99_ms)),
        ];
        let ms = fixed.iter().find(|(p, _)| *p == percentile)?.1?;
        Some(PercentilePoint::without_interval(percentile, self.n, ms))
    }

    /// The estimate of `percentile`, ms ([`Percentiles::point`]).
    pub fn ms(&self, percentile: f64) -> Option<f64> {
        self.point(percentile).map(|p| p.ms)
    }

    /// The estimates of `list` as the terminal tables print them, each `fmt(ms)`:
    /// `101/~130/~131` ([`PercentilePoint::text`]; `-` for one not held), and whether any is
    /// marked.
    pub fn text(&self, list: &[f64], fmt: impl Fn(f64) -> String) -> (String, bool) {
        let mut marked = false;
        let parts: Vec<String> = list
            .iter()
            .map(|&p| match self.point(p) {
                Some(pt) => {
                    marked |= !pt.supported;
                    pt.text(&fmt)
                }
                None => "-".into(),
            })
            .collect();
        (parts.join("/"), marked)
    }
}

/// The percentile list of the first of `rows` that holds points (what its campaign chose),
/// else [`DEFAULT_PERCENTILES`]: what a table of rows without a list of their own shows.
pub fn list_of<'a>(rows: impl IntoIterator<Item = &'a Percentiles>) -> Vec<f64> {
    rows.into_iter().find(|p| !p.points.is_empty()).map_or_else(
        || DEFAULT_PERCENTILES.to_vec(),
        |p| p.points.iter().map(|q| q.percentile).collect(),
    )
}

/// `P50/P90/P95/P99` for `list` (`99.9` → `P99.9`).
pub fn header(list: &[f64]) -> String {
    list.iter()
        .map(|p| format!("P{p}"))
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::hist::new_histogram;

    /// A histogram of `values_us` (below 2048 µs: exact in HDR).
    fn hist(values_us: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = new_histogram();
        for v in values_us {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn twelve_samples_support_only_the_median() {
        let p = Percentiles::of(&hist((1..=12).map(|v| v * 100)));
        assert_eq!(p.n, 12);
        assert_eq!(
            (p.p50_ms, p.p90_ms, p.p95_ms, p.p99_ms),
            (0.6, 1.1, Some(1.2), 1.2)
        );
        let got: Vec<(f64, bool, u64)> = p
            .points
            .iter()
            .map(|q| (q.percentile, q.supported, q.min_samples))
            .collect();
        assert_eq!(
            got,
            [
                (50.0, true, 6),
                (90.0, false, 36),
                (95.0, false, 72),
                (99.0, false, 368)
            ]
        );
        // The median of 12 has an interval (order statistics 3 and 10); the others none.
        let p50 = &p.points[0];
        assert_eq!((p50.lo_ms, p50.hi_ms), (Some(0.3), Some(1.0)));
        assert!(
            p.points[1..]
                .iter()
                .all(|q| q.lo_ms.is_none() && q.hi_ms.is_none())
        );
        assert_eq!(
            p.text(&DEFAULT_PERCENTILES, |v| format!("{v:.1}")),
            ("0.6/~1.1/~1.2/~1.2".to_string(), true)
        );
    }

    #[test]
    fn four_hundred_samples_support_all_four() {
        let p = Percentiles::of(&hist((1..=400).map(|v| v * 5)));
        assert!(p.points.iter().all(|q| q.supported), "{p:?}");
        assert_eq!(
            p.text(&DEFAULT_PERCENTILES, |v| format!("{v:.2}")),
            ("1.00/1.80/1.90/1.98".into(), false)
        );
        // P99 of 400: order statistics 392 and 400 (exact binomial, ≥ 95 % coverage).
        let p99 = p.point(99.0).unwrap();
        assert_eq!((p99.lo_ms, p99.hi_ms), (Some(1.96), Some(2.0)));
    }

    #[test]
    fn a_summary_without_p95_n_or_points_still_parses() {
        let old: Percentiles =
            serde_json::from_str(r#"{"p50_ms":1.0,"p90_ms":2.0,"p99_ms":3.0}"#).unwrap();
        assert_eq!((old.p95_ms, old.n, old.points.len()), (None, 0, 0));
        assert_eq!(old.ms(99.0), Some(3.0));
        assert_eq!(old.ms(95.0), None);
        // Sample count unknown: nothing is supported.
        assert!(!old.point(50.0).unwrap().supported);
        assert_eq!(
            old.text(&DEFAULT_PERCENTILES, |v| format!("{v:.0}")),
            ("~1/~2/-/~3".to_string(), true)
        );
        // And the new shape round-trips.
        let new = Percentiles::of(&hist(1..=40));
        assert_eq!(new.n, 40);
        let json = serde_json::to_value(new).unwrap();
        assert_eq!(json["points"][1]["percentile"], 90.0);
        assert_eq!(json["points"][1]["supported"], true);
        assert!(json["points"][3]["lo_ms"].is_null());
        assert_eq!(serde_json::from_value::<Percentiles>(json).unwrap(), new);
    }

    #[test]
    fn headers_name_the_list() {
        assert_eq!(header(&DEFAULT_PERCENTILES), "P50/P90/P95/P99");
        assert_eq!(header(&[50.0, 99.9]), "P50/P99.9");
    }
}
