//! Merging one campaign's results across agents: interval histograms add per
//! (region, provider, scenario, metric, sweep step); outcomes count per (region, provider,
//! scenario), and for `sweep` records also per step ([`StepCounts`]). Batches are
//! de-duplicated by (agent, seq) before they reach this module.
//!
//! Error rates leave out attempts that are neither a success nor the provider's failure:
//! `cancelled` (cut by a campaign cancel) and `dropped` (an open-loop arrival the agent could
//! not send in time). Both are still counted as attempts and by outcome.
//!
//! Warm-up records (`warmup`, docs/metrics.md "Warm-up") are counted apart
//! ([`CellCounts::warmup`]) and left out of every other count; they still finish their plan
//! slot (progress). `rate` records also count per step ([`RateStepCounts`]).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use latmesh_core::hist::{HistKey, HistogramSet};
use latmesh_core::hist_sparse::SparseHistogram;

use crate::saturation::ArrivalLatency;
use latmesh_core::load::LoadKind;
use latmesh_core::record::{Outcome, OutputTokensSource, ProbeRecord};
use serde::{Deserialize, Serialize};

/// Whether an attempt with `outcome` counts in error rates: not `cancelled` (a campaign
/// cancel cut it) and not `dropped` (an open-loop arrival never sent).
pub fn counts_in_error_rates(outcome: Outcome) -> bool {
    !matches!(outcome, Outcome::Cancelled | Outcome::Dropped)
}

/// `(failed, counted)` attempts of a summary cell: the attempts its `error_pct` is made of
/// (every outcome that [`counts_in_error_rates`]) and those not `ok`, from its `outcomes`
/// (unknown outcome names count as failures); from `attempts × error_pct` when a cell has no
/// outcome counts.
pub fn failed_attempts(cell: &crate::matrix::MatrixCell) -> (u64, u64) {
    if cell.outcomes.is_empty() {
        let failed = (cell.attempts as f64 * cell.error_pct / 100.0).round() as u64;
        return (failed.min(cell.attempts), cell.attempts);
    }
    let mut failed = 0;
    let mut counted = 0;
    for (name, n) in &cell.outcomes {
        let outcome = Outcome::parse(name);
        if outcome.is_some_and(|o| !counts_in_error_rates(o)) {
            continue;
        }
        counted += n;
        if outcome != Some(Outcome::Ok) {
            failed += n;
        }
    }
    (failed, counted)
}

/// Whether `rec` is the last attempt of its provider in a failover client request that then
/// moved on to the next provider of the chain: not final, and the provider's
/// `attempts_per_provider`-th try (a chain tries each provider that many times, then the
/// next). Such a share of a client request is one request of that provider, and a failed one:
/// the client gave up on it (a primary that answered none of its requests shows 100 % failed
/// requests, not 0 of 0).
pub fn failover_hand_over(rec: &ProbeRecord, attempts_per_provider: Option<u32>) -> bool {
    rec.failover
        && !rec.final_attempt
        && attempts_per_provider
            .is_some_and(|k| k > 0 && rec.attempt > 0 && (rec.attempt - 1) % k + 1 == k)
}

/// Client requests of one failover scenario in one region, as counted from records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverCounts {
    /// Client requests that ended (final attempts with `failover`; cancelled and dropped
    /// ones left out).
    pub requests: u64,
    /// Attempts they made, over every provider of the chain.
    pub attempts: u64,
    /// Requests that ended `ok`, by the provider that answered.
    pub served_by: BTreeMap<String, u64>,
}

impl FailoverCounts {
    /// Counts one record of a failover scenario (plain backup probes are not counted here).
    pub fn add(&mut self, rec: &ProbeRecord) {
        if !rec.failover {
            return;
        }
        self.attempts += 1;
        if rec.final_attempt && counts_in_error_rates(rec.outcome()) {
            self.requests += 1;
            if rec.outcome() == Outcome::Ok {
                *self.served_by.entry(rec.provider.clone()).or_insert(0) += 1;
            }
        }
    }

    /// Adds another region's counts.
    pub fn merge(&mut self, other: &FailoverCounts) {
        self.requests += other.requests;
        self.attempts += other.attempts;
        for (p, n) in &other.served_by {
            *self.served_by.entry(p.clone()).or_insert(0) += n;
        }
    }
}

/// Per-(region, provider, scenario) counters from records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CellCounts {
    /// Attempts by outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Sum of `output_tokens` over `ok` attempts.
    pub ok_output_tokens: u64,
    /// `ok` attempts whose `output_tokens` came from `usage`.
    pub ok_tokens_from_usage: u64,
    /// `ok` attempts whose token payloads outnumbered usage's count and were the count
    /// (`output_tokens_source = payloads_over_usage`).
    pub ok_tokens_over_usage: u64,
    /// Attempts (any outcome) sent again on a new connection after their pooled one closed
    /// before any response byte (`conn_retried`).
    pub conn_retried: u64,
    /// Over `ok` attempts that reported usage: the sum of `usage_chunk_delta`
    /// (`usage.completion_tokens − token_payloads`).
    pub ok_usage_chunk_delta_sum: i64,
    /// `ok` attempts that reported usage (`usage_chunk_delta` set).
    pub ok_usage_reports: u64,
    /// `ok` attempts whose `usage_chunk_delta` was not 0.
    pub ok_usage_chunk_mismatches: u64,
    /// Attempts (any outcome) by the `model` the provider answered with (attempts without
    /// one are not counted).
    pub answered_models: BTreeMap<String, u64>,
    /// Attempts (any outcome) by the `system_fingerprint` the provider answered with.
    pub system_fingerprints: BTreeMap<String, u64>,
    /// Logical requests ended (records with `final_attempt`; `cancelled` and `dropped` ones
    /// left out), and in a failover scenario each provider's share of a client request that
    /// the client moved on from ([`failover_hand_over`]).
    pub requests: u64,
    /// Logical requests whose final attempt was not `ok`.
    pub requests_failed: u64,
    /// Slots of the plan finished: first turns whose final attempt arrived (retries and
    /// later turns of a conversation do not count again).
    pub slots_done: u64,
    /// First attempts of first turns actually sent (neither `dropped` nor `cancelled`): for
    /// `rate` scenarios, the arrivals that left the agent.
    pub sent: u64,
    /// The latest failed attempt (`dropped` arrivals, never sent, left out), described:
    /// outcome, HTTP status, provider error type and message (already truncated and scrubbed
    /// by the agent).
    pub last_error: Option<String>,
    /// Warm-up requests: final attempts of records with `warmup` (any outcome). Warm-up
    /// records count nowhere else (their slots still count in `slots_done`).
    pub warmup: u64,
    /// Requests judged against the scenario's SLO: records with `slo_met` set (the agent sets
    /// it on final attempts of first turns of SLO scenarios, never on `cancelled` or
    /// `dropped` ones); ClickHouse: `countIf(slo_met IS NOT NULL)` with `warmup = 0`.
    pub slo_judged: u64,
    /// Those that met it (`slo_met = true`).
    pub slo_met: u64,
    /// Sum of `usage.prompt_tokens` over `ok` attempts that reported it (what the provider
    /// billed), tokens.
    pub billed_prompt_tokens: u64,
    /// `ok` attempts that reported `usage.prompt_tokens`.
    pub billed_prompt_reports: u64,
    /// Requests (final attempts) refused because the prompt is longer than the provider's
    /// context ([`crate::context_refusal::is_context_refusal`]).
    pub context_refused: u64,
    /// The prompt-cache counters of `ok` attempts ([`crate::cache_share`]).
    pub cache: crate::cache_share::CacheCounts,
    /// Phase hygiene: the most requests of this provider from earlier phases that one agent
    /// still had in flight when the cell's phase started (records' `phase_start_in_flight`,
    /// warm-up left out; the most over regions when merged); 0: it started idle.
    pub phase_start_in_flight: u64,
}

impl CellCounts {
    /// Adds another cell's counters (another region's) into this one.
    pub fn merge(&mut self, c: &CellCounts) {
        for (o, n) in &c.outcomes {
            *self.outcomes.entry(*o).or_insert(0) += n;
        }
        self.ok_output_tokens = self.ok_output_tokens.saturating_add(c.ok_output_tokens);
        self.ok_tokens_from_usage += c.ok_tokens_from_usage;
        self.ok_tokens_over_usage += c.ok_tokens_over_usage;
        self.conn_retried += c.conn_retried;
        for (m, n) in &c.answered_models {
            count_name(&mut self.answered_models, Some(m), *n);
        }
        for (f, n) in &c.system_fingerprints {
            count_name(&mut self.system_fingerprints, Some(f), *n);
        }
        self.ok_usage_chunk_delta_sum = self
            .ok_usage_chunk_delta_sum
            .saturating_add(c.ok_usage_chunk_delta_sum);
        self.ok_usage_chunk_mismatches += c.ok_usage_chunk_mismatches;
        self.ok_usage_reports += c.ok_usage_reports;
        self.requests += c.requests;
        self.slots_done += c.slots_done;
        self.requests_failed += c.requests_failed;
        self.sent += c.sent;
        if c.last_error.is_some() {
            self.last_error.clone_from(&c.last_error);
        }
        self.warmup += c.warmup;
        self.slo_judged += c.slo_judged;
        self.slo_met += c.slo_met;
        self.billed_prompt_tokens = self
            .billed_prompt_tokens
            .saturating_add(c.billed_prompt_tokens);
        self.billed_prompt_reports += c.billed_prompt_reports;
        self.context_refused += c.context_refused;
        self.cache.merge(&c.cache);
        self.phase_start_in_flight = self.phase_start_in_flight.max(c.phase_start_in_flight);
    }

    /// Mean billed prompt tokens of `ok` attempts that reported usage; `None` without one.
    pub fn billed_prompt_tokens_mean(&self) -> Option<f64> {
        (self.billed_prompt_reports > 0)
            .then(|| self.billed_prompt_tokens as f64 / self.billed_prompt_reports as f64)
    }
}

/// Per-(region, provider, `rate` scenario, step) counters from `rate` records (warm-up left
/// out): what a [`crate::slo_stats::RateStepRow`] is counted from. ClickHouse groups the
/// same records by `step` with the same rules.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateStepCounts {
    /// Arrivals sent: first attempts of first turns, neither `dropped` nor `cancelled`.
    pub sent: u64,
    /// Arrivals `dropped` at the provider's in-flight cap.
    pub dropped: u64,
    /// Logical requests ended (final attempts; `cancelled` and `dropped` left out).
    pub requests: u64,
    /// Those whose final attempt was not `ok`.
    pub failed: u64,
    /// Requests judged against the SLO (`slo_met` set).
    pub slo_judged: u64,
    /// Those that met it.
    pub slo_met: u64,
    /// Lowest and highest `target_rps` of the step's records (positive ones), requests/s;
    /// `None` when no record carried one.
    pub target_rps: Option<(f64, f64)>,
}

impl RateStepCounts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &RateStepCounts) {
        self.sent += other.sent;
        self.dropped += other.dropped;
        self.requests += other.requests;
        self.failed += other.failed;
        self.slo_judged += other.slo_judged;
        self.slo_met += other.slo_met;
        if let Some((lo, hi)) = other.target_rps {
            self.see_rps(lo);
            self.see_rps(hi);
        }
    }

    /// Widens `target_rps` to hold `rps` (ignored unless a positive finite number).
    pub fn see_rps(&mut self, rps: f64) {
        if !(rps.is_finite() && rps > 0.0) {
            return;
        }
        self.target_rps = Some(match self.target_rps {
            None => (rps, rps),
            Some((lo, hi)) => (lo.min(rps), hi.max(rps)),
        });
    }

    /// Whether any record of the step arrived.
    pub fn is_empty(&self) -> bool {
        *self == RateStepCounts::default()
    }
}

/// Per-(region, provider, sweep scenario, step) counters from `sweep` records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Logical requests ended in the step (final attempts; `cancelled` and `dropped` left
    /// out). A request counts in the step in which it was sent.
    pub requests: u64,
    /// Those whose final attempt was `ok`.
    pub ok: u64,
    /// Sum of `output_tokens` over `ok` attempts of the step.
    pub ok_output_tokens: u64,
}

impl StepCounts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &StepCounts) {
        self.requests += other.requests;
        self.ok += other.ok;
        // Provider token counts: saturating, never wrapped (docs/metrics.md, "Provider input
        // bounds").
        self.ok_output_tokens = self.ok_output_tokens.saturating_add(other.ok_output_tokens);
    }

    /// Failed requests / requests, % (0 without requests).
    pub fn error_pct(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            (self.requests - self.ok) as f64 * 100.0 / self.requests as f64
        }
    }
}

/// Longest name (answered model, system fingerprint) a summary keeps, bytes: longer names
/// are cut (on a character boundary, `…` appended) where they enter the aggregate, so names
/// sharing their first 256 bytes count together.
pub const MAX_SUMMARY_NAME_BYTES: usize = 256;

/// Longest error description ([`describe_error`], a cell's `last_error`) a summary keeps,
/// bytes: cut like names.
pub const MAX_SUMMARY_ERROR_BYTES: usize = 512;

/// Adds `n` to `name`'s count in `counts` (nothing for `None`); allocates only for a name
/// not seen before. A name longer than [`MAX_SUMMARY_NAME_BYTES`] counts under its cut form.
pub fn count_name(counts: &mut BTreeMap<String, u64>, name: Option<&str>, n: u64) {
    let Some(name) = name else { return };
    let cut;
    let name = if name.len() > MAX_SUMMARY_NAME_BYTES {
        cut = latmesh_core::record::truncate_message(name, MAX_SUMMARY_NAME_BYTES);
        cut.as_str()
    } else {
        name
    };
    match counts.get_mut(name) {
        Some(c) => *c += n,
        None => {
            counts.insert(name.to_string(), n);
        }
    }
}

/// One line describing a failed attempt: `throttled (429): rate_limit: Rate limit reached…`.
pub fn describe_error(rec: &ProbeRecord) -> String {
    describe_error_parts(
        rec.outcome().as_str(),
        rec.http_status,
        [&rec.error_type, &rec.error_message]
            .into_iter()
            .flatten()
            .map(String::as_str),
    )
}

/// [`describe_error`] from a record's parts: `outcome (status): part: part`, cut to
/// [`MAX_SUMMARY_ERROR_BYTES`].
pub fn describe_error_parts<'a>(
    outcome: &str,
    http_status: Option<u16>,
    parts: impl IntoIterator<Item = &'a str>,
) -> String {
    let mut s = outcome.to_string();
    if let Some(status) = http_status {
        s.push_str(&format!(" ({status})"));
    }
    for part in parts {
        s.push_str(": ");
        s.push_str(part);
    }
    if s.len() > MAX_SUMMARY_ERROR_BYTES {
        s = latmesh_core::record::truncate_message(&s, MAX_SUMMARY_ERROR_BYTES);
    }
    s
}

impl CellCounts {
    /// All attempts.
    pub fn attempts(&self) -> u64 {
        self.outcomes.values().sum()
    }

    /// Attempts with `outcome`.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.outcomes.get(&outcome).copied().unwrap_or(0)
    }
}

/// `(region, provider, scenario)`.
pub type CellKey = (String, String, String);

/// Everything merged so far for one campaign.
#[derive(Clone, Debug, Default)]
pub struct Aggregate {
    hists: BTreeMap<String, HistogramSet>,
    counts: BTreeMap<CellKey, CellCounts>,
    /// `sweep` records: ((region, provider, scenario), step) → counters.
    steps: BTreeMap<(CellKey, u32), StepCounts>,
    /// Failover client requests: (region, scenario) → counters.
    failover: BTreeMap<(String, String), FailoverCounts>,
    /// Attempts of failover client requests per cell: (attempts, `ok` attempts).
    chain_attempts: BTreeMap<CellKey, (u64, u64)>,
    /// Failover scenarios of the plan: scenario → attempts per provider of its chain
    /// ([`Aggregate::for_plan`]; empty: hand-overs are not counted as requests).
    failover_attempts: BTreeMap<String, u32>,
    /// `rate` requests per cell (final attempts of first turns; `cancelled` and `dropped`
    /// left out): their arrival and latency, for the provider saturation rule
    /// ([`crate::saturation`]).
    rate_requests: BTreeMap<CellKey, Vec<ArrivalLatency>>,
    /// `rate` records: ((region, provider, scenario), step) → counters.
    rate_steps: BTreeMap<(CellKey, u32), RateStepCounts>,
}

impl Aggregate {
    /// An empty aggregate for a campaign of `plan` (it knows the failover chains' attempts
    /// per provider, see [`failover_hand_over`]).
    pub fn for_plan(plan: &latmesh_core::plan::Plan) -> Aggregate {
        Aggregate {
            failover_attempts: plan
                .scenarios
                .iter()
                .filter_map(|s| Some((s.name.clone(), s.failover.as_ref()?.attempts)))
                .collect(),
            ..Aggregate::default()
        }
    }

    /// Adds one record from an agent in `region`.
    pub fn add_record(&mut self, region: &str, rec: &ProbeRecord) {
        let cell = self
            .counts
            .entry((
                region.to_string(),
                rec.provider.clone(),
                rec.scenario.clone(),
            ))
            .or_default();
        if rec.warmup {
            // Counted apart, left out of every statistic; its slot is still done.
            if rec.final_attempt {
                cell.warmup += 1;
                cell.slots_done += u64::from(rec.ends_planned_slot());
            }
            return;
        }
        let outcome = rec.outcome();
        *cell.outcomes.entry(outcome).or_insert(0) += 1;
        cell.phase_start_in_flight = cell
            .phase_start_in_flight
            .max(u64::from(rec.phase_start_in_flight));
        if let Some(met) = rec.slo_met {
            cell.slo_judged += 1;
            cell.slo_met += u64::from(met);
        }
        if rec.final_attempt && crate::context_refusal::record_is_context_refusal(rec) {
            cell.context_refused += 1;
        }
        if outcome == Outcome::Ok
            && let Some(t) = rec.usage.prompt_tokens
        {
            cell.billed_prompt_tokens = cell.billed_prompt_tokens.saturating_add(u64::from(t));
            cell.billed_prompt_reports += 1;
        }
        cell.cache.add_record(rec);
        if rec.failover {
            self.failover
                .entry((region.to_string(), rec.scenario.clone()))
                .or_default()
                .add(rec);
            let chain = self
                .chain_attempts
                .entry((
                    region.to_string(),
                    rec.provider.clone(),
                    rec.scenario.clone(),
                ))
                .or_default();
            chain.0 += 1;
            chain.1 += u64::from(outcome == Outcome::Ok);
        }
        let measured = counts_in_error_rates(outcome);
        cell.sent += u64::from(rec.attempt <= 1 && rec.turn <= 1 && measured);
        if rec.final_attempt {
            cell.slots_done += u64::from(rec.ends_planned_slot());
        }
        let handed_over =
            failover_hand_over(rec, self.failover_attempts.get(&rec.scenario).copied());
        // A request cut by a campaign cancel, or an arrival dropped unsent, is neither a
        // success nor a failure.
        if (rec.final_attempt || handed_over) && measured {
            cell.requests += 1;
            cell.requests_failed += u64::from(outcome != Outcome::Ok);
        }
        if rec.load == LoadKind::Rate && rec.final_attempt && rec.turn <= 1 && measured {
            self.rate_requests
                .entry((
                    region.to_string(),
                    rec.provider.clone(),
                    rec.scenario.clone(),
                ))
                .or_default()
                .push(ArrivalLatency::of(
                    rec.slot,
                    outcome == Outcome::Ok,
                    rec.stream,
                    rec.ttft_us,
                    rec.e2e_us,
                ));
        }
        if rec.load == LoadKind::Rate {
            let step = self
                .rate_steps
                .entry((
                    (
                        region.to_string(),
                        rec.provider.clone(),
                        rec.scenario.clone(),
                    ),
                    rec.step,
                ))
                .or_default();
            step.sent += u64::from(rec.attempt <= 1 && rec.turn <= 1 && measured);
            step.dropped += u64::from(outcome == Outcome::Dropped);
            if rec.final_attempt && measured {
                step.requests += 1;
                step.failed += u64::from(outcome != Outcome::Ok);
            }
            if let Some(met) = rec.slo_met {
                step.slo_judged += 1;
                step.slo_met += u64::from(met);
            }
            step.see_rps(rec.target_rps);
        }
        if rec.load == LoadKind::Sweep {
            let step = self
                .steps
                .entry((
                    (
                        region.to_string(),
                        rec.provider.clone(),
                        rec.scenario.clone(),
                    ),
                    rec.step,
                ))
                .or_default();
            if rec.final_attempt && measured {
                step.requests += 1;
                step.ok += u64::from(outcome == Outcome::Ok);
            }
            if outcome == Outcome::Ok {
                step.ok_output_tokens = step
                    .ok_output_tokens
                    .saturating_add(u64::from(rec.output_tokens));
            }
        }
        cell.conn_retried += u64::from(rec.conn_retried);
        count_name(&mut cell.answered_models, rec.answered_model.as_deref(), 1);
        count_name(
            &mut cell.system_fingerprints,
            rec.system_fingerprint.as_deref(),
            1,
        );
        if outcome == Outcome::Ok {
            cell.ok_output_tokens = cell
                .ok_output_tokens
                .saturating_add(u64::from(rec.output_tokens));
            cell.ok_tokens_from_usage += u64::from(rec.tokens_from_usage);
            cell.ok_tokens_over_usage +=
                u64::from(rec.output_tokens_source == OutputTokensSource::PayloadsOverUsage);
            if let Some(d) = rec.usage_chunk_delta {
                cell.ok_usage_chunk_delta_sum = cell.ok_usage_chunk_delta_sum.saturating_add(d);
                cell.ok_usage_reports += 1;
                cell.ok_usage_chunk_mismatches += u64::from(d != 0);
            }
        } else if outcome != Outcome::Dropped {
            cell.last_error = Some(describe_error(rec));
        }
    }

    /// The `rate` requests of (`provider`, `scenario`) in `region` (every region when
    /// `None`): arrival index and latency from the actual send (TTFT when streamed, E2E
    /// otherwise; `None` without an answer), for [`crate::saturation::provider_saturation`].
    pub fn rate_requests(
        &self,
        region: Option<&str>,
        provider: &str,
        scenario: &str,
    ) -> Vec<ArrivalLatency> {
        self.rate_requests
            .iter()
            .filter(|((r, p, s), _)| {
                p == provider && s == scenario && region.is_none_or(|want| want == r)
            })
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }

    /// Failover client requests of `scenario` in `region` (every region when `None`).
    pub fn failover_counts(&self, region: Option<&str>, scenario: &str) -> FailoverCounts {
        let mut out = FailoverCounts::default();
        for ((r, s), c) in &self.failover {
            if s == scenario && region.is_none_or(|want| want == r) {
                out.merge(c);
            }
        }
        out
    }

    /// Plain probes (not part of a failover client request) of `provider` in `scenario`, in
    /// `region` (every region when `None`): (attempts, `ok` attempts).
    pub fn plain_probes(&self, region: Option<&str>, provider: &str, scenario: &str) -> (u64, u64) {
        let c = self.counts(region, provider, scenario);
        let (mut chain, mut chain_ok) = (0, 0);
        for ((r, p, s), (n, ok)) in &self.chain_attempts {
            if p == provider && s == scenario && region.is_none_or(|want| want == r) {
                chain += n;
                chain_ok += ok;
            }
        }
        (
            c.attempts().saturating_sub(chain),
            c.count(Outcome::Ok).saturating_sub(chain_ok),
        )
    }

    /// Adds one interval histogram from an agent in `region`.
    pub fn add_histogram(&mut self, region: &str, key: HistKey, h: &Histogram<u64>) {
        self.hists
            .entry(region.to_string())
            .or_default()
            .merge(key, h);
    }

    /// Adds one interval histogram from an agent in `region`, given as its non-empty buckets
    /// (a decoded wire blob): the same result as [`Aggregate::add_histogram`] of the dense
    /// histogram, without scanning every counter ([`HistogramSet::merge_sparse`]).
    pub fn add_sparse_histogram(&mut self, region: &str, key: HistKey, h: &SparseHistogram) {
        self.hists
            .entry(region.to_string())
            .or_default()
            .merge_sparse(key, h);
    }

    /// The merged histogram of `region` (or of every region when `None`) for `key`'s
    /// provider, scenario and metric, over every sweep step (`key.step` is ignored; see
    /// [`Aggregate::step_histogram`]).
    pub fn histogram(&self, region: Option<&str>, key: &HistKey) -> Option<Histogram<u64>> {
        self.merged(region, |set| set.all_steps(key).map(|(_, h)| h).collect())
    }

    /// The merged histogram of `region` (or of every region) for exactly `key` (one sweep
    /// step).
    pub fn step_histogram(&self, region: Option<&str>, key: &HistKey) -> Option<Histogram<u64>> {
        self.merged(region, |set| set.get(key).into_iter().collect())
    }

    /// The sum over `region` (or every region) of the histograms `pick` takes from each
    /// region's set.
    fn merged<'a>(
        &'a self,
        region: Option<&str>,
        pick: impl Fn(&'a HistogramSet) -> Vec<&'a Histogram<u64>>,
    ) -> Option<Histogram<u64>> {
        let mut out: Option<Histogram<u64>> = None;
        for (r, set) in &self.hists {
            if region.is_some_and(|want| want != r) {
                continue;
            }
            for h in pick(set) {
                match &mut out {
                    Some(acc) => acc.add(h).expect("shared bounds"),
                    None => out = Some(h.clone()),
                }
            }
        }
        out
    }

    /// Counters of one cell, or of a provider and scenario over every region when `region` is
    /// `None`.
    pub fn counts(&self, region: Option<&str>, provider: &str, scenario: &str) -> CellCounts {
        let mut out = CellCounts::default();
        for ((r, p, s), c) in &self.counts {
            if p != provider || s != scenario || region.is_some_and(|want| want != r) {
                continue;
            }
            out.merge(c);
        }
        out
    }

    /// Counters of `rate` step `step` of one cell, or over every region when `region` is
    /// `None` (empty when nothing of that step arrived).
    pub fn rate_step_counts(
        &self,
        region: Option<&str>,
        provider: &str,
        scenario: &str,
        step: u32,
    ) -> RateStepCounts {
        let mut out = RateStepCounts::default();
        for (((r, p, s), k), c) in &self.rate_steps {
            if *k == step && p == provider && s == scenario && region.is_none_or(|w| w == r) {
                out.add(c);
            }
        }
        out
    }

    /// Counters of sweep step `step` of one cell, or over every region when `region` is
    /// `None` (zeros when nothing of that step arrived).
    pub fn step_counts(
        &self,
        region: Option<&str>,
        provider: &str,
        scenario: &str,
        step: u32,
    ) -> StepCounts {
        let mut out = StepCounts::default();
        for (((r, p, s), k), c) in &self.steps {
            if *k == step && p == provider && s == scenario && region.is_none_or(|w| w == r) {
                out.add(c);
            }
        }
        out
    }

    /// Records counted so far.
    pub fn records(&self) -> u64 {
        self.counts.values().map(CellCounts::attempts).sum()
    }

    /// Slots of the plan finished so far (what progress compares with
    /// `Plan::probes_per_agent` × agents): a slot's retries and later turns do not count again.
    pub fn slots_done(&self) -> u64 {
        self.counts.values().map(|c| c.slots_done).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::hist::new_histogram;
    use latmesh_core::metrics::Metric;

    #[test]
    fn regions_merge_by_addition() {
        let mut agg = Aggregate::default();
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Ttft,
            step: 0,
        };
        let (mut a, mut b) = (new_histogram(), new_histogram());
        a.record(100).unwrap();
        b.record(300).unwrap();
        b.record(500).unwrap();
        agg.add_histogram("us-east", key.clone(), &a);
        agg.add_histogram("eu-west", key.clone(), &b);
        agg.add_histogram("eu-west", key.clone(), &a);
        assert_eq!(agg.histogram(Some("eu-west"), &key).unwrap().len(), 3);
        let all = agg.histogram(None, &key).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all.count_at(100), 2);
        assert!(agg.histogram(Some("ap-southeast"), &key).is_none());
    }

    #[test]
    fn sparse_merges_equal_dense_merges() {
        // Wire blobs of many intervals (some empty, one in foreign bounds) merged both ways
        // into two aggregates over regions, metrics and sweep steps.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut dense, mut sparse) = (Aggregate::default(), Aggregate::default());
        let mut keys = Vec::new();
        for i in 0..120u32 {
            let key = HistKey {
                provider: ["a", "b"][i as usize % 2].into(),
                scenario: "s".into(),
                metric: [Metric::Ttft, Metric::Itl, Metric::E2e][i as usize % 3],
                step: i % 4 / 3,
            };
            let region = ["us-east", "eu-west", "ap-southeast"][next() as usize % 3];
            let mut h = if i == 7 {
                hdrhistogram::Histogram::<u64>::new_with_bounds(1, 100_000_000, 2).unwrap()
            } else {
                new_histogram()
            };
            for _ in 0..(next() % 4) * (next() % 700) {
                let v = (1u64 << (next() % 32)) + next() % 1_000_000;
                h.record_n(v.clamp(1, h.high()), 1 + next() % 3).unwrap();
            }
            let wire = latmesh_core::wire::histogram_to_pb(&key, &h, 0, 1).unwrap();
            let (k, d) = latmesh_core::wire::histogram_from_pb(&wire).unwrap();
            let (k2, s) = latmesh_core::wire::sparse_histogram_from_pb(&wire).unwrap();
            assert_eq!(k, k2);
            dense.add_histogram(region, k.clone(), &d);
            sparse.add_sparse_histogram(region, k2, &s);
            keys.push(k);
        }
        assert_eq!(
            dense.hists.keys().collect::<Vec<_>>(),
            sparse.hists.keys().collect::<Vec<_>>()
        );
        for (r, set) in &dense.hists {
            let other = &sparse.hists[r];
            assert!(set.iter().eq(other.iter()), "{r}");
        }
        for key in &keys {
            for region in [None, Some("us-east"), Some("eu-west")] {
                let (a, b) = (
                    dense.histogram(region, key).unwrap(),
                    sparse.histogram(region, key).unwrap(),
                );
                assert_eq!(a, b);
                assert_eq!((a.len(), a.min(), a.max()), (b.len(), b.min(), b.max()));
                for q in [0.5, 0.9, 0.99, 0.999] {
                    assert_eq!(a.value_at_quantile(q), b.value_at_quantile(q));
                }
                assert_eq!(
                    dense.step_histogram(region, key),
                    sparse.step_histogram(region, key)
                );
            }
        }
    }

    #[test]
    fn dropped_arrivals_and_sweep_steps_count_apart() {
        let mut agg = Aggregate::default();
        let rec = |load, step, o, attempt, final_attempt| ProbeRecord {
            load,
            step,
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(o),
            output_tokens: if o == Outcome::Ok { 5 } else { 0 },
            attempt,
            final_attempt,
            turn: 1,
            ..Default::default()
        };
        let rate = LoadKind::Rate;
        agg.add_record("r", &rec(rate, 0, Outcome::Ok, 1, true));
        agg.add_record("r", &rec(rate, 0, Outcome::Dropped, 1, true));
        agg.add_record("r", &rec(rate, 0, Outcome::Cancelled, 1, true));
        agg.add_record("r", &rec(rate, 0, Outcome::Throttled, 1, false));
        agg.add_record("r", &rec(rate, 0, Outcome::Http5xx, 2, true));
        let c = agg.counts(None, "p", "s");
        // Two arrivals sent (the ok one; the throttled one, whose retry failed); dropped and
        // cancelled ones are not requests.
        assert_eq!((c.sent, c.requests, c.requests_failed), (2, 2, 1));
        assert_eq!((c.count(Outcome::Dropped), c.attempts()), (1, 5));
        assert!(c.last_error.unwrap().starts_with("http_5xx"));
        // Rate records keep no step counters; sweep records do, per step.
        assert_eq!(agg.step_counts(None, "p", "s", 0), StepCounts::default());
        let sweep = LoadKind::Sweep;
        agg.add_record("r", &rec(sweep, 1, Outcome::Ok, 1, true));
        agg.add_record("q", &rec(sweep, 1, Outcome::Ok, 1, true));
        agg.add_record("q", &rec(sweep, 1, Outcome::TimeoutTtft, 1, true));
        agg.add_record("q", &rec(sweep, 1, Outcome::Cancelled, 1, true));
        agg.add_record("q", &rec(sweep, 2, Outcome::Ok, 1, true));
        let step = |region| agg.step_counts(region, "p", "s", 1);
        assert_eq!(
            step(None),
            StepCounts {
                requests: 3,
                ok: 2,
                ok_output_tokens: 10
            }
        );
        assert_eq!(
            (step(Some("q")).requests, step(Some("q")).error_pct()),
            (2, 50.0)
        );
        assert_eq!(agg.step_counts(Some("q"), "p", "s", 2).ok, 1);
    }

    #[test]
    fn outcomes_count_per_cell_and_over_regions() {
        let mut agg = Aggregate::default();
        let rec = |o| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(o),
            output_tokens: 10,
            tokens_from_usage: true,
            usage_chunk_delta: Some(3),
            final_attempt: true,
            ..Default::default()
        };
        agg.add_record("us-east", &rec(Outcome::Ok));
        // A throttled attempt that was retried, then the retry that succeeded.
        agg.add_record(
            "us-east",
            &ProbeRecord {
                final_attempt: false,
                ..rec(Outcome::Throttled)
            },
        );
        agg.add_record(
            "us-east",
            &ProbeRecord {
                usage_chunk_delta: Some(0),
                attempt: 2,
                ..rec(Outcome::Ok)
            },
        );
        agg.add_record("eu-west", &rec(Outcome::Ok));
        agg.add_record("eu-west", &rec(Outcome::TimeoutTtft));
        // Aborted by a campaign cancel: an attempt, not a request.
        agg.add_record("eu-west", &rec(Outcome::Cancelled));
        let us = agg.counts(Some("us-east"), "p", "s");
        assert_eq!(
            (
                us.attempts(),
                us.count(Outcome::Ok),
                us.count(Outcome::Throttled)
            ),
            (3, 2, 1)
        );
        assert_eq!(us.ok_output_tokens, 20);
        assert_eq!((us.requests, us.requests_failed), (2, 0));
        assert_eq!(
            (us.ok_usage_chunk_delta_sum, us.ok_usage_chunk_mismatches),
            (3, 1)
        );
        let all = agg.counts(None, "p", "s");
        assert_eq!(
            (all.attempts(), all.count(Outcome::Ok), all.ok_output_tokens),
            (6, 3, 30)
        );
        assert_eq!((all.requests, all.requests_failed), (4, 1));
        assert_eq!(all.count(Outcome::Cancelled), 1);
        assert_eq!(all.ok_usage_chunk_delta_sum, 6);
        assert_eq!(agg.records(), 6);
        // Six attempts, five final, all first turns: five slots finished.
        assert_eq!(agg.slots_done(), 5);
    }

    #[test]
    fn answered_models_and_token_sources_count_per_cell_and_over_regions() {
        let mut agg = Aggregate::default();
        let rec = |o, model: Option<&str>, fp: Option<&str>, source| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(o),
            answered_model: model.map(str::to_string),
            system_fingerprint: fp.map(str::to_string),
            output_tokens_source: source,
            final_attempt: true,
            ..Default::default()
        };
        let (over, usage) = (
            OutputTokensSource::PayloadsOverUsage,
            OutputTokensSource::Usage,
        );
        agg.add_record("us", &rec(Outcome::Ok, Some("m-2024"), Some("fp1"), over));
        agg.add_record("us", &rec(Outcome::Ok, Some("m-2024"), Some("fp2"), usage));
        // A failed attempt that still said which model answered counts too.
        agg.add_record("eu", &rec(Outcome::StreamError, Some("m-2024"), None, over));
        agg.add_record("eu", &rec(Outcome::Ok, Some("other"), None, over));
        agg.add_record("eu", &rec(Outcome::Ok, None, None, usage));
        let names = |m: &BTreeMap<String, u64>| m.clone().into_iter().collect::<Vec<_>>();
        let us = agg.counts(Some("us"), "p", "s");
        assert_eq!(names(&us.answered_models), vec![("m-2024".into(), 2)]);
        assert_eq!(
            names(&us.system_fingerprints),
            vec![("fp1".into(), 1), ("fp2".into(), 1)]
        );
        assert_eq!(us.ok_tokens_over_usage, 1);
        let all = agg.counts(None, "p", "s");
        assert_eq!(
            names(&all.answered_models),
            vec![("m-2024".into(), 3), ("other".into(), 1)]
        );
        // Only ok attempts count where the token count came from.
        assert_eq!(all.ok_tokens_over_usage, 2);
    }

    #[test]
    fn warm_up_slo_billed_tokens_and_rate_steps_count_apart() {
        let mut agg = Aggregate::default();
        let rec = |step, o, attempt, final_attempt, slo_met, rps| ProbeRecord {
            load: LoadKind::Rate,
            step,
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(o),
            attempt,
            final_attempt,
            turn: 1,
            slo_met,
            target_rps: rps,
            // Every record reports usage; only `ok` ones count as billed.
            usage: latmesh_core::record::Usage {
                prompt_tokens: Some(100),
                ..Default::default()
            },
            ..Default::default()
        };
        // A warm-up request: counted apart, its slot done, nothing else.
        let warm = ProbeRecord {
            warmup: true,
            ..rec(0, Outcome::Ok, 1, true, Some(true), 2.0)
        };
        agg.add_record("r", &warm);
        agg.add_record("r", &rec(0, Outcome::Ok, 1, true, Some(true), 2.0));
        agg.add_record("r", &rec(0, Outcome::Ok, 1, true, Some(false), 2.0));
        agg.add_record("r", &rec(0, Outcome::Dropped, 1, true, None, 2.0));
        agg.add_record("q", &rec(0, Outcome::Throttled, 1, false, None, 3.0));
        agg.add_record("q", &rec(0, Outcome::Http5xx, 2, true, Some(false), 3.0));
        agg.add_record("q", &rec(1, Outcome::Cancelled, 1, true, None, 6.0));
        let c = agg.counts(None, "p", "s");
        assert_eq!((c.warmup, c.slots_done, c.attempts()), (1, 6, 6));
        assert_eq!((c.slo_judged, c.slo_met), (3, 1));
        assert_eq!((c.billed_prompt_tokens, c.billed_prompt_reports), (200, 2));
        assert_eq!(c.billed_prompt_tokens_mean(), Some(100.0));
        let s0 = agg.rate_step_counts(None, "p", "s", 0);
        assert_eq!(
            s0,
            RateStepCounts {
                sent: 3,
                dropped: 1,
                requests: 3,
                failed: 1,
                slo_judged: 3,
                slo_met: 1,
                target_rps: Some((2.0, 3.0)),
            }
        );
        assert_eq!(
            agg.rate_step_counts(Some("r"), "p", "s", 0).target_rps,
            Some((2.0, 2.0))
        );
        let s1 = agg.rate_step_counts(None, "p", "s", 1);
        assert_eq!(
            (s1.sent, s1.requests, s1.target_rps),
            (0, 0, Some((6.0, 6.0)))
        );
        assert!(agg.rate_step_counts(None, "p", "s", 2).is_empty());
    }

    #[test]
    fn context_refusals_count_per_request() {
        let mut agg = Aggregate::default();
        let refused = |final_attempt| ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: Some(Outcome::Http4xx),
            http_status: Some(400),
            error_code: Some("context_length_exceeded".into()),
            final_attempt,
            ..Default::default()
        };
        agg.add_record("r", &refused(true));
        agg.add_record("r", &refused(false));
        agg.add_record(
            "r",
            &ProbeRecord {
                error_code: Some("invalid_api_key".into()),
                ..refused(true)
            },
        );
        assert_eq!(agg.counts(Some("r"), "p", "s").context_refused, 1);
    }
}
