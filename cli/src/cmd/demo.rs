//! `latmesh demo`: the whole distributed path on one machine. Starts the simulator (nine
//! providers, two of them also probed over the Anthropic and Responses APIs), a coordinator and three agents (`us-east`, `eu-west`, `ap-southeast`) talking
//! gRPC and HTTP over loopback, runs the embedded campaign `examples/demo.toml` (every load
//! model, an SLO with its goodput, and long-context tiers of generated prompts), then its
//! `[compat]` checks and `[quality]` set against the same providers from this process (as
//! `latmesh compat` does), and returns the summary ([`run`]) or everything a report needs
//! ([`run_with`], its `compat` included). The simulator and each
//! agent run on a runtime and thread of their own, as separate processes would: a busy
//! simulator cannot hold up an agent's scheduler.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use latmesh_core::campaign;
use latmesh_core::compat::CompatResult;
use tokio::net::TcpListener;

use crate::watch;
use latmesh_coordinator::service::Coordinator;
use latmesh_coordinator::state::State;
use latmesh_results::report_data::ReportData;
use latmesh_results::summary::Summary;

/// The embedded demo campaign; `{sim}` stands for the simulator's address.
pub const DEMO_CAMPAIGN: &str = include_str!("../../../examples/demo.toml");

/// The line of [`DEMO_CAMPAIGN`] after which its `sweep` and `rate` scenarios and its
/// providers on the Anthropic and Responses APIs follow.
pub const LOAD_MODELS_MARKER: &str = "# --- load models beyond rounds";

/// [`DEMO_CAMPAIGN`] with its rounds scenarios only (everything before
/// [`LOAD_MODELS_MARKER`]): the nine Chat Completions providers probed in interleaved rounds
/// (the two providers on the Anthropic and Responses APIs follow the marker).
pub fn demo_rounds_only() -> &'static str {
    DEMO_CAMPAIGN
        .split(LOAD_MODELS_MARKER)
        .next()
        .expect("split yields at least one part")
}

/// Demo knobs.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    /// Override `rounds.count` (None: the file's).
    pub rounds: Option<u32>,
    /// Print progress lines.
    pub progress: bool,
    /// Also store results in ClickHouse.
    pub clickhouse: Option<DemoStore>,
}

/// Where a demo stores its results besides printing them.
#[derive(Clone, Debug)]
pub struct DemoStore {
    /// ClickHouse HTTP URL.
    pub url: String,
    /// Database.
    pub db: String,
    /// Spool directory (default [`DEMO_SPOOL_DIR`]).
    pub spool_dir: std::path::PathBuf,
}

/// Spool directory of a demo that stores into ClickHouse.
pub const DEMO_SPOOL_DIR: &str = ".latmesh/demo-spool";

/// Where `latmesh demo` writes its HTML report by default.
pub const DEMO_REPORT: &str = ".latmesh/demo-report.html";

/// Runs the demo and returns the summary.
///
/// # Errors
/// When a local listener cannot be bound, or the campaign fails to complete.
pub async fn run(opts: DemoOptions) -> anyhow::Result<Summary> {
    Ok(run_with(opts, |_| {}).await?.summary)
}

/// Runs the demo with its plan changed by `edit` (after `opts.rounds`; e.g. time windows)
/// and returns everything a report needs: the summary the coordinator sent, the plan, and
/// the coordinator's merged histograms ([`State::report_data`]).
///
/// # Errors
/// As [`run`].
pub async fn run_with(
    opts: DemoOptions,
    edit: impl FnOnce(&mut latmesh_core::plan::Plan),
) -> anyhow::Result<ReportData> {
    let sim_listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("binding the simulator")?;
    sim_listener.set_nonblocking(true)?;
    let sim_addr = sim_listener.local_addr()?;
    // Runs until the process exits (the demo's caller may run another one beside it).
    let _sim = on_own_runtime("latmesh-sim", move || async move {
        match TcpListener::from_std(sim_listener) {
            Ok(l) => latmesh_sim::serve_providers(l, latmesh_sim::SimConfig::default())
                .await
                .map_err(anyhow::Error::from),
            Err(e) => Err(e.into()),
        }
    });

    let coord_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the coordinator")?;
    let coord_url = format!("http://{}", coord_listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (server, store) = match &opts.clickhouse {
        None => (Coordinator::new(State::default()), None),
        Some(store) => {
            let target = latmesh_coordinator::sink::SinkTarget::new(
                &store.url,
                &store.db,
                latmesh_store::Timeouts::default(),
            );
            let (c, spool, sink) = latmesh_coordinator::sink::coordinator_with_sink(
                &store.spool_dir,
                1 << 30,
                target,
            )?;
            (c, Some((spool, sink)))
        }
    };
    let state = server.state().clone();
    let coordinator = tokio::spawn(server.serve(coord_listener, async {
        let _ = stop_rx.await;
    }));

    let text = DEMO_CAMPAIGN.replace("{sim}", &sim_addr.to_string());
    let mut plan = campaign::load_toml_str(&text, std::path::Path::new("."))
        .context("embedded demo campaign")?;
    if let Some(n) = opts.rounds {
        plan.rounds.count = n.max(1);
        // The rule of `campaign launch` (no --allow-long here: the demo is a demo).
        let d = latmesh_core::duration::PlannedDuration::of(&plan);
        anyhow::ensure!(
            d.check(false).is_ok(),
            "--rounds {n}: the demo would run for {}, more than {} h: give fewer rounds",
            latmesh_core::duration::human(d.total_us),
            latmesh_core::duration::MAX_PLANNED_DURATION_S / 3600
        );
    }
    edit(&mut plan);
    let mut agents = Vec::new();
    for (i, region) in plan.regions.iter().enumerate() {
        let mut cfg =
            latmesh_agent::AgentConfig::new(&coord_url, &format!("{region}-{}", i + 1), region);
        // The simulator's region delays need each agent's region (loopback only).
        cfg.emulate_region = true;
        cfg.exit_after_campaigns = Some(1);
        agents.push(on_own_runtime(&format!("agent {region}"), move || {
            latmesh_agent::run(cfg)
        }));
    }

    let mut client = watch::connect(&coord_url).await?;
    watch::wait_for_agents(
        &mut client,
        &coord_url,
        &plan.regions,
        Duration::from_secs(15),
    )
    .await?;
    let reply = watch::launch(&mut client, &coord_url, &plan, 1.0).await?;
    if opts.progress {
        let others: Vec<String> = plan
            .scenarios
            .iter()
            .filter(|s| !s.load.is_rounds())
            .map(|s| format!("{} ({})", s.name, s.load.kind()))
            .collect();
        eprintln!(
            "demo: campaign {} — {} agents, {} providers; {} scenarios × {} rounds, then {}",
            reply.campaign_id,
            reply.agent_ids.len(),
            plan.providers.len(),
            plan.rounds_scenarios().len(),
            plan.rounds.count,
            if others.is_empty() {
                "nothing".to_string()
            } else {
                others.join(", ")
            }
        );
    }
    let every = if opts.progress {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(3600)
    };
    let summary = watch::follow(&mut client, &coord_url, &reply.campaign_id, every).await?;

    for a in agents {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    if let Some((spool, sink)) = store {
        // Results are durable in the spool already; give the sink a moment to drain it.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        // Batches and the campaign/agent rows (the agents row is written once the campaign
        // finished: reports read the agents per region from it).
        let pending = || spool.pending_entries() > 0 || state.pending_store_events() > 0;
        while pending() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if pending() {
            eprintln!(
                "demo: {} batches are still in {DEMO_SPOOL_DIR} (ClickHouse unreachable?); the next coordinator with this spool dir stores them",
                spool.pending_entries()
            );
        }
        sink.abort();
    }
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(2), coordinator).await;
    let mut data = state
        .report_data(&reply.campaign_id)
        .context("the coordinator kept no results of the demo campaign")?;
    // What was printed and written as JSON is the summary the coordinator sent.
    data.summary = summary;
    // Beyond latency: the compatibility checks and the quality set, against the same
    // simulated providers (the simulator keeps running until the process exits).
    if plan.compat.is_some() || plan.quality.is_some() {
        let started = std::time::Instant::now();
        let started_unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        if opts.progress {
            eprintln!("{}", compat_intro(&plan));
        }
        let (run, results) = compat_phase(&plan, &reply.campaign_id).await?;
        if let Some(store) = &opts.clickhouse {
            // Stored with the campaign, as `latmesh compat --campaign ID` stores a run.
            // From the demo's own process: region `local`, `latmesh compat`'s default.
            let client = latmesh_store::client(&store.url);
            let stored = crate::cmd::compat::store_run(
                &client,
                &store.db,
                "local",
                &plan,
                started_unix_us,
                &run,
                &results,
            )
            .await;
            if let Err(e) = stored {
                eprintln!("demo: the compatibility run is not stored: {e:#}");
            }
        }
        data.compat = latmesh_results::parity::CompatReport {
            run_id: run.run_id,
            compat: run.compat,
            quality: plan.quality.is_some().then_some(run.quality),
        };
        if opts.progress {
            eprintln!(
                "demo: compatibility checks and quality set done in {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(data)
}

/// The progress line that says what the compatibility phase sends.
fn compat_intro(plan: &latmesh_core::plan::Plan) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &plan.compat {
        parts.push(format!(
            "{} compatibility checks (v{})",
            c.checks.len(),
            latmesh_core::compat::COMPAT_CHECKS_VERSION
        ));
    }
    if let Some(q) = &plan.quality {
        parts.push(format!(
            "the quality set {} ({} prompts × {} samples, temperature 0)",
            latmesh_core::quality::QUALITY_SET_VERSION,
            q.prompt_ids.len(),
            q.samples
        ));
    }
    format!(
        "demo: beyond latency — {} per provider, from this machine",
        parts.join(" and ")
    )
}

/// Runs `plan`'s `[compat]` checks and `[quality]` set from this process against its
/// providers, as `latmesh compat` does: every provider at once, each provider's checks in
/// sequence beside its quality prompts (at most `latmesh_agent::quality::MAX_IN_FLIGHT` at
/// a time). Credentials are read first, for every provider, so a
/// missing key stops the phase before anything is sent.
///
/// Returns the run as `latmesh compat --json` prints it (the campaign's id as its campaign)
/// and the check results, for storing.
///
/// # Errors
/// A provider's key or secret header variable is unusable; the prober cannot be built.
async fn compat_phase(
    plan: &latmesh_core::plan::Plan,
    campaign_id: &str,
) -> anyhow::Result<(crate::cmd::compat::CompatOutput, Vec<CompatResult>)> {
    use latmesh_agent::compat::{ProviderContext, run_checks};
    use latmesh_agent::quality::run_quality;

    let prober = latmesh_agent::probe::Prober::new(None).context("the compat prober")?;
    let covers = |names: &[String], p: &str| names.is_empty() || names.iter().any(|n| n == p);
    let contexts = plan
        .providers
        .iter()
        .map(|p| ProviderContext::from_env(&prober, p).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Each provider's checks (in sequence) beside its quality prompts (a few at a time).
    let runs = contexts.iter().map(|ctx| async move {
        let name = &ctx.provider.name;
        let checks = async {
            match &plan.compat {
                Some(spec) if covers(&spec.providers, name) => run_checks(ctx, spec).await,
                _ => Vec::new(),
            }
        };
        let samples = async {
            match &plan.quality {
                Some(spec) if covers(&spec.providers, name) => run_quality(ctx, spec).await,
                _ => Vec::new(),
            }
        };
        tokio::join!(checks, samples)
    });
    let (checks, samples): (Vec<_>, Vec<_>) =
        futures::future::join_all(runs).await.into_iter().unzip();
    let checks: Vec<_> = checks.into_iter().flatten().collect();
    let samples: Vec<_> = samples.into_iter().flatten().collect();
    let output = crate::cmd::compat::CompatOutput {
        run_id: format!(
            "compat-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        campaign: campaign_id.to_string(),
        checks_version: latmesh_core::compat::COMPAT_CHECKS_VERSION,
        quality_set: latmesh_core::quality::QUALITY_SET_VERSION.to_string(),
        compat: latmesh_results::parity::compat_by_provider(&checks),
        quality: latmesh_results::parity::parity(&samples),
        samples,
    };
    Ok((output, checks))
}

/// The demo's JSON summary: the [`Summary`]'s fields, then `compat` (the compatibility
/// checks per provider, `[]` when not run), `quality` (quality parity, `null` when not run)
/// and `selection` (the selection table of every scenario × region and `ALL`, gates and
/// ranks included; [`latmesh_results::analysis::SelectionTable`]).
#[derive(serde::Serialize)]
pub struct DemoJson<'a> {
    /// The campaign summary, its fields at the top level.
    #[serde(flatten)]
    pub summary: &'a Summary,
    /// Compatibility results per provider.
    pub compat: &'a [latmesh_results::parity::ProviderCompat],
    /// Quality parity.
    pub quality: Option<&'a latmesh_results::parity::QualityParity>,
    /// Selection tables per scenario × region.
    pub selection: &'a [latmesh_results::analysis::SelectionTable],
}

/// Writes [`DemoJson`] of `data` (with `selection`, from its analysis) to `path`.
///
/// # Errors
/// The directory cannot be made or the file written.
pub fn write_demo_json(
    data: &ReportData,
    selection: &[latmesh_results::analysis::SelectionTable],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let json = DemoJson {
        summary: &data.summary,
        compat: &data.compat.compat,
        quality: data.compat.quality.as_ref(),
        selection,
    };
    let text = serde_json::to_string_pretty(&json)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// What the demo prints after the matrix when the compatibility phase ran: the compat
/// table, quality parity, and the selection tables `shown` asks for (which use their
/// measured scores); empty when it did not run.
fn beyond_latency(
    data: &ReportData,
    selection: &[latmesh_results::analysis::SelectionTable],
    shown: crate::ui::analysis::SelectionShown,
) -> String {
    let c = &data.compat;
    if c.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if !c.compat.is_empty() {
        out.push('\n');
        out.push_str(&crate::ui::compat::render_compat(&c.compat));
    }
    if let Some(q) = &c.quality {
        out.push('\n');
        out.push_str(&crate::ui::compat::render_quality(q));
    }
    out.push_str(&crate::ui::analysis::render_selections(selection, shown));
    out
}

/// Runs `make()`'s future to completion on a single-threaded runtime of its own, on a thread of
/// its own (as a separate process would run), and hands back its output.
fn on_own_runtime<F, T>(
    name: &str,
    make: impl FnOnce() -> F + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T>
where
    F: std::future::Future<Output = T> + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the demo's component");
            let _ = tx.send(rt.block_on(make()));
        })
        .expect("a thread for the demo's component");
    rx
}

/// Arguments of `latmesh demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Write the JSON summary here (default: .latmesh/demo-summary.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Rounds to run (default: the embedded campaign's 12).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: Option<u32>,
    /// Also store the results in this ClickHouse (HTTP URL), through a spool in
    /// .latmesh/demo-spool.
    #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
    clickhouse_url: Option<String>,
    /// ClickHouse database.
    #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
    clickhouse_db: String,
    /// Write the HTML report here (default: .latmesh/demo-report.html).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Selection tables to print: `first` (the first scenario over every region, and how
    /// many more there are) or `all` (every scenario × region). The JSON summary and the
    /// HTML report always have all of them.
    #[arg(long, value_enum, default_value = "first")]
    selection: crate::ui::analysis::SelectionShown,
    #[allow(missing_docs)] // its help is its type's
    #[command(flatten)]
    gate: crate::exit_status::FailGate,
}

/// Runs the demo, prints its matrix, writes its JSON summary and HTML report.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run_cli(args: DemoArgs) -> anyhow::Result<()> {
    let DemoArgs {
        json,
        rounds,
        clickhouse_url,
        clickhouse_db,
        report,
        selection,
        gate,
    } = args;
    let started = std::time::Instant::now();
    let path = json.unwrap_or_else(|| PathBuf::from(".latmesh/demo-summary.json"));
    let report = report.unwrap_or_else(|| PathBuf::from(DEMO_REPORT));
    // Fail before a minute of probing, not after it.
    watch::check_writable(&path)?;
    watch::check_writable(&report)?;
    let store = clickhouse_url.map(|url| DemoStore {
        url,
        db: clickhouse_db,
        spool_dir: PathBuf::from(DEMO_SPOOL_DIR),
    });
    let data = run_with(
        DemoOptions {
            rounds,
            progress: true,
            clickhouse: store.clone(),
        },
        |_| {},
    )
    .await?;
    let summary = &data.summary;
    if let Some(store) = &store {
        eprintln!(
            "stored in ClickHouse {} (database {}): latmesh query matrix --campaign {} --clickhouse-url {} --clickhouse-db {}",
            store.url, store.db, summary.campaign_id, store.url, store.db
        );
    }
    print!("{}", crate::ui::matrix::render(summary));
    let tables = latmesh_results::analysis::selection::tables(&data);
    print!("{}", beyond_latency(&data, &tables, selection));
    write_demo_json(&data, &tables, &path)?;
    // With ClickHouse, the sections that need each row's time come from there.
    let (source, extras) = match &store {
        Some(s) => {
            match latmesh_store::query::extras(&latmesh_store::client(&s.url), &s.db, &data).await {
                Ok(extras) => ("memory and clickhouse", extras),
                Err(e) => {
                    eprintln!("demo: the report has no ClickHouse sections: {e:#}");
                    ("memory", Default::default())
                }
            }
        }
        None => ("memory", Default::default()),
    };
    let model = latmesh_report::model(&data, source, extras);
    latmesh_report::write(&model, latmesh_report::Format::Html, &report)?;
    eprintln!(
        "demo finished in {:.0} s; JSON summary: {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    println!("report: {}", report.display());
    // After everything is printed and written: a dead cell (or one over --fail-above-pct).
    crate::exit_status::conclude(Ok(()), gate.judge([(None, summary)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use latmesh_core::compat::CompatSpec;

    fn load(text: &str) -> latmesh_core::plan::Plan {
        campaign::load_toml_str(
            &text.replace("{sim}", "127.0.0.1:9"),
            std::path::Path::new("."),
        )
        .unwrap()
    }

    #[test]
    fn the_embedded_campaign_measures_compat_and_quality_and_ranks_by_the_issues_weights() {
        let plan = load(DEMO_CAMPAIGN);
        assert_eq!(plan.compat, Some(CompatSpec::default()));
        let q = plan.quality.as_ref().unwrap();
        assert_eq!(q.samples, 2);
        assert_eq!(
            q.prompt_ids.len(),
            latmesh_core::quality::prompt_set().prompts.len()
        );
        let sel = plan.selection.as_ref().unwrap();
        let w: Vec<(&str, f64)> = sel.weights.named().to_vec();
        assert_eq!(
            w,
            [
                ("latency", 0.25),
                ("stability", 0.15),
                ("price", 0.15),
                ("quality", 0.30),
                ("compatibility", 0.10),
                ("compliance", 0.05),
            ]
        );
        // Every provider has prices (all different between profiles) and a compliance score;
        // quality and compatibility are left to the measurement.
        let mut prices = Vec::new();
        for p in &plan.providers {
            let price = p.price.as_ref().unwrap_or_else(|| panic!("{}", p.name));
            prices.push(price.input_usd_per_mtok.to_bits());
            let s = &sel.scores[&p.name];
            assert!(s.compliance.is_some(), "{}", p.name);
            assert_eq!((s.quality, s.compatibility), (None, None), "{}", p.name);
        }
        prices.sort_unstable();
        prices.dedup();
        assert_eq!(prices.len(), 9, "one price per simulated profile");
        // Long contexts: two tiers of generated prompts, each its own scenario, with an exact
        // output length, a warm-up and an SLO; the open loop has an SLO too.
        let tiers: Vec<(&str, u32)> = plan
            .scenarios
            .iter()
            .filter_map(|s| s.synth.as_ref().map(|t| (s.name.as_str(), t.input_tokens)))
            .collect();
        assert_eq!(tiers, [("ctx.1k", 1000), ("ctx.8k", 8000)]);
        for s in plan.scenarios.iter().filter(|s| s.synth.is_some()) {
            assert_eq!((s.output_tokens, s.warmup), (Some(32), 1), "{}", s.name);
            assert_eq!(
                s.slo.as_ref().and_then(|o| o.ttft_ms),
                Some(2000.0),
                "{}",
                s.name
            );
        }
        let open = plan
            .scenarios
            .iter()
            .find(|s| s.name == "open-loop")
            .unwrap();
        assert_eq!(open.slo.as_ref().and_then(|o| o.ttft_ms), Some(1500.0));
        // The rounds-only part (tests of the latency path) has none of these sections.
        let rounds = load(demo_rounds_only());
        assert!(rounds.compat.is_none() && rounds.quality.is_none());
        assert!(rounds.selection.is_none());
    }
}
