//! Metric names and the derived rates of `docs/metrics.md` (metrics_version 9).

use serde::{Deserialize, Serialize};

/// Version of the metric definitions of `docs/metrics.md`; stored with every campaign. Bump it
/// when a definition changes.
pub const METRICS_VERSION: u32 = 9;

/// A latency metric kept as an HDR histogram, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Response headers received.
    Ttfb,
    /// First payload with a non-empty generated token of any kind.
    Ttft,
    /// First payload with non-empty visible content.
    Ttfc,
    /// End of the response.
    E2e,
    /// Time per output token after the first.
    Tpot,
    /// Every gap between consecutive token-bearing payloads.
    Itl,
    /// How late the attempt left: `t_send` − its intended send time (scheduler precision in
    /// every load model; for `rate`, the wait for the in-flight cap too).
    SchedLag,
    /// Open loop (`rate`): TTFT from the intended send time (`sched_lag` + `ttft`), free of
    /// coordinated omission.
    TtftIntended,
    /// Open loop (`rate`): E2E from the intended send time (`sched_lag` + `e2e`).
    E2eIntended,
    /// Failover scenarios: what the client waited, from its first attempt's send to the end
    /// of the answer that ended the request (`request_latency` of a final `ok` attempt with
    /// `failover`), kept under the provider that answered.
    FailoverLatency,
    /// Time to second token: the second payload with a generated token (docs/metrics.md
    /// "TTST").
    Ttst,
    /// End-to-end time per output token: `e2e / output_tokens` (docs/metrics.md
    /// "E2E per output token"), µs.
    E2ePerToken,
    /// Prefill throughput: prompt tokens ÷ TTFT, **tokens per second** (not µs: the one
    /// histogram whose unit is a rate; docs/metrics.md "Prefill throughput"), rounded, at
    /// least 1.
    PrefillTps,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 13] = [
        Metric::Ttfb,
        Metric::Ttft,
        Metric::Ttfc,
        Metric::E2e,
        Metric::Tpot,
        Metric::Itl,
        Metric::SchedLag,
        Metric::TtftIntended,
        Metric::E2eIntended,
        Metric::FailoverLatency,
        Metric::Ttst,
        Metric::E2ePerToken,
        Metric::PrefillTps,
    ];

    /// The lowercase name used on the wire and in ClickHouse.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ttfb => "ttfb",
            Metric::Ttft => "ttft",
            Metric::Ttfc => "ttfc",
            Metric::E2e => "e2e",
            Metric::Tpot => "tpot",
            Metric::Itl => "itl",
            Metric::SchedLag => "sched_lag",
            Metric::TtftIntended => "ttft_intended",
            Metric::E2eIntended => "e2e_intended",
            Metric::FailoverLatency => "failover_latency",
            Metric::Ttst => "ttst",
            Metric::E2ePerToken => "e2e_per_token",
            Metric::PrefillTps => "prefill_tps",
        }
    }

    /// Parses [`Metric::as_str`]'s names.
    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// TPOT in µs: (`e2e_us` − `ttft_us`) / (`output_tokens` − 1); `None` unless `output_tokens` > 1
/// and `e2e_us` ≥ `ttft_us`.
pub fn tpot_us(ttft_us: u64, e2e_us: u64, output_tokens: u32) -> Option<u64> {
    if output_tokens < 2 || e2e_us < ttft_us {
        return None;
    }
    Some((e2e_us - ttft_us) / u64::from(output_tokens - 1))
}

/// Decode throughput in tokens/s: (`output_tokens` − 1) / (`e2e` − `ttft`); `None` unless
/// `output_tokens` > 1 and `e2e_us` > `ttft_us`.
pub fn decode_tps(ttft_us: u64, e2e_us: u64, output_tokens: u32) -> Option<f64> {
    if output_tokens < 2 || e2e_us <= ttft_us {
        return None;
    }
    Some(f64::from(output_tokens - 1) * 1e6 / (e2e_us - ttft_us) as f64)
}

/// End-to-end time per output token in µs: `e2e_us / output_tokens` (the first token's wait
/// included, as GuideLLM's TPOT and LLMPerf's "end-to-end latency per output token" are);
/// `None` without output tokens.
pub fn e2e_per_token_us(e2e_us: u64, output_tokens: u32) -> Option<u64> {
    (output_tokens > 0).then(|| e2e_us / u64::from(output_tokens))
}

/// Prefill throughput in tokens/s: `prompt_tokens / ttft` (the provider's own prompt count,
/// `usage.prompt_tokens`, minus the tokens it served from its prompt cache, so a cache hit
/// does not look like fast prefill); `None` without prompt tokens or with a TTFT of 0.
pub fn prefill_tps(prompt_tokens: u32, cached_tokens: u32, ttft_us: u64) -> Option<f64> {
    let computed = prompt_tokens.saturating_sub(cached_tokens);
    (computed > 0 && ttft_us > 0).then(|| f64::from(computed) * 1e6 / ttft_us as f64)
}

/// Milliseconds with 3 significant digits at most one decimal (`0.512`, `12.3`, `134`).
pub fn fmt_ms(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_and_decode_rate_follow_the_definitions() {
        // 11 tokens, first at 100 ms, last at 600 ms: 10 gaps over 500 ms.
        assert_eq!(tpot_us(100_000, 600_000, 11), Some(50_000));
        assert_eq!(decode_tps(100_000, 600_000, 11), Some(20.0));
        assert_eq!(tpot_us(100_000, 600_000, 1), None);
        assert_eq!(decode_tps(100_000, 100_000, 5), None);
    }

    #[test]
    fn names_round_trip() {
        for m in Metric::ALL {
            assert_eq!(Metric::parse(m.as_str()), Some(m));
        }
    }
}
