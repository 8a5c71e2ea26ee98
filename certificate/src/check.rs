//! The checker: verifies a certificate by the rules of the game alone ([`crate::rules`]).
//!
//! A fact "R has nimber v" holds when (by induction on the number of cells, every fact a
//! check uses being about a smaller region):
//! - every option of R (R less one domino, split into regions) has a value other than v.
//!   The option's regions have known values — a fact, or computed by the mex rule when a
//!   region has at most `small` cells — except at most one, H; with x the XOR of the known
//!   ones, the option's value is not v when x ≠ v (all known), or, with H unknown, when
//!   H + *(v ^ x) has a move into a loss: the next hint names a move of H after which
//!   every region left has a known value and they XOR to v ^ x;
//! - every value below v is the value of some option whose regions all have known values.
//!
//! The root's regions must all have known values that XOR to the claimed nimber; a claim
//! that the first player wins may instead leave one region H without a fact, with a hint
//! naming a move of H into a loss for the whole position.

use crate::format::{Certificate, Claim, FormatError};
use crate::rules::{components, Shape, SmallValues};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a certificate proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The position (`RxC` or rows of `.` and `#`).
    pub position: String,
    /// What was proved about it.
    pub claim: Claim,
    /// Facts verified.
    pub facts: u64,
    /// Small regions whose values the checker computed itself.
    pub small_regions: u64,
}

/// Why a certificate is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The file is not a readable certificate.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A fact is not shown true by the others.
    #[error("fact {index} ({region} = *{value}): {why}")]
    Fact {
        /// Its number in the file, from 0.
        index: u64,
        /// The region, `HxW:cells`.
        region: String,
        /// The value it claims.
        value: u8,
        /// What fails.
        why: String,
    },
    /// The claim about the position is not shown by the facts.
    #[error("the position {position}: {why}")]
    Root {
        /// The position.
        position: String,
        /// What fails.
        why: String,
    },
}

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

/// Checks the bytes of a certificate file on `threads` threads.
pub fn check(bytes: &[u8], threads: usize) -> Result<Checked, Rejection> {
    let cert = Certificate::from_bytes(bytes)?;
    check_certificate(&cert, threads)
}

/// Checks a certificate already read.
pub fn check_certificate(cert: &Certificate, threads: usize) -> Result<Checked, Rejection> {
    let known: HashMap<Shape, u8, ShapeHash> = cert.facts.iter().map(|f| (f.shape, f.value)).collect();
    let threads = threads.clamp(1, cert.facts.len().max(1));
    // The index of the first fact refused so far: a thread stops at facts past it, but
    // checks every fact before it, so the fact named is the first refused in the file
    // whatever the threads' timing.
    let first_refused = AtomicU64::new(u64::MAX);
    let results: Vec<(Option<Rejection>, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (known, first_refused) = (&known, &first_refused);
                s.spawn(move || {
                    let mut v = Values { known, small: cert.small, memo: SmallValues::new() };
                    for i in (t..cert.facts.len()).step_by(threads) {
                        if i as u64 > first_refused.load(Ordering::Relaxed) {
                            break;
                        }
                        if let Err(r) = v.fact(cert, i) {
                            first_refused.fetch_min(i as u64, Ordering::Relaxed);
                            return (Some(r), v.memo.len() as u64);
                        }
                    }
                    (None, v.memo.len() as u64)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a checking thread panicked")).collect()
    });
    // Of the facts refused, name the first in the file.
    let first = results.iter().filter_map(|(r, _)| r.clone()).min_by_key(|r| {
        if let Rejection::Fact { index, .. } = r {
            *index
        } else {
            u64::MAX
        }
    });
    if let Some(r) = first {
        return Err(r);
    }
    let mut v = Values { known: &known, small: cert.small, memo: SmallValues::new() };
    v.root(cert)?;
    let small_regions = results.iter().map(|r| r.1).sum::<u64>() + v.memo.len() as u64;
    Ok(Checked { position: cert.position(), claim: cert.claim, facts: cert.facts.len() as u64, small_regions })
}

/// Known values: the certificate's facts and small regions by the mex rule.
struct Values<'a> {
    known: &'a HashMap<Shape, u8, ShapeHash>,
    small: u32,
    memo: SmallValues,
}

/// The regions left by a move (or the root's regions): the XOR of those with known values,
/// and the one without, if any.
enum Split {
    Known(u8),
    OneUnknown(u8, Shape),
}

impl Values<'_> {
    fn value(&mut self, s: &Shape) -> Option<u8> {
        if let Some(&v) = self.known.get(s) {
            return Some(v);
        }
        (s.size() <= self.small).then(|| self.memo.value(s))
    }

    /// The values of `regions`: all known, or all but one; else the two without a value.
    fn split(&mut self, regions: &[Shape]) -> Result<Split, (Shape, Shape)> {
        let mut x = 0;
        let mut unknown = None;
        for r in regions {
            match self.value(r) {
                Some(v) => x ^= v,
                None => match unknown {
                    None => unknown = Some(*r),
                    Some(u) => return Err((u, *r)),
                },
            }
        }
        Ok(match unknown {
            None => Split::Known(x),
            Some(u) => Split::OneUnknown(x, u),
        })
    }

    /// Checks that move `hint` of `h` leaves regions of known values XORing to `target`.
    fn reply(&mut self, h: &Shape, hint: u32, target: u8) -> Result<(), String> {
        let moves = h.moves();
        let Some(&m) = moves.get(hint as usize) else {
            return Err(format!("hint {hint} names no move of {} ({} moves)", h.name(), moves.len()));
        };
        let mut x = 0;
        for r in h.after(m) {
            match self.value(&r) {
                Some(v) => x ^= v,
                None => return Err(format!("move {hint} of {} leaves {}, which has no fact", h.name(), r.name())),
            }
        }
        if x != target {
            return Err(format!("move {hint} of {} leaves *{x}, not *{target}", h.name()));
        }
        Ok(())
    }

    fn fact(&mut self, cert: &Certificate, i: usize) -> Result<(), Rejection> {
        let f = &cert.facts[i];
        let refuse = |why: String| Rejection::Fact { index: i as u64, region: f.shape.name(), value: f.value, why };
        let mut hints = cert.hints[f.hints.clone()].iter();
        let mut shown = 0u128;
        for (k, m) in f.shape.moves().into_iter().enumerate() {
            let regions = f.shape.after(m);
            match self.split(&regions) {
                Ok(Split::Known(x)) if x == f.value => {
                    return Err(refuse(format!("option {k} has value *{x}: the region's value is not *{}", f.value)));
                }
                Ok(Split::Known(x)) => shown |= 1 << x,
                Ok(Split::OneUnknown(x, h)) => {
                    let Some(&hint) = hints.next() else {
                        return Err(refuse(format!(
                            "option {k} leaves {} without a fact, and no hint is left",
                            h.name()
                        )));
                    };
                    self.reply(&h, hint, f.value ^ x).map_err(|e| refuse(format!("option {k}: {e}")))?;
                }
                Err((a, b)) => {
                    return Err(refuse(format!("option {k} leaves {} and {} without facts", a.name(), b.name())));
                }
            }
        }
        if hints.next().is_some() {
            return Err(refuse("more hints than options that need one".into()));
        }
        if let Some(j) = (0..f.value).find(|&j| shown >> j & 1 == 0) {
            return Err(refuse(format!("no option is shown to have value *{j}")));
        }
        Ok(())
    }

    fn root(&mut self, cert: &Certificate) -> Result<(), Rejection> {
        let refuse = |why: String| Rejection::Root { position: cert.position(), why };
        let mut regions = Vec::new();
        components(cert.rows, cert.cols, cert.empty, |c| regions.push(Shape::of(cert.rows, cert.cols, c)));
        let mut hints = cert.hints[cert.root_hints.clone()].iter();
        let split =
            self.split(&regions).map_err(|(a, b)| refuse(format!("{} and {} have no facts", a.name(), b.name())))?;
        match (cert.claim, split) {
            (Claim::Nimber(n), Split::Known(x)) if x != n => {
                return Err(refuse(format!("its regions add up to *{x}, not *{n}")));
            }
            (Claim::Nimber(_), Split::Known(_)) => {}
            (Claim::Nimber(_), Split::OneUnknown(_, h)) => {
                return Err(refuse(format!("{} has no fact", h.name())));
            }
            (Claim::FirstPlayerWins, Split::Known(0)) => {
                return Err(refuse("its regions add up to *0: the player to move loses".into()));
            }
            (Claim::FirstPlayerWins, Split::Known(_)) => {}
            (Claim::FirstPlayerWins, Split::OneUnknown(x, h)) => {
                let Some(&hint) = hints.next() else {
                    return Err(refuse(format!("{} has no fact, and no hint names a winning move", h.name())));
                };
                self.reply(&h, hint, x).map_err(|e| refuse(format!("the winning move: {e}")))?;
            }
        }
        if hints.next().is_some() {
            return Err(refuse("more hints than the root needs".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Fact;

    fn rect(h: u32, w: u32) -> Shape {
        Shape::of(h, w, (1u128 << (h * w)) - 1)
    }

    /// A 2×6 board (*0 ... by the checker's own mex with small = 12) certified by one fact
    /// checked against small regions.
    #[test]
    fn small_boards_need_no_facts() {
        let mut memo = SmallValues::new();
        let v = memo.value(&rect(2, 6));
        let cert = Certificate {
            rows: 2,
            cols: 6,
            empty: 0xfff,
            claim: Claim::Nimber(v),
            small: 12,
            root_hints: 0..0,
            facts: vec![],
            hints: vec![],
        };
        assert_eq!(check_certificate(&cert, 1).unwrap().facts, 0);
        let wrong = Certificate { claim: Claim::Nimber(v + 1), ..cert.clone() };
        assert!(matches!(check_certificate(&wrong, 1), Err(Rejection::Root { .. })));
        // With small = 4, the 12-cell region needs a fact.
        let bare = Certificate { small: 4, ..cert };
        assert!(matches!(check_certificate(&bare, 2), Err(Rejection::Root { .. })));
    }

    #[test]
    fn a_fact_is_checked_against_its_options() {
        // 1×8 (Dawson's Kayles: *1) with small = 6: its options are 1×6 + nothing, 1×5 +
        // 1×1, ..., all small, so it needs no hint.
        let mut memo = SmallValues::new();
        let v = memo.value(&rect(1, 8));
        let fact = |value| Fact { shape: rect(1, 8), value, hints: 0..0 };
        let cert = |value| Certificate {
            rows: 1,
            cols: 8,
            empty: 0xff,
            claim: Claim::Nimber(value),
            small: 6,
            root_hints: 0..0,
            facts: vec![fact(value)],
            hints: vec![],
        };
        assert!(check_certificate(&cert(v), 1).is_ok());
        for wrong in (0..4).filter(|&w| w != v) {
            let r = check_certificate(&cert(wrong), 1);
            assert!(matches!(r, Err(Rejection::Fact { index: 0, .. })), "*{wrong}: {r:?}");
        }
    }
}
