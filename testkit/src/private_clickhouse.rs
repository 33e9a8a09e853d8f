//! A ClickHouse server of one test's own: `scripts/clickhouse.sh` with a private state
//! directory and two free loopback ports, so that a test can stop, restart or stall (SIGSTOP)
//! it without disturbing the server the other tests share ([`crate::clickhouse_url`]).

use std::process::{Command, Output};

/// A private ClickHouse server; on drop resumed (SIGCONT, should it be stalled) and stopped.
pub struct PrivateClickhouse {
    dir: tempfile::TempDir,
    http_port: u16,
    tcp_port: u16,
}

impl Default for PrivateClickhouse {
    fn default() -> PrivateClickhouse {
        PrivateClickhouse::new()
    }
}

impl PrivateClickhouse {
    /// A server with its own state directory and free ports, not started yet.
    pub fn new() -> PrivateClickhouse {
        PrivateClickhouse {
            dir: tempfile::tempdir().expect("temporary directory"),
            http_port: crate::free_port(),
            tcp_port: crate::free_port(),
        }
    }

    /// A new server, started.
    ///
    /// # Panics
    /// As [`PrivateClickhouse::start`].
    pub fn started() -> PrivateClickhouse {
        let ch = PrivateClickhouse::new();
        ch.start();
        ch
    }

    /// Its HTTP URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Starts the server (installs ClickHouse first if needed) and waits until it answers.
    ///
    /// # Panics
    /// When the script fails, with its stderr.
    pub fn start(&self) {
        self.run("start");
    }

    /// Stops the server (SIGTERM, SIGKILL after a grace period).
    ///
    /// # Panics
    /// When the script fails, with its stderr.
    pub fn stop(&self) {
        self.run("stop");
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to the running server: every thread of it stops,
    /// its sockets keep accepting and buffering what clients send.
    ///
    /// # Panics
    /// When the server has no pid file (not started) or `kill` fails.
    pub fn stall(&self, stopped: bool) {
        let pid = self.pid().expect("a started server's pid file");
        let sig = if stopped { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// The server's pid, from the script's pid file.
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.path().join("clickhouse-server.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Runs `scripts/clickhouse.sh verb`; panics with its stderr when it fails.
    fn run(&self, verb: &str) {
        let out = self.script(verb);
        assert!(
            out.status.success(),
            "scripts/clickhouse.sh {verb} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `scripts/clickhouse.sh verb` on this server's state directory and ports.
    fn script(&self, verb: &str) -> Output {
        Command::new("bash")
            .arg(crate::repo().join("scripts/clickhouse.sh"))
            .args([verb, "--state-dir"])
            .arg(self.dir.path())
            .env("LATMESH_CLICKHOUSE_HTTP_PORT", self.http_port.to_string())
            .env("LATMESH_CLICKHOUSE_TCP_PORT", self.tcp_port.to_string())
            .output()
            .expect("run scripts/clickhouse.sh")
    }
}

impl Drop for PrivateClickhouse {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
        let _ = self.script("stop");
    }
}
