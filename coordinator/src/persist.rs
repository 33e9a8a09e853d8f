//! The coordinator's state directory: what a coordinator killed with SIGKILL needs to pick its
//! campaigns up again.
//!
//! # Layout
//!
//! ```text
//! DIR/lock                               one coordinator per directory (a `LockFile`)
//! DIR/campaigns/<id>/campaign.json       the campaign's durable facts
//! DIR/campaigns/<id>/batches/            every batch acked for it (a `Spool`, never drained)
//! DIR/series/<id>.json                   a series of scheduled runs (`crate::schedule`)
//! ```
//!
//! `campaign.json` ([`CampaignRecord`]) holds the id, the plan (JSON, as pushed to agents) and
//! its hash, launch time, `start_at`, deadline, the agents the plan went to with their region
//! and, once they said so, their `last_seq`, `skipped` count and start facts (when they
//! started, with the clock offset and uncertainty they used), whether the deadline expired
//! it, and once finished its summary. It is replaced atomically (temporary file, fsync,
//! rename, fsync of the directory: `latmesh_durable::atomic_write`) at launch (before the plan leaves for any agent), at each
//! agent's `done`, and when the campaign finishes.
//!
//! The batches directory is the per-batch fact: every batch is appended there (one record,
//! fsync'd) before the coordinator acks it, so no acked batch is ever forgotten. Nothing
//! drains it (unlike the ClickHouse spool, whose drained segments are deleted): on restart
//! the coordinator replays the log of every unfinished campaign into its aggregate and the
//! per-agent seq sets, which gives exactly the summary an uninterrupted coordinator would
//! have computed. The log of a finished campaign is kept (its raw results) and may be deleted
//! by hand; a finished campaign is not loaded at start, only its summary is read when someone
//! watches it.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use latmesh_durable::{DurableError, LockFile, atomic_write, sync_dir};
use serde::{Deserialize, Serialize};

use crate::spool::{Entry, Spool, SpoolConfig};
use latmesh_results::summary::Summary;

/// Format version of `campaign.json`.
pub const FORMAT: u32 = 1;

const LOCK_FILE: &str = "lock";
const CAMPAIGNS_DIR: &str = "campaigns";
const CAMPAIGN_FILE: &str = "campaign.json";
const BATCHES_DIR: &str = "batches";
const SERIES_DIR: &str = "series";
/// The batch log is never drained; this cap only exists because the spool wants one.
const LOG_MAX_BYTES: u64 = u64::MAX / 4;
/// Entries read per call while replaying.
const REPLAY_CHUNK: usize = 256;

/// An agent's part of a campaign, as persisted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent's region.
    pub region: String,
    /// Its last batch's seq, once it said it is done.
    pub last_seq: Option<u64>,
    /// Slots it reported as skipped (with its done notice).
    pub skipped: u64,
    /// Slots of the plan it finished (progress of a campaign read back finished; a running
    /// campaign recounts them from its batch log).
    #[serde(default)]
    pub slots_done: u64,
    /// From its done notice: when it began the campaign's first phase, coordinator clock as
    /// it estimated it, UTC µs (0: no synchronized start, or no done notice yet).
    #[serde(default)]
    pub started_coord_unix_us: i64,
    /// From its done notice: the clock offset it used (coordinator − agent), µs.
    #[serde(default)]
    pub clock_offset_us: i64,
    /// From its done notice: that offset's uncertainty, ± µs.
    #[serde(default)]
    pub clock_uncertainty_us: u64,
    /// Its batches refused as malformed, and what it quarantined (not resent: a restarted
    /// coordinator must not wait for them).
    #[serde(default)]
    pub rejections: crate::delivery::Rejections,
}

/// A campaign's durable facts (`campaign.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CampaignRecord {
    /// [`FORMAT`].
    pub format: u32,
    /// Campaign id.
    pub campaign_id: String,
    /// The plan, exactly as pushed to agents.
    pub plan_json: String,
    /// The plan's hash.
    pub plan_hash: String,
    /// Launch time, coordinator clock, UTC µs.
    pub launched_at_unix_us: i64,
    /// Round 0 start, coordinator clock, UTC µs.
    pub start_at_unix_us: i64,
    /// After this the campaign finishes with what arrived, coordinator clock, UTC µs.
    pub deadline_unix_us: i64,
    /// The agents the plan went to.
    pub agents: BTreeMap<String, AgentRecord>,
    /// Finished by its deadline.
    pub expired: bool,
    /// When `latmesh campaign cancel` came (coordinator clock, UTC µs); `None`: not cancelled.
    #[serde(default)]
    pub cancelled_at_us: Option<i64>,
    /// Launched with `--allow-missing-keys` (see [`crate::keys`]); absent when not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_missing_keys: bool,
    /// The summary, once finished.
    pub summary: Option<Summary>,
    /// Budget guard: caps, what was spent (as of this write; a restarted coordinator
    /// rebuilds it from the batch log), and the stop reason once it cancelled the campaign.
    /// Absent when there is nothing.
    #[serde(default, skip_serializing_if = "crate::budget::Guard::is_default")]
    pub budget: crate::budget::Guard,
}

/// An open state directory (see the [module documentation](self)).
pub struct StateDir {
    dir: PathBuf,
    /// Open batch logs of unfinished campaigns.
    logs: HashMap<String, Arc<Spool>>,
    /// Holds an exclusive lock on `DIR/lock` while open.
    _lock: LockFile,
}

impl std::fmt::Debug for StateDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateDir")
            .field("dir", &self.dir)
            .field("open_logs", &self.logs.len())
            .finish()
    }
}

impl StateDir {
    /// Opens (creating if missing) and locks the state directory `dir`.
    ///
    /// # Errors
    /// The directory cannot be created or locked (another coordinator uses it).
    pub fn open(dir: &Path) -> anyhow::Result<StateDir> {
        fs::create_dir_all(dir.join(CAMPAIGNS_DIR))
            .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
        let lock = match LockFile::in_dir(dir, LOCK_FILE) {
            Ok(lock) => lock,
            Err(DurableError::Locked { holder, .. }) => anyhow::bail!(
                "state directory {} is in use by another process{}: give each coordinator its own --state-dir",
                dir.display(),
                holder.map(|p| format!(" (pid {p})")).unwrap_or_default()
            ),
            Err(e) => return Err(e.into()),
        };
        Ok(StateDir {
            dir: dir.to_path_buf(),
            logs: HashMap::new(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn campaign_dir(&self, campaign_id: &str) -> PathBuf {
        self.dir.join(CAMPAIGNS_DIR).join(dir_name(campaign_id))
    }

    /// Persists a newly launched campaign: its `campaign.json` and an empty batch log.
    ///
    /// # Errors
    /// Any I/O error (then the campaign must not be launched).
    pub fn create(&mut self, rec: &CampaignRecord) -> anyhow::Result<()> {
        let dir = self.campaign_dir(&rec.campaign_id);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        sync_dir(&self.dir.join(CAMPAIGNS_DIR))
            .with_context(|| format!("cannot fsync {}", self.dir.display()))?;
        let log = open_log(&dir)?;
        self.save(rec)?;
        self.logs.insert(rec.campaign_id.clone(), Arc::new(log));
        Ok(())
    }

    /// Replaces the campaign's `campaign.json` atomically; once it has a summary, closes its
    /// batch log.
    ///
    /// # Errors
    /// Any I/O error.
    pub fn save(&mut self, rec: &CampaignRecord) -> anyhow::Result<()> {
        let path = self.campaign_dir(&rec.campaign_id).join(CAMPAIGN_FILE);
        let text = serde_json::to_vec_pretty(rec).context("campaign record")?;
        atomic_write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
        if rec.summary.is_some() {
            self.logs.remove(&rec.campaign_id);
        }
        Ok(())
    }

    /// The batch log of an unfinished campaign.
    pub fn log(&self, campaign_id: &str) -> Option<Arc<Spool>> {
        self.logs.get(campaign_id).cloned()
    }

    /// Every campaign record in the directory (unreadable ones are logged and skipped).
    pub fn records(&self) -> Vec<CampaignRecord> {
        let root = self.dir.join(CAMPAIGNS_DIR);
        let Ok(entries) = fs::read_dir(&root) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let path = e.path().join(CAMPAIGN_FILE);
            match read_record(&path) {
                Ok(Some(rec)) => out.push(rec),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(path = %path.display(), error = format!("{e:#}"), "unreadable campaign record skipped")
                }
            }
        }
        out.sort_by_key(|r| r.launched_at_unix_us);
        out
    }

    /// Writes a series' record (`DIR/series/<id>.json`, replaced atomically).
    ///
    /// # Errors
    /// Any I/O error.
    pub fn save_series<T: Serialize>(&self, series_id: &str, rec: &T) -> anyhow::Result<()> {
        let dir = self.dir.join(SERIES_DIR);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(format!("{}.json", dir_name(series_id)));
        let text = serde_json::to_vec_pretty(rec).context("series record")?;
        atomic_write(&path, &text).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Every series record in the directory (unreadable ones are logged and skipped).
    pub fn series_records<T: serde::de::DeserializeOwned>(&self) -> Vec<T> {
        let Ok(entries) = fs::read_dir(self.dir.join(SERIES_DIR)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match fs::read(&path)
                .map_err(anyhow::Error::from)
                .and_then(|b| Ok(serde_json::from_slice(&b)?))
            {
                Ok(rec) => out.push(rec),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = format!("{e:#}"), "unreadable series record skipped")
                }
            }
        }
        out
    }

    /// The record of `campaign_id`, if persisted here.
    pub fn record(&self, campaign_id: &str) -> Option<CampaignRecord> {
        let path = self.campaign_dir(campaign_id).join(CAMPAIGN_FILE);
        read_record(&path).ok().flatten()
    }

    /// Opens the batch log of an unfinished campaign (keeping it open for appends) and calls
    /// `each` with every entry in it, in append order.
    ///
    /// # Errors
    /// The log cannot be opened or read.
    pub fn replay(&mut self, campaign_id: &str, mut each: impl FnMut(Entry)) -> anyhow::Result<()> {
        let dir = self.campaign_dir(campaign_id);
        let log = Arc::new(open_log(&dir)?);
        let mut after = None;
        loop {
            let chunk = log
                .read_from(after, REPLAY_CHUNK)
                .with_context(|| format!("reading the batch log of campaign {campaign_id}"))?;
            let Some(last) = chunk.last().map(|e| e.id) else {
                break;
            };
            after = Some(last);
            chunk.into_iter().for_each(&mut each);
        }
        self.logs.insert(campaign_id.to_string(), log);
        Ok(())
    }
}

fn open_log(campaign_dir: &Path) -> anyhow::Result<Spool> {
    let dir = campaign_dir.join(BATCHES_DIR);
    Spool::open(SpoolConfig::new(dir.clone(), LOG_MAX_BYTES))
        .with_context(|| format!("opening the batch log {}", dir.display()))
}

fn read_record(path: &Path) -> anyhow::Result<Option<CampaignRecord>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let rec: CampaignRecord = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} does not parse", path.display()))?;
    anyhow::ensure!(
        rec.format == FORMAT,
        "{}: format {} (this coordinator reads {FORMAT})",
        path.display(),
        rec.format
    );
    Ok(Some(rec))
}

/// A directory name for a campaign id: the id itself when it is made of `A-Z a-z 0-9 - _ .`
/// (and does not start with a dot), else the safe characters with `%XX` for the others.
fn dir_name(campaign_id: &str) -> String {
    let mut out = String::with_capacity(campaign_id.len());
    for (i, b) in campaign_id.bytes().enumerate() {
        let safe = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if safe {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push('%');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_proto::pb;

    fn record(id: &str) -> CampaignRecord {
        CampaignRecord {
            format: FORMAT,
            campaign_id: id.into(),
            plan_json: "{}".into(),
            plan_hash: "h".into(),
            launched_at_unix_us: 1,
            start_at_unix_us: 2,
            deadline_unix_us: 3,
            agents: [(
                "a1".to_string(),
                AgentRecord {
                    region: "us-east".into(),
                    ..Default::default()
                },
            )]
            .into(),
            expired: false,
            cancelled_at_us: None,
            allow_missing_keys: false,
            summary: None,
            budget: Default::default(),
        }
    }

    #[test]
    fn records_and_batches_survive_a_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let mut sd = StateDir::open(tmp.path()).unwrap();
        let err = StateDir::open(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("--state-dir"), "{err}");
        let mut rec = record("c/../x");
        sd.create(&rec).unwrap();
        let log = sd.log(&rec.campaign_id).unwrap();
        for seq in 1..=3 {
            let b = pb::ResultBatch {
                campaign_id: rec.campaign_id.clone(),
                seq,
                ..Default::default()
            };
            log.append("a1", "us-east", &b).unwrap();
        }
        rec.agents.get_mut("a1").unwrap().last_seq = Some(3);
        sd.save(&rec).unwrap();
        drop((log, sd));

        let mut sd = StateDir::open(tmp.path()).unwrap();
        assert_eq!(sd.records(), vec![rec.clone()]);
        assert_eq!(sd.record(&rec.campaign_id), Some(rec.clone()));
        let mut seqs = Vec::new();
        sd.replay(&rec.campaign_id, |e| seqs.push((e.agent_id, e.batch.seq)))
            .unwrap();
        assert_eq!(seqs, [("a1".into(), 1), ("a1".into(), 2), ("a1".into(), 3)]);
        assert!(sd.log(&rec.campaign_id).is_some(), "open for appends");
        assert!(
            tmp.path().join("campaigns").join("c%2F..%2Fx").is_dir(),
            "ids never escape the directory"
        );
    }
}
