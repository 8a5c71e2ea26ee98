//! The transposition table: what is known about the nimber of each canonical region — the
//! exact value, or values it is known not to have and an upper bound.
//!
//! The table starts small and doubles while it is less than its memory budget, so a small
//! solve touches little memory; at the budget it replaces, within a bucket of eight slots
//! (four in the 128-bit table), the entry that cost the fewest search nodes to establish.

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

impl<T> ZeroedSlice<T> {
    /// Gives the memory of the values in `range` back to the system (the whole pages in
    /// it): they read as zero afterwards, and take memory again only when written.
    fn release(&self, range: std::ops::Range<usize>) {
        const PAGE: usize = 4096;
        let size = std::mem::size_of::<T>();
        let base = self.ptr.as_ptr() as usize;
        let from = (base + range.start * size).next_multiple_of(PAGE);
        let to = (base + range.end.min(self.len) * size) / PAGE * PAGE;
        if to > from {
            // SAFETY: whole pages inside the mapping; its values are plain data or atomics
            // for which all-zero bytes are valid (as `new` requires), so the pages reading
            // as zero afterwards leaves every value valid.
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
        }
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

/// A table that solvers of several threads (or one solver on a large board) share.
#[derive(Clone)]
pub enum SharedTable {
    /// Regions of up to 64 cells, eight to a cache line ([`DenseTable`]).
    Dense(Arc<DenseTable>),
    /// Any region, under a sequence lock per bucket ([`AtomicTable`]).
    Locked(Arc<AtomicTable>),
}

impl SharedTable {
    /// Bytes of the table now (its memory is taken as it is touched).
    pub fn bytes(&self) -> usize {
        match self {
            SharedTable::Dense(t) => t.bytes(),
            SharedTable::Locked(t) => t.bytes(),
        }
    }
}

/// A bounded hash table from canonical regions to [`Facts`]: the solver's own, growing as
/// it needs, or a view of a [`SharedTable`].
pub struct Table<B: Bits> {
    buckets: ZeroedSlice<Bucket<B>>,
    max_buckets: usize,
    stats: TableStats,
    shared: Option<View>,
}

/// This thread's access to a shared table.
enum View {
    Dense(DenseView),
    Locked(Arc<AtomicTable>),
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
    /// seen by all. A [`DenseTable`] holds keys of up to 64 bits only: it is for the
    /// 64-bit word.
    pub fn shared(table: SharedTable) -> Table<B> {
        debug_assert!(B::BITS == 64 || matches!(table, SharedTable::Locked(_)));
        let view = match table {
            SharedTable::Dense(t) => View::Dense(t.view()),
            SharedTable::Locked(t) => View::Locked(t),
        };
        Table { buckets: Bucket::empty(0), max_buckets: 0, stats: TableStats::default(), shared: Some(view) }
    }

    /// Bytes allocated now (for a shared table, its whole size now, though memory is only
    /// taken as it is touched).
    pub fn allocated_bytes(&self) -> usize {
        match &self.shared {
            Some(View::Dense(v)) => v.table().bytes(),
            Some(View::Locked(t)) => t.bytes(),
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
            Some(View::Dense(v)) => v.bucket_ptr(key.to_u128() as u64, stride),
            Some(View::Locked(t)) => t.bucket_ptr(Self::hash(key, stride)),
            // SAFETY: `bucket` is an index inside the bucket vector.
            None => unsafe { self.buckets.as_ptr().add(self.bucket(key, stride)) as *const u8 },
        };
        prefetch_line_pair(line);
    }

    /// What is known about region `(key, stride)`.
    #[inline]
    pub fn get(&self, key: B, stride: u8) -> Option<Facts> {
        match &self.shared {
            Some(View::Dense(v)) => return v.get(key.to_u128() as u64, stride),
            Some(View::Locked(t)) => return t.get(Self::hash(key, stride), key.to_u128(), stride),
            None => {}
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
        match &mut self.shared {
            Some(View::Dense(v)) => return v.put(key.to_u128() as u64, stride, bounds, work),
            Some(View::Locked(t)) => {
                return t.put(Self::hash(key, stride), key.to_u128(), stride, bounds, work);
            }
            None => {}
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

/// Reads of a bucket that keeps changing before the reader calls it a miss.
const SEQLOCK_TRIES: usize = 4;

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

    /// What is known about region `(key, stride)` whose hash is `hash`. A bucket that a
    /// writer holds, or that changes under the read again and again, reads as a miss: a
    /// writer preempted in the middle must not stall the threads that probe its bucket.
    pub fn get(&self, hash: u64, key: u128, stride: u8) -> Option<Facts> {
        let b = self.bucket(hash);
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        for _ in 0..SEQLOCK_TRIES {
            let before = b.seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                return None;
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
        None
    }

    /// Adds facts about region `(key, stride)` whose hash is `hash`, established with
    /// `work` (log2 of the nodes): merged into its slot, else into an empty one, else over
    /// the slot of least work if that is no more than `work`. When another writer holds
    /// the bucket the facts are dropped (sound: a table may forget) rather than waited for.
    pub fn put(&self, hash: u64, key: u128, stride: u8, bounds: Facts, work: u8) {
        let b = self.bucket(hash);
        // Take the bucket's write lock: an even sequence made odd.
        let seq = b.seq.load(Ordering::Relaxed);
        if seq & 1 == 1 || b.seq.compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return;
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

/// Entries of a [`DenseTable`] bucket: one cache line.
const DENSE_SLOTS: usize = 8;

/// Eight 8-byte entries on one cache line.
#[repr(align(64))]
struct DenseBucket([AtomicU64; DENSE_SLOTS]);

/// The memory-dense transposition table for regions of up to 64 cells, shared by any
/// number of threads without locks: 8 bytes per entry, twice as many regions per GiB as a
/// solver's own table.
///
/// A key (the region's 64-bit word and its row stride) is mixed by a bijection of the 64-bit
/// word; the low `b` bits of the mix (and the stride) choose the bucket, the other `64 - b`
/// bits and the stride are stored in the entry. Together they give back the whole key, so
/// a probe never matches another region (no false hits). The rest of the entry's 64 bits
/// hold the facts: 3 bits of work (log2 of the nodes, in steps of 4), 4 bits for the upper
/// bound (0 marks an empty entry; 1 + the bound, 15 for "none below 14") and `b - 13` bits of
/// excluded values from 0 up. Facts beyond that are dropped (the table stores less, never
/// something false). Every entry is one atomic word, so a reader never sees half of one;
/// two writers racing on a slot lose one of their facts at worst.
///
/// The table starts small and doubles, up to its budget, whenever half its entries are
/// taken: memory follows what the solve needs, so a solve of a second touches a few MiB
/// and not a budget of many GiB (touching memory costs, on some machines a second per
/// few hundred MiB). A doubling copies every entry into a new array (the bucket index and
/// the tag give back each key's mix) and frees the old one as it goes; the facts other
/// threads store in the old array while it is copied may be lost, which is sound: a table
/// may forget.
pub struct DenseTable {
    /// The array in use; readers and writers keep a clone ([`DenseView`]) and look for a
    /// newer one from time to time.
    current: std::sync::RwLock<Arc<DenseArray>>,
    /// Raised by one each time `current` is replaced.
    generation: AtomicU64,
    /// Entries written into empty slots of the current array, as reported by the views.
    filled: AtomicU64,
    /// log2 of the buckets of the largest array the budget allows.
    max_bits: u32,
    /// Held by the thread that is doubling the table.
    growing: std::sync::Mutex<()>,
}

/// One fixed-size array of a [`DenseTable`].
pub struct DenseArray {
    buckets: ZeroedSlice<DenseBucket>,
    /// log2 of the number of buckets.
    bits: u32,
}

/// The least number of buckets, as a power of two (4 MiB): fewer would leave too few bits
/// of an entry for the facts.
const DENSE_MIN_BUCKET_BITS: u32 = 16;

/// The buckets a dense table starts with, as a power of two (4 MiB).
const DENSE_START_BUCKET_BITS: u32 = 16;

/// A thread's handle on a [`DenseTable`]: the array it probes, and how many entries it
/// wrote into empty slots since it last reported them.
pub struct DenseView {
    table: Arc<DenseTable>,
    array: Arc<DenseArray>,
    generation: u64,
    unreported: u32,
}

/// New entries a view counts before it reports them (and looks for a newer array).
const DENSE_REPORT_EVERY: u32 = 256;

impl DenseTable {
    /// A table that grows to at most about `budget_bytes` (rounded down to a power of two
    /// of 64-byte buckets, at least 4 MiB); it starts at 4 MiB,
    /// mapped as it is first touched, in huge pages where the system allows.
    pub fn new(budget_bytes: usize) -> DenseTable {
        let fit = (budget_bytes / std::mem::size_of::<DenseBucket>()).max(1);
        let max_bits = fit.ilog2().max(DENSE_MIN_BUCKET_BITS);
        let array = DenseArray::new(max_bits.min(DENSE_START_BUCKET_BITS));
        DenseTable {
            current: std::sync::RwLock::new(Arc::new(array)),
            generation: AtomicU64::new(0),
            filled: AtomicU64::new(0),
            max_bits,
            growing: std::sync::Mutex::new(()),
        }
    }

    /// Bytes of the array in use now.
    pub fn bytes(&self) -> usize {
        self.array().bytes()
    }

    /// Bytes of the largest array the budget allows.
    pub fn max_bytes(&self) -> usize {
        std::mem::size_of::<DenseBucket>() << self.max_bits
    }

    fn array(&self) -> Arc<DenseArray> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A handle for one thread.
    pub fn view(self: &Arc<DenseTable>) -> DenseView {
        let generation = self.generation.load(Ordering::Acquire);
        DenseView { table: self.clone(), array: self.array(), generation, unreported: 0 }
    }

    /// What is known about region `(key, stride)` (through the array in use).
    pub fn get(&self, key: u64, stride: u8) -> Option<Facts> {
        self.array().get(key, stride)
    }

    /// Adds facts about region `(key, stride)` (see [`DenseArray::put`]), doubling the
    /// table when it is half full.
    pub fn put(&self, key: u64, stride: u8, facts: Facts, work: u8) {
        let array = self.array();
        if array.put(key, stride, facts, work) {
            self.report(1, &array);
        }
    }

    /// Counts `n` more entries written into empty slots of `array`, and doubles the table
    /// when that array is the one in use, half full and below the budget.
    fn report(&self, n: u64, array: &Arc<DenseArray>) {
        let filled = self.filled.fetch_add(n, Ordering::Relaxed) + n;
        if array.bits < self.max_bits && filled * 2 > (DENSE_SLOTS as u64) << array.bits {
            self.grow(array);
        }
    }

    /// Replaces `old` (if it is still the array in use, and no other thread is doing it)
    /// by an array twice its size holding its entries.
    fn grow(&self, old: &Arc<DenseArray>) {
        let Ok(_one_at_a_time) = self.growing.try_lock() else { return };
        if !Arc::ptr_eq(&self.array(), old) {
            return;
        }
        let bigger = DenseArray::new(old.bits + 1);
        let copied = old.move_into(&bigger);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(bigger);
        self.filled.store(copied, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

impl DenseView {
    /// What is known about region `(key, stride)`.
    #[inline]
    pub fn get(&self, key: u64, stride: u8) -> Option<Facts> {
        self.array.get(key, stride)
    }

    /// Adds facts about region `(key, stride)` (see [`DenseArray::put`]); now and then
    /// reports new entries to the table (which may double it) and takes up a newer array.
    #[inline]
    pub fn put(&mut self, key: u64, stride: u8, facts: Facts, work: u8) {
        if self.array.put(key, stride, facts, work) {
            self.unreported += 1;
            if self.unreported >= DENSE_REPORT_EVERY {
                self.table.report(self.unreported as u64, &self.array);
                self.unreported = 0;
                self.refresh();
            }
        }
    }

    /// Takes up the table's array in use, if it is newer than this view's.
    fn refresh(&mut self) {
        let generation = self.table.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.array = self.table.array();
            self.generation = generation;
        }
    }

    fn bucket_ptr(&self, key: u64, stride: u8) -> *const u8 {
        self.array.bucket_ptr(key, stride)
    }

    /// The table this view is of.
    pub fn table(&self) -> &Arc<DenseTable> {
        &self.table
    }
}

impl DenseArray {
    /// An array of `2^bits` empty buckets, mapped as it is first touched.
    fn new(bits: u32) -> DenseArray {
        // SAFETY: all-zero bytes are valid atomics, and a zero entry is empty.
        DenseArray { buckets: unsafe { ZeroedSlice::new(1 << bits) }, bits }
    }

    fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<DenseBucket>()
    }

    /// The largest value the entries can mark as excluded, plus one.
    fn excluded_bits(&self) -> u32 {
        self.bits - 13
    }

    /// The bucket of a key's mix `h` with `stride`.
    #[inline]
    fn index(&self, h: u64, stride: u8) -> usize {
        ((h ^ (stride as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) & ((1 << self.bits) - 1)) as usize
    }

    /// The bucket of a key and the tag its entries carry (the key bits the bucket does not
    /// give: the mix's high bits and the stride), in the entry's top `70 - bits` bits.
    #[inline]
    fn locate(&self, key: u64, stride: u8) -> (usize, u64) {
        let h = mix_bijective(key);
        // The tag: h >> bits (64 - bits bits), then the stride (6 bits: strides are < 64).
        let tag = (h >> self.bits) << 6 | (stride as u64 & 63);
        (self.index(h, stride), tag)
    }

    fn bucket_ptr(&self, key: u64, stride: u8) -> *const u8 {
        let (i, _) = self.locate(key, stride);
        &self.buckets[i] as *const DenseBucket as *const u8
    }

    #[inline]
    fn tag_of(&self, entry: u64) -> u64 {
        entry >> (self.bits - 6)
    }

    /// The facts an entry holds (it must not be empty).
    #[inline]
    fn decode(&self, entry: u64) -> Facts {
        let payload = entry & ((1 << (self.bits - 6)) - 1);
        let upper_field = (payload >> self.excluded_bits()) & 15;
        let upper = if upper_field == 15 { u8::MAX } else { upper_field as u8 - 1 };
        let excluded = (payload & ((1 << self.excluded_bits()) - 1)) as u32;
        Facts { excluded, upper }
    }

    #[inline]
    fn work_of(&self, entry: u64) -> u8 {
        ((entry >> (self.bits - 9)) & 7) as u8
    }

    #[inline]
    fn encode(&self, tag: u64, facts: Facts, work: u8) -> u64 {
        let upper_field = if facts.upper >= 14 { 15 } else { facts.upper as u64 + 1 };
        let excluded = facts.excluded as u64 & ((1 << self.excluded_bits()) - 1);
        let work = (work as u64).div_ceil(4).min(7);
        tag << (self.bits - 6) | work << (self.bits - 9) | upper_field << self.excluded_bits() | excluded
    }

    #[inline]
    fn is_empty_entry(&self, entry: u64) -> bool {
        (entry >> self.excluded_bits()) & 15 == 0
    }

    /// What is known about region `(key, stride)`.
    #[inline]
    fn get(&self, key: u64, stride: u8) -> Option<Facts> {
        let (i, tag) = self.locate(key, stride);
        self.buckets[i]
            .0
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .find(|&e| !self.is_empty_entry(e) && self.tag_of(e) == tag)
            .map(|e| self.decode(e))
    }

    /// Adds facts about region `(key, stride)`, established with `work` (log2 of the
    /// nodes): merged into its entry, else written to an empty one, else over the entry of
    /// least work if that is no more than `work`. True when an empty slot was taken.
    #[inline]
    fn put(&self, key: u64, stride: u8, facts: Facts, work: u8) -> bool {
        let (i, tag) = self.locate(key, stride);
        self.put_at(i, tag, facts, work)
    }

    fn put_at(&self, i: usize, tag: u64, facts: Facts, work: u8) -> bool {
        let bucket = &self.buckets[i].0;
        let mut victim: Option<(&AtomicU64, u8)> = None;
        for slot in bucket {
            let e = slot.load(Ordering::Relaxed);
            if self.is_empty_entry(e) {
                slot.store(self.encode(tag, facts, work), Ordering::Relaxed);
                return true;
            }
            if self.tag_of(e) == tag {
                let merged = self.decode(e).merge(facts);
                let work = work.max(self.work_of(e) * 4);
                slot.store(self.encode(tag, merged, work), Ordering::Relaxed);
                return false;
            }
            let w = self.work_of(e);
            if victim.is_none_or(|(_, v)| w < v) {
                victim = Some((slot, w));
            }
        }
        if let Some((slot, w)) = victim {
            if w * 4 <= work {
                slot.store(self.encode(tag, facts, work), Ordering::Relaxed);
            }
        }
        false
    }

    /// Writes every entry of this array into `to` (larger), releasing this array's memory
    /// as it goes (what other threads read of it afterwards is empty: a miss); returns the
    /// number of entries written into empty slots of `to`.
    fn move_into(&self, to: &DenseArray) -> u64 {
        const CHUNK: usize = (2 << 20) / std::mem::size_of::<DenseBucket>();
        let mut copied = 0;
        for start in (0..self.buckets.len()).step_by(CHUNK) {
            let end = (start + CHUNK).min(self.buckets.len());
            for i in start..end {
                for slot in &self.buckets[i].0 {
                    let e = slot.load(Ordering::Relaxed);
                    if self.is_empty_entry(e) {
                        continue;
                    }
                    // The mix: the tag's high bits above the bucket index's, the index
                    // undoing the stride's contribution.
                    let tag = self.tag_of(e);
                    let stride = (tag & 63) as u8;
                    let low = (i as u64 ^ (stride as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) & ((1 << self.bits) - 1);
                    let h = (tag >> 6) << self.bits | low;
                    let new_tag = (h >> to.bits) << 6 | stride as u64;
                    copied += to.put_at(to.index(h, stride), new_tag, self.decode(e), self.work_of(e) * 4) as u64;
                }
            }
            self.buckets.release(start..end);
        }
        copied
    }
}

/// A bijection of 64-bit words that spreads every input bit over the output (the
/// SplitMix64 finaliser: each step is invertible).
#[inline]
fn mix_bijective(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
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
        let view: Table<u128> = Table::shared(SharedTable::Locked(Arc::new(t)));
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
        // Readers call a bucket a writer holds a miss, so under this much writing they may
        // find nothing; once the writers are done every entry reads back whole.
        let after = (0..12u128).filter(|&i| t.get(0, key(i), 8).inspect(|b| assert_eq!(*b, expect(key(i)))).is_some());
        assert!(hits + after.count() > 0);
    }

    #[test]
    fn a_writer_stuck_in_a_bucket_stalls_no_one() {
        // A writer preempted while it holds a bucket: its sequence number stays odd. Readers
        // of the bucket see a miss and writers drop their facts, at once, instead of
        // spinning until the writer runs again (before the fix both spun forever: the
        // probe below would never answer; a minute is for a machine busy with other work).
        let t = Arc::new(AtomicTable::new(128));
        t.put(0, 9, 8, Facts::exact(1), 3);
        assert_eq!(t.get(0, 9, 8), Some(Facts::exact(1)));
        t.buckets[0].seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        let probe = t.clone();
        std::thread::spawn(move || {
            let read = probe.get(0, 9, 8);
            probe.put(0, 10, 8, Facts::exact(2), 3);
            let _ = tx.send(read);
        });
        let read = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("a probe of a held bucket answers");
        assert_eq!(read, None);
        t.buckets[0].seq.fetch_add(1, Ordering::Relaxed);
        assert_eq!(t.get(0, 9, 8), Some(Facts::exact(1)));
        assert_eq!(t.get(0, 10, 8), None, "the write during the lock was dropped");
    }

    #[test]
    fn the_dense_table_gives_back_exactly_what_fits() {
        let t = DenseTable::new(4 << 20);
        assert_eq!(t.bytes(), 4 << 20);
        assert_eq!(t.array().excluded_bits(), 3);
        // Keys that share a bucket index or a tag are still told apart.
        for k in 1..20_000u64 {
            t.put(k * 0x1_0001, 8, Facts::exact((k % 3) as u8), 10);
        }
        let mut found = 0;
        for k in 1..20_000u64 {
            if let Some(f) = t.get(k * 0x1_0001, 8) {
                assert_eq!(f, Facts::exact((k % 3) as u8), "{k}");
                found += 1;
            }
            assert_eq!(t.get(k * 0x1_0001, 9), None, "another stride is another region");
        }
        assert!(found > 15_000, "{found}");
        // Facts merge; what does not fit is dropped, never distorted.
        t.put(77, 8, Facts { excluded: 0b1, upper: 200 }, 1);
        t.put(77, 8, Facts { excluded: 0b10, upper: 9 }, 1);
        assert_eq!(t.get(77, 8), Some(Facts { excluded: 0b11, upper: 9 }));
        t.put(78, 8, Facts::exact(5), 1);
        let f = t.get(78, 8).unwrap();
        assert!(f.excluded == 0b111 && f.upper == 5 && f.value().is_none());
        t.put(79, 8, Facts::exact(20), 1);
        assert_eq!(t.get(79, 8), Some(Facts { excluded: 0b111, upper: u8::MAX }));
    }

    #[test]
    fn the_dense_table_keeps_costly_entries() {
        let t = DenseTable::new(4 << 20);
        // One bucket's worth of keys: find keys that land in bucket 0 with stride 8.
        let keys: Vec<u64> = (1..).filter(|&k| t.array().locate(k, 8).0 == 0).take(40).collect();
        t.put(keys[0], 8, Facts::exact(2), 40);
        for &k in &keys[1..] {
            t.put(k, 8, Facts::exact(1), 2);
        }
        assert_eq!(t.get(keys[0], 8), Some(Facts::exact(2)));
        let held = keys.iter().filter(|&&k| t.get(k, 8).is_some()).count();
        assert_eq!(held, DENSE_SLOTS);
    }

    #[test]
    fn the_dense_table_doubles_and_keeps_its_entries() {
        // A budget of 64 MiB: it starts at 4 MiB and doubles four times as it fills.
        let t = Arc::new(DenseTable::new(64 << 20));
        assert_eq!((t.bytes(), t.max_bytes()), (4 << 20, 64 << 20));
        let n = 3_000_000u64;
        let mut view = t.view();
        let key = |k: u64| k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for k in 0..n {
            view.put(key(k), (k % 5) as u8 + 3, Facts::exact((k % 4) as u8), 8);
        }
        assert_eq!(t.bytes(), 64 << 20, "doubled up to the budget and no further");
        // The entries came through the copies, bit for bit; only the few that met a full
        // bucket before a doubling (a bucket of 8 at half load overflows about 2 % of the
        // time) were replaced.
        let kept = (0..n).filter(|&k| t.get(key(k), (k % 5) as u8 + 3) == Some(Facts::exact((k % 4) as u8))).count();
        assert!(kept as u64 > n * 98 / 100, "{kept} of {n} kept");
        assert!((0..n).all(|k| t.get(key(k), (k % 5) as u8 + 4).is_none_or(|_| (k % 5) == 4)));
        // A view made before the doublings took up the array in use.
        assert!(Arc::ptr_eq(&view.array, &t.array()));
    }

    #[test]
    fn the_mixer_is_a_bijection() {
        // Each step inverts: x ^ x >> k by repeated shifts, a multiplication by an odd
        // constant by its inverse modulo 2^64 (Newton's iteration).
        let inv = |c: u64| (0..6).fold(c, |x, _| x.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(x))));
        let unshift = |y: u64, k: u32| (1..=64 / k).fold(y, |x, i| x ^ y >> (k * i));
        let unmix = |y: u64| {
            let x = unshift(y, 31).wrapping_mul(inv(0x94D0_49BB_1331_11EB));
            let x = unshift(x, 27).wrapping_mul(inv(0xBF58_476D_1CE4_E5B9));
            unshift(x, 30)
        };
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..100_000 {
            assert_eq!(unmix(mix_bijective(x)), x);
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        assert_eq!(unmix(mix_bijective(u64::MAX)), u64::MAX);
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
