//! Versioned schema migrations from `store/migrations/` (embedded in the binary).
//!
//! A migration file is plain SQL, one statement per `;`, with placeholders the migrator fills
//! ([`render_migration`], a pure function): `{db}`, `{on_cluster}`, `{table:NAME}`,
//! `{engine:E(args)}` and `{shard_by:EXPR}` (the file header of `0001_init.sql` and
//! `deploy/clickhouse/README.md` explain them). Single node, they render to plain
//! `CREATE TABLE db.NAME … ENGINE = E(args)`. With a cluster name, each table becomes a
//! `ReplicatedE('/clickhouse/tables/{shard}/DB/NAME_local', '{replica}', args)` table
//! `NAME_local` created `ON CLUSTER`, with a `Distributed(cluster, DB, NAME_local, EXPR)` table
//! `NAME` in front, so queries and inserts use the plain names in both forms.
//!
//! [`migrate`] creates the database and `schema_migrations`, then applies, in order, every
//! migration whose version is not recorded there, recording each after its last statement.
//! Every statement is idempotent on its own (`IF NOT EXISTS` for tables; an `ADD COLUMN` whose
//! column exists, or a `DROP COLUMN` whose column is gone, is skipped after a look at
//! `system.columns`, since 18.16 has no `ADD COLUMN IF NOT EXISTS`), so a migration interrupted
//! half-way is completed by the next run.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{StoreError, Timeouts, bounded, check_identifier, datetime_secs, unsigned_us};

/// One migration file.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    /// Version, strictly increasing from 1.
    pub version: u32,
    /// File name without `.sql`, e.g. `0001_init`.
    pub name: &'static str,
    /// The file's SQL, placeholders unrendered.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "0002_measurement_truth",
        sql: include_str!("../migrations/0002_measurement_truth.sql"),
    },
    Migration {
        version: 3,
        name: "0003_load_models",
        sql: include_str!("../migrations/0003_load_models.sql"),
    },
    Migration {
        version: 4,
        name: "0004_conn_retried",
        sql: include_str!("../migrations/0004_conn_retried.sql"),
    },
    Migration {
        version: 5,
        name: "0005_answered_model",
        sql: include_str!("../migrations/0005_answered_model.sql"),
    },
    Migration {
        version: 6,
        name: "0006_cut_fields",
        sql: include_str!("../migrations/0006_cut_fields.sql"),
    },
    Migration {
        version: 7,
        name: "0007_batch_delivery",
        sql: include_str!("../migrations/0007_batch_delivery.sql"),
    },
    Migration {
        version: 8,
        name: "0008_request_shape",
        sql: include_str!("../migrations/0008_request_shape.sql"),
    },
    Migration {
        version: 9,
        name: "0009_compat",
        sql: include_str!("../migrations/0009_compat.sql"),
    },
    Migration {
        version: 10,
        name: "0010_workloads",
        sql: include_str!("../migrations/0010_workloads.sql"),
    },
    Migration {
        version: 11,
        name: "0011_phase_hygiene",
        sql: include_str!("../migrations/0011_phase_hygiene.sql"),
    },
    Migration {
        version: 12,
        name: "0012_compat_samples",
        sql: include_str!("../migrations/0012_compat_samples.sql"),
    },
];

/// The bookkeeping table (not in a file, so it exists before any migration runs).
const SCHEMA_MIGRATIONS_DDL: &str = "
CREATE TABLE IF NOT EXISTS {db}.{table:schema_migrations} {on_cluster}
(
    version UInt32,
    name String,
    checksum String,
    applied_at DateTime,
    applied_at_us UInt64
)
ENGINE = {engine:ReplacingMergeTree()}
ORDER BY version
{shard_by:version}";

/// A row of `schema_migrations`: one applied migration.
#[derive(Clone, Debug, PartialEq, Eq, clickhouse::Row, Serialize, Deserialize)]
pub struct MigrationRow {
    /// [`Migration::version`].
    pub version: u32,
    /// [`Migration::name`].
    pub name: String,
    /// FNV-1a 64 of the migration's SQL, hex: a changed file is reported (not re-applied).
    pub checksum: String,
    /// When it was applied, UTC seconds.
    pub applied_at: u32,
    /// When it was applied, UTC µs.
    pub applied_at_us: u64,
}

/// FNV-1a 64 of `s`, 16 hex digits.
fn checksum(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Splits SQL into statements on `;`, dropping `--` comments and empty statements; `;` and
/// `--` inside quotes ('…', "…", `…`) are kept.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                cur.push(c);
                if c == '\\' {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' | '`' => {
                    quote = Some(c);
                    cur.push(c);
                }
                '-' if chars.peek() == Some(&'-') => {
                    for n in chars.by_ref() {
                        if n == '\n' {
                            cur.push('\n');
                            break;
                        }
                    }
                }
                ';' => {
                    out.push(std::mem::take(&mut cur));
                }
                _ => cur.push(c),
            },
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| {
            // Drop blank lines left by comments; keep the statement's own layout.
            s.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::trim_end)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// One `{name}` or `{name:arg}` placeholder.
struct Placeholder<'a> {
    start: usize,
    end: usize,
    name: &'a str,
    arg: Option<&'a str>,
}

fn placeholders(stmt: &str) -> Result<Vec<Placeholder<'_>>, StoreError> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = stmt[from..].find('{') {
        let start = from + rel;
        let close = stmt[start..]
            .find('}')
            .ok_or_else(|| render_error(stmt, "unclosed '{'"))?;
        let end = start + close + 1;
        let inner = &stmt[start + 1..end - 1];
        let (name, arg) = match inner.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (inner.trim(), None),
        };
        out.push(Placeholder {
            start,
            end,
            name,
            arg,
        });
        from = end;
    }
    Ok(out)
}

fn render_error(stmt: &str, what: &str) -> StoreError {
    let head: String = stmt
        .split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ");
    StoreError::Rejected {
        code: None,
        message: format!("cannot render migration statement `{head} …`: {what}"),
    }
}

/// Renders one statement; `distributed_view` renders `{table:NAME}` as the plain name even in
/// cluster mode (the Distributed table).
fn render_one(
    stmt: &str,
    db: &str,
    cluster: Option<&str>,
    table: Option<&str>,
    distributed_view: bool,
) -> Result<String, StoreError> {
    let mut out = String::with_capacity(stmt.len() + 64);
    let mut last = 0;
    for p in placeholders(stmt)? {
        out.push_str(&stmt[last..p.start]);
        last = p.end;
        match (p.name, p.arg, cluster) {
            ("db", None, _) => out.push_str(db),
            ("on_cluster", None, None) | ("shard_by", Some(_), _) => {
                // Renders to nothing: do not leave a double space behind.
                if out.ends_with(' ') && stmt[last..].starts_with(' ') {
                    last += 1;
                }
            }
            ("on_cluster", None, Some(c)) => {
                out.push_str("ON CLUSTER ");
                out.push_str(c);
            }
            ("table", Some(name), None) => out.push_str(name),
            ("table", Some(name), Some(_)) => {
                out.push_str(name);
                if !distributed_view {
                    out.push_str("_local");
                }
            }
            ("engine", Some(engine), None) => out.push_str(engine),
            ("engine", Some(engine), Some(_)) => {
                let table =
                    table.ok_or_else(|| render_error(stmt, "{engine:…} without {table:…}"))?;
                let open = engine
                    .find('(')
                    .filter(|_| engine.ends_with(')'))
                    .ok_or_else(|| render_error(stmt, "{engine:…} must be E(args)"))?;
                let (name, args) = (&engine[..open], engine[open + 1..engine.len() - 1].trim());
                out.push_str(&format!(
                    "Replicated{name}('/clickhouse/tables/{{shard}}/{db}/{table}_local', '{{replica}}'{}{args})",
                    if args.is_empty() { "" } else { ", " }
                ));
            }
            _ => {
                return Err(render_error(
                    stmt,
                    &format!("unknown placeholder {}", &stmt[p.start..p.end]),
                ));
            }
        }
    }
    out.push_str(&stmt[last..]);
    Ok(out.trim().to_string())
}

/// Renders migration SQL into the statements to run, in order.
///
/// Single node (`cluster` = `None`): placeholders become the plain form. In cluster mode a
/// `CREATE TABLE … {table:NAME}` becomes the replicated `NAME_local` table `ON CLUSTER`
/// followed by `CREATE TABLE DB.NAME ON CLUSTER c AS DB.NAME_local ENGINE = Distributed(c, DB,
/// NAME_local, EXPR)` (EXPR from `{shard_by:EXPR}`); an `ALTER TABLE … {table:NAME} … COLUMN`
/// and a `DROP TABLE` are applied to both tables. Pure: no I/O.
///
/// # Errors
/// [`StoreError::InvalidName`] for a `db` or `cluster` that is not a plain identifier;
/// [`StoreError::Rejected`] for an unknown or malformed placeholder, and in cluster mode for a
/// DDL statement without `{on_cluster}` or a `CREATE TABLE {table:…}` without `{shard_by:…}`.
pub fn render_migration(
    sql: &str,
    db: &str,
    cluster: Option<&str>,
) -> Result<Vec<String>, StoreError> {
    check_identifier(db)?;
    if let Some(c) = cluster {
        check_identifier(c)?;
    }
    let mut out = Vec::new();
    for stmt in split_statements(sql) {
        let ps = placeholders(&stmt)?;
        let table = ps.iter().find(|p| p.name == "table").and_then(|p| p.arg);
        let shard_by = ps.iter().find(|p| p.name == "shard_by").and_then(|p| p.arg);
        let has_on_cluster = ps.iter().any(|p| p.name == "on_cluster");
        let upper = stmt.trim_start().to_ascii_uppercase();
        let words: Vec<&str> = upper.split_whitespace().take(2).collect();
        let kind = words.join(" ");
        let Some(c) = cluster else {
            out.push(render_one(&stmt, db, None, table, false)?);
            continue;
        };
        let ddl = matches!(
            kind.as_str(),
            "CREATE TABLE" | "ALTER TABLE" | "DROP TABLE" | "CREATE DATABASE" | "RENAME TABLE"
        );
        if ddl && !has_on_cluster {
            return Err(render_error(
                &stmt,
                "cluster mode needs {on_cluster} in DDL",
            ));
        }
        let Some(table) = table else {
            out.push(render_one(&stmt, db, cluster, None, false)?);
            continue;
        };
        let local = render_one(&stmt, db, cluster, Some(table), false)?;
        match kind.as_str() {
            "CREATE TABLE" => {
                let key = shard_by.ok_or_else(|| {
                    render_error(&stmt, "cluster mode needs {shard_by:EXPR} on CREATE TABLE")
                })?;
                out.push(local);
                out.push(format!(
                    "CREATE TABLE IF NOT EXISTS {db}.{table} ON CLUSTER {c} AS {db}.{table}_local\n\
                     ENGINE = Distributed({c}, {db}, {table}_local, {key})"
                ));
            }
            "ALTER TABLE" if upper.contains(" COLUMN ") => {
                out.push(local);
                out.push(render_one(&stmt, db, cluster, Some(table), true)?);
            }
            "DROP TABLE" => {
                out.push(render_one(&stmt, db, cluster, Some(table), true)?);
                out.push(local);
            }
            _ => out.push(local),
        }
    }
    Ok(out)
}

/// For `ALTER TABLE t … ADD COLUMN c …` or `… DROP COLUMN c`: `(t, c, is_add)`, with `t` as
/// written (`db.table`).
fn column_change(stmt: &str) -> Option<(String, String, bool)> {
    let tokens: Vec<&str> = stmt.split_whitespace().collect();
    let upper: Vec<String> = tokens.iter().map(|t| t.to_ascii_uppercase()).collect();
    if upper.first()? != "ALTER" || upper.get(1)? != "TABLE" {
        return None;
    }
    let table = tokens.get(2)?.to_string();
    let at = upper
        .windows(2)
        .position(|w| (w[0] == "ADD" || w[0] == "DROP") && w[1] == "COLUMN")?;
    let column = tokens.get(at + 2)?.trim_matches('`').to_string();
    Some((table, column, upper[at] == "ADD"))
}

async fn column_exists(
    client: &clickhouse::Client,
    table: &str,
    column: &str,
    timeout: Duration,
) -> Result<bool, StoreError> {
    let (db, table) = table.split_once('.').unwrap_or(("default", table));
    let n: u64 = bounded(
        timeout,
        || format!("looking up column {column} of {db}.{table}"),
        client
            .query(
                "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
            )
            .bind(db.trim_matches('`'))
            .bind(table.trim_matches('`'))
            .bind(column)
            .fetch_one(),
    )
    .await?;
    Ok(n > 0)
}

async fn run_statement(
    client: &clickhouse::Client,
    stmt: &str,
    timeout: Duration,
) -> Result<(), StoreError> {
    if let Some((table, column, is_add)) = column_change(stmt) {
        let exists = column_exists(client, &table, &column, timeout).await?;
        if exists == is_add {
            tracing::debug!(%table, %column, "column change already applied; skipped");
            return Ok(());
        }
    }
    let head: String = stmt
        .split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ");
    bounded(
        timeout,
        || format!("running schema statement `{head} …`"),
        client.query_raw(stmt).execute(),
    )
    .await
}

/// Brings database `db` up to the newest migration; returns the names of the migrations
/// applied by this call, in order (empty when it was up to date).
///
/// Creates the database and `schema_migrations` if needed (`ON CLUSTER cluster` and
/// replicated/Distributed tables when `cluster` is set, see [`render_migration`]). Safe to run
/// again and again, and after a run that failed half-way.
///
/// # Errors
/// [`StoreError::InvalidName`] for bad names; [`StoreError::Migration`] naming the migration
/// whose statement failed (its `source` tells whether retrying can help); any error of reading
/// `schema_migrations`.
pub async fn migrate(
    client: &clickhouse::Client,
    db: &str,
    cluster: Option<&str>,
) -> Result<Vec<String>, StoreError> {
    migrate_within(client, db, cluster, &Timeouts::default()).await
}

/// [`migrate`] with every statement and query bounded by `timeouts.query` (the migration row's
/// insert by [`Timeouts::insert`]).
///
/// # Errors
/// As [`migrate`]; [`StoreError::TimedOut`] (retryable, possibly inside
/// [`StoreError::Migration`]) when ClickHouse does not answer a statement in time.
pub async fn migrate_within(
    client: &clickhouse::Client,
    db: &str,
    cluster: Option<&str>,
    timeouts: &Timeouts,
) -> Result<Vec<String>, StoreError> {
    let timeout = timeouts.query;
    check_identifier(db)?;
    if let Some(c) = cluster {
        check_identifier(c)?;
    }
    let on_cluster = cluster
        .map(|c| format!(" ON CLUSTER {c}"))
        .unwrap_or_default();
    run_statement(
        client,
        &format!("CREATE DATABASE IF NOT EXISTS {db}{on_cluster}"),
        timeout,
    )
    .await?;
    for stmt in render_migration(SCHEMA_MIGRATIONS_DDL, db, cluster)? {
        run_statement(client, &stmt, timeout).await?;
    }
    let applied: BTreeMap<u32, String> = bounded(
        timeout,
        || format!("reading {db}.schema_migrations"),
        client
            .query(&format!(
                "SELECT version, checksum FROM {db}.schema_migrations"
            ))
            .fetch_all::<(u32, String)>(),
    )
    .await?
    .into_iter()
    .collect();

    let mut done = Vec::new();
    for m in MIGRATIONS {
        let sum = checksum(m.sql);
        if let Some(recorded) = applied.get(&m.version) {
            if *recorded != sum {
                tracing::warn!(
                    migration = m.name,
                    recorded = %recorded,
                    current = %sum,
                    "migration file changed after it was applied; not re-applied"
                );
            }
            continue;
        }
        let wrap = |e: StoreError| StoreError::Migration {
            migration: m.name.to_string(),
            source: Box::new(e),
        };
        for stmt in render_migration(m.sql, db, cluster).map_err(wrap)? {
            run_statement(client, &stmt, timeout).await.map_err(wrap)?;
        }
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let row = MigrationRow {
            version: m.version,
            name: m.name.to_string(),
            checksum: sum,
            applied_at: datetime_secs(now_us),
            applied_at_us: unsigned_us(now_us),
        };
        let mut insert = client
            .insert_unescaped::<MigrationRow>(&format!("{db}.schema_migrations"))
            .await
            .map_err(|e| wrap(e.into()))?;
        if cluster.is_some() {
            // Through the Distributed table: wait until it reached its shard, so the next run
            // sees it.
            insert = insert.with_setting("insert_distributed_sync", "1");
        }
        let record = async move {
            insert.write(&row).await?;
            insert.end().await
        };
        bounded(
            timeouts.insert(1),
            || format!("recording migration {} in {db}.schema_migrations", m.name),
            record,
        )
        .await
        .map_err(wrap)?;
        tracing::info!(migration = m.name, db, "applied migration");
        done.push(m.name.to_string());
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_and_files_render() {
        // Consecutive from 1, and each file named after its version.
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert!(
                m.version as usize == i + 1 && m.name.starts_with(&format!("{:04}_", i + 1)),
                "{}",
                m.name
            );
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
            render_migration(m.sql, "latmesh", None).unwrap();
            render_migration(m.sql, "latmesh", Some("c1")).unwrap();
        }
    }

    #[test]
    fn splitting_keeps_quoted_semicolons_and_drops_comments() {
        let s = split_statements("-- head; comment\nSELECT 'a;b' -- tail\n;\n\n;SELECT `x;`;");
        assert_eq!(s, vec!["SELECT 'a;b'", "SELECT `x;`"]);
    }

    #[test]
    fn single_node_form_is_plain() {
        let out = render_migration(MIGRATIONS[0].sql, "lm", None).unwrap();
        assert_eq!(out.len(), 4);
        for s in &out {
            assert!(!s.contains('{'), "{s}");
            assert!(s.starts_with("CREATE TABLE IF NOT EXISTS lm."), "{s}");
            assert!(
                !s.contains("ON CLUSTER") && !s.contains("Replicated") && !s.contains("_local")
            );
        }
        assert!(out[2].contains("ENGINE = ReplacingMergeTree()"));
        assert!(out[1].contains("ENGINE = ReplacingMergeTree(seen_at_us)"));
    }

    #[test]
    fn cluster_form_replicates_and_distributes_every_table() {
        let out = render_migration(MIGRATIONS[0].sql, "lm", Some("prod")).unwrap();
        assert_eq!(out.len(), 8);
        for pair in out.chunks(2) {
            let (local, dist) = (&pair[0], &pair[1]);
            let table = local
                .strip_prefix("CREATE TABLE IF NOT EXISTS lm.")
                .and_then(|r| r.split_whitespace().next())
                .unwrap()
                .strip_suffix("_local")
                .unwrap();
            assert!(local.contains(" ON CLUSTER prod"), "{local}");
            assert!(
                local.contains("ENGINE = ReplicatedReplacingMergeTree("),
                "{local}"
            );
            assert!(
                local.contains(&format!(
                    "'/clickhouse/tables/{{shard}}/lm/{table}_local', '{{replica}}'"
                )),
                "{local}"
            );
            assert!(dist.contains(&format!(
                "CREATE TABLE IF NOT EXISTS lm.{table} ON CLUSTER prod AS lm.{table}_local"
            )));
            assert!(dist.contains(&format!(
                "ENGINE = Distributed(prod, lm, {table}_local, cityHash64("
            )));
        }
        assert!(out[2].contains("'{replica}', seen_at_us)"));
    }

    #[test]
    fn cluster_alters_reach_both_tables_and_skip_logic_parses() {
        let sql =
            "ALTER TABLE {db}.{table:requests} {on_cluster} ADD COLUMN region_tz String DEFAULT ''";
        let single = render_migration(sql, "lm", None).unwrap();
        assert_eq!(
            single,
            vec!["ALTER TABLE lm.requests ADD COLUMN region_tz String DEFAULT ''"]
        );
        let cl = render_migration(sql, "lm", Some("c")).unwrap();
        assert_eq!(cl.len(), 2);
        assert!(cl[0].starts_with("ALTER TABLE lm.requests_local ON CLUSTER c ADD COLUMN"));
        assert!(cl[1].starts_with("ALTER TABLE lm.requests ON CLUSTER c ADD COLUMN"));
        assert_eq!(
            column_change(&single[0]),
            Some(("lm.requests".into(), "region_tz".into(), true))
        );
        assert_eq!(
            column_change("ALTER TABLE lm.x ON CLUSTER c DROP COLUMN `y`"),
            Some(("lm.x".into(), "y".into(), false))
        );
        assert_eq!(column_change("CREATE TABLE x (a UInt8)"), None);
    }

    #[test]
    fn rendering_refuses_what_it_cannot_do() {
        assert!(matches!(
            render_migration("SELECT 1", "bad-name", None),
            Err(StoreError::InvalidName(_))
        ));
        assert!(render_migration("SELECT {nope}", "lm", None).is_err());
        // Cluster DDL without ON CLUSTER would reach one node only.
        assert!(render_migration("CREATE TABLE {db}.{table:t} (a UInt8) ENGINE = {engine:MergeTree()} ORDER BY a {shard_by:a}", "lm", Some("c")).is_err());
        // Without a sharding key there is no Distributed table to create.
        assert!(render_migration("CREATE TABLE {db}.{table:t} {on_cluster} (a UInt8) ENGINE = {engine:MergeTree()} ORDER BY a", "lm", Some("c")).is_err());
        assert_eq!(
            render_migration("CREATE TABLE {db}.{table:t} {on_cluster} (a UInt8) ENGINE = {engine:MergeTree()} ORDER BY a {shard_by:a}", "lm", Some("c")).unwrap()[0],
            "CREATE TABLE lm.t_local ON CLUSTER c (a UInt8) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/lm/t_local', '{replica}') ORDER BY a"
        );
    }
}
