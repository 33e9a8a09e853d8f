//! The selection matrix: providers ranked per (scenario, region) by a weighted score of
//! latency, stability, price and the user's quality, compatibility and compliance scores,
//! from the plan's `[selection]` section ([`latmesh_core::selection`]).
//!
//! Each component gets a score in 0..=1 (1 best) per provider of the region:
//!
//! * **measured components, min–max across the region's providers, lower is better**:
//!   `score = (max − x) / (max − min)` over the providers that have a value `x` (all equal:
//!   1 for each). A provider without a value (no samples, no price) scores 0 there.
//!   - *latency*: `latency_metric` at `latency_percentile` from the region's merged histogram;
//!   - *stability*: the mean of two min–max scores: the error % of attempts (every non-`ok`
//!     outcome; `cancelled` and `dropped` left out) and the tail spread P99/P50 of
//!     `latency_metric` (when no provider has a spread, the error score alone);
//!   - *price*: USD per attempt = mean estimated prompt tokens of the scenario (its prompts
//!     and turns, at 4 bytes per token as in the budget estimate) × the input price + the
//!     cell's mean output tokens of `ok` attempts (`max_tokens` without any) × the output
//!     price; shown per 1000 attempts.
//! * **user components, absolute**: `score = value / score_scale` (quality, compatibility,
//!   compliance): the user already put them on one scale, and min–max would turn 8 vs 9 into
//!   0 vs 1.
//!
//! `total = Σ wᵢ · scoreᵢ / Σ wᵢ` (0..=1; components with weight 0 do not count). Providers
//! are ranked by total, highest first (ties: plan order).

use latmesh_core::budget;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::ScenarioSpec;
use latmesh_core::selection::{Selection, SelectionWeights};
use serde::Serialize;

use crate::report_data::ReportData;

/// One component of a provider's score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Component {
    /// The raw value (ms, %, USD per 1000 attempts, user score), when known.
    pub raw: Option<f64>,
    /// The normalized score, 0..=1 (1 best); `None` counts as 0 in the total.
    pub score: Option<f64>,
    /// The raw value in words (`"412 ms"`, `"err 1.2% · P99/P50 2.10"`, `"$0.21/1k"`, `"8/10"`).
    pub text: String,
}

/// One provider's line of a [`SelectionTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectionRow {
    /// 1 = best.
    pub rank: usize,
    /// Provider.
    pub provider: String,
    /// Weighted score, 0..=1.
    pub total: f64,
    /// Latency component.
    pub latency: Component,
    /// Stability component.
    pub stability: Component,
    /// Price component.
    pub price: Component,
    /// Quality component (user score).
    pub quality: Component,
    /// Compatibility component (user score).
    pub compatibility: Component,
    /// Compliance component (user score).
    pub compliance: Component,
}

impl SelectionRow {
    /// `(name, component)` in display order.
    pub fn components(&self) -> [(&'static str, &Component); 6] {
        [
            ("latency", &self.latency),
            ("stability", &self.stability),
            ("price", &self.price),
            ("quality", &self.quality),
            ("compatibility", &self.compatibility),
            ("compliance", &self.compliance),
        ]
    }
}

/// The ranked providers of one (scenario, region).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectionTable {
    /// Scenario.
    pub scenario: String,
    /// Region (or `ALL`).
    pub region: String,
    /// The latency metric.
    pub metric: Metric,
    /// Its percentile.
    pub percentile: f64,
    /// Weights divided by their sum.
    pub weights: SelectionWeights,
    /// Providers, best first.
    pub rows: Vec<SelectionRow>,
}

/// `(max − x) / (max − min)` over the `Some` values (1 when they are all equal).
pub fn min_max_lower_better(values: &[Option<f64>]) -> Vec<Option<f64>> {
    let have: Vec<f64> = values.iter().flatten().copied().collect();
    let (Some(min), Some(max)) = (
        have.iter().copied().reduce(f64::min),
        have.iter().copied().reduce(f64::max),
    ) else {
        return vec![None; values.len()];
    };
    values
        .iter()
        .map(|v| {
            v.map(|x| {
                if max > min {
                    (max - x) / (max - min)
                } else {
                    1.0
                }
            })
        })
        .collect()
}

/// Mean estimated prompt tokens of one attempt of `scenario` (every prompt, every turn).
fn mean_prompt_tokens(scenario: &ScenarioSpec) -> f64 {
    let turns = scenario.policy.turns.max(1);
    let mut sum = 0u64;
    let mut n = 0u64;
    for p in &scenario.prompts {
        for t in 1..=turns {
            sum += budget::prompt_tokens(scenario, p, t);
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum as f64 / n as f64 }
}

/// Selection tables for every scenario and every region (then `ALL`) with samples, when the
/// plan has `[selection]`.
pub fn tables(data: &ReportData) -> Vec<SelectionTable> {
    let Some(sel) = &data.plan.selection else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let rows: Vec<&str> = data
        .plan
        .regions
        .iter()
        .map(String::as_str)
        .chain([crate::report_data::ALL])
        .collect();
    for scenario in &data.plan.scenarios {
        for region in &rows {
            if let Some(t) = table(data, sel, scenario, region) {
                out.push(t);
            }
        }
    }
    out
}

/// The selection table of one (scenario, region); `None` when no provider has a cell there.
pub fn table(
    data: &ReportData,
    sel: &Selection,
    scenario: &ScenarioSpec,
    region: &str,
) -> Option<SelectionTable> {
    let providers = &data.plan.providers;
    let cells: Vec<_> = providers
        .iter()
        .map(|p| data.summary.cell(region, &p.name, &scenario.name))
        .collect();
    if cells.iter().all(|c| c.is_none_or(|c| c.attempts == 0)) {
        return None;
    }
    let q = sel.latency_percentile / 100.0;
    let hists: Vec<_> = providers
        .iter()
        .map(|p| {
            data.hist(region, &p.name, &scenario.name, sel.latency_metric)
                .filter(|h| !h.is_empty())
        })
        .collect();
    let latency: Vec<Option<f64>> = hists
        .iter()
        .map(|h| h.map(|h| h.value_at_quantile(q) as f64 / 1000.0))
        .collect();
    let errors: Vec<Option<f64>> = cells
        .iter()
        .map(|c| c.filter(|c| c.attempts > 0).map(|c| c.error_pct))
        .collect();
    let spread: Vec<Option<f64>> = hists
        .iter()
        .map(|h| {
            h.and_then(|h| {
                let p50 = h.value_at_quantile(0.5);
                (p50 > 0).then(|| h.value_at_quantile(0.99) as f64 / p50 as f64)
            })
        })
        .collect();
    let prompt_tokens = mean_prompt_tokens(scenario);
    let price: Vec<Option<f64>> = providers
        .iter()
        .zip(&cells)
        .map(|(p, c)| {
            let price = p.price.as_ref()?;
            let out_tokens = c
                .and_then(|c| c.output_tokens_mean)
                .unwrap_or(f64::from(scenario.max_tokens));
            Some(
                (prompt_tokens * price.input_usd_per_mtok + out_tokens * price.output_usd_per_mtok)
                    / 1e6
                    * 1000.0,
            )
        })
        .collect();
    let latency_s = min_max_lower_better(&latency);
    let error_s = min_max_lower_better(&errors);
    let spread_s = min_max_lower_better(&spread);
    let any_spread = spread.iter().any(Option::is_some);
    let price_s = min_max_lower_better(&price);
    let sum = sel.weights.sum();
    let w = &sel.weights;
    let weights = SelectionWeights {
        latency: w.latency / sum,
        stability: w.stability / sum,
        price: w.price / sum,
        quality: w.quality / sum,
        compatibility: w.compatibility / sum,
        compliance: w.compliance / sum,
    };
    let user = |name: &str, field: fn(&latmesh_core::selection::ProviderScores) -> Option<f64>| {
        let v = sel.scores.get(name).and_then(field);
        Component {
            raw: v,
            score: v.map(|v| (v / sel.score_scale).clamp(0.0, 1.0)),
            text: v.map_or("-".into(), |v| format!("{v}/{}", sel.score_scale)),
        }
    };
    let mut rows: Vec<SelectionRow> = providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let stability_score = match (error_s[i], spread_s[i]) {
                (Some(e), Some(s)) => Some((e + s) / 2.0),
                (Some(e), None) if !any_spread => Some(e),
                (Some(e), None) => Some(e / 2.0),
                (None, _) => None,
            };
            let row = SelectionRow {
                rank: 0,
                provider: p.name.clone(),
                total: 0.0,
                latency: Component {
                    raw: latency[i],
                    score: latency_s[i],
                    text: latency[i].map_or("no samples".into(), |v| {
                        format!("{} ms", super::stats::fmt_ms(v))
                    }),
                },
                stability: Component {
                    raw: errors[i],
                    score: stability_score,
                    text: match (errors[i], spread[i]) {
                        (Some(e), Some(s)) => format!("err {e:.1}% · P99/P50 {s:.2}"),
                        (Some(e), None) => format!("err {e:.1}%"),
                        _ => "no attempts".into(),
                    },
                },
                price: Component {
                    raw: price[i],
                    score: price_s[i],
                    text: price[i].map_or("no price".into(), |v| format!("${v:.3}/1k")),
                },
                quality: user(&p.name, |s| s.quality),
                compatibility: user(&p.name, |s| s.compatibility),
                compliance: user(&p.name, |s| s.compliance),
            };
            let total = weights.latency * row.latency.score.unwrap_or(0.0)
                + weights.stability * row.stability.score.unwrap_or(0.0)
                + weights.price * row.price.score.unwrap_or(0.0)
                + weights.quality * row.quality.score.unwrap_or(0.0)
                + weights.compatibility * row.compatibility.score.unwrap_or(0.0)
                + weights.compliance * row.compliance.score.unwrap_or(0.0);
            SelectionRow { total, ..row }
        })
        .collect();
    rows.sort_by(|a, b| b.total.total_cmp(&a.total));
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i + 1;
    }
    Some(SelectionTable {
        scenario: scenario.name.clone(),
        region: region.to_string(),
        metric: sel.latency_metric,
        percentile: sel.latency_percentile,
        weights,
        rows,
    })
}
