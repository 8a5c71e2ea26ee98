//! Every published empty-board value in the seed papers (seed 000 Tables 1–3 and 5, seed
//! 001), and the 1×n strip against Dawson's Kayles computed here by the octal recursion.

use cram_engine::{Board, Config, Database, DbSet, Mode, Solver};
use std::sync::Arc;

fn solver() -> Solver {
    Solver::new(&Config::default(), Arc::new(DbSet::default()))
}

fn nimber(s: &mut Solver, spec: &str) -> u8 {
    s.solve(&Board::parse(spec).unwrap(), Mode::Nimber).unwrap().nimber.unwrap()
}

/// Seed 000, Table 1: 1×n for n = 1..29.
const ONE_BY_N: [u8; 29] = [0, 1, 1, 2, 0, 3, 1, 1, 0, 3, 3, 2, 2, 4, 0, 5, 2, 2, 3, 3, 0, 1, 1, 3, 0, 2, 1, 1, 0];

#[test]
fn table_1_one_by_n() {
    let mut s = solver();
    for (i, &want) in ONE_BY_N.iter().enumerate() {
        assert_eq!(nimber(&mut s, &format!("1x{}", i + 1)), want, "1x{}", i + 1);
    }
}

/// Dawson's Kayles (octal game ·07): a move removes two adjacent counters from a heap,
/// leaving two heaps (either may be empty).
fn dawsons_kayles(max: usize) -> Vec<u8> {
    let mut g = vec![0u8; max + 1];
    for n in 2..=max {
        let mut seen = 0u64;
        for a in 0..=n - 2 {
            seen |= 1 << (g[a] ^ g[n - 2 - a]);
        }
        g[n] = (!seen).trailing_zeros() as u8;
    }
    g
}

#[test]
fn strips_are_dawsons_kayles() {
    let kayles = dawsons_kayles(128);
    assert_eq!(&kayles[1..30], &ONE_BY_N);
    let mut s = solver();
    for (n, &want) in kayles.iter().enumerate().skip(1) {
        assert_eq!(nimber(&mut s, &format!("1x{n}")), want, "1x{n}");
        assert_eq!(nimber(&mut s, &format!("{n}x1")), want, "{n}x1");
    }
}

#[test]
fn table_2_two_by_n() {
    let mut s = solver();
    // Up to 2×64 = 128 cells: every width and both word sizes.
    for n in (1..=25).chain([31, 32, 33, 63, 64]) {
        assert_eq!(nimber(&mut s, &format!("2x{n}")), (n % 2) as u8, "2x{n}");
    }
}

#[test]
fn table_3_wider_boards() {
    let table = [
        ("3x3", 0),
        ("3x4", 1),
        ("3x5", 1),
        ("3x6", 4),
        ("3x7", 1),
        ("3x8", 3),
        ("3x9", 1),
        ("4x4", 0),
        ("4x5", 2),
        ("4x6", 0),
        ("4x7", 3),
        ("5x5", 0),
    ];
    let mut s = solver();
    for (spec, want) in table {
        assert_eq!(nimber(&mut s, spec), want, "{spec}");
        // Transposed boards have the same value.
        let (r, c) = spec.split_once('x').unwrap();
        assert_eq!(nimber(&mut s, &format!("{c}x{r}")), want, "{c}x{r}");
    }
}

#[test]
fn table_5_winners() {
    // Seed 000, Table 5: 1 = first-player win, 2 = second-player win.
    let winners = [("3x10", true), ("3x11", false), ("4x8", false), ("5x6", true), ("2x20", false), ("2x21", true)];
    let mut s = solver();
    for (spec, first) in winners {
        let sol = s.solve(&Board::parse(spec).unwrap(), Mode::Outcome).unwrap();
        assert_eq!(sol.outcome == cram_engine::Outcome::First, first, "{spec}");
    }
    let mut plain = Solver::new(&Config { pairing: false, ..Config::default() }, Arc::new(DbSet::default()));
    let sol = plain.solve(&Board::parse("4x8").unwrap(), Mode::Outcome).unwrap();
    assert_eq!(sol.outcome, cram_engine::Outcome::Second, "4x8 without the pairing certificate");
}

#[test]
fn largest_values_and_frequencies_in_databases() {
    // Seed 000, Tables 1–3 "max nimber" column, for the tables small enough to build here.
    for (r, c, max) in
        [(1, 12, 3), (1, 20, 6), (2, 6, 3), (2, 10, 7), (3, 4, 4), (3, 6, 7), (4, 4, 6), (4, 5, 8), (3, 7, 8)]
    {
        assert_eq!(Database::build(r, c, 2).unwrap().max_value(), max, "{r}x{c}");
    }
    // Table 4: frequencies (percent) in 3×4: 36.0, 37.7, 13.1, 13.2, 0.0488.
    let db = Database::build(3, 4, 2).unwrap();
    let mut count = [0u32; 5];
    for m in 0..db.entries() {
        count[db.value(m) as usize] += 1;
    }
    let pct: Vec<f64> = count.iter().map(|&c| 100.0 * c as f64 / 4096.0).collect();
    for (got, want) in pct.iter().zip([36.0, 37.7, 13.1, 13.2, 0.0488]) {
        assert!((got - want).abs() < 0.06, "3x4 frequencies {pct:?}");
    }
}

#[test]
fn seed_001_readings() {
    // Seed 001: the 1×n strips worth 0 for n up to 40.
    let mut s = solver();
    let zeros: Vec<u32> = (0..=40).filter(|&n| n == 0 || nimber(&mut s, &format!("1x{n}")) == 0).collect();
    assert_eq!(zeros, vec![0, 1, 5, 9, 15, 21, 25, 29, 35, 39]);
    // 3×6 is *4; even × even boards are 0.
    assert_eq!(nimber(&mut s, "3x6"), 4);
    for spec in ["2x2", "2x8", "4x2", "4x6", "6x6", "2x12"] {
        assert_eq!(nimber(&mut s, spec), 0, "{spec}");
    }
}

#[test]
fn octal_module_agrees_with_the_board_search() {
    let dk = cram_engine::octal::OctalGame::parse("0.07").unwrap().values(30);
    let mut s = solver();
    for (n, &v) in dk.iter().enumerate().skip(1) {
        assert_eq!(nimber(&mut s, &format!("1x{n}")) as u32, v, "1x{n}");
    }
}

#[test]
fn published_boards_of_30_to_45_cells() {
    // docs/results.md: the published values of 30 to 63 cells; here those that take at
    // most a few seconds (the larger ones are in docs/results.md and docs/performance.md).
    let table = [
        ("3x10", 2),
        ("3x11", 0),
        ("3x12", 1),
        ("3x13", 2),
        ("3x14", 3),
        ("3x15", 1),
        ("4x8", 0),
        ("4x9", 1),
        ("4x10", 0),
        ("5x6", 2),
        ("5x7", 1),
        ("5x8", 1),
        ("6x6", 0),
    ];
    let mut s = solver();
    for (spec, want) in table {
        assert_eq!(nimber(&mut s, spec), want, "{spec}");
    }
}
