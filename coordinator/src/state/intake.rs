//! The intake part of the state: a batch's acceptance into its campaign. A batch is looked
//! up and checked against the protocol's limits and its campaign's plan under the `core` lock
//! ([`crate::intake`] is the validation boundary), decoded without it, then merged into the
//! campaign's aggregate under it ([`State::merge`]); done notices and refused batches are
//! recorded here too.

use std::sync::Arc;

use latmesh_core::plan::Plan;
use latmesh_core::record::ProbeRecord;
use latmesh_core::wire;
use latmesh_proto::pb;

use super::campaigns::{Campaign, campaign_span_us};
use super::publish::{late_agent_row, publish};
use super::{Core, State, StateError};
use crate::spool::Spool;

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

/// [`State::check`] on a blocking thread, once one of the decode slots is free
/// ([`crate::intake::decode_slot`]; a session awaits its batch, so each session has one batch
/// in check at a time): the limits and the campaign are checked first, then histograms and
/// records decode, off the async runtime. Returns the result with the batch (as sanitized by
/// the check); `None` when the task failed (logged).
pub async fn check_off_runtime(
    state: &State,
    agent: &str,
    mut b: pb::ResultBatch,
) -> Option<(Result<Option<CheckedBatch>, StateError>, pb::ResultBatch)> {
    let _slot = crate::intake::decode_slot().await?;
    let (state, agent_id) = (state.clone(), agent.to_string());
    match tokio::task::spawn_blocking(move || (state.check(&agent_id, &mut b), b)).await {
        Ok(checked) => Some(checked),
        Err(e) => {
            tracing::error!(%agent, error = %e, "batch check failed; batch not acked");
            None
        }
    }
}

impl State {
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
            let core = self.core();
            let c = core
                .campaigns
                .by_id
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
        let mut core = self.core();
        let Core {
            agents, campaigns, ..
        } = &mut *core;
        let Some(c) = campaigns.by_id.get_mut(&b.campaign_id) else {
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
        {
            self.push_event(row);
        }
        self.enforce_budget(&mut core, &b.campaign_id);
        publish(&mut core, &b.campaign_id);
        true
    }

    /// The region of `agent_id` in campaign `campaign_id` when that campaign is not in memory
    /// but finished by an earlier coordinator process (its `campaign.json` in the state
    /// directory has a summary) and the agent was part of it: a late resend of such a
    /// campaign is stored (ClickHouse de-duplicates it) and acked, so it leaves the agent's
    /// spool, while the campaign's summary stays final.
    pub fn finished_earlier(&self, campaign_id: &str, agent_id: &str) -> Option<String> {
        if self.core().campaigns.by_id.contains_key(campaign_id) {
            return None;
        }
        let rec = self.dir().as_ref()?.record(campaign_id)?;
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
            .dir()
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
        self.dir().as_ref()?.log(campaign_id)
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
        let mut core = self.core();
        if !core.campaigns.by_id.contains_key(&done.campaign_id) {
            return self.done_after_restart(&core.agents, agent_id, done);
        }
        let Core {
            agents, campaigns, ..
        } = &mut *core;
        let c = campaigns
            .by_id
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
            self.persist_campaign(&done.campaign_id, c);
            if let Some(row) = late_agent_row(agents, c, agent_id) {
                tracing::info!(campaign = %done.campaign_id, agent = %agent_id,
                    "late done notice of finished campaign {} from agent {agent_id}: delivery facts updated",
                    done.campaign_id);
                self.push_event(row);
            }
        }
        publish(&mut core, &done.campaign_id);
        Ok(())
    }

    /// Notes that batch `seq` of `agent_id` in `campaign_id` was refused as malformed for
    /// `reason` ([`crate::delivery`]): it is never stored, the agent quarantines it, and the
    /// campaign does not wait for it (the agent's summary says it is not complete). Returns
    /// how many of its batches this campaign refused so far (0 when the campaign or the agent
    /// is not known, or the seq was stored).
    pub fn reject(&self, agent_id: &str, campaign_id: &str, seq: u64, reason: &str) -> u64 {
        let mut core = self.core();
        let Some(c) = core.campaigns.by_id.get_mut(campaign_id) else {
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
                self.persist_campaign(campaign_id, c);
            }
            true
        } else {
            false
        };
        let n = c.agents.get(agent_id).map_or(0, |a| a.rejections.batches());
        if refused {
            publish(&mut core, campaign_id);
        }
        n
    }
}

/// [`crate::intake::check_done`], and `last_seq` within [`crate::intake::SEQ_WINDOW`] of the
/// highest seq received from the agent.
pub(super) fn check_done_notice(
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

/// Decodes a batch's records and histograms.
pub(super) fn decode_batch(
    agent_id: &str,
    batch: &pb::ResultBatch,
) -> Result<DecodedBatch, StateError> {
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

/// A batch's records and histograms, decoded.
pub(super) type DecodedBatch = (
    Vec<ProbeRecord>,
    Vec<(
        latmesh_core::hist::HistKey,
        latmesh_core::hist_sparse::SparseHistogram,
    )>,
);

/// Counts a batch into its campaign; `false` when its (agent, seq) was counted before.
pub(super) fn merge_into(c: &mut Campaign, b: &CheckedBatch) -> bool {
    let Some(ca) = c.agents.get_mut(&b.agent_id) else {
        return false;
    };
    if !ca.seqs.insert(b.seq) {
        return false;
    }
    ca.records += b.records.len() as u64;
    ca.slots_done += b.records.iter().filter(|r| r.ends_planned_slot()).count() as u64;
    // Copied first when a summary being built shares it.
    let agg = Arc::make_mut(&mut c.agg);
    for r in &b.records {
        agg.add_record(&b.region, r);
        c.sends.add(&b.agent_id, r);
    }
    for (key, h) in &b.histograms {
        agg.add_sparse_histogram(&b.region, key.clone(), h);
    }
    c.guard.add(&c.plan, &b.records);
    true
}
