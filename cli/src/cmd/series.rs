//! The CLI's side of the budget guard and of schedules: `--max-cost`/`--max-tokens`, the
//! estimate printed before a launch (and by `campaign validate`), a launched series, and
//! `latmesh campaign series ID`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use latmesh_core::plan::Plan;
use latmesh_core::schedule::rfc3339;
use latmesh_proto::pb;

use crate::watch::{self, AdminClient};
use latmesh_coordinator::budget::Caps;

/// Budget caps of `campaign launch` (see [`latmesh_coordinator::budget`]).
#[derive(Args, Debug, Clone, Default)]
pub struct BudgetArgs {
    /// Budget guard: cancel the campaign once the cost measured from its records (usage ×
    /// the providers' price_input/output_usd_per_mtok) passes this many USD, keeping what
    /// was measured. Every provider needs a price. Each run of a series has its own cap.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Budget guard: cancel the campaign once measured prompt + completion tokens (over all
    /// agents) pass N, keeping what was measured. Each run of a series has its own cap.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
}

impl BudgetArgs {
    /// The caps these flags set (none for an absent flag).
    pub fn caps(&self) -> Caps {
        Caps {
            max_cost_usd: self.max_cost,
            max_tokens: self.max_tokens,
        }
    }

    /// Checks the values and that `--max-cost` has a price for every provider of `plan`.
    ///
    /// # Errors
    /// A cap that is not positive, or a provider without a price under `--max-cost`.
    pub fn check(&self, plan: &Plan) -> anyhow::Result<()> {
        if let Some(c) = self.max_cost {
            anyhow::ensure!(
                c.is_finite() && c > 0.0,
                "--max-cost {c}: give a cost in USD above 0"
            );
        }
        anyhow::ensure!(
            self.max_tokens != Some(0),
            "--max-tokens 0: give a number of tokens above 0"
        );
        Caps::from_request(self.max_cost.unwrap_or(0.0), self.max_tokens.unwrap_or(0))
            .check(plan)
            .map_err(anyhow::Error::msg)
    }
}

/// The agents a launch of `plan` would go to: the connected agents of its regions, as the
/// coordinator lists them; `(count, how it was counted)`.
///
/// # Errors
/// The list call fails.
pub async fn agents_in_regions(
    client: &mut AdminClient,
    url: &str,
    plan: &Plan,
) -> anyhow::Result<(u32, String)> {
    let agents = client
        .list_agents(pb::ListAgentsRequest {})
        .await
        .map_err(|s| watch::control_error(url, s))?
        .into_inner()
        .agents;
    let n = agents
        .iter()
        .filter(|a| a.connected && plan.regions.contains(&a.region))
        .count() as u32;
    Ok(if n == 0 {
        (
            plan.regions.len() as u32,
            "no agent connected yet: assuming one per region".into(),
        )
    } else {
        (n, "connected in the plan's regions".into())
    })
}

/// The estimate table for `agents` agents (`how`: how they were counted) and, for a plan
/// with a schedule, the schedule in words (the estimate is then per run).
pub fn plan_facts(plan: &Plan, agents: u32, how: &str) -> String {
    let e = latmesh_core::budget::estimate(plan, agents);
    let mut out = format!(
        "estimate{} for {} agent(s) ({how}):\n{}",
        if plan.schedule.is_some() {
            " per run"
        } else {
            ""
        },
        e.agents,
        e.render()
    );
    if let Some(s) = &plan.schedule {
        out += &format!(
            "schedule: {} (each run is a campaign SERIES-rN; runs never overlap)\n",
            s.describe(plan)
        );
        if let Some(every) = s.every_ms {
            let span_ms = plan.span_us() / 1000;
            if span_ms >= every {
                out += &format!(
                    "warning: a run lasts at least {:.0} s, longer than `every` ({:.0} s): each run will start late, when the previous one has finished\n",
                    span_ms as f64 / 1000.0,
                    every as f64 / 1000.0
                );
            }
        }
    }
    out
}

/// After `campaign launch` created a series: says so, and with `wait` follows its runs
/// ([`series`]).
///
/// # Errors
/// As [`series`].
pub async fn launched_series(
    client: &mut AdminClient,
    url: &str,
    reply: &pb::LaunchReply,
    wait: bool,
    json: Option<&Path>,
    gate: crate::exit_status::FailGate,
) -> anyhow::Result<()> {
    let id = &reply.campaign_id;
    let in_s =
        (reply.start_at_coord_unix_us - latmesh_coordinator::state::now_unix_us()) as f64 / 1e6;
    println!(
        "series {id}: first run {id}-r1 starts at {} (in {:.0} s)",
        rfc3339(reply.start_at_coord_unix_us),
        in_s.max(0.0)
    );
    if !wait {
        if json.is_some() {
            eprintln!("--json is written with --wait only (it holds every run's summary)");
        }
        if gate.fail_above_pct.is_some() {
            eprintln!(
                "--fail-above-pct judges the runs with --wait only (without it launch returns once the series is created)"
            );
        }
        eprintln!(
            "the coordinator runs the schedule; list the runs with: latmesh campaign series {id} (add --wait to follow them); stop it with: latmesh campaign cancel {id}"
        );
        return Ok(());
    }
    series(client, url, id, true, json, gate).await
}

/// Of a cancel reply: the run to follow when it named a series whose running run was
/// cancelled (`None` for a campaign, or a series with no run going); prints what happened to
/// a series.
pub fn cancelled_series(reply: &pb::CancelReply) -> Option<String> {
    if !reply.series {
        return None;
    }
    eprintln!(
        "series {}: cancelled, no further run starts",
        reply.campaign_id
    );
    (!reply.run_id.is_empty()).then(|| reply.run_id.clone())
}

async fn series_status(
    client: &mut AdminClient,
    url: &str,
    id: &str,
) -> anyhow::Result<pb::SeriesReply> {
    Ok(client
        .series(pb::SeriesRequest {
            series_id: id.to_string(),
        })
        .await
        .map_err(|s| match s.code() {
            tonic::Code::NotFound => anyhow::anyhow!("{}", s.message()),
            _ => watch::control_error(url, s),
        })?
        .into_inner())
}

/// `latmesh campaign series ID`: prints the series and its runs. With `wait`, follows every
/// run as it starts (its progress on stderr, its matrix on stdout) until the series has
/// ended, then lists the runs, writes `json` (the series and each run's summary) and fails
/// unless every run was complete (status 1), else when `gate` finds a failed cell in any run
/// ([`crate::exit_status`]: status 3 or 4).
///
/// # Errors
/// An unknown series, a broken connection, or (with `wait`) a run that was not complete or
/// a failed cell.
pub async fn series(
    client: &mut AdminClient,
    url: &str,
    id: &str,
    wait: bool,
    json: Option<&Path>,
    gate: crate::exit_status::FailGate,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        anyhow::ensure!(wait, "--json needs --wait (it holds every run's summary)");
        watch::check_writable(path)?;
    }
    anyhow::ensure!(
        wait || gate.fail_above_pct.is_none(),
        "--fail-above-pct needs --wait (it judges the runs followed)"
    );
    let mut status = series_status(client, url, id).await?;
    if !wait {
        print!(
            "{}",
            crate::ui::series::render(&status, latmesh_coordinator::state::now_unix_us())
        );
        return Ok(());
    }
    let mut summaries: Vec<(String, latmesh_results::summary::Summary)> = Vec::new();
    let mut last_note = Instant::now() - Duration::from_secs(3600);
    let mut last_warning = String::new();
    loop {
        let next = status
            .runs
            .iter()
            .find(|r| !summaries.iter().any(|(id, _)| id == &r.campaign_id))
            .map(|r| r.campaign_id.clone());
        if let Some(run) = next {
            eprintln!("series {id}: following run {run}");
            let summary = watch::follow(client, url, &run, Duration::from_secs(5))
                .await
                .with_context(|| format!("following run {run} of series {id}"))?;
            print!("{}", crate::ui::matrix::render(&summary));
            summaries.push((run, summary));
        } else if status.finished {
            break;
        } else {
            if status.warning != last_warning && !status.warning.is_empty() {
                eprintln!("series {id}: warning: {}", status.warning);
            }
            last_warning.clone_from(&status.warning);
            if last_note.elapsed() >= Duration::from_secs(30) && status.next_due_coord_unix_us > 0 {
                last_note = Instant::now();
                eprintln!(
                    "series {id}: {} of {} runs done; next due {}",
                    status.runs.len(),
                    status.runs_planned,
                    rfc3339(status.next_due_coord_unix_us)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        status = series_status(client, url, id).await?;
    }
    print!(
        "\n{}",
        crate::ui::series::render(&status, latmesh_coordinator::state::now_unix_us())
    );
    if let Some(path) = json {
        let runs: Vec<serde_json::Value> = status
            .runs
            .iter()
            .map(|r| {
                serde_json::json!({
                    "campaign_id": r.campaign_id,
                    "run": r.run,
                    "due_unix_us": r.due_coord_unix_us,
                    "start_at_unix_us": r.start_at_coord_unix_us,
                    "state": r.state,
                    "complete": r.complete,
                    "summary": summaries.iter().find(|(id, _)| id == &r.campaign_id).map(|(_, s)| s),
                })
            })
            .collect();
        let doc = serde_json::json!({
            "series_id": status.series_id,
            "name": status.name,
            "schedule": status.schedule,
            "runs_planned": status.runs_planned,
            "state": status.state,
            "warning": status.warning,
            "runs": runs,
        });
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("series summary written to {}", path.display());
    }
    let short: Vec<&str> = status
        .runs
        .iter()
        .filter(|r| !r.complete)
        .map(|r| r.campaign_id.as_str())
        .collect();
    let finished = if short.is_empty() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "series {id}: runs not complete: {} (see above)",
            short.join(", ")
        ))
    };
    crate::exit_status::conclude(
        finished,
        gate.judge(summaries.iter().map(|(run, s)| (Some(run.as_str()), s))),
    )
}
