//! Provider selection weights: the campaign file's optional `[selection]` section, which the
//! coordinator's analysis turns into a ranked selection matrix per region.
//!
//! ```toml
//! [selection]
//! weights = { latency = 0.4, stability = 0.2, price = 0.2, quality = 0.1, compatibility = 0.05, compliance = 0.05 }
//! latency_metric = "ttft"        # optional (default ttft): any metric name
//! latency_percentile = 50        # optional (default 50): 0 < p < 100
//! score_scale = 10               # optional (default 10): user scores are 0..=score_scale (1: 0..1)
//!
//! max_failed_pct = 5             # optional (default 5): failure-rate gate, % of requests
//! slo_gate = true                # optional (default true): a missed SLO excludes
//! require_compat = ["tool_call"] # optional (default none): compat checks that must pass
//!
//! [selection.scores.fast-lane]   # one table per provider: user-supplied scores
//! quality = 8
//! compatibility = 10
//! compliance = 9
//! ```
//!
//! Components (every weight ≥ 0, absent = 0, at least one > 0; the analysis divides them by
//! their sum, so they need not add up to 1):
//!
//! * **latency**: `latency_metric` at `latency_percentile`, from the merged histogram of the
//!   region's cell (lower is better);
//! * **stability**: the cell's error % of attempts (every non-`ok` outcome: timeouts,
//!   throttling, 5xx, …) and its tail spread P99/P50 of `latency_metric` (lower is better);
//! * **price**: USD per request at the provider's prices (`price_input_usd_per_mtok`,
//!   `price_output_usd_per_mtok` of `[[providers]]`; lower is better) — every provider needs
//!   prices when `price` has a weight;
//! * **quality**, **compatibility**, **compliance**: the scores of `[selection.scores.NAME]`,
//!   between 0 and `score_scale` (higher is better) — every provider needs a score for each of
//!   these components that has a weight, except where it is measured:
//!   * **compatibility** is measured by `latmesh compat` when the file has a `[compat]` section
//!     ([`crate::compat::CompatSpec`]) that covers the provider (no `providers` key, or the
//!     provider listed in it): the provider's compatibility score ([`crate::compat::score`],
//!     0..=1) is used where it has no user score;
//!   * **quality** likewise with a `[quality]` section ([`crate::quality::QualitySpec`]): the
//!     provider's accuracy on the quality prompt set (0..=1);
//!   * **compliance** is never measured: it always needs user scores.
//!
//!   A user score always overrides the measured one. Without the section (or for a provider
//!   it leaves out) a missing user score is an error that names the alternative ("… or add a
//!   [compat] section so `latmesh compat` measures it").
//!
//! **Gates come before scores** ([`SelectionGates`]): per (scenario, region) a provider is
//! *excluded* (listed with its reason, not ranked) when
//! * its failed requests (final attempts not `ok`, after retries) are significantly above
//!   `max_failed_pct`: the 95 % Wilson interval's lower bound above it;
//! * the scenario has an SLO with a cell goodput and the provider's cell *missed* it (the
//!   met / missed / undecided rule of `latmesh check`), unless `slo_gate = false`;
//! * a check of `require_compat` did not pass for it (`fail`, `not_offered` or `unstable`).
//!
//! A provider whose gate cannot be decided yet (the failure interval contains the limit, the
//! goodput verdict is undecided or has too few requests, a required check was inconclusive
//! or not run) is *at risk*: ranked, but after every provider that passed each gate.
//!
//! How the analysis normalizes and combines them is documented in the coordinator's
//! `analysis::selection` module. Pure: no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::compat::CompatCheck;
use crate::metrics::Metric;

/// Default [`Selection::latency_percentile`].
pub const DEFAULT_LATENCY_PERCENTILE: f64 = 50.0;

/// Default [`Selection::score_scale`]: user scores from 0 to 10.
pub const DEFAULT_SCORE_SCALE: f64 = 10.0;

/// Default [`SelectionGates::max_failed_pct`]: 5 % of requests.
pub const DEFAULT_MAX_FAILED_PCT: f64 = 5.0;

/// The gates a provider passes before it is scored (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectionGates {
    /// Failed requests (final attempts not `ok`), % in `[0, 100)`: a provider whose Wilson
    /// interval's lower bound lies above this is excluded; one whose interval contains it is
    /// at risk.
    pub max_failed_pct: f64,
    /// Whether a missed SLO (cell goodput, scenarios with an SLO) excludes the provider.
    pub slo: bool,
    /// Compat checks every provider must pass, in [`CompatCheck::ALL`] order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require_compat: Vec<CompatCheck>,
}

impl Default for SelectionGates {
    fn default() -> Self {
        SelectionGates {
            max_failed_pct: DEFAULT_MAX_FAILED_PCT,
            slo: true,
            require_compat: Vec::new(),
        }
    }
}

/// The weight of each component of the selection score (each ≥ 0; not necessarily summing
/// to 1: the analysis divides each by their sum).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectionWeights {
    /// Latency (`latency_metric` at `latency_percentile`).
    pub latency: f64,
    /// Stability (error % and P99/P50 spread).
    pub stability: f64,
    /// Price (USD per request).
    pub price: f64,
    /// Quality score: user-supplied, else measured (`[quality]`).
    pub quality: f64,
    /// Compatibility score (API features, SDK behaviour, …): user-supplied, else measured
    /// (`[compat]`).
    pub compatibility: f64,
    /// User-supplied compliance score (data residency, contracts, …).
    pub compliance: f64,
}

impl SelectionWeights {
    /// Sum of the weights.
    pub fn sum(&self) -> f64 {
        self.latency
            + self.stability
            + self.price
            + self.quality
            + self.compatibility
            + self.compliance
    }

    /// `(name, weight)` of every component, in display order.
    pub fn named(&self) -> [(&'static str, f64); 6] {
        [
            ("latency", self.latency),
            ("stability", self.stability),
            ("price", self.price),
            ("quality", self.quality),
            ("compatibility", self.compatibility),
            ("compliance", self.compliance),
        ]
    }
}

/// One provider's user-supplied scores, each between 0 and [`Selection::score_scale`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderScores {
    /// Quality score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<f64>,
    /// Compatibility score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<f64>,
    /// Compliance score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compliance: Option<f64>,
}

/// The validated `[selection]` section (the plan's `selection`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// Component weights, as written.
    pub weights: SelectionWeights,
    /// The metric of the latency component (and of the stability component's spread).
    pub latency_metric: Metric,
    /// The percentile (0 < p < 100) of the latency component.
    pub latency_percentile: f64,
    /// User scores run from 0 to this (10 by default; 1 for scores in 0..1).
    pub score_scale: f64,
    /// Provider name → its user-supplied scores.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scores: BTreeMap<String, ProviderScores>,
    /// The gates before the scores.
    #[serde(default)]
    pub gates: SelectionGates,
}
