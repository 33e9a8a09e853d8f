//! latmesh's histogram bounds and the HdrHistogram V2 (+ DEFLATE) codec: what every agent
//! encodes and the coordinator decodes densely (the sparse decoder is [`super::sparse`]).

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// Lowest discernible value, µs.
pub const LOWEST_US: u64 = 1;
/// Highest trackable value, µs (one hour).
pub const HIGHEST_US: u64 = 3_600_000_000;
/// Significant decimal digits kept.
pub const SIGFIG: u8 = 3;

/// Errors of the histogram codec.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    /// The bytes are not a V2 (DEFLATE) encoded histogram.
    #[error("cannot decode histogram: {0}")]
    Decode(String),
    /// Encoding failed (should not happen for in-range histograms).
    #[error("cannot encode histogram: {0}")]
    Encode(String),
}

/// A new empty histogram with latmesh's fixed bounds.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGFIG).expect("fixed bounds are valid")
}

/// Encodes with the HdrHistogram V2 + DEFLATE format.
///
/// # Errors
/// [`HistError::Encode`] if the serializer fails.
pub fn encode_v2(h: &Histogram<u64>) -> Result<Vec<u8>, HistError> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .map_err(|e| HistError::Encode(format!("{e:?}")))?;
    Ok(out)
}

/// Decodes V2 or V2 + DEFLATE bytes into a histogram with latmesh's bounds.
///
/// Allocates and fills the 188 KB dense histogram; where only the non-empty buckets are
/// needed, [`super::sparse::decode_v2_sparse`] gives them without it.
///
/// # Errors
/// [`HistError::Decode`] for bytes that are not an encoded histogram, or whose values do not
/// fit latmesh's bounds.
pub fn decode_v2(bytes: &[u8]) -> Result<Histogram<u64>, HistError> {
    let decoded: Histogram<u64> = Deserializer::new()
        .deserialize(&mut std::io::Cursor::new(bytes))
        .map_err(|e| HistError::Decode(format!("{e:?}")))?;
    if decoded.low() == LOWEST_US && decoded.high() == HIGHEST_US && decoded.sigfig() == SIGFIG {
        // Already latmesh's bounds (every agent's): no copy through a fresh histogram, whose
        // `add` scans every counter.
        return Ok(decoded);
    }
    let mut h = new_histogram();
    h.add(&decoded)
        .map_err(|e| HistError::Decode(format!("{e:?}")))?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_round_trip_keeps_every_count() {
        let mut h = new_histogram();
        for v in [1u64, 7, 150, 150, 20_000, 3_000_000] {
            h.record(v).unwrap();
        }
        let back = decode_v2(&encode_v2(&h).unwrap()).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.count_at(150), 2);
        assert_eq!(back.max(), h.max());
        assert!(decode_v2(b"not a histogram").is_err());
    }
}
