//! The `latmesh` command line: coordinator server, campaigns, agents, demo, one-off probe.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use latmesh_core::campaign;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_proto::pb;
use tokio::net::TcpListener;

use crate::service::Coordinator;
use crate::state::State;
use crate::{demo, watch};

/// latmesh: latency of OpenAI-compatible inference providers, measured from many regions.
#[derive(Parser, Debug)]
#[command(name = "latmesh", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the coordinator: serve agents and the control API.
    Serve {
        /// Address to listen on (gRPC, plaintext: loopback or a private network only).
        #[arg(long, env = "LATMESH_LISTEN", default_value = "127.0.0.1:7700")]
        listen: String,
    },
    /// Campaigns: validate a file, or launch it and print the matrix.
    #[command(subcommand)]
    Campaign(CampaignCmd),
    /// List the agents known to the coordinator.
    Agents {
        #[command(flatten)]
        coord: CoordinatorArg,
    },
    /// Run a local demo: simulator with nine providers, coordinator, three agents; prints the
    /// region × provider matrix.
    Demo {
        /// Also write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Rounds to run (default: the embedded campaign's 20).
        #[arg(long)]
        rounds: Option<u32>,
    },
    /// Send one request to a provider and print what was measured (a connectivity check).
    Probe(ProbeArgs),
}

#[derive(Args, Debug)]
struct CoordinatorArg {
    /// Coordinator URL.
    #[arg(
        long,
        env = "LATMESH_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
}

#[derive(Subcommand, Debug)]
enum CampaignCmd {
    /// Check a campaign file and print the plan summary (no network).
    Validate {
        /// Campaign file (TOML or YAML).
        file: PathBuf,
    },
    /// Launch a campaign on the coordinator, follow it, print the matrix.
    Launch {
        /// Campaign file (TOML or YAML).
        file: PathBuf,
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Seconds between launch and round 0.
        #[arg(long, default_value_t = 2.0)]
        start_delay_s: f64,
        /// Wait this long for an agent in every region before launching.
        #[arg(long, default_value_t = 30.0)]
        wait_agents_s: f64,
    },
}

#[derive(Args, Debug)]
struct ProbeArgs {
    /// Base URL of the OpenAI-compatible API (…/v1).
    #[arg(long)]
    base_url: String,
    /// Model id.
    #[arg(long)]
    model: String,
    /// Prompt text (user message).
    #[arg(long, default_value = "Say hello in five words.")]
    prompt: String,
    /// Ask for a non-streaming response.
    #[arg(long)]
    no_stream: bool,
    /// max_tokens.
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Name of the environment variable holding the API key.
    #[arg(long)]
    api_key_env: Option<String>,
    /// Include the generated text in the output.
    #[arg(long)]
    show_text: bool,
    /// Print JSON (the default; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
    /// Total timeout, seconds.
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
}

/// Parses the process arguments and runs the command.
///
/// # Errors
/// Whatever the command fails with; `main` prints it and exits non-zero.
pub async fn run() -> anyhow::Result<()> {
    run_with(Cli::parse()).await
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run_with(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { listen } => {
            let listener = TcpListener::bind(&listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            println!("listening on http://{}", listener.local_addr()?);
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            Coordinator::new(State::default())
                .serve(listener, shutdown)
                .await?;
            Ok(())
        }
        Command::Campaign(CampaignCmd::Validate { file }) => {
            let plan = campaign::load_file(&file)?;
            println!(
                "{}: ok — campaign {:?}, {} regions, {} providers, {} scenarios, {} rounds, {} probes per agent, plan {}",
                file.display(),
                plan.name,
                plan.regions.len(),
                plan.providers.len(),
                plan.scenarios.len(),
                plan.rounds.count,
                plan.probes_per_agent(),
                &plan.hash()[..12]
            );
            Ok(())
        }
        Command::Campaign(CampaignCmd::Launch {
            file,
            coord,
            json,
            start_delay_s,
            wait_agents_s,
        }) => {
            let plan = campaign::load_file(&file)?;
            let mut client = watch::connect(&coord.coordinator).await?;
            watch::wait_for_agents(
                &mut client,
                &plan.regions,
                Duration::from_secs_f64(wait_agents_s.max(0.0)),
            )
            .await?;
            let reply = watch::launch(&mut client, &plan, start_delay_s).await?;
            eprintln!(
                "launched campaign {} on {} agents",
                reply.campaign_id,
                reply.agent_ids.len()
            );
            let summary =
                watch::follow(&mut client, &reply.campaign_id, Duration::from_secs(5)).await?;
            print!("{}", summary.render());
            if let Some(path) = json {
                watch::write_json(&summary, &path)?;
                eprintln!("summary written to {}", path.display());
            }
            anyhow::ensure!(
                summary.complete,
                "campaign {} is incomplete: some agents did not deliver all their results before the deadline",
                reply.campaign_id
            );
            Ok(())
        }
        Command::Agents { coord } => {
            let mut client = watch::connect(&coord.coordinator).await?;
            let agents = client
                .list_agents(pb::ListAgentsRequest {})
                .await?
                .into_inner()
                .agents;
            if agents.is_empty() {
                println!("no agents");
            }
            for a in agents {
                println!(
                    "{:<20} {:<14} {:<8} {:<12} clock offset {:+} µs ± {} µs",
                    a.agent_id,
                    a.region,
                    a.version,
                    if a.connected {
                        "connected"
                    } else {
                        "disconnected"
                    },
                    a.clock_offset_us,
                    a.clock_uncertainty_us
                );
            }
            Ok(())
        }
        Command::Demo { json, rounds } => {
            let started = std::time::Instant::now();
            let summary = demo::run(demo::DemoOptions {
                rounds,
                progress: true,
            })
            .await?;
            print!("{}", summary.render());
            let path = json.unwrap_or_else(|| PathBuf::from(".latmesh/demo-summary.json"));
            watch::write_json(&summary, &path)?;
            eprintln!(
                "demo finished in {:.0} s; JSON summary: {}",
                started.elapsed().as_secs_f64(),
                path.display()
            );
            Ok(())
        }
        Command::Probe(args) => probe(args).await,
    }
}

async fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let api_key = match &args.api_key_env {
        Some(name) => Some(
            std::env::var(name)
                .with_context(|| format!("--api-key-env {name}: the variable is not set"))?,
        ),
        None => None,
    };
    let prober = latmesh_agent::probe::Prober::new(None)?;
    let messages = [Message {
        role: "user".into(),
        content: args.prompt.clone(),
    }];
    let timeouts = Timeouts {
        total_s: args.timeout_s,
        ..Timeouts::default()
    };
    let req = latmesh_agent::probe::ProbeRequest {
        base_url: args.base_url.trim_end_matches('/'),
        model_id: &args.model,
        api_key: api_key.as_deref(),
        messages: &messages,
        stream: !args.no_stream,
        max_tokens: args.max_tokens,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
    };
    let result = prober.probe(&req, args.show_text).await;
    let out = latmesh_agent::probe::ProbeOutput::new(&result, args.show_text);
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
