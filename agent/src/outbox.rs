//! Result batches waiting for the coordinator's ack, and campaign-done notices.
//!
//! A batch stays here from the moment it is sealed until its ack arrives; every new session
//! resends everything still here (the coordinator de-duplicates by (campaign, agent, seq)).
//! In memory for now: an on-disk spool that survives a restart is issue 6.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
        self.lock().unacked.remove(&(campaign_id.to_string(), seq));
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
}
