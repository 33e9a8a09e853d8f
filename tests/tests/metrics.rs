//! Prometheus `/metrics` of the agent and the coordinator, with real processes on loopback:
//! `latmesh-sim`, `latmesh serve --metrics-listen` (storing into ClickHouse), an agent with
//! `--metrics-listen`, a small campaign; both pages are parsed with a Prometheus text-format
//! parser and checked against the campaign's own summary.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::{bin, free_port, fresh_db, spawn_until_line};
use prometheus_parse::{Sample, Scrape, Value};

/// `GET /metrics` at `url` (`http://HOST:PORT/metrics`) with `accept`: (content type, body).
fn get(url: &str, accept: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut s = std::net::TcpStream::connect(host).expect("connect to /metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nhost: {host}\r\naccept: {accept}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    (content_type, body.to_string())
}

/// The parsed page at `url` (Prometheus text format 0.0.4, what a scraper gets by default).
fn scrape(url: &str) -> Vec<Sample> {
    let (content_type, body) = get(url, "text/plain");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .unwrap_or_else(|e| panic!("{url} does not parse: {e}\n{body}"))
        .samples
}

fn num(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        other => panic!("not a single value: {other:?}"),
    }
}

/// Samples named `name` whose labels include every pair of `labels`.
fn matching<'a>(
    samples: &'a [Sample],
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = &'a Sample> + 'a {
    samples.iter().filter(move |s| {
        s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
    })
}

/// The sum of the samples named `name` with `labels`.
fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    matching(samples, name, labels).map(|s| num(&s.value)).sum()
}

/// The one sample named `name` (no labels), panicking when absent.
fn one(samples: &[Sample], name: &str) -> f64 {
    let found: Vec<f64> = matching(samples, name, &[])
        .map(|s| num(&s.value))
        .collect();
    assert_eq!(found.len(), 1, "{name}: {found:?} in {samples:#?}");
    found[0]
}

/// Scrapes `url` until `ok` holds for the page (up to `timeout`); returns that page.
fn scrape_until(
    url: &str,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&[Sample]) -> bool,
) -> Vec<Sample> {
    let deadline = Instant::now() + timeout;
    loop {
        let samples = scrape(url);
        if ok(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what}: {samples:#?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn agent_and_coordinator_metrics_match_what_the_campaign_measured() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));

    // A simulator with one quick provider; the campaign also asks it for a provider it does
    // not serve (404: http_4xx records), so the outcome label has two values.
    let profiles = vec![ProviderProfile {
        output_tokens_min: 5,
        output_tokens_max: 10,
        ..ProviderProfile::fixed("quick", 30_000, 2_000)
    }];
    let profiles_file = dir.path().join("profiles.json");
    std::fs::write(&profiles_file, serde_json::to_string(&profiles).unwrap()).unwrap();
    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0", "--profiles"])
        .arg(&profiles_file);
    let (_sim, sim_url) = spawn_until_line(
        "latmesh-sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let sim_addr = sim_url.trim_start_matches("http://").to_string();

    // The coordinator stores into a fresh ClickHouse database through its spool.
    let ch_url = latmesh_testkit::clickhouse_url();
    let (ch, db) = fresh_db("metrics");
    let coord_metrics = format!("127.0.0.1:{}", free_port());
    let mut coord = Command::new(bin("latmesh"));
    coord
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", &coord_metrics])
        .args(["--clickhouse-url", ch_url, "--clickhouse-db", &db])
        .arg("--spool-dir")
        .arg(dir.path().join("coord-spool"));
    let (_coord, coord_url) = spawn_until_line(
        "latmesh serve",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &log("coordinator"),
    );
    let coord_page = format!("http://{coord_metrics}/metrics");

    // The agent picks its own port and prints it.
    let mut agent = Command::new(bin("latmesh-agent"));
    agent
        .args(["--coordinator", &coord_url, "--region", "us-east"])
        .arg("--emulate-region")
        .args(["--agent-id", "us-east-m", "--metrics-listen", "127.0.0.1:0"])
        .arg("--spool-dir")
        .arg(dir.path().join("agent-spool"));
    let (_agent, agent_page) = spawn_until_line(
        "latmesh-agent",
        agent,
        "metrics on ",
        Duration::from_secs(20),
        &log("agent"),
    );

    // Connected, clock synchronized, nothing measured yet.
    let before = scrape_until(
        &agent_page,
        "agent connected with a clock estimate",
        Duration::from_secs(20),
        |s| {
            sum(s, "latmesh_agent_connected", &[]) == 1.0
                && matching(s, "latmesh_agent_clock_offset_us", &[]).count() == 1
        },
    );
    assert_eq!(sum(&before, "latmesh_agent_requests_total", &[]), 0.0);
    scrape_until(
        &coord_page,
        "coordinator sees the agent",
        Duration::from_secs(20),
        |s| sum(s, "latmesh_coordinator_agents_connected", &[]) == 1.0,
    );

    let campaign = dir.path().join("campaign.toml");
    std::fs::write(
        &campaign,
        format!(
            r#"
[campaign]
name = "metrics"
regions = ["us-east"]
[rounds]
count = 4
interval_s = 1.0
gap_ms = 300
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
timeout_total_s = 20
[[providers]]
name = "quick"
base_url = "http://{sim_addr}/quick/v1"
model_id = "{model}"
[[providers]]
name = "missing"
base_url = "http://{sim_addr}/no-such-provider/v1"
model_id = "{model}"
"#,
            model = latmesh_sim::profile::DEFAULT_MODEL_ID,
        ),
    )
    .unwrap();
    let json = dir.path().join("summary.json");
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&campaign)
        .args(["--coordinator", &coord_url, "--start-delay-s", "1"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    // `missing` fails every request (a wrong path): exit status 3, naming it, after the
    // summary was written.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "launch: {}{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("in a region: us-east × missing: 4/4 failed in every scenario"),
        "{stderr}"
    );
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(summary.complete, "{summary:?}");
    let records: u64 = summary.agents.iter().map(|a| a.records).sum();
    assert_eq!(records, 4 * 2, "one record per slot (no retries)");
    // What the campaign's matrix says, per (provider, outcome).
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for cell in summary.cells.iter().filter(|c| c.region == "us-east") {
        for (outcome, n) in &cell.outcomes {
            *expected
                .entry((cell.provider.clone(), outcome.clone()))
                .or_default() += n;
        }
    }
    assert_eq!(expected.values().sum::<u64>(), records, "{expected:?}");
    assert!(
        expected.contains_key(&("quick".into(), "ok".into()))
            && expected.contains_key(&("missing".into(), "http_4xx".into())),
        "{expected:?}"
    );

    // The agent: every record counted once, by provider/scenario/outcome; every batch acked.
    let agent_after = scrape_until(
        &agent_page,
        "agent's batches all acked",
        Duration::from_secs(20),
        |s| {
            sum(s, "latmesh_agent_spool_pending_batches", &[]) == 0.0
                && sum(s, "latmesh_agent_batches_acked_total", &[]) >= 1.0
        },
    );
    let s = &agent_after;
    assert_eq!(
        sum(s, "latmesh_agent_requests_total", &[]),
        records as f64,
        "requests_total summed over its labels"
    );
    for ((provider, outcome), n) in &expected {
        let labels = [
            ("provider", provider.as_str()),
            ("scenario", "chat"),
            ("outcome", outcome.as_str()),
        ];
        assert_eq!(
            sum(s, "latmesh_agent_requests_total", &labels),
            *n as f64,
            "{labels:?}"
        );
    }
    let spooled = one(s, "latmesh_agent_batches_spooled_total");
    assert!(spooled >= 1.0);
    assert_eq!(one(s, "latmesh_agent_batches_acked_total"), spooled);
    assert_eq!(one(s, "latmesh_agent_batches_memory_only_total"), 0.0);
    assert_eq!(one(s, "latmesh_agent_in_flight"), 0.0);
    assert_eq!(one(s, "latmesh_agent_connected"), 1.0);
    assert_eq!(
        one(s, "latmesh_agent_spool_bytes"),
        0.0,
        "acked batches leave the spool"
    );
    let offset_us = one(s, "latmesh_agent_clock_offset_us");
    assert!(offset_us.abs() < 1e6, "same host: offset {offset_us} µs");
    assert!(one(s, "latmesh_agent_clock_uncertainty_us") >= 0.0);

    // The coordinator: the same records by region/provider/outcome; then ClickHouse has them.
    let c = scrape_until(
        &coord_page,
        "sink drained the spool into ClickHouse",
        Duration::from_secs(60),
        |s| {
            sum(
                s,
                "latmesh_coordinator_clickhouse_rows_inserted_total",
                &[("table", "requests")],
            ) == records as f64
                && sum(s, "latmesh_coordinator_spool_pending_entries", &[]) == 0.0
        },
    );
    assert_eq!(one(&c, "latmesh_coordinator_agents_connected"), 1.0);
    assert_eq!(one(&c, "latmesh_coordinator_campaigns_running"), 0.0);
    assert_eq!(
        sum(&c, "latmesh_coordinator_records_received_total", &[]),
        records as f64
    );
    for ((provider, outcome), n) in &expected {
        let labels = [
            ("region", "us-east"),
            ("provider", provider.as_str()),
            ("outcome", outcome.as_str()),
        ];
        assert_eq!(
            sum(&c, "latmesh_coordinator_records_received_total", &labels),
            *n as f64,
            "{labels:?}"
        );
    }
    let received = one(&c, "latmesh_coordinator_batches_received_total");
    let acked = one(&c, "latmesh_coordinator_batches_acked_total");
    assert!(
        received >= spooled && acked >= spooled,
        "{received} {acked} {spooled}"
    );
    assert_eq!(one(&c, "latmesh_coordinator_spool_bytes"), 0.0);
    assert_eq!(
        one(&c, "latmesh_coordinator_clickhouse_insert_lag_seconds"),
        0.0
    );
    assert!(
        sum(
            &c,
            "latmesh_coordinator_clickhouse_rows_inserted_total",
            &[("table", "histograms")]
        ) > 0.0
    );
    assert_eq!(
        sum(
            &c,
            "latmesh_coordinator_clickhouse_rows_inserted_total",
            &[("table", "campaigns")]
        ),
        1.0
    );

    // Scrapers that ask for OpenMetrics get it.
    let (content_type, body) = get(&coord_page, "application/openmetrics-text; version=1.0.0");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(
        body.contains("# TYPE latmesh_coordinator_records_received counter"),
        "{body}"
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(latmesh_testkit::drop_db(&ch, &db));
}
