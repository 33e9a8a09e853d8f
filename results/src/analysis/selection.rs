//! The selection matrix: providers ranked per (scenario, region) by a weighted score of
//! latency, stability, price and the user's quality, compatibility and compliance scores,
//! from the plan's `[selection]` section ([`latmesh_core::selection`]).
//!
//! Each component gets a score in 0..=1 (1 best) per provider of the region, and the table
//! shows every component's raw value next to its score:
//!
//! * **latency** and **price**, *relative to the median* of the region's providers, on a log
//!   scale ([`relative_to_median`]): `score = clamp(0.5 − log₂(x / median) / 2, 0, 1)` — 0.5
//!   at the median, 1 at half of it or less, 0 at twice of it or more (20 % above the median:
//!   0.37). The median of three or more providers does not move with one outlier, and the
//!   scale is fixed, so one very slow (or very expensive) provider scores 0 without pressing
//!   the others' scores together (min–max did: one 5 s outlier put every other latency score
//!   within 0.90–1.00, so price decided).
//!   - *latency*: `latency_metric` at `latency_percentile` from the region's merged
//!     histogram, **when the samples support that percentile** (`n ≥`
//!     [`stats::min_samples`]: P50 6, P95 72, P99 368); an unsupported one is marked
//!     (`unsupported`, the text says `n 40 < 368`), left out of the median and scored 0, as a
//!     missing value is;
//!   - *price*: USD per attempt = mean estimated prompt tokens of the scenario (its prompts
//!     and turns, at 4 bytes per token as in the budget estimate) × the input price + the
//!     cell's mean output tokens of `ok` attempts (`max_tokens` without any) × the output
//!     price; shown per 1000 attempts.
//! * **stability**: the share of attempts that worked, absolute and conservative:
//!   `score = 1 − u` with `u` the upper bound of the 95 % Wilson interval of the failure rate
//!   (every non-`ok` attempt — throttled, timed out, 5xx, truncated…; `cancelled` and
//!   `dropped` left out; [`latmesh_core::proportion`]). A provider failing 92 % of attempts
//!   scores under 0.1 whatever its successes look like; 0 failures in 12 attempts score
//!   0.76, in 1000 attempts 0.996. The latency spread of the successes is not part of it
//!   (choose `latency_percentile = 95` or `99` to rank by the tail).
//! * **latency and price count every attempt**: both scores are multiplied by the share of
//!   attempts that worked (`ok` / attempts, the same attempts as stability's), so a failed
//!   attempt scores 0 in them, as the slowest and most expensive answer would: a provider
//!   answering a quarter of its requests fast keeps a quarter of its latency score (its
//!   successes alone would make it the fastest). The raw value shown is still the successes'
//!   latency and the price of an attempt; the text adds `× ok 25%` when the share is below 1.
//! * **user components, absolute**: `score = value / score_scale` (quality, compatibility,
//!   compliance): the user already put them on one scale.
//! * **measured quality and compatibility**: where the user gave no `quality` /
//!   `compatibility` score for a provider, the one `latmesh compat` measured
//!   (`ReportData::compat`, [`crate::parity::CompatReport::measured`]): the quality-parity
//!   accuracy (text `measured 94% accuracy (90/96)`) and the compatibility checks' score
//!   (`measured 82% (9/11 checks)`), both already 0..=1; the raw value is the percentage. A
//!   user score still overrides (text `8/10`).
//!
//! A provider without a value (no attempts, no samples, no price) scores 0 in that component.
//! `total = Σ wᵢ · scoreᵢ / Σ wᵢ` (0..=1; components with weight 0 do not count), so each
//! component moves the total by at most its weight.
//!
//! **Gates before scores** ([`super::gates`]): a provider that *failed* a gate (failure rate
//! significantly above `max_failed_pct`, a missed SLO, a required compat check not passed)
//! is not ranked: it is listed in [`SelectionTable::excluded`] with its reasons. The others
//! are ranked in groups: first those at risk on no gate, then those at risk on one, and so
//! on ([`SelectionRow::at_risk`]).
//!
//! **Ranks with ties**: each total has an interval ([`SelectionRow::total_interval`]): the
//! total with the latency component scored at the upper and at the lower bound of the
//! latency percentile's 95 % interval ([`stats::PercentileCi`]; a percentile without an
//! interval spans the whole latency score, 0 to its weight × the `ok` share). Within a group,
//! a provider's rank is 1 + the providers of its group (and of every group before it) whose
//! interval lies entirely above its own; providers that share a rank are tied (`2=`). Rows
//! are listed by group, rank, then total.

use latmesh_core::budget;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::ScenarioSpec;
use latmesh_core::selection::{Selection, SelectionGates, SelectionWeights};
use serde::Serialize;

use super::gates::{self, GateResult, GateStatus};
use crate::report_data::ReportData;
use crate::stats;

/// One component of a provider's score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Component {
    /// The raw value (ms, %, USD per 1000 attempts, user score), when known.
    pub raw: Option<f64>,
    /// The normalized score, 0..=1 (1 best); `None` counts as 0 in the total.
    pub score: Option<f64>,
    /// The raw value in words (`"412 ms"`, `"P99 unsupported (n 40 < 368)"`, `"err 1.2% of
    /// 500"`, `"$0.21/1k req"`, `"8/10"`).
    pub text: String,
    /// The latency percentile is not supported by the samples (scored 0).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsupported: bool,
}

/// One provider's line of a [`SelectionTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectionRow {
    /// 1 = best; providers whose total intervals do not separate share a rank.
    pub rank: usize,
    /// Whether another row has the same rank (shown `2=`).
    pub tied: bool,
    /// How many gates the provider is at risk on (0: passed or undecided on every one); rows
    /// with fewer rank before rows with more.
    pub at_risk: usize,
    /// Provider.
    pub provider: String,
    /// Weighted score, 0..=1.
    pub total: f64,
    /// The total's interval (low, high), from the latency percentile's 95 % interval.
    pub total_interval: (f64, f64),
    /// Every gate's result (passed ones included).
    pub gates: Vec<GateResult>,
    /// Latency component.
    pub latency: Component,
    /// Stability component.
    pub stability: Component,
    /// Price component.
    pub price: Component,
    /// Quality component (user score, else the measured accuracy).
    pub quality: Component,
    /// Compatibility component (user score, else the measured checks' score).
    pub compatibility: Component,
    /// Compliance component (user score).
    pub compliance: Component,
}

impl SelectionRow {
    /// The rank as shown: `2`, or `2=` when tied.
    pub fn rank_text(&self) -> String {
        format!("{}{}", self.rank, if self.tied { "=" } else { "" })
    }

    /// The gates that are not plainly passed, `; `-joined (empty when none): at risk with
    /// their figures, undecided in two words (`failure rate undecided`; the figures are in
    /// [`SelectionRow::gates`]).
    pub fn gate_notes(&self) -> String {
        self.gates
            .iter()
            .filter_map(|g| match g.status {
                GateStatus::Passed => None,
                GateStatus::Undecided => Some(format!("{} {}", g.gate.as_str(), g.status.as_str())),
                GateStatus::AtRisk | GateStatus::Failed => Some(g.text()),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

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
    /// The gates applied.
    pub gates: SelectionGates,
    /// Ranked providers, best first.
    pub rows: Vec<SelectionRow>,
    /// Providers that failed a gate, not ranked (plan order).
    pub excluded: Vec<ExcludedRow>,
}

/// A provider a gate excluded from one [`SelectionTable`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExcludedRow {
    /// Provider.
    pub provider: String,
    /// Every gate's result (the failed ones are the reasons).
    pub gates: Vec<GateResult>,
}

impl ExcludedRow {
    /// The failed gates in words, `; `-joined.
    pub fn reasons(&self) -> String {
        self.gates
            .iter()
            .filter(|g| g.status == GateStatus::Failed)
            .map(GateResult::text)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Ranks of rows with total intervals `intervals` (low, high) in rank groups `groups` (rows
/// of a lower group rank first): `1 +` the rows of earlier groups `+` the rows of the same
/// group whose interval lies entirely above the row's (their low above its high); `(rank,
/// tied)` with `tied` when another row has the same rank. Ties never cross groups (a group's
/// ranks stay within its size).
pub fn tied_ranks(intervals: &[(f64, f64)], groups: &[usize]) -> Vec<(usize, bool)> {
    let ranks: Vec<usize> = intervals
        .iter()
        .zip(groups)
        .map(|(&(_, high), &g)| {
            let earlier = groups.iter().filter(|&&o| o < g).count();
            let above = intervals
                .iter()
                .zip(groups)
                .filter(|&(&(low, _), &o)| o == g && low > high)
                .count();
            1 + earlier + above
        })
        .collect();
    ranks
        .iter()
        .enumerate()
        .map(|(i, &r)| (r, ranks.iter().enumerate().any(|(j, &o)| j != i && o == r)))
        .collect()
}

/// Scores of `values` relative to their median, lower is better, on a log scale:
/// `clamp(0.5 − log₂(x / median) / 2, 0, 1)` over the `Some` values (the median of those);
/// `x ≤ 0` scores 1; with a median ≤ 0, values ≤ 0 score 1 and the others 0.
pub fn relative_to_median(values: &[Option<f64>]) -> Vec<Option<f64>> {
    let have: Vec<f64> = values.iter().flatten().copied().collect();
    let Some(median) = stats::median(&have) else {
        return vec![None; values.len()];
    };
    values
        .iter()
        .map(|v| {
            v.map(|x| {
                if x <= 0.0 {
                    1.0
                } else if median <= 0.0 {
                    0.0
                } else {
                    (0.5 - (x / median).log2() / 2.0).clamp(0.0, 1.0)
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

/// The quality component measured by `latmesh compat` (the quality-parity accuracy, 0..=1:
/// `measured 94% accuracy (90/96)`), when it ran for `provider`.
fn measured_quality(data: &ReportData, provider: &str) -> Option<Component> {
    let v = data.compat.measured().get(provider)?.quality?;
    let q = data.compat.quality.as_ref()?;
    let row = q.providers.iter().find(|r| r.provider == provider)?;
    Some(Component {
        raw: Some(v * 100.0),
        score: Some(v.clamp(0.0, 1.0)),
        text: format!(
            "measured {:.0}% accuracy ({}/{})",
            v * 100.0,
            row.correct,
            row.graded
        ),
        unsupported: false,
    })
}

/// The compatibility component measured by `latmesh compat` (the checks' score, 0..=1:
/// `measured 82% (9/11 checks)`), when it ran for `provider`.
fn measured_compatibility(data: &ReportData, provider: &str) -> Option<Component> {
    let v = data.compat.measured().get(provider)?.compatibility?;
    let c = data.compat.compat.iter().find(|c| c.provider == provider)?;
    let s = c.score?;
    Some(Component {
        raw: Some(v * 100.0),
        score: Some(v.clamp(0.0, 1.0)),
        text: format!(
            "measured {:.0}% ({}/{} checks)",
            v * 100.0,
            s.passed,
            s.counted
        ),
        unsupported: false,
    })
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
    let need = stats::min_samples(q);
    let hists: Vec<_> = providers
        .iter()
        .map(|p| {
            data.hist(region, &p.name, &scenario.name, sel.latency_metric)
                .filter(|h| !h.is_empty())
        })
        .collect();
    // (point estimate ms, supported)
    let measured: Vec<Option<(f64, bool)>> = hists
        .iter()
        .map(|h| {
            h.as_ref()
                .map(|h| (h.value_at_quantile(q) as f64 / 1000.0, h.len() >= need))
        })
        .collect();
    // The latency percentile's 95 % interval (lower ms, upper ms), where the samples give one.
    let latency_ci: Vec<Option<(f64, f64)>> = hists
        .iter()
        .map(|h| {
            h.as_ref()
                .and_then(|h| stats::PercentileCi::of(h, sel.latency_percentile).ci)
                .map(|c| (c.lower_ms, c.upper_ms))
        })
        .collect();
    let latency: Vec<Option<f64>> = measured
        .iter()
        .map(|m| m.filter(|(_, ok)| *ok).map(|(v, _)| v))
        .collect();
    let failures: Vec<Option<(u64, u64)>> = cells
        .iter()
        .map(|c| {
            c.map(crate::aggregate::failed_attempts)
                .filter(|(_, n)| *n > 0)
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
    let latency_s = relative_to_median(&latency);
    // The latency score at one value, against the same median as `latency_s`.
    let latency_median = stats::median(&latency.iter().flatten().copied().collect::<Vec<_>>());
    let latency_score_at = |ms: f64| -> f64 {
        match latency_median {
            _ if ms <= 0.0 => 1.0,
            Some(m) if m > 0.0 => (0.5 - (ms / m).log2() / 2.0).clamp(0.0, 1.0),
            _ => 0.0,
        }
    };
    let price_s = relative_to_median(&price);
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
        sel.scores.get(name).and_then(field).map(|v| Component {
            raw: Some(v),
            score: Some((v / sel.score_scale).clamp(0.0, 1.0)),
            text: format!("{v}/{}", sel.score_scale),
            unsupported: false,
        })
    };
    let none = || Component {
        raw: None,
        score: None,
        text: "-".into(),
        unsupported: false,
    };
    let pct = format!("P{}", sel.latency_percentile);
    let rows: Vec<SelectionRow> = providers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let latency_text = match (measured[i], &hists[i]) {
                (Some((v, true)), _) => format!("{} ms", stats::fmt_ms(v)),
                (Some(_), Some(h)) => format!("{pct} unsupported (n {} < {need})", h.len()),
                _ => "no samples".into(),
            };
            let wilson = failures[i].and_then(|(k, n)| latmesh_core::proportion::wilson(k, n));
            // Share of attempts that worked: latency and price count a failed attempt as 0.
            let ok_share = failures[i].map_or(0.0, |(k, n)| 1.0 - k as f64 / n as f64);
            let per_attempt = |score: Option<f64>| score.map(|v| v * ok_share);
            let share_text = if ok_share < 1.0 {
                format!(" × ok {:.0}%", ok_share * 100.0)
            } else {
                String::new()
            };
            let row = SelectionRow {
                rank: 0,
                tied: false,
                at_risk: 0,
                provider: p.name.clone(),
                total: 0.0,
                total_interval: (0.0, 0.0),
                gates: Vec::new(),
                latency: Component {
                    raw: measured[i].map(|(v, _)| v),
                    score: match measured[i] {
                        Some((_, false)) => Some(0.0),
                        _ => per_attempt(latency_s[i]),
                    },
                    text: format!("{latency_text}{share_text}"),
                    unsupported: measured[i].is_some_and(|(_, ok)| !ok),
                },
                stability: Component {
                    raw: wilson.map(|w| w.point() * 100.0),
                    score: wilson.map(|w| 1.0 - w.upper),
                    text: wilson.map_or("no attempts".into(), |w| {
                        format!("err {:.1}% of {}", w.point() * 100.0, w.n)
                    }),
                    unsupported: false,
                },
                price: Component {
                    raw: price[i],
                    score: per_attempt(price_s[i]),
                    text: price[i]
                        .map_or("no price".into(), |v| format!("${v:.3}/1k req{share_text}")),
                    unsupported: false,
                },
                quality: user(&p.name, |s| s.quality)
                    .or_else(|| measured_quality(data, &p.name))
                    .unwrap_or_else(none),
                compatibility: user(&p.name, |s| s.compatibility)
                    .or_else(|| measured_compatibility(data, &p.name))
                    .unwrap_or_else(none),
                compliance: user(&p.name, |s| s.compliance).unwrap_or_else(none),
            };
            let latency_score = row.latency.score.unwrap_or(0.0);
            let total = weights.latency * latency_score
                + weights.stability * row.stability.score.unwrap_or(0.0)
                + weights.price * row.price.score.unwrap_or(0.0)
                + weights.quality * row.quality.score.unwrap_or(0.0)
                + weights.compatibility * row.compatibility.score.unwrap_or(0.0)
                + weights.compliance * row.compliance.score.unwrap_or(0.0);
            // The latency score's range: at the interval's ends, or anything from 0 to the
            // `ok` share without an interval (a percentile the samples do not support).
            let (lat_low, lat_high) = match (latency_ci[i], measured[i]) {
                (Some((lo_ms, hi_ms)), Some((_, true))) => (
                    latency_score_at(hi_ms) * ok_share,
                    latency_score_at(lo_ms) * ok_share,
                ),
                (_, Some(_)) => (0.0, ok_share),
                (_, None) => (0.0, 0.0),
            };
            let rest = total - weights.latency * latency_score;
            let total_interval = (
                (rest + weights.latency * lat_low).min(total),
                (rest + weights.latency * lat_high).max(total),
            );
            SelectionRow {
                total,
                total_interval,
                gates: gates::evaluate(&sel.gates, scenario, cells[i], &data.compat, &p.name),
                ..row
            }
        })
        .collect();
    let (excluded, mut rows): (Vec<SelectionRow>, Vec<SelectionRow>) = rows
        .into_iter()
        .partition(|r| r.gates.iter().any(|g| g.status == GateStatus::Failed));
    for r in &mut rows {
        r.at_risk = r
            .gates
            .iter()
            .filter(|g| g.status == GateStatus::AtRisk)
            .count();
    }
    let intervals: Vec<(f64, f64)> = rows.iter().map(|r| r.total_interval).collect();
    let groups: Vec<usize> = rows.iter().map(|r| r.at_risk).collect();
    for (r, (rank, tied)) in rows.iter_mut().zip(tied_ranks(&intervals, &groups)) {
        r.rank = rank;
        r.tied = tied;
    }
    rows.sort_by(|a, b| a.rank.cmp(&b.rank).then(b.total.total_cmp(&a.total)));
    Some(SelectionTable {
        scenario: scenario.name.clone(),
        region: region.to_string(),
        metric: sel.latency_metric,
        percentile: sel.latency_percentile,
        weights,
        gates: sel.gates.clone(),
        rows,
        excluded: excluded
            .into_iter()
            .map(|r| ExcludedRow {
                provider: r.provider,
                gates: r.gates,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_tie_where_the_intervals_overlap_and_groups_rank_in_order() {
        // a [0.80, 0.90], b [0.75, 0.85] overlap: 1=, 1=; c [0.60, 0.78] lies below a only:
        // rank 2; d (at risk on one gate) ranks after every row of group 0.
        let r = tied_ranks(
            &[(0.80, 0.90), (0.75, 0.85), (0.60, 0.78), (0.95, 0.99)],
            &[0, 0, 0, 1],
        );
        assert_eq!(r, [(1, true), (1, true), (2, false), (4, false)]);
        // Separated intervals: 1, 2, 3.
        let r = tied_ranks(&[(0.9, 0.95), (0.7, 0.8), (0.5, 0.6)], &[0, 0, 0]);
        assert_eq!(r, [(1, false), (2, false), (3, false)]);
        // Two at risk tie among themselves, after the one clean row.
        let r = tied_ranks(&[(0.1, 0.2), (0.5, 0.9), (0.4, 0.6)], &[0, 1, 1]);
        assert_eq!(r, [(1, false), (2, true), (2, true)]);
    }

    #[test]
    fn relative_to_median_scores() {
        let s = relative_to_median(&[Some(100.0), Some(200.0), Some(400.0), None]);
        assert_eq!(s, [Some(1.0), Some(0.5), Some(0.0), None]);
    }
}
