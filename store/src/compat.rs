//! Storing what one `latmesh compat` run measured ([`insert_compat_run`]): its compatibility
//! results into `compat_results` and its quality samples into `quality_samples`
//! (`store/migrations/0009_compat.sql`), keyed by the run id and the campaign they belong to.
//! Reading them back is [`crate::query::compat_report`].
//!
//! # De-duplication
//! A run is written once: each table is looked at for the run id first and written only when
//! it holds no row of it, so inserting one run again (a retry, a repeated command) adds no
//! row. The rows of a run share one partition (they carry the run's start time), so each
//! table's insert is atomic: a table holds all of a run's rows or none. As for result
//! batches ([`crate::fence`]), the inserts carry a query id naming the run and the presence
//! check waits until no insert into the database is still running on the server.

use std::collections::BTreeMap;

use latmesh_core::compat::CompatResult;
use latmesh_core::quality::QualitySample;

use super::fence::{self, Doubt};
use super::insert::insert_row_refs;
use super::rows::{CompatResultRow, QualitySampleRow};
use super::{StoreError, Timeouts, bounded, check_identifier};

/// One `latmesh compat` run: what its rows are keyed and stamped with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompatRun {
    /// The run's id (unique per run).
    pub run_id: String,
    /// The campaign it belongs to (`--campaign ID`, or a new id).
    pub campaign_id: String,
    /// That campaign's name (the plan's).
    pub campaign_name: String,
    /// Where the checks ran from (the region label of the machine).
    pub region: String,
    /// When the run started, UTC µs.
    pub started_unix_us: i64,
    /// [`latmesh_core::compat::COMPAT_CHECKS_VERSION`].
    pub checks_version: u32,
    /// [`latmesh_core::quality::QUALITY_SET_VERSION`] (empty when no quality set ran).
    pub quality_set: String,
    /// Provider name → its API's name ([`latmesh_core::api::Api::name`]); a provider not
    /// listed is stored with an empty `api`.
    pub apis: BTreeMap<String, String>,
}

/// Rows of `run_id` in `db.table`.
async fn rows_of_run(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    run_id: &str,
    timeouts: &Timeouts,
) -> Result<u64, StoreError> {
    bounded(
        timeouts.query,
        || format!("checking whether {db}.{table} holds run {run_id}"),
        client
            .query(&format!(
                "SELECT count() FROM {db}.{table} WHERE run_id = ?"
            ))
            .bind(run_id)
            .fetch_one::<u64>(),
    )
    .await
}

/// Writes `table`'s rows of `run` unless the table already holds a row of it.
async fn insert_once<R>(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    run: &CompatRun,
    rows: &[R],
    timeouts: &Timeouts,
) -> Result<(), StoreError>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    if rows.is_empty() || rows_of_run(client, db, table, &run.run_id, timeouts).await? > 0 {
        return Ok(());
    }
    let refs: Vec<&R> = rows.iter().collect();
    let id = fence::run_query_id(db, table, &run.run_id);
    insert_row_refs(client, db, table, &refs, Some(&id), timeouts).await
}

/// Writes one `latmesh compat` run: `results` into `compat_results` and `samples` into
/// `quality_samples`, each stamped with `run` (see the module docs: idempotent per run id).
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error (calling
/// again after any error is safe and writes what is missing).
pub async fn insert_compat_run(
    client: &clickhouse::Client,
    db: &str,
    run: &CompatRun,
    results: &[CompatResult],
    samples: &[QualitySample],
) -> Result<(), StoreError> {
    check_identifier(db)?;
    let timeouts = Timeouts::default();
    fence::settle(client, db, Doubt::Unknown, &timeouts).await?;
    let result_rows: Vec<CompatResultRow> = results
        .iter()
        .map(|r| {
            let api = run.apis.get(&r.provider).map_or("", String::as_str);
            CompatResultRow::new(run, api, r)
        })
        .collect();
    let sample_rows: Vec<QualitySampleRow> = samples
        .iter()
        .map(|s| QualitySampleRow::new(run, s))
        .collect();
    insert_once(client, db, "compat_results", run, &result_rows, &timeouts).await?;
    insert_once(client, db, "quality_samples", run, &sample_rows, &timeouts).await
}
