//! `[selection]`: the weights and user scores of the provider selection matrix, checked
//! against the campaign's providers and what `[compat]`/`[quality]` measure (see
//! [`crate::selection`] for what they mean).

use std::collections::BTreeMap;

use super::file::SelectionSection;
use crate::compat::{CompatCheck, CompatSpec};
use crate::metrics::Metric;
use crate::plan::ProviderSpec;
use crate::quality::QualitySpec;
use crate::selection::{
    DEFAULT_LATENCY_PERCENTILE, DEFAULT_MAX_FAILED_PCT, DEFAULT_SCORE_SCALE, ProviderScores,
    Selection, SelectionGates, SelectionWeights,
};

/// Validates `[selection]` against the campaign's providers: `Ok(None)` without the section.
/// A weighted quality or compatibility component needs a user score for every provider that
/// the validated `[quality]` (`quality`) or `[compat]` (`compat`) section does not measure.
///
/// # Errors
/// `(key, message)`: the dotted key (`selection.weights.price`,
/// `selection.scores.fast-lane.quality`) and what is wrong.
pub fn validate(
    section: Option<&SelectionSection>,
    providers: &[ProviderSpec],
    compat: Option<&CompatSpec>,
    quality: Option<&QualitySpec>,
) -> Result<Option<Selection>, (String, String)> {
    let Some(s) = section else {
        return Ok(None);
    };
    let err = |key: &str, message: String| Err((format!("selection.{key}"), message));
    let Some(w) = &s.weights else {
        return err(
            "weights",
            "missing: give weights = { latency = …, stability = …, price = …, quality = …, compatibility = …, compliance = … }".into(),
        );
    };
    let weights = SelectionWeights {
        latency: w.latency.unwrap_or(0.0),
        stability: w.stability.unwrap_or(0.0),
        price: w.price.unwrap_or(0.0),
        quality: w.quality.unwrap_or(0.0),
        compatibility: w.compatibility.unwrap_or(0.0),
        compliance: w.compliance.unwrap_or(0.0),
    };
    for (name, v) in weights.named() {
        if !v.is_finite() || v < 0.0 {
            return err(
                &format!("weights.{name}"),
                format!("{v} is not a weight ≥ 0"),
            );
        }
    }
    if weights.sum() <= 0.0 {
        return err("weights", "every weight is 0: give at least one > 0".into());
    }
    let latency_metric = match &s.latency_metric {
        None => Metric::Ttft,
        Some(name) => match Metric::parse(name) {
            Some(m) => m,
            None => {
                let names: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
                return err(
                    "latency_metric",
                    format!("{name:?} is not a metric ({})", names.join(", ")),
                );
            }
        },
    };
    let latency_percentile = s.latency_percentile.unwrap_or(DEFAULT_LATENCY_PERCENTILE);
    if !(latency_percentile > 0.0 && latency_percentile < 100.0) {
        return err(
            "latency_percentile",
            format!("{latency_percentile} is not a percentile (0 < p < 100)"),
        );
    }
    let score_scale = s.score_scale.unwrap_or(DEFAULT_SCORE_SCALE);
    if !(score_scale.is_finite() && score_scale > 0.0) {
        return err(
            "score_scale",
            format!("{score_scale} is not a scale > 0 (10: scores 0..10; 1: scores 0..1)"),
        );
    }
    let mut scores = BTreeMap::new();
    for (name, sc) in &s.scores {
        if !providers.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
            return err(
                &format!("scores.{name}"),
                format!("not a provider of this campaign ({})", names.join(", ")),
            );
        }
        for (field, v) in [
            ("quality", sc.quality),
            ("compatibility", sc.compatibility),
            ("compliance", sc.compliance),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && (0.0..=score_scale).contains(&v))
            {
                return err(
                    &format!("scores.{name}.{field}"),
                    format!("{v} is not in 0..={score_scale} (score_scale)"),
                );
            }
        }
        scores.insert(
            name.clone(),
            ProviderScores {
                quality: sc.quality,
                compatibility: sc.compatibility,
                compliance: sc.compliance,
            },
        );
    }
    // Per scored component: the section that can measure it instead, and the providers that
    // section measures (`None`: the file has no such section; empty: every provider).
    let components = [
        (
            "quality",
            weights.quality,
            Some("quality"),
            quality.map(|q| &q.providers),
        ),
        (
            "compatibility",
            weights.compatibility,
            Some("compat"),
            compat.map(|c| &c.providers),
        ),
        ("compliance", weights.compliance, None, None),
    ];
    for (field, weight, section, measured_for) in components {
        if weight <= 0.0 {
            continue;
        }
        for p in providers {
            let has = scores
                .get(&p.name)
                .and_then(|s: &ProviderScores| match field {
                    "quality" => s.quality,
                    "compatibility" => s.compatibility,
                    _ => s.compliance,
                });
            let measured = measured_for.is_some_and(|l| l.is_empty() || l.contains(&p.name));
            if has.is_some() || measured {
                continue;
            }
            let alternative = match (section, measured_for) {
                (None, _) => String::new(),
                (Some(section), None) => {
                    format!(", or add a [{section}] section so `latmesh compat` measures it")
                }
                (Some(section), Some(_)) => format!(
                    ", or add {:?} to {section}.providers so `latmesh compat` measures it",
                    p.name
                ),
            };
            return err(
                &format!("scores.{}.{field}", p.name),
                format!(
                    "missing: weights.{field} > 0 needs a {field} score for every provider{alternative}"
                ),
            );
        }
    }
    if weights.price > 0.0
        && let Some((i, p)) = providers
            .iter()
            .enumerate()
            .find(|(_, p)| p.price.is_none())
    {
        return err(
            "weights.price",
            format!(
                "providers[{i}] ({:?}) has no prices: price > 0 needs price_input_usd_per_mtok and price_output_usd_per_mtok for every provider",
                p.name
            ),
        );
    }
    let gates = gates(s, providers, compat).map_err(|(k, m)| (format!("selection.{k}"), m))?;
    Ok(Some(Selection {
        weights,
        latency_metric,
        latency_percentile,
        score_scale,
        scores,
        gates,
    }))
}

/// The gates of `[selection]` (`max_failed_pct`, `slo_gate`, `require_compat`), defaults
/// filled in. A required check needs a `[compat]` section that runs it for every provider.
///
/// # Errors
/// `(key, message)` with the key under `selection.`.
fn gates(
    s: &SelectionSection,
    providers: &[ProviderSpec],
    compat: Option<&CompatSpec>,
) -> Result<SelectionGates, (String, String)> {
    let max_failed_pct = s.max_failed_pct.unwrap_or(DEFAULT_MAX_FAILED_PCT);
    if !(max_failed_pct.is_finite() && (0.0..100.0).contains(&max_failed_pct)) {
        return Err((
            "max_failed_pct".into(),
            format!("{max_failed_pct} is not a % of requests in [0, 100)"),
        ));
    }
    let mut require_compat = Vec::new();
    for (i, name) in s.require_compat.iter().flatten().enumerate() {
        let key = format!("require_compat[{i}]");
        let Some(check) = CompatCheck::parse(name) else {
            let names: Vec<&str> = CompatCheck::ALL.iter().map(|c| c.as_str()).collect();
            return Err((
                key,
                format!("{name:?} is not a compat check ({})", names.join(", ")),
            ));
        };
        if require_compat.contains(&check) {
            return Err((key, format!("{name:?} is listed twice")));
        }
        let Some(spec) = compat else {
            return Err((
                key,
                format!("{name:?} needs a [compat] section that runs it (none in this file)"),
            ));
        };
        if !spec.checks.contains(&check) {
            return Err((
                key,
                format!("{name:?} is not among compat.checks: add it there so it is measured"),
            ));
        }
        if let Some(p) = providers
            .iter()
            .find(|p| !spec.providers.is_empty() && !spec.providers.contains(&p.name))
        {
            return Err((
                key,
                format!(
                    "{name:?} must be measured for every provider: add {:?} to compat.providers (or remove that key)",
                    p.name
                ),
            ));
        }
        require_compat.push(check);
    }
    require_compat.sort();
    Ok(SelectionGates {
        max_failed_pct,
        slo: s.slo_gate.unwrap_or(true),
        require_compat,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::load_toml_str;

    const BASE: &str = r#"
[campaign]
name = "t"
regions = ["us-east"]

[rounds]
count = 3
interval_s = 2.0
gap_ms = 100

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 32

[[providers]]
name = "fast-lane"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 0.3
price_output_usd_per_mtok = 1.2

[[providers]]
name = "budget"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 0.1
price_output_usd_per_mtok = 0.4
"#;

    const SELECTION: &str = r#"
[selection]
weights = { latency = 0.4, stability = 0.2, price = 0.2, quality = 0.1, compatibility = 0.05, compliance = 0.05 }
latency_metric = "e2e"
latency_percentile = 95

[selection.scores.fast-lane]
quality = 8
compatibility = 10
compliance = 9

[selection.scores.budget]
quality = 6.5
compatibility = 7
compliance = 10
"#;

    fn err_of(text: &str) -> String {
        load_toml_str(text, Path::new(".")).unwrap_err().to_string()
    }

    #[test]
    fn selection_section_becomes_part_of_the_plan() {
        let plan = load_toml_str(&format!("{BASE}{SELECTION}"), Path::new(".")).unwrap();
        let s = plan.selection.as_ref().unwrap();
        assert_eq!(s.weights.latency, 0.4);
        assert!((s.weights.sum() - 1.0).abs() < 1e-12);
        assert_eq!(s.latency_metric, Metric::E2e);
        assert_eq!(s.latency_percentile, 95.0);
        assert_eq!(s.score_scale, DEFAULT_SCORE_SCALE);
        assert_eq!(s.scores["budget"].quality, Some(6.5));
        assert_eq!(s.scores["fast-lane"].compatibility, Some(10.0));
        // It travels in the plan JSON.
        let back: crate::plan::Plan = serde_json::from_str(&plan.to_json()).unwrap();
        assert_eq!(back.selection, plan.selection);
    }

    #[test]
    fn plans_without_selection_keep_their_json_and_hash() {
        let plan = load_toml_str(BASE, Path::new(".")).unwrap();
        assert!(plan.selection.is_none());
        assert!(!plan.to_json().contains("selection"));
        let with = load_toml_str(&format!("{BASE}{SELECTION}"), Path::new(".")).unwrap();
        assert_ne!(with.hash(), plan.hash());
        let mut without = with.clone();
        without.selection = None;
        assert_eq!(without.hash(), plan.hash());
    }

    #[test]
    fn defaults_and_partial_weights() {
        let text = format!("{BASE}[selection]\nweights = {{ latency = 1 }}\n");
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        let s = plan.selection.unwrap();
        assert_eq!(s.latency_metric, Metric::Ttft);
        assert_eq!(s.latency_percentile, 50.0);
        assert_eq!((s.weights.latency, s.weights.price), (1.0, 0.0));
    }

    #[test]
    fn measured_sections_stand_in_for_missing_user_scores() {
        let weights = "[selection]\nweights = { latency = 1, quality = 1, compatibility = 1 }\n";
        // Both measured for every provider: no user score needed.
        let plan = load_toml_str(
            &format!("{BASE}{weights}[compat]\n[quality]\n"),
            Path::new("."),
        )
        .unwrap();
        assert!(plan.selection.unwrap().scores.is_empty());
        // A user score still counts (and overrides the measured one later).
        let plan = load_toml_str(
            &format!(
                "{BASE}{weights}[selection.scores.budget]\nquality = 4\n[compat]\n[quality]\n"
            ),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.selection.unwrap().scores["budget"].quality, Some(4.0));
        // Measured for one provider only: the other needs a user score, and is told how.
        let e = err_of(&format!(
            "{BASE}{weights}[compat]\nproviders = [\"fast-lane\"]\n[quality]\n"
        ));
        assert!(
            e.contains("selection.scores.budget.compatibility: missing: weights.compatibility > 0 needs a compatibility score for every provider, or add \"budget\" to compat.providers so `latmesh compat` measures it"),
            "{e}"
        );
        let plan = load_toml_str(
            &format!(
                "{BASE}{weights}[selection.scores.budget]\ncompatibility = 6\n[compat]\nproviders = [\"fast-lane\"]\n[quality]\nproviders = [\"budget\", \"fast-lane\"]\n"
            ),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(
            plan.selection.unwrap().scores["budget"].compatibility,
            Some(6.0)
        );
        // [compat] does not stand in for quality, nor [quality] for compatibility.
        let e = err_of(&format!("{BASE}{weights}[compat]\n"));
        assert!(
            e.contains("selection.scores.fast-lane.quality: missing")
                && e.contains("[quality] section"),
            "{e}"
        );
        let e = err_of(&format!("{BASE}{weights}[quality]\n"));
        assert!(
            e.contains("selection.scores.fast-lane.compatibility: missing")
                && e.contains("[compat] section"),
            "{e}"
        );
    }

    #[test]
    fn selection_errors_name_the_key() {
        let with = |sel: &str| format!("{BASE}{sel}");
        for (text, want) in [
            (with("[selection]\n"), "selection.weights: missing"),
            (
                with("[selection]\nweights = { latency = 0 }\n"),
                "selection.weights: every weight is 0",
            ),
            (
                with("[selection]\nweights = { latency = -1 }\n"),
                "selection.weights.latency: -1 is not a weight",
            ),
            (
                with("[selection]\nweights = { latency = 1 }\nlatency_metric = \"fast\"\n"),
                "selection.latency_metric: \"fast\" is not a metric",
            ),
            (
                with("[selection]\nweights = { latency = 1 }\nlatency_percentile = 100\n"),
                "selection.latency_percentile: 100 is not a percentile",
            ),
            (
                with("[selection]\nweights = { latency = 1 }\nscore_scale = 0\n"),
                "selection.score_scale: 0 is not a scale",
            ),
            (
                with(
                    "[selection]\nweights = { latency = 1 }\n[selection.scores.nope]\nquality = 1\n",
                ),
                "selection.scores.nope: not a provider",
            ),
            (
                with(
                    "[selection]\nweights = { latency = 1 }\n[selection.scores.budget]\nquality = 11\n",
                ),
                "selection.scores.budget.quality: 11 is not in 0..=10",
            ),
            (
                with(
                    "[selection]\nweights = { quality = 1 }\n[selection.scores.budget]\nquality = 5\n",
                ),
                "selection.scores.fast-lane.quality: missing: weights.quality > 0 needs a quality score for every provider, or add a [quality] section so `latmesh compat` measures it",
            ),
            (
                with("[selection]\nweights = { compatibility = 1 }\n"),
                "selection.scores.fast-lane.compatibility: missing: weights.compatibility > 0 needs a compatibility score for every provider, or add a [compat] section so `latmesh compat` measures it",
            ),
            (
                with("[selection]\nweights = { compliance = 1 }\n[compat]\n[quality]\n"),
                "selection.scores.fast-lane.compliance: missing: weights.compliance > 0 needs a compliance score for every provider",
            ),
            (
                with("[selection]\nweights = { latency = 1, speed = 2 }\n"),
                "speed",
            ),
        ] {
            let e = err_of(&text);
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
        // Nothing measures compliance: no alternative is offered.
        let e = err_of(&with(
            "[selection]\nweights = { compliance = 1 }\n[compat]\n[quality]\n",
        ));
        assert!(e.ends_with("score for every provider"), "{e}");
        // Prices are needed for a price weight.
        let no_prices = BASE
            .replace("price_input_usd_per_mtok = 0.1\n", "")
            .replace("price_output_usd_per_mtok = 0.4\n", "");
        let e = err_of(&format!(
            "{no_prices}[selection]\nweights = {{ price = 1 }}\n"
        ));
        assert!(
            e.contains("selection.weights.price: providers[1] (\"budget\") has no prices"),
            "{e}"
        );
        // Scores on a 0..1 scale.
        let e = err_of(&with(
            "[selection]\nweights = { latency = 1 }\nscore_scale = 1\n[selection.scores.budget]\nquality = 2\n",
        ));
        assert!(e.contains("2 is not in 0..=1"), "{e}");
    }

    #[test]
    fn gates_default_and_validate_naming_the_key() {
        let plan = load_toml_str(&format!("{BASE}{SELECTION}"), Path::new(".")).unwrap();
        let g = &plan.selection.as_ref().unwrap().gates;
        assert_eq!(g, &SelectionGates::default());
        assert_eq!((g.max_failed_pct, g.slo), (5.0, true));
        assert!(g.require_compat.is_empty());
        let with = |extra: &str| format!("{BASE}[selection]\nweights = {{ latency = 1 }}\n{extra}");
        let plan = load_toml_str(
            &with("max_failed_pct = 2.5\nslo_gate = false\nrequire_compat = [\"tool_call\", \"stream\"]\n[compat]\n"),
            Path::new("."),
        )
        .unwrap();
        let g = &plan.selection.as_ref().unwrap().gates;
        assert_eq!((g.max_failed_pct, g.slo), (2.5, false));
        assert_eq!(
            g.require_compat,
            [CompatCheck::Stream, CompatCheck::ToolCall]
        );
        let e = err_of(&with("max_failed_pct = 100\n"));
        assert!(
            e.contains("selection.max_failed_pct: 100 is not a % of requests in [0, 100)"),
            "{e}"
        );
        let e = err_of(&with("require_compat = [\"tools\"]\n[compat]\n"));
        assert!(
            e.contains("selection.require_compat[0]: \"tools\" is not a compat check (stream, "),
            "{e}"
        );
        let e = err_of(&with("require_compat = [\"stream\"]\n"));
        assert!(
            e.contains("selection.require_compat[0]: \"stream\" needs a [compat] section"),
            "{e}"
        );
        let e = err_of(&with(
            "require_compat = [\"stream\", \"stream\"]\n[compat]\n",
        ));
        assert!(
            e.contains("selection.require_compat[1]: \"stream\" is listed twice"),
            "{e}"
        );
        let e = err_of(&with(
            "require_compat = [\"stop\"]\n[compat]\nchecks = [\"stream\"]\n",
        ));
        assert!(
            e.contains("selection.require_compat[0]: \"stop\" is not among compat.checks"),
            "{e}"
        );
        let e = err_of(&with(
            "require_compat = [\"stop\"]\n[compat]\nproviders = [\"fast-lane\"]\n",
        ));
        assert!(e.contains("add \"budget\" to compat.providers"), "{e}");
        let e = err_of(&with("slo_gates = true\n"));
        assert!(e.contains("slo_gates"), "{e}");
    }
}
