//! Missing batch seqs from the seqs stored: `campaign verify`'s work is bounded by what
//! ClickHouse holds, never by the highest seq an agent claimed (one batch numbered
//! `u64::MAX` would have made `1..=max_seq` a walk of 2^64 steps).

use std::collections::BTreeSet;

/// Most missing seqs listed; the rest are counted ([`MissingSeqs::more`]).
pub const MAX_LISTED: usize = 100;

/// Seqs in `1..=max(stored)` that are not stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MissingSeqs {
    /// The first [`MAX_LISTED`] of them, ascending.
    pub listed: Vec<u64>,
    /// How many more are missing beyond those listed.
    pub more: u64,
}

/// The seqs missing below the highest of `stored`, from the gaps between consecutive stored
/// seqs: O(stored + listed), whatever the seqs' values.
pub fn missing(stored: &BTreeSet<u64>) -> MissingSeqs {
    let mut out = MissingSeqs::default();
    let mut next = 1u64;
    for &seq in stored.range(1..) {
        // `next..seq` is a gap (empty when seq == next).
        let gap = seq - next;
        let room = (MAX_LISTED - out.listed.len()) as u64;
        out.listed.extend(next..next + gap.min(room));
        out.more += gap.saturating_sub(room);
        next = seq.saturating_add(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_listed_up_to_the_limit_and_counted_beyond_whatever_the_seqs() {
        let set = |s: &[u64]| s.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(missing(&set(&[])), MissingSeqs::default());
        assert_eq!(missing(&set(&[1, 2, 3])), MissingSeqs::default());
        assert_eq!(
            missing(&set(&[0, 2, 5])),
            MissingSeqs {
                listed: vec![1, 3, 4],
                more: 0
            }
        );
        // A claimed u64::MAX: instant, 100 listed, the rest counted.
        let m = missing(&set(&[1, u64::MAX]));
        assert_eq!(m.listed, (2..102).collect::<Vec<_>>());
        assert_eq!(m.more, u64::MAX - 2 - 100);
        let m = missing(&set(&[50, 200]));
        assert_eq!(m.listed.len(), MAX_LISTED);
        assert_eq!(m.listed[..3], [1, 2, 3]);
        assert_eq!(m.listed[49..52], [51, 52, 53]);
        assert_eq!(m.more, 49 + 149 - 100);
    }
}
