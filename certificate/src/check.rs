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
use crate::rules::{components, Shape, ShapeHash, SmallValues};
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
                    let mut memo = SmallValues::new();
                    let mut v = Values { known, small: cert.small, memo: &mut memo };
                    for i in (t..cert.facts.len()).step_by(threads) {
                        if i as u64 > first_refused.load(Ordering::Relaxed) {
                            break;
                        }
                        let f = &cert.facts[i];
                        let mut hints = InOrder(cert.hints[f.hints.clone()].iter());
                        if let Err(why) = v.fact(&f.shape, f.value, &mut hints) {
                            first_refused.fetch_min(i as u64, Ordering::Relaxed);
                            let r = Rejection::Fact { index: i as u64, region: f.shape.name(), value: f.value, why };
                            return (Some(r), memo.len() as u64);
                        }
                    }
                    (None, memo.len() as u64)
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
    let mut memo = SmallValues::new();
    Values { known: &known, small: cert.small, memo: &mut memo }.root(cert)?;
    let small_regions = results.iter().map(|r| r.1).sum::<u64>() + memo.len() as u64;
    Ok(Checked { position: cert.position(), claim: cert.claim, facts: cert.facts.len() as u64, small_regions })
}

/// Facts by region: a certificate's, or a [`crate::Ledger`]'s (shared by the proofs it
/// checks at once) with those of the proof it is checking.
pub(crate) trait Known {
    /// The value of region `s`, if a fact gives it.
    fn fact(&self, s: &Shape) -> Option<u8>;
}

impl Known for HashMap<Shape, u8, ShapeHash> {
    fn fact(&self, s: &Shape) -> Option<u8> {
        self.get(s).copied()
    }
}

/// Known values: facts and small regions by the mex rule.
pub(crate) struct Values<'a, K: Known + ?Sized> {
    /// The facts, by region.
    pub known: &'a K,
    /// Regions of at most this many cells are computed by the mex rule.
    pub small: u32,
    /// The small regions computed so far.
    pub memo: &'a mut SmallValues,
}

/// Where the rule for one fact ([`Values::fact`]) takes the replies it needs: an option
/// with one region H without a known value needs a move of H.
pub(crate) trait Hints {
    /// The move of H (by number) named for option `k`, which needs one; `None` when there
    /// is none.
    fn next(&mut self, k: usize) -> Option<u32>;
    /// Called after the last of the fact's `options` options: refuses what is left over.
    fn finish(&mut self, options: usize) -> Result<(), String>;
    /// How a refusal says that option needed one and had none.
    fn missing(&self) -> &'static str;
}

/// A certificate's hints: one for each option that needs one, in the order of the options;
/// no hint may be left over.
pub(crate) struct InOrder<'h>(pub std::slice::Iter<'h, u32>);

impl Hints for InOrder<'_> {
    fn next(&mut self, _: usize) -> Option<u32> {
        self.0.next().copied()
    }

    fn finish(&mut self, _: usize) -> Result<(), String> {
        match self.0.next() {
            Some(_) => Err("more hints than options that need one".into()),
            None => Ok(()),
        }
    }

    fn missing(&self) -> &'static str {
        "no hint is left"
    }
}

/// The regions left by a move (or the root's regions): the XOR of those with known values,
/// and the one without, if any.
enum Split {
    Known(u8),
    OneUnknown(u8, Shape),
}

impl<K: Known + ?Sized> Values<'_, K> {
    /// The value of region `s`, when known: a fact, or by the mex rule when small.
    pub fn value(&mut self, s: &Shape) -> Option<u8> {
        if let Some(v) = self.known.fact(s) {
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

    /// The rule for one fact, "`shape` has nimber `value`": every option of `shape` is shown
    /// to differ from `value` (its regions' known values XOR to another value, or all but
    /// one, H, are known and the hint for the option names a move of H into regions of
    /// known values XORing to the value H would need), and every value below `value` is
    /// the value of an option whose regions all have known values. `value` is at most half
    /// the region's cells (what a reader lets through). Says what fails.
    pub fn fact(&mut self, shape: &Shape, value: u8, hints: &mut impl Hints) -> Result<(), String> {
        let mut shown = 0u128;
        let moves = shape.moves();
        for (k, &m) in moves.iter().enumerate() {
            let regions = shape.after(m);
            match self.split(&regions) {
                Ok(Split::Known(x)) if x == value => {
                    return Err(format!("option {k} has value *{x}: the region's value is not *{value}"));
                }
                // Values of up to 64 (a region of 128 cells) XOR to less than 128.
                Ok(Split::Known(x)) => shown |= 1u128.checked_shl(x as u32).unwrap_or(0),
                Ok(Split::OneUnknown(x, h)) => {
                    let Some(hint) = hints.next(k) else {
                        return Err(format!("option {k} leaves {} without a fact, and {}", h.name(), hints.missing()));
                    };
                    self.reply(&h, hint, value ^ x).map_err(|e| format!("option {k}: {e}"))?;
                }
                Err((a, b)) => {
                    return Err(format!("option {k} leaves {} and {} without facts", a.name(), b.name()));
                }
            }
        }
        hints.finish(moves.len())?;
        if let Some(j) = (0..value).find(|&j| shown.checked_shr(j as u32).unwrap_or(0) & 1 == 0) {
            return Err(format!("no option is shown to have value *{j}"));
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
