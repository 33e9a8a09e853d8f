//! An attempt's progress seen from outside its task: whether its first token (or its end) has
//! come yet. The SLO search ([`crate::load::search`]) watches its arrivals in flight with it:
//! one still without a first token past the TTFT bound has certainly missed it.
//!
//! The flag is a task-local ([`watch_first_token`]), so the probe engine's signature stays as
//! it is; a probe outside such a scope reports to nobody. Each attempt starts with the flag
//! cleared; it is set once the attempt no longer waits for its first token (a token arrived,
//! or the attempt ended or failed first).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

tokio::task_local! {
    static FIRST_TOKEN: Arc<AtomicBool>;
}

/// Runs `f` (a slot) with `flag` reporting whether its current attempt has its first token.
pub async fn watch_first_token<F: Future>(flag: Arc<AtomicBool>, f: F) -> F::Output {
    FIRST_TOKEN.scope(flag, f).await
}

/// An attempt starts: no first token yet.
pub(crate) fn attempt_started() {
    let _ = FIRST_TOKEN.try_with(|f| f.store(false, Ordering::Relaxed));
}

/// The attempt no longer waits for its first token.
pub(crate) fn first_token_decided() {
    let _ = FIRST_TOKEN.try_with(|f| f.store(true, Ordering::Relaxed));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_flag_follows_the_attempt_inside_the_scope_only() {
        first_token_decided(); // outside any scope: nothing happens, nothing panics
        let flag = Arc::new(AtomicBool::new(true));
        let seen = watch_first_token(flag.clone(), async {
            attempt_started();
            let before = FIRST_TOKEN.with(|f| f.load(Ordering::Relaxed));
            first_token_decided();
            before
        })
        .await;
        assert!(!seen);
        assert!(flag.load(Ordering::Relaxed));
    }
}
