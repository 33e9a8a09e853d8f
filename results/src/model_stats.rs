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
use crate::matrix::{ALL_REGIONS, MatrixCell, is_zero};

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
