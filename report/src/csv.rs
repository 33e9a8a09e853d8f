//! The report as one long CSV table, one number per line:
//! `section,scenario,region,provider,metric,stat,x,value`. A percentile block (a metric of a
//! matrix cell, sweep step or rate row) gives `n`, then per percentile `p95`, `p95_supported`
//! (1 or 0: the sample-size rule of docs/metrics.md) and, when supported, `p95_lo`/`p95_hi` (its
//! 95 % interval). Sections: `matrix` (the summary's cells), `cdf` (x = ms, value = fraction), `itl` (quantiles), `sweep` (x = concurrency),
//! `rate`, `tier` (x = input tokens; `ttst`, `prefill_tps` (tokens/s), `e2e_per_token` `p50`,
//! `billed_prompt_tokens` `mean`, `context_refused`, TTFT percentiles, `goodput`),
//! `token_count` (x = input tokens asked; `tokens_per_word`, `overhead_tokens`,
//! `counts_differently`), `rate_step` (x = step; `verdict` with stat = the verdict, value 1),
//! `search` (`met_rps`, `missed_rps`, `end` with stat = why it ended), a cell's or row's
//! `goodput` (stats `requests`, `met`, `pct`, `pct_lo`, `pct_hi`, `rps`, `meets`), a cell's
//! `warmup` count, `windows` (x = window label), `time_series` (x = bucket start, UTC s), and when
//! `latmesh compat` ran `compat` (metric = check, stat `verdict`, x = the verdict, value 1;
//! metric `score`: the score, `passed`, `counted`, `inconclusive`) and `quality` (x = the
//! prompt set; `samples`, `graded`, `correct`, `accuracy` with `lo`/`hi`, `agreement`,
//! `output_tokens` `p50`, `length_ratio`, `flagged` 1 or 0). Values are
//! written with Rust's shortest round-trip formatting, the digits the JSON has.
//! Fields are written by the `csv` crate, quoted only when they hold `,`, `"`, `\n` or `\r`.

use crate::model::ReportModel;
use latmesh_core::plan::DEFAULT_PERCENTILES;
use latmesh_results::parity::CompatReport;
use latmesh_results::slo_stats::Goodput;
use latmesh_results::summary::Percentiles;

/// The header line's columns.
pub const COLUMNS: [&str; 8] = [
    "section", "scenario", "region", "provider", "metric", "stat", "x", "value",
];

/// The CSV writer of a report: the `csv` crate's, quoting a field only when it holds `,`, `"`,
/// `\n` or `\r` (quotes doubled), lines ending in `\n`.
struct Out(csv::Writer<Vec<u8>>);

impl Out {
    fn new() -> Out {
        let mut w = csv::WriterBuilder::new()
            .quote_style(csv::QuoteStyle::Necessary)
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(Vec::new());
        w.write_record(COLUMNS).expect("writing to memory");
        Out(w)
    }

    /// The text written so far.
    fn finish(self) -> String {
        let bytes = self.0.into_inner().expect("writing to memory");
        String::from_utf8(bytes).expect("UTF-8 fields")
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        section: &str,
        scenario: &str,
        region: &str,
        provider: &str,
        metric: &str,
        stat: &str,
        x: &str,
        value: f64,
    ) {
        let value = value.to_string();
        self.0
            .write_record([section, scenario, region, provider, metric, stat, x, &value])
            .expect("writing to memory");
    }

    /// When `p` is present: its sample count (`n`), then per percentile (P50, P90, P95, P99
    /// and the campaign's list, ascending) its estimate (`p95`), whether the samples support
    /// it (`p95_supported`, 1 or 0) and its 95 % interval (`p95_lo`, `p95_hi`, when
    /// supported).
    fn pcts(&mut self, key: [&str; 4], metric: &str, x: &str, p: Option<Percentiles>) {
        let Some(p) = p else { return };
        let mut row =
            |stat: &str, v: f64| self.row(key[0], key[1], key[2], key[3], metric, stat, x, v);
        if p.n > 0 {
            row("n", p.n as f64);
        }
        let mut list: Vec<f64> = DEFAULT_PERCENTILES.to_vec();
        list.extend(p.points.iter().map(|q| q.percentile));
        list.sort_by(f64::total_cmp);
        list.dedup();
        for point in list.into_iter().filter_map(|q| p.point(q)) {
            let stat = format!("p{}", point.percentile);
            row(&stat, point.ms);
            if p.n > 0 {
                row(
                    &format!("{stat}_supported"),
                    f64::from(u8::from(point.supported)),
                );
            }
            for (end, v) in [("lo", point.lo_ms), ("hi", point.hi_ms)] {
                if let Some(v) = v {
                    row(&format!("{stat}_{end}"), v);
                }
            }
        }
    }
}

/// The workload sections: `tier`, `token_count`, `rate_step`, `search`.
fn workloads(o: &mut Out, m: &ReportModel) {
    for r in &m.tiers {
        let key = [
            "tier",
            r.scenario.as_str(),
            r.region.as_str(),
            r.provider.as_str(),
        ];
        let x = r.input_tokens.to_string();
        for (metric, stat, v) in [
            ("samples", "", Some(r.samples as f64)),
            ("error_pct", "", Some(r.error_pct)),
            ("context_refused", "", Some(r.context_refused as f64)),
            ("ttst", "p50", r.ttst_p50_ms),
            ("prefill_tps", "p50", r.prefill_tps_p50),
            ("e2e_per_token", "p50", r.e2e_per_token_p50_ms),
            ("billed_prompt_tokens", "mean", r.billed_prompt_tokens_mean),
        ] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], metric, stat, &x, v);
            }
        }
        o.pcts(key, "ttft", &x, r.ttft);
        o.goodput(key, &x, r.goodput.as_ref());
    }
    for r in &m.token_counts {
        let key = ["token_count", "", "ALL", r.provider.as_str()];
        for (asked, billed, n) in &r.tiers {
            let x = asked.to_string();
            o.row(
                key[0],
                key[1],
                key[2],
                key[3],
                "billed_prompt_tokens",
                "mean",
                &x,
                *billed,
            );
            o.row(
                key[0], key[1], key[2], key[3], "requests", "", &x, *n as f64,
            );
        }
        for (metric, v) in [
            ("tokens_per_word", r.tokens_per_word),
            ("overhead_tokens", r.overhead_tokens),
            (
                "counts_differently",
                Some(f64::from(u8::from(r.counts_differently))),
            ),
        ] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], metric, "", "", v);
            }
        }
    }
    for r in &m.rate_steps {
        let key = [
            "rate_step",
            r.scenario.as_str(),
            r.region.as_str(),
            r.provider.as_str(),
        ];
        let x = r.step.to_string();
        for (name, v) in [
            ("target_rps", Some(r.target_rps)),
            ("target_rps_max", Some(r.target_rps_max)),
            ("achieved_rps", r.achieved_rps),
            ("sent", Some(r.sent as f64)),
            ("dropped", Some(r.dropped as f64)),
            ("error_pct", Some(r.error_pct)),
        ] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], name, "", &x, v);
            }
        }
        o.pcts(key, "ttft", &x, r.ttft);
        o.pcts(key, "tpot", &x, r.tpot);
        o.pcts(key, "e2e", &x, r.e2e);
        o.goodput(key, &x, r.goodput.as_ref());
        if let Some(v) = r.verdict {
            let name = serde_json::to_value(v)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            o.row(key[0], key[1], key[2], key[3], "verdict", &name, &x, 1.0);
        }
    }
    for s in &m.searches {
        let key = [
            "search",
            s.scenario.as_str(),
            s.region.as_str(),
            s.provider.as_str(),
        ];
        for (name, v) in [
            ("met_rps", s.outcome.met_rps),
            ("missed_rps", s.outcome.missed_rps),
        ] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], name, "", "", v);
            }
        }
        let end = serde_json::to_value(s.outcome.end)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        o.row(key[0], key[1], key[2], key[3], "end", &end, "", 1.0);
    }
}

impl Out {
    /// When `g` is present: metric `goodput`, stats `requests`, `met`, `pct`, `pct_lo`,
    /// `pct_hi`, `rps` (when known) and `meets` (1 or 0; absent without a verdict).
    fn goodput(&mut self, key: [&str; 4], x: &str, g: Option<&Goodput>) {
        let Some(g) = g else { return };
        for (stat, v) in [
            ("requests", Some(g.requests as f64)),
            ("met", Some(g.met as f64)),
            ("pct", Some(g.pct)),
            ("pct_lo", Some(g.ci_pct.0)),
            ("pct_hi", Some(g.ci_pct.1)),
            ("rps", g.rps),
            ("meets", g.meets.map(|m| f64::from(u8::from(m)))),
        ] {
            if let Some(v) = v {
                self.row(key[0], key[1], key[2], key[3], "goodput", stat, x, v);
            }
        }
    }
}

/// The CSV text of `m`.
pub fn render(m: &ReportModel) -> String {
    let mut o = Out::new();
    for c in &m.matrix {
        let key = [
            "matrix",
            c.scenario.as_str(),
            c.region.as_str(),
            c.provider.as_str(),
        ];
        let counts = [
            ("attempts", c.attempts as f64),
            ("samples", c.samples as f64),
            ("requests", c.requests as f64),
            ("dropped", c.dropped as f64),
            ("error_pct", c.error_pct),
            ("request_error_pct", c.request_error_pct),
            ("throttled_pct", c.throttled_pct),
        ];
        for (name, v) in counts {
            o.row(key[0], key[1], key[2], key[3], name, "", "", v);
        }
        if let Some(v) = c.output_tokens_mean {
            o.row(
                key[0],
                key[1],
                key[2],
                key[3],
                "output_tokens",
                "mean",
                "",
                v,
            );
        }
        o.pcts(key, "ttft", "", c.ttft);
        o.pcts(key, "ttfc", "", c.ttfc);
        o.pcts(key, "e2e", "", c.e2e);
        for (metric, v) in [("tpot", c.tpot_p50_ms), ("itl", c.itl_p50_ms)] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], metric, "p50", "", v);
            }
        }
        if c.warmup > 0 {
            o.row(
                key[0],
                key[1],
                key[2],
                key[3],
                "warmup",
                "",
                "",
                c.warmup as f64,
            );
        }
        o.goodput(key, "", c.goodput.as_ref());
    }
    compat(&mut o, &m.compat);
    for c in &m.cdfs {
        for (x, f) in &c.points {
            o.row(
                "cdf",
                &c.scenario,
                "ALL",
                &c.provider,
                c.metric.as_str(),
                "fraction",
                &x.to_string(),
                *f,
            );
        }
    }
    for s in &m.itl {
        for (q, v) in &s.quantiles {
            let stat = format!("p{}", q * 100.0);
            o.row(
                "itl",
                &s.scenario,
                "ALL",
                &s.provider,
                s.metric.as_str(),
                &stat,
                "",
                *v,
            );
        }
    }
    for r in &m.sweeps {
        let key = [
            "sweep",
            r.scenario.as_str(),
            r.region.as_str(),
            r.provider.as_str(),
        ];
        let knee_metric = format!("knee_{}", r.knee_rule.metric.as_str());
        let knee_stat = format!("p{}", r.knee_rule.percentile);
        for s in &r.steps {
            let x = s.concurrency.to_string();
            for (name, v) in [
                ("requests", s.requests as f64),
                ("ok", s.ok as f64),
                ("error_pct", s.error_pct),
                ("throughput_rps", s.throughput_rps),
                ("output_tokens_per_s", s.output_tokens_per_s),
            ] {
                o.row(key[0], key[1], key[2], key[3], name, "", &x, v);
            }
            if let Some(v) = s.knee_value_ms {
                o.row(
                    key[0],
                    key[1],
                    key[2],
                    key[3],
                    &knee_metric,
                    &knee_stat,
                    &x,
                    v,
                );
            }
            o.pcts(key, "ttft", &x, s.ttft);
            o.pcts(key, "e2e", &x, s.e2e);
        }
        if let Some(k) = &r.knee {
            o.row(
                key[0],
                key[1],
                key[2],
                key[3],
                "knee",
                &k.reason,
                "",
                f64::from(k.concurrency),
            );
        }
        if let Some(i) = &r.knee_insufficient {
            // The step that had too few requests to be judged: no knee verdict.
            o.row(
                key[0],
                key[1],
                key[2],
                key[3],
                "knee",
                "not_enough_requests",
                "",
                f64::from(i.concurrency),
            );
        }
    }
    for r in &m.rates {
        let key = [
            "rate",
            r.scenario.as_str(),
            r.region.as_str(),
            r.provider.as_str(),
        ];
        for (name, v) in [
            ("target_rps", Some(r.target_rps)),
            ("scheduled_rps", Some(r.scheduled_rps)),
            ("achieved_rps", r.achieved_rps),
            ("sent", Some(r.sent as f64)),
            ("dropped", Some(r.dropped as f64)),
            ("error_pct", Some(r.error_pct)),
            (
                "agent_saturated",
                Some(if r.agent_saturated { 1.0 } else { 0.0 }),
            ),
            (
                "provider_saturated",
                r.provider_saturation
                    .as_ref()
                    .map(|p| if p.saturated { 1.0 } else { 0.0 }),
            ),
        ] {
            if let Some(v) = v {
                o.row(key[0], key[1], key[2], key[3], name, "", "", v);
            }
        }
        o.pcts(key, "sched_lag", "", r.sched_lag);
        o.pcts(key, "ttft", "", r.ttft);
        o.pcts(key, "ttft_intended", "", r.ttft_intended);
        o.pcts(key, "e2e", "", r.e2e);
        o.pcts(key, "e2e_intended", "", r.e2e_intended);
    }
    workloads(&mut o, m);
    for w in &m.windows {
        let stat = format!("p{}", w.percentile);
        for r in &w.rows {
            for s in &r.windows {
                if let Some(v) = s.stat.value_ms {
                    o.row(
                        "windows",
                        "",
                        &r.region,
                        &r.provider,
                        &w.metric,
                        &stat,
                        &s.window,
                        v,
                    );
                }
                o.row(
                    "windows",
                    "",
                    &r.region,
                    &r.provider,
                    "attempts",
                    "",
                    &s.window,
                    s.stat.attempts as f64,
                );
                o.row(
                    "windows",
                    "",
                    &r.region,
                    &r.provider,
                    "error_pct",
                    "",
                    &s.window,
                    s.stat.error_pct,
                );
            }
        }
    }
    for t in &m.time_series {
        for p in &t.points {
            let x = p.t_unix_s.to_string();
            let metric = t.metric.as_str();
            o.row(
                "time_series",
                "",
                "ALL",
                &t.provider,
                metric,
                "samples",
                &x,
                p.samples as f64,
            );
            o.row(
                "time_series",
                "",
                "ALL",
                &t.provider,
                metric,
                "p50",
                &x,
                p.p50_ms,
            );
            o.row(
                "time_series",
                "",
                "ALL",
                &t.provider,
                metric,
                "p99",
                &x,
                p.p99_ms,
            );
        }
    }
    o.finish()
}

/// The `compat` and `quality` rows of `c` (none when `latmesh compat` did not run).
fn compat(o: &mut Out, c: &CompatReport) {
    for p in &c.compat {
        let name = p.provider.as_str();
        for r in &p.results {
            let (check, verdict) = (r.check.as_str(), r.verdict.as_str());
            o.row("compat", "", "", name, check, "verdict", verdict, 1.0);
        }
        if let Some(s) = p.score {
            for (stat, v) in [
                ("", s.score),
                ("passed", f64::from(s.passed)),
                ("counted", f64::from(s.counted)),
                ("inconclusive", f64::from(s.inconclusive)),
            ] {
                o.row("compat", "", "", name, "score", stat, "", v);
            }
        }
    }
    let Some(q) = &c.quality else { return };
    for p in &q.providers {
        let (lo, hi) = p.accuracy_ci.unzip();
        for (metric, stat, v) in [
            ("samples", "", Some(p.samples as f64)),
            ("graded", "", Some(p.graded as f64)),
            ("correct", "", Some(p.correct as f64)),
            ("accuracy", "", p.accuracy),
            ("accuracy", "lo", lo),
            ("accuracy", "hi", hi),
            ("agreement", "", p.agreement),
            ("output_tokens", "p50", p.median_output_tokens),
            ("length_ratio", "", p.length_ratio),
            ("flagged", "", Some(f64::from(u8::from(p.flag.is_some())))),
        ] {
            if let Some(v) = v {
                o.row("quality", "", "", &p.provider, metric, stat, &q.set, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_when_needed() {
        let mut o = Out::new();
        o.row("plain", "a,b", "say \"hi\"", "l\nf", "c\rr", "", "x", 1.5);
        assert_eq!(
            o.finish(),
            "section,scenario,region,provider,metric,stat,x,value\n\
             plain,\"a,b\",\"say \"\"hi\"\"\",\"l\nf\",\"c\rr\",,x,1.5\n"
        );
    }
}
