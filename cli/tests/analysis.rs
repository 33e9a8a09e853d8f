//! The analysis against known answers: order-statistic intervals of percentiles, pairwise
//! verdicts on simulated latency distributions, flags, ranks, the selection matrix.

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;
use latmesh_core::hist::new_histogram;
use latmesh_core::metrics::Metric;
use latmesh_core::seeded_rng::SeededRng;
use latmesh_results::analysis::{FlagKind, SelectionRow, SelectionTable, analyze};
use latmesh_results::report_data::{ALL, CellMetric, ReportData, insert_hist};
use latmesh_results::stats::{
    self, CiMethod, PercentileCi, Verdict, compare, exact_rank_interval, kendall_w, min_samples,
    normal_rank_interval, rank_interval,
};
use latmesh_results::summary::Summary;
use serde_json::{Value, json};

/// Standard normal (Box–Muller from two draws in the open interval (0, 1)).
fn normal(rng: &mut SeededRng) -> f64 {
    let (u, v) = (rng.open_unit(), rng.open_unit());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// `n` lognormal latencies with median `median_ms` and log-sd `sigma`, recorded in µs into a
/// latmesh histogram (what a simulator-like provider produces).
fn lognormal(seed: u64, n: usize, median_ms: f64, sigma: f64) -> Histogram<u64> {
    let mut rng = SeededRng::new(seed);
    let mut h = new_histogram();
    for _ in 0..n {
        let ms = median_ms * (sigma * normal(&mut rng)).exp();
        h.record((ms * 1000.0).round().max(1.0) as u64).unwrap();
    }
    h
}

fn cis(h: &Histogram<u64>) -> Vec<PercentileCi> {
    stats::PERCENTILES
        .iter()
        .map(|&p| PercentileCi::of(h, p))
        .collect()
}

#[test]
fn min_samples_are_the_known_thresholds() {
    // (1 − q)ⁿ ≤ 2.5 % and qⁿ ≤ 2.5 %.
    assert_eq!(min_samples(0.5), 6);
    assert_eq!(min_samples(0.95), 72);
    assert_eq!(min_samples(0.99), 368);
    assert!(rank_interval(5, 0.5).is_none());
    let r = rank_interval(6, 0.5).unwrap();
    assert_eq!((r.lower, r.upper), (1, 6));
    assert!(
        (r.coverage - (1.0 - 2.0 / 64.0)).abs() < 1e-12,
        "{}",
        r.coverage
    );
    assert!(rank_interval(71, 0.95).is_none() && rank_interval(72, 0.95).is_some());
    assert!(rank_interval(367, 0.99).is_none() && rank_interval(368, 0.99).is_some());
}

#[test]
fn uniform_median_interval_has_the_expected_ranks_and_width() {
    // 1..=1000 µs, each once (exact in HDR buckets below 2048).
    let mut h = new_histogram();
    for v in 1..=1000u64 {
        h.record(v).unwrap();
    }
    let p50 = PercentileCi::of(&h, 50.0);
    let ci = p50.ci.unwrap();
    // Binomial(1000, ½): P(B ≤ 468) = 0.0231 ≤ 0.025 < P(B ≤ 469); by symmetry k = 532.
    assert_eq!((ci.lower_rank, ci.upper_rank), (469, 532));
    assert_eq!(ci.method, CiMethod::ExactBinomial);
    assert!((ci.coverage - 0.953_708_8).abs() < 1e-6, "{}", ci.coverage);
    assert_eq!((ci.lower_ms, ci.upper_ms), (0.469, 0.532));
    assert!(ci.lower_ms <= 0.5 && 0.5 <= ci.upper_ms);
    assert!(((ci.upper_ms - ci.lower_ms) * 1000.0 - 63.0).abs() < 1e-9);
    assert_eq!(p50.estimate_ms, 0.5);
    // The normal approximation gives the same ranks at this n.
    let n = normal_rank_interval(1000, 0.5).unwrap();
    assert_eq!((n.lower, n.upper), (469, 532));
}

#[test]
fn exact_and_normal_ranks_agree_where_they_meet() {
    for q in [0.5, 0.95, 0.99] {
        let e = exact_rank_interval(10_000, q).unwrap();
        let a = normal_rank_interval(10_000, q).unwrap();
        assert!(
            e.coverage >= 0.95 && a.coverage >= 0.949,
            "{q}: {e:?} {a:?}"
        );
        assert!(
            e.lower.abs_diff(a.lower) <= 1 && e.upper.abs_diff(a.upper) <= 1,
            "{q}: {e:?} {a:?}"
        );
    }
    let big = rank_interval(1_000_000, 0.99).unwrap();
    assert_eq!(big.method, CiMethod::NormalApprox);
    assert!(big.lower < 990_000 && big.upper > 990_000);
}

#[test]
fn lognormal_medians_100_vs_120_ms_are_called_different() {
    // Two simulator-like providers: lognormal latencies, σ = 0.5, medians 100 and 120 ms.
    let a = cis(&lognormal(1, 2000, 100.0, 0.5));
    let b = cis(&lognormal(2, 2000, 120.0, 0.5));
    assert_eq!(compare(&a[0], &b[0]), Verdict::AFaster, "P50 {a:?} {b:?}");
    assert_eq!(compare(&b[0], &a[0]), Verdict::BFaster);
    assert_eq!(compare(&a[1], &b[1]), Verdict::AFaster, "P95");
    // P99 from 2000 samples: the intervals are wide; never the wrong way round.
    assert_ne!(compare(&a[2], &b[2]), Verdict::BFaster, "P99");
    // The true medians lie in their intervals.
    let (ca, cb) = (a[0].ci.unwrap(), b[0].ci.unwrap());
    assert!(ca.lower_ms <= 100.0 && 100.0 <= ca.upper_ms, "{ca:?}");
    assert!(cb.lower_ms <= 120.0 && 120.0 <= cb.upper_ms, "{cb:?}");
}

#[test]
fn identical_distributions_are_not_called_different() {
    for (s1, s2) in [(11, 12), (21, 22), (31, 32), (41, 42), (51, 52)] {
        let a = cis(&lognormal(s1, 2000, 100.0, 0.5));
        let b = cis(&lognormal(s2, 2000, 100.0, 0.5));
        for i in 0..3 {
            assert_eq!(
                compare(&a[i], &b[i]),
                Verdict::NoClearDifference,
                "seeds {s1}/{s2} P{}",
                a[i].percentile
            );
        }
    }
}

#[test]
fn small_samples_say_not_enough() {
    let h = lognormal(3, 20, 100.0, 0.5);
    let c = cis(&h);
    assert!(c[0].ci.is_some(), "P50 of 20 samples has an interval");
    assert!(c[1].ci.is_none() && c[1].min_samples == 72);
    assert!(c[2].ci.is_none() && c[2].min_samples == 368);
    assert!(c[2].text().contains("(n 20 < 368)"), "{}", c[2].text());
    let other = cis(&lognormal(4, 20, 500.0, 0.5));
    assert_eq!(compare(&c[2], &other[2]), Verdict::NotEnoughSamples);
    let tiny = lognormal(5, 5, 100.0, 0.5);
    assert!(PercentileCi::of(&tiny, 50.0).ci.is_none());
}

#[test]
fn kendall_w_known_answers() {
    let same = vec![vec![1.0, 2.0, 3.0, 4.0]; 3];
    assert_eq!(kendall_w(&same), Some(1.0));
    let opposite = vec![vec![1.0, 2.0, 3.0], vec![3.0, 2.0, 1.0]];
    assert_eq!(kendall_w(&opposite), Some(0.0));
    // 3 raters, 3 objects: rank sums 4, 6, 8 → S = 8, W = 12·8 / (9·24) = 4/9.
    let partial = vec![
        vec![1.0, 2.0, 3.0],
        vec![1.0, 3.0, 2.0],
        vec![2.0, 1.0, 3.0],
    ];
    assert!((kendall_w(&partial).unwrap() - 4.0 / 9.0).abs() < 1e-12);
    assert_eq!(kendall_w(&[vec![1.0, 2.0]]), None);
}

// ---- a whole campaign ----------------------------------------------------------------

const CAMPAIGN: &str = r#"
[campaign]
name = "analysis"
regions = ["us-east", "eu-west"]

[rounds]
count = 3
interval_s = 2.0
gap_ms = 100

[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
stream = true
max_tokens = 64

[[providers]]
name = "fast"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 2.0

[[providers]]
name = "spiky"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 0.5
price_output_usd_per_mtok = 1.0

[[providers]]
name = "mid"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 0.2
price_output_usd_per_mtok = 0.4

[[providers]]
name = "slow"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
price_input_usd_per_mtok = 0.1
price_output_usd_per_mtok = 0.2

[selection]
weights = { latency = 0.5, price = 0.3, quality = 0.2 }
latency_metric = "ttft"
latency_percentile = 50

[selection.scores.fast]
quality = 10
[selection.scores.spiky]
quality = 5
[selection.scores.mid]
quality = 8
[selection.scores.slow]
quality = 0
"#;

/// A histogram of `n` values: the first `n − tail` at `base_ms` (± a spread), the last
/// `tail` at `tail_ms`.
fn shaped(n: u64, base_ms: f64, tail: u64, tail_ms: f64) -> Histogram<u64> {
    let mut h = new_histogram();
    for i in 0..n - tail {
        let jitter = (i % 11) as f64 / 100.0; // 0..10 % above base
        h.record((base_ms * (1.0 + jitter) * 1000.0) as u64)
            .unwrap();
    }
    for _ in 0..tail {
        h.record((tail_ms * 1000.0) as u64).unwrap();
    }
    h
}

fn cell(region: &str, provider: &str, attempts: u64, outcomes: Value, extra: Value) -> Value {
    let mut c = json!({
        "region": region, "provider": provider, "scenario": "chat",
        "attempts": attempts, "samples": outcomes["ok"], "ttft": null, "ttfc": null, "e2e": null,
        "tpot_p50_ms": null, "itl_p50_ms": null, "error_pct": 0.0, "requests": attempts,
        "request_error_pct": 0.0, "throttled_pct": 0.0, "output_tokens_mean": 50.0,
        "tokens_from_usage": 0, "usage_chunk_delta_mean": null, "usage_chunk_mismatches": 0,
        "last_error": null, "outcomes": outcomes,
    });
    let ok = outcomes["ok"].as_u64().unwrap();
    c["error_pct"] = json!((attempts - ok) as f64 * 100.0 / attempts as f64);
    // No retries: a request is an attempt.
    c["request_error_pct"] = c["error_pct"].clone();
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

fn data() -> ReportData {
    let plan = latmesh_core::campaign::load_toml_str(CAMPAIGN, Path::new(".")).unwrap();
    let regions = ["us-east", "eu-west"];
    // TTFT per provider: fast 100 ms, spiky 105 ms with 5 % at 2 s, mid 150 ms, slow 300 ms.
    let shapes: [(&str, f64, u64, f64); 4] = [
        ("fast", 100.0, 0, 0.0),
        ("spiky", 105.0, 50, 2000.0),
        ("mid", 150.0, 0, 0.0),
        ("slow", 300.0, 0, 0.0),
    ];
    let mut hists = BTreeMap::new();
    for (p, base, tail, tail_ms) in shapes {
        let mut all = new_histogram();
        for r in regions {
            let h = shaped(1000, base, tail, tail_ms);
            all.add(&h).unwrap();
            insert_hist(
                &mut hists,
                CellMetric {
                    region: r.into(),
                    provider: p.into(),
                    scenario: "chat".into(),
                    metric: Metric::Ttft,
                },
                &h,
            );
        }
        insert_hist(
            &mut hists,
            CellMetric {
                region: ALL.into(),
                provider: p.into(),
                scenario: "chat".into(),
                metric: Metric::Ttft,
            },
            &all,
        );
    }
    let mut cells = Vec::new();
    for r in regions.iter().copied().chain([ALL]) {
        let k = if r == ALL { 2 } else { 1 };
        cells.push(cell(
            r,
            "fast",
            1000 * k,
            json!({"ok": 1000 * k}),
            json!({}),
        ));
        // spiky: 1 timeout in 1000 attempts per region (0.1 %: not above) — but 2 of 1000
        // in eu-west (0.2 %: flagged).
        let timeouts = if r == "eu-west" {
            2
        } else if r == ALL {
            3
        } else {
            1
        };
        cells.push(cell(
            r,
            "spiky",
            1000 * k + timeouts,
            json!({"ok": 1000 * k, "timeout_ttft": timeouts}),
            json!({}),
        ));
        // mid: usage disagrees with the chunk count in 7 attempts.
        cells.push(cell(
            r,
            "mid",
            1000 * k,
            json!({"ok": 1000 * k}),
            json!({"usage_chunk_mismatches": 7 * k, "usage_chunk_delta_mean": 0.25, "tokens_over_usage": 2 * k}),
        ));
        // slow: answers three times longer than the others.
        cells.push(cell(
            r,
            "slow",
            1000 * k,
            json!({"ok": 1000 * k}),
            json!({"output_tokens_mean": 150.0}),
        ));
    }
    let summary: Summary = serde_json::from_value(json!({
        "campaign_id": "analysis-1", "name": "analysis", "plan_hash": plan.hash(),
        "metrics_version": plan.metrics_version, "start_at_unix_us": 1_700_000_000_000_000i64,
        "regions": regions, "providers": ["fast", "spiky", "mid", "slow"], "scenarios": ["chat"],
        "cells": cells, "agents": [], "complete": true,
    }))
    .unwrap();
    ReportData {
        summary,
        plan,
        hists,
        compat: Default::default(),
    }
}

#[test]
fn a_campaign_s_intervals_verdicts_flags_ranks_and_selection() {
    let d = data();
    let a = analyze(&d);
    // Intervals and verdicts.
    let fast = a.cell("us-east", "fast", "chat", Metric::Ttft).unwrap();
    assert_eq!(fast.n, 1000);
    assert!(fast.percentiles.iter().all(|p| p.ci.is_some()));
    assert_eq!(
        a.comparison("us-east", "chat", Metric::Ttft, 50.0, "fast", "slow"),
        Some(Verdict::AFaster)
    );
    assert_eq!(
        a.comparison("us-east", "chat", Metric::Ttft, 50.0, "slow", "fast"),
        Some(Verdict::BFaster)
    );
    assert_eq!(
        a.comparison("ALL", "chat", Metric::Ttft, 99.0, "spiky", "slow"),
        Some(Verdict::BFaster),
        "spiky's P99 is its 2 s tail"
    );
    // 4 providers → 6 pairs × 3 percentiles × 3 rows.
    assert_eq!(a.comparisons.len(), 6 * 3 * 3);

    // Flags.
    let kinds = |k: FlagKind| -> Vec<(String, String)> {
        a.flags
            .iter()
            .filter(|f| f.kind == k)
            .map(|f| (f.region.clone(), f.provider.clone()))
            .collect()
    };
    let tails = kinds(FlagKind::TailHigh);
    assert!(
        tails.contains(&("us-east".into(), "spiky".into())),
        "{tails:?}"
    );
    assert!(tails.contains(&(ALL.into(), "spiky".into())), "{tails:?}");
    assert!(tails.iter().all(|(_, p)| p == "spiky"), "{tails:?}");
    assert_eq!(
        kinds(FlagKind::Timeouts),
        vec![("eu-west".into(), "spiky".into())]
    );
    assert_eq!(
        kinds(FlagKind::UsageMismatch),
        vec![(ALL.into(), "mid".into())]
    );
    let usage = a
        .flags
        .iter()
        .find(|f| f.kind == FlagKind::UsageMismatch)
        .unwrap();
    assert!(
        usage.detail.ends_with(
            "tokens); 4 used the payload count (usage counted fewer tokens than streamed)"
        ),
        "{}",
        usage.detail
    );
    assert_eq!(
        kinds(FlagKind::OutputLength),
        vec![(ALL.into(), "slow".into())]
    );

    // Ranks per region: the same everywhere (by P50: fast, spiky, mid, slow) → W = 1.
    let t = &a.ranks[0];
    assert_eq!(t.columns, ["us-east", "eu-west"]);
    assert_eq!((t.metric, t.percentile), (Metric::Ttft, 50.0));
    let ranks: Vec<(String, Option<f64>, Option<f64>)> = t
        .rows
        .iter()
        .map(|r| (r.provider.clone(), r.mean_rank, r.rank_range))
        .collect();
    assert_eq!(
        ranks,
        vec![
            ("fast".into(), Some(1.0), Some(0.0)),
            ("spiky".into(), Some(2.0), Some(0.0)),
            ("mid".into(), Some(3.0), Some(0.0)),
            ("slow".into(), Some(4.0), Some(0.0)),
        ]
    );
    assert_eq!(t.kendall_w, Some(1.0));

    // Selection (us-east): latency and price relative to the median on a log scale,
    // quality / 10.
    let s = a.selection.iter().find(|s| s.region == "us-east").unwrap();
    let row = |p: &str| s.rows.iter().find(|r| r.provider == p).unwrap();
    let lat = |p: &str| row(p).latency.raw.unwrap();
    let median = (lat("spiky") + lat("mid")) / 2.0;
    for p in ["fast", "spiky", "mid", "slow"] {
        // × the share of attempts that worked (a failed attempt scores 0).
        let ok_share = 1.0 - row(p).stability.raw.unwrap() / 100.0;
        let want = (0.5 - (lat(p) / median).log2() / 2.0).clamp(0.0, 1.0) * ok_share;
        assert!((row(p).latency.score.unwrap() - want).abs() < 1e-12, "{p}");
    }
    assert_eq!(
        row("slow").latency.score,
        Some(0.0),
        "over twice the median"
    );
    assert!(row("fast").price.score.unwrap() < 0.5, "most expensive");
    assert_eq!(row("slow").quality.score, Some(0.0));
    assert_eq!(row("mid").quality.score, Some(0.8));
    // Stability is not weighted here, but shown: spiky's 1 timeout in 1001 attempts.
    assert_eq!(row("spiky").stability.text, "err 0.1% of 1001");
    for r in &s.rows {
        let want = 0.5 * r.latency.score.unwrap()
            + 0.3 * r.price.score.unwrap()
            + 0.2 * r.quality.score.unwrap();
        assert!((r.total - want).abs() < 1e-12, "{}", r.provider);
    }
    assert!(s.rows.windows(2).all(|w| w[0].total >= w[1].total));
    assert_eq!(s.rows[0].rank, 1);

    // Renderings.
    let text = latmesh_cli::ui::analysis::render(&a);
    assert!(text.contains("chat · ttft"), "{text}");
    assert!(text.contains("fast ") && text.contains(" < "), "{text}");
    assert!(
        text.contains("tail") && text.contains("Kendall's W 1.00"),
        "{text}"
    );
    assert!(text.contains("selection chat · us-east"), "{text}");
    assert!(text.contains("0.5 at the region's median"), "{text}");
    let html = latmesh_report::analysis_html::ToHtml::to_html(&a);
    assert!(html.starts_with("<section class=\"latmesh-analysis\">"));
    assert!(html.trim_end().ends_with("</section>"));
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"));
    assert!(html.contains("<table>") && html.contains("Kendall"));
    let j = serde_json::to_value(&a).unwrap();
    assert_eq!(j["cells"][0]["percentiles"][0]["percentile"], 50.0);
    assert!(j["flags"].as_array().unwrap().len() >= 4);
    assert!(j["selection"][0]["rows"][0]["latency"]["score"].is_number());
}

// ---- the selection ranking against adversarial inputs -------------------------------------

/// A one-region campaign of `providers` (name, input and output price per Mtok) with
/// `[selection]` `weights` (TOML inline table) and TTFT at `percentile`.
fn selection_plan(
    providers: &[(&str, f64, f64)],
    weights: &str,
    percentile: f64,
) -> latmesh_core::plan::Plan {
    selection_plan_with(providers, weights, percentile, "")
}

/// [`selection_plan`] with `extra` appended to the `[selection]` section (its `scores`).
fn selection_plan_with(
    providers: &[(&str, f64, f64)],
    weights: &str,
    percentile: f64,
    extra: &str,
) -> latmesh_core::plan::Plan {
    let mut text = String::from(
        "[campaign]\nname = \"sel\"\nregions = [\"us-east\"]\n[rounds]\ncount = 3\ninterval_s = 2.0\ngap_ms = 100\n\
         [[scenarios]]\nname = \"chat\"\nprompt_ids = [\"short-qa-en-*\"]\nstream = true\nmax_tokens = 64\n",
    );
    for (name, pin, pout) in providers {
        text.push_str(&format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n\
             price_input_usd_per_mtok = {pin}\nprice_output_usd_per_mtok = {pout}\n"
        ));
    }
    text.push_str(&format!(
        "[selection]\nweights = {weights}\nlatency_metric = \"ttft\"\nlatency_percentile = {percentile}\n{extra}"
    ));
    latmesh_core::campaign::load_toml_str(&text, Path::new(".")).unwrap()
}

/// One provider's measured cell: attempts, `ok` ones, and its TTFT histogram.
struct Measured {
    name: &'static str,
    attempts: u64,
    throttled: u64,
    ttft: Histogram<u64>,
}

/// `n` attempts, all `ok`, TTFT around `base_ms`.
fn clean(name: &'static str, n: u64, base_ms: f64) -> Measured {
    Measured {
        name,
        attempts: n,
        throttled: 0,
        ttft: shaped(n, base_ms, 0, 0.0),
    }
}

fn selection_data(plan: latmesh_core::plan::Plan, measured: Vec<Measured>) -> ReportData {
    let mut hists = BTreeMap::new();
    let mut cells = Vec::new();
    for m in measured {
        let ok = m.attempts - m.throttled;
        for region in ["us-east", ALL] {
            cells.push(cell(
                region,
                m.name,
                m.attempts,
                json!({"ok": ok, "throttled": m.throttled}),
                json!({}),
            ));
            insert_hist(
                &mut hists,
                CellMetric {
                    region: region.into(),
                    provider: m.name.into(),
                    scenario: "chat".into(),
                    metric: Metric::Ttft,
                },
                &m.ttft,
            );
        }
    }
    let providers: Vec<String> = plan.providers.iter().map(|p| p.name.clone()).collect();
    let summary: Summary = serde_json::from_value(json!({
        "campaign_id": "sel-1", "name": "sel", "plan_hash": plan.hash(),
        "metrics_version": plan.metrics_version, "start_at_unix_us": 1_700_000_000_000_000i64,
        "regions": ["us-east"], "providers": providers, "scenarios": ["chat"],
        "cells": cells, "agents": [], "complete": true,
    }))
    .unwrap();
    ReportData {
        summary,
        plan,
        hists,
        compat: Default::default(),
    }
}

/// The us-east selection table of `data`'s analysis.
fn us_east(data: &ReportData) -> SelectionTable {
    analyze(data)
        .selection
        .into_iter()
        .find(|t| t.region == "us-east")
        .unwrap()
}

trait RowOf {
    fn row(&self, provider: &str) -> &SelectionRow;
}

impl RowOf for SelectionTable {
    fn row(&self, provider: &str) -> &SelectionRow {
        self.rows.iter().find(|r| r.provider == provider).unwrap()
    }
}

fn ranked(data: &ReportData) -> Vec<String> {
    us_east(data)
        .rows
        .iter()
        .map(|r| r.provider.clone())
        .collect()
}

/// The issue's case: seven providers; `throttled` answers 8 % of its attempts (HTTP 429 on
/// the other 92 %), its few successes fast and tight; `clean` has no error at a similar
/// price and latency but a realistic tail; one provider is a slow outlier. The throttled
/// provider must rank below the clean one (min–max stability — half errors, half the
/// P99/P50 spread of the successes — put it above).
#[test]
fn a_provider_failing_92_percent_ranks_below_a_clean_one() {
    let providers = [
        ("clean", 0.30, 1.20),
        ("throttled", 0.30, 1.20),
        ("a", 0.50, 2.00),
        ("b", 0.20, 0.80),
        ("c", 0.40, 1.60),
        ("d", 0.25, 1.00),
        ("outlier", 0.30, 1.20),
    ];
    let plan = selection_plan(
        &providers,
        "{ latency = 0.4, stability = 0.3, price = 0.3 }",
        50.0,
    );
    let m = |name, attempts, throttled, base_ms, tail| Measured {
        name,
        attempts,
        throttled,
        ttft: shaped(attempts - throttled, base_ms, tail, base_ms * 4.0),
    };
    let measured = || {
        vec![
            m("clean", 1000, 0, 110.0, 60),
            m("throttled", 1000, 920, 105.0, 0),
            m("a", 1000, 10, 100.0, 10),
            m("b", 1000, 5, 140.0, 10),
            m("c", 1000, 0, 120.0, 10),
            m("d", 1000, 20, 130.0, 10),
            m("outlier", 1000, 0, 5000.0, 0),
        ]
    };
    // The failure-rate gate (5 %) excludes it before any score, with the reason.
    let t = us_east(&selection_data(plan, measured()));
    assert!(!t.rows.iter().any(|r| r.provider == "throttled"));
    assert_eq!(t.excluded.len(), 1);
    assert_eq!(t.excluded[0].provider, "throttled");
    assert_eq!(
        t.excluded[0].reasons(),
        "failure rate failed: failed 92.0% of 1000 requests, 95% interval [90.2, 93.5] above the limit 5%"
    );
    // With the gate opened (a limit of 99 %), the score alone still ranks it below.
    let plan = selection_plan_with(
        &providers,
        "{ latency = 0.4, stability = 0.3, price = 0.3 }",
        50.0,
        "max_failed_pct = 99\n",
    );
    let data = selection_data(plan, measured());
    let order = ranked(&data);
    let pos = |p: &str| order.iter().position(|x| x == p).unwrap();
    assert!(pos("throttled") > pos("clean"), "{order:?}");
    let t = us_east(&data);
    let row = |p: &str| t.row(p);
    // Its raw value and score are shown: 92 % of 1000 failed, score 1 − upper bound.
    let st = &row("throttled").stability;
    assert_eq!(st.text, "err 92.0% of 1000");
    assert_eq!(st.raw, Some(92.0));
    assert!(st.score.unwrap() < 0.07, "{st:?}");
    assert!(row("clean").stability.score.unwrap() > 0.99);
    // However fast its few successes, it loses more to failures than latency can give back:
    // the total gap is at least the stability weight × the score gap minus latency's weight
    // × its latency gain.
    assert!(row("clean").total > row("throttled").total + 0.2);
}

/// A provider answering a quarter of its requests, fast (a requests-per-minute quota
/// refusing the rest), must not rank first on the speed of its few successes: latency and
/// price count a failed attempt as 0. With the README's example weights (latency 0.4,
/// stability 0.2, price 0.2) and equal prices it ranks below both clean providers, and the
/// text says which share of attempts its latency stands for.
#[test]
fn fast_successes_of_a_mostly_failing_provider_do_not_win_the_ranking() {
    let providers = [
        ("quota", 0.30, 1.20),
        ("clean1", 0.30, 1.20),
        ("clean2", 0.30, 1.20),
    ];
    // The gate opened: the score alone must rank it last.
    let plan = selection_plan_with(
        &providers,
        "{ latency = 0.4, stability = 0.2, price = 0.2 }",
        50.0,
        "max_failed_pct = 99\n",
    );
    let data = selection_data(
        plan,
        vec![
            Measured {
                name: "quota",
                attempts: 24,
                throttled: 18,
                ttft: shaped(6, 100.0, 0, 100.0),
            },
            clean("clean1", 24, 300.0),
            clean("clean2", 24, 400.0),
        ],
    );
    let order = ranked(&data);
    assert_eq!(order.last().map(String::as_str), Some("quota"), "{order:?}");
    let t = us_east(&data);
    let quota = &t.row("quota").latency;
    // Its successes are the fastest (score 1 alone), a quarter of its attempts worked.
    assert_eq!(quota.score, Some(0.25), "{quota:?}");
    assert_eq!(quota.text, "102 ms × ok 25%");
    assert_eq!(t.row("clean1").latency.text, "312 ms");
}

/// One slow outlier (5 s) must not squeeze the others' latency scores into a narrow band so
/// that price decides: `quick` (100 ms, pricier) stays well ahead of `slow2x` (200 ms,
/// cheaper) in latency, and ranks first with equal latency and price weights.
#[test]
fn one_slow_outlier_does_not_squeeze_the_latency_scores() {
    let providers = [
        ("quick", 0.36, 1.44),
        ("slow2x", 0.30, 1.20),
        ("outlier", 0.27, 1.08),
    ];
    let plan = selection_plan(&providers, "{ latency = 0.5, price = 0.5 }", 50.0);
    let m = |name, base_ms| clean(name, 500, base_ms);
    let data = selection_data(
        plan,
        vec![m("quick", 100.0), m("slow2x", 200.0), m("outlier", 5000.0)],
    );
    let t = us_east(&data);
    let row = |p: &str| t.row(p);
    let gap = row("quick").latency.score.unwrap() - row("slow2x").latency.score.unwrap();
    // Half the median's latency vs the median: a full 0.5 apart (min–max: 0.02).
    assert!((gap - 0.5).abs() < 1e-9, "{gap}");
    assert_eq!(row("outlier").latency.score, Some(0.0));
    assert_eq!(ranked(&data)[0], "quick");
    // The same two without the outlier keep their order.
    let plan = selection_plan(&providers[..2], "{ latency = 0.5, price = 0.5 }", 50.0);
    let data = selection_data(plan, vec![m("quick", 100.0), m("slow2x", 200.0)]);
    assert_eq!(ranked(&data)[0], "quick");
}

/// A latency percentile the samples cannot support (P99 of 100 samples) is marked and
/// scores 0; a supported one (P99 of 1000) is scored.
#[test]
fn an_unsupported_latency_percentile_is_marked_and_scored_0() {
    let providers = [
        ("small", 0.3, 1.2),
        ("large", 0.3, 1.2),
        ("other", 0.3, 1.2),
    ];
    let plan = selection_plan(&providers, "{ latency = 1 }", 99.0);
    let data = selection_data(
        plan,
        vec![
            clean("small", 100, 50.0),
            clean("large", 1000, 100.0),
            clean("other", 1000, 120.0),
        ],
    );
    let t = us_east(&data);
    let row = |p: &str| t.row(p);
    let small = &row("small").latency;
    assert!(small.unsupported);
    assert_eq!(small.score, Some(0.0));
    assert_eq!(small.text, "P99 unsupported (n 100 < 368)");
    assert!(!row("large").latency.unsupported);
    assert!(row("large").latency.score.unwrap() > 0.5);
    // Its score is the lowest, but with no interval its latency could be anything: its
    // total's interval spans the whole latency weight, so it ties with the best ("1=")
    // rather than being ranked last as if it were known to be slow.
    assert_eq!(row("small").total_interval, (0.0, 1.0));
    assert_eq!(row("small").rank_text(), "1=");
    assert_eq!(row("large").rank_text(), "1=");
    assert_eq!(row("other").rank_text(), "2");
    assert!(row("small").total < row("other").total);
    let j = serde_json::to_value(&t).unwrap();
    let i = t.rows.iter().position(|r| r.provider == "small").unwrap();
    assert_eq!(j["rows"][i]["latency"]["unsupported"], true);
}

/// The issue's demo case: `flaky` fails 16.7 % of its requests, `steady` and `bulk` none.
/// Over 36 requests the Wilson interval of 6 failures ([7.9, 31.9] %) lies above the 5 %
/// limit: excluded, whatever its speed. Over 12 (2 failures, [4.7, 44.8] %) it is at risk:
/// ranked after both clean providers although it is the fastest. The clean ones' 0 of 12
/// ([0, 24.2] %) is undecided: marked, not penalized.
#[test]
fn a_provider_failing_a_sixth_of_its_requests_is_excluded_or_ranked_after_the_clean_ones() {
    let providers = [
        ("flaky", 0.3, 1.2),
        ("steady", 0.3, 1.2),
        ("bulk", 0.3, 1.2),
    ];
    let weights = "{ latency = 0.5, stability = 0.2, price = 0.3 }";
    let m = |name, attempts, failed, base_ms| Measured {
        name,
        attempts,
        throttled: failed,
        ttft: shaped(attempts - failed, base_ms, 0, 0.0),
    };
    let data = selection_data(
        selection_plan(&providers, weights, 50.0),
        vec![
            m("flaky", 36, 6, 50.0),
            m("steady", 36, 0, 200.0),
            m("bulk", 36, 0, 210.0),
        ],
    );
    let t = us_east(&data);
    assert_eq!(ranked(&data), ["steady", "bulk"]);
    assert_eq!(t.excluded[0].provider, "flaky");
    assert!(
        t.excluded[0]
            .reasons()
            .contains("failed 16.7% of 36 requests, 95% interval [7.9, 31.9] above the limit 5%"),
        "{:?}",
        t.excluded
    );
    let data = selection_data(
        selection_plan(&providers, weights, 50.0),
        vec![
            m("flaky", 12, 2, 50.0),
            m("steady", 12, 0, 200.0),
            m("bulk", 12, 0, 210.0),
        ],
    );
    let t = us_east(&data);
    assert!(t.excluded.is_empty());
    let flaky = t.row("flaky");
    assert_eq!(flaky.at_risk, 1);
    assert_eq!(flaky.rank, 3);
    assert!(flaky.total > t.row("steady").total, "the fastest by score");
    assert_eq!(
        flaky.gate_notes(),
        "failure rate at risk: failed 16.7% of 12 requests, 95% interval [4.7, 44.8] contains the limit 5%"
    );
    assert_eq!(ranked(&data), ["steady", "bulk", "flaky"]);
    // Steady and bulk, 200 vs 210 ms on 12 samples: their totals' intervals overlap: tied.
    let steady = t.row("steady");
    assert_eq!(
        (steady.rank, steady.tied, steady.rank_text().as_str()),
        (1, true, "1=")
    );
    assert_eq!(t.row("bulk").rank_text(), "1=");
    assert_eq!(steady.gate_notes(), "failure rate undecided");
    assert_eq!(
        steady.gates[0].detail,
        "failed 0.0% of 12 requests, 95% interval [0.0, 24.2] contains the limit 5%"
    );
    let (lo, hi) = steady.total_interval;
    assert!(
        lo < steady.total && steady.total <= hi,
        "{:?}",
        steady.total_interval
    );
    // Rendered: the rank with its tie, the exclusion with its reason.
    let text = latmesh_cli::ui::analysis::render_selection(&t);
    assert!(text.contains("| 1= | steady"), "{text}");
    assert!(text.contains("| 3  | flaky"), "{text}");
}

/// The terminal shows the first scenario over every region by default and says how many
/// tables more there are and where; `--selection all` shows every one.
#[test]
fn the_terminal_shows_one_selection_table_unless_asked_for_all() {
    use latmesh_cli::ui::analysis::{SelectionShown, render_selections};
    let providers = [("a", 0.3, 1.2), ("b", 0.3, 1.2)];
    let data = selection_data(
        selection_plan(&providers, "{ latency = 1 }", 50.0),
        vec![clean("a", 100, 100.0), clean("b", 100, 200.0)],
    );
    let tables = analyze(&data).selection;
    assert_eq!(tables.len(), 2);
    let first = render_selections(&tables, SelectionShown::First);
    assert!(first.contains("selection chat · ALL"), "{first}");
    assert!(!first.contains("selection chat · us-east"), "{first}");
    assert!(
        first.contains("(1 more selection tables, every scenario × region: --selection all, the HTML report's analysis, or the JSON summary's `selection`)"),
        "{first}"
    );
    let all = render_selections(&tables, SelectionShown::All);
    assert!(all.contains("selection chat · us-east") && all.contains("selection chat · ALL"));
    assert!(!all.contains("more selection tables"), "{all}");
}

/// The demo's JSON summary: the summary's fields, then compat, quality and the selection of
/// every scenario × region; it still reads back as a summary.
#[test]
fn the_demo_json_has_compat_quality_and_every_selection_table() {
    let providers = [("a", 0.3, 1.2), ("b", 0.3, 1.2)];
    let mut data = selection_data(
        selection_plan(&providers, "{ latency = 1 }", 50.0),
        vec![clean("a", 100, 100.0), clean("b", 100, 200.0)],
    );
    data.compat.compat = latmesh_results::parity::compat_by_provider(&compat_results("a", 3, 1));
    let tables = analyze(&data).selection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo/summary.json");
    latmesh_cli::cmd::demo::write_demo_json(&data, &tables, &path).unwrap();
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(j["campaign_id"], "sel-1");
    assert_eq!(j["compat"][0]["provider"], "a");
    assert_eq!(j["quality"], Value::Null);
    let keys: Vec<(&str, &str)> = j["selection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["scenario"].as_str().unwrap(),
                t["region"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys, [("chat", "us-east"), ("chat", "ALL")]);
    assert_eq!(j["selection"][0]["rows"][0]["provider"], "a");
    let back: Summary = serde_json::from_value(j).unwrap();
    assert_eq!(back.cells.len(), data.summary.cells.len());
}

/// Separated totals rank 1, 2, 3 without ties: 1000 samples each at 100, 200 and 400 ms.
#[test]
fn separated_totals_rank_without_ties() {
    let providers = [("a", 0.3, 1.2), ("b", 0.3, 1.2), ("c", 0.3, 1.2)];
    let data = selection_data(
        selection_plan(&providers, "{ latency = 1 }", 50.0),
        vec![
            clean("a", 1000, 100.0),
            clean("b", 1000, 200.0),
            clean("c", 1000, 400.0),
        ],
    );
    let t = us_east(&data);
    let ranks: Vec<String> = t.rows.iter().map(|r| r.rank_text()).collect();
    assert_eq!(ranks, ["1", "2", "3"]);
    for r in &t.rows {
        assert_eq!(r.gate_notes(), "", "{}", r.provider);
    }
    // The JSON carries the gates, the interval and the tie flag.
    let j = serde_json::to_value(&t).unwrap();
    assert_eq!(j["gates"]["max_failed_pct"], 5.0);
    assert_eq!(j["rows"][0]["tied"], false);
    assert_eq!(j["rows"][0]["gates"][0]["gate"], "failure_rate");
    assert_eq!(j["rows"][0]["gates"][0]["status"], "passed");
    assert_eq!(j["excluded"], json!([]));
}

/// A scenario with an SLO: a provider whose cell missed it is excluded (the README's
/// `slow-prefill` at ctx.8k: 0 % goodput) however it scores; an undecided verdict below
/// the target puts it at risk; `slo_gate = false` turns the gate off.
#[test]
fn a_missed_slo_excludes_and_an_undecided_one_is_at_risk() {
    let providers = [("slow", 0.1, 0.4), ("ok", 0.3, 1.2), ("unsure", 0.3, 1.2)];
    let goodput = |requests: u64, met: u64| {
        let c = latmesh_core::proportion::wilson(met, requests).unwrap();
        let pct = met as f64 * 100.0 / requests as f64;
        let meets = latmesh_results::slo_stats::interval_meets(
            Some(pct >= 90.0),
            false,
            (c.lower * 100.0, c.upper * 100.0),
            90.0,
        );
        json!({"requests": requests, "met": met, "pct": pct,
               "ci_pct": [c.lower * 100.0, c.upper * 100.0], "rps": null, "meets": meets})
    };
    let slo_data = |extra: &str| {
        let mut plan = selection_plan_with(&providers, "{ price = 1 }", 50.0, extra);
        plan.scenarios[0].slo = Some(latmesh_core::slo::Slo {
            ttft_ms: Some(2000.0),
            tpot_ms: None,
            e2e_ms: None,
            percentiles: Vec::new(),
            goodput_pct: 90.0,
        });
        let mut data = selection_data(
            plan,
            vec![
                clean("slow", 40, 5100.0),
                clean("ok", 40, 300.0),
                clean("unsure", 40, 400.0),
            ],
        );
        for c in &mut data.summary.cells {
            let g = match c.provider.as_str() {
                "slow" => goodput(40, 0),
                "ok" => goodput(40, 40),
                _ => goodput(40, 34),
            };
            c.goodput = Some(serde_json::from_value(g).unwrap());
        }
        data
    };
    let t = us_east(&slo_data(""));
    // The cheapest, and excluded: its SLO missed.
    assert_eq!(t.excluded.len(), 1);
    assert_eq!(
        t.excluded[0].reasons(),
        "SLO failed: goodput 0.0% of 40 requests, 95% interval [0.0, 8.8] vs 90%: missed"
    );
    // 34 of 40 (85 %, [70.9, 92.9]): undecided below the target: at risk, ranked after.
    let unsure = t.row("unsure");
    assert_eq!((unsure.at_risk, unsure.rank), (1, 2));
    assert!(
        unsure
            .gate_notes()
            .contains("SLO at risk: goodput 85.0% of 40 requests")
    );
    // 40 of 40 ([91.2, 100]): met.
    assert_eq!(t.row("ok").rank, 1);
    let t = us_east(&slo_data("slo_gate = false\n"));
    assert!(t.excluded.is_empty());
    assert_eq!(
        t.rows[0].provider, "slow",
        "the cheapest, without the SLO gate"
    );
}

/// `require_compat`: a provider whose required check was not offered is excluded with the
/// check's evidence; one whose check was not measured is at risk.
#[test]
fn a_required_compat_check_not_passed_excludes() {
    use latmesh_core::compat::{CompatCheck, CompatResult, Evidence, Verdict as V};
    let providers = [("a", 0.3, 1.2), ("b", 0.3, 1.2), ("c", 0.3, 1.2)];
    let plan = selection_plan_with(
        &providers,
        "{ latency = 1 }",
        50.0,
        "require_compat = [\"tool_call\"]\n[compat]\n",
    );
    let mut data = selection_data(
        plan,
        vec![
            clean("a", 100, 300.0),
            clean("b", 100, 100.0),
            clean("c", 100, 200.0),
        ],
    );
    let result = |provider: &str, verdict| CompatResult {
        provider: provider.into(),
        check: CompatCheck::ToolCall,
        verdict,
        evidence: Evidence {
            http_status: Some(400),
            field: Some("tools".into()),
            message: "400: tools are not supported".into(),
        },
        samples: Default::default(),
    };
    data.compat.compat = latmesh_results::parity::compat_by_provider(&[
        result("a", V::Pass),
        result("b", V::NotOffered),
    ]);
    let t = us_east(&data);
    assert_eq!(
        t.excluded[0].reasons(),
        "compat failed: tool_call: not_offered (400: tools are not supported)"
    );
    assert_eq!(ranked(&data), ["a", "c"]);
    assert_eq!(t.row("c").at_risk, 1);
    // A check whose samples disagreed cannot be relied on: excluded like a failure.
    data.compat.compat = latmesh_results::parity::compat_by_provider(&[
        result("a", V::Pass),
        result("b", V::NotOffered),
        result("c", V::Unstable),
    ]);
    let t = us_east(&data);
    assert_eq!(t.excluded.len(), 2);
    assert!(
        t.excluded[1]
            .reasons()
            .starts_with("compat failed: tool_call: unstable"),
        "{}",
        t.excluded[1].reasons()
    );
    assert_eq!(ranked(&data), ["a"]);
}

/// `provider`'s compatibility results: `pass` weighted checks passed, then `fail` failed, the
/// rest not applicable (and `reasoning_field`, weight 0, passed).
fn compat_results(
    provider: &str,
    pass: usize,
    fail: usize,
) -> Vec<latmesh_core::compat::CompatResult> {
    use latmesh_core::compat::{CompatCheck, CompatResult, Evidence, SampleTally, Verdict};
    let weighted = CompatCheck::ALL.into_iter().filter(|c| c.weight() > 0.0);
    let mut out: Vec<CompatResult> = weighted
        .enumerate()
        .map(|(i, check)| {
            let verdict = if i < pass {
                Verdict::Pass
            } else if i < pass + fail {
                Verdict::Fail
            } else {
                Verdict::NotApplicable
            };
            CompatResult {
                provider: provider.into(),
                check,
                verdict,
                evidence: Evidence::default(),
                samples: SampleTally::of(verdict),
            }
        })
        .collect();
    out.push(CompatResult {
        provider: provider.into(),
        check: CompatCheck::ReasoningField,
        verdict: Verdict::Pass,
        evidence: Evidence::default(),
        samples: SampleTally::of(Verdict::Pass),
    });
    out
}

/// `provider`'s quality samples: 32 prompts × 3, the first `wrong` prompts answered wrong.
fn quality_samples(provider: &str, wrong: u32) -> Vec<latmesh_core::quality::QualitySample> {
    let mut out = Vec::new();
    for p in 0..32u32 {
        for sample in 0..3 {
            let answer = if p < wrong { "x".into() } else { p.to_string() };
            out.push(latmesh_core::quality::QualitySample {
                provider: provider.into(),
                prompt_id: format!("q-{p}"),
                sample,
                outcome: latmesh_core::record::Outcome::Ok,
                correct: Some(p >= wrong),
                answer_hash: latmesh_core::quality::answer_hash(&answer),
                answer,
                output_tokens: 50,
                answered_model: None,
            });
        }
    }
    out
}

/// Where the user typed no quality / compatibility score, the selection uses what `latmesh
/// compat` measured, and says so; a typed score still overrides a measured one.
#[test]
fn measured_scores_fill_in_where_the_user_typed_none() {
    use latmesh_results::parity::{CompatReport, compat_by_provider, parity};
    let providers = [
        ("measured", 0.3, 1.2),
        ("half", 0.3, 1.2),
        ("typed", 0.3, 1.2),
        ("unknown", 0.3, 1.2),
    ];
    let scores: String = providers
        .iter()
        .map(|(p, _, _)| format!("[selection.scores.{p}]\nquality = 8\ncompatibility = 6\n"))
        .collect();
    let mut plan = selection_plan_with(
        &providers,
        "{ latency = 0.5, quality = 0.25, compatibility = 0.25 }",
        50.0,
        &scores,
    );
    // (What a file with [compat] and [quality] allows: no typed score for some providers.)
    let sel = plan.selection.as_mut().unwrap();
    sel.scores.remove("measured");
    sel.scores.remove("unknown");
    sel.scores.get_mut("half").unwrap().compatibility = None;
    let mut data = selection_data(
        plan,
        providers
            .iter()
            .map(|(p, _, _)| clean(p, 200, 100.0))
            .collect(),
    );
    let mut results = compat_results("measured", 9, 2);
    results.extend(compat_results("half", 11, 0));
    results.extend(compat_results("typed", 0, 11));
    let mut samples = quality_samples("measured", 2);
    samples.extend(quality_samples("half", 0));
    samples.extend(quality_samples("typed", 0));
    data.compat = CompatReport {
        run_id: "run-1".into(),
        compat: compat_by_provider(&results),
        quality: Some(parity(&samples)),
    };
    let t = us_east(&data);
    let m = t.row("measured");
    assert_eq!(m.compatibility.text, "measured 82% (9/11 checks)");
    assert!((m.compatibility.score.unwrap() - 9.0 / 11.0).abs() < 1e-12);
    assert!((m.compatibility.raw.unwrap() - 900.0 / 11.0).abs() < 1e-9);
    assert_eq!(m.quality.text, "measured 94% accuracy (90/96)");
    assert!((m.quality.score.unwrap() - 90.0 / 96.0).abs() < 1e-12);
    let h = t.row("half");
    assert_eq!(h.quality.text, "8/10");
    assert_eq!(h.quality.score, Some(0.8));
    assert_eq!(h.compatibility.text, "measured 100% (11/11 checks)");
    assert_eq!(h.compatibility.score, Some(1.0));
    // Typed scores override measured ones (0/11 checks passed, 100 % accuracy measured).
    let ty = t.row("typed");
    assert_eq!(
        (ty.quality.score, ty.compatibility.score),
        (Some(0.8), Some(0.6))
    );
    assert_eq!(ty.compatibility.text, "6/10");
    // Neither typed nor measured: no value, 0 in the total.
    let u = t.row("unknown");
    assert_eq!((u.quality.score, u.quality.text.as_str()), (None, "-"));
    // Equal latency: the totals follow the quality and compatibility scores.
    let total = |r: &SelectionRow| r.total - 0.5 * r.latency.score.unwrap();
    assert!((total(h) - (0.25 * 0.8 + 0.25 * 1.0)).abs() < 1e-9);
    assert!((total(u)).abs() < 1e-9);
    assert_eq!(ranked(&data)[0], "half");
}
