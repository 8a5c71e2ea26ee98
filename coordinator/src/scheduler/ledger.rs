//! The ledger of results and of the evidence for them: every finished result held (per
//! unit: who answered, the answer, whether it must be verified and whether it was), the
//! results refused per question, and the coordinator's own searches still to make
//! (verifications of sampled results, disputes, conflicts, shared facts). It answers "what
//! is believed, on whose word, and what is still to be shown".
//!
//! Evidence, not reputation: no worker earns trust. A result is verified by the
//! coordinator's own search of the unit's question when the coordinator chose it — always
//! for units that decide the root or a first move, else one in [`CheckPolicy::sample_one_in`]
//! drawn from the operating system's random source when the result arrives (so that no
//! worker can know which of its results will be verified) and written in the result's log
//! line (so that a replay verifies the same). Of every result only the answer to its
//! question is used: what is used is what a verification compares.

use crate::events::{Event, ResultRecord};
use crate::prove::ProofDue;
use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::Question;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// How results are verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckPolicy {
    /// One result in this many (besides the decisive ones) is verified by the
    /// coordinator's own search (0: none).
    pub sample_one_in: u32,
    /// Every result that decides the root or a first move is verified.
    pub decisive: bool,
}

impl CheckPolicy {
    /// The cluster's default: every decisive result and one in 30 of the others verified
    /// (the cost measured in docs/cluster.md: about a tenth of a lone worker's nodes).
    pub const DEFAULT: CheckPolicy = CheckPolicy { sample_one_in: 30, decisive: true };
    /// Nothing verified: for workers that share the coordinator's memory (the threads of
    /// `cram solve --workers`), where a second search would check nothing, and for
    /// measurements without verification.
    pub const NONE: CheckPolicy = CheckPolicy { sample_one_in: 0, decisive: false };

    /// True when the policy verifies anything (jobs whose workers share the coordinator's
    /// memory verify nothing).
    pub fn verifies(self) -> bool {
        self != CheckPolicy::NONE
    }

    /// Draws whether a result is to be verified: a `decisive` one when the policy says so,
    /// any other with probability one in [`CheckPolicy::sample_one_in`].
    pub fn draw(self, decisive: bool) -> bool {
        decisive && self.decisive || self.sample_one_in > 0 && rand::random_range(0..self.sample_one_in) == 0
    }
}

/// A finished result held (its worker is not distrusted).
#[derive(Debug)]
pub struct Held {
    /// Who answered.
    pub worker: String,
    /// The answer to the unit's question (the only part of a result that is used).
    pub facts: Facts,
    /// The coordinator chose it for verification.
    pub verify: bool,
    /// The coordinator's own search agreed with it.
    pub verified: bool,
    /// Answered from the worker's cache.
    pub from_cache: bool,
    /// Its proof's file, in a certified job.
    pub proof: Option<String>,
    /// Its proof was checked (not only found to agree with another's that was).
    pub proof_checked: bool,
}

impl Held {
    /// The result of `r` as held.
    pub fn of(r: &ResultRecord) -> Held {
        Held {
            worker: r.worker.clone(),
            facts: r.answer(),
            verify: r.verify,
            verified: false,
            from_cache: r.from_cache,
            proof: r.proof.clone(),
            proof_checked: false,
        }
    }

    fn waits(&self) -> bool {
        self.verify && !self.verified
    }
}

/// The results held and the evidence still to be found.
pub struct Ledger {
    policy: CheckPolicy,
    /// A certified job: a result is verified by its proof (checked by the independent
    /// checker's rules), not by the coordinator's search.
    certified: bool,
    /// Proofs to check, in the order their results came.
    to_prove: VecDeque<ProofDue>,
    /// Units whose held results lost their proofs (files missing after a restart): they
    /// are leased again, to be searched and proved anew.
    to_reprove: BTreeSet<Question>,
    /// Units taken off `to_reprove` by a new proof not checked yet, with its worker: if
    /// that worker is discarded (its proof refused), the unit is to be proved again still.
    reproving: HashMap<Question, String>,
    /// Proof files of discarded results that no check passed (refused, or never checked):
    /// to delete from the state.
    dropped_proofs: Vec<String>,
    /// Finished results held, per unit.
    answers: HashMap<Question, Vec<Held>>,
    /// How many of them are verified.
    verified: u64,
    /// Refused results per question (worker, facts), until the coordinator decides it.
    refused: HashMap<Question, Vec<(String, Facts)>>,
    /// Units with a result that waits for its verification.
    awaiting: BTreeSet<Question>,
    /// The coordinator's own searches to make, in order, and those under way.
    to_search: VecDeque<Question>,
    searching: HashSet<Question>,
    /// Searches of shared facts' regions, made when the others leave room: the answer does
    /// not wait for them (it rests on results, not on shared facts).
    to_search_later: VecDeque<Question>,
    /// Those of them under way (searched with a node budget).
    searching_later: HashSet<Question>,
}

impl Ledger {
    /// An empty ledger verifying results as `policy` says (by their proofs when
    /// `certified`).
    pub fn new(policy: CheckPolicy, certified: bool) -> Ledger {
        Ledger {
            policy,
            certified,
            to_prove: VecDeque::new(),
            to_reprove: BTreeSet::new(),
            reproving: HashMap::new(),
            dropped_proofs: Vec::new(),
            answers: HashMap::new(),
            verified: 0,
            refused: HashMap::new(),
            awaiting: BTreeSet::new(),
            to_search: VecDeque::new(),
            searching: HashSet::new(),
            to_search_later: VecDeque::new(),
            searching_later: HashSet::new(),
        }
    }

    /// The verification policy.
    pub fn policy(&self) -> CheckPolicy {
        self.policy
    }

    /// True when some finished result answers `q`.
    pub fn is_answered(&self, q: &Question) -> bool {
        self.answers.contains_key(q)
    }

    /// True when an answer to `q` held was verified (by the coordinator's search or a
    /// proof that checked).
    pub fn is_verified(&self, q: &Question) -> bool {
        self.answers.get(q).is_some_and(|l| l.iter().any(|h| h.verified))
    }

    /// True when `worker` already has an answer to `q` held.
    pub fn holds_from(&self, q: &Question, worker: &str) -> bool {
        self.answers.get(q).is_some_and(|l| l.iter().any(|h| h.worker == worker))
    }

    /// True when `worker`'s result on `q` with this proof is held (a line logged twice).
    pub fn holds_same(&self, q: &Question, worker: &str, proof: &Option<String>) -> bool {
        self.answers.get(q).is_some_and(|l| l.iter().any(|h| h.worker == worker && h.proof == *proof))
    }

    /// Units answered.
    pub fn answered(&self) -> usize {
        self.answers.len()
    }

    /// Results held that a verification (the coordinator's search or a proof) agreed with.
    pub fn verified(&self) -> u64 {
        self.verified
    }

    /// Units whose results wait for their verification.
    pub fn awaiting(&self) -> &BTreeSet<Question> {
        &self.awaiting
    }

    /// Holds a finished result on `q`, queueing its verification when it was chosen for
    /// one. True when it is the unit's first answer.
    pub fn hold(&mut self, q: Question, held: Held) -> bool {
        if held.waits() {
            self.awaiting.insert(q);
            match (&held.proof, self.certified) {
                (Some(file), true) => {
                    // A unit proved again: its new proof is checked like any other (and the
                    // unit goes out again only if that one is lost or refused too).
                    if self.to_reprove.remove(&q) {
                        self.reproving.insert(q, held.worker.clone());
                    }
                    self.to_prove.push_back(ProofDue {
                        unit: q,
                        worker: held.worker.clone(),
                        file: file.clone(),
                        claim: held.facts,
                    })
                }
                // A certified result without its proof (an earlier build's cached answer):
                // searched and proved again.
                (None, true) => {
                    self.to_reprove.insert(q);
                }
                (_, false) => self.queue(q),
            }
        }
        let list = self.answers.entry(q).or_default();
        list.push(held);
        list.len() == 1
    }

    /// The next proof to check.
    pub fn next_proof(&mut self) -> Option<ProofDue> {
        self.to_prove.pop_front()
    }

    /// The proof of `worker`'s result on `q` checked: that result is verified, and every
    /// other held on `q` that agrees with it.
    pub fn proved(&mut self, q: Question, worker: &str) {
        let Some(list) = self.answers.get_mut(&q) else { return };
        let Some(own) = list.iter_mut().find(|h| h.worker == worker) else { return };
        own.proof_checked = true;
        let proven = own.facts;
        for h in list.iter_mut().filter(|h| h.facts.agrees_with(proven) && !h.verified) {
            h.verified = true;
            self.verified += 1;
        }
        if !list.iter().any(Held::waits) {
            self.awaiting.remove(&q);
        }
        self.to_reprove.remove(&q);
        self.reproving.remove(&q);
        // A replayed log queues every result's proof before it reads that it was checked:
        // a checked proof is not checked again after a restart.
        self.to_prove.retain(|p| p.unit != q || p.worker != worker);
    }

    /// The proof of `worker`'s result on `q` is gone (its file missing after a restart):
    /// the unit is to be searched and proved again; the result stays held meanwhile.
    pub fn proof_lost(&mut self, q: Question) {
        self.reproving.remove(&q);
        if self.awaiting.contains(&q) {
            self.to_reprove.insert(q);
        }
    }

    /// The proof files of discarded results no check passed, since the last call.
    pub fn take_dropped_proofs(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dropped_proofs)
    }

    /// Units to search and prove again (their proofs were lost).
    pub fn to_reprove(&self) -> &BTreeSet<Question> {
        &self.to_reprove
    }

    /// Records a refused result on `q` (not decided yet) and queues the coordinator's
    /// search of the question.
    pub fn refuse(&mut self, q: Question, worker: &str, facts: Facts) {
        self.refused.entry(q).or_default().push((worker.to_string(), facts));
        self.queue(q);
    }

    /// Queues a search of `q` by the coordinator (once), one the answer waits for.
    pub fn queue(&mut self, q: Question) {
        if !self.searching.contains(&q) && !self.to_search.contains(&q) {
            self.to_search.push_back(q);
        }
    }

    /// Queues a search of `q` the answer does not wait for (a shared fact's region).
    pub fn queue_later(&mut self, q: Question) {
        if !self.searching.contains(&q) && !self.to_search_later.contains(&q) {
            self.to_search_later.push_back(q);
        }
    }

    /// Takes what the coordinator's own searches found about `region` (`facts`, certain):
    /// the results held on the questions it answers (`answers`) that agree with it are
    /// verified, the refused ones it decides are done with (the workers it shows wrong are
    /// distrusted by the events [`Ledger::wrong_about`] gave).
    pub fn settle(&mut self, region: AnyRegion, facts: Facts, answers: impl Fn(&Question) -> bool) {
        let qs: Vec<Question> = self.answers.keys().filter(|q| q.region == region && answers(q)).copied().collect();
        for q in qs {
            let list = self.answers.get_mut(&q).expect("listed above");
            for h in list.iter_mut().filter(|h| h.facts.agrees_with(facts) && !h.verified) {
                h.verified = true;
                self.verified += 1;
            }
            if !list.iter().any(Held::waits) {
                self.awaiting.remove(&q);
            }
        }
        self.refused.retain(|q, _| q.region != region || !answers(q));
        let decided = |q: &Question| q.region == region && answers(q);
        self.to_search.retain(|q| !decided(q));
        self.to_search_later.retain(|q| !decided(q));
        self.searching.retain(|q| !decided(q));
        self.searching_later.retain(|q| !decided(q));
    }

    /// Discards everything `worker` reported; returns the facts still held, per unit, for the top to be told again.
    pub fn discard(&mut self, worker: &str) -> Vec<(Question, Facts)> {
        for list in self.refused.values_mut() {
            list.retain(|(w, _)| w != worker);
        }
        self.refused.retain(|_, list| !list.is_empty());
        let dropped = &mut self.dropped_proofs;
        self.answers.retain(|_, list| {
            list.retain(|h| {
                if h.worker != worker {
                    return true;
                }
                // A proof that checked holds true facts that later proofs may rest on: it
                // stays (it cost its worker real work).
                dropped.extend(h.proof.clone().filter(|_| !h.proof_checked));
                false
            });
            !list.is_empty()
        });
        self.to_prove.retain(|p| p.worker != worker);
        self.dropped_proofs.sort();
        self.dropped_proofs.dedup();
        self.awaiting = self.answers.iter().filter(|(_, l)| l.iter().any(Held::waits)).map(|(q, _)| *q).collect();
        // A unit whose new proof came from `worker` is to be proved again, unless another
        // proof of it waits to be checked.
        let (awaiting, to_prove) = (&self.awaiting, &self.to_prove);
        let to_reprove = &mut self.to_reprove;
        self.reproving.retain(|q, w| {
            if w != worker {
                return true;
            }
            if awaiting.contains(q) && !to_prove.iter().any(|p| p.unit == *q) {
                to_reprove.insert(*q);
            }
            false
        });
        self.verified = self.answers.values().flatten().filter(|h| h.verified).count() as u64;
        self.answers.iter().flat_map(|(q, l)| l.iter().map(move |h| (*q, h.facts))).collect()
    }

    /// Drops the queued searches nothing waits for any more (after a distrust): a result to
    /// verify or a refused one to decide keeps its search, a shared fact's region keeps its
    /// while `shared_waits` says a fact about it still waits (in either queue: a search
    /// given up is queued again first), and conflicts are queued again by the next frontier. So a worker that disputes many units costs the coordinator the
    /// searches under way when it is shown wrong, not one for each dispute. Searches under
    /// way run on: each settles its question either way.
    pub fn drop_unneeded_searches(&mut self, shared_waits: impl Fn(&AnyRegion) -> bool) {
        let (awaiting, refused) = (&self.awaiting, &self.refused);
        self.to_search.retain(|q| awaiting.contains(q) || refused.contains_key(q) || shared_waits(&q.region));
        self.to_search_later.retain(|q| shared_waits(&q.region));
    }

    /// Counts over the results held: answers from a cache.
    pub fn from_cache(&self) -> u64 {
        self.answers.values().flatten().filter(|h| h.from_cache).count() as u64
    }

    /// The coordinator's searches under way.
    pub fn searching(&self) -> &HashSet<Question> {
        &self.searching
    }

    /// True when nothing waits for a verification or a search of the coordinator.
    pub fn is_quiet(&self) -> bool {
        let waited_for = |q: &Question| self.awaiting.contains(q) || self.refused.contains_key(q);
        self.awaiting.is_empty()
            && self.to_search.is_empty()
            && self.refused.is_empty()
            && !self.searching.iter().any(waited_for)
    }

    /// True when `worker` holds a result on `q` that counts as its answer (one whose proof
    /// was lost does not: the unit is searched again, by anyone).
    pub fn answered_by(&self, q: &Question, worker: &str) -> bool {
        self.holds_from(q, worker) && !self.to_reprove.contains(q)
    }

    /// The next search for the coordinator to make, not `settled` already (one the answer
    /// does not wait for only when `later`); it is then under way until [`Ledger::settle`]
    /// or [`Ledger::search_dropped`].
    pub fn next_search(&mut self, settled: impl Fn(&Question) -> bool, later: bool) -> Option<Question> {
        loop {
            let (q, is_later) = match self.to_search.pop_front() {
                Some(q) => (q, false),
                None if later => (self.to_search_later.pop_front()?, true),
                None => return None,
            };
            if !settled(&q) {
                self.searching.insert(q);
                if is_later {
                    self.searching_later.insert(q);
                }
                return Some(q);
            }
        }
    }

    /// True when the search of `q` under way is one the answer does not wait for (a shared
    /// fact's region).
    pub fn is_later_search(&self, q: &Question) -> bool {
        self.searching_later.contains(q)
    }

    /// Gives up a search that could not finish (the coordinator is stopping): it is made
    /// first next time, in its queue.
    pub fn search_dropped(&mut self, q: Question) {
        if self.searching.remove(&q) {
            if self.searching_later.remove(&q) {
                self.to_search_later.push_front(q);
            } else {
                self.to_search.push_front(q);
            }
        }
    }

    /// Gives up a search of a shared fact's region that ran out of its budget; one the
    /// answer has come to wait for since (a result or a refusal on the same question) is
    /// queued again, to be made whole.
    pub fn later_search_gave_up(&mut self, q: Question) {
        self.searching.remove(&q);
        self.searching_later.remove(&q);
        if self.awaiting.contains(&q) || self.refused.contains_key(&q) {
            self.queue(q);
        }
    }

    /// The distrust events the coordinator's own answer `facts` about `region` calls for:
    /// every worker whose held or refused facts about the region contradict it.
    pub fn wrong_about(&self, region: AnyRegion, facts: Facts) -> Vec<Event> {
        let held = self
            .answers
            .iter()
            .filter(|(q, _)| q.region == region)
            .flat_map(|(q, l)| l.iter().map(move |h| (*q, &h.worker, h.facts)));
        let refused = self
            .refused
            .iter()
            .filter(|(q, _)| q.region == region)
            .flat_map(|(q, l)| l.iter().map(move |(w, f)| (*q, w, *f)));
        let mut wrong: BTreeMap<String, String> = BTreeMap::new();
        for (unit, worker, theirs) in held.chain(refused) {
            if !theirs.agrees_with(facts) {
                wrong.entry(worker.clone()).or_insert_with(|| {
                    format!("its answer to {unit} contradicts the coordinator's own search of the question")
                });
            }
        }
        wrong.into_iter().map(|(worker, reason)| Event::Distrust { worker, reason }).collect()
    }

    /// The answers held whose own proofs checked: their units and answers (certain).
    pub fn proved_answers(&self) -> impl Iterator<Item = (Question, Facts)> + '_ {
        self.answers.iter().flat_map(|(q, l)| l.iter().filter(|h| h.proof_checked).map(move |h| (*q, h.facts)))
    }

    /// Every result held: its unit, worker and answer.
    pub fn held(&self) -> impl Iterator<Item = (Question, &str, Facts)> + '_ {
        self.answers.iter().flat_map(|(q, l)| l.iter().map(move |h| (*q, h.worker.as_str(), h.facts)))
    }

    /// The proof files of the results held whose proofs were checked, sorted, each once: a
    /// result verified otherwise (by an agreeing proof or the coordinator's search) may
    /// carry a proof nobody checked, and the certificate takes no fact unchecked.
    pub fn proofs(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.answers.values().flatten().filter(|h| h.proof_checked).filter_map(|h| h.proof.clone()).collect();
        out.sort();
        out.dedup();
        out
    }
}
