//! One `Row` type per table (fields in column order: the crate sends positional `RowBinary`)
//! and the conversions from latmesh's domain types.
//!
//! Units follow the columns: `*_us` are microseconds (UTC µs for timestamps), `DateTime`
//! columns are UTC seconds as `u32`, booleans are `UInt8` columns.

use hdrhistogram::Histogram;
use latmesh_core::hist::{self, HistKey};
use latmesh_core::load::LoadKind;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::{Outcome, OutputTokensSource, ProbeRecord, Usage};
use serde::{Deserialize, Serialize};

use super::batch_key::BatchKey;
use super::compat::CompatRun;
use super::{StoreError, datetime_secs, unsigned_us};
use latmesh_core::compat::{CompatCheck, CompatResult, Evidence, SampleTally, Verdict};
use latmesh_core::quality::QualitySample;
use latmesh_results::delivery::{Delivery, RejectedBatch};
use latmesh_results::summary::AgentSummary;

/// A row of `campaigns`: one launched campaign.
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct CampaignRow {
    /// Campaign id.
    pub campaign_id: String,
    /// Campaign name (from the plan).
    pub name: String,
    /// The plan as JSON ([`Plan::to_json`]).
    pub plan_json: String,
    /// Hex SHA-256 of `plan_json`.
    pub plan_hash: String,
    /// Metric definitions version.
    pub metrics_version: u32,
    /// Seed of the per-round provider order.
    pub seed: u64,
    /// Regions of the plan, in order.
    pub regions: Vec<String>,
    /// Providers of the plan, in order.
    pub providers: Vec<String>,
    /// Scenarios of the plan, in order.
    pub scenarios: Vec<String>,
    /// Launch time, coordinator clock, UTC seconds.
    pub launched_at: u32,
    /// Launch time, coordinator clock, UTC µs.
    pub launched_at_us: u64,
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_us: u64,
    /// Who launched it (CLI user or token name).
    pub created_by: String,
}

impl CampaignRow {
    /// The row of campaign `campaign_id` running `plan`, launched at `launched_at_unix_us`
    /// with round 0 at `start_at_unix_us` (both coordinator clock, UTC µs).
    pub fn new(
        campaign_id: &str,
        plan: &Plan,
        launched_at_unix_us: i64,
        start_at_unix_us: i64,
        created_by: &str,
    ) -> Self {
        CampaignRow {
            campaign_id: campaign_id.to_string(),
            name: plan.name.clone(),
            plan_json: plan.to_json(),
            plan_hash: plan.hash(),
            metrics_version: plan.metrics_version,
            seed: plan.seed,
            regions: plan.regions.clone(),
            providers: plan.providers.iter().map(|p| p.name.clone()).collect(),
            scenarios: plan.scenarios.iter().map(|s| s.name.clone()).collect(),
            launched_at: datetime_secs(launched_at_unix_us),
            launched_at_us: unsigned_us(launched_at_unix_us),
            start_at_us: unsigned_us(start_at_unix_us),
            created_by: created_by.to_string(),
        }
    }
}

/// A row of `agents`: an agent's part in a campaign at `seen_at_us`. Written again when its
/// state changes; the latest `seen_at_us` wins (`ReplacingMergeTree(seen_at_us)`, and
/// [`super::query`] reads the latest row).
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct AgentRow {
    /// Campaign id.
    pub campaign_id: String,
    /// Agent id.
    pub agent_id: String,
    /// Region.
    pub region: String,
    /// latmesh-agent version.
    pub version: String,
    /// Coordinator clock minus agent clock, µs.
    pub clock_offset_us: i64,
    /// Uncertainty of the offset, ± µs.
    pub clock_uncertainty_us: u64,
    /// When this state was written, coordinator clock, UTC seconds.
    pub seen_at: u32,
    /// When this state was written, coordinator clock, UTC µs.
    pub seen_at_us: u64,
    /// Records received from the agent.
    pub records: u64,
    /// Batches received (after de-duplication).
    pub batches: u64,
    /// Probes the agent skipped.
    pub skipped: u64,
    /// Whether the agent delivered everything.
    pub complete: bool,
    /// Whether its done notice arrived (schema 7; 1 in rows written before).
    pub campaign_done: u8,
    /// Seq of its last batch, from its done notice (schema 7; 0 in rows written before).
    pub last_seq: u64,
    /// Batches refused as malformed or quarantined by the agent unsent (schema 7).
    pub batches_rejected: u64,
    /// The first of them ([`latmesh_results::delivery::MAX_LISTED_REJECTIONS`]): seqs…
    pub rejected_seqs: Vec<u64>,
    /// …and why, in the same order.
    pub rejected_reasons: Vec<String>,
    /// Records the agent quarantined as too large to send (schema 7).
    pub records_quarantined: u64,
    /// Histograms the agent quarantined as too large to send (schema 7).
    pub histograms_quarantined: u64,
}

impl AgentRow {
    /// The row of `agent` in `campaign_id`, running agent `version`, as of `seen_at_unix_us`
    /// (coordinator clock, UTC µs).
    pub fn from_summary(
        campaign_id: &str,
        agent: &AgentSummary,
        version: &str,
        seen_at_unix_us: i64,
    ) -> Self {
        AgentRow {
            campaign_id: campaign_id.to_string(),
            agent_id: agent.agent_id.clone(),
            region: agent.region.clone(),
            version: version.to_string(),
            clock_offset_us: agent.clock_offset_us,
            clock_uncertainty_us: agent.clock_uncertainty_us,
            seen_at: datetime_secs(seen_at_unix_us),
            seen_at_us: unsigned_us(seen_at_unix_us),
            records: agent.records,
            batches: agent.batches,
            skipped: agent.skipped,
            complete: agent.complete,
            campaign_done: u8::from(agent.delivery.last_seq.is_some()),
            last_seq: agent.delivery.last_seq.unwrap_or(0),
            batches_rejected: agent.delivery.batches_rejected,
            rejected_seqs: agent.delivery.rejected.iter().map(|r| r.seq).collect(),
            rejected_reasons: agent
                .delivery
                .rejected
                .iter()
                .map(|r| r.reason.clone())
                .collect(),
            records_quarantined: agent.delivery.records_quarantined,
            histograms_quarantined: agent.delivery.histograms_quarantined,
        }
    }

    /// What this row says of the agent's delivery (schema 7): the inverse of
    /// [`AgentRow::from_summary`] for [`AgentSummary::delivery`].
    pub fn delivery(&self) -> Delivery {
        Delivery {
            last_seq: (self.campaign_done != 0).then_some(self.last_seq),
            batches_rejected: self.batches_rejected,
            rejected: self
                .rejected_seqs
                .iter()
                .zip(&self.rejected_reasons)
                .map(|(&seq, reason)| RejectedBatch {
                    seq,
                    reason: reason.clone(),
                })
                .collect(),
            records_quarantined: self.records_quarantined,
            histograms_quarantined: self.histograms_quarantined,
        }
    }
}

/// A row of `requests`: one attempt, every [`ProbeRecord`] field, plus where it came from.
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct RequestRow {
    /// Campaign id.
    pub campaign_id: String,
    /// Agent id.
    pub agent_id: String,
    /// The agent's region.
    pub region: String,
    /// Sequence number of the batch the record came in.
    pub seq: u64,
    /// Index of the record in its batch (0-based).
    pub row_index: u32,
    /// [`ProbeRecord::round`].
    pub round: u32,
    /// [`ProbeRecord::slot`].
    pub slot: u32,
    /// Provider name.
    pub provider: String,
    /// Scenario name.
    pub scenario: String,
    /// Prompt id.
    pub prompt_id: String,
    /// 1 for a first attempt, > 1 for retries.
    pub attempt: u32,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// Wall clock at `t_send`, agent clock, UTC seconds.
    pub send_time: u32,
    /// Wall clock at `t_send`, agent clock, UTC µs.
    pub send_unix_us: u64,
    /// Wall clock at `t_send` on the coordinator's clock (agent clock + `clock_offset_us`),
    /// UTC µs.
    pub send_coord_unix_us: u64,
    /// The batch's clock offset (coordinator − agent), µs.
    pub clock_offset_us: i64,
    /// `t_send` − intended send time, µs.
    pub sched_lag_us: i64,
    /// Outcome name ([`Outcome::as_str`]).
    pub outcome: String,
    /// HTTP status.
    pub http_status: Option<u16>,
    /// TTFB, µs.
    pub ttfb_us: Option<u64>,
    /// TTFT, µs.
    pub ttft_us: Option<u64>,
    /// TTFC, µs.
    pub ttfc_us: Option<u64>,
    /// E2E, µs.
    pub e2e_us: Option<u64>,
    /// TPOT, µs.
    pub tpot_us: Option<u64>,
    /// Decode rate, tokens/s.
    pub decode_tps: Option<f64>,
    /// Output tokens.
    pub output_tokens: u32,
    /// Whether `output_tokens` came from `usage`.
    pub tokens_from_usage: bool,
    /// Payloads with non-empty content.
    pub content_chunks: u32,
    /// Payloads with non-empty reasoning.
    pub reasoning_chunks: u32,
    /// Payloads with a tool-call fragment.
    pub tool_call_chunks: u32,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<u32>,
    /// `usage.completion_tokens`.
    pub completion_tokens: Option<u32>,
    /// `usage.total_tokens`.
    pub total_tokens: Option<u32>,
    /// Reasoning tokens from `usage`.
    pub reasoning_tokens: Option<u32>,
    /// Cached prompt tokens from `usage`.
    pub cached_tokens: Option<u32>,
    /// Last `finish_reason`.
    pub finish_reason: Option<String>,
    /// Whether `[DONE]` arrived.
    pub saw_done: bool,
    /// Retry-After, seconds.
    pub retry_after_s: Option<f64>,
    /// Provider error type or code.
    pub error_type: Option<String>,
    /// Provider or transport error message (≤ 256 bytes).
    pub error_message: Option<String>,
    /// Largest inter-token gap, µs.
    pub itl_max_us: Option<u64>,
    /// SSE comment lines.
    pub comment_lines: u32,
    /// Response body bytes.
    pub response_bytes: u64,
    /// Named time window, `""` when none.
    pub window: String,
    /// Last attempt of its logical request (migration 0002 and after: metrics_version 2).
    pub final_attempt: bool,
    /// Logical request latency on the final attempt, µs.
    pub request_latency_us: Option<u64>,
    /// 1-based turn of a multi-turn conversation.
    pub turn: u32,
    /// Whether a cache-busting nonce prefixed the prompt.
    pub cache_nonce: bool,
    /// Whether a pooled connection was used.
    pub conn_reused: bool,
    /// DNS resolution of a new connection, µs.
    pub dns_us: Option<u64>,
    /// TCP connect of a new connection, µs.
    pub connect_us: Option<u64>,
    /// TLS handshake of a new connection, µs.
    pub tls_us: Option<u64>,
    /// First body byte, µs from `t_send`.
    pub first_byte_us: Option<u64>,
    /// First non-whitespace body byte, µs from `t_send`.
    pub first_nonblank_us: Option<u64>,
    /// `ttfc − ttft` when reasoning came first, µs.
    pub reasoning_us: Option<u64>,
    /// Payloads carrying any generated token.
    pub token_payloads: u32,
    /// `usage.completion_tokens − token_payloads`.
    pub usage_chunk_delta: Option<i64>,
    /// Provider error code.
    pub error_code: Option<String>,
    /// Load model (`rounds`, `sweep`, `rate`; migration 0003).
    pub load: String,
    /// Sweep step (0-based), 0 otherwise.
    pub step: u32,
    /// Sweep step's target concurrency, 0 otherwise.
    pub concurrency: u32,
    /// Part of a client request through a failover chain.
    pub failover: bool,
    /// First sent on a pooled connection that failed before any response byte, then sent
    /// again on a new connection (migration 0004).
    pub conn_retried: bool,
    /// Which count `output_tokens` is ([`OutputTokensSource::as_str`]; migration 0005: rows
    /// written before read `usage` or `payloads` by `tokens_from_usage`).
    pub output_tokens_source: String,
    /// The `model` the provider answered with.
    pub answered_model: Option<String>,
    /// The `system_fingerprint` it answered with.
    pub system_fingerprint: Option<String>,
    /// Provider values cut, scrubbed, clamped or dropped (migration 0006; `[]` before).
    pub cut_fields: Vec<String>,
    /// Usage asked for or reported unasked (migration 0008; `1` before).
    pub usage_requested: bool,
    /// Generated prompt: the input tokens asked for; 0 otherwise (migration 0010).
    pub input_tokens: u32,
    /// A warm-up request, left out of statistics (migration 0010).
    pub warmup: bool,
    /// Time to second token, µs (migration 0010).
    pub ttst_us: Option<u64>,
    /// `rate`: the step's arrival rate, requests/s; 0 otherwise (migration 0010).
    pub target_rps: f64,
    /// Final attempt of a scenario with an SLO: met every per-request bound (migration 0010).
    pub slo_met: Option<bool>,
    /// Requests of this provider from earlier phases in flight at the phase's start
    /// (migration 0011).
    pub phase_start_in_flight: u32,
}

impl RequestRow {
    /// The row of record `rec`, `row_index`-th of batch `key`. The window label comes from
    /// `key.window_label` (called with the coordinator-clock send time), `""` without one.
    /// A record without outcome is stored as `protocol_error` ([`ProbeRecord::outcome`]);
    /// a negative send time (never from a sane clock) as 0.
    pub fn from_record(key: &BatchKey<'_>, row_index: u32, rec: &ProbeRecord) -> Self {
        let coord_us = rec.send_agent_unix_us.saturating_add(key.clock_offset_us);
        RequestRow {
            campaign_id: key.campaign_id.to_string(),
            agent_id: key.agent_id.to_string(),
            region: key.region.to_string(),
            seq: key.seq,
            row_index,
            round: rec.round,
            slot: rec.slot,
            provider: rec.provider.clone(),
            scenario: rec.scenario.clone(),
            prompt_id: rec.prompt_id.clone(),
            attempt: rec.attempt,
            stream: rec.stream,
            send_time: datetime_secs(rec.send_agent_unix_us),
            send_unix_us: unsigned_us(rec.send_agent_unix_us),
            send_coord_unix_us: unsigned_us(coord_us),
            clock_offset_us: key.clock_offset_us,
            sched_lag_us: rec.sched_lag_us,
            outcome: rec.outcome().as_str().to_string(),
            http_status: rec.http_status,
            ttfb_us: rec.ttfb_us,
            ttft_us: rec.ttft_us,
            ttfc_us: rec.ttfc_us,
            e2e_us: rec.e2e_us,
            tpot_us: rec.tpot_us,
            decode_tps: rec.decode_tps,
            output_tokens: rec.output_tokens,
            tokens_from_usage: rec.tokens_from_usage,
            content_chunks: rec.content_chunks,
            reasoning_chunks: rec.reasoning_chunks,
            tool_call_chunks: rec.tool_call_chunks,
            prompt_tokens: rec.usage.prompt_tokens,
            completion_tokens: rec.usage.completion_tokens,
            total_tokens: rec.usage.total_tokens,
            reasoning_tokens: rec.usage.reasoning_tokens,
            cached_tokens: rec.usage.cached_tokens,
            finish_reason: rec.finish_reason.clone(),
            saw_done: rec.saw_done,
            retry_after_s: rec.retry_after_s,
            error_type: rec.error_type.clone(),
            error_message: rec.error_message.clone(),
            itl_max_us: rec.itl_max_us,
            comment_lines: rec.comment_lines,
            response_bytes: rec.response_bytes,
            window: key.window_for(coord_us),
            final_attempt: rec.final_attempt,
            request_latency_us: rec.request_latency_us,
            turn: rec.turn,
            cache_nonce: rec.cache_nonce,
            conn_reused: rec.conn_reused,
            dns_us: rec.dns_us,
            connect_us: rec.connect_us,
            tls_us: rec.tls_us,
            first_byte_us: rec.first_byte_us,
            first_nonblank_us: rec.first_nonblank_us,
            reasoning_us: rec.reasoning_us,
            token_payloads: rec.token_payloads,
            usage_chunk_delta: rec.usage_chunk_delta,
            error_code: rec.error_code.clone(),
            load: rec.load.as_str().to_string(),
            step: rec.step,
            concurrency: rec.concurrency,
            failover: rec.failover,
            conn_retried: rec.conn_retried,
            output_tokens_source: rec.output_tokens_source.as_str().to_string(),
            answered_model: rec.answered_model.clone(),
            system_fingerprint: rec.system_fingerprint.clone(),
            cut_fields: rec.cut_fields.clone(),
            usage_requested: rec.usage_requested,
            input_tokens: rec.input_tokens,
            warmup: rec.warmup,
            ttst_us: rec.ttst_us,
            target_rps: rec.target_rps,
            slo_met: rec.slo_met,
            phase_start_in_flight: rec.phase_start_in_flight,
        }
    }

    /// The record back. Equal to the original except that a missing outcome reads back as
    /// `Some(ProtocolError)` and an unknown outcome name as `Some(ProtocolError)` too.
    pub fn to_record(&self) -> ProbeRecord {
        ProbeRecord {
            load: LoadKind::parse(&self.load).unwrap_or_default(),
            step: self.step,
            concurrency: self.concurrency,
            failover: self.failover,
            round: self.round,
            slot: self.slot,
            provider: self.provider.clone(),
            scenario: self.scenario.clone(),
            prompt_id: self.prompt_id.clone(),
            attempt: self.attempt,
            stream: self.stream,
            send_agent_unix_us: i64::try_from(self.send_unix_us).unwrap_or(i64::MAX),
            sched_lag_us: self.sched_lag_us,
            outcome: Some(Outcome::parse(&self.outcome).unwrap_or(Outcome::ProtocolError)),
            http_status: self.http_status,
            ttfb_us: self.ttfb_us,
            ttft_us: self.ttft_us,
            ttfc_us: self.ttfc_us,
            e2e_us: self.e2e_us,
            tpot_us: self.tpot_us,
            decode_tps: self.decode_tps,
            output_tokens: self.output_tokens,
            tokens_from_usage: self.tokens_from_usage,
            content_chunks: self.content_chunks,
            reasoning_chunks: self.reasoning_chunks,
            tool_call_chunks: self.tool_call_chunks,
            usage: Usage {
                prompt_tokens: self.prompt_tokens,
                completion_tokens: self.completion_tokens,
                total_tokens: self.total_tokens,
                reasoning_tokens: self.reasoning_tokens,
                cached_tokens: self.cached_tokens,
            },
            finish_reason: self.finish_reason.clone(),
            saw_done: self.saw_done,
            retry_after_s: self.retry_after_s,
            error_type: self.error_type.clone(),
            error_message: self.error_message.clone(),
            itl_max_us: self.itl_max_us,
            comment_lines: self.comment_lines,
            response_bytes: self.response_bytes,
            final_attempt: self.final_attempt,
            request_latency_us: self.request_latency_us,
            turn: self.turn,
            cache_nonce: self.cache_nonce,
            conn_reused: self.conn_reused,
            conn_retried: self.conn_retried,
            dns_us: self.dns_us,
            connect_us: self.connect_us,
            tls_us: self.tls_us,
            first_byte_us: self.first_byte_us,
            first_nonblank_us: self.first_nonblank_us,
            reasoning_us: self.reasoning_us,
            token_payloads: self.token_payloads,
            usage_chunk_delta: self.usage_chunk_delta,
            error_code: self.error_code.clone(),
            output_tokens_source: OutputTokensSource::parse_or_flag(
                &self.output_tokens_source,
                self.tokens_from_usage,
            ),
            answered_model: self.answered_model.clone(),
            system_fingerprint: self.system_fingerprint.clone(),
            cut_fields: self.cut_fields.clone(),
            usage_requested: self.usage_requested,
            input_tokens: self.input_tokens,
            warmup: self.warmup,
            ttst_us: self.ttst_us,
            target_rps: self.target_rps,
            slo_met: self.slo_met,
            phase_start_in_flight: self.phase_start_in_flight,
        }
    }
}

/// A row of `histograms`: one interval histogram of one agent.
///
/// `values[i]` is the highest value equivalent to the i-th non-empty HDR bucket (ascending) —
/// what `Histogram::value_at_quantile` and `iter_recorded().value_iterated_to()` report for
/// that bucket — and `counts[i]` its count. `quantileExactWeighted(q)(value, weight)` over
/// `ARRAY JOIN values AS value, counts AS weight` therefore returns, for any set of rows, exactly
/// what `value_at_quantile(q)` returns for the sum of their histograms (both take the first
/// bucket whose cumulative count reaches ⌈q·N⌉).
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct HistogramRow {
    /// Campaign id.
    pub campaign_id: String,
    /// Agent id.
    pub agent_id: String,
    /// The agent's region.
    pub region: String,
    /// Sequence number of the batch the histogram came in.
    pub seq: u64,
    /// Index of the histogram in its batch (0-based).
    pub row_index: u32,
    /// Provider name.
    pub provider: String,
    /// Scenario name.
    pub scenario: String,
    /// Metric name ([`Metric::as_str`]).
    pub metric: String,
    /// Interval start, agent clock, UTC seconds.
    pub interval_start: u32,
    /// Interval start, agent clock, UTC µs.
    pub start_unix_us: u64,
    /// Interval end, agent clock, UTC seconds.
    pub interval_end: u32,
    /// Interval end, agent clock, UTC µs.
    pub end_unix_us: u64,
    /// The batch's clock offset (coordinator − agent), µs.
    pub clock_offset_us: i64,
    /// Values recorded in the interval.
    pub count: u64,
    /// Highest equivalent value of each non-empty bucket, µs, ascending.
    pub values: Vec<u64>,
    /// Count of each bucket of `values`.
    pub counts: Vec<u64>,
    /// The histogram, HdrHistogram V2 + DEFLATE (binary in a `String` column).
    #[serde(with = "bytes_as_string")]
    pub hist_v2: Vec<u8>,
    /// Named time window, `""` when none.
    pub window: String,
    /// Sweep step (0-based), 0 otherwise (migration 0003).
    pub step: u32,
}

/// The non-empty buckets of `h`, ascending: (highest equivalent value, count) as two arrays.
/// One pass over `h` (`iter_recorded`).
pub fn buckets(h: &Histogram<u64>) -> (Vec<u64>, Vec<u64>) {
    let mut values = Vec::with_capacity(64);
    let mut counts = Vec::with_capacity(64);
    for v in h.iter_recorded() {
        // value_iterated_to is the bucket's highest equivalent value; say so explicitly, so a
        // change of the iterator's convention cannot silently shift percentiles.
        values.push(h.highest_equivalent(v.value_iterated_to()));
        counts.push(v.count_at_value());
    }
    (values, counts)
}

impl HistogramRow {
    /// The row of interval histogram `h` under `hist_key`, `row_index`-th of batch `key`,
    /// covering [`start_agent_unix_us`, `end_agent_unix_us`) on the agent's clock (UTC µs).
    /// The window label comes from `key.window_label` (called with the coordinator-clock
    /// interval start).
    ///
    /// # Errors
    /// [`StoreError::Histogram`] if the histogram cannot be encoded.
    pub fn from_histogram(
        key: &BatchKey<'_>,
        row_index: u32,
        hist_key: &HistKey,
        h: &Histogram<u64>,
        start_agent_unix_us: i64,
        end_agent_unix_us: i64,
    ) -> Result<Self, StoreError> {
        Ok(Self::from_encoded(
            key,
            row_index,
            hist_key,
            h,
            hist::encode_v2(h)?,
            start_agent_unix_us,
            end_agent_unix_us,
        ))
    }

    /// As [`HistogramRow::from_histogram`], but storing `hist_v2`, bytes that already encode
    /// `h` (the agent's own V2 blob, which `h` was decoded from), instead of encoding `h` again.
    pub fn from_encoded(
        key: &BatchKey<'_>,
        row_index: u32,
        hist_key: &HistKey,
        h: &Histogram<u64>,
        hist_v2: Vec<u8>,
        start_agent_unix_us: i64,
        end_agent_unix_us: i64,
    ) -> Self {
        let (values, counts) = buckets(h);
        Self::with_buckets(
            key,
            row_index,
            hist_key,
            (h.len(), values, counts),
            hist_v2,
            start_agent_unix_us,
            end_agent_unix_us,
        )
    }

    /// The row with `count`, `values` and `counts` given (`buckets`).
    fn with_buckets(
        key: &BatchKey<'_>,
        row_index: u32,
        hist_key: &HistKey,
        (count, values, counts): (u64, Vec<u64>, Vec<u64>),
        hist_v2: Vec<u8>,
        start_agent_unix_us: i64,
        end_agent_unix_us: i64,
    ) -> Self {
        HistogramRow {
            campaign_id: key.campaign_id.to_string(),
            agent_id: key.agent_id.to_string(),
            region: key.region.to_string(),
            seq: key.seq,
            row_index,
            provider: hist_key.provider.clone(),
            scenario: hist_key.scenario.clone(),
            metric: hist_key.metric.as_str().to_string(),
            interval_start: datetime_secs(start_agent_unix_us),
            start_unix_us: unsigned_us(start_agent_unix_us),
            interval_end: datetime_secs(end_agent_unix_us),
            end_unix_us: unsigned_us(end_agent_unix_us),
            clock_offset_us: key.clock_offset_us,
            count,
            values,
            counts,
            hist_v2,
            window: key.window_for(start_agent_unix_us.saturating_add(key.clock_offset_us)),
            step: hist_key.step,
        }
    }

    /// The row of wire histogram `pb` (an agent's `IntervalHistogram`), `row_index`-th of
    /// batch `key`: the same row as [`HistogramRow::from_histogram`] of
    /// `wire::histogram_from_pb(pb)`, except that `hist_v2` is the agent's blob as sent (it
    /// decodes to the same histogram) rather than a re-encoding. `values`, `counts` and `count`
    /// come from [`latmesh_core::hist_sparse::decode_v2_sparse`]: one walk over the blob's
    /// encoded counts, no dense histogram (a blob with other bounds than latmesh's is decoded
    /// densely into latmesh's, as `histogram_from_pb` does).
    ///
    /// # Errors
    /// [`latmesh_core::wire::WireError`] for an unknown metric or undecodable bytes.
    pub fn from_pb(
        key: &BatchKey<'_>,
        row_index: u32,
        pb: &latmesh_proto::pb::IntervalHistogram,
    ) -> Result<Self, latmesh_core::wire::WireError> {
        let (hist_key, sparse) = latmesh_core::wire::sparse_histogram_from_pb(pb)?;
        let count = sparse.len();
        let (values, counts) = sparse.into_arrays();
        Ok(Self::with_buckets(
            key,
            row_index,
            &hist_key,
            (count, values, counts),
            pb.hist_v2.clone(),
            pb.start_agent_unix_us,
            pb.end_agent_unix_us,
        ))
    }

    /// The histogram's key, `None` for an unknown metric name.
    pub fn key(&self) -> Option<HistKey> {
        Some(HistKey {
            provider: self.provider.clone(),
            scenario: self.scenario.clone(),
            metric: Metric::parse(&self.metric)?,
            step: self.step,
        })
    }

    /// Decodes `hist_v2`.
    ///
    /// # Errors
    /// [`StoreError::Histogram`] for bytes that are not a latmesh histogram.
    pub fn decode(&self) -> Result<Histogram<u64>, StoreError> {
        Ok(hist::decode_v2(&self.hist_v2)?)
    }

    /// Rebuilds the histogram from `values` and `counts` (each value falls back into its own
    /// bucket); equals [`HistogramRow::decode`] for rows written by latmesh.
    pub fn from_arrays(&self) -> Histogram<u64> {
        let mut h = hist::new_histogram();
        for (&v, &n) in self.values.iter().zip(&self.counts) {
            h.record_n(v.clamp(hist::LOWEST_US, hist::HIGHEST_US), n)
                .expect("value clamped into range");
        }
        h
    }
}

/// Serde for a `Vec<u8>` in a ClickHouse `String` column (length-prefixed bytes in RowBinary,
/// instead of serde's default sequence, which would be `Array(UInt8)`).
mod bytes_as_string {
    use serde::de::{Error, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Vec<u8>, E> {
                Ok(v.as_bytes().to_vec())
            }
            fn visit_string<E: Error>(self, v: String) -> Result<Vec<u8>, E> {
                Ok(v.into_bytes())
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// A row of `compat_results`: one compatibility check of one provider in one `latmesh compat`
/// run ([`crate::compat::insert_compat_run`]).
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct CompatResultRow {
    /// The run's id.
    pub run_id: String,
    /// The campaign it belongs to.
    pub campaign_id: String,
    /// That campaign's name.
    pub campaign_name: String,
    /// Where the checks ran from.
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// The provider's API (`chat`, `anthropic`, `responses`; empty when unknown).
    pub api: String,
    /// The check ([`CompatCheck::as_str`]).
    pub check: String,
    /// Its verdict ([`Verdict::as_str`]).
    pub verdict: String,
    /// Evidence: HTTP status of the deciding response.
    pub http_status: Option<u16>,
    /// Evidence: the field seen or missing.
    pub field: Option<String>,
    /// Evidence: what was seen, in words (≤ [`latmesh_core::compat::MAX_EVIDENCE_BYTES`],
    /// scrubbed).
    pub message: String,
    /// [`latmesh_core::compat::COMPAT_CHECKS_VERSION`] of the run.
    pub checks_version: u32,
    /// The run's start, UTC seconds.
    pub time: u32,
    /// The run's start, UTC µs.
    pub time_us: u64,
    /// Samples that passed ([`latmesh_core::compat::SampleTally`]; all four 0 in rows
    /// written before they were counted).
    pub samples_pass: u32,
    /// Samples that failed.
    pub samples_fail: u32,
    /// Samples refused as not offered.
    pub samples_not_offered: u32,
    /// Samples that could not decide.
    pub samples_inconclusive: u32,
}

impl CompatResultRow {
    /// The row of `r` in `run`, whose provider speaks `api`.
    pub fn new(run: &CompatRun, api: &str, r: &CompatResult) -> Self {
        CompatResultRow {
            run_id: run.run_id.clone(),
            campaign_id: run.campaign_id.clone(),
            campaign_name: run.campaign_name.clone(),
            region: run.region.clone(),
            provider: r.provider.clone(),
            api: api.to_string(),
            check: r.check.as_str().to_string(),
            verdict: r.verdict.as_str().to_string(),
            http_status: r.evidence.http_status,
            field: r.evidence.field.clone(),
            message: r.evidence.message.clone(),
            checks_version: run.checks_version,
            time: datetime_secs(run.started_unix_us),
            time_us: unsigned_us(run.started_unix_us),
            samples_pass: r.samples.pass,
            samples_fail: r.samples.fail,
            samples_not_offered: r.samples.not_offered,
            samples_inconclusive: r.samples.inconclusive,
        }
    }

    /// The result it stores; `None` for a check this build does not know (a newer
    /// [`latmesh_core::compat::COMPAT_CHECKS_VERSION`]). An unknown verdict reads as
    /// `inconclusive`; a row written before samples were counted as one sample of its verdict.
    pub fn to_result(&self) -> Option<CompatResult> {
        let verdict = Verdict::parse(&self.verdict).unwrap_or(Verdict::Inconclusive);
        let counted = SampleTally {
            pass: self.samples_pass,
            fail: self.samples_fail,
            not_offered: self.samples_not_offered,
            inconclusive: self.samples_inconclusive,
        };
        Some(CompatResult {
            provider: self.provider.clone(),
            check: CompatCheck::parse(&self.check)?,
            verdict,
            evidence: Evidence {
                http_status: self.http_status,
                field: self.field.clone(),
                message: self.message.clone(),
            },
            samples: if counted.taken() == 0 {
                SampleTally::of(verdict)
            } else {
                counted
            },
        })
    }
}

/// A row of `quality_samples`: one sampled answer of one provider to one prompt of the
/// quality set in one `latmesh compat` run.
#[derive(Clone, Debug, PartialEq, clickhouse::Row, Serialize, Deserialize)]
pub struct QualitySampleRow {
    /// The run's id.
    pub run_id: String,
    /// The campaign it belongs to.
    pub campaign_id: String,
    /// Provider name.
    pub provider: String,
    /// Where the run ran from.
    pub region: String,
    /// The prompt's id in the set.
    pub prompt_id: String,
    /// 0-based sample index.
    pub sample: u32,
    /// How the request ended ([`Outcome::as_str`]).
    pub outcome: String,
    /// 1 right, 0 wrong, `None` not graded.
    pub correct: Option<u8>,
    /// The normalized final answer (≤ 64 bytes, scrubbed).
    pub answer: String,
    /// Hash of the whole normalized answer.
    pub answer_hash: String,
    /// Output tokens of the reply.
    pub output_tokens: u32,
    /// The `model` the provider answered with.
    pub answered_model: Option<String>,
    /// The prompt set's version.
    pub quality_set: String,
    /// The run's start, UTC seconds.
    pub time: u32,
    /// The run's start, UTC µs.
    pub time_us: u64,
}

impl QualitySampleRow {
    /// The row of `s` in `run`.
    pub fn new(run: &CompatRun, s: &QualitySample) -> Self {
        QualitySampleRow {
            run_id: run.run_id.clone(),
            campaign_id: run.campaign_id.clone(),
            provider: s.provider.clone(),
            region: run.region.clone(),
            prompt_id: s.prompt_id.clone(),
            sample: s.sample,
            outcome: s.outcome.as_str().to_string(),
            correct: s.correct.map(u8::from),
            answer: s.answer.clone(),
            answer_hash: s.answer_hash.clone(),
            output_tokens: s.output_tokens,
            answered_model: s.answered_model.clone(),
            quality_set: run.quality_set.clone(),
            time: datetime_secs(run.started_unix_us),
            time_us: unsigned_us(run.started_unix_us),
        }
    }

    /// The sample it stores (an outcome this build does not know reads as `protocol_error`,
    /// not graded).
    pub fn to_sample(&self) -> QualitySample {
        let outcome = Outcome::parse(&self.outcome).unwrap_or(Outcome::ProtocolError);
        QualitySample {
            provider: self.provider.clone(),
            prompt_id: self.prompt_id.clone(),
            sample: self.sample,
            outcome,
            correct: self
                .correct
                .filter(|_| outcome == Outcome::Ok)
                .map(|c| c != 0),
            answer: self.answer.clone(),
            answer_hash: self.answer_hash.clone(),
            output_tokens: self.output_tokens,
            answered_model: self.answered_model.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_from_the_wire_blob_equal_rows_from_the_decoded_histogram() {
        let key = BatchKey::new("c", "a", "r", 1_000, 3);
        let hist_key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Itl,
            step: 0,
        };
        let mut ours = hist::new_histogram();
        // A histogram in other bounds (the row holds it in latmesh's).
        let mut other = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3).unwrap();
        for v in [
            1u64, 2, 999, 1000, 2047, 2049, 123_457, 3_000_000, 9_999_999,
        ] {
            ours.record_n(v, v % 5 + 1).unwrap();
            other.record_n(v, v % 3 + 1).unwrap();
        }
        // Edges: the lowest and highest values, the top of the last bucket, a value 0, a
        // busy interval's ~1,000 buckets.
        let mut edges = hist::new_histogram();
        for v in [0, 1, hist::HIGHEST_US, u64::from(u32::MAX)] {
            edges.record_n(v, 3).unwrap();
        }
        let mut busy = hist::new_histogram();
        for i in 1..30_000u64 {
            busy.record(i * i % 2_000_003 * 50 + i).unwrap();
        }
        for h in [ours, other, hist::new_histogram(), edges, busy] {
            let mut wire = latmesh_core::wire::histogram_to_pb(&hist_key, &h, 5, 9).unwrap();
            let mut plain = Vec::new();
            hdrhistogram::serialization::Serializer::serialize(
                &mut hdrhistogram::serialization::V2Serializer::new(),
                &h,
                &mut plain,
            )
            .unwrap();
            // As an agent sends it (V2 + DEFLATE), and plain V2.
            for blob in [wire.hist_v2.clone(), plain] {
                wire.hist_v2 = blob;
                let row = HistogramRow::from_pb(&key, 2, &wire).unwrap();
                let (k, decoded) = latmesh_core::wire::histogram_from_pb(&wire).unwrap();
                let mut want = HistogramRow::from_histogram(&key, 2, &k, &decoded, 5, 9).unwrap();
                assert_eq!(row.hist_v2, wire.hist_v2);
                want.hist_v2 = wire.hist_v2.clone();
                assert_eq!(row, want);
                assert_eq!(row.decode().unwrap(), decoded);
            }
        }
        let mut bad =
            latmesh_core::wire::histogram_to_pb(&hist_key, &hist::new_histogram(), 0, 1).unwrap();
        bad.hist_v2 = b"not a histogram".to_vec();
        assert!(HistogramRow::from_pb(&key, 0, &bad).is_err());
        bad.hist_v2 = latmesh_core::wire::histogram_to_pb(&hist_key, &hist::new_histogram(), 0, 1)
            .unwrap()
            .hist_v2;
        bad.metric = "latency".into();
        assert!(HistogramRow::from_pb(&key, 0, &bad).is_err());
    }

    #[test]
    fn bucket_values_are_what_value_at_quantile_reports() {
        let mut h = hist::new_histogram();
        for v in [
            1u64, 999, 1000, 2047, 2048, 2049, 123_456, 123_457, 3_000_000,
        ] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let (values, counts) = buckets(&h);
        assert_eq!(counts.iter().sum::<u64>(), h.len());
        assert!(values.windows(2).all(|w| w[0] < w[1]));
        for v in &values {
            assert_eq!(h.highest_equivalent(*v), *v);
        }
        // Every quantile equals the weighted quantile over (values, counts) with the same rule.
        let total = h.len();
        for q in [0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let target = ((q * total as f64).ceil() as u64).max(1);
            let mut acc = 0;
            let mut got = 0;
            for (v, n) in values.iter().zip(&counts) {
                acc += n;
                if acc >= target {
                    got = *v;
                    break;
                }
            }
            assert_eq!(got, h.value_at_quantile(q), "q={q}");
        }
    }
}
