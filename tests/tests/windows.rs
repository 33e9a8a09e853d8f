//! Time windows against a real ClickHouse: a campaign file with per-region zones (one IANA zone
//! on daylight-saving time, one fixed offset) and a `peak` window; batches go through the real
//! sink path (coordinator state → spool → sink → ClickHouse) with peak latencies twice the
//! off-peak ones and clock offsets that move rows across window edges unless corrected. Then
//! `query windows` must equal, to the microsecond, the percentiles HdrHistogram computes in Rust
//! from the same values, and `query trend` buckets (UTC hour, UTC day, local hour) must count
//! the right samples with exact percentiles. A second test covers the sink's fallbacks: a
//! campaign it did not see launched (the plan comes from the `campaigns` table) and one stored
//! nowhere (labels `""`).
//!
//! The server: `LATMESH_CLICKHOUSE_URL` when set (the test command starts one), else
//! `scripts/clickhouse.sh start`. Each test works in its own fresh database.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use latmesh_coordinator::sink::{self, SinkTarget};
use latmesh_coordinator::spool::{Spool, SpoolConfig};
use latmesh_coordinator::state::State;
use latmesh_core::campaign;
use latmesh_core::hist::{HistKey, new_histogram};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::wire;
use latmesh_proto::pb;
use latmesh_store::query::{Percentile, TrendBucket, TrendReport, WindowsReport, trend, windows};
use latmesh_store::{self as store, CampaignRow, QueryFilter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// 2024-03-12 00:00 UTC, s. New York is on EDT (UTC−4) since 2024-03-10.
const DAY_S: i64 = 1_710_201_600;
const HOUR_US: i64 = 3_600_000_000;

/// (region, zone, agent id, clock offset coordinator − agent in µs, peak hours in UTC on
/// `DAY_S`). Peak is 09:00-12:00 and 14:00-18:00 local: 13-16 and 18-22 UTC in New York on
/// EDT, 01-04 and 06-10 UTC at +08:00 — written out here, not derived with the code under test.
const REGIONS: [(&str, &str, &str, i64, &[i64]); 2] = [
    (
        "us-east",
        "America/New_York",
        "us-east-1",
        250_000,
        &[13, 14, 15, 18, 19, 20, 21],
    ),
    (
        "ap-southeast",
        "+08:00",
        "ap-southeast-1",
        -400_000,
        &[1, 2, 3, 6, 7, 8, 9],
    ),
];
/// Local time = UTC + this many hours on `DAY_S`.
fn local_shift_h(region: &str) -> i64 {
    if region == "us-east" { -4 } else { 8 }
}
/// (provider, base TTFT µs).
const PROVIDERS: [(&str, u64); 2] = [("alpha", 100_000), ("beta", 300_000)];
const SCENARIO: &str = "chat";
/// Attempts per provider per hour: the first is sent exactly on the hour (coordinator clock).
const PER_HOUR: i64 = 6;

fn campaign_toml(providers: &[&str]) -> String {
    let mut text = String::from(
        r#"
[campaign]
name = "windows"
seed = 3
regions = ["us-east", "ap-southeast"]

[campaign.timezones]
us-east = "America/New_York"
ap-southeast = "+08:00"

[windows]
peak = "09:00-12:00,14:00-18:00"

[rounds]
count = 24
interval_s = 3600
gap_ms = 100

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
"#,
    );
    for p in providers {
        text.push_str(&format!(
            "\n[[providers]]\nname = \"{p}\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n"
        ));
    }
    text
}

fn plan(providers: &[&str]) -> Plan {
    campaign::load_toml_str(&campaign_toml(providers), Path::new(".")).unwrap()
}

/// What the test expects of one (provider, region or ALL, group) cell.
#[derive(Default)]
struct Expected {
    attempts: u64,
    errors: u64,
    hist: Option<Histogram<u64>>,
}

impl Expected {
    fn record(&mut self, v: u64) {
        self.hist
            .get_or_insert_with(new_histogram)
            .record(v)
            .unwrap();
    }
    fn samples(&self) -> u64 {
        self.hist.as_ref().map_or(0, Histogram::len)
    }
    fn at(&self, p: Percentile) -> Option<u64> {
        self.hist
            .as_ref()
            .map(|h| h.value_at_quantile(p.quantile()))
    }
}

/// Batches of one campaign, and the expected cells keyed by (provider, region, group) for
/// groups "window:W", "hour:H" (UTC bucket start, s) and "local:H" (local hour).
struct Generated {
    batches: Vec<(String, String, pb::ResultBatch)>,
    expected: BTreeMap<(String, String, String), Expected>,
}

/// One batch per agent and UTC hour of `DAY_S`, with `PER_HOUR` attempts per provider: in peak
/// hours every value is twice an off-peak draw and the first attempt times out.
fn generate(campaign_id: &str, providers: &[(&str, u64)], seed: u64) -> Generated {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut batches = Vec::new();
    let mut expected: BTreeMap<(String, String, String), Expected> = BTreeMap::new();
    for (region, _, agent, offset_us, peak_hours) in REGIONS {
        for h in 0..24i64 {
            let peak = peak_hours.contains(&h);
            let window = if peak { "peak" } else { "off-peak" };
            let hour_start_us = (DAY_S + h * 3600) * 1_000_000;
            let local_h = (h + local_shift_h(region)).rem_euclid(24);
            let mut records = Vec::new();
            let mut histograms = Vec::new();
            for (provider, base) in providers {
                let mut h_ttft = new_histogram();
                for i in 0..PER_HOUR {
                    // Coordinator-clock send time; the agent's clock is `offset_us` behind.
                    let coord_us = hour_start_us + i * 10 * 60_000_000;
                    let fails = peak && i == 0;
                    let value = (base + rng.random_range(0..50_000)) * if peak { 2 } else { 1 };
                    records.push(ProbeRecord {
                        round: h as u32,
                        slot: i as u32,
                        provider: provider.to_string(),
                        scenario: SCENARIO.into(),
                        prompt_id: "p".into(),
                        attempt: 1,
                        stream: true,
                        send_agent_unix_us: coord_us - offset_us,
                        outcome: Some(if fails {
                            Outcome::TimeoutTtft
                        } else {
                            Outcome::Ok
                        }),
                        ttft_us: (!fails).then_some(value),
                        ..Default::default()
                    });
                    for group in [
                        format!("window:{window}"),
                        format!("hour:{}", DAY_S + h * 3600),
                        format!("local:{local_h}"),
                    ] {
                        for r in [region, "ALL"] {
                            let e = expected
                                .entry((provider.to_string(), r.to_string(), group.clone()))
                                .or_default();
                            e.attempts += 1;
                            e.errors += u64::from(fails);
                            if !fails {
                                e.record(value);
                            }
                        }
                    }
                    if !fails {
                        h_ttft.record(value).unwrap();
                    }
                }
                let key = HistKey {
                    provider: provider.to_string(),
                    scenario: SCENARIO.into(),
                    metric: Metric::Ttft,
                    step: 0,
                };
                // The interval starts on the hour on the coordinator's clock.
                histograms.push(
                    wire::histogram_to_pb(
                        &key,
                        &h_ttft,
                        hour_start_us - offset_us,
                        hour_start_us + HOUR_US - offset_us,
                    )
                    .unwrap(),
                );
            }
            batches.push((
                agent.to_string(),
                region.to_string(),
                pb::ResultBatch {
                    campaign_id: campaign_id.to_string(),
                    seq: h as u64 + 1,
                    histograms,
                    records: records.iter().map(pb::ProbeRecord::from).collect(),
                    clock_offset_us: offset_us,
                },
            ));
        }
    }
    Generated { batches, expected }
}

/// Spools `batches` and runs the real sink over them until the spool is drained.
async fn sink_through(
    state: State,
    dir: &Path,
    target: SinkTarget,
    batches: &[(String, String, pb::ResultBatch)],
) {
    let spool = Arc::new(Spool::open(SpoolConfig::new(dir.join("spool"), 256 << 20)).unwrap());
    for (agent, region, batch) in batches {
        spool.append(agent, region, batch).unwrap();
    }
    let task = tokio::spawn(sink::run(spool.clone(), state, target));
    let deadline = Instant::now() + Duration::from_secs(120);
    while spool.pending_entries() > 0 {
        assert!(
            Instant::now() < deadline,
            "the sink never drained the spool"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    task.abort();
}

/// A coordinator state with one connected agent per region and `plan` launched; returns the
/// state and the campaign id.
fn launched(plan: &Plan) -> (State, String, Vec<tokio::sync::mpsc::Receiver<impl Sized>>) {
    let state = State::with_store_events();
    let mut rxs = Vec::new();
    for (region, _, agent, _, _) in REGIONS {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        state.connect(
            &pb::AgentHello {
                agent_id: agent.into(),
                region: region.into(),
                version: "test".into(),
                protocol_version: latmesh_proto::PROTOCOL_VERSION,
                ..Default::default()
            },
            tx,
        );
        rxs.push(rx);
    }
    let launched = state.launch(&plan.to_json(), 0).unwrap();
    (state, launched.campaign_id, rxs)
}

async fn label_counts(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    campaign: &str,
) -> BTreeMap<String, u64> {
    client
        .query(&format!(
            "SELECT `window`, count() FROM {db}.{table} WHERE campaign_id = ? GROUP BY `window`"
        ))
        .bind(campaign)
        .fetch_all::<(String, u64)>()
        .await
        .unwrap()
        .into_iter()
        .collect()
}

fn check_windows(report: &WindowsReport, g: &Generated, p: Percentile) {
    assert_eq!(report.windows, ["peak", "off-peak"]);
    assert_eq!(
        report.compared,
        Some(("peak".to_string(), "off-peak".to_string()))
    );
    assert_eq!(report.percentile, p.number());
    // 2 providers × (2 regions + ALL).
    assert_eq!(report.rows.len(), 6, "{report:#?}");
    let mut last = None;
    for row in &report.rows {
        let key = (
            row.provider.clone(),
            row.region == "ALL",
            row.region.clone(),
        );
        assert!(last.as_ref().is_none_or(|l| l < &key), "rows are sorted");
        last = Some(key);
        let mut values = Vec::new();
        for w in &row.windows {
            let e = &g.expected[&(
                row.provider.clone(),
                row.region.clone(),
                format!("window:{}", w.window),
            )];
            let what = format!("{} {} {}", row.provider, row.region, w.window);
            assert_eq!(w.stat.attempts, e.attempts, "{what}");
            assert_eq!(w.stat.errors, e.errors, "{what}");
            assert_eq!(w.stat.samples, e.samples(), "{what}");
            assert_eq!(w.stat.value_us, e.at(p), "{what}: exact percentile");
            assert_eq!(
                w.stat.value_ms,
                e.at(p).map(|v| v as f64 / 1000.0),
                "{what}"
            );
            let pct = e.errors as f64 * 100.0 / e.attempts as f64;
            assert!((w.stat.error_pct - pct).abs() < 1e-9, "{what}");
            values.push(w.stat.value_us.unwrap());
        }
        let (peak, off) = (values[0] as f64, values[1] as f64);
        assert_eq!(row.change_ms, Some((peak - off) / 1000.0));
        let pct = row.change_pct.unwrap();
        assert!((pct - (peak - off) * 100.0 / off).abs() < 1e-9);
        // Peak values are twice off-peak draws: the change is close to +100 %.
        assert!(
            (70.0..130.0).contains(&pct),
            "{} {}: {pct}",
            row.provider,
            row.region
        );
    }
}

fn check_trend(report: &TrendReport, g: &Generated, provider: &str, kind: &str) {
    assert_eq!(report.provider, provider);
    // 24 buckets per region and ALL (each local hour is hit exactly once per region).
    assert_eq!(report.rows.len(), 3 * 24, "{kind}: {report:#?}");
    for r in &report.rows {
        let e = &g.expected[&(
            provider.to_string(),
            r.region.clone(),
            format!("{kind}:{}", r.bucket),
        )];
        let what = format!("{kind} {} {}", r.region, r.label);
        assert_eq!(r.stat.samples, e.samples(), "{what}");
        assert_eq!(r.stat.attempts, e.attempts, "{what}");
        assert_eq!(r.stat.errors, e.errors, "{what}");
        assert_eq!(r.stat.value_us, e.at(Percentile::P90), "{what}");
    }
    for region in ["us-east", "ap-southeast", "ALL"] {
        let buckets: Vec<i64> = report
            .rows
            .iter()
            .filter(|r| r.region == region)
            .map(|r| r.bucket)
            .collect();
        assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{region}: sorted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_labels_windows_and_queries_are_exact() {
    let (client, db) = latmesh_testkit::fresh_db("windows");
    let plan = plan(&PROVIDERS.map(|p| p.0));
    let (state, campaign_id, _agents) = launched(&plan);
    let g = generate(&campaign_id, &PROVIDERS, 11);
    let dir = tempfile::tempdir().unwrap();
    let target = SinkTarget::with_client(
        client.clone(),
        latmesh_testkit::clickhouse_url(),
        &db,
        latmesh_store::Timeouts::default(),
    );
    sink_through(state, dir.path(), target, &g.batches).await;

    // Every row carries its window: 7 peak hours of 24 per region, for each provider.
    let per_window = |peak: bool, per_hour: u64| {
        let hours = if peak { 7 } else { 17 };
        2 * PROVIDERS.len() as u64 * hours * per_hour
    };
    let requests = label_counts(&client, &db, "requests", &campaign_id).await;
    assert_eq!(
        requests,
        BTreeMap::from([
            ("peak".to_string(), per_window(true, PER_HOUR as u64)),
            ("off-peak".to_string(), per_window(false, PER_HOUR as u64)),
        ])
    );
    let hists = label_counts(&client, &db, "histograms", &campaign_id).await;
    assert_eq!(
        hists,
        BTreeMap::from([
            ("peak".to_string(), per_window(true, 1)),
            ("off-peak".to_string(), per_window(false, 1)),
        ])
    );

    // query windows: exact percentiles, attempts, error %, change.
    let filter = QueryFilter::campaign(&campaign_id);
    for p in [Percentile::P50, Percentile::P95, Percentile::P99] {
        let report = windows(&client, &db, &filter, Metric::Ttft, p)
            .await
            .unwrap();
        check_windows(&report, &g, p);
    }
    // One region only: no ALL rows, the same numbers.
    let mut one = filter.clone();
    one.region = Some("us-east".into());
    let report = windows(&client, &db, &one, Metric::Ttft, Percentile::P50)
        .await
        .unwrap();
    assert_eq!(report.rows.len(), 2);
    assert!(report.rows.iter().all(|r| r.region == "us-east"));

    // query trend: UTC hours, UTC day, local hours (ClickHouse's zone rules, DST included,
    // must agree with the test's own arithmetic).
    let mut tf = QueryFilter {
        provider: Some("alpha".into()),
        ..QueryFilter::default()
    };
    let hourly = trend(
        &client,
        &db,
        &tf,
        Metric::Ttft,
        Percentile::P90,
        TrendBucket::Hour,
    )
    .await
    .unwrap();
    check_trend(&hourly, &g, "alpha", "hour");
    assert_eq!(hourly.rows[0].label, "2024-03-12 00:00");
    let daily = trend(
        &client,
        &db,
        &tf,
        Metric::Ttft,
        Percentile::P50,
        TrendBucket::Day,
    )
    .await
    .unwrap();
    assert_eq!(daily.rows.len(), 3);
    for r in &daily.rows {
        assert_eq!(r.bucket, DAY_S);
        assert_eq!(r.label, "2024-03-12");
        let n = 24 * PER_HOUR as u64 - 7;
        let regions = if r.region == "ALL" { 2 } else { 1 };
        assert_eq!(r.stat.samples, n * regions, "{}", r.region);
    }
    assert!(
        trend(
            &client,
            &db,
            &tf,
            Metric::Ttft,
            Percentile::P50,
            TrendBucket::LocalHour
        )
        .await
        .is_err(),
        "local hours need a campaign"
    );
    tf.campaign_id = Some(campaign_id.clone());
    let local = trend(
        &client,
        &db,
        &tf,
        Metric::Ttft,
        Percentile::P90,
        TrendBucket::LocalHour,
    )
    .await
    .unwrap();
    check_trend(&local, &g, "alpha", "local");
    assert_eq!(local.rows[9].label, "09h");

    // The CLI prints the same numbers (--json) and a table.
    let cli = |args: &[&str]| {
        let out = Command::new(latmesh_testkit::bin("latmesh"))
            .args(args)
            .args([
                "--clickhouse-url",
                latmesh_testkit::clickhouse_url(),
                "--clickhouse-db",
                &db,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "latmesh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json = cli(&[
        "query",
        "windows",
        "--campaign",
        &campaign_id,
        "--percentile",
        "90",
        "--json",
    ]);
    let report: WindowsReport = serde_json::from_str(&json).unwrap();
    check_windows(&report, &g, Percentile::P90);
    // P95 from the CLI: exact, as HdrHistogram computes it.
    let json = cli(&[
        "query",
        "windows",
        "--campaign",
        &campaign_id,
        "--percentile",
        "95",
        "--json",
    ]);
    let report: WindowsReport = serde_json::from_str(&json).unwrap();
    check_windows(&report, &g, Percentile::P95);
    let table = cli(&[
        "query",
        "windows",
        "--campaign",
        &campaign_id,
        "--percentile",
        "95",
    ]);
    assert!(table.contains("TTFT P95 (ms) by time window"), "{table}");
    // A window of fewer than 72 samples has a P95 the samples do not support: marked, with
    // the rule under the table.
    let unsupported = report
        .rows
        .iter()
        .flat_map(|r| &r.windows)
        .filter(|w| w.stat.value_ms.is_some() && w.stat.samples < 72)
        .count();
    assert!(unsupported > 0, "{report:#?}");
    assert_eq!(table.matches('~').count(), unsupported + 1, "{table}");
    assert!(
        table.contains(&latmesh_results::percentiles::legend()),
        "{table}"
    );
    let table = cli(&["query", "windows", "--campaign", &campaign_id]);
    println!("{table}");
    assert!(
        table.contains("TTFT P50 (ms) by time window; change = peak − off-peak"),
        "{table}"
    );
    assert!(table.contains("| alpha"), "{table}");
    let json = cli(&[
        "query",
        "trend",
        "--provider",
        "alpha",
        "--campaign",
        &campaign_id,
        "--bucket",
        "local-hour",
        "--percentile",
        "90",
        "--json",
    ]);
    let report: TrendReport = serde_json::from_str(&json).unwrap();
    check_trend(&report, &g, "alpha", "local");
    let table = cli(&[
        "query",
        "trend",
        "--provider",
        "beta",
        "--metric",
        "ttft",
        "--bucket",
        "day",
    ]);
    println!("{table}");
    assert!(table.contains("beta: TTFT P50 (ms) per UTC day"), "{table}");
    assert!(table.contains("2024-03-12"), "{table}");
    let out = Command::new(latmesh_testkit::bin("latmesh"))
        .args([
            "query",
            "windows",
            "--campaign",
            "nope",
            "--clickhouse-url",
            latmesh_testkit::clickhouse_url(),
        ])
        .args(["--clickhouse-db", &db, "--metric", "itl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ttft, ttfc, e2e or tpot"));

    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_missed_the_launch_takes_windows_from_clickhouse() {
    let (client, db) = latmesh_testkit::fresh_db("windows_restart");
    store::migrate(&client, &db, None).await.unwrap();
    let plan = plan(&["alpha"]);
    // Stored by an earlier coordinator process; this sink's state never saw it launched.
    let stored_id = "windows-stored";
    store::insert_campaign(
        &client,
        &db,
        &CampaignRow::new(
            stored_id,
            &plan,
            DAY_S * 1_000_000,
            DAY_S * 1_000_000,
            "test",
        ),
    )
    .await
    .unwrap();
    let providers = [("alpha", 100_000)];
    let stored = generate(stored_id, &providers, 5);
    let unknown = generate("windows-unknown", &providers, 6);
    let dir = tempfile::tempdir().unwrap();
    let target = SinkTarget::with_client(
        client.clone(),
        latmesh_testkit::clickhouse_url(),
        &db,
        latmesh_store::Timeouts::default(),
    );
    let batches: Vec<_> = stored
        .batches
        .iter()
        .chain(&unknown.batches)
        .cloned()
        .collect();
    sink_through(State::with_store_events(), dir.path(), target, &batches).await;

    let requests = label_counts(&client, &db, "requests", stored_id).await;
    assert_eq!(requests["peak"], 2 * 7 * PER_HOUR as u64);
    assert_eq!(requests["off-peak"], 2 * 17 * PER_HOUR as u64);
    let report = windows(
        &client,
        &db,
        &QueryFilter::campaign(stored_id),
        Metric::Ttft,
        Percentile::P50,
    )
    .await
    .unwrap();
    assert_eq!(report.windows, ["peak", "off-peak"]);
    for row in &report.rows {
        for w in &row.windows {
            let e = &stored.expected[&(
                row.provider.clone(),
                row.region.clone(),
                format!("window:{}", w.window),
            )];
            assert_eq!(w.stat.value_us, e.at(Percentile::P50));
        }
    }
    // A campaign stored nowhere: rows are kept, without a window label.
    let requests = label_counts(&client, &db, "requests", "windows-unknown").await;
    assert_eq!(
        requests,
        BTreeMap::from([(String::new(), 2 * 24 * PER_HOUR as u64)])
    );
    let hists = label_counts(&client, &db, "histograms", "windows-unknown").await;
    assert_eq!(hists, BTreeMap::from([(String::new(), 2 * 24)]));
    let report = windows(
        &client,
        &db,
        &QueryFilter::campaign("windows-unknown"),
        Metric::Ttft,
        Percentile::P50,
    )
    .await
    .unwrap();
    assert_eq!(report.windows, [""]);
    assert_eq!(report.compared, None);
    assert!(report.rows.iter().all(|r| r.change_ms.is_none()));
    latmesh_testkit::drop_db(&client, &db).await;
}

/// `query windows` without `--scenario` compares the patrol (`rounds` scenarios) only: a
/// sweep that ran during peak hours, 10 s per request, must not make `peak` look slower, and
/// the report says what it merged and what it left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_leave_load_tests_out_unless_asked() {
    let (client, db) = latmesh_testkit::fresh_db("windows_default");
    let text = campaign_toml(&PROVIDERS.map(|p| p.0)).replacen(
        "\n[[providers]]",
        "\n[[scenarios]]\nname = \"sweep\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 16\n\
         [scenarios.sweep]\nconcurrency = [1, 2]\nstep_s = 1\n\n[[providers]]",
        1,
    );
    let plan = campaign::load_toml_str(&text, Path::new(".")).unwrap();
    assert_eq!(plan.scenarios.len(), 2);
    let (state, campaign_id, _agents) = launched(&plan);
    let mut g = generate(&campaign_id, &PROVIDERS, 11);
    // One sweep request per provider in each peak hour of each region, 10 s to first token.
    let mut sweep_batches = Vec::new();
    for (region, _, agent, offset_us, peak_hours) in REGIONS {
        for (i, &h) in peak_hours.iter().enumerate() {
            let hour_start_us = (DAY_S + h * 3600) * 1_000_000;
            let mut records = Vec::new();
            let mut histograms = Vec::new();
            for (provider, _) in PROVIDERS {
                records.push(ProbeRecord {
                    load: latmesh_core::load::LoadKind::Sweep,
                    concurrency: 1,
                    provider: provider.to_string(),
                    scenario: "sweep".into(),
                    prompt_id: "p".into(),
                    attempt: 1,
                    final_attempt: true,
                    turn: 1,
                    stream: true,
                    send_agent_unix_us: hour_start_us + 60_000_000 - offset_us,
                    outcome: Some(Outcome::Ok),
                    ttft_us: Some(10_000_000),
                    ..Default::default()
                });
                let mut h = new_histogram();
                h.record(10_000_000).unwrap();
                let key = HistKey {
                    provider: provider.to_string(),
                    scenario: "sweep".into(),
                    metric: Metric::Ttft,
                    step: 0,
                };
                histograms.push(
                    wire::histogram_to_pb(
                        &key,
                        &h,
                        hour_start_us - offset_us,
                        hour_start_us + HOUR_US - offset_us,
                    )
                    .unwrap(),
                );
            }
            sweep_batches.push((
                agent.to_string(),
                region.to_string(),
                pb::ResultBatch {
                    campaign_id: campaign_id.clone(),
                    seq: 1_000 + i as u64,
                    histograms,
                    records: records.iter().map(pb::ProbeRecord::from).collect(),
                    clock_offset_us: offset_us,
                },
            ));
        }
    }
    g.batches.extend(sweep_batches);
    let dir = tempfile::tempdir().unwrap();
    let target = SinkTarget::with_client(
        client.clone(),
        latmesh_testkit::clickhouse_url(),
        &db,
        latmesh_store::Timeouts::default(),
    );
    sink_through(state, dir.path(), target, &g.batches).await;

    // Default: the rounds scenario only, exactly as if the sweep had not run.
    let filter = QueryFilter::campaign(&campaign_id);
    let report = windows(&client, &db, &filter, Metric::Ttft, Percentile::P50)
        .await
        .unwrap();
    check_windows(&report, &g, Percentile::P50);
    assert_eq!(
        (report.scenarios.clone(), report.left_out_scenarios.clone()),
        (vec!["chat".to_string()], vec!["sweep".to_string()])
    );
    let table = latmesh_cli::ui::windows::render(&report);
    assert!(
        table.contains("scenarios: chat (left out: sweep, load tests run at one time only; pick one with --scenario)"),
        "{table}"
    );
    // Asked for: the sweep alone, all of it in peak.
    let sweep = QueryFilter {
        scenario: Some("sweep".into()),
        ..filter.clone()
    };
    let report = windows(&client, &db, &sweep, Metric::Ttft, Percentile::P50)
        .await
        .unwrap();
    assert_eq!(report.scenarios, ["sweep"]);
    let all = report
        .rows
        .iter()
        .find(|r| r.region == "ALL" && r.provider == PROVIDERS[0].0)
        .unwrap();
    assert_eq!(all.windows[0].window, "peak");
    let mut one = new_histogram();
    one.record(10_000_000).unwrap();
    assert_eq!(
        all.windows[0].stat.value_us,
        Some(one.value_at_quantile(0.5))
    );
    assert_eq!(all.windows[1].stat.samples, 0);
}
