//! The plan fields every record of a slot carries ([`Label`]), filled into each attempt's
//! record.

use latmesh_core::record::ProbeRecord;

use super::spec::SlotRef;

/// The plan fields every record of a slot carries.
pub(super) struct Label<'a> {
    pub(super) at: SlotRef,
    pub(super) provider: &'a str,
    pub(super) scenario: &'a str,
    pub(super) prompt_id: &'a str,
    pub(super) cache_nonce: bool,
}

impl Label<'_> {
    /// Sets the slot's plan fields and `turn`, `attempt`, `sched_lag_us` on `rec` (not yet
    /// final, no request latency).
    pub(super) fn fill(&self, rec: &mut ProbeRecord, turn: u32, attempt: u32, sched_lag_us: i64) {
        rec.load = self.at.load;
        rec.step = self.at.step;
        rec.concurrency = self.at.concurrency;
        rec.round = self.at.round;
        rec.slot = self.at.slot;
        rec.provider = self.provider.to_string();
        rec.scenario = self.scenario.to_string();
        rec.prompt_id = self.prompt_id.to_string();
        rec.turn = turn;
        rec.attempt = attempt;
        rec.cache_nonce = self.cache_nonce;
        rec.sched_lag_us = sched_lag_us;
        rec.final_attempt = false;
        rec.request_latency_us = None;
    }
}
