//! The Chat Completions request: URL, JSON body and headers.

use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;

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

/// `{base_url}/chat/completions` (one slash between them).
pub fn url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

/// The JSON body: `model`, `messages`, `stream`, `max_tokens`, `temperature`/`top_p` when
/// set, and for streams `stream_options: {"include_usage": true}` so usage arrives.
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
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

/// Header naming the attempt for a test server's ground-truth log ([`ProbeRequest::probe_id`]).
pub const PROBE_ID_HEADER: &str = "x-latmesh-probe-id";

/// Per-request headers: content type, accept, `x-latmesh-probe-id` when set, and the API key
/// as a sensitive Bearer token (a key that is not a valid header value is left out; the
/// provider will answer 401).
pub fn headers(req: &ProbeRequest<'_>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(
        ACCEPT,
        HeaderValue::from_static(if req.stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    if let Some(v) = req.probe_id.and_then(|id| HeaderValue::from_str(id).ok()) {
        h.insert(HeaderName::from_static(PROBE_ID_HEADER), v);
    }
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
        assert_eq!(url(req.base_url), "http://h/v1/chat/completions");
        let h = headers(&req);
        assert!(h[AUTHORIZATION].is_sensitive());
        assert_eq!(h[ACCEPT], "application/json");
    }
}
