//! The context limit of a provider ([`ProviderProfile::context_tokens`]): which requests it
//! refuses, and the API's own words for the refusal (see [`ProviderProfile`]'s *Context
//! limit*).

use latmesh_core::api::Api;

use crate::profile::ProviderProfile;

/// A request refused for its length: HTTP 400, `context_length_exceeded` on the OpenAI APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextExceeded {
    /// The message, in the wording of the API that carried the request.
    pub message: String,
    /// The field OpenAI blames (`messages` on Chat, `input` on Responses); `None` on
    /// Anthropic, whose errors name no field.
    pub param: Option<&'static str>,
}

/// Whether `profile` refuses a request on `api` with `prompt_tokens` prompt tokens (as
/// [`crate::tokens::prompt_tokens`] counts them) and output cap `max_tokens` (`None`: the
/// request has none, and the prompt alone is judged): refused when
/// `prompt_tokens + max_tokens > context_tokens` (and `context_tokens` > 0).
pub fn check(
    api: Api,
    profile: &ProviderProfile,
    prompt_tokens: u32,
    max_tokens: Option<u32>,
) -> Option<ContextExceeded> {
    let limit = u64::from(profile.context_tokens);
    let (prompt, cap) = (u64::from(prompt_tokens), u64::from(max_tokens.unwrap_or(0)));
    if limit == 0 || prompt + cap <= limit {
        return None;
    }
    let total = prompt + cap;
    Some(match api {
        Api::Chat => ContextExceeded {
            message: format!(
                "This model's maximum context length is {limit} tokens. However, you requested {total} tokens ({prompt} in the messages, {cap} in the completion). Please reduce the length of the messages or completion."
            ),
            param: Some("messages"),
        },
        Api::Responses => ContextExceeded {
            message: format!(
                "Your input exceeds the context window of this model: {prompt} input tokens + {cap} max_output_tokens = {total} > {limit}. Please adjust your input and try again."
            ),
            param: Some("input"),
        },
        Api::Anthropic if prompt > limit => ContextExceeded {
            message: format!("prompt is too long: {prompt} tokens > {limit} maximum"),
            param: None,
        },
        Api::Anthropic => ContextExceeded {
            message: format!(
                "input length and `max_tokens` exceed context limit: {prompt} + {cap} > {limit}, decrease input length or `max_tokens` and try again"
            ),
            param: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_prompt_plus_cap_over_the_limit_in_each_api_s_words() {
        let p = ProviderProfile {
            context_tokens: 16_384,
            ..ProviderProfile::default()
        };
        assert_eq!(check(Api::Chat, &p, 16_000, Some(384)), None);
        assert_eq!(check(Api::Chat, &p, 16_384, None), None);
        let e = check(Api::Chat, &p, 16_000, Some(385)).unwrap();
        assert_eq!(
            e.message,
            "This model's maximum context length is 16384 tokens. However, you requested 16385 tokens (16000 in the messages, 385 in the completion). Please reduce the length of the messages or completion."
        );
        assert_eq!(e.param, Some("messages"));
        let e = check(Api::Responses, &p, 40_007, Some(256)).unwrap();
        assert!(
            e.message.contains("40007 input tokens + 256"),
            "{}",
            e.message
        );
        assert_eq!(e.param, Some("input"));
        let e = check(Api::Anthropic, &p, 40_007, Some(256)).unwrap();
        assert_eq!(
            e.message,
            "prompt is too long: 40007 tokens > 16384 maximum"
        );
        assert_eq!(e.param, None);
        let e = check(Api::Anthropic, &p, 16_000, Some(1000)).unwrap();
        assert!(e.message.contains("16000 + 1000 > 16384"), "{}", e.message);
        // Unlimited.
        let free = ProviderProfile::default();
        assert_eq!(check(Api::Chat, &free, u32::MAX, Some(u32::MAX)), None);
    }
}
