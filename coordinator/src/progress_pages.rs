//! Progress messages that cannot outgrow the transport: the `Watch` stream sends each
//! [`pb::Progress`] as [`pages`], none longer than [`MAX_PAGE_BYTES`] whatever the campaign
//! holds, and the client puts the summary back together with [`SummaryPages`].
//!
//! - The agents list is cut to [`MAX_PROGRESS_AGENTS`] (agents not done first, then by id),
//!   the rest counted in `agents_omitted`.
//! - A summary longer than [`SUMMARY_PAGE_BYTES`] is sent in pages: messages with
//!   `summary_json_more` carry its first parts (and nothing else), the message with `finished`
//!   its last part.
//!
//! The strings inside a summary are cut where they enter it (see
//! [`latmesh_results::aggregate::MAX_SUMMARY_ERROR_BYTES`]) and agents' batches are bounded at the
//! coordinator's boundary ([`crate::intake`]), so pages stay few.

use latmesh_proto::pb;
use prost::Message as _;

/// Most agents listed in one progress message.
pub const MAX_PROGRESS_AGENTS: usize = 2_000;

/// Most bytes of summary JSON in one message.
pub const SUMMARY_PAGE_BYTES: usize = 1 << 20;

/// Longest progress message [`pages`] produces, bytes: below the 4 MiB that tonic decodes by
/// default, whatever the campaign holds (live cells are one per region and per provider of
/// the plan; agents and summary are paged).
pub const MAX_PAGE_BYTES: usize = 3 << 20;

/// `p` as the messages the `Watch` stream sends: its agents list cut to
/// [`MAX_PROGRESS_AGENTS`], its summary in pages of at most [`SUMMARY_PAGE_BYTES`] (the first
/// ones with `summary_json_more`, carrying nothing else; the last one is `p` with the rest of
/// the summary).
pub fn pages(mut p: pb::Progress) -> Vec<pb::Progress> {
    if p.agents.len() > MAX_PROGRESS_AGENTS {
        // Agents still working first: they are what a watcher follows.
        p.agents
            .sort_by(|a, b| (a.done, &a.agent_id).cmp(&(b.done, &b.agent_id)));
        p.agents_omitted += (p.agents.len() - MAX_PROGRESS_AGENTS) as u64;
        p.agents.truncate(MAX_PROGRESS_AGENTS);
    }
    if p.summary_json.len() <= SUMMARY_PAGE_BYTES {
        return vec![p];
    }
    let summary = std::mem::take(&mut p.summary_json);
    let mut out = Vec::new();
    let mut rest = summary.as_str();
    while rest.len() > SUMMARY_PAGE_BYTES {
        let mut end = SUMMARY_PAGE_BYTES;
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(pb::Progress {
            campaign_id: p.campaign_id.clone(),
            summary_json: rest[..end].to_string(),
            summary_json_more: true,
            ..Default::default()
        });
        rest = &rest[end..];
    }
    p.summary_json = rest.to_string();
    out.push(p);
    debug_assert!(out.iter().all(|m| m.encoded_len() <= MAX_PAGE_BYTES));
    out
}

/// The client's side of [`pages`]: collects the summary's pages.
#[derive(Debug, Default)]
pub struct SummaryPages {
    head: String,
}

impl SummaryPages {
    /// Takes `p`; `None` when it was a summary page (nothing to show), else the message to
    /// show, its `summary_json` whole (the pages before it prepended).
    pub fn take(&mut self, mut p: pb::Progress) -> Option<pb::Progress> {
        if p.summary_json_more {
            self.head.push_str(&p.summary_json);
            return None;
        }
        if !self.head.is_empty() {
            self.head.push_str(&p.summary_json);
            p.summary_json = std::mem::take(&mut self.head);
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_summary_and_many_agents_come_in_pages_that_fit_and_put_back_together() {
        let summary = format!("{{\"x\":\"{}\"}}", "é".repeat(3 << 20));
        let p = pb::Progress {
            campaign_id: "c".into(),
            finished: true,
            summary_json: summary.clone(),
            agents: (0..5_000)
                .map(|i| pb::AgentProgress {
                    agent_id: format!("agent-{i:05}"),
                    done: i % 2 == 0,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        assert!(p.encoded_len() > 4 << 20);
        let sent = pages(p);
        assert_eq!(sent.len(), 7, "6 MiB of summary in 1 MiB pages");
        assert!(sent.iter().all(|m| m.encoded_len() <= MAX_PAGE_BYTES));
        let last = sent.last().unwrap();
        assert_eq!(last.agents.len(), MAX_PROGRESS_AGENTS);
        assert_eq!(last.agents_omitted, 3_000);
        assert!(
            last.agents.iter().all(|a| !a.done),
            "agents still working first"
        );
        let mut pages = SummaryPages::default();
        let shown: Vec<_> = sent.into_iter().filter_map(|m| pages.take(m)).collect();
        assert_eq!(shown.len(), 1);
        assert!(shown[0].finished);
        assert_eq!(shown[0].summary_json, summary);
    }
}

#[cfg(test)]
mod campaign_tests {
    use latmesh_core::record::{Outcome, ProbeRecord};
    use tokio::sync::mpsc;

    use super::*;
    use crate::state::State;

    const REGIONS: usize = 3;
    const PROVIDERS: usize = 60;
    const AGENTS_PER_REGION: usize = 100;

    fn campaign() -> String {
        let regions: Vec<String> = (0..REGIONS).map(|r| format!("\"r{r}\"")).collect();
        let mut text = format!(
            "[campaign]\nname = \"big\"\nregions = [{}]\n\n[rounds]\ncount = 1\ninterval_s = 1.0\ngap_ms = 1\n\n\
             [[scenarios]]\nname = \"a\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 8\n\n\
             [[scenarios]]\nname = \"b\"\nprompt_ids = [\"short-qa-en-*\"]\nmax_tokens = 8\n",
            regions.join(", ")
        );
        for p in 0..PROVIDERS {
            text.push_str(&format!(
                "\n[[providers]]\nname = \"provider-{p:02}\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel_id = \"m\"\n"
            ));
        }
        text
    }

    #[tokio::test]
    async fn a_huge_error_message_and_many_agents_and_providers_never_make_a_message_too_long() {
        let plan =
            latmesh_core::campaign::load_toml_str(&campaign(), std::path::Path::new(".")).unwrap();
        let state = State::default();
        let mut sessions = Vec::new();
        for r in 0..REGIONS {
            for a in 0..AGENTS_PER_REGION {
                let (tx, rx) = mpsc::channel(8);
                sessions.push(rx);
                let hello = pb::AgentHello {
                    agent_id: format!("agent-{r}-{a:03}"),
                    region: format!("r{r}"),
                    protocol_version: latmesh_proto::PROTOCOL_VERSION,
                    ..Default::default()
                };
                state.connect(&hello, tx);
            }
        }
        let id = state.launch(&plan.to_json(), 0).unwrap().campaign_id;
        let mut watch = state.watch(&id).unwrap();
        for r in 0..REGIONS {
            for a in 0..AGENTS_PER_REGION {
                let agent = format!("agent-{r}-{a:03}");
                // The first agent of each region: a failed attempt per cell, each with a
                // long provider error (one of 3 MB, the attack that broke `watch`).
                let records = if a == 0 {
                    plan.providers
                        .iter()
                        .flat_map(|p| ["a", "b"].map(|s| (p.name.clone(), s)))
                        .enumerate()
                        .map(|(i, (provider, scenario))| {
                            let long = if i == 0 { 3 << 20 } else { 64 << 10 };
                            pb::ProbeRecord::from(&ProbeRecord {
                                provider,
                                scenario: scenario.into(),
                                outcome: Some(Outcome::Http5xx),
                                http_status: Some(500),
                                error_message: Some(format!("{i}:{}", "e".repeat(long))),
                                attempt: 1,
                                final_attempt: true,
                                turn: 1,
                                ..Default::default()
                            })
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let batch = pb::ResultBatch {
                    campaign_id: id.clone(),
                    seq: 1,
                    records,
                    ..Default::default()
                };
                assert!(state.batch(&agent, batch).unwrap());
                let done = pb::CampaignDone {
                    campaign_id: id.clone(),
                    last_seq: 1,
                    ..Default::default()
                };
                state.done(&agent, &done).unwrap();
            }
        }
        let last = watch.borrow_and_update().clone();
        assert!(last.finished);
        let sent = pages(last.clone());
        for m in &sent {
            assert!(
                m.encoded_len() <= MAX_PAGE_BYTES,
                "a message of {} bytes",
                m.encoded_len()
            );
        }
        let summary: latmesh_results::summary::Summary =
            serde_json::from_str(&last.summary_json).unwrap();
        assert_eq!(summary.cells.len(), (REGIONS + 1) * PROVIDERS * 2);
        for cell in &summary.cells {
            let e = cell.last_error.as_deref().expect("every cell failed");
            assert!(
                e.len() <= latmesh_results::aggregate::MAX_SUMMARY_ERROR_BYTES + "…".len(),
                "{}",
                e.len()
            );
        }
        assert_eq!(summary.agents.len(), REGIONS * AGENTS_PER_REGION);
    }
}
