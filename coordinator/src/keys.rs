//! API key variables the agents lack, checked before a plan goes to them.
//!
//! Each agent says in its hello which environment variables it has with a usable API key
//! value (names only, never values: `AgentHello.key_env_names`). A plan whose provider names
//! an `api_key_env` that a targeted agent lacks would send that provider's requests without
//! an `Authorization` header, and a provider that does not check keys (a self-hosted server)
//! would answer them as if nothing were wrong. So a launch is refused, naming every agent,
//! region, provider and variable, unless it is launched with `--allow-missing-keys`; then it
//! goes ahead and the reply carries the same lines as warnings. The same check runs when a
//! series' run is launched (a refused run is retried every second, the series' warning says
//! why) and when an agent rejoins a running campaign (restarted: the plan is not pushed again
//! to an agent that lost a key the campaign was not allowed to miss; it is logged and the
//! agent's part ends at the campaign's deadline). Agents older than the report are not
//! checked. The variables of secret headers (`headers = { name = { env = "VAR" } }`) are
//! checked the same way: the agent reports every variable with a value usable in a header.

use std::collections::BTreeSet;

use latmesh_core::api::HeaderValueSource;
use latmesh_core::plan::Plan;

/// A provider's API key variable that an agent lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingKey {
    /// Agent id.
    pub agent_id: String,
    /// The agent's region.
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// The provider's `api_key_env`, or the variable of one of its secret headers.
    pub env: String,
    /// The secret header the variable fills; `None`: the API key.
    pub header: Option<String>,
}

impl std::fmt::Display for MissingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "agent {} (region {}) lacks ${} for provider {}",
            self.agent_id, self.region, self.env, self.provider
        )?;
        match &self.header {
            Some(h) => write!(f, " (header {h})"),
            None => Ok(()),
        }
    }
}

/// The API key and secret header variables of `plan`'s providers missing on agent
/// `agent_id` in `region`, whose hello reported `key_env` (`None`: an agent that does not
/// report, not checked).
pub fn missing_keys(
    plan: &Plan,
    agent_id: &str,
    region: &str,
    key_env: Option<&BTreeSet<String>>,
) -> Vec<MissingKey> {
    let Some(have) = key_env else {
        return Vec::new();
    };
    plan.providers
        .iter()
        .flat_map(|p| {
            let key = p.api_key_env.iter().map(|env| (env, None));
            let headers = p.request.headers.iter().filter_map(|(name, v)| match v {
                HeaderValueSource::Env { env } => Some((env, Some(name.clone()))),
                HeaderValueSource::Literal(_) => None,
            });
            key.chain(headers)
                .filter(|(env, _)| !have.contains(*env))
                .map(|(env, header)| MissingKey {
                    agent_id: agent_id.to_string(),
                    region: region.to_string(),
                    provider: p.name.clone(),
                    env: env.clone(),
                    header,
                })
        })
        .collect()
}

/// The refusal of a launch for `missing` (not empty): every line, then what to do.
pub fn refusal(missing: &[MissingKey]) -> String {
    format!(
        "{}: set the variable(s) on those agents and restart them, or launch with --allow-missing-keys (their requests then go without that API key or header)",
        missing
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// The warning of a launch allowed with `missing` (not empty).
pub fn warning(m: &MissingKey) -> String {
    match &m.header {
        Some(h) => format!("{m}: its requests to {} go without header {h}", m.provider),
        None => format!("{m}: its requests to {} go without an API key", m.provider),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::plan::ProviderSpec;

    fn plan() -> Plan {
        let mut p = latmesh_core::campaign::load_toml_str(
            r#"
[campaign]
name = "t"
regions = ["us-east"]
[rounds]
count = 1
interval_s = 1
gap_ms = 1
[[scenarios]]
name = "s"
prompt_ids = ["short-qa-en-*"]
max_tokens = 4
[[providers]]
name = "a"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
api_key_env = "A_KEY"
[[providers]]
name = "b"
base_url = "http://127.0.0.1:9/v1"
model_id = "m"
headers = { "x-secret" = { env = "B_HDR" }, "x-plain" = "v" }
"#,
            std::path::Path::new("."),
        )
        .unwrap();
        p.providers.push(ProviderSpec {
            name: "c".into(),
            api_key_env: Some("C_KEY".into()),
            request: latmesh_core::api::RequestShape::default(),
            ..p.providers[1].clone()
        });
        p
    }

    #[test]
    fn only_reported_and_absent_variables_are_missing() {
        let p = plan();
        let have: BTreeSet<String> = ["C_KEY".to_string()].into();
        let missing = missing_keys(&p, "us-east-1", "us-east", Some(&have));
        assert_eq!(
            missing.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "agent us-east-1 (region us-east) lacks $A_KEY for provider a",
                "agent us-east-1 (region us-east) lacks $B_HDR for provider b (header x-secret)"
            ]
        );
        assert!(refusal(&missing).contains("--allow-missing-keys"));
        assert!(warning(&missing[1]).ends_with("its requests to b go without header x-secret"));
        assert!(missing_keys(&p, "x", "us-east", None).is_empty());
        let all: BTreeSet<String> = ["A_KEY", "B_HDR", "C_KEY"].map(String::from).into();
        assert!(missing_keys(&p, "x", "us-east", Some(&all)).is_empty());
    }
}
