//! Quality parity and compatibility per provider (docs/metrics.md, "Quality parity",
//! "Compatibility checks"): what `latmesh compat` measured, turned into the numbers the
//! terminal, the HTML report and the selection matrix show. Pure: no I/O.
//!
//! SKELETON (session 11): types are fixed; [`parity`]'s rules are refined by the analysis
//! branch (accuracy interval, majority agreement, length ratio, the flag).

use std::collections::BTreeMap;

use latmesh_core::compat::{CompatResult, CompatScore};
use latmesh_core::quality::QualitySample;
use serde::{Deserialize, Serialize};

/// One provider's quality-parity figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderQuality {
    /// Provider name.
    pub provider: String,
    /// Samples sent.
    pub samples: u64,
    /// Samples that ended `ok` (graded).
    pub graded: u64,
    /// Graded samples whose answer was correct.
    pub correct: u64,
    /// `correct / graded` (0..=1); `None` when nothing was graded.
    pub accuracy: Option<f64>,
    /// 95 % Wilson interval of `accuracy`.
    pub accuracy_ci: Option<(f64, f64)>,
    /// Share of graded samples whose answer equals the majority answer of the *other*
    /// providers to the same prompt (0..=1); `None` when no other provider answered.
    pub agreement: Option<f64>,
    /// Median output tokens of graded samples.
    pub median_output_tokens: Option<f64>,
    /// `median_output_tokens` / median of the other providers' medians.
    pub length_ratio: Option<f64>,
    /// The answers' fingerprint ([`latmesh_core::quality::answers_fingerprint`]).
    pub fingerprint: Option<String>,
    /// Set when the provider is clearly below the others: "possible quantization or
    /// different model", with the evidence in words.
    pub flag: Option<String>,
}

/// Quality parity over every provider of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QualityParity {
    /// The prompt set's version ([`latmesh_core::quality::QUALITY_SET_VERSION`]).
    pub set: String,
    /// One row per provider, in the order first seen in the samples.
    pub providers: Vec<ProviderQuality>,
}

/// A provider's compatibility results and their score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderCompat {
    /// Provider name.
    pub provider: String,
    /// Its results, in [`latmesh_core::compat::CompatCheck::ALL`] order.
    pub results: Vec<CompatResult>,
    /// [`latmesh_core::compat::score`] of them.
    pub score: Option<CompatScore>,
}

/// Measured scores per provider that the selection matrix uses where the user gave none
/// (`[selection.scores.NAME]` still overrides): both 0..=1.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasuredScores {
    /// Compatibility score ([`latmesh_core::compat::score`]).
    pub compatibility: Option<f64>,
    /// Quality: the accuracy of the quality-parity run.
    pub quality: Option<f64>,
}

/// What one `latmesh compat` run measured, as a report shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompatReport {
    /// The run's id (empty when none ran).
    pub run_id: String,
    /// Compatibility results per provider (empty when the checks were not run).
    pub compat: Vec<ProviderCompat>,
    /// Quality parity (`None` when not run).
    pub quality: Option<QualityParity>,
}

impl CompatReport {
    /// Whether nothing was measured.
    pub fn is_empty(&self) -> bool {
        self.compat.is_empty() && self.quality.is_none()
    }

    /// The measured scores per provider ([`measured_scores`]).
    pub fn measured(&self) -> BTreeMap<String, MeasuredScores> {
        measured_scores(
            &self.compat,
            self.quality.as_ref().unwrap_or(&QualityParity::default()),
        )
    }
}

/// Groups compatibility results by provider (order first seen), each scored.
pub fn compat_by_provider(results: &[CompatResult]) -> Vec<ProviderCompat> {
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<CompatResult>> = BTreeMap::new();
    for r in results {
        if !by.contains_key(&r.provider) {
            order.push(r.provider.clone());
        }
        by.entry(r.provider.clone()).or_default().push(r.clone());
    }
    order
        .into_iter()
        .map(|p| {
            let mut rs = by.remove(&p).unwrap_or_default();
            rs.sort_by_key(|r| r.check);
            let score = latmesh_core::compat::score(&rs);
            ProviderCompat {
                provider: p,
                results: rs,
                score,
            }
        })
        .collect()
}

/// The quality-parity figures of `samples`.
pub fn parity(samples: &[QualitySample]) -> QualityParity {
    let mut order: Vec<&str> = Vec::new();
    for s in samples {
        if !order.contains(&s.provider.as_str()) {
            order.push(&s.provider);
        }
    }
    let providers = order
        .iter()
        .map(|p| {
            let mine: Vec<&QualitySample> = samples.iter().filter(|s| s.provider == *p).collect();
            let graded: Vec<&&QualitySample> =
                mine.iter().filter(|s| s.correct.is_some()).collect();
            let correct = graded.iter().filter(|s| s.correct == Some(true)).count() as u64;
            let n = graded.len() as u64;
            let ci = latmesh_core::proportion::wilson(correct, n).map(|c| (c.lower, c.upper));
            ProviderQuality {
                provider: p.to_string(),
                samples: mine.len() as u64,
                graded: n,
                correct,
                accuracy: (n > 0).then(|| correct as f64 / n as f64),
                accuracy_ci: ci,
                agreement: None,
                median_output_tokens: None,
                length_ratio: None,
                fingerprint: latmesh_core::quality::answers_fingerprint(mine.iter().copied()),
                flag: None,
            }
        })
        .collect();
    QualityParity {
        set: latmesh_core::quality::QUALITY_SET_VERSION.to_string(),
        providers,
    }
}

/// The measured scores of each provider from its compatibility results and its quality
/// parity row.
pub fn measured_scores(
    compat: &[ProviderCompat],
    quality: &QualityParity,
) -> BTreeMap<String, MeasuredScores> {
    let mut out: BTreeMap<String, MeasuredScores> = BTreeMap::new();
    for c in compat {
        out.entry(c.provider.clone()).or_default().compatibility = c.score.map(|s| s.score);
    }
    for q in &quality.providers {
        out.entry(q.provider.clone()).or_default().quality = q.accuracy;
    }
    out
}
