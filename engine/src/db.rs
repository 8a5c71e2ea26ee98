//! Endgame databases: the nimber of every subset of the cells of an R×C rectangle.
//!
//! A subset's options are numerically smaller masks (a move clears two bits), so one pass in
//! increasing mask order fills the table. The pass runs on several threads: masks are
//! grouped by their top bits, and groups whose top bits have the same popcount never depend
//! on each other. Entries are packed 4 bits each when the largest value is below 16, else 8.
//!
//! File layout (little-endian, format version 2): a 64-byte header — magic `CRAMDB\r\n`,
//! format version, rows, columns, bits per entry, entry count, largest value, an xxh3-64
//! checksum of the header (checksum field zeroed) and the chunk table, and the chunk size —
//! then the chunk table (an xxh3-64 checksum of each 64 KiB of entries), then the packed
//! entries, entry `m` being the nimber of the cell set `m` (row-major, `cols` cells per
//! row). Loading checks the header and the chunk table; each chunk of entries is checked
//! the first time a lookup reads it, so a small solve does not read every database whole.

use crate::bits::Bits;
use crate::region::{dominoes, restride, transpose, AnyRegion};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

/// File magic.
pub const MAGIC: [u8; 8] = *b"CRAMDB\r\n";
/// Current file format version.
pub const VERSION: u32 = 2;
/// The most cells a database may cover (2^32 entries).
pub const MAX_DB_CELLS: u32 = 32;
/// Bytes of entries per checksummed chunk (64 KiB: a small solve reads few of them).
pub const CHUNK_BYTES: usize = 1 << 16;
const HEADER: usize = 64;
const CHECKSUM_AT: usize = 40;
const CHUNK_SIZE_AT: usize = 48;

/// Why a database could not be built, written or used.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a usable database.
    #[error("{path}: refused: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The requested rectangle cannot be built.
    #[error("cannot build a {rows}x{cols} database: {reason}")]
    Size {
        /// Rows asked for.
        rows: u32,
        /// Columns asked for.
        cols: u32,
        /// Why not.
        reason: String,
    },
}

/// Where a database's packed entries live.
enum Entries {
    /// Built in this process.
    Owned(Vec<u8>),
    /// A loaded file, mapped read-only; `offset` skips the header and chunk table.
    Mapped { map: memmap2::Mmap, offset: usize },
}

impl std::ops::Deref for Entries {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Entries::Owned(v) => v,
            Entries::Mapped { map, offset } => &map[*offset..],
        }
    }
}

/// An endgame database, built in memory or loaded from a file.
pub struct Database {
    rows: u32,
    cols: u32,
    bits_per_entry: u32,
    max_value: u8,
    /// Checksum of the header and the chunk table (which covers the entries).
    checksum: u64,
    /// Checksum of each chunk of entries.
    chunk_sums: Vec<u64>,
    /// Bit per chunk: checked already.
    checked: Vec<AtomicU64>,
    /// The file it was loaded from (for messages), or a name for a built one.
    path: PathBuf,
    /// Packed entries.
    data: Entries,
}

impl Database {
    /// Computes the database of an R×C rectangle, using `threads` threads.
    pub fn build(rows: u32, cols: u32, threads: usize) -> Result<Database, DbError> {
        let cells = rows * cols;
        if rows == 0 || cols == 0 || cells > MAX_DB_CELLS {
            return Err(DbError::Size { rows, cols, reason: format!("it must have 1 to {MAX_DB_CELLS} cells") });
        }
        // Four bits per entry while every value fits, else again with eight.
        let (data, bits_per_entry) = match fill(rows, cols, threads, 4) {
            Some(d) => (d, 4),
            None => (fill(rows, cols, threads, 8).expect("values fit a byte"), 8),
        };
        let n = 1u64 << cells;
        let max_value = (0..n).map(|m| unpack(&data, bits_per_entry, m)).max().unwrap_or(0);
        let chunk_sums: Vec<u64> = data.chunks(CHUNK_BYTES).map(xxh3_64).collect();
        let checked = all_checked(chunk_sums.len());
        let path = PathBuf::from(format!("(built {rows}x{cols})"));
        let mut db = Database {
            rows,
            cols,
            bits_per_entry,
            max_value,
            checksum: 0,
            chunk_sums,
            checked,
            path,
            data: Entries::Owned(data),
        };
        db.checksum = db.header_checksum(&db.header_bytes(0));
        Ok(db)
    }

    /// Rows of the rectangle.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Columns of the rectangle.
    pub fn cols(&self) -> u32 {
        self.cols
    }

    /// Number of entries (2^(rows·cols)).
    pub fn entries(&self) -> u64 {
        1u64 << (self.rows * self.cols)
    }

    /// Bits per packed entry (4 or 8).
    pub fn bits_per_entry(&self) -> u32 {
        self.bits_per_entry
    }

    /// The largest nimber in the table.
    pub fn max_value(&self) -> u8 {
        self.max_value
    }

    /// The stored checksum (of the header and the chunk table, which covers the entries).
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Bytes of packed entries.
    pub fn payload_bytes(&self) -> usize {
        self.data.len()
    }

    /// The nimber of cell set `mask` (row-major, `cols` cells per row), not checked against
    /// its chunk's checksum: for a database built here or checked whole
    /// ([`Database::check_all`]).
    #[inline]
    pub fn value(&self, mask: u64) -> u8 {
        unpack(&self.data, self.bits_per_entry, mask)
    }

    /// The nimber of cell set `mask`, its chunk checked against the checksum the first time
    /// it is read.
    #[inline]
    pub fn checked_value(&self, mask: u64) -> Result<u8, DbError> {
        let chunk = (mask * self.bits_per_entry as u64 / 8) as usize / CHUNK_BYTES;
        if self.checked[chunk / 64].load(Ordering::Relaxed) >> (chunk % 64) & 1 == 0 {
            self.check_chunk(chunk)?;
        }
        Ok(self.value(mask))
    }

    fn check_chunk(&self, chunk: usize) -> Result<(), DbError> {
        let bytes = &self.data[chunk * CHUNK_BYTES..((chunk + 1) * CHUNK_BYTES).min(self.data.len())];
        if xxh3_64(bytes) != self.chunk_sums[chunk] {
            let at = HEADER + 8 * self.chunk_sums.len() + chunk * CHUNK_BYTES;
            return Err(DbError::Invalid {
                path: self.path.clone(),
                reason: format!(
                    "checksum mismatch in the entries at bytes {at}.. (chunk {chunk}): the file is corrupt"
                ),
            });
        }
        self.checked[chunk / 64].fetch_or(1 << (chunk % 64), Ordering::Relaxed);
        Ok(())
    }

    /// Checks every chunk of entries against its checksum.
    pub fn check_all(&self) -> Result<(), DbError> {
        (0..self.chunk_sums.len()).try_for_each(|c| self.check_chunk(c))
    }

    fn header_bytes(&self, checksum: u64) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.rows.to_le_bytes());
        h[16..20].copy_from_slice(&self.cols.to_le_bytes());
        h[20..24].copy_from_slice(&self.bits_per_entry.to_le_bytes());
        h[24..32].copy_from_slice(&self.entries().to_le_bytes());
        h[32..36].copy_from_slice(&(self.max_value as u32).to_le_bytes());
        h[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&checksum.to_le_bytes());
        h[CHUNK_SIZE_AT..CHUNK_SIZE_AT + 8].copy_from_slice(&(CHUNK_BYTES as u64).to_le_bytes());
        h
    }

    /// The checksum of a header (its checksum field zeroed) and the chunk table.
    fn header_checksum(&self, header: &[u8; HEADER]) -> u64 {
        let mut h = Xxh3::new();
        h.update(header);
        for s in &self.chunk_sums {
            h.update(&s.to_le_bytes());
        }
        h.digest()
    }

    /// Writes the database to `path` (through a temporary file of this process's own,
    /// renamed when complete: builders racing on one directory cannot mix their writes).
    pub fn save(&self, path: &Path) -> Result<(), DbError> {
        let io = |source| DbError::Io { path: path.to_path_buf(), source };
        let tmp = path.with_extension(format!("partial-{}", std::process::id()));
        let mut f = std::io::BufWriter::new(fs::File::create(&tmp).map_err(io)?);
        f.write_all(&self.header_bytes(self.checksum)).map_err(io)?;
        for s in &self.chunk_sums {
            f.write_all(&s.to_le_bytes()).map_err(io)?;
        }
        f.write_all(&self.data).map_err(io)?;
        f.into_inner().map_err(|e| io(e.into_error()))?.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)
    }

    /// Maps a database file and checks its header and chunk table: magic, version, sizes and
    /// checksum must all hold. The entries are checked chunk by chunk as they are first read.
    pub fn load(path: &Path) -> Result<Database, DbError> {
        use std::io::Read;
        let io = |source| DbError::Io { path: path.to_path_buf(), source };
        let bad = |reason: String| DbError::Invalid { path: path.to_path_buf(), reason };
        let mut file = fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut header = [0u8; HEADER];
        if len < HEADER as u64 || file.read_exact(&mut header).is_err() || header[0..8] != MAGIC {
            return Err(bad("not a cram database (bad magic number)".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(bad(format!(
                "format version {version}, this program reads version {VERSION} (rebuild it with cram db build)"
            )));
        }
        let (rows, cols, bits_per_entry) = (u32_at(12), u32_at(16), u32_at(20));
        let cells = rows.saturating_mul(cols);
        if rows == 0 || cols == 0 || cells > MAX_DB_CELLS || !(bits_per_entry == 4 || bits_per_entry == 8) {
            return Err(bad(format!("impossible header: {rows}x{cols}, {bits_per_entry} bits per entry")));
        }
        let entries = 1u64 << cells;
        if u64_at(24) != entries {
            return Err(bad(format!("header claims {} entries, a {rows}x{cols} table has {entries}", u64_at(24))));
        }
        if u64_at(CHUNK_SIZE_AT) != CHUNK_BYTES as u64 {
            return Err(bad(format!(
                "chunks of {} bytes, this program reads chunks of {CHUNK_BYTES}",
                u64_at(CHUNK_SIZE_AT)
            )));
        }
        let payload = (entries * bits_per_entry as u64).div_ceil(8);
        let chunks = payload.div_ceil(CHUNK_BYTES as u64) as usize;
        let offset = HEADER + 8 * chunks;
        if len != offset as u64 + payload {
            return Err(bad(format!(
                "{len} bytes long, a {rows}x{cols} database is {} bytes (truncated or extended)",
                offset as u64 + payload
            )));
        }
        let mut table = vec![0u8; 8 * chunks];
        file.read_exact(&mut table).map_err(io)?;
        let chunk_sums: Vec<u64> =
            table.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
        let stored = u64_at(CHECKSUM_AT);
        let max_value = u32_at(32).min(255) as u8;
        header[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
        // SAFETY: the map is read-only and private to this process. The file must not be
        // truncated while the program runs (as for any database file in use); each chunk
        // of entries is checked against its checksum before any entry of it is used.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        if map.len() != offset + payload as usize {
            return Err(bad("the file changed while it was read".into()));
        }
        let db = Database {
            rows,
            cols,
            bits_per_entry,
            max_value,
            checksum: stored,
            checked: (0..chunks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            chunk_sums,
            path: path.to_path_buf(),
            data: Entries::Mapped { map, offset },
        };
        if db.header_checksum(&header) != stored {
            return Err(bad("checksum mismatch in the header or chunk table: the file is corrupt".into()));
        }
        Ok(db)
    }
}

/// A checked-chunks bitmap with every one of `chunks` chunks marked.
fn all_checked(chunks: usize) -> Vec<AtomicU64> {
    (0..chunks.div_ceil(64))
        .map(|i| AtomicU64::new(if (i + 1) * 64 <= chunks { u64::MAX } else { (1 << (chunks % 64)) - 1 }))
        .collect()
}

/// Entry `m` of entries packed `bits` (4 or 8) each.
#[inline]
fn unpack(data: &[u8], bits: u32, m: u64) -> u8 {
    if bits == 4 {
        (data[(m / 2) as usize] >> (4 * (m % 2))) & 0xf
    } else {
        data[m as usize]
    }
}

/// The packed entries of an R×C database, `bits` (4 or 8) per entry; `None` when some
/// value does not fit 4 bits.
fn fill(rows: u32, cols: u32, threads: usize, bits: u32) -> Option<Vec<u8>> {
    let cells = rows * cols;
    let n = 1u64 << cells;
    let values: Vec<AtomicU8> = (0..(n * bits as u64).div_ceil(8)).map(|_| AtomicU8::new(0)).collect();
    let overflow = AtomicBool::new(false);
    // Groups share their top `top` bits; each group is filled in order by one thread.
    let top = cells.saturating_sub(12).min(8);
    let low = cells - top;
    for level in 0..=top {
        let groups: Vec<u64> = (0..1u64 << top).filter(|g| g.count_ones() == level).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&g) = groups.get(i) else { break };
                    if !fill_group(&values, bits, g << low, 1u64 << low, cols) {
                        overflow.store(true, Ordering::Relaxed);
                    }
                });
            }
        });
        if overflow.load(Ordering::Relaxed) {
            return None;
        }
    }
    Some(values.into_iter().map(AtomicU8::into_inner).collect())
}

/// Fills entries `start..start+len` in increasing order; every smaller option is ready.
/// False when a value does not fit `bits`.
fn fill_group(values: &[AtomicU8], bits: u32, start: u64, len: u64, cols: u32) -> bool {
    let get = |m: u64| -> u8 {
        if bits == 4 {
            values[(m / 2) as usize].load(Ordering::Relaxed) >> (4 * (m % 2)) & 0xf
        } else {
            values[m as usize].load(Ordering::Relaxed)
        }
    };
    for m in start..start + len {
        let (mut hor, mut ver) = dominoes::<u64>(m, cols);
        let mut seen = 0u32;
        while hor != 0 {
            let i = hor.trailing_zeros();
            hor &= hor - 1;
            seen |= 1 << get(m ^ (3 << i));
        }
        while ver != 0 {
            let i = ver.trailing_zeros();
            ver &= ver - 1;
            seen |= 1 << get(m ^ (1 << i | 1 << (i + cols)));
        }
        let v = (!seen).trailing_zeros() as u8;
        if bits == 4 {
            if v >= 16 {
                return false;
            }
            values[(m / 2) as usize].fetch_or(v << (4 * (m % 2)), Ordering::Relaxed);
        } else {
            values[m as usize].store(v, Ordering::Relaxed);
        }
    }
    true
}

/// The databases a solver consults, with a lookup from a region's box size to the
/// database (and orientation) that holds it.
#[derive(Default)]
pub struct DbSet {
    dbs: Vec<Database>,
    /// The first damaged chunk a lookup found: the search must stop and say so.
    damaged: OnceLock<String>,
    /// Per (h, w) with h, w ≤ `FIT_MAX`: database index + 1 (0 = none) and whether the
    /// region must be transposed to fit.
    fit: Vec<(u16, bool)>,
}

const FIT_MAX: usize = 32;

impl DbSet {
    /// A set of the given databases.
    pub fn new(dbs: Vec<Database>) -> DbSet {
        let mut fit = vec![(0u16, false); (FIT_MAX + 1) * (FIT_MAX + 1)];
        for h in 1..=FIT_MAX as u32 {
            for w in 1..=FIT_MAX as u32 {
                let best = dbs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, d)| {
                        if h <= d.rows && w <= d.cols {
                            Some((d.rows * d.cols, i, false))
                        } else if w <= d.rows && h <= d.cols {
                            Some((d.rows * d.cols, i, true))
                        } else {
                            None
                        }
                    })
                    .min();
                if let Some((_, i, t)) = best {
                    fit[h as usize * (FIT_MAX + 1) + w as usize] = (i as u16 + 1, t);
                }
            }
        }
        DbSet { dbs, fit, damaged: OnceLock::new() }
    }

    /// Loads every `*.cramdb` file in `dir`; any refused file is an error.
    pub fn load_dir(dir: &Path) -> Result<DbSet, DbError> {
        let io = |source| DbError::Io { path: dir.to_path_buf(), source };
        let mut paths: Vec<PathBuf> = fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cramdb"))
            .collect();
        paths.sort();
        // Check the files on all cores: reading them dominates the start-up of a solve.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(paths.len().max(1));
        let next = AtomicUsize::new(0);
        let mut loaded: Vec<(usize, Result<Database, DbError>)> = std::thread::scope(|s| {
            let load_some = || {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = paths.get(i) else { return out };
                    out.push((i, Database::load(path)));
                }
            };
            let workers: Vec<_> = (0..threads).map(|_| s.spawn(load_some)).collect();
            workers.into_iter().flat_map(|w| w.join().expect("a loader thread panicked")).collect()
        });
        loaded.sort_by_key(|(i, _)| *i);
        let dbs = loaded.into_iter().map(|(_, r)| r).collect::<Result<Vec<_>, _>>()?;
        Ok(DbSet::new(dbs))
    }

    /// Checks every chunk of every database (what a long-running process does at start,
    /// rather than find damage in the middle of its work).
    pub fn check_all(&self) -> Result<(), DbError> {
        self.dbs.iter().try_for_each(Database::check_all)
    }

    /// The databases held.
    pub fn databases(&self) -> &[Database] {
        &self.dbs
    }

    /// The rectangles held, e.g. `4x7 3x9` (`none` when empty), for logs.
    pub fn describe(&self) -> String {
        if self.dbs.is_empty() {
            return "none".to_string();
        }
        self.dbs.iter().map(|d| format!("{}x{}", d.rows, d.cols)).collect::<Vec<_>>().join(" ")
    }

    /// A short name of exactly which databases are held (`none`, or a hash of each one's
    /// size and checksum), so that processes can check they search with the same ones.
    pub fn fingerprint(&self) -> String {
        if self.dbs.is_empty() {
            return "none".to_string();
        }
        let mut ids: Vec<(u32, u32, u64)> = self.dbs.iter().map(|d| (d.rows, d.cols, d.checksum())).collect();
        ids.sort_unstable();
        let mut h = Xxh3::new();
        for (r, c, sum) in ids {
            h.update(&r.to_le_bytes());
            h.update(&c.to_le_bytes());
            h.update(&sum.to_le_bytes());
        }
        format!("{}db-{:016x}", self.dbs.len(), h.digest())
    }

    /// The nimber of a region from a database whose rectangle holds its box, if any.
    #[inline]
    pub fn lookup(&self, r: &AnyRegion) -> Option<u8> {
        if self.dbs.is_empty() {
            return None;
        }
        let (h, w) = r.dims();
        if h as usize > FIT_MAX || w as usize > FIT_MAX {
            return None;
        }
        let (idx, transposed) = self.fit[h as usize * (FIT_MAX + 1) + w as usize];
        if idx == 0 {
            return None;
        }
        let db = &self.dbs[idx as usize - 1];
        let (bits, stride) = match r {
            AnyRegion::Narrow(x) => (x.bits.to_u128(), x.stride as u32),
            AnyRegion::Wide(x) => (x.bits.to_u128(), x.stride as u32),
        };
        let mask = if transposed { transpose(bits, stride, db.cols) } else { restride(bits, stride, h, w, db.cols) };
        match db.checked_value(mask as u64) {
            Ok(v) => Some(v),
            Err(e) => {
                let _ = self.damaged.set(e.to_string());
                None
            }
        }
    }

    /// The damage a lookup found, if any (the lookup then answered nothing: searches stay
    /// exact, but a run must not go on quietly without its databases).
    pub fn damage(&self) -> Option<&str> {
        self.damaged.get().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_tables_hold_known_values() {
        let db = Database::build(1, 8, 2).unwrap();
        // Dawson's Kayles: 1xn Cram values for n = 0..8.
        let kayles = [0, 0, 1, 1, 2, 0, 3, 1, 1];
        for n in 0..=8u32 {
            assert_eq!(db.value((1u64 << n) - 1), kayles[n as usize], "1x{n}");
        }
        let db = Database::build(3, 4, 2).unwrap();
        assert_eq!(db.value((1 << 12) - 1), 1); // 3x4 = *1
        assert_eq!(db.value(0b0011_0011), 0); // 2x2 = 0
        assert_eq!(db.max_value(), 4);
        assert_eq!(db.bits_per_entry(), 4);
    }

    #[test]
    fn refuses_bad_sizes() {
        assert!(Database::build(0, 3, 1).is_err());
        assert!(Database::build(5, 7, 1).is_err());
    }
}
