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
        #[command(flatten)]
        store: StoreArgs,
    },
    /// ClickHouse schema.
    #[command(subcommand)]
    Db(DbCmd),
    /// Questions answered from ClickHouse.
    #[command(subcommand)]
    Query(crate::cli_query::QueryCmd),
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
        /// Write the JSON summary here (default: .latmesh/demo-summary.json).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Rounds to run (default: the embedded campaign's 20).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: Option<u32>,
        /// Also store the results in this ClickHouse (HTTP URL), through a spool in
        /// .latmesh/demo-spool.
        #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
        clickhouse_url: Option<String>,
        /// ClickHouse database.
        #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
        clickhouse_db: String,
    },
    /// Send one request to a provider and print what was measured (a connectivity check).
    Probe(ProbeArgs),
}

/// Where results are stored durably.
#[derive(Args, Debug, Clone)]
struct StoreArgs {
    /// ClickHouse HTTP URL (e.g. http://127.0.0.1:8123): every acked batch is spooled on disk,
    /// then written there. Without it results live in memory only.
    #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
    clickhouse_url: Option<String>,
    /// ClickHouse database.
    #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
    clickhouse_db: String,
    /// Spool directory (batches wait here, fsync'd, until ClickHouse has them).
    #[arg(long, default_value = ".latmesh/coordinator/spool")]
    spool_dir: PathBuf,
    /// Largest spool, MiB; beyond it batches are not acked (agents keep and resend them).
    #[arg(long, default_value_t = 1024)]
    spool_max_mib: u64,
}

#[derive(Subcommand, Debug)]
enum DbCmd {
    /// Create or update the schema (idempotent).
    Migrate {
        /// ClickHouse HTTP URL.
        #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
        clickhouse_url: String,
        /// Database.
        #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
        clickhouse_db: String,
        /// Cluster name: create replicated tables ON CLUSTER with Distributed tables in front.
        #[arg(long)]
        cluster: Option<String>,
        /// Print the DDL instead of running it.
        #[arg(long)]
        print: bool,
    },
}

#[derive(Args, Debug)]
struct CoordinatorArg {
    /// Coordinator URL (`host:port` means `http://host:port`).
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
    /// Reconcile what agents reported with the rows in ClickHouse: lost and duplicated counts
    /// (exits non-zero unless both are 0).
    Verify {
        /// Campaign id.
        campaign_id: String,
        #[command(flatten)]
        ch: crate::cli_query::ClickhouseArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Follow a running campaign (e.g. after the launching terminal went away) and print its
    /// matrix when it finishes.
    Watch {
        /// Campaign id, as `launch` printed it.
        campaign_id: String,
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
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

impl Cli {
    /// The log level when `LATMESH_LOG` is unset: `info` for the long-running coordinator,
    /// `warn` for commands whose output is the point.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Serve { .. } => "info",
            _ => "warn",
        }
    }
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run_with(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { listen, store } => {
            let listener = TcpListener::bind(&listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            let (coordinator, sink) = coordinator_with_store(&store)?;
            println!("listening on http://{}", listener.local_addr()?);
            let shutdown = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            let served = coordinator.serve(listener, shutdown).await;
            if let Some(sink) = sink {
                sink.abort();
            }
            served?;
            Ok(())
        }
        Command::Db(DbCmd::Migrate {
            clickhouse_url,
            clickhouse_db,
            cluster,
            print,
        }) => {
            if print {
                for m in crate::clickhouse::MIGRATIONS {
                    for stmt in crate::clickhouse::render_migration(
                        m.sql,
                        &clickhouse_db,
                        cluster.as_deref(),
                    )? {
                        println!("{stmt};\n");
                    }
                }
                return Ok(());
            }
            let client = crate::clickhouse::client(&clickhouse_url);
            let applied = crate::clickhouse::migrate(&client, &clickhouse_db, cluster.as_deref())
                .await
                .with_context(|| format!("ClickHouse at {clickhouse_url}"))?;
            if applied.is_empty() {
                println!("{clickhouse_db}: up to date");
            } else {
                println!("{clickhouse_db}: applied {}", applied.join(", "));
            }
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
                "launched campaign {} on {} agents (follow it from elsewhere with: latmesh campaign watch {})",
                reply.campaign_id,
                reply.agent_ids.len(),
                reply.campaign_id
            );
            report(&mut client, &reply.campaign_id, json.as_deref()).await
        }
        Command::Query(q) => crate::cli_query::run_query(q).await,
        Command::Campaign(CampaignCmd::Verify {
            campaign_id,
            ch,
            json,
        }) => {
            let (lines, lost, duplicated) = crate::cli_query::verify(&ch, &campaign_id).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"lost": lost, "duplicated": duplicated, "agents": lines})
                    )?
                );
            } else {
                println!(
                    "{:<20} {:>9} {:>9} {:>6} {:>6}  missing seqs",
                    "AGENT", "REPORTED", "STORED", "LOST", "DUP"
                );
                for l in &lines {
                    println!(
                        "{:<20} {:>9} {:>9} {:>6} {:>6}  {:?}",
                        l.agent_id,
                        l.reported_records,
                        l.stored_records,
                        l.lost,
                        l.duplicated,
                        l.missing_seqs
                    );
                }
                println!("campaign {campaign_id}: {lost} lost, {duplicated} duplicated");
            }
            anyhow::ensure!(
                lost == 0 && duplicated == 0,
                "campaign {campaign_id}: {lost} lost, {duplicated} duplicated"
            );
            Ok(())
        }
        Command::Campaign(CampaignCmd::Watch {
            campaign_id,
            coord,
            json,
        }) => {
            let mut client = watch::connect(&coord.coordinator).await?;
            report(&mut client, &campaign_id, json.as_deref()).await
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
            } else {
                println!(
                    "{:<20} {:<14} {:<8} {:<12} clock offset to the coordinator",
                    "AGENT", "REGION", "VERSION", "STATE"
                );
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
        Command::Demo {
            json,
            rounds,
            clickhouse_url,
            clickhouse_db,
        } => {
            let started = std::time::Instant::now();
            let store = clickhouse_url.map(|url| demo::DemoStore {
                url,
                db: clickhouse_db,
                spool_dir: PathBuf::from(demo::DEMO_SPOOL_DIR),
            });
            let summary = demo::run(demo::DemoOptions {
                rounds,
                progress: true,
                clickhouse: store.clone(),
            })
            .await?;
            if let Some(store) = &store {
                eprintln!(
                    "stored in ClickHouse {} (database {}): latmesh query matrix --campaign {} --clickhouse-url {} --clickhouse-db {}",
                    store.url, store.db, summary.campaign_id, store.url, store.db
                );
            }
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

/// A coordinator, with a spool and a ClickHouse sink task when `store` names a ClickHouse.
///
/// # Errors
/// The spool cannot be opened.
fn coordinator_with_store(
    store: &StoreArgs,
) -> anyhow::Result<(Coordinator, Option<tokio::task::JoinHandle<()>>)> {
    let Some(url) = &store.clickhouse_url else {
        return Ok((Coordinator::new(State::default()), None));
    };
    let target = crate::sink::SinkTarget {
        client: crate::clickhouse::client(url),
        db: store.clickhouse_db.clone(),
    };
    let (coordinator, _spool, sink) = crate::sink::coordinator_with_sink(
        &store.spool_dir,
        store.spool_max_mib.saturating_mul(1 << 20),
        target,
    )?;
    Ok((coordinator, Some(sink)))
}

/// Follows a campaign, prints its matrix, writes the JSON; fails when it is incomplete.
async fn report(
    client: &mut latmesh_proto::pb::control_client::ControlClient<tonic::transport::Channel>,
    campaign_id: &str,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        watch::check_writable(path)?;
    }
    let summary = watch::follow(client, campaign_id, Duration::from_secs(5)).await?;
    print!("{}", summary.render());
    if let Some(path) = json {
        watch::write_json(&summary, path)?;
        eprintln!("summary written to {}", path.display());
    }
    anyhow::ensure!(
        summary.complete,
        "campaign {campaign_id} is incomplete: some agents did not deliver every probe (see INCOMPLETE above)"
    );
    Ok(())
}

async fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let api_key = match &args.api_key_env {
        Some(name) => Some(
            std::env::var(name)
                .with_context(|| format!("--api-key-env {name}: the variable is not set"))?,
        ),
        None => None,
    };
    let base_url =
        campaign::check_base_url(&args.base_url).map_err(|m| anyhow::anyhow!("--base-url: {m}"))?;
    let prober = latmesh_agent::probe::Prober::new(None)?;
    let messages = [Message::new("user", args.prompt.clone())];
    let timeouts = Timeouts {
        total_s: args.timeout_s,
        ..Timeouts::default()
    };
    let req = latmesh_agent::probe::ProbeRequest {
        base_url: &base_url,
        model_id: &args.model,
        api_key: api_key.as_deref(),
        messages: &messages,
        stream: !args.no_stream,
        max_tokens: args.max_tokens,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
    };
    let result = prober.probe(&req, args.show_text).await;
    let out = latmesh_agent::probe::ProbeOutput::new(&result, args.show_text);
    println!("{}", serde_json::to_string_pretty(&out)?);
    let outcome = out.record.outcome();
    anyhow::ensure!(
        outcome == latmesh_core::record::Outcome::Ok,
        "the probe's outcome is {outcome} (see the record above)"
    );
    Ok(())
}
