//! Who answers: the model name and `system_fingerprint` a profile answers with, the API key
//! it checks, over real loopback sockets on the three APIs.

use latmesh_core::api::Api;
use latmesh_core::compat::PLAIN_PROMPT;
use serde_json::{Value, json};

use super::compat::{APIS, Reply, body, cfg, path, quick};
use super::{raw_request, start};
use crate::ProviderProfile;

const ASKED: &str = "deepseek-v4-flash";

#[tokio::test]
async fn answer_model_and_fingerprint_are_the_profiles() {
    let renamer = ProviderProfile {
        answer_model: Some("deepseek-v3-distill".into()),
        system_fingerprint: Some("fp_sim_a1".into()),
        ..quick("renamer")
    };
    let addr = start(cfg(vec![quick("honest"), renamer])).await;
    for api in APIS {
        for stream in [true, false] {
            let b = body(api, PLAIN_PROMPT, stream, &json!({}));
            let raw = raw_request(addr, "POST", &path(api, "renamer"), &[], &b).await;
            let r = Reply::read(api, &raw);
            assert!(!r.models.is_empty());
            assert!(r.models.iter().all(|m| m == "deepseek-v3-distill"), "{r:?}");
            let honest = raw_request(addr, "POST", &path(api, "honest"), &[], &b).await;
            let h = Reply::read(api, &honest);
            assert!(!h.models.is_empty() && h.models.iter().all(|m| m == ASKED));
            match api {
                Api::Chat => {
                    assert!(!r.fingerprints.is_empty());
                    assert!(r.fingerprints.iter().all(|f| f == "fp_sim_a1"), "{r:?}");
                    // No fingerprint: the field is left out.
                    assert!(h.fingerprints.is_empty(), "{h:?}");
                }
                _ => {
                    assert!(!raw.body_text().contains("system_fingerprint"));
                    assert!(!raw.body_text().contains("fp_sim_a1"));
                }
            }
        }
    }
}

#[tokio::test]
async fn a_wrong_key_is_refused_first_in_the_apis_shape() {
    const RIGHT: &str = "sk-sim-right-0123456789";
    const WRONG: &str = "sk-sim-wrong-9876543210";
    let locked = ProviderProfile {
        api_key: Some(RIGHT.into()),
        ..quick("locked")
    };
    let broken = ProviderProfile {
        api_key: Some(RIGHT.into()),
        wrong_key_status: 500,
        ..quick("broken")
    };
    let addr = start(cfg(vec![locked, broken])).await;
    let bearer_right = format!("Bearer {RIGHT}");
    let bearer_wrong = format!("Bearer {WRONG}");
    for api in APIS {
        // Even an unusable body gets the key's answer: it is checked before anything else.
        let b = body(api, PLAIN_PROMPT, true, &json!({}));
        let refused: [(&[(&str, &str)], &str); 4] = [
            (&[], &b),
            (&[("authorization", &bearer_wrong)], &b),
            (&[("x-api-key", WRONG)], &b),
            (&[("authorization", &bearer_wrong)], "{not json"),
        ];
        for (headers, b) in refused {
            let raw = raw_request(addr, "POST", &path(api, "locked"), headers, b).await;
            assert_eq!(raw.status, 401, "{api:?} {headers:?}");
            let text = raw.body_text();
            assert!(!text.contains(WRONG) && !text.contains(RIGHT), "{text}");
            let err: Value = serde_json::from_str(&text).unwrap();
            match api {
                Api::Anthropic => {
                    assert_eq!(err["type"], "error");
                    assert_eq!(err["error"]["type"], "authentication_error");
                }
                _ => assert_eq!(err["error"]["code"], "invalid_api_key"),
            }
            let raw = raw_request(addr, "POST", &path(api, "broken"), headers, b).await;
            assert_eq!(raw.status, 500);
        }
        for headers in [
            [("authorization", bearer_right.as_str())],
            [("x-api-key", RIGHT)],
        ] {
            let raw = raw_request(addr, "POST", &path(api, "locked"), &headers, &b).await;
            assert_eq!(raw.status, 200, "{api:?} {headers:?}");
        }
    }
    // Refused requests are not served: the first served one is the provider's request 0.
    let addr = start(cfg(vec![ProviderProfile {
        api_key: Some(RIGHT.into()),
        ..quick("locked")
    }]))
    .await;
    let b = body(Api::Chat, PLAIN_PROMPT, false, &json!({}));
    let p = path(Api::Chat, "locked");
    let raw = raw_request(addr, "POST", &p, &[], &b).await;
    assert_eq!(raw.status, 401);
    let raw = raw_request(addr, "POST", &p, &[("authorization", &bearer_right)], &b).await;
    assert_eq!(raw.header_u64(crate::provider::REQUEST_INDEX_HEADER), 0);
}
