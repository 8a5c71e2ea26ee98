//! The engine against a plain brute-force solver written here (no regions, no canonical
//! forms, no databases): every subset of small boards and random positions, in every mode.

use cram_engine::region::{AnyRegion, Region};
use cram_engine::{Board, Config, Database, DbSet, Mode, Search, Solver};
use std::collections::HashMap;
use std::sync::Arc;

mod common;
use common::{all_values, brute, Lcg};

struct Setting {
    name: &'static str,
    pairing: bool,
    db: bool,
    mode: Mode,
    search: Search,
}

fn settings() -> Vec<Setting> {
    let mut out = Vec::new();
    for (pairing, db) in [(true, false), (false, false), (true, true), (false, true)] {
        for mode in [Mode::Nimber, Mode::Outcome] {
            out.push(Setting { name: "", pairing, db, mode, search: Search::Values });
        }
    }
    out.push(Setting { name: "sets", pairing: true, db: false, mode: Mode::Nimber, search: Search::Sets });
    out.push(Setting { name: "outcome+sets+db", pairing: false, db: true, mode: Mode::Outcome, search: Search::Sets });
    for s in &mut out {
        if s.search == Search::Sets {
            continue;
        }
        s.name = match (s.pairing, s.db, s.mode) {
            (true, false, Mode::Nimber) => "pairing",
            (false, false, Mode::Nimber) => "plain",
            (true, true, Mode::Nimber) => "pairing+db",
            (false, true, Mode::Nimber) => "db",
            (true, false, Mode::Outcome) => "outcome+pairing",
            (false, false, Mode::Outcome) => "outcome",
            (true, true, Mode::Outcome) => "outcome+pairing+db",
            (false, true, Mode::Outcome) => "outcome+db",
        };
    }
    out
}

fn small_dbs() -> Arc<DbSet> {
    Arc::new(DbSet::new(vec![Database::build(2, 4, 1).unwrap(), Database::build(3, 3, 1).unwrap()]))
}

fn solver(s: &Setting) -> Solver {
    let dbs = if s.db { small_dbs() } else { Arc::new(DbSet::default()) };
    let mut solver = Solver::new(&Config { tt_bytes: 64 << 20, pairing: s.pairing }, dbs);
    solver.set_search(s.search);
    solver
}

/// Checks the engine's answer against the true value `want` in setting `s`.
fn check(solver: &mut Solver, s: &Setting, board: &Board, want: u8) {
    let got = solver.solve(board, s.mode).unwrap();
    assert_eq!(
        got.outcome,
        cram_engine::Outcome::of_nimber(want),
        "{}: outcome of {} (true value *{want})",
        s.name,
        board.rows_string()
    );
    match s.mode {
        Mode::Nimber => assert_eq!(got.nimber, Some(want), "{}: nimber of {}", s.name, board.rows_string()),
        Mode::Outcome => assert_eq!(got.nimber, (want == 0).then_some(0), "{}: {}", s.name, board.rows_string()),
    }
}

fn every_subset(rows: u32, cols: u32) {
    let truth = all_values(rows, cols);
    for s in settings() {
        let mut solver = solver(&s);
        for (m, &want) in truth.iter().enumerate() {
            check(&mut solver, &s, &Board::from_mask(rows, cols, m as u128).unwrap(), want);
        }
    }
}

#[test]
fn every_subset_of_4x4_in_every_mode() {
    every_subset(4, 4);
}

#[test]
fn every_subset_of_3x5_in_every_mode() {
    every_subset(3, 5);
}

#[test]
fn random_positions_up_to_24_cells_in_every_mode() {
    let mut rng = Lcg(2024);
    let shapes = [(4, 6), (3, 8), (2, 12), (6, 4), (5, 4), (1, 24), (4, 5), (3, 7)];
    let mut cases = Vec::new();
    for i in 0..1200 {
        let (r, c) = shapes[i % shapes.len()];
        let density = 50 + rng.next() % 50; // percent of empty cells
        let mut mask = 0u128;
        for b in 0..r * c {
            if rng.next() % 100 < density {
                mask |= 1 << b;
            }
        }
        cases.push((r, c, mask));
    }
    let mut memos: HashMap<(u32, u32), HashMap<u128, u8>> = HashMap::new();
    let truth: Vec<u8> = cases.iter().map(|&(r, c, m)| brute(m, r, c, memos.entry((r, c)).or_default())).collect();
    for s in settings() {
        let mut solver = solver(&s);
        for (&(r, c, m), &want) in cases.iter().zip(&truth) {
            check(&mut solver, &s, &Board::from_mask(r, c, m).unwrap(), want);
        }
    }
}

/// A region laid out in a 128-bit word even though it would fit 64 bits, to run the wide
/// search path on positions the narrow path also solves.
fn wide_region(board: &Board) -> AnyRegion {
    let (h, w) = (board.rows(), board.cols());
    AnyRegion::Wide(Region { bits: board.empty(), stride: w as u8, h: h as u8, w: w as u8 })
}

#[test]
fn wide_path_agrees_with_narrow_path() {
    let mut rng = Lcg(99);
    let mut memo = HashMap::new();
    let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    let mut checked = 0;
    for _ in 0..300 {
        let mut mask = 0u128;
        for b in 0..20 {
            if !rng.next().is_multiple_of(4) {
                mask |= 1 << b;
            }
        }
        // Full first and last rows and columns keep the box 4x5 and the set connected.
        mask |= 0b11111 | 0b11111 << 15 | 1 | 1 << 5 | 1 << 10 | 1 << 15;
        let board = Board::from_mask(4, 5, mask).unwrap();
        let want = brute(mask, 4, 5, &mut memo);
        assert_eq!(solver.nimber(wide_region(&board)).unwrap(), want, "{}", board.rows_string());
        for k in 0..4 {
            assert_eq!(solver.is_value(wide_region(&board), k).unwrap(), want == k);
        }
        checked += 1;
    }
    assert_eq!(checked, 300);
}

#[test]
fn sparse_positions_beyond_64_cells() {
    // 5x13 = 65 cells: a snake of empty cells spanning the whole box forces the 128-bit path.
    let snake = [".............", "############.", ".............", ".############", "............."];
    let board = Board::from_rows(snake).unwrap();
    assert_eq!(board.empty_count(), 41);
    let mut rng = Lcg(5);
    let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    for _ in 0..40 {
        // Fill random cells until about 26 remain empty.
        let mut mask = board.empty();
        while mask.count_ones() > 26 {
            mask &= !(1u128 << (rng.next() % 65));
        }
        let b = Board::from_mask(5, 13, mask).unwrap();
        let want = brute(mask, 5, 13, &mut HashMap::new());
        assert_eq!(solver.solve(&b, Mode::Nimber).unwrap().nimber, Some(want), "{}", b.rows_string());
    }
    // The whole snake is a path of 41 cells, i.e. Dawson's Kayles on 41 cells... except that
    // its turns are 2x2-free, so its value equals that of a 1x41 strip.
    let strip = Board::parse("1x41").unwrap();
    let a = solver.solve(&board, Mode::Nimber).unwrap().nimber;
    let b = solver.solve(&strip, Mode::Nimber).unwrap().nimber;
    assert_eq!(a, b);
}

#[test]
fn a_tiny_table_replaces_entries_and_stays_exact() {
    // 16 KiB of table: entries are replaced all the time; answers must not change.
    let mut rng = Lcg(77);
    let mut solver = Solver::new(&Config { tt_bytes: 16 << 10, pairing: true }, Arc::new(DbSet::default()));
    let mut memo = HashMap::new();
    for _ in 0..150 {
        let mask = (rng.next() as u128 | rng.next() as u128) & ((1 << 24) - 1);
        let board = Board::from_mask(4, 6, mask).unwrap();
        let want = brute(mask, 4, 6, &mut memo);
        assert_eq!(solver.solve(&board, Mode::Nimber).unwrap().nimber, Some(want), "{}", board.rows_string());
    }
    assert!(solver.table_stats().replaced > 0, "the table never filled up");
    assert!(solver.table_bytes() <= 16 << 10);
}

#[test]
fn interrupted_searches_leave_the_solver_exact() {
    use cram_engine::Interrupted;
    use std::sync::atomic::AtomicBool;
    let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    let board = Board::parse("4x7").unwrap();
    // A node budget far too small: the search stops, then resumes from what it kept.
    for _ in 0..20 {
        solver.set_budget(5_000);
        match solver.solve(&board, Mode::Nimber) {
            Err(Interrupted::Budget) => continue,
            Ok(s) => {
                assert_eq!(s.nimber, Some(3));
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    solver.set_budget(u64::MAX);
    assert_eq!(solver.solve(&board, Mode::Nimber).unwrap().nimber, Some(3));
    // A raised cancel flag stops the next search; lowering it lets it finish.
    let flag = Arc::new(AtomicBool::new(true));
    solver.set_cancel(flag.clone());
    assert_eq!(solver.solve(&Board::parse("5x6").unwrap(), Mode::Nimber), Err(Interrupted::Cancelled));
    flag.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(solver.solve(&Board::parse("5x6").unwrap(), Mode::Nimber).unwrap().nimber, Some(2));
    // Everything it learnt before and after the interruptions is still right.
    let mut memo = HashMap::new();
    let mut rng = Lcg(3);
    for _ in 0..100 {
        let mask = rng.next() as u128 & ((1 << 28) - 1) | rng.next() as u128 & ((1 << 28) - 1);
        let b = Board::from_mask(4, 7, mask).unwrap();
        if b.empty_count() > 22 {
            continue;
        }
        assert_eq!(solver.solve(&b, Mode::Nimber).unwrap().nimber, Some(brute(mask, 4, 7, &mut memo)));
    }
}

#[test]
fn threads_sharing_a_table_stay_exact() {
    // Two solvers on two threads share small tables (entries replaced all the time),
    // solving the same random positions in opposite orders; both must agree with brute
    // force on every one.
    use cram_engine::solver::SharedTables;
    let mut rng = Lcg(2024);
    let positions: Vec<u128> = (0..120).map(|_| (rng.next() as u128 | rng.next() as u128) & ((1 << 24) - 1)).collect();
    let mut memo = HashMap::new();
    let want: Vec<u8> = positions.iter().map(|&m| brute(m, 4, 6, &mut memo)).collect();
    let shared = SharedTables::new(64 << 10);
    std::thread::scope(|s| {
        for reversed in [false, true] {
            let (shared, positions, want) = (shared.clone(), &positions, &want);
            s.spawn(move || {
                let mut solver = Solver::new(&Config { tt_bytes: 1 << 20, pairing: true }, Arc::new(DbSet::default()));
                solver.set_shared(&shared);
                let order: Vec<usize> =
                    if reversed { (0..positions.len()).rev().collect() } else { (0..positions.len()).collect() };
                for i in order {
                    let board = Board::from_mask(4, 6, positions[i]).unwrap();
                    assert_eq!(
                        solver.solve(&board, Mode::Nimber).unwrap().nimber,
                        Some(want[i]),
                        "{}",
                        board.rows_string()
                    );
                }
            });
        }
    });
}

#[test]
fn parallel_solves_agree_with_brute_force() {
    // Three threads sharing a small dense table and the busy set, in both modes, with and
    // without databases: every answer equals the brute-force value.
    use cram_engine::solver::SharedTables;
    use cram_engine::ParallelSolver;
    let mut rng = Lcg(31);
    let mut memo = HashMap::new();
    let positions: Vec<u128> = (0..80).map(|_| (rng.next() as u128 | rng.next() as u128) & ((1 << 25) - 1)).collect();
    for (db, mode) in [(false, Mode::Nimber), (true, Mode::Outcome), (true, Mode::Nimber)] {
        let dbs = if db { small_dbs() } else { Arc::new(DbSet::default()) };
        let config = Config { tt_bytes: 4 << 20, pairing: true };
        let mut p = ParallelSolver::new(3, &config, dbs, Some(SharedTables::new(4 << 20)));
        for &m in &positions {
            let b = Board::from_mask(5, 5, m).unwrap();
            let want = brute(m, 5, 5, &mut memo);
            let got = p.solve(&b, mode).unwrap();
            assert_eq!(got.outcome, cram_engine::Outcome::of_nimber(want), "{}", b.rows_string());
            if mode == Mode::Nimber {
                assert_eq!(got.nimber, Some(want), "{}", b.rows_string());
            }
        }
        assert!(p.nodes() > 0);
    }
}

#[test]
fn learned_facts_are_true_and_save_a_second_solver_work() {
    // What a worker shares: facts about regions of 12 cells and more that took 20 nodes
    // and more. Each agrees with the brute-force value of its region; a second solver
    // given them all searches less for the same answer.
    let board = Board::parse("4x6").unwrap();
    let mut first = Solver::new(&Config { tt_bytes: 64 << 20, pairing: false }, Arc::new(DbSet::default()));
    first.set_sharing(Some((12, 20)));
    let value = first.solve(&board, Mode::Nimber).unwrap().nimber.unwrap();
    let learned = first.take_learned();
    assert!(learned.len() > 10, "{} facts", learned.len());
    assert!(first.take_learned().is_empty(), "taken once");
    // One memo per box shape: `brute` keys its memo by the mask alone.
    let mut memos: HashMap<(u32, u32), HashMap<u128, u8>> = HashMap::new();
    for l in &learned {
        assert!(l.region.cells() >= 12 && l.nodes >= 20);
        let (h, w) = l.region.dims();
        let truth = brute(l.region.dense(), h, w, memos.entry((h, w)).or_default());
        assert!(
            !l.facts.rules_out(truth) && !l.facts.is_contradictory(),
            "{} {:?} vs {truth}",
            l.region.key(),
            l.facts
        );
    }
    let mut second = Solver::new(&Config { tt_bytes: 64 << 20, pairing: false }, Arc::new(DbSet::default()));
    for l in &learned {
        second.preload(&l.region, l.facts, l.nodes);
    }
    assert_eq!(second.solve(&board, Mode::Nimber).unwrap().nimber, Some(value));
    assert!(second.nodes() * 2 < first.nodes(), "{} against {}", second.nodes(), first.nodes());
}
