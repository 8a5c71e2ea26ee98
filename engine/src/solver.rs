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
use crate::question::SharedFact;
use crate::region::{
    centre_distance, for_each_part, normalize, option_cost, stays_connected, walled_cuts, AnyRegion, Region,
};
use crate::table::{AtomicTable, DenseTable, SharedTable, Table, TableStats};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a solve computes. Its text form is `nimber` or `outcome`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum Mode {
    /// The exact nimber (and so the outcome).
    Nimber,
    /// Only whether the player to move wins; the nimber is reported when it is 0.
    Outcome,
}

impl Mode {
    /// `nimber` or `outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nimber => "nimber",
            Mode::Outcome => "outcome",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a mode: nimber or outcome")]
pub struct BadMode(pub String);

impl std::str::FromStr for Mode {
    type Err = BadMode;

    fn from_str(s: &str) -> Result<Mode, BadMode> {
        match s {
            "nimber" => Ok(Mode::Nimber),
            "outcome" => Ok(Mode::Outcome),
            _ => Err(BadMode(s.to_string())),
        }
    }
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

/// How a node finds out whether its value is one it is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Search {
    /// "Is the value n" (Lemoine and Viennot), with the facts of the table: an option of
    /// value n is looked for first, then each value below n. The default: fewest nodes.
    #[default]
    Values,
    /// Set queries (Beling and Rogalski): "the value, if it lies in this set"; each option
    /// is asked once, for its value among the node's remaining candidates. Kept to compare:
    /// 2–30 % more nodes on the bench boards (docs/performance.md; `cram solve --search sets`).
    Sets,
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
    /// A database was found damaged ([`DbSet::damage`] says where); the search would
    /// still be exact without it, but a run must not go on quietly without its databases.
    #[error("a database is damaged")]
    Database,
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
    /// Cells of the node's region.
    cells: u32,
    /// Bit v: some option is known to have value v.
    present: u64,
    /// An upper bound on the node's nimber (moves available, half the cells).
    bound: u8,
    /// Expansion stopped early: every value asked for is the value of some option.
    hit: bool,
    /// Number of options (moves).
    moves: u32,
    /// Options answered so far: their value known, or known to lie outside what they were
    /// asked.
    known: u32,
    /// Options answered "not in the set asked".
    missed: u32,
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

    /// Records the exact value `v` of one more option.
    #[inline]
    fn answer(&mut self, v: u8) {
        self.record(v);
        self.known += 1;
    }

    /// The candidates for the node's value, Beling and Rogalski's set P: `{0..moves}` where
    /// each answered option removed its value, or the largest candidate when its value was
    /// not one (or is not known). Values below 64 as bits, and how many candidates of 64
    /// and above remain. The node's value is a candidate, or above every value asked of
    /// the options answered "not in the set".
    #[inline]
    fn candidates(&self) -> (u64, u32) {
        let keep = self.moves + 1 - self.known;
        let mut low = low_mask64(self.moves + 1) & !self.present;
        let n = low.count_ones();
        if n < keep {
            return (low, keep - n);
        }
        for _ in keep..n {
            low ^= 1 << (63 - low.leading_zeros());
        }
        (low, 0)
    }
}

/// Bits `0..n` of a `u64` (all when `n` ≥ 64).
#[inline]
fn low_mask64(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

/// The set `{v ^ x : v in set}` of values below 64 (empty when `x` ≥ 64: no region has
/// such a value... below 128 cells).
#[inline]
fn xor_set(mut set: u64, x: u8) -> u64 {
    const SWAP: [u64; 6] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0f0f_0f0f_0f0f_0f0f,
        0x00ff_00ff_00ff_00ff,
        0x0000_ffff_0000_ffff,
        0x0000_0000_ffff_ffff,
    ];
    if x >= 64 {
        return 0;
    }
    for (i, m) in SWAP.iter().enumerate() {
        if x >> i & 1 == 1 {
            let sh = 1 << i;
            set = ((set & m) << sh) | ((set >> sh) & m);
        }
    }
    set
}

#[derive(Clone, Copy)]
struct Child {
    /// Unsettled regions are `comps[start..start+len]`, hardest first.
    start: u32,
    len: u32,
    /// XOR of the values of the option's settled regions.
    xor: u8,
    /// Search order: several regions last, then the sum of squared region sizes (below
    /// 2^14: a child has fewer than 128 cells), then the distance of the move from the
    /// centre (below 2^17).
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

/// Transposition tables for the solvers of several threads ([`Solver::set_shared`]), or
/// for one solver on a large board: a [`DenseTable`] for regions of up to 64 cells and a
/// locked one for larger regions.
#[derive(Clone)]
pub struct SharedTables {
    narrow: SharedTable,
    wide: SharedTable,
}

impl SharedTables {
    /// Tables for a budget of `tt_bytes`: the dense table grows to the largest power of two
    /// of bytes within it (at least 4 MiB), the table of larger regions is a sixteenth of
    /// that. Memory is taken only as it is touched; regions above 64 cells are few (they
    /// occur only in the first plies of boards above 64 cells), so the second table adds
    /// little.
    pub fn new(tt_bytes: usize) -> SharedTables {
        let narrow = DenseTable::new(tt_bytes);
        let wide = AtomicTable::new(narrow.max_bytes() / 16);
        SharedTables { narrow: SharedTable::Dense(Arc::new(narrow)), wide: SharedTable::Locked(Arc::new(wide)) }
    }

    /// Bytes of both tables now.
    pub fn bytes(&self) -> usize {
        self.narrow.bytes() + self.wide.bytes()
    }
}

/// The regions near the root that the threads of a parallel solve are searching now. A
/// thread looking for an option of some value tries first the options no other thread is
/// searching, so that threads sharing a table spread over different options instead of
/// repeating each other's work (as in Weill's ABDADA for alpha-beta).
pub struct Busy {
    searching: Mutex<HashMap<AnyRegion, u32>>,
    /// Nodes of at least this many cells take part (the first few plies).
    min_cells: u32,
}

impl Busy {
    /// A set for the nodes of at least `min_cells` cells.
    pub fn new(min_cells: u32) -> Busy {
        Busy { searching: Mutex::new(HashMap::new()), min_cells }
    }

    fn contains(&self, r: &AnyRegion) -> bool {
        self.searching.lock().expect("busy set lock").contains_key(r)
    }

    fn enter(&self, r: AnyRegion) {
        *self.searching.lock().expect("busy set lock").entry(r).or_insert(0) += 1;
    }

    fn leave(&self, r: &AnyRegion) {
        let mut m = self.searching.lock().expect("busy set lock");
        if let Some(n) = m.get_mut(r) {
            *n -= 1;
            if *n == 0 {
                m.remove(r);
            }
        }
    }
}

/// Knowledge kept outside a solver's tables: what other machines' searches established
/// about large regions, each region at its owner (knowledge with owners,
/// docs/cluster.md). A solver asks before it searches a region it does not know exactly,
/// and tells what its searches of such regions establish.
pub trait Remote: Send {
    /// What is known elsewhere of region `r`, and the nodes it cost (`None`: nothing).
    fn ask(&mut self, r: &AnyRegion) -> Option<(Facts, u64)>;
    /// Region `r`'s facts, just established by a search of `nodes` nodes.
    fn tell(&mut self, r: &AnyRegion, facts: Facts, nodes: u64);
}

/// A solver's link to [`Remote`] knowledge and which regions go through it.
struct RemoteLink {
    store: Box<dyn Remote>,
    /// Regions of at least this many cells are asked for and told.
    min_cells: u32,
    /// Only facts that cost at least this many nodes are told.
    min_nodes: u64,
}

/// A single-threaded solver with its caches; reuse it across positions to share them.
pub struct Solver {
    tt64: Table<u64>,
    tt128: Table<u128>,
    dbs: Arc<DbSet>,
    pairing: bool,
    search: Search,
    nodes: u64,
    pool: Vec<Frame>,
    cancel: Option<Arc<AtomicBool>>,
    /// Raised when another thread of a parallel solve has the answer.
    stop: Option<Arc<AtomicBool>>,
    budget: u64,
    next_check: u64,
    progress: Option<Box<dyn FnMut(u64) + Send>>,
    busy: Option<Arc<Busy>>,
    /// What is worth telling other machines ([`Solver::set_sharing`]): facts about regions
    /// of at least this many cells that took at least this many nodes.
    sharing: Option<(u32, u64)>,
    learned: Vec<SharedFact>,
    remote: Option<RemoteLink>,
}

impl Solver {
    /// A solver with the given settings and databases.
    pub fn new(config: &Config, dbs: Arc<DbSet>) -> Solver {
        Solver {
            tt64: Table::new(config.tt_bytes * 3 / 4),
            tt128: Table::new(config.tt_bytes / 4),
            dbs,
            pairing: config.pairing,
            search: Search::default(),
            nodes: 0,
            pool: Vec::new(),
            cancel: None,
            stop: None,
            budget: u64::MAX,
            next_check: CHECK_EVERY,
            progress: None,
            busy: None,
            sharing: None,
            learned: Vec::new(),
            remote: None,
        }
    }

    /// Asks `store` about every region of at least `min_cells` cells this solver must
    /// search and does not know exactly, and tells it the facts its searches of such
    /// regions establish when they cost at least `min_nodes` nodes. `None`: no remote
    /// knowledge.
    pub fn set_remote(&mut self, remote: Option<(Box<dyn Remote>, u32, u64)>) {
        self.remote = remote.map(|(store, min_cells, min_nodes)| RemoteLink { store, min_cells, min_nodes });
    }

    /// With `Some((min_cells, min_nodes))`, keeps for [`Solver::take_learned`] the facts
    /// established about regions of at least `min_cells` cells by searches of at least
    /// `min_nodes` nodes: what a cluster's workers share, so that one machine's costly
    /// facts save the others' searches. `None`: keeps nothing.
    pub fn set_sharing(&mut self, sharing: Option<(u32, u64)>) {
        self.sharing = sharing;
        if sharing.is_none() {
            self.learned.clear();
        }
    }

    /// The facts kept since the last call ([`Solver::set_sharing`]), one per region (the
    /// facts of a region stored several times merged).
    pub fn take_learned(&mut self) -> Vec<SharedFact> {
        let mut all = std::mem::take(&mut self.learned);
        all.sort_by_key(|l| l.region);
        let mut out: Vec<SharedFact> = Vec::with_capacity(all.len());
        for l in all {
            match out.last_mut() {
                Some(last) if last.region == l.region => {
                    last.facts = last.facts.merge(l.facts);
                    last.nodes = last.nodes.max(l.nodes);
                }
                _ => out.push(l),
            }
        }
        out
    }

    /// Adds facts another machine found about region `r` at a cost of `nodes` (the table
    /// keeps them over entries that cost less).
    pub fn preload(&mut self, r: &AnyRegion, facts: Facts, nodes: u64) {
        match r {
            AnyRegion::Narrow(x) => self.tt64.put(x.bits, x.stride, facts, nodes),
            AnyRegion::Wide(x) => self.tt128.put(x.bits, x.stride, facts, nodes),
        }
    }

    /// Replaces this solver's transposition tables with `tables`, shared with the solvers
    /// of other threads: what any of them learns, all use.
    pub fn set_shared(&mut self, tables: &SharedTables) {
        self.tt64 = Table::shared(tables.narrow.clone());
        self.tt128 = Table::shared(tables.wide.clone());
    }

    /// Chooses how nodes decide the values asked about (the answers are the same).
    pub fn set_search(&mut self, search: Search) {
        self.search = search;
    }

    /// Makes this solver one of the threads of a parallel solve that share `busy` (and a
    /// table, [`Solver::set_shared`]) and stop when `stop` is raised (with
    /// [`Interrupted::Cancelled`], as for the cancel flag).
    pub fn join_parallel(&mut self, busy: Arc<Busy>, stop: Arc<AtomicBool>) {
        self.busy = Some(busy);
        self.stop = Some(stop);
    }

    /// Ends this solver's part in a parallel solve: it no longer stops when the others do.
    pub fn leave_parallel(&mut self) {
        self.busy = None;
        self.stop = None;
    }

    /// The databases this solver consults.
    pub fn databases(&self) -> &DbSet {
        &self.dbs
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
        let solution = self.solve_board(board, mode)?;
        // A damaged database found in the last few nodes stops the run all the same.
        match self.dbs.damage() {
            Some(_) => Err(Interrupted::Database),
            None => Ok(solution),
        }
    }

    fn solve_board(&mut self, board: &Board, mode: Mode) -> Res<Solution> {
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

    /// [`Solver::facts`], then for a large region not known exactly what the remote
    /// knowledge holds (kept in the table at the cost it came with).
    fn lookup<B: Word>(&mut self, r: &Region<B>) -> Result<Facts, u8> {
        let known = self.facts(r)?;
        let Some(link) = self.remote.as_mut().filter(|l| r.cells() >= l.min_cells) else {
            return Ok(known);
        };
        let Some((far, nodes)) = link.store.ask(&B::any(*r)) else {
            return Ok(known);
        };
        // Facts that contradict what this solver knows are not taken (they are false, or
        // ours are): the search goes on as if nothing had been heard.
        let b = match known.merge(far) {
            m if m.is_contradictory() => return Ok(known),
            m => m,
        };
        if b != known {
            B::table_mut(self).put(r.bits, r.stride, b, nodes);
        }
        match b.value() {
            Some(v) => Err(v),
            None => Ok(b),
        }
    }

    fn store<B: Word>(&mut self, r: &Region<B>, b: Facts, since: u64) {
        let nodes = self.nodes - since;
        B::table_mut(self).put(r.bits, r.stride, b, nodes);
        if let Some(link) = self.remote.as_mut() {
            if nodes >= link.min_nodes && r.cells() >= link.min_cells {
                link.store.tell(&B::any(*r), b, nodes);
            }
        }
        if let Some((cells, min_nodes)) = self.sharing {
            if nodes >= min_nodes && r.cells() >= cells {
                self.learned.push(SharedFact { region: B::any(*r), facts: b, nodes });
            }
        }
    }

    fn nimber_g<B: Word>(&mut self, r: Region<B>) -> Res<u8> {
        let mut b = match self.lookup(&r) {
            Ok(b) => b,
            Err(v) => return Ok(v),
        };
        let since = self.nodes;
        let mut f = self.expand(&r, 0)?;
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
        if n >= 64 {
            return Ok(false);
        }
        Ok(self.query_g(r, 1 << n)? == Some(n))
    }

    /// A set query (Beling and Rogalski): the value of the region if it lies in `asked`
    /// (bit v: value v), else `None`, meaning it does not. The answer may be the exact
    /// value even when it lies outside `asked`.
    ///
    /// With [`Search::Sets`] the options are asked in turn for their values among the
    /// node's remaining candidates (all but the largest, up to the largest value asked
    /// here); the answer is known once no candidate is asked, or when every option has
    /// answered. With [`Search::Values`] the set is one value n, and the node looks for an
    /// option of value n first, then for each value below n.
    fn query_g<B: Word>(&mut self, r: Region<B>, asked: u64) -> Res<Option<u8>> {
        let mut b = match self.lookup(&r) {
            Ok(b) => b,
            Err(v) => return Ok(Some(v)),
        };
        b.upper = b.upper.min((r.cells() / 2) as u8);
        let set = asked & b.possible();
        if set == 0 {
            return Ok(None);
        }
        let since = self.nodes;
        let mut f = self.expand(&r, set)?;
        if self.search == Search::Values && set.is_power_of_two() {
            let n = set.trailing_zeros() as u8;
            b.upper = b.upper.min(f.bound);
            let answer = if f.hit {
                b.exclude(n);
                Ok(false)
            } else {
                self.decide(&mut f, &mut b, n)
            };
            b.excluded |= f.present as u32;
            self.pool.push(f);
            let answer = answer?;
            self.store(&r, b, since);
            return Ok(if answer { Some(n) } else { b.value() });
        }
        let answer = self.answer_set(&mut f, set);
        let found = match answer {
            Ok(Some(v)) => Facts::exact(v),
            _ => {
                // The value is a candidate or above every value asked.
                let (p, high) = f.candidates();
                let top = low_mask64(64 - set.leading_zeros());
                b.excluded |= (top & !p) as u32 | f.present as u32;
                if f.missed == 0 && high == 0 && p != 0 {
                    b.upper = b.upper.min(63 - p.leading_zeros() as u8);
                }
                b.upper = b.upper.min(f.bound);
                b
            }
        };
        self.pool.push(f);
        let answer = answer?;
        self.store(&r, found, since);
        Ok(answer)
    }

    /// Decides `g = n` for an expanded node whose facts so far are `b`, updating `b`.
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

    /// Asks the unanswered options of an expanded node in turn (see [`Solver::query_g`]).
    fn answer_set(&mut self, f: &mut Frame, set: u64) -> Res<Option<u8>> {
        if f.hit {
            return Ok(None);
        }
        let top = low_mask64(64 - set.leading_zeros());
        for i in 0..f.children.len() {
            let (p, high) = f.candidates();
            if p & set == 0 {
                return Ok(None);
            }
            if f.children[i].done {
                continue;
            }
            let below_largest = if high > 0 { p } else { p & !(1 << (63 - p.leading_zeros())) };
            let ask = below_largest & top;
            f.children[i].done = true;
            if ask == 0 {
                f.missed += 1;
                f.known += 1;
                continue;
            }
            let (hardest, xor) = self.reduce_child(f, i)?;
            match self.query(hardest, xor_set(ask, xor))? {
                Some(v) => f.answer(v ^ xor),
                None => {
                    f.missed += 1;
                    f.known += 1;
                }
            }
        }
        debug_assert_eq!(f.known, f.moves, "every option answered");
        let (p, high) = f.candidates();
        if f.missed == 0 {
            return Ok(Some(if p == 0 && high > 0 { 64 } else { p.trailing_zeros() as u8 }));
        }
        Ok((p & top != 0).then(|| p.trailing_zeros() as u8))
    }

    /// Settles every region of option `i` but the hardest (exact nimbers, folded into its
    /// XOR) and returns the hardest with that XOR.
    fn reduce_child(&mut self, f: &mut Frame, i: usize) -> Res<(AnyRegion, u8)> {
        while f.children[i].len > 1 {
            let c = f.children[i];
            let v = self.nimber(f.comps[(c.start + c.len - 1) as usize])?;
            f.children[i].xor ^= v;
            f.children[i].len -= 1;
        }
        let c = f.children[i];
        Ok((f.comps[c.start as usize], c.xor))
    }

    /// A set query on a region of either word size.
    fn query(&mut self, r: AnyRegion, asked: u64) -> Res<Option<u8>> {
        match r {
            AnyRegion::Narrow(x) => self.query_g(x, asked),
            AnyRegion::Wide(x) => self.query_g(x, asked),
        }
    }

    /// Looks for an unanswered option of value `k`; options answered on the way are marked.
    /// In a parallel solve, near the root, options another thread is searching come last.
    fn find_child(&mut self, f: &mut Frame, k: u8) -> Res<bool> {
        let busy = self.busy.clone().filter(|b| f.cells >= b.min_cells);
        for pass in 0..1 + busy.is_some() as u32 {
            for i in 0..f.children.len() {
                if f.children[i].done {
                    continue;
                }
                let (hardest, xor) = self.reduce_child(f, i)?;
                if (k ^ xor) >= 64 {
                    continue;
                }
                let answer = match &busy {
                    Some(b) if pass == 0 && b.contains(&hardest) => continue,
                    Some(b) => {
                        b.enter(hardest);
                        let answer = self.query(hardest, 1 << (k ^ xor));
                        b.leave(&hardest);
                        answer?
                    }
                    None => self.query(hardest, 1 << (k ^ xor))?,
                };
                if let Some(v) = answer {
                    f.children[i].done = true;
                    f.answer(v ^ xor);
                    if v ^ xor == k {
                        return Ok(true);
                    }
                }
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
            let raised = |f: &Option<Arc<AtomicBool>>| f.as_ref().is_some_and(|c| c.load(Ordering::Relaxed));
            if self.dbs.damage().is_some() {
                return Err(Interrupted::Database);
            }
            if raised(&self.cancel) || raised(&self.stop) {
                return Err(Interrupted::Cancelled);
            }
            if self.nodes >= self.budget {
                return Err(Interrupted::Budget);
            }
        }
        Ok(())
    }

    /// Generates the options of a region and settles those that need no search. With a
    /// nonempty `stop` set, returns as soon as every value in it is known to be the value of
    /// some option (`f.hit`).
    ///
    /// Options go in batches: each batch is split into canonical regions with their table
    /// buckets prefetched, then looked up, so the cache misses overlap.
    fn expand<B: Word>(&mut self, r: &Region<B>, stop: u64) -> Res<Frame> {
        const BATCH: usize = 4;
        self.tick()?;
        let mut f = self.pool.pop().unwrap_or_default();
        f.comps.clear();
        f.children.clear();
        f.present = 0;
        f.hit = false;
        f.known = 0;
        f.missed = 0;
        let s = r.stride as u32;
        let (hor, ver) = r.moves();
        // A horizontal move across a walled 2×2 block is worth what a vertical one is.
        let hor = hor & !walled_cuts(r.bits, s);
        f.moves = hor.count() + ver.count();
        f.cells = r.cells();
        f.bound = f.moves.min(r.cells() / 2).min(255) as u8;
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
                let mut add = |c: B| match c.count() {
                    0 | 1 => {}
                    2 | 3 => xor ^= 1,
                    _ => {
                        let p = normalize(c, s);
                        self.prefetch(&p);
                        f.comps.push(p);
                    }
                };
                for_each_part(rest, s, Some((r.bits, stays_connected(r.bits, i, s, h, w, step == s))), &mut add);
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
                    f.answer(c.xor);
                    continue;
                }
                let parts = &mut f.comps[start..out];
                parts.sort_unstable_by_key(|p| std::cmp::Reverse(p.cells()));
                c.cost = option_cost(c.cost, parts.iter().map(AnyRegion::cells));
                c.start = start as u32;
                c.len = (out - start) as u32;
                f.children[kept] = c;
                kept += 1;
            }
            f.comps.truncate(out);
            f.children.truncate(kept);
            if stop != 0 && stop & !f.present == 0 {
                f.hit = true;
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
    regions_of(board, false)
}

/// [`board_regions`] without the reductions: the plain 4-connected components, as
/// certificates state their facts (no tufts pruned, no bridges removed, no blocks cut).
pub fn plain_board_regions(board: &Board) -> (Vec<AnyRegion>, u8) {
    regions_of(board, true)
}

fn regions_of(board: &Board, plain: bool) -> (Vec<AnyRegion>, u8) {
    let mut xor = 0;
    let mut out = Vec::new();
    let mut add = |c: u128| match c.count_ones() {
        0 | 1 => {}
        2 | 3 => xor ^= 1,
        _ => out.push(normalize(c, board.cols())),
    };
    if plain {
        crate::region::for_each_component(board.empty(), board.cols(), add);
    } else {
        for_each_part(board.empty(), board.cols(), None, &mut add);
    }
    let len = cancel_pairs(&mut out);
    out.truncate(len);
    (out, xor)
}
