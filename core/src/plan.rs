//! The validated test plan every agent runs, and its shared per-round probe order.
//!
//! A [`Plan`] is what `latmesh campaign launch` sends (as JSON) and what agents execute. Round
//! `r` starts at `start_at + r × interval`; its probes run in [`Plan::round_order`]`(r)`, the
//! same order in every region (a shuffle seeded by the campaign seed and `r`), probe `i` being
//! sent at round start + `i × gap`.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::prompts::Message;
use crate::windows::Window;

/// A provider endpoint. The API key itself never appears here: only the name of the
/// environment variable that holds it on the agents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderSpec {
    /// Unique name (column of the matrix).
    pub name: String,
    /// OpenAI-compatible base URL; latmesh POSTs to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Environment variable holding the API key on each agent (sent as a Bearer token).
    pub api_key_env: Option<String>,
    /// Model id sent in the request.
    pub model_id: String,
}

/// A prompt as carried by the plan: its stable id and messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanPrompt {
    /// Stable id from the prompt set.
    pub id: String,
    /// Messages sent.
    pub messages: Vec<Message>,
}

/// Per-attempt timeouts, seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    /// TCP (and TLS) connect.
    pub connect_s: f64,
    /// From `t_send` to the first token.
    pub ttft_s: f64,
    /// Longest gap between two body reads.
    pub idle_s: f64,
    /// The whole attempt.
    pub total_s: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_s: 10.0,
            ttft_s: 60.0,
            idle_s: 30.0,
            total_s: 120.0,
        }
    }
}

/// A scenario: prompts and fixed sampling parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSpec {
    /// Unique name.
    pub name: String,
    /// Stream the response (SSE) or not.
    pub stream: bool,
    /// `max_tokens` sent.
    pub max_tokens: u32,
    /// `temperature` sent, when set.
    pub temperature: Option<f64>,
    /// `top_p` sent, when set.
    pub top_p: Option<f64>,
    /// Timeouts of each attempt.
    pub timeouts: Timeouts,
    /// Prompts, used in turn: round `r` sends `prompts[r % len]`.
    pub prompts: Vec<PlanPrompt>,
}

/// Round timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundsSpec {
    /// Number of rounds.
    pub count: u32,
    /// Round `r` starts at `start_at + r × interval_ms`, ms.
    pub interval_ms: u64,
    /// Probe `i` of a round is sent at round start + `i × gap_ms`, ms.
    pub gap_ms: u64,
}

/// The validated plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Campaign name.
    pub name: String,
    /// Seed of the per-round provider order.
    pub seed: u64,
    /// Metric definitions version (DESIGN.md).
    pub metrics_version: u32,
    /// Regions to run in; the coordinator pushes the plan to connected agents of these regions.
    pub regions: Vec<String>,
    /// Round timing.
    pub rounds: RoundsSpec,
    /// Providers.
    pub providers: Vec<ProviderSpec>,
    /// Scenarios.
    pub scenarios: Vec<ScenarioSpec>,
    /// Name of the prompt set the prompts came from.
    pub prompt_set: String,
    /// Time zone of each region that has one: region → IANA name or `±HH:MM` (canonical
    /// text, see [`crate::windows::Zone`]). Absent from the JSON when empty, so plans without
    /// zones keep their [`Plan::hash`]; older plan JSON without the field parses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timezones: BTreeMap<String, String>,
    /// Named windows of local time, in declaration order (the first that contains a time
    /// wins; see [`crate::windows`]). Absent from the JSON when empty, like `timezones`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
}

/// One probe of a round: which provider, which scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index into [`Plan::providers`].
    pub provider: usize,
    /// Index into [`Plan::scenarios`].
    pub scenario: usize,
}

impl Plan {
    /// Probes per round (providers × scenarios).
    pub fn slots_per_round(&self) -> usize {
        self.providers.len() * self.scenarios.len()
    }

    /// Probes one agent makes over the whole plan (first attempts).
    pub fn probes_per_agent(&self) -> u64 {
        u64::from(self.rounds.count) * self.slots_per_round() as u64
    }

    /// The probe order of round `round`: every (provider, scenario) once, shuffled with a
    /// ChaCha8 generator seeded by (`seed`, `round`). Identical in every region.
    pub fn round_order(&self, round: u32) -> Vec<Slot> {
        let mut slots: Vec<Slot> = (0..self.providers.len())
            .flat_map(|provider| {
                (0..self.scenarios.len()).map(move |scenario| Slot { provider, scenario })
            })
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.seed ^ u64::from(round).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        slots.shuffle(&mut rng);
        slots
    }

    /// Offset of probe `slot` of round `round` from `start_at`, µs.
    pub fn probe_offset_us(&self, round: u32, slot: usize) -> u64 {
        u64::from(round) * self.rounds.interval_ms * 1000 + slot as u64 * self.rounds.gap_ms * 1000
    }

    /// The prompt round `round` of `scenario` sends.
    pub fn prompt_for(&self, scenario: usize, round: u32) -> &PlanPrompt {
        let prompts = &self.scenarios[scenario].prompts;
        &prompts[round as usize % prompts.len()]
    }

    /// Canonical JSON (what the wire carries).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("plans serialize")
    }

    /// Hex SHA-256 of [`Plan::to_json`].
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.to_json().as_bytes()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn plan(providers: usize, scenarios: usize) -> Plan {
        Plan {
            name: "t".into(),
            seed: 42,
            metrics_version: 1,
            regions: vec!["us-east".into()],
            rounds: RoundsSpec {
                count: 3,
                interval_ms: 2_000,
                gap_ms: 100,
            },
            providers: (0..providers)
                .map(|i| ProviderSpec {
                    name: format!("p{i}"),
                    base_url: "http://127.0.0.1:1/v1".into(),
                    api_key_env: None,
                    model_id: "m".into(),
                })
                .collect(),
            scenarios: (0..scenarios)
                .map(|i| ScenarioSpec {
                    name: format!("s{i}"),
                    stream: true,
                    max_tokens: 16,
                    temperature: Some(0.0),
                    top_p: None,
                    timeouts: Timeouts::default(),
                    prompts: vec![
                        PlanPrompt {
                            id: "a".into(),
                            messages: vec![],
                        },
                        PlanPrompt {
                            id: "b".into(),
                            messages: vec![],
                        },
                    ],
                })
                .collect(),
            prompt_set: "x".into(),
            timezones: BTreeMap::new(),
            windows: Vec::new(),
        }
    }

    #[test]
    fn round_order_is_a_permutation_shared_by_every_caller() {
        let p = plan(9, 2);
        let order = p.round_order(3);
        assert_eq!(order.len(), 18);
        let mut seen: Vec<(usize, usize)> =
            order.iter().map(|s| (s.provider, s.scenario)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 18);
        // Another agent computing the same round gets the same order; another round differs.
        assert_eq!(p.round_order(3), order);
        assert_ne!(p.round_order(4), order);
        let mut other_seed = p.clone();
        other_seed.seed = 43;
        assert_ne!(other_seed.round_order(3), order);
    }

    #[test]
    fn offsets_and_prompts_rotate() {
        let p = plan(2, 1);
        assert_eq!(p.probe_offset_us(2, 1), 4_100_000);
        assert_eq!(p.prompt_for(0, 0).id, "a");
        assert_eq!(p.prompt_for(0, 3).id, "b");
        assert_eq!(p.probes_per_agent(), 6);
    }

    #[test]
    fn json_round_trip_keeps_the_hash() {
        let p = plan(3, 2);
        let back: Plan = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.hash(), p.hash());
        assert_eq!(p.hash().len(), 64);
    }

    #[test]
    fn plans_without_windows_keep_their_json_and_hash() {
        let p = plan(2, 1);
        let json = p.to_json();
        assert!(
            !json.contains("timezones") && !json.contains("windows"),
            "{json}"
        );
        // JSON written before the fields existed parses, and hashes the same.
        let back: Plan = serde_json::from_str(&json).unwrap();
        assert_eq!(back.hash(), p.hash());
        let mut w = p.clone();
        w.timezones
            .insert("us-east".into(), "America/New_York".into());
        w.windows.push(Window {
            name: "peak".into(),
            ranges: crate::windows::parse_ranges("09:00-12:00").unwrap(),
        });
        let json = w.to_json();
        assert!(
            json.contains(r#""windows":[{"name":"peak","ranges":["09:00-12:00"]}]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Plan>(&json).unwrap(), w);
        assert_ne!(w.hash(), p.hash());
    }
}
