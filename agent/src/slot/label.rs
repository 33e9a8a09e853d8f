//! The plan fields every record of a slot carries ([`Label`]), filled into each attempt's
//! record.

use latmesh_core::record::{Outcome, ProbeRecord};
use latmesh_core::slo::Slo;

use super::spec::SlotRef;

/// The plan fields every record of a slot carries.
pub(super) struct Label<'a> {
    pub(super) at: SlotRef,
    pub(super) provider: &'a str,
    pub(super) scenario: &'a str,
    pub(super) prompt_id: &'a str,
    pub(super) cache_nonce: bool,
    /// A warm-up request ([`latmesh_core::plan::ScenarioSpec::is_warmup`]).
    pub(super) warmup: bool,
    /// A generated prompt's input tokens (the tier); 0 for a prompt of the prompt set.
    pub(super) input_tokens: u32,
    /// The scenario's SLO: the final attempt says whether it met it.
    pub(super) slo: Option<&'a Slo>,
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
        rec.warmup = self.warmup;
        rec.input_tokens = self.input_tokens;
        rec.target_rps = self.at.target_rps;
        rec.slo_met = None;
    }

    /// Makes `rec` its logical request's final attempt: `final_attempt`, and with an SLO
    /// `slo_met` ([`Slo::met`]), except for an attempt `cancelled` or `dropped` (not the
    /// provider's doing: left out of goodput).
    pub(super) fn finish(&self, rec: &mut ProbeRecord) {
        rec.final_attempt = true;
        rec.slo_met = self
            .slo
            .filter(|_| !matches!(rec.outcome(), Outcome::Cancelled | Outcome::Dropped))
            .map(|slo| slo.met(rec));
    }
}
