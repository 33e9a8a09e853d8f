//! The `latmesh` command line: coordinator server, campaigns, agents, demo, one-off probe.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use latmesh_core::campaign;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_proto::pb;
use latmesh_proto::pb::control_client::ControlClient;
use tokio::net::TcpListener;

use crate::watch;
use crate::watch::{AdminClient, AdminToken};
use latmesh_coordinator::auth::{ADMIN_TOKEN_ENV, AGENT_TOKEN_ENV, Auth, Secret};
use latmesh_coordinator::service::Coordinator;
use latmesh_coordinator::state::State;

pub mod check;
pub mod demo;
pub mod query;
pub mod series;

/// latmesh: latency of OpenAI-compatible inference providers, measured from many regions.
#[derive(Parser, Debug)]
#[command(
    name = "latmesh",
    version,
    about,
    after_help = "Logs go to stderr; LATMESH_LOG sets their filter (`debug`, `latmesh_coordinator=debug,info`; default: info for `serve`, warn otherwise)."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the coordinator: serve agents and the control API.
    ///
    /// Agents authenticate with the agent token (LATMESH_AGENT_TOKEN or --agent-token-file),
    /// control calls (campaign launch/watch, agents) with the admin token (LATMESH_ADMIN_TOKEN
    /// or --admin-token-file): `authorization: Bearer <token>`. On a loopback address both may
    /// be left unset (dev mode: anyone on this host is let in, with a warning); on any other
    /// address serve needs TLS (--tls-cert, --tls-key) and both tokens, unless
    /// --insecure-plaintext or --insecure-no-auth say otherwise.
    #[command(verbatim_doc_comment)]
    Serve {
        /// Address to listen on (`127.0.0.1:7700`; `0.0.0.0:7700` for agents on other hosts,
        /// which needs TLS and tokens).
        #[arg(long, env = "LATMESH_LISTEN", default_value = "127.0.0.1:7700")]
        listen: String,
        /// Serve Prometheus metrics at `http://ADDR/metrics` (e.g. 127.0.0.1:9465; port 0
        /// picks one). Default: off.
        #[arg(long, env = "LATMESH_METRICS_LISTEN", value_name = "ADDR")]
        metrics_listen: Option<String>,
        #[command(flatten)]
        security: ServeSecurity,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// ClickHouse schema.
    #[command(subcommand)]
    Db(DbCmd),
    /// Questions answered from ClickHouse.
    #[command(subcommand)]
    Query(crate::cmd::query::QueryCmd),
    /// Campaigns: validate a file, or launch it and print the matrix.
    #[command(subcommand)]
    Campaign(CampaignCmd),
    /// List the agents known to the coordinator.
    Agents {
        #[command(flatten)]
        coord: CoordinatorArg,
    },
    /// Run a local demo: simulator with nine providers (two also over the Anthropic and
    /// Responses APIs), coordinator, three agents; prints the region × provider matrix and
    /// writes an HTML report (.latmesh/demo-report.html).
    Demo {
        /// Write the JSON summary here (default: .latmesh/demo-summary.json).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Rounds to run (default: the embedded campaign's 12).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        rounds: Option<u32>,
        /// Also store the results in this ClickHouse (HTTP URL), through a spool in
        /// .latmesh/demo-spool.
        #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
        clickhouse_url: Option<String>,
        /// ClickHouse database.
        #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
        clickhouse_db: String,
        /// Write the HTML report here (default: .latmesh/demo-report.html).
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Send one request to a provider and print what was measured (a connectivity check).
    Probe(ProbeArgs),
    /// Regression alerts: evaluate the rules of a TOML file on a campaign (ClickHouse, or a
    /// JSON summary) against a baseline (a campaign, the N days before it, or a summary);
    /// print what fired, POST it to --webhook. Exit status: 0 nothing fired, 1 a rule fired,
    /// 2 an error.
    Check(crate::cmd::check::CheckArgs),
    /// Write a stored campaign's report (from ClickHouse): a self-contained HTML page with
    /// heatmaps, latency CDFs, ITL spread, sweep curves, open-loop rates, peak vs off-peak and
    /// latency over time; or the same numbers as JSON or CSV.
    Report {
        /// Campaign id.
        campaign_id: String,
        #[command(flatten)]
        ch: crate::cmd::query::ClickhouseArgs,
        /// Output file (`-`: standard output). Default: latmesh-report-CAMPAIGN.EXT.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "html")]
        format: latmesh_coordinator::report::Format,
    },
}

/// Transport security and credentials of `latmesh serve`.
#[derive(Args, Debug, Clone)]
struct ServeSecurity {
    /// Serve gRPC over TLS with this PEM certificate chain (leaf first); agents and the CLI
    /// then use `https://HOST:PORT` (and --ca-file when it is not signed by a public CA).
    #[arg(long, env = "LATMESH_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "LATMESH_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// File holding the agent token that agents must present (without it: the
    /// LATMESH_AGENT_TOKEN environment variable; neither: agents are not authenticated, which
    /// is allowed on loopback only).
    #[arg(long, env = "LATMESH_AGENT_TOKEN_FILE")]
    agent_token_file: Option<PathBuf>,
    /// File holding the admin token that control calls must present (without it: the
    /// LATMESH_ADMIN_TOKEN environment variable; neither: control calls are not
    /// authenticated, which is allowed on loopback only).
    #[arg(long, env = "LATMESH_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Allow plaintext gRPC on a non-loopback address (a trusted private network or a
    /// tunnel: tokens then travel in clear).
    #[arg(long)]
    insecure_plaintext: bool,
    /// Allow a non-loopback address without an agent token or without an admin token
    /// (anyone who reaches the port may then join as an agent or launch campaigns).
    #[arg(long)]
    insecure_no_auth: bool,
}

/// How the CLI reaches the coordinator's control API.
#[derive(Args, Debug, Clone)]
pub struct CoordinatorArg {
    /// Coordinator URL (`host:port` means `http://host:port`; `https://host:port` for a
    /// coordinator serving TLS).
    #[arg(
        long,
        env = "LATMESH_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
    /// File holding the admin token sent with control calls (without it: the
    /// LATMESH_ADMIN_TOKEN environment variable).
    #[arg(long, env = "LATMESH_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// PEM file with the CA certificate(s) to trust for an https:// coordinator (default: the
    /// webpki roots).
    #[arg(long, env = "LATMESH_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl CoordinatorArg {
    /// Connects to the control API with the admin token and CA file of these arguments.
    ///
    /// # Errors
    /// An unreadable token or CA file, or an unreachable coordinator.
    pub async fn connect(&self) -> anyhow::Result<AdminClient> {
        let token = Secret::from_file_or_env(
            self.admin_token_file.as_deref(),
            ADMIN_TOKEN_ENV,
            "admin token",
        )?;
        let channel =
            latmesh_agent::session::connect_channel(&self.coordinator, self.ca_file.as_deref())
                .await?;
        Ok(latmesh_coordinator::service::message_limits_client(
            ControlClient::with_interceptor(channel, AdminToken(token)),
        ))
    }

    fn url(&self) -> String {
        latmesh_agent::session::coordinator_url(&self.coordinator)
    }
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
    /// State directory: campaigns (plan, deadline, agents, every acked batch) persist here, so
    /// a coordinator restarted after a crash or kill -9 picks its unfinished campaigns up.
    /// Default: `state` inside --spool-dir with --clickhouse-url; without ClickHouse and
    /// without this flag, campaigns live in memory only.
    #[arg(long, env = "LATMESH_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// How long the sink waits for ClickHouse.
    #[command(flatten)]
    timeouts: crate::cmd::query::TimeoutArgs,
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
        /// How long to wait for ClickHouse (per statement).
        #[command(flatten)]
        timeouts: crate::cmd::query::TimeoutArgs,
    },
}

#[derive(Subcommand, Debug)]
enum CampaignCmd {
    /// Check a campaign file and print the plan summary and its planned duration (no
    /// network). A duration over 24 h is refused without --allow-long.
    Validate {
        /// Campaign file (TOML or YAML).
        file: PathBuf,
        /// Accept a planned duration over 24 h (see `campaign launch --allow-long`).
        #[arg(long)]
        allow_long: bool,
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
        #[command(flatten)]
        budget: crate::cmd::series::BudgetArgs,
        /// A campaign with a [schedule]: follow its runs (printing each run's matrix) until
        /// the series ends, instead of returning once it is created. (Without a schedule,
        /// launch always follows the campaign.)
        #[arg(long)]
        wait: bool,
        /// Launch a campaign whose planned duration is over 24 h (rounds × interval, sweep
        /// steps, rate durations): refused without it, naming the setting that makes it long.
        #[arg(long)]
        allow_long: bool,
        /// Launch even when a targeted agent lacks the API key variable (api_key_env) of a
        /// provider: its requests then go without a key, and launch warns. Without it such a
        /// launch is refused, naming agent, region, provider and variable.
        #[arg(long)]
        allow_missing_keys: bool,
    },
    /// A series of scheduled runs (a campaign launched with a [schedule]): its schedule and
    /// its runs (id, due and start times, state, complete).
    Series {
        /// Series id, as `launch` printed it.
        series_id: String,
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Follow the series until it ends (printing each run's matrix), then list its runs.
        #[arg(long)]
        wait: bool,
        /// With --wait: write the series and every run's summary here as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Reconcile what agents reported with the rows in ClickHouse: lost and duplicated counts
    /// (exits non-zero unless both are 0).
    Verify {
        /// Campaign id.
        campaign_id: String,
        #[command(flatten)]
        ch: crate::cmd::query::ClickhouseArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a running campaign: every agent stops scheduling probes, in-flight ones get a
    /// short grace, what was measured is kept. Waits until the agents have reported and prints
    /// the counts (exits non-zero for an unknown or already finished campaign).
    Cancel {
        /// Campaign id, as `launch` printed it.
        campaign_id: String,
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Return once the coordinator has accepted the cancel, without waiting for agents.
        #[arg(long)]
        no_wait: bool,
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
    /// PEM file with CA certificate(s) to trust for an https:// base URL, besides the public
    /// webpki roots (a private CA in front of a self-hosted server).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Include the generated text in the output.
    #[arg(long)]
    show_text: bool,
    /// Print JSON (the default; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
    /// Total timeout, seconds (above 0).
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
    /// user-agent header to send (default: the OpenAI Python SDK's, as campaigns).
    #[arg(long, value_parser = parse_user_agent)]
    user_agent: Option<String>,
    /// The API spoken: chat (default), anthropic or responses.
    #[arg(long, value_parser = latmesh_core::api::Api::parse, default_value = "chat")]
    api: latmesh_core::api::Api,
    /// An extra header, `NAME:VALUE` (repeatable). For a secret use --header-env.
    #[arg(long = "header", value_name = "NAME:VALUE")]
    headers: Vec<String>,
    /// An extra header whose value is read from an environment variable, `NAME=VAR`
    /// (repeatable): the secret stays out of the command line and shell history, and is
    /// redacted from the output like the API key.
    #[arg(long = "header-env", value_name = "NAME=VAR")]
    header_envs: Vec<String>,
    /// A query parameter appended to the URL, `NAME=VALUE` (repeatable), e.g.
    /// `api-version=2024-10-21`.
    #[arg(long = "query", value_name = "NAME=VALUE")]
    queries: Vec<String>,
    /// A JSON object merged into the request body (top-level keys replace latmesh's own),
    /// e.g. '{"provider":{"order":["x"],"allow_fallbacks":false}}'.
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// How the API key is sent: bearer (default), none, or header:NAME (e.g. header:api-key).
    #[arg(long)]
    auth: Option<String>,
    /// The body field carrying the output cap (default: the API's own), e.g.
    /// max_completion_tokens.
    #[arg(long)]
    max_tokens_field: Option<String>,
    /// Whether a chat stream asks for usage: auto (default), always or never.
    #[arg(long)]
    stream_usage: Option<String>,
    /// Tags around reasoning inside content, `OPEN,CLOSE` (e.g. '<think>,</think>').
    #[arg(long, value_name = "OPEN,CLOSE")]
    reasoning_tags: Option<String>,
}

impl ProbeArgs {
    /// The request shape the options describe, validated by the campaign file's rules
    /// ([`latmesh_core::shaping::ShapeInput::validate`]); errors name the option.
    fn shape(&self) -> anyhow::Result<latmesh_core::api::RequestShape> {
        use latmesh_core::shaping::{
            AuthHeader, AuthSection, EnvRef, HeaderSection, ReasoningTagsSection, ShapeInput,
        };
        let mut input = ShapeInput {
            api: self.api,
            max_tokens_field: self.max_tokens_field.clone(),
            stream_usage: self.stream_usage.clone(),
            ..ShapeInput::default()
        };
        let pairs = [
            ("--header", ':', &self.headers, false),
            ("--header-env", '=', &self.header_envs, true),
        ];
        for (option, sep, list, env) in pairs {
            for item in list {
                let (name, value) = item.split_once(sep).with_context(|| {
                    let form = if env { "NAME=VAR" } else { "NAME:VALUE" };
                    format!("{option}: expected {form}, got no {sep:?} (value not shown)")
                })?;
                let value = if env {
                    HeaderSection::Env(EnvRef {
                        env: value.to_string(),
                    })
                } else {
                    HeaderSection::Literal(value.trim().to_string())
                };
                let name = name.trim().to_string();
                anyhow::ensure!(
                    input.headers.insert(name.clone(), value).is_none(),
                    "{option}: header {name:?} is given twice"
                );
            }
        }
        for item in &self.queries {
            let (name, value) = item
                .split_once('=')
                .with_context(|| format!("--query: expected NAME=VALUE, got {item:?}"))?;
            input.query.insert(name.to_string(), value.to_string());
        }
        if let Some(json) = &self.extra_body {
            let v: serde_json::Value =
                serde_json::from_str(json).context("--extra-body: not JSON")?;
            let serde_json::Value::Object(map) = v else {
                anyhow::bail!("--extra-body: must be a JSON object ({{...}})");
            };
            input.extra_body = map;
        }
        input.auth = self.auth.as_ref().map(|a| match a.strip_prefix("header:") {
            Some(h) => AuthSection::Header(AuthHeader {
                header: h.to_string(),
            }),
            None => AuthSection::Name(a.clone()),
        });
        if let Some(tags) = &self.reasoning_tags {
            let (open, close) = tags
                .split_once(',')
                .context("--reasoning-tags: expected OPEN,CLOSE")?;
            input.reasoning_tags = Some(ReasoningTagsSection {
                open: open.to_string(),
                close: close.to_string(),
            });
        }
        input.validate().map_err(|e| {
            let option = match e.key.split(['.', '[']).next().unwrap_or_default() {
                "headers" => "--header/--header-env",
                "query" => "--query",
                "extra_body" => "--extra-body",
                "auth" => "--auth",
                "max_tokens_field" => "--max-tokens-field",
                "stream_usage" => "--stream-usage",
                _ => "--reasoning-tags",
            };
            anyhow::anyhow!("{option}: {e}")
        })
    }
}

fn parse_user_agent(s: &str) -> Result<String, String> {
    campaign::check_user_agent(s).map(|()| s.to_string())
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
        Command::Serve {
            listen,
            metrics_listen,
            security,
            store,
        } => {
            let (auth, tls) = serve_security(&listen, &security).await?;
            let listener = TcpListener::bind(&listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            let addr = listener.local_addr()?;
            if !auth.agents_authenticated() {
                tracing::warn!(
                    "no agent token configured: any process that reaches {addr} can join as an agent (set {AGENT_TOKEN_ENV} or --agent-token-file)"
                );
            }
            if !auth.control_authenticated() {
                tracing::warn!(
                    "no admin token configured: any process that reaches {addr} can launch and watch campaigns (set {ADMIN_TOKEN_ENV} or --admin-token-file)"
                );
            }
            if tls.is_none() && !addr.ip().to_canonical().is_loopback() {
                tracing::warn!("serving plaintext gRPC on {addr} (--insecure-plaintext)");
            }
            let (coordinator, sink) = coordinator_with_store(&store)?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut coordinator = coordinator.with_auth(auth);
            if let Some(tls) = tls {
                coordinator = coordinator.with_tls(tls);
            }
            if let Some(m) = &metrics_listen {
                println!(
                    "metrics on http://{}/metrics",
                    coordinator.metrics().serve(m).await?
                );
            }
            println!("listening on {scheme}://{}", listener.local_addr()?);
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
            timeouts,
        }) => {
            if print {
                for m in latmesh_coordinator::clickhouse::MIGRATIONS {
                    for stmt in latmesh_coordinator::clickhouse::render_migration(
                        m.sql,
                        &clickhouse_db,
                        cluster.as_deref(),
                    )? {
                        println!("{stmt};\n");
                    }
                }
                return Ok(());
            }
            let timeouts = timeouts.timeouts();
            let client = latmesh_coordinator::clickhouse::client_with(&clickhouse_url, &timeouts);
            let applied = latmesh_coordinator::clickhouse::migrate_within(
                &client,
                &clickhouse_db,
                cluster.as_deref(),
                &timeouts,
            )
            .await
            .with_context(|| format!("ClickHouse at {clickhouse_url}"))?;
            if applied.is_empty() {
                println!("{clickhouse_db}: up to date");
            } else {
                println!("{clickhouse_db}: applied {}", applied.join(", "));
            }
            Ok(())
        }
        Command::Campaign(CampaignCmd::Validate { file, allow_long }) => {
            let plan = campaign::load_file(&file)?;
            if let Some(note) = latmesh_core::env_overrides::applied_overrides_note() {
                println!("{note}");
            }
            let duration = latmesh_core::duration::PlannedDuration::of(&plan);
            duration
                .check(allow_long)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let n = |count: usize, noun: &str| {
                format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
            };
            println!(
                "{}: ok — campaign {:?}, {}, {}, {}, {}, {} per agent, plan {}",
                file.display(),
                plan.name,
                n(plan.regions.len(), "region"),
                n(plan.providers.len(), "provider"),
                n(plan.scenarios.len(), "scenario"),
                n(plan.rounds.count as usize, "round"),
                n(plan.probes_per_agent() as usize, "probe"),
                &plan.hash()[..12]
            );
            print!(
                "{}",
                crate::cmd::series::plan_facts(
                    &plan,
                    plan.regions.len() as u32,
                    "assuming one agent per region; launch counts the connected ones"
                )
            );
            println!("{}", duration.describe());
            Ok(())
        }
        Command::Campaign(CampaignCmd::Launch {
            file,
            coord,
            json,
            start_delay_s,
            wait_agents_s,
            budget,
            wait,
            allow_long,
            allow_missing_keys,
        }) => {
            let plan = campaign::load_file(&file)?;
            if let Some(note) = latmesh_core::env_overrides::applied_overrides_note() {
                eprintln!("{note}");
            }
            budget.check(&plan)?;
            // Before anything is sent: a campaign of 35 days is refused unless meant.
            let duration = latmesh_core::duration::PlannedDuration::of(&plan);
            duration
                .check(allow_long)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            eprintln!("{}", duration.describe());
            // Before anything is sent: a summary that cannot be written is refused up front.
            if let Some(path) = &json {
                watch::check_writable(path).context("--json")?;
            }
            let url = coord.url();
            let mut client = coord.connect().await?;
            watch::wait_for_agents(
                &mut client,
                &url,
                &plan.regions,
                Duration::from_secs_f64(wait_agents_s.max(0.0)),
            )
            .await?;
            // The estimate before anything is sent (stderr: stdout is the matrix).
            let (agents, how) =
                crate::cmd::series::agents_in_regions(&mut client, &url, &plan).await?;
            eprint!("{}", crate::cmd::series::plan_facts(&plan, agents, &how));
            let reply = watch::launch_with(
                &mut client,
                &url,
                &plan,
                start_delay_s,
                &budget,
                allow_missing_keys,
            )
            .await?;
            for w in &reply.warnings {
                eprintln!("warning: {w}");
            }
            if reply.series {
                return crate::cmd::series::launched_series(
                    &mut client,
                    &url,
                    &reply,
                    wait,
                    json.as_deref(),
                )
                .await;
            }
            eprintln!(
                "launched campaign {} on {} agents (follow it from elsewhere with: latmesh campaign watch {})",
                reply.campaign_id,
                reply.agent_ids.len(),
                reply.campaign_id
            );
            follow_launched(&coord, client, &reply.campaign_id, json.as_deref()).await
        }
        Command::Query(q) => crate::cmd::query::run_query(q).await,
        Command::Campaign(CampaignCmd::Verify {
            campaign_id,
            ch,
            json,
        }) => {
            let (lines, lost, duplicated) = crate::cmd::query::verify(&ch, &campaign_id).await?;
            let twice: u64 = lines.iter().map(|l| l.measured_twice).sum();
            let (verified, unverified): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.verified);
            // "0 lost" is only said of agents whose delivery is whole.
            let verdict = if unverified.is_empty() {
                format!(
                    "campaign {campaign_id}: {lost} lost, {duplicated} duplicated, {twice} measured twice"
                )
            } else {
                let others = if verified.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; the {} verified agent(s): {} lost, {} duplicated, {} measured twice",
                        verified.len(),
                        verified.iter().map(|l| l.lost).sum::<u64>(),
                        verified.iter().map(|l| l.duplicated).sum::<u64>(),
                        verified.iter().map(|l| l.measured_twice).sum::<u64>()
                    )
                };
                format!(
                    "campaign {campaign_id}: NOT VERIFIED: {} agent(s) did not deliver everything ({}){others}",
                    unverified.len(),
                    unverified
                        .iter()
                        .map(|l| format!("{}: {}", l.agent_id, l.not_verified.join("; ")))
                        .collect::<Vec<_>>()
                        .join(" | ")
                )
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "verified": unverified.is_empty(),
                        "lost": lost,
                        "duplicated": duplicated,
                        "measured_twice": twice,
                        "agents": lines
                    }))?
                );
            } else {
                println!(
                    "{:<20} {:>9} {:>9} {:>6} {:>6} {:>6}  missing seqs",
                    "AGENT", "REPORTED", "STORED", "LOST", "DUP", "TWICE"
                );
                for l in &lines {
                    let lost = if l.verified {
                        l.lost.to_string()
                    } else {
                        "?".to_string()
                    };
                    println!(
                        "{:<20} {:>9} {:>9} {:>6} {:>6} {:>6}  {}{}",
                        l.agent_id,
                        l.reported_records,
                        l.stored_records,
                        lost,
                        l.duplicated,
                        l.measured_twice,
                        l.missing_text(),
                        if l.verified {
                            String::new()
                        } else {
                            format!("  NOT VERIFIED: {}", l.not_verified.join("; "))
                        }
                    );
                }
                println!("{verdict}");
            }
            anyhow::ensure!(
                unverified.is_empty() && lost == 0 && duplicated == 0 && twice == 0,
                "{verdict}"
            );
            Ok(())
        }
        Command::Campaign(CampaignCmd::Cancel {
            campaign_id,
            coord,
            no_wait,
        }) => {
            let url = coord.url();
            let mut client = coord.connect().await?;
            let reply = client
                .cancel(pb::CancelRequest {
                    campaign_id: campaign_id.clone(),
                })
                .await
                .map_err(|s| match s.code() {
                    tonic::Code::NotFound | tonic::Code::FailedPrecondition => {
                        anyhow::anyhow!("cannot cancel: {}", s.message())
                    }
                    _ => watch::control_error(&url, s),
                })?
                .into_inner();
            let campaign_id = match crate::cmd::series::cancelled_series(&reply) {
                Some(run_id) => run_id,
                None if reply.series => return Ok(()),
                None => campaign_id,
            };
            eprintln!(
                "campaign {campaign_id}: cancel sent to {} agent(s) [{}]",
                reply.agent_ids.len(),
                reply.agent_ids.join(", ")
            );
            if no_wait {
                return Ok(());
            }
            let s = &watch::follow(&mut client, &url, &campaign_id, Duration::from_secs(2)).await?;
            for a in &s.agents {
                println!(
                    "{:<20} {:<14} {:>8} records kept {:>8} slots not run{}",
                    a.agent_id,
                    a.region,
                    a.records,
                    a.skipped,
                    if a.complete || a.records > 0 || a.batches > 0 {
                        ""
                    } else {
                        " (no report)"
                    }
                );
            }
            println!(
                "campaign {campaign_id} cancelled: {} records kept, {} slots not run",
                s.agents.iter().map(|a| a.records).sum::<u64>(),
                s.agents.iter().map(|a| a.skipped).sum::<u64>()
            );
            Ok(())
        }
        Command::Campaign(CampaignCmd::Series {
            series_id,
            coord,
            wait,
            json,
        }) => {
            let mut client = coord.connect().await?;
            crate::cmd::series::series(&mut client, &coord.url(), &series_id, wait, json.as_deref())
                .await
        }
        Command::Campaign(CampaignCmd::Watch {
            campaign_id,
            coord,
            json,
        }) => {
            let mut client = coord.connect().await?;
            report(&mut client, &coord.url(), &campaign_id, json.as_deref()).await
        }
        Command::Agents { coord } => {
            let mut client = coord.connect().await?;
            let agents = client
                .list_agents(pb::ListAgentsRequest {})
                .await
                .map_err(|s| watch::control_error(&coord.url(), s))?
                .into_inner()
                .agents;
            print!(
                "{}",
                render_agents(&agents, latmesh_coordinator::state::now_unix_us())
            );
            Ok(())
        }
        Command::Demo {
            json,
            rounds,
            clickhouse_url,
            clickhouse_db,
            report,
        } => {
            let started = std::time::Instant::now();
            let path = json.unwrap_or_else(|| PathBuf::from(".latmesh/demo-summary.json"));
            let report = report.unwrap_or_else(|| PathBuf::from(demo::DEMO_REPORT));
            // Fail before a minute of probing, not after it.
            watch::check_writable(&path)?;
            watch::check_writable(&report)?;
            let store = clickhouse_url.map(|url| demo::DemoStore {
                url,
                db: clickhouse_db,
                spool_dir: PathBuf::from(demo::DEMO_SPOOL_DIR),
            });
            let data = demo::run_with(
                demo::DemoOptions {
                    rounds,
                    progress: true,
                    clickhouse: store.clone(),
                },
                |_| {},
            )
            .await?;
            let summary = &data.summary;
            if let Some(store) = &store {
                eprintln!(
                    "stored in ClickHouse {} (database {}): latmesh query matrix --campaign {} --clickhouse-url {} --clickhouse-db {}",
                    store.url, store.db, summary.campaign_id, store.url, store.db
                );
            }
            print!("{}", crate::ui::matrix::render(&summary));
            watch::write_json(summary, &path)?;
            // With ClickHouse, the sections that need each row's time come from there.
            let (source, extras) = match &store {
                Some(s) => match latmesh_coordinator::clickhouse::query::extras(
                    &latmesh_coordinator::clickhouse::client(&s.url),
                    &s.db,
                    &data,
                )
                .await
                {
                    Ok(extras) => ("memory and clickhouse", extras),
                    Err(e) => {
                        eprintln!("demo: the report has no ClickHouse sections: {e:#}");
                        ("memory", Default::default())
                    }
                },
                None => ("memory", Default::default()),
            };
            let model = latmesh_coordinator::report::model(&data, source, extras);
            latmesh_coordinator::report::write(
                &model,
                latmesh_coordinator::report::Format::Html,
                &report,
            )?;
            eprintln!(
                "demo finished in {:.0} s; JSON summary: {}",
                started.elapsed().as_secs_f64(),
                path.display()
            );
            println!("report: {}", report.display());
            Ok(())
        }
        Command::Probe(args) => probe(args).await,
        Command::Check(args) => {
            // Its own exit status (1: a rule fired, 2: an error), so it exits here.
            let code = crate::cmd::check::run_cli(args).await;
            if code != 0 {
                use std::io::Write as _;
                let _ = std::io::stdout().flush();
                std::process::exit(i32::from(code));
            }
            Ok(())
        }
        Command::Report {
            campaign_id,
            ch,
            out,
            format,
        } => {
            let url = &ch.clickhouse_url;
            let model = ch
                .timeouts
                .bound(
                    url,
                    "report",
                    latmesh_coordinator::report::from_clickhouse(
                        url,
                        &ch.clickhouse_db,
                        &campaign_id,
                    ),
                )
                .await?;
            let out = out.unwrap_or_else(|| {
                PathBuf::from(format!(
                    "latmesh-report-{campaign_id}.{}",
                    format.extension()
                ))
            });
            latmesh_coordinator::report::write(&model, format, &out)?;
            if out != std::path::Path::new("-") {
                println!("report: {}", out.display());
            }
            Ok(())
        }
    }
}

/// A coordinator, with a spool and a ClickHouse sink task when `store` names a ClickHouse.
///
/// # Errors
/// The spool cannot be opened.
fn coordinator_with_store(
    store: &StoreArgs,
) -> anyhow::Result<(Coordinator, Option<tokio::task::JoinHandle<()>>)> {
    let (coordinator, sink) = coordinator_with_clickhouse(store)?;
    let state_dir = store.state_dir.clone().or_else(|| {
        store
            .clickhouse_url
            .as_ref()
            .map(|_| store.spool_dir.join("state"))
    });
    match state_dir {
        Some(dir) => {
            let loaded = coordinator
                .state()
                .with_state_dir(latmesh_coordinator::persist::StateDir::open(&dir)?)
                .with_context(|| format!("loading the campaigns in {}", dir.display()))?;
            tracing::info!(state_dir = %dir.display(), unfinished_campaigns = loaded.len(), "campaigns persist in the state directory");
        }
        None => tracing::info!(
            "campaigns live in memory only (a restart loses running ones): pass --state-dir to keep them"
        ),
    }
    Ok((coordinator, sink))
}

/// A coordinator, with a spool and a ClickHouse sink task when `store` names a ClickHouse.
fn coordinator_with_clickhouse(
    store: &StoreArgs,
) -> anyhow::Result<(Coordinator, Option<tokio::task::JoinHandle<()>>)> {
    let Some(url) = &store.clickhouse_url else {
        return Ok((Coordinator::new(State::default()), None));
    };
    let target = latmesh_coordinator::sink::SinkTarget::new(
        url,
        &store.clickhouse_db,
        store.timeouts.timeouts(),
    );
    let (coordinator, _spool, sink) = latmesh_coordinator::sink::coordinator_with_sink(
        &store.spool_dir,
        store.spool_max_mib.saturating_mul(1 << 20),
        target,
    )?;
    Ok((coordinator, Some(sink)))
}

/// The tokens and TLS configuration of `serve` on `listen`, refusing what would expose the
/// coordinator: plaintext or a missing token on a non-loopback address (unless the matching
/// `--insecure-…` flag allows it).
///
/// # Errors
/// A token or TLS file that cannot be used, or a refused combination.
async fn serve_security(
    listen: &str,
    sec: &ServeSecurity,
) -> anyhow::Result<(Auth, Option<latmesh_coordinator::tls_listener::ServerTls>)> {
    let agent = Secret::from_file_or_env(
        sec.agent_token_file.as_deref(),
        AGENT_TOKEN_ENV,
        "agent token",
    )?;
    let admin = Secret::from_file_or_env(
        sec.admin_token_file.as_deref(),
        ADMIN_TOKEN_ENV,
        "admin token",
    )?;
    let tls = match (&sec.tls_cert, &sec.tls_key) {
        (Some(cert), Some(key)) => Some(latmesh_coordinator::auth::server_tls(cert, key)?),
        _ => None,
    };
    let loopback = latmesh_coordinator::auth::is_loopback(listen).await;
    if !loopback && tls.is_none() && !sec.insecure_plaintext {
        anyhow::bail!(
            "refusing to serve plaintext gRPC on {listen}, which is not a loopback address: pass --tls-cert and --tls-key, or --insecure-plaintext to accept plaintext (tokens in clear) on a trusted network"
        );
    }
    let mut missing = Vec::new();
    if agent.is_none() {
        missing.push(format!(
            "an agent token ({AGENT_TOKEN_ENV} or --agent-token-file)"
        ));
    }
    if admin.is_none() {
        missing.push(format!(
            "an admin token ({ADMIN_TOKEN_ENV} or --admin-token-file)"
        ));
    }
    if !loopback && !missing.is_empty() && !sec.insecure_no_auth {
        anyhow::bail!(
            "refusing to serve on {listen}, which is not a loopback address, without {}: set {}, or pass --insecure-no-auth to let in anyone who reaches the port",
            missing.join(" and "),
            if missing.len() > 1 { "them" } else { "it" }
        );
    }
    if let (Some(a), Some(b)) = (&agent, &admin)
        && a.expose() == b.expose()
    {
        tracing::warn!(
            "the agent token and the admin token are the same: every agent host can then launch and cancel campaigns; give them different values"
        );
    }
    Ok((Auth::new(agent, admin), tls))
}

/// How long `campaign launch` tries to reconnect to a coordinator it lost while following.
const LAUNCH_RECONNECT_FOR: Duration = Duration::from_secs(120);

/// `campaign launch`'s follow ([`report`]); when the connection to the coordinator breaks
/// before the campaign finished (the coordinator died or is restarting), says so, reconnects
/// for up to [`LAUNCH_RECONNECT_FOR`] (a coordinator restarted with its state directory still
/// runs the campaign) and follows again; else tells the user to `campaign watch` it later.
async fn follow_launched(
    coord: &CoordinatorArg,
    mut client: AdminClient,
    campaign_id: &str,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let url = coord.url();
    let mut reconnected = false;
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let followed_from = std::time::Instant::now();
        let err = match report(&mut client, &url, campaign_id, json).await {
            Ok(()) => return Ok(()),
            Err(e) if reconnected && e.to_string().contains("NotFound") => {
                anyhow::bail!(
                    "the coordinator at {url} came back without campaign {campaign_id} (was it restarted without its --state-dir?): {e:#}"
                )
            }
            Err(e) if !lost_connection(&e) => return Err(e),
            Err(e) => e,
        };
        if followed_from.elapsed() > Duration::from_secs(10) {
            lost_since = None;
        }
        let since = *lost_since.get_or_insert_with(std::time::Instant::now);
        let reason = match err.chain().find_map(|c| c.downcast_ref::<tonic::Status>()) {
            Some(s) => s.message().to_string(),
            None => format!("{err:#}"),
        };
        eprintln!(
            "lost the connection to the coordinator at {url} while following campaign {campaign_id} ({reason}). The agents keep measuring; a coordinator restarted with the same state directory picks the campaign up. Reconnecting for up to {} s (or follow it later with: latmesh campaign watch {campaign_id})",
            LAUNCH_RECONNECT_FOR.as_secs()
        );
        client = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match coord.connect().await {
                Ok(c) => break c,
                Err(e) if since.elapsed() >= LAUNCH_RECONNECT_FOR => anyhow::bail!(
                    "could not reconnect to the coordinator at {url} within {} s ({e:#}); campaign {campaign_id} may still be running: once the coordinator is back, follow it with `latmesh campaign watch {campaign_id}`",
                    LAUNCH_RECONNECT_FOR.as_secs()
                ),
                Err(_) => {}
            }
        };
        reconnected = true;
        eprintln!("reconnected to {url}: following campaign {campaign_id} again");
    }
}

/// Whether following failed because the connection to the coordinator broke (rather than
/// because of the campaign itself).
fn lost_connection(e: &anyhow::Error) -> bool {
    use tonic::Code;
    if let Some(s) = e.chain().find_map(|c| c.downcast_ref::<tonic::Status>()) {
        return matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal | Code::Aborted
        );
    }
    let text = format!("{e:#}");
    text.contains("closed the progress stream") || text.contains(": Unavailable:")
}

/// The `latmesh agents` table: state (`connected`, or `disconnected since … (why)`), what
/// the agent does (`idle` or `running CAMPAIGN`), attempts in flight and heartbeat age (from
/// the last heartbeat), clock offset.
pub fn render_agents(agents: &[pb::AgentInfo], now_unix_us: i64) -> String {
    use std::fmt::Write as _;
    if agents.is_empty() {
        return "no agents\n".into();
    }
    let mut out = format!(
        "{:<20} {:<14} {:<8} {:<12} {:<28} {:>9} {:>13}  clock offset to the coordinator\n",
        "AGENT", "REGION", "VERSION", "STATE", "ACTIVITY", "IN-FLIGHT", "HEARTBEAT"
    );
    for a in agents {
        let activity = if a.campaign_id.is_empty() {
            "idle".to_string()
        } else {
            format!("running {}", a.campaign_id)
        };
        let heartbeat = if a.last_heartbeat_coord_unix_us > 0 {
            watch::ago(a.last_heartbeat_coord_unix_us, now_unix_us)
        } else {
            "none yet".into()
        };
        // Both 0 only before the agent's first clock report (a measured offset has a
        // non-zero uncertainty: half a round trip).
        let clock = if a.clock_offset_us == 0 && a.clock_uncertainty_us == 0 {
            "not measured yet".to_string()
        } else {
            format!("{:+} µs ± {} µs", a.clock_offset_us, a.clock_uncertainty_us)
        };
        let _ = writeln!(
            out,
            "{:<20} {:<14} {:<8} {:<12} {:<28} {:>9} {:>13}  {clock}",
            a.agent_id,
            a.region,
            a.version,
            if a.connected {
                "connected"
            } else {
                "disconnected"
            },
            activity,
            a.in_flight,
            heartbeat,
        );
        if !a.connected && a.disconnected_since_coord_unix_us > 0 {
            let _ = writeln!(
                out,
                "  {} disconnected since {} ({}; {} in flight at its last heartbeat)",
                a.agent_id,
                watch::ago(a.disconnected_since_coord_unix_us, now_unix_us),
                if a.disconnect_reason.is_empty() {
                    "session closed"
                } else {
                    a.disconnect_reason.as_str()
                },
                a.in_flight
            );
        }
        if a.batches_quarantined > 0 {
            let _ = writeln!(
                out,
                "  {} quarantined {} batch(es) (refused by the coordinator or too large to send): kept in quarantine/ of its spool directory, never sent again",
                a.agent_id, a.batches_quarantined
            );
        }
    }
    out
}

/// Follows a campaign, prints its matrix, writes the JSON; fails when it is incomplete or
/// was cancelled.
async fn report(
    client: &mut AdminClient,
    url: &str,
    campaign_id: &str,
    json: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        watch::check_writable(path)?;
    }
    let summary = watch::follow(client, url, campaign_id, Duration::from_secs(5)).await?;
    print!("{}", crate::ui::matrix::render(&summary));
    if let Some(path) = json {
        watch::write_json(&summary, path)?;
        eprintln!("summary written to {}", path.display());
    }
    if let Some(reason) = &summary.guard.stop_reason {
        anyhow::bail!(
            "campaign {campaign_id} was stopped by the budget guard ({reason}): partial results (see STOPPED BY BUDGET above)"
        );
    }
    anyhow::ensure!(
        !summary.cancelled,
        "campaign {campaign_id} was cancelled: partial results (see CANCELLED above)"
    );
    anyhow::ensure!(
        summary.complete,
        "campaign {campaign_id} is incomplete: some agents did not deliver every probe (see INCOMPLETE above)"
    );
    Ok(())
}

async fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let api_key = match &args.api_key_env {
        Some(name) => Some(
            latmesh_agent::probe::request::api_key_from_env(name)
                .map_err(|e| anyhow::anyhow!("--api-key-env {name}: {e}"))?
                .with_context(|| {
                    format!(
                        "--api-key-env {name}: the variable {}",
                        latmesh_agent::probe::request::unset_or_empty(name)
                    )
                })?,
        ),
        None => None,
    };
    let base_url =
        campaign::check_base_url(&args.base_url).map_err(|m| anyhow::anyhow!("--base-url: {m}"))?;
    let shape = args.shape()?;
    let (secret_headers, problems) = latmesh_agent::probe::request::secret_headers(&shape);
    anyhow::ensure!(problems.is_empty(), "--header-env: {}", problems.join("; "));
    anyhow::ensure!(
        args.timeout_s.is_finite() && args.timeout_s > 0.0,
        "--timeout-s: must be a number of seconds above 0, got {}",
        args.timeout_s
    );
    let prober =
        latmesh_agent::probe::Prober::with_root_certificate_file(None, args.ca_file.as_deref())
            .context("--ca-file")?;
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
        user_agent: args.user_agent.as_deref(),
        shape: &shape,
        secret_headers: &secret_headers,
    };
    let mut result = prober.probe(&req, args.show_text).await;
    // One logical request of one attempt, single turn.
    let rec = &mut result.record;
    (rec.attempt, rec.turn, rec.final_attempt) = (1, 1, true);
    rec.request_latency_us = rec.e2e_us;
    let out = latmesh_agent::probe::ProbeOutput::new(&result, args.show_text)
        .without_key(api_key.as_deref())
        .without_secrets(&secret_headers);
    println!("{}", out.to_json_pretty());
    let outcome = out.record.outcome();
    let hint = if out.record.usage_requested
        && latmesh_agent::probe::request::refuses_stream_usage(
            &out.record,
            &result.error_body_fields,
        ) {
        ": the provider refused stream_options, try --stream-usage never"
    } else {
        ""
    };
    anyhow::ensure!(
        outcome == latmesh_core::record::Outcome::Ok,
        "the probe's outcome is {outcome} (see the record above){hint}"
    );
    Ok(())
}
