//! Result batches bounded by their encoded size.
//!
//! What one flush interval collected (histograms and records) becomes one or more batches,
//! each at most a byte budget when encoded ([`latmesh_core::wire::MAX_BATCH_BYTES`], well
//! under the transport limit [`latmesh_core::wire::MAX_MESSAGE_BYTES`]), with consecutive
//! seqs: no provider answer, however large, can make a message the coordinator must refuse.
//! An item (one record or one histogram) that alone passes the budget goes in no batch: it is
//! returned as oversized, for the outbox to quarantine.

use latmesh_proto::pb;
use prost::Message;

/// Batches built from one interval, and what fits in none.
#[derive(Debug, Default)]
pub struct Split {
    /// Batches with seqs `first_seq`, `first_seq + 1`, …, each within the budget; empty when
    /// there was nothing to send.
    pub batches: Vec<pb::ResultBatch>,
    /// Items larger than the budget on their own, as one batch with seq 0 (never sent):
    /// what the agent quarantines.
    pub oversized: Option<pb::ResultBatch>,
}

/// Splits `histograms` then `records` (in that order, order kept) into batches of
/// `campaign_id` numbered from `first_seq`, each of encoded length at most `budget_bytes`;
/// items that cannot fit even alone go to [`Split::oversized`].
pub fn split(
    campaign_id: &str,
    first_seq: u64,
    histograms: Vec<pb::IntervalHistogram>,
    records: Vec<pb::ProbeRecord>,
    budget_bytes: usize,
) -> Split {
    let empty = |seq| pb::ResultBatch {
        campaign_id: campaign_id.to_string(),
        seq,
        ..Default::default()
    };
    // The envelope with the longest seq: whatever seq a batch gets, it is not larger.
    let base = empty(u64::MAX).encoded_len();
    let mut b = Builder {
        split: Split::default(),
        current: empty(first_seq),
        used: base,
        base,
        budget_bytes,
        empty: &empty,
    };
    for h in histograms {
        let size = prost::encoding::message::encoded_len(3, &h);
        b.add(size, |batch| batch.histograms.push(h));
    }
    for r in records {
        let size = prost::encoding::message::encoded_len(4, &r);
        b.add(size, |batch| batch.records.push(r));
    }
    let Builder {
        mut split, current, ..
    } = b;
    if !(current.histograms.is_empty() && current.records.is_empty()) {
        split.batches.push(current);
    }
    split
}

/// The batches being filled.
struct Builder<'a> {
    split: Split,
    current: pb::ResultBatch,
    /// Encoded length of `current`.
    used: usize,
    /// Encoded length of an empty batch.
    base: usize,
    budget_bytes: usize,
    empty: &'a dyn Fn(u64) -> pb::ResultBatch,
}

impl Builder<'_> {
    /// Adds an item that adds `size` bytes to a batch's encoded length (field key, length
    /// prefix, message) with `put`: to the current batch, a new one, or the oversized ones.
    fn add(&mut self, size: usize, put: impl FnOnce(&mut pb::ResultBatch)) {
        if self.base + size > self.budget_bytes {
            put(self.split.oversized.get_or_insert_with(|| (self.empty)(0)));
            return;
        }
        if self.used + size > self.budget_bytes {
            let next = (self.empty)(self.current.seq + 1);
            self.split
                .batches
                .push(std::mem::replace(&mut self.current, next));
            self.used = self.base;
        }
        put(&mut self.current);
        self.used += size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(slot: u32, finish_reason_bytes: usize) -> pb::ProbeRecord {
        pb::ProbeRecord {
            provider: "p".into(),
            scenario: "s".into(),
            outcome: "ok".into(),
            slot,
            finish_reason: Some("x".repeat(finish_reason_bytes)),
            ..Default::default()
        }
    }

    fn histogram(bytes: usize) -> pb::IntervalHistogram {
        pb::IntervalHistogram {
            provider: "p".into(),
            scenario: "s".into(),
            metric: "ttft".into(),
            hist_v2: vec![7; bytes],
            ..Default::default()
        }
    }

    #[test]
    fn a_large_interval_becomes_several_batches_each_within_the_budget_in_order() {
        const BUDGET: usize = 10_000;
        let records: Vec<_> = (0..40).map(|i| record(i, 900)).collect();
        let s = split(
            "c",
            5,
            vec![histogram(3000), histogram(3000)],
            records,
            BUDGET,
        );
        assert!(s.oversized.is_none());
        assert!(s.batches.len() >= 5, "{} batches", s.batches.len());
        for (i, b) in s.batches.iter().enumerate() {
            assert!(
                b.encoded_len() <= BUDGET,
                "seq {}: {}",
                b.seq,
                b.encoded_len()
            );
            // Full batches but the last: the next item would not have fitted.
            if i + 1 < s.batches.len() {
                assert!(
                    b.encoded_len() > BUDGET - 1200,
                    "seq {}: {}",
                    b.seq,
                    b.encoded_len()
                );
            }
        }
        let seqs: Vec<u64> = s.batches.iter().map(|b| b.seq).collect();
        assert_eq!(seqs, (5..5 + s.batches.len() as u64).collect::<Vec<_>>());
        let slots: Vec<u32> = s
            .batches
            .iter()
            .flat_map(|b| b.records.iter().map(|r| r.slot))
            .collect();
        assert_eq!(
            slots,
            (0..40).collect::<Vec<_>>(),
            "every record once, in order"
        );
        assert_eq!(s.batches[0].histograms.len(), 2, "histograms first");
        assert!(s.batches.iter().all(|b| b.campaign_id == "c"));
    }

    #[test]
    fn the_issue_s_3_mb_finish_reason_is_set_aside_and_the_rest_still_fits() {
        // The attack: one provider's 3 MB finish_reason made one batch over 4 MiB.
        let budget = latmesh_core::wire::MAX_BATCH_BYTES;
        let records = vec![record(0, 100), record(1, 3 << 20), record(2, 100)];
        let s = split(
            "c",
            1,
            vec![histogram(5000), histogram(2 << 20)],
            records,
            budget,
        );
        let oversized = s.oversized.expect("the huge record and histogram");
        assert_eq!(oversized.seq, 0, "never sent");
        assert_eq!(
            oversized.records.iter().map(|r| r.slot).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(oversized.histograms.len(), 1);
        assert_eq!(s.batches.len(), 1);
        let b = &s.batches[0];
        assert_eq!((b.seq, b.histograms.len()), (1, 1));
        assert_eq!(b.records.iter().map(|r| r.slot).collect::<Vec<_>>(), [0, 2]);
        assert!(b.encoded_len() <= budget);
    }

    #[test]
    fn an_item_of_exactly_the_budget_is_sent_and_nothing_gives_no_batch() {
        let base = pb::ResultBatch {
            campaign_id: "c".into(),
            seq: u64::MAX,
            ..Default::default()
        }
        .encoded_len();
        let r = record(0, 500);
        let budget = base + prost::encoding::message::encoded_len(4, &r);
        let s = split("c", 1, Vec::new(), vec![r.clone(), r], budget);
        assert!(s.oversized.is_none());
        assert_eq!(s.batches.len(), 2, "one record per batch");
        let none = split("c", 1, Vec::new(), Vec::new(), budget);
        assert!(none.batches.is_empty() && none.oversized.is_none());
    }
}
