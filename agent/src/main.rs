//! `latmesh-agent`: connects to a coordinator and runs the campaigns it pushes.

use clap::Parser;

/// latmesh agent: measures providers from one region for a coordinator.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Coordinator gRPC URL.
    #[arg(
        long,
        env = "LATMESH_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
    /// Region this agent measures from (e.g. us-east).
    #[arg(long, env = "LATMESH_REGION")]
    region: String,
    /// Stable agent id (default: REGION-HOSTNAME).
    #[arg(long, env = "LATMESH_AGENT_ID")]
    agent_id: Option<String>,
    /// Exit after this many campaigns are finished and acked.
    #[arg(long)]
    exit_after: Option<usize>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LATMESH_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "agent".into());
    let agent_id = args
        .agent_id
        .unwrap_or_else(|| format!("{}-{host}", args.region));
    let mut cfg = latmesh_agent::AgentConfig::new(&args.coordinator, &agent_id, &args.region);
    cfg.exit_after_campaigns = args.exit_after;
    match latmesh_agent::run(cfg).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
