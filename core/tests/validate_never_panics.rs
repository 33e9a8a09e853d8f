//! No campaign file makes validation panic: files built from valid keys, every number drawn
//! from its plausible range or an edge value (0, 1, −1, the integer limits, huge and tiny
//! floats, NaN, ±∞), are either refused with an error naming a key or become a plan whose
//! estimates (`campaign validate` prints them: phases, duration, probes, budget) are computed
//! without a panic, and only with ports in 1..=65535. Debug builds check every integer
//! operation, so a wrapping product is a failure here.

use std::path::Path;

use latmesh_core::campaign::{CampaignError, load_toml_str};
use latmesh_core::duration::PlannedDuration;
use proptest::prelude::*;

/// An integer key's TOML literal: mostly a plausible value, one time in 20 an edge one (so
/// that many files have exactly one edge value, at any key, and get past the keys before it).
fn int(plausible: std::ops::RangeInclusive<i64>) -> BoxedStrategy<String> {
    prop_oneof![
        19 => plausible.prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            0,
            1,
            -1,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            i64::MAX,
            i64::MIN,
            86_400_000,
            1_000_000,
        ])
        .prop_map(|n| n.to_string()),
    ]
    .boxed()
}

/// A float key's TOML literal: mostly a plausible value, one time in 20 an edge one.
fn float(plausible: std::ops::Range<f64>) -> BoxedStrategy<String> {
    prop_oneof![
        19 => plausible.prop_map(|x| format!("{x:?}")),
        1 => prop::sample::select(vec![
            "0.0", "1.0", "-1.0", "1e308", "-1e308", "5e-324", "nan", "inf", "-inf", "86400.0",
            "100000.0", "1e-9", "0.001",
        ])
        .prop_map(str::to_string),
    ]
    .boxed()
}

/// An optional key: absent or `key = value`.
fn opt(key: &'static str, value: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![
        1 => Just(String::new()),
        2 => value.prop_map(move |v| format!("{key} = {v}\n")),
    ]
    .boxed()
}

/// One campaign file: a rounds scenario (sometimes through a failover chain), a sweep and a
/// rate scenario, and two providers with caps and prices, every number drawn as above.
fn campaign_file() -> impl Strategy<Value = String> {
    let rounds = (int(1..=50), float(1.0..100.0), int(0..=300));
    let rounds_scenario = (
        int(1..=4096),
        opt("temperature", float(0.0..2.0)),
        opt("top_p", float(0.0..1.0)),
        opt("timeout_total_s", float(10.0..600.0)),
        opt("timeout_ttft_s", float(0.1..10.0)),
        opt("turns", int(1..=10)),
        opt("max_response_bytes", int(1024..=1 << 30)),
        (
            int(0..=10),
            float(0.0..10.0),
            float(0.0..100.0),
            prop::bool::ANY,
        ),
        prop::bool::ANY,
        opt("attempts", int(1..=5)),
    );
    let sweep = (
        prop_oneof![
            19 => prop::collection::btree_set(1..=100_000u32, 1..5)
                .prop_map(|steps| steps.iter().map(u32::to_string).collect::<Vec<_>>()),
            1 => prop::collection::vec(int(1..=100_000), 1..5),
        ],
        float(0.001..100.0),
        opt("step_requests", int(1..=1000)),
        opt("knee_percentile", float(0.0..100.0)),
        opt("knee_elasticity", float(0.0..5.0)),
        opt("knee_error_pct", float(0.0..100.0)),
        opt("knee_min_requests", int(1..=100)),
    );
    let rate = (
        float(0.001..100_000.0),
        float(0.001..100.0),
        opt("max_queue_s", float(0.001..3600.0)),
        prop::bool::ANY,
    );
    let provider = (
        opt("max_in_flight", int(1..=64)),
        opt("requests_per_min", float(0.001..1e6)),
        opt("tokens_per_min", float(0.001..1e9)),
        opt("min_gap_ms", int(0..=10_000)),
        float(0.0..100.0),
        float(0.0..100.0),
        // The base URL's port: plausible, or one the client would not dial as written.
        prop_oneof![
            19 => (1..=65535u32).prop_map(|p| p.to_string()),
            1 => prop::sample::select(vec!["0", "65536", "-1", "", "99999999999999999999", "x"])
                .prop_map(str::to_string),
        ],
    );
    // Generated prompts with an SLO, at rate steps (a ramp) or under an SLO search, with
    // gamma arrivals.
    let generated = (
        int(16..=200_000),
        opt("shared_prefix_tokens", int(0..=1000)),
        opt("output_tokens", int(1..=4096)),
        opt("warmup", int(0..=50)),
        float(1.0..10_000.0),
        float(0.001..100.0),
        float(0.001..200.0),
        opt("steps", int(2..=32)),
        opt("min_requests", int(1..=100)),
        opt("resolution_pct", float(0.0..100.0)),
        (float(0.0..100.0), float(0.001..20.0)),
        prop::bool::ANY,
    );
    let campaign = (
        int(0..=i64::MAX),
        prop_oneof![
            19 => prop::collection::btree_set(1..100u32, 1..4)
                .prop_map(|ps| ps.iter().map(|p| format!("{p}.5")).collect::<Vec<_>>()),
            1 => prop::collection::vec(float(0.0..100.0), 1..4),
        ],
        opt("runs", int(1..=10)),
    );
    (
        rounds,
        rounds_scenario,
        sweep,
        rate,
        (provider.clone(), provider),
        campaign,
        generated,
    )
        .prop_map(|(rounds, rs, sweep, rate, (p0, p1), campaign, generated)| {
            let (count, interval_s, gap_ms) = rounds;
            let (
                max_tokens,
                temperature,
                top_p,
                total,
                ttft,
                turns,
                max_bytes,
                retry,
                failover,
                attempts,
            ) = rs;
            let (max_retries, backoff, max_retry_after, honour) = retry;
            let (concurrency, step_s, step_requests, kp, ke, kerr, kmin) = sweep;
            let (rps, duration_s, max_queue_s, poisson) = rate;
            let (seed, percentiles, runs) = campaign;
            let (tier, shared, output, warmup, ttft_ms, min_rps, max_rps, steps, min_requests, resolution, (burstiness, gen_duration_s), search) = generated;
            let max_tokens_line = if output.is_empty() { "max_tokens = 16\n" } else { "" };
            // Gamma at a ramp; Poisson under a search (gamma arrivals are drawn one by one:
            // a search's every step at max_rps would make this test slow).
            let arrivals = if search {
                "arrivals = \"poisson\"\n".to_string()
            } else {
                format!("arrivals = \"gamma\"\nburstiness = {burstiness}\n")
            };
            let rate_table = if search {
                format!("[scenarios.rate.search]\nmin_rps = {min_rps}\nmax_rps = {max_rps}\n{steps}{min_requests}{resolution}")
            } else {
                format!("rps = {{ from = {min_rps}, to = {max_rps}, steps = 4 }}\n")
            };
            let generated = format!(
                "[[scenarios]]\nname = \"gen\"\ninput_tokens = [{tier}]\n{shared}{output}{warmup}{max_tokens_line}slo = {{ ttft_ms = {ttft_ms}, ttft_p95_ms = {ttft_ms} }}\n[scenarios.rate]\nduration_s = {gen_duration_s}\n{arrivals}{rate_table}"
            );
            let provider = |name: &str, (mif, rpm, tpm, gap, pin, pout, port): (String, String, String, String, String, String, String)| {
                format!(
                    "[[providers]]\nname = \"{name}\"\nbase_url = \"http://127.0.0.1:{port}/{name}/v1\"\nmodel_id = \"m\"\n{mif}{rpm}{tpm}{gap}price_input_usd_per_mtok = {pin}\nprice_output_usd_per_mtok = {pout}\n"
                )
            };
            let (retry, failover) = if failover {
                (
                    String::new(),
                    format!("failover = {{ chain = [\"a\", \"b\"]{} }}\n", attempts.replace("attempts", ", attempts").trim_end()),
                )
            } else {
                (
                    format!("retry = {{ max_retries = {max_retries}, backoff_s = [{backoff}], max_retry_after_s = {max_retry_after}, honour_retry_after = {honour} }}\n"),
                    String::new(),
                )
            };
            let turns = if failover.is_empty() { turns } else { String::new() };
            format!(
                r#"[campaign]
name = "fuzz"
seed = {seed}
regions = ["us-east", "eu-west"]
percentiles = [{percentiles}]

[rounds]
count = {count}
interval_s = {interval_s}
gap_ms = {gap_ms}

{schedule}
[[scenarios]]
name = "patrol"
prompt_ids = ["short-qa-en-*"]
max_tokens = {max_tokens}
{temperature}{top_p}{total}{ttft}{turns}{max_bytes}{retry}{failover}
[[scenarios]]
name = "sweep"
prompt_ids = ["short-qa-en-001"]
max_tokens = 16
[scenarios.sweep]
concurrency = [{concurrency}]
step_s = {step_s}
{step_requests}{kp}{ke}{kerr}{kmin}
[[scenarios]]
name = "open"
prompt_ids = ["short-qa-en-002"]
max_tokens = 16
[scenarios.rate]
rps = {rps}
duration_s = {duration_s}
arrivals = "{arrivals}"
{max_queue_s}
{generated}
{p0}{p1}
[[providers]]
name = "c"
base_url = "http://127.0.0.1:9/c/v1"
model_id = "m"
"#,
                percentiles = percentiles.join(", "),
                schedule = if runs.is_empty() {
                    String::new()
                } else {
                    format!("[schedule]\nevery = \"1h\"\n{runs}")
                },
                concurrency = concurrency.join(", "),
                arrivals = if poisson { "poisson" } else { "constant" },
                p0 = provider("a", p0),
                p1 = provider("b", p1),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn no_campaign_file_makes_validation_panic(text in campaign_file()) {
        match load_toml_str(&text, Path::new(".")) {
            Ok(plan) => {
                // What `latmesh campaign validate` and `launch` compute from a plan.
                let duration = PlannedDuration::of(&plan);
                let _ = duration.check(false);
                let _ = duration.describe();
                let _ = plan.probes_per_agent();
                let _ = plan.span_us();
                let _ = plan.round_order(plan.rounds.count.saturating_sub(1));
                let last = plan.slots_per_round().saturating_sub(1);
                let _ = plan.probe_offset_us(plan.rounds.count.saturating_sub(1), last);
                for s in &plan.scenarios {
                    let _ = s.worst_case_slot_us();
                }
                let _ = latmesh_core::budget::estimate(&plan, 3);
                // Only ports the client dials as written are accepted.
                for p in &plan.providers {
                    let port = p.base_url.trim_start_matches("http://127.0.0.1:").split('/').next();
                    prop_assert!(
                        port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0)),
                        "{}",
                        p.base_url
                    );
                }
                let _ = plan.hash();
            }
            // Refusals name what is wrong: a key, or figment's parse message.
            Err(CampaignError::Invalid { key, message }) => {
                prop_assert!(!key.is_empty() && !message.is_empty());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
