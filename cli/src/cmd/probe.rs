//! `latmesh probe`: one request to a provider through the agent's prober, and what was
//! measured, as JSON (a connectivity check).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use latmesh_core::campaign;
use latmesh_core::plan::Timeouts;
use latmesh_core::prompts::Message;

/// Arguments of `latmesh probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// Base URL of the OpenAI-compatible API (…/v1).
    #[arg(long)]
    base_url: String,
    /// Model id.
    #[arg(long)]
    model: String,
    /// Prompt text (user message).
    #[arg(long, default_value = "Say hello in five words.")]
    prompt: String,
    /// Ask for a non-streaming response.
    #[arg(long)]
    no_stream: bool,
    /// max_tokens.
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Name of the environment variable holding the API key.
    #[arg(long)]
    api_key_env: Option<String>,
    /// PEM file with CA certificate(s) to trust for an https:// base URL, besides the public
    /// webpki roots (a private CA in front of a self-hosted server).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Include the generated text in the output.
    #[arg(long)]
    show_text: bool,
    /// Print JSON (the default; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
    /// Total timeout, seconds (above 0).
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
    /// user-agent header to send (default: the OpenAI Python SDK's, as campaigns).
    #[arg(long, value_parser = parse_user_agent)]
    user_agent: Option<String>,
    /// The API spoken: chat (default), anthropic or responses.
    #[arg(long, value_parser = latmesh_core::api::Api::parse, default_value = "chat")]
    api: latmesh_core::api::Api,
    /// An extra header, `NAME:VALUE` (repeatable). For a secret use --header-env.
    #[arg(long = "header", value_name = "NAME:VALUE")]
    headers: Vec<String>,
    /// An extra header whose value is read from an environment variable, `NAME=VAR`
    /// (repeatable): the secret stays out of the command line and shell history, and is
    /// redacted from the output like the API key.
    #[arg(long = "header-env", value_name = "NAME=VAR")]
    header_envs: Vec<String>,
    /// A query parameter appended to the URL, `NAME=VALUE` (repeatable), e.g.
    /// `api-version=2024-10-21`.
    #[arg(long = "query", value_name = "NAME=VALUE")]
    queries: Vec<String>,
    /// A JSON object merged into the request body (top-level keys replace latmesh's own),
    /// e.g. '{"provider":{"order":["x"],"allow_fallbacks":false}}'.
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,
    /// How the API key is sent: bearer (default), none, or header:NAME (e.g. header:api-key).
    #[arg(long)]
    auth: Option<String>,
    /// The body field carrying the output cap (default: the API's own), e.g.
    /// max_completion_tokens.
    #[arg(long)]
    max_tokens_field: Option<String>,
    /// Whether a chat stream asks for usage: auto (default), always or never.
    #[arg(long)]
    stream_usage: Option<String>,
    /// Tags around reasoning inside content, `OPEN,CLOSE` (e.g. '<think>,</think>').
    #[arg(long, value_name = "OPEN,CLOSE")]
    reasoning_tags: Option<String>,
}

impl ProbeArgs {
    /// The request shape the options describe, validated by the campaign file's rules
    /// ([`latmesh_core::shaping::ShapeInput::validate`]); errors name the option.
    fn shape(&self) -> anyhow::Result<latmesh_core::api::RequestShape> {
        use latmesh_core::shaping::{
            AuthHeader, AuthSection, EnvRef, HeaderSection, ReasoningTagsSection, ShapeInput,
        };
        let mut input = ShapeInput {
            api: self.api,
            max_tokens_field: self.max_tokens_field.clone(),
            stream_usage: self.stream_usage.clone(),
            ..ShapeInput::default()
        };
        let pairs = [
            ("--header", ':', &self.headers, false),
            ("--header-env", '=', &self.header_envs, true),
        ];
        for (option, sep, list, env) in pairs {
            for item in list {
                let (name, value) = item.split_once(sep).with_context(|| {
                    let form = if env { "NAME=VAR" } else { "NAME:VALUE" };
                    format!("{option}: expected {form}, got no {sep:?} (value not shown)")
                })?;
                let value = if env {
                    HeaderSection::Env(EnvRef {
                        env: value.to_string(),
                    })
                } else {
                    HeaderSection::Literal(value.trim().to_string())
                };
                let name = name.trim().to_string();
                anyhow::ensure!(
                    input.headers.insert(name.clone(), value).is_none(),
                    "{option}: header {name:?} is given twice"
                );
            }
        }
        for item in &self.queries {
            let (name, value) = item
                .split_once('=')
                .with_context(|| format!("--query: expected NAME=VALUE, got {item:?}"))?;
            input.query.insert(name.to_string(), value.to_string());
        }
        if let Some(json) = &self.extra_body {
            let v: serde_json::Value =
                serde_json::from_str(json).context("--extra-body: not JSON")?;
            let serde_json::Value::Object(map) = v else {
                anyhow::bail!("--extra-body: must be a JSON object ({{...}})");
            };
            input.extra_body = map;
        }
        input.auth = self.auth.as_ref().map(|a| match a.strip_prefix("header:") {
            Some(h) => AuthSection::Header(AuthHeader {
                header: h.to_string(),
            }),
            None => AuthSection::Name(a.clone()),
        });
        if let Some(tags) = &self.reasoning_tags {
            let (open, close) = tags
                .split_once(',')
                .context("--reasoning-tags: expected OPEN,CLOSE")?;
            input.reasoning_tags = Some(ReasoningTagsSection {
                open: open.to_string(),
                close: close.to_string(),
            });
        }
        input.validate().map_err(|e| {
            let option = match e.key.split(['.', '[']).next().unwrap_or_default() {
                "headers" => "--header/--header-env",
                "query" => "--query",
                "extra_body" => "--extra-body",
                "auth" => "--auth",
                "max_tokens_field" => "--max-tokens-field",
                "stream_usage" => "--stream-usage",
                _ => "--reasoning-tags",
            };
            anyhow::anyhow!("{option}: {e}")
        })
    }
}

fn parse_user_agent(s: &str) -> Result<String, String> {
    campaign::check_user_agent(s).map(|()| s.to_string())
}

/// Sends the request and prints the measured record.
///
/// # Errors
/// Bad options, or an outcome other than `ok`.
pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let api_key = match &args.api_key_env {
        Some(name) => Some(
            latmesh_agent::probe::request::api_key_from_env(name)
                .map_err(|e| anyhow::anyhow!("--api-key-env {name}: {e}"))?
                .with_context(|| {
                    format!(
                        "--api-key-env {name}: the variable {}",
                        latmesh_agent::probe::request::unset_or_empty(name)
                    )
                })?,
        ),
        None => None,
    };
    let base_url =
        campaign::check_base_url(&args.base_url).map_err(|m| anyhow::anyhow!("--base-url: {m}"))?;
    let shape = args.shape()?;
    let (secret_headers, problems) = latmesh_agent::probe::request::secret_headers(&shape);
    anyhow::ensure!(problems.is_empty(), "--header-env: {}", problems.join("; "));
    anyhow::ensure!(
        args.timeout_s.is_finite() && args.timeout_s > 0.0,
        "--timeout-s: must be a number of seconds above 0, got {}",
        args.timeout_s
    );
    let prober =
        latmesh_agent::probe::Prober::with_root_certificate_file(None, args.ca_file.as_deref())
            .context("--ca-file")?;
    let messages = [Message::new("user", args.prompt.clone())];
    let timeouts = Timeouts {
        total_s: args.timeout_s,
        ..Timeouts::default()
    };
    let req = latmesh_agent::probe::ProbeRequest {
        base_url: &base_url,
        model_id: &args.model,
        api_key: api_key.as_deref(),
        messages: &messages,
        stream: !args.no_stream,
        max_tokens: args.max_tokens,
        temperature: None,
        top_p: None,
        timeouts: &timeouts,
        probe_id: None,
        user_agent: args.user_agent.as_deref(),
        shape: &shape,
        secret_headers: &secret_headers,
    };
    let mut result = prober.probe(&req, args.show_text).await;
    // One logical request of one attempt, single turn.
    let rec = &mut result.record;
    (rec.attempt, rec.turn, rec.final_attempt) = (1, 1, true);
    rec.request_latency_us = rec.e2e_us;
    let out = latmesh_agent::probe::ProbeOutput::new(&result, args.show_text)
        .without_key(api_key.as_deref())
        .without_secrets(&secret_headers);
    println!("{}", out.to_json_pretty());
    let outcome = out.record.outcome();
    let hint = if out.record.usage_requested
        && latmesh_agent::probe::request::refuses_stream_usage(
            &out.record,
            &result.error_body_fields,
        ) {
        ": the provider refused stream_options, try --stream-usage never"
    } else {
        ""
    };
    anyhow::ensure!(
        outcome == latmesh_core::record::Outcome::Ok,
        "the probe's outcome is {outcome} (see the record above){hint}"
    );
    Ok(())
}
