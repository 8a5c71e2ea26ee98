//! The reductions applied before a position is split into regions, checked exhaustively
//! against the brute-force solver: on every subset of 4×5 and 3×7 (and smaller boxes), the
//! value of the cells equals the XOR of the values of the parts `for_each_part` plays on
//! their own (redundant tufts and bridges removed, walled 2×2 blocks cut), and skipping the
//! horizontal moves across walled blocks leaves the mex of the options unchanged.

use cram_engine::region::{dominoes, for_each_component, for_each_part, simplify, stays_connected, walled_cuts};

mod common;
use common::all_values;

/// Checks every subset of an R×C box; returns how many subsets each reduction changed.
fn every_subset(rows: u32, cols: u32) -> (u64, u64) {
    let v = all_values(rows, cols);
    let n = rows * cols;
    let (mut simplified, mut cut) = (0, 0);
    for e in 0..1u64 << n {
        let mut xor = 0u8;
        let mut covered = 0u64;
        for_each_part(e, cols, None, &mut |p: u64| {
            assert_eq!(p & covered, 0, "parts overlap");
            covered |= p;
            xor ^= v[p as usize];
        });
        assert_eq!(covered & !e, 0, "a part leaves the position");
        assert_eq!(xor, v[e as usize], "{rows}x{cols} {e:#b}: parts XOR to *{xor}, the position is *{}", v[e as usize]);
        simplified += (simplify(e, cols) != e) as u64;
        // As the search calls it: a move played in a connected region (with the local
        // connectivity test's verdict), the parts found by fills that stop early.
        let mut components = 0;
        for_each_component(e, cols, |_| components += 1);
        if components == 1 {
            let (hor, ver) = dominoes(e, cols);
            for (starts, step) in [(hor, 1), (ver, cols)] {
                let mut m = starts;
                while m != 0 {
                    let i = m.trailing_zeros();
                    m &= m - 1;
                    let child = e & !(1 << i | 1 << (i + step));
                    let local = stays_connected(e, i, cols, rows, cols, step == cols);
                    let (mut xor, mut covered) = (0u8, 0u64);
                    for_each_part(child, cols, Some((e, local)), &mut |p: u64| {
                        let mut k = 0;
                        for_each_component(p, cols, |_| k += 1);
                        assert_eq!(k, 1, "{rows}x{cols} {child:#b}: part {p:#b} is not connected");
                        assert_eq!(p & covered, 0, "parts overlap");
                        covered |= p;
                        xor ^= v[p as usize];
                    });
                    assert_eq!(xor, v[child as usize], "{rows}x{cols} {e:#b} minus the domino at {i}");
                }
            }
        }
        // The options without the horizontal moves across walled blocks have the same mex.
        let cuts = walled_cuts(e, cols);
        if cuts != 0 {
            cut += 1;
            let mut seen = 0u64;
            for i in 0..n {
                if e >> i & 1 == 0 {
                    continue;
                }
                if i % cols + 1 < cols && e >> (i + 1) & 1 == 1 && cuts >> i & 1 == 0 {
                    seen |= 1 << v[(e & !(3 << i)) as usize];
                }
                if i + cols < n && e >> (i + cols) & 1 == 1 {
                    seen |= 1 << v[(e & !(1 << i | 1 << (i + cols))) as usize];
                }
            }
            assert_eq!((!seen).trailing_zeros() as u8, v[e as usize], "{rows}x{cols} {e:#b} without cut moves");
        }
    }
    (simplified, cut)
}

#[test]
fn reductions_keep_every_value_of_4x5() {
    let (simplified, cut) = every_subset(4, 5);
    // Both reductions fire on a good share of the positions: the test is not vacuous.
    assert!(simplified > 100_000 && cut > 10_000, "{simplified} simplified, {cut} with cuts");
}

#[test]
fn reductions_keep_every_value_of_3x7() {
    let (simplified, cut) = every_subset(3, 7);
    assert!(simplified > 100_000 && cut > 10_000, "{simplified} simplified, {cut} with cuts");
}

#[test]
fn reductions_keep_every_value_of_smaller_boxes() {
    for (r, c) in [(1, 8), (2, 8), (3, 5), (4, 4), (2, 10), (5, 4), (6, 3)] {
        every_subset(r, c);
    }
}

#[test]
fn reductions_on_known_shapes() {
    // The strip of five: its middle cell is a bridge; the two dominoes left are *0 together.
    assert_eq!(simplify(0b11111u64, 5), 0b11011);
    // A plus keeps one of its four tufts.
    assert_eq!(simplify(0b010_111_010u64, 3).count_ones(), 2);
    // A 2×2 square alone is walled on both diagonals: its horizontal pairs are cut.
    assert_eq!(walled_cuts(0b11_11u64, 2), 0b01_01);
    // A 2×3 rectangle has no walled block.
    assert_eq!(walled_cuts(0b111_111u64, 3), 0);
}
