//! The timing plan of one response: decided up front from the profile, the request and the
//! request's RNG, then played out by [`crate::provider`]. Pure, so it is tested without a
//! network.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_distr::StandardNormal;

use crate::profile::ProviderProfile;
use crate::text::{self, TokenKind};

/// The RNG of one request, seeded from the simulator seed, the provider name and that
/// provider's request counter, so runs are reproducible in distribution.
pub fn request_rng(sim_seed: u64, provider: &str, request_index: u64) -> ChaCha8Rng {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&sim_seed.to_le_bytes());
    seed[8..16].copy_from_slice(&text::fnv1a64(provider.as_bytes()).to_le_bytes());
    seed[16..24].copy_from_slice(&request_index.to_le_bytes());
    seed[24..].copy_from_slice(b"latmesh!");
    ChaCha8Rng::from_seed(seed)
}

/// What the plan needs to know about the request.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput {
    /// Estimated prompt tokens.
    pub prompt_tokens: u32,
    /// Output cap from the request.
    pub max_tokens: Option<u32>,
    /// Fixes the natural answer length and the token text (see
    /// [`SimRequest::answer_key`](crate::request::SimRequest::answer_key)).
    pub answer_key: u64,
    /// What the request asked of a reasoning model.
    pub thinking: Thinking,
    /// A scripted answer ([`crate::script`]): its visible content tokens (in place of the
    /// natural length) and its finish reason when the cap does not cut it.
    pub scripted: Option<(u32, FinishReason)>,
    /// Prompt tokens read from the prompt cache: not prefilled again.
    pub cached_tokens: u32,
    /// The request's `ignore_eos`: a natural (unscripted) answer runs to the output cap,
    /// finish reason `length`; without a cap, to the profile's `output_tokens_max`, finish
    /// reason `length` too. A scripted answer keeps its script.
    pub ignore_eos: bool,
    /// The request's `min_tokens`: a natural answer is at least this long (then cut by the
    /// cap as usual). A scripted answer keeps its script.
    pub min_tokens: u32,
}

/// What a request asks of a model that reasons (a profile with `reasoning_tokens_max` > 0;
/// the others never reason, whatever is asked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Thinking {
    /// Nothing said: the profile reasons (as a reasoning model served with thinking on).
    #[default]
    Default,
    /// Thinking switched off (Anthropic `thinking.type = "disabled"`, Chat
    /// `thinking.type = "disabled"` or `chat_template_kwargs.enable_thinking = false` or
    /// `reasoning_effort = "none"`, Responses `reasoning.effort = "none"`): no reasoning tokens.
    Off,
    /// Thinking switched on; at most `budget_tokens` reasoning tokens when given (Anthropic
    /// `thinking.budget_tokens`).
    On {
        /// Most reasoning tokens.
        budget_tokens: Option<u32>,
    },
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The natural end of the answer.
    Stop,
    /// Cut by `max_tokens`.
    Length,
    /// Cut before a stop sequence of the request (OpenAI `stop`; Anthropic `stop_sequence`).
    StopSequence,
    /// The answer is a tool call (OpenAI `tool_calls`; Anthropic `tool_use`).
    ToolCalls,
}

impl FinishReason {
    /// The OpenAI Chat Completions spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::StopSequence => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// The natural length of the answer keyed `answer_key` on `profile`: visible content tokens
/// within `output_tokens_min..=output_tokens_max`.
pub fn natural_tokens(profile: &ProviderProfile, answer_key: u64) -> u32 {
    let span = u64::from(profile.output_tokens_max - profile.output_tokens_min) + 1;
    profile.output_tokens_min + (answer_key % span) as u32
}

/// One SSE chunk of tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPlan {
    /// When it is sent, in µs after the response headers.
    pub at_us: u64,
    /// Reasoning or visible content (a chunk never mixes the two).
    pub kind: TokenKind,
    /// Index of its first token within its kind.
    pub first: u32,
    /// Number of tokens in it.
    pub count: u32,
}

/// The plan of a response that is answered (not throttled).
#[derive(Debug, Clone)]
pub struct AnswerPlan {
    /// Planned delay from the response headers to the first token chunk, in µs (the
    /// `x-sim-planned-ttft-us` header).
    pub ttft_us: u64,
    /// Reasoning tokens generated.
    pub reasoning_tokens: u32,
    /// Visible content tokens generated.
    pub content_tokens: u32,
    /// Why generation ends.
    pub finish_reason: FinishReason,
    /// Token chunks in order; the first is at `ttft_us`.
    pub chunks: Vec<ChunkPlan>,
    /// For a truncated stream: index into `chunks` of the chunk that is cut mid-line
    /// (nothing after it is sent).
    pub truncate_at_chunk: Option<usize>,
    /// For a stream that fails mid-way: index into `chunks` of the chunk replaced by the
    /// API's in-band error event, sent at that chunk's time (nothing after it is sent).
    pub error_at_chunk: Option<usize>,
    /// Whether one decode gap was stretched by the profile's stall.
    pub stalled: bool,
    /// `: keep-alive` comment period while prefilling, in µs (0 = none; scaled like TTFT).
    pub keepalive_interval_us: u64,
}

impl AnswerPlan {
    /// When the last token chunk is sent, in µs after the headers.
    pub fn end_us(&self) -> u64 {
        self.chunks.last().map_or(self.ttft_us, |c| c.at_us)
    }

    /// When the second token chunk (reasoning or content) is sent, in µs after the headers:
    /// the planned time to second token (TTST, counted from the headers as `ttft_us` is);
    /// `None` with fewer than two chunks.
    pub fn ttst_us(&self) -> Option<u64> {
        self.chunks.get(1).map(|c| c.at_us)
    }

    /// Completion tokens as reported in `usage` (reasoning included, as OpenAI counts).
    pub fn completion_tokens(&self) -> u32 {
        self.reasoning_tokens + self.content_tokens
    }
}

/// What the provider does with a request.
#[derive(Debug, Clone)]
pub enum Decision {
    /// HTTP 429 with `Retry-After` in seconds.
    Throttle {
        /// Seconds the client is told to wait.
        retry_after_s: u32,
    },
    /// The provider is overloaded: HTTP 529 `overloaded_error` on the Anthropic API, 503 on
    /// the OpenAI ones, after the region delay.
    Overload,
    /// An answer.
    Answer(AnswerPlan),
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> f64 {
    if sigma <= 0.0 {
        return median;
    }
    let z: f64 = rng.sample(StandardNormal);
    median * (sigma * z).exp()
}

fn scaled_us(us: f64, time_scale: f64) -> u64 {
    (us * time_scale).max(0.0).round() as u64
}

/// Decide the response to one request. `time_scale` multiplies every server-side delay
/// (TTFT, ITL, stall, keep-alive period); `is_stream` enables the stream-only faults (truncation).
pub fn plan(
    profile: &ProviderProfile,
    input: &PlanInput,
    is_stream: bool,
    time_scale: f64,
    rng: &mut ChaCha8Rng,
) -> Decision {
    // Draw order is fixed so a seed always gives the same sequence of decisions.
    let throttle_draw: f64 = rng.random();
    if throttle_draw < profile.throttle_prob {
        let retry_after_s = rng.random_range(profile.retry_after_s_min..=profile.retry_after_s_max);
        return Decision::Throttle { retry_after_s };
    }
    // Drawn only when the fault is on, so profiles without it keep their sequences.
    if profile.overload_prob > 0.0 && rng.random::<f64>() < profile.overload_prob {
        return Decision::Overload;
    }

    let ttft_median = profile.ttft_base_us as f64
        + profile.prefill_us_per_input_token as f64
            * f64::from(input.prompt_tokens.saturating_sub(input.cached_tokens));
    let mut ttft = lognormal(rng, ttft_median, profile.ttft_jitter_sigma);
    let tail_draw: f64 = rng.random();
    if tail_draw < profile.ttft_tail_prob {
        ttft *= rng.random_range(profile.ttft_tail_factor_min..=profile.ttft_tail_factor_max);
    }
    let ttft_us = scaled_us(ttft, time_scale);

    // Natural length and reasoning budget.
    let (natural, natural_finish) = match input.scripted {
        Some(scripted) => scripted,
        // Runs to the cap (cut there: `length`), or without one to the longest answer.
        None if input.ignore_eos => (
            input
                .max_tokens
                .map_or(profile.output_tokens_max, |_| u32::MAX),
            FinishReason::Length,
        ),
        None => (
            natural_tokens(profile, input.answer_key).max(input.min_tokens),
            FinishReason::Stop,
        ),
    };
    let want_reasoning = if profile.reasoning_tokens_max > 0 && input.thinking != Thinking::Off {
        let drawn = rng.random_range(profile.reasoning_tokens_min..=profile.reasoning_tokens_max);
        match input.thinking {
            Thinking::On {
                budget_tokens: Some(b),
            } => drawn.min(b),
            _ => drawn,
        }
    } else {
        0
    };
    let cap = input.max_tokens.unwrap_or(u32::MAX);
    let reasoning_tokens = want_reasoning.min(cap);
    let content_tokens = natural.min(cap - reasoning_tokens);
    let finish_reason = if u64::from(reasoning_tokens + content_tokens)
        < u64::from(want_reasoning) + u64::from(natural)
    {
        FinishReason::Length
    } else {
        natural_finish
    };

    // Chunks: reasoning first, then content; each chunk after the first waits one ITL per
    // token it carries.
    let mut chunks = Vec::new();
    let mut at_us = ttft_us;
    for (kind, total) in [
        (TokenKind::Reasoning, reasoning_tokens),
        (TokenKind::Content, content_tokens),
    ] {
        let mut first = 0;
        while first < total {
            let want =
                rng.random_range(profile.tokens_per_chunk_min..=profile.tokens_per_chunk_max);
            let count = want.min(total - first);
            if !chunks.is_empty() {
                let gap: f64 = (0..count)
                    .map(|_| lognormal(rng, profile.itl_median_us as f64, profile.itl_sigma))
                    .sum();
                at_us += scaled_us(gap, time_scale);
            }
            chunks.push(ChunkPlan {
                at_us,
                kind,
                first,
                count,
            });
            first += count;
        }
    }

    let stalled = chunks.len() > 1 && rng.random::<f64>() < profile.stall_prob;
    if stalled {
        let from = rng.random_range(1..chunks.len());
        let stall = scaled_us(profile.stall_us as f64, time_scale);
        for c in &mut chunks[from..] {
            c.at_us += stall;
        }
    }

    let truncate_at_chunk = if is_stream && rng.random::<f64>() < profile.truncate_prob {
        Some(if chunks.len() > 1 {
            rng.random_range(1..chunks.len())
        } else {
            0
        })
    } else {
        None
    };

    // A truncated stream cannot also fail with an error event; drawn only when the fault is on.
    let error_at_chunk = (is_stream
        && truncate_at_chunk.is_none()
        && profile.stream_error_prob > 0.0
        && rng.random::<f64>() < profile.stream_error_prob)
        .then(|| {
            if chunks.len() > 1 {
                rng.random_range(1..chunks.len())
            } else {
                0
            }
        });

    Decision::Answer(AnswerPlan {
        ttft_us,
        reasoning_tokens,
        content_tokens,
        finish_reason,
        chunks,
        truncate_at_chunk,
        error_at_chunk,
        stalled,
        keepalive_interval_us: if profile.keepalive_interval_us > 0 {
            scaled_us(profile.keepalive_interval_us as f64, time_scale).max(1)
        } else {
            0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::builtin_profiles;

    fn profile(name: &str) -> ProviderProfile {
        builtin_profiles()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap()
    }

    fn input(prompt_tokens: u32, max_tokens: Option<u32>, key: u64) -> PlanInput {
        PlanInput {
            prompt_tokens,
            max_tokens,
            answer_key: key,
            thinking: Thinking::Default,
            scripted: None,
            cached_tokens: 0,
            ignore_eos: false,
            min_tokens: 0,
        }
    }

    fn answers(name: &str, n: u64, inp: PlanInput) -> Vec<AnswerPlan> {
        let p = profile(name);
        (0..n)
            .filter_map(
                |i| match plan(&p, &inp, true, 1.0, &mut request_rng(7, name, i)) {
                    Decision::Answer(a) => Some(a),
                    Decision::Throttle { .. } | Decision::Overload => None,
                },
            )
            .collect()
    }

    fn median(mut v: Vec<u64>) -> u64 {
        v.sort_unstable();
        v[v.len() / 2]
    }

    #[test]
    fn same_seed_same_plans_other_seed_differs() {
        let p = profile("budget");
        let inp = input(50, Some(64), 9);
        let run = |seed| {
            (0..20)
                .map(
                    |i| match plan(&p, &inp, true, 1.0, &mut request_rng(seed, "budget", i)) {
                        Decision::Answer(a) => a.ttft_us,
                        Decision::Throttle { .. } | Decision::Overload => 0,
                    },
                )
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn max_tokens_caps_and_sets_length() {
        for name in ["fast-lane", "bulk-chunk", "reasoner"] {
            for a in answers(name, 30, input(20, Some(16), 123)) {
                assert_eq!(a.completion_tokens(), 16, "{name}");
                assert_eq!(a.finish_reason, FinishReason::Length);
                let sum: u32 = a.chunks.iter().map(|c| c.count).sum();
                assert_eq!(sum, 16);
                assert_eq!(a.chunks[0].at_us, a.ttft_us);
                assert!(a.chunks.windows(2).all(|w| w[0].at_us <= w[1].at_us));
            }
        }
        // Without a cap the natural length ends with "stop".
        let a = &answers("steady", 1, input(20, None, 5))[0];
        assert_eq!(a.finish_reason, FinishReason::Stop);
        assert!((32..=480).contains(&a.content_tokens));
    }

    #[test]
    fn reasoner_reasons_first_and_bulk_chunks_group_tokens() {
        for a in answers("reasoner", 20, input(20, Some(200), 1)) {
            assert!((20..=40).contains(&a.reasoning_tokens));
            assert_eq!(a.chunks[0].kind, TokenKind::Reasoning);
            let first_content = a
                .chunks
                .iter()
                .position(|c| c.kind == TokenKind::Content)
                .unwrap();
            assert!(
                a.chunks[first_content..]
                    .iter()
                    .all(|c| c.kind == TokenKind::Content)
            );
        }
        for a in answers("bulk-chunk", 20, input(20, Some(64), 1)) {
            assert!(a.chunks.len() < 64 / 3, "{} chunks", a.chunks.len());
            assert!(
                a.chunks[..a.chunks.len() - 1]
                    .iter()
                    .all(|c| (4..=8).contains(&c.count))
            );
        }
    }

    #[test]
    fn fault_rates_are_about_right() {
        let p = profile("throttler");
        let n = 2000;
        let throttled = (0..n)
            .filter(|i| {
                matches!(
                    plan(
                        &p,
                        &input(10, Some(8), 1),
                        true,
                        1.0,
                        &mut request_rng(7, "throttler", *i)
                    ),
                    Decision::Throttle {
                        retry_after_s: 1..=3
                    }
                )
            })
            .count();
        assert!(
            (400..=600).contains(&throttled),
            "{throttled} of {n} throttled"
        );

        let truncated = answers("flaky", n, input(10, Some(32), 1))
            .iter()
            .filter(|a| a.truncate_at_chunk.is_some())
            .count();
        assert!(
            (120..=280).contains(&truncated),
            "{truncated} of {n} truncated"
        );

        let b = answers("budget", n, input(10, Some(8), 1));
        let med = median(b.iter().map(|a| a.ttft_us).collect());
        let tail = b.iter().filter(|a| a.ttft_us > med * 3).count();
        assert!(
            (40..=200).contains(&tail),
            "{tail} of {n} in the tail (median {med} µs)"
        );
    }

    #[test]
    fn slow_prefill_grows_with_prompt() {
        let short = median(
            answers("slow-prefill", 50, input(10, Some(4), 1))
                .iter()
                .map(|a| a.ttft_us)
                .collect(),
        );
        let long = median(
            answers("slow-prefill", 50, input(2000, Some(4), 1))
                .iter()
                .map(|a| a.ttft_us)
                .collect(),
        );
        assert!(long > short + 1_000_000, "short {short} µs, long {long} µs");
        let fast_short = median(
            answers("fast-lane", 50, input(10, Some(4), 1))
                .iter()
                .map(|a| a.ttft_us)
                .collect(),
        );
        let fast_long = median(
            answers("fast-lane", 50, input(2000, Some(4), 1))
                .iter()
                .map(|a| a.ttft_us)
                .collect(),
        );
        assert!(fast_long < fast_short + 100_000);
    }

    #[test]
    fn every_builtin_answers_64_tokens_within_about_two_seconds() {
        for p in builtin_profiles() {
            let ends: Vec<u64> = answers(&p.name, 200, input(60, Some(64), 77))
                .iter()
                .map(AnswerPlan::end_us)
                .collect();
            let med = median(ends);
            assert!(med < 2_000_000, "{}: median end {med} µs", p.name);
            let med_ttft = median(
                answers(&p.name, 200, input(60, Some(64), 77))
                    .iter()
                    .map(|a| a.ttft_us)
                    .collect(),
            );
            assert!(med_ttft > 50_000, "{}: TTFT {med_ttft} µs", p.name);
        }
    }

    #[test]
    fn ignore_eos_and_min_tokens_set_the_length() {
        let eos = |max_tokens, ignore_eos, min_tokens| {
            let inp = PlanInput {
                ignore_eos,
                min_tokens,
                ..input(20, max_tokens, 5)
            };
            answers("fast-lane", 1, inp).remove(0)
        };
        let natural = eos(Some(1000), false, 0);
        assert!((32..=480).contains(&natural.content_tokens));
        assert_eq!(natural.finish_reason, FinishReason::Stop);
        let to_cap = eos(Some(1000), true, 0);
        assert_eq!(
            (to_cap.content_tokens, to_cap.finish_reason),
            (1000, FinishReason::Length)
        );
        assert_eq!(to_cap.chunks.len(), 1000);
        // Without a cap: the profile's longest answer.
        let uncapped = eos(None, true, 0);
        assert_eq!(
            (uncapped.content_tokens, uncapped.finish_reason),
            (480, FinishReason::Length)
        );
        let min = eos(Some(1000), false, 700);
        assert_eq!(
            (min.content_tokens, min.finish_reason),
            (700, FinishReason::Stop)
        );
        let cut = eos(Some(600), false, 700);
        assert_eq!(
            (cut.content_tokens, cut.finish_reason),
            (600, FinishReason::Length)
        );
        // A reasoner's cap covers its reasoning too.
        let inp = PlanInput {
            ignore_eos: true,
            ..input(20, Some(100), 5)
        };
        let r = answers("reasoner", 1, inp).remove(0);
        assert_eq!(r.completion_tokens(), 100);
        assert_eq!(r.finish_reason, FinishReason::Length);
        // The planned second chunk: one ITL after the first on a one-token-per-chunk plan.
        let p = ProviderProfile::fixed("x", 1_000, 250);
        let Decision::Answer(a) = plan(
            &p,
            &input(20, Some(3), 1),
            true,
            1.0,
            &mut request_rng(1, "x", 0),
        ) else {
            panic!("answers")
        };
        assert_eq!((a.ttft_us, a.ttst_us()), (1_000, Some(1_250)));
        let Decision::Answer(one) = plan(
            &p,
            &input(20, Some(1), 1),
            true,
            1.0,
            &mut request_rng(1, "x", 0),
        ) else {
            panic!("answers")
        };
        assert_eq!(one.ttst_us(), None);
    }

    #[test]
    fn time_scale_shrinks_delays() {
        let p = profile("steady");
        let inp = input(10, Some(16), 1);
        let (Decision::Answer(a), Decision::Answer(b)) = (
            plan(&p, &inp, true, 1.0, &mut request_rng(1, "steady", 0)),
            plan(&p, &inp, true, 0.1, &mut request_rng(1, "steady", 0)),
        ) else {
            panic!("steady never throttles")
        };
        assert!(b.ttft_us * 9 < a.ttft_us && b.ttft_us * 11 > a.ttft_us);
        assert!(b.end_us() * 9 < a.end_us());
    }

    #[test]
    fn thinking_switch_and_budget_shape_the_reasoning() {
        let p = profile("reasoner");
        let with = |thinking| {
            let inp = PlanInput {
                thinking,
                ..input(20, Some(200), 1)
            };
            match plan(&p, &inp, true, 1.0, &mut request_rng(7, "reasoner", 0)) {
                Decision::Answer(a) => a,
                _ => panic!("the reasoner answers"),
            }
        };
        assert!((20..=40).contains(&with(Thinking::Default).reasoning_tokens));
        let on = Thinking::On {
            budget_tokens: None,
        };
        assert_eq!(
            with(on).reasoning_tokens,
            with(Thinking::Default).reasoning_tokens
        );
        let off = with(Thinking::Off);
        assert_eq!(off.reasoning_tokens, 0);
        assert!(off.chunks.iter().all(|c| c.kind == TokenKind::Content));
        let budget = Thinking::On {
            budget_tokens: Some(5),
        };
        assert_eq!(with(budget).reasoning_tokens, 5);
        // A model that does not reason never does, whatever is asked.
        let fast = profile("fast-lane");
        let inp = PlanInput {
            thinking: on,
            ..input(20, Some(200), 1)
        };
        let Decision::Answer(a) = plan(&fast, &inp, true, 1.0, &mut request_rng(7, "f", 0)) else {
            panic!("fast-lane answers")
        };
        assert_eq!(a.reasoning_tokens, 0);
    }

    #[test]
    fn overload_and_stream_error_faults() {
        let mut p = ProviderProfile::fixed("x", 1_000, 1_000);
        p.overload_prob = 0.5;
        p.stream_error_prob = 0.5;
        let n = 1000;
        let mut overloaded = 0;
        let mut errored = 0;
        for i in 0..n {
            match plan(
                &p,
                &input(10, Some(32), 1),
                true,
                1.0,
                &mut request_rng(7, "x", i),
            ) {
                Decision::Overload => overloaded += 1,
                Decision::Answer(a) => {
                    if let Some(at) = a.error_at_chunk {
                        errored += 1;
                        assert!(at < a.chunks.len());
                        assert_eq!(a.truncate_at_chunk, None);
                    }
                }
                Decision::Throttle { .. } => panic!("no throttling"),
            }
        }
        assert!((400..=600).contains(&overloaded), "{overloaded} of {n}");
        assert!((150..=350).contains(&errored), "{errored} of {n}");
        // Stream errors need a stream.
        let Decision::Answer(a) = (0..50)
            .map(|i| {
                plan(
                    &p,
                    &input(10, Some(32), 1),
                    false,
                    1.0,
                    &mut request_rng(7, "x", i),
                )
            })
            .find(|d| matches!(d, Decision::Answer(_)))
            .unwrap()
        else {
            unreachable!()
        };
        assert_eq!(a.error_at_chunk, None);
        // Off: never.
        let a = answers("steady", 200, input(10, Some(32), 1));
        assert_eq!(a.len(), 200);
        assert!(a.iter().all(|a| a.error_at_chunk.is_none()));
    }
}
