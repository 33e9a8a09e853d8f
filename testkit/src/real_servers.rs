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

/// Stops the servers on drop if [`ensure`] started them.
pub struct Servers {
    started_here: bool,
}

impl Drop for Servers {
    fn drop(&mut self) {
        if self.started_here {
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
    if script("status").status.success() {
        return Servers {
            started_here: false,
        };
    }
    let out = script("start");
    assert!(
        out.status.success(),
        "scripts/real-servers.sh start failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Servers { started_here: true }
}
