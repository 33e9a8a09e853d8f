//! `latmesh-sim`: run the simulated providers, replay a recorded response, or list profiles.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use latmesh_sim::{ProviderProfile, SimConfig, all_builtin_profiles};
use tokio::net::TcpListener;

/// Simulated LLM inference providers for latmesh (OpenAI Chat Completions, Anthropic Messages,
/// OpenAI Responses).
#[derive(Parser, Debug)]
#[command(name = "latmesh-sim", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the simulated providers at http://ADDR/{provider}/v1 (/chat/completions,
    /// /messages, /responses).
    Serve {
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Seed of the per-request RNGs.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Multiply every server-side delay by this factor (0.1 = ten times faster).
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
        /// Serve the profiles of this JSON file (an array of profiles) instead of the built-ins.
        #[arg(long)]
        profiles: Option<PathBuf>,
        /// Ground truth (GET /_truth/{probe_id}): keep the last N probe ids (0 = off).
        #[arg(long, default_value_t = latmesh_sim::truth::DEFAULT_TRUTH_CAPACITY)]
        truth_capacity: usize,
        /// Ground truth for every request, also those without x-latmesh-probe-id (kept as
        /// `unlabeled-N`); `GET /_truth` lists them all, one JSON object per line (for other
        /// benchmark clients: scripts/bench-peers.sh).
        #[arg(long)]
        truth_all: bool,
    },
    /// Serve one recorded body (FILE.sse, with FILE.expect.json beside it) to every
    /// POST .../chat/completions, .../messages or .../responses.
    Replay {
        /// The `.sse` body file.
        file: PathBuf,
        /// Address to listen on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// List the built-in providers: the nine demo providers, the seven compatibility trap
    /// providers, then the three exact lab providers (long contexts, SLO rates).
    Providers,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    match run(Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            listen,
            seed,
            time_scale,
            profiles,
            truth_capacity,
            truth_all,
        } => {
            anyhow::ensure!(
                !(truth_all && truth_capacity == 0),
                "--truth-all records nothing with --truth-capacity 0: give it room (default {})",
                latmesh_sim::truth::DEFAULT_TRUTH_CAPACITY
            );
            let profiles = match profiles {
                Some(path) => {
                    let raw = std::fs::read(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    serde_json::from_slice::<Vec<ProviderProfile>>(&raw)
                        .with_context(|| format!("parsing {}", path.display()))?
                }
                None => all_builtin_profiles(),
            };
            let cfg = SimConfig {
                seed,
                profiles,
                time_scale,
                truth: if truth_all {
                    latmesh_sim::TruthLog::recording_all(truth_capacity)
                } else {
                    latmesh_sim::TruthLog::new(truth_capacity)
                },
                ..SimConfig::default()
            };
            cfg.validate().map_err(anyhow::Error::msg)?;
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let addr = listener.local_addr()?;
            println!("listening on http://{addr}");
            for p in &cfg.profiles {
                println!("{:<14} http://{addr}/{}/v1", p.name, p.name);
            }
            latmesh_sim::serve_providers(listener, cfg).await?;
        }
        Command::Replay { file, listen } => {
            // Load first so a bad file fails before we claim to listen.
            latmesh_sim::ReplayCase::load(&file)?;
            let listener = TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            println!("listening on http://{}", listener.local_addr()?);
            latmesh_sim::serve_replay(listener, &file).await?;
        }
        Command::Providers => {
            for p in all_builtin_profiles() {
                println!("{:<14} {:<13} {}", p.name, p.home_region, p.description);
            }
        }
    }
    Ok(())
}
