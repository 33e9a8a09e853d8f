//! The agent's on-disk spool: every sealed result batch is written here before it is sent and
//! deleted once the coordinator acks it, so an agent killed (even with SIGKILL) and restarted
//! resends what was not acked and loses nothing it had spooled.
//!
//! # Layout (one directory per agent process, [`SpoolConfig::dir`])
//!
//! - `agent.lock`: held (`flock`) while an agent uses the directory; holds its pid. A second
//!   process on the same directory fails to start with [`SpoolError::Locked`].
//! - `batches/<campaign>.<seq>.batch`: one file per unacked batch (`<campaign>` escaped, `<seq>`
//!   as 20 digits). Written atomically: `…batch.tmp`, fsync, rename, fsync the directory; only
//!   then is the batch handed to the session for sending. A `.tmp` left by a crash was never
//!   sent and is deleted on open.
//! - `journal/<campaign>.journal`: one line per spooled batch, `<seq> <entry> …`, what its
//!   records belong to: `<round>.<slot>` for a rounds slot, `rate:<scenario>:<provider>:<i>`
//!   for open-loop arrival `i`, `sweep:<scenario>:<step>` for a sweep step (names hold no `:`
//!   or space); fsync'd after the batch file. It outlives the batches (they are deleted on
//!   ack) and tells a restarted agent what a previous process measured (not run again, not
//!   counted as skipped) and the highest seq it used (new batches number after it). A torn
//!   last line is ignored.
//! - `corrupt/`: files that failed their checks on open (torn, flipped bits, not a batch),
//!   moved aside with a warning, never deleted, never a crash.
//! - `quarantine/`: what will never be sent, kept for inspection, never deleted by the agent
//!   (README "Failure semantics"): `<campaign>.<seq>.batch`, a batch the coordinator refused
//!   as malformed (moved here from `batches/`), and `<campaign>.oversized.<unix µs>.batch`,
//!   records or histograms too large for any batch (in a batch with seq 0); each in the batch
//!   file format below, with a `.reason` text file beside it saying why.
//!
//! # Batch file format (version 1), integers little-endian
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `LMAGSP01` |
//! | 4 | `payload_len` (u32) |
//! | 4 | CRC-32 (IEEE) of the payload |
//! | `payload_len` | agent id length (u32), agent id (UTF-8), prost-encoded `latmesh.v1.ResultBatch` |
//!
//! A batch carries its campaign id and seq; the file adds the agent id, so a directory
//! holding another agent's batches is refused ([`SpoolError::OtherAgent`]) rather than resent
//! under the wrong name.
//!
//! # Bound
//!
//! [`SpoolConfig::max_bytes`] caps the batch files on disk. A batch that would pass it is not
//! written ([`SpoolError::Full`]); the outbox keeps it in memory, sends it anyway and warns:
//! it is lost only if this process dies before the coordinator acks it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use latmesh_durable::{DurableError, FrameError, Framing, LockFile};
use latmesh_proto::pb;
use prost::Message;

/// Largest payload accepted when reading (a batch is far smaller).
const MAX_PAYLOAD_BYTES: usize = 256 << 20;
/// The batch file format (see the [module documentation](self)).
const FRAMING: Framing = Framing::new(b"LMAGSP01").with_payload_bounds(0, MAX_PAYLOAD_BYTES);
const LOCK_FILE: &str = "agent.lock";
const BATCHES: &str = "batches";
const JOURNAL: &str = "journal";
const CORRUPT: &str = "corrupt";
const QUARANTINE: &str = "quarantine";
const REASON_SUFFIX: &str = ".reason";
const BATCH_SUFFIX: &str = ".batch";
const TMP_SUFFIX: &str = ".tmp";
const JOURNAL_SUFFIX: &str = ".journal";
/// Journals with no batch left and untouched this long are deleted on open.
const JOURNAL_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default [`SpoolConfig::max_bytes`]: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Where the spool lives and how much it may hold.
#[derive(Clone, Debug)]
pub struct SpoolConfig {
    /// The directory (created with its parents, mode 0700, if missing).
    pub dir: PathBuf,
    /// Cap on the batch files on disk, bytes.
    pub max_bytes: u64,
    /// On a clean exit that empties the directory, also remove its parent when that is empty
    /// (set for the [`default_dir`], whose parent is per coordinator).
    pub prune_parent: bool,
}

impl SpoolConfig {
    /// A spool in `dir` with the default bound.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SpoolConfig {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            prune_parent: false,
        }
    }
}

/// The default spool directory of agent `agent_id` of the coordinator at `coordinator_url`:
/// `$XDG_STATE_HOME/latmesh-agent/<coordinator host_port>/<agent id>` (`$XDG_STATE_HOME`
/// defaults to `~/.local/state`; without a home directory, `./latmesh-agent-spool/…`). Seqs and
/// campaign ids belong to one coordinator, so its address is part of the path.
pub fn default_dir(coordinator_url: &str, agent_id: &str) -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
        .map(|b| b.join("latmesh-agent"))
        .unwrap_or_else(|| PathBuf::from("latmesh-agent-spool"));
    let coordinator = coordinator_url
        .split_once("://")
        .map_or(coordinator_url, |(_, rest)| rest)
        .trim_end_matches('/');
    base.join(escape(&coordinator.replace(':', "_")))
        .join(escape(agent_id))
}

/// Errors of the spool.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Another process holds the directory.
    #[error(
        "spool directory {dir} is in use by another latmesh-agent process{pid}: one agent process per spool directory (give this one its own --spool-dir)",
        pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The pid written in the lock file, when readable.
        pid: Option<u32>,
    },
    /// The directory holds batches of another agent id.
    #[error(
        "spool directory {dir} holds unacked batches of agent {theirs:?} (e.g. {file}), not of this agent {ours:?}: start agent {theirs:?} on it to deliver them, or give this agent its own --spool-dir"
    )]
    OtherAgent {
        /// The directory.
        dir: PathBuf,
        /// Agent id in the file.
        theirs: String,
        /// This agent's id.
        ours: String,
        /// One such file.
        file: PathBuf,
    },
    /// Writing the batch would pass the bound.
    #[error("agent spool full: {bytes} bytes of unacked batches on disk, bound {max_bytes}")]
    Full {
        /// Bytes of batch files on disk.
        bytes: u64,
        /// The bound.
        max_bytes: u64,
    },
    /// A file operation failed.
    #[error("agent spool: cannot {op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SpoolError + 'a {
    move |source| SpoolError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl From<DurableError> for SpoolError {
    fn from(e: DurableError) -> Self {
        match e {
            DurableError::Io { op, path, source } => SpoolError::Io { op, path, source },
            DurableError::Locked { path, holder } => SpoolError::Locked {
                dir: path.parent().map(Path::to_path_buf).unwrap_or(path),
                pid: holder,
            },
        }
    }
}

/// What a previous process left of one campaign.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// Highest seq spooled (0: none).
    pub max_seq: u64,
    /// (round, slot) of every `rounds` record spooled.
    pub slots: BTreeSet<(u32, u32)>,
    /// (scenario, provider, arrival index) of every `rate` record spooled.
    pub arrivals: BTreeSet<(String, String, u32)>,
    /// (scenario, step) of every `sweep` step with a record spooled.
    pub sweep_steps: BTreeSet<(String, u32)>,
}

impl Resume {
    /// What the records of `batch` belong to (`max_seq`: its seq).
    pub fn of_batch(batch: &pb::ResultBatch) -> Resume {
        let mut r = Resume {
            max_seq: batch.seq,
            ..Resume::default()
        };
        for rec in &batch.records {
            match rec.load.as_str() {
                "" | "rounds" => {
                    r.slots.insert((rec.round, rec.slot));
                }
                "rate" => {
                    r.arrivals
                        .insert((rec.scenario.clone(), rec.provider.clone(), rec.slot));
                }
                "sweep" => {
                    r.sweep_steps.insert((rec.scenario.clone(), rec.step));
                }
                _ => {}
            }
        }
        r
    }

    /// Adds what `other` knows.
    pub fn merge(&mut self, other: Resume) {
        self.max_seq = self.max_seq.max(other.max_seq);
        self.slots.extend(other.slots);
        self.arrivals.extend(other.arrivals);
        self.sweep_steps.extend(other.sweep_steps);
    }

    /// The journal entries (without the seq), space-separated, each after a space.
    fn journal_entries(&self) -> String {
        let mut line = String::new();
        for (round, slot) in &self.slots {
            line.push_str(&format!(" {round}.{slot}"));
        }
        for (scenario, provider, i) in &self.arrivals {
            line.push_str(&format!(" rate:{scenario}:{provider}:{i}"));
        }
        for (scenario, step) in &self.sweep_steps {
            line.push_str(&format!(" sweep:{scenario}:{step}"));
        }
        line
    }

    /// Adds one journal entry; `None` when it does not parse.
    fn add_entry(&mut self, entry: &str) -> Option<()> {
        let parts: Vec<&str> = entry.split(':').collect();
        match parts.as_slice() {
            ["rate", scenario, provider, i] => {
                self.arrivals
                    .insert((scenario.to_string(), provider.to_string(), i.parse().ok()?));
            }
            ["sweep", scenario, step] => {
                self.sweep_steps
                    .insert((scenario.to_string(), step.parse().ok()?));
            }
            [slot] => {
                let (r, s) = slot.split_once('.')?;
                self.slots.insert((r.parse().ok()?, s.parse().ok()?));
            }
            _ => return None,
        }
        Some(())
    }
}

/// What [`Spool::open`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Unacked batches, by campaign then seq.
    pub batches: Vec<pb::ResultBatch>,
    /// Per campaign: the seqs and slots of everything spooled before (acked or not).
    pub resume: BTreeMap<String, Resume>,
    /// Files moved to `corrupt/`.
    pub corrupt: usize,
}

/// An open spool directory; holds its lock until dropped.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    agent_id: String,
    max_bytes: u64,
    prune_parent: bool,
    /// Size of every batch file on disk, by (campaign, seq).
    sizes: Mutex<BTreeMap<(String, u64), u64>>,
    _lock: LockFile,
}

impl Spool {
    /// Opens (creating it if needed) and locks the spool of agent `agent_id`, and loads what a
    /// previous process left: unacked batches and journals. Corrupt files are moved to
    /// `corrupt/` with a warning; leftover `.tmp` files are deleted.
    ///
    /// # Errors
    /// [`SpoolError::Locked`], [`SpoolError::OtherAgent`], or [`SpoolError::Io`] when the
    /// directory cannot be created, locked or listed.
    pub fn open(cfg: &SpoolConfig, agent_id: &str) -> Result<(Spool, Loaded), SpoolError> {
        let dir = cfg.dir.clone();
        create_dir(&dir)?;
        let lock = LockFile::in_dir(&dir, LOCK_FILE)?;
        let (batches_dir, journal_dir) = (dir.join(BATCHES), dir.join(JOURNAL));
        create_dir(&batches_dir)?;
        create_dir(&journal_dir)?;
        let spool = Spool {
            dir,
            agent_id: agent_id.to_string(),
            max_bytes: cfg.max_bytes,
            prune_parent: cfg.prune_parent,
            sizes: Mutex::default(),
            _lock: lock,
        };
        let loaded = spool.load()?;
        Ok((spool, loaded))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u64), u64>> {
        self.sizes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of batch files on disk.
    pub fn bytes(&self) -> u64 {
        self.sizes().values().sum()
    }

    fn load(&self) -> Result<Loaded, SpoolError> {
        let mut loaded = Loaded::default();
        let batches_dir = self.dir.join(BATCHES);
        for path in list(&batches_dir)? {
            let name = file_name(&path);
            if name.ends_with(TMP_SUFFIX) {
                // Never renamed into place, so never sent: nothing is lost.
                let _ = fs::remove_file(&path);
                continue;
            }
            if !name.ends_with(BATCH_SUFFIX) {
                continue;
            }
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) => return Err(io_err("read", &path)(e)),
            };
            match decode(&bytes) {
                Ok((agent, _)) if agent != self.agent_id => {
                    return Err(SpoolError::OtherAgent {
                        dir: self.dir.clone(),
                        theirs: agent,
                        ours: self.agent_id.clone(),
                        file: path,
                    });
                }
                Ok((_, batch)) => {
                    self.sizes()
                        .insert((batch.campaign_id.clone(), batch.seq), bytes.len() as u64);
                    let r = loaded.resume.entry(batch.campaign_id.clone()).or_default();
                    r.merge(Resume::of_batch(&batch));
                    loaded.batches.push(batch);
                }
                Err(reason) => {
                    loaded.corrupt += 1;
                    self.move_aside(&path, &reason);
                }
            }
        }
        loaded
            .batches
            .sort_by(|a, b| (&a.campaign_id, a.seq).cmp(&(&b.campaign_id, b.seq)));
        let journal_dir = self.dir.join(JOURNAL);
        for path in list(&journal_dir)? {
            let name = file_name(&path);
            let Some(campaign) = name.strip_suffix(JOURNAL_SUFFIX).and_then(unescape) else {
                continue;
            };
            let has_batches = loaded.resume.contains_key(&campaign);
            let old = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .is_some_and(|age| age > JOURNAL_MAX_AGE);
            if old && !has_batches {
                let _ = fs::remove_file(&path);
                continue;
            }
            let text = match fs::read(&path) {
                Ok(t) => t,
                Err(e) => return Err(io_err("read", &path)(e)),
            };
            let (resume, bad) = parse_journal(&text);
            if bad > 0 {
                tracing::warn!(file = %path.display(), bad_lines = bad, "agent spool: journal lines that do not parse were ignored");
            }
            loaded.resume.entry(campaign).or_default().merge(resume);
        }
        Ok(loaded)
    }

    fn move_aside(&self, path: &Path, reason: &str) {
        let corrupt = self.dir.join(CORRUPT);
        let to = corrupt.join(file_name(path));
        let moved = create_dir(&corrupt)
            .map_err(|e| e.to_string())
            .and_then(|()| fs::rename(path, &to).map_err(|e| e.to_string()));
        match moved {
            Ok(()) => {
                tracing::warn!(file = %path.display(), moved_to = %to.display(), %reason, "agent spool: corrupt batch file moved aside (a torn write after a crash, or damage); it is not resent")
            }
            Err(e) => {
                tracing::error!(file = %path.display(), %reason, error = %e, "agent spool: corrupt batch file could not be moved aside; it is ignored")
            }
        }
    }

    /// Writes `batch` durably (temp file, fsync, rename, fsync the directory), then appends
    /// its slots to the campaign's journal (fsync'd).
    ///
    /// # Errors
    /// [`SpoolError::Full`] (nothing written), or [`SpoolError::Io`] (nothing left behind
    /// but possibly a `.tmp` file, deleted on the next open).
    pub fn persist(&self, batch: &pb::ResultBatch) -> Result<(), SpoolError> {
        let bytes = encode(&self.agent_id, batch);
        let used = self.bytes();
        if used + bytes.len() as u64 > self.max_bytes {
            return Err(SpoolError::Full {
                bytes: used,
                max_bytes: self.max_bytes,
            });
        }
        let path = batch_path(&self.dir, &batch.campaign_id, batch.seq);
        let written = latmesh_durable::atomic_write(&path, &bytes);
        if written.is_ok() || path.exists() {
            // Renamed into place (maybe not durably): it counts, and an ack deletes it.
            self.sizes()
                .insert((batch.campaign_id.clone(), batch.seq), bytes.len() as u64);
        }
        written?;
        if let Err(e) = self.journal(batch) {
            // The batch itself is safe; a restart may only count its slots as skipped.
            tracing::warn!(error = %e, "agent spool: journal not updated");
        }
        Ok(())
    }

    fn journal(&self, batch: &pb::ResultBatch) -> Result<(), SpoolError> {
        let path = journal_path(&self.dir, &batch.campaign_id);
        let mut line = batch.seq.to_string();
        line.push_str(&Resume::of_batch(batch).journal_entries());
        line.push('\n');
        let existed = path.exists();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                f.write_all(line.as_bytes())?;
                f.sync_data()
            })
            .map_err(io_err("append to", &path))?;
        if !existed {
            sync_dir(&self.dir.join(JOURNAL))?;
        }
        Ok(())
    }

    /// Deletes the file of an acked batch (a delete lost in a crash only means one resend,
    /// which the coordinator de-duplicates).
    pub fn remove(&self, campaign_id: &str, seq: u64) {
        if self
            .sizes()
            .remove(&(campaign_id.to_string(), seq))
            .is_none()
        {
            return; // kept in memory only
        }
        let path = batch_path(&self.dir, campaign_id, seq);
        if let Err(e) = fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(file = %path.display(), error = %e, "agent spool: cannot delete an acked batch; it is resent (and de-duplicated) after a restart");
        }
    }

    /// Moves `batch` to `quarantine/` (see the [module documentation](self)) with a
    /// `.reason` file saying `reason`: its file in `batches/` is renamed there when it has one
    /// (a batch the coordinator refused), else it is written there (a batch kept in memory
    /// only, or the oversized items of [`crate::batches::Split`], seq 0). It no longer counts
    /// against [`SpoolConfig::max_bytes`]. Returns the quarantine file.
    ///
    /// # Errors
    /// [`SpoolError::Io`] when the directory, the file or its reason cannot be written.
    pub fn quarantine(&self, batch: &pb::ResultBatch, reason: &str) -> Result<PathBuf, SpoolError> {
        let dir = self.dir.join(QUARANTINE);
        create_dir(&dir)?;
        let name = if batch.seq == 0 {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            format!(
                "{}.oversized.{now}{BATCH_SUFFIX}",
                escape(&batch.campaign_id)
            )
        } else {
            file_name(&batch_path(&self.dir, &batch.campaign_id, batch.seq))
        };
        let to = dir.join(&name);
        let spooled = self
            .sizes()
            .remove(&(batch.campaign_id.clone(), batch.seq))
            .is_some()
            && batch.seq != 0;
        let from = batch_path(&self.dir, &batch.campaign_id, batch.seq);
        if !(spooled && fs::rename(&from, &to).is_ok()) {
            latmesh_durable::atomic_write(&to, &encode(&self.agent_id, batch))?;
            if spooled {
                let _ = fs::remove_file(&from);
            }
        }
        let reason_path = dir.join(format!("{name}{REASON_SUFFIX}"));
        fs::write(&reason_path, format!("{reason}\n")).map_err(io_err("write", &reason_path))?;
        sync_dir(&dir)?;
        sync_dir(&self.dir.join(BATCHES))?;
        Ok(to)
    }

    /// Deletes the journal of a campaign that is over (finished and every batch acked).
    pub fn forget_campaign(&self, campaign_id: &str) {
        let _ = fs::remove_file(journal_path(&self.dir, campaign_id));
    }

    /// Deletes the whole directory when it holds nothing but the lock (no batch, journal or
    /// corrupt file): called on a clean exit, so agents started with the default directory
    /// leave nothing behind.
    pub fn remove_dir_if_empty(&self) {
        let empty = |d: &Path| fs::read_dir(d).map_or(true, |mut it| it.next().is_none());
        let (b, j, c) = (
            self.dir.join(BATCHES),
            self.dir.join(JOURNAL),
            self.dir.join(CORRUPT),
        );
        if !(empty(&b) && empty(&j) && empty(&c) && empty(&self.dir.join(QUARANTINE))) {
            return;
        }
        let only_known = fs::read_dir(&self.dir).is_ok_and(|it| {
            it.filter_map(Result::ok).all(|e| {
                let n = e.file_name();
                n == BATCHES || n == JOURNAL || n == CORRUPT || n == QUARANTINE || n == LOCK_FILE
            })
        });
        if !only_known {
            return;
        }
        let _ = fs::remove_dir(&b);
        let _ = fs::remove_dir(&j);
        let _ = fs::remove_dir(&c);
        let _ = fs::remove_dir(self.dir.join(QUARANTINE));
        let _ = fs::remove_file(self.dir.join(LOCK_FILE));
        let _ = fs::remove_dir(&self.dir);
        if self.prune_parent
            && let Some(parent) = self.dir.parent()
        {
            let _ = fs::remove_dir(parent); // only when empty
        }
    }
}

/// Reads every batch file in the spool directory `dir` without locking it or changing
/// anything (for inspection and tests): (agent id, batch) per readable file, by campaign and
/// seq.
///
/// # Errors
/// When the directory cannot be listed or a file cannot be read; a file that fails its
/// checks gives `Err` with the reason in its place.
pub fn read_batches(dir: &Path) -> io::Result<Vec<Result<(String, pb::ResultBatch), String>>> {
    read_batch_files(&dir.join(BATCHES))
}

/// Reads every batch file in the quarantine of the spool directory `dir` (as
/// [`read_batches`]; an agent that never quarantined anything has none: empty).
///
/// # Errors
/// As [`read_batches`].
pub fn read_quarantine(dir: &Path) -> io::Result<Vec<Result<(String, pb::ResultBatch), String>>> {
    let q = dir.join(QUARANTINE);
    if !q.is_dir() {
        return Ok(Vec::new());
    }
    read_batch_files(&q)
}

fn read_batch_files(dir: &Path) -> io::Result<Vec<Result<(String, pb::ResultBatch), String>>> {
    let mut out = Vec::new();
    for path in list(dir).map_err(|e| match e {
        SpoolError::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
    })? {
        if file_name(&path).ends_with(BATCH_SUFFIX) {
            out.push(decode(&fs::read(&path)?));
        }
    }
    Ok(out)
}

fn encode(agent_id: &str, batch: &pb::ResultBatch) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(FRAMING.header_len() + 4 + agent_id.len() + batch.encoded_len());
    FRAMING.start(&mut out);
    out.extend_from_slice(&(agent_id.len() as u32).to_le_bytes());
    out.extend_from_slice(agent_id.as_bytes());
    batch.encode(&mut out).expect("a Vec grows as needed");
    FRAMING.seal(&mut out);
    out
}

fn decode(bytes: &[u8]) -> Result<(String, pb::ResultBatch), String> {
    let payload = FRAMING.decode(bytes).map_err(|e| match e {
        FrameError::BadMagic { .. } => "not an agent spool batch (bad magic)".to_string(),
        FrameError::PayloadLength { payload_len, .. } => format!(
            "payload length {payload_len} does not match the file ({} bytes): torn write?",
            bytes.len()
        ),
        e => e.to_string(),
    })?;
    if payload.len() < 4 {
        return Err("payload too short".into());
    }
    let agent_len = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")) as usize;
    let Some(agent) = payload.get(4..4 + agent_len) else {
        return Err("agent id longer than the payload".into());
    };
    let agent = String::from_utf8(agent.to_vec()).map_err(|_| "agent id is not UTF-8")?;
    let batch = pb::ResultBatch::decode(&payload[4 + agent_len..])
        .map_err(|e| format!("batch does not decode: {e}"))?;
    Ok((agent, batch))
}

/// Parses a journal; returns what it says and the number of lines that did not parse (a torn
/// last line without its newline is dropped silently: it was never fsync'd whole).
fn parse_journal(text: &[u8]) -> (Resume, usize) {
    let text = String::from_utf8_lossy(text);
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    let mut resume = Resume::default();
    let mut bad = 0;
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_ascii_whitespace();
        let seq = parts.next().and_then(|s| s.parse::<u64>().ok());
        let mut entries = Resume::default();
        let parsed = parts.all(|p| entries.add_entry(p).is_some());
        match seq {
            Some(seq) if parsed => {
                entries.max_seq = seq;
                resume.merge(entries);
            }
            _ => bad += 1,
        }
    }
    (resume, bad)
}

fn batch_path(dir: &Path, campaign_id: &str, seq: u64) -> PathBuf {
    dir.join(BATCHES)
        .join(format!("{}.{seq:020}{BATCH_SUFFIX}", escape(campaign_id)))
}

fn journal_path(dir: &Path, campaign_id: &str) -> PathBuf {
    dir.join(JOURNAL)
        .join(format!("{}{JOURNAL_SUFFIX}", escape(campaign_id)))
}

/// A file-name-safe, reversible form of `s`: ASCII letters, digits, `-`, `_` and `.` (but not
/// a leading one) stay, every other byte becomes `%XX`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, b) in s.bytes().enumerate() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, SpoolError> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(io_err("list", dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    Ok(paths)
}

fn create_dir(dir: &Path) -> Result<(), SpoolError> {
    Ok(latmesh_durable::create_private_dir(dir)?)
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    Ok(latmesh_durable::sync_dir(dir)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(name: &str) -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = std::env::temp_dir().join(format!(
                "latmesh-agent-{name}-{}-{}-{nanos}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn batch(campaign: &str, seq: u64, slots: &[(u32, u32)]) -> pb::ResultBatch {
        pb::ResultBatch {
            campaign_id: campaign.into(),
            seq,
            records: slots
                .iter()
                .map(|&(round, slot)| pb::ProbeRecord {
                    round,
                    slot,
                    provider: "p".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn cfg(dir: &TempDir) -> SpoolConfig {
        SpoolConfig::new(dir.0.join("spool"))
    }

    #[test]
    fn names_escape_reversibly() {
        for s in ["demo-1a2b", "a b/c%d.e", "π", "", "..", "x_y"] {
            let e = escape(s);
            assert!(
                e.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_%.".contains(&b))
            );
            assert!(!e.starts_with('.'));
            assert_eq!(unescape(&e).as_deref(), Some(s));
        }
        assert_ne!(escape("a_b"), escape("a b"));
    }

    #[test]
    fn the_default_directory_is_per_coordinator_and_agent() {
        let a = default_dir("http://127.0.0.1:7700", "us-east-1");
        let b = default_dir("http://127.0.0.1:7701", "us-east-1");
        let c = default_dir("http://127.0.0.1:7700", "us-east-2");
        assert!(a.ends_with("127.0.0.1_7700/us-east-1"), "{a:?}");
        assert!(a != b && a != c);
    }

    #[test]
    fn unacked_batches_survive_a_reopen_and_acked_ones_do_not() {
        let dir = TempDir::new("reopen");
        {
            let (spool, loaded) = Spool::open(&cfg(&dir), "a1").unwrap();
            assert!(loaded.batches.is_empty() && loaded.resume.is_empty());
            spool.persist(&batch("c/1", 1, &[(0, 0), (0, 1)])).unwrap();
            spool.persist(&batch("c/1", 2, &[(0, 2)])).unwrap();
            spool.persist(&batch("d", 7, &[(3, 4)])).unwrap();
            spool.remove("c/1", 1);
            assert!(spool.bytes() > 0);
        }
        let (spool, loaded) = Spool::open(&cfg(&dir), "a1").unwrap();
        let got: Vec<_> = loaded
            .batches
            .iter()
            .map(|b| (b.campaign_id.as_str(), b.seq, b.records.len()))
            .collect();
        assert_eq!(got, vec![("c/1", 2, 1), ("d", 7, 1)]);
        // The journal remembers the acked batch's slots and seq.
        assert_eq!(
            loaded.resume["c/1"],
            Resume {
                max_seq: 2,
                slots: [(0, 0), (0, 1), (0, 2)].into(),
                ..Resume::default()
            }
        );
        assert_eq!(loaded.resume["d"].max_seq, 7);
        assert_eq!(loaded.corrupt, 0);
        assert_eq!(read_batches(spool.dir()).unwrap().len(), 2);
    }

    #[test]
    fn a_second_process_on_the_directory_is_refused() {
        let dir = TempDir::new("lock");
        let (_spool, _) = Spool::open(&cfg(&dir), "a1").unwrap();
        let err = Spool::open(&cfg(&dir), "a1").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, SpoolError::Locked { .. }), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(text.contains("one agent process per spool directory"));
    }

    #[test]
    fn another_agents_batches_are_not_resent_under_this_id() {
        let dir = TempDir::new("other");
        {
            let (spool, _) = Spool::open(&cfg(&dir), "a1").unwrap();
            spool.persist(&batch("c", 1, &[(0, 0)])).unwrap();
        }
        let err = Spool::open(&cfg(&dir), "b2").unwrap_err();
        assert!(
            matches!(&err, SpoolError::OtherAgent { theirs, ours, .. } if theirs == "a1" && ours == "b2"),
            "{err}"
        );
        // The batch is still there for a1.
        assert_eq!(Spool::open(&cfg(&dir), "a1").unwrap().1.batches.len(), 1);
    }

    #[test]
    fn torn_and_damaged_files_are_moved_aside_and_temp_files_dropped() {
        let dir = TempDir::new("torn");
        let spool_dir = {
            let (spool, _) = Spool::open(&cfg(&dir), "a1").unwrap();
            for seq in 1..=4 {
                spool.persist(&batch("c", seq, &[(0, seq as u32)])).unwrap();
            }
            spool.dir().to_path_buf()
        };
        let path = |seq| batch_path(&spool_dir, "c", seq);
        // Torn: cut short. Flipped bit. Not a batch at all. A temp file from a crash.
        let b1 = fs::read(path(1)).unwrap();
        fs::write(path(1), &b1[..b1.len() - 3]).unwrap();
        let mut b2 = fs::read(path(2)).unwrap();
        let last = b2.len() - 1;
        b2[last] ^= 0x10;
        fs::write(path(2), b2).unwrap();
        fs::write(path(3), b"hello").unwrap();
        fs::write(spool_dir.join(BATCHES).join("x.batch.tmp"), b"half").unwrap();
        // A torn journal line.
        let mut j = OpenOptions::new()
            .append(true)
            .open(journal_path(&spool_dir, "c"))
            .unwrap();
        j.write_all(b"9 5.").unwrap();

        let (_spool, loaded) = Spool::open(&cfg(&dir), "a1").unwrap();
        assert_eq!(loaded.corrupt, 3);
        assert_eq!(
            loaded.batches.iter().map(|b| b.seq).collect::<Vec<_>>(),
            vec![4]
        );
        assert_eq!(
            fs::read_dir(spool_dir.join(CORRUPT)).unwrap().count(),
            3,
            "moved aside, not deleted"
        );
        assert!(!spool_dir.join(BATCHES).join("x.batch.tmp").exists());
        // The journal still knows seqs 1-4 (the torn line is ignored).
        assert_eq!(loaded.resume["c"].max_seq, 4);
        assert_eq!(loaded.resume["c"].slots.len(), 4);
    }

    #[test]
    fn a_journal_line_carries_rounds_slots_arrivals_and_sweep_steps() {
        let rec = |load: &str, round, slot, step| pb::ProbeRecord {
            load: load.into(),
            round,
            slot,
            step,
            provider: "fast-lane".into(),
            scenario: "open.loop_1".into(),
            ..Default::default()
        };
        let b = pb::ResultBatch {
            campaign_id: "c".into(),
            seq: 7,
            records: vec![
                rec("rounds", 2, 5, 0),
                rec("", 3, 1, 0),
                rec("rate", 0, 41, 0),
                rec("rate", 0, 41, 0),
                rec("sweep", 0, 9, 2),
            ],
            ..Default::default()
        };
        let r = Resume::of_batch(&b);
        let line = format!("{}{}\n", b.seq, r.journal_entries());
        assert_eq!(
            line,
            "7 2.5 3.1 rate:open.loop_1:fast-lane:41 sweep:open.loop_1:2\n"
        );
        assert_eq!(parse_journal(line.as_bytes()), (r, 0));
    }

    #[test]
    fn journals_ignore_bad_lines() {
        let (r, bad) = parse_journal(b"1 0.0 0.1\nnonsense\n3 2.x\n6 rate:a:b\n4 1.1\n5 9.9");
        assert_eq!(bad, 3);
        assert_eq!(r.max_seq, 4);
        assert_eq!(r.slots, [(0, 0), (0, 1), (1, 1)].into());
    }

    /// A batch file written byte by byte in the version 1 layout of the module documentation
    /// (what earlier builds wrote) reads back, and this build writes the same bytes.
    #[test]
    fn a_batch_file_in_the_version_1_layout_reads_back() {
        let dir = TempDir::new("v1");
        let b = batch("c", 3, &[(1, 2)]);
        let mut payload = 2u32.to_le_bytes().to_vec();
        payload.extend_from_slice(b"a1");
        payload.extend_from_slice(&b.encode_to_vec());
        let mut file = b"LMAGSP01".to_vec();
        file.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        file.extend_from_slice(&latmesh_durable::checksum(&payload).to_le_bytes());
        file.extend_from_slice(&payload);
        assert_eq!(encode("a1", &b), file);
        let spool_dir = cfg(&dir).dir;
        fs::create_dir_all(spool_dir.join(BATCHES)).unwrap();
        fs::write(batch_path(&spool_dir, "c", 3), &file).unwrap();
        let (_spool, loaded) = Spool::open(&cfg(&dir), "a1").unwrap();
        assert_eq!(loaded.batches, vec![b]);
        assert_eq!(loaded.corrupt, 0);
    }

    #[test]
    fn the_bound_refuses_a_batch_instead_of_passing_it() {
        let dir = TempDir::new("full");
        let mut c = cfg(&dir);
        c.max_bytes = 200;
        let (spool, _) = Spool::open(&c, "a1").unwrap();
        spool.persist(&batch("c", 1, &[(0, 0)])).unwrap();
        let big = batch("c", 2, &(0..50).map(|i| (0, i)).collect::<Vec<_>>());
        let err = spool.persist(&big).unwrap_err();
        assert!(
            matches!(err, SpoolError::Full { max_bytes: 200, .. }),
            "{err}"
        );
        assert!(!batch_path(spool.dir(), "c", 2).exists());
        spool.remove("c", 1);
        assert_eq!(spool.bytes(), 0);
    }

    #[test]
    fn an_emptied_directory_is_removed_on_a_clean_exit() {
        let dir = TempDir::new("empty");
        let mut c = cfg(&dir);
        c.prune_parent = true;
        let (spool, _) = Spool::open(&c, "a1").unwrap();
        spool.persist(&batch("c", 1, &[(0, 0)])).unwrap();
        spool.remove_dir_if_empty();
        assert!(spool.dir().exists(), "a journal is left");
        spool.remove("c", 1);
        spool.forget_campaign("c");
        spool.remove_dir_if_empty();
        assert!(!spool.dir().exists());
        assert!(!dir.0.exists(), "the emptied parent too");
    }
}
