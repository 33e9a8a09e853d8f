//! Failover scenarios as their clients experience them, and the politeness notes.
//!
//! A scenario with `failover` (see `latmesh_core::plan::FailoverSpec`) has two kinds of
//! records: client requests through the chain (`failover = true`: attempts on the primary,
//! then the backups) and plain probes of each backup (`failover = false`), so a dead backup
//! shows before a client needs it. [`FailoverRow`] reports, per region (and `ALL`): client
//! requests, the share that succeeded, which provider answered them, the attempts they took,
//! the client's latency (`failover_latency`, merged over the providers that answered), and each
//! backup's own probe success.

use std::collections::BTreeMap;

use latmesh_core::hist::HistKey;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use serde::{Deserialize, Serialize};

use crate::aggregate::Aggregate;
use crate::summary::{ALL_REGIONS, MatrixCell, Percentiles};

/// Client requests of one failover scenario in one region, as counted from records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverCounts {
    /// Client requests that ended (final attempts with `failover`; cancelled and dropped
    /// ones left out).
    pub requests: u64,
    /// Attempts they made, over every provider of the chain.
    pub attempts: u64,
    /// Requests that ended `ok`, by the provider that answered.
    pub served_by: BTreeMap<String, u64>,
}

impl FailoverCounts {
    /// Counts one record of a failover scenario (plain backup probes are not counted here).
    pub fn add(&mut self, rec: &ProbeRecord) {
        if !rec.failover {
            return;
        }
        self.attempts += 1;
        if rec.final_attempt && crate::aggregate::counts_in_error_rates(rec.outcome()) {
            self.requests += 1;
            if rec.outcome() == Outcome::Ok {
                *self.served_by.entry(rec.provider.clone()).or_insert(0) += 1;
            }
        }
    }

    /// Adds another region's counts.
    pub fn merge(&mut self, other: &FailoverCounts) {
        self.requests += other.requests;
        self.attempts += other.attempts;
        for (p, n) in &other.served_by {
            *self.served_by.entry(p.clone()).or_insert(0) += n;
        }
    }
}

/// A backup's own probes in a failover scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackupHealth {
    /// Provider name.
    pub provider: String,
    /// Its plain probes (attempts).
    pub probes: u64,
    /// Those that ended `ok`, %.
    pub ok_pct: f64,
}

/// One failover scenario in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailoverRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Scenario name.
    pub scenario: String,
    /// The chain: primary first.
    pub chain: Vec<String>,
    /// Client requests that ended.
    pub requests: u64,
    /// Of those, `ok`, %.
    pub ok_pct: f64,
    /// Mean attempts per client request.
    pub attempts_per_request: f64,
    /// Share of client requests answered by each provider of the chain, % (in chain order).
    pub served_by_pct: Vec<(String, f64)>,
    /// The client's latency (first send to the end of the answer) of successful requests.
    pub latency: Option<Percentiles>,
    /// The backups' own probes.
    pub backups: Vec<BackupHealth>,
}

fn pct(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// The failover rows of `plan` from merged results (empty without failover scenarios); a
/// backup's own probes are its attempts in the scenario minus those of client requests.
pub fn failover_rows(plan: &Plan, agg: &Aggregate) -> Vec<FailoverRow> {
    let mut rows = Vec::new();
    let regions = crate::load_stats::row_regions(plan, None);
    for s in &plan.scenarios {
        let Some(f) = &s.failover else { continue };
        let chain: Vec<String> = f
            .chain
            .iter()
            .map(|&p| plan.providers[p].name.clone())
            .collect();
        for region in &regions {
            let c = agg.failover_counts(*region, &s.name);
            let mut latency = None::<hdrhistogram::Histogram<u64>>;
            for p in &chain {
                let key = HistKey {
                    provider: p.clone(),
                    scenario: s.name.clone(),
                    metric: Metric::FailoverLatency,
                    step: 0,
                };
                if let Some(h) = agg.histogram(*region, &key) {
                    match &mut latency {
                        Some(acc) => acc.add(&h).expect("shared bounds"),
                        None => latency = Some(h),
                    }
                }
            }
            let ok: u64 = c.served_by.values().sum();
            let backups = chain[1..]
                .iter()
                .map(|b| {
                    let (probes, ok) = agg.plain_probes(*region, b, &s.name);
                    BackupHealth {
                        provider: b.clone(),
                        probes,
                        ok_pct: pct(ok, probes),
                    }
                })
                .collect();
            rows.push(FailoverRow {
                region: region.unwrap_or(ALL_REGIONS).to_string(),
                scenario: s.name.clone(),
                requests: c.requests,
                ok_pct: pct(ok, c.requests),
                attempts_per_request: if c.requests == 0 {
                    0.0
                } else {
                    c.attempts as f64 / c.requests as f64
                },
                served_by_pct: chain
                    .iter()
                    .map(|p| {
                        let n = c.served_by.get(p).copied().unwrap_or(0);
                        (p.clone(), pct(n, c.requests))
                    })
                    .collect(),
                chain: chain.clone(),
                latency: latency
                    .as_ref()
                    .map(|h| Percentiles::of_list(h, &plan.percentiles)),
                backups,
            });
        }
    }
    rows
}

/// A provider with politeness caps that still answered 429.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolitenessNote {
    /// Provider name.
    pub provider: String,
    /// Its caps, as written in the campaign (campaign-wide).
    pub caps: String,
    /// Throttled attempts over all regions and scenarios.
    pub throttled: u64,
}

/// Providers with caps that were throttled anyway: the agents kept within the caps, so the
/// provider's own limit is lower than configured.
pub fn politeness_notes(plan: &Plan, cells: &[MatrixCell]) -> Vec<PolitenessNote> {
    plan.providers
        .iter()
        .filter(|p| !p.limits.is_empty())
        .filter_map(|p| {
            let throttled: u64 = cells
                .iter()
                .filter(|c| c.region != ALL_REGIONS && c.provider == p.name)
                .map(|c| c.outcomes.get("throttled").copied().unwrap_or(0))
                .sum();
            let l = &p.limits;
            let caps: Vec<String> = [
                l.max_in_flight.map(|n| format!("max_in_flight {n}")),
                l.requests_per_min.map(|n| format!("requests_per_min {n}")),
                l.tokens_per_min.map(|n| format!("tokens_per_min {n}")),
                l.min_gap_ms.map(|n| format!("min_gap_ms {n}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            (throttled > 0).then(|| PolitenessNote {
                provider: p.name.clone(),
                caps: caps.join(", "),
                throttled,
            })
        })
        .collect()
}
