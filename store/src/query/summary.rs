//! A stored campaign's summary rebuilt from ClickHouse alone ([`stored_summary`]): what
//! `latmesh query matrix` prints and a report from ClickHouse starts from.

use anyhow::Context as _;

use super::campaign::{agents, campaign};
use super::filter::QueryFilter;
use super::matrix::matrix_percentiles;
use super::sweep::sweep;
use latmesh_results::summary::{AgentSummary, MatrixCell, StartSync, Summary};

/// The summary of the stored campaign `filter.campaign_id`, rebuilt from ClickHouse alone
/// (matrix cells with goodput and warm-up counts, sweep rows, rate steps, SLO search answers,
/// generated-prompt tiers and token counts of the rows `filter` selects, at the stored
/// plan's percentiles; no rate rows or start facts).
///
/// # Errors
/// ClickHouse errors; a filter without a campaign; a campaign that is not stored, whose plan
/// does not parse, or without results matching the filter.
pub async fn stored_summary(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> anyhow::Result<Summary> {
    let id = filter
        .campaign_id
        .as_deref()
        .context("a stored summary is of one campaign: give one")?;
    let campaign = campaign(client, db, id)
        .await?
        .with_context(|| format!("campaign {id:?} is not in {db}.campaigns"))?;
    let plan: latmesh_core::plan::Plan = serde_json::from_str(&campaign.plan_json)
        .with_context(|| format!("stored plan of campaign {id:?}"))?;
    // The percentile list of the campaign's plan.
    let percentiles = plan.percentiles.clone();
    let rows = matrix_percentiles(client, db, filter, &percentiles).await?;
    anyhow::ensure!(
        !rows.is_empty(),
        "campaign {id:?} has no stored results matching these filters"
    );
    let agents = agents(client, db, id).await?;
    let sweeps = sweep(client, db, filter).await?;
    let per_region =
        latmesh_results::load_stats::agents_per_region(agents.iter().map(|a| a.region.as_str()));
    let rate_steps = super::slo::rate_steps(client, db, filter, &plan, &per_region).await?;
    let tiers = super::tiers::tiers(client, db, filter, &plan, |region, provider, scenario| {
        rows.iter()
            .find(|c| c.region == region && c.provider == provider && c.scenario == scenario)
            .and_then(|c| c.goodput.clone())
    })
    .await?;
    let token_counts = super::tiers::token_counts(client, db, filter, &plan).await?;
    let cells: Vec<MatrixCell> = rows.iter().map(|r| r.to_cell()).collect();
    let models = latmesh_results::model_stats::model_rows(&plan.providers, &cells);
    let keep = |list: &[String], only: &Option<String>| -> Vec<String> {
        list.iter()
            .filter(|x| only.as_ref().is_none_or(|o| o == *x))
            .cloned()
            .collect()
    };
    Ok(Summary {
        campaign_id: campaign.campaign_id.clone(),
        name: campaign.name.clone(),
        plan_hash: campaign.plan_hash.clone(),
        metrics_version: campaign.metrics_version,
        start_at_unix_us: campaign.start_at_us as i64,
        regions: keep(&campaign.regions, &filter.region),
        providers: keep(&campaign.providers, &filter.provider),
        scenarios: keep(&campaign.scenarios, &filter.scenario),
        percentiles,
        cells,
        complete: agents.iter().all(|a| a.complete),
        // Not stored in ClickHouse (a cancelled campaign's agents report skipped slots, so it
        // reads as incomplete there).
        cancelled: false,
        sweeps,
        // Not rebuilt from ClickHouse: open-loop rows, and start facts (not stored there).
        rates: Vec::new(),
        start: StartSync::default(),
        guard: Default::default(), // budget guard: not stored in ClickHouse
        // Not rebuilt from ClickHouse yet: failover client rows (the `failover` column has
        // what they need) and politeness notes.
        failover: Vec::new(),
        politeness: Vec::new(),
        searches: super::slo::searches(&plan, &rate_steps),
        rate_steps,
        tiers,
        token_counts,
        generated_text: latmesh_results::cache_share::text_modes(&plan),
        models,
        agents: agents
            .iter()
            .map(|a| AgentSummary {
                agent_id: a.agent_id.clone(),
                region: a.region.clone(),
                clock_offset_us: a.clock_offset_us,
                clock_uncertainty_us: a.clock_uncertainty_us,
                records: a.records,
                batches: a.batches,
                complete: a.complete,
                skipped: a.skipped,
                delivery: a.delivery(),
            })
            .collect(),
    })
}
