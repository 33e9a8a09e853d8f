//! The query of `latmesh check` that is its own (the others are [`super::query`]'s): the stored
//! runs of a campaign name, for the previous-day rule.

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
