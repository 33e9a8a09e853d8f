//! Statistics over a finished campaign ([`ReportData`]): what the matrix's numbers can and
//! cannot tell apart.
//!
//! [`analyze`] computes, from the merged HDR histograms and the summary cells:
//!
//! * **percentile confidence intervals** ([`CellCis`]): P50, P95 and P99 of every (region or
//!   `ALL`, provider, scenario, metric) with a distribution-free 95 % interval from order
//!   statistics (Conover 1999; Hahn & Meeker 1991) — see [`stats`]; a percentile whose
//!   sample is too small to bound says so;
//! * **pairwise comparisons** ([`Comparison`]) per (region, scenario, metric, percentile):
//!   "A faster than B" only when A's interval lies entirely below B's, else "no clear
//!   difference" (or "not enough samples");
//! * **flags** ([`flags`]): P50 fast but tail high, usage/chunk token mismatches, output
//!   length far from the other providers', timeout rate above 0.1 %;
//! * **ranks and their stability** ([`ranks`]): each provider's rank per region (and per
//!   time window from ClickHouse, `latmesh_store::query::window_ranks`), its min/max/mean rank, and
//!   Kendall's W across regions;
//! * the **selection matrix** ([`selection`]) when the plan has `[selection]` weights: gates
//!   first ([`gates`]), then scores, ranks with ties.
//!
//! Metrics analysed ([`ANALYSED_METRICS`]): those with one value per request — TTFT, TTFC,
//! E2E, TPOT, the open-loop `ttft_intended` / `e2e_intended` and `failover_latency` — not ITL
//! (many correlated gaps per request break the independence the intervals assume), TTFB or
//! `sched_lag`.
//!
//! The CLI's `ui::analysis` prints a compact terminal view, reports embed an HTML
//! fragment (tables, no external resources), and the type serializes to JSON.

pub mod flags;
pub mod gates;
pub mod ranks;
pub mod selection;
pub mod text;

use latmesh_core::metrics::Metric;
use serde::Serialize;

pub use crate::stats::{PercentileCi, Verdict};
pub use flags::{Flag, FlagKind};
pub use gates::{GateKind, GateResult, GateStatus};
pub use ranks::{ProviderRanks, RankTable};
pub use selection::{ExcludedRow, SelectionRow, SelectionTable};

use crate::stats;

use crate::report_data::{ALL, ReportData};

/// Metrics the analysis looks at (one value per request), in report order.
pub const ANALYSED_METRICS: [Metric; 7] = [
    Metric::Ttft,
    Metric::Ttfc,
    Metric::E2e,
    Metric::Tpot,
    Metric::TtftIntended,
    Metric::E2eIntended,
    Metric::FailoverLatency,
];

/// The metrics the terminal view, the tail flags and the default ranking use: TTFT and E2E.
pub const PRIMARY_METRICS: [Metric; 2] = [Metric::Ttft, Metric::E2e];

/// P50, P95 and P99 of one (region, provider, scenario, metric) with their intervals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellCis {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Metric.
    pub metric: Metric,
    /// Samples in the merged histogram.
    pub n: u64,
    /// P50, P95, P99 in that order.
    pub percentiles: Vec<PercentileCi>,
}

impl CellCis {
    /// The entry of `percentile` (50, 95, 99).
    pub fn at(&self, percentile: f64) -> Option<&PercentileCi> {
        self.percentiles.iter().find(|p| p.percentile == percentile)
    }
}

/// Two providers compared at one percentile of one (region, scenario, metric).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Region, or `ALL`.
    pub region: String,
    /// Scenario.
    pub scenario: String,
    /// Metric.
    pub metric: Metric,
    /// 50, 95 or 99.
    pub percentile: f64,
    /// Provider A (earlier in plan order).
    pub a: String,
    /// Provider B.
    pub b: String,
    /// The verdict ([`stats::compare`]).
    pub verdict: Verdict,
    /// A's point estimate, ms.
    pub a_ms: f64,
    /// B's point estimate, ms.
    pub b_ms: f64,
}

/// Everything [`analyze`] finds (serializes to JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// Campaign id.
    pub campaign_id: String,
    /// Campaign name.
    pub name: String,
    /// Confidence level of every interval (0.95).
    pub confidence: f64,
    /// Regions in plan order (rows also include `ALL`).
    pub regions: Vec<String>,
    /// Providers in plan order.
    pub providers: Vec<String>,
    /// Scenarios in plan order.
    pub scenarios: Vec<String>,
    /// Percentile intervals of every cell and analysed metric with samples.
    pub cells: Vec<CellCis>,
    /// Every pair of providers at P50, P95 and P99 of every (region, scenario, metric).
    pub comparisons: Vec<Comparison>,
    /// Flags (tail, usage, output length, timeouts).
    pub flags: Vec<Flag>,
    /// Per scenario: each provider's rank in each region, and its stability.
    pub ranks: Vec<RankTable>,
    /// Per scenario: ranks per (region, time window) from ClickHouse; empty unless the caller
    /// added them (`latmesh_store::query::add_window_ranks`).
    pub window_ranks: Vec<RankTable>,
    /// Selection matrices per (scenario, region), when the plan has `[selection]`.
    pub selection: Vec<SelectionTable>,
}

impl Analysis {
    /// The intervals of one cell and metric.
    pub fn cell(
        &self,
        region: &str,
        provider: &str,
        scenario: &str,
        metric: Metric,
    ) -> Option<&CellCis> {
        self.cells.iter().find(|c| {
            c.region == region
                && c.provider == provider
                && c.scenario == scenario
                && c.metric == metric
        })
    }

    /// The comparison of `a` and `b` (either order: the verdict is turned around to read
    /// "`a` …") at one percentile.
    pub fn comparison(
        &self,
        region: &str,
        scenario: &str,
        metric: Metric,
        percentile: f64,
        a: &str,
        b: &str,
    ) -> Option<Verdict> {
        self.comparisons.iter().find_map(|c| {
            if c.region != region
                || c.scenario != scenario
                || c.metric != metric
                || c.percentile != percentile
            {
                return None;
            }
            if c.a == a && c.b == b {
                Some(c.verdict)
            } else if c.a == b && c.b == a {
                Some(match c.verdict {
                    Verdict::AFaster => Verdict::BFaster,
                    Verdict::BFaster => Verdict::AFaster,
                    v => v,
                })
            } else {
                None
            }
        })
    }

    /// The region rows in display order: `ALL` first, then the plan's regions.
    pub fn rows(&self) -> Vec<&str> {
        std::iter::once(ALL)
            .chain(self.regions.iter().map(String::as_str))
            .collect()
    }
}

/// The metric and percentile a scenario's providers are ranked by: the `[selection]`
/// latency metric and percentile when the plan has them, else TTFT P50 when the scenario has
/// TTFT samples, else E2E P50.
pub fn ranking_metric(data: &ReportData, scenario: &str) -> (Metric, f64) {
    if let Some(s) = &data.plan.selection {
        return (s.latency_metric, s.latency_percentile);
    }
    let has = |m: Metric| {
        data.hists
            .keys()
            .any(|k| k.scenario == scenario && k.metric == m)
    };
    if has(Metric::Ttft) || !has(Metric::E2e) {
        (Metric::Ttft, 50.0)
    } else {
        (Metric::E2e, 50.0)
    }
}

/// Analyses a finished campaign (see the [module docs](self)).
pub fn analyze(data: &ReportData) -> Analysis {
    let regions = data.plan.regions.clone();
    let providers: Vec<String> = data.plan.providers.iter().map(|p| p.name.clone()).collect();
    let scenarios: Vec<String> = data.plan.scenarios.iter().map(|s| s.name.clone()).collect();
    let rows: Vec<&str> = std::iter::once(ALL)
        .chain(regions.iter().map(String::as_str))
        .collect();
    let mut cells = Vec::new();
    let mut comparisons = Vec::new();
    for scenario in &scenarios {
        for metric in ANALYSED_METRICS {
            for region in &rows {
                let row: Vec<CellCis> = providers
                    .iter()
                    .filter_map(|p| {
                        let h = data.hist(region, p, scenario, metric)?;
                        (!h.is_empty()).then(|| CellCis {
                            region: region.to_string(),
                            provider: p.clone(),
                            scenario: scenario.clone(),
                            metric,
                            n: h.len(),
                            percentiles: stats::PERCENTILES
                                .iter()
                                .map(|&pc| PercentileCi::of(&h, pc))
                                .collect(),
                        })
                    })
                    .collect();
                for (i, a) in row.iter().enumerate() {
                    for b in &row[i + 1..] {
                        for (pa, pb) in a.percentiles.iter().zip(&b.percentiles) {
                            comparisons.push(Comparison {
                                region: region.to_string(),
                                scenario: scenario.clone(),
                                metric,
                                percentile: pa.percentile,
                                a: a.provider.clone(),
                                b: b.provider.clone(),
                                verdict: stats::compare(pa, pb),
                                a_ms: pa.estimate_ms,
                                b_ms: pb.estimate_ms,
                            });
                        }
                    }
                }
                cells.extend(row);
            }
        }
    }
    let mut analysis = Analysis {
        campaign_id: data.summary.campaign_id.clone(),
        name: data.summary.name.clone(),
        confidence: stats::CONFIDENCE,
        regions,
        providers,
        scenarios,
        cells,
        comparisons,
        flags: Vec::new(),
        ranks: Vec::new(),
        window_ranks: Vec::new(),
        selection: Vec::new(),
    };
    analysis.flags = flags::flags(data, &analysis);
    analysis.ranks = ranks::region_ranks(data, &analysis);
    analysis.selection = selection::tables(data);
    analysis
}
