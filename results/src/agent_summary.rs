//! One agent's part in a campaign summary: its region, clock offset, what it delivered.

use serde::{Deserialize, Serialize};

/// One agent's part in the campaign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentSummary {
    /// Agent id.
    pub agent_id: String,
    /// Region.
    pub region: String,
    /// Coordinator clock minus agent clock, µs.
    pub clock_offset_us: i64,
    /// ± µs.
    pub clock_uncertainty_us: u64,
    /// Records received from it.
    pub records: u64,
    /// Batches received (after de-duplication).
    pub batches: u64,
    /// Whether every batch the agent announced arrived and no probe was skipped.
    pub complete: bool,
    /// Probes the agent skipped because their time had passed (e.g. it restarted).
    pub skipped: u64,
    /// What did not arrive and why: batches refused or quarantined, records too large to
    /// send, its done notice (README "Failure semantics"); default in older summaries.
    #[serde(default)]
    pub delivery: crate::delivery::Delivery,
}
