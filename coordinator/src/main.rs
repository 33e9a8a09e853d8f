//! `latmesh`: the coordinator and CLI.

use clap::Parser;
use latmesh_coordinator::cli::{self, Cli};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // `latmesh … | head` ends quietly like other command-line tools instead of panicking on a
    // closed pipe (Rust ignores SIGPIPE by default).
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread writes to a pipe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LATMESH_LOG")
                .unwrap_or_else(|_| args.default_log_level().into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match cli::run_with(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
