//! Long-context tiers against a real server: `examples/real-context.toml` sends generated
//! prompts of 128, 512 and 2,048 words to llama.cpp's llama-server (SmolLM2-135M, context
//! 4096 over 2 slots: 2,048 tokens per request) through the whole distributed path, one
//! request at a time (docs/real-servers.md "Long-context tiers").
//!
//! What a real tokenizer says about the generator's one-token-per-word design is measured, not
//! assumed: llama-server's `usage.prompt_tokens` per tier give the token-count line (tokens per
//! generated word, the chat template's tokens), and the 2,048 tier, past the slot's context
//! once the template is added, is refused and counted as such.

use std::process::Command;
use std::time::Duration;

use latmesh_results::summary::Summary;
use latmesh_testkit::{bin, spawn, spawn_until_line};

/// Rounds of the campaign: each tier is sent twice.
const ROUNDS: u64 = 2;

/// A coordinator on loopback and agent `id` in us-east that exits after `campaigns`
/// campaigns (logs in `dir`): the processes (killed when dropped) and the coordinator's URL.
fn coordinator_and_agent(
    dir: &std::path::Path,
    id: &str,
    campaigns: u32,
) -> (Vec<latmesh_testkit::Proc>, String) {
    let mut coord = Command::new(bin("latmesh"));
    coord.args(["serve", "--listen", "127.0.0.1:0"]);
    let (coord, url) = spawn_until_line(
        "latmesh serve",
        coord,
        "listening on ",
        Duration::from_secs(20),
        &dir.join("coord.log"),
    );
    let mut a = Command::new(bin("latmesh-agent"));
    a.args(["--coordinator", &url, "--region", "us-east"])
        .args(["--agent-id", id, "--exit-after", &campaigns.to_string()]);
    let agent = spawn("us-east", a, &dir.join("us-east.log"));
    (vec![coord, agent], url)
}

#[test]
fn context_tiers_against_llama_server() {
    let _servers = latmesh_testkit::real_servers::ensure();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, url) = coordinator_and_agent(dir.path(), "us-east-ctx", 1);
    let example =
        std::fs::read_to_string(latmesh_testkit::repo().join("examples/real-context.toml"))
            .unwrap();
    let (s, _) = run_campaign(dir.path(), &url, &example);
    assert_eq!(s.providers, ["llama-cpp"]);

    let row = |region: &str, tier: u32| {
        s.tiers
            .iter()
            .find(|t| t.region == region && t.provider == "llama-cpp" && t.input_tokens == tier)
            .unwrap_or_else(|| panic!("no tier row {region} {tier}: {:#?}", s.tiers))
    };
    for region in ["us-east", "ALL"] {
        let n = ROUNDS;
        // The tiers that fit: every request answered, billed at the tier plus the template.
        for tier in [128, 512] {
            let r = row(region, tier);
            assert_eq!((r.group.as_str(), r.samples), ("ctx", n), "{r:#?}");
            assert_eq!((r.error_pct, r.context_refused), (0.0, 0), "{r:#?}");
            let billed = r
                .billed_prompt_tokens_mean
                .expect("llama-server reports usage");
            // SmolLM2's tokenizer: one token per generated word, plus its chat template
            // (30 tokens measured); generous bounds, the exact figures are the line's.
            assert!(
                billed >= f64::from(tier) && billed <= f64::from(tier) * 1.2 + 64.0,
                "{region} {tier}: billed {billed}"
            );
            assert!(r.prefill_tps_p50.is_some_and(|t| t > 0.0), "{r:#?}");
            assert!(r.ttst_p50_ms.is_some(), "{r:#?}");
            let c = s.cell(region, "llama-cpp", &r.scenario).unwrap();
            // ignore_eos: the 32 tokens asked for, every time.
            assert_eq!(c.output_tokens_mean, Some(32.0), "{c:#?}");
        }
        // Four times the prompt: a longer prefill on the same thread.
        let (short, long) = (row(region, 128), row(region, 512));
        let p50 = |r: &latmesh_results::tiers::TierRow| r.ttft.as_ref().unwrap().p50_ms;
        assert!(
            p50(long) > p50(short),
            "{region}: TTFT 512 {} ms vs 128 {} ms",
            p50(long),
            p50(short)
        );
        // Past the slot's 2,048 tokens with the template: refused, and said so.
        let big = row(region, 2048);
        assert_eq!((big.samples, big.context_refused), (0, n), "{big:#?}");
        assert_eq!(big.error_pct, 100.0, "{big:#?}");
    }
    // The token-count line: how llama-server counts the generated words.
    let line = s
        .token_counts
        .iter()
        .find(|t| t.provider == "llama-cpp")
        .unwrap_or_else(|| panic!("{:#?}", s.token_counts));
    let per_word = line.tokens_per_word.unwrap();
    let overhead = line.overhead_tokens.unwrap();
    eprintln!("llama-server: {}", line.note);
    for t in s.tiers.iter().filter(|t| t.region == "ALL") {
        eprintln!(
            "tier {}: TTFT P50 {:?} ms, prefill {:?} tokens/s, billed {:?}, refused {}",
            t.input_tokens,
            t.ttft.as_ref().map(|p| p.p50_ms),
            t.prefill_tps_p50,
            t.billed_prompt_tokens_mean,
            t.context_refused
        );
    }
    assert!((0.9..=1.1).contains(&per_word), "{line:#?}");
    assert!((0.0..=100.0).contains(&overhead), "{line:#?}");
    assert!(!line.counts_differently, "{line:#?}");
    assert!(line.note.contains("llama-cpp"), "{line:#?}");
}

/// Runs `toml` (written to `dir`) on the coordinator at `url` and returns its summary.
fn run_campaign(dir: &std::path::Path, url: &str, toml: &str) -> (Summary, String) {
    let file = dir.join("campaign.toml");
    std::fs::write(&file, toml).unwrap();
    let json = dir.join("summary.json");
    let _ = std::fs::remove_file(&json);
    let out = Command::new(bin("latmesh"))
        .args(["campaign", "launch"])
        .arg(&file)
        .args(["--coordinator", url, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "launch failed: {text}");
    let s: Summary = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(s.complete, "{text}");
    (s, text)
}

/// The rerun: the same campaign twice, two minutes apart at most, measured
/// llama-server's prompt cache (TTFT 727 ms → 32 ms at 128 words). With fresh text (the
/// default) the second run's TTFT by tier stays the first's within noise and its cached share
/// stays low; with `reuse_text = true` the second run is served from the cache and its cached
/// share says so.
#[test]
fn a_rerun_measures_prefill_and_reuse_text_shows_the_cache() {
    let _servers = latmesh_testkit::real_servers::ensure();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, url) = coordinator_and_agent(dir.path(), "us-east-rerun", 4);
    // examples/real-context.toml without the refused tier, in less time: 2 tiers × 2 rounds.
    let example =
        std::fs::read_to_string(latmesh_testkit::repo().join("examples/real-context.toml"))
            .unwrap();
    let fresh = example
        .replace(
            "input_tokens = [128, 512, 2048]",
            "input_tokens = [128, 512]",
        )
        .replace("interval_s = 30.0", "interval_s = 16.0")
        .replace("gap_ms = 10000", "gap_ms = 8000")
        .replace(
            "http://127.0.0.1:18081/v1",
            latmesh_testkit::real_servers::LLAMA_BASE_URL,
        );
    assert!(fresh.contains("input_tokens = [128, 512]\n"), "{fresh}");
    let reuse = fresh.replace(
        "input_tokens = [128, 512]\n",
        "input_tokens = [128, 512]\nreuse_text = true\n",
    );
    let runs: Vec<(Summary, String)> = [&fresh, &fresh, &reuse, &reuse]
        .into_iter()
        .map(|toml| run_campaign(dir.path(), &url, toml))
        .collect();
    let tier = |s: &Summary, n: u32| {
        s.tiers
            .iter()
            .find(|t| t.region == "ALL" && t.input_tokens == n)
            .cloned()
            .unwrap_or_else(|| panic!("no tier {n}: {:#?}", s.tiers))
    };
    for n in [128, 512] {
        let rows: Vec<_> = runs.iter().map(|(s, _)| tier(s, n)).collect();
        for (i, r) in rows.iter().enumerate() {
            eprintln!(
                "run {} tier {n}: TTFT P50 {:?} ms, cached share {:?}",
                i + 1,
                r.ttft.as_ref().map(|p| p.p50_ms),
                r.cached_share
                    .as_ref()
                    .map(|c| (c.share_pct, c.hot_requests, c.requests))
            );
        }
        let p50 = |i: usize| rows[i].ttft.as_ref().unwrap().p50_ms;
        let share = |i: usize| {
            rows[i]
                .cached_share
                .clone()
                .expect("llama-server reports cached_tokens")
        };
        // Fresh text: the rerun is not cache-hot (the collapse was 20-90x); llama-server's
        // slot cache may still hold the chat template's first tokens.
        assert!(
            p50(1) > p50(0) / 3.0,
            "{n}: rerun TTFT {} ms vs {} ms",
            p50(1),
            p50(0)
        );
        for i in [0, 1] {
            assert!(
                share(i).share_pct < 20.0,
                "{n} run {}: {:?}",
                i + 1,
                share(i)
            );
            assert_eq!(share(i).hot_requests, 0, "{n} run {}", i + 1);
        }
        // reuse_text: the second reuse run's words are the first's, served from the cache.
        let hot = share(3);
        assert!(hot.share_pct >= 50.0, "{n}: reuse rerun {hot:?}");
        assert_eq!(hot.asked_by.as_deref(), Some("reuse_text"));
        assert!(!hot.flagged);
    }
    for (i, mode) in ["fresh", "fresh", "reuse", "reuse"].iter().enumerate() {
        assert_eq!(runs[i].0.generated_text["ctx"].as_str(), *mode);
        assert!(
            runs[i]
                .1
                .contains(&format!("generated prompts: ctx: {mode}")),
            "{}",
            runs[i].1
        );
    }
}
