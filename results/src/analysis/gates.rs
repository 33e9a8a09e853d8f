//! The selection's gates: what a provider must pass in a (scenario, region) before its score
//! counts ([`latmesh_core::selection::SelectionGates`]; docs/metrics.md "Selection: gates
//! before scores").
//!
//! Each gate gives one of four statuses ([`GateStatus`]), from the figure and its 95 %
//! interval:
//!
//! * **failure rate** (`max_failed_pct`, default 5 %): failed requests (final attempts not
//!   `ok`, after retries; `cancelled` and `dropped` left out) of the cell, with their Wilson
//!   interval — *failed* when the lower bound lies above the limit, *at risk* when the point
//!   is above it and the lower bound is not, *undecided* when the point is at or below it and
//!   the upper bound above it, *passed* when the upper bound is at or below it;
//! * **SLO** (`slo_gate`, default on; scenarios with a cell goodput): the cell's goodput
//!   verdict ([`crate::slo_stats::interval_meets`], the rule of `latmesh check`) — *failed*
//!   when missed, *passed* when met; when undecided or with too few requests, *at risk* when
//!   the point is below `goodput_pct` and *undecided* when it is not;
//! * **compat** (`require_compat`): each required check's verdict from `latmesh compat` —
//!   `pass` *passed*, `fail` and `not_offered` *failed*, `not_applicable` (the API has no such
//!   feature), `inconclusive` or not measured *at risk*.
//!
//! A *failed* gate excludes the provider from the ranking (listed with the reasons); *at
//! risk* ranks it after every provider at risk on fewer gates; *undecided* only marks it.

use latmesh_core::compat::{CompatCheck, Verdict as CompatVerdict};
use latmesh_core::plan::ScenarioSpec;
use latmesh_core::selection::SelectionGates;
use serde::Serialize;

use crate::matrix::MatrixCell;
use crate::parity::CompatReport;
use crate::slo_stats::{self, GoodputVerdict};

/// Which gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateKind {
    /// Failed requests against `max_failed_pct`.
    FailureRate,
    /// The scenario's SLO (cell goodput).
    Slo,
    /// A required compat check.
    Compat,
}

impl GateKind {
    /// `failure rate`, `SLO`, `compat`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateKind::FailureRate => "failure rate",
            GateKind::Slo => "SLO",
            GateKind::Compat => "compat",
        }
    }
}

/// What a gate says of one provider, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateStatus {
    /// Passed, and the interval shows it.
    Passed,
    /// The point passes; the interval still reaches past the limit (more samples would tell).
    /// Only marked.
    Undecided,
    /// The point fails (or nothing was measured); the interval does not confirm it. Ranked
    /// after the providers at risk on fewer gates.
    AtRisk,
    /// Failed, and the interval shows it: excluded.
    Failed,
}

impl GateStatus {
    /// `passed`, `undecided`, `at risk`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            GateStatus::Passed => "passed",
            GateStatus::Undecided => "undecided",
            GateStatus::AtRisk => "at risk",
            GateStatus::Failed => "failed",
        }
    }
}

/// One gate's result for one provider in one (scenario, region).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateResult {
    /// The gate.
    pub gate: GateKind,
    /// Its status.
    pub status: GateStatus,
    /// The figures in words: `"failed 16.7% of 36 requests [7.9, 32.0] > 5%"`.
    pub detail: String,
}

impl GateResult {
    /// `"failure rate at risk: failed 8.3% of 12 requests [1.5, 35.4] vs limit 5%"`.
    pub fn text(&self) -> String {
        format!(
            "{} {}: {}",
            self.gate.as_str(),
            self.status.as_str(),
            self.detail
        )
    }
}

/// The failure-rate gate of `failed` of `requests` requests against `max_pct` (%).
pub fn failure_gate(failed: u64, requests: u64, max_pct: f64) -> GateResult {
    let Some(ci) = latmesh_core::proportion::wilson(failed, requests) else {
        return GateResult {
            gate: GateKind::FailureRate,
            status: GateStatus::AtRisk,
            detail: "no requests".into(),
        };
    };
    let (point, lower, upper) = (ci.point() * 100.0, ci.lower * 100.0, ci.upper * 100.0);
    let status = if lower > max_pct {
        GateStatus::Failed
    } else if point > max_pct {
        GateStatus::AtRisk
    } else if upper > max_pct {
        GateStatus::Undecided
    } else {
        GateStatus::Passed
    };
    let relation = match status {
        GateStatus::Failed => "above",
        GateStatus::AtRisk | GateStatus::Undecided => "contains",
        GateStatus::Passed => "below",
    };
    GateResult {
        gate: GateKind::FailureRate,
        status,
        detail: format!(
            "failed {point:.1}% of {requests} requests, 95% interval [{lower:.1}, {upper:.1}] {relation} the limit {max_pct}%"
        ),
    }
}

/// The SLO gate of a cell (`None` when the scenario has no cell goodput).
pub fn slo_gate(scenario: &ScenarioSpec, cell: Option<&MatrixCell>) -> Option<GateResult> {
    if !slo_stats::has_cell_goodput(scenario) {
        return None;
    }
    let target = scenario.slo.as_ref()?.goodput_pct;
    let Some(g) = cell.and_then(|c| c.goodput.as_ref()) else {
        return Some(GateResult {
            gate: GateKind::Slo,
            status: GateStatus::AtRisk,
            detail: "no goodput measured".into(),
        });
    };
    let status = match g.verdict() {
        GoodputVerdict::Met => GateStatus::Passed,
        GoodputVerdict::Missed => GateStatus::Failed,
        GoodputVerdict::Undecided | GoodputVerdict::TooFew if g.pct < target => GateStatus::AtRisk,
        GoodputVerdict::Undecided | GoodputVerdict::TooFew => GateStatus::Undecided,
    };
    let exceeded = if g.exceeded.is_empty() {
        String::new()
    } else {
        format!("; {}", g.exceeded.join("; "))
    };
    Some(GateResult {
        gate: GateKind::Slo,
        status,
        detail: format!(
            "goodput {:.1}% of {} requests, 95% interval [{:.1}, {:.1}] vs {target}%: {}{exceeded}",
            g.pct,
            g.requests,
            g.ci_pct.0,
            g.ci_pct.1,
            g.verdict().as_str()
        ),
    })
}

/// The gate of one required compat check for `provider`.
pub fn compat_gate(compat: &CompatReport, provider: &str, check: CompatCheck) -> GateResult {
    let result = compat
        .compat
        .iter()
        .filter(|c| c.provider == provider)
        .flat_map(|c| &c.results)
        .find(|r| r.check == check);
    let Some(r) = result else {
        return GateResult {
            gate: GateKind::Compat,
            status: GateStatus::AtRisk,
            detail: format!("{check}: not measured (run `latmesh compat` for this campaign)"),
        };
    };
    let status = match r.verdict {
        CompatVerdict::Pass => GateStatus::Passed,
        // Unstable: the samples disagreed, so the feature cannot be relied on.
        CompatVerdict::Fail | CompatVerdict::NotOffered | CompatVerdict::Unstable => {
            GateStatus::Failed
        }
        CompatVerdict::NotApplicable | CompatVerdict::Inconclusive => GateStatus::AtRisk,
    };
    let evidence = if r.evidence.message.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.evidence.message)
    };
    GateResult {
        gate: GateKind::Compat,
        status,
        detail: format!("{check}: {}{evidence}", r.verdict.as_str()),
    }
}

/// Every gate of `gates` for one provider's cell of `scenario` (failure rate first, then the
/// SLO when the scenario has a cell goodput and the gate is on, then each required check).
pub fn evaluate(
    gates: &SelectionGates,
    scenario: &ScenarioSpec,
    cell: Option<&MatrixCell>,
    compat: &CompatReport,
    provider: &str,
) -> Vec<GateResult> {
    let (failed, requests) = cell.map_or((0, 0), |c| {
        let failed = (c.requests as f64 * c.request_error_pct / 100.0).round() as u64;
        (failed.min(c.requests), c.requests)
    });
    let mut out = vec![failure_gate(failed, requests, gates.max_failed_pct)];
    if gates.slo {
        out.extend(slo_gate(scenario, cell));
    }
    out.extend(
        gates
            .require_compat
            .iter()
            .map(|&check| compat_gate(compat, provider, check)),
    );
    out
}

#[cfg(test)]
mod tests {
    use latmesh_core::compat::{CompatResult, Evidence};

    use super::*;
    use crate::parity::ProviderCompat;

    #[test]
    fn failure_gate_by_the_wilson_interval() {
        // 6 of 36 (16.7 %, [7.9, 31.9]): surely above 5 %: failed.
        let g = failure_gate(6, 36, 5.0);
        assert_eq!(g.status, GateStatus::Failed);
        assert_eq!(
            g.text(),
            "failure rate failed: failed 16.7% of 36 requests, 95% interval [7.9, 31.9] above the limit 5%"
        );
        // 2 of 12 (16.7 %, [4.7, 44.8]): above the limit, not surely: at risk.
        let g = failure_gate(2, 12, 5.0);
        assert_eq!(g.status, GateStatus::AtRisk);
        assert_eq!(
            g.detail,
            "failed 16.7% of 12 requests, 95% interval [4.7, 44.8] contains the limit 5%"
        );
        // 0 of 12 ([0, 24.2]): within the limit, not surely: undecided (only marked).
        assert_eq!(failure_gate(0, 12, 5.0).status, GateStatus::Undecided);
        // 0 of 100 ([0, 3.7]): passed.
        assert_eq!(failure_gate(0, 100, 5.0).status, GateStatus::Passed);
        // 5 of 100 (5 %) is not above 5 %: undecided.
        assert_eq!(failure_gate(5, 100, 5.0).status, GateStatus::Undecided);
        assert_eq!(failure_gate(0, 0, 5.0).status, GateStatus::AtRisk);
    }

    fn result(check: CompatCheck, verdict: CompatVerdict) -> CompatResult {
        CompatResult {
            provider: "p".into(),
            check,
            verdict,
            evidence: Evidence {
                http_status: Some(400),
                field: None,
                message: "unknown field tools".into(),
            },
            samples: Default::default(),
        }
    }

    #[test]
    fn compat_gate_by_the_checks_verdict() {
        let report = CompatReport {
            run_id: "r".into(),
            compat: vec![ProviderCompat {
                provider: "p".into(),
                results: vec![
                    result(CompatCheck::ToolCall, CompatVerdict::NotOffered),
                    result(CompatCheck::Stream, CompatVerdict::Pass),
                    result(CompatCheck::Stop, CompatVerdict::Inconclusive),
                    result(CompatCheck::JsonMode, CompatVerdict::Fail),
                    result(CompatCheck::OutputCap, CompatVerdict::NotApplicable),
                    result(CompatCheck::SystemFingerprint, CompatVerdict::Unstable),
                ],
                score: None,
            }],
            quality: None,
        };
        let g = compat_gate(&report, "p", CompatCheck::ToolCall);
        assert_eq!(g.status, GateStatus::Failed);
        assert_eq!(
            g.text(),
            "compat failed: tool_call: not_offered (unknown field tools)"
        );
        let status = |c| compat_gate(&report, "p", c).status;
        assert_eq!(status(CompatCheck::Stream), GateStatus::Passed);
        assert_eq!(status(CompatCheck::Stop), GateStatus::AtRisk);
        assert_eq!(status(CompatCheck::JsonMode), GateStatus::Failed);
        assert_eq!(status(CompatCheck::OutputCap), GateStatus::AtRisk);
        assert_eq!(status(CompatCheck::SystemFingerprint), GateStatus::Failed);
        let g = compat_gate(&report, "q", CompatCheck::Stream);
        assert_eq!(
            (g.status, g.detail.as_str()),
            (
                GateStatus::AtRisk,
                "stream: not measured (run `latmesh compat` for this campaign)"
            )
        );
    }
}
