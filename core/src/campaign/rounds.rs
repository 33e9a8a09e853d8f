//! `[rounds]`: how many rounds, their interval and the gap between the probes of a round.

use super::error::{CampaignError, invalid};
use super::file::RoundsSection;
use crate::plan::RoundsSpec;

/// Longest `rounds.gap_ms`: the longest `interval_s` (a day), in ms.
pub const MAX_GAP_MS: u64 = 86_400_000;

/// `[rounds]` for `slots` probes per round.
pub(super) fn validate_rounds(
    r: &RoundsSection,
    slots: usize,
) -> Result<RoundsSpec, CampaignError> {
    if r.count == 0 || r.count > 1_000_000 {
        return Err(invalid(
            "rounds.count",
            format!("{} is not in 1..=1000000", r.count),
        ));
    }
    if !(r.interval_s.is_finite() && r.interval_s > 0.0 && r.interval_s <= 86_400.0) {
        return Err(invalid(
            "rounds.interval_s",
            format!("{} is not in (0, 86400] seconds", r.interval_s),
        ));
    }
    if r.gap_ms > MAX_GAP_MS {
        return Err(invalid(
            "rounds.gap_ms",
            format!(
                "{} ms is above the maximum, {MAX_GAP_MS} ms (a day, the longest interval_s)",
                r.gap_ms
            ),
        ));
    }
    let interval_ms = (r.interval_s * 1000.0).round() as u64;
    let slots = slots as u64;
    // Checked: a gap of a day times a huge number of slots must not wrap to a short round.
    let round_ms = slots.saturating_sub(1).checked_mul(r.gap_ms);
    if round_ms.is_none_or(|ms| ms >= interval_ms) {
        return Err(invalid(
            "rounds.interval_s",
            format!(
                "{} s is too short: {} probes per round {} ms apart need more than {} ms (raise interval_s or lower gap_ms)",
                r.interval_s,
                slots,
                r.gap_ms,
                round_ms.map_or_else(|| "u64::MAX".to_string(), |ms| ms.to_string())
            ),
        ));
    }
    Ok(RoundsSpec {
        count: r.count,
        interval_ms,
        gap_ms: r.gap_ms,
    })
}
