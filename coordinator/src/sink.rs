//! Drains the coordinator's durable spool into ClickHouse.
//!
//! One task, in spool order: read a few entries, decode them, insert each batch
//! (`clickhouse::insert_batch` skips rows already present, so a replay after a crash or a
//! retry after a half-failed insert adds nothing twice), then commit the spool past them.
//! While ClickHouse is unreachable the task retries with backoff (up to 10 s) and the spool
//! grows, bounded by its size cap (the coordinator then withholds acks and agents keep their
//! batches). A batch the server rejects as bad data is logged and skipped: retrying cannot
//! help, and it must not block everything behind it. Campaign and agent rows
//! ([`StoreEvent`]s) are written the same way, with retries.

use std::sync::Arc;
use std::time::Duration;

use latmesh_core::record::ProbeRecord;
use latmesh_core::wire;

use crate::clickhouse::{self as store, BatchKey, StoreError};
use crate::spool::{Entry, Spool};
use crate::state::{State, StoreEvent, now_unix_us};

/// Entries read from the spool at a time.
const READ_ENTRIES: usize = 64;
/// Pause when the spool is empty.
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Longest pause between retries while ClickHouse is down.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Where the sink writes.
#[derive(Clone, Debug)]
pub struct SinkTarget {
    /// ClickHouse client.
    pub client: clickhouse::Client,
    /// Database name.
    pub db: String,
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
    let state = State::with_store_events();
    let sink = tokio::spawn(run(spool.clone(), state.clone(), target));
    Ok((
        crate::service::Coordinator::with_spool(state, spool.clone()),
        spool,
        sink,
    ))
}

/// Brings the schema up to date (retrying while ClickHouse is unreachable), then drains the
/// spool until the task is aborted.
pub async fn run(spool: Arc<Spool>, state: State, target: SinkTarget) {
    let mut backoff = Duration::from_millis(250);
    loop {
        match store::migrate(&target.client, &target.db, None).await {
            Ok(applied) => {
                if !applied.is_empty() {
                    tracing::info!(db = %target.db, ?applied, "ClickHouse migrations applied");
                }
                break;
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "ClickHouse unavailable for migrations");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => {
                tracing::error!(error = %e, "ClickHouse migrations failed; results stay in the spool");
                return;
            }
        }
    }
    let mut pending_events: Vec<StoreEvent> = Vec::new();
    let mut backoff = Duration::from_millis(250);
    loop {
        pending_events.extend(state.drain_store_events());
        let entries = {
            let spool = spool.clone();
            tokio::task::spawn_blocking(move || spool.read_from(None, READ_ENTRIES)).await
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
        // Campaign rows go first so a batch never lands without its campaign.
        let mut failed = write_events(&target, &mut pending_events).await.err();
        let mut committed = None;
        if failed.is_none() && !entries.is_empty() {
            match write_entries(&target, &entries).await {
                Ok(()) => committed = entries.last().map(|e| e.id),
                Err(e) => failed = Some(e),
            }
        }
        if let Some(id) = committed {
            let spool = spool.clone();
            match tokio::task::spawn_blocking(move || spool.commit(id)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "cannot commit the spool"),
                Err(e) => tracing::error!(error = %e, "spool commit task failed"),
            }
        }
        match failed {
            Some(e) => {
                tracing::warn!(
                    error = %e,
                    pending_entries = spool.pending_entries(),
                    pending_bytes = spool.pending_bytes(),
                    retry_in_ms = backoff.as_millis() as u64,
                    "ClickHouse unavailable: results stay in the spool"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            None => {
                backoff = Duration::from_millis(250);
                if entries.is_empty() {
                    tokio::time::sleep(IDLE_POLL).await;
                }
            }
        }
    }
}

/// Writes queued campaign and agent rows; on a retryable error keeps the rest queued.
async fn write_events(target: &SinkTarget, events: &mut Vec<StoreEvent>) -> Result<(), StoreError> {
    while let Some(ev) = events.first() {
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
                store::insert_campaign(&target.client, &target.db, &row).await
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
                store::insert_agents(&target.client, &target.db, &rows).await
            }
        };
        match result {
            Ok(()) => {}
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, "ClickHouse rejected a campaign/agent row; skipped")
            }
        }
        events.remove(0);
    }
    Ok(())
}

/// A spooled batch decoded for ClickHouse.
struct Decoded<'a> {
    entry: &'a Entry,
    records: Vec<ProbeRecord>,
    histograms: Vec<store::IntervalHistogram>,
}

impl Decoded<'_> {
    fn input(&self) -> store::BatchInput<'_> {
        let b = &self.entry.batch;
        store::BatchInput {
            key: BatchKey::new(
                &b.campaign_id,
                &self.entry.agent_id,
                &self.entry.region,
                b.clock_offset_us,
                b.seq,
            ),
            records: &self.records,
            histograms: &self.histograms,
        }
    }
}

fn decode(entry: &Entry) -> Result<Decoded<'_>, String> {
    let b = &entry.batch;
    let records = b
        .records
        .iter()
        .map(|r| ProbeRecord::try_from(r.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let histograms = b
        .histograms
        .iter()
        .map(|h| {
            wire::histogram_from_pb(h)
                .map(|(k, hist)| (k, hist, h.start_agent_unix_us, h.end_agent_unix_us))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(Decoded {
        entry,
        records,
        histograms,
    })
}

/// Writes spooled batches in one insert per table (on 18.16 an INSERT costs tens of ms
/// whatever its size). When the server rejects the group as bad data, the batches are written
/// one by one so only the bad one is skipped. `Err` only for retryable failures.
async fn write_entries(target: &SinkTarget, entries: &[Entry]) -> Result<(), StoreError> {
    let decoded: Vec<Decoded<'_>> = entries
        .iter()
        .filter_map(|e| match decode(e) {
            Ok(d) => Some(d),
            Err(why) => {
                skip(e, &why);
                None
            }
        })
        .collect();
    let inputs: Vec<store::BatchInput<'_>> = decoded.iter().map(Decoded::input).collect();
    match store::insert_batches(&target.client, &target.db, &inputs).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_retryable() => Err(e),
        Err(_) => {
            for d in &decoded {
                match store::insert_batch(
                    &target.client,
                    &target.db,
                    &d.input().key,
                    &d.records,
                    &d.histograms,
                )
                .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_retryable() => return Err(e),
                    Err(e) => skip(d.entry, &e.to_string()),
                }
            }
            Ok(())
        }
    }
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
