//! Facts about the nimber of one region, as the engine learns them and every part of the
//! system passes them on (table, wire, event log, caches): the exact value, or values the
//! region is known not to have and an upper bound. And the outcome of a position.

use std::fmt;
use std::str::FromStr;

/// What is known about the nimber `g` of one region.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Facts {
    /// Bit `j` set: `g ≠ j` (for `j < 32`).
    pub excluded: u32,
    /// `g ≤ upper`.
    pub upper: u8,
}

impl Facts {
    /// Nothing known.
    pub const UNKNOWN: Facts = Facts { excluded: 0, upper: u8::MAX };

    /// Exactly `v` (values of 32 and above are held as an upper bound with every smaller
    /// value excluded, which the representation cannot express; they are kept as unknown).
    pub fn exact(v: u8) -> Facts {
        if v >= 32 {
            return Facts::UNKNOWN;
        }
        Facts { excluded: low_bits(v as u32), upper: v }
    }

    /// Only `g ≠ k`.
    pub fn excluding(k: u8) -> Facts {
        let mut f = Facts::UNKNOWN;
        f.exclude(k);
        f
    }

    /// True when neither set of facts rules out the other (they may be about one region).
    pub fn agrees_with(self, other: Facts) -> bool {
        !self.merge(other).is_contradictory()
    }

    /// `g ≥ floor()`: the number of consecutive excluded values from 0.
    #[inline]
    pub fn floor(&self) -> u8 {
        (self.excluded.trailing_ones() as u8).min(self.upper)
    }

    /// The value, when it is known exactly.
    #[inline]
    pub fn value(&self) -> Option<u8> {
        (self.floor() == self.upper).then_some(self.upper)
    }

    /// True when no value is left: every value up to the upper bound is excluded (facts
    /// that no region has; only a bug or damaged data can produce them).
    #[inline]
    pub fn is_contradictory(&self) -> bool {
        self.excluded.trailing_ones() > u32::from(self.upper)
    }

    /// The values still possible, as bits (bit v: value v), for values below 64.
    #[inline]
    pub fn possible(&self) -> u64 {
        let upto = if self.upper >= 63 { u64::MAX } else { (2u64 << self.upper) - 1 };
        upto & !(self.excluded as u64)
    }

    /// True when `g = k` is ruled out.
    #[inline]
    pub fn rules_out(&self, k: u8) -> bool {
        k > self.upper || (k < 32 && self.excluded >> k & 1 == 1)
    }

    /// Records `g ≠ k`.
    #[inline]
    pub fn exclude(&mut self, k: u8) {
        if k < 32 {
            self.excluded |= 1 << k;
        }
        if k == self.upper {
            self.upper = self.upper.saturating_sub(1);
        }
    }

    /// A 5-byte form for caches on disk: `excluded` (little-endian) and `upper`.
    pub fn to_bytes(self) -> [u8; 5] {
        let e = self.excluded.to_le_bytes();
        [e[0], e[1], e[2], e[3], self.upper]
    }

    /// Reads [`Facts::to_bytes`]; `None` unless `v` is 5 bytes.
    pub fn from_bytes(v: &[u8]) -> Option<Facts> {
        let v: &[u8; 5] = v.try_into().ok()?;
        Some(Facts { excluded: u32::from_le_bytes([v[0], v[1], v[2], v[3]]), upper: v[4] })
    }

    /// Combines two sets of facts about the same region.
    #[inline]
    pub fn merge(self, other: Facts) -> Facts {
        Facts { excluded: self.excluded | other.excluded, upper: self.upper.min(other.upper) }
    }

    /// What these facts about `g` say of `g ^ x`: the value of an option made of this region
    /// beside others whose values XOR to `x`. Exact when `g` is; a bound only when the
    /// possible values are all below 32 (else only the exclusions carry over).
    pub fn xor(self, x: u8) -> Facts {
        if self.upper < 32 && x < 32 {
            let shifted = (0..=self.upper).filter(|&v| !self.rules_out(v)).fold(0u32, |m, v| m | 1 << (v ^ x));
            if shifted == 0 {
                return Facts { excluded: u32::MAX, upper: 0 };
            }
            let upper = (31 - shifted.leading_zeros()) as u8;
            return Facts { excluded: !shifted & low_bits(upper as u32), upper };
        }
        let excluded = (0..32u8).filter(|&j| self.rules_out(j ^ x)).fold(0u32, |m, j| m | 1 << j);
        Facts { excluded, upper: u8::MAX }
    }
}

#[inline]
fn low_bits(n: u32) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// Who wins a position with perfect play.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The player to move wins (the nimber is not 0).
    First,
    /// The player to move loses (the nimber is 0).
    Second,
}

impl Outcome {
    /// The outcome of a position whose player to move wins when `first_player_wins`.
    pub fn of(first_player_wins: bool) -> Outcome {
        if first_player_wins {
            Outcome::First
        } else {
            Outcome::Second
        }
    }

    /// The outcome of a position of nimber `n`.
    pub fn of_nimber(n: u8) -> Outcome {
        Outcome::of(n != 0)
    }

    /// `"first"` or `"second"`: the word in JSON output, logs and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::First => "first",
            Outcome::Second => "second",
        }
    }

    /// `"first player wins"` or `"second player wins"`.
    pub fn describe(self) -> &'static str {
        match self {
            Outcome::First => "first player wins",
            Outcome::Second => "second player wins",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An outcome word other than `first` and `second`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outcome {0:?} is neither \"first\" nor \"second\"")]
pub struct BadOutcome(pub String);

impl FromStr for Outcome {
    type Err = BadOutcome;
    fn from_str(s: &str) -> Result<Outcome, BadOutcome> {
        match s {
            "first" => Ok(Outcome::First),
            "second" => Ok(Outcome::Second),
            _ => Err(BadOutcome(s.to_string())),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
        let word = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        word.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xor_keeps_every_possible_value_and_nothing_more_when_bounded() {
        let possible = |f: Facts| (0..=u8::MAX).filter(move |&v| !f.rules_out(v));
        for upper in 0..40u8 {
            for excluded in [0u32, 0b1, 0b101, 0b1011_0110, 0x00ff_00ff, 0x7fff_fffe, u32::MAX >> 3] {
                let f = Facts { excluded, upper };
                for x in 0..40u8 {
                    let g = f.xor(x);
                    let mut want: Vec<u8> = possible(f).map(|v| v ^ x).collect();
                    want.sort();
                    if upper < 32 && x < 32 {
                        assert_eq!(possible(g).collect::<Vec<_>>(), want, "{f:?} ^ {x} gave {g:?}");
                    } else {
                        assert!(want.iter().all(|&v| !g.rules_out(v)), "{f:?} ^ {x} gave {g:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn contradictory_facts_are_recognised() {
        assert!(!Facts::UNKNOWN.is_contradictory());
        assert!(!Facts::exact(3).is_contradictory());
        assert!(!Facts { excluded: 0b011, upper: 2 }.is_contradictory());
        assert!(Facts { excluded: 0b111, upper: 2 }.is_contradictory());
        assert!(Facts { excluded: 0b1, upper: 0 }.is_contradictory());
    }

    #[test]
    fn bounds_track_exclusions_and_exact_values() {
        let b = Facts { excluded: 0x8000_0005, upper: 40 };
        assert_eq!(Facts::from_bytes(&b.to_bytes()), Some(b));
        assert_eq!(Facts::from_bytes(&[1, 2, 3]), None);
        let mut b = Facts::UNKNOWN;
        assert_eq!(b.value(), None);
        b.exclude(0);
        b.exclude(2);
        assert_eq!(b.floor(), 1);
        assert!(b.rules_out(2) && !b.rules_out(1));
        let c = b.merge(Facts { excluded: 0, upper: 1 });
        assert_eq!(c.value(), Some(1));
        assert_eq!(Facts::exact(3).value(), Some(3));
        assert!(Facts::exact(3).rules_out(4) && Facts::exact(3).rules_out(0));
        assert_eq!(Facts::exact(0).value(), Some(0));
    }

    #[test]
    fn outcomes_read_back_and_refuse_other_words() {
        for o in [Outcome::First, Outcome::Second] {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
        }
        assert_eq!(Outcome::of_nimber(0), Outcome::Second);
        assert_eq!(Outcome::of_nimber(3), Outcome::First);
        assert!("First".parse::<Outcome>().is_err());
        assert_eq!(Outcome::First.to_string(), "first");
    }
}
