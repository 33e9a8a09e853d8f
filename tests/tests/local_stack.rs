//! The local stack of `deploy/local/start.sh` and `stop.sh`, as a user runs it: started into a
//! temporary folder with ClickHouse ports of its own (never the test run's ClickHouse), three
//! agents connected, a 2-round demo campaign launched against its simulator and stored in its
//! ClickHouse with nothing lost or duplicated, a second start refused, then stopped: no process
//! of its pid files is left, a second stop succeeds, the logs stay. A guard stops the stack
//! when the test fails half-way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use latmesh_testkit::{bin, free_port, repo};

const REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-southeast"];

fn script(name: &str) -> PathBuf {
    repo().join("deploy/local").join(name)
}

/// `bash deploy/local/NAME ARGS` with an environment that says nothing about another stack
/// or ClickHouse.
fn run_script(name: &str, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script(name)).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("LATMESH_LOCAL_") || k.starts_with("LATMESH_CLICKHOUSE_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "--- stdout:\n{}--- stderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Stops the stack in `dir` when dropped, unless the test already did.
struct StackGuard {
    dir: tempfile::TempDir,
    stopped: bool,
}

impl StackGuard {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn stop(&mut self) -> Output {
        let out = run_script("stop.sh", &["--dir", &self.path().to_string_lossy()], &[]);
        self.stopped = out.status.success();
        out
    }
}

impl Drop for StackGuard {
    fn drop(&mut self) {
        if !self.stopped {
            let out = self.stop();
            if !out.status.success() {
                eprintln!("stop.sh failed in the guard:\n{}", text(&out));
            }
        }
    }
}

/// `export K=V` lines of the env file (values as written by `printf %q` of plain words).
fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}

/// Pid files of the stack: name → pid (the first line; `clickhouse.pid` is a link to the pid
/// file of scripts/clickhouse.sh).
fn pid_files(dir: &Path) -> BTreeMap<String, u32> {
    std::fs::read_dir(dir.join("pids"))
        .expect("pids directory")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .filter_map(|e| {
            let name = e.path().file_stem()?.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(e.path()).ok()?;
            let pid = text.lines().next()?.trim().parse().ok()?;
            Some((name, pid))
        })
        .collect()
}

/// Whether `pid` is a live process (zombies are not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// `latmesh agents` lines of connected agents, per region.
fn connected_regions(coordinator: &str) -> BTreeMap<String, usize> {
    let out = Command::new(bin("latmesh"))
        .args(["agents", "--coordinator", coordinator])
        .output()
        .unwrap();
    assert!(out.status.success(), "latmesh agents:\n{}", text(&out));
    let mut by_region = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() > 3 && fields[2..].contains(&"connected") {
            *by_region.entry(fields[1].to_string()).or_insert(0) += 1;
        }
    }
    by_region
}

#[test]
fn start_sh_runs_a_campaign_end_to_end_and_stop_sh_leaves_nothing_running() {
    let mut stack = StackGuard {
        dir: tempfile::tempdir().unwrap(),
        stopped: false,
    };
    let dir = stack.path().to_path_buf();
    let dir_s = dir.to_string_lossy().into_owned();
    let bin_dir = bin("latmesh")
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let (http_port, tcp_port) = (free_port(), free_port());
    assert_ne!(http_port, tcp_port);

    // The HTTP port by flag, the native one from the environment.
    let out = run_script(
        "start.sh",
        &[
            "--dir",
            &dir_s,
            "--bin-dir",
            &bin_dir,
            "--clickhouse-http-port",
            &http_port.to_string(),
            "--timeout",
            "90",
        ],
        &[("LATMESH_LOCAL_CLICKHOUSE_TCP_PORT", tcp_port.to_string())],
    );
    assert!(out.status.success(), "start.sh failed:\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();

    let env = read_env(&dir.join("env"));
    let get = |k: &str| {
        env.get(k)
            .unwrap_or_else(|| panic!("{k} missing from the env file: {env:?}"))
            .clone()
    };
    let coordinator = get("LATMESH_COORDINATOR");
    let ch_url = get("LATMESH_CLICKHOUSE_URL");
    let db = get("LATMESH_CLICKHOUSE_DB");
    let campaign_file = PathBuf::from(get("LATMESH_LOCAL_CAMPAIGN"));
    assert_eq!(ch_url, format!("http://127.0.0.1:{http_port}"));
    assert!(
        std::env::var("LATMESH_CLICKHOUSE_URL").map_or(true, |u| u.trim() != ch_url),
        "the stack must not use the test run's ClickHouse"
    );
    assert_eq!(get("LATMESH_LOCAL_DIR"), dir_s);
    assert!(get("LATMESH_SIM_URL").starts_with("http://127.0.0.1:"));
    assert!(
        coordinator.starts_with("http://127.0.0.1:"),
        "{coordinator}"
    );
    assert!(
        stdout.contains(&format!(
            "campaign launch {} --coordinator {coordinator}",
            campaign_file.display()
        )),
        "no ready-to-run launch command:\n{stdout}"
    );
    let grafana_ds =
        std::fs::read_to_string(dir.join("grafana/provisioning/datasources/clickhouse.yaml"))
            .unwrap();
    assert!(
        grafana_ds.contains(&format!("port: {http_port}\n")),
        "{grafana_ds}"
    );

    // Every part runs, with a pid file, logs in the folder.
    let pids = pid_files(&dir);
    let mut names: Vec<&str> = pids.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "agent-ap-southeast",
            "agent-eu-west",
            "agent-us-east",
            "clickhouse",
            "coordinator",
            "sim"
        ]
    );
    for (name, pid) in &pids {
        assert!(alive(*pid), "{name} (pid {pid}) is not running");
    }
    for log in ["coordinator", "sim", "agent-us-east", "migrate"] {
        assert!(
            dir.join(format!("logs/{log}.log")).is_file(),
            "no {log}.log"
        );
    }

    // Three agents, one per region, connected.
    let regions = connected_regions(&coordinator);
    assert_eq!(
        regions,
        REGIONS.iter().map(|r| (r.to_string(), 1)).collect(),
        "connected agents by region"
    );

    // A second start on the same folder is refused and leaves the stack alone.
    let again = run_script("start.sh", &["--dir", &dir_s, "--bin-dir", &bin_dir], &[]);
    assert!(
        !again.status.success(),
        "second start succeeded:\n{}",
        text(&again)
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already running"),
        "{}",
        text(&again)
    );
    for (name, pid) in &pids {
        assert!(alive(*pid), "{name} died after the refused start");
    }

    // The demo campaign file the stack wrote (its printed command launches it) is valid and
    // points at the stack's simulator.
    let campaign = std::fs::read_to_string(&campaign_file).unwrap();
    let sim_addr = get("LATMESH_SIM_URL")
        .trim_start_matches("http://")
        .to_string();
    let base_urls: Vec<&str> = campaign
        .lines()
        .filter(|l| l.starts_with("base_url"))
        .collect();
    assert!(!base_urls.is_empty(), "{campaign}");
    for l in &base_urls {
        assert!(l.contains(&format!("http://{sim_addr}/")), "{l}");
    }
    let validate = Command::new(bin("latmesh"))
        .args(["campaign", "validate"])
        .arg(&campaign_file)
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "the stack's demo.toml does not validate:\n{}",
        text(&validate)
    );

    // A short campaign of its own (2 rounds) against the stack's simulator.
    let short = dir.join("short.toml");
    std::fs::write(
        &short,
        format!(
            r#"[campaign]
name = "local-stack"
seed = 5
regions = ["us-east", "eu-west", "ap-southeast"]

[rounds]
count = 2
interval_s = 1.5
gap_ms = 100

[[scenarios]]
name = "chat-short"
prompt_ids = ["short-qa-*"]
stream = true
max_tokens = 16

[[providers]]
name = "fast-lane"
base_url = "http://{sim_addr}/fast-lane/v1"
model_id = "deepseek-v4-flash"

[[providers]]
name = "steady"
base_url = "http://{sim_addr}/steady/v1"
model_id = "deepseek-v4-flash"
"#
        ),
    )
    .unwrap();
    let summary_path = dir.join("summary.json");
    let launch = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&short)
        .args(["--coordinator", &coordinator, "--json"])
        .arg(&summary_path)
        .output()
        .unwrap();
    assert!(
        launch.status.success(),
        "campaign launch failed:\n{}",
        text(&launch)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    let campaign_id = summary["campaign_id"].as_str().unwrap().to_string();
    let verify = latmesh_testkit::verify_until_clean(&ch_url, &db, &campaign_id);
    for region in REGIONS {
        assert!(
            verify.contains(&format!("local-{region} ")),
            "no agent of {region} in:\n{verify}"
        );
    }

    // Stop: nothing of the pid files is left; stopping again is fine; the logs stay.
    let out = stack.stop();
    assert!(out.status.success(), "stop.sh failed:\n{}", text(&out));
    for (name, pid) in &pids {
        assert!(!alive(*pid), "{name} (pid {pid}) still runs after stop.sh");
    }
    assert!(
        pid_files(&dir).is_empty(),
        "pid files left: {:?}",
        pid_files(&dir)
    );
    let out = run_script("stop.sh", &["--dir", &dir_s], &[]);
    assert!(
        out.status.success(),
        "second stop.sh failed:\n{}",
        text(&out)
    );
    assert!(dir.join("logs/coordinator.log").is_file(), "logs removed");
}
