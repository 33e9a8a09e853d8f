//! The compatibility checks (docs/metrics.md, "Compatibility checks"): each
//! [`CompatCheck`] of a [`CompatSpec`] sent to one provider and judged by the rule of its
//! variant, with its evidence. `latmesh compat` runs them from the machine it runs on; an
//! agent phase can run them the same way ([`ProviderContext`] holds what they need).
//!
//! Sending is apart from judging: every check's judge is a pure function of the
//! [`ProbeResult`](crate::probe::ProbeResult)s it got (`basic`, `features`, `reasoning`,
//! `wrong_key`). Requests go through the probe engine with the provider's own request
//! shape; a check's feature fields are added under the provider's `extra_body` (which keeps
//! winning). A failure that says nothing about the feature (throttled, 5xx, timeout,
//! connection error, a broken stream) is retried once after about 1 s (or a `Retry-After` up
//! to 5 s), then *inconclusive*. The requests that only need some answer share one streamed
//! request (stream, model name, fingerprint, reasoning field). A check whose verdict can flip
//! (it judges generated text: [`CompatCheck::can_flip`]) is sampled `samples` times
//! ([`sampled`]) and is *unstable* when its samples disagree. Answers stay in memory; the
//! evidence quotes at most [`latmesh_core::compat::MAX_QUOTE_CHARS`] characters of one and is
//! scrubbed of the key and the secret header values.

pub mod basic;
pub mod context;
pub mod features;
pub mod reasoning;
pub mod send;
pub mod wrong_key;

use latmesh_core::api::{Api, AuthStyle};
use latmesh_core::compat::{
    CompatCheck, CompatResult, CompatSpec, Evidence, MAX_EVIDENCE_BYTES, PLAIN_PROMPT, SampleTally,
    Verdict,
};
use latmesh_core::prompts::Message;

pub use context::ProviderContext;

use crate::probe::ProbeResult;
use send::{Call, evidence, send};

/// Why `check` does not exist for a provider speaking `api` with `auth` (`None`: it does).
pub fn not_applicable(check: CompatCheck, api: Api, auth: &AuthStyle) -> Option<String> {
    let missing = |what: &str| Some(format!("the {api} API has no {what}"));
    match check {
        CompatCheck::Stop if api == Api::Responses => missing("stop parameter"),
        CompatCheck::JsonMode if api == Api::Anthropic => missing("JSON mode"),
        CompatCheck::SystemFingerprint if api == Api::Anthropic => missing("system_fingerprint"),
        CompatCheck::WrongKey if *auth == AuthStyle::None => {
            Some("the provider's key is not sent (auth = \"none\")".to_string())
        }
        _ => None,
    }
}

/// Runs `spec`'s checks on the provider of `ctx`, one after another, in `spec.checks`
/// order (each request within `spec.timeout_s`); one result per check. A check that can flip
/// ([`CompatCheck::can_flip`]) is sampled `spec.samples` times ([`sampled`]), every other
/// once.
pub async fn run_checks(ctx: &ProviderContext<'_>, spec: &CompatSpec) -> Vec<CompatResult> {
    let api = ctx.provider.request.api;
    // The one streamed plain request several checks judge.
    let mut plain: Option<ProbeResult> = None;
    let mut out = Vec::with_capacity(spec.checks.len());
    for &check in &spec.checks {
        let (verdict, ev, samples) =
            if let Some(why) = not_applicable(check, api, &ctx.provider.request.auth) {
                (
                    Verdict::NotApplicable,
                    evidence(None, None, why),
                    SampleTally::default(),
                )
            } else {
                let mut samples = Vec::new();
                for i in 0..spec.samples_of(check).max(1) {
                    let s = one_sample(ctx, check, spec.timeout_s, &mut plain, i > 0).await;
                    let stop = i == 0 && ends_the_series(s.0);
                    samples.push(s);
                    if stop {
                        break;
                    }
                }
                decide(samples)
            };
        let (verdict, ev) = match overridden(check, api, &ctx.provider.request.extra_body) {
            Some(field) if verdict != Verdict::NotApplicable => (
                Verdict::Inconclusive,
                evidence(
                    None,
                    Some(field),
                    format!(
                        "the provider's extra_body sets `{field}`, which replaces the check's \
                         own (it was: {})",
                        verdict.as_str()
                    ),
                ),
            ),
            _ => (verdict, ev),
        };
        out.push(CompatResult {
            provider: ctx.provider.name.clone(),
            check,
            verdict,
            evidence: scrubbed(ctx, ev),
            samples,
        });
    }
    key_refused_too(&mut out);
    out
}

/// Whether a first sample ends a check's series: not offered (the field refused),
/// inconclusive (the provider did not answer) or not applicable (found out from the answer,
/// e.g. no reasoning to send back): repeats would tell nothing more, and a dead provider
/// costs one round of requests, not `samples`.
fn ends_the_series(first: Verdict) -> bool {
    match first {
        Verdict::NotOffered | Verdict::Inconclusive | Verdict::NotApplicable => true,
        Verdict::Pass | Verdict::Fail | Verdict::Unstable => false,
    }
}

/// Decides a check from its samples' verdicts and evidence by [`SampleTally::verdict`]: all
/// alike is their verdict, any disagreement [`Verdict::Unstable`].
///
/// The evidence: with one sample, its own; with more, the counts (`pass 1/3, fail 2/3: …`)
/// before the evidence of the first failed or refused sample when they disagree (else of the
/// last sample), whose status and field it keeps.
pub fn decide(samples: Vec<(Verdict, Evidence)>) -> (Verdict, Evidence, SampleTally) {
    let mut tally = SampleTally::default();
    for (v, _) in &samples {
        tally.add(*v);
    }
    // Not applicable is no sample's verdict in the tally: a check every sample found not
    // applicable (from the answer) is not applicable.
    let verdict =
        if !samples.is_empty() && samples.iter().all(|(v, _)| *v == Verdict::NotApplicable) {
            Verdict::NotApplicable
        } else {
            tally.verdict()
        };
    let taken = samples.len();
    let first_not_pass = samples
        .iter()
        .position(|(v, _)| matches!(v, Verdict::Fail | Verdict::NotOffered));
    let mut evs = samples.into_iter().map(|(_, e)| e);
    let ev = match (verdict, first_not_pass) {
        (Verdict::Unstable, Some(i)) => evs.nth(i),
        _ => evs.next_back(),
    }
    .unwrap_or_default();
    if taken <= 1 {
        return (verdict, ev, tally);
    }
    let message = format!("{}: {}", tally.describe(), ev.message);
    (
        verdict,
        evidence(ev.http_status, ev.field.as_deref(), message),
        tally,
    )
}

/// One sample of `check` (not applicable to the provider: [`not_applicable`] said so before):
/// sends its request(s) and judges them. The checks judging the plain streamed request share
/// `plain`, sent once unless `fresh` asks for a new one (a repeated sample).
async fn one_sample(
    ctx: &ProviderContext<'_>,
    check: CompatCheck,
    t: f64,
    plain: &mut Option<ProbeResult>,
    fresh: bool,
) -> (Verdict, Evidence) {
    let api = ctx.provider.request.api;
    let plain_messages = [Message::new("user", PLAIN_PROMPT)];
    match check {
        CompatCheck::Stream
        | CompatCheck::ModelName
        | CompatCheck::SystemFingerprint
        | CompatCheck::ReasoningField => {
            if plain.is_none() || fresh {
                let call = Call::new(&plain_messages, true, basic::PLAIN_MAX_TOKENS, t);
                *plain = Some(send(ctx, &call).await);
            }
            let r = plain.as_ref().expect("sent just above");
            match check {
                CompatCheck::Stream => basic::judge_answer(r),
                CompatCheck::ModelName => basic::judge_model_name(r, ctx.provider.expected_model()),
                CompatCheck::SystemFingerprint => basic::judge_fingerprint(r),
                _ => reasoning::judge_reasoning_field(r),
            }
        }
        CompatCheck::NonStream => {
            let call = Call::new(&plain_messages, false, basic::PLAIN_MAX_TOKENS, t);
            basic::judge_answer(&send(ctx, &call).await)
        }
        CompatCheck::StreamUsage => basic::stream_usage(ctx, &plain_messages, t).await,
        CompatCheck::OutputCap => basic::output_cap(ctx, t).await,
        CompatCheck::Stop => match basic::stop_field(api) {
            Some(field) => basic::stop(ctx, field, t).await,
            None => unreachable_na(),
        },
        CompatCheck::JsonMode => match features::json_mode_field(api) {
            Some(mode) => features::json_mode(ctx, mode, t).await,
            None => unreachable_na(),
        },
        CompatCheck::ToolCall => features::tool_call(ctx, t).await,
        CompatCheck::ReasoningHistory => reasoning::history(ctx, t).await,
        CompatCheck::PromptCache => features::prompt_cache(ctx, t).await,
        CompatCheck::WrongKey => wrong_key::wrong_key_check(ctx, t).await,
    }
}

/// The body field of `check` that a provider's `extra_body` replaces (it wins over the
/// check's own), when it does: the check then tests the user's value, not the feature.
fn overridden(
    check: CompatCheck,
    api: Api,
    extra_body: &serde_json::Map<String, serde_json::Value>,
) -> Option<&'static str> {
    let fields: &[&'static str] = match check {
        CompatCheck::Stop => &["stop", "stop_sequences"],
        CompatCheck::JsonMode => match api {
            Api::Responses => &["text"],
            _ => &["response_format"],
        },
        CompatCheck::ToolCall => &["tools", "tool_choice"],
        CompatCheck::StreamUsage => &["stream_options"],
        _ => &[],
    };
    fields.iter().copied().find(|f| extra_body.contains_key(*f))
}

/// A wrong key refused proves nothing when the real key was refused too (401/403 on the
/// other checks, which are inconclusive then): the wrong-key verdict becomes inconclusive.
fn key_refused_too(out: &mut [CompatResult]) {
    let refused = out.iter().any(|r| {
        r.check != CompatCheck::WrongKey
            && r.verdict == Verdict::Inconclusive
            && matches!(r.evidence.http_status, Some(401 | 403))
    });
    if !refused {
        return;
    }
    for r in out.iter_mut() {
        if r.check == CompatCheck::WrongKey && r.verdict == Verdict::Pass {
            r.verdict = Verdict::Inconclusive;
            r.evidence.message = format!(
                "this machine's own key was refused too (401/403 on other checks): {}",
                r.evidence.message
            );
            r.evidence.message = latmesh_core::provider_bounds::bound_text(
                &r.evidence.message,
                MAX_EVIDENCE_BYTES,
                &|t| t.to_string(),
            )
            .0;
        }
    }
}

/// The verdict of a check [`not_applicable`] already left out (kept total for `match`).
fn unreachable_na() -> (Verdict, Evidence) {
    (Verdict::NotApplicable, Evidence::default())
}

/// `ev` with the key and the secret header values redacted from its texts (they are
/// provider values, already scrubbed by the prober: this is the last guard).
fn scrubbed(ctx: &ProviderContext<'_>, mut ev: Evidence) -> Evidence {
    ev.message = ctx.redact_to(&ev.message, MAX_EVIDENCE_BYTES);
    ev.field = ev.field.map(|f| ctx.redact_to(&f, MAX_EVIDENCE_BYTES));
    ev
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_sim::{ProviderProfile, SimConfig};

    /// Over loopback against the simulator: the basic checks pass on a plain provider; a
    /// gateway that refuses `stream_options` fails `stream_usage` alone (no other check
    /// sends the field); a provider that always throttles is inconclusive, after one retry
    /// honouring its 1 s Retry-After.
    #[tokio::test]
    async fn basic_checks_against_the_simulator() {
        // Answers longer than the output cap (8 tokens).
        let quick = |name: &str| ProviderProfile {
            output_tokens_min: 16,
            output_tokens_max: 24,
            ..ProviderProfile::fixed(name, 2_000, 200)
        };
        let cfg = SimConfig {
            profiles: vec![
                quick("plain"),
                ProviderProfile {
                    rejects_stream_options: true,
                    ..quick("strict")
                },
                ProviderProfile {
                    throttle_prob: 1.0,
                    retry_after_s_min: 1,
                    retry_after_s_max: 1,
                    ..quick("busy")
                },
            ],
            ..SimConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
        let prober = crate::probe::Prober::new(None).unwrap();
        let spec = CompatSpec {
            checks: vec![
                CompatCheck::Stream,
                CompatCheck::NonStream,
                CompatCheck::StreamUsage,
                CompatCheck::OutputCap,
                CompatCheck::ModelName,
            ],
            ..CompatSpec::default()
        };
        let run = |name: &str| {
            let mut p = context::test_provider("");
            p.name = name.to_string();
            p.base_url = format!("http://{addr}/{name}/v1");
            p.model_id = latmesh_sim::profile::DEFAULT_MODEL_ID.to_string();
            let prober = &prober;
            let spec = &spec;
            async move {
                let ctx = ProviderContext::new(prober, &p, None, vec![]);
                run_checks(&ctx, spec)
                    .await
                    .into_iter()
                    .map(|r| (r.check, r.verdict))
                    .collect::<Vec<_>>()
            }
        };
        let all = |v: Verdict| spec.checks.iter().map(|c| (*c, v)).collect::<Vec<_>>();
        assert_eq!(run("plain").await, all(Verdict::Pass));
        let mut strict = all(Verdict::Pass);
        strict[2].1 = Verdict::Fail;
        assert_eq!(run("strict").await, strict);
        let t0 = std::time::Instant::now();
        let busy = run("busy").await;
        assert_eq!(busy, all(Verdict::Inconclusive));
        // Four requests (the plain stream serves two checks), each retried once after 1 s.
        assert!(
            t0.elapsed() >= std::time::Duration::from_secs(4),
            "{:?}",
            t0.elapsed()
        );
    }

    /// Over loopback against the simulator: a provider that honours JSON mode one time in
    /// three is `unstable` with its counts and a failing sample's answer in the evidence; a
    /// provider that always honours it passes on 3 samples; a check that cannot flip is
    /// sampled once; a refused feature ends its series after one sample.
    #[tokio::test]
    async fn a_check_that_flips_between_samples_is_unstable_with_its_counts() {
        use latmesh_sim::profile::Feature;
        let cfg = SimConfig {
            profiles: vec![
                ProviderProfile::fixed("steady", 2_000, 200),
                ProviderProfile {
                    json_mode: Feature::OneInThree,
                    ..ProviderProfile::fixed("sometimes", 2_000, 200)
                },
                ProviderProfile {
                    json_mode: Feature::Rejected,
                    ..ProviderProfile::fixed("never", 2_000, 200)
                },
            ],
            ..SimConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(latmesh_sim::serve_providers(listener, cfg));
        let prober = crate::probe::Prober::new(None).unwrap();
        let spec = CompatSpec {
            checks: vec![CompatCheck::Stream, CompatCheck::JsonMode],
            ..CompatSpec::default()
        };
        assert_eq!(spec.samples, 3);
        let run = |name: &str| {
            let mut p = context::test_provider("");
            p.name = name.to_string();
            p.base_url = format!("http://{addr}/{name}/v1");
            p.model_id = latmesh_sim::profile::DEFAULT_MODEL_ID.to_string();
            let prober = &prober;
            let spec = &spec;
            async move {
                let ctx = ProviderContext::new(prober, &p, None, vec![]);
                run_checks(&ctx, spec).await
            }
        };
        let tally = |pass, fail, not_offered| SampleTally {
            pass,
            fail,
            not_offered,
            inconclusive: 0,
        };

        let sometimes = run("sometimes").await;
        assert_eq!(
            (sometimes[0].verdict, sometimes[0].samples),
            (Verdict::Pass, tally(1, 0, 0))
        );
        let json = &sometimes[1];
        assert_eq!(
            (json.verdict, json.samples),
            (Verdict::Unstable, tally(1, 2, 0))
        );
        let msg = &json.evidence.message;
        assert!(
            msg.starts_with("pass 1/3, fail 2/3: content is not a JSON object: \""),
            "{msg}"
        );
        // The failing answer is quoted well past 40 characters.
        assert!(msg.len() > 120, "{msg}");
        assert_eq!(json.evidence.field.as_deref(), Some("response_format"));

        let steady = run("steady").await;
        assert_eq!(
            (steady[1].verdict, steady[1].samples),
            (Verdict::Pass, tally(3, 0, 0))
        );
        assert!(
            steady[1]
                .evidence
                .message
                .starts_with("pass 3/3: content parses as a JSON object"),
            "{:?}",
            steady[1].evidence
        );

        let never = run("never").await;
        assert_eq!(
            (never[1].verdict, never[1].samples),
            (Verdict::NotOffered, tally(0, 0, 1))
        );
        assert_eq!(never[1].evidence.http_status, Some(400));
    }

    #[test]
    fn samples_are_decided_with_the_evidence_of_the_one_that_disagrees() {
        let ev = |m: &str| evidence(Some(200), Some("tools"), m);
        let (v, e, t) = decide(vec![
            (Verdict::Pass, ev("get_weather(city)")),
            (Verdict::Fail, ev("no tool call (finish_reason stop)")),
            (Verdict::Pass, ev("get_weather(city)")),
        ]);
        assert_eq!((v, t.pass, t.fail), (Verdict::Unstable, 2, 1));
        assert_eq!(
            e.message,
            "pass 2/3, fail 1/3: no tool call (finish_reason stop)"
        );
        let (v, e, t) = decide(vec![(Verdict::Fail, ev("no tool call"))]);
        assert_eq!(
            (v, e.message.as_str(), t.taken()),
            (Verdict::Fail, "no tool call", 1)
        );
        // Inconclusive samples are left out of the decision, not of the counts.
        let (v, e, _) = decide(vec![
            (Verdict::Pass, ev("a")),
            (Verdict::Inconclusive, ev("throttled (HTTP 429)")),
            (Verdict::Pass, ev("b")),
        ]);
        assert_eq!(
            (v, e.message.as_str()),
            (Verdict::Pass, "pass 2/3, inconclusive 1/3: b")
        );
        assert!(ends_the_series(Verdict::NotOffered) && ends_the_series(Verdict::Inconclusive));
        let (v, _, t) = decide(vec![(Verdict::NotApplicable, ev("no reasoning"))]);
        assert_eq!((v, t.taken()), (Verdict::NotApplicable, 0));
        assert!(!ends_the_series(Verdict::Fail) && !ends_the_series(Verdict::Pass));
    }

    #[test]
    fn checks_missing_from_an_api_are_not_applicable() {
        let b = AuthStyle::Bearer;
        assert!(not_applicable(CompatCheck::Stop, Api::Responses, &b).is_some());
        assert!(not_applicable(CompatCheck::Stop, Api::Anthropic, &b).is_none());
        assert_eq!(
            not_applicable(CompatCheck::JsonMode, Api::Anthropic, &b).as_deref(),
            Some("the anthropic API has no JSON mode")
        );
        assert!(not_applicable(CompatCheck::JsonMode, Api::Chat, &b).is_none());
        assert!(not_applicable(CompatCheck::WrongKey, Api::Chat, &AuthStyle::None).is_some());
        assert!(not_applicable(CompatCheck::StreamUsage, Api::Responses, &b).is_none());
    }
}
