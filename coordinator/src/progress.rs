//! Live campaign progress, the coordinator's side: [`pb::LiveCell`]s (per region and per
//! provider, over every scenario) computed from a campaign's [`Aggregate`] at most once a
//! second ([`LiveCache`]) and sent on the `Watch` stream; the CLI draws them (its `ui::progress`
//! renderer) while `latmesh campaign launch`, `campaign watch` or `latmesh demo` follows it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use latmesh_core::hist::HistKey;
use latmesh_core::load::LoadModel;
use latmesh_core::metrics::Metric;
use latmesh_core::plan::Plan;
use latmesh_core::record::Outcome;
use latmesh_proto::pb;

use latmesh_results::aggregate::{Aggregate, CellCounts};

/// Live cells are recomputed at most this often per campaign (the last message always gets
/// fresh ones).
pub const LIVE_EVERY: Duration = Duration::from_secs(1);

/// The latency the live cells report: TTFT when the plan has a streaming scenario (over the
/// streaming scenarios only), E2E otherwise.
pub fn live_metric(plan: &Plan) -> Metric {
    if plan.scenarios.iter().any(|s| s.stream) {
        Metric::Ttft
    } else {
        Metric::E2e
    }
}

/// Attempts that count as errors: neither `ok`, nor `cancelled` (cut by a campaign cancel), nor
/// `dropped` (an open-loop arrival or a rounds probe its provider's caps held past its queue
/// bound, never sent).
fn errors(c: &CellCounts) -> u64 {
    c.attempts()
        .saturating_sub(c.count(Outcome::Ok))
        .saturating_sub(c.count(Outcome::Cancelled))
        .saturating_sub(c.count(Outcome::Dropped))
}

/// The scenarios whose request count nobody knows in advance: `sweep` scenarios without
/// `step_requests` (they send as many requests as their providers answer in the steps'
/// time) and `rate` scenarios with an SLO search (each provider's rates are chosen as it
/// runs).
pub fn open_ended_scenarios(plan: &Plan) -> Vec<&str> {
    plan.scenarios
        .iter()
        .filter(|s| match &s.load {
            LoadModel::Sweep(sw) => sw.step_requests.is_none(),
            LoadModel::Rate(r) => r.search.is_some(),
            LoadModel::Rounds => false,
        })
        .map(|s| s.name.as_str())
        .collect()
}

/// Whether the requests an agent makes are all known in advance: not with an open-ended
/// sweep or an SLO search ([`open_ended_scenarios`]).
pub fn expected_known(plan: &Plan) -> bool {
    open_ended_scenarios(plan).is_empty()
}

/// Requests of `sweep` scenario `s` with `step_requests` per agent and provider: every step
/// sends at most that many (fewer when a step's time ends first).
fn bounded_sweep_requests(plan: &Plan, s: usize) -> u64 {
    match &plan.scenarios[s].load {
        LoadModel::Sweep(sw) => sw
            .step_requests
            .map_or(0, |n| sw.concurrency.len() as u64 * u64::from(n)),
        _ => 0,
    }
}

/// Requests one agent is planned to make, every load model counted as progress counts them
/// (final attempts of first turns): rounds slots and `rate` arrivals
/// ([`Plan::probes_per_agent`]), and each `sweep` with `step_requests` at its maximum
/// (steps × `step_requests` × providers). An open-ended sweep ([`open_ended_scenarios`]) adds
/// nothing here: its requests are counted as they are made, against no total.
pub fn planned_requests_per_agent(plan: &Plan) -> u64 {
    let providers = plan.providers.len() as u64;
    plan.probes_per_agent()
        + (0..plan.scenarios.len())
            .map(|s| bounded_sweep_requests(plan, s) * providers)
            .sum::<u64>()
}

/// Requests one agent is planned to make per provider, in `plan.providers` order, when that
/// is known in advance ([`planned_requests_per_agent`]). All zeros (unknown) with an
/// open-ended sweep ([`expected_known`]), when a failover scenario may end a slot on another
/// provider than the slot's, or when the attribution does not add up to
/// `planned_requests_per_agent`.
pub fn provider_expected_per_agent(plan: &Plan) -> Vec<u64> {
    let n = plan.providers.len();
    let mut out = vec![0u64; n];
    if !expected_known(plan) || plan.scenarios.iter().any(|s| s.failover.is_some()) {
        return out;
    }
    for s in plan.rounds_scenarios() {
        for slot in plan.scenario_slots(s) {
            if let Some(e) = out.get_mut(slot.provider) {
                *e += u64::from(plan.rounds.count);
            }
        }
    }
    for (s, scenario) in plan.scenarios.iter().enumerate() {
        if let LoadModel::Rate(r) = &scenario.load {
            let arrivals = r.planned_arrivals(plan.seed, s);
            for e in out.iter_mut() {
                *e += arrivals;
            }
        }
        let sweep = bounded_sweep_requests(plan, s);
        for e in out.iter_mut() {
            *e += sweep;
        }
    }
    if out.iter().sum::<u64>() != planned_requests_per_agent(plan) {
        out.iter_mut().for_each(|e| *e = 0);
    }
    out
}

/// The live cells of a campaign: one per region (provider empty; counts only) in plan order,
/// then one per provider (region empty; counts and percentiles of [`live_metric`] from the
/// histograms merged over regions and scenarios). `agents_per_region` is how many agents run
/// the campaign in each region (regions of agents missing from the plan are added after the
/// plan's); `provider_expected` is [`provider_expected_per_agent`] and `probes_per_agent`
/// is [`planned_requests_per_agent`] (counted once by the caller: it generates every
/// open-loop arrival).
pub fn live_cells(
    plan: &Plan,
    probes_per_agent: u64,
    agg: &Aggregate,
    agents_per_region: &BTreeMap<String, u64>,
    provider_expected: &[u64],
) -> Vec<pb::LiveCell> {
    let per_agent = if expected_known(plan) {
        probes_per_agent
    } else {
        0
    };
    let agents_total: u64 = agents_per_region.values().sum();
    let metric = live_metric(plan);
    let mut regions: Vec<&str> = plan.regions.iter().map(String::as_str).collect();
    for r in agents_per_region.keys() {
        if !regions.contains(&r.as_str()) {
            regions.push(r);
        }
    }
    let mut out = Vec::with_capacity(regions.len() + plan.providers.len());
    for region in regions {
        let mut cell = pb::LiveCell {
            region: region.to_string(),
            expected: per_agent * agents_per_region.get(region).copied().unwrap_or(0),
            metric: metric.as_str().to_string(),
            ..Default::default()
        };
        for p in &plan.providers {
            for s in &plan.scenarios {
                let c = agg.counts(Some(region), &p.name, &s.name);
                cell.done += c.slots_done;
                cell.errors += errors(&c);
            }
        }
        out.push(cell);
    }
    for (i, p) in plan.providers.iter().enumerate() {
        let mut cell = pb::LiveCell {
            provider: p.name.clone(),
            expected: provider_expected.get(i).copied().unwrap_or(0) * agents_total,
            metric: metric.as_str().to_string(),
            ..Default::default()
        };
        let mut merged: Option<Histogram<u64>> = None;
        for s in &plan.scenarios {
            let c = agg.counts(None, &p.name, &s.name);
            cell.done += c.slots_done;
            cell.errors += errors(&c);
            if metric == Metric::Ttft && !s.stream {
                continue;
            }
            let key = HistKey {
                provider: p.name.clone(),
                scenario: s.name.clone(),
                metric,
                step: 0,
            };
            if let Some(h) = agg.histogram(None, &key) {
                match &mut merged {
                    Some(acc) => acc.add(&h).expect("shared bounds"),
                    None => merged = Some(h),
                }
            }
        }
        if let Some(h) = merged.filter(|h| !h.is_empty()) {
            cell.p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
            cell.p95_ms = h.value_at_quantile(0.95) as f64 / 1000.0;
            cell.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
            cell.samples = h.len();
        }
        out.push(cell);
    }
    out
}

/// A campaign's live cells, recomputed at most once per [`LIVE_EVERY`].
#[derive(Debug, Default)]
pub struct LiveCache {
    at: Option<Instant>,
    cells: Vec<pb::LiveCell>,
    provider_expected: Option<Vec<u64>>,
}

impl LiveCache {
    /// The live cells as of `now`: the cached ones when they were computed less than
    /// [`LIVE_EVERY`] ago and `force` is false, fresh ones otherwise.
    pub fn cells(
        &mut self,
        now: Instant,
        force: bool,
        plan: &Plan,
        probes_per_agent: u64,
        agg: &Aggregate,
        agents_per_region: &BTreeMap<String, u64>,
    ) -> Vec<pb::LiveCell> {
        let stale = self
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= LIVE_EVERY);
        if force || stale {
            let expected = self
                .provider_expected
                .get_or_insert_with(|| provider_expected_per_agent(plan));
            self.cells = live_cells(plan, probes_per_agent, agg, agents_per_region, expected);
            self.at = Some(now);
        }
        self.cells.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::hist::new_histogram;
    use latmesh_core::record::ProbeRecord;

    /// Regions us-east and eu-west; providers p1 and p2; rounds scenarios chat and long
    /// (10 rounds).
    fn plan(stream: bool) -> Plan {
        let scenario = |name: &str| {
            serde_json::json!({
                "name": name, "stream": stream, "max_tokens": 16, "temperature": null,
                "top_p": null, "prompts": [{ "id": "a", "messages": [] }],
                "timeouts": { "connect_s": 10.0, "ttft_s": 60.0, "idle_s": 30.0, "total_s": 120.0 }
            })
        };
        let provider = |name: &str| {
            serde_json::json!({
                "name": name, "base_url": "http://127.0.0.1:9/v1", "api_key_env": null,
                "model_id": "m"
            })
        };
        serde_json::from_value(serde_json::json!({
            "name": "live", "seed": 1, "metrics_version": 3,
            "regions": ["us-east", "eu-west"],
            "rounds": { "count": 10, "interval_ms": 1000, "gap_ms": 10 },
            "providers": [provider("p1"), provider("p2")],
            "scenarios": [scenario("chat"), scenario("long")],
            "prompt_set": "x"
        }))
        .expect("test plan parses")
    }

    fn rec(provider: &str, scenario: &str, outcome: Outcome) -> ProbeRecord {
        ProbeRecord {
            provider: provider.into(),
            scenario: scenario.into(),
            outcome: Some(outcome),
            attempt: 1,
            turn: 1,
            final_attempt: true,
            ..Default::default()
        }
    }

    /// p1: 100 TTFT samples 1..=100 ms over two regions and scenarios; 3 errors, 1 cancelled.
    fn aggregate() -> Aggregate {
        let mut agg = Aggregate::default();
        for (i, ms) in (1..=100u64).enumerate() {
            let region = if i % 2 == 0 { "us-east" } else { "eu-west" };
            let scenario = if i % 3 == 0 { "chat" } else { "long" };
            agg.add_record(region, &rec("p1", scenario, Outcome::Ok));
            let mut h = new_histogram();
            h.record(ms * 1000).unwrap();
            let key = |metric| HistKey {
                provider: "p1".into(),
                scenario: scenario.into(),
                metric,
                step: 0,
            };
            agg.add_histogram(region, key(Metric::Ttft), &h);
            // E2E is 10× slower: it must not leak into the TTFT numbers.
            let mut e = new_histogram();
            e.record(ms * 10_000).unwrap();
            agg.add_histogram(region, key(Metric::E2e), &e);
        }
        for o in [Outcome::Throttled, Outcome::Http5xx, Outcome::TimeoutTtft] {
            agg.add_record("us-east", &rec("p1", "chat", o));
        }
        agg.add_record("eu-west", &rec("p1", "chat", Outcome::Cancelled));
        agg.add_record("eu-west", &rec("p2", "long", Outcome::Ok));
        agg
    }

    fn agents() -> BTreeMap<String, u64> {
        BTreeMap::from([("us-east".into(), 1), ("eu-west".into(), 2)])
    }

    fn approx(a: f64, b: f64) -> bool {
        (a - b).abs() <= b * 0.01
    }

    #[test]
    fn live_cells_from_a_synthetic_aggregate() {
        let plan = plan(true);
        let expected = provider_expected_per_agent(&plan);
        // Rounds: 10 rounds × 2 scenarios, one slot per provider each.
        assert_eq!(expected, vec![20, 20]);
        assert_eq!(plan.probes_per_agent(), 40);
        let cells = live_cells(
            &plan,
            plan.probes_per_agent(),
            &aggregate(),
            &agents(),
            &expected,
        );
        let keys: Vec<(&str, &str)> = cells
            .iter()
            .map(|c| (c.region.as_str(), c.provider.as_str()))
            .collect();
        assert_eq!(
            keys,
            [("us-east", ""), ("eu-west", ""), ("", "p1"), ("", "p2")]
        );
        let (us, eu, p1, p2) = (&cells[0], &cells[1], &cells[2], &cells[3]);
        // Regions: 40 slots per agent × agents; counts only.
        assert_eq!((us.done, us.expected, us.errors), (53, 40, 3));
        assert_eq!((eu.done, eu.expected, eu.errors), (52, 80, 0));
        assert_eq!((us.p50_ms, us.p99_ms), (0.0, 0.0));
        // p1: 100 ok + 3 failed + 1 cancelled slots; the cancelled one is no error.
        assert_eq!((p1.done, p1.expected, p1.errors), (104, 60, 3));
        assert_eq!(p1.metric, "ttft");
        assert!(approx(p1.p50_ms, 50.0), "{}", p1.p50_ms);
        assert!(approx(p1.p95_ms, 95.0), "{}", p1.p95_ms);
        assert!(approx(p1.p99_ms, 99.0), "{}", p1.p99_ms);
        assert_eq!(p1.samples, 100);
        // p2: one slot, no histogram: no percentiles.
        assert_eq!((p2.done, p2.errors, p2.p50_ms, p2.p99_ms), (1, 0, 0.0, 0.0));
    }

    #[test]
    fn non_streaming_plans_report_e2e() {
        let plan = plan(false);
        let cells = live_cells(
            &plan,
            plan.probes_per_agent(),
            &aggregate(),
            &agents(),
            &[0, 0],
        );
        let p1 = &cells[2];
        assert_eq!((p1.metric.as_str(), p1.expected), ("e2e", 0));
        assert!(approx(p1.p50_ms, 500.0), "{}", p1.p50_ms);
        assert!(approx(p1.p99_ms, 990.0), "{}", p1.p99_ms);
    }

    /// `plan(true)` with its second scenario a sweep (c = 2, 4) of `step_requests`.
    fn sweep_plan(step_requests: Option<u32>) -> Plan {
        let mut plan = plan(true);
        plan.scenarios[1].load = serde_json::from_value(serde_json::json!({ "sweep": {
            "concurrency": [2, 4], "step_ms": 10000, "step_requests": step_requests,
            "knee": { "metric": "e2e", "percentile": 50.0, "elasticity": 0.5, "error_pct": 5.0 }
        } }))
        .unwrap();
        plan
    }

    #[test]
    fn progress_counts_sweep_requests() {
        // 10 rounds of the rounds scenario (one slot per provider), and a sweep of 2 steps of
        // at most 5 requests per provider: 10 + 10 per provider and agent.
        let plan = sweep_plan(Some(5));
        assert_eq!(open_ended_scenarios(&plan), Vec::<&str>::new());
        assert_eq!(planned_requests_per_agent(&plan), 40);
        assert_eq!(provider_expected_per_agent(&plan), vec![20, 20]);
        // A sweep request's final attempt counts as done, like a rounds slot; a retried
        // attempt (not final) does not.
        let mut agg = Aggregate::default();
        for step in [0, 1] {
            let mut r = rec("p1", "long", Outcome::Ok);
            (r.load, r.step, r.concurrency) = (latmesh_core::load::LoadKind::Sweep, step, 2);
            agg.add_record("us-east", &r);
            agg.add_record(
                "us-east",
                &ProbeRecord {
                    final_attempt: false,
                    ..r
                },
            );
        }
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        assert_eq!(agg.slots_done(), 3);
        let cells = live_cells(
            &plan,
            planned_requests_per_agent(&plan),
            &agg,
            &agents(),
            &provider_expected_per_agent(&plan),
        );
        let (us, p1) = (&cells[0], &cells[2]);
        assert_eq!((us.done, us.expected), (3, 40));
        assert_eq!((p1.done, p1.expected), (3, 60));
    }

    #[test]
    fn open_ended_sweep_plans_leave_expectations_unknown() {
        let plan = sweep_plan(None);
        assert_eq!(open_ended_scenarios(&plan), ["long"]);
        assert_eq!(
            planned_requests_per_agent(&plan),
            20,
            "the rounds scenario still counts"
        );
        assert_eq!(provider_expected_per_agent(&plan), vec![0, 0]);
        let cells = live_cells(
            &plan,
            planned_requests_per_agent(&plan),
            &aggregate(),
            &agents(),
            &[0, 0],
        );
        assert!(cells.iter().all(|c| c.expected == 0), "{cells:?}");
    }

    #[test]
    fn failover_plans_leave_provider_expectations_unknown() {
        let mut plan = plan(true);
        plan.scenarios[0].failover = Some(latmesh_core::plan::FailoverSpec {
            chain: vec![0, 1],
            attempts: 2,
            on: latmesh_core::plan::FailoverSpec::default_on(),
        });
        assert_eq!(provider_expected_per_agent(&plan), vec![0, 0]);
    }

    #[test]
    fn live_cells_recompute_at_most_once_a_second() {
        let plan = plan(true);
        let mut agg = Aggregate::default();
        let mut cache = LiveCache::default();
        let t0 = Instant::now();
        let done = |cells: &[pb::LiveCell]| cells[2].done;
        assert_eq!(
            done(&cache.cells(t0, false, &plan, plan.probes_per_agent(), &agg, &agents())),
            0
        );
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        let soon = t0 + Duration::from_millis(500);
        assert_eq!(
            done(&cache.cells(soon, false, &plan, plan.probes_per_agent(), &agg, &agents())),
            0
        );
        // The last message forces fresh numbers.
        assert_eq!(
            done(&cache.cells(soon, true, &plan, plan.probes_per_agent(), &agg, &agents())),
            1
        );
        agg.add_record("us-east", &rec("p1", "chat", Outcome::Ok));
        let later = soon + LIVE_EVERY;
        assert_eq!(
            done(&cache.cells(
                later,
                false,
                &plan,
                plan.probes_per_agent(),
                &agg,
                &agents()
            )),
            2
        );
    }
}
