//! Certificates: every one the prover writes is accepted by the independent checker and
//! proves the value a brute-force solver written here finds (every empty board up to 24
//! cells, random positions, with and without databases and pairing; the published values
//! of the boards of 25 to 30 cells), and every mutation of one — a fact dropped, a value
//! changed, a byte flipped, the file cut short — is refused. Proof exports, as a cluster's
//! workers send them, are verified one after another by a ledger, and a false or missing
//! fact in one is refused.

use cram_certificate::rules::Shape;
use cram_certificate::{check, Certificate, Claim, ExportedFact, Ledger, Rejection};
use cram_engine::proof::{read_export, Prover};
use cram_engine::{Board, Config, Database, DbSet, Mode, Solver};
use std::collections::HashMap;
use std::sync::Arc;

mod common;
use common::Lcg;

/// The value of a position by the mex rule, over 4-connected components memoised up to
/// translation: plain code, no canonical forms, no reductions.
struct Brute {
    cols: u32,
    rows: u32,
    memo: HashMap<u128, u8>,
}

impl Brute {
    fn new(rows: u32, cols: u32) -> Brute {
        Brute { rows, cols, memo: HashMap::new() }
    }

    fn components(&self, mut mask: u128) -> Vec<u128> {
        let mut out = Vec::new();
        while mask != 0 {
            let mut part = mask & mask.wrapping_neg();
            loop {
                let mut next = part;
                for i in 0..self.rows * self.cols {
                    if part >> i & 1 == 1 {
                        let (r, c) = (i / self.cols, i % self.cols);
                        if c > 0 {
                            next |= 1 << (i - 1);
                        }
                        if c + 1 < self.cols {
                            next |= 1 << (i + 1);
                        }
                        if r > 0 {
                            next |= 1 << (i - self.cols);
                        }
                        if r + 1 < self.rows {
                            next |= 1 << (i + self.cols);
                        }
                    }
                }
                next &= mask;
                if next == part {
                    break;
                }
                part = next;
            }
            mask &= !part;
            out.push(part);
        }
        out
    }

    fn value(&mut self, mask: u128) -> u8 {
        self.components(mask).into_iter().fold(0, |x, c| x ^ self.region(c))
    }

    fn region(&mut self, c: u128) -> u8 {
        // Up to translation: to the top row, then the leftmost column.
        let mut key = c >> (c.trailing_zeros() / self.cols * self.cols);
        while (0..self.rows).all(|r| key >> (r * self.cols) & 1 == 0) {
            key >>= 1;
        }
        if let Some(&v) = self.memo.get(&key) {
            return v;
        }
        let mut seen = 0u64;
        for i in 0..self.rows * self.cols {
            if key >> i & 1 == 0 {
                continue;
            }
            if i % self.cols + 1 < self.cols && key >> (i + 1) & 1 == 1 {
                seen |= 1 << self.value(key & !(3 << i));
            }
            if i + self.cols < self.rows * self.cols && key >> (i + self.cols) & 1 == 1 {
                seen |= 1 << self.value(key & !(1 << i | 1 << (i + self.cols)));
            }
        }
        let v = (!seen).trailing_zeros() as u8;
        self.memo.insert(key, v);
        v
    }
}

fn solver(pairing: bool, db: bool) -> Solver {
    let dbs = if db { vec![Database::build(2, 4, 1).unwrap(), Database::build(3, 3, 1).unwrap()] } else { vec![] };
    Solver::new(&Config { tt_bytes: 64 << 20, pairing }, Arc::new(DbSet::new(dbs)))
}

/// Solves, proves and checks `board`; returns the certificate and the claim checked.
fn certify(s: &mut Solver, board: &Board, small: u32, outcome_only: bool) -> (Certificate, Claim) {
    let mode = if outcome_only { Mode::Outcome } else { Mode::Nimber };
    let solution = s.solve(board, mode).unwrap();
    let cert = Prover::new(s, small).prove(board, &solution).unwrap();
    let checked = check(&cert.to_bytes(), 2).unwrap_or_else(|e| panic!("{}: {e}", board.rows_string()));
    assert_eq!(checked.claim, cert.claim);
    (cert, checked.claim)
}

fn agrees(claim: Claim, want: u8, what: &str) {
    match claim {
        Claim::Nimber(n) => assert_eq!(n, want, "{what}"),
        Claim::FirstPlayerWins => assert_ne!(want, 0, "{what}: a second-player win certified as a first-player win"),
    }
}

/// What is known of the empty boards of 25 to 30 cells, where the brute force here would
/// take minutes: seed 000's Tables 1-3 (1×n is Dawson's Kayles, 2×n is n mod 2) and, for
/// 3×10 and 5×6, Table 5's outcome (a first-player win).
fn published(rows: u32, cols: u32) -> Option<u8> {
    match (rows, cols) {
        (1, n) => {
            let mut g = vec![0u8; n as usize + 1];
            for k in 2..=n as usize {
                let seen = (0..=k - 2).fold(0u64, |s, a| s | 1 << (g[a] ^ g[k - 2 - a]));
                g[k] = seen.trailing_ones() as u8;
            }
            Some(g[n as usize])
        }
        (2, n) => Some((n % 2) as u8),
        (3, 9) => Some(1),
        (4, 7) => Some(3),
        (5, 5) => Some(0),
        _ => None,
    }
}

#[test]
fn every_empty_board_up_to_30_cells() {
    let mut s = solver(true, false);
    for rows in 1..=5u32 {
        for cols in rows..=30 / rows {
            let board = Board::parse(&format!("{rows}x{cols}")).unwrap();
            let small = if rows * cols > 20 { 12 } else { 4 };
            let (_, claim) = certify(&mut s, &board, small, false);
            let what = format!("{rows}x{cols}");
            if rows * cols <= 24 {
                agrees(claim, Brute::new(rows, cols).value(board.empty()), &what);
            } else if let Some(want) = published(rows, cols) {
                agrees(claim, want, &what);
            } else {
                assert!(matches!(claim, Claim::Nimber(n) if n != 0), "{what}: published as a first-player win");
            }
        }
    }
}

#[test]
fn random_positions_in_every_setting() {
    let mut rng = Lcg(0xC0FF_EE00_1234_5678);
    for (pairing, db) in [(true, false), (false, false), (true, true), (false, true)] {
        let mut s = solver(pairing, db);
        for _ in 0..60 {
            let (rows, cols) = (2 + rng.next() as u32 % 4, 3 + rng.next() as u32 % 4);
            let mut board = Board::parse(&format!("{rows}x{cols}")).unwrap();
            for i in 0..rows * cols {
                if rng.next().is_multiple_of(5) {
                    board = board.with_filled(1 << i);
                }
            }
            let want = Brute::new(rows, cols).value(board.empty());
            for (small, outcome_only) in [(0, false), (4, false), (8, true)] {
                let (_, claim) = certify(&mut s, &board, small, outcome_only);
                agrees(claim, want, &format!("{} (pairing {pairing}, db {db}, small {small})", board.rows_string()));
            }
        }
    }
}

/// Certificates with many facts (small regions left to the checker only up to 4 cells).
fn samples() -> Vec<Certificate> {
    let mut s = solver(true, false);
    ["4x5", "3x7", ".#..../....../...#../......"]
        .iter()
        .map(|spec| certify(&mut s, &Board::parse(spec).unwrap(), 4, false).0)
        .collect()
}

#[test]
fn every_fact_dropped_or_changed_is_refused() {
    for cert in samples() {
        assert!(cert.facts.len() > 20, "{} facts", cert.facts.len());
        for i in 0..cert.facts.len() {
            let mut dropped = cert.clone();
            dropped.facts.remove(i);
            let r = check(&dropped.to_bytes(), 1);
            assert!(matches!(r, Err(Rejection::Fact { .. } | Rejection::Root { .. })), "fact {i} dropped: {r:?}");
            let f = &cert.facts[i];
            for v in (0..=f.shape.size() as u8 / 2).filter(|&v| v != f.value) {
                let mut changed = cert.clone();
                changed.facts[i].value = v;
                let r = check(&changed.to_bytes(), 1);
                assert!(matches!(r, Err(Rejection::Fact { .. } | Rejection::Root { .. })), "fact {i} as *{v}: {r:?}");
            }
        }
        // A false claim about the position.
        let n = match cert.claim {
            Claim::Nimber(n) => n,
            Claim::FirstPlayerWins => unreachable!("nimber certificates"),
        };
        let mut wrong = cert.clone();
        wrong.claim = Claim::Nimber(n + 1);
        assert!(matches!(check(&wrong.to_bytes(), 1), Err(Rejection::Root { .. })));
        // A hint naming no move (another move may be a good reply too: only an impossible
        // one is sure to be refused).
        if !cert.hints.is_empty() {
            let mut moved = cert.clone();
            moved.hints[0] = 200;
            assert!(matches!(check(&moved.to_bytes(), 1), Err(Rejection::Fact { .. } | Rejection::Root { .. })));
        }
    }
}

#[test]
fn flipped_bytes_and_short_files_are_refused() {
    let mut rng = Lcg(77);
    for cert in samples() {
        let bytes = cert.to_bytes();
        for _ in 0..200 {
            let mut b = bytes.clone();
            let at = rng.next() as usize % b.len();
            b[at] ^= 1 << (rng.next() % 8);
            let r = check(&b, 1);
            assert!(matches!(r, Err(Rejection::Format(_))), "byte {at} flipped: {r:?}");
        }
        for _ in 0..50 {
            let len = rng.next() as usize % bytes.len();
            assert!(matches!(check(&bytes[..len], 1), Err(Rejection::Format(_))), "cut to {len} bytes");
        }
    }
}

/// Proves the value of the region of the empty board `spec` and exports the proof.
fn export_of(spec: &str, small: u32) -> (Shape, u8, Vec<u8>) {
    let board = Board::parse(spec).unwrap();
    let root = Shape::of(board.rows(), board.cols(), board.empty());
    let mut s = solver(true, false);
    let mut p = Prover::new(&mut s, small);
    p.prove_value(&root).unwrap();
    (root, Brute::new(board.rows(), board.cols()).value(board.empty()), p.export())
}

#[test]
fn exports_of_real_solves_verify() {
    for (spec, small) in [("3x6", 12), ("4x5", 12), ("4x5", 4), ("3x7", 8)] {
        let (root, want, bytes) = export_of(spec, small);
        let facts = read_export(&bytes, u64::MAX).unwrap();
        assert!(!facts.is_empty(), "{spec}");
        // Exports compress little (the reader bounds a body by 256 times its compressed length).
        let raw = cram_certificate::format::decompress_bounded(&bytes, u64::MAX).unwrap();
        assert!(raw.len() <= 4 * bytes.len() + 64, "{spec}: {} bytes from {}", raw.len(), bytes.len());
        let ledger = Ledger::new(small);
        assert_eq!(ledger.verify(&facts), Ok(facts.len()), "{spec}, small {small}");
        assert_eq!(ledger.value(&root), Some(want), "{spec}");
        assert_eq!(ledger.verify(&facts), Ok(0), "{spec}: the second time nothing is new");
    }
}

#[test]
fn a_worker_s_exports_verify_in_the_order_it_sends_them() {
    // Two units of one job on one search thread: the second unit's prover goes on from the
    // first's (Proofs::sent), so its export leaves out the facts the first sent, and rests
    // on them.
    let small = 4;
    let board = Board::parse("4x5").unwrap();
    let root = Shape::of(4, 5, board.empty());
    let moves = root.moves();
    let (a, b) = (root.after(moves[0])[0], root.after(moves[1])[0]);
    assert_ne!(a, b);
    let mut s = solver(true, false);
    let mut p = Prover::new(&mut s, small);
    p.prove_value(&a).unwrap();
    let first = p.export();
    let mut proofs = p.into_proofs();
    proofs.sent();
    let mut p = Prover::with_proofs(&mut s, small, proofs);
    p.prove_value(&b).unwrap();
    let second = p.export();
    let (first, second) = (read_export(&first, u64::MAX).unwrap(), read_export(&second, u64::MAX).unwrap());
    assert!(!second.is_empty() && second.iter().all(|f| !first.iter().any(|g| g.shape == f.shape)));

    let ledger = Ledger::new(small);
    assert_eq!(ledger.verify(&first), Ok(first.len()));
    assert_eq!(ledger.verify(&second), Ok(second.len()));
    let brute = |s: &Shape| Brute::new(s.h as u32, s.w as u32).value(s.cells);
    assert_eq!((ledger.value(&a), ledger.value(&b)), (Some(brute(&a)), Some(brute(&b))));
    for f in first.iter().chain(&second) {
        assert_eq!(ledger.value(&f.shape), Some(f.value));
    }

    // The second alone: refused, a fact of the first named as missing; nothing added.
    let alone = Ledger::new(small);
    let why = alone.verify(&second).unwrap_err().to_string();
    let missing = first
        .iter()
        .find(|f| why.contains(&format!("{} without a fact", f.shape.name())))
        .or_else(|| first.iter().find(|f| why.contains(&format!("{}, which has no fact", f.shape.name()))))
        .or_else(|| first.iter().find(|f| why.contains(&format!("{} without facts", f.shape.name()))));
    assert!(missing.is_some(), "{why}");
    assert!(alone.is_empty());
    // With the first's facts read back as verified (a coordinator restarted), it verifies.
    for f in &first {
        alone.add_verified(f.shape, f.value);
    }
    assert_eq!(alone.verify(&second), Ok(second.len()));
}

/// The facts of an export whose regions have no fact in it and are above `small` cells: the
/// replies of an option leaving one of them are needed.
fn needed_replies(facts: &[ExportedFact], small: u32) -> Vec<(usize, usize)> {
    let has = |s: &Shape| s.size() <= small || facts.iter().any(|f| f.shape == *s);
    let mut out = Vec::new();
    for (i, f) in facts.iter().enumerate() {
        let moves = f.shape.moves();
        for (j, &(k, _)) in f.replies.iter().enumerate() {
            if f.shape.after(moves[k as usize]).iter().any(|r| !has(r)) {
                out.push((i, j));
            }
        }
    }
    out
}

#[test]
fn a_ledger_refuses_false_missing_and_wrong_facts() {
    let small = 4;
    let (root, _, bytes) = export_of("4x5", small);
    let facts = read_export(&bytes, u64::MAX).unwrap();
    assert!(facts.len() > 20 && facts.iter().any(|f| f.shape == root), "{} facts", facts.len());
    let refused = |facts: &[ExportedFact], what: &str| {
        let ledger = Ledger::new(small);
        let r = ledger.verify(facts);
        assert!(matches!(r, Err(Rejection::Fact { .. })), "{what}: {r:?}");
        assert!(ledger.is_empty(), "{what}: nothing added");
    };
    // Every value changed, of every fact: no false fact is accepted.
    for i in 0..facts.len() {
        let f = &facts[i];
        for v in (0..=f.shape.size() as u8 / 2).filter(|&v| v != f.value) {
            let mut changed = facts.clone();
            changed[i].value = v;
            refused(&changed, &format!("fact {i} as *{v}"));
        }
    }
    // Every fact dropped but the root's (which no other rests on): its proof needs them all.
    for i in (0..facts.len()).filter(|&i| facts[i].shape != root) {
        let mut dropped = facts.clone();
        dropped.remove(i);
        refused(&dropped, &format!("fact {i} dropped"));
    }
    // A needed reply naming no move, or left out.
    let replies = needed_replies(&facts, small);
    assert!(!replies.is_empty());
    for &(i, j) in &replies {
        let mut wrong = facts.clone();
        wrong[i].replies[j].1 = 200;
        refused(&wrong, &format!("fact {i}'s reply {j} moved"));
        let mut left_out = facts.clone();
        left_out[i].replies.remove(j);
        refused(&left_out, &format!("fact {i}'s reply {j} left out"));
    }
}
