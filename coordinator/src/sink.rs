//! Drains the coordinator's durable spool into ClickHouse.
//!
//! Two tasks, in spool order. A reader reads a round of entries (up to 256 entries or about
//! 8 MiB of batches, whichever comes first) and decodes it on the blocking pool, one round
//! ahead of the writer (at most one decoded round waits). The writer inserts a round with one
//! INSERT per table, both tables at once (`clickhouse::insert_prepared` skips rows already
//! present, so a replay after a crash or a retry after a half-failed insert adds nothing
//! twice), then commits the spool past it. So the coordinator's CPU work on round n + 1
//! overlaps ClickHouse's work on round n, and neither blocks the coordinator's runtime.
//! Histogram rows keep the agent's V2 blob as sent (decoded once, for the bucket arrays).
//! The sink keeps a [`SeqMarks`] across rounds, so once a (campaign, agent) has a bound, the
//! "already present?" query is skipped for its batches with a seq above the bound; any failed
//! insert or query forgets the bounds (see `clickhouse::insert`, "Skipping the presence
//! query").
//! Every ClickHouse call is bounded ([`store::Timeouts`]: a server that accepts connections
//! but never answers fails the call, which is retried), and an insert abandoned at its bound
//! cannot be stored twice (`clickhouse::fence`). While ClickHouse does not answer, [`health`]
//! says so in the log within seconds, and again with backoff, and says when the spool is
//! drained after it came back.
//! While ClickHouse is unreachable the task retries with backoff (up to 10 s) and the spool
//! grows, bounded by its size cap (the coordinator then withholds acks and agents keep their
//! batches). A batch the server rejects as bad data is logged and skipped: retrying cannot
//! help, and it must not block everything behind it. A refusal that is the tables' fault (a
//! missing column, table or database: `StoreError::is_schema_mismatch`) is not the batch's:
//! the rows stay in the spool and the sink retries, logging an error, until the schema is
//! fixed (`latmesh db migrate`). Campaign and agent rows
//! ([`StoreEvent`]s) are written the same way, with retries.
//!
//! # Time windows
//! Every `requests` and `histograms` row is labelled with its named time window
//! ([`latmesh_core::windows`]) in its region's local time: requests by their send time on the
//! coordinator's clock (`send_coord_unix_us`), histograms by their interval start corrected
//! with the batch's clock offset. The sink keeps each campaign's [`WindowSpec`], learnt from
//! the [`StoreEvent::Launched`] events it drains (always before the campaign's first batch
//! reaches the spool). A batch of a campaign it did not see launched — spooled before a
//! coordinator restart — takes the spec from the plan stored in the `campaigns` table; a
//! campaign found in neither place (launched by a coordinator whose campaign row never reached
//! ClickHouse) gets `""` labels, as do campaigns without windows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use latmesh_core::plan::Plan;
use latmesh_core::record::ProbeRecord;
use latmesh_core::windows::WindowSpec;

pub use crate::store_health as health;

use crate::metrics::{CoordinatorMetrics, Table};
use crate::spool::{Entry, Spool};
use crate::state::{State, StoreEvent, now_unix_us};
use health::StoreHealth;
use latmesh_store::insert::{PreparedBatch, SeqMarks};
use latmesh_store::{
    self as store, BatchKey, HistogramRow, StoreError, Timeouts, WindowLabel, bounded,
};

/// File in the spool directory holding campaign events not yet stored.
pub const EVENTS_FILE: &str = "pending-events.jsonl";

/// Entries read from the spool per read call.
const READ_CHUNK: usize = 64;
/// Most entries in one round (one INSERT per table).
const ROUND_MAX_ENTRIES: usize = 256;
/// A round stops growing once its batches reach this many bytes (protobuf size). Smaller
/// rounds pipeline better (the reader's decoding overlaps more of the inserts), larger ones pay
/// the per-INSERT cost less often: 8 MiB drained 2,000-record batches 10 % faster than 32 MiB
/// and as fast as 4 MiB (BENCHMARKS.md, "Sink throughput").
const ROUND_MAX_BYTES: usize = 8 << 20;
/// Pause when the spool is empty.
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Longest pause between retries while ClickHouse is down.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Where the sink writes.
#[derive(Clone, Debug)]
pub struct SinkTarget {
    /// ClickHouse client.
    pub client: clickhouse::Client,
    /// Its HTTP URL (for logs).
    pub url: String,
    /// Database name.
    pub db: String,
    /// Bounds of every call (the client's connect bound is set when it is built).
    pub timeouts: Timeouts,
}

impl SinkTarget {
    /// Database `db` of the ClickHouse at `url`, every call bounded by `timeouts`.
    pub fn new(url: &str, db: &str, timeouts: Timeouts) -> Self {
        Self::with_client(store::client_with(url, &timeouts), url, db, timeouts)
    }

    /// Database `db` through `client` (a client of `url`, which only names it in logs).
    pub fn with_client(
        client: clickhouse::Client,
        url: &str,
        db: &str,
        timeouts: Timeouts,
    ) -> Self {
        SinkTarget {
            client,
            url: url.to_string(),
            db: db.to_string(),
            timeouts,
        }
    }
}

/// A coordinator whose acked batches go through a spool in `spool_dir` (at most
/// `spool_max_bytes` pending) into ClickHouse `target`; returns it, the spool (to watch it
/// drain) and the sink task.
///
/// # Errors
/// The spool cannot be opened.
pub fn coordinator_with_sink(
    spool_dir: &std::path::Path,
    spool_max_bytes: u64,
    target: SinkTarget,
) -> anyhow::Result<(
    crate::service::Coordinator,
    Arc<Spool>,
    tokio::task::JoinHandle<()>,
)> {
    use anyhow::Context as _;
    let spool = Spool::open(crate::spool::SpoolConfig::new(
        spool_dir.to_path_buf(),
        spool_max_bytes,
    ))
    .with_context(|| format!("opening the spool in {}", spool_dir.display()))?;
    let spool = Arc::new(spool);
    let state = State::with_event_queue(crate::events::EventQueue::open(
        &spool_dir.join(EVENTS_FILE),
    )?);
    let metrics = CoordinatorMetrics::default();
    let health = StoreHealth::new();
    let sink = tokio::spawn(run_with_health(
        spool.clone(),
        state.clone(),
        target,
        metrics.clone(),
        health.clone(),
    ));
    Ok((
        crate::service::Coordinator::with_spool(state, spool.clone())
            .with_metrics(metrics)
            .with_store_health(health),
        spool,
        sink,
    ))
}

/// Brings the schema up to date (retrying while ClickHouse is unreachable), then drains the
/// spool until the task is aborted.
pub async fn run(spool: Arc<Spool>, state: State, target: SinkTarget) {
    run_with_metrics(spool, state, target, CoordinatorMetrics::default()).await;
}

/// [`run`], counting the rows it inserts into `metrics`
/// (`latmesh_coordinator_clickhouse_rows_inserted_total`).
pub async fn run_with_metrics(
    spool: Arc<Spool>,
    state: State,
    target: SinkTarget,
    metrics: CoordinatorMetrics,
) {
    run_with_health(spool, state, target, metrics, StoreHealth::new()).await;
}

/// [`run_with_metrics`], reporting whether ClickHouse answers into `health` (and logging it,
/// see [`health`]).
async fn run_with_health(
    spool: Arc<Spool>,
    state: State,
    target: SinkTarget,
    metrics: CoordinatorMetrics,
    health: Arc<StoreHealth>,
) {
    let watcher = tokio::spawn(health::watch(
        health.clone(),
        spool.clone(),
        target.url.clone(),
    ));
    let _abort_watcher = AbortOnDrop(watcher);
    let mut backoff = Duration::from_millis(250);
    loop {
        health.attempt("applying the schema migrations");
        match store::migrate_within(&target.client, &target.db, None, &target.timeouts).await {
            Ok(applied) => {
                health.answered(0);
                if !applied.is_empty() {
                    tracing::info!(db = %target.db, ?applied, "ClickHouse migrations applied");
                }
                break;
            }
            Err(e) if e.is_retryable() => {
                health.failed(&e);
                tracing::warn!(clickhouse_url = %target.url, error = %e, retry_in_ms = backoff.as_millis() as u64, "ClickHouse unavailable for migrations");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => {
                tracing::error!(clickhouse_url = %target.url, error = %e, "ClickHouse migrations failed; results stay in the spool");
                return;
            }
        }
    }
    // The reader reads and decodes the next round while the writer inserts this one.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Round>(1);
    let reader = tokio::spawn(read_ahead(
        spool.clone(),
        state.clone(),
        target.clone(),
        tx,
        health.clone(),
    ));
    let _abort_reader = AbortOnDrop(reader);
    let mut marks = SeqMarks::new();
    while let Some(round) = rx.recv().await {
        write_round(
            &spool, &state, &target, round, &mut marks, &metrics, &health,
        )
        .await;
    }
    tracing::error!("the spool reader stopped; nothing more is stored");
}

/// Aborts a task when dropped (the sink's reader ends with the sink).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the writer stores next, in order: campaign events, then a round of spooled batches.
struct Round {
    /// Campaign and agent rows queued since the previous round (drained after the batches
    /// were read, so every campaign of the batches was learnt before they were decoded).
    events: Vec<StoreEvent>,
    /// The spool entries of the round, in spool order.
    entries: Vec<Entry>,
    /// The entries that decoded, each with its rows.
    decoded: Vec<Decoded>,
}

/// Reads rounds from the spool ahead of the writer (at most one round waits in `tx`), learns
/// campaigns' windows, and decodes each round on the blocking pool.
async fn read_ahead(
    spool: Arc<Spool>,
    state: State,
    target: SinkTarget,
    tx: tokio::sync::mpsc::Sender<Round>,
    health: Arc<StoreHealth>,
) {
    let mut windows = Windows::default();
    let mut last_read: Option<u64> = None;
    loop {
        let entries = {
            let spool = spool.clone();
            tokio::task::spawn_blocking(move || read_round(&spool, last_read)).await
        };
        let entries = match entries {
            Ok(Ok(e)) => e,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot read the spool");
                tokio::time::sleep(MAX_BACKOFF).await;
                continue;
            }
            Err(e) => {
                tracing::error!(error = %e, "spool reader task failed");
                continue;
            }
        };
        // Events are drained after the read: a batch read now was spooled after its campaign's
        // launch queued `Launched`, so the campaign's windows are known before it is decoded.
        let events = state.drain_store_events();
        for ev in &events {
            windows.learn(ev);
        }
        if entries.is_empty() && events.is_empty() {
            tokio::time::sleep(IDLE_POLL).await;
            continue;
        }
        let mut backoff = Duration::from_millis(250);
        loop {
            if windows.knows_all(&entries) {
                break;
            }
            health.attempt("reading the windows of campaigns launched by an earlier process");
            let Err(e) = windows.ensure(&target, &entries).await else {
                health.answered(0);
                break;
            };
            health.failed(&e);
            tracing::warn!(clickhouse_url = %target.url, error = %e, retry_in_ms = backoff.as_millis() as u64, "ClickHouse unavailable: cannot read campaign windows; results stay in the spool");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        let labels: Vec<_> = entries
            .iter()
            .map(|e| windows.labeller(&e.batch.campaign_id, &e.region))
            .collect();
        let decoded = tokio::task::spawn_blocking(move || {
            let decoded = decode_round(&entries, labels);
            (entries, decoded)
        })
        .await;
        let round = match decoded {
            Ok((entries, decoded)) => {
                last_read = entries.last().map(|e| e.id).or(last_read);
                Round {
                    events,
                    entries,
                    decoded,
                }
            }
            Err(e) => {
                // Not expected (decoding returns errors for bad data, it does not panic): the
                // events still go to the writer, the entries are read again after a pause.
                tracing::error!(error = %e, "decoding a spool round failed");
                tokio::time::sleep(MAX_BACKOFF).await;
                Round {
                    events,
                    entries: Vec::new(),
                    decoded: Vec::new(),
                }
            }
        };
        if tx.send(round).await.is_err() {
            return;
        }
    }
}

/// Stores `round`: its events, then its batches, retrying with backoff while ClickHouse is
/// unavailable (the spool grows meanwhile), then commits the spool past the round.
async fn write_round(
    spool: &Arc<Spool>,
    state: &State,
    target: &SinkTarget,
    round: Round,
    marks: &mut SeqMarks,
    metrics: &CoordinatorMetrics,
    health: &StoreHealth,
) {
    let mut backoff = Duration::from_millis(250);
    let mut pending_events = round.events;
    loop {
        health.attempt(format!(
            "storing {} result batches and {} campaign/agent events",
            round.entries.len(),
            pending_events.len()
        ));
        // Campaign rows go first so a batch never lands without its campaign.
        let before = pending_events.len();
        let result = write_events(target, &mut pending_events, metrics).await;
        state.store_events_written(before - pending_events.len());
        let result = match result {
            Ok(()) if round.entries.is_empty() => Ok(()),
            Ok(()) => write_entries(target, &round.entries, &round.decoded, marks, metrics).await,
            Err(e) => Err(e),
        };
        match &result {
            // It answers, refusing: told by the error below, not as a stall.
            Err(e) if e.is_schema_mismatch() => health.answered(0),
            Err(e) => health.failed(e),
            Ok(()) => {}
        }
        match result {
            Ok(()) => {
                health.answered(round.entries.len() as u64);
                break;
            }
            Err(e) if e.is_schema_mismatch() => {
                tracing::error!(
                    clickhouse_url = %target.url,
                    error = %e,
                    db = %target.db,
                    pending_entries = spool.pending_entries(),
                    pending_bytes = spool.pending_bytes(),
                    retry_in_ms = backoff.as_millis() as u64,
                    "ClickHouse's tables do not match the rows (run `latmesh db migrate`, or fix a table changed by hand): results stay in the spool"
                );
            }
            Err(e) => {
                tracing::warn!(
                    clickhouse_url = %target.url,
                    error = %e,
                    pending_entries = spool.pending_entries(),
                    pending_bytes = spool.pending_bytes(),
                    retry_in_ms = backoff.as_millis() as u64,
                    "ClickHouse unavailable: results stay in the spool"
                );
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    if let Some(id) = round.entries.last().map(|e| e.id) {
        let spool = spool.clone();
        match tokio::task::spawn_blocking(move || spool.commit(id)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot commit the spool"),
            Err(e) => tracing::error!(error = %e, "spool commit task failed"),
        }
    }
}

/// The next round of unconsumed entries after `after_id` (from the commit point for `None`):
/// up to [`ROUND_MAX_ENTRIES`], stopping once they hold [`ROUND_MAX_BYTES`] (at least one
/// entry when any is pending).
fn read_round(
    spool: &Spool,
    after_id: Option<u64>,
) -> Result<Vec<Entry>, crate::spool::SpoolError> {
    use prost::Message as _;
    let mut out = spool.read_from(after_id, READ_CHUNK)?;
    let mut bytes: usize = out.iter().map(|e| e.batch.encoded_len()).sum();
    while out.len() < ROUND_MAX_ENTRIES && bytes < ROUND_MAX_BYTES {
        let Some(last) = out.last().map(|e| e.id) else {
            break;
        };
        let more = spool.read_from(Some(last), READ_CHUNK.min(ROUND_MAX_ENTRIES - out.len()))?;
        if more.is_empty() {
            break;
        }
        for e in more {
            if bytes >= ROUND_MAX_BYTES {
                break;
            }
            bytes += e.batch.encoded_len();
            out.push(e);
        }
    }
    Ok(out)
}

/// Writes queued campaign and agent rows; on a retryable error keeps the rest queued.
async fn write_events(
    target: &SinkTarget,
    events: &mut Vec<StoreEvent>,
    metrics: &CoordinatorMetrics,
) -> Result<(), StoreError> {
    while let Some(ev) = events.first() {
        let (table, rows) = match ev {
            StoreEvent::Launched { .. } => (Table::Campaigns, 1),
            StoreEvent::Finished { agents, .. } => (Table::Agents, agents.len() as u64),
        };
        let result = match ev {
            StoreEvent::Launched {
                campaign_id,
                plan,
                launched_at_unix_us,
                start_at_unix_us,
            } => {
                let row = store::rows::CampaignRow::new(
                    campaign_id,
                    plan,
                    *launched_at_unix_us,
                    *start_at_unix_us,
                    "latmesh",
                );
                store::insert::insert_rows_within(
                    &target.client,
                    &target.db,
                    "campaigns",
                    std::slice::from_ref(&row),
                    &target.timeouts,
                )
                .await
            }
            StoreEvent::Finished {
                campaign_id,
                agents,
            } => {
                let now = now_unix_us();
                let rows: Vec<_> = agents
                    .iter()
                    .map(|(a, version)| {
                        store::rows::AgentRow::from_summary(campaign_id, a, version, now)
                    })
                    .collect();
                store::insert::insert_rows_within(
                    &target.client,
                    &target.db,
                    "agents",
                    &rows,
                    &target.timeouts,
                )
                .await
            }
        };
        match result {
            Ok(()) => metrics.rows_inserted(table, rows),
            Err(e) if e.is_retryable() || e.is_schema_mismatch() => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, "ClickHouse rejected a campaign/agent row; skipped")
            }
        }
        events.remove(0);
    }
    Ok(())
}

/// The window spec of each campaign the sink knows (see the module docs).
#[derive(Default)]
struct Windows {
    specs: HashMap<String, Arc<WindowSpec>>,
}

impl Windows {
    /// Learns the windows of a launched campaign.
    fn learn(&mut self, ev: &StoreEvent) {
        if let StoreEvent::Launched {
            campaign_id, plan, ..
        } = ev
        {
            self.specs
                .insert(campaign_id.clone(), Arc::new(spec_of(campaign_id, plan)));
        }
    }

    /// Whether every campaign of `entries` has a spec.
    fn knows_all(&self, entries: &[Entry]) -> bool {
        entries
            .iter()
            .all(|e| self.specs.contains_key(&e.batch.campaign_id))
    }

    /// Makes sure every campaign of `entries` has a spec: unknown ones are looked up in the
    /// `campaigns` table (a campaign not stored there gets the empty spec, `""` labels).
    ///
    /// # Errors
    /// Retryable ClickHouse errors only (the batches then wait, as for a failed insert).
    async fn ensure(&mut self, target: &SinkTarget, entries: &[Entry]) -> Result<(), StoreError> {
        for e in entries {
            let id = &e.batch.campaign_id;
            if self.specs.contains_key(id) {
                continue;
            }
            let stored = bounded(
                target.timeouts.query,
                || format!("reading campaign {id} from {}.campaigns", target.db),
                store::query::campaign(&target.client, &target.db, id),
            )
            .await;
            let spec = match stored {
                Ok(Some(row)) => match serde_json::from_str::<Plan>(&row.plan_json) {
                    Ok(plan) => spec_of(id, &plan),
                    Err(err) => {
                        tracing::warn!(campaign = %id, error = %err, "stored plan does not parse; rows get no window label");
                        WindowSpec::default()
                    }
                },
                Ok(None) => {
                    tracing::warn!(campaign = %id, "campaign unknown to the sink and not in ClickHouse; its rows get no window label");
                    WindowSpec::default()
                }
                Err(err) if err.is_retryable() => return Err(err),
                Err(err) => {
                    tracing::warn!(campaign = %id, error = %err, "cannot read the stored campaign; rows get no window label");
                    WindowSpec::default()
                }
            };
            self.specs.insert(id.clone(), Arc::new(spec));
        }
        Ok(())
    }

    /// The labeller of rows of `campaign_id` from `region`; `None` (label `""`) for a campaign
    /// without windows or unknown.
    fn labeller(&self, campaign_id: &str, region: &str) -> Option<Arc<WindowLabel>> {
        let spec = self.specs.get(campaign_id)?;
        if !spec.has_windows() {
            return None;
        }
        let spec = spec.clone();
        let region = region.to_string();
        Some(Arc::new(move |coord_unix_us: i64| {
            spec.label(&region, coord_unix_us)
        }))
    }
}

/// The window spec of a plan; the empty one (logged) for a plan whose zones do not parse.
fn spec_of(campaign_id: &str, plan: &Plan) -> WindowSpec {
    WindowSpec::from_plan(plan).unwrap_or_else(|e| {
        tracing::warn!(campaign = %campaign_id, error = %e, "plan windows unusable; rows get no window label");
        WindowSpec::default()
    })
}

/// A spooled batch decoded for ClickHouse.
struct Decoded {
    /// Index of the batch's entry in its round.
    entry: usize,
    records: Vec<ProbeRecord>,
    /// Its `histograms` rows (built from the agent's blobs, see [`HistogramRow::from_pb`]).
    histograms: Vec<HistogramRow>,
    /// Window labeller of the batch's campaign and region, if it has windows.
    label: Option<Arc<WindowLabel>>,
}

/// The key of `entry`'s rows, labelled by `label`.
fn key_of<'a>(entry: &'a Entry, label: Option<&'a WindowLabel>) -> BatchKey<'a> {
    let b = &entry.batch;
    let key = BatchKey::new(
        &b.campaign_id,
        &entry.agent_id,
        &entry.region,
        b.clock_offset_us,
        b.seq,
    );
    match label {
        Some(label) => key.with_window_label(label),
        None => key,
    }
}

impl Decoded {
    /// The batch for an insert; `entries` is the round this batch was decoded from.
    fn prepared<'a>(&'a self, entries: &'a [Entry]) -> PreparedBatch<'a> {
        PreparedBatch {
            key: key_of(&entries[self.entry], self.label.as_deref()),
            records: &self.records,
            histograms: &self.histograms,
        }
    }
}

/// Decodes every entry of a round (CPU work: run it on the blocking pool), `labels[i]` being
/// entry `i`'s window labeller. Entries that do not decode are logged and left out.
fn decode_round(entries: &[Entry], labels: Vec<Option<Arc<WindowLabel>>>) -> Vec<Decoded> {
    entries
        .iter()
        .zip(labels)
        .enumerate()
        .filter_map(|(i, (e, label))| match decode(i, e, label) {
            Ok(d) => Some(d),
            Err(why) => {
                skip(e, &why);
                None
            }
        })
        .collect()
}

fn decode(index: usize, entry: &Entry, label: Option<Arc<WindowLabel>>) -> Result<Decoded, String> {
    let b = &entry.batch;
    let records = b
        .records
        .iter()
        .map(|r| ProbeRecord::try_from(r.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = key_of(entry, label.as_deref());
    let histograms = b
        .histograms
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let i = u32::try_from(i).map_err(|_| "too many histograms".to_string())?;
            HistogramRow::from_pb(&key, i, h).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Decoded {
        entry: index,
        records,
        histograms,
        label,
    })
}

/// Writes a round's decoded batches in one insert per table (on 18.16 an INSERT costs tens of
/// ms whatever its size). When the server rejects the group as bad data, the batches are
/// written one by one so only the bad one is skipped. `Err` only for retryable failures;
/// calling again with the same round after one is safe (see `clickhouse::insert`).
async fn write_entries(
    target: &SinkTarget,
    entries: &[Entry],
    decoded: &[Decoded],
    marks: &mut SeqMarks,
    metrics: &CoordinatorMetrics,
) -> Result<(), StoreError> {
    let prepared: Vec<PreparedBatch<'_>> = decoded.iter().map(|d| d.prepared(entries)).collect();
    let result = store::insert::insert_prepared(
        &target.client,
        &target.db,
        &prepared,
        Some(marks),
        &target.timeouts,
    )
    .await;
    // (A failed call cleared `marks`: the next rounds query again.)
    match result {
        Ok(outcomes) => {
            count_rows(metrics, &outcomes);
            Ok(())
        }
        // The tables' fault, not the rows': keep the rows (retried until the schema is fixed).
        Err(e) if e.is_retryable() || e.is_schema_mismatch() => Err(e),
        Err(_) => {
            for (d, one) in decoded.iter().zip(&prepared) {
                match store::insert::insert_prepared(
                    &target.client,
                    &target.db,
                    std::slice::from_ref(one),
                    None,
                    &target.timeouts,
                )
                .await
                {
                    Ok(outcomes) => count_rows(metrics, &outcomes),
                    Err(e) if e.is_retryable() || e.is_schema_mismatch() => return Err(e),
                    Err(e) => skip(&entries[d.entry], &e.to_string()),
                }
            }
            Ok(())
        }
    }
}

/// Adds the rows of `outcomes` to `latmesh_coordinator_clickhouse_rows_inserted_total`.
fn count_rows(metrics: &CoordinatorMetrics, outcomes: &[store::insert::InsertOutcome]) {
    let (mut requests, mut histograms) = (0, 0);
    for o in outcomes {
        if let store::insert::InsertOutcome::Inserted {
            requests: r,
            histograms: h,
            ..
        } = o
        {
            requests += r;
            histograms += h;
        }
    }
    metrics.rows_inserted(Table::Requests, requests);
    metrics.rows_inserted(Table::Histograms, histograms);
}

fn skip(entry: &Entry, why: &str) {
    tracing::error!(
        campaign = %entry.batch.campaign_id,
        agent = %entry.agent_id,
        seq = entry.batch.seq,
        error = %why,
        "batch cannot be stored in ClickHouse (bad data); skipped"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::windows::{Window, parse_ranges};

    fn launched(id: &str, windows: Vec<Window>) -> StoreEvent {
        let mut plan: Plan = serde_json::from_value(serde_json::json!({
            "name": "t", "seed": 0, "metrics_version": 1, "regions": ["ap"],
            "rounds": {"count": 1, "interval_ms": 1000, "gap_ms": 0},
            "providers": [], "scenarios": [], "prompt_set": "x"
        }))
        .unwrap();
        plan.timezones.insert("ap".into(), "+08:00".into());
        plan.windows = windows;
        StoreEvent::Launched {
            campaign_id: id.into(),
            plan: Box::new(plan),
            launched_at_unix_us: 0,
            start_at_unix_us: 0,
        }
    }

    #[test]
    fn launched_campaigns_label_their_rows_in_local_time() {
        let mut w = Windows::default();
        let peak = Window {
            name: "peak".into(),
            ranges: parse_ranges("09:00-12:00").unwrap(),
        };
        w.learn(&launched("c1", vec![peak]));
        w.learn(&launched("c2", vec![]));
        let label = w.labeller("c1", "ap").expect("c1 has windows");
        // 2024-06-01 01:30 UTC is 09:30 at +08:00.
        assert_eq!(label(1_717_205_400_000_000), "peak");
        assert_eq!(label(1_717_205_400_000_000 + 3 * 3_600_000_000), "off-peak");
        assert!(w.labeller("c2", "ap").is_none());
        assert!(w.labeller("unknown", "ap").is_none());
    }
}
