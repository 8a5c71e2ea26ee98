//! Regions: connected sets of empty cells in canonical form, the unit every cache keys on.
//!
//! A region is translated to the origin of its bounding box (`h` rows × `w` columns) and
//! stored row-major. Regions that fit an 8×8 box use a row stride of 8 in a `u64`, where all
//! 8 symmetries of the square are a handful of byte and bit operations; larger regions use a
//! stride equal to their width (oriented so that `h ≤ w`) in a `u64` when `h·w ≤ 64`, else in
//! a `u128`. The canonical form is the least encoding over the symmetries, so two regions
//! that are congruent have equal `(bits, stride)` keys.

use crate::bits::{row_of, Bits};

/// A connected region in canonical form (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Region<B: Bits> {
    /// Empty cells, row-major with `stride` cells per row, top-left cell at bit 0.
    pub bits: B,
    /// Row stride: 8 for regions within an 8×8 box, else the width.
    pub stride: u8,
    /// Height of the bounding box.
    pub h: u8,
    /// Width of the bounding box.
    pub w: u8,
}

/// A canonical region in whichever word it fits: the 64-bit fast path or the 128-bit one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum AnyRegion {
    /// A region whose bounding box fits 64 bits.
    Narrow(Region<u64>),
    /// A region that needs more than 64 bits.
    Wide(Region<u128>),
}

impl AnyRegion {
    /// Number of empty cells.
    #[inline]
    pub fn cells(&self) -> u32 {
        match self {
            AnyRegion::Narrow(r) => r.bits.count(),
            AnyRegion::Wide(r) => r.bits.count(),
        }
    }

    /// Bounding box height and width.
    pub fn dims(&self) -> (u32, u32) {
        match self {
            AnyRegion::Narrow(r) => (r.h as u32, r.w as u32),
            AnyRegion::Wide(r) => (r.h as u32, r.w as u32),
        }
    }

    /// The cells as a row-major mask with row stride `w` (the bounding box width).
    pub fn dense(&self) -> u128 {
        match self {
            AnyRegion::Narrow(r) => r.dense(),
            AnyRegion::Wide(r) => r.dense(),
        }
    }

    /// The canonical region of the cells `dense` of an `h`×`w` box (row stride `w`), or
    /// `None` unless they are a nonempty, 4-connected set inside the box of at most 128 cells.
    /// The inverse of [`AnyRegion::dims`] with [`AnyRegion::dense`], for data from outside.
    pub fn from_dense(h: u32, w: u32, dense: u128) -> Option<AnyRegion> {
        let size = h.checked_mul(w).filter(|&n| (1..=128).contains(&n))?;
        if dense == 0 || (size < 128 && dense >> size != 0) {
            return None;
        }
        if component_of(dense & dense.wrapping_neg(), dense, w) != dense {
            return None;
        }
        Some(normalize_block(dense, w))
    }

    /// True when the half-turn pairs the region (see [`Region::half_turn_paired`]).
    pub fn half_turn_paired(&self) -> bool {
        match self {
            AnyRegion::Narrow(r) => r.half_turn_paired(),
            AnyRegion::Wide(r) => r.half_turn_paired(),
        }
    }

    /// A short text name of the region, `HxW:cells` with the dense cells in hex: stable
    /// across runs and machines, used as the key of caches, logs and work units.
    pub fn key(&self) -> String {
        let (h, w) = self.dims();
        format!("{h}x{w}:{:x}", self.dense())
    }

    /// The region named by [`AnyRegion::key`], or `None` when `key` names none.
    pub fn from_key(key: &str) -> Option<AnyRegion> {
        let (dims, cells) = key.split_once(':')?;
        let (h, w) = dims.split_once('x')?;
        AnyRegion::from_dense(h.parse().ok()?, w.parse().ok()?, u128::from_str_radix(cells, 16).ok()?)
    }
}

/// Squared distance, in half-cells, of the centre of the domino at cell `i` (`vertical`:
/// cells i, i+s; else i, i+1) from the centre of an `h`×`w` box with row stride `s`: the
/// search tries moves near the centre first among options of equal cost.
#[inline]
pub fn centre_distance(i: u32, s: u32, h: u32, w: u32, vertical: bool) -> u32 {
    let row = row_of(i, s);
    let dr = (row * 2 + vertical as u32) as i32 + 1 - h as i32;
    let dc = ((i - row * s) * 2 + !vertical as u32) as i32 + 1 - w as i32;
    (dr * dr + dc * dc) as u32
}

/// The search's order of options, smallest first: an option of one region before those
/// whose smaller regions need exact values first (2xN strips: 3,220,049 nodes instead of
/// 11,057 for 2x53 otherwise); then smaller regions (by the sum of squared sizes, so that
/// moves that split come early); then `centre` ([`centre_distance`]) among equals.
/// `sizes`: the cells of the option's regions that need search.
#[inline]
pub fn option_cost(centre: u32, sizes: impl IntoIterator<Item = u32>) -> u32 {
    let (count, squares) = sizes.into_iter().fold((0u32, 0u32), |(n, sq), c| (n + 1, sq + c * c));
    centre + ((((count > 1) as u32) << 31) | squares << 17)
}

impl<B: Bits> Region<B> {
    /// Number of empty cells.
    #[inline]
    pub fn cells(&self) -> u32 {
        self.bits.count()
    }

    /// Start cells of the horizontal and vertical dominoes that fit (bit i: cells i, i+1 or
    /// i, i+stride).
    #[inline]
    pub fn moves(&self) -> (B, B) {
        dominoes(self.bits, self.stride as u32)
    }

    /// The cells as a row-major mask with row stride `w`.
    pub fn dense(&self) -> u128 {
        restride(self.bits.to_u128(), self.stride as u32, self.h as u32, self.w as u32, self.w as u32)
    }

    /// True when the half-turn about the centre of the bounding box pairs the region: it
    /// maps the region onto itself, fixes no cell and maps no cell to a neighbour. The
    /// second player then answers every move with its image, so the region is worth 0.
    pub fn half_turn_paired(&self) -> bool {
        let (h, w, s) = (self.h as u32, self.w as u32, self.stride as u32);
        if self.bits.count() % 2 == 1 {
            return false;
        }
        // Reversing the word sends cell r*s+c to BITS-1-r*s-c; shifting right by
        // BITS-(h-1)*s-w lands it on (h-1-r)*s + (w-1-c), its half-turn image.
        if (self.bits.reversed() >> (B::BITS - (h - 1) * s - w)) != self.bits {
            return false;
        }
        // Cells whose image is themselves or a neighbour lie on the centre lines.
        let bad: B = match (h % 2, w % 2) {
            (1, 1) => B::bit((h / 2) * s + w / 2),
            (1, 0) => B::bit((h / 2) * s + w / 2 - 1) | B::bit((h / 2) * s + w / 2),
            (0, 1) => B::bit((h / 2 - 1) * s + w / 2) | B::bit((h / 2) * s + w / 2),
            _ => B::ZERO,
        };
        (self.bits & bad).is_empty()
    }
}

/// Start cells of horizontal and vertical dominoes on empty set `e` with row stride `s`.
#[inline]
pub fn dominoes<B: Bits>(e: B, s: u32) -> (B, B) {
    let m = B::masks(s);
    (e & (e >> 1) & m.not_last, e & e.down(s))
}

/// Ring cells around a domino, as (row, column) offsets from its first cell, in cycle
/// order (consecutive cells are neighbours), and which of them touch the domino.
const RING_H: [(i32, i32); 10] =
    [(-1, -1), (-1, 0), (-1, 1), (-1, 2), (0, 2), (1, 2), (1, 1), (1, 0), (1, -1), (0, -1)];
const RING_V: [(i32, i32); 10] =
    [(-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (2, 1), (2, 0), (2, -1), (1, -1), (0, -1)];
const TOUCH_H: u32 = 0b10_1101_0110;
const TOUCH_V: u32 = 0b11_0101_1010;

/// For each pattern of empty ring cells: true when every ring cell that touches the domino
/// lies on one arc of empty ring cells, so removing the domino cannot disconnect its region.
const fn ring_table(touch: u32) -> [bool; 1024] {
    let mut t = [false; 1024];
    let mut p = 0u32;
    while p < 1024 {
        if p == 1023 {
            t[p as usize] = true;
        } else {
            // Start just after an empty ring position, so arcs do not wrap around.
            let gap = (!p & 1023).trailing_zeros();
            let (mut arcs, mut in_arc, mut arc_touches) = (0, false, false);
            let mut k = 1;
            while k <= 10 {
                let j = (gap + k) % 10;
                if p >> j & 1 == 1 {
                    in_arc = true;
                    arc_touches |= touch >> j & 1 == 1;
                } else if in_arc {
                    arcs += arc_touches as u32;
                    in_arc = false;
                    arc_touches = false;
                }
                k += 1;
            }
            t[p as usize] = arcs <= 1;
        }
        p += 1;
    }
    t
}

static RING_SAFE: [[bool; 1024]; 2] = [ring_table(TOUCH_H), ring_table(TOUCH_V)];

/// The ring tables re-indexed by the bits read straight off the board: for a horizontal
/// domino, 4 bits of the row above (columns c-1..c+2), the cells left and right of it, and
/// 4 bits of the row below; for a vertical one, 3 bits above, left/right of each of its
/// cells, and 3 bits below.
static WINDOW_SAFE: [[bool; 1024]; 2] = {
    let mut out = [[false; 1024]; 2];
    let mut idx = 0usize;
    while idx < 1024 {
        // Horizontal: idx = top[0..4] | left << 4 | right << 5 | bottom[0..4] << 6.
        const FROM_H: [usize; 10] = [0, 1, 2, 3, 5, 9, 8, 7, 6, 4];
        // Vertical: idx = top[0..3] | (left0, right0) << 3 | (left1, right1) << 5 | bottom[0..3] << 7.
        const FROM_V: [usize; 10] = [0, 1, 2, 4, 6, 9, 8, 7, 5, 3];
        let (mut ph, mut pv, mut k) = (0, 0, 0);
        while k < 10 {
            ph |= (idx >> FROM_H[k] & 1) << k;
            pv |= (idx >> FROM_V[k] & 1) << k;
            k += 1;
        }
        out[0][idx] = RING_SAFE[0][ph];
        out[1][idx] = RING_SAFE[1][pv];
        idx += 1;
    }
    out
};

/// True when removing the domino at cell `i` (`vertical`: cells i, i+s; else i, i+1) from
/// the connected region `e` (an `h`×`w` box with row stride `s`) certainly leaves it
/// connected: a local test that spares the flood fill in the common case.
#[inline]
pub fn stays_connected<B: Bits>(e: B, i: u32, s: u32, h: u32, w: u32, vertical: bool) -> bool {
    let r = row_of(i, s);
    let c = i - r * s;
    if B::BITS == 64 {
        // Widen so that the cell up-left of the domino lands at bit 0 without overflow.
        let x = (e.to_u128() << (s + 1)) >> i;
        let row = |d: u32| (x >> (d * s)) as usize;
        let left = if c > 0 { 1 } else { 0 };
        if vertical {
            let right = if c + 1 < w { 1 } else { 0 };
            let cols = left | 2 | right << 2;
            let sides = |r: usize| (r & left) | (r >> 2 & right) << 1;
            let idx = (row(0) & cols) | sides(row(1)) << 3 | sides(row(2)) << 5 | (row(3) & cols) << 7;
            WINDOW_SAFE[1][idx]
        } else {
            let right = if c + 2 < w { 1 } else { 0 };
            let cols = left | 6 | right << 3;
            let mid = row(1);
            let idx = (row(0) & cols) | (mid & left) << 4 | (mid >> 3 & right) << 5 | (row(2) & cols) << 6;
            WINDOW_SAFE[0][idx]
        }
    } else {
        let r = r as i32;
        let ring = if vertical { &RING_V } else { &RING_H };
        let mut p = 0usize;
        for (k, &(dr, dc)) in ring.iter().enumerate() {
            let (rr, cc) = (r + dr, c as i32 + dc);
            if rr >= 0 && cc >= 0 && (rr as u32) < h && (cc as u32) < w && e.has(rr as u32 * s + cc as u32) {
                p |= 1 << k;
            }
        }
        RING_SAFE[vertical as usize][p]
    }
}

/// Removes redundant tufts: a tuft is an empty cell with exactly one empty neighbour; when a
/// cell has two or more tuft neighbours, all but one can go without changing the nimber
/// (the moves onto them lead to the same positions up to an isolated cell, and any other
/// move keeps the situation). Merging such shapes makes more regions congruent.
#[inline]
pub fn prune_tufts<B: Bits>(e: B, s: u32) -> B {
    let m = B::masks(s);
    // Neighbour indicators: west, east, north, south of each cell is empty.
    let (w, east, n, south) = ((e << 1) & m.not_first, (e >> 1) & m.not_last, e.up(s), e.down(s));
    let exactly_one = |a: B, b: B, c: B, d: B| (a ^ b ^ c ^ d) & !((a & b) | (c & d) | ((a ^ b) & (c ^ d)));
    let tufts = e & exactly_one(w, east, n, south);
    if tufts.is_empty() {
        return e;
    }
    let (tw, te, tn, ts) = ((tufts << 1) & m.not_first, (tufts >> 1) & m.not_last, tufts.up(s), tufts.down(s));
    let two_or_more = (tw & te) | (tn & ts) | ((tw | te) & (tn | ts));
    let mut hubs = e & two_or_more;
    let mut out = e;
    while !hubs.is_empty() {
        let hub = hubs.lowest_bit();
        hubs ^= hub;
        // The hub's tuft neighbours, west, east, north, south; keep the first.
        let around = (((hub >> 1) & m.not_last) | ((hub << 1) & m.not_first) | hub.down(s) | hub.up(s)) & tufts;
        out ^= around ^ around.lowest_bit();
    }
    out
}

/// Removes redundant tufts (see [`prune_tufts`]) and bridges. A bridge is a cell that is
/// not next to a tuft but all of whose neighbours are ("stars"), e.g. the middle of the
/// strip of five: a move onto it and one star isolates that star's tuft, which is what
/// the move onto the star and its tuft does in the set without the bridge; every other
/// move keeps it a bridge, a tuft beside another tuft, or isolated. So removing it does
/// not change the value (Beling's igsolve uses the same reduction).
#[inline]
pub fn simplify<B: Bits>(e: B, s: u32) -> B {
    let (pruned, bridges) = tufts_and_bridges(e, s);
    pruned & !bridges
}

/// `e` with redundant tufts pruned, and its bridges (see [`simplify`]).
#[inline]
fn tufts_and_bridges<B: Bits>(e: B, s: u32) -> (B, B) {
    let m = B::masks(s);
    let (w, east, n, south) = ((e << 1) & m.not_first, (e >> 1) & m.not_last, e.up(s), e.down(s));
    let exactly_one = |a: B, b: B, c: B, d: B| (a ^ b ^ c ^ d) & !((a & b) | (c & d) | ((a ^ b) & (c ^ d)));
    let tufts = e & exactly_one(w, east, n, south);
    if tufts.is_empty() {
        return (e, B::ZERO);
    }
    let next_to = |x: B| ((x << 1) & m.not_first) | ((x >> 1) & m.not_last) | x.up(s) | x.down(s);
    let others = e & !tufts & !next_to(tufts);
    (prune_tufts(e, s), others & !next_to(others))
}

/// The left cells of the horizontal pairs that can be treated as not adjacent: in a 2×2
/// block `a b / c d` whose corners `a` and `d` (or `b` and `c`) are walled off on their two
/// outer sides, the moves `a b` and `c d` leave the same position as `b d` and `a c` up to
/// where a one-cell tuft hangs, so they are redundant; and cutting the pairs `a b`, `c d`
/// changes no value (after any other move the block stays walled, or the cut leaves a tuft
/// beside a tuft). Cutting them can split a region in two: igsolve's "2×2 blocks".
#[inline]
pub fn walled_cuts<B: Bits>(e: B, s: u32) -> B {
    let m = B::masks(s);
    let (w, east, n, south) = ((e << 1) & m.not_first, (e >> 1) & m.not_last, e.up(s), e.down(s));
    // Corners: open on exactly the two sides facing into the block.
    let top_left = e & east & south & !w & !n;
    let bottom_right = e & w & n & !east & !south;
    let top_right = e & w & south & !east & !n;
    let bottom_left = e & east & n & !w & !south;
    // Blocks by their top-left cell.
    let blocks = (top_left & bottom_right.down(s + 1)) | ((top_right >> 1) & bottom_left.down(s));
    blocks | blocks.up(s)
}

/// Calls `f` with each part of the cells `e` (row stride `s`) that is played on its own:
/// the 4-connected components once redundant tufts and bridges are removed
/// ([`simplify`]) and walled 2×2 blocks cut ([`walled_cuts`]); parts that a cut separated
/// are simplified again. Parts are never empty.
///
/// `parent`, when known, is a connected set of cells holding `e` (the region a move was
/// played in) and whether a local test showed `e` connected. Then every part holds a cell
/// next to a cell of the parent that is not in the simplified `e`, or an end of a cut
/// pair; so a flood fill stops as soon as it has reached all such cells, and a connected
/// set with nothing removed or cut needs no fill at all.
#[inline]
pub fn for_each_part<B: Bits>(e: B, s: u32, parent: Option<(B, bool)>, f: &mut impl FnMut(B)) {
    let (pruned, bridges) = tufts_and_bridges(e, s);
    let c = pruned & !bridges;
    if c.is_empty() {
        return;
    }
    let cuts = walled_cuts(c, s);
    if cuts.is_empty() && bridges.is_empty() && parent.is_some_and(|(_, connected)| connected) {
        return f(c);
    }
    let mut targets = match parent {
        Some((p, _)) => c & (next_to(p & !c, s) | cuts | cuts << 1),
        None => c,
    };
    let mut rest = c;
    while !rest.is_empty() {
        let seed = if targets.is_empty() { rest.lowest_bit() } else { targets.lowest_bit() };
        let part = fill_to(seed, rest, s, cuts, targets);
        rest ^= part;
        targets &= rest;
        if cuts.is_empty() || part == c {
            f(part);
        } else {
            for_each_part(part, s, Some((part, true)), f);
        }
    }
}

/// The cells next to the cells `x` (row stride `s`).
#[inline]
fn next_to<B: Bits>(x: B, s: u32) -> B {
    let m = B::masks(s);
    ((x << 1) & m.not_first) | ((x >> 1) & m.not_last) | x.up(s) | x.down(s)
}

/// The component of `within` holding `seed` when the horizontal pairs starting at `cuts`
/// are not adjacent; or all of `within` as soon as the fill holds every cell of `targets`
/// (every component of `within` holds one of them).
#[inline]
fn fill_to<B: Bits>(seed: B, within: B, s: u32, cuts: B, targets: B) -> B {
    let m = B::masks(s);
    let (right, left) = (!cuts & m.not_last, !cuts);
    let mut c = seed & within;
    loop {
        if targets & !c == B::ZERO {
            return within;
        }
        let n = (c | ((c & right) << 1) | ((c >> 1) & left & m.not_last) | c.up(s) | c.down(s)) & within;
        if n == c {
            return c;
        }
        c = n;
    }
}

/// One step of 4-neighbour growth of `c` inside `within`.
#[inline]
fn grow<B: Bits>(c: B, within: B, s: u32) -> B {
    let m = B::masks(s);
    (c | ((c << 1) & m.not_first) | ((c >> 1) & m.not_last) | c.up(s) | c.down(s)) & within
}

/// The 4-connected component of `within` that contains the cells of `seed`.
#[inline]
pub fn component_of<B: Bits>(seed: B, within: B, s: u32) -> B {
    let mut c = seed & within;
    loop {
        let n = grow(c, within, s);
        if n == c {
            return c;
        }
        c = n;
    }
}

/// Calls `f` with each 4-connected component of `e` (row stride `s`), lowest first.
#[inline]
pub fn for_each_component<B: Bits>(mut e: B, s: u32, mut f: impl FnMut(B)) {
    while !e.is_empty() {
        let c = component_of(e.lowest_bit(), e, s);
        e ^= c;
        f(c);
    }
}

/// Copies an `h`×`w` block laid out with stride `from` into stride `to` (both ≥ `w`).
#[inline]
pub fn restride(x: u128, from: u32, h: u32, w: u32, to: u32) -> u128 {
    if from == to {
        return x;
    }
    let row = <u128 as Bits>::low_mask(w);
    let mut out = 0u128;
    for r in 0..h {
        out |= ((x >> (r * from)) & row) << (r * to);
    }
    out
}

/// The transpose of an `h`×`w` block (stride `from`) as a `w`×`h` block with stride `to`.
pub fn transpose(x: u128, from: u32, to: u32) -> u128 {
    let mut out = 0u128;
    let mut rest = x;
    while rest != 0 {
        let i = rest.trailing_zeros();
        rest &= rest - 1;
        let (r, c) = (i / from, i % from);
        out |= 1u128 << (c * to + r);
    }
    out
}

// ---- the 8×8 fast path -------------------------------------------------------------------

/// Mirror left-right an `_`×`w` block in stride 8.
#[inline]
fn flip_cols8(x: u64, w: u32) -> u64 {
    x.reverse_bits().swap_bytes() >> (8 - w)
}

/// Mirror top-bottom an `h`×`_` block in stride 8.
#[inline]
fn flip_rows8(x: u64, h: u32) -> u64 {
    x.swap_bytes() >> (8 * (8 - h))
}

/// Transpose a block in stride 8 about the main diagonal: (r, c) -> (c, r).
#[inline]
fn transpose8(mut x: u64) -> u64 {
    const K1: u64 = 0x5500_5500_5500_5500;
    const K2: u64 = 0x3333_0000_3333_0000;
    const K4: u64 = 0x0f0f_0f0f_0000_0000;
    let mut t = K4 & (x ^ (x << 28));
    x ^= t ^ (t >> 28);
    t = K2 & (x ^ (x << 14));
    x ^= t ^ (t >> 14);
    t = K1 & (x ^ (x << 7));
    x ^= t ^ (t >> 7);
    x
}

/// Columns occupied by a stride-8 word, as an 8-bit mask.
#[inline]
fn cols8(x: u64) -> u32 {
    let mut y = x | (x >> 32);
    y |= y >> 16;
    y |= y >> 8;
    (y & 0xff) as u32
}

/// Canonical form of a nonempty set of cells given in stride 8.
#[inline]
pub fn canonical8(x: u64) -> Region<u64> {
    let cols = cols8(x);
    let x = x >> ((x.trailing_zeros() / 8) * 8 + cols.trailing_zeros());
    let h = x.highest() / 8 + 1;
    let w = 32 - cols.leading_zeros() - cols.trailing_zeros();
    let fc = flip_cols8(x, w);
    let mut best = x.min(fc).min(flip_rows8(x, h)).min(flip_rows8(fc, h));
    let mut tall = false;
    if h > 1 || w > 1 {
        let t = transpose8(x);
        let tc = flip_cols8(t, h);
        let tb = t.min(tc).min(flip_rows8(t, w)).min(flip_rows8(tc, w));
        if tb < best {
            best = tb;
            tall = true;
        }
    }
    let (h, w) = if tall { (w, h) } else { (h, w) };
    Region { bits: best, stride: 8, h: h as u8, w: w as u8 }
}

/// The least image of a nonempty set of cells given in stride 8 among the images whose box
/// is no taller than wide (all eight when square), and that box's height and width: the
/// canonical form of the certificate's `Shape`. Its cells are numbered row-major with a
/// stride of the box's width; for boxes of at most 8 columns that numbering orders sets of
/// cells as stride 8 does (both order cells by row, then column), so the least image here
/// is the least there.
#[inline]
pub fn least_flat8(x: u64) -> (u64, u32, u32) {
    let cols = cols8(x);
    let x = x >> ((x.trailing_zeros() / 8) * 8 + cols.trailing_zeros());
    let h = x.highest() / 8 + 1;
    let w = 32 - cols.leading_zeros() - cols.trailing_zeros();
    let reflections = |x: u64, h: u32, w: u32| {
        let fc = flip_cols8(x, w);
        x.min(fc).min(flip_rows8(x, h)).min(flip_rows8(fc, h))
    };
    let mut best = u64::MAX;
    if h <= w {
        best = reflections(x, h, w);
    }
    if w <= h {
        best = best.min(reflections(transpose8(x), w, h));
    }
    (best, h.min(w), h.max(w))
}

// ---- the wide path -----------------------------------------------------------------------

/// Canonical form of an `h`×`w` block with stride `w` and `h ≤ w` (4 symmetries, or 8 when
/// square).
fn canonical_wide<B: Bits>(x: B, h: u32, w: u32) -> Region<B> {
    let rot = x.reversed() >> (B::BITS - h * w);
    let rows = flip_rows(x, h, w);
    let cols = rows.reversed() >> (B::BITS - h * w);
    let mut best = x.min(rot).min(rows).min(cols);
    if h == w {
        let t = B::from_u128(transpose(x.to_u128(), w, w));
        let trot = t.reversed() >> (B::BITS - h * w);
        let trows = flip_rows(t, h, w);
        let tcols = trows.reversed() >> (B::BITS - h * w);
        best = best.min(t).min(trot).min(trows).min(tcols);
    }
    Region { bits: best, stride: w as u8, h: h as u8, w: w as u8 }
}

/// Mirror top-bottom an `h`×`w` block with stride `w`.
#[inline]
fn flip_rows<B: Bits>(x: B, h: u32, w: u32) -> B {
    let row = B::low_mask(w);
    let mut out = B::ZERO;
    for r in 0..h {
        out |= ((x >> (r * w)) & row) << ((h - 1 - r) * w);
    }
    out
}

/// The bounding box of the nonempty cells `c` (row stride `s`): the cells moved to the
/// box's corner (still in stride `s`), and the box's height and width.
#[inline]
pub fn bounding_box<B: Bits>(c: B, s: u32) -> (u128, u32, u32) {
    let lo_row = row_of(c.lowest(), s);
    let hi_row = row_of(c.highest(), s);
    let row = B::low_mask(s);
    let mut occ = B::ZERO;
    for r in lo_row..=hi_row {
        occ |= (c >> (r * s)) & row;
    }
    let lo_col = occ.lowest();
    let (h, w) = (hi_row - lo_row + 1, occ.highest() - lo_col + 1);
    ((c >> (lo_row * s + lo_col)).to_u128(), h, w)
}

/// Canonical form of a nonempty set of cells `c` laid out with row stride `s` (any word).
#[inline]
pub fn normalize<B: Bits>(c: B, s: u32) -> AnyRegion {
    if s == 8 && B::BITS == 64 {
        return AnyRegion::Narrow(canonical8(c.to_u128() as u64));
    }
    let (t, h, w) = bounding_box(c, s);
    if h <= 8 && w <= 8 {
        return AnyRegion::Narrow(canonical8(restride(t, s, h, w, 8) as u64));
    }
    let (t, h, w) = if h > w { (transpose(t, s, h), w, h) } else { (restride(t, s, h, w, w), h, w) };
    // A 1×64 strip goes to the wide path: rows of 64 cells would make shifts by the stride
    // overflow a 64-bit word in the split test.
    if h * w <= 64 && w < 64 {
        AnyRegion::Narrow(canonical_wide(t as u64, h, w))
    } else {
        AnyRegion::Wide(canonical_wide(t, h, w))
    }
}

/// Canonical form of an arbitrary (possibly disconnected) nonempty cell set given as an
/// `h`×`w` block with stride `w`; used to key databases and tests, not by the search.
pub fn normalize_block(x: u128, w: u32) -> AnyRegion {
    if w < 64 && x.count_ones() > 0 {
        let h = (127 - x.leading_zeros()) / w + 1;
        if h * w <= 64 {
            return normalize::<u64>(x as u64, w);
        }
    }
    normalize::<u128>(x, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// All 8 images of an `h`×`w` block (stride `w`) as dense `(bits, h, w)` triples.
    fn images(x: u128, h: u32, w: u32) -> Vec<(u128, u32, u32)> {
        let mut out = Vec::new();
        for t in 0..8 {
            let (nh, nw) = if t >= 4 { (w, h) } else { (h, w) };
            let mut y = 0u128;
            for i in 0..h * w {
                if x >> i & 1 == 1 {
                    let (mut r, mut c) = (i / w, i % w);
                    if t >= 4 {
                        std::mem::swap(&mut r, &mut c);
                    }
                    if t & 1 == 1 {
                        c = nw - 1 - c;
                    }
                    if t & 2 == 2 {
                        r = nh - 1 - r;
                    }
                    y |= 1 << (r * nw + c);
                }
            }
            out.push((y, nh, nw));
        }
        out
    }

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *seed >> 11
    }

    #[test]
    fn congruent_sets_share_one_canonical_form() {
        let mut seed = 7;
        for (h, w) in [(1, 5), (2, 3), (3, 3), (4, 7), (8, 8), (3, 12), (5, 12), (4, 16), (9, 9), (6, 20), (11, 11)] {
            for _ in 0..200 {
                let mut x = 0u128;
                for i in 0..h * w {
                    if !lcg(&mut seed).is_multiple_of(3) {
                        x |= 1 << i;
                    }
                }
                if x == 0 {
                    continue;
                }
                let forms: Vec<AnyRegion> =
                    images(x, h, w).into_iter().map(|(y, _, nw)| normalize_block(y, nw)).collect();
                assert!(forms.iter().all(|f| *f == forms[0]), "{h}x{w} {x:b}: {forms:?}");
                assert_eq!(forms[0].cells(), x.count_ones());
                // The dense form re-normalises to itself.
                let (_, dw) = forms[0].dims();
                assert_eq!(normalize_block(forms[0].dense(), dw), forms[0]);
            }
        }
    }

    #[test]
    fn different_shapes_get_different_forms() {
        // An L tromino and a straight tromino.
        assert_ne!(normalize_block(0b111, 3), normalize_block(0b1011, 2));
        // A 2x2 square is not a 1x4 line.
        assert_ne!(normalize_block(0b1111, 2), normalize_block(0b1111, 4));
    }

    #[test]
    fn components_are_found() {
        // 3x3 with the middle column filled: two components.
        let e: u64 = 0b101_101_101;
        let mut comps = Vec::new();
        for_each_component(e, 3, |c| comps.push(c));
        assert_eq!(comps, vec![0b001_001_001, 0b100_100_100]);
        // Row wrap must not connect the end of one row with the start of the next.
        let e: u64 = 0b001_100;
        let mut n = 0;
        for_each_component(e, 3, |_| n += 1);
        assert_eq!(n, 2);
    }

    #[test]
    fn the_local_ring_test_never_misses_a_split() {
        // Every subset of a 4x5 box, every domino: when the test says "stays connected",
        // the flood fill must agree (given a connected region).
        let (h, w) = (4u32, 5u32);
        let mut skipped = 0;
        for e in 1u64..1 << 20 {
            let mut n = 0;
            for_each_component(e, w, |_| n += 1);
            if n != 1 {
                continue;
            }
            let (hor, ver) = dominoes(e, w);
            for (starts, step, vertical) in [(hor, 1, false), (ver, w, true)] {
                let mut m = starts;
                while m != 0 {
                    let i = m.trailing_zeros();
                    m &= m - 1;
                    let wide = stays_connected(e as u128, i, w, h, w, vertical);
                    assert_eq!(wide, stays_connected(e, i, w, h, w, vertical), "{e:b} at {i}");
                    if wide {
                        skipped += 1;
                        let rest = e & !(1 << i | 1 << (i + step));
                        let mut k = 0;
                        for_each_component(rest, w, |_| k += 1);
                        assert!(k <= 1, "{e:b} minus domino at {i} splits");
                    }
                }
            }
        }
        assert!(skipped > 1000);
    }

    #[test]
    fn tufts_are_pruned_only_in_pairs() {
        // A plus: the centre has four tuft neighbours; one stays.
        let plus: u64 = 0b010_111_010;
        assert_eq!(prune_tufts(plus, 3).count_ones(), 2);
        // A 2x2 square has no tufts; an L tromino's corner has two tufts: one goes.
        assert_eq!(prune_tufts(0b11_11u64, 2), 0b1111);
        assert_eq!(prune_tufts(0b01_11u64, 2).count_ones(), 2);
        // A straight line of 4: the tufts hang on different cells.
        assert_eq!(prune_tufts(0b1111u64, 4), 0b1111);
        // Row wrap does not create neighbours.
        assert_eq!(prune_tufts(0b100_001u64, 3), 0b100_001);
    }

    #[test]
    fn half_turn_pairing_matches_the_definition() {
        // 2x2: paired. 3x3 full: centre fixed. 1x2: the domino maps onto itself.
        let r = |x: u128, w: u32| normalize_block(x, w).half_turn_paired();
        assert!(r(0b1111, 2));
        assert!(!r(0b111_111_111, 3));
        assert!(!r(0b11, 2));
        assert!(r(0xff, 4)); // 2x4
        assert!(!r(0b111_111, 3)); // 2x3: centre column cells adjacent to their images
        assert!(r((1u128 << 100) - 1, 10)); // 10x10 on the wide path
    }
}
