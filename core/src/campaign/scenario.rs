//! `[[scenarios]]`: sampling parameters, prompts, timeouts; the scenario's client policy,
//! load model and failover chain are checked by their own modules.

use super::client_policy::validate_policy;
use super::error::{CampaignError, invalid};
use super::failover::validate_failover;
use super::file::{ProviderSection, ScenarioSection};
use super::names::{check_name, check_name_text};
use super::workload::Workload;
use crate::load::LoadModel;
use crate::plan::{PlanPrompt, ScenarioSpec, Timeouts};
use crate::prompts::{PromptSet, builtin_follow_ups, guess_lang};
use crate::synth::{SynthSpec, tier_label};

/// A duration in seconds of `key`: finite, in (0, 86400]; `default` when absent.
pub(super) fn check_seconds(
    key: String,
    v: Option<f64>,
    default: f64,
) -> Result<f64, CampaignError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(s),
        Some(s) => Err(invalid(
            key,
            format!("{s} is not a duration in seconds in (0, 86400]"),
        )),
    }
}

/// `scenarios[i]` into its [`ScenarioSpec`]s: its sampling parameters, prompts (from
/// `prompt_set`, or generated: one spec per `input_tokens` tier, named `{name}.{tier}`),
/// timeouts, client policy, `load` (validated before, by
/// [`super::load_model::validate_load`]), workload keys (validated before, by
/// [`super::workload::validate_workload`]) and failover chain (names of `providers`).
pub(super) fn validate_scenario(
    i: usize,
    s: &ScenarioSection,
    load: &LoadModel,
    workload: &Workload,
    prompt_set: &PromptSet,
    providers: &[ProviderSection],
) -> Result<Vec<ScenarioSpec>, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    check_name(&key("name"), &s.name)?;
    if let Some(t) = s.temperature
        && !(0.0..=2.0).contains(&t)
    {
        return Err(invalid(key("temperature"), format!("{t} is not in [0, 2]")));
    }
    if let Some(t) = s.top_p
        && !(t > 0.0 && t <= 1.0)
    {
        return Err(invalid(key("top_p"), format!("{t} is not in (0, 1]")));
    }
    let prompt_ids = s.prompt_ids.as_deref().unwrap_or_default();
    if s.prompt_ids.as_ref().is_some_and(Vec::is_empty) {
        return Err(invalid(
            key("prompt_ids"),
            "name at least one prompt id or pattern",
        ));
    }
    let (policy, follow_ups) = validate_policy(i, s)?;
    crate::shaping::check_extra_body(&key("extra_body"), &s.extra_body)
        .map_err(|e| invalid(e.key, e.message))?;
    let follow_ups_for = |p: &crate::prompts::Prompt| -> Vec<String> {
        let need = (policy.turns - 1) as usize;
        if need == 0 {
            return Vec::new();
        }
        if let Some(list) = &follow_ups {
            return list.clone();
        }
        let lang = if p.lang.is_empty() {
            guess_lang(&p.messages)
        } else {
            p.lang.as_str()
        };
        builtin_follow_ups(lang)[..need]
            .iter()
            .map(|f| (*f).to_string())
            .collect()
    };
    let mut prompts: Vec<PlanPrompt> = Vec::new();
    for (j, pattern) in prompt_ids.iter().enumerate() {
        let found = prompt_set.select(pattern);
        if found.is_empty() {
            return Err(invalid(
                format!("scenarios[{i}].prompt_ids[{j}]"),
                format!("{pattern:?} matches no prompt in {}", prompt_set.name),
            ));
        }
        for p in found {
            if !prompts.iter().any(|q| q.id == p.id) {
                prompts.push(PlanPrompt {
                    id: p.id.clone(),
                    messages: p.messages.clone(),
                    follow_ups: follow_ups_for(p),
                });
            }
        }
    }
    // Defaults never exceed a total the user set (timeout_total_s = 30 alone is fine).
    let d = Timeouts::default();
    let total_s = check_seconds(key("timeout_total_s"), s.timeout_total_s, d.total_s)?;
    let timeouts = Timeouts {
        connect_s: check_seconds(
            key("timeout_connect_s"),
            s.timeout_connect_s,
            d.connect_s.min(total_s),
        )?,
        ttft_s: check_seconds(
            key("timeout_ttft_s"),
            s.timeout_ttft_s,
            d.ttft_s.min(total_s),
        )?,
        idle_s: check_seconds(
            key("timeout_idle_s"),
            s.timeout_idle_s,
            d.idle_s.min(total_s),
        )?,
        total_s,
    };
    for (field, v) in [
        ("timeout_connect_s", timeouts.connect_s),
        ("timeout_ttft_s", timeouts.ttft_s),
        ("timeout_idle_s", timeouts.idle_s),
    ] {
        if v > timeouts.total_s {
            return Err(invalid(
                key(field),
                format!(
                    "{v} s is longer than timeout_total_s ({} s), which would always fire first",
                    timeouts.total_s
                ),
            ));
        }
    }
    let spec = ScenarioSpec {
        name: s.name.clone(),
        stream: s.stream,
        max_tokens: workload.max_tokens,
        temperature: s.temperature,
        top_p: s.top_p,
        timeouts,
        prompts,
        policy,
        load: load.clone(),
        failover: validate_failover(i, s, providers, load)?,
        extra_body: s.extra_body.clone(),
        synth: None,
        output_tokens: workload.output_tokens,
        warmup: workload.warmup,
        slo: workload.slo.clone(),
    };
    if workload.tiers.is_empty() {
        return Ok(vec![spec]);
    }
    workload
        .tiers
        .iter()
        .map(|&input_tokens| {
            let label = tier_label(input_tokens);
            let name = format!("{}.{label}", s.name);
            if check_name_text(&name).is_err() {
                return Err(invalid(
                    key("input_tokens"),
                    format!(
                        "tier {label} makes the scenario name {name:?}, {} characters: names are at most 64; shorten the scenario's name",
                        name.len()
                    ),
                ));
            }
            Ok(ScenarioSpec {
                name,
                prompts: vec![PlanPrompt {
                    id: format!("gen-{label}"),
                    messages: Vec::new(),
                    follow_ups: Vec::new(),
                }],
                synth: Some(SynthSpec {
                    group: s.name.clone(),
                    input_tokens,
                    shared_prefix_tokens: workload.shared_prefix_tokens,
                    reuse_text: workload.reuse_text,
                }),
                ..spec.clone()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::campaign::load_toml_str;
    use crate::campaign::test_support::GOOD;

    #[test]
    fn a_short_total_timeout_alone_caps_the_defaults() {
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 32\ntimeout_total_s = 30"),
            Path::new("."),
        )
        .unwrap();
        let t = &plan.scenarios[0].timeouts;
        assert_eq!(
            (t.total_s, t.ttft_s, t.idle_s, t.connect_s),
            (30.0, 30.0, 30.0, 10.0)
        );
    }
}
