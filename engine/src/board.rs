//! Boards: an R×C box of cells (R·C ≤ 128), each empty or filled, parsed from the text forms
//! users type: `RxC` (an empty rectangle), a rows string `..#./..../....` (`.` empty, `#`
//! filled, rows joined by `/`) or the contents of a file with one row per line.

use std::fmt;

/// The largest number of cells a board may have.
pub const MAX_CELLS: u32 = 128;

/// A Cram position: which cells of an R×C box are empty.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Board {
    rows: u32,
    cols: u32,
    /// Empty cells, row-major with `cols` cells per row.
    empty: u128,
}

/// Why a board description was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoardError {
    /// The text is neither `RxC` nor a rows string.
    #[error(
        "cannot read {0:?} as a board: expected RxC (e.g. 4x8) or rows of '.' and '#' joined by '/' (e.g. ..#/...)"
    )]
    Unrecognised(String),
    /// A rows string holds a character other than `.` and `#`.
    #[error("row {row} holds {ch:?}: only '.' (empty) and '#' (filled) are allowed")]
    BadChar {
        /// 1-based row number.
        row: usize,
        /// The offending character.
        ch: char,
    },
    /// Rows of a rows string differ in length.
    #[error("row {row} has {len} cells but row 1 has {expected}: all rows must be equally long")]
    Ragged {
        /// 1-based row number.
        row: usize,
        /// Its length.
        len: usize,
        /// The length of the first row.
        expected: usize,
    },
    /// The board has no cells at all.
    #[error("the board has no cells")]
    Empty,
    /// The board has more cells than the engine supports.
    #[error("the board has {0} cells; at most {MAX_CELLS} are supported")]
    TooLarge(u64),
}

impl Board {
    /// An R×C board with every cell empty.
    pub fn rectangle(rows: u32, cols: u32) -> Result<Board, BoardError> {
        let cells = rows as u64 * cols as u64;
        if cells == 0 {
            return Err(BoardError::Empty);
        }
        if cells > MAX_CELLS as u64 {
            return Err(BoardError::TooLarge(cells));
        }
        let empty = if cells == 128 { u128::MAX } else { (1u128 << cells) - 1 };
        Ok(Board { rows, cols, empty })
    }

    /// A board from its size and a row-major mask of empty cells (bits outside are ignored).
    pub fn from_mask(rows: u32, cols: u32, empty: u128) -> Result<Board, BoardError> {
        let full = Board::rectangle(rows, cols)?;
        Ok(Board { empty: empty & full.empty, ..full })
    }

    /// Parses `RxC` or a rows string (see the module documentation).
    pub fn parse(spec: &str) -> Result<Board, BoardError> {
        let spec = spec.trim();
        if let Some((r, c)) = spec.split_once(['x', 'X', '×']) {
            if let (Ok(r), Ok(c)) = (r.trim().parse::<u64>(), c.trim().parse::<u64>()) {
                let cells = r.saturating_mul(c);
                if cells > MAX_CELLS as u64 {
                    return Err(BoardError::TooLarge(cells));
                }
                return Board::rectangle(r as u32, c as u32);
            }
        }
        if !spec.contains(['.', '#']) {
            return Err(BoardError::Unrecognised(spec.to_string()));
        }
        Board::from_rows(spec.split('/'))
    }

    /// Parses rows of `.` and `#`, one per item (the contents of a board file).
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a str>) -> Result<Board, BoardError> {
        let rows: Vec<&str> = rows.into_iter().map(str::trim_end).collect();
        let expected = rows.first().map_or(0, |r| r.chars().count());
        let cells = (rows.len() * expected) as u64;
        if cells == 0 {
            return Err(BoardError::Empty);
        }
        let mut empty = 0u128;
        for (i, row) in rows.iter().enumerate() {
            let len = row.chars().count();
            if len != expected {
                return Err(BoardError::Ragged { row: i + 1, len, expected });
            }
            for (j, ch) in row.chars().enumerate() {
                match ch {
                    '.' if (i * expected + j) < MAX_CELLS as usize => empty |= 1 << (i * expected + j),
                    '.' | '#' => {}
                    _ => return Err(BoardError::BadChar { row: i + 1, ch }),
                }
            }
        }
        if cells > MAX_CELLS as u64 {
            return Err(BoardError::TooLarge(cells));
        }
        Board::from_mask(rows.len() as u32, expected as u32, empty)
    }

    /// Number of rows.
    pub fn rows(&self) -> u32 {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> u32 {
        self.cols
    }

    /// Row-major mask of the empty cells (`cols` cells per row).
    pub fn empty(&self) -> u128 {
        self.empty
    }

    /// Number of empty cells.
    pub fn empty_count(&self) -> u32 {
        self.empty.count_ones()
    }

    /// True when cell (r, c) is empty.
    pub fn is_empty_cell(&self, r: u32, c: u32) -> bool {
        self.empty >> (r * self.cols + c) & 1 == 1
    }

    /// The board with the given cells (a row-major mask, e.g. a move) filled.
    pub fn with_filled(&self, cells: u128) -> Board {
        Board { empty: self.empty & !cells, ..*self }
    }

    /// Every legal move as a mask of its two cells, horizontal ones first, in cell order.
    pub fn moves(&self) -> Vec<u128> {
        let c = self.cols;
        let mut out = Vec::new();
        for i in 0..self.rows * c {
            if i % c + 1 < c && self.empty >> i & 3 == 3 {
                out.push(3u128 << i);
            }
        }
        for i in 0..self.rows.saturating_sub(1) * c {
            if self.empty >> i & 1 == 1 && self.empty >> (i + c) & 1 == 1 {
                out.push(1u128 << i | 1u128 << (i + c));
            }
        }
        out
    }

    /// One region as a position: its bounding box, the cells outside it filled (how a
    /// unit or an option is drawn for people, in a form `cram solve` reads back).
    pub fn of_region(r: &crate::region::AnyRegion) -> Board {
        let (h, w) = r.dims();
        Board::from_mask(h, w, r.dense()).expect("a region's box holds at most 128 cells")
    }

    /// The rows string (`.` empty, `#` filled, rows joined by `/`).
    pub fn rows_string(&self) -> String {
        self.lines().join("/")
    }

    /// The rows, one string per row.
    pub fn lines(&self) -> Vec<String> {
        (0..self.rows)
            .map(|r| (0..self.cols).map(|c| if self.is_empty_cell(r, c) { '.' } else { '#' }).collect())
            .collect()
    }

    /// True when every cell is empty.
    pub fn is_full_rectangle(&self) -> bool {
        self.empty.count_ones() == self.rows * self.cols
    }
}

impl fmt::Display for Board {
    /// `RxC` for an empty rectangle, else the rows string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_full_rectangle() {
            write!(f, "{}x{}", self.rows, self.cols)
        } else {
            f.write_str(&self.rows_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_drawn_reads_back_as_its_cells() {
        for spec in ["5x9", "..#./..../....", ".##../...../.#...", "3x22"] {
            let board = Board::parse(spec).unwrap();
            for r in crate::solver::plain_board_regions(&board).0 {
                let drawn = Board::of_region(&r);
                assert_eq!((drawn.rows(), drawn.cols()), r.dims());
                let back = Board::parse(&drawn.rows_string()).unwrap();
                assert_eq!(back.empty(), r.dense(), "{spec}: {}", drawn.rows_string());
            }
        }
    }

    #[test]
    fn parses_rectangles_and_rows() {
        let b = Board::parse("3x4").unwrap();
        assert_eq!((b.rows(), b.cols(), b.empty_count()), (3, 4, 12));
        let b = Board::parse("..#/.../#..").unwrap();
        assert_eq!((b.rows(), b.cols(), b.empty_count()), (3, 3, 7));
        assert!(!b.is_empty_cell(0, 2) && b.is_empty_cell(1, 1));
        assert_eq!(b.rows_string(), "..#/.../#..");
        assert_eq!(Board::parse("8x16").unwrap().empty_count(), 128);
        assert_eq!(Board::parse("#/#").unwrap().empty_count(), 0);
    }

    #[test]
    fn refuses_bad_input_with_a_reason() {
        assert_eq!(Board::parse("0x5"), Err(BoardError::Empty));
        assert_eq!(Board::parse("9x15"), Err(BoardError::TooLarge(135)));
        assert_eq!(Board::parse("99999999999x99999999999"), Err(BoardError::TooLarge(u64::MAX)));
        assert_eq!(Board::parse("../."), Err(BoardError::Ragged { row: 2, len: 1, expected: 2 }));
        assert_eq!(Board::parse("..x/..."), Err(BoardError::BadChar { row: 1, ch: 'x' }));
        assert!(matches!(Board::parse("hello"), Err(BoardError::Unrecognised(_))));
        assert!(matches!(Board::parse(""), Err(BoardError::Unrecognised(_))));
        let long = vec![".".repeat(12); 11].join("/");
        assert_eq!(Board::parse(&long), Err(BoardError::TooLarge(132)));
    }

    #[test]
    fn lists_moves() {
        assert_eq!(Board::parse("2x2").unwrap().moves().len(), 4);
        assert_eq!(Board::parse("3x3").unwrap().moves().len(), 12);
        assert_eq!(Board::parse(".#./...").unwrap().moves().len(), 4);
    }
}
