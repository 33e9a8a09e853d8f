//! `latmesh serve`: the coordinator server on a listener, with its security (TLS, tokens),
//! its store (spool, ClickHouse sink, state directory) and its metrics page.

use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use tokio::net::TcpListener;

use latmesh_coordinator::auth::{ADMIN_TOKEN_ENV, AGENT_TOKEN_ENV, Auth, Secret};
use latmesh_coordinator::service::Coordinator;
use latmesh_coordinator::state::State;

/// Arguments of `latmesh serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
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
}

/// Runs the coordinator until Ctrl-C.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        listen,
        metrics_listen,
        security,
        store,
    } = args;
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

/// Transport security and credentials of `latmesh serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeSecurity {
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

/// Where results are stored durably.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
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
        (Some(cert), Some(key)) => Some(latmesh_coordinator::tls_listener::server_tls(cert, key)?),
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
