//! Reports (`latmesh demo`'s HTML report and `latmesh report` from ClickHouse): one short demo
//! campaign stored in a real ClickHouse, with a `peak` window that holds `us-east` and
//! `ap-southeast` but not `eu-west` (zones picked from the current hour).
//!
//! - From memory: the JSON report's matrix equals the summary's (P50/P90/P95/P99, their
//!   sample counts, support and intervals to the last digit), the CSV has the same digits, the
//!   page has P95 heatmaps and hatches the percentiles the samples do not support, each CDF reaches 0.5 at the matrix's P50, the
//!   analysis is in both, so are the compatibility checks and quality parity of the demo's
//!   compatibility phase (the quantized `budget` flagged), and the page names no URL, loads
//!   nothing and has no script.
//! - From ClickHouse (`latmesh report` in all three formats, the real binary): the same matrix,
//!   sweeps and open-loop rows as in memory, time series that count every TTFT and E2E sample,
//!   peak vs off-peak rows in the regions the zones put there.
//! - In headless Chromium (Debian's `/usr/bin/chromium`; the test installs nothing, and fails
//!   without it unless `LATMESH_SKIP_BROWSER=1`): the dumped DOM has every heatmap and every
//!   chart with its data marks (SVG elements in the series colours with non-empty geometry),
//!   and a screenshot is not blank.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use latmesh_cli::cmd::demo::{DemoOptions, DemoStore, run_with};
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::windows::{Window, parse_ranges};
use latmesh_report::{self as report, Extras, Format, ReportModel, charts};
use latmesh_results::report_data::{ALL, ReportData};
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_report_from_memory_and_from_clickhouse() {
    let browser = browser();
    let url = latmesh_testkit::clickhouse_url().to_string();
    let (client, db) = latmesh_testkit::fresh_db("report");
    let dir = tempfile::tempdir().unwrap();
    let store = DemoStore {
        url: url.clone(),
        db: db.clone(),
        spool_dir: dir.path().join("spool"),
    };
    let data = run_with(
        DemoOptions {
            rounds: Some(2),
            progress: false,
            clickhouse: Some(store),
        },
        with_peak_window,
    )
    .await
    .unwrap();
    let id = data.summary.campaign_id.clone();

    // --- From memory: what `latmesh demo` writes.
    let mem = report::model(&data, "memory", Extras::default());
    let html_path = dir.path().join("demo-report.html");
    report::write(&mem, Format::Html, &html_path).unwrap();
    let html = std::fs::read_to_string(&html_path).unwrap();
    let json: Value = serde_json::from_str(&report::render(&mem, Format::Json).unwrap()).unwrap();
    let csv = report::render(&mem, Format::Csv).unwrap();
    check_self_contained(&html);
    check_marked(&html, &data);
    check_matrix(&json["matrix"], &data, false);
    check_csv(&csv, &data);
    check_cdfs(&mem);
    assert!(mem.note("time-series").is_some() && mem.note("windows").is_some());
    // The analysis (results/src/analysis): under "analysis" in the JSON, a fragment in
    // the page.
    assert!(json["analysis"].is_object(), "{}", json["analysis"]);
    assert!(html.contains("class=\"latmesh-analysis\""));
    assert!(html.contains("latency over time comes from ClickHouse"));
    check_compat(&html, &json, &data);

    // --- From ClickHouse: `latmesh report` in every format.
    let out = |format: &str| dir.path().join(format!("ch.{format}"));
    for format in ["html", "json", "csv"] {
        let run = Command::new(latmesh_testkit::bin("latmesh"))
            .args([
                "report",
                &id,
                "--clickhouse-url",
                &url,
                "--clickhouse-db",
                &db,
            ])
            .args(["--format", format, "--out"])
            .arg(out(format))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success() && stdout.contains("report: "),
            "latmesh report --format {format}: {stdout}\n{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let ch_json: Value =
        serde_json::from_str(&std::fs::read_to_string(out("json")).unwrap()).unwrap();
    check_matrix(&ch_json["matrix"], &data, true);
    same(
        &ch_json["sweeps"],
        &serde_json::to_value(&data.summary.sweeps).unwrap(),
        "sweeps",
    );
    same(
        &ch_json["rates"],
        &serde_json::to_value(&data.summary.rates).unwrap(),
        "rates",
    );
    assert_eq!(
        ch_json["notes"],
        Value::Array(vec![]),
        "{}",
        ch_json["notes"]
    );
    // What answered: the simulator answers with the model id it was sent, so every provider
    // is listed, none is flagged, and ClickHouse counts the same. Only Chat Completions has
    // a `system_fingerprint` (the Messages and Responses APIs define none), and of the demo's
    // profiles only fast-lane sends one.
    assert_eq!(
        mem.models.len(),
        data.plan.providers.len(),
        "{:?}",
        mem.models
    );
    for m in &mem.models {
        assert!(m.flags().is_empty(), "{m:?}");
        let spec = data
            .plan
            .providers
            .iter()
            .find(|p| p.name == m.provider)
            .unwrap();
        let want: Vec<String> = match spec.request.api {
            latmesh_core::api::Api::Chat => latmesh_sim::builtin_profiles()
                .into_iter()
                .find(|p| p.name == m.provider)
                .and_then(|p| p.system_fingerprint),
            _ => None,
        }
        .into_iter()
        .collect();
        assert_eq!(
            m.system_fingerprints.keys().cloned().collect::<Vec<_>>(),
            want,
            "{}",
            m.provider
        );
    }
    assert!(html.contains("<section id=\"answered\">"));
    same(&ch_json["models"], &json["models"], "models");
    let ch = latmesh_cli::cmd::report::from_clickhouse(&url, &db, &id)
        .await
        .unwrap();
    check_time_series(&ch, &data);
    check_windows(&ch, &data);
    let ch_html = std::fs::read_to_string(out("html")).unwrap();
    check_self_contained(&ch_html);
    // The demo stored its compatibility run with the campaign: the report from ClickHouse has
    // it too.
    check_compat(&ch_html, &ch_json, &data);
    let ch_csv = std::fs::read_to_string(out("csv")).unwrap();
    assert!(ch_csv.lines().any(|l| l.starts_with("time_series,")));
    assert!(ch_csv.lines().any(|l| l.starts_with("windows,,us-east,")));

    // --- In the browser.
    if let Some(chromium) = browser {
        let profile = dir.path().join("chromium-profile");
        check_rendered(&chromium, &profile, &html_path, &mem, dir.path());
        check_rendered(&chromium, &profile, &out("html"), &ch, dir.path());
    }
    latmesh_testkit::drop_db(&client, &db).await;
}

/// What the demo's compatibility phase measured: right after the matrix, a Compatibility
/// section with a verdict cell per provider and check and a Quality parity section with the
/// quantized `budget` flagged; under `"compat"` in the JSON, every provider in both.
fn check_compat(html: &str, json: &Value, data: &ReportData) {
    let at = |id: &str| {
        html.find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("no section {id}"))
    };
    assert!(at("matrix") < at("compat") && at("compat") < at("quality"));
    assert!(at("quality") < at("cdfs"));
    let n = data.plan.providers.len();
    assert_eq!(json["compat"]["compat"].as_array().map(Vec::len), Some(n));
    assert_eq!(
        json["compat"]["quality"]["providers"]
            .as_array()
            .map(Vec::len),
        Some(n)
    );
    let compat = &html[at("compat")..at("quality")];
    assert_eq!(
        compat.matches("<td class=\"v v-").count(),
        n * latmesh_core::compat::CompatCheck::ALL.len()
    );
    let quality = &html[at("quality")..at("cdfs")];
    assert!(
        quality.contains("<tr class=\"flagged\"><td class=\"row\">budget</td>"),
        "{quality}"
    );
    assert_eq!(quality.matches("<tr class=\"flagged\">").count(), 1);
}

/// `/usr/bin/chromium`, or `None` with `LATMESH_SKIP_BROWSER=1`.
fn browser() -> Option<PathBuf> {
    if std::env::var("LATMESH_SKIP_BROWSER").is_ok_and(|v| v == "1") {
        eprintln!("LATMESH_SKIP_BROWSER=1: the report is not opened in a browser");
        return None;
    }
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the report test opens the report in headless Chromium. \
         Install Debian's package (apt-get install chromium), or set LATMESH_SKIP_BROWSER=1 \
         to skip the browser checks"
    );
    Some(PathBuf::from(CHROMIUM))
}

/// A `peak` window (00:00-12:00 local) with fixed-offset zones that put `us-east` and
/// `ap-southeast` at about 06:00 local now (peak) and `eu-west` at about 18:00 (off-peak):
/// hours from either edge, so the minute the campaign takes cannot cross one.
fn with_peak_window(plan: &mut Plan) {
    let hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600
        % 24) as i64;
    let offset = |local: i64| {
        let h = (local - hour).rem_euclid(24);
        let h = if h > 12 { h - 24 } else { h };
        format!("{}{:02}:00", if h < 0 { '-' } else { '+' }, h.abs())
    };
    plan.timezones = [
        ("us-east".to_string(), offset(6)),
        ("ap-southeast".to_string(), offset(6)),
        ("eu-west".to_string(), offset(18)),
    ]
    .into();
    plan.windows = vec![Window {
        name: "peak".into(),
        ranges: parse_ranges("00:00-12:00").unwrap(),
    }];
}

/// No URL at all (so no resource to fetch), no script, no external stylesheet or image.
fn check_self_contained(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"));
    for banned in [
        "http://", "https://", "<script", "<link", "<img", "<iframe", "url(", "@import",
    ] {
        assert!(!html.contains(banned), "the report contains {banned:?}");
    }
}

/// The page shows P95 next to P50 and P99, and hatches exactly the percentiles of the
/// heatmaps whose samples do not support them (two rounds: a few samples per cell).
fn check_marked(html: &str, data: &ReportData) {
    for want in [
        "TTFT P90 (ms)",
        "TTFT P95 (ms)",
        "E2E P95 (ms)",
        "E2E P50 / P95 / P99",
        "~hatched",
    ] {
        assert!(html.contains(want), "{want:?} not in the page");
    }
    // Per scenario a heatmap per percentile of the campaign's list (the default four) and
    // metric (TTFT, TTFC, E2E), then errors and samples.
    let heatmaps = html.matches("<figure class=\"heatmap\"").count();
    assert_eq!(heatmaps, data.plan.scenarios.len() * (4 * 3 + 2));
    let unsupported = |q: f64| {
        data.summary
            .cells
            .iter()
            .flat_map(|c| [c.ttft, c.ttfc, c.e2e])
            .flatten()
            .filter(|p| !p.point(q).unwrap().supported)
            .count()
    };
    // Every P99 of two rounds is unsupported, and hatched in its heatmap.
    let p99 = unsupported(99.0);
    assert!(p99 > 0 && p99 >= unsupported(50.0));
    let section = |title: &str| {
        let from = html.find(title).unwrap();
        &html[from..from + html[from..].find("</figure>").unwrap()]
    };
    let e2e_p99 = section("E2E P99 (ms)");
    assert!(e2e_p99.contains("<td class=\"unsupported\""), "{e2e_p99}");
}

/// Whether `path` names a percentile (compared to the last digit).
fn is_percentile(path: &str) -> bool {
    [
        "p50_ms", "p90_ms", "p95_ms", "p99_ms", ".ms", "lo_ms", "hi_ms",
    ]
    .iter()
    .any(|p| path.ends_with(p))
}

/// `got` equals `want`: integers and percentiles exactly, other floats within 1e-12 relative
/// (a summary that went through JSON parsing once may differ in the last bit of a mean).
fn same(got: &Value, want: &Value, path: &str) {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                same(a.get(k).unwrap_or(&Value::Null), v, &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{path}: length");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                same(x, y, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            if is_percentile(path) {
                assert_eq!(x, y, "{path}");
            } else {
                assert!(
                    x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                    "{path}: {x} vs {y}"
                );
            }
        }
        _ => assert_eq!(got, want, "{path}"),
    }
}

/// The report's matrix is the summary's, cell for cell (`last_error`, when the report comes
/// from ClickHouse, only as far as both have one: it is the latest failure by send time
/// there, the last to arrive in memory).
fn check_matrix(matrix: &Value, data: &ReportData, from_clickhouse: bool) {
    let cells = matrix.as_array().expect("a matrix array");
    assert_eq!(cells.len(), data.summary.cells.len());
    assert_eq!(
        cells.len(),
        6 * 11 * 4,
        "6 scenarios (two of them the ctx tiers) × 4 rows × 11 providers"
    );
    for cell in &data.summary.cells {
        let got = cells
            .iter()
            .find(|c| {
                c["region"] == cell.region
                    && c["provider"] == cell.provider
                    && c["scenario"] == cell.scenario
            })
            .unwrap_or_else(|| {
                panic!(
                    "no cell {} {} {}",
                    cell.region, cell.provider, cell.scenario
                )
            });
        let mut want = serde_json::to_value(cell).unwrap();
        if from_clickhouse {
            let w = want.as_object_mut().unwrap().remove("last_error").unwrap();
            assert_eq!(got["last_error"].is_null(), w.is_null(), "{got}");
        }
        let path = format!("{}/{}/{}", cell.region, cell.provider, cell.scenario);
        same(got, &want, &path);
        // The percentiles, once more, as the numbers the brief is about.
        for (metric, p) in [("ttft", cell.ttft), ("ttfc", cell.ttfc), ("e2e", cell.e2e)] {
            if let Some(p) = p {
                for (k, v) in [
                    ("p50_ms", Some(p.p50_ms)),
                    ("p90_ms", Some(p.p90_ms)),
                    ("p95_ms", p.p95_ms),
                    ("p99_ms", Some(p.p99_ms)),
                ] {
                    assert!(v.is_some(), "{path} {metric} {k}");
                    assert_eq!(got[metric][k].as_f64(), v, "{path} {metric} {k}");
                }
                assert_eq!(got[metric]["n"].as_u64(), Some(p.n), "{path} {metric} n");
                assert_eq!(p.points.len(), 4, "{path} {metric}: the default list");
            }
        }
    }
}

/// The CSV's matrix lines carry the summary's percentiles with the same digits.
fn check_csv(csv: &str, data: &ReportData) {
    let mut values: BTreeMap<(String, String, String, String, String), String> = BTreeMap::new();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("section,scenario,region,provider,metric,stat,x,value")
    );
    for line in lines.filter(|l| l.starts_with("matrix,")) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 8, "{line}");
        values.insert(
            (
                f[1].into(),
                f[2].into(),
                f[3].into(),
                f[4].into(),
                f[5].into(),
            ),
            f[7].into(),
        );
    }
    let mut checked = 0;
    for c in &data.summary.cells {
        for (metric, p) in [("ttft", c.ttft), ("ttfc", c.ttfc), ("e2e", c.e2e)] {
            let Some(p) = p else { continue };
            for point in p.points.iter() {
                let stat = format!("p{}", point.percentile);
                let supported = format!("{stat}_supported");
                let key = |stat: &str| {
                    let m = metric.to_string();
                    (
                        c.scenario.clone(),
                        c.region.clone(),
                        c.provider.clone(),
                        m,
                        stat.to_string(),
                    )
                };
                let flag = if point.supported { "1" } else { "0" };
                assert_eq!(values.get(&key(&supported)).map(String::as_str), Some(flag));
                let lo = values.get(&key(&format!("{stat}_lo")));
                assert_eq!(lo, point.lo_ms.map(|v| v.to_string()).as_ref(), "{stat}");
            }
            let p95 = p.p95_ms.unwrap();
            for (stat, v) in [
                ("p50", p.p50_ms),
                ("p90", p.p90_ms),
                ("p95", p95),
                ("p99", p.p99_ms),
            ] {
                let key = (
                    c.scenario.clone(),
                    c.region.clone(),
                    c.provider.clone(),
                    metric.to_string(),
                    stat.to_string(),
                );
                assert_eq!(values.get(&key), Some(&v.to_string()), "{key:?}");
                checked += 1;
            }
        }
        let key = (
            c.scenario.clone(),
            c.region.clone(),
            c.provider.clone(),
            "attempts".to_string(),
            String::new(),
        );
        assert_eq!(values.get(&key), Some(&c.attempts.to_string()), "{key:?}");
    }
    assert!(checked > 500, "{checked} percentiles checked");
}

/// Every provider and scenario has its TTFT and E2E CDF, ending at 1 and first reaching 0.5
/// at the matrix's P50.
fn check_cdfs(m: &ReportModel) {
    let s = &m.campaign;
    assert_eq!(m.cdfs.len(), s.scenarios.len() * s.providers.len() * 2);
    for c in &m.cdfs {
        let cell = m.cell(ALL, &c.provider, &c.scenario).unwrap();
        let p = match c.metric {
            Metric::Ttft => cell.ttft,
            _ => cell.e2e,
        }
        .unwrap();
        assert_eq!(c.samples, cell.samples, "{} {}", c.provider, c.scenario);
        assert_eq!(c.points.last().map(|p| p.1), Some(1.0));
        let median = c.points.iter().find(|(_, f)| *f >= 0.5).unwrap().0;
        assert_eq!(
            median, p.p50_ms,
            "{} {} {}",
            c.provider, c.scenario, c.metric
        );
    }
    assert_eq!(m.itl.len(), s.scenarios.len() * s.providers.len());
    for i in &m.itl {
        let cell = m.cell(ALL, &i.provider, &i.scenario).unwrap();
        assert_eq!(i.at(0.5), cell.itl_p50_ms, "{} {}", i.provider, i.scenario);
    }
}

/// Every provider has a TTFT and an E2E series whose buckets together hold every sample of
/// that metric (all regions and scenarios), with P50 ≤ P99 in each bucket.
fn check_time_series(m: &ReportModel, data: &ReportData) {
    assert_eq!(m.time_series.len(), 2 * data.summary.providers.len());
    for ts in &m.time_series {
        let total: u64 = data
            .summary
            .scenarios
            .iter()
            .filter_map(|s| data.hist(ALL, &ts.provider, s, ts.metric))
            .map(|h| h.len())
            .sum();
        let counted: u64 = ts.points.iter().map(|p| p.samples).sum();
        assert_eq!(counted, total, "{} {}", ts.provider, ts.metric);
        assert!(ts.points.len() >= 3, "{ts:?}");
        assert!(ts.points.iter().all(|p| p.p50_ms <= p.p99_ms), "{ts:?}");
        assert!(ts.points.windows(2).all(|w| w[0].t_unix_s < w[1].t_unix_s));
    }
}

/// Peak vs off-peak: `us-east` and `ap-southeast` attempts all in `peak`, `eu-west`'s all in
/// `off-peak`, each region's attempts those of its matrix cells of the rounds scenarios (the
/// sweep and the open loop are left out of the windows by default).
fn check_windows(m: &ReportModel, data: &ReportData) {
    assert_eq!(m.windows.len(), 2);
    let w = &m.windows[0];
    assert_eq!((w.metric.as_str(), w.percentile), ("ttft", 50));
    assert_eq!(w.windows, ["peak", "off-peak"]);
    let rounds: Vec<&str> = data
        .plan
        .scenarios
        .iter()
        .filter(|s| s.load.is_rounds())
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(w.scenarios, rounds);
    assert_eq!(
        w.scenarios.len() + w.left_out_scenarios.len(),
        data.plan.scenarios.len()
    );
    for row in w.rows.iter().filter(|r| r.region != ALL) {
        let attempts: u64 = data
            .summary
            .cells
            .iter()
            .filter(|c| c.region == row.region && c.provider == row.provider)
            .filter(|c| rounds.contains(&c.scenario.as_str()))
            .map(|c| c.attempts)
            .sum();
        let (inside, outside) = if row.region == "eu-west" {
            (1, 0)
        } else {
            (0, 1)
        };
        assert_eq!(row.windows[inside].stat.attempts, attempts, "{row:?}");
        assert_eq!(row.windows[outside].stat.attempts, 0, "{row:?}");
    }
}

/// Runs headless Chromium on `args` (plus the usual offline flags) and returns its stdout.
fn chromium(browser: &Path, profile: &Path, args: &[String]) -> String {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium {args:?}: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium {args:?} did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap()
}

/// The value of attribute `name` in the tag text `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let end = tag[start..].find('"')? + start;
    Some(&tag[start..end])
}

/// Data marks in a chart: SVG elements in a series colour with non-empty geometry (a
/// polyline of 2+ points, a rect of positive height and width, a circle).
fn data_marks(figure: &str, palette: &[String]) -> (usize, usize, usize) {
    let coloured = |tag: &str| {
        [attr(tag, "stroke"), attr(tag, "fill")]
            .into_iter()
            .flatten()
            .any(|c| palette.iter().any(|p| p.eq_ignore_ascii_case(c)))
    };
    let tags = |name: &str| -> Vec<&str> {
        figure
            .match_indices(&format!("<{name} "))
            .map(|(i, _)| &figure[i..i + figure[i..].find('>').unwrap()])
            .filter(|t| coloured(t))
            .collect()
    };
    let lines = tags("polyline")
        .into_iter()
        .filter(|t| attr(t, "points").is_some_and(|p| p.split_whitespace().count() >= 2))
        .count();
    let positive = |t: &str, a: &str| {
        attr(t, a)
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| v > 0.0)
    };
    let rects = tags("rect")
        .into_iter()
        .filter(|t| positive(t, "height") && positive(t, "width"))
        .count();
    let circles = tags("circle")
        .into_iter()
        .filter(|t| positive(t, "r"))
        .count();
    (lines, rects, circles)
}

/// Opens `html` in headless Chromium: every heatmap and chart of `m` is in the DOM with its
/// data marks, and a screenshot of the top of the page is not blank.
fn check_rendered(browser: &Path, profile: &Path, html: &Path, m: &ReportModel, dir: &Path) {
    let url = format!("file://{}", html.display());
    let dom = chromium(browser, profile, &["--dump-dom".into(), url.clone()]);
    assert!(
        dom.contains("<section id=\"matrix\">"),
        "no report in the DOM:\n{}",
        &dom[..dom.len().min(2000)]
    );
    let palette: Vec<String> = (0..charts::PALETTE.len()).map(charts::colour_hex).collect();

    // Heatmaps: per scenario, P50, P90, P95 and P99 of TTFT, TTFC and E2E, errors and
    // samples; every cell filled in: coloured, or hatched when its samples do not support it.
    let heatmaps: Vec<&str> = dom.split("<figure class=\"heatmap\"").skip(1).collect();
    assert_eq!(heatmaps.len(), m.campaign.scenarios.len() * 14);
    let cells = (m.campaign.regions.len() + 1) * m.campaign.providers.len();
    for h in &heatmaps {
        let h = &h[..h.find("</figure>").unwrap()];
        assert_eq!(h.matches("<td").count(), cells, "{h}");
        if !h.contains("samples (ok attempts)") {
            let hatched = h.matches("class=\"unsupported\"").count();
            assert!(
                h.matches("background:#").count() + hatched >= cells / 2,
                "{h}"
            );
        }
    }

    // Charts by kind: (figures, polylines, rects, circles) with data marks.
    let mut kinds: BTreeMap<String, (usize, usize, usize, usize)> = BTreeMap::new();
    for fig in dom.split("<figure class=\"chart\"").skip(1) {
        let fig = &fig[..fig.find("</figure>").unwrap()];
        let kind = attr(&format!(" {}", &fig[..fig.find('>').unwrap()]), "data-kind")
            .unwrap()
            .to_string();
        assert!(fig.contains("<svg"), "{kind}: no SVG");
        let (l, r, c) = data_marks(fig, &palette);
        assert!(l + r + c > 0, "{kind} chart without data marks:\n{fig}");
        let e = kinds.entry(kind).or_default();
        *e = (e.0 + 1, e.1 + l, e.2 + r, e.3 + c);
    }
    let s = &m.campaign;
    let n_scen = s.scenarios.len();
    let cdf = kinds["cdf"];
    assert_eq!(cdf.0, n_scen * 2, "{kinds:?}");
    assert!(cdf.1 >= m.cdfs.len(), "one line per CDF: {kinds:?}");
    let itl = kinds["itl"];
    assert_eq!(
        (itl.0, itl.2),
        (n_scen, m.itl.len()),
        "one box per ITL row: {kinds:?}"
    );
    let sweep_rows = m.sweeps.iter().filter(|r| r.region == ALL).count();
    let knees = m
        .sweeps
        .iter()
        .filter(|r| r.region == ALL && r.knee.is_some())
        .count();
    let lat = kinds["sweep-latency"];
    assert!(lat.1 >= sweep_rows && lat.3 >= 2 * knees, "{kinds:?}");
    assert!(kinds["sweep-throughput"].1 >= sweep_rows, "{kinds:?}");
    let bars = m
        .rates
        .iter()
        .filter(|r| r.region == ALL)
        .map(|r| [r.e2e, r.e2e_intended].iter().flatten().count() * 2)
        .sum::<usize>();
    assert_eq!(kinds["rate"].2, bars, "{kinds:?}");
    if m.time_series.is_empty() {
        assert!(!kinds.contains_key("time-series"));
        assert!(dom.contains("latency over time comes from ClickHouse"));
    } else {
        let ts = kinds["time-series"];
        assert_eq!(ts.0, s.providers.len(), "{kinds:?}");
        assert!(
            ts.1 >= 4 * s.providers.len(),
            "P50 and P99 of TTFT and E2E: {kinds:?}"
        );
    }
    if m.windows.is_empty() {
        assert!(!kinds.contains_key("windows"));
    } else {
        let w = kinds["windows"];
        assert_eq!(w.0, 2, "{kinds:?}");
        assert!(w.2 >= 2 * s.providers.len(), "{kinds:?}");
    }

    // The screenshot: a picture, not a blank page.
    let shot = dir.join(format!(
        "{}.png",
        html.file_stem().unwrap().to_string_lossy()
    ));
    chromium(
        browser,
        profile,
        &[
            "--window-size=1400,2600".into(),
            format!("--screenshot={}", shot.display()),
            url,
        ],
    );
    check_not_blank(&shot);
}

/// The PNG at `path` has many colours and a good share of non-background pixels.
fn check_not_blank(path: &Path) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    assert!(
        info.width >= 1000 && info.height >= 2000,
        "{}x{}",
        info.width,
        info.height
    );
    let pixels = &buf[..info.buffer_size()];
    let mut colours = std::collections::BTreeSet::new();
    let mut ink = 0usize;
    let total = (info.width * info.height) as usize;
    for px in pixels.chunks_exact(channels) {
        let (r, g, b) = (px[0], px[1], px[2]);
        colours.insert((r >> 3, g >> 3, b >> 3));
        // Page background (#f6f7f9) and white sections are not ink.
        if r.min(g).min(b) < 235 {
            ink += 1;
        }
    }
    assert!(
        colours.len() > 100,
        "{} colours in {}",
        colours.len(),
        path.display()
    );
    assert!(
        ink * 100 > total * 5,
        "only {ink} of {total} pixels drawn in {}",
        path.display()
    );
}
