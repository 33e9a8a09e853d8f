//! Tests of the result rows built from the shared fixtures ([`latmesh_results::fixtures`]):
//! aggregate, sweep/rate rows, summaries and model rows. They live here, outside the modules,
//! so that no module of the crate imports the fixtures that import it.

mod aggregate {
    use latmesh_core::record::{Outcome, ProbeRecord};
    use latmesh_results::aggregate::*;

    #[test]
    fn a_failover_primary_that_never_answered_has_every_request_failed() {
        // Chain [p, q], 2 attempts per provider: p throttles twice, then q answers. 12 such
        // client requests: p was sent 12 requests and failed all 12 (it showed 0 of 0).
        let mut plan = latmesh_results::fixtures::plan();
        plan.scenarios[0].failover = Some(latmesh_core::plan::FailoverSpec {
            chain: vec![0, 1],
            attempts: 2,
            on: latmesh_core::plan::FailoverSpec::default_on(),
        });
        let fo = |provider: &str, attempt, outcome, final_attempt| ProbeRecord {
            failover: true,
            provider: provider.into(),
            scenario: "sw".into(),
            outcome: Some(outcome),
            attempt,
            final_attempt,
            turn: 1,
            ..Default::default()
        };
        let mut agg = Aggregate::for_plan(&plan);
        for _ in 0..12 {
            agg.add_record("us-east", &fo("p", 1, Outcome::Throttled, false));
            agg.add_record("us-east", &fo("p", 2, Outcome::Throttled, false));
            agg.add_record("us-east", &fo("q", 3, Outcome::Ok, true));
        }
        let p = agg.counts(None, "p", "sw");
        assert_eq!((p.attempts(), p.requests, p.requests_failed), (24, 12, 12));
        let q = agg.counts(None, "q", "sw");
        assert_eq!((q.requests, q.requests_failed), (12, 0));
        // The client's own requests are unchanged: 12, all served by q.
        let c = agg.failover_counts(None, "sw");
        assert_eq!((c.requests, c.served_by.get("q").copied()), (12, Some(12)));
        // The matrix cell says so.
        let s = latmesh_results::summary::build("c", &plan, 0, &agg, Vec::new());
        let cell = s.cell("us-east", "p", "sw").unwrap();
        assert_eq!((cell.requests, cell.request_error_pct), (12, 100.0));
        // A record of a provider's first try, or of a scenario without failover, ends none.
        assert!(!failover_hand_over(
            &fo("p", 1, Outcome::Throttled, false),
            Some(2)
        ));
        assert!(failover_hand_over(
            &fo("q", 4, Outcome::Throttled, false),
            Some(2)
        ));
        assert!(!failover_hand_over(
            &fo("p", 2, Outcome::Throttled, false),
            None
        ));
    }
}

mod load_stats {
    use latmesh_core::load::LoadModel;
    use latmesh_results::aggregate::Aggregate;
    use latmesh_results::fixtures::{add_rate, agent, plan, plan_with_knee, sweep_aggregate};
    use latmesh_results::load_stats::*;
    use latmesh_results::summary::Percentiles;

    fn row<'a>(rows: &'a [SweepRow], region: &str, provider: &str) -> &'a SweepRow {
        rows.iter()
            .find(|r| r.region == region && r.provider == provider)
            .unwrap()
    }

    #[test]
    fn sweep_values_the_steps_cannot_support_are_marked() {
        // Knee on E2E P90 (36 samples needed): ALL has 20, 29 and 40 samples at c = 2, 4, 8.
        let plan = plan_with_knee(|k| k.percentile = 90.0);
        let rows = sweep_rows(&plan, &sweep_aggregate(), RowFilter::default(), &[]);
        let all = row(&rows, "ALL", "p");
        let support: Vec<bool> = all
            .steps
            .iter()
            .map(|s| s.knee_supported(&all.knee_rule))
            .collect();
        assert_eq!(support, [false, false, true]);
        // The table marks them: `ui::sweep` tests.
    }

    #[test]
    fn sweep_rows_count_each_step_and_find_the_knee() {
        // Two agents in us-east, one in eu-west.
        let agents = [
            agent("a1", "us-east"),
            agent("a2", "us-east"),
            agent("b1", "eu-west"),
        ];
        let rows = sweep_rows(&plan(), &sweep_aggregate(), RowFilter::default(), &agents);
        // Concurrency per agent, and the provider's total over the row's agents.
        let totals = |region: &str| -> Vec<(u32, u64)> {
            row(&rows, region, "p")
                .steps
                .iter()
                .map(|s| (s.concurrency, s.concurrency_total))
                .collect()
        };
        assert_eq!(totals("us-east"), [(2, 4), (4, 8), (8, 16)]);
        assert_eq!(totals("eu-west"), [(2, 2), (4, 4), (8, 8)]);
        assert_eq!(totals("ALL"), [(2, 6), (4, 12), (8, 24)]);
        // (us-east, eu-west, ALL) × (p, q), in that order.
        let order: Vec<(&str, &str)> = rows
            .iter()
            .map(|r| (r.region.as_str(), r.provider.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("us-east", "p"),
                ("us-east", "q"),
                ("eu-west", "p"),
                ("eu-west", "q"),
                ("ALL", "p"),
                ("ALL", "q")
            ]
        );
        let us = row(&rows, "us-east", "p");
        let counts: Vec<(u32, u64, u64)> = us
            .steps
            .iter()
            .map(|s| (s.concurrency, s.requests, s.ok))
            .collect();
        // The cancelled request is neither a request nor an error.
        assert_eq!(counts, [(2, 10, 10), (4, 20, 20), (8, 30, 30)]);
        let s0 = &us.steps[0];
        assert_eq!(
            (s0.throughput_rps, s0.output_tokens_per_s, s0.error_pct),
            (1.0, 20.0, 0.0)
        );
        assert_eq!(us.steps[2].throughput_rps, 3.0);
        // 20 samples at c = 4: P50 is supported (n ≥ 6, with an interval), P90 and up not.
        let ttft = us.steps[1].ttft.as_ref().unwrap();
        assert_eq!(
            (ttft.p50_ms, ttft.p90_ms, ttft.p95_ms, ttft.p99_ms, ttft.n),
            (0.52, 0.52, Some(0.52), 0.52, 20)
        );
        let support: Vec<(f64, bool, Option<f64>)> = ttft
            .points
            .iter()
            .map(|p| (p.percentile, p.supported, p.lo_ms))
            .collect();
        assert_eq!(
            support,
            [
                (50.0, true, Some(0.52)),
                (90.0, false, None),
                (95.0, false, None),
                (99.0, false, None)
            ]
        );
        let knee_values: Vec<Option<f64>> = us.steps.iter().map(|s| s.knee_value_ms).collect();
        assert_eq!(knee_values, [Some(1.0), Some(1.04), Some(2.0)]);
        let knee = us.knee.as_ref().unwrap();
        assert_eq!(
            (knee.step, knee.concurrency, knee.reason.as_str()),
            (2, 8, "latency")
        );
        // (2000 / 1040 − 1) / (8 / 4 − 1)
        assert!((knee.elasticity.unwrap() - 0.923_076_9).abs() < 1e-6);

        // Its interval: 20 values of 1040 µs, exact in HDR.
        assert_eq!(us.steps[1].knee_ci_ms, Some((1.04, 1.04)));

        // eu-west: 1 failure in 10 requests (10 %) after 0 in 10 is over 5 % on points, but
        // not significant (Wilson intervals [1.8 %, 40.4 %] and [0, 27.8 %] overlap): no knee.
        let eu = row(&rows, "eu-west", "p");
        assert_eq!(eu.steps[1].error_pct, 10.0);
        assert_eq!((&eu.knee, &eu.knee_insufficient), (&None, &None), "{eu:#?}");
        assert_eq!(knee_text(eu), "none");

        // ALL merges the step histograms: c = 4 holds 9 × 1000 and 20 × 1040 µs, so its P50
        // is 1040; 1 failure in 30 requests stays under 5%; the knee is c = 8 again.
        let all = row(&rows, "ALL", "p");
        let s1 = &all.steps[1];
        assert_eq!((s1.requests, s1.ok, s1.knee_value_ms), (30, 29, Some(1.04)));
        assert!((s1.error_pct - 100.0 / 30.0).abs() < 1e-12);
        assert_eq!(all.steps[2].knee_value_ms, Some(2.0));
        assert_eq!(all.knee.as_ref().map(|k| k.step), Some(2));

        // A provider without data: every step present, empty, no knee.
        let q = row(&rows, "ALL", "q");
        assert_eq!(q.steps.len(), 3);
        assert!(q.steps.iter().all(|s| s.requests == 0 && s.e2e.is_none()));
        assert_eq!(q.knee, None);
        assert_eq!(q.knee_insufficient.as_ref().map(|i| i.step), Some(0));
        assert_eq!(knee_text(q), "too few requests at c=2 (0 < 10)");

        // With the default 30 requests per step, us-east's 10 at c = 2 are not enough: no
        // verdict rather than a knee.
        let strict = plan_with_knee(|k| k.min_requests = 30);
        let rows30 = sweep_rows(&strict, &sweep_aggregate(), RowFilter::default(), &[]);
        let us30 = row(&rows30, "us-east", "p");
        assert_eq!(us30.knee, None);
        assert_eq!(
            us30.knee_insufficient
                .as_ref()
                .map(|i| (i.step, i.requests)),
            Some((0, 10))
        );

        // Filters keep the rows asked for; ALL then merges the kept region only.
        let only = sweep_rows(
            &plan(),
            &sweep_aggregate(),
            RowFilter {
                region: Some("eu-west"),
                provider: Some("p"),
                scenario: None,
            },
            &agents,
        );
        assert_eq!(only.len(), 2);
        assert_eq!(only[1].agents, 1, "ALL of one region has its agents");
        assert_eq!(only[1].steps, eu.steps);
    }

    fn rate_aggregate() -> Aggregate {
        let mut agg = Aggregate::default();
        add_rate(&mut agg);
        agg
    }

    #[test]
    fn rate_rows_report_achieved_rate_and_saturation() {
        let agents = [agent("a1", "us-east"), agent("b1", "eu-west")];
        let rows = rate_rows(&plan(), &rate_aggregate(), &agents);
        assert_eq!(rows.len(), 6);
        let get = |region: &str, provider: &str| {
            rows.iter()
                .find(|r| r.region == region && r.provider == provider)
                .unwrap()
        };
        let us = get("us-east", "p");
        assert_eq!(
            (us.scheduled, us.scheduled_rps, us.sent, us.achieved_rps),
            (100, 10.0, 100, Some(10.0))
        );
        assert_eq!(
            (us.dropped, us.error_pct, us.agent_saturated),
            (0, 0.0, false)
        );
        assert_eq!(us.agent_saturated_reason, None);
        assert_eq!(us.sched_lag.unwrap().p99_ms, 0.2);
        assert_eq!(us.ttft.unwrap().p50_ms, 0.5);
        assert_eq!(us.ttft_intended.unwrap().p50_ms, 0.7);
        assert_eq!(us.e2e_intended.unwrap().p99_ms, 1.2);

        // Dropped arrivals are counted, are not errors, and make the row saturated.
        let eu = get("eu-west", "p");
        assert_eq!(
            (eu.sent, eu.dropped, eu.requests, eu.error_pct),
            (90, 10, 90, 0.0)
        );
        assert_eq!(eu.achieved_rps, Some(9.0));
        assert!(eu.agent_saturated);
        assert_eq!(
            eu.agent_saturated_reason.as_deref(),
            Some("10 arrivals dropped; achieved 9.00 rps < 95% of scheduled 10.00")
        );
        // ALL: 190 sent by 2 agents in 10 s, 9.5 rps each: exactly 95%, only the drops count.
        let all = get("ALL", "p");
        assert_eq!((all.agents, all.achieved_rps), (2, Some(9.5)));
        assert_eq!(
            all.agent_saturated_reason.as_deref(),
            Some("10 arrivals dropped")
        );
        // Nothing sent at all.
        let q = get("us-east", "q");
        assert_eq!(q.achieved_rps, Some(0.0));
        assert!(q.agent_saturated);

        // Scheduler lag alone: P90 over 10 ms (a P99 over it alone is one late arrival).
        let lag_ms = |p50_ms: f64, p90_ms: f64, p99_ms: f64| Percentiles {
            p50_ms,
            p90_ms,
            p95_ms: None,
            p99_ms,
            n: 100,
            points: Default::default(),
        };
        let spec = match &plan().scenarios[1].load {
            LoadModel::Rate(r) => r.clone(),
            _ => unreachable!(),
        };
        let lagging = rate_row(
            Some("us-east"),
            "p",
            "open",
            &spec,
            100,
            &RateMeasure {
                agents: 1,
                sent: 100,
                requests: 100,
                requests_failed: 4,
                sched_lag: Some(lag_ms(1.0, 12.0, 30.0)),
                ..Default::default()
            },
        );
        assert_eq!(lagging.error_pct, 4.0);
        assert_eq!(
            lagging.agent_saturated_reason.as_deref(),
            Some("sched_lag P90 12.0 ms > 10 ms")
        );
        let hiccup = rate_row(
            Some("us-east"),
            "p",
            "open",
            &spec,
            100,
            &RateMeasure {
                agents: 1,
                sent: 100,
                requests: 100,
                sched_lag: Some(lag_ms(0.2, 0.9, 15.0)),
                ..Default::default()
            },
        );
        assert!(!hiccup.agent_saturated, "{hiccup:?}");
        // Without agents there is no achieved rate, and no verdict on it.
        let none = rate_row(None, "p", "open", &spec, 100, &RateMeasure::default());
        assert_eq!((none.achieved_rps, none.agent_saturated), (None, false));
    }

    #[test]
    fn start_skew_is_over_the_agents_that_started() {
        let start = |id: &str, at: i64, unc: u64| AgentStart {
            agent_id: id.into(),
            region: "r".into(),
            started_coord_unix_us: at,
            clock_offset_us: -7,
            clock_uncertainty_us: unc,
        };
        let t = 1_700_000_000_000_000;
        let s = StartSync::of(vec![
            start("c", t + 100, 20),
            start("a", t + 420, 50),
            start("b", t, 10),
            start("d", 0, 900),
        ]);
        // The two largest uncertainties of the agents that started: 50 + 20.
        assert_eq!((s.skew_us, s.clock_uncertainty_us), (Some(420), Some(70)));
        assert_eq!(
            s.agents
                .iter()
                .map(|a| a.agent_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "c", "d"]
        );
        assert_eq!(
            s.line().unwrap(),
            "start skew 0.42 ms over 3 agents (± 0.07 ms of clock uncertainty); 1 without a synchronized start (joined late, or cancelled before it)"
        );
        let one = StartSync::of(vec![start("a", t, 5)]);
        assert_eq!(
            one.line().unwrap(),
            "start skew 0.00 ms over 1 agent (± 0.01 ms of clock uncertainty)"
        );
        assert_eq!(StartSync::of(vec![start("d", 0, 1)]).line(), None);
        assert_eq!(StartSync::default().line(), None);
    }
}

mod summary {
    use latmesh_results::fixtures::{
        demo_sized, demo_sized_with, plan, sweep_rate_summary, usage_summary,
    };
    use latmesh_results::load_stats::{self, RowFilter};
    use latmesh_results::summary::*;

    #[test]
    fn the_campaign_chooses_the_percentiles() {
        let s = demo_sized_with(&[50.0, 99.9]);
        assert_eq!(s.percentiles, [50.0, 99.9]);
        let e2e = s.cell("us-east", "q", "open").unwrap().e2e.unwrap();
        let got: Vec<(f64, bool)> = e2e
            .points
            .iter()
            .map(|p| (p.percentile, p.supported))
            .collect();
        // P99.9 needs 3688 samples.
        assert_eq!(got, [(50.0, true), (99.9, false)]);
        // The fixed P50/P90/P95/P99 stay in the JSON for readers that know only them.
        assert!(e2e.p95_ms.is_some());
        // The tables show them: `ui::matrix` tests.
    }

    #[test]
    fn percentiles_the_samples_do_not_support_are_marked_with_a_legend() {
        let s = demo_sized();
        let pts = |region: &str, provider: &str| -> Vec<(f64, bool)> {
            let e2e = s.cell(region, provider, "open").unwrap().e2e.unwrap();
            e2e.points
                .iter()
                .map(|p| (p.percentile, p.supported))
                .collect()
        };
        // 12 samples: only P50; ALL (36): P50 and P90; 400: all four.
        assert_eq!(
            pts("eu-west", "p"),
            [(50.0, true), (90.0, false), (95.0, false), (99.0, false)]
        );
        assert_eq!(
            pts("ALL", "p"),
            [(50.0, true), (90.0, true), (95.0, false), (99.0, false)]
        );
        assert_eq!(
            pts("us-east", "q"),
            [(50.0, true), (90.0, true), (95.0, true), (99.0, true)]
        );
    }

    #[test]
    fn summary_reports_sweeps_rates_dropped_and_start_skew() {
        let (s, agg, agents) = sweep_rate_summary();
        assert_eq!(
            s.sweeps,
            load_stats::sweep_rows(&plan(), &agg, RowFilter::default(), &agents)
        );
        assert_eq!(s.rates, load_stats::rate_rows(&plan(), &agg, &agents));
        assert_eq!((s.sweeps.len(), s.rates.len()), (6, 6));

        // Dropped arrivals: counted apart, out of the error rates.
        let eu = s.cell("eu-west", "p", "open").unwrap();
        assert_eq!((eu.attempts, eu.dropped, eu.samples), (100, 10, 90));
        assert_eq!(
            (eu.error_pct, eu.request_error_pct, eu.requests),
            (0.0, 0.0, 90)
        );
        assert_eq!(s.cell("ALL", "p", "open").unwrap().dropped, 10);

        // JSON carries the new sections, and a summary without them still parses.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["sweeps"][4]["knee"]["concurrency"], 8);
        assert_eq!(json["rates"][2]["agent_saturated"], true);
        assert_eq!(json["rates"][2]["provider_saturated"], false);
        assert_eq!(json["start"]["skew_us"], 420);
        assert_eq!(json["cells"][0]["dropped"], 0);
        let mut old = json.clone();
        for key in ["sweeps", "rates", "start"] {
            old.as_object_mut().unwrap().remove(key);
        }
        // ... and a summary written before P95, sample counts and intervals.
        old.as_object_mut().unwrap().remove("percentiles");
        for cell in old["cells"].as_array_mut().unwrap() {
            for metric in ["ttft", "ttfc", "e2e"] {
                if let Some(p) = cell[metric].as_object_mut() {
                    for key in ["p95_ms", "n", "points"] {
                        p.remove(key);
                    }
                }
            }
        }
        let back: Summary = serde_json::from_value(old).unwrap();
        assert!(back.sweeps.is_empty() && back.start == StartSync::default());
        assert_eq!(back.percentiles, [50.0, 90.0, 95.0, 99.0]);
        let e2e = back.cell("us-east", "p", "sw").unwrap().e2e.unwrap();
        assert_eq!((e2e.p95_ms, e2e.n, e2e.points.len()), (None, 0, 0));
        // The new shape: per metric the sample count, and per percentile its support and
        // interval.
        let e2e = &json["cells"][0]["e2e"];
        assert_eq!(json["cells"][0]["scenario"], "sw");
        assert_eq!(e2e["n"], 60);
        assert_eq!(e2e["p95_ms"], 2.0);
        assert_eq!(e2e["points"][0]["percentile"], 50.0);
        assert_eq!(e2e["points"][0]["supported"], true);
        assert_eq!(e2e["points"][0]["lo_ms"], 1.04);
        assert_eq!(e2e["points"][3]["supported"], false);
        assert!(e2e["points"][3]["lo_ms"].is_null() && e2e["points"][3]["hi_ms"].is_null());
        // The text: `ui::matrix` tests.
    }

    /// A reasoning stream whose usage counts only the answer, a non-streaming scenario, and a
    /// provider that answers with its own model name: the usage notice names the streamed
    /// scenario only, with the attempts that took the payload count, and the model flag names
    /// the provider.
    #[test]
    fn the_usage_notice_counts_streams_only_and_another_model_is_flagged() {
        let s = usage_summary();
        let whole = s.cell("ALL", "reasoner", "whole").unwrap();
        assert_eq!(
            (whole.usage_chunk_mismatches, whole.tokens_over_usage),
            (0, 0)
        );
        let streamed = s.cell("ALL", "reasoner", "stream").unwrap();
        assert_eq!(
            (streamed.usage_chunk_mismatches, streamed.tokens_over_usage),
            (1, 1)
        );
        assert_eq!(
            ["reasoner", "llama"].map(|p| s.cell("ALL", p, "stream").unwrap().conn_retried),
            [0, 1]
        );
        assert_eq!(
            s.models
                .iter()
                .map(|m| m.answered_other_model())
                .collect::<Vec<_>>(),
            [false, true]
        );
    }
}

mod model_stats {
    use std::collections::BTreeMap;

    use latmesh_results::fixtures::{cell, spec, swapped};
    use latmesh_results::model_stats::*;
    use latmesh_results::summary::ALL_REGIONS;

    #[test]
    fn another_model_and_a_change_are_flagged() {
        let providers = [
            spec("openai", "gpt-4o", None),
            spec("llama", "smollm2", None),
            spec(
                "llama-expected",
                "smollm2",
                Some("SmolLM2-135M-Instruct-Q4_1.gguf"),
            ),
            spec("silent", "m", None),
        ];
        let cells = [
            // A dated name of the model asked for, one fingerprint: nothing to flag.
            cell(
                ALL_REGIONS,
                "openai",
                &[("gpt-4o-2024-08-06", 12)],
                &[("fp_1", 12)],
            ),
            // Region rows are not counted twice.
            cell(
                "us",
                "openai",
                &[("gpt-4o-2024-08-06", 12)],
                &[("fp_1", 12)],
            ),
            // llama-server answers with the model it loaded, whatever was asked.
            cell(
                ALL_REGIONS,
                "llama",
                &[("SmolLM2-135M-Instruct-Q4_1.gguf", 6)],
                &[],
            ),
            cell(
                ALL_REGIONS,
                "llama-expected",
                &[("SmolLM2-135M-Instruct-Q4_1.gguf", 6)],
                &[],
            ),
        ];
        let rows = model_rows(&providers, &cells);
        assert_eq!(
            rows.iter().map(|r| r.provider.as_str()).collect::<Vec<_>>(),
            ["openai", "llama", "llama-expected"]
        );
        assert_eq!(rows[0].flags(), Vec::<String>::new());
        assert_eq!(rows[0].answered["gpt-4o-2024-08-06"], 12);
        assert_eq!(
            rows[1].flags(),
            ["answered with another model than \"smollm2\": SmolLM2-135M-Instruct-Q4_1.gguf"]
        );
        assert_eq!(rows[2].expected, "SmolLM2-135M-Instruct-Q4_1.gguf");
        assert!(!rows[2].answered_other_model());
        let rows = model_rows(&providers, &swapped());
        let r = &rows[0];
        assert!(r.changed() && r.answered_other_model());
        assert_eq!(r.other_models, ["gpt-4o-mini"]);
        assert_eq!(
            r.flags(),
            [
                "answered with another model than \"gpt-4o\": gpt-4o-mini",
                "3 models answered during the campaign: gpt-4o-2024-08-06 ×10, gpt-4o-2024-11-20 ×2, gpt-4o-mini ×1",
                "2 system_fingerprints answered during the campaign: fp_1 ×10, fp_2 ×3",
            ]
        );
    }

    #[test]
    fn a_cell_keeps_the_most_frequent_names() {
        let counts: BTreeMap<String, u64> = (0..25u64)
            .map(|i| (format!("fp{i:02}"), if i == 24 { 100 } else { 1 }))
            .collect();
        let (kept, more) = most_frequent(&counts);
        assert_eq!(kept.len(), MAX_NAMES_PER_CELL);
        // The most frequent first, then ties by name: fp24, fp00..fp18; fp19..fp23 left out.
        assert_eq!(kept["fp24"], 100);
        assert!(kept.contains_key("fp18") && !kept.contains_key("fp19"));
        assert_eq!(more, 5);
        let mut c = cell(ALL_REGIONS, "openai", &[("gpt-4o", 3)], &[]);
        (c.system_fingerprints, c.system_fingerprints_more) = (kept, more);
        let rows = model_rows(&[spec("openai", "gpt-4o", None)], &[c]);
        assert_eq!(
            rows[0].flags(),
            [
                "20 or more system_fingerprints answered during the campaign: fp24 ×100, fp00 ×1, fp01 ×1, fp02 ×1 and 16 more; 5 attempts under names not kept"
            ]
        );
    }

    #[test]
    fn long_lists_are_cut() {
        let counts: BTreeMap<String, u64> = (0..6).map(|i| (format!("fp{i}"), 10 - i)).collect();
        assert_eq!(
            counted(&counts),
            "fp0 ×10, fp1 ×9, fp2 ×8, fp3 ×7 and 2 more"
        );
    }
}
