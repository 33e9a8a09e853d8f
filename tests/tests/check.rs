//! `latmesh check` against a real ClickHouse: rules on stored campaigns (a baseline campaign,
//! a rolling window of days, P95 from the stored histograms), the previous-day rule over a
//! series of runs, and the analysis' ranks per time window from the same rows.
//!
//! The server: `LATMESH_CLICKHOUSE_URL`, else `scripts/clickhouse.sh start` (see
//! tests/tests/clickhouse.rs). Each test uses a fresh database.

use std::collections::BTreeSet;
use std::path::Path;

use latmesh_cli::cmd::check::{self, CheckArgs};
use latmesh_core::hist::{HistogramSet, new_histogram};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_store::query::{Percentile, add_window_ranks, window_ranks};
use latmesh_store::{self as store, BatchKey, CampaignRow};

const HOUR_US: i64 = 3_600_000_000;
const T: i64 = 1_700_000_000_000_000;

pub(crate) fn plan(name: &str) -> Plan {
    let text = format!(
        r#"
[campaign]
name = "{name}"
regions = ["us-east", "eu-west"]
[rounds]
count = 3
interval_s = 2.0
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 32
[[providers]]
name = "alpha"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
[[providers]]
name = "beta"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#
    );
    latmesh_core::campaign::load_toml_str(&text, Path::new(".")).unwrap()
}

/// One cell of a stored run: TTFT values (ms) of its `ok` attempts and its failures.
pub(crate) struct Cell<'a> {
    pub(crate) region: &'a str,
    pub(crate) provider: &'a str,
    pub(crate) ttft_ms: Vec<f64>,
    pub(crate) failures: u64,
}

/// Stores campaign `id` of `plan` starting at `start`: its row, and per region one agent
/// batch with every cell's records and interval histograms.
pub(crate) async fn store_run(
    client: &clickhouse::Client,
    db: &str,
    plan: &Plan,
    id: &str,
    start: i64,
    cells: &[Cell<'_>],
) {
    store_campaign(client, db, plan, id, start).await;
    store_batches(client, db, id, start, cells, "", 1).await;
}

/// The row of campaign `id` of `plan` starting at `start`.
async fn store_campaign(client: &clickhouse::Client, db: &str, plan: &Plan, id: &str, start: i64) {
    store::insert_campaign(
        client,
        db,
        &CampaignRow::new(id, plan, start - 1_000_000, start, "test"),
    )
    .await
    .unwrap();
}

/// Per region one agent batch (number `seq`) of campaign `id` at `start`, its rows labelled
/// with time window `window`.
async fn store_batches(
    client: &clickhouse::Client,
    db: &str,
    id: &str,
    start: i64,
    cells: &[Cell<'_>],
    window: &str,
    seq: u64,
) {
    let window = window.to_string();
    let label = move |_: i64| window.clone();
    for region in ["us-east", "eu-west"] {
        let mut set = HistogramSet::new();
        let mut records = Vec::new();
        for c in cells.iter().filter(|c| c.region == region) {
            let mk = |i: usize, outcome: Outcome| ProbeRecord {
                round: i as u32,
                slot: 0,
                provider: c.provider.into(),
                scenario: "chat".into(),
                prompt_id: "p".into(),
                attempt: 1,
                stream: true,
                final_attempt: true,
                send_agent_unix_us: start + i as i64 * 1000,
                outcome: Some(outcome),
                ..Default::default()
            };
            for (i, ms) in c.ttft_ms.iter().enumerate() {
                let mut r = mk(i, Outcome::Ok);
                let us = (ms * 1000.0) as u64;
                r.http_status = Some(200);
                r.ttft_us = Some(us);
                r.ttfc_us = Some(us);
                r.e2e_us = Some(us * 2);
                r.output_tokens = 1;
                set.record_probe(&r, &[]);
                records.push(r);
            }
            for i in 0..c.failures {
                let mut r = mk(c.ttft_ms.len() + i as usize, Outcome::Http5xx);
                r.http_status = Some(503);
                records.push(r);
            }
        }
        let hists: Vec<_> = set
            .drain()
            .into_iter()
            .map(|(k, h)| (k, h, start, start + 60_000_000))
            .collect();
        let agent = format!("{region}-agent");
        let key = BatchKey::new(id, &agent, region, 0, seq).with_window_label(&label);
        store::insert_batch(client, db, &key, &records, &hists)
            .await
            .unwrap();
    }
}

/// `from` to `to` ms in steps of 0.25 ms: 397 values for a 99 ms span, enough samples for
/// P99 to be supported (368; `analysis::stats::min_samples`).
fn range(from: u32, to: u32) -> Vec<f64> {
    (from * 4..=to * 4).map(|v| f64::from(v) / 4.0).collect()
}

/// HdrHistogram's `value_at_quantile` of `values_ms`, in ms (what the matrix reports).
fn hdr(values_ms: &[f64], q: f64) -> f64 {
    let mut h = new_histogram();
    for v in values_ms {
        h.record((v * 1000.0) as u64).unwrap();
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

fn args(db: &str, rules: &Path) -> CheckArgs {
    CheckArgs {
        rules: rules.to_path_buf(),
        clickhouse_url: Some(latmesh_testkit::clickhouse_url().to_string()),
        clickhouse_db: db.to_string(),
        ..Default::default()
    }
}

fn fired(r: &check::CheckReport) -> BTreeSet<(String, String, String)> {
    r.fired
        .iter()
        .map(|f| (f.rule.clone(), f.region.clone(), f.provider.clone()))
        .collect()
}

fn set(items: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_on_stored_campaigns_and_a_rolling_baseline() {
    let (client, db) = latmesh_testkit::fresh_db("check");
    store::migrate(&client, &db, None).await.unwrap();
    let plan = plan("nightly");
    let same = |region| {
        [
            Cell {
                region,
                provider: "alpha",
                ttft_ms: range(100, 199),
                failures: 0,
            },
            Cell {
                region,
                provider: "beta",
                ttft_ms: range(100, 199),
                failures: 0,
            },
        ]
    };
    let base: Vec<Cell> = same("us-east").into_iter().chain(same("eu-west")).collect();
    store_run(&client, &db, &plan, "nightly-base", T - 2 * HOUR_US, &base).await;
    // Current: alpha in us-east 50 ms slower (P99 199 → 249 ms: +25 %, the intervals far
    // apart), beta in eu-west failing 50 of 447 attempts (11.2 %, Wilson interval from 8.6 %).
    let cur = [
        Cell {
            region: "us-east",
            provider: "alpha",
            ttft_ms: range(150, 249),
            failures: 0,
        },
        Cell {
            region: "us-east",
            provider: "beta",
            ttft_ms: range(100, 199),
            failures: 0,
        },
        Cell {
            region: "eu-west",
            provider: "alpha",
            ttft_ms: range(100, 199),
            failures: 0,
        },
        Cell {
            region: "eu-west",
            provider: "beta",
            ttft_ms: range(100, 199),
            failures: 50,
        },
    ];
    store_run(&client, &db, &plan, "nightly-cur", T, &cur).await;

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        r#"
[[rules]]
name = "p99-up"
kind = "p99_increase_pct"
threshold = 20

[[rules]]
name = "p99-up-a-lot"
kind = "p99_increase_pct"
threshold = 30

[[rules]]
name = "p95-up"
kind = "p95_increase_pct"
threshold = 20

[[rules]]
name = "p99-limit"
kind = "absolute"
percentile = 99
limit_ms = 240

[[rules]]
name = "errors"
kind = "error_pct_above"
limit_pct = 5
"#,
    )
    .unwrap();
    let want = set(&[
        ("p99-up", "us-east", "alpha"),
        ("p95-up", "us-east", "alpha"),
        ("p99-limit", "us-east", "alpha"),
        ("errors", "eu-west", "beta"),
    ]);

    // Baseline = a stored campaign.
    let mut a = args(&db, &rules);
    a.current = Some("nightly-cur".into());
    a.baseline = Some("nightly-base".into());
    let r = check::run(&a).await.unwrap();
    assert_eq!(fired(&r), want, "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.exit_code(), 1);
    // 4 cells × 4 latency rules + 4 error checks.
    assert_eq!(r.checked, 20);
    let p95 = r.fired.iter().find(|f| f.rule == "p95-up").unwrap();
    assert_eq!(p95.current, hdr(&range(150, 249), 0.95));
    assert_eq!(p95.baseline, Some(hdr(&range(100, 199), 0.95)));
    let p99 = r.fired.iter().find(|f| f.rule == "p99-up").unwrap();
    assert_eq!(p99.current, hdr(&range(150, 249), 0.99));

    // Baseline = the day before the current campaign's start (only nightly-base is in it).
    let mut a = args(&db, &rules);
    a.current = Some("nightly-cur".into());
    a.baseline_days = Some(1.0);
    let r = check::run(&a).await.unwrap();
    assert_eq!(fired(&r), want, "{}", latmesh_cli::ui::check::render(&r));
    assert!(
        r.baseline
            .as_deref()
            .unwrap()
            .starts_with("1 day(s) before")
    );
    // A window that ends before anything was stored: nothing to compare with.
    let mut a = args(&db, &rules);
    a.current = Some("nightly-base".into());
    a.baseline_days = Some(1.0);
    let r = check::run(&a).await.unwrap();
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));

    // Errors (exit 2 in the CLI): an unknown campaign, no ClickHouse URL.
    let mut a = args(&db, &rules);
    a.current = Some("nope".into());
    a.baseline = Some("nightly-base".into());
    let e = check::run(&a).await.unwrap_err();
    assert!(format!("{e:#}").contains("\"nope\" is not stored"), "{e:#}");
    a.clickhouse_url = None;
    let e = check::run(&a).await.unwrap_err();
    assert!(format!("{e:#}").contains("--clickhouse-url"), "{e:#}");

    // The analysis' ranks per (region, window) from the same rows: no windows declared, so one
    // column per region; alpha is slower than beta in us-east only.
    let t = window_ranks(
        &client,
        &db,
        "nightly-cur",
        Some("chat"),
        Metric::Ttft,
        Percentile::P50,
    )
    .await
    .unwrap();
    let cols: BTreeSet<&str> = t.columns.iter().map(String::as_str).collect();
    assert_eq!(cols, BTreeSet::from(["eu-west/(none)", "us-east/(none)"]));
    let alpha = t.rows.iter().find(|r| r.provider == "alpha").unwrap();
    assert_eq!((alpha.min_rank, alpha.max_rank), (Some(1.5), Some(2.0)));
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_day_rule_over_a_series_of_runs() {
    let (client, db) = latmesh_testkit::fresh_db("check_prev");
    store::migrate(&client, &db, None).await.unwrap();
    let patrol = plan("patrol");
    let flat = |ms: f64| vec![ms; 100];
    // Runs of "patrol": r1 outside the previous day, r2 and r3 in it (P95 100 and 120 ms),
    // then the last two runs at 250 and 260 ms.
    for (id, start, ms) in [
        ("patrol-r1", T - 30 * HOUR_US, 5000.0),
        ("patrol-r2", T - 20 * HOUR_US, 100.0),
        ("patrol-r3", T - 10 * HOUR_US, 120.0),
        ("patrol-r4", T - HOUR_US, 250.0),
        ("patrol-r5", T, 260.0),
    ] {
        let cells = [Cell {
            region: "us-east",
            provider: "alpha",
            ttft_ms: flat(ms),
            failures: 0,
        }];
        store_run(&client, &db, &patrol, id, start, &cells).await;
    }
    // Another campaign name at the same times does not count.
    let other = plan("other");
    store_run(
        &client,
        &db,
        &other,
        "other-1",
        T - 5 * HOUR_US,
        &[Cell {
            region: "us-east",
            provider: "alpha",
            ttft_ms: flat(1.0),
            failures: 0,
        }],
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    let write = |factor: f64, runs: u32| {
        std::fs::write(
            &rules,
            format!(
                "[[rules]]\nname = \"p95-day\"\nkind = \"p95_above_prev_day_mean\"\nmetric = \"ttft\"\nfactor = {factor}\nconsecutive_runs = {runs}\n"
            ),
        )
        .unwrap();
    };
    let run = |current: &str| {
        let mut a = args(&db, &rules);
        a.current = Some(current.into());
        a
    };
    write(2.0, 2);
    let r = check::run(&run("patrol-r5")).await.unwrap();
    assert_eq!(
        fired(&r),
        set(&[("p95-day", "us-east", "alpha")]),
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    let f = &r.fired[0];
    let mean = (hdr(&flat(100.0), 0.95) + hdr(&flat(120.0), 0.95)) / 2.0;
    assert!((f.baseline.unwrap() - mean).abs() < 1e-9, "{f:?}");
    assert_eq!(f.current, hdr(&flat(260.0), 0.95));
    // A higher factor: 250 and 260 are not above 3 × 110.
    write(3.0, 2);
    let r = check::run(&run("patrol-r5")).await.unwrap();
    assert!(
        r.fired.is_empty() && r.checked == 1,
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    // Three runs: r3 (120 ms) is among them and below 2 × mean(r1's 5000 ms…): r1 is in the
    // day before r3, so the mean is high and nothing fires.
    write(2.0, 3);
    let r = check::run(&run("patrol-r5")).await.unwrap();
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));
    // Checked as of r4: only what was stored before it counts (r5 is later).
    write(2.0, 1);
    let r = check::run(&run("patrol-r4")).await.unwrap();
    assert_eq!(fired(&r).len(), 1, "{}", latmesh_cli::ui::check::render(&r));
    assert!((r.fired[0].baseline.unwrap() - mean).abs() < 1e-9);
    latmesh_testkit::drop_db(&client, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_per_region_and_time_window() {
    let (client, db) = latmesh_testkit::fresh_db("check_windows");
    store::migrate(&client, &db, None).await.unwrap();
    let text = plan("windowed").to_json();
    let mut plan: Plan = serde_json::from_str(&text).unwrap();
    plan.timezones = [("us-east", "UTC"), ("eu-west", "UTC")]
        .map(|(r, z)| (r.to_string(), z.to_string()))
        .into();
    plan.windows = vec![latmesh_core::windows::Window {
        name: "peak".into(),
        ranges: latmesh_core::windows::parse_ranges("09:00-17:00").unwrap(),
    }];
    store::insert_campaign(
        &client,
        &db,
        &CampaignRow::new("win-1", &plan, T - 1_000_000, T, "test"),
    )
    .await
    .unwrap();
    // alpha is faster than beta at peak in both regions, slower off-peak in both.
    let cells = |a: u32, b: u32| -> Vec<Cell<'static>> {
        ["us-east", "eu-west"]
            .into_iter()
            .flat_map(|region| {
                [
                    Cell {
                        region,
                        provider: "alpha",
                        ttft_ms: range(a, a + 50),
                        failures: 0,
                    },
                    Cell {
                        region,
                        provider: "beta",
                        ttft_ms: range(b, b + 50),
                        failures: 0,
                    },
                ]
            })
            .collect()
    };
    store_batches(&client, &db, "win-1", T, &cells(100, 200), "peak", 1).await;
    store_batches(
        &client,
        &db,
        "win-1",
        T + HOUR_US,
        &cells(300, 200),
        "off-peak",
        2,
    )
    .await;

    let summary: latmesh_results::summary::Summary = serde_json::from_value(serde_json::json!({
        "campaign_id": "win-1", "name": "windowed", "plan_hash": plan.hash(),
        "metrics_version": plan.metrics_version, "start_at_unix_us": T,
        "regions": plan.regions, "providers": ["alpha", "beta"], "scenarios": ["chat"],
        "cells": [], "agents": [], "complete": true,
    }))
    .unwrap();
    let data = latmesh_results::report_data::ReportData {
        summary,
        plan,
        hists: Default::default(),
        compat: Default::default(),
    };
    let mut analysis = latmesh_results::analysis::analyze(&data);
    assert_eq!(
        add_window_ranks(&mut analysis, &data, &client, &db)
            .await
            .unwrap(),
        1
    );
    let t = &analysis.window_ranks[0];
    assert_eq!(t.by, "region/window");
    let cols: BTreeSet<&str> = t.columns.iter().map(String::as_str).collect();
    assert_eq!(
        cols,
        BTreeSet::from([
            "eu-west/off-peak",
            "eu-west/peak",
            "us-east/off-peak",
            "us-east/peak"
        ])
    );
    let alpha = t.rows.iter().find(|r| r.provider == "alpha").unwrap();
    assert_eq!(
        (alpha.min_rank, alpha.max_rank, alpha.mean_rank),
        (Some(1.0), Some(2.0), Some(1.5))
    );
    assert_eq!(alpha.rank_range, Some(1.0));
    // Two columns say alpha < beta, two say beta < alpha: no concordance at all.
    assert_eq!(t.kendall_w, Some(0.0));
    assert!(latmesh_cli::ui::analysis::render(&analysis).contains("region/window"));
    latmesh_testkit::drop_db(&client, &db).await;
}

// ---- the seed's rules on real campaigns against the simulator ----------------------------

/// `svc`: TTFT 300 ms × lognormal jitter (σ 0.05: P99 ≈ 1.12 × P50, so a P99 of ~500 samples
/// is known within a few %: +40 % stays clear of the +30 % threshold), 4 tokens 2 ms apart;
/// `scale` stretches its TTFT and ITL (1.4: a provider 40 % slower). 300 ms keeps the
/// milliseconds a busy test machine adds to a few requests small against the tail.
fn svc(scale: f64) -> latmesh_sim::profile::ProviderProfile {
    latmesh_sim::profile::ProviderProfile {
        ttft_base_us: (300_000.0 * scale) as u64,
        ttft_jitter_sigma: 0.05,
        itl_median_us: (2_000.0 * scale) as u64,
        output_tokens_min: 4,
        output_tokens_max: 4,
        ..latmesh_sim::profile::ProviderProfile::fixed("svc", 1, 1)
    }
}

/// 150 arrivals/s for 3.5 s: ~525 TTFT samples per run, enough to support P99 (368).
const SIM_CAMPAIGN: &str = r#"
[campaign]
name = "check-sim"
regions = ["us-east"]

[[scenarios]]
name = "load"
load = "rate"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 4
[scenarios.rate]
rps = 150
duration_s = 3.5

[[providers]]
name = "svc"
base_url = "http://{sim}/svc/v1"
model_id = "m"
"#;

/// The seed's rules: P99 +30 %; P95 above 2× the previous day's mean three runs in a row.
const SEED_RULES: &str = r#"
[[rules]]
name = "p99-up-30"
kind = "p99_increase_pct"
metric = "ttft"
threshold = 30

[[rules]]
name = "p95-day"
kind = "p95_above_prev_day_mean"
metric = "ttft"
factor = 2
consecutive_runs = 3
"#;

/// Four identical runs of one campaign stay quiet under the seed's rules (both evaluated:
/// P99 and P95 are supported); a fifth against the same provider 40 % slower fires the P99
/// rule, with intervals that do not overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_rules_are_quiet_on_identical_runs_and_fire_on_a_40_percent_slowdown() {
    use latmesh_testkit::{bin, spawn, spawn_until_line, verify_until_clean};
    use std::process::Command;
    use std::time::Duration;

    let (client, db) = latmesh_testkit::fresh_db("check_sim");
    store::migrate(&client, &db, None).await.unwrap();
    let ch_url = latmesh_testkit::clickhouse_url().to_string();
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let sim = |name: &str, scale: f64| {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_string(&[svc(scale)]).unwrap()).unwrap();
        let mut cmd = Command::new(bin("latmesh-sim"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--profiles"])
            .arg(&file);
        spawn_until_line(
            name,
            cmd,
            "listening on ",
            Duration::from_secs(20),
            &log(name),
        )
    };
    let (_sim, sim_url) = sim("sim", 1.0);
    let (_slow, slow_url) = sim("sim-slow", 1.4);
    let mut coord = Command::new(bin("latmesh"));
    coord
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--clickhouse-url",
            &ch_url,
        ])
        .args(["--clickhouse-db", &db, "--spool-dir"])
        .arg(dir.path().join("spool"));
    let (_coord, coord_url) = spawn_until_line(
        "coordinator",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &log("coordinator"),
    );
    let mut agent = Command::new(bin("latmesh-agent"));
    agent
        .args(["--coordinator", &coord_url, "--region", "us-east"])
        .args(["--agent-id", "us-east-1", "--spool-dir"])
        .arg(dir.path().join("agent-spool"));
    let _agent = spawn("agent", agent, &log("agent"));

    let mut ids = Vec::new();
    for (i, sim_url) in [&sim_url, &sim_url, &sim_url, &sim_url, &slow_url]
        .into_iter()
        .enumerate()
    {
        let file = dir.path().join(format!("run{i}.toml"));
        std::fs::write(
            &file,
            SIM_CAMPAIGN.replace("{sim}", sim_url.trim_start_matches("http://")),
        )
        .unwrap();
        let json = dir.path().join(format!("run{i}.json"));
        let out = Command::new(bin("latmesh"))
            .args(["campaign", "launch"])
            .arg(&file)
            .args([
                "--coordinator",
                &coord_url,
                "--start-delay-s",
                "1",
                "--json",
            ])
            .arg(&json)
            .output()
            .unwrap();
        let summary: latmesh_results::summary::Summary =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
                panic!(
                    "run {i}: no summary ({e}): {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )
            }))
            .unwrap();
        let cell = summary.cell("us-east", "svc", "load").unwrap();
        assert!(cell.samples >= 368, "run {i}: {cell:?}");
        verify_until_clean(&ch_url, &db, &summary.campaign_id);
        ids.push(summary.campaign_id);
    }
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, SEED_RULES).unwrap();
    let check = |current: &str, baseline: &str| {
        let mut a = args(&db, &rules);
        a.current = Some(current.into());
        a.baseline = Some(baseline.into());
        a
    };

    // Identical runs: the 4th against the 1st, and the last three against the day before.
    let r = check::run(&check(&ids[3], &ids[0])).await.unwrap();
    println!("{}", latmesh_cli::ui::check::render(&r));
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));
    assert!(
        r.inconclusive.is_empty(),
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    // Both rules checked the one cell (us-east svc load): nothing was skipped for size.
    assert_eq!(r.checked, 2, "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.exit_code(), 0);

    // 40 % slower: the P99 rule fires; P95 is not above 2× the previous day.
    let r = check::run(&check(&ids[4], &ids[3])).await.unwrap();
    println!("{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(
        fired(&r),
        set(&[("p99-up-30", "us-east", "svc")]),
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    let f = &r.fired[0];
    let (cur, base) = (f.current_ci.unwrap(), f.baseline_ci.unwrap());
    assert!(cur.0 > base.1, "{f:?}");
    assert!(f.current > 1.3 * f.baseline.unwrap(), "{f:?}");
    assert_eq!(r.exit_code(), 1);
    latmesh_testkit::drop_db(&client, &db).await;
}

// ---- silent-swap rules ------------------------------------------------------------------

/// What one provider answered in one region: `n` answers from `at` (UTC µs) on, named
/// `model` and `fingerprint`.
struct Answered<'a> {
    region: &'a str,
    provider: &'a str,
    model: &'a str,
    fingerprint: Option<&'a str>,
    n: usize,
    at: i64,
}

/// Stores campaign `id` of `plan` starting at `start` with one batch per `answered` entry.
async fn store_answered(
    client: &clickhouse::Client,
    db: &str,
    plan: &Plan,
    id: &str,
    start: i64,
    answered: &[Answered<'_>],
) {
    store_campaign(client, db, plan, id, start).await;
    for (seq, a) in answered.iter().enumerate() {
        let records: Vec<ProbeRecord> = (0..a.n)
            .map(|i| ProbeRecord {
                round: i as u32,
                provider: a.provider.into(),
                scenario: "chat".into(),
                prompt_id: "p".into(),
                attempt: 1,
                stream: true,
                final_attempt: true,
                send_agent_unix_us: a.at + i as i64 * 1000,
                outcome: Some(Outcome::Ok),
                http_status: Some(200),
                ttft_us: Some(100_000),
                ttfc_us: Some(100_000),
                e2e_us: Some(200_000),
                output_tokens: 3,
                answered_model: Some(a.model.into()),
                system_fingerprint: a.fingerprint.map(Into::into),
                ..Default::default()
            })
            .collect();
        let agent = format!("{}-agent", a.region);
        let key = BatchKey::new(id, &agent, a.region, 0, seq as u64 + 1);
        store::insert_batch(client, db, &key, &records, &[])
            .await
            .unwrap();
    }
}

/// One `latmesh compat` run of campaign `campaign` from eu-west: 20 prompts × 2 samples for
/// alpha and beta, beta wrong on its first `beta_wrong` prompts.
async fn store_compat_run(
    client: &clickhouse::Client,
    db: &str,
    run_id: &str,
    campaign: &str,
    at: i64,
    beta_wrong: u32,
) {
    use latmesh_core::quality::{QualitySample, answer_hash};
    let mut samples = Vec::new();
    for provider in ["alpha", "beta"] {
        for p in 0..20u32 {
            for sample in 0..2 {
                let wrong = provider == "beta" && p < beta_wrong;
                let answer = if wrong { "x".into() } else { p.to_string() };
                samples.push(QualitySample {
                    provider: provider.into(),
                    prompt_id: format!("q{p:02}"),
                    sample,
                    outcome: Outcome::Ok,
                    correct: Some(!wrong),
                    answer_hash: answer_hash(&answer),
                    answer,
                    output_tokens: 5,
                    answered_model: None,
                });
            }
        }
    }
    let run = store::CompatRun {
        run_id: run_id.into(),
        campaign_id: campaign.into(),
        campaign_name: "swap".into(),
        region: "eu-west".into(),
        started_unix_us: at,
        quality_set: latmesh_core::quality::QUALITY_SET_VERSION.into(),
        ..Default::default()
    };
    store::insert_compat_run(client, db, &run, &[], &samples)
        .await
        .unwrap();
}

const SWAP_RULES: &str = r#"
[[rules]]
kind = "model_changed"

[[rules]]
kind = "fingerprint_changed"

[[rules]]
kind = "answers_changed"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_swap_rules_name_provider_region_and_time() {
    let (client, db) = latmesh_testkit::fresh_db("check_swap");
    store::migrate(&client, &db, None).await.unwrap();
    let plan = plan("swap");
    let dated = "gpt-4o-2024-08-06";
    let steady = |at: i64| {
        let mut v = Vec::new();
        for region in ["us-east", "eu-west"] {
            // alpha sends no fingerprint; beta does.
            v.push(Answered {
                region,
                provider: "alpha",
                model: dated,
                fingerprint: None,
                n: 10,
                at,
            });
            v.push(Answered {
                region,
                provider: "beta",
                model: dated,
                fingerprint: Some("fp_a"),
                n: 10,
                at,
            });
        }
        v
    };
    store_answered(
        &client,
        &db,
        &plan,
        "swap-base",
        T - 2 * HOUR_US,
        &steady(T - 2 * HOUR_US),
    )
    .await;
    store_compat_run(&client, &db, "run-base", "swap-base", T - 2 * HOUR_US, 0).await;
    // Current: beta in us-east swaps to another model (and backend) 30 s into the campaign.
    let swap_at = T + 30_000_000;
    let mut cur = steady(T);
    cur.push(Answered {
        region: "us-east",
        provider: "beta",
        model: "gpt-4o-mini-2024-07-18",
        fingerprint: Some("fp_b"),
        n: 10,
        at: swap_at,
    });
    // alpha starts sending a fingerprint: its baseline has none to compare with.
    cur.push(Answered {
        region: "us-east",
        provider: "alpha",
        model: dated,
        fingerprint: Some("fp_new"),
        n: 5,
        at: swap_at,
    });
    store_answered(&client, &db, &plan, "swap-cur", T, &cur).await;
    // Its compat run: beta wrong on 8 of 20 prompts.
    store_compat_run(&client, &db, "run-cur", "swap-cur", T + HOUR_US, 8).await;
    // An unchanged rerun of the baseline.
    store_answered(&client, &db, &plan, "swap-same", T, &steady(T)).await;
    store_compat_run(&client, &db, "run-same", "swap-same", T + HOUR_US, 0).await;

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, SWAP_RULES).unwrap();

    // Unchanged: nothing fires, everything checked (4 region × provider pairs of models, 2 of
    // fingerprints: alpha sends none; 2 providers' answers).
    let mut a = args(&db, &rules);
    a.current = Some("swap-same".into());
    a.baseline = Some("swap-base".into());
    let r = check::run(&a).await.unwrap();
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.checked, 4 + 2 + 2);
    assert_eq!(r.exit_code(), 0);
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);

    // The swap: each rule fires once, on beta, naming region and time.
    a.current = Some("swap-cur".into());
    let r = check::run(&a).await.unwrap();
    let text = latmesh_cli::ui::check::render(&r);
    assert_eq!(
        fired(&r),
        set(&[
            ("model_changed", "us-east", "beta"),
            ("fingerprint_changed", "us-east", "beta"),
            ("answers_changed", "eu-west", "beta"),
        ]),
        "{text}"
    );
    assert_eq!(r.exit_code(), 1);
    assert!(
        r.skipped.iter().any(|s| s
            .contains("1 region × provider pair(s) whose baseline answered no system_fingerprint")),
        "{:?}",
        r.skipped
    );
    let model = r.fired.iter().find(|f| f.kind == "model_changed").unwrap();
    assert_eq!(model.time_unix_us, Some(swap_at));
    let when = latmesh_core::windows::utc_label(swap_at / 1_000_000, false);
    assert_eq!(model.time.as_deref(), Some(format!("{when} UTC").as_str()));
    assert!(
        model
            .message
            .contains("beta in us-east answered with model gpt-4o-mini-2024-07-18 ×10")
            && model.message.contains(&format!("first seen {when} UTC"))
            && model.message.contains(&format!("(it answered {dated})")),
        "{}",
        model.message
    );
    assert_eq!(model.unit, "attempts");
    let fp = r
        .fired
        .iter()
        .find(|f| f.kind == "fingerprint_changed")
        .unwrap();
    assert!(fp.message.contains("fp_b ×10"), "{}", fp.message);
    let answers = r
        .fired
        .iter()
        .find(|f| f.kind == "answers_changed")
        .unwrap();
    assert_eq!(answers.time_unix_us, Some(T + HOUR_US));
    assert_eq!(answers.current, 40.0);
    assert!(
        answers
            .message
            .starts_with("beta from eu-west: modal answer changed on 8 of 20 prompts (40%")
            && answers.message.contains("run-cur"),
        "{}",
        answers.message
    );
    // The JSON names the time too.
    let j = serde_json::to_value(&r).unwrap();
    let f = j["fired"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "model_changed")
        .unwrap();
    assert_eq!(f["time_unix_us"], swap_at);
    assert_eq!(
        (f["provider"].as_str(), f["region"].as_str()),
        (Some("beta"), Some("us-east"))
    );

    // From summary files: the name rules work on the cells (time: the campaign's start);
    // answers_changed needs ClickHouse and says so.
    let mut paths = Vec::new();
    for id in ["swap-cur", "swap-base"] {
        let s = store::query::stored_summary(&client, &db, &store::QueryFilter::campaign(id))
            .await
            .unwrap();
        let path = dir.path().join(format!("{id}.json"));
        std::fs::write(&path, serde_json::to_vec(&s).unwrap()).unwrap();
        paths.push(path);
    }
    let mut a = args(&db, &rules);
    a.clickhouse_url = None;
    a.current_summary = Some(paths[0].clone());
    a.baseline_summary = Some(paths[1].clone());
    let r = check::run(&a).await.unwrap();
    assert_eq!(
        fired(&r),
        set(&[
            ("model_changed", "us-east", "beta"),
            ("fingerprint_changed", "us-east", "beta"),
        ]),
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    let model = r.fired.iter().find(|f| f.kind == "model_changed").unwrap();
    assert_eq!(model.time_unix_us, Some(T));
    assert!(
        model.message.contains("during swap-cur"),
        "{}",
        model.message
    );
    assert!(
        r.skipped
            .iter()
            .any(|s| s.starts_with("answers_changed: compares the quality samples of `latmesh compat` runs stored in ClickHouse")),
        "{:?}",
        r.skipped
    );

    // A swap rule without a baseline is an error.
    let mut a = args(&db, &rules);
    a.current = Some("swap-cur".into());
    let e = check::run(&a).await.unwrap_err();
    assert!(
        format!("{e:#}").contains("compares with a baseline"),
        "{e:#}"
    );
    latmesh_testkit::drop_db(&client, &db).await;
}

/// `goodput_below` from ClickHouse: goodput counted from the stored `slo_met`, warm-up rows
/// left out, per region and `ALL` ([`store::check_queries::goodput_counts`]), the same
/// counts the in-memory summary makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goodput_rule_reads_slo_met_without_warm_up() {
    let (client, db) = latmesh_testkit::fresh_db("check_goodput");
    store::migrate(&client, &db, None).await.unwrap();
    let plan = plan("slo");
    store_campaign(&client, &db, &plan, "slo-1", T).await;
    // us-east alpha: 10 of 30 met, and 5 warm-up requests that "met" it; beta: 30 of 30;
    // eu-west alpha: 30 of 30; eu-west beta: no SLO judged (slo_met NULL).
    // (region, provider, requests, first round, warm-up, slo_met)
    type Group<'a> = (&'a str, &'a str, u32, u32, bool, Option<bool>);
    let groups: [Group; 6] = [
        ("us-east", "alpha", 10, 0, false, Some(true)),
        ("us-east", "alpha", 20, 10, false, Some(false)),
        ("us-east", "alpha", 5, 30, true, Some(true)),
        ("us-east", "beta", 30, 0, false, Some(true)),
        ("eu-west", "alpha", 30, 0, false, Some(true)),
        ("eu-west", "beta", 30, 0, false, None),
    ];
    for region in ["us-east", "eu-west"] {
        let mut records = Vec::new();
        for &(_, provider, n, first, warmup, slo_met) in groups.iter().filter(|g| g.0 == region) {
            for i in first..first + n {
                records.push(ProbeRecord {
                    round: i,
                    provider: provider.into(),
                    scenario: "chat".into(),
                    prompt_id: "p".into(),
                    attempt: 1,
                    turn: 1,
                    stream: true,
                    final_attempt: true,
                    send_agent_unix_us: T + i64::from(i) * 1000,
                    outcome: Some(Outcome::Ok),
                    http_status: Some(200),
                    ttft_us: Some(100_000),
                    e2e_us: Some(200_000),
                    output_tokens: 1,
                    warmup,
                    slo_met,
                    ..Default::default()
                });
            }
        }
        let agent = format!("{region}-agent");
        let key = BatchKey::new("slo-1", &agent, region, 0, 1);
        store::insert_batch(&client, &db, &key, &records, &[])
            .await
            .unwrap();
    }
    let counts = store::check_queries::goodput_counts(
        &client,
        &db,
        store::check_queries::RowScope::Campaign("slo-1"),
    )
    .await
    .unwrap();
    let got: Vec<(String, String, u64, u64)> = counts
        .into_iter()
        .map(|c| (c.region, c.provider, c.met, c.judged))
        .collect();
    let want: Vec<(String, String, u64, u64)> = [
        ("ALL", "alpha", 40, 60),
        ("ALL", "beta", 30, 30),
        ("eu-west", "alpha", 30, 30),
        ("us-east", "alpha", 10, 30),
        ("us-east", "beta", 30, 30),
    ]
    .into_iter()
    .map(|(r, p, m, j)| (r.to_string(), p.to_string(), m, j))
    .collect();
    assert_eq!(got, want);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nkind = \"goodput_below\"\nlimit_pct = 90\n\
         [[rules]]\nname = \"all\"\nkind = \"goodput_below\"\nlimit_pct = 90\nregion = \"ALL\"\n",
    )
    .unwrap();
    let r = check::run(&CheckArgs {
        current: Some("slo-1".into()),
        ..args(&db, &rules)
    })
    .await
    .unwrap();
    assert_eq!(
        fired(&r),
        set(&[
            ("goodput_below", "us-east", "alpha"),
            ("all", "ALL", "alpha")
        ])
    );
    let f = &r.fired[0];
    assert!(
        f.message
            .contains("goodput 33.33% (10 of 30 judged requests met the SLO)"),
        "{}",
        f.message
    );
    // Checked: us-east alpha and beta, eu-west alpha; ALL alpha and beta. eu-west beta has
    // no judged request: a cell without an SLO.
    assert_eq!(r.checked, 5);
    assert!(
        r.skipped
            .iter()
            .any(|s| s == "goodput_below: 1 cell(s) of scenarios without an SLO (no goodput)"),
        "{:?}",
        r.skipped
    );
}
