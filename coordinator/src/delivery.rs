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

use crate::clickhouse::AgentRow;
pub use latmesh_results::delivery::{Delivery, MAX_LISTED_REJECTIONS, RejectedBatch};

/// Most refused seqs remembered per (campaign, agent), with their reasons; more are counted
/// only (a hostile agent cannot grow the coordinator's memory).
pub const MAX_TRACKED_REJECTIONS: usize = 4096;

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

/// What an `agents` row says of an agent's delivery (schema 7).
pub fn of_row(row: &AgentRow) -> Delivery {
    Delivery {
        last_seq: (row.campaign_done != 0).then_some(row.last_seq),
        batches_rejected: row.batches_rejected,
        rejected: row
            .rejected_seqs
            .iter()
            .zip(&row.rejected_reasons)
            .map(|(&seq, reason)| RejectedBatch {
                seq,
                reason: reason.clone(),
            })
            .collect(),
        records_quarantined: row.records_quarantined,
        histograms_quarantined: row.histograms_quarantined,
    }
}

/// Why `campaign verify` cannot vouch for the agent of `row` (empty: nothing against it),
/// given the distinct batch seqs of it stored in ClickHouse (`stored_batches`). An agent is
/// not verified when a batch of it was refused or quarantined, when records or histograms
/// were quarantined, when its done notice never arrived, or when fewer batches are stored
/// than it announced (some still pending in its spool or the coordinator's).
pub fn not_verified(row: &AgentRow, stored_batches: u64) -> Vec<String> {
    let mut why = Vec::new();
    if row.batches_rejected > 0 {
        let listed: Vec<String> = row
            .rejected_seqs
            .iter()
            .zip(&row.rejected_reasons)
            .map(|(seq, reason)| format!("seq {seq} ({reason})"))
            .collect();
        let more = (row.batches_rejected as usize).saturating_sub(listed.len());
        why.push(format!(
            "{} batch(es) refused by the coordinator or quarantined by the agent, not stored: {}{}",
            row.batches_rejected,
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if row.records_quarantined > 0 || row.histograms_quarantined > 0 {
        why.push(format!(
            "{} record(s) and {} histogram(s) quarantined by the agent as too large to send",
            row.records_quarantined, row.histograms_quarantined
        ));
    }
    if row.campaign_done == 0 {
        why.push(
            "no done notice from the agent: its last batches may still be pending in its spool"
                .into(),
        );
    } else {
        let accounted = stored_batches.saturating_add(row.batches_rejected);
        if row.last_seq > accounted {
            why.push(format!(
                "{} of its {} batches not stored: still pending (agent or coordinator spool) or lost",
                row.last_seq - accounted,
                row.last_seq
            ));
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> AgentRow {
        AgentRow {
            campaign_id: "c".into(),
            agent_id: "a1".into(),
            region: "r".into(),
            version: "v".into(),
            clock_offset_us: 0,
            clock_uncertainty_us: 0,
            seen_at: 0,
            seen_at_us: 0,
            records: 10,
            batches: 3,
            skipped: 0,
            complete: true,
            campaign_done: 1,
            last_seq: 3,
            batches_rejected: 0,
            rejected_seqs: Vec::new(),
            rejected_reasons: Vec::new(),
            records_quarantined: 0,
            histograms_quarantined: 0,
        }
    }

    #[test]
    fn an_agent_is_verified_only_when_every_announced_batch_is_stored() {
        assert!(not_verified(&row(), 3).is_empty());
        let why = not_verified(&row(), 2);
        assert_eq!(why.len(), 1);
        assert!(
            why[0].starts_with("1 of its 3 batches not stored"),
            "{why:?}"
        );
        let no_done = AgentRow {
            campaign_done: 0,
            last_seq: 0,
            ..row()
        };
        assert!(not_verified(&no_done, 3)[0].starts_with("no done notice"));
    }

    #[test]
    fn refused_and_quarantined_batches_are_named() {
        let r = AgentRow {
            batches_rejected: 3,
            rejected_seqs: vec![1, 2],
            rejected_reasons: vec!["http_status 799 is not an HTTP status".into(), "x".into()],
            records_quarantined: 1,
            ..row()
        };
        // Seqs 1-3 accounted for with one stored and 3 refused (one of them not listed).
        let why = not_verified(&r, 1);
        assert_eq!(why.len(), 2, "{why:?}");
        assert_eq!(
            why[0],
            "3 batch(es) refused by the coordinator or quarantined by the agent, not stored: seq 1 (http_status 799 is not an HTTP status), seq 2 (x) and 1 more"
        );
        assert!(why[1].starts_with("1 record(s) and 0 histogram(s) quarantined"));
    }

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
