//! Tests of the issue-21 rows of a summary (goodput per cell, warm-up, rate steps, SLO search
//! answers, context tiers, token counts) on [`latmesh_results::fixtures::workloads`], whose
//! module doc gives every figure asserted here.

use latmesh_core::load::{SearchEnd, StepVerdict};
use latmesh_results::fixtures::workloads;
use latmesh_results::slo_stats::{RateStepRow, has_rate_steps, phase_secs};
use latmesh_results::summary::Summary;

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= b.abs() * rel
}

fn step<'a>(
    s: &'a Summary,
    scenario: &str,
    region: &str,
    provider: &str,
    k: u32,
) -> &'a RateStepRow {
    s.rate_steps
        .iter()
        .find(|r| {
            r.scenario == scenario && r.region == region && r.provider == provider && r.step == k
        })
        .unwrap_or_else(|| panic!("no step {k} of {scenario} {region} {provider}"))
}

#[test]
fn warm_up_is_counted_apart_and_left_out_of_every_figure() {
    let s = workloads::summary();
    let c = s.cell("us-east", "p", "ctx.1k").unwrap();
    assert_eq!(
        (c.warmup, c.attempts, c.samples, c.requests),
        (1, 30, 30, 30)
    );
    // The warm-up request's 9 s TTFT is in no percentile.
    assert!(c.ttft.unwrap().p99_ms < 1000.0, "{:?}", c.ttft);
    assert_eq!(s.cell("ALL", "p", "ctx.1k").unwrap().warmup, 2);
    assert_eq!(s.cell("us-east", "p", "ramp").unwrap().warmup, 1);
    assert_eq!(s.cell("eu-west", "p", "ramp").unwrap().warmup, 0);
    // Nor in the rate step it was sent in.
    let r = step(&s, "ramp", "us-east", "p", 0);
    assert_eq!((r.sent, r.goodput.as_ref().unwrap().requests), (20, 20));
    // Every scenario of the fixture has an SLO; the tiers (one load each) have a cell
    // goodput, the rate sweep and the search only per step.
    assert!(
        s.cells
            .iter()
            .all(|c| c.goodput.is_some() == c.scenario.starts_with("ctx."))
    );
}

#[test]
fn goodput_per_cell_counts_met_requests_over_the_phase() {
    let s = workloads::summary();
    let plan = workloads::plan();
    assert_eq!(phase_secs(&plan, &plan.scenarios[0]), 30.0);
    assert_eq!(phase_secs(&plan, &plan.scenarios[2]), 20.0);
    // The search: 4 steps of 10 s, each followed by a 10 s quiet gap.
    assert_eq!(phase_secs(&plan, &plan.scenarios[3]), 80.0);
    let g = s
        .cell("us-east", "p", "ctx.1k")
        .unwrap()
        .goodput
        .clone()
        .unwrap();
    // 93.3 % [78.7, 98.2] against 90 %: the point meets, the interval contains the target.
    assert_eq!((g.requests, g.met, g.meets), (30, 28, None));
    assert_eq!(
        g.verdict(),
        latmesh_results::slo_stats::GoodputVerdict::Undecided
    );
    assert!(close(g.pct, 28.0 * 100.0 / 30.0, 1e-12));
    // 28 met over 30 s and one agent.
    assert!(close(g.rps.unwrap(), 28.0 / 30.0, 1e-12));
    assert!(g.ci_pct.0 < g.pct && g.pct < g.ci_pct.1);
    let g = s
        .cell("ALL", "p", "ctx.1k")
        .unwrap()
        .goodput
        .clone()
        .unwrap();
    assert_eq!((g.requests, g.met), (60, 58));
    assert!(close(g.rps.unwrap(), 58.0 / 60.0, 1e-12));
    // Refused for its length: judged, never met.
    let g = s
        .cell("ALL", "q", "ctx.8k")
        .unwrap()
        .goodput
        .clone()
        .unwrap();
    assert_eq!(
        (g.requests, g.met, g.pct, g.meets),
        (60, 0, 0.0, Some(false))
    );
    // The rate sweep `ramp` and the search `find` run steps at different rates (the search
    // overloads on purpose): no cell goodput, only per step; its P90 bound (900 ms > 400) is
    // exceeded in step 1.
    for scenario in ["ramp", "find"] {
        assert!(
            s.cells
                .iter()
                .filter(|c| c.scenario == scenario)
                .all(|c| c.goodput.is_none())
        );
    }
    let r = step(&s, "ramp", "ALL", "p", 1);
    let g = r.goodput.as_ref().unwrap();
    assert_eq!(g.meets, Some(false));
    assert_eq!(g.exceeded.len(), 1, "{:?}", g.exceeded);
    assert!(g.exceeded[0].starts_with("P90 TTFT 90"), "{:?}", g.exceeded);
}

#[test]
fn rate_steps_have_rates_goodput_and_verdicts_and_no_rate_row() {
    let s = workloads::summary();
    let plan = workloads::plan();
    // Multi-step and search scenarios are described per step only.
    assert!(plan.scenarios[2..].iter().all(|sc| match &sc.load {
        latmesh_core::load::LoadModel::Rate(r) => has_rate_steps(r),
        _ => false,
    }));
    assert!(s.rates.is_empty(), "{:?}", s.rates);
    // ramp: every planned step of every region × provider; find: only steps with records.
    let ramp = s.rate_steps.iter().filter(|r| r.scenario == "ramp").count();
    assert_eq!(ramp, 3 * 2 * 2);
    let find = s.rate_steps.iter().filter(|r| r.scenario == "find").count();
    assert_eq!(find, 3 * (4 + 1));
    let r = step(&s, "ramp", "us-east", "p", 0);
    assert_eq!(
        (r.target_rps, r.target_rps_max, r.sent, r.dropped),
        (2.0, 2.0, 20, 0)
    );
    assert_eq!(r.achieved_rps, Some(2.0));
    // 20 samples cannot judge a P90 bound: no verdict for a region, one for ALL (40).
    assert_eq!(r.goodput.as_ref().unwrap().meets, None);
    assert_eq!(r.verdict, Some(StepVerdict::Insufficient));
    let all = step(&s, "ramp", "ALL", "p", 0);
    assert_eq!((all.sent, all.achieved_rps), (40, Some(2.0)));
    assert_eq!(all.verdict, Some(StepVerdict::Met));
    let r = step(&s, "ramp", "us-east", "p", 1);
    let g = r.goodput.as_ref().unwrap();
    assert_eq!(
        (r.target_rps, g.requests, g.met, g.pct),
        (4.0, 40, 30, 75.0)
    );
    assert!(close(g.rps.unwrap(), 3.0, 1e-12));
    assert_eq!(r.verdict, Some(StepVerdict::Missed));
    assert!(close(r.ttft.unwrap().p50_ms, 200.0, 0.001), "{:?}", r.ttft);
    assert!(close(r.ttft.unwrap().p90_ms, 900.0, 0.001), "{:?}", r.ttft);
    assert_eq!(
        step(&s, "ramp", "ALL", "q", 1).verdict,
        Some(StepVerdict::Met)
    );
    assert_eq!(
        step(&s, "ramp", "eu-west", "q", 1).verdict,
        Some(StepVerdict::Met)
    );
    let r = step(&s, "find", "ALL", "p", 2);
    assert_eq!((r.target_rps, r.sent, r.error_pct), (8.0, 160, 0.0));
    assert_eq!(r.goodput.as_ref().unwrap().pct, 50.0);
}

#[test]
fn the_search_answer_is_recomputed_from_the_step_rows() {
    let s = workloads::summary();
    assert_eq!(s.searches.len(), 3 * 2);
    let row = |region: &str, provider: &str| {
        s.searches
            .iter()
            .find(|r| r.region == region && r.provider == provider)
            .unwrap()
    };
    for region in ["us-east", "eu-west", "ALL"] {
        let p = row(region, "p");
        assert_eq!(
            (p.outcome.met_rps, p.outcome.missed_rps, p.outcome.end),
            (Some(4.0), Some(6.0), SearchEnd::StepsUsed)
        );
        assert_eq!(
            p.text,
            "meets the SLO up to 4.00 rps per agent (misses at 6.00 rps per agent); steps used up"
        );
        assert_eq!(p.slo, "TTFT ≤ 500 ms; goodput ≥ 90 %");
        let q = row(region, "q");
        assert_eq!(
            (q.outcome.met_rps, q.outcome.missed_rps, q.outcome.end),
            (None, Some(2.0), SearchEnd::MinMissed)
        );
        assert_eq!(
            q.text,
            "misses the SLO at every rate tried, from 2.00 rps per agent; missed at min_rps"
        );
    }
}

#[test]
fn tiers_show_latency_by_input_length_and_context_refusals() {
    let s = workloads::summary();
    assert_eq!(s.tiers.len(), 2 * 3 * 2);
    let tier = |scenario: &str, region: &str, provider: &str| {
        s.tiers
            .iter()
            .find(|t| t.scenario == scenario && t.region == region && t.provider == provider)
            .unwrap()
    };
    let t = tier("ctx.1k", "ALL", "p");
    assert_eq!(
        (t.group.as_str(), t.input_tokens, t.samples),
        ("ctx", 1000, 60)
    );
    assert_eq!((t.error_pct, t.context_refused), (0.0, 0));
    assert!(close(t.ttft.unwrap().p50_ms, 200.0, 0.001), "{:?}", t.ttft);
    assert!(close(t.ttst_p50_ms.unwrap(), 250.0, 0.001));
    // Prefill throughput's histogram holds tokens/s, not µs.
    assert!(
        close(t.prefill_tps_p50.unwrap(), 2000.0, 0.0),
        "{:?}",
        t.prefill_tps_p50
    );
    assert!(close(t.e2e_per_token_p50_ms.unwrap(), 20.0, 0.001));
    assert_eq!(t.billed_prompt_tokens_mean, Some(1012.0));
    assert_eq!(t.goodput.as_ref().unwrap().met, 58);
    let t = tier("ctx.8k", "us-east", "p");
    assert!(close(t.ttft.unwrap().p50_ms, 1200.0, 0.001));
    assert_eq!(t.billed_prompt_tokens_mean, Some(8012.0));
    let t = tier("ctx.8k", "ALL", "q");
    assert_eq!((t.samples, t.error_pct, t.context_refused), (0, 100.0, 60));
    assert_eq!((t.ttft, t.billed_prompt_tokens_mean), (None, None));
    // Plan order: ctx.1k's rows before ctx.8k's.
    assert_eq!(s.tiers[0].scenario, "ctx.1k");
    assert_eq!(s.tiers.last().unwrap().scenario, "ctx.8k");
}

#[test]
fn token_counts_say_which_provider_counts_differently() {
    let s = workloads::summary();
    assert_eq!(s.token_counts.len(), 2);
    let p = &s.token_counts[0];
    assert_eq!(p.provider, "p");
    assert_eq!(p.tiers, vec![(1000, 1012.0, 60), (8000, 8012.0, 60)]);
    assert!(close(p.tokens_per_word.unwrap(), 1.0, 1e-12));
    assert!(close(p.overhead_tokens.unwrap(), 12.0, 1e-9));
    assert!(!p.counts_differently);
    let q = &s.token_counts[1];
    assert_eq!(q.tiers, vec![(1000, 1210.0, 60)]);
    assert!(
        q.counts_differently && q.note.contains("1.21 tokens per generated word"),
        "{}",
        q.note
    );
}

#[test]
fn the_summary_json_round_trips_with_the_new_rows() {
    let s = workloads::summary();
    let back: Summary = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn a_one_step_rate_row_leaves_warm_up_arrivals_out_of_sent_and_scheduled() {
    use latmesh_core::load::LoadKind;
    use latmesh_core::record::{Outcome, ProbeRecord};
    use latmesh_results::aggregate::Aggregate;
    use latmesh_results::fixtures::{add, agent, plan};
    // `open`: 10 rps for 10 s; the first 10 arrivals of each agent are warm-up.
    let mut plan = plan();
    plan.scenarios[1].warmup = 10;
    let mut agg = Aggregate::for_plan(&plan);
    for slot in 0..10 {
        agg.add_record(
            "us-east",
            &ProbeRecord {
                load: LoadKind::Rate,
                slot,
                provider: "p".into(),
                scenario: "open".into(),
                attempt: 1,
                final_attempt: true,
                turn: 1,
                outcome: Some(Outcome::Ok),
                warmup: true,
                ..Default::default()
            },
        );
    }
    add(
        &mut agg,
        "us-east",
        "open",
        LoadKind::Rate,
        &[(0, 90, Outcome::Ok, 1_000, 0)],
    );
    let rows = latmesh_results::load_stats::rate_rows(&plan, &agg, &[agent("a1", "us-east")]);
    let r = rows
        .iter()
        .find(|r| r.region == "us-east" && r.provider == "p")
        .unwrap();
    assert_eq!((r.scheduled, r.sent, r.requests), (90, 90, 90));
    assert_eq!((r.scheduled_rps, r.achieved_rps), (9.0, Some(9.0)));
    assert!(!r.agent_saturated, "{:?}", r.agent_saturated_reason);
}
