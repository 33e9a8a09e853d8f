//! The feature checks: JSON mode, a tool call, prompt caching. Each judge is a pure
//! function of what came back; the feature fields are spelled as each API spells them.

use latmesh_core::api::Api;
use latmesh_core::compat::{
    Evidence, JSON_PROMPT, PLAIN_PROMPT, TOOL_NAME, TOOL_PROMPT, Verdict, cache_prefix,
    tool_parameters,
};
use latmesh_core::prompts::Message;
use serde_json::{Value, json};

use super::context::ProviderContext;
use super::send::{Call, evidence, failed, quote, send};
use crate::probe::ProbeResult;

/// Output cap of the JSON-mode and tool-call requests.
pub const FEATURE_MAX_TOKENS: u32 = 256;

/// Output cap of the prompt-cache requests (only their usage is read).
pub const CACHE_MAX_TOKENS: u32 = 32;

/// JSON mode as an API spells it ([`json_mode_field`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JsonMode {
    /// The body's top-level key.
    pub key: &'static str,
    /// Its value.
    pub value: Value,
    /// The field named in evidence and looked for in a refusal.
    pub field: &'static str,
}

/// JSON mode on `api` (`response_format`; Responses: `text.format`); `None` on the
/// Anthropic API, which has none.
pub fn json_mode_field(api: Api) -> Option<JsonMode> {
    match api {
        Api::Chat => Some(JsonMode {
            key: "response_format",
            value: json!({"type": "json_object"}),
            field: "response_format",
        }),
        Api::Responses => Some(JsonMode {
            key: "text",
            value: json!({"format": {"type": "json_object"}}),
            field: "text.format",
        }),
        Api::Anthropic => None,
    }
}

/// The `tools` value declaring [`TOOL_NAME`] as `api` spells it (Anthropic:
/// `input_schema`; Responses: a flat function tool).
pub fn tools_value(api: Api) -> Value {
    let description = "Get the current weather in a city.";
    match api {
        Api::Chat => json!([{"type": "function", "function": {
            "name": TOOL_NAME, "description": description, "parameters": tool_parameters()}}]),
        Api::Anthropic => json!([{"name": TOOL_NAME, "description": description,
            "input_schema": tool_parameters()}]),
        Api::Responses => json!([{"type": "function", "name": TOOL_NAME,
            "description": description, "parameters": tool_parameters()}]),
    }
}

/// [`latmesh_core::compat::CompatCheck::JsonMode`]: the visible content parses as a JSON
/// object (a 4xx naming `field` or `json_object` is *not offered*).
pub fn judge_json_mode(r: &ProbeResult, field: &str) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &[field, "json_object"]) {
        return v;
    }
    let rec = &r.record;
    let text = r.content_text.trim();
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => (
            Verdict::Pass,
            evidence(
                rec.http_status,
                Some(field),
                format!("content parses as a JSON object with {} key(s)", m.len()),
            ),
        ),
        _ => (
            Verdict::Fail,
            evidence(
                rec.http_status,
                Some(field),
                format!("content is not a JSON object: {}", quote(text)),
            ),
        ),
    }
}

/// [`latmesh_core::compat::CompatCheck::ToolCall`]: a call of [`TOOL_NAME`] whose arguments
/// parse as a JSON object (a 4xx naming `tools` is *not offered*).
pub fn judge_tool_call(r: &ProbeResult) -> (Verdict, Evidence) {
    if let Some(v) = failed(r, &["tools"]) {
        return v;
    }
    let rec = &r.record;
    let field = Some("tools");
    let Some(call) = r.tool_calls.first() else {
        let msg = format!(
            "no tool call (finish_reason {})",
            rec.finish_reason.as_deref().unwrap_or("none")
        );
        return (Verdict::Fail, evidence(rec.http_status, field, msg));
    };
    let Some(call) = r.tool_calls.iter().find(|c| c.name == TOOL_NAME) else {
        let msg = format!("called {:?} instead of {TOOL_NAME}", call.name);
        return (Verdict::Fail, evidence(rec.http_status, field, msg));
    };
    // An empty argument text is the empty object (Anthropic streams `{}` as nothing).
    let args = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments.trim()
    };
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(m)) => {
            let keys: Vec<&str> = m.keys().map(String::as_str).collect();
            let msg = format!("{TOOL_NAME}({})", keys.join(", "));
            (Verdict::Pass, evidence(rec.http_status, field, msg))
        }
        _ => {
            let msg = format!("arguments are not a JSON object: {}", quote(args));
            (Verdict::Fail, evidence(rec.http_status, field, msg))
        }
    }
}

/// [`latmesh_core::compat::CompatCheck::PromptCache`]: cached prompt tokens reported by
/// either of the two requests sharing the prefix (*not offered* when none are).
pub fn judge_prompt_cache(first: &ProbeResult, second: &ProbeResult) -> (Verdict, Evidence) {
    let field = Some("usage.cached_tokens");
    for (r, which) in [(second, "second"), (first, "first")] {
        if let Some(n) = r.record.usage.cached_tokens.filter(|n| *n > 0) {
            let msg = format!("{n} cached prompt tokens on the {which} request");
            return (Verdict::Pass, evidence(r.record.http_status, field, msg));
        }
    }
    if let Some(v) = failed(second, &[]) {
        return v;
    }
    let prompt = second
        .record
        .usage
        .prompt_tokens
        .map_or(String::new(), |n| format!(" (prompt {n} tokens)"));
    let msg = format!("no cached prompt tokens reported on a repeated prefix{prompt}");
    (
        Verdict::NotOffered,
        evidence(second.record.http_status, field, msg),
    )
}

/// Sends the JSON-mode request (`mode` from [`json_mode_field`]).
pub async fn json_mode(
    ctx: &ProviderContext<'_>,
    mode: JsonMode,
    timeout_s: f64,
) -> (Verdict, Evidence) {
    let messages = [Message::new("user", JSON_PROMPT)];
    let call = Call::new(&messages, false, FEATURE_MAX_TOKENS, timeout_s)
        .with(mode.key, mode.value)
        .keep_text();
    let r = send(ctx, &call).await;
    judge_json_mode(&r, mode.field)
}

/// Sends the tool-call request.
pub async fn tool_call(ctx: &ProviderContext<'_>, timeout_s: f64) -> (Verdict, Evidence) {
    let messages = [Message::new("user", TOOL_PROMPT)];
    let call = Call::new(&messages, false, FEATURE_MAX_TOKENS, timeout_s)
        .with("tools", tools_value(ctx.provider.request.api));
    let r = send(ctx, &call).await;
    judge_tool_call(&r)
}

/// Sends the two prompt-cache requests (the second only when the first ended `ok`).
pub async fn prompt_cache(ctx: &ProviderContext<'_>, timeout_s: f64) -> (Verdict, Evidence) {
    let messages = [
        Message::new("system", cache_prefix()),
        Message::new("user", PLAIN_PROMPT),
    ];
    let call = Call::new(&messages, false, CACHE_MAX_TOKENS, timeout_s);
    let first = send(ctx, &call).await;
    if let Some(v) = failed(&first, &[]) {
        return v;
    }
    let second = send(ctx, &call).await;
    judge_prompt_cache(&first, &second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::ToolCall;
    use latmesh_core::record::{Outcome, ProbeRecord};

    fn ok() -> ProbeResult {
        ProbeResult {
            record: ProbeRecord {
                outcome: Some(Outcome::Ok),
                http_status: Some(200),
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        }
    }

    #[test]
    fn json_mode_needs_an_object() {
        let with = |t: &str| ProbeResult {
            content_text: t.into(),
            ..ok()
        };
        let (v, e) = judge_json_mode(
            &with(" {\"city\": \"Paris\", \"country\": \"France\"}\n"),
            "response_format",
        );
        assert_eq!(
            (v, e.message.as_str()),
            (
                Verdict::Pass,
                "content parses as a JSON object with 2 key(s)"
            )
        );
        let (v, e) = judge_json_mode(&with("```json\n{}\n```"), "response_format");
        assert_eq!(v, Verdict::Fail);
        assert_eq!(
            e.message,
            "content is not a JSON object: \"```json\\n{}\\n```\""
        );
        assert_eq!(
            judge_json_mode(&with("[1]"), "text.format").0,
            Verdict::Fail
        );
        let refused = ProbeResult {
            record: ProbeRecord {
                outcome: Some(Outcome::Http4xx),
                http_status: Some(400),
                error_message: Some("response_format is not supported".into()),
                ..ProbeRecord::default()
            },
            ..ProbeResult::default()
        };
        assert_eq!(
            judge_json_mode(&refused, "response_format").0,
            Verdict::NotOffered
        );
        assert_eq!(json_mode_field(Api::Anthropic), None);
        assert_eq!(
            json_mode_field(Api::Responses).unwrap().field,
            "text.format"
        );
    }

    #[test]
    fn a_tool_call_needs_the_name_and_object_arguments() {
        let with = |name: &str, args: &str| ProbeResult {
            tool_calls: vec![ToolCall {
                name: name.into(),
                arguments: args.into(),
                ..ToolCall::default()
            }],
            ..ok()
        };
        let (v, e) = judge_tool_call(&with(TOOL_NAME, "{\"city\":\"Paris\"}"));
        assert_eq!(
            (v, e.message.as_str()),
            (Verdict::Pass, "get_weather(city)")
        );
        assert_eq!(judge_tool_call(&with(TOOL_NAME, "")).0, Verdict::Pass);
        assert_eq!(
            judge_tool_call(&with(TOOL_NAME, "{\"city\":")).0,
            Verdict::Fail
        );
        assert_eq!(
            judge_tool_call(&with("search", "{}")).1.message,
            "called \"search\" instead of get_weather"
        );
        assert_eq!(
            judge_tool_call(&ok()).1.message,
            "no tool call (finish_reason none)"
        );
        assert_eq!(
            tools_value(Api::Anthropic)[0]["input_schema"],
            tool_parameters()
        );
        assert_eq!(tools_value(Api::Chat)[0]["function"]["name"], TOOL_NAME);
    }

    #[test]
    fn caching_is_seen_on_either_request() {
        let cached = |n| {
            let mut r = ok();
            r.record.usage.cached_tokens = n;
            r.record.usage.prompt_tokens = Some(1500);
            r
        };
        assert_eq!(
            judge_prompt_cache(&cached(None), &cached(Some(1024))).0,
            Verdict::Pass
        );
        assert_eq!(
            judge_prompt_cache(&cached(Some(1024)), &cached(Some(0))).0,
            Verdict::Pass
        );
        let (v, e) = judge_prompt_cache(&cached(None), &cached(Some(0)));
        assert_eq!(v, Verdict::NotOffered);
        assert_eq!(
            e.message,
            "no cached prompt tokens reported on a repeated prefix (prompt 1500 tokens)"
        );
    }
}
