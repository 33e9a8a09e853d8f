//! Compressed response bodies: the encodings a probe asks for (`accept-encoding`) and the
//! incremental decoder of a body sent in one of them (docs/metrics.md, "Compressed bodies").
//!
//! A probe sends `accept-encoding: gzip, deflate`, as the OpenAI Python SDK does by default
//! (httpx adds `br` and `zstd` only when the optional `brotli`/`zstandard` packages are
//! installed, which the SDK does not require), so a provider sees what most of its clients
//! send, and latmesh decodes what it asked for: `gzip` (also `x-gzip`), `deflate` (zlib
//! wrapped, or raw deflate as some servers send it, as httpx accepts) and `identity`.
//! Any other `content-encoding` (`br`, `zstd`, a list of several) is a `protocol_error`
//! naming it: an SDK user's client would not read it either.
//!
//! Decoding is incremental: each read's compressed bytes are decoded at once and handed on
//! in pieces of at most [`MAX_PIECE`] bytes with that read's instant, so timing is the same
//! as for an uncompressed body (a provider that buffers its compressor's output delays the
//! tokens, which is measured as it is), and a body that expands without bound (a zip bomb)
//! is cut by the caps on decoded bytes before it is held in memory.

use flate2::write::{DeflateDecoder, MultiGzDecoder, ZlibDecoder};

use super::measure::flow::Flow;

/// The `accept-encoding` of every request.
pub const ACCEPT_ENCODING: &str = "gzip, deflate";

/// Largest decoded piece handed on at once (the decoders' own output buffer is 32 KiB).
pub const MAX_PIECE: usize = 64 * 1024;

/// How much compressed input is decoded per step: each step's output stays within a few
/// times [`MAX_PIECE`] whatever the compression ratio.
const INPUT_STEP: usize = 4096;

/// An incremental decoder of one response body's `content-encoding`.
pub struct BodyDecoder {
    /// The encoding's name as the header gave it (lower case), for messages.
    name: &'static str,
    inner: Inner,
    /// Compressed bytes decoded so far (the offset of a corruption).
    fed: u64,
}

impl std::fmt::Debug for BodyDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyDecoder")
            .field("encoding", &self.name)
            .field("fed", &self.fed)
            .finish_non_exhaustive()
    }
}

enum Inner {
    Gzip(MultiGzDecoder<Vec<u8>>),
    /// `deflate` before its first two bytes told zlib from raw deflate.
    DeflateSniff(Vec<u8>),
    Zlib(ZlibDecoder<Vec<u8>>),
    RawDeflate(DeflateDecoder<Vec<u8>>),
}

impl BodyDecoder {
    /// The decoder for a response's `content-encoding` header (`None`: absent): `Ok(None)`
    /// for an uncompressed body (absent, empty or `identity`).
    ///
    /// # Errors
    /// An encoding latmesh does not decode; the message names it ("response body in
    /// content-encoding br that latmesh does not decode (it asks for gzip, deflate)").
    pub fn for_header(value: Option<&[u8]>) -> Result<Option<BodyDecoder>, String> {
        let Some(raw) = value else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(raw).to_ascii_lowercase();
        let codings: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty() && *c != "identity")
            .collect();
        let (name, inner) = match codings.as_slice() {
            [] => return Ok(None),
            ["gzip" | "x-gzip"] => ("gzip", Inner::Gzip(MultiGzDecoder::new(Vec::new()))),
            ["deflate"] => ("deflate", Inner::DeflateSniff(Vec::new())),
            _ => {
                let shown: String = text.trim().chars().take(64).collect();
                return Err(format!(
                    "response body in content-encoding {shown:?} that latmesh does not decode \
                     (it asks for {ACCEPT_ENCODING})"
                ));
            }
        };
        Ok(Some(BodyDecoder {
            name,
            inner,
            fed: 0,
        }))
    }

    /// The encoding's name (`gzip`, `deflate`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Decodes `input` (the next compressed bytes), handing each decoded piece (at most
    /// [`MAX_PIECE`] bytes, never empty) to `sink` until it answers `Flow::Stop`.
    ///
    /// # Errors
    /// The compressed stream is corrupt: "gzip stream corrupt at byte N: …", N the offset
    /// (from the body's first byte) of the compressed bytes whose decoding found it: the
    /// fault is there or within the next read (at most 4 KiB); a gzip header is checked
    /// once it is whole, so a fault in it is found at the read that completes it.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut sink: impl FnMut(&[u8]) -> Flow,
    ) -> Result<Flow, String> {
        let mut input = input;
        if let Inner::DeflateSniff(held) = &mut self.inner {
            held.extend_from_slice(input);
            if held.len() < 2 {
                return Ok(Flow::Continue);
            }
            // RFC 1950: CM 8 in the low nibble of the first byte, the header a multiple of 31.
            let zlib = held[0] & 0x0f == 8 && u16::from_be_bytes([held[0], held[1]]) % 31 == 0;
            let held = std::mem::take(held);
            self.inner = if zlib {
                Inner::Zlib(ZlibDecoder::new(Vec::new()))
            } else {
                Inner::RawDeflate(DeflateDecoder::new(Vec::new()))
            };
            self.fed = 0;
            return self.feed(&held, sink);
        }
        while !input.is_empty() {
            let step = &input[..input.len().min(INPUT_STEP)];
            let used = self
                .write(step)
                .map_err(|e| format!("{} stream corrupt at byte {}: {e}", self.name, self.fed))?;
            if used == 0 {
                return Err(format!(
                    "{} stream corrupt at byte {}: data after the end of the compressed stream",
                    self.name, self.fed
                ));
            }
            self.fed += used as u64;
            input = &input[used..];
            if self.emit(&mut sink) == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// The body ended cleanly: checks the end of the compressed stream (the gzip trailer's
    /// checksum and length; zlib's checksum is checked as it arrives).
    ///
    /// # Errors
    /// The trailer does not match what was decoded, or the stream was cut short before it:
    /// "gzip stream corrupt at its end (byte N): …".
    pub fn finish(&mut self) -> Result<(), String> {
        let done = match &mut self.inner {
            Inner::Gzip(d) => d.try_finish(),
            Inner::Zlib(_) | Inner::RawDeflate(_) | Inner::DeflateSniff(_) => Ok(()),
        };
        done.map_err(|e| {
            format!(
                "{} stream corrupt at its end (byte {}): {e}",
                self.name, self.fed
            )
        })
    }

    /// Writes compressed bytes and flushes what they decode to into the output buffer.
    fn write(&mut self, step: &[u8]) -> std::io::Result<usize> {
        fn go<W: std::io::Write>(w: &mut W, step: &[u8]) -> std::io::Result<usize> {
            let n = w.write(step)?;
            w.flush()?;
            Ok(n)
        }
        match &mut self.inner {
            Inner::Gzip(d) => go(d, step),
            Inner::Zlib(d) => go(d, step),
            Inner::RawDeflate(d) => go(d, step),
            Inner::DeflateSniff(_) => Ok(0),
        }
    }

    /// Hands the decoded output on in pieces and empties it.
    fn emit(&mut self, sink: &mut impl FnMut(&[u8]) -> Flow) -> Flow {
        let out = match &mut self.inner {
            Inner::Gzip(d) => d.get_mut(),
            Inner::Zlib(d) => d.get_mut(),
            Inner::RawDeflate(d) => d.get_mut(),
            Inner::DeflateSniff(_) => return Flow::Continue,
        };
        let mut flow = Flow::Continue;
        for piece in out.chunks(MAX_PIECE) {
            if sink(piece) == Flow::Stop {
                flow = Flow::Stop;
                break;
            }
        }
        out.clear();
        flow
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};

    /// `body` compressed as `encoding` (`gzip`, `deflate` as zlib, `raw-deflate`), with a
    /// sync flush after each of `cuts` (so each piece can be decoded as it arrives, as a
    /// provider that flushes per event sends it).
    pub(crate) fn compress(encoding: &str, body: &[u8], cuts: &[usize]) -> Vec<u8> {
        fn run<W: std::io::Write>(mut w: W, body: &[u8], cuts: &[usize]) -> W {
            let mut at = 0;
            for &c in cuts.iter().chain(std::iter::once(&body.len())) {
                w.write_all(&body[at..c]).unwrap();
                w.flush().unwrap();
                at = c;
            }
            w
        }
        let level = Compression::default();
        match encoding {
            "gzip" => run(GzEncoder::new(Vec::new(), level), body, cuts)
                .finish()
                .unwrap(),
            "deflate" => run(ZlibEncoder::new(Vec::new(), level), body, cuts)
                .finish()
                .unwrap(),
            "raw-deflate" => run(DeflateEncoder::new(Vec::new(), level), body, cuts)
                .finish()
                .unwrap(),
            other => panic!("no encoder for {other}"),
        }
    }

    fn decode_all(header: &str, wire: &[u8], read: usize) -> Result<Vec<u8>, String> {
        let mut d = BodyDecoder::for_header(Some(header.as_bytes()))?.unwrap();
        let mut out = Vec::new();
        for r in wire.chunks(read) {
            d.feed(r, |p| {
                assert!(!p.is_empty() && p.len() <= MAX_PIECE);
                out.extend_from_slice(p);
                Flow::Continue
            })?;
        }
        Ok(out)
    }

    #[test]
    fn every_accepted_encoding_decodes_at_any_read_size() {
        let body = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"
            .repeat(50);
        for (header, enc) in [
            ("gzip", "gzip"),
            ("x-gzip", "gzip"),
            ("GZIP, identity", "gzip"),
            ("deflate", "deflate"),
            ("deflate", "raw-deflate"),
        ] {
            let wire = compress(enc, &body, &[10, 500]);
            for read in [1, 2, 7, 300, wire.len()] {
                assert_eq!(
                    decode_all(header, &wire, read).unwrap(),
                    body,
                    "{header} {enc} {read}"
                );
            }
        }
        // Two gzip members one after the other (concatenated files) are one body.
        let mut two = compress("gzip", b"ab", &[]);
        two.extend(compress("gzip", b"cd", &[]));
        assert_eq!(decode_all("gzip", &two, 3).unwrap(), b"abcd");
    }

    #[test]
    fn identity_and_unknown_encodings() {
        for h in [None, Some(&b""[..]), Some(b"identity"), Some(b" Identity ")] {
            assert!(BodyDecoder::for_header(h).unwrap().is_none(), "{h:?}");
        }
        for (h, shown) in [
            ("br", "\"br\""),
            ("zstd", "\"zstd\""),
            ("gzip, br", "\"gzip, br\""),
        ] {
            let e = BodyDecoder::for_header(Some(h.as_bytes())).unwrap_err();
            assert_eq!(
                e,
                format!(
                    "response body in content-encoding {shown} that latmesh does not decode \
                     (it asks for gzip, deflate)"
                )
            );
        }
    }

    #[test]
    fn a_corrupt_stream_is_named_with_its_offset() {
        let body = b"data: {\"choices\":[]}\n\n".repeat(20);
        let mut wire = compress("gzip", &body, &[]);
        // The header's magic broken: found in the step that holds byte 0, or (a header
        // read in pieces is checked once whole) in the one that completes the header.
        let mut bad = wire.clone();
        bad[0] = b'x';
        let e = decode_all("gzip", &bad, 100).unwrap_err();
        assert_eq!(e, "gzip stream corrupt at byte 0: invalid gzip header");
        let e = decode_all("gzip", &bad, 5).unwrap_err();
        assert_eq!(e, "gzip stream corrupt at byte 5: invalid gzip header");
        // The CRC trailer broken, or missing: found at the end.
        let n = wire.len();
        let mut d = BodyDecoder::for_header(Some(b"gzip")).unwrap().unwrap();
        d.feed(&wire[..n - 3], |_| Flow::Continue).unwrap();
        let e = d.finish().unwrap_err();
        assert!(
            e.starts_with(&format!(
                "gzip stream corrupt at its end (byte {}): ",
                n - 3
            )),
            "{e}"
        );
        wire[n - 6] ^= 0xff;
        let mut d = BodyDecoder::for_header(Some(b"gzip")).unwrap().unwrap();
        d.feed(&wire, |_| Flow::Continue).unwrap();
        let e = d.finish().unwrap_err();
        assert!(
            e.starts_with(&format!("gzip stream corrupt at its end (byte {n}): ")),
            "{e}"
        );
        wire[n - 6] ^= 0xff;
        let mut d = BodyDecoder::for_header(Some(b"gzip")).unwrap().unwrap();
        d.feed(&wire, |_| Flow::Continue).unwrap();
        assert_eq!(d.finish(), Ok(()));
        // Plain text labelled gzip.
        let e = decode_all("gzip", b"data: [DONE]\n\n", 100).unwrap_err();
        assert!(e.starts_with("gzip stream corrupt at byte 0"), "{e}");
    }

    #[test]
    fn a_zip_bomb_is_handed_on_in_bounded_pieces_and_stops_when_told() {
        let body = vec![b' '; 64 << 20];
        let wire = compress("gzip", &body, &[]);
        assert!(wire.len() < 200 << 10, "{}", wire.len());
        let mut d = BodyDecoder::for_header(Some(b"gzip")).unwrap().unwrap();
        let mut seen = 0usize;
        let flow = d
            .feed(&wire, |p| {
                seen += p.len();
                if seen > 1 << 20 {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            })
            .unwrap();
        assert_eq!(flow, Flow::Stop);
        // Stopped within a step's output of the limit, not after 64 MiB.
        assert!(seen <= (1 << 20) + 4 * MAX_PIECE, "{seen}");
    }
}
