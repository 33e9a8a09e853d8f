//! `latmesh demo`: the whole distributed path on one machine. Starts the simulator (nine
//! providers), a coordinator and three agents (`us-east`, `eu-west`, `ap-southeast`) as tasks
//! talking gRPC and HTTP over loopback, runs the embedded campaign `examples/demo.toml`, and
//! returns the summary.

use std::time::Duration;

use anyhow::Context;
use latmesh_core::campaign;
use tokio::net::TcpListener;

use crate::service::Coordinator;
use crate::state::State;
use crate::summary::Summary;
use crate::watch;

/// The embedded demo campaign; `{sim}` stands for the simulator's address.
pub const DEMO_CAMPAIGN: &str = include_str!("../../examples/demo.toml");

/// Demo knobs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Override `rounds.count` (None: the file's).
    pub rounds: Option<u32>,
    /// Print progress lines.
    pub progress: bool,
    /// Also store results in ClickHouse.
    pub clickhouse: Option<DemoStore>,
}

/// Where a demo stores its results besides printing them.
#[derive(Clone, Debug)]
pub struct DemoStore {
    /// ClickHouse HTTP URL.
    pub url: String,
    /// Database.
    pub db: String,
    /// Spool directory (default [`DEMO_SPOOL_DIR`]).
    pub spool_dir: std::path::PathBuf,
}

/// Spool directory of a demo that stores into ClickHouse.
pub const DEMO_SPOOL_DIR: &str = ".latmesh/demo-spool";

/// Runs the demo and returns the summary.
///
/// # Errors
/// When a local listener cannot be bound, or the campaign fails to complete.
pub async fn run(opts: DemoOptions) -> anyhow::Result<Summary> {
    let sim_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the simulator")?;
    let sim_addr = sim_listener.local_addr()?;
    let sim = tokio::spawn(latmesh_sim::serve_providers(
        sim_listener,
        latmesh_sim::SimConfig::default(),
    ));

    let coord_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the coordinator")?;
    let coord_url = format!("http://{}", coord_listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (server, store) = match &opts.clickhouse {
        None => (Coordinator::new(State::default()), None),
        Some(store) => {
            let target = crate::sink::SinkTarget {
                client: crate::clickhouse::client(&store.url),
                db: store.db.clone(),
            };
            let (c, spool, sink) =
                crate::sink::coordinator_with_sink(&store.spool_dir, 1 << 30, target)?;
            (c, Some((spool, sink)))
        }
    };
    let coordinator = tokio::spawn(server.serve(coord_listener, async {
        let _ = stop_rx.await;
    }));

    let text = DEMO_CAMPAIGN.replace("{sim}", &sim_addr.to_string());
    let mut plan = campaign::load_toml_str(&text, std::path::Path::new("."))
        .context("embedded demo campaign")?;
    if let Some(n) = opts.rounds {
        plan.rounds.count = n.max(1);
    }
    let mut agents = Vec::new();
    for (i, region) in plan.regions.iter().enumerate() {
        let mut cfg =
            latmesh_agent::AgentConfig::new(&coord_url, &format!("{region}-{}", i + 1), region);
        cfg.exit_after_campaigns = Some(1);
        agents.push(tokio::spawn(latmesh_agent::run(cfg)));
    }

    let mut client = watch::connect(&coord_url).await?;
    watch::wait_for_agents(
        &mut client,
        &coord_url,
        &plan.regions,
        Duration::from_secs(15),
    )
    .await?;
    let reply = watch::launch(&mut client, &coord_url, &plan, 1.0).await?;
    if opts.progress {
        eprintln!(
            "demo: campaign {} — {} agents, {} providers × {} scenarios × {} rounds",
            reply.campaign_id,
            reply.agent_ids.len(),
            plan.providers.len(),
            plan.scenarios.len(),
            plan.rounds.count
        );
    }
    let every = if opts.progress {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(3600)
    };
    let summary = watch::follow(&mut client, &coord_url, &reply.campaign_id, every).await?;

    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    if let Some((spool, sink)) = store {
        // Results are durable in the spool already; give the sink a moment to drain it.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while spool.pending_entries() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if spool.pending_entries() > 0 {
            eprintln!(
                "demo: {} batches are still in {DEMO_SPOOL_DIR} (ClickHouse unreachable?); the next coordinator with this spool dir stores them",
                spool.pending_entries()
            );
        }
        sink.abort();
    }
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(2), coordinator).await;
    sim.abort();
    Ok(summary)
}
