//! Facts verified one proof at a time: what a cluster's coordinator keeps to check each
//! worker's proof as it arrives, before the result it comes with counts.
//!
//! A worker's proof export (the engine's `Prover::export`, read by `proof::read_export`)
//! is a list of facts "region R has nimber v", each with its replies: for an option of R
//! (by number, see [`Shape::moves`]) whose regions other than one, H, had known values when
//! the worker proved R, a move of H (by number) into regions of known values. A
//! [`Ledger`] verifies such a list by the checker's own rule for one fact
//! ([`crate::check`]; the same code checks a certificate's facts), taking as known only
//! facts it verified before, facts of the list verified before (the list is taken in
//! increasing size of region), and small regions by its own mex. So the soundness argument
//! of a certificate carries over: by induction on the number of cells, a fact is verified
//! only from true facts about smaller regions, so every fact a ledger holds is true.

use crate::check::{Hints, Known, Rejection, Values};
use crate::format::MAX_SMALL;
use crate::rules::{Shape, ShapeHash, SmallValues};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, RwLock};

/// One fact of a proof export: `shape` has nimber `value`, with the replies that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedFact {
    /// The region, in canonical form.
    pub shape: Shape,
    /// Its nimber.
    pub value: u8,
    /// `(option, move)`, in increasing option number: for option `option` of `shape` (a
    /// move number of `shape`), whose regions but one, H, have known values, move `move`
    /// of H, which leaves regions of known values that XOR to `value` XOR the others'. An
    /// option that needs no reply (every region's value known, by now) ignores its own.
    pub replies: Vec<(u16, u16)>,
}

/// The facts of a ledger are split over this many maps, each behind its own lock, so that
/// proofs checked at once seldom wait for each other.
const SHARDS: usize = 64;

type Facts = HashMap<Shape, u8, ShapeHash>;

/// Facts verified so far, for checking proofs ([`Ledger::verify`]). It is shared: several
/// proofs can be checked at once (`&self`), each against the facts held when it looks.
/// Facts are only ever added, and each was verified from facts held before it, so every
/// fact held is true whatever the order the checks ran in; a proof that rests on a fact
/// another check has not added yet fails, and is checked again once that one is done (the
/// coordinator does so).
pub struct Ledger {
    small: u32,
    shards: Box<[RwLock<Facts>]>,
    /// Small regions computed, one memo per check under way (taken and given back).
    memos: Mutex<Vec<SmallValues>>,
}

/// Facts of one size in a proof that go to one thread of [`Ledger::verify_on`], at least.
pub const MIN_FACTS_A_THREAD: usize = 64;

/// Why a fact is refused whose region is held with value `v`.
fn held(v: u8) -> String {
    format!("*{v} is held for this region (verified before, or earlier in this proof)")
}

/// A check's view of the facts: those its own proof verified so far, then the ledger's.
struct Overlay<'a> {
    ledger: &'a Ledger,
    own: &'a Facts,
}

impl Known for Overlay<'_> {
    fn fact(&self, s: &Shape) -> Option<u8> {
        self.own.get(s).copied().or_else(|| self.ledger.fact(s))
    }
}

/// A fact's replies, looked up by option number (they come in increasing option number;
/// replies for options that need none are passed over).
struct ByOption<'r> {
    replies: &'r [(u16, u16)],
    at: usize,
}

impl Hints for ByOption<'_> {
    fn next(&mut self, k: usize) -> Option<u32> {
        while self.replies.get(self.at).is_some_and(|r| (r.0 as usize) < k) {
            self.at += 1;
        }
        let &(option, m) = self.replies.get(self.at)?;
        (option as usize == k).then(|| {
            self.at += 1;
            m as u32
        })
    }

    fn finish(&mut self, options: usize) -> Result<(), String> {
        match self.replies.iter().find(|r| r.0 as usize >= options) {
            Some(r) => Err(format!("a reply names option {} of {options}", r.0)),
            None => Ok(()),
        }
    }

    fn missing(&self) -> &'static str {
        "no reply names a move of it"
    }
}

impl Ledger {
    /// An empty ledger whose regions of at most `small` cells (at most
    /// [`MAX_SMALL`]: more is taken as that) have their values computed by the mex rule:
    /// the `small` of the job whose proofs it checks.
    pub fn new(small: u32) -> Ledger {
        Ledger {
            small: small.min(MAX_SMALL),
            shards: (0..SHARDS).map(|_| RwLock::new(Facts::default())).collect(),
            memos: Mutex::new(Vec::new()),
        }
    }

    /// The size up to which regions are computed, not facts.
    pub fn small(&self) -> u32 {
        self.small
    }

    fn shard(&self, s: &Shape) -> &RwLock<Facts> {
        let x = s.cells as u64 ^ (s.cells >> 64) as u64 ^ ((s.h as u64) << 56) ^ ((s.w as u64) << 48);
        &self.shards[(x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SHARDS]
    }

    /// The verified fact about `s`, if any.
    fn fact(&self, s: &Shape) -> Option<u8> {
        self.shard(s).read().unwrap_or_else(PoisonError::into_inner).get(s).copied()
    }

    /// Adds `s = v` unless `s` is held; true when it was not.
    fn add(&self, s: Shape, v: u8) -> bool {
        match self.shard(&s).write().unwrap_or_else(PoisonError::into_inner).entry(s) {
            Entry::Vacant(e) => {
                e.insert(v);
                true
            }
            Entry::Occupied(_) => false,
        }
    }

    fn take_memo(&self) -> SmallValues {
        self.memos.lock().unwrap_or_else(PoisonError::into_inner).pop().unwrap_or_default()
    }

    fn give_memo(&self, memo: SmallValues) {
        self.memos.lock().unwrap_or_else(PoisonError::into_inner).push(memo);
    }

    /// Verifies `facts` (a proof export), in increasing size of region, by the rule a
    /// certificate's facts are checked by: every option of the region differs from the
    /// value — an option whose regions all have known values XORs to another value; one
    /// with a single region H without a known value needs a reply naming a move of H into
    /// regions of known values XORing to the value H would need — and every value below
    /// the value appears among the options whose regions all have known values. Known
    /// values are the ledger's facts, the facts of `facts` verified before, and small
    /// regions by the mex rule.
    ///
    /// On success adds them all and returns how many were new (a fact already held with
    /// the same value is passed over, as is one another check added meanwhile). On the
    /// first failure adds nothing and names the fact (`index` its place in `facts`) and
    /// why: a region that is not a connected canonical one, a value above half its cells, a
    /// region held with another value, replies out of order, or the rule failing.
    pub fn verify(&self, facts: &[ExportedFact]) -> Result<usize, Rejection> {
        self.verify_on(facts, 1)
    }

    /// [`Ledger::verify`] on up to `threads` threads: a fact rests only on facts about
    /// smaller regions, so the facts of one size are verified side by side (dealt to the
    /// threads in turn, a thread for every [`MIN_FACTS_A_THREAD`] of them), then taken in
    /// order as one thread would take them: the same verdict, the same fact named.
    pub fn verify_on(&self, facts: &[ExportedFact], threads: usize) -> Result<usize, Rejection> {
        let mut order: Vec<usize> = (0..facts.len()).collect();
        order.sort_by_key(|&i| (facts[i].shape.size(), i));
        let mut own = Facts::default();
        for group in order.chunk_by(|&a, &b| facts[a].shape.size() == facts[b].shape.size()) {
            let threads = threads.min(group.len() / MIN_FACTS_A_THREAD).max(1);
            let verdicts: Vec<(usize, Result<bool, String>)> = if threads == 1 {
                self.verify_group(facts, group, &own)
            } else {
                let own = &own;
                let mut verdicts: Vec<_> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let part: Vec<usize> = group.iter().copied().skip(t).step_by(threads).collect();
                            scope.spawn(move || self.verify_group(facts, &part, own))
                        })
                        .collect();
                    handles.into_iter().flat_map(|h| h.join().expect("a verifying thread panicked")).collect()
                });
                verdicts.sort_by_key(|v| v.0);
                verdicts
            };
            // Each thread's verdicts stop at its first failure; taken in order up to the
            // first failure of all, every fact before it has its verdict.
            for (i, verdict) in verdicts {
                let f = &facts[i];
                // A region twice in one proof: the second is passed over, or refused.
                let verdict = match own.get(&f.shape) {
                    Some(&v) if v == f.value => Ok(false),
                    Some(&v) => Err(held(v)),
                    None => verdict,
                };
                match verdict {
                    Ok(true) => {
                        own.insert(f.shape, f.value);
                    }
                    Ok(false) => {}
                    Err(why) => {
                        return Err(Rejection::Fact { index: i as u64, region: f.shape.name(), value: f.value, why })
                    }
                }
            }
        }
        Ok(own.into_iter().filter(|&(s, v)| self.add(s, v)).count())
    }

    /// Verifies the facts of `group` (places in `facts`) against the ledger and `own`, the
    /// proof's facts verified so far: a verdict for each (true: verified and new; false:
    /// held already), up to the first failure.
    fn verify_group(&self, facts: &[ExportedFact], group: &[usize], own: &Facts) -> Vec<(usize, Result<bool, String>)> {
        let known = Overlay { ledger: self, own };
        let mut memo = self.take_memo();
        let mut verdicts = Vec::with_capacity(group.len());
        for &i in group {
            let verdict = self.verify_one(&facts[i], &known, &mut memo);
            let failed = verdict.is_err();
            verdicts.push((i, verdict));
            if failed {
                break;
            }
        }
        self.give_memo(memo);
        verdicts
    }

    /// Verifies fact `f` against `known`: true when verified, false when held already.
    fn verify_one(&self, f: &ExportedFact, known: &Overlay, memo: &mut SmallValues) -> Result<bool, String> {
        let s = &f.shape;
        if !s.is_canonical_region() {
            return Err(format!("{} is not a connected region in canonical form", s.name()));
        }
        if f.value as u32 > s.size() / 2 {
            return Err(format!("a region of {} cells has no value above *{}", s.size(), s.size() / 2));
        }
        match known.fact(s) {
            Some(v) if v == f.value => return Ok(false),
            Some(v) => return Err(held(v)),
            None => {}
        }
        if let Some(w) = f.replies.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(format!("replies out of order: option {} after option {}", w[1].0, w[0].0));
        }
        let mut values = Values { known, small: self.small, memo };
        values.fact(s, f.value, &mut ByOption { replies: &f.replies, at: 0 })?;
        Ok(true)
    }

    /// The value of region `s` when the ledger knows it: a verified fact, or, for a region
    /// of at most [`Ledger::small`] cells, by the mex rule.
    pub fn value(&self, s: &Shape) -> Option<u8> {
        if let Some(v) = self.fact(s) {
            return Some(v);
        }
        if s.size() > self.small || !s.is_canonical_region() {
            return None;
        }
        let mut memo = self.take_memo();
        let v = memo.value(s);
        self.give_memo(memo);
        Some(v)
    }

    /// Facts held (verified here or added with [`Ledger::add_verified`]), small regions
    /// not counted.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().unwrap_or_else(PoisonError::into_inner).len()).sum()
    }

    /// True when no fact is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a fact verified before, by a ledger of an earlier run (read back from disk):
    /// taken as it is, without a check — the caller vouches for it. A region already held
    /// keeps its value. A region that is not canonical, or a value above half its cells
    /// (no fact a ledger verified), is not added.
    pub fn add_verified(&self, s: Shape, v: u8) {
        if s.is_canonical_region() && v as u32 <= s.size() / 2 {
            self.add(s, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(n: u32) -> Shape {
        Shape::of(1, n, (1u128 << n) - 1)
    }

    /// The true value of a region (the mex rule, any size).
    fn truth(s: &Shape) -> u8 {
        SmallValues::new().value(s)
    }

    /// A fact of `s` with its true value and, for every option that leaves one region
    /// above `small` cells, a reply into small regions, where there is one.
    fn proved(s: &Shape, small: u32) -> ExportedFact {
        let value = truth(s);
        let mut replies = Vec::new();
        for (k, m) in s.moves().into_iter().enumerate() {
            let regions = s.after(m);
            let (big, rest): (Vec<Shape>, Vec<Shape>) = regions.iter().partition(|r| r.size() > small);
            if let [h] = big[..] {
                let x = rest.iter().fold(0, |x, r| x ^ truth(r));
                let reply = h.moves().into_iter().position(|hm| {
                    let after = h.after(hm);
                    after.iter().all(|r| r.size() <= small) && after.iter().fold(0, |y, r| y ^ truth(r)) == value ^ x
                });
                if let Some(r) = reply {
                    replies.push((k as u16, r as u16));
                }
            }
        }
        ExportedFact { shape: *s, value, replies }
    }

    fn bare(s: Shape, value: u8) -> ExportedFact {
        ExportedFact { shape: s, value, replies: vec![] }
    }

    #[test]
    fn facts_verify_on_facts_verified_before() {
        // 1×n Cram is Dawson's Kayles; with small = 6, 1×10's options leave 1×8 and 1×7.
        let (s7, s8, s10) = (strip(7), strip(8), strip(10));
        let ledger = Ledger::new(6);
        // In any order: the ledger takes them smallest first.
        let facts = vec![bare(s10, truth(&s10)), bare(s8, truth(&s8)), bare(s7, truth(&s7))];
        assert_eq!(ledger.verify(&facts), Ok(3));
        assert_eq!(
            (ledger.len(), ledger.value(&s10), ledger.value(&strip(5))),
            (3, Some(truth(&s10)), Some(truth(&strip(5))))
        );
        assert_eq!(ledger.value(&strip(11)), None);
        assert_eq!(ledger.verify(&facts), Ok(0), "known facts are passed over");
        // 1×10 alone rests on facts it does not have: refused, the region named.
        let fresh = Ledger::new(6);
        let r = fresh.verify(&facts[..1]).unwrap_err();
        assert!(r.to_string().contains(&format!("leaves {} without a fact, and no reply", s8.name())), "{r}");
        assert!(fresh.is_empty());
        // With small = 7, 1×10's options leave only 1×8 unknown, and a reply in it (to 1×6)
        // stands for its fact.
        let alone = proved(&s10, 7);
        assert_eq!(alone.replies.len(), 2, "{alone:?}");
        let fresh = Ledger::new(7);
        assert_eq!(fresh.verify(std::slice::from_ref(&alone)), Ok(1));
        assert_eq!((fresh.value(&s8), fresh.value(&s7)), (None, Some(truth(&s7))), "1x7 is small");
        let fresh = Ledger::new(7);
        fresh.add_verified(s8, truth(&s8));
        assert_eq!(fresh.verify(std::slice::from_ref(&alone)), Ok(1), "replies not needed are passed over");
        // A reply that names no move, or one that leaves another value, is refused.
        let h = s8;
        for bad in [200u16, 1, 3] {
            let mut wrong = alone.clone();
            wrong.replies[0].1 = bad;
            let leaves = h.moves().get(bad as usize).map(|&m| h.after(m).iter().fold(0, |x, r| x ^ truth(r)));
            assert_ne!(leaves, Some(alone.value), "move {bad} of 1x8 is a good reply too");
            let r = Ledger::new(7).verify(&[wrong]).unwrap_err().to_string();
            assert!(r.contains("names no move") || r.contains("leaves *"), "reply {bad}: {r}");
        }
        let mut missing = alone.clone();
        missing.replies.remove(0);
        let r = Ledger::new(7).verify(&[missing]).unwrap_err().to_string();
        assert!(r.contains(&format!("leaves {} without a fact, and no reply", s8.name())), "{r}");
    }

    #[test]
    fn no_false_fact_is_accepted() {
        // 1×5 to 1×11 with small = 4: each rests on the smaller ones.
        let small = 4;
        let facts: Vec<ExportedFact> = (5..=11).map(|n| proved(&strip(n), small)).collect();
        assert_eq!(Ledger::new(small).verify(&facts), Ok(facts.len()));
        for i in 0..facts.len() {
            let n = facts[i].shape.size();
            for wrong in (0..=n as u8 / 2).filter(|&w| w != facts[i].value) {
                let mut changed = facts.clone();
                changed[i].value = wrong;
                let ledger = Ledger::new(small);
                let r = ledger.verify(&changed);
                assert!(matches!(r, Err(Rejection::Fact { .. })), "1x{n} as *{wrong}: {r:?}");
                assert!(ledger.is_empty());
            }
        }
        // Without replies each fact but the two largest is needed by a larger one (1×n's
        // options leave n - 2 cells).
        let bare: Vec<ExportedFact> = facts.iter().map(|f| bare(f.shape, f.value)).collect();
        assert_eq!(Ledger::new(small).verify(&bare), Ok(bare.len()));
        for i in 0..bare.len() - 2 {
            let mut dropped = bare.clone();
            dropped.remove(i);
            let r = Ledger::new(small).verify(&dropped).unwrap_err().to_string();
            assert!(r.contains(&format!("{} without a fact", bare[i].shape.name())), "fact {i} dropped: {r}");
        }
    }

    #[test]
    fn a_failure_adds_nothing_and_malformed_facts_are_refused() {
        let (s7, s8) = (strip(7), strip(8));
        let ledger = Ledger::new(6);
        // A true 1×7 and a false 1×8: neither is added.
        let r = ledger.verify(&[bare(s7, truth(&s7)), bare(s8, truth(&s8) ^ 1)]);
        assert!(matches!(r, Err(Rejection::Fact { index: 1, .. })), "{r:?}");
        assert!(ledger.is_empty());
        // A value held, another claimed.
        ledger.add_verified(s7, truth(&s7));
        let r = ledger.verify(&[bare(s7, truth(&s7) ^ 1)]).unwrap_err();
        assert!(r.to_string().contains("is held for this region"), "{r}");
        let r = ledger.verify(&[bare(s8, truth(&s8)), bare(s8, truth(&s8) ^ 1)]).unwrap_err();
        assert!(matches!(r, Rejection::Fact { index: 1, .. }), "{r}");
        assert_eq!(ledger.len(), 1);
        // Not a canonical region, a value no region of its size has, replies out of order.
        let not_canonical = Shape { h: 8, w: 1, cells: 0xff };
        assert!(ledger.verify(&[bare(not_canonical, 1)]).unwrap_err().to_string().contains("canonical"));
        let huge = Shape { h: 200, w: 200, cells: 1 };
        assert!(ledger.verify(&[bare(huge, 0)]).is_err());
        assert!(ledger.verify(&[bare(s8, 5)]).unwrap_err().to_string().contains("no value above *4"));
        let mut unordered = proved(&strip(10), 6);
        unordered.replies.reverse();
        assert!(ledger.verify(&[unordered]).unwrap_err().to_string().contains("out of order"));
        let mut far = proved(&strip(10), 6);
        far.replies.push((60, 0));
        assert!(ledger.verify(&[far]).unwrap_err().to_string().contains("names option 60"));
        assert_eq!(ledger.len(), 1);
        // add_verified leaves out what no ledger verifies.
        ledger.add_verified(not_canonical, 0);
        ledger.add_verified(s8, 9);
        assert_eq!(ledger.len(), 1);
    }

    #[test]
    fn proofs_checked_at_once_hold_what_one_at_a_time_holds() {
        // Each proof: one strip, resting on the strips one and two shorter (small = 4).
        let small = 4;
        let proofs: Vec<Vec<ExportedFact>> = (5..=40).map(|n| vec![bare(strip(n), truth(&strip(n)))]).collect();
        let serial = Ledger::new(small);
        for p in &proofs {
            assert_eq!(serial.verify(p), Ok(1));
        }
        // Four threads, each taking every fourth proof and checking again, in order, those
        // that failed because a fact they rest on was not added yet: every one is added,
        // and no fact is counted twice.
        let shared = Ledger::new(small);
        let added: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let (shared, proofs) = (&shared, &proofs);
                    scope.spawn(move || {
                        let mut added = 0;
                        let mut waiting: Vec<&Vec<ExportedFact>> = proofs.iter().skip(t).step_by(4).collect();
                        while !waiting.is_empty() {
                            waiting.retain(|p| match shared.verify(p) {
                                Ok(n) => {
                                    added += n;
                                    false
                                }
                                Err(_) => true,
                            });
                        }
                        added
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!((added, shared.len()), (proofs.len(), serial.len()));
        for n in 5..=40 {
            assert_eq!(shared.value(&strip(n)), Some(truth(&strip(n))), "1x{n}");
        }
    }
}
