//! Reading a campaign file: TOML or YAML through figment, `LATMESH_*` overrides layered on
//! top ([`super::env_overrides`]), duplicate YAML keys refused, `[windows]` kept in declaration
//! order, and figment's errors rewritten in the file's own terms; then [`super::validate`].

use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Toml, Yaml};
use serde::Deserialize;

use super::env_overrides;
use super::error::CampaignError;
use super::file::CampaignFile;
use super::validate::validate;
use crate::plan::Plan;

/// Loads and validates a campaign file (`.toml`, `.yaml`/`.yml`) with `LATMESH_*` overrides.
///
/// # Errors
/// [`CampaignError`] naming the key that is wrong.
pub fn load_file(path: &Path) -> Result<Plan, CampaignError> {
    if path.is_dir() {
        return Err(CampaignError::Parse(format!(
            "campaign file {} is a directory",
            path.display()
        )));
    }
    if !path.is_file() {
        return Err(CampaignError::Parse(format!(
            "campaign file {} does not exist",
            path.display()
        )));
    }
    let is_yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    let fig = if is_yaml {
        Figment::from(Yaml::file(path))
    } else {
        Figment::from(Toml::file(path))
    };
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let text = std::fs::read_to_string(path).ok();
    if is_yaml && let Some(text) = &text {
        crate::yaml_keys::check_no_duplicate_keys(text)
            .map_err(|e| CampaignError::Parse(format!("{}: {e}", path.display())))?;
    }
    let order = text
        .map(|text| declared_window_order(&text, is_yaml))
        .unwrap_or_default();
    // Parse errors name the file already (figment's source, or `path` for a problem of the
    // whole file); validation errors get it here.
    from_figment(fig, &base, &order, Some(path)).map_err(|e| match e {
        CampaignError::Invalid { key, message } => CampaignError::Invalid {
            key: format!("{}: {key}", path.display()),
            message,
        },
        CampaignError::Prompts(p) => {
            CampaignError::Parse(format!("{}: campaign.prompt_set: {p}", path.display()))
        }
        other => other,
    })
}

/// Loads and validates campaign TOML text (relative paths resolve against `base_dir`), with
/// `LATMESH_*` overrides.
///
/// # Errors
/// [`CampaignError`] naming the key that is wrong.
pub fn load_toml_str(text: &str, base_dir: &Path) -> Result<Plan, CampaignError> {
    let order = declared_window_order(text, false);
    from_figment(Figment::from(Toml::string(text)), base_dir, &order, None)
}

/// Extracts and validates; `window_order` is the declaration order of `[windows]` (figment
/// hands its keys over sorted); `file` names the source of problems figment has none for
/// (a missing `[campaign]`).
fn from_figment(
    fig: Figment,
    base_dir: &Path,
    window_order: &[String],
    file: Option<&Path>,
) -> Result<Plan, CampaignError> {
    // A mistyped override would otherwise be dropped by the filter below, in silence.
    env_overrides::check_env(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
        .map_err(CampaignError::Parse)?;
    let env = Env::prefixed("LATMESH_")
        .filter(|k| {
            let k = k.as_str().to_ascii_lowercase();
            k.starts_with("campaign__") || k.starts_with("rounds__")
        })
        .split("__");
    let mut file: CampaignFile = fig
        .merge(env)
        .extract()
        .map_err(|e| figment_error(e, file))?;
    let rank = |name: &str| {
        window_order
            .iter()
            .position(|n| n == name)
            .unwrap_or(usize::MAX)
    };
    file.windows.0.sort_by_key(|(name, _)| rank(name));
    validate(file, base_dir)
}

/// One line per problem: `FILE: key.path: what is wrong`, in the file's own terms (no Rust
/// type names, no figment profile prefix); FILE is the path figment read (as the user can
/// find it, not relative to the working directory), else `file`.
fn figment_error(e: figment::Error, file: Option<&Path>) -> CampaignError {
    let lines: Vec<String> = e
        .into_iter()
        .map(|e| {
            let mut kind = unknown_name(&e.kind).unwrap_or_else(|| e.kind.to_string());
            if let Some(at) = kind.find("expected struct ") {
                kind.truncate(at);
                kind.push_str("expected a table");
            }
            // Keys as validation names them: `scenarios[0].turns`.
            let mut key = String::new();
            for part in &e.path {
                if part.parse::<usize>().is_ok() {
                    key.push_str(&format!("[{part}]"));
                } else {
                    if !key.is_empty() {
                        key.push('.');
                    }
                    key.push_str(part);
                }
            }
            let from_env = e
                .metadata
                .as_ref()
                .is_some_and(|m| m.name.contains("environment"));
            let source = if from_env {
                Some(format!(
                    "environment variable LATMESH_{}",
                    e.path.join("__").to_ascii_uppercase()
                ))
            } else {
                match e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
                    Some(figment::Source::File(p)) => Some(p.display().to_string()),
                    Some(s) => Some(s.to_string()),
                    None => file.map(|f| f.display().to_string()),
                }
            };
            match (source, key.is_empty()) {
                (Some(src), false) => format!("{src}: {key}: {kind}"),
                (Some(src), true) => format!("{src}: {kind}"),
                (None, false) => format!("{key}: {kind}"),
                (None, true) => kind,
            }
        })
        .collect();
    CampaignError::Parse(lines.join("\n"))
}

/// An unknown key or value in the file's terms, with the valid one it was most likely meant
/// to be: `unknown key "sed" (did you mean "seed"? valid here: name, seed, …)`. `None` for
/// every other kind of error (figment's own text is clear there).
fn unknown_name(kind: &figment::error::Kind) -> Option<String> {
    use figment::error::Kind;
    let (what, found, expected) = match kind {
        Kind::UnknownField(found, expected) => ("key", found.as_str(), *expected),
        Kind::UnknownVariant(found, expected) => ("value", found.as_str(), *expected),
        _ => return None,
    };
    let valid = expected
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(
        match crate::suggest::did_you_mean(found, expected.iter().copied()) {
            Some(near) => {
                format!("unknown {what} {found:?} (did you mean {near:?}? valid here: {valid})")
            }
            None => format!("unknown {what} {found:?} (valid here: {valid})"),
        },
    )
}

/// The keys of `[windows]` in the order the text declares them; empty when the text does not
/// parse (figment then reports why).
fn declared_window_order(text: &str, yaml: bool) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a table")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut out = Vec::new();
                    while let Some(k) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        out.push(k);
                    }
                    Ok(Keys(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        windows: Option<Keys>,
    }
    let probe: Option<Probe> = if yaml {
        serde_yaml::from_str(text).ok()
    } else {
        toml::from_str(text).ok()
    };
    probe
        .and_then(|p| p.windows)
        .map(|k| k.0)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::campaign::provider::check_base_url;
    use crate::campaign::test_support::{GOOD, err_of};

    #[test]
    fn errors_name_the_file_the_variable_and_credentials_in_urls() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/demo.toml"),
        )
        .unwrap();
        std::fs::write(&path, text.replacen("count = ", "count = 0 # ", 1)).unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: rounds", path.display())), "{e}");
        let e = load_file(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        // A problem of the whole file (no [campaign]) and a type error both name it.
        std::fs::write(&path, "").unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert_eq!(e, format!("{}: missing field `campaign`", path.display()));
        std::fs::write(
            &path,
            text.replacen("max_tokens = ", "max_tokens = \"x\" # ", 1),
        )
        .unwrap();
        let e = load_file(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: scenarios[", path.display())),
            "{e}"
        );
        assert!(check_base_url("https://u:sk-secret@api.example/v1").is_err());
        // A query is refused (not as credentials: the @ is in the query), never quoted.
        let e = check_base_url("https://api.example/v1?x=a@b").unwrap_err();
        assert!(
            e.starts_with("has a query (?…)") && e.contains("query table"),
            "{e}"
        );
        assert!(!e.contains("a@b"), "{e}");
        let e = check_base_url("https://api.example/v1#frag").unwrap_err();
        assert!(e.starts_with("has a fragment (#…)"), "{e}");
        assert!(check_base_url("https://api.example/v1/?existing=1").is_err());
    }

    #[test]
    fn parse_errors_speak_the_file_s_terms() {
        let e = err_of(&GOOD.replace("count = 3", "count = \"three\""));
        assert!(e.starts_with("rounds.count: "), "{e}");
        assert!(!e.contains("default."), "{e}");
        let e = err_of(&GOOD.replace("[rounds]\ncount = 3", "rounds = 3\n[x]\ncount = 3"));
        assert!(!e.contains("struct"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            GOOD.replace("[campaign]", "[campaign]\nprompt_set = \"nope.jsonl\""),
        )
        .unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert_eq!(e.matches("nope.jsonl").count(), 1, "{e}");
        std::fs::write(&file, GOOD.replace("gap_ms = 100", "gap_ms = -1")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("rounds.gap_ms"), "{e}");
    }

    #[test]
    fn unknown_keys_and_values_suggest_the_one_meant() {
        let e = err_of(&GOOD.replace(
            "count = 3",
            "count = 3
cont = 4",
        ));
        assert!(
            e.starts_with(
                "rounds.cont: unknown key \"cont\" (did you mean \"count\"? valid here: \"count\""
            ),
            "{e}"
        );
        let e = err_of(&GOOD.replace("model_id = ", "model = "));
        assert!(
            e.contains("unknown key \"model\" (did you mean \"model_id\"?"),
            "{e}"
        );
        // Nothing near: the valid keys, no guess.
        let e = err_of(&GOOD.replace(
            "count = 3",
            "count = 3
zzzzzzzz = 4",
        ));
        assert!(
            e.contains("unknown key \"zzzzzzzz\" (valid here: ") && !e.contains("did you mean"),
            "{e}"
        );
    }

    #[test]
    fn yaml_files_load_like_toml() {
        let yaml = r#"
campaign:
  name: t
  regions: [us-east]
rounds:
  count: 2
  interval_s: 1.5
  gap_ms: 10
scenarios:
  - name: chat
    prompt_ids: ["code-*"]
    stream: false
    max_tokens: 16
providers:
  - name: a
    base_url: http://127.0.0.1:9/v1
    model_id: m
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        assert_eq!(plan.rounds.interval_ms, 1_500);
        assert!(!plan.scenarios[0].stream);
        assert!(
            plan.scenarios[0]
                .prompts
                .iter()
                .all(|p| p.id.starts_with("code-"))
        );
        std::fs::write(&file, yaml.replace("max_tokens: 16", "max_tokens: lots")).unwrap();
        let e = load_file(&file).unwrap_err().to_string();
        assert!(e.contains("c.yaml") && e.contains("max_tokens"), "{e}");
    }

    #[test]
    fn keys_written_twice_are_errors_naming_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("c.yaml");
        std::fs::write(
            &yaml,
            "campaign: {name: t, regions: [us-east]}\nrounds:\n  count: 2\n  interval_s: 1\n  gap_ms: 10\n  count: 1000000\nscenarios:\n  - {name: chat, prompt_ids: [\"code-*\"], max_tokens: 16}\nproviders:\n  - {name: a, base_url: \"http://127.0.0.1:9/v1\", model_id: m}\n",
        )
        .unwrap();
        let e = load_file(&yaml).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{}: duplicate key `rounds.count`", yaml.display())),
            "{e}"
        );
        let toml = dir.path().join("c.toml");
        std::fs::write(
            &toml,
            GOOD.replace("count = 3", "count = 3\ncount = 1000000"),
        )
        .unwrap();
        let e = load_file(&toml).unwrap_err().to_string();
        assert!(e.contains("c.toml") && e.contains("duplicate key"), "{e}");
        assert!(e.contains("count"), "{e}");
    }

    #[test]
    fn window_order_is_the_declaration_order_in_toml_and_yaml() {
        let text = format!(
            "{GOOD}[campaign.timezones]\nus-east = \"UTC\"\neu-west = \"UTC\"\n[windows]\nzeta = \"08:00-18:00\"\nalpha = \"12:00-13:00\"\nmid = \"00:00-01:00\"\n"
        );
        let plan = load_toml_str(&text, Path::new(".")).unwrap();
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha", "mid"]);
        let yaml = r#"
campaign:
  name: t
  regions: [us-east]
  timezones:
    us-east: Asia/Singapore
rounds: {count: 2, interval_s: 1.5, gap_ms: 10}
scenarios:
  - {name: chat, prompt_ids: ["code-*"], max_tokens: 16}
providers:
  - {name: a, base_url: "http://127.0.0.1:9/v1", model_id: m}
windows:
  zeta: "08:00-18:00"
  alpha: "12:00-13:00"
"#;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yml");
        std::fs::write(&file, yaml).unwrap();
        let plan = load_file(&file).unwrap();
        let names: Vec<&str> = plan.windows.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["zeta", "alpha"]);
        assert_eq!(plan.timezones["us-east"], "Asia/Singapore");
    }
}
