//! The campaign summary: the region × provider matrix per scenario, as JSON (`--json PATH`)
//! and as terminal tables, plus the load models' results (sweep steps and knees, open-loop
//! rates, the agents' start skew; see [`crate::load_stats`]). Percentiles come from merged HDR
//! histograms, never from averaging percentiles, and carry their sample count, support and
//! 95 % intervals ([`Percentiles`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};
use latmesh_core::hist::HistKey;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use serde::{Deserialize, Serialize};

use crate::aggregate::Aggregate;
use crate::failover_stats::{self, FailoverRow, PolitenessNote};
use crate::load_stats::{self, RowFilter};
pub use crate::load_stats::{AgentStart, RateRow, StartSync, SweepRow};
use crate::model_stats::{self, ModelRow};

/// The region label of the row that merges every region.
pub const ALL_REGIONS: &str = "ALL";

pub use crate::percentiles::{PercentilePoint, Percentiles};

/// One cell of the matrix: a region (or [`ALL_REGIONS`]), a provider, a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatrixCell {
    /// Region, or `ALL` for every region merged.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Attempts of any outcome.
    pub attempts: u64,
    /// Latency samples (`ok` attempts).
    pub samples: u64,
    /// TTFT percentiles (streaming scenarios), with `n`, support and intervals.
    pub ttft: Option<Percentiles>,
    /// TTFC percentiles (streaming scenarios).
    pub ttfc: Option<Percentiles>,
    /// E2E percentiles.
    pub e2e: Option<Percentiles>,
    /// TPOT median, ms.
    pub tpot_p50_ms: Option<f64>,
    /// ITL median, ms.
    pub itl_p50_ms: Option<f64>,
    /// Attempts whose outcome is not `ok`, % of attempts (attempts aborted by a campaign
    /// cancel, outcome `cancelled`, and open-loop arrivals never sent, outcome `dropped`, are
    /// left out of both).
    pub error_pct: f64,
    /// Open-loop arrivals not sent because the provider's in-flight cap stayed full (outcome
    /// `dropped`; counted in `attempts` and `outcomes`, not in error rates).
    #[serde(default)]
    pub dropped: u64,
    /// Logical requests (a first attempt and its retries count once; `cancelled` and
    /// `dropped` ones left out).
    pub requests: u64,
    /// Logical requests whose final attempt was not `ok`, % of requests (equals `error_pct`
    /// without a retry policy).
    pub request_error_pct: f64,
    /// `throttled` attempts, % of attempts.
    pub throttled_pct: f64,
    /// Mean output tokens of `ok` attempts.
    pub output_tokens_mean: Option<f64>,
    /// `ok` attempts whose output tokens came from the provider's `usage` (the rest were
    /// counted from chunks).
    pub tokens_from_usage: u64,
    /// `ok` attempts of event streams whose token payloads outnumbered usage's count and
    /// were the output token count (`output_tokens_source = payloads_over_usage`).
    #[serde(default)]
    pub tokens_over_usage: u64,
    /// Attempts (any outcome) sent again on a new connection because the pooled one they
    /// were sent on closed before any response byte (`conn_retried`): not errors; their
    /// TTFT and E2E include the failed try and the new connection's setup.
    #[serde(default)]
    pub conn_retried: u64,
    /// Mean of `usage.completion_tokens − token_payloads` over `ok` event-stream attempts that
    /// reported usage: how far counting chunks would be from the provider's token count.
    pub usage_chunk_delta_mean: Option<f64>,
    /// `ok` event-stream attempts whose usage disagreed with the chunk count (a body read
    /// whole has no chunks to count: never one).
    pub usage_chunk_mismatches: u64,
    /// Attempts (any outcome) by the `model` the provider answered with: the
    /// [`model_stats::MAX_NAMES_PER_CELL`] most frequent names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answered_models: BTreeMap<String, u64>,
    /// Attempts answered under model names `answered_models` leaves out.
    #[serde(default, skip_serializing_if = "model_stats::is_zero")]
    pub answered_models_more: u64,
    /// Attempts (any outcome) by the `system_fingerprint` the provider answered with (the
    /// most frequent, as `answered_models`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_fingerprints: BTreeMap<String, u64>,
    /// Attempts answered under fingerprints `system_fingerprints` leaves out.
    #[serde(default, skip_serializing_if = "model_stats::is_zero")]
    pub system_fingerprints_more: u64,
    /// The latest failed attempt of this cell, described (outcome, status, provider error).
    pub last_error: Option<String>,
    /// Attempts by outcome name.
    pub outcomes: BTreeMap<String, u64>,
}

/// One agent's part in the campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// Agent id.
    pub agent_id: String,
    /// Region.
    pub region: String,
    /// Coordinator clock minus agent clock, µs.
    pub clock_offset_us: i64,
    /// ± µs.
    pub clock_uncertainty_us: u64,
    /// Records received from it.
    pub records: u64,
    /// Batches received (after de-duplication).
    pub batches: u64,
    /// Whether every batch the agent announced arrived and no probe was skipped.
    pub complete: bool,
    /// Probes the agent skipped because their time had passed (e.g. it restarted).
    pub skipped: u64,
    /// What did not arrive and why: batches refused or quarantined, records too large to
    /// send, its done notice (README "Failure semantics"); default in older summaries.
    #[serde(default)]
    pub delivery: crate::delivery::Delivery,
}

/// The summary of one campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
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
    /// Regions (rows), in plan order.
    pub regions: Vec<String>,
    /// Providers (columns), in plan order.
    pub providers: Vec<String>,
    /// Scenarios, in plan order.
    pub scenarios: Vec<String>,
    /// The percentiles the tables show and each [`Percentiles::points`] holds (the plan's
    /// `percentiles`; P50/P90/P95/P99 in older summaries).
    #[serde(default = "latmesh_core::plan::default_percentiles")]
    pub percentiles: Vec<f64>,
    /// Every (region, provider, scenario) cell, plus `ALL` rows.
    pub cells: Vec<MatrixCell>,
    /// Agents.
    pub agents: Vec<AgentSummary>,
    /// Whether every agent delivered all its results (false when the campaign's deadline
    /// passed first, e.g. an agent died).
    pub complete: bool,
    /// Whether `latmesh campaign cancel` stopped the campaign (what was measured before is
    /// kept; slots not run count as skipped).
    #[serde(default)]
    pub cancelled: bool,
    /// Per `sweep` scenario, region (and `ALL`) and provider: every concurrency step and the
    /// knee.
    #[serde(default)]
    pub sweeps: Vec<SweepRow>,
    /// Per `rate` scenario, region (and `ALL`) and provider: achieved rate, drops, lag,
    /// latencies from the actual and the intended send, saturation.
    #[serde(default)]
    pub rates: Vec<RateRow>,
    /// How synchronized the agents' start was (from their done notices; empty for a summary
    /// rebuilt from ClickHouse, which does not store them).
    #[serde(default)]
    pub start: StartSync,
    /// Per failover scenario and region (and `ALL`): the clients' requests through the chain
    /// and the backups' own probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover: Vec<FailoverRow>,
    /// Providers with politeness caps that answered 429 anyway (the agents kept within the
    /// caps: the provider's own limit is lower than configured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub politeness: Vec<PolitenessNote>,
    /// Per provider whose answers named a model or a `system_fingerprint`: what answered
    /// over the campaign, and whether it was another model or changed
    /// ([`crate::model_stats`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelRow>,
    // Budget guard (coordinator/src/budget.rs): `stopped_by`, `stop_reason`, `caps` and
    // `spent` at the top level of the JSON, each absent when unknown.
    /// Budget guard: caps, what the records used, whether the guard stopped the campaign.
    #[serde(default, flatten)]
    pub guard: crate::budget::BudgetSummary,
}

/// Builds the summary of `plan` from merged results (`start` is left empty: the caller fills
/// it from the agents' done notices).
pub fn build(
    campaign_id: &str,
    plan: &Plan,
    start_at_unix_us: i64,
    agg: &Aggregate,
    agents: Vec<AgentSummary>,
) -> Summary {
    let mut cells = Vec::new();
    let rows = load_stats::row_regions(plan, None);
    for scenario in &plan.scenarios {
        for region in &rows {
            for provider in &plan.providers {
                cells.push(cell(
                    agg,
                    *region,
                    &provider.name,
                    &scenario.name,
                    &plan.percentiles,
                ));
            }
        }
    }
    let politeness = failover_stats::politeness_notes(plan, &cells);
    let models = model_stats::model_rows(&plan.providers, &cells);
    Summary {
        campaign_id: campaign_id.to_string(),
        name: plan.name.clone(),
        plan_hash: plan.hash(),
        metrics_version: plan.metrics_version,
        start_at_unix_us,
        regions: plan.regions.clone(),
        providers: plan.providers.iter().map(|p| p.name.clone()).collect(),
        scenarios: plan.scenarios.iter().map(|s| s.name.clone()).collect(),
        percentiles: plan.percentiles.clone(),
        cells,
        complete: agents.iter().all(|a| a.complete),
        cancelled: false,
        sweeps: load_stats::sweep_rows(plan, agg, RowFilter::default(), &agents),
        rates: load_stats::rate_rows(plan, agg, &agents),
        start: StartSync::default(),
        failover: failover_stats::failover_rows(plan, agg),
        politeness,
        models,
        agents,
        guard: Default::default(),
    }
}

fn cell(
    agg: &Aggregate,
    region: Option<&str>,
    provider: &str,
    scenario: &str,
    percentiles: &[f64],
) -> MatrixCell {
    let hist = |metric| {
        agg.histogram(
            region,
            &HistKey {
                provider: provider.into(),
                scenario: scenario.into(),
                metric,
                step: 0,
            },
        )
    };
    let counts = agg.counts(region, provider, scenario);
    let attempts = counts.attempts();
    let ok = counts.count(Outcome::Ok);
    // Attempts aborted by a campaign cancel, and arrivals or rounds probes dropped unsent, are
    // left out of the rates.
    let dropped = counts.count(Outcome::Dropped);
    let measured = attempts - counts.count(Outcome::Cancelled) - dropped;
    let pct = |n: u64| {
        if measured == 0 {
            0.0
        } else {
            n as f64 * 100.0 / measured as f64
        }
    };
    let p50 = |metric| hist(metric).map(|h| h.value_at_quantile(0.5) as f64 / 1000.0);
    let (answered_models, answered_models_more) =
        model_stats::most_frequent(&counts.answered_models);
    let (system_fingerprints, system_fingerprints_more) =
        model_stats::most_frequent(&counts.system_fingerprints);
    MatrixCell {
        region: region.unwrap_or(ALL_REGIONS).to_string(),
        provider: provider.to_string(),
        scenario: scenario.to_string(),
        attempts,
        samples: ok,
        ttft: hist(Metric::Ttft).map(|h| Percentiles::of_list(&h, percentiles)),
        ttfc: hist(Metric::Ttfc).map(|h| Percentiles::of_list(&h, percentiles)),
        e2e: hist(Metric::E2e).map(|h| Percentiles::of_list(&h, percentiles)),
        tpot_p50_ms: p50(Metric::Tpot),
        itl_p50_ms: p50(Metric::Itl),
        error_pct: pct(measured - ok),
        dropped,
        requests: counts.requests,
        request_error_pct: if counts.requests == 0 {
            0.0
        } else {
            counts.requests_failed as f64 * 100.0 / counts.requests as f64
        },
        throttled_pct: pct(counts.count(Outcome::Throttled)),
        output_tokens_mean: (ok > 0).then(|| counts.ok_output_tokens as f64 / ok as f64),
        tokens_from_usage: counts.ok_tokens_from_usage,
        tokens_over_usage: counts.ok_tokens_over_usage,
        conn_retried: counts.conn_retried,
        usage_chunk_delta_mean: (counts.ok_usage_reports > 0)
            .then(|| counts.ok_usage_chunk_delta_sum as f64 / counts.ok_usage_reports as f64),
        usage_chunk_mismatches: counts.ok_usage_chunk_mismatches,
        answered_models,
        answered_models_more,
        system_fingerprints,
        system_fingerprints_more,
        last_error: counts.last_error.clone(),
        outcomes: counts
            .outcomes
            .iter()
            .map(|(o, n)| (o.as_str().to_string(), *n))
            .collect(),
    }
}

impl Summary {
    /// The cell of (`region`, `provider`, `scenario`).
    pub fn cell(&self, region: &str, provider: &str, scenario: &str) -> Option<&MatrixCell> {
        self.cells
            .iter()
            .find(|c| c.region == region && c.provider == provider && c.scenario == scenario)
    }

    /// Renders the matrices as text tables: per scenario, rows are regions (and `ALL`),
    /// columns providers; one table per quantity. Then the sweeps (knee metric per step and
    /// the knee, [`load_stats::render_sweeps`]), the open-loop rates
    /// ([`load_stats::render_rates`]), dropped arrivals, errors, and the start skew line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "campaign {} ({}), plan {}",
            self.name,
            self.campaign_id,
            &self.plan_hash[..12]
        );
        // A view gives a cell's text and whether it holds a percentile the samples do not
        // support (then the table gets the legend).
        let list = &self.percentiles;
        let names = crate::percentiles::header(list);
        let fmt_p = |p: &Option<Percentiles>| match p {
            Some(p) => p.text(list, |v| format!("{v:.0}")),
            None => ("-".into(), false),
        };
        type View<'a> = (String, &'a dyn Fn(&MatrixCell) -> (String, bool));
        let plain = |text: String| (text, false);
        let views: [View; 5] = [
            ("samples (ok / attempts)".into(), &|c| {
                plain(format!("{}/{}", c.samples, c.attempts))
            }),
            (format!("TTFT ms {names}"), &|c| fmt_p(&c.ttft)),
            (format!("E2E ms {names}"), &|c| fmt_p(&c.e2e)),
            ("TPOT ms P50".into(), &|c| {
                plain(c.tpot_p50_ms.map_or("-".into(), |v| format!("{v:.1}")))
            }),
            (
                "errors % / throttled % (attempts) / failed % (requests, after retries)".into(),
                &|c| {
                    plain(format!(
                        "{:.1} / {:.1} / {:.1}",
                        c.error_pct, c.throttled_pct, c.request_error_pct
                    ))
                },
            ),
        ];
        for scenario in &self.scenarios {
            for (title, view) in &views {
                let _ = writeln!(out, "\n{scenario}: {title}");
                let mut t = Table::new();
                t.load_preset(presets::ASCII_MARKDOWN);
                let mut header = vec![TCell::new("region")];
                header.extend(self.providers.iter().map(TCell::new));
                t.set_header(header);
                let mut marked = false;
                for region in self.regions.iter().map(String::as_str).chain([ALL_REGIONS]) {
                    let mut row = vec![TCell::new(region)];
                    for provider in &self.providers {
                        let (text, m) = self
                            .cell(region, provider, scenario)
                            .map_or(("-".into(), false), view);
                        marked |= m;
                        row.push(TCell::new(text).set_alignment(CellAlignment::Right));
                    }
                    t.add_row(row);
                }
                let _ = writeln!(out, "{t}");
                if marked {
                    let _ = writeln!(out, "{}", crate::percentiles::legend_for(&self.percentiles));
                }
            }
        }
        if !self.sweeps.is_empty() {
            out.push_str(&load_stats::render_sweeps(&self.sweeps));
        }
        if !self.rates.is_empty() {
            out.push_str(&load_stats::render_rates(&self.rates));
        }
        if !self.failover.is_empty() {
            out.push_str(&failover_stats::render_failover(&self.failover));
        }
        for n in &self.politeness {
            let _ = writeln!(
                out,
                "\n{}: {} throttled (429) while the agents kept within its caps ({}): the provider's own limit is lower",
                n.provider, n.throttled, n.caps
            );
        }
        let dropped: Vec<&MatrixCell> = self
            .cells
            .iter()
            .filter(|c| c.region != ALL_REGIONS && c.dropped > 0)
            .collect();
        if !dropped.is_empty() {
            let _ = writeln!(
                out,
                "
dropped (not sent in time: open-loop arrivals, or rounds probes held by their caps; not in error rates):"
            );
            for c in dropped {
                let _ = writeln!(
                    out,
                    "  {:<14} {:<20} {:<14} {}",
                    c.region, c.provider, c.scenario, c.dropped
                );
            }
        }
        let failing: Vec<&MatrixCell> = self
            .cells
            .iter()
            .filter(|c| c.region != ALL_REGIONS && c.last_error.is_some())
            .collect();
        if !failing.is_empty() {
            let _ = writeln!(out, "\nlast error per cell:");
            for c in failing {
                let _ = writeln!(
                    out,
                    "  {:<14} {:<20} {:<14} {}",
                    c.region,
                    c.provider,
                    c.scenario,
                    c.last_error.as_deref().unwrap_or_default()
                );
            }
        }
        let mismatched: Vec<&MatrixCell> = self
            .cells
            .iter()
            .filter(|c| c.region == ALL_REGIONS && c.usage_chunk_mismatches > 0)
            .collect();
        if !mismatched.is_empty() {
            let _ = writeln!(
                out,
                "\nusage vs chunk count (ok streamed attempts, all regions; usage − token payloads, mean: \
                 + when chunks carry several tokens, − when usage leaves tokens out):"
            );
            for c in mismatched {
                let over = if c.tokens_over_usage > 0 {
                    format!(
                        "; {} counted from payloads (usage counted fewer tokens than streamed)",
                        c.tokens_over_usage
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "  {:<20} {:<14} mean {:+.1} tokens, {} of {} attempts differ{over}",
                    c.provider,
                    c.scenario,
                    c.usage_chunk_delta_mean.unwrap_or_default(),
                    c.usage_chunk_mismatches,
                    c.samples
                );
            }
        }
        let retried: Vec<&MatrixCell> = self
            .cells
            .iter()
            .filter(|c| c.region == ALL_REGIONS && c.conn_retried > 0)
            .collect();
        if !retried.is_empty() {
            let _ = writeln!(
                out,
                "\nconnections retried (the provider closed a pooled connection before any response \
                 byte; sent again on a new one, not an error; TTFT/E2E include the new connect):"
            );
            for c in retried {
                let _ = writeln!(
                    out,
                    "  {:<20} {:<14} {} of {} attempts",
                    c.provider, c.scenario, c.conn_retried, c.attempts
                );
            }
        }
        out.push_str(&model_stats::render(&self.models));
        out.push_str(&self.guard.render()); // budget guard: spent, STOPPED BY BUDGET
        if self.cancelled && !self.guard.stopped() {
            let _ = writeln!(
                out,
                "\nCANCELLED: latmesh campaign cancel stopped this campaign; the tables hold what was measured before"
            );
        }
        if !self.complete {
            let short: Vec<String> = self
                .agents
                .iter()
                .filter(|a| !a.complete)
                .map(|a| {
                    let d = &a.delivery;
                    let mut quarantine = String::new();
                    if d.batches_rejected > 0 {
                        let seqs: Vec<String> =
                            d.rejected.iter().map(|r| r.seq.to_string()).collect();
                        quarantine = format!(
                            ", {} batch(es) refused and quarantined (seq {})",
                            d.batches_rejected,
                            seqs.join(", ")
                        );
                    }
                    if d.records_quarantined > 0 || d.histograms_quarantined > 0 {
                        quarantine.push_str(&format!(
                            ", {} record(s) and {} histogram(s) too large to send, quarantined",
                            d.records_quarantined, d.histograms_quarantined
                        ));
                    }
                    format!(
                        "{} ({}, {} records, {} skipped{quarantine})",
                        a.agent_id, a.region, a.records, a.skipped
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "\nINCOMPLETE: these agents did not deliver every probe of the plan: {}",
                short.join(", ")
            );
        }
        if let Some(line) = self.start.line() {
            let _ = writeln!(out, "\n{line}");
        }
        if !self.agents.is_empty() {
            let _ = writeln!(out, "\nagents:");
            for a in &self.agents {
                let _ = writeln!(
                    out,
                    "  {:<16} {:<14} records {:>5}  batches {:>4}  clock offset {:+} µs ± {} µs",
                    a.agent_id,
                    a.region,
                    a.records,
                    a.batches,
                    a.clock_offset_us,
                    a.clock_uncertainty_us
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_stats::tests::{add_for, add_rate, agent, plan, sweep_aggregate};
    use latmesh_core::load::LoadKind;
    use latmesh_core::record::{OutputTokensSource, ProbeRecord};

    /// The demo's sample sizes: 12 `ok` requests per region cell of provider `p` in three
    /// regions (E2E 100..=1200 ms, TTFT half), and 400 for `q` in us-east alone (E2E
    /// 1001..=1400 ms).
    fn demo_sized() -> Summary {
        demo_sized_with(&latmesh_core::plan::DEFAULT_PERCENTILES)
    }

    fn demo_sized_with(percentiles: &[f64]) -> Summary {
        let mut plan = plan();
        plan.percentiles = percentiles.to_vec();
        plan.regions.push("ap-southeast".into());
        let mut agg = Aggregate::default();
        for region in &plan.regions {
            let twelve: Vec<_> = (1..=12)
                .map(|i| (0, 1, Outcome::Ok, i * 100_000, 0))
                .collect();
            add_for(&mut agg, region, "p", "open", LoadKind::Rate, &twelve);
        }
        let four_hundred: Vec<_> = (1..=400)
            .map(|i| (0, 1, Outcome::Ok, 1_000_000 + i * 1000, 0))
            .collect();
        add_for(
            &mut agg,
            "us-east",
            "q",
            "open",
            LoadKind::Rate,
            &four_hundred,
        );
        build("c1", &plan, 0, &agg, vec![])
    }

    #[test]
    fn the_campaign_chooses_the_percentiles() {
        let s = demo_sized_with(&[50.0, 99.9]);
        assert_eq!(s.percentiles, [50.0, 99.9]);
        let e2e = s.cell("us-east", "q", "open").unwrap().e2e.unwrap();
        let got: Vec<(f64, bool)> = e2e
            .points
            .iter()
            .map(|p| (p.percentile, p.supported))
            .collect();
        // P99.9 needs 3688 samples.
        assert_eq!(got, [(50.0, true), (99.9, false)]);
        // The fixed P50/P90/P95/P99 stay in the JSON for readers that know only them.
        assert!(e2e.p95_ms.is_some());
        let text = s.render();
        assert!(text.contains("open: E2E ms P50/P99.9"), "{text}");
        assert!(text.contains("| 1200/~1401 |"), "{text}");
        // The legend names the campaign's percentiles.
        assert!(
            text.contains("~ marks a percentile with fewer samples than a 95% interval needs (P50 6, P99.9 3688)"),
            "{text}"
        );
    }

    #[test]
    fn percentiles_the_samples_do_not_support_are_marked_with_a_legend() {
        let s = demo_sized();
        let pts = |region: &str, provider: &str| -> Vec<(f64, bool)> {
            let e2e = s.cell(region, provider, "open").unwrap().e2e.unwrap();
            e2e.points
                .iter()
                .map(|p| (p.percentile, p.supported))
                .collect()
        };
        // 12 samples: only P50; ALL (36): P50 and P90; 400: all four.
        assert_eq!(
            pts("eu-west", "p"),
            [(50.0, true), (90.0, false), (95.0, false), (99.0, false)]
        );
        assert_eq!(
            pts("ALL", "p"),
            [(50.0, true), (90.0, true), (95.0, false), (99.0, false)]
        );
        assert_eq!(
            pts("us-east", "q"),
            [(50.0, true), (90.0, true), (95.0, true), (99.0, true)]
        );
        let text = s.render();
        println!("{text}");
        for want in [
            "open: E2E ms P50/P90/P95/P99",
            "| us-east      | 600/~1101/~1200/~1200 | 1200/1361/1380/1397 |",
            "| ALL          |  600/1101/~1200/~1200 | 1200/1361/1380/1397 |",
            &crate::percentiles::legend(),
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        // The legend only under tables with a marked value.
        let samples_table = text.find("open: samples").unwrap();
        let ttft_table = text.find("open: TTFT").unwrap();
        assert!(!text[samples_table..ttft_table].contains("~"));
    }

    #[test]
    fn summary_reports_sweeps_rates_dropped_and_start_skew() {
        let mut agg = sweep_aggregate();
        add_rate(&mut agg);
        let agents = vec![agent("a1", "us-east"), agent("b1", "eu-west")];
        let mut s = build("c1", &plan(), 1_700_000_000_000_000, &agg, agents.clone());
        let t = 1_700_000_000_000_000;
        s.start = StartSync::of(
            [("a1", t + 420, 50), ("b1", t, 30), ("b2", t + 100, 10)]
                .into_iter()
                .map(|(id, at, unc)| AgentStart {
                    agent_id: id.into(),
                    region: "eu-west".into(),
                    started_coord_unix_us: at,
                    clock_offset_us: 0,
                    clock_uncertainty_us: unc,
                })
                .collect(),
        );
        assert_eq!(
            s.sweeps,
            load_stats::sweep_rows(&plan(), &agg, RowFilter::default(), &agents)
        );
        assert_eq!(s.rates, load_stats::rate_rows(&plan(), &agg, &agents));
        assert_eq!((s.sweeps.len(), s.rates.len()), (6, 6));

        // Dropped arrivals: counted apart, out of the error rates.
        let eu = s.cell("eu-west", "p", "open").unwrap();
        assert_eq!((eu.attempts, eu.dropped, eu.samples), (100, 10, 90));
        assert_eq!(
            (eu.error_pct, eu.request_error_pct, eu.requests),
            (0.0, 0.0, 90)
        );
        assert_eq!(s.cell("ALL", "p", "open").unwrap().dropped, 10);

        // JSON carries the new sections, and a summary without them still parses.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["sweeps"][4]["knee"]["concurrency"], 8);
        assert_eq!(json["rates"][2]["agent_saturated"], true);
        assert_eq!(json["rates"][2]["provider_saturated"], false);
        assert_eq!(json["start"]["skew_us"], 420);
        assert_eq!(json["cells"][0]["dropped"], 0);
        let mut old = json.clone();
        for key in ["sweeps", "rates", "start"] {
            old.as_object_mut().unwrap().remove(key);
        }
        // ... and a summary written before P95, sample counts and intervals.
        old.as_object_mut().unwrap().remove("percentiles");
        for cell in old["cells"].as_array_mut().unwrap() {
            for metric in ["ttft", "ttfc", "e2e"] {
                if let Some(p) = cell[metric].as_object_mut() {
                    for key in ["p95_ms", "n", "points"] {
                        p.remove(key);
                    }
                }
            }
        }
        let back: Summary = serde_json::from_value(old).unwrap();
        assert!(back.sweeps.is_empty() && back.start == StartSync::default());
        assert_eq!(back.percentiles, [50.0, 90.0, 95.0, 99.0]);
        let e2e = back.cell("us-east", "p", "sw").unwrap().e2e.unwrap();
        assert_eq!((e2e.p95_ms, e2e.n, e2e.points.len()), (None, 0, 0));
        // The new shape: per metric the sample count, and per percentile its support and
        // interval.
        let e2e = &json["cells"][0]["e2e"];
        assert_eq!(json["cells"][0]["scenario"], "sw");
        assert_eq!(e2e["n"], 60);
        assert_eq!(e2e["p95_ms"], 2.0);
        assert_eq!(e2e["points"][0]["percentile"], 50.0);
        assert_eq!(e2e["points"][0]["supported"], true);
        assert_eq!(e2e["points"][0]["lo_ms"], 1.04);
        assert_eq!(e2e["points"][3]["supported"], false);
        assert!(e2e["points"][3]["lo_ms"].is_null() && e2e["points"][3]["hi_ms"].is_null());

        let text = s.render();
        println!("{text}");
        for want in [
            "sweep sw: E2E P50 ms by concurrency, all regions (10 s steps); knee: elasticity ≥ 0.5 or errors ≥ 5%",
            "  each significant (95 % intervals), with ≥ 10 requests in every step up to it",
            "c = workers per agent and provider; total = the provider's concurrency, c × 2 agents (all regions)",
            "| p        | eu-west |     9.00/10.00 |      10 |  0.20/~0.20 |   0.0 | YES        | - (too few)   |",
            "rate open: latency ms P50/P95/P99 from the actual send and from the intended send",
            "| p        | us-east | 0.50/0.50/~0.50 | 0.70/0.70/~0.70 | 1.00/1.00/~1.00 | 1.20/1.20/~1.20 |",
            // eu-west's 1 failure in 10 requests at c = 4 is not a significant rise.
            "  p                us-east c=8 (latency), eu-west none",
            "rate open: target 10 rps per provider and agent for 10 s; rps sent per agent vs scheduled",
            "  agent saturated: p eu-west: 10 arrivals dropped; achieved 9.00 rps < 95% of scheduled 10.00",
            "start skew 0.42 ms over 3 agents (± 0.08 ms of clock uncertainty)",
            "dropped (not sent in time: open-loop arrivals, or rounds probes held by their caps; not in error rates):",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        let from = text.find("\nsweep ").unwrap();
        let to = text.find("\ndropped ").unwrap();
        for line in text[from..to].lines() {
            assert!(
                line.chars().count() <= 100,
                "{} chars: {line}",
                line.chars().count()
            );
        }
    }

    /// A reasoning stream whose usage counts only the answer, a non-streaming scenario, and a
    /// provider that answers with its own model name: the usage notice names the streamed
    /// scenario only, with the attempts that took the payload count, and the model flag names
    /// the provider.
    #[test]
    fn the_usage_notice_counts_streams_only_and_another_model_is_flagged() {
        let plan = latmesh_core::campaign::load_toml_str(
            r#"
[campaign]
name = "t"
seed = 1
regions = ["us-east"]
[rounds]
count = 2
interval_s = 2.0
gap_ms = 100
[[scenarios]]
name = "stream"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 32
[[scenarios]]
name = "whole"
prompt_ids = ["short-qa-en-*"]
stream = false
max_tokens = 32
[[providers]]
name = "reasoner"
base_url = "http://127.0.0.1:9/v1"
model_id = "reasoner"
[[providers]]
name = "llama"
base_url = "http://127.0.0.1:9/v1"
model_id = "gpt-4o"
"#,
            std::path::Path::new("."),
        )
        .unwrap();
        let mut agg = Aggregate::default();
        for provider in ["reasoner", "llama"] {
            for scenario in ["stream", "whole"] {
                let stream = scenario == "stream";
                let rec = ProbeRecord {
                    provider: provider.into(),
                    scenario: scenario.into(),
                    stream,
                    outcome: Some(Outcome::Ok),
                    final_attempt: true,
                    output_tokens: if stream { 31 } else { 8 },
                    output_tokens_source: if stream {
                        OutputTokensSource::PayloadsOverUsage
                    } else {
                        OutputTokensSource::Usage
                    },
                    token_payloads: if stream { 31 } else { 1 },
                    usage_chunk_delta: stream.then_some(8 - 31),
                    // llama-server closes its connection after a streamed answer.
                    conn_retried: provider == "llama" && stream,
                    answered_model: Some(
                        if provider == "llama" {
                            "smollm2"
                        } else {
                            "reasoner"
                        }
                        .into(),
                    ),
                    ..ProbeRecord::default()
                };
                agg.add_record("us-east", &rec);
            }
        }
        let s = build("c1", &plan, 0, &agg, Vec::new());
        let whole = s.cell("ALL", "reasoner", "whole").unwrap();
        assert_eq!(
            (whole.usage_chunk_mismatches, whole.tokens_over_usage),
            (0, 0)
        );
        let streamed = s.cell("ALL", "reasoner", "stream").unwrap();
        assert_eq!(
            (streamed.usage_chunk_mismatches, streamed.tokens_over_usage),
            (1, 1)
        );
        let text = s.render();
        assert!(
            text.contains("reasoner             stream         mean -23.0 tokens, 1 of 1 attempts differ; 1 counted from payloads"),
            "{text}"
        );
        assert!(!text.contains("whole          mean"), "{text}");
        assert_eq!(
            ["reasoner", "llama"].map(|p| s.cell("ALL", p, "stream").unwrap().conn_retried),
            [0, 1]
        );
        assert!(
            text.contains("\nconnections retried (the provider closed a pooled connection")
                && text.contains("  llama                stream         1 of 1 attempts\n")
                && !text.contains("  reasoner             stream         0 of"),
            "{text}"
        );
        assert!(
            text.contains(
                "llama                answered with another model than \"gpt-4o\": smollm2"
            ),
            "{text}"
        );
        assert_eq!(
            s.models
                .iter()
                .map(|m| m.answered_other_model())
                .collect::<Vec<_>>(),
            [false, true]
        );
    }

    /// A summary persisted before the coordinator bounded done notices may hold any count:
    /// rendering it never overflows.
    #[test]
    fn quarantine_counts_at_their_maximum_render_without_overflow() {
        let mut a = agent("a1", "us-east");
        a.complete = false;
        a.delivery.records_quarantined = u64::MAX;
        a.delivery.histograms_quarantined = u64::MAX;
        let mut r = crate::delivery::Rejections::default();
        r.reject(1, "x");
        a.delivery.batches_rejected = r.batches();
        let s = build("c1", &plan(), 0, &Aggregate::default(), vec![a]);
        assert!(
            s.render()
                .contains("18446744073709551615 record(s) and 18446744073709551615 histogram(s)"),
            "{}",
            s.render()
        );
    }
}
