//! Helpers for latmesh's end-to-end tests: locating the built binaries and running them as
//! child processes that are killed when dropped; [`stack`] runs a whole latmesh on loopback,
//! [`capture`] a stand-in provider that keeps the bytes agents send.
//! Generated test data draws from [`SeededRng`], the one seeded generator of the tests and
//! benchmarks (it lives in `latmesh-core`, so that the benchmarks of every crate share it).

pub mod capture;
pub mod private_clickhouse;
pub mod raw_agent;
pub mod real_servers;
pub mod stack;

pub use latmesh_core::seeded_rng::SeededRng;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Path of a workspace binary (`latmesh`, `latmesh-agent`, `latmesh-sim`) next to the test
/// executable's target directory. The test command builds them first (`cargo build --bins`).
///
/// # Panics
/// When the binary does not exist, with the command that builds it.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first",
        path.display()
    );
    path
}

/// A child process killed (SIGKILL) on drop.
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its name, for messages.
    pub name: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Environment variables that would change what a spawned process does behind a test's
/// back: the test command exports `LATMESH_CLICKHOUSE_URL` for the ClickHouse tests, and a
/// coordinator seeing it would store (and spool) too. Tests that want ClickHouse pass
/// `--clickhouse-url` explicitly.
const SCRUBBED_ENV: [&str; 2] = ["LATMESH_CLICKHOUSE_URL", "LATMESH_CLICKHOUSE_DB"];

/// Starts `cmd` with stdout piped and waits (up to `timeout`) for a stdout line starting with
/// `prefix`; returns the process and the rest of that line. Stderr goes to `log`.
///
/// # Panics
/// When the process exits or the line does not come in time.
pub fn spawn_until_line(
    name: &str,
    mut cmd: Command,
    prefix: &str,
    timeout: Duration,
    log: &std::path::Path,
) -> (Proc, String) {
    let log_file = std::fs::File::create(log).expect("log file");
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.stdout(Stdio::piped()).stderr(log_file);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = prefix.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(&wanted) {
                let _ = tx.send(rest.trim().to_string());
            }
        }
    });
    let deadline = Instant::now() + timeout;
    let proc = Proc {
        child,
        name: name.to_string(),
    };
    let line = rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .unwrap_or_else(|_| panic!("{name} did not print {prefix:?}; see {}", log.display()));
    (proc, line)
}

/// Starts `cmd` with output to `log`, killed on drop.
///
/// # Panics
/// When it cannot start.
pub fn spawn(name: &str, mut cmd: Command, log: &std::path::Path) -> Proc {
    let log_file = std::fs::File::create(log).expect("log file");
    cmd.stdout(log_file.try_clone().expect("clone"))
        .stderr(log_file);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    Proc {
        child,
        name: name.to_string(),
    }
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The workspace root.
pub fn repo() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

/// A real ClickHouse shared by the tests of one process: `LATMESH_CLICKHOUSE_URL` when set
/// (the test command starts one and sets it), else the one `scripts/clickhouse.sh start`
/// runs (started on first use).
///
/// # Panics
/// When the script fails or prints no URL.
pub fn clickhouse_url() -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("LATMESH_CLICKHOUSE_URL")
            && !url.trim().is_empty()
        {
            return url.trim().to_string();
        }
        let out = Command::new("bash")
            .arg(repo().join("scripts/clickhouse.sh"))
            .arg("start")
            .output()
            .expect("run scripts/clickhouse.sh");
        assert!(
            out.status.success(),
            "scripts/clickhouse.sh start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find(|l| l.starts_with("http://"))
            .expect("scripts/clickhouse.sh printed the URL")
            .to_string()
    })
}

/// A client of [`clickhouse_url`] and a database name no other test uses (unique per
/// process, call and time); the database itself is created by migrating.
pub fn fresh_db(test: &str) -> (clickhouse::Client, String) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    let db = format!(
        "lmtest_{test}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    );
    (latmesh_store::client(clickhouse_url()), db)
}

/// Drops database `db`.
///
/// # Panics
/// When ClickHouse refuses.
pub async fn drop_db(client: &clickhouse::Client, db: &str) {
    client
        .query(&format!("DROP DATABASE IF EXISTS {db}"))
        .execute()
        .await
        .expect("drop database");
}

/// Waits (up to `timeout`) for `proc` to exit and returns its status.
///
/// # Panics
/// When it is still running after `timeout`.
pub fn wait_exit(proc: &mut Proc, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = proc.child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not exit within {timeout:?}",
            proc.name
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every file under `dir` (recursively) whose bytes contain `needle`: for checking that a
/// secret (a token, a canary API key) reached none of the files a run wrote.
pub fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes
                    .windows(needle.len().max(1))
                    .any(|w| w == needle.as_bytes())
            {
                found.push(path);
            }
        }
    }
    found
}

/// A TCP proxy on loopback in front of `target`, for chaos tests: it forwards bytes both
/// ways until told to [`hold`](TcpProxy::hold) them (nothing passes, in either direction, as
/// if the network stalled) or to [`cut`](TcpProxy::cut) every open connection (both ends see
/// a reset/EOF, as if the network dropped). New connections are accepted all along.
pub struct TcpProxy {
    /// Where clients connect.
    pub addr: std::net::SocketAddr,
    shared: std::sync::Arc<ProxyShared>,
}

#[derive(Default)]
struct ProxyShared {
    held: std::sync::atomic::AtomicBool,
    stopped: std::sync::atomic::AtomicBool,
    /// Both sockets of every connection, for `cut`, and a generation that `cut` bumps.
    conns: std::sync::Mutex<Vec<std::net::TcpStream>>,
    generation: std::sync::atomic::AtomicU64,
}

impl TcpProxy {
    /// Starts a proxy to `target` on a free loopback port.
    ///
    /// # Panics
    /// When it cannot bind.
    pub fn start(target: std::net::SocketAddr) -> TcpProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = std::sync::Arc::new(ProxyShared::default());
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(upstream) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                let generation = s.generation.load(Ordering::SeqCst);
                if let (Ok(c), Ok(u)) = (client.try_clone(), upstream.try_clone()) {
                    s.conns
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend([c, u]);
                }
                for (from, to) in [
                    (client.try_clone(), upstream.try_clone()),
                    (upstream.try_clone(), client.try_clone()),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let s = s.clone();
                    std::thread::spawn(move || pump(from, to, &s, generation));
                }
            }
        });
        TcpProxy { addr, shared }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops (`true`) or resumes (`false`) forwarding on every connection.
    pub fn hold(&self, held: bool) {
        self.shared
            .held
            .store(held, std::sync::atomic::Ordering::SeqCst);
    }

    /// Closes every open connection (what was held is dropped); later ones pass again.
    pub fn cut(&self) {
        use std::sync::atomic::Ordering;
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
        for c in self
            .shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut();
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// Copies `from` to `to` until either closes or the connection is cut; while held, keeps
/// what it read and reads nothing more.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    s: &ProxyShared,
    generation: u64,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let live = || s.generation.load(Ordering::SeqCst) == generation;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while s.held.load(Ordering::SeqCst) && live() {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !live() || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Runs `latmesh campaign verify CAMPAIGN_ID` against database `db` of the ClickHouse at
/// `ch_url` every 0.5 s until it succeeds (the coordinator's spool drains meanwhile), for at
/// most 90 s; asserts that it then reports `0 lost, 0 duplicated, 0 measured twice` and
/// returns its output (stdout then stderr).
///
/// # Panics
/// When it has not succeeded after 90 s, or succeeded with anything but 0 lost, 0 duplicated,
/// 0 measured twice.
pub fn verify_until_clean(ch_url: &str, db: &str, campaign_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (ok, text) = verify(ch_url, db, campaign_id);
        if ok {
            assert!(
                text.contains(": 0 lost, 0 duplicated, 0 measured twice"),
                "{text}"
            );
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "verify never reached 0 lost, 0 duplicated:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `latmesh campaign verify` of `campaign_id` in database `db` at `ch_url`, once: whether it
/// succeeded, and its output (stdout then stderr).
pub fn verify(ch_url: &str, db: &str, campaign_id: &str) -> (bool, String) {
    let out = Command::new(bin("latmesh"))
        .args([
            "campaign",
            "verify",
            campaign_id,
            "--clickhouse-url",
            ch_url,
        ])
        .args(["--clickhouse-db", db])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The result of `sql` as rows of TSV fields, run on `rt` (for tests that are not async).
///
/// # Panics
/// When the query fails.
pub fn tsv(
    rt: &tokio::runtime::Runtime,
    client: &clickhouse::Client,
    sql: &str,
) -> Vec<Vec<String>> {
    let bytes = rt.block_on(async {
        client
            .query(sql)
            .fetch_bytes("TSV")
            .unwrap()
            .collect()
            .await
            .unwrap()
    });
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}
