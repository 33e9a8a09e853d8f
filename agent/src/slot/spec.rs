//! What a slot is: [`SlotRef`] (which provider and scenario, when, under which load model),
//! what it reports besides its records ([`SlotDone`]), and where its records go
//! ([`RecordTx`]).

use std::time::Instant;

use latmesh_core::load::LoadKind;
use latmesh_core::plan::Slot;
use latmesh_core::record::ProbeRecord;
use tokio::sync::mpsc;

/// Where a slot's records go: each record with its ITL gaps.
pub type RecordTx = mpsc::Sender<(ProbeRecord, Vec<u64>)>;

/// One slot: a logical request of some load model.
#[derive(Clone, Copy, Debug)]
pub struct SlotRef {
    /// Round (0-based; 0 outside `rounds`).
    pub round: u32,
    /// `rounds`: index of the slot in the round's shared order; `sweep`: index of the request
    /// of its provider in its step; `rate`: index of the arrival in its provider's schedule,
    /// counted over the whole phase (every step).
    pub slot: u32,
    /// Which provider and scenario.
    pub s: Slot,
    /// When its first request is intended to leave.
    pub intended: Instant,
    /// Load model, and for sweeps the step (0-based) and its concurrency.
    pub load: LoadKind,
    /// `sweep` and `rate`: step index.
    pub step: u32,
    /// `sweep`: the step's concurrency.
    pub concurrency: u32,
    /// `rate`: the step's arrival rate for this provider, requests/s (the records'
    /// `target_rps`); 0 otherwise.
    pub target_rps: f64,
    /// `rate` and `rounds`: a first attempt still waiting for the provider's caps at this
    /// instant is not sent (outcome `dropped`).
    pub drop_at: Option<Instant>,
}

impl SlotRef {
    /// Slot `slot` of round `round`.
    pub fn rounds(round: u32, slot: u32, s: Slot, intended: Instant) -> SlotRef {
        SlotRef {
            round,
            slot,
            s,
            intended,
            load: LoadKind::Rounds,
            step: 0,
            concurrency: 0,
            target_rps: 0.0,
            drop_at: None,
        }
    }

    /// Which prompt of its scenario it sends: rounds rotate by round, other models by slot.
    pub(super) fn prompt_index(&self) -> u32 {
        match self.load {
            LoadKind::Rounds => self.round,
            _ => self.slot,
        }
    }
}

/// What a slot did besides its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotDone {
    /// Records sent (attempts of every turn).
    pub records: u32,
    /// Turns of its conversation that were not sent because an earlier turn failed.
    pub turns_not_sent: u32,
}
