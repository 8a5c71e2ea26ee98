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

use crate::board::Board;
use crate::region::{for_each_part, normalize, AnyRegion};
use crate::solver::{Res, Solver};
use cram_certificate::check::ShapeHash;
use cram_certificate::rules::components;
use cram_certificate::{Certificate, Claim, Fact, Shape};
use std::collections::HashMap;

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

/// Builds certificates with a solver as the oracle of values.
pub struct Prover<'a> {
    solver: &'a mut Solver,
    small: u32,
    facts: HashMap<Shape, Proven, ShapeHash>,
    /// Replies found: region and target value, the move (or none: the region's value is
    /// below the target). The same question comes up under many facts.
    replies: HashMap<(Shape, u8), Option<u16>, ShapeHash>,
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
        }
    }

    /// Facts found so far.
    pub fn facts(&self) -> usize {
        self.facts.len()
    }

    /// A certificate of `board`'s nimber (`outcome_only`: of who wins; when the player to
    /// move wins, one winning move is proved instead of the value).
    pub fn prove(&mut self, board: &Board, outcome_only: bool) -> Res<Certificate> {
        let (rows, cols) = (board.rows(), board.cols());
        let mut regions = Vec::new();
        components(rows, cols, board.empty(), |c| regions.push(Shape::of(rows, cols, c)));
        regions.sort_by_key(|r| std::cmp::Reverse(r.size()));
        let mut values = Vec::with_capacity(regions.len());
        for r in &regions {
            values.push(self.value(r)?);
        }
        let x = values.iter().fold(0, |x, v| x ^ v);
        let claim = if outcome_only && x != 0 { Claim::FirstPlayerWins } else { Claim::Nimber(x) };
        let mut root_reply = None;
        match claim {
            Claim::Nimber(_) => {
                for r in &regions {
                    self.require(r)?;
                }
            }
            Claim::FirstPlayerWins => {
                // A move in one region to make the whole *0: in a region whose value is
                // above the XOR of the others, there is a move to that XOR.
                let i = (0..regions.len())
                    .find(|&i| values[i] > x ^ values[i])
                    .expect("a nonzero XOR has a region above the XOR of the others");
                let others = x ^ values[i];
                for (j, r) in regions.iter().enumerate() {
                    if j != i {
                        self.require(r)?;
                    }
                }
                let h = regions[i];
                if h.size() > self.small && !self.facts.contains_key(&h) {
                    match self.reply(&h, others)? {
                        Some(m) => root_reply = Some((h, m)),
                        None => unreachable!("a region of value above t has a move to t"),
                    }
                }
            }
        }
        Ok(self.certificate(board, claim, root_reply))
    }

    /// The certificate of the facts the proof consults, with hints numbered against the
    /// facts found. Facts found but consulted by no check (a region whose proof was
    /// needed until another path gave it a fact of its own) are left out, which changes
    /// nothing the checker sees; so every fact left is needed, and dropping any one
    /// breaks the proof.
    fn certificate(&self, board: &Board, claim: Claim, root_reply: Option<(Shape, u16)>) -> Certificate {
        let mut queue: Vec<Shape> = Vec::new();
        let consult = |rs: &[Shape], queue: &mut Vec<Shape>| {
            queue.extend(rs.iter().filter(|r| self.facts.contains_key(r)));
        };
        let (rows, cols) = (board.rows(), board.cols());
        let mut roots = Vec::new();
        components(rows, cols, board.empty(), |c| roots.push(Shape::of(rows, cols, c)));
        consult(&roots, &mut queue);
        let mut hints = Vec::new();
        // The root needs its hint only if its region still has no fact.
        let root_hints = match root_reply {
            Some((h, m)) if !self.facts.contains_key(&h) => {
                hints.push(m as u32);
                consult(&h.after(h.moves()[m as usize]), &mut queue);
                0..1
            }
            _ => 0..0,
        };
        let mut kept: HashMap<Shape, Vec<u32>, ShapeHash> = HashMap::default();
        while let Some(s) = queue.pop() {
            if kept.contains_key(&s) {
                continue;
            }
            let p = &self.facts[&s];
            let mut own = Vec::new();
            let mut replies = p.replies.iter().peekable();
            for (k, m) in s.moves().into_iter().enumerate() {
                let chosen = replies.next_if(|r| r.0 as usize == k).map(|r| r.1);
                let regions = s.after(m);
                consult(&regions, &mut queue);
                let mut unknown = regions.iter().filter(|r| !self.is_known(r));
                if let (Some(h), None) = (unknown.next(), unknown.next()) {
                    let reply = chosen.expect("an option whose region has no fact had one when proved");
                    own.push(reply as u32);
                    consult(&h.after(h.moves()[reply as usize]), &mut queue);
                }
            }
            kept.insert(s, own);
        }
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
        Certificate { rows, cols, empty: board.empty(), claim, small: self.small, root_hints, facts, hints }
    }

    /// True when the checker will know the region's value: it has a fact or is small.
    fn is_known(&self, s: &Shape) -> bool {
        s.size() <= self.small || self.facts.contains_key(s)
    }

    /// The solver's regions of a shape: its parts after the solver's reductions.
    fn parts(s: &Shape) -> (Vec<AnyRegion>, u8) {
        let w = s.w as u32;
        let (mut parts, mut x) = (Vec::new(), 0);
        for_each_part(s.cells, w, None, &mut |c: u128| match c.count_ones() {
            0 | 1 => {}
            2 | 3 => x ^= 1,
            _ => parts.push(normalize(c, w)),
        });
        parts.sort_by_key(|p| std::cmp::Reverse(p.cells()));
        (parts, x)
    }

    /// The value of a region, by search if need be.
    fn value(&mut self, s: &Shape) -> Res<u8> {
        if let Some(p) = self.facts.get(s) {
            return Ok(p.value);
        }
        let (parts, mut x) = Self::parts(s);
        for p in parts {
            x ^= self.solver.nimber(p)?;
        }
        Ok(x)
    }

    /// The value of a region when the solver knows it without search.
    fn known_value(&self, s: &Shape) -> Option<u8> {
        if let Some(p) = self.facts.get(s) {
            return Some(p.value);
        }
        let (parts, x) = Self::parts(s);
        parts.iter().try_fold(x, |x, p| self.solver.bounds(p).value().map(|v| x ^ v))
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
        let mut options: Vec<Vec<Shape>> = Vec::with_capacity(moves.len());
        for &m in &moves {
            options.push(sorted(h.after(m)));
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
            let regions = sorted(s.after(m));
            let unknown: Vec<Shape> = regions.iter().filter(|r| !self.is_known(r)).copied().collect();
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
        Ok(())
    }
}

/// Regions largest first (the one a proof leaves without a fact is the largest).
fn sorted(mut rs: Vec<Shape>) -> Vec<Shape> {
    rs.sort_by_key(|r| std::cmp::Reverse(r.size()));
    rs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, DbSet, Mode};
    use std::sync::Arc;

    fn certified(spec: &str, small: u32, outcome_only: bool) -> (Certificate, u8) {
        let board = Board::parse(spec).unwrap();
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let v = solver.solve(&board, Mode::Nimber).unwrap().nimber.unwrap();
        let cert = Prover::new(&mut solver, small).prove(&board, outcome_only).unwrap();
        (cert, v)
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
    fn outcome_certificates_prove_one_winning_move() {
        let (cert, v) = certified("4x5", 4, true);
        assert!(v != 0 && cert.claim == Claim::FirstPlayerWins);
        cram_certificate::check(&cert.to_bytes(), 1).unwrap();
        let (full, _) = certified("4x5", 4, false);
        assert!(cert.facts.len() < full.facts.len(), "{} facts, {} for the value", cert.facts.len(), full.facts.len());
    }
}
