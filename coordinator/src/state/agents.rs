//! The agents part of the state: agents known to the coordinator (at most
//! [`crate::intake::MAX_KNOWN_AGENTS`]), their sessions, what their hello said (region,
//! version, API key variable names) and their liveness (heartbeats, silence). Under the
//! `core` lock (see [`super`]).

use std::collections::{BTreeMap, BTreeSet};

use latmesh_proto::pb;
use tokio::sync::mpsc;
use tonic::Status;

use super::campaigns::{cancel_message, cancel_reason, plan_message};
use super::publish::publish_agents_campaigns;
use super::{Core, State, now_unix_us};

/// Outbound half of an agent's session stream.
pub type AgentTx = mpsc::Sender<Result<pb::CoordinatorMessage, Status>>;

/// Heartbeat period assumed until an agent's first heartbeat says its own, ms.
pub const DEFAULT_HEARTBEAT_MS: u32 = 5_000;
/// An agent silent for this many heartbeat periods is marked disconnected.
pub const SILENT_HEARTBEATS: i64 = 3;

/// A known agent.
#[derive(Debug)]
pub(super) struct AgentEntry {
    /// What the agent said in its hello, plus what the coordinator observed.
    pub(super) info: pb::AgentInfo,
    /// Session number, to tell a stale session's disconnect from the current one's.
    pub(super) session: u64,
    /// Its session's outbound stream; `None` once the session closed.
    pub(super) tx: Option<AgentTx>,
    /// Names of the API key variables the agent has (its hello's `key_env_names`); `None`:
    /// it did not report them (see [`crate::keys`]).
    pub(super) key_env: Option<BTreeSet<String>>,
}

/// The agents the coordinator knows, by id.
#[derive(Debug, Default)]
pub(super) struct Agents {
    /// By agent id.
    pub(super) by_id: BTreeMap<String, AgentEntry>,
    /// The last session number handed out.
    next_session: u64,
}

impl Agents {
    /// The version the agent said in its hello (empty when unknown).
    pub(super) fn version(&self, agent_id: &str) -> String {
        self.by_id
            .get(agent_id)
            .map(|e| e.info.version.clone())
            .unwrap_or_default()
    }
}

impl State {
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
        let mut core = self.core();
        let Some(old) = core.agents.by_id.get(&hello.agent_id) else {
            return make_room_for_an_agent(&mut core);
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
        let mut core = self.core();
        let Core {
            agents, campaigns, ..
        } = &mut *core;
        if let Some(old) = agents
            .by_id
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
        agents.next_session += 1;
        let session = agents.next_session;
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
        for (id, c) in &campaigns.by_id {
            if let Some(a) = c.agents.get(&hello.agent_id)
                && !c.is_finished()
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
        agents.by_id.insert(
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
        let mut core = self.core();
        if let Some(a) = core.agents.by_id.get_mut(agent_id)
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
        publish_agents_campaigns(&mut core, &[agent_id.to_string()]);
    }

    /// Records a heartbeat of the agent's session `session` (a stale session's is ignored):
    /// its clock estimate, attempts in flight and heartbeat period; a value beyond its bounds
    /// is ignored with a warning ([`crate::intake::heartbeat_facts`]).
    pub fn heartbeat(&self, agent_id: &str, session: u64, hb: &pb::Heartbeat) {
        let mut core = self.core();
        let now = now_unix_us();
        if let Some(a) = core.agents.by_id.get_mut(agent_id)
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
        revive(&mut core, agent_id, session);
    }

    /// Agents known to the coordinator, each with the unfinished campaign it runs (if any).
    pub fn agents(&self) -> Vec<pb::AgentInfo> {
        let core = self.core();
        core.agents
            .by_id
            .values()
            .map(|a| {
                let mut info = a.info.clone();
                info.campaign_id = core
                    .campaigns
                    .by_id
                    .iter()
                    .find(|(_, c)| {
                        !c.is_finished()
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

    /// Any message on the agent's session `session`: it is alive (an agent marked
    /// disconnected for its silence is connected again).
    pub fn seen(&self, agent_id: &str, session: u64) {
        let mut core = self.core();
        if let Some(a) = core.agents.by_id.get_mut(agent_id)
            && a.session == session
        {
            a.info.last_seen_coord_unix_us = now_unix_us();
        }
        revive(&mut core, agent_id, session);
    }

    /// Marks every connected agent not heard from for more than [`SILENT_HEARTBEATS`] of its
    /// heartbeat periods as disconnected (its session stays open: a word from it revives it).
    /// Returns the agents it marked.
    pub fn check_liveness(&self, now_unix_us: i64) -> Vec<String> {
        let mut core = self.core();
        let mut silent = Vec::new();
        for (id, a) in core.agents.by_id.iter_mut() {
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
            publish_agents_campaigns(&mut core, &silent);
        }
        silent
    }
}

/// Forgets one agent when [`crate::intake::MAX_KNOWN_AGENTS`] are known: the one disconnected
/// longest among those no unfinished campaign includes.
fn make_room_for_an_agent(core: &mut Core) -> Result<(), String> {
    let max = crate::intake::MAX_KNOWN_AGENTS;
    if core.agents.by_id.len() < max {
        return Ok(());
    }
    let busy = |id: &str| {
        core.campaigns
            .by_id
            .values()
            .any(|c| !c.is_finished() && c.agents.contains_key(id))
    };
    let oldest = core
        .agents
        .by_id
        .iter()
        .filter(|(id, a)| !a.info.connected && a.tx.is_none() && !busy(id))
        .min_by_key(|(_, a)| a.info.disconnected_since_coord_unix_us)
        .map(|(id, _)| id.clone());
    match oldest {
        Some(id) => {
            core.agents.by_id.remove(&id);
            tracing::info!(agent = %id, "forgot a disconnected agent: the coordinator keeps at most {max}");
            Ok(())
        }
        None => Err(format!(
            "the coordinator knows {max} agents, the most it keeps, all connected or in a running campaign"
        )),
    }
}

/// Marks the agent connected again when its current session `session` speaks after it was
/// marked disconnected for its silence.
fn revive(core: &mut Core, agent_id: &str, session: u64) {
    let Some(a) = core.agents.by_id.get_mut(agent_id) else {
        return;
    };
    if a.session != session || a.info.connected || a.tx.is_none() {
        return;
    }
    a.info.connected = true;
    a.info.disconnected_since_coord_unix_us = 0;
    a.info.disconnect_reason.clear();
    tracing::info!(agent = %agent_id, "silent agent heard from again: connected");
    publish_agents_campaigns(core, &[agent_id.to_string()]);
}
