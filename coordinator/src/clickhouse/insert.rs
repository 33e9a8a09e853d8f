//! Inserts: a result batch ([`insert_batch`], idempotent), campaigns and agents.
//!
//! # De-duplication guarantee
//! A row of `requests` / `histograms` is identified by (campaign_id, agent_id, seq, row_index).
//! [`insert_batch`] first reads which row indexes of (campaign, agent, seq) each table already
//! has and inserts only the others, so a batch sent again (an agent or coordinator retry, a
//! spool replay after a crash, even after an insert that failed half-way) adds no row twice,
//! and queries need no `FINAL`. This holds when inserts of the same (campaign, agent) are not
//! run concurrently (the coordinator's sink drains its spool in order), and, on a cluster, when
//! inserts into the Distributed tables are synchronous (`insert_distributed_sync = 1` on the
//! client) so the check sees earlier inserts. Should a duplicate row still get in (two
//! coordinators racing), it has the same sorting key and partition as its twin, and
//! `ReplacingMergeTree` drops it at the next merge; [`super::query::counts`] reports any
//! duplicate still visible.

use std::collections::HashSet;
use std::time::Duration;

use hdrhistogram::Histogram;
use latmesh_core::hist::HistKey;
use latmesh_core::record::ProbeRecord;

use super::rows::{AgentRow, CampaignRow, HistogramRow, RequestRow};
use super::{StoreError, check_identifier};

/// Time allowed to send each chunk of an insert's body.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for the server to acknowledge an insert after its last byte.
const END_TIMEOUT: Duration = Duration::from_secs(120);

/// Labels a coordinator-clock time (UTC µs) with its named window (e.g. `peak`), `""` for none.
pub type WindowLabel = dyn Fn(i64) -> String + Send + Sync;

/// Which batch rows belong to, and how to stamp them.
#[derive(Clone, Copy)]
pub struct BatchKey<'a> {
    /// Campaign id.
    pub campaign_id: &'a str,
    /// Agent id.
    pub agent_id: &'a str,
    /// The agent's region.
    pub region: &'a str,
    /// The batch's clock offset: coordinator clock − agent clock, µs.
    pub clock_offset_us: i64,
    /// The batch's sequence number (1, 2, … per campaign and agent).
    pub seq: u64,
    /// Window labeller; `None` stores `""`.
    pub window_label: Option<&'a WindowLabel>,
}

impl std::fmt::Debug for BatchKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchKey")
            .field("campaign_id", &self.campaign_id)
            .field("agent_id", &self.agent_id)
            .field("region", &self.region)
            .field("clock_offset_us", &self.clock_offset_us)
            .field("seq", &self.seq)
            .field("window_label", &self.window_label.is_some())
            .finish()
    }
}

impl<'a> BatchKey<'a> {
    /// A key without window labels.
    pub fn new(
        campaign_id: &'a str,
        agent_id: &'a str,
        region: &'a str,
        clock_offset_us: i64,
        seq: u64,
    ) -> Self {
        BatchKey {
            campaign_id,
            agent_id,
            region,
            clock_offset_us,
            seq,
            window_label: None,
        }
    }

    /// The same key, labelling rows with `label`.
    pub fn with_window_label(mut self, label: &'a WindowLabel) -> Self {
        self.window_label = Some(label);
        self
    }

    /// The window label of coordinator-clock time `coord_unix_us`.
    pub(crate) fn window_for(&self, coord_unix_us: i64) -> String {
        self.window_label
            .map(|f| f(coord_unix_us))
            .unwrap_or_default()
    }
}

/// One interval histogram of a batch: key, histogram, interval start and end on the agent's
/// clock (UTC µs) — what `latmesh_core::wire::histogram_from_pb` and the `IntervalHistogram`
/// message carry.
pub type IntervalHistogram = (HistKey, Histogram<u64>, i64, i64);

/// What [`insert_batch`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Rows were written: `requests` and `histograms` rows inserted now; `skipped` rows of the
    /// batch were already there (a batch partly written by an earlier, failed attempt).
    Inserted {
        /// `requests` rows inserted.
        requests: u64,
        /// `histograms` rows inserted.
        histograms: u64,
        /// Rows of the batch found already present and not inserted again.
        skipped: u64,
    },
    /// Every row of the batch was already present: nothing was written.
    AlreadyPresent,
}

impl InsertOutcome {
    /// Rows written by this call.
    pub fn rows(&self) -> u64 {
        match self {
            InsertOutcome::Inserted {
                requests,
                histograms,
                ..
            } => requests + histograms,
            InsertOutcome::AlreadyPresent => 0,
        }
    }
}

/// Inserts `rows` into `db.table` in one `INSERT` (RowBinary, LZ4). Nothing is sent for no rows.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db` or `table`; the server's or connection's error
/// otherwise (see [`StoreError::is_retryable`]). A failed insert may have written some of the
/// rows (an insert is atomic per partition only).
pub async fn insert_rows<R>(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    rows: &[R],
) -> Result<(), StoreError>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    check_identifier(db)?;
    check_identifier(table)?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut insert = client
        .insert_unescaped::<R>(&format!("{db}.{table}"))
        .await?
        .with_timeouts(Some(SEND_TIMEOUT), Some(END_TIMEOUT));
    for row in rows {
        insert.write(row).await?;
    }
    insert.end().await?;
    Ok(())
}

/// Row indexes of batch `key` already present in `db.table`.
async fn present_rows(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    key: &BatchKey<'_>,
) -> Result<HashSet<u32>, StoreError> {
    let rows: Vec<u32> = client
        .query(&format!(
            "SELECT row_index FROM {db}.{table} WHERE campaign_id = ? AND agent_id = ? AND seq = ?"
        ))
        .bind(key.campaign_id)
        .bind(key.agent_id)
        .bind(key.seq)
        .fetch_all()
        .await?;
    Ok(rows.into_iter().collect())
}

/// Writes one result batch: `records` into `requests` (row index = position in `records`) and
/// `histograms` into `histograms` (row index = position in `histograms`), skipping every row
/// already present (see the module docs for the guarantee). Send times are stored on the
/// agent's clock and, corrected with `key.clock_offset_us`, on the coordinator's.
///
/// Returns [`InsertOutcome::AlreadyPresent`] when the whole batch was there, else the rows
/// written. An empty batch writes nothing and returns `Inserted` with zeros.
///
/// # Errors
/// [`StoreError::Histogram`] if a histogram cannot be encoded (before anything is written);
/// [`StoreError::InvalidName`] for a bad `db`; otherwise the server's or connection's error,
/// retryable or not ([`StoreError::is_retryable`]): calling again after any error is safe.
pub async fn insert_batch(
    client: &clickhouse::Client,
    db: &str,
    key: &BatchKey<'_>,
    records: &[ProbeRecord],
    histograms: &[IntervalHistogram],
) -> Result<InsertOutcome, StoreError> {
    check_identifier(db)?;
    let mut hist_rows = Vec::with_capacity(histograms.len());
    for (i, (hk, h, start, end)) in histograms.iter().enumerate() {
        hist_rows.push(HistogramRow::from_histogram(
            key,
            row_index(i),
            hk,
            h,
            *start,
            *end,
        )?);
    }
    if records.is_empty() && hist_rows.is_empty() {
        return Ok(InsertOutcome::Inserted {
            requests: 0,
            histograms: 0,
            skipped: 0,
        });
    }

    let mut skipped = 0u64;
    let present = if records.is_empty() {
        HashSet::new()
    } else {
        present_rows(client, db, "requests", key).await?
    };
    let req_rows: Vec<RequestRow> = records
        .iter()
        .enumerate()
        .filter(|(i, _)| !present.contains(&row_index(*i)))
        .map(|(i, rec)| RequestRow::from_record(key, row_index(i), rec))
        .collect();
    skipped += (records.len() - req_rows.len()) as u64;

    let present = if hist_rows.is_empty() {
        HashSet::new()
    } else {
        present_rows(client, db, "histograms", key).await?
    };
    let before = hist_rows.len();
    hist_rows.retain(|r| !present.contains(&r.row_index));
    skipped += (before - hist_rows.len()) as u64;

    if req_rows.is_empty() && hist_rows.is_empty() {
        return Ok(InsertOutcome::AlreadyPresent);
    }
    insert_rows(client, db, "requests", &req_rows).await?;
    insert_rows(client, db, "histograms", &hist_rows).await?;
    Ok(InsertOutcome::Inserted {
        requests: req_rows.len() as u64,
        histograms: hist_rows.len() as u64,
        skipped,
    })
}

fn row_index(i: usize) -> u32 {
    u32::try_from(i).expect("a batch holds fewer than 2^32 rows")
}

/// Writes (or rewrites: the row with the latest `launched_at_us` wins) a campaign.
///
/// # Errors
/// As [`insert_rows`].
pub async fn insert_campaign(
    client: &clickhouse::Client,
    db: &str,
    campaign: &CampaignRow,
) -> Result<(), StoreError> {
    insert_rows(client, db, "campaigns", std::slice::from_ref(campaign)).await
}

/// Writes agent states (the row with the latest `seen_at_us` per (campaign, agent) wins).
///
/// # Errors
/// As [`insert_rows`].
pub async fn insert_agents(
    client: &clickhouse::Client,
    db: &str,
    agents: &[AgentRow],
) -> Result<(), StoreError> {
    insert_rows(client, db, "agents", agents).await
}
