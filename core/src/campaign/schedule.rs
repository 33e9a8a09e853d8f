//! `[schedule]`: the campaign repeated as a series of runs (see [`crate::schedule`]).

use std::collections::BTreeMap;

use super::error::{CampaignError, invalid};
use super::file::CampaignFile;
use crate::windows::Window;

/// `[schedule]`, checked against the campaign's regions, zones and windows.
pub(super) fn validate_schedule(
    file: &CampaignFile,
    timezones: &BTreeMap<String, String>,
    windows: &[Window],
) -> Result<Option<crate::schedule::Schedule>, CampaignError> {
    file.schedule
        .as_ref()
        .map(|s| crate::schedule::validate(s, &file.campaign.regions, timezones, windows))
        .transpose()
        .map_err(|(key, message)| invalid(key, message))
}
