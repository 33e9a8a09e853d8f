//! The demo campaign in-process (`latmesh demo` minus printing): nine simulated providers, two
//! of them also on the Anthropic and Responses APIs (eleven columns), three regions, real gRPC and HTTP over loopback; the matrix shows what the simulator built in.
//! Then the compatibility checks and the quality set against the same providers: every
//! provider checked, the demo profiles' traps found (and nothing else flagged), and the
//! selection matrix using the measured scores.

use latmesh_cli::cmd::demo::{DemoOptions, DemoStore, run_with};
use latmesh_core::compat::{CompatCheck, Verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_matrix_reflects_the_simulated_world() {
    // With a ClickHouse (the test command starts one), the demo stores its results there too.
    let spool = tempfile::tempdir().unwrap();
    let db = format!("latmesh_demo_{}", std::process::id());
    let store = std::env::var("LATMESH_CLICKHOUSE_URL")
        .ok()
        .map(|url| DemoStore {
            url,
            db: db.clone(),
            spool_dir: spool.path().to_path_buf(),
        });
    let data = run_with(
        DemoOptions {
            rounds: Some(6),
            progress: false,
            clickhouse: store.clone(),
        },
        |_| {},
    )
    .await
    .unwrap();
    let s = &data.summary;
    assert_eq!(s.regions.len(), 3);
    assert_eq!(s.providers.len(), 11);
    // 3 regions + ALL, 11 providers, 6 scenarios (2 in rounds, a sweep, an open-loop rate,
    // the long-context tiers ctx.1k and ctx.8k).
    assert_eq!(s.cells.len(), 4 * 11 * 6);
    // The sweep: one row per region and ALL for every provider, three steps each; `steady`
    // (16 requests at once over the three regions) bends at 8 workers per region (24), found
    // from at least 30 requests in every step up to it.
    assert_eq!(s.sweeps.len(), 4 * 11);
    assert!(
        s.sweeps.iter().all(|r| r.steps.len() == 3),
        "{:#?}",
        s.sweeps
    );
    let sweep = |p: &str| {
        s.sweeps
            .iter()
            .find(|r| r.region == "ALL" && r.provider == p)
            .unwrap()
    };
    assert_eq!(
        sweep("steady").knee.as_ref().map(|k| k.concurrency),
        Some(8),
        "{:#?}",
        sweep("steady")
    );
    let budget_knee = sweep("budget").knee.as_ref().map(|k| k.concurrency);
    assert!(matches!(budget_knee, Some(4 | 8)), "{:#?}", sweep("budget"));
    for p in ["steady", "budget"] {
        let r = sweep(p);
        let k = r.knee.as_ref().unwrap().step;
        assert!(r.steps[..=k].iter().all(|st| st.requests >= 30), "{r:#?}");
    }
    // The open loop: every provider's arrivals were sent, and the three agents started
    // together.
    // One open-loop row per region and ALL, provider and rate scenario (open-loop, ctx.1k,
    // ctx.8k).
    assert_eq!(s.rates.len(), 4 * 11 * 3);
    for r in s
        .rates
        .iter()
        .filter(|r| r.region == "ALL" && r.scenario == "open-loop")
    {
        assert_eq!(r.sent, r.scheduled * r.agents, "{r:#?}");
        assert_eq!(r.dropped, 0, "{r:#?}");
        // One arrival sequence: every provider offered the same load (it was 2.3 vs 5.7
        // requests/s when each had its own Poisson process).
        assert_eq!(r.scheduled, s.rates[0].scheduled, "{r:#?}");
        assert_eq!(r.scenario, s.rates[0].scenario, "{r:#?}");
    }
    // `budget` serves 8 requests at once over the three regions, each over a second: 12
    // arrivals/s queue up, its TTFT climbs over the phase, and it is reported saturated (it
    // said "no" with a TTFT P50 of 6.5 s when only the agents' schedule was judged).
    let budget = s
        .rates
        .iter()
        .find(|r| r.region == "ALL" && r.provider == "budget" && r.scenario == "open-loop")
        .unwrap();
    assert!(budget.provider_saturated, "{budget:#?}");
    assert_eq!(s.start.agents.len(), 3);
    assert!(
        s.start.skew_us.is_some_and(|us| us < 5_000),
        "{:?}",
        s.start
    );
    let cell =
        |r: &str, p: &str, sc: &str| s.cell(r, p, sc).unwrap_or_else(|| panic!("{r} {p} {sc}"));

    for region in &s.regions {
        for p in [
            "fast-lane",
            "steady",
            "reasoner",
            "keepalive",
            "bulk-chunk",
            "fast-lane-anthropic",
            "reasoner-responses",
        ] {
            let c = cell(region, p, "chat-short");
            assert_eq!(c.attempts, 6, "{region} {p}");
            assert_eq!(c.samples, 6, "{region} {p}: {:?}", c.outcomes);
        }
    }
    // fast-lane lives in us-east: from ap-southeast its TTFT carries ~110 ms more network delay.
    let near = cell("us-east", "fast-lane", "chat-short")
        .ttft
        .unwrap()
        .p50_ms;
    let far = cell("ap-southeast", "fast-lane", "chat-short")
        .ttft
        .unwrap()
        .p50_ms;
    assert!(
        far - near > 60.0,
        "us-east {near} ms vs ap-southeast {far} ms"
    );
    // The reasoner's visible content comes after its reasoning, on Chat Completions and on
    // the Responses API (reasoning summary deltas, then output text deltas).
    for p in ["reasoner", "reasoner-responses"] {
        let r = cell("ALL", p, "chat-short");
        assert!(
            r.ttfc.unwrap().p50_ms > r.ttft.unwrap().p50_ms + 50.0,
            "{p}: {r:?}"
        );
    }
    // Over the Anthropic API, fast-lane's answer has no thinking: its first token is content.
    let a = cell("ALL", "fast-lane-anthropic", "chat-short");
    assert_eq!(a.ttfc.unwrap().p50_ms, a.ttft.unwrap().p50_ms, "{a:?}");
    // Throttling shows up as throttled attempts, not as latency samples.
    let t = cell("ALL", "throttler", "chat-short");
    assert!(t.throttled_pct > 0.0, "{t:?}");
    assert_eq!(
        t.samples + t.outcomes.get("throttled").copied().unwrap_or(0),
        t.attempts
    );
    // Long inputs cost slow-prefill much more time to first token than short ones.
    let short = cell("ALL", "slow-prefill", "chat-short")
        .ttft
        .unwrap()
        .p50_ms;
    let long = cell("ALL", "slow-prefill", "long-input")
        .ttft
        .unwrap()
        .p50_ms;
    assert!(long > short + 300.0, "short {short} ms, long {long} ms");
    // ALL merges the regions' histograms: its sample count is their sum.
    let all = cell("ALL", "fast-lane", "long-input");
    let sum: u64 = s
        .regions
        .iter()
        .map(|r| cell(r, "fast-lane", "long-input").samples)
        .sum();
    assert_eq!(all.samples, sum);

    check_workloads(s);
    check_beyond_latency(&data);

    // The matrix rebuilt from ClickHouse equals the one the coordinator merged in memory.
    if let Some(store) = store {
        let client = latmesh_store::client(&store.url);
        let rows = latmesh_store::matrix(&client, &db, &s.campaign_id, None)
            .await
            .unwrap();
        assert_eq!(rows.len(), s.cells.len());
        for row in rows {
            let stored = row.to_cell();
            let mem = cell(&stored.region, &stored.provider, &stored.scenario);
            assert_eq!(
                (stored.attempts, stored.samples),
                (mem.attempts, mem.samples)
            );
            assert_eq!(
                (stored.ttft, stored.e2e, stored.tpot_p50_ms),
                (mem.ttft, mem.e2e, mem.tpot_p50_ms)
            );
        }
    }
}

/// The SLO on the open loop and the long-context tiers (examples/demo.toml `open-loop`,
/// `ctx`): goodput in the cells, with `budget`'s growing queue costing it goodput that
/// `fast-lane` keeps; per provider and region a tier row for 1k and 8k, `slow-prefill`'s TTFT
/// (600 µs per prompt token) seconds longer at 8k and its goodput there nil; the first arrival
/// of each agent a warm-up, left out; and the terminal output shows both tables.
fn check_workloads(s: &latmesh_results::summary::Summary) {
    let cell =
        |r: &str, p: &str, sc: &str| s.cell(r, p, sc).unwrap_or_else(|| panic!("{r} {p} {sc}"));
    let goodput = |r: &str, p: &str, sc: &str| {
        cell(r, p, sc)
            .goodput
            .clone()
            .unwrap_or_else(|| panic!("{r} {p} {sc}: no goodput"))
    };
    let fast = goodput("ALL", "fast-lane", "open-loop");
    assert!(fast.requests >= 20, "{fast:#?}");
    assert_eq!(fast.meets, Some(true), "{fast:#?}");
    let budget = goodput("ALL", "budget", "open-loop");
    assert!(
        budget.pct < fast.pct,
        "budget {budget:#?} vs fast-lane {fast:#?}"
    );
    // No SLO on the rounds scenarios: no goodput there.
    assert!(cell("ALL", "fast-lane", "chat-short").goodput.is_none());

    for region in s.regions.iter().map(String::as_str).chain(["ALL"]) {
        let agents: u64 = if region == "ALL" { 3 } else { 1 };
        for p in &s.providers {
            for tier in [1000u32, 8000] {
                let row = s
                    .tiers
                    .iter()
                    .find(|t| t.region == region && &t.provider == p && t.input_tokens == tier)
                    .unwrap_or_else(|| panic!("no tier row {region} {p} {tier}"));
                assert_eq!(row.group, "ctx", "{row:#?}");
                let c = cell(region, p, &row.scenario);
                // 8 constant arrivals per agent, the first a warm-up.
                assert_eq!(c.warmup, agents, "{region} {p} {tier}: {c:#?}");
                assert!(c.goodput.is_some(), "{region} {p} {tier}");
            }
        }
    }
    let tier = |p: &str, t: u32| {
        s.tiers
            .iter()
            .find(|r| r.region == "ALL" && r.provider == p && r.input_tokens == t)
            .unwrap()
    };
    // Phase hygiene: `budget`'s queue from the open loop has drained before ctx.1k starts
    // (the 10 s drain allowance), so its TTFT grows with the prompt, as every provider's does.
    let ttft_p50 = |p: &str, t: u32| tier(p, t).ttft.as_ref().map(|q| q.p50_ms);
    let (b1, b8) = (ttft_p50("budget", 1000), ttft_p50("budget", 8000));
    assert!(
        b1.zip(b8).is_some_and(|(a, b)| a < b),
        "budget TTFT P50 1k {b1:?} ms, 8k {b8:?} ms: {:#?}",
        cell("ALL", "budget", "ctx.1k")
    );
    let (short, long) = (tier("slow-prefill", 1000), tier("slow-prefill", 8000));
    assert_eq!(
        (short.samples, long.samples),
        (21, 21),
        "{short:#?} {long:#?}"
    );
    let p50 = |r: &latmesh_results::tiers::TierRow| r.ttft.as_ref().unwrap().p50_ms;
    // 7,000 more prompt tokens at 600 µs each: 4.2 s.
    assert!(
        p50(long) - p50(short) > 3_000.0,
        "slow-prefill TTFT 1k {} ms, 8k {} ms",
        p50(short),
        p50(long)
    );
    let g = long.goodput.as_ref().unwrap();
    assert_eq!((g.requests, g.met, g.meets), (21, 0, Some(false)), "{g:#?}");
    assert!(tier("fast-lane", 8000).goodput.as_ref().unwrap().pct > 90.0);
    // Every provider's billed prompt tokens: the token-count line.
    assert_eq!(
        s.token_counts.len(),
        s.providers.len(),
        "{:#?}",
        s.token_counts
    );
    // What `latmesh demo` prints: the goodput tables and the tiers.
    let text = latmesh_cli::ui::matrix::render(s);
    for want in [
        "open-loop: goodput",
        "ctx.8k: goodput",
        "context tiers ctx",
        "slow-prefill",
    ] {
        assert!(
            text.contains(want),
            "no {want:?} in the demo's output:\n{text}"
        );
    }
}

/// The compatibility phase (examples/demo.toml `[compat]`, `[quality]`): every provider has a
/// verdict for every check and quality samples; each verdict is the one the simulator's
/// ground truth says for that profile and API (`latmesh_sim::compat_truth`: `bulk-chunk`
/// ignores JSON mode, `keepalive` refuses tools, `fast-lane` sends a `system_fingerprint` and
/// caches prompts, the reasoners need their reasoning sent back, no profile checks keys),
/// `inconclusive` allowed only on the profiles that throttle or break answers; `budget`
/// answers like a cheaper quantization (flagged, and the only one); and the selection matrix
/// ranks with the measured quality and compatibility.
fn check_beyond_latency(data: &latmesh_results::report_data::ReportData) {
    let s = &data.summary;
    let c = &data.compat;
    let checked: Vec<&str> = c.compat.iter().map(|p| p.provider.as_str()).collect();
    assert_eq!(checked, s.providers, "{c:#?}");
    let profiles = latmesh_sim::all_builtin_profiles();
    for spec in &data.plan.providers {
        // `http://ADDR/PROFILE/v1`
        let name = spec.base_url.trim_end_matches("/v1").rsplit('/').next();
        let profile = profiles
            .iter()
            .find(|p| Some(p.name.as_str()) == name)
            .unwrap_or_else(|| panic!("{}: no profile", spec.base_url));
        let faulty = profile.throttle_prob
            + profile.truncate_prob
            + profile.stream_error_prob
            + profile.overload_prob
            > 0.0;
        let got = c.compat.iter().find(|p| p.provider == spec.name).unwrap();
        assert_eq!(got.results.len(), CompatCheck::ALL.len(), "{got:#?}");
        assert!(got.score.is_some(), "{got:#?}");
        let want =
            latmesh_sim::compat_truth::expected_verdicts(profile, spec.request.api, &spec.model_id);
        for (check, verdict) in want {
            let r = got.results.iter().find(|r| r.check == check).unwrap();
            assert!(
                r.verdict == verdict || (faulty && r.verdict == Verdict::Inconclusive),
                "{} {check}: {:?}, the simulator says {verdict:?} ({:?})",
                spec.name,
                r.verdict,
                r.evidence
            );
        }
    }
    let q = c.quality.as_ref().expect("quality parity");
    let sampled: Vec<&str> = q.providers.iter().map(|p| p.provider.as_str()).collect();
    assert_eq!(sampled, s.providers);
    let flagged: Vec<&str> = q
        .providers
        .iter()
        .filter(|p| p.flag.is_some())
        .map(|p| p.provider.as_str())
        .collect();
    assert_eq!(flagged, ["budget"], "{q:#?}");
    let budget = q.providers.iter().find(|p| p.provider == "budget").unwrap();
    assert!(budget.accuracy.unwrap() < 0.9, "{budget:#?}");
    assert!(budget.length_ratio.unwrap() < 1.0, "{budget:#?}");
    // The selection matrix takes quality and compatibility from the measurement (the demo
    // types compliance scores only).
    let analysis = latmesh_results::analysis::analyze(data);
    let table = analysis
        .selection
        .iter()
        .find(|t| t.scenario == "chat-short" && t.region == "ALL")
        .expect("the demo's selection matrix");
    let measured = c.measured();
    for row in &table.rows {
        let m = &measured[&row.provider];
        assert_eq!(row.quality.score, m.quality, "{row:#?}");
        assert_eq!(row.compatibility.score, m.compatibility, "{row:#?}");
        assert!(row.quality.text.contains("measured"), "{row:#?}");
    }
    check_selection_gates(data, &analysis.selection);
}

/// Gates before scores, in every selection table of the demo: a provider whose failure rate
/// is at or above 10 % of its requests, or whose cell missed the scenario's SLO, never ranks
/// above one failing none (and not missing the SLO); it is excluded with its reason or ranked
/// in a later group. The JSON summary carries compat, quality and every scenario × region.
fn check_selection_gates(
    data: &latmesh_results::report_data::ReportData,
    tables: &[latmesh_results::analysis::SelectionTable],
) {
    use latmesh_results::slo_stats::GoodputVerdict;
    let s = &data.summary;
    let bad = |region: &str, provider: &str, scenario: &str| {
        let c = s.cell(region, provider, scenario).unwrap();
        c.request_error_pct >= 10.0
            || c.goodput
                .as_ref()
                .is_some_and(|g| g.verdict() == GoodputVerdict::Missed)
    };
    // Failing none, and meeting the SLO as far as its requests show (goodput at or above
    // the target).
    let clean = |region: &str, provider: &str, scenario: &str| {
        let c = s.cell(region, provider, scenario).unwrap();
        let target = data
            .plan
            .scenarios
            .iter()
            .find(|sc| sc.name == scenario)
            .and_then(|sc| sc.slo.as_ref())
            .map_or(0.0, |o| o.goodput_pct);
        c.request_error_pct == 0.0 && c.goodput.as_ref().is_none_or(|g| g.pct >= target)
    };
    for t in tables {
        for x in &t.excluded {
            assert!(!x.reasons().is_empty(), "{x:#?}");
        }
        for (i, a) in t.rows.iter().enumerate() {
            if !bad(&t.region, &a.provider, &t.scenario) {
                continue;
            }
            for b in &t.rows[i + 1..] {
                assert!(
                    !clean(&t.region, &b.provider, &t.scenario),
                    "{} · {}: {} (failing) ranks above {} (clean)\n{t:#?}",
                    t.scenario,
                    t.region,
                    a.provider,
                    b.provider
                );
            }
        }
    }
    // `flaky` is out of chat-short over all regions, with its failure rate as the reason.
    let all = tables
        .iter()
        .find(|t| t.scenario == "chat-short" && t.region == "ALL")
        .unwrap();
    let flaky = all.excluded.iter().find(|x| x.provider == "flaky");
    assert!(
        flaky.is_some_and(|x| x.reasons().starts_with("failure rate failed")),
        "{all:#?}"
    );
    // Every scenario × region (and ALL) with cells has a table, and the JSON has them all.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo-summary.json");
    latmesh_cli::cmd::demo::write_demo_json(data, tables, &path).unwrap();
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(j["campaign_id"], s.campaign_id.as_str());
    assert_eq!(j["compat"].as_array().unwrap().len(), s.providers.len());
    assert!(j["quality"]["providers"].is_array(), "{}", j["quality"]);
    let mut keys: Vec<(String, String)> = j["selection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["scenario"].as_str().unwrap().to_string(),
                t["region"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    keys.sort();
    let mut want: Vec<(String, String)> = s
        .scenarios
        .iter()
        .flat_map(|sc| {
            s.regions
                .iter()
                .map(String::as_str)
                .chain(["ALL"])
                .map(move |r| (sc.clone(), r.to_string()))
        })
        .collect();
    want.sort();
    assert_eq!(keys, want);
    // The summary's own fields still read back as a summary.
    let back: latmesh_results::summary::Summary = serde_json::from_value(j).unwrap();
    assert_eq!(back.cells.len(), s.cells.len());
}
