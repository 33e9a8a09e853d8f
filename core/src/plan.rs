//! The validated test plan every agent runs, and its shared per-round probe order.
//!
//! A [`Plan`] is what `latmesh campaign launch` sends (as JSON) and what agents execute. Round
//! `r` starts at `start_at + r × interval`; its probes run in [`Plan::round_order`]`(r)`, the
//! same order in every region (a shuffle seeded by the campaign seed and `r`), probe `i` being
//! sent at round start + `i × gap`.
//!
//! A slot is one *logical request*: with a scenario's [`ClientPolicy`] it may become several
//! attempts (retries) and several turns (a multi-turn conversation), each its own record (see
//! `agent::runner`). Settings added after the first plans have serde defaults and are left out
//! of the JSON at their defaults, so older plan JSON parses and plans that do not use them
//! keep their [`Plan::hash`].

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::RequestShape;
use crate::load::{LoadModel, Phase, PhaseKind, Price, ProviderLimits};
use crate::prompts::Message;
use crate::record::Outcome;
use crate::schedule::Schedule;
use crate::windows::{LocalTimeSettings, Window};

/// A provider endpoint. The API key itself never appears here: only the name of the
/// environment variable that holds it on the agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderSpec {
    /// Unique name (column of the matrix).
    pub name: String,
    /// OpenAI-compatible base URL; latmesh POSTs to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Environment variable holding the API key on each agent (sent as a Bearer token).
    pub api_key_env: Option<String>,
    /// Model id sent in the request.
    pub model_id: String,
    /// The model name the provider should answer with when it differs from `model_id` (a
    /// server that answers with its own name); `None`: `model_id`. Absent from the JSON when
    /// `None`. See [`ProviderSpec::expected_model`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_model: Option<String>,
    /// Multi-turn: send each earlier turn's reasoning back as the assistant message's
    /// `reasoning_content` (some providers require it, others such as DeepSeek's reasoner
    /// reject it). Absent from the JSON when false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pass_reasoning: bool,
    /// Politeness caps (campaign-wide; each agent enforces its share). Absent when none.
    #[serde(default, skip_serializing_if = "ProviderLimits::is_empty")]
    pub limits: ProviderLimits,
    /// Prices for the budget guard, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// `user-agent` sent to this provider (the provider's `user_agent`, else the campaign's);
    /// `None`: the agents' default for its API (`agent::probe::request::default_user_agent`).
    /// Absent from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// The API spoken and how requests are shaped (headers, query, extra body, auth, output
    /// cap field, usage in streams, reasoning tags). Absent from the JSON at its default.
    #[serde(default, skip_serializing_if = "RequestShape::is_default")]
    pub request: RequestShape,
}

impl ProviderSpec {
    /// The name answers are matched against
    /// ([`crate::answered_model::model_matches`]): `expect_model`, else `model_id`.
    pub fn expected_model(&self) -> &str {
        self.expect_model.as_deref().unwrap_or(&self.model_id)
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A prompt as carried by the plan: its stable id and messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanPrompt {
    /// Stable id from the prompt set.
    pub id: String,
    /// Messages sent (turn 1 of a conversation).
    pub messages: Vec<Message>,
    /// The user messages of turns 2, 3, … of a multi-turn scenario, exactly as sent (resolved
    /// at validation: the scenario's `follow_ups`, else the builtin ones in the prompt's
    /// language). Empty for single-turn scenarios, and then absent from the JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<String>,
}

/// Per-attempt timeouts, seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    /// TCP (and TLS) connect.
    pub connect_s: f64,
    /// From `t_send` to the first token.
    pub ttft_s: f64,
    /// Longest gap between two body reads.
    pub idle_s: f64,
    /// The whole attempt.
    pub total_s: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_s: 10.0,
            ttft_s: 60.0,
            idle_s: 30.0,
            total_s: 120.0,
        }
    }
}

/// A scenario: prompts and fixed sampling parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSpec {
    /// Unique name.
    pub name: String,
    /// Stream the response (SSE) or not.
    pub stream: bool,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// `temperature` sent, when set.
    pub temperature: Option<f64>,
    /// `top_p` sent, when set.
    pub top_p: Option<f64>,
    /// Timeouts of each attempt.
    pub timeouts: Timeouts,
    /// Prompts, used in turn: round `r` sends `prompts[r % len]`.
    pub prompts: Vec<PlanPrompt>,
    /// Turns, cache nonce and retries (flattened into the scenario's JSON; every key absent
    /// at its default).
    #[serde(default, flatten)]
    pub policy: ClientPolicy,
    /// How its requests are scheduled (absent from the JSON for `rounds`).
    #[serde(default, skip_serializing_if = "LoadModel::is_rounds")]
    pub load: LoadModel,
    /// Failover through a chain of providers (absent when none; `rounds` scenarios only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// Merged into every request body of the scenario, before the provider's own
    /// `extra_body` (which wins on a shared key). Absent from the JSON when empty.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Generated prompts of an exact length instead of the prompt set's (one tier of the
    /// file's `input_tokens`; [`crate::synth`]). `prompts` then holds one prompt, whose id is
    /// `gen-{tier}` and whose messages are empty: the agent builds each request's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synth: Option<crate::synth::SynthSpec>,
    /// `output_tokens`: the output length wanted. `max_tokens` is this, and every provider's
    /// `exact_output` fields (e.g. `ignore_eos`) are merged into the body so that providers
    /// that offer it keep generating to the cap. `None`: answers end where the model stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// The first this many requests of each provider are warm-up requests
    /// ([`ScenarioSpec::is_warmup`]): sent and recorded with `warmup`, left out of every
    /// statistic. 0 (absent): none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub warmup: u32,
    /// The scenario's SLO: goodput and the SLO search judge by it ([`crate::slo`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<crate::slo::Slo>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl ScenarioSpec {
    /// Whether the request at (`round`, `step`, `slot`) of this scenario is a warm-up request:
    /// one of each provider's first `warmup` requests, counted per agent. `rounds`: the first
    /// `warmup` rounds; `sweep` and `rate`: the first `warmup` slots of step 0 (requests of a
    /// sweep step, arrivals of a rate step).
    pub fn is_warmup(&self, round: u32, step: u32, slot: u32) -> bool {
        match self.load {
            LoadModel::Rounds => round < self.warmup,
            LoadModel::Sweep(_) | LoadModel::Rate(_) => step == 0 && slot < self.warmup,
        }
    }

    /// The name of the scenario in the campaign file: the tier group of a generated-prompt
    /// scenario, else its name.
    pub fn group(&self) -> &str {
        self.synth.as_ref().map_or(&self.name, |s| &s.group)
    }
}

/// A primary provider and its backups, as a client with a failover policy uses them: each
/// slot of the scenario is one client request that tries `chain[0]` up to `attempts` times
/// while the outcome is in `on`, then `chain[1]`, and so on, until an attempt is not in `on`
/// or the chain is exhausted. Every attempt is a record (of the provider it went to, with
/// `failover = true`); the last one carries the client's outcome and `request_latency_us`.
/// Every round also probes each backup on its own (a plain slot, `failover = false`), so a
/// dead backup shows before it is needed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailoverSpec {
    /// Provider indexes: the primary, then the backups in the order they are tried.
    pub chain: Vec<usize>,
    /// Attempts per provider before switching (2: retry once, then switch).
    pub attempts: u32,
    /// Outcomes that make the client try again (same provider while it has attempts left,
    /// else the next one).
    pub on: Vec<Outcome>,
}

impl FailoverSpec {
    /// The outcomes a client fails over on by default: throttling, server errors, timeouts,
    /// broken connections and streams.
    pub fn default_on() -> Vec<Outcome> {
        vec![
            Outcome::Throttled,
            Outcome::Http5xx,
            Outcome::TimeoutConnect,
            Outcome::TimeoutTtft,
            Outcome::TimeoutIdle,
            Outcome::TimeoutTotal,
            Outcome::Truncated,
            Outcome::StreamError,
            Outcome::ConnectionError,
        ]
    }
}

impl ScenarioSpec {
    /// Attempts one logical request (one turn) of this scenario makes at most: 1 + its
    /// retries, or for a failover request every provider of the chain times its `attempts`.
    pub fn max_attempts(&self) -> u32 {
        let retried = self
            .policy
            .retry
            .as_ref()
            .map_or(0, |r| r.max_retries)
            .saturating_add(1);
        let failover = self.failover.as_ref().map_or(0, |f| {
            u32::try_from(f.chain.len())
                .unwrap_or(u32::MAX)
                .saturating_mul(f.attempts)
        });
        retried.max(failover)
    }

    /// The longest one slot of this scenario can take, µs: every turn with every attempt
    /// ([`ScenarioSpec::max_attempts`]: a failover request through a chain that is all down
    /// makes every provider's attempts) at its total timeout, plus every retry's longest wait.
    /// (A coordinator's deadline must allow for it after the last slot.)
    pub fn worst_case_slot_us(&self) -> u64 {
        let p = &self.policy;
        // Saturating: validation bounds every term, a plan read back from elsewhere may not.
        let attempts = u64::from(self.max_attempts());
        let waits_ms: u64 = p.retry.as_ref().map_or(0, |r| {
            (1..=r.max_retries)
                .map(|k| r.wait_ms(k, r.honour_retry_after.then_some(f64::INFINITY)))
                .fold(0, u64::saturating_add)
        });
        let total_us = (self.timeouts.total_s * 1e6) as u64;
        u64::from(p.turns.max(1)).saturating_mul(
            attempts
                .saturating_mul(total_us)
                .saturating_add(waits_ms.saturating_mul(1000)),
        )
    }
}

/// How each logical request of a scenario is made: how many turns its conversation has,
/// whether a cache nonce goes in front of the prompt, and which attempts are retried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClientPolicy {
    /// Turns of the conversation, 1..=[`MAX_TURNS`]: turn `k` sends the history of turns
    /// `1..k` (each assistant answer after its user message) and the prompt's
    /// `follow_ups[k − 2]`. Turns run back to back inside the slot; a turn whose logical
    /// outcome is not `ok` ends the conversation (later turns are not sent, and leave no
    /// record).
    #[serde(default = "one_turn", skip_serializing_if = "is_one")]
    pub turns: u32,
    /// Put `[nonce XXXXXXXX] ` (8 random hex digits) in front of the first message's content.
    /// One nonce per logical request: all turns and all attempts of one slot share it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cache_nonce: bool,
    /// Retries of failed attempts; `None`: every attempt is final.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Largest response body of one attempt, bytes: the probe engine stops reading beyond it
    /// and records `protocol_error` ("response larger than N bytes"), so a provider sending
    /// gigabytes cannot exhaust an agent's memory.
    #[serde(
        default = "default_max_response_bytes",
        skip_serializing_if = "is_default_max_response_bytes"
    )]
    pub max_response_bytes: u64,
}

/// Most turns a conversation may have.
pub const MAX_TURNS: u32 = 10;

/// Default [`ClientPolicy::max_response_bytes`]: 64 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// Smallest [`ClientPolicy::max_response_bytes`] a campaign may set: 1 KiB.
pub const MIN_MAX_RESPONSE_BYTES: u64 = 1 << 10;

fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

fn is_default_max_response_bytes(n: &u64) -> bool {
    *n == DEFAULT_MAX_RESPONSE_BYTES
}

fn one_turn() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Default for ClientPolicy {
    fn default() -> Self {
        ClientPolicy {
            turns: 1,
            cache_nonce: false,
            retry: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// When and how often a failed attempt is tried again. Every attempt is its own record; the
/// last one of a logical request has `final_attempt` and the request's total latency.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub max_retries: u32,
    /// Wait before retry `k` (1-based): `backoff_ms[min(k, len) − 1]`, ms.
    pub backoff_ms: Vec<u64>,
    /// Outcomes that are retried (never `ok` or `history_rejected`).
    pub on: Vec<Outcome>,
    /// Wait at least the response's `Retry-After` (capped at `max_retry_after_ms`).
    pub honour_retry_after: bool,
    /// Longest `Retry-After` honoured, ms.
    pub max_retry_after_ms: u64,
}

impl Default for RetryPolicy {
    /// 3 retries after 1 s, 2 s, 4 s, of `throttled` and `http_5xx`, honouring Retry-After up
    /// to 30 s.
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            backoff_ms: vec![1_000, 2_000, 4_000],
            on: vec![Outcome::Throttled, Outcome::Http5xx],
            honour_retry_after: true,
            max_retry_after_ms: 30_000,
        }
    }
}

impl RetryPolicy {
    /// Whether an attempt `attempt` (1-based) that ended with `outcome` is retried.
    pub fn retries(&self, attempt: u32, outcome: Outcome) -> bool {
        attempt <= self.max_retries && self.on.contains(&outcome)
    }

    /// The wait before retry `k` (1-based), ms: its backoff, or the response's Retry-After
    /// (seconds) when that is longer and honoured, capped at `max_retry_after_ms`.
    pub fn wait_ms(&self, k: u32, retry_after_s: Option<f64>) -> u64 {
        let backoff = match self.backoff_ms.len() {
            0 => 0,
            n => self.backoff_ms[(k.max(1) as usize).min(n) - 1],
        };
        let told = retry_after_s
            .filter(|s| self.honour_retry_after && *s > 0.0 && !s.is_nan())
            .map_or(0, |s| {
                ((s * 1000.0).min(self.max_retry_after_ms as f64)) as u64
            });
        backoff.max(told)
    }
}

/// Round timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundsSpec {
    /// Number of rounds.
    pub count: u32,
    /// Round `r` starts at `start_at + r × interval_ms`, ms.
    pub interval_ms: u64,
    /// Probe `i` of a round is sent at round start + `i × gap_ms`, ms.
    pub gap_ms: u64,
}

impl RoundsSpec {
    /// How long a rounds probe may wait for its provider's caps (`max_in_flight`, rates,
    /// gap, a Retry-After pause) past its intended time before it is not sent (outcome
    /// `dropped`), ms: the open-loop default [`crate::load::DEFAULT_MAX_QUEUE_MS`] (10 s) or
    /// the interval, whichever is shorter, so that no probe is sent in a later round's time
    /// and every region's rounds stay in step behind a stalled provider.
    pub fn max_queue_ms(&self) -> u64 {
        crate::load::DEFAULT_MAX_QUEUE_MS.min(self.interval_ms)
    }
}

/// The validated plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Campaign name.
    pub name: String,
    /// Seed of the per-round provider order.
    pub seed: u64,
    /// Metric definitions version (docs/metrics.md, [`crate::metrics::METRICS_VERSION`]).
    pub metrics_version: u32,
    /// Regions to run in; the coordinator pushes the plan to connected agents of these regions.
    pub regions: Vec<String>,
    /// Round timing.
    pub rounds: RoundsSpec,
    /// Providers.
    pub providers: Vec<ProviderSpec>,
    /// Scenarios.
    pub scenarios: Vec<ScenarioSpec>,
    /// Name of the prompt set the prompts came from.
    pub prompt_set: String,
    /// Time zone of each region that has one: region → IANA name or `±HH:MM` (canonical
    /// text, see [`crate::windows::Zone`]). Absent from the JSON when empty, so plans without
    /// zones keep their [`Plan::hash`]; older plan JSON without the field parses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timezones: BTreeMap<String, String>,
    /// Named windows of local time, in declaration order (the first that contains a time
    /// wins; see [`crate::windows`]). Absent from the JSON when empty, like `timezones`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
    /// When the campaign repeats as a series of runs (`[schedule]`, see
    /// [`crate::schedule`]); `None`: it runs once. Absent from the JSON when `None`, so plans
    /// without a schedule keep their [`Plan::hash`]. The coordinator sends each run's plan
    /// to the agents without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Schedule>,
    /// Weights and user scores of the provider selection matrix (`[selection]`, see
    /// [`crate::selection`]); `None` without the section. Absent from the JSON when `None`, so
    /// plans without it keep their [`Plan::hash`]. Agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<crate::selection::Selection>,
    /// Compatibility checks to run with `latmesh compat` (the file's `[compat]` section,
    /// [`crate::compat::CompatSpec`]); `None` without it. Absent from the JSON when `None`.
    /// Agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<crate::compat::CompatSpec>,
    /// Quality parity to run with `latmesh compat` (the file's `[quality]` section,
    /// [`crate::quality::QualitySpec`]); `None` without it. Absent from the JSON when `None`.
    /// Agents ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::quality::QualitySpec>,
    /// The percentiles the summary, the matrices and the reports show (`[campaign]
    /// percentiles`), each in (0, 100), ascending, unique, at most [`MAX_PERCENTILES`];
    /// [`DEFAULT_PERCENTILES`] unless the
    /// campaign sets them. Absent from the JSON when they are the default, so such plans keep
    /// their [`Plan::hash`]; older plan JSON without the field parses as the default. Agents
    /// ignore it.
    #[serde(
        default = "default_percentiles",
        skip_serializing_if = "is_default_percentiles"
    )]
    pub percentiles: Vec<f64>,
    /// This run's salt of generated prompts ([`crate::synth::run_salt`]): stamped by the
    /// coordinator on each run it launches whose plan has a generated-prompt scenario that
    /// does not reuse text, so each run sends new words ([`Plan::text_seed`]). `None` before
    /// launch; absent from the JSON then, so such plans keep their [`Plan::hash`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_salt: Option<u64>,
}

/// The percentiles shown when a campaign does not choose: P50, P90, P95, P99.
pub const DEFAULT_PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// Most percentiles a campaign may list (a matrix cell shows them side by side).
pub const MAX_PERCENTILES: usize = 8;

/// [`DEFAULT_PERCENTILES`] as a list (the serde default of [`Plan::percentiles`]).
pub fn default_percentiles() -> Vec<f64> {
    DEFAULT_PERCENTILES.to_vec()
}

fn is_default_percentiles(list: &[f64]) -> bool {
    list == DEFAULT_PERCENTILES
}

/// Pause after the rounds phase and after an SLO search, µs: the rounds leave at most their
/// last probes in flight, and a search's steps each end with a quiet gap as long as the step.
pub const PHASE_SETTLE_US: u64 = 2_000_000;

/// Shortest drain allowance after a sweep or a fixed-rate open-loop phase, µs (10 s): such a
/// phase may leave a provider with a queue of our requests (an open loop above its capacity,
/// the last step's workers); each agent waits for its requests of earlier phases to end, up
/// to the next phase's start, and a phase that starts with one of them still in flight is
/// flagged on that provider's cells (`phase_start_in_flight`, docs/metrics.md "Phase
/// hygiene").
pub const PHASE_DRAIN_US: u64 = 10_000_000;

/// Longest drain allowance, µs (60 s).
pub const MAX_PHASE_DRAIN_US: u64 = 60_000_000;

/// The pause after a phase of load model `load`, µs, before the next one starts (the same in
/// every region: phases stay synchronized): after a fixed-rate open-loop phase three times
/// its length, within [`PHASE_DRAIN_US`]..=[`MAX_PHASE_DRAIN_US`] (an open loop at `f` times
/// a provider's capacity for `T` leaves a queue that drains in `(f − 1) × T`: up to 4× is
/// drained); after a sweep [`PHASE_DRAIN_US`] (a closed loop leaves at most its workers'
/// requests); after the rounds and an SLO search (whose steps end with a quiet gap)
/// [`PHASE_SETTLE_US`].
pub fn pause_after_us(load: &LoadModel) -> u64 {
    match load {
        LoadModel::Rounds => PHASE_SETTLE_US,
        LoadModel::Sweep(_) => PHASE_DRAIN_US,
        LoadModel::Rate(r) if r.search.is_some() => PHASE_SETTLE_US,
        LoadModel::Rate(r) => r
            .span_us()
            .saturating_mul(3)
            .clamp(PHASE_DRAIN_US, MAX_PHASE_DRAIN_US),
    }
}

/// One probe of a round: which provider, which scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index into [`Plan::providers`] (for a failover request: the chain's primary).
    pub provider: usize,
    /// Index into [`Plan::scenarios`].
    pub scenario: usize,
    /// A client request through the scenario's failover chain ([`FailoverSpec`]).
    pub failover: bool,
}

impl Slot {
    /// A plain probe of `provider` in `scenario`.
    pub fn new(provider: usize, scenario: usize) -> Slot {
        Slot {
            provider,
            scenario,
            failover: false,
        }
    }
}

impl LocalTimeSettings for Plan {
    fn regions(&self) -> &[String] {
        &self.regions
    }

    fn timezones(&self) -> &BTreeMap<String, String> {
        &self.timezones
    }

    fn windows(&self) -> &[Window] {
        &self.windows
    }
}

impl Plan {
    /// Indexes of the scenarios run in rounds.
    pub fn rounds_scenarios(&self) -> Vec<usize> {
        (0..self.scenarios.len())
            .filter(|&i| self.scenarios[i].load.is_rounds())
            .collect()
    }

    /// The slots scenario `scenario` has in every round (or of every sweep step / rate
    /// schedule): one per provider; for a failover scenario one client request through its
    /// chain plus one plain probe of each backup.
    pub fn scenario_slots(&self, scenario: usize) -> Vec<Slot> {
        match &self.scenarios[scenario].failover {
            None => (0..self.providers.len())
                .map(|p| Slot::new(p, scenario))
                .collect(),
            Some(f) => std::iter::once(Slot {
                provider: f.chain[0],
                scenario,
                failover: true,
            })
            .chain(f.chain[1..].iter().map(|&b| Slot::new(b, scenario)))
            .collect(),
        }
    }

    /// Probes per round (the slots of every `rounds` scenario).
    pub fn slots_per_round(&self) -> usize {
        self.rounds_scenarios()
            .into_iter()
            .map(|s| self.scenario_slots(s).len())
            .sum()
    }

    /// Logical requests one agent is planned to make, when known in advance: every rounds
    /// slot and every `rate` arrival of every step (a `sweep` makes as many as its providers
    /// answer, and an SLO search's rates are chosen as it runs, so they add none here).
    pub fn probes_per_agent(&self) -> u64 {
        let rounds = if self.rounds_scenarios().is_empty() {
            0
        } else {
            u64::from(self.rounds.count) * self.slots_per_round() as u64
        };
        let arrivals: u64 = (0..self.scenarios.len())
            .filter_map(|s| match &self.scenarios[s].load {
                LoadModel::Rate(r) if r.search.is_none() => {
                    Some(r.planned_arrivals(self.seed, s) * self.providers.len() as u64)
                }
                _ => None,
            })
            .sum();
        rounds + arrivals
    }

    /// The campaign's time layout: the rounds phase (when any scenario runs in rounds), then
    /// each `sweep` and `rate` scenario in declaration order (see [`crate::load`]).
    pub fn phases(&self) -> Vec<Phase> {
        let mut out = Vec::new();
        let mut at = 0u64;
        if !self.rounds_scenarios().is_empty() {
            let span_us = u64::from(self.rounds.count)
                .saturating_mul(self.rounds.interval_ms)
                .saturating_mul(1000);
            out.push(Phase {
                kind: PhaseKind::Rounds,
                start_us: 0,
                span_us,
            });
            at = span_us.saturating_add(PHASE_SETTLE_US);
        }
        for (i, s) in self.scenarios.iter().enumerate() {
            if !s.load.is_rounds() {
                let span_us = s.load.span_us();
                out.push(Phase {
                    kind: PhaseKind::Scenario(i),
                    start_us: at,
                    span_us,
                });
                at = at
                    .saturating_add(span_us)
                    .saturating_add(pause_after_us(&s.load));
            }
        }
        out
    }

    /// From `start_at` to the end of the last phase, µs (the settle time after the last
    /// phase is not counted).
    pub fn span_us(&self) -> u64 {
        self.phases()
            .last()
            .map_or(0, |p| p.start_us.saturating_add(p.span_us))
    }

    /// The probe order of round `round`: every (provider, `rounds` scenario) once, shuffled
    /// with a ChaCha8 generator seeded by (`seed`, `round`). Identical in every region.
    pub fn round_order(&self, round: u32) -> Vec<Slot> {
        let mut slots: Vec<Slot> = self
            .rounds_scenarios()
            .into_iter()
            .flat_map(|scenario| self.scenario_slots(scenario))
            .collect();
        // The order before shuffling is provider-major, as plans before failover had it, so
        // their rounds keep their order.
        slots.sort_by_key(|s| (s.provider, s.scenario, s.failover));
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.seed ^ u64::from(round).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        slots.shuffle(&mut rng);
        slots
    }

    /// Offset of probe `slot` of round `round` from `start_at`, µs.
    pub fn probe_offset_us(&self, round: u32, slot: usize) -> u64 {
        (u64::from(round).saturating_mul(self.rounds.interval_ms))
            .saturating_add((slot as u64).saturating_mul(self.rounds.gap_ms))
            .saturating_mul(1000)
    }

    /// The prompt round `round` of `scenario` sends.
    pub fn prompt_for(&self, scenario: usize, round: u32) -> &PlanPrompt {
        let prompts = &self.scenarios[scenario].prompts;
        &prompts[round as usize % prompts.len()]
    }

    /// The seed the words of generated-prompt scenario `spec` are drawn from: the plan's
    /// seed, mixed with [`Plan::text_salt`] unless the scenario reuses text
    /// ([`crate::synth::text_seed`]).
    pub fn text_seed(&self, spec: &crate::synth::SynthSpec) -> u64 {
        crate::synth::text_seed(self.seed, self.text_salt, spec)
    }

    /// Whether generated-prompt scenario `spec` sends new words in this run or reuses them
    /// ([`crate::synth::TextMode::of`]).
    pub fn text_mode(&self, spec: &crate::synth::SynthSpec) -> crate::synth::TextMode {
        crate::synth::TextMode::of(self.text_salt, spec)
    }

    /// Stamps a new run's salt ([`crate::synth::run_salt`]) when a generated-prompt scenario
    /// sends fresh text (`reuse_text` not set); leaves the plan as it is otherwise (its hash
    /// then does not change). Called once per launched run, before the plan is hashed and
    /// sent.
    pub fn stamp_text_salt(&mut self) {
        let fresh = self
            .scenarios
            .iter()
            .any(|s| s.synth.as_ref().is_some_and(|g| !g.reuse_text));
        self.text_salt = fresh.then(crate::synth::run_salt);
    }

    /// Canonical JSON (what the wire carries).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plans serialize")
    }

    /// Hex SHA-256 of [`Plan::to_json`].
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.to_json().as_bytes()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn plan(providers: usize, scenarios: usize) -> Plan {
        Plan {
            name: "t".into(),
            seed: 42,
            metrics_version: 1,
            regions: vec!["us-east".into()],
            rounds: RoundsSpec {
                count: 3,
                interval_ms: 2_000,
                gap_ms: 100,
            },
            providers: (0..providers)
                .map(|i| ProviderSpec {
                    name: format!("p{i}"),
                    base_url: "http://127.0.0.1:1/v1".into(),
                    api_key_env: None,
                    model_id: "m".into(),
                    expect_model: None,
                    pass_reasoning: false,
                    limits: ProviderLimits::default(),
                    price: None,
                    user_agent: None,
                    request: RequestShape::default(),
                })
                .collect(),
            scenarios: (0..scenarios)
                .map(|i| ScenarioSpec {
                    name: format!("s{i}"),
                    stream: true,
                    max_tokens: 16,
                    temperature: Some(0.0),
                    top_p: None,
                    timeouts: Timeouts::default(),
                    prompts: vec![
                        PlanPrompt {
                            id: "a".into(),
                            messages: vec![],
                            follow_ups: vec![],
                        },
                        PlanPrompt {
                            id: "b".into(),
                            messages: vec![],
                            follow_ups: vec![],
                        },
                    ],
                    policy: ClientPolicy::default(),
                    load: LoadModel::Rounds,
                    failover: None,
                    extra_body: serde_json::Map::new(),
                    synth: None,
                    output_tokens: None,
                    warmup: 0,
                    slo: None,
                })
                .collect(),
            prompt_set: "x".into(),
            timezones: BTreeMap::new(),
            windows: Vec::new(),
            schedule: None,
            selection: None,
            compat: None,
            quality: None,
            percentiles: default_percentiles(),
            text_salt: None,
        }
    }

    #[test]
    fn round_order_is_a_permutation_shared_by_every_caller() {
        let p = plan(9, 2);
        let order = p.round_order(3);
        assert_eq!(order.len(), 18);
        let mut seen: Vec<(usize, usize)> =
            order.iter().map(|s| (s.provider, s.scenario)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 18);
        // Another agent computing the same round gets the same order; another round differs.
        assert_eq!(p.round_order(3), order);
        assert_ne!(p.round_order(4), order);
        let mut other_seed = p.clone();
        other_seed.seed = 43;
        assert_ne!(other_seed.round_order(3), order);
    }

    #[test]
    fn offsets_and_prompts_rotate() {
        let p = plan(2, 1);
        assert_eq!(p.probe_offset_us(2, 1), 4_100_000);
        assert_eq!(p.prompt_for(0, 0).id, "a");
        assert_eq!(p.prompt_for(0, 3).id, "b");
        assert_eq!(p.probes_per_agent(), 6);
    }

    #[test]
    fn json_round_trip_keeps_the_hash() {
        let p = plan(3, 2);
        let back: Plan = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.hash(), p.hash());
        assert_eq!(p.hash().len(), 64);
    }

    #[test]
    fn client_policies_are_absent_at_their_defaults_and_round_trip() {
        let p = plan(2, 1);
        let json = p.to_json();
        for key in [
            "turns",
            "cache_nonce",
            "retry",
            "pass_reasoning",
            "follow_ups",
            "policy",
            "max_response_bytes",
            "user_agent",
        ] {
            assert!(!json.contains(key), "{key} in {json}");
        }
        let mut m = p.clone();
        m.providers[0].pass_reasoning = true;
        m.providers[1].user_agent = Some("my-app/1.0".into());
        m.scenarios[0].prompts[0].follow_ups = vec!["more?".into()];
        m.scenarios[0].policy = ClientPolicy {
            turns: 2,
            cache_nonce: true,
            retry: Some(RetryPolicy::default()),
            max_response_bytes: 1 << 20,
        };
        let json = m.to_json();
        assert!(
            json.contains(r#""turns":2,"cache_nonce":true,"retry":{"max_retries":3,"backoff_ms":[1000,2000,4000],"on":["throttled","http_5xx"],"honour_retry_after":true,"max_retry_after_ms":30000}"#),
            "{json}"
        );
        assert!(json.contains(r#""pass_reasoning":true"#), "{json}");
        assert!(json.contains(r#""user_agent":"my-app/1.0""#), "{json}");
        assert!(json.contains(r#""max_response_bytes":1048576"#), "{json}");
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_ne!(m.hash(), p.hash());
    }

    #[test]
    fn retry_waits_use_backoff_and_capped_retry_after() {
        let r = RetryPolicy::default();
        assert_eq!(
            (r.wait_ms(1, None), r.wait_ms(2, None), r.wait_ms(3, None)),
            (1_000, 2_000, 4_000)
        );
        // Past the list, the last backoff repeats.
        assert_eq!(r.wait_ms(7, None), 4_000);
        // A longer Retry-After wins, up to the cap; a shorter one does not shorten the wait.
        assert_eq!(r.wait_ms(1, Some(3.0)), 3_000);
        assert_eq!(r.wait_ms(1, Some(0.2)), 1_000);
        assert_eq!(r.wait_ms(1, Some(90.0)), 30_000);
        let ignore = RetryPolicy {
            honour_retry_after: false,
            ..RetryPolicy::default()
        };
        assert_eq!(ignore.wait_ms(1, Some(3.0)), 1_000);
        assert!(r.retries(1, Outcome::Throttled) && r.retries(3, Outcome::Http5xx));
        assert!(!r.retries(4, Outcome::Throttled));
        assert!(!r.retries(1, Outcome::TimeoutTtft) && !r.retries(1, Outcome::Ok));
        // Worst case: 2 turns × (4 attempts × 120 s + 30 s × 3 waits).
        let mut s = plan(1, 1).scenarios[0].clone();
        assert_eq!(s.worst_case_slot_us(), 120_000_000);
        s.policy.turns = 2;
        s.policy.retry = Some(r);
        assert_eq!(s.worst_case_slot_us(), 2 * (4 * 120_000_000 + 90_000_000));
    }

    #[test]
    fn plans_without_windows_keep_their_json_and_hash() {
        let p = plan(2, 1);
        let json = p.to_json();
        assert!(
            !json.contains("timezones") && !json.contains("windows"),
            "{json}"
        );
        // JSON written before the fields existed parses, and hashes the same.
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back.hash(), p.hash());
        let mut w = p.clone();
        w.timezones
            .insert("us-east".into(), "America/New_York".into());
        w.windows.push(Window {
            name: "peak".into(),
            ranges: crate::windows::parse_ranges("09:00-12:00").unwrap(),
        });
        let json = w.to_json();
        assert!(
            json.contains(r#""windows":[{"name":"peak","ranges":["09:00-12:00"]}]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), w);
        assert_ne!(w.hash(), p.hash());
    }

    #[test]
    fn plans_without_a_schedule_keep_their_json_and_hash() {
        let mut p = plan(1, 1);
        let json = p.to_json();
        assert!(!json.contains("schedule"), "{json}");
        let hash = p.hash();
        p.schedule = Some(Schedule {
            every_ms: Some(3_000),
            at_windows: vec![],
            runs: 2,
            until_unix_us: None,
        });
        let json = p.to_json();
        assert!(
            json.contains(r#""schedule":{"every_ms":3000,"runs":2}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
        assert_ne!(p.hash(), hash);
        p.schedule = None;
        assert_eq!(p.hash(), hash);
    }
}
