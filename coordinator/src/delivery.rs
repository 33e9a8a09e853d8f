//! What became of an agent's batches besides being stored (README "Failure semantics"):
//! batches the coordinator refused as malformed, and what the agent quarantined instead of
//! sending; and the verdict `latmesh campaign verify` draws from them.
//!
//! A refused batch is never stored and never sent again (the agent keeps it in its
//! quarantine), so its seq counts as accounted for: the campaign does not wait for it until
//! its deadline. But the agent's delivery is not whole, so its summary says `complete: false`
//! and verify reports it as *not verified*, never as "0 lost".

use std::collections::BTreeMap;

use latmesh_proto::pb;
use serde::{Deserialize, Serialize};

/// Most refused seqs remembered per (campaign, agent), with their reasons; more are counted
/// only (a hostile agent cannot grow the coordinator's memory).
pub const MAX_TRACKED_REJECTIONS: usize = 4096;

/// Most refused batches a summary or an `agents` row lists (seq and reason); all are counted.
pub const MAX_LISTED_REJECTIONS: usize = 16;

/// One agent's refused and quarantined batches in one campaign (kept in memory and in the
/// state directory's `campaign.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rejections {
    /// Refused (or quarantined by the agent unsent) seqs, with why; at most
    /// [`MAX_TRACKED_REJECTIONS`].
    pub seqs: BTreeMap<u64, String>,
    /// Refused beyond those tracked.
    pub more: u64,
    /// Records the agent quarantined as too large for any batch (its done notice).
    pub records_quarantined: u64,
    /// Histograms the agent quarantined as too large for any batch (its done notice).
    pub histograms_quarantined: u64,
}

impl Rejections {
    /// Notes that batch `seq` was refused for `reason`; `false` when it was already.
    pub fn reject(&mut self, seq: u64, reason: &str) -> bool {
        if self.seqs.contains_key(&seq) {
            return false;
        }
        if self.seqs.len() < MAX_TRACKED_REJECTIONS {
            self.seqs.insert(seq, reason.to_string());
        } else {
            self.more = self.more.saturating_add(1);
        }
        true
    }

    /// Batches refused or quarantined.
    pub fn batches(&self) -> u64 {
        (self.seqs.len() as u64).saturating_add(self.more)
    }

    /// Whether batch `seq` was refused or quarantined (it will not arrive).
    pub fn accounts_for(&self, seq: u64) -> bool {
        self.seqs.contains_key(&seq)
    }

    /// Takes what the agent's done notice says it quarantined; seqs the coordinator did not
    /// store (`stored`) count as refused ("quarantined by the agent"). Returns whether
    /// anything changed.
    pub fn from_done(&mut self, done: &pb::CampaignDone, stored: impl Fn(u64) -> bool) -> bool {
        let before = self.clone();
        self.records_quarantined = done.records_quarantined;
        self.histograms_quarantined = done.histograms_quarantined;
        for &seq in &done.quarantined_seqs {
            if !stored(seq) {
                self.reject(seq, "quarantined by the agent without being delivered");
            }
        }
        *self != before
    }

    /// Nothing refused, nothing quarantined.
    pub fn is_clean(&self) -> bool {
        self.batches() == 0 && self.records_quarantined == 0 && self.histograms_quarantined == 0
    }

    /// What a summary says of them, with the agent's announced `last_seq`.
    pub fn summary(&self, last_seq: Option<u64>) -> Delivery {
        Delivery {
            last_seq,
            batches_rejected: self.batches(),
            rejected: self
                .seqs
                .iter()
                .take(MAX_LISTED_REJECTIONS)
                .map(|(&seq, reason)| RejectedBatch {
                    seq,
                    reason: reason.clone(),
                })
                .collect(),
            records_quarantined: self.records_quarantined,
            histograms_quarantined: self.histograms_quarantined,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_bounded_and_done_notices_add_the_agent_s_quarantine() {
        let mut r = Rejections::default();
        for seq in 0..(MAX_TRACKED_REJECTIONS as u64 + 10) {
            assert!(r.reject(seq, "bad"));
        }
        assert!(!r.reject(0, "bad"), "counted once");
        assert_eq!(r.batches(), MAX_TRACKED_REJECTIONS as u64 + 10);
        assert_eq!(r.seqs.len(), MAX_TRACKED_REJECTIONS);
        assert_eq!(r.summary(Some(1)).rejected.len(), MAX_LISTED_REJECTIONS);
        // A count read back from a persisted summary saturates, it never overflows.
        r.more = u64::MAX;
        assert!(r.reject(u64::MAX, "bad"));
        assert_eq!(r.batches(), u64::MAX);

        let mut r = Rejections::default();
        let done = pb::CampaignDone {
            quarantined_seqs: vec![4, 5],
            records_quarantined: 2,
            ..Default::default()
        };
        assert!(r.from_done(&done, |seq| seq == 5));
        assert_eq!(r.seqs.keys().copied().collect::<Vec<_>>(), [4]);
        assert!(!r.from_done(&done, |seq| seq == 5), "the same notice again");
        assert!(r.accounts_for(4) && !r.accounts_for(5) && !r.is_clean());
    }
}
