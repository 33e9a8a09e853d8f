//! A durable local spool for result batches, between the agents and the ClickHouse sink.
//!
//! The coordinator [`Spool::append`]s every [`pb::ResultBatch`] an agent sends and acks the
//! batch only once `append` returned `Ok`: by then the batch is on disk and fsync'd. A sink
//! drains the spool with [`Spool::read_from`], possibly much later (ClickHouse may be down for
//! hours), and calls [`Spool::commit`] once ClickHouse confirmed the entries; only then does
//! the spool forget them. When [`SpoolConfig::max_bytes`] of unconsumed data are reached,
//! `append` returns [`SpoolError::Full`]: the coordinator does not ack, the agent keeps the
//! batch and resends it later, so nothing is lost (vector's disk buffer with
//! `WhenFull::Block`, pushed back to the agent).
//!
//! All methods take `&self` ([`Spool`] is `Send + Sync`, share it in an `Arc`). They do
//! blocking file I/O: `append` and `commit` each wait for an fsync (typically well under a
//! millisecond on a local SSD, several milliseconds on network disks), so from async code call
//! them through `tokio::task::spawn_blocking`. Appends are serialized (one fsync each, no group
//! commit). Reads copy out what they need under the lock and read the files without it.
//!
//! One directory belongs to one process: [`Spool::open`] locks `lock` in it
//! (`latmesh_durable::LockFile`) and refuses a directory another process holds
//! ([`SpoolError::Locked`]).
//!
//! # On-disk format (version 1)
//!
//! Everything lives in one directory ([`SpoolConfig::dir`], created if missing):
//!
//! - **Segment files** `spool-<first_id>.log`, where `<first_id>` is the id of the segment's
//!   first entry as 20 decimal digits (so names sort like ids). A segment is a sequence of
//!   records and nothing else; a new segment starts when the next record would take the current
//!   one past [`SpoolConfig::segment_bytes`] (a record larger than that gets a segment of its
//!   own). Only the newest segment is appended to. Within a segment ids are consecutive; across
//!   segments they increase (a failed write burns an id, so there can be gaps).
//! - **Records**, all integers little-endian:
//!
//!   | bytes | field |
//!   | --- | --- |
//!   | 1 | magic `0xB5` |
//!   | 1 | format version, `1` |
//!   | 4 | `payload_len`: u32, bytes of payload that follow the header |
//!   | 4 | CRC-32 (IEEE, as `crc32fast`) of the payload |
//!
//!   (the framing of `latmesh_durable::Framing`, with magic and version as its two magic
//!   bytes)
//!   | `payload_len` | payload |
//!
//!   The payload is: entry id (u64); `agent_id` length (u32) and its UTF-8 bytes; `region`
//!   length (u32) and its UTF-8 bytes; then the prost-encoded `latmesh.v1.ResultBatch`, which
//!   takes the rest of the payload. A whole record (10 header bytes + payload) is at most
//!   [`MAX_RECORD_BYTES`].
//! - **Ledger** `ledger`, 16 bytes: magic `LMS1`, the last committed entry id (u64), and the
//!   CRC-32 of those first 12 bytes. It is replaced atomically (`latmesh_durable::atomic_write`:
//!   write `ledger.tmp`, fsync, rename, fsync the directory). Every id ≤ the committed id is consumed; so is every id below
//!   the first id of the oldest remaining segment (a lost ledger is rebuilt from that).
//!
//! # Durability and recovery
//!
//! `append` writes a record with one `write` and fsyncs the segment (`fdatasync`); creating a
//! segment also fsyncs the directory. [`Spool::open`] reads and checks every record of every
//! segment (magic, version, length, checksum, payload layout, id sequence). At the first bad
//! record of a segment (a torn write after a crash, a flipped bit) the segment is truncated
//! there with a warning and the records before it are kept; never a panic. A crash can only
//! tear the tail of the newest segment, which holds no acknowledged entry; damage anywhere else
//! is logged as an error because it loses acknowledged entries (the rest of that segment).
//! A segment is deleted once every entry in it is committed.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use latmesh_durable::{DurableError, FrameError, Framing, LockFile};
use latmesh_proto::pb;
use prost::Message;

/// Default [`SpoolConfig::segment_bytes`]: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// Largest record the spool writes or accepts when reading, header included: 64 MiB.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

const RECORD_MAGIC: u8 = 0xB5;
const RECORD_VERSION: u8 = 1;
/// id + agent_id length + region length.
const PAYLOAD_MIN_BYTES: usize = 8 + 4 + 4;
/// The record format: magic and version, then payload_len and crc.
const FRAMING: Framing = Framing::new(&[RECORD_MAGIC, RECORD_VERSION])
    .with_payload_bounds(PAYLOAD_MIN_BYTES, MAX_RECORD_BYTES as usize - HEADER_BYTES);
/// magic + version + payload_len + crc.
const HEADER_BYTES: usize = 1 + 1 + 4 + 4;
const _: () = assert!(FRAMING.header_len() == HEADER_BYTES);

const LEDGER_FILE: &str = "ledger";
/// Lock file: one process per spool directory.
const LOCK_FILE: &str = "lock";
const LEDGER_MAGIC: &[u8; 4] = b"LMS1";
const LEDGER_BYTES: usize = 4 + 8 + 4;

const SEGMENT_PREFIX: &str = "spool-";
const SEGMENT_SUFFIX: &str = ".log";

/// Where the spool lives and how much it may hold.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// Directory of the segment files and the ledger; created (with its parents) if missing.
    pub dir: PathBuf,
    /// Cap on unconsumed data, in bytes of records on disk (header + payload) that are not
    /// committed yet. An append that would pass it fails with [`SpoolError::Full`]. The disk
    /// use can be up to about one segment more: a partly consumed segment stays until all of it
    /// is committed.
    pub max_bytes: u64,
    /// Segment file size, in bytes, at which the spool starts a new segment file
    /// (default [`DEFAULT_SEGMENT_BYTES`]). Consumed data is freed a whole segment at a time.
    pub segment_bytes: u64,
}

impl SpoolConfig {
    /// A config for `dir` with a cap of `max_bytes` bytes of unconsumed data and the default
    /// segment size.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        Self {
            dir: dir.into(),
            max_bytes,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// One spooled result batch, as [`Spool::read_from`] returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Spool entry id: increases with every append, also across restarts; never reused once
    /// an append returned it.
    pub id: u64,
    /// The agent that sent the batch.
    pub agent_id: String,
    /// The region that agent measures from.
    pub region: String,
    /// The batch, exactly as appended.
    pub batch: pb::ResultBatch,
}

/// Why a spool operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// Another process has this spool directory open (two coordinators must not share one).
    #[error(
        "spool directory {dir} is in use by another process{pid}: give each coordinator its own --spool-dir",
        pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The pid the holder wrote in the lock file, when readable.
        pid: Option<u32>,
    },
    /// A file system operation failed. A failed `append` stored nothing that will be read
    /// back: do not ack the batch.
    #[error("spool: cannot {op} {path}")]
    Io {
        /// What the spool was doing, e.g. `"fsync"`.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The record would take the unconsumed data past [`SpoolConfig::max_bytes`]. Nothing was
    /// written; do not ack, the agent resends later. Clears as the sink commits.
    #[error(
        "spool full: {pending_bytes} bytes pending + {record_bytes} byte record > max_bytes {max_bytes}"
    )]
    Full {
        /// Bytes of unconsumed records on disk.
        pending_bytes: u64,
        /// Bytes the refused record would have taken on disk.
        record_bytes: u64,
        /// The configured cap, in bytes.
        max_bytes: u64,
    },
    /// The record alone is larger than [`SpoolConfig::max_bytes`] or [`MAX_RECORD_BYTES`]:
    /// it can never be stored, so retrying is pointless.
    #[error(
        "batch too large for the spool: {record_bytes} byte record > limit {limit_bytes} bytes"
    )]
    TooLarge {
        /// Bytes the record would take on disk.
        record_bytes: u64,
        /// The smaller of `max_bytes` and [`MAX_RECORD_BYTES`].
        limit_bytes: u64,
    },
    /// Data the spool cannot recover from by itself: an unreadable ledger, overlapping
    /// segments, or a record damaged after [`Spool::open`] checked it.
    #[error("spool corrupt: {path} at byte {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset in that file.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SpoolError {
    let path = path.to_path_buf();
    move |source| SpoolError::Io { op, path, source }
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

/// Where one record is.
#[derive(Debug, Clone, Copy)]
struct RecordLoc {
    id: u64,
    offset: u64,
    len: u32,
    /// When it was appended (for entries an earlier process left: when this one opened
    /// the spool); [`Spool::oldest_pending_age`] reads it.
    appended: Instant,
}

struct Segment {
    /// Id in the file name: the first entry ever written to it.
    first_id: u64,
    path: PathBuf,
    /// Bytes of valid records in the file.
    len: u64,
    /// Unconsumed records (consumed ones are popped from the front).
    records: VecDeque<RecordLoc>,
}

struct State {
    segments: VecDeque<Segment>,
    /// Append handle of the last segment; `None` means the next append starts a new segment.
    writer: Option<File>,
    next_id: u64,
    committed_id: u64,
    pending_bytes: u64,
    pending_entries: u64,
}

/// A durable, checksummed, segmented queue of result batches on local disk.
///
/// See the [module documentation](self) for the file format and the recovery rules.
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    segment_bytes: u64,
    state: Mutex<State>,
    /// Holds an exclusive lock on `dir/lock` while the spool is open: one process per
    /// directory (released when the file is closed, also when the process dies).
    _lock: LockFile,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("Spool")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .field("segment_bytes", &self.segment_bytes)
            .field("next_id", &st.next_id)
            .field("committed_id", &st.committed_id)
            .field("pending_bytes", &st.pending_bytes)
            .field("pending_entries", &st.pending_entries)
            .field("segments", &st.segments.len())
            .finish()
    }
}

impl Spool {
    /// Opens the spool in `cfg.dir`, creating the directory if missing, and recovers from a
    /// crash: every record is checked, a torn or corrupt tail is truncated away with a warning
    /// (the entries before it survive), and fully committed segments are deleted.
    ///
    /// Reads all segment files once, so it takes time in proportion to the unconsumed data.
    ///
    /// # Errors
    ///
    /// [`SpoolError::Io`] if the directory or a file cannot be created, read, truncated or
    /// deleted; [`SpoolError::Corrupt`] if the ledger is unreadable or two segments overlap.
    pub fn open(cfg: SpoolConfig) -> Result<Spool, SpoolError> {
        let dir = cfg.dir;
        latmesh_durable::create_dir(&dir)?;
        let lock = LockFile::in_dir(&dir, LOCK_FILE)?;
        let tmp = latmesh_durable::temp_path(&dir.join(LEDGER_FILE));
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("remove", &tmp)(e));
            }
            _ => {}
        }
        let ledger = read_ledger(&dir)?;

        let files = list_segments(&dir)?;
        let mut segments = VecDeque::with_capacity(files.len());
        let mut max_id = 0u64;
        let last_index = files.len().saturating_sub(1);
        for (i, (first_id, path)) in files.into_iter().enumerate() {
            if first_id <= max_id {
                return Err(SpoolError::Corrupt {
                    path,
                    offset: 0,
                    reason: format!(
                        "segment starts at entry {first_id}, but older segments reach entry {max_id}"
                    ),
                });
            }
            let scan = scan_segment(&path, first_id)?;
            if let Some(problem) = &scan.problem {
                let dropped_bytes = scan.file_len - scan.valid_len;
                if i == last_index {
                    tracing::warn!(path = %path.display(), offset = scan.valid_len, dropped_bytes, %problem,
                        "spool: truncating a torn or corrupt tail (entries before it are kept)");
                } else {
                    tracing::error!(path = %path.display(), offset = scan.valid_len, dropped_bytes, %problem,
                        "spool: damaged record in an older segment: truncating there, the entries after it are lost");
                }
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err("open", &path))?;
                f.set_len(scan.valid_len)
                    .map_err(io_err("truncate", &path))?;
                f.sync_all().map_err(io_err("fsync", &path))?;
            }
            // Ids below a segment's first id were handed out, even if damage lost them. A
            // segment left without records burns its first id too, so that a new segment never
            // needs its name (it is deleted below, but a failed delete must not block appends).
            max_id = match scan.records.back() {
                Some(last) => last.id,
                None => first_id,
            };
            segments.push_back(Segment {
                first_id,
                path,
                len: scan.valid_len,
                records: scan.records,
            });
        }

        let mut committed_id = ledger.unwrap_or(0);
        if let Some(front) = segments.front() {
            let first_id = front.first_id;
            if ledger.is_none() && first_id > 1 {
                tracing::warn!(dir = %dir.display(), first_id,
                    "spool: no ledger; taking the entries before the oldest segment as committed");
            }
            committed_id = committed_id.max(first_id.saturating_sub(1));
        }
        let next_id = committed_id.max(max_id) + 1;

        let mut state = State {
            segments,
            writer: None,
            next_id,
            committed_id,
            pending_bytes: 0,
            pending_entries: 0,
        };
        for seg in &mut state.segments {
            while seg.records.front().is_some_and(|r| r.id <= committed_id) {
                seg.records.pop_front();
            }
            state.pending_entries += seg.records.len() as u64;
            state.pending_bytes += seg.records.iter().map(|r| u64::from(r.len)).sum::<u64>();
        }
        // Consumed and empty segments go; only the newest may then take appends.
        let mut kept = VecDeque::with_capacity(state.segments.len());
        for seg in std::mem::take(&mut state.segments) {
            if seg.records.is_empty() {
                remove_segment(&seg.path);
            } else {
                kept.push_back(seg);
            }
        }
        state.segments = kept;
        // Keep appending to the newest segment unless that would break its id sequence.
        if let Some(back) = state.segments.back()
            && back.records.back().is_some_and(|r| r.id + 1 == next_id)
        {
            let f = OpenOptions::new()
                .append(true)
                .open(&back.path)
                .map_err(io_err("open", &back.path))?;
            state.writer = Some(f);
        }
        tracing::debug!(dir = %dir.display(), next_id, committed_id, pending_entries = state.pending_entries,
            pending_bytes = state.pending_bytes, "spool opened");

        Ok(Spool {
            dir,
            max_bytes: cfg.max_bytes,
            segment_bytes: cfg.segment_bytes,
            state: Mutex::new(state),
            _lock: lock,
        })
    }

    /// Appends a batch and makes it durable: when this returns `Ok(id)` the record is written
    /// and fsync'd (and so is the directory if a new segment file was created), so the batch
    /// may be acked.
    ///
    /// # Errors
    ///
    /// - [`SpoolError::Full`] if the record would take the unconsumed data past
    ///   [`SpoolConfig::max_bytes`]: nothing was written; do not ack.
    /// - [`SpoolError::TooLarge`] if the record alone exceeds `max_bytes` or
    ///   [`MAX_RECORD_BYTES`].
    /// - [`SpoolError::Io`] if a write or an fsync failed: the record is not in the spool (it
    ///   was cut off again, or is dropped on the next open); do not ack. The next append
    ///   starts a new segment.
    pub fn append(
        &self,
        agent_id: &str,
        region: &str,
        batch: &pb::ResultBatch,
    ) -> Result<u64, SpoolError> {
        let limit_bytes = self.max_bytes.min(MAX_RECORD_BYTES);
        let record_bytes = (HEADER_BYTES + PAYLOAD_MIN_BYTES + agent_id.len() + region.len())
            as u64
            + batch.encoded_len() as u64;
        if record_bytes > limit_bytes {
            return Err(SpoolError::TooLarge {
                record_bytes,
                limit_bytes,
            });
        }
        // Encode outside the lock; the id and the checksum are filled in under it.
        let mut record = encode_record(agent_id, region, batch);
        debug_assert_eq!(record.len() as u64, record_bytes);

        let mut st = self.lock();
        if st.pending_bytes + record_bytes > self.max_bytes {
            return Err(SpoolError::Full {
                pending_bytes: st.pending_bytes,
                record_bytes,
                max_bytes: self.max_bytes,
            });
        }
        let id = st.next_id;
        seal_record(&mut record, id);

        let needs_new_segment = match (&st.writer, st.segments.back()) {
            (Some(_), Some(seg)) => seg.len > 0 && seg.len + record_bytes > self.segment_bytes,
            _ => true,
        };
        if needs_new_segment {
            st.writer = None;
            let path = self.dir.join(segment_name(id));
            let f = OpenOptions::new()
                .append(true)
                .create_new(true)
                .open(&path)
                .map_err(io_err("create", &path))?;
            st.segments.push_back(Segment {
                first_id: id,
                path,
                len: 0,
                records: VecDeque::new(),
            });
            if let Err(e) = sync_dir(&self.dir) {
                Self::abandon_segment(&mut st);
                return Err(e);
            }
            st.writer = Some(f);
        }

        let State {
            segments,
            writer,
            next_id,
            pending_bytes,
            pending_entries,
            ..
        } = &mut *st;
        let (Some(seg), Some(f)) = (segments.back_mut(), writer.as_mut()) else {
            unreachable!("a writer always belongs to the last segment");
        };
        let written = f
            .write_all(&record)
            .map_err(io_err("write", &seg.path))
            .and_then(|()| f.sync_data().map_err(io_err("fsync", &seg.path)));
        if let Err(e) = written {
            // Part of the record may have reached the file: cut it off if we can, never append
            // to this file again, and burn the id so it is never reused for a different batch.
            let old_len = seg.len;
            if let Err(cut) = f.set_len(old_len).and_then(|()| f.sync_all()) {
                tracing::warn!(path = %seg.path.display(), error = %cut,
                    "spool: cannot cut off a failed append; the next open truncates it");
            }
            *next_id += 1;
            Self::abandon_segment(&mut st);
            return Err(e);
        }
        seg.records.push_back(RecordLoc {
            id,
            offset: seg.len,
            len: record_bytes as u32,
            appended: Instant::now(),
        });
        seg.len += record_bytes;
        *next_id += 1;
        *pending_bytes += record_bytes;
        *pending_entries += 1;
        Ok(id)
    }

    /// Stops appending to the last segment; deletes it if it holds no record.
    fn abandon_segment(st: &mut State) {
        st.writer = None;
        if st.segments.back().is_some_and(|s| s.records.is_empty())
            && let Some(seg) = st.segments.pop_back()
        {
            remove_segment(&seg.path);
        }
    }

    /// Returns up to `max_entries` unconsumed entries in id order: those with an id greater
    /// than `after_id` (all unconsumed entries if `None`) and greater than the committed id.
    ///
    /// A sink can read ahead by passing the last id it read, and commit later.
    ///
    /// # Errors
    ///
    /// [`SpoolError::Io`] if a segment cannot be read; [`SpoolError::Corrupt`] if a record
    /// was damaged on disk after [`Spool::open`] checked it. Its reason names the entry id;
    /// committing that id skips the entry (the entry is lost).
    pub fn read_from(
        &self,
        after_id: Option<u64>,
        max_entries: usize,
    ) -> Result<Vec<Entry>, SpoolError> {
        // Under the lock: where the entries are, and open handles (a handle keeps a segment
        // readable even if a concurrent commit deletes it).
        let mut plan: Vec<(PathBuf, File, Vec<RecordLoc>)> = Vec::new();
        {
            let st = self.lock();
            let start = after_id.unwrap_or(0).max(st.committed_id);
            let mut left = max_entries;
            for seg in &st.segments {
                if left == 0 {
                    break;
                }
                if seg.records.back().is_none_or(|r| r.id <= start) {
                    continue;
                }
                let from = seg.records.partition_point(|r| r.id <= start);
                let locs: Vec<RecordLoc> =
                    seg.records.iter().skip(from).take(left).copied().collect();
                left -= locs.len();
                let f = File::open(&seg.path).map_err(io_err("open", &seg.path))?;
                plan.push((seg.path.clone(), f, locs));
            }
        }

        let mut out = Vec::with_capacity(max_entries.min(plan.iter().map(|p| p.2.len()).sum()));
        let mut buf = Vec::new();
        for (path, mut f, locs) in plan {
            let (Some(first), Some(last)) = (locs.first(), locs.last()) else {
                continue;
            };
            // Records in a segment are contiguous: one read for the whole span.
            let span = (last.offset + u64::from(last.len) - first.offset) as usize;
            buf.resize(span, 0);
            f.seek(SeekFrom::Start(first.offset))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(io_err("read", &path))?;
            for loc in &locs {
                let start = (loc.offset - first.offset) as usize;
                let bytes = &buf[start..start + loc.len as usize];
                let corrupt = |reason: String| SpoolError::Corrupt {
                    path: path.clone(),
                    offset: loc.offset,
                    reason: format!("entry {}: {reason}", loc.id),
                };
                let raw = decode_record(bytes).map_err(corrupt)?;
                if raw.id != loc.id {
                    return Err(corrupt(format!("record holds entry {}", raw.id)));
                }
                let batch = pb::ResultBatch::decode(raw.batch)
                    .map_err(|e| corrupt(format!("batch does not decode: {e}")))?;
                out.push(Entry {
                    id: raw.id,
                    agent_id: raw.agent_id.to_owned(),
                    region: raw.region.to_owned(),
                    batch,
                });
            }
        }
        Ok(out)
    }

    /// Marks every entry with an id ≤ `up_to_id` as consumed (the sink stored it): persists
    /// the id in the ledger (write a temporary file, fsync, rename, fsync the directory), then
    /// deletes the segment files whose entries are all consumed. Committed entries are never
    /// returned again, also after a restart.
    ///
    /// An id at or below the committed id is a no-op; an id beyond the last appended one
    /// commits up to the last appended one.
    ///
    /// # Errors
    ///
    /// [`SpoolError::Io`] if the ledger cannot be written: nothing was committed. A segment
    /// that cannot be deleted is only logged (the next open deletes it).
    pub fn commit(&self, up_to_id: u64) -> Result<(), SpoolError> {
        let mut st = self.lock();
        let target = up_to_id.min(st.next_id - 1);
        if target <= st.committed_id {
            return Ok(());
        }
        write_ledger(&self.dir, target)?;
        st.committed_id = target;
        let mut freed_bytes = 0u64;
        let mut freed_entries = 0u64;
        while let Some(seg) = st.segments.front_mut() {
            while let Some(r) = seg.records.front().filter(|r| r.id <= target) {
                freed_bytes += u64::from(r.len);
                freed_entries += 1;
                seg.records.pop_front();
            }
            if !seg.records.is_empty() {
                break;
            }
            if let Some(seg) = st.segments.pop_front() {
                remove_segment(&seg.path);
            }
        }
        if st.segments.is_empty() {
            st.writer = None;
        }
        st.pending_bytes -= freed_bytes;
        st.pending_entries -= freed_entries;
        Ok(())
    }

    /// Bytes of unconsumed records on disk (headers included): what
    /// [`SpoolConfig::max_bytes`] caps.
    pub fn pending_bytes(&self) -> u64 {
        self.lock().pending_bytes
    }

    /// Number of unconsumed entries.
    pub fn pending_entries(&self) -> u64 {
        self.lock().pending_entries
    }

    /// How long the oldest unconsumed entry has waited since it was appended (an entry an
    /// earlier process left counts from when this process opened the spool); `None` when
    /// nothing is pending. The coordinator's ClickHouse insert lag.
    pub fn oldest_pending_age(&self) -> Option<std::time::Duration> {
        let st = self.lock();
        let oldest = st.segments.iter().find_map(|s| s.records.front())?;
        Some(oldest.appended.elapsed())
    }

    /// The last committed entry id (0 before the first commit).
    pub fn committed_id(&self) -> u64 {
        self.lock().committed_id
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation leaves the state consistent before anything that can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn segment_name(first_id: u64) -> String {
    format!("{SEGMENT_PREFIX}{first_id:020}{SEGMENT_SUFFIX}")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name
        .strip_prefix(SEGMENT_PREFIX)?
        .strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|&id| id > 0)
}

/// Segment files in `dir`, oldest first.
fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, SpoolError> {
    let mut out = Vec::new();
    for item in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let item = item.map_err(io_err("list", dir))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        match parse_segment_name(name) {
            Some(first_id) => out.push((first_id, item.path())),
            None if name == LEDGER_FILE || name == LOCK_FILE => {}
            None => {
                tracing::debug!(dir = %dir.display(), file = name, "spool: ignoring a file that is not a segment")
            }
        }
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    Ok(out)
}

fn remove_segment(path: &Path) {
    if let Err(e) = fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e,
            "spool: cannot delete a consumed segment; the next open retries");
    }
}

fn sync_dir(dir: &Path) -> Result<(), SpoolError> {
    Ok(latmesh_durable::sync_dir(dir)?)
}

fn read_ledger(dir: &Path) -> Result<Option<u64>, SpoolError> {
    let path = dir.join(LEDGER_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    let corrupt = |reason: &str| SpoolError::Corrupt {
        path: path.clone(),
        offset: 0,
        reason: reason.to_owned(),
    };
    if bytes.len() != LEDGER_BYTES {
        return Err(corrupt(&format!(
            "ledger has {} bytes, not {LEDGER_BYTES}",
            bytes.len()
        )));
    }
    if &bytes[..4] != LEDGER_MAGIC {
        return Err(corrupt("not a spool ledger (bad magic)"));
    }
    if latmesh_durable::checksum(&bytes[..12]).to_le_bytes() != bytes[12..16] {
        return Err(corrupt("ledger checksum mismatch"));
    }
    Ok(Some(u64::from_le_bytes(
        bytes[4..12].try_into().expect("8 bytes"),
    )))
}

fn write_ledger(dir: &Path, committed_id: u64) -> Result<(), SpoolError> {
    let mut bytes = [0u8; LEDGER_BYTES];
    bytes[..4].copy_from_slice(LEDGER_MAGIC);
    bytes[4..12].copy_from_slice(&committed_id.to_le_bytes());
    let crc = latmesh_durable::checksum(&bytes[..12]);
    bytes[12..].copy_from_slice(&crc.to_le_bytes());
    Ok(latmesh_durable::atomic_write(
        &dir.join(LEDGER_FILE),
        &bytes,
    )?)
}

/// Encodes a whole record with id 0 and no checksum; [`seal_record`] fills both in.
fn encode_record(agent_id: &str, region: &str, batch: &pb::ResultBatch) -> Vec<u8> {
    let payload_len = PAYLOAD_MIN_BYTES + agent_id.len() + region.len() + batch.encoded_len();
    let mut buf = Vec::with_capacity(HEADER_BYTES + payload_len);
    FRAMING.start(&mut buf);
    buf.extend_from_slice(&[0; 8]);
    buf.extend_from_slice(&(agent_id.len() as u32).to_le_bytes());
    buf.extend_from_slice(agent_id.as_bytes());
    buf.extend_from_slice(&(region.len() as u32).to_le_bytes());
    buf.extend_from_slice(region.as_bytes());
    batch
        .encode(&mut buf)
        .expect("a Vec grows to fit any message");
    buf
}

fn seal_record(record: &mut [u8], id: u64) {
    record[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&id.to_le_bytes());
    FRAMING.seal(record);
}

/// Why a record does not pass [`FRAMING`]'s checks, in this spool's words.
fn frame_reason(e: FrameError) -> String {
    match e {
        FrameError::BadMagic { found, .. } if found[0] != RECORD_MAGIC => {
            format!("bad magic byte {:#04x}", found[0])
        }
        FrameError::BadMagic { found, .. } => format!("unknown record version {}", found[1]),
        FrameError::PayloadLength { payload_len, .. } => {
            format!("implausible payload length {payload_len}")
        }
        FrameError::Short { .. } => "record shorter than its header".into(),
        FrameError::Torn {
            payload_len,
            available,
        } => format!("payload length {payload_len}, record has {available}"),
        FrameError::Checksum { .. } => "checksum mismatch".into(),
    }
}

struct RawRecord<'a> {
    id: u64,
    agent_id: &'a str,
    region: &'a str,
    batch: &'a [u8],
}

fn parse_payload(p: &[u8]) -> Result<RawRecord<'_>, String> {
    fn take<'a>(p: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
        if p.len() < n {
            return Err(format!("payload ends inside {what}"));
        }
        let (head, rest) = p.split_at(n);
        *p = rest;
        Ok(head)
    }
    fn string<'a>(p: &mut &'a [u8], what: &str) -> Result<&'a str, String> {
        let len = u32::from_le_bytes(take(p, 4, what)?.try_into().expect("4 bytes")) as usize;
        std::str::from_utf8(take(p, len, what)?).map_err(|_| format!("{what} is not UTF-8"))
    }
    let mut p = p;
    let id = u64::from_le_bytes(take(&mut p, 8, "id")?.try_into().expect("8 bytes"));
    let agent_id = string(&mut p, "agent_id")?;
    let region = string(&mut p, "region")?;
    Ok(RawRecord {
        id,
        agent_id,
        region,
        batch: p,
    })
}

/// Decodes one whole record (header + payload) and checks its checksum.
fn decode_record(bytes: &[u8]) -> Result<RawRecord<'_>, String> {
    parse_payload(FRAMING.decode(bytes).map_err(frame_reason)?)
}

struct Scan {
    records: VecDeque<RecordLoc>,
    /// Bytes of valid records from the start of the file.
    valid_len: u64,
    file_len: u64,
    /// Why the scan stopped before the end of the file.
    problem: Option<String>,
}

/// Reads and checks every record of a segment, up to the first bad one.
fn scan_segment(path: &Path, first_id: u64) -> Result<Scan, SpoolError> {
    let f = File::open(path).map_err(io_err("open", path))?;
    let file_len = f.metadata().map_err(io_err("stat", path))?.len();
    let mut r = BufReader::with_capacity(256 << 10, f);
    let mut records = VecDeque::new();
    let mut offset = 0u64;
    let mut expected_id = first_id;
    let mut payload = Vec::new();
    let mut problem = None;
    while offset < file_len {
        let left = file_len - offset;
        if left < HEADER_BYTES as u64 {
            problem = Some(format!("torn header: {left} bytes at the end"));
            break;
        }
        let mut header = [0u8; HEADER_BYTES];
        r.read_exact(&mut header).map_err(io_err("read", path))?;
        let frame = match FRAMING.check_header(&header) {
            Ok(v) => v,
            Err(e) => {
                problem = Some(frame_reason(e));
                break;
            }
        };
        let payload_len = frame.payload_len;
        let record_len = (HEADER_BYTES + payload_len) as u64;
        if record_len > left {
            problem = Some(format!(
                "torn record: {record_len} bytes long, {left} bytes left"
            ));
            break;
        }
        payload.resize(payload_len, 0);
        r.read_exact(&mut payload).map_err(io_err("read", path))?;
        if let Err(e) = FRAMING.verify(frame, &payload) {
            problem = Some(frame_reason(e));
            break;
        }
        let raw = match parse_payload(&payload) {
            Ok(raw) => raw,
            Err(e) => {
                problem = Some(e);
                break;
            }
        };
        if raw.id != expected_id {
            problem = Some(format!(
                "record holds entry {}, expected {expected_id}",
                raw.id
            ));
            break;
        }
        records.push_back(RecordLoc {
            id: raw.id,
            offset,
            len: record_len as u32,
            appended: Instant::now(),
        });
        offset += record_len;
        expected_id += 1;
    }
    Ok(Scan {
        records,
        valid_len: offset,
        file_len,
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn batch(seq: u64) -> pb::ResultBatch {
        pb::ResultBatch {
            campaign_id: "c-0001".into(),
            seq,
            histograms: vec![pb::IntervalHistogram {
                provider: "openai".into(),
                scenario: "short".into(),
                metric: "ttft".into(),
                start_agent_unix_us: 1_700_000_000_000_000,
                end_agent_unix_us: 1_700_000_060_000_000,
                hist_v2: (0..=255u8).collect(),
                step: 0,
            }],
            records: vec![
                pb::ProbeRecord {
                    load: "sweep".into(),
                    step: 1,
                    concurrency: 8,
                    failover: true,
                    round: 3,
                    slot: 7,
                    provider: "anthropic".into(),
                    scenario: "long".into(),
                    prompt_id: "p-42".into(),
                    attempt: 1,
                    stream: true,
                    send_agent_unix_us: -5,
                    sched_lag_us: 1234,
                    outcome: "ok".into(),
                    http_status: Some(200),
                    ttfb_us: Some(1),
                    ttft_us: Some(2),
                    ttfc_us: Some(3),
                    e2e_us: Some(4),
                    tpot_us: Some(5),
                    decode_tps: Some(61.5),
                    output_tokens: 100,
                    tokens_from_usage: true,
                    content_chunks: 9,
                    reasoning_chunks: 8,
                    tool_call_chunks: 7,
                    prompt_tokens: Some(10),
                    completion_tokens: Some(11),
                    reasoning_tokens: Some(12),
                    cached_tokens: Some(13),
                    finish_reason: Some("stop".into()),
                    saw_done: true,
                    retry_after_s: Some(1.5),
                    error_type: Some("none".into()),
                    error_message: Some("héllo ✓".into()),
                    itl_max_us: Some(999),
                    comment_lines: 2,
                    response_bytes: 4096,
                    final_attempt: true,
                    request_latency_us: Some(14),
                    turn: 2,
                    cache_nonce: true,
                    conn_reused: false,
                    conn_retried: true,
                    dns_us: Some(15),
                    connect_us: Some(16),
                    tls_us: Some(17),
                    first_byte_us: Some(18),
                    first_nonblank_us: Some(19),
                    reasoning_us: Some(20),
                    token_payloads: 21,
                    usage_chunk_delta: Some(-22),
                    error_code: Some("c".into()),
                    output_tokens_source: "payloads_over_usage".into(),
                    answered_model: Some("m-2024-08-06".into()),
                    system_fingerprint: Some("fp_1".into()),
                    cut_fields: vec!["finish_reason".into()],
                    usage_requested: Some(false),
                    input_tokens: 32_000,
                    warmup: true,
                    ttst_us: Some(7),
                    target_rps: 4.0,
                    slo_met: Some(true),
                    phase_start_in_flight: 3,
                },
                pb::ProbeRecord {
                    provider: "x".into(),
                    outcome: "timeout_ttft".into(),
                    ..Default::default()
                },
            ],
            clock_offset_us: -42,
        }
    }

    fn cfg(dir: &Path) -> SpoolConfig {
        SpoolConfig::new(dir, 1 << 30)
    }

    /// Segment files in `dir`, oldest first, with their sizes.
    fn segment_files(dir: &Path) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_str().unwrap().starts_with(SEGMENT_PREFIX))
            .map(|e| {
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    }

    fn ids(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.id).collect()
    }

    fn record_bytes(agent: &str, region: &str, b: &pb::ResultBatch) -> u64 {
        encode_record(agent, region, b).len() as u64
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nested/spool");
        let spool = Spool::open(cfg(&dir)).unwrap();
        assert_eq!(spool.append("us-east-1", "us-east", &batch(1)).unwrap(), 1);
        assert_eq!(spool.append("eu-west-1", "eu-west", &batch(2)).unwrap(), 2);
        assert_eq!(spool.pending_entries(), 2);
        assert_eq!(
            spool.pending_bytes(),
            record_bytes("us-east-1", "us-east", &batch(1))
                + record_bytes("eu-west-1", "eu-west", &batch(2))
        );

        let got = spool.read_from(None, 10).unwrap();
        assert_eq!(
            got,
            vec![
                Entry {
                    id: 1,
                    agent_id: "us-east-1".into(),
                    region: "us-east".into(),
                    batch: batch(1)
                },
                Entry {
                    id: 2,
                    agent_id: "eu-west-1".into(),
                    region: "eu-west".into(),
                    batch: batch(2)
                },
            ]
        );
        assert_eq!(ids(&spool.read_from(Some(1), 10).unwrap()), vec![2]);
        assert_eq!(ids(&spool.read_from(None, 1).unwrap()), vec![1]);
        assert!(spool.read_from(None, 0).unwrap().is_empty());

        // An empty batch and empty strings survive too.
        let id = spool.append("", "", &pb::ResultBatch::default()).unwrap();
        let got = spool.read_from(Some(2), 10).unwrap();
        assert_eq!(
            got,
            vec![Entry {
                id,
                agent_id: String::new(),
                region: String::new(),
                batch: Default::default()
            }]
        );

        spool.commit(2).unwrap();
        assert_eq!(ids(&spool.read_from(None, 10).unwrap()), vec![3]);
        assert_eq!(spool.pending_entries(), 1);
        spool.commit(3).unwrap();
        assert!(spool.read_from(None, 10).unwrap().is_empty());
        assert_eq!((spool.pending_entries(), spool.pending_bytes()), (0, 0));
        assert!(
            segment_files(&dir).is_empty(),
            "fully consumed segment deleted"
        );
        assert_eq!(spool.append("a", "r", &batch(4)).unwrap(), 4);
    }

    #[test]
    fn ids_keep_increasing_across_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let spool = Spool::open(cfg(tmp.path())).unwrap();
            for i in 1..=3 {
                assert_eq!(spool.append("a", "r", &batch(i)).unwrap(), i);
            }
        }
        {
            let spool = Spool::open(cfg(tmp.path())).unwrap();
            assert_eq!(spool.pending_entries(), 3);
            assert_eq!(spool.append("a", "r", &batch(4)).unwrap(), 4);
            assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![1, 2, 3, 4]);
            spool.commit(4).unwrap();
        }
        // Everything committed and deleted: the ledger alone carries the id on.
        assert!(segment_files(tmp.path()).is_empty());
        let spool = Spool::open(cfg(tmp.path())).unwrap();
        assert_eq!(spool.committed_id(), 4);
        assert_eq!(spool.append("a", "r", &batch(5)).unwrap(), 5);
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![5]);
    }

    #[test]
    fn empty_newest_segment_after_a_crash_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(tmp.path());
        c.segment_bytes = 1; // one record per segment
        let spool = Spool::open(c.clone()).unwrap();
        spool.append("a", "r", &batch(1)).unwrap();
        spool.append("a", "r", &batch(2)).unwrap();
        drop(spool);
        // A crash right after a new segment was created, before its first record landed.
        fs::write(tmp.path().join(segment_name(3)), b"").unwrap();
        let spool = Spool::open(c).unwrap();
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![1, 2]);
        assert_eq!(
            spool.append("a", "r", &batch(3)).unwrap(),
            4,
            "id 3 is burnt"
        );
        let names: Vec<String> = segment_files(tmp.path())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            vec![segment_name(1), segment_name(2), segment_name(4)]
        );
        // Stray files are ignored.
        drop(spool);
        fs::write(tmp.path().join("notes.txt"), b"hi").unwrap();
        assert_eq!(
            ids(&Spool::open(cfg(tmp.path()))
                .unwrap()
                .read_from(None, 100)
                .unwrap()),
            vec![1, 2, 4]
        );
    }

    #[test]
    fn oldest_pending_age_follows_the_oldest_unconsumed_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let spool = Spool::open(cfg(tmp.path())).unwrap();
        assert_eq!(spool.oldest_pending_age(), None);
        spool.append("a", "r", &batch(1)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        spool.append("a", "r", &batch(2)).unwrap();
        let first = spool.oldest_pending_age().unwrap();
        assert!(first >= std::time::Duration::from_millis(30), "{first:?}");
        spool.commit(1).unwrap();
        let second = spool.oldest_pending_age().unwrap();
        assert!(second < first, "{second:?} vs {first:?}");
        spool.commit(2).unwrap();
        assert_eq!(spool.oldest_pending_age(), None);
        // Entries left by an earlier process count from the reopen.
        spool.append("a", "r", &batch(3)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        drop(spool);
        let spool = Spool::open(cfg(tmp.path())).unwrap();
        assert!(spool.oldest_pending_age().unwrap() < std::time::Duration::from_millis(30));
    }

    #[test]
    fn commit_deletes_consumed_segments_and_survives_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let rec = record_bytes("a", "r", &batch(1));
        let mut c = cfg(tmp.path());
        c.segment_bytes = 2 * rec; // two records per segment
        let spool = Spool::open(c.clone()).unwrap();
        for i in 1..=10 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        assert_eq!(segment_files(tmp.path()).len(), 5);

        spool.commit(5).unwrap(); // segments 1-2, 3-4 consumed; 5-6 half consumed
        let names: Vec<String> = segment_files(tmp.path())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            vec![segment_name(5), segment_name(7), segment_name(9)],
        );
        assert_eq!(spool.pending_entries(), 5);
        assert_eq!(spool.pending_bytes(), 5 * rec);
        assert_eq!(
            ids(&spool.read_from(None, 100).unwrap()),
            vec![6, 7, 8, 9, 10]
        );
        assert_eq!(
            ids(&spool.read_from(Some(2), 2).unwrap()),
            vec![6, 7],
            "after_id below the committed id"
        );
        spool.commit(3).unwrap(); // going backwards is a no-op
        assert_eq!(spool.committed_id(), 5);
        drop(spool);

        let spool = Spool::open(c.clone()).unwrap();
        assert_eq!(spool.committed_id(), 5);
        assert_eq!(spool.pending_entries(), 5);
        assert_eq!(spool.pending_bytes(), 5 * rec);
        assert_eq!(
            ids(&spool.read_from(None, 100).unwrap()),
            vec![6, 7, 8, 9, 10]
        );

        // Committing beyond the last id commits what exists, and later appends stay pending.
        spool.commit(1_000).unwrap();
        assert_eq!(spool.committed_id(), 10);
        assert!(segment_files(tmp.path()).is_empty());
        assert_eq!(spool.append("a", "r", &batch(11)).unwrap(), 11);
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![11]);
        drop(spool);

        // A crash between the ledger update and the deletes: the next open deletes them.
        let spool = Spool::open(c.clone()).unwrap();
        for i in 12..=14 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        drop(spool);
        write_ledger(tmp.path(), 13).unwrap();
        let spool = Spool::open(c).unwrap();
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![14]);
        assert_eq!(
            segment_files(tmp.path())
                .iter()
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>(),
            vec![segment_name(13)]
        );
    }

    #[test]
    fn missing_ledger_is_rebuilt_from_the_oldest_segment() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(tmp.path());
        c.segment_bytes = 1; // one record per segment
        let spool = Spool::open(c.clone()).unwrap();
        for i in 1..=4 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        spool.commit(2).unwrap();
        drop(spool);
        fs::remove_file(tmp.path().join(LEDGER_FILE)).unwrap();
        let spool = Spool::open(c.clone()).unwrap();
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![3, 4]);
        drop(spool);

        fs::write(tmp.path().join(LEDGER_FILE), b"garbage").unwrap();
        assert!(matches!(
            Spool::open(c).unwrap_err(),
            SpoolError::Corrupt { .. }
        ));
    }

    /// Writes three records; returns the segment path, its bytes and where the last record starts.
    fn three_records(dir: &Path) -> (PathBuf, Vec<u8>, usize) {
        let spool = Spool::open(cfg(dir)).unwrap();
        spool.append("a", "r", &batch(1)).unwrap();
        spool.append("a", "r", &batch(2)).unwrap();
        let last_start = spool.pending_bytes() as usize;
        spool.append("agent-3", "region-3", &batch(3)).unwrap();
        drop(spool);
        let path = dir.join(segment_name(1));
        let bytes = fs::read(&path).unwrap();
        assert!(bytes.len() > last_start);
        (path, bytes, last_start)
    }

    fn check_recovers_two(dir: &Path, path: &Path, last_start: usize) {
        let spool = Spool::open(cfg(dir)).unwrap();
        let got = spool.read_from(None, 100).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].batch, batch(1));
        assert_eq!(got[1].batch, batch(2));
        assert_eq!(spool.pending_entries(), 2);
        assert_eq!(spool.pending_bytes(), last_start as u64);
        assert_eq!(
            fs::metadata(path).unwrap().len(),
            last_start as u64,
            "tail truncated"
        );
        // The spool appends after the kept records, and that survives another reopen.
        assert_eq!(spool.append("a", "r", &batch(9)).unwrap(), 3);
        drop(spool);
        let spool = Spool::open(cfg(dir)).unwrap();
        let got = spool.read_from(None, 100).unwrap();
        assert_eq!(ids(&got), vec![1, 2, 3]);
        assert_eq!(got[2].batch, batch(9));
    }

    #[test]
    fn torn_tail_at_every_offset_loses_only_the_last_record() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, bytes, last_start) = three_records(tmp.path());
        for cut in last_start..bytes.len() {
            let dir = tmp.path().join(format!("cut-{cut}"));
            fs::create_dir(&dir).unwrap();
            let path = dir.join(segment_name(1));
            fs::write(&path, &bytes[..cut]).unwrap();
            check_recovers_two(&dir, &path, last_start);
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn flipped_byte_in_last_record_is_truncated() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, bytes, last_start) = three_records(tmp.path());
        for at in last_start..bytes.len() {
            let dir = tmp.path().join(format!("flip-{at}"));
            fs::create_dir(&dir).unwrap();
            let path = dir.join(segment_name(1));
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            fs::write(&path, &damaged).unwrap();
            check_recovers_two(&dir, &path, last_start);
            fs::remove_dir_all(&dir).unwrap();
        }
        // Zeros after the last record (e.g. a file extended but never written) as well.
        let dir = tmp.path().join("zeros");
        fs::create_dir(&dir).unwrap();
        let path = dir.join(segment_name(1));
        let mut zeroed = bytes[..last_start].to_vec();
        zeroed.resize(bytes.len(), 0);
        fs::write(&path, &zeroed).unwrap();
        check_recovers_two(&dir, &path, last_start);
    }

    #[test]
    fn damage_in_an_older_segment_keeps_later_segments() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(tmp.path());
        c.segment_bytes = 2 * record_bytes("a", "r", &batch(1));
        let spool = Spool::open(c.clone()).unwrap();
        for i in 1..=6 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        drop(spool);
        // Damage entry 4 (second record of the segment 3-4).
        let path = tmp.path().join(segment_name(3));
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xFF;
        fs::write(&path, &bytes).unwrap();
        let spool = Spool::open(c).unwrap();
        assert_eq!(
            ids(&spool.read_from(None, 100).unwrap()),
            vec![1, 2, 3, 5, 6]
        );
        assert_eq!(spool.append("a", "r", &batch(7)).unwrap(), 7);
    }

    #[test]
    fn full_at_the_cap_and_free_again_after_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let rec = record_bytes("a", "r", &batch(1));
        let c = SpoolConfig::new(tmp.path(), 3 * rec + rec / 2);
        let spool = Spool::open(c.clone()).unwrap();
        for i in 1..=3 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        match spool.append("a", "r", &batch(4)) {
            Err(SpoolError::Full {
                pending_bytes,
                record_bytes,
                max_bytes,
            }) => {
                assert_eq!(
                    (pending_bytes, record_bytes, max_bytes),
                    (3 * rec, rec, c.max_bytes)
                );
            }
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(
            spool.pending_entries(),
            3,
            "a refused append writes nothing"
        );
        assert_eq!(ids(&spool.read_from(None, 100).unwrap()), vec![1, 2, 3]);

        spool.commit(1).unwrap();
        assert_eq!(
            spool.append("a", "r", &batch(4)).unwrap(),
            4,
            "no id burnt by Full"
        );
        assert!(matches!(
            spool.append("a", "r", &batch(5)),
            Err(SpoolError::Full { .. })
        ));
        drop(spool);

        // The cap holds across a reopen too.
        let spool = Spool::open(c.clone()).unwrap();
        assert!(matches!(
            spool.append("a", "r", &batch(5)),
            Err(SpoolError::Full { .. })
        ));
        spool.commit(4).unwrap();
        assert_eq!(spool.append("a", "r", &batch(5)).unwrap(), 5);

        // A record that can never fit is TooLarge, not Full.
        let mut big = batch(6);
        big.histograms[0].hist_v2 = vec![7; c.max_bytes as usize];
        assert!(matches!(
            spool.append("a", "r", &big),
            Err(SpoolError::TooLarge { .. })
        ));
    }

    #[test]
    fn rotates_at_segment_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let rec = record_bytes("a", "r", &batch(1));
        let mut c = cfg(tmp.path());
        c.segment_bytes = 3 * rec + rec / 2; // three records per segment
        let spool = Spool::open(c.clone()).unwrap();
        for i in 1..=7 {
            spool.append("a", "r", &batch(i)).unwrap();
        }
        assert_eq!(
            segment_files(tmp.path()),
            vec![
                (segment_name(1), 3 * rec),
                (segment_name(4), 3 * rec),
                (segment_name(7), rec)
            ]
        );
        assert_eq!(
            ids(&spool.read_from(Some(2), 3).unwrap()),
            vec![3, 4, 5],
            "reads across segments"
        );
        drop(spool);

        // After a reopen the newest segment keeps filling up.
        let spool = Spool::open(c.clone()).unwrap();
        spool.append("a", "r", &batch(8)).unwrap();
        spool.append("a", "r", &batch(9)).unwrap();
        spool.append("a", "r", &batch(10)).unwrap();
        assert_eq!(
            segment_files(tmp.path()).last().unwrap(),
            &(segment_name(10), rec)
        );
        assert_eq!(
            ids(&spool.read_from(None, 100).unwrap()),
            (1..=10).collect::<Vec<_>>()
        );

        // A record larger than segment_bytes gets a segment of its own.
        let mut big = batch(11);
        big.histograms[0].hist_v2 = vec![1; 4 * rec as usize];
        assert_eq!(spool.append("a", "r", &big).unwrap(), 11);
        assert_eq!(spool.append("a", "r", &batch(12)).unwrap(), 12);
        let files = segment_files(tmp.path());
        assert_eq!(files[files.len() - 2].0, segment_name(11));
        assert_eq!(files[files.len() - 1], (segment_name(12), rec));
        assert_eq!(spool.read_from(Some(10), 1).unwrap()[0].batch, big);
    }

    #[test]
    fn concurrent_appends_get_unique_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cfg(tmp.path());
        c.segment_bytes = 4096;
        let spool = Arc::new(Spool::open(c.clone()).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let spool = Arc::clone(&spool);
                std::thread::spawn(move || {
                    (0..25)
                        .map(|i| spool.append(&format!("agent-{t}"), "r", &batch(i)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (1..=100).collect::<Vec<_>>());
        drop(spool);
        let spool = Spool::open(c).unwrap();
        assert_eq!(
            ids(&spool.read_from(None, 1000).unwrap()),
            (1..=100).collect::<Vec<_>>()
        );
    }

    /// Not a test: prints how long a durable append takes on this disk.
    /// `cargo test -p latmesh-coordinator spool -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn bench_append_latency() {
        let dir = std::env::var_os("SPOOL_BENCH_DIR").map(PathBuf::from);
        let tmp = match &dir {
            Some(d) => tempfile::tempdir_in(d).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let spool = Spool::open(cfg(tmp.path())).unwrap();
        let mut b = batch(1);
        b.records = (0..50).map(|_| b.records[0].clone()).collect();
        b.histograms = (0..20).map(|_| b.histograms[0].clone()).collect();
        let n = 300;
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let t = std::time::Instant::now();
            spool.append("us-east-1", "us-east", &b).unwrap();
            lat.push(t.elapsed());
        }
        lat.sort_unstable();
        let mean = lat.iter().sum::<std::time::Duration>() / n as u32;
        println!(
            "spool append+fsync in {}: {} bytes/record, n={n}: mean {mean:?}, p50 {:?}, p99 {:?}, max {:?}",
            tmp.path().display(),
            spool.pending_bytes() / n as u64,
            lat[n / 2],
            lat[n * 99 / 100],
            lat[n - 1]
        );
        let t = std::time::Instant::now();
        let got = spool.read_from(None, n).unwrap();
        println!("read_from {n} entries: {:?}", t.elapsed());
        assert_eq!(got.len(), n);
    }

    #[test]
    fn one_process_per_directory() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = || SpoolConfig::new(dir.path().to_path_buf(), 1 << 20);
        let first = Spool::open(cfg()).unwrap();
        let err = Spool::open(cfg()).unwrap_err();
        assert!(matches!(err, SpoolError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("--spool-dir"), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("(pid {})", std::process::id())),
            "the holder is named: {err}"
        );
        drop(first);
        Spool::open(cfg()).expect("the lock goes with the spool");
    }

    /// A segment and a ledger written byte by byte in the version 1 layout of the module
    /// documentation (what earlier builds wrote) read back.
    #[test]
    fn files_in_the_version_1_layout_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut segment = Vec::new();
        for id in [3u64, 4] {
            let (agent, region, b) = ("a1", "eu", batch(id));
            let mut payload = id.to_le_bytes().to_vec();
            payload.extend_from_slice(&(agent.len() as u32).to_le_bytes());
            payload.extend_from_slice(agent.as_bytes());
            payload.extend_from_slice(&(region.len() as u32).to_le_bytes());
            payload.extend_from_slice(region.as_bytes());
            payload.extend_from_slice(&b.encode_to_vec());
            segment.extend_from_slice(&[0xB5, 1]);
            segment.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            segment.extend_from_slice(&latmesh_durable::checksum(&payload).to_le_bytes());
            segment.extend_from_slice(&payload);
        }
        fs::write(tmp.path().join(segment_name(3)), &segment).unwrap();
        let mut ledger = b"LMS1".to_vec();
        ledger.extend_from_slice(&3u64.to_le_bytes());
        let crc = latmesh_durable::checksum(&ledger);
        ledger.extend_from_slice(&crc.to_le_bytes());
        fs::write(tmp.path().join(LEDGER_FILE), &ledger).unwrap();

        let spool = Spool::open(cfg(tmp.path())).unwrap();
        assert_eq!(spool.committed_id(), 3);
        let got = spool.read_from(None, 10).unwrap();
        assert_eq!(ids(&got), [4]);
        assert_eq!(
            (got[0].agent_id.as_str(), got[0].region.as_str()),
            ("a1", "eu")
        );
        assert_eq!(got[0].batch, batch(4));
        // And what this build writes is that layout.
        assert_eq!(spool.append("a1", "eu", &batch(5)).unwrap(), 5);
        spool.commit(4).unwrap();
        drop(spool);
        assert_eq!(&fs::read(tmp.path().join(LEDGER_FILE)).unwrap()[..12], {
            let mut l = b"LMS1".to_vec();
            l.extend_from_slice(&4u64.to_le_bytes());
            l
        });
        let written = fs::read(tmp.path().join(segment_name(3))).unwrap();
        assert_eq!(&written[..segment.len()], &segment[..]);
        assert_eq!(&written[segment.len()..segment.len() + 2], &[0xB5, 1]);
    }
}
