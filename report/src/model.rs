//! What a report shows, as numbers: [`ReportModel`], built from a [`ReportData`] (and the
//! sections only ClickHouse can give, [`Extras`]). The HTML, JSON and CSV renderings all read
//! this one model, so they carry the same numbers; the matrix cells are the summary's own.

use hdrhistogram::Histogram;
use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use serde::Serialize;

use latmesh_results::budget::BudgetSummary;
use latmesh_results::load_stats::{RateRow, SweepRow};
use latmesh_results::model_stats::ModelRow;
use latmesh_results::parity::CompatReport;
use latmesh_results::report_data::{ALL, ReportData};
use latmesh_results::slo_stats::{RateStepRow, SearchRow};
use latmesh_results::summary::MatrixCell;
use latmesh_results::tiers::{TierRow, TokenCountRow};
use latmesh_store::query::WindowsReport;
pub use latmesh_store::query::{Extras, TimePoint, TimeSeries};

/// Most points a CDF line keeps (evenly thinned beyond; the last point is always kept).
pub const CDF_MAX_POINTS: usize = 400;

/// Quantiles of the ITL spread, in order.
pub const SPREAD_QUANTILES: [f64; 6] = [0.05, 0.25, 0.5, 0.75, 0.95, 0.99];

/// A finished campaign's report, as numbers.
#[derive(Clone, Debug, Serialize)]
pub struct ReportModel {
    /// Where the numbers come from: `memory` (the coordinator that ran it) or `clickhouse`.
    pub source: String,
    /// What ran.
    pub campaign: CampaignFacts,
    /// The summary's matrix cells, verbatim (every region and `ALL`, every scenario).
    pub matrix: Vec<MatrixCell>,
    /// What `latmesh compat` measured for the campaign: compatibility checks per provider
    /// and quality parity (left out when it was not run).
    #[serde(skip_serializing_if = "CompatReport::is_empty")]
    pub compat: CompatReport,
    /// The summary's rows of what answered (per provider), verbatim.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelRow>,
    /// TTFT and E2E CDFs of every provider and scenario, all regions merged.
    pub cdfs: Vec<Cdf>,
    /// The ITL spread of every provider and scenario with ITL samples, all regions merged.
    pub itl: Vec<Spread>,
    /// The summary's sweep rows (every region and `ALL`).
    pub sweeps: Vec<SweepRow>,
    /// The open-loop rate rows (every region and `ALL`).
    pub rates: Vec<RateRow>,
    /// The summary's generated-prompt tier rows (every region and `ALL`), verbatim.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierRow>,
    /// The summary's token-count rows (per provider), verbatim.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub token_counts: Vec<TokenCountRow>,
    /// Per generated-prompt scenario: fresh words this run, or reused (the summary's).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub generated_text: std::collections::BTreeMap<String, latmesh_core::synth::TextMode>,
    /// Each scenario with an SLO and the SLO in one line ([`latmesh_core::slo::Slo::describe`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slos: Vec<(String, String)>,
    /// The summary's rate-step rows (every region and `ALL`), verbatim.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rate_steps: Vec<RateStepRow>,
    /// The summary's SLO search answers (every region and `ALL`), verbatim.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<SearchRow>,
    /// Peak vs off-peak (TTFT P50, E2E P50), when the plan has windows and the source keeps
    /// the window of each row (ClickHouse).
    pub windows: Vec<WindowsReport>,
    /// Per-provider latency over time, when the source keeps time (ClickHouse).
    pub time_series: Vec<TimeSeries>,
    /// Sections left out or cut short, and why.
    pub notes: Vec<Note>,
    /// The analysis ([`latmesh_results::analysis::Analysis`]) as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<serde_json::Value>,
    /// The analysis as an HTML fragment.
    #[serde(skip)]
    pub analysis_html: Option<String>,
}

/// The campaign's identity and state.
#[derive(Clone, Debug, Serialize)]
pub struct CampaignFacts {
    /// Campaign id.
    pub campaign_id: String,
    /// Campaign name.
    pub name: String,
    /// SHA-256 of the plan.
    pub plan_hash: String,
    /// Metric definitions version.
    pub metrics_version: u32,
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
    /// Regions, in plan order.
    pub regions: Vec<String>,
    /// Providers, in plan order.
    pub providers: Vec<String>,
    /// Scenarios and their load model (`rounds`, `sweep`, `rate`), in plan order.
    pub scenarios: Vec<(String, String)>,
    /// Agents that took part.
    pub agents: usize,
    /// Whether every agent delivered everything.
    pub complete: bool,
    /// Whether the campaign was cancelled.
    pub cancelled: bool,
    /// The agents' start skew line, when known.
    pub start_skew: Option<String>,
    /// Budget guard facts.
    pub budget: BudgetSummary,
}

/// A cumulative distribution: `points` are (value ms, fraction of samples ≤ value), one per
/// recorded HDR bucket (its highest equivalent value, what the percentiles report).
#[derive(Clone, Debug, Serialize)]
pub struct Cdf {
    /// Scenario.
    pub scenario: String,
    /// Provider.
    pub provider: String,
    /// `ttft` or `e2e`.
    pub metric: Metric,
    /// Samples in the merged histogram.
    pub samples: u64,
    /// (ms, cumulative fraction), ascending.
    pub points: Vec<(f64, f64)>,
}

/// A distribution summed up by its quantiles.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    /// Scenario.
    pub scenario: String,
    /// Provider.
    pub provider: String,
    /// The metric (`itl`).
    pub metric: Metric,
    /// Samples.
    pub samples: u64,
    /// (quantile, ms) at [`SPREAD_QUANTILES`].
    pub quantiles: Vec<(f64, f64)>,
}

impl Spread {
    /// The value at quantile `q` (one of [`SPREAD_QUANTILES`]), ms.
    pub fn at(&self, q: f64) -> Option<f64> {
        self.quantiles
            .iter()
            .find(|(x, _)| *x == q)
            .map(|(_, v)| *v)
    }
}

/// A section left out or cut short.
#[derive(Clone, Debug, Serialize)]
pub struct Note {
    /// Section id (`windows`, `time-series`, …).
    pub section: String,
    /// Why.
    pub text: String,
}

impl ReportModel {
    /// The model of `data`; `source` names where it came from, `extras` what only that
    /// source knows.
    pub fn build(data: &ReportData, source: &str, extras: Extras) -> ReportModel {
        let s = &data.summary;
        let mut notes = Vec::new();
        let mut cdfs = Vec::new();
        let mut itl = Vec::new();
        for scenario in &s.scenarios {
            for provider in &s.providers {
                for metric in [Metric::Ttft, Metric::E2e] {
                    if let Some(h) = data.hist(ALL, provider, scenario, metric) {
                        cdfs.push(Cdf {
                            scenario: scenario.clone(),
                            provider: provider.clone(),
                            metric,
                            samples: h.len(),
                            points: cdf_points(&h),
                        });
                    }
                }
                if let Some(h) = data.hist(ALL, provider, scenario, Metric::Itl) {
                    itl.push(Spread {
                        scenario: scenario.clone(),
                        provider: provider.clone(),
                        metric: Metric::Itl,
                        samples: h.len(),
                        quantiles: SPREAD_QUANTILES
                            .iter()
                            .map(|&q| (q, h.value_at_quantile(q) as f64 / 1000.0))
                            .collect(),
                    });
                }
            }
        }
        let rates = s.rates.clone();
        // Rate sweeps and SLO searches have rows per step (`rate_steps`), not rate rows.
        let has_rate_scenario = data.plan.scenarios.iter().any(|sc| {
            matches!(&sc.load, LoadModel::Rate(r) if !latmesh_results::slo_stats::has_rate_steps(r))
        });
        if has_rate_scenario && rates.is_empty() {
            notes.push(Note {
                section: "open-loop".into(),
                text: format!("open-loop rate rows are not available from {source}"),
            });
        }
        let windows = if data.plan.windows.is_empty() {
            Vec::new()
        } else {
            match extras.windows {
                Some(w) => w,
                None => {
                    notes.push(Note {
                        section: "windows".into(),
                        text: format!(
                            "the plan declares time windows, but the {source} results do not keep each request's window: run `latmesh report {}` against ClickHouse for peak vs off-peak",
                            s.campaign_id
                        ),
                    });
                    Vec::new()
                }
            }
        };
        let time_series = match extras.time_series {
            Some(t) => t,
            None => {
                notes.push(Note {
                    section: "time-series".into(),
                    text: format!(
                        "the {source} results merge every interval: latency over time comes from ClickHouse (`latmesh report {} --clickhouse-url …`, or `latmesh demo --clickhouse-url …`)",
                        s.campaign_id
                    ),
                });
                Vec::new()
            }
        };
        ReportModel {
            source: source.to_string(),
            campaign: CampaignFacts {
                campaign_id: s.campaign_id.clone(),
                name: s.name.clone(),
                plan_hash: s.plan_hash.clone(),
                metrics_version: s.metrics_version,
                start_at_unix_us: s.start_at_unix_us,
                regions: s.regions.clone(),
                providers: s.providers.clone(),
                scenarios: data
                    .plan
                    .scenarios
                    .iter()
                    .map(|sc| (sc.name.clone(), load_name(&sc.load).to_string()))
                    .collect(),
                agents: s.agents.len(),
                complete: s.complete,
                cancelled: s.cancelled,
                start_skew: s.start.line(),
                budget: s.guard.clone(),
            },
            matrix: s.cells.clone(),
            compat: data.compat.clone(),
            models: s.models.clone(),
            cdfs,
            itl,
            sweeps: s.sweeps.clone(),
            rates,
            tiers: s.tiers.clone(),
            token_counts: s.token_counts.clone(),
            generated_text: s.generated_text.clone(),
            slos: data
                .plan
                .scenarios
                .iter()
                .filter_map(|sc| Some((sc.name.clone(), sc.slo.as_ref()?.describe())))
                .collect(),
            rate_steps: s.rate_steps.clone(),
            searches: s.searches.clone(),
            windows,
            time_series,
            notes,
            analysis: None,
            analysis_html: None,
        }
    }

    /// The matrix cell of (`region`, `provider`, `scenario`).
    pub fn cell(&self, region: &str, provider: &str, scenario: &str) -> Option<&MatrixCell> {
        self.matrix
            .iter()
            .find(|c| c.region == region && c.provider == provider && c.scenario == scenario)
    }

    /// The note of `section`, if that section was left out.
    pub fn note(&self, section: &str) -> Option<&Note> {
        self.notes.iter().find(|n| n.section == section)
    }
}

/// `rounds`, `sweep` or `rate`.
pub fn load_name(load: &LoadModel) -> &'static str {
    match load {
        LoadModel::Sweep(_) => "sweep",
        LoadModel::Rate(_) => "rate",
        _ => "rounds",
    }
}

/// The CDF of `h`: (highest equivalent value of each recorded bucket in ms, fraction of
/// samples at or below it). With more than [`CDF_MAX_POINTS`] buckets it is thinned on the
/// fraction axis: the first bucket reaching each multiple of `1 / CDF_MAX_POINTS` is kept (and
/// the last), at most `CDF_MAX_POINTS + 1` points. The first point whose fraction reaches `q`
/// is HdrHistogram's `value_at_quantile(q)` — for every `q` without thinning, and for every
/// multiple of `1 / CDF_MAX_POINTS` (P50, P90, P95, P99, …) with it.
pub fn cdf_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let total = h.len();
    if total == 0 {
        return Vec::new();
    }
    let thin = h.iter_recorded().count() > CDF_MAX_POINTS;
    let levels = CDF_MAX_POINTS as u128;
    let mut cum = 0u64;
    // Keep a bucket when `cum / total ≥ next / levels` (in integers).
    let mut next = 0u128;
    let mut out = Vec::new();
    for v in h.iter_recorded() {
        cum += v.count_since_last_iteration();
        let reached = u128::from(cum) * levels;
        if !thin || reached >= next * u128::from(total) {
            next = reached / u128::from(total) + 1;
            out.push((
                h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0,
                cum as f64 / total as f64,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_reaches_each_quantile_at_value_at_quantile() {
        let mut h = latmesh_core::hist::new_histogram();
        for (v, n) in [(1_000u64, 3u64), (2_500, 5), (40_000, 1), (1_234_567, 1)] {
            h.record_n(v, n).unwrap();
        }
        let points = cdf_points(&h);
        assert_eq!(points.len(), 4);
        assert_eq!(points.last().unwrap().1, 1.0);
        for q in [0.1, 0.5, 0.8, 0.9, 0.99] {
            let first = points.iter().find(|(_, f)| *f >= q).unwrap();
            assert_eq!(first.0, h.value_at_quantile(q) as f64 / 1000.0, "q {q}");
        }
        let mut many = latmesh_core::hist::new_histogram();
        for v in 1..5_000u64 {
            many.record(v * 97).unwrap();
        }
        let thin = cdf_points(&many);
        assert!(thin.len() <= CDF_MAX_POINTS + 1, "{}", thin.len());
        assert_eq!(thin.last().unwrap().1, 1.0);
        // Thinned, the percentiles on the grid are still exact.
        for q in [0.5, 0.9, 0.95, 0.99] {
            let first = thin.iter().find(|(_, f)| *f >= q).unwrap();
            assert_eq!(first.0, many.value_at_quantile(q) as f64 / 1000.0, "q {q}");
        }
    }
}
