//! Client side of a campaign: launch it on a coordinator, follow its progress, and collect
//! the final summary.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use latmesh_core::plan::Plan;
use latmesh_proto::pb;
pub use latmesh_rpc::AdminClient;
use latmesh_rpc::tls::TlsProblem;
use tonic::transport::Channel;

use crate::ui::progress;
use latmesh_coordinator::auth::ADMIN_TOKEN_ENV;
use latmesh_coordinator::budget::Caps;
use latmesh_results::summary::Summary;

/// Connects without an admin token to the plaintext control API at `url` (e.g.
/// `http://127.0.0.1:7700`; the demo's own loopback coordinator).
///
/// # Errors
/// When the coordinator cannot be reached.
pub async fn connect(url: &str) -> anyhow::Result<AdminClient> {
    let url = latmesh_rpc::coordinator_url(url);
    let channel = Channel::from_shared(url.clone())
        .with_context(|| format!("{url} is not a coordinator URL"))?
        .connect()
        .await
        .with_context(|| format!("cannot reach the coordinator at {url}"))?;
    Ok(latmesh_rpc::control_client(channel, None))
}

/// A control call's failure as a clear error: a refused admin token says how to send one.
pub fn control_error(url: &str, s: tonic::Status) -> anyhow::Error {
    match s.code() {
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => anyhow::anyhow!(
            "the coordinator at {url} refused this control call: {} (set {ADMIN_TOKEN_ENV} or pass --admin-token-file)",
            s.message()
        ),
        _ if TlsProblem::of(&s) == Some(TlsProblem::SpeaksTls) => {
            anyhow::anyhow!(
                "{url}: {}{}",
                s.message(),
                TlsProblem::SpeaksTls.hint("--ca-file")
            )
        }
        code => {
            // A plaintext client talking to a TLS server (or the reverse, or not a
            // coordinator at all) only sees a broken transport: say what to check.
            let hint = if matches!(
                code,
                tonic::Code::Unknown
                    | tonic::Code::Cancelled
                    | tonic::Code::Internal
                    | tonic::Code::Unavailable
            ) {
                if url.starts_with("http://") {
                    " (if the coordinator serves TLS, use an https:// URL and --ca-file)"
                } else {
                    " (if the coordinator serves plaintext, use an http:// URL; check --ca-file)"
                }
            } else {
                ""
            };
            anyhow::anyhow!("{url}: {code:?}: {}{hint}", s.message())
        }
    }
}

/// Fails early (before a long campaign) when `path` could not be written. Leaves no empty
/// file behind (the directories it needs stay).
///
/// # Errors
/// The directory cannot be created or the file cannot be opened for writing.
pub fn check_writable(path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .with_context(|| format!("cannot write {}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The regions of `regions` without a connected agent, and in words which agents are
/// connected in each region, which regions miss one (with their known but disconnected
/// agents), and agents connected in other regions (a region name mistyped on one side):
/// `connected: us-east (us-east-1); missing: eu-west (no agent; disconnected: eu-west-1);
/// also connected, in no region of the campaign: ap-1 (ap-southeast)`.
pub fn agents_by_region(regions: &[String], agents: &[pb::AgentInfo]) -> (Vec<String>, String) {
    let ids = |region: &str, connected: bool| -> Vec<&str> {
        agents
            .iter()
            .filter(|a| a.region == region && a.connected == connected)
            .map(|a| a.agent_id.as_str())
            .collect()
    };
    let (mut present, mut missing, mut missing_text) = (Vec::new(), Vec::new(), Vec::new());
    for r in regions {
        let up = ids(r, true);
        if up.is_empty() {
            let down = ids(r, false);
            missing.push(r.clone());
            missing_text.push(if down.is_empty() {
                format!("{r} (no agent)")
            } else {
                format!("{r} (no agent; disconnected: {})", down.join(", "))
            });
        } else {
            present.push(format!("{r} ({})", up.join(", ")));
        }
    }
    let elsewhere: Vec<String> = agents
        .iter()
        .filter(|a| a.connected && !regions.contains(&a.region))
        .map(|a| format!("{} ({})", a.agent_id, a.region))
        .collect();
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut text = format!(
        "connected: {}; missing: {}",
        list(&present),
        list(&missing_text)
    );
    if !elsewhere.is_empty() {
        text += &format!(
            "; also connected, in no region of the campaign: {}",
            elsewhere.join(", ")
        );
    }
    (missing, text)
}

/// How often [`wait_for_agents`] repeats an unchanged status while it waits.
const WAIT_STATUS_EVERY: Duration = Duration::from_secs(10);

/// How long [`wait_for_agents`] waits before it says anything (agents that are starting
/// usually connect within it).
const WAIT_QUIET: Duration = Duration::from_secs(1);

/// Waits until at least one connected agent is known for every region of `regions`, saying
/// on stderr which agents and regions are connected and which are missing
/// ([`agents_by_region`]) once it has waited [`WAIT_QUIET`], whenever that changes, and
/// every [`WAIT_STATUS_EVERY`].
///
/// # Errors
/// When `timeout` passes first: the error names the missing regions and what is connected.
pub async fn wait_for_agents(
    client: &mut AdminClient,
    url: &str,
    regions: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut said: Option<(String, Instant)> = None;
    loop {
        let agents = client
            .list_agents(pb::ListAgentsRequest {})
            .await
            .map_err(|s| control_error(url, s))?
            .into_inner()
            .agents;
        let (missing, status) = agents_by_region(regions, &agents);
        if missing.is_empty() {
            if said.is_some() {
                eprintln!("agents: every region has one ({status})");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "no agent connected in region(s) {} after {:.1} s ({status}; wait longer with --wait-agents-s)",
                missing.join(", "),
                timeout.as_secs_f64()
            );
        }
        let due = match &said {
            None => started.elapsed() >= WAIT_QUIET,
            Some((text, at)) => *text != status || at.elapsed() >= WAIT_STATUS_EVERY,
        };
        if due {
            if said.is_none() {
                eprintln!(
                    "waiting up to {:.0} s for an agent in every region: {status}",
                    timeout.as_secs_f64()
                );
            } else {
                let left = deadline.saturating_duration_since(Instant::now());
                eprintln!("still waiting ({:.0} s left): {status}", left.as_secs_f64());
            }
            said = Some((status, Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Launches `plan` and returns the reply.
///
/// # Errors
/// The coordinator's refusal (e.g. a region without agents, a missing admin token), or
/// transport errors.
pub async fn launch(
    client: &mut AdminClient,
    url: &str,
    plan: &Plan,
    start_delay_s: f64,
) -> anyhow::Result<pb::LaunchReply> {
    launch_with(client, url, plan, start_delay_s, &Caps::default(), false).await
}

/// [`launch`] with budget caps (`--max-cost`, `--max-tokens`: [`crate::cmd::series::BudgetArgs::caps`]) and `--allow-missing-keys`
/// (targeted agents may lack a provider's API key variable: the reply's `warnings` name
/// them; without it such a launch is refused, see [`latmesh_coordinator::keys`]). A plan with a schedule
/// starts a series (the reply's `series`).
///
/// # Errors
/// As [`launch`].
pub async fn launch_with(
    client: &mut AdminClient,
    url: &str,
    plan: &Plan,
    start_delay_s: f64,
    caps: &Caps,
    allow_missing_keys: bool,
) -> anyhow::Result<pb::LaunchReply> {
    let reply = client
        .launch(pb::LaunchRequest {
            plan_json: plan.to_json(),
            start_delay_s,
            max_cost_usd: caps.max_cost_usd.unwrap_or(0.0),
            max_tokens: caps.max_tokens.unwrap_or(0),
            allow_missing_keys,
        })
        .await
        .map_err(|s| match s.code() {
            tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => control_error(url, s),
            _ => anyhow::anyhow!("launch refused: {}", s.message()),
        })?;
    Ok(reply.into_inner())
}

/// Follows a campaign until it finishes and returns its summary (`cancelled` says whether
/// `latmesh campaign cancel` stopped it). With a terminal on stderr it draws progress bars
/// (per region, per provider with live TTFT P50/P99 and errors); otherwise it prints a
/// progress line to stderr every `every` (none for an `every` of an hour or more); see
/// [`crate::ui::progress`].
///
/// # Errors
/// When the stream breaks before the campaign finished or the summary does not parse.
pub async fn follow(
    client: &mut AdminClient,
    url: &str,
    campaign_id: &str,
    every: Duration,
) -> anyhow::Result<Summary> {
    let mode = progress::choose(every, progress::stderr_is_terminal());
    follow_with(client, url, campaign_id, mode).await
}

/// [`follow`] showing progress in `mode`. The final `progress:` line is printed in every mode.
///
/// # Errors
/// As [`follow`].
pub async fn follow_with(
    client: &mut AdminClient,
    url: &str,
    campaign_id: &str,
    mode: progress::Mode,
) -> anyhow::Result<Summary> {
    let mut stream = client
        .watch(pb::WatchRequest {
            campaign_id: campaign_id.to_string(),
        })
        .await
        .map_err(|s| control_error(url, s))?
        .into_inner();
    let mut render = progress::Renderer::new(mode);
    let mut pages = latmesh_coordinator::progress_pages::SummaryPages::default();
    while let Some(p) = stream.message().await? {
        let Some(p) = pages.take(p) else { continue };
        if p.finished {
            render.finish();
            eprintln!(
                "progress: {}, {}",
                progress::counts_text(&p),
                if p.cancelled { "cancelled" } else { "finished" }
            );
            if let Some(note) = spool_note(&p) {
                eprintln!("{note}");
            }
            return serde_json::from_str(&p.summary_json)
                .context("summary from the coordinator does not parse");
        }
        render.update(&p, latmesh_coordinator::state::now_unix_us());
    }
    render.finish();
    anyhow::bail!(
        "the coordinator closed the progress stream before campaign {campaign_id} finished"
    )
}

/// What a `finished` progress message says about results not yet in ClickHouse: `None` when
/// every acked batch is stored (or the coordinator has no ClickHouse).
pub fn spool_note(p: &pb::Progress) -> Option<String> {
    if p.spool_pending_batches == 0 {
        return None;
    }
    let silent = if p.clickhouse_silent_s > 0 {
        format!(
            "; ClickHouse has not answered the coordinator for {} s",
            p.clickhouse_silent_s
        )
    } else {
        String::new()
    };
    Some(format!(
        "storage: {} result batches are only in the coordinator's spool, not yet in ClickHouse{silent}. \
         They are kept on disk and stored when ClickHouse answers; \
         `latmesh campaign verify {}` says when every record is there.",
        p.spool_pending_batches, p.campaign_id
    ))
}

/// Writes `summary` as pretty JSON to `path`.
///
/// # Errors
/// I/O errors, naming the path.
pub fn write_json(summary: &Summary, path: &Path) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(summary)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_campaign_says_what_is_only_in_the_spool() {
        let mut p = pb::Progress {
            campaign_id: "c1".into(),
            finished: true,
            ..Default::default()
        };
        assert_eq!(spool_note(&p), None);
        p.spool_pending_batches = 4;
        let note = spool_note(&p).unwrap();
        assert!(
            note.starts_with("storage: 4 result batches are only in the coordinator's spool, not yet in ClickHouse. "),
            "{note}"
        );
        assert!(note.contains("`latmesh campaign verify c1`"), "{note}");
        p.clickhouse_silent_s = 40;
        let note = spool_note(&p).unwrap();
        assert!(
            note.contains(
                "not yet in ClickHouse; ClickHouse has not answered the coordinator for 40 s."
            ),
            "{note}"
        );
    }

    #[test]
    fn a_writability_check_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("sub/summary.json");
        check_writable(&new).unwrap();
        assert!(!new.exists() && new.parent().unwrap().is_dir());
        let old = dir.path().join("old.json");
        std::fs::write(&old, "kept").unwrap();
        check_writable(&old).unwrap();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "kept");
        let e = check_writable(&old.join("x.json")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot create"), "{e:#}");
    }

    #[test]
    fn waiting_for_agents_names_what_is_connected_and_what_is_missing() {
        let info = |id: &str, region: &str, connected: bool| pb::AgentInfo {
            agent_id: id.into(),
            region: region.into(),
            connected,
            ..Default::default()
        };
        let regions = ["us-east".to_string(), "eu-west".into(), "ap-south".into()];
        let agents = [
            info("us-east-1", "us-east", true),
            info("us-east-2", "us-east", true),
            info("eu-west-1", "eu-west", false),
            info("ap-1", "ap-southeast", true),
        ];
        let (missing, text) = agents_by_region(&regions, &agents);
        assert_eq!(missing, ["eu-west", "ap-south"]);
        assert_eq!(
            text,
            "connected: us-east (us-east-1, us-east-2); missing: eu-west (no agent; disconnected: eu-west-1), ap-south (no agent); also connected, in no region of the campaign: ap-1 (ap-southeast)"
        );
        let (missing, text) = agents_by_region(&regions[..1], &[]);
        assert_eq!(missing, ["us-east"]);
        assert_eq!(text, "connected: none; missing: us-east (no agent)");
    }
}
