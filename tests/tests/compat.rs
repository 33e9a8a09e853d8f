//! `latmesh compat` (issue 20) against the simulator, through the real binaries: every
//! honest profile gets no `fail`, each trap profile fails exactly its checks, the quantized
//! profile's wrong answers are exactly the simulator's ground truth, and a canary API key
//! (the `locked` profile's key, echoed by a hostile profile) appears nowhere in what the
//! command prints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use latmesh_sim::hostile::Hostile;
use latmesh_sim::profile::ProviderProfile;
use latmesh_testkit::{Proc, bin, spawn_until_line};
use serde_json::Value;

/// A simulator serving `profiles` (`None`: its built-in ones), ten times faster than real
/// time; its process, its address (`127.0.0.1:PORT`).
fn sim(dir: &Path, profiles: Option<&[ProviderProfile]>) -> (Proc, String) {
    let mut cmd = Command::new(bin("latmesh-sim"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--time-scale", "0.1"]);
    if let Some(p) = profiles {
        let file = dir.join("profiles.json");
        std::fs::write(&file, serde_json::to_string(p).unwrap()).unwrap();
        cmd.arg("--profiles").arg(&file);
    }
    let (proc, url) = spawn_until_line(
        "latmesh-sim",
        cmd,
        "listening on ",
        Duration::from_secs(20),
        &dir.join("sim.log"),
    );
    (proc, url.trim_start_matches("http://").to_string())
}

/// A campaign file in `dir` whose providers are `(name, sim profile, extra TOML keys)` at
/// the simulator `addr`.
fn campaign(dir: &Path, addr: &str, providers: &[(&str, &str, &str)]) -> PathBuf {
    let mut text = String::from(
        "[campaign]\nname = \"compat-test\"\nregions = [\"local\"]\n\
         [rounds]\ncount = 1\ninterval_s = 1\ngap_ms = 1\n\
         [[scenarios]]\nname = \"s\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 8\n",
    );
    for (name, profile, extra) in providers {
        text.push_str(&format!(
            "[[providers]]\nname = \"{name}\"\nbase_url = \"http://{addr}/{profile}/v1\"\n\
             model_id = \"{}\"\n{extra}\n",
            latmesh_sim::profile::DEFAULT_MODEL_ID
        ));
    }
    let file = dir.join("campaign.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// `latmesh compat FILE ARGS` with `envs`: exit code, stdout, stderr.
fn compat(file: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(bin("latmesh"))
        .arg("compat")
        .arg(file)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--json`'s object, the command having exited 0.
fn compat_json(file: &Path, args: &[&str], envs: &[(&str, &str)]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = compat(file, &all, envs);
    assert_eq!(code, Some(0), "stderr: {err}\nstdout: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// Per provider, check → verdict, from `--json`'s `compat`.
fn verdicts(v: &Value) -> BTreeMap<String, BTreeMap<String, String>> {
    v["compat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let checks = p["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["check"].as_str().unwrap().to_string(),
                        r["verdict"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            (p["provider"].as_str().unwrap().to_string(), checks)
        })
        .collect()
}

/// The object of the JSON array `list` whose `key` is `value`.
fn entry_where<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|p| p[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {list}"))
}

/// The object of the JSON array `list` whose `provider` is `provider`.
fn entry<'a>(list: &'a Value, provider: &str) -> &'a Value {
    entry_where(list, "provider", provider)
}

const CANARY_ENV: &str = "COMPAT_TEST_CANARY_KEY";
/// A key no provider value, answer or table contains by chance.
const CANARY: &str = "sk-canaryQ7wZ3xK9mP2vR8tL5nB4";

/// The canary key of the `locked` profile, echoed everywhere by `echo`, is in no line
/// `latmesh compat` prints (tables, evidence, JSON, errors), whole or as any 8-byte run;
/// the key was really sent (locked answers), and a wrong one is refused with 401.
#[test]
fn compat_canary_key_appears_nowhere_in_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let quick = |name: &str| ProviderProfile {
        output_tokens_min: 4,
        output_tokens_max: 8,
        ..ProviderProfile::fixed(name, 5_000, 1_000)
    };
    let profiles = [
        ProviderProfile {
            api_key: Some(CANARY.into()),
            ..quick("locked")
        },
        ProviderProfile {
            hostile: Hostile {
                echo_key: true,
                ..Hostile::default()
            },
            ..quick("echo")
        },
    ];
    let (_sim, addr) = sim(dir.path(), Some(&profiles));
    let key = format!("api_key_env = \"{CANARY_ENV}\"");
    let file = campaign(
        dir.path(),
        &addr,
        &[
            ("locked", "locked", &key),
            ("echo", "echo", &key),
            (
                "echo-anthropic",
                "echo",
                &format!("{key}\napi = \"anthropic\""),
            ),
            (
                "echo-responses",
                "echo",
                &format!("{key}\napi = \"responses\""),
            ),
        ],
    );
    let envs = [(CANARY_ENV, CANARY)];
    let windows: Vec<&str> = (0..=CANARY.len() - 8).map(|i| &CANARY[i..i + 8]).collect();
    let clean = |what: &str, text: &str| {
        for w in &windows {
            assert!(
                !text.contains(w),
                "{what} holds {w:?} of the canary:\n{text}"
            );
        }
    };
    let (code, out, err) = compat(&file, &["--samples", "1"], &envs);
    assert_eq!(code, Some(0), "{err}");
    clean("stdout", &out);
    clean("stderr", &err);
    let (code, out, err) = compat(&file, &["--samples", "1", "--json"], &envs);
    assert_eq!(code, Some(0), "{err}");
    clean("--json stdout", &out);
    clean("--json stderr", &err);
    let v: Value = serde_json::from_str(&out).unwrap();
    let all = verdicts(&v);
    // The real key opened the locked provider; the made-up one was refused.
    assert_eq!(all["locked"]["stream"], "pass", "{v}");
    assert_eq!(all["locked"]["wrong_key"], "pass", "{v}");
    let samples = v["samples"].as_array().unwrap();
    let prompts = latmesh_core::quality::QualitySpec::default()
        .prompt_ids
        .len();
    assert_eq!(samples.len(), 4 * prompts, "{v}");
    let locked_ok = samples
        .iter()
        .filter(|s| s["provider"] == "locked" && s["outcome"] == "ok")
        .count();
    assert_eq!(locked_ok, prompts, "{v}");
}

/// Bad input is an error (exit 2) naming what and where, before anything is sent: a
/// provider's unset key variable, an unknown `--provider`, `--samples` out of range.
#[test]
fn compat_refuses_bad_input_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: had anything been sent, the checks would be inconclusive and
    // the command would exit 0.
    let addr = format!("127.0.0.1:{}", latmesh_testkit::free_port());
    let file = campaign(
        dir.path(),
        &addr,
        &[
            ("open", "fast-lane", ""),
            (
                "keyed",
                "fast-lane",
                "api_key_env = \"COMPAT_TEST_UNSET_KEY\"",
            ),
        ],
    );
    let (code, out, err) = compat(&file, &[], &[]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("provider keyed: its API key variable $COMPAT_TEST_UNSET_KEY is not set"),
        "{err}"
    );
    assert_eq!(out, "");
    let (code, _, err) = compat(&file, &["--provider", "nope"], &[]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--provider nope: no such provider in") && err.contains("open, keyed"),
        "{err}"
    );
    let (code, _, err) = compat(&file, &["--provider", "open", "--samples", "0"], &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--samples: must be 1 to 20, got 0"), "{err}");
    // Only the keyless provider: it runs (every request fails to connect, so every verdict
    // is inconclusive or not applicable) and exits 0.
    let v = compat_json(&file, &["--provider", "open", "--checks-only"], &[]);
    let all = verdicts(&v);
    assert_eq!(all.keys().collect::<Vec<_>>(), ["open"]);
    assert!(
        all["open"]
            .values()
            .all(|v| v == "inconclusive" || v == "not_applicable"),
        "{all:?}"
    );
    assert_eq!(v["samples"], serde_json::json!([]));
    assert_eq!(
        (v["quality_set"].as_str(), v["checks_version"].as_u64()),
        (
            Some(""),
            Some(u64::from(latmesh_core::compat::COMPAT_CHECKS_VERSION))
        )
    );
}

/// Whether `profile` has faults (throttling, errors, truncation, stalls) that may make a
/// check `inconclusive` whatever its ground truth.
fn has_faults(p: &ProviderProfile) -> bool {
    [
        p.throttle_prob,
        p.truncate_prob,
        p.stream_error_prob,
        p.overload_prob,
        p.stall_prob,
    ]
    .iter()
    .any(|x| *x > 0.0)
}

const TRAP_KEY_ENV: &str = "COMPAT_TEST_TRAP_KEY";

/// Traps beside the simulator's built-in ones: the other ways a feature or the reasoning
/// history can break clients, and an auth path that answers a wrong key with a 5xx.
fn more_traps() -> Vec<ProviderProfile> {
    use latmesh_sim::profile::{Feature, LOCKED_API_KEY, ReasoningPassback};
    let quick = |name: &str| ProviderProfile {
        output_tokens_min: 24,
        output_tokens_max: 40,
        ..ProviderProfile::fixed(name, 5_000, 1_000)
    };
    let thinking = |name: &str, passback| ProviderProfile {
        reasoning_tokens_min: 8,
        reasoning_tokens_max: 16,
        reasoning_passback: passback,
        ..quick(name)
    };
    vec![
        ProviderProfile {
            json_mode: Feature::Ignored,
            ..quick("ignores-json")
        },
        ProviderProfile {
            json_mode: Feature::Rejected,
            tool_calls: Feature::Rejected,
            stop: Feature::Rejected,
            ..quick("refuses-features")
        },
        ProviderProfile {
            tool_calls: Feature::Ignored,
            stop: Feature::Ignored,
            ..quick("ignores-tools-stop")
        },
        thinking("rejects-reasoning-back", ReasoningPassback::Rejected),
        thinking("honest-thinker", ReasoningPassback::Ignored),
        ProviderProfile {
            api_key: Some(LOCKED_API_KEY.into()),
            wrong_key_status: 500,
            ..quick("broken-auth")
        },
        // JSON mode and tools honoured one time in three: both checks flip between samples.
        ProviderProfile {
            json_mode: Feature::OneInThree,
            tool_calls: Feature::OneInThree,
            ..quick("sometimes")
        },
    ]
}

/// Every built-in profile of the simulator (the nine demo ones and the seven traps) and
/// a few more traps, over Chat Completions and, for some, the two other APIs: every
/// verdict is the simulator's ground truth (`latmesh_sim::compat_truth`), so each trap
/// fails (or is not offered) exactly its checks and the honest profiles fail none.
#[test]
fn compat_finds_each_trap_and_nothing_on_honest_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let mut profiles = latmesh_sim::profile::all_builtin_profiles();
    profiles.extend(more_traps());
    let (_sim, addr) = sim(dir.path(), Some(&profiles));
    let asked = latmesh_sim::profile::DEFAULT_MODEL_ID;
    let key = format!("api_key_env = \"{TRAP_KEY_ENV}\"\n");
    let mut rows: Vec<(String, &ProviderProfile, &str, String)> = Vec::new();
    for p in &profiles {
        // A provider wanting `max_completion_tokens` is told so by its shape.
        let mut extra = if p.requires_max_completion_tokens {
            "max_tokens_field = \"max_completion_tokens\"\n".to_string()
        } else {
            String::new()
        };
        if p.api_key.is_some() {
            extra.push_str(&key);
        }
        rows.push((p.name.clone(), p, "chat", extra.clone()));
        let others = [
            "fast-lane",
            "thinker",
            "no-json",
            "locked",
            "ignores-json",
            "refuses-features",
            "ignores-tools-stop",
            "rejects-reasoning-back",
        ];
        if others.contains(&p.name.as_str()) {
            for api in ["anthropic", "responses"] {
                rows.push((
                    format!("{}-{api}", p.name),
                    p,
                    api,
                    format!("{extra}api = \"{api}\""),
                ));
            }
        }
    }
    let providers: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|(n, p, _, extra)| (n.as_str(), p.name.as_str(), extra.as_str()))
        .collect();
    let file = campaign(dir.path(), &addr, &providers);
    let v = compat_json(
        &file,
        &["--checks-only"],
        &[(TRAP_KEY_ENV, latmesh_sim::profile::LOCKED_API_KEY)],
    );
    let all = verdicts(&v);
    assert_eq!(all.len(), rows.len(), "{v}");
    // Each verdict is the simulator's ground truth (`compat_truth`); a provider with faults
    // may leave a check inconclusive, never fail one the truth passes.
    let mut traps_seen = 0;
    for (name, p, api, _) in &rows {
        let api = latmesh_core::api::Api::parse(api).unwrap();
        let want = latmesh_sim::compat_truth::expected_verdicts(p, api, asked);
        let got = &all[name];
        assert_eq!(got.len(), want.len(), "{name}: {got:?}");
        for (check, verdict) in &want {
            let g = got[check.as_str()].as_str();
            let ok = g == verdict.as_str() || (g == "inconclusive" && has_faults(p));
            assert!(
                ok,
                "{name} {check}: got {g}, truth {verdict}: {got:?}; evidence {}",
                entry_where(
                    &entry(&v["compat"], name)["results"],
                    "check",
                    check.as_str()
                )["evidence"]
            );
        }
        let traps = latmesh_sim::compat_truth::expected_traps(p, api, asked);
        traps_seen += usize::from(traps.iter().any(|c| {
            !matches!(
                c,
                latmesh_core::compat::CompatCheck::SystemFingerprint
                    | latmesh_core::compat::CompatCheck::PromptCache
                    | latmesh_core::compat::CompatCheck::WrongKey
            )
        }));
    }
    // The expectations are not all "absent features": the traps were looked for.
    assert!(traps_seen >= 15, "{traps_seen}");
    // The keyed providers opened with the real key, and refused the made-up one.
    for p in ["locked", "locked-anthropic", "locked-responses"] {
        assert_eq!(
            (all[p]["stream"].as_str(), all[p]["wrong_key"].as_str()),
            ("pass", "pass"),
            "{p}"
        );
    }
    assert_eq!(all["broken-auth"]["wrong_key"], "fail");
    assert_eq!(all["honest-thinker"]["reasoning_field"], "pass");
    assert_eq!(all["honest-thinker"]["reasoning_history"], "pass");
    assert_eq!(all["fast-lane"]["reasoning_history"], "not_applicable");
    // Evidence names the field and says which way the history breaks.
    let evidence = |provider: &str, check: &str| -> Value {
        let results = &entry(&v["compat"], provider)["results"];
        entry_where(results, "check", check)["evidence"].clone()
    };
    let e = evidence("thinker", "reasoning_history");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("needs reasoning sent back"),
        "{e}"
    );
    let e = evidence("rejects-reasoning-back", "reasoning_history");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("rejects reasoning sent back"),
        "{e}"
    );
    let e = evidence("strict-gateway", "stream_usage");
    assert_eq!(
        (e["http_status"].as_u64(), e["field"].as_str()),
        (Some(400), Some("stream_options"))
    );
    let e = evidence("renamer", "model_name");
    assert_eq!(
        e["message"],
        format!("answered deepseek-v4-flash-distill, expected {asked}")
    );
    let e = evidence("thinker", "reasoning_field");
    assert_eq!(e["field"], "reasoning_content");
    let e = evidence("thinker-anthropic", "reasoning_field");
    assert_eq!(e["field"], "thinking");
    // Checks that judge generated text are sampled 3 times: a provider honouring JSON mode
    // and tools one time in three is unstable on both, with its counts and a failing
    // sample's evidence; a steady pass says 3/3; a check that cannot flip is sampled once.
    let samples = |provider: &str, check: &str| -> Value {
        let results = &entry(&v["compat"], provider)["results"];
        entry_where(results, "check", check)["samples"].clone()
    };
    let tally = |pass: u32, fail: u32| serde_json::json!({"pass": pass, "fail": fail, "not_offered": 0, "inconclusive": 0});
    assert_eq!(all["sometimes"]["json_mode"], "unstable");
    assert_eq!(all["sometimes"]["tool_call"], "unstable");
    assert_eq!(samples("sometimes", "json_mode"), tally(1, 2));
    assert_eq!(samples("sometimes", "tool_call"), tally(1, 2));
    let e = evidence("sometimes", "json_mode");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("pass 1/3, fail 2/3: content is not a JSON object: \""),
        "{e}"
    );
    let e = evidence("sometimes", "tool_call");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("pass 1/3, fail 2/3: no tool call"),
        "{e}"
    );
    assert_eq!(samples("fast-lane", "json_mode"), tally(3, 0));
    assert_eq!(samples("fast-lane", "stream"), tally(1, 0));
    assert_eq!(samples("sometimes", "wrong_key")["not_offered"], 1);
}

/// The quantized profiles' wrong answers are exactly the simulator's ground truth
/// (`truth::wrong_prompt_ids`), on every sample, and no other provider answers a prompt
/// wrong; the quantized answers are shorter; the swapper names its new model after its
/// 40th request.
#[test]
fn compat_quality_finds_exactly_the_quantized_wrong_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, addr) = sim(dir.path(), None);
    let names = ["fast-lane", "steady", "budget", "quantized", "swapper"];
    let rows: Vec<(&str, &str, &str)> = names.iter().map(|n| (*n, *n, "")).collect();
    let file = campaign(dir.path(), &addr, &rows);
    let v = compat_json(&file, &["--quality-only", "--samples", "2"], &[]);
    let samples = v["samples"].as_array().unwrap();
    let prompts = latmesh_core::quality::prompt_set().prompts.len();
    assert_eq!(samples.len(), names.len() * 2 * prompts);
    assert!(
        samples
            .iter()
            .all(|s| s["outcome"] == "ok" || s["provider"] == "budget"),
        "{v}"
    );
    let profiles = latmesh_sim::profile::all_builtin_profiles();
    let profile = |n: &str| profiles.iter().find(|p| p.name == n).unwrap();
    let mut quantized_seen = 0;
    for name in names {
        let truth = latmesh_sim::truth::wrong_prompt_ids(profile(name));
        let mut wrong: Vec<&str> = samples
            .iter()
            .filter(|s| s["provider"] == name && s["correct"] == false)
            .map(|s| s["prompt_id"].as_str().unwrap())
            .collect();
        // Both samples of each truly wrong prompt (a sample that did not end ok is not
        // graded), and nothing else.
        wrong.dedup();
        assert_eq!(wrong, truth, "{name}");
        let graded_right = samples
            .iter()
            .filter(|s| s["provider"] == name && s["correct"] == true)
            .all(|s| !truth.contains(&s["prompt_id"].as_str().unwrap()));
        assert!(graded_right, "{name}");
        quantized_seen += usize::from(!truth.is_empty());
    }
    assert!(quantized_seen >= 2, "{quantized_seen}");
    // Shorter answers: the median output tokens well below an honest provider's.
    let median = |provider: &str| {
        let mut t: Vec<u64> = samples
            .iter()
            .filter(|s| s["provider"] == provider && s["outcome"] == "ok")
            .map(|s| s["output_tokens"].as_u64().unwrap())
            .collect();
        t.sort_unstable();
        t[t.len() / 2]
    };
    assert!(
        median("quantized") * 10 < median("fast-lane") * 8,
        "{} vs {}",
        median("quantized"),
        median("fast-lane")
    );
    // The swap shows in the answered model of the later samples.
    let models: std::collections::BTreeSet<&str> = samples
        .iter()
        .filter(|s| s["provider"] == "swapper")
        .filter_map(|s| s["answered_model"].as_str())
        .collect();
    assert!(
        models.contains("deepseek-v4-flash-0915") && models.len() == 2,
        "{models:?}"
    );
    // The fingerprints: the honest ones (and the swapper, whose answers stay right) alike,
    // the quantized one different.
    let fp = |provider: &str| entry(&v["quality"]["providers"], provider)["fingerprint"].clone();
    assert_eq!(fp("fast-lane"), fp("swapper"));
    assert_eq!(fp("fast-lane"), fp("steady"));
    assert_ne!(fp("fast-lane"), fp("quantized"));
}
