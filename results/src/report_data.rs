//! What reports and their analysis are made from: a finished campaign's summary, its plan, and
//! its merged HDR histograms per cell and metric (the exact distributions, not percentiles),
//! whether it was just run in this process ([`ReportData::from_aggregate`]) or read back from
//! ClickHouse.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::hist::HistKey;
use latmesh_core::hist_sparse::SparseHistogram;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;

use crate::aggregate::Aggregate;
use crate::summary::Summary;

/// Region name of the row that merges every region.
pub const ALL: &str = "ALL";

/// One cell and metric: `region` (or [`ALL`]), provider, scenario, metric.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CellMetric {
    /// A region of the plan, or [`ALL`].
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// Scenario name.
    pub scenario: String,
    /// Metric (values in µs).
    pub metric: Metric,
}

/// A finished campaign, ready for reports.
#[derive(Clone, Debug)]
pub struct ReportData {
    /// The summary (matrix cells, sweeps, rates, agents, start skew, budget).
    pub summary: Summary,
    /// The plan it ran.
    pub plan: Plan,
    /// Merged histograms of `ok` attempts, µs, every sweep step merged; one per cell and
    /// metric that has samples, for every region and [`ALL`]. Kept sparse (the non-empty
    /// buckets, a few KB each, where a dense histogram over latmesh's range is ~190 KB:
    /// thousands of cells made the demo's report data half a gigabyte); [`ReportData::hist`]
    /// gives the dense one, equal in every count.
    pub hists: BTreeMap<CellMetric, SparseHistogram>,
    /// What `latmesh compat` measured for this campaign (compatibility checks, quality
    /// parity); empty when it was not run.
    pub compat: crate::parity::CompatReport,
}

impl ReportData {
    /// From the coordinator's merged results of the campaign.
    pub fn from_aggregate(summary: Summary, plan: Plan, agg: &Aggregate) -> ReportData {
        let mut hists = BTreeMap::new();
        let regions = crate::load_stats::row_regions(&plan, None);
        for region in &regions {
            for p in &plan.providers {
                for s in &plan.scenarios {
                    for metric in Metric::ALL {
                        let key = HistKey {
                            provider: p.name.clone(),
                            scenario: s.name.clone(),
                            metric,
                            step: 0,
                        };
                        if let Some(h) = agg.histogram(*region, &key) {
                            insert_hist(
                                &mut hists,
                                CellMetric {
                                    region: region.unwrap_or(ALL).to_string(),
                                    provider: p.name.clone(),
                                    scenario: s.name.clone(),
                                    metric,
                                },
                                &h,
                            );
                        }
                    }
                }
            }
        }
        ReportData {
            summary,
            plan,
            hists,
            compat: Default::default(),
        }
    }

    /// The merged histogram of one cell and metric, if it has samples: dense, built from the
    /// kept buckets on each call (one ~190 KB allocation, freed by the caller).
    pub fn hist(
        &self,
        region: &str,
        provider: &str,
        scenario: &str,
        metric: Metric,
    ) -> Option<Histogram<u64>> {
        self.hists
            .get(&CellMetric {
                region: region.to_string(),
                provider: provider.to_string(),
                scenario: scenario.to_string(),
                metric,
            })
            .map(SparseHistogram::to_histogram)
    }
}

/// Puts `h` into `hists` under `cell`, kept sparse ([`ReportData::hists`]).
///
/// # Panics
/// When `h` holds values beyond latmesh's histogram bounds (every histogram latmesh records,
/// merges or reads back has them).
pub fn insert_hist(
    hists: &mut BTreeMap<CellMetric, SparseHistogram>,
    cell: CellMetric,
    h: &Histogram<u64>,
) {
    let sparse = SparseHistogram::from_histogram(h).expect("a histogram in latmesh's bounds");
    hists.insert(cell, sparse);
}
