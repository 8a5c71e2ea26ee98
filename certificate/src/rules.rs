//! The rules of Cram on sets of cells, written for the checker alone: moves, 4-connected
//! components, the canonical form of a region under the 8 symmetries of the square, and
//! the nimber of small regions by the plain mex rule. Nothing here is shared with the
//! solver's search; it is plain code meant to be read, with a few whole-word operations
//! (each checked in the tests against its definition, cell by cell).
//!
//! Cells of an `h`×`w` box are numbered row-major: cell `(r, c)` is bit `r·w + c` of a
//! `u128`, so a box holds at most 128 cells.

use std::collections::HashMap;

/// A fast hasher for shapes (the memo and the fact index are probed millions of times).
#[derive(Default, Clone, Copy)]
pub struct ShapeHasher(u64);

impl std::hash::Hasher for ShapeHasher {
    fn finish(&self) -> u64 {
        let x = self.0;
        let x = (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ (x >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x1000_0000_01B3);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.0 = (self.0.rotate_left(8) ^ i as u64).wrapping_mul(0x1000_0000_01B3);
    }
    fn write_u128(&mut self, i: u128) {
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(23) ^ (i >> 64) as u64;
    }
}

/// Builds [`ShapeHasher`]s.
pub type ShapeHash = std::hash::BuildHasherDefault<ShapeHasher>;

/// A region in canonical form: the least `(h, w, cells)` over the 8 images of a set of
/// cells under the symmetries of the square, each translated to the top-left of its own
/// bounding box of `h` rows and `w` columns. Two sets of cells are congruent exactly when
/// their shapes are equal. The order (height, then width, then the cells as a number) is
/// part of the certificate format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    /// Rows of the bounding box.
    pub h: u8,
    /// Columns of the bounding box.
    pub w: u8,
    /// The cells, row-major with `w` cells per row.
    pub cells: u128,
}

impl Shape {
    /// Number of cells.
    pub fn size(&self) -> u32 {
        self.cells.count_ones()
    }

    /// `HxW:cells` with the cells in hexadecimal, as messages name a region.
    pub fn name(&self) -> String {
        format!("{}x{}:{:x}", self.h, self.w, self.cells)
    }

    /// The shape of the cells `cells` of an `h`×`w` box (nonempty, inside the box).
    pub fn of(h: u32, w: u32, cells: u128) -> Shape {
        canonical(h, w, cells)
    }

    /// True when the shape is in canonical form, a nonempty 4-connected set filling its
    /// box's first and last rows and columns (what data read from a file must be).
    pub fn is_canonical_region(&self) -> bool {
        let (h, w) = (self.h as u32, self.w as u32);
        if h == 0 || w == 0 || h * w > 128 || self.cells == 0 || (h * w < 128 && self.cells >> (h * w) != 0) {
            return false;
        }
        let mut parts = 0;
        components(h, w, self.cells, |_| parts += 1);
        parts == 1 && canonical(h, w, self.cells) == *self
    }

    /// The moves of the region in the order certificates number them: by the first cell
    /// of the domino, row-major; at one cell the horizontal domino before the vertical one.
    /// Each move is the mask of its two cells.
    pub fn moves(&self) -> Vec<u128> {
        moves(self.h as u32, self.w as u32, self.cells)
    }

    /// The regions (as shapes) left by removing the cells `taken` from this region.
    pub fn after(&self, taken: u128) -> Vec<Shape> {
        let (h, w) = (self.h as u32, self.w as u32);
        let mut out = Vec::new();
        components(h, w, self.cells & !taken, |c| out.push(canonical(h, w, c)));
        out
    }
}

/// The dominoes that fit the cells `cells` of an `h`×`w` box, as masks, in the order of
/// [`Shape::moves`].
pub fn moves(h: u32, w: u32, cells: u128) -> Vec<u128> {
    let grid = Grid::new(h, w);
    // The first cells of the horizontal dominoes (the cell to the right is a cell too) and
    // of the vertical ones (so is the cell below).
    let horizontal = cells & (cells >> 1) & grid.not_last;
    let vertical = if w < 128 { cells & (cells >> w) } else { 0 };
    let mut out = Vec::with_capacity((horizontal.count_ones() + vertical.count_ones()) as usize);
    let mut firsts = horizontal | vertical;
    while firsts != 0 {
        let i = firsts.trailing_zeros();
        firsts &= firsts - 1;
        if horizontal >> i & 1 == 1 {
            out.push(3u128 << i);
        }
        if vertical >> i & 1 == 1 {
            out.push(1u128 << i | 1u128 << (i + w));
        }
    }
    out
}

/// Row and column masks of an `h`×`w` box.
struct Grid {
    w: u32,
    /// Every cell of the box.
    all: u128,
    /// Cells not in the first column.
    not_first: u128,
    /// Cells not in the last column.
    not_last: u128,
}

impl Grid {
    fn new(h: u32, w: u32) -> Grid {
        let n = h * w;
        let all = if n >= 128 { u128::MAX } else { (1u128 << n) - 1 };
        let first_column = (0..h).fold(0u128, |m, r| m | 1u128 << (r * w));
        let last_column = first_column << (w - 1);
        Grid { w, all, not_first: all & !first_column, not_last: all & !last_column }
    }

    /// The cells of `c` and their 4 neighbours, inside the box.
    fn grow(&self, c: u128) -> u128 {
        let w = self.w;
        let up = if w < 128 { c >> w } else { 0 };
        let down = if w < 128 { c << w } else { 0 };
        (c | ((c << 1) & self.not_first) | ((c >> 1) & self.not_last) | up | down) & self.all
    }
}

/// Calls `f` with each 4-connected component of the cells `cells` of an `h`×`w` box.
pub fn components(h: u32, w: u32, cells: u128, mut f: impl FnMut(u128)) {
    let grid = Grid::new(h, w);
    let mut rest = cells;
    while rest != 0 {
        let mut part = rest & rest.wrapping_neg();
        loop {
            let next = grid.grow(part) & rest;
            if next == part {
                break;
            }
            part = next;
        }
        rest &= !part;
        f(part);
    }
}

/// The canonical shape of the nonempty cells `cells` of an `h`×`w` box (see [`Shape`]).
pub fn canonical(h: u32, w: u32, cells: u128) -> Shape {
    debug_assert!(cells != 0);
    // The bounding box: the first and last rows that hold cells, and the columns they use.
    let (mut first_row, mut last_row, mut columns) = (h, 0, 0u128);
    for r in 0..h {
        let row = (cells >> (r * w)) & low_bits(w);
        if row != 0 {
            first_row = first_row.min(r);
            last_row = r;
            columns |= row;
        }
    }
    let c0 = columns.trailing_zeros();
    let (bh, bw) = (last_row - first_row + 1, 128 - columns.leading_zeros() - c0);
    // The cells in a box of their own, `bw` cells per row.
    let mut boxed = 0u128;
    for i in 0..bh {
        boxed |= ((cells >> ((first_row + i) * w + c0)) & low_bits(bw)) << (i * bw);
    }
    // The least image has the smaller side as its height: only those images are compared,
    // the four reflections of the box as it is or of its transpose (all eight when square).
    let mut best: Option<Shape> = None;
    let mut consider = |image: u128, ih: u32, iw: u32| {
        let flipped = flip_rows(image, ih, iw);
        for cells in [image, half_turn(image, ih * iw), flipped, half_turn(flipped, ih * iw)] {
            let s = Shape { h: ih as u8, w: iw as u8, cells };
            if best.is_none_or(|b| s < b) {
                best = Some(s);
            }
        }
    };
    if bh <= bw {
        consider(boxed, bh, bw);
    }
    if bw <= bh {
        consider(transpose(boxed, bh, bw), bw, bh);
    }
    best.expect("at least four images")
}

/// The cells `0..n` of a `u128`.
fn low_bits(n: u32) -> u128 {
    if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    }
}

/// The box of `n` cells (row-major) turned half a turn: cell `i` goes to `n - 1 - i`, which
/// is reversing the order of the cells.
fn half_turn(cells: u128, n: u32) -> u128 {
    cells.reverse_bits() >> (128 - n)
}

/// The `h`×`w` box upside down: row `i` becomes row `h - 1 - i`.
fn flip_rows(cells: u128, h: u32, w: u32) -> u128 {
    (0..h).fold(0u128, |out, i| out | ((cells >> (i * w)) & low_bits(w)) << ((h - 1 - i) * w))
}

/// The `h`×`w` box transposed into a `w`×`h` one: cell `(r, c)` goes to `(c, r)`.
fn transpose(cells: u128, h: u32, w: u32) -> u128 {
    let (mut out, mut rest) = (0u128, cells);
    while rest != 0 {
        let i = rest.trailing_zeros();
        rest &= rest - 1;
        out |= 1u128 << ((i % w) * h + i / w);
    }
    out
}

/// Nimbers of small regions computed by the mex rule alone: the value of a region is the
/// least value that none of its options has, an option's value the XOR of its regions'.
/// Memoised by shape.
#[derive(Default)]
pub struct SmallValues {
    memo: HashMap<Shape, u8, ShapeHash>,
}

impl SmallValues {
    /// An empty memo.
    pub fn new() -> SmallValues {
        SmallValues::default()
    }

    /// Regions computed so far.
    pub fn len(&self) -> usize {
        self.memo.len()
    }

    /// True when nothing was computed yet.
    pub fn is_empty(&self) -> bool {
        self.memo.is_empty()
    }

    /// The nimber of region `s`.
    pub fn value(&mut self, s: &Shape) -> u8 {
        if let Some(&v) = self.memo.get(s) {
            return v;
        }
        let mut seen = 0u128;
        for m in s.moves() {
            let v = s.after(m).iter().fold(0, |x, p| x ^ self.value(p));
            seen |= 1 << v;
        }
        let v = seen.trailing_ones() as u8;
        self.memo.insert(*s, v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rect(h: u32, w: u32) -> Shape {
        Shape::of(h, w, (1u128 << (h * w)) - 1)
    }

    #[test]
    fn canonical_forms_of_congruent_sets_agree() {
        // An L tromino in its four rotations and a reflection.
        let ls = [(2, 2, 0b0111), (2, 2, 0b1011), (2, 2, 0b1101), (2, 2, 0b1110)];
        let shapes: Vec<Shape> = ls.iter().map(|&(h, w, c)| Shape::of(h, w, c)).collect();
        assert!(shapes.iter().all(|s| *s == shapes[0]), "{shapes:?}");
        // A 2×3 rectangle and a 3×2 one are the same shape, 2 rows high.
        assert_eq!(rect(2, 3), rect(3, 2));
        assert_eq!((rect(3, 2).h, rect(3, 2).w), (2, 3));
        // Translation: cells in the middle of a larger box.
        assert_eq!(Shape::of(4, 4, 0b0110_0110 << 4), rect(2, 2));
        assert!(rect(2, 3).is_canonical_region());
        assert!(!Shape { h: 2, w: 2, cells: 0b1001 }.is_canonical_region(), "not connected");
        assert!(!Shape { h: 3, w: 2, cells: 0b111111 }.is_canonical_region(), "not the least image");
    }

    /// The definition, cell by cell: the least (h, w, cells) over the eight images.
    fn canonical_by_coordinates(h: u32, w: u32, cells: u128) -> Shape {
        let coords: Vec<(u32, u32)> = (0..h * w).filter(|&i| cells >> i & 1 == 1).map(|i| (i / w, i % w)).collect();
        let r0 = coords.iter().map(|p| p.0).min().unwrap();
        let c0 = coords.iter().map(|p| p.1).min().unwrap();
        let bh = coords.iter().map(|p| p.0).max().unwrap() - r0 + 1;
        let bw = coords.iter().map(|p| p.1).max().unwrap() - c0 + 1;
        (0..8)
            .map(|sym| {
                let (ih, iw) = if sym & 4 != 0 { (bw, bh) } else { (bh, bw) };
                let image = coords.iter().fold(0u128, |m, &(r, c)| {
                    let (mut r, mut c) = (r - r0, c - c0);
                    if sym & 1 != 0 {
                        r = bh - 1 - r;
                    }
                    if sym & 2 != 0 {
                        c = bw - 1 - c;
                    }
                    if sym & 4 != 0 {
                        (r, c) = (c, r);
                    }
                    m | 1u128 << (r * iw + c)
                });
                Shape { h: ih as u8, w: iw as u8, cells: image }
            })
            .min()
            .unwrap()
    }

    /// The definition, cell by cell: at each cell in row-major order, the domino to its
    /// right, then the one below it.
    fn moves_by_cells(h: u32, w: u32, cells: u128) -> Vec<u128> {
        let mut out = Vec::new();
        for r in 0..h {
            for c in 0..w {
                let i = r * w + c;
                if cells >> i & 1 == 0 {
                    continue;
                }
                if c + 1 < w && cells >> (i + 1) & 1 == 1 {
                    out.push(3u128 << i);
                }
                if r + 1 < h && cells >> (i + w) & 1 == 1 {
                    out.push(1u128 << i | 1u128 << (i + w));
                }
            }
        }
        out
    }

    #[test]
    fn canonical_form_is_the_least_image() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (h, w) in
            [(1, 1), (1, 9), (2, 2), (3, 5), (4, 4), (5, 3), (6, 7), (8, 8), (4, 32), (11, 11), (1, 128), (128, 1)]
        {
            let all = if h * w == 128 { u128::MAX } else { (1u128 << (h * w)) - 1 };
            for _ in 0..300 {
                let cells = ((next() as u128) << 64 | next() as u128) & (next() as u128 | next() as u128) & all;
                if cells == 0 {
                    continue;
                }
                assert_eq!(canonical(h, w, cells), canonical_by_coordinates(h, w, cells), "{h}x{w} {cells:#x}");
                assert_eq!(moves(h, w, cells), moves_by_cells(h, w, cells), "{h}x{w} {cells:#x}");
                let mut parts = 0;
                components(h, w, cells, |p| {
                    parts += 1;
                    assert_eq!(p & !cells, 0);
                });
                assert!(parts >= 1);
            }
        }
    }

    #[test]
    fn moves_and_components() {
        // A 2×2 square: two horizontal and two vertical dominoes, in cell order.
        assert_eq!(rect(2, 2).moves(), vec![0b0011, 0b0101, 0b1010, 0b1100]);
        // A 1×5 strip less its middle domino... leaves a domino and a cell.
        let strip = rect(1, 5);
        let after = strip.after(0b00110);
        assert_eq!(after.len(), 2);
        assert_eq!(after.iter().map(Shape::size).sum::<u32>(), 3);
    }

    #[test]
    fn small_values_match_known_ones() {
        let mut v = SmallValues::new();
        // 1×n Cram is Dawson's Kayles: G(n) = mex of G(a) ^ G(b) over a + b = n - 2.
        let mut kayles = vec![0u8, 0];
        for n in 2..=14 {
            let seen = (0..=n - 2).fold(0u64, |s, a| s | 1 << (kayles[a] ^ kayles[n - 2 - a]));
            kayles.push(seen.trailing_ones() as u8);
        }
        for n in 1..=14 {
            assert_eq!(v.value(&rect(1, n)), kayles[n as usize], "1x{n}");
        }
        // Published values (Gardner; Uiterwijk): 2×2 *0, 2×3 *1, 2×4 *0, 3×3 *0, 3×4 *1.
        let got: Vec<u8> =
            [(2, 2), (2, 3), (2, 4), (3, 3), (3, 4)].iter().map(|&(h, w)| v.value(&rect(h, w))).collect();
        assert_eq!(got, vec![0, 1, 0, 0, 1]);
    }
}
