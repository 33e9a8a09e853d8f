//! The agent's session with the coordinator: connect (and reconnect with backoff), hello,
//! NTP-style clock pings, plan pushes, result batches and acks, heartbeats (with the number
//! of attempts in flight), and cancels.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use latmesh_core::clock::{self, ClockEstimate, ClockSample};
use latmesh_core::plan::Plan;
use latmesh_core::wire::{MAX_KEY_ENV_NAME_BYTES, MAX_KEY_ENV_NAMES};
use latmesh_proto::PROTOCOL_VERSION;
use latmesh_proto::pb;
use latmesh_proto::pb::agent_message::Kind as Out;
use latmesh_proto::pb::coordinator_message::Kind as In;
use latmesh_rpc::{AGENT_ID_METADATA, Secret, authorize, connect_channel};
use rand::Rng;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::AsciiMetadataValue;

use crate::outbox::Outbox;
use crate::probe::Prober;
use crate::runner::{CampaignRun, Cancel, RunnerConfig, now_unix_us, run_campaign};

/// Cancel switches of the campaigns this process runs, by campaign id.
type Cancels = Arc<std::sync::Mutex<BTreeMap<String, Cancel>>>;

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
    /// Heartbeat (and clock refresh) period; the coordinator marks the agent disconnected
    /// after 3 periods without a word. Default 5 s (`latmesh-agent --heartbeat-s`).
    pub heartbeat: Duration,
    /// Runner settings.
    pub runner: RunnerConfig,
    /// Exit after this many campaigns finished and were fully acked (`None`: run forever).
    pub exit_after_campaigns: Option<usize>,
    /// On-disk spool of unacked batches (`None`: in memory only, lost if the process dies).
    pub spool: Option<crate::spool::SpoolConfig>,
    /// Bearer token sent on the session (`authorization` metadata); `None`: none sent.
    pub token: Option<Secret>,
    /// PEM file with the CA certificate(s) to trust for an `https://` coordinator (`None`:
    /// the webpki roots).
    pub ca_file: Option<PathBuf>,
    /// PEM file with CA certificate(s) trusted for `https://` providers besides the public
    /// webpki roots (a private CA in front of a self-hosted server); `None`: webpki roots.
    pub provider_ca_file: Option<PathBuf>,
    /// Simulator only: requests to loopback providers carry `x-latmesh-region: {region}`
    /// (`latmesh-agent --emulate-region`; never sent to another host, see
    /// [`emulation_headers`](crate::probe::emulation_headers)). Default `false`.
    pub emulate_region: bool,
}

impl AgentConfig {
    /// Defaults for an agent `agent_id` in `region` connecting to `coordinator_url`.
    pub fn new(coordinator_url: &str, agent_id: &str, region: &str) -> Self {
        AgentConfig {
            coordinator_url: latmesh_rpc::coordinator_url(coordinator_url),
            agent_id: agent_id.to_string(),
            region: region.to_string(),
            clock_pings: 8,
            heartbeat: Duration::from_secs(5),
            runner: RunnerConfig::default(),
            exit_after_campaigns: None,
            spool: None,
            token: None,
            ca_file: None,
            provider_ca_file: None,
            emulate_region: false,
        }
    }
}

/// Of the environment variable names `names`, those whose variable holds a value usable as an
/// API key (what [`crate::probe::request::api_key_from_env`] would send: not blank, valid in a
/// header), sorted, at most [`MAX_KEY_ENV_NAMES`] of at most [`MAX_KEY_ENV_NAME_BYTES`]
/// (the coordinator refuses a hello with more or longer ones): the hello tells the coordinator these
/// names, never a value, so it can refuse a campaign whose `api_key_env` this agent lacks.
pub fn key_env_names(names: impl Iterator<Item = std::ffi::OsString>) -> Vec<String> {
    let mut out: Vec<String> = names
        .filter_map(|k| k.into_string().ok())
        .filter(|k| {
            !k.is_empty()
                && k.len() <= MAX_KEY_ENV_NAME_BYTES
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && matches!(crate::probe::request::api_key_from_env(k), Ok(Some(_)))
        })
        .collect();
    out.sort();
    out.dedup();
    if out.len() > MAX_KEY_ENV_NAMES {
        tracing::warn!(
            names = out.len(),
            "more API key variables than a hello lists ({MAX_KEY_ENV_NAMES}): names that look like keys (KEY, TOKEN, SECRET, API) are listed first; the coordinator will not see the rest"
        );
        out = keyish_first(out, MAX_KEY_ENV_NAMES);
    }
    out
}

/// The `keep` names of `names` (sorted) an `api_key_env` most likely is: those containing
/// `KEY`, `TOKEN`, `SECRET` or `API` (any case) before the others, each group in order;
/// returned sorted.
fn keyish_first(mut names: Vec<String>, keep: usize) -> Vec<String> {
    let keyish = |n: &str| {
        let n = n.to_ascii_uppercase();
        ["KEY", "TOKEN", "SECRET", "API"]
            .iter()
            .any(|w| n.contains(w))
    };
    names.sort_by_key(|n| !keyish(n));
    names.truncate(keep);
    names.sort();
    names
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
/// Only for a configuration that cannot work (a refused protocol version, a token the
/// coordinator does not accept, an unreadable CA file or provider CA file, an HTTP client
/// that cannot be built); network failures (TLS handshakes included) are retried with
/// backoff.
pub async fn run(cfg: AgentConfig) -> anyhow::Result<()> {
    let mut cfg = cfg;
    cfg.runner.region.clone_from(&cfg.region);
    if let Some(path) = &cfg.ca_file {
        anyhow::ensure!(
            cfg.coordinator_url.starts_with("https://"),
            "--ca-file {} is given but the coordinator URL {} is plaintext: use https://",
            path.display(),
            cfg.coordinator_url
        );
        latmesh_rpc::tls::read_ca_file(path)?;
    }
    let prober = Arc::new(
        Prober::with_root_certificate_file(
            cfg.emulate_region.then_some(cfg.region.as_str()),
            cfg.provider_ca_file.as_deref(),
        )
        .context("--provider-ca-file")?,
    );
    let outbox = Outbox::open(cfg.spool.as_ref(), &cfg.agent_id)?;
    let (clock_tx, clock_rx) = watch::channel::<Option<ClockEstimate>>(None);
    cfg.runner
        .metrics
        .attach(&outbox, clock_rx.clone(), cfg.runner.in_flight.clone());
    let started: Arc<std::sync::Mutex<BTreeSet<String>>> = Default::default();
    let cancels: Cancels = Default::default();
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
            &cancels,
            &finished_tx,
            &mut finished_rx,
            &mut finished,
        );
        match attempt.await {
            Ok(SessionEnd::Exit) => {
                outbox.close();
                return Ok(());
            }
            Ok(SessionEnd::Lost) => backoff = Duration::from_millis(100),
            Err(SessionError::Fatal(e)) => {
                outbox.close();
                return Err(e);
            }
            Err(SessionError::Retry(e)) => {
                let retry_in_ms = backoff.as_millis() as u64;
                // An answer that refuses the session (e.g. its agent id is in use) is not a
                // network problem: say which it is.
                // A TLS answer to plaintext is a network problem, whatever carries it (its
                // text, "the coordinator speaks TLS: use https://", is in the chain).
                let speaks_tls = latmesh_rpc::tls::TlsProblem::of(e.as_ref())
                    == Some(latmesh_rpc::tls::TlsProblem::SpeaksTls);
                if speaks_tls {
                    let error = latmesh_core::error_text::chain(e.as_ref());
                    tracing::warn!(coordinator = %cfg.coordinator_url, error, retry_in_ms, "cannot reach coordinator");
                } else if let Some(status) =
                    e.chain().find_map(|c| c.downcast_ref::<tonic::Status>())
                {
                    let reason = status.message();
                    tracing::warn!(coordinator = %cfg.coordinator_url, reason, retry_in_ms, "the coordinator refused the session");
                } else {
                    let error = latmesh_core::error_text::chain(e.as_ref());
                    tracing::warn!(coordinator = %cfg.coordinator_url, error, retry_in_ms, "cannot reach coordinator");
                }
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
    cancels: &Cancels,
    finished_tx: &mpsc::UnboundedSender<String>,
    finished_rx: &mut mpsc::UnboundedReceiver<String>,
    finished: &mut usize,
) -> Result<SessionEnd, SessionError> {
    let channel = connect_channel(&cfg.coordinator_url, cfg.ca_file.as_deref())
        .await
        .map_err(SessionError::Retry)?;
    let mut client = latmesh_rpc::session_client(channel);
    let (tx, rx) = mpsc::channel::<pb::AgentMessage>(256);
    let hello = pb::AgentHello {
        agent_id: cfg.agent_id.clone(),
        region: cfg.region.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        protocol_version: PROTOCOL_VERSION,
        key_env_names: key_env_names(std::env::vars_os().map(|(k, _)| k)),
        key_env_reported: true,
    };
    let _ = tx.send(msg(Out::Hello(hello))).await;
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(token) = &cfg.token {
        authorize(request.metadata_mut(), token);
    }
    if let Ok(id) = AsciiMetadataValue::try_from(cfg.agent_id.as_str()) {
        request.metadata_mut().insert(AGENT_ID_METADATA, id);
    }
    let mut inbound = match client.session(request).await {
        Ok(r) => r.into_inner(),
        Err(s)
            if s.code() == tonic::Code::Unauthenticated
                || s.code() == tonic::Code::PermissionDenied =>
        {
            let hint = if cfg.token.is_some() {
                "check the token (LATMESH_AGENT_TOKEN or --token-file) against the coordinator's agent token"
            } else {
                "this agent has no token: set LATMESH_AGENT_TOKEN or pass --token-file"
            };
            return Err(SessionError::Fatal(anyhow::anyhow!(
                "coordinator {} refused this agent's credentials: {} ({hint})",
                cfg.coordinator_url,
                s.message()
            )));
        }
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
    let _connected = cfg.runner.metrics.connected();
    outbox.resend_all();

    // The coordinator's first message; a server that is not one (an HTTP server answering
    // 404, say) fails the stream before it, and is retried with a growing backoff.
    let mut welcomed = false;
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
        if cfg.exit_after_campaigns.is_some_and(|n| *finished >= n)
            && outbox.unacked_in(&started.lock().unwrap_or_else(|e| e.into_inner())) == 0
        {
            // Give the last Done a moment to leave before the stream closes.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return Ok(SessionEnd::Exit);
        }
        tokio::select! {
            m = inbound.message() => match m {
                Ok(Some(pb::CoordinatorMessage { kind: Some(kind) })) => match kind {
                    In::Welcome(_) => {
                        welcomed = true;
                        tracing::info!(coordinator = %cfg.coordinator_url, agent = %cfg.agent_id, region = %cfg.region, "connected");
                    }
                    In::Pong(p) => {
                        samples.push(ClockSample { t1: p.agent_send_unix_us, t2: p.coord_recv_unix_us, t3: p.coord_send_unix_us, t4: now_unix_us() });
                        if samples.len() > 64 {
                            samples.drain(..samples.len() - 64);
                        }
                        clock_tx.send_replace(clock::estimate(&samples));
                    }
                    In::Ack(a) => outbox.ack(&a.campaign_id, a.seq),
                    In::Rejected(r) => outbox.reject(&r.campaign_id, r.seq, &r.reason),
                    In::Plan(p) => {
                        // A fresh burst of clock samples before the synchronized start: the
                        // runner re-reads the estimate shortly before `start_at`.
                        pings_due = pings_due.max(cfg.clock_pings * 4);
                        start_campaign(p, prober, outbox, clock_rx, started, cancels, finished_tx, &cfg.runner)
                    }
                    In::Cancel(c) => {
                        let found = cancels.lock().unwrap_or_else(|e| e.into_inner()).get(&c.campaign_id).cloned();
                        match found {
                            Some(cancel) => {
                                tracing::warn!(campaign = %c.campaign_id, reason = %c.reason, in_flight = cfg.runner.in_flight.load(std::sync::atomic::Ordering::SeqCst), "campaign cancelled by the coordinator: no new probes; in-flight ones get {:?}", cfg.runner.cancel_grace);
                                cancel.cancel();
                            }
                            None => tracing::info!(campaign = %c.campaign_id, "cancel for a campaign not running here: ignored"),
                        }
                    }
                    In::Refused(r) => return Err(SessionError::Fatal(anyhow::anyhow!("coordinator refused this agent: {}", r.reason))),
                },
                Ok(Some(_)) => {}
                Ok(None) if !welcomed => return Err(SessionError::Retry(anyhow::anyhow!("the session ended before the coordinator's welcome (is {} a latmesh coordinator?)", cfg.coordinator_url))),
                Err(e) if !welcomed => return Err(SessionError::Retry(anyhow::anyhow!("no welcome from the coordinator (is {} a latmesh coordinator?): {e}", cfg.coordinator_url))),
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
                    in_flight: cfg.runner.in_flight.load(std::sync::atomic::Ordering::SeqCst),
                    interval_ms: cfg.heartbeat.as_millis().min(u128::from(u32::MAX)) as u32,
                    batches_quarantined: outbox.stats().quarantined_batches_total,
                }))).await;
                pings_due = pings_due.max(2);
            }
            Some(id) = finished_rx.recv() => {
                cancels.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                *finished += 1;
            }
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

#[allow(clippy::too_many_arguments)]
fn start_campaign(
    p: pb::PlanPush,
    prober: &Arc<Prober>,
    outbox: &Outbox,
    clock_rx: &watch::Receiver<Option<ClockEstimate>>,
    started: &Arc<std::sync::Mutex<BTreeSet<String>>>,
    cancels: &Cancels,
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
    let cancel = Cancel::default();
    cancels
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(p.campaign_id.clone(), cancel.clone());
    let run = CampaignRun {
        campaign_id: p.campaign_id.clone(),
        plan: Arc::new(plan),
        start_at_coord_unix_us: p.start_at_coord_unix_us,
        first_seq: outbox.first_seq(&p.campaign_id, p.next_seq),
        cancel,
        agents: p.agents.max(1),
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

#[cfg(test)]
mod tests {
    use super::key_env_names;

    #[test]
    fn the_hello_names_the_variables_holding_a_usable_key_and_never_a_value() {
        // SAFETY: variables only this test uses; tests in this process do not read them.
        unsafe {
            std::env::set_var("LATMESH_TEST_HELLO_KEY", "sk-hello-secret");
            std::env::set_var("LATMESH_TEST_HELLO_BLANK", "  ");
            std::env::set_var("LATMESH_TEST_HELLO_BAD", "sk-a\u{1}b");
        }
        let names = key_env_names(
            [
                "LATMESH_TEST_HELLO_UNSET",
                "LATMESH_TEST_HELLO_KEY",
                "LATMESH_TEST_HELLO_BLANK",
                "LATMESH_TEST_HELLO_BAD",
                "LATMESH_TEST_HELLO_KEY",
            ]
            .into_iter()
            .map(Into::into),
        );
        assert_eq!(names, ["LATMESH_TEST_HELLO_KEY"]);
        // Within the coordinator's bounds: a longer name is left out.
        let long = "K".repeat(super::MAX_KEY_ENV_NAME_BYTES + 1);
        // SAFETY: a variable only this test uses.
        unsafe { std::env::set_var(&long, "sk-long") };
        assert!(key_env_names(std::iter::once(long.into())).is_empty());
        // From the real environment: the set one is among them, no value is.
        let all = key_env_names(std::env::vars_os().map(|(k, _)| k));
        assert!(all.contains(&"LATMESH_TEST_HELLO_KEY".to_string()));
        assert!(!all.iter().any(|n| n.contains("sk-hello")));
    }

    #[test]
    fn past_the_hello_s_limit_names_that_look_like_keys_are_kept() {
        let mut names: Vec<String> = (0..1100).map(|i| format!("POD_VAR_{i:04}")).collect();
        names.push("ZZZ_API_KEY".into());
        names.push("openrouter_token".into());
        names.sort();
        let kept = super::keyish_first(names, 1024);
        assert_eq!(kept.len(), 1024);
        assert!(kept.contains(&"ZZZ_API_KEY".to_string()));
        assert!(kept.contains(&"openrouter_token".to_string()));
        assert!(kept.is_sorted());
    }
}
