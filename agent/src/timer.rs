//! Precise sleeps: waking at a scheduled instant within microseconds, without spinning for
//! long.
//!
//! Open-loop arrivals, round slots and the synchronized start of agents in several regions
//! are scheduled to the microsecond (`sched_lag` is reported in µs), but tokio's timer fires
//! on whole milliseconds, up to 1 ms late. So [`precise_sleep_until`] sleeps on a timer until
//! [`SPIN_WINDOW`] before the instant, then yields to the runtime until the instant: other
//! tasks keep running, and the thread stays runnable for the last stretch, so a busy machine
//! does not park it past the instant.
//!
//! The timer, on Linux: a kernel timer (`timerfd` on `CLOCK_MONOTONIC`, the clock of
//! [`Instant`], absolute, nanosecond resolution) woken through tokio's reactor, so the spin
//! only absorbs the wake-up's own delay (a halted vCPU takes 100–300 µs to wake on the
//! 2-vCPU test VMs). Elsewhere, or when no timer can be made: tokio's timer, with a spin of up
//! to [`TOKIO_SPIN_WINDOW`]. Spinning costs CPU (every yield is a pass of the scheduler and an
//! `epoll_wait`): with tokio's timer it was 0.2–1.2 ms of spin per wait, a third of the
//! client's CPU in the load bench's open loop (short answers, up to 2,000 requests/s); with
//! the kernel timer it is at most [`SPIN_WINDOW`].

use std::time::{Duration, Instant};

/// How long before the instant [`precise_sleep_until`] stops sleeping on the kernel timer and
/// yields until the instant.
pub const SPIN_WINDOW: Duration = Duration::from_micros(200);

/// The same with tokio's timer (which fires up to 1 ms late), where there is no kernel timer.
pub const TOKIO_SPIN_WINDOW: Duration = Duration::from_micros(1_200);

/// Returns at `at` (or at once when it has passed), within microseconds rather than tokio's
/// millisecond timer granularity; see the [module](self) docs.
pub async fn precise_sleep_until(at: Instant) {
    #[cfg(target_os = "linux")]
    let slept = match at.checked_sub(SPIN_WINDOW) {
        Some(early) => match kernel::sleep_until(early).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("no kernel timer (timerfd), sleeping on tokio's: {e}");
                false
            }
        },
        None => false,
    };
    #[cfg(not(target_os = "linux"))]
    let slept = false;
    if !slept
        && let Some(early) = at.checked_sub(TOKIO_SPIN_WINDOW)
        && early > Instant::now()
    {
        tokio::time::sleep_until(early.into()).await;
    }
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}

#[cfg(target_os = "linux")]
mod kernel {
    //! One-shot `timerfd` sleeps.

    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    const NS_PER_S: u128 = 1_000_000_000;

    /// Returns once `CLOCK_MONOTONIC` reached `at` (at once when it has passed).
    ///
    /// # Errors
    /// A `timerfd_create`, `timerfd_settime` or `read` failure (e.g. out of descriptors),
    /// or the timer cannot be registered with the reactor.
    pub async fn sleep_until(at: Instant) -> io::Result<()> {
        if at <= Instant::now() {
            return Ok(());
        }
        // SAFETY: plain system call; the result is checked.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just opened and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        arm(&fd, at)?;
        // SAFETY: an `OwnedFd` keeps its descriptor open until dropped and always returns it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        loop {
            let mut guard = fd.readable().await?;
            let mut expirations = 0u64;
            // SAFETY: reads at most 8 bytes into a u64 (a timerfd hands out exactly 8).
            let n = unsafe {
                libc::read(
                    fd.get_ref().as_raw_fd(),
                    (&raw mut expirations).cast(),
                    size_of::<u64>(),
                )
            };
            if n == size_of::<u64>() as isize {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => guard.clear_ready(),
                io::ErrorKind::Interrupted => {}
                _ => return Err(e),
            }
        }
    }

    /// Arms `fd` to expire once at `at`: `CLOCK_MONOTONIC` now plus what is left until `at`
    /// (`Instant` reads the same clock), as an absolute time.
    fn arm(fd: &OwnedFd, at: Instant) -> io::Result<()> {
        // `Instant` first: the clock read after it is later, so the deadline is not before `at`.
        let left = at.saturating_duration_since(Instant::now()).as_nanos();
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let ns = now.tv_sec as u128 * NS_PER_S + now.tv_nsec as u128 + left;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (ns / NS_PER_S) as _,
                tv_nsec: (ns % NS_PER_S) as _,
            },
        };
        // SAFETY: `fd` is a timerfd; `spec` is read, no old value is asked for.
        let rc = unsafe {
            libc::timerfd_settime(
                fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &raw const spec,
                std::ptr::null_mut(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Never early, and not much late on an idle runtime; a sleep can be cancelled (dropped
    /// while it waits). (That no timer descriptor is left open: `tests/timer_descriptors.rs`,
    /// a process of its own.)
    #[tokio::test(flavor = "current_thread")]
    async fn returns_at_the_instant_not_before() {
        for wait_us in [0u64, 150, 3_000, 12_345] {
            let at = Instant::now() + Duration::from_micros(wait_us);
            precise_sleep_until(at).await;
            let woke = Instant::now();
            assert!(woke >= at, "{wait_us} µs: woke before the instant");
            assert!(
                woke - at < Duration::from_millis(50),
                "{wait_us} µs: woke {:?} late",
                woke - at
            );
        }
        let far = Instant::now() + Duration::from_secs(60);
        let cancelled =
            tokio::time::timeout(Duration::from_millis(5), precise_sleep_until(far)).await;
        assert!(cancelled.is_err(), "a sleep of 60 s ended within 5 ms");
        #[cfg(target_os = "linux")]
        {
            let at = Instant::now() + Duration::from_micros(2_500);
            kernel::sleep_until(at).await.unwrap();
            assert!(Instant::now() >= at);
        }
    }
}
