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
//! ([`Plan::regions`]`[0]`) in its zone from `[campaign.timezones]` (`[windows]` make every
//! region give one); other regions run at the same instant, whatever their local time.
//!
//! The coordinator runs the series (its `schedule` module): each run is an ordinary campaign
//! with the plan without its schedule; runs never overlap (a run due while the previous one is
//! still going starts when that one finishes, with a warning; later runs keep their own due
//! times, so a long delay is caught up, never skipped). The series ends after `runs` runs, or
//! at the first run that would be due after `until`.
//!
//! Pure: no I/O (the coordinator passes the current time in).

use serde::{Deserialize, Serialize};

use crate::plan::Plan;
use crate::windows::{OFF_PEAK, Window, WindowSpec};

/// Most runs a series may have.
pub const MAX_RUNS: u32 = 10_000;
/// Shortest `every`, ms.
pub const MIN_EVERY_MS: u64 = 1_000;
/// Longest `every`, ms (365 days).
pub const MAX_EVERY_MS: u64 = 365 * 86_400_000;
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

/// `[schedule]` as written in a campaign file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSection {
    /// `"30m"`: a number and a unit (`s`, `m`, `h`, `d`).
    pub every: Option<String>,
    /// Window names (declared in `[windows]`, or `off-peak`).
    pub at_windows: Option<Vec<String>>,
    /// How many runs.
    pub runs: Option<u32>,
    /// RFC 3339 instant (`2024-06-02T00:00:00Z`) after which no run starts (a string, or an
    /// unquoted TOML datetime).
    #[serde(default, deserialize_with = "until_text")]
    pub until: Option<String>,
}

/// `until` as text: a string, or a TOML datetime (which figment hands over as a one-entry
/// table holding its text).
fn until_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Plain(String),
        TomlDatetime(std::collections::BTreeMap<String, String>),
    }
    Ok(match Option::<Text>::deserialize(d)? {
        None => None,
        Some(Text::Plain(s)) => Some(s),
        Some(Text::TomlDatetime(m)) => m.into_values().next(),
    })
}

/// Parses a duration `N<unit>` (`90s`, `30m`, `6h`, `1d`; whole numbers) into ms.
///
/// # Errors
/// A message quoting the text and saying what is accepted.
pub fn parse_every(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || {
        format!("{text:?} is not a duration: a whole number and a unit s, m, h or d (e.g. \"30m\")")
    };
    let unit_at = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = t.split_at(unit_at);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let ms_per = match unit.trim() {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = n.checked_mul(ms_per).ok_or_else(bad)?;
    if !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&ms) {
        return Err(format!("{text:?} is not between 1s and 365d"));
    }
    Ok(ms)
}

/// Parses an RFC 3339 instant (`2024-06-02T00:00:00Z`, `2024-06-02T08:00:00+08:00`) into UTC
/// µs.
///
/// # Errors
/// A message quoting the text.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.timestamp_micros())
        .map_err(|e| {
            format!("{text:?} is not an RFC 3339 time such as \"2024-06-02T00:00:00Z\" ({e})")
        })
}

/// UTC µs as RFC 3339 with seconds (`2024-06-02T00:00:00Z`).
pub fn rfc3339(unix_us: i64) -> String {
    match chrono::DateTime::from_timestamp(unix_us.div_euclid(1_000_000), 0) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => unix_us.to_string(),
    }
}

/// Validates `[schedule]` against the campaign's regions, zones and windows. Errors are
/// `(key, message)` with keys such as `schedule.every`.
///
/// # Errors
/// The first problem: neither or both of `every` and `at_windows`, a bad duration, an
/// unknown window (or one that never starts, such as a window covering the whole day), no
/// `runs` and no `until`, `runs` out of 1..=[`MAX_RUNS`], or `until` not RFC 3339.
pub fn validate(
    s: &ScheduleSection,
    regions: &[String],
    timezones: &std::collections::BTreeMap<String, String>,
    windows: &[Window],
) -> Result<Schedule, (String, String)> {
    let err = |key: &str, m: String| (format!("schedule.{key}"), m);
    let (every_ms, at_windows) = match (&s.every, &s.at_windows) {
        (Some(_), Some(_)) => {
            return Err(err(
                "at_windows",
                "give either every or at_windows, not both".into(),
            ));
        }
        (None, None) => {
            return Err((
                "schedule".into(),
                "say when runs start: every = \"30m\" or at_windows = [\"peak\", …]".into(),
            ));
        }
        (Some(e), None) => (
            Some(parse_every(e).map_err(|m| err("every", m))?),
            Vec::new(),
        ),
        (None, Some(names)) => {
            if names.is_empty() {
                return Err(err("at_windows", "name at least one window".into()));
            }
            if windows.is_empty() {
                return Err(err(
                    "at_windows",
                    "needs [windows] (and [campaign.timezones]) declaring the windows".into(),
                ));
            }
            for (i, n) in names.iter().enumerate() {
                if n != OFF_PEAK && !windows.iter().any(|w| &w.name == n) {
                    let declared: Vec<&str> = windows.iter().map(|w| w.name.as_str()).collect();
                    return Err(err(
                        &format!("at_windows[{i}]"),
                        format!(
                            "{n:?} is not a window ([windows]: {}; or {OFF_PEAK})",
                            declared.join(", ")
                        ),
                    ));
                }
                if names[..i].contains(n) {
                    return Err(err(
                        &format!("at_windows[{i}]"),
                        format!("{n:?} is listed twice"),
                    ));
                }
            }
            (None, names.clone())
        }
    };
    let until_unix_us = s
        .until
        .as_deref()
        .map(parse_rfc3339)
        .transpose()
        .map_err(|m| err("until", m))?;
    let runs = match (s.runs, until_unix_us) {
        (Some(n), _) if (1..=MAX_RUNS).contains(&n) => n,
        (Some(n), _) => return Err(err("runs", format!("{n} is not in 1..={MAX_RUNS}"))),
        (None, Some(_)) => MAX_RUNS,
        (None, None) => {
            return Err(err(
                "runs",
                "missing: say how many runs (runs = N), or until when (until = RFC 3339)".into(),
            ));
        }
    };
    let schedule = Schedule {
        every_ms,
        at_windows,
        runs,
        until_unix_us,
    };
    if !schedule.at_windows.is_empty() {
        // Every named window must start somewhere in a week (a window covering the whole day,
        // or an off-peak that never happens, never starts).
        let spec =
            WindowSpec::new(timezones, windows).map_err(|e| err("at_windows", e.to_string()))?;
        let region = regions.first().map_or("", String::as_str);
        for (i, n) in schedule.at_windows.iter().enumerate() {
            // 2024-01-01T00:00:00Z, a fixed instant: validation does not depend on the clock.
            if next_window_start(
                &spec,
                region,
                std::slice::from_ref(n),
                1_704_067_200_000_000,
            )
            .is_none()
            {
                return Err(err(
                    &format!("at_windows[{i}]"),
                    format!("{n:?} never starts (it covers the whole day, or never happens)"),
                ));
            }
        }
    }
    Ok(schedule)
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
    pub fn zone_region(plan: &Plan) -> &str {
        plan.regions.first().map_or("", String::as_str)
    }

    /// When run 1 is due, UTC µs: `earliest_us` (launch + start delay) for `every`, else the
    /// first window start at or after it; `None` when that is after `until` (or no window
    /// starts within 8 days).
    pub fn first_due_us(&self, plan: &Plan, earliest_us: i64) -> Option<i64> {
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
        plan: &Plan,
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

    fn next_window_after(&self, plan: &Plan, after_us: i64) -> Option<i64> {
        let spec = WindowSpec::from_plan(plan).ok()?;
        next_window_start(&spec, Self::zone_region(plan), &self.at_windows, after_us)
    }

    /// The schedule in words: `every 30m, 48 runs` or `at the start of peak, off-peak
    /// (local time of us-east, America/New_York), 6 runs, until 2024-06-02T00:00:00Z`.
    pub fn describe(&self, plan: &Plan) -> String {
        let mut s = match self.every_ms {
            Some(ms) => format!("every {}", human_ms(ms)),
            None => {
                let region = Self::zone_region(plan);
                format!(
                    "at the start of {} (local time of {region}, {})",
                    self.at_windows.join(", "),
                    plan.timezones.get(region).map_or("UTC", String::as_str)
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
    use crate::windows::parse_ranges;

    fn window(name: &str, ranges: &str) -> Window {
        Window {
            name: name.into(),
            ranges: parse_ranges(ranges).unwrap(),
        }
    }

    fn section(every: Option<&str>, at: Option<&[&str]>, runs: Option<u32>) -> ScheduleSection {
        ScheduleSection {
            every: every.map(String::from),
            at_windows: at.map(|a| a.iter().map(|s| s.to_string()).collect()),
            runs,
            until: None,
        }
    }

    fn zones(zone: &str) -> BTreeMap<String, String> {
        [("us-east".to_string(), zone.to_string())].into()
    }

    /// A plan in `us-east` at `zone` with windows `peak` 09:00-12:00 and `night` 22:00-06:00.
    fn plan_with(zone: &str, schedule: Schedule) -> Plan {
        let mut p = crate::plan::tests::plan(1, 1);
        p.timezones = zones(zone);
        p.windows = vec![
            window("peak", "09:00-12:00"),
            window("night", "22:00-06:00"),
        ];
        p.schedule = Some(schedule);
        p
    }

    const H: i64 = 3_600_000_000;
    /// 2024-06-03T00:00:00Z, a Monday.
    const JUNE_3: i64 = 1_717_372_800_000_000;

    #[test]
    fn durations_parse_in_four_units() {
        assert_eq!(parse_every("90s"), Ok(90_000));
        assert_eq!(parse_every("30m"), Ok(1_800_000));
        assert_eq!(parse_every(" 6h "), Ok(21_600_000));
        assert_eq!(parse_every("1d"), Ok(86_400_000));
        for bad in ["30", "m", "1.5h", "-3m", "3 weeks", "0s", "400d", ""] {
            assert!(parse_every(bad).is_err(), "{bad}");
        }
        assert_eq!(human_ms(1_800_000), "30m");
        assert_eq!(human_ms(90_000), "90s");
        assert_eq!(parse_rfc3339("2024-06-03T00:00:00Z"), Ok(JUNE_3));
        assert_eq!(parse_rfc3339("2024-06-03T08:00:00+08:00"), Ok(JUNE_3));
        assert!(parse_rfc3339("2024-06-03").is_err());
        assert_eq!(rfc3339(JUNE_3), "2024-06-03T00:00:00Z");
    }

    #[test]
    fn sections_validate_with_keys_in_errors() {
        let regions = vec!["us-east".to_string()];
        let ws = vec![window("peak", "09:00-12:00")];
        let ok = validate(
            &section(Some("30m"), None, Some(4)),
            &regions,
            &BTreeMap::new(),
            &[],
        );
        assert_eq!(
            ok,
            Ok(Schedule {
                every_ms: Some(1_800_000),
                at_windows: vec![],
                runs: 4,
                until_unix_us: None
            })
        );
        let tz = zones("UTC");
        let at = validate(
            &section(None, Some(&["peak", "off-peak"]), Some(6)),
            &regions,
            &tz,
            &ws,
        )
        .unwrap();
        assert_eq!(at.at_windows, ["peak", "off-peak"]);
        let cases: Vec<(ScheduleSection, &[Window], &str)> = vec![
            (section(None, None, Some(2)), &ws, "schedule: say when"),
            (
                section(Some("1m"), Some(&["peak"]), Some(2)),
                &ws,
                "schedule.at_windows: give either",
            ),
            (
                section(Some("1x"), None, Some(2)),
                &ws,
                "schedule.every: \"1x\"",
            ),
            (
                section(Some("1m"), None, None),
                &ws,
                "schedule.runs: missing",
            ),
            (
                section(Some("1m"), None, Some(0)),
                &ws,
                "schedule.runs: 0 is not in",
            ),
            (
                section(None, Some(&["lunch"]), Some(2)),
                &ws,
                "schedule.at_windows[0]: \"lunch\" is not a window",
            ),
            (
                section(None, Some(&["peak", "peak"]), Some(2)),
                &ws,
                "schedule.at_windows[1]: \"peak\" is listed twice",
            ),
            (
                section(None, Some(&["peak"]), Some(2)),
                &[],
                "schedule.at_windows: needs [windows]",
            ),
            (
                section(None, Some(&[]), Some(2)),
                &ws,
                "schedule.at_windows: name at least one",
            ),
        ];
        for (s, windows, says) in cases {
            let (key, m) = validate(&s, &regions, &tz, windows).unwrap_err();
            let e = format!("{key}: {m}");
            assert!(e.starts_with(says), "{e:?} should start with {says:?}");
        }
        // A window covering the whole day never starts; off-peak then never happens.
        let all_day = vec![window("always", "00:00-24:00")];
        for name in ["always", "off-peak"] {
            let e = validate(
                &section(None, Some(&[name]), Some(2)),
                &regions,
                &tz,
                &all_day,
            )
            .unwrap_err();
            assert!(e.1.contains("never starts"), "{e:?}");
        }
        // until alone allows up to MAX_RUNS runs; a bad until names the key.
        let mut s = section(Some("1h"), None, None);
        s.until = Some("2024-06-03T00:00:00Z".into());
        let u = validate(&s, &regions, &tz, &[]).unwrap();
        assert_eq!((u.runs, u.until_unix_us), (MAX_RUNS, Some(JUNE_3)));
        s.until = Some("tomorrow".into());
        assert_eq!(
            validate(&s, &regions, &tz, &[]).unwrap_err().0,
            "schedule.until"
        );
    }

    #[test]
    fn every_runs_on_a_grid_until_runs_or_until() {
        let mut sched = Schedule {
            every_ms: Some(1_800_000),
            at_windows: vec![],
            runs: 3,
            until_unix_us: None,
        };
        let p = plan_with("UTC", sched.clone());
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
        let p = plan_with("America/New_York", sched.clone());
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
        let p8 = plan_with("+08:00", sched.clone());
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
        let p = plan_with("UTC", sched.clone());
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
        let ny = plan_with("America/New_York", only_peak.clone());
        let march_9 = 1_709_942_400_000_000; // 2024-03-09T00:00:00Z
        let first = only_peak.first_due_us(&ny, march_9).unwrap();
        assert_eq!(first, march_9 + 14 * H);
        assert_eq!(
            only_peak.due_us(&ny, 2, first, first),
            Some(march_9 + 37 * H)
        );
    }

    const CAMPAIGN: &str = r#"
[campaign]
name = "t"
regions = ["us-east", "eu-west"]

[campaign.timezones]
us-east = "America/New_York"
eu-west = "UTC"

[windows]
peak = "09:00-12:00"

[rounds]
count = 1
interval_s = 1.0
gap_ms = 10

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 8

[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
"#;

    fn load(schedule: &str) -> Result<Plan, String> {
        crate::campaign::load_toml_str(
            &format!("{CAMPAIGN}\n[schedule]\n{schedule}\n"),
            std::path::Path::new("."),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn campaign_files_carry_a_schedule_into_the_plan() {
        let p = load("every = \"3s\"\nruns = 2").unwrap();
        assert_eq!(
            p.schedule,
            Some(Schedule {
                every_ms: Some(3_000),
                at_windows: vec![],
                runs: 2,
                until_unix_us: None
            })
        );
        let p = load("at_windows = [\"peak\", \"off-peak\"]\nuntil = \"2024-06-03T00:00:00Z\"")
            .unwrap();
        let s = p.schedule.as_ref().unwrap();
        assert_eq!((s.runs, s.until_unix_us), (MAX_RUNS, Some(JUNE_3)));
        assert_eq!(Schedule::zone_region(&p), "us-east");
        // A TOML datetime (unquoted) is accepted too.
        let p = load("every = \"1h\"\nruns = 3\nuntil = 2024-06-03T00:00:00Z").unwrap();
        assert_eq!(p.schedule.unwrap().until_unix_us, Some(JUNE_3));
        // Errors name the key; no [schedule]: no schedule, and the JSON is unchanged.
        assert!(
            load("every = \"3s\"")
                .unwrap_err()
                .contains("schedule.runs: missing")
        );
        assert!(
            load("every = \"3s\"\nruns = 2\nevry = 1")
                .unwrap_err()
                .contains("evry")
        );
        assert!(
            load("at_windows = [\"lunch\"]\nruns = 2")
                .unwrap_err()
                .contains("schedule.at_windows[0]: \"lunch\" is not a window ([windows]: peak; or off-peak)")
        );
        let plain = crate::campaign::load_toml_str(CAMPAIGN, std::path::Path::new(".")).unwrap();
        assert!(plain.schedule.is_none() && !plain.to_json().contains("schedule"));
    }

    #[test]
    fn plans_without_a_schedule_keep_their_json_and_hash() {
        let mut p = crate::plan::tests::plan(1, 1);
        let json = p.to_json();
        assert!(!json.contains("schedule"), "{json}");
        let hash = p.hash();
        p.schedule = Some(Schedule {
            every_ms: Some(3_000),
            at_windows: vec![],
            runs: 2,
            until_unix_us: None,
        });
        let json = p.to_json();
        assert!(
            json.contains(r#""schedule":{"every_ms":3000,"runs":2}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), p);
        assert_ne!(p.hash(), hash);
        p.schedule = None;
        assert_eq!(p.hash(), hash);
    }
}
