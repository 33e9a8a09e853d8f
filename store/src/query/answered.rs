//! What answered, with time: per (region, provider, scenario), each `model` (or
//! `system_fingerprint`) the responses named, how often, and when it was first seen — what
//! `latmesh check`'s `model_changed` and `fingerprint_changed` rules compare
//! (`latmesh_results::swap`).

use serde::Deserialize;

use super::super::{StoreError, check_identifier};
use super::filter::{QueryFilter, and_where, bind_all, where_clause};

/// Which name [`answered_names`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameColumn {
    /// The `model` answered (`requests.answered_model`).
    Model,
    /// The `system_fingerprint` answered.
    Fingerprint,
}

impl NameColumn {
    fn column(self) -> &'static str {
        match self {
            NameColumn::Model => "answered_model",
            NameColumn::Fingerprint => "system_fingerprint",
        }
    }
}

/// One name answered in one cell.
#[derive(Clone, Debug, PartialEq, Eq, clickhouse::Row, Deserialize)]
pub struct AnsweredName {
    /// Region.
    pub region: String,
    /// Provider.
    pub provider: String,
    /// Scenario.
    pub scenario: String,
    /// The name.
    pub name: String,
    /// Attempts answered with it.
    pub n: u64,
    /// When it was first seen: the earliest send time of those attempts, on the
    /// coordinator's clock, UTC µs.
    pub first_unix_us: u64,
}

/// Every name of `column` answered by the `requests` rows `filter` selects (time filters on
/// the agents' clocks, as the matrix), per (region, provider, scenario), sorted.
///
/// # Errors
/// ClickHouse errors; a bad `db`.
pub async fn answered_names(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    column: NameColumn,
) -> Result<Vec<AnsweredName>, StoreError> {
    check_identifier(db)?;
    let col = column.column();
    let (mut wh, args) = where_clause(filter, "send_unix_us", "send_time");
    and_where(&mut wh, &format!("warmup = 0 AND {col} IS NOT NULL"));
    let sql = format!(
        "SELECT region, provider, scenario, assumeNotNull({col}) AS name, count() AS n, \
         min(send_coord_unix_us) AS first_unix_us FROM {db}.requests{wh} \
         GROUP BY region, provider, scenario, name ORDER BY region, provider, scenario, name"
    );
    Ok(bind_all(client.query(&sql), &args).fetch_all().await?)
}
