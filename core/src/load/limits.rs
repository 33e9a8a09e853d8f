//! What bounds the load a campaign puts on a provider: its politeness caps (enforced by each
//! agent, for every load model) and its prices (for the budget guard).

use serde::{Deserialize, Serialize};

/// Per-provider politeness caps, enforced by each agent (the plan holds the campaign-wide
/// values; each agent keeps `1 / agents` of the rate caps, see
/// [`ProviderLimits::per_agent`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderLimits {
    /// Most requests in flight to the provider from one agent (not split: concurrency is
    /// local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Requests per minute over all agents sharing the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_min: Option<f64>,
    /// Tokens (prompt estimate + `max_tokens`) per minute over all agents sharing the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_min: Option<f64>,
    /// Minimum time between two requests to the provider from one agent (any load model), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gap_ms: Option<u64>,
}

impl ProviderLimits {
    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        *self == ProviderLimits::default()
    }

    /// One agent's share when `agents` agents share the key: rate caps divided by `agents`
    /// (at least 1); `max_in_flight` and `min_gap_ms` unchanged.
    pub fn per_agent(&self, agents: u32) -> ProviderLimits {
        let n = f64::from(agents.max(1));
        ProviderLimits {
            requests_per_min: self.requests_per_min.map(|r| r / n),
            tokens_per_min: self.tokens_per_min.map(|t| t / n),
            ..self.clone()
        }
    }
}

/// Prices of a provider, USD per million tokens (for the budget guard).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// USD per million prompt (input) tokens.
    pub input_usd_per_mtok: f64,
    /// USD per million completion (output) tokens, reasoning included.
    pub output_usd_per_mtok: f64,
}

impl Price {
    /// Cost in USD of `input` prompt and `output` completion tokens.
    pub fn cost_usd(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_usd_per_mtok + output as f64 * self.output_usd_per_mtok) / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_split_rates_not_concurrency() {
        let l = ProviderLimits {
            max_in_flight: Some(8),
            requests_per_min: Some(600.0),
            tokens_per_min: Some(90_000.0),
            min_gap_ms: Some(50),
        };
        let a = l.per_agent(3);
        assert_eq!(a.max_in_flight, Some(8));
        assert_eq!(a.requests_per_min, Some(200.0));
        assert_eq!(a.tokens_per_min, Some(30_000.0));
        assert!(ProviderLimits::default().is_empty() && !l.is_empty());
        assert!(
            (Price {
                input_usd_per_mtok: 0.27,
                output_usd_per_mtok: 1.1
            }
            .cost_usd(1_000_000, 500_000)
                - 0.82)
                .abs()
                < 1e-9
        );
    }
}
