//! The quality set (docs/metrics.md, "Quality parity"): each prompt of a [`QualitySpec`]
//! sent `samples` times to one provider, streamed at temperature 0 (top_p 1) with the set's
//! instruction as the system message, and graded ([`latmesh_core::quality::grade`]).
//!
//! The answer's text lives only in memory, for the grading: it is scrubbed of the API key
//! and the secret header values first, and only the fields of a [`QualitySample`] are kept
//! (the normalized final answer, ≤ 64 bytes, and its hash). Nothing here logs an answer.
//! At most [`MAX_IN_FLIGHT`] requests are in flight per provider (fewer when its
//! `limits.max_in_flight` says so; its rate caps hold too).

use futures::StreamExt as _;
use latmesh_core::prompts::Message;
use latmesh_core::quality::{QualityPrompt, QualitySample, QualitySpec, grade, prompt_set};
use latmesh_core::record::Outcome;

use crate::compat::ProviderContext;
use crate::compat::send::{Call, send};
use crate::probe::ProbeResult;

/// Most quality requests in flight to one provider.
pub const MAX_IN_FLIGHT: usize = 4;

/// Runs `spec`'s prompts on the provider of `ctx`: one [`QualitySample`] per prompt id and
/// sample index, in the set's order then by sample. Ids not in the shipped set are
/// skipped (a validated spec has none).
pub async fn run_quality(ctx: &ProviderContext<'_>, spec: &QualitySpec) -> Vec<QualitySample> {
    let set = prompt_set();
    let prompts: Vec<&QualityPrompt> = set
        .prompts
        .iter()
        .filter(|p| spec.prompt_ids.contains(&p.id))
        .collect();
    let jobs: Vec<(&QualityPrompt, u32)> = prompts
        .iter()
        .flat_map(|p| (0..spec.samples).map(move |s| (*p, s)))
        .collect();
    let in_flight = ctx
        .provider
        .limits
        .max_in_flight
        .map_or(MAX_IN_FLIGHT, |n| (n.max(1) as usize).min(MAX_IN_FLIGHT));
    futures::stream::iter(jobs)
        .map(|(prompt, sample)| async move {
            let messages = [
                Message::new("system", set.instruction.clone()),
                Message::new("user", prompt.prompt.clone()),
            ];
            // Not streamed: every API reports `usage` in a whole body, so output tokens are the
            // provider's count (a chat stream without `stream_options` would count chunks).
            let mut call = Call::new(&messages, false, spec.max_tokens, spec.timeout_s).keep_text();
            call.temperature = Some(0.0);
            call.top_p = Some(1.0);
            let r = send(ctx, &call).await;
            sample_of(ctx, prompt, sample, r)
        })
        .buffered(in_flight)
        .collect()
        .await
}

/// The sample `r` makes: graded on its visible content scrubbed of the key and the secret
/// header values (only when `ok`); the text itself is dropped here.
pub fn sample_of(
    ctx: &ProviderContext<'_>,
    prompt: &QualityPrompt,
    sample: u32,
    r: ProbeResult,
) -> QualitySample {
    let outcome = r.record.outcome();
    let (correct, answer, hash) = if outcome == Outcome::Ok {
        let reply = ctx.redact(&r.content_text);
        let g = grade(prompt, &reply);
        (Some(g.correct), g.answer, g.answer_hash)
    } else {
        (None, String::new(), String::new())
    };
    QualitySample {
        provider: ctx.provider.name.clone(),
        prompt_id: prompt.id.clone(),
        sample,
        outcome,
        correct,
        answer,
        answer_hash: hash,
        output_tokens: r.record.output_tokens,
        answered_model: r.record.answered_model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Prober;
    use latmesh_core::record::ProbeRecord;

    #[test]
    fn a_sample_keeps_the_graded_answer_scrubbed_and_no_text() {
        let provider = crate::compat::context::test_provider("");
        let prober = Prober::new(None).unwrap();
        let key = "sk-canary-0123456789abcdef";
        let ctx = ProviderContext::new(&prober, &provider, Some(key.into()), vec![]);
        let fact = prompt_set()
            .prompts
            .iter()
            .find(|p| p.id == "fact-01")
            .unwrap();
        let ok = |content: &str| ProbeResult {
            record: ProbeRecord {
                outcome: Some(Outcome::Ok),
                output_tokens: 12,
                answered_model: Some("m".into()),
                ..ProbeRecord::default()
            },
            content_text: content.into(),
            ..ProbeResult::default()
        };
        let s = sample_of(&ctx, fact, 2, ok("It is Canberra.\nAnswer: **Canberra**"));
        assert_eq!(
            (s.correct, s.answer.as_str(), s.sample, s.output_tokens),
            (Some(true), "canberra", 2, 12)
        );
        assert_eq!(
            s.answer_hash,
            latmesh_core::quality::answer_hash("canberra")
        );
        let leak = sample_of(&ctx, fact, 0, ok(&format!("Answer: {key}")));
        assert_eq!(leak.correct, Some(false));
        assert!(!leak.answer.contains("0123456789"), "{leak:?}");
        let failed = sample_of(
            &ctx,
            fact,
            0,
            ProbeResult {
                record: ProbeRecord {
                    outcome: Some(Outcome::Throttled),
                    ..ProbeRecord::default()
                },
                ..ProbeResult::default()
            },
        );
        assert_eq!(
            (
                failed.correct,
                failed.answer.as_str(),
                failed.answer_hash.as_str()
            ),
            (None, "", "")
        );
    }
}
