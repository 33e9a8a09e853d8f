//! The real third-party servers of `scripts/real-servers.sh` (llama.cpp's llama-server,
//! aimock, llmock) for the tests that use them: started when they are not running, stopped
//! at the end of the test that started them.

use std::process::Command;

/// llama-server's OpenAI-compatible base URL (the script's default port).
pub const LLAMA_BASE_URL: &str = "http://127.0.0.1:18081/v1";

/// llama-server's `host:port`.
pub const LLAMA_ADDR: &str = "127.0.0.1:18081";

/// Runs `scripts/real-servers.sh cmd`.
fn script(cmd: &str) -> std::process::Output {
    Command::new("bash")
        .arg(crate::repo().join("scripts/real-servers.sh"))
        .arg(cmd)
        .output()
        .expect("bash")
}

/// Users of the servers in this process, and whether this process started them: the tests of
/// one process (plain `cargo test` runs them on threads) share one start, and the last user
/// stops what the process started.
static USERS: std::sync::Mutex<(usize, bool)> = std::sync::Mutex::new((0, false));

/// One user of the servers; the last one of the process stops them on drop if [`ensure`]
/// started them.
pub struct Servers {
    _private: (),
}

impl Drop for Servers {
    fn drop(&mut self) {
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        users.0 -= 1;
        if users.0 == 0 && users.1 {
            users.1 = false;
            let _ = script("stop");
        }
    }
}

/// The servers, started (and installed: the first run builds llama-server, ~5 min) when
/// `scripts/real-servers.sh status` says they are not all running.
///
/// # Panics
/// When the script cannot start them, with its output.
pub fn ensure() -> Servers {
    let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
    if users.0 == 0 && !script("status").status.success() {
        let out = script("start");
        assert!(
            out.status.success(),
            "scripts/real-servers.sh start failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        users.1 = true;
    }
    users.0 += 1;
    Servers { _private: () }
}
