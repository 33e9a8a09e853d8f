//! What `latmesh campaign validate` and `launch` refuse or say before anything is sent, with
//! real processes on loopback: agents without a provider's API key variable, regions without
//! an agent, duplicate YAML keys, mistyped `LATMESH_*` overrides and absurd durations.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use latmesh_proto::pb;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::bin;
use latmesh_testkit::stack::Stack;

/// The API key variable of the campaigns here (set on some agents only).
const KEY_ENV: &str = "VALIDATION_TEST_API_KEY";

fn campaign(regions: &[&str], rounds: u32) -> String {
    let regions: Vec<String> = regions.iter().map(|r| format!("{r:?}")).collect();
    format!(
        r#"
[campaign]
name = "checks"
regions = [{}]
[rounds]
count = {rounds}
interval_s = 1.0
gap_ms = 10
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-001"]
max_tokens = 8
[[providers]]
name = "fast"
base_url = "http://{{sim}}/fast/v1"
model_id = "{model}"
api_key_env = "{KEY_ENV}"
"#,
        regions.join(", "),
        model = latmesh_sim::profile::DEFAULT_MODEL_ID,
    )
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn write(stack: &Stack, name: &str, text: &str) -> PathBuf {
    let file = stack.dir.path().join(name);
    std::fs::write(&file, text.replace("{sim}", &stack.sim_addr)).unwrap();
    file
}

/// `latmesh campaign launch FILE` against the stack with `args`, run to its end.
fn launch(stack: &Stack, file: &Path, args: &[&str]) -> Output {
    Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(file)
        .args(["--coordinator", &stack.coord_url, "--start-delay-s", "1"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn agents(stack: &Stack) -> Vec<pb::AgentInfo> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = latmesh_cli::watch::connect(&stack.coord_url).await.unwrap();
        c.list_agents(pb::ListAgentsRequest {})
            .await
            .unwrap()
            .into_inner()
            .agents
    })
}

fn wait_connected(stack: &Stack, ids: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = agents(stack);
        if ids
            .iter()
            .all(|id| a.iter().any(|a| a.agent_id == *id && a.connected))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "agents {ids:?} not connected: {a:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts agent `id` in `region`, with the API key variable set or not.
fn agent(stack: &mut Stack, id: &str, region: &str, key: bool) {
    let mut a = stack.agent_command(id, region, &stack.coord_url);
    a.args(["--exit-after", "1"]);
    if key {
        a.env(KEY_ENV, "sk-validation-canary");
    } else {
        a.env_remove(KEY_ENV);
    }
    stack.spawn(&format!("agent-{id}"), a);
}

#[test]
fn a_launch_to_an_agent_without_a_provider_s_key_is_refused_naming_it_unless_allowed() {
    let mut stack = Stack::start(&[ProviderProfile::fixed("fast", 20_000, 1_000)]);
    agent(&mut stack, "us-east-1", "us-east", true);
    agent(&mut stack, "eu-west-1", "eu-west", false);
    wait_connected(&stack, &["us-east-1", "eu-west-1"]);
    let file = write(&stack, "keys.toml", &campaign(&["us-east", "eu-west"], 2));

    let out = launch(&stack, &file, &[]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("launch refused: agent eu-west-1 (region eu-west) lacks $VALIDATION_TEST_API_KEY for provider fast"),
        "{said}"
    );
    assert!(said.contains("--allow-missing-keys"), "{said}");
    assert!(!said.contains("agent us-east-1 (region"), "{said}");
    assert!(!said.contains("sk-validation-canary"), "{said}");
    // Nothing was launched: both agents are idle.
    assert!(
        agents(&stack).iter().all(|a| a.campaign_id.is_empty()),
        "{:#?}",
        agents(&stack)
    );

    let out = launch(&stack, &file, &["--allow-missing-keys"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("warning: agent eu-west-1 (region eu-west) lacks $VALIDATION_TEST_API_KEY for provider fast: its requests to fast go without an API key"),
        "{said}"
    );
}

#[test]
fn launch_says_which_agents_and_regions_are_connected_while_it_waits() {
    let mut stack = Stack::start(&[ProviderProfile::fixed("fast", 20_000, 1_000)]);
    agent(&mut stack, "us-east-1", "us-east", true);
    agent(&mut stack, "ap-1", "ap-southeast", true);
    wait_connected(&stack, &["us-east-1", "ap-1"]);
    let file = write(&stack, "wait.toml", &campaign(&["us-east", "eu-west"], 1));
    let out = launch(&stack, &file, &["--wait-agents-s", "2"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    let status = "connected: us-east (us-east-1); missing: eu-west (no agent); also connected, in no region of the campaign: ap-1 (ap-southeast)";
    assert!(
        said.contains(&format!(
            "waiting up to 2 s for an agent in every region: {status}"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "no agent connected in region(s) eu-west after 2.0 s ({status}; wait longer with --wait-agents-s)"
        )),
        "{said}"
    );
}

#[test]
fn validate_prints_the_duration_and_refuses_typos_and_absurd_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let validate = |file: &Path, env: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new(bin("latmesh"));
        c.args(["campaign", "validate"]).arg(file).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let toml = dir.path().join("c.toml");
    std::fs::write(
        &toml,
        campaign(&["us-east"], 10).replace("{sim}", "127.0.0.1:9"),
    )
    .unwrap();

    let out = validate(&toml, &[("LATMESH_LOG", "warn")], &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "planned duration: 10 s (10 s for rounds.count = 10 × rounds.interval_s = 1 s)"
        ),
        "{}",
        text(&out)
    );
    // A valid override applies; a mistyped one is an error naming the nearest key.
    let out = validate(&toml, &[("LATMESH_ROUNDS__COUNT", "3")], &[]);
    assert!(text(&out).contains("3 rounds"), "{}", text(&out));
    let out = validate(&toml, &[("LATMESH_ROUND__COUNT", "3")], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("environment variable LATMESH_ROUND__COUNT: not a campaign override nor a latmesh setting (did you mean LATMESH_ROUNDS__COUNT?"),
        "{}",
        text(&out)
    );
    // 1,000,000 rounds of 1 s: refused without --allow-long, naming the setting.
    let out = validate(&toml, &[("LATMESH_ROUNDS__COUNT", "1000000")], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("the campaign would run for 11.6 days, more than 24 h: rounds.count = 1000000 × rounds.interval_s = 1 s makes it long"),
        "{}",
        text(&out)
    );
    let out = validate(
        &toml,
        &[("LATMESH_ROUNDS__COUNT", "1000000")],
        &["--allow-long"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("planned duration: 11.6 days"),
        "{}",
        text(&out)
    );

    // YAML: a key written twice is an error naming it and the file.
    let yaml = dir.path().join("c.yaml");
    std::fs::write(
        &yaml,
        "campaign:\n  name: t\n  regions: [us-east]\nrounds:\n  count: 2\n  interval_s: 1\n  gap_ms: 10\n  count: 1000000\nscenarios:\n  - {name: chat, prompt_ids: [\"short-qa-en-001\"], max_tokens: 8}\nproviders:\n  - {name: a, base_url: \"http://127.0.0.1:9/v1\", model_id: m}\n",
    )
    .unwrap();
    let out = validate(&yaml, &[], &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{}: duplicate key `rounds.count`", yaml.display())),
        "{}",
        text(&out)
    );
}
