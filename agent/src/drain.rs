//! Phase hygiene on the agent (docs/metrics.md "Phase hygiene"): each provider's logical
//! requests of this run in flight ([`InFlight`]), the wait for them to end before the next
//! phase, bounded by the phase's planned start ([`InFlight::drained_by`]), and the flag a
//! phase's records carry when it started with some still in flight ([`PhaseFlags`]).
//!
//! Phases stay synchronized across regions: the plan leaves a drain allowance before each
//! phase (`latmesh_core::plan::pause_after_us`), every agent waits for its own requests up to
//! the phase's planned start (never past it), and a phase that starts with a provider's
//! requests still in flight is flagged on that provider's records of the phase
//! (`phase_start_in_flight`), and logged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

/// Per provider (index into the plan's providers): logical requests of this run started and
/// not ended, whatever their phase.
#[derive(Debug, Default)]
pub struct InFlight {
    counts: Vec<AtomicU32>,
    changed: Notify,
}

/// One logical request in flight: ends (and wakes a drain wait) when dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    of: Arc<InFlight>,
    provider: usize,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(c) = self.of.counts.get(self.provider) {
            c.fetch_sub(1, Ordering::SeqCst);
        }
        self.of.changed.notify_waiters();
    }
}

impl InFlight {
    /// Counters for `providers` providers, all 0.
    pub fn new(providers: usize) -> InFlight {
        InFlight {
            counts: (0..providers).map(|_| AtomicU32::new(0)).collect(),
            changed: Notify::new(),
        }
    }

    /// A request of `provider` starts; it ends when the guard is dropped.
    pub fn start(self: &Arc<Self>, provider: usize) -> InFlightGuard {
        if let Some(c) = self.counts.get(provider) {
            c.fetch_add(1, Ordering::SeqCst);
        }
        InFlightGuard {
            of: self.clone(),
            provider,
        }
    }

    /// Requests in flight now, per provider.
    pub fn now(&self) -> Vec<u32> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect()
    }

    /// Waits until no provider has a request in flight, or until `deadline`, whichever comes
    /// first; returns what is still in flight per provider (all 0: drained).
    pub async fn drained_by(&self, deadline: Instant) -> Vec<u32> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let left = self.now();
            if left.iter().all(|&n| n == 0) {
                return left;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline.into()) => return self.now(),
            }
        }
    }
}

/// What each phase's records are stamped with: per (scenario, provider), the requests of
/// earlier phases in flight when the phase started (absent: 0).
#[derive(Debug, Default)]
pub struct PhaseFlags {
    loaded: Mutex<HashMap<(String, String), u32>>,
}

impl PhaseFlags {
    /// Notes that `scenario`'s phase started with `in_flight` requests of `provider`.
    pub fn set(&self, scenario: &str, provider: &str, in_flight: u32) {
        self.lock()
            .insert((scenario.to_string(), provider.to_string()), in_flight);
    }

    /// The flag of a record of `scenario` and `provider`.
    pub fn get(&self, scenario: &str, provider: &str) -> u32 {
        self.lock()
            .get(&(scenario.to_string(), provider.to_string()))
            .copied()
            .unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), u32>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The wait ends as soon as the last request ends, or at the deadline with what is left.
    #[tokio::test]
    async fn the_drain_wait_ends_when_the_last_request_ends_or_at_its_bound() {
        let f = Arc::new(InFlight::new(2));
        assert_eq!(f.drained_by(Instant::now()).await, [0, 0]);
        let a = f.start(1);
        let b = f.start(1);
        assert_eq!(f.now(), [0, 2]);
        // The bound passed: what is left.
        assert_eq!(f.drained_by(Instant::now()).await, [0, 2]);
        drop(a);
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move {
                f.drained_by(Instant::now() + Duration::from_secs(3600))
                    .await
            })
        };
        tokio::task::yield_now().await;
        drop(b);
        assert_eq!(waiter.await.unwrap(), [0, 0]);
        let flags = PhaseFlags::default();
        flags.set("ctx.1k", "budget", 12);
        assert_eq!(
            (flags.get("ctx.1k", "budget"), flags.get("ctx.1k", "steady")),
            (12, 0)
        );
    }
}
