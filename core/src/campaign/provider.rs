//! `[[providers]]`: endpoint (base URL, model, key variable), `user_agent`, politeness caps,
//! prices; the request-shaping keys are checked by [`crate::shaping`].

use super::error::{CampaignError, invalid};
use super::file::ProviderSection;
use super::names::check_name;
use super::rounds::MAX_GAP_MS;
use crate::load::{Price, ProviderLimits};
use crate::plan::ProviderSpec;

/// `providers[i]` into a [`ProviderSpec`]; `campaign_user_agent` (`campaign.user_agent`) is
/// the `user-agent` of a provider that sets none.
pub(super) fn validate_provider(
    i: usize,
    p: &ProviderSection,
    campaign_user_agent: Option<&str>,
) -> Result<ProviderSpec, CampaignError> {
    let key = |field: &str| format!("providers[{i}].{field}");
    if let Some(ua) = &p.user_agent {
        check_user_agent(ua).map_err(|m| invalid(key("user_agent"), m))?;
    }
    check_name(&key("name"), &p.name)?;
    let url = check_base_url(&p.base_url)
        .map_err(|m| invalid(key("base_url"), format!("provider {:?}: {m}", p.name)))?;
    if p.model_id.trim().is_empty() {
        return Err(invalid(key("model_id"), "must not be empty"));
    }
    if p.expect_model.as_ref().is_some_and(|m| m.trim().is_empty()) {
        return Err(invalid(
            key("expect_model"),
            "must not be empty (leave it out to expect model_id)",
        ));
    }
    if let Some(env) = &p.api_key_env {
        crate::shaping::check_env_name(env).map_err(|m| invalid(key("api_key_env"), m))?;
    }
    let request = p
        .shape_input()
        .validate()
        .map_err(|e| invalid(key(&e.key), e.message))?;
    Ok(ProviderSpec {
        name: p.name.clone(),
        base_url: url,
        api_key_env: p.api_key_env.clone(),
        model_id: p.model_id.clone(),
        expect_model: p.expect_model.clone(),
        pass_reasoning: p.pass_reasoning,
        limits: validate_limits(i, p)?,
        price: validate_price(i, p)?,
        user_agent: p
            .user_agent
            .clone()
            .or_else(|| campaign_user_agent.map(str::to_string)),
        request,
    })
}

/// Checks an OpenAI-compatible base URL and returns it without trailing slashes.
///
/// The URL must parse as the agents' HTTP client parses it (WHATWG rules, the `url` crate)
/// with an `http` or `https` scheme, a host and, when a colon says a port follows, a port in
/// 1..=65535 (`:65536`, `:-1` or a bare `:` would otherwise reach the client as something
/// else, or as port 80).
///
/// # Errors
/// A message saying what is wrong: not `http://` or `https://`, no host, a bad port,
/// whitespace, credentials, a query or fragment (never quoted), or a URL that already ends in `/chat/completions`.
pub fn check_base_url(url: &str) -> Result<String, String> {
    let trimmed = url.trim_end_matches('/');
    let host = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"));
    if host.is_none_or(|h| h.is_empty() || h.starts_with('/') || h.contains(char::is_whitespace)) {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    }
    if host.is_some_and(|h| h.split('/').next().is_some_and(|auth| auth.contains('@'))) {
        return Err(
            "credentials in the URL (user:key@host) would be stored with the plan: put the key in the variable named by api_key_env".into(),
        );
    }
    // Never quoted: a query may hold a key.
    if trimmed.contains('?') {
        return Err("has a query (?…), which would end up before the API's path (…/v1?a=1/chat/completions): put query parameters in the provider's query table (latmesh probe: --query NAME=VALUE)".into());
    }
    if trimmed.contains('#') {
        return Err("has a fragment (#…), which would end up before the API's path and is never sent: leave it out".into());
    }
    let authority = host
        .unwrap_or_default()
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host_end = authority.rfind(']').map_or(0, |i| i + 1); // [::1]:port
    if let Some((_, port)) = authority[host_end..].rsplit_once(':')
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        return Err(format!(
            "{url:?}: the port {port:?} is not a number in 1..=65535"
        ));
    }
    match url::Url::parse(trimmed) {
        Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => {}
        Ok(_) => return Err(format!("{url:?} has no host")),
        Err(e) => return Err(format!("{url:?} is not a valid URL: {e}")),
    }
    if trimmed.ends_with("/chat/completions") {
        return Err("give the base URL (e.g. …/v1): latmesh appends /chat/completions".into());
    }
    Ok(trimmed.to_string())
}

/// Longest accepted `user_agent`, bytes.
pub const MAX_USER_AGENT_LEN: usize = 256;

/// Checks a `user-agent` value: 1 to [`MAX_USER_AGENT_LEN`] printable ASCII characters
/// (what an HTTP header value can carry unchanged), without leading or trailing blanks.
///
/// # Errors
/// A message saying what is wrong, quoting `value`.
pub fn check_user_agent(value: &str) -> Result<(), String> {
    crate::shaping::check_header_text(value, MAX_USER_AGENT_LEN, true)
}

/// Politeness caps of `providers[i]`.
fn validate_limits(i: usize, p: &ProviderSection) -> Result<ProviderLimits, CampaignError> {
    let key = |field: &str| format!("providers[{i}].{field}");
    if p.max_in_flight == Some(0) {
        return Err(invalid(key("max_in_flight"), "must be at least 1"));
    }
    if let Some(ms) = p.min_gap_ms
        && ms > MAX_GAP_MS
    {
        return Err(invalid(
            key("min_gap_ms"),
            format!("{ms} ms is above the maximum, {MAX_GAP_MS} ms (a day)"),
        ));
    }
    for (field, v) in [
        ("requests_per_min", p.requests_per_min),
        ("tokens_per_min", p.tokens_per_min),
    ] {
        if let Some(v) = v
            && !(v.is_finite() && v > 0.0)
        {
            return Err(invalid(key(field), format!("{v} is not a rate above 0")));
        }
    }
    Ok(ProviderLimits {
        max_in_flight: p.max_in_flight,
        requests_per_min: p.requests_per_min,
        tokens_per_min: p.tokens_per_min,
        min_gap_ms: p.min_gap_ms.filter(|g| *g > 0),
    })
}

/// Prices of `providers[i]`: both or neither.
fn validate_price(i: usize, p: &ProviderSection) -> Result<Option<Price>, CampaignError> {
    let key = |field: &str| format!("providers[{i}].{field}");
    match (p.price_input_usd_per_mtok, p.price_output_usd_per_mtok) {
        (None, None) => Ok(None),
        (Some(input), Some(output)) => {
            for (field, v) in [
                ("price_input_usd_per_mtok", input),
                ("price_output_usd_per_mtok", output),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(invalid(key(field), format!("{v} is not a price ≥ 0")));
                }
            }
            Ok(Some(Price {
                input_usd_per_mtok: input,
                output_usd_per_mtok: output,
            }))
        }
        (Some(_), None) => Err(invalid(
            key("price_output_usd_per_mtok"),
            "missing: give both prices (input and output)",
        )),
        (None, Some(_)) => Err(invalid(
            key("price_input_usd_per_mtok"),
            "missing: give both prices (input and output)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::test_support::{GOOD, err_of};
    use crate::campaign::{load_file, load_toml_str};

    /// `user_agent`: the provider's, else the campaign's, else none (the agents' default);
    /// a value that cannot be sent as a header is refused with its key.
    #[test]
    fn user_agents_per_provider_fall_back_to_the_campaign() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plan.providers[0].user_agent, None);
        let two = format!(
            "{GOOD}\n[[providers]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\nuser_agent = \"own/1\"\n"
        )
        .replace("regions =", "user_agent = \"OpenAI/Python 3.0.0\"\nregions =");
        let plan = load_toml_str(&two, Path::new(".")).unwrap();
        assert_eq!(
            plan.providers[0].user_agent.as_deref(),
            Some("OpenAI/Python 3.0.0")
        );
        assert_eq!(plan.providers[1].user_agent.as_deref(), Some("own/1"));
        let with = |line: &str| GOOD.replace("api_key_env = \"A_KEY\"", line);
        for (text, says) in [
            (
                with("user_agent = \"\""),
                "providers[0].user_agent: must not be empty",
            ),
            (
                with("user_agent = \"a\\nb\""),
                "providers[0].user_agent: \"a\\nb\" has '\\n'",
            ),
            (
                with("user_agent = \"café/1\""),
                "providers[0].user_agent: \"café/1\" has 'é'",
            ),
            (with("user_agent = \" x\""), "starts or ends with a blank"),
            (
                GOOD.replace(
                    "regions =",
                    &format!("user_agent = \"{}\"\nregions =", "x".repeat(300)),
                ),
                "campaign.user_agent: is 300 bytes long, at most 256",
            ),
        ] {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }

    #[test]
    fn expect_model_names_what_the_provider_answers_with() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(
            (
                plan.providers[0].expect_model.as_deref(),
                plan.providers[0].expected_model()
            ),
            (None, "m")
        );
        // Absent from the plan's JSON (so its hash) when not set.
        assert!(
            !serde_json::to_string(&plan)
                .unwrap()
                .contains("expect_model")
        );
        let text = GOOD.replace(
            "model_id = \"m\"",
            "model_id = \"m\"\nexpect_model = \"smollm2\"",
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        assert_eq!(plan.providers[0].expected_model(), "smollm2");
        let e = err_of(&GOOD.replace("model_id = \"m\"", "model_id = \"m\"\nexpect_model = \" \""));
        assert!(e.contains("providers[0].expect_model"), "{e}");
    }

    /// Request shaping per provider and per scenario: every key reaches the plan; each bad
    /// table is refused with its key's name; a typo'd key is an error.
    #[test]
    fn request_shaping_keys_become_the_providers_shape() {
        use crate::api::{AuthStyle, HeaderValueSource, StreamUsage};
        let shaped = GOOD.replace(
            "api_key_env = \"A_KEY\"",
            r#"api_key_env = "A_KEY"
headers = { "X-Title" = "bench", "x-secret" = { env = "SECRET_HDR" } }
query = { "api-version" = "2024-10-21" }
extra_body = { provider = { order = ["x"], allow_fallbacks = false } }
auth = { header = "api-key" }
max_tokens_field = "max_completion_tokens"
stream_usage = "never"
reasoning_tags = { open = "<think>", close = "</think>" }"#,
        );
        let shaped = shaped.replace(
            "max_tokens = 32",
            "max_tokens = 32\nextra_body = { chat_template_kwargs = { enable_thinking = false } }",
        );
        let plan = load_toml_str(&shaped, Path::new(".")).unwrap();
        let r = &plan.providers[0].request;
        assert_eq!(
            r.headers["x-title"],
            HeaderValueSource::Literal("bench".into())
        );
        assert_eq!(
            r.headers["x-secret"],
            HeaderValueSource::Env {
                env: "SECRET_HDR".into()
            }
        );
        assert_eq!(r.query["api-version"], "2024-10-21");
        assert_eq!(
            serde_json::Value::Object(r.extra_body.clone()),
            serde_json::json!({"provider": {"order": ["x"], "allow_fallbacks": false}})
        );
        assert_eq!(r.auth, AuthStyle::Header("api-key".into()));
        assert_eq!(r.max_tokens_field.as_deref(), Some("max_completion_tokens"));
        assert_eq!(r.stream_usage, StreamUsage::Never);
        assert_eq!(r.reasoning_tags.as_ref().unwrap().open, "<think>");
        assert_eq!(
            plan.scenarios[0].extra_body["chat_template_kwargs"],
            serde_json::json!({"enable_thinking": false})
        );
        // The secret header's value never travels: the plan names the variable only.
        let json = serde_json::to_string(&plan).unwrap();
        assert!(
            json.contains(r#""x-secret":{"env":"SECRET_HDR"}"#),
            "{json}"
        );

        let with = |line: &str| GOOD.replace("api_key_env = \"A_KEY\"", line);
        let cases = [
            (
                with("headers = { \"x foo\" = \"v\" }"),
                "providers[0].headers.\"x foo\": \"x foo\" is not a valid header name",
            ),
            (
                with("headers = { \"Content-Length\" = \"5\" }"),
                "providers[0].headers.\"Content-Length\": \"content-length\" is set by latmesh",
            ),
            (
                with("headers = { \"authorization\" = \"Bearer x\" }"),
                "providers[0].headers.\"authorization\": \"authorization\" carries the API key",
            ),
            (
                with("headers = { \"x-foo\" = \"a\\u0001b\" }"),
                "providers[0].headers.\"x-foo\": has U+0001",
            ),
            (
                with("headers = { \"x-foo\" = { env = \"1BAD\" } }"),
                "providers[0].headers.\"x-foo\".env: must be the NAME",
            ),
            (
                with("headers = { \"x-foo\" = { env = \"OK\", default = \"v\" } }"),
                "providers[0].headers",
            ),
            (
                with("query = { \"api-version\" = \"\" }"),
                "providers[0].query.\"api-version\": must not be empty",
            ),
            (
                with("extra_body = { messages = [] }"),
                "providers[0].extra_body.messages: latmesh sets",
            ),
            (
                with("extra_body = { stream = false }"),
                "providers[0].extra_body.stream: latmesh sets",
            ),
            (
                with("auth = \"basic\""),
                "providers[0].auth: \"basic\" is not",
            ),
            (
                with("auth = { header = \"x key\" }"),
                "providers[0].auth.header: \"x key\" is not a valid header name",
            ),
            (
                with("auth = { headers = \"x-api-key\" }"),
                "providers[0].auth",
            ),
            (
                with("max_tokens_field = \"max tokens\""),
                "providers[0].max_tokens_field: \"max tokens\" is not a JSON field name",
            ),
            (
                with("stream_usage = \"maybe\""),
                "providers[0].stream_usage: \"maybe\" is not one of auto, always, never",
            ),
            (
                with("reasoning_tags = { open = \"<t>\", close = \"<t>\" }"),
                "providers[0].reasoning_tags: open and close are the same tag",
            ),
            (
                with("reasoning_tags = { open = \"<t>\" }"),
                "providers[0].reasoning_tags",
            ),
            (with("header = { \"x-foo\" = \"v\" }"), "header"),
            (
                GOOD.replace(
                    "max_tokens = 32",
                    "max_tokens = 32\nextra_body = { input = \"x\" }",
                ),
                "scenarios[0].extra_body.input: latmesh sets",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
        // Never echoes a literal header value (a secret pasted in by mistake).
        let e = err_of(&with("headers = { \"x-key\" = \"sk-live-abcdef \" }"));
        assert!(!e.contains("sk-live-abcdef"), "{e}");

        // YAML: the same keys.
        let yaml = r#"
campaign: {name: t, regions: [us-east]}
rounds: {count: 1, interval_s: 1, gap_ms: 10}
scenarios:
  - name: chat
    prompt_ids: ["code-*"]
    max_tokens: 16
    extra_body: {reasoning_effort: low}
providers:
  - name: az
    base_url: http://127.0.0.1:9/v1
    model_id: m
    headers: {x-trace: "1"}
    query: {api-version: "2024-10-21"}
    auth: {header: api-key}
    extra_body:
      provider: {order: [a, b], allow_fallbacks: false}
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        let r = &plan.providers[0].request;
        assert_eq!(r.auth, AuthStyle::Header("api-key".into()));
        assert_eq!(r.query["api-version"], "2024-10-21");
        assert_eq!(
            r.extra_body["provider"]["order"],
            serde_json::json!(["a", "b"])
        );
        assert_eq!(plan.scenarios[0].extra_body["reasoning_effort"], "low");
        std::fs::write(
            &file,
            yaml.replace("auth: {header: api-key}", "auth: {header: Host}"),
        )
        .unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(
            e.contains("providers[0].auth.header: \"host\" is set by latmesh"),
            "{e}"
        );
    }

    /// The hand-read shaping forms: a wrong type, a sequence where a table is expected, an
    /// unknown or missing key is an error naming the key and the accepted forms, in TOML and
    /// in YAML (the untagged enums said "did not match any variant" and read sequences as
    /// tables).
    #[test]
    fn shaping_forms_name_what_is_accepted() {
        let with = |line: &str| GOOD.replace("api_key_env = \"A_KEY\"", line);
        let toml_cases = [
            (
                with("headers = { \"x-secret\" = [\"H\"] }"),
                "providers[0].headers.x-secret: invalid type: found sequence, expected a string or { env = \"NAME\" }",
            ),
            (
                with("headers = { \"x-trace\" = 5 }"),
                "providers[0].headers.x-trace: invalid type: found signed int `5`, expected a string or { env = \"NAME\" }",
            ),
            (
                with("headers = { \"x-secret\" = { evn = \"X\" } }"),
                "providers[0].headers.x-secret: unknown key \"evn\": expected a string or { env = \"NAME\" }",
            ),
            (
                with("headers = { \"x-secret\" = { env = 1 } }"),
                "providers[0].headers.x-secret: env: not a string: expected a string or { env = \"NAME\" }",
            ),
            (
                with("headers = { \"x-secret\" = {} }"),
                "providers[0].headers.x-secret: env is missing: expected a string or { env = \"NAME\" }",
            ),
            (
                with("auth = [\"api-key\"]"),
                "providers[0].auth: invalid type: found sequence, expected \"bearer\", \"none\" or { header = \"name\" }",
            ),
            (
                with("auth = { headr = \"api-key\" }"),
                "providers[0].auth: unknown key \"headr\": expected \"bearer\", \"none\" or { header = \"name\" }",
            ),
            (
                with("auth = true"),
                "providers[0].auth: invalid type: found bool true, expected \"bearer\", \"none\" or { header = \"name\" }",
            ),
            (
                with("reasoning_tags = [\"<think>\", \"</think>\"]"),
                "providers[0].reasoning_tags: invalid type: found sequence, expected { open = \"<think>\", close = \"</think>\" }",
            ),
            (
                with("reasoning_tags = { open = \"<t>\", clos = \"</t>\" }"),
                "providers[0].reasoning_tags: unknown key \"clos\"",
            ),
            (
                with("reasoning_tags = { open = \"<t>\" }"),
                "providers[0].reasoning_tags: close is missing: expected { open",
            ),
        ];
        for (text, says) in toml_cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
            assert!(!e.contains("untagged"), "{e}");
        }
        let yaml = |shaping: &str| {
            format!(
                "campaign: {{name: t, regions: [us-east]}}\nrounds: {{count: 1, interval_s: 1, gap_ms: 10}}\nscenarios:\n  - {{name: chat, prompt_ids: [\"code-*\"], max_tokens: 16}}\nproviders:\n  - name: a\n    base_url: http://127.0.0.1:9/v1\n    model_id: m\n    {shaping}\n"
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        for (shaping, says) in [
            (
                "headers: {x-secret: [H]}",
                "providers[0].headers.x-secret: invalid type: found sequence, expected a string or { env = \"NAME\" }",
            ),
            (
                "headers: {x-secret: {evn: X}}",
                "providers[0].headers.x-secret: unknown key \"evn\"",
            ),
            (
                "auth: [api-key]",
                "providers[0].auth: invalid type: found sequence, expected \"bearer\", \"none\" or { header = \"name\" }",
            ),
            (
                "reasoning_tags: [<think>, </think>]",
                "providers[0].reasoning_tags: invalid type: found sequence, expected { open",
            ),
        ] {
            std::fs::write(&file, yaml(shaping)).unwrap();
            let e = load_file(&file).unwrap_err().to_string();
            assert!(
                e.contains(says),
                "{shaping}: error {e:?} should contain {says:?}"
            );
        }
        std::fs::write(&file, yaml("headers: {x-secret: {env: SECRET_HDR}}")).unwrap();
        assert_eq!(
            load_file(&file).unwrap().providers[0].request.headers["x-secret"],
            crate::api::HeaderValueSource::Env {
                env: "SECRET_HDR".into()
            }
        );
    }

    /// A credential as a literal header value, a base_url with a query, stream_usage for an
    /// API that does not use it: each an error naming the key, never quoting the value.
    #[test]
    fn credentials_queries_and_misplaced_stream_usage_are_refused() {
        let with = |line: &str| GOOD.replace("api_key_env = \"A_KEY\"", line);
        for (line, name, word) in [
            (
                "auth = \"none\"\nheaders = { authorization = \"Bearer sk-live-abcdef\" }",
                "authorization",
                "auth",
            ),
            (
                "headers = { \"X-Api-Key\" = \"sk-live-abcdef\" }",
                "x-api-key",
                "key",
            ),
            (
                "headers = { \"x-auth-token\" = \"sk-live-abcdef\" }",
                "x-auth-token",
                "auth",
            ),
            (
                "headers = { cookie = \"s=sk-live-abcdef\" }",
                "cookie",
                "cookie",
            ),
            (
                "headers = { \"proxy-authorization\" = \"Basic sk-live-abcdef\" }",
                "proxy-authorization",
                "auth",
            ),
        ] {
            let e = err_of(&with(line));
            let says = format!("{name:?} carries a credential (its name has {word:?})");
            assert!(e.contains(&says), "{line}: {e:?} lacks {says:?}");
            assert!(e.contains("{ env = \"NAME\" }"), "{e}");
            assert!(!e.contains("sk-live-abcdef"), "{e}");
        }
        // The same names from a variable are fine.
        let plan = load_toml_str(
            &with("auth = \"none\"\nheaders = { authorization = { env = \"TOK\" }, \"x-title\" = \"bench\" }"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.providers[0].request.headers.len(), 2);

        let e = err_of(&GOOD.replace("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1?existing=1"));
        assert!(
            e.contains("providers[0].base_url: provider \"a\": has a query (?…)")
                && e.contains("query table"),
            "{e}"
        );
        assert!(!e.contains("existing=1"), "{e}");
        let e = err_of(&GOOD.replace("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1#x"));
        assert!(
            e.contains("providers[0].base_url: provider \"a\": has a fragment"),
            "{e}"
        );

        for api in ["anthropic", "responses"] {
            let e = err_of(&with(&format!("api = \"{api}\"\nstream_usage = \"never\"")));
            assert!(
                e.contains(&format!(
                    "providers[0].stream_usage: applies to api = \"chat\" only (Chat Completions streams ask for usage; api = \"{api}\" reports it unasked)"
                )),
                "{e}"
            );
        }
        assert!(
            load_toml_str(
                &with("api = \"chat\"\nstream_usage = \"never\""),
                Path::new(".")
            )
            .is_ok()
        );
    }

    #[test]
    fn secrets_are_not_echoed_in_api_key_env_errors() {
        let e = err_of(&GOOD.replace("\"A_KEY\"", "\"sk-live-abcdef\""));
        assert!(!e.contains("sk-live-abcdef"), "{e}");
    }

    #[test]
    fn base_urls() {
        assert_eq!(
            check_base_url("https://x.example/v1/").unwrap(),
            "https://x.example/v1"
        );
        assert!(check_base_url("x.example/v1").is_err());
        assert!(check_base_url("http:///v1").is_err());
        assert!(
            check_base_url("http://x/v1/chat/completions")
                .unwrap_err()
                .contains("base URL")
        );
    }
}
