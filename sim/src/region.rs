//! Simulated network distance between a provider's home region and the caller's region.
//!
//! Agents started with `--emulate-region` name their region in the `x-latmesh-region`
//! request header (sent to loopback peers only; without the flag, or from another client, a
//! request has no region and no delay). The simulator holds the response headers back by the
//! one-way delay between that region and the provider's home region, so an agent in
//! `ap-southeast` sees a slower time to first byte from a `us-east` provider than an agent in
//! `us-east` does.

use serde::{Deserialize, Serialize};

/// Request header in which an agent names its region.
pub const REGION_HEADER: &str = "x-latmesh-region";

/// The built-in regions, in a stable order.
pub const BUILTIN_REGIONS: [&str; 3] = ["us-east", "eu-west", "ap-southeast"];

/// One entry of the delay table: the delay between two regions, in either direction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionLink {
    /// One region.
    pub a: String,
    /// The other region (may equal `a`: the delay within a region).
    pub b: String,
    /// Delay added before the response headers, in microseconds.
    pub delay_us: u64,
}

/// Symmetric table of delays between regions.
///
/// A pair not in the table, or a missing or unknown caller region, has no delay (0 µs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionTable {
    /// The links; lookup is symmetric (`a`→`b` equals `b`→`a`).
    pub links: Vec<RegionLink>,
}

impl RegionTable {
    /// Delay in microseconds between a provider's `home` region and the caller's region
    /// (`None` when the request did not say). Unknown pairs give 0.
    pub fn delay_us(&self, home: &str, caller: Option<&str>) -> u64 {
        let Some(caller) = caller.map(str::trim).filter(|c| !c.is_empty()) else {
            return 0;
        };
        self.links
            .iter()
            .find(|l| (l.a == home && l.b == caller) || (l.a == caller && l.b == home))
            .map_or(0, |l| l.delay_us)
    }
}

impl Default for RegionTable {
    /// `us-east`, `eu-west`, `ap-southeast`: 3 ms within a region, us-east↔eu-west 40 ms,
    /// us-east↔ap-southeast 110 ms, eu-west↔ap-southeast 85 ms.
    fn default() -> Self {
        let link = |a: &str, b: &str, ms: u64| RegionLink {
            a: a.to_string(),
            b: b.to_string(),
            delay_us: ms * 1000,
        };
        let mut links: Vec<RegionLink> = BUILTIN_REGIONS.iter().map(|r| link(r, r, 3)).collect();
        links.push(link("us-east", "eu-west", 40));
        links.push(link("us-east", "ap-southeast", 110));
        links.push(link("eu-west", "ap-southeast", 85));
        RegionTable { links }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_symmetric_and_defaults_to_zero() {
        let t = RegionTable::default();
        assert_eq!(t.delay_us("us-east", Some("us-east")), 3_000);
        assert_eq!(t.delay_us("us-east", Some("eu-west")), 40_000);
        assert_eq!(t.delay_us("eu-west", Some("us-east")), 40_000);
        assert_eq!(t.delay_us("ap-southeast", Some("us-east")), 110_000);
        assert_eq!(t.delay_us("eu-west", Some("ap-southeast")), 85_000);
        assert_eq!(t.delay_us("ap-southeast", Some("eu-west")), 85_000);
        assert_eq!(t.delay_us("us-east", Some("mars-north")), 0);
        assert_eq!(t.delay_us("us-east", None), 0);
        assert_eq!(t.delay_us("us-east", Some("")), 0);
    }
}
