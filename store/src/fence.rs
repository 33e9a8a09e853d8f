//! Inserts that outlive their client timeout: deterministic query ids, and the wait for
//! abandoned inserts before rows are checked again.
//!
//! # The problem
//! An insert whose answer does not come within its bound ([`super::Timeouts::insert`]) is
//! abandoned by latmesh, not by the server: a stalled server (stopped, swapping, a proxy
//! holding the request) that resumes still executes it. A retry whose presence query ran
//! before the abandoned insert committed would write its rows a second time. ClickHouse 18.16
//! deduplicates inserts only into `Replicated*` tables, and `insert_deduplication_token` /
//! `non_replicated_deduplication_window` exist only on current servers, so latmesh relies on
//! neither.
//!
//! # The rule
//! 1. Every `INSERT` of result rows carries a deterministic `query_id`
//!    ([`insert_query_id`]): `latmesh-insert.<db>.<table>.<hash of its batches'
//!    (campaign, agent, seq)>`. A retry of the same batches uses the same id, and ClickHouse
//!    refuses a query whose id is still running (code 216, `QUERY_WITH_SAME_ID_IS_ALREADY_
//!    RUNNING`; `replace_running_query` is off unless a client turns it on): a retry never runs
//!    beside the insert it replaces, whichever of the two reaches the server first.
//! 2. A writer is *in doubt* when it starts (an earlier process may have left an insert behind)
//!    and after any failed call. In doubt, before its next presence query, it waits
//!    ([`settle`]) until the server answers and `system.processes` lists no query with the
//!    prefix `latmesh-insert.<db>.`; after a failure that must hold on two checks
//!    [`SETTLE_GAP`] apart (a margin for a request the server received but had not started
//!    when it resumed). Only then are the stored rows read: an abandoned insert has either
//!    committed (its rows are found and not sent again) or is gone.
//!
//! Both hold on 18.16 and on current ClickHouse (`query_id`, code 216 and `system.processes`
//! are unchanged). They assume one writer per database at a time, as the presence check does
//! (see [`super::insert`]).

use std::time::{Duration, Instant};

use super::batch_key::BatchKey;
use super::{StoreError, Timeouts, bounded};

/// Pause between two checks of `system.processes` while waiting for abandoned inserts.
pub const SETTLE_GAP: Duration = Duration::from_millis(500);

/// How much a writer knows about inserts it may have left running on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Doubt {
    /// Its last call succeeded: nothing of its own can still be running.
    Settled,
    /// Nothing known (a new writer): one clean check of `system.processes` suffices.
    Unknown,
    /// Its last call failed (an insert may have been abandoned): two clean checks,
    /// [`SETTLE_GAP`] apart.
    Failed,
}

/// The `query_id` prefix of every result insert into database `db`.
pub fn insert_prefix(db: &str) -> String {
    format!("latmesh-insert.{db}.")
}

/// The `query_id` of the insert into `db.table` of the rows of `batches` (in this order): the
/// same for a retry of the same batches, whichever of their rows the retry still sends.
pub fn insert_query_id<'a>(
    db: &str,
    table: &str,
    batches: impl IntoIterator<Item = &'a BatchKey<'a>>,
) -> String {
    let mut h = Fnv::default();
    for k in batches {
        h.feed(k.campaign_id.as_bytes());
        h.feed(&[0]);
        h.feed(k.agent_id.as_bytes());
        h.feed(&[0]);
        h.feed(&k.seq.to_le_bytes());
    }
    format!("{}{table}.{:016x}", insert_prefix(db), h.0)
}

/// The `query_id` of the insert into `db.table` of the rows of one `latmesh compat` run
/// (`crate::compat::insert_compat_run`): the same for a retry of the same run.
pub fn run_query_id(db: &str, table: &str, run_id: &str) -> String {
    let mut h = Fnv::default();
    h.feed(b"run\0");
    h.feed(run_id.as_bytes());
    format!("{}{table}.{:016x}", insert_prefix(db), h.0)
}

/// FNV-1a, 64 bits: stable across processes and builds (std's hasher is not).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn feed(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Result inserts into `db` the server is running now (`system.processes`).
///
/// # Errors
/// [`StoreError::TimedOut`] after `timeout`; the server's or connection's error.
pub async fn running_inserts(
    client: &clickhouse::Client,
    db: &str,
    timeout: Duration,
) -> Result<u64, StoreError> {
    let prefix = insert_prefix(db);
    bounded(
        timeout,
        || format!("listing the inserts into {db} still running (system.processes)"),
        client
            .query("SELECT count() FROM system.processes WHERE substring(query_id, 1, ?) = ?")
            .bind(prefix.len() as u64)
            .bind(prefix.as_str())
            .fetch_one::<u64>(),
    )
    .await
}

/// Waits until no result insert into `db` runs on the server (see the module docs): one clean
/// check for [`Doubt::Unknown`], two [`SETTLE_GAP`] apart for [`Doubt::Failed`], none for
/// [`Doubt::Settled`].
///
/// A server that refuses the check itself (no access to `system.processes`) is logged as a
/// warning and taken as settled.
///
/// # Errors
/// Retryable: the server does not answer (each check is bounded by `timeouts.query`), or
/// inserts are still running after `timeouts.query` ([`StoreError::TimedOut`]). The caller
/// stays in doubt and tries again later.
pub async fn settle(
    client: &clickhouse::Client,
    db: &str,
    doubt: Doubt,
    timeouts: &Timeouts,
) -> Result<(), StoreError> {
    let needed = match doubt {
        Doubt::Settled => return Ok(()),
        Doubt::Unknown => 1,
        Doubt::Failed => 2,
    };
    let deadline = Instant::now() + timeouts.query;
    let mut clean = 0;
    loop {
        let running = match running_inserts(client, db, timeouts.query).await {
            Ok(n) => n,
            // Refused, not unavailable (a user without access to system tables): going on
            // unfenced risks a duplicate after an insert timeout; stopping would keep every
            // result out of ClickHouse. Say so and go on.
            Err(e) if !e.is_retryable() => {
                tracing::warn!(db, error = %e, "cannot list running inserts in system.processes: a retry after an insert timeout may store rows twice (grant this user SELECT on system.processes)");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if running == 0 {
            clean += 1;
            if clean == needed {
                return Ok(());
            }
        } else {
            clean = 0;
            tracing::info!(
                db,
                running,
                "waiting for abandoned ClickHouse inserts to end before checking which rows are stored"
            );
        }
        if Instant::now() >= deadline {
            return Err(StoreError::TimedOut {
                what: format!("waiting for {running} abandoned insert(s) into {db} to end"),
                after: timeouts.query,
            });
        }
        tokio::time::sleep(SETTLE_GAP).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_ids_name_the_batches_not_the_attempt() {
        let a = BatchKey::new("c1", "a1", "r", 0, 1);
        let b = BatchKey::new("c1", "a1", "r", 0, 2);
        let ab = insert_query_id("lm", "requests", [&a, &b]);
        assert_eq!(ab, insert_query_id("lm", "requests", [&a, &b]));
        assert!(ab.starts_with("latmesh-insert.lm.requests."), "{ab}");
        assert_ne!(ab, insert_query_id("lm", "histograms", [&a, &b]));
        assert_ne!(ab, insert_query_id("lm", "requests", [&a]));
        assert_ne!(ab, insert_query_id("lm2", "requests", [&a, &b]));
        // Field boundaries count: ("c1", "a12") is not ("c1a", "12").
        let x = BatchKey::new("c1", "a12", "r", 0, 1);
        let y = BatchKey::new("c1a", "12", "r", 0, 1);
        assert_ne!(
            insert_query_id("lm", "requests", [&x]),
            insert_query_id("lm", "requests", [&y])
        );
        let r = run_query_id("lm", "compat_results", "run-1");
        assert!(r.starts_with("latmesh-insert.lm.compat_results."), "{r}");
        assert_eq!(r, run_query_id("lm", "compat_results", "run-1"));
        assert_ne!(r, run_query_id("lm", "compat_results", "run-2"));
        // A database whose name extends another's has its own prefix.
        assert!(!insert_prefix("lm2").starts_with(&insert_prefix("lm")));
    }
}
