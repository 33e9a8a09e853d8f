//! The compatibility verdicts a profile must get: what `latmesh compat` must find on each
//! simulated provider, in the terms of the check catalogue ([`latmesh_core::compat`]) and
//! its rules (docs/metrics.md, "Compatibility checks").
//!
//! For a provider checked with its right key, before any swap
//! ([`ProviderProfile::swap_after_requests`]) and without its faults: a throttled, truncated
//! or failed request makes a check `inconclusive` instead, whatever this says.

use latmesh_core::answered_model::model_matches;
use latmesh_core::api::Api;
use latmesh_core::compat::{CompatCheck, Verdict};

use crate::profile::{Feature, ProviderProfile, ReasoningPassback};
use crate::truth::answered_identity;

/// The verdict of a feature check on a profile that has the feature `f`: supported passes,
/// ignored fails (the field is accepted and nothing happens), rejected is not offered (a 400
/// naming the field), honoured one time in three is unstable (the check's default 3 samples,
/// on a provider no earlier request asked for the feature: pass 1/3, fail 2/3).
fn feature(f: Feature) -> Verdict {
    match f {
        Feature::Supported => Verdict::Pass,
        Feature::Ignored => Verdict::Fail,
        Feature::Rejected => Verdict::NotOffered,
        Feature::OneInThree => Verdict::Unstable,
    }
}

/// The verdict `profile` must get for `check` on `api` when asked for the model `asked`.
pub fn expected_verdict(
    profile: &ProviderProfile,
    api: Api,
    asked: &str,
    check: CompatCheck,
) -> Verdict {
    let reasons = profile.reasoning_tokens_max > 0;
    match check {
        CompatCheck::Stream | CompatCheck::NonStream | CompatCheck::OutputCap => Verdict::Pass,
        CompatCheck::StreamUsage if api == Api::Chat && profile.rejects_stream_options => {
            Verdict::Fail
        }
        CompatCheck::StreamUsage => Verdict::Pass,
        CompatCheck::Stop if api == Api::Responses => Verdict::NotApplicable,
        CompatCheck::Stop => feature(profile.stop),
        CompatCheck::JsonMode if api == Api::Anthropic => Verdict::NotApplicable,
        CompatCheck::JsonMode => feature(profile.json_mode),
        CompatCheck::ToolCall => feature(profile.tool_calls),
        CompatCheck::ReasoningField if reasons => Verdict::Pass,
        CompatCheck::ReasoningField => Verdict::NotOffered,
        CompatCheck::ReasoningHistory if !reasons => Verdict::NotApplicable,
        CompatCheck::ReasoningHistory => match profile.reasoning_passback {
            ReasoningPassback::Ignored => Verdict::Pass,
            ReasoningPassback::Required | ReasoningPassback::Rejected => Verdict::Fail,
        },
        CompatCheck::ModelName => {
            let (answered, _) = answered_identity(profile, 0, Some(asked));
            if model_matches(asked, &answered) {
                Verdict::Pass
            } else {
                Verdict::Fail
            }
        }
        CompatCheck::SystemFingerprint if api == Api::Anthropic => Verdict::NotApplicable,
        // Only Chat answers carry one (the simulator's Responses answers have none).
        CompatCheck::SystemFingerprint
            if api == Api::Chat && answered_identity(profile, 0, Some(asked)).1.is_some() =>
        {
            Verdict::Pass
        }
        CompatCheck::SystemFingerprint => Verdict::NotOffered,
        CompatCheck::PromptCache if profile.prompt_cache => Verdict::Pass,
        CompatCheck::PromptCache => Verdict::NotOffered,
        CompatCheck::WrongKey => match (&profile.api_key, profile.wrong_key_status) {
            (None, _) => Verdict::NotOffered,
            (Some(_), 401 | 403) => Verdict::Pass,
            (Some(_), _) => Verdict::Fail,
        },
    }
}

/// Every check's verdict for `profile` on `api` (asked for the model `asked`), in
/// [`CompatCheck::ALL`] order.
pub fn expected_verdicts(
    profile: &ProviderProfile,
    api: Api,
    asked: &str,
) -> Vec<(CompatCheck, Verdict)> {
    CompatCheck::ALL
        .into_iter()
        .map(|c| (c, expected_verdict(profile, api, asked, c)))
        .collect()
}

/// The checks `profile` must not pass on `api` (fail, not offered or unstable; weight > 0), in
/// [`CompatCheck::ALL`] order: its traps as `latmesh compat` must report them.
pub fn expected_traps(profile: &ProviderProfile, api: Api, asked: &str) -> Vec<CompatCheck> {
    expected_verdicts(profile, api, asked)
        .into_iter()
        .filter(|(c, v)| {
            c.weight() > 0.0 && matches!(v, Verdict::Fail | Verdict::NotOffered | Verdict::Unstable)
        })
        .map(|(c, _)| c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_MODEL_ID, all_builtin_profiles};
    use CompatCheck as C;

    #[test]
    fn the_built_in_profiles_traps_on_chat() {
        // Not offered by every honest profile: no fingerprint, no cache, no key check.
        let absent = [C::SystemFingerprint, C::PromptCache, C::WrongKey];
        let want: &[(&str, &[C])] = &[
            ("fast-lane", &[C::WrongKey]),
            ("steady", &absent),
            ("budget", &absent),
            (
                "reasoner",
                &[
                    C::ReasoningHistory,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            ("throttler", &absent),
            ("flaky", &absent),
            (
                "keepalive",
                &[
                    C::ToolCall,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            (
                "bulk-chunk",
                &[
                    C::JsonMode,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            ("slow-prefill", &absent),
            (
                "no-json",
                &[
                    C::JsonMode,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            (
                "strict-gateway",
                &[
                    C::StreamUsage,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            (
                "thinker",
                &[
                    C::ReasoningHistory,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            (
                "renamer",
                &[
                    C::ModelName,
                    C::SystemFingerprint,
                    C::PromptCache,
                    C::WrongKey,
                ],
            ),
            ("quantized", &absent),
            ("swapper", &[C::PromptCache, C::WrongKey]),
            ("locked", &[C::SystemFingerprint, C::PromptCache]),
            ("slo-lab", &absent),
            ("long-ctx", &absent),
            ("short-ctx", &absent),
        ];
        let all = all_builtin_profiles();
        assert_eq!(all.len(), want.len());
        for (p, (name, traps)) in all.iter().zip(want) {
            assert_eq!(&p.name, name);
            assert_eq!(
                expected_traps(p, Api::Chat, DEFAULT_MODEL_ID),
                *traps,
                "{name}"
            );
        }
    }

    #[test]
    fn apis_without_a_feature_make_it_not_applicable() {
        let p = all_builtin_profiles()
            .into_iter()
            .find(|p| p.name == "no-json")
            .unwrap();
        let v = |api, c| expected_verdict(&p, api, DEFAULT_MODEL_ID, c);
        assert_eq!(v(Api::Chat, C::JsonMode), Verdict::NotOffered);
        assert_eq!(v(Api::Responses, C::JsonMode), Verdict::NotOffered);
        assert_eq!(v(Api::Anthropic, C::JsonMode), Verdict::NotApplicable);
        assert_eq!(v(Api::Responses, C::Stop), Verdict::NotApplicable);
        assert_eq!(
            v(Api::Anthropic, C::SystemFingerprint),
            Verdict::NotApplicable
        );
        assert_eq!(v(Api::Chat, C::ReasoningHistory), Verdict::NotApplicable);
        let broken = ProviderProfile {
            api_key: Some("k".into()),
            wrong_key_status: 500,
            stop: Feature::Ignored,
            ..ProviderProfile::default()
        };
        assert_eq!(
            expected_traps(&broken, Api::Anthropic, "m"),
            [C::Stop, C::PromptCache, C::WrongKey]
        );
        assert_eq!(
            expected_verdict(&broken, Api::Anthropic, "m", C::WrongKey),
            Verdict::Fail
        );
    }
}
