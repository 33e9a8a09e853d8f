//! Schedules and the budget guard with real processes on loopback: `latmesh-sim` (one quick
//! provider), `latmesh serve`, one agent, and the CLI (`campaign launch`, `campaign series`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::stack::Stack;
use latmesh_testkit::{Proc, bin, wait_exit};

struct Setup {
    stack: Stack,
}

impl Setup {
    /// A simulator with `quick` (50 ms to the first token, 20-30 tokens), a coordinator and
    /// one agent in `us-east` that stays for any number of campaigns.
    fn start() -> Setup {
        let profiles = vec![ProviderProfile {
            output_tokens_min: 20,
            output_tokens_max: 30,
            ..ProviderProfile::fixed("quick", 50_000, 5_000)
        }];
        let mut stack = Stack::start(&profiles);
        let agent = stack.agent_command("us-east-1", "us-east", &stack.coord_url);
        stack.spawn("agent", agent);
        Setup { stack }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.stack.dir.path().join(name)
    }

    /// A campaign over `quick` with `extra` appended (e.g. a `[schedule]`).
    fn campaign(&self, rounds: u32, interval_s: f64, extra: &str) -> PathBuf {
        let text = format!(
            r#"
[campaign]
name = "patrol"
regions = ["us-east"]
[rounds]
count = {rounds}
interval_s = {interval_s}
gap_ms = 100
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 32
timeout_total_s = 30
[[providers]]
name = "quick"
base_url = "http://{sim}/quick/v1"
model_id = "{model}"
price_input_usd_per_mtok = 0.5
price_output_usd_per_mtok = 2.0
{extra}
"#,
            sim = self.stack.sim_addr,
            model = latmesh_sim::profile::DEFAULT_MODEL_ID,
        );
        let file = self.path("campaign.toml");
        std::fs::write(&file, text).unwrap();
        file
    }

    /// Runs the CLI with `args` (and `--coordinator`) to its end, at most `timeout`; returns
    /// (success, stdout, stderr).
    fn cli(&self, args: &[&str], timeout: Duration, log: &str) -> (bool, String, String) {
        let (out, err) = (
            self.path(&format!("{log}.out")),
            self.path(&format!("{log}.err")),
        );
        let mut c = Command::new(bin("latmesh"));
        c.args(args)
            .args(["--coordinator", &self.stack.coord_url])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        let mut p = Proc {
            child: c.spawn().unwrap(),
            name: format!("latmesh {}", args.join(" ")),
        };
        let status = wait_exit(&mut p, timeout);
        (
            status.success(),
            std::fs::read_to_string(out).unwrap(),
            std::fs::read_to_string(err).unwrap(),
        )
    }
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_schedule_repeats_the_campaign_as_runs_with_their_own_ids() {
    let s = Setup::start();
    let file = s.campaign(1, 1.0, "[schedule]\nevery = \"3s\"\nruns = 2\n");
    let json = s.path("series.json");
    let (ok, out, err) = s.cli(
        &[
            "campaign",
            "launch",
            arg(&file),
            "--start-delay-s",
            "1",
            "--wait",
            "--json",
            arg(&json),
        ],
        Duration::from_secs(90),
        "launch",
    );
    assert!(ok, "launch --wait failed:\n{out}\n{err}");
    // The estimate (per run) and the schedule came before the launch.
    assert!(err.contains("estimate per run for 1 agent(s)"), "{err}");
    assert!(err.contains("schedule: every 3s, 2 runs"), "{err}");
    let series_id = out
        .lines()
        .find_map(|l| l.strip_prefix("series ")?.split(':').next())
        .unwrap_or_else(|| panic!("no series line in {out}"))
        .to_string();
    assert!(
        out.contains(&format!("first run {series_id}-r1 starts at")),
        "{out}"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["series_id"], series_id.as_str());
    assert_eq!(doc["state"], "finished");
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{doc:#}");
    let ids: Vec<&str> = runs
        .iter()
        .map(|r| r["campaign_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [format!("{series_id}-r1"), format!("{series_id}-r2")],
        "distinct run ids under the series"
    );
    for r in runs {
        assert_eq!(r["complete"], true, "{r:#}");
        let summary: Summary = serde_json::from_value(r["summary"].clone()).unwrap();
        assert_eq!(summary.campaign_id, r["campaign_id"].as_str().unwrap());
        assert!(
            summary.complete,
            "{}",
            latmesh_cli::ui::matrix::render(&summary)
        );
        let cell = summary.cell("us-east", "quick", "chat").unwrap();
        assert_eq!((cell.attempts, cell.samples), (1, 1), "one tiny round each");
        assert!(summary.guard.spent.as_ref().unwrap().tokens() > 0);
    }
    // Run 2 was due 3 s after run 1 (later if run 1 was still going, never earlier).
    let due = |i: usize| runs[i]["due_unix_us"].as_i64().unwrap();
    let start = |i: usize| runs[i]["start_at_unix_us"].as_i64().unwrap();
    assert_eq!(due(1) - due(0), 3_000_000);
    assert!(start(1) >= due(1) && start(1) > start(0), "{doc:#}");

    // `campaign series` lists the runs; cancelling a finished series is refused.
    let (ok, out, err) = s.cli(
        &["campaign", "series", &series_id],
        Duration::from_secs(20),
        "series",
    );
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("{series_id}-r1")) && out.contains(&format!("{series_id}-r2")),
        "{out}"
    );
    assert!(out.contains("2 of 2 runs launched; finished"), "{out}");
    let (ok, out, err) = s.cli(
        &["campaign", "cancel", &series_id],
        Duration::from_secs(20),
        "cancel",
    );
    assert!(!ok && err.contains("series finished"), "{out}{err}");
}

#[test]
fn the_budget_guard_stops_a_campaign_and_keeps_what_was_measured() {
    let s = Setup::start();
    // 60 rounds of one request (~40 tokens each with usage) every 0.5 s: ~30 s unless stopped.
    let file = s.campaign(60, 0.5, "");
    let json = s.path("summary.json");
    let (ok, out, err) = s.cli(
        &[
            "campaign",
            "launch",
            arg(&file),
            "--start-delay-s",
            "1",
            "--max-tokens",
            "300",
            "--json",
            arg(&json),
        ],
        Duration::from_secs(90),
        "launch",
    );
    assert!(
        !ok,
        "a campaign stopped by its budget exits non-zero:\n{out}\n{err}"
    );
    assert!(err.contains("stopped by the budget guard"), "{err}");
    // The estimate was printed first: 60 requests, 60 × 32 completion tokens at most, a cost.
    assert!(
        err.contains("estimate for 1 agent(s) (connected in the plan's regions)"),
        "{err}"
    );
    let total = err
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_else(|| panic!("no TOTAL line in {err}"));
    assert!(
        total.contains(" 60 ") && total.contains("1,920") && total.contains('$'),
        "{total}"
    );
    assert!(
        out.contains("STOPPED BY BUDGET (budget: measured tokens"),
        "{out}"
    );

    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(raw["stopped_by"], "budget");
    assert!(
        raw["stop_reason"]
            .as_str()
            .unwrap()
            .ends_with("passed --max-tokens 300"),
        "{raw:#}"
    );
    assert_eq!(raw["caps"]["max_tokens"], 300);
    assert!(summary.cancelled && !summary.complete);
    let spent = summary.guard.spent.clone().unwrap();
    assert!(spent.tokens() > 300, "{spent:?}");
    assert!(spent.prompt_tokens > 0 && spent.completion_tokens > 0);
    assert!(spent.cost_usd > 0.0, "{spent:?}");
    // What was measured before the stop is kept; the rest of the plan was not run.
    let agent = &summary.agents[0];
    assert!(agent.records >= 5, "{agent:?}");
    assert!(agent.skipped > 0, "{agent:?}");
    assert!(agent.skipped + agent.records <= 61, "{agent:?}");
    let cell = summary.cell("us-east", "quick", "chat").unwrap();
    assert!(cell.samples >= 5 && cell.ttft.is_some(), "{cell:?}");
    assert!(
        cell.attempts < 30,
        "stopped within a few seconds of passing the cap: {cell:?}"
    );
}
