//! The `latmesh-sim` binary: `serve` and `replay` print `listening on http://ADDR` with the
//! real port when given `--listen 127.0.0.1:0`, and then answer.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

struct Running {
    child: Child,
    lines: Vec<String>,
    addr: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the binary and read stdout up to `want_lines` lines.
fn run(args: &[&str], want_lines: usize) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_latmesh-sim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..want_lines {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        lines.push(line.trim_end().to_string());
    }
    let addr = lines[0]
        .strip_prefix("listening on http://")
        .expect("first line")
        .to_string();
    Running { child, lines, addr }
}

/// One raw HTTP/1.1 POST with `connection: close`; returns the whole response.
fn post(addr: &str, path: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    String::from_utf8_lossy(&resp).into_owned()
}

#[test]
fn serve_prints_address_and_base_urls() {
    // The address, then the nine demo providers, the seven trap providers and the three lab
    // providers (all read: the server must not find its stdout closed).
    let r = run(&["serve", "--listen", "127.0.0.1:0", "--seed", "3"], 20);
    assert!(!r.addr.ends_with(":0"));
    assert!(r.lines[1].starts_with("fast-lane"));
    assert!(r.lines[1].ends_with(&format!("http://{}/fast-lane/v1", r.addr)));
    assert!(r.lines[9].contains("/slow-prefill/v1"));
    assert!(r.lines[10].contains("/no-json/v1"));
    assert!(r.lines[16].contains("/locked/v1"));
    assert!(r.lines[17].contains("/slo-lab/v1"));
    assert!(r.lines[19].contains("/short-ctx/v1"));
    let resp = post(
        &r.addr,
        "/steady/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}"#,
    );
    assert!(resp.starts_with("HTTP/1.1 200"));
    assert!(resp.contains("data: [DONE]"));
}

#[test]
fn replay_prints_real_port_and_serves_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let sse: PathBuf = dir.path().join("01-x.sse");
    std::fs::write(&sse, "data: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n").unwrap();
    std::fs::write(
        dir.path().join("01-x.expect.json"),
        r#"{"http":{"status":200,"headers":{"content-type":"text/event-stream"}}}"#,
    )
    .unwrap();
    let r = run(
        &["replay", sse.to_str().unwrap(), "--listen", "127.0.0.1:0"],
        1,
    );
    assert!(!r.addr.ends_with(":0"));
    let resp = post(&r.addr, "/v1/chat/completions", "{}");
    assert!(resp.starts_with("HTTP/1.1 200"));
    assert!(
        resp.to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    assert!(resp.contains("data: {\"choices\":[]}\r\n\r\ndata: [DONE]\r\n\r\n"));
}

#[test]
fn providers_lists_the_nine_demo_seven_trap_and_three_lab_providers() {
    let out = Command::new(env!("CARGO_BIN_EXE_latmesh-sim"))
        .arg("providers")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 19);
    assert!(text.contains("throttler") && text.contains("429"));
    let traps: Vec<&str> = text.lines().skip(9).collect();
    for (line, name) in traps.iter().zip([
        "no-json",
        "strict-gateway",
        "thinker",
        "renamer",
        "quantized",
        "swapper",
        "locked",
    ]) {
        assert!(line.starts_with(name) && line.contains("trap: "), "{line}");
    }
    let lab: Vec<&str> = text.lines().skip(16).collect();
    assert_eq!(lab.len(), 3);
    for (line, name) in lab.iter().zip(["slo-lab", "long-ctx", "short-ctx"]) {
        assert!(line.starts_with(name) && line.contains("lab: "), "{line}");
    }
}
