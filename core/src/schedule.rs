//! Schedules: a campaign repeated as a series of runs (the patrol).
//!
//! ```toml
//! [schedule]
//! every = "30m"                 # a run every 30 minutes (units s, m, h, d; whole numbers)
//! # at_windows = ["peak", "off-peak"]  # or: a run at the start of each occurrence of these windows
//! runs = 48                     # how many runs (1..=10000; optional when `until` is given)
//! until = "2024-06-02T00:00:00Z" # optional, RFC 3339: no run starts after it
//! ```
//!
//! Exactly one of `every` and `at_windows`. Run `k` (1-based) of an `every` schedule is due at
//! `first + (k − 1) × every`, where `first` is the series' start (launch + start delay). Run
//! `k` of an `at_windows` schedule is due at the first start of an occurrence of one of the
//! named windows after run `k − 1` was due (the first run: after the launch + start delay).
//! A window occurrence starts at the minute its label (see [`crate::windows`]) becomes the
//! window's name: `off-peak` starts when a declared window ends (and no other declared window
//! takes over). Window times are local times of the campaign's **first region**
//! ([`crate::plan::Plan::regions`]`[0]`) in its zone from `[campaign.timezones]` (`[windows]`
//! make every region give one); other regions run at the same instant, whatever their local
//! time. The timing reads the plan through [`LocalTimeSettings`]; the `[schedule]` table is
//! parsed and checked with the rest of the campaign file (`campaign/schedule.rs`).
//!
//! The coordinator runs the series (its `schedule` module): each run is an ordinary campaign
//! with the plan without its schedule; runs never overlap (a run due while the previous one is
//! still going starts when that one finishes, with a warning; later runs keep their own due
//! times, so a long delay is caught up, never skipped). The series ends after `runs` runs, or
//! at the first run that would be due after `until`.
//!
//! Pure: no I/O (the coordinator passes the current time in).

use serde::{Deserialize, Serialize};

use crate::windows::{LocalTimeSettings, WindowSpec};

/// Most runs a series may have.
pub const MAX_RUNS: u32 = 10_000;
/// How far ahead a window occurrence is looked for, µs (8 days: every weekly pattern and a
/// daylight-saving change fit).
const LOOK_AHEAD_US: i64 = 8 * 86_400 * 1_000_000;
const MINUTE_US: i64 = 60_000_000;

/// When a campaign repeats (the plan's `schedule`; see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// A run every this many ms (exclusive with `at_windows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// A run at the start of each occurrence of these windows (declared names or
    /// `off-peak`), in the first region's local time (exclusive with `every_ms`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub at_windows: Vec<String>,
    /// How many runs, 1..=[`MAX_RUNS`].
    pub runs: u32,
    /// No run is due after this instant, UTC µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_unix_us: Option<i64>,
}

/// UTC µs as RFC 3339 with seconds (`2024-06-02T00:00:00Z`).
pub fn rfc3339(unix_us: i64) -> String {
    match chrono::DateTime::from_timestamp(unix_us.div_euclid(1_000_000), 0) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => unix_us.to_string(),
    }
}

/// The first instant after `after_us` (UTC µs, strictly after) at which the label of
/// `region`'s local time (see [`WindowSpec::label`]) becomes one of `names` (a start of an
/// occurrence of one of those windows), looked for up to 8 days ahead; minute resolution.
pub fn next_window_start(
    spec: &WindowSpec,
    region: &str,
    names: &[String],
    after_us: i64,
) -> Option<i64> {
    let is_named = |t: i64| {
        let l = spec.label_str(region, t);
        names.iter().any(|n| n == l).then_some(l)
    };
    // The first whole minute strictly after `after_us`.
    let mut t = (after_us.div_euclid(MINUTE_US) + 1) * MINUTE_US;
    let end = after_us.saturating_add(LOOK_AHEAD_US);
    let mut before = spec.label_str(region, t - MINUTE_US);
    while t <= end {
        let now = spec.label_str(region, t);
        if now != before && is_named(t).is_some() {
            return Some(t);
        }
        before = now;
        t += MINUTE_US;
    }
    None
}

impl Schedule {
    /// The region whose local time windows are read in: the plan's first.
    pub fn zone_region(plan: &impl LocalTimeSettings) -> &str {
        plan.regions().first().map_or("", String::as_str)
    }

    /// When run 1 is due, UTC µs: `earliest_us` (launch + start delay) for `every`, else the
    /// first window start at or after it; `None` when that is after `until` (or no window
    /// starts within 8 days).
    pub fn first_due_us(&self, plan: &impl LocalTimeSettings, earliest_us: i64) -> Option<i64> {
        let due = if self.every_ms.is_some() {
            Some(earliest_us)
        } else {
            self.next_window_after(plan, earliest_us - 1)
        }?;
        self.within_until(due)
    }

    /// When run `run` (1-based, ≥ 2) is due, UTC µs, given when run 1 and run `run − 1` were
    /// due; `None` when the series has no such run (`runs` reached, or due after `until`).
    pub fn due_us(
        &self,
        plan: &impl LocalTimeSettings,
        run: u32,
        first_due_us: i64,
        prev_due_us: i64,
    ) -> Option<i64> {
        if run > self.runs || run == 0 {
            return None;
        }
        let due = match self.every_ms {
            Some(every) => first_due_us
                .saturating_add((i64::from(run) - 1).saturating_mul(every as i64 * 1000)),
            None if run == 1 => first_due_us,
            None => self.next_window_after(plan, prev_due_us)?,
        };
        self.within_until(due)
    }

    fn within_until(&self, due: i64) -> Option<i64> {
        match self.until_unix_us {
            Some(until) if due > until => None,
            _ => Some(due),
        }
    }

    fn next_window_after(&self, plan: &impl LocalTimeSettings, after_us: i64) -> Option<i64> {
        let spec = WindowSpec::from_plan(plan).ok()?;
        next_window_start(&spec, Self::zone_region(plan), &self.at_windows, after_us)
    }

    /// The schedule in words: `every 30m, 48 runs` or `at the start of peak, off-peak
    /// (local time of us-east, America/New_York), 6 runs, until 2024-06-02T00:00:00Z`.
    pub fn describe(&self, plan: &impl LocalTimeSettings) -> String {
        let mut s = match self.every_ms {
            Some(ms) => format!("every {}", human_ms(ms)),
            None => {
                let region = Self::zone_region(plan);
                format!(
                    "at the start of {} (local time of {region}, {})",
                    self.at_windows.join(", "),
                    plan.timezones().get(region).map_or("UTC", String::as_str)
                )
            }
        };
        if self.until_unix_us.is_none() || self.runs < MAX_RUNS {
            s += &format!(
                ", {} run{}",
                self.runs,
                if self.runs == 1 { "" } else { "s" }
            );
        }
        if let Some(u) = self.until_unix_us {
            s += &format!(", until {}", rfc3339(u));
        }
        s
    }
}

/// `1800000` ms as `30m` (the largest unit that divides it).
fn human_ms(ms: u64) -> String {
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::windows::Window;
    use crate::windows::tests::window;

    fn zones(zone: &str) -> BTreeMap<String, String> {
        [("us-east".to_string(), zone.to_string())].into()
    }

    /// The local-time settings of a plan in `us-east` at `zone` with windows `peak`
    /// 09:00-12:00 and `night` 22:00-06:00.
    struct Settings {
        regions: Vec<String>,
        timezones: BTreeMap<String, String>,
        windows: Vec<Window>,
    }

    impl LocalTimeSettings for Settings {
        fn regions(&self) -> &[String] {
            &self.regions
        }
        fn timezones(&self) -> &BTreeMap<String, String> {
            &self.timezones
        }
        fn windows(&self) -> &[Window] {
            &self.windows
        }
    }

    fn plan_with(zone: &str) -> Settings {
        Settings {
            regions: vec!["us-east".into()],
            timezones: zones(zone),
            windows: vec![
                window("peak", "09:00-12:00"),
                window("night", "22:00-06:00"),
            ],
        }
    }

    const H: i64 = 3_600_000_000;
    /// 2024-06-03T00:00:00Z, a Monday.
    const JUNE_3: i64 = 1_717_372_800_000_000;

    #[test]
    fn durations_print_in_the_largest_unit() {
        assert_eq!(human_ms(1_800_000), "30m");
        assert_eq!(human_ms(90_000), "90s");
        assert_eq!(rfc3339(JUNE_3), "2024-06-03T00:00:00Z");
    }

    #[test]
    fn every_runs_on_a_grid_until_runs_or_until() {
        let mut sched = Schedule {
            every_ms: Some(1_800_000),
            at_windows: vec![],
            runs: 3,
            until_unix_us: None,
        };
        let p = plan_with("UTC");
        let first = sched.first_due_us(&p, JUNE_3).unwrap();
        assert_eq!(first, JUNE_3);
        assert_eq!(sched.due_us(&p, 2, first, first), Some(JUNE_3 + H / 2));
        // The grid does not move when a run was late (prev_due is not used by `every`).
        assert_eq!(sched.due_us(&p, 3, first, JUNE_3 + 5 * H), Some(JUNE_3 + H));
        assert_eq!(sched.due_us(&p, 4, first, first), None, "runs = 3");
        sched.until_unix_us = Some(JUNE_3 + H / 2);
        assert_eq!(sched.due_us(&p, 2, first, first), Some(JUNE_3 + H / 2));
        assert_eq!(sched.due_us(&p, 3, first, first), None, "after until");
        assert_eq!(sched.first_due_us(&p, JUNE_3 + H), None);
        assert_eq!(
            sched.describe(&p),
            "every 30m, 3 runs, until 2024-06-03T00:30:00Z"
        );
    }

    #[test]
    fn windows_start_runs_in_the_first_region_s_zone() {
        let sched = Schedule {
            every_ms: None,
            at_windows: vec!["peak".into()],
            runs: 3,
            until_unix_us: None,
        };
        // New York is UTC−4 in June: peak 09:00 local is 13:00 UTC.
        let p = plan_with("America/New_York");
        let first = sched.first_due_us(&p, JUNE_3).unwrap();
        assert_eq!(first, JUNE_3 + 13 * H);
        assert_eq!(sched.due_us(&p, 2, first, first), Some(JUNE_3 + 37 * H));
        // Launched inside a peak: the next occurrence, not the current one.
        assert_eq!(
            sched.first_due_us(&p, JUNE_3 + 14 * H),
            Some(JUNE_3 + 37 * H)
        );
        // Exactly at a start: that start.
        assert_eq!(
            sched.first_due_us(&p, JUNE_3 + 13 * H),
            Some(JUNE_3 + 13 * H)
        );
        // A fixed zone: +08:00, peak 09:00 local is 01:00 UTC.
        let p8 = plan_with("+08:00");
        assert_eq!(sched.first_due_us(&p8, JUNE_3), Some(JUNE_3 + H));
        assert!(
            sched.describe(&p).starts_with(
                "at the start of peak (local time of us-east, America/New_York), 3 runs"
            )
        );
    }

    #[test]
    fn off_peak_starts_when_a_window_ends_and_dst_moves_utc_times() {
        let sched = Schedule {
            every_ms: None,
            at_windows: vec!["peak".into(), "off-peak".into()],
            runs: 10,
            until_unix_us: None,
        };
        let p = plan_with("UTC");
        // UTC: night ends 06:00 (off-peak), peak 09:00, off-peak 12:00, then night at 22:00
        // (not named), off-peak again at 06:00.
        let mut due = vec![sched.first_due_us(&p, JUNE_3).unwrap()];
        for run in 2..=4 {
            let prev = *due.last().unwrap();
            due.push(sched.due_us(&p, run, due[0], prev).unwrap());
        }
        assert_eq!(
            due,
            [
                JUNE_3 + 6 * H,
                JUNE_3 + 9 * H,
                JUNE_3 + 12 * H,
                JUNE_3 + 30 * H
            ]
        );
        // New York across the spring DST change (2024-03-10, 02:00 → 03:00): peak at 09:00
        // local is 14:00 UTC on the 9th and 13:00 UTC on the 10th.
        let only_peak = Schedule {
            at_windows: vec!["peak".into()],
            ..sched
        };
        let ny = plan_with("America/New_York");
        let march_9 = 1_709_942_400_000_000; // 2024-03-09T00:00:00Z
        let first = only_peak.first_due_us(&ny, march_9).unwrap();
        assert_eq!(first, march_9 + 14 * H);
        assert_eq!(
            only_peak.due_us(&ny, 2, first, first),
            Some(march_9 + 37 * H)
        );
    }
}
