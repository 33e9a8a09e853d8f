//! Test fixtures for the tests of this crate and of result renderers: a two-region plan with a
//! sweep and an open-loop scenario, aggregates of records for it, summaries built from them,
//! and matrix cells naming answered models. Used by the tests of result renderers.

use latmesh_core::hist::HistogramSet;
use latmesh_core::load::{KneeRule, LoadKind, LoadModel};
use latmesh_core::plan::{Plan, ProviderSpec};
use latmesh_core::record::{Outcome, OutputTokensSource, ProbeRecord};

pub mod workloads;

use crate::aggregate::Aggregate;
use crate::load_stats::{AgentStart, StartSync};
use crate::summary::{ALL_REGIONS, AgentSummary, MatrixCell, Summary, build};

/// Regions us-east and eu-west; providers p and q; a sweep `sw` (c = 2, 4, 8, 10 s steps,
/// knee on E2E P50 from 10 requests per step) and an open loop `open` (10 rps, constant, 10 s).
pub fn plan() -> Plan {
    let prompts = serde_json::json!([{ "id": "a", "messages": [] }]);
    let timeouts = serde_json::json!({
        "connect_s": 10.0, "ttft_s": 60.0, "idle_s": 30.0, "total_s": 120.0
    });
    serde_json::from_value(serde_json::json!({
        "name": "load",
        "seed": 9,
        "metrics_version": 3,
        "regions": ["us-east", "eu-west"],
        "rounds": { "count": 1, "interval_ms": 1000, "gap_ms": 10 },
        "providers": [
            { "name": "p", "base_url": "http://127.0.0.1:9/v1", "api_key_env": null, "model_id": "m" },
            { "name": "q", "base_url": "http://127.0.0.1:9/v1", "api_key_env": null, "model_id": "m" }
        ],
        "scenarios": [
            {
                "name": "sw", "stream": true, "max_tokens": 16, "temperature": null,
                "top_p": null, "timeouts": timeouts, "prompts": prompts,
                "load": { "sweep": {
                    "concurrency": [2, 4, 8], "step_ms": 10000,
                    "knee": { "metric": "e2e", "percentile": 50.0, "elasticity": 0.5, "error_pct": 5.0, "min_requests": 10 }
                } }
            },
            {
                "name": "open", "stream": true, "max_tokens": 16, "temperature": null,
                "top_p": null, "timeouts": timeouts, "prompts": prompts,
                "load": { "rate": {
                    "rps": 10.0, "arrivals": "constant", "duration_ms": 10000, "max_queue_ms": 10000
                } }
            }
        ],
        "prompt_set": "x"
    }))
    .expect("test plan parses")
}

/// Records of provider `p` in `scenario`, each `(step, n, outcome, e2e, lag)` being `n`
/// final first attempts of sweep step `step` with `outcome`: `ok` ones with TTFT `e2e / 2`
/// and E2E `e2e` µs and 20 output tokens; all with `lag` µs of `sched_lag`.
pub fn add(
    agg: &mut Aggregate,
    region: &str,
    scenario: &str,
    load: LoadKind,
    groups: &[(u32, usize, Outcome, u64, i64)],
) {
    add_for(agg, region, "p", scenario, load, groups);
}

/// [`add`] for `provider`.
pub fn add_for(
    agg: &mut Aggregate,
    region: &str,
    provider: &str,
    scenario: &str,
    load: LoadKind,
    groups: &[(u32, usize, Outcome, u64, i64)],
) {
    let mut set = HistogramSet::new();
    for &(step, n, outcome, e2e, lag) in groups {
        for _ in 0..n {
            let ok = outcome == Outcome::Ok;
            let rec = ProbeRecord {
                load,
                step,
                concurrency: [2, 4, 8][step as usize] * u32::from(load == LoadKind::Sweep),
                provider: provider.into(),
                scenario: scenario.into(),
                attempt: 1,
                final_attempt: true,
                turn: 1,
                outcome: Some(outcome),
                sched_lag_us: lag,
                ttft_us: ok.then_some(e2e / 2),
                e2e_us: ok.then_some(e2e),
                output_tokens: if ok { 20 } else { 0 },
                ..Default::default()
            };
            agg.add_record(region, &rec);
            set.record_probe(&rec, &[]);
        }
    }
    for (k, h) in set.drain() {
        agg.add_histogram(region, k, &h);
    }
}

/// us-east: E2E 1.00, 1.04, 2.00 ms at c = 2, 4, 8 (a cancelled request at c = 4);
/// eu-west: flat 1.00 ms, but 1 of 10 requests fails at c = 4. Values below 2048 µs are
/// exact in HDR.
pub fn sweep_aggregate() -> Aggregate {
    let mut agg = Aggregate::default();
    let us = [
        (0, 10, Outcome::Ok, 1_000, 0),
        (1, 20, Outcome::Ok, 1_040, 0),
        (1, 1, Outcome::Cancelled, 0, 0),
        (2, 30, Outcome::Ok, 2_000, 0),
    ];
    add(&mut agg, "us-east", "sw", LoadKind::Sweep, &us);
    let eu = [
        (0, 10, Outcome::Ok, 1_000, 0),
        (1, 9, Outcome::Ok, 1_000, 0),
        (1, 1, Outcome::Http5xx, 0, 0),
        (2, 10, Outcome::Ok, 1_000, 0),
    ];
    add(&mut agg, "eu-west", "sw", LoadKind::Sweep, &eu);
    agg
}

/// [`plan`] with its sweep's knee changed by `f`.
pub fn plan_with_knee(f: impl FnOnce(&mut KneeRule)) -> Plan {
    let mut plan = plan();
    let LoadModel::Sweep(spec) = &mut plan.scenarios[0].load else {
        unreachable!()
    };
    f(&mut spec.knee);
    plan
}

/// A complete agent `id` of `region`.
pub fn agent(id: &str, region: &str) -> AgentSummary {
    AgentSummary {
        agent_id: id.into(),
        region: region.into(),
        clock_offset_us: 0,
        clock_uncertainty_us: 0,
        records: 0,
        batches: 0,
        complete: true,
        skipped: 0,
        delivery: Default::default(),
    }
}

/// us-east sends its 100 arrivals (lag 0.2 ms, TTFT 0.5 ms, E2E 1 ms); eu-west sends 90
/// and drops 10.
pub fn add_rate(agg: &mut Aggregate) {
    let rate = LoadKind::Rate;
    add(
        agg,
        "us-east",
        "open",
        rate,
        &[(0, 100, Outcome::Ok, 1_000, 200)],
    );
    let eu = [
        (0, 90, Outcome::Ok, 1_000, 200),
        (0, 10, Outcome::Dropped, 0, 10_000_000),
    ];
    add(agg, "eu-west", "open", rate, &eu);
}

/// The demo's sample sizes: 12 `ok` requests per region cell of provider `p` in three
/// regions (E2E 100..=1200 ms, TTFT half), and 400 for `q` in us-east alone (E2E
/// 1001..=1400 ms).
pub fn demo_sized() -> Summary {
    demo_sized_with(&latmesh_core::plan::DEFAULT_PERCENTILES)
}

/// [`demo_sized`] with the plan's `percentiles`.
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

/// A provider `name` asking for `model_id`, expecting `expect` (its `expect_model`).
pub fn spec(name: &str, model_id: &str, expect: Option<&str>) -> ProviderSpec {
    let mut p: ProviderSpec = serde_json::from_value(serde_json::json!({
        "name": name, "base_url": "http://127.0.0.1:9/v1", "api_key_env": null,
        "model_id": model_id,
    }))
    .unwrap();
    p.expect_model = expect.map(str::to_string);
    p
}

/// A matrix cell of (`region`, `provider`, scenario `s`) that counted `models` and
/// fingerprints `fps`.
pub fn cell(
    region: &str,
    provider: &str,
    models: &[(&str, u64)],
    fps: &[(&str, u64)],
) -> MatrixCell {
    let map = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    let mut c: MatrixCell = serde_json::from_value(serde_json::json!({
        "region": region, "provider": provider, "scenario": "s", "attempts": 0,
        "samples": 0, "ttft": null, "ttfc": null, "e2e": null, "tpot_p50_ms": null,
        "itl_p50_ms": null, "error_pct": 0.0, "requests": 0, "request_error_pct": 0.0,
        "throttled_pct": 0.0, "output_tokens_mean": null, "tokens_from_usage": 0,
        "usage_chunk_delta_mean": null, "usage_chunk_mismatches": 0, "last_error": null,
        "outcomes": {},
    }))
    .unwrap();
    c.answered_models = map(models);
    c.system_fingerprints = map(fps);
    c
}

/// `openai` `ALL` rows of two scenarios: a model swapped during the campaign, and
/// fingerprints.
pub fn swapped() -> [MatrixCell; 2] {
    [
        cell(
            ALL_REGIONS,
            "openai",
            &[("gpt-4o-2024-08-06", 10)],
            &[("fp_1", 10)],
        ),
        {
            let mut c = cell(
                ALL_REGIONS,
                "openai",
                &[("gpt-4o-2024-11-20", 2), ("gpt-4o-mini", 1)],
                &[("fp_2", 3)],
            );
            c.scenario = "t".into();
            c
        },
    ]
}
