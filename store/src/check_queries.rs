//! The queries of `latmesh check` that are its own (the others are [`super::query`]'s): the
//! stored runs of a campaign name, for the previous-day rule; the SLO goodput counts per cell,
//! for `goodput_below`.

use std::collections::BTreeMap;

use latmesh_results::matrix::ALL_REGIONS;
use serde::Deserialize;

use crate::{StoreError, check_identifier};

/// One stored run: its campaign id and round-0 start.
#[derive(clickhouse::Row, Deserialize)]
struct RunRow {
    campaign_id: String,
    start_at_us: u64,
}

/// Stored campaigns named `name`: (id, round-0 start µs), by start.
pub async fn runs_named(
    client: &clickhouse::Client,
    db: &str,
    name: &str,
) -> Result<Vec<(String, i64)>, StoreError> {
    check_identifier(db)?;
    let rows: Vec<RunRow> = client
        .query(&format!(
            "SELECT campaign_id, max(start_at_us) AS s FROM {db}.campaigns \
             WHERE name = ? GROUP BY campaign_id"
        ))
        .bind(name)
        .fetch_all()
        .await?;
    let mut runs: Vec<(String, i64)> = rows
        .into_iter()
        .map(|r| (r.campaign_id, r.start_at_us as i64))
        .collect();
    runs.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    Ok(runs)
}

/// Which `requests` rows a side of a check reads.
#[derive(Clone, Copy, Debug)]
pub enum RowScope<'a> {
    /// One campaign.
    Campaign(&'a str),
    /// Every campaign's rows sent in `[from, to)`, UTC µs on the agents' clocks.
    Range {
        /// From, inclusive.
        from_unix_us: i64,
        /// To, exclusive.
        to_unix_us: i64,
    },
}

#[derive(clickhouse::Row, Deserialize)]
struct GoodputRow {
    region: String,
    provider: String,
    scenario: String,
    judged: u64,
    met: u64,
}

/// The SLO goodput counts of one cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoodputCount {
    /// Region, or `ALL` (every region of the scope).
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// Requests that met every per-request bound (`slo_met = 1`).
    pub met: u64,
    /// Requests judged (`slo_met` not NULL).
    pub judged: u64,
}

/// The goodput counts of every cell of `scope` with a judged request (a scenario with an
/// SLO), per region and `ALL`: `countIf(slo_met = 1)` and `countIf(slo_met IS NOT NULL)` over
/// the rows with `warmup = 0` — the in-memory summary's counts
/// (`latmesh_results::aggregate::CellCounts::slo_judged`). Scenarios whose records have more
/// than one step (a sweep, rate steps, an SLO search: their steps run at different loads,
/// `latmesh_results::slo_stats::has_cell_goodput`) are left out. Ordered by region,
/// provider, scenario.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn goodput_counts(
    client: &clickhouse::Client,
    db: &str,
    scope: RowScope<'_>,
) -> Result<Vec<GoodputCount>, StoreError> {
    check_identifier(db)?;
    let cond = match scope {
        RowScope::Campaign(_) => "campaign_id = ?",
        RowScope::Range { .. } => {
            "send_time >= toDateTime(?) AND send_unix_us >= ? \
             AND send_time <= toDateTime(?) AND send_unix_us < ?"
        }
    };
    let sql = format!(
        "SELECT region, provider, scenario, countIf(isNotNull(slo_met)) AS judged, \
         countIf(ifNull(slo_met, 0) = 1) AS met FROM {db}.requests \
         WHERE {cond} AND warmup = 0 GROUP BY region, provider, scenario \
         HAVING judged > 0 AND max(step) = 0"
    );
    let q = client.query(&sql);
    let q = match scope {
        RowScope::Campaign(id) => q.bind(id),
        RowScope::Range {
            from_unix_us,
            to_unix_us,
        } => {
            let (from, to) = (
                u64::try_from(from_unix_us).unwrap_or(0),
                u64::try_from(to_unix_us).unwrap_or(0),
            );
            q.bind(from / 1_000_000)
                .bind(from)
                .bind(to / 1_000_000)
                .bind(to)
        }
    };
    let rows: Vec<GoodputRow> = q.fetch_all().await?;
    let mut cells: BTreeMap<(String, String, String), (u64, u64)> = BTreeMap::new();
    for r in rows {
        for region in [r.region.as_str(), ALL_REGIONS] {
            let c = cells
                .entry((region.to_string(), r.provider.clone(), r.scenario.clone()))
                .or_default();
            c.0 += r.met;
            c.1 += r.judged;
        }
    }
    Ok(cells
        .into_iter()
        .map(
            |((region, provider, scenario), (met, judged))| GoodputCount {
                region,
                provider,
                scenario,
                met,
                judged,
            },
        )
        .collect())
}
