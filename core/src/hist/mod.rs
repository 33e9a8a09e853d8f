//! HDR histograms per (provider, scenario, metric): latmesh's fixed bounds and the V2 codec
//! ([`codec`]), the set recorded and merged per key ([`set`]), and the sparse decoding of V2
//! blobs into their non-empty buckets ([`sparse`]). `codec` ← `sparse` ← `set`.
//!
//! Bounds are fixed for every metric (1 µs to 1 h, 3 significant digits, docs/metrics.md
//! "Histograms and merging") so any two histograms add. Values above the range saturate at the
//! top.

pub mod codec;
pub mod set;
pub mod sparse;

pub use codec::{HIGHEST_US, HistError, LOWEST_US, SIGFIG, decode_v2, encode_v2, new_histogram};
pub use set::{HistKey, HistogramSet};
