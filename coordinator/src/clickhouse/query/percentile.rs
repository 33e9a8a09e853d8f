//! The percentiles the `windows` and `trend` queries report ([`Percentile`]) and their SQL
//! literals.

use serde::{Deserialize, Serialize};

/// A percentile the `windows` and `trend` queries report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Percentile {
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
}

impl Percentile {
    /// Every percentile, ascending.
    pub const ALL: [Percentile; 4] = [
        Percentile::P50,
        Percentile::P90,
        Percentile::P95,
        Percentile::P99,
    ];

    /// `50` → [`Percentile::P50`], `90`, `95`, `99`; `None` otherwise.
    pub fn from_number(n: u32) -> Option<Percentile> {
        Percentile::ALL.into_iter().find(|p| p.number() == n)
    }

    /// 50, 90, 95 or 99.
    pub fn number(self) -> u32 {
        match self {
            Percentile::P50 => 50,
            Percentile::P90 => 90,
            Percentile::P95 => 95,
            Percentile::P99 => 99,
        }
    }

    /// The quantile, as HdrHistogram's `value_at_quantile` takes it (0.5, 0.9, 0.95, 0.99).
    pub fn quantile(self) -> f64 {
        f64::from(self.number()) / 100.0
    }

    /// The quantile as an SQL literal ([`quantile_sql`]).
    pub(super) fn sql(self) -> String {
        quantile_sql(self.quantile())
    }
}

/// A quantile as an SQL literal: the shortest decimal that reads back as the same `f64`, so
/// ClickHouse's threshold `ceil(weights × level)` equals HdrHistogram's.
fn quantile_sql(q: f64) -> String {
    format!("{q}")
}
