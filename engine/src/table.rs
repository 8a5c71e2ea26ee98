//! The transposition table: what is known about the nimber of each canonical region — the
//! exact value, or values it is known not to have and an upper bound.
//!
//! The table starts small and doubles while it is less than its memory budget, so a small
//! solve touches little memory; at the budget it replaces, within a bucket of four slots,
//! the entry that cost the fewest search nodes to establish.

use crate::bits::Bits;
use crate::facts::Facts;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Default)]
struct Slot<B: Bits> {
    key: B,
    stride: u8,
    upper: u8,
    /// log2 of the search nodes spent on this entry: the replacement priority.
    work: u8,
    excluded: u32,
}

/// Counters of table use, for reports.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct TableStats {
    /// Entries held now.
    pub entries: u64,
    /// Entries dropped to make room.
    pub replaced: u64,
}

const BUCKET: usize = 8;
const INITIAL_BUCKETS: usize = 1 << 9;

/// Eight slots on two adjacent cache lines (four for the 128-bit table), fetched together.
#[derive(Clone, Copy)]
#[repr(align(128))]
struct Bucket<B: Bits>([Slot<B>; BUCKET]);

impl<B: Bits> Bucket<B> {
    /// `n` empty buckets.
    fn empty(n: usize) -> ZeroedSlice<Bucket<B>> {
        // SAFETY: a bucket is integers only (`Bits` is sealed to `u64` and `u128`), and
        // all-zero slots have the empty key.
        unsafe { ZeroedSlice::new(n) }
    }
}

/// A slice of memory mapped straight from the system: its pages start zero and are only
/// backed as they are first touched, so a large table costs nothing up front and a small
/// solve touches little of it (the allocator would first write zeros over all of it, for
/// the alignment buckets ask for). Large ones ask for huge pages: random probes would
/// otherwise miss the TLB on nearly every access.
struct ZeroedSlice<T> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a `Box<[T]>`.
unsafe impl<T: Send> Send for ZeroedSlice<T> {}
// SAFETY: as above: shared access hands out `&T` only.
unsafe impl<T: Sync> Sync for ZeroedSlice<T> {}

impl<T> ZeroedSlice<T> {
    /// `len` values whose bytes are all zero.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T`, and `T` must need no drop (none is run).
    unsafe fn new(len: usize) -> ZeroedSlice<T> {
        assert!(std::mem::align_of::<T>() <= 4096, "a mapping is page-aligned");
        let bytes = len.checked_mul(std::mem::size_of::<T>()).expect("table size fits the address space");
        if bytes == 0 {
            return ZeroedSlice { ptr: std::ptr::NonNull::dangling(), len };
        }
        // SAFETY: an anonymous private mapping of `bytes` > 0 bytes; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let layout = std::alloc::Layout::array::<T>(len).expect("table size fits the address space");
            std::alloc::handle_alloc_error(layout);
        }
        const HUGE_PAGE: usize = 2 << 20;
        #[cfg(target_os = "linux")]
        if bytes >= HUGE_PAGE {
            // A hint; without transparent huge pages the table works the same.
            // SAFETY: the range is the mapping just made.
            unsafe { libc::madvise(ptr, bytes, libc::MADV_HUGEPAGE) };
        }
        ZeroedSlice { ptr: std::ptr::NonNull::new(ptr as *mut T).expect("a mapping is not null"), len }
    }
}

impl<T> std::ops::Deref for ZeroedSlice<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` valid values (all zero, or written through
        // `DerefMut`), aligned, and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for ZeroedSlice<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for ZeroedSlice<T> {
    fn drop(&mut self) {
        let bytes = self.len * std::mem::size_of::<T>();
        if bytes > 0 {
            // SAFETY: unmaps exactly the mapping made in `new`, which nothing borrows now
            // (the values are plain data or atomics: nothing to drop).
            unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, bytes) };
        }
    }
}

/// A bounded hash table from canonical regions to [`Facts`]: the solver's own, or a view
/// of an [`AtomicTable`] that the solvers of several threads share.
pub struct Table<B: Bits> {
    buckets: ZeroedSlice<Bucket<B>>,
    max_buckets: usize,
    stats: TableStats,
    shared: Option<Arc<AtomicTable>>,
}

impl<B: Bits> Table<B> {
    /// A table that will grow to at most `budget_bytes` of memory.
    pub fn new(budget_bytes: usize) -> Table<B> {
        let fit = (budget_bytes / std::mem::size_of::<Bucket<B>>()).max(1);
        let max_buckets = if fit.is_power_of_two() { fit } else { fit.next_power_of_two() / 2 };
        let buckets = Bucket::empty(INITIAL_BUCKETS.min(max_buckets));
        Table { buckets, max_buckets, stats: TableStats::default(), shared: None }
    }

    /// A view of a table shared with other threads: every fact any of them stores is
    /// seen by all.
    pub fn shared(table: Arc<AtomicTable>) -> Table<B> {
        Table { buckets: Bucket::empty(0), max_buckets: 0, stats: TableStats::default(), shared: Some(table) }
    }

    /// Bytes allocated now (for a shared table, its whole fixed size, though memory is only
    /// taken as it is touched).
    pub fn allocated_bytes(&self) -> usize {
        match &self.shared {
            Some(t) => t.bytes(),
            None => self.buckets.len() * std::mem::size_of::<Bucket<B>>(),
        }
    }

    /// Use counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    #[inline]
    fn hash(key: B, stride: u8) -> u64 {
        key.mix() ^ (stride as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    #[inline]
    fn bucket(&self, key: B, stride: u8) -> usize {
        (Self::hash(key, stride) as usize) & (self.buckets.len() - 1)
    }

    /// Hints the processor to fetch the bucket of `(key, stride)`, so that a batch of
    /// lookups overlaps its cache misses.
    #[inline]
    pub fn prefetch(&self, key: B, stride: u8) {
        let line = match &self.shared {
            Some(t) => t.bucket_ptr(Self::hash(key, stride)),
            // SAFETY: `bucket` is an index inside the bucket vector.
            None => unsafe { self.buckets.as_ptr().add(self.bucket(key, stride)) as *const u8 },
        };
        prefetch_line_pair(line);
    }

    /// What is known about region `(key, stride)`.
    #[inline]
    pub fn get(&self, key: B, stride: u8) -> Option<Facts> {
        if let Some(t) = &self.shared {
            return t.get(Self::hash(key, stride), key.to_u128(), stride);
        }
        let b = self.bucket(key, stride);
        self.buckets[b]
            .0
            .iter()
            .find(|s| s.key == key && s.stride == stride)
            .map(|s| Facts { excluded: s.excluded, upper: s.upper })
    }

    /// Adds facts about region `(key, stride)`, established with about `nodes` search nodes.
    pub fn put(&mut self, key: B, stride: u8, bounds: Facts, nodes: u64) {
        let work = (64 - nodes.leading_zeros()) as u8;
        if let Some(t) = &self.shared {
            return t.put(Self::hash(key, stride), key.to_u128(), stride, bounds, work);
        }
        let b = self.bucket(key, stride);
        let bucket = &mut self.buckets[b].0;
        if let Some(s) = bucket.iter_mut().find(|s| s.key == key && s.stride == stride) {
            let m = Facts { excluded: s.excluded, upper: s.upper }.merge(bounds);
            s.excluded = m.excluded;
            s.upper = m.upper;
            s.work = s.work.max(work);
            return;
        }
        let new = Slot { key, stride, upper: bounds.upper, work, excluded: bounds.excluded };
        if let Some(s) = bucket.iter_mut().find(|s| s.key.is_empty()) {
            *s = new;
            self.stats.entries += 1;
            return;
        }
        // Full bucket: grow while under budget and at least half full, else replace.
        let len = self.buckets.len();
        if len < self.max_buckets && self.stats.entries as usize * 2 > len * BUCKET {
            self.grow();
            return self.put(key, stride, bounds, nodes);
        }
        let victim = self.buckets[b].0.iter_mut().min_by_key(|s| s.work).expect("buckets are not empty");
        if victim.work <= work {
            *victim = new;
            self.stats.replaced += 1;
        }
    }

    fn grow(&mut self) {
        let bigger = Bucket::empty(self.buckets.len() * 2);
        let old = std::mem::replace(&mut self.buckets, bigger);
        self.stats.entries = 0;
        for s in old.iter().flat_map(|b| b.0.iter()).filter(|s| !s.key.is_empty()) {
            let b = self.bucket(s.key, s.stride);
            if let Some(free) = self.buckets[b].0.iter_mut().find(|x| x.key.is_empty()) {
                *free = *s;
                self.stats.entries += 1;
            }
        }
    }
}

/// Hints the processor to fetch the 128 bytes at `line` (two cache lines).
#[inline]
fn prefetch_line_pair(line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint; it never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(line as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(64) as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Slots in a bucket of the shared table: 5 × 24 bytes after an 8-byte sequence number.
const ATOMIC_SLOTS: usize = 5;

/// A bucket of the shared table, guarded by a sequence lock: a writer makes the sequence
/// odd, writes, and makes it even again; a reader retries when the sequence was odd or
/// changed while it read, so it never uses a half-written slot.
#[repr(align(128))]
struct AtomicBucket {
    seq: AtomicU64,
    /// Per slot: key low word, key high word, then stride | upper << 8 | work << 16 |
    /// excluded << 32. A zero key is an empty slot (no region is empty).
    slots: [[AtomicU64; 3]; ATOMIC_SLOTS],
}

/// The transposition table the solvers of several threads share ([`Table::shared`]):
/// fixed size, no locks on reads, a sequence lock per bucket on writes. What one thread
/// learns, the others use at once; a probe costs what a probe of a solver's own table does.
pub struct AtomicTable {
    buckets: ZeroedSlice<AtomicBucket>,
}

impl AtomicTable {
    /// A table of about `budget_bytes` (rounded down to a power of two of buckets), mapped
    /// as it is first touched, in huge pages where the system allows.
    pub fn new(budget_bytes: usize) -> AtomicTable {
        let fit = (budget_bytes / std::mem::size_of::<AtomicBucket>()).max(1);
        let n = if fit.is_power_of_two() { fit } else { fit.next_power_of_two() / 2 };
        // SAFETY: all-zero bytes are valid atomics, and an all-zero bucket is empty.
        AtomicTable { buckets: unsafe { ZeroedSlice::new(n) } }
    }

    /// Bytes of the table.
    pub fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<AtomicBucket>()
    }

    #[inline]
    fn bucket(&self, hash: u64) -> &AtomicBucket {
        &self.buckets[(hash as usize) & (self.buckets.len() - 1)]
    }

    fn bucket_ptr(&self, hash: u64) -> *const u8 {
        self.bucket(hash) as *const AtomicBucket as *const u8
    }

    fn meta(stride: u8, upper: u8, work: u8, excluded: u32) -> u64 {
        stride as u64 | (upper as u64) << 8 | (work as u64) << 16 | (excluded as u64) << 32
    }

    /// What is known about region `(key, stride)` whose hash is `hash`.
    pub fn get(&self, hash: u64, key: u128, stride: u8) -> Option<Facts> {
        let b = self.bucket(hash);
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        loop {
            let before = b.seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut found = None;
            for s in &b.slots {
                if s[0].load(Ordering::Relaxed) == lo && s[1].load(Ordering::Relaxed) == hi {
                    let m = s[2].load(Ordering::Relaxed);
                    if m as u8 == stride {
                        found = Some(Facts { excluded: (m >> 32) as u32, upper: (m >> 8) as u8 });
                        break;
                    }
                }
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if b.seq.load(Ordering::Relaxed) == before {
                return found;
            }
        }
    }

    /// Adds facts about region `(key, stride)` whose hash is `hash`, established with
    /// `work` (log2 of the nodes): merged into its slot, else into an empty one, else over
    /// the slot of least work if that is no more than `work`.
    pub fn put(&self, hash: u64, key: u128, stride: u8, bounds: Facts, work: u8) {
        let b = self.bucket(hash);
        // Take the bucket's write lock: an even sequence made odd.
        let mut seq = b.seq.load(Ordering::Relaxed);
        loop {
            if seq & 1 == 0 {
                match b.seq.compare_exchange_weak(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => seq = now,
                }
            } else {
                std::hint::spin_loop();
                seq = b.seq.load(Ordering::Relaxed);
            }
        }
        std::sync::atomic::fence(Ordering::Release);
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        let read = |s: &[AtomicU64; 3]| {
            (s[0].load(Ordering::Relaxed), s[1].load(Ordering::Relaxed), s[2].load(Ordering::Relaxed))
        };
        let write = |s: &[AtomicU64; 3], m: u64| {
            s[0].store(lo, Ordering::Relaxed);
            s[1].store(hi, Ordering::Relaxed);
            s[2].store(m, Ordering::Relaxed);
        };
        let same = b.slots.iter().find(|s| {
            let (l, h, m) = read(s);
            l == lo && h == hi && m as u8 == stride
        });
        if let Some(s) = same {
            let m = s[2].load(Ordering::Relaxed);
            let old = Facts { excluded: (m >> 32) as u32, upper: (m >> 8) as u8 }.merge(bounds);
            write(s, Self::meta(stride, old.upper, ((m >> 16) as u8).max(work), old.excluded));
        } else {
            let new = Self::meta(stride, bounds.upper, work, bounds.excluded);
            let empty = b.slots.iter().find(|s| read(s).0 == 0 && read(s).1 == 0);
            match empty {
                Some(s) => write(s, new),
                None => {
                    let victim = b.slots.iter().min_by_key(|s| (read(s).2 >> 16) as u8).expect("buckets have slots");
                    if (read(victim).2 >> 16) as u8 <= work {
                        write(victim, new);
                    }
                }
            }
        }
        b.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_table_keeps_facts_and_replaces_by_work() {
        let t = AtomicTable::new(4 * 128);
        assert_eq!(t.bytes(), 512);
        let mut not_one = Facts::UNKNOWN;
        not_one.exclude(1);
        let view: Table<u128> = Table::shared(Arc::new(t));
        let mut view = view;
        view.put(5, 8, not_one, 10);
        view.put(5, 8, Facts { excluded: 1, upper: 7 }, 10);
        assert_eq!(view.get(5, 8), Some(Facts { excluded: 3, upper: 7 }));
        assert_eq!(view.get(5, 9), None);
        assert_eq!(view.get(1 << 100 | 5, 8), None);
        // Many keys in 4 buckets of 5 slots: costly entries survive cheap ones.
        view.put(77, 8, Facts::exact(2), 1 << 40);
        for k in 100..400u128 {
            view.put(k, 8, Facts::exact(1), 4);
        }
        assert_eq!(view.get(77, 8), Some(Facts::exact(2)));
    }

    #[test]
    fn threads_never_read_a_torn_slot() {
        // Two writers hammer one bucket with 12 keys (more than its slots) whose bounds
        // are a function of the key; a reader checks every entry it finds.
        let t = Arc::new(AtomicTable::new(128));
        let key = |i: u128| ((i % 12 + 1) << 64) | ((i % 12) * 7 + 1);
        let expect = |k: u128| Facts { excluded: (k as u32).rotate_left(7) & !1, upper: (k >> 64) as u8 + 30 };
        let hits = std::thread::scope(|s| {
            for w in 0..2u128 {
                let t = t.clone();
                s.spawn(move || {
                    for i in 0..200_000u128 {
                        let k = key(i + w * 5);
                        t.put(0, k, 8, expect(k), 1);
                    }
                });
            }
            let t = t.clone();
            s.spawn(move || {
                let mut hits = 0;
                for i in 0..200_000u128 {
                    if let Some(b) = t.get(0, key(i), 8) {
                        assert_eq!(b, expect(key(i)));
                        hits += 1;
                    }
                }
                hits
            })
            .join()
            .unwrap()
        });
        assert!(hits > 0);
    }

    #[test]
    fn table_grows_keeps_and_replaces() {
        let mut t: Table<u64> = Table::new(1 << 16);
        for k in 1..2000u64 {
            t.put(k, 8, Facts::exact((k % 7) as u8), k);
        }
        assert!(t.allocated_bytes() <= 1 << 16);
        let found = (1..2000u64).filter(|&k| t.get(k, 8) == Some(Facts::exact((k % 7) as u8))).count();
        assert!(found > 1000, "only {found} kept");
        assert!(t.stats().replaced > 0);
        assert_eq!(t.get(5, 9), None);
        // Merging facts about one key.
        t.put(5000, 3, Facts { excluded: 1, upper: 9 }, 1);
        t.put(5000, 3, Facts { excluded: 0, upper: 1 }, 1);
        assert_eq!(t.get(5000, 3).unwrap().value(), Some(1));
    }
}
