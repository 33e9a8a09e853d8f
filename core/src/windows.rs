//! Named local-time windows (`peak`, `night`, …) and the time zone of each region.
//!
//! A campaign file may give each region a time zone and name windows of local time:
//!
//! ```toml
//! [campaign.timezones]          # region → IANA zone name or fixed UTC offset
//! us-east = "America/New_York"
//! ap-southeast = "+08:00"
//!
//! [windows]                     # name → local-time ranges, HH:MM-HH:MM, comma separated
//! peak = "09:00-12:00,14:00-18:00"
//! night = "22:00-06:00"         # a range whose end is before its start wraps past midnight
//! ```
//!
//! [`WindowSpec::label`] names the window a UTC instant falls in, in the local time of a
//! region: the **first declared** window with a range containing the local time of day wins
//! when windows overlap; a time in no window is [`OFF_PEAK`]; with no windows at all every
//! label is `""`. Ranges are half-open, `[start, end)`, at minute resolution (`24:00` may end
//! a range). Local time follows the zone's rules at that instant (daylight saving included,
//! from the IANA database compiled into `chrono-tz`): on the day clocks go forward a window
//! covering the skipped hour is an hour shorter, on the day they go back the repeated hour is
//! counted in both of its occurrences. A region without a zone (or unknown to the spec) is
//! on UTC.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{Offset, TimeZone, Timelike};
use serde::{Deserialize, Serialize};

/// The label of a time that falls in none of the declared windows.
pub const OFF_PEAK: &str = "off-peak";

const MINUTES_PER_DAY: u16 = 24 * 60;
/// Largest accepted fixed offset, seconds (UTC+14:00 is the easternmost zone in use).
const MAX_OFFSET_S: i32 = 14 * 3600;

/// A region's time zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    /// An IANA zone (`America/New_York`, `UTC`, …): offsets follow its rules, DST included.
    Iana(chrono_tz::Tz),
    /// A fixed offset from UTC, seconds east of Greenwich (`+08:00` is 28 800).
    Fixed {
        /// Seconds east of UTC, within ±14 h.
        offset_s: i32,
    },
}

impl Zone {
    /// UTC, as a fixed offset of zero.
    pub const UTC: Zone = Zone::Fixed { offset_s: 0 };

    /// Parses an IANA zone name (case-sensitive, as in the tz database: `Europe/Berlin`,
    /// `UTC`) or a fixed offset `±HH:MM` / `±HH` (at most ±14:00).
    ///
    /// # Errors
    /// A message quoting `text` and saying what is accepted.
    pub fn parse(text: &str) -> Result<Zone, String> {
        let t = text.trim();
        if t.starts_with('+') || t.starts_with('-') {
            return parse_offset(t).map(|offset_s| Zone::Fixed { offset_s });
        }
        chrono_tz::Tz::from_str(t).map(Zone::Iana).map_err(|_| {
            format!(
                "{text:?} is not an IANA time zone name (e.g. \"America/New_York\") or a UTC offset (e.g. \"+08:00\")"
            )
        })
    }

    /// The offset from UTC in force at `utc_unix_us` (UTC µs), seconds east of UTC.
    pub fn offset_s_at(&self, utc_unix_us: i64) -> i32 {
        match self {
            Zone::Fixed { offset_s } => *offset_s,
            Zone::Iana(tz) => {
                let secs = utc_unix_us.div_euclid(1_000_000);
                match chrono::DateTime::from_timestamp(secs, 0) {
                    Some(t) => tz
                        .offset_from_utc_datetime(&t.naive_utc())
                        .fix()
                        .local_minus_utc(),
                    None => 0,
                }
            }
        }
    }

    /// Local time of day at `utc_unix_us` (UTC µs), whole minutes since local midnight
    /// (0..1440).
    pub fn local_minute_of_day(&self, utc_unix_us: i64) -> u16 {
        let local_s = utc_unix_us
            .div_euclid(1_000_000)
            .saturating_add(i64::from(self.offset_s_at(utc_unix_us)));
        (local_s.rem_euclid(86_400) / 60) as u16
    }

    /// Local hour (0..=23) at `utc_unix_us` (UTC µs).
    pub fn local_hour(&self, utc_unix_us: i64) -> u8 {
        (self.local_minute_of_day(utc_unix_us) / 60) as u8
    }
}

impl fmt::Display for Zone {
    /// The canonical text: the IANA name, or `±HH:MM`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Iana(tz) => f.write_str(tz.name()),
            Zone::Fixed { offset_s } => {
                let sign = if *offset_s < 0 { '-' } else { '+' };
                let a = offset_s.unsigned_abs();
                write!(f, "{sign}{:02}:{:02}", a / 3600, a % 3600 / 60)
            }
        }
    }
}

fn parse_offset(t: &str) -> Result<i32, String> {
    let bad = || format!("{t:?} is not a UTC offset ±HH:MM within ±14:00 (e.g. \"+08:00\")");
    let (sign, rest) = t.split_at(1);
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None => (rest, "00"),
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(h, 2) || !digits(m, 2) {
        return Err(bad());
    }
    let (h, m): (i32, i32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    let secs = h * 3600 + m * 60;
    if m >= 60 || secs > MAX_OFFSET_S {
        return Err(bad());
    }
    Ok(if sign == "-" { -secs } else { secs })
}

/// A range of local time of day, `[start, end)` in minutes since local midnight. `start` is in
/// 0..1440, `end` in 1..=1440 (`24:00`) and differs from `start`; when `end < start` the range
/// wraps past midnight (`22:00-06:00`). Written and serialized as `HH:MM-HH:MM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LocalRange {
    /// First minute in the range, since local midnight.
    pub start_min: u16,
    /// First minute after the range, since local midnight (1440 = midnight at the end).
    pub end_min: u16,
}

impl LocalRange {
    /// Whether local minute of day `minute` (0..1440) is in the range.
    pub fn contains(&self, minute: u16) -> bool {
        if self.start_min < self.end_min {
            self.start_min <= minute && minute < self.end_min
        } else {
            minute >= self.start_min || minute < self.end_min
        }
    }

    /// Minutes of the day the range covers.
    pub fn minutes(&self) -> u16 {
        if self.start_min < self.end_min {
            self.end_min - self.start_min
        } else {
            MINUTES_PER_DAY - self.start_min + self.end_min
        }
    }
}

impl fmt::Display for LocalRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{}-{}", hm(self.start_min), hm(self.end_min))
    }
}

impl From<LocalRange> for String {
    fn from(r: LocalRange) -> String {
        r.to_string()
    }
}

impl TryFrom<String> for LocalRange {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        LocalRange::from_str(&s)
    }
}

impl FromStr for LocalRange {
    type Err = String;
    /// Parses `HH:MM-HH:MM` (surrounding spaces allowed).
    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let Some((a, b)) = t.split_once('-') else {
            return Err(format!("{t:?} is not a range HH:MM-HH:MM"));
        };
        let start_min = parse_hhmm(a.trim())?;
        let end_min = parse_hhmm(b.trim())?;
        if start_min == MINUTES_PER_DAY {
            return Err(format!("{t:?}: 24:00 can only end a range"));
        }
        let whole_day = start_min == 0 && end_min == MINUTES_PER_DAY;
        if start_min == end_min % MINUTES_PER_DAY && !whole_day {
            return Err(format!(
                "{t:?} is empty (start equals end); for the whole day write \"00:00-24:00\""
            ));
        }
        Ok(LocalRange { start_min, end_min })
    }
}

/// `HH:MM` (hour 0-23, or 24:00) → minutes since midnight.
fn parse_hhmm(t: &str) -> Result<u16, String> {
    let bad = || format!("{t:?} is not HH:MM");
    let (h, m) = t.split_once(':').ok_or_else(bad)?;
    let ok =
        |s: &str, lens: &[usize]| lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    if !ok(h, &[1, 2]) || !ok(m, &[2]) {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    match (h, m) {
        (24, 0) => Ok(MINUTES_PER_DAY),
        (0..=23, 0..=59) => Ok(h * 60 + m),
        _ => Err(bad()),
    }
}

/// Parses a window's ranges: `HH:MM-HH:MM` items separated by commas
/// (`"09:00-12:00,14:00-18:00"`).
///
/// # Errors
/// A message quoting the offending part: `"25:00" is not HH:MM`, `"09:00" is not a range
/// HH:MM-HH:MM`, an empty range (start equals end), or no range at all.
pub fn parse_ranges(text: &str) -> Result<Vec<LocalRange>, String> {
    if text.trim().is_empty() {
        return Err("name at least one range HH:MM-HH:MM".into());
    }
    text.split(',').map(LocalRange::from_str).collect()
}

/// A named window, as the plan carries it: its name and its local-time ranges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Label of the rows in the window (e.g. `peak`).
    pub name: String,
    /// Local-time ranges, in the order written.
    pub ranges: Vec<LocalRange>,
}

impl Window {
    /// Whether local minute of day `minute` is in one of the ranges.
    pub fn contains(&self, minute: u16) -> bool {
        self.ranges.iter().any(|r| r.contains(minute))
    }
}

/// The local-time settings of a campaign: its regions, the zone of each region that has one and
/// the named windows. A [`Plan`](crate::plan::Plan) has them (`regions`, `timezones`,
/// `windows`); [`WindowSpec::from_plan`] and a schedule's timing
/// ([`crate::schedule::Schedule::first_due_us`]) read them through this trait, so that neither
/// depends on the plan's other parts.
pub trait LocalTimeSettings {
    /// The regions, in declaration order (a schedule reads windows in the first one's zone).
    fn regions(&self) -> &[String];
    /// Region → zone text (an IANA name or `±HH:MM`, see [`Zone::parse`]), for the regions
    /// that have a zone.
    fn timezones(&self) -> &BTreeMap<String, String>;
    /// The declared windows, in declaration order.
    fn windows(&self) -> &[Window];
}

/// A window or zone the spec cannot use, naming it (`windows.peak`, `timezones.us-east`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct WindowError {
    /// Which entry.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Time zones per region and named windows: labels UTC instants with the window they fall in,
/// in each region's local time. See the module docs for the rules.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowSpec {
    zones: BTreeMap<String, Zone>,
    windows: Vec<Window>,
}

impl WindowSpec {
    /// A spec from zone texts per region (see [`Zone::parse`]) and windows in declaration
    /// order.
    ///
    /// # Errors
    /// [`WindowError`] for a zone that does not parse (key `timezones.REGION`).
    pub fn new(
        timezones: &BTreeMap<String, String>,
        windows: &[Window],
    ) -> Result<WindowSpec, WindowError> {
        let mut zones = BTreeMap::new();
        for (region, text) in timezones {
            let zone = Zone::parse(text).map_err(|message| WindowError {
                key: format!("timezones.{region}"),
                message,
            })?;
            zones.insert(region.clone(), zone);
        }
        Ok(WindowSpec {
            zones,
            windows: windows.to_vec(),
        })
    }

    /// The spec of a plan (its [`LocalTimeSettings::timezones`] and
    /// [`LocalTimeSettings::windows`]). A plan without either gives the empty spec (every label
    /// `""`, every region on UTC).
    ///
    /// # Errors
    /// As [`WindowSpec::new`]: only for a plan that did not come from a validated campaign.
    pub fn from_plan(plan: &impl LocalTimeSettings) -> Result<WindowSpec, WindowError> {
        WindowSpec::new(plan.timezones(), plan.windows())
    }

    /// Whether any window is declared (else every label is `""`).
    pub fn has_windows(&self) -> bool {
        !self.windows.is_empty()
    }

    /// The declared windows, in declaration order.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// The zone of each region that has one.
    pub fn zones(&self) -> &BTreeMap<String, Zone> {
        &self.zones
    }

    /// The zone of `region`: its declared one, else UTC.
    pub fn zone(&self, region: &str) -> Zone {
        self.zones.get(region).copied().unwrap_or(Zone::UTC)
    }

    /// Every label this spec can give, in order: the declared windows, then [`OFF_PEAK`].
    /// Empty without windows.
    pub fn labels(&self) -> Vec<String> {
        let mut out: Vec<String> = self.windows.iter().map(|w| w.name.clone()).collect();
        if !out.is_empty() {
            out.push(OFF_PEAK.to_string());
        }
        out
    }

    /// The window of UTC instant `utc_unix_us` (µs since the epoch) in `region`'s local time:
    /// the first declared window containing it, else [`OFF_PEAK`]; `""` when no window is
    /// declared.
    pub fn label(&self, region: &str, utc_unix_us: i64) -> String {
        self.label_str(region, utc_unix_us).to_string()
    }

    /// [`WindowSpec::label`] without allocating.
    pub fn label_str(&self, region: &str, utc_unix_us: i64) -> &str {
        if self.windows.is_empty() {
            return "";
        }
        let minute = self.zone(region).local_minute_of_day(utc_unix_us);
        self.windows
            .iter()
            .find(|w| w.contains(minute))
            .map_or(OFF_PEAK, |w| w.name.as_str())
    }

    /// Local hour (0..=23) of UTC instant `utc_unix_us` (µs) in `region`.
    pub fn local_hour(&self, region: &str, utc_unix_us: i64) -> u8 {
        self.zone(region).local_hour(utc_unix_us)
    }
}

/// `unix_s` (UTC seconds) as `YYYY-MM-DD HH:MM` UTC, or `YYYY-MM-DD` when `date_only`.
pub fn utc_label(unix_s: i64, date_only: bool) -> String {
    match chrono::DateTime::from_timestamp(unix_s, 0) {
        Some(t) if date_only => t.format("%Y-%m-%d").to_string(),
        Some(t) => format!("{} {:02}:{:02}", t.format("%Y-%m-%d"), t.hour(), t.minute()),
        None => unix_s.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Window `name` over `ranges` (`"09:00-12:00,14:00-18:00"`).
    pub(crate) fn window(name: &str, ranges: &str) -> Window {
        Window {
            name: name.into(),
            ranges: parse_ranges(ranges).unwrap(),
        }
    }

    /// UTC µs of a UTC date and time.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        chrono::Utc
            .with_ymd_and_hms(y, mo, d, h, mi, 0)
            .unwrap()
            .timestamp_micros()
    }

    fn spec(zones: &[(&str, &str)], windows: &[(&str, &str)]) -> WindowSpec {
        let zones = zones
            .iter()
            .map(|(r, z)| (r.to_string(), z.to_string()))
            .collect();
        let windows: Vec<Window> = windows
            .iter()
            .map(|(n, r)| Window {
                name: n.to_string(),
                ranges: parse_ranges(r).unwrap(),
            })
            .collect();
        WindowSpec::new(&zones, &windows).unwrap()
    }

    #[test]
    fn zones_parse_and_print_canonically() {
        assert_eq!(
            Zone::parse("+08:00").unwrap(),
            Zone::Fixed { offset_s: 28_800 }
        );
        assert_eq!(Zone::parse("-05:30").unwrap().to_string(), "-05:30");
        assert_eq!(Zone::parse("+05").unwrap().to_string(), "+05:00");
        assert_eq!(Zone::parse("+14:00").unwrap().to_string(), "+14:00");
        assert_eq!(
            Zone::parse(" America/New_York ").unwrap().to_string(),
            "America/New_York"
        );
        assert_eq!(Zone::parse("UTC").unwrap().to_string(), "UTC");
        for bad in [
            "+15:00",
            "+8:00",
            "+08:60",
            "+08:00:00",
            "08:00",
            "Mars/Olympus",
            "",
            "america/new_york",
        ] {
            assert!(Zone::parse(bad).is_err(), "{bad}");
        }
        assert!(
            Zone::parse("Mars/Olympus")
                .unwrap_err()
                .contains("\"Mars/Olympus\"")
        );
    }

    #[test]
    fn ranges_parse_with_errors_that_quote_the_part() {
        let r = parse_ranges("09:00-12:00, 14:00-18:00").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].start_min, r[0].end_min), (540, 720));
        assert_eq!(r[1].to_string(), "14:00-18:00");
        assert_eq!(parse_ranges("22:00-24:00").unwrap()[0].end_min, 1440);
        assert_eq!(parse_ranges("00:00-24:00").unwrap()[0].minutes(), 1440);
        assert_eq!(parse_ranges("9:30-10:00").unwrap()[0].start_min, 570);
        assert_eq!(parse_ranges("22:00-06:00").unwrap()[0].minutes(), 480);
        for (bad, says) in [
            ("25:00-26:00", "\"25:00\" is not HH:MM"),
            ("09:00-12:60", "\"12:60\" is not HH:MM"),
            ("09:00", "\"09:00\" is not a range"),
            ("09:00-12:00,", "\"\" is not a range"),
            ("9-12", "\"9\" is not HH:MM"),
            ("10:00-10:00", "start equals end"),
            ("24:00-02:00", "24:00 can only end a range"),
            ("", "at least one range"),
        ] {
            let e = parse_ranges(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn ranges_serialize_as_text() {
        let w = Window {
            name: "night".into(),
            ranges: parse_ranges("22:00-06:00").unwrap(),
        };
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(json, r#"{"name":"night","ranges":["22:00-06:00"]}"#);
        assert_eq!(serde_json::from_str::<Window>(&json).unwrap(), w);
        assert!(serde_json::from_str::<Window>(r#"{"name":"x","ranges":["7-8"]}"#).is_err());
    }

    #[test]
    fn labels_in_local_time_with_fixed_offsets() {
        let s = spec(
            &[("ap-southeast", "+08:00")],
            &[("peak", "09:00-12:00,14:00-18:00")],
        );
        // 09:00 +08:00 is 01:00 UTC.
        assert_eq!(s.label("ap-southeast", utc(2024, 6, 1, 0, 59)), OFF_PEAK);
        assert_eq!(s.label("ap-southeast", utc(2024, 6, 1, 1, 0)), "peak");
        assert_eq!(s.label("ap-southeast", utc(2024, 6, 1, 3, 59)), "peak");
        assert_eq!(s.label("ap-southeast", utc(2024, 6, 1, 4, 0)), OFF_PEAK);
        assert_eq!(s.label("ap-southeast", utc(2024, 6, 1, 6, 30)), "peak");
        assert_eq!(s.local_hour("ap-southeast", utc(2024, 6, 1, 20, 0)), 4);
        // A region without a zone is on UTC.
        assert_eq!(s.label("eu-west", utc(2024, 6, 1, 9, 0)), "peak");
        assert_eq!(s.local_hour("eu-west", utc(2024, 6, 1, 9, 0)), 9);
        // Sub-second instants belong to the minute they are in, also before the epoch.
        assert_eq!(s.label("eu-west", utc(2024, 6, 1, 9, 0) - 1), OFF_PEAK);
        assert_eq!(Zone::UTC.local_minute_of_day(-1), 1439);
    }

    #[test]
    fn windows_wrap_past_midnight() {
        let s = spec(&[("us-east", "-05:00")], &[("night", "22:00-06:00")]);
        // Local 22:00 is 03:00 UTC; local 06:00 is 11:00 UTC.
        assert_eq!(s.label("us-east", utc(2024, 1, 2, 2, 59)), OFF_PEAK);
        assert_eq!(s.label("us-east", utc(2024, 1, 2, 3, 0)), "night");
        assert_eq!(s.label("us-east", utc(2024, 1, 2, 5, 0)), "night"); // local midnight
        assert_eq!(s.label("us-east", utc(2024, 1, 2, 10, 59)), "night");
        assert_eq!(s.label("us-east", utc(2024, 1, 2, 11, 0)), OFF_PEAK);
    }

    #[test]
    fn overlapping_windows_first_declared_wins() {
        let s = spec(&[], &[("lunch", "12:00-13:00"), ("day", "08:00-18:00")]);
        assert_eq!(s.label("x", utc(2024, 1, 1, 12, 30)), "lunch");
        assert_eq!(s.label("x", utc(2024, 1, 1, 13, 0)), "day");
        let s = spec(&[], &[("day", "08:00-18:00"), ("lunch", "12:00-13:00")]);
        assert_eq!(s.label("x", utc(2024, 1, 1, 12, 30)), "day");
        assert_eq!(s.labels(), ["day", "lunch", OFF_PEAK]);
    }

    #[test]
    fn no_windows_means_empty_labels() {
        let s = spec(&[("us-east", "America/New_York")], &[]);
        assert_eq!(s.label("us-east", utc(2024, 1, 1, 12, 0)), "");
        assert!(s.labels().is_empty());
        assert_eq!(s.local_hour("us-east", utc(2024, 1, 1, 12, 0)), 7);
        assert_eq!(WindowSpec::default().label("any", 0), "");
    }

    #[test]
    fn dst_edges_follow_the_zone_rules() {
        let s = spec(
            &[
                ("us-east", "America/New_York"),
                ("eu-west", "Europe/London"),
            ],
            &[("early", "02:00-03:00"), ("peak", "09:00-12:00")],
        );
        // New York: EST (-5) until 2024-03-10 07:00 UTC, then EDT (-4).
        assert_eq!(s.local_hour("us-east", utc(2024, 3, 10, 6, 59)), 1);
        assert_eq!(s.local_hour("us-east", utc(2024, 3, 10, 7, 0)), 3);
        // The 02:00-03:00 local hour does not exist that day: no instant is "early".
        for m in 0..=120 {
            let t = utc(2024, 3, 10, 6, 0) + m * 60_000_000;
            assert_ne!(s.label("us-east", t), "early", "minute {m}");
        }
        // 09:00 local is 14:00 UTC in winter, 13:00 UTC in summer.
        assert_eq!(s.label("us-east", utc(2024, 3, 9, 14, 0)), "peak");
        assert_eq!(s.label("us-east", utc(2024, 3, 9, 13, 59)), OFF_PEAK);
        assert_eq!(s.label("us-east", utc(2024, 3, 11, 13, 0)), "peak");
        assert_eq!(s.label("us-east", utc(2024, 3, 11, 12, 59)), OFF_PEAK);
        assert_eq!(s.label("us-east", utc(2024, 3, 11, 15, 59)), "peak");
        assert_eq!(s.label("us-east", utc(2024, 3, 11, 16, 0)), OFF_PEAK);
        // Fall back, 2024-11-03: 01:00-02:00 local happens twice (05:00 and 06:00 UTC).
        assert_eq!(s.local_hour("us-east", utc(2024, 11, 3, 5, 30)), 1);
        assert_eq!(s.local_hour("us-east", utc(2024, 11, 3, 6, 30)), 1);
        assert_eq!(s.local_hour("us-east", utc(2024, 11, 3, 7, 30)), 2);
        assert_eq!(s.label("us-east", utc(2024, 11, 3, 7, 30)), "early");
        // London: BST from 2024-03-31 01:00 UTC.
        assert_eq!(s.label("eu-west", utc(2024, 3, 30, 9, 0)), "peak");
        assert_eq!(s.label("eu-west", utc(2024, 4, 1, 8, 0)), "peak");
        assert_eq!(s.label("eu-west", utc(2024, 4, 1, 11, 0)), OFF_PEAK);
        assert_eq!(
            s.zone("us-east").offset_s_at(utc(2024, 7, 1, 0, 0)),
            -4 * 3600
        );
        assert_eq!(
            s.zone("us-east").offset_s_at(utc(2024, 1, 1, 0, 0)),
            -5 * 3600
        );
    }

    #[test]
    fn bad_zones_name_the_region() {
        let zones = [("mars".to_string(), "Olympus/Mons".to_string())].into();
        let e = WindowSpec::new(&zones, &[]).unwrap_err();
        assert_eq!(e.key, "timezones.mars");
        assert!(e.to_string().contains("Olympus/Mons"), "{e}");
    }

    #[test]
    fn utc_labels() {
        assert_eq!(utc_label(1_710_000_000, false), "2024-03-09 16:00");
        assert_eq!(utc_label(1_710_000_000, true), "2024-03-09");
    }
}
