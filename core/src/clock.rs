//! NTP-style clock offset estimation between an agent and the coordinator.
//!
//! Each exchange gives t1 (agent send), t2 (coordinator receive), t3 (coordinator send) and t4
//! (agent receive), all UTC µs on the named side's clock. As in NTP (RFC 5905 §8):
//! offset = ((t2 − t1) + (t3 − t4)) / 2 and delay = (t4 − t1) − (t3 − t2). The sample with the
//! smallest delay is the most trustworthy; its uncertainty is half its delay.

/// One ping/pong exchange, UTC µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSample {
    /// Agent send time (agent clock).
    pub t1: i64,
    /// Coordinator receive time (coordinator clock).
    pub t2: i64,
    /// Coordinator send time (coordinator clock).
    pub t3: i64,
    /// Agent receive time (agent clock).
    pub t4: i64,
}

impl ClockSample {
    /// Coordinator clock minus agent clock, µs.
    pub fn offset_us(&self) -> i64 {
        ((self.t2 - self.t1) + (self.t3 - self.t4)) / 2
    }

    /// Round-trip network delay, µs (never negative).
    pub fn delay_us(&self) -> u64 {
        ((self.t4 - self.t1) - (self.t3 - self.t2)).max(0) as u64
    }
}

/// A clock offset estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockEstimate {
    /// Coordinator clock minus agent clock, µs: `coordinator_time = agent_time + offset_us`.
    pub offset_us: i64,
    /// Half the round trip of the sample used, µs: the true offset lies within ± this.
    pub uncertainty_us: u64,
    /// Samples considered.
    pub samples: u32,
}

/// The estimate from the minimum-delay sample; `None` without samples.
pub fn estimate(samples: &[ClockSample]) -> Option<ClockEstimate> {
    let best = samples.iter().min_by_key(|s| s.delay_us())?;
    Some(ClockEstimate {
        offset_us: best.offset_us(),
        uncertainty_us: best.delay_us().div_ceil(2),
        samples: samples.len() as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_path_gives_the_exact_offset() {
        // Coordinator is 5 s ahead; 1 ms each way; 100 µs processing.
        let s = ClockSample {
            t1: 1_000_000,
            t2: 6_001_000,
            t3: 6_001_100,
            t4: 1_002_100,
        };
        assert_eq!(s.offset_us(), 5_000_000);
        assert_eq!(s.delay_us(), 2_000);
    }

    #[test]
    fn the_least_delayed_sample_wins() {
        let slow = ClockSample {
            t1: 0,
            t2: 5_030_000,
            t3: 5_030_000,
            t4: 40_000,
        }; // asymmetric, 40 ms
        let fast = ClockSample {
            t1: 100_000,
            t2: 5_100_500,
            t3: 5_100_500,
            t4: 101_000,
        };
        let e = estimate(&[slow, fast]).unwrap();
        assert_eq!(e.offset_us, 5_000_000);
        assert_eq!(e.uncertainty_us, 500);
        assert_eq!(e.samples, 2);
        assert!(estimate(&[]).is_none());
    }
}
