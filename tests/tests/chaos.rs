//! Chaos tests (issue 6) with separate processes on loopback: `latmesh-sim`, a coordinator
//! storing into the test ClickHouse (through its spool), two agents with on-disk spools, and a
//! TCP proxy between one agent and the coordinator that can stall or cut the connection.
//!
//! - An agent killed with SIGKILL mid-campaign, while some of its batches are acked and some
//!   are not, restarted with the same id and spool directory: it resends what it spooled and
//!   resumes at the right round. Nothing it spooled is lost, no slot is measured twice, and
//!   every slot is either delivered or reported as skipped.
//! - An agent whose connection is cut mid-campaign (with batches in flight): it reconnects and
//!   resends; the campaign is complete.
//! - An agent killed with SIGKILL in an open-loop campaign and restarted: no arrival is sent
//!   twice or in a late burst; what passed while it was down is reported as skipped.
//!
//! Each ends with `latmesh campaign verify` at 0 lost, 0 duplicated, and a canary API key (the
//! providers' `api_key_env` value in the agents' environment) found in no file the run wrote
//! (logs, agent spools, the coordinator's spool, the JSON summary, the CLI's output) and in no
//! table of the run's ClickHouse database.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_testkit::{Proc, TcpProxy, bin, files_containing, spawn_until_line};

const ROUNDS: u32 = 8;
/// Slots of one agent: rounds × 9 providers × 2 scenarios, one record each (no retries, one
/// turn).
const SLOTS: u64 = ROUNDS as u64 * 9 * 2;
const KEY_ENV: &str = "LATMESH_CHAOS_API_KEY";

/// The chaos tests share two cores with everything else: one at a time keeps the rounds on
/// time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Simulator, coordinator (ClickHouse + spool), ClickHouse database and canary of one test.
struct Env {
    dir: tempfile::TempDir,
    _sim: Proc,
    sim_addr: String,
    _coord: Proc,
    coord_url: String,
    ch_url: String,
    db: String,
    client: clickhouse::Client,
    canary: String,
    rt: tokio::runtime::Runtime,
}

impl Env {
    fn start(test: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let (client, db) = latmesh_testkit::fresh_db(test);
        let ch_url = latmesh_testkit::clickhouse_url().to_string();
        let canary = format!("sk-latmesh-canary-{:016x}", rand::random::<u64>());
        let mut sim = Command::new(bin("latmesh-sim"));
        sim.args(["serve", "--listen", "127.0.0.1:0"]);
        let (sim, sim_url) = spawn_until_line(
            "sim",
            sim,
            "listening on ",
            Duration::from_secs(20),
            &dir.path().join("sim.log"),
        );
        let mut coord = Command::new(bin("latmesh"));
        coord
            .args(["serve", "--listen", "127.0.0.1:0", "--clickhouse-url"])
            .arg(&ch_url)
            .args(["--clickhouse-db", &db, "--spool-dir"])
            .arg(dir.path().join("coord-spool"));
        let (coord, coord_url) = spawn_until_line(
            "coordinator",
            coord,
            "listening on ",
            Duration::from_secs(30),
            &dir.path().join("coord.log"),
        );
        Env {
            sim_addr: sim_url.trim_start_matches("http://").to_string(),
            dir,
            _sim: sim,
            _coord: coord,
            coord_url,
            ch_url,
            db,
            client,
            canary,
            rt: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn coord_addr(&self) -> std::net::SocketAddr {
        self.coord_url
            .trim_start_matches("http://")
            .parse()
            .expect("coordinator address")
    }

    /// An agent with the canary key in its environment, its own spool directory, exiting
    /// after one campaign; its log is `<log>.log` (appended to across restarts).
    fn agent(&self, id: &str, region: &str, url: &str, log: &str) -> Proc {
        let mut a = Command::new(bin("latmesh-agent"));
        a.args(["--coordinator", url, "--region", region, "--agent-id", id])
            .arg("--emulate-region")
            .args(["--exit-after", "1", "--spool-dir"])
            .arg(self.path(&format!("spool-{id}")))
            .env(KEY_ENV, &self.canary);
        let path = self.path(&format!("{log}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        a.stdout(file.try_clone().unwrap()).stderr(file);
        Proc {
            child: a.spawn().expect("start latmesh-agent"),
            name: format!("agent {id}"),
        }
    }

    /// Starts `campaign launch` of the demo campaign (two regions, [`ROUNDS`] rounds, every
    /// provider keyed by [`KEY_ENV`]) in the background; output goes to `launch.out`.
    fn launch(&self) -> std::process::Child {
        latmesh_testkit::stack::launch_demo_rounds(
            self.dir.path(),
            &self.sim_addr,
            &self.coord_url,
            ROUNDS,
            KEY_ENV,
        )
    }

    /// Starts `campaign launch` of the campaign `toml` (`{sim}` replaced by the simulator's
    /// address) in the background; output goes to `launch.out`.
    fn launch_toml(&self, toml: &str) -> std::process::Child {
        let file = self.path("campaign.toml");
        std::fs::write(&file, toml.replace("{sim}", &self.sim_addr)).unwrap();
        let out = std::fs::File::create(self.path("launch.out")).unwrap();
        Command::new(bin("latmesh"))
            .args(["campaign", "launch"])
            .arg(&file)
            .args(["--coordinator", &self.coord_url, "--json"])
            .arg(self.path("summary.json"))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap()
    }

    /// Waits for the launch to end and reads its summary.
    fn summary(&self, mut launch: std::process::Child) -> (bool, Summary) {
        let deadline = Instant::now() + Duration::from_secs(180);
        let status = loop {
            if let Some(s) = launch.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "campaign launch never ended");
            std::thread::sleep(Duration::from_millis(200));
        };
        let text = std::fs::read_to_string(self.path("summary.json")).unwrap_or_else(|e| {
            panic!(
                "no summary ({e}); launch said:\n{}",
                std::fs::read_to_string(self.path("launch.out")).unwrap_or_default()
            )
        });
        (status.success(), serde_json::from_str(&text).unwrap())
    }

    /// `latmesh campaign verify` until it passes (the spool drains into ClickHouse); returns
    /// its output.
    fn verify(&self, campaign_id: &str) -> String {
        let text = latmesh_testkit::verify_until_clean(&self.ch_url, &self.db, campaign_id);
        std::fs::write(self.path("verify.out"), &text).unwrap();
        text
    }

    /// A query's result as TSV rows.
    fn tsv(&self, sql: &str) -> Vec<Vec<String>> {
        latmesh_testkit::tsv(&self.rt, &self.client, sql)
    }

    /// (seq, round, slot) of every `requests` row of `agent`.
    fn request_rows(&self, campaign_id: &str, agent: &str) -> Vec<(u64, u32, u32)> {
        self.tsv(&format!(
            "SELECT seq, round, slot FROM {}.requests WHERE campaign_id = '{campaign_id}' AND agent_id = '{agent}'",
            self.db
        ))
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap(), r[2].parse().unwrap()))
        .collect()
    }

    /// The canary is in no file under the test's directory (logs, spools, summary, CLI
    /// output) and in no table of the database; and the agents did have it.
    fn assert_canary_nowhere(&self, agent_logs: &[&str]) {
        for log in agent_logs {
            let text = std::fs::read_to_string(self.path(&format!("{log}.log"))).unwrap();
            assert!(
                !text.contains("is not set on this agent"),
                "the agent did not get the canary key: {text}"
            );
        }
        let files = files_containing(self.dir.path(), &self.canary);
        assert!(files.is_empty(), "the canary API key leaked into {files:?}");
        let tables = self.tsv(&format!(
            "SELECT name FROM system.tables WHERE database = '{}'",
            self.db
        ));
        let names: Vec<&str> = tables.iter().map(|r| r[0].as_str()).collect();
        assert!(names.contains(&"requests"), "tables: {names:?}");
        for name in names {
            let rows = self.tsv(&format!("SELECT * FROM {}.`{name}`", self.db));
            if name == "requests" || name == "histograms" || name == "campaigns" {
                assert!(!rows.is_empty(), "{name} is empty: nothing was searched");
            }
            let hit = rows.iter().flatten().find(|v| v.contains(&self.canary));
            assert!(hit.is_none(), "the canary API key is in table {name}");
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let (client, db) = (self.client.clone(), self.db.clone());
            self.rt
                .block_on(async move { latmesh_testkit::drop_db(&client, &db).await });
        }
    }
}

/// Waits until `dir` (an agent spool) holds at least `n` batch files; returns them.
fn wait_for_spooled(dir: &Path, n: usize, what: &str) -> Vec<latmesh_proto::pb::ResultBatch> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let batches: Vec<_> = latmesh_agent::spool::read_batches(dir)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.expect("a whole batch file").1)
            .collect();
        if batches.len() >= n {
            return batches;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: only {} batches spooled",
            batches.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn agent_summary<'a>(s: &'a Summary, id: &str) -> &'a latmesh_results::summary::AgentSummary {
    s.agents
        .iter()
        .find(|a| a.agent_id == id)
        .unwrap_or_else(|| panic!("no agent {id} in {:?}", s.agents))
}

#[test]
fn an_agent_killed_with_sigkill_and_restarted_loses_nothing_it_spooled() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::start("chaos_kill");
    let proxy = TcpProxy::start(env.coord_addr());
    let (victim, other) = ("us-east-k", "eu-west-k");
    let mut agent = env.agent(victim, "us-east", &proxy.url(), "agent-us-east");
    let _other = env.agent(other, "eu-west", &env.coord_url, "agent-eu-west");
    let launch = env.launch();

    // A few rounds in (start delay 2 s, rounds every 2.5 s), batches are being acked. Then
    // the coordinator's acks stop reaching the agent (and its batches stop reaching the
    // coordinator); once two more batches are sealed and spooled, the agent is killed.
    std::thread::sleep(Duration::from_secs(7));
    proxy.hold(true);
    let spool = env.path(&format!("spool-{victim}"));
    wait_for_spooled(&spool, 2, "before the kill");
    agent.child.kill().unwrap(); // SIGKILL
    agent.child.wait().unwrap();
    let spooled = wait_for_spooled(&spool, 2, "after the kill");
    let seqs: BTreeSet<u64> = spooled.iter().map(|b| b.seq).collect();
    assert!(
        !seqs.contains(&1),
        "batch 1 should have been acked (and deleted) before the kill: {seqs:?}"
    );
    let spooled_records: usize = spooled.iter().map(|b| b.records.len()).sum();
    assert!(spooled_records > 0);
    eprintln!("killed with batches {seqs:?} ({spooled_records} records) spooled and unacked");
    let leaked = files_containing(&spool, &env.canary);
    assert!(leaked.is_empty(), "the canary is in the spool: {leaked:?}");

    // Dead for a while (its slots pass), then back with the same id and spool directory.
    proxy.cut();
    proxy.hold(false);
    std::thread::sleep(Duration::from_secs(3));
    let mut agent = env.agent(victim, "us-east", &proxy.url(), "agent-us-east");

    let (complete, summary) = env.summary(launch);
    assert!(!complete, "the slots of the dead time are a real gap");
    let a = agent_summary(&summary, victim);
    eprintln!(
        "restarted agent: {} records delivered, {} slots skipped",
        a.records, a.skipped
    );
    assert!(a.skipped > 0 && a.records > 0, "{a:?}");
    assert_eq!(
        a.records + a.skipped,
        SLOTS,
        "every slot is delivered or reported skipped, none twice: {a:?}"
    );
    let b = agent_summary(&summary, other);
    assert_eq!((b.records, b.skipped), (SLOTS, 0), "{b:?}");
    assert!(
        latmesh_testkit::wait_exit(&mut agent, Duration::from_secs(30)).success(),
        "the restarted agent exits once its campaign is acked"
    );
    let log = std::fs::read_to_string(env.path("agent-us-east.log")).unwrap();
    assert!(
        log.contains("its unacked batches are sent first"),
        "the restarted agent found its spool: {log}"
    );
    assert!(log.contains("resuming a campaign"), "{log}");

    let verify = env.verify(&summary.campaign_id);
    assert!(verify.contains(victim), "{verify}");

    // Every record spooled before the kill is in ClickHouse, under its seq; no slot was
    // measured twice; and the restarted agent went on to the last round.
    let rows = env.request_rows(&summary.campaign_id, victim);
    assert_eq!(rows.len() as u64, a.records);
    let mut stored: BTreeMap<u64, BTreeSet<(u32, u32)>> = BTreeMap::new();
    for &(seq, round, slot) in &rows {
        stored.entry(seq).or_default().insert((round, slot));
    }
    for b in &spooled {
        let want: BTreeSet<(u32, u32)> = b.records.iter().map(|r| (r.round, r.slot)).collect();
        assert_eq!(
            stored.get(&b.seq),
            Some(&want),
            "spooled batch {} is not (all) in ClickHouse",
            b.seq
        );
    }
    let slots: BTreeSet<(u32, u32)> = rows.iter().map(|&(_, r, s)| (r, s)).collect();
    assert_eq!(slots.len(), rows.len(), "a slot was measured twice");
    assert!(slots.iter().any(|&(r, _)| r == ROUNDS - 1), "never resumed");

    env.assert_canary_nowhere(&["agent-us-east", "agent-eu-west"]);
}

#[test]
fn an_agent_whose_connection_is_cut_reconnects_and_resends() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::start("chaos_cut");
    let proxy = TcpProxy::start(env.coord_addr());
    let (cut, other) = ("us-east-c", "eu-west-c");
    let mut agent = env.agent(cut, "us-east", &proxy.url(), "agent-us-east");
    let _other = env.agent(other, "eu-west", &env.coord_url, "agent-eu-west");
    let launch = env.launch();

    // Mid-campaign the network stalls (batches sent into it are neither delivered nor
    // acked), then the connection drops.
    std::thread::sleep(Duration::from_secs(7));
    proxy.hold(true);
    wait_for_spooled(&env.path(&format!("spool-{cut}")), 2, "while stalled");
    proxy.cut();
    proxy.hold(false);

    let (complete, summary) = env.summary(launch);
    assert!(complete, "{summary:?}");
    for id in [cut, other] {
        let a = agent_summary(&summary, id);
        assert_eq!((a.records, a.skipped), (SLOTS, 0), "{a:?}");
    }
    assert!(latmesh_testkit::wait_exit(&mut agent, Duration::from_secs(30)).success());
    let log = std::fs::read_to_string(env.path("agent-us-east.log")).unwrap();
    assert!(
        log.matches("connected").count() >= 2,
        "the agent reconnected: {log}"
    );
    env.verify(&summary.campaign_id);
    let rows = env.request_rows(&summary.campaign_id, cut);
    assert_eq!(rows.len() as u64, SLOTS);
    // A clean exit leaves the spool directory empty (removed).
    assert!(!env.path(&format!("spool-{cut}")).exists());

    env.assert_canary_nowhere(&["agent-us-east", "agent-eu-west"]);
}

/// Open loop, two providers at 8 arrivals/s each for 12 s, two regions.
const RATE_CAMPAIGN: &str = r#"
[campaign]
name = "chaos-rate"
seed = 11
regions = ["us-east", "eu-west"]

[[scenarios]]
name = "open"
load = "rate"
prompt_ids = ["short-qa-*"]
max_tokens = 16
[scenarios.rate]
rps = 8
arrivals = "poisson"
duration_s = 12

[[providers]]
name = "fast-lane"
base_url = "http://{sim}/fast-lane/v1"
model_id = "deepseek-v4-flash"

[[providers]]
name = "steady"
base_url = "http://{sim}/steady/v1"
model_id = "deepseek-v4-flash"
"#;

#[test]
fn an_open_loop_agent_killed_and_restarted_sends_no_arrival_twice() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::start("chaos_rate");
    let (victim, other) = ("us-east-r", "eu-west-r");
    let mut agent = env.agent(victim, "us-east", &env.coord_url, "agent-us-east");
    let _other = env.agent(other, "eu-west", &env.coord_url, "agent-eu-west");
    let launch = env.launch_toml(RATE_CAMPAIGN);

    // ~5 s into the phase (start delay 2 s), after a few batches were spooled: killed, then
    // back 3 s later with the same id and spool directory.
    std::thread::sleep(Duration::from_secs(7));
    let journal = env.path(&format!("spool-{victim}")).join("journal");
    let journaled = std::fs::read_dir(&journal)
        .map(|d| d.flatten().any(|e| e.metadata().is_ok_and(|m| m.len() > 0)))
        .unwrap_or(false);
    assert!(
        journaled,
        "nothing journaled in {} before the kill",
        journal.display()
    );
    agent.child.kill().unwrap(); // SIGKILL
    agent.child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let mut agent = env.agent(victim, "us-east", &env.coord_url, "agent-us-east");

    let (complete, summary) = env.summary(launch);
    assert!(!complete, "the arrivals of the dead time are a real gap");
    let a = agent_summary(&summary, victim);
    let b = agent_summary(&summary, other);
    eprintln!(
        "restarted agent: {} records, {} skipped; the other: {} records",
        a.records, a.skipped, b.records
    );
    // Both agents have the same arrivals; the other ran them all, one record each.
    assert_eq!(b.skipped, 0, "{b:?}");
    assert!(a.skipped > 0 && a.records > 0, "{a:?}");
    assert_eq!(
        a.records + a.skipped,
        b.records,
        "every arrival measured once or reported skipped: {a:?}"
    );
    assert!(latmesh_testkit::wait_exit(&mut agent, Duration::from_secs(30)).success());

    let verify = env.verify(&summary.campaign_id);
    assert!(verify.contains(victim), "{verify}");
    let rows = env.tsv(&format!(
        "SELECT provider, slot, sched_lag_us FROM {}.requests WHERE campaign_id = '{}' AND agent_id = '{victim}'",
        env.db, summary.campaign_id
    ));
    assert_eq!(rows.len() as u64, a.records);
    let arrivals: BTreeSet<(&str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(arrivals.len(), rows.len(), "an arrival was sent twice");
    let worst = rows
        .iter()
        .map(|r| r[2].parse::<i64>().unwrap())
        .max()
        .unwrap();
    assert!(worst < 1_100_000, "an arrival was sent {worst} µs late");
}
