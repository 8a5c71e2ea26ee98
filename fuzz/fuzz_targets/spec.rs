//! Spec parsing: `RxC`, rows strings and board files (one row per line) never panic, and a
//! board that parses prints as rows that parse back to the same board.
#![no_main]

use cram_engine::Board;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    for parsed in [Board::parse(text), Board::from_rows(text.lines())] {
        let Ok(board) = parsed else { continue };
        assert!(board.rows() * board.cols() <= 128);
        assert!(board.empty_count() <= board.rows() * board.cols());
        let again = Board::parse(&board.rows_string()).expect("printed rows parse");
        assert_eq!((again.rows(), again.cols(), again.empty()), (board.rows(), board.cols(), board.empty()));
        let _ = cram_engine::solver::board_regions(&board);
    }
});
