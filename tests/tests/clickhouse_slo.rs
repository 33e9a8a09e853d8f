//! Issue 21's workloads stored in a real ClickHouse: warm-up rows left out of every figure,
//! SLO goodput per cell, rate steps, the SLO search's answer, generated-prompt tiers and
//! token counts rebuilt from ClickHouse (`store::query::stored_summary`, what `latmesh query
//! tiers` / `query slo` and reports print) equal, field for field, to the coordinator's
//! in-memory summary of the same records (`results::summary::build`), and to exact figures.
//!
//! The campaign is `latmesh_results::fixtures::workloads`'s plan, and the records follow its
//! groups (its module doc has the figures; prefill 2000 tokens/s): generated here, sent through `store::insert_batch` per
//! agent and into an in-memory `Aggregate`. The server: `LATMESH_CLICKHOUSE_URL` (as the
//! other ClickHouse tests).

use latmesh_core::hist::{HistKey, HistogramSet};
use latmesh_core::load::{LoadKind, SearchEnd, StepVerdict};
use latmesh_core::metrics::Metric;
use latmesh_core::record::{Outcome, ProbeRecord, Usage};
use latmesh_results::aggregate::Aggregate;
use latmesh_results::fixtures::{self, workloads};
use latmesh_results::summary::{self, Summary};
use latmesh_store::{self as store, AgentRow, BatchKey, CampaignRow, QueryFilter};

const CAMPAIGN: &str = "w1";
const START_AT: i64 = 1_700_000_000_000_000;

/// One group of identical final first attempts (as the fixture's).
#[derive(Clone, Copy)]
struct Group {
    provider: &'static str,
    scenario: &'static str,
    load: LoadKind,
    step: u32,
    target_rps: f64,
    n: usize,
    /// TTFT of an `ok` request, ms; `None`: refused for its length (HTTP 400).
    ttft_ms: Option<u64>,
    prompt_tokens: Option<u32>,
    warmup: bool,
}

/// The fixture's groups of `region` (see `latmesh_results::fixtures::workloads`).
fn groups(region: &str) -> Vec<Group> {
    let rounds = LoadKind::Rounds;
    let rate = LoadKind::Rate;
    let g = |provider, scenario, load, step, target_rps, n, ttft_ms, prompt_tokens| Group {
        provider,
        scenario,
        load,
        step,
        target_rps,
        n,
        ttft_ms,
        prompt_tokens,
        warmup: false,
    };
    let warm = |g: Group| Group { warmup: true, ..g };
    let us = region == "us-east";
    let mut out = vec![
        warm(g("p", "ctx.1k", rounds, 0, 0.0, 1, Some(9_000), Some(1012))),
        warm(g("q", "ctx.1k", rounds, 0, 0.0, 1, Some(9_000), Some(1210))),
        warm(g("p", "ctx.8k", rounds, 0, 0.0, 1, Some(9_000), Some(8012))),
        warm(g("q", "ctx.8k", rounds, 0, 0.0, 1, None, None)),
        g(
            "p",
            "ctx.1k",
            rounds,
            0,
            0.0,
            if us { 28 } else { 30 },
            Some(200),
            Some(1012),
        ),
        g("q", "ctx.1k", rounds, 0, 0.0, 30, Some(200), Some(1210)),
        g("p", "ctx.8k", rounds, 0, 0.0, 30, Some(1200), Some(8012)),
        g("q", "ctx.8k", rounds, 0, 0.0, 30, None, None),
        g("p", "ramp", rate, 0, 2.0, 20, Some(100), None),
        g("q", "ramp", rate, 0, 2.0, 20, Some(100), None),
        g("p", "ramp", rate, 1, 4.0, 30, Some(200), None),
        g("p", "ramp", rate, 1, 4.0, 10, Some(900), None),
        g("q", "ramp", rate, 1, 4.0, 40, Some(150), None),
        g("p", "find", rate, 0, 2.0, 20, Some(100), None),
        g("p", "find", rate, 1, 4.0, 40, Some(200), None),
        g("p", "find", rate, 2, 8.0, 40, Some(300), None),
        g("p", "find", rate, 2, 8.0, 40, Some(700), None),
        g("p", "find", rate, 3, 6.0, 45, Some(300), None),
        g("p", "find", rate, 3, 6.0, 15, Some(700), None),
        g("q", "find", rate, 0, 2.0, 15, Some(300), None),
        g("q", "find", rate, 0, 2.0, 5, Some(700), None),
    ];
    if us {
        out.push(g("p", "ctx.1k", rounds, 0, 0.0, 2, Some(800), Some(1012)));
        out.push(warm(g("p", "ramp", rate, 0, 2.0, 1, Some(5_000), None)));
    }
    out
}

/// The records of `region` and their histograms (warm-up and failed requests record none).
fn records(region: &str) -> (Vec<ProbeRecord>, HistogramSet) {
    let mut set = HistogramSet::new();
    let mut out = Vec::new();
    let mut send = START_AT + 1_000;
    for g in groups(region) {
        for i in 0..g.n {
            let ok = g.ttft_ms.is_some();
            let ttft_us = g.ttft_ms.map(|ms| ms * 1000);
            send += 1_000;
            out.push(ProbeRecord {
                load: g.load,
                step: g.step,
                slot: i as u32,
                provider: g.provider.into(),
                scenario: g.scenario.into(),
                prompt_id: "a".into(),
                attempt: 1,
                final_attempt: true,
                turn: 1,
                stream: true,
                send_agent_unix_us: send,
                outcome: Some(if ok { Outcome::Ok } else { Outcome::Http4xx }),
                http_status: Some(if ok { 200 } else { 400 }),
                error_type: (!ok).then(|| "invalid_request_error".into()),
                error_message: (!ok)
                    .then(|| "prompt is too long: 9610 tokens > 8192 maximum".into()),
                ttft_us,
                e2e_us: ttft_us.map(|t| t + 640_000),
                tpot_us: ok.then_some(10_000),
                output_tokens: if ok { 64 } else { 0 },
                usage: Usage {
                    prompt_tokens: g.prompt_tokens.filter(|_| ok),
                    ..Usage::default()
                },
                input_tokens: match g.scenario {
                    "ctx.1k" => 1000,
                    "ctx.8k" => 8000,
                    _ => 0,
                },
                warmup: g.warmup,
                target_rps: g.target_rps,
                slo_met: Some(g.ttft_ms.is_some_and(|ms| ms <= 500)),
                ..ProbeRecord::default()
            });
            if g.warmup || !ok {
                continue;
            }
            let key = |metric| HistKey {
                provider: g.provider.into(),
                scenario: g.scenario.into(),
                metric,
                step: g.step,
            };
            let ttft = ttft_us.unwrap_or(0);
            set.record(key(Metric::Ttft), ttft);
            set.record(key(Metric::Tpot), 10_000);
            set.record(key(Metric::E2e), ttft + 640_000);
            if g.scenario.starts_with("ctx.") {
                set.record(key(Metric::Ttst), 250_000);
                set.record(key(Metric::PrefillTps), 2_000);
                set.record(key(Metric::E2ePerToken), 20_000);
            }
        }
    }
    (out, set)
}

/// Stores the campaign (plan, both agents' records and histograms, agent rows) in a fresh
/// database; returns the client, the database and the in-memory summary of the same records.
async fn stored(test: &str) -> (clickhouse::Client, String, Summary) {
    let (client, db) = latmesh_testkit::fresh_db(test);
    store::migrate(&client, &db, None).await.unwrap();
    let plan = workloads::plan();
    store::insert_campaign(
        &client,
        &db,
        &CampaignRow::new(CAMPAIGN, &plan, START_AT - 5_000_000, START_AT, "test"),
    )
    .await
    .unwrap();
    let mut agg = Aggregate::for_plan(&plan);
    let mut agents = Vec::new();
    for (agent, region) in [("a1", "us-east"), ("b1", "eu-west")] {
        let (recs, mut set) = records(region);
        let hists: Vec<_> = set
            .drain()
            .into_iter()
            .map(|(k, h)| (k, h, START_AT, START_AT + 60_000_000))
            .collect();
        for r in &recs {
            agg.add_record(region, r);
        }
        for (k, h, _, _) in &hists {
            agg.add_histogram(region, k.clone(), h);
        }
        let key = BatchKey::new(CAMPAIGN, agent, region, 0, 1);
        store::insert_batch(&client, &db, &key, &recs, &hists)
            .await
            .unwrap();
        let mut a = fixtures::agent(agent, region);
        a.records = recs.len() as u64;
        a.batches = 1;
        agents.push(a);
    }
    let rows: Vec<AgentRow> = agents
        .iter()
        .map(|a| AgentRow::from_summary(CAMPAIGN, a, "0.1.0", START_AT + 600_000_000))
        .collect();
    store::insert_agents(&client, &db, &rows).await.unwrap();
    let mem = summary::build(CAMPAIGN, &plan, START_AT, &agg, agents);
    (client, db, mem)
}

#[tokio::test]
async fn stored_goodput_steps_searches_and_tiers_equal_the_in_memory_summary() {
    let (client, db, mem) = stored("slo").await;
    let sql = store::query::stored_summary(&client, &db, &QueryFilter::campaign(CAMPAIGN))
        .await
        .unwrap();

    // Field for field, from ClickHouse.
    assert_eq!(sql.rate_steps, mem.rate_steps);
    assert_eq!(sql.searches, mem.searches);
    assert_eq!(sql.tiers, mem.tiers);
    assert_eq!(sql.token_counts, mem.token_counts);
    let with_data: Vec<_> = mem
        .cells
        .iter()
        .filter(|c| c.attempts > 0 || c.warmup > 0)
        .collect();
    assert_eq!(sql.cells.len(), with_data.len());
    for want in with_data {
        let got = sql
            .cell(&want.region, &want.provider, &want.scenario)
            .unwrap_or_else(|| {
                panic!(
                    "no cell {} {} {}",
                    want.region, want.provider, want.scenario
                )
            });
        // `last_error`: the latest by send time from ClickHouse, the last to arrive in memory.
        let strip = |c: &summary::MatrixCell| summary::MatrixCell {
            last_error: None,
            ..c.clone()
        };
        assert_eq!(
            strip(got),
            strip(want),
            "{} {} {}",
            want.region,
            want.provider,
            want.scenario
        );
    }

    // Exact figures (the fixture's module doc).
    let cell = |region: &str, provider: &str, scenario: &str| {
        sql.cell(region, provider, scenario).unwrap().clone()
    };
    // Warm-up: counted apart (one per region and provider of a tier; one ramp arrival of p
    // in us-east), never an attempt; its 9 s TTFT and missed SLO are nowhere.
    let c = cell("ALL", "p", "ctx.1k");
    assert_eq!((c.warmup, c.attempts, c.samples), (2, 60, 60));
    let g = c.goodput.unwrap();
    // 96.7 % [88.6, 99.1] against 90 %: undecided (the interval contains the target).
    assert_eq!((g.requests, g.met, g.meets), (60, 58, None));
    assert_eq!(cell("us-east", "p", "ramp").warmup, 1);
    assert_eq!(cell("eu-west", "p", "ramp").warmup, 0);
    assert!(cell("ALL", "p", "ctx.1k").ttft.unwrap().p99_ms < 1000.0);
    let g = cell("ALL", "p", "ctx.8k").goodput.unwrap();
    assert_eq!((g.requests, g.met, g.meets), (60, 0, Some(false)));
    // The rate sweep and the search have no cell goodput (their steps run at different rates),
    // in ClickHouse as in memory: the ramp's P90 TTFT bound (400 ms) fails p's step 1 instead.
    assert!(cell("ALL", "p", "ramp").goodput.is_none());
    assert!(cell("ALL", "p", "find").goodput.is_none());

    // Rate steps: p's search ran 4 steps at 2, 4, 8, 6 rps; q one at 2.
    let steps = |region: &str, provider: &str, scenario: &str| -> Vec<_> {
        sql.rate_steps
            .iter()
            .filter(|r| r.region == region && r.provider == provider && r.scenario == scenario)
            .map(|r| (r.step, r.target_rps, r.sent, r.verdict))
            .collect()
    };
    use StepVerdict::{Insufficient, Met, Missed};
    assert_eq!(
        steps("ALL", "p", "find"),
        vec![
            (0, 2.0, 40, Some(Met)),
            (1, 4.0, 80, Some(Met)),
            (2, 8.0, 160, Some(Missed)),
            (3, 6.0, 120, Some(Missed)),
        ]
    );
    assert_eq!(steps("ALL", "q", "find"), vec![(0, 2.0, 40, Some(Missed))]);
    // A region's ramp step 0 has 20 samples: too few for its P90 bound.
    assert_eq!(
        steps("us-east", "p", "ramp"),
        vec![(0, 2.0, 20, Some(Insufficient)), (1, 4.0, 40, Some(Missed))]
    );
    let search = |region: &str, provider: &str| {
        sql.searches
            .iter()
            .find(|s| s.region == region && s.provider == provider && s.scenario == "find")
            .unwrap()
            .outcome
    };
    let p = search("ALL", "p");
    assert_eq!(
        (p.met_rps, p.missed_rps, p.end),
        (Some(4.0), Some(6.0), SearchEnd::StepsUsed)
    );
    let q = search("eu-west", "q");
    assert_eq!((q.met_rps, q.end), (None, SearchEnd::MinMissed));

    // Tiers: q refuses 8k for its length (30 per region), p's TTFT grows with the tier.
    let tier = |region: &str, provider: &str, scenario: &str| {
        sql.tiers
            .iter()
            .find(|t| t.region == region && t.provider == provider && t.scenario == scenario)
            .unwrap()
            .clone()
    };
    let q8 = tier("ALL", "q", "ctx.8k");
    assert_eq!(
        (q8.context_refused, q8.samples, q8.error_pct),
        (60, 0, 100.0)
    );
    assert_eq!(tier("us-east", "q", "ctx.8k").context_refused, 30);
    let (p1, p8) = (tier("ALL", "p", "ctx.1k"), tier("ALL", "p", "ctx.8k"));
    assert!(p8.ttft.unwrap().p50_ms > 5.0 * p1.ttft.unwrap().p50_ms);
    assert_eq!(p1.billed_prompt_tokens_mean, Some(1012.0));
    // Medians to the histograms' precision (3 significant digits: a value's bucket top).
    let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() <= want * 1e-3);
    assert!(near(p1.prefill_tps_p50, 2000.0), "{:?}", p1.prefill_tps_p50);
    assert!(near(p1.ttst_p50_ms, 250.0), "{:?}", p1.ttst_p50_ms);
    assert!(
        near(p1.e2e_per_token_p50_ms, 20.0),
        "{:?}",
        p1.e2e_per_token_p50_ms
    );
    let q_counts = sql.token_counts.iter().find(|t| t.provider == "q").unwrap();
    assert!(q_counts.counts_differently, "{}", q_counts.note);
    assert_eq!(q_counts.tiers, vec![(1000, 1210.0, 60)]);

    // The outcome mix leaves warm-up out too: q's 8k warm-up request was refused as well
    // (one per region), yet 30 refusals per region and 60 in all are counted.
    let errors = store::errors(
        &client,
        &db,
        &QueryFilter {
            scenario: Some("ctx.8k".into()),
            ..QueryFilter::campaign(CAMPAIGN)
        },
    )
    .await
    .unwrap();
    let refusals: Vec<_> = errors
        .iter()
        .filter(|e| e.provider == "q" && e.outcome == "http_4xx")
        .map(|e| (e.region.as_str(), e.count))
        .collect();
    assert_eq!(
        refusals,
        vec![("eu-west", 30), ("us-east", 30), ("ALL", 60)],
        "{errors:?}"
    );
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test]
async fn a_region_filter_gives_that_region_as_all() {
    let (client, db, _) = stored("slo_region").await;
    let all = store::query::stored_summary(&client, &db, &QueryFilter::campaign(CAMPAIGN))
        .await
        .unwrap();
    let only = store::query::stored_summary(
        &client,
        &db,
        &QueryFilter {
            region: Some("us-east".into()),
            ..QueryFilter::campaign(CAMPAIGN)
        },
    )
    .await
    .unwrap();
    // The filtered ALL rows are us-east's, and no eu-west row is left.
    let as_all = |region: &str, s: &Summary| {
        let mut tiers: Vec<_> = s
            .tiers
            .iter()
            .filter(|t| t.region == region)
            .cloned()
            .collect();
        for t in &mut tiers {
            t.region = "ALL".into();
        }
        let mut steps: Vec<_> = s
            .rate_steps
            .iter()
            .filter(|r| r.region == region)
            .cloned()
            .collect();
        for r in &mut steps {
            r.region = "ALL".into();
        }
        (tiers, steps)
    };
    assert_eq!(as_all("ALL", &only), as_all("us-east", &all));
    assert!(only.tiers.iter().all(|t| t.region != "eu-west"));
    assert!(only.rate_steps.iter().all(|t| t.region != "eu-west"));
    latmesh_testkit::drop_db(&client, &db).await;
}

/// Runs `latmesh query <what> --campaign w1` against `db` (with `--json` when `json`).
fn query(db: &str, what: &str, json: bool) -> String {
    let mut cmd = std::process::Command::new(latmesh_testkit::bin("latmesh"));
    cmd.args([
        "query",
        what,
        "--campaign",
        CAMPAIGN,
        "--clickhouse-url",
        latmesh_testkit::clickhouse_url(),
        "--clickhouse-db",
        db,
    ]);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn latmesh_query_tiers_and_slo_print_the_in_memory_rows() {
    let (client, db, mem) = stored("slo_cli").await;
    // JSON: exactly the in-memory rows (compared as text: floats print the same digits).
    let tiers = serde_json::json!({ "tiers": mem.tiers, "token_counts": mem.token_counts });
    assert_eq!(
        query(&db, "tiers", true).trim_end(),
        serde_json::to_string_pretty(&tiers).unwrap()
    );
    // The cells: as `stored_summary` orders them (equal to the in-memory cells: the test
    // above); the steps and answers: the in-memory rows.
    let sql = store::query::stored_summary(&client, &db, &QueryFilter::campaign(CAMPAIGN))
        .await
        .unwrap();
    let cells: Vec<_> = sql.cells.iter().filter(|c| c.goodput.is_some()).collect();
    // Every scenario has an SLO; the two tiers (one load each) have a cell goodput, the rate
    // sweep and the search only per step: 2 scenarios × 3 rows (2 regions and ALL) × 2
    // providers.
    assert_eq!(cells.len(), 2 * 3 * 2, "the tiers' cells");
    let slo = serde_json::json!({
        "goodput": cells,
        "rate_steps": mem.rate_steps,
        "searches": mem.searches,
    });
    assert_eq!(
        query(&db, "slo", true).trim_end(),
        serde_json::to_string_pretty(&slo).unwrap()
    );
    // Tables: the search's answer in one line, a goodput line, a refused tier, the
    // token-count note.
    let text = query(&db, "slo", false);
    let line = |text: &str, parts: &[&str]| {
        text.lines().any(|l| {
            parts.iter().all(|p| l.split_whitespace().any(|w| w == *p))
                && parts.iter().all(|p| l.contains(p))
        })
    };
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().take(2).eq(["p", "ALL"])
                && l.ends_with("meets the SLO up to 4.00 rps per agent (misses at 6.00 rps per agent); steps used up")),
        "{text}"
    );
    assert!(line(&text, &["ctx.1k", "ALL", "p", "58/60", "2"]), "{text}");
    let text = query(&db, "tiers", false);
    assert!(
        text.contains("q counts 1.21 tokens per generated word"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("| q ")
            && l.contains("| ALL ")
            && l.contains("refused (context)")),
        "{text}"
    );
    latmesh_testkit::drop_db(&client, &db).await;
}
