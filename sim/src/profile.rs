//! Provider profiles: the nine built-in (demo) providers ([`builtin_profiles`]), the
//! seven compatibility trap providers ([`trap_profiles`]) and the three exact lab providers
//! ([`lab_profiles`]: ground truth for long contexts and SLO rates).
//!
//! A profile describes how one simulated provider behaves: when the first token comes,
//! how fast the rest follow, how tokens are grouped into SSE chunks, how long answers are,
//! which faults it injects, and where it is "hosted" (its home region, see [`crate::region`]).

use serde::{Deserialize, Serialize};

/// The model id every built-in provider lists (they all serve the same checkpoint, as in the
/// comparisons latmesh is made for). Requests may name any model; it is echoed back.
pub const DEFAULT_MODEL_ID: &str = "deepseek-v4-flash";

/// How one simulated provider behaves. All durations are in microseconds.
///
/// Time to first token (server side, before any region delay):
/// `(ttft_base_us + prefill_us_per_input_token × prompt_tokens) × J × T`, where `J` is
/// lognormal with median 1 and shape `ttft_jitter_sigma`, and `T` is 1, or with probability
/// `ttft_tail_prob` a factor drawn uniformly from `ttft_tail_factor_min..=ttft_tail_factor_max`.
/// Each inter-token latency is lognormal with median `itl_median_us` and shape `itl_sigma`.
///
/// # Serving capacity
/// With `capacity` > 0 at most `capacity` requests of this provider are in service at once,
/// counted over all callers and regions (one counter per provider per served router, i.e.
/// per [`serve_providers`](crate::serve_providers) call). A request that finds every slot
/// taken waits, first come first served, for one to free; then its region delay is over and
/// its response headers go out, and its TTFT clock starts. The wait therefore adds to the
/// TTFT and E2E the client sees (and to the server-side ones of the ground truth, which count
/// from the receipt), and is reported in the `x-sim-queue-wait-us` response header and
/// [`ProbeTruth::queue_wait`](crate::ProbeTruth::queue_wait). A slot is taken once the region
/// delay is over and held until the last frame of a streamed body (`[DONE]`, or the cut line
/// of a truncated stream) is handed over, until a non-streamed response is handed over, or
/// until the client goes away (the response or its body is dropped). Answers decided before
/// service (HTTP 429 throttling, HTTP 400) take no slot.
///
/// The resulting law, for `c` closed-loop clients (each sends its next request when the
/// previous one ends) and a service time `S` (planned TTFT + decode): the latency a client
/// sees is ≈ `S` (+ its region delay `d`) while `c` ≤ `capacity`, and ≈ `S × c / capacity`
/// above it (exactly: no request ever waits while `c` ≤ `capacity`; the queue builds once
/// `c` > `capacity × (1 + d / S)`). `capacity` 0 means unlimited: no request ever waits.
/// For an open-loop client sending at a constant rate `r` (one request every `1/r` s), no
/// request ever waits while `r` ≤ `capacity / S`; above it the queue (and the TTFT) grows
/// without bound. [`crate::slo_truth`] turns this into the highest rate meeting an SLO.
///
/// # Prompt tokens
/// The prompt tokens of a request (what `usage` reports, what prefill and the context
/// limit count) are, over the prompt's parts (system prompt / `instructions`, each message's
/// text parts, reasoning sent back with assistant turns):
/// * a part that is **generated text** (at least
///   [`MIN_INPUT_TOKENS`](latmesh_core::synth::MIN_INPUT_TOKENS) lower-case ASCII words
///   separated by single spaces, as latmesh's generated prompts
///   ([`latmesh_core::synth`]) are): `words × tokens_per_word`;
/// * any other part: its characters, 4 to a token;
///
/// summed (each kind rounded up once), plus `template_tokens`. See [`crate::tokens`].
///
/// # Context limit
/// With `context_tokens` = `N` > 0, a request with `P` prompt tokens and output cap `C`
/// (Chat `max_completion_tokens` / `max_tokens`, Anthropic `max_tokens`, Responses
/// `max_output_tokens`; 0 when the request has none) is refused when `P + C > N`, as OpenAI
/// counts, with HTTP 400: on Chat `{"error":{"message":"This model's maximum context length
/// is N tokens. However, you requested P+C tokens (P in the messages, C in the completion).
/// …","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
/// on Responses the same shape with `param` `input`, on Anthropic
/// `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long:
/// P tokens > N maximum"}}` when the prompt alone is too long, else `"input length and
/// `max_tokens` exceed context limit: P + C > N, …"`. See [`crate::context_limit`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderProfile {
    /// Path segment and name of the provider: base URL `http://ADDR/{name}/v1`.
    pub name: String,
    /// One-line description, shown by `latmesh-sim providers`.
    pub description: String,
    /// Region the provider is hosted in (for the region delay table).
    pub home_region: String,
    /// Model ids listed by `GET /{name}/v1/models`.
    pub models: Vec<String>,
    /// Fixed part of the time to first token.
    pub ttft_base_us: u64,
    /// Prefill time added per prompt token (the count billed in `usage`, template included,
    /// cached tokens excluded; see [Prompt tokens](ProviderProfile#prompt-tokens)).
    pub prefill_us_per_input_token: u64,
    /// Tokens the provider's chat template adds to every request's prompt (a count; default
    /// 0): part of `usage.prompt_tokens`, of the prefill and of the context limit.
    pub template_tokens: u32,
    /// Tokens this provider's tokenizer makes of one word of generated text (default 1.0;
    /// within 0.25..=4): a generated prompt of `w` words counts `ceil(w × tokens_per_word)`
    /// tokens (see [Prompt tokens](ProviderProfile#prompt-tokens)). Other text is counted at
    /// 4 characters per token whatever this says.
    pub tokens_per_word: f64,
    /// Context window in tokens (0 = unlimited): a request whose prompt tokens plus its
    /// output cap (`max_tokens` and its equivalents; the prompt alone without a cap) exceed
    /// it is answered HTTP 400 in the API's shape (see
    /// [Context limit](ProviderProfile#context-limit)), before any serving slot is taken.
    pub context_tokens: u32,
    /// Shape (σ of the underlying normal) of the lognormal TTFT multiplier; 0 = no jitter.
    pub ttft_jitter_sigma: f64,
    /// Probability that a request lands in the heavy TTFT tail.
    pub ttft_tail_prob: f64,
    /// Smallest TTFT multiplier in the tail.
    pub ttft_tail_factor_min: f64,
    /// Largest TTFT multiplier in the tail.
    pub ttft_tail_factor_max: f64,
    /// Median inter-token latency.
    pub itl_median_us: u64,
    /// Shape (σ) of the lognormal inter-token latency; 0 = constant.
    pub itl_sigma: f64,
    /// Fewest tokens in one SSE chunk (at least 1).
    pub tokens_per_chunk_min: u32,
    /// Most tokens in one SSE chunk.
    pub tokens_per_chunk_max: u32,
    /// Shortest natural answer (visible content tokens) before `finish_reason: "stop"`.
    pub output_tokens_min: u32,
    /// Longest natural answer.
    pub output_tokens_max: u32,
    /// Fewest reasoning tokens streamed before the content (Chat `reasoning_content`, an
    /// Anthropic `thinking` block, a Responses `reasoning` item; 0 with
    /// `reasoning_tokens_max` 0: no reasoning). A request can switch thinking off or cap it
    /// ([`crate::plan::Thinking`]).
    pub reasoning_tokens_min: u32,
    /// Most reasoning tokens.
    pub reasoning_tokens_max: u32,
    /// Probability of answering HTTP 429 with `Retry-After` (`rate_limit_error`).
    pub throttle_prob: f64,
    /// Smallest `Retry-After`, in seconds.
    pub retry_after_s_min: u32,
    /// Largest `Retry-After`, in seconds.
    pub retry_after_s_max: u32,
    /// Probability that a stream stops mid-way (in the middle of a token event, without the
    /// API's finish and terminal events).
    pub truncate_prob: f64,
    /// Probability that a stream fails mid-way with the API's in-band error event (Chat: a
    /// `data: {"error":…}` payload; Anthropic: `event: error` with `overloaded_error`;
    /// Responses: `response.failed`) in place of one token event, and nothing after it.
    pub stream_error_prob: f64,
    /// Probability of answering "overloaded" before any token: HTTP 529 `overloaded_error`
    /// on the Anthropic API, HTTP 503 on the OpenAI ones.
    pub overload_prob: f64,
    /// Probability that one gap during decoding is stretched by `stall_us`.
    pub stall_prob: f64,
    /// Length of a stall.
    pub stall_us: u64,
    /// When non-zero, send keep-alives this often while prefilling (`: keep-alive` SSE
    /// comments; `ping` events on the Anthropic API).
    pub keepalive_interval_us: u64,
    /// Send the `role` chunk (empty content) right after the headers instead of together
    /// with the first token (as some servers do: it is not a token and must not stamp TTFT).
    pub early_role_chunk: bool,
    /// What the provider does with `reasoning_content` in the assistant messages of a
    /// multi-turn history (checked before anything else; see [`ReasoningPassback`]).
    pub reasoning_passback: ReasoningPassback,
    /// Answer HTTP 400 naming `stream_options` to a Chat Completions request that carries
    /// that field (as some gateways do with fields they do not know).
    pub rejects_stream_options: bool,
    /// Answer HTTP 400 to a Chat Completions request that carries `max_tokens` (as newer
    /// OpenAI models do: they want `max_completion_tokens`).
    pub requires_max_completion_tokens: bool,
    /// Requests served at once (a count; 0 = unlimited); more wait first come first served,
    /// see [Serving capacity](ProviderProfile#serving-capacity).
    pub capacity: u32,
    /// Hostile behaviour: key echoes, huge fields, absurd usage ([`crate::hostile`]); all
    /// off by default.
    pub hostile: crate::hostile::Hostile,
    /// Stop sequences (Chat `stop`, Anthropic `stop_sequences`; default
    /// [`Feature::Supported`]): the answer is cut before the first occurrence of any of them
    /// and ends with finish reason `stop` (Anthropic: `stop_reason: "stop_sequence"` and the
    /// matched `stop_sequence`). The Responses API has no stop parameter.
    pub stop: Feature,
    /// JSON mode (Chat `response_format` `json_object` / `json_schema`, Responses
    /// `text.format`; default [`Feature::Supported`]): the answer is one compact JSON object
    /// (`{"city":"Paris","country":"France"}` for
    /// [`JSON_PROMPT`](latmesh_core::compat::JSON_PROMPT), a small object of filler words for
    /// any other prompt). Ignored: prose. The Anthropic API has no JSON mode.
    pub json_mode: Feature,
    /// Tool calls (default [`Feature::Supported`]): a request declaring `tools` is answered
    /// with one call of the first tool, arguments `{"city":"Paris"}` streamed in three
    /// fragments (Chat `delta.tool_calls`, finish `tool_calls`; Anthropic a `tool_use` block
    /// of `input_json_delta`s, `stop_reason: "tool_use"`; Responses a `function_call` item
    /// with `response.function_call_arguments.delta`s). Ignored: a prose answer.
    pub tool_calls: Feature,
    /// The model name answered (`model` of every chunk, event and body) in place of the one
    /// the request asked for (default `None`: echo the request's `model`, else the first of
    /// [`models`](Self::models)).
    pub answer_model: Option<String>,
    /// The Chat Completions `system_fingerprint` of every chunk and body (default `None`:
    /// the field is left out). The other APIs have none.
    pub system_fingerprint: Option<String>,
    /// The API key the provider accepts (default `None`: any key, or none). When set, a
    /// request whose key (`Authorization: Bearer KEY` or `x-api-key: KEY`) differs, or that
    /// has none, is answered [`wrong_key_status`](Self::wrong_key_status) in the API's error
    /// shape before anything else (not counted as served).
    pub api_key: Option<String>,
    /// The status of a wrong key's answer (default 401; a broken gateway answers 500).
    pub wrong_key_status: u16,
    /// Prompt caching (default off): the provider remembers (bounded, see
    /// [`crate::cache`]) the first 4 KiB of the prompt text of each request of at least
    /// 1,024 estimated tokens; a later request with a remembered prefix reports that
    /// prefix's tokens as cached (Chat `usage.prompt_tokens_details.cached_tokens`, Anthropic
    /// `cache_read_input_tokens` (its `input_tokens` then counts the rest), Responses
    /// `usage.input_tokens_details.cached_tokens`) and prefills only the rest
    /// (`prefill_us_per_input_token` × uncached tokens).
    pub prompt_cache: bool,
    /// Share of the quality prompts ([`latmesh_core::quality`]) answered wrong (default 0;
    /// within 0..=1): a prompt is answered wrong (another number, text, JSON value or
    /// output: [`crate::script::wrong_text`]) exactly when
    /// [`crate::truth::quantized_answers_wrong`] says so for its id, every time it is asked,
    /// on every API (a cheaper quantization of the same model).
    pub quantized_wrong_share: f64,
    /// Length of a quality answer's filler before its `Answer:` line, relative to an
    /// honest profile's (default 1; within 0.05..=4): `0.5` answers quality prompts with
    /// half the words (at least one). Other answers keep their length.
    pub quantized_length_factor: f64,
    /// Swap the model mid-campaign (default 0: never): the provider's requests from number
    /// `swap_after_requests` on (0-based, counted over all callers and regions, as the
    /// `x-sim-request-index` header counts them) are answered with
    /// [`swap_model`](Self::swap_model) and [`swap_fingerprint`](Self::swap_fingerprint)
    /// ([`crate::truth::answered_identity`]).
    pub swap_after_requests: u64,
    /// The model named after the swap (required when `swap_after_requests` > 0).
    pub swap_model: String,
    /// The Chat `system_fingerprint` after the swap (empty: none).
    pub swap_fingerprint: String,
    /// Drift (default 0: none): the provider gets slower as time passes, as one whose
    /// capacity is taken by other users does: every request's TTFT base grows by this many
    /// µs per second of wall time (not scaled by the time scale) since the provider's first
    /// request (per served router), [`ProviderProfile::ttft_base_at_us`], the ground truth.
    /// A search against it sees goodput fall at every rate as it goes on.
    pub ttft_drift_us_per_s: u64,
}

/// What a provider does with an optional request feature (stop sequences, JSON mode, tool
/// calls) when a request asks for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// Honoured (the default).
    #[default]
    Supported,
    /// Accepted and not applied: the answer is what it would be without the field.
    Ignored,
    /// Refused: HTTP 400 naming the field, in the API's error shape.
    Rejected,
    /// Honoured on the first of every three requests that ask for it and ignored on the
    /// other two (counted per provider and feature from the simulator's start): a feature
    /// whose verdict flips between samples, deterministically (`latmesh compat`'s 3 samples
    /// of a check see it pass 1 of 3: *unstable*), like a model that follows JSON mode only
    /// sometimes.
    OneInThree,
}

impl Feature {
    /// Whether the `n`-th request (0-based, per provider and feature) asking for the feature
    /// gets it applied (`Rejected`: never reached, the request is refused first).
    pub fn applied(self, n: u64) -> bool {
        match self {
            Feature::Supported => true,
            Feature::Ignored | Feature::Rejected => false,
            Feature::OneInThree => n.is_multiple_of(3),
        }
    }
}

/// How a provider treats the reasoning of earlier turns sent back with assistant messages:
/// Chat `reasoning_content`, an Anthropic `thinking` block (with its signature), a Responses
/// `reasoning` item before the assistant message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningPassback {
    /// Accepted when present, not needed when absent (most providers).
    #[default]
    Ignored,
    /// Every assistant message must carry its reasoning (models that keep thinking across
    /// turns): HTTP 400 saying which assistant message lacks it.
    Required,
    /// No assistant message may carry reasoning (DeepSeek's reasoner): HTTP 400.
    Rejected,
}

impl Default for ProviderProfile {
    /// A quiet provider: 100 ms TTFT, 10 ms ITL, one token per chunk, no jitter, no faults.
    fn default() -> Self {
        ProviderProfile {
            name: "custom".to_string(),
            description: String::new(),
            home_region: String::new(),
            models: vec![DEFAULT_MODEL_ID.to_string()],
            ttft_base_us: 100_000,
            prefill_us_per_input_token: 0,
            template_tokens: 0,
            tokens_per_word: 1.0,
            context_tokens: 0,
            ttft_jitter_sigma: 0.0,
            ttft_tail_prob: 0.0,
            ttft_tail_factor_min: 1.0,
            ttft_tail_factor_max: 1.0,
            itl_median_us: 10_000,
            itl_sigma: 0.0,
            tokens_per_chunk_min: 1,
            tokens_per_chunk_max: 1,
            output_tokens_min: 32,
            output_tokens_max: 480,
            reasoning_tokens_min: 0,
            reasoning_tokens_max: 0,
            throttle_prob: 0.0,
            retry_after_s_min: 1,
            retry_after_s_max: 1,
            truncate_prob: 0.0,
            stream_error_prob: 0.0,
            overload_prob: 0.0,
            stall_prob: 0.0,
            stall_us: 0,
            keepalive_interval_us: 0,
            early_role_chunk: false,
            reasoning_passback: ReasoningPassback::Ignored,
            rejects_stream_options: false,
            requires_max_completion_tokens: false,
            capacity: 0,
            hostile: crate::hostile::Hostile::default(),
            stop: Feature::Supported,
            json_mode: Feature::Supported,
            tool_calls: Feature::Supported,
            answer_model: None,
            system_fingerprint: None,
            api_key: None,
            wrong_key_status: 401,
            prompt_cache: false,
            quantized_wrong_share: 0.0,
            quantized_length_factor: 1.0,
            swap_after_requests: 0,
            swap_model: String::new(),
            swap_fingerprint: String::new(),
            ttft_drift_us_per_s: 0,
        }
    }
}

impl ProviderProfile {
    /// The TTFT base of a request that arrives `since_first` after the provider's first
    /// request, µs (before the time scale, the prefill and the jitter): `ttft_base_us +
    /// ttft_drift_us_per_s × seconds`.
    pub fn ttft_base_at_us(&self, since_first: std::time::Duration) -> u64 {
        self.ttft_base_us
            .saturating_add((self.ttft_drift_us_per_s as f64 * since_first.as_secs_f64()) as u64)
    }

    /// A jitter-free, fault-free profile with a fixed TTFT and ITL (for tests and benchmarks).
    pub fn fixed(name: &str, ttft_us: u64, itl_us: u64) -> Self {
        ProviderProfile {
            name: name.to_string(),
            description: format!("fixed: TTFT {ttft_us} µs, ITL {itl_us} µs"),
            ttft_base_us: ttft_us,
            itl_median_us: itl_us,
            ..ProviderProfile::default()
        }
    }

    /// Check that the numbers make sense.
    ///
    /// # Errors
    /// A message naming the first bad field.
    pub fn validate(&self) -> Result<(), String> {
        let n = &self.name;
        if n.is_empty()
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "profile name {n:?}: use letters, digits, '-', '_', '.'"
            ));
        }
        let probs = [
            ("ttft_tail_prob", self.ttft_tail_prob),
            ("throttle_prob", self.throttle_prob),
            ("truncate_prob", self.truncate_prob),
            ("stream_error_prob", self.stream_error_prob),
            ("overload_prob", self.overload_prob),
            ("stall_prob", self.stall_prob),
            ("quantized_wrong_share", self.quantized_wrong_share),
        ];
        for (field, p) in probs {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{n}.{field} = {p}: must be within 0..=1"));
            }
        }
        for (field, s) in [
            ("ttft_jitter_sigma", self.ttft_jitter_sigma),
            ("itl_sigma", self.itl_sigma),
        ] {
            if !(0.0..=4.0).contains(&s) {
                return Err(format!("{n}.{field} = {s}: must be within 0..=4"));
            }
        }
        if !(self.ttft_tail_factor_min >= 0.0
            && self.ttft_tail_factor_min <= self.ttft_tail_factor_max)
        {
            return Err(format!(
                "{n}.ttft_tail_factor_min must be >= 0 and <= ttft_tail_factor_max"
            ));
        }
        let ranges = [
            (
                "tokens_per_chunk",
                self.tokens_per_chunk_min,
                self.tokens_per_chunk_max,
            ),
            (
                "output_tokens",
                self.output_tokens_min,
                self.output_tokens_max,
            ),
            (
                "reasoning_tokens",
                self.reasoning_tokens_min,
                self.reasoning_tokens_max,
            ),
            (
                "retry_after_s",
                self.retry_after_s_min,
                self.retry_after_s_max,
            ),
        ];
        for (field, lo, hi) in ranges {
            if lo > hi {
                return Err(format!("{n}.{field}_min ({lo}) > {field}_max ({hi})"));
            }
        }
        if self.tokens_per_chunk_min == 0 {
            return Err(format!("{n}.tokens_per_chunk_min must be at least 1"));
        }
        if self.output_tokens_min == 0 {
            return Err(format!("{n}.output_tokens_min must be at least 1"));
        }
        self.hostile.validate(n)?;
        if !(0.05..=4.0).contains(&self.quantized_length_factor) {
            return Err(format!(
                "{n}.quantized_length_factor = {}: must be within 0.05..=4",
                self.quantized_length_factor
            ));
        }
        if self.swap_after_requests > 0 && self.swap_model.is_empty() {
            return Err(format!(
                "{n}.swap_model is empty: a profile with swap_after_requests = {} must name the model it swaps to",
                self.swap_after_requests
            ));
        }
        if !(100..=599).contains(&self.wrong_key_status) {
            return Err(format!(
                "{n}.wrong_key_status = {}: must be an HTTP status within 100..=599",
                self.wrong_key_status
            ));
        }
        if !(0.25..=4.0).contains(&self.tokens_per_word) {
            return Err(format!(
                "{n}.tokens_per_word = {}: must be within 0.25..=4",
                self.tokens_per_word
            ));
        }
        let max = tokio::sync::Semaphore::MAX_PERMITS;
        if !usize::try_from(self.capacity).is_ok_and(|c| c <= max) {
            return Err(format!(
                "{n}.capacity = {}: must be at most {max}",
                self.capacity
            ));
        }
        Ok(())
    }
}

/// The nine built-in providers. Their home regions are spread over `us-east`, `eu-west` and
/// `ap-southeast`; a streaming request with `max_tokens` 64 and a short prompt takes well
/// under 2 s on every one of them at the median.
///
/// | name | home | TTFT base | prefill/token | ITL | tokens/chunk | capacity | context | template | special |
/// | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
/// | fast-lane | us-east | 110 ms | 40 µs | 8 ms | 1 | unlimited | 131,072 | 7 | low jitter |
/// | steady | eu-west | 240 ms | 40 µs | 15 ms | 1 | 16 | 131,072 | 7 | very low jitter |
/// | budget | ap-southeast | 320 ms | 80 µs | 24 ms | 1 | 8 | 32,768 | 9 | high jitter, 5% TTFT ×3–5 |
/// | reasoner | ap-southeast | 200 ms | 50 µs | 12 ms | 1 | unlimited | 65,536 | 12 | 20–40 reasoning tokens first; needs them back in later turns |
/// | throttler | us-east | 180 ms | 40 µs | 14 ms | 1 | unlimited | 32,768 | 7 | 25% HTTP 429, Retry-After 1–3 s |
/// | flaky | eu-west | 160 ms | 40 µs | 12 ms | 1 | unlimited | 32,768 | 7 | 10% truncated, 5% 300 ms stall |
/// | keepalive | eu-west | 550 ms | 10 µs | 10 ms | 1 | unlimited | 65,536 | 7 | `: keep-alive` every 50 ms |
/// | bulk-chunk | us-east | 200 ms | 30 µs | 9 ms | 4–8 | unlimited | 131,072 | 7 | chunks ≠ tokens; 1.2 tokens per generated word |
/// | slow-prefill | ap-southeast | 150 ms | 600 µs | 12 ms | 1 | unlimited | 16,384 | 7 | TTFT grows with prompt |
///
/// Long contexts (generated prompts of 1k, 8k and 32k words, output cap 256, no queue):
/// every provider serves 1k and 8k; at 32k `slow-prefill` refuses (16,384-token context:
/// HTTP 400 `context_length_exceeded`), and so do `budget`, `throttler` and `flaky` once
/// the output cap passes about 760 tokens (32,768-token contexts). The rankings turn over with the
/// prompt: at 1k `fast-lane` has the lowest TTFT (≈ 150 ms) and `keepalive` nearly the
/// highest (≈ 560 ms); at 32k `keepalive` is the fastest (≈ 870 ms) and `fast-lane`
/// (≈ 1.39 s) is behind it, `budget` ≈ 2.9 s, `slow-prefill` would need 19 s. `bulk-chunk`
/// counts 1.2 tokens per generated word ("another tokenizer": its 8k tier bills ≈ 9,607
/// prompt tokens), every other one word per token; every provider adds its chat template's
/// tokens (7, `budget` 9, `reasoner` 12) to `usage.prompt_tokens`.
///
/// Compatibility and quality (features latency campaigns never exercise, so their latency is
/// as in the table): `fast-lane` sends a `system_fingerprint` and caches prompts; `budget`
/// is quantized (answers 30% of the quality prompts wrong, with 60% of the words);
/// `bulk-chunk` ignores JSON mode; `keepalive` rejects tools; `reasoner` needs its reasoning
/// sent back (above); the others are honest.
///
/// Capacities (see [Serving capacity](ProviderProfile#serving-capacity)): a closed-loop
/// sweep at 2, 4, 8 clients per region from the three regions at once (6, 12, 24 clients
/// per provider, the demo's) shows a knee for `budget` at the second step (12 > 8: latency
/// ≈ 1.5 × the unloaded one), for `steady` at the third (24 > 16: ≈ 1.5 ×), and none for
/// the others.
pub fn builtin_profiles() -> Vec<ProviderProfile> {
    let base = |name: &str, home: &str, description: &str| ProviderProfile {
        name: name.to_string(),
        home_region: home.to_string(),
        description: description.to_string(),
        ..ProviderProfile::default()
    };
    vec![
        ProviderProfile {
            ttft_base_us: 110_000,
            prefill_us_per_input_token: 40,
            template_tokens: 7,
            context_tokens: 131_072,
            ttft_jitter_sigma: 0.10,
            itl_median_us: 8_000,
            itl_sigma: 0.15,
            system_fingerprint: Some("fp_sim_fastlane".to_string()),
            prompt_cache: true,
            ..base(
                "fast-lane",
                "us-east",
                "low TTFT (~120 ms) on short prompts but 40 us prefill per token (~1.4 s at 32k), fast decode (~8 ms ITL); sends a system_fingerprint, caches long prompt prefixes; 128k context",
            )
        },
        ProviderProfile {
            ttft_base_us: 240_000,
            prefill_us_per_input_token: 40,
            template_tokens: 7,
            context_tokens: 131_072,
            ttft_jitter_sigma: 0.05,
            itl_median_us: 15_000,
            itl_sigma: 0.06,
            capacity: 16,
            ..base(
                "steady",
                "eu-west",
                "medium TTFT (~250 ms), very low jitter, ~15 ms ITL; serves 16 requests at once, more queue",
            )
        },
        ProviderProfile {
            ttft_base_us: 320_000,
            prefill_us_per_input_token: 80,
            template_tokens: 9,
            context_tokens: 32_768,
            ttft_jitter_sigma: 0.35,
            ttft_tail_prob: 0.05,
            ttft_tail_factor_min: 3.0,
            ttft_tail_factor_max: 5.0,
            itl_median_us: 24_000,
            itl_sigma: 0.35,
            capacity: 8,
            quantized_wrong_share: 0.3,
            quantized_length_factor: 0.6,
            ..base(
                "budget",
                "ap-southeast",
                "slow and jittery: TTFT ~330 ms with a 5% tail at 3-5x, ~24 ms ITL; serves 8 requests at once, more queue; a cheaper quantization: 30% of quality prompts wrong, shorter answers",
            )
        },
        ProviderProfile {
            ttft_base_us: 200_000,
            prefill_us_per_input_token: 50,
            template_tokens: 12,
            context_tokens: 65_536,
            ttft_jitter_sigma: 0.15,
            itl_median_us: 12_000,
            itl_sigma: 0.20,
            reasoning_tokens_min: 20,
            reasoning_tokens_max: 40,
            reasoning_passback: ReasoningPassback::Required,
            ..base(
                "reasoner",
                "ap-southeast",
                "streams 20-40 reasoning_content tokens before the visible content; multi-turn requests must send them back",
            )
        },
        ProviderProfile {
            ttft_base_us: 180_000,
            prefill_us_per_input_token: 40,
            template_tokens: 7,
            context_tokens: 32_768,
            ttft_jitter_sigma: 0.15,
            itl_median_us: 14_000,
            itl_sigma: 0.20,
            throttle_prob: 0.25,
            retry_after_s_min: 1,
            retry_after_s_max: 3,
            ..base(
                "throttler",
                "us-east",
                "answers ~25% of requests with HTTP 429 and Retry-After 1-3 s",
            )
        },
        ProviderProfile {
            ttft_base_us: 160_000,
            prefill_us_per_input_token: 40,
            template_tokens: 7,
            context_tokens: 32_768,
            ttft_jitter_sigma: 0.20,
            itl_median_us: 12_000,
            itl_sigma: 0.25,
            truncate_prob: 0.10,
            stall_prob: 0.05,
            stall_us: 300_000,
            ..base(
                "flaky",
                "eu-west",
                "~10% of streams stop mid-line (no finish_reason, no [DONE]); 5% stall 300 ms",
            )
        },
        ProviderProfile {
            ttft_base_us: 550_000,
            prefill_us_per_input_token: 10,
            template_tokens: 7,
            context_tokens: 65_536,
            ttft_jitter_sigma: 0.15,
            itl_median_us: 10_000,
            itl_sigma: 0.15,
            keepalive_interval_us: 50_000,
            tool_calls: Feature::Rejected,
            ..base(
                "keepalive",
                "eu-west",
                "sends ': keep-alive' comments every 50 ms during a ~550 ms TTFT; fast prefill (10 us per token: the fastest at 32k); rejects tools (HTTP 400); 64k context",
            )
        },
        ProviderProfile {
            ttft_base_us: 200_000,
            prefill_us_per_input_token: 30,
            template_tokens: 7,
            tokens_per_word: 1.2,
            context_tokens: 131_072,
            ttft_jitter_sigma: 0.12,
            itl_median_us: 9_000,
            itl_sigma: 0.20,
            tokens_per_chunk_min: 4,
            tokens_per_chunk_max: 8,
            json_mode: Feature::Ignored,
            ..base(
                "bulk-chunk",
                "us-east",
                "4-8 tokens per SSE chunk, so chunks != tokens; ignores JSON mode (answers prose); another tokenizer: 1.2 tokens per generated word",
            )
        },
        ProviderProfile {
            ttft_base_us: 150_000,
            prefill_us_per_input_token: 600,
            template_tokens: 7,
            context_tokens: 16_384,
            ttft_jitter_sigma: 0.10,
            itl_median_us: 12_000,
            itl_sigma: 0.15,
            early_role_chunk: true,
            ..base(
                "slow-prefill",
                "ap-southeast",
                "600 us prefill per prompt token: TTFT grows with prompt length; 16k context (refuses a 32k prompt)",
            )
        },
    ]
}

/// The API key of the built-in `locked` trap provider ([`trap_profiles`]): a request with
/// any other key (or none) is answered HTTP 401.
pub const LOCKED_API_KEY: &str = "sk-sim-locked-5f3a9c1e7b2d4068";

/// The seven built-in compatibility trap providers: each fails known compatibility or
/// quality checks, and is otherwise a quiet fast provider (100 ms TTFT, 20 µs prefill per
/// token, 8 ms ITL, one token per chunk, no jitter, no faults). What each must be found to
/// do:
///
/// | name | home | trap |
/// | --- | --- | --- |
/// | no-json | us-east | JSON mode rejected: HTTP 400 naming `response_format` / `text.format` |
/// | strict-gateway | eu-west | HTTP 400 naming `stream_options` (Chat) |
/// | thinker | ap-southeast | 20–40 reasoning tokens; multi-turn requests must send them back |
/// | renamer | us-east | answers with the model `deepseek-v4-flash-distill`, whatever was asked |
/// | quantized | eu-west | 40% of quality prompts wrong ([`crate::truth::wrong_prompt_ids`]), half the words |
/// | swapper | ap-southeast | from its 41st request on: model `deepseek-v4-flash-0915`, fingerprint `fp_sim_swap_b` (before: the model asked for, `fp_sim_swap_a`); a dated name, which [`model_matches`](latmesh_core::answered_model::model_matches) still accepts: only a comparison with a baseline's answered model and fingerprint shows the swap |
/// | locked | us-east | checks its key ([`LOCKED_API_KEY`]): any other is answered HTTP 401 |
pub fn trap_profiles() -> Vec<ProviderProfile> {
    let base = |name: &str, home: &str, description: &str| ProviderProfile {
        name: name.to_string(),
        home_region: home.to_string(),
        description: description.to_string(),
        ttft_base_us: 100_000,
        prefill_us_per_input_token: 20,
        itl_median_us: 8_000,
        ..ProviderProfile::default()
    };
    vec![
        ProviderProfile {
            json_mode: Feature::Rejected,
            ..base(
                "no-json",
                "us-east",
                "trap: rejects JSON mode (HTTP 400 naming response_format / text.format); quiet and fast otherwise",
            )
        },
        ProviderProfile {
            rejects_stream_options: true,
            ..base(
                "strict-gateway",
                "eu-west",
                "trap: a gateway answering HTTP 400 to stream_options (Chat); quiet and fast otherwise",
            )
        },
        ProviderProfile {
            reasoning_tokens_min: 20,
            reasoning_tokens_max: 40,
            reasoning_passback: ReasoningPassback::Required,
            ..base(
                "thinker",
                "ap-southeast",
                "trap: streams 20-40 reasoning tokens; multi-turn requests must send them back (HTTP 400 otherwise)",
            )
        },
        ProviderProfile {
            answer_model: Some("deepseek-v4-flash-distill".to_string()),
            ..base(
                "renamer",
                "us-east",
                "trap: answers with model deepseek-v4-flash-distill whatever model was asked for",
            )
        },
        ProviderProfile {
            quantized_wrong_share: 0.4,
            quantized_length_factor: 0.5,
            ..base(
                "quantized",
                "eu-west",
                "trap: a cheaper quantization: 40% of quality prompts answered wrong, with half the words",
            )
        },
        ProviderProfile {
            system_fingerprint: Some("fp_sim_swap_a".to_string()),
            swap_after_requests: 40,
            swap_model: "deepseek-v4-flash-0915".to_string(),
            swap_fingerprint: "fp_sim_swap_b".to_string(),
            ..base(
                "swapper",
                "ap-southeast",
                "trap: after 40 requests answers with model deepseek-v4-flash-0915 and fingerprint fp_sim_swap_b (was fp_sim_swap_a)",
            )
        },
        ProviderProfile {
            api_key: Some(LOCKED_API_KEY.to_string()),
            ..base(
                "locked",
                "us-east",
                "trap: checks its API key; any other key is answered HTTP 401 (honest otherwise)",
            )
        },
    ]
}

/// The lab providers' fixed answer length (`output_tokens_min` = `output_tokens_max`): any
/// output cap up to it is met exactly, with finish reason `length`.
pub const LAB_OUTPUT_TOKENS: u32 = 1024;

/// The three built-in lab providers: ground truth for long contexts, token counting and the
/// highest rate meeting an SLO ([`crate::slo_truth`]). Each is exact: no jitter, no tail, no
/// throttling, no faults, one token per chunk, answers of [`LAB_OUTPUT_TOKENS`] tokens (so
/// an output cap is always reached), honest on every compatibility check; home `us-east`.
///
/// | name | TTFT base | prefill/token | ITL | capacity | context | template | tokens/word |
/// | --- | --- | --- | --- | --- | --- | --- | --- |
/// | slo-lab | 100 ms | 0 | 10 ms | 3 | unlimited | 0 | 1 |
/// | long-ctx | 100 ms | 50 µs | 10 ms | unlimited | 131,072 | 0 | 1 |
/// | short-ctx | 100 ms | 50 µs | 10 ms | unlimited | 16,384 | 7 | 1.25 |
///
/// * `slo-lab`: a request of `n` output tokens holds a serving slot
///   `S = 100 ms + (n − 1) × 10 ms` (whatever its prompt): with 41 output tokens `S` = 500 ms
///   and, 3 at once, the highest constant rate without a queue is 3 / 0.5 s = **6 requests/s**
///   ([`crate::slo_truth::capacity_rps`]); above it the TTFT grows without bound.
/// * `long-ctx`: TTFT = 100 ms + 50 µs × prompt tokens: 150 ms at 1k words, 500 ms at 8k,
///   1.7 s at 32k ([`crate::slo_truth::ttft_us`]).
/// * `short-ctx`: "another tokenizer": `w` generated words bill `ceil(1.25 × w) + 7` prompt
///   tokens (1,257 at 1k, 10,007 at 8k); refuses 32k words (40,007 tokens > 16,384: HTTP 400
///   `context_length_exceeded`).
pub fn lab_profiles() -> Vec<ProviderProfile> {
    let base = |name: &str, description: &str| ProviderProfile {
        name: name.to_string(),
        home_region: "us-east".to_string(),
        description: description.to_string(),
        ttft_base_us: 100_000,
        itl_median_us: 10_000,
        output_tokens_min: LAB_OUTPUT_TOKENS,
        output_tokens_max: LAB_OUTPUT_TOKENS,
        ..ProviderProfile::default()
    };
    vec![
        ProviderProfile {
            capacity: 3,
            ..base(
                "slo-lab",
                "lab: exact, 100 ms TTFT whatever the prompt, 10 ms ITL, serves 3 at once: 41 output tokens hold a slot 500 ms, so 6 requests/s is the highest rate without a queue",
            )
        },
        ProviderProfile {
            prefill_us_per_input_token: 50,
            context_tokens: 131_072,
            ..base(
                "long-ctx",
                "lab: exact, TTFT 100 ms + 50 us per prompt token (1.7 s at 32k), 10 ms ITL, 128k context",
            )
        },
        ProviderProfile {
            prefill_us_per_input_token: 50,
            context_tokens: 16_384,
            template_tokens: 7,
            tokens_per_word: 1.25,
            ..base(
                "short-ctx",
                "lab: exact, like long-ctx with a 16k context (refuses 32k) and another tokenizer: 1.25 tokens per word + 7 template tokens",
            )
        },
    ]
}

/// Every built-in provider: the nine of [`builtin_profiles`], then the seven of
/// [`trap_profiles`], then the three of [`lab_profiles`] (what `latmesh-sim serve` and
/// [`crate::SimConfig::default`] serve).
pub fn all_builtin_profiles() -> Vec<ProviderProfile> {
    let mut all = builtin_profiles();
    all.extend(trap_profiles());
    all.extend(lab_profiles());
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::BUILTIN_REGIONS;

    #[test]
    fn builtins_are_valid_distinct_and_spread_over_regions() {
        let p = builtin_profiles();
        assert_eq!(p.len(), 9);
        for prof in &p {
            prof.validate().unwrap();
            assert!(
                BUILTIN_REGIONS.contains(&prof.home_region.as_str()),
                "{}",
                prof.name
            );
        }
        let mut names: Vec<_> = p.iter().map(|p| p.name.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 9);
        for r in BUILTIN_REGIONS {
            assert_eq!(p.iter().filter(|p| p.home_region == r).count(), 3, "{r}");
        }
    }

    #[test]
    fn trap_profiles_are_valid_quiet_and_each_sets_its_trap() {
        let traps = trap_profiles();
        let all = all_builtin_profiles();
        assert_eq!((traps.len(), all.len()), (7, 19));
        let mut names: Vec<_> = all.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 19);
        let honest = ProviderProfile::default();
        for t in &traps {
            t.validate().unwrap();
            assert!(BUILTIN_REGIONS.contains(&t.home_region.as_str()));
            assert!(t.description.starts_with("trap: "), "{}", t.name);
            assert!(noise(t).iter().all(|x| *x == 0.0), "{}", t.name);
            // Exactly one behaviour differs from an honest profile's.
            let differs = [
                t.json_mode != honest.json_mode,
                t.rejects_stream_options,
                t.reasoning_passback != honest.reasoning_passback,
                t.answer_model.is_some(),
                t.quantized_wrong_share > 0.0,
                t.swap_after_requests > 0,
                t.api_key.is_some(),
            ];
            assert_eq!(differs.iter().filter(|d| **d).count(), 1, "{}", t.name);
        }
        let get = |n: &str| all.iter().find(|p| p.name == n).unwrap().clone();
        assert_eq!(get("no-json").json_mode, Feature::Rejected);
        assert_eq!(get("quantized").quantized_wrong_share, 0.4);
        assert_eq!(get("swapper").swap_after_requests, 40);
        assert_eq!(get("locked").api_key.as_deref(), Some(LOCKED_API_KEY));
        // The demo's stories.
        assert!(get("fast-lane").prompt_cache && get("fast-lane").system_fingerprint.is_some());
        assert_eq!(get("budget").quantized_wrong_share, 0.3);
        assert_eq!(get("bulk-chunk").json_mode, Feature::Ignored);
        assert_eq!(get("keepalive").tool_calls, Feature::Rejected);
        for honest in ["steady", "throttler", "flaky", "slow-prefill"] {
            let p = get(honest);
            let plain = ProviderProfile {
                name: p.name.clone(),
                ..honest_features(&p)
            };
            assert_eq!(p, plain, "{honest}");
        }
    }

    /// Every source of randomness and every fault of `p` (all 0: an exact profile).
    fn noise(p: &ProviderProfile) -> [f64; 8] {
        [
            p.ttft_jitter_sigma,
            p.ttft_tail_prob,
            p.itl_sigma,
            p.throttle_prob,
            p.truncate_prob,
            p.stream_error_prob,
            p.overload_prob,
            p.stall_prob,
        ]
    }

    /// `p` with every compatibility and quality field at its default.
    fn honest_features(p: &ProviderProfile) -> ProviderProfile {
        let d = ProviderProfile::default();
        ProviderProfile {
            stop: d.stop,
            json_mode: d.json_mode,
            tool_calls: d.tool_calls,
            answer_model: d.answer_model,
            system_fingerprint: d.system_fingerprint,
            api_key: d.api_key,
            wrong_key_status: d.wrong_key_status,
            prompt_cache: d.prompt_cache,
            quantized_wrong_share: d.quantized_wrong_share,
            quantized_length_factor: d.quantized_length_factor,
            swap_after_requests: d.swap_after_requests,
            swap_model: d.swap_model,
            swap_fingerprint: d.swap_fingerprint,
            ..p.clone()
        }
    }

    #[test]
    fn lab_profiles_are_exact_and_listed_with_the_built_ins() {
        let lab = lab_profiles();
        let names: Vec<&str> = lab.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["slo-lab", "long-ctx", "short-ctx"]);
        let all = all_builtin_profiles();
        assert_eq!(&all[16..], &lab[..]);
        for p in &lab {
            p.validate().unwrap();
            assert!(p.description.starts_with("lab: "), "{}", p.name);
            assert!(noise(p).iter().all(|x| *x == 0.0), "{}", p.name);
            assert_eq!((p.tokens_per_chunk_min, p.tokens_per_chunk_max), (1, 1));
            assert_eq!(p.reasoning_tokens_max, 0);
            assert!(!p.prompt_cache);
            assert_eq!(
                (p.output_tokens_min, p.output_tokens_max),
                (LAB_OUTPUT_TOKENS, LAB_OUTPUT_TOKENS)
            );
            assert_eq!(honest_features(p), *p, "{}", p.name);
        }
        let get = |n: &str| lab.iter().find(|p| p.name == n).unwrap();
        assert_eq!(get("slo-lab").capacity, 3);
        assert_eq!(get("long-ctx").prefill_us_per_input_token, 50);
        assert_eq!(get("short-ctx").context_tokens, 16_384);
    }

    /// The demo's long-context story: every provider serves 1k and 8k generated words with
    /// a 256-token cap, `slow-prefill` refuses 32k, `bulk-chunk` counts differently, and
    /// the fastest provider at 1k is not the fastest at 32k.
    #[test]
    fn demo_profiles_serve_8k_refuse_32k_somewhere_and_rank_differently_by_tier() {
        use crate::context_limit::check;
        use crate::slo_truth::ttft_us;
        use crate::tokens::generated_prompt_tokens;
        use latmesh_core::api::Api;
        let demo = builtin_profiles();
        let fits = |p: &ProviderProfile, words: u32| {
            check(Api::Chat, p, generated_prompt_tokens(p, words), Some(256)).is_none()
        };
        for p in &demo {
            assert!(p.context_tokens > 0, "{}", p.name);
            assert!(fits(p, 1000) && fits(p, 8000), "{}", p.name);
        }
        let refuse_32k: Vec<&str> = demo
            .iter()
            .filter(|p| !fits(p, 32_000))
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(refuse_32k, ["slow-prefill"]);
        let wordy: Vec<&str> = demo
            .iter()
            .filter(|p| (p.tokens_per_word - 1.0).abs() > 0.1)
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(wordy, ["bulk-chunk"]);
        let fastest = |words: u32| {
            demo.iter()
                .filter(|p| fits(p, words))
                .min_by_key(|p| ttft_us(p, generated_prompt_tokens(p, words), 1.0))
                .map(|p| p.name.as_str())
                .unwrap()
        };
        assert_eq!((fastest(1000), fastest(32_000)), ("fast-lane", "keepalive"));
        let get = |n: &str| demo.iter().find(|p| p.name == n).unwrap();
        let t = |n: &str, w: u32| ttft_us(get(n), generated_prompt_tokens(get(n), w), 1.0);
        assert_eq!(t("fast-lane", 32_000), 110_000 + 40 * 32_007);
        assert_eq!(t("keepalive", 32_000), 550_000 + 10 * 32_007);
        assert_eq!(generated_prompt_tokens(get("bulk-chunk"), 8000), 9607);
    }

    #[test]
    fn validate_rejects_bad_values() {
        let mut p = ProviderProfile::fixed("x", 1, 1);
        p.throttle_prob = 1.5;
        assert!(p.validate().unwrap_err().contains("throttle_prob"));
        let mut p = ProviderProfile::fixed("a/b", 1, 1);
        assert!(p.validate().is_err());
        p.name = "ok".into();
        p.tokens_per_chunk_min = 3;
        p.tokens_per_chunk_max = 2;
        assert!(p.validate().unwrap_err().contains("tokens_per_chunk"));
        let err = |p: &ProviderProfile| p.validate().unwrap_err();
        let mut p = ProviderProfile::fixed("k", 1, 1);
        p.wrong_key_status = 99;
        assert!(err(&p).contains("k.wrong_key_status = 99"));
        p.wrong_key_status = 500;
        p.validate().unwrap();
        p.quantized_wrong_share = 1.5;
        assert!(err(&p).contains("quantized_wrong_share"));
        p.quantized_wrong_share = 0.4;
        p.quantized_length_factor = 0.0;
        assert!(err(&p).contains("quantized_length_factor"));
        p.quantized_length_factor = 0.5;
        p.swap_after_requests = 40;
        assert!(err(&p).contains("k.swap_model is empty"));
        p.swap_model = "m2".into();
        p.validate().unwrap();
        p.tokens_per_word = 0.1;
        assert!(err(&p).contains("k.tokens_per_word = 0.1"));
        p.tokens_per_word = 1.3;
        p.validate().unwrap();
    }

    #[test]
    fn profiles_load_from_partial_json() {
        let p: ProviderProfile =
            serde_json::from_str(r#"{"name":"mine","ttft_base_us":5000}"#).unwrap();
        assert_eq!(p.ttft_base_us, 5000);
        assert_eq!(p.itl_median_us, ProviderProfile::default().itl_median_us);
        assert!(serde_json::from_str::<ProviderProfile>(r#"{"nmae":"typo"}"#).is_err());
        assert_eq!(p.reasoning_passback, ReasoningPassback::Ignored);
        let p: ProviderProfile =
            serde_json::from_str(r#"{"name":"r","reasoning_passback":"rejected"}"#).unwrap();
        assert_eq!(p.reasoning_passback, ReasoningPassback::Rejected);
    }

    #[test]
    fn capacity_defaults_to_unlimited_and_round_trips() {
        // Absent: 0 = unlimited.
        let p: ProviderProfile = serde_json::from_str(r#"{"name":"mine"}"#).unwrap();
        assert_eq!(p.capacity, 0);
        p.validate().unwrap();
        // Given: kept through a JSON round trip (the format of `serve --profiles FILE`).
        let p: ProviderProfile = serde_json::from_str(r#"{"name":"q","capacity":3}"#).unwrap();
        assert_eq!(p.capacity, 3);
        p.validate().unwrap();
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["capacity"], 3);
        assert_eq!(serde_json::from_value::<ProviderProfile>(json).unwrap(), p);
        let file: Vec<ProviderProfile> =
            serde_json::from_str(r#"[{"name":"a","capacity":1},{"name":"b"}]"#).unwrap();
        assert_eq!((file[0].capacity, file[1].capacity), (1, 0));
        assert!(serde_json::from_str::<ProviderProfile>(r#"{"capacity":-1}"#).is_err());
        assert!(serde_json::from_str::<ProviderProfile>(r#"{"capacity":1.5}"#).is_err());
        // Built-ins: budget 8, steady 16, the others unlimited.
        for b in builtin_profiles() {
            let want = match b.name.as_str() {
                "budget" => 8,
                "steady" => 16,
                _ => 0,
            };
            assert_eq!(b.capacity, want, "{}", b.name);
        }
    }

    /// The drift's ground truth: the TTFT base grows linearly with the time since the
    /// provider's first request; without drift it stays.
    #[test]
    fn the_ttft_base_drifts_by_its_rate_per_second() {
        let mut p = ProviderProfile::fixed("d", 30_000, 1_000);
        let t = std::time::Duration::from_millis(2_500);
        assert_eq!(p.ttft_base_at_us(t), 30_000);
        p.ttft_drift_us_per_s = 40_000;
        assert_eq!(p.ttft_base_at_us(std::time::Duration::ZERO), 30_000);
        assert_eq!(p.ttft_base_at_us(t), 130_000);
    }
}
