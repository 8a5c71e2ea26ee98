//! Bitboard words: the `Bits` trait over `u64` (the fast path, ≤ 64 cells) and `u128`
//! (up to 128 cells), so the search is written once and instantiated twice.

use std::fmt::Debug;
use std::hash::Hash;
use std::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, BitXor, BitXorAssign, Not, Shl, Shr};

/// Keeps [`Bits`] to the integers below: tables hold words in memory that starts as all
/// zero bytes, which only plain integers are sure to accept.
mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for u128 {}
}

/// A fixed-width bit set used as a bitboard (bit set = empty cell). Implemented by `u64`
/// and `u128` only (sealed).
pub trait Bits:
    sealed::Sealed
    + Copy
    + Eq
    + Ord
    + Hash
    + Debug
    + Default
    + Send
    + Sync
    + 'static
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
    + BitAndAssign
    + BitOrAssign
    + BitXorAssign
{
    /// Number of bits in the word.
    const BITS: u32;
    /// The empty set.
    const ZERO: Self;
    /// The set holding only bit 0.
    const ONE: Self;

    /// Number of set bits.
    fn count(self) -> u32;
    /// Index of the lowest set bit (`BITS` when empty).
    fn lowest(self) -> u32;
    /// Index of the highest set bit; the word must not be empty.
    fn highest(self) -> u32;
    /// The bit order reversed (bit i moves to `BITS - 1 - i`).
    fn reversed(self) -> Self;
    /// The lowest set bit alone (zero when empty).
    fn lowest_bit(self) -> Self;
    /// Bits `0..n` set (`n` may equal `BITS`).
    fn low_mask(n: u32) -> Self;
    /// Widens to `u128`.
    fn to_u128(self) -> u128;
    /// Narrows from `u128`, dropping the bits that do not fit.
    fn from_u128(v: u128) -> Self;
    /// A 64-bit mix of the word, for hashing.
    fn mix(self) -> u64;
    /// The column masks for rows of `stride` cells (cached).
    fn masks(stride: u32) -> StrideMasks<Self>;

    /// `self << n`, or empty when `n` is the word size or more (a row stride can be 128).
    #[inline]
    fn up(self, n: u32) -> Self {
        if n < Self::BITS {
            self << n
        } else {
            Self::ZERO
        }
    }

    /// `self >> n`, or empty when `n` is the word size or more.
    #[inline]
    fn down(self, n: u32) -> Self {
        if n < Self::BITS {
            self >> n
        } else {
            Self::ZERO
        }
    }

    /// True when no bit is set.
    #[inline]
    fn is_empty(self) -> bool {
        self == Self::ZERO
    }
    /// True when bit `i` is set.
    #[inline]
    fn has(self, i: u32) -> bool {
        (self >> i) & Self::ONE != Self::ZERO
    }
    /// The set holding only bit `i`.
    #[inline]
    fn bit(i: u32) -> Self {
        Self::ONE << i
    }
}

macro_rules! impl_bits {
    ($t:ty, $masks:ident) => {
        impl Bits for $t {
            const BITS: u32 = <$t>::BITS;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn count(self) -> u32 {
                self.count_ones()
            }
            #[inline]
            fn lowest(self) -> u32 {
                self.trailing_zeros()
            }
            #[inline]
            fn highest(self) -> u32 {
                <$t>::BITS - 1 - self.leading_zeros()
            }
            #[inline]
            fn reversed(self) -> Self {
                self.reverse_bits()
            }
            #[inline]
            fn lowest_bit(self) -> Self {
                self & self.wrapping_neg()
            }
            #[inline]
            fn low_mask(n: u32) -> Self {
                if n >= <$t>::BITS {
                    <$t>::MAX
                } else {
                    ((1 as $t) << n) - 1
                }
            }
            #[inline]
            fn to_u128(self) -> u128 {
                self as u128
            }
            #[inline]
            fn from_u128(v: u128) -> Self {
                v as $t
            }
            #[inline]
            fn mix(self) -> u64 {
                let v = self.to_u128();
                let x = (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
                let x = (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                x ^ (x >> 29)
            }
            #[inline]
            fn masks(stride: u32) -> StrideMasks<Self> {
                $masks[stride as usize]
            }
        }
    };
}

impl_bits!(u64, MASKS64);
impl_bits!(u128, MASKS128);

/// Bits of column `col` in every row of a word laid out with `stride` cells per row.
pub fn col_mask<B: Bits>(stride: u32, col: u32) -> B {
    let mut m = B::ZERO;
    let mut i = col;
    while i < B::BITS {
        m |= B::bit(i);
        i += stride;
    }
    m
}

/// Column masks of one row stride, computed once per word type and stride.
#[derive(Clone, Copy, Debug)]
pub struct StrideMasks<B> {
    /// Cells not in the last column: a horizontal pair may start there.
    pub not_last: B,
    /// Cells not in the first column: a left-to-right shift may land there.
    pub not_first: B,
}

macro_rules! const_masks {
    ($name:ident, $t:ty) => {
        /// Column masks for every stride, computed at compile time.
        static $name: [StrideMasks<$t>; <$t>::BITS as usize + 1] = {
            let mut out = [StrideMasks { not_last: 0, not_first: 0 }; <$t>::BITS as usize + 1];
            let mut s = 1;
            while s <= <$t>::BITS {
                let (mut first, mut last) = (0 as $t, 0 as $t);
                let mut i = 0;
                while i < <$t>::BITS {
                    first |= 1 << i;
                    if i + s - 1 < <$t>::BITS {
                        last |= 1 << (i + s - 1);
                    }
                    i += s;
                }
                out[s as usize] = StrideMasks { not_last: !last, not_first: !first };
                s += 1;
            }
            out
        };
    };
}

const_masks!(MASKS64, u64);
const_masks!(MASKS128, u128);

/// Row of cell `i` in rows of `s` cells, for `i < 256`, without a division instruction.
#[inline]
pub fn row_of(i: u32, s: u32) -> u32 {
    (i * RECIPROCAL[s as usize]) >> 24
}

/// `ceil(2^24 / s)`: multiplying by it and shifting divides exactly for `i < 256`.
static RECIPROCAL: [u32; 129] = {
    let mut out = [0u32; 129];
    let mut s = 1;
    while s <= 128 {
        out[s] = (1u32 << 24).div_ceil(s as u32);
        s += 1;
    }
    out
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_bit_queries() {
        assert_eq!(col_mask::<u64>(8, 0), 0x0101_0101_0101_0101);
        assert_eq!(u64::masks(8).not_last, 0x7f7f_7f7f_7f7f_7f7f);
        assert_eq!(u64::masks(8).not_first, 0xfefe_fefe_fefe_fefe);
        assert_eq!(<u64 as Bits>::low_mask(64), u64::MAX);
        assert_eq!(<u128 as Bits>::low_mask(3), 7);
        assert_eq!(u128::masks(3).not_last & 0b111_111, 0b011_011);
        for s in 1..=64u32 {
            assert_eq!(u64::masks(s).not_first, !col_mask::<u64>(s, 0));
            assert_eq!(u64::masks(s).not_last, !col_mask::<u64>(s, s - 1));
        }
        for s in 1..=128u32 {
            assert_eq!(u128::masks(s).not_last, !col_mask::<u128>(s, s - 1));
            for i in 0..256 {
                assert_eq!(row_of(i, s), i / s, "{i} / {s}");
            }
        }
        assert_eq!(0b1010u64.lowest(), 1);
        assert_eq!(0b1010u64.highest(), 3);
        assert_eq!(0b1010u128.lowest_bit(), 2);
        assert!(0b1010u64.has(3) && !0b1010u64.has(2));
        assert_eq!(1u64.reversed(), 1 << 63);
    }
}
