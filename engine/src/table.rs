//! The transposition table: what is known about the nimber of each canonical region — the
//! exact value, or values it is known not to have and an upper bound.
//!
//! The table starts small and doubles while it is less than its memory budget, so a small
//! solve touches little memory; at the budget it replaces, within a bucket of four slots,
//! the entry that cost the fewest search nodes to establish.

use crate::bits::Bits;

/// What is known about the nimber `g` of one region.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Bounds {
    /// Bit `j` set: `g ≠ j` (for `j < 32`).
    pub excluded: u32,
    /// `g ≤ upper`.
    pub upper: u8,
}

impl Bounds {
    /// Nothing known.
    pub const UNKNOWN: Bounds = Bounds { excluded: 0, upper: u8::MAX };

    /// Exactly `v` (values of 32 and above are held as an upper bound with every smaller
    /// value excluded, which the representation cannot express; they are kept as unknown).
    pub fn exact(v: u8) -> Bounds {
        if v >= 32 {
            return Bounds::UNKNOWN;
        }
        Bounds { excluded: low_bits(v as u32), upper: v }
    }

    /// `g ≥ floor()`: the number of consecutive excluded values from 0.
    #[inline]
    pub fn floor(&self) -> u8 {
        (self.excluded.trailing_ones() as u8).min(self.upper)
    }

    /// The value, when it is known exactly.
    #[inline]
    pub fn value(&self) -> Option<u8> {
        (self.floor() == self.upper).then_some(self.upper)
    }

    /// True when `g = k` is ruled out.
    #[inline]
    pub fn rules_out(&self, k: u8) -> bool {
        k > self.upper || (k < 32 && self.excluded >> k & 1 == 1)
    }

    /// Records `g ≠ k`.
    #[inline]
    pub fn exclude(&mut self, k: u8) {
        if k < 32 {
            self.excluded |= 1 << k;
        }
        if k == self.upper {
            self.upper = self.upper.saturating_sub(1);
        }
    }

    /// A 5-byte form for caches on disk: `excluded` (little-endian) and `upper`.
    pub fn to_bytes(self) -> [u8; 5] {
        let e = self.excluded.to_le_bytes();
        [e[0], e[1], e[2], e[3], self.upper]
    }

    /// Reads [`Bounds::to_bytes`]; `None` unless `v` is 5 bytes.
    pub fn from_bytes(v: &[u8]) -> Option<Bounds> {
        let v: &[u8; 5] = v.try_into().ok()?;
        Some(Bounds { excluded: u32::from_le_bytes([v[0], v[1], v[2], v[3]]), upper: v[4] })
    }

    /// Combines two sets of facts about the same region.
    #[inline]
    pub fn merge(self, other: Bounds) -> Bounds {
        Bounds { excluded: self.excluded | other.excluded, upper: self.upper.min(other.upper) }
    }
}

#[inline]
fn low_bits(n: u32) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

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
#[derive(Clone, Copy, Default)]
#[repr(align(128))]
struct Bucket<B: Bits>([Slot<B>; BUCKET]);

/// A bounded hash table from canonical regions to [`Bounds`].
pub struct Table<B: Bits> {
    buckets: Vec<Bucket<B>>,
    max_buckets: usize,
    stats: TableStats,
}

impl<B: Bits> Table<B> {
    /// A table that will grow to at most `budget_bytes` of memory.
    pub fn new(budget_bytes: usize) -> Table<B> {
        let fit = (budget_bytes / std::mem::size_of::<Bucket<B>>()).max(1);
        let max_buckets = if fit.is_power_of_two() { fit } else { fit.next_power_of_two() / 2 };
        let buckets = vec![Bucket::default(); INITIAL_BUCKETS.min(max_buckets)];
        Table { buckets, max_buckets, stats: TableStats::default() }
    }

    /// Bytes allocated now.
    pub fn allocated_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket<B>>()
    }

    /// Use counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    #[inline]
    fn bucket(&self, key: B, stride: u8) -> usize {
        let h = key.mix() ^ (stride as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
        (h as usize) & (self.buckets.len() - 1)
    }

    /// Hints the processor to fetch the bucket of `(key, stride)`, so that a batch of
    /// lookups overlaps its cache misses.
    #[inline]
    pub fn prefetch(&self, key: B, stride: u8) {
        let b = self.bucket(key, stride);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is only a hint; it never faults, and the address is inside
        // the bucket vector.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let line = self.buckets.as_ptr().add(b) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(line);
            _mm_prefetch::<_MM_HINT_T0>(line.add(64));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = b;
    }

    /// What is known about region `(key, stride)`.
    #[inline]
    pub fn get(&self, key: B, stride: u8) -> Option<Bounds> {
        let b = self.bucket(key, stride);
        self.buckets[b]
            .0
            .iter()
            .find(|s| s.key == key && s.stride == stride)
            .map(|s| Bounds { excluded: s.excluded, upper: s.upper })
    }

    /// Adds facts about region `(key, stride)`, established with about `nodes` search nodes.
    pub fn put(&mut self, key: B, stride: u8, bounds: Bounds, nodes: u64) {
        let work = (64 - nodes.leading_zeros()) as u8;
        let b = self.bucket(key, stride);
        let bucket = &mut self.buckets[b].0;
        if let Some(s) = bucket.iter_mut().find(|s| s.key == key && s.stride == stride) {
            let m = Bounds { excluded: s.excluded, upper: s.upper }.merge(bounds);
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
        let bigger = vec![Bucket::default(); self.buckets.len() * 2];
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

/// A table several solvers (threads of one process) share for their large regions (each
/// solver says from which size on, [`crate::Solver::set_shared`]): the searches of large
/// regions are long, so what one thread learns saves the others much work, while the lock
/// per probe is paid rarely. Each solver keeps its own [`Table`] for everything; this one
/// is consulted on a miss and fed on every store. A stripe that reaches its capacity is
/// emptied (simple, and rare at a sensible budget).
pub struct SharedTable {
    stripes: Vec<std::sync::Mutex<SharedMap>>,
    per_stripe: usize,
}

const STRIPES: usize = 64;

/// One stripe: keys are canonical regions, already well mixed by the stripe choice, so a
/// cheap multiplicative hash does.
type SharedMap = std::collections::HashMap<(u128, u8), Bounds, std::hash::BuildHasherDefault<MixHasher>>;

/// A fast hasher for region keys (the default SipHash costs more than the lookup).
#[derive(Default)]
pub struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u8(*b);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
}

impl SharedTable {
    /// A shared table of about `budget_bytes`.
    pub fn new(budget_bytes: usize) -> SharedTable {
        // About 64 bytes per entry in a hash map.
        let per_stripe = (budget_bytes / 64 / STRIPES).max(16);
        let stripes = (0..STRIPES).map(|_| Default::default()).collect();
        SharedTable { stripes, per_stripe }
    }

    fn stripe(&self, key: u128, stride: u8) -> &std::sync::Mutex<SharedMap> {
        let h = (key as u64 ^ (key >> 64) as u64 ^ stride as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.stripes[(h >> 58) as usize % STRIPES]
    }

    /// What the table knows about region `(key, stride)`.
    pub fn get(&self, key: u128, stride: u8) -> Bounds {
        let map = self.stripe(key, stride).lock().expect("shared table lock poisoned");
        map.get(&(key, stride)).copied().unwrap_or(Bounds::UNKNOWN)
    }

    /// Adds facts about region `(key, stride)`.
    pub fn put(&self, key: u128, stride: u8, bounds: Bounds) {
        let mut map = self.stripe(key, stride).lock().expect("shared table lock poisoned");
        if map.len() >= self.per_stripe && !map.contains_key(&(key, stride)) {
            map.clear();
        }
        let e = map.entry((key, stride)).or_insert(Bounds::UNKNOWN);
        *e = e.merge(bounds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_table_merges_and_stays_bounded() {
        let t = SharedTable::new(64 * STRIPES * 16);
        let mut not_one = Bounds::UNKNOWN;
        not_one.exclude(1);
        t.put(5, 8, not_one);
        t.put(5, 8, Bounds { excluded: 1, upper: 7 });
        assert_eq!(t.get(5, 8), Bounds { excluded: 3, upper: 7 });
        assert_eq!(t.get(5, 9), Bounds::UNKNOWN);
        for k in 0..10_000u128 {
            t.put(k << 70, 8, Bounds::exact(2));
        }
        let held: usize = t.stripes.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= 16 * STRIPES, "{held}");
    }

    #[test]
    fn bounds_track_exclusions_and_exact_values() {
        let b = Bounds { excluded: 0x8000_0005, upper: 40 };
        assert_eq!(Bounds::from_bytes(&b.to_bytes()), Some(b));
        assert_eq!(Bounds::from_bytes(&[1, 2, 3]), None);
        let mut b = Bounds::UNKNOWN;
        assert_eq!(b.value(), None);
        b.exclude(0);
        b.exclude(2);
        assert_eq!(b.floor(), 1);
        assert!(b.rules_out(2) && !b.rules_out(1));
        let c = b.merge(Bounds { excluded: 0, upper: 1 });
        assert_eq!(c.value(), Some(1));
        assert_eq!(Bounds::exact(3).value(), Some(3));
        assert!(Bounds::exact(3).rules_out(4) && Bounds::exact(3).rules_out(0));
        assert_eq!(Bounds::exact(0).value(), Some(0));
    }

    #[test]
    fn table_grows_keeps_and_replaces() {
        let mut t: Table<u64> = Table::new(1 << 16);
        for k in 1..2000u64 {
            t.put(k, 8, Bounds::exact((k % 7) as u8), k);
        }
        assert!(t.allocated_bytes() <= 1 << 16);
        let found = (1..2000u64).filter(|&k| t.get(k, 8) == Some(Bounds::exact((k % 7) as u8))).count();
        assert!(found > 1000, "only {found} kept");
        assert!(t.stats().replaced > 0);
        assert_eq!(t.get(5, 9), None);
        // Merging facts about one key.
        t.put(5000, 3, Bounds { excluded: 1, upper: 9 }, 1);
        t.put(5000, 3, Bounds { excluded: 0, upper: 1 }, 1);
        assert_eq!(t.get(5000, 3).unwrap().value(), Some(1));
    }
}
