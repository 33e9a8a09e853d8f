//! A slot's conversation: its turns one after another, each a logical request
//! ([`super::attempts`]), with the history sent back and the cache nonce (see the [slot
//! documentation](super)).

use std::time::Instant;

use latmesh_core::plan::Plan;
use latmesh_core::prompts::{Message, builtin_follow_ups, guess_lang};
use latmesh_core::record::Outcome;
use latmesh_core::synth::RequestKey;

use crate::probe::{ProbeOptions, ProbeRequest, Prober};

use super::attempts::logical_request;
use super::env::SlotEnv;
use super::failover::{Again, Target};
use super::label::Label;
use super::spec::{RecordTx, SlotDone, SlotRef};

/// Longest answer text (content, and reasoning, each) kept for a later turn's history.
pub const MAX_KEPT_ANSWER_BYTES: usize = 1 << 20;

/// `[nonce XXXXXXXX] `: 8 random hex digits, put in front of a prompt.
pub fn new_nonce() -> String {
    format!("[nonce {:08x}] ", rand::random::<u32>())
}

/// Runs one slot: its logical request (a conversation of `turns` turns, each with its
/// retries; see the [slot documentation](super)), sending every attempt's record to `tx`
/// as soon as it is measured.
pub async fn run_slot(plan: &Plan, at: SlotRef, prober: &Prober, tx: &RecordTx) -> SlotDone {
    run_slot_with(plan, at, prober, tx, &SlotEnv::default()).await
}

/// [`run_slot`] within a campaign run: stops at its cancel, counts its attempts in flight.
pub async fn run_slot_with(
    plan: &Plan,
    at: SlotRef,
    prober: &Prober,
    tx: &RecordTx,
    env: &SlotEnv,
) -> SlotDone {
    let provider = &plan.providers[at.s.provider];
    let scenario = &plan.scenarios[at.s.scenario];
    let prompt = plan.prompt_for(at.s.scenario, at.prompt_index());
    let policy = &scenario.policy;
    // The providers its attempts may go to: this one, or the failover chain.
    let failover = scenario.failover.as_ref().filter(|_| at.s.failover);
    let chain: Vec<usize> = failover.map_or_else(|| vec![at.s.provider], |f| f.chain.clone());
    let api_keys: Vec<Option<String>> = chain
        .iter()
        .map(|&p| {
            plan.providers[p]
                .api_key_env
                .as_ref()
                .and_then(|name| crate::probe::request::api_key_from_env(name).ok().flatten())
        })
        .collect();
    let shapes: Vec<_> = chain
        .iter()
        .map(|&p| {
            let shape = env.shaping.shape(plan, p, scenario);
            // A Responses provider whose reasoning is passed back asks for it (`include`).
            let passback = plan.providers[p]
                .pass_reasoning
                .then(|| crate::probe::responses::with_reasoning_passback(&shape))
                .flatten();
            match passback {
                Some(s) => std::borrow::Cow::Owned(s),
                None => shape,
            }
        })
        .collect();
    let secrets: Vec<_> = chain
        .iter()
        .map(|&p| env.shaping.secrets(plan, p))
        .collect();
    let nonce = policy.cache_nonce.then(new_nonce);
    let label = Label {
        at,
        provider: &provider.name,
        scenario: &scenario.name,
        prompt_id: &prompt.id,
        cache_nonce: nonce.is_some(),
        warmup: scenario.is_warmup(at.round, at.step, at.slot),
        input_tokens: scenario.synth.as_ref().map_or(0, |s| s.input_tokens),
        slo: scenario.slo.as_ref(),
    };
    let mut messages = match &scenario.synth {
        // A tier scenario: one user message of exactly `input_tokens` words, from the run's
        // prompt built once per tier.
        Some(spec) => {
            let key = RequestKey {
                region: &env.region,
                round: at.round,
                step: at.step,
                slot: at.slot,
            };
            let text = env.synth.get(plan.text_seed(spec), spec).text(key);
            vec![Message::new("user", text)]
        }
        None => prompt.messages.clone(),
    };
    // `output_tokens`: the cap is the output length wanted.
    let max_tokens = scenario.output_tokens.unwrap_or(scenario.max_tokens);
    if let (Some(nonce), Some(first)) = (&nonce, messages.first_mut()) {
        first.content.insert_str(0, nonce);
    }
    let turns = policy.turns.max(1);
    let mut done = SlotDone::default();
    let mut intended = at.intended;
    for turn in 1..=turns {
        if turn > 1 && env.cancel.cancelled_at().is_some() {
            done.turns_not_sent = turns - turn + 1;
            break;
        }
        if turn > 1 {
            let k = (turn - 2) as usize;
            // Validation puts turns − 1 follow-ups in the plan; the builtin ones are only a
            // fallback for a hand-made plan.
            let text = prompt.follow_ups.get(k).cloned().unwrap_or_else(|| {
                let builtin = builtin_follow_ups(guess_lang(&prompt.messages));
                builtin[k % builtin.len()].to_string()
            });
            messages.push(Message::new("user", text));
            intended = Instant::now();
        }
        let targets: Vec<Target<'_>> = chain
            .iter()
            .zip(&api_keys)
            .zip(shapes.iter().zip(&secrets))
            .map(|((&p, key), (shape, secrets))| Target {
                provider: p,
                name: &plan.providers[p].name,
                req: ProbeRequest {
                    base_url: &plan.providers[p].base_url,
                    model_id: &plan.providers[p].model_id,
                    api_key: key.as_deref(),
                    messages: &messages,
                    stream: scenario.stream,
                    max_tokens,
                    temperature: scenario.temperature,
                    top_p: scenario.top_p,
                    timeouts: &scenario.timeouts,
                    probe_id: None,
                    user_agent: plan.providers[p].user_agent.as_deref(),
                    shape,
                    secret_headers: secrets,
                },
            })
            .collect();
        let again = match failover {
            Some(f) => Again::Failover(f),
            None => Again::Retry(policy.retry.as_ref()),
        };
        let last = turn == turns;
        let opts = ProbeOptions {
            keep_text: !last,
            max_response_bytes: Some(policy.max_response_bytes),
            ..ProbeOptions::default()
        };
        let (answer, records) = logical_request(
            prober, &targets, opts, again, &label, turn, intended, tx, env,
        )
        .await;
        done.records += records;
        if answer.outcome != Outcome::Ok {
            done.turns_not_sent = turns - turn;
            break;
        }
        if !last {
            let (mut content, mut reasoning) = (answer.content, answer.reasoning);
            cut_at_char_boundary(&mut content, MAX_KEPT_ANSWER_BYTES);
            cut_at_char_boundary(&mut reasoning, MAX_KEPT_ANSWER_BYTES);
            // Anthropic's thinking blocks go back whole (their signatures are checked), never cut.
            let thinking = answer.thinking_blocks;
            // Encrypted reasoning cannot be cut: past the bound no item is passed back.
            let mut items = answer.reasoning_items;
            let bytes: usize = items.iter().map(|i| i.to_string().len()).sum();
            if bytes > MAX_KEPT_ANSWER_BYTES {
                items.clear();
            }
            messages.push(Message {
                reasoning_content: provider.pass_reasoning.then_some(reasoning),
                thinking_blocks: (provider.pass_reasoning && !thinking.is_empty())
                    .then_some(thinking),
                reasoning_items: if provider.pass_reasoning {
                    items
                } else {
                    Vec::new()
                },
                ..Message::new("assistant", content)
            });
        }
    }
    done
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn cut_at_char_boundary(text: &mut String, max: usize) {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_answers_are_cut_at_a_char_boundary() {
        let mut t = "é".repeat(10); // 20 bytes
        cut_at_char_boundary(&mut t, 5);
        assert_eq!(t, "éé");
        let mut short = "abc".to_string();
        cut_at_char_boundary(&mut short, 5);
        assert_eq!(short, "abc");
    }
}
