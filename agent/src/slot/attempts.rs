//! One logical request: its attempts, each waiting for the provider's caps, probed, recorded
//! and sent at once, until one is not retried (see the [slot documentation](super)).

use std::time::{Duration, Instant};

use latmesh_core::prompts::ThinkingBlock;
use latmesh_core::record::{Outcome, ProbeRecord};

use crate::clock::now_unix_us;
use crate::probe::{ProbeOptions, ProbeRequest, ProbeResult, Prober};

use super::env::{InFlight, SlotEnv};
use super::failover::{Again, Target};
use super::label::Label;
use super::spec::RecordTx;

/// The logical request's outcome and, when kept, its answer's content and reasoning.
pub(super) struct Answer {
    pub(super) outcome: Outcome,
    pub(super) content: String,
    pub(super) reasoning: String,
    /// An Anthropic answer's thinking blocks (empty for the other APIs).
    pub(super) thinking_blocks: Vec<ThinkingBlock>,
    /// Reasoning items (Responses API), passed back with `pass_reasoning`.
    pub(super) reasoning_items: Vec<serde_json::Value>,
}

/// One logical request: attempts until one is not retried (or, with failover, until the
/// chain is exhausted). Returns its final answer and the number of records sent.
#[allow(clippy::too_many_arguments)]
pub(super) async fn logical_request(
    prober: &Prober,
    targets: &[Target<'_>],
    opts: ProbeOptions,
    again: Again<'_>,
    label: &Label<'_>,
    turn: u32,
    mut intended: Instant,
    tx: &RecordTx,
    env: &SlotEnv,
) -> (Answer, u32) {
    let mut first: Option<Instant> = None;
    let mut attempt = 1u32;
    let (mut pos, mut tries) = (0usize, 1u32);
    // Only the tokens-per-minute cap needs it.
    let tokens = if targets.iter().any(|t| env.limits.is_limited(t.provider)) {
        estimate_tokens(&targets[0].req)
    } else {
        0
    };
    loop {
        let Target {
            provider,
            name,
            ref req,
        } = targets[pos];
        // Politeness: wait for the provider's caps (an open-loop arrival only until its
        // drop time). The wait is part of `sched_lag`.
        let drop_at = label.at.drop_at.filter(|_| attempt == 1 && turn == 1);
        let permit = tokio::select! {
            p = env.limits.acquire(provider, tokens, drop_at) => Some(p),
            _ = env.cancel.cancelled() => None,
        };
        let sched_lag_us = intended.elapsed().as_micros() as i64;
        let not_sent = match &permit {
            None => Some(Outcome::Cancelled),
            Some(None) => Some(Outcome::Dropped),
            Some(Some(_)) => None,
        };
        if let Some(outcome) = not_sent {
            let mut rec = ProbeRecord {
                outcome: Some(outcome),
                stream: req.stream,
                send_agent_unix_us: now_unix_us(),
                error_message: Some(match outcome {
                    Outcome::Dropped => format!(
                        "not sent: the provider's caps (in flight, rate, gap or Retry-After pause) held it {} ms past the intended send time",
                        sched_lag_us / 1000
                    ),
                    _ => "not sent: the campaign was cancelled while it waited for the provider's caps".into(),
                }),
                ..ProbeRecord::default()
            };
            label.fill(&mut rec, turn, attempt, sched_lag_us);
            rec.provider = name.to_string();
            rec.failover = matches!(again, Again::Failover(_));
            label.finish(&mut rec);
            let _ = tx.send((rec, Vec::new())).await;
            let answer = Answer {
                outcome,
                content: String::new(),
                reasoning: String::new(),
                thinking_blocks: Vec::new(),
                reasoning_items: Vec::new(),
            };
            return (answer, attempt);
        }
        let started = Instant::now();
        let first = *first.get_or_insert(started);
        let send_unix_us = now_unix_us();
        let result = {
            let _in_flight = InFlight::start(&env.in_flight);
            let _permit = permit;
            tokio::select! {
                r = prober.probe_with(req, opts) => r,
                _ = env.cancel.grace_over(env.cancel_grace) => aborted_record(send_unix_us, env.cancel_grace),
            }
        };
        let returned = Instant::now();
        env.shaping.after_attempt(
            provider,
            name,
            req.shape,
            &result.record,
            &result.error_body_fields,
        );
        let mut rec = result.record;
        label.fill(&mut rec, turn, attempt, sched_lag_us);
        rec.provider = name.to_string();
        rec.failover = matches!(again, Again::Failover(_));
        if rec.outcome() == Outcome::Throttled
            && let Some(s) = rec.retry_after_s.filter(|s| s.is_finite() && *s > 0.0)
        {
            env.limits
                .pause(provider, returned + Duration::from_secs_f64(s.min(3_600.0)));
        }
        if turn > 1
            && rec.outcome() == Outcome::Http4xx
            && matches!(rec.http_status, Some(400 | 413 | 422))
        {
            rec.outcome = Some(Outcome::HistoryRejected);
        }
        let outcome = rec.outcome();
        let end = rec.e2e_us.map_or(returned - started, Duration::from_micros);
        let latency_us = (started - first + end).as_micros() as u64;
        let next = again
            .next(
                attempt,
                tries,
                pos,
                targets.len(),
                outcome,
                rec.retry_after_s,
            )
            .filter(|_| env.cancel.cancelled_at().is_none());
        let wait_cancelled = match next {
            None => true,
            Some((_, w)) => {
                // The record waits with the request: a cancel during the wait makes it final.
                intended = Instant::now() + w;
                tokio::select! {
                    _ = tokio::time::sleep_until(intended.into()) => false,
                    _ = env.cancel.cancelled() => true,
                }
            }
        };
        if wait_cancelled {
            label.finish(&mut rec);
            rec.request_latency_us = Some(latency_us);
        }
        let _ = tx.send((rec, result.itl_gaps_us)).await;
        if wait_cancelled {
            let answer = Answer {
                outcome,
                content: result.content_text,
                reasoning: result.reasoning_text,
                thinking_blocks: result.thinking_blocks,
                reasoning_items: result.reasoning_items,
            };
            return (answer, attempt);
        }
        if let Some((next_pos, _)) = next {
            tries = if next_pos == pos { tries + 1 } else { 1 };
            pos = next_pos;
        }
        attempt += 1;
    }
}

/// Tokens a request may use, for the tokens-per-minute cap: its messages at ~4 bytes per
/// token plus `max_tokens`.
fn estimate_tokens(req: &ProbeRequest<'_>) -> u32 {
    let bytes: usize = req
        .messages
        .iter()
        .map(|m| m.content.len() + m.reasoning_content.as_ref().map_or(0, String::len))
        .sum();
    (bytes / 4).min(u32::MAX as usize) as u32 + req.max_tokens
}

/// The record of an attempt aborted `grace` after its campaign was cancelled.
fn aborted_record(send_agent_unix_us: i64, grace: Duration) -> ProbeResult {
    let record = ProbeRecord {
        outcome: Some(Outcome::Cancelled),
        send_agent_unix_us,
        error_message: Some(format!(
            "attempt aborted: still in flight {} ms after the campaign was cancelled",
            grace.as_millis()
        )),
        ..ProbeRecord::default()
    };
    ProbeResult {
        record,
        ..Default::default()
    }
}
