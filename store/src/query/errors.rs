//! The outcome mix ([`errors`]): attempts per outcome and HTTP status, with the latest error of
//! each kind (`latmesh query errors`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, where_clause};
use latmesh_results::summary::ALL_REGIONS;

/// One line of the outcome mix: attempts of one outcome (and HTTP status) for a region (or
/// `ALL`) and provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorRow {
    /// Region, or `ALL`.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Outcome name.
    pub outcome: String,
    /// HTTP status, when responses of this outcome carried one.
    pub http_status: Option<u16>,
    /// Attempts.
    pub count: u64,
    /// `count` as % of the attempts of this region and provider.
    pub pct: f64,
    /// The latest (by agent send time) provider error type of these attempts.
    pub last_error_type: Option<String>,
    /// The latest provider or transport error message of these attempts.
    pub last_error_message: Option<String>,
}

#[derive(clickhouse::Row, Deserialize)]
struct ErrorCount {
    region: String,
    provider: String,
    outcome: String,
    status: u16,
    n: u64,
    last_us: u64,
    error_type: String,
    error_message: String,
}

/// The outcome mix per provider and region (and `ALL` regions) of the rows `filter` selects,
/// one line per (outcome, HTTP status). Sorted by provider, region (`ALL` last), then count
/// descending. `ok` lines are included, so each group's `pct` sums to 100.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn errors(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
) -> Result<Vec<ErrorRow>, StoreError> {
    check_identifier(db)?;
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    // Warm-up rows are in no statistic.
    and_where(&mut wh, "warmup = 0");
    let sql = format!(
        "SELECT region, provider, outcome, ifNull(http_status, toUInt16(0)) AS status, \
         count() AS n, max(send_unix_us) AS last_us, \
         argMax(ifNull(error_type, ''), send_unix_us) AS last_type, \
         argMax(ifNull(error_message, ''), send_unix_us) AS last_message \
         FROM {db}.requests{wh} \
         GROUP BY region, provider, outcome, status"
    );
    let rows: Vec<ErrorCount> = bind_all(client.query(&sql), &args).fetch_all().await?;

    // (provider, ALL-last, region) → (outcome, status) → (count, last_us, type, message)
    type Group = BTreeMap<(String, u16), (u64, u64, String, String)>;
    let mut groups: BTreeMap<(String, bool, String), Group> = BTreeMap::new();
    for r in rows {
        for region in [r.region.as_str(), ALL_REGIONS] {
            let g = groups
                .entry((
                    r.provider.clone(),
                    region == ALL_REGIONS,
                    region.to_string(),
                ))
                .or_default();
            let e = g.entry((r.outcome.clone(), r.status)).or_insert((
                0,
                0,
                String::new(),
                String::new(),
            ));
            e.0 += r.n;
            if r.last_us >= e.1 {
                e.1 = r.last_us;
                e.2.clone_from(&r.error_type);
                e.3.clone_from(&r.error_message);
            }
        }
    }
    let mut out = Vec::new();
    for ((provider, _, region), g) in groups {
        let total: u64 = g.values().map(|e| e.0).sum();
        let mut lines: Vec<ErrorRow> = g
            .into_iter()
            .map(|((outcome, status), (n, _, et, em))| ErrorRow {
                region: region.clone(),
                provider: provider.clone(),
                outcome,
                http_status: (status != 0).then_some(status),
                count: n,
                pct: if total == 0 {
                    0.0
                } else {
                    n as f64 * 100.0 / total as f64
                },
                last_error_type: (!et.is_empty()).then_some(et),
                last_error_message: (!em.is_empty()).then_some(em),
            })
            .collect();
        lines.sort_by(|a, b| b.count.cmp(&a.count).then(a.outcome.cmp(&b.outcome)));
        out.extend(lines);
    }
    Ok(out)
}
