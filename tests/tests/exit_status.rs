//! `latmesh campaign launch`'s exit status on loopback (README "Exit status"): 3 when a
//! provider failed every request of a region (here: a closed port), 0 when every provider
//! answered, 4 with `--fail-above-pct` when a provider's failures are surely above it, and the
//! measurement printed and written whatever the status.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::stack::Stack;
use latmesh_testkit::{bin, free_port};

/// A campaign of `rounds` rounds in `us-east` over `providers` (name, base URL).
fn campaign(providers: &[(&str, String)], rounds: u32) -> String {
    let mut text = format!(
        r#"
[campaign]
name = "exit-status"
regions = ["us-east"]
[rounds]
count = {rounds}
interval_s = 0.3
gap_ms = 10
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 8
"#
    );
    for (name, url) in providers {
        text += &format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"{url}\"\nmodel_id = \"{}\"\n",
            latmesh_sim::profile::DEFAULT_MODEL_ID
        );
    }
    text
}

/// Launches `toml` with `args`, its summary written to `json`.
fn launch(stack: &Stack, toml: &str, json: &Path, args: &[&str]) -> (Output, String) {
    let file = stack.dir.path().join("campaign.toml");
    std::fs::write(&file, toml).unwrap();
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &stack.coord_url, "--start-delay-s", "1"])
        .arg("--json")
        .arg(json)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn summary(json: &Path) -> Summary {
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

#[test]
fn a_dead_provider_fails_the_launch_with_status_3_and_a_surely_failing_one_with_4_over_the_flag() {
    let half = ProviderProfile {
        truncate_prob: 0.5,
        ..ProviderProfile::fixed("half", 20_000, 1_000)
    };
    let mut stack = Stack::start(&[ProviderProfile::fixed("fast", 20_000, 1_000), half]);
    // One agent for every launch (no --exit-after).
    let agent = stack.agent_command("us-east-1", "us-east", &stack.coord_url);
    stack.spawn("agent-us-east-1", agent);
    let sim = |name: &str| format!("http://{}/{name}/v1", stack.sim_addr);
    // Nothing listens there: every request is refused.
    let closed = format!("http://127.0.0.1:{}/v1", free_port());

    let json = stack.dir.path().join("dead.json");
    let dead = campaign(&[("fast", sim("fast")), ("gone", closed)], 3);
    let (out, said) = launch(&stack, &dead, &json, &[]);
    assert_eq!(out.status.code(), Some(3), "{said}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error: exit status 3: "))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.contains("1 provider(s) failed every request in a region: us-east × gone: 3/3 failed in every scenario (last: connection_error: tcp connect error: Connection refused"),
        "{line}"
    );
    assert!(!line.contains("fast"), "{line}");
    // Still printed and written in full.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("gone"),
        "{said}"
    );
    let s = summary(&json);
    let gone = s
        .cells
        .iter()
        .find(|c| c.provider == "gone" && c.region == "us-east")
        .unwrap();
    assert_eq!((gone.requests, gone.request_error_pct), (3, 100.0));
    assert!(s.complete);

    // Every provider answering: status 0.
    let json = stack.dir.path().join("fine.json");
    let (out, said) = launch(&stack, &campaign(&[("fast", sim("fast"))], 3), &json, &[]);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("exit status"), "{said}");

    // Half the streams cut: status 0 without the flag, 4 with a limit its interval is above.
    let json = stack.dir.path().join("half.json");
    let some = campaign(&[("fast", sim("fast")), ("half", sim("half"))], 12);
    let (out, said) = launch(&stack, &some, &json, &[]);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let cell = summary(&json)
        .cells
        .into_iter()
        .find(|c| c.provider == "half" && c.region == "us-east")
        .unwrap();
    let failed = (cell.request_error_pct * cell.requests as f64 / 100.0).round() as u64;
    assert!(
        (2..cell.requests).contains(&failed),
        "the seeded simulator cuts some of half's streams: {failed}/{}",
        cell.requests
    );
    let (out, said) = launch(&stack, &some, &json, &["--fail-above-pct", "1"]);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("error: exit status 4: 1 cell(s) failed significantly more than --fail-above-pct 1 % of their requests (95 % interval above it): us-east × half × chat: "),
        "{said}"
    );
    // A limit the interval does not clear keeps 0; a limit that is no percentage is a usage
    // error before anything is sent.
    let (out, said) = launch(&stack, &some, &json, &["--fail-above-pct", "95"]);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let (out, said) = launch(&stack, &some, &json, &["--fail-above-pct", "150"]);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("is not a percentage in [0, 100)"), "{said}");
}
