//! The three load models end to end, with real processes on loopback: `latmesh-sim`, a
//! coordinator and three agents in three regions run one campaign with a rounds scenario, a
//! closed-loop sweep against a provider whose capacity is known, and an open-loop rate against
//! a provider that cannot keep up behind its in-flight cap. The summary must show each model's
//! numbers, and the three agents must have started within 1 ms of each other.

use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::stack::Stack;

/// `queue`: serves 6 requests at once (over all regions), ~125 ms each. `steady`: no limit.
/// `stall`: 300 ms to the first token.
fn profiles() -> Vec<ProviderProfile> {
    let fixed = |name: &str, ttft_ms: u64, capacity: u32| ProviderProfile {
        output_tokens_min: 8,
        output_tokens_max: 8,
        capacity,
        ..ProviderProfile::fixed(name, ttft_ms * 1000, 3_000)
    };
    vec![
        fixed("queue", 100, 6),
        fixed("steady", 60, 0),
        fixed("stall", 300, 0),
    ]
}

const CAMPAIGN: &str = r#"
[campaign]
name = "load-models"
seed = 3
regions = ["us-east", "eu-west", "ap-southeast"]

[rounds]
count = 12
interval_s = 0.5
gap_ms = 100

[[scenarios]]
name = "patrol"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16

# 3 regions × [1, 2, 4, 8] workers on `queue` (capacity 6): 3, 6, 12, 24 in flight; 2 s
# steps give the first one ~48 requests over the regions (a knee needs 30 per step).
[[scenarios]]
name = "sweep"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
[scenarios.sweep]
concurrency = [1, 2, 4, 8]
step_s = 2

# 3 regions × 20 arrivals/s, the same instants for every provider: 60/s on `queue`, which
# serves ~48/s (6 at once, ~125 ms each), so its queue grows over the phase.
[[scenarios]]
name = "open"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
[scenarios.rate]
rps = 20
duration_s = 2
max_queue_s = 20

[[providers]]
name = "queue"
base_url = "http://{sim}/queue/v1"
model_id = "m"

[[providers]]
name = "stall"
base_url = "http://{sim}/stall/v1"
model_id = "m"
max_in_flight = 1
"#;

#[test]
fn rounds_sweep_and_rate_run_from_three_synchronized_regions() {
    let mut stack = Stack::start(&profiles());
    for region in ["us-east", "eu-west", "ap-southeast"] {
        stack.agent(&format!("{region}-1"), region);
    }
    let (s, out) = stack.launch(CAMPAIGN);
    assert!(s.complete, "{out}");

    // Synchronized sends: three agents on one machine send each slot of the rounds within
    // 1 ms of each other (the median over every slot: one instant alone, such as the start,
    // can be late by an OS time slice when the machine is busy). Both are reported.
    assert_eq!(s.start.agents.len(), 3, "{:?}", s.start);
    assert!(s.start.skew_us.is_some(), "{:?}", s.start);
    let slots = s
        .start
        .slot_skew
        .as_ref()
        .expect("slots sent by all three agents");
    assert_eq!(slots.slots, 12 * 2, "{slots:?}");
    // Send times are compared on the coordinator's clock through each agent's offset
    // estimate, whose ± bound the summary reports: a spread within that bound cannot be told
    // from zero, so the median must be within 1 ms plus the reported uncertainty.
    let resolvable_us = s.start.clock_uncertainty_us.unwrap_or(0) as i64;
    assert!(
        (0..1_000 + resolvable_us).contains(&slots.p50_us),
        "{:?}",
        s.start
    );
    assert!(
        out.contains("start skew") && out.contains("spread P50"),
        "{out}"
    );

    // Sweep: `queue` keeps up to 2 workers per region (6 in flight), then bends.
    let row = s
        .sweeps
        .iter()
        .find(|r| r.region == "ALL" && r.provider == "queue" && r.scenario == "sweep")
        .unwrap_or_else(|| panic!("{:#?}", s.sweeps));
    let conc: Vec<u32> = row.steps.iter().map(|st| st.concurrency).collect();
    assert_eq!(conc, vec![1, 2, 4, 8]);
    assert!(
        row.steps
            .iter()
            .all(|st| st.requests > 0 && st.error_pct == 0.0),
        "{row:#?}"
    );
    let knee = row
        .knee
        .as_ref()
        .unwrap_or_else(|| panic!("no knee: {row:#?}"));
    assert_eq!(knee.concurrency, 4, "{row:#?}");
    // Throughput saturates at the capacity: ~6 / 0.125 s = 48 requests/s over all regions.
    let top = row.steps.last().unwrap().throughput_rps;
    assert!((30.0..60.0).contains(&top), "{row:#?}");

    // Rate: `stall` serves one request at a time per agent (~300 ms): 20 arrivals/s cannot
    // leave on time; intended-time TTFT grows while actual-send TTFT does not.
    let rate = s
        .rates
        .iter()
        .find(|r| r.region == "ALL" && r.provider == "stall" && r.scenario == "open")
        .unwrap_or_else(|| panic!("{:#?}", s.rates));
    // The agents' cap held the arrivals back; the provider itself kept its pace.
    assert!(rate.agent_saturated, "{rate:#?}");
    assert!(
        rate.provider_saturation.is_some() && !rate.provider_saturated,
        "{rate:#?}"
    );
    let actual = rate.ttft.as_ref().unwrap();
    let intended = rate.ttft_intended.as_ref().unwrap();
    assert!(actual.p99_ms < 450.0, "{rate:#?}");
    assert!(intended.p99_ms > 3.0 * actual.p99_ms, "{rate:#?}");
    let quick = s
        .rates
        .iter()
        .find(|r| r.region == "ALL" && r.provider == "queue" && r.scenario == "open")
        .unwrap();
    assert_eq!(quick.dropped, 0, "{quick:#?}");
    // `queue` got every arrival on time (the agents kept up: no drop, `sched_lag` P90 within
    // 10 ms; one arrival late by an OS time slice on a busy machine is not saturation) but
    // could not serve them as fast as they came: provider saturated, agent not; in each
    // region too.
    assert!(!quick.agent_saturated, "{quick:#?}");
    assert!(quick.provider_saturated, "{quick:#?}");
    let growth = quick.provider_saturation.as_ref().unwrap();
    assert!(
        growth.median_ms.1.unwrap() > 1.5 * growth.median_ms.0.unwrap(),
        "{growth:?}"
    );
    for region in ["us-east", "eu-west", "ap-southeast"] {
        let r = s
            .rates
            .iter()
            .find(|r| r.region == region && r.provider == "queue" && r.scenario == "open")
            .unwrap();
        assert!(r.provider_saturated, "{r:#?}");
    }
    // Every provider was offered the same arrivals.
    let offered: Vec<(u64, u64)> = s
        .rates
        .iter()
        .filter(|r| r.region == "ALL" && r.scenario == "open")
        .map(|r| (r.scheduled, r.agents))
        .collect();
    assert!(offered.iter().all(|o| *o == (40, 3)), "{offered:?}");
    assert!(
        out.contains("provider saturated: queue ALL: TTFT P50"),
        "{out}"
    );

    // Rounds ran too: 12 rounds × 2 providers per region.
    let patrol: u64 = s
        .cells
        .iter()
        .filter(|c| c.region == "ALL" && c.scenario == "patrol")
        .map(|c| c.attempts)
        .sum();
    assert_eq!(patrol, 12 * 2 * 3);
}

const FAILOVER: &str = r#"
[campaign]
name = "failover"
regions = ["us-east"]

[rounds]
count = 4
interval_s = 1.0
gap_ms = 200

# Clients try `down` twice (retry once), then `up`, then `spare`; every round also probes
# `up` and `spare` on their own.
[[scenarios]]
name = "chat"
prompt_ids = ["short-qa-en-*"]
max_tokens = 16
failover = { chain = ["down", "up", "spare"], attempts = 2 }

[[providers]]
name = "down"
base_url = "http://{sim}/down/v1"
model_id = "m"
requests_per_min = 600

[[providers]]
name = "up"
base_url = "http://{sim}/up/v1"
model_id = "m"

[[providers]]
name = "spare"
base_url = "http://{sim}/spare/v1"
model_id = "m"
"#;

#[test]
fn failover_is_reported_as_the_client_experiences_it() {
    let profiles = vec![
        ProviderProfile {
            throttle_prob: 1.0,
            ..ProviderProfile::fixed("down", 20_000, 1_000)
        },
        ProviderProfile::fixed("up", 40_000, 1_000),
        ProviderProfile::fixed("spare", 40_000, 1_000),
    ];
    let mut stack = Stack::start(&profiles);
    stack.agent("us-east-1", "us-east");
    let (s, out) = stack.launch(FAILOVER);
    assert!(s.complete, "{out}");
    let row = s
        .failover
        .iter()
        .find(|r| r.region == "ALL")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(row.chain, ["down", "up", "spare"]);
    assert_eq!(row.requests, 4, "{row:?}");
    assert_eq!(row.ok_pct, 100.0, "{row:?}");
    assert_eq!(row.attempts_per_request, 3.0, "{row:?}");
    let served: Vec<(&str, f64)> = row
        .served_by_pct
        .iter()
        .map(|(p, v)| (p.as_str(), *v))
        .collect();
    assert_eq!(served, vec![("down", 0.0), ("up", 100.0), ("spare", 0.0)]);
    // The client waited for two refusals and `up`'s whole answer: more than `up` alone.
    let up_e2e = s.cell("ALL", "up", "chat").unwrap().e2e.unwrap().p50_ms;
    assert!(
        row.latency.as_ref().unwrap().p50_ms > up_e2e,
        "{row:?} vs {up_e2e}"
    );
    // The backups' own probes: 4 each, all ok.
    for b in &row.backups {
        assert_eq!((b.probes, b.ok_pct), (4, 100.0), "{b:?}");
    }
    // In the matrix, `down` was sent 4 requests (2 attempts each) and failed every one (it
    // showed "failed % (requests) 0.0": its attempts were never final); `up` answered its 4
    // client requests and its 4 own probes.
    let down = s.cell("us-east", "down", "chat").unwrap();
    assert_eq!(
        (down.requests, down.request_error_pct),
        (4, 100.0),
        "{down:?}"
    );
    let up = s.cell("us-east", "up", "chat").unwrap();
    assert_eq!((up.requests, up.request_error_pct), (8, 0.0), "{up:?}");
    assert!(out.contains("100.0 / 100.0 / 100.0"), "{out}");
    // `down` has caps and answered 429 anyway: the provider's own limit.
    assert_eq!(s.politeness.len(), 1, "{:?}", s.politeness);
    assert_eq!(s.politeness[0].provider, "down");
    assert_eq!(s.politeness[0].throttled, 8);
    assert!(
        out.contains("failover chat: client requests through down → up → spare"),
        "{out}"
    );
}
