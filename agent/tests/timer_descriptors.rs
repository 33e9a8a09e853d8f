//! `latmesh_agent::timer::precise_sleep_until` closes its kernel timer: after a sleep that
//! ended, and after one cancelled while it waited. A process of its own: it counts the
//! process's timerfd descriptors, which other tests running at the same time would change.

use std::time::{Duration, Instant};

use latmesh_agent::timer::precise_sleep_until;

/// Open timerfd descriptors of this process.
fn open_timers() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.to_string_lossy().contains("timerfd"))
            .count()
    })
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_sleep_holds_one_timer_while_it_waits_and_none_after() {
    assert_eq!(open_timers(), 0);
    let at = Instant::now() + Duration::from_millis(20);
    let sleep = precise_sleep_until(at);
    tokio::pin!(sleep);
    assert!(futures::poll!(&mut sleep).is_pending());
    assert_eq!(open_timers(), 1, "the kernel timer while it waits");
    sleep.await;
    assert!(Instant::now() >= at);
    assert_eq!(open_timers(), 0, "the timer of a finished sleep is closed");

    let far = Instant::now() + Duration::from_secs(60);
    let cancelled = tokio::time::timeout(Duration::from_millis(5), precise_sleep_until(far)).await;
    assert!(cancelled.is_err());
    assert_eq!(open_timers(), 0, "the timer of a cancelled sleep is closed");
}
