//! [`StoreEvent`]: what the coordinator's state hands its store (the ClickHouse sink) besides
//! result batches: a campaign launched, a campaign's agents finished. Queued (and persisted)
//! by [`crate::events::EventQueue`].

use latmesh_core::plan::Plan;

use latmesh_results::summary::AgentSummary;

/// What a store (the ClickHouse sink) must write besides result batches.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum StoreEvent {
    /// A campaign was launched.
    Launched {
        /// Campaign id.
        campaign_id: String,
        /// Its plan.
        plan: Box<Plan>,
        /// Launch time, coordinator clock, UTC µs.
        launched_at_unix_us: i64,
        /// Round 0 start, coordinator clock, UTC µs.
        start_at_unix_us: i64,
    },
    /// A campaign finished: each agent's part, with its version.
    Finished {
        /// Campaign id.
        campaign_id: String,
        /// (agent summary, agent version).
        agents: Vec<(AgentSummary, String)>,
    },
}
