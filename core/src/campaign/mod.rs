//! Campaign files: loading (TOML or YAML via figment, `LATMESH_*` overrides) and validation
//! into a [`Plan`].
//!
//! ```toml
//! [campaign]
//! name = "demo"
//! seed = 42                       # optional, default 0
//! regions = ["us-east", "eu-west"]
//! prompt_set = "my-prompts.jsonl" # optional, relative to this file; default: builtin set
//! user_agent = "OpenAI/Python 3.51.0" # optional: user-agent of every provider that sets none
//! percentiles = [50, 90, 95, 99]  # optional (the default): what the matrices and reports show
//!
//! [campaign.timezones]            # optional: region → IANA zone name or fixed UTC offset
//! us-east = "America/New_York"
//! eu-west = "+00:00"
//!
//! [windows]                       # optional: name → local-time ranges (see crate::windows)
//! peak = "09:00-12:00,14:00-18:00"
//! night = "22:00-06:00"           # wraps past midnight
//!
//! [rounds]
//! count = 10
//! interval_s = 4.0
//! gap_ms = 100
//!
//! [[scenarios]]
//! name = "chat-short"
//! prompt_ids = ["short-qa-*"]     # ids or `*` patterns
//! stream = true
//! max_tokens = 64
//! temperature = 0.0               # optional
//! top_p = 1.0                     # optional
//! timeout_total_s = 120           # optional: also timeout_connect_s, timeout_ttft_s, timeout_idle_s
//! turns = 3                       # optional, 1..=10 (default 1): a multi-turn conversation
//! follow_ups = ["Why?", "Example?"] # optional: user messages of turns 2..=turns
//! cache_nonce = true              # optional (default false): "[nonce 1a2b3c4d] " before the prompt
//! retry = { max_retries = 3, backoff_s = [1, 2, 4], on = ["throttled", "http_5xx"], honour_retry_after = true, max_retry_after_s = 30 }
//! max_response_bytes = 67108864   # optional (default 64 MiB): larger bodies end as protocol_error
//! extra_body = { reasoning_effort = "low" } # optional: merged into every request body
//!
//! [[providers]]
//! name = "fast-lane"
//! base_url = "https://api.example.com/v1"
//! model_id = "deepseek-v4-flash"
//! api_key_env = "EXAMPLE_API_KEY" # optional: the variable's *name*
//! pass_reasoning = false          # optional: send earlier turns' reasoning_content back
//! user_agent = "my-app/1.0"       # optional: this provider's user-agent
//! api = "chat"                    # optional: chat (default), anthropic, responses
//! headers = { "x-title" = "bench", "x-secret" = { env = "SECRET_VAR" } } # optional
//! query = { "api-version" = "2024-10-21" }                               # optional
//! extra_body = { provider = { order = ["x"], allow_fallbacks = false } } # optional
//! auth = { header = "api-key" }   # optional: "bearer" (default), "none", { header = … }
//! max_tokens_field = "max_completion_tokens" # optional: default the API's own
//! stream_usage = "auto"           # optional: auto (default), always, never
//! reasoning_tags = { open = "<think>", close = "</think>" } # optional
//! ```
//!
//! Request shaping (the provider keys from `api` on, and a scenario's `extra_body`, merged
//! under the provider's): validated by [`crate::shaping`], whose documentation states the
//! rules; errors name the key (`providers[1].headers."x-foo"`).
//!
//! Client policy (see [`crate::plan::ClientPolicy`]): `turns` makes each slot a conversation
//! whose turn `k` sends the earlier turns' answers as assistant messages and a follow-up user
//! message (the scenario's `follow_ups`, at least `turns − 1` of them, else the builtin ones in
//! the prompt's language). `retry` (every key optional, the defaults shown) retries attempts
//! whose outcome is in `on` (outcome names, not `ok` or `history_rejected`) after
//! `backoff_s[k − 1]` (the last value repeats), or after Retry-After when longer and
//! `honour_retry_after`, capped at `max_retry_after_s`.
//!
//! Environment overrides: `LATMESH_CAMPAIGN__SEED=7`, `LATMESH_ROUNDS__COUNT=3` (section and
//! key separated by a double underscore). Only the `campaign` and `rounds` sections can be
//! overridden this way; any other `LATMESH_*` variable that is not a latmesh setting is an
//! error naming the nearest valid one ([`env_overrides`]). A key written twice is an
//! error too (TOML's parser refuses it; YAML is checked by [`crate::yaml_keys`]).
//!
//! Windows: every result row is labelled with the window its time falls in, in the local time
//! of its region (rules in [`crate::windows`]: the first declared window wins where windows
//! overlap, a time in none is `off-peak`, no `[windows]` means every label is `""`). Window
//! names follow the rules of other names, and `off-peak` is reserved. When `[windows]` is given,
//! every region needs a zone in `[campaign.timezones]` (write `"UTC"` for UTC): windows of
//! local time without a zone would silently be UTC. Zones without windows are allowed (SQL can
//! still group by local hour).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml, Yaml};
use serde::Deserialize;

use crate::api::Api;
use crate::load::{
    Arrivals, DEFAULT_MAX_QUEUE_MS, DEFAULT_SWEEP_STEPS, KneeRule, LoadKind, LoadModel, Price,
    ProviderLimits, RateSpec, SweepSpec,
};
use crate::metrics::{METRICS_VERSION, Metric};
use crate::plan::{
    ClientPolicy, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_PERCENTILES, FailoverSpec, MAX_PERCENTILES,
    MAX_TURNS, MIN_MAX_RESPONSE_BYTES, Plan, PlanPrompt, ProviderSpec, RetryPolicy, RoundsSpec,
    ScenarioSpec, Timeouts,
};
use crate::prompts::{PromptSet, builtin_follow_ups, guess_lang};
use crate::record::Outcome;
use crate::shaping::{AuthSection, HeaderSection, ReasoningTagsSection, ShapeInput};
use crate::windows::{self, OFF_PEAK, Window, Zone};

pub mod env_overrides;

/// A campaign file problem, naming the key (`providers[2].base_url`) or the figment path.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The file could not be parsed or a value has the wrong type (figment's message names
    /// the key and the file).
    #[error("{0}")]
    Parse(String),
    /// A value is present but not acceptable.
    #[error("{key}: {message}")]
    Invalid {
        /// Dotted key path, e.g. `scenarios[1].max_tokens`.
        key: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The prompt set named by `campaign.prompt_set` could not be loaded.
    #[error("campaign.prompt_set: {0}")]
    Prompts(crate::prompts::PromptError),
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> CampaignError {
    CampaignError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// The file as written (before validation).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignFile {
    /// `[campaign]`.
    pub campaign: CampaignSection,
    /// `[rounds]` (needed when a scenario runs in rounds, the default load model).
    pub rounds: Option<RoundsSection>,
    /// `[[scenarios]]`.
    #[serde(default)]
    pub scenarios: Vec<ScenarioSection>,
    /// `[[providers]]`.
    #[serde(default)]
    pub providers: Vec<ProviderSection>,
    /// `[windows]`: name → ranges, in declaration order.
    #[serde(default)]
    pub windows: WindowsSection,
    /// `[schedule]`: repeat the campaign as a series of runs (see [`crate::schedule`]).
    #[serde(default)]
    pub schedule: Option<crate::schedule::ScheduleSection>,
    /// `[selection]`: weights and user scores of the selection matrix (see
    /// [`crate::selection`]).
    #[serde(default)]
    pub selection: Option<crate::selection::SelectionSection>,
}

/// `[windows]`: `(name, ranges text)` pairs, in declaration order when the file was loaded by
/// [`load_file`] or [`load_toml_str`] (which read the order from the text: figment itself
/// sorts keys).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WindowsSection(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for WindowsSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = WindowsSection;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of window name = \"HH:MM-HH:MM,...\"")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(WindowsSection(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The keys of `[windows]` in the order the text declares them; empty when the text does not
/// parse (figment then reports why).
fn declared_window_order(text: &str, yaml: bool) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a table")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut out = Vec::new();
                    while let Some(k) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        out.push(k);
                    }
                    Ok(Keys(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        windows: Option<Keys>,
    }
    let probe: Option<Probe> = if yaml {
        serde_yaml::from_str(text).ok()
    } else {
        toml::from_str(text).ok()
    };
    probe
        .and_then(|p| p.windows)
        .map(|k| k.0)
        .unwrap_or_default()
}

/// `[campaign]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignSection {
    /// Campaign name.
    pub name: String,
    /// Seed of the shared per-round order.
    #[serde(default)]
    pub seed: u64,
    /// Regions to run in.
    pub regions: Vec<String>,
    /// Prompt set file, relative to the campaign file; the builtin set when absent.
    pub prompt_set: Option<PathBuf>,
    /// `[campaign.timezones]`: region → IANA zone name or fixed offset (`+08:00`).
    #[serde(default)]
    pub timezones: BTreeMap<String, String>,
    /// `user-agent` of the providers that set none (`None`: the agents' default).
    pub user_agent: Option<String>,
    /// The percentiles the summary, matrices and reports show (`[50, 90, 95, 99]` when
    /// absent): each in (0, 100), ascending, no repeats.
    pub percentiles: Option<Vec<f64>>,
}

/// `[rounds]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundsSection {
    /// Number of rounds.
    pub count: u32,
    /// Seconds between round starts.
    pub interval_s: f64,
    /// Milliseconds between probe starts within a round.
    pub gap_ms: u64,
}

/// `[[scenarios]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSection {
    /// Unique name.
    pub name: String,
    /// Prompt ids or `*` patterns.
    pub prompt_ids: Vec<String>,
    /// Stream or not (default true).
    #[serde(default = "yes")]
    pub stream: bool,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// Connect timeout, s.
    pub timeout_connect_s: Option<f64>,
    /// TTFT timeout, s.
    pub timeout_ttft_s: Option<f64>,
    /// Idle timeout between body reads, s.
    pub timeout_idle_s: Option<f64>,
    /// Total timeout, s.
    pub timeout_total_s: Option<f64>,
    /// Turns of a multi-turn conversation (1..=10, default 1).
    #[serde(default = "one")]
    pub turns: u32,
    /// User messages of turns 2..=`turns` (default: builtin follow-ups in the prompt's language).
    pub follow_ups: Option<Vec<String>>,
    /// A random nonce in front of the prompt, against provider prompt caches.
    #[serde(default)]
    pub cache_nonce: bool,
    /// Retries of failed attempts.
    pub retry: Option<RetrySection>,
    /// Largest response body of one attempt, bytes (default 64 MiB).
    pub max_response_bytes: Option<u64>,
    /// Load model: `rounds` (default), `sweep` or `rate` (inferred from a `sweep`/`rate`
    /// table when absent).
    pub load: Option<String>,
    /// `[scenarios.sweep]` of a `sweep` scenario.
    pub sweep: Option<SweepSection>,
    /// `[scenarios.rate]` of a `rate` scenario.
    pub rate: Option<RateSection>,
    /// `failover = { chain = [...], attempts = 2, on = [...] }`: client requests through a
    /// primary and its backups.
    pub failover: Option<FailoverSection>,
    /// Merged into every request body of the scenario, under each provider's own
    /// `extra_body` ([`crate::shaping`]).
    #[serde(default)]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
}

/// `failover` of a scenario (see [`crate::plan::FailoverSpec`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverSection {
    /// Provider names: the primary, then the backups in the order tried (at least 2).
    pub chain: Vec<String>,
    /// Attempts per provider before switching, 1..=5 (default 2: retry once, then switch).
    pub attempts: Option<u32>,
    /// Outcome names that make the client try again (default: throttled, http_5xx, every
    /// timeout, truncated, stream_error, connection_error).
    pub on: Option<Vec<String>>,
}

/// `[scenarios.sweep]`: closed-loop concurrency steps (see [`crate::load`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSection {
    /// Concurrency of each step, strictly increasing (default `[4, 8, 16, 32]`).
    pub concurrency: Option<Vec<u32>>,
    /// Length of each step, seconds.
    pub step_s: f64,
    /// Per provider and step: stop after this many requests.
    pub step_requests: Option<u32>,
    /// Knee metric: `ttft`, `ttfc` or `e2e` (default `e2e`).
    pub knee_metric: Option<String>,
    /// Knee percentile in (0, 100) (default 50).
    pub knee_percentile: Option<f64>,
    /// Knee elasticity threshold, > 0 (default 0.5).
    pub knee_elasticity: Option<f64>,
    /// Knee error-rate threshold, % in (0, 100] (default 5).
    pub knee_error_pct: Option<f64>,
    /// Fewest ended requests a step needs to be judged for the knee, ≥ 1 (default 30).
    pub knee_min_requests: Option<u32>,
}

/// `[scenarios.rate]`: open-loop arrivals (see [`crate::load`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSection {
    /// Arrivals per second, per provider and per agent.
    pub rps: f64,
    /// `constant` (default) or `poisson`.
    pub arrivals: Option<String>,
    /// How long arrivals are generated, seconds.
    pub duration_s: f64,
    /// Longest wait for the provider's in-flight cap before an arrival is dropped, seconds
    /// (default 10).
    pub max_queue_s: Option<f64>,
}

fn one() -> u32 {
    1
}

/// `retry = { … }` of a scenario: every key optional (defaults: 3 retries after 1, 2, 4 s, of
/// `throttled` and `http_5xx`, honouring Retry-After up to 30 s).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// Retries after the first attempt (0..=10).
    pub max_retries: Option<u32>,
    /// Wait before retry k, seconds: `backoff_s[k − 1]`, the last value repeating.
    pub backoff_s: Option<Vec<f64>>,
    /// Outcome names that are retried.
    pub on: Option<Vec<String>>,
    /// Wait at least Retry-After (capped at `max_retry_after_s`).
    pub honour_retry_after: Option<bool>,
    /// Longest Retry-After honoured, seconds.
    pub max_retry_after_s: Option<f64>,
}

fn yes() -> bool {
    true
}

/// `[[providers]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// Unique name.
    pub name: String,
    /// OpenAI-compatible base URL (ending before `/chat/completions`).
    pub base_url: String,
    /// Name of the env var holding the API key.
    pub api_key_env: Option<String>,
    /// Model id.
    pub model_id: String,
    /// The model name the provider is expected to answer with, when it is not `model_id`
    /// (matched by `answered_model::model_matches`); e.g. the file llama-server loaded.
    pub expect_model: Option<String>,
    /// Send earlier turns' reasoning back as `reasoning_content` (multi-turn scenarios).
    #[serde(default)]
    pub pass_reasoning: bool,
    /// Politeness: most requests in flight from one agent.
    pub max_in_flight: Option<u32>,
    /// Politeness: requests per minute over all agents (each agent keeps its share).
    pub requests_per_min: Option<f64>,
    /// Politeness: tokens (prompt estimate + `max_tokens`) per minute over all agents.
    pub tokens_per_min: Option<f64>,
    /// Politeness: least time between two requests from one agent, ms.
    pub min_gap_ms: Option<u64>,
    /// Budget guard: USD per million prompt tokens.
    pub price_input_usd_per_mtok: Option<f64>,
    /// Budget guard: USD per million completion tokens.
    pub price_output_usd_per_mtok: Option<f64>,
    /// `user-agent` sent to this provider (`None`: `campaign.user_agent`, else the agents'
    /// default).
    pub user_agent: Option<String>,
    /// The HTTP API spoken: `chat` (default), `anthropic` or `responses`.
    #[serde(default)]
    pub api: Api,
    /// Extra headers: name → literal value or `{ env = "NAME" }` ([`crate::shaping`]).
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderSection>,
    /// Query parameters appended to the URL.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Merged into the request body (top-level keys replace latmesh's own).
    #[serde(default)]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// `"bearer"` (default), `"none"` or `{ header = "name" }`.
    pub auth: Option<AuthSection>,
    /// The body field carrying the output cap (default: the API's own).
    pub max_tokens_field: Option<String>,
    /// `auto` (default), `always` or `never`: whether chat streams ask for usage.
    pub stream_usage: Option<String>,
    /// `{ open = "<think>", close = "</think>" }`: reasoning inside `content`.
    pub reasoning_tags: Option<ReasoningTagsSection>,
}

impl ProviderSection {
    /// The shaping keys of this provider, for [`ShapeInput::validate`].
    pub fn shape_input(&self) -> ShapeInput {
        ShapeInput {
            api: self.api,
            headers: self.headers.clone(),
            query: self.query.clone(),
            extra_body: self.extra_body.clone(),
            auth: self.auth.clone(),
            max_tokens_field: self.max_tokens_field.clone(),
            stream_usage: self.stream_usage.clone(),
            reasoning_tags: self.reasoning_tags.clone(),
        }
    }
}

/// Loads and validates a campaign file (`.toml`, `.yaml`/`.yml`) with `LATMESH_*` overrides.
///
/// # Errors
/// [`CampaignError`] naming the key that is wrong.
pub fn load_file(path: &Path) -> Result<Plan, CampaignError> {
    if path.is_dir() {
        return Err(CampaignError::Parse(format!(
            "campaign file {} is a directory",
            path.display()
        )));
    }
    if !path.is_file() {
        return Err(CampaignError::Parse(format!(
            "campaign file {} does not exist",
            path.display()
        )));
    }
    let is_yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let fig = if is_yaml {
        Figment::from(Yaml::file(path))
    } else {
        Figment::from(Toml::file(path))
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let text = std::fs::read_to_string(path).ok();
    if is_yaml && let Some(text) = &text {
        crate::yaml_keys::check_no_duplicate_keys(text)
            .map_err(|e| CampaignError::Parse(format!("{}: {e}", path.display())))?;
    }
    let order = text
        .map(|text| declared_window_order(&text, is_yaml))
        .unwrap_or_default();
    // Parse errors name the file already (figment's source, or `path` for a problem of the
    // whole file); validation errors get it here.
    from_figment(fig, &base, &order, Some(path)).map_err(|e| match e {
        CampaignError::Invalid { key, message } => CampaignError::Invalid {
            key: format!("{}: {key}", path.display()),
            message,
        },
        CampaignError::Prompts(p) => {
            CampaignError::Parse(format!("{}: campaign.prompt_set: {p}", path.display()))
        }
        other => other,
    })
}

/// Loads and validates campaign TOML text (relative paths resolve against `base_dir`), with
/// `LATMESH_*` overrides.
///
/// # Errors
/// [`CampaignError`] naming the key that is wrong.
pub fn load_toml_str(text: &str, base_dir: &Path) -> Result<Plan, CampaignError> {
    let order = declared_window_order(text, false);
    from_figment(Figment::from(Toml::string(text)), base_dir, &order, None)
}

/// Extracts and validates; `window_order` is the declaration order of `[windows]` (figment
/// hands its keys over sorted); `file` names the source of problems figment has none for
/// (a missing `[campaign]`).
fn from_figment(
    fig: Figment,
    base_dir: &Path,
    window_order: &[String],
    file: Option<&Path>,
) -> Result<Plan, CampaignError> {
    // A mistyped override would otherwise be dropped by the filter below, in silence.
    env_overrides::check_env(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
        .map_err(CampaignError::Parse)?;
    let env = Env::prefixed("LATMESH_")
        .filter(|k| {
            let k = k.as_str().to_ascii_lowercase();
            k.starts_with("campaign__") || k.starts_with("rounds__")
        })
        .split("__");
    let mut file: CampaignFile = fig
        .merge(env)
        .extract()
        .map_err(|e| figment_error(e, file))?;
    let rank = |name: &str| {
        window_order
            .iter()
            .position(|n| n == name)
            .unwrap_or(usize::MAX)
    };
    file.windows.0.sort_by_key(|(name, _)| rank(name));
    validate(file, base_dir)
}

/// One line per problem: `FILE: key.path: what is wrong`, in the file's own terms (no Rust
/// type names, no figment profile prefix); FILE is the path figment read (as the user can
/// find it, not relative to the working directory), else `file`.
fn figment_error(e: figment::Error, file: Option<&Path>) -> CampaignError {
    let lines: Vec<String> = e
        .into_iter()
        .map(|e| {
            let mut kind = e.kind.to_string();
            if let Some(at) = kind.find("expected struct ") {
                kind.truncate(at);
                kind.push_str("expected a table");
            }
            // Keys as validation names them: `scenarios[0].turns`.
            let mut key = String::new();
            for part in &e.path {
                if part.parse::<usize>().is_ok() {
                    key.push_str(&format!("[{part}]"));
                } else {
                    if !key.is_empty() {
                        key.push('.');
                    }
                    key.push_str(part);
                }
            }
            let from_env = e
                .metadata
                .as_ref()
                .is_some_and(|m| m.name.contains("environment"));
            let source = if from_env {
                Some(format!(
                    "environment variable LATMESH_{}",
                    e.path.join("__").to_ascii_uppercase()
                ))
            } else {
                match e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
                    Some(figment::Source::File(p)) => Some(p.display().to_string()),
                    Some(s) => Some(s.to_string()),
                    None => file.map(|f| f.display().to_string()),
                }
            };
            match (source, key.is_empty()) {
                (Some(src), false) => format!("{src}: {key}: {kind}"),
                (Some(src), true) => format!("{src}: {kind}"),
                (None, false) => format!("{key}: {kind}"),
                (None, true) => kind,
            }
        })
        .collect();
    CampaignError::Parse(lines.join("\n"))
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

/// Checks a campaign, region, provider or scenario name: 1-64 of `A-Z a-z 0-9 - _ .`.
///
/// # Errors
/// A message saying what a valid name is, quoting `value`.
pub fn check_name_text(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a valid name (1-64 of A-Z a-z 0-9 - _ .)"
        ))
    }
}

fn check_name(key: &str, value: &str) -> Result<(), CampaignError> {
    check_name_text(value).map_err(|m| invalid(key, m))
}

fn check_unique<'a>(
    section: &str,
    names: impl Iterator<Item = &'a str>,
) -> Result<(), CampaignError> {
    let mut seen: Vec<&str> = Vec::new();
    for (i, n) in names.enumerate() {
        if seen.contains(&n) {
            return Err(invalid(
                format!("{section}[{i}].name"),
                format!("{n:?} is used twice"),
            ));
        }
        seen.push(n);
    }
    Ok(())
}

/// Most retries a scenario may ask for.
const MAX_RETRIES: u32 = 10;
/// Longest backoff or honoured Retry-After, seconds.
const MAX_WAIT_S: f64 = 3_600.0;

fn check_wait_s(key: String, s: f64) -> Result<u64, CampaignError> {
    if s.is_finite() && (0.0..=MAX_WAIT_S).contains(&s) {
        Ok((s * 1000.0).round() as u64)
    } else {
        Err(invalid(
            key,
            format!("{s} is not a wait in seconds in [0, {MAX_WAIT_S}]"),
        ))
    }
}

/// `scenarios[i].retry` into a [`RetryPolicy`].
fn validate_retry(i: usize, r: &RetrySection) -> Result<RetryPolicy, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].retry.{field}");
    let d = RetryPolicy::default();
    let max_retries = r.max_retries.unwrap_or(d.max_retries);
    if max_retries > MAX_RETRIES {
        return Err(invalid(
            key("max_retries"),
            format!("{max_retries} is not in 0..={MAX_RETRIES}"),
        ));
    }
    let backoff_ms = match &r.backoff_s {
        None => d.backoff_ms,
        Some(list) if list.is_empty() => {
            return Err(invalid(
                key("backoff_s"),
                "name at least one wait (e.g. [1, 2, 4])",
            ));
        }
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(j, s)| check_wait_s(key(&format!("backoff_s[{j}]")), *s))
            .collect::<Result<_, _>>()?,
    };
    let on = match &r.on {
        None => d.on,
        Some(names) => {
            if names.is_empty() {
                return Err(invalid(key("on"), "name at least one outcome to retry"));
            }
            let mut on = Vec::new();
            for (j, name) in names.iter().enumerate() {
                let k = key(&format!("on[{j}]"));
                let retryable: Vec<&str> = Outcome::ALL
                    .iter()
                    .filter(|o| {
                        !matches!(
                            o,
                            Outcome::Ok
                                | Outcome::HistoryRejected
                                | Outcome::Cancelled
                                | Outcome::Dropped
                        )
                    })
                    .map(|o| o.as_str())
                    .collect();
                match Outcome::parse(name) {
                    Some(Outcome::Ok) => return Err(invalid(k, "\"ok\" is never retried")),
                    Some(Outcome::HistoryRejected) => {
                        return Err(invalid(
                            k,
                            "\"history_rejected\" would be rejected again: it is never retried",
                        ));
                    }
                    Some(o @ (Outcome::Cancelled | Outcome::Dropped)) => {
                        return Err(invalid(
                            k,
                            format!(
                                "\"{o}\" is never sent again: the agent, not the provider, ended it"
                            ),
                        ));
                    }
                    Some(o) if !on.contains(&o) => on.push(o),
                    Some(_) => return Err(invalid(k, format!("{name:?} is listed twice"))),
                    None => {
                        return Err(invalid(
                            k,
                            format!(
                                "{name:?} is not an outcome (retryable: {})",
                                retryable.join(", ")
                            ),
                        ));
                    }
                }
            }
            on
        }
    };
    let max_retry_after_ms = match r.max_retry_after_s {
        None => d.max_retry_after_ms,
        Some(s) => check_wait_s(key("max_retry_after_s"), s)?,
    };
    Ok(RetryPolicy {
        max_retries,
        backoff_ms,
        on,
        honour_retry_after: r.honour_retry_after.unwrap_or(d.honour_retry_after),
        max_retry_after_ms,
    })
}

/// `turns`, `follow_ups`, `cache_nonce` and `retry` of `scenarios[i]`: the policy and the
/// explicit follow-ups (`None`: use the builtin ones per prompt).
fn validate_policy(
    i: usize,
    s: &ScenarioSection,
) -> Result<(ClientPolicy, Option<Vec<String>>), CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    if !(1..=MAX_TURNS).contains(&s.turns) {
        return Err(invalid(
            key("turns"),
            format!("{} is not in 1..={MAX_TURNS}", s.turns),
        ));
    }
    let follow_ups = match &s.follow_ups {
        None => None,
        Some(_) if s.turns == 1 => {
            return Err(invalid(
                key("follow_ups"),
                "only multi-turn scenarios send follow-ups: set turns = 2 or more",
            ));
        }
        Some(list) => {
            let need = (s.turns - 1) as usize;
            if list.len() < need {
                return Err(invalid(
                    key("follow_ups"),
                    format!(
                        "{} given, turns = {} needs {need} (one user message for each of turns 2..={})",
                        list.len(),
                        s.turns,
                        s.turns
                    ),
                ));
            }
            if let Some(j) = list.iter().position(|f| f.trim().is_empty()) {
                return Err(invalid(
                    key(&format!("follow_ups[{j}]")),
                    "must not be empty",
                ));
            }
            Some(list[..need].to_vec())
        }
    };
    let retry = s.retry.as_ref().map(|r| validate_retry(i, r)).transpose()?;
    let max_response_bytes = match s.max_response_bytes {
        None => DEFAULT_MAX_RESPONSE_BYTES,
        Some(n) if n >= MIN_MAX_RESPONSE_BYTES => n,
        Some(n) => {
            return Err(invalid(
                key("max_response_bytes"),
                format!("{n} is below the smallest allowed, {MIN_MAX_RESPONSE_BYTES} (1 KiB)"),
            ));
        }
    };
    Ok((
        ClientPolicy {
            turns: s.turns,
            cache_nonce: s.cache_nonce,
            retry,
            max_response_bytes,
        },
        follow_ups,
    ))
}

fn check_seconds(key: String, v: Option<f64>, default: f64) -> Result<f64, CampaignError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(s),
        Some(s) => Err(invalid(
            key,
            format!("{s} is not a duration in seconds in (0, 86400]"),
        )),
    }
}

/// Validates a parsed file into a plan. Errors name the key; no I/O except reading the prompt
/// set named by `campaign.prompt_set`.
///
/// # Errors
/// [`CampaignError::Invalid`] for the first bad value.
pub fn validate(file: CampaignFile, base_dir: &Path) -> Result<Plan, CampaignError> {
    let c = &file.campaign;
    check_name("campaign.name", &c.name)?;
    if c.regions.is_empty() {
        return Err(invalid("campaign.regions", "name at least one region"));
    }
    for (i, r) in c.regions.iter().enumerate() {
        check_name(&format!("campaign.regions[{i}]"), r)?;
        if c.regions[..i].contains(r) {
            return Err(invalid(
                format!("campaign.regions[{i}]"),
                format!("{r:?} is listed twice"),
            ));
        }
    }
    if file.providers.is_empty() {
        return Err(invalid("providers", "name at least one [[providers]]"));
    }
    if file.scenarios.is_empty() {
        return Err(invalid("scenarios", "name at least one [[scenarios]]"));
    }
    let loads: Vec<LoadModel> = file
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| validate_load(i, s))
        .collect::<Result<_, _>>()?;
    let rounds_scenarios = loads.iter().filter(|l| l.is_rounds()).count();
    let rounds = match (&file.rounds, rounds_scenarios) {
        (None, 0) => RoundsSpec {
            count: 0,
            interval_ms: 0,
            gap_ms: 0,
        },
        (None, _) => {
            return Err(invalid(
                "rounds",
                "missing: scenarios without `load` run in rounds and need [rounds] (count, interval_s, gap_ms)",
            ));
        }
        (Some(r), _) => {
            // Slots per round: a provider each, or a failover chain's request + its backups.
            let slots: usize = file
                .scenarios
                .iter()
                .zip(&loads)
                .filter(|(_, l)| l.is_rounds())
                .map(|(s, _)| {
                    s.failover
                        .as_ref()
                        .map_or(file.providers.len(), |f| f.chain.len())
                })
                .sum();
            validate_rounds(r, slots.max(1))?
        }
    };

    check_span(&rounds, &loads)?;
    if let Some(ua) = &c.user_agent {
        check_user_agent(ua).map_err(|m| invalid("campaign.user_agent", m))?;
    }
    let mut providers = Vec::new();
    for (i, p) in file.providers.iter().enumerate() {
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
        providers.push(ProviderSpec {
            name: p.name.clone(),
            base_url: url,
            api_key_env: p.api_key_env.clone(),
            model_id: p.model_id.clone(),
            expect_model: p.expect_model.clone(),
            pass_reasoning: p.pass_reasoning,
            limits: validate_limits(i, p)?,
            price: validate_price(i, p)?,
            user_agent: p.user_agent.clone().or_else(|| c.user_agent.clone()),
            request,
        });
    }
    check_unique("providers", file.providers.iter().map(|p| p.name.as_str()))?;

    let prompt_set = match &c.prompt_set {
        None => PromptSet::builtin(),
        Some(path) => PromptSet::load(&base_dir.join(path)).map_err(CampaignError::Prompts)?,
    };
    let mut scenarios = Vec::new();
    for (i, s) in file.scenarios.iter().enumerate() {
        let key = |field: &str| format!("scenarios[{i}].{field}");
        check_name(&key("name"), &s.name)?;
        if s.max_tokens == 0 || s.max_tokens > 1_000_000 {
            return Err(invalid(
                key("max_tokens"),
                format!("{} is not in 1..=1000000", s.max_tokens),
            ));
        }
        if let Some(t) = s.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(invalid(key("temperature"), format!("{t} is not in [0, 2]")));
        }
        if let Some(t) = s.top_p
            && !(t > 0.0 && t <= 1.0)
        {
            return Err(invalid(key("top_p"), format!("{t} is not in (0, 1]")));
        }
        if s.prompt_ids.is_empty() {
            return Err(invalid(
                key("prompt_ids"),
                "name at least one prompt id or pattern",
            ));
        }
        let (policy, follow_ups) = validate_policy(i, s)?;
        crate::shaping::check_extra_body(&key("extra_body"), &s.extra_body)
            .map_err(|e| invalid(e.key, e.message))?;
        let follow_ups_for = |p: &crate::prompts::Prompt| -> Vec<String> {
            let need = (policy.turns - 1) as usize;
            if need == 0 {
                return Vec::new();
            }
            if let Some(list) = &follow_ups {
                return list.clone();
            }
            let lang = if p.lang.is_empty() {
                guess_lang(&p.messages)
            } else {
                p.lang.as_str()
            };
            builtin_follow_ups(lang)[..need]
                .iter()
                .map(|f| (*f).to_string())
                .collect()
        };
        let mut prompts: Vec<PlanPrompt> = Vec::new();
        for (j, pattern) in s.prompt_ids.iter().enumerate() {
            let found = prompt_set.select(pattern);
            if found.is_empty() {
                return Err(invalid(
                    format!("scenarios[{i}].prompt_ids[{j}]"),
                    format!("{pattern:?} matches no prompt in {}", prompt_set.name),
                ));
            }
            for p in found {
                if !prompts.iter().any(|q| q.id == p.id) {
                    prompts.push(PlanPrompt {
                        id: p.id.clone(),
                        messages: p.messages.clone(),
                        follow_ups: follow_ups_for(p),
                    });
                }
            }
        }
        // Defaults never exceed a total the user set (timeout_total_s = 30 alone is fine).
        let d = Timeouts::default();
        let total_s = check_seconds(key("timeout_total_s"), s.timeout_total_s, d.total_s)?;
        let timeouts = Timeouts {
            connect_s: check_seconds(
                key("timeout_connect_s"),
                s.timeout_connect_s,
                d.connect_s.min(total_s),
            )?,
            ttft_s: check_seconds(
                key("timeout_ttft_s"),
                s.timeout_ttft_s,
                d.ttft_s.min(total_s),
            )?,
            idle_s: check_seconds(
                key("timeout_idle_s"),
                s.timeout_idle_s,
                d.idle_s.min(total_s),
            )?,
            total_s,
        };
        for (field, v) in [
            ("timeout_connect_s", timeouts.connect_s),
            ("timeout_ttft_s", timeouts.ttft_s),
            ("timeout_idle_s", timeouts.idle_s),
        ] {
            if v > timeouts.total_s {
                return Err(invalid(
                    key(field),
                    format!(
                        "{v} s is longer than timeout_total_s ({} s), which would always fire first",
                        timeouts.total_s
                    ),
                ));
            }
        }
        scenarios.push(ScenarioSpec {
            name: s.name.clone(),
            stream: s.stream,
            max_tokens: s.max_tokens,
            temperature: s.temperature,
            top_p: s.top_p,
            timeouts,
            prompts,
            policy,
            load: loads[i].clone(),
            failover: validate_failover(i, s, &file.providers, &loads[i])?,
            extra_body: s.extra_body.clone(),
        });
    }
    check_unique("scenarios", file.scenarios.iter().map(|s| s.name.as_str()))?;
    let (timezones, windows) = validate_windows(&file)?;
    let schedule = validate_schedule(&file, &timezones, &windows)?;
    let selection = crate::selection::validate(file.selection.as_ref(), &providers)
        .map_err(|(key, message)| invalid(key, message))?;
    let percentiles = validate_percentiles(c.percentiles.as_deref())?;

    Ok(Plan {
        name: c.name.clone(),
        seed: c.seed,
        metrics_version: METRICS_VERSION,
        regions: c.regions.clone(),
        rounds,
        providers,
        scenarios,
        prompt_set: prompt_set.name,
        timezones,
        windows,
        schedule,
        selection,
        percentiles,
    })
}

/// `campaign.percentiles`: each in (0, 100), strictly ascending (sorted, no repeats), 1 to
/// [`MAX_PERCENTILES`] of them; [`DEFAULT_PERCENTILES`] when absent.
fn validate_percentiles(list: Option<&[f64]>) -> Result<Vec<f64>, CampaignError> {
    let Some(list) = list else {
        return Ok(DEFAULT_PERCENTILES.to_vec());
    };
    if list.is_empty() {
        return Err(invalid(
            "campaign.percentiles",
            "name at least one percentile (e.g. [50, 90, 95, 99]), or leave the key out",
        ));
    }
    if list.len() > MAX_PERCENTILES {
        return Err(invalid(
            "campaign.percentiles",
            format!(
                "{} percentiles: at most {MAX_PERCENTILES} fit a matrix cell",
                list.len()
            ),
        ));
    }
    for (i, &p) in list.iter().enumerate() {
        let key = format!("campaign.percentiles[{i}]");
        if !(p > 0.0 && p < 100.0) {
            return Err(invalid(key, format!("{p} is not in (0, 100) (P50 is 50)")));
        }
        if i > 0 && p <= list[i - 1] {
            return Err(invalid(
                key,
                format!(
                    "{p} {} {}: list the percentiles in ascending order, each once",
                    if p == list[i - 1] {
                        "repeats"
                    } else {
                        "comes after"
                    },
                    list[i - 1]
                ),
            ));
        }
    }
    Ok(list.to_vec())
}

/// `[schedule]`, checked against the campaign's regions, zones and windows.
fn validate_schedule(
    file: &CampaignFile,
    timezones: &BTreeMap<String, String>,
    windows: &[Window],
) -> Result<Option<crate::schedule::Schedule>, CampaignError> {
    file.schedule
        .as_ref()
        .map(|s| crate::schedule::validate(s, &file.campaign.regions, timezones, windows))
        .transpose()
        .map_err(|(key, message)| invalid(key, message))
}

/// Longest `rounds.gap_ms`: the longest `interval_s` (a day), in ms.
pub const MAX_GAP_MS: u64 = 86_400_000;

/// `[rounds]` for `slots` probes per round.
fn validate_rounds(r: &RoundsSection, slots: usize) -> Result<RoundsSpec, CampaignError> {
    if r.count == 0 || r.count > 1_000_000 {
        return Err(invalid(
            "rounds.count",
            format!("{} is not in 1..=1000000", r.count),
        ));
    }
    if !(r.interval_s.is_finite() && r.interval_s > 0.0 && r.interval_s <= 86_400.0) {
        return Err(invalid(
            "rounds.interval_s",
            format!("{} is not in (0, 86400] seconds", r.interval_s),
        ));
    }
    if r.gap_ms > MAX_GAP_MS {
        return Err(invalid(
            "rounds.gap_ms",
            format!(
                "{} ms is above the maximum, {MAX_GAP_MS} ms (a day, the longest interval_s)",
                r.gap_ms
            ),
        ));
    }
    let interval_ms = (r.interval_s * 1000.0).round() as u64;
    let slots = slots as u64;
    // Checked: a gap of a day times a huge number of slots must not wrap to a short round.
    let round_ms = slots.saturating_sub(1).checked_mul(r.gap_ms);
    if round_ms.is_none_or(|ms| ms >= interval_ms) {
        return Err(invalid(
            "rounds.interval_s",
            format!(
                "{} s is too short: {} probes per round {} ms apart need more than {} ms (raise interval_s or lower gap_ms)",
                r.interval_s,
                slots,
                r.gap_ms,
                round_ms.map_or_else(|| "u64::MAX".to_string(), |ms| ms.to_string())
            ),
        ));
    }
    Ok(RoundsSpec {
        count: r.count,
        interval_ms,
        gap_ms: r.gap_ms,
    })
}

/// Longest campaign, µs from its start to the end of its last phase: 10,000 years (every
/// single load model at its largest fits; a sum of many that does not is refused, so that no
/// planned instant can overflow).
pub const MAX_PLAN_SPAN_US: u64 = 10_000 * 365 * 86_400 * 1_000_000;

/// The phases of `rounds` and `loads` (as [`Plan::phases`] lays them out), added with checked
/// arithmetic: at most [`MAX_PLAN_SPAN_US`].
fn check_span(rounds: &RoundsSpec, loads: &[LoadModel]) -> Result<(), CampaignError> {
    let too_long = |key: String| {
        invalid(
            key,
            "the campaign's phases up to this one last more than the maximum, 10000 years",
        )
    };
    let settle = crate::plan::PHASE_SETTLE_US;
    let mut at: u64 = 0;
    if loads.iter().any(LoadModel::is_rounds) {
        at = u64::from(rounds.count)
            .checked_mul(rounds.interval_ms)
            .and_then(|ms| ms.checked_mul(1000))
            .and_then(|us| us.checked_add(settle))
            .filter(|&us| us <= MAX_PLAN_SPAN_US)
            .ok_or_else(|| too_long("rounds".into()))?;
    }
    for (i, load) in loads.iter().enumerate() {
        let span_us = match load {
            LoadModel::Rounds => continue,
            LoadModel::Sweep(sw) => (sw.concurrency.len() as u64)
                .checked_mul(sw.step_ms)
                .and_then(|ms| ms.checked_mul(1000)),
            LoadModel::Rate(r) => r.duration_ms.checked_mul(1000),
        };
        at = span_us
            .and_then(|us| at.checked_add(us))
            .and_then(|us| us.checked_add(settle))
            .filter(|&us| us <= MAX_PLAN_SPAN_US)
            .ok_or_else(|| too_long(format!("scenarios[{i}]")))?;
    }
    Ok(())
}

/// A number of seconds in `(0, max_s]` as ms.
fn check_positive_s(key: String, s: f64, max_s: f64) -> Result<u64, CampaignError> {
    if s.is_finite() && s > 0.0 && s <= max_s {
        Ok(((s * 1000.0).round() as u64).max(1))
    } else {
        Err(invalid(
            key,
            format!("{s} is not a duration in seconds in (0, {max_s}]"),
        ))
    }
}

/// Most steps a sweep may have, and the largest concurrency of a step.
const MAX_SWEEP_STEPS: usize = 64;
const MAX_CONCURRENCY: u32 = 100_000;
/// Most arrivals one (rate scenario, provider) may plan per agent.
const MAX_ARRIVALS: f64 = 10_000_000.0;

/// `load`, `sweep` and `rate` of `scenarios[i]`.
fn validate_load(i: usize, s: &ScenarioSection) -> Result<LoadModel, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    let kind = match (s.load.as_deref(), &s.sweep, &s.rate) {
        (None, None, None) => LoadKind::Rounds,
        (None, Some(_), None) => LoadKind::Sweep,
        (None, None, Some(_)) => LoadKind::Rate,
        (None, Some(_), Some(_)) => {
            return Err(invalid(
                key("load"),
                "both [sweep] and [rate] given: set load = \"sweep\" or \"rate\" and keep one",
            ));
        }
        (Some(name), _, _) => LoadKind::parse(name)
            .filter(|_| !name.is_empty())
            .ok_or_else(|| {
                invalid(
                    key("load"),
                    format!("{name:?} is not a load model (rounds, sweep, rate)"),
                )
            })?,
    };
    let stray = match kind {
        LoadKind::Rounds => s
            .sweep
            .as_ref()
            .map(|_| "sweep")
            .or(s.rate.as_ref().map(|_| "rate")),
        LoadKind::Sweep => s.rate.as_ref().map(|_| "rate"),
        LoadKind::Rate => s.sweep.as_ref().map(|_| "sweep"),
    };
    if let Some(table) = stray {
        return Err(invalid(key(table), format!("given, but load = \"{kind}\"")));
    }
    match kind {
        LoadKind::Rounds => Ok(LoadModel::Rounds),
        LoadKind::Sweep => {
            let sw = s.sweep.as_ref().ok_or_else(|| {
                invalid(
                    key("sweep"),
                    "missing: a sweep needs [scenarios.sweep] with step_s (and optionally concurrency = [4, 8, 16, 32])",
                )
            })?;
            let key = |field: &str| format!("scenarios[{i}].sweep.{field}");
            let concurrency = sw
                .concurrency
                .clone()
                .unwrap_or_else(|| DEFAULT_SWEEP_STEPS.to_vec());
            if concurrency.is_empty() || concurrency.len() > MAX_SWEEP_STEPS {
                return Err(invalid(
                    key("concurrency"),
                    format!("name 1..={MAX_SWEEP_STEPS} steps"),
                ));
            }
            for (j, c) in concurrency.iter().enumerate() {
                if *c == 0 || *c > MAX_CONCURRENCY {
                    return Err(invalid(
                        key(&format!("concurrency[{j}]")),
                        format!("{c} is not in 1..={MAX_CONCURRENCY}"),
                    ));
                }
                if j > 0 && *c <= concurrency[j - 1] {
                    return Err(invalid(
                        key(&format!("concurrency[{j}]")),
                        format!(
                            "{c} is not above the step before ({}): steps must increase",
                            concurrency[j - 1]
                        ),
                    ));
                }
            }
            let step_ms = check_positive_s(key("step_s"), sw.step_s, 86_400.0)?;
            if sw.step_requests == Some(0) {
                return Err(invalid(key("step_requests"), "must be at least 1"));
            }
            let d = KneeRule::default();
            let metric = match sw.knee_metric.as_deref() {
                None => d.metric,
                Some(m) => match Metric::parse(m) {
                    Some(m @ (Metric::Ttft | Metric::Ttfc | Metric::E2e)) => m,
                    _ => {
                        return Err(invalid(
                            key("knee_metric"),
                            format!("{m:?} is not ttft, ttfc or e2e"),
                        ));
                    }
                },
            };
            let percentile = sw.knee_percentile.unwrap_or(d.percentile);
            if !(percentile > 0.0 && percentile < 100.0) {
                return Err(invalid(
                    key("knee_percentile"),
                    format!("{percentile} is not in (0, 100)"),
                ));
            }
            let elasticity = sw.knee_elasticity.unwrap_or(d.elasticity);
            if !(elasticity.is_finite() && elasticity > 0.0) {
                return Err(invalid(
                    key("knee_elasticity"),
                    format!("{elasticity} is not a number above 0"),
                ));
            }
            let error_pct = sw.knee_error_pct.unwrap_or(d.error_pct);
            if !(error_pct > 0.0 && error_pct <= 100.0) {
                return Err(invalid(
                    key("knee_error_pct"),
                    format!("{error_pct} is not in (0, 100]"),
                ));
            }
            let min_requests = sw.knee_min_requests.unwrap_or(d.min_requests);
            if min_requests == 0 {
                return Err(invalid(
                    key("knee_min_requests"),
                    "must be at least 1 (default 30)",
                ));
            }
            Ok(LoadModel::Sweep(SweepSpec {
                concurrency,
                step_ms,
                step_requests: sw.step_requests,
                knee: KneeRule {
                    metric,
                    percentile,
                    elasticity,
                    error_pct,
                    min_requests,
                },
            }))
        }
        LoadKind::Rate => {
            let r = s.rate.as_ref().ok_or_else(|| {
                invalid(
                    key("rate"),
                    "missing: an open-loop scenario needs [scenarios.rate] with rps and duration_s",
                )
            })?;
            let key = |field: &str| format!("scenarios[{i}].rate.{field}");
            if !(r.rps.is_finite() && r.rps > 0.0 && r.rps <= 100_000.0) {
                return Err(invalid(
                    key("rps"),
                    format!("{} is not in (0, 100000] requests per second", r.rps),
                ));
            }
            let duration_ms = check_positive_s(key("duration_s"), r.duration_s, 86_400.0)?;
            if r.rps * r.duration_s > MAX_ARRIVALS {
                return Err(invalid(
                    key("duration_s"),
                    format!(
                        "{} rps × {} s = {} arrivals per provider: more than {MAX_ARRIVALS}",
                        r.rps,
                        r.duration_s,
                        r.rps * r.duration_s
                    ),
                ));
            }
            let arrivals = match r.arrivals.as_deref() {
                None | Some("constant") => Arrivals::Constant,
                Some("poisson") => Arrivals::Poisson,
                Some(other) => {
                    return Err(invalid(
                        key("arrivals"),
                        format!("{other:?} is not constant or poisson"),
                    ));
                }
            };
            let max_queue_ms = match r.max_queue_s {
                None => DEFAULT_MAX_QUEUE_MS,
                Some(q) => check_positive_s(key("max_queue_s"), q, 3_600.0)?,
            };
            Ok(LoadModel::Rate(RateSpec {
                rps: r.rps,
                arrivals,
                duration_ms,
                max_queue_ms,
            }))
        }
    }
}

/// Most attempts per provider of a failover chain.
const MAX_FAILOVER_ATTEMPTS: u32 = 5;

/// `scenarios[i].failover` into a [`FailoverSpec`].
fn validate_failover(
    i: usize,
    s: &ScenarioSection,
    providers: &[ProviderSection],
    load: &LoadModel,
) -> Result<Option<FailoverSpec>, CampaignError> {
    let Some(f) = &s.failover else {
        return Ok(None);
    };
    let key = |field: &str| format!("scenarios[{i}].failover.{field}");
    if !load.is_rounds() {
        return Err(invalid(
            format!("scenarios[{i}].failover"),
            "failover is measured in rounds: remove `load` (or use load = \"rounds\")",
        ));
    }
    if s.retry.is_some() {
        return Err(invalid(
            format!("scenarios[{i}].retry"),
            "a failover scenario retries through failover.attempts: remove `retry`",
        ));
    }
    if s.turns > 1 {
        return Err(invalid(
            format!("scenarios[{i}].turns"),
            "failover scenarios are single-turn",
        ));
    }
    if f.chain.len() < 2 {
        return Err(invalid(
            key("chain"),
            "name the primary and at least one backup (provider names)",
        ));
    }
    let mut chain = Vec::new();
    for (j, name) in f.chain.iter().enumerate() {
        let Some(p) = providers.iter().position(|p| &p.name == name) else {
            return Err(invalid(
                key(&format!("chain[{j}]")),
                format!("{name:?} is not a provider of this campaign"),
            ));
        };
        if chain.contains(&p) {
            return Err(invalid(
                key(&format!("chain[{j}]")),
                format!("{name:?} is listed twice"),
            ));
        }
        chain.push(p);
    }
    let attempts = f.attempts.unwrap_or(2);
    if !(1..=MAX_FAILOVER_ATTEMPTS).contains(&attempts) {
        return Err(invalid(
            key("attempts"),
            format!("{attempts} is not in 1..={MAX_FAILOVER_ATTEMPTS}"),
        ));
    }
    let on = match &f.on {
        None => FailoverSpec::default_on(),
        Some(names) => {
            let mut on = Vec::new();
            for (j, name) in names.iter().enumerate() {
                match Outcome::parse(name) {
                    Some(Outcome::Ok) => {
                        return Err(invalid(key(&format!("on[{j}]")), "\"ok\" never fails over"));
                    }
                    Some(o) if !on.contains(&o) => on.push(o),
                    Some(_) => {
                        return Err(invalid(
                            key(&format!("on[{j}]")),
                            format!("{name:?} is listed twice"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            key(&format!("on[{j}]")),
                            format!("{name:?} is not an outcome"),
                        ));
                    }
                }
            }
            on
        }
    };
    Ok(Some(FailoverSpec {
        chain,
        attempts,
        on,
    }))
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

/// `[campaign.timezones]` and `[windows]`: canonical zone texts per region, and the windows in
/// declaration order.
fn validate_windows(
    file: &CampaignFile,
) -> Result<(BTreeMap<String, String>, Vec<Window>), CampaignError> {
    let regions = &file.campaign.regions;
    let mut timezones = BTreeMap::new();
    for (region, text) in &file.campaign.timezones {
        let key = format!("campaign.timezones.{region}");
        if !regions.contains(region) {
            return Err(invalid(
                key,
                format!("unknown region (campaign.regions: {})", regions.join(", ")),
            ));
        }
        let zone = Zone::parse(text).map_err(|m| invalid(&key, m))?;
        timezones.insert(region.clone(), zone.to_string());
    }
    let mut windows = Vec::new();
    for (name, text) in &file.windows.0 {
        let key = format!("windows.{name}");
        check_name(&key, name)?;
        if name == OFF_PEAK {
            return Err(invalid(
                key,
                format!(
                    "{OFF_PEAK:?} is the label of times in no window; name the window otherwise"
                ),
            ));
        }
        let ranges = windows::parse_ranges(text).map_err(|m| invalid(&key, m))?;
        windows.push(Window {
            name: name.clone(),
            ranges,
        });
    }
    if !windows.is_empty()
        && let Some(region) = regions.iter().find(|r| !timezones.contains_key(*r))
    {
        return Err(invalid(
            format!("campaign.timezones.{region}"),
            "missing: [windows] are in local time, so every region needs a zone (an IANA name such as \"Europe/Berlin\", \"UTC\", or an offset such as \"+08:00\")",
        ));
    }
    Ok((timezones, windows))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[campaign]
name = "t"
seed = 5
regions = ["us-east", "eu-west"]

[rounds]
count = 3
interval_s = 2.0
gap_ms = 100

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 32

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1/"
model_id = "m"
api_key_env = "A_KEY"
"#;

    fn err_of(text: &str) -> String {
        load_toml_str(text, Path::new(".")).unwrap_err().to_string()
    }

    #[test]
    fn good_file_becomes_a_plan() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plan.seed, 5);
        assert_eq!(plan.rounds.interval_ms, 2_000);
        assert_eq!(plan.providers[0].base_url, "http://127.0.0.1:9/v1");
        assert!(plan.scenarios[0].prompts.len() >= 4);
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.id.starts_with("short-qa-en-"))
        );
        assert_eq!(plan.prompt_set, "latmesh-prompts-v1");
    }

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
    fn errors_name_the_offending_key() {
        let cases = [
            (GOOD.replace("max_tokens = 32", "max_tokens = 0"), "scenarios[0].max_tokens"),
            (GOOD.replace("http://127.0.0.1:9/v1/", "ftp://x"), "providers[0].base_url"),
            (GOOD.replace("\"A_KEY\"", "\"sk-123 secret\""), "providers[0].api_key_env"),
            (GOOD.replace("short-qa-en-*", "nope-*"), "scenarios[0].prompt_ids[0]"),
            (GOOD.replace("interval_s = 2.0", "interval_s = 0.0"), "rounds.interval_s"),
            (GOOD.replace("max_tokens = 32\n", "max_tokens = 32\n[[scenarios]]\nname = \"b\"\nprompt_ids = [\"code-*\"]\nmax_tokens = 9\n").replace("gap_ms = 100", "gap_ms = 2500"), "rounds.interval_s"),
            (GOOD.replace("\"eu-west\"]", "\"us-east\"]"), "campaign.regions[1]"),
            (GOOD.replace("count = 3", "count = \"three\""), "rounds.count"),
            (
                GOOD.replace("max_tokens = 32", "max_tokens = 32\ntimeout_ttft_s = 60\ntimeout_total_s = 30"),
                "scenarios[0].timeout_ttft_s",
            ),
            (GOOD.replace("max_tokens = 32", "max_tokens = 32\nmax_tokenz = 3"), "max_tokenz"),
        ];
        for (text, key) in cases {
            let e = err_of(&text);
            assert!(e.contains(key), "error {e:?} should name {key}");
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

    #[test]
    fn percentiles_default_to_p50_p90_p95_p99_and_are_checked() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plan.percentiles, vec![50.0, 90.0, 95.0, 99.0]);
        let with =
            |list: &str| GOOD.replace("seed = 5", &format!("seed = 5\npercentiles = {list}"));
        let plan = load_toml_str(&with("[50, 99.9]"), Path::new(".")).unwrap();
        assert_eq!(plan.percentiles, vec![50.0, 99.9]);
        // The default list is left out of the plan JSON (hashes of older plans hold).
        assert!(
            !load_toml_str(GOOD, Path::new("."))
                .unwrap()
                .to_json()
                .contains("percentiles")
        );
        assert!(plan.to_json().contains("\"percentiles\":[50.0,99.9]"));
        for (list, key, says) in [
            ("[]", "campaign.percentiles", "at least one"),
            ("[50, 100]", "campaign.percentiles[1]", "not in (0, 100)"),
            ("[0, 50]", "campaign.percentiles[0]", "not in (0, 100)"),
            (
                "[50, 99, 95]",
                "campaign.percentiles[2]",
                "95 comes after 99",
            ),
            ("[50, 50]", "campaign.percentiles[1]", "50 repeats 50"),
            (
                "[1, 2, 3, 4, 5, 6, 7, 8, 9]",
                "campaign.percentiles",
                "at most 8",
            ),
        ] {
            let e = err_of(&with(list));
            assert!(e.contains(key) && e.contains(says), "{list}: {e}");
        }
    }

    #[test]
    fn the_response_byte_cap_defaults_to_64_mib_and_is_checked() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(
            plan.scenarios[0].policy.max_response_bytes,
            DEFAULT_MAX_RESPONSE_BYTES
        );
        assert_eq!(DEFAULT_MAX_RESPONSE_BYTES, 64 << 20);
        let text = GOOD.replace(
            "max_tokens = 32",
            "max_tokens = 32\nmax_response_bytes = 4096",
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        assert_eq!(plan.scenarios[0].policy.max_response_bytes, 4096);
        let text = GOOD.replace(
            "max_tokens = 32",
            "max_tokens = 32\nmax_response_bytes = 10",
        );
        let e = err_of(&text);
        assert!(e.contains("scenarios[0].max_response_bytes"), "{e}");
        assert!(e.contains("1024"), "{e}");
    }

    #[test]
    fn turns_nonce_retry_and_passback_become_part_of_the_plan() {
        let text = GOOD
            .replace("short-qa-en-*", "short-qa-*")
            .replace(
                "max_tokens = 32",
                "max_tokens = 32\nturns = 3\ncache_nonce = true\nretry = { backoff_s = [0.5, 2], on = [\"throttled\", \"timeout_ttft\"], max_retry_after_s = 10 }",
            )
            .replace("api_key_env = \"A_KEY\"", "api_key_env = \"A_KEY\"\npass_reasoning = true");
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        assert!(plan.providers[0].pass_reasoning);
        let s = &plan.scenarios[0];
        assert_eq!((s.policy.turns, s.policy.cache_nonce), (3, true));
        let r = s.policy.retry.as_ref().unwrap();
        assert_eq!(r.max_retries, 3);
        assert_eq!(r.backoff_ms, [500, 2_000]);
        assert_eq!(r.on, [Outcome::Throttled, Outcome::TimeoutTtft]);
        assert!(r.honour_retry_after);
        assert_eq!(r.max_retry_after_ms, 10_000);
        // Builtin follow-ups in each prompt's language, one per turn after the first.
        let en = s
            .prompts
            .iter()
            .find(|p| p.id == "short-qa-en-001")
            .unwrap();
        let zh = s
            .prompts
            .iter()
            .find(|p| p.id == "short-qa-zh-001")
            .unwrap();
        assert_eq!(en.follow_ups, crate::prompts::FOLLOW_UPS_EN[..2]);
        assert_eq!(zh.follow_ups, crate::prompts::FOLLOW_UPS_ZH[..2]);
        // Own follow-ups: the first turns − 1 are used.
        let own = text.replace(
            "turns = 3",
            "turns = 2\nfollow_ups = [\"And then?\", \"unused\"]",
        );
        let plan = load_toml_str(&own, Path::new(".")).unwrap();
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.follow_ups == ["And then?"])
        );
        // `retry = {}` is the default policy; a plain scenario has the default (single-turn)
        // policy and no follow-ups.
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 32\n[scenarios.retry]"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.scenarios[0].policy.retry, Some(RetryPolicy::default()));
        let plain = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plain.scenarios[0].policy, ClientPolicy::default());
        assert!(
            plain.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.follow_ups.is_empty())
        );
        assert!(!plain.providers[0].pass_reasoning);
    }

    #[test]
    fn the_multi_turn_example_validates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/multi-turn.toml");
        let plan = load_file(&path).unwrap();
        let s = &plan.scenarios[0];
        assert_eq!(s.policy.turns, 3);
        assert!(s.policy.cache_nonce);
        assert_eq!(s.policy.retry.as_ref().unwrap().backoff_ms, [1_000, 2_000]);
        assert!(s.prompts.iter().all(|p| p.follow_ups.len() == 2));
        assert!(plan.providers[0].pass_reasoning && !plan.providers[1].pass_reasoning);
    }

    #[test]
    fn load_model_examples_and_the_demo_become_phased_plans() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let sweep = load_file(&dir.join("sweep.toml")).unwrap();
        let LoadModel::Sweep(s) = &sweep.scenarios[0].load else {
            panic!("{:?}", sweep.scenarios[0].load)
        };
        assert_eq!(
            (s.concurrency.clone(), s.step_ms),
            (vec![4, 8, 16, 32], 10_000)
        );
        assert_eq!((s.knee.metric, s.knee.percentile), (Metric::E2e, 50.0));
        assert_eq!(sweep.rounds.count, 0);
        assert_eq!(sweep.span_us(), 40_000_000);
        let open = load_file(&dir.join("open-loop.toml")).unwrap();
        let LoadModel::Rate(r) = &open.scenarios[0].load else {
            panic!()
        };
        assert_eq!(
            (r.rps, r.arrivals, r.duration_ms, r.max_queue_ms),
            (5.0, Arrivals::Poisson, 30_000, 10_000)
        );
        assert_eq!(open.providers[1].limits.max_in_flight, Some(2));
        // Exact: the scenario's arrival schedule, once per provider.
        let arrivals = r.arrivals_us(open.seed, 0).len() as u64;
        assert_eq!(open.probes_per_agent(), 2 * arrivals);
        let patrol = load_file(&dir.join("patrol.toml")).unwrap();
        assert_eq!(patrol.providers[0].limits.min_gap_ms, Some(2_000));
        assert_eq!(patrol.providers[2].limits.requests_per_min, Some(60.0));
        // The demo: rounds first (2 scenarios), then the sweep, then the rate.
        let demo = std::fs::read_to_string(dir.join("demo.toml"))
            .unwrap()
            .replace("{sim}", "127.0.0.1:9");
        let demo = load_toml_str(&demo, Path::new(".")).unwrap();
        let phases: Vec<(crate::load::PhaseKind, u64, u64)> = demo
            .phases()
            .iter()
            .map(|p| (p.kind, p.start_us, p.span_us))
            .collect();
        use crate::load::PhaseKind::{Rounds, Scenario};
        assert_eq!(
            phases,
            vec![
                (Rounds, 0, 30_000_000),
                (Scenario(2), 32_000_000, 30_000_000),
                (Scenario(3), 64_000_000, 6_000_000)
            ]
        );
        // 11 providers (9 on Chat Completions, one each on Anthropic and Responses) × 2.
        assert_eq!(demo.slots_per_round(), 22);
        assert!(demo.round_order(0).iter().all(|s| s.scenario < 2));
    }

    #[test]
    fn load_model_errors_name_the_key() {
        let sweep =
            |keys: &str| GOOD.replace("max_tokens = 32", &format!("max_tokens = 32\n{keys}"));
        let cases = [
            (
                sweep("load = \"burst\""),
                "scenarios[0].load",
                "not a load model",
            ),
            (sweep("load = \"sweep\""), "scenarios[0].sweep", "missing"),
            (
                sweep("[scenarios.sweep]\nconcurrency = [4, 2]\nstep_s = 1"),
                "scenarios[0].sweep.concurrency[1]",
                "must increase",
            ),
            (
                sweep("[scenarios.sweep]\nconcurrency = [0]\nstep_s = 1"),
                "scenarios[0].sweep.concurrency[0]",
                "not in 1..=",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 0"),
                "scenarios[0].sweep.step_s",
                "(0, 86400]",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 1\nknee_min_requests = 0"),
                "scenarios[0].sweep.knee_min_requests",
                "at least 1",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 1\nknee_metric = \"tpot\""),
                "scenarios[0].sweep.knee_metric",
                "not ttft",
            ),
            (
                sweep("[scenarios.rate]\nrps = 0\nduration_s = 1"),
                "scenarios[0].rate.rps",
                "not in (0, 100000]",
            ),
            (
                sweep("[scenarios.rate]\nrps = 10000\nduration_s = 86400"),
                "scenarios[0].rate.duration_s",
                "arrivals per provider",
            ),
            (
                sweep("[scenarios.rate]\nrps = 1\nduration_s = 1\narrivals = \"bursty\""),
                "scenarios[0].rate.arrivals",
                "constant or poisson",
            ),
            (
                sweep("load = \"rounds\"\n[scenarios.rate]\nrps = 1\nduration_s = 1"),
                "scenarios[0].rate",
                "load = \"rounds\"",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "max_in_flight = 0"),
                "providers[0].max_in_flight",
                "at least 1",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "price_input_usd_per_mtok = 0.3"),
                "providers[0].price_output_usd_per_mtok",
                "both prices",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "requests_per_min = -1"),
                "providers[0].requests_per_min",
                "above 0",
            ),
        ];
        for (text, key, what) in cases {
            let e = err_of(&text);
            assert!(
                e.contains(key) && e.contains(what),
                "error {e:?} should name {key} and say {what}"
            );
        }
        // A rounds scenario needs [rounds]; a campaign of sweeps does not.
        let no_rounds = GOOD.replace("[rounds]\ncount = 3\ninterval_s = 2.0\ngap_ms = 100\n", "");
        assert!(err_of(&no_rounds).contains("rounds: missing"));
        let sweep_only = no_rounds.replace(
            "max_tokens = 32",
            "max_tokens = 32\n[scenarios.sweep]\nstep_s = 2",
        );
        let plan = load_toml_str(&sweep_only, Path::new(".")).unwrap();
        assert_eq!(plan.scenarios[0].load.kind(), LoadKind::Sweep);
        assert_eq!(plan.phases().len(), 1);
    }

    #[test]
    fn errors_name_the_file_the_variable_and_credentials_in_urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo.toml"),
        )
        .unwrap();
        std::fs::write(&path, text.replacen("count = ", "count = 0 # ", 1)).unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: rounds", path.display())), "{e}");
        let e = load_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        // A problem of the whole file (no [campaign]) and a type error both name it.
        std::fs::write(&path, "").unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert_eq!(e, format!("{}: missing field `campaign`", path.display()));
        std::fs::write(
            &path,
            text.replacen("max_tokens = ", "max_tokens = \"x\" # ", 1),
        )
        .unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: scenarios[", path.display())),
            "{e}"
        );
        assert!(check_base_url("https://u:sk-secret@api.example/v1").is_err());
        // A query is refused (not as credentials: the @ is in the query), never quoted.
        let e = check_base_url("https://api.example/v1?x=a@b").unwrap_err();
        assert!(
            e.starts_with("has a query (?…)") && e.contains("query table"),
            "{e}"
        );
        assert!(!e.contains("a@b"), "{e}");
        let e = check_base_url("https://api.example/v1#frag").unwrap_err();
        assert!(e.starts_with("has a fragment (#…)"), "{e}");
        assert!(check_base_url("https://api.example/v1/?existing=1").is_err());
    }

    #[test]
    fn policy_errors_name_the_key() {
        let with =
            |extra: &str| GOOD.replace("max_tokens = 32", &format!("max_tokens = 32\n{extra}"));
        let cases = [
            (with("turns = 0"), "scenarios[0].turns: 0 is not in 1..=10"),
            (
                with("turns = 11"),
                "scenarios[0].turns: 11 is not in 1..=10",
            ),
            (with("turns = -1"), "scenarios[0].turns"),
            (
                with("retry = { backoff_s = [1, -2] }"),
                "scenarios[0].retry.backoff_s[1]: -2 is not a wait in seconds",
            ),
            (
                with("retry = { backoff_s = [] }"),
                "scenarios[0].retry.backoff_s: ",
            ),
            (
                with("retry = { max_retries = 11 }"),
                "scenarios[0].retry.max_retries: 11 is not in 0..=10",
            ),
            (
                with("retry = { on = [\"ok\"] }"),
                "scenarios[0].retry.on[0]: ",
            ),
            (
                with("retry = { on = [\"throttled\", \"history_rejected\"] }"),
                "scenarios[0].retry.on[1]: ",
            ),
            (
                with("retry = { on = [\"429\"] }"),
                "scenarios[0].retry.on[0]: \"429\" is not an outcome (retryable: http_4xx, throttled",
            ),
            (with("retry = { on = [] }"), "scenarios[0].retry.on: "),
            (
                with("retry = { max_retry_after_s = nan }"),
                "scenarios[0].retry.max_retry_after_s: ",
            ),
            (with("retry = { max_retrys = 2 }"), "max_retrys"),
            (
                with("follow_ups = [\"more?\"]"),
                "scenarios[0].follow_ups: only multi-turn scenarios",
            ),
            (
                with("turns = 3\nfollow_ups = [\"more?\"]"),
                "scenarios[0].follow_ups: 1 given, turns = 3 needs 2",
            ),
            (
                with("turns = 2\nfollow_ups = [\" \"]"),
                "scenarios[0].follow_ups[0]: must not be empty",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "pass_reasoning = \"yes\""),
                "providers[0].pass_reasoning",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
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
    fn parse_errors_speak_the_file_s_terms() {
        let e = err_of(&GOOD.replace("count = 3", "count = \"three\""));
        assert!(e.starts_with("rounds.count: "), "{e}");
        assert!(!e.contains("default."), "{e}");
        let e = err_of(&GOOD.replace("[rounds]\ncount = 3", "rounds = 3\n[x]\ncount = 3"));
        assert!(!e.contains("struct"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            GOOD.replace("[campaign]", "[campaign]\nprompt_set = \"nope.jsonl\""),
        )
        .unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert_eq!(e.matches("nope.jsonl").count(), 1, "{e}");
        std::fs::write(&file, GOOD.replace("gap_ms = 100", "gap_ms = -1")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("rounds.gap_ms"), "{e}");
    }

    const WINDOWS: &str = r#"
[campaign.timezones]
us-east = "America/New_York"
eu-west = "+01:00"

[windows]
peak = "09:00-12:00, 14:00-18:00"
night = "22:00-06:00"
"#;

    #[test]
    fn zones_and_windows_become_part_of_the_plan() {
        let plan = load_toml_str(&format!("{GOOD}{WINDOWS}"), Path::new(".")).unwrap();
        assert_eq!(plan.timezones["us-east"], "America/New_York");
        assert_eq!(plan.timezones["eu-west"], "+01:00");
        // Declaration order, not alphabetical: "peak" wins where windows overlap.
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["peak", "night"]);
        assert_eq!(plan.windows[0].ranges[1].to_string(), "14:00-18:00");
        let spec = crate::windows::WindowSpec::from_plan(&plan).unwrap();
        assert_eq!(spec.labels(), ["peak", "night", "off-peak"]);
        // 2024-06-03 14:30 UTC is 10:30 in New York (EDT) and 15:30 at +01:00.
        assert_eq!(spec.label("us-east", 1_717_425_000_000_000), "peak");
        assert_eq!(spec.label("eu-west", 1_717_425_000_000_000), "peak");
        // Zones alone are fine; plans without either keep the old JSON.
        let zones_only = GOOD.replace(
            "[rounds]",
            "[campaign.timezones]\nus-east = \"UTC\"\n\n[rounds]",
        );
        let plan = load_toml_str(&zones_only, Path::new(".")).unwrap();
        assert!(plan.windows.is_empty() && plan.timezones.len() == 1);
        let plain = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert!(!plain.to_json().contains("windows"));
    }

    #[test]
    fn window_order_is_the_declaration_order_in_toml_and_yaml() {
        let text = format!(
            "{GOOD}[campaign.timezones]\nus-east = \"UTC\"\neu-west = \"UTC\"\n[windows]\nzeta = \"08:00-18:00\"\nalpha = \"12:00-13:00\"\nmid = \"00:00-01:00\"\n"
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha", "mid"]);
        let yaml = r#"
campaign:
  name: t
  regions: [us-east]
  timezones:
    us-east: Asia/Singapore
rounds: {count: 2, interval_s: 1.5, gap_ms: 10}
scenarios:
  - {name: chat, prompt_ids: ["code-*"], max_tokens: 16}
providers:
  - {name: a, base_url: "http://127.0.0.1:9/v1", model_id: m}
windows:
  zeta: "08:00-18:00"
  alpha: "12:00-13:00"
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"]);
        assert_eq!(plan.timezones["us-east"], "Asia/Singapore");
    }

    #[test]
    fn window_and_zone_errors_name_the_key() {
        let with = |w: &str| {
            format!(
                "{GOOD}{}",
                WINDOWS.replace("peak = \"09:00-12:00, 14:00-18:00\"", w)
            )
        };
        let cases = [
            (
                with("peak = \"25:00-26:00\""),
                "windows.peak: \"25:00\" is not HH:MM",
            ),
            (
                with("peak = \"09:00\""),
                "windows.peak: \"09:00\" is not a range",
            ),
            (with("peak = \"10:00-10:00\""), "windows.peak: "),
            (with("peak = \"\""), "windows.peak: "),
            (with("\"off-peak\" = \"10:00-11:00\""), "windows.off-peak: "),
            (with("\"bad name\" = \"10:00-11:00\""), "windows.bad name: "),
            (with("peak = 9"), "windows.peak"),
            (
                format!(
                    "{GOOD}{}",
                    WINDOWS.replace(
                        "eu-west = \"+01:00\"",
                        "eu-west = \"+01:00\"\nmars = \"UTC\""
                    )
                ),
                "campaign.timezones.mars: unknown region",
            ),
            (
                format!(
                    "{GOOD}{}",
                    WINDOWS.replace("America/New_York", "America/New_Yrok")
                ),
                "campaign.timezones.us-east: \"America/New_Yrok\" is not an IANA time zone name",
            ),
            (
                format!("{GOOD}{}", WINDOWS.replace("\"+01:00\"", "\"+25:00\"")),
                "campaign.timezones.eu-west: \"+25:00\" is not a UTC offset",
            ),
            (
                format!("{GOOD}{}", WINDOWS.replace("eu-west = \"+01:00\"\n", "")),
                "campaign.timezones.eu-west: missing",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }

    /// Numbers past their maximum are refused with the key and the maximum, never wrapped
    /// (`gap_ms = i64::MAX` made `2 × gap` overflow: a panic in debug builds, 16 ms in
    /// release), and ports that are not in 1..=65535 are refused naming the provider.
    #[test]
    fn numbers_past_their_maximum_are_refused_naming_the_key() {
        let three = GOOD.replace(
            "api_key_env = \"A_KEY\"",
            "[[providers]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n[[providers]]\nname = \"c\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"",
        );
        let cases = [
            (
                three.replace("gap_ms = 100", "gap_ms = 9223372036854775807"),
                "rounds.gap_ms: 9223372036854775807 ms is above the maximum, 86400000 ms",
            ),
            (
                three.replace("gap_ms = 100", "gap_ms = 86400000"),
                "rounds.interval_s: 2 s is too short: 3 probes per round 86400000 ms apart",
            ),
            (
                GOOD.replace(
                    "api_key_env = \"A_KEY\"",
                    "min_gap_ms = 9223372036854775807",
                ),
                "providers[0].min_gap_ms: 9223372036854775807 ms is above the maximum, 86400000 ms",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:65536/"),
                "providers[0].base_url: provider \"a\": \"http://127.0.0.1:65536/v1/\": the port \"65536\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:-1/"),
                "the port \"-1\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:0/"),
                "the port \"0\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "[::1:9/"),
                "providers[0].base_url: provider \"a\": \"http://[::1:9/v1/\" is not a valid URL",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
        // The largest of each still passes.
        let ok = three
            .replace("interval_s = 2.0", "interval_s = 86400")
            .replace("gap_ms = 100", "gap_ms = 43199999");
        assert_eq!(
            load_toml_str(&ok, Path::new(".")).unwrap().rounds.gap_ms,
            43_199_999
        );
        for url in [
            "http://[::1]:65535/v1",
            "https://h.example:1/v1",
            "http://[::1]/v1",
        ] {
            assert!(check_base_url(url).is_ok(), "{url}");
        }
        // A colon without a port is a typo, not port 80.
        assert_eq!(
            check_base_url("http://h:/v1").unwrap_err(),
            "\"http://h:/v1\": the port \"\" is not a number in 1..=65535"
        );
        // The phases add up with checked arithmetic: the longest rounds (2,739 years) and
        // 42,000 sweeps of 64 day-long steps pass 10,000 years after about 41,400.
        let rounds = RoundsSpec {
            count: 1_000_000,
            interval_ms: 86_400_000,
            gap_ms: 0,
        };
        let sweep = LoadModel::Sweep(SweepSpec {
            concurrency: (1..=64).collect(),
            step_ms: 86_400_000,
            step_requests: None,
            knee: KneeRule::default(),
        });
        let mut loads = vec![LoadModel::Rounds];
        loads.extend(std::iter::repeat_n(sweep, 42_000));
        let e = check_span(&rounds, &loads).unwrap_err().to_string();
        assert!(e.starts_with("scenarios[414"), "{e}");
        assert!(
            e.ends_with("last more than the maximum, 10000 years"),
            "{e}"
        );
        assert!(check_span(&rounds, &loads[..41_000]).is_ok());
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

    #[test]
    fn yaml_files_load_like_toml() {
        let yaml = r#"
campaign:
  name: t
  regions: [us-east]
rounds:
  count: 2
  interval_s: 1.5
  gap_ms: 10
scenarios:
  - name: chat
    prompt_ids: ["code-*"]
    stream: false
    max_tokens: 16
providers:
  - name: a
    base_url: http://127.0.0.1:9/v1
    model_id: m
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        assert_eq!(plan.rounds.interval_ms, 1_500);
        assert!(!plan.scenarios[0].stream);
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.id.starts_with("code-"))
        );
        std::fs::write(&file, yaml.replace("max_tokens: 16", "max_tokens: lots")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(e.contains("c.yaml") && e.contains("max_tokens"), "{e}");
    }

    #[test]
    fn keys_written_twice_are_errors_naming_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("c.yaml");
        std::fs::write(
            &yaml,
            "campaign: {name: t, regions: [us-east]}\nrounds:\n  count: 2\n  interval_s: 1\n  gap_ms: 10\n  count: 1000000\nscenarios:\n  - {name: chat, prompt_ids: [\"code-*\"], max_tokens: 16}\nproviders:\n  - {name: a, base_url: \"http://127.0.0.1:9/v1\", model_id: m}\n",
        )
        .unwrap();
        let e = load_file(&yaml).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: duplicate key `rounds.count`", yaml.display())),
            "{e}"
        );
        let toml = dir.path().join("c.toml");
        std::fs::write(
            &toml,
            GOOD.replace("count = 3", "count = 3\ncount = 1000000"),
        )
        .unwrap();
        let e = load_file(&toml).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("duplicate key"), "{e}");
        assert!(e.contains("count"), "{e}");
    }

    #[test]
    fn a_short_total_timeout_alone_caps_the_defaults() {
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 32\ntimeout_total_s = 30"),
            Path::new("."),
        )
        .unwrap();
        let t = &plan.scenarios[0].timeouts;
        assert_eq!(
            (t.total_s, t.ttft_s, t.idle_s, t.connect_s),
            (30.0, 30.0, 30.0, 10.0)
        );
    }
}
