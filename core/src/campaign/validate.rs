//! A parsed campaign file into a [`Plan`]: `[campaign]` and the percentiles here, each other
//! table by its own module, in a fixed order (the first problem is the one reported).

use std::path::Path;

use super::compat::{validate_compat, validate_quality};
use super::error::{CampaignError, invalid};
use super::file::CampaignFile;
use super::load_model::{check_span, validate_load};
use super::names::{check_name, check_unique};
use super::provider::{check_user_agent, validate_provider};
use super::rounds::validate_rounds;
use super::scenario::validate_scenario;
use super::schedule::validate_schedule;
use super::windows::validate_windows;
use super::workload::{Workload, validate_workload};
use crate::load::LoadModel;
use crate::metrics::METRICS_VERSION;
use crate::plan::{DEFAULT_PERCENTILES, MAX_PERCENTILES, Plan, RoundsSpec, ScenarioSpec};
use crate::prompts::PromptSet;

/// Validates a parsed file into a plan. Errors name the key; no I/O except reading the prompt
/// set named by `campaign.prompt_set`.
///
/// # Errors
/// [`CampaignError::Invalid`] for the first bad value.
pub fn validate(file: CampaignFile, base_dir: &Path) -> Result<Plan, CampaignError> {
    let c = &file.campaign;
    check_name("campaign.name", &c.name)?;
    if c.regions.is_empty() {
        return Err(invalid("campaign.regions", "name at least one region"));
    }
    for (i, r) in c.regions.iter().enumerate() {
        check_name(&format!("campaign.regions[{i}]"), r)?;
        if c.regions[..i].contains(r) {
            return Err(invalid(
                format!("campaign.regions[{i}]"),
                format!("{r:?} is listed twice"),
            ));
        }
    }
    if file.providers.is_empty() {
        return Err(invalid("providers", "name at least one [[providers]]"));
    }
    if file.scenarios.is_empty() {
        return Err(invalid("scenarios", "name at least one [[scenarios]]"));
    }
    let workloads: Vec<Workload> = file
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| validate_workload(i, s))
        .collect::<Result<_, _>>()?;
    let loads: Vec<LoadModel> = file
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| validate_load(i, s, &workloads[i], &file.providers))
        .collect::<Result<_, _>>()?;
    let rounds_scenarios = loads.iter().filter(|l| l.is_rounds()).count();
    let rounds = match (&file.rounds, rounds_scenarios) {
        (None, 0) => RoundsSpec {
            count: 0,
            interval_ms: 0,
            gap_ms: 0,
        },
        (None, _) => {
            return Err(invalid(
                "rounds",
                "missing: scenarios without `load` run in rounds and need [rounds] (count, interval_s, gap_ms)",
            ));
        }
        (Some(r), _) => {
            // Slots per round: a provider each, or a failover chain's request + its backups.
            let slots: usize = file
                .scenarios
                .iter()
                .zip(&loads)
                .zip(&workloads)
                .filter(|((_, l), _)| l.is_rounds())
                .map(|((s, _), w)| {
                    let per_tier = s
                        .failover
                        .as_ref()
                        .map_or(file.providers.len(), |f| f.chain.len());
                    per_tier * w.plan_scenarios()
                })
                .sum();
            validate_rounds(r, slots.max(1))?
        }
    };
    for (i, (w, l)) in workloads.iter().zip(&loads).enumerate() {
        if l.is_rounds() && w.warmup > 0 && w.warmup >= rounds.count {
            return Err(invalid(
                format!("scenarios[{i}].warmup"),
                format!(
                    "{} warm-up rounds of {}: no round would be measured",
                    w.warmup, rounds.count
                ),
            ));
        }
    }

    // Each tier of a scenario is a phase of its own.
    let plan_loads: Vec<(usize, LoadModel)> = loads
        .iter()
        .zip(&workloads)
        .enumerate()
        .flat_map(|(i, (l, w))| std::iter::repeat_n((i, l.clone()), w.plan_scenarios()))
        .collect();
    check_span(&rounds, &plan_loads)?;
    if let Some(ua) = &c.user_agent {
        check_user_agent(ua).map_err(|m| invalid("campaign.user_agent", m))?;
    }
    let providers = file
        .providers
        .iter()
        .enumerate()
        .map(|(i, p)| validate_provider(i, p, c.user_agent.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    check_unique("providers", file.providers.iter().map(|p| p.name.as_str()))?;

    let prompt_set = match &c.prompt_set {
        None => PromptSet::builtin(),
        Some(path) => PromptSet::load(&base_dir.join(path)).map_err(CampaignError::Prompts)?,
    };
    let scenarios: Vec<_> = file
        .scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| {
            validate_scenario(i, s, &loads[i], &workloads[i], &prompt_set, &file.providers)
        })
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    check_unique("scenarios", file.scenarios.iter().map(|s| s.name.as_str()))?;
    check_tier_names(&file, &scenarios)?;
    let (timezones, windows) = validate_windows(&file)?;
    let schedule = validate_schedule(&file, &timezones, &windows)?;
    let compat = validate_compat(file.compat.as_ref(), &providers)?;
    let quality = validate_quality(file.quality.as_ref(), &providers)?;
    let selection = super::selection::validate(
        file.selection.as_ref(),
        &providers,
        compat.as_ref(),
        quality.as_ref(),
    )
    .map_err(|(key, message)| invalid(key, message))?;
    let percentiles = validate_percentiles(c.percentiles.as_deref())?;

    Ok(Plan {
        name: c.name.clone(),
        seed: c.seed,
        metrics_version: METRICS_VERSION,
        regions: c.regions.clone(),
        rounds,
        providers,
        scenarios,
        prompt_set: prompt_set.name,
        timezones,
        windows,
        schedule,
        selection,
        compat,
        quality,
        percentiles,
        // Stamped per run by the coordinator at launch.
        text_salt: None,
    })
}

/// No file scenario is named like the tier of another (`chat.8k` and `chat` with
/// `input_tokens = [8000]`): each plan scenario's name is unique.
fn check_tier_names(file: &CampaignFile, scenarios: &[ScenarioSpec]) -> Result<(), CampaignError> {
    for (j, s) in file.scenarios.iter().enumerate() {
        let tier = scenarios
            .iter()
            .filter_map(|p| p.synth.as_ref().map(|synth| (p, synth)))
            .find(|(p, _)| p.name == s.name);
        if let Some((p, synth)) = tier {
            let i = file
                .scenarios
                .iter()
                .position(|f| f.name == synth.group)
                .unwrap_or(0);
            return Err(invalid(
                format!("scenarios[{j}].name"),
                format!(
                    "{:?} is also the name of tier {} of scenarios[{i}] ({:?}): rename one",
                    p.name,
                    crate::synth::tier_label(synth.input_tokens),
                    synth.group
                ),
            ));
        }
    }
    Ok(())
}

/// `campaign.percentiles`: each in (0, 100), strictly ascending (sorted, no repeats), 1 to
/// [`MAX_PERCENTILES`] of them; [`DEFAULT_PERCENTILES`] when absent.
fn validate_percentiles(list: Option<&[f64]>) -> Result<Vec<f64>, CampaignError> {
    let Some(list) = list else {
        return Ok(DEFAULT_PERCENTILES.to_vec());
    };
    if list.is_empty() {
        return Err(invalid(
            "campaign.percentiles",
            "name at least one percentile (e.g. [50, 90, 95, 99]), or leave the key out",
        ));
    }
    if list.len() > MAX_PERCENTILES {
        return Err(invalid(
            "campaign.percentiles",
            format!(
                "{} percentiles: at most {MAX_PERCENTILES} fit a matrix cell",
                list.len()
            ),
        ));
    }
    for (i, &p) in list.iter().enumerate() {
        let key = format!("campaign.percentiles[{i}]");
        if !(p > 0.0 && p < 100.0) {
            return Err(invalid(key, format!("{p} is not in (0, 100) (P50 is 50)")));
        }
        if i > 0 && p <= list[i - 1] {
            return Err(invalid(
                key,
                format!(
                    "{p} {} {}: list the percentiles in ascending order, each once",
                    if p == list[i - 1] {
                        "repeats"
                    } else {
                        "comes after"
                    },
                    list[i - 1]
                ),
            ));
        }
    }
    Ok(list.to_vec())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::test_support::{GOOD, err_of};
    use crate::campaign::{check_base_url, load_file, load_toml_str};
    use crate::load::{Arrivals, KneeRule, SweepSpec};
    use crate::metrics::Metric;

    #[test]
    fn good_file_becomes_a_plan() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plan.seed, 5);
        assert_eq!(plan.rounds.interval_ms, 2_000);
        assert_eq!(plan.providers[0].base_url, "http://127.0.0.1:9/v1");
        assert!(plan.scenarios[0].prompts.len() >= 4);
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.id.starts_with("short-qa-en-"))
        );
        assert_eq!(plan.prompt_set, "latmesh-prompts-v1");
    }

    #[test]
    fn errors_name_the_offending_key() {
        let cases = [
            (GOOD.replace("max_tokens = 32", "max_tokens = 0"), "scenarios[0].max_tokens"),
            (GOOD.replace("http://127.0.0.1:9/v1/", "ftp://x"), "providers[0].base_url"),
            (GOOD.replace("\"A_KEY\"", "\"sk-123 secret\""), "providers[0].api_key_env"),
            (GOOD.replace("short-qa-en-*", "nope-*"), "scenarios[0].prompt_ids[0]"),
            (GOOD.replace("interval_s = 2.0", "interval_s = 0.0"), "rounds.interval_s"),
            (GOOD.replace("max_tokens = 32\n", "max_tokens = 32\n[[scenarios]]\nname = \"b\"\nprompt_ids = [\"code-*\"]\nmax_tokens = 9\n").replace("gap_ms = 100", "gap_ms = 2500"), "rounds.interval_s"),
            (GOOD.replace("\"eu-west\"]", "\"us-east\"]"), "campaign.regions[1]"),
            (GOOD.replace("count = 3", "count = \"three\""), "rounds.count"),
            (
                GOOD.replace("max_tokens = 32", "max_tokens = 32\ntimeout_ttft_s = 60\ntimeout_total_s = 30"),
                "scenarios[0].timeout_ttft_s",
            ),
            (GOOD.replace("max_tokens = 32", "max_tokens = 32\nmax_tokenz = 3"), "max_tokenz"),
        ];
        for (text, key) in cases {
            let e = err_of(&text);
            assert!(e.contains(key), "error {e:?} should name {key}");
        }
    }

    #[test]
    fn percentiles_default_to_p50_p90_p95_p99_and_are_checked() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plan.percentiles, vec![50.0, 90.0, 95.0, 99.0]);
        let with =
            |list: &str| GOOD.replace("seed = 5", &format!("seed = 5\npercentiles = {list}"));
        let plan = load_toml_str(&with("[50, 99.9]"), Path::new(".")).unwrap();
        assert_eq!(plan.percentiles, vec![50.0, 99.9]);
        // The default list is left out of the plan JSON (hashes of older plans hold).
        assert!(
            !load_toml_str(GOOD, Path::new("."))
                .unwrap()
                .to_json()
                .contains("percentiles")
        );
        assert!(plan.to_json().contains("\"percentiles\":[50.0,99.9]"));
        for (list, key, says) in [
            ("[]", "campaign.percentiles", "at least one"),
            ("[50, 100]", "campaign.percentiles[1]", "not in (0, 100)"),
            ("[0, 50]", "campaign.percentiles[0]", "not in (0, 100)"),
            (
                "[50, 99, 95]",
                "campaign.percentiles[2]",
                "95 comes after 99",
            ),
            ("[50, 50]", "campaign.percentiles[1]", "50 repeats 50"),
            (
                "[1, 2, 3, 4, 5, 6, 7, 8, 9]",
                "campaign.percentiles",
                "at most 8",
            ),
        ] {
            let e = err_of(&with(list));
            assert!(e.contains(key) && e.contains(says), "{list}: {e}");
        }
    }

    #[test]
    fn load_model_examples_and_the_demo_become_phased_plans() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let sweep = load_file(&dir.join("sweep.toml")).unwrap();
        let LoadModel::Sweep(s) = &sweep.scenarios[0].load else {
            panic!("{:?}", sweep.scenarios[0].load)
        };
        assert_eq!(
            (s.concurrency.clone(), s.step_ms),
            (vec![4, 8, 16, 32], 10_000)
        );
        assert_eq!((s.knee.metric, s.knee.percentile), (Metric::E2e, 50.0));
        assert_eq!(sweep.rounds.count, 0);
        assert_eq!(sweep.span_us(), 40_000_000);
        let open = load_file(&dir.join("open-loop.toml")).unwrap();
        let LoadModel::Rate(r) = &open.scenarios[0].load else {
            panic!()
        };
        assert_eq!(
            (r.rps, r.arrivals, r.duration_ms, r.max_queue_ms),
            (5.0, Arrivals::Poisson, 30_000, 10_000)
        );
        assert_eq!(open.providers[1].limits.max_in_flight, Some(2));
        // Exact: the scenario's arrival schedule, once per provider.
        let arrivals = r.arrivals_us(open.seed, 0).len() as u64;
        assert_eq!(open.probes_per_agent(), 2 * arrivals);
        let patrol = load_file(&dir.join("patrol.toml")).unwrap();
        assert_eq!(patrol.providers[0].limits.min_gap_ms, Some(2_000));
        assert_eq!(patrol.providers[2].limits.requests_per_min, Some(60.0));
        // The demo: rounds first (2 scenarios), then the sweep, then the rate; 2 s after the
        // rounds, a drain allowance of 10 s after the sweep and of three times each open-loop
        // phase (at least 10 s) after it.
        let demo = std::fs::read_to_string(dir.join("demo.toml"))
            .unwrap()
            .replace("{sim}", "127.0.0.1:9");
        let demo = load_toml_str(&demo, Path::new(".")).unwrap();
        let phases: Vec<(crate::load::PhaseKind, u64, u64)> = demo
            .phases()
            .iter()
            .map(|p| (p.kind, p.start_us, p.span_us))
            .collect();
        use crate::load::PhaseKind::{Rounds, Scenario};
        assert_eq!(
            phases,
            vec![
                (Rounds, 0, 30_000_000),
                (Scenario(2), 32_000_000, 30_000_000),
                (Scenario(3), 72_000_000, 6_000_000),
                (Scenario(4), 96_000_000, 4_000_000),
                (Scenario(5), 112_000_000, 4_000_000)
            ]
        );
        // 11 providers (9 on Chat Completions, one each on Anthropic and Responses) × 2.
        assert_eq!(demo.slots_per_round(), 22);
        assert!(demo.round_order(0).iter().all(|s| s.scenario < 2));
    }

    /// Numbers past their maximum are refused with the key and the maximum, never wrapped
    /// (`gap_ms = i64::MAX` made `2 × gap` overflow: a panic in debug builds, 16 ms in
    /// release), and ports that are not in 1..=65535 are refused naming the provider.
    #[test]
    fn numbers_past_their_maximum_are_refused_naming_the_key() {
        let three = GOOD.replace(
            "api_key_env = \"A_KEY\"",
            "[[providers]]\nname = \"b\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n[[providers]]\nname = \"c\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"",
        );
        let cases = [
            (
                three.replace("gap_ms = 100", "gap_ms = 9223372036854775807"),
                "rounds.gap_ms: 9223372036854775807 ms is above the maximum, 86400000 ms",
            ),
            (
                three.replace("gap_ms = 100", "gap_ms = 86400000"),
                "rounds.interval_s: 2 s is too short: 3 probes per round 86400000 ms apart",
            ),
            (
                GOOD.replace(
                    "api_key_env = \"A_KEY\"",
                    "min_gap_ms = 9223372036854775807",
                ),
                "providers[0].min_gap_ms: 9223372036854775807 ms is above the maximum, 86400000 ms",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:65536/"),
                "providers[0].base_url: provider \"a\": \"http://127.0.0.1:65536/v1/\": the port \"65536\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:-1/"),
                "the port \"-1\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "127.0.0.1:0/"),
                "the port \"0\" is not a number in 1..=65535",
            ),
            (
                GOOD.replace("127.0.0.1:9/", "[::1:9/"),
                "providers[0].base_url: provider \"a\": \"http://[::1:9/v1/\" is not a valid URL",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
        // The largest of each still passes.
        let ok = three
            .replace("interval_s = 2.0", "interval_s = 86400")
            .replace("gap_ms = 100", "gap_ms = 43199999");
        assert_eq!(
            load_toml_str(&ok, Path::new(".")).unwrap().rounds.gap_ms,
            43_199_999
        );
        for url in [
            "http://[::1]:65535/v1",
            "https://h.example:1/v1",
            "http://[::1]/v1",
        ] {
            assert!(check_base_url(url).is_ok(), "{url}");
        }
        // A colon without a port is a typo, not port 80.
        assert_eq!(
            check_base_url("http://h:/v1").unwrap_err(),
            "\"http://h:/v1\": the port \"\" is not a number in 1..=65535"
        );
        // The phases add up with checked arithmetic: the longest rounds (2,739 years) and
        // 42,000 sweeps of 64 day-long steps pass 10,000 years after about 41,400.
        let rounds = RoundsSpec {
            count: 1_000_000,
            interval_ms: 86_400_000,
            gap_ms: 0,
        };
        let sweep = LoadModel::Sweep(SweepSpec {
            concurrency: (1..=64).collect(),
            step_ms: 86_400_000,
            step_requests: None,
            knee: KneeRule::default(),
        });
        let mut loads = vec![LoadModel::Rounds];
        loads.extend(std::iter::repeat_n(sweep, 42_000));
        let loads: Vec<(usize, LoadModel)> = loads.into_iter().enumerate().collect();
        let e = check_span(&rounds, &loads).unwrap_err().to_string();
        assert!(e.starts_with("scenarios[414"), "{e}");
        assert!(
            e.ends_with("last more than the maximum, 10000 years"),
            "{e}"
        );
        assert!(check_span(&rounds, &loads[..41_000]).is_ok());
    }
}
