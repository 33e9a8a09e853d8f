//! Percentiles and formatting.

use serde::{Deserialize, Serialize};

/// Percentiles of a sample (nearest rank), µs or whatever unit the sample has.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Pcts {
    pub n: usize,
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

impl Pcts {
    /// Sorts `v` and takes its percentiles.
    pub fn of(v: &mut [i64]) -> Pcts {
        v.sort_unstable();
        if v.is_empty() {
            return Pcts::default();
        }
        Pcts {
            n: v.len(),
            p50: pct(v, 50.0),
            p90: pct(v, 90.0),
            p99: pct(v, 99.0),
            max: v[v.len() - 1],
        }
    }

    /// `P50 / P99`, or dashes when empty.
    pub fn pp(&self) -> String {
        if self.n == 0 {
            "– / –".to_string()
        } else {
            format!("{} / {}", int(self.p50), int(self.p99))
        }
    }

    /// `P50 / P99 / max`, or dashes when empty.
    pub fn ppm(&self) -> String {
        if self.n == 0 {
            "– / – / –".to_string()
        } else {
            format!("{} / {} / {}", int(self.p50), int(self.p99), int(self.max))
        }
    }
}

/// Nearest-rank percentile of a sorted slice (`p` in percent); 0 for an empty one.
pub fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// An integer with thousands separators.
pub fn int(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    if n < 0 {
        out.push('-');
    }
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Maximum number of intervals `[start, end)` open at once.
pub fn max_overlap(intervals: &[(u64, u64)]) -> usize {
    let mut ev: Vec<(u64, i32)> = Vec::with_capacity(intervals.len() * 2);
    for &(s, e) in intervals {
        ev.push((s, 1));
        ev.push((e.max(s), -1));
    }
    // Ends before starts at the same instant.
    ev.sort_unstable();
    let (mut cur, mut max) = (0i64, 0i64);
    for (_, d) in ev {
        cur += i64::from(d);
        max = max.max(cur);
    }
    max as usize
}
