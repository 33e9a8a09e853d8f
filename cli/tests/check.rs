//! `latmesh check` without ClickHouse: rules on known numbers, the previous-day rule on known
//! runs, and the built binary's exit codes, output and webhook POST (received by a local axum
//! server).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use latmesh_cli::cmd::check::{
    CellStats, CheckReport, Estimate, Rule, RuleKind, RunValues, Snapshot, check_filters, evaluate,
    evaluate_prev_day, parse_rules,
};
use latmesh_cli::webhook::post_json;
use latmesh_core::metrics::Metric;
use latmesh_results::summary::Summary;
use serde_json::{Value, json};

/// A summary with one scenario `chat`, region `us-east` (and `ALL`), and per provider
/// (TTFT P50, P90, P99 in ms, error %) over 1000 attempts (enough to support P99).
fn summary(id: &str, cells: &[(&str, [f64; 3], f64)]) -> Summary {
    let mut out = Vec::new();
    for region in ["us-east", "ALL"] {
        for (p, [p50, p90, p99], err) in cells {
            let failed = (10.0 * err).round() as u64;
            out.push(json!({
                "region": region, "provider": p, "scenario": "chat",
                "attempts": 1000, "samples": 1000 - failed,
                "ttft": {"p50_ms": p50, "p90_ms": p90, "p99_ms": p99},
                "ttfc": null, "e2e": {"p50_ms": p50 * 2.0, "p90_ms": p90 * 2.0, "p99_ms": p99 * 2.0},
                "tpot_p50_ms": 10.0, "itl_p50_ms": 10.0, "error_pct": err, "requests": 1000,
                "request_error_pct": err, "throttled_pct": 0.0, "output_tokens_mean": 40.0,
                "tokens_from_usage": 0, "usage_chunk_delta_mean": null,
                "usage_chunk_mismatches": 0, "last_error": null,
                "outcomes": {"ok": 1000 - failed, "http_5xx": failed},
            }));
        }
    }
    serde_json::from_value(json!({
        "campaign_id": id, "name": "nightly", "plan_hash": "0".repeat(64), "metrics_version": 3,
        "start_at_unix_us": 1_700_000_000_000_000i64, "regions": ["us-east"],
        "providers": cells.iter().map(|c| c.0).collect::<Vec<_>>(), "scenarios": ["chat"],
        "cells": out, "agents": [], "complete": true,
    }))
    .unwrap()
}

fn baseline() -> Summary {
    summary(
        "base-1",
        &[
            ("alpha", [100.0, 200.0, 300.0], 0.0),
            ("beta", [100.0, 200.0, 300.0], 1.0),
            ("gamma", [100.0, 200.0, 300.0], 1.0),
        ],
    )
}

/// alpha: P99 +30 % exactly (390 ms), beta: P99 +31 % (393 ms) and 8 % errors (95 % Wilson
/// interval [6.5 %, 9.9 %]); gamma: 6 % errors ([4.7 %, 7.7 %]: not surely over 5 %).
fn current() -> Summary {
    summary(
        "cur-1",
        &[
            ("alpha", [100.0, 200.0, 390.0], 0.0),
            ("beta", [110.0, 200.0, 393.0], 8.0),
            ("gamma", [100.0, 200.0, 300.0], 6.0),
        ],
    )
}

const RULES: &str = r#"
[[rules]]
name = "p99-up-30"
kind = "p99_increase_pct"
metric = "ttft"
threshold = 30

[[rules]]
kind = "absolute"
metric = "e2e"
percentile = 99
limit_ms = 785

[[rules]]
kind = "error_pct_above"
limit_pct = 5
"#;

#[test]
fn rules_parse_with_defaults_and_errors_name_the_rule() {
    let swaps = parse_rules(
        "[[rules]]\nkind = \"model_changed\"\n[[rules]]\nkind = \"fingerprint_changed\"\nregion = \"eu\"\n\
         [[rules]]\nkind = \"answers_changed\"\n[[rules]]\nkind = \"answers_changed\"\nthreshold_pct = 10\n",
    )
    .unwrap();
    let kinds: Vec<RuleKind> = swaps.iter().map(|r| r.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            RuleKind::ModelChanged,
            RuleKind::FingerprintChanged,
            RuleKind::AnswersChanged {
                threshold_pct: 25.0
            },
            RuleKind::AnswersChanged {
                threshold_pct: 10.0
            },
        ]
    );
    assert_eq!(swaps[0].name, "model_changed");
    assert_eq!(swaps[1].region.as_deref(), Some("eu"));
    assert!(
        swaps
            .iter()
            .all(|r| r.kind.is_swap() && !r.kind.is_latency())
    );
    let rules = parse_rules(RULES).unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(rules[0].name, "p99-up-30");
    assert_eq!(
        rules[0].kind,
        RuleKind::IncreasePct {
            threshold_pct: 30.0
        }
    );
    assert_eq!((rules[0].metric, rules[0].percentile), (Metric::Ttft, 99.0));
    assert_eq!(rules[1].name, "absolute e2e P99");
    assert_eq!(rules[1].min_samples, 0, "the sample-size policy alone");
    let prev = parse_rules(
        "[[rules]]\nkind = \"p95_above_prev_day_mean\"\nfactor = 2\nconsecutive_runs = 3\n",
    )
    .unwrap();
    assert_eq!(
        prev[0].kind,
        RuleKind::AbovePrevDayMean {
            factor: 2.0,
            consecutive_runs: 3
        }
    );
    assert_eq!((prev[0].metric, prev[0].percentile), (Metric::Ttft, 95.0));
    for (text, want) in [
        (
            "[[rules]]\nkind = \"p99_increase_pct\"\n",
            "rules[0].threshold: missing",
        ),
        (
            "[[rules]]\nkind = \"absolute\"\nlimit_ms = 5\n",
            "rules[0].percentile: missing",
        ),
        (
            "[[rules]]\nkind = \"faster\"\n",
            "rules[0].kind: \"faster\" is not a rule kind",
        ),
        (
            "[[rules]]\nkind = \"p99_absolute\"\npercentile = 95\nlimit_ms = 1\n",
            "rules[0].percentile: 95 contradicts",
        ),
        (
            "[[rules]]\nkind = \"p99_absolute\"\nmetric = \"speed\"\nlimit_ms = 1\n",
            "rules[0].metric: \"speed\" is not a metric",
        ),
        (
            "[[rules]]\nkind = \"p99_absolute\"\nlimit_ms = 1\nlimt = 2\n",
            "unknown field `limt` (did you mean `limit_ms`?)",
        ),
        ("", "no [[rules]]"),
        (
            "[[rules]]\nkind = \"error_pct_above\"\nlimit_pct = \"5\"\n",
            "line 3, column 13",
        ),
        (
            "[[rules]]\nkind = \"answers_changed\"\nthreshold_pct = 100\n",
            "rules[0].threshold_pct: 100 can never be exceeded",
        ),
        (
            "[[rules]]\nkind = \"answers_changed\"\nthreshold_pct = -1\n",
            "rules[0].threshold_pct: -1 is not a number ≥ 0",
        ),
        (
            "[[rules]]\nkind = \"p99_model_changed\"\n",
            "rules[0].kind: \"p99_model_changed\" is not a rule kind",
        ),
        (
            "[[rules]]\nkind = \"goodput_below\"\nlimit_pct = 90\nmetric = \"ttft\"\n",
            "rules[0].metric: does not apply to kind \"goodput_below\"",
        ),
        (
            "[[rules]]\nkind = \"error_pct_above\"\nlimit_pct = 5\npercentile = 99\n",
            "rules[0].percentile: does not apply to kind \"error_pct_above\"",
        ),
    ] {
        let e = format!("{:#}", parse_rules(text).unwrap_err());
        assert!(e.contains(want), "{want:?} not in {e:?}");
    }
}

#[test]
fn rules_fire_on_known_numbers() {
    let rules = parse_rules(RULES).unwrap();
    let base = Snapshot::from_summary("base-1".into(), &baseline());
    let cur = Snapshot::from_summary("cur-1".into(), &current());
    let r = evaluate(&rules, &cur, Some(&base));
    let fired: Vec<(&str, &str, &str)> = r
        .fired
        .iter()
        .map(|f| (f.rule.as_str(), f.region.as_str(), f.provider.as_str()))
        .collect();
    // alpha's +30.0 % is not above +30 %; beta's +31 % is (summaries carry no intervals:
    // points only). e2e P99: alpha 780 ≤ 785, beta 786. Errors: beta's 8 % is surely over 5 %,
    // gamma's 6 % is not. The ALL rows are not checked by default.
    assert_eq!(
        fired,
        vec![
            ("p99-up-30", "us-east", "beta"),
            ("absolute e2e P99", "us-east", "beta"),
            ("error_pct_above", "us-east", "beta"),
        ]
    );
    let f = &r.fired[0];
    assert_eq!(
        (f.current, f.baseline, f.unit.as_str()),
        (393.0, Some(300.0), "ms")
    );
    assert!((f.limit - 390.0).abs() < 1e-9);
    assert!(
        f.message.contains("+31.0% over baseline 300 ms"),
        "{}",
        f.message
    );
    assert_eq!(r.checked, 9);
    let inconclusive: Vec<(&str, &str)> = r
        .inconclusive
        .iter()
        .map(|f| (f.rule.as_str(), f.provider.as_str()))
        .collect();
    assert_eq!(inconclusive, vec![("error_pct_above", "gamma")]);
    let g = &r.inconclusive[0];
    assert_eq!(g.current, 6.0);
    let (lo, hi) = g.current_ci.unwrap();
    assert!(
        (lo - 4.69).abs() < 0.01 && (hi - 7.65).abs() < 0.01,
        "{g:?}"
    );
    assert!(
        latmesh_cli::ui::check::render(&r)
            .contains("not significant: error_pct_above us-east gamma")
    );
    assert!(
        r.skipped
            .iter()
            .any(|s| s.contains("compared on point estimates only")),
        "{:?}",
        r.skipped
    );
    assert_eq!(r.exit_code(), 1);
    assert!(
        latmesh_cli::ui::check::render(&r).contains("FIRED  p99-up-30"),
        "{}",
        latmesh_cli::ui::check::render(&r)
    );

    // Region filter `ALL` checks the merged row only; a provider filter narrows further.
    let all = parse_rules(
        "[[rules]]\nkind = \"p99_absolute\"\nregion = \"ALL\"\nprovider = \"alpha\"\nlimit_ms = 100\n",
    )
    .unwrap();
    let r = evaluate(&all, &cur, None);
    assert_eq!(r.fired.len(), 1);
    assert_eq!(
        (r.fired[0].region.as_str(), r.fired[0].provider.as_str()),
        ("ALL", "alpha")
    );

    // Nothing fires against itself; min_samples skips small cells.
    let r = evaluate(&rules[..1], &base, Some(&base));
    assert!(r.fired.is_empty() && r.exit_code() == 0);
    let strict =
        parse_rules("[[rules]]\nkind = \"p99_absolute\"\nlimit_ms = 1\nmin_samples = 2000\n")
            .unwrap();
    let r = evaluate(&strict, &cur, None);
    assert_eq!(r.checked, 0);
    assert!(
        r.skipped.iter().any(|s| s.contains(
            "3 cell(s) where ttft P99 is not supported: fewer than 2000 samples on either side (sample-size policy, raised by min_samples; the largest had 1000: more rounds, region = \"ALL\" or a lower percentile would have more evidence)"
        )),
        "{:?}",
        r.skipped
    );
    // The policy alone: P99 of 200 samples is not supported (368 needed), so the seed's
    // P99 +30 % rule does not compare such cells at all (it fired on 5-7 cells of 12
    // samples between two runs of one campaign).
    let small = |id: &str, p99: f64| {
        let mut s = summary(id, &[("alpha", [100.0, 200.0, p99], 0.0)]);
        for c in &mut s.cells {
            c.samples = 200;
            c.attempts = 200;
            c.outcomes = BTreeMap::from([("ok".to_string(), 200)]);
        }
        Snapshot::from_summary(id.into(), &s)
    };
    let r = evaluate(
        &rules[..1],
        &small("now", 900.0),
        Some(&small("before", 300.0)),
    );
    assert!(r.fired.is_empty() && r.checked == 0, "{r:?}");
    assert!(
        r.skipped[0].contains("fewer than 368 samples on either side"),
        "{:?}",
        r.skipped
    );
    // A rule no cell matches says so (a typo in a provider name is not "nothing to check").
    let typo = parse_rules(
        "[[rules]]\nname = \"t\"\nkind = \"p99_absolute\"\nprovider = \"nope\"\nlimit_ms = 1\n",
    )
    .unwrap();
    let r = evaluate(&typo, &cur, None);
    assert_eq!((r.checked, r.exit_code()), (0, 2));
    assert_eq!(
        r.skipped,
        vec![format!(
            "t: no cell of campaign {} matches provider = \"nope\"",
            r.campaign
        )]
    );

    // A provider failing every attempt has no latency but does fire the error rule.
    let dead = Snapshot::from_summary(
        "dead".into(),
        &summary("dead", &[("gamma", [0.0, 0.0, 0.0], 100.0)]),
    );
    let r = evaluate(&rules[2..], &dead, None);
    assert_eq!(r.fired.len(), 1);
    assert_eq!(r.fired[0].current, 100.0);
}

/// A misspelled `region`, `provider` or `scenario` is an error naming the rule and what the
/// campaign has, not a rule that silently checks nothing while the gate passes.
#[test]
fn a_filter_naming_nothing_is_an_error() {
    let snap = Snapshot::from_summary(
        "c".into(),
        &summary(
            "c",
            &[
                ("alpha", [1.0, 2.0, 3.0], 0.0),
                ("beta", [1.0, 2.0, 3.0], 0.0),
            ],
        ),
    );
    let rules = |filter: &str| {
        parse_rules(&format!(
            "[[rules]]\nname = \"r\"\nkind = \"p99_increase_pct\"\nthreshold = 30\n{filter}\n"
        ))
        .unwrap()
    };
    for ok in [
        "",
        "provider = \"beta\"",
        "region = \"ALL\"",
        "scenario = \"chat\"",
    ] {
        check_filters(&rules(ok), &snap).unwrap();
    }
    for (filter, want) in [
        (
            "provider = \"alpah\"",
            "rule \"r\": provider = \"alpah\" names no provider of c (it has: alpha, beta)",
        ),
        (
            "region = \"us-est\"",
            "rule \"r\": region = \"us-est\" names no region of c (it has: ALL, us-east)",
        ),
        (
            "scenario = \"caht\"",
            "rule \"r\": scenario = \"caht\" names no scenario of c (it has: chat)",
        ),
    ] {
        let e = check_filters(&rules(filter), &snap)
            .unwrap_err()
            .to_string();
        assert_eq!(e, want);
    }
}

/// A cell of 1000 `ok` attempts whose TTFT P99 is `ms` with the interval `ci`.
fn ttft_p99_cell(ms: f64, ci: (f64, f64)) -> CellStats {
    let mut c = CellStats::default();
    (c.samples, c.attempts, c.failed) = (1000, 1000, (0, 1000));
    c.set(
        Metric::Ttft,
        99.0,
        Estimate {
            ms,
            n: 1000,
            ci_ms: Some(ci),
        },
    );
    c
}

/// Rules on estimates with intervals (what ClickHouse gives): over the threshold on the
/// points fires only when the intervals are separated; an absolute limit needs the lower
/// bound above it.
#[test]
fn rules_need_significance_when_intervals_are_known() {
    let key = (
        "us-east".to_string(),
        "alpha".to_string(),
        "chat".to_string(),
    );
    let snap = |label: &str, ms: f64, ci: (f64, f64)| Snapshot {
        label: label.into(),
        cells: BTreeMap::from([(key.clone(), ttft_p99_cell(ms, ci))]),
        exact: true,
        ..Default::default()
    };
    let rules = parse_rules(
        "[[rules]]\nname = \"up\"\nkind = \"p99_increase_pct\"\nthreshold = 30\n\
         [[rules]]\nname = \"abs\"\nkind = \"p99_absolute\"\nlimit_ms = 350\n",
    )
    .unwrap();
    let base = snap("base", 300.0, (280.0, 330.0));
    // +40 %, intervals apart: fires; 420 ms [380, 470] is also surely over 350 ms.
    let r = evaluate(&rules, &snap("slow", 420.0, (380.0, 470.0)), Some(&base));
    let fired: Vec<&str> = r.fired.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(
        fired,
        ["up", "abs"],
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    assert_eq!(r.fired[0].baseline_ci, Some((280.0, 330.0)));
    assert!(
        r.fired[0].message.contains("[380, 470]"),
        "{}",
        r.fired[0].message
    );
    // +40 % on the points, but the current interval reaches into the baseline's: not
    // significant, and 420 ms [320, 600] is not surely over 350 ms.
    let r = evaluate(&rules, &snap("noisy", 420.0, (320.0, 600.0)), Some(&base));
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.inconclusive.len(), 2);
    assert_eq!(r.exit_code(), 0);
}

/// A sweep scenario's cell merges every concurrency step: rules that name no scenario leave
/// it out (and say so); a rule naming it checks it.
#[test]
fn sweep_scenarios_are_checked_only_when_named() {
    let cell = ttft_p99_cell;
    let key = |scenario: &str| ("us-east".to_string(), "alpha".to_string(), scenario.into());
    let snap = |label: &str, ms: f64, ci: (f64, f64)| Snapshot {
        label: label.into(),
        cells: BTreeMap::from([
            (key("chat"), cell(300.0, (280.0, 330.0))),
            (key("sw"), cell(ms, ci)),
        ]),
        exact: true,
        sweep_scenarios: ["sw".to_string()].into(),
        ..Default::default()
    };
    let base = snap("base", 300.0, (280.0, 330.0));
    // The sweep cell is 60 % slower, significantly.
    let slow = snap("slow", 480.0, (450.0, 510.0));
    let rules =
        parse_rules("[[rules]]\nname = \"up\"\nkind = \"p99_increase_pct\"\nthreshold = 30\n")
            .unwrap();
    let r = evaluate(&rules, &slow, Some(&base));
    assert!(r.fired.is_empty(), "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.checked, 1, "only the chat cell");
    assert!(
        r.skipped
            .iter()
            .any(|m| m.starts_with("sweep scenario(s) sw left out")),
        "{:?}",
        r.skipped
    );
    let named = parse_rules(
        "[[rules]]\nname = \"up\"\nkind = \"p99_increase_pct\"\nthreshold = 30\nscenario = \"sw\"\n",
    )
    .unwrap();
    let r = evaluate(&named, &slow, Some(&base));
    assert_eq!(r.fired.len(), 1, "{}", latmesh_cli::ui::check::render(&r));
    assert_eq!(r.fired[0].scenario, "sw");
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
}

fn prev_rule(factor: f64, runs: u32) -> Rule {
    Rule {
        name: "p95-prev-day".into(),
        kind: RuleKind::AbovePrevDayMean {
            factor,
            consecutive_runs: runs,
        },
        metric: Metric::Ttft,
        percentile: 95.0,
        region: None,
        provider: None,
        scenario: None,
        min_samples: 0,
    }
}

#[test]
fn prev_day_mean_rule_on_known_runs() {
    const H: i64 = 3_600_000_000;
    let t = 1_700_000_000_000_000i64;
    let runs: Vec<(String, i64)> = [
        ("r1", t - 30 * H), // outside the previous day of the last 2 runs
        ("r2", t - 20 * H),
        ("r3", t - 10 * H),
        ("r4", t - H),
        ("r5", t),
    ]
    .iter()
    .map(|(id, s)| (id.to_string(), *s))
    .collect();
    let key = (
        "us-east".to_string(),
        "alpha".to_string(),
        "chat".to_string(),
    );
    // Each run's P95 of 100 samples with a ±10 % interval.
    let values = |v: [f64; 5]| -> RunValues {
        runs.iter()
            .zip(v)
            .map(|((id, _), ms)| {
                let e = Estimate {
                    ms,
                    n: 100,
                    ci_ms: Some((ms * 0.9, ms * 1.1)),
                };
                (id.clone(), BTreeMap::from([(key.clone(), e)]))
            })
            .collect()
    };
    let report = || CheckReport {
        campaign: "r5".into(),
        baseline: None,
        fired: vec![],
        inconclusive: vec![],
        checked: 0,
        skipped: vec![],
    };
    // Previous day of r4 (the first of the last 2): r2, r3 → mean 110, limit 220.
    let mut r = report();
    evaluate_prev_day(
        &prev_rule(2.0, 2),
        &runs,
        &values([5000.0, 100.0, 120.0, 250.0, 260.0]),
        &mut r,
    );
    assert_eq!(r.fired.len(), 1, "{r:?}");
    assert_eq!(r.fired[0].baseline, Some(110.0));
    assert_eq!((r.fired[0].current, r.fired[0].limit), (260.0, 220.0));
    // One of the two runs below the limit: not fired.
    let mut r = report();
    evaluate_prev_day(
        &prev_rule(2.0, 2),
        &runs,
        &values([5000.0, 100.0, 120.0, 200.0, 260.0]),
        &mut r,
    );
    assert!(r.fired.is_empty() && r.checked == 1);
    // One run: r5 alone, previous day r2..r4 → mean (100 + 120 + 200) / 3 = 140, limit 280.
    let mut r = report();
    evaluate_prev_day(
        &prev_rule(2.0, 1),
        &runs,
        &values([0.0, 100.0, 120.0, 200.0, 290.0]),
        &mut r,
    );
    assert_eq!(r.fired.len(), 1);
    assert_eq!(r.fired[0].baseline, Some(140.0));
    // Over 2× on the points but not significantly above the day's upper bounds: r5 at
    // 290 [261, 319] vs the mean upper bound of 110 × 1.1 … (here: r2..r4 mean 140, mean
    // upper bound 154): significant. With ±60 % intervals it is not.
    let wide = |v: [f64; 5]| -> RunValues {
        values(v)
            .into_iter()
            .map(|(id, mut cells)| {
                for e in cells.values_mut() {
                    e.ci_ms = Some((e.ms * 0.4, e.ms * 1.6));
                }
                (id, cells)
            })
            .collect()
    };
    let mut r = report();
    evaluate_prev_day(
        &prev_rule(2.0, 1),
        &runs,
        &wide([0.0, 100.0, 120.0, 200.0, 290.0]),
        &mut r,
    );
    assert!(r.fired.is_empty() && r.inconclusive.len() == 1, "{r:?}");
    // Runs whose P95 is not supported (50 samples < 72) do not count.
    let mut few = values([0.0, 100.0, 120.0, 200.0, 290.0]);
    for cells in few.values_mut() {
        for e in cells.values_mut() {
            e.n = 50;
        }
    }
    let mut r = report();
    evaluate_prev_day(&prev_rule(2.0, 1), &runs, &few, &mut r);
    assert!(r.fired.is_empty() && r.checked == 0, "{r:?}");
    assert!(
        r.skipped[0].contains("without a supported ttft P95 (≥ 72 samples)"),
        "{r:?}"
    );
    // Nothing in the previous day: skipped, with the reason.
    let mut r = report();
    evaluate_prev_day(&prev_rule(2.0, 1), &runs[..1], &values([1.0; 5]), &mut r);
    assert!(
        r.fired.is_empty() && r.skipped[0].contains("no run in the 24 h"),
        "{r:?}"
    );
}

// ---- the binary ------------------------------------------------------------------------

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn latmesh(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_latmesh"))
        .args(args)
        .env_remove("LATMESH_CLICKHOUSE_URL")
        .output()
        .unwrap()
}

/// A webhook receiver on 127.0.0.1: every POST body is kept; it answers `status`.
async fn receiver(status: u16) -> (String, Arc<Mutex<Vec<Value>>>) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hooks/{secret}",
        axum::routing::post(move |body: String| {
            let keep = keep.clone();
            async move {
                keep.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap());
                axum::http::StatusCode::from_u16(status).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/hooks/s3cret"), got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_0_1_2_and_posts_to_the_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let base = write(
        dir.path(),
        "base.json",
        &serde_json::to_string(&baseline()).unwrap(),
    );
    let cur = write(
        dir.path(),
        "cur.json",
        &serde_json::to_string(&current()).unwrap(),
    );
    let rules = write(dir.path(), "rules.toml", RULES);
    let (url, got) = receiver(200).await;

    // Fired: exit 1, the lines on stdout, the payload at the webhook.
    let args = [
        "check",
        "--current-summary",
        &cur,
        "--baseline-summary",
        &base,
        "--rules",
        &rules,
        "--webhook",
        &url,
    ];
    let out = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        move || latmesh(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("FIRED  p99-up-30") && stdout.contains("3 rule(s) fired"),
        "{stdout}"
    );
    let posted = got.lock().unwrap().clone();
    assert_eq!(posted.len(), 1);
    let p = &posted[0];
    assert_eq!(p["campaign"], format!("cur-1 (summary {cur})"));
    assert_eq!(p["baseline"], format!("base-1 (summary {base})"));
    assert_eq!(p["fired"].as_array().unwrap().len(), 3);
    assert_eq!(p["fired"][0]["rule"], "p99-up-30");
    assert_eq!(p["fired"][0]["current"], 393.0);

    // Nothing fired: exit 0, no POST (unless --webhook-always); --json prints the report.
    let same = [
        "check",
        "--current-summary",
        &base,
        "--baseline-summary",
        &base,
        "--rules",
        &rules,
        "--webhook",
        &url,
        "--json",
    ];
    let out = tokio::task::spawn_blocking({
        let args: Vec<String> = same.iter().map(|s| s.to_string()).collect();
        move || latmesh(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: CheckReport = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.fired.is_empty() && report.checked == 9);
    assert_eq!(got.lock().unwrap().len(), 1, "no POST when nothing fired");
    let mut always: Vec<&str> = same.to_vec();
    always.push("--webhook-always");
    let out = tokio::task::spawn_blocking({
        let args: Vec<String> = always.iter().map(|s| s.to_string()).collect();
        move || latmesh(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(got.lock().unwrap().len(), 2);
    assert_eq!(got.lock().unwrap()[1]["fired"], json!([]));

    // Errors: exit 2 — bad rules, a missing file, a baseline rule without a baseline, a
    // percentile a summary does not carry, a webhook that answers 500.
    let bad = write(
        dir.path(),
        "bad.toml",
        "[[rules]]\nkind = \"p99_increase_pct\"\n",
    );
    let p95 = write(
        dir.path(),
        "p95.toml",
        "[[rules]]\nkind = \"p97_absolute\"\nlimit_ms = 1\n",
    );
    let (url500, _) = receiver(500).await;
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--rules".into(), bad.clone()],
            "rules[0].threshold: missing",
        ),
        (
            vec![
                "--rules".into(),
                dir.path().join("nope.toml").display().to_string(),
            ],
            "cannot read rules",
        ),
        (
            vec![
                "--rules".into(),
                rules.clone(),
                "--baseline-summary".into(),
                "/nonexistent.json".into(),
            ],
            "cannot read summary",
        ),
        (
            vec!["--rules".into(), rules.clone()],
            "compares with a baseline",
        ),
        (
            vec!["--rules".into(), p95.clone()],
            "ttft P97 is not in a summary file",
        ),
        (
            vec![
                "--rules".into(),
                rules.clone(),
                "--baseline-summary".into(),
                base.clone(),
                "--webhook".into(),
                url500.clone(),
            ],
            "answered HTTP 500",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["check".to_string(), "--current-summary".into(), cur.clone()];
        args.extend(extra);
        let out = tokio::task::spawn_blocking(move || {
            latmesh(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(stderr.contains(want), "{want:?} not in {stderr:?}");
        assert!(
            !stderr.contains("s3cret"),
            "the webhook's secret path is not echoed"
        );
    }
}

#[tokio::test]
async fn post_json_reports_status_and_refusals() {
    let (url, got) = receiver(204).await;
    assert_eq!(
        post_json(&url, br#"{"x":1}"#, std::time::Duration::from_secs(5))
            .await
            .unwrap(),
        204
    );
    assert_eq!(got.lock().unwrap()[0], json!({"x": 1}));
    let e = post_json("ftp://x", b"{}", std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("http:// or https://"));
    // A port nobody listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    assert!(
        post_json(
            &format!("http://127.0.0.1:{port}/"),
            b"{}",
            std::time::Duration::from_secs(2)
        )
        .await
        .is_err()
    );
}

/// Summary files carry each percentile's interval: `check --current-summary` then tests
/// significance as ClickHouse does. Identical distributions (different draws) stay quiet; the
/// same 40 % slower fires.
#[test]
fn summary_files_with_intervals_are_compared_by_significance() {
    use latmesh_results::summary::Percentiles;
    // 600 TTFT samples, lognormal around 100 ms (σ 0.3), from seed `seed`, × `scale`.
    let run = |id: &str, seed: u64, scale: f64| {
        let mut h = latmesh_core::hist::new_histogram();
        let mut x = seed;
        for _ in 0..600 {
            // Box–Muller from two SplitMix64 uniforms.
            let mut u = || {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (((z ^ (z >> 31)) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            let (a, b) = (u(), u());
            let n = (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos();
            h.record((100_000.0 * scale * (0.3 * n).exp()) as u64)
                .unwrap();
        }
        let mut s = summary(id, &[("alpha", [0.0, 0.0, 0.0], 0.0)]);
        for c in &mut s.cells {
            (c.samples, c.attempts) = (600, 600);
            c.outcomes = BTreeMap::from([("ok".to_string(), 600)]);
            c.ttft = Some(Percentiles::of_list(&h, &[50.0, 90.0, 95.0, 99.0]));
        }
        Snapshot::from_summary(id.into(), &s)
    };
    let rules = parse_rules(
        "[[rules]]\nname = \"p99-up-30\"\nkind = \"p99_increase_pct\"\nthreshold = 30\n",
    )
    .unwrap();
    let base = run("base", 1, 1.0);
    let r = evaluate(&rules, &run("same", 2, 1.0), Some(&base));
    assert!(
        r.fired.is_empty() && r.checked == 1,
        "{}",
        latmesh_cli::ui::check::render(&r)
    );
    assert!(
        !r.skipped.iter().any(|s| s.contains("point estimates only")),
        "{:?}",
        r.skipped
    );
    let r = evaluate(&rules, &run("slow", 3, 1.4), Some(&base));
    assert_eq!(r.fired.len(), 1, "{}", latmesh_cli::ui::check::render(&r));
    let f = &r.fired[0];
    assert!(f.current_ci.unwrap().0 > f.baseline_ci.unwrap().1, "{f:?}");
}

/// The name rules on known snapshots (no ClickHouse): per region × provider, against the same
/// region × provider of the baseline, the rule's `scenario` narrowing the cells merged.
#[test]
fn model_changed_compares_names_per_region_and_provider() {
    use latmesh_results::swap::{Names, Seen};
    let names = |list: &[&str]| -> Names {
        list.iter()
            .map(|n| {
                (
                    n.to_string(),
                    Seen {
                        count: 2,
                        first_unix_us: None,
                    },
                )
            })
            .collect()
    };
    // (region, scenario, names) of provider `a`.
    let snap = |label: &str, cells: &[(&str, &str, &[&str])]| Snapshot {
        label: label.into(),
        start_at_unix_us: Some(1_700_000_000_000_000),
        models: cells
            .iter()
            .map(|(r, s, n)| ((r.to_string(), "a".to_string(), s.to_string()), names(n)))
            .collect(),
        ..Default::default()
    };
    let base = snap(
        "base",
        &[
            ("us", "chat", &["m-2024-08-06"]),
            ("eu", "chat", &["m-2024-08-06", "m-2024-11-20"]),
            ("us", "other", &["m-2024-08-06"]),
        ],
    );
    // us: a name the baseline never answered there (eu did: no excuse for us); eu unchanged.
    let cur = snap(
        "cur",
        &[
            ("us", "chat", &["m-2024-08-06"]),
            ("us", "other", &["m-2024-11-20"]),
            ("eu", "chat", &["m-2024-11-20"]),
        ],
    );
    let rules = parse_rules("[[rules]]\nkind = \"model_changed\"\n").unwrap();
    let r = evaluate(&rules, &cur, Some(&base));
    assert_eq!(r.checked, 2);
    assert_eq!(r.fired.len(), 1, "{:?}", r.fired);
    let f = &r.fired[0];
    assert_eq!(
        (f.region.as_str(), f.provider.as_str(), f.scenario.as_str()),
        ("us", "a", "*")
    );
    assert_eq!(f.time_unix_us, Some(1_700_000_000_000_000));
    assert_eq!(
        f.time.as_deref(),
        Some("campaign started 2023-11-14 22:13 UTC")
    );
    assert!(
        f.message.contains("m-2024-11-20 ×2 during cur"),
        "{}",
        f.message
    );
    // Narrowed to the scenario whose names did not change: nothing fires.
    let chat = parse_rules("[[rules]]\nkind = \"model_changed\"\nscenario = \"chat\"\n").unwrap();
    let r = evaluate(&chat, &cur, Some(&base));
    assert!(r.fired.is_empty() && r.checked == 2, "{r:?}");
    // An identical rerun fires nothing.
    assert!(evaluate(&rules, &base, Some(&base)).fired.is_empty());
}

/// `goodput_below` and `slo_rps_below` on the workloads fixture's summary
/// ([`latmesh_results::fixtures::workloads`]: its module doc gives every count).
#[test]
fn slo_rules_fire_on_goodput_and_on_the_search_answer() {
    let rules = parse_rules(
        "[[rules]]\nkind = \"goodput_below\"\nlimit_pct = 90\n\
         [[rules]]\nname = \"rps6\"\nkind = \"slo_rps_below\"\nlimit_rps = 6\n\
         [[rules]]\nname = \"rps5\"\nkind = \"slo_rps_below\"\nlimit_rps = 5\nregion = \"ALL\"\n",
    )
    .unwrap();
    assert_eq!(rules[0].kind, RuleKind::GoodputBelow { limit_pct: 90.0 });
    assert_eq!(rules[0].name, "goodput_below");
    assert_eq!(rules[1].kind, RuleKind::SloRpsBelow { limit_rps: 6.0 });
    for (text, want) in [
        ("kind = \"goodput_below\"", "rules[0].limit_pct: missing"),
        (
            "kind = \"goodput_below\"\nlimit_pct = 120",
            "rules[0].limit_pct: 120 is not a share",
        ),
        ("kind = \"slo_rps_below\"", "rules[0].limit_rps: missing"),
        (
            "kind = \"slo_rps_below\"\nlimit_rps = 0",
            "rules[0].limit_rps: give a rate > 0",
        ),
    ] {
        let e = parse_rules(&format!("[[rules]]\n{text}\n")).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    let s = latmesh_results::fixtures::workloads::summary();
    let cur = Snapshot::from_summary("w1".into(), &s);
    let r = evaluate(&rules, &cur, None);
    let fired: BTreeSet<(&str, &str, &str, &str)> = r
        .fired
        .iter()
        .map(|f| {
            (
                f.rule.as_str(),
                f.region.as_str(),
                f.provider.as_str(),
                f.scenario.as_str(),
            )
        })
        .collect();
    let mut want = BTreeSet::new();
    for region in ["us-east", "eu-west"] {
        for provider in ["p", "q"] {
            // 0 of 30 (refused or slow): surely below 90 %. The search `find` has no cell
            // goodput (its steps overload on purpose): goodput_below never fires on it.
            want.insert(("goodput_below", region, provider, "ctx.8k"));
            // p missed at 6 rps (at the limit), q at 2.
            want.insert(("rps6", region, provider, "find"));
        }
    }
    // rps5 on ALL: q missed at 2 ≤ 5; p's 4 rps is below 5 but its miss (6) is above.
    want.insert(("rps5", "ALL", "q", "find"));
    assert_eq!(fired, want);
    let inconclusive: BTreeSet<(&str, &str, &str, &str)> = r
        .inconclusive
        .iter()
        .map(|f| {
            (
                f.rule.as_str(),
                f.region.as_str(),
                f.provider.as_str(),
                f.scenario.as_str(),
            )
        })
        .collect();
    // The rate sweep `ramp` has no cell goodput either (its steps are judged apart); p's 4
    // rps met is below 5 but its miss (6) is above: not surely below.
    let want_inc: BTreeSet<_> = [("rps5", "ALL", "p", "find")].into_iter().collect();
    assert_eq!(inconclusive, want_inc);
    // 8 goodput cells (the tiers'), 4 searches for rps6, 2 for rps5.
    assert_eq!(r.checked, 8 + 4 + 2);
    let g = r
        .fired
        .iter()
        .find(|f| f.region == "us-east" && f.provider == "q" && f.scenario == "ctx.8k")
        .unwrap();
    assert_eq!((g.current, g.limit, g.unit.as_str()), (0.0, 90.0, "%"));
    assert!(
        g.message.contains(
            "goodput 0.00% (0 of 30 judged requests met the SLO) [0.00%, 11.35%] < limit 90%"
        ),
        "{}",
        g.message
    );
    let p = r
        .fired
        .iter()
        .find(|f| f.rule == "rps6" && f.region == "us-east" && f.provider == "p")
        .unwrap();
    assert_eq!((p.current, p.limit, p.unit.as_str()), (4.0, 6.0, "rps"));
    assert!(
        p.message
            .contains("meets the SLO up to 4.00 rps, below limit 6.00 rps"),
        "{}",
        p.message
    );
    let q = r
        .fired
        .iter()
        .find(|f| f.rule == "rps6" && f.region == "us-east" && f.provider == "q")
        .unwrap();
    assert_eq!(q.current, 0.0);
    let inc = r.inconclusive.iter().find(|f| f.rule == "rps5").unwrap();
    assert!(
        inc.message
            .contains("; it missed only at 6.00 rps, above the limit: the highest rate meeting it may reach the limit"),
        "{}",
        inc.message
    );
}

/// A campaign without SLOs or searches: the rules are skipped, saying why, and nothing is
/// checked (exit status 2 for a gate on no evidence).
#[test]
fn slo_rules_without_an_slo_are_skipped_with_the_reason() {
    let rules = parse_rules(
        "[[rules]]\nkind = \"goodput_below\"\nlimit_pct = 90\n\
         [[rules]]\nkind = \"slo_rps_below\"\nlimit_rps = 2\n",
    )
    .unwrap();
    let cur = Snapshot::from_summary("cur-1".into(), &current());
    let r = evaluate(&rules, &cur, None);
    assert_eq!((r.checked, r.fired.len()), (0, 0));
    assert_eq!(r.exit_code(), 2);
    assert!(
        r.skipped
            .iter()
            .any(|s| s == "goodput_below: 3 cell(s) of scenarios without an SLO (no goodput)"),
        "{:?}",
        r.skipped
    );
    assert!(
        r.skipped
            .iter()
            .any(|s| s.starts_with("slo_rps_below: no SLO search answer in cur-1 matches")),
        "{:?}",
        r.skipped
    );
}

/// The binary on a summary file: `goodput_below` fires (exit 1) and prints the cell.
#[test]
fn the_binary_checks_goodput_from_a_summary_file() {
    let dir = tempfile::tempdir().unwrap();
    let cur = write(
        dir.path(),
        "w.json",
        &serde_json::to_string(&latmesh_results::fixtures::workloads::summary()).unwrap(),
    );
    let rules = write(
        dir.path(),
        "rules.toml",
        "[[rules]]\nkind = \"goodput_below\"\nlimit_pct = 90\nscenario = \"ctx.8k\"\nprovider = \"q\"\n",
    );
    let out = latmesh(&["check", "--current-summary", &cur, "--rules", &rules]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("FIRED  goodput_below")
            && stdout.contains("goodput 0.00% (0 of 30 judged requests met the SLO)"),
        "{stdout}"
    );
}
