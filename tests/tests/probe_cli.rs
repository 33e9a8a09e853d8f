//! `latmesh probe`: one request, one JSON record, through the real binaries.

use std::process::Command;
use std::time::Duration;

use latmesh_testkit::{bin, spawn_until_line};
use serde_json::Value;

/// Runs `latmesh probe ARGS`, checks that it exits 0 exactly when the outcome is `ok`, and
/// returns the JSON record it printed.
fn probe(args: &[&str]) -> Value {
    let out = Command::new(bin("latmesh"))
        .arg("probe")
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        out.status.success(),
        v["outcome"] == "ok",
        "exit status {} for outcome {}: {}",
        out.status,
        v["outcome"],
        String::from_utf8_lossy(&out.stderr)
    );
    v
}

#[test]
fn probe_prints_every_documented_field() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = sim(dir.path());
    let base = format!("{url}/reasoner/v1");
    let v = probe(&[
        "--base-url",
        &base,
        "--model",
        "deepseek-v4-flash",
        "--max-tokens",
        "200",
        "--show-text",
        "--json",
    ]);
    for field in [
        "outcome",
        "http_status",
        "finish_reason",
        "saw_done",
        "ttft_us",
        "ttfc_us",
        "e2e_us",
        "content_chunks",
        "reasoning_chunks",
        "output_tokens",
        "output_tokens_source",
        "tokens_from_usage",
        "usage",
        "answered_model",
        "system_fingerprint",
        "retry_after_s",
        "content_text",
        "reasoning_text",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    for field in [
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "cached_tokens",
    ] {
        assert!(
            v["usage"].get(field).is_some(),
            "missing usage.{field}: {v}"
        );
    }
    for field in latmesh_agent::probe::PLAN_FIELDS {
        assert!(
            v.get(field).is_none(),
            "a campaign's {field} in a lone probe: {v}"
        );
    }
    assert_eq!(
        (v["attempt"].as_u64(), v["turn"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_eq!(v["http_status"], 200);
    assert_eq!(v["saw_done"], true);
    assert_eq!(v["tokens_from_usage"], true);
    assert!(v["reasoning_chunks"].as_u64().unwrap() > 0);
    assert!(!v["reasoning_text"].as_str().unwrap().is_empty());
    assert!(v["ttfc_us"].as_u64().unwrap() > v["ttft_us"].as_u64().unwrap());
    assert!(v["e2e_us"].as_u64().unwrap() >= v["ttfc_us"].as_u64().unwrap());
    // Reasoning tokens count toward max_tokens and toward output_tokens (from usage).
    let reasoning = v["usage"]["reasoning_tokens"].as_u64().unwrap();
    assert!(
        reasoning > 0 && v["output_tokens"].as_u64().unwrap() > reasoning,
        "{v}"
    );
    assert!(v["output_tokens"].as_u64().unwrap() <= 200, "{v}");
    // The simulator counts every token in usage (reasoning included) and answers with the
    // model id it was sent; the reasoner profile sends no `system_fingerprint` (only profiles
    // that set one do, e.g. fast-lane), and the field is printed as null.
    assert_eq!(v["output_tokens_source"], "usage", "{v}");
    assert_eq!(
        (&v["answered_model"], &v["system_fingerprint"]),
        (&Value::from("deepseek-v4-flash"), &Value::Null),
        "{v}"
    );

    // Without --show-text the text stays out of the record.
    let v = probe(&[
        "--base-url",
        &format!("{url}/fast-lane/v1"),
        "--model",
        "m",
        "--no-stream",
        "--json",
    ]);
    assert_eq!(v["outcome"], "ok", "{v}");
    assert!(v.get("content_text").is_none(), "{v}");
    assert!(v["ttft_us"].is_null(), "non-streaming has no TTFT: {v}");
    assert!(v["e2e_us"].as_u64().unwrap() > 0);
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    // A body read whole is one payload: usage stands, nothing to compare it with.
    assert_eq!(
        (&v["output_tokens"], &v["output_tokens_source"]),
        (&v["usage"]["completion_tokens"], &Value::from("usage")),
        "{v}"
    );
    assert!(v["usage_chunk_delta"].is_null(), "{v}");
    assert_eq!(v["answered_model"], "m", "{v}");
}

#[test]
fn probe_reports_a_429_with_its_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let case = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/sse-cases/20-http429-retry-after.sse"
    );
    let mut replay = Command::new(bin("latmesh-sim"));
    replay.args(["replay", case, "--listen", "127.0.0.1:0"]);
    let (_r, url) = spawn_until_line(
        "replay",
        replay,
        "listening on ",
        Duration::from_secs(20),
        &dir.path().join("replay.log"),
    );
    let v = probe(&["--base-url", &format!("{url}/v1"), "--model", "m", "--json"]);
    assert_eq!(v["outcome"], "throttled", "{v}");
    assert_eq!(v["http_status"], 429);
    assert_eq!(v["retry_after_s"], 7.0);
    assert!(v["ttft_us"].is_null());
}

#[test]
fn probe_rejects_a_url_that_is_not_a_base_url() {
    for url in ["127.0.0.1:9/v1", "http://127.0.0.1:9/v1/chat/completions"] {
        let out = Command::new(bin("latmesh"))
            .args(["probe", "--base-url", url, "--model", "m"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--base-url"),
            "{url}"
        );
        assert!(out.stdout.is_empty(), "nothing was sent, so no record");
    }
}

#[test]
fn probe_names_a_missing_key_variable_without_sending() {
    let out = Command::new(bin("latmesh"))
        .args([
            "probe",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--api-key-env",
            "LATMESH_TEST_SURELY_UNSET",
        ])
        .env_remove("LATMESH_TEST_SURELY_UNSET")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("LATMESH_TEST_SURELY_UNSET"));
}

/// The simulator on loopback, for the tests below: its base URL (`http://…`) and the guard.
fn sim(dir: &std::path::Path) -> (latmesh_testkit::Proc, String) {
    let mut sim = Command::new(bin("latmesh-sim"));
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    spawn_until_line(
        "latmesh-sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &dir.join("sim.log"),
    )
}

#[test]
fn probe_over_https_to_a_plain_http_server_is_an_error_with_a_hint_not_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = sim(dir.path());
    let base = format!("{}/fast-lane/v1", url.replace("http://", "https://"));
    for _ in 0..5 {
        let out = Command::new(bin("latmesh"))
            .args(["probe", "--base-url", &base, "--model", "m"])
            .output()
            .unwrap();
        // Killed by SIGPIPE (rustls' alert to the server that hung up) before the fix.
        assert_eq!(out.status.code(), Some(1), "{}", out.status);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["outcome"], "connection_error", "{v}");
        let msg = v["error_message"].as_str().unwrap();
        assert!(msg.contains("is it plain http? then use http://"), "{msg}");
    }
}

#[test]
fn probe_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = sim(dir.path());
    let mut child = Command::new(bin("latmesh"))
        .args(["probe", "--base-url", &format!("{url}/fast-lane/v1")])
        .args(["--model", "m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // `| head -0`: the reader is gone before the record is printed
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The request-shaping options: a shaped probe of the simulator is `ok`, asks no usage with
/// `--stream-usage never` (and says so), and bad options are refused naming the option and
/// the key, before anything is sent and without quoting a header value.
#[test]
fn probe_takes_the_request_shaping_options_and_checks_them_like_a_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, url) = sim(dir.path());
    let base = format!("{url}/fast-lane/v1");
    let out = Command::new(bin("latmesh"))
        .args(["probe", "--base-url", &base, "--model", "m"])
        .args([
            "--header",
            "x-title: bench",
            "--header-env",
            "x-secret=LATMESH_TEST_PROBE_HDR",
        ])
        .args([
            "--query",
            "api-version=2024-10-21",
            "--extra-body",
            r#"{"top_k":5}"#,
        ])
        .args(["--auth", "header:api-key", "--stream-usage", "never"])
        .args(["--reasoning-tags", "<think>,</think>"])
        .env("LATMESH_TEST_PROBE_HDR", "probe-secret-value-123")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["outcome"], "ok", "{v}");
    assert_eq!(v["usage_requested"], false, "{v}");
    let all = format!("{v}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!all.contains("probe-secret-value-123"), "{all}");
    let v = probe(&["--base-url", &base, "--model", "m"]);
    assert_eq!(v["usage_requested"], true, "{v}");

    for (args, says) in [
        (
            vec!["--header", "content-type:text/plain"],
            "--header/--header-env: headers.\"content-type\": \"content-type\" is set by latmesh",
        ),
        (
            vec!["--header", "x-key sk-pasted-secret"],
            "--header: expected NAME:VALUE",
        ),
        (
            vec!["--header-env", "x-s=LATMESH_TEST_SURELY_UNSET"],
            "--header-env: $LATMESH_TEST_SURELY_UNSET (the value of header x-s) is not set",
        ),
        (
            vec!["--extra-body", "[1]"],
            "--extra-body: must be a JSON object",
        ),
        (
            vec!["--extra-body", r#"{"messages":[]}"#],
            "--extra-body: extra_body.messages: latmesh sets",
        ),
        (vec!["--auth", "basic"], "--auth: auth: \"basic\" is not"),
        (
            vec!["--stream-usage", "maybe"],
            "--stream-usage: stream_usage: \"maybe\" is not one of",
        ),
        (
            vec!["--max-tokens-field", "Max"],
            "--max-tokens-field: max_tokens_field: \"Max\" is not a JSON field name",
        ),
        (
            vec!["--reasoning-tags", "<t>"],
            "--reasoning-tags: expected OPEN,CLOSE",
        ),
        (vec!["--api", "messages"], "unknown api \"messages\""),
        (
            vec!["--header", "x-api-key: sk-pasted-secret"],
            "--header/--header-env: headers.\"x-api-key\": \"x-api-key\" carries a credential (its name has \"key\")",
        ),
        (
            vec![
                "--auth",
                "none",
                "--header",
                "Authorization: Bearer sk-pasted-secret",
            ],
            "--header-env authorization=NAME",
        ),
        (
            vec!["--api", "anthropic", "--stream-usage", "never"],
            "--stream-usage: stream_usage: applies to api = \"chat\" only",
        ),
        (
            vec!["--api", "responses", "--stream-usage", "auto"],
            "api = \"responses\" reports it unasked",
        ),
        // A query or fragment in --base-url (never quoted: it may hold a key), an empty
        // --header-env or --api-key-env variable (set, but to nothing).
        (
            vec!["--base-url", "http://127.0.0.1:9/v1?key=sk-pasted-secret"],
            "--base-url: has a query (?…), which would end up before the API's path",
        ),
        (
            vec!["--base-url", "http://127.0.0.1:9/v1?key=sk-pasted-secret"],
            "--query NAME=VALUE",
        ),
        (
            vec!["--base-url", "http://127.0.0.1:9/v1#sk-pasted-secret"],
            "--base-url: has a fragment (#…)",
        ),
        (
            vec!["--header-env", "x-s=LATMESH_TEST_PROBE_EMPTY"],
            "--header-env: $LATMESH_TEST_PROBE_EMPTY (the value of header x-s) is empty on this agent",
        ),
        (
            vec!["--api-key-env", "LATMESH_TEST_PROBE_EMPTY"],
            "--api-key-env LATMESH_TEST_PROBE_EMPTY: the variable is empty",
        ),
    ] {
        let mut cmd = Command::new(bin("latmesh"));
        cmd.args(["probe", "--model", "m"]);
        if !args.contains(&"--base-url") {
            cmd.args(["--base-url", "http://127.0.0.1:9/v1"]);
        }
        let out = cmd
            .args(&args)
            .env("LATMESH_TEST_PROBE_EMPTY", "")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("sk-pasted-secret"), "{stderr}");
        assert!(
            out.stdout.is_empty(),
            "nothing was sent, so no record: {args:?}"
        );
    }
}
