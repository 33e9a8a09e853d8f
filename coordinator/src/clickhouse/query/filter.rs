//! Which rows a query reads ([`QueryFilter`]) and the SQL pieces every query builds from it:
//! the bound ` WHERE …` clause, string and list literals.

use serde::{Deserialize, Serialize};

/// Which rows a query looks at. Every field left `None` means "all".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryFilter {
    /// Campaign id.
    pub campaign_id: Option<String>,
    /// Scenario name.
    pub scenario: Option<String>,
    /// Region (the `ALL` rows then merge just that region).
    pub region: Option<String>,
    /// Provider name.
    pub provider: Option<String>,
    /// Named time window label (e.g. `peak`).
    pub window: Option<String>,
    /// From this time on, UTC µs on the agents' clocks (request send time; histogram interval
    /// start), inclusive.
    pub from_unix_us: Option<i64>,
    /// Before this time, UTC µs on the agents' clocks, exclusive.
    pub to_unix_us: Option<i64>,
}

impl QueryFilter {
    /// Everything of campaign `campaign_id`.
    pub fn campaign(campaign_id: &str) -> Self {
        QueryFilter {
            campaign_id: Some(campaign_id.to_string()),
            ..Default::default()
        }
    }
}

/// A value bound to a `?` of a query.
pub(super) enum Arg {
    Str(String),
    U64(u64),
}

/// ` WHERE …` (or nothing) for `filter`; `time_us`/`time_s` name the µs and `DateTime` time
/// columns (the `DateTime` one lets ClickHouse skip partitions).
pub(super) fn where_clause(
    filter: &QueryFilter,
    time_us: &str,
    time_s: &str,
) -> (String, Vec<Arg>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    for (col, v) in [
        ("campaign_id", &filter.campaign_id),
        ("scenario", &filter.scenario),
        ("region", &filter.region),
        ("provider", &filter.provider),
        ("`window`", &filter.window),
    ] {
        if let Some(v) = v {
            conds.push(format!("{col} = ?"));
            args.push(Arg::Str(v.clone()));
        }
    }
    if let Some(from) = filter.from_unix_us {
        let from = u64::try_from(from).unwrap_or(0);
        conds.push(format!("{time_s} >= toDateTime(?) AND {time_us} >= ?"));
        args.push(Arg::U64(from / 1_000_000));
        args.push(Arg::U64(from));
    }
    if let Some(to) = filter.to_unix_us {
        let to = u64::try_from(to).unwrap_or(0);
        conds.push(format!("{time_s} <= toDateTime(?) AND {time_us} < ?"));
        args.push(Arg::U64(to / 1_000_000));
        args.push(Arg::U64(to));
    }
    if conds.is_empty() {
        (String::new(), args)
    } else {
        (format!(" WHERE {}", conds.join(" AND ")), args)
    }
}

pub(super) fn bind_all(mut q: clickhouse::query::Query, args: &[Arg]) -> clickhouse::query::Query {
    for a in args {
        q = match a {
            Arg::Str(s) => q.bind(s.as_str()),
            Arg::U64(n) => q.bind(*n),
        };
    }
    q
}

/// `text` as a single-quoted SQL string literal.
pub(super) fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// ` WHERE …` of `filter` plus one more condition.
pub(super) fn and_where(wh: &mut String, cond: &str) {
    wh.push_str(if wh.is_empty() { " WHERE " } else { " AND " });
    wh.push_str(cond);
}

/// ` AND scenario IN (…)` of `scenarios` (nothing when empty: every scenario).
pub(super) fn and_scenario_in(wh: &mut String, scenarios: &[String]) {
    if !scenarios.is_empty() {
        let list: Vec<String> = scenarios.iter().map(|s| sql_string(s)).collect();
        and_where(wh, &format!("scenario IN ({})", list.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_clause_binds_in_order() {
        let (wh, args) = where_clause(&QueryFilter::default(), "t_us", "t");
        assert!(wh.is_empty() && args.is_empty());
        let f = QueryFilter {
            campaign_id: Some("c".into()),
            window: Some("peak".into()),
            from_unix_us: Some(1_700_000_000_500_000),
            ..Default::default()
        };
        let (wh, args) = where_clause(&f, "t_us", "t");
        assert_eq!(
            wh,
            " WHERE campaign_id = ? AND `window` = ? AND t >= toDateTime(?) AND t_us >= ?"
        );
        assert_eq!(args.len(), 4);
        assert!(matches!(&args[2], Arg::U64(1_700_000_000)));
    }
}
