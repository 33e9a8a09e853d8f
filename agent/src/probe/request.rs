//! The request: URL (with the provider's query), JSON body (Chat Completions here, the other
//! APIs' in their modules, every one shaped by [`apply_shape`]) and headers (auth style,
//! the provider's extra headers, its secret ones read on this agent).

use http::header::{
    ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue,
};
use serde::Serialize;

use latmesh_core::api::{Api, AuthStyle, HeaderValueSource, RequestShape, StreamUsage};
use latmesh_core::prompts::Message;
use latmesh_core::record::ProbeRecord;

use super::ProbeRequest;

pub use super::secrets::{SecretHeader, api_key_from_env, secret_headers, unset_or_empty};
pub use super::shape::{apply_shape, default_max_tokens_field};

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

/// The URL `req` is sent to: [`url`], then the provider's `query` parameters,
/// URL-encoded (`application/x-www-form-urlencoded`), in name order.
pub fn target_url(req: &ProbeRequest<'_>) -> String {
    let mut u = url(req.base_url, req.shape.api);
    if !req.shape.query.is_empty() {
        u.push('?');
        u.push_str(&latmesh_core::shaping::query_string(&req.shape.query));
    }
    u
}

/// [`apply_shape`] on a serialized body, serialized again.
fn shaped(body: impl Serialize, shape: &RequestShape) -> Vec<u8> {
    let mut v = serde_json::to_value(body).expect("the request body serializes");
    if let Some(map) = v.as_object_mut()
        && !(shape.extra_body.is_empty() && shape.max_tokens_field.is_none())
    {
        apply_shape(map, shape);
    }
    serde_json::to_vec(&v).expect("the request body serializes")
}

/// Whether `req` asks for usage or gets it unasked: `false` only for a Chat Completions
/// stream whose provider's `stream_usage` is `never` (the runner makes `auto` `never` once
/// the provider refused the field). The record's `usage_requested`.
pub fn usage_requested(req: &ProbeRequest<'_>) -> bool {
    !(req.shape.api == Api::Chat && req.stream && req.shape.stream_usage == StreamUsage::Never)
}

/// Request fields latmesh may stop sending to a provider that refuses them, searched for in
/// the whole error body of a 4xx (before its message is cut to the record's bound): a
/// provider may name the field only in `error.param`, or past the 256 bytes the record keeps.
pub const REFUSABLE_FIELDS: [&str; 2] = ["stream_options", "include_usage"];

/// The [`REFUSABLE_FIELDS`] that `body` (an error body, decoded) names.
pub fn fields_named_in(body: &[u8]) -> Vec<&'static str> {
    REFUSABLE_FIELDS
        .into_iter()
        .filter(|f| memchr::memmem::find(body, f.as_bytes()).is_some())
        .collect()
}

/// Whether `rec` is a refusal of `stream_options` (or `include_usage`): a 400 or 422 whose
/// error body named either field (`named`: [`super::ProbeResult::error_body_fields`]), or
/// whose stored message, type or code does (as OpenAI-compatible gateways that do not know it
/// answer). Only meaningful for a record that asked for usage.
pub fn refuses_stream_usage(rec: &ProbeRecord, named: &[&str]) -> bool {
    matches!(rec.http_status, Some(400 | 422))
        && (!named.is_empty()
            || [&rec.error_message, &rec.error_type, &rec.error_code]
                .into_iter()
                .flatten()
                .any(|t| REFUSABLE_FIELDS.iter().any(|f| t.contains(f))))
}

/// The JSON body of `req` in its API's shape.
pub fn body(req: &ProbeRequest<'_>) -> Vec<u8> {
    match req.shape.api {
        Api::Chat => chat_body(req),
        Api::Anthropic => super::anthropic::body(req),
        Api::Responses => super::responses::body(req),
    }
}

/// The Chat Completions JSON body: `model`, `messages`, `stream`, `max_tokens` (or the
/// provider's `max_tokens_field`), `temperature`/`top_p` when set, for streams
/// `stream_options: {"include_usage": true}` so usage arrives (unless [`usage_requested`]
/// says not), then the provider's `extra_body` ([`apply_shape`]).
fn chat_body(req: &ProbeRequest<'_>) -> Vec<u8> {
    let b = Body {
        model: req.model_id,
        messages: req.messages,
        stream: req.stream,
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stream_options: (req.stream && usage_requested(req)).then_some(StreamOptions {
            include_usage: true,
        }),
    };
    shaped(&b, req.shape)
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

/// Per-request headers: the API's own ([`super::anthropic::headers`]), content type,
/// accept, accept-encoding (`gzip, deflate`, as the OpenAI Python SDK
/// sends: [`super::content_encoding`]), the API key as the provider's `auth` says (a sensitive `Authorization: Bearer`
/// by default, a sensitive named header, or none; a key that is not a valid header value is
/// left out, the provider will answer 401), then the provider's literal `headers` and its
/// secret ones (sensitive), each replacing a header of the same name. Nothing that names
/// latmesh.
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
    let auth = match &req.shape.auth {
        AuthStyle::Bearer => Some((AUTHORIZATION, "Bearer ")),
        AuthStyle::Header(name) => HeaderName::from_bytes(name.as_bytes())
            .ok()
            .map(|n| (n, "")),
        AuthStyle::None => None,
    };
    if let (Some((name, prefix)), Some(key)) = (auth, req.api_key)
        && let Ok(mut v) = HeaderValue::from_str(&format!("{prefix}{key}"))
    {
        v.set_sensitive(true);
        h.insert(name, v);
    }
    for (name, source) in &req.shape.headers {
        if let HeaderValueSource::Literal(value) = source
            && let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            )
        {
            h.insert(n, v);
        }
    }
    for secret in req.secret_headers {
        if let Ok(mut v) = HeaderValue::from_str(&secret.value) {
            v.set_sensitive(true);
            h.insert(secret.name.clone(), v);
        }
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
            secret_headers: &[],
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

    fn shape_of(toml_keys: &str) -> RequestShape {
        let text = format!(
            "[campaign]\nname = \"t\"\nregions = [\"r\"]\n[rounds]\ncount = 1\ninterval_s = 1\ngap_ms = 1\n\
             [[scenarios]]\nname = \"s\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 4\n\
             [[providers]]\nname = \"p\"\nbase_url = \"http://h/v1\"\nmodel_id = \"m\"\n{toml_keys}\n"
        );
        latmesh_core::campaign::load_toml_str(&text, std::path::Path::new("."))
            .unwrap()
            .providers[0]
            .request
            .clone()
    }

    fn request<'a>(
        shape: &'a RequestShape,
        msgs: &'a [Message],
        t: &'a latmesh_core::plan::Timeouts,
        secrets: &'a [SecretHeader],
    ) -> ProbeRequest<'a> {
        ProbeRequest {
            base_url: "http://h/v1",
            model_id: "m",
            api_key: Some("sk-key"),
            messages: msgs,
            stream: true,
            max_tokens: 16,
            temperature: None,
            top_p: None,
            timeouts: t,
            probe_id: None,
            user_agent: None,
            shape,
            secret_headers: secrets,
        }
    }

    /// `extra_body` replaces top-level keys, `max_tokens_field` renames the cap,
    /// `stream_usage = "never"` drops `stream_options`, the query is URL-encoded.
    #[test]
    fn the_body_and_url_follow_the_shape() {
        let shape = shape_of(
            "extra_body = { provider = { order = [\"a\"], allow_fallbacks = false }, reasoning_effort = \"low\" }\n\
             max_tokens_field = \"max_completion_tokens\"\nstream_usage = \"never\"\n\
             query = { \"api-version\" = \"2024-10-21\", \"x y\" = \"a&b=c\" }",
        );
        let (msgs, t) = (vec![Message::new("user", "hi")], Timeouts::default());
        let req = request(&shape, &msgs, &t, &[]);
        let v: serde_json::Value = serde_json::from_slice(&body(&req)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,
                "max_completion_tokens":16,"reasoning_effort":"low",
                "provider":{"order":["a"],"allow_fallbacks":false}})
        );
        assert!(!usage_requested(&req));
        assert_eq!(
            target_url(&req),
            "http://h/v1/chat/completions?api-version=2024-10-21&x+y=a%26b%3Dc"
        );
        // `always` and `auto` ask; a non-streaming request asks nothing but gets usage.
        for su in ["always", "auto"] {
            let shape = shape_of(&format!("stream_usage = \"{su}\""));
            let req = request(&shape, &msgs, &t, &[]);
            let v: serde_json::Value = serde_json::from_slice(&body(&req)).unwrap();
            assert_eq!(v["stream_options"]["include_usage"], true, "{su}");
            assert!(usage_requested(&req));
        }
        let mut plain = request(&shape, &msgs, &t, &[]);
        plain.stream = false;
        assert!(usage_requested(&plain));
        // The API's own cap field by default; apply_shape for the other APIs' bodies.
        let mut map = serde_json::json!({"max_output_tokens": 5, "input": []})
            .as_object()
            .unwrap()
            .clone();
        let mut rs = shape_of(
            "max_tokens_field = \"max_tokens\"\nextra_body = { reasoning = { effort = \"high\" } }",
        );
        rs.api = Api::Responses;
        apply_shape(&mut map, &rs);
        assert_eq!(
            serde_json::Value::Object(map),
            serde_json::json!({"max_tokens": 5, "input": [], "reasoning": {"effort": "high"}})
        );
        assert_eq!(
            target_url(&request(RequestShape::chat_default(), &msgs, &t, &[])),
            "http://h/v1/chat/completions"
        );
    }

    /// Auth styles, literal headers, secret headers (sensitive) and what is never sent.
    #[test]
    fn headers_follow_the_auth_style_and_the_extra_headers() {
        let (msgs, t) = (vec![Message::new("user", "hi")], Timeouts::default());
        let secrets = [SecretHeader::new("x-secret", "s3cr3t-value").unwrap()];
        let shape = shape_of(
            "auth = { header = \"api-key\" }\nheaders = { \"X-Title\" = \"bench\", \"x-secret\" = { env = \"S\" } }",
        );
        let h = headers(&request(&shape, &msgs, &t, &secrets));
        assert_eq!(h["api-key"], "sk-key");
        assert!(h["api-key"].is_sensitive());
        assert!(h.get(AUTHORIZATION).is_none());
        assert_eq!(h["x-title"], "bench");
        assert!(!h["x-title"].is_sensitive());
        assert_eq!(h["x-secret"], "s3cr3t-value");
        assert!(h["x-secret"].is_sensitive());
        assert!(!format!("{:?}", request(&shape, &msgs, &t, &secrets)).contains("s3cr3t"));
        assert!(
            !format!("{:?}", h).contains("s3cr3t"),
            "sensitive values are not printed"
        );
        let none = shape_of("auth = \"none\"\nheaders = { authorization = { env = \"T\" } }");
        let own = [SecretHeader::new("authorization", "Token t").unwrap()];
        let h = headers(&request(&none, &msgs, &t, &own));
        assert_eq!(h[AUTHORIZATION], "Token t");
        assert!(h[AUTHORIZATION].is_sensitive());
        let bearer = headers(&request(RequestShape::chat_default(), &msgs, &t, &[]));
        assert_eq!(bearer[AUTHORIZATION], "Bearer sk-key");
        // content-type, accept, accept-encoding, authorization: nothing else.
        assert_eq!(bearer.len(), 4, "{bearer:?}");
    }

    #[test]
    fn secret_headers_are_read_from_the_environment_and_problems_name_no_value() {
        // SAFETY: variables only this test uses.
        unsafe {
            std::env::set_var("LATMESH_TEST_HDR_OK", " v-1\n");
            std::env::set_var("LATMESH_TEST_HDR_BAD", "v\u{1}-secret");
            std::env::set_var("LATMESH_TEST_HDR_EMPTY", " ");
        }
        let shape = shape_of(
            "headers = { a = { env = \"LATMESH_TEST_HDR_OK\" }, b = { env = \"LATMESH_TEST_HDR_BAD\" }, c = { env = \"LATMESH_TEST_HDR_UNSET\" }, d = \"lit\", e = { env = \"LATMESH_TEST_HDR_EMPTY\" } }",
        );
        let (got, problems) = secret_headers(&shape);
        assert_eq!(got, [SecretHeader::new("a", "v-1").unwrap()]);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("$LATMESH_TEST_HDR_BAD") && !problems[0].contains("secret"));
        assert_eq!(
            problems[1],
            "$LATMESH_TEST_HDR_UNSET (the value of header c) is not set on this agent"
        );
        assert_eq!(
            problems[2],
            "$LATMESH_TEST_HDR_EMPTY (the value of header e) is empty on this agent"
        );
    }

    #[test]
    fn a_refusal_of_stream_options_is_recognized() {
        let rec = |status, msg: &str| ProbeRecord {
            http_status: Some(status),
            error_message: Some(msg.into()),
            ..ProbeRecord::default()
        };
        assert!(refuses_stream_usage(
            &rec(
                400,
                "Unrecognized request argument supplied: stream_options"
            ),
            &[]
        ));
        assert!(refuses_stream_usage(
            &rec(422, "extra fields not permitted: include_usage"),
            &[]
        ));
        assert!(!refuses_stream_usage(
            &rec(400, "max_tokens is too large"),
            &[]
        ));
        assert!(!refuses_stream_usage(&rec(500, "stream_options"), &[]));
        // Named only in `param`, or past the part of the message the record keeps.
        let body = format!(
            r#"{{"error":{{"message":"Unsupported parameter{}","param":"stream_options"}}}}"#,
            " x".repeat(200)
        );
        let named = fields_named_in(body.as_bytes());
        assert_eq!(named, ["stream_options"]);
        assert!(refuses_stream_usage(
            &rec(400, "Unsupported parameter"),
            &named
        ));
        assert!(!refuses_stream_usage(
            &rec(500, "Unsupported parameter"),
            &named
        ));
        assert!(fields_named_in(br#"{"error":{"message":"bad max_tokens"}}"#).is_empty());
    }
}
