//! OpenAI Chat Completions (<https://platform.openai.com/docs/api-reference/chat-streaming>):
//! `data: {"object":"chat.completion.chunk",…}` lines, the finish chunk, the usage chunk when
//! `stream_options.include_usage` asked for it, `data: [DONE]`; a whole `chat.completion`
//! when not streamed. The stream-error fault sends `data: {"error":{…}}` (as vLLM and the
//! gateways do) and ends the body without `[DONE]`. A tool call ([`crate::script`]) is
//! streamed as `delta.tool_calls` (the first with `index`, `id`, `type` and the function's
//! `name`, each carrying one argument fragment) and ends with finish `tool_calls`; not
//! streamed, `message.tool_calls` with `content: null`.

use axum::body::Bytes;
use serde_json::json;

use super::{Dialect, ErrorKind, Render};
use crate::plan::AnswerPlan;
use crate::text::TokenKind;

/// The Chat Completions stream of one answer.
#[derive(Default)]
pub struct Chat {
    role_sent: bool,
    /// The tool call's first delta (id and name) has gone out.
    tool_started: bool,
}

/// One chunk's `data:` line with `model`, `system_fingerprint` (when there is one),
/// `choices` and a `tail` (`,"usage":…` or nothing) after them.
fn line(r: &Render, model: &str, fingerprint: Option<&str>, choices: &str, tail: &str) -> Bytes {
    let s = |v: &str| serde_json::to_string(v).unwrap_or_default();
    let tier = match &r.echo.key {
        Some(k) => format!(",\"service_tier\":{}", s(k)),
        None => String::new(),
    };
    let fp = match fingerprint {
        Some(f) => format!(",\"system_fingerprint\":{}", s(f)),
        None => String::new(),
    };
    Bytes::from(format!(
        "data: {{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{}{fp}{tier},\"choices\":[{choices}]{tail}}}\n\n",
        s(&r.id),
        r.created,
        s(model),
    ))
}

fn usage_null(r: &Render) -> &'static str {
    if r.include_usage {
        ",\"usage\":null"
    } else {
        ""
    }
}

fn delta_chunk(r: &Render, delta: &str, finish: Option<&str>) -> Bytes {
    let finish = finish.map_or("null".to_string(), |f| {
        serde_json::to_string(&r.echo.padded(f)).unwrap_or_default()
    });
    let choices =
        format!("{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}");
    line(
        r,
        &r.model,
        r.fingerprint.as_deref(),
        &choices,
        usage_null(r),
    )
}

/// `usage` of the answer (reasoning included in `completion_tokens`, as OpenAI counts).
fn usage(r: &Render, a: &AnswerPlan) -> serde_json::Value {
    let completion = a.completion_tokens();
    r.echo.usage(json!({
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": r.prompt_tokens.saturating_add(completion),
        "prompt_tokens_details": {"cached_tokens": r.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": a.reasoning_tokens},
    }))
}

impl Chat {
    /// The role chunk (empty content); a hostile provider's long `model` goes in it alone.
    fn role(&mut self, r: &Render) -> Bytes {
        self.role_sent = true;
        let choice = r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#;
        line(
            r,
            &r.echo.pad(r.model.clone()),
            r.fingerprint.as_deref(),
            choice,
            usage_null(r),
        )
    }

    /// The role chunk if it has not gone out yet.
    fn role_once(&mut self, r: &Render) -> Vec<Bytes> {
        if self.role_sent {
            Vec::new()
        } else {
            vec![self.role(r)]
        }
    }
}

impl Dialect for Chat {
    fn open(&mut self, r: &Render, early_role_chunk: bool) -> Vec<Bytes> {
        if early_role_chunk {
            self.role_once(r)
        } else {
            Vec::new()
        }
    }

    fn tokens(&mut self, r: &Render, kind: TokenKind, text: &str) -> (Vec<Bytes>, Bytes) {
        if let (TokenKind::Content, Some(name)) = (kind, r.tool()) {
            // The first fragment carries the call's id and name; the rest only arguments.
            let call = if std::mem::replace(&mut self.tool_started, true) {
                json!({"index": 0, "function": {"arguments": text}})
            } else {
                json!({"index": 0, "id": r.tool_call_id("call_"), "type": "function",
                    "function": {"name": name, "arguments": text}})
            };
            let delta = json!({"tool_calls": [call]}).to_string();
            return (self.role_once(r), delta_chunk(r, &delta, None));
        }
        let text = serde_json::to_string(text).unwrap_or_default();
        let delta = match (kind, r.reasoning_fields) {
            (TokenKind::Content, false) => format!("{{\"content\":{text}}}"),
            (TokenKind::Content, true) => {
                format!("{{\"content\":{text},\"reasoning_content\":null}}")
            }
            (TokenKind::Reasoning, _) => {
                format!("{{\"content\":null,\"reasoning_content\":{text}}}")
            }
        };
        (self.role_once(r), delta_chunk(r, &delta, None))
    }

    fn finish(&mut self, r: &Render, a: &AnswerPlan) -> Vec<Bytes> {
        let mut out = self.role_once(r);
        out.push(delta_chunk(r, "{}", Some(a.finish_reason.as_str())));
        if r.include_usage {
            let tail = format!(",\"usage\":{}", usage(r, a));
            // A hostile provider's long `system_fingerprint` goes in this event alone.
            let fp = r.fingerprint.clone().map(|f| r.echo.pad(f));
            out.push(line(r, &r.model, fp.as_deref(), "", &tail));
        }
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        out
    }

    fn fail(&mut self, r: &Render, message: &str) -> Bytes {
        let err = super::error_json(
            latmesh_core::api::Api::Chat,
            &r.echo,
            ErrorKind::Overloaded,
            message,
            None,
        );
        Bytes::from(format!("data: {err}\n\n"))
    }
}

/// The body of a non-streamed answer (`chat.completion`).
pub fn body(r: &Render, a: &AnswerPlan) -> String {
    let content = r.text(TokenKind::Content, 0, a.content_tokens);
    let mut message = match r.tool() {
        Some(name) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": r.tool_call_id("call_"), "type": "function",
                "function": {"name": name, "arguments": content}}],
        }),
        None => json!({"role": "assistant", "content": r.echo.field(&content)}),
    };
    if r.reasoning_fields {
        message["reasoning_content"] = json!(r.text(TokenKind::Reasoning, 0, a.reasoning_tokens));
    }
    let mut body = json!({
        "id": r.id,
        "object": "chat.completion",
        "created": r.created,
        "model": r.echo.pad(r.model.clone()),
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": r.echo.padded(a.finish_reason.as_str())}],
        "usage": usage(r, a),
    });
    if let Some(f) = &r.fingerprint {
        body["system_fingerprint"] = json!(r.echo.pad(f.clone()));
    }
    if let Some(k) = &r.echo.key {
        body["service_tier"] = json!(k);
    }
    body.to_string()
}
