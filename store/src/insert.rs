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
//!
//! # Skipping the presence query ([`SeqMarks`])
//! A long-running writer (the coordinator's sink) passes a [`SeqMarks`] to
//! [`insert_prepared`]. For each (campaign, agent) it holds a bound `M` such that every row of
//! that pair in `requests` and `histograms` has `seq ≤ M`. The bound is established by reading
//! `max(seq)` of the pair from both tables (in a call that also runs the presence query as
//! above), and after each call that fully succeeds it becomes `max(M, seqs of the call)`. A
//! batch whose seq is **greater than** its pair's bound cannot have rows in the tables, so the
//! presence query is skipped for it; every other batch (seq ≤ M, a pair without a bound) is
//! checked as above. Any error (a query or an insert, retryable or not) forgets every bound, so
//! after an error — and in a new process, which starts with none — the next call queries
//! again. This relies on the condition above (no concurrent inserts of the same pair, by this
//! or another process, while the marks are held).
//!
//! # Inserts that outlive their timeout
//! Every call is bounded ([`Timeouts`]); an insert that timed out may still be executed by
//! the server when it resumes. So every result insert carries a query id naming its batches,
//! and a writer that is in doubt (new, or after any error) waits for the server to have no
//! result insert running before it reads which rows are present: see [`super::fence`]. A new
//! [`SeqMarks`] is in doubt; every error puts it back in doubt.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use hdrhistogram::Histogram;
use latmesh_core::hist::HistKey;
use latmesh_core::record::ProbeRecord;

use super::fence::{self, Doubt};
use super::rows::{AgentRow, CampaignRow, HistogramRow, RequestRow};
use super::{StoreError, Timeouts, bounded, check_identifier};

pub use super::batch_key::{BatchKey, WindowLabel};

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

/// Inserts `rows` into `db.table` in one `INSERT` (RowBinary; LZ4 unless the client says
/// otherwise, see [`super::client`]), bounded by the default [`Timeouts`] (each chunk of the
/// body: [`Timeouts::query`]; the acknowledgement: [`Timeouts::insert`]). Nothing is sent
/// for no rows.
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
    insert_rows_within(client, db, table, rows, &Timeouts::default()).await
}

/// [`insert_rows`] bounded by `timeouts`.
///
/// # Errors
/// As [`insert_rows`]; [`StoreError::TimedOut`] when a bound elapsed.
pub async fn insert_rows_within<R>(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    rows: &[R],
    timeouts: &Timeouts,
) -> Result<(), StoreError>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    let refs: Vec<&R> = rows.iter().collect();
    insert_row_refs(client, db, table, &refs, None, timeouts).await
}

/// [`insert_rows`] of borrowed rows, with `query_id` when given (see [`fence`]).
pub(crate) async fn insert_row_refs<R>(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    rows: &[&R],
    query_id: Option<&str>,
    timeouts: &Timeouts,
) -> Result<(), StoreError>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    check_identifier(db)?;
    check_identifier(table)?;
    if rows.is_empty() {
        return Ok(());
    }
    let end_timeout = timeouts.insert(rows.len());
    let timed_out = |e: clickhouse::error::Error| match e {
        clickhouse::error::Error::TimedOut => StoreError::TimedOut {
            what: format!(
                "inserting {} row{} into {db}.{table}{}",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" },
                query_id
                    .map(|q| format!(" (query_id {q})"))
                    .unwrap_or_default()
            ),
            after: end_timeout,
        },
        e => e.into(),
    };
    let mut insert = client
        .insert_unescaped::<R>(&format!("{db}.{table}"))
        .await?
        .with_timeouts(Some(timeouts.query), Some(end_timeout));
    if let Some(id) = query_id {
        insert = insert.with_setting("query_id", id);
    }
    for row in rows {
        insert.write(row).await.map_err(timed_out)?;
    }
    insert.end().await.map_err(timed_out)?;
    Ok(())
}

/// Batches whose presence one query checks.
const PRESENCE_CHUNK: usize = 100;

/// `(campaign_id, agent_id, seq)`, owned.
type BatchId = (String, String, u64);

fn batch_id(key: &BatchKey<'_>) -> BatchId {
    (
        key.campaign_id.to_string(),
        key.agent_id.to_string(),
        key.seq,
    )
}

/// Row indexes already present in `db.table`, per batch of `keys`; each query bounded by
/// `timeout`.
async fn present_rows(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    keys: &[&BatchKey<'_>],
    timeout: Duration,
) -> Result<HashMap<BatchId, HashSet<u32>>, StoreError> {
    let mut out: HashMap<BatchId, HashSet<u32>> = HashMap::new();
    for chunk in keys.chunks(PRESENCE_CHUNK) {
        let cond = vec!["(campaign_id = ? AND agent_id = ? AND seq = ?)"; chunk.len()].join(" OR ");
        let mut q = client.query(&format!(
            "SELECT campaign_id, agent_id, seq, row_index FROM {db}.{table} WHERE {cond}"
        ));
        for k in chunk {
            q = q.bind(k.campaign_id).bind(k.agent_id).bind(k.seq);
        }
        let found = bounded(
            timeout,
            || {
                format!(
                    "checking which rows of {} batches {db}.{table} holds",
                    chunk.len()
                )
            },
            q.fetch_all::<(String, String, u64, u32)>(),
        )
        .await?;
        for (campaign, agent, seq, row) in found {
            out.entry((campaign, agent, seq)).or_default().insert(row);
        }
    }
    Ok(out)
}

/// What a long-running writer remembers between calls: per (campaign, agent), an upper bound
/// of the seqs stored in `requests` and `histograms` (see the module docs, "Skipping the
/// presence query"), and whether an insert of its own may still run on the server (see
/// [`fence`]).
#[derive(Debug)]
pub struct SeqMarks {
    marks: HashMap<(String, String), u64>,
    doubt: Doubt,
}

impl Default for SeqMarks {
    fn default() -> Self {
        SeqMarks {
            marks: HashMap::new(),
            doubt: Doubt::Unknown,
        }
    }
}

impl SeqMarks {
    /// No bounds, in doubt ([`Doubt::Unknown`]): the next call waits for running inserts,
    /// then queries every batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every bound and puts the writer in doubt ([`Doubt::Failed`]): called on every
    /// error.
    pub fn clear(&mut self) {
        self.marks.clear();
        self.doubt = Doubt::Failed;
    }

    /// Whether inserts of this writer may still run on the server.
    pub fn doubt(&self) -> Doubt {
        self.doubt
    }

    /// The bound of (campaign, agent), if known.
    pub fn get(&self, campaign_id: &str, agent_id: &str) -> Option<u64> {
        self.marks
            .get(&(campaign_id.to_string(), agent_id.to_string()))
            .copied()
    }

    /// Whether batch `key` is known to have no row stored (its seq is above its pair's bound).
    fn above(&self, key: &BatchKey<'_>) -> bool {
        self.get(key.campaign_id, key.agent_id)
            .is_some_and(|m| key.seq > m)
    }
}

/// `max(seq)` per (campaign, agent) of `pairs` in `db.table` (pairs without rows are absent);
/// each query bounded by `timeout`.
async fn max_seqs(
    client: &clickhouse::Client,
    db: &str,
    table: &str,
    pairs: &[(String, String)],
    timeout: Duration,
) -> Result<HashMap<(String, String), u64>, StoreError> {
    let mut out = HashMap::new();
    for chunk in pairs.chunks(PRESENCE_CHUNK) {
        let cond = vec!["(campaign_id = ? AND agent_id = ?)"; chunk.len()].join(" OR ");
        let mut q = client.query(&format!(
            "SELECT campaign_id, agent_id, max(seq) FROM {db}.{table} WHERE {cond} \
             GROUP BY campaign_id, agent_id"
        ));
        for (c, a) in chunk {
            q = q.bind(c.as_str()).bind(a.as_str());
        }
        let found = bounded(
            timeout,
            || {
                format!(
                    "reading the highest stored seq of {} agents in {db}.{table}",
                    chunk.len()
                )
            },
            q.fetch_all::<(String, String, u64)>(),
        )
        .await?;
        for (campaign, agent, seq) in found {
            out.insert((campaign, agent), seq);
        }
    }
    Ok(out)
}

/// One result batch with its histogram rows already built, for [`insert_prepared`] (which
/// only borrows them, so a failed call can be retried with the same batches).
#[derive(Clone, Copy, Debug)]
pub struct PreparedBatch<'a> {
    /// Which batch, and how to stamp its rows.
    pub key: BatchKey<'a>,
    /// Its records, in batch order (row index = position).
    pub records: &'a [ProbeRecord],
    /// Its `histograms` rows, in batch order (`row_index` = position), stamped with `key`.
    pub histograms: &'a [HistogramRow],
}

/// One result batch for [`insert_batches`].
#[derive(Clone, Copy, Debug)]
pub struct BatchInput<'a> {
    /// Which batch, and how to stamp its rows.
    pub key: BatchKey<'a>,
    /// Its records, in batch order (row index = position).
    pub records: &'a [ProbeRecord],
    /// Its interval histograms, in batch order (row index = position).
    pub histograms: &'a [IntervalHistogram],
}

/// Writes one result batch: [`insert_batches`] of just this one.
///
/// # Errors
/// As [`insert_batches`].
pub async fn insert_batch(
    client: &clickhouse::Client,
    db: &str,
    key: &BatchKey<'_>,
    records: &[ProbeRecord],
    histograms: &[IntervalHistogram],
) -> Result<InsertOutcome, StoreError> {
    let input = BatchInput {
        key: *key,
        records,
        histograms,
    };
    let mut out = insert_batches(client, db, &[input]).await?;
    Ok(out.pop().expect("one outcome per batch"))
}

/// Writes result batches: each batch's records into `requests` (row index = position in
/// `records`) and its histograms into `histograms` (row index = position in `histograms`),
/// skipping every row already present (see the module docs for the guarantee), with one
/// presence query per table (per 100 batches) and one `INSERT` per table for all of them —
/// on 18.16 an `INSERT` costs tens of ms whatever its size (a part of ~80 files), so a sink
/// should pass many batches at once. Send times are stored on the agent's clock and,
/// corrected with `key.clock_offset_us`, on the coordinator's.
///
/// Returns one outcome per batch, in order: [`InsertOutcome::AlreadyPresent`] when the whole
/// batch was there (or appeared earlier in `batches`), else the rows written. An empty batch
/// writes nothing and gets `Inserted` with zeros.
///
/// # Errors
/// [`StoreError::Histogram`] if a histogram cannot be encoded (before anything is written);
/// [`StoreError::InvalidName`] for a bad `db`; otherwise the server's or connection's error,
/// retryable or not ([`StoreError::is_retryable`]): calling again after any error is safe, and
/// writes what the failed call did not.
pub async fn insert_batches(
    client: &clickhouse::Client,
    db: &str,
    batches: &[BatchInput<'_>],
) -> Result<Vec<InsertOutcome>, StoreError> {
    check_identifier(db)?;
    // Encode every histogram first: a codec failure must not leave a half-written call.
    let mut rows: Vec<Vec<HistogramRow>> = Vec::with_capacity(batches.len());
    for b in batches {
        let mut hist_rows = Vec::with_capacity(b.histograms.len());
        for (i, (hk, h, start, end)) in b.histograms.iter().enumerate() {
            hist_rows.push(HistogramRow::from_histogram(
                &b.key,
                row_index(i),
                hk,
                h,
                *start,
                *end,
            )?);
        }
        rows.push(hist_rows);
    }
    let prepared: Vec<PreparedBatch<'_>> = batches
        .iter()
        .zip(&rows)
        .map(|(b, hist_rows)| PreparedBatch {
            key: b.key,
            records: b.records,
            histograms: hist_rows,
        })
        .collect();
    insert_prepared(client, db, &prepared, None, &Timeouts::default()).await
}

/// [`insert_batches`] of batches whose histogram rows are built, every call bounded by
/// `timeouts`; with `marks`, skips the presence query for batches above their (campaign,
/// agent) bound and keeps the bounds up to date (see the module docs, "Skipping the presence
/// query"). Every error clears `marks` and puts it in doubt. Before its presence queries a
/// call in doubt (without `marks`: always, one check) waits until no insert into `db` runs on
/// the server ([`fence::settle`]); its inserts carry [`fence::insert_query_id`]s.
/// The `requests` and `histograms` INSERTs run at the same time (two HTTP requests: the
/// server parses and writes both in parallel); the call succeeds only when both do.
///
/// # Errors
/// As [`insert_batches`]. After an error either table may hold some of the rows; calling
/// again with the same batches writes the rest (the presence query runs again, since the
/// error cleared `marks`).
pub async fn insert_prepared(
    client: &clickhouse::Client,
    db: &str,
    batches: &[PreparedBatch<'_>],
    mut marks: Option<&mut SeqMarks>,
    timeouts: &Timeouts,
) -> Result<Vec<InsertOutcome>, StoreError> {
    let result = insert_prepared_inner(client, db, batches, marks.as_deref_mut(), timeouts).await;
    if let Some(m) = marks {
        match &result {
            Ok(_) => m.doubt = Doubt::Settled,
            Err(_) => m.clear(),
        }
    }
    result
}

async fn insert_prepared_inner(
    client: &clickhouse::Client,
    db: &str,
    batches: &[PreparedBatch<'_>],
    marks: Option<&mut SeqMarks>,
    timeouts: &Timeouts,
) -> Result<Vec<InsertOutcome>, StoreError> {
    check_identifier(db)?;
    // Nothing is read before an insert this writer may have abandoned has ended (see `fence`).
    let doubt = marks.as_deref().map_or(Doubt::Unknown, SeqMarks::doubt);
    fence::settle(client, db, doubt, timeouts).await?;
    // A batch given twice in one call is written once.
    let mut seen = HashSet::new();
    let first: Vec<bool> = batches
        .iter()
        .map(|b| seen.insert(batch_id(&b.key)))
        .collect();
    // Batches known to have no stored row need no presence query.
    let unstored: Vec<bool> = batches
        .iter()
        .map(|b| marks.as_deref().is_some_and(|m| m.above(&b.key)))
        .collect();
    // Pairs without a bound: read their max(seq) now, before anything is written.
    let mut new_bounds: HashMap<(String, String), u64> = HashMap::new();
    if let Some(m) = marks.as_deref() {
        let mut unknown: Vec<(String, String)> = Vec::new();
        let mut listed = HashSet::new();
        for b in batches {
            let pair = (b.key.campaign_id.to_string(), b.key.agent_id.to_string());
            if m.get(&pair.0, &pair.1).is_none() && listed.insert(pair.clone()) {
                unknown.push(pair);
            }
        }
        if !unknown.is_empty() {
            for pair in &unknown {
                new_bounds.insert(pair.clone(), 0);
            }
            for table in ["requests", "histograms"] {
                for (pair, seq) in max_seqs(client, db, table, &unknown, timeouts.query).await? {
                    let e = new_bounds.entry(pair).or_insert(0);
                    *e = (*e).max(seq);
                }
            }
        }
    }
    let with_records: Vec<&BatchKey<'_>> = batches
        .iter()
        .zip(first.iter().zip(&unstored))
        .filter(|(b, (f, u))| **f && !**u && !b.records.is_empty())
        .map(|(b, _)| &b.key)
        .collect();
    let with_hists: Vec<&BatchKey<'_>> = batches
        .iter()
        .zip(first.iter().zip(&unstored))
        .filter(|(b, (f, u))| **f && !**u && !b.histograms.is_empty())
        .map(|(b, _)| &b.key)
        .collect();
    let present_req = if with_records.is_empty() {
        HashMap::new()
    } else {
        present_rows(client, db, "requests", &with_records, timeouts.query).await?
    };
    let present_hist = if with_hists.is_empty() {
        HashMap::new()
    } else {
        present_rows(client, db, "histograms", &with_hists, timeouts.query).await?
    };

    // Seqs of the call per pair, for the new bounds.
    let mut call_max: HashMap<(String, String), u64> = HashMap::new();
    if marks.is_some() {
        for b in batches {
            let e = call_max
                .entry((b.key.campaign_id.to_string(), b.key.agent_id.to_string()))
                .or_insert(0);
            *e = (*e).max(b.key.seq);
        }
    }

    let none = HashSet::new();
    let mut req_out: Vec<RequestRow> = Vec::new();
    let mut hist_out: Vec<&HistogramRow> = Vec::new();
    let mut outcomes = Vec::with_capacity(batches.len());
    for (b, is_first) in batches.iter().zip(first) {
        let rows = b.histograms;
        if b.records.is_empty() && rows.is_empty() {
            outcomes.push(InsertOutcome::Inserted {
                requests: 0,
                histograms: 0,
                skipped: 0,
            });
            continue;
        }
        if !is_first {
            outcomes.push(InsertOutcome::AlreadyPresent);
            continue;
        }
        let id = batch_id(&b.key);
        let have = present_req.get(&id).unwrap_or(&none);
        let before = req_out.len();
        req_out.extend(
            b.records
                .iter()
                .enumerate()
                .filter(|(i, _)| !have.contains(&row_index(*i)))
                .map(|(i, rec)| RequestRow::from_record(&b.key, row_index(i), rec)),
        );
        let requests = (req_out.len() - before) as u64;
        let have = present_hist.get(&id).unwrap_or(&none);
        let total_hists = rows.len();
        let before = hist_out.len();
        hist_out.extend(rows.iter().filter(|r| !have.contains(&r.row_index)));
        let histograms = (hist_out.len() - before) as u64;
        let skipped = (b.records.len() + total_hists) as u64 - requests - histograms;
        outcomes.push(if requests + histograms == 0 {
            InsertOutcome::AlreadyPresent
        } else {
            InsertOutcome::Inserted {
                requests,
                histograms,
                skipped,
            }
        });
    }
    // Both run to their end even when one fails (an insert dropped half-way could still be
    // committed by the server), and each carries the query id of its batches, the same on a
    // retry (see `fence`).
    let keys = || batches.iter().map(|b| &b.key);
    let req_id = fence::insert_query_id(db, "requests", keys());
    let hist_id = fence::insert_query_id(db, "histograms", keys());
    let req_refs: Vec<&RequestRow> = req_out.iter().collect();
    let (requests, histograms) = tokio::join!(
        insert_row_refs(client, db, "requests", &req_refs, Some(&req_id), timeouts),
        insert_row_refs(
            client,
            db,
            "histograms",
            &hist_out,
            Some(&hist_id),
            timeouts
        ),
    );
    requests.and(histograms)?;
    if let Some(m) = marks {
        for (pair, seq) in new_bounds {
            let e = m.marks.entry(pair).or_insert(0);
            *e = (*e).max(seq);
        }
        for (pair, seq) in call_max {
            // Only pairs with a bound (held before, or read above) get one.
            if let Some(e) = m.marks.get_mut(&pair) {
                *e = (*e).max(seq);
            }
        }
    }
    Ok(outcomes)
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
