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

use crate::check::{Hints, Rejection, Values};
use crate::format::MAX_SMALL;
use crate::rules::{Shape, ShapeHash, SmallValues};
use std::collections::HashMap;
use std::sync::Mutex;

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

/// Facts verified so far, for checking proofs one at a time ([`Ledger::verify`]).
pub struct Ledger {
    small: u32,
    facts: HashMap<Shape, u8, ShapeHash>,
    /// Small regions computed (behind a lock so that [`Ledger::value`] takes `&self`).
    memo: Mutex<SmallValues>,
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
        Ledger { small: small.min(MAX_SMALL), facts: HashMap::default(), memo: Mutex::new(SmallValues::new()) }
    }

    /// The size up to which regions are computed, not facts.
    pub fn small(&self) -> u32 {
        self.small
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
    /// the same value is passed over). On the first failure adds nothing and names the
    /// fact (`index` its place in `facts`) and why: a region that is not a connected
    /// canonical one, a value above half its cells, a region the ledger holds with
    /// another value, replies out of order, or the rule failing.
    pub fn verify(&mut self, facts: &[ExportedFact]) -> Result<usize, Rejection> {
        let mut order: Vec<usize> = (0..facts.len()).collect();
        order.sort_by_key(|&i| (facts[i].shape.size(), i));
        let memo = self.memo.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut added: Vec<Shape> = Vec::new();
        for i in order {
            let f = &facts[i];
            let verified = (|| {
                let s = &f.shape;
                if !s.is_canonical_region() {
                    return Err(format!("{} is not a connected region in canonical form", s.name()));
                }
                if f.value as u32 > s.size() / 2 {
                    return Err(format!("a region of {} cells has no value above *{}", s.size(), s.size() / 2));
                }
                match self.facts.get(s) {
                    Some(&v) if v == f.value => return Ok(false),
                    Some(&v) => {
                        return Err(format!("*{v} is held for this region (verified before, or earlier in this proof)"))
                    }
                    None => {}
                }
                if let Some(w) = f.replies.windows(2).find(|w| w[0].0 >= w[1].0) {
                    return Err(format!("replies out of order: option {} after option {}", w[1].0, w[0].0));
                }
                let mut values = Values { known: &self.facts, small: self.small, memo };
                values.fact(s, f.value, &mut ByOption { replies: &f.replies, at: 0 })?;
                Ok(true)
            })();
            match verified {
                Ok(true) => {
                    self.facts.insert(f.shape, f.value);
                    added.push(f.shape);
                }
                Ok(false) => {}
                Err(why) => {
                    for s in &added {
                        self.facts.remove(s);
                    }
                    return Err(Rejection::Fact { index: i as u64, region: f.shape.name(), value: f.value, why });
                }
            }
        }
        Ok(added.len())
    }

    /// The value of region `s` when the ledger knows it: a verified fact, or, for a region
    /// of at most [`Ledger::small`] cells, by the mex rule.
    pub fn value(&self, s: &Shape) -> Option<u8> {
        if let Some(&v) = self.facts.get(s) {
            return Some(v);
        }
        if s.size() > self.small || !s.is_canonical_region() {
            return None;
        }
        Some(self.memo.lock().unwrap_or_else(|e| e.into_inner()).value(s))
    }

    /// Facts held (verified here or added with [`Ledger::add_verified`]), small regions
    /// not counted.
    pub fn len(&self) -> usize {
        self.facts.len()
    }

    /// True when no fact is held.
    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }

    /// Adds a fact verified before, by a ledger of an earlier run (read back from disk):
    /// taken as it is, without a check — the caller vouches for it. A region already held
    /// keeps its value. A region that is not canonical, or a value above half its cells
    /// (no fact a ledger verified), is not added.
    pub fn add_verified(&mut self, s: Shape, v: u8) {
        if s.is_canonical_region() && v as u32 <= s.size() / 2 {
            self.facts.entry(s).or_insert(v);
        }
    }

    /// Every fact held, in no particular order.
    pub fn facts(&self) -> impl Iterator<Item = (Shape, u8)> + '_ {
        self.facts.iter().map(|(s, v)| (*s, *v))
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
        let mut ledger = Ledger::new(6);
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
        let mut fresh = Ledger::new(6);
        let r = fresh.verify(&facts[..1]).unwrap_err();
        assert!(r.to_string().contains(&format!("leaves {} without a fact, and no reply", s8.name())), "{r}");
        assert!(fresh.is_empty());
        // With small = 7, 1×10's options leave only 1×8 unknown, and a reply in it (to 1×6)
        // stands for its fact.
        let alone = proved(&s10, 7);
        assert_eq!(alone.replies.len(), 2, "{alone:?}");
        let mut fresh = Ledger::new(7);
        assert_eq!(fresh.verify(std::slice::from_ref(&alone)), Ok(1));
        assert_eq!((fresh.value(&s8), fresh.value(&s7)), (None, Some(truth(&s7))), "1x7 is small");
        let mut fresh = Ledger::new(7);
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
                let mut ledger = Ledger::new(small);
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
        let mut ledger = Ledger::new(6);
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
}
