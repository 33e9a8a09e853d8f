//! `latmesh db migrate`: the ClickHouse schema, created or updated (or printed).

use anyhow::Context;
use clap::Subcommand;

/// `latmesh db …`.
#[derive(Subcommand, Debug)]
pub enum DbCmd {
    /// Create or update the schema (idempotent).
    Migrate {
        /// ClickHouse HTTP URL.
        #[arg(long, env = "LATMESH_CLICKHOUSE_URL")]
        clickhouse_url: String,
        /// Database.
        #[arg(long, env = "LATMESH_CLICKHOUSE_DB", default_value = "latmesh")]
        clickhouse_db: String,
        /// Cluster name: create replicated tables ON CLUSTER with Distributed tables in front.
        #[arg(long)]
        cluster: Option<String>,
        /// Print the DDL instead of running it.
        #[arg(long)]
        print: bool,
        /// How long to wait for ClickHouse (per statement).
        #[command(flatten)]
        timeouts: crate::cmd::query::TimeoutArgs,
    },
}

/// Runs a `db` command.
///
/// # Errors
/// ClickHouse errors.
pub async fn run(cmd: DbCmd) -> anyhow::Result<()> {
    match cmd {
        DbCmd::Migrate {
            clickhouse_url,
            clickhouse_db,
            cluster,
            print,
            timeouts,
        } => {
            if print {
                for m in latmesh_store::MIGRATIONS {
                    for stmt in
                        latmesh_store::render_migration(m.sql, &clickhouse_db, cluster.as_deref())?
                    {
                        println!("{stmt};\n");
                    }
                }
                return Ok(());
            }
            let timeouts = timeouts.timeouts();
            let client = latmesh_store::client_with(&clickhouse_url, &timeouts);
            let applied = latmesh_store::migrate_within(
                &client,
                &clickhouse_db,
                cluster.as_deref(),
                &timeouts,
            )
            .await
            .with_context(|| format!("ClickHouse at {clickhouse_url}"))?;
            if applied.is_empty() {
                println!("{clickhouse_db}: up to date");
            } else {
                println!("{clickhouse_db}: applied {}", applied.join(", "));
            }
            Ok(())
        }
    }
}
