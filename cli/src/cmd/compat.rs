//! `latmesh compat CAMPAIGN_FILE`: the compatibility checks (`[compat]`) and the quality set
//! (`[quality]`) of a campaign file's providers, run from this machine through the agent's
//! engine (`latmesh_agent::compat`, `latmesh_agent::quality`), keys from this machine's
//! environment. Prints the provider × check table and the quality-parity table, or one JSON
//! object (`--json`); stores the run with `--clickhouse-url`. Exit status: 0 when it ran
//! (verdicts are data), 2 on an error.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use latmesh_agent::compat::{ProviderContext, run_checks};
use latmesh_agent::probe::Prober;
use latmesh_agent::quality::run_quality;
use latmesh_core::campaign;
use latmesh_core::compat::{COMPAT_CHECKS_VERSION, CompatResult, CompatSpec};
use latmesh_core::plan::{Plan, ProviderSpec};
use latmesh_core::quality::{QUALITY_SET_VERSION, QualitySample, QualitySpec};
use latmesh_results::parity::{ProviderCompat, QualityParity, compat_by_provider, parity};

/// Arguments of `latmesh compat`.
#[derive(Args, Debug)]
pub struct CompatArgs {
    /// Campaign file (TOML or YAML); its `[compat]` and `[quality]` sections (their defaults
    /// when absent: every check, the whole prompt set).
    file: PathBuf,
    /// Run the compatibility checks only.
    #[arg(long, conflicts_with = "quality_only")]
    checks_only: bool,
    /// Run the quality set only.
    #[arg(long)]
    quality_only: bool,
    /// Only this provider (repeatable; each must be one of the file's), instead of the
    /// sections' `providers`.
    #[arg(long = "provider", value_name = "NAME")]
    providers: Vec<String>,
    /// Answers per prompt and provider (1..=20), instead of `[quality] samples`.
    #[arg(long)]
    samples: Option<u32>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// PEM file with CA certificate(s) to trust for https:// providers, besides the public
    /// webpki roots.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// The campaign id the run belongs to when stored (default: a new id).
    #[arg(long = "campaign", value_name = "ID")]
    campaign: Option<String>,
    /// Store the run in this ClickHouse (HTTP URL); nothing is stored without it.
    #[arg(long)]
    clickhouse_url: Option<String>,
    /// ClickHouse database (with --clickhouse-url).
    #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
    clickhouse_db: String,
    /// The region label the run is stored under (where this machine is); shown next to the
    /// campaign's regions in reports and `latmesh check`.
    #[arg(long, default_value = "local")]
    region: String,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct CompatOutput {
    /// This run's id.
    pub run_id: String,
    /// The campaign id it belongs to.
    pub campaign: String,
    /// [`COMPAT_CHECKS_VERSION`].
    pub checks_version: u32,
    /// [`QUALITY_SET_VERSION`]; empty when no quality set ran.
    pub quality_set: String,
    /// Checks per provider, scored.
    pub compat: Vec<ProviderCompat>,
    /// Quality parity over the samples.
    pub quality: QualityParity,
    /// Every sampled answer (normalized final answers only).
    pub samples: Vec<QualitySample>,
}

/// Runs `latmesh compat` and returns its exit status: 0 when it ran, 2 on an error (printed
/// to stderr).
pub async fn run_cli(args: CompatArgs) -> u8 {
    match run(args).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {}", latmesh_core::error_text::chain(e.as_ref()));
            2
        }
    }
}

/// The providers of `plan` a part runs on: `--provider` names when given, else the
/// section's `providers` (empty: all), in file order.
fn chosen<'p>(plan: &'p Plan, cli: &[String], section: &[String]) -> Vec<&'p ProviderSpec> {
    let names = if cli.is_empty() { section } else { cli };
    plan.providers
        .iter()
        .filter(|p| names.is_empty() || names.contains(&p.name))
        .collect()
}

/// `run` on the context of every provider of `on`, concurrently; their rows in `on`'s order.
async fn on_each<'c, 'a: 'c, T, F, Fut>(
    on: &[&ProviderSpec],
    ctx_of: &impl Fn(&ProviderSpec) -> Option<&'c ProviderContext<'a>>,
    run: F,
) -> Vec<T>
where
    F: Fn(&'c ProviderContext<'a>) -> Fut,
    Fut: std::future::Future<Output = Vec<T>>,
{
    futures::future::join_all(on.iter().filter_map(|p| ctx_of(p)).map(run))
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Loads the file, runs the parts asked for, prints (and stores) the results.
///
/// # Errors
/// A bad file or option, an unknown `--provider`, a missing key variable (before anything
/// is sent), an unusable `--ca-file`, or storing failed.
pub async fn run(args: CompatArgs) -> anyhow::Result<()> {
    let file = args.file.display().to_string();
    let plan = campaign::load_file(&args.file)?;
    if let Some(note) = latmesh_core::env_overrides::applied_overrides_note() {
        eprintln!("{note}");
    }
    for name in &args.providers {
        anyhow::ensure!(
            plan.providers.iter().any(|p| &p.name == name),
            "--provider {name}: no such provider in {file} (its providers: {})",
            plan.providers
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let checks: CompatSpec = plan.compat.clone().unwrap_or_default();
    let mut quality: QualitySpec = plan.quality.clone().unwrap_or_default();
    if let Some(n) = args.samples {
        anyhow::ensure!((1..=20).contains(&n), "--samples: must be 1 to 20, got {n}");
        quality.samples = n;
    }
    let check_on = if args.quality_only {
        Vec::new()
    } else {
        chosen(&plan, &args.providers, &checks.providers)
    };
    let quality_on = if args.checks_only {
        Vec::new()
    } else {
        chosen(&plan, &args.providers, &quality.providers)
    };
    // The database is prepared before anything is sent: a wrong URL fails in a second, not
    // after every check has run.
    let store = match &args.clickhouse_url {
        Some(url) => {
            let client = latmesh_store::client(url);
            latmesh_store::migrate(&client, &args.clickhouse_db, None)
                .await
                .with_context(|| format!("--clickhouse-url {url}: preparing the database"))?;
            Some(client)
        }
        None => None,
    };
    let started_unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let prober =
        Prober::with_root_certificate_file(None, args.ca_file.as_deref()).context("--ca-file")?;
    // Every credential is read before anything is sent.
    let mut contexts: Vec<ProviderContext<'_>> = Vec::new();
    for p in plan
        .providers
        .iter()
        .filter(|p| check_on.iter().chain(&quality_on).any(|c| c.name == p.name))
    {
        let ctx =
            ProviderContext::from_env(&prober, p).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
        contexts.push(ctx);
    }
    let ctx_of = |p: &ProviderSpec| contexts.iter().find(|c| c.provider.name == p.name);
    if !args.json {
        let mut parts = Vec::new();
        if !check_on.is_empty() {
            parts.push(format!(
                "{} check(s) on {} provider(s)",
                checks.checks.len(),
                check_on.len()
            ));
        }
        if !quality_on.is_empty() {
            parts.push(format!(
                "{} prompt(s) × {} sample(s) on {} provider(s)",
                quality.prompt_ids.len(),
                quality.samples,
                quality_on.len()
            ));
        }
        eprintln!("compat: {}", parts.join(", "));
    }
    // Providers concurrently; each provider's checks in sequence, then the quality sets.
    let results: Vec<CompatResult> = on_each(&check_on, &ctx_of, |c| run_checks(c, &checks)).await;
    let samples: Vec<QualitySample> =
        on_each(&quality_on, &ctx_of, |c| run_quality(c, &quality)).await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let output = CompatOutput {
        run_id: format!("compat-{}", &id[..12]),
        campaign: args
            .campaign
            .clone()
            .unwrap_or_else(|| format!("{}-{}", plan.name, &id[12..20])),
        checks_version: COMPAT_CHECKS_VERSION,
        quality_set: if quality_on.is_empty() {
            String::new()
        } else {
            QUALITY_SET_VERSION.to_string()
        },
        compat: compat_by_provider(&results),
        quality: parity(&samples),
        samples,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&output)?);
    } else {
        print!("{}", crate::ui::compat::render_compat(&output.compat));
        if !output.compat.is_empty() && !output.quality.providers.is_empty() {
            println!();
        }
        print!("{}", crate::ui::compat::render_quality(&output.quality));
        println!("run {} (campaign {})", output.run_id, output.campaign);
    }
    if let (Some(client), Some(url)) = (&store, &args.clickhouse_url) {
        store_run(
            client,
            &args.clickhouse_db,
            &args.region,
            &plan,
            started_unix_us,
            &output,
            &results,
        )
        .await
        .with_context(|| format!("--clickhouse-url {url}: storing run {}", output.run_id))?;
        if !args.json {
            eprintln!("stored run {} in {}", output.run_id, args.clickhouse_db);
        }
    }
    Ok(())
}

/// Stores one run in ClickHouse (`store/migrations/0009_compat.sql`): its check results
/// and its samples, keyed by `output.run_id` and `output.campaign`, stamped with `plan`'s
/// name, `region`, each provider's API and the run's start (`started_unix_us`). A repeated
/// call for one run stores nothing twice ([`latmesh_store::insert_compat_run`]).
///
/// # Errors
/// ClickHouse refused or could not be reached.
pub async fn store_run(
    client: &clickhouse::Client,
    clickhouse_db: &str,
    region: &str,
    plan: &Plan,
    started_unix_us: i64,
    output: &CompatOutput,
    results: &[CompatResult],
) -> anyhow::Result<()> {
    let run = latmesh_store::compat::CompatRun {
        run_id: output.run_id.clone(),
        campaign_id: output.campaign.clone(),
        campaign_name: plan.name.clone(),
        region: region.to_string(),
        started_unix_us,
        checks_version: output.checks_version,
        quality_set: output.quality_set.clone(),
        apis: plan
            .providers
            .iter()
            .map(|p| (p.name.clone(), p.request.api.name().to_string()))
            .collect(),
    };
    latmesh_store::compat::insert_compat_run(client, clickhouse_db, &run, results, &output.samples)
        .await?;
    Ok(())
}
