//! Connected shapes (polyominoes) by size, for the shape catalogue of seed 003: every
//! connected set of at most N cells, up to translation and a chosen group of symmetries.

use crate::board::Board;
use std::collections::HashSet;

/// Which shapes count as the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Equivalence {
    /// Up to all 8 symmetries of the square: free polyominoes (1, 1, 2, 5, 12, 35, 108, 369…).
    Free,
    /// Up to top-bottom and left-right flips only (no quarter-turns): the catalogue of seed
    /// 003, 1,042 shapes of at most 8 cells.
    Flips,
}

type Cells = Vec<(i32, i32)>;

/// A symmetry of the square acting on (row, column) offsets.
type CellMap = fn((i32, i32)) -> (i32, i32);

fn translated(cells: &[(i32, i32)]) -> Cells {
    let r0 = cells.iter().map(|c| c.0).min().unwrap_or(0);
    let c0 = cells.iter().map(|c| c.1).min().unwrap_or(0);
    let mut out: Cells = cells.iter().map(|&(r, c)| (r - r0, c - c0)).collect();
    out.sort_unstable();
    out
}

fn canonical(cells: &[(i32, i32)], eq: Equivalence) -> Cells {
    let maps: &[CellMap] = match eq {
        Equivalence::Free => &[
            |(r, c)| (r, c),
            |(r, c)| (c, -r),
            |(r, c)| (-r, -c),
            |(r, c)| (-c, r),
            |(r, c)| (r, -c),
            |(r, c)| (-r, c),
            |(r, c)| (c, r),
            |(r, c)| (-c, -r),
        ],
        Equivalence::Flips => &[|(r, c)| (r, c), |(r, c)| (r, -c), |(r, c)| (-r, c), |(r, c)| (-r, -c)],
    };
    maps.iter().map(|m| translated(&cells.iter().map(|&x| m(x)).collect::<Cells>())).min().expect("maps")
}

/// Every connected shape of 1..=max cells, smallest first, each as a board just large
/// enough to hold it (filled cells outside the shape).
pub fn shapes(max: u32, eq: Equivalence) -> Vec<Board> {
    let mut out = Vec::new();
    // Grow fixed shapes (up to translation) cell by cell; report each class once.
    let mut layer: HashSet<Cells> = HashSet::from([vec![(0, 0)]]);
    for n in 1..=max {
        let mut classes: Vec<Cells> =
            layer.iter().map(|s| canonical(s, eq)).collect::<HashSet<_>>().into_iter().collect();
        classes.sort();
        out.extend(classes.iter().map(|s| to_board(s)));
        if n == max {
            break;
        }
        let mut next = HashSet::new();
        for s in &layer {
            for &(r, c) in s {
                for (dr, dc) in [(0, 1), (1, 0), (0, -1), (-1, 0)] {
                    let cell = (r + dr, c + dc);
                    if !s.contains(&cell) {
                        let mut grown = s.clone();
                        grown.push(cell);
                        next.insert(translated(&grown));
                    }
                }
            }
        }
        layer = next;
    }
    out
}

fn to_board(cells: &[(i32, i32)]) -> Board {
    let h = cells.iter().map(|c| c.0).max().unwrap_or(0) as u32 + 1;
    let w = cells.iter().map(|c| c.1).max().unwrap_or(0) as u32 + 1;
    let mask = cells.iter().fold(0u128, |m, &(r, c)| m | 1 << (r as u32 * w + c as u32));
    Board::from_mask(h, w, mask).expect("a shape of at most 128 cells")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(max: u32, eq: Equivalence) -> Vec<usize> {
        let all = shapes(max, eq);
        (1..=max).map(|n| all.iter().filter(|b| b.empty_count() == n).count()).collect()
    }

    #[test]
    fn free_polyomino_counts() {
        assert_eq!(counts(10, Equivalence::Free), vec![1, 1, 2, 5, 12, 35, 108, 369, 1285, 4655]);
    }

    #[test]
    fn seed_003_catalogue_is_up_to_flips() {
        let c = counts(8, Equivalence::Flips);
        assert_eq!(c, vec![1, 2, 3, 9, 21, 68, 208, 730]);
        assert_eq!(c.iter().sum::<usize>(), 1042);
    }
}
