//! Endgame databases: the nimber of every subset of the cells of an R×C rectangle.
//!
//! A subset's options are numerically smaller masks (a move clears two bits), so one pass in
//! increasing mask order fills the table. The pass runs on several threads: masks are
//! grouped by their top bits, and groups whose top bits have the same popcount never depend
//! on each other. Entries are packed 4 bits each when the largest value is below 16, else 8.
//!
//! File layout (little-endian): a 64-byte header — magic `CRAMDB\r\n`, format version,
//! rows, columns, bits per entry, entry count, largest value, an xxh3-64 checksum of the
//! header (checksum field zeroed) and payload — followed by the packed entries, entry `m`
//! being the nimber of the cell set `m` (row-major, `cols` cells per row).

use crate::bits::Bits;
use crate::region::{dominoes, restride, transpose, AnyRegion};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use xxhash_rust::xxh3::Xxh3;

/// File magic.
pub const MAGIC: [u8; 8] = *b"CRAMDB\r\n";
/// Current file format version.
pub const VERSION: u32 = 1;
/// The most cells a database may cover (2^32 entries).
pub const MAX_DB_CELLS: u32 = 32;
const HEADER: usize = 64;
const CHECKSUM_AT: usize = 40;

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
    /// A loaded file, mapped read-only; `offset` skips the header.
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
    checksum: u64,
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
        let n = 1usize << cells;
        let values: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
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
                        fill_group(&values, g << low, 1u64 << low, cols);
                    });
                }
            });
        }
        let max_value = values.iter().map(|v| v.load(Ordering::Relaxed)).max().unwrap_or(0);
        let bits_per_entry = if max_value < 16 { 4 } else { 8 };
        let data = if bits_per_entry == 4 {
            let mut d = vec![0u8; n.div_ceil(2)];
            for (i, v) in values.iter().enumerate() {
                d[i / 2] |= v.load(Ordering::Relaxed) << (4 * (i % 2));
            }
            d
        } else {
            values.into_iter().map(AtomicU8::into_inner).collect()
        };
        let mut db = Database { rows, cols, bits_per_entry, max_value, checksum: 0, data: Entries::Owned(data) };
        db.checksum = checksum(&db.header_bytes(0), &db.data);
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

    /// The stored checksum.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Bytes of packed entries.
    pub fn payload_bytes(&self) -> usize {
        self.data.len()
    }

    /// The nimber of cell set `mask` (row-major, `cols` cells per row).
    #[inline]
    pub fn value(&self, mask: u64) -> u8 {
        if self.bits_per_entry == 4 {
            (self.data[(mask / 2) as usize] >> (4 * (mask % 2))) & 0xf
        } else {
            self.data[mask as usize]
        }
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
        h
    }

    /// Writes the database to `path` (through a temporary file, renamed when complete).
    pub fn save(&self, path: &Path) -> Result<(), DbError> {
        let io = |source| DbError::Io { path: path.to_path_buf(), source };
        let tmp = path.with_extension("partial");
        let mut f = fs::File::create(&tmp).map_err(io)?;
        f.write_all(&self.header_bytes(self.checksum)).map_err(io)?;
        f.write_all(&self.data).map_err(io)?;
        f.sync_all().map_err(io)?;
        fs::rename(&tmp, path).map_err(io)
    }

    /// Maps and checks a database file: magic, version, sizes and checksum must all hold.
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
            return Err(bad(format!("format version {version}, this program reads version {VERSION}")));
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
        let payload = (entries * bits_per_entry as u64).div_ceil(8);
        if len != HEADER as u64 + payload {
            return Err(bad(format!(
                "{len} bytes long, a {rows}x{cols} database is {} bytes (truncated or extended)",
                HEADER as u64 + payload
            )));
        }
        let stored = u64_at(CHECKSUM_AT);
        let max_value = u32_at(32).min(255) as u8;
        header[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
        // SAFETY: the map is read-only and private to this process. The file must not be
        // truncated while the program runs (as for any database file in use); its contents
        // are checked against the checksum below before any entry is used.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        if map.len() as u64 != HEADER as u64 + payload {
            return Err(bad("the file changed while it was read".into()));
        }
        if checksum(&header, &map[HEADER..]) != stored {
            return Err(bad("checksum mismatch: the file is corrupt".into()));
        }
        let data = Entries::Mapped { map, offset: HEADER };
        Ok(Database { rows, cols, bits_per_entry, max_value, checksum: stored, data })
    }
}

fn checksum(header: &[u8], data: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(header);
    h.update(data);
    h.digest()
}

/// Fills entries `start..start+len` in increasing order; every smaller option is ready.
fn fill_group(values: &[AtomicU8], start: u64, len: u64, cols: u32) {
    for m in start..start + len {
        let (mut hor, mut ver) = dominoes::<u64>(m, cols);
        let mut seen = 0u32;
        while hor != 0 {
            let i = hor.trailing_zeros();
            hor &= hor - 1;
            seen |= 1 << values[(m ^ (3 << i)) as usize].load(Ordering::Relaxed);
        }
        while ver != 0 {
            let i = ver.trailing_zeros();
            ver &= ver - 1;
            seen |= 1 << values[(m ^ (1 << i | 1 << (i + cols))) as usize].load(Ordering::Relaxed);
        }
        values[m as usize].store((!seen).trailing_zeros() as u8, Ordering::Relaxed);
    }
}

/// The databases a solver consults, with a lookup from a region's box size to the
/// database (and orientation) that holds it.
#[derive(Default)]
pub struct DbSet {
    dbs: Vec<Database>,
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
        DbSet { dbs, fit }
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

    /// The databases held.
    pub fn databases(&self) -> &[Database] {
        &self.dbs
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
        Some(db.value(mask as u64))
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
