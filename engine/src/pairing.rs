//! The half-turn pairing certificate (seeds 002, 003): when the half-turn about the centre of
//! the empty cells' bounding box maps the empty cells onto themselves, fixes none of them and
//! maps none to a neighbour, the second player wins by answering every move with its image.
//! The neighbour condition is what makes the check sound: without it a domino across the
//! centre is its own image and the answer would be illegal.

use crate::board::Board;
use crate::region::{restride, Region};

/// True when the sound half-turn pairing proves the position a second-player win.
pub fn half_turn_certificate(board: &Board) -> bool {
    let e = board.empty();
    if e == 0 || e.count_ones() % 2 == 1 {
        return false;
    }
    let s = board.cols();
    let (lo_row, hi_row) = (e.trailing_zeros() / s, (127 - e.leading_zeros()) / s);
    let mut occ = 0u128;
    for r in lo_row..=hi_row {
        occ |= (e >> (r * s)) & ((1u128 << s) - 1);
    }
    let lo_col = occ.trailing_zeros();
    let h = hi_row - lo_row + 1;
    let w = 127 - occ.leading_zeros() - lo_col + 1;
    let block = restride(e >> (lo_row * s + lo_col), s, h, w, w);
    Region { bits: block, stride: w as u8, h: h as u8, w: w as u8 }.half_turn_paired()
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
}
