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
    format: latmesh_coordinator::report::Format,
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
            latmesh_coordinator::report::from_clickhouse(url, &ch.clickhouse_db, &campaign_id),
        )
        .await?;
    let out = out.unwrap_or_else(|| {
        PathBuf::from(format!(
            "latmesh-report-{campaign_id}.{}",
            format.extension()
        ))
    });
    latmesh_coordinator::report::write(&model, format, &out)?;
    if out != std::path::Path::new("-") {
        println!("report: {}", out.display());
    }
    Ok(())
}
