//! Names in a campaign file (campaign, regions, providers, scenarios, windows): what a valid
//! name is, and that names of one table are unique.

use super::error::{CampaignError, invalid};

/// Checks a campaign, region, provider or scenario name: 1-64 of `A-Z a-z 0-9 - _ .`.
///
/// # Errors
/// A message saying what a valid name is, quoting `value`.
pub fn check_name_text(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a valid name (1-64 of A-Z a-z 0-9 - _ .)"
        ))
    }
}

/// [`check_name_text`] of `value`, as an error naming `key`.
pub(super) fn check_name(key: &str, value: &str) -> Result<(), CampaignError> {
    check_name_text(value).map_err(|m| invalid(key, m))
}

/// Each name of `section` once; else an error naming the second `section[i].name`.
pub(super) fn check_unique<'a>(
    section: &str,
    names: impl Iterator<Item = &'a str>,
) -> Result<(), CampaignError> {
    let mut seen: Vec<&str> = Vec::new();
    for (i, n) in names.enumerate() {
        if seen.contains(&n) {
            return Err(invalid(
                format!("{section}[{i}].name"),
                format!("{n:?} is used twice"),
            ));
        }
        seen.push(n);
    }
    Ok(())
}
