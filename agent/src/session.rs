//! The agent's session with the coordinator: connect (and reconnect with backoff), hello,
//! NTP-style clock pings, plan pushes, result batches and acks, heartbeats.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use latmesh_core::clock::{self, ClockEstimate, ClockSample};
use latmesh_core::plan::Plan;
use latmesh_proto::PROTOCOL_VERSION;
use latmesh_proto::pb::agent_message::Kind as Out;
use latmesh_proto::pb::coordinator_message::Kind as In;
use latmesh_proto::pb::{self, agent_session_client::AgentSessionClient};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::outbox::Outbox;
use crate::probe::Prober;
use crate::runner::{CampaignRun, RunnerConfig, now_unix_us, run_campaign};

/// How an agent identifies itself and where it connects.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Coordinator gRPC URL, e.g. `http://127.0.0.1:7700`.
    pub coordinator_url: String,
    /// Stable id of this agent.
    pub agent_id: String,
    /// Region it measures from.
    pub region: String,
    /// Clock pings per exchange burst (the least-delayed one wins).
    pub clock_pings: u32,
    /// Heartbeat (and clock refresh) period.
    pub heartbeat: Duration,
    /// Runner settings.
    pub runner: RunnerConfig,
    /// Exit after this many campaigns finished and were fully acked (`None`: run forever).
    pub exit_after_campaigns: Option<usize>,
}

impl AgentConfig {
    /// Defaults for an agent `agent_id` in `region` connecting to `coordinator_url`.
    pub fn new(coordinator_url: &str, agent_id: &str, region: &str) -> Self {
        AgentConfig {
            coordinator_url: self::coordinator_url(coordinator_url),
            agent_id: agent_id.to_string(),
            region: region.to_string(),
            clock_pings: 8,
            heartbeat: Duration::from_secs(5),
            runner: RunnerConfig::default(),
            exit_after_campaigns: None,
        }
    }
}

/// A coordinator address as a URL: `host:port` gets `http://` in front; URLs are kept.
pub fn coordinator_url(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// How often unacked batches are checked.
const RESEND_CHECK: Duration = Duration::from_secs(5);
/// A batch unacked this long after it was sent is sent again.
const RESEND_AFTER: Duration = Duration::from_secs(20);

fn msg(kind: Out) -> pb::AgentMessage {
    pb::AgentMessage { kind: Some(kind) }
}

/// Runs the agent until `exit_after_campaigns` is reached (or forever).
///
/// # Errors
/// Only for a configuration that cannot work (a refused protocol version, an HTTP client that
/// cannot be built); network failures are retried with backoff.
pub async fn run(cfg: AgentConfig) -> anyhow::Result<()> {
    let prober = Arc::new(Prober::new(Some(&cfg.region))?);
    let outbox = Outbox::default();
    let (clock_tx, clock_rx) = watch::channel::<Option<ClockEstimate>>(None);
    let started: Arc<std::sync::Mutex<BTreeSet<String>>> = Default::default();
    let (finished_tx, mut finished_rx) = mpsc::unbounded_channel::<String>();
    let mut finished: usize = 0;
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = session(
            &cfg,
            &prober,
            &outbox,
            &clock_tx,
            &clock_rx,
            &started,
            &finished_tx,
            &mut finished_rx,
            &mut finished,
        );
        match attempt.await {
            Ok(SessionEnd::Exit) => return Ok(()),
            Ok(SessionEnd::Lost) => backoff = Duration::from_millis(100),
            Err(SessionError::Fatal(e)) => return Err(e),
            Err(SessionError::Retry(e)) => {
                tracing::warn!(coordinator = %cfg.coordinator_url, error = format!("{e:#}"), retry_in_ms = backoff.as_millis() as u64, "cannot reach coordinator");
            }
        }
        let jitter = rand::rng().random_range(0..=backoff.as_millis() as u64 / 4);
        tokio::time::sleep(backoff + Duration::from_millis(jitter)).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

enum SessionEnd {
    Exit,
    Lost,
}

enum SessionError {
    Fatal(anyhow::Error),
    Retry(anyhow::Error),
}

#[allow(clippy::too_many_arguments)]
async fn session(
    cfg: &AgentConfig,
    prober: &Arc<Prober>,
    outbox: &Outbox,
    clock_tx: &watch::Sender<Option<ClockEstimate>>,
    clock_rx: &watch::Receiver<Option<ClockEstimate>>,
    started: &Arc<std::sync::Mutex<BTreeSet<String>>>,
    finished_tx: &mpsc::UnboundedSender<String>,
    finished_rx: &mut mpsc::UnboundedReceiver<String>,
    finished: &mut usize,
) -> Result<SessionEnd, SessionError> {
    let mut client = AgentSessionClient::connect(cfg.coordinator_url.clone())
        .await
        .map_err(|e| SessionError::Retry(e.into()))?;
    let (tx, rx) = mpsc::channel::<pb::AgentMessage>(256);
    let hello = pb::AgentHello {
        agent_id: cfg.agent_id.clone(),
        region: cfg.region.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        protocol_version: PROTOCOL_VERSION,
    };
    let _ = tx.send(msg(Out::Hello(hello))).await;
    let mut inbound = match client.session(ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(s)
            if s.code() == tonic::Code::FailedPrecondition
                || s.code() == tonic::Code::InvalidArgument =>
        {
            return Err(SessionError::Fatal(anyhow::anyhow!(
                "coordinator refused this agent: {}",
                s.message()
            )));
        }
        Err(s) => return Err(SessionError::Retry(s.into())),
    };
    tracing::info!(coordinator = %cfg.coordinator_url, agent = %cfg.agent_id, region = %cfg.region, "connected");
    outbox.resend_all();

    let mut samples: Vec<ClockSample> = Vec::new();
    let mut ping_seq = 0u64;
    let mut pings_due = cfg.clock_pings;
    let mut ping_tick = tokio::time::interval(Duration::from_millis(20));
    let mut heartbeat = tokio::time::interval(cfg.heartbeat);
    heartbeat.tick().await;
    let mut resend = tokio::time::interval(RESEND_CHECK);
    resend.tick().await;
    loop {
        // Send whatever is pending before waiting.
        let pending = outbox.take_pending();
        for b in pending.batches {
            if tx.send(msg(Out::Batch(b))).await.is_err() {
                return Ok(SessionEnd::Lost);
            }
        }
        for d in pending.dones {
            let _ = tx.send(msg(Out::Done(d))).await;
        }
        if cfg.exit_after_campaigns.is_some_and(|n| *finished >= n) && outbox.unacked() == 0 {
            // Give the last Done a moment to leave before the stream closes.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Ok(SessionEnd::Exit);
        }
        tokio::select! {
            m = inbound.message() => match m {
                Ok(Some(pb::CoordinatorMessage { kind: Some(kind) })) => match kind {
                    In::Welcome(_) => {}
                    In::Pong(p) => {
                        samples.push(ClockSample { t1: p.agent_send_unix_us, t2: p.coord_recv_unix_us, t3: p.coord_send_unix_us, t4: now_unix_us() });
                        if samples.len() > 64 {
                            samples.drain(..samples.len() - 64);
                        }
                        clock_tx.send_replace(clock::estimate(&samples));
                    }
                    In::Ack(a) => outbox.ack(&a.campaign_id, a.seq),
                    In::Plan(p) => start_campaign(p, prober, outbox, clock_rx, started, finished_tx, &cfg.runner),
                    In::Refused(r) => return Err(SessionError::Fatal(anyhow::anyhow!("coordinator refused this agent: {}", r.reason))),
                },
                Ok(Some(_)) => {}
                Ok(None) => { tracing::warn!("coordinator closed the session"); return Ok(SessionEnd::Lost); }
                Err(e) => { tracing::warn!(error = %e, "session lost"); return Ok(SessionEnd::Lost); }
            },
            _ = ping_tick.tick(), if pings_due > 0 => {
                pings_due -= 1;
                ping_seq += 1;
                let _ = tx.send(msg(Out::Ping(pb::ClockPing { seq: ping_seq, agent_send_unix_us: now_unix_us() }))).await;
            }
            _ = heartbeat.tick() => {
                let est = clock_rx.borrow().unwrap_or_default();
                let _ = tx.send(msg(Out::Heartbeat(pb::Heartbeat {
                    agent_unix_us: now_unix_us(),
                    clock_offset_us: est.offset_us,
                    clock_uncertainty_us: est.uncertainty_us,
                    in_flight: 0,
                }))).await;
                pings_due = pings_due.max(2);
            }
                        Some(_) = finished_rx.recv() => { *finished += 1; }
            _ = resend.tick() => {
                let n = outbox.resend_stale(RESEND_AFTER);
                if n > 0 {
                    tracing::warn!(batches = n, "resending batches the coordinator has not acked");
                }
            }
            _ = outbox.changed() => {}
        }
    }
}

fn start_campaign(
    p: pb::PlanPush,
    prober: &Arc<Prober>,
    outbox: &Outbox,
    clock_rx: &watch::Receiver<Option<ClockEstimate>>,
    started: &Arc<std::sync::Mutex<BTreeSet<String>>>,
    finished_tx: &mpsc::UnboundedSender<String>,
    runner: &RunnerConfig,
) {
    if !started
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p.campaign_id.clone())
    {
        return; // pushed again after a reconnect: already running
    }
    let plan: Plan = match serde_json::from_str(&p.plan_json) {
        Ok(plan) => plan,
        Err(e) => {
            tracing::error!(campaign = %p.campaign_id, error = %e, "plan does not parse; campaign skipped");
            return;
        }
    };
    let run = CampaignRun {
        campaign_id: p.campaign_id.clone(),
        plan: Arc::new(plan),
        start_at_coord_unix_us: p.start_at_coord_unix_us,
        first_seq: p.next_seq,
    };
    let (prober, outbox, clock, finished_tx, runner) = (
        prober.clone(),
        outbox.clone(),
        clock_rx.clone(),
        finished_tx.clone(),
        runner.clone(),
    );
    tokio::spawn(async move {
        run_campaign(run, prober, clock, outbox, runner).await;
        let _ = finished_tx.send(p.campaign_id);
    });
}
