//! A scenario's client policy: `turns` and `follow_ups` (multi-turn conversations),
//! `cache_nonce`, `retry` and `max_response_bytes` (see [`crate::plan::ClientPolicy`]).

use super::error::{CampaignError, invalid};
use super::file::{RetrySection, ScenarioSection};
use crate::plan::{
    ClientPolicy, DEFAULT_MAX_RESPONSE_BYTES, MAX_TURNS, MIN_MAX_RESPONSE_BYTES, RetryPolicy,
};
use crate::record::Outcome;

/// Most retries a scenario may ask for.
const MAX_RETRIES: u32 = 10;
/// Longest backoff or honoured Retry-After, seconds.
const MAX_WAIT_S: f64 = 3_600.0;

fn check_wait_s(key: String, s: f64) -> Result<u64, CampaignError> {
    if s.is_finite() && (0.0..=MAX_WAIT_S).contains(&s) {
        Ok((s * 1000.0).round() as u64)
    } else {
        Err(invalid(
            key,
            format!("{s} is not a wait in seconds in [0, {MAX_WAIT_S}]"),
        ))
    }
}

/// `scenarios[i].retry` into a [`RetryPolicy`].
fn validate_retry(i: usize, r: &RetrySection) -> Result<RetryPolicy, CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].retry.{field}");
    let d = RetryPolicy::default();
    let max_retries = r.max_retries.unwrap_or(d.max_retries);
    if max_retries > MAX_RETRIES {
        return Err(invalid(
            key("max_retries"),
            format!("{max_retries} is not in 0..={MAX_RETRIES}"),
        ));
    }
    let backoff_ms = match &r.backoff_s {
        None => d.backoff_ms,
        Some(list) if list.is_empty() => {
            return Err(invalid(
                key("backoff_s"),
                "name at least one wait (e.g. [1, 2, 4])",
            ));
        }
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(j, s)| check_wait_s(key(&format!("backoff_s[{j}]")), *s))
            .collect::<Result<_, _>>()?,
    };
    let on = match &r.on {
        None => d.on,
        Some(names) => {
            if names.is_empty() {
                return Err(invalid(key("on"), "name at least one outcome to retry"));
            }
            let mut on = Vec::new();
            for (j, name) in names.iter().enumerate() {
                let k = key(&format!("on[{j}]"));
                let retryable: Vec<&str> = Outcome::ALL
                    .iter()
                    .filter(|o| {
                        !matches!(
                            o,
                            Outcome::Ok
                                | Outcome::HistoryRejected
                                | Outcome::Cancelled
                                | Outcome::Dropped
                        )
                    })
                    .map(|o| o.as_str())
                    .collect();
                match Outcome::parse(name) {
                    Some(Outcome::Ok) => return Err(invalid(k, "\"ok\" is never retried")),
                    Some(Outcome::HistoryRejected) => {
                        return Err(invalid(
                            k,
                            "\"history_rejected\" would be rejected again: it is never retried",
                        ));
                    }
                    Some(o @ (Outcome::Cancelled | Outcome::Dropped)) => {
                        return Err(invalid(
                            k,
                            format!(
                                "\"{o}\" is never sent again: the agent, not the provider, ended it"
                            ),
                        ));
                    }
                    Some(o) if !on.contains(&o) => on.push(o),
                    Some(_) => return Err(invalid(k, format!("{name:?} is listed twice"))),
                    None => {
                        return Err(invalid(
                            k,
                            format!(
                                "{name:?} is not an outcome (retryable: {})",
                                retryable.join(", ")
                            ),
                        ));
                    }
                }
            }
            on
        }
    };
    let max_retry_after_ms = match r.max_retry_after_s {
        None => d.max_retry_after_ms,
        Some(s) => check_wait_s(key("max_retry_after_s"), s)?,
    };
    Ok(RetryPolicy {
        max_retries,
        backoff_ms,
        on,
        honour_retry_after: r.honour_retry_after.unwrap_or(d.honour_retry_after),
        max_retry_after_ms,
    })
}

/// `turns`, `follow_ups`, `cache_nonce` and `retry` of `scenarios[i]`: the policy and the
/// explicit follow-ups (`None`: use the builtin ones per prompt).
pub(super) fn validate_policy(
    i: usize,
    s: &ScenarioSection,
) -> Result<(ClientPolicy, Option<Vec<String>>), CampaignError> {
    let key = |field: &str| format!("scenarios[{i}].{field}");
    if !(1..=MAX_TURNS).contains(&s.turns) {
        return Err(invalid(
            key("turns"),
            format!("{} is not in 1..={MAX_TURNS}", s.turns),
        ));
    }
    let follow_ups = match &s.follow_ups {
        None => None,
        Some(_) if s.turns == 1 => {
            return Err(invalid(
                key("follow_ups"),
                "only multi-turn scenarios send follow-ups: set turns = 2 or more",
            ));
        }
        Some(list) => {
            let need = (s.turns - 1) as usize;
            if list.len() < need {
                return Err(invalid(
                    key("follow_ups"),
                    format!(
                        "{} given, turns = {} needs {need} (one user message for each of turns 2..={})",
                        list.len(),
                        s.turns,
                        s.turns
                    ),
                ));
            }
            if let Some(j) = list.iter().position(|f| f.trim().is_empty()) {
                return Err(invalid(
                    key(&format!("follow_ups[{j}]")),
                    "must not be empty",
                ));
            }
            Some(list[..need].to_vec())
        }
    };
    let retry = s.retry.as_ref().map(|r| validate_retry(i, r)).transpose()?;
    let max_response_bytes = match s.max_response_bytes {
        None => DEFAULT_MAX_RESPONSE_BYTES,
        Some(n) if n >= MIN_MAX_RESPONSE_BYTES => n,
        Some(n) => {
            return Err(invalid(
                key("max_response_bytes"),
                format!("{n} is below the smallest allowed, {MIN_MAX_RESPONSE_BYTES} (1 KiB)"),
            ));
        }
    };
    Ok((
        ClientPolicy {
            turns: s.turns,
            cache_nonce: s.cache_nonce,
            retry,
            max_response_bytes,
        },
        follow_ups,
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::test_support::{GOOD, err_of};
    use crate::campaign::{load_file, load_toml_str};

    #[test]
    fn the_response_byte_cap_defaults_to_64_mib_and_is_checked() {
        let plan = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(
            plan.scenarios[0].policy.max_response_bytes,
            DEFAULT_MAX_RESPONSE_BYTES
        );
        assert_eq!(DEFAULT_MAX_RESPONSE_BYTES, 64 << 20);
        let text = GOOD.replace(
            "max_tokens = 32",
            "max_tokens = 32\nmax_response_bytes = 4096",
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        assert_eq!(plan.scenarios[0].policy.max_response_bytes, 4096);
        let text = GOOD.replace(
            "max_tokens = 32",
            "max_tokens = 32\nmax_response_bytes = 10",
        );
        let e = err_of(&text);
        assert!(e.contains("scenarios[0].max_response_bytes"), "{e}");
        assert!(e.contains("1024"), "{e}");
    }

    #[test]
    fn turns_nonce_retry_and_passback_become_part_of_the_plan() {
        let text = GOOD
            .replace("short-qa-en-*", "short-qa-*")
            .replace(
                "max_tokens = 32",
                "max_tokens = 32\nturns = 3\ncache_nonce = true\nretry = { backoff_s = [0.5, 2], on = [\"throttled\", \"timeout_ttft\"], max_retry_after_s = 10 }",
            )
            .replace("api_key_env = \"A_KEY\"", "api_key_env = \"A_KEY\"\npass_reasoning = true");
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        assert!(plan.providers[0].pass_reasoning);
        let s = &plan.scenarios[0];
        assert_eq!((s.policy.turns, s.policy.cache_nonce), (3, true));
        let r = s.policy.retry.as_ref().unwrap();
        assert_eq!(r.max_retries, 3);
        assert_eq!(r.backoff_ms, [500, 2_000]);
        assert_eq!(r.on, [Outcome::Throttled, Outcome::TimeoutTtft]);
        assert!(r.honour_retry_after);
        assert_eq!(r.max_retry_after_ms, 10_000);
        // Builtin follow-ups in each prompt's language, one per turn after the first.
        let en = s
            .prompts
            .iter()
            .find(|p| p.id == "short-qa-en-001")
            .unwrap();
        let zh = s
            .prompts
            .iter()
            .find(|p| p.id == "short-qa-zh-001")
            .unwrap();
        assert_eq!(en.follow_ups, crate::prompts::FOLLOW_UPS_EN[..2]);
        assert_eq!(zh.follow_ups, crate::prompts::FOLLOW_UPS_ZH[..2]);
        // Own follow-ups: the first turns − 1 are used.
        let own = text.replace(
            "turns = 3",
            "turns = 2\nfollow_ups = [\"And then?\", \"unused\"]",
        );
        let plan = load_toml_str(&own, Path::new(".")).unwrap();
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.follow_ups == ["And then?"])
        );
        // `retry = {}` is the default policy; a plain scenario has the default (single-turn)
        // policy and no follow-ups.
        let plan = load_toml_str(
            &GOOD.replace("max_tokens = 32", "max_tokens = 32\n[scenarios.retry]"),
            Path::new("."),
        )
        .unwrap();
        assert_eq!(plan.scenarios[0].policy.retry, Some(RetryPolicy::default()));
        let plain = load_toml_str(GOOD, Path::new(".")).unwrap();
        assert_eq!(plain.scenarios[0].policy, ClientPolicy::default());
        assert!(
            plain.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.follow_ups.is_empty())
        );
        assert!(!plain.providers[0].pass_reasoning);
    }

    #[test]
    fn the_multi_turn_example_validates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/multi-turn.toml");
        let plan = load_file(&path).unwrap();
        let s = &plan.scenarios[0];
        assert_eq!(s.policy.turns, 3);
        assert!(s.policy.cache_nonce);
        assert_eq!(s.policy.retry.as_ref().unwrap().backoff_ms, [1_000, 2_000]);
        assert!(s.prompts.iter().all(|p| p.follow_ups.len() == 2));
        assert!(plan.providers[0].pass_reasoning && !plan.providers[1].pass_reasoning);
    }

    #[test]
    fn policy_errors_name_the_key() {
        let with =
            |extra: &str| GOOD.replace("max_tokens = 32", &format!("max_tokens = 32\n{extra}"));
        let cases = [
            (with("turns = 0"), "scenarios[0].turns: 0 is not in 1..=10"),
            (
                with("turns = 11"),
                "scenarios[0].turns: 11 is not in 1..=10",
            ),
            (with("turns = -1"), "scenarios[0].turns"),
            (
                with("retry = { backoff_s = [1, -2] }"),
                "scenarios[0].retry.backoff_s[1]: -2 is not a wait in seconds",
            ),
            (
                with("retry = { backoff_s = [] }"),
                "scenarios[0].retry.backoff_s: ",
            ),
            (
                with("retry = { max_retries = 11 }"),
                "scenarios[0].retry.max_retries: 11 is not in 0..=10",
            ),
            (
                with("retry = { on = [\"ok\"] }"),
                "scenarios[0].retry.on[0]: ",
            ),
            (
                with("retry = { on = [\"throttled\", \"history_rejected\"] }"),
                "scenarios[0].retry.on[1]: ",
            ),
            (
                with("retry = { on = [\"429\"] }"),
                "scenarios[0].retry.on[0]: \"429\" is not an outcome (retryable: http_4xx, throttled",
            ),
            (with("retry = { on = [] }"), "scenarios[0].retry.on: "),
            (
                with("retry = { max_retry_after_s = nan }"),
                "scenarios[0].retry.max_retry_after_s: ",
            ),
            (with("retry = { max_retrys = 2 }"), "max_retrys"),
            (
                with("follow_ups = [\"more?\"]"),
                "scenarios[0].follow_ups: only multi-turn scenarios",
            ),
            (
                with("turns = 3\nfollow_ups = [\"more?\"]"),
                "scenarios[0].follow_ups: 1 given, turns = 3 needs 2",
            ),
            (
                with("turns = 2\nfollow_ups = [\" \"]"),
                "scenarios[0].follow_ups[0]: must not be empty",
            ),
            (
                GOOD.replace("api_key_env = \"A_KEY\"", "pass_reasoning = \"yes\""),
                "providers[0].pass_reasoning",
            ),
        ];
        for (text, says) in cases {
            let e = err_of(&text);
            assert!(e.contains(says), "error {e:?} should contain {says:?}");
        }
    }
}
