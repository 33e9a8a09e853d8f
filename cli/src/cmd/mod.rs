//! The `latmesh` command line: one module per command (the clap definitions next to the
//! command's code), [`Cli`] the whole line and [`run_with`] its dispatch.

use clap::{Parser, Subcommand};

pub mod agents;
pub mod campaign;
pub mod check;
pub mod compat;
pub mod coordinator_arg;
pub mod db;
pub mod demo;
pub mod probe;
pub mod query;
pub mod report;
pub mod series;
pub mod serve;

pub use coordinator_arg::CoordinatorArg;

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
    Serve(serve::ServeArgs),
    /// ClickHouse schema.
    #[command(subcommand)]
    Db(db::DbCmd),
    /// Questions answered from ClickHouse.
    #[command(subcommand)]
    Query(query::QueryCmd),
    /// Campaigns: validate a file, or launch it and print the matrix.
    #[command(subcommand)]
    Campaign(campaign::CampaignCmd),
    /// List the agents known to the coordinator.
    Agents(agents::AgentsArgs),
    /// Run a local demo: simulator with nine providers (two also over the Anthropic and
    /// Responses APIs), coordinator, three agents; prints the region × provider matrix and
    /// writes an HTML report (.latmesh/demo-report.html).
    #[command(after_help = crate::exit_status::EXIT_HELP)]
    Demo(demo::DemoArgs),
    /// Send one request to a provider and print what was measured (a connectivity check).
    Probe(probe::ProbeArgs),
    /// Regression alerts: evaluate the rules of a TOML file on a campaign (ClickHouse, or a
    /// JSON summary) against a baseline (a campaign, the N days before it, or a summary);
    /// print what fired, POST it to --webhook. Exit status: 0 nothing fired, 1 a rule fired,
    /// 2 an error.
    Check(check::CheckArgs),
    /// Compatibility checks and quality parity of a campaign file's providers, from this
    /// machine (keys from its environment): the provider × check table with evidence and
    /// scores, and accuracy, agreement and answer length per provider. Exit status: 0 when
    /// it ran (verdicts are data), 2 on an error.
    Compat(compat::CompatArgs),
    /// Write a stored campaign's report (from ClickHouse): a self-contained HTML page with
    /// heatmaps, latency CDFs, ITL spread, sweep curves, open-loop rates, peak vs off-peak and
    /// latency over time; or the same numbers as JSON or CSV.
    Report(report::ReportArgs),
}

impl Cli {
    /// The log level when `LATMESH_LOG` is unset: `info` for the long-running coordinator,
    /// `warn` for commands whose output is the point.
    pub fn default_log_level(&self) -> &'static str {
        match self.command {
            Command::Serve(_) => "info",
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
        Command::Serve(args) => serve::run(args).await,
        Command::Db(cmd) => db::run(cmd).await,
        Command::Query(q) => query::run_query(q).await,
        Command::Campaign(cmd) => campaign::run(cmd).await,
        Command::Agents(args) => agents::run(args).await,
        Command::Demo(args) => demo::run_cli(args).await,
        Command::Probe(args) => probe::run(args).await,
        // Their own exit status (check: 1 a rule fired, 2 an error; compat: 2 an error,
        // printed there), so they exit here.
        Command::Check(args) => exit_with(check::run_cli(args).await),
        Command::Compat(args) => exit_with(compat::run_cli(args).await),
        Command::Report(args) => report::run(args).await,
    }
}

/// `Ok(())` for exit status 0; any other ends the process with it (stdout flushed first).
fn exit_with(code: u8) -> anyhow::Result<()> {
    if code != 0 {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::process::exit(i32::from(code));
    }
    Ok(())
}
