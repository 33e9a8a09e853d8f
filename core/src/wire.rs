//! Conversions between domain types and the generated wire types (`latmesh_proto::pb`).

use latmesh_proto::pb;

use crate::hist::sparse::{self as hist_sparse, SparseHistogram};
use crate::hist::{self, HistError, HistKey};
use crate::load::LoadKind;
use crate::metrics::Metric;
use crate::record::{Outcome, OutputTokensSource, ProbeRecord, Usage};

/// Largest gRPC message, bytes, that either side of the agent session and the control API
/// decodes or encodes (tonic's `max_decoding_message_size` and `max_encoding_message_size`,
/// set explicitly from this on the coordinator's servers, the agent's client and the CLI's
/// client). A larger message fails the whole stream, so nothing may be built that can reach it.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Largest encoded `ResultBatch` an agent builds, bytes (`prost::Message::encoded_len`): a
/// quarter of [`MAX_MESSAGE_BYTES`], room for the message envelope and fields added later.
/// A busy interval is split into several batches (consecutive seqs) to stay under it; a
/// single record or histogram larger than this alone is quarantined by the agent, never sent.
pub const MAX_BATCH_BYTES: usize = MAX_MESSAGE_BYTES / 4;

/// Most API key variable names an agent's hello lists (`AgentHello.key_env_names`): the
/// coordinator refuses a hello with more, the agent sends at most this many (a host's
/// environment rarely has more variables; a Kubernetes pod's service variables can reach a
/// few hundred).
pub const MAX_KEY_ENV_NAMES: usize = 1024;

/// Longest API key variable name in an agent's hello, bytes: the coordinator refuses a
/// longer one, the agent leaves longer ones out (no provider's `api_key_env` is that long).
pub const MAX_KEY_ENV_NAME_BYTES: usize = 128;

/// Longest `BatchRejected.reason`, bytes.
pub const MAX_REJECT_REASON_BYTES: usize = 256;

/// `reason` cut to at most [`MAX_REJECT_REASON_BYTES`] on a character boundary (a refusal's
/// reason may quote what the agent sent).
pub fn reject_reason(reason: &str) -> &str {
    let mut cut = reason.len().min(MAX_REJECT_REASON_BYTES);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    &reason[..cut]
}

/// A wire message that does not convert.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// An unknown outcome name.
    #[error("unknown outcome {0:?}")]
    Outcome(String),
    /// An unknown metric name.
    #[error("unknown metric {0:?}")]
    Metric(String),
    /// A histogram that does not decode.
    #[error(transparent)]
    Hist(#[from] HistError),
    /// An unknown load model name.
    #[error("unknown load model {0:?}")]
    Load(String),
    /// A record's `target_rps` is negative or not a number.
    #[error("target_rps {0} is not a rate (a finite number ≥ 0)")]
    TargetRps(f64),
    /// A status code out of range.
    #[error("http_status {0} is not an HTTP status")]
    Status(u32),
}

impl From<&ProbeRecord> for pb::ProbeRecord {
    fn from(r: &ProbeRecord) -> Self {
        pb::ProbeRecord {
            round: r.round,
            slot: r.slot,
            provider: r.provider.clone(),
            scenario: r.scenario.clone(),
            prompt_id: r.prompt_id.clone(),
            attempt: r.attempt,
            stream: r.stream,
            send_agent_unix_us: r.send_agent_unix_us,
            sched_lag_us: r.sched_lag_us,
            outcome: r.outcome().as_str().to_string(),
            http_status: r.http_status.map(u32::from),
            ttfb_us: r.ttfb_us,
            ttft_us: r.ttft_us,
            ttfc_us: r.ttfc_us,
            e2e_us: r.e2e_us,
            tpot_us: r.tpot_us,
            decode_tps: r.decode_tps,
            output_tokens: r.output_tokens,
            tokens_from_usage: r.tokens_from_usage,
            content_chunks: r.content_chunks,
            reasoning_chunks: r.reasoning_chunks,
            tool_call_chunks: r.tool_call_chunks,
            prompt_tokens: r.usage.prompt_tokens,
            completion_tokens: r.usage.completion_tokens,
            reasoning_tokens: r.usage.reasoning_tokens,
            cached_tokens: r.usage.cached_tokens,
            finish_reason: r.finish_reason.clone(),
            saw_done: r.saw_done,
            retry_after_s: r.retry_after_s,
            error_type: r.error_type.clone(),
            error_message: r.error_message.clone(),
            itl_max_us: r.itl_max_us,
            comment_lines: r.comment_lines,
            response_bytes: r.response_bytes,
            final_attempt: r.final_attempt,
            request_latency_us: r.request_latency_us,
            turn: r.turn,
            cache_nonce: r.cache_nonce,
            conn_reused: r.conn_reused,
            conn_retried: r.conn_retried,
            usage_requested: Some(r.usage_requested),
            dns_us: r.dns_us,
            connect_us: r.connect_us,
            tls_us: r.tls_us,
            first_byte_us: r.first_byte_us,
            first_nonblank_us: r.first_nonblank_us,
            reasoning_us: r.reasoning_us,
            token_payloads: r.token_payloads,
            usage_chunk_delta: r.usage_chunk_delta,
            error_code: r.error_code.clone(),
            load: r.load.as_str().to_string(),
            step: r.step,
            concurrency: r.concurrency,
            failover: r.failover,
            output_tokens_source: r.output_tokens_source.as_str().to_string(),
            answered_model: r.answered_model.clone(),
            system_fingerprint: r.system_fingerprint.clone(),
            cut_fields: r.cut_fields.clone(),
            input_tokens: r.input_tokens,
            warmup: r.warmup,
            ttst_us: r.ttst_us,
            target_rps: r.target_rps,
            slo_met: r.slo_met,
            phase_start_in_flight: r.phase_start_in_flight,
        }
    }
}

impl TryFrom<pb::ProbeRecord> for ProbeRecord {
    type Error = WireError;

    fn try_from(r: pb::ProbeRecord) -> Result<Self, WireError> {
        let outcome =
            Outcome::parse(&r.outcome).ok_or_else(|| WireError::Outcome(r.outcome.clone()))?;
        let http_status = r
            .http_status
            .map(|s| {
                u16::try_from(s)
                    .ok()
                    .filter(|s| (100..=999).contains(s))
                    .ok_or(WireError::Status(s))
            })
            .transpose()?;
        let load = LoadKind::parse(&r.load).ok_or_else(|| WireError::Load(r.load.clone()))?;
        let target_rps = Some(r.target_rps)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or(WireError::TargetRps(r.target_rps))?;
        Ok(ProbeRecord {
            load,
            step: r.step,
            concurrency: r.concurrency,
            failover: r.failover,
            round: r.round,
            slot: r.slot,
            provider: r.provider,
            scenario: r.scenario,
            prompt_id: r.prompt_id,
            attempt: r.attempt,
            stream: r.stream,
            send_agent_unix_us: r.send_agent_unix_us,
            sched_lag_us: r.sched_lag_us,
            outcome: Some(outcome),
            http_status,
            ttfb_us: r.ttfb_us,
            ttft_us: r.ttft_us,
            ttfc_us: r.ttfc_us,
            e2e_us: r.e2e_us,
            tpot_us: r.tpot_us,
            decode_tps: r.decode_tps,
            output_tokens: r.output_tokens,
            tokens_from_usage: r.tokens_from_usage,
            content_chunks: r.content_chunks,
            reasoning_chunks: r.reasoning_chunks,
            tool_call_chunks: r.tool_call_chunks,
            usage: Usage {
                prompt_tokens: r.prompt_tokens,
                completion_tokens: r.completion_tokens,
                // Checked: counts from an agent are not trusted to be small; a total that
                // does not fit is left out rather than wrapped.
                total_tokens: match (r.prompt_tokens, r.completion_tokens) {
                    (Some(p), Some(c)) => p.checked_add(c),
                    _ => None,
                },
                reasoning_tokens: r.reasoning_tokens,
                cached_tokens: r.cached_tokens,
            },
            finish_reason: r.finish_reason,
            saw_done: r.saw_done,
            retry_after_s: r.retry_after_s,
            error_type: r.error_type,
            error_message: r.error_message,
            itl_max_us: r.itl_max_us,
            comment_lines: r.comment_lines,
            response_bytes: r.response_bytes,
            final_attempt: r.final_attempt,
            request_latency_us: r.request_latency_us,
            turn: r.turn,
            cache_nonce: r.cache_nonce,
            conn_reused: r.conn_reused,
            conn_retried: r.conn_retried,
            dns_us: r.dns_us,
            connect_us: r.connect_us,
            tls_us: r.tls_us,
            first_byte_us: r.first_byte_us,
            first_nonblank_us: r.first_nonblank_us,
            reasoning_us: r.reasoning_us,
            token_payloads: r.token_payloads,
            usage_chunk_delta: r.usage_chunk_delta,
            error_code: r.error_code,
            output_tokens_source: OutputTokensSource::parse_or_flag(
                &r.output_tokens_source,
                r.tokens_from_usage,
            ),
            answered_model: r.answered_model,
            system_fingerprint: r.system_fingerprint,
            cut_fields: r.cut_fields,
            usage_requested: r.usage_requested.unwrap_or(true),
            input_tokens: r.input_tokens,
            warmup: r.warmup,
            ttst_us: r.ttst_us,
            target_rps,
            slo_met: r.slo_met,
            phase_start_in_flight: r.phase_start_in_flight,
        })
    }
}

/// Encodes one interval histogram for the wire.
///
/// # Errors
/// [`WireError::Hist`] if encoding fails.
pub fn histogram_to_pb(
    key: &HistKey,
    h: &hdrhistogram::Histogram<u64>,
    start_agent_unix_us: i64,
    end_agent_unix_us: i64,
) -> Result<pb::IntervalHistogram, WireError> {
    Ok(pb::IntervalHistogram {
        provider: key.provider.clone(),
        scenario: key.scenario.clone(),
        metric: key.metric.as_str().to_string(),
        start_agent_unix_us,
        end_agent_unix_us,
        hist_v2: hist::encode_v2(h)?,
        step: key.step,
    })
}

/// The key of one wire histogram.
///
/// # Errors
/// [`WireError::Metric`] for an unknown metric.
pub fn histogram_key_from_pb(h: &pb::IntervalHistogram) -> Result<HistKey, WireError> {
    let metric = Metric::parse(&h.metric).ok_or_else(|| WireError::Metric(h.metric.clone()))?;
    Ok(HistKey {
        provider: h.provider.clone(),
        scenario: h.scenario.clone(),
        metric,
        step: h.step,
    })
}

/// Decodes one wire histogram into its key and histogram.
///
/// # Errors
/// [`WireError::Metric`] for an unknown metric, [`WireError::Hist`] for undecodable bytes.
pub fn histogram_from_pb(
    h: &pb::IntervalHistogram,
) -> Result<(HistKey, hdrhistogram::Histogram<u64>), WireError> {
    let key = histogram_key_from_pb(h)?;
    Ok((key, hist::decode_v2(&h.hist_v2)?))
}

/// Decodes one wire histogram into its key and its non-empty buckets
/// ([`hist_sparse::decode_v2_sparse`]: no dense histogram for blobs in latmesh's bounds). The
/// buckets are exactly those of [`histogram_from_pb`]'s histogram, and the same messages are
/// rejected.
///
/// # Errors
/// [`WireError::Metric`] for an unknown metric, [`WireError::Hist`] for undecodable bytes.
pub fn sparse_histogram_from_pb(
    h: &pb::IntervalHistogram,
) -> Result<(HistKey, SparseHistogram), WireError> {
    let key = histogram_key_from_pb(h)?;
    Ok((key, hist_sparse::decode_v2_sparse(&h.hist_v2)?))
}

/// [`sparse_histogram_from_pb`] for a histogram from an untrusted peer (the coordinator's
/// intake): [`hist_sparse::decode_v2_sparse_strict`], which refuses a blob whose header does
/// not carry latmesh's bounds before reading its payload.
///
/// # Errors
/// As [`sparse_histogram_from_pb`], and [`WireError::Hist`] for foreign bounds or an
/// over-long payload.
pub fn sparse_histogram_from_pb_strict(
    h: &pb::IntervalHistogram,
) -> Result<(HistKey, SparseHistogram), WireError> {
    let key = histogram_key_from_pb(h)?;
    Ok((key, hist_sparse::decode_v2_sparse_strict(&h.hist_v2)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let rec = ProbeRecord {
            load: LoadKind::Sweep,
            step: 2,
            concurrency: 16,
            failover: true,
            round: 2,
            slot: 5,
            provider: "p".into(),
            scenario: "s".into(),
            prompt_id: "short-qa-en-001".into(),
            attempt: 1,
            stream: true,
            send_agent_unix_us: 1_700_000_000_000_000,
            sched_lag_us: 40,
            outcome: Some(Outcome::Throttled),
            http_status: Some(429),
            ttfb_us: Some(1200),
            retry_after_s: Some(7.0),
            usage: Usage {
                prompt_tokens: Some(9),
                completion_tokens: Some(3),
                total_tokens: Some(12),
                ..Default::default()
            },
            finish_reason: Some("stop".into()),
            ..Default::default()
        };
        let back = ProbeRecord::try_from(pb::ProbeRecord::from(&rec)).unwrap();
        assert_eq!(back, rec);
        // What answered, and where the token count came from.
        let rec = ProbeRecord {
            output_tokens: 31,
            output_tokens_source: OutputTokensSource::PayloadsOverUsage,
            answered_model: Some("deepseek-chat-v3-0324".into()),
            system_fingerprint: Some("fp_1".into()),
            cut_fields: vec!["finish_reason".into(), "usage.total_tokens".into()],
            usage_requested: true,
            ..rec
        };
        let back = ProbeRecord::try_from(pb::ProbeRecord::from(&rec)).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn a_total_that_does_not_fit_is_left_out_not_wrapped() {
        let mut wire = pb::ProbeRecord::from(&ProbeRecord::default());
        wire.prompt_tokens = Some(u32::MAX);
        wire.completion_tokens = Some(7);
        let rec = ProbeRecord::try_from(wire).unwrap();
        assert_eq!(rec.usage.total_tokens, None);
        assert_eq!(rec.usage.prompt_tokens, Some(u32::MAX));
    }

    #[test]
    fn records_of_older_agents_read_their_token_source_from_the_flag() {
        for (flag, source) in [
            (true, OutputTokensSource::Usage),
            (false, OutputTokensSource::Payloads),
        ] {
            let mut wire = pb::ProbeRecord::from(&ProbeRecord::default());
            wire.output_tokens_source = String::new();
            wire.tokens_from_usage = flag;
            let rec = ProbeRecord::try_from(wire).unwrap();
            assert_eq!(rec.output_tokens_source, source);
            assert_eq!((rec.answered_model, rec.system_fingerprint), (None, None));
        }
        // Older agents always asked for usage: no field reads as asked; a `false` travels.
        let mut wire = pb::ProbeRecord::from(&ProbeRecord::default());
        assert_eq!(wire.usage_requested, Some(false));
        assert!(!ProbeRecord::try_from(wire.clone()).unwrap().usage_requested);
        wire.usage_requested = None;
        assert!(ProbeRecord::try_from(wire).unwrap().usage_requested);
        let mut v = serde_json::to_value(ProbeRecord::default()).unwrap();
        assert_eq!(
            v.as_object_mut().unwrap().remove("usage_requested"),
            Some(false.into())
        );
        let json: ProbeRecord = serde_json::from_value(v).unwrap();
        assert!(json.usage_requested);
    }

    #[test]
    fn bad_wire_values_are_rejected() {
        let mut wire = pb::ProbeRecord::from(&ProbeRecord::default());
        wire.outcome = "great".into();
        assert!(matches!(
            ProbeRecord::try_from(wire.clone()),
            Err(WireError::Outcome(_))
        ));
        wire.outcome = "ok".into();
        // Any three-digit status is one an HTTP client can report (the coordinator stores
        // it as the provider sent it); nothing else is.
        for status in [100, 799, 999] {
            wire.http_status = Some(status);
            let rec = ProbeRecord::try_from(wire.clone()).unwrap();
            assert_eq!(rec.http_status, Some(status as u16));
        }
        wire.http_status = Some(1000);
        assert!(matches!(
            ProbeRecord::try_from(wire.clone()),
            Err(WireError::Status(1000))
        ));
        wire.http_status = Some(70_000);
        assert!(matches!(
            ProbeRecord::try_from(wire),
            Err(WireError::Status(70_000))
        ));
    }

    #[test]
    fn histograms_round_trip() {
        let key = HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Itl,
            step: 3,
        };
        let mut h = hist::new_histogram();
        h.record(12_345).unwrap();
        let wire = histogram_to_pb(&key, &h, 1, 2).unwrap();
        let (k, back) = histogram_from_pb(&wire).unwrap();
        assert_eq!(k, key);
        assert_eq!(back.len(), 1);
        let (k, sparse) = sparse_histogram_from_pb(&wire).unwrap();
        assert_eq!(k, key);
        assert_eq!(sparse.iter().collect::<Vec<_>>(), [(12_351, 1)]);
        assert_eq!(sparse.to_histogram(), back);
        let mut bad = wire.clone();
        bad.metric = "latency".into();
        assert!(histogram_from_pb(&bad).is_err());
        assert!(matches!(
            sparse_histogram_from_pb(&bad),
            Err(WireError::Metric(_))
        ));
        let mut bad = wire;
        bad.hist_v2.truncate(12);
        assert!(matches!(
            histogram_from_pb(&bad),
            Err(WireError::Hist(HistError::Decode(_)))
        ));
        assert!(matches!(
            sparse_histogram_from_pb(&bad),
            Err(WireError::Hist(HistError::Decode(_)))
        ));
    }
}
