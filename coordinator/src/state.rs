//! The coordinator's state: connected agents and running campaigns, behind one mutex.
//!
//! Handlers in `service.rs` only unpack messages and call into here. Batches are
//! de-duplicated by (campaign, agent, seq) before merging, so a batch resent after a
//! reconnect is acked again but counted once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use latmesh_core::plan::Plan;
use latmesh_core::record::ProbeRecord;
use latmesh_core::wire;
use latmesh_proto::pb;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use crate::aggregate::Aggregate;
use crate::budget::{Caps, Guard};
use crate::persist::{AgentRecord, CampaignRecord, StateDir};
use crate::spool::Spool;
use crate::summary::{self, AgentSummary, Summary};

/// Outbound half of an agent's session stream.
pub type AgentTx = mpsc::Sender<Result<pb::CoordinatorMessage, Status>>;

/// Now on the coordinator's wall clock, UTC µs.
pub fn now_unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// A known agent.
#[derive(Debug)]
pub struct AgentEntry {
    /// What the agent said in its hello, plus what the coordinator observed.
    pub info: pb::AgentInfo,
    /// Session number, to tell a stale session's disconnect from the current one's.
    pub session: u64,
    tx: Option<AgentTx>,
    /// Names of the API key variables the agent has (its hello's `key_env_names`); `None`:
    /// it did not report them (see [`crate::keys`]).
    key_env: Option<BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct CampaignAgent {
    region: String,
    seqs: BTreeSet<u64>,
    last_seq: Option<u64>,
    records: u64,
    /// Slots of the plan finished (first turns whose final attempt arrived), the unit of
    /// progress: retries and later turns are records, not slots.
    slots_done: u64,
    skipped: u64,
    /// From the done notice: (started on the coordinator's clock UTC µs, 0 if never; clock
    /// offset µs; its uncertainty µs).
    start: (i64, i64, u64),
    /// Batches refused as malformed, and what the agent quarantined ([`crate::delivery`]).
    rejections: crate::delivery::Rejections,
}

impl CampaignAgent {
    /// Every batch the agent announced is accounted for: stored, or refused (never coming).
    fn complete(&self) -> bool {
        // Bounded by the seqs stored and refused, not by the seq the agent claims.
        self.last_seq.is_some_and(|last| {
            let stored = self.seqs.range(1..=last).count() as u64;
            let refused = self
                .rejections
                .seqs
                .range(1..=last)
                .filter(|(s, _)| !self.seqs.contains(s))
                .count() as u64;
            stored + refused == last
        })
    }
}

#[derive(Debug)]
struct Campaign {
    plan: Plan,
    /// `progress::planned_requests_per_agent(plan)`, counted once (it generates every open-loop
    /// arrival).
    probes_per_agent: u64,
    plan_json: String,
    plan_hash: String,
    launched_at_unix_us: i64,
    start_at_unix_us: i64,
    agents: BTreeMap<String, CampaignAgent>,
    agg: Aggregate,
    /// First-attempt send times of the rounds' slots per agent (achieved synchronization).
    sends: crate::sync::SlotSends,
    progress: watch::Sender<pb::Progress>,
    /// `Progress.live`, recomputed from `agg` at most once a second.
    live: crate::progress::LiveCache,
    summary: Option<Summary>,
    /// After this (coordinator clock, UTC µs) the campaign finishes with what arrived.
    deadline_unix_us: i64,
    expired: bool,
    /// When `latmesh campaign cancel` came (coordinator clock, UTC µs); `None`: not cancelled.
    cancelled_at_us: Option<i64>,
    /// Budget guard: caps, what the records used, and the reason once it stopped the campaign.
    guard: Guard,
    /// Launched with `--allow-missing-keys`: an agent rejoining it without a provider's API
    /// key variable still gets the plan.
    allow_missing_keys: bool,
}

/// Errors of state operations, turned into `Status` in `service.rs`.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No such campaign.
    #[error("unknown campaign {0:?}")]
    UnknownCampaign(String),
    /// A region of the plan has no connected agent.
    #[error("no connected agent in region {region:?} (connected: {connected})")]
    NoAgent {
        /// The region.
        region: String,
        /// Regions with connected agents.
        connected: String,
    },
    /// An agent of the plan's regions is still running another campaign.
    #[error(
        "agent {agent:?} is still running campaign {campaign:?}: launch again when it has finished"
    )]
    Busy {
        /// Agent id.
        agent: String,
        /// The running campaign.
        campaign: String,
    },
    /// The plan JSON does not parse.
    #[error("plan_json: {0}")]
    BadPlan(String),
    /// The campaign has already finished (e.g. cancelling it is too late).
    #[error("campaign {campaign:?} has already finished ({how}): nothing to cancel")]
    Finished {
        /// Campaign id.
        campaign: String,
        /// `complete`, `incomplete` or `cancelled`.
        how: String,
    },
    /// Targeted agents lack API key variables of the plan's providers (see
    /// [`crate::keys`]); the launch was not allowed to go on without them.
    #[error("{0}")]
    MissingKeys(String),
    /// The state directory cannot take the campaign's facts.
    #[error("state directory: {0}")]
    Storage(String),
    /// A batch from an agent does not decode.
    #[error("batch {seq} from {agent}: {message}")]
    BadBatch {
        /// Agent id.
        agent: String,
        /// Batch seq.
        seq: u64,
        /// What failed.
        message: String,
    },
}

/// Shared coordinator state.
#[derive(Clone, Debug, Default)]
pub struct State {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    agents: BTreeMap<String, AgentEntry>,
    campaigns: BTreeMap<String, Campaign>,
    next_session: u64,
    /// `Some` when a sink wants [`StoreEvent`]s.
    events: Option<crate::events::EventQueue>,
    /// `Some` when campaigns persist in a state directory ([`State::with_state_dir`]).
    persist: Option<StateDir>,
    /// Series of scheduled campaigns, by series id (see [`crate::schedule`]).
    series: BTreeMap<String, crate::schedule::Series>,
}

/// What a store (the ClickHouse sink) must write besides result batches.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum StoreEvent {
    /// A campaign was launched.
    Launched {
        /// Campaign id.
        campaign_id: String,
        /// Its plan.
        plan: Box<Plan>,
        /// Launch time, coordinator clock, UTC µs.
        launched_at_unix_us: i64,
        /// Round 0 start, coordinator clock, UTC µs.
        start_at_unix_us: i64,
    },
    /// A campaign finished: each agent's part, with its version.
    Finished {
        /// Campaign id.
        campaign_id: String,
        /// (agent summary, agent version).
        agents: Vec<(AgentSummary, String)>,
    },
}

/// A decoded batch checked against its campaign, ready to merge.
#[derive(Debug)]
pub struct CheckedBatch {
    /// Campaign id.
    pub campaign_id: String,
    /// Agent that sent it.
    pub agent_id: String,
    /// The agent's region.
    pub region: String,
    /// Batch seq.
    pub seq: u64,
    /// Decoded records.
    pub records: Vec<ProbeRecord>,
    /// Decoded interval histograms, as their non-empty buckets (no dense histogram per blob;
    /// see [`latmesh_core::hist_sparse`]).
    pub histograms: Vec<(
        latmesh_core::hist::HistKey,
        latmesh_core::hist_sparse::SparseHistogram,
    )>,
}

/// What launching a campaign produced.
#[derive(Debug)]
pub struct Launched {
    /// Campaign id.
    pub campaign_id: String,
    /// Plan hash.
    pub plan_hash: String,
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
    /// Agents the plan went to.
    pub agent_ids: Vec<String>,
    /// The plan has a schedule: `campaign_id` is the series id, `start_at_unix_us` when its
    /// first run is due, `agent_ids` empty (see [`crate::schedule`]).
    pub series: bool,
    /// What the launch accepted but the user should know: agents without a provider's API
    /// key variable, allowed by [`LaunchOptions::allow_missing_keys`] (see [`crate::keys`]).
    pub warnings: Vec<String>,
}

/// How [`State::launch_with`] launches a campaign besides its plan.
#[derive(Clone, Debug, Default)]
pub struct LaunchOptions {
    /// Budget caps (see [`crate::budget`]).
    pub caps: Caps,
    /// The campaign id to use (a series' run `SERIES-rN`); `None`: `<name>-<8 hex digits>`.
    pub campaign_id: Option<String>,
    /// Launch even when targeted agents lack a provider's API key variable (warning instead
    /// of [`StateError::MissingKeys`]).
    pub allow_missing_keys: bool,
}

/// A campaign's state in a few words (e.g. for a series' list of runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CampaignBrief {
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
    /// It has a summary.
    pub finished: bool,
    /// Its summary says complete.
    pub complete: bool,
    /// Cancelled (by `campaign cancel` or by the budget guard).
    pub cancelled: bool,
    /// The budget guard stopped it.
    pub stopped_by_budget: bool,
}

impl CampaignBrief {
    /// `running`, `complete`, `incomplete`, `cancelled` or `budget` (stopped by the budget
    /// guard).
    pub fn state(&self) -> &'static str {
        if self.stopped_by_budget {
            "budget"
        } else if self.cancelled && self.finished {
            "cancelled"
        } else if self.cancelled {
            "cancelling"
        } else if !self.finished {
            "running"
        } else if self.complete {
            "complete"
        } else {
            "incomplete"
        }
    }
}

impl State {
    /// A state that also queues [`StoreEvent`]s for a sink ([`State::drain_store_events`]),
    /// in memory.
    pub fn with_store_events() -> Self {
        State::with_event_queue(crate::events::EventQueue::in_memory())
    }

    /// A state that queues [`StoreEvent`]s in `queue` (e.g. persisted next to the spool).
    pub fn with_event_queue(queue: crate::events::EventQueue) -> Self {
        let state = State::default();
        state.lock().events = Some(queue);
        state
    }

    /// The store events not handed out yet (none unless built with a queue). They stay queued
    /// (and persisted) until [`State::store_events_written`].
    pub fn drain_store_events(&self) -> Vec<StoreEvent> {
        self.lock()
            .events
            .as_mut()
            .map(crate::events::EventQueue::take_new)
            .unwrap_or_default()
    }

    /// The first `n` events handed out are stored.
    pub fn store_events_written(&self, n: usize) {
        if let Some(q) = self.lock().events.as_mut() {
            q.written(n);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a new session for `hello` may start: `Err(reason)` when another session with
    /// the same agent id is connected and either in another region (a second agent with a
    /// copied id) or heard from within its last heartbeat period (alive: the newcomer is the
    /// duplicate, and the live agent keeps working). A restarted agent's old session is
    /// closed, or silent and soon marked disconnected, so the restarted agent gets in (it
    /// retries until then).
    ///
    /// A new agent id when the coordinator already knows [`crate::intake::MAX_KNOWN_AGENTS`]
    /// agents makes it forget the one disconnected longest that no unfinished campaign
    /// includes; when there is none, the newcomer is refused (so agents lists stay bounded).
    pub fn admit(&self, hello: &pb::AgentHello) -> Result<(), String> {
        let mut inner = self.lock();
        let Some(old) = inner.agents.get(&hello.agent_id) else {
            return make_room_for_an_agent(&mut inner);
        };
        if old.tx.is_none() || !old.info.connected {
            return Ok(());
        }
        let heard_us = now_unix_us() - old.info.last_seen_coord_unix_us;
        let period_us = i64::from(old.info.heartbeat_interval_ms.max(100)) * 1000;
        if old.info.region != hello.region {
            Err(format!(
                "agent id {:?} is in use by a connected agent in region {:?} (this agent says {:?}): give each agent its own --agent-id",
                hello.agent_id, old.info.region, hello.region
            ))
        } else if heard_us <= period_us {
            Err(format!(
                "agent id {:?} is in use by a live agent (heard {:.1} s ago): give each agent its own --agent-id (a restarted agent gets in once its old session is gone)",
                hello.agent_id,
                heard_us as f64 / 1e6
            ))
        } else {
            Ok(())
        }
    }

    /// Registers a connected agent and returns its session number. An older session with the
    /// same id is told it was replaced (a second agent process with the same id then exits
    /// instead of idling unseen). Plans of unfinished campaigns the agent belongs to are pushed
    /// again, with `next_seq` past every batch already received from it.
    pub fn connect(&self, hello: &pb::AgentHello, tx: AgentTx) -> u64 {
        let mut inner = self.lock();
        if let Some(old) = inner
            .agents
            .get(&hello.agent_id)
            .and_then(|a| a.tx.as_ref())
        {
            tracing::warn!(agent = %hello.agent_id, "a new session replaces a connected agent with the same id");
            let _ = old.try_send(Ok(pb::CoordinatorMessage {
                kind: Some(pb::coordinator_message::Kind::Refused(pb::Refused {
                    reason: format!(
                        "replaced by a newer session with the same agent id {:?}",
                        hello.agent_id
                    ),
                })),
            }));
        }
        inner.next_session += 1;
        let session = inner.next_session;
        let now = now_unix_us();
        let info = pb::AgentInfo {
            agent_id: hello.agent_id.clone(),
            region: hello.region.clone(),
            version: hello.version.clone(),
            connected_coord_unix_us: now,
            last_seen_coord_unix_us: now,
            clock_offset_us: 0,
            clock_uncertainty_us: 0,
            connected: true,
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_MS,
            ..Default::default()
        };
        let key_env: Option<BTreeSet<String>> = hello
            .key_env_reported
            .then(|| hello.key_env_names.iter().cloned().collect());
        for (id, c) in &inner.campaigns {
            if let Some(a) = c.agents.get(&hello.agent_id)
                && c.summary.is_none()
                && a.last_seq.is_none()
            {
                let missing = crate::keys::missing_keys(
                    &c.plan,
                    &hello.agent_id,
                    &hello.region,
                    key_env.as_ref(),
                );
                if !missing.is_empty() && !c.allow_missing_keys {
                    tracing::warn!(campaign = %id, "plan not pushed again to a rejoining agent: {}", crate::keys::refusal(&missing));
                    continue;
                }
                let next_seq = a.seqs.last().map_or(1, |s| s.saturating_add(1));
                let _ = tx.try_send(Ok(plan_message(id, c, next_seq)));
                if c.cancelled_at_us.is_some() {
                    // Cancelled while it was away: it reports what it has and stops at once.
                    let _ = tx.try_send(Ok(cancel_message(id, &cancel_reason(c))));
                }
            }
        }
        inner.agents.insert(
            hello.agent_id.clone(),
            AgentEntry {
                info,
                session,
                tx: Some(tx),
                key_env,
            },
        );
        session
    }

    /// Marks the agent's session `session` as gone (a newer session is left alone).
    pub fn disconnect(&self, agent_id: &str, session: u64) {
        let mut inner = self.lock();
        if let Some(a) = inner.agents.get_mut(agent_id)
            && a.session == session
        {
            if a.info.connected {
                a.info.disconnected_since_coord_unix_us = now_unix_us();
                a.info.disconnect_reason = "session closed".into();
            }
            a.info.connected = false;
            a.tx = None;
            // Its key names are its hello's, checked again at its next hello: a disconnected
            // agent (up to MAX_KNOWN_AGENTS are kept) holds no per-session data.
            a.key_env = None;
        }
        // Only the agent's unfinished campaigns: a peer reconnecting in a loop must not make
        // the coordinator recompute every campaign it holds each time.
        publish_agents_campaigns(&mut inner, &[agent_id.to_string()]);
    }

    /// Records a heartbeat of the agent's session `session` (a stale session's is ignored):
    /// its clock estimate, attempts in flight and heartbeat period; a value beyond its bounds
    /// is ignored with a warning ([`crate::intake::heartbeat_facts`]).
    pub fn heartbeat(&self, agent_id: &str, session: u64, hb: &pb::Heartbeat) {
        let mut inner = self.lock();
        let now = now_unix_us();
        if let Some(a) = inner.agents.get_mut(agent_id)
            && a.session == session
        {
            a.info.last_seen_coord_unix_us = now;
            a.info.last_heartbeat_coord_unix_us = now;
            let facts = crate::intake::heartbeat_facts(agent_id, hb);
            if let Some((offset, uncertainty)) = facts.clock {
                a.info.clock_offset_us = offset;
                a.info.clock_uncertainty_us = uncertainty;
            }
            if let Some(n) = facts.in_flight {
                a.info.in_flight = n;
            }
            if let Some(n) = facts.batches_quarantined {
                a.info.batches_quarantined = n;
            }
            if hb.interval_ms > 0 {
                a.info.heartbeat_interval_ms = hb.interval_ms;
            }
        }
        revive(&mut inner, agent_id, session);
    }

    /// Agents known to the coordinator, each with the unfinished campaign it runs (if any).
    pub fn agents(&self) -> Vec<pb::AgentInfo> {
        let inner = self.lock();
        inner
            .agents
            .values()
            .map(|a| {
                let mut info = a.info.clone();
                info.campaign_id = inner
                    .campaigns
                    .iter()
                    .find(|(_, c)| {
                        c.summary.is_none()
                            && c.agents
                                .get(&info.agent_id)
                                .is_some_and(|ca| ca.last_seq.is_none())
                    })
                    .map(|(id, _)| id.clone())
                    .unwrap_or_default();
                info
            })
            .collect()
    }

    /// Campaigns launched and not finished (the coordinator's `/metrics`).
    pub fn running_campaigns(&self) -> usize {
        let inner = self.lock();
        inner
            .campaigns
            .values()
            .filter(|c| c.summary.is_none())
            .count()
    }

    /// Starts a campaign: picks the connected agents of the plan's regions, stamps
    /// `start_at = now + start_delay_us`, and pushes the plan to each.
    ///
    /// # Errors
    /// [`StateError::BadPlan`] for unparseable JSON, [`StateError::NoAgent`] when a region has
    /// no connected agent, [`StateError::Busy`] when one of its agents runs another campaign.
    pub fn launch(&self, plan_json: &str, start_delay_us: i64) -> Result<Launched, StateError> {
        self.launch_with(plan_json, start_delay_us, &LaunchOptions::default())
    }

    /// [`State::launch`] with budget caps and, for a series' run, its campaign id. The plan
    /// runs once: a schedule in it is dropped (the control API's launch starts a series
    /// instead, see [`crate::schedule`]).
    ///
    /// # Errors
    /// As [`State::launch`]; also [`StateError::BadPlan`] when `--max-cost` is set and a
    /// provider has no price, or when the campaign id is taken.
    pub fn launch_with(
        &self,
        plan_json: &str,
        start_delay_us: i64,
        opts: &LaunchOptions,
    ) -> Result<Launched, StateError> {
        let mut plan: Plan =
            serde_json::from_str(plan_json).map_err(|e| StateError::BadPlan(e.to_string()))?;
        plan.schedule = None;
        opts.caps.check(&plan).map_err(StateError::BadPlan)?;
        let mut inner = self.lock();
        if let Some(id) = &opts.campaign_id
            && inner.campaigns.contains_key(id)
        {
            return Err(StateError::BadPlan(format!("campaign id {id:?} is taken")));
        }
        let mut chosen: Vec<(String, String)> = Vec::new();
        for region in &plan.regions {
            let found: Vec<_> = inner
                .agents
                .values()
                .filter(|a| a.info.connected && &a.info.region == region)
                .map(|a| (a.info.agent_id.clone(), region.clone()))
                .collect();
            if found.is_empty() {
                let connected: BTreeSet<&str> = inner
                    .agents
                    .values()
                    .filter(|a| a.info.connected)
                    .map(|a| a.info.region.as_str())
                    .collect();
                let connected = if connected.is_empty() {
                    "none".to_string()
                } else {
                    connected.into_iter().collect::<Vec<_>>().join(", ")
                };
                return Err(StateError::NoAgent {
                    region: region.clone(),
                    connected,
                });
            }
            chosen.extend(found);
        }
        for (agent, _) in &chosen {
            let busy = inner.campaigns.iter().find(|(_, c)| {
                c.summary.is_none() && c.agents.get(agent).is_some_and(|a| !a.complete())
            });
            if let Some((campaign, _)) = busy {
                return Err(StateError::Busy {
                    agent: agent.clone(),
                    campaign: campaign.clone(),
                });
            }
        }
        // Before anything is sent: every targeted agent has the providers' API keys.
        let missing: Vec<crate::keys::MissingKey> = chosen
            .iter()
            .flat_map(|(agent, region)| {
                let key_env = inner.agents.get(agent).and_then(|a| a.key_env.as_ref());
                crate::keys::missing_keys(&plan, agent, region, key_env)
            })
            .collect();
        if !missing.is_empty() && !opts.allow_missing_keys {
            return Err(StateError::MissingKeys(crate::keys::refusal(&missing)));
        }
        let warnings: Vec<String> = missing.iter().map(crate::keys::warning).collect();
        for w in &warnings {
            tracing::warn!("launched with --allow-missing-keys: {w}");
        }
        let campaign_id = opts.campaign_id.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                plan.name,
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            )
        });
        let launched_at_unix_us = now_unix_us();
        let start_at_unix_us = launched_at_unix_us + start_delay_us;
        let plan_json = plan.to_json();
        let plan_hash = plan.hash();
        let deadline_unix_us = start_at_unix_us + plan_span_us(&plan) + DEADLINE_GRACE_US;
        let (progress, _) = watch::channel(pb::Progress {
            campaign_id: campaign_id.clone(),
            ..Default::default()
        });
        let campaign = Campaign {
            agents: chosen
                .iter()
                .map(|(id, region)| {
                    (
                        id.clone(),
                        CampaignAgent {
                            region: region.clone(),
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            probes_per_agent: crate::progress::planned_requests_per_agent(&plan),
            agg: Aggregate::for_plan(&plan),
            plan,
            plan_json,
            plan_hash: plan_hash.clone(),
            launched_at_unix_us,
            start_at_unix_us,
            sends: Default::default(),
            progress,
            live: Default::default(),
            summary: None,
            deadline_unix_us,
            expired: false,
            cancelled_at_us: None,
            guard: Guard::new(opts.caps.clone()),
            allow_missing_keys: opts.allow_missing_keys,
        };
        // Durable before any agent runs it: a restarted coordinator knows every campaign an
        // agent may send batches for.
        if let Some(persist) = inner.persist.as_mut() {
            persist
                .create(&record_of(&campaign_id, &campaign))
                .map_err(|e| StateError::Storage(format!("{e:#}")))?;
        }
        let msg = plan_message(&campaign_id, &campaign, 1);
        for (id, _) in &chosen {
            if let Some(tx) = inner.agents.get(id).and_then(|a| a.tx.as_ref()) {
                let _ = tx.try_send(Ok(msg.clone()));
            }
        }
        if let Some(events) = inner.events.as_mut() {
            events.push(StoreEvent::Launched {
                campaign_id: campaign_id.clone(),
                plan: Box::new(campaign.plan.clone()),
                launched_at_unix_us,
                start_at_unix_us,
            });
        }
        inner.campaigns.insert(campaign_id.clone(), campaign);
        publish(&mut inner, &campaign_id);
        Ok(Launched {
            campaign_id,
            plan_hash,
            start_at_unix_us,
            agent_ids: chosen.into_iter().map(|(id, _)| id).collect(),
            series: false,
            warnings,
        })
    }

    /// Checks a batch from `agent_id` against the protocol's limits and its campaign's plan
    /// ([`crate::intake`]: cutting the provider values beyond their limits in `batch`, which
    /// is what gets stored), then decodes it, without merging it; `None` when its seq was
    /// merged before (a resend: ack it again, count it once). The campaign and the agent are
    /// looked up and every limit checked before anything is decoded; decoding (the costly
    /// part) runs without the state's lock, and refuses histograms whose header does not carry
    /// latmesh's bounds.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`], or [`StateError::BadBatch`] naming the field when a
    /// value is beyond its limits, a record or histogram does not decode, or the agent is not
    /// part of the campaign.
    pub fn check(
        &self,
        agent_id: &str,
        batch: &mut pb::ResultBatch,
    ) -> Result<Option<CheckedBatch>, StateError> {
        let seq = batch.seq;
        let bad = |message: String| StateError::BadBatch {
            agent: agent_id.to_string(),
            seq,
            message,
        };
        let (region, cut) = {
            let inner = self.lock();
            let c = inner
                .campaigns
                .get(&batch.campaign_id)
                .ok_or_else(|| StateError::UnknownCampaign(batch.campaign_id.clone()))?;
            let Some(ca) = c.agents.get(agent_id) else {
                return Err(bad("agent is not part of this campaign".into()));
            };
            if ca.seqs.contains(&batch.seq) {
                return Ok(None);
            }
            let expected = crate::intake::Expected {
                plan: &c.plan,
                highest_seq: ca.seqs.last().copied().unwrap_or(0),
                max_duration_us: campaign_span_us(&c.plan),
            };
            let cut = crate::intake::check_batch(&expected, batch).map_err(bad)?;
            (ca.region.clone(), cut)
        };
        if !cut.is_clean() {
            tracing::warn!(agent = %agent_id, campaign = %batch.campaign_id, seq = batch.seq,
                texts_cut = cut.texts_cut, numbers_dropped = cut.numbers_dropped,
                "batch stored with provider values beyond their limits cut or dropped");
        }
        let (records, histograms) = decode_batch(agent_id, batch)?;
        Ok(Some(CheckedBatch {
            campaign_id: batch.campaign_id.clone(),
            agent_id: agent_id.to_string(),
            region,
            seq: batch.seq,
            records,
            histograms,
        }))
    }

    /// Merges a checked batch; `false` when the same (campaign, agent, seq) was merged
    /// meanwhile (nothing is counted twice).
    pub fn merge(&self, b: CheckedBatch) -> bool {
        let mut inner = self.lock();
        let Inner {
            agents,
            campaigns,
            events,
            ..
        } = &mut *inner;
        let Some(c) = campaigns.get_mut(&b.campaign_id) else {
            return false;
        };
        if !merge_into(c, &b) {
            return false;
        }
        // A late batch of a finished campaign from an agent whose done notice arrived: its
        // row counts the records stored since (the summary stays final).
        if c.agents
            .get(&b.agent_id)
            .is_some_and(|a| a.last_seq.is_some())
            && let Some(row) = late_agent_row(agents, c, &b.agent_id)
            && let Some(events) = events.as_mut()
        {
            events.push(row);
        }
        enforce_budget(&mut inner, &b.campaign_id);
        publish(&mut inner, &b.campaign_id);
        true
    }

    /// The region of `agent_id` in campaign `campaign_id` when that campaign is not in memory
    /// but finished by an earlier coordinator process (its `campaign.json` in the state
    /// directory has a summary) and the agent was part of it: a late resend of such a
    /// campaign is stored (ClickHouse de-duplicates it) and acked, so it leaves the agent's
    /// spool, while the campaign's summary stays final.
    pub fn finished_earlier(&self, campaign_id: &str, agent_id: &str) -> Option<String> {
        let inner = self.lock();
        if inner.campaigns.contains_key(campaign_id) {
            return None;
        }
        let rec = inner.persist.as_ref()?.record(campaign_id)?;
        rec.summary.as_ref()?;
        rec.agents.get(agent_id).map(|a| a.region.clone())
    }

    /// Checks a late resend of a campaign an earlier coordinator process finished (see
    /// [`State::finished_earlier`]) as [`State::check`] checks a running campaign's batches:
    /// against the protocol's limits and the campaign's stored plan (seqs within
    /// [`crate::intake::SEQ_WINDOW`] of the agent's announced last seq), cutting provider
    /// values in `batch`, then decoding it (nothing is merged: the summary is final).
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`] when the campaign is not such a campaign;
    /// [`StateError::BadBatch`] naming the field otherwise.
    pub fn check_late(
        &self,
        agent_id: &str,
        batch: &mut pb::ResultBatch,
    ) -> Result<(), StateError> {
        let seq = batch.seq;
        let bad = |message: String| StateError::BadBatch {
            agent: agent_id.to_string(),
            seq,
            message,
        };
        let rec = self
            .lock()
            .persist
            .as_ref()
            .and_then(|p| p.record(&batch.campaign_id))
            .ok_or_else(|| StateError::UnknownCampaign(batch.campaign_id.clone()))?;
        let agent = rec
            .agents
            .get(agent_id)
            .ok_or_else(|| bad("agent is not part of this campaign".into()))?;
        let plan: Plan = serde_json::from_str(&rec.plan_json)
            .map_err(|e| bad(format!("the campaign's stored plan does not parse: {e}")))?;
        let expected = crate::intake::Expected {
            plan: &plan,
            highest_seq: agent.last_seq.unwrap_or(0),
            max_duration_us: campaign_span_us(&plan),
        };
        crate::intake::check_batch(&expected, batch).map_err(bad)?;
        decode_batch(agent_id, batch).map(|_| ())
    }

    /// The batch log of an unfinished campaign when campaigns persist: a batch is appended
    /// there (durably) before it is acked.
    pub fn batch_log(&self, campaign_id: &str) -> Option<Arc<Spool>> {
        self.lock().persist.as_ref()?.log(campaign_id)
    }

    /// [`State::check`] then [`State::merge`]: whether the batch was new.
    ///
    /// # Errors
    /// As [`State::check`].
    pub fn batch(&self, agent_id: &str, mut batch: pb::ResultBatch) -> Result<bool, StateError> {
        Ok(match self.check(agent_id, &mut batch)? {
            Some(checked) => self.merge(checked),
            None => false,
        })
    }

    /// Notes that `agent_id` finished `campaign_id` with `last_seq` as its final batch. A
    /// notice arriving after the campaign finished (in memory, or by an earlier process: see
    /// [`State::finished_earlier`]) is checked alike and still recorded: the agent's delivery
    /// facts in the campaign's record and a new version of its `agents` row (what `campaign
    /// verify` judges); the summary stays final.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`]; [`StateError::BadBatch`] when `last_seq` is more than
    /// [`crate::intake::SEQ_WINDOW`] past the highest seq received from the agent (no agent
    /// numbers that far ahead) or its clock facts are absurd ([`crate::intake::check_done`]):
    /// the notice is ignored.
    pub fn done(&self, agent_id: &str, done: &pb::CampaignDone) -> Result<(), StateError> {
        let mut inner = self.lock();
        if !inner.campaigns.contains_key(&done.campaign_id) {
            return done_after_restart(&mut inner, agent_id, done);
        }
        let Inner {
            agents,
            campaigns,
            persist,
            events,
            ..
        } = &mut *inner;
        let c = campaigns
            .get_mut(&done.campaign_id)
            .ok_or_else(|| StateError::UnknownCampaign(done.campaign_id.clone()))?;
        let start = (
            done.started_coord_unix_us,
            done.clock_offset_us,
            done.clock_uncertainty_us,
        );
        let highest = c
            .agents
            .get(agent_id)
            .and_then(|a| a.seqs.last().copied())
            .unwrap_or(0);
        check_done_notice(agent_id, done, &c.plan, highest)?;
        if let Some(a) = c.agents.get_mut(agent_id)
            && (a.rejections.from_done(done, |seq| a.seqs.contains(&seq))
                | ((a.last_seq, a.skipped, a.start) != (Some(done.last_seq), done.skipped, start)))
        {
            a.last_seq = Some(done.last_seq);
            a.skipped = done.skipped;
            a.start = start;
            // Also after the campaign finished (its summary stays final): the record's agent
            // facts and a new version of the agent's row, which `campaign verify` judges.
            persist_campaign(persist, &done.campaign_id, c);
            if let Some(row) = late_agent_row(agents, c, agent_id) {
                tracing::info!(campaign = %done.campaign_id, agent = %agent_id,
                    "late done notice of finished campaign {} from agent {agent_id}: delivery facts updated",
                    done.campaign_id);
                if let Some(events) = events.as_mut() {
                    events.push(row);
                }
            }
        }
        publish(&mut inner, &done.campaign_id);
        Ok(())
    }

    /// Notes that batch `seq` of `agent_id` in `campaign_id` was refused as malformed for
    /// `reason` ([`crate::delivery`]): it is never stored, the agent quarantines it, and the
    /// campaign does not wait for it (the agent's summary says it is not complete). Returns
    /// how many of its batches this campaign refused so far (0 when the campaign or the agent
    /// is not known, or the seq was stored).
    pub fn reject(&self, agent_id: &str, campaign_id: &str, seq: u64, reason: &str) -> u64 {
        let mut inner = self.lock();
        let Inner {
            campaigns, persist, ..
        } = &mut *inner;
        let Some(c) = campaigns.get_mut(campaign_id) else {
            return 0;
        };
        let Some(a) = c.agents.get_mut(agent_id) else {
            return 0;
        };
        if a.seqs.contains(&seq) {
            return 0;
        }
        let refused = if a.rejections.reject(seq, reason) {
            if c.summary.is_none() {
                persist_campaign(persist, campaign_id, c);
            }
            true
        } else {
            false
        };
        let n = c.agents.get(agent_id).map_or(0, |a| a.rejections.batches());
        if refused {
            publish(&mut inner, campaign_id);
        }
        n
    }

    /// Finishes every unfinished campaign whose deadline is before `now_unix_us` with the
    /// results that arrived (its summary says `complete: false` and which agents fell short).
    /// Returns the ids of the campaigns it finished.
    pub fn expire(&self, now_unix_us: i64) -> Vec<String> {
        let mut inner = self.lock();
        let due: Vec<String> = inner
            .campaigns
            .iter()
            .filter(|(_, c)| c.summary.is_none() && now_unix_us > c.deadline_unix_us)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            if let Some(c) = inner.campaigns.get_mut(id) {
                c.expired = true;
            }
            tracing::warn!(campaign = %id, "campaign deadline passed: finishing with the results that arrived");
            publish(&mut inner, id);
        }
        due
    }

    /// A receiver of the campaign's progress; the last value has `finished` and the summary.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`].
    pub fn watch(&self, campaign_id: &str) -> Result<watch::Receiver<pb::Progress>, StateError> {
        let inner = self.lock();
        if let Some(c) = inner.campaigns.get(campaign_id) {
            return Ok(c.progress.subscribe());
        }
        // A campaign an earlier process of this coordinator finished: its stored summary.
        let finished = inner
            .persist
            .as_ref()
            .and_then(|p| p.record(campaign_id))
            .and_then(|r| Some(finished_progress(&r, r.summary.as_ref()?)));
        match finished {
            Some(progress) => Ok(watch::channel(progress).1),
            None => Err(StateError::UnknownCampaign(campaign_id.to_string())),
        }
    }

    /// From now on campaigns persist in `dir` (see [`crate::persist`]); the unfinished
    /// campaigns found there are loaded first, each rebuilt by replaying its batch log
    /// (aggregate, per-agent seqs and record counts; `done` notices and deadlines from its
    /// record). Agents that reconnect get their plan again with `next_seq` past every seq
    /// replayed, and resent batches count once. A campaign whose deadline passed while the
    /// coordinator was down finishes at the next [`State::expire`]. Returns the ids loaded.
    ///
    /// # Errors
    /// A campaign record whose plan does not parse, or a batch log that cannot be read.
    pub fn with_state_dir(&self, mut dir: StateDir) -> anyhow::Result<Vec<String>> {
        use anyhow::Context as _;
        let mut loaded = Vec::new();
        let mut campaigns = Vec::new();
        for rec in dir.records() {
            if rec.summary.is_some() {
                continue;
            }
            let id = rec.campaign_id.clone();
            let plan: Plan = serde_json::from_str(&rec.plan_json)
                .with_context(|| format!("campaign {id}: the stored plan does not parse"))?;
            let mut c = Campaign {
                probes_per_agent: crate::progress::planned_requests_per_agent(&plan),
                agg: Aggregate::for_plan(&plan),
                plan,
                plan_json: rec.plan_json,
                plan_hash: rec.plan_hash,
                launched_at_unix_us: rec.launched_at_unix_us,
                start_at_unix_us: rec.start_at_unix_us,
                agents: rec
                    .agents
                    .into_iter()
                    .map(|(agent, a)| {
                        (
                            agent,
                            CampaignAgent {
                                region: a.region,
                                last_seq: a.last_seq,
                                skipped: a.skipped,
                                start: (
                                    a.started_coord_unix_us,
                                    a.clock_offset_us,
                                    a.clock_uncertainty_us,
                                ),
                                rejections: a.rejections,
                                ..Default::default()
                            },
                        )
                    })
                    .collect(),
                sends: Default::default(),
                progress: watch::channel(pb::Progress {
                    campaign_id: id.clone(),
                    ..Default::default()
                })
                .0,
                live: Default::default(),
                summary: None,
                deadline_unix_us: rec.deadline_unix_us,
                expired: rec.expired,
                cancelled_at_us: rec.cancelled_at_us,
                // Caps and stop reason from the record; the spending is rebuilt by the replay.
                guard: Guard {
                    spent: Default::default(),
                    ..rec.budget
                },
                allow_missing_keys: rec.allow_missing_keys,
            };
            let (mut batches, mut records) = (0u64, 0u64);
            dir.replay(&id, |e| {
                let region = match c.agents.get(&e.agent_id) {
                    Some(a) => a.region.clone(),
                    None => {
                        tracing::warn!(campaign = %id, agent = %e.agent_id, "batch log: a batch of an agent not in the campaign, ignored");
                        return;
                    }
                };
                match decode_batch(&e.agent_id, &e.batch) {
                    Ok((recs, histograms)) => {
                        let n = recs.len() as u64;
                        let b = CheckedBatch {
                            campaign_id: id.clone(),
                            agent_id: e.agent_id,
                            region,
                            seq: e.batch.seq,
                            records: recs,
                            histograms,
                        };
                        if merge_into(&mut c, &b) {
                            batches += 1;
                            records += n;
                        }
                    }
                    Err(err) => {
                        tracing::error!(campaign = %id, error = %err, "batch log: a batch does not decode, ignored")
                    }
                }
            })?;
            tracing::info!(campaign = %id, batches, records, deadline_unix_us = c.deadline_unix_us,
                "unfinished campaign loaded from the state directory");
            loaded.push(id.clone());
            campaigns.push((id, c));
        }
        let mut inner = self.lock();
        inner.campaigns.extend(campaigns);
        inner.persist = Some(dir);
        for id in &loaded {
            // A cap passed by the replayed batches (a coordinator killed before it cancelled).
            enforce_budget(&mut inner, id);
            publish(&mut inner, id);
        }
        drop(inner);
        self.load_series();
        Ok(loaded)
    }

    /// Runs `f` on the series and the state directory under the state's lock (the
    /// [`crate::schedule`] module's access; `f` must not call back into the state).
    pub(crate) fn with_series<R>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, crate::schedule::Series>, Option<&mut StateDir>) -> R,
    ) -> R {
        let mut inner = self.lock();
        let Inner {
            series, persist, ..
        } = &mut *inner;
        f(series, persist.as_mut())
    }

    /// A campaign's state in a few words: from memory, else from the state directory (a
    /// campaign an earlier process finished); `None` when unknown.
    pub fn campaign_brief(&self, campaign_id: &str) -> Option<CampaignBrief> {
        let inner = self.lock();
        if let Some(c) = inner.campaigns.get(campaign_id) {
            return Some(CampaignBrief {
                start_at_unix_us: c.start_at_unix_us,
                finished: c.summary.is_some(),
                complete: c.summary.as_ref().is_some_and(|s| s.complete),
                cancelled: c.cancelled_at_us.is_some(),
                stopped_by_budget: c.guard.stopped.is_some(),
            });
        }
        let rec = inner.persist.as_ref()?.record(campaign_id)?;
        Some(CampaignBrief {
            start_at_unix_us: rec.start_at_unix_us,
            finished: rec.summary.is_some(),
            complete: rec.summary.as_ref().is_some_and(|s| s.complete),
            cancelled: rec.cancelled_at_us.is_some(),
            stopped_by_budget: rec.budget.stopped.is_some(),
        })
    }

    /// A finished campaign's summary, plan and merged histograms, for reports (`None` while it
    /// runs, or for a campaign finished by an earlier process: its histograms are in
    /// ClickHouse).
    pub fn report_data(&self, campaign_id: &str) -> Option<crate::report_data::ReportData> {
        let inner = self.lock();
        let c = inner.campaigns.get(campaign_id)?;
        let summary = c.summary.clone()?;
        Some(crate::report_data::ReportData::from_aggregate(
            summary,
            c.plan.clone(),
            &c.agg,
        ))
    }

    /// The summary of a finished campaign.
    pub fn summary(&self, campaign_id: &str) -> Option<Summary> {
        self.lock()
            .campaigns
            .get(campaign_id)
            .and_then(|c| c.summary.clone())
    }
}

/// [`crate::intake::check_done`], and `last_seq` within [`crate::intake::SEQ_WINDOW`] of the
/// highest seq received from the agent.
fn check_done_notice(
    agent_id: &str,
    done: &pb::CampaignDone,
    plan: &Plan,
    highest: u64,
) -> Result<(), StateError> {
    let bad = |message| StateError::BadBatch {
        agent: agent_id.to_string(),
        seq: done.last_seq,
        message,
    };
    crate::intake::check_done(done, plan, highest).map_err(bad)?;
    if done.last_seq > highest.saturating_add(crate::intake::SEQ_WINDOW) {
        return Err(bad(format!(
            "CampaignDone.last_seq {} is more than {} past the highest seq received ({highest})",
            done.last_seq,
            crate::intake::SEQ_WINDOW
        )));
    }
    Ok(())
}

/// The new version of `agent_id`'s `agents` row in finished campaign `c` (`None` while it
/// runs): its entry of the final summary with the facts that arrived since (late batches'
/// records, its done notice's delivery facts); `complete` stays as the summary says.
fn late_agent_row(
    agents: &BTreeMap<String, AgentEntry>,
    c: &Campaign,
    agent_id: &str,
) -> Option<StoreEvent> {
    let summary = c.summary.as_ref()?;
    let a = c.agents.get(agent_id)?;
    let mut row = summary
        .agents
        .iter()
        .find(|s| s.agent_id == agent_id)?
        .clone();
    row.records = row.records.max(a.records);
    row.batches = row.batches.max(a.seqs.len() as u64);
    row.skipped = a.skipped;
    row.delivery = a.rejections.summary(a.last_seq);
    Some(agent_row_event(agents, &summary.campaign_id, row))
}

/// A [`StoreEvent::Finished`] writing one agent's row (with its version when known).
fn agent_row_event(
    agents: &BTreeMap<String, AgentEntry>,
    campaign_id: &str,
    row: AgentSummary,
) -> StoreEvent {
    let version = agents
        .get(&row.agent_id)
        .map(|e| e.info.version.clone())
        .unwrap_or_default();
    StoreEvent::Finished {
        campaign_id: campaign_id.to_string(),
        agents: vec![(row, version)],
    }
}

/// [`State::done`] for a campaign not in memory: one an earlier coordinator process finished
/// (see [`State::finished_earlier`]) is checked against its stored plan and its agent's
/// delivery facts are updated in its record and in a new version of its `agents` row (the
/// summary stays final; records of late batches are not counted: they are not merged).
fn done_after_restart(
    inner: &mut Inner,
    agent_id: &str,
    done: &pb::CampaignDone,
) -> Result<(), StateError> {
    let unknown = || StateError::UnknownCampaign(done.campaign_id.clone());
    let Inner {
        agents,
        events,
        persist,
        ..
    } = inner;
    let persist = persist.as_mut().ok_or_else(unknown)?;
    let mut rec = persist.record(&done.campaign_id).ok_or_else(unknown)?;
    let Some(summary) = rec.summary.clone() else {
        return Err(unknown());
    };
    let bad = |message: String| StateError::BadBatch {
        agent: agent_id.to_string(),
        seq: done.last_seq,
        message,
    };
    let summary_row = summary.agents.iter().find(|s| s.agent_id == agent_id);
    let (Some(a), Some(summary_row)) = (rec.agents.get_mut(agent_id), summary_row) else {
        return Err(bad("agent is not part of this campaign".into()));
    };
    let plan: Plan = serde_json::from_str(&rec.plan_json)
        .map_err(|e| bad(format!("the campaign's stored plan does not parse: {e}")))?;
    // The seqs stored are not known here: the highest is at least the batches counted.
    let highest = a.last_seq.unwrap_or(0).max(summary_row.batches);
    check_done_notice(agent_id, done, &plan, highest)?;
    let start = (
        done.started_coord_unix_us,
        done.clock_offset_us,
        done.clock_uncertainty_us,
    );
    let before = (
        a.last_seq,
        a.skipped,
        (
            a.started_coord_unix_us,
            a.clock_offset_us,
            a.clock_uncertainty_us,
        ),
    );
    if !(a.rejections.from_done(done, |_| false)
        | (before != (Some(done.last_seq), done.skipped, start)))
    {
        return Ok(());
    }
    a.last_seq = Some(done.last_seq);
    a.skipped = done.skipped;
    (
        a.started_coord_unix_us,
        a.clock_offset_us,
        a.clock_uncertainty_us,
    ) = start;
    let mut row = summary_row.clone();
    row.skipped = a.skipped;
    row.delivery = a.rejections.summary(a.last_seq);
    if let Err(e) = persist.save(&rec) {
        tracing::error!(campaign = %done.campaign_id, error = format!("{e:#}"), "cannot persist the campaign's state");
    }
    tracing::info!(campaign = %done.campaign_id, agent = %agent_id,
        "late done notice of finished campaign {} from agent {agent_id}: delivery facts updated",
        done.campaign_id);
    if let Some(events) = events.as_mut() {
        events.push(agent_row_event(agents, &done.campaign_id, row));
    }
    Ok(())
}

/// Forgets one agent when [`crate::intake::MAX_KNOWN_AGENTS`] are known: the one disconnected
/// longest among those no unfinished campaign includes.
fn make_room_for_an_agent(inner: &mut Inner) -> Result<(), String> {
    let max = crate::intake::MAX_KNOWN_AGENTS;
    if inner.agents.len() < max {
        return Ok(());
    }
    let busy = |id: &str| {
        inner
            .campaigns
            .values()
            .any(|c| c.summary.is_none() && c.agents.contains_key(id))
    };
    let oldest = inner
        .agents
        .iter()
        .filter(|(id, a)| !a.info.connected && a.tx.is_none() && !busy(id))
        .min_by_key(|(_, a)| a.info.disconnected_since_coord_unix_us)
        .map(|(id, _)| id.clone());
    match oldest {
        Some(id) => {
            inner.agents.remove(&id);
            tracing::info!(agent = %id, "forgot a disconnected agent: the coordinator keeps at most {max}");
            Ok(())
        }
        None => Err(format!(
            "the coordinator knows {max} agents, the most it keeps, all connected or in a running campaign"
        )),
    }
}

/// The final progress of a campaign finished by an earlier process, from its record.
fn finished_progress(rec: &CampaignRecord, summary: &Summary) -> pb::Progress {
    let per_agent = serde_json::from_str::<Plan>(&rec.plan_json)
        .map_or(0, |p| crate::progress::planned_requests_per_agent(&p));
    let slots = |id: &str| rec.agents.get(id).map_or(0, |a| a.slots_done);
    pb::Progress {
        campaign_id: rec.campaign_id.clone(),
        probes_done: rec.agents.values().map(|a| a.slots_done).sum(),
        probes_expected: per_agent * rec.agents.len() as u64,
        agents: summary
            .agents
            .iter()
            .map(|a| pb::AgentProgress {
                agent_id: a.agent_id.clone(),
                region: a.region.clone(),
                probes_done: slots(&a.agent_id),
                batches_acked: a.batches,
                done: a.complete,
                status: if summary.cancelled {
                    "cancelled"
                } else {
                    "done"
                }
                .into(),
                ..Default::default()
            })
            .collect(),
        finished: true,
        summary_json: serde_json::to_string(summary).expect("summaries serialize"),
        cancelled: summary.cancelled,
        live: Vec::new(),
        // Filled in by the watch stream (`service`), which knows the spool.
        ..Default::default()
    }
}

/// Decodes a batch's records and histograms.
fn decode_batch(agent_id: &str, batch: &pb::ResultBatch) -> Result<DecodedBatch, StateError> {
    let bad = |message: String| StateError::BadBatch {
        agent: agent_id.to_string(),
        seq: batch.seq,
        message,
    };
    let records: Vec<ProbeRecord> = batch
        .records
        .iter()
        .map(|r| ProbeRecord::try_from(r.clone()))
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let histograms = batch
        .histograms
        .iter()
        .map(wire::sparse_histogram_from_pb_strict)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    Ok((records, histograms))
}

type DecodedBatch = (
    Vec<ProbeRecord>,
    Vec<(
        latmesh_core::hist::HistKey,
        latmesh_core::hist_sparse::SparseHistogram,
    )>,
);

/// Counts a batch into its campaign; `false` when its (agent, seq) was counted before.
fn merge_into(c: &mut Campaign, b: &CheckedBatch) -> bool {
    let Some(ca) = c.agents.get_mut(&b.agent_id) else {
        return false;
    };
    if !ca.seqs.insert(b.seq) {
        return false;
    }
    ca.records += b.records.len() as u64;
    ca.slots_done += b.records.iter().filter(|r| r.ends_planned_slot()).count() as u64;
    for r in &b.records {
        c.agg.add_record(&b.region, r);
        c.sends.add(&b.agent_id, r);
    }
    for (key, h) in &b.histograms {
        c.agg.add_sparse_histogram(&b.region, key.clone(), h);
    }
    c.guard.add(&c.plan, &b.records);
    true
}

/// The durable facts of a campaign.
fn record_of(campaign_id: &str, c: &Campaign) -> CampaignRecord {
    CampaignRecord {
        format: crate::persist::FORMAT,
        campaign_id: campaign_id.to_string(),
        plan_json: c.plan_json.clone(),
        plan_hash: c.plan_hash.clone(),
        launched_at_unix_us: c.launched_at_unix_us,
        start_at_unix_us: c.start_at_unix_us,
        deadline_unix_us: c.deadline_unix_us,
        agents: c
            .agents
            .iter()
            .map(|(id, a)| {
                (
                    id.clone(),
                    AgentRecord {
                        region: a.region.clone(),
                        last_seq: a.last_seq,
                        skipped: a.skipped,
                        slots_done: a.slots_done,
                        started_coord_unix_us: a.start.0,
                        clock_offset_us: a.start.1,
                        clock_uncertainty_us: a.start.2,
                        rejections: a.rejections.clone(),
                    },
                )
            })
            .collect(),
        expired: c.expired,
        cancelled_at_us: c.cancelled_at_us,
        allow_missing_keys: c.allow_missing_keys,
        budget: c.guard.clone(),
        summary: c.summary.clone(),
    }
}

/// Writes the campaign's record when campaigns persist (errors are logged: the facts stay in
/// memory and are written with the next change).
fn persist_campaign(persist: &mut Option<StateDir>, campaign_id: &str, c: &Campaign) {
    if let Some(p) = persist.as_mut()
        && let Err(e) = p.save(&record_of(campaign_id, c))
    {
        tracing::error!(campaign = %campaign_id, error = format!("{e:#}"), "cannot persist the campaign's state");
    }
}

fn plan_message(campaign_id: &str, c: &Campaign, next_seq: u64) -> pb::CoordinatorMessage {
    pb::CoordinatorMessage {
        kind: Some(pb::coordinator_message::Kind::Plan(pb::PlanPush {
            campaign_id: campaign_id.to_string(),
            plan_json: c.plan_json.clone(),
            plan_hash: c.plan_hash.clone(),
            start_at_coord_unix_us: c.start_at_unix_us,
            next_seq,
            agents: c.agents.len() as u32,
        })),
    }
}

/// Extra time after a plan's last probe could have ended before its campaign is finished
/// without the missing results, µs.
pub const DEADLINE_GRACE_US: i64 = 30_000_000;

/// From round 0's start to the latest moment the plan's last probe can end, µs.
fn plan_span_us(plan: &Plan) -> i64 {
    // Every turn and retry of a slot started at the end at its total timeout, plus the retry
    // waits (and an open-loop arrival's longest wait for its provider's cap).
    let longest_us = plan
        .scenarios
        .iter()
        .map(|s| {
            let queue_us = match &s.load {
                latmesh_core::load::LoadModel::Rate(r) => r.max_queue_ms * 1000,
                _ => 0,
            };
            s.worst_case_slot_us() + queue_us
        })
        .max()
        .unwrap_or(0);
    (plan.span_us() as i64).saturating_add(i64::try_from(longest_us).unwrap_or(i64::MAX))
}

/// Longest duration a record of `plan` may report before intake calls it absurd, µs: twice
/// the span from round 0 to the campaign's deadline ([`plan_span_us`] +
/// [`DEADLINE_GRACE_US`], whatever cancel did to the deadline) plus a day. Loose on purpose:
/// honest attempts outlast the deadline (a provider's Retry-After pause of up to an hour, caps
/// on later turns are not in it) and their late records are stored.
fn campaign_span_us(plan: &Plan) -> u64 {
    const DAY_US: u64 = 86_400_000_000;
    u64::try_from(plan_span_us(plan).saturating_add(DEADLINE_GRACE_US))
        .unwrap_or(0)
        .saturating_mul(2)
        .saturating_add(DAY_US)
}

/// Recomputes the campaign's progress (and its summary once every agent is complete) and
/// publishes it to watchers.
fn publish(inner: &mut Inner, campaign_id: &str) {
    let Inner {
        agents,
        campaigns,
        events,
        persist,
        ..
    } = inner;
    let Some(c) = campaigns.get_mut(campaign_id) else {
        return;
    };
    let is_cancelled = c.cancelled_at_us.is_some();
    let per_agent = c.probes_per_agent;
    let agent_progress: Vec<pb::AgentProgress> = c
        .agents
        .iter()
        .map(|(id, a)| {
            let info = agents.get(id).map(|e| &e.info);
            pb::AgentProgress {
                agent_id: id.clone(),
                region: a.region.clone(),
                probes_done: a.slots_done,
                batches_acked: a.seqs.len() as u64,
                done: a.complete(),
                connected: info.is_some_and(|i| i.connected),
                status: campaign_agent_status(a, info, is_cancelled).into(),
                last_heartbeat_coord_unix_us: info.map_or(0, |i| i.last_heartbeat_coord_unix_us),
                in_flight: info.map_or(0, |i| i.in_flight),
                disconnected_since_coord_unix_us: info
                    .filter(|i| !i.connected)
                    .map_or(0, |i| i.disconnected_since_coord_unix_us),
            }
        })
        .collect();
    let finished = c.expired || c.agents.values().all(CampaignAgent::complete);
    if finished && c.summary.is_none() {
        let agent_summaries = c
            .agents
            .iter()
            .map(|(id, a)| {
                let info = agents.get(id).map(|e| &e.info);
                AgentSummary {
                    agent_id: id.clone(),
                    region: a.region.clone(),
                    clock_offset_us: info.map_or(0, |i| i.clock_offset_us),
                    clock_uncertainty_us: info.map_or(0, |i| i.clock_uncertainty_us),
                    records: a.records,
                    batches: a.seqs.len() as u64,
                    complete: a.complete() && a.skipped == 0 && a.rejections.is_clean(),
                    skipped: a.skipped,
                    delivery: a.rejections.summary(a.last_seq),
                }
            })
            .collect();
        let mut summary = summary::build(
            campaign_id,
            &c.plan,
            c.start_at_unix_us,
            &c.agg,
            agent_summaries,
        );
        summary.cancelled = is_cancelled;
        summary.guard = c.guard.summary();
        summary.start = summary::StartSync::of(
            c.agents
                .iter()
                .filter(|(_, a)| a.last_seq.is_some())
                .map(|(id, a)| summary::AgentStart {
                    agent_id: id.clone(),
                    region: a.region.clone(),
                    started_coord_unix_us: a.start.0,
                    clock_offset_us: a.start.1,
                    clock_uncertainty_us: a.start.2,
                })
                .collect(),
        );
        let offsets = c
            .agents
            .iter()
            .filter(|(_, a)| a.start.0 != 0)
            .map(|(id, a)| (id.clone(), a.start.1))
            .collect();
        summary.start.slot_skew = c.sends.skew(&offsets);
        c.summary = Some(summary);
        if let (Some(events), Some(summary)) = (events.as_mut(), c.summary.as_ref()) {
            events.push(StoreEvent::Finished {
                campaign_id: campaign_id.to_string(),
                agents: summary
                    .agents
                    .iter()
                    .map(|a| {
                        let version = agents
                            .get(&a.agent_id)
                            .map(|e| e.info.version.clone())
                            .unwrap_or_default();
                        (a.clone(), version)
                    })
                    .collect(),
            });
        }
        // After the event: a coordinator killed in between finishes the campaign again on
        // restart and queues the same agent rows again (stored once: they replace).
        persist_campaign(persist, campaign_id, c);
    }
    let mut agents_per_region = BTreeMap::<String, u64>::new();
    for a in c.agents.values() {
        *agents_per_region.entry(a.region.clone()).or_default() += 1;
    }
    let live = c.live.cells(
        std::time::Instant::now(),
        finished,
        &c.plan,
        c.probes_per_agent,
        &c.agg,
        &agents_per_region,
    );
    let progress = pb::Progress {
        campaign_id: campaign_id.to_string(),
        probes_done: c.agg.slots_done(),
        probes_expected: per_agent * c.agents.len() as u64,
        agents: agent_progress,
        finished,
        summary_json: c
            .summary
            .as_ref()
            .map(|s| serde_json::to_string(s).expect("summaries serialize"))
            .unwrap_or_default(),
        cancelled: is_cancelled,
        live,
        // Filled in by the watch stream (`service`), which knows the spool.
        ..Default::default()
    };
    c.progress.send_replace(progress);
}

/// Heartbeat period assumed until an agent's first heartbeat says its own, ms.
pub const DEFAULT_HEARTBEAT_MS: u32 = 5_000;
/// An agent silent for this many heartbeat periods is marked disconnected.
pub const SILENT_HEARTBEATS: i64 = 3;
/// A cancelled campaign finishes at the latest this long after the cancel (agents that do
/// not report by then are marked as falling short), µs.
pub const CANCEL_DEADLINE_US: i64 = 30_000_000;

impl State {
    /// Cancels an unfinished campaign: marks it cancelled, pushes a cancel to every agent of it
    /// that has not reported done (agents away get it when they reconnect), and brings its
    /// deadline to at most [`CANCEL_DEADLINE_US`] from now. Returns the agents it was pushed
    /// to. Cancelling again resends the cancel.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`], or [`StateError::Finished`] for a campaign that has
    /// already finished.
    pub fn cancel(&self, campaign_id: &str) -> Result<Vec<String>, StateError> {
        cancel_in(&mut self.lock(), campaign_id)
    }
}

/// [`State::cancel`] under the lock; the reason sent to the agents is the budget guard's
/// when it stopped the campaign, else `cancelled by latmesh campaign cancel`.
fn cancel_in(inner: &mut Inner, campaign_id: &str) -> Result<Vec<String>, StateError> {
    let now = now_unix_us();
    let mut notified = Vec::new();
    let reason;
    {
        let Inner {
            agents,
            campaigns,
            persist,
            ..
        } = &mut *inner;
        let c = campaigns
            .get_mut(campaign_id)
            .ok_or_else(|| StateError::UnknownCampaign(campaign_id.to_string()))?;
        if let Some(s) = &c.summary {
            let how = if c.cancelled_at_us.is_some() {
                "cancelled"
            } else if s.complete {
                "complete"
            } else {
                "incomplete"
            };
            return Err(StateError::Finished {
                campaign: campaign_id.to_string(),
                how: how.into(),
            });
        }
        reason = cancel_reason(c);
        c.cancelled_at_us.get_or_insert(now);
        c.deadline_unix_us = c.deadline_unix_us.min(now + CANCEL_DEADLINE_US);
        persist_campaign(persist, campaign_id, c);
        for (id, a) in &c.agents {
            if a.last_seq.is_some() {
                continue; // already reported done
            }
            if let Some(tx) = agents.get(id).and_then(|e| e.tx.as_ref())
                && tx
                    .try_send(Ok(cancel_message(campaign_id, &reason)))
                    .is_ok()
            {
                notified.push(id.clone());
            }
        }
    }
    tracing::warn!(campaign = %campaign_id, agents = ?notified, %reason, "campaign cancelled");
    publish(inner, campaign_id);
    Ok(notified)
}

/// Cancels the unfinished campaign `campaign_id` when its budget guard passed a cap, through
/// the ordinary cancel path with the guard's reason (once: a cancelled campaign stays as it
/// is).
fn enforce_budget(inner: &mut Inner, campaign_id: &str) {
    let Some(c) = inner.campaigns.get_mut(campaign_id) else {
        return;
    };
    if c.summary.is_some() || c.cancelled_at_us.is_some() {
        return;
    }
    let Some(reason) = c.guard.passed() else {
        return;
    };
    tracing::warn!(campaign = %campaign_id, prompt_tokens = c.guard.spent.prompt_tokens,
        completion_tokens = c.guard.spent.completion_tokens, cost_usd = c.guard.spent.cost_usd,
        "{reason}: cancelling the campaign");
    c.guard.stopped = Some(reason);
    let _ = cancel_in(inner, campaign_id);
}

/// Why a campaign was cancelled, as sent to its agents.
fn cancel_reason(c: &Campaign) -> String {
    c.guard
        .stopped
        .clone()
        .unwrap_or_else(|| "cancelled by latmesh campaign cancel".into())
}

impl State {
    /// Whether the campaign was cancelled.
    pub fn is_cancelled(&self, campaign_id: &str) -> bool {
        self.lock()
            .campaigns
            .get(campaign_id)
            .is_some_and(|c| c.cancelled_at_us.is_some())
    }

    /// Any message on the agent's session `session`: it is alive (an agent marked
    /// disconnected for its silence is connected again).
    pub fn seen(&self, agent_id: &str, session: u64) {
        let mut inner = self.lock();
        if let Some(a) = inner.agents.get_mut(agent_id)
            && a.session == session
        {
            a.info.last_seen_coord_unix_us = now_unix_us();
        }
        revive(&mut inner, agent_id, session);
    }

    /// Marks every connected agent not heard from for more than [`SILENT_HEARTBEATS`] of its
    /// heartbeat periods as disconnected (its session stays open: a word from it revives it).
    /// Returns the agents it marked.
    pub fn check_liveness(&self, now_unix_us: i64) -> Vec<String> {
        let mut inner = self.lock();
        let mut silent = Vec::new();
        for (id, a) in inner.agents.iter_mut() {
            let period_us = i64::from(a.info.heartbeat_interval_ms.max(1)) * 1000;
            let quiet_us = now_unix_us - a.info.last_seen_coord_unix_us;
            if a.info.connected && quiet_us > SILENT_HEARTBEATS * period_us {
                a.info.connected = false;
                a.info.disconnected_since_coord_unix_us = a.info.last_seen_coord_unix_us;
                a.info.disconnect_reason = format!(
                    "no heartbeat for {:.1} s ({SILENT_HEARTBEATS} periods of {:.1} s)",
                    quiet_us as f64 / 1e6,
                    period_us as f64 / 1e6
                );
                tracing::warn!(agent = %id, silent_s = quiet_us as f64 / 1e6, "agent silent: marked disconnected");
                silent.push(id.clone());
            }
        }
        if !silent.is_empty() {
            publish_agents_campaigns(&mut inner, &silent);
        }
        silent
    }
}

/// Marks the agent connected again when its current session `session` speaks after it was
/// marked disconnected for its silence.
fn revive(inner: &mut Inner, agent_id: &str, session: u64) {
    let Some(a) = inner.agents.get_mut(agent_id) else {
        return;
    };
    if a.session != session || a.info.connected || a.tx.is_none() {
        return;
    }
    a.info.connected = true;
    a.info.disconnected_since_coord_unix_us = 0;
    a.info.disconnect_reason.clear();
    tracing::info!(agent = %agent_id, "silent agent heard from again: connected");
    publish_agents_campaigns(inner, &[agent_id.to_string()]);
}

/// Publishes the progress of every unfinished campaign of `agent_ids`.
fn publish_agents_campaigns(inner: &mut Inner, agent_ids: &[String]) {
    let ids: Vec<String> = inner
        .campaigns
        .iter()
        .filter(|(_, c)| c.summary.is_none() && agent_ids.iter().any(|a| c.agents.contains_key(a)))
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        publish(inner, &id);
    }
}

/// An agent's status in a campaign: `running`, `cancelling` (cancel sent, not done yet),
/// `finishing` (done reported, batches still missing), `done`, `cancelled` (done after a
/// cancel) or `disconnected`.
fn campaign_agent_status(
    a: &CampaignAgent,
    info: Option<&pb::AgentInfo>,
    cancelled: bool,
) -> &'static str {
    if a.complete() {
        if cancelled { "cancelled" } else { "done" }
    } else if !info.is_some_and(|i| i.connected) {
        "disconnected"
    } else if a.last_seq.is_some() {
        "finishing"
    } else if cancelled {
        "cancelling"
    } else {
        "running"
    }
}

fn cancel_message(campaign_id: &str, reason: &str) -> pb::CoordinatorMessage {
    pb::CoordinatorMessage {
        kind: Some(pb::coordinator_message::Kind::Cancel(pb::CancelCampaign {
            campaign_id: campaign_id.to_string(),
            reason: reason.to_string(),
        })),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use latmesh_core::hist::{HistKey, new_histogram};
    use latmesh_core::metrics::Metric;
    use latmesh_core::plan::{PlanPrompt, ProviderSpec, RoundsSpec, ScenarioSpec, Timeouts};
    use latmesh_core::record::Outcome;

    pub(crate) fn plan() -> Plan {
        Plan {
            name: "t".into(),
            seed: 1,
            metrics_version: 1,
            regions: vec!["us-east".into()],
            rounds: RoundsSpec {
                count: 1,
                interval_ms: 1000,
                gap_ms: 10,
            },
            providers: vec![ProviderSpec {
                name: "p".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key_env: None,
                model_id: "m".into(),
                expect_model: None,
                pass_reasoning: false,
                limits: Default::default(),
                price: None,
                user_agent: None,
                request: Default::default(),
            }],
            scenarios: vec![ScenarioSpec {
                name: "s".into(),
                stream: true,
                max_tokens: 8,
                temperature: None,
                top_p: None,
                timeouts: Timeouts::default(),
                prompts: vec![PlanPrompt {
                    id: "a".into(),
                    messages: vec![],
                    follow_ups: vec![],
                }],
                policy: Default::default(),
                load: Default::default(),
                failover: None,
                extra_body: Default::default(),
            }],
            prompt_set: "x".into(),
            timezones: Default::default(),
            windows: Vec::new(),
            schedule: None,
            selection: None,
            percentiles: latmesh_core::plan::default_percentiles(),
        }
    }

    pub(crate) fn hello(id: &str, region: &str) -> pb::AgentHello {
        pb::AgentHello {
            agent_id: id.into(),
            region: region.into(),
            version: "t".into(),
            protocol_version: 1,
            ..Default::default()
        }
    }

    pub(crate) fn batch(campaign: &str, seq: u64, ttft_us: u64) -> pb::ResultBatch {
        let rec = ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Ok),
            ttft_us: Some(ttft_us),
            attempt: 1,
            final_attempt: true,
            turn: 1,
            ..Default::default()
        };
        let mut h = new_histogram();
        h.record(ttft_us).unwrap();
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        pb::ResultBatch {
            campaign_id: campaign.into(),
            seq,
            histograms: vec![wire::histogram_to_pb(&key, &h, 0, 1).unwrap()],
            records: vec![pb::ProbeRecord::from(&rec)],
            clock_offset_us: 0,
        }
    }

    #[tokio::test]
    async fn launch_pushes_the_plan_and_refuses_regions_without_agents() {
        let state = State::default();
        let mut p = plan();
        p.regions.push("eu-west".into());
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let err = state.launch(&p.to_json(), 0).unwrap_err();
        assert!(err.to_string().contains("\"eu-west\""), "{err}");
        assert!(err.to_string().contains("connected: us-east"), "{err}");
        let l = state.launch(&plan().to_json(), 1_000).unwrap();
        assert_eq!(l.agent_ids, vec!["a1".to_string()]);
        match rx.recv().await.unwrap().unwrap().kind {
            Some(pb::coordinator_message::Kind::Plan(push)) => {
                assert_eq!(push.campaign_id, l.campaign_id);
                assert_eq!(push.plan_hash, plan().hash());
            }
            other => panic!("expected a plan, got {other:?}"),
        }
        assert!(matches!(state.launch("{", 0), Err(StateError::BadPlan(_))));
    }

    #[tokio::test]
    async fn a_launch_to_an_agent_without_a_provider_s_key_variable_is_refused_unless_allowed() {
        let state = State::default();
        let mut p = plan();
        p.providers[0].api_key_env = Some("P_KEY".into());
        let keyed = |id: &str, names: &[&str]| pb::AgentHello {
            key_env_names: names.iter().map(|n| n.to_string()).collect(),
            key_env_reported: true,
            ..hello(id, "us-east")
        };
        let (tx1, mut rx1) = mpsc::channel(8);
        state.connect(&keyed("a1", &["OTHER", "P_KEY"]), tx1);
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&keyed("a2", &["OTHER"]), tx2);
        let err = state.launch(&p.to_json(), 0).unwrap_err().to_string();
        assert!(
            err.starts_with("agent a2 (region us-east) lacks $P_KEY for provider p: "),
            "{err}"
        );
        assert!(err.contains("--allow-missing-keys"), "{err}");
        assert!(
            rx1.try_recv().is_err() && rx2.try_recv().is_err(),
            "nothing sent"
        );
        assert_eq!(state.running_campaigns(), 0);
        // An agent that does not report its variables (older) is not checked.
        let (tx3, _rx3) = mpsc::channel(8);
        state.connect(&hello("a3", "eu-west"), tx3);
        // Allowed: launched, with the same facts as a warning.
        let opts = LaunchOptions {
            allow_missing_keys: true,
            ..Default::default()
        };
        let l = state.launch_with(&p.to_json(), 0, &opts).unwrap();
        assert_eq!(
            l.warnings,
            [
                "agent a2 (region us-east) lacks $P_KEY for provider p: its requests to p go without an API key"
            ]
        );
        assert!(rx2.try_recv().is_ok(), "the plan went to a2");
        // A campaign launched without the allowance is not pushed again to an agent that
        // rejoins without the key.
        let mut q = plan();
        q.name = "q".into();
        q.regions = vec!["eu-west".into()];
        q.providers[0].api_key_env = Some("P_KEY".into());
        let id = state.launch(&q.to_json(), 0).unwrap().campaign_id;
        let (tx3, mut rx3) = mpsc::channel(8);
        state.connect(&keyed("a3", &[]), tx3);
        assert!(rx3.try_recv().is_err(), "no plan for a3 without its key");
        let (tx3, mut rx3) = mpsc::channel(8);
        state.connect(&keyed("a3", &["P_KEY"]), tx3);
        match rx3.try_recv().unwrap().unwrap().kind {
            Some(pb::coordinator_message::Kind::Plan(push)) => assert_eq!(push.campaign_id, id),
            other => panic!("expected the plan, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn resent_batches_count_once_and_the_campaign_finishes_when_all_seqs_arrived() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert!(state.batch("a1", batch(&id, 2, 2_000)).unwrap());
        assert!(
            !state.batch("a1", batch(&id, 2, 2_000)).unwrap(),
            "a resent batch is not merged twice"
        );
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    skipped: 0,
                    last_seq: 2,
                    probes: 2,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(state.summary(&id).is_none(), "seq 1 is still missing");
        let running = state.watch(&id).unwrap().borrow().clone();
        assert!(!running.finished);
        // Live cells: the region's, then the provider's (as of launch: they are recomputed at
        // most once a second).
        let live = |p: &pb::Progress| {
            p.live
                .iter()
                .map(|c| (c.region.clone(), c.provider.clone(), c.done, c.p50_ms))
                .collect::<Vec<_>>()
        };
        let keys: Vec<_> = live(&running).into_iter().map(|c| (c.0, c.1)).collect();
        assert_eq!(
            keys,
            [
                ("us-east".into(), String::new()),
                (String::new(), "p".into())
            ]
        );
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        let s = state.summary(&id).expect("finished");
        let cell = s.cell("us-east", "p", "s").unwrap();
        assert_eq!((cell.attempts, cell.samples), (2, 2));
        assert_eq!(s.agents[0].batches, 2);
        let progress = state.watch(&id).unwrap().borrow().clone();
        assert!(progress.finished);
        assert_eq!(progress.probes_done, 2);
        assert!(!progress.summary_json.is_empty());
        // The last message has fresh live cells, however recent the previous ones were.
        assert_eq!(
            live(&progress),
            [
                ("us-east".into(), String::new(), 2, 0.0),
                (String::new(), "p".into(), 2, 1.0)
            ]
        );
    }

    #[tokio::test]
    async fn bad_batches_are_rejected_whole() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let mut b = batch(&id, 1, 1_000);
        b.histograms[0].hist_v2 = vec![1, 2, 3];
        assert!(matches!(
            state.batch("a1", b),
            Err(StateError::BadBatch { seq: 1, .. })
        ));
        assert!(matches!(
            state.batch("a2", batch(&id, 1, 1)),
            Err(StateError::BadBatch { .. })
        ));
        assert!(matches!(
            state.batch("a1", batch("nope", 1, 1)),
            Err(StateError::UnknownCampaign(_))
        ));
        // Nothing of the rejected batch was counted: seq 1 is still accepted.
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
    }

    #[tokio::test]
    async fn hostile_seqs_and_histograms_are_refused_before_decoding_and_the_campaign_completes() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let bad_message = |r| match r {
            Err(StateError::BadBatch { message, .. }) => message,
            other => panic!("expected BadBatch, got {other:?}"),
        };
        // seq u64::MAX: refused (before, it was stored and the reconnect's next_seq overflowed).
        let e = bad_message(state.batch("a1", batch(&id, u64::MAX, 1_000)));
        assert!(
            e.starts_with("seq 18446744073709551615 is more than"),
            "{e}"
        );
        // A histogram with foreign bounds (a ~60 ms dense decode): refused by its header.
        let mut foreign = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 40, 5).unwrap();
        foreign.record(1_000).unwrap();
        let mut b = batch(&id, 1, 1_000);
        b.histograms[0].hist_v2 = latmesh_core::hist::encode_v2(&foreign).unwrap();
        let e = bad_message(state.batch("a1", b));
        assert!(e.contains("are not latmesh's"), "{e}");
        // A done notice claiming u64::MAX batches is ignored (verifying it would have walked
        // 1..=u64::MAX).
        let done = |last_seq| pb::CampaignDone {
            campaign_id: id.clone(),
            last_seq,
            ..Default::default()
        };
        let e = bad_message(state.done("a1", &done(u64::MAX)).map(|()| true));
        assert!(
            e.starts_with("CampaignDone.last_seq 18446744073709551615"),
            "{e}"
        );
        assert!(state.summary(&id).is_none());
        // The agent's own batches still go through and complete the campaign.
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx2);
        assert_eq!(plan_of(rx2.recv().await).next_seq, 2);
        state.done("a1", &done(1)).unwrap();
        let s = state.summary(&id).expect("complete");
        assert_eq!((s.agents[0].records, s.agents[0].complete), (1, true));
    }

    #[tokio::test]
    async fn the_agents_kept_are_bounded_and_the_longest_disconnected_is_forgotten_first() {
        let state = State::default();
        let max = crate::intake::MAX_KNOWN_AGENTS;
        let mut sessions = Vec::new();
        for i in 0..max {
            let h = hello(&format!("a{i:05}"), "us-east");
            state.admit(&h).unwrap();
            let (tx, rx) = mpsc::channel(8);
            sessions.push((state.connect(&h, tx), rx));
        }
        let newcomer = hello("new", "us-east");
        let e = state.admit(&newcomer).unwrap_err();
        assert!(e.contains(&format!("knows {max} agents")), "{e}");
        // Two leave; the first to leave is forgotten for the newcomer.
        state.disconnect("a00007", sessions[7].0);
        let left = now_unix_us();
        while now_unix_us() == left {
            std::hint::spin_loop(); // a later µs for the second one
        }
        state.disconnect("a00003", sessions[3].0);
        state.admit(&newcomer).unwrap();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&newcomer, tx);
        let ids: Vec<String> = state.agents().into_iter().map(|a| a.agent_id).collect();
        assert_eq!(ids.len(), max);
        assert!(!ids.contains(&"a00007".to_string()));
        assert!(ids.contains(&"a00003".to_string()) && ids.contains(&"new".to_string()));
    }

    /// Launches [`plan`] to the connected agent `a1`, which delivers one batch and is done:
    /// the campaign's id, finished.
    fn finish_one_batch_campaign(state: &State) -> String {
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        let done = pb::CampaignDone {
            campaign_id: id.clone(),
            last_seq: 1,
            ..Default::default()
        };
        state.done("a1", &done).unwrap();
        assert!(state.summary(&id).is_some());
        id
    }

    #[tokio::test]
    async fn late_resends_of_a_campaign_finished_earlier_are_checked_like_live_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let id = {
            let state = State::default();
            state
                .with_state_dir(StateDir::open(tmp.path()).unwrap())
                .unwrap();
            state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
            finish_one_batch_campaign(&state)
        };
        let state = State::default();
        state
            .with_state_dir(StateDir::open(tmp.path()).unwrap())
            .unwrap();
        assert!(state.finished_earlier(&id, "a1").is_some());
        state.check_late("a1", &mut batch(&id, 1, 1_000)).unwrap();
        let bad_message = |r: Result<(), StateError>| match r {
            Err(StateError::BadBatch { message, .. }) => message,
            other => panic!("expected BadBatch, got {other:?}"),
        };
        let e = bad_message(state.check_late("a1", &mut batch(&id, u64::MAX, 1)));
        assert!(
            e.starts_with("seq 18446744073709551615 is more than"),
            "{e}"
        );
        let mut b = batch(&id, 1, 1_000);
        b.records[0].provider = "evil".into();
        let e = bad_message(state.check_late("a1", &mut b));
        assert!(
            e.contains("provider \"evil\" is not a provider of the plan"),
            "{e}"
        );
        let e = bad_message(state.check_late("a2", &mut batch(&id, 1, 1)));
        assert!(e.contains("not part of this campaign"), "{e}");
    }

    /// The `agents` rows queued (campaign, agent row as the sink writes it).
    fn agent_rows(state: &State) -> Vec<crate::clickhouse::AgentRow> {
        state
            .drain_store_events()
            .into_iter()
            .filter_map(|ev| match ev {
                StoreEvent::Finished {
                    campaign_id,
                    agents,
                } => Some(
                    agents
                        .into_iter()
                        .map(move |(a, v)| {
                            crate::clickhouse::AgentRow::from_summary(&campaign_id, &a, &v, 1)
                        })
                        .collect::<Vec<_>>(),
                ),
                StoreEvent::Launched { .. } => None,
            })
            .flatten()
            .collect()
    }

    #[tokio::test]
    async fn a_done_notice_after_the_campaign_finished_updates_the_agent_s_delivery_facts() {
        let tmp = tempfile::tempdir().unwrap();
        let open = || StateDir::open(tmp.path()).unwrap();
        let done = |id: &str, last_seq, skipped| pb::CampaignDone {
            campaign_id: id.into(),
            last_seq,
            skipped,
            ..Default::default()
        };
        let id = {
            let state = State::with_store_events();
            state.with_state_dir(open()).unwrap();
            state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
            let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
            assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
            // The deadline passes before the agent is done: finished incomplete, no notice.
            assert_eq!(state.expire(i64::MAX), vec![id.clone()]);
            let rows = agent_rows(&state);
            assert_eq!(rows.len(), 1);
            assert_eq!((rows[0].campaign_done, rows[0].records), (0, 1));
            assert!(!crate::clickhouse::query::not_verified(&rows[0], 1).is_empty());
            // Its last batch (stored, counted in its row only once its done notice came), then
            // the notice: a new version of its row, which verify finds whole.
            assert!(state.batch("a1", batch(&id, 2, 2_000)).unwrap());
            assert!(agent_rows(&state).is_empty());
            assert!(matches!(
                state.done("a1", &done(&id, u64::MAX, 0)),
                Err(StateError::BadBatch { .. })
            ));
            state.done("a1", &done(&id, 2, 0)).unwrap();
            let rows = agent_rows(&state);
            assert_eq!(rows.len(), 1, "{rows:?}");
            let r = &rows[0];
            assert_eq!(
                (r.campaign_done, r.last_seq, r.records, r.batches),
                (1, 2, 2, 2)
            );
            assert_eq!((r.version.as_str(), r.complete), ("t", false));
            assert!(crate::clickhouse::query::not_verified(r, 2).is_empty());
            // The same notice again changes nothing; the summary stays final.
            state.done("a1", &done(&id, 2, 0)).unwrap();
            assert!(agent_rows(&state).is_empty());
            let s = state.summary(&id).unwrap();
            assert!(!s.complete && !s.agents[0].complete);
            assert_eq!(
                (s.agents[0].records, s.agents[0].delivery.last_seq),
                (1, None)
            );
            id
        };
        let rec = open().record(&id).unwrap();
        assert_eq!(rec.agents["a1"].last_seq, Some(2));
        assert!(!rec.summary.as_ref().unwrap().complete);

        // A campaign an earlier process finished: the notice updates its record and row too.
        let state = State::with_store_events();
        state.with_state_dir(open()).unwrap();
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        assert!(matches!(
            state.done("a1", &done(&id, u64::MAX, 0)),
            Err(StateError::BadBatch { .. })
        ));
        assert!(matches!(
            state.done("a9", &done(&id, 2, 0)),
            Err(StateError::BadBatch { .. })
        ));
        assert!(matches!(
            state.done("a1", &done("nope", 2, 0)),
            Err(StateError::UnknownCampaign(_))
        ));
        state.done("a1", &done(&id, 2, 0)).unwrap();
        assert!(agent_rows(&state).is_empty(), "nothing new");
        state.done("a1", &done(&id, 2, 3)).unwrap();
        let rows = agent_rows(&state);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            (rows[0].campaign_done, rows[0].last_seq, rows[0].skipped),
            (1, 2, 3)
        );
        drop(state);
        let rec = open().record(&id).unwrap();
        assert_eq!(rec.agents["a1"].skipped, 3);
        assert!(!rec.summary.unwrap().complete);
    }

    #[tokio::test]
    async fn a_disconnect_republishes_only_the_agent_s_unfinished_campaigns() {
        let state = State::default();
        let s1 = state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        let id = finish_one_batch_campaign(&state);
        let mut finished = state.watch(&id).unwrap();
        finished.borrow_and_update();
        let s2 = state.connect(&hello("a2", "eu-west"), mpsc::channel(8).0);
        state.disconnect("a2", s2);
        state.disconnect("a1", s1);
        assert!(
            !finished.has_changed().unwrap(),
            "a finished campaign stays as it was"
        );
    }

    #[tokio::test]
    async fn a_stale_session_does_not_disconnect_the_new_one() {
        let state = State::default();
        let (tx1, _rx1) = mpsc::channel(8);
        let (tx2, _rx2) = mpsc::channel(8);
        let s1 = state.connect(&hello("a1", "us-east"), tx1);
        let _s2 = state.connect(&hello("a1", "us-east"), tx2);
        state.disconnect("a1", s1);
        assert!(state.agents()[0].connected);
    }

    #[tokio::test]
    async fn a_campaign_past_its_deadline_finishes_with_what_arrived() {
        let state = State::default();
        let (tx1, _rx1) = mpsc::channel(8);
        let (tx2, _rx2) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx1);
        state.connect(&hello("a2", "us-east"), tx2);
        let l = state.launch(&plan().to_json(), 0).unwrap();
        assert!(state.batch("a1", batch(&l.campaign_id, 1, 1_000)).unwrap());
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: l.campaign_id.clone(),
                    skipped: 0,
                    last_seq: 1,
                    probes: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        // a2 died without a word: nothing happens before the deadline…
        assert!(state.expire(l.start_at_unix_us + 1_000_000).is_empty());
        assert!(state.summary(&l.campaign_id).is_none());
        // …and after it the campaign finishes, marked incomplete.
        let deadline =
            l.start_at_unix_us + plan().span_us() as i64 + 120_000_000 + DEADLINE_GRACE_US;
        assert_eq!(state.expire(deadline + 1), vec![l.campaign_id.clone()]);
        let s = state.summary(&l.campaign_id).unwrap();
        assert!(!s.complete);
        assert!(
            s.agents
                .iter()
                .any(|a| a.agent_id == "a2" && !a.complete && a.records == 0)
        );
        assert_eq!(s.cell("us-east", "p", "s").unwrap().samples, 1);
        // Its matrix says INCOMPLETE: the CLI's `ui::matrix` tests.
        assert!(state.watch(&l.campaign_id).unwrap().borrow().finished);
    }

    fn plan_of(msg: Option<Result<pb::CoordinatorMessage, Status>>) -> pb::PlanPush {
        match msg.expect("a message").expect("ok").kind {
            Some(pb::coordinator_message::Kind::Plan(p)) => p,
            other => panic!("expected a plan, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_restarted_agent_gets_the_plan_again_numbering_past_what_arrived() {
        let state = State::default();
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert_eq!(plan_of(rx.recv().await).next_seq, 1);
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        assert!(state.batch("a1", batch(&id, 2, 1_000)).unwrap());
        // A second process with the same id while the first is alive is refused, in the same
        // region or another.
        let e = state.admit(&hello("a1", "us-east")).unwrap_err();
        assert!(e.contains("in use by a live agent"), "{e}");
        let e = state.admit(&hello("a1", "eu-west")).unwrap_err();
        assert!(e.contains("region \"us-east\""), "{e}");
        // The process restarts while its old session looks open but has gone silent (no RST):
        // its new session gets the plan with next_seq 3, and the old session is told it was
        // replaced.
        state
            .lock()
            .agents
            .get_mut("a1")
            .unwrap()
            .info
            .last_seen_coord_unix_us -= 60_000_000;
        assert_eq!(state.admit(&hello("a1", "us-east")), Ok(()));
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx2);
        match rx.recv().await.unwrap().unwrap().kind {
            Some(pb::coordinator_message::Kind::Refused(r)) => {
                assert!(r.reason.contains("replaced"))
            }
            other => panic!("expected refused, got {other:?}"),
        }
        let again = plan_of(rx2.recv().await);
        assert_eq!(
            (again.campaign_id.as_str(), again.next_seq),
            (id.as_str(), 3)
        );
        // It skipped the rounds that had passed: finished, but not complete.
        assert!(state.batch("a1", batch(&id, 3, 1_000)).unwrap());
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 3,
                    probes: 1,
                    skipped: 4,
                    ..Default::default()
                },
            )
            .unwrap();
        let s = state.summary(&id).unwrap();
        assert!(!s.complete);
        assert_eq!((s.agents[0].records, s.agents[0].skipped), (3, 4));
    }

    #[tokio::test]
    async fn a_killed_agent_resending_its_spool_and_numbering_past_it_completes() {
        let state = State::default();
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let _ = rx.recv().await;
        // Batches 1-2 arrived; 3 arrived but its ack was lost; 4 never arrived. The agent is
        // killed with 3 and 4 in its spool.
        for seq in 1..=3 {
            assert!(state.batch("a1", batch(&id, seq, 1_000)).unwrap());
        }
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx2);
        assert_eq!(plan_of(rx2.recv().await).next_seq, 4);
        // The restarted agent resends 3 and 4 and numbers new batches after its spool
        // (max(next_seq 4, spooled 4 + 1) = 5).
        assert!(
            !state.batch("a1", batch(&id, 3, 1_000)).unwrap(),
            "counted once"
        );
        assert!(state.batch("a1", batch(&id, 4, 1_000)).unwrap());
        assert!(state.batch("a1", batch(&id, 5, 1_000)).unwrap());
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 5,
                    probes: 1,
                    skipped: 0,
                    ..Default::default()
                },
            )
            .unwrap();
        let s = state
            .summary(&id)
            .expect("every seq 1..=5 arrived: finished");
        assert!(s.complete);
        assert_eq!((s.agents[0].records, s.agents[0].batches), (5, 5));
    }

    /// What the batch path of `service.rs` does: append to the campaign's batch log, then
    /// count.
    fn logged_batch(state: &State, agent: &str, mut b: pb::ResultBatch) -> bool {
        if state.check(agent, &mut b).unwrap().is_some() {
            let log = state.batch_log(&b.campaign_id).expect("a batch log");
            log.append(agent, "us-east", &b).unwrap();
        }
        state.batch(agent, b).unwrap()
    }

    /// A refused batch is never resent (the agent quarantined it): a coordinator restarted
    /// from its state directory must still count it as accounted for, or the campaign would
    /// wait for it until its deadline.
    #[tokio::test]
    async fn refused_batches_survive_a_restart_and_do_not_hold_up_the_campaign() {
        let tmp = tempfile::tempdir().unwrap();
        let open = || StateDir::open(tmp.path()).unwrap();
        let id = {
            let state = State::default();
            state.with_state_dir(open()).unwrap();
            state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
            let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
            assert_eq!(state.reject("a1", &id, 1, "http_status 799"), 1);
            id
            // Killed here.
        };
        let state = State::default();
        assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        assert!(logged_batch(&state, "a1", batch(&id, 2, 2_000)));
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 2,
                    ..Default::default()
                },
            )
            .unwrap();
        let s = state.summary(&id).expect("finished: seq 1 was refused");
        let d = &s.agents[0].delivery;
        assert!(!s.agents[0].complete);
        assert_eq!((d.batches_rejected, d.rejected[0].seq), (1, 1));
        assert_eq!(d.rejected[0].reason, "http_status 799");
    }

    #[tokio::test]
    async fn a_restarted_coordinator_replays_its_campaigns_and_counts_resends_once() {
        let tmp = tempfile::tempdir().unwrap();
        let open = || StateDir::open(tmp.path()).unwrap();
        let mut p = plan();
        p.rounds.count = 3;
        let (id, before) = {
            let state = State::default();
            assert!(state.with_state_dir(open()).unwrap().is_empty());
            let (tx, _rx) = mpsc::channel(8);
            state.connect(&hello("a1", "us-east"), tx);
            state.connect(&hello("a2", "us-east"), mpsc::channel(8).0);
            let l = state.launch(&p.to_json(), 0).unwrap();
            assert!(logged_batch(&state, "a1", batch(&l.campaign_id, 1, 1_000)));
            assert!(logged_batch(&state, "a1", batch(&l.campaign_id, 2, 2_000)));
            assert!(logged_batch(&state, "a2", batch(&l.campaign_id, 1, 3_000)));
            let done = |last_seq| pb::CampaignDone {
                campaign_id: l.campaign_id.clone(),
                last_seq,
                probes: 1,
                skipped: 0,
                started_coord_unix_us: 1_700_000_000_000_420,
                clock_offset_us: -31,
                clock_uncertainty_us: 50,
                ..Default::default()
            };
            state.done("a2", &done(1)).unwrap();
            let before = state.watch(&l.campaign_id).unwrap().borrow().clone();
            (l.campaign_id, before)
            // Killed here: nothing but the state directory survives.
        };
        let state = State::default();
        assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
        let after = state.watch(&id).unwrap().borrow().clone();
        assert_eq!(
            (after.probes_done, after.agents.len(), after.finished),
            (before.probes_done, 2, false)
        );
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        assert_eq!(
            plan_of(rx.recv().await).next_seq,
            3,
            "past every seq replayed"
        );
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&hello("a2", "us-east"), tx2);
        assert!(rx2.try_recv().is_err(), "a2 is done: no plan again");
        assert!(
            !logged_batch(&state, "a1", batch(&id, 2, 2_000)),
            "a resend counts once"
        );
        assert!(logged_batch(&state, "a1", batch(&id, 3, 4_000)));
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 3,
                    probes: 3,
                    skipped: 0,
                    started_coord_unix_us: 1_700_000_000_000_000,
                    clock_offset_us: 12,
                    clock_uncertainty_us: 20,
                    ..Default::default()
                },
            )
            .unwrap();
        let s = state.summary(&id).expect("finished after the restart");
        assert!(s.complete, "{s:?}");
        // a2's start facts came before the restart: kept in the state directory.
        let start = &s.start;
        assert_eq!(start.skew_us, Some(420));
        assert_eq!(start.clock_uncertainty_us, Some(70)); // 50 + 20: the two largest
        let a2 = &start.agents[1];
        assert_eq!(a2.agent_id, "a2");
        assert_eq!(a2.started_coord_unix_us, 1_700_000_000_000_420);
        assert_eq!(a2.clock_offset_us, -31);
        let cell = s.cell("us-east", "p", "s").unwrap();
        assert_eq!((cell.attempts, cell.samples), (4, 4));
        let ttft = cell.ttft.unwrap();
        assert!((ttft.p99_ms - 4.0).abs() < 0.01, "{ttft:?}");
        drop(state);

        // Another restart: the finished campaign is not loaded, but watch has its summary.
        let state = State::default();
        assert!(state.with_state_dir(open()).unwrap().is_empty());
        let p = state.watch(&id).unwrap().borrow().clone();
        assert!(p.finished);
        let again: Summary = serde_json::from_str(&p.summary_json).unwrap();
        assert_eq!(again, s);
        // Progress in slots, as the live campaign counted them (each test record is a
        // finished first turn): a1 3, a2 1.
        assert_eq!((p.probes_done, p.cancelled), (4, false));
        let slots: Vec<(String, u64)> = p
            .agents
            .iter()
            .map(|a| (a.agent_id.clone(), a.probes_done))
            .collect();
        assert_eq!(slots, vec![("a1".into(), 3), ("a2".into(), 1)]);
        // A late resend of it is recognised (stored and acked by the service), for its agents
        // only.
        assert_eq!(
            state.finished_earlier(&id, "a1").as_deref(),
            Some("us-east")
        );
        assert_eq!(state.finished_earlier(&id, "a9"), None);
        assert_eq!(state.finished_earlier("nope", "a1"), None);
        assert!(matches!(
            state.watch("nope"),
            Err(StateError::UnknownCampaign(_))
        ));
        // And a new launch is not refused as busy.
        state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
        assert!(state.launch(&plan().to_json(), 0).is_ok());
    }

    #[tokio::test]
    async fn cancel_pushes_to_agents_and_the_summary_says_cancelled() {
        let state = State::default();
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        assert!(matches!(
            state.cancel("nope"),
            Err(StateError::UnknownCampaign(_))
        ));
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let _ = plan_of(rx.recv().await);
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        assert_eq!(state.cancel(&id).unwrap(), vec!["a1".to_string()]);
        match rx.recv().await.unwrap().unwrap().kind {
            Some(pb::coordinator_message::Kind::Cancel(c)) => assert_eq!(c.campaign_id, id),
            other => panic!("expected a cancel, got {other:?}"),
        }
        let p = state.watch(&id).unwrap().borrow().clone();
        assert!(p.cancelled && !p.finished);
        assert_eq!(p.agents[0].status, "cancelling");
        // A reconnecting agent gets the plan, then the cancel.
        let (tx2, mut rx2) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx2);
        let _ = plan_of(rx2.recv().await);
        assert!(matches!(
            rx2.recv().await.unwrap().unwrap().kind,
            Some(pb::coordinator_message::Kind::Cancel(_))
        ));
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 1,
                    probes: 1,
                    skipped: 0,
                    ..Default::default()
                },
            )
            .unwrap();
        let p = state.watch(&id).unwrap().borrow().clone();
        assert!(p.finished && p.cancelled);
        assert_eq!(p.agents[0].status, "cancelled");
        let v: serde_json::Value = serde_json::from_str(&p.summary_json).unwrap();
        assert_eq!(v["cancelled"], serde_json::Value::Bool(true));
        assert_eq!(state.summary(&id).unwrap().agents[0].records, 1);
        let err = state.cancel(&id).unwrap_err();
        assert!(matches!(err, StateError::Finished { .. }), "{err}");
        assert!(
            err.to_string().contains("already finished (cancelled)"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_cancelled_campaign_finishes_soon_even_without_its_agents() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let mut p = plan();
        p.rounds.count = 1000;
        let id = state.launch(&p.to_json(), 0).unwrap().campaign_id;
        state.cancel(&id).unwrap();
        assert!(
            state
                .expire(now_unix_us() + CANCEL_DEADLINE_US / 2)
                .is_empty()
        );
        assert_eq!(
            state.expire(now_unix_us() + CANCEL_DEADLINE_US + 1_000_000),
            vec![id.clone()]
        );
        assert!(state.watch(&id).unwrap().borrow().cancelled);
    }

    #[tokio::test]
    async fn a_cancel_survives_a_coordinator_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let open = || StateDir::open(tmp.path()).unwrap();
        let mut p = plan();
        p.rounds.count = 1000;
        let id = {
            let state = State::default();
            state.with_state_dir(open()).unwrap();
            state.connect(&hello("a1", "us-east"), mpsc::channel(8).0);
            let id = state.launch(&p.to_json(), 0).unwrap().campaign_id;
            state.cancel(&id).unwrap();
            id
            // Killed here.
        };
        let state = State::default();
        assert_eq!(state.with_state_dir(open()).unwrap(), vec![id.clone()]);
        assert!(state.is_cancelled(&id));
        // The reconnecting agent gets the plan, then the cancel.
        let (tx, mut rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let kinds: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| m.unwrap().kind)
            .collect();
        assert!(matches!(
            kinds.as_slice(),
            [
                Some(pb::coordinator_message::Kind::Plan(_)),
                Some(pb::coordinator_message::Kind::Cancel(_))
            ]
        ));
        state.expire(now_unix_us() + CANCEL_DEADLINE_US + 1_000_000);
        let s = state.summary(&id).expect("finished by the cancel deadline");
        assert!(s.cancelled && !s.complete);
        // Its matrix says CANCELLED: the CLI's `ui::matrix` tests.
    }

    #[tokio::test]
    async fn silent_agents_are_marked_disconnected_and_revive_when_heard() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        let s = state.connect(&hello("a1", "us-east"), tx);
        state.heartbeat(
            "a1",
            s,
            &pb::Heartbeat {
                in_flight: 3,
                interval_ms: 1_000,
                ..Default::default()
            },
        );
        let a = &state.agents()[0];
        assert_eq!((a.in_flight, a.heartbeat_interval_ms), (3, 1_000));
        assert!(a.last_heartbeat_coord_unix_us > 0 && a.connected);
        let now = now_unix_us();
        assert!(state.check_liveness(now + 2_500_000).is_empty());
        assert_eq!(
            state.check_liveness(now + 3_500_000),
            vec!["a1".to_string()]
        );
        let a = &state.agents()[0];
        assert!(!a.connected);
        assert!(a.disconnect_reason.contains("no heartbeat"), "{a:?}");
        assert!(a.disconnected_since_coord_unix_us > 0);
        assert_eq!(a.in_flight, 3, "the last count reported stays visible");
        // A stale session's word changes nothing; the current session's revives it.
        state.seen("a1", s + 7);
        assert!(!state.agents()[0].connected);
        state.seen("a1", s);
        assert!(state.agents()[0].connected);
        // A closed session says so.
        state.disconnect("a1", s);
        let a = &state.agents()[0];
        assert_eq!(a.disconnect_reason, "session closed");
    }

    #[tokio::test]
    async fn an_agent_runs_one_campaign_at_a_time() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let first = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        let err = state.launch(&plan().to_json(), 0).unwrap_err();
        assert!(
            matches!(&err, StateError::Busy { agent, campaign } if agent == "a1" && *campaign == first),
            "{err}"
        );
        state
            .done(
                "a1",
                &pb::CampaignDone {
                    campaign_id: first,
                    last_seq: 0,
                    probes: 0,
                    skipped: 0,
                    ..Default::default()
                },
            )
            .unwrap();
        assert!(state.launch(&plan().to_json(), 0).is_ok());
    }

    #[tokio::test]
    async fn absurd_heartbeat_values_are_ignored_and_a_disconnected_agent_keeps_no_key_names() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        let names: Vec<String> = (0..crate::intake::MAX_KEY_ENV_NAMES)
            .map(|i| format!("{i:0>128}"))
            .collect();
        let s = state.connect(
            &pb::AgentHello {
                key_env_names: names,
                key_env_reported: true,
                ..hello("a1", "us-east")
            },
            tx,
        );
        let sane = pb::Heartbeat {
            clock_offset_us: -40_000,
            clock_uncertainty_us: 300,
            in_flight: 3,
            batches_quarantined: 1,
            ..Default::default()
        };
        state.heartbeat("a1", s, &sane);
        state.heartbeat(
            "a1",
            s,
            &pb::Heartbeat {
                clock_offset_us: 1 << 62,
                clock_uncertainty_us: u64::MAX,
                in_flight: u32::MAX,
                batches_quarantined: u64::MAX,
                ..Default::default()
            },
        );
        let a = &state.agents()[0];
        assert_eq!(
            (
                a.clock_offset_us,
                a.clock_uncertainty_us,
                a.in_flight,
                a.batches_quarantined
            ),
            (-40_000, 300, 3, 1),
            "the last sane values stay shown"
        );
        assert!(state.lock().agents["a1"].key_env.is_some());
        state.disconnect("a1", s);
        assert!(
            state.lock().agents["a1"].key_env.is_none(),
            "its hello's key names go with its session"
        );
    }

    #[tokio::test]
    async fn a_done_notice_with_absurd_quarantine_counts_is_refused() {
        let state = State::default();
        let (tx, _rx) = mpsc::channel(8);
        state.connect(&hello("a1", "us-east"), tx);
        let id = state.launch(&plan().to_json(), 0).unwrap().campaign_id;
        assert!(state.batch("a1", batch(&id, 1, 1_000)).unwrap());
        for done in [
            pb::CampaignDone {
                records_quarantined: u64::MAX,
                ..Default::default()
            },
            pb::CampaignDone {
                histograms_quarantined: u64::MAX,
                ..Default::default()
            },
            pb::CampaignDone {
                quarantined_seqs: (1..5_000).collect(),
                ..Default::default()
            },
        ] {
            let done = pb::CampaignDone {
                campaign_id: id.clone(),
                last_seq: 1,
                ..done
            };
            let err = state.done("a1", &done).unwrap_err();
            assert!(matches!(err, StateError::BadBatch { .. }), "{err}");
            assert!(state.summary(&id).is_none(), "the notice is ignored");
        }
        let summary_of = |done: pb::CampaignDone| {
            state.done("a1", &done).unwrap();
            state.summary(&id).unwrap()
        };
        let s = summary_of(pb::CampaignDone {
            campaign_id: id.clone(),
            last_seq: 1,
            ..Default::default()
        });
        assert!(s.complete, "{s:?}");
    }
}
