//! Checksummed record framing: one encoder and one read/verify path for every on-disk record
//! format of latmesh.
//!
//! A record is, integers little-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | `magic.len()` | the format's magic bytes (e.g. `LMAGSP01` for an agent spool batch file, `0xB5 0x01` (magic, version) for a coordinator spool record) |
//! | 4 | `payload_len`: u32, bytes of payload after the header |
//! | 4 | CRC-32 (IEEE 802.3, as zlib and `crc32fast`) of the payload |
//! | `payload_len` | payload |
//!
//! A torn write (a record cut short by a crash) and flipped bits are detected: the first by
//! the length, the second by the checksum.

/// CRC-32 (IEEE 802.3, reflected; the zlib/`crc32fast` one) of `bytes`: the checksum of every
/// latmesh on-disk format.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Why bytes are not a valid record of a [`Framing`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a header (a write torn inside the header).
    #[error("{len} bytes: shorter than the header ({header_len} bytes)")]
    Short {
        /// Bytes available.
        len: usize,
        /// Bytes of a header.
        header_len: usize,
    },
    /// The record does not start with the format's magic bytes (not a record of this format,
    /// another version of it, or damage).
    #[error("bad magic {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// The bytes found where the magic belongs.
        found: Vec<u8>,
        /// The format's magic.
        expected: &'static [u8],
    },
    /// The header's payload length is outside the format's bounds (damage).
    #[error("implausible payload length {payload_len} (bounds {min}..={max})")]
    PayloadLength {
        /// The length in the header.
        payload_len: usize,
        /// The format's smallest payload.
        min: usize,
        /// The format's largest payload.
        max: usize,
    },
    /// The header's payload length does not match the bytes after the header (a torn write,
    /// or trailing garbage).
    #[error("payload length {payload_len}, but {available} bytes follow the header: torn write?")]
    Torn {
        /// The length in the header.
        payload_len: usize,
        /// Bytes after the header.
        available: usize,
    },
    /// The payload's CRC-32 is not the one in the header (flipped bits).
    #[error("checksum mismatch")]
    Checksum {
        /// The CRC-32 in the header.
        stored: u32,
        /// The CRC-32 of the payload read.
        computed: u32,
    },
}

/// A checked record header: what [`Framing::check_header`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of payload that follow the header.
    pub payload_len: usize,
    /// The payload's CRC-32 as written.
    pub crc: u32,
}

/// One record format: its magic bytes and the payload sizes it accepts when reading. See the
/// [module documentation](self) for the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    magic: &'static [u8],
    min_payload: usize,
    max_payload: usize,
}

impl Framing {
    /// A format with these magic bytes, accepting any payload length a u32 holds.
    pub const fn new(magic: &'static [u8]) -> Framing {
        Framing {
            magic,
            min_payload: 0,
            max_payload: u32::MAX as usize,
        }
    }

    /// The same format accepting only payloads of `min..=max` bytes when reading (a header
    /// outside them is [`FrameError::PayloadLength`]).
    pub const fn with_payload_bounds(self, min: usize, max: usize) -> Framing {
        Framing {
            min_payload: min,
            max_payload: max,
            ..self
        }
    }

    /// Bytes of a header: the magic, the length and the checksum.
    pub const fn header_len(&self) -> usize {
        self.magic.len() + 8
    }

    /// Starts a record at the end of `buf`: appends the magic and room for the length and the
    /// checksum. Append the payload, then call [`Framing::seal`] on the record.
    pub fn start(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(self.magic);
        buf.extend_from_slice(&[0; 8]);
    }

    /// Fills in the length and checksum of `record` (a header from [`Framing::start`]
    /// followed by the whole payload). Call it again after changing the payload.
    ///
    /// # Panics
    /// When `record` is shorter than a header or its payload is longer than `u32::MAX`.
    pub fn seal(&self, record: &mut [u8]) {
        let at = self.magic.len();
        let (header, payload) = record.split_at_mut(self.header_len());
        let len = u32::try_from(payload.len()).expect("a record payload fits in a u32");
        header[at..at + 4].copy_from_slice(&len.to_le_bytes());
        header[at + 4..at + 8].copy_from_slice(&checksum(payload).to_le_bytes());
    }

    /// A whole record holding `payload`.
    ///
    /// # Panics
    /// When `payload` is longer than `u32::MAX`.
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut record = Vec::with_capacity(self.header_len() + payload.len());
        self.start(&mut record);
        record.extend_from_slice(payload);
        self.seal(&mut record);
        record
    }

    /// Checks the header at the start of `bytes` (for a reader that reads the header first
    /// and then the payload: [`Framing::verify`] checks that).
    ///
    /// # Errors
    /// [`FrameError::Short`], [`FrameError::BadMagic`], [`FrameError::PayloadLength`].
    pub fn check_header(&self, bytes: &[u8]) -> Result<Header, FrameError> {
        let header = bytes.get(..self.header_len()).ok_or(FrameError::Short {
            len: bytes.len(),
            header_len: self.header_len(),
        })?;
        let (magic, rest) = header.split_at(self.magic.len());
        if magic != self.magic {
            return Err(FrameError::BadMagic {
                found: magic.to_vec(),
                expected: self.magic,
            });
        }
        let u32_at = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        let payload_len = u32_at(0) as usize;
        if payload_len < self.min_payload || payload_len > self.max_payload {
            return Err(FrameError::PayloadLength {
                payload_len,
                min: self.min_payload,
                max: self.max_payload,
            });
        }
        Ok(Header {
            payload_len,
            crc: u32_at(4),
        })
    }

    /// Checks that `payload` is the one `header` describes: its length and its checksum.
    ///
    /// # Errors
    /// [`FrameError::Torn`], [`FrameError::Checksum`].
    pub fn verify(&self, header: Header, payload: &[u8]) -> Result<(), FrameError> {
        if payload.len() != header.payload_len {
            return Err(FrameError::Torn {
                payload_len: header.payload_len,
                available: payload.len(),
            });
        }
        let computed = checksum(payload);
        if computed != header.crc {
            return Err(FrameError::Checksum {
                stored: header.crc,
                computed,
            });
        }
        Ok(())
    }

    /// Checks a whole record (exactly one: no bytes may follow it) and returns its payload.
    ///
    /// # Errors
    /// Any [`FrameError`].
    pub fn decode<'a>(&self, record: &'a [u8]) -> Result<&'a [u8], FrameError> {
        let header = self.check_header(record)?;
        let payload = &record[self.header_len()..];
        self.verify(header, payload)?;
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Framing = Framing::new(b"TEST").with_payload_bounds(2, 1000);

    #[test]
    fn the_checksum_is_the_standard_crc32() {
        assert_eq!(checksum(b"123456789"), 0xCBF4_3926);
        assert_eq!(checksum(b""), 0);
    }

    #[test]
    fn the_layout_is_magic_length_crc_payload() {
        let record = F.encode(b"hello");
        let mut expected = b"TEST".to_vec();
        expected.extend_from_slice(&5u32.to_le_bytes());
        expected.extend_from_slice(&checksum(b"hello").to_le_bytes());
        expected.extend_from_slice(b"hello");
        assert_eq!(record, expected);
        assert_eq!(F.decode(&record), Ok(&b"hello"[..]));
        // Built in place: the same bytes.
        let mut buf = Vec::new();
        F.start(&mut buf);
        buf.extend_from_slice(b"hello");
        F.seal(&mut buf);
        assert_eq!(buf, record);
    }

    #[test]
    fn a_torn_write_is_detected() {
        let record = F.encode(b"some payload");
        for cut in 0..record.len() {
            let err = F.decode(&record[..cut]).unwrap_err();
            if cut < F.header_len() {
                assert!(matches!(err, FrameError::Short { len, header_len: 12 } if len == cut));
            } else {
                assert_eq!(
                    err,
                    FrameError::Torn {
                        payload_len: 12,
                        available: cut - 12
                    }
                );
            }
        }
        let mut longer = record.clone();
        longer.push(0);
        assert!(matches!(F.decode(&longer), Err(FrameError::Torn { .. })));
    }

    #[test]
    fn a_flipped_bit_is_detected() {
        let record = F.encode(b"some payload");
        for byte in 0..record.len() {
            let mut bad = record.clone();
            bad[byte] ^= 0x04;
            let err = F.decode(&bad).unwrap_err();
            match byte {
                0..4 => assert!(matches!(err, FrameError::BadMagic { .. }), "{err}"),
                4..8 => assert!(
                    matches!(
                        err,
                        FrameError::Torn { .. } | FrameError::PayloadLength { .. }
                    ),
                    "{err}"
                ),
                _ => assert!(matches!(err, FrameError::Checksum { .. }), "{err}"),
            }
        }
    }

    #[test]
    fn payload_bounds_are_checked_from_the_header() {
        let err = F.decode(&F.encode(b"x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "implausible payload length 1 (bounds 2..=1000)"
        );
        let header = F.check_header(&F.encode(b"xy")).unwrap();
        assert_eq!(header.payload_len, 2);
        assert_eq!(
            F.check_header(b"NOPE\0\0\0\0\0\0\0\0"),
            Err(FrameError::BadMagic {
                found: b"NOPE".to_vec(),
                expected: b"TEST"
            })
        );
    }
}
