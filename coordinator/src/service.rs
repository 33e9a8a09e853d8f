//! Thin gRPC handlers: unpack, validate, delegate to [`State`], map errors to `Status`.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use futures::StreamExt;
use latmesh_proto::PROTOCOL_VERSION;
use latmesh_proto::pb::agent_message::Kind as In;
use latmesh_proto::pb::coordinator_message::Kind as Out;
use latmesh_proto::pb::{self, agent_session_server::AgentSession, control_server::Control};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, WatchStream};
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Auth;
use crate::metrics::{CoordinatorMetrics, RecordTally};
use crate::peer_warn::is_bad_message;
use crate::schedule::Scheduler;
use crate::spool::{Spool, SpoolError};
use crate::state::{State, StateError, now_unix_us};

/// Default delay between launch and round 0, µs: time for the plan to reach every agent.
pub const DEFAULT_START_DELAY_US: i64 = 2_000_000;

impl From<StateError> for Status {
    fn from(e: StateError) -> Status {
        match e {
            StateError::UnknownCampaign(_) => Status::not_found(e.to_string()),
            StateError::NoAgent { .. }
            | StateError::Busy { .. }
            | StateError::Finished { .. }
            | StateError::MissingKeys(_) => Status::failed_precondition(e.to_string()),
            StateError::BadPlan(_) | StateError::BadBatch { .. } => {
                Status::invalid_argument(e.to_string())
            }
            StateError::Storage(_) => Status::unavailable(e.to_string()),
        }
    }
}

/// The gRPC services over one [`State`] and its series [`Scheduler`].
#[derive(Clone, Debug)]
pub struct Coordinator {
    state: State,
    /// Series of scheduled campaigns, launched on `state`.
    scheduler: Scheduler,
    spool: Option<Arc<Spool>>,
    /// Tokens checked before any handler runs (default: none, every role open).
    auth: Auth,
    /// Serve over TLS (default: plaintext).
    tls: Option<crate::tls_listener::ServerTls>,
    /// Prometheus metrics (served by `latmesh serve --metrics-listen`).
    metrics: CoordinatorMetrics,
    /// Whether ClickHouse answers its sink (progress messages say so).
    store_health: Option<Arc<crate::store_health::StoreHealth>>,
}

impl Default for Coordinator {
    fn default() -> Self {
        Coordinator::new(State::default())
    }
}

impl Coordinator {
    /// A coordinator over `state`, acking batches once merged in memory.
    pub fn new(state: State) -> Self {
        Coordinator {
            scheduler: Scheduler::new(state.clone()),
            state,
            spool: None,
            auth: Auth::default(),
            tls: None,
            metrics: CoordinatorMetrics::default(),
            store_health: None,
        }
    }

    /// A coordinator that appends every new batch to `spool` (fsync'd) before acking it.
    pub fn with_spool(state: State, spool: Arc<Spool>) -> Self {
        Coordinator {
            spool: Some(spool),
            ..Coordinator::new(state)
        }
    }

    /// Its state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Its series scheduler.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The same coordinator, counting into `metrics` (e.g. the ones its sink counts into).
    pub fn with_metrics(self, metrics: CoordinatorMetrics) -> Self {
        Coordinator { metrics, ..self }
    }

    /// Its metrics; [`Coordinator::serve`] attaches its state and spool to them.
    pub fn metrics(&self) -> &CoordinatorMetrics {
        &self.metrics
    }

    /// The same coordinator, telling in progress messages what its sink's `health` says.
    pub fn with_store_health(self, health: Arc<crate::store_health::StoreHealth>) -> Self {
        Coordinator {
            store_health: Some(health),
            ..self
        }
    }

    /// The same coordinator, requiring the tokens of `auth` (agent session: agent token;
    /// control API: admin token).
    pub fn with_auth(self, auth: Auth) -> Self {
        Coordinator { auth, ..self }
    }

    /// The same coordinator, serving gRPC over TLS ([`crate::tls_listener::server_tls`]; handshakes
    /// by [`crate::tls_listener`], which logs the failed ones).
    pub fn with_tls(self, tls: crate::tls_listener::ServerTls) -> Self {
        Coordinator {
            tls: Some(tls),
            ..self
        }
    }

    /// Serves both services on `listener` until `shutdown` resolves; first loads the series
    /// of the state directory ([`Scheduler::restore`]); once a second, finishes campaigns
    /// whose deadline passed ([`State::expire`]) and launches the series' runs that are due
    /// ([`Scheduler::tick_series`]). Every call passes the token check of its service first
    /// (an interceptor: agent token for the session, admin token for the control API).
    ///
    /// # Errors
    /// Transport errors from tonic (a TLS configuration it cannot use included).
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        let builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(std::time::Duration::from_secs(10)));
        let tls = self.tls.take();
        let (agent_auth, admin_auth) = (self.auth.clone(), self.auth.clone());
        self.metrics.attach(&self.state, self.spool.as_ref());
        self.scheduler.restore();
        let (state, scheduler) = (self.state.clone(), self.scheduler.clone());
        let expiry = tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                state.check_liveness(now_unix_us());
                state.expire(now_unix_us());
                scheduler.tick_series(now_unix_us());
            }
        });
        use tonic::service::interceptor::InterceptedService;
        const LIMIT: usize = latmesh_core::wire::MAX_MESSAGE_BYTES;
        let session = pb::agent_session_server::AgentSessionServer::new(self.clone())
            .max_decoding_message_size(LIMIT)
            .max_encoding_message_size(LIMIT);
        let control = pb::control_server::ControlServer::new(self)
            .max_decoding_message_size(LIMIT)
            .max_encoding_message_size(LIMIT);
        let router = builder
            .layer(crate::peer_warn::WarnBadMessages)
            .add_service(InterceptedService::new(session, move |req| {
                agent_auth.check_agent(req)
            }))
            .add_service(InterceptedService::new(control, move |req| {
                admin_auth.check_admin(req)
            }));
        let served = match tls {
            Some(tls) => {
                router
                    .serve_with_incoming_shutdown(
                        crate::tls_listener::incoming(listener, tls),
                        shutdown,
                    )
                    .await
            }
            None => {
                router
                    .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                    .await
            }
        };
        expiry.abort();
        served
    }
}

fn send(tx: &mpsc::Sender<Result<pb::CoordinatorMessage, Status>>, kind: Out) -> bool {
    tx.try_send(Ok(pb::CoordinatorMessage { kind: Some(kind) }))
        .is_ok()
}

/// What to answer a batch.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// Stored now or before: ack it.
    Ack,
    /// Malformed ([`StateError::BadBatch`]: it does not decode or fails a protocol check): it
    /// never will be stored, so refuse it (`BatchRejected` with this reason) and the agent
    /// quarantines it instead of sending it again.
    Reject(String),
    /// Not storable for now (a spool full or failing, an unknown campaign): no answer, the
    /// agent sends it again later.
    Hold,
}

/// Stores one batch: checks it, appends it durably to the ClickHouse spool and to its
/// campaign's batch log in the state directory (each when there is one), merges it; says
/// how to answer it ([`Reply`]).
async fn store(
    state: &State,
    spool: Option<&Arc<Spool>>,
    metrics: &CoordinatorMetrics,
    agent: &str,
    b: pb::ResultBatch,
) -> Reply {
    let (checked, b) = match crate::state::check_off_runtime(state, agent, b).await {
        Some(checked) => checked,
        None => return Reply::Hold,
    };
    let checked = match checked {
        Ok(Some(checked)) => checked,
        Ok(None) => return Reply::Ack,
        Err(StateError::UnknownCampaign(id))
            if let Some(region) = state.finished_earlier(&id, agent) =>
        {
            return store_late(state, spool, agent, &region, b).await;
        }
        Err(StateError::BadBatch { message, .. }) => {
            let reason = latmesh_core::wire::reject_reason(&message).to_string();
            let refused = state.reject(agent, &b.campaign_id, b.seq, &reason);
            tracing::warn!(%agent, campaign = %b.campaign_id, seq = b.seq, %reason, refused_from_this_agent = refused, "batch refused as malformed: not stored; the agent quarantines it, and `campaign verify` reports this agent as not verified");
            return Reply::Reject(reason);
        }
        Err(e) => {
            tracing::error!(%agent, error = %e, "batch not stored, not acked");
            return Reply::Hold;
        }
    };
    let (spool, log) = (spool.cloned(), state.batch_log(&checked.campaign_id));
    if spool.is_some() || log.is_some() {
        let (agent_id, region) = (agent.to_string(), checked.region.clone());
        // The ClickHouse spool first: a coordinator killed between the two appends has not
        // acked the batch and does not count its seq after a restart, so the agent's resend
        // is spooled again (the sink stores a batch once) and logged.
        let appended = tokio::task::spawn_blocking(move || {
            if let Some(spool) = spool {
                spool
                    .append(&agent_id, &region, &b)
                    .map_err(|e| ("spool", e))?;
            }
            if let Some(log) = log {
                log.append(&agent_id, &region, &b)
                    .map_err(|e| ("state directory's batch log", e))?;
            }
            Ok::<_, (&str, SpoolError)>(())
        })
        .await;
        match appended {
            Ok(Ok(())) => {}
            Ok(Err((_, e @ SpoolError::Full { .. }))) => {
                tracing::warn!(%agent, error = %e, "spool full: batch not acked; the agent will resend it");
                return Reply::Hold;
            }
            Ok(Err((into, e))) => {
                tracing::error!(%agent, error = %e, "batch not written to the {into}, not acked");
                return Reply::Hold;
            }
            Err(e) => {
                tracing::error!(%agent, error = %e, "spool task failed; batch not acked");
                return Reply::Hold;
            }
        }
    }
    let tally = RecordTally::of(&checked);
    if state.merge(checked) {
        metrics.records_received(tally);
    }
    Reply::Ack
}

/// A resent batch of a campaign an earlier coordinator process finished: appended to the
/// ClickHouse spool when there is one (the sink stores a batch once), then acked so it leaves
/// the agent's spool. The campaign's summary is final and does not change.
async fn store_late(
    state: &State,
    spool: Option<&Arc<Spool>>,
    agent: &str,
    region: &str,
    mut b: pb::ResultBatch,
) -> Reply {
    let (campaign_id, seq) = (b.campaign_id.clone(), b.seq);
    if let Some(spool) = spool.cloned() {
        let (agent_id, region, state) = (agent.to_string(), region.to_string(), state.clone());
        // Checked like a running campaign's batch first (off the runtime, one decode slot):
        // a malformed one is refused (the agent quarantines it), not resent forever.
        let _slot = crate::intake::decode_slot().await;
        let appended = tokio::task::spawn_blocking(move || {
            if let Err(e) = state.check_late(&agent_id, &mut b) {
                return Err(match e {
                    StateError::BadBatch { message, .. } => {
                        Reply::Reject(latmesh_core::wire::reject_reason(&message).to_string())
                    }
                    e => {
                        tracing::warn!(agent = %agent_id, error = %e, "late batch of a finished campaign not checked, not acked");
                        Reply::Hold
                    }
                });
            }
            spool.append(&agent_id, &region, &b).map_err(|e| {
                tracing::warn!(agent = %agent_id, error = %e, "late batch of a finished campaign not spooled, not acked");
                Reply::Hold
            })
        })
        .await;
        match appended {
            Ok(Ok(_)) => {}
            Ok(Err(Reply::Reject(reason))) => {
                tracing::warn!(%agent, campaign = %campaign_id, seq, %reason, "late batch of a finished campaign refused as malformed: not stored; the agent quarantines it");
                return Reply::Reject(reason);
            }
            Ok(Err(reply)) => return reply,
            Err(e) => {
                tracing::warn!(%agent, campaign = %campaign_id, seq, error = %e, "late batch task failed, not acked");
                return Reply::Hold;
            }
        }
    }
    tracing::info!(%agent, campaign = %campaign_id, seq, stored = spool.is_some(), "late batch of a campaign finished before this coordinator started: acked (its summary stays final)");
    Reply::Ack
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentSession for Coordinator {
    type SessionStream = BoxStream<pb::CoordinatorMessage>;

    async fn session(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let mut inbound = request.into_inner();
        let first = inbound.message().await.inspect_err(|e| {
            if is_bad_message(e) {
                tracing::warn!(%peer, code = ?e.code(), error = %e.message(), "a peer sent an oversized or undecodable first message");
            }
        })?;
        let hello = match first {
            Some(pb::AgentMessage {
                kind: Some(In::Hello(h)),
            }) => h,
            _ => {
                return Err(Status::invalid_argument(
                    "the first message of a session must be AgentHello",
                ));
            }
        };
        if let Err(reason) = crate::intake::check_hello(&hello) {
            tracing::warn!(%peer, "refused agent: {reason}");
            return Err(Status::invalid_argument(reason));
        }
        if hello.protocol_version != PROTOCOL_VERSION {
            tracing::warn!(agent = %hello.agent_id, theirs = hello.protocol_version, "refused agent: protocol version mismatch");
            return Err(Status::failed_precondition(format!(
                "protocol version {} is not supported (coordinator speaks {PROTOCOL_VERSION})",
                hello.protocol_version
            )));
        }
        if hello.agent_id.is_empty() || hello.region.is_empty() {
            return Err(Status::invalid_argument(
                "AgentHello needs agent_id and region",
            ));
        }
        if let Err(reason) = self.state.admit(&hello) {
            tracing::warn!(agent = %hello.agent_id, region = %hello.region, "refused agent: {reason}");
            // Unavailable: the agent retries with backoff (a restarted agent gets in once its
            // old session is gone).
            return Err(Status::unavailable(reason));
        }
        let (tx, rx) = mpsc::channel(1024);
        send(
            &tx,
            Out::Welcome(pb::Welcome {
                coordinator_version: env!("CARGO_PKG_VERSION").into(),
            }),
        );
        let session = self.state.connect(&hello, tx.clone());
        tracing::info!(agent = %hello.agent_id, region = %hello.region, version = %hello.version, "agent connected");
        let state = self.state.clone();
        let spool = self.spool.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let agent = hello.agent_id;
            loop {
                let msg = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(e) if is_bad_message(&e) => {
                        tracing::warn!(%agent, %peer, code = ?e.code(), error = %e.message(), "agent sent an oversized or undecodable message: session ended");
                        break;
                    }
                    Err(e) => {
                        tracing::info!(%agent, error = %e, "agent session ended");
                        break;
                    }
                };
                state.seen(&agent, session);
                match msg.kind {
                    Some(In::Ping(p)) => {
                        let coord_recv_unix_us = now_unix_us();
                        send(
                            &tx,
                            Out::Pong(pb::ClockPong {
                                seq: p.seq,
                                agent_send_unix_us: p.agent_send_unix_us,
                                coord_recv_unix_us,
                                coord_send_unix_us: now_unix_us(),
                            }),
                        );
                    }
                    Some(In::Heartbeat(hb)) => state.heartbeat(&agent, session, &hb),
                    Some(In::Batch(b)) => {
                        metrics.batch_received();
                        let (campaign_id, seq) = (b.campaign_id.clone(), b.seq);
                        match store(&state, spool.as_ref(), &metrics, &agent, b).await {
                            Reply::Ack => {
                                if send(&tx, Out::Ack(pb::BatchAck { campaign_id, seq })) {
                                    metrics.batch_acked();
                                }
                            }
                            Reply::Reject(reason) => {
                                send(
                                    &tx,
                                    Out::Rejected(pb::BatchRejected {
                                        campaign_id,
                                        seq,
                                        reason,
                                    }),
                                );
                            }
                            Reply::Hold => {}
                        }
                    }
                    Some(In::Done(d)) => {
                        // Also recorded after its campaign finished (the agent's row).
                        if let Err(e) = state.done(&agent, &d) {
                            tracing::warn!(%agent, error = %e, "done notice ignored");
                        }
                    }
                    Some(In::Hello(_)) | None => {
                        tracing::warn!(%agent, "unexpected message ignored")
                    }
                }
            }
            state.disconnect(&agent, session);
            tracing::info!(%agent, "agent disconnected");
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[tonic::async_trait]
impl Control for Coordinator {
    type WatchStream = BoxStream<pb::Progress>;

    async fn launch(
        &self,
        request: Request<pb::LaunchRequest>,
    ) -> Result<Response<pb::LaunchReply>, Status> {
        let req = request.into_inner();
        let delay_us = if req.start_delay_s > 0.0 {
            (req.start_delay_s * 1e6) as i64
        } else {
            DEFAULT_START_DELAY_US
        };
        let caps = crate::budget::Caps::from_request(req.max_cost_usd, req.max_tokens);
        let opts = crate::state::LaunchOptions {
            caps,
            campaign_id: None,
            allow_missing_keys: req.allow_missing_keys,
        };
        let l = self
            .scheduler
            .launch_request(&req.plan_json, delay_us, opts)?;
        if l.series {
            tracing::info!(series = %l.campaign_id, "series launched");
        } else {
            tracing::info!(campaign = %l.campaign_id, agents = l.agent_ids.len(), "campaign launched");
        }
        Ok(Response::new(pb::LaunchReply {
            campaign_id: l.campaign_id,
            plan_hash: l.plan_hash,
            start_at_coord_unix_us: l.start_at_unix_us,
            agent_ids: l.agent_ids,
            series: l.series,
            warnings: l.warnings,
        }))
    }

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let id = request.into_inner().campaign_id;
        if self.scheduler.is_series(&id) {
            return Err(Status::not_found(format!(
                "{id:?} is a series of scheduled runs, not a campaign: list its runs with `latmesh campaign series {id}` (or watch one run: {id}-r1, …)"
            )));
        }
        let rx = self.state.watch(&id)?;
        // Ends after the message that carries `finished`.
        let stream = WatchStream::new(rx).scan(false, |ended, p| {
            let next = if *ended { None } else { Some(Ok(p)) };
            *ended = next
                .as_ref()
                .is_some_and(|p: &Result<pb::Progress, Status>| {
                    p.as_ref().is_ok_and(|p| p.finished)
                });
            futures::future::ready(next)
        });
        // With ClickHouse: what is still only in the spool.
        let store = self.spool.clone().map(|s| (s, self.store_health.clone()));
        let stream = stream.then(move |p| {
            let store = store.clone();
            async move {
                match (p, store) {
                    (Ok(mut p), Some((spool, health))) => {
                        crate::store_health::fill_progress(&mut p, &spool, health.as_deref()).await;
                        Ok(p)
                    }
                    (p, _) => p,
                }
            }
        });
        // Each progress in messages that fit the transport (agents and summary paged).
        let stream = stream.flat_map(|p: Result<pb::Progress, Status>| {
            futures::stream::iter(match p {
                Ok(p) => crate::progress_pages::pages(p)
                    .into_iter()
                    .map(Ok)
                    .collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let campaign_id = request.into_inner().campaign_id;
        let c = self.scheduler.cancel_request(&campaign_id)?;
        Ok(Response::new(pb::CancelReply {
            campaign_id,
            agent_ids: c.agent_ids,
            series: c.series,
            run_id: c.run_id.unwrap_or_default(),
        }))
    }

    async fn series(
        &self,
        request: Request<pb::SeriesRequest>,
    ) -> Result<Response<pb::SeriesReply>, Status> {
        let id = request.into_inner().series_id;
        self.scheduler
            .series_status(&id)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("unknown series {id:?}")))
    }

    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsReply>, Status> {
        Ok(Response::new(pb::ListAgentsReply {
            agents: self.state.agents(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::tests::{batch, hello, plan};

    /// The poisoned spool: a batch the coordinator refuses is answered with a refusal
    /// (not silence, which made the agent resend it forever), counted once, and the campaign
    /// finishes with the agent's next batches instead of waiting for it until its deadline.
    #[tokio::test]
    async fn a_malformed_batch_is_refused_counted_and_does_not_hold_up_the_campaign() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let metrics = CoordinatorMetrics::default();
        let mut bad = batch(&id, 1, 1_000);
        bad.records[0].attempt = 0;
        for _ in 0..2 {
            match store(&state, None, &metrics, "a1", bad.clone()).await {
                Reply::Reject(reason) => {
                    assert!(reason.contains("records[0].attempt 0"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(state.reject("a1", &id, 1, "again"), 1, "counted once");
        let mut long = batch(&id, 3, 1_000);
        long.records[0].outcome = "x".repeat(100_000);
        match store(&state, None, &metrics, "a1", long).await {
            Reply::Reject(reason) => assert!(reason.len() <= 256, "{}", reason.len()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            store(&state, None, &metrics, "a1", batch(&id, 2, 2_000)).await,
            Reply::Ack
        );
        // A batch of a campaign this coordinator does not know: held (resent), as before.
        assert_eq!(
            store(&state, None, &metrics, "a1", batch("nope", 1, 1)).await,
            Reply::Hold
        );
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 3,
                    ..Default::default()
                },
            )
            .unwrap();
        let s = state
            .summary(&id)
            .expect("finished without waiting for seqs 1 and 3");
        let a = &s.agents[0];
        assert!(!a.complete, "its delivery is not whole");
        assert_eq!((a.batches, a.records), (1, 1));
        assert_eq!(a.delivery.last_seq, Some(3));
        assert_eq!(a.delivery.batches_rejected, 2);
        let seqs: Vec<u64> = a.delivery.rejected.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 3]);
        assert!(a.delivery.rejected[0].reason.contains("attempt 0"));
    }
}
