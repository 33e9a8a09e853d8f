//! Result batches waiting for the coordinator's ack, and campaign-done notices.
//!
//! A batch stays here from the moment it is sealed until its ack arrives; every new session
//! resends everything still here (the coordinator de-duplicates by (campaign, agent, seq)).
//! A batch sent but not acked for a while is sent again ([`Outbox::resend_stale`]): the
//! coordinator withholds its ack when it cannot store the batch durably.
//!
//! With a [`Spool`] ([`Outbox::open`]) every batch is written to disk (fsync'd) before it is
//! offered for sending, and deleted when acked; batches a previous process left there are
//! loaded and sent first. The writes run on a thread of their own, so an fsync never holds up
//! the async workers that time the probes. What the spool says about earlier processes also
//! decides where a restarted agent resumes: [`Outbox::first_seq`] numbers new batches after
//! every spooled one and [`Outbox::ran_before`] names the slots already measured. A batch the
//! spool cannot take (full, or a write error) is kept in memory only and sent anyway, with a
//! warning: it is lost only if the process dies before the ack.
//!
//! # Quarantine
//!
//! What can never be delivered is set aside instead of blocking what follows (README "Failure
//! semantics"): a batch the coordinator refuses as malformed ([`Outbox::reject`]), a batch
//! over [`wire::MAX_BATCH_BYTES`] (e.g. left in the spool by an older agent), and records or
//! histograms too large for any batch ([`Outbox::quarantine_oversized`]). Each is moved to
//! the spool's `quarantine/` directory (kept, never deleted; only logged without a spool),
//! counted, logged as a warning, and reported in the campaign's done notice
//! (`records_quarantined`, `quarantined_seqs`, `histograms_quarantined`) so the coordinator
//! and `campaign verify` know the agent's delivery is not whole.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latmesh_core::wire;
use latmesh_proto::pb;
use prost::Message;
use tokio::sync::Notify;

use crate::spool::{Resume, Spool, SpoolConfig, SpoolError};

type Key = (String, u64);

/// Shared between the runners that seal batches and the session that sends them.
#[derive(Clone, Debug, Default)]
pub struct Outbox {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
    disk: Option<Arc<Disk>>,
}

/// The spool and the channel to its writer thread.
#[derive(Debug)]
struct Disk {
    spool: Arc<Spool>,
    writer: Mutex<std::sync::mpsc::Sender<Job>>,
}

/// Work for the spool's writer thread.
#[derive(Debug)]
enum Job {
    /// Write a new batch, then offer it for sending.
    Persist(pb::ResultBatch),
    /// Move a batch (or oversized items) to the quarantine, saying why.
    Quarantine(pb::ResultBatch, String),
}

/// What an agent set aside of one campaign instead of delivering it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quarantined {
    /// Seqs of batches quarantined (refused by the coordinator, or over the batch budget).
    pub seqs: BTreeSet<u64>,
    /// Records too large for any batch.
    pub records: u64,
    /// Histograms too large for any batch.
    pub histograms: u64,
}

/// Most seqs a done notice lists in `quarantined_seqs`.
pub const MAX_REPORTED_QUARANTINED_SEQS: usize = 1024;

#[derive(Debug, Default)]
struct Inner {
    unacked: BTreeMap<Key, pb::ResultBatch>,
    unsent: Vec<Key>,
    dones: BTreeMap<String, pb::CampaignDone>,
    unsent_dones: Vec<String>,
    sent_at: BTreeMap<Key, Instant>,
    /// Being written to the spool: not sendable yet.
    persisting: BTreeSet<Key>,
    /// What earlier processes spooled, per campaign.
    resume: BTreeMap<String, Resume>,
    /// Batches kept in memory only (the spool could not take them), and when that was last
    /// reported.
    memory_only: u64,
    memory_only_warned: Option<Instant>,
    /// Batches pushed and batches acked by this process (the agent's `/metrics`).
    pushed_total: u64,
    acked_total: u64,
    /// What was quarantined, per campaign (this process).
    quarantined: BTreeMap<String, Quarantined>,
    /// Batches quarantined by this process, over every campaign.
    quarantined_batches_total: u64,
}

/// Counts of an [`Outbox`], read by the agent's `/metrics` at scrape time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Batches sealed by this process (written to the spool first when there is one).
    pub spooled_total: u64,
    /// Batches the coordinator acked (each counted once).
    pub acked_total: u64,
    /// Batches the spool could not take, kept in memory only.
    pub memory_only_total: u64,
    /// Batches waiting for an ack (those an earlier process left included).
    pub unacked: u64,
    /// Bytes of batch files in the spool directory (0 without one).
    pub spool_bytes: u64,
    /// Batches moved to the quarantine (refused by the coordinator, or too large).
    pub quarantined_batches_total: u64,
}

/// What the session should send next.
#[derive(Debug, Default)]
pub struct Pending {
    /// Batches not yet sent on this session.
    pub batches: Vec<pb::ResultBatch>,
    /// Done notices not yet sent on this session.
    pub dones: Vec<pb::CampaignDone>,
}

/// How often "kept in memory only" is repeated while the spool stays full.
const MEMORY_ONLY_WARN_EVERY: Duration = Duration::from_secs(30);

impl Outbox {
    /// An outbox on the spool `cfg` (in memory only when `None`): opens and locks it and loads
    /// what an earlier process of agent `agent_id` left there (sent first on the next session).
    ///
    /// # Errors
    /// The spool cannot be opened: another process holds it, it holds another agent's
    /// batches, or it cannot be created or read (see [`SpoolError`]).
    pub fn open(cfg: Option<&SpoolConfig>, agent_id: &str) -> Result<Outbox, SpoolError> {
        let Some(cfg) = cfg else {
            return Ok(Outbox::default());
        };
        let (spool, loaded) = Spool::open(cfg, agent_id)?;
        let spool = Arc::new(spool);
        let outbox = Outbox::default();
        {
            let mut inner = outbox.lock();
            for b in loaded.batches {
                if let Some(reason) = over_budget(&b) {
                    inner.count_quarantined(&b);
                    log_quarantined(
                        &b,
                        &reason,
                        spool.quarantine(&b, &reason).map_err(|e| e.to_string()),
                    );
                    continue;
                }
                inner.unacked.insert((b.campaign_id.clone(), b.seq), b);
            }
            inner.unsent = inner.unacked.keys().cloned().collect();
            inner.resume = loaded.resume;
            let campaigns: BTreeSet<&str> = inner.unacked.keys().map(|k| k.0.as_str()).collect();
            tracing::info!(
                dir = %spool.dir().display(),
                unacked_batches = inner.unacked.len(),
                campaigns = campaigns.len(),
                bytes = spool.bytes(),
                corrupt_moved_aside = loaded.corrupt,
                "agent spool opened{}",
                if inner.unacked.is_empty() { "" } else { ": its unacked batches are sent first" }
            );
        }
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (inner, notify, writer_spool) =
            (outbox.inner.clone(), outbox.notify.clone(), spool.clone());
        std::thread::Builder::new()
            .name("agent-spool".into())
            .spawn(move || write_loop(&rx, &writer_spool, &inner, &notify))
            .map_err(|source| SpoolError::Io {
                op: "start the writer thread for",
                path: spool.dir().to_path_buf(),
                source,
            })?;
        Ok(Outbox {
            disk: Some(Arc::new(Disk {
                spool,
                writer: Mutex::new(tx),
            })),
            ..outbox
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Adds a sealed batch: offered for sending at once without a spool, once it is on disk
    /// with one. A batch over [`wire::MAX_BATCH_BYTES`] encoded (the runner never builds one)
    /// is quarantined instead: the coordinator could not take it.
    pub fn push(&self, batch: pb::ResultBatch) {
        if let Some(reason) = over_budget(&batch) {
            self.lock().pushed_total += 1;
            self.quarantine(batch, reason);
            return;
        }
        let key = (batch.campaign_id.clone(), batch.seq);
        let queued = {
            let mut inner = self.lock();
            let queued = self
                .disk
                .as_ref()
                .is_some_and(|disk| lock(&disk.writer).send(Job::Persist(batch.clone())).is_ok());
            if queued {
                inner.persisting.insert(key.clone());
            } else {
                inner.unsent.push(key.clone());
            }
            inner.unacked.insert(key, batch);
            inner.pushed_total += 1;
            queued
        };
        if !queued {
            self.notify.notify_one();
        }
    }

    /// Adds a campaign-done notice (sent after the campaign's batches).
    pub fn push_done(&self, done: pb::CampaignDone) {
        {
            let mut inner = self.lock();
            inner.unsent_dones.push(done.campaign_id.clone());
            inner.dones.insert(done.campaign_id.clone(), done);
        }
        self.notify.notify_one();
    }

    /// The coordinator refused batch `seq` of `campaign_id` as malformed (`reason`): it is
    /// not sent again but moved to the quarantine (see the [module documentation](self)), so
    /// the batches after it go on. Unknown (already acked or quarantined): nothing happens.
    pub fn reject(&self, campaign_id: &str, seq: u64, reason: &str) {
        let key = (campaign_id.to_string(), seq);
        let batch = {
            let mut inner = self.lock();
            inner.sent_at.remove(&key);
            inner.unsent.retain(|k| *k != key);
            inner.unacked.remove(&key)
        };
        match batch {
            Some(batch) => self.quarantine(
                batch,
                format!(
                    "refused by the coordinator: {}",
                    wire::reject_reason(reason)
                ),
            ),
            None => {
                tracing::debug!(campaign = %campaign_id, seq, "refusal of a batch no longer held")
            }
        }
    }

    /// Quarantines the items of `oversized` (seq 0), too large for any batch: they are never
    /// sent, but kept and counted (see the [module documentation](self)).
    pub fn quarantine_oversized(&self, oversized: pb::ResultBatch) {
        let (records, histograms) = (oversized.records.len(), oversized.histograms.len());
        let largest = oversized
            .records
            .iter()
            .map(Message::encoded_len)
            .chain(oversized.histograms.iter().map(Message::encoded_len))
            .max()
            .unwrap_or(0);
        let reason = format!(
            "{records} record(s) and {histograms} histogram(s) too large for any batch: the largest encodes to {largest} bytes, over the batch budget of {} bytes",
            wire::MAX_BATCH_BYTES
        );
        self.quarantine(oversized, reason);
    }

    /// Counts, logs and (with a spool) hands `batch` to the writer thread for the quarantine.
    fn quarantine(&self, batch: pb::ResultBatch, reason: String) {
        self.lock().count_quarantined(&batch);
        match &self.disk {
            // Written by the writer thread, after the batches queued before it.
            Some(disk) => {
                if let Err(e) = lock(&disk.writer).send(Job::Quarantine(batch, reason)) {
                    let Job::Quarantine(batch, reason) = e.0 else {
                        unreachable!("sent a quarantine job")
                    };
                    log_quarantined(
                        &batch,
                        &reason,
                        Err("the spool's writer thread is gone".into()),
                    );
                }
            }
            None => log_quarantined(
                &batch,
                &reason,
                Err("this agent runs without a spool".into()),
            ),
        }
        self.notify.notify_one();
    }

    /// What was quarantined of `campaign_id` by this process.
    pub fn quarantined(&self, campaign_id: &str) -> Quarantined {
        self.lock()
            .quarantined
            .get(campaign_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Drops an acked batch (and deletes its file).
    pub fn ack(&self, campaign_id: &str, seq: u64) {
        let key = (campaign_id.to_string(), seq);
        let known = {
            let mut inner = self.lock();
            inner.sent_at.remove(&key);
            let known = inner.unacked.remove(&key).is_some();
            inner.acked_total += u64::from(known);
            known
        };
        if let (true, Some(disk)) = (known, &self.disk) {
            disk.spool.remove(campaign_id, seq);
        }
    }

    /// Marks batches sent more than `older_than` ago and still unacked as unsent (the
    /// coordinator did not ack them, e.g. its spool was full); returns how many.
    pub fn resend_stale(&self, older_than: Duration) -> usize {
        let mut inner = self.lock();
        let now = Instant::now();
        let stale: Vec<Key> = inner
            .sent_at
            .iter()
            .filter(|(k, at)| now.duration_since(**at) > older_than && !inner.unsent.contains(k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &stale {
            inner.sent_at.remove(k);
        }
        let n = stale.len();
        inner.unsent.extend(stale);
        n
    }

    /// Marks everything unacked (and every done notice) as unsent: called when a new session
    /// starts. Batches still being written to the spool follow when they are written.
    pub fn resend_all(&self) {
        let mut inner = self.lock();
        inner.unsent = inner
            .unacked
            .keys()
            .filter(|k| !inner.persisting.contains(*k))
            .cloned()
            .collect();
        inner.unsent_dones = inner.dones.keys().cloned().collect();
    }

    /// Takes what is unsent on this session.
    pub fn take_pending(&self) -> Pending {
        let mut inner = self.lock();
        let keys = std::mem::take(&mut inner.unsent);
        let now = Instant::now();
        for key in &keys {
            if inner.unacked.contains_key(key) {
                inner.sent_at.insert(key.clone(), now);
            }
        }
        let batches = keys
            .iter()
            .filter_map(|k| inner.unacked.get(k).cloned())
            .collect();
        // A done notice waits for its campaign's batches still being written.
        let (done_ids, later): (Vec<String>, Vec<String>) = std::mem::take(&mut inner.unsent_dones)
            .into_iter()
            .partition(|id| !inner.persisting.iter().any(|(c, _)| c == id));
        inner.unsent_dones = later;
        let dones = done_ids
            .iter()
            .filter_map(|id| {
                let mut done = inner.dones.get(id).cloned()?;
                if let Some(q) = inner.quarantined.get(id) {
                    done.records_quarantined = q.records;
                    done.histograms_quarantined = q.histograms;
                    done.quarantined_seqs = q
                        .seqs
                        .iter()
                        .take(MAX_REPORTED_QUARANTINED_SEQS)
                        .copied()
                        .collect();
                }
                Some(done)
            })
            .collect();
        Pending { batches, dones }
    }

    /// What `/metrics` shows of the outbox and its spool.
    pub fn stats(&self) -> OutboxStats {
        let spool_bytes = self.disk.as_ref().map_or(0, |d| d.spool.bytes());
        let inner = self.lock();
        OutboxStats {
            spooled_total: inner.pushed_total,
            acked_total: inner.acked_total,
            memory_only_total: inner.memory_only,
            unacked: inner.unacked.len() as u64,
            spool_bytes,
            quarantined_batches_total: inner.quarantined_batches_total,
        }
    }

    /// Batches waiting for an ack.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Batches of `campaigns` waiting for an ack (batches an earlier process left for other
    /// campaigns stay in the spool and do not hold up an exit).
    pub fn unacked_in(&self, campaigns: &BTreeSet<String>) -> usize {
        self.lock()
            .unacked
            .keys()
            .filter(|(c, _)| campaigns.contains(c))
            .count()
    }

    /// The seq of the first new batch of `campaign_id`, given the coordinator's `next_seq`:
    /// past every batch it has and every batch this agent spooled (in this process or an
    /// earlier one), so seqs never collide.
    pub fn first_seq(&self, campaign_id: &str, next_seq: u64) -> u64 {
        let inner = self.lock();
        let spooled = inner.resume.get(campaign_id).map_or(0, |r| r.max_seq);
        let held = inner
            .unacked
            .range((campaign_id.to_string(), 0)..=(campaign_id.to_string(), u64::MAX))
            .next_back()
            .map_or(0, |(k, _)| k.1);
        let first = next_seq.max(spooled + 1).max(held + 1).max(1);
        if let Some(r) = inner.resume.get(campaign_id) {
            tracing::info!(
                campaign = %campaign_id,
                slots_measured_before = r.slots.len(),
                arrivals_measured_before = r.arrivals.len(),
                sweep_steps_begun_before = r.sweep_steps.len(),
                coordinator_next_seq = next_seq,
                first_seq = first,
                "resuming a campaign an earlier process of this agent ran: what it measured is not run again"
            );
        }
        first
    }

    /// Whether an earlier process of this agent measured slot `slot` of round `round` of
    /// `campaign_id` (its records are spooled or delivered): such a slot is neither run again
    /// nor counted as skipped.
    pub fn ran_before(&self, campaign_id: &str, round: u32, slot: u32) -> bool {
        self.lock()
            .resume
            .get(campaign_id)
            .is_some_and(|r| r.slots.contains(&(round, slot)))
    }

    /// How many `rounds` slots an earlier process of this agent measured at or after slot
    /// `slot` of round `round` (in plan order) of `campaign_id`: O(what it measured), so a
    /// cancel counts the slots it does not run without visiting each.
    pub fn ran_before_from(&self, campaign_id: &str, round: u32, slot: u32) -> u64 {
        self.lock()
            .resume
            .get(campaign_id)
            .map_or(0, |r| r.slots.range((round, slot)..).count() as u64)
    }

    /// How many open-loop arrivals with index `from` or later of `provider` in `scenario` of
    /// `campaign_id` an earlier process of this agent measured (see [`Self::ran_before_from`]).
    pub fn arrivals_ran_before_from(
        &self,
        campaign_id: &str,
        scenario: &str,
        provider: &str,
        from: u32,
    ) -> u64 {
        self.lock().resume.get(campaign_id).map_or(0, |r| {
            r.arrivals
                .iter()
                .filter(|(s, p, i)| s == scenario && p == provider && *i >= from)
                .count() as u64
        })
    }

    /// Whether an earlier process of this agent measured open-loop arrival `i` of `provider`
    /// in `scenario` of `campaign_id`: such an arrival is neither sent again nor counted as
    /// skipped.
    pub fn arrival_ran_before(
        &self,
        campaign_id: &str,
        scenario: &str,
        provider: &str,
        i: u32,
    ) -> bool {
        self.lock().resume.get(campaign_id).is_some_and(|r| {
            r.arrivals
                .contains(&(scenario.to_string(), provider.to_string(), i))
        })
    }

    /// The sweep steps of `scenario` of `campaign_id` an earlier process of this agent has
    /// records of (empty when none).
    pub fn sweep_steps_before(&self, campaign_id: &str, scenario: &str) -> BTreeSet<u32> {
        self.lock()
            .resume
            .get(campaign_id)
            .map(|r| {
                r.sweep_steps
                    .iter()
                    .filter(|(s, _)| s == scenario)
                    .map(|&(_, step)| step)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether an earlier process of this agent has any record of `scenario` (rate or sweep)
    /// of `campaign_id`.
    pub fn scenario_ran_before(&self, campaign_id: &str, scenario: &str) -> bool {
        self.lock().resume.get(campaign_id).is_some_and(|r| {
            r.arrivals.iter().any(|(s, _, _)| s == scenario)
                || r.sweep_steps.iter().any(|(s, _)| s == scenario)
        })
    }

    /// An in-memory outbox that believes an earlier process left `resume` for `campaign_id`.
    #[cfg(test)]
    pub(crate) fn resumed(campaign_id: &str, resume: Resume) -> Outbox {
        let outbox = Outbox::default();
        outbox.lock().resume.insert(campaign_id.to_string(), resume);
        outbox
    }

    /// On a clean exit: forgets the journals of campaigns that finished here with every batch
    /// acked, and removes the spool directory when nothing is left in it.
    pub fn close(&self) {
        let Some(disk) = &self.disk else {
            return;
        };
        let over: Vec<String> = {
            let inner = self.lock();
            inner
                .dones
                .keys()
                .filter(|c| !inner.unacked.keys().any(|(k, _)| k == *c))
                .cloned()
                .collect()
        };
        for c in &over {
            disk.spool.forget_campaign(c);
        }
        let left = self.unacked();
        if left > 0 {
            tracing::warn!(dir = %disk.spool.dir().display(), batches = left, "unacked batches stay in the agent spool; they are sent when an agent with this id starts on it again");
        }
        disk.spool.remove_dir_if_empty();
    }

    /// Resolves when something was pushed since the last call.
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Inner {
    /// Counts `batch` as quarantined: its seq, or (seq 0) its oversized items.
    fn count_quarantined(&mut self, batch: &pb::ResultBatch) {
        let q = self
            .quarantined
            .entry(batch.campaign_id.clone())
            .or_default();
        if batch.seq == 0 {
            q.records += batch.records.len() as u64;
            q.histograms += batch.histograms.len() as u64;
        } else if q.seqs.insert(batch.seq) {
            self.quarantined_batches_total += 1;
        }
    }
}

/// Logs that `batch` (seq 0: oversized items) was quarantined for `reason`; `kept`: its file,
/// or why it could not be kept on disk.
fn log_quarantined(
    batch: &pb::ResultBatch,
    reason: &str,
    kept: Result<std::path::PathBuf, String>,
) {
    let (campaign, seq) = (&batch.campaign_id, batch.seq);
    let (records, histograms) = (batch.records.len(), batch.histograms.len());
    match kept {
        Ok(file) => tracing::warn!(
            %campaign, seq, records, histograms, %reason, file = %file.display(),
            "quarantined: kept in the file named, never sent (again); the next batches go on"
        ),
        Err(e) => tracing::warn!(
            %campaign, seq, records, histograms, %reason, not_kept = %e,
            "quarantined but not kept on disk: never sent (again); the next batches go on"
        ),
    }
}

/// Why `batch` cannot be sent for its size (`None`: it can).
fn over_budget(batch: &pb::ResultBatch) -> Option<String> {
    let len = batch.encoded_len();
    (len > wire::MAX_BATCH_BYTES).then(|| {
        format!(
            "encodes to {len} bytes, over the batch budget of {} bytes",
            wire::MAX_BATCH_BYTES
        )
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The spool's writer thread: persists each batch in order, then offers it for sending; a
/// batch it cannot persist is offered anyway (kept in memory only) with a warning.
fn write_loop(
    rx: &std::sync::mpsc::Receiver<Job>,
    spool: &Spool,
    inner: &Mutex<Inner>,
    notify: &Notify,
) {
    while let Ok(job) = rx.recv() {
        let batch = match job {
            Job::Persist(batch) => batch,
            Job::Quarantine(batch, reason) => {
                let moved = spool.quarantine(&batch, &reason).map_err(|e| e.to_string());
                log_quarantined(&batch, &reason, moved);
                continue;
            }
        };
        let key = (batch.campaign_id.clone(), batch.seq);
        let result = spool.persist(&batch);
        {
            let mut inner = lock(inner);
            if let Err(e) = &result {
                inner.memory_only += 1;
                let due = inner
                    .memory_only_warned
                    .is_none_or(|at| at.elapsed() >= MEMORY_ONLY_WARN_EVERY);
                if due || !matches!(e, SpoolError::Full { .. }) {
                    inner.memory_only_warned = Some(Instant::now());
                    tracing::warn!(
                        campaign = %batch.campaign_id,
                        seq = batch.seq,
                        error = %e,
                        kept_in_memory_only = inner.memory_only,
                        "batch not spooled: it is sent and kept in memory until acked, but lost if this process dies first"
                    );
                }
            }
            inner.persisting.remove(&key);
            if inner.unacked.contains_key(&key) {
                inner.unsent.push(key);
            }
        }
        notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64) -> pb::ResultBatch {
        pb::ResultBatch {
            campaign_id: "c".into(),
            seq,
            ..Default::default()
        }
    }

    #[test]
    fn unacked_batches_are_resent_on_a_new_session() {
        let o = Outbox::default();
        o.push(batch(1));
        o.push(batch(2));
        o.push_done(pb::CampaignDone {
            campaign_id: "c".into(),
            skipped: 0,
            last_seq: 2,
            probes: 5,
            ..Default::default()
        });
        let first = o.take_pending();
        assert_eq!(
            first.batches.iter().map(|b| b.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(first.dones.len(), 1);
        assert!(o.take_pending().batches.is_empty());
        o.ack("c", 1);
        o.resend_all();
        let again = o.take_pending();
        assert_eq!(
            again.batches.iter().map(|b| b.seq).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(again.dones.len(), 1);
        assert_eq!(o.unacked(), 1);
        o.ack("c", 1); // acked twice: counted once
        let stats = o.stats();
        assert_eq!(
            (stats.spooled_total, stats.acked_total, stats.unacked),
            (2, 1, 1)
        );
        assert_eq!(stats.spool_bytes, 0, "no spool directory");
    }

    /// Seqs of the batches to send now.
    fn pending_seqs(o: &Outbox) -> Vec<u64> {
        o.take_pending().batches.iter().map(|b| b.seq).collect()
    }

    #[test]
    fn unacked_batches_are_resent_when_stale() {
        let o = Outbox::default();
        o.push(batch(1));
        o.push(batch(2));
        assert_eq!(o.take_pending().batches.len(), 2);
        o.ack("c", 1);
        assert_eq!(
            o.resend_stale(Duration::from_secs(3600)),
            0,
            "sent just now"
        );
        assert_eq!(o.resend_stale(Duration::ZERO), 1);
        assert_eq!(pending_seqs(&o), vec![2]);
        o.ack("c", 2);
        assert_eq!(o.resend_stale(Duration::ZERO), 0);
    }

    use crate::spool::tests::{TempDir, batch as spool_batch};

    fn open(dir: &std::path::Path, max_bytes: u64) -> Outbox {
        let cfg = SpoolConfig {
            max_bytes,
            ..SpoolConfig::new(dir)
        };
        // The previous outbox's writer thread lets go of the lock as it ends.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match Outbox::open(Some(&cfg), "a1") {
                Ok(o) => return o,
                Err(SpoolError::Locked { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Waits until `n` batches are sendable and takes them.
    fn take_batches(o: &Outbox, n: usize) -> Vec<u64> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        while got.len() < n {
            got.extend(o.take_pending().batches.iter().map(|b| b.seq));
            assert!(Instant::now() < deadline, "only {got:?} became sendable");
            std::thread::sleep(Duration::from_millis(2));
        }
        got
    }

    #[test]
    fn spooled_batches_are_on_disk_before_they_are_sent_and_survive_a_restart() {
        let dir = TempDir::new("outbox");
        let spool_dir = dir.0.join("s");
        {
            let o = open(&spool_dir, u64::MAX);
            o.push(spool_batch("c", 1, &[(0, 0)]));
            o.push(spool_batch("c", 2, &[(0, 1), (0, 2)]));
            o.push(spool_batch("c", 3, &[(1, 0)]));
            let sent = take_batches(&o, 3);
            assert_eq!(sent, vec![1, 2, 3]);
            // Everything offered for sending is on disk.
            assert_eq!(crate::spool::read_batches(&spool_dir).unwrap().len(), 3);
            assert!(o.stats().spool_bytes > 0);
            o.ack("c", 1);
            assert_eq!(crate::spool::read_batches(&spool_dir).unwrap().len(), 2);
            // The process dies here (no close).
        }
        let o = open(&spool_dir, u64::MAX);
        assert_eq!(o.unacked(), 2);
        let resent = o.take_pending();
        assert_eq!(
            resent.batches.iter().map(|b| b.seq).collect::<Vec<_>>(),
            vec![2, 3],
            "loaded batches are sent first"
        );
        // New batches number past everything spooled, whatever the coordinator says…
        assert_eq!(o.first_seq("c", 2), 4);
        // …or past what the coordinator has, when that is further.
        assert_eq!(o.first_seq("c", 9), 9);
        assert_eq!(o.first_seq("other", 1), 1);
        // Slots measured before the restart, acked or not, are known.
        for (r, s) in [(0, 0), (0, 1), (0, 2), (1, 0)] {
            assert!(o.ran_before("c", r, s), "{r}.{s}");
        }
        assert!(!o.ran_before("c", 1, 1));
        assert!(!o.ran_before("other", 0, 0));
        assert_eq!(o.unacked_in(&["c".to_string()].into()), 2);
        assert_eq!(o.unacked_in(&["d".to_string()].into()), 0);
        o.ack("c", 2);
        o.ack("c", 3);
        o.push_done(pb::CampaignDone {
            campaign_id: "c".into(),
            ..Default::default()
        });
        o.close();
        assert!(!spool_dir.exists(), "a clean exit leaves nothing behind");
    }

    #[test]
    fn a_done_notice_waits_for_the_batches_being_written() {
        let dir = TempDir::new("done-order");
        let o = open(&dir.0.join("s"), u64::MAX);
        o.push(spool_batch("c", 1, &[(0, 0)]));
        o.push_done(pb::CampaignDone {
            campaign_id: "c".into(),
            last_seq: 1,
            ..Default::default()
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut batches = 0;
        loop {
            let p = o.take_pending();
            batches += p.batches.len();
            if !p.dones.is_empty() {
                assert_eq!(batches, 1, "the done went out before its batch");
                break;
            }
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_full_spool_keeps_the_batch_in_memory_and_still_sends_it() {
        let dir = TempDir::new("outbox-full");
        let spool_dir = dir.0.join("s");
        let o = open(&spool_dir, 1);
        o.push(spool_batch("c", 1, &[(0, 0)]));
        assert_eq!(take_batches(&o, 1), vec![1]);
        assert!(crate::spool::read_batches(&spool_dir).unwrap().is_empty());
        assert_eq!(o.unacked(), 1);
        assert_eq!(o.stats().memory_only_total, 1);
        o.ack("c", 1);
        assert_eq!(o.unacked(), 0);
    }

    #[test]
    fn a_refused_batch_is_quarantined_on_disk_and_the_next_ones_go_on() {
        let dir = TempDir::new("outbox-refused");
        let spool_dir = dir.0.join("s");
        let o = open(&spool_dir, u64::MAX);
        for seq in 1..=3 {
            o.push(spool_batch("c", seq, &[(0, seq as u32)]));
        }
        assert_eq!(take_batches(&o, 3), vec![1, 2, 3]);
        o.push_done(pb::CampaignDone {
            campaign_id: "c".into(),
            last_seq: 3,
            ..Default::default()
        });
        o.reject("c", 1, "records[0].attempt 0 is outside 1..=1");
        o.ack("c", 2);
        // Not resent: neither when stale nor on a new session.
        assert_eq!(o.resend_stale(Duration::ZERO), 1);
        o.resend_all();
        let p = o.take_pending();
        assert_eq!(p.batches.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![3]);
        assert_eq!(o.unacked(), 1);
        // The done notice names it.
        assert_eq!(p.dones.len(), 1);
        assert_eq!(p.dones[0].quarantined_seqs, vec![1]);
        assert_eq!(o.stats().quarantined_batches_total, 1);
        // Kept on disk (the writer thread moves it), with its reason; out of batches/.
        let deadline = Instant::now() + Duration::from_secs(5);
        let kept = loop {
            let q = crate::spool::read_quarantine(&spool_dir).unwrap();
            if !q.is_empty() || Instant::now() > deadline {
                break q;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let (agent, batch) = kept[0].as_ref().unwrap();
        assert_eq!(
            (agent.as_str(), batch.seq, batch.records[0].slot),
            ("a1", 1, 1)
        );
        let reason = std::fs::read_dir(spool_dir.join("quarantine"))
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().ends_with(".reason"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .expect("a reason file");
        assert!(
            reason.contains("refused by the coordinator: records[0].attempt 0"),
            "{reason}"
        );
        let left: Vec<u64> = crate::spool::read_batches(&spool_dir)
            .unwrap()
            .into_iter()
            .map(|b| b.unwrap().1.seq)
            .collect();
        assert_eq!(left, vec![3]);
        // A clean exit keeps the quarantine (and so the directory).
        o.ack("c", 3);
        o.close();
        assert_eq!(crate::spool::read_quarantine(&spool_dir).unwrap().len(), 1);
        // A restart does not send it again.
        drop(o);
        let again = open(&spool_dir, u64::MAX);
        assert_eq!(again.unacked(), 0);
    }

    #[test]
    fn a_batch_over_the_budget_is_quarantined_instead_of_sent() {
        let o = Outbox::default();
        let mut big = batch(1);
        big.records.push(pb::ProbeRecord {
            finish_reason: Some("x".repeat(wire::MAX_BATCH_BYTES)),
            ..Default::default()
        });
        o.push(big);
        o.push(batch(2));
        assert_eq!(pending_seqs(&o), vec![2]);
        assert_eq!(o.quarantined("c").seqs, BTreeSet::from([1]));
        // Oversized items are counted as records and histograms, not as a seq.
        o.quarantine_oversized(pb::ResultBatch {
            campaign_id: "c".into(),
            seq: 0,
            records: vec![Default::default(), Default::default()],
            histograms: vec![Default::default()],
            ..Default::default()
        });
        o.push_done(pb::CampaignDone {
            campaign_id: "c".into(),
            last_seq: 2,
            ..Default::default()
        });
        let done = o.take_pending().dones.pop().unwrap();
        assert_eq!(
            (
                done.records_quarantined,
                done.histograms_quarantined,
                done.quarantined_seqs
            ),
            (2, 1, vec![1])
        );
    }
}
