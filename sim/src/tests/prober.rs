//! The agent's probe engine ([`latmesh_agent::probe::Prober`]) reads the simulator's
//! compatibility answers as a client would: tool calls come out with their name and
//! arguments, oracle answers grade right, on every API, streamed and not.

use latmesh_agent::probe::{ProbeRequest, ProbeResult, Prober};
use latmesh_core::api::{Api, RequestShape};
use latmesh_core::compat::{TOOL_NAME, TOOL_PROMPT};
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;
use latmesh_core::quality::{self, prompt_set};
use serde_json::Value;

use super::compat::{APIS, cfg, quick, tools};
use super::start;
use crate::script::TOOL_ARGUMENTS;

/// One probe of `base` on `api` with `user` after the quality instruction, `extra` merged
/// into the body.
pub(super) async fn probe(
    base: &str,
    api: Api,
    user: &str,
    stream: bool,
    extra: &Value,
    api_key: Option<&str>,
) -> ProbeResult {
    let msgs = [
        Message::new("system", prompt_set().instruction.clone()),
        Message::new("user", user),
    ];
    let mut shape = RequestShape {
        api,
        ..RequestShape::default()
    };
    if let Some(extra) = extra.as_object() {
        shape.extra_body = extra.clone();
    }
    let timeouts = Timeouts {
        connect_s: 2.0,
        ttft_s: 10.0,
        idle_s: 10.0,
        total_s: 20.0,
    };
    let req = ProbeRequest {
        base_url: base,
        model_id: "deepseek-v4-flash",
        api_key,
        messages: &msgs,
        stream,
        max_tokens: 512,
        temperature: Some(0.0),
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: None,
        shape: &shape,
        secret_headers: &[],
    };
    Prober::new(None).unwrap().probe(&req, true).await
}

#[tokio::test]
async fn the_probe_engine_reads_tool_calls_and_oracle_answers() {
    let addr = start(cfg(vec![quick("q")])).await;
    let base = format!("http://{addr}/q/v1");
    for api in APIS {
        for stream in [true, false] {
            let r = probe(&base, api, TOOL_PROMPT, stream, &tools(api), None).await;
            assert_eq!(r.tool_calls.len(), 1, "{api:?} stream={stream}");
            let call = &r.tool_calls[0];
            assert_eq!(call.name, TOOL_NAME);
            assert_eq!(
                serde_json::from_str::<Value>(&call.arguments).unwrap(),
                serde_json::from_str::<Value>(TOOL_ARGUMENTS).unwrap()
            );
            assert_eq!(r.record.finish_reason.as_deref(), Some("tool_calls"));
            assert_eq!(r.record.usage.completion_tokens, Some(3), "{api:?}");
            for p in &prompt_set().prompts {
                let r = probe(&base, api, &p.prompt, stream, &Value::Null, None).await;
                assert!(
                    quality::grade(p, &r.content_text).correct,
                    "{} {api:?}: {:?}",
                    p.id,
                    r.content_text
                );
            }
        }
    }
}
