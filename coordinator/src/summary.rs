//! The campaign summary: the region × provider matrix per scenario, as JSON (`--json PATH`)
//! and as terminal tables, plus the load models' results (sweep steps and knees, open-loop
//! rates, the agents' start skew; see [`crate::load_stats`]). Percentiles come from merged HDR
//! histograms, never from averaging percentiles, and carry their sample count, support and
//! 95 % intervals ([`Percentiles`]).

use std::collections::BTreeMap;

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
}

/// Fixtures (plans, aggregates, summaries) for the tests of this crate and of the CLI's
/// renderers (feature `fixtures`), and this module's tests.
#[cfg(any(test, feature = "fixtures"))]
#[allow(missing_docs, unused_imports, dead_code)]
pub mod tests {
    use super::*;
    use crate::load_stats::tests::{add_for, add_rate, agent, plan, sweep_aggregate};
    use latmesh_core::load::LoadKind;
    use latmesh_core::record::{OutputTokensSource, ProbeRecord};

    /// The demo's sample sizes: 12 `ok` requests per region cell of provider `p` in three
    /// regions (E2E 100..=1200 ms, TTFT half), and 400 for `q` in us-east alone (E2E
    /// 1001..=1400 ms).
    pub fn demo_sized() -> Summary {
        demo_sized_with(&latmesh_core::plan::DEFAULT_PERCENTILES)
    }

    pub fn demo_sized_with(percentiles: &[f64]) -> Summary {
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
        // The tables show them: `crate::ui::matrix` tests.
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
    }

    /// The summary of [`sweep_aggregate`] and [`add_rate`] with agents a1 (us-east) and b1
    /// (eu-west), and a start skew of 0.42 ms over three agents; with its aggregate and agents.
    pub fn sweep_rate_summary() -> (Summary, Aggregate, Vec<AgentSummary>) {
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
        (s, agg, agents)
    }

    #[test]
    fn summary_reports_sweeps_rates_dropped_and_start_skew() {
        let (s, agg, agents) = sweep_rate_summary();
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
        // The text: `crate::ui::matrix` tests.
    }

    /// A reasoning stream whose usage counts only the answer, a non-streaming scenario, and a
    /// provider that answers with its own model name: the usage notice names the streamed
    /// scenario only, with the attempts that took the payload count, and the model flag names
    /// the provider.
    /// Providers `reasoner` (usage counting the answer only) and `llama` (answering
    /// `smollm2`, its streamed connection retried), scenarios `stream` and `whole`.
    pub fn usage_summary() -> Summary {
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
        build("c1", &plan, 0, &agg, Vec::new())
    }

    #[test]
    fn the_usage_notice_counts_streams_only_and_another_model_is_flagged() {
        let s = usage_summary();
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
        assert_eq!(
            ["reasoner", "llama"].map(|p| s.cell("ALL", p, "stream").unwrap().conn_retried),
            [0, 1]
        );
        assert_eq!(
            s.models
                .iter()
                .map(|m| m.answered_other_model())
                .collect::<Vec<_>>(),
            [false, true]
        );
    }
}
