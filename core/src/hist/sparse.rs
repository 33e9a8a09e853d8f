//! Decoding HdrHistogram V2 (+ DEFLATE) blobs into their non-empty buckets, without the dense
//! counts array.
//!
//! [`hist::decode_v2`] inflates every blob into a `Histogram<u64>` of latmesh's bounds: 23,552
//! counters (188 KB) allocated and zeroed, filled, then scanned again by whoever reads it
//! (`iter_recorded`, `Histogram::add`). An interval histogram has a few hundred non-empty
//! buckets, so [`decode_v2_sparse`] walks the encoded counts once, in O(payload), and keeps
//! only `(highest equivalent value, count)` of each non-empty bucket: what the coordinator's
//! ClickHouse rows store ([`SparseHistogram::values`], [`SparseHistogram::counts`]) and what its
//! merge adds ([`crate::hist::HistogramSet::merge_sparse`]).
//!
//! # The format
//!
//! As written by the `hdrhistogram` crate 7.x (`src/serialization/v2_serializer.rs`,
//! `v2_deflate_serializer.rs`) and read by its `Deserializer` (`deserializer.rs`), all integers
//! big-endian:
//!
//! - V2: cookie `0x1c849313` (u32), payload length in bytes (u32), normalizing index offset
//!   (u32, must be 0), significant digits (u32), lowest discernible value (u64), highest
//!   trackable value (u64), integer-to-double ratio (f64, must be 1.0): 40 bytes; then the
//!   payload: the counts array from index 0, each entry a zig-zag LEB128-64b9B varint (at most
//!   9 bytes, the 9th byte taken whole), a negative entry `-n` standing for `n` empty counters.
//! - V2 + DEFLATE: cookie `0x1c849314` (u32), compressed length (u32), then a zlib stream of a
//!   whole V2 blob (cookie included).
//!
//! # Exactness
//!
//! For a blob with latmesh's bounds ([`hist::LOWEST_US`], [`hist::HIGHEST_US`],
//! [`hist::SIGFIG`]: every agent's) the result is exactly what the dense path gives: the
//! buckets `iter_recorded` yields on [`hist::decode_v2`]'s histogram (same highest equivalent
//! values, same counts), its `len()` (a saturating sum), `min()` and `max()`. The same blobs
//! are rejected (property tests compare both decoders on random, truncated, damaged and
//! hand-made hostile blobs), with the same DEFLATE implementation (flate2's miniz_oxide
//! backend, fully reset before each blob: a fresh inflater's state). One theoretical
//! difference is left: a zlib stream inflating to more than 32 KiB with a damaged Adler-32
//! trailer may be caught by one decoder and not the other (they pull the inflater in different
//! steps); agents' blobs inflate to a few KiB. A blob with other bounds or precision (a foreign
//! agent) takes the dense path itself: [`hist::decode_v2`] (decode, then add into latmesh's
//! bounds), then its non-empty buckets, so the result stays exact.
//!
//! Where `hdrhistogram`'s deserializer would misbehave on hostile bytes this decoder returns an
//! error instead: a zero run of `i64::MIN` (a panic in a debug build of the crate, an error in a
//! release one) and a declared payload length far beyond the bytes actually present (the crate
//! allocates the declared length, up to 4 GiB, before reading). Payload bytes are streamed
//! through a fixed 16 KiB buffer, whatever their length.

use std::cell::RefCell;

use flate2::{Decompress, FlushDecompress, Status};
use hdrhistogram::Histogram;

use super::codec::{self as hist, HIGHEST_US, HistError, LOWEST_US, SIGFIG};

/// Cookie of a plain V2 blob (`hdrhistogram`'s `V2_COOKIE`).
const V2_COOKIE: u32 = 0x1c84_9303 | 0x10;
/// Cookie of a V2 + DEFLATE blob (`hdrhistogram`'s `V2_COMPRESSED_COOKIE`).
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9304 | 0x10;
/// V2 header after the cookie: payload length, normalizing offset, significant digits (u32
/// each), lowest and highest value (u64 each), integer-to-double ratio (f64).
const V2_HEADER_AFTER_COOKIE: usize = 4 + 4 + 4 + 8 + 8 + 8;
/// Bytes of inflated data buffered at a time.
const INFLATE_CHUNK: usize = 16 * 1024;

// latmesh's bucket geometry, derived from its bounds as `Histogram::new_with_bounds` does.

/// `floor(log2(LOWEST_US))`.
const UNIT_MAGNITUDE: u32 = LOWEST_US.ilog2();
/// `ceil(log2(2 × 10^SIGFIG))`: sub-buckets per bucket, as a power of two.
const SUB_BUCKET_COUNT_MAGNITUDE: u32 = (2 * 10u64.pow(SIGFIG as u32)).next_power_of_two().ilog2();
const SUB_BUCKET_HALF_COUNT_MAGNITUDE: u32 = SUB_BUCKET_COUNT_MAGNITUDE - 1;
const SUB_BUCKET_HALF_COUNT: u64 = 1 << SUB_BUCKET_HALF_COUNT_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = ((1 << SUB_BUCKET_COUNT_MAGNITUDE) - 1) << UNIT_MAGNITUDE;
const LEADING_ZERO_COUNT_BASE: u32 = 64 - UNIT_MAGNITUDE - SUB_BUCKET_COUNT_MAGNITUDE;

/// Buckets needed to cover `value` (`Histogram::buckets_to_cover`).
const fn buckets_to_cover(value: u64) -> u32 {
    let mut smallest_untrackable = (1u64 << SUB_BUCKET_COUNT_MAGNITUDE) << UNIT_MAGNITUDE;
    let mut buckets = 1;
    while smallest_untrackable <= value {
        if smallest_untrackable > u64::MAX / 2 {
            return buckets + 1;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    buckets
}

/// Counters of a histogram with latmesh's bounds (23,552): indices of a V2 payload at or above
/// this hold no count.
pub const COUNTS_LEN: usize =
    ((buckets_to_cover(HIGHEST_US) + 1) as usize) << SUB_BUCKET_HALF_COUNT_MAGNITUDE;

const _: () = assert!(COUNTS_LEN == 23_552);

/// Bucket index and lowest value of counter `index` (`Histogram::value_for`).
#[inline]
fn bucket_and_lowest(index: usize) -> (u32, u64) {
    let bucket = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) as u32;
    let sub = (index as u64) & (SUB_BUCKET_HALF_COUNT - 1);
    if bucket == 0 {
        // The lower half of bucket 0.
        (0, sub << UNIT_MAGNITUDE)
    } else {
        let bucket = bucket - 1;
        (
            bucket,
            (sub + SUB_BUCKET_HALF_COUNT) << (bucket + UNIT_MAGNITUDE),
        )
    }
}

/// Highest value equivalent to counter `index`'s values, µs: `highest_equivalent(value_for(i))`
/// (at most `u32::MAX` for `index < COUNTS_LEN`).
#[inline]
fn highest_of_index(index: usize) -> u64 {
    let (bucket, lowest) = bucket_and_lowest(index);
    lowest.saturating_add((1u64 << (bucket + UNIT_MAGNITUDE)) - 1)
}

/// Lowest value equivalent to `value` (`Histogram::lowest_equivalent`).
#[inline]
fn lowest_equivalent(value: u64) -> u64 {
    let bucket = LEADING_ZERO_COUNT_BASE - (value | SUB_BUCKET_MASK).leading_zeros();
    let shift = bucket + UNIT_MAGNITUDE;
    (value >> shift) << shift
}

/// A histogram in latmesh's bounds as its non-empty buckets, ascending: the highest equivalent
/// value of each (µs) and its count, plus the total count.
///
/// Built by [`decode_v2_sparse`] from a V2 blob, or by [`SparseHistogram::from_histogram`].
/// Equal to the dense histogram it stands for in everything it reports: `values`/`counts` are
/// what `Histogram::iter_recorded` yields (`highest_equivalent(value_iterated_to())`,
/// `count_at_value()`), [`len`](Self::len), [`min`](Self::min) and [`max`](Self::max) are
/// `Histogram::len`, `min` and `max`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseHistogram {
    values: Vec<u64>,
    counts: Vec<u64>,
    len: u64,
}

impl SparseHistogram {
    /// Highest equivalent value of each non-empty bucket, µs, strictly ascending.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// Count of each bucket of [`values`](Self::values) (never 0).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// `(highest equivalent value µs, count)` of each non-empty bucket, ascending.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.values.iter().copied().zip(self.counts.iter().copied())
    }

    /// Non-empty buckets.
    pub fn buckets(&self) -> usize {
        self.values.len()
    }

    /// Values recorded: the sum of the counts, saturating at `u64::MAX` (`Histogram::len`).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lowest recorded value's lowest equivalent, µs; 0 when empty or when a value 0 was
    /// recorded (`Histogram::min`).
    pub fn min(&self) -> u64 {
        match self.values.first() {
            None | Some(0) => 0,
            Some(&v) => lowest_equivalent(v),
        }
    }

    /// The highest recorded value's highest equivalent, µs; 0 when empty (`Histogram::max`).
    pub fn max(&self) -> u64 {
        self.values.last().copied().unwrap_or(0)
    }

    /// The two arrays `(values, counts)`, without copying.
    pub fn into_arrays(self) -> (Vec<u64>, Vec<u64>) {
        (self.values, self.counts)
    }

    /// The non-empty buckets of `h`, in latmesh's bounds (a histogram with other bounds is
    /// first added into a histogram with latmesh's, as [`hist::decode_v2`] does). One pass over
    /// `h`'s counters.
    ///
    /// # Errors
    /// [`HistError::Decode`] when `h` holds values beyond latmesh's bounds.
    pub fn from_histogram(h: &Histogram<u64>) -> Result<Self, HistError> {
        if is_latmesh_bounds(h.low(), h.high(), u32::from(h.sigfig())) {
            return Ok(Self::from_latmesh_histogram(h));
        }
        let mut ours = hist::new_histogram();
        ours.add(h)
            .map_err(|e| HistError::Decode(format!("{e:?}")))?;
        Ok(Self::from_latmesh_histogram(&ours))
    }

    /// `h` must have latmesh's bounds.
    fn from_latmesh_histogram(h: &Histogram<u64>) -> Self {
        let mut values = Vec::new();
        let mut counts = Vec::new();
        for v in h.iter_recorded() {
            values.push(h.highest_equivalent(v.value_iterated_to()));
            counts.push(v.count_at_value());
        }
        SparseHistogram {
            values,
            counts,
            len: h.len(),
        }
    }

    /// Adds every bucket into `h` with `record_n(value, count)`. For `h` with latmesh's bounds
    /// the result equals `h.add(&dense)`, `dense` the histogram this one stands for: same
    /// counters (saturating), same `len`, `min`, `max`.
    ///
    /// # Errors
    /// [`HistError::Decode`] when a bucket's value is beyond `h`'s range (never for `h` with
    /// latmesh's bounds); buckets before it were added.
    pub fn add_to(&self, h: &mut Histogram<u64>) -> Result<(), HistError> {
        for (v, n) in self.iter() {
            h.record_n(v, n)
                .map_err(|e| HistError::Decode(format!("{e:?}")))?;
        }
        Ok(())
    }

    /// The dense histogram, in latmesh's bounds.
    pub fn to_histogram(&self) -> Histogram<u64> {
        let mut h = hist::new_histogram();
        self.add_to(&mut h)
            .expect("bucket values are within latmesh's bounds");
        h
    }
}

fn is_latmesh_bounds(low: u64, high: u64, sigfig: u32) -> bool {
    low == LOWEST_US && high == HIGHEST_US && sigfig == u32::from(SIGFIG)
}

fn decode_error(what: &str) -> HistError {
    HistError::Decode(what.to_string())
}

/// Decodes V2 or V2 + DEFLATE bytes (the format of [`hist::encode_v2`] and
/// `hdrhistogram::serialization::Deserializer`, see the [module docs](self)) into the non-empty
/// buckets of the histogram they encode, in latmesh's bounds: exactly what
/// [`hist::decode_v2`] then `iter_recorded` give, in O(payload) for blobs with latmesh's bounds
/// (blobs with other bounds go through [`hist::decode_v2`]).
///
/// Reuses a per-thread inflater and 16 KiB buffer.
///
/// # Errors
/// [`HistError::Decode`] for bytes that are not an encoded histogram (unknown cookie,
/// truncated header or payload, corrupt DEFLATE stream, a non-zero normalizing offset or an
/// integer-to-double ratio other than 1, counts beyond the histogram's last counter, invalid
/// bounds), or whose values do not fit latmesh's bounds: the blobs [`hist::decode_v2`]
/// rejects.
pub fn decode_v2_sparse(bytes: &[u8]) -> Result<SparseHistogram, HistError> {
    decode_v2_sparse_with(bytes, Foreign::Dense)
}

/// Most payload bytes a V2 blob in latmesh's bounds can hold: every varint (at most 9 bytes)
/// moves past at least one of the [`COUNTS_LEN`] counters.
pub const MAX_PAYLOAD_BYTES: u32 = 9 * COUNTS_LEN as u32;

/// [`decode_v2_sparse`] for blobs from an untrusted peer: the V2 header is checked before any
/// payload is read, and a blob is refused unless it has latmesh's bounds
/// ([`hist::LOWEST_US`], [`hist::HIGHEST_US`], [`hist::SIGFIG`], what every agent encodes)
/// and a payload length of at most [`MAX_PAYLOAD_BYTES`]. The work is then O(payload) with a
/// bounded payload: no dense histogram is ever built (a blob with foreign bounds costs
/// [`decode_v2_sparse`] a dense decode, ~60 ms of CPU).
///
/// # Errors
/// As [`decode_v2_sparse`], and [`HistError::Decode`] naming the bounds or the payload length
/// when they are not latmesh's.
pub fn decode_v2_sparse_strict(bytes: &[u8]) -> Result<SparseHistogram, HistError> {
    decode_v2_sparse_with(bytes, Foreign::Refuse)
}

/// What to do with a blob whose bounds are not latmesh's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Foreign {
    /// Decode it densely, then keep its buckets (exact, slow).
    Dense,
    /// Refuse it before reading its payload.
    Refuse,
}

fn decode_v2_sparse_with(bytes: &[u8], foreign: Foreign) -> Result<SparseHistogram, HistError> {
    let (cookie, rest) = read_u32(bytes).ok_or_else(|| decode_error("no cookie"))?;
    match cookie {
        V2_COOKIE => decode_v2_body(&mut Plain(rest), bytes, foreign),
        V2_DEFLATE_COOKIE => {
            let (len, rest) = read_u32(rest).ok_or_else(|| decode_error("no compressed length"))?;
            // At most `len` bytes of compressed input, as `Read::take` in the deserializer.
            let input = &rest[..rest.len().min(len as usize)];
            INFLATER.with_borrow_mut(|slot| {
                let scratch = slot.get_or_insert_with(|| {
                    Box::new(Scratch {
                        z: Decompress::new(true),
                        buf: vec![0; INFLATE_CHUNK].into_boxed_slice(),
                    })
                });
                let Scratch { z, buf } = &mut **scratch;
                // A full reset (the window zeroed too): the same state as a new inflater.
                z.reset(true);
                let mut src = Inflate {
                    z,
                    input,
                    buf,
                    lo: 0,
                    hi: 0,
                    // The V2 cookie and header; the payload is allowed once its length is read.
                    out_left: (4 + V2_HEADER_AFTER_COOKIE) as u64,
                    ended: false,
                };
                let inner = src.fill(4)?;
                if inner.len() < 4 {
                    return Err(decode_error("DEFLATE stream ends before the V2 cookie"));
                }
                if u32::from_be_bytes([inner[0], inner[1], inner[2], inner[3]]) != V2_COOKIE {
                    return Err(decode_error("DEFLATE stream does not hold a V2 histogram"));
                }
                src.consume(4);
                decode_v2_body(&mut src, bytes, foreign)
            })
        }
        _ => Err(decode_error("unknown cookie")),
    }
}

fn read_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*head), rest))
}

/// The V2 header after the cookie, then the payload.
fn decode_v2_body<S: Source>(
    src: &mut S,
    blob: &[u8],
    foreign: Foreign,
) -> Result<SparseHistogram, HistError> {
    let h = src.fill(V2_HEADER_AFTER_COOKIE)?;
    let Some(h) = h.first_chunk::<V2_HEADER_AFTER_COOKIE>() else {
        return Err(decode_error("truncated V2 header"));
    };
    let u32_at = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| {
        u64::from_be_bytes([
            h[i],
            h[i + 1],
            h[i + 2],
            h[i + 3],
            h[i + 4],
            h[i + 5],
            h[i + 6],
            h[i + 7],
        ])
    };
    let payload_len = u32_at(0);
    let normalizing_offset = u32_at(4);
    let sigfig = u32_at(8);
    let (low, high) = (u64_at(12), u64_at(20));
    let ratio = f64::from_bits(u64_at(28));
    src.consume(V2_HEADER_AFTER_COOKIE);
    if normalizing_offset != 0 {
        return Err(decode_error("normalizing index offset is not supported"));
    }
    if sigfig > u32::from(u8::MAX) {
        return Err(decode_error("invalid significant digits"));
    }
    if ratio != 1.0 {
        return Err(decode_error(
            "integer-to-double ratio other than 1 is not supported",
        ));
    }
    if foreign == Foreign::Refuse {
        if !is_latmesh_bounds(low, high, sigfig) {
            return Err(HistError::Decode(format!(
                "histogram bounds {low}..={high} µs with {sigfig} significant digits are not latmesh's {LOWEST_US}..={HIGHEST_US} µs with {SIGFIG}"
            )));
        }
        if payload_len > MAX_PAYLOAD_BYTES {
            return Err(HistError::Decode(format!(
                "histogram payload of {payload_len} bytes is longer than {MAX_PAYLOAD_BYTES}, the most {COUNTS_LEN} counters take"
            )));
        }
    }
    if is_latmesh_bounds(low, high, sigfig) {
        let mut walk = Walk {
            index: 0,
            limit: COUNTS_LEN,
            keep: true,
            out: SparseHistogram {
                // Each count takes at least a byte of payload: no growth.
                values: Vec::with_capacity((payload_len as usize).min(COUNTS_LEN)),
                counts: Vec::with_capacity((payload_len as usize).min(COUNTS_LEN)),
                len: 0,
            },
        };
        walk_payload(src, payload_len, &mut walk)?;
        return Ok(walk.out);
    }
    // Other bounds: check the payload first (the dense deserializer allocates the declared
    // length up front and panics on some hostile varints in debug builds), then decode densely.
    let mut walk = Walk {
        index: 0,
        limit: usize::MAX,
        keep: false,
        out: SparseHistogram::default(),
    };
    walk_payload(src, payload_len, &mut walk)?;
    Ok(SparseHistogram::from_latmesh_histogram(&hist::decode_v2(
        blob,
    )?))
}

/// Reads `payload_len` bytes of varints from `src` into `walk`.
fn walk_payload<S: Source>(
    src: &mut S,
    payload_len: u32,
    walk: &mut Walk,
) -> Result<(), HistError> {
    let mut left = payload_len as usize;
    src.allow(u64::from(payload_len));
    while left > 0 {
        // A varint is at most 9 bytes: with 9 buffered (or the rest of the payload) at least
        // one completes, unless the payload ends inside it.
        let want = left.min(9);
        let buf = src.fill(want)?;
        let buf = &buf[..buf.len().min(left)];
        if buf.len() < want {
            return Err(decode_error("truncated V2 payload"));
        }
        let used = if walk.keep {
            walk.chunk::<true>(buf)
        } else {
            walk.chunk::<false>(buf)
        }
        .map_err(decode_error)?;
        if used == 0 {
            return Err(decode_error("V2 payload ends inside a varint"));
        }
        src.consume(used);
        left -= used;
    }
    Ok(())
}

/// A LEB128-64b9B varint at the start of `b` (7 bits a byte for 8 bytes, then a whole 9th
/// byte) and its length; `None` when `b` ends first.
#[inline]
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0;
    for (i, &byte) in b.iter().take(8).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    v |= u64::from(*b.get(8)?) << 56;
    Some((v, 9))
}

/// The counts walk (`DecodeLoopState::on_decoded_num` in the deserializer).
struct Walk {
    /// Counter the next entry is for.
    index: usize,
    /// Counters of the histogram: a count at or beyond is an error.
    limit: usize,
    /// Whether to keep the buckets (`false`: only check the payload).
    keep: bool,
    out: SparseHistogram,
}

impl Walk {
    /// Walks the varints that end within `buf`; returns the bytes they take.
    #[inline]
    fn chunk<const KEEP: bool>(&mut self, buf: &[u8]) -> Result<usize, &'static str> {
        let (mut index, mut len, limit) = (self.index, self.out.len, self.limit);
        let mut pos = 0;
        while let Some(&first) = buf.get(pos) {
            let zz = if first < 0x80 {
                pos += 1;
                u64::from(first)
            } else {
                let Some((zz, n)) = read_varint(&buf[pos..]) else {
                    break;
                };
                pos += n;
                zz
            };
            let n = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
            if n < 0 {
                // `i64::MIN` has no positive counterpart: an error, as in a release build of
                // the deserializer (`(-n).to_usize()`).
                let zeros = n
                    .checked_neg()
                    .and_then(|z| usize::try_from(z).ok())
                    .ok_or("invalid run of empty counters")?;
                index = index.checked_add(zeros).ok_or("counts array overflows")?;
            } else {
                if n > 0 {
                    if index >= limit {
                        return Err("the encoded counts array is longer than the histogram's");
                    }
                    let n = n as u64;
                    if KEEP {
                        self.out.values.push(highest_of_index(index));
                        self.out.counts.push(n);
                    }
                    len = len.saturating_add(n);
                }
                index = index.checked_add(1).ok_or("counts array overflows")?;
            }
        }
        self.index = index;
        self.out.len = len;
        Ok(pos)
    }
}

/// The V2 bytes after the cookie, front to back.
trait Source {
    /// The buffered bytes: at least `want` of them (`want` ≤ 16 KiB) unless the source ends
    /// first.
    ///
    /// # Errors
    /// A corrupt DEFLATE stream.
    fn fill(&mut self, want: usize) -> Result<&[u8], HistError>;
    /// Drops the first `n` bytes of what [`Source::fill`] returned.
    fn consume(&mut self, n: usize);
    /// Lets the source produce `n` more bytes (an inflater stops where the V2 blob does).
    fn allow(&mut self, n: u64);
}

/// A plain V2 blob, in memory.
struct Plain<'a>(&'a [u8]);

impl Source for Plain<'_> {
    fn fill(&mut self, _want: usize) -> Result<&[u8], HistError> {
        Ok(self.0)
    }
    fn consume(&mut self, n: usize) {
        self.0 = &self.0[n..];
    }
    fn allow(&mut self, _n: u64) {}
}

/// The per-thread inflater and its output buffer.
struct Scratch {
    z: Decompress,
    buf: Box<[u8]>,
}

thread_local! {
    static INFLATER: RefCell<Option<Box<Scratch>>> = const { RefCell::new(None) };
}

/// A zlib stream inflated chunk by chunk into `buf[lo..hi]`, never beyond `out_left` more
/// bytes.
struct Inflate<'a> {
    z: &'a mut Decompress,
    input: &'a [u8],
    buf: &'a mut [u8],
    lo: usize,
    hi: usize,
    out_left: u64,
    /// The stream ended or can make no progress.
    ended: bool,
}

impl Source for Inflate<'_> {
    fn fill(&mut self, want: usize) -> Result<&[u8], HistError> {
        if self.hi - self.lo < want && !self.ended {
            self.buf.copy_within(self.lo..self.hi, 0);
            self.hi -= self.lo;
            self.lo = 0;
            while self.hi < want && self.out_left > 0 && !self.ended {
                let room = (self.buf.len() - self.hi)
                    .min(usize::try_from(self.out_left).unwrap_or(usize::MAX));
                let (in0, out0) = (self.z.total_in(), self.z.total_out());
                let status = self
                    .z
                    .decompress(
                        self.input,
                        &mut self.buf[self.hi..self.hi + room],
                        FlushDecompress::None,
                    )
                    .map_err(|e| HistError::Decode(format!("corrupt DEFLATE stream: {e}")))?;
                let consumed = (self.z.total_in() - in0) as usize;
                let produced = (self.z.total_out() - out0) as usize;
                self.input = &self.input[consumed..];
                self.hi += produced;
                self.out_left -= produced as u64;
                if status == Status::StreamEnd || (consumed == 0 && produced == 0) {
                    self.ended = true;
                }
            }
        }
        Ok(&self.buf[self.lo..self.hi])
    }
    fn consume(&mut self, n: usize) {
        self.lo += n;
    }
    fn allow(&mut self, n: u64) {
        self.out_left = self.out_left.saturating_add(n);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use hdrhistogram::serialization::{Serializer, V2Serializer};
    use proptest::prelude::*;

    use super::*;
    use crate::hist::{HistKey, HistogramSet, decode_v2, encode_v2, new_histogram};
    use crate::metrics::Metric;

    /// What the coordinator built from a dense histogram: `iter_recorded`'s buckets.
    fn dense_buckets(h: &Histogram<u64>) -> (Vec<u64>, Vec<u64>) {
        h.iter_recorded()
            .map(|v| {
                (
                    h.highest_equivalent(v.value_iterated_to()),
                    v.count_at_value(),
                )
            })
            .unzip()
    }

    /// `None` when a counter is beyond `i64::MAX` (the format cannot hold it).
    fn plain_v2(h: &Histogram<u64>) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        V2Serializer::new().serialize(h, &mut out).ok()?;
        Some(out)
    }

    fn deflate_wrap(v2: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(v2).unwrap();
        let z = z.finish().unwrap();
        let mut out = V2_DEFLATE_COOKIE.to_be_bytes().to_vec();
        out.extend_from_slice(&(z.len() as u32).to_be_bytes());
        out.extend_from_slice(&z);
        out
    }

    /// A plain V2 blob with the given header fields and payload.
    fn v2_blob(payload_len: u32, sigfig: u32, low: u64, high: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = V2_COOKIE.to_be_bytes().to_vec();
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&sigfig.to_be_bytes());
        b.extend_from_slice(&low.to_be_bytes());
        b.extend_from_slice(&high.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn latmesh_blob(payload: &[u8]) -> Vec<u8> {
        v2_blob(
            payload.len() as u32,
            u32::from(SIGFIG),
            LOWEST_US,
            HIGHEST_US,
            payload,
        )
    }

    fn varint(zz: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut v = zz;
        for _ in 0..8 {
            if v < 0x80 {
                out.push(v as u8);
                return out;
            }
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    fn zigzag(n: i64) -> u64 {
        ((n << 1) ^ (n >> 63)) as u64
    }

    /// The declared V2 payload length, if the blob is plain V2 or inflates to V2: the dense
    /// deserializer allocates it before reading, so tests do not hand it absurd lengths.
    fn declared_payload_len(blob: &[u8]) -> Option<u64> {
        let cookie = u32::from_be_bytes(blob.get(..4)?.try_into().ok()?);
        let v2: Vec<u8> = match cookie {
            V2_COOKIE => blob.to_vec(),
            V2_DEFLATE_COOKIE => {
                let mut out = Vec::new();
                let mut z = flate2::read::ZlibDecoder::new(blob.get(8..)?);
                let _ = std::io::Read::read_to_end(&mut z, &mut out);
                out
            }
            _ => return None,
        };
        Some(u64::from(u32::from_be_bytes(
            v2.get(4..8)?.try_into().ok()?,
        )))
    }

    /// Sparse equals dense on `blob`: both reject it, or both accept it with the same buckets,
    /// `len`, `min` and `max`. A blob the dense decoder panics on must be an error.
    fn assert_same(
        blob: &[u8],
    ) -> Result<Option<(Histogram<u64>, SparseHistogram)>, TestCaseError> {
        let sparse = decode_v2_sparse(blob);
        if declared_payload_len(blob).is_some_and(|n| n > 1 << 22) {
            // More than any blob here holds: the dense deserializer would allocate it.
            prop_assert!(
                sparse.is_err(),
                "a payload longer than the blob was accepted"
            );
            return Ok(None);
        }
        let dense = catch_unwind(AssertUnwindSafe(|| decode_v2(blob)));
        match (dense, sparse) {
            (Ok(Ok(h)), Ok(s)) => {
                let (values, counts) = dense_buckets(&h);
                prop_assert_eq!(s.values(), &values[..]);
                prop_assert_eq!(s.counts(), &counts[..]);
                prop_assert_eq!(s.len(), h.len());
                prop_assert_eq!(s.min(), h.min());
                prop_assert_eq!(s.max(), h.max());
                prop_assert_eq!(s.is_empty(), h.is_empty());
                prop_assert_eq!(&s.to_histogram(), &h);
                prop_assert_eq!(&SparseHistogram::from_histogram(&h).unwrap(), &s);
                Ok(Some((h, s)))
            }
            (Ok(Ok(_)), Err(e)) => Err(TestCaseError::fail(format!(
                "sparse rejects what dense accepts: {e}"
            ))),
            (Ok(Err(_)) | Err(_), Ok(_)) => Err(TestCaseError::fail(
                "sparse accepts what dense rejects (or panics on)",
            )),
            (Ok(Err(_)) | Err(_), Err(HistError::Decode(_))) => Ok(None),
            (_, Err(e)) => Err(TestCaseError::fail(format!("wrong error kind: {e}"))),
        }
    }

    fn key() -> HistKey {
        HistKey {
            provider: "p".into(),
            scenario: "s".into(),
            metric: Metric::Itl,
            step: 0,
        }
    }

    /// `merge` of the dense histogram and `merge_sparse` of its buckets give the same
    /// histogram, into an empty set and into one already holding `base`.
    fn assert_same_merge(
        base: Option<&Histogram<u64>>,
        dense: &Histogram<u64>,
        sparse: &SparseHistogram,
    ) -> Result<(), TestCaseError> {
        let (mut a, mut b) = (HistogramSet::new(), HistogramSet::new());
        if let Some(base) = base {
            a.merge(key(), base);
            b.merge(key(), base);
        }
        a.merge(key(), dense);
        b.merge_sparse(key(), sparse);
        let (x, y) = (a.get(&key()).unwrap(), b.get(&key()).unwrap());
        prop_assert_eq!(x, y);
        prop_assert_eq!(x.len(), y.len());
        prop_assert_eq!(x.min(), y.min());
        prop_assert_eq!(x.min_nz(), y.min_nz());
        prop_assert_eq!(x.max(), y.max());
        prop_assert_eq!(dense_buckets(x), dense_buckets(y));
        // (`value_at_quantile` overflows on totals near u64::MAX.)
        if !x.is_empty() && x.len() < 1 << 60 {
            for q in [0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(x.value_at_quantile(q), y.value_at_quantile(q));
            }
        }
        Ok(())
    }

    /// Values over the whole range, log-uniform, with the edges (0, 1, the highest trackable
    /// value and the top of the last bucket) often.
    fn value() -> impl Strategy<Value = u64> {
        prop_oneof![
            12 => (0u32..32, any::<u64>())
                .prop_map(|(e, r)| ((1u64 << e) + r % (1u64 << e)).min(u64::from(u32::MAX))),
            1 => Just(LOWEST_US),
            1 => Just(HIGHEST_US),
            1 => Just(0),
            1 => Just(u64::from(u32::MAX)),
            1 => HIGHEST_US..=u64::from(u32::MAX),
        ]
    }

    fn count() -> impl Strategy<Value = u64> {
        prop_oneof![
            10 => 1u64..10,
            4 => 1u64..1_000_000,
            1 => (i64::MAX as u64 / 4)..=(i64::MAX as u64 / 2),
        ]
    }

    fn histogram() -> impl Strategy<Value = Histogram<u64>> {
        prop_oneof![
            1 => Just(Vec::new()),
            1 => (value(), count()).prop_map(|vc| vec![vc]),
            8 => prop::collection::vec((value(), count()), 0..800),
        ]
        .prop_map(|values| {
            let mut h = new_histogram();
            for (v, n) in values {
                h.record_n(v, n).unwrap();
            }
            h
        })
    }

    #[test]
    fn geometry_matches_hdrhistogram_for_every_counter() {
        let mut h = new_histogram();
        assert_eq!(h.distinct_values(), COUNTS_LEN);
        for i in 0..COUNTS_LEN {
            h.record(bucket_and_lowest(i).1).unwrap();
        }
        // One count per counter: each lowest value fell into its own counter.
        let seen: Vec<(u64, u64)> = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        assert_eq!(seen.len(), COUNTS_LEN);
        for (i, (v, n)) in seen.into_iter().enumerate() {
            assert_eq!((v, n), (highest_of_index(i), 1), "counter {i}");
            assert_eq!(lowest_equivalent(v), bucket_and_lowest(i).1);
            assert_eq!(lowest_equivalent(v), h.lowest_equivalent(v));
        }
        assert_eq!(highest_of_index(COUNTS_LEN - 1), u64::from(u32::MAX));
    }

    #[test]
    fn edge_histograms_decode_as_densely() {
        let mut cases = vec![new_histogram()];
        for (v, n) in [
            (1, 1),
            (HIGHEST_US, 1),
            (u64::from(u32::MAX), 7),
            (0, 3),
            (2047, 1),
            (2048, i64::MAX as u64),
        ] {
            let mut h = new_histogram();
            h.record_n(v, n).unwrap();
            cases.push(h);
        }
        // Totals that saturate.
        let mut h = new_histogram();
        for v in [10, 1_000, 100_000] {
            h.record_n(v, i64::MAX as u64).unwrap();
        }
        assert_eq!(h.len(), u64::MAX);
        cases.push(h);
        for h in &cases {
            for blob in [encode_v2(h).unwrap(), plain_v2(h).unwrap()] {
                let (dense, sparse) = assert_same(&blob).unwrap().unwrap();
                assert_eq!(&dense, h);
                assert_same_merge(None, &dense, &sparse).unwrap();
                assert_same_merge(Some(&cases[2]), &dense, &sparse).unwrap();
            }
        }
    }

    #[test]
    fn foreign_bounds_take_the_dense_path() {
        let mut fits = 0;
        for (low, high, sigfig) in [
            (1, 10_000_000, 3),
            (1, HIGHEST_US, 2),
            (1, HIGHEST_US, 4),
            (1, HIGHEST_US, 5),
            (1_000, HIGHEST_US, 3),
            (1, 4_000_000_000, 3),
            (1, 1 << 40, 3),
            (7, 1 << 20, 0),
        ] {
            let mut other = Histogram::<u64>::new_with_bounds(low, high, sigfig).unwrap();
            for v in [
                low,
                2 * low,
                999,
                1_000,
                2_047,
                2_049,
                123_457,
                9_999_999,
                high,
            ] {
                other.record_n(v.clamp(low, high), v % 5 + 1).unwrap();
            }
            for blob in [encode_v2(&other).unwrap(), plain_v2(&other).unwrap()] {
                // Values beyond 2^32 do not fit latmesh's bounds: both reject.
                if let Some((dense, sparse)) = assert_same(&blob).unwrap() {
                    fits += 1;
                    assert_eq!(dense.len(), other.len());
                    assert_same_merge(None, &dense, &sparse).unwrap();
                } else {
                    assert!(high > u64::from(u32::MAX), "{low} {high} {sigfig}");
                }
            }
        }
        assert_eq!(fits, 14);
    }

    #[test]
    fn strict_decoding_refuses_foreign_bounds_and_long_payloads_from_the_header() {
        // A foreign histogram (what cost the coordinator ~60 ms of CPU per blob): refused by
        // its header, plain and DEFLATE, with its bounds named.
        let mut other = Histogram::<u64>::new_with_bounds(1, 1 << 40, 5).unwrap();
        other.record_n(1_000, 3).unwrap();
        for blob in [encode_v2(&other).unwrap(), plain_v2(&other).unwrap()] {
            assert!(
                decode_v2_sparse(&blob).is_ok(),
                "the lax decoder converts it densely"
            );
            let e = decode_v2_sparse_strict(&blob).unwrap_err().to_string();
            assert!(
                e.contains("1..=1099511627776 µs with 5 significant digits"),
                "{e}"
            );
        }
        let mut fits = Histogram::<u64>::new_with_bounds(1, 10_000_000, 2).unwrap();
        fits.record(5_000).unwrap();
        let blob = encode_v2(&fits).unwrap();
        assert!(
            decode_v2_sparse(&blob).is_ok(),
            "the lax decoder converts it"
        );
        assert!(decode_v2_sparse_strict(&blob).is_err());
        // latmesh's own blobs decode exactly as with the lax decoder.
        let mut ours = hist::new_histogram();
        for v in [1, 999, 123_457, HIGHEST_US] {
            ours.record_n(v, 2).unwrap();
        }
        let blob = encode_v2(&ours).unwrap();
        assert_eq!(
            decode_v2_sparse_strict(&blob).unwrap(),
            decode_v2_sparse(&blob).unwrap()
        );
        // A declared payload longer than 23,552 counters can take: refused before reading.
        let long = v2_blob(MAX_PAYLOAD_BYTES + 1, 3, LOWEST_US, HIGHEST_US, &[]);
        let e = decode_v2_sparse_strict(&long).unwrap_err().to_string();
        assert!(e.contains("longer than 211968"), "{e}");
    }

    #[test]
    fn hostile_payloads_are_errors() {
        // A run of i64::MIN empty counters (the dense deserializer panics in debug builds).
        let min_run = varint(zigzag(i64::MIN));
        assert_eq!(min_run.len(), 9);
        assert!(decode_v2_sparse(&latmesh_blob(&min_run)).is_err());
        assert!(decode_v2_sparse(&deflate_wrap(&latmesh_blob(&min_run))).is_err());
        // A payload length far beyond the bytes present.
        let lying = v2_blob(u32::MAX, 3, LOWEST_US, HIGHEST_US, &[2, 2]);
        assert!(decode_v2_sparse(&lying).is_err());
        assert!(decode_v2_sparse(&deflate_wrap(&lying)).is_err());
        let foreign_lying = v2_blob(u32::MAX, 2, 1, 1000, &[2, 2]);
        assert!(decode_v2_sparse(&foreign_lying).is_err());
        // A count past the last counter; empty counters past it are fine (as densely).
        let mut past = varint(zigzag(-(COUNTS_LEN as i64)));
        past.extend(varint(zigzag(0)));
        past.extend(varint(zigzag(-5)));
        assert_same(&latmesh_blob(&past)).unwrap().unwrap();
        past.extend(varint(zigzag(1)));
        assert!(decode_v2_sparse(&latmesh_blob(&past)).is_err());
        assert!(assert_same(&latmesh_blob(&past)).unwrap().is_none());
        // Two huge runs whose sum overflows the index.
        let mut overflow = varint(zigzag(-i64::MAX));
        overflow.extend(varint(zigzag(-i64::MAX)));
        overflow.extend(varint(zigzag(-i64::MAX)));
        assert!(decode_v2_sparse(&latmesh_blob(&overflow)).is_err());
        // Wrong header fields, each.
        let mut h = new_histogram();
        h.record(1234).unwrap();
        let good = plain_v2(&h).unwrap();
        for (at, byte) in [(8, 1), (12, 1), (32, 0x40)] {
            let mut bad = good.clone();
            bad[at] ^= byte;
            assert!(decode_v2_sparse(&bad).is_err(), "byte {at}");
            assert!(decode_v2_sparse(&deflate_wrap(&bad)).is_err(), "byte {at}");
            assert_same(&bad).unwrap();
        }
        // Nested DEFLATE, unknown cookies, nothing.
        let nested = deflate_wrap(&encode_v2(&h).unwrap());
        assert!(decode_v2_sparse(&nested).is_err());
        for bad in [&b""[..], b"\x1c\x84", b"not a histogram", &[0u8; 64]] {
            assert!(decode_v2_sparse(bad).is_err());
        }
    }

    #[test]
    fn a_corrupt_stream_does_not_spoil_the_next_decode() {
        let mut h = new_histogram();
        for v in 1..5_000 {
            h.record(v * 97).unwrap();
        }
        let good = encode_v2(&h).unwrap();
        let want = decode_v2_sparse(&good).unwrap();
        for cut in [good.len() / 2, good.len() - 6, 20] {
            assert!(decode_v2_sparse(&good[..cut]).is_err());
            assert_eq!(decode_v2_sparse(&good).unwrap(), want);
        }
        let mut bad = good.clone();
        bad[9] ^= 0x55;
        assert!(decode_v2_sparse(&bad).is_err());
        assert_eq!(decode_v2_sparse(&good).unwrap(), want);
    }

    #[test]
    fn a_payload_longer_than_the_buffer_streams_through() {
        // Every counter non-empty with large counts: ~9 bytes each, ~200 KiB of payload.
        let mut h = new_histogram();
        for i in 0..COUNTS_LEN {
            h.record_n(bucket_and_lowest(i).1, (1 << 56) + i as u64)
                .unwrap();
        }
        let plain = plain_v2(&h).unwrap();
        assert!(plain.len() > 10 * INFLATE_CHUNK);
        for blob in [encode_v2(&h).unwrap(), plain] {
            let (_, s) = assert_same(&blob).unwrap().unwrap();
            assert_eq!(s.buckets(), COUNTS_LEN);
        }
    }

    proptest! {
        #[test]
        fn sparse_equals_dense(h in histogram(), base in histogram()) {
            for blob in [encode_v2(&h).ok(), plain_v2(&h)] {
                // Counts past i64::MAX in one bucket do not encode.
                let Some(blob) = blob else { continue };
                let (dense, sparse) = assert_same(&blob)?.expect("a valid blob");
                prop_assert_eq!(&dense, &h);
                assert_same_merge(None, &dense, &sparse)?;
                assert_same_merge(Some(&base), &dense, &sparse)?;
            }
        }

        #[test]
        fn random_bytes_are_rejected_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300),
                                             cookie in 0u8..3) {
            let mut blob = match cookie {
                0 => Vec::new(),
                1 => V2_COOKIE.to_be_bytes().to_vec(),
                _ => V2_DEFLATE_COOKIE.to_be_bytes().to_vec(),
            };
            blob.extend(bytes);
            assert_same(&blob)?;
        }

        #[test]
        fn hostile_payloads_match_the_dense_decoder(
            entries in prop::collection::vec(
                prop_oneof![
                    40 => (0i64..20).boxed(),
                    12 => (-3000i64..0).boxed(),
                    1 => any::<i64>().boxed(),
                ],
                0..60,
            ),
            min_run in prop::option::weighted(0.05, any::<prop::sample::Index>()),
            cut in prop_oneof![6 => Just(0usize), 1 => 1usize..12],
            extra_len in prop_oneof![6 => Just(0i64), 1 => -3i64..3],
            header in prop_oneof![
                6 => Just((3u32, LOWEST_US, HIGHEST_US)),
                2 => Just((2, 1, 1_000_000)),
                2 => (0u32..7, 0u64..2_000, 0u64..(1 << 36)),
            ],
            deflate in any::<bool>(),
        ) {
            let mut entries = entries;
            if let Some(at) = min_run {
                entries.insert(at.index(entries.len() + 1), i64::MIN);
            }
            let mut payload: Vec<u8> = entries.iter().flat_map(|&n| varint(zigzag(n))).collect();
            payload.truncate(payload.len().saturating_sub(cut));
            let len = (payload.len() as i64 + extra_len).max(0) as u32;
            let v2 = v2_blob(len, header.0, header.1, header.2, &payload);
            let blob = if deflate { deflate_wrap(&v2) } else { v2 };
            assert_same(&blob)?;
        }

        #[test]
        fn damaged_blobs_match_the_dense_decoder(
            h in histogram(),
            plain in any::<bool>(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..4),
            keep in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let Some(mut blob) = (if plain { plain_v2(&h) } else { encode_v2(&h).ok() }) else {
                return Ok(());
            };
            for (at, x) in flips {
                let i = at.index(blob.len());
                blob[i] ^= x;
            }
            if truncate {
                blob.truncate(keep.index(blob.len() + 1));
            }
            assert_same(&blob)?;
        }
    }
}
