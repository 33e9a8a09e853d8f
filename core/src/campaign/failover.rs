//! `failover = { chain, attempts, on }` of a scenario: client requests through a primary
//! provider and its backups (see [`crate::plan::FailoverSpec`]).

use super::error::{CampaignError, invalid};
use super::file::{ProviderSection, ScenarioSection};
use crate::load::LoadModel;
use crate::plan::FailoverSpec;
use crate::record::Outcome;

/// Most attempts per provider of a failover chain.
const MAX_FAILOVER_ATTEMPTS: u32 = 5;

/// `scenarios[i].failover` into a [`FailoverSpec`].
pub(super) fn validate_failover(
    i: usize,
    s: &ScenarioSection,
    providers: &[ProviderSection],
    load: &LoadModel,
) -> Result<Option<FailoverSpec>, CampaignError> {
    let Some(f) = &s.failover else {
        return Ok(None);
    };
    let key = |field: &str| format!("scenarios[{i}].failover.{field}");
    if !load.is_rounds() {
        return Err(invalid(
            format!("scenarios[{i}].failover"),
            "failover is measured in rounds: remove `load` (or use load = \"rounds\")",
        ));
    }
    if s.retry.is_some() {
        return Err(invalid(
            format!("scenarios[{i}].retry"),
            "a failover scenario retries through failover.attempts: remove `retry`",
        ));
    }
    if s.turns > 1 {
        return Err(invalid(
            format!("scenarios[{i}].turns"),
            "failover scenarios are single-turn",
        ));
    }
    if f.chain.len() < 2 {
        return Err(invalid(
            key("chain"),
            "name the primary and at least one backup (provider names)",
        ));
    }
    let mut chain = Vec::new();
    for (j, name) in f.chain.iter().enumerate() {
        let Some(p) = providers.iter().position(|p| &p.name == name) else {
            return Err(invalid(
                key(&format!("chain[{j}]")),
                format!(
                    "{name:?} is not a provider of this campaign{}",
                    crate::suggest::hint(name, providers.iter().map(|p| p.name.as_str()))
                ),
            ));
        };
        if chain.contains(&p) {
            return Err(invalid(
                key(&format!("chain[{j}]")),
                format!("{name:?} is listed twice"),
            ));
        }
        chain.push(p);
    }
    let attempts = f.attempts.unwrap_or(2);
    if !(1..=MAX_FAILOVER_ATTEMPTS).contains(&attempts) {
        return Err(invalid(
            key("attempts"),
            format!("{attempts} is not in 1..={MAX_FAILOVER_ATTEMPTS}"),
        ));
    }
    let on = match &f.on {
        None => FailoverSpec::default_on(),
        Some(names) => {
            let mut on = Vec::new();
            for (j, name) in names.iter().enumerate() {
                match Outcome::parse(name) {
                    Some(Outcome::Ok) => {
                        return Err(invalid(key(&format!("on[{j}]")), "\"ok\" never fails over"));
                    }
                    Some(o) if !on.contains(&o) => on.push(o),
                    Some(_) => {
                        return Err(invalid(
                            key(&format!("on[{j}]")),
                            format!("{name:?} is listed twice"),
                        ));
                    }
                    None => {
                        return Err(invalid(
                            key(&format!("on[{j}]")),
                            format!("{name:?} is not an outcome"),
                        ));
                    }
                }
            }
            on
        }
    };
    Ok(Some(FailoverSpec {
        chain,
        attempts,
        on,
    }))
}
