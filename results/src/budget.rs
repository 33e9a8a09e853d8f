//! The budget part of a campaign summary: the caps a campaign was launched with
//! (`--max-cost`, `--max-tokens`), what its records used, and whether the coordinator's budget
//! guard stopped it (the guard itself runs in the coordinator, README "Budget guard").

use latmesh_core::plan::Plan;
use serde::{Deserialize, Serialize};

/// Caps of one campaign (absent ones are not enforced).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Caps {
    /// Stop once the measured cost passes this, USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Stop once measured prompt + completion tokens pass this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl Caps {
    /// The caps of a launch request (0 or less: none).
    pub fn from_request(max_cost_usd: f64, max_tokens: u64) -> Caps {
        Caps {
            max_cost_usd: (max_cost_usd.is_finite() && max_cost_usd > 0.0).then_some(max_cost_usd),
            max_tokens: (max_tokens > 0).then_some(max_tokens),
        }
    }

    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        self.max_cost_usd.is_none() && self.max_tokens.is_none()
    }

    /// Checks the caps against `plan`: `--max-cost` needs a price for every provider.
    ///
    /// # Errors
    /// A message naming the providers without a price.
    pub fn check(&self, plan: &Plan) -> Result<(), String> {
        if self.max_cost_usd.is_some() {
            let unpriced: Vec<&str> = plan
                .providers
                .iter()
                .filter(|p| p.price.is_none())
                .map(|p| p.name.as_str())
                .collect();
            if !unpriced.is_empty() {
                return Err(format!(
                    "--max-cost needs prices for every provider, and {} has none (set price_input_usd_per_mtok and price_output_usd_per_mtok, or cap tokens with --max-tokens)",
                    unpriced.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// What a campaign's records used so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// Prompt tokens (from `usage`, else estimated).
    pub prompt_tokens: u64,
    /// Completion tokens, reasoning included (from `usage`, else counted from the stream).
    pub completion_tokens: u64,
    /// Cost of the priced providers' tokens, USD.
    pub cost_usd: f64,
    /// Attempts without `usage` whose tokens were estimated (see the module docs).
    #[serde(default)]
    pub estimated_attempts: u64,
    /// Providers that used tokens but have no price (their tokens are not in `cost_usd`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced: Vec<String>,
}

impl Spent {
    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// The budget fields of a campaign summary (flattened into its JSON: `stopped_by`,
/// `stop_reason`, `caps`, `spent`; each absent when not known).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetSummary {
    /// `"budget"` when the budget guard stopped the campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// Why (`budget: measured cost $0.0123 passed --max-cost $0.01`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The caps it was launched with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<Caps>,
    /// What its records used (`None` for summaries read back from ClickHouse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
}

impl BudgetSummary {
    /// Whether the budget guard stopped the campaign.
    pub fn stopped(&self) -> bool {
        self.stopped_by.is_some()
    }
}
