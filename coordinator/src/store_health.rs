//! The sink's voice: whether ClickHouse answers, told in the log while it does not.
//!
//! The writer reports each attempt ([`StoreHealth::attempt`]), failure
//! ([`StoreHealth::failed`]) and success ([`StoreHealth::answered`]); a watcher task
//! ([`watch`]) looks once a second. When ClickHouse has not answered an attempt for
//! [`STALL_WARN_AFTER`] it logs a WARN (`ClickHouse not answering for 5 s, N batches waiting
//! in the spool`), again after 10, 20, 40 s … (at most [`STALL_WARN_MAX_GAP`] apart) while
//! it lasts; once it answers again and the spool is empty, an INFO `ClickHouse back, spool
//! drained (N batches)`. A stalled server (no answer at all) and a refusing one (connection
//! refused, errors) are both "not answering": nothing gets stored either way.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::spool::Spool;

/// How long the sink waits for an answer before the first warning.
pub const STALL_WARN_AFTER: Duration = Duration::from_secs(5);
/// Longest time between two warnings of one stall.
pub const STALL_WARN_MAX_GAP: Duration = Duration::from_secs(300);
/// How often the watcher looks.
const TICK: Duration = Duration::from_secs(1);

/// What the sink knows about ClickHouse's answers, shared by the writer and the watcher.
#[derive(Debug, Default)]
pub struct StoreHealth {
    inner: Mutex<Health>,
}

/// The state behind [`StoreHealth`] (pure, so its rules are tested without clocks).
#[derive(Debug, Default)]
struct Health {
    /// Since when an attempt waits for an answer (unset by a success).
    waiting_since: Option<Instant>,
    /// What the current attempt does (`"inserting 3 batches"`).
    doing: String,
    /// The last failure of the current stall.
    last_error: Option<String>,
    /// When the next warning is due, counted from `waiting_since`.
    next_warn_after: Option<Duration>,
    /// Whether the current wait was warned about.
    warned: bool,
    /// Set once a stall was warned about: the stall's length and the batches stored since it
    /// ended, until the spool is empty.
    recovering: Option<Recovery>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Recovery {
    stalled_for: Duration,
    batches: u64,
}

/// What the watcher says.
#[derive(Debug, Clone, PartialEq)]
enum Voice {
    /// ClickHouse has not answered for `for_` (repeated with backoff).
    Stalled {
        for_: Duration,
        doing: String,
        last_error: Option<String>,
    },
    /// ClickHouse answered again and the spool is empty.
    Drained(Recovery),
}

impl Health {
    fn attempt(&mut self, now: Instant, doing: String) {
        self.waiting_since.get_or_insert(now);
        self.doing = doing;
    }

    fn failed(&mut self, error: String) {
        self.last_error = Some(error);
    }

    fn answered(&mut self, now: Instant, batches: u64) {
        if let Some(since) = self.waiting_since.take()
            && self.warned
        {
            let stalled_for = now.saturating_duration_since(since);
            self.recovering = Some(Recovery {
                stalled_for,
                batches: 0,
            });
        }
        self.next_warn_after = None;
        self.warned = false;
        self.last_error = None;
        if let Some(r) = &mut self.recovering {
            r.batches += batches;
        }
    }

    /// What to log at `now`, with `pending` batches in the spool.
    fn tick(&mut self, now: Instant, pending: u64) -> Option<Voice> {
        if let Some(since) = self.waiting_since {
            let waited = now.saturating_duration_since(since);
            let due = *self.next_warn_after.get_or_insert(STALL_WARN_AFTER);
            if waited >= due {
                self.next_warn_after = Some((due * 2).min(due + STALL_WARN_MAX_GAP));
                self.warned = true;
                return Some(Voice::Stalled {
                    for_: waited,
                    doing: self.doing.clone(),
                    last_error: self.last_error.clone(),
                });
            }
            return None;
        }
        if pending == 0 {
            return self.recovering.take().map(Voice::Drained);
        }
        None
    }
}

impl StoreHealth {
    /// A shared health record.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Health> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An attempt (`doing`, e.g. `"inserting 3 batches"`) starts waiting for ClickHouse; the
    /// wait counts from the first attempt since the last success.
    pub fn attempt(&self, doing: impl Into<String>) {
        self.lock().attempt(Instant::now(), doing.into());
    }

    /// The current attempt failed with `error` (the wait goes on).
    pub fn failed(&self, error: &impl std::fmt::Display) {
        self.lock().failed(error.to_string());
    }

    /// ClickHouse answered: `batches` spool entries were stored (0 for other work).
    pub fn answered(&self, batches: u64) {
        self.lock().answered(Instant::now(), batches);
    }

    /// How long ClickHouse has not answered the sink's current attempt (`None` when it is not
    /// waiting).
    pub fn waiting_for(&self) -> Option<Duration> {
        self.lock().waiting_since.map(|t| t.elapsed())
    }
}

/// Longest wait of a campaign's `finished` progress message for the spool to drain.
pub const FINISH_DRAIN_WAIT: Duration = Duration::from_secs(3);

/// Sets `p`'s `spool_pending_batches` and `clickhouse_silent_s` from `spool` and `health`; on
/// the `finished` message, first waits up to [`FINISH_DRAIN_WAIT`] for the spool to drain (the
/// last batches were acked a moment ago), so a healthy sink reports 0.
pub async fn fill_progress(
    p: &mut latmesh_proto::pb::Progress,
    spool: &Spool,
    health: Option<&StoreHealth>,
) {
    if p.finished {
        let deadline = Instant::now() + FINISH_DRAIN_WAIT;
        while spool.pending_entries() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    p.spool_pending_batches = spool.pending_entries();
    p.clickhouse_silent_s = health
        .and_then(StoreHealth::waiting_for)
        .map_or(0, |d| d.as_secs());
}

/// Logs the stalls of `health` until the task is aborted (see the module docs).
pub async fn watch(health: Arc<StoreHealth>, spool: Arc<Spool>, url: String) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let pending = spool.pending_entries();
        let voice = health.lock().tick(Instant::now(), pending);
        match voice {
            Some(Voice::Stalled {
                for_,
                doing,
                last_error,
            }) => tracing::warn!(
                clickhouse_url = %url,
                doing = %doing,
                last_error = last_error.as_deref().unwrap_or("none (no answer yet)"),
                pending_bytes = spool.pending_bytes(),
                "ClickHouse not answering for {} s, {pending} batches waiting in the spool",
                for_.as_secs()
            ),
            Some(Voice::Drained(r)) => tracing::info!(
                clickhouse_url = %url,
                stalled_s = r.stalled_for.as_secs(),
                "ClickHouse back, spool drained ({} batches)",
                r.batches
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_stall_is_told_with_backoff_then_its_end_once_the_spool_is_empty() {
        let t0 = Instant::now();
        let mut h = Health::default();
        assert_eq!(h.tick(t0, 3), None, "idle: nothing to say");
        h.attempt(t0, "inserting 3 batches".into());
        assert_eq!(h.tick(t0 + s(4), 3), None);
        let warned_at = |h: &mut Health| {
            (0..200)
                .filter(|i| h.tick(t0 + s(*i), 3).is_some())
                .collect::<Vec<_>>()
        };
        // Warned at 5 s, then 10, 20, 40, 80, 160 s.
        assert_eq!(warned_at(&mut h), vec![5, 10, 20, 40, 80, 160]);
        h.failed("connection refused".into());
        match h.tick(t0 + s(320), 3) {
            Some(Voice::Stalled {
                for_,
                doing,
                last_error,
            }) => {
                assert_eq!(for_, s(320));
                assert_eq!(doing, "inserting 3 batches");
                assert_eq!(last_error.as_deref(), Some("connection refused"));
            }
            other => panic!("{other:?}"),
        }
        // The gap stops growing at STALL_WARN_MAX_GAP.
        assert!(h.tick(t0 + s(320 + 299), 3).is_none());
        assert!(h.tick(t0 + s(320 + 300), 3).is_some());
        h.answered(t0 + s(700), 2);
        assert_eq!(h.tick(t0 + s(701), 1), None, "still draining");
        h.attempt(t0 + s(701), "inserting 1 batch".into());
        h.answered(t0 + s(702), 1);
        assert_eq!(
            h.tick(t0 + s(703), 0),
            Some(Voice::Drained(Recovery {
                stalled_for: s(700),
                batches: 3
            }))
        );
        assert_eq!(h.tick(t0 + s(704), 0), None, "said once");
    }

    #[test]
    fn a_short_wait_says_nothing() {
        let t0 = Instant::now();
        let mut h = Health::default();
        h.attempt(t0, "inserting 1 batch".into());
        assert_eq!(h.tick(t0 + s(4), 1), None);
        h.answered(t0 + s(4), 1);
        assert_eq!(h.tick(t0 + s(10), 0), None);
        // A new wait starts its own count.
        h.attempt(t0 + s(20), "x".into());
        assert_eq!(h.tick(t0 + s(24), 1), None);
        assert!(h.tick(t0 + s(25), 1).is_some());
    }
}
