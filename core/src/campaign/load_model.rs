//! A scenario's load model: `load`, `[scenarios.sweep]` (closed-loop concurrency steps) and
//! `[scenarios.rate]` (open-loop arrivals), see [`crate::load`]; and the campaign's phases
//! adding up to at most [`MAX_PLAN_SPAN_US`].

use super::error::{CampaignError, invalid};
use super::file::ScenarioSection;
use crate::load::{
    Arrivals, DEFAULT_MAX_QUEUE_MS, DEFAULT_SWEEP_STEPS, KneeRule, LoadKind, LoadModel, RateSpec,
    SweepSpec,
};
use crate::metrics::Metric;
use crate::plan::RoundsSpec;

/// Longest campaign, µs from its start to the end of its last phase: 10,000 years (every
/// single load model at its largest fits; a sum of many that does not is refused, so that no
/// planned instant can overflow).
pub const MAX_PLAN_SPAN_US: u64 = 10_000 * 365 * 86_400 * 1_000_000;

/// The phases of `rounds` and `loads` (as [`crate::plan::Plan::phases`] lays them out), added with checked
/// arithmetic: at most [`MAX_PLAN_SPAN_US`].
pub(super) fn check_span(rounds: &RoundsSpec, loads: &[LoadModel]) -> Result<(), CampaignError> {
    let too_long = |key: String| {
        invalid(
            key,
            "the campaign's phases up to this one last more than the maximum, 10000 years",
        )
    };
    let settle = crate::plan::PHASE_SETTLE_US;
    let mut at: u64 = 0;
    if loads.iter().any(LoadModel::is_rounds) {
        at = u64::from(rounds.count)
            .checked_mul(rounds.interval_ms)
            .and_then(|ms| ms.checked_mul(1000))
            .and_then(|us| us.checked_add(settle))
            .filter(|&us| us <= MAX_PLAN_SPAN_US)
            .ok_or_else(|| too_long("rounds".into()))?;
    }
    for (i, load) in loads.iter().enumerate() {
        let span_us = match load {
            LoadModel::Rounds => continue,
            LoadModel::Sweep(sw) => (sw.concurrency.len() as u64)
                .checked_mul(sw.step_ms)
                .and_then(|ms| ms.checked_mul(1000)),
            LoadModel::Rate(r) => r
                .duration_ms
                .checked_mul(1000)
                .and_then(|us| us.checked_mul(u64::from(r.step_count()))),
        };
        at = span_us
            .and_then(|us| at.checked_add(us))
            .and_then(|us| us.checked_add(settle))
            .filter(|&us| us <= MAX_PLAN_SPAN_US)
            .ok_or_else(|| too_long(format!("scenarios[{i}]")))?;
    }
    Ok(())
}

/// A number of seconds in `(0, max_s]` as ms.
fn check_positive_s(key: String, s: f64, max_s: f64) -> Result<u64, CampaignError> {
    if s.is_finite() && s > 0.0 && s <= max_s {
        Ok(((s * 1000.0).round() as u64).max(1))
    } else {
        Err(invalid(
            key,
            format!("{s} is not a duration in seconds in (0, {max_s}]"),
        ))
    }
}

/// Most steps a sweep may have, and the largest concurrency of a step.
const MAX_SWEEP_STEPS: usize = 64;
const MAX_CONCURRENCY: u32 = 100_000;
/// Most arrivals one (rate scenario, provider) may plan per agent.
const MAX_ARRIVALS: f64 = 10_000_000.0;

/// `load`, `sweep` and `rate` of `scenarios[i]`.
pub(super) fn validate_load(i: usize, s: &ScenarioSection) -> Result<LoadModel, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    let kind = match (s.load.as_deref(), &s.sweep, &s.rate) {
        (None, None, None) => LoadKind::Rounds,
        (None, Some(_), None) => LoadKind::Sweep,
        (None, None, Some(_)) => LoadKind::Rate,
        (None, Some(_), Some(_)) => {
            return Err(invalid(
                key("load"),
                "both [sweep] and [rate] given: set load = \"sweep\" or \"rate\" and keep one",
            ));
        }
        (Some(name), _, _) => LoadKind::parse(name)
            .filter(|_| !name.is_empty())
            .ok_or_else(|| {
                invalid(
                    key("load"),
                    format!("{name:?} is not a load model (rounds, sweep, rate)"),
                )
            })?,
    };
    let stray = match kind {
        LoadKind::Rounds => s
            .sweep
            .as_ref()
            .map(|_| "sweep")
            .or(s.rate.as_ref().map(|_| "rate")),
        LoadKind::Sweep => s.rate.as_ref().map(|_| "rate"),
        LoadKind::Rate => s.sweep.as_ref().map(|_| "sweep"),
    };
    if let Some(table) = stray {
        return Err(invalid(key(table), format!("given, but load = \"{kind}\"")));
    }
    match kind {
        LoadKind::Rounds => Ok(LoadModel::Rounds),
        LoadKind::Sweep => {
            let sw = s.sweep.as_ref().ok_or_else(|| {
                invalid(
                    key("sweep"),
                    "missing: a sweep needs [scenarios.sweep] with step_s (and optionally concurrency = [4, 8, 16, 32])",
                )
            })?;
            let key = |field: &str| format!("scenarios[{i}].sweep.{field}");
            let concurrency = sw
                .concurrency
                .clone()
                .unwrap_or_else(|| DEFAULT_SWEEP_STEPS.to_vec());
            if concurrency.is_empty() || concurrency.len() > MAX_SWEEP_STEPS {
                return Err(invalid(
                    key("concurrency"),
                    format!("name 1..={MAX_SWEEP_STEPS} steps"),
                ));
            }
            for (j, c) in concurrency.iter().enumerate() {
                if *c == 0 || *c > MAX_CONCURRENCY {
                    return Err(invalid(
                        key(&format!("concurrency[{j}]")),
                        format!("{c} is not in 1..={MAX_CONCURRENCY}"),
                    ));
                }
                if j > 0 && *c <= concurrency[j - 1] {
                    return Err(invalid(
                        key(&format!("concurrency[{j}]")),
                        format!(
                            "{c} is not above the step before ({}): steps must increase",
                            concurrency[j - 1]
                        ),
                    ));
                }
            }
            let step_ms = check_positive_s(key("step_s"), sw.step_s, 86_400.0)?;
            if sw.step_requests == Some(0) {
                return Err(invalid(key("step_requests"), "must be at least 1"));
            }
            let d = KneeRule::default();
            let metric = match sw.knee_metric.as_deref() {
                None => d.metric,
                Some(m) => match Metric::parse(m) {
                    Some(m @ (Metric::Ttft | Metric::Ttfc | Metric::E2e)) => m,
                    _ => {
                        return Err(invalid(
                            key("knee_metric"),
                            format!("{m:?} is not ttft, ttfc or e2e"),
                        ));
                    }
                },
            };
            let percentile = sw.knee_percentile.unwrap_or(d.percentile);
            if !(percentile > 0.0 && percentile < 100.0) {
                return Err(invalid(
                    key("knee_percentile"),
                    format!("{percentile} is not in (0, 100)"),
                ));
            }
            let elasticity = sw.knee_elasticity.unwrap_or(d.elasticity);
            if !(elasticity.is_finite() && elasticity > 0.0) {
                return Err(invalid(
                    key("knee_elasticity"),
                    format!("{elasticity} is not a number above 0"),
                ));
            }
            let error_pct = sw.knee_error_pct.unwrap_or(d.error_pct);
            if !(error_pct > 0.0 && error_pct <= 100.0) {
                return Err(invalid(
                    key("knee_error_pct"),
                    format!("{error_pct} is not in (0, 100]"),
                ));
            }
            let min_requests = sw.knee_min_requests.unwrap_or(d.min_requests);
            if min_requests == 0 {
                return Err(invalid(
                    key("knee_min_requests"),
                    "must be at least 1 (default 30)",
                ));
            }
            Ok(LoadModel::Sweep(SweepSpec {
                concurrency,
                step_ms,
                step_requests: sw.step_requests,
                knee: KneeRule {
                    metric,
                    percentile,
                    elasticity,
                    error_pct,
                    min_requests,
                },
            }))
        }
        LoadKind::Rate => {
            let r = s.rate.as_ref().ok_or_else(|| {
                invalid(
                    key("rate"),
                    "missing: an open-loop scenario needs [scenarios.rate] with rps and duration_s",
                )
            })?;
            let key = |field: &str| format!("scenarios[{i}].rate.{field}");
            if !(r.rps.is_finite() && r.rps > 0.0 && r.rps <= 100_000.0) {
                return Err(invalid(
                    key("rps"),
                    format!("{} is not in (0, 100000] requests per second", r.rps),
                ));
            }
            let duration_ms = check_positive_s(key("duration_s"), r.duration_s, 86_400.0)?;
            if r.rps * r.duration_s > MAX_ARRIVALS {
                return Err(invalid(
                    key("duration_s"),
                    format!(
                        "{} rps × {} s = {} arrivals per provider: more than {MAX_ARRIVALS}",
                        r.rps,
                        r.duration_s,
                        r.rps * r.duration_s
                    ),
                ));
            }
            let arrivals = match r.arrivals.as_deref() {
                None | Some("constant") => Arrivals::Constant,
                Some("poisson") => Arrivals::Poisson,
                Some(other) => {
                    return Err(invalid(
                        key("arrivals"),
                        format!("{other:?} is not constant or poisson"),
                    ));
                }
            };
            let max_queue_ms = match r.max_queue_s {
                None => DEFAULT_MAX_QUEUE_MS,
                Some(q) => check_positive_s(key("max_queue_s"), q, 3_600.0)?,
            };
            Ok(LoadModel::Rate(RateSpec {
                rps: r.rps,
                arrivals,
                duration_ms,
                max_queue_ms,
                // TODO(H1 core-campaign): `rps = [..]`, `rps = { from, to, steps }`,
                // `[scenarios.rate.search]`, `arrivals = "gamma"` with `burstiness`.
                steps_rps: Vec::new(),
                search: None,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::load_toml_str;
    use crate::campaign::test_support::{GOOD, err_of};

    #[test]
    fn load_model_errors_name_the_key() {
        let sweep =
            |keys: &str| GOOD.replace("max_tokens = 32", &format!("max_tokens = 32\n{keys}"));
        let cases = [
            (
                sweep("load = \"burst\""),
                "scenarios[0].load",
                "not a load model",
            ),
            (sweep("load = \"sweep\""), "scenarios[0].sweep", "missing"),
            (
                sweep("[scenarios.sweep]\nconcurrency = [4, 2]\nstep_s = 1"),
                "scenarios[0].sweep.concurrency[1]",
                "must increase",
            ),
            (
                sweep("[scenarios.sweep]\nconcurrency = [0]\nstep_s = 1"),
                "scenarios[0].sweep.concurrency[0]",
                "not in 1..=",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 0"),
                "scenarios[0].sweep.step_s",
                "(0, 86400]",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 1\nknee_min_requests = 0"),
                "scenarios[0].sweep.knee_min_requests",
                "at least 1",
            ),
            (
                sweep("[scenarios.sweep]\nstep_s = 1\nknee_metric = \"tpot\""),
                "scenarios[0].sweep.knee_metric",
                "not ttft",
            ),
            (
                sweep("[scenarios.rate]\nrps = 0\nduration_s = 1"),
                "scenarios[0].rate.rps",
                "not in (0, 100000]",
            ),
            (
                sweep("[scenarios.rate]\nrps = 10000\nduration_s = 86400"),
                "scenarios[0].rate.duration_s",
                "arrivals per provider",
            ),
            (
                sweep("[scenarios.rate]\nrps = 1\nduration_s = 1\narrivals = \"bursty\""),
                "scenarios[0].rate.arrivals",
                "constant or poisson",
            ),
            (
                sweep("load = \"rounds\"\n[scenarios.rate]\nrps = 1\nduration_s = 1"),
                "scenarios[0].rate",
                "load = \"rounds\"",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "max_in_flight = 0"),
                "providers[0].max_in_flight",
                "at least 1",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "price_input_usd_per_mtok = 0.3"),
                "providers[0].price_output_usd_per_mtok",
                "both prices",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "requests_per_min = -1"),
                "providers[0].requests_per_min",
                "above 0",
            ),
        ];
        for (text, key, what) in cases {
            let e = err_of(&text);
            assert!(
                e.contains(key) && e.contains(what),
                "error {e:?} should name {key} and say {what}"
            );
        }
        // A rounds scenario needs [rounds]; a campaign of sweeps does not.
        let no_rounds = GOOD.replace("[rounds]\ncount = 3\ninterval_s = 2.0\ngap_ms = 100\n", "");
        assert!(err_of(&no_rounds).contains("rounds: missing"));
        let sweep_only = no_rounds.replace(
            "max_tokens = 32",
            "max_tokens = 32\n[scenarios.sweep]\nstep_s = 2",
        );
        let plan = load_toml_str(&sweep_only, Path::new(".")).unwrap();
        assert_eq!(plan.scenarios[0].load.kind(), LoadKind::Sweep);
        assert_eq!(plan.phases().len(), 1);
    }
}
