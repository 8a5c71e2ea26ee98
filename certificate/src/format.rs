//! The certificate file (format version 1; docs/certificates.md is the full description).
//!
//! A 64-byte header — magic `CRAMCERT`, format version, chunk size, the compressed body's
//! length, its length uncompressed, the number of facts, an xxh3-64 checksum of the header
//! and one of the chunk table — then the chunk table (an xxh3-64 checksum of each chunk of
//! the compressed body), then the body compressed with zstd. The body holds the position,
//! the claim, the size up to which regions are left to the checker, the root's hints and
//! the facts, sorted by shape, each with its value and hints. Every number is little-endian;
//! counts and hints in the body are LEB128 varints.

use crate::rules::Shape;
use std::ops::Range;

/// First bytes of every certificate.
pub const MAGIC: [u8; 8] = *b"CRAMCERT";
/// The format version written and read.
pub const VERSION: u32 = 1;
/// Bytes of the compressed body per checksummed chunk.
pub const CHUNK_BYTES: usize = 1 << 16;
/// The largest `small` a certificate may declare: the checker computes every region of up
/// to that many cells itself, by the mex rule.
pub const MAX_SMALL: u32 = 20;
/// The largest body, uncompressed, a reader accepts (a guard against a damaged length).
pub const MAX_RAW_BYTES: u64 = 1 << 36;
const HEADER: usize = 64;
const CHECKSUM_AT: usize = 40;
const TABLE_CHECKSUM_AT: usize = 48;

/// What a certificate proves about its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The position's nimber is this value (0: the player to move loses).
    Nimber(u8),
    /// The player to move wins (the nimber is not 0), without saying which it is.
    FirstPlayerWins,
}

/// One fact: region `shape` has nimber `value`. Its hints are
/// `Certificate::hints[hints]` (see [`crate::check`] for what they name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    /// The region, in canonical form.
    pub shape: Shape,
    /// Its nimber.
    pub value: u8,
    /// Where its hints are in [`Certificate::hints`].
    pub hints: Range<usize>,
}

/// A certificate, as written to and read from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    /// Rows of the position's box.
    pub rows: u32,
    /// Columns of the position's box.
    pub cols: u32,
    /// The position's empty cells, row-major (bit `r·cols + c`).
    pub empty: u128,
    /// What is proved.
    pub claim: Claim,
    /// Regions of at most this many cells have no facts: the checker computes their values.
    pub small: u32,
    /// Hints for the root (one when the claim is a first-player win settled by a move in a
    /// region that has no fact; else none).
    pub root_hints: Range<usize>,
    /// The facts, sorted by shape, at most one per shape.
    pub facts: Vec<Fact>,
    /// Every hint, the root's and the facts', each a move number (see [`Shape::moves`]).
    pub hints: Vec<u32>,
}

/// Why bytes are not a readable certificate. Each names where the reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The file does not start with [`MAGIC`].
    #[error("not a cram certificate (bytes 0-7 are not \"CRAMCERT\")")]
    Magic,
    /// Another format version.
    #[error("certificate format version {0} (this build reads version {VERSION})")]
    Version(u32),
    /// The file ends before what its header announces.
    #[error("truncated: {got} bytes, the header announces {expected}")]
    Truncated {
        /// Bytes announced.
        expected: u64,
        /// Bytes present.
        got: u64,
    },
    /// The header does not match its checksum.
    #[error("the header (bytes 0-63) fails its checksum: the file was altered or damaged there")]
    HeaderChecksum,
    /// The chunk table does not match its checksum.
    #[error("the chunk table (bytes 64-{end}) fails its checksum: the file was altered or damaged there")]
    TableChecksum {
        /// Last byte of the chunk table.
        end: u64,
    },
    /// A chunk of the body does not match its checksum.
    #[error("chunk {chunk} (bytes {from}-{to}) fails its checksum: the file was altered or damaged there")]
    ChunkChecksum {
        /// Chunk number, from 0.
        chunk: u64,
        /// First byte of the chunk in the file.
        from: u64,
        /// Last byte of the chunk in the file.
        to: u64,
    },
    /// The body does not decompress to the announced length.
    #[error("the body does not decompress: {0}")]
    Decompress(String),
    /// The decompressed body is not well formed.
    #[error("body byte {at}: {what}")]
    Body {
        /// Offset in the decompressed body.
        at: u64,
        /// What is wrong there.
        what: String,
    },
}

impl Certificate {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut body = Vec::new();
        put_varint(&mut body, self.rows as u128);
        put_varint(&mut body, self.cols as u128);
        body.extend_from_slice(&self.empty.to_le_bytes());
        match self.claim {
            Claim::Nimber(n) => body.extend_from_slice(&[0, n]),
            Claim::FirstPlayerWins => body.extend_from_slice(&[1, 0]),
        }
        body.push(self.small as u8);
        self.put_hints(&mut body, &self.root_hints);
        put_varint(&mut body, self.facts.len() as u128);
        for f in &self.facts {
            body.extend_from_slice(&[f.shape.h, f.shape.w]);
            put_varint(&mut body, f.shape.cells);
            body.push(f.value);
            self.put_hints(&mut body, &f.hints);
        }
        let packed = zstd::bulk::compress(&body, 9).expect("compressing to memory");
        let chunks: Vec<u64> = packed.chunks(CHUNK_BYTES).map(xxhash_rust::xxh3::xxh3_64).collect();
        let mut out = vec![0u8; HEADER];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&(CHUNK_BYTES as u32).to_le_bytes());
        out[16..24].copy_from_slice(&(packed.len() as u64).to_le_bytes());
        out[24..32].copy_from_slice(&(body.len() as u64).to_le_bytes());
        out[32..40].copy_from_slice(&(self.facts.len() as u64).to_le_bytes());
        let table: Vec<u8> = chunks.iter().flat_map(|c| c.to_le_bytes()).collect();
        out[TABLE_CHECKSUM_AT..TABLE_CHECKSUM_AT + 8]
            .copy_from_slice(&xxhash_rust::xxh3::xxh3_64(&table).to_le_bytes());
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(&table);
        out.extend_from_slice(&packed);
        out
    }

    fn put_hints(&self, body: &mut Vec<u8>, range: &Range<usize>) {
        put_varint(body, range.len() as u128);
        for &h in &self.hints[range.clone()] {
            put_varint(body, h as u128);
        }
    }

    /// Reads a certificate's bytes: header, checksums, decompression and the body's form
    /// (shapes canonical and connected, sorted without repeats, hints in range). Whether
    /// its facts are true is for [`crate::check`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Certificate, FormatError> {
        let len = bytes.len() as u64;
        if len < 8 || bytes[..8] != MAGIC {
            return Err(if len < 8 && MAGIC.starts_with(bytes) {
                FormatError::Truncated { expected: HEADER as u64, got: len }
            } else {
                FormatError::Magic
            });
        }
        if len < HEADER as u64 {
            return Err(FormatError::Truncated { expected: HEADER as u64, got: len });
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(FormatError::Version(version));
        }
        let mut header = bytes[..HEADER].to_vec();
        header[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
        if xxhash_rust::xxh3::xxh3_64(&header) != u64_at(CHECKSUM_AT) {
            return Err(FormatError::HeaderChecksum);
        }
        let chunk = u32_at(12) as u64;
        let (packed_len, raw_len) = (u64_at(16), u64_at(24));
        if chunk == 0 {
            return Err(FormatError::HeaderChecksum);
        }
        let table_end = HEADER as u64 + packed_len.div_ceil(chunk) * 8;
        let expected = table_end + packed_len;
        if len != expected {
            return Err(FormatError::Truncated { expected, got: len });
        }
        let table = &bytes[HEADER..table_end as usize];
        if xxhash_rust::xxh3::xxh3_64(table) != u64_at(TABLE_CHECKSUM_AT) {
            return Err(FormatError::TableChecksum { end: table_end - 1 });
        }
        let packed = &bytes[table_end as usize..];
        for (i, piece) in packed.chunks(chunk as usize).enumerate() {
            if xxhash_rust::xxh3::xxh3_64(piece) != u64_at(HEADER + 8 * i) {
                let from = table_end + i as u64 * chunk;
                return Err(FormatError::ChunkChecksum { chunk: i as u64, from, to: from + piece.len() as u64 - 1 });
            }
        }
        if raw_len > MAX_RAW_BYTES {
            return Err(FormatError::Decompress(format!("announced length {raw_len} is over {MAX_RAW_BYTES}")));
        }
        let body =
            zstd::bulk::decompress(packed, raw_len as usize).map_err(|e| FormatError::Decompress(e.to_string()))?;
        if body.len() as u64 != raw_len {
            return Err(FormatError::Decompress(format!("{} bytes, the header announces {raw_len}", body.len())));
        }
        let cert = Reader { body: &body, at: 0 }.certificate(u64_at(32))?;
        Ok(cert)
    }

    /// A short text form of the position: `RxC` when every cell is empty, else rows of `.`
    /// (empty) and `#` (filled) joined by `/`.
    pub fn position(&self) -> String {
        let n = self.rows * self.cols;
        let all = if n == 128 { u128::MAX } else { (1u128 << n) - 1 };
        if self.empty == all {
            return format!("{}x{}", self.rows, self.cols);
        }
        (0..self.rows)
            .map(|r| {
                (0..self.cols).map(|c| if self.empty >> (r * self.cols + c) & 1 == 1 { '.' } else { '#' }).collect()
            })
            .collect::<Vec<String>>()
            .join("/")
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a decompressed body, naming the offset of anything malformed.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn fail<T>(&self, at: usize, what: impl Into<String>) -> Result<T, FormatError> {
        Err(FormatError::Body { at: at as u64, what: what.into() })
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        match self.body.get(self.at) {
            Some(&b) => {
                self.at += 1;
                Ok(b)
            }
            None => self.fail(self.at, "the body ends here"),
        }
    }

    fn varint(&mut self, max: u128) -> Result<u128, FormatError> {
        let start = self.at;
        let mut v = 0u128;
        for shift in (0..).step_by(7) {
            let b = self.byte()?;
            if shift >= 128 || (shift == 126 && b & 0x7f > 3) {
                return self.fail(start, "a number longer than 128 bits");
            }
            v |= ((b & 0x7f) as u128) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        if v > max {
            return self.fail(start, format!("{v} is over {max}"));
        }
        Ok(v)
    }

    fn hints(&mut self, hints: &mut Vec<u32>, moves: Option<usize>) -> Result<Range<usize>, FormatError> {
        let n = self.varint(u32::MAX as u128)? as usize;
        let start = hints.len();
        for _ in 0..n {
            // A hint is a move number of some region of at most 128 cells: fewer than 224.
            hints.push(self.varint(moves.unwrap_or(224) as u128)? as u32);
        }
        Ok(start..hints.len())
    }

    fn certificate(mut self, announced_facts: u64) -> Result<Certificate, FormatError> {
        let rows = self.varint(128)? as u32;
        let at = self.at;
        let cols = self.varint(128)? as u32;
        if rows == 0 || cols == 0 || rows * cols > 128 {
            return self.fail(at, format!("a {rows}x{cols} box (1 to 128 cells)"));
        }
        let at = self.at;
        let mut empty = 0u128;
        for i in 0..16 {
            empty |= (self.byte()? as u128) << (8 * i);
        }
        if rows * cols < 128 && empty >> (rows * cols) != 0 {
            return self.fail(at, "empty cells outside the box");
        }
        let at = self.at;
        let claim = match (self.byte()?, self.byte()?) {
            (0, n) if n <= 64 => Claim::Nimber(n),
            (1, 0) => Claim::FirstPlayerWins,
            (k, n) => return self.fail(at, format!("claim kind {k} with value {n}")),
        };
        let at = self.at;
        let small = self.byte()? as u32;
        if small > MAX_SMALL {
            return self.fail(at, format!("regions of up to {small} cells left to the checker (at most {MAX_SMALL})"));
        }
        let mut hints = Vec::new();
        let root_hints = self.hints(&mut hints, None)?;
        let at = self.at;
        let n = self.varint(u64::MAX as u128)? as u64;
        if n != announced_facts {
            return self.fail(at, format!("{n} facts, the header announces {announced_facts}"));
        }
        let mut facts: Vec<Fact> = Vec::with_capacity(n.min(1 << 24) as usize);
        for i in 0..n {
            let at = self.at;
            let (h, w) = (self.byte()?, self.byte()?);
            let cells = self.varint(u128::MAX)?;
            let shape = Shape { h, w, cells };
            if !shape.is_canonical_region() {
                return self
                    .fail(at, format!("fact {i}: {} is not a connected region in canonical form", shape.name()));
            }
            if let Some(last) = facts.last() {
                if last.shape >= shape {
                    return self.fail(at, format!("fact {i}: {} is out of order or repeated", shape.name()));
                }
            }
            let at = self.at;
            let value = self.byte()?;
            if value as u32 > shape.size() / 2 {
                return self.fail(at, format!("fact {i}: {} cannot have value {value}", shape.name()));
            }
            let hints = self.hints(&mut hints, None)?;
            facts.push(Fact { shape, value, hints });
        }
        if self.at != self.body.len() {
            return self.fail(self.at, "bytes after the last fact");
        }
        Ok(Certificate { rows, cols, empty, claim, small, root_hints, facts, hints })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Certificate {
        // 1×7 before 2×3: facts are in shape order, their hints in the same order.
        let a = Shape::of(1, 7, 0x7f);
        let b = Shape::of(2, 3, 0b111_111);
        let facts = vec![Fact { shape: a, value: 1, hints: 0..0 }, Fact { shape: b, value: 1, hints: 0..2 }];
        Certificate {
            rows: 3,
            cols: 4,
            empty: 0xfff,
            claim: Claim::Nimber(1),
            small: 4,
            root_hints: 0..0,
            facts,
            hints: vec![3, 0],
        }
    }

    #[test]
    fn a_certificate_reads_back() {
        let c = sample();
        let bytes = c.to_bytes();
        assert_eq!(Certificate::from_bytes(&bytes), Ok(c.clone()));
        assert_eq!(c.position(), "3x4");
    }

    #[test]
    fn damage_is_named() {
        let bytes = sample().to_bytes();
        assert_eq!(Certificate::from_bytes(b"CRAM"), Err(FormatError::Truncated { expected: 64, got: 4 }));
        assert_eq!(Certificate::from_bytes(b"not a certificate at all"), Err(FormatError::Magic));
        let cut = &bytes[..bytes.len() - 1];
        assert!(matches!(Certificate::from_bytes(cut), Err(FormatError::Truncated { .. })));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(Certificate::from_bytes(&flipped), Err(FormatError::ChunkChecksum { chunk: 0, .. })));
        let mut header = bytes.clone();
        header[20] ^= 1;
        assert_eq!(Certificate::from_bytes(&header), Err(FormatError::HeaderChecksum));
        let mut table = bytes.clone();
        table[64] ^= 1;
        assert!(matches!(Certificate::from_bytes(&table), Err(FormatError::TableChecksum { .. })));
        let mut version = bytes;
        version[8] = 9;
        assert_eq!(Certificate::from_bytes(&version), Err(FormatError::Version(9)));
    }
}
