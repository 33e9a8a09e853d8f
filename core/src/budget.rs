//! Budget guard, before a campaign: how many requests, tokens and dollars a plan may cost.
//!
//! [`estimate`] counts, per provider and in total, over every agent the plan goes to:
//!
//! * **requests**: first attempts of every turn (a slot of a 3-turn scenario is 3 requests).
//!   Retries are not counted: each request may add up to its scenario's `max_retries`
//!   attempts (the estimate says so when a scenario retries). Per load model:
//!   - `rounds`: `count` × (rounds scenarios) slots per provider, exactly ([`Bound::Exact`]);
//!   - `rate`: every planned arrival, exactly (the same schedule [`crate::load::RateSpec`]
//!     gives the agents; an arrival dropped for a full in-flight cap is not sent, so this
//!     may be more than what is sent), step by step for rate steps (`count_at` of each
//!     step's rate); under an SLO search every step at `max_rps`, an upper bound
//!     ([`Bound::AtMost`]: the search starts at `min_rps` and may end early);
//!   - `sweep` with `step_requests`: steps × `step_requests` per provider, an upper bound
//!     ([`Bound::AtMost`]: a step may end before it sent them all);
//!   - `sweep` without `step_requests`: **unbounded** ([`Bound::Unbounded`]): a closed loop
//!     sends as many requests as the provider answers, and a provider answering errors in
//!     5 ms lets a worker send hundreds per second. The figure given is what the steps send
//!     if every request takes [`assumed_request_ms`] (TTFT 200 ms, then `max_tokens` at
//!     500 tokens/s, a fast provider); faster answers mean more. Set `step_requests` (or
//!     launch with `--max-cost`/`--max-tokens`) for a bound.
//!
//!   Warm-up requests (`warmup`) are sent, so they are counted.
//! * **prompt tokens**: for generated prompts (`input_tokens`), the tier's tokens per request
//!   (the provider's count may differ a little: its chat template, its tokenizer); else an
//!   estimate at [`BYTES_PER_TOKEN`] bytes of UTF-8 per token over the
//!   messages sent (the prompt, the cache nonce, and for turn `k` the `k − 1` earlier answers
//!   counted at `max_tokens` each plus their follow-ups: history grows every turn). Real
//!   tokenizers differ (Chinese text is closer to one token per 3 bytes), so this is a rough
//!   figure, not a bound.
//! * **completion tokens**: `max_tokens` per request, an upper bound (reasoning included;
//!   `output_tokens` sets `max_tokens`, and with a provider's `exact_output` it is what is
//!   generated).
//! * **cost**: prompt tokens × the provider's input price + completion tokens × its output
//!   price (USD per million tokens, [`crate::load::Price`]); `None` ("no price") for a provider
//!   without prices, and then the total covers only the priced ones.
//!
//! Pure: no I/O.

use serde::{Deserialize, Serialize};

use crate::load::LoadModel;
use crate::plan::{Plan, PlanPrompt, ScenarioSpec};
use crate::prompts::Message;

/// Bytes of UTF-8 text per prompt token in every estimate (the agents' tokens-per-minute cap
/// uses the same rule).
pub const BYTES_PER_TOKEN: u64 = 4;

/// Bytes of the cache nonce put in front of the prompt (`[nonce XXXXXXXX] `).
pub const NONCE_BYTES: u64 = 17;

/// Assumed time to the first token of the fastest plausible request, ms (unbounded sweeps).
pub const ASSUMED_TTFT_MS: u64 = 200;

/// Assumed decode rate of the fastest plausible provider, tokens per second (unbounded
/// sweeps).
pub const ASSUMED_DECODE_TPS: u64 = 500;

/// How a request count is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Exactly what the plan sends (first attempts of every turn).
    Exact,
    /// At most this many (sweeps with `step_requests`).
    AtMost,
    /// No bound: an indicative figure (sweeps without `step_requests`, see the module docs).
    Unbounded,
}

/// Requests, tokens and cost of one provider, or of the whole campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Provider name (`TOTAL` for the total line).
    pub provider: String,
    /// Requests (first attempts of every turn), over every agent.
    pub requests: u64,
    /// How `requests` is known (the worst of its parts).
    pub bound: Bound,
    /// Prompt tokens, estimated at [`BYTES_PER_TOKEN`] bytes per token.
    pub prompt_tokens: u64,
    /// Completion tokens, at most (`max_tokens` per request).
    pub completion_tokens: u64,
    /// Cost, USD; `None` when the provider has no price (total: when none has).
    pub cost_usd: Option<f64>,
}

impl Line {
    fn zero(provider: &str) -> Line {
        Line {
            provider: provider.to_string(),
            requests: 0,
            bound: Bound::Exact,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: None,
        }
    }

    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// What a plan is expected to use, per provider and in total (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Agents the estimate is for (every agent runs the whole plan).
    pub agents: u32,
    /// One line per provider, in plan order.
    pub providers: Vec<Line>,
    /// The sum of the provider lines (`cost_usd`: of the priced ones).
    pub total: Line,
    /// Providers without prices (their cost is not in the total).
    pub unpriced: Vec<String>,
    /// Most retries a request may add (the largest `max_retries` of the plan); 0 without
    /// retry policies.
    pub max_retries: u32,
    /// Scenarios with an SLO search, counted with every step at `max_rps` (an upper bound).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<String>,
}

/// Prompt tokens of `messages`: their UTF-8 bytes (content and reasoning) at
/// [`BYTES_PER_TOKEN`] per token, rounded up.
pub fn message_tokens(messages: &[Message]) -> u64 {
    let bytes: u64 = messages
        .iter()
        .map(|m| (m.content.len() + m.reasoning_content.as_ref().map_or(0, String::len)) as u64)
        .sum();
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// Estimated prompt tokens of turn `turn` (1-based) of `prompt` in `scenario`: the prompt's
/// messages (and the cache nonce), plus for every earlier turn its answer at the scenario's
/// `max_tokens` and the follow-up that came after it.
pub fn prompt_tokens(scenario: &ScenarioSpec, prompt: &PlanPrompt, turn: u32) -> u64 {
    // Generated prompts: the tier's words, each a token (single-turn, no nonce).
    if let Some(synth) = &scenario.synth {
        return u64::from(synth.input_tokens);
    }
    let nonce = if scenario.policy.cache_nonce {
        NONCE_BYTES.div_ceil(BYTES_PER_TOKEN)
    } else {
        0
    };
    let history: u64 = (2..=turn.max(1))
        .map(|k| {
            let follow_up = prompt
                .follow_ups
                .get((k - 2) as usize)
                .map_or(0, |f| (f.len() as u64).div_ceil(BYTES_PER_TOKEN));
            u64::from(scenario.max_tokens) + follow_up
        })
        .sum();
    message_tokens(&prompt.messages) + nonce + history
}

/// Estimated prompt tokens of one slot of `prompt` (every turn of its conversation).
fn slot_prompt_tokens(scenario: &ScenarioSpec, prompt: &PlanPrompt) -> u64 {
    (1..=scenario.policy.turns.max(1))
        .map(|t| prompt_tokens(scenario, prompt, t))
        .sum()
}

/// How long the fastest plausible request of `scenario` takes, ms: [`ASSUMED_TTFT_MS`] plus
/// `max_tokens` at [`ASSUMED_DECODE_TPS`] (the figure for unbounded sweeps).
pub fn assumed_request_ms(scenario: &ScenarioSpec) -> u64 {
    ASSUMED_TTFT_MS + u64::from(scenario.max_tokens) * 1000 / ASSUMED_DECODE_TPS
}

/// Slots (logical requests) of scenario `s` for each provider on one agent, and how the count
/// is known. Slot `i` sends `prompts[i % len]` (rounds rotate by round, other models by slot).
fn slots(plan: &Plan, s: usize) -> (u64, Bound) {
    let scenario = &plan.scenarios[s];
    match &scenario.load {
        LoadModel::Rounds => (u64::from(plan.rounds.count), Bound::Exact),
        LoadModel::Rate(r) => (
            r.planned_arrivals(plan.seed, s),
            if r.search.is_some() {
                Bound::AtMost
            } else {
                Bound::Exact
            },
        ),
        LoadModel::Sweep(sw) => match sw.step_requests {
            Some(n) => (
                (sw.concurrency.len() as u64).saturating_mul(u64::from(n)),
                Bound::AtMost,
            ),
            None => {
                let slot_ms =
                    assumed_request_ms(scenario) * u64::from(scenario.policy.turns.max(1));
                let n: u64 = sw
                    .concurrency
                    .iter()
                    .map(|c| u64::from(*c).saturating_mul(sw.step_ms.div_ceil(slot_ms.max(1))))
                    .fold(0, u64::saturating_add);
                (n, Bound::Unbounded)
            }
        },
    }
}

/// Estimates the requests, tokens and cost of `plan` run by `agents` agents (each runs the
/// whole plan; 0 counts as 1). See the [module documentation](self) for what is exact, what
/// is a bound and what is a rough figure.
pub fn estimate(plan: &Plan, agents: u32) -> Estimate {
    let agents = agents.max(1);
    let mut lines: Vec<Line> = plan.providers.iter().map(|p| Line::zero(&p.name)).collect();
    for (p, line) in lines.iter_mut().enumerate() {
        for (s, scenario) in plan.scenarios.iter().enumerate() {
            let (n, bound) = slots(plan, s);
            if n == 0 || scenario.prompts.is_empty() {
                continue;
            }
            let turns = u64::from(scenario.policy.turns.max(1));
            // Slot i sends prompts[i % len]: each prompt `n / len` times, the first `n % len`
            // once more.
            let len = scenario.prompts.len() as u64;
            let prompt_tokens: u64 = scenario
                .prompts
                .iter()
                .enumerate()
                .map(|(i, prompt)| {
                    let times = n / len + u64::from((i as u64) < n % len);
                    times.saturating_mul(slot_prompt_tokens(scenario, prompt))
                })
                .fold(0, u64::saturating_add);
            // Saturating: an estimate past u64 is "more than anyone can pay", not a wrap.
            let requests = n.saturating_mul(turns).saturating_mul(u64::from(agents));
            line.requests = line.requests.saturating_add(requests);
            line.bound = line.bound.max(bound);
            line.prompt_tokens = line
                .prompt_tokens
                .saturating_add(prompt_tokens.saturating_mul(u64::from(agents)));
            line.completion_tokens = line
                .completion_tokens
                .saturating_add(requests.saturating_mul(u64::from(scenario.max_tokens)));
        }
        line.cost_usd = plan.providers[p]
            .price
            .as_ref()
            .map(|price| price.cost_usd(line.prompt_tokens, line.completion_tokens));
    }
    let mut total = Line::zero("TOTAL");
    for l in &lines {
        total.requests = total.requests.saturating_add(l.requests);
        total.bound = total.bound.max(l.bound);
        total.prompt_tokens = total.prompt_tokens.saturating_add(l.prompt_tokens);
        total.completion_tokens = total.completion_tokens.saturating_add(l.completion_tokens);
        if let Some(c) = l.cost_usd {
            *total.cost_usd.get_or_insert(0.0) += c;
        }
    }
    Estimate {
        agents,
        unpriced: plan
            .providers
            .iter()
            .filter(|p| p.price.is_none())
            .map(|p| p.name.clone())
            .collect(),
        providers: lines,
        total,
        max_retries: plan
            .scenarios
            .iter()
            .filter_map(|s| s.policy.retry.as_ref().map(|r| r.max_retries))
            .max()
            .unwrap_or(0),
        searches: plan
            .scenarios
            .iter()
            .filter(|s| matches!(&s.load, LoadModel::Rate(r) if r.search.is_some()))
            .map(|s| s.name.clone())
            .collect(),
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A cost in USD with enough digits to be read: `$12.35`, `$0.0123`.
pub fn usd(v: f64) -> String {
    if v >= 1.0 || v == 0.0 {
        format!("${v:.2}")
    } else {
        format!("${v:.4}")
    }
}

impl Line {
    fn requests_text(&self) -> String {
        match self.bound {
            Bound::Exact => thousands(self.requests),
            Bound::AtMost => format!("≤ {}", thousands(self.requests)),
            Bound::Unbounded => format!("unbounded (~{})", thousands(self.requests)),
        }
    }
}

impl Estimate {
    /// The estimate as a text table, one row per provider and a total, with what is exact,
    /// what is a bound and what is a rough figure spelled out below it.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let width = self
            .providers
            .iter()
            .map(|l| l.provider.chars().count())
            .max()
            .unwrap_or(0)
            .max(8);
        let _ = writeln!(
            out,
            "{:<width$}  {:>22}  {:>14}  {:>16}  {:>12}",
            "PROVIDER", "REQUESTS", "PROMPT TOK ~", "COMPLETION ≤", "COST USD"
        );
        for l in self.providers.iter().chain([&self.total]) {
            let cost = match l.cost_usd {
                Some(c) if l.provider == "TOTAL" && !self.unpriced.is_empty() => {
                    format!("≥ {}", usd(c))
                }
                Some(c) => usd(c),
                None => "no price".into(),
            };
            let _ = writeln!(
                out,
                "{:<width$}  {:>22}  {:>14}  {:>16}  {:>12}",
                l.provider,
                l.requests_text(),
                thousands(l.prompt_tokens),
                thousands(l.completion_tokens),
                cost
            );
        }
        let _ = writeln!(
            out,
            "requests: first attempts of every turn (warm-up included) over {} agent(s){}; prompt tokens: ~{BYTES_PER_TOKEN} bytes per token, history at max_tokens per earlier turn (generated prompts: their input_tokens); completion tokens: max_tokens per request (an upper bound)",
            self.agents,
            if self.max_retries > 0 {
                format!(
                    " (retries not counted: each request may add up to {} attempts)",
                    self.max_retries
                )
            } else {
                String::new()
            }
        );
        if self.total.bound == Bound::Unbounded {
            let _ = writeln!(
                out,
                "unbounded: a sweep without step_requests sends as many requests as its providers answer; the figure assumes each takes {ASSUMED_TTFT_MS} ms + max_tokens at {ASSUMED_DECODE_TPS} tokens/s (faster answers or quick errors mean more): set step_requests, or launch with --max-cost/--max-tokens"
            );
        }
        if !self.searches.is_empty() {
            let _ = writeln!(
                out,
                "at most: the SLO search of {} is counted with every step at max_rps (it starts at min_rps and may stop early)",
                self.searches.join(", ")
            );
        }
        if !self.unpriced.is_empty() {
            let _ = writeln!(
                out,
                "no price for {} (price_input_usd_per_mtok, price_output_usd_per_mtok): their cost is not in the total",
                self.unpriced.join(", ")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Arrivals, KneeRule, Price, RateSpec, SweepSpec};
    use crate::plan::RetryPolicy;
    use crate::plan::tests::plan;

    /// A plan of 2 providers and 1 rounds scenario (3 rounds, max_tokens 16) whose two
    /// prompts are 40 and 8 bytes.
    fn base() -> Plan {
        let mut p = plan(2, 1);
        p.scenarios[0].prompts[0].messages = vec![Message::new("user", "x".repeat(40))];
        p.scenarios[0].prompts[1].messages = vec![Message::new("user", "y".repeat(8))];
        p
    }

    #[test]
    fn rounds_are_exact_and_scale_with_agents() {
        let p = base();
        let e = estimate(&p, 1);
        // Rounds 0, 1, 2 send prompts a, b, a: 10 + 2 + 10 prompt tokens per provider.
        let l = &e.providers[0];
        assert_eq!(
            (l.requests, l.bound, l.prompt_tokens, l.completion_tokens),
            (3, Bound::Exact, 22, 48)
        );
        assert_eq!(e.total.requests, 6);
        assert_eq!(e.total.tokens(), 2 * (22 + 48));
        assert_eq!(e.total.cost_usd, None);
        assert_eq!(e.unpriced, ["p0", "p1"]);
        let e3 = estimate(&p, 3);
        assert_eq!(e3.total.requests, 18);
        assert_eq!(e3.total.prompt_tokens, 3 * e.total.prompt_tokens);
        // 0 agents counts as 1.
        assert_eq!(estimate(&p, 0).total, e.total);
        assert_eq!(e.max_retries, 0);
    }

    #[test]
    fn turns_grow_the_history_and_nonces_count() {
        let mut p = base();
        p.scenarios[0].policy.turns = 2;
        p.scenarios[0].policy.cache_nonce = true;
        for pr in &mut p.scenarios[0].prompts {
            pr.follow_ups = vec!["why?".into()]; // 4 bytes: 1 token
        }
        p.scenarios[0].policy.retry = Some(RetryPolicy::default());
        let s = &p.scenarios[0];
        // Turn 1: 10 + nonce 5; turn 2: 10 + 5 + answer 16 + follow-up 1.
        assert_eq!(prompt_tokens(s, &s.prompts[0], 1), 15);
        assert_eq!(prompt_tokens(s, &s.prompts[0], 2), 32);
        let e = estimate(&p, 1);
        let l = &e.providers[0];
        // 3 slots × 2 turns; prompt a twice (15 + 32), b once (2+5 = 7, then 7 + 17 = 24).
        assert_eq!(l.requests, 6);
        assert_eq!(l.prompt_tokens, 2 * 47 + 31);
        assert_eq!(l.completion_tokens, 6 * 16);
        assert_eq!(e.max_retries, 3);
        assert!(e.render().contains("up to 3 attempts"), "{}", e.render());
    }

    #[test]
    fn rate_arrivals_are_exact_and_prices_give_a_cost() {
        let mut p = base();
        p.scenarios[0].load = LoadModel::Rate(RateSpec {
            rps: 4.0,
            arrivals: Arrivals::Constant,
            duration_ms: 1_000,
            max_queue_ms: 1_000,
            steps_rps: vec![],
            search: None,
        });
        p.providers[0].price = Some(Price {
            input_usd_per_mtok: 1_000_000.0, // $1 per token: easy to check
            output_usd_per_mtok: 2_000_000.0,
        });
        let e = estimate(&p, 2);
        let l = &e.providers[0];
        // 4 arrivals per provider and agent: prompts a, b, a, b = 24 tokens per agent.
        assert_eq!(
            (l.requests, l.bound, l.prompt_tokens, l.completion_tokens),
            (8, Bound::Exact, 48, 128)
        );
        assert_eq!(l.cost_usd, Some(48.0 + 2.0 * 128.0));
        assert_eq!(e.providers[1].cost_usd, None);
        assert_eq!(e.total.cost_usd, Some(304.0));
        let text = e.render();
        assert!(text.contains("≥ $304.00"), "{text}");
        assert!(text.contains("no price for p1"), "{text}");
    }

    #[test]
    fn sweeps_are_bounded_only_with_step_requests() {
        let mut p = base();
        p.scenarios[0].load = LoadModel::Sweep(SweepSpec {
            concurrency: vec![2, 4],
            step_ms: 10_000,
            step_requests: Some(50),
            knee: KneeRule::default(),
        });
        let e = estimate(&p, 1);
        assert_eq!(
            (e.providers[0].requests, e.providers[0].bound),
            (100, Bound::AtMost)
        );
        assert!(e.render().contains("≤ 100"), "{}", e.render());
        if let LoadModel::Sweep(sw) = &mut p.scenarios[0].load {
            sw.step_requests = None;
        }
        // 200 ms + 16 tokens at 500/s = 232 ms per request: ceil(10 000 / 232) = 44 per worker.
        assert_eq!(assumed_request_ms(&p.scenarios[0]), 232);
        let e = estimate(&p, 1);
        assert_eq!(
            (e.providers[0].requests, e.total.bound),
            (6 * 44, Bound::Unbounded)
        );
        let text = e.render();
        assert!(text.contains("unbounded (~264)"), "{text}");
        assert!(text.contains("set step_requests"), "{text}");
    }

    #[test]
    fn mixed_plans_add_phases_and_keep_the_worst_bound() {
        let mut p = plan(1, 2);
        p.scenarios[1].load = LoadModel::Sweep(SweepSpec {
            concurrency: vec![1],
            step_ms: 1_000,
            step_requests: Some(5),
            knee: KneeRule::default(),
        });
        let e = estimate(&p, 1);
        // Empty prompts: 0 prompt tokens; 3 rounds + at most 5 sweep requests.
        assert_eq!(e.total.requests, 8);
        assert_eq!(e.total.bound, Bound::AtMost);
        assert_eq!(e.total.completion_tokens, 8 * 16);
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(usd(0.01234), "$0.0123");
        assert_eq!(usd(12.345), "$12.35");
    }

    #[test]
    fn rate_steps_add_up_and_a_search_counts_every_step_at_max_rps() {
        let mut p = base();
        let rate = |steps_rps: Vec<f64>, search: Option<crate::load::SloSearch>| {
            LoadModel::Rate(RateSpec {
                rps: 1.0,
                arrivals: Arrivals::Constant,
                duration_ms: 2_000,
                max_queue_ms: 1_000,
                steps_rps,
                search,
            })
        };
        // Constant arrivals over 2 s steps: 2, 4 and 8 per provider.
        p.scenarios[0].load = rate(vec![1.0, 2.0, 4.0], None);
        let e = estimate(&p, 1);
        assert_eq!(
            (e.providers[0].requests, e.providers[0].bound),
            (14, Bound::Exact)
        );
        assert!(e.searches.is_empty());
        p.scenarios[0].load = rate(
            vec![],
            Some(crate::load::SloSearch {
                min_rps: 1.0,
                max_rps: 5.0,
                steps: 3,
                min_requests: 2,
                resolution_pct: 10.0,
            }),
        );
        let e = estimate(&p, 1);
        // 3 steps × 10 arrivals at 5 rps.
        assert_eq!(
            (e.providers[0].requests, e.providers[0].bound),
            (30, Bound::AtMost)
        );
        assert_eq!(e.providers[0].completion_tokens, 30 * 16);
        assert_eq!(e.searches, ["s0"]);
        let text = e.render();
        assert!(text.contains("≤ 30"), "{text}");
        assert!(
            text.contains("at most: the SLO search of s0 is counted with every step at max_rps"),
            "{text}"
        );
    }

    #[test]
    fn generated_prompts_count_their_tier() {
        let mut p = base();
        p.scenarios[0].synth = Some(crate::synth::SynthSpec {
            group: "s0".into(),
            input_tokens: 8000,
            shared_prefix_tokens: 0,
            reuse_text: false,
        });
        p.scenarios[0].prompts.truncate(1);
        p.scenarios[0].prompts[0].messages.clear();
        p.scenarios[0].max_tokens = 128;
        p.scenarios[0].output_tokens = Some(128);
        p.scenarios[0].warmup = 1;
        let e = estimate(&p, 1);
        // 3 rounds (warm-up included) of 8000 prompt and 128 completion tokens.
        assert_eq!(
            (
                e.providers[0].requests,
                e.providers[0].prompt_tokens,
                e.providers[0].completion_tokens
            ),
            (3, 24_000, 384)
        );
        assert!(e.render().contains("warm-up included"));
    }
}
