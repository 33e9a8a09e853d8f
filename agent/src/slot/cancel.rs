//! A campaign's cancel switch ([`Cancel`]; see the [slot documentation](super#cancel-cancel)).

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// A campaign's cancel switch: cloned into every slot of the run; [`Cancel::cancel`] is seen
/// by all of them at once.
#[derive(Clone, Debug)]
pub struct Cancel(watch::Sender<Option<Instant>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel(watch::Sender::new(None))
    }
}

impl Cancel {
    /// Cancels (the first call counts; later ones change nothing).
    pub fn cancel(&self) {
        self.0.send_if_modified(|at| {
            if at.is_some() {
                return false;
            }
            *at = Some(Instant::now());
            true
        });
    }

    /// When it was cancelled, if it was.
    pub fn cancelled_at(&self) -> Option<Instant> {
        *self.0.borrow()
    }

    /// Resolves once cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.0.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// Resolves `grace` after the cancel.
    pub(super) async fn grace_over(&self, grace: Duration) {
        self.cancelled().await;
        if let Some(at) = self.cancelled_at() {
            tokio::time::sleep_until((at + grace).into()).await;
        }
    }
}
