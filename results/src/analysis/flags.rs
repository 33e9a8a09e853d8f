//! Flags: things in a campaign's numbers worth a second look.
//!
//! * [`FlagKind::TailHigh`] — *P50 fast but tail high*, per (region or `ALL`, scenario,
//!   metric in [`PRIMARY_METRICS`]) among the `m ≥ 3` providers with
//!   samples, ranked by point estimate (1 = fastest, ties by plan order), with
//!   `t = ⌈m / 3⌉`: a provider is flagged when **either**
//!   - its P50 ranks in the best third (rank ≤ t) while its P95 or its P99 ranks in the worst
//!     third (rank > m − t), **or**
//!   - its tail ratio P99/P50 is at least [`TAIL_RATIO_FACTOR`] (2×) the median of the
//!     providers' tail ratios.
//!
//!   Flags use point estimates (they describe, they do not test); `confident` says whether
//!   every percentile involved has a confidence interval (enough samples).
//! * [`FlagKind::UsageMismatch`] — on the `ALL` row of a (provider, scenario): `ok`
//!   event-stream attempts whose `usage.completion_tokens` differed from the token-bearing
//!   payloads counted (`usage_chunk_mismatches > 0`; a body read whole has no delta), with the
//!   mean delta and how many took the payload count as output tokens (`tokens_over_usage`).
//! * [`FlagKind::OutputLength`] — on the `ALL` row, among the `≥ 3` providers of a scenario
//!   with `ok` attempts: mean output tokens above [`OUTPUT_HIGH`] (1.5×) or below
//!   [`OUTPUT_LOW`] (1/1.5 ≈ 0.67×) the median of the providers' means. (The summary keeps the
//!   mean output tokens per cell, not a median; the median is taken across providers.)
//! * [`FlagKind::Timeouts`] — per region cell: attempts that timed out (`timeout_connect`,
//!   `timeout_ttft`, `timeout_idle`, `timeout_total`) above [`TIMEOUT_PCT`] (0.1 %) of the
//!   attempts counted in error rates (`cancelled` and `dropped` left out).

use latmesh_core::metrics::Metric;
use serde::Serialize;

use super::{Analysis, PRIMARY_METRICS};
use crate::report_data::{ALL, ReportData};
use crate::stats::{fmt_ms, median};

/// A tail ratio at least this many times the median ratio is flagged.
pub const TAIL_RATIO_FACTOR: f64 = 2.0;
/// Mean output tokens above this multiple of the median of the providers' means is flagged.
pub const OUTPUT_HIGH: f64 = 1.5;
/// Mean output tokens below this multiple of the median of the providers' means is flagged.
pub const OUTPUT_LOW: f64 = 1.0 / 1.5;
/// Timeouts above this % of attempts are flagged.
pub const TIMEOUT_PCT: f64 = 0.1;

/// What a flag is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagKind {
    /// P50 fast but tail high.
    TailHigh,
    /// Provider-reported usage disagrees with the counted token payloads.
    UsageMismatch,
    /// Output length far from the other providers'.
    OutputLength,
    /// Timeout rate above 0.1 %.
    Timeouts,
}

impl FlagKind {
    /// Short name (`tail`, `usage`, `output`, `timeouts`).
    pub fn as_str(self) -> &'static str {
        match self {
            FlagKind::TailHigh => "tail",
            FlagKind::UsageMismatch => "usage",
            FlagKind::OutputLength => "output",
            FlagKind::Timeouts => "timeouts",
        }
    }
}

/// One flag.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Flag {
    /// What it is about.
    pub kind: FlagKind,
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// The metric, for tail flags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// Whether every number involved is backed by enough samples (tail flags: every
    /// percentile has an interval; others: true).
    pub confident: bool,
    /// What was seen, in words.
    pub detail: String,
}

/// Every flag of `data` (tail flags from `analysis.cells`).
pub fn flags(data: &ReportData, analysis: &Analysis) -> Vec<Flag> {
    let mut out = Vec::new();
    for scenario in &analysis.scenarios {
        for metric in PRIMARY_METRICS {
            for region in analysis.rows() {
                out.extend(tail_flags(analysis, region, scenario, metric));
            }
        }
        out.extend(output_flags(data, analysis, scenario));
        for provider in &analysis.providers {
            if let Some(c) = data.summary.cell(ALL, provider, scenario)
                && c.usage_chunk_mismatches > 0
            {
                out.push(Flag {
                    kind: FlagKind::UsageMismatch,
                    region: ALL.into(),
                    provider: provider.clone(),
                    scenario: scenario.clone(),
                    metric: None,
                    confident: true,
                    detail: format!(
                        "{} of {} ok attempts: usage.completion_tokens ≠ token payloads counted (mean delta {:+.1} tokens){}",
                        c.usage_chunk_mismatches,
                        c.samples,
                        c.usage_chunk_delta_mean.unwrap_or(0.0),
                        if c.tokens_over_usage > 0 {
                            format!(
                                "; {} used the payload count (usage counted fewer tokens than streamed)",
                                c.tokens_over_usage
                            )
                        } else {
                            String::new()
                        }
                    ),
                });
            }
            for region in &analysis.regions {
                let Some(c) = data.summary.cell(region, provider, scenario) else {
                    continue;
                };
                let count = |name: &str| c.outcomes.get(name).copied().unwrap_or(0);
                let timeouts: u64 = c
                    .outcomes
                    .iter()
                    .filter(|(o, _)| o.starts_with("timeout"))
                    .map(|(_, n)| n)
                    .sum();
                let measured = c
                    .attempts
                    .saturating_sub(count("cancelled"))
                    .saturating_sub(count("dropped"));
                if measured == 0 {
                    continue;
                }
                let pct = timeouts as f64 * 100.0 / measured as f64;
                if pct > TIMEOUT_PCT {
                    out.push(Flag {
                        kind: FlagKind::Timeouts,
                        region: region.clone(),
                        provider: provider.clone(),
                        scenario: scenario.clone(),
                        metric: None,
                        confident: true,
                        detail: format!(
                            "{pct:.2}% of attempts timed out ({timeouts} of {measured}; limit {TIMEOUT_PCT}%)"
                        ),
                    });
                }
            }
        }
    }
    out
}

/// Ranks (1-based) by value ascending, ties in input order.
fn ranks_of(values: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| values[a].total_cmp(&values[b]).then(a.cmp(&b)));
    let mut ranks = vec![0; values.len()];
    for (r, i) in idx.into_iter().enumerate() {
        ranks[i] = r + 1;
    }
    ranks
}

fn tail_flags(analysis: &Analysis, region: &str, scenario: &str, metric: Metric) -> Vec<Flag> {
    let row: Vec<_> = analysis
        .providers
        .iter()
        .filter_map(|p| analysis.cell(region, p, scenario, metric))
        .filter(|c| c.at(50.0).is_some_and(|p| p.estimate_ms > 0.0))
        .collect();
    let m = row.len();
    if m < 3 {
        return Vec::new();
    }
    let t = m.div_ceil(3);
    let est = |pc: f64| -> Vec<f64> {
        row.iter()
            .map(|c| c.at(pc).map_or(f64::NAN, |p| p.estimate_ms))
            .collect()
    };
    let (p50, p95, p99) = (est(50.0), est(95.0), est(99.0));
    let (r50, r95, r99) = (ranks_of(&p50), ranks_of(&p95), ranks_of(&p99));
    let ratios: Vec<f64> = p99.iter().zip(&p50).map(|(a, b)| a / b).collect();
    let med = median(&ratios).unwrap_or(f64::NAN);
    let mut out = Vec::new();
    for (i, c) in row.iter().enumerate() {
        let best = r50[i] <= t;
        let worst95 = r95[i] > m - t;
        let worst99 = r99[i] > m - t;
        let by_rank = best && (worst95 || worst99);
        let by_ratio = med > 0.0 && ratios[i] >= TAIL_RATIO_FACTOR * med;
        if !(by_rank || by_ratio) {
            continue;
        }
        let mut why = Vec::new();
        if by_rank {
            let tail = match (worst95, worst99) {
                (true, true) => format!("P95 rank {}/{m}, P99 rank {}/{m}", r95[i], r99[i]),
                (true, false) => format!("P95 rank {}/{m}", r95[i]),
                _ => format!("P99 rank {}/{m}", r99[i]),
            };
            why.push(format!(
                "P50 {} ms rank {}/{m} (best third) but {tail} (worst third)",
                fmt_ms(p50[i]),
                r50[i]
            ));
        }
        why.push(format!(
            "P99/P50 {:.2} vs median {:.2}{}",
            ratios[i],
            med,
            if by_ratio {
                format!(" (≥ {TAIL_RATIO_FACTOR}×)")
            } else {
                String::new()
            }
        ));
        out.push(Flag {
            kind: FlagKind::TailHigh,
            region: region.to_string(),
            provider: c.provider.clone(),
            scenario: scenario.to_string(),
            metric: Some(metric),
            confident: c.percentiles.iter().all(|p| p.ci.is_some()),
            detail: why.join("; "),
        });
    }
    out
}

fn output_flags(data: &ReportData, analysis: &Analysis, scenario: &str) -> Vec<Flag> {
    let means: Vec<(&String, f64)> = analysis
        .providers
        .iter()
        .filter_map(|p| {
            let c = data.summary.cell(ALL, p, scenario)?;
            Some((p, c.output_tokens_mean.filter(|_| c.samples > 0)?))
        })
        .collect();
    if means.len() < 3 {
        return Vec::new();
    }
    let med = median(&means.iter().map(|(_, v)| *v).collect::<Vec<_>>()).unwrap_or(0.0);
    if med <= 0.0 {
        return Vec::new();
    }
    means
        .iter()
        .filter(|(_, v)| *v > OUTPUT_HIGH * med || *v < OUTPUT_LOW * med)
        .map(|(p, v)| Flag {
            kind: FlagKind::OutputLength,
            region: ALL.into(),
            provider: (*p).clone(),
            scenario: scenario.to_string(),
            metric: None,
            confident: true,
            detail: format!(
                "mean output {v:.1} tokens vs median {med:.1} of the providers' means ({:.2}×; flagged above {OUTPUT_HIGH}× or below {:.2}×)",
                v / med,
                OUTPUT_LOW
            ),
        })
        .collect()
}
