//! What `latmesh compat` stored for a campaign, read back: the latest run's compatibility
//! results and quality parity ([`compat_report`], what reports show), and the quality samples
//! of a run ([`latest_run`], [`run_samples`]) that `latmesh check`'s `answers_changed` rule
//! compares.

use latmesh_core::quality::QualitySample;
use latmesh_results::parity::{CompatReport, compat_by_provider, parity};
use serde::Deserialize;

use super::super::rows::{CompatResultRow, QualitySampleRow};
use super::super::{StoreError, check_identifier};

/// Which runs [`latest_run`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunScope {
    /// The runs of one campaign.
    Campaign(String),
    /// Runs of any campaign that started in `[from, to)`, UTC µs.
    Range(i64, i64),
}

/// One stored `latmesh compat` run.
#[derive(Clone, Debug, PartialEq, Eq, clickhouse::Row, Deserialize)]
pub struct StoredRun {
    /// Its id.
    pub run_id: String,
    /// The campaign it belongs to.
    pub campaign_id: String,
    /// When it started, UTC µs.
    pub time_us: u64,
}

/// Which part of a run [`latest_run`] looks for: a run of `--checks-only` has no quality
/// samples, one of `--quality-only` no check results, and the latest run *with* the part
/// asked for is the one that counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunPart {
    /// Compatibility check results (`compat_results`).
    Checks,
    /// Quality samples (`quality_samples`).
    Quality,
}

/// The latest run (by start, then id) of `scope` that stored `part`; `None` when there is
/// none.
///
/// # Errors
/// ClickHouse errors; a bad `db`.
pub async fn latest_run(
    client: &clickhouse::Client,
    db: &str,
    scope: &RunScope,
    part: RunPart,
) -> Result<Option<StoredRun>, StoreError> {
    check_identifier(db)?;
    let cond = match scope {
        RunScope::Campaign(_) => "campaign_id = ?",
        RunScope::Range(..) => "time_us >= ? AND time_us < ?",
    };
    let table = match part {
        RunPart::Checks => "compat_results",
        RunPart::Quality => "quality_samples",
    };
    let sql = format!(
        // The aggregate's alias is not `campaign_id`: ClickHouse 18.16 would read the
        // WHERE's `campaign_id` as the alias (an aggregate in WHERE).
        "SELECT run_id, any(campaign_id) AS run_campaign, max(time_us) AS t FROM \
         {db}.{table} WHERE {cond} \
         GROUP BY run_id ORDER BY t DESC, run_id DESC LIMIT 1"
    );
    let mut q = client.query(&sql);
    q = match scope {
        RunScope::Campaign(id) => q.bind(id.as_str()),
        RunScope::Range(from, to) => q
            .bind(u64::try_from(*from).unwrap_or(0))
            .bind(u64::try_from(*to).unwrap_or(0)),
    };
    Ok(q.fetch_all::<StoredRun>().await?.into_iter().next())
}

/// The quality samples of run `run_id`, each with the region it ran from (by provider,
/// region, prompt, sample).
///
/// # Errors
/// ClickHouse errors; a bad `db`.
pub async fn run_samples(
    client: &clickhouse::Client,
    db: &str,
    run_id: &str,
) -> Result<Vec<(String, QualitySample)>, StoreError> {
    check_identifier(db)?;
    let rows: Vec<QualitySampleRow> = client
        .query(&format!(
            "SELECT ?fields FROM {db}.quality_samples WHERE run_id = ? \
             ORDER BY provider, region, prompt_id, sample"
        ))
        .bind(run_id)
        .fetch_all()
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.region.clone(), r.to_sample()))
        .collect())
}

/// What the latest `latmesh compat` runs of campaign `campaign_id` measured: the
/// compatibility results per provider ([`compat_by_provider`]) of the latest run that ran
/// checks, and the quality parity ([`parity`]) of the latest run that ran the quality set
/// (one run, or two when `--checks-only` and `--quality-only` ran apart; `run_id` then names
/// both, `+`-joined); an empty [`CompatReport`] when none is stored. Providers in name order.
///
/// # Errors
/// ClickHouse errors; a bad `db`.
pub async fn compat_report(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<CompatReport, StoreError> {
    let scope = RunScope::Campaign(campaign_id.to_string());
    let checks_run = latest_run(client, db, &scope, RunPart::Checks).await?;
    let quality_run = latest_run(client, db, &scope, RunPart::Quality).await?;
    let mut results = Vec::new();
    if let Some(run) = &checks_run {
        let rows: Vec<CompatResultRow> = client
            .query(&format!(
                "SELECT ?fields FROM {db}.compat_results WHERE run_id = ? \
                 ORDER BY provider, region, `check`"
            ))
            .bind(&run.run_id)
            .fetch_all()
            .await?;
        results = rows.iter().filter_map(CompatResultRow::to_result).collect();
    }
    let mut samples: Vec<QualitySample> = Vec::new();
    if let Some(run) = &quality_run {
        samples = run_samples(client, db, &run.run_id)
            .await?
            .into_iter()
            .map(|(_, s)| s)
            .collect();
    }
    let mut ids: Vec<&str> = [&checks_run, &quality_run]
        .into_iter()
        .flatten()
        .map(|r| r.run_id.as_str())
        .collect();
    ids.dedup();
    Ok(CompatReport {
        run_id: ids.join("+"),
        compat: compat_by_provider(&results),
        quality: (!samples.is_empty()).then(|| parity(&samples)),
    })
}
