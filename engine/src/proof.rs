//! Proofs of solved values, written as certificates ([`cram_certificate`]) that an
//! independent checker verifies by the rules of the game alone.
//!
//! A certificate is a set of facts "region R has nimber v" on plain regions (4-connected
//! components, without the solver's reductions) and hints naming replies. The prover
//! builds one after a solve, asking the solver (whose table holds what the solve learnt)
//! for values, and following the proof the checker will walk: for each fact, every option
//! must be shown to differ from v — the option's regions all get facts but the largest,
//! H, for which a reply of H into a loss is named (or, when H has no such reply because
//! its value is below the one asked, a fact of its own) — and each value below v must be
//! the value of an option whose regions all have facts. Regions of at most `small` cells
//! get no facts: the checker computes them itself.

use crate::bits::Bits;
use crate::board::Board;
use crate::region::{bounding_box, for_each_component, for_each_part, least_flat8, normalize, restride, AnyRegion};
use crate::solver::{Res, Solution, Solver};

/// Facts whose proofs are not whole: an option of theirs leaves regions without facts
/// that no reply accounts for (imported facts that rest on a proof that was not
/// imported).
struct Incomplete(Vec<Shape>);
use cram_certificate::rules::components;
use cram_certificate::rules::ShapeHash;
use cram_certificate::{varint, Certificate, Claim, ExportedFact, Fact, Shape};
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// The default size up to which regions are left to the checker's own mex: measured,
/// docs/certificates.md (larger sizes shrink certificates and slow the check).
pub const DEFAULT_SMALL: u32 = 12;

/// A fact found, before its hints are numbered: the value, and for the options whose
/// largest region had no fact when the fact was proved, the reply chosen in that region
/// (option number, move number).
struct Proven {
    value: u8,
    replies: Vec<(u16, u16)>,
}

/// The facts a prover found (with the replies it chose), kept between provers.
pub struct Proofs {
    small: u32,
    facts: HashMap<Shape, Proven, ShapeHash>,
    replies: HashMap<(Shape, u8), Option<u16>, ShapeHash>,
    unsent: Vec<Shape>,
}

impl Proofs {
    /// The facts of the last [`Prover::export`] reached the coordinator: the next export
    /// leaves them out. Returns them (region and value), and keeps of each only its
    /// value: the replies went with the export, and a prover that goes on needs to know
    /// only that the fact is proved (a fact without its replies, if ever put in a
    /// certificate, is proved again: [`Prover::certify`]).
    pub fn sent(&mut self) -> Vec<(Shape, u8)> {
        let mut out = Vec::with_capacity(self.unsent.len());
        for s in self.unsent.drain(..) {
            if let Some(p) = self.facts.get_mut(&s) {
                p.replies = Vec::new();
                out.push((s, p.value));
            }
        }
        out
    }

    /// Adds facts proved elsewhere and already held by the coordinator (another search
    /// thread's): proofs that need them take them as known, and do not prove them again.
    pub fn add_known(&mut self, facts: &[(Shape, u8)]) {
        for &(s, value) in facts {
            self.facts.entry(s).or_insert(Proven { value, replies: Vec::new() });
        }
    }

    /// An empty set of proofs for regions above `small` cells.
    pub fn new(small: u32) -> Proofs {
        Proofs {
            small: small.min(cram_certificate::format::MAX_SMALL),
            facts: HashMap::default(),
            replies: HashMap::default(),
            unsent: Vec::new(),
        }
    }

    /// Facts held.
    pub fn len(&self) -> usize {
        self.facts.len()
    }

    /// True when no fact is held.
    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }
}

/// Builds certificates with a solver as the oracle of values.
pub struct Prover<'a> {
    solver: &'a mut Solver,
    small: u32,
    facts: HashMap<Shape, Proven, ShapeHash>,
    /// Replies found: region and target value, the move (or none: the region's value is
    /// below the target). The same question comes up under many facts.
    replies: HashMap<(Shape, u8), Option<u16>, ShapeHash>,
    /// Values known beforehand ([`Prover::preload_values`]).
    preloaded: HashMap<Shape, u8, ShapeHash>,
    /// Facts found and not yet sent ([`Prover::export`]).
    unsent: Vec<Shape>,
    /// Called after each fact found ([`Prover::on_fact`]).
    on_fact: Option<Box<dyn FnMut() + Send + 'a>>,
    /// Threads of the certificate's closure ([`Prover::set_threads`]).
    threads: usize,
}

/// Replies a prover hands on to the next ([`Prover::into_proofs`]); more are dropped
/// (some 50 bytes each).
const MAX_CACHED_REPLIES: usize = 8 << 20;

/// A proof export that does not read.
fn read_error(e: varint::ReadError) -> String {
    format!("the proof is malformed at byte {}: {}", e.at, e.what)
}

/// The largest proof, decompressed, [`read_export`] reads (besides the bound of
/// [`cram_certificate::format::max_raw_len`] on the compressed length).
const MAX_PROOF_BYTES: u64 = 1 << 34;

/// How many times its compressed length a proof may decompress to: [`Prover::export`]'s
/// varints compress 1.4 to 1.7 times (5x7's 1,421 proofs, 2026-12-07), and a proof read
/// takes some 13 times its decompressed length in memory, so a small proof that claims to
/// be a huge one is refused before it costs the coordinator gigabytes (4 KiB over it are
/// allowed, for the smallest proofs).
const MAX_PROOF_RATIO: u64 = 16;

/// Memory one fact read by [`read_export`] takes, besides its replies.
const FACT_BYTES: u64 = std::mem::size_of::<ExportedFact>() as u64;

/// Reads a proof export ([`Prover::export`]): its facts in the order written, each with its
/// replies, taking at most `memory` bytes (the decompressed export, the facts and their
/// replies): an export that would take more is refused before it does, as an export too
/// large for the reader (the coordinator's `--proof-memory-mb`). Refuses bytes that do not
/// decompress (or decompress to more than the compressed length allows,
/// [`cram_certificate::format::max_raw_len`]: decompression streams into a buffer that
/// grows as data arrives and stops there), regions that are not canonical, a value above
/// half a region's cells, a reply that names no option or move of the fact's region, and
/// bytes after the last fact. Whether the facts are true is for a
/// [`cram_certificate::Ledger`].
pub fn read_export(bytes: &[u8], memory: u64) -> Result<Vec<ExportedFact>, String> {
    // The decompressed export takes at most an eighth of `memory`; the facts, held in
    // exactly the room they need, at most a quarter; their replies, 4 bytes each from at
    // least 2 of the export, at most a quarter, and the allocator's least chunk (32 bytes)
    // for each fact's at most an eighth. Three quarters in all.
    let raw = decompress_export(bytes, memory / 8)?;
    let mut export = ExportReader::new(&raw)?;
    let most = memory / 4 / FACT_BYTES;
    if export.left > most {
        return Err(format!(
            "the proof holds {} facts, more than the {most} that fit the {} MiB a proof may take here",
            export.left,
            memory.div_ceil(1 << 20)
        ));
    }
    let mut facts = Vec::with_capacity(export.left as usize);
    while let Some(f) = export.next_fact()? {
        facts.push(f);
    }
    Ok(facts)
}

/// A proof export decompressed to at most `raw_limit` bytes (and what its compressed
/// length allows).
fn decompress_export(bytes: &[u8], raw_limit: u64) -> Result<Vec<u8>, String> {
    let limit = cram_certificate::format::max_raw_len(bytes.len() as u64)
        .min((bytes.len() as u64).saturating_mul(MAX_PROOF_RATIO).saturating_add(4096))
        .min(MAX_PROOF_BYTES)
        .min(raw_limit);
    cram_certificate::format::decompress_bounded(bytes, limit)
        .map_err(|e| format!("the proof does not decompress: {e}"))
}

/// A decompressed proof export being read, fact by fact ([`read_export`]'s rules).
struct ExportReader<'a> {
    r: varint::Reader<'a>,
    /// Facts not read yet.
    left: u64,
}

impl<'a> ExportReader<'a> {
    /// Reads the number of facts the export says it holds (at most one per five bytes).
    fn new(raw: &'a [u8]) -> Result<ExportReader<'a>, String> {
        let mut r = varint::Reader::new(raw);
        let n = r.varint(u64::MAX as u128).map_err(read_error)? as u64;
        if n > r.left() as u64 / 5 {
            return Err(format!("the proof says it holds {n} facts in {} bytes", r.left()));
        }
        Ok(ExportReader { r, left: n })
    }

    /// The next fact, or `None` after the last (when no bytes follow it).
    fn next_fact(&mut self) -> Result<Option<ExportedFact>, String> {
        let r = &mut self.r;
        if self.left == 0 {
            return if r.is_done() { Ok(None) } else { Err("bytes after the last fact of the proof".into()) };
        }
        self.left -= 1;
        let (h, w) = (r.byte().map_err(read_error)?, r.byte().map_err(read_error)?);
        let shape = Shape { h, w, cells: r.varint(u128::MAX).map_err(read_error)? };
        let value = r.byte().map_err(read_error)?;
        if !shape.is_canonical_region() || value as u32 > shape.size() / 2 {
            return Err(format!(
                "the proof states *{value} of {}, which is no canonical region of that value",
                shape.name()
            ));
        }
        let count = r.varint(u16::MAX as u128).map_err(read_error)? as usize;
        let moves = shape.moves().len() as u128;
        // A reply is at least two bytes: a count the bytes left cannot hold fails below,
        // after allocating no more than they could.
        let mut replies = Vec::with_capacity(count.min(r.left() / 2));
        for _ in 0..count {
            let (k, m) =
                (r.varint(u16::MAX as u128).map_err(read_error)?, r.varint(u16::MAX as u128).map_err(read_error)?);
            if k >= moves || m >= moves {
                return Err(format!("a reply of {} names move {k}/{m} of {moves}", shape.name()));
            }
            replies.push((k as u16, m as u16));
        }
        Ok(Some(ExportedFact { shape, value, replies }))
    }
}

/// A level of the closure ([`Prover::certificate`]) is split over threads only when each
/// gets at least this many facts to visit.
const MIN_VISITS_A_THREAD: usize = 256;

/// What the closure finds of one fact.
struct Visit {
    /// Its hints: the reply of each option that needs one, in the order of the options.
    hints: Vec<u32>,
    /// False when an option lacks what it needs (a reply, or facts of its regions).
    whole: bool,
    /// The regions with facts its check consults.
    consulted: Vec<Shape>,
}

/// True when the checker will know the value of region `s`: it has a fact among `facts`,
/// or at most `small` cells.
fn known_to_checker(facts: &HashMap<Shape, Proven, ShapeHash>, small: u32, s: &Shape) -> bool {
    s.size() <= small || facts.contains_key(s)
}

/// Visits fact `s` of `facts` for the closure: the hints its check needs, whether it has
/// them all, and the regions with facts the check consults (regions of at most `small`
/// cells are the checker's own).
fn visit(facts: &HashMap<Shape, Proven, ShapeHash>, small: u32, s: &Shape) -> Visit {
    let is_known = |r: &Shape| known_to_checker(facts, small, r);
    let p = &facts[s];
    let mut v = Visit { hints: Vec::new(), whole: true, consulted: Vec::new() };
    let mut replies = p.replies.iter().peekable();
    for (k, m) in s.moves().into_iter().enumerate() {
        let chosen = replies.next_if(|r| r.0 as usize == k).map(|r| r.1);
        let regions = after(s, m);
        v.consulted.extend(regions.iter().filter(|r| facts.contains_key(r)));
        let unknown: SmallVec<[&Shape; 4]> = regions.iter().filter(|r| !is_known(r)).collect();
        match unknown[..] {
            [] => {}
            [h] => {
                // An option whose region has no fact had a reply when it was proved (an
                // imported proof may lack it, name no move, or rest on facts of a proof
                // that was not imported).
                let moves = h.moves();
                let Some((c, &m)) = chosen.and_then(|c| Some((c, moves.get(c as usize)?))) else {
                    v.whole = false;
                    continue;
                };
                let left = after(h, m);
                v.whole &= left.iter().all(is_known);
                v.hints.push(c as u32);
                v.consulted.extend(left.iter().filter(|r| facts.contains_key(r)));
            }
            _ => v.whole = false,
        }
    }
    v
}

impl<'a> Prover<'a> {
    /// A prover asking `solver` (best one that has just solved the position: its table
    /// answers most questions without search) and leaving regions of at most `small`
    /// cells to the checker (at most [`cram_certificate::format::MAX_SMALL`]).
    pub fn new(solver: &'a mut Solver, small: u32) -> Prover<'a> {
        Prover {
            solver,
            small: small.min(cram_certificate::format::MAX_SMALL),
            facts: HashMap::default(),
            replies: HashMap::default(),
            preloaded: HashMap::default(),
            unsent: Vec::new(),
            on_fact: None,
            threads: 1,
        }
    }

    /// Walks the facts a certificate needs on `threads` threads (one by default): the walk
    /// at the end of [`Prover::prove`], which visits every option of every fact.
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// A prover that goes on from what an earlier one found (with the same `small`; a
    /// `proofs` of another size is dropped).
    pub fn with_proofs(solver: &'a mut Solver, small: u32, proofs: Proofs) -> Prover<'a> {
        let mut p = Prover::new(solver, small);
        if proofs.small == p.small {
            p.facts = proofs.facts;
            p.replies = proofs.replies;
            p.unsent = proofs.unsent;
        }
        p
    }

    /// Calls `f` after each fact found: a proof can take minutes with little search, and
    /// a worker shows its coordinator that it is still at it.
    pub fn on_fact(&mut self, f: impl FnMut() + Send + 'a) {
        self.on_fact = Some(Box::new(f));
    }

    /// Facts found so far.
    pub fn facts(&self) -> usize {
        self.facts.len()
    }

    /// A certificate of the answer `solution` a solve gave for `board`: its nimber, or,
    /// when only the outcome is known and the player to move wins, one winning move
    /// (proved without the value when the largest region has one; else the value is
    /// proved after all).
    pub fn prove(&mut self, board: &Board, solution: &Solution) -> Res<Certificate> {
        let (rows, cols) = (board.rows(), board.cols());
        let mut regions = Vec::new();
        components(rows, cols, board.empty(), |c| regions.push(Shape::of(rows, cols, c)));
        regions.sort_by_key(|r| std::cmp::Reverse(r.size()));
        let Some((largest, minors)) = regions.split_first() else {
            return self.certify(board, Claim::Nimber(0), None);
        };
        let mut x = 0;
        for r in minors {
            x ^= self.value(r)?;
            self.require(r)?;
        }
        if solution.nimber.is_none() {
            // The first player wins: a move of the largest region to the XOR of the others.
            if let Some(m) = self.reply(largest, x)? {
                let reply = (!self.is_known(largest)).then_some((*largest, m));
                return self.certify(board, Claim::FirstPlayerWins, reply);
            }
        }
        let v = self.value(largest)?;
        self.require(largest)?;
        self.certify(board, Claim::Nimber(v ^ x), None)
    }

    /// [`Prover::certificate`], proving again (with the solver) each imported fact found
    /// to lack a reply it needs: a fact sent with a result the coordinator did not keep.
    fn certify(&mut self, board: &Board, claim: Claim, reply: Option<(Shape, u16)>) -> Res<Certificate> {
        loop {
            match self.certificate(board, claim, reply) {
                Ok(c) => return Ok(c),
                Err(Incomplete(broken)) => {
                    for s in &broken {
                        self.facts.remove(s);
                    }
                    let broken_set: std::collections::HashSet<Shape, ShapeHash> = broken.iter().copied().collect();
                    self.replies.retain(|(r, _), _| !broken_set.contains(r));
                    for s in &broken {
                        self.require(s)?;
                    }
                }
            }
        }
    }

    /// Proves that region `s` has its value (the proof of a cluster unit that asked for a
    /// region's nimber or was answered "yes"); the facts go with the unit's result.
    pub fn prove_value(&mut self, s: &Shape) -> Res<()> {
        self.require(s)
    }

    /// Proves that region `s` does not have value `k` (a unit answered "no"): a move of
    /// `s` into regions whose values XOR to `k`, or, when there is none, the value of `s`.
    pub fn prove_not(&mut self, s: &Shape, k: u8) -> Res<()> {
        if self.is_known(s) {
            return Ok(());
        }
        match self.reply(s, k)? {
            Some(_) => Ok(()),
            None => self.require(s),
        }
    }

    /// Makes the values of `values` known to the prover without asking the solver (what a
    /// cluster's coordinator holds): they decide which facts and replies a proof uses,
    /// never stand for facts themselves.
    pub fn preload_values(&mut self, values: impl IntoIterator<Item = (Shape, u8)>) {
        self.preloaded.extend(values);
    }

    /// The facts found since the last [`Proofs::sent`], with their replies, compressed:
    /// what a worker sends with a unit's result for the coordinator to add to its own
    /// prover ([`Prover::import`]). A unit's proof may rest on facts sent with earlier
    /// results; the coordinator's assembly proves again what a lost result took with it.
    pub fn export(&self) -> Vec<u8> {
        let mut out = Vec::new();
        varint::put(&mut out, self.unsent.len() as u128);
        for s in &self.unsent {
            let p = &self.facts[s];
            out.extend_from_slice(&[s.h, s.w]);
            varint::put(&mut out, s.cells);
            out.push(p.value);
            varint::put(&mut out, p.replies.len() as u128);
            for &(k, m) in &p.replies {
                varint::put(&mut out, k as u128);
                varint::put(&mut out, m as u128);
            }
        }
        zstd::bulk::compress(&out, 3).expect("compressing to memory")
    }

    /// What this prover knows, to be handed to the next one ([`Prover::with_proofs`]):
    /// a worker keeps it across units, so that the facts its units share are proved once.
    pub fn into_proofs(self) -> Proofs {
        // The replies found are a cache (found again when asked again): bounded.
        let replies = if self.replies.len() > MAX_CACHED_REPLIES { HashMap::default() } else { self.replies };
        Proofs { small: self.small, facts: self.facts, replies, unsent: self.unsent }
    }

    /// Adds the facts of an [`Prover::export`]; returns how many were new. Refuses what
    /// [`read_export`] refuses (memory stays within what the compressed length allows),
    /// and a value other than the one already held for a region (one of the two proofs is
    /// false).
    pub fn import(&mut self, bytes: &[u8]) -> Result<usize, String> {
        let raw = decompress_export(bytes, u64::MAX)?;
        let mut export = ExportReader::new(&raw)?;
        let mut new = 0;
        while let Some(f) = export.next_fact()? {
            match self.facts.get(&f.shape) {
                Some(held) if held.value != f.value => {
                    return Err(format!(
                        "the proof states *{} of {}, another *{}",
                        f.value,
                        f.shape.name(),
                        held.value
                    ));
                }
                Some(_) => {}
                None => {
                    self.facts.insert(f.shape, Proven { value: f.value, replies: f.replies });
                    new += 1;
                }
            }
        }
        Ok(new)
    }

    /// The certificate of the facts the proof consults, with hints numbered against the
    /// facts found. Facts found but consulted by no check (a region whose proof was
    /// needed until another path gave it a fact of its own) are left out, which changes
    /// nothing the checker sees; so every fact left is needed, and dropping any one
    /// breaks the proof.
    fn certificate(
        &self,
        board: &Board,
        claim: Claim,
        root_reply: Option<(Shape, u16)>,
    ) -> Result<Certificate, Incomplete> {
        let (rows, cols) = (board.rows(), board.cols());
        let mut roots = Vec::new();
        components(rows, cols, board.empty(), |c| roots.push(Shape::of(rows, cols, c)));
        let mut hints = Vec::new();
        // The root needs its hint only if its region still has no fact.
        let root_hints = match root_reply {
            Some((h, m)) if !self.facts.contains_key(&h) => {
                hints.push(m as u32);
                roots.extend(after(&h, h.moves()[m as usize]));
                0..1
            }
            _ => 0..0,
        };
        let kept = self.closure(&roots)?;
        let mut shapes: Vec<Shape> = kept.keys().copied().collect();
        shapes.sort();
        let facts = shapes
            .into_iter()
            .map(|s| {
                let start = hints.len();
                hints.extend_from_slice(&kept[&s]);
                Fact { shape: s, value: self.facts[&s].value, hints: start..hints.len() }
            })
            .collect();
        Ok(Certificate { rows, cols, empty: board.empty(), claim, small: self.small, root_hints, facts, hints })
    }

    /// The facts a check starting from the regions `roots` consults, each with its hints
    /// numbered against the facts held: the walk the checker makes (every option's regions,
    /// and for an option with one region without a fact, the regions of the reply). Or
    /// every fact the walk found not whole: an option with two regions without facts, one
    /// without a reply, or a reply that leaves a region without a fact.
    fn closure(&self, roots: &[Shape]) -> Result<HashMap<Shape, Vec<u32>, ShapeHash>, Incomplete> {
        let (facts, small) = (&self.facts, self.small);
        let mut seen: HashSet<Shape, ShapeHash> = HashSet::default();
        let mut frontier: Vec<Shape> =
            roots.iter().copied().filter(|r| facts.contains_key(r) && seen.insert(*r)).collect();
        let mut kept: HashMap<Shape, Vec<u32>, ShapeHash> = HashMap::default();
        let mut broken = Vec::new();
        // Breadth first, each level's facts visited on the prover's threads (a visit needs
        // only the facts; what it finds is merged in the order of the level).
        while !frontier.is_empty() {
            let threads = self.threads.min(frontier.len() / MIN_VISITS_A_THREAD).max(1);
            let visits: Vec<Visit> = if threads == 1 {
                frontier.iter().map(|s| visit(facts, small, s)).collect()
            } else {
                let chunk = frontier.len().div_ceil(threads);
                std::thread::scope(|scope| {
                    let handles: Vec<_> = frontier
                        .chunks(chunk)
                        .map(|part| {
                            scope.spawn(move || part.iter().map(|s| visit(facts, small, s)).collect::<Vec<_>>())
                        })
                        .collect();
                    handles.into_iter().flat_map(|h| h.join().expect("a closure thread panicked")).collect()
                })
            };
            let mut next = Vec::new();
            for (s, v) in frontier.iter().zip(visits) {
                if !v.whole {
                    broken.push(*s);
                }
                kept.insert(*s, v.hints);
                next.extend(v.consulted.into_iter().filter(|r| seen.insert(*r)));
            }
            frontier = next;
        }
        if broken.is_empty() {
            Ok(kept)
        } else {
            Err(Incomplete(broken))
        }
    }

    /// True when the checker will know the region's value: it has a fact or is small.
    fn is_known(&self, s: &Shape) -> bool {
        known_to_checker(&self.facts, self.small, s)
    }

    /// The solver's regions of a shape: its parts after the solver's reductions.
    fn parts(s: &Shape) -> (Vec<AnyRegion>, u8) {
        let (mut parts, mut x) = (Vec::new(), 0);
        each_solver_part(s, |p| match p {
            Some(p) => parts.push(p),
            None => x ^= 1,
        });
        parts.sort_by_key(|p| std::cmp::Reverse(p.cells()));
        (parts, x)
    }

    /// The value of a region, by search if need be.
    fn value(&mut self, s: &Shape) -> Res<u8> {
        if let Some(v) = self.facts.get(s).map(|p| p.value).or_else(|| self.preloaded.get(s).copied()) {
            return Ok(v);
        }
        let (parts, mut x) = Self::parts(s);
        for p in parts {
            x ^= self.solver.nimber(p)?;
        }
        Ok(x)
    }

    /// The value of a region when the solver knows it without search. (Asked of every
    /// option of every fact, so its parts are looked up as they are found, not gathered.)
    fn known_value(&self, s: &Shape) -> Option<u8> {
        if let Some(v) = self.facts.get(s).map(|p| p.value).or_else(|| self.preloaded.get(s).copied()) {
            return Some(v);
        }
        let mut x = Some(0);
        each_solver_part(s, |p| {
            x = match (x, p) {
                (None, _) => None,
                (Some(x), None) => Some(x ^ 1),
                (Some(x), Some(p)) => self.solver.bounds(&p).value().map(|v| x ^ v),
            }
        });
        x
    }

    /// True when the regions `rs` XOR to `t`, by search if need be (exact values of all
    /// but the largest, then the question for it).
    fn regions_are(&mut self, rs: &[Shape], t: u8) -> Res<bool> {
        let Some((largest, rest)) = rs.split_first() else { return Ok(t == 0) };
        let mut x = 0;
        for r in rest {
            x ^= self.value(r)?;
        }
        let (parts, y) = Self::parts(largest);
        let Some((hardest, others)) = parts.split_first() else { return Ok(x ^ y == t) };
        let mut z = x ^ y;
        for p in others {
            z ^= self.solver.nimber(*p)?;
        }
        self.solver.is_value(*hardest, t ^ z)
    }

    /// A move of region `h` into regions whose values XOR to `t`, chosen so that the proof
    /// grows least: one whose regions need no new facts, then one whose values the solver
    /// knows, then by search in the solver's order. `None` when there is none (the value
    /// of `h` is below `t`).
    fn reply(&mut self, h: &Shape, t: u8) -> Res<Option<u16>> {
        if let Some(&known) = self.replies.get(&(*h, t)) {
            return Ok(known);
        }
        let found = self.find_reply(h, t)?;
        self.replies.insert((*h, t), found);
        Ok(found)
    }

    fn find_reply(&mut self, h: &Shape, t: u8) -> Res<Option<u16>> {
        let moves = h.moves();
        let xor_known = |p: &Prover, rs: &[Shape]| {
            rs.iter().try_fold(0, |x, r| {
                if r.size() <= p.small {
                    // Small regions: the solver's value is exact (and cheap).
                    p.known_value(r).map(|v| x ^ v)
                } else {
                    p.facts.get(r).map(|f| x ^ f.value)
                }
            })
        };
        // The options, computed as far as needed: often the first reply that needs no new
        // fact comes early.
        let mut options: Vec<Regions> = Vec::with_capacity(moves.len());
        for &m in &moves {
            options.push(sorted(after(h, m)));
            if xor_known(self, options.last().expect("just pushed")) == Some(t) {
                return Ok(Some(options.len() as u16 - 1));
            }
        }
        let cheap =
            options.iter().position(|rs| rs.iter().try_fold(0, |x, r| self.known_value(r).map(|v| x ^ v)) == Some(t));
        if let Some(i) = cheap {
            self.require_all(&options[i])?;
            return Ok(Some(i as u16));
        }
        if self.known_value(h).is_some_and(|v| v < t) {
            return Ok(None);
        }
        let mut order: Vec<usize> = (0..options.len()).collect();
        order.sort_by_key(|&i| (options[i].len() > 1, options[i].iter().map(|r| r.size() * r.size()).sum::<u32>()));
        for i in order {
            if self.regions_are(&options[i], t)? {
                self.require_all(&options[i])?;
                return Ok(Some(i as u16));
            }
        }
        Ok(None)
    }

    fn require_all(&mut self, rs: &[Shape]) -> Res<()> {
        for r in rs {
            self.require(r)?;
        }
        Ok(())
    }

    /// Makes sure region `s` has a fact (unless it is small), with what its proof needs.
    fn require(&mut self, s: &Shape) -> Res<()> {
        if self.is_known(s) {
            return Ok(());
        }
        let v = self.value(s)?;
        let moves = s.moves();
        let mut replies = Vec::new();
        // Every option differs from v.
        for (k, &m) in moves.iter().enumerate() {
            let regions = sorted(after(s, m));
            let unknown: Regions = regions.iter().filter(|r| !self.is_known(r)).copied().collect();
            let Some((h, rest)) = unknown.split_first() else { continue };
            self.require_all(rest)?;
            if self.is_known(h) {
                continue;
            }
            let mut x = 0;
            for r in regions.iter().filter(|r| *r != h) {
                x ^= self.value(r)?;
            }
            match self.reply(h, v ^ x)? {
                Some(reply) => replies.push((k as u16, reply)),
                None => self.require(h)?,
            }
        }
        // Each value below v is shown by an option whose regions all have facts.
        for j in 0..v {
            match self.reply(s, j)? {
                Some(_) => {}
                None => unreachable!("a region of value {v} has an option of value {j}"),
            }
        }
        self.facts.insert(*s, Proven { value: v, replies });
        self.unsent.push(*s);
        if let Some(f) = self.on_fact.as_mut() {
            f();
        }
        Ok(())
    }
}

/// The regions an option leaves: a move splits a region into at most six (the domino's
/// neighbours), nearly always one or two, so they are held inline (the prover makes one
/// such list for every option of every fact it proves).
type Regions = SmallVec<[Shape; 4]>;

/// The regions left by removing the cells `taken` from `s`: what [`Shape::after`] gives,
/// in the same order, computed with the solver's word operations (the prover asks this of
/// every option of every fact, several times; the checker keeps its own plain code).
fn after(s: &Shape, taken: u128) -> Regions {
    let w = s.w as u32;
    let mut out = Regions::new();
    let left = s.cells & !taken;
    if fits_a_word(s) {
        for_each_component(left as u64, w, |c: u64| out.push(shape_of(c, w)));
    } else {
        for_each_component(left, w, |c: u128| out.push(shape_of(c, w)));
    }
    out
}

/// True when a shape's box is held in a 64-bit word (most are): the prover then works on
/// it in one (shifts of a u128 cost more), as the solver does (rows of 64 cells excepted).
fn fits_a_word(s: &Shape) -> bool {
    (s.h as u32) * (s.w as u32) <= 64 && s.w < 64
}

/// Calls `f` with each part of a shape after the solver's reductions (in one word when
/// it fits): `Some` region to search, or `None` for a part of 2 or 3 cells (value 1);
/// single cells are skipped (value 0).
fn each_solver_part(s: &Shape, mut f: impl FnMut(Option<AnyRegion>)) {
    if fits_a_word(s) {
        parts_of(s.cells as u64, s.w as u32, &mut f);
    } else {
        parts_of(s.cells, s.w as u32, &mut f);
    }
}

/// [`each_solver_part`] on the cells of a box `w` wide, in the word `B`.
fn parts_of<B: Bits>(cells: B, w: u32, f: &mut impl FnMut(Option<AnyRegion>)) {
    for_each_part(cells, w, None, &mut |c: B| match c.count() {
        0 | 1 => {}
        2 | 3 => f(None),
        _ => f(Some(normalize(c, w))),
    });
}

/// The [`Shape`] of the nonempty cells `c` of a box `w` wide: by [`least_flat8`] when they
/// fit 8×8; beyond, the solver's canonical form is the shape's (the least of the images no
/// taller than wide, all eight when square, numbered with a stride of the width).
fn shape_of<B: Bits>(c: B, w: u32) -> Shape {
    let (corner, bh, bw) = bounding_box(c, w);
    if bh <= 8 && bw <= 8 {
        let (least, sh, sw) = least_flat8(restride(corner, w, bh, bw, 8) as u64);
        return Shape { h: sh as u8, w: sw as u8, cells: restride(least as u128, 8, sh, sw, sw) };
    }
    let r = normalize(c, w);
    let (sh, sw) = r.dims();
    Shape { h: sh as u8, w: sw as u8, cells: r.dense() }
}

/// Regions largest first (the one a proof leaves without a fact is the largest).
fn sorted(mut rs: Regions) -> Regions {
    rs.sort_by_key(|r| std::cmp::Reverse(r.size()));
    rs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, DbSet, Mode};
    use std::sync::Arc;

    /// Memory enough for any export a test reads.
    const ANY: u64 = u64::MAX;

    fn certified(spec: &str, small: u32, outcome_only: bool) -> (Certificate, u8) {
        let board = Board::parse(spec).unwrap();
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let mode = if outcome_only { Mode::Outcome } else { Mode::Nimber };
        let solution = solver.solve(&board, mode).unwrap();
        let v = solver.solve(&board, Mode::Nimber).unwrap().nimber.unwrap();
        let cert = Prover::new(&mut solver, small).prove(&board, &solution).unwrap();
        (cert, v)
    }

    #[test]
    fn the_closure_on_several_threads_writes_the_same_certificate() {
        // 5x6 with small = 6: levels of thousands of facts, split over the threads.
        let board = Board::parse("5x6").unwrap();
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let solution = solver.solve(&board, Mode::Nimber).unwrap();
        let mut one = Prover::new(&mut solver, 6);
        let cert = one.prove(&board, &solution).unwrap();
        let proofs = one.into_proofs();
        // Its widest levels (855 and 1,369 facts) go to three and four threads.
        assert!(cert.facts.len() > 4 * MIN_VISITS_A_THREAD, "{} facts", cert.facts.len());
        let mut four = Prover::with_proofs(&mut solver, 6, proofs);
        four.set_threads(4);
        let again = four.prove(&board, &solution).unwrap();
        assert_eq!(again.to_bytes(), cert.to_bytes());
        assert_eq!(cram_certificate::check(&again.to_bytes(), 2).unwrap().claim, Claim::Nimber(2));
    }

    #[test]
    fn a_ledger_on_several_threads_gives_one_threads_verdicts() {
        // 5x6's proof with small = 6: sizes of hundreds of facts, verified side by side.
        let board = Board::parse("5x6").unwrap();
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let root = Shape::of(5, 6, board.empty());
        let mut p = Prover::new(&mut solver, 6);
        p.prove_value(&root).unwrap();
        let facts = read_export(&p.export(), ANY).unwrap();
        let widest = facts.iter().fold(HashMap::<u32, usize>::new(), |mut m, f| {
            *m.entry(f.shape.size()).or_default() += 1;
            m
        });
        assert!(widest.values().any(|&n| n >= 4 * cram_certificate::ledger::MIN_FACTS_A_THREAD), "{widest:?}");
        let both = |facts: &[ExportedFact]| {
            let one = cram_certificate::Ledger::new(6).verify(facts);
            let four = cram_certificate::Ledger::new(6).verify_on(facts, 4);
            assert_eq!(one, four);
            one
        };
        assert_eq!(both(&facts), Ok(facts.len()));
        // A false value in the widest size, late in it and early; a region twice with
        // another value: refused, the same fact named, by one thread and by four.
        let size = *widest.iter().max_by_key(|e| e.1).unwrap().0;
        let of_size: Vec<usize> = (0..facts.len()).filter(|&i| facts[i].shape.size() == size).collect();
        for &i in [of_size[of_size.len() - 1], of_size[of_size.len() / 2], of_size[0]].iter() {
            let mut wrong = facts.clone();
            wrong[i].value ^= 1;
            assert!(matches!(both(&wrong), Err(cram_certificate::Rejection::Fact { .. })));
        }
        let mut twice = facts.clone();
        let mut copy = facts[of_size[3]].clone();
        copy.value ^= 1;
        twice.push(copy);
        let r = both(&twice).unwrap_err().to_string();
        assert!(r.contains("is held for this region"), "{r}");
    }

    /// The prover's `after` gives what the checker's `Shape::after` gives, in the same
    /// order, on random regions of boxes from 1×1 to 128 cells (8×8 and wider, taller,
    /// square), for every move; and the solver's parts of each region left are the same
    /// computed in a 64-bit word as in a 128-bit one.
    #[test]
    fn the_provers_regions_after_a_move_are_the_checkers() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut checked = 0;
        for _ in 0..4000 {
            let h = 1 + (next() % 12) as u32;
            let w = 1 + (next() % (128 / h).min(24) as u64) as u32;
            let n = h * w;
            let mut cells = (next() as u128) << 64 | next() as u128;
            cells |= (next() as u128) << 64 | next() as u128; // dense: three in four cells
            cells &= <u128 as crate::bits::Bits>::low_mask(n);
            if cells == 0 {
                continue;
            }
            let mut largest = 0u128;
            components(h, w, cells, |c| {
                if c.count_ones() > largest.count_ones() {
                    largest = c;
                }
            });
            let shape = Shape::of(h, w, largest);
            for m in shape.moves() {
                let left = after(&shape, m);
                assert_eq!(left.to_vec(), shape.after(m), "{} after {m:x}", shape.name());
                for r in left.iter().filter(|r| fits_a_word(r)) {
                    let (mut narrow, mut wide) = (Vec::new(), Vec::new());
                    parts_of(r.cells as u64, r.w as u32, &mut |p| narrow.push(p));
                    parts_of(r.cells, r.w as u32, &mut |p| wide.push(p));
                    assert_eq!(narrow, wide, "{}", r.name());
                }
                checked += 1;
            }
        }
        assert!(checked > 50_000, "{checked}");
    }

    #[test]
    fn certificates_of_small_boards_check() {
        for spec in ["3x5", "4x4", "2x9", "3x6", ".#../..../...#/....", "4x5"] {
            for small in [4, 8] {
                let (cert, v) = certified(spec, small, false);
                assert_eq!(cert.claim, Claim::Nimber(v));
                let bytes = cert.to_bytes();
                let checked = cram_certificate::check(&bytes, 2).unwrap_or_else(|e| panic!("{spec}: {e}"));
                assert_eq!(checked.facts as usize, cert.facts.len());
            }
        }
    }

    #[test]
    fn proofs_of_parts_assemble_into_a_certificate() {
        // As a cluster does: separate provers (workers) prove the regions of the root's
        // options, and one prover (the coordinator) imports their proofs and proves the root.
        let board = Board::parse("4x5").unwrap();
        let fresh = || Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let root = Shape::of(4, 5, board.empty());
        let mut parts = Vec::new();
        for m in root.moves() {
            for r in root.after(m) {
                let mut s = fresh();
                let mut p = Prover::new(&mut s, 4);
                p.prove_value(&r).unwrap();
                parts.push(p.export());
            }
        }
        let mut s = fresh();
        let solution = s.solve(&board, Mode::Nimber).unwrap();
        let mut top = Prover::new(&mut s, 4);
        let new: usize = parts.iter().map(|b| top.import(b).unwrap()).sum();
        assert!(new > 10 && top.import(&parts[0]).unwrap() == 0, "{new} new facts, the second time none");
        let cert = top.prove(&board, &solution).unwrap();
        assert_eq!(cram_certificate::check(&cert.to_bytes(), 1).unwrap().claim, Claim::Nimber(2));
        // A proof that contradicts one held, or is not one, is refused.
        let r = root.after(root.moves()[0])[0];
        let mut s = fresh();
        let mut liar = Prover::new(&mut s, 4);
        liar.prove_value(&r).unwrap();
        liar.facts.get_mut(&r).unwrap().value ^= 1;
        assert!(top.import(&liar.export()).unwrap_err().contains("another"));
        assert!(top.import(b"not a proof").is_err());
    }

    #[test]
    fn facts_sent_are_known_to_later_provers_and_sent_once() {
        // A worker's thread: a unit's proof is sent, the next unit's prover goes on from it;
        // another thread is given the sent facts and proves nothing of them again.
        let board = Board::parse("4x5").unwrap();
        let root = Shape::of(4, 5, board.empty());
        let region = root.after(root.moves()[0])[0];
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let mut p = Prover::new(&mut solver, 4);
        p.prove_value(&region).unwrap();
        let first = p.facts();
        let mut proofs = p.into_proofs();
        let sent = proofs.sent();
        assert_eq!(sent.len(), first);
        assert!(proofs.sent().is_empty(), "sent once");
        let mut p = Prover::with_proofs(&mut solver, 4, proofs);
        p.prove_value(&region).unwrap();
        assert_eq!(p.facts(), first, "nothing proved again");
        let mut other = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let mut given = Proofs::new(4);
        given.add_known(&sent);
        let mut q = Prover::with_proofs(&mut other, 4, given);
        q.prove_value(&region).unwrap();
        assert!(q.into_proofs().sent().is_empty(), "the other thread sends nothing");
    }

    #[test]
    fn outcome_certificates_prove_one_winning_move() {
        let (cert, v) = certified("4x5", 4, true);
        assert!(v != 0 && cert.claim == Claim::FirstPlayerWins);
        cram_certificate::check(&cert.to_bytes(), 1).unwrap();
        let (full, _) = certified("4x5", 4, false);
        assert!(cert.facts.len() < full.facts.len(), "{} facts, {} for the value", cert.facts.len(), full.facts.len());
    }

    #[test]
    fn exports_read_back_and_bombs_are_refused_quickly() {
        let board = Board::parse("4x5").unwrap();
        let root = Shape::of(4, 5, board.empty());
        let mut s = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let mut p = Prover::new(&mut s, 4);
        p.prove_value(&root).unwrap();
        let bytes = p.export();
        let facts = read_export(&bytes, ANY).unwrap();
        assert_eq!(facts.len(), p.facts());
        // Too large for the memory a reader gives it: refused, by its facts or its bytes.
        let need = 4 * FACT_BYTES * facts.len() as u64;
        assert_eq!(read_export(&bytes, need).unwrap().len(), facts.len());
        let e = read_export(&bytes, need - 4 * FACT_BYTES).unwrap_err();
        assert!(e.contains(&format!("holds {} facts", facts.len())) && e.contains("MiB a proof may take"), "{e}");
        let raw = zstd::bulk::decompress(&bytes, 1 << 24).unwrap().len() as u64;
        assert!(read_export(&bytes, 8 * raw - 8).unwrap_err().contains("more than"));
        assert!(facts.iter().all(|f| p.facts[&f.shape].value == f.value && p.facts[&f.shape].replies == f.replies));
        let mut s2 = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        assert_eq!(Prover::new(&mut s2, 4).import(&bytes), Ok(facts.len()));
        // 2 GiB of zeros in 64 KiB (16,384 blocks of 128 KiB, 4 bytes each): refused once
        // 256 times 64 KiB plus 1 MiB are out, without reserving more.
        let mut bomb = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3];
        for i in 0..16384 {
            let header = (i + 1 == 16384) as u32 | 1 << 1 | (128 << 10) << 3;
            bomb.extend_from_slice(&header.to_le_bytes()[..3]);
            bomb.push(0);
        }
        let start = std::time::Instant::now();
        let e = Prover::new(&mut s2, 4).import(&bomb).unwrap_err();
        assert!(e.contains("does not decompress") && e.contains("more than"), "{e}");
        assert!(read_export(&bomb, ANY).is_err());
        assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
        // Cut short, noise, a count of facts larger than the data.
        assert!(read_export(&bytes[..bytes.len() / 2], ANY).is_err());
        assert!(read_export(b"noise", ANY).is_err());
        let mut many = Vec::new();
        cram_certificate::varint::put(&mut many, u64::MAX as u128);
        assert!(read_export(&zstd::bulk::compress(&many, 3).unwrap(), ANY).unwrap_err().contains("facts in"));
        // Valid facts that compress far better than any proof (the same 1×2 = *1 a
        // million times: 5 MB in a few KB, some 64 MB in memory): refused, unread.
        let mut same = Vec::new();
        cram_certificate::varint::put(&mut same, 1_000_000);
        for _ in 0..1_000_000 {
            same.extend_from_slice(&[1, 2, 3, 1, 0]);
        }
        let packed = zstd::bulk::compress(&same, 3).unwrap();
        assert!(packed.len() * 16 + 4096 < same.len(), "{} bytes", packed.len());
        assert!(read_export(&packed, ANY).unwrap_err().contains("does not decompress"));
        // The same, few enough to pass the ratio: read.
        let mut few = Vec::new();
        cram_certificate::varint::put(&mut few, 100);
        for _ in 0..100 {
            few.extend_from_slice(&[1, 2, 3, 1, 0]);
        }
        assert_eq!(read_export(&zstd::bulk::compress(&few, 3).unwrap(), ANY).unwrap().len(), 100);
    }
}
