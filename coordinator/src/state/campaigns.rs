//! The campaigns part of the state: running (and finished, in this process) campaigns, their
//! plans and lifecycle: launch to the connected agents of the plan's regions, cancel (by
//! `latmesh campaign cancel` or the budget guard), the deadline after which a campaign
//! finishes with what arrived. Under the `core` lock (see [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use latmesh_core::plan::Plan;
use latmesh_proto::pb;
use tokio::sync::watch;

use super::publish::{Finishing, publish};
use super::{Core, State, StateError, StoreEvent, now_unix_us};
use crate::budget::{Caps, Guard};
use latmesh_results::aggregate::Aggregate;
use latmesh_results::summary::Summary;

/// Extra time after a plan's last probe could have ended before its campaign is finished
/// without the missing results, µs.
pub const DEADLINE_GRACE_US: i64 = 30_000_000;

/// A cancelled campaign finishes at the latest this long after the cancel (agents that do
/// not report by then are marked as falling short), µs.
pub const CANCEL_DEADLINE_US: i64 = 30_000_000;

/// An agent's part of a campaign.
#[derive(Debug, Default)]
pub(super) struct CampaignAgent {
    pub(super) region: String,
    pub(super) seqs: BTreeSet<u64>,
    pub(super) last_seq: Option<u64>,
    pub(super) records: u64,
    /// Slots of the plan finished (first turns whose final attempt arrived), the unit of
    /// progress: retries and later turns are records, not slots.
    pub(super) slots_done: u64,
    pub(super) skipped: u64,
    /// From the done notice: (started on the coordinator's clock UTC µs, 0 if never; clock
    /// offset µs; its uncertainty µs).
    pub(super) start: (i64, i64, u64),
    /// Batches refused as malformed, and what the agent quarantined ([`crate::delivery`]).
    pub(super) rejections: crate::delivery::Rejections,
}

impl CampaignAgent {
    /// Every batch the agent announced is accounted for: stored, or refused (never coming).
    pub(super) fn complete(&self) -> bool {
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

/// One campaign.
#[derive(Debug)]
pub(super) struct Campaign {
    pub(super) plan: Arc<Plan>,
    /// `progress::planned_requests_per_agent(plan)`, counted once (it generates every open-loop
    /// arrival).
    pub(super) probes_per_agent: u64,
    pub(super) plan_json: String,
    pub(super) plan_hash: String,
    pub(super) launched_at_unix_us: i64,
    pub(super) start_at_unix_us: i64,
    pub(super) agents: BTreeMap<String, CampaignAgent>,
    /// Shared with a summary being built (copied on the next merge while it is).
    pub(super) agg: Arc<Aggregate>,
    /// First-attempt send times of the rounds' slots per agent (achieved synchronization).
    pub(super) sends: latmesh_results::sync::SlotSends,
    pub(super) progress: watch::Sender<pb::Progress>,
    /// `Progress.live`, recomputed from `agg` at most once a second.
    pub(super) live: crate::progress::LiveCache,
    /// The final summary, once built.
    pub(super) summary: Option<Summary>,
    /// `summary` as JSON (serialized once, outside the lock); empty until then.
    pub(super) summary_json: String,
    /// Finished, its summary being built without the lock ([`super::publish`]).
    pub(super) finishing: Option<Finishing>,
    /// After this (coordinator clock, UTC µs) the campaign finishes with what arrived.
    pub(super) deadline_unix_us: i64,
    pub(super) expired: bool,
    /// When `latmesh campaign cancel` came (coordinator clock, UTC µs); `None`: not cancelled.
    pub(super) cancelled_at_us: Option<i64>,
    /// Budget guard: caps, what the records used, and the reason once it stopped the campaign.
    pub(super) guard: Guard,
    /// Launched with `--allow-missing-keys`: an agent rejoining it without a provider's API
    /// key variable still gets the plan.
    pub(super) allow_missing_keys: bool,
}

impl Campaign {
    /// A campaign of `plan` with no agent facts yet (a launch's, or one read back from its
    /// record before its batch log is replayed).
    pub(super) fn new(
        campaign_id: &str,
        plan: Plan,
        plan_json: String,
        plan_hash: String,
        agents: BTreeMap<String, CampaignAgent>,
        guard: Guard,
    ) -> Campaign {
        Campaign {
            probes_per_agent: crate::progress::planned_requests_per_agent(&plan),
            agg: Arc::new(Aggregate::for_plan(&plan)),
            plan: Arc::new(plan),
            plan_json,
            plan_hash,
            launched_at_unix_us: 0,
            start_at_unix_us: 0,
            agents,
            sends: Default::default(),
            progress: watch::channel(pb::Progress {
                campaign_id: campaign_id.to_string(),
                ..Default::default()
            })
            .0,
            live: Default::default(),
            summary: None,
            summary_json: String::new(),
            finishing: None,
            deadline_unix_us: 0,
            expired: false,
            cancelled_at_us: None,
            guard,
            allow_missing_keys: false,
        }
    }

    /// Finished: its summary is built, or being built.
    pub(super) fn is_finished(&self) -> bool {
        self.summary.is_some() || self.finishing.is_some()
    }

    /// Whether its summary says (or will say) complete.
    fn complete(&self) -> bool {
        match (&self.summary, &self.finishing) {
            (Some(s), _) => s.complete,
            (None, Some(f)) => f.complete,
            (None, None) => false,
        }
    }
}

/// The campaigns, by id.
#[derive(Debug, Default)]
pub(super) struct Campaigns {
    /// By campaign id.
    pub(super) by_id: BTreeMap<String, Campaign>,
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
    /// Campaigns launched and not finished (the coordinator's `/metrics`).
    pub fn running_campaigns(&self) -> usize {
        let core = self.core();
        core.campaigns
            .by_id
            .values()
            .filter(|c| !c.is_finished())
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
    /// instead, see [`crate::schedule`]), and it gets this run's salt of generated prompts
    /// ([`Plan::stamp_text_salt`]).
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
        let mut core = self.core();
        if let Some(id) = &opts.campaign_id
            && core.campaigns.by_id.contains_key(id)
        {
            return Err(StateError::BadPlan(format!("campaign id {id:?} is taken")));
        }
        let mut chosen: Vec<(String, String)> = Vec::new();
        for region in &plan.regions {
            let found: Vec<_> = core
                .agents
                .by_id
                .values()
                .filter(|a| a.info.connected && &a.info.region == region)
                .map(|a| (a.info.agent_id.clone(), region.clone()))
                .collect();
            if found.is_empty() {
                let connected: BTreeSet<&str> = core
                    .agents
                    .by_id
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
            let busy = core.campaigns.by_id.iter().find(|(_, c)| {
                !c.is_finished() && c.agents.get(agent).is_some_and(|a| !a.complete())
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
                let key_env = core
                    .agents
                    .by_id
                    .get(agent)
                    .and_then(|a| a.key_env.as_ref());
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
        // Each run draws new words for its generated prompts (unless a scenario reuses
        // them): stamped here, so every agent of the run gets the same salt.
        plan.stamp_text_salt();
        let launched_at_unix_us = now_unix_us();
        let start_at_unix_us = launched_at_unix_us + start_delay_us;
        let plan_json = plan.to_json();
        let plan_hash = plan.hash();
        let deadline_unix_us = start_at_unix_us + plan_span_us(&plan) + DEADLINE_GRACE_US;
        let agents = chosen
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
            .collect();
        let campaign = Campaign {
            launched_at_unix_us,
            start_at_unix_us,
            deadline_unix_us,
            allow_missing_keys: opts.allow_missing_keys,
            ..Campaign::new(
                &campaign_id,
                plan,
                plan_json,
                plan_hash.clone(),
                agents,
                Guard::new(opts.caps.clone()),
            )
        };
        // Durable before any agent runs it: a restarted coordinator knows every campaign an
        // agent may send batches for.
        if let Some(persist) = self.dir().as_mut() {
            persist
                .create(&super::restore::record_of(&campaign_id, &campaign))
                .map_err(|e| StateError::Storage(format!("{e:#}")))?;
        }
        let msg = plan_message(&campaign_id, &campaign, 1);
        for (id, _) in &chosen {
            if let Some(tx) = core.agents.by_id.get(id).and_then(|a| a.tx.as_ref()) {
                let _ = tx.try_send(Ok(msg.clone()));
            }
        }
        self.push_event(StoreEvent::Launched {
            campaign_id: campaign_id.clone(),
            plan: Box::new(Plan::clone(&campaign.plan)),
            launched_at_unix_us,
            start_at_unix_us,
        });
        core.campaigns.by_id.insert(campaign_id.clone(), campaign);
        publish(&mut core, &campaign_id);
        Ok(Launched {
            campaign_id,
            plan_hash,
            start_at_unix_us,
            agent_ids: chosen.into_iter().map(|(id, _)| id).collect(),
            series: false,
            warnings,
        })
    }

    /// Finishes every unfinished campaign whose deadline is before `now_unix_us` with the
    /// results that arrived (its summary says `complete: false` and which agents fell short).
    /// Returns the ids of the campaigns it finished.
    pub fn expire(&self, now_unix_us: i64) -> Vec<String> {
        let mut core = self.core();
        let due: Vec<String> = core
            .campaigns
            .by_id
            .iter()
            .filter(|(_, c)| !c.is_finished() && now_unix_us > c.deadline_unix_us)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &due {
            if let Some(c) = core.campaigns.by_id.get_mut(id) {
                c.expired = true;
            }
            tracing::warn!(campaign = %id, "campaign deadline passed: finishing with the results that arrived");
            publish(&mut core, id);
        }
        due
    }

    /// Cancels an unfinished campaign: marks it cancelled, pushes a cancel to every agent of it
    /// that has not reported done (agents away get it when they reconnect), and brings its
    /// deadline to at most [`CANCEL_DEADLINE_US`] from now. Returns the agents it was pushed
    /// to. Cancelling again resends the cancel.
    ///
    /// # Errors
    /// [`StateError::UnknownCampaign`], or [`StateError::Finished`] for a campaign that has
    /// already finished.
    pub fn cancel(&self, campaign_id: &str) -> Result<Vec<String>, StateError> {
        self.cancel_in(&mut self.core(), campaign_id)
    }

    /// [`State::cancel`] under the `core` lock; the reason sent to the agents is the budget
    /// guard's when it stopped the campaign, else `cancelled by latmesh campaign cancel`.
    fn cancel_in(&self, core: &mut Core, campaign_id: &str) -> Result<Vec<String>, StateError> {
        let now = now_unix_us();
        let mut notified = Vec::new();
        let reason;
        {
            let Core {
                agents, campaigns, ..
            } = &mut *core;
            let c = campaigns
                .by_id
                .get_mut(campaign_id)
                .ok_or_else(|| StateError::UnknownCampaign(campaign_id.to_string()))?;
            if c.is_finished() {
                let how = if c.cancelled_at_us.is_some() {
                    "cancelled"
                } else if c.complete() {
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
            self.persist_campaign(campaign_id, c);
            for (id, a) in &c.agents {
                if a.last_seq.is_some() {
                    continue; // already reported done
                }
                if let Some(tx) = agents.by_id.get(id).and_then(|e| e.tx.as_ref())
                    && tx
                        .try_send(Ok(cancel_message(campaign_id, &reason)))
                        .is_ok()
                {
                    notified.push(id.clone());
                }
            }
        }
        tracing::warn!(campaign = %campaign_id, agents = ?notified, %reason, "campaign cancelled");
        publish(core, campaign_id);
        Ok(notified)
    }

    /// Cancels the unfinished campaign `campaign_id` when its budget guard passed a cap,
    /// through the ordinary cancel path with the guard's reason (once: a cancelled campaign
    /// stays as it is).
    pub(super) fn enforce_budget(&self, core: &mut Core, campaign_id: &str) {
        let Some(c) = core.campaigns.by_id.get_mut(campaign_id) else {
            return;
        };
        if c.is_finished() || c.cancelled_at_us.is_some() {
            return;
        }
        let Some(reason) = c.guard.passed() else {
            return;
        };
        tracing::warn!(campaign = %campaign_id, prompt_tokens = c.guard.spent.prompt_tokens,
            completion_tokens = c.guard.spent.completion_tokens, cost_usd = c.guard.spent.cost_usd,
            "{reason}: cancelling the campaign");
        c.guard.stopped = Some(reason);
        let _ = self.cancel_in(core, campaign_id);
    }

    /// Whether the campaign was cancelled.
    pub fn is_cancelled(&self, campaign_id: &str) -> bool {
        self.core()
            .campaigns
            .by_id
            .get(campaign_id)
            .is_some_and(|c| c.cancelled_at_us.is_some())
    }

    /// A campaign's state in a few words: from memory, else from the state directory (a
    /// campaign an earlier process finished); `None` when unknown.
    pub fn campaign_brief(&self, campaign_id: &str) -> Option<CampaignBrief> {
        {
            let core = self.core();
            if let Some(c) = core.campaigns.by_id.get(campaign_id) {
                return Some(CampaignBrief {
                    start_at_unix_us: c.start_at_unix_us,
                    finished: c.summary.is_some(),
                    complete: c.summary.as_ref().is_some_and(|s| s.complete),
                    cancelled: c.cancelled_at_us.is_some(),
                    stopped_by_budget: c.guard.stopped.is_some(),
                });
            }
        }
        let rec = self.dir().as_ref()?.record(campaign_id)?;
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
    pub fn report_data(
        &self,
        campaign_id: &str,
    ) -> Option<latmesh_results::report_data::ReportData> {
        let (summary, plan, agg) = {
            let core = self.core();
            let c = core.campaigns.by_id.get(campaign_id)?;
            (c.summary.clone()?, Plan::clone(&c.plan), c.agg.clone())
        };
        Some(latmesh_results::report_data::ReportData::from_aggregate(
            summary, plan, &agg,
        ))
    }

    /// The summary of a finished campaign.
    pub fn summary(&self, campaign_id: &str) -> Option<Summary> {
        self.core()
            .campaigns
            .by_id
            .get(campaign_id)
            .and_then(|c| c.summary.clone())
    }
}

/// Why a campaign was cancelled, as sent to its agents.
pub(super) fn cancel_reason(c: &Campaign) -> String {
    c.guard
        .stopped
        .clone()
        .unwrap_or_else(|| "cancelled by latmesh campaign cancel".into())
}

/// The plan push of campaign `c` for an agent whose next batch is `next_seq`.
pub(super) fn plan_message(
    campaign_id: &str,
    c: &Campaign,
    next_seq: u64,
) -> pb::CoordinatorMessage {
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

/// The cancel of campaign `campaign_id`, with `reason`.
pub(super) fn cancel_message(campaign_id: &str, reason: &str) -> pb::CoordinatorMessage {
    pb::CoordinatorMessage {
        kind: Some(pb::coordinator_message::Kind::Cancel(pb::CancelCampaign {
            campaign_id: campaign_id.to_string(),
            reason: reason.to_string(),
        })),
    }
}

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
pub(super) fn campaign_span_us(plan: &Plan) -> u64 {
    const DAY_US: u64 = 86_400_000_000;
    u64::try_from(plan_span_us(plan).saturating_add(DEADLINE_GRACE_US))
        .unwrap_or(0)
        .saturating_mul(2)
        .saturating_add(DAY_US)
}
