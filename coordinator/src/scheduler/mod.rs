//! The scheduler: the job's state apart from I/O, built from named parts, each answering
//! for one thing:
//!
//! - [`units`]: units and leases (attempts handed out and to whom, deadlines, the branch
//!   each worker thread is on);
//! - [`workers`]: the workers of this run, known by their secrets, and those found wrong;
//! - [`ledger`]: the results held, the evidence for them (the coordinator's own searches
//!   still to make) and the refused ones;
//! - [`knowledge`]: the facts workers share with each other, verified before they go out;
//! - [`status`]: the status document.
//!
//! and the [`Top`], whose frontier says which units are worth working on. The
//! [`Scheduler`] is the facade over them, and is event-sourced: what must survive a
//! restart changes only through [`Scheduler::apply`] of a logged [`Event`], so replaying
//! the log applies the same events in the same order and a restarted coordinator reaches
//! the same facts and the same searches still to make. What a new result would do is
//! decided first, by [`Scheduler::judge`], before anything is logged
//! ([`Verdict::events`]). Leases and registrations are not logged: after a restart workers
//! register again (under the same id) and, for one lease period, heartbeats and results
//! adopt the units they were searching.
//!
//! Evidence, not reputation (docs/decisions.md has the threat model): a result is taken
//! only from the worker its unit was leased to, under the attempt it was leased with. A
//! finished result that is impossible in itself, or contradicts what the coordinator knows
//! for certain, distrusts its worker at once; one that contradicts facts other workers
//! reported is refused and its question decided by the coordinator's own search. Results
//! that decide the root or a first move, and a secret random sample of the others, are
//! verified by the coordinator's own search of the unit's question; a worker a search shows
//! wrong is distrusted: all its results are discarded, the top replanned from the rest, and
//! it is disconnected. No answer is given while a verification or a search is outstanding.

pub mod knowledge;
pub mod ledger;
pub mod status;
pub mod units;
pub mod workers;

pub use ledger::CheckPolicy;
pub use status::{Counters, MoveStatus, Status, UnitStatus};
pub use units::Grant;
pub use workers::Caller;

use crate::events::{Event, RefusedRecord, ResultRecord};
use crate::top::{Branch, Top};
use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::{Mode, Question, SharedFact, Solution};
use knowledge::Knowledge;
use ledger::{Held, Ledger};
use status::{describe, AnswerStatus, DistrustedStatus, UnitCounts, WorkerStatus};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};
use units::Units;
use workers::Workers;

/// The name under which the coordinator's own searches are logged.
pub const COORDINATOR: &str = "coordinator";

/// Unfinished results a worker may have accepted beyond twice its finished ones: an honest
/// worker's unfinished units are split into units it then finishes. Past that, its
/// unfinished results are refused and their units go to others.
const SPARE_SPLITS: u64 = 64;

/// Splits a job that verifies results may make whatever its results, and
/// [`SPLITS_A_VERIFIED`] more for every result verified: honest jobs split one to three
/// units in a hundred (the 7x9 run: 207 of 6,244 results; 3x23's nimber: 38 of 3,538). A
/// split costs the coordinator units, whoever asks for it, and identities are free: past
/// this bound, units are handed out without a node budget (searched whole) and unfinished
/// results are refused. Only verified results earn splits: answers merely held can be lies
/// that fall with their worker, and splits made cannot be taken back.
const SPLITS_FREE: u64 = 256;

/// Splits each verified result earns (one result in about 30 is verified by default: about
/// one split for every 8 answered).
const SPLITS_A_VERIFIED: u64 = 4;

/// No search is faster than this many nodes a second on one thread (fast ones here make a
/// few million): an unfinished result that came sooner after its lease than its budget at
/// this speed is absurd.
const MAX_NODES_PER_SEC: f64 = 1e8;

/// What a lease request gets.
#[derive(Debug, PartialEq)]
pub enum LeaseOutcome {
    /// Work on this unit under this attempt number, within this node budget (0: search it
    /// whole).
    Unit(Question, u64, u64),
    /// Nothing to hand out now.
    Wait,
    /// The job is solved.
    Done(Solution),
}

/// A result as it arrives, read from the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The worker's id.
    pub worker: String,
    /// The unit answered.
    pub unit: Question,
    /// The lease's attempt number.
    pub attempt: u64,
    /// What the worker knows of the region.
    pub facts: Facts,
    /// False when the node budget ran out.
    pub finished: bool,
    /// Search nodes spent.
    pub nodes: u64,
    /// Wall time in milliseconds.
    pub millis: u64,
    /// Answered from the worker's cache.
    pub from_cache: bool,
    /// In a certified job, the proof of a finished result (empty otherwise).
    pub proof: Vec<u8>,
    /// Facts about large regions the search found, for the other workers.
    pub shared: Vec<SharedFact>,
}

/// What to do with a submission.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Log the result, then apply it.
    Accept(ResultRecord),
    /// Answer OK and log nothing: the unit is answered already, or the result comes from
    /// an attempt that lost its lease or was never given one.
    Ignore(&'static str),
    /// Log and apply these events (a refusal, maybe the worker's distrust), then refuse.
    Refuse {
        /// Events to log.
        events: Vec<Event>,
        /// Why.
        reason: String,
        /// The worker is disconnected (its results are all discarded).
        disconnect: bool,
    },
}

impl Verdict {
    /// The events the verdict calls for, in the order they are to be logged and applied.
    pub fn events(&self) -> Vec<Event> {
        match self {
            Verdict::Accept(r) => vec![Event::Result(r.clone())],
            Verdict::Refuse { events, .. } => events.clone(),
            Verdict::Ignore(_) => Vec::new(),
        }
    }
}

/// What the last walk of the top found, kept until results change it.
#[derive(Default)]
struct Frontier {
    /// Open questions with their branches, in the order to hand them out.
    open: Vec<(Question, Branch)>,
    /// The same, as a set.
    needed: HashSet<Question>,
    /// Open questions that decide the root or a first move.
    decisive: HashSet<Question>,
    /// Branches whose walk stopped at its cap: a question of such a branch missing from
    /// `open` may still matter.
    truncated: HashSet<Branch>,
    /// Regions whose facts contradict each other.
    conflicts: Vec<AnyRegion>,
    /// The answer the facts give (final only when nothing is left to verify).
    answer: Option<Solution>,
    /// What is known of the root.
    root_facts: Option<Facts>,
    /// Results changed since the walk.
    stale: bool,
}

/// The scheduler (see the module documentation).
pub struct Scheduler {
    top: Top,
    mode: Mode,
    frontier: Frontier,
    /// The answer once logged: final, whatever arrives after it.
    decided: Option<Solution>,
    units: Units,
    workers: Workers,
    ledger: Ledger,
    knowledge: Knowledge,
    /// A unit's node budget: an unfinished result that spent less is absurd.
    unit_nodes: u64,
    /// Splits the job may make before it earns more ([`SPLITS_FREE`]; unbounded in a plain
    /// job that verifies nothing, whose workers are trusted threads of the coordinator's own).
    splits_free: u64,
    /// Units held long may also be leased as backups (not in a job that verifies nothing).
    backups: bool,
    /// A certified job: results carry proofs, checked before they count.
    certified: bool,
    /// When this run began (for one lease period it adopts units it did not lease).
    since: Instant,
    /// Finished units restored from the log, not done by this run (for the ETA).
    resumed_done: u64,
    /// Counters since the job began (restored from the log on resume).
    pub counters: Counters,
    /// Search nodes of all results held and of the coordinator's own searches.
    pub nodes: u64,
}

impl Scheduler {
    /// A scheduler over `top`, with leases of `lease` length and units of `unit_nodes`
    /// nodes, verifying results as `checks` says; `certified`: a certified job, whose
    /// results are verified by their proofs.
    pub fn new(
        top: Top,
        mode: Mode,
        lease: Duration,
        unit_nodes: u64,
        checks: CheckPolicy,
        certified: bool,
    ) -> Scheduler {
        // A job that verifies nothing trusts its workers (`cram solve --workers`: the
        // coordinator's own threads, on one table): no bound on splits, no backups.
        let trusting = !checks.verifies() && !certified;
        Scheduler {
            top,
            mode,
            frontier: Frontier { stale: true, ..Frontier::default() },
            decided: None,
            units: Units::new(lease),
            workers: Workers::default(),
            ledger: Ledger::new(checks, certified),
            certified,
            knowledge: Knowledge::default(),
            unit_nodes,
            splits_free: if trusting { u64::MAX } else { SPLITS_FREE },
            backups: !trusting,
            since: Instant::now(),
            resumed_done: 0,
            counters: Counters::default(),
            nodes: 0,
        }
    }

    /// True while the job may split a unit that ran out of budget ([`SPLITS_FREE`]).
    fn may_split(&self) -> bool {
        let earned = self.ledger.verified().saturating_mul(SPLITS_A_VERIFIED);
        self.counters.split < self.splits_free.saturating_add(earned)
    }

    /// The node budget of the units handed out now: the unit budget while the job may
    /// split units, else none (0: a unit is searched whole).
    fn node_budget(&self) -> u64 {
        if self.may_split() {
            self.unit_nodes
        } else {
            0
        }
    }

    /// Applies the events of a log being replayed (see [`Scheduler::apply`]).
    pub fn replay(&mut self, events: &[Event]) {
        for e in events {
            self.apply(e);
        }
        self.resumed_done = self.counters.done;
    }

    /// Applies one logged event. The only way facts and the evidence still to find change.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Result(r) => self.apply_result(r),
            Event::Refused(r) => self.apply_refused(r),
            Event::Distrust { worker, reason } => self.apply_distrust(worker, reason),
            Event::Proved { unit, worker, .. } => self.ledger.proved(*unit, worker),
            Event::Job(_) | Event::Start { .. } | Event::Imported { .. } | Event::Done(_) => {}
        }
    }

    fn apply_result(&mut self, r: &ResultRecord) {
        let q = r.unit;
        let again = if r.finished { self.ledger.holds_same(&q, &r.worker, &r.proof) } else { self.units.is_split(&q) };
        if again || self.workers.is_distrusted(&r.worker) {
            // A line logged twice, or a distrusted worker's: nothing new.
            return;
        }
        self.frontier.stale = true;
        self.nodes = self.nodes.saturating_add(r.nodes);
        if r.worker == COORDINATOR {
            self.counters.checks += 1;
            self.counters.check_nodes = self.counters.check_nodes.saturating_add(r.nodes);
            self.settle(q.region, r.facts());
            return;
        }
        self.workers.count_result(&r.worker, r.nodes, r.finished);
        self.share(&r.worker, &r.shared);
        let unit = self.units.entry(q);
        if r.finished {
            unit.answered_by(&r.worker);
        } else {
            unit.end_leases();
        }
        if !r.finished {
            unit.split = true;
            self.counters.split += 1;
            self.top.expand(q.region);
            return;
        }
        let held = Held::of(r);
        self.top.report(q.region, held.facts);
        if self.ledger.hold(q, held) {
            self.counters.done += 1;
        }
        self.counters.from_cache += u64::from(r.from_cache);
        if self.top.is_settled(&q) {
            // The coordinator searched the question already: nothing left to verify.
            let (certain, top) = (self.top.certain(&q.region), &self.top);
            self.ledger.settle(q.region, certain, |x| top.is_settled(x));
        }
    }

    /// Keeps the facts `origin` shared, each to be verified by the coordinator's own search
    /// of its region before it is handed out.
    fn share(&mut self, origin: &str, facts: &[SharedFact]) {
        self.knowledge.add(origin, facts);
        self.counters.facts_shared += facts.len() as u64;
        for f in facts {
            let certain = self.top.certain(&f.region);
            if certain.value().is_some() {
                self.knowledge.settle(f.region, certain);
            } else {
                self.ledger.queue_later(Question::nimber(f.region));
            }
        }
    }

    /// Takes the coordinator's own facts about `region` (certain).
    fn settle(&mut self, region: AnyRegion, facts: Facts) {
        self.top.settle(region, facts);
        let certain = self.top.certain(&region);
        let top = &self.top;
        self.ledger.settle(region, certain, |q| top.is_settled(q));
        self.knowledge.settle(region, certain);
    }

    fn apply_refused(&mut self, r: &RefusedRecord) {
        self.counters.refused += 1;
        self.units.entry(r.unit).refused.insert(r.worker.clone());
        if !self.workers.is_distrusted(&r.worker) && !self.top.is_settled(&r.unit) {
            self.ledger.refuse(r.unit, &r.worker, r.facts());
        }
    }

    fn apply_distrust(&mut self, worker: &str, reason: &str) {
        if !self.workers.distrust(worker, reason) {
            return;
        }
        self.units.forget_distrusted(worker);
        // What it shared and is not verified yet is dropped (what is verified is true).
        self.knowledge.forget(worker);
        // Replan: every fact from the rest.
        self.top.forget_reports();
        for (q, facts) in self.ledger.discard(worker) {
            self.top.report(q.region, facts);
        }
        let knowledge = &self.knowledge;
        self.ledger.drop_unneeded_searches(|r| knowledge.waits_on(r));
        self.counters.done = self.ledger.answered() as u64;
        self.counters.from_cache = self.ledger.from_cache();
        self.frontier.stale = true;
    }

    /// Verified facts other workers shared that `worker` has not been given yet (at most
    /// `limit`).
    pub fn shared_for(&mut self, worker: &str, limit: usize) -> Vec<SharedFact> {
        let out = self.knowledge.hand_out(worker, limit);
        self.counters.facts_handed_out += out.len() as u64;
        out
    }

    /// The top, for tests and tools that inspect what is known.
    pub fn top_mut(&mut self) -> &mut Top {
        self.frontier.stale = true;
        &mut self.top
    }

    /// Recomputes the frontier when results changed it.
    fn refresh(&mut self) {
        if !self.frontier.stale {
            return;
        }
        let f = self.top.frontier();
        for r in &f.conflicts {
            let q = Question::nimber(*r);
            if !self.top.is_settled(&q) {
                tracing::warn!(region = %r.key(), "facts about the region contradict each other; settling it by search");
                self.ledger.queue(q);
            }
        }
        self.frontier = Frontier {
            needed: f.open.iter().map(|(q, _)| *q).collect(),
            open: f.open,
            decisive: f.decisive,
            truncated: f.truncated,
            conflicts: f.conflicts,
            answer: f.answer,
            root_facts: f.root_facts,
            stale: false,
        };
    }

    /// The answer, once the facts decide it and nothing is left to verify or search, or
    /// once it is logged ([`Scheduler::decide`]).
    pub fn answer(&mut self) -> Option<Solution> {
        if self.decided.is_some() {
            return self.decided;
        }
        self.refresh();
        let quiet = self.ledger.is_quiet() && self.frontier.conflicts.is_empty();
        self.frontier.answer.filter(|_| quiet)
    }

    /// Fixes the answer once the job's log holds it: a result that arrives later (a false
    /// one, which opens a search or a conflict) cannot take it back from the workers that
    /// ask during the linger, which would then never hear that the job is done.
    pub fn decide(&mut self, solution: Solution) {
        self.decided = Some(solution);
    }

    /// True when `q` waits for a worker: open, not answered (or to be proved again), not
    /// leased.
    fn is_free(&self, q: &Question) -> bool {
        self.units.is_unleased(q)
            && (!self.ledger.is_answered(q) && !self.units.is_split(q) || self.ledger.to_reprove().contains(q))
    }

    /// True when `worker` may take `q`: it did not answer it nor have a result on it refused.
    fn may_take(&self, worker: &str, q: &Question) -> bool {
        !self.ledger.answered_by(q, worker) && !self.units.refused(q, worker)
    }

    /// The grants of earlier runs, from the state: after a restart a worker may adopt only
    /// a unit it was leased under the attempt it says, and only the recorded first holder
    /// adopts as the unit's first holder.
    pub fn granted_earlier(&mut self, grants: impl IntoIterator<Item = Grant>) {
        self.units.granted_earlier(grants);
    }

    /// True when nothing will adopt `q` again: it is answered or split, not to be proved
    /// again, and nobody holds it (its grants may be forgotten: `Store::forget_grants`).
    pub fn done_with(&self, q: &Question) -> bool {
        (self.ledger.is_answered(q) || self.units.is_split(q))
            && !self.ledger.to_reprove().contains(q)
            && self.units.is_unleased(q)
    }

    /// The grants made since the last call, for the state (`Store::record_grant`).
    pub fn take_grants(&mut self) -> Vec<Grant> {
        self.units.take_noted()
    }

    /// The proof files of results discarded with their worker that no check passed, since
    /// the last call: the state may delete them (`Store::remove_proof`).
    pub fn take_dropped_proofs(&mut self) -> Vec<String> {
        self.ledger.take_dropped_proofs()
    }

    /// The grants withdrawn since the last call, for the state (`Store::forget_grant`):
    /// none of them is among those [`Scheduler::take_grants`] returns with them.
    pub fn take_revoked_grants(&mut self) -> Vec<(Question, String)> {
        self.units.take_revoked()
    }

    /// This run starts serving at `now`: its adoption period starts then, not when the
    /// scheduler was built (replaying a long log and reloading proofs can take longer
    /// than a lease, and the units workers searched meanwhile would be thrown away).
    pub fn serving_from(&mut self, now: Instant) {
        self.since = now;
    }

    /// True while this run adopts units it did not lease (its first lease period: workers
    /// still searching units a previous run leased them).
    fn adopting(&self, now: Instant) -> bool {
        now < self.since + self.units.lease_length()
    }

    /// True when `worker` may adopt a unit now: in the run's first lease period, and with a
    /// thread free (one identity cannot take every unit a restart left, nor every backup).
    fn may_adopt(&self, worker: &str, now: Instant) -> bool {
        self.adopting(now) && self.units.held_by(worker).count() < self.workers.threads(worker) as usize
    }

    /// Registers the worker whose secret has digest `key` under `name`; refused with the
    /// reason when it was distrusted.
    pub fn register(&mut self, key: &str, name: &str, threads: u32, now: Instant) -> Result<String, String> {
        self.workers.register(key, name, threads, now)
    }

    /// Who the worker with secret digest `key` is to this coordinator; a known worker is
    /// marked seen.
    pub fn caller(&mut self, key: &str, now: Instant) -> Caller {
        self.workers.caller(key, now)
    }

    /// Hands thread `slot` of `worker` a unit nobody holds: the next of the branch it
    /// worked on last, else the most useful one of a branch no other thread is on, else the
    /// most useful one.
    pub fn lease(&mut self, worker: &str, slot: u32, now: Instant) -> LeaseOutcome {
        self.refresh();
        if let Some(a) = self.answer() {
            return LeaseOutcome::Done(a);
        }
        // A thread holds one unit at a time: a worker is given no more units than the
        // threads it registered with (one identity cannot hoard the free units).
        let threads = self.workers.threads(worker);
        if slot >= threads || self.units.held_by(worker).count() >= threads as usize {
            return LeaseOutcome::Wait;
        }
        // In a restarted run's adoption period a unit an earlier run had a first holder for
        // is kept for it (units.rs): leased to another first, it would cut that search off.
        let kept = |q: &Question| self.adopting(now) && self.units.is_reserved(q);
        // Units whose proofs were lost come first: the answer waits for them.
        let reprove = self.ledger.to_reprove().iter().copied().find(|q| self.units.is_unleased(q) && !kept(q));
        if let Some(q) = reprove {
            // Searched whole: an unfinished result of an answered unit is ignored, so a
            // budget would send it out again and again.
            let attempt = self.units.grant(q, worker, slot, None, 0, now);
            return LeaseOutcome::Unit(q, attempt, 0);
        }
        let open = &self.frontier.open;
        let free: Vec<(Question, Branch)> =
            open.iter().copied().filter(|(q, _)| self.is_free(q) && self.may_take(worker, q) && !kept(q)).collect();
        let busy: HashSet<Branch> = open.iter().filter(|(q, _)| !self.is_free(q)).map(|(_, b)| *b).collect();
        let mine = self.units.affinity(worker, slot).and_then(|b| free.iter().find(|(_, br)| *br == b));
        let pick = mine.or_else(|| free.iter().find(|(_, br)| !busy.contains(br))).or_else(|| free.first());
        if let Some(&(q, branch)) = pick {
            let budget = self.node_budget();
            let attempt = self.units.grant(q, worker, slot, Some(branch), budget, now);
            return LeaseOutcome::Unit(q, attempt, budget);
        }
        // Nothing free: a unit held long by another worker, as a backup (units.rs).
        if !self.backups {
            return LeaseOutcome::Wait;
        }
        let reprove = self.ledger.to_reprove();
        let needed = |q: &Question| {
            let open = self.frontier.needed.contains(q) && !self.ledger.is_answered(q);
            (open || reprove.contains(q)) && self.may_take(worker, q)
        };
        let Some((q, branch)) = self.units.backup_for(worker, now, needed) else { return LeaseOutcome::Wait };
        self.counters.backups += 1;
        tracing::info!(unit = %q, worker, "unit held long by another worker; leased to this one as a backup");
        // Searched whole: a backup splits nothing (only the first holder can), so with a
        // budget an honest backup would end unfinished and be given the unit again, for ever.
        let attempt = self.units.grant(q, worker, slot, branch, 0, now);
        LeaseOutcome::Unit(q, attempt, 0)
    }

    /// True when `q` still matters: its question is open (in the list, or possibly beyond
    /// a branch's cap).
    fn matters(&mut self, q: &Question) -> bool {
        if self.ledger.to_reprove().contains(q) {
            return true;
        }
        if self.ledger.is_answered(q) {
            return false;
        }
        let branch = self.units.branch_of(q);
        self.frontier.needed.contains(q)
            || branch.is_some_and(|b| self.frontier.truncated.contains(&b)) && !self.top.answers(q)
    }

    /// A heartbeat for one unit: extends the lease while nodes grow. Returns false when the
    /// worker should stop the unit (no longer needed, or its lease is someone else's). In
    /// the first lease period of a run a worker still searching a unit nobody holds keeps
    /// it (it was leased before a restart).
    pub fn heartbeat(&mut self, worker: &str, q: Question, attempt: u64, nodes: u64, now: Instant) -> bool {
        self.refresh();
        if self.answer().is_some() {
            return false;
        }
        // Answered by someone else (a backup, or an attempt whose lease expired), and nothing
        // verified it yet: the first holder searches on, so that nobody else can take a long
        // search down (its result, if it contradicts, makes the coordinator decide).
        let unverified = self.ledger.is_answered(&q) && !self.ledger.is_verified(&q) && !self.top.is_settled(&q);
        let first = self.units.get(&q).is_some_and(|u| u.is_first(worker));
        if !(self.matters(&q) || unverified && first) {
            if unverified {
                // Only this worker stops: the first holder goes on.
                self.units.drop_lease_of(&q, worker);
            } else if self.units.end_leases(&q) {
                self.counters.cancelled += 1;
                tracing::debug!(unit = %q, worker, "unit no longer needed; cancelling it");
            }
            return false;
        }
        self.units.heartbeat(q, worker, attempt, nodes, !self.certified, now)
            || self.may_adopt(worker, now) && self.units.adopt(q, worker, attempt, nodes, now)
    }

    /// Decides what a result does, before anything is logged.
    pub fn judge(&mut self, s: &Submission, now: Instant) -> Verdict {
        if self.decided.is_some() {
            // The answer is logged: nothing changes it, and what a certified job's
            // certificate is assembled from must not change either (a result taken now
            // would be reported to the top before its proof is checked).
            return Verdict::Ignore("the job is answered");
        }
        self.refresh();
        let q = s.unit;
        let record = |verify| ResultRecord {
            unit: q,
            region: q.region.key(),
            excluded: s.facts.excluded,
            upper: s.facts.upper,
            finished: s.finished,
            nodes: s.nodes,
            millis: s.millis,
            worker: s.worker.clone(),
            from_cache: s.from_cache,
            check: false,
            verify,
            proof: None,
            shared: s.shared.clone(),
        };
        let refusal = |reason: &str| {
            Event::Refused(RefusedRecord {
                unit: q,
                region: q.region.key(),
                excluded: s.facts.excluded,
                upper: s.facts.upper,
                worker: s.worker.clone(),
                reason: reason.to_string(),
            })
        };
        let distrust = |reason: &str| Event::Distrust { worker: s.worker.clone(), reason: format!("{reason} ({q})") };
        let disconnect = |reason: String| Verdict::Refuse {
            events: vec![refusal(&reason), distrust(&reason)],
            reason,
            disconnect: true,
        };
        // Only from the worker the unit was given to, under an attempt it was given (or, in
        // a run's first lease period, a unit it was searching before the restart).
        if !self.units.granted(&q, &s.worker, s.attempt) {
            let adopted = self.may_adopt(&s.worker, now)
                && self.matters(&q)
                && self.units.adopt(q, &s.worker, s.attempt, s.nodes, now);
            if !adopted {
                return Verdict::Ignore("the unit was not leased to this worker under this attempt");
            }
        }
        if let Some(bad) = s.shared.iter().find(|f| !self.top.certain(&f.region).agrees_with(f.facts)) {
            return disconnect(format!("a shared fact about {} contradicts what is certain", bad.region.key()));
        }
        let answered = self.ledger.is_answered(&q);
        if !s.finished {
            // An unfinished result splits the unit only from the attempt that holds it (or
            // when nobody does): a stale one must not close a unit a live attempt works on.
            let unit = self.units.get(&q);
            let lease = unit.and_then(|u| u.lease_of(&s.worker, s.attempt));
            let live = lease.is_some() || unit.is_none_or(|u| u.lease.is_none());
            if answered || unit.is_some_and(|u| u.split) {
                return Verdict::Ignore("the unit is answered or split already");
            }
            if !live {
                return Verdict::Ignore("the attempt lost its lease");
            }
            let adopted = lease.is_some_and(|l| l.budget.is_none());
            let budget = lease.and_then(|l| l.budget).unwrap_or(self.unit_nodes);
            let lease_age = lease.and_then(|l| l.since).map(|t| now.saturating_duration_since(t));
            let too_soon = lease_age.is_some_and(|age| age.as_secs_f64() * MAX_NODES_PER_SEC < budget as f64);
            let short = budget == 0 || s.nodes < budget || too_soon;
            if short && !adopted {
                // Not the unit's fault: it goes to another worker; three strikes and out.
                let why = if budget == 0 {
                    "the unit was leased to be searched whole: an unfinished result is absurd"
                } else {
                    "an unfinished result must have searched the unit's node budget"
                };
                self.units.drop_lease_of(&q, &s.worker);
                let out = self.workers.strike(&s.worker);
                let events = if out { vec![distrust(why)] } else { Vec::new() };
                return Verdict::Refuse { events, reason: why.to_string(), disconnect: out };
            }
            let pass_on = if unit.is_some_and(|u| u.is_backup(&s.worker)) {
                // A backup does not split a unit another worker searches on (nor cancel it).
                Some("an unfinished result of a backup; the unit's first holder searches on")
            } else if adopted {
                // Leased before a restart, with a budget not known here; and adoption hands
                // a unit to whoever says it searched it, so it splits nothing (a client
                // would split and cancel honest searches at will).
                Some("an unfinished result of a unit adopted after a restart; the unit goes to another worker")
            } else if !self.may_split() {
                Some("the job splits no more units for now; the unit goes to a worker that searches it whole")
            } else if self.workers.get_mut(&s.worker).is_some_and(|w| w.unfinished >= SPARE_SPLITS + 2 * w.finished) {
                Some("too many unfinished results for the units finished; the unit goes to another worker")
            } else {
                None
            };
            if let Some(reason) = pass_on {
                // No blame: the unit goes to another worker.
                self.units.drop_lease_of(&q, &s.worker);
                return Verdict::Refuse { events: Vec::new(), reason: reason.into(), disconnect: false };
            }
            return Verdict::Accept(record(false));
        }
        if self.units.refused(&q, &s.worker) {
            // Once is enough: each refusal costs the coordinator a search.
            return Verdict::Ignore("a result of this worker on this unit was refused already");
        }
        if let Some(reason) = self.impossible(&q, s.facts) {
            return disconnect(reason);
        }
        let reprove = self.ledger.to_reprove().contains(&q);
        // Another answer that agrees is a duplicate. One that contradicts, from the first
        // holder searching on after a backup or a late attempt answered (units.rs), is refused
        // below and the coordinator's own search decides; from anyone else it is ignored
        // (each refusal costs a search).
        let agrees = self.top.held(&q.region).agrees_with(q.query.answer_only(s.facts));
        let first = self.units.get(&q).is_some_and(|u| u.is_first(&s.worker));
        // In a certified job the first holder's agreeing answer is held too while the held
        // one is not proved: its proof is then checked, so a backup's proof that fails
        // does not take the unit's answer down with it. (In another job it is a duplicate:
        // taken on the draw, it would stand in for the held answer's verification, and two
        // identities of one client, a late attempt or backup and the first holder, would
        // pass a lie on the draw; a review showed it on a decisive unit.)
        let second_proof = self.certified && first && agrees && !self.ledger.is_verified(&q);
        if self.ledger.answered_by(&q, &s.worker) || answered && !reprove && !second_proof && (agrees || !first) {
            self.counters.duplicates += 1;
            self.units.drop_lease_of(&q, &s.worker);
            return Verdict::Ignore("the unit is answered already");
        }
        if self.certified && s.proof.is_empty() {
            let why = "a certified job's result must carry its proof";
            self.units.drop_lease_of(&q, &s.worker);
            let out = self.workers.strike(&s.worker);
            let events = if out { vec![distrust(why)] } else { Vec::new() };
            return Verdict::Refuse { events, reason: why.to_string(), disconnect: out };
        }
        if !agrees {
            self.units.drop_lease_of(&q, &s.worker);
            let reason =
                "the facts contradict facts already held; the coordinator decides by its own search".to_string();
            return Verdict::Refuse { events: vec![refusal(&reason)], reason, disconnect: false };
        }
        // A certified result is verified by its proof, always; another by the coordinator's
        // search when drawn, or always when it does not come from the unit's first holder
        // under its lease (a backup, an attempt whose lease ended): the first holder's
        // dispute may come too late (the job can end on the answer). A unit adopted after a
        // restart by the first holder the state recorded counts as leased to it (verifying
        // every adopted answer would make a restarted frontier job search again, on the
        // coordinator, every unit its workers were in the middle of); adopted by anyone
        // else, it is not vouched for.
        let decisive = self.frontier.decisive.contains(&q);
        let handed = self
            .units
            .get(&q)
            .and_then(|u| u.lease.as_ref())
            .is_some_and(|l| l.worker == s.worker && l.attempt == s.attempt && l.vouched);
        let policy = self.ledger.policy();
        let verify =
            self.certified || !self.top.is_settled(&q) && (policy.draw(decisive) || !handed && policy.verifies());
        Verdict::Accept(record(verify))
    }

    /// Judges a result and applies what the verdict calls for, with no log in between:
    /// what a simulation, a test or a fuzzer does in the job's place.
    pub fn submit_unlogged(&mut self, s: &Submission, now: Instant) -> Verdict {
        let verdict = self.judge(s, now);
        for e in verdict.events() {
            self.apply(&e);
        }
        verdict
    }

    /// Why facts sent as a finished answer to `q` cannot be true, if they cannot: they
    /// leave no value, do not answer the question, or contradict what the coordinator knows
    /// for certain (a small, paired, database or settled region; `g ≤ cells / 2`).
    fn impossible(&mut self, q: &Question, facts: Facts) -> Option<String> {
        if facts.is_contradictory() {
            return Some("the facts exclude every value".into());
        }
        if !q.query.answered_by(facts) {
            return Some("a finished result must answer its unit".into());
        }
        (!self.top.certain(&q.region).agrees_with(facts)).then(|| "the facts contradict what is certain".into())
    }

    /// True when `worker`'s result on `q` is held (not discarded with its worker).
    pub fn holds_result(&self, q: &Question, worker: &str) -> bool {
        self.ledger.holds_from(q, worker)
    }

    /// The next proof to check (certified jobs).
    pub fn next_proof(&mut self) -> Option<crate::prove::ProofDue> {
        self.ledger.next_proof()
    }

    /// The proof of `worker`'s result on `q` is gone (its file missing after a restart):
    /// the unit is searched and proved again.
    pub fn proof_lost(&mut self, q: Question) {
        self.ledger.proof_lost(q);
    }

    /// The next question for the coordinator to search itself: a result to verify, a
    /// refused one to decide, conflicting facts, and when `later` a shared fact. It is under
    /// way until its answer is applied ([`Scheduler::searched`]) or
    /// [`Scheduler::search_dropped`].
    pub fn next_search(&mut self, later: bool) -> Option<Question> {
        self.refresh();
        let top = &self.top;
        self.ledger.next_search(|q| top.is_settled(q), later)
    }

    /// Gives up a search that could not finish (the coordinator is stopping).
    pub fn search_dropped(&mut self, q: Question) {
        self.ledger.search_dropped(q);
    }

    /// The node budget of the coordinator's search of `q` now under way: the job's unit
    /// budget for a shared fact's region (a fact about any region must not hold a check
    /// thread for ever), none for a search the answer waits for.
    pub fn search_budget(&self, q: &Question) -> Option<u64> {
        self.ledger.is_later_search(q).then_some(self.unit_nodes)
    }

    /// The search of a shared fact's region ran out of its budget: the facts waiting on it
    /// are dropped unverified, and nobody is blamed (a true fact may cost more than that).
    pub fn later_search_gave_up(&mut self, q: Question) {
        self.ledger.later_search_gave_up(q);
        self.knowledge.drop_region(&q.region);
    }

    /// The events that record the coordinator's own answer `facts` to `q` (found in `nodes`
    /// nodes, `millis` ms): the result, then the distrust of every worker whose results,
    /// refused results or shared facts about the region contradict it.
    pub fn searched(&mut self, q: Question, facts: Facts, nodes: u64, millis: u64) -> Vec<Event> {
        let mut events = vec![Event::Result(ResultRecord {
            unit: q,
            region: q.region.key(),
            excluded: facts.excluded,
            upper: facts.upper,
            finished: true,
            nodes,
            millis,
            worker: COORDINATOR.into(),
            from_cache: false,
            check: true,
            verify: false,
            proof: None,
            shared: Vec::new(),
        })];
        let mut wrong: BTreeMap<String, Event> = BTreeMap::new();
        for e in self.ledger.wrong_about(q.region, facts).into_iter().chain(self.knowledge.wrong_about(q.region, facts))
        {
            if let Event::Distrust { worker, .. } = &e {
                wrong.entry(worker.clone()).or_insert(e);
            }
        }
        events.extend(wrong.into_values());
        events
    }

    /// The distrusts a proof of `worker`'s answer to `q` shows (once its `Proved` event is
    /// applied): every worker whose held or refused facts about the region contradict the
    /// proven answer. A dispute a proof decides costs no search of the coordinator (the
    /// queued one is dropped with the disputer).
    pub fn shown_wrong_by_proof(&self, q: Question, worker: &str) -> Vec<Event> {
        let proven = self.ledger.held().find(|(u, w, _)| *u == q && *w == worker).map(|(_, _, f)| f);
        proven.map_or_else(Vec::new, |facts| self.ledger.wrong_about(q.region, facts))
    }

    /// The distrusts a replayed log owes: the coordinator's own answer to a question is
    /// logged before the distrusts it shows ([`Scheduler::searched`]), and so is a checked
    /// proof ([`Scheduler::shown_wrong_by_proof`]), so a coordinator killed between the two
    /// leaves a false result held that would wait for ever for the verification it already
    /// had (or a dispute a proof decided to be searched again). A restart logs these before
    /// it serves.
    pub fn owed_verdicts(&self) -> Vec<Event> {
        let mut wrong: BTreeMap<String, Event> = BTreeMap::new();
        let proved = self.ledger.proved_answers().map(|(q, facts)| (q.region, facts));
        for (region, facts) in self.top.settled().chain(proved) {
            for e in self.ledger.wrong_about(region, facts) {
                if let Event::Distrust { worker, .. } = &e {
                    wrong.entry(worker.clone()).or_insert(e);
                }
            }
        }
        wrong.into_values().collect()
    }

    /// The proof files of the results held whose proofs were checked (a distrusted worker's
    /// are gone with its results), for a certified job's certificate.
    pub fn proofs(&self) -> Vec<String> {
        self.ledger.proofs()
    }

    /// Every region the top knows the exact value of (from results held, derivations
    /// and settlements): what a certificate's prover need not ask a solver.
    pub fn exact_values(&mut self) -> Vec<(AnyRegion, u8)> {
        self.top.exact_values()
    }

    /// Frees the leases `worker` holds on `qs` (all of them when empty); returns how many.
    pub fn release(&mut self, worker: &str, qs: &[Question]) -> u32 {
        let n = self.units.release(worker, qs);
        self.counters.released += u64::from(n);
        n
    }

    /// Forgets a worker that is shutting down (and its grants).
    pub fn leave(&mut self, worker: &str) {
        self.workers.leave(worker);
        self.units.forget_worker(worker);
        self.units.revoke(worker, &[]);
    }

    /// Expires overdue leases (their units go back to the pool) and forgets workers silent
    /// for three lease periods (and their grants); returns the expired `(unit, worker)` pairs.
    pub fn expire(&mut self, now: Instant) -> Vec<(Question, String)> {
        let out = self.units.expire(now);
        self.counters.expired += out.len() as u64;
        for gone in self.workers.forget_silent(now, self.units.lease_length() * 3) {
            self.units.revoke(&gone, &[]);
        }
        let workers = &self.workers;
        self.units.keep_workers(|id| workers.is_live(id));
        out
    }

    /// Nodes the coordinator searched itself (small regions).
    pub fn local_nodes(&self) -> u64 {
        self.top.local_nodes()
    }

    /// Nodes searched so far in units still leased (from heartbeats).
    pub fn in_flight_nodes(&self) -> u64 {
        self.units.in_flight_nodes()
    }

    /// A digest of the results held (unit, worker, answer), in a fixed order: what the
    /// answer rests on, written with it and compared on restart.
    pub fn results_digest(&self) -> String {
        let mut all: Vec<(String, String, u32, u8)> =
            self.ledger.held().map(|(q, w, f)| (q.to_string(), w.to_string(), f.excluded, f.upper)).collect();
        all.sort();
        let text: String = all.iter().map(|(q, w, e, u)| format!("{q} {w} {e} {u}\n")).collect();
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }

    /// Units waiting for a worker (in the frontier, not leased), and units leased.
    pub fn pending_and_leased(&mut self) -> (usize, usize) {
        self.refresh();
        let pending = self.frontier.open.iter().filter(|(q, _)| self.is_free(q)).count();
        (pending, self.units.leased())
    }

    /// The status document `cram status` prints.
    pub fn status(&mut self, job: &str, elapsed: Duration, nodes_per_sec: f64, now: Instant) -> Status {
        let (pending, leased) = self.pending_and_leased();
        let answer = self.answer();
        let c = self.counters.clone();
        let checking = self.ledger.awaiting().len() as u64;
        let open = pending as u64 + leased as u64 + checking;
        let done_here = c.done.saturating_sub(self.resumed_done);
        let eta_secs = (done_here > 0 && answer.is_none())
            .then(|| elapsed.as_secs_f64() / done_here as f64 * open as f64)
            .map(|s| s.round() as u64);
        let mut workers: Vec<WorkerStatus> = self
            .workers
            .iter()
            .map(|(id, w)| WorkerStatus {
                id: id.clone(),
                name: w.name.clone(),
                threads: w.threads,
                last_heartbeat_secs: now.duration_since(w.last_seen).as_secs_f64(),
                nodes: w.nodes,
                strikes: w.strikes,
                units: self.units.held_by(id).map(|q| UnitStatus::of(&q)).collect(),
            })
            .collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        Status {
            job: job.to_string(),
            mode: self.mode,
            state: if answer.is_some() { "done" } else { "running" }.to_string(),
            elapsed_secs: elapsed.as_secs_f64(),
            units: UnitCounts {
                total: c.done + c.split + open,
                pending: pending as u64,
                leased: leased as u64,
                checking,
                counters: c,
            },
            nodes: self.nodes,
            nodes_per_sec,
            root: describe(self.frontier.root_facts),
            answer: answer.map(|a| AnswerStatus { outcome: a.outcome, nimber: a.nimber }),
            eta_secs,
            eta_lower_bound: eta_secs.is_some() && !self.frontier.truncated.is_empty(),
            moves: self.top.first_moves().iter().map(MoveStatus::of).collect(),
            settling: self.ledger.searching().iter().map(|q| q.to_string()).collect(),
            distrusted: self
                .workers
                .distrusted()
                .iter()
                .map(|(w, r)| DistrustedStatus { id: w.clone(), reason: r.clone() })
                .collect(),
            workers,
        }
    }
}

#[cfg(test)]
mod tests;
