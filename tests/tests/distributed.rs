//! The whole distributed path with real processes on loopback: `latmesh-sim serve`,
//! `latmesh serve`, three `latmesh-agent`s in three regions, and `latmesh campaign launch`.

use std::process::Command;
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_testkit::{bin, spawn, spawn_until_line};

const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-southeast"];

#[test]
fn campaign_across_three_agent_processes() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));

    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "latmesh-sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let sim_addr = sim_url.trim_start_matches("http://").to_string();

    let mut coord = Command::new(bin("latmesh"));
    coord.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_coord, coord_url) = spawn_until_line(
        "latmesh serve",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &log("coordinator"),
    );

    let mut agents = Vec::new();
    for region in REGIONS {
        let mut a = Command::new(bin("latmesh-agent"));
        a.args([
            "--coordinator",
            &coord_url,
            "--region",
            region,
            "--emulate-region",
            "--agent-id",
            &format!("{region}-1"),
            "--exit-after",
            "1",
        ]);
        agents.push(spawn(
            &format!("agent {region}"),
            a,
            &log(&format!("agent-{region}")),
        ));
    }

    let campaign = latmesh_cli::cmd::demo::demo_rounds_only()
        .replace("{sim}", &sim_addr)
        .replace("count = 12 ", "count = 3 ");
    let file = dir.path().join("campaign.toml");
    std::fs::write(&file, campaign).unwrap();
    let json = dir.path().join("summary.json");
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &coord_url, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "launch failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );

    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary.regions, REGIONS);
    assert_eq!(summary.providers.len(), 9);
    // Every agent made every probe of every round, and the coordinator counted each once.
    for a in &summary.agents {
        assert_eq!(a.records, 3 * 9 * 2, "agent {}", a.agent_id);
    }
    for c in summary.cells.iter().filter(|c| c.region != "ALL") {
        assert_eq!(c.attempts, 3, "{} {} {}", c.region, c.provider, c.scenario);
    }
    // The terminal matrix shows the same numbers as the JSON.
    let fast = summary.cell("us-east", "fast-lane", "chat-short").unwrap();
    let ttft = fast.ttft.unwrap();
    // Three samples support no percentile (P50 needs 6): every one is marked, and the rule
    // is under the table.
    let (text, marked) = ttft.text(&summary.percentiles, |v| format!("{v:.0}"));
    assert!(marked && text.starts_with('~'), "{text}");
    assert!(stdout.contains(&text), "{text} not in {stdout}");
    assert!(
        stdout.contains("chat-short: TTFT ms P50/P90/P95/P99"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&latmesh_results::percentiles::legend()),
        "{stdout}"
    );

    // Agents exit by themselves once their campaign is acked.
    let deadline = Instant::now() + Duration::from_secs(15);
    for a in &mut agents {
        loop {
            if let Some(status) = a.child.try_wait().unwrap() {
                assert!(status.success(), "{} exited with {status}", a.name);
                break;
            }
            assert!(Instant::now() < deadline, "{} did not exit", a.name);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_bad_campaign_file_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let text = latmesh_cli::cmd::demo::DEMO_CAMPAIGN.replace("max_tokens = 48", "max_tokens = -3");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "validate"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_tokens"), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        latmesh_cli::cmd::demo::DEMO_CAMPAIGN.replace("{sim}", "127.0.0.1:9"),
    )
    .unwrap();
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "validate"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("11 providers, 6 scenarios"));

    // A summary path that cannot be written is refused before anything is launched (the
    // coordinator is never contacted: nothing listens on port 9).
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&good)
        .args(["--coordinator", "http://127.0.0.1:9", "--json"])
        .arg(blocker.join("summary.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--json: cannot create"), "{err}");
    assert!(
        !err.contains("coordinator"),
        "checked before connecting: {err}"
    );
}

#[test]
fn an_agent_started_before_its_coordinator_connects_once_it_is_up() {
    let dir = tempfile::tempdir().unwrap();
    let port = latmesh_testkit::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut a = Command::new(bin("latmesh-agent"));
    a.args([
        "--coordinator",
        &url,
        "--region",
        "eu-west",
        "--emulate-region",
        "--agent-id",
        "early-1",
    ]);
    let _agent = spawn("agent", a, &dir.path().join("agent.log"));
    std::thread::sleep(Duration::from_millis(1500));

    let mut coord = Command::new(bin("latmesh"));
    coord.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    let (_coord, _) = spawn_until_line(
        "latmesh serve",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &dir.path().join("coord.log"),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = Command::new(bin("latmesh"))
            .args(["agents", "--coordinator", &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("early-1") && text.contains("eu-west") && text.contains(" connected") {
            break;
        }
        assert!(Instant::now() < deadline, "agent never connected: {text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap();
    assert!(
        log.contains("cannot reach coordinator"),
        "the agent should have logged its retries: {log}"
    );
}
