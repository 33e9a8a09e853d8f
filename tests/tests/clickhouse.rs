//! ClickHouse storage against a real server: migrations, row round trips, idempotent batch
//! inserts, and the SQL matrix equal to the coordinator's in-memory matrix.
//!
//! The server: `LATMESH_CLICKHOUSE_URL` when set (the test command starts one), else
//! `scripts/clickhouse.sh start` (installs Debian's clickhouse-server on first use and leaves
//! the server running for the next run; stop it with `scripts/clickhouse.sh stop`). Each test
//! works in its own fresh database, so they run in parallel.

use std::collections::BTreeSet;
use std::time::Duration;

use hdrhistogram::Histogram;
use latmesh_core::hist::{HistKey, HistogramSet, new_histogram};
use latmesh_core::metrics::{self, Metric};
use latmesh_core::plan::{Plan, PlanPrompt, ProviderSpec, RoundsSpec, ScenarioSpec, Timeouts};
use latmesh_core::prompts::Message;
use latmesh_core::record::{Outcome, OutputTokensSource, ProbeRecord, Usage};
use latmesh_results::aggregate::Aggregate;
use latmesh_results::summary::{self, AgentSummary};
use latmesh_store::{
    self as store, AgentRow, BatchKey, CampaignRow, HistogramRow, InsertOutcome, IntervalHistogram,
    QueryFilter, RequestRow, StoreError,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

async fn migrated(test: &str) -> (clickhouse::Client, String) {
    let (client, db) = latmesh_testkit::fresh_db(test);
    store::migrate(&client, &db, None).await.unwrap();
    (client, db)
}

const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-southeast"];
const PROVIDERS: [&str; 4] = ["alpha", "beta", "gamma-推理", "delta"];
const SCENARIOS: [&str; 2] = ["chat-short", "long-input"];

fn plan() -> Plan {
    Plan {
        name: "ClickHouse 测试 campaign".into(),
        seed: 7,
        metrics_version: metrics::METRICS_VERSION,
        regions: REGIONS.iter().map(|s| s.to_string()).collect(),
        rounds: RoundsSpec {
            count: 10,
            interval_ms: 1_000,
            gap_ms: 10,
        },
        providers: PROVIDERS
            .iter()
            .map(|p| ProviderSpec {
                name: p.to_string(),
                base_url: "http://127.0.0.1:1/v1".into(),
                api_key_env: Some("LATMESH_TEST_KEY".into()),
                model_id: "deepseek-v3".into(),
                expect_model: None,
                pass_reasoning: false,
                limits: Default::default(),
                price: None,
                user_agent: None,
                request: Default::default(),
            })
            .collect(),
        scenarios: SCENARIOS
            .iter()
            .map(|s| ScenarioSpec {
                name: s.to_string(),
                stream: true,
                max_tokens: 64,
                temperature: Some(0.0),
                top_p: None,
                timeouts: Timeouts::default(),
                prompts: vec![PlanPrompt {
                    id: "zh-001".into(),
                    messages: vec![Message::new(
                        "user",
                        "用一句话解释量子纠缠 'quoted' \\ back\tslash",
                    )],
                    follow_ups: vec![],
                }],
                policy: Default::default(),
                load: Default::default(),
                failover: None,
                extra_body: Default::default(),
                synth: None,
                output_tokens: None,
                warmup: 0,
                slo: None,
            })
            .collect(),
        prompt_set: "mixed".into(),
        timezones: Default::default(),
        windows: Vec::new(),
        schedule: None,
        selection: None,
        compat: None,
        quality: None,
        percentiles: latmesh_core::plan::default_percentiles(),
        text_salt: None,
    }
}

/// Stores campaign `campaign_id` of `plan`, launched 5 s before `start_at`.
async fn insert_plan(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
    plan: &Plan,
    start_at: i64,
) {
    store::insert_campaign(
        client,
        db,
        &CampaignRow::new(campaign_id, plan, start_at - 5_000_000, start_at, "test"),
    )
    .await
    .unwrap();
}

fn full_record() -> ProbeRecord {
    ProbeRecord {
        load: latmesh_core::load::LoadKind::Sweep,
        step: 2,
        concurrency: 16,
        failover: true,
        round: 3,
        slot: 5,
        provider: "gamma-推理".into(),
        scenario: "chat-short".into(),
        prompt_id: "zh-001".into(),
        attempt: 2,
        stream: true,
        send_agent_unix_us: 1_700_000_123_456_789,
        sched_lag_us: 1_234,
        outcome: Some(Outcome::Ok),
        http_status: Some(200),
        ttfb_us: Some(80_001),
        ttft_us: Some(120_002),
        ttfc_us: Some(130_003),
        e2e_us: Some(900_004),
        tpot_us: Some(12_005),
        decode_tps: Some(83.333_333_333_333_33),
        output_tokens: 64,
        tokens_from_usage: true,
        content_chunks: 60,
        reasoning_chunks: 3,
        tool_call_chunks: 1,
        usage: Usage {
            prompt_tokens: Some(17),
            completion_tokens: Some(64),
            total_tokens: Some(81),
            reasoning_tokens: Some(3),
            cached_tokens: Some(0),
        },
        finish_reason: Some("stop".into()),
        saw_done: true,
        retry_after_s: Some(1.5),
        error_type: Some("rate_limit_错误".into()),
        error_message: Some("Rate limit reached — 请稍后再试 🙏 'quote' \\ \n newline".into()),
        itl_max_us: Some(45_006),
        comment_lines: 2,
        response_bytes: 12_345,
        final_attempt: true,
        request_latency_us: Some(3_100_007),
        turn: 3,
        cache_nonce: true,
        conn_reused: false,
        conn_retried: true,
        dns_us: Some(1_008),
        connect_us: Some(2_009),
        tls_us: Some(30_010),
        first_byte_us: Some(80_011),
        first_nonblank_us: Some(95_012),
        reasoning_us: Some(10_001),
        token_payloads: 61,
        usage_chunk_delta: Some(3),
        error_code: Some("429_代码".into()),
        output_tokens_source: OutputTokensSource::UsagePlusReasoning,
        answered_model: Some("gamma-推理-2024-08-06".into()),
        system_fingerprint: Some("fp_ü'\\1".into()),
        cut_fields: vec!["finish_reason".into(), "usage.prompt_tokens".into()],
        usage_requested: true,
        input_tokens: 8000,
        warmup: true,
        ttst_us: Some(123_456),
        target_rps: 2.5,
        slo_met: Some(false),
        phase_start_in_flight: 7,
    }
}

fn empty_record() -> ProbeRecord {
    ProbeRecord {
        provider: "alpha".into(),
        scenario: "long-input".into(),
        prompt_id: "p".into(),
        attempt: 1,
        send_agent_unix_us: 1_700_086_400_000_000,
        outcome: Some(Outcome::ConnectionError),
        ..Default::default()
    }
}

#[tokio::test]
async fn migrations_run_twice_and_the_second_run_applies_nothing() {
    let (client, db) = latmesh_testkit::fresh_db("migrate");
    let first = store::migrate(&client, &db, None).await.unwrap();
    assert_eq!(
        first,
        store::MIGRATIONS
            .iter()
            .map(|m| m.name.to_string())
            .collect::<Vec<_>>()
    );
    let second = store::migrate(&client, &db, None).await.unwrap();
    assert!(second.is_empty(), "{second:?}");
    let tables: Vec<String> = client
        .query("SELECT name FROM system.tables WHERE database = ? ORDER BY name")
        .bind(db.as_str())
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(
        tables,
        [
            "agents",
            "campaigns",
            "compat_results",
            "histograms",
            "quality_samples",
            "requests",
            "schema_migrations"
        ]
    );
    let recorded: Vec<(u32, String)> = client
        .query(&format!(
            "SELECT version, name FROM {db}.schema_migrations ORDER BY version"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(recorded.len(), store::MIGRATIONS.len());
    latmesh_testkit::drop_db(&client, &db).await;

    // A run interrupted half-way (some tables created, nothing recorded) completes.
    let (client, db) = latmesh_testkit::fresh_db("migrate_half");
    client
        .query(&format!("CREATE DATABASE {db}"))
        .execute()
        .await
        .unwrap();
    let stmts = store::render_migration(store::MIGRATIONS[0].sql, &db, None).unwrap();
    for s in &stmts[..2] {
        client.query_raw(s).execute().await.unwrap();
    }
    assert_eq!(
        store::migrate(&client, &db, None).await.unwrap().len(),
        store::MIGRATIONS.len()
    );
    assert!(store::migrate(&client, &db, None).await.unwrap().is_empty());
    latmesh_testkit::drop_db(&client, &db).await;
}

#[test]
fn cluster_ddl_replicates_and_distributes_every_table() {
    let tables = ["campaigns", "agents", "requests", "histograms"];
    let stmts = store::render_migration(store::MIGRATIONS[0].sql, "latmesh", Some("prod")).unwrap();
    let text = stmts.join(";\n");
    for t in tables {
        let local = stmts
            .iter()
            .find(|s| s.starts_with(&format!("CREATE TABLE IF NOT EXISTS latmesh.{t}_local ")))
            .unwrap_or_else(|| panic!("no local table for {t}:\n{text}"));
        assert!(local.contains("ON CLUSTER prod"), "{local}");
        assert!(
            local.contains(
                "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/latmesh/"
            ),
            "{local}"
        );
        assert!(local.contains("'{replica}'"), "{local}");
        let dist = stmts
            .iter()
            .find(|s| {
                s.starts_with(&format!(
                    "CREATE TABLE IF NOT EXISTS latmesh.{t} ON CLUSTER prod AS latmesh.{t}_local"
                ))
            })
            .unwrap_or_else(|| panic!("no distributed table for {t}:\n{text}"));
        assert!(
            dist.contains(&format!("ENGINE = Distributed(prod, latmesh, {t}_local, ")),
            "{dist}"
        );
    }
    // The single-node form of the same file has none of it.
    let single = store::render_migration(store::MIGRATIONS[0].sql, "latmesh", None)
        .unwrap()
        .join(";\n");
    for word in ["ON CLUSTER", "Replicated", "Distributed", "_local", "{"] {
        assert!(
            !single.contains(word),
            "{word} in single-node DDL:\n{single}"
        );
    }
}

#[tokio::test]
async fn every_row_type_round_trips() {
    let (client, db) = migrated("rows").await;

    let campaign = CampaignRow::new(
        "c-ü-1",
        &plan(),
        1_700_000_000_123_456,
        1_700_000_005_000_000,
        "ops@例子",
    );
    let mut campaigns = vec![campaign.clone()];
    campaigns.push(CampaignRow {
        campaign_id: "c-empty".into(),
        regions: vec![],
        providers: vec![],
        scenarios: vec![],
        created_by: String::new(),
        ..campaign.clone()
    });
    store::insert_rows(&client, &db, "campaigns", &campaigns)
        .await
        .unwrap();
    let back: Vec<CampaignRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.campaigns ORDER BY campaign_id"
        ))
        .fetch_all()
        .await
        .unwrap();
    campaigns.sort_by(|a, b| a.campaign_id.cmp(&b.campaign_id));
    assert_eq!(back, campaigns);
    assert_eq!(
        store::query::campaign(&client, &db, "c-ü-1").await.unwrap(),
        Some(campaign.clone())
    );
    let restored: Plan = serde_json::from_str(
        &back
            .iter()
            .find(|c| c.campaign_id == "c-ü-1")
            .unwrap()
            .plan_json,
    )
    .unwrap();
    assert_eq!(restored, plan());

    let agent = |id: &str, seen: i64, records: u64| {
        AgentRow::from_summary(
            "c-ü-1",
            &AgentSummary {
                agent_id: id.into(),
                region: "ap-southeast".into(),
                clock_offset_us: -12_345,
                clock_uncertainty_us: 678,
                records,
                batches: 3,
                complete: records > 5,
                skipped: 1,
                // Schema 8: every delivery column round-trips (agent-2 had batches refused).
                delivery: latmesh_coordinator::delivery::Delivery {
                    last_seq: (id == "agent-2").then_some(4),
                    batches_rejected: u64::from(id == "agent-2") * 3,
                    rejected: if id == "agent-2" {
                        vec![
                            latmesh_coordinator::delivery::RejectedBatch {
                                seq: 2,
                                reason: "records[0].attempt 0 is outside 1..=1".into(),
                            },
                            latmesh_coordinator::delivery::RejectedBatch {
                                seq: 4,
                                reason: "ü".into(),
                            },
                        ]
                    } else {
                        Vec::new()
                    },
                    records_quarantined: u64::from(id == "agent-2"),
                    histograms_quarantined: u64::from(id == "agent-2") * 2,
                },
            },
            "0.1.0",
            seen,
        )
    };
    let agents = vec![
        agent("agent-1", 1_700_000_001_000_000, 5),
        agent("agent-1", 1_700_000_009_000_000, 9),
        agent("agent-2", 1_700_000_002_000_000, 7),
    ];
    store::insert_agents(&client, &db, &agents).await.unwrap();
    let back: Vec<AgentRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.agents ORDER BY agent_id, seen_at_us"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(back, agents);
    // The latest state per agent.
    assert_eq!(
        store::query::agents(&client, &db, "c-ü-1").await.unwrap(),
        vec![agents[1].clone(), agents[2].clone()]
    );

    let key = BatchKey::new("c-ü-1", "agent-1", "ap-southeast", -12_345, 4);
    let label = |us: i64| {
        if us % 2 == 0 {
            "peak".to_string()
        } else {
            "off-peak".to_string()
        }
    };
    let labelled = key.with_window_label(&label);
    let records = [full_record(), empty_record()];
    let requests: Vec<RequestRow> = records
        .iter()
        .enumerate()
        .map(|(i, r)| RequestRow::from_record(&labelled, i as u32, r))
        .collect();
    assert!(requests[1].http_status.is_none() && requests[1].error_message.is_none());
    store::insert_rows(&client, &db, "requests", &requests)
        .await
        .unwrap();
    let back: Vec<RequestRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.requests ORDER BY row_index"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(back, requests);
    for (row, rec) in back.iter().zip(&records) {
        assert_eq!(&row.to_record(), rec);
    }
    assert_eq!(back[0].send_coord_unix_us, 1_700_000_123_456_789 - 12_345);
    assert_eq!(back[0].send_time, 1_700_000_123);
    assert_eq!(back[0].window, "peak"); // labelled by the coordinator-clock time (even)

    let mut h = new_histogram();
    for v in [
        1u64,
        2,
        2,
        999,
        1_000,
        2_049,
        65_536,
        1_234_567,
        3_600_000_000,
    ] {
        h.record(v).unwrap();
    }
    let hk = HistKey {
        provider: "gamma-推理".into(),
        scenario: "chat-short".into(),
        metric: Metric::Ttft,
        step: 0,
    };
    let hists = vec![
        HistogramRow::from_histogram(
            &key,
            0,
            &hk,
            &h,
            1_700_000_100_000_000,
            1_700_000_110_000_000,
        )
        .unwrap(),
        HistogramRow::from_histogram(
            &key,
            1,
            &HistKey {
                metric: Metric::Itl,
                ..hk.clone()
            },
            &new_histogram(),
            1_700_000_110_000_000,
            1_700_000_120_000_000,
        )
        .unwrap(),
    ];
    assert!(hists[1].values.is_empty() && hists[1].count == 0);
    store::insert_rows(&client, &db, "histograms", &hists)
        .await
        .unwrap();
    let back: Vec<HistogramRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.histograms ORDER BY row_index"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(back, hists);
    let decoded = back[0].decode().unwrap();
    assert_eq!(decoded, h);
    assert_eq!(back[0].from_arrays(), h);
    assert_eq!(back[0].key(), Some(hk));
    assert_eq!(back[0].count, 9);

    let migrations: Vec<store::migrate::MigrationRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.schema_migrations ORDER BY version"
        ))
        .fetch_all()
        .await
        .unwrap();
    assert_eq!(migrations.len(), store::MIGRATIONS.len());
    assert_eq!(migrations[0].name, "0001_init");
    latmesh_testkit::drop_db(&client, &db).await;
}

/// Rows written before migration 5 (here: without its columns) read their output token source
/// from `tokens_from_usage` (usage always won then) and no answered model; rows written after
/// keep theirs.
#[tokio::test]
async fn rows_from_before_the_token_source_read_it_from_tokens_from_usage() {
    let (client, db) = migrated("token_source").await;
    client
        .query(&format!(
            "INSERT INTO {db}.requests (campaign_id, agent_id, row_index, provider, outcome, \
             tokens_from_usage) VALUES ('old', 'a', 0, 'p', 'ok', 1), ('old', 'a', 1, 'p', 'ok', 0)"
        ))
        .execute()
        .await
        .unwrap();
    let back: Vec<RequestRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.requests WHERE campaign_id = 'old' ORDER BY row_index"
        ))
        .fetch_all()
        .await
        .unwrap();
    let read: Vec<_> = back
        .iter()
        .map(|r| {
            let rec = r.to_record();
            (
                r.output_tokens_source.as_str(),
                rec.output_tokens_source,
                rec.answered_model,
                rec.system_fingerprint,
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            ("usage", OutputTokensSource::Usage, None, None),
            ("payloads", OutputTokensSource::Payloads, None, None),
        ]
    );
    // The matrix query counts the payloads that won, and the models answered.
    let key = BatchKey::new("new", "a", "r", 0, 1);
    let rec = |source, model: &str| ProbeRecord {
        provider: "p".into(),
        scenario: "s".into(),
        outcome: Some(Outcome::Ok),
        send_agent_unix_us: 1_700_000_000_000_000,
        output_tokens_source: source,
        tokens_from_usage: source.from_usage(),
        answered_model: Some(model.into()),
        system_fingerprint: Some("fp".into()),
        ..Default::default()
    };
    let rows: Vec<RequestRow> = [
        rec(OutputTokensSource::PayloadsOverUsage, "m-2024"),
        rec(OutputTokensSource::UsagePlusReasoning, "m-2024"),
        rec(OutputTokensSource::PayloadsOverUsage, "n"),
    ]
    .iter()
    .enumerate()
    .map(|(i, r)| RequestRow::from_record(&key, i as u32, r))
    .collect();
    store::insert_rows(&client, &db, "requests", &rows)
        .await
        .unwrap();
    let cells = store::matrix(&client, &db, "new", None).await.unwrap();
    let all = cells.iter().find(|c| c.region == "ALL").unwrap().to_cell();
    assert_eq!(
        (all.samples, all.tokens_over_usage, all.tokens_from_usage),
        (3, 2, 1)
    );
    assert_eq!(
        all.answered_models.into_iter().collect::<Vec<_>>(),
        [("m-2024".to_string(), 2), ("n".to_string(), 1)]
    );
    assert_eq!(all.system_fingerprints.get("fp"), Some(&3));
    latmesh_testkit::drop_db(&client, &db).await;
}

/// `agents` rows written before schema 7 (without its delivery columns) read back as a done
/// agent with nothing refused, so `campaign verify` checks them as it did then.
#[tokio::test]
async fn agent_rows_from_before_schema_7_verify_as_before() {
    let (client, db) = migrated("agents_pre8").await;
    client
        .query(&format!(
            "INSERT INTO {db}.agents (campaign_id, agent_id, region, records, batches, complete) \
             VALUES ('old', 'a', 'r', 5, 2, 1)"
        ))
        .execute()
        .await
        .unwrap();
    let back = store::query::agents(&client, &db, "old").await.unwrap();
    let a = &back[0];
    assert_eq!(
        (
            a.campaign_done,
            a.last_seq,
            a.batches_rejected,
            a.rejected_seqs.len(),
            a.records_quarantined
        ),
        (1, 0, 0, 0, 0)
    );
    assert!(latmesh_store::query::not_verified(a, 2).is_empty());
    let d = a.delivery();
    assert_eq!((d.last_seq, d.batches_rejected), (Some(0), 0));
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test]
async fn a_batch_sent_twice_is_stored_once() {
    let (client, db) = migrated("dedup").await;
    let key = BatchKey::new("c1", "agent-1", "us-east", 250, 1);
    let records: Vec<ProbeRecord> = (0..50)
        .map(|i| ProbeRecord {
            round: i,
            send_agent_unix_us: 1_700_000_000_000_000 + i64::from(i) * 1_000_000,
            ..full_record()
        })
        .collect();
    let mut h = new_histogram();
    h.record(1_000).unwrap();
    let hk = HistKey {
        provider: "alpha".into(),
        scenario: "chat-short".into(),
        metric: Metric::E2e,
        step: 0,
    };
    let hists: Vec<IntervalHistogram> = vec![
        (
            hk.clone(),
            h.clone(),
            1_700_000_000_000_000,
            1_700_000_010_000_000,
        ),
        (
            HistKey {
                metric: Metric::Ttft,
                ..hk
            },
            h,
            1_700_000_000_000_000,
            1_700_000_010_000_000,
        ),
    ];
    let first = store::insert_batch(&client, &db, &key, &records, &hists)
        .await
        .unwrap();
    assert_eq!(
        first,
        InsertOutcome::Inserted {
            requests: 50,
            histograms: 2,
            skipped: 0
        }
    );
    let again = store::insert_batch(&client, &db, &key, &records, &hists)
        .await
        .unwrap();
    assert_eq!(again, InsertOutcome::AlreadyPresent);
    assert_eq!(again.rows(), 0);

    // A batch an earlier attempt wrote only partly: the rest goes in, nothing twice.
    let key2 = BatchKey { seq: 2, ..key };
    let partial: Vec<RequestRow> = records[..20]
        .iter()
        .enumerate()
        .map(|(i, r)| RequestRow::from_record(&key2, i as u32, r))
        .collect();
    store::insert_rows(&client, &db, "requests", &partial)
        .await
        .unwrap();
    let rest = store::insert_batch(&client, &db, &key2, &records, &hists)
        .await
        .unwrap();
    assert_eq!(
        rest,
        InsertOutcome::Inserted {
            requests: 30,
            histograms: 2,
            skipped: 20
        }
    );
    assert_eq!(
        store::insert_batch(&client, &db, &key2, &records, &hists)
            .await
            .unwrap(),
        InsertOutcome::AlreadyPresent
    );

    let counts = store::counts(&client, &db, "c1").await.unwrap();
    assert_eq!(counts.request_rows, 100);
    assert_eq!(counts.histogram_rows, 4);
    assert_eq!(
        counts.duplicate_request_rows + counts.duplicate_histogram_rows,
        0
    );
    assert!(counts.duplicates.is_empty());
    assert_eq!(counts.agents.len(), 1);
    let a = &counts.agents[0];
    assert_eq!(
        (a.batches, a.max_seq, a.request_rows, a.ok_requests),
        (2, 2, 100, 100)
    );
    assert_eq!((a.histogram_rows, a.histogram_values), (4, 4));
    assert!(a.missing_seqs.is_empty());
    // Seqs 1 and 2 hold the same 50 attempts (rounds 0-49): each measured twice, as a resume
    // that ran them again would store them.
    assert_eq!(a.measured_twice, 50);

    // `counts` does see duplicates that bypass the inserter (until a merge removes them).
    store::insert_rows(&client, &db, "requests", &partial[..3])
        .await
        .unwrap();
    let counts = store::counts(&client, &db, "c1").await.unwrap();
    if counts.duplicate_request_rows > 0 {
        assert_eq!(counts.duplicate_request_rows, 3);
        assert_eq!(counts.duplicates.len(), 1);
        assert_eq!(
            (counts.duplicates[0].seq, counts.duplicates[0].rows),
            (2, 53)
        );
    }
    // And ReplacingMergeTree removes them at the merge.
    client
        .query(&format!("OPTIMIZE TABLE {db}.requests FINAL"))
        .execute()
        .await
        .unwrap();
    let counts = store::counts(&client, &db, "c1").await.unwrap();
    assert_eq!(
        (counts.request_rows, counts.duplicate_request_rows),
        (100, 0)
    );
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test]
async fn many_batches_in_one_call_each_stored_once() {
    let (client, db) = migrated("batches").await;
    let recs = |n: u32| -> Vec<ProbeRecord> {
        (0..n)
            .map(|i| ProbeRecord {
                round: i,
                ..full_record()
            })
            .collect()
    };
    let (r1, r2, r3) = (recs(10), recs(7), recs(5));
    let mut h = new_histogram();
    h.record(5_000).unwrap();
    let hists: Vec<IntervalHistogram> = vec![(
        HistKey {
            provider: "alpha".into(),
            scenario: "chat-short".into(),
            metric: Metric::Ttft,
            step: 0,
        },
        h,
        1_700_000_000_000_000,
        1_700_000_005_000_000,
    )];
    let key = |agent, seq| BatchKey::new("c", agent, "eu-west", -40, seq);
    // seq 2 of agent-a is already stored, seq 3 partly.
    store::insert_batch(&client, &db, &key("agent-a", 2), &r2, &hists)
        .await
        .unwrap();
    let part: Vec<RequestRow> = r3[..2]
        .iter()
        .enumerate()
        .map(|(i, r)| RequestRow::from_record(&key("agent-a", 3), i as u32, r))
        .collect();
    store::insert_rows(&client, &db, "requests", &part)
        .await
        .unwrap();

    let input = |key, records, histograms| store::BatchInput {
        key,
        records,
        histograms,
    };
    let out = store::insert_batches(
        &client,
        &db,
        &[
            input(key("agent-a", 1), &r1, &hists),
            input(key("agent-a", 2), &r2, &hists),
            input(key("agent-a", 3), &r3, &[]),
            input(key("agent-b", 1), &r1, &[]),
            input(key("agent-a", 1), &r1, &hists), // the same batch twice in one call
            input(key("agent-b", 2), &[], &[]),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        out,
        vec![
            InsertOutcome::Inserted {
                requests: 10,
                histograms: 1,
                skipped: 0
            },
            InsertOutcome::AlreadyPresent,
            InsertOutcome::Inserted {
                requests: 3,
                histograms: 0,
                skipped: 2
            },
            InsertOutcome::Inserted {
                requests: 10,
                histograms: 0,
                skipped: 0
            },
            InsertOutcome::AlreadyPresent,
            InsertOutcome::Inserted {
                requests: 0,
                histograms: 0,
                skipped: 0
            },
        ]
    );
    let counts = store::counts(&client, &db, "c").await.unwrap();
    assert_eq!(
        (counts.request_rows, counts.histogram_rows),
        (10 + 7 + 5 + 10, 2)
    );
    assert!(counts.duplicates.is_empty());
    let a = counts
        .agents
        .iter()
        .find(|a| a.agent_id == "agent-a")
        .unwrap();
    assert_eq!((a.batches, a.request_rows, a.duplicate_rows), (3, 22, 0));
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test]
async fn errors_say_whether_a_retry_can_help() {
    let (client, db) = migrated("errors").await;
    // A table that does not exist: a schema problem, not retryable.
    let e = store::insert_rows(&client, &db, "nope", &[empty_row()])
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(e.code(), Some(60), "{e}");
    // A row that does not match its table (agents rows into requests): the server names the
    // first unknown column (code 16), not retryable.
    let agent = AgentRow::from_summary(
        "c",
        &AgentSummary {
            agent_id: "a".into(),
            region: "r".into(),
            clock_offset_us: 0,
            clock_uncertainty_us: 0,
            records: 0,
            batches: 0,
            complete: true,
            skipped: 0,
            delivery: Default::default(),
        },
        "v",
        0,
    );
    let e = store::insert_rows(&client, &db, "requests", &[agent])
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(e.code(), Some(16), "{e}");
    // Bytes that do not parse as the columns (a u8 where a String goes): bad data.
    #[derive(clickhouse::Row, serde::Serialize)]
    struct Garbled {
        campaign_id: u8,
        agent_id: u8,
    }
    let e = store::insert_rows(
        &client,
        &db,
        "requests",
        &[Garbled {
            campaign_id: 200,
            agent_id: 1,
        }],
    )
    .await
    .unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert!(
        matches!(e, StoreError::Rejected { code: Some(_), .. }),
        "{e}"
    );
    // Nobody listening: retryable.
    let down = store::client("http://127.0.0.1:1");
    let e = store::insert_rows(&down, &db, "requests", &[empty_row()])
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
    assert!(
        store::ping(&down, Duration::from_secs(2))
            .await
            .unwrap_err()
            .is_retryable()
    );
    store::ping(&client, Duration::from_secs(5)).await.unwrap();
    latmesh_testkit::drop_db(&client, &db).await;
}

fn empty_row() -> RequestRow {
    RequestRow::from_record(&BatchKey::new("c", "a", "r", 0, 1), 0, &empty_record())
}

/// One simulated agent: its records, cut into batches with interval histograms as agents
/// flush them.
struct SimBatch {
    seq: u64,
    records: Vec<ProbeRecord>,
    histograms: Vec<IntervalHistogram>,
}

fn simulate_agent(rng: &mut StdRng, region_ix: usize, rounds: u32) -> Vec<SimBatch> {
    let start = 1_700_000_000_000_000i64 + region_ix as i64 * 7_000;
    let mut batches = Vec::new();
    let mut set = HistogramSet::new();
    let mut records = Vec::new();
    let mut interval_start = start;
    for round in 0..rounds {
        for (p, provider) in PROVIDERS.iter().enumerate() {
            for (s, scenario) in SCENARIOS.iter().enumerate() {
                let send = start + i64::from(round) * 20_000_000 + (p * 2 + s) as i64 * 500_000;
                let roll: f64 = rng.random();
                // Provider p in region r: its own latency level; long inputs prefill slower.
                let base = 40_000.0
                    * (1.0 + p as f64)
                    * (1.0 + 0.6 * region_ix as f64)
                    * if s == 1 { 3.0 } else { 1.0 };
                let outcome = match roll {
                    x if x < 0.82 => Outcome::Ok,
                    x if x < 0.90 => Outcome::Throttled,
                    x if x < 0.94 => Outcome::Http5xx,
                    x if x < 0.97 => Outcome::TimeoutTtft,
                    _ => Outcome::StreamError,
                };
                let mut rec = ProbeRecord {
                    round,
                    slot: (p * 2 + s) as u32,
                    provider: provider.to_string(),
                    scenario: scenario.to_string(),
                    prompt_id: format!("prompt-{}", round % 5),
                    attempt: 1,
                    stream: true,
                    send_agent_unix_us: send,
                    sched_lag_us: rng.random_range(0..3_000),
                    outcome: Some(outcome),
                    // A pooled connection found closed now and then, whatever followed.
                    conn_retried: round % 7 == p as u32,
                    // One cell's phase started loaded, by a different count in each region
                    // (`ALL` shows the most).
                    phase_start_in_flight: if (p, s) == (1, 1) {
                        region_ix as u32 + 2
                    } else {
                        0
                    },
                    ..Default::default()
                };
                let mut gaps = Vec::new();
                match outcome {
                    Outcome::Ok => {
                        // A heavy right tail, plus a few tiny values (exact HDR buckets).
                        let ttft = if rng.random_bool(0.02) {
                            rng.random_range(1..2_000)
                        } else {
                            (base * (rng.random::<f64>() * 2.5).exp()) as u64
                        };
                        let reasoning = if p == 2 {
                            rng.random_range(50_000..400_000)
                        } else {
                            0
                        };
                        let tokens = rng.random_range(1..200u32);
                        let mut t = ttft + reasoning;
                        for _ in 1..tokens.min(40) {
                            let gap = rng.random_range(500..60_000u64);
                            gaps.push(gap);
                            t += gap;
                        }
                        let e2e = t + rng.random_range(0..5_000);
                        rec.http_status = Some(200);
                        rec.ttfb_us = Some(ttft / 2 + 1);
                        rec.ttft_us = Some(ttft);
                        rec.ttfc_us = Some(ttft + reasoning);
                        rec.e2e_us = Some(e2e);
                        rec.tpot_us = metrics::tpot_us(ttft, e2e, tokens);
                        rec.decode_tps = metrics::decode_tps(ttft, e2e, tokens);
                        rec.output_tokens = tokens;
                        rec.output_tokens_source = if rng.random_bool(0.2) {
                            OutputTokensSource::PayloadsOverUsage
                        } else if rng.random_bool(0.7) {
                            OutputTokensSource::Usage
                        } else {
                            OutputTokensSource::Payloads
                        };
                        rec.tokens_from_usage = rec.output_tokens_source.from_usage();
                        // Prompt-cache counts (the cached share): none, the prompt only, or
                        // both (a prompt of 0 and a cached count past the prompt included).
                        match rng.random_range(0..4) {
                            0 => {}
                            1 => rec.usage.prompt_tokens = Some(rng.random_range(0..3000)),
                            _ => {
                                let prompt = rng.random_range(0..3000);
                                rec.usage.prompt_tokens = Some(prompt);
                                rec.usage.cached_tokens = Some(rng.random_range(0..=prompt + 10));
                            }
                        }
                        // What answered: usually a dated name; sometimes another model, a
                        // second fingerprint, or nothing said.
                        rec.answered_model = match rng.random_range(0..10) {
                            0 => None,
                            1 => Some("other-model".into()),
                            _ => Some("deepseek-v3-0324".into()),
                        };
                        rec.system_fingerprint =
                            Some(format!("fp_{}", rng.random_range(0..2))).filter(|_| p != 1);
                        rec.saw_done = true;
                        rec.finish_reason = Some("stop".into());
                        rec.itl_max_us = gaps.iter().copied().max();
                    }
                    Outcome::Throttled => {
                        rec.http_status = Some(429);
                        rec.retry_after_s = Some(2.0);
                        rec.error_type = Some("rate_limit".into());
                        rec.error_message = Some(format!("slow down, round {round}"));
                    }
                    Outcome::Http5xx => {
                        rec.http_status = Some(if rng.random_bool(0.5) { 502 } else { 503 });
                    }
                    _ => rec.error_message = Some("upstream gave up".into()),
                }
                set.record_probe(&rec, &gaps);
                records.push(rec);
            }
        }
        // Flush every few rounds, like an agent's flush interval.
        if round % 4 == 3 || round + 1 == rounds {
            let end = start + i64::from(round + 1) * 20_000_000;
            let histograms = set
                .drain()
                .into_iter()
                .map(|(k, h)| (k, h, interval_start, end))
                .collect();
            interval_start = end;
            batches.push(SimBatch {
                seq: batches.len() as u64 + 1,
                records: std::mem::take(&mut records),
                histograms,
            });
        }
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_matrix_equals_the_in_memory_matrix() {
    let (client, db) = migrated("matrix").await;
    let plan = plan();
    let campaign_id = "matrix-campaign";
    let start_at = 1_700_000_000_000_000;
    insert_plan(&client, &db, campaign_id, &plan, start_at).await;

    // Four agents: two in us-east (their histograms merge within the region), one elsewhere.
    let agents = [
        ("agent-use-1", 0usize, 31i64),
        ("agent-use-2", 0, -1_500),
        ("agent-euw-1", 1, 2_000),
        ("agent-aps-1", 2, -80_000),
    ];
    let mut rng = StdRng::seed_from_u64(0x5EED);
    let mut agg = Aggregate::default();
    let mut summaries = Vec::new();
    let mut total_records = 0u64;
    let mut total_hists = 0u64;
    for (agent_id, region_ix, offset) in agents {
        let region = REGIONS[region_ix];
        let batches = simulate_agent(&mut rng, region_ix, 60);
        let mut records = 0;
        for b in &batches {
            for r in &b.records {
                agg.add_record(region, r);
            }
            for (k, h, _, _) in &b.histograms {
                agg.add_histogram(region, k.clone(), h);
            }
            let key = BatchKey::new(campaign_id, agent_id, region, offset, b.seq);
            let out = store::insert_batch(&client, &db, &key, &b.records, &b.histograms)
                .await
                .unwrap();
            assert_eq!(
                out,
                InsertOutcome::Inserted {
                    requests: b.records.len() as u64,
                    histograms: b.histograms.len() as u64,
                    skipped: 0
                }
            );
            records += b.records.len() as u64;
            total_hists += b.histograms.len() as u64;
        }
        // Re-send the last batch, as an agent does when an ack got lost.
        let last = batches.last().unwrap();
        let key = BatchKey::new(campaign_id, agent_id, region, offset, last.seq);
        assert_eq!(
            store::insert_batch(&client, &db, &key, &last.records, &last.histograms)
                .await
                .unwrap(),
            InsertOutcome::AlreadyPresent
        );
        total_records += records;
        summaries.push(AgentSummary {
            agent_id: agent_id.into(),
            region: region.into(),
            clock_offset_us: offset,
            clock_uncertainty_us: 100,
            records,
            batches: batches.len() as u64,
            complete: true,
            skipped: 0,
            delivery: latmesh_coordinator::delivery::Delivery {
                last_seq: Some(batches.len() as u64),
                ..Default::default()
            },
        });
    }
    let rows: Vec<AgentRow> = summaries
        .iter()
        .map(|a| AgentRow::from_summary(campaign_id, a, "0.1.0", start_at + 600_000_000))
        .collect();
    store::insert_agents(&client, &db, &rows).await.unwrap();

    let summary = summary::build(campaign_id, &plan, start_at, &agg, summaries.clone());
    let sql = store::matrix(&client, &db, campaign_id, None)
        .await
        .unwrap();

    // Every cell with data, exactly: counts, outcome mix, token means, P50/P90/P99 of TTFT,
    // TTFC, E2E, and the TPOT and ITL medians, to the last digit HDR keeps.
    let expected: Vec<_> = summary
        .cells
        .iter()
        .filter(|c| c.attempts > 0)
        .cloned()
        .collect();
    assert_eq!(
        expected.len(),
        (REGIONS.len() + 1) * PROVIDERS.len() * SCENARIOS.len()
    );
    assert_eq!(sql.len(), expected.len(), "one SQL row per cell");
    // Retried connections are counted in both (every 7th round of each provider).
    assert!(expected.iter().all(|c| c.conn_retried > 0), "{expected:?}");
    // Every cell has ok attempts that reported a cached count: its cached share is compared.
    assert!(
        expected
            .iter()
            .all(|c| c.cached_share.as_ref().is_some_and(|s| s.requests > 0)),
        "{expected:?}"
    );
    let mut checked_percentiles = 0;
    for want in &expected {
        let got = sql
            .iter()
            .find(|r| {
                r.region == want.region
                    && r.provider == want.provider
                    && r.scenario == want.scenario
            })
            .unwrap_or_else(|| {
                panic!(
                    "no SQL row for {} {} {}",
                    want.region, want.provider, want.scenario
                )
            });
        // `last_error`: the latest failure by send time here, the last to arrive in memory;
        // both name a failure of the cell, and only a cell without one has none.
        let mut cell = got.to_cell();
        let text = cell.last_error.take();
        assert_eq!(text.is_some(), want.last_error.is_some(), "{text:?}");
        if let Some(text) = &text {
            let outcome = text.split([' ', ':']).next().unwrap();
            assert!(
                outcome != "ok" && want.outcomes.contains_key(outcome),
                "{text} in {:?}",
                want.outcomes
            );
        }
        let want = &summary::MatrixCell {
            last_error: None,
            ..want.clone()
        };
        assert_eq!(
            &cell, want,
            "cell {} {} {}",
            want.region, want.provider, want.scenario
        );
        for (metric, name) in [
            (Metric::Ttft, "ttft"),
            (Metric::E2e, "e2e"),
            (Metric::Tpot, "tpot"),
            (Metric::Itl, "itl"),
        ] {
            let region = (want.region != summary::ALL_REGIONS).then_some(want.region.as_str());
            let h: Option<Histogram<u64>> = agg.histogram(
                region,
                &HistKey {
                    provider: want.provider.clone(),
                    scenario: want.scenario.clone(),
                    metric,
                    step: 0,
                },
            );
            assert_eq!(
                got.hist_samples.get(name).copied(),
                h.as_ref().map(|h| h.len()),
                "{name}"
            );
            if let (Some(h), Some(p)) = (
                h,
                match metric {
                    Metric::Ttft => got.ttft,
                    Metric::E2e => got.e2e,
                    Metric::Tpot => got.tpot,
                    _ => got.itl,
                },
            ) {
                assert_eq!(p.p90_ms, h.value_at_quantile(0.9) as f64 / 1000.0);
                assert_eq!(p.p99_ms, h.value_at_quantile(0.99) as f64 / 1000.0);
                checked_percentiles += 1;
            }
        }
    }
    assert!(checked_percentiles > 100, "{checked_percentiles}");
    // The ALL row really merges regions (not one region's numbers).
    let all = summary.cell("ALL", "alpha", "chat-short").unwrap();
    let use1 = summary.cell("us-east", "alpha", "chat-short").unwrap();
    assert!(all.attempts > use1.attempts && all.ttft != use1.ttft);
    // What answered, counted by ClickHouse as in memory (the cells above), and the flags:
    // every provider answered once with a model that is not the one asked for.
    let sql_cells: Vec<_> = sql.iter().map(|r| r.to_cell()).collect();
    let models = latmesh_results::model_stats::model_rows(&plan.providers, &sql_cells);
    assert_eq!(models, summary.models);
    assert_eq!(models.len(), PROVIDERS.len());
    for m in &models {
        assert_eq!(m.other_models, ["other-model"], "{m:?}");
        assert!(
            m.answered["deepseek-v3-0324"] > m.answered["other-model"],
            "{m:?}"
        );
    }
    assert!(all.tokens_over_usage > 0 && all.tokens_over_usage < all.samples);
    assert!(all.answered_models.values().sum::<u64>() < all.attempts);

    // One scenario only: the same rows, filtered.
    let long = store::matrix(&client, &db, campaign_id, Some("long-input"))
        .await
        .unwrap();
    let want_long: Vec<_> = sql
        .iter()
        .filter(|r| r.scenario == "long-input")
        .cloned()
        .collect();
    assert_eq!(long, want_long);
    // One region: its rows, and an ALL row that merges just that region.
    let eu = store::matrix_filtered(
        &client,
        &db,
        &QueryFilter {
            region: Some("eu-west".into()),
            ..QueryFilter::campaign(campaign_id)
        },
    )
    .await
    .unwrap();
    for r in &eu {
        let regional = sql
            .iter()
            .find(|s| s.region == "eu-west" && s.provider == r.provider && s.scenario == r.scenario)
            .unwrap();
        assert_eq!(r.ttft, regional.ttft);
        assert_eq!(r.attempts, regional.attempts);
    }
    assert_eq!(eu.len(), 2 * PROVIDERS.len() * SCENARIOS.len());

    // The outcome mix: per (region, provider) the counts add up to the attempts.
    let errs = store::errors(&client, &db, &QueryFilter::campaign(campaign_id))
        .await
        .unwrap();
    for region in REGIONS.iter().copied().chain([summary::ALL_REGIONS]) {
        for provider in PROVIDERS {
            let lines: Vec<_> = errs
                .iter()
                .filter(|e| e.region == region && e.provider == provider)
                .collect();
            let attempts: u64 = SCENARIOS
                .iter()
                .map(|s| summary.cell(region, provider, s).unwrap().attempts)
                .sum();
            assert_eq!(
                lines.iter().map(|e| e.count).sum::<u64>(),
                attempts,
                "{region} {provider}"
            );
            let pct: f64 = lines.iter().map(|e| e.pct).sum();
            assert!((pct - 100.0).abs() < 1e-9, "{pct}");
            let throttled = lines.iter().find(|e| e.outcome == "throttled").unwrap();
            assert_eq!(throttled.http_status, Some(429));
            assert_eq!(throttled.last_error_type.as_deref(), Some("rate_limit"));
        }
    }

    // What `campaign verify` reconciles: every record and histogram once, nothing missing.
    let counts = store::counts(&client, &db, campaign_id).await.unwrap();
    assert_eq!(counts.request_rows, total_records);
    assert_eq!(counts.histogram_rows, total_hists);
    assert_eq!(
        counts.duplicate_request_rows + counts.duplicate_histogram_rows,
        0
    );
    let stored = store::query::agents(&client, &db, campaign_id)
        .await
        .unwrap();
    assert_eq!(stored.len(), 4);
    for a in &counts.agents {
        let s = stored.iter().find(|s| s.agent_id == a.agent_id).unwrap();
        assert_eq!(
            (a.request_rows, a.batches),
            (s.records, s.batches),
            "{}",
            a.agent_id
        );
        assert!(a.missing_seqs.is_empty());
    }
    let regions: BTreeSet<_> = counts.agents.iter().map(|a| a.region.as_str()).collect();
    assert_eq!(regions.len(), 3);
    latmesh_testkit::drop_db(&client, &db).await;
}

/// Rough sink throughput: 200,000 records in batches of 2,000, written one batch per call and
/// 25 batches per call. Ignored by default: `cargo test --release -p latmesh-tests --test
/// integration -- --ignored --nocapture clickhouse::insert_throughput` prints records/s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing only"]
async fn insert_throughput() {
    let (client, db) = migrated("throughput").await;
    let records: Vec<ProbeRecord> = (0..2_000u32)
        .map(|i| ProbeRecord {
            round: i,
            send_agent_unix_us: 1_700_000_000_000_000 + i64::from(i) * 10_000,
            ..full_record()
        })
        .collect();
    for (agent, per_call) in [("one-per-call", 1usize), ("25-per-call", 25)] {
        let keys: Vec<BatchKey> = (1..=100)
            .map(|seq| BatchKey::new("bench", agent, "us-east", 0, seq))
            .collect();
        let started = std::time::Instant::now();
        for group in keys.chunks(per_call) {
            let inputs: Vec<store::BatchInput> = group
                .iter()
                .map(|key| store::BatchInput {
                    key: *key,
                    records: &records,
                    histograms: &[],
                })
                .collect();
            store::insert_batches(&client, &db, &inputs).await.unwrap();
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{agent}: {:.0} records/s (200000 records in {secs:.2} s)",
            200_000.0 / secs
        );
    }
    let counts = store::counts(&client, &db, "bench").await.unwrap();
    assert_eq!(counts.request_rows, 400_000);
    latmesh_testkit::drop_db(&client, &db).await;
}

/// One simulated agent of a sweep campaign: both scenarios are sweeps (c = 2, 4, 8, 16), every
/// step's requests get slower with concurrency (and on some providers fail more), histograms
/// are kept per step and flushed every step, as agents do.
fn simulate_sweep_agent(rng: &mut StdRng, region_ix: usize, plan: &Plan) -> Vec<SimBatch> {
    use latmesh_core::load::{LoadKind, LoadModel};
    let start = 1_700_000_000_000_000i64 + region_ix as i64 * 7_000;
    let mut batches = Vec::new();
    for (s, scenario) in plan.scenarios.iter().enumerate() {
        let LoadModel::Sweep(spec) = &scenario.load else {
            panic!("sweep scenarios only");
        };
        for (k, &c) in spec.concurrency.iter().enumerate() {
            let step_start = start + ((s * spec.concurrency.len() + k) as i64) * 10_000_000;
            let mut set = HistogramSet::new();
            let mut records = Vec::new();
            for (p, provider) in PROVIDERS.iter().enumerate() {
                // Provider p saturates from step p on: latency grows with concurrency there.
                let base = 30_000.0 * (1.0 + p as f64) * (1.0 + 0.4 * region_ix as f64);
                let load = if k >= p { f64::from(c) / 2.0 } else { 1.0 };
                // Enough requests per step for knees to be judged (30, and 72 ok ones for the
                // P95 interval) in the rows that merge the regions.
                for i in 0..(40 + c * 3) {
                    let roll: f64 = rng.random();
                    let fail = 0.02 + if p == 3 { 0.03 * k as f64 } else { 0.0 };
                    let outcome = match roll {
                        x if x < fail => Outcome::Http5xx,
                        x if x < fail + 0.02 => Outcome::Throttled,
                        x if x < fail + 0.03 => Outcome::Cancelled,
                        _ => Outcome::Ok,
                    };
                    let retried = outcome == Outcome::Throttled && rng.random_bool(0.5);
                    let mut rec = ProbeRecord {
                        load: LoadKind::Sweep,
                        step: k as u32,
                        concurrency: c,
                        slot: i,
                        provider: provider.to_string(),
                        scenario: scenario.name.clone(),
                        prompt_id: "p".into(),
                        attempt: 1,
                        final_attempt: !retried,
                        turn: 1,
                        stream: true,
                        send_agent_unix_us: step_start + i64::from(i) * 20_000,
                        outcome: Some(outcome),
                        ..Default::default()
                    };
                    if outcome == Outcome::Ok {
                        let ttft = (base * load * (rng.random::<f64>() * 1.5).exp()) as u64;
                        let tokens = rng.random_range(2..300u32);
                        let e2e = ttft + u64::from(tokens) * rng.random_range(5_000..20_000);
                        rec.ttft_us = Some(ttft);
                        rec.e2e_us = Some(e2e);
                        rec.output_tokens = tokens;
                        rec.http_status = Some(200);
                    }
                    set.record_probe(&rec, &[]);
                    records.push(rec.clone());
                    if retried {
                        // Its retry, later in the same step: it counts in the step it was sent.
                        let ok = ProbeRecord {
                            attempt: 2,
                            final_attempt: true,
                            outcome: Some(Outcome::Ok),
                            ttft_us: Some((base * load) as u64),
                            e2e_us: Some((base * load) as u64 + 50_000),
                            output_tokens: 7,
                            send_agent_unix_us: rec.send_agent_unix_us + 1_000_000,
                            ..rec
                        };
                        set.record_probe(&ok, &[]);
                        records.push(ok);
                    }
                }
            }
            let end = step_start + 10_000_000;
            batches.push(SimBatch {
                seq: batches.len() as u64 + 1,
                records,
                histograms: set
                    .drain()
                    .into_iter()
                    .map(|(k, h)| (k, h, step_start, end))
                    .collect(),
            });
        }
    }
    batches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_sweep_equals_the_in_memory_sweep() {
    use latmesh_core::load::{KneeRule, LoadModel, SweepSpec};
    use latmesh_results::load_stats::{self, RowFilter, SweepRow};

    let (client, db) = migrated("sweep").await;
    let mut plan = plan();
    // Two sweeps with different knee rules: TTFT P95 (a level the matrix never asks for) and
    // the default E2E P50.
    for (s, knee) in plan.scenarios.iter_mut().zip([
        KneeRule {
            metric: Metric::Ttft,
            percentile: 95.0,
            elasticity: 0.5,
            error_pct: 5.0,
            min_requests: 30,
        },
        KneeRule::default(),
    ]) {
        s.load = LoadModel::Sweep(SweepSpec {
            concurrency: vec![2, 4, 8, 16],
            step_ms: 10_000,
            step_requests: None,
            knee,
        });
    }
    let campaign_id = "sweep-campaign";
    let start_at = 1_700_000_000_000_000;
    insert_plan(&client, &db, campaign_id, &plan, start_at).await;
    let agents = [
        ("agent-use-1", 0usize, 31i64),
        ("agent-use-2", 0, -1_500),
        ("agent-euw-1", 1, 2_000),
        ("agent-aps-1", 2, -80_000),
    ];
    let mut rng = StdRng::seed_from_u64(0x5EE9);
    let mut agg = Aggregate::default();
    for (agent_id, region_ix, offset) in agents {
        let region = REGIONS[region_ix];
        for b in simulate_sweep_agent(&mut rng, region_ix, &plan) {
            for r in &b.records {
                agg.add_record(region, r);
            }
            for (k, h, _, _) in &b.histograms {
                agg.add_histogram(region, k.clone(), h);
            }
            let key = BatchKey::new(campaign_id, agent_id, region, offset, b.seq);
            store::insert_batch(&client, &db, &key, &b.records, &b.histograms)
                .await
                .unwrap();
        }
    }

    // Every row, every step, to the last digit: counts, error %, P50/P90/P99 of TTFT and E2E,
    // the knee metric's value, throughput, and the knee.
    let memory = load_stats::sweep_rows(&plan, &agg, RowFilter::default(), &[]);
    let sql = store::query::sweep(&client, &db, &QueryFilter::campaign(campaign_id))
        .await
        .unwrap();
    assert_eq!(
        memory.len(),
        (REGIONS.len() + 1) * PROVIDERS.len() * SCENARIOS.len()
    );
    for (m, s) in memory.iter().zip(&sql) {
        assert_eq!(s, m, "{} {} {}", m.region, m.provider, m.scenario);
    }
    assert_eq!(sql, memory);
    // The summary carries the same rows.
    let summary = summary::build(campaign_id, &plan, start_at, &agg, Vec::new());
    assert_eq!(summary.sweeps, memory);
    // Not trivially equal: data in every step, knees found by latency and by errors.
    assert!(memory.iter().all(|r| {
        r.steps
            .iter()
            .all(|s| s.requests > 0 && s.ttft.is_some() && s.knee_value_ms.is_some())
    }));
    let reasons: BTreeSet<&str> = memory
        .iter()
        .filter_map(|r| r.knee.as_ref().map(|k| k.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["errors", "latency"]),
        "{memory:#?}"
    );

    // Filters: one region (ALL then merges just it), one provider, one scenario.
    let filter = QueryFilter {
        region: Some("eu-west".into()),
        provider: Some("beta".into()),
        scenario: Some("long-input".into()),
        ..QueryFilter::campaign(campaign_id)
    };
    let only = RowFilter {
        region: Some("eu-west"),
        provider: Some("beta"),
        scenario: Some("long-input"),
    };
    let sql = store::query::sweep(&client, &db, &filter).await.unwrap();
    assert_eq!(sql, load_stats::sweep_rows(&plan, &agg, only, &[]));
    assert_eq!(sql.len(), 2);
    assert_eq!(
        sql[0].steps, sql[1].steps,
        "ALL of one region is that region"
    );

    // The CLI prints the same rows (`--json`) and a table.
    let args = [
        "query",
        "sweep",
        "--campaign",
        campaign_id,
        "--clickhouse-url",
        latmesh_testkit::clickhouse_url(),
        "--clickhouse-db",
        &db,
    ];
    let out = std::process::Command::new(latmesh_testkit::bin("latmesh"))
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Compared as text: the JSON printed is exactly the in-memory rows' (serde_json parses
    // floats back to within one ulp only).
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.trim_end() == serde_json::to_string_pretty(&memory).unwrap());
    let parsed: Vec<SweepRow> = serde_json::from_str(&printed).unwrap();
    assert_eq!(parsed.len(), memory.len());
    let out = std::process::Command::new(latmesh_testkit::bin("latmesh"))
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sweep chat-short: TTFT P95 ms by concurrency"),
        "{text}"
    );
    assert!(text.contains("sweep long-input: every step"), "{text}");
    latmesh_testkit::drop_db(&client, &db).await;
}

/// Appends batch `seq` of agent `agent-1` (us-east) in `campaign` to `spool`: `histograms` and
/// `records` copies of [`full_record`].
fn append_batch(
    spool: &latmesh_coordinator::spool::Spool,
    campaign: &str,
    seq: u64,
    histograms: Vec<latmesh_proto::pb::IntervalHistogram>,
    records: usize,
) {
    let mut rec = full_record();
    rec.round = seq as u32;
    let batch = latmesh_proto::pb::ResultBatch {
        campaign_id: campaign.into(),
        seq,
        histograms,
        records: vec![latmesh_proto::pb::ProbeRecord::from(&rec); records],
        clock_offset_us: 0,
    };
    spool.append("agent-1", "us-east", &batch).unwrap();
}

/// The coordinator's sink draining `spool` into `db`.
fn start_sink(
    spool: &std::sync::Arc<latmesh_coordinator::spool::Spool>,
    client: &clickhouse::Client,
    db: &str,
) -> tokio::task::JoinHandle<()> {
    use latmesh_coordinator::sink::{self, SinkTarget};
    let target = SinkTarget::with_client(
        client.clone(),
        latmesh_testkit::clickhouse_url(),
        db,
        store::Timeouts::default(),
    );
    tokio::spawn(sink::run(
        spool.clone(),
        latmesh_coordinator::state::State::with_store_events(),
        target,
    ))
}

/// The sink reads rounds ahead of its inserts: over several rounds (more batches than one
/// round holds) every batch is stored once and in order, the spool is committed to the end,
/// and a batch that cannot be decoded is skipped without holding up the ones behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_drains_several_rounds_once_each_and_skips_an_undecodable_batch() {
    use latmesh_coordinator::spool::{Spool, SpoolConfig};

    const BATCHES: u64 = 600; // the sink reads at most 256 per round
    const BAD_SEQ: u64 = 300;
    let (client, db) = migrated("sink_rounds").await;
    let dir = tempfile::tempdir().unwrap();
    let spool = std::sync::Arc::new(Spool::open(SpoolConfig::new(dir.path(), 1 << 30)).unwrap());
    let campaign = "sink-rounds";
    for seq in 1..=BATCHES {
        let start = 1_717_200_000_000_000 + seq as i64 * 1_000_000;
        let mut h = new_histogram();
        h.record(1_000 + seq).unwrap();
        let key = HistKey {
            provider: "alpha".into(),
            scenario: "chat-short".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        let mut hist =
            latmesh_core::wire::histogram_to_pb(&key, &h, start, start + 1_000_000).unwrap();
        if seq == BAD_SEQ {
            hist.metric = "no-such-metric".into();
        }
        append_batch(&spool, campaign, seq, vec![hist], 2);
    }
    let task = start_sink(&spool, &client, &db);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while spool.committed_id() < BATCHES {
        assert!(
            std::time::Instant::now() < deadline,
            "the sink committed {} of {BATCHES} batches in 60 s",
            spool.committed_id()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();
    let c = store::counts(&client, &db, campaign).await.unwrap();
    assert_eq!(c.request_rows, 2 * (BATCHES - 1));
    assert_eq!(c.histogram_rows, BATCHES - 1);
    assert_eq!(
        (c.duplicate_request_rows, c.duplicate_histogram_rows),
        (0, 0)
    );
    assert_eq!(c.agents.len(), 1);
    assert_eq!(c.agents[0].missing_seqs, vec![BAD_SEQ]);
    assert_eq!(spool.pending_entries(), 0);
    latmesh_testkit::drop_db(&client, &db).await;
}

/// A table missing a column the rows need is the schema's fault, not the batches': the sink
/// keeps them in the spool (nothing committed, nothing skipped) until the column is back, then
/// stores every one once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sink_keeps_batches_while_a_table_lacks_a_column() {
    use latmesh_coordinator::spool::{Spool, SpoolConfig};

    const BATCHES: u64 = 3;
    let (client, db) = migrated("sink_schema").await;
    let alter = |sql: String| {
        let client = client.clone();
        async move { client.query(&sql).execute().await.unwrap() }
    };
    alter(format!("ALTER TABLE {db}.requests DROP COLUMN failover")).await;
    let dir = tempfile::tempdir().unwrap();
    let spool = std::sync::Arc::new(Spool::open(SpoolConfig::new(dir.path(), 1 << 30)).unwrap());
    let campaign = "sink-schema";
    for seq in 1..=BATCHES {
        append_batch(&spool, campaign, seq, vec![], 1);
    }
    let task = start_sink(&spool, &client, &db);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        spool.committed_id(),
        0,
        "batches refused by the schema were committed"
    );
    assert_eq!(spool.pending_entries(), BATCHES);
    alter(format!(
        "ALTER TABLE {db}.requests ADD COLUMN failover UInt8 DEFAULT 0"
    ))
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while spool.committed_id() < BATCHES {
        assert!(
            std::time::Instant::now() < deadline,
            "the sink did not store the batches once the column was back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.abort();
    let c = store::counts(&client, &db, campaign).await.unwrap();
    assert_eq!(c.request_rows, BATCHES);
    assert_eq!(c.duplicate_request_rows, 0);
    assert!(c.agents[0].missing_seqs.is_empty());
    latmesh_testkit::drop_db(&client, &db).await;
}

/// A failover primary that throttles both its tries before the client moves on: each such
/// client request is one failed request of the primary, in ClickHouse as in memory (it read
/// "failed % (requests) 0.0" as its attempts were never final).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_matrix_counts_failover_hand_overs_as_the_provider_s_failed_requests() {
    let (client, db) = migrated("failover_matrix").await;
    let mut plan = plan();
    plan.scenarios[0].failover = Some(latmesh_core::plan::FailoverSpec {
        chain: vec![0, 1],
        attempts: 2,
        on: latmesh_core::plan::FailoverSpec::default_on(),
    });
    let campaign_id = "failover-campaign";
    let start_at = 1_700_000_000_000_000;
    insert_plan(&client, &db, campaign_id, &plan, start_at).await;
    let attempt = |round: u32, provider: usize, attempt: u32, outcome, final_attempt| ProbeRecord {
        failover: true,
        round,
        provider: PROVIDERS[provider].into(),
        scenario: SCENARIOS[0].into(),
        prompt_id: "zh-001".into(),
        attempt,
        final_attempt,
        turn: 1,
        stream: true,
        send_agent_unix_us: start_at + i64::from(round) * 1_000_000 + i64::from(attempt),
        outcome: Some(outcome),
        ..Default::default()
    };
    // Five client requests handed over to the backup, one the primary answered.
    let mut records = Vec::new();
    for round in 0..5 {
        records.push(attempt(round, 0, 1, Outcome::Throttled, false));
        records.push(attempt(round, 0, 2, Outcome::Throttled, false));
        records.push(attempt(round, 1, 3, Outcome::Ok, true));
    }
    records.push(attempt(5, 0, 1, Outcome::Ok, true));
    let mut agg = Aggregate::for_plan(&plan);
    for r in &records {
        agg.add_record(REGIONS[0], r);
    }
    let key = BatchKey::new(campaign_id, "agent-1", REGIONS[0], 0, 1);
    store::insert_batch(&client, &db, &key, &records, &[])
        .await
        .unwrap();
    let sql = store::matrix(&client, &db, campaign_id, None)
        .await
        .unwrap();
    let memory = summary::build(campaign_id, &plan, start_at, &agg, Vec::new());
    for (provider, requests, failed_pct) in [(PROVIDERS[0], 6, 500.0 / 6.0), (PROVIDERS[1], 5, 0.0)]
    {
        for region in [REGIONS[0], "ALL"] {
            let got = sql
                .iter()
                .find(|r| r.region == region && r.provider == provider)
                .unwrap()
                .to_cell();
            let want = memory.cell(region, provider, SCENARIOS[0]).unwrap();
            assert_eq!(
                (got.requests, got.request_error_pct),
                (want.requests, want.request_error_pct),
                "{region} {provider}"
            );
            assert_eq!(got.requests, requests, "{region} {provider}");
            assert!((got.request_error_pct - failed_pct).abs() < 1e-9, "{got:?}");
        }
    }
}
