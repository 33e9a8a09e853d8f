//! A provider's percentile per time bucket ([`trend`], `latmesh query trend`), and local hours
//! in SQL ([`local_hour_sql`]).

use comfy_table::{Cell as TCell, CellAlignment, Table, presets};
use latmesh_core::metrics::Metric;
use latmesh_core::windows::{WindowSpec, Zone, utc_label};
use serde::{Deserialize, Serialize};

use super::super::{StoreError, check_identifier};
use super::campaign::stored_window_spec;
use super::filter::{QueryFilter, sql_string};
use super::grouped::{GroupCell, GroupStat, grouped};
use super::percentile::Percentile;
use super::windows::ms_marked;

/// Coordinator-clock UTC seconds of a `requests` row (its send time), as an SQL expression.
const REQUEST_COORD_SECS: &str = "toInt64(intDiv(send_coord_unix_us, 1000000))";
/// Coordinator-clock UTC seconds of a `histograms` row (its interval start corrected with the
/// batch's clock offset), as an SQL expression.
const HISTOGRAM_COORD_SECS: &str = "intDiv(toInt64(start_unix_us) + clock_offset_us, 1000000)";

/// An SQL expression (`UInt8`, 0..=23) for the local hour, in the zone of the row's `region`
/// under `spec`, of the UTC instant `secs` (an SQL expression of UTC seconds): `toHour` after
/// `toTimeZone` for IANA zones (DST from the server's time-zone database), arithmetic for fixed
/// offsets and for regions without a zone (UTC). Works on 18.16 and current ClickHouse, and
/// does not depend on the server's own time zone. This is how SQL groups by local hour: e.g.
/// `GROUP BY local_hour_sql(spec, "toInt64(intDiv(send_coord_unix_us, 1000000))")`.
pub fn local_hour_sql(spec: &WindowSpec, secs: &str) -> String {
    let of = |zone: &Zone| match zone {
        Zone::Iana(tz) => format!(
            "toHour(toTimeZone(toDateTime(toUInt32({secs})), {}))",
            sql_string(tz.name())
        ),
        Zone::Fixed { offset_s } => {
            format!("toUInt8(intDiv(modulo(toInt64({secs}) + ({offset_s}) + 86400, 86400), 3600))")
        }
    };
    let utc = of(&Zone::UTC);
    if spec.zones().is_empty() {
        return utc;
    }
    let mut parts: Vec<String> = spec
        .zones()
        .iter()
        .map(|(region, zone)| format!("region = {}, {}", sql_string(region), of(zone)))
        .collect();
    parts.push(utc);
    format!("multiIf({})", parts.join(", "))
}

/// Time buckets of `latmesh query trend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrendBucket {
    /// UTC hours (what `toStartOfHour` gives on a UTC server).
    Hour,
    /// UTC days.
    Day,
    /// Hour of the day (0-23) in each region's local time, every day folded together (needs
    /// the campaign's time zones).
    LocalHour,
}

impl TrendBucket {
    /// `hour`, `day` or `local-hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            TrendBucket::Hour => "hour",
            TrendBucket::Day => "day",
            TrendBucket::LocalHour => "local-hour",
        }
    }

    /// Parses [`TrendBucket::as_str`]'s names.
    pub fn parse(s: &str) -> Option<TrendBucket> {
        [TrendBucket::Hour, TrendBucket::Day, TrendBucket::LocalHour]
            .into_iter()
            .find(|b| b.as_str() == s)
    }

    /// The bucket of UTC seconds `secs` (an SQL expression) as an `Int64` SQL expression:
    /// the bucket start in UTC seconds, or the local hour.
    fn sql(self, secs: &str, spec: &WindowSpec) -> String {
        match self {
            TrendBucket::Hour => format!("intDiv({secs}, 3600) * 3600"),
            TrendBucket::Day => format!("intDiv({secs}, 86400) * 86400"),
            TrendBucket::LocalHour => format!("toInt64({})", local_hour_sql(spec, secs)),
        }
    }
}

/// One bucket of a provider's trend in one region (or `ALL`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendRow {
    /// Region, or `ALL`.
    pub region: String,
    /// The bucket: its start in UTC seconds (`hour`, `day`), or the local hour 0-23
    /// (`local-hour`).
    pub bucket: i64,
    /// The bucket as text: `2024-03-12 14:00` (UTC), `2024-03-12`, or `09h` (local).
    pub label: String,
    /// The bucket's counts (attempts sent in it) and percentile (over histograms whose
    /// interval starts in it), flattened in JSON.
    #[serde(flatten)]
    pub stat: GroupStat,
}

/// What `latmesh query trend` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrendReport {
    /// The provider.
    pub provider: String,
    /// The metric.
    pub metric: String,
    /// 50, 90 or 99.
    pub percentile: u32,
    /// `hour`, `day` or `local-hour`.
    pub bucket: String,
    /// By region (`ALL` last), then bucket.
    pub rows: Vec<TrendRow>,
}

/// A provider's `percentile` of `metric` per time bucket, per region (and `ALL` regions
/// merged, when the rows span more than one): exact over the merged interval histograms whose
/// interval starts in the bucket, with the attempts sent in it and their error %. Buckets are
/// taken on the coordinator's clock (request send time, histogram interval start, corrected
/// with each batch's clock offset — the times window labels use); the `from`/`to` filter is
/// on the agents' clocks (see [`QueryFilter`]). `local-hour` folds every day together by the
/// hour of day in each region's zone (from the campaign's stored plan).
///
/// # Errors
/// [`StoreError::Rejected`] when `filter.provider` is missing, or for `local-hour` without a
/// stored campaign in `filter.campaign_id`; [`StoreError::InvalidName`] for a bad `db`; the
/// server's or connection's error otherwise.
pub async fn trend(
    client: &clickhouse::Client,
    db: &str,
    filter: &QueryFilter,
    metric: Metric,
    percentile: Percentile,
    bucket: TrendBucket,
) -> Result<TrendReport, StoreError> {
    check_identifier(db)?;
    let rejected = |message: String| StoreError::Rejected {
        code: None,
        message,
    };
    let provider = filter
        .provider
        .clone()
        .ok_or_else(|| rejected("a trend is of one provider: give one".into()))?;
    let spec = if bucket == TrendBucket::LocalHour {
        let id = filter.campaign_id.as_deref().ok_or_else(|| {
            rejected("local-hour buckets need a campaign (its time zones)".into())
        })?;
        stored_window_spec(client, db, id)
            .await?
            .ok_or_else(|| rejected(format!("campaign {id:?} is not stored")))?
    } else {
        WindowSpec::default()
    };
    let cells = grouped(
        client,
        db,
        filter,
        &[],
        metric,
        percentile,
        &bucket.sql(REQUEST_COORD_SECS, &spec),
        &bucket.sql(HISTOGRAM_COORD_SECS, &spec),
    )
    .await?;
    let mut rows = Vec::new();
    for ((_, _, region), groups) in cells {
        let mut buckets: Vec<(i64, GroupCell)> = groups
            .into_iter()
            .filter_map(|(g, v)| g.parse::<i64>().ok().map(|b| (b, v)))
            .collect();
        buckets.sort_by_key(|(b, _)| *b);
        for (b, cell) in buckets {
            rows.push(TrendRow {
                region: region.clone(),
                bucket: b,
                label: match bucket {
                    TrendBucket::Hour => utc_label(b, false),
                    TrendBucket::Day => utc_label(b, true),
                    TrendBucket::LocalHour => format!("{b:02}h"),
                },
                stat: GroupStat::of(cell),
            });
        }
    }
    Ok(TrendReport {
        provider,
        metric: metric.as_str().to_string(),
        percentile: percentile.number(),
        bucket: bucket.as_str().to_string(),
        rows,
    })
}

impl TrendReport {
    /// The report as a text table (what `latmesh query trend` prints).
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let when = match self.bucket.as_str() {
            "local-hour" => "local hour of day",
            "day" => "UTC day",
            _ => "UTC hour",
        };
        let _ = writeln!(
            out,
            "{}: {} P{} (ms) per {when}",
            self.provider,
            self.metric.to_uppercase(),
            self.percentile
        );
        let mut t = Table::new();
        t.load_preset(presets::ASCII_MARKDOWN);
        t.set_header(vec![
            "region",
            self.bucket.as_str(),
            &format!("P{}", self.percentile),
            "samples",
            "attempts",
            "err %",
        ]);
        let right = |s: String| TCell::new(s).set_alignment(CellAlignment::Right);
        let mut marked = false;
        for r in &self.rows {
            let (text, m) = ms_marked(&r.stat, self.percentile);
            marked |= m;
            t.add_row(vec![
                TCell::new(&r.region),
                TCell::new(&r.label),
                right(text),
                right(r.stat.samples.to_string()),
                right(r.stat.attempts.to_string()),
                right(format!("{:.1}", r.stat.error_pct)),
            ]);
        }
        let _ = writeln!(out, "{t}");
        if marked {
            let _ = writeln!(out, "{}", crate::percentiles::legend());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hour_sql_picks_each_region_s_zone() {
        let zones = [
            ("ap".to_string(), "+08:00".to_string()),
            ("us".to_string(), "America/New_York".to_string()),
        ]
        .into();
        let spec = WindowSpec::new(&zones, &[]).unwrap();
        let sql = local_hour_sql(&spec, "s");
        assert_eq!(
            sql,
            "multiIf(region = 'ap', toUInt8(intDiv(modulo(toInt64(s) + (28800) + 86400, 86400), 3600)), \
             region = 'us', toHour(toTimeZone(toDateTime(toUInt32(s)), 'America/New_York')), \
             toUInt8(intDiv(modulo(toInt64(s) + (0) + 86400, 86400), 3600)))"
        );
        assert!(!local_hour_sql(&WindowSpec::default(), "s").contains("multiIf"));
        assert_eq!(sql_string("it's \\"), "'it\\'s \\\\'");
    }

    #[test]
    fn percentiles_and_buckets_parse() {
        for n in [50, 90, 95, 99] {
            assert_eq!(Percentile::from_number(n).unwrap().number(), n);
        }
        assert_eq!(Percentile::from_number(98), None);
        assert_eq!(Percentile::P99.quantile(), 0.99);
        assert_eq!(Percentile::P95.sql(), "0.95");
        for b in ["hour", "day", "local-hour"] {
            assert_eq!(TrendBucket::parse(b).unwrap().as_str(), b);
        }
        assert_eq!(TrendBucket::parse("week"), None);
    }
}
