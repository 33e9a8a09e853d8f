//! The end of a measurement ([`Measurement::finish`]): the outcome (the first failure, or
//! what the stream's end says), and the record assembled from the state: timings from
//! `t_send`, the output token count and its source, usage, TPOT and decode rate (over the
//! streamed tokens: [`super::decode`]).

use std::time::Instant;

use latmesh_core::metrics;
use latmesh_core::output_tokens::output_tokens;
use latmesh_core::provider_bounds;
use latmesh_core::record::Outcome;

use crate::probe::ProbeResult;
use crate::probe::outcome::{BodyEnd, Failure, Scrubber, StreamFacts, classify_stream};

use super::body::Measurement;
use super::head::Head;

impl Measurement {
    /// The result, given how reading stopped and when (`end_at`: the instant of the end of
    /// the body, for `e2e` after a finish_reason or of a whole body).
    pub fn finish(
        self,
        head: &Head,
        end: BodyEnd,
        end_at: Option<Instant>,
        scrub: &Scrubber<'_>,
    ) -> ProbeResult {
        debug_assert_eq!(head.t_send, self.t_send);
        let mut st = self.st;
        st.untagged_reasoning_is_content();
        let failure = st.failure.clone().or_else(|| {
            if st.whole_body {
                return match end {
                    BodyEnd::Eof => None,
                    BodyEnd::TimedOut(o) => {
                        Some(Failure::new(o, crate::probe::outcome::timeout_message(o)))
                    }
                    _ => Some(Failure::new(Outcome::Truncated, "body ended early")),
                };
            }
            let facts = StreamFacts {
                saw_done: st.saw_done(),
                finish_reason: st.finish_reason.as_deref(),
                payloads: st.payloads,
                // Decoded: a compressed stream of nothing is an empty body.
                body_bytes: self.decoded_bytes,
                end,
            };
            classify_stream(&facts).err()
        });
        // An event stream that ended as an answer although not one of its payloads carried a
        // token latmesh reads, while the provider's usage counts output tokens: the answer
        // came somewhere no API defines as generated text (a whole document inside a start
        // or end event, a legacy field). Its timings would be an `ok` without TTFT and with
        // an E2E that looks fast: not a sample to decide with.
        let failure = failure.or_else(|| {
            let unread = st
                .usage
                .as_ref()
                .and_then(|u| u.completion_tokens)
                .filter(|&n| n > 0 && !st.whole_body && st.token_payloads == 0)?;
            Some(Failure::new(
                Outcome::ProtocolError,
                format!(
                    "the stream ended without any token in the fields the API streams generated text in, while usage counts {unread} output tokens"
                ),
            ))
        });
        let failure = failure.map(|mut f| {
            let cause = self
                .broken
                .as_ref()
                .filter(|_| matches!(f.outcome, Outcome::Truncated | Outcome::ConnectionError));
            if let Some(b) = cause {
                f.message = format!("{}: {b}", f.message);
            }
            f
        });
        let mut record = head.base_record(failure.as_ref());
        record.first_byte_us = self.body.first_byte.map(|t| head.us(t));
        record.first_nonblank_us = self.body.first_nonblank.map(|t| head.us(t));
        let e2e_at = if st.whole_body {
            end_at.filter(|_| end == BodyEnd::Eof)
        } else if let Some(d) = st.done_at {
            Some(d)
        } else if st.finish_reason.is_some() && matches!(end, BodyEnd::Eof | BodyEnd::Broken) {
            end_at
        } else {
            None
        };
        record.e2e_us = e2e_at.map(|t| head.us(t));
        if !st.whole_body {
            record.ttft_us = st.first_token.map(|(t, _)| head.us(t));
            record.ttst_us = st.second_token.map(|t| head.us(t));
            record.ttfc_us = st.first_content.map(|(t, _)| head.us(t));
            // Reasoning time: only when a reasoning payload came before the first content one.
            if let (Some(r), Some((_, c)), Some(ttft), Some(ttfc)) = (
                st.first_reasoning,
                st.first_content,
                record.ttft_us,
                record.ttfc_us,
            ) && r < c
            {
                record.reasoning_us = Some(ttfc.saturating_sub(ttft));
            }
        }
        // Absurd counts are dropped before anything is computed from them.
        let mut usage = st.usage.clone().unwrap_or_default();
        record.cut_fields = provider_bounds::bound_usage(&mut usage)
            .into_iter()
            .map(String::from)
            .collect();
        record.token_payloads = st.token_payloads;
        // A body read whole is one payload: its usage stands, and there is nothing to compare.
        let event_stream = !st.whole_body;
        let (tokens, source) = output_tokens(
            usage.completion_tokens,
            usage.reasoning_tokens,
            st.token_payloads,
            event_stream,
        );
        record.output_tokens = tokens;
        record.output_tokens_source = source;
        record.tokens_from_usage = source.from_usage();
        record.usage_chunk_delta = usage
            .completion_tokens
            .filter(|_| event_stream)
            .map(|n| i64::from(n) - i64::from(st.token_payloads));
        record.answered_model = st.answered_model.clone();
        record.system_fingerprint = st.system_fingerprint.clone();
        // Over the streamed tokens and span: reasoning generated but not streamed is left
        // out of both (`super::decode`).
        let decode = st.decode(tokens, source, &usage);
        let decode_from_us = decode.from.map(|t| head.us(t)).filter(|_| event_stream);
        if let (Some(from), Some(e2e), Some(n)) = (decode_from_us, record.e2e_us, decode.tokens) {
            record.tpot_us = metrics::tpot_us(from, e2e, n);
            record.decode_tps = metrics::decode_tps(from, e2e, n);
        }
        record.content_chunks = st.content_chunks;
        record.reasoning_chunks = st.reasoning_chunks;
        record.tool_call_chunks = st.tool_call_chunks;
        record.usage = usage;
        record.finish_reason = st.finish_reason.clone();
        record.saw_done = st.saw_done();
        record.itl_max_us = st.itl_gaps_us.iter().copied().max();
        record.comment_lines = self.parser.comment_lines();
        record.response_bytes = self.body.bytes;
        // Every provider value scrubbed and cut, what changed named in `cut_fields`.
        scrub.bound(&mut record);
        ProbeResult {
            record,
            t_send: Some(head.t_send),
            // A body read whole has no token timing.
            token_read_at: if st.whole_body {
                Vec::new()
            } else {
                st.token_read_at
            },
            first_output_payload_index: st.first_token.map(|(_, i)| i),
            first_content_payload_index: st.first_content.map(|(_, i)| i),
            decode_tokens: decode.tokens.filter(|_| event_stream),
            itl_gaps_us: st.itl_gaps_us,
            content_text: st.content_text,
            reasoning_text: st.reasoning_text,
            reasoning_field: st.reasoning_field,
            tool_calls: st.tool_calls,
            thinking_blocks: st.anthropic.into_thinking_blocks(),
            reasoning_items: st.reasoning_items,
            error_body_fields: Vec::new(),
        }
    }
}
