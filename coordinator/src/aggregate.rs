//! Merging one campaign's results across agents: interval histograms add per
//! (region, provider, scenario, metric); outcomes count per (region, provider, scenario).
//! Batches are de-duplicated by (agent, seq) before they reach this module.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::hist::{HistKey, HistogramSet};
use latmesh_core::record::{Outcome, ProbeRecord};

/// Per-(region, provider, scenario) counters from records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellCounts {
    /// Attempts by outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Sum of `output_tokens` over `ok` attempts.
    pub ok_output_tokens: u64,
    /// `ok` attempts whose `output_tokens` came from `usage`.
    pub ok_tokens_from_usage: u64,
    /// Over `ok` attempts that reported usage: the sum of `usage_chunk_delta`
    /// (`usage.completion_tokens − token_payloads`).
    pub ok_usage_chunk_delta_sum: i64,
    /// `ok` attempts that reported usage (`usage_chunk_delta` set).
    pub ok_usage_reports: u64,
    /// `ok` attempts whose `usage_chunk_delta` was not 0.
    pub ok_usage_chunk_mismatches: u64,
    /// Logical requests ended (records with `final_attempt`), and those not `ok`.
    pub requests: u64,
    /// Logical requests whose final attempt was not `ok`.
    pub requests_failed: u64,
    /// Slots of the plan finished: first turns whose final attempt arrived (retries and
    /// later turns of a conversation do not count again).
    pub slots_done: u64,
    /// The latest failed attempt, described: outcome, HTTP status, provider error type and
    /// message (already truncated and scrubbed by the agent).
    pub last_error: Option<String>,
}

/// One line describing a failed attempt: `throttled (429): rate_limit: Rate limit reached…`.
pub fn describe_error(rec: &ProbeRecord) -> String {
    let mut s = rec.outcome().as_str().to_string();
    if let Some(status) = rec.http_status {
        s.push_str(&format!(" ({status})"));
    }
    for part in [&rec.error_type, &rec.error_message].into_iter().flatten() {
        s.push_str(": ");
        s.push_str(part);
    }
    s
}

impl CellCounts {
    /// All attempts.
    pub fn attempts(&self) -> u64 {
        self.outcomes.values().sum()
    }

    /// Attempts with `outcome`.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes.get(&outcome).copied().unwrap_or(0)
    }
}

/// `(region, provider, scenario)`.
pub type CellKey = (String, String, String);

/// Everything merged so far for one campaign.
#[derive(Debug, Default)]
pub struct Aggregate {
    hists: BTreeMap<String, HistogramSet>,
    counts: BTreeMap<CellKey, CellCounts>,
}

impl Aggregate {
    /// Adds one record from an agent in `region`.
    pub fn add_record(&mut self, region: &str, rec: &ProbeRecord) {
        let cell = self
            .counts
            .entry((
                region.to_string(),
                rec.provider.clone(),
                rec.scenario.clone(),
            ))
            .or_default();
        let outcome = rec.outcome();
        *cell.outcomes.entry(outcome).or_insert(0) += 1;
        if rec.final_attempt {
            cell.slots_done += u64::from(rec.turn <= 1);
            // A request cut by a campaign cancel is neither a success nor a failure.
            if outcome != Outcome::Cancelled {
                cell.requests += 1;
                cell.requests_failed += u64::from(outcome != Outcome::Ok);
            }
        }
        if outcome == Outcome::Ok {
            cell.ok_output_tokens += u64::from(rec.output_tokens);
            cell.ok_tokens_from_usage += u64::from(rec.tokens_from_usage);
            if let Some(d) = rec.usage_chunk_delta {
                cell.ok_usage_chunk_delta_sum += d;
                cell.ok_usage_reports += 1;
                cell.ok_usage_chunk_mismatches += u64::from(d != 0);
            }
        } else {
            cell.last_error = Some(describe_error(rec));
        }
    }

    /// Adds one interval histogram from an agent in `region`.
    pub fn add_histogram(&mut self, region: &str, key: HistKey, h: &Histogram<u64>) {
        self.hists
            .entry(region.to_string())
            .or_default()
            .merge(key, h);
    }

    /// The merged histogram of `region` (or of every region when `None`) for `key`'s
    /// provider, scenario and metric, over every sweep step (`key.step` is ignored; see
    /// [`Aggregate::step_histogram`]).
    pub fn histogram(&self, region: Option<&str>, key: &HistKey) -> Option<Histogram<u64>> {
        self.merged(region, |k| {
            k.provider == key.provider && k.scenario == key.scenario && k.metric == key.metric
        })
    }

    /// The merged histogram of `region` (or of every region) for exactly `key` (one sweep
    /// step).
    pub fn step_histogram(&self, region: Option<&str>, key: &HistKey) -> Option<Histogram<u64>> {
        self.merged(region, |k| k == key)
    }

    fn merged(
        &self,
        region: Option<&str>,
        want: impl Fn(&HistKey) -> bool,
    ) -> Option<Histogram<u64>> {
        let mut out: Option<Histogram<u64>> = None;
        for (r, set) in &self.hists {
            if region.is_some_and(|want| want != r) {
                continue;
            }
            for (_, h) in set.iter().filter(|(k, _)| want(k)) {
                match &mut out {
                    Some(acc) => acc.add(h).expect("shared bounds"),
                    None => out = Some(h.clone()),
                }
            }
        }
        out
    }

    /// Counters of one cell, or of a provider and scenario over every region when `region` is
    /// `None`.
    pub fn counts(&self, region: Option<&str>, provider: &str, scenario: &str) -> CellCounts {
        let mut out = CellCounts::default();
        for ((r, p, s), c) in &self.counts {
            if p != provider || s != scenario || region.is_some_and(|want| want != r) {
                continue;
            }
            for (o, n) in &c.outcomes {
                *out.outcomes.entry(*o).or_insert(0) += n;
            }
            out.ok_output_tokens += c.ok_output_tokens;
            out.ok_tokens_from_usage += c.ok_tokens_from_usage;
            out.ok_usage_chunk_delta_sum += c.ok_usage_chunk_delta_sum;
            out.ok_usage_chunk_mismatches += c.ok_usage_chunk_mismatches;
            out.ok_usage_reports += c.ok_usage_reports;
            out.requests += c.requests;
            out.slots_done += c.slots_done;
            out.requests_failed += c.requests_failed;
            if c.last_error.is_some() {
                out.last_error.clone_from(&c.last_error);
            }
        }
        out
    }

    /// Records counted so far.
    pub fn records(&self) -> u64 {
        self.counts.values().map(CellCounts::attempts).sum()
    }

    /// Slots of the plan finished so far (what progress compares with
    /// `Plan::probes_per_agent` × agents): a slot's retries and later turns do not count again.
    pub fn slots_done(&self) -> u64 {
        self.counts.values().map(|c| c.slots_done).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::hist::new_histogram;
    use latmesh_core::metrics::Metric;

    #[test]
    fn regions_merge_by_addition() {
        let mut agg = Aggregate::default();
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        let (mut a, mut b) = (new_histogram(), new_histogram());
        a.record(100).unwrap();
        b.record(300).unwrap();
        b.record(500).unwrap();
        agg.add_histogram("us-east", key.clone(), &a);
        agg.add_histogram("eu-west", key.clone(), &b);
        agg.add_histogram("eu-west", key.clone(), &a);
        assert_eq!(agg.histogram(Some("eu-west"), &key).unwrap().len(), 3);
        let all = agg.histogram(None, &key).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all.count_at(100), 2);
        assert!(agg.histogram(Some("ap-southeast"), &key).is_none());
    }

    #[test]
    fn outcomes_count_per_cell_and_over_regions() {
        let mut agg = Aggregate::default();
        let rec = |o| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(o),
            output_tokens: 10,
            tokens_from_usage: true,
            usage_chunk_delta: Some(3),
            final_attempt: true,
            ..Default::default()
        };
        agg.add_record("us-east", &rec(Outcome::Ok));
        // A throttled attempt that was retried, then the retry that succeeded.
        agg.add_record(
            "us-east",
            &ProbeRecord {
                final_attempt: false,
                ..rec(Outcome::Throttled)
            },
        );
        agg.add_record(
            "us-east",
            &ProbeRecord {
                usage_chunk_delta: Some(0),
                attempt: 2,
                ..rec(Outcome::Ok)
            },
        );
        agg.add_record("eu-west", &rec(Outcome::Ok));
        agg.add_record("eu-west", &rec(Outcome::TimeoutTtft));
        // Aborted by a campaign cancel: an attempt, not a request.
        agg.add_record("eu-west", &rec(Outcome::Cancelled));
        let us = agg.counts(Some("us-east"), "p", "s");
        assert_eq!(
            (
                us.attempts(),
                us.count(Outcome::Ok),
                us.count(Outcome::Throttled)
            ),
            (3, 2, 1)
        );
        assert_eq!(us.ok_output_tokens, 20);
        assert_eq!((us.requests, us.requests_failed), (2, 0));
        assert_eq!(
            (us.ok_usage_chunk_delta_sum, us.ok_usage_chunk_mismatches),
            (3, 1)
        );
        let all = agg.counts(None, "p", "s");
        assert_eq!(
            (all.attempts(), all.count(Outcome::Ok), all.ok_output_tokens),
            (6, 3, 30)
        );
        assert_eq!((all.requests, all.requests_failed), (4, 1));
        assert_eq!(all.count(Outcome::Cancelled), 1);
        assert_eq!(all.ok_usage_chunk_delta_sum, 6);
        assert_eq!(agg.records(), 6);
        // Six attempts, five final, all first turns: five slots finished.
        assert_eq!(agg.slots_done(), 5);
    }
}
