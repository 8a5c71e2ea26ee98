//! The top of the search: the coordinator's part of the same AND/OR search the engine runs,
//! over canonical regions, down to the split depth. Below it, questions become work units.
//!
//! Nothing here is a tree held in memory: the DAG is implied by the facts known so far.
//! Facts are what workers reported (`Facts` per canonical region), what this module
//! derived from them, and what is free (small regions are solved on the spot, paired and
//! database regions are settled). A [`Top::frontier`] walk re-derives, from the root, which
//! questions are still open and which units would answer them, in the engine's order — the
//! first ones are what a single engine would search next, later ones are speculation for
//! idle workers. A unit that no longer appears has become useless and is cancelled. As the
//! walk is a function of the facts, resuming is replaying the facts.
//!
//! Facts can contradict each other only when some are false (a faulty worker): the walk
//! never loops on them — a region whose facts leave no value is named in
//! [`Frontier::conflicts`] and left open, for the scheduler to settle.
//!
//! The rules are the engine's: `g(R) = n` iff no option has value `n` and every value below
//! `n` appears among the options; `g(R)` is the least value that does not appear; an option
//! made of several regions has the XOR of their values, found by settling the smaller
//! regions exactly first and then asking one question of the largest.

use cram_engine::facts::Facts;
use cram_engine::options::{options, plain_options, Child};
use cram_engine::region::AnyRegion;
use cram_engine::solver::{board_regions, plain_board_regions};
use cram_engine::{Board, Config, DbSet, Mode, Outcome, Query, Question, Solution, Solver};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Regions of at most this many cells are solved by the coordinator itself: each takes
/// well under a millisecond, far less than a unit's round trip.
pub const LOCAL_CELLS: u32 = 16;

/// What a walk of the top found.
#[derive(Debug, Default)]
pub struct Frontier {
    /// The root's answer, once the facts decide it.
    pub answer: Option<Solution>,
    /// Open questions for workers, each once, with the branch of the top they serve: the
    /// first question of every branch, in branch order, then the second of every branch, …
    /// (see [`Frontier::interleave`]).
    pub open: Vec<(Question, Branch)>,
    /// Open questions at the root or one ply below it (a region of the root, or of a first
    /// move): their answers decide the root or a first move directly.
    pub decisive: HashSet<Question>,
    /// What is known of the root's largest region (for progress reports).
    pub root_facts: Option<Facts>,
    /// Branches whose walk stopped at [`NEEDS_PER_BRANCH`] questions: a question of such a
    /// branch missing from `open` may still matter.
    pub truncated: HashSet<Branch>,
    /// Regions whose facts contradict each other (some are false), each once.
    pub conflicts: Vec<AnyRegion>,
}

/// One first move, as the status shows it: the regions it leaves (largest first), the XOR
/// of the values of those too small to search, and what is known of its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstMove {
    /// Regions that need search.
    pub regions: Vec<AnyRegion>,
    /// XOR of the values of the regions too small to search.
    pub xor: u8,
    /// What is known of the option's value.
    pub value: Facts,
    /// While its value is open and it leaves one region to search: what is known of that
    /// region's options (the replies to the move), how far its question has come.
    pub replies: Option<Replies>,
}

/// What is known of the replies to a first move (the options of the region it leaves).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Replies {
    /// Replies, each once up to symmetry.
    pub total: u32,
    /// Replies whose value is known.
    pub settled: u32,
    /// Replies with values ruled out, their value still open.
    pub bounded: u32,
}

/// Which first move (of which root region) a question lies under. Units of one branch share
/// much of their search, so a worker thread stays on one branch while it has work (its
/// transposition table keeps paying), and different threads take different branches.
pub type Branch = u32;

impl Frontier {
    /// Orders needs met depth-first so that branches take turns: at the top of the search
    /// the siblings are all needed in turn (every first move is examined for each value),
    /// while below them the first question usually settles its parent and the later ones
    /// are speculation.
    fn interleave(needs: Vec<(Question, Branch)>) -> Vec<(Question, Branch)> {
        let mut seen: HashMap<Branch, (usize, usize)> = HashMap::new();
        let mut keyed: Vec<((usize, usize), (Question, Branch))> = needs
            .into_iter()
            .map(|(ask, b)| {
                let next = seen.len();
                let e = seen.entry(b).or_insert((next, 0));
                e.1 += 1;
                ((e.1, e.0), (ask, b))
            })
            .collect();
        keyed.sort_by_key(|(k, _)| *k);
        keyed.into_iter().map(|(_, x)| x).collect()
    }
}

/// The options among `children` that differ up to symmetry, each once (regions of equal
/// size may come in either order from symmetric moves).
fn distinct(children: &[Child]) -> impl Iterator<Item = &Child> {
    let mut seen = HashSet::new();
    children.iter().filter(move |c| {
        let mut key = c.regions.clone();
        key.sort();
        seen.insert((key, c.xor))
    })
}

/// The top of one job's search and every fact known about its regions.
pub struct Top {
    regions: Vec<AnyRegion>,
    xor: u8,
    mode: Mode,
    /// The whole position is a half-turn pairing: a second-player win without search.
    root_paired: bool,
    /// The top of a certified job: plain regions, only small ones settled on the spot.
    plain_regions: bool,
    split_depth: u32,
    reported: HashMap<AnyRegion, Facts>,
    derived: HashMap<AnyRegion, Facts>,
    /// Facts the coordinator found by its own search: certain, they override everything
    /// else.
    settled: HashMap<AnyRegion, Facts>,
    expanded: HashSet<AnyRegion>,
    children: HashMap<AnyRegion, Arc<[Child]>>,
    local: Solver,
}

/// One walk: the questions met that are still open, and whether anything was learnt.
#[derive(Default)]
struct Walk {
    visited: HashSet<(AnyRegion, Query)>,
    needs: Vec<(Question, Branch)>,
    decisive: HashSet<Question>,
    learnt: bool,
    branch: Branch,
    per_branch: HashMap<Branch, usize>,
    conflicts: Vec<AnyRegion>,
}

/// Questions collected per branch in one walk; the rest of a branch waits for a later walk.
/// A few per branch keep every worker thread busy on its own branch, and stopping there
/// keeps a walk cheap however deep the top is.
pub const NEEDS_PER_BRANCH: usize = 8;

impl Walk {
    /// Marks an open question as met; false when it was met before in this walk.
    fn first_visit(&mut self, r: AnyRegion, q: Query) -> bool {
        self.visited.insert((r, q))
    }

    fn need(&mut self, region: AnyRegion, query: Query, depth: u32) {
        if depth <= 1 {
            self.decisive.insert(Question { region, query });
        }
        self.needs.push((Question { region, query }, self.branch));
        *self.per_branch.entry(self.branch).or_insert(0) += 1;
    }

    fn conflict(&mut self, r: AnyRegion) {
        if !self.conflicts.contains(&r) {
            self.conflicts.push(r);
        }
    }

    /// True when the current branch has all the questions one walk collects.
    fn branch_full(&self) -> bool {
        self.per_branch.get(&self.branch).is_some_and(|&n| n >= NEEDS_PER_BRANCH)
    }
}

impl Top {
    /// The top of the search of `board` in `mode`, with the engine settings the workers use.
    /// `plain`: the top of a job to be certified, over plain regions (no reductions), with
    /// only small regions settled on the spot, so that every region above that has a unit
    /// and the unit's proof (the pairing and databases are not evidence to a checker).
    pub fn new(board: &Board, mode: Mode, pairing: bool, dbs: Arc<DbSet>, split_depth: u32, plain: bool) -> Top {
        let (mut regions, xor) = if plain { plain_board_regions(board) } else { board_regions(board) };
        regions.sort_by_key(|r| std::cmp::Reverse(r.cells()));
        let root_paired = !plain && pairing && cram_engine::pairing::half_turn_certificate(board);
        Top {
            regions,
            xor,
            mode,
            root_paired,
            plain_regions: plain,
            split_depth,
            reported: HashMap::new(),
            derived: HashMap::new(),
            settled: HashMap::new(),
            expanded: HashSet::new(),
            children: HashMap::new(),
            local: Solver::new(&Config { tt_bytes: 64 << 20, pairing }, dbs),
        }
    }

    /// Records facts a worker reported; true when they were news.
    pub fn report(&mut self, region: AnyRegion, facts: Facts) -> bool {
        let old = self.held(&region);
        let merged = old.merge(facts);
        let entry = self.reported.entry(region).or_insert(Facts::UNKNOWN);
        *entry = entry.merge(facts);
        merged != old
    }

    /// Adds facts the coordinator's own search found: certain, they override every other
    /// fact.
    pub fn settle(&mut self, region: AnyRegion, facts: Facts) {
        let e = self.settled.entry(region).or_insert(Facts::UNKNOWN);
        *e = e.merge(facts);
    }

    /// Every region the coordinator's own searches answered, with what they found.
    pub fn settled(&self) -> impl Iterator<Item = (AnyRegion, Facts)> + '_ {
        self.settled.iter().map(|(r, f)| (*r, *f))
    }

    /// True when the coordinator's own search answered `q`.
    pub fn is_settled(&self, q: &Question) -> bool {
        self.settled.get(&q.region).is_some_and(|f| q.query.answered_by(*f))
    }

    /// Forgets every reported and derived fact (settled values stay), before the facts
    /// still trusted are reported again.
    pub fn forget_reports(&mut self) {
        self.reported.clear();
        self.derived.clear();
    }

    /// What is certain about `r` without any worker: its value when the coordinator knows
    /// it (small, paired, database or settled regions), else `g ≤ cells / 2`.
    pub fn certain(&mut self, r: &AnyRegion) -> Facts {
        let free = if self.plain_regions && r.cells() > LOCAL_CELLS { None } else { self.local.settled_value(r) };
        if let Some(v) = free {
            return Facts::exact(v);
        }
        if r.cells() <= LOCAL_CELLS {
            return Facts::exact(self.local.nimber(*r).expect("no budget or cancel on the local solver"));
        }
        let bound = Facts { excluded: 0, upper: (r.cells() / 2) as u8 };
        self.settled.get(r).map_or(bound, |f| f.merge(bound))
    }

    /// Everything held about `r`: certain, reported and derived facts (contradictory when
    /// some of them are false).
    pub fn held(&mut self, r: &AnyRegion) -> Facts {
        let certain = self.certain(r);
        if certain.value().is_some() {
            return certain;
        }
        [&self.reported, &self.derived].iter().filter_map(|m| m.get(r)).fold(certain, |b, f| b.merge(*f))
    }

    /// Marks a region whose unit ran out of budget: from now on the walk goes one ply into
    /// it instead of asking it as a unit. True when it was not marked before.
    pub fn expand(&mut self, region: AnyRegion) -> bool {
        self.expanded.insert(region)
    }

    /// True when the facts already answer `ask` (and do not contradict each other).
    pub fn answers(&mut self, ask: &Question) -> bool {
        let b = self.held(&ask.region);
        !b.is_contradictory() && ask.query.answered_by(b)
    }

    /// Every region of which an exact value is held (reported, derived or settled; the
    /// small ones the walk solved on the spot are left to whoever needs them).
    pub fn exact_values(&mut self) -> Vec<(AnyRegion, u8)> {
        let regions: HashSet<AnyRegion> =
            self.reported.keys().chain(self.derived.keys()).chain(self.settled.keys()).copied().collect();
        regions
            .into_iter()
            .filter_map(|r| Some(self.held(&r)).filter(|f| !f.is_contradictory())?.value().map(|v| (r, v)))
            .collect()
    }

    /// The options of the root's largest region (the first moves, each once up to
    /// symmetry, in the order the search takes them) and what is known of each one's value:
    /// exact when its regions' values are, else what the facts of its one open region say;
    /// contradictory when a region's facts are (some are false, being settled). Empty when
    /// the root is paired (decided without search).
    pub fn first_moves(&mut self) -> Vec<FirstMove> {
        let Some(&root) = self.regions.first().filter(|_| !self.root_paired) else { return Vec::new() };
        let children = self.children_of(&root);
        distinct(&children)
            .map(|c| {
                let value = self.option_facts(c);
                let replies = match c.regions[..] {
                    [r] if value.value().is_none() && !value.is_contradictory() => Some(self.replies(&r)),
                    _ => None,
                };
                FirstMove { regions: c.regions.clone(), xor: c.xor, value, replies }
            })
            .collect()
    }

    /// What the facts held say of an option's value: exact when its regions' values are,
    /// else what the facts of its one open region say; contradictory when a region's facts
    /// are (some are false, being settled).
    fn option_facts(&mut self, c: &Child) -> Facts {
        let mut x = c.xor;
        let mut open = Vec::new();
        let mut contradictory = false;
        for r in &c.regions {
            let f = self.held(r);
            contradictory |= f.is_contradictory();
            match f.value() {
                Some(v) => x ^= v,
                None => open.push(*r),
            }
        }
        match open[..] {
            _ if contradictory => Facts { excluded: u32::MAX, upper: 0 },
            [] => Facts::exact(x),
            [r] => self.held(&r).xor(x),
            _ => Facts::UNKNOWN,
        }
    }

    /// What is known of the options of region `r`, each once up to symmetry.
    fn replies(&mut self, r: &AnyRegion) -> Replies {
        let mut out = Replies::default();
        for c in distinct(&self.children_of(r)) {
            let facts = self.option_facts(c);
            out.total += 1;
            // Every region has an upper bound from its size; a value ruled out is news.
            if facts.value().is_some() {
                out.settled += 1;
            } else if facts.excluded != 0 {
                out.bounded += 1;
            }
        }
        out
    }

    /// Nodes the coordinator searched itself (regions of at most [`LOCAL_CELLS`] cells).
    pub fn local_nodes(&self) -> u64 {
        self.local.nodes()
    }

    /// Walks the top from the root: the answer if the facts decide it, else the open
    /// questions in the order a single search would take them up.
    pub fn frontier(&mut self) -> Frontier {
        loop {
            let mut walk = Walk::default();
            let answer = self.walk_root(&mut walk);
            // Something learnt during a walk may have made needs met earlier useless: walk
            // again until a walk learns nothing, so the list holds only what still matters.
            if !walk.learnt || answer.is_some() {
                let root_facts = self.regions.first().copied().map(|r| self.held(&r));
                let truncated =
                    walk.per_branch.iter().filter(|(_, &n)| n >= NEEDS_PER_BRANCH).map(|(b, _)| *b).collect();
                return Frontier {
                    answer,
                    decisive: walk.decisive,
                    open: Frontier::interleave(walk.needs),
                    root_facts,
                    truncated,
                    conflicts: walk.conflicts,
                };
            }
        }
    }

    fn walk_root(&mut self, walk: &mut Walk) -> Option<Solution> {
        if self.root_paired {
            return Some(Solution { outcome: Outcome::Second, nimber: Some(0) });
        }
        let regions = self.regions.clone();
        let mut x = self.xor;
        let mut open = false;
        let minors = match self.mode {
            Mode::Nimber => &regions[..],
            Mode::Outcome => regions.get(1..).unwrap_or(&[]),
        };
        for (i, r) in minors.iter().enumerate() {
            walk.branch = (i as Branch) << 16;
            match self.nimber(*r, 0, walk) {
                Some(v) => x ^= v,
                None => open = true,
            }
        }
        if open {
            return None;
        }
        match (self.mode, regions.first()) {
            (Mode::Outcome, Some(&largest)) => {
                walk.branch = (regions.len() as Branch) << 16;
                let loss = self.is_value(largest, x, 0, walk)?;
                Some(Solution { outcome: Outcome::of(!loss), nimber: loss.then_some(0) })
            }
            _ => Some(Solution { outcome: Outcome::of_nimber(x), nimber: Some(x) }),
        }
    }

    /// What the walk uses of a region: [`Top::held`], or `None` (the region named as a
    /// conflict) when its facts contradict each other.
    fn known(&mut self, r: &AnyRegion, walk: &mut Walk) -> Option<Facts> {
        let b = self.held(r);
        if b.is_contradictory() {
            walk.conflict(*r);
            return None;
        }
        Some(b)
    }

    fn learn(&mut self, r: AnyRegion, facts: Facts, walk: &mut Walk) {
        let entry = self.derived.entry(r).or_insert(Facts::UNKNOWN);
        let merged = entry.merge(facts);
        if merged != *entry {
            *entry = merged;
            walk.learnt = true;
        }
    }

    fn is_leaf(&self, r: &AnyRegion, depth: u32) -> bool {
        depth >= self.split_depth && !self.expanded.contains(r)
    }

    fn children_of(&mut self, r: &AnyRegion) -> Arc<[Child]> {
        let plain = self.plain_regions;
        self.children.entry(*r).or_insert_with(|| if plain { plain_options(r) } else { options(r) }.into()).clone()
    }

    /// The value of an option when all its regions are known.
    fn child_value(&mut self, c: &Child, walk: &mut Walk) -> Option<u8> {
        let mut x = c.xor;
        for p in &c.regions {
            x ^= self.known(p, walk)?.value()?;
        }
        Some(x)
    }

    /// Does option `c` have value `j`? Smaller regions are settled exactly first, then the
    /// largest is asked one question.
    fn child_has(&mut self, c: &Child, j: u8, depth: u32, walk: &mut Walk) -> Option<bool> {
        let Some((&largest, minors)) = c.regions.split_first() else {
            return Some(c.xor == j);
        };
        let mut x = c.xor;
        let mut open = false;
        for p in minors {
            match self.nimber(*p, depth, walk) {
                Some(v) => x ^= v,
                None => open = true,
            }
        }
        if open {
            return None;
        }
        self.is_value(largest, j ^ x, depth, walk)
    }

    /// Looks for an option of value `j`, options already known first. Some(false) when
    /// every option is known not to have it.
    fn find_child(&mut self, cs: &[Child], j: u8, depth: u32, walk: &mut Walk) -> Option<bool> {
        if cs.iter().any(|c| self.child_value(c, walk) == Some(j)) {
            return Some(true);
        }
        let mut open = false;
        for (i, c) in cs.iter().enumerate() {
            if depth == 1 {
                walk.branch = (walk.branch & !0xffff) | (i as Branch).min(0xffff);
            }
            match self.child_has(c, j, depth, walk) {
                Some(true) => return Some(true),
                Some(false) => {}
                None => open = true,
            }
        }
        if open {
            None
        } else {
            Some(false)
        }
    }

    /// Is `g(r) = n`?
    fn is_value(&mut self, r: AnyRegion, n: u8, depth: u32, walk: &mut Walk) -> Option<bool> {
        let b = self.known(&r, walk)?;
        if let Some(v) = b.value() {
            return Some(v == n);
        }
        if b.rules_out(n) {
            return Some(false);
        }
        let query = Query::IsValue(n);
        if walk.branch_full() || !walk.first_visit(r, query) {
            return None;
        }
        if self.is_leaf(&r, depth) {
            walk.need(r, query, depth);
            return None;
        }
        let cs = self.children_of(&r);
        let mut not_n = b;
        not_n.exclude(n);
        // An option of value n refutes at once.
        let mut open = match self.find_child(&cs, n, depth + 1, walk) {
            Some(true) => {
                self.learn(r, not_n, walk);
                return Some(false);
            }
            Some(false) => false,
            None => true,
        };
        // Every value below n must appear; the first one not yet found is looked for.
        for j in b.floor()..n {
            match self.find_child(&cs, j, depth + 1, walk) {
                Some(true) => continue,
                Some(false) => {
                    // g(r) ≤ j < n.
                    self.learn(r, Facts { upper: j, ..not_n }, walk);
                    return Some(false);
                }
                None => {
                    open = true;
                    break;
                }
            }
        }
        if open {
            return None;
        }
        self.learn(r, Facts::exact(n), walk);
        Some(true)
    }

    /// The nimber of `r`: the least value no option has.
    fn nimber(&mut self, r: AnyRegion, depth: u32, walk: &mut Walk) -> Option<u8> {
        let b = self.known(&r, walk)?;
        if let Some(v) = b.value() {
            return Some(v);
        }
        if walk.branch_full() || !walk.first_visit(r, Query::Nimber) {
            return None;
        }
        if self.is_leaf(&r, depth) {
            walk.need(r, Query::Nimber, depth);
            return None;
        }
        let cs = self.children_of(&r);
        // Every value below the floor appears among the options (g ≥ floor); g ≤ upper.
        for k in b.floor()..=b.upper {
            if b.rules_out(k) {
                continue;
            }
            if self.find_child(&cs, k, depth + 1, walk)? {
                // An option of value k: g ≠ k (what the status shows while the rest is open).
                self.learn(r, Facts::excluding(k), walk);
            } else {
                self.learn(r, Facts::exact(k), walk);
                return Some(k);
            }
        }
        // Every value up to the bound appears: the facts contradict each other.
        walk.conflict(r);
        None
    }
}

/// The least split depth at which the top has at least `target` distinct regions to ask
/// about (regions of more than [`LOCAL_CELLS`] cells), capped at 6 plies.
pub fn depth_for_units(board: &Board, target: usize) -> u32 {
    let mut level: HashSet<AnyRegion> =
        board_regions(board).0.into_iter().filter(|r| r.cells() > LOCAL_CELLS).collect();
    for depth in 0..6 {
        if level.len() >= target || level.is_empty() {
            return depth;
        }
        level = level.iter().flat_map(options).flat_map(|c| c.regions).filter(|r| r.cells() > LOCAL_CELLS).collect();
    }
    6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_answer(board: &Board, mode: Mode, pairing: bool) -> Solution {
        let mut s = Solver::new(&Config { tt_bytes: 16 << 20, pairing }, Arc::new(DbSet::default()));
        s.solve(board, mode).unwrap()
    }

    /// Plays the coordinator with a perfect worker that answers units in the order given,
    /// `width` at a time, and returns the answer and the number of units solved.
    fn drive(
        board: &Board,
        mode: Mode,
        pairing: bool,
        depth: u32,
        width: usize,
        budget: Option<u32>,
    ) -> (Solution, usize) {
        let mut top = Top::new(board, mode, pairing, Arc::new(DbSet::default()), depth, false);
        drive_top(&mut top, pairing, width, budget)
    }

    /// [`drive`] on a top made already.
    fn drive_top(top: &mut Top, pairing: bool, width: usize, budget: Option<u32>) -> (Solution, usize) {
        let mut oracle = Solver::new(&Config { tt_bytes: 16 << 20, pairing }, Arc::new(DbSet::default()));
        let mut units = 0;
        loop {
            let f = top.frontier();
            if let Some(a) = f.answer {
                return (a, units);
            }
            assert!(!f.open.is_empty(), "an undecided top with nothing to ask");
            for (ask, _) in f.open.iter().take(width) {
                units += 1;
                // A budget "runs out" on regions larger than the budget's cell count.
                if budget.is_some_and(|cells| ask.region.cells() > cells) && top.expand(ask.region) {
                    continue;
                }
                let facts = match ask.query {
                    Query::Nimber => Facts::exact(oracle.nimber(ask.region).unwrap()),
                    Query::IsValue(k) => {
                        if oracle.is_value(ask.region, k).unwrap() {
                            Facts::exact(k)
                        } else {
                            let mut b = Facts::UNKNOWN;
                            b.exclude(k);
                            b
                        }
                    }
                };
                top.report(ask.region, facts);
            }
        }
    }

    #[test]
    fn merged_answers_equal_the_engines() {
        for spec in ["3x7", "4x5", "4x6", "5x5", "3x8", "2x9", "...../..#../...../.#.../.....", "3x3"] {
            let board = Board::parse(spec).unwrap();
            for mode in [Mode::Nimber, Mode::Outcome] {
                for pairing in [true, false] {
                    let want = engine_answer(&board, mode, pairing);
                    for (depth, width) in [(0, 1), (1, 1), (2, 1), (2, 3), (3, 8)] {
                        let (got, _) = drive(&board, mode, pairing, depth, width, None);
                        assert_eq!(got, want, "{spec} {mode:?} pairing {pairing} depth {depth} width {width}");
                    }
                }
            }
        }
    }

    #[test]
    fn several_regions_and_splits() {
        // Two separate regions and a spare domino.
        let board = Board::parse("....#..../....#..../....#....").unwrap();
        for mode in [Mode::Nimber, Mode::Outcome] {
            let want = engine_answer(&board, mode, false);
            let (got, _) = drive(&board, mode, false, 1, 2, None);
            assert_eq!(got, want);
            // Every unit of more than 17 cells "runs out of budget" and is split.
            let (got, _) = drive(&board, mode, false, 0, 2, Some(17));
            assert_eq!(got, want);
        }
    }

    #[test]
    fn first_moves_show_what_is_known_and_nothing_false() {
        let mut oracle = Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()));
        for spec in ["4x6", "5x5", "3x8", "....#....../....#....../....#......"] {
            let board = Board::parse(spec).unwrap();
            let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
            let before = top.first_moves();
            let distinct: HashSet<_> = options(&top.regions[0])
                .into_iter()
                .map(|mut c| {
                    c.regions.sort();
                    (c.regions, c.xor)
                })
                .collect();
            assert_eq!(before.len(), distinct.len(), "{spec}: each option once");
            drive_top(&mut top, false, 1, None);
            let after = top.first_moves();
            let mut values = Vec::new();
            for m in &after {
                let truth = m.regions.iter().fold(m.xor, |x, r| x ^ oracle.nimber(*r).unwrap());
                assert!(!m.value.rules_out(truth), "{spec}: {m:?} rules out its value {truth}");
                values.extend(m.value.value());
            }
            // The root's value is the least one no first move has; the walk found it, so
            // every smaller one is shown as some move's value.
            let root = oracle.nimber(top.regions[0]).unwrap();
            assert!((0..root).all(|k| values.contains(&k)), "{spec}: {values:?}, root {root}");
            assert!(!values.contains(&root), "{spec}");
        }
        // A false report that contradicts what the coordinator holds shows as a
        // contradiction, not as a value.
        let board = Board::parse("4x6").unwrap();
        let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        let first = top.first_moves()[0].regions[0];
        let v = oracle.nimber(first).unwrap();
        top.report(first, Facts::exact(v));
        top.report(first, Facts::excluding(v));
        assert!(top.first_moves()[0].value.is_contradictory());
        let paired = Top::new(&Board::parse("4x4").unwrap(), Mode::Nimber, true, Arc::new(DbSet::default()), 2, false)
            .first_moves();
        assert!(paired.is_empty());
    }

    /// An open first move that leaves one region counts what is known of its replies:
    /// each once up to symmetry, and a reply's facts move it from unknown to bounded to
    /// settled; a move whose value is known counts none.
    #[test]
    fn first_moves_count_what_is_known_of_their_replies() {
        let mut oracle = Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()));
        let board = Board::parse("4x6").unwrap();
        let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        let first = top.first_moves().remove(0);
        let [region] = first.regions[..] else { panic!("4x6's first move leaves one region: {first:?}") };
        let replies: Vec<Child> = distinct(&options(&region)).cloned().collect();
        let r0 = first.replies.expect("an open move counts its replies");
        assert_eq!(r0.total as usize, replies.len(), "{r0:?}");
        assert!(r0.settled + r0.bounded < r0.total, "{r0:?}");
        let reply = replies
            .iter()
            .find(|c| c.regions.len() == 1 && top.option_facts(c).excluded == 0)
            .expect("a reply that leaves one region of which nothing is known");
        let value = oracle.nimber(reply.regions[0]).unwrap();
        top.report(reply.regions[0], Facts::excluding(value ^ 1));
        let r = top.first_moves()[0].replies.unwrap();
        assert_eq!((r.settled, r.bounded), (r0.settled, r0.bounded + 1), "a value ruled out: bounded");
        top.report(reply.regions[0], Facts::exact(value));
        let r = top.first_moves()[0].replies.unwrap();
        assert_eq!((r.settled, r.bounded), (r0.settled + 1, r0.bounded), "its value: settled");
        top.report(region, Facts::exact(oracle.nimber(region).unwrap()));
        assert_eq!(top.first_moves()[0].replies, None, "a known move counts no replies");
    }

    /// A first move found of value 0 shows in the root's facts as `g ≠ 0` while its nimber
    /// is still open (the status's root line), and in no walk before it is found.
    #[test]
    fn a_value_found_among_the_first_moves_is_ruled_out_for_the_root() {
        let mut oracle = Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()));
        let board = Board::parse("4x7").unwrap();
        let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        assert!(!top.frontier().root_facts.unwrap().rules_out(0));
        let winning = top
            .first_moves()
            .into_iter()
            .find(|m| m.regions.len() == 1 && oracle.nimber(m.regions[0]).unwrap() ^ m.xor == 0)
            .expect("4x7 (*3) is a first-player win by a move that leaves one region");
        top.report(winning.regions[0], Facts::exact(winning.xor));
        let f = top.frontier();
        assert!(f.answer.is_none(), "one move does not decide a nimber");
        assert!(f.root_facts.unwrap().rules_out(0), "{:?}", f.root_facts);
    }

    #[test]
    fn certified_and_tiny_boards_need_no_units() {
        let (a, units) = drive(&Board::parse("4x4").unwrap(), Mode::Nimber, true, 2, 1, None);
        assert_eq!((a.nimber, units), (Some(0), 0));
        let (a, units) = drive(&Board::parse("3x4").unwrap(), Mode::Nimber, false, 2, 1, None);
        assert_eq!((a, units), (engine_answer(&Board::parse("3x4").unwrap(), Mode::Nimber, false), 0));
    }

    #[test]
    fn split_depth_from_a_unit_target() {
        let board = Board::parse("4x8").unwrap();
        assert_eq!(depth_for_units(&board, 1), 0);
        assert_eq!(depth_for_units(&board, 10), 1);
        assert_eq!(depth_for_units(&board, 200), 2);
        assert_eq!(depth_for_units(&Board::parse("3x4").unwrap(), 100), 0);
    }

    #[test]
    fn contradictory_facts_stop_the_walk_instead_of_counting_past_255() {
        // 3x6 has nimber 4: its options (regions of 16 cells, solved on the spot) show 0..3.
        // A false report "g ≤ 1" leaves every value up to the bound appearing among them.
        let board = Board::parse("3x6").unwrap();
        let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        let root = top.regions[0];
        assert!(top.report(root, Facts { excluded: 0, upper: 1 }));
        let f = top.frontier();
        assert_eq!(f.answer, None, "no answer from facts that contradict each other");
        assert_eq!(f.conflicts, vec![root]);
    }

    #[test]
    fn a_decided_question_leaves_the_frontier() {
        let board = Board::parse("4x6").unwrap();
        let mut top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        let first = top.frontier().open;
        assert!(first.len() > 1);
        let mut oracle = Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()));
        let ask = first[0].0;
        let v = oracle.nimber(ask.region).unwrap();
        assert!(top.report(ask.region, Facts::exact(v)));
        assert!(!top.report(ask.region, Facts::exact(v)), "the same facts again are no news");
        assert!(top.answers(&ask));
        assert!(!top.frontier().open.iter().any(|(a, _)| *a == ask));
    }
}
