//! Issue 21's workloads end to end, with real processes on loopback: generated prompts of
//! exact lengths in tiers, warm-up requests, SLO goodput, and the SLO search for the highest
//! rate that still meets it (docs/metrics.md "Generated prompts", "Warm-up", "SLOs and
//! goodput", "Rate steps and the SLO search").
//!
//! * [`generated_prompts_are_byte_identical_across_agents_and_runs`]: what agents put on the
//!   wire, captured by a stand-in provider (`latmesh_testkit::capture`): two agents of one
//!   region and two runs send the same bytes, another region differs only in the header words,
//!   and the warm-up requests are sent but left out of the matrix.
//! * [`tiers_goodput_and_search_agree_with_the_simulators_truth`]: tiers 1k/8k/32k and an SLO
//!   search on the simulator from two regions, checked against the profiles' ground truth, the
//!   same figures from ClickHouse (`latmesh query tiers|slo --json`) and the HTML report.

use std::collections::BTreeMap;
use std::process::Command;

use latmesh_core::synth::{HEADER_WORDS, RequestKey, SynthPrompt};
use latmesh_results::summary::Summary;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::capture::{CaptureServer, Captured, TEMPLATE_TOKENS};
use latmesh_testkit::stack::Stack;

/// Two tiers (1k, and 32k: a long prompt must cost the agent only its bytes), a shared prefix
/// of 100 words, 4 constant arrivals per agent in 1 s, the first a warm-up.
const BYTES_CAMPAIGN: &str = r#"
[campaign]
name = "synth-bytes"
seed = 11
regions = ["us-east", "eu-west"]

[[scenarios]]
name = "ctx"
load = "rate"
input_tokens = [1000, 32000]
shared_prefix_tokens = 100
output_tokens = 4
warmup = 1
stream = true
temperature = 0.0
[scenarios.rate]
rps = 4
arrivals = "constant"
duration_s = 1

[[providers]]
name = "cap"
base_url = "http://{cap}/cap/v1"
model_id = "m"
"#;

const ARRIVALS: u32 = 4;
const TIERS: [u32; 2] = [1000, 32000];
const PREFIX: usize = 100;

/// The user message of each captured request, grouped by region and tier (word count), sorted.
fn texts_by_region(caps: &[Captured]) -> BTreeMap<(String, usize), Vec<String>> {
    let mut out: BTreeMap<(String, usize), Vec<String>> = BTreeMap::new();
    for c in caps {
        let text = c
            .last_message()
            .unwrap_or_else(|| panic!("no message in {}", String::from_utf8_lossy(&c.body)));
        let region = c.region.clone().expect("agents emulate their region");
        let words = text.split(' ').count();
        out.entry((region, words)).or_default().push(text);
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// A body with its message's text taken out: what must be the same for every request of a
/// tier (model, stream, caps, `exact_output` fields).
fn envelope(c: &Captured) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
    for m in v["messages"].as_array_mut().unwrap() {
        m["content"] = serde_json::Value::String(String::new());
    }
    v
}

#[test]
fn generated_prompts_are_byte_identical_across_agents_and_runs() {
    let cap = CaptureServer::start();
    // The simulator is not used: the stand-in is the only provider.
    let mut stack = Stack::start(&[ProviderProfile::fixed("unused", 1_000, 1_000)]);
    for (id, region) in [
        ("us-east-1", "us-east"),
        ("us-east-2", "us-east"),
        ("eu-west-1", "eu-west"),
    ] {
        let mut a = stack.agent_command(id, region, &stack.coord_url);
        a.args(["--exit-after", "2"]);
        stack.spawn(&format!("agent-{id}"), a);
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(latmesh_testkit::raw_agent::wait_connected(
        &stack.coord_url,
        3,
    ));
    let toml = BYTES_CAMPAIGN.replace("{cap}", &cap.addr());

    let mut runs = Vec::new();
    let mut summaries = Vec::new();
    for _ in 0..2 {
        let (s, out) = stack.launch(&toml);
        assert!(s.complete, "{out}");
        runs.push(cap.take());
        summaries.push(s);
    }

    // Every request of a run: 4 arrivals × 2 tiers × 3 agents, warm-up included.
    let per_run = (ARRIVALS as usize) * TIERS.len() * 3;
    for run in &runs {
        assert_eq!(run.len(), per_run, "{:?}", run.iter().map(|c| &c.path).collect::<Vec<_>>());
    }
    let first = texts_by_region(&runs[0]);
    let second = texts_by_region(&runs[1]);
    // Two runs of the same plan: the same bytes.
    assert_eq!(first, second, "a second run sent other texts");
    for tier in TIERS {
        let n = tier as usize;
        // Exactly `tier` words, one space between them.
        let east = &first[&("us-east".to_string(), n)];
        let west = &first[&("eu-west".to_string(), n)];
        // Two agents of us-east: each text twice (byte-identical), 4 distinct texts.
        assert_eq!(east.len(), 2 * ARRIVALS as usize);
        for pair in east.chunks(2) {
            assert_eq!(pair[0], pair[1], "the two us-east agents differ");
        }
        let mut distinct = east.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), ARRIVALS as usize, "every arrival has its own text");
        assert_eq!(west.len(), ARRIVALS as usize);
        for t in east.iter().chain(west) {
            assert!(!t.contains("  ") && !t.ends_with(' '), "spacing");
        }
        // The texts are the generator's for each request key (the plan's seed, the tier, the
        // region, step 0, slot k): so the regions differ only in the header words, after a
        // shared prefix that every request of every region sends.
        let plan = latmesh_core::campaign::load_toml_str(
            &toml.replace("{sim}", "127.0.0.1:9"),
            std::path::Path::new("."),
        )
        .unwrap();
        let spec = plan
            .scenarios
            .iter()
            .filter_map(|s| s.synth.as_ref())
            .find(|s| s.input_tokens == tier)
            .unwrap_or_else(|| panic!("no {tier} tier in the plan"));
        let prompt = SynthPrompt::build(plan.seed, spec);
        for (region, got) in [("us-east", &distinct), ("eu-west", west)] {
            let mut want: Vec<String> = (0..ARRIVALS)
                .map(|slot| {
                    prompt.text(RequestKey {
                        region,
                        round: 0,
                        step: 0,
                        slot,
                    })
                })
                .collect();
            want.sort();
            assert_eq!(&want, got, "{region} {tier}: not the generator's texts");
        }
        for slot in 0..ARRIVALS {
            let key = |region| RequestKey {
                region,
                round: 0,
                step: 0,
                slot,
            };
            let e = prompt.text(key("us-east"));
            let w = prompt.text(key("eu-west"));
            let (e, w): (Vec<&str>, Vec<&str>) = (e.split(' ').collect(), w.split(' ').collect());
            assert_eq!((e.len(), w.len()), (n, n));
            let header = PREFIX..PREFIX + HEADER_WORDS as usize;
            let differing: Vec<usize> = (0..n).filter(|&i| e[i] != w[i]).collect();
            assert!(!differing.is_empty(), "slot {slot}: the regions sent the same text");
            assert!(
                differing.iter().all(|i| header.contains(i)),
                "slot {slot}: words {differing:?} differ, outside the header {header:?}"
            );
        }
    }
    // Apart from the message, every body of a tier is the same, and a 32k-token request is
    // its text and a few hundred bytes of JSON.
    for run in &runs {
        for tier in TIERS {
            let of_tier: Vec<&Captured> = run
                .iter()
                .filter(|c| {
                    c.last_message()
                        .is_some_and(|m| m.split(' ').count() == tier as usize)
                })
                .collect();
            let env0 = envelope(of_tier[0]);
            assert!(of_tier.iter().all(|c| envelope(c) == env0), "{env0}");
            let text = of_tier[0].last_message().unwrap();
            assert!(
                of_tier[0].body.len() < text.len() + 1024,
                "{} bytes for a {} byte text",
                of_tier[0].body.len(),
                text.len()
            );
        }
    }

    // Warm-up: the first arrival of each agent was sent (captured above) and recorded, but
    // left out of the matrix: us-east's cells show 2 warm-up requests and 3 × 2 measured.
    for s in &summaries {
        for tier in ["1k", "32k"] {
            let sc = format!("ctx.{tier}");
            for (region, agents) in [("us-east", 2u64), ("eu-west", 1), ("ALL", 3)] {
                let c = s
                    .cell(region, "cap", &sc)
                    .unwrap_or_else(|| panic!("{region} {sc}: {:#?}", s.cells));
                assert_eq!(c.warmup, agents, "{region} {sc}: {c:#?}");
                assert_eq!(c.attempts, (u64::from(ARRIVALS) - 1) * agents, "{c:#?}");
                assert_eq!(c.samples, c.attempts, "{c:#?}");
            }
        }
        check_token_count(s);
    }
}

/// The stand-in bills one token per word plus its template: the tier rows carry the billed
/// mean and the token-count line finds both numbers.
fn check_token_count(s: &Summary) {
    for tier in TIERS {
        let row = s
            .tiers
            .iter()
            .find(|t| t.region == "ALL" && t.provider == "cap" && t.input_tokens == tier)
            .unwrap_or_else(|| panic!("no ALL tier row {tier}: {:#?}", s.tiers));
        assert_eq!(row.group, "ctx");
        assert_eq!(
            row.billed_prompt_tokens_mean,
            Some(f64::from(tier + TEMPLATE_TOKENS)),
            "{row:#?}"
        );
        assert!(row.ttft.is_some(), "{row:#?}");
    }
    let line = s
        .token_counts
        .iter()
        .find(|t| t.provider == "cap")
        .unwrap_or_else(|| panic!("{:#?}", s.token_counts));
    assert!(
        (line.tokens_per_word.unwrap() - 1.0).abs() < 1e-6,
        "{line:#?}"
    );
    assert!(
        (line.overhead_tokens.unwrap() - f64::from(TEMPLATE_TOKENS)).abs() < 1e-3,
        "{line:#?}"
    );
    assert!(!line.counts_differently, "{line:#?}");
}

/// Runs `latmesh ARGS… --json` and parses its output.
fn latmesh_json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(latmesh_testkit::bin("latmesh"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "latmesh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "latmesh {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
