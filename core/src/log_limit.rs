//! A bound on how often one kind of warning is logged, so that a peer that can trigger it at
//! will (failed TLS handshakes, refused messages) cannot flood the log: at most `burst`
//! lines per window, the rest counted and reported by the next line that is logged
//! (`suppressed = N`), as journald's and syslog's rate limits do.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many lines of one kind may be logged per window; shared by every caller of that kind
/// (usually a `static`).
#[derive(Debug)]
pub struct LogLimit {
    burst: u32,
    window: Duration,
    /// (start of the current window, lines logged in it, lines suppressed since the last one
    /// logged).
    state: Mutex<(Option<Instant>, u32, u64)>,
}

impl LogLimit {
    /// At most `burst` lines per `window`.
    pub const fn new(burst: u32, window: Duration) -> LogLimit {
        LogLimit {
            burst,
            window,
            state: Mutex::new((None, 0, 0)),
        }
    }

    /// Whether a line may be logged now: `Some(n)` with the `n` lines suppressed since the
    /// last one logged (to say so in this line), `None` when this one is to be suppressed
    /// (and is counted).
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (start, logged, suppressed) = &mut *s;
        if start.is_none_or(|t| now.saturating_duration_since(t) >= self.window) {
            (*start, *logged) = (Some(now), 0);
        }
        if *logged < self.burst {
            *logged += 1;
            Some(std::mem::take(suppressed))
        } else {
            *suppressed = suppressed.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_next_line_counts_what_was_suppressed() {
        let limit = LogLimit::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        let got: Vec<Option<u64>> = (0..5)
            .map(|i| limit.allow_at(t0 + Duration::from_millis(i)))
            .collect();
        assert_eq!(got, [Some(0), Some(0), None, None, None]);
        // A new window: logged again, saying 3 were left out.
        assert_eq!(limit.allow_at(t0 + Duration::from_secs(10)), Some(3));
        assert_eq!(limit.allow_at(t0 + Duration::from_secs(11)), Some(0));
        assert_eq!(limit.allow_at(t0 + Duration::from_secs(12)), None);
    }
}
