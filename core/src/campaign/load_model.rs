//! A scenario's load model: `load`, `[scenarios.sweep]` (closed-loop concurrency steps) and
//! `[scenarios.rate]` (open-loop arrivals: one rate, rate steps as a list or a geometric
//! ramp, or `[scenarios.rate.search]`, the SLO search; constant, Poisson or gamma arrivals),
//! see [`crate::load`]; and the campaign's phases adding up to at most [`MAX_PLAN_SPAN_US`].

use super::error::{CampaignError, invalid};
use super::file::{ProviderSection, ScenarioSection, SearchSection};
use super::workload::Workload;
use crate::load::{
    Arrivals, DEFAULT_MAX_QUEUE_MS, DEFAULT_SEARCH_MIN_REQUESTS, DEFAULT_SEARCH_RESOLUTION_PCT,
    DEFAULT_SWEEP_STEPS, KneeRule, LoadKind, LoadModel, MAX_SEARCH_STEPS, RateSpec, SloSearch,
    SweepSpec,
};
use crate::metrics::Metric;
use crate::plan::RoundsSpec;
use crate::slo::MIN_GOODPUT_REQUESTS;

/// Longest campaign, µs from its start to the end of its last phase: 10,000 years (every
/// single load model at its largest fits; a sum of many that does not is refused, so that no
/// planned instant can overflow).
pub const MAX_PLAN_SPAN_US: u64 = 10_000 * 365 * 86_400 * 1_000_000;

/// The phases of `rounds` and `loads` (as [`crate::plan::Plan::phases`] lays them out), added with checked
/// arithmetic: at most [`MAX_PLAN_SPAN_US`].
/// `loads` are the plan's scenarios' load models, each with the index of its file scenario
/// (a scenario with `input_tokens` tiers is a phase per tier).
pub(super) fn check_span(
    rounds: &RoundsSpec,
    loads: &[(usize, LoadModel)],
) -> Result<(), CampaignError> {
    let too_long = |key: String| {
        invalid(
            key,
            "the campaign's phases up to this one last more than the maximum, 10000 years",
        )
    };
    let settle = crate::plan::PHASE_SETTLE_US;
    let pause = crate::plan::pause_after_us;
    let mut at: u64 = 0;
    if loads.iter().any(|(_, l)| l.is_rounds()) {
        at = u64::from(rounds.count)
            .checked_mul(rounds.interval_ms)
            .and_then(|ms| ms.checked_mul(1000))
            .and_then(|us| us.checked_add(settle))
            .filter(|&us| us <= MAX_PLAN_SPAN_US)
            .ok_or_else(|| too_long("rounds".into()))?;
    }
    for (i, load) in loads {
        let span_us = match load {
            LoadModel::Rounds => continue,
            LoadModel::Sweep(sw) => (sw.concurrency.len() as u64)
                .checked_mul(sw.step_ms)
                .and_then(|ms| ms.checked_mul(1000)),
            LoadModel::Rate(r) => r
                .duration_ms
                .checked_mul(1000)
                .and_then(|us| us.checked_mul(if r.search.is_some() { 2 } else { 1 }))
                .and_then(|us| us.checked_mul(u64::from(r.step_count()))),
        };
        at = span_us
            .and_then(|us| at.checked_add(us))
            .and_then(|us| us.checked_add(pause(load)))
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
/// Smallest gamma shape (`burstiness`): below 1 arrivals come in clusters of about
/// `1 / burstiness` at almost the same instant, so a tiny shape would plan billions of
/// arrivals at the start of a step whatever `rps` says.
const MIN_BURSTINESS: f64 = 0.01;
/// Largest gamma shape (`burstiness`): near-constant gaps.
const MAX_BURSTINESS: f64 = 100.0;
/// Most steps of a rate sweep (`rps` as a list or a ramp).
const MAX_RATE_STEPS: usize = 64;
/// Default steps of an SLO search.
const DEFAULT_SEARCH_STEPS: u32 = 8;
/// Most arrivals one (rate step, provider) may plan per agent.
const MAX_ARRIVALS: f64 = 10_000_000.0;

/// `load`, `sweep` and `rate` of `scenarios[i]`.
pub(super) fn validate_load(
    i: usize,
    s: &ScenarioSection,
    workload: &Workload,
    providers: &[ProviderSection],
) -> Result<LoadModel, CampaignError> {
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
        LoadKind::Rate => validate_rate(i, s, workload, providers).map(LoadModel::Rate),
    }
}

/// Largest rate of a step, requests/s per provider and agent.
const MAX_RPS: f64 = 100_000.0;

/// `[scenarios.rate]` of `scenarios[i]` (a `rate` scenario).
fn validate_rate(
    i: usize,
    s: &ScenarioSection,
    workload: &Workload,
    providers: &[ProviderSection],
) -> Result<RateSpec, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].rate.{field}");
    let r = s.rate.as_ref().ok_or_else(|| {
        invalid(
            format!("scenarios[{i}].rate"),
            "missing: an open-loop scenario needs [scenarios.rate] with rps and duration_s",
        )
    })?;
    let duration_ms = check_positive_s(key("duration_s"), r.duration_s, 86_400.0)?;
    let arrivals = match (r.arrivals.as_deref(), r.burstiness) {
        (Some("gamma"), Some(b)) if (MIN_BURSTINESS..=MAX_BURSTINESS).contains(&b) => {
            Arrivals::Gamma { burstiness: b }
        }
        (Some("gamma"), Some(b)) => {
            return Err(invalid(
                key("burstiness"),
                format!(
                    "{b} is not in [{MIN_BURSTINESS}, {MAX_BURSTINESS}] (1: Poisson, below 1: burstier)"
                ),
            ));
        }
        (Some("gamma"), None) => {
            return Err(invalid(
                key("burstiness"),
                format!(
                    "missing: arrivals = \"gamma\" needs burstiness, the gamma shape in [{MIN_BURSTINESS}, {MAX_BURSTINESS}] (1: Poisson, below 1: burstier)"
                ),
            ));
        }
        (_, Some(_)) => {
            return Err(invalid(
                key("burstiness"),
                "applies to arrivals = \"gamma\" only: set it, or leave burstiness out",
            ));
        }
        (None | Some("constant"), None) => Arrivals::Constant,
        (Some("poisson"), None) => Arrivals::Poisson,
        (Some(other), None) => {
            return Err(invalid(
                key("arrivals"),
                format!("{other:?} is not constant, poisson or gamma"),
            ));
        }
    };
    let max_queue_ms = match r.max_queue_s {
        None => DEFAULT_MAX_QUEUE_MS,
        Some(q) => check_positive_s(key("max_queue_s"), q, 3_600.0)?,
    };
    let (rps, steps_rps, search) = match (&r.search, &r.rps) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                key("rps"),
                "given with [scenarios.rate.search], which picks each step's rate from min_rps up: leave rps out",
            ));
        }
        (None, None) => {
            return Err(invalid(
                key("rps"),
                "missing: a number, a list of steps ([2, 4, 8]) or a ramp ({ from = 1, to = 16, steps = 5 }); or a [scenarios.rate.search]",
            ));
        }
        (None, Some(v)) => {
            let steps = check_rps(&key("rps"), v)?;
            let rps = steps[0];
            let steps_rps = if matches!(v, serde_json::Value::Number(_)) {
                Vec::new()
            } else {
                steps
            };
            (rps, steps_rps, None)
        }
        (Some(sec), None) => {
            // How much a step's arrival count varies around rps × duration (variance over
            // mean): 0 for constant spacing, 1 for a Poisson process, 1 / burstiness for gamma
            // gaps (a renewal process's count has the gaps' squared coefficient of variation).
            let count_dispersion = match r.arrivals.as_deref() {
                Some("poisson") => 1.0,
                Some("gamma") => 1.0 / r.burstiness.filter(|b| *b > 0.0).unwrap_or(1.0),
                _ => 0.0,
            };
            let search = check_search(i, sec, r.duration_s, count_dispersion, workload, providers)?;
            (search.min_rps, Vec::new(), Some(search))
        }
    };
    if search.is_none() && f64::from(workload.warmup) >= rps * r.duration_s {
        return Err(invalid(
            format!("scenarios[{i}].warmup"),
            format!(
                "{} warm-up arrivals, and the first step has about {} ({rps} rps × {} s): none of it would be measured",
                workload.warmup,
                rps * r.duration_s,
                r.duration_s
            ),
        ));
    }
    // The arrival-count cap applies to the largest step.
    let top_rps = search
        .as_ref()
        .map_or_else(|| steps_rps.last().copied().unwrap_or(rps), |x| x.max_rps);
    if top_rps * r.duration_s > MAX_ARRIVALS {
        return Err(invalid(
            key("duration_s"),
            format!(
                "{top_rps} rps × {} s = {} arrivals per provider: more than {MAX_ARRIVALS}",
                r.duration_s,
                top_rps * r.duration_s
            ),
        ));
    }
    Ok(RateSpec {
        rps,
        arrivals,
        duration_ms,
        max_queue_ms,
        steps_rps,
        search,
    })
}

/// `rps`: a number, a list of steps (strictly increasing) or `{ from, to, steps }` (a
/// geometric ramp); each rate in (0, [`MAX_RPS`]]. The step rates (one for a number).
fn check_rps(key: &str, v: &serde_json::Value) -> Result<Vec<f64>, CampaignError> {
    let rate = |key: &str, v: &serde_json::Value| -> Result<f64, CampaignError> {
        v.as_f64()
            .filter(|r| r.is_finite() && *r > 0.0 && *r <= MAX_RPS)
            .ok_or_else(|| {
                invalid(
                    key,
                    format!("{v} is not in (0, 100000] requests per second"),
                )
            })
    };
    match v {
        serde_json::Value::Number(_) => Ok(vec![rate(key, v)?]),
        serde_json::Value::Array(items) => {
            if items.is_empty() || items.len() > MAX_RATE_STEPS {
                return Err(invalid(
                    key,
                    format!("name 1..={MAX_RATE_STEPS} steps, e.g. [2, 4, 8]"),
                ));
            }
            let mut steps: Vec<f64> = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                let k = format!("{key}[{j}]");
                let r = rate(&k, item)?;
                if let Some(&before) = steps.last()
                    && r <= before
                {
                    return Err(invalid(
                        k,
                        format!("{r} is not above the step before ({before}): steps must increase"),
                    ));
                }
                steps.push(r);
            }
            Ok(steps)
        }
        serde_json::Value::Object(map) => {
            for k in map.keys() {
                if !matches!(k.as_str(), "from" | "to" | "steps") {
                    return Err(invalid(
                        format!("{key}.{k}"),
                        "is not a key of a ramp: { from = 1, to = 16, steps = 5 }",
                    ));
                }
            }
            let get = |k: &str| {
                map.get(k).ok_or_else(|| {
                    invalid(
                        format!("{key}.{k}"),
                        "missing: a ramp is { from = 1, to = 16, steps = 5 }",
                    )
                })
            };
            let from = rate(&format!("{key}.from"), get("from")?)?;
            let to = rate(&format!("{key}.to"), get("to")?)?;
            let steps_v = get("steps")?;
            let steps = steps_v
                .as_u64()
                .filter(|n| (2..=MAX_RATE_STEPS as u64).contains(n))
                .ok_or_else(|| {
                    invalid(
                        format!("{key}.steps"),
                        format!("{steps_v} is not a whole number in 2..={MAX_RATE_STEPS}"),
                    )
                })?;
            if from >= to {
                return Err(invalid(
                    format!("{key}.to"),
                    format!("{to} is not above from ({from}): a ramp goes up"),
                ));
            }
            let rates = geometric_ramp(from, to, steps as u32);
            if rates.windows(2).any(|w| w[1] <= w[0]) {
                return Err(invalid(
                    format!("{key}.steps"),
                    format!(
                        "{steps} steps from {from} to {to} are closer than a millionth of a request per second: fewer steps"
                    ),
                ));
            }
            Ok(rates)
        }
        other => Err(invalid(
            key,
            format!(
                "{other} is not a rate: a number, a list of steps ([2, 4, 8]) or a ramp ({{ from = 1, to = 16, steps = 5 }})"
            ),
        )),
    }
}

/// `steps` rates from `from` to `to` (both included), each the same factor above the one
/// before, rounded to a millionth of a request per second.
pub(super) fn geometric_ramp(from: f64, to: f64, steps: u32) -> Vec<f64> {
    let last = f64::from(steps - 1);
    (0..steps)
        .map(|k| {
            let r = if k == 0 {
                from
            } else if k == steps - 1 {
                to
            } else {
                from * (to / from).powf(f64::from(k) / last)
            };
            (r * 1e6).round() / 1e6
        })
        .collect()
}

/// `[scenarios.rate.search]` of `scenarios[i]`, whose steps last `duration_s`.
fn check_search(
    i: usize,
    sec: &SearchSection,
    duration_s: f64,
    count_dispersion: f64,
    workload: &Workload,
    providers: &[ProviderSection],
) -> Result<SloSearch, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].rate.search.{field}");
    if workload.slo.is_none() {
        return Err(invalid(
            format!("scenarios[{i}].rate.search"),
            "searches for the highest rate meeting the scenario's slo, and the scenario has none: add slo = { ttft_ms = …, … }",
        ));
    }
    let rate = |field: &str, r: f64| {
        if r.is_finite() && r > 0.0 && r <= MAX_RPS {
            Ok(r)
        } else {
            Err(invalid(
                key(field),
                format!("{r} is not in (0, 100000] requests per second"),
            ))
        }
    };
    let min_rps = rate("min_rps", sec.min_rps)?;
    let max_rps = rate("max_rps", sec.max_rps)?;
    if max_rps <= min_rps {
        return Err(invalid(
            key("max_rps"),
            format!("{max_rps} is not above min_rps ({min_rps})"),
        ));
    }
    let steps = sec.steps.unwrap_or(DEFAULT_SEARCH_STEPS);
    if !(2..=MAX_SEARCH_STEPS).contains(&steps) {
        return Err(invalid(
            key("steps"),
            format!("{steps} is not in 2..={MAX_SEARCH_STEPS}"),
        ));
    }
    let min_requests = sec.min_requests.unwrap_or(DEFAULT_SEARCH_MIN_REQUESTS);
    if u64::from(min_requests) < MIN_GOODPUT_REQUESTS {
        return Err(invalid(
            key("min_requests"),
            format!(
                "{min_requests} is below {MIN_GOODPUT_REQUESTS}: a step's goodput has no verdict with fewer judged requests (docs/metrics.md \"SLOs and goodput\"), so such a step would end the search unjudged (default {DEFAULT_SEARCH_MIN_REQUESTS})"
            ),
        ));
    }
    let resolution_pct = sec.resolution_pct.unwrap_or(DEFAULT_SEARCH_RESOLUTION_PCT);
    if !(resolution_pct > 0.0 && resolution_pct <= 100.0) {
        return Err(invalid(
            key("resolution_pct"),
            format!("{resolution_pct} is not in (0, 100]"),
        ));
    }
    // Warm-up arrivals of step 0 are not judged. Random arrivals: the count must reach
    // min_requests three standard deviations below its mean, or the first step too often
    // has too few.
    let expected = min_rps * duration_s;
    let margin = 3.0 * (count_dispersion * expected).sqrt();
    let judged = expected - margin - f64::from(workload.warmup);
    if judged < f64::from(min_requests) {
        let warmup = if workload.warmup > 0 {
            format!(" less {} warm-up", workload.warmup)
        } else {
            String::new()
        };
        let random = if margin > 0.0 {
            format!(
                " (random arrivals: {expected} expected, at least {:.0} in all but about 1 step in 700)",
                expected - margin
            )
        } else {
            String::new()
        };
        return Err(invalid(
            key("min_requests"),
            format!(
                "a step at min_rps cannot reach min_requests: {min_rps} rps × {duration_s} s = {expected} arrivals{random}{warmup}, fewer than {min_requests}; lengthen duration_s or raise min_rps"
            ),
        ));
    }
    // A rate cap of a provider bounds the rate any agent can send it at (at least: with N
    // agents sharing requests_per_min each keeps 1/N of it).
    for p in providers {
        let caps = [
            p.requests_per_min
                .filter(|r| r.is_finite() && *r > 0.0)
                .map(|r| (r / 60.0, format!("requests_per_min = {r}"))),
            p.min_gap_ms
                .filter(|&g| g > 0)
                .map(|g| (1000.0 / g as f64, format!("min_gap_ms = {g}"))),
            // Generated prompts: at least the smallest tier and max_tokens per request.
            p.tokens_per_min
                .filter(|t| t.is_finite() && *t > 0.0)
                .zip(workload.tiers.first())
                .map(|(t, &tier)| {
                    let per_request = f64::from(tier) + f64::from(workload.max_tokens);
                    (
                        t / 60.0 / per_request,
                        format!(
                            "tokens_per_min = {t}, at {per_request} tokens a request (input_tokens + max_tokens)"
                        ),
                    )
                }),
        ];
        for (cap_rps, why) in caps.into_iter().flatten() {
            if max_rps > cap_rps {
                return Err(invalid(
                    key("max_rps"),
                    format!(
                        "{max_rps} rps is above what provider {:?} may be sent ({why}: at most {} rps per agent): steps above it would measure latmesh's cap, not the provider; lower max_rps",
                        p.name,
                        (cap_rps * 1000.0).round() / 1000.0
                    ),
                ));
            }
        }
    }
    Ok(SloSearch {
        min_rps,
        max_rps,
        steps,
        min_requests,
        resolution_pct,
    })
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
                "constant, poisson or gamma",
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

    /// GOOD's scenario as a rate scenario with these `[scenarios.rate]` lines (and `extra`
    /// scenario keys).
    fn rate(extra: &str, lines: &str) -> String {
        GOOD.replace(
            "max_tokens = 32",
            &format!("max_tokens = 32\n{extra}\n[scenarios.rate]\n{lines}"),
        )
    }

    fn rate_of(text: &str) -> RateSpec {
        let plan = load_toml_str(text, Path::new(".")).unwrap();
        match &plan.scenarios[0].load {
            LoadModel::Rate(r) => r.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rps_is_a_number_a_list_or_a_ramp() {
        let r = rate_of(&rate("", "rps = 3\nduration_s = 10"));
        assert_eq!(
            (r.rps, r.steps_rps.clone(), r.step_count()),
            (3.0, vec![], 1)
        );
        let r = rate_of(&rate("", "rps = [2, 4, 8.5]\nduration_s = 10"));
        assert_eq!((r.rps, r.steps_rps.clone()), (2.0, vec![2.0, 4.0, 8.5]));
        assert_eq!(
            (r.step_count(), r.step_rps(2), r.span_us()),
            (3, Some(8.5), 30_000_000)
        );
        let r = rate_of(&rate(
            "",
            "rps = { from = 1, to = 16, steps = 5 }\nduration_s = 10",
        ));
        assert_eq!(
            (r.rps, r.steps_rps.clone()),
            (1.0, vec![1.0, 2.0, 4.0, 8.0, 16.0])
        );
        assert_eq!(geometric_ramp(2.0, 5.0, 3), vec![2.0, 3.162278, 5.0]);
        let r = rate_of(&rate(
            "",
            "rps = 1\nduration_s = 10\narrivals = \"gamma\"\nburstiness = 0.5",
        ));
        assert_eq!(r.arrivals, Arrivals::Gamma { burstiness: 0.5 });
        // The phase of a sweep of rates lasts every step.
        let plan = load_toml_str(
            &rate("", "rps = [1, 2, 3]\nduration_s = 10")
                .replace("[rounds]\ncount = 3\ninterval_s = 2.0\ngap_ms = 100\n", ""),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.phases()[0].span_us, 30_000_000);
    }

    #[test]
    fn a_search_needs_an_slo_and_picks_the_rates() {
        let slo = "slo = { ttft_ms = 1000 }";
        let r = rate_of(&rate(
            slo,
            "duration_s = 10\n[scenarios.rate.search]\nmin_rps = 2\nmax_rps = 64",
        ));
        assert_eq!(
            r.search,
            Some(SloSearch {
                min_rps: 2.0,
                max_rps: 64.0,
                steps: 8,
                min_requests: 20,
                resolution_pct: 10.0,
            })
        );
        assert_eq!((r.rps, r.step_count(), r.step_rps(0)), (2.0, 8, None));
        let r = rate_of(&rate(
            slo,
            "duration_s = 10\n[scenarios.rate.search]\nmin_rps = 3\nmax_rps = 4\nsteps = 3\nmin_requests = 25\nresolution_pct = 25",
        ));
        let s = r.search.unwrap();
        assert_eq!((s.steps, s.min_requests, s.resolution_pct), (3, 25, 25.0));
        // A provider capped below max_rps; max_in_flight alone bounds no rate.
        let capped = |cap: &str| {
            rate(
                slo,
                "duration_s = 10\n[scenarios.rate.search]\nmin_rps = 2\nmax_rps = 64",
            )
            .replace("api_key_env = \"A_KEY\"", cap)
        };
        assert!(load_toml_str(&capped("max_in_flight = 2"), Path::new(".")).is_ok());
        assert!(load_toml_str(&capped("requests_per_min = 3840"), Path::new(".")).is_ok());
        let e = err_of(&capped("requests_per_min = 600"));
        assert!(
            e.starts_with("scenarios[0].rate.search.max_rps: 64 rps is above what provider \"a\" may be sent (requests_per_min = 600: at most 10 rps per agent)"),
            "{e}"
        );
        let e = err_of(&capped("min_gap_ms = 100"));
        assert!(
            e.contains("(min_gap_ms = 100: at most 10 rps per agent)"),
            "{e}"
        );
        // tokens_per_min bounds the rate of generated prompts: 1000 + 200 tokens a request.
        let generated = |cap: &str| {
            capped(cap)
                .replace(
                    "prompt_ids = [\"short-qa-en-*\"]",
                    "input_tokens = [1000, 8000]",
                )
                .replace("max_tokens = 32", "output_tokens = 200")
        };
        assert!(load_toml_str(&generated("tokens_per_min = 4608000"), Path::new(".")).is_ok());
        let e = err_of(&generated("tokens_per_min = 720000"));
        assert!(
            e.contains("(tokens_per_min = 720000, at 1200 tokens a request (input_tokens + max_tokens): at most 10 rps per agent)"),
            "{e}"
        );
        // For prompts of the prompt set it is left to the agents (their size is an estimate).
        assert!(load_toml_str(&capped("tokens_per_min = 60"), Path::new(".")).is_ok());
    }

    #[test]
    fn rate_refusals_name_the_key() {
        let slo = "slo = { ttft_ms = 1000 }";
        let search = |lines: &str| {
            rate(
                slo,
                &format!("duration_s = 10\n[scenarios.rate.search]\n{lines}"),
            )
        };
        let cases = [
            (
                rate("", "rps = [2, 2]\nduration_s = 1"),
                "scenarios[0].rate.rps[1]: 2 is not above the step before (2): steps must increase",
            ),
            (
                rate("", "rps = [2, 0]\nduration_s = 1"),
                "scenarios[0].rate.rps[1]: 0 is not in (0, 100000]",
            ),
            (
                rate("", "rps = []\nduration_s = 1"),
                "scenarios[0].rate.rps: name 1..=64 steps",
            ),
            (
                rate("", "rps = \"fast\"\nduration_s = 1"),
                "scenarios[0].rate.rps: \"fast\" is not a rate",
            ),
            (
                rate("", "rps = { from = 4, to = 2, steps = 3 }\nduration_s = 1"),
                "scenarios[0].rate.rps.to: 2 is not above from (4)",
            ),
            (
                rate("", "rps = { from = 1, to = 2, steps = 1 }\nduration_s = 1"),
                "scenarios[0].rate.rps.steps: 1 is not a whole number in 2..=64",
            ),
            (
                rate("", "rps = { from = 1, to = 2, steps = 65 }\nduration_s = 1"),
                "scenarios[0].rate.rps.steps: 65 is not a whole number in 2..=64",
            ),
            (
                rate("", "rps = { from = 1, to = 2 }\nduration_s = 1"),
                "scenarios[0].rate.rps.steps: missing",
            ),
            (
                rate(
                    "",
                    "rps = { from = 1, to = 2, steps = 3, by = 2 }\nduration_s = 1",
                ),
                "scenarios[0].rate.rps.by: is not a key of a ramp",
            ),
            (
                rate(
                    "",
                    "rps = { from = 1, to = 1.00001, steps = 64 }\nduration_s = 1",
                ),
                "scenarios[0].rate.rps.steps: 64 steps from 1 to 1.00001 are closer",
            ),
            (
                rate("", "rps = [1, 10000]\nduration_s = 86400"),
                "scenarios[0].rate.duration_s: 10000 rps × 86400 s",
            ),
            (
                rate("", "duration_s = 1"),
                "scenarios[0].rate.rps: missing: a number, a list of steps",
            ),
            (
                rate("", "rps = 1\nduration_s = 1\narrivals = \"gamma\""),
                "scenarios[0].rate.burstiness: missing: arrivals = \"gamma\" needs burstiness",
            ),
            (
                rate(
                    "",
                    "rps = 1\nduration_s = 1\narrivals = \"gamma\"\nburstiness = 0",
                ),
                "scenarios[0].rate.burstiness: 0 is not in [0.01, 100]",
            ),
            // A tiny shape would plan about 1 / burstiness arrivals at a step's start.
            (
                rate(
                    "",
                    "rps = 1\nduration_s = 1\narrivals = \"gamma\"\nburstiness = 1e-9",
                ),
                "scenarios[0].rate.burstiness: 0.000000001 is not in [0.01, 100]",
            ),
            (
                rate(
                    "",
                    "rps = 1\nduration_s = 1\narrivals = \"gamma\"\nburstiness = 101",
                ),
                "scenarios[0].rate.burstiness: 101 is not in [0.01, 100]",
            ),
            (
                rate(
                    "",
                    "rps = 1\nduration_s = 1\narrivals = \"poisson\"\nburstiness = 2",
                ),
                "scenarios[0].rate.burstiness: applies to arrivals = \"gamma\" only",
            ),
            (
                rate(
                    "",
                    "duration_s = 10\n[scenarios.rate.search]\nmin_rps = 1\nmax_rps = 8",
                ),
                "scenarios[0].rate.search: searches for the highest rate meeting the scenario's slo, and the scenario has none",
            ),
            (
                rate(
                    slo,
                    "rps = [1, 2]\nduration_s = 10\n[scenarios.rate.search]\nmin_rps = 1\nmax_rps = 8",
                ),
                "scenarios[0].rate.rps: given with [scenarios.rate.search]",
            ),
            (
                rate(
                    slo,
                    "rps = 1\nduration_s = 10\n[scenarios.rate.search]\nmin_rps = 1\nmax_rps = 8",
                ),
                "scenarios[0].rate.rps: given with [scenarios.rate.search]",
            ),
            (
                search("min_rps = 4\nmax_rps = 4"),
                "scenarios[0].rate.search.max_rps: 4 is not above min_rps (4)",
            ),
            (
                search("min_rps = 0\nmax_rps = 4"),
                "scenarios[0].rate.search.min_rps: 0 is not in (0, 100000]",
            ),
            (
                search("min_rps = 2\nmax_rps = 4\nsteps = 1"),
                "scenarios[0].rate.search.steps: 1 is not in 2..=32",
            ),
            (
                search("min_rps = 2\nmax_rps = 4\nsteps = 33"),
                "scenarios[0].rate.search.steps: 33 is not in 2..=32",
            ),
            (
                search("min_rps = 2\nmax_rps = 4\nmin_requests = 19"),
                "scenarios[0].rate.search.min_requests: 19 is below 20: a step's goodput has no verdict",
            ),
            (
                rate(
                    "slo = { ttft_ms = 500 }",
                    "duration_s = 10\narrivals = \"poisson\"\n[scenarios.rate.search]\nmin_rps = 2\nmax_rps = 4",
                ),
                "scenarios[0].rate.search.min_requests: a step at min_rps cannot reach min_requests: 2 rps × 10 s = 20 arrivals (random arrivals: 20 expected, at least 7 in all but about 1 step in 700), fewer than 20",
            ),
            (
                search("min_rps = 2\nmax_rps = 4\nresolution_pct = 0"),
                "scenarios[0].rate.search.resolution_pct: 0 is not in (0, 100]",
            ),
            (
                search("min_rps = 1\nmax_rps = 4"),
                "scenarios[0].rate.search.min_requests: a step at min_rps cannot reach min_requests: 1 rps × 10 s = 10 arrivals, fewer than 20; lengthen duration_s or raise min_rps",
            ),
            (
                search("min_rps = 2\nmax_rps = 4")
                    .replace(slo, "slo = { ttft_ms = 1000 }\nwarmup = 1"),
                "scenarios[0].rate.search.min_requests: a step at min_rps cannot reach min_requests: 2 rps × 10 s = 20 arrivals less 1 warm-up, fewer than 20",
            ),
            (
                rate("warmup = 10", "rps = 1\nduration_s = 10"),
                "scenarios[0].warmup: 10 warm-up arrivals, and the first step has about 10 (1 rps × 10 s): none of it would be measured",
            ),
            (
                search("min_rps = 2\nmax_rps = 4\nstep = 3"),
                "scenarios[0].rate.search.step: unknown key \"step\" (did you mean \"steps\"?",
            ),
            (
                search("min_rps = 2\nmax_rps = 10000\nsteps = 3")
                    .replace("duration_s = 10", "duration_s = 86400"),
                "scenarios[0].rate.duration_s: 10000 rps × 86400 s",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }
}
