//! `LATMESH_*` environment variables around a campaign file: which are campaign overrides,
//! which are the tools' own settings, and which are typos.
//!
//! A campaign file's `[campaign]` and `[rounds]` keys can be overridden from the environment:
//! `LATMESH_<SECTION>__<KEY>` (section and key separated by a double underscore, any case),
//! e.g. `LATMESH_ROUNDS__COUNT=3`; the valid keys are read from the sections' own field lists
//! ([`override_keys`]), never written twice. Every other `LATMESH_*` variable must be a setting
//! of a latmesh binary, test harness or script ([`ENV_SETTINGS`], [`ENV_SETTING_FAMILIES`]);
//! anything else (`LATMESH_ROUND__COUNT`, `LATMESH_ROUNDS_COUNT`) is an error naming the
//! variable and the nearest valid name, instead of a setting silently not applied. A unit test
//! scans the repository's sources, scripts and deploy files for `LATMESH_` names and fails on
//! one this module does not know.

use crate::suggest::closest;

/// Prefix of every latmesh environment variable.
pub const ENV_PREFIX: &str = "LATMESH_";

/// The binaries' own settings (clap `env =`, read by `latmesh`, `latmesh-agent`,
/// `latmesh-sim`), and those of the test harnesses, benches and scripts: never campaign
/// overrides. Keep in step with the code (the repository scan test says which is missing).
pub const ENV_SETTINGS: &[&str] = &[
    "LATMESH_ADMIN_TOKEN",
    "LATMESH_ADMIN_TOKEN_FILE",
    "LATMESH_AGENT_EMULATE_REGION",
    "LATMESH_AGENT_HEARTBEAT_S",
    "LATMESH_AGENT_ID",
    "LATMESH_AGENT_METRICS_LISTEN",
    "LATMESH_AGENT_PROVIDER_CA_FILE",
    "LATMESH_AGENT_SPOOL_DIR",
    "LATMESH_AGENT_SPOOL_MAX_MIB",
    "LATMESH_AGENT_TOKEN",
    "LATMESH_AGENT_TOKEN_FILE",
    "LATMESH_AGENT_WORKER_THREADS",
    "LATMESH_CACHE",
    "LATMESH_CA_FILE",
    "LATMESH_CA_PEM",
    "LATMESH_CHAOS_API_KEY",
    "LATMESH_CLICKHOUSE_CONNECT_TIMEOUT_S",
    "LATMESH_CLICKHOUSE_DB",
    "LATMESH_CLICKHOUSE_HTTP_PORT",
    "LATMESH_CLICKHOUSE_START_TIMEOUT_S",
    "LATMESH_CLICKHOUSE_STATE_DIR",
    "LATMESH_CLICKHOUSE_TCP_PORT",
    "LATMESH_CLICKHOUSE_TIMEOUT_S",
    "LATMESH_CLICKHOUSE_URL",
    "LATMESH_COORDINATOR",
    "LATMESH_DEPLOY_VENV",
    "LATMESH_LISTEN",
    "LATMESH_LOG",
    "LATMESH_MERGE_BATCHES",
    "LATMESH_METRICS_LISTEN",
    "LATMESH_PIDS",
    "LATMESH_REGION",
    "LATMESH_SIM_URL",
    "LATMESH_SKIP_BROWSER",
    "LATMESH_SSE_CASES",
    "LATMESH_STATE_DIR",
    "LATMESH_TF_PLUGIN_MIRROR",
    "LATMESH_TLS_CERT",
    "LATMESH_TLS_CERT_PEM",
    "LATMESH_TLS_KEY",
    "LATMESH_TLS_KEY_PEM",
];

/// Families of settings whose names are built at run time (`LATMESH_REAL_<SERVER>_PORT`,
/// `LATMESH_LOCAL_<OPTION>`, the benches' knobs, the tests' own variables): any variable with
/// one of these prefixes is a setting.
pub const ENV_SETTING_FAMILIES: &[&str] = &[
    "LATMESH_ACC_",
    "LATMESH_BENCH_",
    "LATMESH_LOAD_",
    "LATMESH_LOCAL_",
    "LATMESH_PEERS_",
    "LATMESH_REAL_",
    "LATMESH_TEST_",
];

/// Whether `name` (a full variable name) is a setting of a latmesh tool.
pub fn is_setting(name: &str) -> bool {
    ENV_SETTINGS.contains(&name) || ENV_SETTING_FAMILIES.iter().any(|f| name.starts_with(f))
}

/// The campaign keys an environment variable may override, lowercase, as figment reads them
/// (`campaign__seed`, `rounds__count`); `campaign__timezones__<region>` is also accepted.
pub fn override_keys() -> Vec<String> {
    let mut out = Vec::new();
    for (section, fields) in [
        ("campaign", fields_of::<super::file::CampaignSection>()),
        ("rounds", fields_of::<super::file::RoundsSection>()),
    ] {
        out.extend(fields.iter().map(|f| format!("{section}__{f}")));
    }
    out
}

/// Whether `key` (the part after `LATMESH_`, lowercase) is a campaign override figment maps
/// onto a real key.
fn is_override(key: &str, keys: &[String]) -> bool {
    keys.iter().any(|k| k == key)
        || key
            .strip_prefix("campaign__timezones__")
            .is_some_and(|region| !region.is_empty() && !region.contains("__"))
}

/// The campaign overrides among `vars` (variable names), each with the key it sets:
/// `("LATMESH_ROUNDS__COUNT", "rounds.count")`, in the order given. What `validate` and
/// `launch` print, so a stale `export` does not change a campaign unseen.
pub fn applied_overrides<I, K>(vars: I) -> Vec<(String, String)>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
{
    let keys = override_keys();
    vars.into_iter()
        .filter_map(|name| {
            let name = name.as_ref();
            let rest = name.strip_prefix(ENV_PREFIX)?.to_ascii_lowercase();
            (!is_setting(name) && is_override(&rest, &keys))
                .then(|| (name.to_string(), rest.replace("__", ".")))
        })
        .collect()
}

/// [`applied_overrides`] of this process's environment, as one line for the user
/// (`None` without any): `environment overrides the campaign file: LATMESH_ROUNDS__COUNT
/// sets rounds.count`.
pub fn applied_overrides_note() -> Option<String> {
    let mut applied =
        applied_overrides(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()));
    applied.sort();
    (!applied.is_empty()).then(|| {
        let list: Vec<String> = applied
            .iter()
            .map(|(var, key)| format!("{var} sets {key}"))
            .collect();
        format!(
            "environment overrides the campaign file: {}",
            list.join(", ")
        )
    })
}

/// Checks the `LATMESH_*` variables among `vars` (name, value; the value is never read): each
/// must be a campaign override or a setting.
///
/// # Errors
/// One line per unknown variable, naming it and the nearest valid variable.
pub fn check_env<I, K>(vars: I) -> Result<(), String>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
{
    let keys = override_keys();
    let mut problems = Vec::new();
    for name in vars {
        let name = name.as_ref();
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if is_setting(name) || is_override(&rest.to_ascii_lowercase(), &keys) {
            continue;
        }
        let candidates = keys
            .iter()
            .map(|k| format!("{ENV_PREFIX}{}", k.to_ascii_uppercase()))
            .chain(ENV_SETTINGS.iter().map(|s| (*s).to_string()));
        let candidates: Vec<String> = candidates.collect();
        let nearest = closest(name, candidates.iter().map(String::as_str)).unwrap_or_default();
        problems.push(format!(
            "environment variable {name}: not a campaign override nor a latmesh setting (did you mean {nearest}? campaign overrides are LATMESH_<SECTION>__<KEY> of: {})",
            keys.iter()
                .map(|k| k.to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The field names serde's derive gives a struct `T` (what a file may write in its section).
fn fields_of<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Fields(Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl serde::de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> serde::Deserializer<'de> for &mut Fields {
        type Error = Stop;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0 = Some(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut d = Fields(None);
    let _ = T::deserialize(&mut d);
    d.0.unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    #[test]
    fn applied_overrides_name_the_key_they_set() {
        let got = applied_overrides([
            "LATMESH_ROUNDS__COUNT",
            "LATMESH_LOG",
            "PATH",
            "LATMESH_CAMPAIGN__TIMEZONES__US-EAST",
            "LATMESH_REAL_STATE_DIR",
        ]);
        assert_eq!(
            got,
            [
                (
                    "LATMESH_ROUNDS__COUNT".to_string(),
                    "rounds.count".to_string()
                ),
                (
                    "LATMESH_CAMPAIGN__TIMEZONES__US-EAST".to_string(),
                    "campaign.timezones.us-east".to_string()
                ),
            ]
        );
    }

    use super::*;

    #[test]
    fn override_keys_are_the_sections_fields() {
        let keys = override_keys();
        for k in [
            "campaign__name",
            "campaign__seed",
            "campaign__regions",
            "rounds__count",
            "rounds__interval_s",
            "rounds__gap_ms",
        ] {
            assert!(keys.iter().any(|x| x == k), "{k} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|k| k.starts_with("scenarios")));
    }

    #[test]
    fn a_mistyped_override_names_the_variable_and_the_nearest_key() {
        let e = check_env(["PATH", "LATMESH_ROUND__COUNT"]).unwrap_err();
        assert!(
            e.starts_with("environment variable LATMESH_ROUND__COUNT: "),
            "{e}"
        );
        assert!(e.contains("did you mean LATMESH_ROUNDS__COUNT?"), "{e}");
        let e = check_env(["LATMESH_ROUNDS_COUNT"]).unwrap_err();
        assert!(e.contains("did you mean LATMESH_ROUNDS__COUNT?"), "{e}");
        let e = check_env(["LATMESH_CAMPAIGN__SEEED", "LATMESH_LOGG"]).unwrap_err();
        assert!(e.contains("did you mean LATMESH_CAMPAIGN__SEED?"), "{e}");
        assert!(
            e.contains("LATMESH_LOGG: ") && e.contains("did you mean LATMESH_LOG?"),
            "{e}"
        );
    }

    #[test]
    fn settings_and_valid_overrides_pass() {
        let ok = [
            "LATMESH_LOG",
            "LATMESH_CLICKHOUSE_URL",
            "LATMESH_REAL_STATE_DIR",
            "LATMESH_REAL_LLAMA_PORT",
            "LATMESH_LOCAL_SIM_PORT",
            "LATMESH_ROUNDS__COUNT",
            "latmesh_rounds__count",
            "LATMESH_CAMPAIGN__SEED",
            "LATMESH_CAMPAIGN__TIMEZONES__EU",
            "HOME",
        ];
        assert_eq!(check_env(ok), Ok(()));
    }

    /// Every `LATMESH_` name written anywhere in the repository (sources, scripts, deploy
    /// files, docs) is a setting or a valid override: a new setting cannot be forgotten here
    /// and then refused as a typo.
    #[test]
    fn every_latmesh_variable_in_the_repository_is_known() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let keys = override_keys();
        let mut unknown = std::collections::BTreeSet::new();
        let mut stack = vec![root];
        let mut files = 0;
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') || name == "target" || name == "node_modules" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                files += 1;
                let mut rest = text.as_str();
                while let Some(at) = rest.find(ENV_PREFIX) {
                    let tail = &rest[at..];
                    let end = tail
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(tail.len());
                    let var = &tail[..end];
                    rest = &tail[end.max(ENV_PREFIX.len())..];
                    // A prefix in prose or code (`LATMESH_REAL_*`, "LATMESH_AGENT_" + …).
                    if var.ends_with('_') {
                        continue;
                    }
                    let key = var[ENV_PREFIX.len()..].to_ascii_lowercase();
                    if !is_setting(var) && !is_override(&key, &keys) {
                        unknown.insert(var.to_string());
                    }
                }
            }
        }
        // The typos the docs and tests show on purpose.
        for typo in [
            "LATMESH_ROUND__COUNT",
            "LATMESH_ROUNDS_COUNT",
            "LATMESH_CAMPAIGN__SEEED",
            "LATMESH_LOGG",
            "LATMESH_AGENT_EMULATE_REGIONS",
        ] {
            unknown.remove(typo);
        }
        assert!(files > 100, "the scan found only {files} files");
        assert!(
            unknown.is_empty(),
            "LATMESH_ variables used in the repository but unknown to env_overrides (add settings to ENV_SETTINGS): {unknown:?}"
        );
    }
}
