//! The reasoning checks: which field carries reasoning, and whether a second turn needs the
//! first answer's reasoning sent back, accepts it, or rejects it.

use latmesh_core::api::Api;
use latmesh_core::compat::{Evidence, FOLLOW_UP_PROMPT, PLAIN_PROMPT, Verdict};
use latmesh_core::prompts::Message;
use latmesh_core::record::Outcome;

use super::basic::PLAIN_MAX_TOKENS;
use super::context::ProviderContext;
use super::send::{Call, error_words, evidence, failed, send};
use crate::probe::ProbeResult;

/// [`latmesh_core::compat::CompatCheck::ReasoningField`]: the field that carried the
/// answer's reasoning (*not offered* when there was none).
pub fn judge_reasoning_field(r: &ProbeResult) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[]) {
        return v;
    }
    let rec = &r.record;
    match r.reasoning_field {
        Some(f) => (
            Verdict::Pass,
            evidence(
                rec.http_status,
                Some(f),
                format!("reasoning in {f} ({} payload(s))", rec.reasoning_chunks),
            ),
        ),
        None => (
            Verdict::NotOffered,
            evidence(rec.http_status, None, "no reasoning in the answer"),
        ),
    }
}

/// The field an answer's reasoning is sent back in, per API.
pub fn passback_field(api: Api) -> &'static str {
    match api {
        Api::Chat => "reasoning_content",
        Api::Anthropic => "thinking",
        Api::Responses => "reasoning",
    }
}

/// Whether a second turn was refused for its history (400, 413 or 422).
fn refused(r: &ProbeResult) -> bool {
    r.record.outcome() == Outcome::Http4xx && matches!(r.record.http_status, Some(400 | 413 | 422))
}

/// [`latmesh_core::compat::CompatCheck::ReasoningHistory`]: the second turn sent `with`
/// the first answer's reasoning and `without` it. Passes when both end `ok`; fails when
/// either is refused (the evidence says which); inconclusive when either failed for a
/// reason that says nothing about the history.
pub fn judge_history(
    with: &ProbeResult,
    without: &ProbeResult,
    field: &str,
) -> (Verdict, Evidence) {
    let f = Some(field);
    match (refused(with), refused(without)) {
        (true, true) => {
            let msg = format!(
                "refuses the second turn with and without reasoning sent back: {}",
                error_words(&with.record)
            );
            return (Verdict::Fail, evidence(with.record.http_status, f, msg));
        }
        (true, false) if without.record.outcome() == Outcome::Ok => {
            let msg = format!("rejects reasoning sent back: {}", error_words(&with.record));
            return (Verdict::Fail, evidence(with.record.http_status, f, msg));
        }
        (false, true) if with.record.outcome() == Outcome::Ok => {
            let msg = format!(
                "needs reasoning sent back: {}",
                error_words(&without.record)
            );
            return (Verdict::Fail, evidence(without.record.http_status, f, msg));
        }
        _ => {}
    }
    // A failure that says nothing about the history first, then any other.
    let failures = [with, without].map(|r| failed(r, &[]));
    if let Some(v) = failures
        .iter()
        .flatten()
        .find(|v| v.0 == Verdict::Inconclusive)
        .or(failures.iter().flatten().next())
    {
        return v.clone();
    }
    (
        Verdict::Pass,
        evidence(
            with.record.http_status,
            f,
            "second turn accepted with and without reasoning sent back",
        ),
    )
}

/// Whether `r` carried reasoning that can be sent back.
fn has_reasoning(r: &ProbeResult) -> bool {
    !r.reasoning_text.is_empty() || !r.thinking_blocks.is_empty() || !r.reasoning_items.is_empty()
}

/// Sends the first turn, then the second twice (with and without its reasoning).
pub async fn history(ctx: &ProviderContext<'_>, timeout_s: f64) -> (Verdict, Evidence) {
    let first_messages = [Message::new("user", PLAIN_PROMPT)];
    let mut call = Call::new(&first_messages, true, PLAIN_MAX_TOKENS, timeout_s).keep_text();
    call.reasoning_passback = true;
    let first = send(ctx, &call).await;
    if let Some(v) = failed(&first, &[]) {
        return v;
    }
    if !has_reasoning(&first) {
        return (
            Verdict::NotApplicable,
            evidence(
                first.record.http_status,
                None,
                "the answer carried no reasoning to send back",
            ),
        );
    }
    let api = ctx.provider.request.api;
    let plain = Message::new("assistant", first.content_text.clone());
    let with_reasoning = Message {
        reasoning_content: (api == Api::Chat).then(|| first.reasoning_text.clone()),
        thinking_blocks: (api == Api::Anthropic && !first.thinking_blocks.is_empty())
            .then(|| first.thinking_blocks.clone()),
        reasoning_items: first.reasoning_items.clone(),
        ..plain.clone()
    };
    let turn = |assistant: Message| {
        vec![
            first_messages[0].clone(),
            assistant,
            Message::new("user", FOLLOW_UP_PROMPT),
        ]
    };
    let (with_msgs, without_msgs) = (turn(with_reasoning), turn(plain));
    let mut with_call = Call::new(&with_msgs, true, PLAIN_MAX_TOKENS, timeout_s);
    with_call.reasoning_passback = true;
    let with = send(ctx, &with_call).await;
    let without = send(
        ctx,
        &Call::new(&without_msgs, true, PLAIN_MAX_TOKENS, timeout_s),
    )
    .await;
    judge_history(&with, &without, passback_field(api))
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::record::ProbeRecord;

    fn ended(o: Outcome, status: u16, msg: &str) -> ProbeResult {
        ProbeResult {
            record: ProbeRecord {
                outcome: Some(o),
                http_status: Some(status),
                error_message: (!msg.is_empty()).then(|| msg.to_string()),
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        }
    }

    #[test]
    fn history_verdicts_say_which_way_it_breaks() {
        let ok = ended(Outcome::Ok, 200, "");
        let no = ended(Outcome::Http4xx, 400, "reasoning_content is not allowed");
        let need = ended(Outcome::Http4xx, 400, "missing reasoning_content");
        assert_eq!(
            judge_history(&ok, &ok, "reasoning_content").0,
            Verdict::Pass
        );
        let (v, e) = judge_history(&no, &ok, "reasoning_content");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "rejects reasoning sent back: http_4xx (HTTP 400): reasoning_content is not allowed"
        );
        let (v, e) = judge_history(&ok, &need, "reasoning_content");
        assert_eq!(v, Verdict::Fail);
        assert!(e.message.starts_with("needs reasoning sent back"), "{e:?}");
        assert_eq!(judge_history(&no, &no, "x").0, Verdict::Fail);
        let busy = ended(Outcome::Http5xx, 503, "");
        assert_eq!(judge_history(&busy, &ok, "x").0, Verdict::Inconclusive);
        assert_eq!(judge_history(&no, &busy, "x").0, Verdict::Inconclusive);
    }

    #[test]
    fn the_reasoning_field_is_named() {
        let mut r = ended(Outcome::Ok, 200, "");
        assert_eq!(judge_reasoning_field(&r).0, Verdict::NotOffered);
        r.reasoning_field = Some("reasoning");
        r.record.reasoning_chunks = 4;
        let (v, e) = judge_reasoning_field(&r);
        assert_eq!(
            (v, e.field.as_deref(), e.message.as_str()),
            (
                Verdict::Pass,
                Some("reasoning"),
                "reasoning in reasoning (4 payload(s))"
            )
        );
    }
}
