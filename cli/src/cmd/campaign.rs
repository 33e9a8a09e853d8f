//! `latmesh campaign …`: validate a campaign file; launch it on a coordinator and follow it;
//! watch, cancel or verify a campaign; a scheduled series and its runs ([`super::series`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use latmesh_core::campaign;
use latmesh_proto::pb;

use super::coordinator_arg::CoordinatorArg;
use crate::watch::{self, AdminClient};

/// `latmesh campaign …`.
#[derive(Subcommand, Debug)]
pub enum CampaignCmd {
    /// Check a campaign file and print the plan summary and its planned duration (no
    /// network). A duration over 24 h is refused without --allow-long.
    Validate {
        /// Campaign file (TOML or YAML).
        file: PathBuf,
        /// Accept a planned duration over 24 h (see `campaign launch --allow-long`).
        #[arg(long)]
        allow_long: bool,
    },
    /// Launch a campaign on the coordinator, follow it, print the matrix.
    #[command(after_help = crate::exit_status::EXIT_HELP)]
    Launch {
        /// Campaign file (TOML or YAML).
        file: PathBuf,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Seconds between launch and round 0.
        #[arg(long, default_value_t = 2.0)]
        start_delay_s: f64,
        /// Wait this long for an agent in every region before launching.
        #[arg(long, default_value_t = 30.0)]
        wait_agents_s: f64,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        budget: crate::cmd::series::BudgetArgs,
        /// A campaign with a [schedule]: follow its runs (printing each run's matrix) until
        /// the series ends, instead of returning once it is created. (Without a schedule,
        /// launch always follows the campaign.)
        #[arg(long)]
        wait: bool,
        /// Launch a campaign whose planned duration is over 24 h (rounds × interval, sweep
        /// steps, rate durations): refused without it, naming the setting that makes it long.
        #[arg(long)]
        allow_long: bool,
        /// Launch even when a targeted agent lacks the API key variable (api_key_env) of a
        /// provider: its requests then go without a key, and launch warns. Without it such a
        /// launch is refused, naming agent, region, provider and variable.
        #[arg(long)]
        allow_missing_keys: bool,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        gate: crate::exit_status::FailGate,
    },
    /// A series of scheduled runs (a campaign launched with a [schedule]): its schedule and
    /// its runs (id, due and start times, state, complete).
    #[command(after_help = crate::exit_status::EXIT_HELP)]
    Series {
        /// Series id, as `launch` printed it.
        series_id: String,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Follow the series until it ends (printing each run's matrix), then list its runs.
        #[arg(long)]
        wait: bool,
        /// With --wait: write the series and every run's summary here as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        gate: crate::exit_status::FailGate,
    },
    /// Reconcile what agents reported with the rows in ClickHouse: lost and duplicated counts
    /// (exits non-zero unless both are 0).
    Verify {
        /// Campaign id.
        campaign_id: String,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        ch: crate::cmd::query::ClickhouseArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a running campaign: every agent stops scheduling probes, in-flight ones get a
    /// short grace, what was measured is kept. Waits until the agents have reported and prints
    /// the counts (exits non-zero for an unknown or already finished campaign).
    Cancel {
        /// Campaign id, as `launch` printed it.
        campaign_id: String,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Return once the coordinator has accepted the cancel, without waiting for agents.
        #[arg(long)]
        no_wait: bool,
    },
    /// Follow a running campaign (e.g. after the launching terminal went away) and print its
    /// matrix when it finishes.
    #[command(after_help = crate::exit_status::EXIT_HELP)]
    Watch {
        /// Campaign id, as `launch` printed it.
        campaign_id: String,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        coord: CoordinatorArg,
        /// Write the JSON summary here.
        #[arg(long)]
        json: Option<PathBuf>,
        #[allow(missing_docs)] // its help is its type's
        #[command(flatten)]
        gate: crate::exit_status::FailGate,
    },
}

/// Runs a `campaign` command.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run(cmd: CampaignCmd) -> anyhow::Result<()> {
    match cmd {
        CampaignCmd::Validate { file, allow_long } => {
            let plan = campaign::load_file(&file)?;
            if let Some(note) = latmesh_core::env_overrides::applied_overrides_note() {
                println!("{note}");
            }
            let duration = latmesh_core::duration::PlannedDuration::of(&plan);
            duration
                .check(allow_long)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let n = |count: usize, noun: &str| {
                format!("{count} {noun}{}", if count == 1 { "" } else { "s" })
            };
            println!(
                "{}: ok — campaign {:?}, {}, {}, {}, {}, {} per agent, plan {}",
                file.display(),
                plan.name,
                n(plan.regions.len(), "region"),
                n(plan.providers.len(), "provider"),
                n(plan.scenarios.len(), "scenario"),
                n(plan.rounds.count as usize, "round"),
                n(plan.probes_per_agent() as usize, "probe"),
                &plan.hash()[..12]
            );
            print!(
                "{}",
                crate::cmd::series::plan_facts(
                    &plan,
                    plan.regions.len() as u32,
                    "assuming one agent per region; launch counts the connected ones"
                )
            );
            for line in workload_lines(&plan) {
                println!("{line}");
            }
            println!("{}", duration.describe());
            Ok(())
        }
        CampaignCmd::Launch {
            file,
            coord,
            json,
            start_delay_s,
            wait_agents_s,
            budget,
            wait,
            allow_long,
            allow_missing_keys,
            gate,
        } => {
            let plan = campaign::load_file(&file)?;
            if let Some(note) = latmesh_core::env_overrides::applied_overrides_note() {
                eprintln!("{note}");
            }
            budget.check(&plan)?;
            // Before anything is sent: a campaign of 35 days is refused unless meant.
            let duration = latmesh_core::duration::PlannedDuration::of(&plan);
            duration
                .check(allow_long)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            eprintln!("{}", duration.describe());
            // Before anything is sent: a summary that cannot be written is refused up front.
            if let Some(path) = &json {
                watch::check_writable(path).context("--json")?;
            }
            let url = coord.url();
            let mut client = coord.connect().await?;
            watch::wait_for_agents(
                &mut client,
                &url,
                &plan.regions,
                Duration::from_secs_f64(wait_agents_s.max(0.0)),
            )
            .await?;
            // The estimate before anything is sent (stderr: stdout is the matrix).
            let (agents, how) =
                crate::cmd::series::agents_in_regions(&mut client, &url, &plan).await?;
            eprint!("{}", crate::cmd::series::plan_facts(&plan, agents, &how));
            let reply = watch::launch_with(
                &mut client,
                &url,
                &plan,
                start_delay_s,
                &budget.caps(),
                allow_missing_keys,
            )
            .await?;
            for w in &reply.warnings {
                eprintln!("warning: {w}");
            }
            if reply.series {
                return crate::cmd::series::launched_series(
                    &mut client,
                    &url,
                    &reply,
                    wait,
                    json.as_deref(),
                    gate,
                )
                .await;
            }
            eprintln!(
                "launched campaign {} on {} agents (follow it from elsewhere with: latmesh campaign watch {})",
                reply.campaign_id,
                reply.agent_ids.len(),
                reply.campaign_id
            );
            follow_launched(&coord, client, &reply.campaign_id, json.as_deref(), gate).await
        }
        CampaignCmd::Verify {
            campaign_id,
            ch,
            json,
        } => {
            let (lines, lost, duplicated) = crate::cmd::query::verify(&ch, &campaign_id).await?;
            let twice: u64 = lines.iter().map(|l| l.measured_twice).sum();
            let (verified, unverified): (Vec<_>, Vec<_>) = lines.iter().partition(|l| l.verified);
            // "0 lost" is only said of agents whose delivery is whole.
            let verdict = if unverified.is_empty() {
                format!(
                    "campaign {campaign_id}: {lost} lost, {duplicated} duplicated, {twice} measured twice"
                )
            } else {
                let others = if verified.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; the {} verified agent(s): {} lost, {} duplicated, {} measured twice",
                        verified.len(),
                        verified.iter().map(|l| l.lost).sum::<u64>(),
                        verified.iter().map(|l| l.duplicated).sum::<u64>(),
                        verified.iter().map(|l| l.measured_twice).sum::<u64>()
                    )
                };
                format!(
                    "campaign {campaign_id}: NOT VERIFIED: {} agent(s) did not deliver everything ({}){others}",
                    unverified.len(),
                    unverified
                        .iter()
                        .map(|l| format!("{}: {}", l.agent_id, l.not_verified.join("; ")))
                        .collect::<Vec<_>>()
                        .join(" | ")
                )
            };
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "verified": unverified.is_empty(),
                        "lost": lost,
                        "duplicated": duplicated,
                        "measured_twice": twice,
                        "agents": lines
                    }))?
                );
            } else {
                println!(
                    "{:<20} {:>9} {:>9} {:>6} {:>6} {:>6}  missing seqs",
                    "AGENT", "REPORTED", "STORED", "LOST", "DUP", "TWICE"
                );
                for l in &lines {
                    let lost = if l.verified {
                        l.lost.to_string()
                    } else {
                        "?".to_string()
                    };
                    println!(
                        "{:<20} {:>9} {:>9} {:>6} {:>6} {:>6}  {}{}",
                        l.agent_id,
                        l.reported_records,
                        l.stored_records,
                        lost,
                        l.duplicated,
                        l.measured_twice,
                        l.missing_text(),
                        if l.verified {
                            String::new()
                        } else {
                            format!("  NOT VERIFIED: {}", l.not_verified.join("; "))
                        }
                    );
                }
                println!("{verdict}");
            }
            anyhow::ensure!(
                unverified.is_empty() && lost == 0 && duplicated == 0 && twice == 0,
                "{verdict}"
            );
            Ok(())
        }
        CampaignCmd::Cancel {
            campaign_id,
            coord,
            no_wait,
        } => {
            let url = coord.url();
            let mut client = coord.connect().await?;
            let reply = client
                .cancel(pb::CancelRequest {
                    campaign_id: campaign_id.clone(),
                })
                .await
                .map_err(|s| match s.code() {
                    tonic::Code::NotFound | tonic::Code::FailedPrecondition => {
                        anyhow::anyhow!("cannot cancel: {}", s.message())
                    }
                    _ => watch::control_error(&url, s),
                })?
                .into_inner();
            let campaign_id = match crate::cmd::series::cancelled_series(&reply) {
                Some(run_id) => run_id,
                None if reply.series => return Ok(()),
                None => campaign_id,
            };
            eprintln!(
                "campaign {campaign_id}: cancel sent to {} agent(s) [{}]",
                reply.agent_ids.len(),
                reply.agent_ids.join(", ")
            );
            if no_wait {
                return Ok(());
            }
            let s = &watch::follow(&mut client, &url, &campaign_id, Duration::from_secs(2)).await?;
            for a in &s.agents {
                println!(
                    "{:<20} {:<14} {:>8} records kept {:>8} slots not run{}",
                    a.agent_id,
                    a.region,
                    a.records,
                    a.skipped,
                    if a.complete || a.records > 0 || a.batches > 0 {
                        ""
                    } else {
                        " (no report)"
                    }
                );
            }
            println!(
                "campaign {campaign_id} cancelled: {} records kept, {} slots not run",
                s.agents.iter().map(|a| a.records).sum::<u64>(),
                s.agents.iter().map(|a| a.skipped).sum::<u64>()
            );
            Ok(())
        }
        CampaignCmd::Series {
            series_id,
            coord,
            wait,
            json,
            gate,
        } => {
            let mut client = coord.connect().await?;
            crate::cmd::series::series(
                &mut client,
                &coord.url(),
                &series_id,
                wait,
                json.as_deref(),
                gate,
            )
            .await
        }
        CampaignCmd::Watch {
            campaign_id,
            coord,
            json,
            gate,
        } => {
            let mut client = coord.connect().await?;
            report(
                &mut client,
                &coord.url(),
                &campaign_id,
                json.as_deref(),
                gate,
            )
            .await
        }
    }
}

/// What `campaign validate` says of the workload keys: one line per file scenario with
/// generated prompts (its tiers), an SLO or an SLO search.
fn workload_lines(plan: &latmesh_core::plan::Plan) -> Vec<String> {
    use latmesh_core::load::LoadModel;
    let mut out = Vec::new();
    let mut k = 0;
    while k < plan.scenarios.len() {
        let group = plan.scenarios[k].group();
        let tiers: Vec<&str> = plan.scenarios[k..]
            .iter()
            .take_while(|s| s.group() == group)
            .map(|s| s.name.as_str())
            .collect();
        let s = &plan.scenarios[k];
        k += tiers.len();
        if let Some(synth) = &s.synth {
            out.push(format!(
                "scenario {group}: generated prompts, {} ({}){}",
                if tiers.len() == 1 { "1 tier" } else { "tiers" },
                tiers.join(", "),
                if synth.shared_prefix_tokens > 0 {
                    format!(", {} shared prefix tokens", synth.shared_prefix_tokens)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(slo) = &s.slo {
            out.push(format!("scenario {group}: slo {}", slo.describe()));
        }
        if let LoadModel::Rate(r) = &s.load
            && let Some(search) = &r.search
        {
            out.push(format!(
                "scenario {group}: SLO search from {} to {} rps, at most {} steps of {} s, {} judged requests a step",
                search.min_rps,
                search.max_rps,
                search.steps,
                r.duration_ms as f64 / 1000.0,
                search.min_requests
            ));
        }
    }
    out
}

/// How long `campaign launch` tries to reconnect to a coordinator it lost while following.
const LAUNCH_RECONNECT_FOR: Duration = Duration::from_secs(120);

/// `campaign launch`'s follow ([`report`]); when the connection to the coordinator breaks
/// before the campaign finished (the coordinator died or is restarting), says so, reconnects
/// for up to [`LAUNCH_RECONNECT_FOR`] (a coordinator restarted with its state directory still
/// runs the campaign) and follows again; else tells the user to `campaign watch` it later.
async fn follow_launched(
    coord: &CoordinatorArg,
    mut client: AdminClient,
    campaign_id: &str,
    json: Option<&std::path::Path>,
    gate: crate::exit_status::FailGate,
) -> anyhow::Result<()> {
    let url = coord.url();
    let mut reconnected = false;
    let mut lost_since: Option<std::time::Instant> = None;
    loop {
        let followed_from = std::time::Instant::now();
        let err = match report(&mut client, &url, campaign_id, json, gate).await {
            Ok(()) => return Ok(()),
            Err(e) if reconnected && e.to_string().contains("NotFound") => {
                anyhow::bail!(
                    "the coordinator at {url} came back without campaign {campaign_id} (was it restarted without its --state-dir?): {e:#}"
                )
            }
            Err(e) if !lost_connection(&e) => return Err(e),
            Err(e) => e,
        };
        if followed_from.elapsed() > Duration::from_secs(10) {
            lost_since = None;
        }
        let since = *lost_since.get_or_insert_with(std::time::Instant::now);
        let reason = match err.chain().find_map(|c| c.downcast_ref::<tonic::Status>()) {
            Some(s) => s.message().to_string(),
            None => format!("{err:#}"),
        };
        eprintln!(
            "lost the connection to the coordinator at {url} while following campaign {campaign_id} ({reason}). The agents keep measuring; a coordinator restarted with the same state directory picks the campaign up. Reconnecting for up to {} s (or follow it later with: latmesh campaign watch {campaign_id})",
            LAUNCH_RECONNECT_FOR.as_secs()
        );
        client = loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match coord.connect().await {
                Ok(c) => break c,
                Err(e) if since.elapsed() >= LAUNCH_RECONNECT_FOR => anyhow::bail!(
                    "could not reconnect to the coordinator at {url} within {} s ({e:#}); campaign {campaign_id} may still be running: once the coordinator is back, follow it with `latmesh campaign watch {campaign_id}`",
                    LAUNCH_RECONNECT_FOR.as_secs()
                ),
                Err(_) => {}
            }
        };
        reconnected = true;
        eprintln!("reconnected to {url}: following campaign {campaign_id} again");
    }
}

/// Whether following failed because the connection to the coordinator broke (rather than
/// because of the campaign itself).
fn lost_connection(e: &anyhow::Error) -> bool {
    use tonic::Code;
    if let Some(s) = e.chain().find_map(|c| c.downcast_ref::<tonic::Status>()) {
        return matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal | Code::Aborted
        );
    }
    let text = format!("{e:#}");
    text.contains("closed the progress stream") || text.contains(": Unavailable:")
}

/// Follows a campaign, prints its matrix, writes the JSON; fails when it is incomplete or
/// was cancelled (status 1), else when `gate` finds a failed cell
/// ([`crate::exit_status`]: status 3 or 4).
async fn report(
    client: &mut AdminClient,
    url: &str,
    campaign_id: &str,
    json: Option<&std::path::Path>,
    gate: crate::exit_status::FailGate,
) -> anyhow::Result<()> {
    if let Some(path) = json {
        watch::check_writable(path)?;
    }
    let summary = watch::follow(client, url, campaign_id, Duration::from_secs(5)).await?;
    print!("{}", crate::ui::matrix::render(&summary));
    if let Some(path) = json {
        watch::write_json(&summary, path)?;
        eprintln!("summary written to {}", path.display());
    }
    crate::exit_status::conclude(
        finished(&summary, campaign_id),
        gate.judge([(None, &summary)]),
    )
}

/// Whether a followed campaign finished whole: not stopped by the budget guard, not
/// cancelled, complete.
fn finished(summary: &latmesh_results::summary::Summary, campaign_id: &str) -> anyhow::Result<()> {
    if let Some(reason) = &summary.guard.stop_reason {
        anyhow::bail!(
            "campaign {campaign_id} was stopped by the budget guard ({reason}): partial results (see STOPPED BY BUDGET above)"
        );
    }
    anyhow::ensure!(
        !summary.cancelled,
        "campaign {campaign_id} was cancelled: partial results (see CANCELLED above)"
    );
    anyhow::ensure!(
        summary.complete,
        "campaign {campaign_id} is incomplete: some agents did not deliver every probe (see INCOMPLETE above)"
    );
    Ok(())
}
