//! `[campaign.timezones]` and `[windows]`: each region's zone and the named windows of local
//! time, in declaration order (rules in [`crate::windows`]).

use std::collections::BTreeMap;

use super::error::{CampaignError, invalid};
use super::file::CampaignFile;
use super::names::check_name;
use crate::windows::{self, OFF_PEAK, Window, Zone};

/// `[campaign.timezones]` and `[windows]`: canonical zone texts per region, and the windows in
/// declaration order.
pub(super) fn validate_windows(
    file: &CampaignFile,
) -> Result<(BTreeMap<String, String>, Vec<Window>), CampaignError> {
    let regions = &file.campaign.regions;
    let mut timezones = BTreeMap::new();
    for (region, text) in &file.campaign.timezones {
        let key = format!("campaign.timezones.{region}");
        if !regions.contains(region) {
            return Err(invalid(
                key,
                format!("unknown region (campaign.regions: {})", regions.join(", ")),
            ));
        }
        let zone = Zone::parse(text).map_err(|m| invalid(&key, m))?;
        timezones.insert(region.clone(), zone.to_string());
    }
    let mut windows = Vec::new();
    for (name, text) in &file.windows.0 {
        let key = format!("windows.{name}");
        check_name(&key, name)?;
        if name == OFF_PEAK {
            return Err(invalid(
                key,
                format!(
                    "{OFF_PEAK:?} is the label of times in no window; name the window otherwise"
                ),
            ));
        }
        let ranges = windows::parse_ranges(text).map_err(|m| invalid(&key, m))?;
        windows.push(Window {
            name: name.clone(),
            ranges,
        });
    }
    if !windows.is_empty()
        && let Some(region) = regions.iter().find(|r| !timezones.contains_key(*r))
    {
        return Err(invalid(
            format!("campaign.timezones.{region}"),
            "missing: [windows] are in local time, so every region needs a zone (an IANA name such as \"Europe/Berlin\", \"UTC\", or an offset such as \"+08:00\")",
        ));
    }
    Ok((timezones, windows))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::campaign::load_toml_str;
    use crate::campaign::test_support::{GOOD, err_of};

    const WINDOWS: &str = r#"
[campaign.timezones]
us-east = "America/New_York"
eu-west = "+01:00"

[windows]
peak = "09:00-12:00, 14:00-18:00"
night = "22:00-06:00"
"#;

    #[test]
    fn zones_and_windows_become_part_of_the_plan() {
        let plan = load_toml_str(&format!("{GOOD}{WINDOWS}"), Path::new(".")).unwrap();
        assert_eq!(plan.timezones["us-east"], "America/New_York");
        assert_eq!(plan.timezones["eu-west"], "+01:00");
        // Declaration order, not alphabetical: "peak" wins where windows overlap.
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["peak", "night"]);
        assert_eq!(plan.windows[0].ranges[1].to_string(), "14:00-18:00");
        let spec = crate::windows::WindowSpec::from_plan(&plan).unwrap();
        assert_eq!(spec.labels(), ["peak", "night", "off-peak"]);
        // 2024-06-03 14:30 UTC is 10:30 in New York (EDT) and 15:30 at +01:00.
        assert_eq!(spec.label("us-east", 1_717_425_000_000_000), "peak");
        assert_eq!(spec.label("eu-west", 1_717_425_000_000_000), "peak");
        // Zones alone are fine; plans without either keep the old JSON.
        let zones_only = GOOD.replace(
            "[rounds]",
            "[campaign.timezones]\nus-east = \"UTC\"\n\n[rounds]",
        );
        let plan = load_toml_str(&zones_only, Path::new(".")).unwrap();
        assert!(plan.windows.is_empty() && plan.timezones.len() == 1);
        let plain = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert!(!plain.to_json().contains("windows"));
    }

    #[test]
    fn window_and_zone_errors_name_the_key() {
        let with = |w: &str| {
            format!(
                "{GOOD}{}",
                WINDOWS.replace("peak = \"09:00-12:00, 14:00-18:00\"", w)
            )
        };
        let cases = [
            (
                with("peak = \"25:00-26:00\""),
                "windows.peak: \"25:00\" is not HH:MM",
            ),
            (
                with("peak = \"09:00\""),
                "windows.peak: \"09:00\" is not a range",
            ),
            (with("peak = \"10:00-10:00\""), "windows.peak: "),
            (with("peak = \"\""), "windows.peak: "),
            (with("\"off-peak\" = \"10:00-11:00\""), "windows.off-peak: "),
            (with("\"bad name\" = \"10:00-11:00\""), "windows.bad name: "),
            (with("peak = 9"), "windows.peak"),
            (
                format!(
                    "{GOOD}{}",
                    WINDOWS.replace(
                        "eu-west = \"+01:00\"",
                        "eu-west = \"+01:00\"\nmars = \"UTC\""
                    )
                ),
                "campaign.timezones.mars: unknown region",
            ),
            (
                format!(
                    "{GOOD}{}",
                    WINDOWS.replace("America/New_York", "America/New_Yrok")
                ),
                "campaign.timezones.us-east: \"America/New_Yrok\" is not an IANA time zone name",
            ),
            (
                format!("{GOOD}{}", WINDOWS.replace("\"+01:00\"", "\"+25:00\"")),
                "campaign.timezones.eu-west: \"+25:00\" is not a UTC offset",
            ),
            (
                format!("{GOOD}{}", WINDOWS.replace("eu-west = \"+01:00\"\n", "")),
                "campaign.timezones.eu-west: missing",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }
}
