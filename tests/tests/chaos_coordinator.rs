//! Chaos test (issue 6): the coordinator killed with SIGKILL mid-campaign and restarted.
//!
//! Separate processes on loopback: `latmesh-sim`, a coordinator on a fixed port storing into
//! the test ClickHouse (spool and state directory in the test's directory), two agents with
//! on-disk spools, and `campaign launch` following the campaign. A few rounds in, the
//! coordinator is killed with SIGKILL; the agents keep measuring (their batches wait in their
//! spools) and retry the connection. The coordinator is restarted with the same directories on
//! the same port: it loads the campaign from its state directory (replaying the batches it had
//! acked), the agents reconnect and resend what was not acked, and the campaign finishes
//! complete: every slot delivered once, none skipped. `campaign launch` says it lost the
//! coordinator, reconnects and prints the summary; `campaign watch` on the restarted
//! coordinator prints the same summary, also after yet another kill -9 and restart of a
//! coordinator whose campaign had finished; `campaign verify` reports 0 lost, 0 duplicated;
//! and the agents' canary API key is in no file the run wrote and no table.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_testkit::{Proc, bin, files_containing, free_port, spawn_until_line};

const ROUNDS: u32 = 8;
/// Slots of one agent: rounds × 9 providers × 2 scenarios, one record each.
const SLOTS: u64 = ROUNDS as u64 * 9 * 2;
const KEY_ENV: &str = "LATMESH_CHAOS_API_KEY";
const AGENTS: [(&str, &str); 2] = [("us-east-r", "us-east"), ("eu-west-r", "eu-west")];

struct Env {
    dir: tempfile::TempDir,
    _sim: Proc,
    sim_addr: String,
    port: u16,
    ch_url: String,
    db: String,
    client: clickhouse::Client,
    canary: String,
    rt: tokio::runtime::Runtime,
}

impl Env {
    fn start() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let (client, db) = latmesh_testkit::fresh_db("chaos_coord");
        let mut sim = Command::new(bin("latmesh-sim"));
        sim.args(["serve", "--listen", "127.0.0.1:0"]);
        let (sim, sim_url) = spawn_until_line(
            "sim",
            sim,
            "listening on ",
            Duration::from_secs(20),
            &dir.path().join("sim.log"),
        );
        Env {
            sim_addr: sim_url.trim_start_matches("http://").to_string(),
            dir,
            _sim: sim,
            port: free_port(),
            ch_url: latmesh_testkit::clickhouse_url().to_string(),
            db,
            client,
            canary: format!("sk-latmesh-canary-{:016x}", rand::random::<u64>()),
            rt: tokio::runtime::Runtime::new().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The coordinator on the test's port with its spool and state directory; log `<log>.log`.
    fn coordinator(&self, log: &str) -> Proc {
        let mut coord = Command::new(bin("latmesh"));
        coord
            .args(["serve", "--listen", &format!("127.0.0.1:{}", self.port)])
            .arg("--clickhouse-url")
            .arg(&self.ch_url)
            .args(["--clickhouse-db", &self.db, "--spool-dir"])
            .arg(self.path("coord-spool"))
            .arg("--state-dir")
            .arg(self.path("coord-state"));
        // The port was free a moment ago (or held by the coordinator just killed): retry a
        // little while it is released.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut cmd = Command::new(coord.get_program());
            cmd.args(coord.get_args());
            let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                spawn_until_line(
                    "coordinator",
                    cmd,
                    "listening on ",
                    Duration::from_secs(30),
                    &self.path(&format!("{log}.log")),
                )
            }));
            match started {
                Ok((proc, _)) => return proc,
                Err(e) if Instant::now() > deadline => std::panic::resume_unwind(e),
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    fn agent(&self, id: &str, region: &str) -> Proc {
        let mut a = Command::new(bin("latmesh-agent"));
        a.args(["--coordinator", &self.url(), "--region", region])
            .arg("--emulate-region")
            .args(["--agent-id", id, "--exit-after", "1", "--spool-dir"])
            .arg(self.path(&format!("spool-{id}")))
            .env(KEY_ENV, &self.canary);
        let file = std::fs::File::create(self.path(&format!("agent-{id}.log"))).unwrap();
        a.stdout(file.try_clone().unwrap()).stderr(file);
        Proc {
            child: a.spawn().expect("start latmesh-agent"),
            name: format!("agent {id}"),
        }
    }

    /// `campaign launch` of the demo campaign (two regions, [`ROUNDS`] rounds, every provider
    /// keyed by [`KEY_ENV`]) in the background; output in `launch.out`.
    fn launch(&self) -> std::process::Child {
        latmesh_testkit::stack::launch_demo_rounds(
            self.dir.path(),
            &self.sim_addr,
            &self.url(),
            ROUNDS,
            KEY_ENV,
        )
    }

    fn launch_out(&self) -> String {
        std::fs::read_to_string(self.path("launch.out")).unwrap_or_default()
    }

    /// Waits for `launch.out` to contain `needle`; returns the text.
    fn wait_launch_out(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let text = self.launch_out();
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "campaign launch never said {needle:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `latmesh campaign watch ID --json watch-<n>.json`: its output and summary.
    fn watch(&self, campaign_id: &str, n: u32) -> (Output, Summary) {
        let json = self.path(&format!("watch-{n}.json"));
        let out = Command::new(bin("latmesh"))
            .args([
                "campaign",
                "watch",
                campaign_id,
                "--coordinator",
                &self.url(),
            ])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(&json).unwrap_or_else(|e| {
            panic!(
                "campaign watch wrote no summary ({e}):\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, serde_json::from_str(&text).unwrap())
    }

    /// `latmesh campaign verify` until it passes (the spool drains); returns its output.
    fn verify(&self, campaign_id: &str) -> String {
        let text = latmesh_testkit::verify_until_clean(&self.ch_url, &self.db, campaign_id);
        std::fs::write(self.path("verify.out"), &text).unwrap();
        text
    }

    /// A query's result as TSV rows.
    fn tsv(&self, sql: &str) -> Vec<Vec<String>> {
        latmesh_testkit::tsv(&self.rt, &self.client, sql)
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

fn kill9(proc: &mut Proc) {
    proc.child.kill().unwrap(); // SIGKILL
    proc.child.wait().unwrap();
}

/// Batches waiting in the agents' spools (measured, not acked).
fn spooled(env: &Env) -> usize {
    AGENTS
        .iter()
        .map(|(id, _)| {
            latmesh_agent::spool::read_batches(&env.path(&format!("spool-{id}")))
                .unwrap_or_default()
                .len()
        })
        .sum()
}

#[test]
fn a_coordinator_killed_with_sigkill_and_restarted_finishes_its_campaign_complete() {
    let env = Env::start();
    let mut coord = env.coordinator("coord-1");
    let mut agents: Vec<Proc> = AGENTS.iter().map(|(id, r)| env.agent(id, r)).collect();
    let mut launch = env.launch();
    let text = env.wait_launch_out("launched campaign ", Duration::from_secs(40));
    let campaign_id = text
        .split("launched campaign ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("campaign id")
        .to_string();

    // A few rounds in (start delay 2 s, rounds every 2.5 s), batches have been acked.
    std::thread::sleep(Duration::from_secs(7));
    kill9(&mut coord);
    env.wait_launch_out(
        "lost the connection to the coordinator",
        Duration::from_secs(20),
    );
    // Down for a while: the agents keep measuring, their batches wait in their spools.
    let deadline = Instant::now() + Duration::from_secs(15);
    while spooled(&env) < 2 {
        assert!(
            Instant::now() < deadline,
            "the agents spooled nothing while the coordinator was down"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    let waiting = spooled(&env);
    eprintln!("restarting the coordinator with {waiting} batches waiting in the agents' spools");
    let mut coord = env.coordinator("coord-2");

    // The launch reconnects and ends with a complete campaign.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = launch.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "campaign launch never ended:\n{}",
            env.launch_out()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = env.launch_out();
    assert!(status.success(), "launch failed:\n{out}");
    for line in out.lines().filter(|l| l.contains("connect")) {
        eprintln!("campaign launch: {line}");
    }
    assert!(out.contains("latmesh campaign watch"), "{out}");
    assert!(out.contains("reconnected to"), "{out}");
    let summary: Summary =
        serde_json::from_str(&std::fs::read_to_string(env.path("summary.json")).unwrap()).unwrap();
    assert_eq!(summary.campaign_id, campaign_id);
    assert!(summary.complete, "{:?}", summary.agents);
    for (id, _) in AGENTS {
        let a = summary.agents.iter().find(|a| a.agent_id == id).unwrap();
        assert_eq!((a.records, a.skipped), (SLOTS, 0), "{a:?}");
    }
    for a in &mut agents {
        assert!(
            latmesh_testkit::wait_exit(a, Duration::from_secs(30)).success(),
            "{} exits once its campaign is acked",
            a.name
        );
    }
    let log = std::fs::read_to_string(env.path("coord-2.log")).unwrap();
    assert!(
        log.contains("unfinished campaign loaded from the state directory"),
        "{log}"
    );

    // `campaign watch` on the restarted coordinator prints the same summary.
    let (watched, from_watch) = env.watch(&campaign_id, 1);
    assert!(watched.status.success());
    assert_eq!(from_watch, summary);
    assert!(String::from_utf8_lossy(&watched.stdout).contains("fast-lane"));

    // Nothing lost or stored twice; every slot stored once.
    let verify = env.verify(&campaign_id);
    for (id, _) in AGENTS {
        assert!(verify.contains(id), "{verify}");
        let rows = env.tsv(&format!(
            "SELECT round, slot FROM {}.requests WHERE campaign_id = '{campaign_id}' AND agent_id = '{id}'",
            env.db
        ));
        let slots: BTreeSet<&[String]> = rows.iter().map(Vec::as_slice).collect();
        assert_eq!((rows.len() as u64, slots.len() as u64), (SLOTS, SLOTS));
    }

    // Killed and restarted once more, the coordinator still answers `watch` for the
    // finished campaign, from its state directory.
    kill9(&mut coord);
    let _coord = env.coordinator("coord-3");
    let (watched, again) = env.watch(&campaign_id, 2);
    assert!(watched.status.success());
    assert_eq!(again, summary);

    let files = files_containing(env.dir.path(), &env.canary);
    assert!(files.is_empty(), "the canary API key leaked into {files:?}");
    for table in ["requests", "histograms", "campaigns", "agents"] {
        let rows = env.tsv(&format!("SELECT * FROM {}.`{table}`", env.db));
        assert!(!rows.is_empty(), "{table} is empty");
        assert!(
            !rows.iter().flatten().any(|v| v.contains(&env.canary)),
            "the canary API key is in table {table}"
        );
    }
}
