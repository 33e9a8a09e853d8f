//! The campaign file as written: every table and key a campaign file may have, as serde reads
//! them (unknown keys are errors). Validation into a [`crate::plan::Plan`] is
//! [`super::validate`], one module per table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::api::Api;
use crate::shaping::{AuthSection, HeaderSection, ReasoningTagsSection, ShapeInput};

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
    pub schedule: Option<ScheduleSection>,
    /// `[selection]`: weights and user scores of the selection matrix (see
    /// [`crate::selection`]).
    #[serde(default)]
    pub selection: Option<SelectionSection>,
    /// `[compat]`: the compatibility checks `latmesh compat` runs (see [`crate::compat`]).
    #[serde(default, deserialize_with = "present_section")]
    pub compat: Option<CompatSection>,
    /// `[quality]`: the quality-parity run of `latmesh compat` (see [`crate::quality`]).
    #[serde(default, deserialize_with = "present_section")]
    pub quality: Option<QualitySection>,
}

/// A section whose keys are all optional: present, even empty (YAML `compat:` with nothing
/// under it is null), it is `Some` with the defaults; only a missing key is `None`.
fn present_section<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// `[windows]`: `(name, ranges text)` pairs, in declaration order when the file was loaded by
/// [`super::load_file`] or [`super::load_toml_str`] (which read the order from the text: figment itself
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
    /// Prompt ids or `*` patterns (or `input_tokens` instead: generated prompts).
    pub prompt_ids: Option<Vec<String>>,
    /// Stream or not (default true).
    #[serde(default = "yes")]
    pub stream: bool,
    /// `max_tokens`: required unless `output_tokens` gives it.
    pub max_tokens: Option<u32>,
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
    /// Generated prompts of this many tokens: a number or a list of tiers (each tier a plan
    /// scenario `{name}.{tier}`, see [`crate::synth`]); read by hand (number or list).
    pub input_tokens: Option<serde_json::Value>,
    /// Words at the start of every generated prompt shared by every request (default 0).
    pub shared_prefix_tokens: Option<u32>,
    /// Generated prompts only: `true` sends the same words in every run of the plan (to
    /// measure caching on purpose); default false: new words per run ([`crate::synth`]).
    pub reuse_text: Option<bool>,
    /// The exact output length wanted, tokens: sets `max_tokens` and the providers'
    /// `exact_output` fields.
    pub output_tokens: Option<u32>,
    /// Warm-up requests per provider (recorded, left out of every statistic; default 0).
    pub warmup: Option<u32>,
    /// `slo = { ttft_ms, tpot_ms, e2e_ms, ttft_p95_ms, …, goodput_pct }` ([`crate::slo`]);
    /// read by hand (the percentile keys are open-ended).
    pub slo: Option<serde_json::Map<String, serde_json::Value>>,
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
    /// Arrivals per second, per provider and per agent: a number, a list of steps
    /// (`[2, 4, 8]`) or a geometric ramp (`{ from = 1, to = 16, steps = 5 }`); read by hand.
    /// Required unless `search` picks the rates.
    pub rps: Option<serde_json::Value>,
    /// `constant` (default), `poisson` or `gamma` (with `burstiness`).
    pub arrivals: Option<String>,
    /// The gamma shape of `arrivals = "gamma"`, in [0.01, 100] (1: Poisson; below 1 burstier).
    pub burstiness: Option<f64>,
    /// `[scenarios.rate.search]`: find the highest rate meeting the scenario's `slo`.
    pub search: Option<SearchSection>,
    /// How long arrivals are generated, seconds.
    pub duration_s: f64,
    /// Longest wait for the provider's in-flight cap before an arrival is dropped, seconds
    /// (default 10).
    pub max_queue_s: Option<f64>,
}

/// `[scenarios.rate.search]` (see [`crate::load::SloSearch`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSection {
    /// The first step's rate, requests/s per provider and agent.
    pub min_rps: f64,
    /// The highest rate tried, requests/s.
    pub max_rps: f64,
    /// Most steps, 2..=32 (default 8).
    pub steps: Option<u32>,
    /// Fewest judged requests a step needs for a verdict, ≥ 1 (default 20).
    pub min_requests: Option<u32>,
    /// Stop once the bracket is within this % of its lower end, in (0, 100] (default 10).
    pub resolution_pct: Option<f64>,
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
    /// Merged into the body of scenarios with `output_tokens` (e.g. `{ ignore_eos = true }`);
    /// the string `"$output_tokens"` becomes the scenario's `output_tokens`.
    #[serde(default)]
    pub exact_output: serde_json::Map<String, serde_json::Value>,
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
            exact_output: self.exact_output.clone(),
        }
    }
}

/// `weights = { … }` of `[selection]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsSection {
    /// Latency weight.
    pub latency: Option<f64>,
    /// Stability weight.
    pub stability: Option<f64>,
    /// Price weight.
    pub price: Option<f64>,
    /// Quality weight.
    pub quality: Option<f64>,
    /// Compatibility weight.
    pub compatibility: Option<f64>,
    /// Compliance weight.
    pub compliance: Option<f64>,
}

/// `[selection.scores.NAME]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoresSection {
    /// Quality, 0..=score_scale.
    pub quality: Option<f64>,
    /// Compatibility, 0..=score_scale.
    pub compatibility: Option<f64>,
    /// Compliance, 0..=score_scale.
    pub compliance: Option<f64>,
}

/// `[selection]` as written in a campaign file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionSection {
    /// Component weights (required).
    pub weights: Option<WeightsSection>,
    /// Metric name of the latency component (default `ttft`).
    pub latency_metric: Option<String>,
    /// Percentile of the latency component (default 50).
    pub latency_percentile: Option<f64>,
    /// Upper end of the user scores (default 10).
    pub score_scale: Option<f64>,
    /// Provider name → scores.
    #[serde(default)]
    pub scores: BTreeMap<String, ScoresSection>,
    /// Failure-rate gate: failed % of requests a provider may have (default 5).
    pub max_failed_pct: Option<f64>,
    /// SLO gate: a provider missing a scenario's SLO is excluded (default true).
    pub slo_gate: Option<bool>,
    /// Compat gate: check names every provider must pass (default none).
    pub require_compat: Option<Vec<String>>,
}

/// `[compat]` as written in a campaign file (every key optional; see
/// [`crate::compat::CompatSpec`] for the defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatSection {
    /// Check names ([`crate::compat::CompatCheck::as_str`]).
    pub checks: Option<Vec<String>>,
    /// Provider names.
    pub providers: Option<Vec<String>>,
    /// Total timeout of each request, seconds.
    pub timeout_s: Option<f64>,
    /// Samples of each check that can flip.
    pub samples: Option<u32>,
}

/// `[quality]` as written in a campaign file (every key optional; see
/// [`crate::quality::QualitySpec`] for the defaults).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualitySection {
    /// Answers per prompt and provider.
    pub samples: Option<u32>,
    /// Prompt ids of the shipped set, or `*` patterns.
    pub prompt_ids: Option<Vec<String>>,
    /// Output cap of each request.
    pub max_tokens: Option<u32>,
    /// Provider names.
    pub providers: Option<Vec<String>>,
    /// Total timeout of each request, seconds.
    pub timeout_s: Option<f64>,
}

/// `[schedule]` as written in a campaign file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSection {
    /// `"30m"`: a number and a unit (`s`, `m`, `h`, `d`).
    pub every: Option<String>,
    /// Window names (declared in `[windows]`, or `off-peak`).
    pub at_windows: Option<Vec<String>>,
    /// How many runs.
    pub runs: Option<u32>,
    /// RFC 3339 instant (`2024-06-02T00:00:00Z`) after which no run starts (a string, or an
    /// unquoted TOML datetime).
    #[serde(default, deserialize_with = "until_text")]
    pub until: Option<String>,
}

/// `until` as text: a string, or a TOML datetime (which figment hands over as a one-entry
/// table holding its text).
fn until_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Plain(String),
        TomlDatetime(std::collections::BTreeMap<String, String>),
    }
    Ok(match Option::<Text>::deserialize(d)? {
        None => None,
        Some(Text::Plain(s)) => Some(s),
        Some(Text::TomlDatetime(m)) => m.into_values().next(),
    })
}
