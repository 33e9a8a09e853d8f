//! Nobody let in: a coordinator serving gRPC over TLS with an agent token and an admin token
//! refuses agents and control calls without them or with wrong ones (and logs who it
//! refused, and every failed TLS handshake; a plaintext client is told to use https://), lets the right ones run a campaign against `latmesh-sim` to the end, refuses to
//! listen on a non-loopback address without TLS and tokens unless told so, and writes no
//! token into any log. Separate processes, loopback only.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use latmesh_results::summary::Summary;
use latmesh_testkit::{bin, files_containing, spawn, spawn_until_line, wait_exit};

/// Variables that would hand a spawned process credentials behind the test's back.
const CREDENTIAL_ENV: [&str; 10] = [
    "LATMESH_AGENT_TOKEN",
    "LATMESH_ADMIN_TOKEN",
    "LATMESH_AGENT_TOKEN_FILE",
    "LATMESH_ADMIN_TOKEN_FILE",
    "LATMESH_CA_FILE",
    "LATMESH_TLS_CERT",
    "LATMESH_TLS_KEY",
    "LATMESH_COORDINATOR",
    "LATMESH_LISTEN",
    "LATMESH_LOG",
];

fn cmd(name: &str) -> Command {
    let mut c = Command::new(bin(name));
    for var in CREDENTIAL_ENV {
        c.env_remove(var);
    }
    c
}

/// An agent command whose on-disk spool (when the agent has one) is `dir`, so that the token
/// grep covers it too.
fn agent_cmd(dir: &Path) -> Command {
    let mut c = cmd("latmesh-agent");
    c.env("LATMESH_AGENT_SPOOL_DIR", dir);
    c
}

/// A CA, and a server certificate it signed for `localhost` and `127.0.0.1`, as PEM files in
/// `dir`: (ca.pem, cert.pem, key.pem).
fn make_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "latmesh test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();

    let mut leaf_params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    leaf_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "latmesh coordinator");
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();

    let (ca_pem, cert_pem, key_pem) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    std::fs::write(&cert_pem, leaf.pem()).unwrap();
    std::fs::write(&key_pem, leaf_key.serialize_pem()).unwrap();
    (ca_pem, cert_pem, key_pem)
}

fn token(role: &str) -> String {
    format!("{role}-canary-{:016x}", rand::random::<u64>())
}

/// Runs a CLI command to the end, keeping its output in `log` (so the token grep sees it).
fn run_cli(mut c: Command, log: &Path) -> Output {
    let out = c.output().unwrap();
    let mut text = out.stdout.clone();
    text.extend_from_slice(&out.stderr);
    std::fs::write(log, text).unwrap();
    out
}

const CAMPAIGN: &str = r#"
[campaign]
name = "auth"
seed = 7
regions = ["us-east"]

[rounds]
count = 2
interval_s = 1.0
gap_ms = 100

[[scenarios]]
name = "chat-short"
prompt_ids = ["short-qa-*"]
stream = true
max_tokens = 16
temperature = 0.0
top_p = 1.0

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
fn tls_coordinator_lets_in_only_the_right_tokens() {
    let secrets = tempfile::tempdir().unwrap(); // token files, certificates
    let logs = tempfile::tempdir().unwrap(); // everything the run writes
    let log = |name: &str| logs.path().join(format!("{name}.log"));
    let (ca, cert, key) = make_pki(secrets.path());
    let (agent_token, admin_token, wrong_token) = (token("agent"), token("admin"), token("wrong"));
    let agent_token_file = secrets.path().join("agent-token");
    let admin_token_file = secrets.path().join("admin-token");
    let wrong_token_file = secrets.path().join("wrong-token");
    std::fs::write(&agent_token_file, format!("{agent_token}\n")).unwrap();
    std::fs::write(&admin_token_file, format!("{admin_token}\n")).unwrap();
    std::fs::write(&wrong_token_file, &wrong_token).unwrap();

    let mut sim = cmd("latmesh-sim");
    sim.args(["serve", "--listen", "127.0.0.1:0"]);
    let (_sim, sim_url) = spawn_until_line(
        "latmesh-sim",
        sim,
        "listening on ",
        Duration::from_secs(20),
        &log("sim"),
    );
    let sim_addr = sim_url.trim_start_matches("http://").to_string();

    let mut coord = cmd("latmesh");
    coord
        .env("LATMESH_LOG", "debug")
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .arg("--agent-token-file")
        .arg(&agent_token_file)
        .arg("--admin-token-file")
        .arg(&admin_token_file);
    let (mut coord, url) = spawn_until_line(
        "latmesh serve",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &log("coordinator"),
    );
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let plain_url = url.replace("https://", "http://");

    // Agents without a token, or with a wrong one, are refused and exit with a clear error.
    let intruder = |id: &str, token: Option<&str>| {
        let mut a = agent_cmd(&logs.path().join(format!("spool-{id}")));
        a.args([
            "--coordinator",
            &url,
            "--region",
            "us-east",
            "--emulate-region",
            "--agent-id",
            id,
        ])
        .arg("--ca-file")
        .arg(&ca);
        if let Some(t) = token {
            a.env("LATMESH_AGENT_TOKEN", t);
        }
        let mut p = spawn(id, a, &log(id));
        let status = wait_exit(&mut p, Duration::from_secs(30));
        assert!(!status.success(), "{id} should have been refused");
        std::fs::read_to_string(log(id)).unwrap()
    };
    let text = intruder("intruder-none", None);
    assert!(
        text.contains("refused this agent's credentials")
            && text.contains("requires an agent token")
            && text.contains("LATMESH_AGENT_TOKEN"),
        "{text}"
    );
    let text = intruder("intruder-wrong", Some(&wrong_token));
    assert!(
        text.contains("refused this agent's credentials")
            && text.contains("agent token is not valid"),
        "{text}"
    );

    // An agent with the right token but without the CA does not get past the TLS handshake.
    // An agent given http:// for the TLS coordinator is told to use https://.
    let failing_agent = |id: &str, url: &str| {
        let mut a = agent_cmd(&logs.path().join(format!("spool-{id}")));
        a.args([
            "--coordinator",
            url,
            "--region",
            "us-east",
            "--agent-id",
            id,
        ])
        .env("LATMESH_AGENT_TOKEN", &agent_token);
        let agent = spawn(id, a, &log(id));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(log(id)).unwrap();
            if text.contains("cannot reach coordinator") {
                return (agent, text);
            }
            assert!(Instant::now() < deadline, "no failure logged: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (no_ca, text) = failing_agent("no-ca-1", &url);
    assert!(text.contains("certificate"), "{text}");
    assert!(
        text.contains("give its PEM with --ca-file"),
        "a hint: {text}"
    );
    drop(no_ca);
    let (plain_agent, text) = failing_agent("plain-1", &plain_url);
    assert!(
        text.contains("the coordinator speaks TLS: use https://"),
        "{text}"
    );
    drop(plain_agent);

    // The CLI without the admin token, with a wrong one, or in plaintext, is refused.
    let agents = |url: &str| {
        let mut c = cmd("latmesh");
        c.args(["agents", "--coordinator", url])
            .arg("--ca-file")
            .arg(&ca);
        c
    };
    let out = run_cli(agents(&url), &log("cli-no-token"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("refused this control call")
            && err.contains("requires an admin token")
            && err.contains("LATMESH_ADMIN_TOKEN"),
        "{err}"
    );
    let mut c = agents(&url);
    c.arg("--admin-token-file").arg(&wrong_token_file);
    let out = run_cli(c, &log("cli-wrong-token"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("admin token is not valid"), "{err}");
    let mut c = cmd("latmesh");
    c.args(["agents", "--coordinator", &plain_url])
        .env("LATMESH_ADMIN_TOKEN", &admin_token);
    let out = run_cli(c, &log("cli-plaintext"));
    assert!(!out.status.success(), "plaintext to a TLS coordinator");
    // ... and told why: the coordinator answered the HTTP/2 preface in TLS.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the coordinator speaks TLS: use https://"),
        "{err}"
    );

    // The right agent and the right admin token run a campaign to the end.
    // (debug logs: no token in them either)
    let mut a = agent_cmd(&logs.path().join("spool-us-east-1"));
    a.env("LATMESH_LOG", "debug")
        .args([
            "--coordinator",
            &url,
            "--region",
            "us-east",
            "--emulate-region",
            "--agent-id",
            "us-east-1",
        ])
        .args(["--exit-after", "1", "--ca-file"])
        .arg(&ca)
        .arg("--token-file")
        .arg(&agent_token_file);
    let mut agent = spawn("agent us-east", a, &log("agent-us-east"));
    let file = logs.path().join("campaign.toml");
    std::fs::write(&file, CAMPAIGN.replace("{sim}", &sim_addr)).unwrap();
    let json = logs.path().join("summary.json");
    let mut c = cmd("latmesh");
    c.args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", &url, "--ca-file"])
        .arg(&ca)
        .arg("--json")
        .arg(&json)
        .env("LATMESH_ADMIN_TOKEN", &admin_token);
    let out = run_cli(c, &log("cli-launch"));
    assert!(
        out.status.success(),
        "launch failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(log("agent-us-east")).unwrap_or_default()
    );
    let summary: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(summary.complete);
    assert_eq!(summary.agents.len(), 1);
    assert_eq!(summary.agents[0].records, 2 * 2);
    let status = wait_exit(&mut agent, Duration::from_secs(20));
    assert!(status.success(), "the agent exited with {status}");

    let mut c = agents(&url);
    c.env("LATMESH_ADMIN_TOKEN", &admin_token);
    let out = run_cli(c, &log("cli-agents"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("us-east-1"), "{stdout}");
    assert!(
        !stdout.contains("intruder"),
        "refused agents are not known: {stdout}"
    );

    // The coordinator logged every refusal with the peer and the agent id.
    let _ = coord.child.kill();
    let _ = coord.child.wait();
    let text = std::fs::read_to_string(log("coordinator")).unwrap();
    let line = |needle: &str, also: &str| {
        assert!(
            text.lines().any(|l| l.contains(needle) && l.contains(also)),
            "no {needle:?} line with {also:?} in the coordinator log:\n{text}"
        );
    };
    line("refused agent: no token", "agent=\"intruder-none\"");
    line("refused agent: no token", "peer=127.0.0.1:");
    line("refused agent: wrong token", "agent=\"intruder-wrong\"");
    line("refused control call: no token", "peer=127.0.0.1:");
    line("refused control call: wrong token", "peer=127.0.0.1:");
    assert!(!text.contains("no agent token configured"), "{text}");
    // Failed TLS handshakes are warnings with the peer and the reason: the plaintext CLI and
    // agent, and the agent without the CA (which refused the coordinator's certificate).
    line("TLS handshake failed", "peer=127.0.0.1:");
    let warned = |reason: &str| {
        text.lines()
            .filter(|l| {
                l.contains("WARN") && l.contains("TLS handshake failed") && l.contains(reason)
            })
            .count()
    };
    assert!(
        warned("the peer did not speak TLS: a client given http:// instead of https://?") >= 2,
        "{text}"
    );
    assert!(warned("received fatal alert") >= 1, "{text}");

    // No token reached any file the run wrote.
    for t in [&agent_token, &admin_token, &wrong_token] {
        let found = files_containing(logs.path(), t);
        assert!(found.is_empty(), "a token was written to {found:?}");
    }
}

/// Starts `latmesh serve` with `args` (and `env`) and returns its exit status, or `None`
/// when it printed "listening on" instead (then it is killed), with its output.
fn serve_outcome(args: &[&str], env: &[(&str, &str)], log: &Path) -> (Option<bool>, String) {
    let mut c = cmd("latmesh");
    c.arg("serve").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let mut p = spawn("latmesh serve", c, log);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(status) = p.child.try_wait().unwrap() {
            return (Some(status.success()), text);
        }
        if text.contains("listening on ") {
            return (None, text);
        }
        assert!(
            Instant::now() < deadline,
            "serve neither listened nor exited: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_refuses_an_open_coordinator_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str| dir.path().join(format!("{name}.log"));
    let tokens = [
        ("LATMESH_AGENT_TOKEN", "a-token-1"),
        ("LATMESH_ADMIN_TOKEN", "b-token-2"),
    ];

    // Plaintext on a non-loopback address: refused, even with tokens.
    let (exit, text) = serve_outcome(&["--listen", "0.0.0.0:0"], &tokens, &log("plain"));
    assert_eq!(exit, Some(false), "{text}");
    assert!(
        text.contains("refusing to serve plaintext gRPC on 0.0.0.0:0")
            && text.contains("--insecure-plaintext"),
        "{text}"
    );
    // Allowed explicitly, but without tokens: still refused.
    let (exit, text) = serve_outcome(
        &["--listen", "0.0.0.0:0", "--insecure-plaintext"],
        &[],
        &log("no-tokens"),
    );
    assert_eq!(exit, Some(false), "{text}");
    assert!(
        text.contains("without an agent token") && text.contains("an admin token"),
        "{text}"
    );
    let (exit, text) = serve_outcome(
        &["--listen", "0.0.0.0:0", "--insecure-plaintext"],
        &tokens[..1],
        &log("no-admin-token"),
    );
    assert_eq!(exit, Some(false), "{text}");
    assert!(text.contains("without an admin token"), "{text}");
    // Both explicit: it listens (and is killed at once: no traffic is sent to it).
    let (exit, text) = serve_outcome(
        &["--listen", "0.0.0.0:0", "--insecure-plaintext"],
        &tokens,
        &log("explicit"),
    );
    assert_eq!(exit, None, "{text}");
    assert!(
        text.contains("serving plaintext gRPC on 0.0.0.0:"),
        "{text}"
    );

    // Loopback without tokens: dev mode, with a warning for each open role.
    let (exit, text) = serve_outcome(&["--listen", "127.0.0.1:0"], &[], &log("loopback"));
    assert_eq!(exit, None, "{text}");
    assert!(
        text.contains("no agent token configured") && text.contains("no admin token configured"),
        "{text}"
    );

    // Unusable credentials fail at startup, naming the file but never printing the token.
    let bad = dir.path().join("bad-token");
    std::fs::write(&bad, "two words").unwrap();
    let (exit, text) = serve_outcome(
        &[
            "--listen",
            "127.0.0.1:0",
            "--agent-token-file",
            bad.to_str().unwrap(),
        ],
        &[],
        &log("bad-token"),
    );
    assert_eq!(exit, Some(false), "{text}");
    assert!(
        text.contains("bad-token") && !text.contains("two words"),
        "{text}"
    );
    let (exit, text) = serve_outcome(
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            bad.to_str().unwrap(),
            "--tls-key",
            bad.to_str().unwrap(),
        ],
        &[],
        &log("bad-cert"),
    );
    assert_eq!(exit, Some(false), "{text}");
    assert!(text.contains("no PEM certificate"), "{text}");
    for t in ["a-token-1", "b-token-2"] {
        let found = files_containing(dir.path(), t);
        assert!(found.is_empty(), "a token was written to {found:?}");
    }
}
