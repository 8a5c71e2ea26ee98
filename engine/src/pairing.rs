//! The half-turn pairing certificate (seeds 002, 003): when the half-turn about the centre of
//! the empty cells' bounding box maps the empty cells onto themselves, fixes none of them and
//! maps none to a neighbour, the second player wins by answering every move with its image.
//! The neighbour condition is what makes the check sound: without it a domino across the
//! centre is its own image and the answer would be illegal.

use crate::board::Board;
use crate::region::{restride, Region};

/// True when the sound half-turn pairing proves the position a second-player win.
pub fn half_turn_certificate(board: &Board) -> bool {
    half_turn_check(board, true)
}

/// The half-turn check with (`sound`) or without the condition that no cell is adjacent to
/// its image. Without it the check is wrong on some positions (seed 002); it is kept only to
/// measure that.
pub fn half_turn_check(board: &Board, sound: bool) -> bool {
    let e = board.empty();
    // The empty position is not counted as paired, as in seed 002's counts.
    if e == 0 || e.count_ones() % 2 == 1 {
        return false;
    }
    let s = board.cols();
    let (lo_row, lo_col, h, w) = bounding_box(board);
    let block = restride(e >> (lo_row * s + lo_col), s, h, w, w);
    let region = Region { bits: block, stride: w as u8, h: h as u8, w: w as u8 };
    if sound {
        return region.half_turn_paired();
    }
    // Symmetric with no fixed cell (an odd count or the centre cell of an odd box).
    let fixed = h % 2 == 1 && w % 2 == 1 && block >> ((h / 2) * w + w / 2) & 1 == 1;
    (block.reverse_bits() >> (128 - h * w)) == block && !fixed
}

/// The bounding box of a position's empty cells (nonempty): top row, left column, height,
/// width.
fn bounding_box(board: &Board) -> (u32, u32, u32, u32) {
    let (e, s) = (board.empty(), board.cols());
    let (lo_row, hi_row) = (e.trailing_zeros() / s, (127 - e.leading_zeros()) / s);
    let mut occ = 0u128;
    for r in lo_row..=hi_row {
        occ |= (e >> (r * s)) & <u128 as crate::bits::Bits>::low_mask(s);
    }
    let lo_col = occ.trailing_zeros();
    (lo_row, lo_col, hi_row - lo_row + 1, 127 - occ.leading_zeros() - lo_col + 1)
}

/// The 7 non-identity symmetries of the square, acting on the bounding box of the empty
/// cells. `ReflectRows` reverses the order of the rows (top ↔ bottom), `ReflectCols` the
/// order of the columns (left ↔ right); the diagonal runs from the top-left corner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symmetry {
    /// Rotation by 180°.
    HalfTurn,
    /// Rotation by 90° clockwise.
    QuarterTurnCw,
    /// Rotation by 90° counter-clockwise.
    QuarterTurnCcw,
    /// Top ↔ bottom.
    ReflectRows,
    /// Left ↔ right.
    ReflectCols,
    /// About the main diagonal (top-left to bottom-right).
    ReflectDiagonal,
    /// About the anti-diagonal (top-right to bottom-left).
    ReflectAntidiagonal,
}

impl Symmetry {
    /// All seven, in a fixed order.
    pub const ALL: [Symmetry; 7] = [
        Symmetry::HalfTurn,
        Symmetry::QuarterTurnCw,
        Symmetry::QuarterTurnCcw,
        Symmetry::ReflectRows,
        Symmetry::ReflectCols,
        Symmetry::ReflectDiagonal,
        Symmetry::ReflectAntidiagonal,
    ];

    /// The name used in text and JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Symmetry::HalfTurn => "half-turn",
            Symmetry::QuarterTurnCw => "quarter-turn-cw",
            Symmetry::QuarterTurnCcw => "quarter-turn-ccw",
            Symmetry::ReflectRows => "reflect-rows",
            Symmetry::ReflectCols => "reflect-cols",
            Symmetry::ReflectDiagonal => "reflect-diagonal",
            Symmetry::ReflectAntidiagonal => "reflect-antidiagonal",
        }
    }

    /// True for the maps that need a square box.
    fn needs_square(self) -> bool {
        matches!(
            self,
            Symmetry::QuarterTurnCw
                | Symmetry::QuarterTurnCcw
                | Symmetry::ReflectDiagonal
                | Symmetry::ReflectAntidiagonal
        )
    }

    /// Image of (r, c) in an h×w box (square when `needs_square`).
    fn apply(self, r: u32, c: u32, h: u32, w: u32) -> (u32, u32) {
        match self {
            Symmetry::HalfTurn => (h - 1 - r, w - 1 - c),
            Symmetry::QuarterTurnCw => (c, h - 1 - r),
            Symmetry::QuarterTurnCcw => (w - 1 - c, r),
            Symmetry::ReflectRows => (h - 1 - r, c),
            Symmetry::ReflectCols => (r, w - 1 - c),
            Symmetry::ReflectDiagonal => (c, r),
            Symmetry::ReflectAntidiagonal => (w - 1 - c, h - 1 - r),
        }
    }
}

/// Whether a symmetry is a pairing strategy for a position, or the first reason it is not.
/// Cells are 0-based (row, column) board coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A pairing strategy: the second player wins by answering every move with its image.
    Pairing,
    /// The map does not carry the empty cells onto themselves.
    NotASymmetry,
    /// A cell is its own image: the opponent can take it with nothing to answer.
    FixedCell((u32, u32)),
    /// A domino is its own image: the answer would repeat the move.
    SelfMappedDomino((u32, u32), (u32, u32)),
    /// A quarter-turn maps the position onto itself but is not its own inverse, so
    /// "answer with the image" does not restore a symmetric position.
    NotAnInvolution,
}

impl Verdict {
    /// The failure's name (`None` for a pairing).
    pub fn failure(&self) -> Option<&'static str> {
        match self {
            Verdict::Pairing => None,
            Verdict::NotASymmetry => Some("not-a-symmetry"),
            Verdict::FixedCell(_) => Some("fixed-cell"),
            Verdict::SelfMappedDomino(..) => Some("self-mapped-domino"),
            Verdict::NotAnInvolution => Some("not-an-involution"),
        }
    }
}

/// The map of `sym` on board cell indices, about the empty cells' bounding box; `None` when
/// the box cannot carry it (not square for the quarter-turns and diagonals).
pub fn cell_map(board: &Board, sym: Symmetry) -> Option<Vec<Option<u32>>> {
    if board.empty() == 0 {
        return None;
    }
    let cols = board.cols();
    let (r0, c0, h, w) = bounding_box(board);
    let (r1, c1) = (r0 + h - 1, c0 + w - 1);
    if sym.needs_square() && h != w {
        return None;
    }
    let map = (0..board.rows() * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            if r < r0 || r > r1 || c < c0 || c > c1 {
                return None;
            }
            let (nr, nc) = sym.apply(r - r0, c - c0, h, w);
            Some((nr + r0) * cols + nc + c0)
        })
        .collect();
    Some(map)
}

/// Checks whether `sym` is a pairing strategy for the position (static conditions).
pub fn check(board: &Board, sym: Symmetry) -> Verdict {
    let Some(map) = cell_map(board, sym) else { return Verdict::NotASymmetry };
    let e = board.empty();
    let cols = board.cols();
    let rc = |i: u32| (i / cols, i % cols);
    let empty: Vec<u32> = (0..128).filter(|&i| e >> i & 1 == 1).collect();
    if empty.iter().any(|&i| map[i as usize].is_none_or(|j| e >> j & 1 == 0)) {
        return Verdict::NotASymmetry;
    }
    if let Some(&i) = empty.iter().find(|&&i| map[i as usize] == Some(i)) {
        return Verdict::FixedCell(rc(i));
    }
    for m in board.moves() {
        let (a, b) = (m.trailing_zeros(), 127 - m.leading_zeros());
        if map[a as usize] == Some(b) && map[b as usize] == Some(a) {
            return Verdict::SelfMappedDomino(rc(a), rc(b));
        }
    }
    if matches!(sym, Symmetry::QuarterTurnCw | Symmetry::QuarterTurnCcw) {
        return Verdict::NotAnInvolution;
    }
    Verdict::Pairing
}

/// The outcome of walking a pairing strategy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audit {
    /// Distinct positions (opponent to move) reached before the walk ended, the start included.
    pub positions: u64,
    /// The first position where the strategy has no legal answer, and the opponent's move
    /// there (its two cells, 0-based (row, column)).
    pub failure: Option<(Board, [(u32, u32); 2])>,
}

/// Walks the strategy "answer every move with its image under `sym`" from the position,
/// depth first (each answered move is followed at once), trying moves in [`Board::moves`]
/// order, until it meets a move with no legal answer or has seen every reachable position.
/// `None` when the box cannot carry `sym`.
pub fn audit(board: &Board, sym: Symmetry) -> Option<Audit> {
    let map = cell_map(board, sym)?;
    let mut walk = Walk { map, seen: std::collections::HashSet::new(), failure: None };
    walk.seen.insert(board.empty());
    walk.visit(board);
    Some(Audit { positions: walk.seen.len() as u64, failure: walk.failure })
}

struct Walk {
    map: Vec<Option<u32>>,
    seen: std::collections::HashSet<u128>,
    failure: Option<(Board, [(u32, u32); 2])>,
}

impl Walk {
    /// Follows every opponent move from `pos`; false once a failure is found.
    fn visit(&mut self, pos: &Board) -> bool {
        let cols = pos.cols();
        for m in pos.moves() {
            let (a, b) = (m.trailing_zeros(), 127 - m.leading_zeros());
            let after = pos.with_filled(m);
            let reply = match (self.map[a as usize], self.map[b as usize]) {
                (Some(x), Some(y)) if x != y => 1u128 << x | 1u128 << y,
                _ => 0,
            };
            if reply == 0 || reply & after.empty() != reply {
                self.failure = Some((*pos, [(a / cols, a % cols), (b / cols, b % cols)]));
                return false;
            }
            let next = after.with_filled(reply);
            if self.seen.insert(next.empty()) && !self.visit(&next) {
                return false;
            }
        }
        true
    }
}

/// One depth of [`depth_profile`]: positions after `depth` dominoes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DepthRow {
    /// Dominoes placed since the start.
    pub depth: u32,
    /// Distinct positions reachable at this depth.
    pub positions: u64,
    /// Of them, first-player wins.
    pub wins: u64,
    /// Wins on which the sound check fires (some move leaves a paired position).
    pub fires: u64,
    /// Positions on which the check without the adjacency condition fires.
    pub unsound_fires: u64,
    /// Of those, losses: where the unsound check is wrong.
    pub unsound_wrong: u64,
}

/// Seed 002's profile: over every position reachable from `board`, by depth, how often the
/// half-turn check "one move away" (some move leaves a position the half-turn pairs) fires
/// on the winning positions — with the sound check, and without the adjacency condition.
/// Refuses (returns `None`) when more than `limit` positions are reachable.
pub fn depth_profile(
    board: &Board,
    solver: &mut crate::Solver,
    limit: usize,
) -> Result<Option<Vec<DepthRow>>, crate::Interrupted> {
    let fires = |b: &Board, sound: bool| b.moves().into_iter().any(|m| half_turn_check(&b.with_filled(m), sound));
    let mut rows = Vec::new();
    let mut layer: Vec<Board> = vec![*board];
    let mut total = 0usize;
    for depth in 0.. {
        if layer.is_empty() {
            break;
        }
        total += layer.len();
        if total > limit {
            return Ok(None);
        }
        let mut row = DepthRow { depth, positions: layer.len() as u64, ..DepthRow::default() };
        let mut next = std::collections::HashSet::new();
        for b in &layer {
            let win = solver.solve(b, crate::Mode::Outcome)?.outcome == crate::Outcome::First;
            row.wins += win as u64;
            row.fires += (win && fires(b, true)) as u64;
            if fires(b, false) {
                row.unsound_fires += 1;
                row.unsound_wrong += !win as u64;
            }
            for m in b.moves() {
                next.insert(b.with_filled(m).empty());
            }
        }
        rows.push(row);
        let mut masks: Vec<u128> = next.into_iter().collect();
        masks.sort_unstable();
        layer =
            masks.into_iter().map(|m| Board::from_mask(board.rows(), board.cols(), m).expect("same size")).collect();
    }
    Ok(Some(rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_on_even_rectangles_and_paired_positions_only() {
        let fires = |s: &str| half_turn_certificate(&Board::parse(s).unwrap());
        assert!(fires("4x4") && fires("2x6") && fires("6x8"));
        assert!(!fires("3x4") && !fires("3x3") && !fires("5x5"));
        // Paired after a central move on 3x4? The centre domino's removal leaves a paired set.
        assert!(fires("..../.##./...."));
        // Symmetric, but the two centre cells are neighbours and images of each other.
        assert!(!fires("#..#"));
        // Symmetric about the bounding box of the empty cells, not of the board.
        assert!(fires("#####/#..##/#..##"));
        assert!(!fires("##../##../...."));
    }

    #[test]
    fn verdicts_name_the_first_failure() {
        let v = |spec: &str, sym| check(&Board::parse(spec).unwrap(), sym);
        assert_eq!(v("4x4", Symmetry::HalfTurn), Verdict::Pairing);
        assert_eq!(v("4x4", Symmetry::QuarterTurnCw), Verdict::NotAnInvolution);
        assert_eq!(v("4x4", Symmetry::ReflectRows), Verdict::SelfMappedDomino((1, 0), (2, 0)));
        assert_eq!(v("4x4", Symmetry::ReflectDiagonal), Verdict::FixedCell((0, 0)));
        assert_eq!(v("3x3", Symmetry::HalfTurn), Verdict::FixedCell((1, 1)));
        assert_eq!(v("3x4", Symmetry::HalfTurn), Verdict::SelfMappedDomino((1, 1), (1, 2)));
        assert_eq!(v("3x4", Symmetry::ReflectDiagonal), Verdict::NotASymmetry);
        assert_eq!(v("../.#", Symmetry::HalfTurn), Verdict::NotASymmetry);
        assert_eq!(v("../.#", Symmetry::ReflectDiagonal), Verdict::FixedCell((0, 0)));
    }

    /// An independent count of the positions a pairing strategy reaches: breadth first.
    fn reachable_breadth_first(board: &Board, sym: Symmetry) -> usize {
        let map = cell_map(board, sym).unwrap();
        let mut seen = std::collections::HashSet::from([board.empty()]);
        let mut layer = vec![*board];
        while !layer.is_empty() {
            let mut next = Vec::new();
            for pos in layer {
                for m in pos.moves() {
                    let (a, b) = (m.trailing_zeros(), 127 - m.leading_zeros());
                    let reply = 1u128 << map[a as usize].unwrap() | 1u128 << map[b as usize].unwrap();
                    let after = pos.with_filled(m).with_filled(reply);
                    if seen.insert(after.empty()) {
                        next.push(after);
                    }
                }
            }
            layer = next;
        }
        seen.len()
    }

    #[test]
    fn audits_count_the_positions_of_seed_001() {
        for (spec, count) in [("4x4", 60), ("4x6", 624), ("2x2", 2), ("2x6", 18)] {
            let b = Board::parse(spec).unwrap();
            let a = audit(&b, Symmetry::HalfTurn).unwrap();
            assert_eq!(a.failure, None, "{spec}");
            assert_eq!(a.positions as usize, reachable_breadth_first(&b, Symmetry::HalfTurn), "{spec}");
            assert_eq!(a.positions, count, "{spec}");
        }
        // Odd boards: the walk meets a move with no legal answer.
        let a = audit(&Board::parse("3x3").unwrap(), Symmetry::HalfTurn).unwrap();
        assert_eq!(a.positions, 2);
        assert_eq!(a.failure.unwrap().1, [(1, 0), (1, 1)]);
        let a = audit(&Board::parse("5x5").unwrap(), Symmetry::HalfTurn).unwrap();
        assert_eq!(a.positions, 7);
        assert!(audit(&Board::parse("3x4").unwrap(), Symmetry::ReflectDiagonal).is_none());
    }

    #[test]
    fn depth_profile_of_seed_002() {
        let mut s = crate::Solver::new(&crate::Config::default(), std::sync::Arc::new(crate::DbSet::default()));
        let rows = depth_profile(&Board::parse("4x5").unwrap(), &mut s, 1 << 20).unwrap().unwrap();
        // Seed 002: the check without the adjacency condition fires on 8,613 positions of
        // 4x5, 1,026 of them losses; the sound check never fires on a loss.
        assert_eq!(rows.iter().map(|r| r.unsound_fires).sum::<u64>(), 8613);
        assert_eq!(rows.iter().map(|r| r.unsound_wrong).sum::<u64>(), 1026);
        // The U-shaped profile, in percent of winning positions at depths 1..=8:
        // seed 002 gives 38, 12, 12, 4, 12, 6, 50, 100.
        let pct: Vec<u64> = rows[1..=8].iter().map(|r| (100 * r.fires + r.wins / 2) / r.wins).collect();
        assert_eq!(pct, vec![38, 12, 12, 4, 12, 6, 50, 100]);
        // The last move of a won game leaves the empty board, not counted as paired.
        assert_eq!((rows[9].wins, rows[9].fires), (31, 0));
        assert!(depth_profile(&Board::parse("4x5").unwrap(), &mut s, 1000).unwrap().is_none());
    }
}
