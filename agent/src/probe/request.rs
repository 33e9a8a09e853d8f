//! The Chat Completions request: URL, JSON body and headers.

use http::header::{ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Serialize;

use latmesh_core::api::Api;
use latmesh_core::prompts::Message;

use super::ProbeRequest;

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: &'a [Message],
    stream: bool,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

/// `{base_url}{path}` for `api` (one slash between them): `/chat/completions`, `/messages`
/// or `/responses` ([`Api::path`]).
pub fn url(base_url: &str, api: Api) -> String {
    format!("{}{}", base_url.trim_end_matches('/'), api.path())
}

/// The JSON body of `req` in its API's shape.
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
    match req.shape.api {
        Api::Chat => chat_body(req),
        Api::Anthropic => super::anthropic::body(req),
        Api::Responses => super::responses::body(req),
    }
}

/// The Chat Completions JSON body: `model`, `messages`, `stream`, `max_tokens`, `temperature`/`top_p` when
/// set, and for streams `stream_options: {"include_usage": true}` so usage arrives.
fn chat_body(req: &ProbeRequest<'_>) -> Vec<u8> {
    let b = Body {
        model: req.model_id,
        messages: req.messages,
        stream: req.stream,
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stream_options: req.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    serde_json::to_vec(&b).expect("the request body serializes")
}

/// The API key in environment variable `name`, surrounding whitespace (a trailing newline
/// from `$(cat keyfile)`, a CR from a Windows file) removed. `Ok(None)` when the variable is
/// unset or blank.
///
/// # Errors
/// The value is not valid Unicode or cannot be sent in an `Authorization` header (a control
/// character inside it); the message names the variable, never the value.
pub fn api_key_from_env(name: &str) -> Result<Option<String>, String> {
    let raw = match std::env::var(name) {
        Ok(v) => v,
        Err(std::env::VarError::NotPresent) => return Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!("the API key in ${name} is not valid UTF-8"));
        }
    };
    let key = raw.trim();
    if key.is_empty() {
        return Ok(None);
    }
    if HeaderValue::from_str(&format!("Bearer {key}")).is_err() {
        return Err(format!(
            "the API key in ${name} has a character that cannot be sent in an HTTP header"
        ));
    }
    Ok(Some(key.to_string()))
}

/// The `user-agent` of a request whose provider names none: the OpenAI Python SDK's
/// (`OpenAI/Python {version}`, its synchronous client's, at the latest release on PyPI when
/// this was written: 3.51.0, November 2026). It is what most clients of OpenAI-compatible APIs send, so a provider
/// cannot tell a probe from its other traffic by it; latmesh's transport is HTTP/1.1 for
/// the same reason (the SDK's default). A campaign or a provider can set another
/// (`user_agent`, README "Campaign files").
pub const DEFAULT_USER_AGENT: &str = "OpenAI/Python 3.51.0";

/// The `user-agent` of a request whose provider names none, for `api`: the Anthropic Python
/// SDK's (`Anthropic/Python {version}`, the latest release on PyPI when this was written:
/// 2.15.0, December 2026) for the Anthropic Messages API, whose clients use that SDK's
/// family; [`DEFAULT_USER_AGENT`] for the OpenAI APIs.
pub fn default_user_agent(api: Api) -> &'static str {
    match api {
        Api::Anthropic => super::anthropic::DEFAULT_USER_AGENT,
        Api::Chat | Api::Responses => DEFAULT_USER_AGENT,
    }
}

/// Per-request headers: content type, accept, accept-encoding (`gzip, deflate`, as the OpenAI
/// Python SDK sends: [`super::content_encoding`]) and the API key as a sensitive Bearer token
/// (a key that is not a valid header value is left out; the provider will answer 401),
/// then the API's own ([`super::anthropic::headers`]). Nothing that names latmesh.
pub fn headers(req: &ProbeRequest<'_>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if req.shape.api == Api::Anthropic {
        super::anthropic::headers(req, &mut h);
    }
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(
        ACCEPT,
        HeaderValue::from_static(if req.stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    h.insert(
        ACCEPT_ENCODING,
        HeaderValue::from_static(super::content_encoding::ACCEPT_ENCODING),
    );
    if let Some(mut v) = req
        .api_key
        .and_then(|key| HeaderValue::from_str(&format!("Bearer {key}")).ok())
    {
        v.set_sensitive(true);
        h.insert(AUTHORIZATION, v);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::plan::Timeouts;

    #[test]
    fn api_keys_from_the_environment_are_trimmed_and_checked() {
        // SAFETY: a variable only this test uses; tests in this process do not read it.
        unsafe {
            std::env::set_var("LATMESH_TEST_KEY_TRIM", "  sk-abc\r\n");
            std::env::set_var("LATMESH_TEST_KEY_BAD", "sk-a\u{1}b");
            std::env::set_var("LATMESH_TEST_KEY_BLANK", " \n");
        }
        assert_eq!(
            api_key_from_env("LATMESH_TEST_KEY_TRIM"),
            Ok(Some("sk-abc".to_string()))
        );
        let e = api_key_from_env("LATMESH_TEST_KEY_BAD").unwrap_err();
        assert!(
            e.contains("$LATMESH_TEST_KEY_BAD") && !e.contains("sk-a"),
            "{e}"
        );
        assert_eq!(api_key_from_env("LATMESH_TEST_KEY_BLANK"), Ok(None));
        assert_eq!(api_key_from_env("LATMESH_TEST_KEY_UNSET_XYZ"), Ok(None));
    }

    #[test]
    fn body_fields() {
        let msgs = vec![Message::new("user", "hi")];
        let t = Timeouts::default();
        let mut req = ProbeRequest {
            base_url: "http://h/v1/",
            model_id: "m",
            api_key: Some("k"),
            messages: &msgs,
            stream: true,
            max_tokens: 16,
            temperature: Some(0.0),
            top_p: None,
            timeouts: &t,
            probe_id: None,
            user_agent: None,
            shape: latmesh_core::api::RequestShape::chat_default(),
        };
        let v: serde_json::Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                "max_tokens":16,"temperature":0.0,"stream_options":{"include_usage":true}})
        );
        req.stream = false;
        req.top_p = Some(0.9);
        let v: serde_json::Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(v.get("stream_options"), None);
        assert_eq!(v["top_p"], 0.9);
        assert_eq!(url(req.base_url, Api::Chat), "http://h/v1/chat/completions");
        let h = headers(&req);
        assert!(h[AUTHORIZATION].is_sensitive());
        assert_eq!(h[ACCEPT], "application/json");
        assert_eq!(h[ACCEPT_ENCODING], "gzip, deflate");
    }
}
