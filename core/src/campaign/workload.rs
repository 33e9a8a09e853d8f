//! What a scenario sends and how it is judged: generated prompts (`input_tokens`,
//! `shared_prefix_tokens`), the output length (`output_tokens`, `max_tokens`), `warmup` and
//! `slo` (see [`crate::synth`] and [`crate::slo`]).
//!
//! A scenario names prompts of the prompt set (`prompt_ids`) or asks for generated prompts of
//! exact lengths (`input_tokens`), never both. Generated prompts are single-turn, without
//! `follow_ups` or `cache_nonce` (each request's text already differs right after the shared
//! prefix, and each run draws new words unless `reuse_text = true`, see
//! [`crate::synth::run_salt`]). A list of tiers becomes one plan scenario per tier, named `{name}.{tier}`
//! ([`crate::synth::tier_label`]).

use super::error::{CampaignError, invalid};
use super::file::ScenarioSection;
use crate::metrics::Metric;
use crate::slo::{DEFAULT_GOODPUT_PCT, PercentileBound, Slo};
use crate::synth::{HEADER_WORDS, MAX_INPUT_TOKENS, MIN_INPUT_TOKENS};

/// Largest `max_tokens` and `output_tokens`.
const MAX_OUTPUT_TOKENS: u32 = 1_000_000;

/// Most warm-up requests per provider.
const MAX_WARMUP: u32 = 10_000;

/// Most tiers of one scenario.
const MAX_TIERS: usize = 16;

/// The workload keys of one scenario, validated.
#[derive(Debug)]
pub(super) struct Workload {
    /// `input_tokens` tiers, strictly increasing; empty: prompts of the prompt set.
    pub tiers: Vec<u32>,
    /// `shared_prefix_tokens` (0 without `input_tokens`).
    pub shared_prefix_tokens: u32,
    /// `reuse_text` (false without `input_tokens`).
    pub reuse_text: bool,
    /// The `max_tokens` sent: `output_tokens` when given, else `max_tokens`.
    pub max_tokens: u32,
    /// `output_tokens`.
    pub output_tokens: Option<u32>,
    /// `warmup`.
    pub warmup: u32,
    /// `slo`.
    pub slo: Option<Slo>,
}

impl Workload {
    /// How many plan scenarios the file scenario becomes: one per tier, else one.
    pub fn plan_scenarios(&self) -> usize {
        self.tiers.len().max(1)
    }
}

/// The workload keys of `scenarios[i]`.
pub(super) fn validate_workload(i: usize, s: &ScenarioSection) -> Result<Workload, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    let tiers = match &s.input_tokens {
        None => Vec::new(),
        Some(v) => check_tiers(&key("input_tokens"), v)?,
    };
    match (&s.prompt_ids, tiers.is_empty()) {
        (Some(_), false) => {
            return Err(invalid(
                key("prompt_ids"),
                "given with input_tokens: a scenario sends prompts of the prompt set (prompt_ids) or generated prompts (input_tokens), not both",
            ));
        }
        (None, true) => {
            return Err(invalid(
                key("prompt_ids"),
                "missing: name prompt ids, or input_tokens for generated prompts",
            ));
        }
        _ => {}
    }
    if !tiers.is_empty() {
        if s.turns > 1 {
            return Err(invalid(
                key("turns"),
                format!(
                    "{}: generated prompts (input_tokens) are single-turn: leave turns out",
                    s.turns
                ),
            ));
        }
        if s.follow_ups.is_some() {
            return Err(invalid(
                key("follow_ups"),
                "generated prompts (input_tokens) are single-turn: leave follow_ups out",
            ));
        }
        if s.cache_nonce {
            return Err(invalid(
                key("cache_nonce"),
                "generated prompts (input_tokens) are unique per request already, and new in every run unless reuse_text = true: leave cache_nonce out",
            ));
        }
    }
    let shared_prefix_tokens = match (s.shared_prefix_tokens, tiers.first()) {
        (None, _) => 0,
        (Some(_), None) => {
            return Err(invalid(
                key("shared_prefix_tokens"),
                "applies to generated prompts only: give input_tokens, or leave it out",
            ));
        }
        (Some(m), Some(&smallest)) => {
            let most = smallest - 2 * HEADER_WORDS;
            if m > most {
                return Err(invalid(
                    key("shared_prefix_tokens"),
                    format!(
                        "{m} is more than {most}: the smallest tier ({smallest}) needs {} words of its own after the shared prefix",
                        2 * HEADER_WORDS
                    ),
                ));
            }
            m
        }
    };
    if s.reuse_text.is_some() && tiers.is_empty() {
        return Err(invalid(
            key("reuse_text"),
            "applies to generated prompts only (input_tokens): prompts of the prompt set are the same in every run already (cache_nonce makes them differ)",
        ));
    }
    let reuse_text = s.reuse_text.unwrap_or(false);
    if let Some(n) = s.output_tokens
        && !(1..=MAX_OUTPUT_TOKENS).contains(&n)
    {
        return Err(invalid(
            key("output_tokens"),
            format!("{n} is not in 1..={MAX_OUTPUT_TOKENS}"),
        ));
    }
    let max_tokens = match (s.max_tokens, s.output_tokens) {
        (None, None) => {
            return Err(invalid(
                format!("scenarios[{i}]"),
                "missing field `max_tokens` (or output_tokens, which sets it)",
            ));
        }
        (Some(m), Some(o)) if m != o => {
            return Err(invalid(
                key("max_tokens"),
                format!(
                    "{m} differs from output_tokens ({o}), which sets max_tokens: give one of them, or the same number"
                ),
            ));
        }
        (_, Some(o)) => o,
        (Some(m), None) => {
            if !(1..=MAX_OUTPUT_TOKENS).contains(&m) {
                return Err(invalid(
                    key("max_tokens"),
                    format!("{m} is not in 1..={MAX_OUTPUT_TOKENS}"),
                ));
            }
            m
        }
    };
    let warmup = s.warmup.unwrap_or(0);
    if warmup > MAX_WARMUP {
        return Err(invalid(
            key("warmup"),
            format!("{warmup} is not in 0..={MAX_WARMUP}"),
        ));
    }
    let slo = match &s.slo {
        None => None,
        Some(map) => Some(check_slo(&key("slo"), map)?),
    };
    if let Some(slo) = &slo
        && !s.stream
    {
        let tpot = slo.tpot_ms.map(|_| "tpot_ms".to_string()).or_else(|| {
            slo.percentiles
                .iter()
                .find(|b| b.metric == Metric::Tpot)
                .map(|b| format!("tpot_p{}_ms", b.percentile))
        });
        if let Some(name) = tpot {
            return Err(invalid(
                format!("scenarios[{i}].slo.{name}"),
                "a non-streamed answer arrives at once, so its TPOT says nothing: set stream = true, or bound ttft/e2e only",
            ));
        }
    }
    Ok(Workload {
        tiers,
        shared_prefix_tokens,
        reuse_text,
        max_tokens,
        output_tokens: s.output_tokens,
        warmup,
        slo,
    })
}

/// `input_tokens`: a whole number or a list of them, each in
/// `MIN_INPUT_TOKENS..=MAX_INPUT_TOKENS`, strictly increasing.
fn check_tiers(key: &str, v: &serde_json::Value) -> Result<Vec<u32>, CampaignError> {
    let one = |key: String, v: &serde_json::Value| -> Result<u32, CampaignError> {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (MIN_INPUT_TOKENS..=MAX_INPUT_TOKENS).contains(n))
            .ok_or_else(|| {
                invalid(
                    key,
                    format!(
                        "{v} is not a whole number of tokens in {MIN_INPUT_TOKENS}..={MAX_INPUT_TOKENS}"
                    ),
                )
            })
    };
    let tiers = match v {
        serde_json::Value::Array(items) => {
            if items.is_empty() || items.len() > MAX_TIERS {
                return Err(invalid(
                    key,
                    format!("name 1..={MAX_TIERS} tiers, e.g. [1000, 8000, 32000]"),
                ));
            }
            let mut tiers = Vec::with_capacity(items.len());
            for (j, item) in items.iter().enumerate() {
                let k = format!("{key}[{j}]");
                let n = one(k.clone(), item)?;
                if let Some(&before) = tiers.last()
                    && n <= before
                {
                    return Err(invalid(
                        k,
                        format!(
                            "{n} is not above the tier before ({before}): list tiers in increasing order, each once"
                        ),
                    ));
                }
                tiers.push(n);
            }
            tiers
        }
        serde_json::Value::Number(_) => vec![one(key.to_string(), v)?],
        other => {
            return Err(invalid(
                key,
                format!("{other} is not a number of tokens or a list of them (tiers)"),
            ));
        }
    };
    Ok(tiers)
}

/// What `slo` accepts, for errors.
const SLO_KEYS: &str = "ttft_ms, tpot_ms, e2e_ms (per request), {ttft|tpot|e2e}_p{percentile}_ms such as ttft_p95_ms or \"e2e_p99.9_ms\" (a percentile bound; quote a key with a dot), goodput_pct";

/// `slo = { … }` into a [`Slo`] (keys in [`SLO_KEYS`]; at least one).
fn check_slo(
    key: &str,
    map: &serde_json::Map<String, serde_json::Value>,
) -> Result<Slo, CampaignError> {
    if map.is_empty() {
        return Err(invalid(
            key,
            format!("is empty: give at least one of {SLO_KEYS}"),
        ));
    }
    let mut slo = Slo {
        ttft_ms: None,
        tpot_ms: None,
        e2e_ms: None,
        percentiles: Vec::new(),
        goodput_pct: DEFAULT_GOODPUT_PCT,
    };
    for (name, v) in map {
        let k = format!("{key}.{name}");
        let number = |what: &str| -> Result<f64, CampaignError> {
            match v {
                serde_json::Value::Number(n) => n
                    .as_f64()
                    .ok_or_else(|| invalid(&k, format!("{n} is not {what}"))),
                other => Err(invalid(&k, format!("{other} is not {what}"))),
            }
        };
        if v.is_object() {
            return Err(invalid(
                k,
                "is a table, not a number of milliseconds (a key with a dot, such as \"ttft_p99.9_ms\", is written quoted)",
            ));
        }
        if name == "goodput_pct" {
            let pct = number("a percentage")?;
            if !(pct > 0.0 && pct <= 100.0) {
                return Err(invalid(k, format!("{pct} is not in (0, 100]")));
            }
            slo.goodput_pct = pct;
            continue;
        }
        let Some((metric, percentile)) = parse_slo_key(name) else {
            return Err(invalid(
                k,
                format!("is not an SLO key; the keys are {SLO_KEYS}"),
            ));
        };
        let ms = number("a number of milliseconds")?;
        if !(ms.is_finite() && ms > 0.0) {
            return Err(invalid(k, format!("{ms} is not a number of ms above 0")));
        }
        // Latencies are kept up to 1 h (the histograms' range): a bound past it judges nothing.
        let max_ms = crate::hist::HIGHEST_US as f64 / 1000.0;
        if ms > max_ms {
            return Err(invalid(
                k,
                format!(
                    "{ms} ms is longer than the {max_ms} ms (1 h) latencies are measured up to"
                ),
            ));
        }
        match percentile {
            None => match metric {
                Metric::Ttft => slo.ttft_ms = Some(ms),
                Metric::Tpot => slo.tpot_ms = Some(ms),
                _ => slo.e2e_ms = Some(ms),
            },
            Some(p) => {
                if let Some(same) = slo
                    .percentiles
                    .iter()
                    .find(|b| b.metric == metric && b.percentile == p)
                {
                    return Err(invalid(
                        k,
                        format!(
                            "bounds P{p} {metric} a second time (also {} ms): give it once",
                            same.ms
                        ),
                    ));
                }
                slo.percentiles.push(PercentileBound {
                    metric,
                    percentile: p,
                    ms,
                });
            }
        }
    }
    Ok(slo)
}

/// `ttft_ms` → (TTFT, None); `e2e_p99.9_ms` → (E2E, Some(99.9)); anything else → None.
fn parse_slo_key(name: &str) -> Option<(Metric, Option<f64>)> {
    let stem = name.strip_suffix("_ms")?;
    let (metric, percentile) = match stem.split_once("_p") {
        None => (stem, None),
        Some((m, p)) => (m, Some(p)),
    };
    let metric = match metric {
        "ttft" => Metric::Ttft,
        "tpot" => Metric::Tpot,
        "e2e" => Metric::E2e,
        _ => return None,
    };
    match percentile {
        None => Some((metric, None)),
        Some(p) => {
            let plain = !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit() || c == '.')
                && !p.starts_with('.')
                && !p.ends_with('.');
            let p: f64 = p.parse().ok().filter(|_| plain)?;
            (p > 0.0 && p < 100.0).then_some((metric, Some(p)))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::load_toml_str;
    use crate::campaign::test_support::{GOOD, err_of};
    use crate::synth::SynthSpec;

    /// GOOD with its scenario's `prompt_ids` line replaced by `keys`.
    fn gen_scenario(keys: &str) -> String {
        GOOD.replace("prompt_ids = [\"short-qa-en-*\"]", keys)
    }

    #[test]
    fn input_tokens_tiers_become_one_plan_scenario_each() {
        let text = gen_scenario(
            "input_tokens = [1000, 8000, 32000]\nshared_prefix_tokens = 500\nwarmup = 2",
        )
        .replace("max_tokens = 32", "output_tokens = 128");
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        let names: Vec<&str> = plan.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["chat.1k", "chat.8k", "chat.32k"]);
        for (s, (tier, label)) in
            plan.scenarios
                .iter()
                .zip([(1000, "1k"), (8000, "8k"), (32_000, "32k")])
        {
            assert_eq!(
                s.synth,
                Some(SynthSpec {
                    group: "chat".into(),
                    input_tokens: tier,
                    shared_prefix_tokens: 500,
                    reuse_text: false,
                })
            );
            assert_eq!(s.group(), "chat");
            assert_eq!(s.prompts.len(), 1);
            assert_eq!(s.prompts[0].id, format!("gen-{label}"));
            assert!(s.prompts[0].messages.is_empty() && s.prompts[0].follow_ups.is_empty());
            assert_eq!(
                (s.max_tokens, s.output_tokens, s.warmup),
                (128, Some(128), 2)
            );
            assert!(s.stream);
            assert_eq!(plan.prompt_for(2, 5).id, "gen-32k");
        }
        // Each tier is a scenario in the rounds: 3 slots per round per provider.
        assert_eq!(plan.slots_per_round(), 3);
        assert!(plan.round_order(0).iter().any(|s| s.scenario == 2));
        // One number is one tier, named like a list of one.
        let plan = load_toml_str(&gen_scenario("input_tokens = 4096"), Path::new(".")).unwrap();
        assert_eq!(plan.scenarios[0].name, "chat.4096");
        assert_eq!(plan.scenarios[0].max_tokens, 32);
        assert_eq!(plan.scenarios[0].output_tokens, None);
        // Fresh words per run by default; reuse_text = true keeps them across runs.
        assert!(
            plan.scenarios
                .iter()
                .all(|s| !s.synth.as_ref().unwrap().reuse_text)
        );
        let reuse = load_toml_str(
            &gen_scenario("input_tokens = [1000, 8000]\nreuse_text = true"),
            Path::new("."),
        )
        .unwrap();
        assert!(
            reuse
                .scenarios
                .iter()
                .all(|s| s.synth.as_ref().unwrap().reuse_text)
        );
        // The plan carries it to the coordinator, which then stamps no salt.
        let mut sent: crate::plan::Plan = serde_json::from_str(&reuse.to_json()).unwrap();
        sent.stamp_text_salt();
        assert_eq!(sent.text_salt, None);
        let spec = sent.scenarios[0].synth.clone().unwrap();
        assert_eq!(sent.text_mode(&spec), crate::synth::TextMode::Reuse);
        let mut fresh = plan.clone();
        fresh.stamp_text_salt();
        assert!(fresh.text_salt.is_some());
        // A prompt-set scenario has none of it.
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        let s = &plan.scenarios[0];
        assert_eq!(
            (&s.synth, s.output_tokens, s.warmup, &s.slo),
            (&None, None, 0, &None)
        );
    }

    #[test]
    fn output_tokens_sets_max_tokens() {
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "output_tokens = 256"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(
            (
                plan.scenarios[0].max_tokens,
                plan.scenarios[0].output_tokens
            ),
            (256, Some(256))
        );
        // The same number twice is fine.
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 64\noutput_tokens = 64"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.scenarios[0].max_tokens, 64);
    }

    #[test]
    fn slo_keys_become_bounds() {
        let text = GOOD.replace(
            "max_tokens = 32",
            "max_tokens = 32\nslo = { ttft_ms = 2000, tpot_ms = 50, e2e_ms = 30000, ttft_p95_ms = 1500, \"e2e_p99.9_ms\" = 40000, goodput_pct = 95 }",
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        let slo = plan.scenarios[0].slo.clone().unwrap();
        assert_eq!(
            (slo.ttft_ms, slo.tpot_ms, slo.e2e_ms, slo.goodput_pct),
            (Some(2000.0), Some(50.0), Some(30_000.0), 95.0)
        );
        let mut bounds: Vec<(Metric, f64, f64)> = slo
            .percentiles
            .iter()
            .map(|b| (b.metric, b.percentile, b.ms))
            .collect();
        bounds.sort_by(|a, b| a.1.total_cmp(&b.1));
        assert_eq!(
            bounds,
            [(Metric::Ttft, 95.0, 1500.0), (Metric::E2e, 99.9, 40_000.0)]
        );
        // goodput_pct defaults to 90.
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 32\nslo = { tpot_ms = 80 }"),
            Path::new("."),
        )
        .unwrap();
        let slo = plan.scenarios[0].slo.clone().unwrap();
        assert_eq!((slo.tpot_ms, slo.goodput_pct), (Some(80.0), 90.0));
        assert!(slo.percentiles.is_empty() && slo.ttft_ms.is_none());
    }

    #[test]
    fn slo_key_forms() {
        assert_eq!(parse_slo_key("ttft_ms"), Some((Metric::Ttft, None)));
        assert_eq!(
            parse_slo_key("tpot_p50_ms"),
            Some((Metric::Tpot, Some(50.0)))
        );
        assert_eq!(
            parse_slo_key("ttft_p99.9_ms"),
            Some((Metric::Ttft, Some(99.9)))
        );
        for bad in [
            "ttf_ms",
            "ttft_p95",
            "ttft_p100_ms",
            "ttft_p0_ms",
            "ttft_p_ms",
            "ttft_p.5_ms",
            "ttft_p-5_ms",
            "ttft_p1e1_ms",
            "itl_ms",
            "ttfc_p50_ms",
        ] {
            assert_eq!(parse_slo_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn workload_refusals_name_the_key() {
        let with =
            |keys: &str| GOOD.replace("max_tokens = 32", &format!("max_tokens = 32\n{keys}"));
        let cases = [
            (
                with("input_tokens = 1000"),
                "scenarios[0].prompt_ids: given with input_tokens",
            ),
            (
                GOOD.replace("prompt_ids = [\"short-qa-en-*\"]\n", ""),
                "scenarios[0].prompt_ids: missing: name prompt ids, or input_tokens for generated prompts",
            ),
            (
                gen_scenario("input_tokens = 1000\nturns = 2"),
                "scenarios[0].turns: 2: generated prompts (input_tokens) are single-turn",
            ),
            (
                gen_scenario("input_tokens = 1000\nfollow_ups = [\"why?\"]"),
                "scenarios[0].follow_ups: generated prompts (input_tokens) are single-turn",
            ),
            (
                gen_scenario("input_tokens = 1000\ncache_nonce = true"),
                "scenarios[0].cache_nonce: generated prompts (input_tokens) are unique per request already, and new in every run unless reuse_text = true",
            ),
            (
                GOOD.replace("stream = true", "stream = true\nreuse_text = true"),
                "scenarios[0].reuse_text: applies to generated prompts only (input_tokens)",
            ),
            (
                gen_scenario("input_tokens = 1000\nreuse_text = \"yes\""),
                "reuse_text",
            ),
            (
                gen_scenario("input_tokens = [1000, 1000]"),
                "scenarios[0].input_tokens[1]: 1000 is not above the tier before (1000)",
            ),
            (
                gen_scenario("input_tokens = [8000, 1000]"),
                "scenarios[0].input_tokens[1]: 1000 is not above the tier before (8000)",
            ),
            (
                gen_scenario("input_tokens = [1000, 15]"),
                "scenarios[0].input_tokens[1]: 15 is not a whole number of tokens in 16..=2000000",
            ),
            (
                gen_scenario("input_tokens = 2000001"),
                "scenarios[0].input_tokens: 2000001 is not a whole number of tokens in 16..=2000000",
            ),
            (
                gen_scenario("input_tokens = 1000.5"),
                "scenarios[0].input_tokens: 1000.5 is not a whole number",
            ),
            (
                gen_scenario("input_tokens = []"),
                "scenarios[0].input_tokens: name 1..=16 tiers",
            ),
            (
                gen_scenario("input_tokens = \"8k\""),
                "scenarios[0].input_tokens: \"8k\" is not a number of tokens or a list of them",
            ),
            (
                gen_scenario("input_tokens = [1000, 8000]\nshared_prefix_tokens = 985"),
                "scenarios[0].shared_prefix_tokens: 985 is more than 984: the smallest tier (1000)",
            ),
            (
                with("shared_prefix_tokens = 10"),
                "scenarios[0].shared_prefix_tokens: applies to generated prompts only",
            ),
            (
                with("output_tokens = 64"),
                "scenarios[0].max_tokens: 32 differs from output_tokens (64)",
            ),
            (
                with("output_tokens = 0"),
                "scenarios[0].output_tokens: 0 is not in 1..=1000000",
            ),
            (
                GOOD.replace("max_tokens = 32", ""),
                "scenarios[0]: missing field `max_tokens` (or output_tokens, which sets it)",
            ),
            (
                with("warmup = 10001"),
                "scenarios[0].warmup: 10001 is not in 0..=10000",
            ),
            (
                with("warmup = 3"),
                "scenarios[0].warmup: 3 warm-up rounds of 3: no round would be measured",
            ),
            (
                GOOD.replace("stream = true", "stream = false").replace(
                    "max_tokens = 32",
                    "max_tokens = 32\nslo = { ttft_ms = 100, tpot_p90_ms = 20 }",
                ),
                "scenarios[0].slo.tpot_p90_ms: a non-streamed answer arrives at once",
            ),
            (
                with("slo = {}"),
                "scenarios[0].slo: is empty: give at least one of ttft_ms",
            ),
            (
                with("slo = { ttf_ms = 100 }"),
                "scenarios[0].slo.ttf_ms: is not an SLO key; the keys are ttft_ms, tpot_ms, e2e_ms (per request), {ttft|tpot|e2e}_p{percentile}_ms",
            ),
            (
                with("slo = { ttft_p95 = 100 }"),
                "scenarios[0].slo.ttft_p95: is not an SLO key",
            ),
            (
                with("slo = { ttft_p95_ms = 0 }"),
                "scenarios[0].slo.ttft_p95_ms: 0 is not a number of ms above 0",
            ),
            (
                with("slo = { e2e_ms = \"fast\" }"),
                "scenarios[0].slo.e2e_ms: \"fast\" is not a number of milliseconds",
            ),
            (
                with("slo = { ttft_ms = 100, goodput_pct = 0 }"),
                "scenarios[0].slo.goodput_pct: 0 is not in (0, 100]",
            ),
            (
                with("slo = { ttft_ms = 100, goodput_pct = 101 }"),
                "scenarios[0].slo.goodput_pct: 101 is not in (0, 100]",
            ),
            (
                with("[scenarios.slo]\nttft_p99.9_ms = 100"),
                "scenarios[0].slo.ttft_p99: is a table, not a number of milliseconds (a key with a dot, such as \"ttft_p99.9_ms\", is written quoted)",
            ),
            (
                with("slo = { ttft_p95_ms = 100, \"ttft_p95.0_ms\" = 200 }"),
                "bounds P95 ttft a second time",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }

    #[test]
    fn expanded_names_are_checked() {
        // `chat.1k` as a file scenario and as the tier of `chat`.
        let text = gen_scenario("input_tokens = [1000, 2000]").replace(
            "[[providers]]",
            "[[scenarios]]\nname = \"chat.2k\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 8\n\n[[providers]]",
        );
        let e = err_of(&text);
        assert!(
            e.starts_with("scenarios[1].name: \"chat.2k\" is also the name of tier 2k of scenarios[0] (\"chat\")"),
            "{e}"
        );
        let long = "x".repeat(62);
        let e = err_of(
            &gen_scenario("input_tokens = 1000")
                .replace("name = \"chat\"", &format!("name = \"{long}\"")),
        );
        assert!(
            e.starts_with("scenarios[0].input_tokens: tier 1k makes the scenario name"),
            "{e}"
        );
        assert!(e.contains("at most 64"), "{e}");
    }

    #[test]
    fn yaml_files_take_the_workload_keys() {
        let yaml = r#"
campaign: {name: t, regions: [us-east]}
rounds: {count: 2, interval_s: 1.5, gap_ms: 10}
scenarios:
  - name: ctx
    input_tokens: [1000, 8000]
    output_tokens: 64
    warmup: 1
    slo: {ttft_ms: 2000, "ttft_p99.9_ms": 5000, goodput_pct: 95}
providers:
  - name: a
    base_url: http://127.0.0.1:9/v1
    model_id: m
    exact_output: {ignore_eos: true, min_tokens: "$output_tokens"}
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let plan = crate::campaign::load_file(&file).unwrap();
        let names: Vec<&str> = plan.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ctx.1k", "ctx.8k"]);
        let slo = plan.scenarios[1].slo.as_ref().unwrap();
        assert_eq!((slo.ttft_ms, slo.goodput_pct), (Some(2000.0), 95.0));
        assert_eq!(slo.percentiles[0].percentile, 99.9);
        assert_eq!(
            plan.providers[0].request.exact_output["min_tokens"],
            serde_json::json!("$output_tokens")
        );
        std::fs::write(&file, yaml.replace("ttft_ms: 2000", "ttft_msec: 2000")).unwrap();
        let e = crate::campaign::load_file(&file).unwrap_err().to_string();
        assert!(
            e.contains("scenarios[0].slo.ttft_msec: is not an SLO key"),
            "{e}"
        );
    }

    #[test]
    fn the_long_context_example_validates() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/long-context.toml");
        let plan = crate::campaign::load_file(&file).unwrap();
        let names: Vec<&str> = plan.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["context.1k", "context.8k", "context.32k", "capacity.2k"]
        );
        let tiers: Vec<u32> = plan
            .scenarios
            .iter()
            .map(|s| s.synth.as_ref().unwrap().input_tokens)
            .collect();
        assert_eq!(tiers, [1000, 8000, 32_000, 2000]);
        assert!(
            plan.scenarios
                .iter()
                .all(|s| s.slo.is_some() && s.warmup == 2)
        );
        assert_eq!(plan.scenarios[2].max_tokens, 128);
        let crate::load::LoadModel::Rate(r) = &plan.scenarios[3].load else {
            panic!("{:?}", plan.scenarios[3].load)
        };
        let search = r.search.as_ref().unwrap();
        assert_eq!(
            (search.min_rps, search.max_rps, search.steps),
            (4.0, 32.0, 6)
        );
        assert_eq!(r.arrivals, crate::load::Arrivals::Gamma { burstiness: 0.5 });
        // Rounds (6 × 30 s), then the search's 6 steps of 20 s, each followed by a 20 s gap.
        assert_eq!(plan.slots_per_round(), 9);
        assert_eq!(plan.phases()[1].span_us, 240_000_000);
        assert_eq!(
            plan.providers[0].request.exact_output["ignore_eos"],
            serde_json::json!(true)
        );
    }
}
