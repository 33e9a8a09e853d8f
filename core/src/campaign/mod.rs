//! Campaign files: loading (TOML or YAML via figment, `LATMESH_*` overrides) and validation
//! into a [`Plan`](crate::plan::Plan).
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
//! warmup = 2                      # optional (default 0): first requests per provider, not counted
//! slo = { ttft_ms = 2000, tpot_ms = 50, ttft_p95_ms = 1500, goodput_pct = 90 } # optional
//!
//! [[scenarios]]
//! name = "context"                # plan scenarios context.1k, context.8k, context.32k
//! input_tokens = [1000, 8000, 32000] # generated prompts of exact lengths (not with prompt_ids)
//! shared_prefix_tokens = 0        # optional (default 0): words every request starts with
//! reuse_text = false              # optional (default false): new words each run; true: the same words every run (caching on purpose)
//! output_tokens = 128             # optional: sets max_tokens (then max_tokens may be left out)
//! load = "rate"
//! [scenarios.rate]
//! duration_s = 20                 # each step's length
//! arrivals = "gamma"              # constant (default), poisson, gamma
//! burstiness = 0.5                # gamma only (required there), in [0.01, 100]
//! # rps = 5 | [2, 4, 8] | { from = 1, to = 16, steps = 5 }  # one rate, steps, or a ramp
//! [scenarios.rate.search]         # instead of rps: the highest rate meeting the scenario's slo
//! min_rps = 2
//! max_rps = 32
//! steps = 8                       # optional (default 8, 2..=32)
//! min_requests = 20               # optional (default 20): judged requests a step needs
//! resolution_pct = 10             # optional (default 10)
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
//! exact_output = { ignore_eos = true } # optional: merged into output_tokens scenarios' bodies
//!
//! [compat]                        # optional: the checks `latmesh compat` runs
//! checks = ["stream", "json_mode"] # optional (default: every check), in any order
//! providers = ["fast-lane"]       # optional (default: every provider)
//! timeout_s = 30                  # optional (default 30)
//!
//! [quality]                       # optional: the quality-parity run of `latmesh compat`
//! samples = 3                     # optional (default 3, 1..=20)
//! prompt_ids = ["arith-*"]        # optional (default: the whole shipped set)
//! max_tokens = 512                # optional (default 512, 1..=32768)
//! providers = ["fast-lane"]       # optional (default: every provider)
//! timeout_s = 60                  # optional (default 60)
//! ```
//!
//! Workloads (`workload.rs`): a scenario sends prompts of the prompt
//! set (`prompt_ids`) or generated prompts (`input_tokens`, [`crate::synth`]), never both;
//! each tier is a plan scenario `{name}.{tier}` ([`crate::plan::ScenarioSpec::group`] gives
//! the file's name back). `slo` keys are `ttft_ms`, `tpot_ms`, `e2e_ms`,
//! `{metric}_p{percentile}_ms` and `goodput_pct` ([`crate::slo`]); an SLO search
//! ([`crate::load::SloSearch`]) needs one.
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
//!
//! Where each part is: `loader.rs` reads the text (figment layering, `LATMESH_*` overrides,
//! figment errors in the file's terms); `file.rs` is the schema of every table as written;
//! `validate.rs` turns the whole file into a plan (`[campaign]`, percentiles) and calls one
//! module per table for the rest: `rounds.rs`, `provider.rs` (endpoint, caps, prices),
//! `scenario.rs` (sampling, prompts, timeouts), `client_policy.rs` (turns, follow-ups, retry,
//! response cap), `failover.rs`, `load_model.rs` (sweep, rate, the campaign's span),
//! `workload.rs` (generated prompts, output length, warm-up, SLO; a scenario's tiers each
//! become a plan scenario), `windows.rs` (zones and windows), `schedule.rs`, `selection.rs`, `compat.rs` (`[compat]`
//! and `[quality]`, what `latmesh compat` runs); shared: `names.rs` (valid, unique names),
//! `error.rs` ([`CampaignError`]) and [`env_overrides`].

mod client_policy;
mod compat;
pub mod env_overrides;
mod error;
mod failover;
mod file;
mod load_model;
mod loader;
mod names;
mod provider;
mod rounds;
mod scenario;
mod schedule;
mod selection;
#[cfg(test)]
mod test_support;
mod validate;
mod windows;
mod workload;

pub use error::CampaignError;
pub use file::{
    CampaignFile, CampaignSection, CompatSection, FailoverSection, ProviderSection, QualitySection,
    RateSection, RetrySection, RoundsSection, ScenarioSection, ScheduleSection, ScoresSection,
    SearchSection, SelectionSection, SweepSection, WeightsSection, WindowsSection,
};
pub use load_model::MAX_PLAN_SPAN_US;
pub use loader::{load_file, load_toml_str};
pub use names::check_name_text;
pub use provider::{MAX_USER_AGENT_LEN, check_base_url, check_user_agent};
pub use rounds::MAX_GAP_MS;
pub use schedule::{MAX_EVERY_MS, MIN_EVERY_MS};
pub use validate::validate;
