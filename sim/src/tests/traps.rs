//! The profiles' answer traps over real loopback sockets: the prompt cache, quantized
//! answers, the mid-campaign model swap.

use latmesh_core::api::Api;
use latmesh_core::compat::{PLAIN_PROMPT, cache_prefix};
use serde_json::{Value, json};

use super::compat::{APIS, Reply, body, cfg, path, quick};
use super::{raw_request, start};
use crate::ProviderProfile;
use crate::provider::PLANNED_TTFT_HEADER;

/// `extra` fields putting [`cache_prefix`] in the system prompt on `api`.
fn long_system(api: Api) -> Value {
    match api {
        Api::Chat => json!({"messages": [{"role": "system", "content": cache_prefix()},
            {"role": "user", "content": PLAIN_PROMPT}]}),
        Api::Anthropic => json!({"system": cache_prefix()}),
        Api::Responses => json!({"instructions": cache_prefix()}),
    }
}

#[tokio::test]
async fn a_repeated_long_prefix_is_reported_cached_and_prefilled_faster() {
    let caching = |name: &str| ProviderProfile {
        prompt_cache: true,
        prefill_us_per_input_token: 100,
        ..quick(name)
    };
    let plain = ProviderProfile {
        prefill_us_per_input_token: 100,
        ..quick("plain")
    };
    let addr = start(cfg(vec![
        caching("c-chat"),
        caching("c-anth"),
        caching("c-resp"),
        plain,
    ]))
    .await;
    for (api, name) in APIS.into_iter().zip(["c-chat", "c-anth", "c-resp"]) {
        let b = body(api, PLAIN_PROMPT, true, &long_system(api));
        let send = |provider: &'static str| {
            let b = b.clone();
            async move {
                let raw = raw_request(addr, "POST", &path(api, provider), &[], &b).await;
                (Reply::read(api, &raw), raw.header_u64(PLANNED_TTFT_HEADER))
            }
        };
        let name: &'static str = name;
        let (first, ttft1) = send(name).await;
        let (second, ttft2) = send(name).await;
        let prompt = first.input_tokens;
        assert!(prompt > 1024, "{api:?}: {prompt}");
        assert_eq!(first.cached_tokens, 0, "{api:?}");
        assert_eq!(second.cached_tokens, 1024, "{api:?}");
        assert_eq!(ttft1, 1_000 + 100 * prompt);
        assert_eq!(ttft2, 1_000 + 100 * (prompt - 1024));
        // Anthropic's input_tokens count what was not read from the cache.
        let uncached = if api == Api::Anthropic {
            prompt - 1024
        } else {
            prompt
        };
        assert_eq!(second.input_tokens, uncached);
        // No cache: nothing cached, the same prefill every time.
        let (a, t1) = send("plain").await;
        let (b2, t2) = send("plain").await;
        assert_eq!(
            (a.cached_tokens, b2.cached_tokens, t1, t2),
            (0, 0, ttft1, ttft1)
        );
        // A short prompt is never cached.
        let short = body(api, PLAIN_PROMPT, false, &json!({}));
        for _ in 0..2 {
            let raw = raw_request(addr, "POST", &path(api, name), &[], &short).await;
            assert_eq!(Reply::read(api, &raw).cached_tokens, 0);
        }
    }
}
