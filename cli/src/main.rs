//! `latmesh`: the coordinator and CLI.

use clap::Parser;
use latmesh_cli::{Cli, cmd as cli};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    quiet_on_closed_stdout();
    let args = Cli::parse();
    latmesh_core::logging::init(args.default_log_level());
    match cli::run_with(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", latmesh_core::error_text::chain(e.as_ref()));
            // 1, or a finished measurement's own status (latmesh_cli::exit_status).
            std::process::ExitCode::from(latmesh_cli::exit_status::code_of(&e))
        }
    }
}

/// Exit status when stdout was closed under us: 128 + SIGPIPE, what a shell reports for a
/// program SIGPIPE ended.
const CLOSED_STDOUT_STATUS: u8 = 141;

/// `latmesh … | head` ends quietly, as other command-line tools do, instead of with a panic
/// ("failed printing to stdout: Broken pipe"): the CLI prints with `println!` only.
///
/// SIGPIPE itself stays ignored (Rust's default): with its default action, any write to a
/// socket whose peer has gone (the TLS alert to a plain-http server that already hung up, a
/// gRPC frame to an agent that vanished) would kill the whole process, since tokio writes
/// vectored data with `writev`, which raises it.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        // std's message: "failed printing to stdout: Broken pipe (os error 32)".
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(i32::from(CLOSED_STDOUT_STATUS));
        }
        default(info);
    }));
}
