//! The delivery part of an agent's summary: what of its results did not arrive and why
//! (batches refused or quarantined, records and histograms too large to send, its done
//! notice; README "Failure semantics"). The coordinator keeps the bookkeeping behind it.

use serde::{Deserialize, Serialize};

/// Most refused batches a summary or an `agents` row lists (seq and reason); all are counted.
pub const MAX_LISTED_REJECTIONS: usize = 16;

/// An agent's delivery in a campaign summary (and its `agents` row): what did not arrive and
/// why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    /// Seq of the agent's last batch, from its done notice; `None`: no done notice arrived
    /// (its last batches may still be in its spool).
    pub last_seq: Option<u64>,
    /// Batches refused as malformed or quarantined by the agent unsent (none is stored).
    pub batches_rejected: u64,
    /// The first [`MAX_LISTED_REJECTIONS`] of them.
    pub rejected: Vec<RejectedBatch>,
    /// Records the agent quarantined as too large for any batch.
    pub records_quarantined: u64,
    /// Histograms the agent quarantined as too large for any batch.
    pub histograms_quarantined: u64,
}

/// One refused batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedBatch {
    /// Its seq.
    pub seq: u64,
    /// Why (at most [`latmesh_core::wire::MAX_REJECT_REASON_BYTES`]).
    pub reason: String,
}
