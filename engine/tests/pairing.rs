//! The half-turn pairing certificate is sound: exhaustively, it never fires on a position
//! the brute-force solver calls a first-player win (and it does fire).

use cram_engine::pairing::half_turn_certificate;
use cram_engine::{solver::board_regions, Board};

mod common;
use common::all_values;

fn exhaustive(rows: u32, cols: u32) {
    let truth = all_values(rows, cols);
    let (mut fired, mut regions_fired) = (0, 0);
    for (m, &v) in truth.iter().enumerate() {
        let board = Board::from_mask(rows, cols, m as u128).unwrap();
        if half_turn_certificate(&board) {
            fired += 1;
            assert_eq!(v, 0, "certificate fired on {} worth *{v}", board.rows_string());
        }
        // The same check on a connected region (as the search uses it): the position is
        // then worth what its small regions (fewer than four cells) add up to.
        let (regions, small) = board_regions(&board);
        if regions.len() == 1 && regions[0].half_turn_paired() {
            regions_fired += 1;
            assert_eq!(v, small, "region check fired on {} worth *{v}", board.rows_string());
        }
    }
    assert!(fired > 0 && regions_fired > 0, "{rows}x{cols}: the check never fired");
}

#[test]
fn sound_on_every_subset_of_4x4() {
    exhaustive(4, 4);
}

#[test]
fn sound_on_every_subset_of_4x5() {
    exhaustive(4, 5);
}

#[test]
fn sound_on_every_subset_of_2x8() {
    exhaustive(2, 8);
}

#[test]
fn sound_on_every_subset_of_3x6() {
    exhaustive(3, 6);
}
