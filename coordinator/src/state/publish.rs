//! The publish part of the state: a campaign's progress (and, once it finished, its summary)
//! sent to its watchers, and the [`StoreEvent`]s queued for the sink.
//!
//! Progress is computed under the `core` lock ([`publish`]: agent states, counts, live cells
//! at most once a second). A campaign's summary is not: when [`publish`] finds a campaign
//! finished, it marks it *finishing* ([`Finishing`]) and snapshots what the summary needs
//! ([`SummaryJob`]: the aggregate is shared, not copied, and copied by the next merge only if
//! one comes meanwhile); the summary is built and serialized once the lock is released
//! (`core`'s guard does it when dropped, see [`super`]) and then installed under the lock,
//! which publishes the final progress, queues the `agents` rows and persists the record. A
//! finishing campaign counts as finished everywhere (nothing launches or cancels it again);
//! a late batch or done notice meanwhile gets its agent's row queued at installation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use latmesh_core::plan::Plan;
use latmesh_proto::pb;
use tokio::sync::watch;

use super::agents::Agents;
use super::campaigns::{Campaign, CampaignAgent};
use super::{Core, State, StateError, StoreEvent};
use crate::persist::CampaignRecord;
use latmesh_results::aggregate::Aggregate;
use latmesh_results::summary::{self, AgentSummary, Summary};

/// A campaign whose summary is being built without the lock.
#[derive(Debug)]
pub(super) struct Finishing {
    /// Whether its summary will say complete (every agent complete).
    pub(super) complete: bool,
    /// Agents whose facts changed meanwhile (a late batch, a done notice): their rows are
    /// queued again once the summary is installed.
    rows_changed: BTreeSet<String>,
}

/// What building a finished campaign's summary needs, snapshotted under the lock.
#[derive(Debug)]
pub(super) struct SummaryJob {
    campaign_id: String,
    plan: Arc<Plan>,
    start_at_unix_us: i64,
    agg: Arc<Aggregate>,
    agents: Vec<AgentSummary>,
    cancelled: bool,
    guard: crate::budget::BudgetSummary,
    starts: Vec<summary::AgentStart>,
    sends: latmesh_results::sync::SlotSends,
    /// Clock offsets of the agents that started, for the slot skew.
    offsets: BTreeMap<String, i64>,
}

impl SummaryJob {
    /// The summary and its JSON (the costly part: run without any lock).
    fn build(self) -> (Summary, String) {
        #[cfg(test)]
        tests::while_building();
        let mut summary = summary::build(
            &self.campaign_id,
            &self.plan,
            self.start_at_unix_us,
            &self.agg,
            self.agents,
        );
        summary.cancelled = self.cancelled;
        summary.guard = self.guard;
        summary.start = summary::StartSync::of(self.starts);
        summary.start.slot_skew = self.sends.skew(&self.offsets);
        let json = serde_json::to_string(&summary).expect("summaries serialize");
        (summary, json)
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
        *state.events() = Some(queue);
        state
    }

    /// The store events not handed out yet (none unless built with a queue). They stay queued
    /// (and persisted) until [`State::store_events_written`].
    pub fn drain_store_events(&self) -> Vec<StoreEvent> {
        self.events()
            .as_mut()
            .map(crate::events::EventQueue::take_new)
            .unwrap_or_default()
    }

    /// Campaign and agent events not stored yet (handed to the sink or not): 0 once the
    /// sink has written every `campaigns`/`agents` row so far.
    pub fn pending_store_events(&self) -> usize {
        self.events()
            .as_ref()
            .map_or(0, crate::events::EventQueue::len)
    }

    /// The first `n` events handed out are stored.
    pub fn store_events_written(&self, n: usize) {
        if let Some(q) = self.events().as_mut() {
            q.written(n);
        }
    }

    /// A receiver of the campaign's progress; the last value has `finished` and the summary.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`].
    pub fn watch(&self, campaign_id: &str) -> Result<watch::Receiver<pb::Progress>, StateError> {
        if let Some(c) = self.core().campaigns.by_id.get(campaign_id) {
            return Ok(c.progress.subscribe());
        }
        // A campaign an earlier process of this coordinator finished: its stored summary.
        let rec = self.dir().as_ref().and_then(|p| p.record(campaign_id));
        let finished = rec.and_then(|r| Some(finished_progress(&r, r.summary.as_ref()?)));
        match finished {
            Some(progress) => Ok(watch::channel(progress).1),
            None => Err(StateError::UnknownCampaign(campaign_id.to_string())),
        }
    }

    /// Builds the summaries of `jobs` (without any lock) and installs each.
    pub(super) fn finish(&self, jobs: Vec<SummaryJob>) {
        for job in jobs {
            let campaign_id = job.campaign_id.clone();
            let (summary, json) = job.build();
            self.install(&campaign_id, summary, json);
        }
    }

    /// Installs a finishing campaign's summary: the `agents` rows queued (with the rows of
    /// agents whose facts changed since the snapshot), the record persisted after them (a
    /// coordinator killed in between finishes the campaign again on restart and queues the
    /// same rows again, stored once: they replace), the final progress published.
    fn install(&self, campaign_id: &str, summary: Summary, json: String) {
        let mut core = self.core();
        let Core {
            agents, campaigns, ..
        } = &mut *core;
        let Some(c) = campaigns.by_id.get_mut(campaign_id) else {
            return;
        };
        let Some(finishing) = c.finishing.take() else {
            return;
        };
        self.push_event(StoreEvent::Finished {
            campaign_id: campaign_id.to_string(),
            agents: summary
                .agents
                .iter()
                .map(|a| (a.clone(), agents.version(&a.agent_id)))
                .collect(),
        });
        c.summary = Some(summary);
        c.summary_json = json;
        self.persist_campaign(campaign_id, c);
        for agent_id in &finishing.rows_changed {
            if let Some(row) = late_agent_row(agents, c, agent_id) {
                self.push_event(row);
            }
        }
        publish(&mut core, campaign_id);
    }
}

/// Recomputes the campaign's progress and publishes it to watchers. A campaign found
/// finished starts finishing instead: its summary is built once the lock is released, and
/// installing it publishes the final progress (see the module docs).
pub(super) fn publish(core: &mut Core, campaign_id: &str) {
    let Core {
        agents,
        campaigns,
        finishing,
    } = core;
    let Some(c) = campaigns.by_id.get_mut(campaign_id) else {
        return;
    };
    if c.finishing.is_some() {
        return;
    }
    let is_cancelled = c.cancelled_at_us.is_some();
    let per_agent = c.probes_per_agent;
    let agent_progress: Vec<pb::AgentProgress> = c
        .agents
        .iter()
        .map(|(id, a)| {
            let info = agents.by_id.get(id).map(|e| &e.info);
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
        let job = summary_job(agents, campaign_id, c);
        c.finishing = Some(Finishing {
            complete: job.agents.iter().all(|a| a.complete),
            rows_changed: BTreeSet::new(),
        });
        finishing.push(job);
        return;
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
        summary_json: c.summary_json.clone(),
        cancelled: is_cancelled,
        live,
        // Filled in by the watch stream (`service`), which knows the spool.
        ..Default::default()
    };
    c.progress.send_replace(progress);
}

/// What the summary of finished campaign `c` needs (its slot send times are moved out: no
/// one reads them after the summary).
fn summary_job(agents: &Agents, campaign_id: &str, c: &mut Campaign) -> SummaryJob {
    let agent_summaries = c
        .agents
        .iter()
        .map(|(id, a)| {
            let info = agents.by_id.get(id).map(|e| &e.info);
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
    let starts = c
        .agents
        .iter()
        .filter(|(_, a)| a.last_seq.is_some())
        .map(|(id, a)| summary::AgentStart {
            agent_id: id.clone(),
            region: a.region.clone(),
            started_coord_unix_us: a.start.0,
            clock_offset_us: a.start.1,
            clock_uncertainty_us: a.start.2,
        })
        .collect();
    let offsets = c
        .agents
        .iter()
        .filter(|(_, a)| a.start.0 != 0)
        .map(|(id, a)| (id.clone(), a.start.1))
        .collect();
    SummaryJob {
        campaign_id: campaign_id.to_string(),
        plan: c.plan.clone(),
        start_at_unix_us: c.start_at_unix_us,
        agg: c.agg.clone(),
        agents: agent_summaries,
        cancelled: c.cancelled_at_us.is_some(),
        guard: c.guard.summary(),
        starts,
        sends: std::mem::take(&mut c.sends),
        offsets,
    }
}

/// Publishes the progress of every unfinished campaign of `agent_ids`.
pub(super) fn publish_agents_campaigns(core: &mut Core, agent_ids: &[String]) {
    let ids: Vec<String> = core
        .campaigns
        .by_id
        .iter()
        .filter(|(_, c)| !c.is_finished() && agent_ids.iter().any(|a| c.agents.contains_key(a)))
        .map(|(id, _)| id.clone())
        .collect();
    for id in ids {
        publish(core, &id);
    }
}

/// The new version of `agent_id`'s `agents` row in finished campaign `c` (`None` while it
/// runs): its entry of the final summary with the facts that arrived since (late batches'
/// records, its done notice's delivery facts); `complete` stays as the summary says. While
/// the summary is being built, the agent is noted and its row queued at installation.
pub(super) fn late_agent_row(
    agents: &Agents,
    c: &mut Campaign,
    agent_id: &str,
) -> Option<StoreEvent> {
    if let Some(f) = c.finishing.as_mut() {
        f.rows_changed.insert(agent_id.to_string());
        return None;
    }
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
pub(super) fn agent_row_event(agents: &Agents, campaign_id: &str, row: AgentSummary) -> StoreEvent {
    let version = agents.version(&row.agent_id);
    StoreEvent::Finished {
        campaign_id: campaign_id.to_string(),
        agents: vec![(row, version)],
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

#[cfg(test)]
pub(super) mod tests {
    //! A hook into summary building, to show that no lock is held while it runs.

    use std::cell::RefCell;

    thread_local! {
        static HOOK: RefCell<Option<Box<dyn FnMut()>>> = const { RefCell::new(None) };
    }

    /// Unsets the hook when dropped.
    pub(crate) struct Unset;

    impl Drop for Unset {
        fn drop(&mut self) {
            HOOK.with(|h| h.borrow_mut().take());
        }
    }

    /// Runs `f` (on this thread) whenever a summary is built, until the returned value is
    /// dropped.
    pub(crate) fn on_building(f: impl FnMut() + 'static) -> Unset {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
        Unset
    }

    /// Called by the summary build.
    pub(super) fn while_building() {
        let hook = HOOK.with(|h| h.borrow_mut().take());
        if let Some(mut f) = hook {
            f();
            HOOK.with(|h| {
                h.borrow_mut().get_or_insert(f);
            });
        }
    }
}
