//! `[compat]` and `[quality]`: what `latmesh compat` runs, the compatibility checks of
//! [`crate::compat`] and the quality prompt set of [`crate::quality`], checked against the
//! campaign's providers and the shipped set. Agents ignore both.

use super::error::{CampaignError, invalid};
use super::file::{CompatSection, QualitySection};
use super::scenario::check_seconds;
use crate::compat::{
    CompatCheck, CompatSpec, DEFAULT_COMPAT_SAMPLES, DEFAULT_COMPAT_TIMEOUT_S, MAX_COMPAT_SAMPLES,
};
use crate::plan::ProviderSpec;
use crate::prompts::wildcard_match;
use crate::quality::{
    DEFAULT_MAX_TOKENS, DEFAULT_QUALITY_TIMEOUT_S, DEFAULT_SAMPLES, MAX_QUALITY_MAX_TOKENS,
    MAX_SAMPLES, QualitySpec, prompt_set,
};

/// `[compat]` into a [`CompatSpec`]; `Ok(None)` without the section.
///
/// # Errors
/// The first problem, naming `compat.KEY`: an unknown check (the message lists the valid
/// ones), an empty list, a provider that is not the campaign's or is listed twice, a
/// `timeout_s` that is not in (0, 86400], `samples` not in 1..=[`MAX_COMPAT_SAMPLES`].
pub(super) fn validate_compat(
    section: Option<&CompatSection>,
    providers: &[ProviderSpec],
) -> Result<Option<CompatSpec>, CampaignError> {
    let Some(s) = section else {
        return Ok(None);
    };
    let checks = match &s.checks {
        None => CompatCheck::ALL.to_vec(),
        Some(names) => {
            if names.is_empty() {
                return Err(invalid(
                    "compat.checks",
                    format!(
                        "name at least one check ({}), or leave the key out (every check)",
                        check_names()
                    ),
                ));
            }
            let mut checks = Vec::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                let check = CompatCheck::parse(name).ok_or_else(|| {
                    invalid(
                        format!("compat.checks[{i}]"),
                        format!(
                            "{name:?} is not a check{} ({})",
                            crate::suggest::hint(name, CompatCheck::ALL.iter().map(|c| c.as_str())),
                            check_names()
                        ),
                    )
                })?;
                checks.push(check);
            }
            // A check named twice runs once, in report order.
            checks.sort();
            checks.dedup();
            checks
        }
    };
    let samples = s.samples.unwrap_or(DEFAULT_COMPAT_SAMPLES);
    if !(1..=MAX_COMPAT_SAMPLES).contains(&samples) {
        return Err(invalid(
            "compat.samples",
            format!(
                "{samples} is not in 1..={MAX_COMPAT_SAMPLES} (samples of each check whose verdict can flip: {})",
                CompatCheck::ALL
                    .iter()
                    .filter(|c| c.can_flip())
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(Some(CompatSpec {
        checks,
        samples,
        providers: check_providers("compat", s.providers.as_deref(), providers)?,
        timeout_s: check_seconds(
            "compat.timeout_s".into(),
            s.timeout_s,
            DEFAULT_COMPAT_TIMEOUT_S,
        )?,
    }))
}

/// `[quality]` into a [`QualitySpec`]; `Ok(None)` without the section.
///
/// # Errors
/// The first problem, naming `quality.KEY`: `samples` not in 1..=[`MAX_SAMPLES`],
/// `max_tokens` not in 1..=[`MAX_QUALITY_MAX_TOKENS`], a prompt id or pattern that matches no
/// prompt of the set, an empty list, a provider that is not the campaign's or is listed twice,
/// a `timeout_s` that is not in (0, 86400].
pub(super) fn validate_quality(
    section: Option<&QualitySection>,
    providers: &[ProviderSpec],
) -> Result<Option<QualitySpec>, CampaignError> {
    let Some(s) = section else {
        return Ok(None);
    };
    let samples = s.samples.unwrap_or(DEFAULT_SAMPLES);
    if !(1..=MAX_SAMPLES).contains(&samples) {
        return Err(invalid(
            "quality.samples",
            format!("{samples} is not in 1..={MAX_SAMPLES}"),
        ));
    }
    let max_tokens = s.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if !(1..=MAX_QUALITY_MAX_TOKENS).contains(&max_tokens) {
        return Err(invalid(
            "quality.max_tokens",
            format!("{max_tokens} is not in 1..={MAX_QUALITY_MAX_TOKENS}"),
        ));
    }
    Ok(Some(QualitySpec {
        samples,
        prompt_ids: check_prompt_ids(s.prompt_ids.as_deref())?,
        max_tokens,
        providers: check_providers("quality", s.providers.as_deref(), providers)?,
        timeout_s: check_seconds(
            "quality.timeout_s".into(),
            s.timeout_s,
            DEFAULT_QUALITY_TIMEOUT_S,
        )?,
    }))
}

/// Every check name, comma-separated, in report order.
fn check_names() -> String {
    let names: Vec<&str> = CompatCheck::ALL.iter().map(|c| c.as_str()).collect();
    names.join(", ")
}

/// `SECTION.providers`: each a provider of the campaign, once; empty (every provider) when
/// the key is absent.
fn check_providers(
    section: &str,
    list: Option<&[String]>,
    providers: &[ProviderSpec],
) -> Result<Vec<String>, CampaignError> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    let key = format!("{section}.providers");
    if list.is_empty() {
        return Err(invalid(
            key,
            "name at least one provider, or leave the key out (every provider)",
        ));
    }
    for (i, name) in list.iter().enumerate() {
        if !providers.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
            return Err(invalid(
                format!("{key}[{i}]"),
                format!(
                    "{name:?} is not a provider of this campaign ({})",
                    names.join(", ")
                ),
            ));
        }
        if list[..i].contains(name) {
            return Err(invalid(
                format!("{key}[{i}]"),
                format!("{name:?} is listed twice"),
            ));
        }
    }
    Ok(list.to_vec())
}

/// `quality.prompt_ids`: ids or `*` patterns of the shipped set, each matching at least one
/// prompt; resolved to ids in set order, each once. Absent: the whole set.
fn check_prompt_ids(patterns: Option<&[String]>) -> Result<Vec<String>, CampaignError> {
    let set = prompt_set();
    let Some(patterns) = patterns else {
        return Ok(set.prompts.iter().map(|p| p.id.clone()).collect());
    };
    if patterns.is_empty() {
        return Err(invalid(
            "quality.prompt_ids",
            "name at least one prompt id or pattern, or leave the key out (the whole set)",
        ));
    }
    for (i, pattern) in patterns.iter().enumerate() {
        if !set.prompts.iter().any(|p| wildcard_match(pattern, &p.id)) {
            // The set's id families: `arith-*`, `fact-*`, …
            let mut families: Vec<String> = Vec::new();
            for p in &set.prompts {
                let family = format!("{}-*", p.id.rsplit_once('-').map_or(&*p.id, |f| f.0));
                if !families.contains(&family) {
                    families.push(family);
                }
            }
            return Err(invalid(
                format!("quality.prompt_ids[{i}]"),
                format!(
                    "{pattern:?} matches no prompt of {} ({})",
                    set.set,
                    families.join(", ")
                ),
            ));
        }
    }
    Ok(set
        .prompts
        .iter()
        .filter(|p| patterns.iter().any(|pat| wildcard_match(pat, &p.id)))
        .map(|p| p.id.clone())
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::campaign::test_support::{GOOD, err_of};
    use crate::campaign::{load_file, load_toml_str};
    use crate::compat::{CompatCheck, CompatSpec};
    use crate::quality::{QualitySpec, prompt_set};

    /// [`GOOD`] with a second provider `b` and `extra` appended.
    fn with(extra: &str) -> String {
        format!(
            "{GOOD}\n[[providers]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n\n{extra}"
        )
    }

    #[test]
    fn empty_sections_take_the_defaults() {
        let plan = load_toml_str(&with("[compat]\n[quality]\n"), Path::new(".")).unwrap();
        let c = plan.compat.as_ref().unwrap();
        assert_eq!(c, &CompatSpec::default());
        assert_eq!(c.checks, CompatCheck::ALL.to_vec());
        assert!(c.providers.is_empty());
        assert_eq!(c.timeout_s, 30.0);
        let q = plan.quality.as_ref().unwrap();
        assert_eq!(q, &QualitySpec::default());
        assert_eq!((q.samples, q.max_tokens, q.timeout_s), (3, 512, 60.0));
        assert_eq!(q.prompt_ids.len(), prompt_set().prompts.len());
        assert_eq!(q.prompt_ids[0], "arith-01");
        // Without the sections: None, and the plan JSON does not name them (hashes hold).
        let plan = load_toml_str(&with(""), Path::new(".")).unwrap();
        assert_eq!((plan.compat, plan.quality), (None, None));
        let json = load_toml_str(GOOD, Path::new(".")).unwrap().to_json();
        assert!(
            !json.contains("compat") && !json.contains("quality"),
            "{json}"
        );
    }

    #[test]
    fn sections_with_every_key_become_part_of_the_plan() {
        let plan = load_toml_str(
            &with(
                "[compat]\nchecks = [\"wrong_key\", \"stream\", \"json_mode\", \"stream\"]\nproviders = [\"b\"]\ntimeout_s = 12.5\nsamples = 5\n\n\
                 [quality]\nsamples = 20\nprompt_ids = [\"code-*\", \"arith-02\", \"arith-0*\"]\nmax_tokens = 32768\nproviders = [\"b\", \"a\"]\ntimeout_s = 5\n",
            ),
            Path::new("."),
        )
        .unwrap();
        let c = plan.compat.as_ref().unwrap();
        // Deduplicated, in report order.
        assert_eq!(
            c.checks,
            vec![
                CompatCheck::Stream,
                CompatCheck::JsonMode,
                CompatCheck::WrongKey
            ]
        );
        assert_eq!((c.providers.clone(), c.timeout_s), (vec!["b".into()], 12.5));
        assert_eq!(c.samples, 5);
        let q = plan.quality.as_ref().unwrap();
        assert_eq!((q.samples, q.max_tokens, q.timeout_s), (20, 32768, 5.0));
        assert_eq!(q.providers, vec!["b", "a"]);
        // Resolved in set order, each once.
        let want: Vec<String> = (1..=8)
            .map(|i| format!("arith-{i:02}"))
            .chain((1..=8).map(|i| format!("code-{i:02}")))
            .collect();
        assert_eq!(q.prompt_ids, want);
        // Both travel in the plan JSON.
        let back: crate::plan::Plan = serde_json::from_str(&plan.to_json()).unwrap();
        assert_eq!((back.compat, back.quality), (plan.compat, plan.quality));
    }

    #[test]
    fn errors_name_the_section_and_key() {
        for (extra, want) in [
            (
                "[compat]\nchecks = [\"stream\", \"streaming\"]\n",
                "compat.checks[1]: \"streaming\" is not a check (did you mean \"stream\"?) (stream, non_stream, stream_usage, output_cap, stop, json_mode, tool_call, reasoning_field, reasoning_history, model_name, system_fingerprint, prompt_cache, wrong_key)",
            ),
            (
                "[compat]\nchecks = []\n",
                "compat.checks: name at least one check (stream, ",
            ),
            (
                "[compat]\nproviders = [\"a\", \"nope\"]\n",
                "compat.providers[1]: \"nope\" is not a provider of this campaign (a, b)",
            ),
            (
                "[compat]\nproviders = [\"a\", \"a\"]\n",
                "compat.providers[1]: \"a\" is listed twice",
            ),
            (
                "[compat]\nproviders = []\n",
                "compat.providers: name at least one provider, or leave the key out",
            ),
            (
                "[compat]\nsamples = 0\n",
                "compat.samples: 0 is not in 1..=10 (samples of each check whose verdict can flip: output_cap, stop, json_mode, tool_call)",
            ),
            (
                "[compat]\nsamples = 11\n",
                "compat.samples: 11 is not in 1..=10",
            ),
            (
                "[compat]\ntimeout_s = 0\n",
                "compat.timeout_s: 0 is not a duration in seconds in (0, 86400]",
            ),
            (
                "[compat]\ntimeout_s = nan\n",
                "compat.timeout_s: NaN is not a duration in seconds",
            ),
            (
                "[compat]\ntimeout_s = inf\n",
                "compat.timeout_s: inf is not a duration in seconds",
            ),
            (
                "[compat]\nchecks_ = [\"stream\"]\n",
                "compat.checks_: unknown key \"checks_\" (did you mean \"checks\"?",
            ),
            (
                "[compat]\nchecks = \"stream\"\n",
                "compat.checks: invalid type",
            ),
            (
                "[quality]\nsamples = 0\n",
                "quality.samples: 0 is not in 1..=20",
            ),
            (
                "[quality]\nsamples = 21\n",
                "quality.samples: 21 is not in 1..=20",
            ),
            (
                "[quality]\nsamples = -1\n",
                "quality.samples: invalid value",
            ),
            (
                "[quality]\nmax_tokens = 0\n",
                "quality.max_tokens: 0 is not in 1..=32768",
            ),
            (
                "[quality]\nmax_tokens = 32769\n",
                "quality.max_tokens: 32769 is not in 1..=32768",
            ),
            (
                "[quality]\nprompt_ids = [\"arith-*\", \"math-*\"]\n",
                "quality.prompt_ids[1]: \"math-*\" matches no prompt of quality-v1 (arith-*, fact-*, extract-*, code-*)",
            ),
            (
                "[quality]\nprompt_ids = [\"arith-09\"]\n",
                "quality.prompt_ids[0]: \"arith-09\" matches no prompt",
            ),
            (
                "[quality]\nprompt_ids = []\n",
                "quality.prompt_ids: name at least one prompt id or pattern",
            ),
            (
                "[quality]\nproviders = [\"c\"]\n",
                "quality.providers[0]: \"c\" is not a provider of this campaign (a, b)",
            ),
            (
                "[quality]\ntimeout_s = -3\n",
                "quality.timeout_s: -3 is not a duration in seconds in (0, 86400]",
            ),
            (
                "[quality]\ntemperature = 0\n",
                "quality.temperature: unknown key \"temperature\"",
            ),
        ] {
            let e = err_of(&with(extra));
            assert!(e.contains(want), "{extra:?}: {want:?} not in {e:?}");
        }
    }

    #[test]
    fn yaml_files_take_the_same_keys() {
        let yaml = r#"
campaign: {name: t, regions: [us-east]}
rounds: {count: 1, interval_s: 1, gap_ms: 10}
scenarios:
  - {name: chat, prompt_ids: ["code-*"], max_tokens: 16}
providers:
  - {name: a, base_url: "http://127.0.0.1:9/v1", model_id: m}
  - {name: b, base_url: "http://127.0.0.1:9/v1", model_id: m}
compat:
  checks: [json_mode, stream]
  providers: [a]
quality:
  samples: 5
  prompt_ids: ["fact-*"]
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        let c = plan.compat.unwrap();
        assert_eq!(c.checks, vec![CompatCheck::Stream, CompatCheck::JsonMode]);
        assert_eq!((c.providers, c.timeout_s), (vec!["a".to_string()], 30.0));
        let q = plan.quality.unwrap();
        assert_eq!((q.samples, q.prompt_ids.len(), q.max_tokens), (5, 8, 512));
        assert!(q.prompt_ids.iter().all(|id| id.starts_with("fact-")));
        // A section with nothing under it (YAML null) is there, with the defaults.
        let bare = format!(
            "{}compat:\nquality:\n",
            &yaml[..yaml.find("compat:").unwrap()]
        );
        std::fs::write(&file, bare).unwrap();
        let plan = load_file(&file).unwrap();
        assert_eq!(plan.compat, Some(CompatSpec::default()));
        assert_eq!(plan.quality, Some(QualitySpec::default()));
        // Errors name the file, the section and the key.
        std::fs::write(&file, yaml.replace("json_mode", "jsonmode")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(
            e.contains("c.yaml: compat.checks[0]: \"jsonmode\" is not a check"),
            "{e}"
        );
        std::fs::write(&file, yaml.replace("samples: 5", "sample: 5")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(
            e.contains("quality.sample: unknown key \"sample\" (did you mean \"samples\"?"),
            "{e}"
        );
    }
}
