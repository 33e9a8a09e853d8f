//! Histograms by key (provider, scenario, metric, sweep step): recording a probe's latencies,
//! merging dense and sparse histograms, iterating by key.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::codec::{HIGHEST_US, LOWEST_US, new_histogram};
use super::sparse::SparseHistogram;
use crate::load::LoadKind;
use crate::metrics::Metric;
use crate::record::{Outcome, ProbeRecord};

/// The key of one histogram.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HistKey {
    /// Provider name.
    pub provider: String,
    /// Scenario name.
    pub scenario: String,
    /// Metric.
    pub metric: Metric,
    /// `sweep` scenarios: the concurrency step; `rate` scenarios: the rate step (0-based); 0
    /// otherwise.
    #[serde(default)]
    pub step: u32,
}

/// Histograms by key. Latency histograms count `ok` attempts only (docs/metrics.md "Histograms and merging").
#[derive(Clone, Debug, Default)]
pub struct HistogramSet {
    map: BTreeMap<HistKey, Histogram<u64>>,
}

impl HistogramSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one value (µs) under `key`, saturating into `[LOWEST_US, HIGHEST_US]`.
    pub fn record(&mut self, key: HistKey, value_us: u64) {
        let v = value_us.clamp(LOWEST_US, HIGHEST_US);
        self.map
            .entry(key)
            .or_insert_with(new_histogram)
            .record(v)
            .expect("value clamped into range");
    }

    /// Records the latencies of an `ok` attempt: TTFB, TTFT, TTST, TTFC, E2E, TPOT, E2E per
    /// output token, prefill throughput (tokens/s, from `usage.prompt_tokens` less its cached
    /// tokens over TTFT, rounded, at least 1; only when usage gave the prompt tokens), every
    /// ITL gap (`itl_gaps_us`) and `sched_lag`; for `rate` records also TTFT and E2E from the
    /// intended send time. Keys carry the record's `step`. Other outcomes and warm-up records
    /// (`warmup`: left out of every statistic) record nothing.
    pub fn record_probe(&mut self, rec: &ProbeRecord, itl_gaps_us: &[u64]) {
        if rec.outcome() != Outcome::Ok || rec.warmup {
            return;
        }
        let key = |metric| HistKey {
            provider: rec.provider.clone(),
            scenario: rec.scenario.clone(),
            metric,
            step: rec.step,
        };
        let lag = rec.sched_lag_us.max(0) as u64;
        let open_loop = rec.load == LoadKind::Rate;
        let single = [
            (Metric::Ttfb, rec.ttfb_us),
            (Metric::Ttft, rec.ttft_us),
            (Metric::Ttst, rec.ttst_us),
            (Metric::Ttfc, rec.ttfc_us),
            (Metric::E2e, rec.e2e_us),
            (Metric::Tpot, rec.tpot_us),
            (
                Metric::E2ePerToken,
                rec.e2e_us
                    .and_then(|e2e| crate::metrics::e2e_per_token_us(e2e, rec.output_tokens)),
            ),
            (Metric::PrefillTps, prefill_tps(rec)),
            (Metric::SchedLag, Some(lag)),
            (
                Metric::TtftIntended,
                rec.ttft_us.filter(|_| open_loop).map(|v| v + lag),
            ),
            (
                Metric::E2eIntended,
                rec.e2e_us.filter(|_| open_loop).map(|v| v + lag),
            ),
            (
                Metric::FailoverLatency,
                rec.request_latency_us
                    .filter(|_| rec.failover && rec.final_attempt),
            ),
        ];
        for (metric, value) in single {
            if let Some(v) = value {
                self.record(key(metric), v);
            }
        }
        if !itl_gaps_us.is_empty() {
            let h = self
                .map
                .entry(key(Metric::Itl))
                .or_insert_with(new_histogram);
            for &gap in itl_gaps_us {
                h.record(gap.clamp(LOWEST_US, HIGHEST_US))
                    .expect("value clamped into range");
            }
        }
    }

    /// Adds `h` into the histogram under `key` (merging is addition).
    pub fn merge(&mut self, key: HistKey, h: &Histogram<u64>) {
        self.map
            .entry(key)
            .or_insert_with(new_histogram)
            .add(h)
            .expect("all latmesh histograms share bounds");
    }

    /// Adds the buckets of `h` (a decoded blob, see [`crate::hist::sparse`]) into the histogram
    /// under `key`, with `record_n` per non-empty bucket instead of a scan of every counter:
    /// the same counters, `len`, `min` and `max` as [`HistogramSet::merge`] of the dense
    /// histogram `h` stands for. Like `merge`, creates the (empty) histogram under `key` even
    /// when `h` is empty.
    pub fn merge_sparse(&mut self, key: HistKey, h: &SparseHistogram) {
        h.add_to(self.map.entry(key).or_insert_with(new_histogram))
            .expect("sparse histograms are in latmesh's bounds");
    }

    /// Adds every histogram of `other` into this set.
    pub fn merge_set(&mut self, other: &HistogramSet) {
        for (k, h) in &other.map {
            self.merge(k.clone(), h);
        }
    }

    /// The histogram under `key`, if any value was recorded.
    pub fn get(&self, key: &HistKey) -> Option<&Histogram<u64>> {
        self.map.get(key)
    }

    /// The histograms of `key`'s provider, scenario and metric at every sweep step
    /// (`key.step` is ignored), in step order: a range of the key order, not a scan.
    pub fn all_steps<'a>(
        &'a self,
        key: &HistKey,
    ) -> impl Iterator<Item = (&'a HistKey, &'a Histogram<u64>)> + 'a {
        let lo = HistKey {
            step: 0,
            ..key.clone()
        };
        let hi = HistKey {
            step: u32::MAX,
            ..key.clone()
        };
        self.map.range(lo..=hi)
    }

    /// Iterates over keys and histograms in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&HistKey, &Histogram<u64>)> {
        self.map.iter()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Takes every histogram out, leaving the set empty (an interval flush).
    pub fn drain(&mut self) -> Vec<(HistKey, Histogram<u64>)> {
        std::mem::take(&mut self.map).into_iter().collect()
    }
}

/// A record's prefill throughput as a histogram value: tokens/s rounded, at least 1; `None`
/// without `usage.prompt_tokens` or TTFT ([`crate::metrics::prefill_tps`]).
fn prefill_tps(rec: &ProbeRecord) -> Option<u64> {
    let prompt = rec.usage.prompt_tokens?;
    let cached = rec.usage.cached_tokens.unwrap_or(0);
    crate::metrics::prefill_tps(prompt, cached, rec.ttft_us?).map(|tps| (tps.round() as u64).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::codec::{HIGHEST_US, new_histogram};

    fn key(metric: Metric) -> HistKey {
        HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric,
            step: 0,
        }
    }

    #[test]
    fn merged_percentiles_equal_percentiles_of_all_values() {
        let (mut a, mut b, mut all) = (HistogramSet::new(), HistogramSet::new(), new_histogram());
        for v in 1..=1000u64 {
            let target = if v % 3 == 0 { &mut a } else { &mut b };
            target.record(key(Metric::Ttft), v * 100);
            all.record(v * 100).unwrap();
        }
        a.merge_set(&b);
        let merged = a.get(&key(Metric::Ttft)).unwrap();
        assert_eq!(merged.len(), 1000);
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(merged.value_at_quantile(q), all.value_at_quantile(q));
        }
    }

    #[test]
    fn only_ok_attempts_feed_latency_histograms() {
        let mut set = HistogramSet::new();
        let mut rec = ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Throttled),
            ttfb_us: Some(500),
            ..Default::default()
        };
        set.record_probe(&rec, &[10, 20]);
        assert!(set.is_empty());
        rec.outcome = Some(Outcome::Ok);
        rec.ttft_us = Some(1_000);
        rec.e2e_us = Some(5_000);
        set.record_probe(&rec, &[10, 20, 30]);
        assert_eq!(set.get(&key(Metric::Ttft)).unwrap().len(), 1);
        assert_eq!(set.get(&key(Metric::Itl)).unwrap().len(), 3);
        assert!(set.get(&key(Metric::Tpot)).is_none());
    }

    fn ok_record() -> ProbeRecord {
        ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Ok),
            ttft_us: Some(250_000),
            ttst_us: Some(270_000),
            e2e_us: Some(1_250_000),
            output_tokens: 100,
            usage: crate::record::Usage {
                prompt_tokens: Some(8_000),
                cached_tokens: Some(3_000),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// TTST, E2E per token and prefill throughput are recorded with their definitions'
    /// values: 1.25 s over 100 tokens is 12,500 µs per token; (8,000 − 3,000 cached) tokens in
    /// 250 ms is 20,000 tokens/s.
    #[test]
    fn ttst_e2e_per_token_and_prefill_throughput_are_recorded() {
        let mut set = HistogramSet::new();
        set.record_probe(&ok_record(), &[]);
        let one = |m| {
            let h = set.get(&key(m)).unwrap();
            assert_eq!(h.len(), 1, "{m:?}");
            h.max()
        };
        assert!(
            set.get(&key(Metric::Ttst))
                .unwrap()
                .equivalent(one(Metric::Ttst), 270_000)
        );
        assert!(
            set.get(&key(Metric::E2ePerToken))
                .unwrap()
                .equivalent(one(Metric::E2ePerToken), 12_500)
        );
        assert!(
            set.get(&key(Metric::PrefillTps))
                .unwrap()
                .equivalent(one(Metric::PrefillTps), 20_000)
        );
        // Without usage there is no prefill throughput; without TTST none either.
        let mut set = HistogramSet::new();
        let mut rec = ok_record();
        rec.usage = Default::default();
        rec.ttst_us = None;
        rec.output_tokens = 0;
        set.record_probe(&rec, &[]);
        for m in [Metric::PrefillTps, Metric::Ttst, Metric::E2ePerToken] {
            assert!(set.get(&key(m)).is_none(), "{m:?}");
        }
        assert_eq!(set.get(&key(Metric::Ttft)).unwrap().len(), 1);
        // A prefill faster than 1 token/s rounds up to 1, never 0.
        let mut slow = ok_record();
        slow.usage.cached_tokens = None;
        slow.usage.prompt_tokens = Some(1);
        slow.ttft_us = Some(10_000_000);
        let mut set = HistogramSet::new();
        set.record_probe(&slow, &[]);
        assert_eq!(set.get(&key(Metric::PrefillTps)).unwrap().max(), 1);
    }

    /// Warm-up records are left out of every histogram, whatever they measured.
    #[test]
    fn warmup_records_feed_no_histogram() {
        let mut set = HistogramSet::new();
        let mut rec = ok_record();
        rec.warmup = true;
        set.record_probe(&rec, &[10, 20]);
        assert!(set.is_empty());
        rec.warmup = false;
        set.record_probe(&rec, &[10, 20]);
        assert_eq!(set.get(&key(Metric::Itl)).unwrap().len(), 2);
    }

    #[test]
    fn all_steps_is_every_step_of_one_key_and_nothing_else() {
        let mut set = HistogramSet::new();
        for step in [2, 0, 1] {
            set.record(
                HistKey {
                    step,
                    ..key(Metric::E2e)
                },
                1_000 * u64::from(step + 1),
            );
        }
        set.record(key(Metric::Ttft), 5);
        set.record(
            HistKey {
                provider: "q".into(),
                ..key(Metric::E2e)
            },
            7,
        );
        let steps: Vec<(u32, u64)> = set
            .all_steps(&HistKey {
                step: 9,
                ..key(Metric::E2e)
            })
            .map(|(k, h)| (k.step, h.max()))
            .collect();
        assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(steps[2].1 >= 3_000 && steps[0].1 < 1_100);
    }

    #[test]
    fn out_of_range_values_saturate() {
        let mut set = HistogramSet::new();
        set.record(key(Metric::E2e), 0);
        set.record(key(Metric::E2e), u64::MAX);
        let h = set.get(&key(Metric::E2e)).unwrap();
        assert_eq!(h.len(), 2);
        assert!(h.max() >= HIGHEST_US);
    }
}
