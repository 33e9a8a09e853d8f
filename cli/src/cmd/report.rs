//! `latmesh report`: a stored campaign's report (HTML, JSON or CSV) from ClickHouse.

use std::path::PathBuf;

use clap::Args;

/// Arguments of `latmesh report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Campaign id.
    campaign_id: String,
    #[command(flatten)]
    ch: crate::cmd::query::ClickhouseArgs,
    /// Output file (`-`: standard output). Default: latmesh-report-CAMPAIGN.EXT.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "html")]
    format: latmesh_report::Format,
}

/// Writes the report.
///
/// # Errors
/// Whatever the command fails with.
pub async fn run(args: ReportArgs) -> anyhow::Result<()> {
    let ReportArgs {
        campaign_id,
        ch,
        out,
        format,
    } = args;
    let url = &ch.clickhouse_url;
    let model = ch
        .timeouts
        .bound(
            url,
            "report",
            from_clickhouse(url, &ch.clickhouse_db, &campaign_id),
        )
        .await?;
    let out = out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "latmesh-report-{campaign_id}.{}",
            format.extension()
        ))
    });
    latmesh_report::write(&model, format, &out)?;
    if out != std::path::Path::new("-") {
        println!("report: {}", out.display());
    }
    Ok(())
}

/// The report model of the stored campaign `campaign_id` (database `db` at ClickHouse `url`):
/// its data and the sections that need each row's time, read back by the store.
///
/// # Errors
/// ClickHouse errors; a campaign that is not stored or has no results.
pub async fn from_clickhouse(
    url: &str,
    db: &str,
    campaign_id: &str,
) -> anyhow::Result<latmesh_report::ReportModel> {
    let client = latmesh_store::client(url);
    let data = latmesh_store::query::report_data(&client, db, campaign_id).await?;
    let extras = latmesh_store::query::extras(&client, db, &data).await?;
    Ok(latmesh_report::model(&data, "clickhouse", extras))
}
