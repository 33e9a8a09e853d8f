//! Generated-prompt tiers: per scenario group, region and provider, the latency by input
//! length (TTFT, TTST, prefill throughput, E2E per output token), and how each provider counts
//! the generated tokens (docs/metrics.md "Generated prompts", "Token counts").

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::{Plan, ScenarioSpec};
use serde::{Deserialize, Serialize};

use crate::aggregate::Aggregate;
use crate::load_stats::row_regions;
use crate::matrix::ALL_REGIONS;
use crate::percentiles::Percentiles;
use crate::slo_stats::Goodput;

/// One tier (plan scenario `{group}.{tier}`) for one provider in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// The scenario's name in the campaign file.
    pub group: String,
    /// The plan scenario of this tier (`{group}.{tier}`).
    pub scenario: String,
    /// Input tokens asked for.
    pub input_tokens: u32,
    /// Latency samples (`ok`, warm-up left out).
    pub samples: u64,
    /// Failed requests / requests, %.
    pub error_pct: f64,
    /// Requests refused because the prompt is longer than the provider's context (HTTP 400
    /// or 413 whose error says so): the tier is past this provider's limit.
    pub context_refused: u64,
    /// TTFT percentiles, ms.
    pub ttft: Option<Percentiles>,
    /// TTST (time to second token) median, ms.
    pub ttst_p50_ms: Option<f64>,
    /// Prefill throughput median, tokens/s (prompt tokens ÷ TTFT).
    pub prefill_tps_p50: Option<f64>,
    /// E2E per output token median, ms.
    pub e2e_per_token_p50_ms: Option<f64>,
    /// Mean `usage.prompt_tokens` of `ok` requests (what the provider billed); `None` when it
    /// reported none.
    pub billed_prompt_tokens_mean: Option<f64>,
    /// Goodput (`None` without an SLO).
    pub goodput: Option<Goodput>,
    /// The share of prompt tokens served from the provider's cache ([`crate::cache_share`]);
    /// absent when it reported no cached count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_share: Option<crate::cache_share::CachedShare>,
}

/// How one provider counted the generated prompts, over every tier (every region merged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenCountRow {
    /// Provider.
    pub provider: String,
    /// Per tier: (input tokens asked for, mean billed prompt tokens, requests with usage).
    pub tiers: Vec<(u32, f64, u64)>,
    /// Billed tokens per generated word, from a least-squares line through the tiers (the
    /// mean ratio with one tier).
    pub tokens_per_word: Option<f64>,
    /// The line's intercept: tokens the provider adds per request (its chat template), with
    /// two tiers or more.
    pub overhead_tokens: Option<f64>,
    /// The provider counts differently from the generator's one-token-per-word (ratio off 1
    /// by more than [`COUNT_TOLERANCE`]): its tiers hold more or fewer tokens than their
    /// names say, so compare providers at the billed counts.
    pub counts_differently: bool,
    /// One sentence for tables and reports.
    pub note: String,
}

/// Tolerance of [`TokenCountRow::counts_differently`]: 10 %.
pub const COUNT_TOLERANCE: f64 = 0.10;

/// How `provider` counted generated prompts: `tiers` are (input tokens asked for, mean billed
/// prompt tokens, requests with usage), one per tier with usage. A least-squares line
/// `billed = tokens_per_word × asked + overhead` through the tiers (two or more; with one,
/// the ratio and no overhead); the provider counts differently when `tokens_per_word` is off
/// 1 by more than [`COUNT_TOLERANCE`]. `None` without a tier with usage.
pub fn token_count_row(provider: &str, mut tiers: Vec<(u32, f64, u64)>) -> Option<TokenCountRow> {
    tiers.retain(|t| t.2 > 0 && t.0 > 0);
    tiers.sort_by_key(|t| t.0);
    let first = *tiers.first()?;
    let (tokens_per_word, overhead_tokens) = if tiers.len() == 1 {
        (first.1 / f64::from(first.0), None)
    } else {
        let n = tiers.len() as f64;
        let mx = tiers.iter().map(|t| f64::from(t.0)).sum::<f64>() / n;
        let my = tiers.iter().map(|t| t.1).sum::<f64>() / n;
        let sxx: f64 = tiers.iter().map(|t| (f64::from(t.0) - mx).powi(2)).sum();
        let sxy: f64 = tiers
            .iter()
            .map(|t| (f64::from(t.0) - mx) * (t.1 - my))
            .sum();
        let slope = sxy / sxx;
        (slope, Some(my - slope * mx))
    };
    let counts_differently = (tokens_per_word - 1.0).abs() > COUNT_TOLERANCE;
    let overhead = overhead_tokens
        .map(|o| format!(", {o:+.0} tokens per request (its template)"))
        .unwrap_or_default();
    let note = if counts_differently {
        format!(
            "{provider} counts {tokens_per_word:.2} tokens per generated word{overhead}: its tiers hold {} tokens than their names say; compare at billed counts",
            if tokens_per_word > 1.0 {
                "more"
            } else {
                "fewer"
            }
        )
    } else {
        format!("{provider} counts {tokens_per_word:.2} tokens per generated word{overhead}")
    };
    Some(TokenCountRow {
        provider: provider.to_string(),
        tiers,
        tokens_per_word: Some(tokens_per_word),
        overhead_tokens,
        counts_differently,
        note,
    })
}

/// What one tier of one provider in one region (or every region) was measured as: the
/// inputs of a [`TierRow`]. Warm-up left out of all of it.
#[derive(Clone, Debug, Default)]
pub struct TierMeasure {
    /// Logical requests ended (`cancelled` and `dropped` left out).
    pub requests: u64,
    /// Those whose final attempt was not `ok`.
    pub requests_failed: u64,
    /// `ok` attempts.
    pub samples: u64,
    /// Requests refused for their length ([`crate::context_refusal`]).
    pub context_refused: u64,
    /// Sum of `usage.prompt_tokens` over `ok` attempts that reported it, and their count.
    pub billed_prompt_tokens: (u64, u64),
    /// Merged histograms by metric ([`TIER_METRICS`]): µs, except `PrefillTps` (tokens/s).
    pub hists: BTreeMap<Metric, Histogram<u64>>,
    /// The cell's goodput ([`crate::slo_stats::cell_goodput`]).
    pub goodput: Option<Goodput>,
    /// The prompt-cache counters of its `ok` attempts ([`crate::cache_share`]).
    pub cache: crate::cache_share::CacheCounts,
}

/// The metrics a [`TierMeasure`] needs histograms of.
pub const TIER_METRICS: [Metric; 4] = [
    Metric::Ttft,
    Metric::Ttst,
    Metric::PrefillTps,
    Metric::E2ePerToken,
];

/// One tier row of generated-prompt scenario `spec` (`None` when it has no `synth`):
/// TTFT percentiles of `percentiles`, medians of TTST and E2E per token in ms, of prefill
/// throughput in tokens/s (its histogram holds tokens/s, not µs).
pub fn tier_row(
    region: Option<&str>,
    provider: &str,
    spec: &ScenarioSpec,
    percentiles: &[f64],
    m: &TierMeasure,
) -> Option<TierRow> {
    let synth = spec.synth.as_ref()?;
    let p50 = |metric| {
        m.hists
            .get(&metric)
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.5) as f64)
    };
    let (billed, reports) = m.billed_prompt_tokens;
    Some(TierRow {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        group: synth.group.clone(),
        scenario: spec.name.clone(),
        input_tokens: synth.input_tokens,
        samples: m.samples,
        error_pct: if m.requests == 0 {
            0.0
        } else {
            m.requests_failed as f64 * 100.0 / m.requests as f64
        },
        context_refused: m.context_refused,
        ttft: m
            .hists
            .get(&Metric::Ttft)
            .map(|h| Percentiles::of_list(h, percentiles)),
        ttst_p50_ms: p50(Metric::Ttst).map(|us| us / 1000.0),
        prefill_tps_p50: p50(Metric::PrefillTps),
        e2e_per_token_p50_ms: p50(Metric::E2ePerToken).map(|us| us / 1000.0),
        billed_prompt_tokens_mean: (reports > 0).then(|| billed as f64 / reports as f64),
        goodput: m.goodput.clone(),
        cached_share: m.cache.share(crate::cache_share::caching_asked(spec)),
    })
}

/// Every tier row of `plan` (scenarios with `synth`), from `measure(region, provider,
/// scenario)` (`region` `None`: every region merged). Ordered by scenario (plan order: a
/// group's tiers in increasing size), region (plan order, `ALL` last), provider.
pub fn tier_rows_by(
    plan: &Plan,
    mut measure: impl FnMut(Option<&str>, &str, &ScenarioSpec) -> TierMeasure,
) -> Vec<TierRow> {
    let mut out = Vec::new();
    for s in plan.scenarios.iter().filter(|s| s.synth.is_some()) {
        for region in row_regions(plan, None) {
            for p in &plan.providers {
                let m = measure(region, &p.name, s);
                out.extend(tier_row(region, &p.name, s, &plan.percentiles, &m));
            }
        }
    }
    out
}

/// [`tier_rows_by`] from merged results in memory; `goodput(region, provider, scenario)` is
/// the cell's (the summary's matrix cell has it).
pub fn tier_rows(
    plan: &Plan,
    agg: &Aggregate,
    goodput: impl Fn(Option<&str>, &str, &str) -> Option<Goodput>,
) -> Vec<TierRow> {
    tier_rows_by(plan, |region, provider, s| {
        let c = agg.counts(region, provider, &s.name);
        TierMeasure {
            requests: c.requests,
            requests_failed: c.requests_failed,
            samples: c.count(latmesh_core::record::Outcome::Ok),
            context_refused: c.context_refused,
            billed_prompt_tokens: (c.billed_prompt_tokens, c.billed_prompt_reports),
            cache: c.cache,
            hists: TIER_METRICS
                .into_iter()
                .filter_map(|metric| {
                    let key = latmesh_core::hist::HistKey {
                        provider: provider.to_string(),
                        scenario: s.name.clone(),
                        metric,
                        step: 0,
                    };
                    Some((metric, agg.histogram(region, &key)?))
                })
                .collect(),
            goodput: goodput(region, provider, &s.name),
        }
    })
}

/// How each provider of `plan` counted the generated prompts ([`token_count_row`]), every
/// region merged: `billed(provider, scenario)` gives the sum of `usage.prompt_tokens` over
/// `ok` attempts that reported it and their count; tiers of the same size (in several
/// groups) are merged. Providers without usage on any tier have no row.
pub fn token_count_rows(
    plan: &Plan,
    billed: impl Fn(&str, &str) -> (u64, u64),
) -> Vec<TokenCountRow> {
    let mut out = Vec::new();
    for p in &plan.providers {
        let mut by_tier: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for s in &plan.scenarios {
            let Some(synth) = &s.synth else { continue };
            let (sum, n) = billed(&p.name, &s.name);
            let t = by_tier.entry(synth.input_tokens).or_default();
            t.0 = t.0.saturating_add(sum);
            t.1 += n;
        }
        let tiers = by_tier
            .into_iter()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(k, (sum, n))| (k, sum as f64 / n as f64, n))
            .collect();
        out.extend(token_count_row(&p.name, tiers));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_through_the_tiers_gives_the_ratio_and_the_template() {
        let r = token_count_row("a", vec![(1000, 1012.0, 5), (8000, 8012.0, 5)]).unwrap();
        assert!((r.tokens_per_word.unwrap() - 1.0).abs() < 1e-9);
        assert!((r.overhead_tokens.unwrap() - 12.0).abs() < 1e-6);
        assert!(!r.counts_differently);
        let r = token_count_row("b", vec![(8000, 9607.0, 5), (1000, 1207.0, 5)]).unwrap();
        assert!((r.tokens_per_word.unwrap() - 1.2).abs() < 1e-9);
        assert!(
            r.counts_differently && r.note.contains("more"),
            "{}",
            r.note
        );
        let one = token_count_row("c", vec![(1000, 800.0, 3)]).unwrap();
        assert_eq!(
            (one.tokens_per_word, one.overhead_tokens),
            (Some(0.8), None)
        );
        assert!(token_count_row("d", vec![(1000, 0.0, 0)]).is_none());
    }
}
