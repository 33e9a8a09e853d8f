//! The agent's wall clock and the coordinator's: [`now_unix_us`] (UTC µs, as records carry
//! it) and [`local_instant_of`] (a coordinator timestamp as a local [`Instant`], given the
//! clock estimate's offset).

use std::time::{Duration, Instant};

/// Wall clock now, UTC µs.
pub fn now_unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The local `Instant` at which `coord_unix_us` (coordinator clock) happens, given
/// `offset_us` = coordinator − agent.
pub fn local_instant_of(coord_unix_us: i64, offset_us: i64) -> Instant {
    let agent_unix_us = coord_unix_us - offset_us;
    let (now_i, now_w) = (Instant::now(), now_unix_us());
    let ahead_us = agent_unix_us - now_w;
    if ahead_us >= 0 {
        now_i + Duration::from_micros(ahead_us as u64)
    } else {
        now_i
            .checked_sub(Duration::from_micros(ahead_us.unsigned_abs()))
            .unwrap_or(now_i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_time_maps_to_local_instants() {
        // The coordinator is 2 s ahead: its "now + 500 ms" is our now − 1.5 s.
        let now_coord = now_unix_us() + 2_000_000;
        let at = local_instant_of(now_coord + 500_000, 2_000_000);
        let ahead = at.saturating_duration_since(Instant::now());
        assert!(
            ahead > Duration::from_millis(400) && ahead <= Duration::from_millis(500),
            "{ahead:?}"
        );
        let past = local_instant_of(now_coord - 1_000_000, 2_000_000);
        assert!(past <= Instant::now());
    }
}
