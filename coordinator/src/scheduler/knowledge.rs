//! Shared knowledge: the facts workers' searches found about large, costly regions, for the
//! other workers. A fact is handed out only once the coordinator's own search of its region
//! agreed with it: until then it waits, by region; a fact the search contradicts shows its
//! origin wrong. Verified facts are handed out in the order they were verified, each worker
//! getting each once (never its own). A verified fact stays when its origin is later found
//! wrong: the coordinator's search showed it true, so nothing that loaded it falls.

use crate::events::Event;
use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::SharedFact;
use std::collections::{BTreeMap, HashMap};

/// Facts workers shared.
#[derive(Default)]
pub struct Knowledge {
    /// Facts waiting for the coordinator's search of their region, with their origins.
    pending: HashMap<AnyRegion, Vec<(SharedFact, String)>>,
    /// Facts verified, in that order.
    verified: Vec<(SharedFact, String)>,
    /// How far into `verified` each worker has been handed facts.
    handed: HashMap<String, usize>,
}

impl Knowledge {
    /// Keeps facts `origin` shared, to be verified before they are handed out.
    pub fn add(&mut self, origin: &str, facts: &[SharedFact]) {
        for f in facts {
            self.pending.entry(f.region).or_default().push((*f, origin.to_string()));
        }
    }

    /// Takes the coordinator's own exact facts about `region`: the waiting facts about it
    /// that agree are verified (those that contradict show their origins wrong:
    /// [`Knowledge::wrong_about`]).
    pub fn settle(&mut self, region: AnyRegion, facts: Facts) {
        if facts.value().is_none() {
            return;
        }
        let Some(list) = self.pending.remove(&region) else { return };
        let (agree, other): (Vec<_>, Vec<_>) = list.into_iter().partition(|(f, _)| f.facts.agrees_with(facts));
        self.verified.extend(agree);
        if !other.is_empty() {
            self.pending.insert(region, other);
        }
    }

    /// The distrust events the coordinator's own facts about `region` call for: the origins
    /// of waiting facts that contradict them.
    pub fn wrong_about(&self, region: AnyRegion, facts: Facts) -> Vec<Event> {
        let mut wrong = BTreeMap::new();
        for (f, origin) in self.pending.get(&region).into_iter().flatten() {
            if !f.facts.agrees_with(facts) {
                wrong.entry(origin.clone()).or_insert_with(|| {
                    format!("a fact it shared about {} contradicts the coordinator's own search", region.key())
                });
            }
        }
        wrong.into_iter().map(|(worker, reason)| Event::Distrust { worker, reason }).collect()
    }

    /// Verified facts `worker` has not been given yet, at most `limit` (never its own).
    pub fn hand_out(&mut self, worker: &str, limit: usize) -> Vec<SharedFact> {
        let from = self.handed.entry(worker.to_string()).or_insert(0);
        let mut out = Vec::new();
        while *from < self.verified.len() && out.len() < limit {
            let (f, origin) = &self.verified[*from];
            if origin != worker {
                out.push(*f);
            }
            *from += 1;
        }
        out
    }

    /// Drops the facts about `region` that wait to be verified (the coordinator's search of it
    /// ran out of its budget: a true fact may cost more, so nobody is blamed).
    pub fn drop_region(&mut self, region: &AnyRegion) {
        self.pending.remove(region);
    }

    /// Drops the facts `origin` shared that wait to be verified (it was found wrong: they
    /// are not worth the coordinator's search). Those verified stay.
    pub fn forget(&mut self, origin: &str) {
        for list in self.pending.values_mut() {
            list.retain(|(_, o)| o != origin);
        }
        self.pending.retain(|_, l| !l.is_empty());
    }

    /// True when a shared fact about `region` waits for the coordinator's search of it.
    pub fn waits_on(&self, region: &AnyRegion) -> bool {
        self.pending.contains_key(region)
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.verified.is_empty()
    }
}
