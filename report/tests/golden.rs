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
