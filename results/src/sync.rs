//! How synchronized the agents' sends actually were: for every slot of the rounds (the same
//! (round, slot) is sent by every agent at the same intended instant), the spread of the
//! agents' actual first-attempt send times on the coordinator's clock (each agent's send time
//! plus the clock offset it used for the start). The start skew (`StartSync`) is one instant;
//! this is every slot of the campaign, so one late wake-up of a busy machine does not decide it.

use std::collections::BTreeMap;

use latmesh_core::load::LoadKind;
use latmesh_core::record::ProbeRecord;
use serde::{Deserialize, Serialize};

/// First-attempt send times of the rounds' slots, per agent (agent clock, UTC µs).
#[derive(Clone, Debug, Default)]
pub struct SlotSends(BTreeMap<(u32, u32), Vec<(String, i64)>>);

/// Spread of the agents' send times over the rounds' slots that at least two agents sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSkew {
    /// Slots compared.
    pub slots: u64,
    /// Median over slots of (latest − earliest send), µs.
    pub p50_us: i64,
    /// 99th percentile over slots, µs.
    pub p99_us: i64,
    /// Largest, µs.
    pub max_us: i64,
}

impl SlotSends {
    /// Notes `rec`'s send time when it is the first attempt of a rounds slot.
    pub fn add(&mut self, agent_id: &str, rec: &ProbeRecord) {
        if rec.load == LoadKind::Rounds && rec.attempt <= 1 && rec.turn <= 1 {
            self.0
                .entry((rec.round, rec.slot))
                .or_default()
                .push((agent_id.to_string(), rec.send_agent_unix_us));
        }
    }

    /// The spread over slots, with each agent's clock offset (coordinator − agent, µs; agents
    /// without one are left out); `None` when no slot was sent by two agents.
    pub fn skew(&self, offsets: &BTreeMap<String, i64>) -> Option<SendSkew> {
        let mut spreads: Vec<i64> = self
            .0
            .values()
            .filter_map(|sends| {
                let coord: Vec<i64> = sends
                    .iter()
                    .filter_map(|(a, t)| offsets.get(a).map(|o| t + o))
                    .collect();
                (coord.len() >= 2)
                    .then(|| coord.iter().max().expect("two") - coord.iter().min().expect("two"))
            })
            .collect();
        if spreads.is_empty() {
            return None;
        }
        spreads.sort_unstable();
        let at = |q: f64| {
            spreads[((spreads.len() as f64 * q).ceil() as usize).clamp(1, spreads.len()) - 1]
        };
        Some(SendSkew {
            slots: spreads.len() as u64,
            p50_us: at(0.5),
            p99_us: at(0.99),
            max_us: *spreads.last().expect("not empty"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(round: u32, slot: u32, send: i64) -> ProbeRecord {
        ProbeRecord {
            round,
            slot,
            attempt: 1,
            turn: 1,
            send_agent_unix_us: send,
            ..ProbeRecord::default()
        }
    }

    #[test]
    fn spread_per_slot_on_the_coordinator_clock() {
        let mut s = SlotSends::default();
        // Agent b's clock is 1 s behind; its offset brings it back.
        for slot in 0..4u32 {
            let t = 10_000_000 + i64::from(slot) * 100_000;
            s.add("a", &rec(0, slot, t));
            s.add("b", &rec(0, slot, t - 1_000_000 + 200 * i64::from(slot)));
        }
        // Retries, later turns and other load models are not slots of the shared schedule.
        let mut retry = rec(0, 0, 99);
        retry.attempt = 2;
        s.add("b", &retry);
        let mut sweep = rec(0, 1, 99);
        sweep.load = LoadKind::Sweep;
        s.add("b", &sweep);
        s.add("c", &rec(5, 0, 1)); // alone in its slot
        let offsets = BTreeMap::from([("a".to_string(), 0), ("b".to_string(), 1_000_000)]);
        let skew = s.skew(&offsets).unwrap();
        assert_eq!(
            skew,
            SendSkew {
                slots: 4,
                p50_us: 200,
                p99_us: 600,
                max_us: 600
            }
        );
        // Without b's offset nothing is comparable.
        assert_eq!(s.skew(&BTreeMap::from([("a".to_string(), 0)])), None);
    }
}
