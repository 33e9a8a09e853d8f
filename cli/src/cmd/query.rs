//! `latmesh query …` and `latmesh campaign verify`: questions answered from ClickHouse.

use anyhow::Context;
use clap::{Args, Subcommand};

use latmesh_core::metrics::Metric;

use latmesh_store::query::{Percentile, TrendBucket, VerifyLine};
use latmesh_store::{self as store, QueryFilter};

/// Where ClickHouse is.
#[derive(Args, Debug, Clone)]
pub struct ClickhouseArgs {
    /// ClickHouse HTTP URL.
    #[arg(
        long,
        env = "LATMESH_CLICKHOUSE_URL",
        default_value = "http://127.0.0.1:8123"
    )]
    pub clickhouse_url: String,
    /// Database.
    #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
    pub clickhouse_db: String,
    /// How long to wait for it.
    #[command(flatten)]
    pub timeouts: TimeoutArgs,
}

impl ClickhouseArgs {
    /// A client of `--clickhouse-url` (connects bounded by `--clickhouse-connect-timeout-s`).
    pub fn client(&self) -> clickhouse::Client {
        store::client_with(&self.clickhouse_url, &self.timeouts.timeouts())
    }
}

/// How long latmesh waits for ClickHouse (README, "Failure semantics").
#[derive(Args, Debug, Clone, Copy)]
pub struct TimeoutArgs {
    /// Seconds to wait for a TCP connection to ClickHouse.
    #[arg(
        long,
        env = "LATMESH_CLICKHOUSE_CONNECT_TIMEOUT_S",
        default_value_t = 5.0,
        value_parser = parse_timeout_s,
        value_name = "SECONDS"
    )]
    pub clickhouse_connect_timeout_s: f64,
    /// Seconds to wait for ClickHouse's answer to one query or statement; for a command
    /// (`query …`, `campaign verify`, `report`, `check`), its whole talk with ClickHouse.
    /// Inserts get 1 s more per 10,000 rows.
    #[arg(
        long,
        env = "LATMESH_CLICKHOUSE_TIMEOUT_S",
        default_value_t = 60.0,
        value_parser = parse_timeout_s,
        value_name = "SECONDS"
    )]
    pub clickhouse_timeout_s: f64,
}

impl Default for TimeoutArgs {
    /// The flags' defaults: 5 s to connect, 60 s per query.
    fn default() -> Self {
        TimeoutArgs {
            clickhouse_connect_timeout_s: 5.0,
            clickhouse_timeout_s: 60.0,
        }
    }
}

impl TimeoutArgs {
    /// The bounds these flags set.
    pub fn timeouts(&self) -> store::Timeouts {
        store::Timeouts {
            connect: std::time::Duration::from_secs_f64(self.clickhouse_connect_timeout_s),
            query: std::time::Duration::from_secs_f64(self.clickhouse_timeout_s),
        }
    }

    /// Runs `op`, a command's talk with the ClickHouse at `url` (`what`: `"query matrix"`),
    /// for at most `--clickhouse-timeout-s`.
    ///
    /// # Errors
    /// `op`'s error, and either in the context `ClickHouse at URL`; after the bound, one
    /// naming `what` and the flag.
    pub async fn bound<T>(
        &self,
        url: &str,
        what: &str,
        op: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        let result = match tokio::time::timeout(self.timeouts().query, op).await {
            Ok(r) => r,
            Err(_) => Err(anyhow::anyhow!(
                "did not answer within {} s ({what}); is it stalled or overloaded? \
                 (--clickhouse-timeout-s / LATMESH_CLICKHOUSE_TIMEOUT_S sets the bound)",
                self.clickhouse_timeout_s
            )),
        };
        result.with_context(|| format!("ClickHouse at {url}"))
    }
}

fn parse_timeout_s(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?}: a number of seconds above 0, at most 86400")),
    }
}

/// Which rows to look at.
#[derive(Args, Debug, Clone)]
pub struct FilterArgs {
    /// Campaign id.
    #[arg(long)]
    pub campaign: String,
    /// Only this scenario.
    #[arg(long)]
    pub scenario: Option<String>,
    /// Only this region.
    #[arg(long)]
    pub region: Option<String>,
    /// Only this provider.
    #[arg(long)]
    pub provider: Option<String>,
    /// From this time, UTC microseconds since the epoch (inclusive).
    #[arg(long)]
    pub from_unix_us: Option<i64>,
    /// Before this time, UTC microseconds since the epoch.
    #[arg(long)]
    pub to_unix_us: Option<i64>,
}

impl FilterArgs {
    fn filter(&self) -> QueryFilter {
        QueryFilter {
            campaign_id: Some(self.campaign.clone()),
            scenario: self.scenario.clone(),
            region: self.region.clone(),
            provider: self.provider.clone(),
            window: None,
            from_unix_us: self.from_unix_us,
            to_unix_us: self.to_unix_us,
        }
    }
}

/// Which number `query windows` and `query trend` report.
#[derive(Args, Debug, Clone)]
pub struct StatArgs {
    /// Metric: ttft, ttfc, e2e or tpot.
    #[arg(long, default_value = "ttft", value_parser = parse_metric)]
    pub metric: Metric,
    /// Percentile: 50, 90, 95 or 99 (exact, from the merged stored histograms).
    #[arg(long, default_value = "50", value_parser = parse_percentile)]
    pub percentile: Percentile,
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    match Metric::parse(s) {
        Some(m @ (Metric::Ttft | Metric::Ttfc | Metric::E2e | Metric::Tpot)) => Ok(m),
        _ => Err(format!("{s:?}: use ttft, ttfc, e2e or tpot")),
    }
}

fn parse_percentile(s: &str) -> Result<Percentile, String> {
    s.parse()
        .ok()
        .and_then(Percentile::from_number)
        .ok_or_else(|| format!("{s:?}: use 50, 90, 95 or 99"))
}

fn parse_bucket(s: &str) -> Result<TrendBucket, String> {
    TrendBucket::parse(s).ok_or_else(|| format!("{s:?}: use hour, day or local-hour"))
}

/// Which rows `query trend` looks at: one provider, optionally one campaign.
#[derive(Args, Debug, Clone)]
pub struct TrendFilterArgs {
    /// The provider.
    #[arg(long)]
    pub provider: String,
    /// Only this campaign (required for `--bucket local-hour`: its time zones).
    #[arg(long)]
    pub campaign: Option<String>,
    /// Only this scenario.
    #[arg(long)]
    pub scenario: Option<String>,
    /// Only this region.
    #[arg(long)]
    pub region: Option<String>,
    /// From this time, UTC microseconds since the epoch (inclusive; agent clock).
    #[arg(long)]
    pub from_unix_us: Option<i64>,
    /// Before this time, UTC microseconds since the epoch (agent clock).
    #[arg(long)]
    pub to_unix_us: Option<i64>,
}

impl TrendFilterArgs {
    fn filter(&self) -> QueryFilter {
        QueryFilter {
            campaign_id: self.campaign.clone(),
            scenario: self.scenario.clone(),
            region: self.region.clone(),
            provider: Some(self.provider.clone()),
            window: None,
            from_unix_us: self.from_unix_us,
            to_unix_us: self.to_unix_us,
        }
    }
}

/// `latmesh query …`.
#[derive(Subcommand, Debug)]
pub enum QueryCmd {
    /// Region × provider matrix of a stored campaign (exact percentiles from the stored
    /// histograms, never an average of percentiles).
    Matrix {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Outcome mix per provider and region, with the latest error of each kind.
    Errors {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Peak vs off-peak: per provider and region, a percentile in each time window of the
    /// campaign, the change between the first two windows, and attempts and error % per window.
    Windows {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Which metric and percentile.
        #[command(flatten)]
        stat: StatArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Concurrency sweeps of a stored campaign: per sweep scenario, provider and region (and
    /// all regions merged), every step's requests, error %, TTFT and E2E P50/P90/P95/P99
    /// (exact, from the step's merged histograms; `~` marks one its samples do not support)
    /// and throughput, and the knee.
    Sweep {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON (the summary's `sweeps` rows) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// Generated-prompt tiers of a stored campaign: per tier, provider and region (and all
    /// regions merged) TTFT P50/P95 (exact, from the merged histograms; warm-up left out),
    /// TTST, prefill throughput, E2E per output token, requests refused past the context,
    /// and how each provider counted the generated tokens.
    Tiers {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON (the summary's `tiers` and `token_counts`) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// SLO goodput of a stored campaign: per cell of a scenario with an SLO, goodput with its
    /// 95 % interval and the verdict; per rate step the rate, arrivals, goodput and verdict;
    /// and each SLO search's answer (the highest rate meeting the SLO) per provider and
    /// region.
    Slo {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON (`goodput` cells, `rate_steps`, `searches`) instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// A provider's percentile per UTC hour or day (or local hour of day), per region.
    Trend {
        /// Where ClickHouse is.
        #[command(flatten)]
        ch: ClickhouseArgs,
        /// Which rows.
        #[command(flatten)]
        filter: TrendFilterArgs,
        /// Which metric and percentile.
        #[command(flatten)]
        stat: StatArgs,
        /// Bucket: hour (UTC), day (UTC) or local-hour (hour of day in each region's zone).
        #[arg(long, default_value = "hour", value_parser = parse_bucket)]
        bucket: TrendBucket,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `query` command.
///
/// # Errors
/// ClickHouse errors; an unknown campaign.
pub async fn run_query(cmd: QueryCmd) -> anyhow::Result<()> {
    let (ch, what) = match &cmd {
        QueryCmd::Matrix { ch, .. } => (ch.clone(), "query matrix"),
        QueryCmd::Errors { ch, .. } => (ch.clone(), "query errors"),
        QueryCmd::Windows { ch, .. } => (ch.clone(), "query windows"),
        QueryCmd::Sweep { ch, .. } => (ch.clone(), "query sweep"),
        QueryCmd::Trend { ch, .. } => (ch.clone(), "query trend"),
        QueryCmd::Tiers { ch, .. } => (ch.clone(), "query tiers"),
        QueryCmd::Slo { ch, .. } => (ch.clone(), "query slo"),
    };
    ch.timeouts
        .bound(&ch.clickhouse_url, what, run_query_at(cmd))
        .await
}

async fn run_query_at(cmd: QueryCmd) -> anyhow::Result<()> {
    match cmd {
        QueryCmd::Matrix { ch, filter, json } => {
            let summary =
                store::query::stored_summary(&ch.client(), &ch.clickhouse_db, &filter.filter())
                    .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", crate::ui::matrix::render(&summary));
            }
            Ok(())
        }
        QueryCmd::Errors { ch, filter, json } => {
            let client = ch.client();
            let rows = store::errors(&client, &ch.clickhouse_db, &filter.filter()).await?;
            anyhow::ensure!(
                !rows.is_empty(),
                "no request in {}.requests matches campaign {:?} and these filters",
                ch.clickhouse_db,
                filter.campaign
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!(
                "{:<20} {:<14} {:<18} {:>6} {:>7} {:>7}  last error",
                "PROVIDER", "REGION", "OUTCOME", "STATUS", "COUNT", "%"
            );
            for r in rows {
                let last = [
                    r.last_error_type.as_deref(),
                    r.last_error_message.as_deref(),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
                println!(
                    "{:<20} {:<14} {:<18} {:>6} {:>7} {:>6.1}%  {}",
                    r.provider,
                    r.region,
                    r.outcome,
                    r.http_status
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "-".into()),
                    r.count,
                    r.pct,
                    last
                );
            }
            Ok(())
        }
        QueryCmd::Windows {
            ch,
            filter,
            stat,
            json,
        } => {
            let client = ch.client();
            let db = &ch.clickhouse_db;
            store::query::campaign(&client, db, &filter.campaign)
                .await?
                .with_context(|| {
                    format!("campaign {:?} is not in {}.campaigns", filter.campaign, db)
                })?;
            let report =
                store::query::windows(&client, db, &filter.filter(), stat.metric, stat.percentile)
                    .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", crate::ui::windows::render(&report));
            }
            Ok(())
        }
        QueryCmd::Sweep { ch, filter, json } => {
            let client = ch.client();
            let rows = store::query::sweep(&client, &ch.clickhouse_db, &filter.filter()).await?;
            anyhow::ensure!(
                !rows.is_empty(),
                "campaign {:?} has no sweep scenario matching these filters",
                filter.campaign
            );
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", crate::ui::sweep::render_sweeps(&rows));
                print!("{}", crate::ui::sweep::render_sweep_steps(&rows));
            }
            Ok(())
        }
        QueryCmd::Tiers { ch, filter, json } => {
            let summary =
                store::query::stored_summary(&ch.client(), &ch.clickhouse_db, &filter.filter())
                    .await?;
            anyhow::ensure!(
                !summary.tiers.is_empty(),
                "campaign {:?} has no generated-prompt tier (`input_tokens`) matching these filters",
                filter.campaign
            );
            if json {
                let out = serde_json::json!({
                    "tiers": summary.tiers,
                    "token_counts": summary.token_counts,
                });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!(
                    "{}",
                    crate::ui::tiers::render_tiers(&summary.tiers, &summary.token_counts)
                );
            }
            Ok(())
        }
        QueryCmd::Slo { ch, filter, json } => {
            let summary =
                store::query::stored_summary(&ch.client(), &ch.clickhouse_db, &filter.filter())
                    .await?;
            let cells: Vec<_> = summary
                .cells
                .iter()
                .filter(|c| c.goodput.is_some())
                .collect();
            anyhow::ensure!(
                !cells.is_empty() || !summary.rate_steps.is_empty(),
                "campaign {:?} has no scenario with an SLO or rate steps matching these filters",
                filter.campaign
            );
            if json {
                let out = serde_json::json!({
                    "goodput": cells,
                    "rate_steps": summary.rate_steps,
                    "searches": summary.searches,
                });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!("{}", goodput_text(&summary));
                print!("{}", crate::ui::slo::render_searches(&summary.searches));
                print!("{}", crate::ui::slo::render_rate_steps(&summary.rate_steps));
            }
            Ok(())
        }
        QueryCmd::Trend {
            ch,
            filter,
            stat,
            bucket,
            json,
        } => {
            let client = ch.client();
            let report = store::query::trend(
                &client,
                &ch.clickhouse_db,
                &filter.filter(),
                stat.metric,
                stat.percentile,
                bucket,
            )
            .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", crate::ui::trend::render(&report));
            }
            Ok(())
        }
    }
}

/// The goodput lines of `query slo`: per cell of a scenario with an SLO (the summary's order),
/// goodput with its 95 % interval ([`crate::ui::slo::goodput_text`]), met/judged, met
/// requests per second per agent, warm-up requests, and the percentile bounds exceeded.
fn goodput_text(s: &latmesh_results::summary::Summary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let cells: Vec<_> = s.cells.iter().filter(|c| c.goodput.is_some()).collect();
    if cells.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "goodput % [95 % CI] of judged requests (warm-up left out), vs each scenario's SLO\n\
         {:<16} {:<14} {:<16} {:>30} {:>11} {:>8} {:>7}",
        "SCENARIO", "REGION", "PROVIDER", "GOODPUT", "MET/JUDGED", "MET/s", "WARM-UP"
    );
    for c in cells {
        let Some(g) = &c.goodput else { continue };
        let _ = writeln!(
            out,
            "{:<16} {:<14} {:<16} {:>30} {:>11} {:>8} {:>7}{}",
            c.scenario,
            c.region,
            c.provider,
            crate::ui::slo::goodput_text(g),
            format!("{}/{}", g.met, g.requests),
            g.rps.map_or("-".into(), |r| format!("{r:.2}")),
            c.warmup,
            if g.exceeded.is_empty() {
                String::new()
            } else {
                format!("  exceeded: {}", g.exceeded.join("; "))
            }
        );
    }
    out
}

/// Reconciles what agents reported with what ClickHouse holds
/// ([`store::query::verify`]); returns (lines, lost, duplicated).
///
/// # Errors
/// ClickHouse errors; a campaign whose agents are not stored (not finished yet).
pub async fn verify(
    ch: &ClickhouseArgs,
    campaign_id: &str,
) -> anyhow::Result<(Vec<VerifyLine>, u64, u64)> {
    ch.timeouts
        .bound(
            &ch.clickhouse_url,
            "campaign verify",
            store::query::verify(&ch.client(), &ch.clickhouse_db, campaign_id),
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_positive_seconds() {
        assert_eq!(parse_timeout_s("0.5"), Ok(0.5));
        assert_eq!(parse_timeout_s("60"), Ok(60.0));
        for bad in ["0", "-1", "nan", "inf", "1e9", "x", ""] {
            let err = parse_timeout_s(bad).unwrap_err();
            assert!(err.contains("a number of seconds above 0"), "{bad}: {err}");
        }
        let t = TimeoutArgs {
            clickhouse_connect_timeout_s: 0.5,
            clickhouse_timeout_s: 2.0,
        }
        .timeouts();
        assert_eq!(t.connect, std::time::Duration::from_millis(500));
        assert_eq!(t.query, std::time::Duration::from_secs(2));
        // Inserts: 1 s more per 10,000 rows.
        assert_eq!(t.insert(9_999), std::time::Duration::from_secs(2));
        assert_eq!(t.insert(512_000), std::time::Duration::from_secs(53));
        assert_eq!(
            TimeoutArgs::default().timeouts(),
            store::Timeouts::default()
        );
    }
}
