//! Idle connections per origin.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Conn, Origin};

/// An idle connection older than this is closed instead of reused.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Idle connections kept per origin; returning one more closes the oldest.
pub const MAX_IDLE_PER_ORIGIN: usize = 32;

struct Idle {
    conn: Conn,
    since: Instant,
}

impl Idle {
    fn usable(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) < IDLE_TIMEOUT
            && !self.conn.sender.is_closed()
            && self.conn.sender.is_ready()
    }
}

/// The idle lists, behind a short std mutex (never held across an await). Expired and closed
/// connections are pruned, for every origin, whenever the pool is used.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Origin, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the connections that can no longer be used into `dropped`.
    fn prune(map: &mut HashMap<Origin, Vec<Idle>>, now: Instant, dropped: &mut Vec<Idle>) {
        map.retain(|_, list| {
            let mut i = 0;
            while i < list.len() {
                if list[i].usable(now) {
                    i += 1;
                } else {
                    dropped.push(list.remove(i));
                }
            }
            !list.is_empty()
        });
    }

    /// The most recently returned usable connection to `origin`. The one taken is also
    /// looked at on its socket ([`Conn::idle_quiet`]: one system call, so only for it, not
    /// in every prune); one the server closed is dropped and the next one is looked at.
    pub fn take(&self, origin: &Origin) -> Option<Conn> {
        let mut dropped = Vec::new();
        let conn = {
            let mut map = self.lock();
            Self::prune(&mut map, Instant::now(), &mut dropped);
            let list = map.get_mut(origin)?;
            let mut found = None;
            while let Some(i) = list.pop() {
                if i.conn.idle_quiet() {
                    found = Some(i.conn);
                    break;
                }
                dropped.push(i);
            }
            if list.is_empty() {
                map.remove(origin);
            }
            found
        };
        // Closing happens outside the lock.
        drop(dropped);
        conn
    }

    /// Keeps `conn` for reuse.
    pub fn put(&self, conn: Conn) {
        let mut dropped = Vec::new();
        {
            let now = Instant::now();
            let mut map = self.lock();
            Self::prune(&mut map, now, &mut dropped);
            let list = map.entry(conn.origin.clone()).or_default();
            if list.len() >= MAX_IDLE_PER_ORIGIN {
                dropped.push(list.remove(0));
            }
            list.push(Idle { conn, since: now });
        }
        drop(dropped);
    }

    /// Idle connections held, all origins.
    pub fn idle_count(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }
}
