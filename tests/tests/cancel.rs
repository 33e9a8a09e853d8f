//! `latmesh campaign cancel`, heartbeats and dead-agent detection, with real processes on
//! loopback: `latmesh-sim` (a slow provider and a quick one), `latmesh serve`, agents, the CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use latmesh_proto::pb;
use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::stack::Stack;
use latmesh_testkit::{Proc, TcpProxy, bin, spawn, wait_exit};

/// Agents here send a heartbeat every second (coordinator: silent after 3 s).
const HEARTBEAT_S: &str = "1";

struct Setup {
    stack: Stack,
}

impl Setup {
    fn log(&self, name: &str) -> PathBuf {
        self.stack.log(name)
    }

    /// `slow`: 3 s to the first token; `quick`: 50 ms.
    fn start() -> Setup {
        let profiles = vec![
            ProviderProfile {
                output_tokens_min: 20,
                output_tokens_max: 30,
                ..ProviderProfile::fixed("slow", 3_000_000, 10_000)
            },
            ProviderProfile {
                output_tokens_min: 20,
                output_tokens_max: 30,
                ..ProviderProfile::fixed("quick", 50_000, 5_000)
            },
        ];
        Setup {
            stack: Stack::start(&profiles),
        }
    }

    fn agent(&self, id: &str, region: &str, coordinator: &str) -> Proc {
        let mut a = self.stack.agent_command(id, region, coordinator);
        a.args(["--exit-after", "1"])
            .env("LATMESH_AGENT_HEARTBEAT_S", HEARTBEAT_S);
        spawn(&format!("agent {id}"), a, &self.log(&format!("agent-{id}")))
    }

    /// A campaign of `rounds` rounds over both providers in `regions`: slots every 0.5 s.
    fn campaign(&self, regions: &[&str], rounds: u32) -> PathBuf {
        let regions: Vec<String> = regions.iter().map(|r| format!("{r:?}")).collect();
        let text = format!(
            r#"
[campaign]
name = "cancel"
regions = [{}]
[rounds]
count = {rounds}
interval_s = 1.0
gap_ms = 500
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 32
timeout_total_s = 60
[[providers]]
name = "slow"
base_url = "http://{sim}/slow/v1"
model_id = "{model}"
[[providers]]
name = "quick"
base_url = "http://{sim}/quick/v1"
model_id = "{model}"
"#,
            regions.join(", "),
            sim = self.stack.sim_addr,
            model = latmesh_sim::profile::DEFAULT_MODEL_ID,
        );
        let file = self.stack.dir.path().join("campaign.toml");
        std::fs::write(&file, text).unwrap();
        file
    }

    /// `latmesh campaign launch FILE --json JSON` in the background.
    fn launch(&self, file: &Path, json: &Path) -> Proc {
        let mut l = Command::new(bin("latmesh"));
        l.args(["campaign", "launch"])
            .arg(file)
            .args([
                "--coordinator",
                &self.stack.coord_url,
                "--start-delay-s",
                "1",
            ])
            .arg("--json")
            .arg(json);
        spawn("campaign launch", l, &self.log("launch"))
    }

    fn agents(&self) -> Vec<pb::AgentInfo> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut c = latmesh_cli::watch::connect(&self.stack.coord_url)
                .await
                .unwrap();
            c.list_agents(pb::ListAgentsRequest {})
                .await
                .unwrap()
                .into_inner()
                .agents
        })
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("latmesh"))
            .args(args)
            .args(["--coordinator", &self.stack.coord_url])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Waits until `f` holds for the agents the coordinator lists.
    fn wait_agents(&self, what: &str, timeout: Duration, f: impl Fn(&[pb::AgentInfo]) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let agents = self.agents();
            if f(&agents) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {agents:#?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn cancel_stops_every_agent_promptly_and_keeps_what_was_measured() {
    let s = Setup::start();
    let mut agents = vec![
        s.agent("us-east-1", "us-east", &s.stack.coord_url),
        s.agent("eu-west-1", "eu-west", &s.stack.coord_url),
    ];
    let file = s.campaign(&["us-east", "eu-west"], 200);
    let json = s.stack.dir.path().join("summary.json");
    let mut launch = s.launch(&file, &json);

    // Wait until both agents run it with slow probes in flight.
    s.wait_agents("agents probing", Duration::from_secs(30), |a| {
        a.len() == 2
            && a.iter()
                .all(|a| !a.campaign_id.is_empty() && a.in_flight > 0)
    });
    let campaign_id = s.agents()[0].campaign_id.clone();
    std::thread::sleep(Duration::from_secs(3));

    let cancelled_at = Instant::now();
    let out = s.cli(&["campaign", "cancel", &campaign_id]);
    let took = cancelled_at.elapsed();
    assert!(out.status.success(), "cancel failed: {}", text(&out));
    assert!(
        text(&out).contains(&format!("campaign {campaign_id} cancelled:")),
        "{}",
        text(&out)
    );
    // Grace for in-flight attempts (2 s) + sealing and acking (about 1 s).
    assert!(took < Duration::from_secs(8), "cancel took {took:?}");
    let status = wait_exit(&mut launch, Duration::from_secs(10));
    assert!(
        !status.success(),
        "launch exits non-zero for a cancelled campaign"
    );
    let launch_log = std::fs::read_to_string(s.log("launch")).unwrap();
    assert!(launch_log.contains("CANCELLED"), "{launch_log}");
    for a in &mut agents {
        let status = wait_exit(a, Duration::from_secs(5));
        assert!(status.success(), "{} exited with {status}", a.name);
    }

    let text_json = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text_json).unwrap();
    assert_eq!(v["cancelled"], serde_json::Value::Bool(true), "{text_json}");
    let summary: Summary = serde_json::from_str(&text_json).unwrap();
    assert!(!summary.complete);
    let slots_per_agent = 200 * 2;
    let mut records = 0;
    for a in &summary.agents {
        // What was measured arrived; the rest is counted as not run.
        assert!(a.records >= 4, "{a:?}");
        assert_eq!(a.records + a.skipped, slots_per_agent, "{a:?}");
        assert!(a.skipped > slots_per_agent / 2, "{a:?}");
        records += a.records;
    }
    let attempts: u64 = summary
        .cells
        .iter()
        .filter(|c| c.region != "ALL")
        .map(|c| c.attempts)
        .sum();
    assert_eq!(attempts, records, "every record kept is in the matrix");
    let quick = summary.cell("us-east", "quick", "chat").unwrap();
    assert!(quick.samples > 0, "{quick:?}");
    // Slow attempts in flight at the cancel were aborted after the grace and recorded.
    let slow = summary.cell("ALL", "slow", "chat").unwrap();
    assert!(
        slow.outcomes.get("cancelled").copied().unwrap_or(0) > 0,
        "{slow:?}"
    );

    // Cancelling it again, or an unknown campaign, is a clear error.
    let again = s.cli(&["campaign", "cancel", &campaign_id]);
    assert!(!again.status.success());
    assert!(
        text(&again).contains("already finished (cancelled)"),
        "{}",
        text(&again)
    );
    let unknown = s.cli(&["campaign", "cancel", "no-such-campaign"]);
    assert!(!unknown.status.success());
    assert!(
        text(&unknown).contains("unknown campaign"),
        "{}",
        text(&unknown)
    );
}

#[test]
fn dead_and_silent_agents_are_shown_disconnected_with_what_they_had_in_flight() {
    let s = Setup::start();
    let coord_addr: std::net::SocketAddr = s
        .stack
        .coord_url
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = TcpProxy::start(coord_addr);
    let mut killed = s.agent("killed-1", "us-east", &s.stack.coord_url);
    let _silent = s.agent("silent-1", "us-east", &proxy.url());
    // Both in the campaign: launch targets the agents connected when it starts, and it
    // starts as soon as us-east has one (the other, behind the proxy, may be a moment late).
    s.wait_agents("both agents connected", Duration::from_secs(30), |a| {
        a.len() == 2 && a.iter().all(|a| a.connected)
    });
    let file = s.campaign(&["us-east"], 100);
    let json = s.stack.dir.path().join("summary.json");
    let _launch = s.launch(&file, &json);

    // Heartbeats report the slow probes in flight.
    s.wait_agents("in-flight counts", Duration::from_secs(30), |a| {
        a.len() == 2 && a.iter().all(|a| a.connected && a.in_flight > 0)
    });
    let out = s.cli(&["agents"]);
    assert!(out.status.success(), "{}", text(&out));
    let listing = text(&out);
    assert!(listing.contains("IN-FLIGHT"), "{listing}");
    assert!(listing.contains("running cancel-"), "{listing}");

    // kill -9 one agent; stall the other's network.
    killed.child.kill().unwrap();
    let _ = killed.child.wait();
    proxy.hold(true);
    let held_at = Instant::now();
    s.wait_agents("agents marked disconnected", Duration::from_secs(10), |a| {
        a.iter().all(|a| !a.connected)
    });
    let after = held_at.elapsed();
    assert!(
        after >= Duration::from_secs(2) && after < Duration::from_secs(7),
        "a silent agent is marked after 3 heartbeat periods (3 s), not {after:?}"
    );
    let agents = s.agents();
    let by_id = |id: &str| agents.iter().find(|a| a.agent_id == id).unwrap().clone();
    let silent = by_id("silent-1");
    assert!(
        silent.disconnect_reason.contains("no heartbeat"),
        "{silent:?}"
    );
    assert!(silent.in_flight > 0, "{silent:?}");
    assert!(silent.disconnected_since_coord_unix_us > 0);
    let dead = by_id("killed-1");
    assert_eq!(dead.disconnect_reason, "session closed", "{dead:?}");
    assert!(dead.in_flight > 0, "{dead:?}");

    let out = s.cli(&["agents"]);
    let listing = text(&out);
    assert!(listing.contains("killed-1 disconnected since"), "{listing}");
    assert!(
        listing.contains("silent-1 disconnected since") && listing.contains("no heartbeat"),
        "{listing}"
    );

    // The stalled agent speaks again once its network does: connected again.
    proxy.hold(false);
    s.wait_agents("silent agent back", Duration::from_secs(10), |a| {
        a.iter().any(|a| a.agent_id == "silent-1" && a.connected)
    });
}

/// A campaign of 1,000,000 rounds (11.6 days, launched with --allow-long) cancelled a few
/// seconds in: the agents count the 2,000,000 slots they do not run at once instead of
/// visiting each (which kept their one thread from its heartbeats: marked disconnected), so
/// the cancel completes with exact counts and the agents stay connected throughout.
#[test]
fn cancelling_a_million_round_campaign_keeps_the_agents_connected_and_counts_exactly() {
    let s = Setup::start();
    // Heartbeats every second: an agent busy for 3 s is marked disconnected (walking the
    // slots one by one took about 25 s here). They stay after the campaign (no
    // --exit-after), so "connected" is about the cancel only.
    let spawn_agent = |id: &str, region: &str| {
        let mut a = s.stack.agent_command(id, region, &s.stack.coord_url);
        a.env("LATMESH_AGENT_HEARTBEAT_S", HEARTBEAT_S);
        spawn(&format!("agent {id}"), a, &s.log(&format!("agent-{id}")))
    };
    let _agents = [
        spawn_agent("us-east-1", "us-east"),
        spawn_agent("eu-west-1", "eu-west"),
    ];
    let file = s.campaign(&["us-east", "eu-west"], 1_000_000);
    let json = s.stack.dir.path().join("summary.json");

    // Without --allow-long the launch is refused before anything is sent.
    let mut l = Command::new(bin("latmesh"));
    l.args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &s.stack.coord_url]);
    let mut refused = spawn("campaign launch (refused)", l, &s.log("refused"));
    assert!(!wait_exit(&mut refused, Duration::from_secs(30)).success());
    let said = std::fs::read_to_string(s.log("refused")).unwrap();
    assert!(
        said.contains("rounds.count = 1000000 × rounds.interval_s = 1 s makes it long"),
        "{said}"
    );

    let mut l = Command::new(bin("latmesh"));
    l.args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &s.stack.coord_url, "--start-delay-s", "1"])
        .arg("--allow-long")
        .arg("--json")
        .arg(&json);
    let mut launch = spawn("campaign launch", l, &s.log("launch"));
    s.wait_agents("agents probing", Duration::from_secs(30), |a| {
        a.len() == 2
            && a.iter()
                .all(|a| !a.campaign_id.is_empty() && a.in_flight > 0)
    });
    let campaign_id = s.agents()[0].campaign_id.clone();
    let launch_log = std::fs::read_to_string(s.log("launch")).unwrap();
    assert!(
        launch_log.contains("planned duration: 11.6 days"),
        "{launch_log}"
    );

    let out = s.cli(&["campaign", "cancel", &campaign_id]);
    assert!(out.status.success(), "cancel failed: {}", text(&out));
    // Connected right after the cancel, and never marked silent on the way.
    assert!(s.agents().iter().all(|a| a.connected), "{:#?}", s.agents());
    let coordinator_log = std::fs::read_to_string(s.log("coordinator")).unwrap();
    assert!(
        !coordinator_log.contains("marked disconnected"),
        "{coordinator_log}"
    );
    let _ = wait_exit(&mut launch, Duration::from_secs(30));
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(summary.cancelled);
    for a in &summary.agents {
        assert!(a.records >= 1, "{a:?}");
        assert_eq!(a.records + a.skipped, 2_000_000, "{a:?}");
    }
}
