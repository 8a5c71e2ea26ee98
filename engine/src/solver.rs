//! The search: nimbers of regions and the question "is the nimber of G equal to k" (is
//! `G + *k` a loss for the player to move), answered with a transposition table of bounds.
//!
//! For a single region G, `g(G) = k` holds iff every value below k appears among G's options
//! and k does not. Options split into regions: all but the hardest get exact nimbers (folded
//! into the target by XOR), and the hardest is asked the question recursively (Lemoine and
//! Viennot). An option of the target value is looked for first — one settles the question —
//! and only then the values below it, options found on the way being skipped afterwards.
//! Options whose regions are all known (trivial, paired, in a database or in the table) are
//! settled before any search, expansion stops at the first one known to have the asked value,
//! and the rest are searched smallest first, central moves first among equals.

use crate::bits::Bits;
use crate::board::Board;
use crate::db::DbSet;
use crate::facts::{Facts, Outcome};
use crate::pairing::half_turn_certificate;
use crate::region::{centre_distance, for_each_component, normalize, prune_tufts, stays_connected, AnyRegion, Region};
use crate::table::{AtomicTable, Table, TableStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a solve computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The exact nimber (and so the outcome).
    Nimber,
    /// Only whether the player to move wins; the nimber is reported when it is 0.
    Outcome,
}

/// Solver settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Memory budget of the transposition tables, in bytes.
    pub tt_bytes: usize,
    /// Use the half-turn pairing certificate.
    pub pairing: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { tt_bytes: 1 << 30, pairing: true }
    }
}

/// Why a search stopped before its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Interrupted {
    /// The cancel flag was raised.
    #[error("search cancelled")]
    Cancelled,
    /// The node budget ran out.
    #[error("node budget exhausted")]
    Budget,
}

/// Result alias for searches that may be interrupted.
pub type Res<T> = Result<T, Interrupted>;

/// The answer for one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solution {
    /// Who wins.
    pub outcome: Outcome,
    /// The nimber, when computed (always in [`Mode::Nimber`]).
    pub nimber: Option<u8>,
}

/// Options a node collects before searching: regions of each unsettled option, stored flat.
#[derive(Default)]
struct Frame {
    comps: Vec<AnyRegion>,
    children: Vec<Child>,
    /// Bit v: some option is known to have value v.
    present: u64,
    /// An upper bound on the node's nimber (moves available, half the cells).
    bound: u8,
    /// Expansion stopped early at an option of the value asked for.
    hit: bool,
}

impl Frame {
    /// True when some option is known to have value `v`.
    #[inline]
    fn shows(&self, v: u8) -> bool {
        v < 64 && self.present >> v & 1 == 1
    }

    /// Records that some option has value `v` (values of 64 and above are not recorded).
    #[inline]
    fn record(&mut self, v: u8) {
        if v < 64 {
            self.present |= 1 << v;
        }
    }
}

#[derive(Clone, Copy)]
struct Child {
    /// Unsettled regions are `comps[start..start+len]`, hardest first.
    start: u32,
    len: u32,
    /// XOR of the values of the option's settled regions.
    xor: u8,
    /// Search order: sum of squared region sizes, then distance of the move from the centre.
    cost: u32,
    /// The option's value is known (it was found, or settled on the way).
    done: bool,
}

/// A word type with its own transposition table in the solver.
trait Word: Bits {
    fn table(s: &Solver) -> &Table<Self>;
    fn table_mut(s: &mut Solver) -> &mut Table<Self>;
    fn any(r: Region<Self>) -> AnyRegion;
}

impl Word for u64 {
    fn table(s: &Solver) -> &Table<u64> {
        &s.tt64
    }
    fn table_mut(s: &mut Solver) -> &mut Table<u64> {
        &mut s.tt64
    }
    fn any(r: Region<u64>) -> AnyRegion {
        AnyRegion::Narrow(r)
    }
}

impl Word for u128 {
    fn table(s: &Solver) -> &Table<u128> {
        &s.tt128
    }
    fn table_mut(s: &mut Solver) -> &mut Table<u128> {
        &mut s.tt128
    }
    fn any(r: Region<u128>) -> AnyRegion {
        AnyRegion::Wide(r)
    }
}

/// How often (in nodes) the cancel flag, budget and progress callback are looked at.
const CHECK_EVERY: u64 = 1 << 12;

/// Transposition tables for the solvers of several threads ([`Solver::set_shared`]).
#[derive(Clone)]
pub struct SharedTables {
    narrow: Arc<AtomicTable>,
    wide: Arc<AtomicTable>,
}

impl SharedTables {
    /// Tables of at most `tt_bytes` in all: half for regions of up to 64 cells, half for
    /// wider ones. (A table is a power of two of buckets, so a power-of-two budget is used
    /// whole; memory is taken only as it is touched, so on boards of up to 64 cells the
    /// wide table costs nothing.)
    pub fn new(tt_bytes: usize) -> SharedTables {
        SharedTables {
            narrow: Arc::new(AtomicTable::new(tt_bytes / 2)),
            wide: Arc::new(AtomicTable::new(tt_bytes / 2)),
        }
    }
}

/// A single-threaded solver with its caches; reuse it across positions to share them.
pub struct Solver {
    tt64: Table<u64>,
    tt128: Table<u128>,
    dbs: Arc<DbSet>,
    pairing: bool,
    nodes: u64,
    pool: Vec<Frame>,
    cancel: Option<Arc<AtomicBool>>,
    budget: u64,
    next_check: u64,
    progress: Option<Box<dyn FnMut(u64) + Send>>,
}

impl Solver {
    /// A solver with the given settings and databases.
    pub fn new(config: &Config, dbs: Arc<DbSet>) -> Solver {
        Solver {
            tt64: Table::new(config.tt_bytes * 3 / 4),
            tt128: Table::new(config.tt_bytes / 4),
            dbs,
            pairing: config.pairing,
            nodes: 0,
            pool: Vec::new(),
            cancel: None,
            budget: u64::MAX,
            next_check: CHECK_EVERY,
            progress: None,
        }
    }

    /// Replaces this solver's transposition tables with `tables`, shared with the solvers
    /// of other threads: what any of them learns, all use.
    pub fn set_shared(&mut self, tables: &SharedTables) {
        self.tt64 = Table::shared(tables.narrow.clone());
        self.tt128 = Table::shared(tables.wide.clone());
    }

    /// Search nodes expanded so far.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// Bytes held by the transposition tables.
    pub fn table_bytes(&self) -> usize {
        self.tt64.allocated_bytes() + self.tt128.allocated_bytes()
    }

    /// Transposition table counters (both word sizes added).
    pub fn table_stats(&self) -> TableStats {
        let (a, b) = (self.tt64.stats(), self.tt128.stats());
        TableStats { entries: a.entries + b.entries, replaced: a.replaced + b.replaced }
    }

    /// Stops the search with [`Interrupted::Cancelled`] once `flag` is raised.
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    /// Stops the search with [`Interrupted::Budget`] after `nodes` more nodes.
    pub fn set_budget(&mut self, nodes: u64) {
        self.budget = self.nodes.saturating_add(nodes);
    }

    /// Calls `f` with the node count every few thousand nodes.
    pub fn set_progress(&mut self, f: Box<dyn FnMut(u64) + Send>) {
        self.progress = Some(f);
    }

    /// Solves a whole board.
    pub fn solve(&mut self, board: &Board, mode: Mode) -> Res<Solution> {
        if self.pairing && half_turn_certificate(board) {
            return Ok(Solution { outcome: Outcome::Second, nimber: Some(0) });
        }
        let (mut regions, mut xor) = board_regions(board);
        regions.sort_by_key(|r| r.cells());
        match mode {
            Mode::Nimber => {
                for r in regions {
                    xor ^= self.nimber(r)?;
                }
                Ok(Solution { outcome: Outcome::of_nimber(xor), nimber: Some(xor) })
            }
            Mode::Outcome => {
                let Some(largest) = regions.pop() else {
                    return Ok(Solution { outcome: Outcome::of_nimber(xor), nimber: (xor == 0).then_some(0) });
                };
                for r in regions {
                    xor ^= self.nimber(r)?;
                }
                let loss = self.is_value(largest, xor)?;
                Ok(Solution { outcome: Outcome::of(!loss), nimber: loss.then_some(0) })
            }
        }
    }

    /// The nimber of a region.
    pub fn nimber(&mut self, r: AnyRegion) -> Res<u8> {
        match r {
            AnyRegion::Narrow(x) => self.nimber_g(x),
            AnyRegion::Wide(x) => self.nimber_g(x),
        }
    }

    /// True when the nimber of a region is `k`.
    pub fn is_value(&mut self, r: AnyRegion, k: u8) -> Res<bool> {
        match r {
            AnyRegion::Narrow(x) => self.is_value_g(x, k),
            AnyRegion::Wide(x) => self.is_value_g(x, k),
        }
    }

    /// The value of a region when it costs no search: small, paired, in a database or
    /// known exactly to the table.
    fn known<B: Word>(&self, r: &Region<B>) -> Option<u8> {
        self.settled(r).or_else(|| B::table(self).get(r.bits, r.stride).and_then(|b| b.value()))
    }

    /// The value of a region without the table: small, paired or in a database.
    fn settled<B: Word>(&self, r: &Region<B>) -> Option<u8> {
        match r.cells() {
            0 | 1 => return Some(0),
            2 | 3 => return Some(1),
            _ => {}
        }
        if self.pairing && r.half_turn_paired() {
            return Some(0);
        }
        self.dbs.lookup(&B::any(*r))
    }

    /// What the table knows of a region, or the region's value when it is settled without
    /// search (one table probe for both).
    fn facts<B: Word>(&self, r: &Region<B>) -> Result<Facts, u8> {
        if let Some(v) = self.settled(r) {
            return Err(v);
        }
        let b = B::table(self).get(r.bits, r.stride).unwrap_or(Facts::UNKNOWN);
        match b.value() {
            Some(v) => Err(v),
            None => Ok(b),
        }
    }

    /// The value of a region when it needs neither search nor table: fewer than four
    /// cells, paired by the half-turn (with pairing on) or held by a database.
    pub fn settled_value(&self, r: &AnyRegion) -> Option<u8> {
        match r {
            AnyRegion::Narrow(x) => self.settled(x),
            AnyRegion::Wide(x) => self.settled(x),
        }
    }

    /// Everything known of a region's nimber without search: settled, or the table's entry.
    pub fn bounds(&self, r: &AnyRegion) -> Facts {
        let facts = match r {
            AnyRegion::Narrow(x) => self.facts(x),
            AnyRegion::Wide(x) => self.facts(x),
        };
        facts.unwrap_or_else(Facts::exact)
    }

    fn known_any(&self, r: &AnyRegion) -> Option<u8> {
        match r {
            AnyRegion::Narrow(x) => self.known(x),
            AnyRegion::Wide(x) => self.known(x),
        }
    }

    fn store<B: Word>(&mut self, r: &Region<B>, b: Facts, since: u64) {
        let nodes = self.nodes - since;
        B::table_mut(self).put(r.bits, r.stride, b, nodes);
    }

    fn nimber_g<B: Word>(&mut self, r: Region<B>) -> Res<u8> {
        let mut b = match self.facts(&r) {
            Ok(b) => b,
            Err(v) => return Ok(v),
        };
        let since = self.nodes;
        let mut f = self.expand(&r, None)?;
        b.upper = b.upper.min(f.bound);
        // Invariant: every value below k appears among the options.
        let mut k = b.floor();
        while k < b.upper {
            if f.shows(k) || b.rules_out(k) || self.find_child(&mut f, k)? {
                k += 1;
            } else {
                break;
            }
        }
        self.pool.push(f);
        self.store(&r, Facts::exact(k), since);
        Ok(k)
    }

    fn is_value_g<B: Word>(&mut self, r: Region<B>, n: u8) -> Res<bool> {
        let mut b = match self.facts(&r) {
            Ok(b) => b,
            Err(v) => return Ok(v == n),
        };
        b.upper = b.upper.min((r.cells() / 2) as u8);
        if b.rules_out(n) {
            return Ok(false);
        }
        let since = self.nodes;
        let mut f = self.expand(&r, Some(n))?;
        b.upper = b.upper.min(f.bound);
        let answer = if f.hit {
            b.exclude(n);
            Ok(false)
        } else {
            self.decide(&mut f, &mut b, n)
        };
        // Values some option is known to have are values the region does not have.
        b.excluded |= f.present as u32;
        self.pool.push(f);
        let answer = answer?;
        self.store(&r, b, since);
        Ok(answer)
    }

    /// Decides `g = n` for an expanded node whose facts so far are `b`, updating `b`.
    ///
    /// An option of value n is looked for first: a query is usually asked of an option
    /// its parent expects not to have the value, and one such option settles that at once.
    /// Only when none has it are the values below n looked for.
    fn decide(&mut self, f: &mut Frame, b: &mut Facts, n: u8) -> Res<bool> {
        if b.rules_out(n) || f.shows(n) {
            b.exclude(n);
            return Ok(false);
        }
        if b.upper > n {
            if self.find_child(f, n)? {
                b.exclude(n);
                return Ok(false);
            }
            b.upper = n;
        }
        // Now g ≤ n; g = n iff every value below n appears among the options.
        for k in b.floor()..n {
            if f.shows(k) || b.rules_out(k) {
                continue;
            }
            if !self.find_child(f, k)? {
                *b = Facts::exact(k);
                return Ok(false);
            }
        }
        *b = Facts::exact(n);
        Ok(true)
    }

    /// Looks for an unsettled option of value `k`; options settled on the way are marked.
    fn find_child(&mut self, f: &mut Frame, k: u8) -> Res<bool> {
        for i in 0..f.children.len() {
            if f.children[i].done {
                continue;
            }
            // Settle all regions of the option but the hardest.
            while f.children[i].len > 1 {
                let c = f.children[i];
                let v = self.nimber(f.comps[(c.start + c.len - 1) as usize])?;
                f.children[i].xor ^= v;
                f.children[i].len -= 1;
            }
            let c = f.children[i];
            let hardest = f.comps[c.start as usize];
            if self.is_value(hardest, k ^ c.xor)? {
                f.children[i].done = true;
                return Ok(true);
            }
            if let Some(v) = self.known_any(&hardest) {
                f.children[i].done = true;
                f.record(v ^ c.xor);
            }
        }
        Ok(false)
    }

    /// Counts a node and honours cancellation, budget and progress.
    #[inline]
    fn tick(&mut self) -> Res<()> {
        self.nodes += 1;
        if self.nodes >= self.next_check {
            self.next_check = self.nodes + CHECK_EVERY;
            if let Some(p) = self.progress.as_mut() {
                p(self.nodes);
            }
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(Interrupted::Cancelled);
            }
            if self.nodes >= self.budget {
                return Err(Interrupted::Budget);
            }
        }
        Ok(())
    }

    /// Generates the options of a region and settles those that need no search. With
    /// `stop = Some(v)`, returns as soon as an option is known to have value v (`f.hit`).
    ///
    /// Options go in batches: each batch is split into canonical regions with their table
    /// buckets prefetched, then looked up, so the cache misses overlap.
    fn expand<B: Word>(&mut self, r: &Region<B>, stop: Option<u8>) -> Res<Frame> {
        const BATCH: usize = 4;
        self.tick()?;
        let mut f = self.pool.pop().unwrap_or_default();
        f.comps.clear();
        f.children.clear();
        f.present = 0;
        f.hit = false;
        let s = r.stride as u32;
        let (hor, ver) = r.moves();
        f.bound = (hor.count() + ver.count()).min(r.cells() / 2).min(255) as u8;
        let (h, w) = (r.h as u32, r.w as u32);
        let mut pending = [(ver, s), (hor, 1)];
        let mut kind = 0;
        while kind < 2 {
            // First pass over a batch: regions of each option, buckets prefetched.
            let first = f.children.len();
            while f.children.len() - first < BATCH && kind < 2 {
                let (starts, step) = &mut pending[kind];
                if starts.is_empty() {
                    kind += 1;
                    continue;
                }
                let (i, step) = (starts.lowest(), *step);
                *starts ^= B::bit(i);
                let rest = r.bits ^ B::bit(i) ^ B::bit(i + step);
                let start = f.comps.len();
                let mut xor = 0u8;
                let mut add = |c: B| {
                    let c = prune_tufts(c, s);
                    match c.count() {
                        0 | 1 => {}
                        2 | 3 => xor ^= 1,
                        _ => {
                            let p = normalize(c, s);
                            self.prefetch(&p);
                            f.comps.push(p);
                        }
                    }
                };
                if stays_connected(r.bits, i, s, h, w, step == s) {
                    add(rest);
                } else {
                    for_each_component(rest, s, add);
                }
                let len =
                    if f.comps.len() - start > 1 { cancel_pairs(&mut f.comps[start..]) } else { f.comps.len() - start };
                f.comps.truncate(start + len);
                // Tie-break between options of equal cost: moves nearer the centre first
                // (squared distance, in half-cells, of the domino's centre from the box's).
                let centre = centre_distance(i, s, h, w, step == s);
                f.children.push(Child { start: start as u32, len: len as u32, xor, cost: centre, done: false });
            }
            // Second pass: settle known regions, compacting the unknown ones in place.
            let mut out = f.children.get(first).map_or(f.comps.len(), |c| c.start as usize);
            let mut kept = first;
            for ci in first..f.children.len() {
                let mut c = f.children[ci];
                let start = out;
                for j in c.start as usize..(c.start + c.len) as usize {
                    let p = f.comps[j];
                    match self.known_any(&p) {
                        Some(v) => c.xor ^= v,
                        None => {
                            f.comps[out] = p;
                            out += 1;
                        }
                    }
                }
                if out == start {
                    f.record(c.xor);
                    if stop == Some(c.xor) {
                        f.hit = true;
                    }
                    continue;
                }
                let parts = &mut f.comps[start..out];
                parts.sort_unstable_by_key(|p| std::cmp::Reverse(p.cells()));
                // Smaller regions first (sum of squared sizes); splitting moves come early.
                c.cost += parts.iter().map(|p| p.cells() * p.cells()).sum::<u32>() << 17;
                c.start = start as u32;
                c.len = (out - start) as u32;
                f.children[kept] = c;
                kept += 1;
            }
            f.comps.truncate(out);
            f.children.truncate(kept);
            if f.hit {
                return Ok(f);
            }
        }
        f.children.sort_unstable_by_key(|c| c.cost);
        Ok(f)
    }

    fn prefetch(&self, r: &AnyRegion) {
        match r {
            AnyRegion::Narrow(x) => self.tt64.prefetch(x.bits, x.stride),
            AnyRegion::Wide(x) => self.tt128.prefetch(x.bits, x.stride),
        }
    }
}

/// Moves pairs of congruent regions (their values cancel under XOR) to the end of `parts`
/// and returns how many regions remain before them.
#[inline]
fn cancel_pairs(parts: &mut [AnyRegion]) -> usize {
    if parts.len() < 2 {
        return parts.len();
    }
    parts.sort_unstable();
    let mut out = 0;
    let mut i = 0;
    while i < parts.len() {
        if i + 1 < parts.len() && parts[i] == parts[i + 1] {
            i += 2;
        } else {
            parts[out] = parts[i];
            out += 1;
            i += 1;
        }
    }
    out
}

/// The regions of a board that need search, and the XOR of the values of the others
/// (fewer than four cells). Congruent pairs cancel.
pub fn board_regions(board: &Board) -> (Vec<AnyRegion>, u8) {
    let mut xor = 0;
    let mut out = Vec::new();
    for_each_component(board.empty(), board.cols(), |c| match c.count_ones() {
        0 | 1 => {}
        2 | 3 => xor ^= 1,
        _ => out.push(normalize(c, board.cols())),
    });
    let len = cancel_pairs(&mut out);
    out.truncate(len);
    (out, xor)
}
