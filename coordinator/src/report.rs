//! Reports ([`latmesh_report`]), and the report of a campaign stored in ClickHouse.

pub use latmesh_report::*;

/// The report model of the stored campaign `campaign_id` (database `db` at ClickHouse `url`).
///
/// # Errors
/// ClickHouse errors; a campaign that is not stored or has no results.
pub async fn from_clickhouse(
    url: &str,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<ReportModel> {
    let client = crate::clickhouse::client(url);
    let data = crate::clickhouse::query::report_data(&client, db, campaign_id).await?;
    let extras = crate::clickhouse::query::extras(&client, db, &data).await?;
    Ok(model(&data, "clickhouse", extras))
}
