//! What answered, per provider over a campaign (docs/metrics.md, "What answered"): the
//! `model`s and `system_fingerprint`s its answers named, from the matrix cells, checked
//! against the model the plan asked for ([`latmesh_core::answered_model::model_matches`]).
//!
//! Two flags come out of it: *answered with another model* (an answered name that does not
//! match the provider's `expect_model`, else its `model_id`), and *changed during the
//! campaign* (more than one model, or more than one `system_fingerprint`, answered: a silent
//! model or backend swap, or a pool of differently configured backends).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use latmesh_core::answered_model::model_matches;
use latmesh_core::plan::ProviderSpec;
use serde::{Deserialize, Serialize};

use crate::aggregate::count_name;
use crate::summary::{ALL_REGIONS, MatrixCell};

/// Names listed per flag line before the rest are summed up as "and N more".
const LISTED: usize = 4;

/// Most names a matrix cell keeps per map (`answered_models`, `system_fingerprints`): a
/// provider that names a new backend in every answer cannot grow the summary without bound.
/// The attempts under the names left out are counted apart (`…_more`).
pub const MAX_NAMES_PER_CELL: usize = 20;

/// The [`MAX_NAMES_PER_CELL`] most frequent names of `counts` (ties: the smaller name), and
/// the attempts under the names left out.
pub fn most_frequent(counts: &BTreeMap<String, u64>) -> (BTreeMap<String, u64>, u64) {
    if counts.len() <= MAX_NAMES_PER_CELL {
        return (counts.clone(), 0);
    }
    let mut v: Vec<(&String, &u64)> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let more = v[MAX_NAMES_PER_CELL..].iter().map(|(_, n)| **n).sum();
    let kept = v[..MAX_NAMES_PER_CELL]
        .iter()
        .map(|(k, n)| ((*k).clone(), **n))
        .collect();
    (kept, more)
}

/// What one provider answered with over the campaign (every scenario, the `ALL` rows).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRow {
    /// Provider.
    pub provider: String,
    /// The model id the requests carried.
    pub model_id: String,
    /// The name answers are matched against: the provider's `expect_model`, else `model_id`.
    pub expected: String,
    /// Attempts by the `model` they were answered with.
    pub answered: BTreeMap<String, u64>,
    /// Answered models that do not match `expected`: "answered with another model".
    pub other_models: Vec<String>,
    /// Attempts by the `system_fingerprint` they were answered with.
    pub system_fingerprints: BTreeMap<String, u64>,
    /// Attempts answered under model names the cells left out ([`MAX_NAMES_PER_CELL`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub answered_more: u64,
    /// Attempts answered under fingerprints the cells left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub system_fingerprints_more: u64,
}

/// Whether a count is 0 (fields left out of the JSON then).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ModelRow {
    /// Whether some answer named another model than the one expected.
    pub fn answered_other_model(&self) -> bool {
        !self.other_models.is_empty()
    }

    /// Whether more than one model, or more than one `system_fingerprint`, answered.
    pub fn changed(&self) -> bool {
        self.answered.len() + usize::from(self.answered_more > 0) > 1
            || self.system_fingerprints.len() + usize::from(self.system_fingerprints_more > 0) > 1
    }

    /// The flags, in words (empty when nothing is flagged).
    pub fn flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.answered_other_model() {
            out.push(format!(
                "answered with another model than {:?}: {}",
                self.expected,
                self.other_models.join(", ")
            ));
        }
        let changed = |what: &str, counts: &BTreeMap<String, u64>, more: u64| {
            let mut s = format!(
                "{}{} {what} answered during the campaign: {}",
                counts.len(),
                if more > 0 { " or more" } else { "" },
                counted(counts)
            );
            if more > 0 {
                let _ = write!(s, "; {more} attempts under names not kept");
            }
            s
        };
        if self.answered.len() + usize::from(self.answered_more > 0) > 1 {
            out.push(changed("models", &self.answered, self.answered_more));
        }
        if self.system_fingerprints.len() + usize::from(self.system_fingerprints_more > 0) > 1 {
            out.push(changed(
                "system_fingerprints",
                &self.system_fingerprints,
                self.system_fingerprints_more,
            ));
        }
        out
    }
}

/// `name ×n, …`, most frequent first (ties by name), at most [`LISTED`] names.
pub fn counted(counts: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = counts.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut s = v
        .iter()
        .take(LISTED)
        .map(|(name, n)| format!("{name} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    if v.len() > LISTED {
        let _ = write!(s, " and {} more", v.len() - LISTED);
    }
    s
}

/// One row per provider of `providers` whose answers named a model or a fingerprint, from
/// the `ALL` rows of `cells` (every scenario merged), in plan order.
pub fn model_rows(providers: &[ProviderSpec], cells: &[MatrixCell]) -> Vec<ModelRow> {
    let mut out = Vec::new();
    for p in providers {
        let mut answered = BTreeMap::new();
        let mut system_fingerprints = BTreeMap::new();
        let (mut answered_more, mut system_fingerprints_more) = (0, 0);
        for c in cells
            .iter()
            .filter(|c| c.region == ALL_REGIONS && c.provider == p.name)
        {
            for (m, n) in &c.answered_models {
                count_name(&mut answered, Some(m), *n);
            }
            for (f, n) in &c.system_fingerprints {
                count_name(&mut system_fingerprints, Some(f), *n);
            }
            answered_more += c.answered_models_more;
            system_fingerprints_more += c.system_fingerprints_more;
        }
        if answered.is_empty() && system_fingerprints.is_empty() {
            continue;
        }
        let expected = p.expected_model().to_string();
        let other_models = answered
            .keys()
            .filter(|m| !model_matches(&expected, m))
            .cloned()
            .collect();
        out.push(ModelRow {
            provider: p.name.clone(),
            model_id: p.model_id.clone(),
            expected,
            answered,
            other_models,
            system_fingerprints,
            answered_more,
            system_fingerprints_more,
        });
    }
    out
}

/// Fixtures (plans, aggregates, summaries) for the tests of this crate and of the CLI's
/// renderers (feature `fixtures`), and this module's tests.
#[cfg(any(test, feature = "fixtures"))]
#[allow(missing_docs, unused_imports, dead_code)]
pub mod tests {
    use super::*;

    pub fn spec(name: &str, model_id: &str, expect: Option<&str>) -> ProviderSpec {
        let mut p: ProviderSpec = serde_json::from_value(serde_json::json!({
            "name": name, "base_url": "http://127.0.0.1:9/v1", "api_key_env": null,
            "model_id": model_id,
        }))
        .unwrap();
        p.expect_model = expect.map(str::to_string);
        p
    }

    pub fn cell(
        region: &str,
        provider: &str,
        models: &[(&str, u64)],
        fps: &[(&str, u64)],
    ) -> MatrixCell {
        let map = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        let mut c: MatrixCell = serde_json::from_value(serde_json::json!({
            "region": region, "provider": provider, "scenario": "s", "attempts": 0,
            "samples": 0, "ttft": null, "ttfc": null, "e2e": null, "tpot_p50_ms": null,
            "itl_p50_ms": null, "error_pct": 0.0, "requests": 0, "request_error_pct": 0.0,
            "throttled_pct": 0.0, "output_tokens_mean": null, "tokens_from_usage": 0,
            "usage_chunk_delta_mean": null, "usage_chunk_mismatches": 0, "last_error": null,
            "outcomes": {},
        }))
        .unwrap();
        c.answered_models = map(models);
        c.system_fingerprints = map(fps);
        c
    }

    /// `openai` `ALL` rows of two scenarios: a model swapped during the campaign, and
    /// fingerprints.
    pub fn swapped() -> [MatrixCell; 2] {
        [
            cell(
                ALL_REGIONS,
                "openai",
                &[("gpt-4o-2024-08-06", 10)],
                &[("fp_1", 10)],
            ),
            {
                let mut c = cell(
                    ALL_REGIONS,
                    "openai",
                    &[("gpt-4o-2024-11-20", 2), ("gpt-4o-mini", 1)],
                    &[("fp_2", 3)],
                );
                c.scenario = "t".into();
                c
            },
        ]
    }

    #[test]
    fn another_model_and_a_change_are_flagged() {
        let providers = [
            spec("openai", "gpt-4o", None),
            spec("llama", "smollm2", None),
            spec(
                "llama-expected",
                "smollm2",
                Some("SmolLM2-135M-Instruct-Q4_1.gguf"),
            ),
            spec("silent", "m", None),
        ];
        let cells = [
            // A dated name of the model asked for, one fingerprint: nothing to flag.
            cell(
                ALL_REGIONS,
                "openai",
                &[("gpt-4o-2024-08-06", 12)],
                &[("fp_1", 12)],
            ),
            // Region rows are not counted twice.
            cell(
                "us",
                "openai",
                &[("gpt-4o-2024-08-06", 12)],
                &[("fp_1", 12)],
            ),
            // llama-server answers with the model it loaded, whatever was asked.
            cell(
                ALL_REGIONS,
                "llama",
                &[("SmolLM2-135M-Instruct-Q4_1.gguf", 6)],
                &[],
            ),
            cell(
                ALL_REGIONS,
                "llama-expected",
                &[("SmolLM2-135M-Instruct-Q4_1.gguf", 6)],
                &[],
            ),
        ];
        let rows = model_rows(&providers, &cells);
        assert_eq!(
            rows.iter().map(|r| r.provider.as_str()).collect::<Vec<_>>(),
            ["openai", "llama", "llama-expected"]
        );
        assert_eq!(rows[0].flags(), Vec::<String>::new());
        assert_eq!(rows[0].answered["gpt-4o-2024-08-06"], 12);
        assert_eq!(
            rows[1].flags(),
            ["answered with another model than \"smollm2\": SmolLM2-135M-Instruct-Q4_1.gguf"]
        );
        assert_eq!(rows[2].expected, "SmolLM2-135M-Instruct-Q4_1.gguf");
        assert!(!rows[2].answered_other_model());
        let rows = model_rows(&providers, &swapped());
        let r = &rows[0];
        assert!(r.changed() && r.answered_other_model());
        assert_eq!(r.other_models, ["gpt-4o-mini"]);
        assert_eq!(
            r.flags(),
            [
                "answered with another model than \"gpt-4o\": gpt-4o-mini",
                "3 models answered during the campaign: gpt-4o-2024-08-06 ×10, gpt-4o-2024-11-20 ×2, gpt-4o-mini ×1",
                "2 system_fingerprints answered during the campaign: fp_1 ×10, fp_2 ×3",
            ]
        );
    }

    #[test]
    fn a_cell_keeps_the_most_frequent_names() {
        let counts: BTreeMap<String, u64> = (0..25u64)
            .map(|i| (format!("fp{i:02}"), if i == 24 { 100 } else { 1 }))
            .collect();
        let (kept, more) = most_frequent(&counts);
        assert_eq!(kept.len(), MAX_NAMES_PER_CELL);
        // The most frequent first, then ties by name: fp24, fp00..fp18; fp19..fp23 left out.
        assert_eq!(kept["fp24"], 100);
        assert!(kept.contains_key("fp18") && !kept.contains_key("fp19"));
        assert_eq!(more, 5);
        let mut c = cell(ALL_REGIONS, "openai", &[("gpt-4o", 3)], &[]);
        (c.system_fingerprints, c.system_fingerprints_more) = (kept, more);
        let rows = model_rows(&[spec("openai", "gpt-4o", None)], &[c]);
        assert_eq!(
            rows[0].flags(),
            [
                "20 or more system_fingerprints answered during the campaign: fp24 ×100, fp00 ×1, fp01 ×1, fp02 ×1 and 16 more; 5 attempts under names not kept"
            ]
        );
    }

    #[test]
    fn long_lists_are_cut() {
        let counts: BTreeMap<String, u64> = (0..6).map(|i| (format!("fp{i}"), 10 - i)).collect();
        assert_eq!(
            counted(&counts),
            "fp0 ×10, fp1 ×9, fp2 ×8, fp3 ×7 and 2 more"
        );
    }
}
