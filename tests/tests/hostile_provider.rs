//! Hostile providers (issue 17) end to end, with separate processes on loopback:
//! `latmesh-sim` serving two well-behaved providers and two hostile ones
//! (`latmesh_sim::hostile`), a coordinator storing into the test ClickHouse through its
//! spool, and one agent holding a canary API key.
//!
//! - `echo` echoes the `Authorization` value (hence the canary) into its status lines, its
//!   headers, every JSON field of its chunks, whole answers and error bodies (half of its
//!   answers are HTTP 429), and into SSE `id:`, `event:` and comment lines;
//! - `huge` sends a 3 MB `finish_reason`, `model` and `system_fingerprint` (each within the
//!   agent's 4 MiB SSE-line cap) and `4294967295` for every usage count, and echoes the key;
//! - `echo-hdr` echoes its `Authorization` value too, which is not the API key there but a
//!   secret header (`auth = "none"`, `headers = { authorization = { env = … } }`) holding a
//!   second canary, and asks no usage in streams (`stream_usage = "never"`).
//!
//! Over streaming and non-streaming scenarios: every record of every provider is stored
//! (the good providers' unharmed), `latmesh campaign verify` is clean, the hostile values are
//! cut and named in `cut_fields`, and neither canary is in any ClickHouse table, file the run
//! wrote (logs of every process, the agent's spool, the coordinator's spool and state
//! directory, the summary) and no report (HTML, JSON, CSV).

use std::process::Command;

use latmesh_sim::hostile::Hostile;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::stack::Stack;
use latmesh_testkit::{bin, files_containing};

const KEY_ENV: &str = "HOSTILE_PROVIDER_TEST_API_KEY";
const ROUNDS: u32 = 3;
const HEADER_ENV: &str = "HOSTILE_PROVIDER_TEST_SECRET_HEADER";
const PROVIDERS: [&str; 5] = ["good-a", "good-b", "echo", "huge", "echo-hdr"];

fn profiles() -> Vec<ProviderProfile> {
    let quick = |name: &str| ProviderProfile {
        output_tokens_min: 4,
        output_tokens_max: 8,
        ..ProviderProfile::fixed(name, 20_000, 2_000)
    };
    vec![
        quick("good-a"),
        quick("good-b"),
        ProviderProfile {
            throttle_prob: 0.5,
            hostile: Hostile {
                echo_key: true,
                retry_after: Some("1e30".into()),
                ..Hostile::default()
            },
            ..quick("echo")
        },
        ProviderProfile {
            hostile: Hostile {
                echo_key: true,
                field_bytes: 3_000_000,
                usage_value: Some(serde_json::json!(4294967295u64)),
                retry_after: None,
            },
            ..quick("huge")
        },
        ProviderProfile {
            hostile: Hostile {
                echo_key: true,
                ..Hostile::default()
            },
            ..quick("echo-hdr")
        },
    ]
}

fn campaign() -> String {
    let mut toml = format!(
        r#"
[campaign]
name = "hostile"
regions = ["us-east"]
[rounds]
count = {ROUNDS}
interval_s = 1.0
gap_ms = 50
[[scenarios]]
name = "stream"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
[[scenarios]]
name = "whole"
stream = false
prompt_ids = ["short-qa-en-*"]
max_tokens = 8
"#
    );
    for p in PROVIDERS {
        toml.push_str(&format!(
            "[[providers]]\nname = \"{p}\"\nbase_url = \"http://{{sim}}/{p}/v1\"\nmodel_id = \"{}\"\napi_key_env = \"{KEY_ENV}\"\n",
            latmesh_sim::profile::DEFAULT_MODEL_ID
        ));
        if p == "echo-hdr" {
            toml.push_str(&format!(
                "auth = \"none\"\nstream_usage = \"never\"\nheaders = {{ authorization = {{ env = \"{HEADER_ENV}\" }} }}\n"
            ));
        }
    }
    toml
}

#[test]
fn hostile_providers_are_bounded_stored_verified_and_leak_no_key() {
    let ch_url = latmesh_testkit::clickhouse_url().to_string();
    let (client, db) = latmesh_testkit::fresh_db("hostile");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // (No 8-byte run in common with what the simulator sends on its own, `latmesh-sim`:
    // that run would be redacted as a piece of the key.)
    let canary = format!("sk-hostile-canary-{:016x}", rand::random::<u64>());
    // (No 8-byte run in common with the key canary either: the key's scrub would take it.)
    let header_canary = format!("zqhdr{:016x}", rand::random::<u64>());
    let mut stack = Stack::start_with_clickhouse(&profiles(), &ch_url, &db);
    let mut agent = stack.agent_command("us-east-1", "us-east", &stack.coord_url);
    // Debug logs too: the agent is where the providers' raw answers are.
    agent
        .args(["--exit-after", "1"])
        .env(KEY_ENV, &canary)
        .env(HEADER_ENV, format!("Token {header_canary}"))
        .env("LATMESH_LOG", "debug");
    stack.spawn("agent-us-east-1", agent);

    let (summary, out) = stack.launch(&campaign());
    std::fs::write(stack.dir.path().join("launch.out"), &out).unwrap();
    assert!(summary.complete, "{out}");
    let id = summary.campaign_id.clone();
    let verify = latmesh_testkit::verify_until_clean(&ch_url, &db, &id);
    std::fs::write(stack.dir.path().join("verify.out"), &verify).unwrap();

    // Every slot of every provider stored, the good ones' as usual.
    let tsv = |sql: &str| latmesh_testkit::tsv(&rt, &client, sql);
    let rows = tsv(&format!(
        "SELECT provider, count(), countIf(outcome = 'ok') FROM {db}.requests \
         WHERE campaign_id = '{id}' GROUP BY provider ORDER BY provider"
    ));
    let per_provider = u64::from(ROUNDS) * 2;
    for p in PROVIDERS {
        let row = rows
            .iter()
            .find(|r| r[0] == p)
            .unwrap_or_else(|| panic!("no row of {p}: {rows:?}"));
        assert_eq!(row[1], per_provider.to_string(), "{p}: {rows:?}");
        if p.starts_with("good") || p == "huge" || p == "echo-hdr" {
            assert_eq!(row[2], per_provider.to_string(), "{p} not all ok: {rows:?}");
        }
    }
    // The huge provider's values: cut, counts dropped, and said so.
    let huge = tsv(&format!(
        "SELECT max(length(finish_reason)), max(length(answered_model)), \
         max(length(system_fingerprint)), countIf(prompt_tokens IS NOT NULL), \
         countIf(has(cut_fields, 'finish_reason') AND has(cut_fields, 'usage.prompt_tokens')) \
         FROM {db}.requests WHERE campaign_id = '{id}' AND provider = 'huge'"
    ));
    assert_eq!(
        huge[0],
        ["64", "128", "128", "0", &per_provider.to_string()],
        "{huge:?}"
    );
    // The echoing provider's answers did carry the key, and every echo was redacted: in
    // `finish_reason` and `answered_model` of its answers, in the error fields of its 429s
    // (whose Retry-After of 1e30 s is clamped to a day).
    let echo = tsv(&format!(
        "SELECT countIf(outcome = 'ok'), \
         countIf(outcome = 'ok' AND finish_reason LIKE '% Bearer [redacted]' \
           AND answered_model = 'deepseek-v4-flash Bearer [redacted]' \
           AND has(cut_fields, 'finish_reason')), \
         countIf(outcome = 'throttled'), \
         countIf(outcome = 'throttled' AND error_type = 'rate_limit_error Bearer [redacted]' \
           AND retry_after_s = 86400 AND has(cut_fields, 'retry_after_s')) \
         FROM {db}.requests WHERE campaign_id = '{id}' AND provider = 'echo'"
    ));
    let (ok, throttled) = (&echo[0][0], &echo[0][2]);
    assert_ne!(ok, "0", "{echo:?}");
    assert_ne!(throttled, "0", "{echo:?}");
    let seen = tsv(&format!(
        "SELECT outcome, finish_reason, answered_model, error_type, cut_fields FROM {db}.requests \
         WHERE campaign_id = '{id}' AND provider = 'echo'"
    ));
    assert_eq!(
        (&echo[0][1], &echo[0][3]),
        (ok, throttled),
        "{echo:?} {seen:?}"
    );
    // The secret header's echo was redacted as the key's is; the stream asked no usage and
    // the stored rows say so (the non-streaming ones get usage unasked).
    let hdr = tsv(&format!(
        "SELECT stream, count(), countIf(finish_reason LIKE '% [redacted]' \
           AND answered_model = 'deepseek-v4-flash [redacted]'), sum(usage_requested) \
         FROM {db}.requests WHERE campaign_id = '{id}' AND provider = 'echo-hdr' \
         GROUP BY stream ORDER BY stream"
    ));
    let n = u64::from(ROUNDS).to_string();
    let hdr_rows = tsv(&format!(
        "SELECT stream, finish_reason, answered_model, usage_requested FROM {db}.requests \
         WHERE campaign_id = '{id}' AND provider = 'echo-hdr'"
    ));
    assert_eq!(hdr, [["0", &n, &n, &n], ["1", &n, &n, "0"]], "{hdr_rows:?}");
    // The good providers' records say nothing was cut.
    let good_cut = tsv(&format!(
        "SELECT provider, cut_fields, finish_reason, answered_model FROM {db}.requests \
         WHERE campaign_id = '{id}' AND provider LIKE 'good-%' AND length(cut_fields) > 0"
    ));
    assert!(good_cut.is_empty(), "{good_cut:?}");

    // Reports in every format.
    for format in ["html", "json", "csv"] {
        let out = Command::new(bin("latmesh"))
            .args([
                "report",
                &id,
                "--clickhouse-url",
                &ch_url,
                "--clickhouse-db",
                &db,
            ])
            .args(["--format", format, "--out"])
            .arg(stack.dir.path().join(format!("report.{format}")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    // The agent did have the key, and the providers did echo it.
    let agent_log = std::fs::read_to_string(stack.log("agent-us-east-1")).unwrap();
    assert!(
        !agent_log.contains("is not set on this agent"),
        "{agent_log}"
    );
    // Nothing the run wrote holds the canary: logs, spools, state, summary, reports.
    for c in [&canary, &header_canary] {
        let leaked = files_containing(stack.dir.path(), c);
        assert!(leaked.is_empty(), "the canary {c} leaked into {leaked:?}");
    }
    // No table of the database holds it, whatever the column.
    let tables = tsv(&format!(
        "SELECT name FROM system.tables WHERE database = '{db}'"
    ));
    assert!(tables.iter().any(|t| t[0] == "requests"), "{tables:?}");
    for t in &tables {
        let all = tsv(&format!("SELECT * FROM {db}.`{}`", t[0]));
        let in_rows = all
            .iter()
            .flatten()
            .any(|v| v.contains(&canary) || v.contains(&header_canary));
        assert!(!in_rows, "the canary is in table {}", t[0]);
    }
    rt.block_on(latmesh_testkit::drop_db(&client, &db));
}
