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
use crate::varint;
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
/// The most a body may grow when decompressed, per byte of compressed body: a reader refuses
/// a header that announces more than [`max_raw_len`] of the compressed length, and stops
/// decompressing there. A body is varints and shapes, each fact a different shape, so it
/// compresses little: certificates decompress to about 1.6 times their compressed length
/// (4x7, 5x8; proof exports 1.3 to 1.6 times), where zstd alone allows some 32,000 (a run of
/// zeros, 4 bytes a block of 128 KiB). 256 leaves a margin of two orders of magnitude over
/// what the prover writes, and keeps what a forged file can make a reader hold within 256
/// times its size.
pub const MAX_RATIO: u64 = 256;
/// Slack over [`MAX_RATIO`] for small bodies (a body of a few facts is mostly the 16 bytes
/// of the position and small numbers, compressed with a frame header of its own).
pub const RATIO_SLACK: u64 = 1 << 20;
/// The fewest bytes one fact takes in a body: its height and width, at least one byte of
/// cells, its value and at least one byte for its count of hints.
pub const MIN_FACT_BYTES: u64 = 5;
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
    /// The header matches its checksum but announces what the file cannot hold (a forged
    /// or miswritten file): the field named and why.
    #[error("the header {0}")]
    Header(String),
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
        varint::put(&mut body, self.rows as u128);
        varint::put(&mut body, self.cols as u128);
        body.extend_from_slice(&self.empty.to_le_bytes());
        match self.claim {
            Claim::Nimber(n) => body.extend_from_slice(&[0, n]),
            Claim::FirstPlayerWins => body.extend_from_slice(&[1, 0]),
        }
        body.push(self.small as u8);
        self.put_hints(&mut body, &self.root_hints);
        varint::put(&mut body, self.facts.len() as u128);
        for f in &self.facts {
            body.extend_from_slice(&[f.shape.h, f.shape.w]);
            varint::put(&mut body, f.shape.cells);
            body.push(f.value);
            self.put_hints(&mut body, &f.hints);
        }
        let packed = zstd::bulk::compress(&body, 9).expect("compressing to memory");
        wrap(&packed, body.len() as u64, self.facts.len() as u64)
    }

    fn put_hints(&self, body: &mut Vec<u8>, range: &Range<usize>) {
        varint::put(body, range.len() as u128);
        for &h in &self.hints[range.clone()] {
            varint::put(body, h as u128);
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
        let (packed_len, raw_len, facts) = (u64_at(16), u64_at(24), u64_at(32));
        if chunk == 0 {
            return Err(FormatError::Header("announces chunks of 0 bytes (bytes 12-15)".into()));
        }
        // Every length from the header is checked against the file's own before it is used:
        // the chunk table and the compressed body must be the rest of the file, exactly (a
        // sum that overflows is no length at all).
        let overflow = || {
            FormatError::Header(format!(
                "announces a compressed body of {packed_len} bytes (bytes 16-23) in chunks of {chunk} bytes \
                 (bytes 12-15): with its chunk table that is more than any file holds"
            ))
        };
        let table_end = packed_len
            .div_ceil(chunk)
            .checked_mul(8)
            .and_then(|t| t.checked_add(HEADER as u64))
            .ok_or_else(overflow)?;
        let expected = table_end.checked_add(packed_len).ok_or_else(overflow)?;
        if len != expected {
            return Err(FormatError::Truncated { expected, got: len });
        }
        // From here on, `table_end <= len` and `packed_len == len - table_end`.
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
        let most = max_raw_len(packed_len).min(MAX_RAW_BYTES);
        if raw_len > most {
            return Err(FormatError::Header(format!(
                "announces a body of {raw_len} bytes uncompressed (bytes 24-31), more than a reader accepts from \
                 {packed_len} compressed bytes ({most}: {MAX_RATIO} times as many, plus {RATIO_SLACK}, at most \
                 {MAX_RAW_BYTES})"
            )));
        }
        if facts > raw_len / MIN_FACT_BYTES {
            return Err(FormatError::Header(format!(
                "announces {facts} facts (bytes 32-39), more than a body of {raw_len} bytes holds (each takes at \
                 least {MIN_FACT_BYTES})"
            )));
        }
        let body = decompress_bounded(packed, raw_len).map_err(FormatError::Decompress)?;
        if body.len() as u64 != raw_len {
            return Err(FormatError::Decompress(format!("{} bytes, the header announces {raw_len}", body.len())));
        }
        let cert = Reader(varint::Reader::new(&body)).certificate(facts)?;
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

/// A certificate file around a body already compressed (`packed`): the header announcing
/// `raw_len` bytes uncompressed and `facts` facts, with both checksums right, the chunk
/// table, the body. What [`Certificate::to_bytes`] writes; tests and fuzzing build files
/// with it whose header and body say what they choose.
pub fn wrap(packed: &[u8], raw_len: u64, facts: u64) -> Vec<u8> {
    let chunks: Vec<u64> = packed.chunks(CHUNK_BYTES).map(xxhash_rust::xxh3::xxh3_64).collect();
    let mut out = vec![0u8; HEADER];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(CHUNK_BYTES as u32).to_le_bytes());
    out[16..24].copy_from_slice(&(packed.len() as u64).to_le_bytes());
    out[24..32].copy_from_slice(&raw_len.to_le_bytes());
    out[32..40].copy_from_slice(&facts.to_le_bytes());
    let table: Vec<u8> = chunks.iter().flat_map(|c| c.to_le_bytes()).collect();
    out[TABLE_CHECKSUM_AT..TABLE_CHECKSUM_AT + 8].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(&table).to_le_bytes());
    reseal(&mut out);
    out.extend_from_slice(&table);
    out.extend_from_slice(packed);
    out
}

/// Sets the header's checksum (bytes 40-47) of the file `bytes` to match its other header
/// bytes: after a header field is rewritten, a reader gets past the checksum to the field.
/// Bytes shorter than a header are left as they are.
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < HEADER {
        return;
    }
    bytes[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
    let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..HEADER]);
    bytes[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
}

/// The largest length a reader accepts for a body compressed to `packed` bytes:
/// [`MAX_RATIO`] times as many, plus [`RATIO_SLACK`].
pub fn max_raw_len(packed: u64) -> u64 {
    packed.saturating_mul(MAX_RATIO).saturating_add(RATIO_SLACK)
}

/// Decompresses the zstd data `packed` (one or more frames) with the streaming decoder,
/// into a buffer that grows as data arrives; refuses, without reading further, data that
/// decompresses to more than `limit` bytes (what a compressed length and [`max_raw_len`]
/// allow, for a certificate or a proof export), or that does not decompress. Memory is the
/// output, at most `limit` bytes (the buffer grows by doubling up to `limit`, no further),
/// and zstd's window, which this limits to `limit` rounded up to a power of two (at least
/// 8 MiB, what any standard compression level up to 19 uses; the writers here compress in
/// one piece, with a window no larger than their data).
pub fn decompress_bounded(packed: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    /// First size of the buffer.
    const STEP: usize = 1 << 16;
    let mut decoder = zstd::stream::read::Decoder::with_buffer(packed).map_err(|e| e.to_string())?;
    let window_log = (u64::BITS - limit.saturating_sub(1).leading_zeros()).clamp(23, 31);
    decoder.window_log_max(window_log).map_err(|e| e.to_string())?;
    // `out[..filled]` is decompressed data, the rest zeros to be written over.
    let (mut out, mut filled) = (Vec::<u8>::new(), 0usize);
    // One byte over the limit shows that it is passed.
    let room = limit.saturating_add(1).min(usize::MAX as u64) as usize;
    loop {
        if filled as u64 > limit {
            return Err(format!("it decompresses to more than {limit} bytes"));
        }
        if filled == out.len() {
            // Doubling, never past `room`.
            let grow = out.len().max(STEP).min(room - out.len());
            out.reserve_exact(grow);
            out.resize(out.len() + grow, 0);
        }
        match decoder.read(&mut out[filled..]) {
            Ok(0) => {
                out.truncate(filled);
                return Ok(out);
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Reads a decompressed body, naming the offset of anything malformed.
struct Reader<'a>(varint::Reader<'a>);

impl Reader<'_> {
    fn fail<T>(&self, at: usize, what: impl Into<String>) -> Result<T, FormatError> {
        Err(FormatError::Body { at: at as u64, what: what.into() })
    }

    fn byte(&mut self) -> Result<u8, FormatError> {
        self.0.byte().map_err(body_error)
    }

    fn varint(&mut self, max: u128) -> Result<u128, FormatError> {
        self.0.varint(max).map_err(body_error)
    }

    fn at(&self) -> usize {
        self.0.at()
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
        let at = self.at();
        let cols = self.varint(128)? as u32;
        if rows == 0 || cols == 0 || rows * cols > 128 {
            return self.fail(at, format!("a {rows}x{cols} box (1 to 128 cells)"));
        }
        let at = self.at();
        let mut empty = 0u128;
        for i in 0..16 {
            empty |= (self.byte()? as u128) << (8 * i);
        }
        if rows * cols < 128 && empty >> (rows * cols) != 0 {
            return self.fail(at, "empty cells outside the box");
        }
        let at = self.at();
        let claim = match (self.byte()?, self.byte()?) {
            (0, n) if n <= 64 => Claim::Nimber(n),
            (1, 0) => Claim::FirstPlayerWins,
            (k, n) => return self.fail(at, format!("claim kind {k} with value {n}")),
        };
        let at = self.at();
        let small = self.byte()? as u32;
        if small > MAX_SMALL {
            return self.fail(at, format!("regions of up to {small} cells left to the checker (at most {MAX_SMALL})"));
        }
        let mut hints = Vec::new();
        let root_hints = self.hints(&mut hints, None)?;
        let at = self.at();
        let n = self.varint(u64::MAX as u128)? as u64;
        if n != announced_facts {
            return self.fail(at, format!("{n} facts, the header announces {announced_facts}"));
        }
        // No more room than the rest of the body could fill: the count is checked against it.
        let room = (self.0.left() as u64 / MIN_FACT_BYTES).min(1 << 20);
        let mut facts: Vec<Fact> = Vec::with_capacity(n.min(room) as usize);
        for i in 0..n {
            let at = self.at();
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
            let at = self.at();
            let value = self.byte()?;
            if value as u32 > shape.size() / 2 {
                return self.fail(at, format!("fact {i}: {} cannot have value {value}", shape.name()));
            }
            let hints = self.hints(&mut hints, None)?;
            facts.push(Fact { shape, value, hints });
        }
        if !self.0.is_done() {
            return self.fail(self.at(), "bytes after the last fact");
        }
        Ok(Certificate { rows, cols, empty, claim, small, root_hints, facts, hints })
    }
}

fn body_error(e: varint::ReadError) -> FormatError {
    FormatError::Body { at: e.at as u64, what: e.what }
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

    /// `bytes` with the header's u64 at `at` set to `v`, the header's checksum made right.
    fn with_field(bytes: &[u8], at: usize, v: u64) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        reseal(&mut b);
        b
    }

    /// A zstd frame of `blocks` blocks of 128 KiB of zeros, 4 bytes each (an RLE block):
    /// 2 GiB in 64 KiB with 16,384 blocks. No content size is declared.
    pub(crate) fn zeros_frame(blocks: usize) -> Vec<u8> {
        // Magic; frame header: no content size, no single segment, a window of 2^17 bytes.
        let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3];
        for i in 0..blocks {
            let header = (i + 1 == blocks) as u32 | 1 << 1 | (128 << 10) << 3;
            f.extend_from_slice(&header.to_le_bytes()[..3]);
            f.push(0);
        }
        f
    }

    #[test]
    fn forged_headers_are_refused_without_overflow_or_allocation() {
        let bytes = sample().to_bytes();
        // A compressed length near u64::MAX: its chunk table's length overflows.
        for packed in [u64::MAX, u64::MAX - 5, u64::MAX / 8, 1 << 62] {
            let r = Certificate::from_bytes(&with_field(&bytes, 16, packed));
            assert!(
                matches!(&r, Err(FormatError::Header(m)) if m.contains("more than any file holds"))
                    || matches!(r, Err(FormatError::Truncated { .. })),
                "{packed}: {r:?}"
            );
        }
        let mut tiny_chunks = with_field(&bytes, 16, u64::MAX);
        tiny_chunks[12..16].copy_from_slice(&1u32.to_le_bytes());
        reseal(&mut tiny_chunks);
        assert!(matches!(Certificate::from_bytes(&tiny_chunks), Err(FormatError::Header(_))));
        let mut no_chunks = bytes.clone();
        no_chunks[12..16].fill(0);
        reseal(&mut no_chunks);
        assert!(
            matches!(Certificate::from_bytes(&no_chunks), Err(FormatError::Header(m)) if m.contains("chunks of 0"))
        );
        // A body announced at 2^36 bytes, or over 256 times its compressed length.
        for raw in [MAX_RAW_BYTES, max_raw_len(bytes.len() as u64), u64::MAX] {
            let r = Certificate::from_bytes(&with_field(&bytes, 24, raw));
            assert!(matches!(&r, Err(FormatError::Header(m)) if m.contains("uncompressed")), "{raw}: {r:?}");
        }
        // More facts than the body could hold.
        for facts in [u64::MAX, 1 << 40, 1000] {
            let r = Certificate::from_bytes(&with_field(&bytes, 32, facts));
            assert!(matches!(&r, Err(FormatError::Header(m)) if m.contains("facts")), "{facts}: {r:?}");
        }
        // A count in the body that disagrees with the header is named at its byte.
        let r = Certificate::from_bytes(&with_field(&bytes, 32, 1));
        assert!(matches!(&r, Err(FormatError::Body { what, .. }) if what.contains("announces 1")), "{r:?}");
    }

    #[test]
    fn a_body_that_decompresses_too_far_is_refused_early() {
        // 2 GiB of zeros in 64 KiB, announced as the most 64 KiB may hold.
        let bomb = zeros_frame(16384);
        let most = max_raw_len(bomb.len() as u64);
        let file = wrap(&bomb, most, 0);
        let start = std::time::Instant::now();
        let r = Certificate::from_bytes(&file);
        assert!(
            matches!(&r, Err(FormatError::Decompress(m)) if m.contains(&format!("more than {most} bytes"))),
            "{r:?}"
        );
        assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
        // Announced as 2 GiB: refused before decompressing.
        assert!(matches!(Certificate::from_bytes(&wrap(&bomb, 2 << 30, 0)), Err(FormatError::Header(_))));
        // Announced shorter than it is.
        let small = zeros_frame(2);
        let r = Certificate::from_bytes(&wrap(&small, 1000, 0));
        assert!(matches!(&r, Err(FormatError::Decompress(m)) if m.contains("more than 1000")), "{r:?}");
    }

    #[test]
    fn bounded_decompression() {
        let data: Vec<u8> = (0..300_000u32).flat_map(|i| (i * 7919 % 1013).to_le_bytes()).collect();
        let packed = zstd::bulk::compress(&data, 3).unwrap();
        assert_eq!(decompress_bounded(&packed, data.len() as u64).unwrap(), data);
        assert!(decompress_bounded(&packed, data.len() as u64 - 1).unwrap_err().contains("more than"));
        // Two frames read as one stream; a cut frame or noise is an error.
        let mut two = packed.clone();
        two.extend_from_slice(&packed);
        assert_eq!(decompress_bounded(&two, 2 * data.len() as u64).unwrap().len(), 2 * data.len());
        assert!(decompress_bounded(&packed[..packed.len() / 2], u64::MAX).is_err());
        assert!(decompress_bounded(b"not zstd at all", u64::MAX).is_err());
        assert!(decompress_bounded(&[], 10).is_err(), "no frame");
        // The zeros: exactly 4 blocks read back, one byte more refused.
        assert_eq!(decompress_bounded(&zeros_frame(4), 4 << 17).unwrap(), vec![0; 4 << 17]);
        assert!(decompress_bounded(&zeros_frame(4), (4 << 17) - 1).is_err());
    }
}
