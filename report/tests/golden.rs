//! The rendered report of a fixed campaign (the results fixtures, plus windows and a time
//! series) stays byte for byte what `tests/golden/` holds: HTML, CSV and JSON.
//! `REPORT_UPDATE_GOLDEN=1` rewrites the files.

use std::path::PathBuf;

use latmesh_core::metrics::Metric;
use latmesh_report::model::{TimePoint, TimeSeries};
use latmesh_report::{Extras, Format, model, render};
use latmesh_results::fixtures;
use latmesh_results::report_data::ReportData;
use latmesh_store::query::WindowsReport;

fn extras() -> Extras {
    let stat = |window: &str, attempts: u64, value: Option<f64>| {
        serde_json::json!({
            "window": window, "attempts": attempts, "errors": 1, "excluded": 0,
            "error_pct": 100.0 / attempts as f64, "samples": attempts - 1, "value_ms": value,
            "value_us": value.map(|v| (v * 1000.0) as u64),
        })
    };
    let windows: WindowsReport = serde_json::from_value(serde_json::json!({
        "metric": "ttft", "percentile": 90,
        "windows": ["peak <&>", "off-peak"], "compared": ["peak <&>", "off-peak"],
        "rows": [
            { "provider": "p1", "region": "us-east", "windows": [stat("peak <&>", 40, Some(812.5)), stat("off-peak", 60, Some(401.25))], "change_ms": 411.25, "change_pct": 102.5 },
            { "provider": "p1", "region": "ALL", "windows": [stat("peak <&>", 80, Some(7.125)), stat("off-peak", 90, None)], "change_ms": null, "change_pct": null },
        ],
    }))
    .expect("windows report");
    let points = |k: f64| {
        (0..5)
            .map(|i| TimePoint {
                t_unix_s: 1_700_000_000 + 10 * i,
                samples: 10 + i as u64,
                p50_ms: k * (100.0 + i as f64),
                p99_ms: k * (250.5 + 3.0 * i as f64),
            })
            .collect()
    };
    Extras {
        windows: Some(vec![windows]),
        time_series: Some(vec![
            TimeSeries {
                provider: "p1".into(),
                metric: Metric::Ttft,
                bucket_s: 10,
                points: points(1.0),
            },
            TimeSeries {
                provider: "p1".into(),
                metric: Metric::E2e,
                bucket_s: 10,
                points: points(3.0),
            },
        ]),
    }
}

fn check(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("REPORT_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).expect("golden file (REPORT_UPDATE_GOLDEN=1)");
    assert!(
        text == want,
        "{} differs from the rendered report",
        path.display()
    );
}

#[test]
fn rendered_reports_match_the_golden_files() {
    let (summary, agg, _) = fixtures::sweep_rate_summary();
    let data = ReportData::from_aggregate(summary, fixtures::plan(), &agg);
    let m = model(&data, "memory", Extras::default());
    for (format, name) in [
        (Format::Html, "memory.html"),
        (Format::Csv, "memory.csv"),
        (Format::Json, "memory.json"),
    ] {
        check(name, &render(&m, format).unwrap());
    }
    // What answered: the usage fixture's models, and a regional cell's answered models.
    let mut m = model(&data, "memory", Extras::default());
    m.models = fixtures::usage_summary().models;
    if let Some(c) = m.matrix.iter_mut().find(|c| c.region != "ALL") {
        c.answered_models.insert("gpt-4o <b>'x'</b>".into(), 3);
        c.answered_models.insert("smollm2".into(), 7);
    }
    check("answered.html", &render(&m, Format::Html).unwrap());
    let mut data = data;
    data.plan.windows = vec![latmesh_core::windows::Window {
        name: "peak <&>".into(),
        ranges: latmesh_core::windows::parse_ranges("00:00-12:00").unwrap(),
    }];
    let m = model(&data, "clickhouse", extras());
    for (format, name) in [(Format::Html, "extras.html"), (Format::Csv, "extras.csv")] {
        check(name, &render(&m, format).unwrap());
    }
}

/// What one `latmesh compat` run measured: `p` honest, `q` failing `json_mode` and `stop`
/// (and one inconclusive check), `r` answering 6 of 16 prompts wrong and shorter (the
/// quantization trap), through the parity functions the store and the demo use.
fn compat_fixture() -> latmesh_results::parity::CompatReport {
    use latmesh_core::compat::{CompatCheck, CompatResult, Evidence, Verdict};
    use latmesh_core::quality::{QualitySample, answer_hash};
    use latmesh_core::record::Outcome;
    use latmesh_results::parity::{CompatReport, compat_by_provider, parity};

    let mut results = Vec::new();
    for provider in ["p", "q", "r"] {
        for check in CompatCheck::ALL {
            let ev = |http_status: Option<u16>, field: Option<&str>, message: &str| Evidence {
                http_status,
                field: field.map(str::to_string),
                message: message.into(),
            };
            let (verdict, evidence) = match (provider, check) {
                (_, CompatCheck::ReasoningField) => (
                    Verdict::NotOffered,
                    ev(None, None, "no reasoning in the answer"),
                ),
                ("q", CompatCheck::JsonMode) => (
                    Verdict::Fail,
                    ev(
                        Some(200),
                        Some("response_format"),
                        "content is not a JSON object: \"Sure <&> here\"",
                    ),
                ),
                ("q", CompatCheck::Stop) => (
                    Verdict::Fail,
                    ev(
                        Some(200),
                        Some("finish_reason=length"),
                        "the stop string \"7\" is in the answer",
                    ),
                ),
                ("q", CompatCheck::PromptCache) => (
                    Verdict::Inconclusive,
                    ev(Some(429), None, "throttled twice"),
                ),
                _ => (Verdict::Pass, Evidence::default()),
            };
            results.push(CompatResult {
                provider: provider.into(),
                check,
                verdict,
                evidence,
            });
        }
    }
    let mut samples = Vec::new();
    for provider in ["p", "q", "r"] {
        for i in 0..16u32 {
            for sample in 0..3 {
                let wrong = provider == "r" && i % 8 < 3;
                let answer = if wrong {
                    format!("{}", i * 7 + 1)
                } else {
                    format!("{}", i * 7)
                };
                let throttled = provider == "q" && i == 5 && sample == 2;
                samples.push(QualitySample {
                    provider: provider.into(),
                    prompt_id: format!("arith-{:02}", i + 1),
                    sample,
                    outcome: if throttled {
                        Outcome::Throttled
                    } else {
                        Outcome::Ok
                    },
                    correct: (!throttled).then_some(!wrong),
                    answer_hash: if throttled {
                        String::new()
                    } else {
                        answer_hash(&answer)
                    },
                    answer: if throttled { String::new() } else { answer },
                    output_tokens: if provider == "r" {
                        22 + i % 3
                    } else {
                        40 + i % 5
                    },
                    answered_model: Some("m".into()),
                });
            }
        }
    }
    CompatReport {
        run_id: "run-1".into(),
        compat: compat_by_provider(&results),
        quality: Some(parity(&samples)),
    }
}

#[test]
fn a_report_with_compat_results_matches_its_golden_files() {
    let (summary, agg, _) = fixtures::sweep_rate_summary();
    let mut data = ReportData::from_aggregate(summary, fixtures::plan(), &agg);
    data.compat = compat_fixture();
    let m = model(&data, "memory", Extras::default());
    let html = render(&m, Format::Html).unwrap();
    // Both sections, right after the matrix, and in the navigation.
    let at = |id: &str| {
        html.find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no section {id}"))
    };
    assert!(at("matrix") < at("compat") && at("compat") < at("quality"));
    assert!(at("quality") < at("cdfs"));
    assert!(html.contains("<a href=\"#compat\">Compatibility</a>"));
    // q: json_mode and stop fail, prompt_cache inconclusive: 9 of 11 counted checks pass.
    assert_eq!(html.matches("<td class=\"v v-fail\"").count(), 2);
    assert_eq!(html.matches("<td class=\"v v-inconclusive\"").count(), 1);
    assert!(html.contains("<td>9/11 (82%)</td><td>1</td>"), "q's score");
    assert!(
        html.contains("<td>12/12 (100%)</td><td>0</td>"),
        "p's score"
    );
    assert!(html.contains("content is not a JSON object: &quot;Sure &lt;&amp;&gt; here&quot;"));
    // r: 30 of 48 correct, shorter, flagged (the only one) in the warning style.
    assert_eq!(html.matches("<tr class=\"flagged\">").count(), 1);
    assert!(html.contains("<tr class=\"flagged\"><td class=\"row\">r</td>"));
    assert!(html.contains("<p class=\"warn\">Possible quantization or different model: r "));
    assert!(html.contains("<td>0.55×</td>"));
    assert!(html.contains("<td>48 / 48</td><td>30</td><td>62.5% ["));
    assert!(html.contains("<td>47 / 48</td><td>47</td><td>100.0% ["));
    let json: serde_json::Value = serde_json::from_str(&render(&m, Format::Json).unwrap()).unwrap();
    assert_eq!(json["compat"]["compat"].as_array().map(Vec::len), Some(3));
    assert_eq!(json["compat"]["quality"]["set"], "quality-v1");
    let csv = render(&m, Format::Csv).unwrap();
    assert!(csv.contains("\ncompat,,,q,json_mode,verdict,fail,1\n"));
    assert!(csv.contains("\nquality,,,r,correct,,quality-v1,30\n"));
    assert!(csv.contains("\nquality,,,r,flagged,,quality-v1,1\n"));
    check("compat.html", &html);
    check("compat.json", &render(&m, Format::Json).unwrap());
    check("compat.csv", &csv);
}

/// A histogram of `n` values `base × (1 + i / n)` µs, i = 0..n.
fn spread_us(base: u64, n: u64) -> hdrhistogram::Histogram<u64> {
    let mut h = latmesh_core::hist::new_histogram();
    for i in 0..n {
        h.record(base + base * i / n).unwrap();
    }
    h
}

/// The workloads of issue 21 on top of the results fixture: generated-prompt tiers 1k/8k/32k
/// (`q` refusing 32k past its context and billing 1.2 tokens per word), an SLO on the
/// open-loop scenario with goodput per cell, and an SLO search per provider (`p` resolved
/// between 4 and 4.2 rps, `q` missing at its first rate), built through the shared rules
/// ([`latmesh_results::slo_stats`], [`latmesh_results::tiers`]).
fn workloads_data() -> ReportData {
    use latmesh_core::load::{LoadModel, SloSearch};
    use latmesh_core::slo::{PercentileBound, Slo};
    use latmesh_results::slo_stats::{RateStepRow, goodput, search_row, step_verdict};
    use latmesh_results::summary::Percentiles;
    use latmesh_results::tiers::{TierRow, token_count_row};

    let (summary, agg, _) = fixtures::sweep_rate_summary();
    let mut data = ReportData::from_aggregate(summary, fixtures::plan(), &agg);
    let slo = Slo {
        ttft_ms: Some(500.0),
        tpot_ms: None,
        e2e_ms: Some(2000.0),
        percentiles: vec![PercentileBound {
            metric: Metric::Ttft,
            percentile: 95.0,
            ms: 450.0,
        }],
        goodput_pct: 90.0,
    };
    let search = SloSearch {
        min_rps: 1.0,
        max_rps: 16.0,
        steps: 6,
        min_requests: 20,
        resolution_pct: 10.0,
    };
    let open = data
        .plan
        .scenarios
        .iter_mut()
        .find(|s| s.name == "open")
        .unwrap();
    open.slo = Some(slo.clone());
    if let LoadModel::Rate(r) = &mut open.load {
        r.search = Some(search.clone());
    }
    let percentiles = data.plan.percentiles.clone();
    // Goodput of the open-loop cells: `p` meets (96 of 100), `q` misses (P95 over its bound).
    for c in data
        .summary
        .cells
        .iter_mut()
        .filter(|c| c.scenario == "open")
    {
        let (met, base) = if c.provider == "p" {
            (96, 200_000)
        } else {
            (60, 400_000)
        };
        let h = spread_us(base, 100);
        c.goodput = Some(goodput(&slo, 100, met, Some(20.0), |_| Some(h.clone())));
        c.warmup = 4;
    }
    // Tiers: TTFT grows with input tokens; q is slower and refuses 32k.
    let mut tiers = Vec::new();
    for (tokens, label) in [(1000u32, "1k"), (8000, "8k"), (32000, "32k")] {
        for region in ["us-east", "ALL"] {
            for provider in ["p", "q"] {
                let refused = provider == "q" && tokens == 32000;
                let base = u64::from(tokens) * if provider == "p" { 20 } else { 45 } + 80_000;
                let h = (!refused).then(|| spread_us(base, 30));
                tiers.push(TierRow {
                    region: region.into(),
                    provider: provider.into(),
                    group: "ctx".into(),
                    scenario: format!("ctx.{label}"),
                    input_tokens: tokens,
                    samples: if refused { 0 } else { 30 },
                    error_pct: if refused { 100.0 } else { 0.0 },
                    context_refused: if refused { 30 } else { 0 },
                    ttft: h.as_ref().map(|h| Percentiles::of_list(h, &percentiles)),
                    ttst_p50_ms: h.as_ref().map(|_| base as f64 / 1000.0 + 12.5),
                    prefill_tps_p50: h
                        .as_ref()
                        .map(|_| f64::from(tokens) * 1e6 / base as f64),
                    e2e_per_token_p50_ms: h.as_ref().map(|_| 8.25),
                    billed_prompt_tokens_mean: (!refused).then(|| {
                        if provider == "p" {
                            f64::from(tokens) + 12.0
                        } else {
                            f64::from(tokens) * 1.2 + 7.0
                        }
                    }),
                    goodput: None,
                });
            }
        }
    }
    data.summary.tiers = tiers;
    data.summary.token_counts = vec![
        token_count_row("p", vec![(1000, 1012.0, 60), (8000, 8012.0, 60), (32000, 32012.0, 60)])
            .unwrap(),
        token_count_row("q", vec![(1000, 1207.0, 60), (8000, 9607.0, 60)]).unwrap(),
    ];
    // Search steps: (rate, met of 100 judged, TTFT base µs; P95 about 1.95 × base).
    let runs: [(&str, &[(f64, u64, u64)]); 2] = [
        (
            "p",
            &[
                (1.0, 100, 150_000),
                (2.0, 100, 180_000),
                (4.0, 96, 200_000),
                (8.0, 50, 900_000),
                (6.0, 75, 600_000),
                (4.2, 85, 220_000),
            ],
        ),
        ("q", &[(1.0, 30, 700_000)]),
    ];
    let mut steps = Vec::new();
    for (provider, run) in runs {
        for region in ["ALL", "us-east"] {
            let mut rows = Vec::new();
            for (k, (rps, met, base)) in run.iter().enumerate() {
                let h = spread_us(*base, 100);
                let g = goodput(&slo, 100, *met, Some(10.0), |_| Some(h.clone()));
                rows.push(RateStepRow {
                    region: region.into(),
                    provider: provider.into(),
                    scenario: "open".into(),
                    step: k as u32,
                    target_rps: *rps,
                    target_rps_max: *rps,
                    sent: 100,
                    dropped: 0,
                    achieved_rps: Some(*rps * 0.99),
                    error_pct: 0.0,
                    ttft: Some(Percentiles::of_list(&h, &percentiles)),
                    tpot: None,
                    e2e: Some(Percentiles::of_list(&spread_us(base * 3, 100), &percentiles)),
                    verdict: Some(step_verdict(&g, 0, search.min_requests)),
                    goodput: Some(g),
                });
            }
            data.summary
                .searches
                .push(search_row(&slo, &search, &rows).unwrap());
            steps.extend(rows);
        }
    }
    data.summary.rate_steps = steps;
    data
}

#[test]
fn a_report_with_tiers_slo_and_search_matches_its_golden_files() {
    let data = workloads_data();
    let m = model(&data, "memory", Extras::default());
    // The figures the sections are made of.
    let p = m
        .searches
        .iter()
        .find(|s| s.provider == "p" && s.region == "ALL")
        .unwrap();
    assert_eq!((p.outcome.met_rps, p.outcome.missed_rps), (Some(4.0), Some(4.2)));
    let q = m.token_counts.iter().find(|t| t.provider == "q").unwrap();
    assert!(q.counts_differently, "{}", q.note);
    let html = render(&m, Format::Html).unwrap();
    for want in [
        "Context tiers",
        "Token counts",
        "SLO goodput",
        "Rate steps and SLO search",
        "meets the SLO up to 4.00 rps (misses at 4.20 rps); resolved",
        "30 refused: past its context",
    ] {
        assert!(
            html.contains(want),
            "{want} not in the page: {:?}",
            m.searches.iter().map(|s| &s.text).collect::<Vec<_>>()
        );
    }
    for (format, name) in [
        (Format::Html, "workloads.html"),
        (Format::Csv, "workloads.csv"),
        (Format::Json, "workloads.json"),
    ] {
        check(name, &render(&m, format).unwrap());
    }
}
