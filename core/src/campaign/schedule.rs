//! `[schedule]`: the campaign repeated as a series of runs (see [`crate::schedule`]).

use std::collections::BTreeMap;

use super::error::{CampaignError, invalid};
use super::file::{CampaignFile, ScheduleSection};
use crate::schedule::{MAX_RUNS, Schedule, next_window_start};
use crate::windows::{OFF_PEAK, Window, WindowSpec};

/// Shortest `every`, ms.
pub const MIN_EVERY_MS: u64 = 1_000;
/// Longest `every`, ms (365 days).
pub const MAX_EVERY_MS: u64 = 365 * 86_400_000;

/// `[schedule]`, checked against the campaign's regions, zones and windows.
pub(super) fn validate_schedule(
    file: &CampaignFile,
    timezones: &BTreeMap<String, String>,
    windows: &[Window],
) -> Result<Option<Schedule>, CampaignError> {
    file.schedule
        .as_ref()
        .map(|s| validate(s, &file.campaign.regions, timezones, windows))
        .transpose()
        .map_err(|(key, message)| invalid(key, message))
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

/// Validates `[schedule]` against the campaign's regions, zones and windows. Errors are
/// `(key, message)` with keys such as `schedule.every`.
///
/// # Errors
/// The first problem: neither or both of `every` and `at_windows`, a bad duration, an
/// unknown window (or one that never starts, such as a window covering the whole day), no
/// `runs` and no `until`, `runs` out of 1..=[`MAX_RUNS`], or `until` not RFC 3339.
fn validate(
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::Plan;
    use crate::schedule::rfc3339;
    use crate::windows::tests::window;

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
        super::super::load_toml_str(
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
        let plain = super::super::load_toml_str(CAMPAIGN, std::path::Path::new(".")).unwrap();
        assert!(plain.schedule.is_none() && !plain.to_json().contains("schedule"));
    }
}
