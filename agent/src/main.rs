//! `latmesh-agent`: connects to a coordinator and runs the campaigns it pushes.

use clap::Parser;

/// latmesh agent: measures providers from one region for a coordinator.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    after_help = "Logs go to stderr; LATMESH_LOG sets their filter (`debug`, `latmesh_agent=debug,info`; default: info)."
)]
struct Args {
    /// Coordinator gRPC URL: `https://host:port` for a coordinator serving TLS,
    /// `http://host:port` (or `host:port`) for plaintext on loopback.
    #[arg(
        long,
        env = "LATMESH_COORDINATOR",
        default_value = "http://127.0.0.1:7700"
    )]
    coordinator: String,
    /// Region this agent measures from (e.g. us-east): a name campaign files can list
    /// (1-64 of A-Z a-z 0-9 - _ .).
    #[arg(long, env = "LATMESH_REGION", value_parser = parse_region)]
    region: String,
    /// Stable agent id (default: REGION-HOSTNAME).
    #[arg(long, env = "LATMESH_AGENT_ID")]
    agent_id: Option<String>,
    /// Exit after this many campaigns are finished and acked.
    #[arg(long)]
    exit_after: Option<usize>,
    /// Directory of the on-disk spool: every result batch is written here (fsync'd) before it
    /// is sent and deleted once acked; a restarted agent resends what it finds. One agent
    /// process per directory. Default: $XDG_STATE_HOME (or ~/.local/state)
    /// /latmesh-agent/COORDINATOR-HOST_PORT/AGENT-ID.
    #[arg(long, env = "LATMESH_AGENT_SPOOL_DIR")]
    spool_dir: Option<std::path::PathBuf>,
    /// Bound of the spool, MiB: batches beyond it are kept in memory only, with a warning.
    #[arg(long, env = "LATMESH_AGENT_SPOOL_MAX_MIB", default_value_t = 1024)]
    spool_max_mib: u64,
    /// File holding the agent token (the coordinator's agent token) sent as
    /// `authorization: Bearer …`; without it, the LATMESH_AGENT_TOKEN environment variable.
    /// A token the coordinator refuses ends the agent with an error.
    #[arg(long, env = "LATMESH_AGENT_TOKEN_FILE")]
    token_file: Option<std::path::PathBuf>,
    /// PEM file with the CA certificate(s) to trust for an https:// coordinator (default: the
    /// webpki roots).
    #[arg(long, env = "LATMESH_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// PEM file with CA certificate(s) to trust for https:// providers, besides the public
    /// webpki roots: a private CA in front of a self-hosted server.
    #[arg(long, env = "LATMESH_AGENT_PROVIDER_CA_FILE")]
    provider_ca_file: Option<std::path::PathBuf>,
    /// Heartbeat period, seconds (0.1 to 3600): each heartbeat carries the probes in flight;
    /// the coordinator marks the agent disconnected after 3 periods without a word.
    #[arg(long, env = "LATMESH_AGENT_HEARTBEAT_S", default_value_t = 5.0,
          value_parser = parse_heartbeat_s)]
    heartbeat_s: f64,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (e.g. 127.0.0.1:9464; port 0 picks
    /// one). Default: off. Metrics carry no secret, but keep them on loopback or a private
    /// network.
    #[arg(long, env = "LATMESH_AGENT_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Threads running the probes: 1 (the default) runs everything on one thread (tokio's
    /// current-thread runtime: no cross-thread wake-ups, 15–20 % less CPU per streamed token
    /// than a multi-threaded runtime, see BENCHMARKS.md); N > 1 uses N threads, 0 one per
    /// core. One thread holds 10,000 streams or 2,000 requests/s on the benchmark machine;
    /// spool writes and interval-histogram encoding run on threads of their own either way.
    #[arg(long, env = "LATMESH_AGENT_WORKER_THREADS", default_value_t = 1)]
    worker_threads: usize,
    /// Simulator only: tell loopback providers this agent's region in an
    /// `x-latmesh-region` header (latmesh-sim adds its network delay by it). Never sent to a
    /// host that is not loopback, whatever this says; real providers get no latmesh header.
    #[arg(long, env = "LATMESH_AGENT_EMULATE_REGION")]
    emulate_region: bool,
}

fn parse_region(s: &str) -> Result<String, String> {
    latmesh_core::campaign::check_name_text(s).map(|()| s.to_string())
}

fn parse_heartbeat_s(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    if v.is_finite() && (0.1..=3600.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside 0.1..=3600 seconds"))
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // A mistyped LATMESH_ variable (LATMESH_AGENT_EMULATE_REGIONS) would be ignored in
    // silence: refuse it, naming the nearest real one, as the campaign commands do.
    if let Err(e) = latmesh_core::env_overrides::check_env(
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()),
    ) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    let runtime = if args.worker_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if args.worker_threads > 1 {
            b.worker_threads(args.worker_threads);
        }
        b.enable_all().build()
    };
    match runtime {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> std::process::ExitCode {
    latmesh_core::logging::init("info");
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "agent".into());
    let agent_id = args
        .agent_id
        .unwrap_or_else(|| format!("{}-{host}", args.region));
    let mut cfg = latmesh_agent::AgentConfig::new(&args.coordinator, &agent_id, &args.region);
    cfg.exit_after_campaigns = args.exit_after;
    cfg.heartbeat = std::time::Duration::from_secs_f64(args.heartbeat_s);
    cfg.spool = Some(latmesh_agent::spool::SpoolConfig {
        prune_parent: args.spool_dir.is_none(),
        dir: args
            .spool_dir
            .unwrap_or_else(|| latmesh_agent::spool::default_dir(&cfg.coordinator_url, &agent_id)),
        max_bytes: args.spool_max_mib.saturating_mul(1 << 20),
    });
    cfg.ca_file = args.ca_file;
    cfg.provider_ca_file = args.provider_ca_file;
    cfg.emulate_region = args.emulate_region;
    let token = latmesh_rpc::Secret::from_file_or_env(
        args.token_file.as_deref(),
        "LATMESH_AGENT_TOKEN",
        "agent token",
    );
    cfg.token = match token {
        Ok(token) => token,
        Err(e) => {
            eprintln!("error: {}", latmesh_core::error_text::chain(e.as_ref()));
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Some(listen) = &args.metrics_listen {
        match latmesh_agent::metrics::serve(listen, cfg.runner.metrics.registry()).await {
            Ok(addr) => println!("metrics on http://{addr}/metrics"),
            Err(e) => {
                eprintln!("error: {}", latmesh_core::error_text::chain(e.as_ref()));
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    match latmesh_agent::run(cfg).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", latmesh_core::error_text::chain(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}
