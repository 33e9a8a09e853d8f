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
/// (and one inconclusive check), `r` calling the tool in 1 of 3 samples (unstable) and answering 6 of 16 prompts wrong and shorter (the
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
                ("r", CompatCheck::ToolCall) => (
                    Verdict::Unstable,
                    ev(
                        Some(200),
                        Some("tools"),
                        "pass 1/3, fail 2/3: no tool call (finish_reason stop)",
                    ),
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
                samples: match verdict {
                    Verdict::Unstable => latmesh_core::compat::SampleTally {
                        pass: 1,
                        fail: 2,
                        ..Default::default()
                    },
                    _ => latmesh_core::compat::SampleTally::of(verdict),
                },
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

#[test]
fn a_report_with_tiers_slo_and_search_matches_its_golden_files() {
    // Issue 21's workloads fixture, through the summary builder: tiers 1k/8k (`q` refusing
    // 8k for its length, billing 1.21 tokens per word), SLO goodput per cell, a rate sweep
    // and an SLO search (`p` meets up to 4 rps, misses at 6; `q` misses at its first rate).
    let w = &fixtures::workloads::aggregate();
    let data = ReportData::from_aggregate(
        fixtures::workloads::summary(),
        fixtures::workloads::plan(),
        w,
    );
    let m = model(&data, "memory", Extras::default());
    let p = m
        .searches
        .iter()
        .find(|s| s.provider == "p" && s.region == "ALL")
        .unwrap();
    assert_eq!(
        (p.outcome.met_rps, p.outcome.missed_rps),
        (Some(4.0), Some(6.0))
    );
    let q = m.token_counts.iter().find(|t| t.provider == "q").unwrap();
    assert!(q.counts_differently, "{}", q.note);
    let refused = m
        .tiers
        .iter()
        .find(|t| t.provider == "q" && t.region == "ALL" && t.scenario == "ctx.8k")
        .unwrap();
    assert_eq!(refused.context_refused, 60);
    let html = render(&m, Format::Html).unwrap();
    for want in [
        "Context tiers",
        "Token counts",
        "SLO goodput",
        "Rate steps and SLO search",
        "meets the SLO up to 4.00 rps per agent (misses at 6.00 rps per agent); steps used up",
        "60 refused: past its context",
        "TTFT ≤ 500 ms; goodput ≥ 90 %",
    ] {
        assert!(html.contains(want), "{want:?} not in the page");
    }
    // Rate sweeps and searches have their own section, not an empty "Open loop" one.
    assert!(!html.contains("id=\"open-loop\""), "an open-loop section");
    for (format, name) in [
        (Format::Html, "workloads.html"),
        (Format::Csv, "workloads.csv"),
        (Format::Json, "workloads.json"),
    ] {
        check(name, &render(&m, format).unwrap());
    }
}
