//! The restore part of the state: the state directory ([`crate::persist`]) under the `dir`
//! lock: campaign records written as campaigns change, a restarted coordinator's campaigns
//! rebuilt from their records and batch logs, facts of campaigns an earlier process finished,
//! and the series records of [`crate::schedule::Scheduler`].

use latmesh_core::plan::Plan;
use latmesh_proto::pb;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::agents::Agents;
use super::campaigns::{Campaign, CampaignAgent};
use super::intake::{CheckedBatch, check_done_notice, decode_batch, merge_into};
use super::publish::{agent_row_event, publish};
use super::{State, StateError};
use crate::budget::Guard;
use crate::persist::{AgentRecord, CampaignRecord, StateDir};

impl State {
    /// From now on campaigns persist in `dir` (see [`crate::persist`]); the unfinished
    /// campaigns found there are loaded first, each rebuilt by replaying its batch log
    /// (aggregate, per-agent seqs and record counts; `done` notices and deadlines from its
    /// record). Agents that reconnect get their plan again with `next_seq` past every seq
    /// replayed, and resent batches count once. A campaign whose deadline passed while the
    /// coordinator was down finishes at the next [`State::expire`]. Returns the ids loaded.
    /// The series in `dir` are loaded by [`crate::schedule::Scheduler::restore`].
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
            let agents = rec
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
                .collect();
            // Caps and stop reason from the record; the spending is rebuilt by the replay.
            let guard = Guard {
                spent: Default::default(),
                ..rec.budget
            };
            let mut c = Campaign {
                launched_at_unix_us: rec.launched_at_unix_us,
                start_at_unix_us: rec.start_at_unix_us,
                deadline_unix_us: rec.deadline_unix_us,
                expired: rec.expired,
                cancelled_at_us: rec.cancelled_at_us,
                allow_missing_keys: rec.allow_missing_keys,
                ..Campaign::new(&id, plan, rec.plan_json, rec.plan_hash, agents, guard)
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
        *self.dir() = Some(dir);
        let mut core = self.core();
        core.campaigns.by_id.extend(campaigns);
        for id in &loaded {
            // A cap passed by the replayed batches (a coordinator killed before it cancelled).
            self.enforce_budget(&mut core, id);
            publish(&mut core, id);
        }
        Ok(loaded)
    }

    /// Writes a series' record in the state directory (`DIR/series/<id>.json`, replaced
    /// atomically); nothing without one.
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn save_series<T: Serialize>(&self, series_id: &str, rec: &T) -> anyhow::Result<()> {
        match self.dir().as_ref() {
            Some(dir) => dir.save_series(series_id, rec),
            None => Ok(()),
        }
    }

    /// Every series record of the state directory (none without one; unreadable ones are
    /// logged and skipped).
    pub fn series_records<T: DeserializeOwned>(&self) -> Vec<T> {
        self.dir()
            .as_ref()
            .map(|d| d.series_records())
            .unwrap_or_default()
    }

    /// Writes the campaign's record when campaigns persist (errors are logged: the facts stay
    /// in memory and are written with the next change). Takes `dir` (after `core`).
    pub(super) fn persist_campaign(&self, campaign_id: &str, c: &Campaign) {
        if let Some(p) = self.dir().as_mut()
            && let Err(e) = p.save(&record_of(campaign_id, c))
        {
            tracing::error!(campaign = %campaign_id, error = format!("{e:#}"), "cannot persist the campaign's state");
        }
    }

    /// [`State::done`] for a campaign not in memory: one an earlier coordinator process
    /// finished (see [`State::finished_earlier`]) is checked against its stored plan and its
    /// agent's delivery facts are updated in its record and in a new version of its `agents`
    /// row (the summary stays final; records of late batches are not counted: they are not
    /// merged). Called under `core` (for `agents`); takes `dir`, then `events`.
    pub(super) fn done_after_restart(
        &self,
        agents: &Agents,
        agent_id: &str,
        done: &pb::CampaignDone,
    ) -> Result<(), StateError> {
        let row = {
            let mut dir = self.dir();
            match updated_row(dir.as_mut(), agent_id, done)? {
                Some(row) => row,
                None => return Ok(()),
            }
        };
        tracing::info!(campaign = %done.campaign_id, agent = %agent_id,
            "late done notice of finished campaign {} from agent {agent_id}: delivery facts updated",
            done.campaign_id);
        self.push_event(agent_row_event(agents, &done.campaign_id, row));
        Ok(())
    }
}

/// The record update of [`State::done_after_restart`]: the agent's new row (`None`: nothing
/// changed).
fn updated_row(
    persist: Option<&mut StateDir>,
    agent_id: &str,
    done: &pb::CampaignDone,
) -> Result<Option<latmesh_results::summary::AgentSummary>, StateError> {
    let unknown = || StateError::UnknownCampaign(done.campaign_id.clone());
    let persist = persist.ok_or_else(unknown)?;
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
        return Ok(None);
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
    Ok(Some(row))
}

/// The durable facts of a campaign.
pub(super) fn record_of(campaign_id: &str, c: &Campaign) -> CampaignRecord {
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
