//! ClickHouse that stalls or never answers: bounded waits, no duplicate after an insert that
//! outlived its timeout, and the coordinator's voice (README, "Failure semantics").
//!
//! The stall tests run a private ClickHouse (`scripts/clickhouse.sh start --state-dir …` on
//! free ports) and stop it with SIGSTOP: the shared server other tests use is never stalled.
//! "Never answers" is a loopback listener that accepts connections and reads nothing.

use std::process::Command;
use std::time::{Duration, Instant};

use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_store::insert::{PreparedBatch, SeqMarks, insert_prepared};
use latmesh_store::{self as store, BatchKey, InsertOutcome, StoreError, Timeouts};
use latmesh_testkit::private_clickhouse::PrivateClickhouse;
use latmesh_testkit::{bin, repo, spawn_until_line};

/// A listener that accepts TCP connections and never answers (nor reads).
struct Silent {
    url: String,
    _conns: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

fn silent() -> Silent {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = conns.clone();
    std::thread::spawn(move || {
        for c in listener.incoming().map_while(Result::ok) {
            keep.lock().unwrap().push(c);
        }
    });
    Silent { url, _conns: conns }
}

fn records(n: usize) -> Vec<ProbeRecord> {
    (0..n)
        .map(|i| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            prompt_id: format!("prompt-{i}"),
            attempt: 1,
            final_attempt: true,
            turn: 1,
            send_agent_unix_us: 1_700_000_000_000_000 + i as i64,
            outcome: Some(Outcome::Ok),
            ..Default::default()
        })
        .collect()
}

/// Longer than any bounded wait of these tests: reaching it means a call hung.
const HUNG: Duration = Duration::from_secs(60);

/// 1 s bounds, so the tests stay short.
const SHORT: Timeouts = Timeouts {
    connect: Duration::from_secs(1),
    query: Duration::from_secs(1),
};

/// The scenario of issue 17: the server stops, an insert outlives its client timeout, the
/// writer retries, the server resumes and executes the abandoned insert. Every row must be
/// stored exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_abandoned_at_its_timeout_is_not_stored_twice() {
    let ch = PrivateClickhouse::started();
    let client = store::client_with(&ch.url(), &SHORT);
    let db = "stall";
    store::migrate(&client, db, None).await.unwrap();
    let mut marks = SeqMarks::new();
    let first = records(10);
    let second = records(5_000);
    let key = |seq| BatchKey::new("c1", "agent-1", "r1", 0, seq);
    let batch = |seq, recs: &'static [ProbeRecord]| PreparedBatch {
        key: key(seq),
        records: recs,
        histograms: &[],
    };
    let first: &'static [ProbeRecord] = first.leak();
    let second: &'static [ProbeRecord] = second.leak();
    // A first batch settles the writer and gives (c1, agent-1) a seq bound, so the next
    // call sends its insert without any query first.
    insert_prepared(&client, db, &[batch(1, first)], Some(&mut marks), &SHORT)
        .await
        .unwrap();

    ch.stall(true);
    let abandoned =
        insert_prepared(&client, db, &[batch(2, second)], Some(&mut marks), &SHORT).await;
    assert!(
        matches!(abandoned, Err(StoreError::TimedOut { .. })),
        "{abandoned:?}"
    );
    ch.stall(false);

    // The writer retries at once, as often as it takes (the server may still be busy with
    // the abandoned insert).
    let mut retries = 0;
    let outcome = loop {
        match insert_prepared(&client, db, &[batch(2, second)], Some(&mut marks), &SHORT).await {
            Ok(o) => break o,
            Err(e) => {
                retries += 1;
                assert!(e.is_retryable() && retries < 20, "{e}");
            }
        }
    };
    // The abandoned insert was executed by the resumed server, and the retry found its rows.
    assert_eq!(outcome, vec![InsertOutcome::AlreadyPresent]);
    let (rows, distinct): (u64, u64) = client
        .query(&format!(
            "SELECT count(), uniqExact(row_index) FROM {db}.requests WHERE seq = 2"
        ))
        .fetch_one()
        .await
        .unwrap();
    assert_eq!((rows, distinct), (5_000, 5_000), "every row once");
}

/// A ClickHouse that accepts connections and never answers fails every operation with a
/// timeout naming what was done, and the CLI commands with one naming the URL.
#[tokio::test]
async fn a_server_that_never_answers_fails_each_wait_with_its_bound() {
    let s = silent();
    let client = store::client_with(&s.url, &SHORT);
    // (A hang detector far above the 1 s bounds: unbounded calls used to wait forever.)
    let err = tokio::time::timeout(HUNG, store::migrate_within(&client, "x", None, &SHORT))
        .await
        .expect("migrations hung")
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        err.to_string()
            .contains("did not answer within 1 s while running schema statement `CREATE DATABASE"),
        "{err}"
    );
    let key = BatchKey::new("c1", "agent-1", "r1", 0, 1);
    let recs = records(3);
    let batch = PreparedBatch {
        key,
        records: &recs,
        histograms: &[],
    };
    let err = tokio::time::timeout(HUNG, insert_prepared(&client, "x", &[batch], None, &SHORT))
        .await
        .expect("insert hung")
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::TimedOut { what, .. } if what.contains("system.processes")),
        "{err}"
    );

    let rules = repo().join("examples/rules.toml");
    let rules = rules.to_str().unwrap();
    let whole_command = format!("ClickHouse at {}: did not answer within 1 s", s.url);
    let one_statement = format!(
        "ClickHouse at {}: ClickHouse did not answer within 1 s while running schema statement",
        s.url
    );
    for (args, needle) in [
        (&["query", "matrix", "--campaign", "c1"][..], &whole_command),
        (&["campaign", "verify", "c1"][..], &whole_command),
        (&["report", "c1", "--out", "-"][..], &whole_command),
        (
            &[
                "check",
                "--current",
                "c1",
                "--baseline",
                "c0",
                "--rules",
                rules,
            ][..],
            &whole_command,
        ),
        (&["db", "migrate"][..], &one_statement),
    ] {
        let out = Command::new("timeout")
            .arg(HUNG.as_secs().to_string())
            .arg(bin("latmesh"))
            .args(args)
            .args(["--clickhouse-url", &s.url, "--clickhouse-timeout-s", "1"])
            .env_remove("LATMESH_CLICKHOUSE_URL")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(124), "{args:?} hung");
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(needle.as_str()), "{args:?}: {stderr}");
    }
}

/// Polls `log` until it holds `needle` (at most `within`); returns the log.
fn wait_for_line(log: &std::path::Path, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in {} within {within:?}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `latmesh serve` storing into database `db` of `ch` (spool in `dir`, queries bounded by
/// 1 s, log in `log`); returns it and its URL.
fn coordinator(
    ch: &PrivateClickhouse,
    db: &str,
    dir: &std::path::Path,
    log: &std::path::Path,
) -> (latmesh_testkit::Proc, String) {
    let mut coord = Command::new(bin("latmesh"));
    coord
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--clickhouse-url",
            &ch.url(),
        ])
        .args(["--clickhouse-db", db, "--clickhouse-timeout-s", "1"])
        .arg("--spool-dir")
        .arg(dir.join("spool"));
    spawn_until_line(
        "coordinator",
        coord,
        "listening on ",
        Duration::from_secs(20),
        log,
    )
}

/// The coordinator says within seconds that ClickHouse does not answer (here before its
/// migrations), and says when it is back.
#[test]
fn the_coordinator_warns_of_a_stall_and_says_when_it_is_over() {
    let ch = PrivateClickhouse::started();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("coord.log");
    ch.stall(true);
    let (_coord, _) = coordinator(&ch, "voice", dir.path(), &log);
    let text = wait_for_line(
        &log,
        "ClickHouse not answering for 5 s, 0 batches waiting in the spool",
        Duration::from_secs(30),
    );
    assert!(
        text.contains(&ch.url()),
        "the warning names the server:\n{text}"
    );
    wait_for_line(
        &log,
        "ClickHouse not answering for 10 s",
        Duration::from_secs(30),
    );
    ch.stall(false);
    let text = wait_for_line(
        &log,
        "ClickHouse back, spool drained (0 batches)",
        Duration::from_secs(30),
    );
    assert!(text.contains("ClickHouse migrations applied"), "{text}");
}

/// A whole campaign while ClickHouse is stopped (SIGSTOP) past the insert timeout: `campaign
/// launch` says its results are only in the spool, the coordinator warns and, once ClickHouse
/// resumes, says the spool is drained; `campaign verify` finds nothing lost, nothing twice.
#[test]
fn a_campaign_during_a_stall_is_stored_once_when_clickhouse_resumes() {
    let ch = PrivateClickhouse::started();
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let db = "stall_campaign";
    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let (_coord, url) = coordinator(&ch, db, dir.path(), &log("coord"));
    wait_for_line(&log("coord"), "migrations applied", Duration::from_secs(30));
    let mut agent = Command::new(bin("latmesh-agent"));
    agent.args([
        "--coordinator",
        &url,
        "--region",
        "us-east",
        "--agent-id",
        "stall-agent",
        "--exit-after",
        "1",
    ]);
    let _agent = latmesh_testkit::spawn("agent", agent, &log("agent"));
    let campaign = latmesh_cli::cmd::demo::demo_rounds_only()
        .replace("{sim}", sim_url.trim_start_matches("http://"))
        .replace("count = 12 ", "count = 4 ")
        .replace(
            "regions = [\"us-east\", \"eu-west\", \"ap-southeast\"]",
            "regions = [\"us-east\"]",
        );
    let file = dir.path().join("campaign.toml");
    std::fs::write(&file, campaign).unwrap();
    let json = dir.path().join("summary.json");

    ch.stall(true);
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &url, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "launch failed:\n{stderr}");
    assert!(
        stderr.contains("result batches are only in the coordinator's spool, not yet in ClickHouse; ClickHouse has not answered the coordinator for"),
        "launch did not say where the results are:\n{stderr}"
    );
    wait_for_line(
        &log("coord"),
        "ClickHouse not answering for 5 s",
        Duration::from_secs(30),
    );
    ch.stall(false);

    let summary: latmesh_results::summary::Summary =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    latmesh_testkit::verify_until_clean(&ch.url(), db, &summary.campaign_id);
    let text = wait_for_line(
        &log("coord"),
        "ClickHouse back, spool drained (",
        Duration::from_secs(30),
    );
    assert!(
        !text.contains("ClickHouse back, spool drained (0 batches)"),
        "the batches stored after the stall are counted:\n{text}"
    );
}
