//! Result batches waiting for the coordinator's ack, and campaign-done notices.
//!
//! A batch stays here from the moment it is sealed until its ack arrives; every new session
//! resends everything still here (the coordinator de-duplicates by (campaign, agent, seq)).
//! A batch sent but not acked for a while is sent again ([`Outbox::resend_stale`]): the
//! coordinator withholds its ack when it cannot store the batch durably.
//! In memory for now: an on-disk spool that survives a restart is issue 6.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latmesh_proto::pb;
use tokio::sync::Notify;

/// Shared between the runners that seal batches and the session that sends them.
#[derive(Clone, Debug, Default)]
pub struct Outbox {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Inner {
    unacked: BTreeMap<(String, u64), pb::ResultBatch>,
    unsent: Vec<(String, u64)>,
    dones: BTreeMap<String, pb::CampaignDone>,
    unsent_dones: Vec<String>,
    sent_at: BTreeMap<(String, u64), Instant>,
}

/// What the session should send next.
#[derive(Debug, Default)]
pub struct Pending {
    /// Batches not yet sent on this session.
    pub batches: Vec<pb::ResultBatch>,
    /// Done notices not yet sent on this session.
    pub dones: Vec<pb::CampaignDone>,
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a sealed batch.
    pub fn push(&self, batch: pb::ResultBatch) {
        let key = (batch.campaign_id.clone(), batch.seq);
        {
            let mut inner = self.lock();
            inner.unsent.push(key.clone());
            inner.unacked.insert(key, batch);
        }
        self.notify.notify_one();
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

    /// Drops an acked batch.
    pub fn ack(&self, campaign_id: &str, seq: u64) {
        let mut inner = self.lock();
        let key = (campaign_id.to_string(), seq);
        inner.unacked.remove(&key);
        inner.sent_at.remove(&key);
    }

    /// Marks batches sent more than `older_than` ago and still unacked as unsent (the
    /// coordinator did not ack them, e.g. its spool was full); returns how many.
    pub fn resend_stale(&self, older_than: Duration) -> usize {
        let mut inner = self.lock();
        let now = Instant::now();
        let stale: Vec<(String, u64)> = inner
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
    /// starts.
    pub fn resend_all(&self) {
        let mut inner = self.lock();
        inner.unsent = inner.unacked.keys().cloned().collect();
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
        let done_ids = std::mem::take(&mut inner.unsent_dones);
        let dones = done_ids
            .iter()
            .filter_map(|id| inner.dones.get(id).cloned())
            .collect();
        Pending { batches, dones }
    }

    /// Batches waiting for an ack.
    pub fn unacked(&self) -> usize {
        self.lock().unacked.len()
    }

    /// Resolves when something was pushed since the last call.
    pub async fn changed(&self) {
        self.notify.notified().await;
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
        assert_eq!(
            o.take_pending()
                .batches
                .iter()
                .map(|b| b.seq)
                .collect::<Vec<_>>(),
            vec![2]
        );
        o.ack("c", 2);
        assert_eq!(o.resend_stale(Duration::ZERO), 0);
    }
}
