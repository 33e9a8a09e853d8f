//! The coordinator's ClickHouse path end to end, with real processes and a real ClickHouse of
//! the test's own (Debian's server, started by `scripts/clickhouse.sh` on free loopback ports):
//! the server is down when a campaign starts and comes back while it runs; `campaign verify` then
//! finds nothing lost and nothing duplicated, and the matrix rebuilt from ClickHouse alone
//! equals the coordinator's in-memory one.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_testkit::private_clickhouse::PrivateClickhouse;
use latmesh_testkit::{bin, spawn, spawn_until_line};

fn latmesh(args: &[&str]) -> Output {
    Command::new(bin("latmesh")).args(args).output().unwrap()
}

#[test]
fn clickhouse_down_mid_campaign_loses_and_duplicates_nothing() {
    let ch = PrivateClickhouse::new();
    ch.start();
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let db = "latmesh_chaos";

    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let spool = dir.path().join("spool");
    let mut coord = Command::new(bin("latmesh"));
    coord
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--clickhouse-url",
            &ch.url(),
            "--clickhouse-db",
            db,
            "--spool-dir",
        ])
        .arg(&spool);
    let (_coord, url) = spawn_until_line(
        "coordinator",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &log("coord"),
    );
    let mut agents = Vec::new();
    for region in ["us-east", "eu-west"] {
        let mut a = Command::new(bin("latmesh-agent"));
        a.args([
            "--coordinator",
            &url,
            "--region",
            region,
            "--emulate-region",
            "--agent-id",
            &format!("{region}-ch"),
            "--exit-after",
            "1",
        ]);
        agents.push(spawn(region, a, &log(region)));
    }
    let campaign = latmesh_cli::cmd::demo::demo_rounds_only()
        .replace("{sim}", sim_url.trim_start_matches("http://"))
        .replace("count = 12 ", "count = 6 ")
        .replace(
            "regions = [\"us-east\", \"eu-west\", \"ap-southeast\"]",
            "regions = [\"us-east\", \"eu-west\"]",
        );
    let file = dir.path().join("campaign.toml");
    std::fs::write(&file, campaign).unwrap();
    let json = dir.path().join("summary.json");
    // The coordinator has created its tables; then ClickHouse goes away, the campaign starts,
    // and ClickHouse comes back while it runs.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(log("coord"))
        .unwrap_or_default()
        .contains("migrations applied")
    {
        assert!(
            Instant::now() < deadline,
            "the coordinator never migrated ClickHouse"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ch.stop();
    let mut launch = Command::new(bin("latmesh"));
    launch
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &url, "--json"])
        .arg(&json);
    let launch = launch.spawn().unwrap();
    std::thread::sleep(Duration::from_secs(8));
    ch.start();

    let out = launch.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "launch failed; see {}",
        log("coord").display()
    );
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let campaign_id = summary.campaign_id.clone();

    // The spool drains once ClickHouse is back: verify until it says 0 lost, 0 duplicated.
    let deadline = Instant::now() + Duration::from_secs(90);
    let verify = loop {
        let out = latmesh(&[
            "campaign",
            "verify",
            &campaign_id,
            "--clickhouse-url",
            &ch.url(),
            "--clickhouse-db",
            db,
        ]);
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "verify never reached 0/0:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    assert!(verify.contains(": 0 lost, 0 duplicated"), "{verify}");
    let coord_log = std::fs::read_to_string(log("coord")).unwrap();
    assert!(
        coord_log.contains("results stay in the spool"),
        "ClickHouse was never seen down:\n{coord_log}"
    );

    // The matrix from ClickHouse alone equals the coordinator's in-memory matrix.
    let out = latmesh(&[
        "query",
        "matrix",
        "--campaign",
        &campaign_id,
        "--clickhouse-url",
        &ch.url(),
        "--clickhouse-db",
        db,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Summary = serde_json::from_slice(&out.stdout).unwrap();
    assert!(stored.complete);
    for cell in &summary.cells {
        let other = stored
            .cell(&cell.region, &cell.provider, &cell.scenario)
            .unwrap_or_else(|| {
                panic!(
                    "no stored cell {} {} {}",
                    cell.region, cell.provider, cell.scenario
                )
            });
        assert_eq!(
            (other.attempts, other.samples),
            (cell.attempts, cell.samples),
            "{cell:?}"
        );
        assert_eq!(
            other.ttft, cell.ttft,
            "{} {} {}",
            cell.region, cell.provider, cell.scenario
        );
        assert_eq!(
            other.e2e, cell.e2e,
            "{} {} {}",
            cell.region, cell.provider, cell.scenario
        );
        assert_eq!(other.tpot_p50_ms, cell.tpot_p50_ms);
        assert_eq!(other.outcomes, cell.outcomes);
    }
    for mut a in agents {
        assert!(a.child.wait().unwrap().success(), "{} failed", a.name);
    }
}

#[test]
fn a_coordinator_restarted_before_clickhouse_is_back_still_stores_its_campaigns() {
    let ch = PrivateClickhouse::new();
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let db = "latmesh_restart";
    let spool = dir.path().join("spool");
    let serve = |name: &str| {
        let mut coord = Command::new(bin("latmesh"));
        coord
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--clickhouse-url",
                &ch.url(),
                "--clickhouse-db",
                db,
                "--spool-dir",
            ])
            .arg(&spool);
        spawn_until_line(
            name,
            coord,
            "listening on ",
            Duration::from_secs(20),
            &log(name),
        )
    };

    // ClickHouse is down for the whole campaign.
    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let (coord, url) = serve("coord-1");
    let mut a = Command::new(bin("latmesh-agent"));
    a.args([
        "--coordinator",
        &url,
        "--region",
        "us-east",
        "--emulate-region",
        "--agent-id",
        "us-east-r",
        "--exit-after",
        "1",
    ]);
    let _agent = spawn("agent", a, &log("agent"));
    let campaign = latmesh_cli::cmd::demo::demo_rounds_only()
        .replace("{sim}", sim_url.trim_start_matches("http://"))
        .replace("count = 12 ", "count = 2 ")
        .replace(
            "regions = [\"us-east\", \"eu-west\", \"ap-southeast\"]",
            "regions = [\"us-east\"]",
        );
    let file = dir.path().join("campaign.toml");
    std::fs::write(&file, campaign).unwrap();
    let json = dir.path().join("summary.json");
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &url, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();

    // The coordinator goes away with everything still in its spool; ClickHouse comes back;
    // a new coordinator on the same spool stores the batches and the campaign's own rows.
    drop(coord);
    ch.start();
    let (_coord2, _) = serve("coord-2");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = latmesh(&[
            "campaign",
            "verify",
            &summary.campaign_id,
            "--clickhouse-url",
            &ch.url(),
            "--clickhouse-db",
            db,
        ]);
        if out.status.success() {
            assert!(String::from_utf8_lossy(&out.stdout).contains(": 0 lost, 0 duplicated"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never verified: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let out = latmesh(&[
        "query",
        "matrix",
        "--campaign",
        &summary.campaign_id,
        "--clickhouse-url",
        &ch.url(),
        "--clickhouse-db",
        db,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Summary = serde_json::from_slice(&out.stdout).unwrap();
    let cell = |s: &Summary| {
        s.cell("us-east", "fast-lane", "chat-short")
            .cloned()
            .unwrap()
    };
    assert_eq!(cell(&stored).ttft, cell(&summary).ttft);
    assert_eq!(cell(&stored).attempts, 2);
}
