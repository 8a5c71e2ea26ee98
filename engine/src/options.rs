//! The options of a region, each as the canonical regions it splits into, in the search's
//! move order. The solver generates options its own, faster way; this plain form is for
//! callers that walk the top of a search outside the solver, such as the cluster
//! coordinator, and want the same order and the same canonical regions.

use crate::board::Board;
use crate::region::{centre_distance, option_cost, walled_cuts, AnyRegion};
use crate::solver::{board_regions, plain_board_regions};

/// One option (the position after one move) of a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    /// Regions that need search, largest first (congruent pairs cancelled).
    pub regions: Vec<AnyRegion>,
    /// XOR of the values of the regions too small to search (fewer than four cells).
    pub xor: u8,
}

/// The options of `r`, the ones the solver tries first first: options of one region to
/// search before those of several, then smaller regions (by the sum of squared sizes, so
/// moves that split come early), then moves nearer the centre.
pub fn options(r: &AnyRegion) -> Vec<Child> {
    options_by(r, false)
}

/// The options of `r` as [`options`] orders them, every move and its plain regions
/// ([`plain_board_regions`]): the top of a search whose answer is to be certified, where
/// every region must be one a certificate can state facts about.
pub fn plain_options(r: &AnyRegion) -> Vec<Child> {
    options_by(r, true)
}

fn options_by(r: &AnyRegion, plain: bool) -> Vec<Child> {
    let (h, w) = r.dims();
    let board = Board::from_mask(h, w, r.dense()).expect("a region's box is a valid board");
    // The solver skips horizontal moves across walled 2×2 blocks (worth a vertical move).
    let cuts = if plain { 0 } else { walled_cuts(board.empty(), w) };
    let regions_of = if plain { plain_board_regions } else { board_regions };
    let mut out: Vec<(u32, Child)> = board
        .moves()
        .into_iter()
        .filter(|&m| m != 3 << m.trailing_zeros() || cuts >> m.trailing_zeros() & 1 == 0)
        .map(|m| {
            let (mut regions, xor) = regions_of(&board.with_filled(m));
            regions.sort_by_key(|p| std::cmp::Reverse(p.cells()));
            let i = m.trailing_zeros();
            let vertical = m != 3 << i;
            let cost = option_cost(centre_distance(i, w, h, w, vertical), regions.iter().map(AnyRegion::cells));
            (cost, Child { regions, xor })
        })
        .collect();
    out.sort_by_key(|(cost, _)| *cost);
    out.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, DbSet, Solver};
    use std::sync::Arc;

    /// The mex of the options' values is the region's value, on every region of a few boards.
    #[test]
    fn mex_of_options_is_the_value() {
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        for spec in ["3x4", "4x4", "2x7", ".#../..../...#", "3x5"] {
            let board = Board::parse(spec).unwrap();
            let (regions, _) = board_regions(&board);
            for r in regions {
                let mut seen = 0u64;
                for c in options(&r) {
                    let v = c.regions.iter().fold(c.xor, |x, p| x ^ solver.nimber(*p).unwrap());
                    seen |= 1 << v;
                }
                assert_eq!(solver.nimber(r).unwrap(), seen.trailing_ones() as u8, "{spec}");
            }
        }
    }

    #[test]
    fn splitting_moves_come_first() {
        // The middle vertical domino of a 2x5 strip splits it into two 2x2 squares.
        let r = board_regions(&Board::parse("2x5").unwrap()).0[0];
        let first = &options(&r)[0];
        // Two congruent 2x2 squares cancel: nothing left to search, value 0.
        assert!(first.regions.is_empty() && first.xor == 0, "{first:?}");
        assert_eq!(options(&r).len(), 13);
    }

    #[test]
    fn dense_round_trip_and_validation() {
        let r = board_regions(&Board::parse("3x7").unwrap()).0[0];
        let (h, w) = r.dims();
        assert_eq!(AnyRegion::from_dense(h, w, r.dense()), Some(r));
        assert_eq!(AnyRegion::from_dense(w, h, crate::region::transpose(r.dense(), w, h)), Some(r));
        assert_eq!(AnyRegion::from_dense(2, 2, 0b1001), None, "disconnected");
        assert_eq!(AnyRegion::from_dense(2, 2, 0), None, "empty");
        assert_eq!(AnyRegion::from_dense(2, 2, 0b10000), None, "outside the box");
        assert_eq!(AnyRegion::from_dense(12, 11, 1), None, "too many cells");
        assert_eq!(AnyRegion::from_dense(0, 5, 1), None);
        assert_eq!(r.key(), "3x7:1fffff");
        assert_eq!(AnyRegion::from_key("3x7:1fffff"), Some(r));
        for bad in ["3x7", "3x7:", "3y7:1", "3x7:zz", "2x2:9", "0x1:1"] {
            assert_eq!(AnyRegion::from_key(bad), None, "{bad}");
        }
    }
}
