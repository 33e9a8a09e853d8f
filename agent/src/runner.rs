//! Runs one campaign's plan: waits for the synchronized start, sends every probe of every
//! round at its intended time in the shared order, records histograms, and seals numbered
//! batches into the [`Outbox`].
//!
//! Probe `i` of round `r` is intended at `start + r × interval + i × gap` (see
//! `latmesh_core::plan`). Probes are spawned at their intended time and may overlap, so a slow
//! provider never delays the next probe; `sched_lag_us` records how late each one left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use latmesh_core::clock::ClockEstimate;
use latmesh_core::hist::HistogramSet;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::wire;
use latmesh_proto::pb;
use tokio::sync::{mpsc, watch};

use crate::outbox::Outbox;
use crate::probe::{ProbeRequest, Prober};

/// Wall clock now, UTC µs.
pub fn now_unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// One campaign to run.
#[derive(Clone, Debug)]
pub struct CampaignRun {
    /// Campaign id from the coordinator.
    pub campaign_id: String,
    /// The plan.
    pub plan: Arc<Plan>,
    /// Round 0 start on the coordinator's clock, UTC µs.
    pub start_at_coord_unix_us: i64,
    /// Seq of the first batch this run seals (the coordinator's `next_seq`: past every batch
    /// it already has from this agent, e.g. from before a restart).
    pub first_seq: u64,
}

/// Settings of the runner.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// How often a batch is sealed while probes complete.
    pub flush_interval: Duration,
    /// How long to wait for a first clock estimate before starting without one.
    pub clock_wait: Duration,
    /// A probe whose intended time passed by more than this is skipped, not sent late (it
    /// would no longer be synchronized with the other regions): e.g. the rounds already
    /// past when a restarted agent receives its plan again.
    pub max_lateness: Duration,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            flush_interval: Duration::from_millis(1000),
            clock_wait: Duration::from_secs(3),
            max_lateness: Duration::from_secs(1),
        }
    }
}

/// The local `Instant` at which `coord_unix_us` (coordinator clock) happens, given
/// `offset_us` = coordinator − agent.
pub fn local_instant_of(coord_unix_us: i64, offset_us: i64) -> Instant {
    let agent_unix_us = coord_unix_us - offset_us;
    let (now_i, now_w) = (Instant::now(), now_unix_us());
    let ahead_us = agent_unix_us - now_w;
    if ahead_us >= 0 {
        now_i + Duration::from_micros(ahead_us as u64)
    } else {
        now_i
            .checked_sub(Duration::from_micros(ahead_us.unsigned_abs()))
            .unwrap_or(now_i)
    }
}

/// Runs `run` to completion and returns the number of probes made.
pub async fn run_campaign(
    run: CampaignRun,
    prober: Arc<Prober>,
    mut clock: watch::Receiver<Option<ClockEstimate>>,
    outbox: Outbox,
    cfg: RunnerConfig,
) -> u64 {
    let _ = tokio::time::timeout(cfg.clock_wait, clock.wait_for(Option::is_some)).await;
    let estimate = clock.borrow().unwrap_or_default();
    if estimate.samples == 0 {
        tracing::warn!(campaign = %run.campaign_id, "starting without a clock estimate: start may be skewed");
    }
    let start = local_instant_of(run.start_at_coord_unix_us, estimate.offset_us);
    tracing::info!(
        campaign = %run.campaign_id,
        offset_us = estimate.offset_us,
        uncertainty_us = estimate.uncertainty_us,
        starts_in_ms = start.saturating_duration_since(Instant::now()).as_millis() as u64,
        "campaign received"
    );
    warn_missing_keys(&run.plan);

    let (tx, rx) = mpsc::channel::<(ProbeRecord, Vec<u64>)>(1024);
    let collector = tokio::spawn(collect(
        run.campaign_id.clone(),
        rx,
        outbox.clone(),
        cfg.flush_interval,
        run.first_seq.max(1),
    ));
    let plan = run.plan.clone();
    let mut skipped = 0u64;
    for round in 0..plan.rounds.count {
        for (slot, s) in plan.round_order(round).into_iter().enumerate() {
            let intended = start + Duration::from_micros(plan.probe_offset_us(round, slot));
            if Instant::now().saturating_duration_since(intended) > cfg.max_lateness {
                skipped += 1;
                continue;
            }
            tokio::time::sleep_until(intended.into()).await;
            let (plan, prober, tx) = (plan.clone(), prober.clone(), tx.clone());
            tokio::spawn(async move {
                let provider = &plan.providers[s.provider];
                let scenario = &plan.scenarios[s.scenario];
                let prompt = plan.prompt_for(s.scenario, round);
                let api_key = provider
                    .api_key_env
                    .as_ref()
                    .and_then(|name| std::env::var(name).ok());
                let req = ProbeRequest {
                    base_url: &provider.base_url,
                    model_id: &provider.model_id,
                    api_key: api_key.as_deref(),
                    messages: &prompt.messages,
                    stream: scenario.stream,
                    max_tokens: scenario.max_tokens,
                    temperature: scenario.temperature,
                    top_p: scenario.top_p,
                    timeouts: &scenario.timeouts,
                    probe_id: None,
                };
                let sched_lag_us = intended.elapsed().as_micros() as i64;
                let result = prober.probe(&req, false).await;
                let mut rec = result.record;
                rec.round = round;
                rec.slot = slot as u32;
                rec.provider = provider.name.clone();
                rec.scenario = scenario.name.clone();
                rec.prompt_id = prompt.id.clone();
                rec.attempt = 1;
                rec.sched_lag_us = sched_lag_us;
                let _ = tx.send((rec, result.itl_gaps_us)).await;
            });
        }
    }
    drop(tx);
    if skipped > 0 {
        tracing::warn!(campaign = %run.campaign_id, skipped, "probes skipped: their time had passed");
    }
    let (last_seq, probes) = collector.await.unwrap_or((0, 0));
    outbox.push_done(pb::CampaignDone {
        campaign_id: run.campaign_id.clone(),
        last_seq,
        probes,
        skipped,
    });
    tracing::info!(campaign = %run.campaign_id, probes, skipped, last_seq, "campaign finished");
    probes
}

fn warn_missing_keys(plan: &Plan) {
    for p in &plan.providers {
        if let Some(name) = &p.api_key_env
            && std::env::var_os(name).is_none()
        {
            tracing::warn!(provider = %p.name, env = %name, "API key variable is not set on this agent; requests go without Authorization");
        }
    }
}

/// Receives finished probes, records histograms, and seals a batch every `flush_interval`
/// (and at the end), numbering batches from `first_seq`. Returns (last seq, probes).
async fn collect(
    campaign_id: String,
    mut rx: mpsc::Receiver<(ProbeRecord, Vec<u64>)>,
    outbox: Outbox,
    flush_interval: Duration,
    first_seq: u64,
) -> (u64, u64) {
    let mut hists = HistogramSet::new();
    let mut records: Vec<ProbeRecord> = Vec::new();
    let (mut seq, mut probes) = (first_seq - 1, 0u64);
    let mut interval_start = now_unix_us();
    let mut tick = tokio::time::interval(flush_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let seal = |hists: &mut HistogramSet,
                records: &mut Vec<ProbeRecord>,
                interval_start: &mut i64,
                seq: &mut u64| {
        if records.is_empty() && hists.is_empty() {
            return;
        }
        let end = now_unix_us();
        let histograms = hists
            .drain()
            .iter()
            .filter_map(|(k, h)| wire::histogram_to_pb(k, h, *interval_start, end).ok())
            .collect();
        *seq += 1;
        outbox.push(pb::ResultBatch {
            campaign_id: campaign_id.clone(),
            seq: *seq,
            histograms,
            records: records
                .drain(..)
                .map(|r| pb::ProbeRecord::from(&r))
                .collect(),
            clock_offset_us: 0,
        });
        *interval_start = end;
    };
    loop {
        tokio::select! {
            got = rx.recv() => match got {
                Some((rec, gaps)) => {
                    probes += 1;
                    if rec.outcome() != Outcome::Ok {
                        tracing::debug!(provider = %rec.provider, outcome = %rec.outcome(), "probe not ok");
                    }
                    hists.record_probe(&rec, &gaps);
                    records.push(rec);
                }
                None => break,
            },
            _ = tick.tick() => seal(&mut hists, &mut records, &mut interval_start, &mut seq),
        }
    }
    seal(&mut hists, &mut records, &mut interval_start, &mut seq);
    (seq, probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_time_maps_to_local_instants() {
        // The coordinator is 2 s ahead: its "now + 500 ms" is our now − 1.5 s.
        let now_coord = now_unix_us() + 2_000_000;
        let at = local_instant_of(now_coord + 500_000, 2_000_000);
        let ahead = at.saturating_duration_since(Instant::now());
        assert!(
            ahead > Duration::from_millis(400) && ahead <= Duration::from_millis(500),
            "{ahead:?}"
        );
        let past = local_instant_of(now_coord - 1_000_000, 2_000_000);
        assert!(past <= Instant::now());
    }
}
