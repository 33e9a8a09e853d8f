//! The queue of [`StoreEvent`]s (campaign launched, campaign finished) waiting for the sink,
//! optionally persisted so that a coordinator restarted before ClickHouse stored them still
//! writes its campaigns' `campaigns` and `agents` rows.
//!
//! File format: JSON Lines, one event per line, rewritten whole on every change
//! (`latmesh_durable::atomic_write`: temp file, fsync, rename, fsync of the directory);
//! events are few (two per campaign).

use std::path::{Path, PathBuf};

use crate::store_event::StoreEvent;

/// Events not yet stored, in order; `handed` of them were given to the sink already.
#[derive(Debug, Default)]
pub struct EventQueue {
    unwritten: Vec<StoreEvent>,
    handed: usize,
    path: Option<PathBuf>,
}

impl EventQueue {
    /// A queue kept in memory only.
    pub fn in_memory() -> Self {
        EventQueue::default()
    }

    /// A queue persisted at `path`, loaded from it when it exists.
    ///
    /// # Errors
    /// The file exists but cannot be read, or a line is not an event (named with its line).
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let mut unwritten = Vec::new();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                for (i, line) in text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                {
                    let ev = serde_json::from_str(line)
                        .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
                    unwritten.push(ev);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
        Ok(EventQueue {
            unwritten,
            handed: 0,
            path: Some(path.to_path_buf()),
        })
    }

    /// Adds an event (and persists the queue).
    pub fn push(&mut self, ev: StoreEvent) {
        self.unwritten.push(ev);
        self.persist();
    }

    /// The events not handed out yet (marking them handed).
    pub fn take_new(&mut self) -> Vec<StoreEvent> {
        let new = self.unwritten[self.handed..].to_vec();
        self.handed = self.unwritten.len();
        new
    }

    /// The first `n` events are stored: forget them (and persist the rest).
    pub fn written(&mut self, n: usize) {
        let n = n.min(self.handed);
        if n == 0 {
            return;
        }
        self.unwritten.drain(..n);
        self.handed -= n;
        self.persist();
    }

    /// Events waiting to be stored.
    pub fn len(&self) -> usize {
        self.unwritten.len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.unwritten.is_empty()
    }

    fn persist(&self) {
        let Some(path) = &self.path else { return };
        let written = json_lines(&self.unwritten)
            .map_err(anyhow::Error::from)
            .and_then(|bytes| Ok(latmesh_durable::atomic_write(path, &bytes)?));
        if let Err(e) = written {
            tracing::error!(path = %path.display(), error = %e, "cannot persist the pending campaign events");
        }
    }
}

/// The events as JSON Lines.
fn json_lines(events: &[StoreEvent]) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    for ev in events {
        serde_json::to_writer(&mut out, ev)?;
        out.push(b'\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(id: &str) -> StoreEvent {
        StoreEvent::Finished {
            campaign_id: id.into(),
            agents: vec![],
        }
    }

    fn id(ev: &StoreEvent) -> &str {
        match ev {
            StoreEvent::Launched { campaign_id, .. } | StoreEvent::Finished { campaign_id, .. } => {
                campaign_id
            }
        }
    }

    #[test]
    fn unwritten_events_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut q = EventQueue::open(&path).unwrap();
        q.push(finished("a"));
        q.push(finished("b"));
        assert_eq!(q.take_new().iter().map(id).collect::<Vec<_>>(), ["a", "b"]);
        q.push(finished("c"));
        q.written(1);
        drop(q);
        // Restarted: b (handed but not stored) and c come back.
        let mut q = EventQueue::open(&path).unwrap();
        assert_eq!(q.take_new().iter().map(id).collect::<Vec<_>>(), ["b", "c"]);
        assert!(q.take_new().is_empty());
        q.written(2);
        assert!(EventQueue::open(&path).unwrap().is_empty());
        std::fs::write(&path, "{oops}\n").unwrap();
        assert!(
            EventQueue::open(&path)
                .unwrap_err()
                .to_string()
                .contains(":1:")
        );
    }
}
