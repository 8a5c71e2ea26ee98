//! The scheduler: the job's state apart from I/O — units and their leases (attempt numbers,
//! deadlines), workers and how far each is trusted, the results held and the checks of
//! them, and the [`Top`] whose frontier says which units are worth working on.
//!
//! What must survive a restart changes only through [`Scheduler::apply`] of a logged
//! [`Event`]: replaying the log applies the same events in the same order, so a restarted
//! coordinator reaches the same facts, trust and checks. What a new result would do is
//! decided first, by [`Scheduler::judge`], before anything is logged. Leases and
//! registrations are not logged: after a restart workers register again (under the same id)
//! and heartbeats adopt the units they were searching.
//!
//! Checks (see docs/decisions.md): a finished result that is impossible in itself, or
//! contradicts what the coordinator knows for certain, distrusts its worker at once; one
//! that contradicts facts other workers reported is refused and its region settled by the
//! coordinator's own search. Every result of a worker not yet trusted, and a sample of the
//! others, is checked by a second worker; a check that disagrees is refused in turn, so the
//! coordinator settles the region and distrusts whoever was wrong. A distrusted worker's
//! results are all discarded, the top replanned from the rest, and the worker disconnected.
//! No answer is given while a check or a settlement is outstanding.

use crate::store::{Event, IndexFacts, RefusedRecord, ResultRecord, SharedRecord};
use crate::top::{Ask, Branch, Top};
use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::solver::Learned;
use cram_engine::{Mode, Outcome, Solution};
use cram_proto::Query;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// The name under which the coordinator's own searches are logged.
pub const COORDINATOR: &str = "coordinator";

/// How long a run gives workers to register (they retry within 5 s after a restart) before
/// the coordinator makes checks itself that no worker is there to make.
const REGISTER_GRACE: Duration = Duration::from_secs(5);

/// How results are spot-checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checks {
    /// A worker is trusted once this many of its results agreed with another answer;
    /// until then every result of it is checked.
    pub trust_after: u32,
    /// One result in this many of a trusted worker is checked (0: none).
    pub sample_one_in: u32,
}

impl Checks {
    /// The cluster's default: trusted after 10 confirmed results, then 1 in 20 checked.
    pub const DEFAULT: Checks = Checks { trust_after: 10, sample_one_in: 20 };
    /// No spot checks (every worker trusted from the start).
    pub const NONE: Checks = Checks { trust_after: 0, sample_one_in: 0 };
}

/// What a lease request gets.
#[derive(Debug, PartialEq)]
pub enum LeaseOutcome {
    /// Work on this unit under this attempt number; `true`: isolated (a spot check, to be
    /// answered without shared facts or the cache).
    Unit(Ask, u64, bool),
    /// Nothing to hand out now.
    Wait,
    /// The job is solved.
    Done(Solution),
}

/// Who is calling.
#[derive(Debug, PartialEq, Eq)]
pub enum Caller {
    /// A registered worker.
    Known,
    /// Not registered with this coordinator run (it restarted): register again.
    Unknown,
    /// Found wrong and disconnected, for this reason.
    Distrusted(String),
}

/// A result as it arrives, read from the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The worker's id.
    pub worker: String,
    /// The unit answered.
    pub ask: Ask,
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
    pub shared: Vec<Learned>,
    /// The workers whose shared facts the worker's tables held when it searched.
    pub uses: Vec<String>,
}

/// What to do with a submission.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Log the result, then apply it.
    Accept(ResultRecord),
    /// Answer OK and log nothing: the unit is answered already, or the result comes from
    /// an attempt that lost its lease.
    Ignore(&'static str),
    /// Log and apply these events (the refusal, maybe the worker's distrust), then refuse.
    Refuse {
        /// Events to log.
        events: Vec<Event>,
        /// Why.
        reason: String,
        /// The worker is disconnected (its results are all discarded).
        disconnect: bool,
    },
}

#[derive(Debug)]
struct Lease {
    branch: Option<Branch>,
    worker: String,
    attempt: u64,
    deadline: Instant,
    nodes: u64,
}

#[derive(Debug, Default)]
struct Unit {
    attempt: u64,
    /// An unfinished result split it.
    split: bool,
    lease: Option<Lease>,
    /// Workers whose result for it was refused: it goes to others.
    refused: HashSet<String>,
}

/// A finished result held (its worker is not distrusted).
#[derive(Debug)]
struct Held {
    worker: String,
    facts: Facts,
    /// A second answer (a check), not the unit's solve.
    check: bool,
    /// It must be confirmed by another answer before the job's answer is given.
    needs_check: bool,
    /// Who gave an answer that agrees with it (workers, or the coordinator).
    confirmed_by: Vec<String>,
    from_cache: bool,
    /// Its proof's file, in a certified job.
    proof: Option<String>,
    /// The workers whose shared facts it rests on.
    uses: Vec<String>,
}

#[derive(Debug)]
struct Worker {
    name: String,
    threads: u32,
    last_seen: Instant,
    nodes: u64,
}

/// Unit counts for progress reports.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counters {
    /// Units answered (a finished result held).
    pub done: u64,
    /// Units that ran out of budget and were split.
    pub split: u64,
    /// Leases cancelled because the unit stopped mattering.
    pub cancelled: u64,
    /// Leases that expired without a result.
    pub expired: u64,
    /// Leases handed back by workers shutting down.
    pub released: u64,
    /// Results that arrived for units already answered (not logged).
    pub duplicates: u64,
    /// Units answered from a worker's cache.
    pub from_cache: u64,
    /// Results held that were checks of another answer.
    pub checks: u64,
    /// Results refused.
    pub refused: u64,
    /// Regions the coordinator settled by its own search.
    pub settled: u64,
    /// Facts workers shared (knowledge across machines).
    pub facts_shared: u64,
    /// Shared facts handed to workers with their leases.
    pub facts_handed_out: u64,
}

/// The scheduler.
pub struct Scheduler {
    top: Top,
    mode: Mode,
    checks_policy: Checks,
    open: Vec<(Ask, Branch)>,
    needed: HashSet<Ask>,
    truncated: HashSet<Branch>,
    conflicts: Vec<AnyRegion>,
    /// The branch each worker thread (worker id, slot) worked on last.
    affinity: HashMap<(String, u32), Branch>,
    /// The answer the facts give (final only when nothing is left to check).
    walk_answer: Option<Solution>,
    /// The answer once logged: final, whatever arrives after it.
    decided: Option<Solution>,
    root_facts: Option<Facts>,
    dirty: bool,
    units: HashMap<Ask, Unit>,
    /// Finished results held, per unit.
    answers: HashMap<Ask, Vec<Held>>,
    /// Refused results per region (worker, facts), until the region is settled.
    refused: HashMap<AnyRegion, Vec<(String, Facts)>>,
    /// Units with a result that still needs a second answer.
    checks: BTreeSet<Ask>,
    /// Regions to settle by the coordinator's own search, and the one being settled.
    to_settle: VecDeque<AnyRegion>,
    settling: Option<AnyRegion>,
    /// Confirmed results per worker (its trust).
    confirmed: HashMap<String, u32>,
    distrusted: BTreeMap<String, String>,
    workers: HashMap<String, Worker>,
    /// Facts shared by each worker, in the order they came (knowledge across machines).
    shared: HashMap<String, Vec<Learned>>,
    /// How many of an origin's shared facts each worker has been given: (worker, origin).
    shared_sent: HashMap<(String, String), usize>,
    lease: Duration,
    /// When this run began (checks wait a lease period for workers before the
    /// coordinator takes them itself).
    since: Instant,
    /// Finished units restored from the log, not done by this run (for the ETA).
    resumed_done: u64,
    /// Counters since the job began (restored from the log on resume).
    pub counters: Counters,
    /// Search nodes of all results held and of the coordinator's settlements.
    pub nodes: u64,
}

/// The part of finished facts that answers `query`: the value, or `g ≠ k` (values of 32
/// and above cannot be held apart from the rest, and are kept whole).
fn answer_only(query: Query, facts: Facts) -> Facts {
    match (query, facts.value()) {
        (Query::IsValue(k), v) if k < 32 && v != Some(k) => Facts { excluded: 1 << k, upper: u8::MAX },
        (_, Some(v)) if v < 32 => Facts::exact(v),
        _ => facts,
    }
}

/// True when neither set of facts rules out the other.
fn agree(a: Facts, b: Facts) -> bool {
    !a.merge(b).is_contradictory()
}

impl Scheduler {
    /// A scheduler over `top`, with leases of `lease` length, checking results as `checks`.
    pub fn new(top: Top, mode: Mode, lease: Duration, checks: Checks) -> Scheduler {
        Scheduler {
            top,
            mode,
            checks_policy: checks,
            open: Vec::new(),
            needed: HashSet::new(),
            truncated: HashSet::new(),
            conflicts: Vec::new(),
            affinity: HashMap::new(),
            walk_answer: None,
            decided: None,
            root_facts: None,
            dirty: true,
            units: HashMap::new(),
            answers: HashMap::new(),
            refused: HashMap::new(),
            checks: BTreeSet::new(),
            to_settle: VecDeque::new(),
            settling: None,
            confirmed: HashMap::new(),
            distrusted: BTreeMap::new(),
            shared: HashMap::new(),
            shared_sent: HashMap::new(),
            workers: HashMap::new(),
            lease,
            since: Instant::now(),
            resumed_done: 0,
            counters: Counters::default(),
            nodes: 0,
        }
    }

    /// Applies the events of a log being replayed (see [`Scheduler::apply`]).
    pub fn replay(&mut self, events: &[Event]) {
        for e in events {
            self.apply(e);
        }
        self.resumed_done = self.counters.done;
    }

    /// Applies one logged event. The only way facts, trust and checks change.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::Result(r) => self.apply_result(r),
            Event::Refused(r) => self.apply_refused(r),
            Event::Distrust { worker, reason } => self.apply_distrust(worker, reason),
            Event::Job(_) | Event::Start { .. } | Event::Done(_) => {}
        }
    }

    /// Keeps the facts a result shared, for the other workers (a distrusted worker's are
    /// dropped).
    fn apply_shared(&mut self, worker: &str, facts: &[SharedRecord]) {
        if facts.is_empty() || self.distrusted.contains_key(worker) {
            return;
        }
        let list = self.shared.entry(worker.to_string()).or_default();
        list.extend(facts.iter().filter_map(SharedRecord::learned));
        self.counters.facts_shared += facts.len() as u64;
    }

    /// Facts other workers shared that `worker` has not been given yet (at most `limit`),
    /// each with its origin; only from workers trusted now (a false fact in a table spreads
    /// to every answer that uses it), never for an isolated unit.
    pub fn shared_for(&mut self, worker: &str, limit: usize) -> Vec<(Learned, String)> {
        let mut out = Vec::new();
        let mut origins: Vec<String> = self.shared.keys().filter(|o| o.as_str() != worker).cloned().collect();
        origins.sort();
        for origin in origins {
            if out.len() >= limit || !self.trusted(&origin) {
                continue;
            }
            let facts = &self.shared[&origin];
            let sent = self.shared_sent.entry((worker.to_string(), origin.clone())).or_insert(0);
            let take = (facts.len() - *sent).min(limit - out.len());
            out.extend(facts[*sent..*sent + take].iter().map(|&l| (l, origin.clone())));
            *sent += take;
        }
        self.counters.facts_handed_out += out.len() as u64;
        out
    }

    /// The workers found wrong (a worker that loaded facts they shared must forget them).
    pub fn distrusted_workers(&self) -> Vec<String> {
        self.distrusted.keys().cloned().collect()
    }

    fn apply_result(&mut self, r: &ResultRecord) {
        let Some((region, query)) = cram_proto::parse_unit_id(&r.unit) else { return };
        let ask = Ask { region, query };
        let again =
            if r.finished { self.holds_from(&ask, &r.worker) } else { self.units.get(&ask).is_some_and(|u| u.split) };
        if again || self.distrusted.contains_key(&r.worker) || r.uses.iter().any(|w| self.distrusted.contains_key(w)) {
            // A line logged twice, or a distrusted worker's (or resting on one's facts):
            // nothing new.
            return;
        }
        self.dirty = true;
        self.apply_shared(&r.worker, &r.shared);
        self.nodes = self.nodes.saturating_add(r.nodes);
        if let Some(w) = self.workers.get_mut(&r.worker) {
            w.nodes = w.nodes.saturating_add(r.nodes);
        }
        if r.worker == COORDINATOR {
            if let Some(v) = r.facts().value() {
                self.settle(region, v);
            }
            return;
        }
        let unit = self.units.entry(ask).or_default();
        unit.lease = None;
        if !r.finished {
            unit.split = true;
            self.counters.split += 1;
            self.top.expand(region);
            return;
        }
        let needs_check = !r.check && self.needs_check(&r.worker, &ask);
        // What a check compares is the answer to the unit's question: of a result to be
        // checked, or a check by a worker not trusted, only that answer is used.
        let unchecked = needs_check || r.check && !self.trusted(&r.worker);
        let facts = if unchecked { answer_only(query, r.facts()) } else { r.facts() };
        let mut held = Held {
            worker: r.worker.clone(),
            facts,
            check: r.check,
            needs_check,
            confirmed_by: Vec::new(),
            from_cache: r.from_cache,
            proof: r.proof.clone(),
            uses: r.uses.clone(),
        };
        let others = self.answers.entry(ask).or_default();
        for h in others.iter_mut().filter(|h| agree(h.facts, held.facts)) {
            h.confirmed_by.push(held.worker.clone());
            held.confirmed_by.push(h.worker.clone());
            if h.confirmed_by.len() == 1 {
                *self.confirmed.entry(h.worker.clone()).or_insert(0) += 1;
            }
        }
        if !held.confirmed_by.is_empty() {
            *self.confirmed.entry(held.worker.clone()).or_insert(0) += 1;
        }
        if others.is_empty() {
            self.counters.done += 1;
        }
        self.counters.checks += u64::from(held.check);
        self.counters.from_cache += u64::from(held.from_cache && !held.check);
        others.push(held);
        self.top.report(region, facts);
        self.update_check(ask);
    }

    fn apply_refused(&mut self, r: &RefusedRecord) {
        let Some((region, query)) = cram_proto::parse_unit_id(&r.unit) else { return };
        self.counters.refused += 1;
        self.units.entry(Ask { region, query }).or_default().refused.insert(r.worker.clone());
        if self.distrusted.contains_key(&r.worker) || self.top.is_settled(&region) {
            return;
        }
        self.refused.entry(region).or_default().push((r.worker.clone(), r.facts()));
        self.queue_settlement(region);
    }

    fn apply_distrust(&mut self, worker: &str, reason: &str) {
        if self.distrusted.insert(worker.to_string(), reason.to_string()).is_some() {
            return;
        }
        self.leave(worker);
        // What it shared is not handed out again; workers that loaded some forget it.
        self.shared.remove(worker);
        self.shared_sent.retain(|(_, origin), _| origin != worker);
        for unit in self.units.values_mut() {
            if unit.lease.as_ref().is_some_and(|l| l.worker == worker) {
                unit.lease = None;
            }
            // Refusals may have been the distrusted worker's fault: everyone may try again.
            unit.refused.clear();
        }
        for list in self.refused.values_mut() {
            list.retain(|(w, _)| w != worker);
        }
        self.refused.retain(|_, list| !list.is_empty());
        // Replan: every fact from the rest, trust and checks counted again.
        self.top.forget_reports();
        self.answers.retain(|_, list| {
            list.retain(|h| h.worker != worker && !h.uses.iter().any(|w| w == worker));
            !list.is_empty()
        });
        self.confirmed.clear();
        self.checks.clear();
        let asks: Vec<Ask> = self.answers.keys().copied().collect();
        for ask in asks {
            let list = self.answers.get_mut(&ask).expect("listed above");
            for h in list.iter_mut() {
                h.confirmed_by.retain(|w| w != worker);
                if !h.confirmed_by.is_empty() {
                    *self.confirmed.entry(h.worker.clone()).or_insert(0) += 1;
                }
                self.top.report(ask.region, h.facts);
            }
            self.update_check(ask);
        }
        self.counters.done = self.answers.len() as u64;
        self.counters.from_cache = self.answers.values().flatten().filter(|h| h.from_cache && !h.check).count() as u64;
        self.counters.checks = self.answers.values().flatten().filter(|h| h.check).count() as u64;
        self.dirty = true;
    }

    /// Takes the coordinator's own value of `region`: it confirms every answer about the
    /// region that agrees with it (the others' workers are distrusted by the events
    /// [`Scheduler::settlement`] returns).
    fn settle(&mut self, region: AnyRegion, value: u8) {
        self.top.settle(region, value);
        self.counters.settled += 1;
        self.refused.remove(&region);
        self.to_settle.retain(|r| *r != region);
        if self.settling == Some(region) {
            self.settling = None;
        }
        let truth = Facts::exact(value);
        let asks: Vec<Ask> = self.answers.keys().filter(|a| a.region == region).copied().collect();
        for ask in asks {
            for h in self.answers.get_mut(&ask).expect("listed above") {
                if agree(h.facts, truth) {
                    if h.confirmed_by.is_empty() {
                        *self.confirmed.entry(h.worker.clone()).or_insert(0) += 1;
                    }
                    h.confirmed_by.push(COORDINATOR.to_string());
                }
            }
            self.update_check(ask);
        }
    }

    /// Lists `ask` among the checks while one of its answers needs a second one.
    fn update_check(&mut self, ask: Ask) {
        let open = self.answers.get(&ask).is_some_and(|l| l.iter().any(|h| h.needs_check && h.confirmed_by.is_empty()));
        if open {
            self.checks.insert(ask);
        } else {
            self.checks.remove(&ask);
        }
    }

    /// True when `worker` already has an answer to `ask` held.
    fn holds_from(&self, ask: &Ask, worker: &str) -> bool {
        self.answers.get(ask).is_some_and(|l| l.iter().any(|h| h.worker == worker))
    }

    /// Whether a new result of `worker` on `ask` is to be checked: always until the worker
    /// is trusted, then one in [`Checks::sample_one_in`] (chosen by a hash of both names, so
    /// a replay chooses the same).
    fn needs_check(&self, worker: &str, ask: &Ask) -> bool {
        let p = self.checks_policy;
        if !self.trusted(worker) {
            return true;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (worker, ask.id()).hash(&mut h);
        p.sample_one_in > 0 && h.finish().is_multiple_of(u64::from(p.sample_one_in))
    }

    /// True when enough of `worker`'s results were confirmed.
    fn trusted(&self, worker: &str) -> bool {
        self.confirmed.get(worker).copied().unwrap_or(0) >= self.checks_policy.trust_after
    }

    /// How many results of `worker` wait for their checks.
    fn unchecked_of(&self, worker: &str) -> usize {
        let waiting = |h: &&Held| h.worker == worker && h.needs_check && h.confirmed_by.is_empty();
        self.checks.iter().filter(|a| self.answers.get(a).is_some_and(|l| l.iter().any(|h| waiting(&h)))).count()
    }

    fn queue_settlement(&mut self, region: AnyRegion) {
        if self.settling != Some(region) && !self.to_settle.contains(&region) && !self.top.is_settled(&region) {
            self.to_settle.push_back(region);
        }
    }

    /// The top, for tests and tools that inspect what is known.
    pub fn top_mut(&mut self) -> &mut Top {
        self.dirty = true;
        &mut self.top
    }

    /// Recomputes the frontier when results changed it.
    fn refresh(&mut self) {
        if !self.dirty {
            return;
        }
        let f = self.top.frontier();
        self.walk_answer = f.answer;
        self.needed = f.open.iter().map(|(a, _)| *a).collect();
        self.truncated = f.truncated;
        self.open = f.open;
        self.root_facts = f.root_facts;
        for r in &f.conflicts {
            tracing::warn!(region = %r.key(), "facts about the region contradict each other; settling it by search");
        }
        for r in f.conflicts.iter().copied() {
            self.queue_settlement(r);
        }
        self.conflicts = f.conflicts;
        self.dirty = false;
    }

    /// The answer, once the facts decide it and nothing is left to check or settle, or
    /// once it is logged ([`Scheduler::decide`]).
    pub fn answer(&mut self) -> Option<Solution> {
        if self.decided.is_some() {
            return self.decided;
        }
        self.refresh();
        let settled =
            self.checks.is_empty() && self.to_settle.is_empty() && self.settling.is_none() && self.conflicts.is_empty();
        self.walk_answer.filter(|_| settled)
    }

    /// Fixes the answer once the job's log holds it: a result that arrives later (a false
    /// one, which opens a check or a conflict) cannot take it back from the workers that
    /// ask during the linger, which would then never hear that the job is done.
    pub fn decide(&mut self, solution: Solution) {
        self.decided = Some(solution);
    }

    /// True when `ask` waits for a worker: open, not answered, not leased.
    fn is_free(&self, ask: &Ask) -> bool {
        self.units.get(ask).is_none_or(|u| !u.split && u.lease.is_none()) && !self.answers.contains_key(ask)
    }

    /// True when `worker` may take `ask`: it did not answer it nor have a result on it refused.
    fn may_take(&self, worker: &str, ask: &Ask) -> bool {
        !self.holds_from(ask, worker) && self.units.get(ask).is_none_or(|u| !u.refused.contains(worker))
    }

    /// Registers a worker (`name#instance`: the same id for the same process across
    /// coordinator restarts); refused with the reason when it was distrusted.
    pub fn register(&mut self, name: &str, instance: &str, threads: u32, now: Instant) -> Result<String, String> {
        let id = format!("{name}#{instance}");
        if let Some(reason) = self.distrusted.get(&id) {
            return Err(reason.clone());
        }
        let worker = Worker { name: name.to_string(), threads, last_seen: now, nodes: 0 };
        self.workers.insert(id.clone(), worker);
        Ok(id)
    }

    /// Who `worker` is to this coordinator; a known worker is marked seen.
    pub fn caller(&mut self, worker: &str, now: Instant) -> Caller {
        if let Some(w) = self.workers.get_mut(worker) {
            w.last_seen = now;
            return Caller::Known;
        }
        match self.distrusted.get(worker) {
            Some(reason) => Caller::Distrusted(reason.clone()),
            None => Caller::Unknown,
        }
    }

    /// Hands thread `slot` of `worker` a unit nobody holds: a check it may make first, then
    /// the next of the branch it worked on last, else the most useful one of a branch no
    /// other thread is on, else the most useful one. A worker not yet trusted gets no new
    /// unit while [`Checks::trust_after`] of its results wait for their checks: it cannot
    /// run far ahead of what can be checked.
    pub fn lease(&mut self, worker: &str, slot: u32, now: Instant) -> LeaseOutcome {
        self.refresh();
        if let Some(a) = self.answer() {
            return LeaseOutcome::Done(a);
        }
        let check = self
            .checks
            .iter()
            .copied()
            .find(|a| self.may_take(worker, a) && self.units.get(a).is_none_or(|u| u.lease.is_none()));
        let throttled =
            self.unchecked_of(worker) >= self.checks_policy.trust_after.max(1) as usize && !self.trusted(worker);
        let isolated = check.is_some();
        let pick = check.map(|a| (a, None)).or_else(|| {
            if throttled {
                return None;
            }
            let free: Vec<(Ask, Branch)> =
                self.open.iter().copied().filter(|(a, _)| self.is_free(a) && self.may_take(worker, a)).collect();
            let busy: HashSet<Branch> = self.open.iter().filter(|(a, _)| !self.is_free(a)).map(|(_, b)| *b).collect();
            let mine = self.affinity.get(&(worker.to_string(), slot)).and_then(|b| free.iter().find(|(_, br)| br == b));
            let pick = mine.or_else(|| free.iter().find(|(_, br)| !busy.contains(br))).or_else(|| free.first());
            pick.map(|&(a, b)| (a, Some(b)))
        });
        let Some((ask, branch)) = pick else { return LeaseOutcome::Wait };
        if let Some(b) = branch {
            self.affinity.insert((worker.to_string(), slot), b);
        }
        let unit = self.units.entry(ask).or_default();
        unit.attempt += 1;
        unit.lease = Some(Lease {
            branch,
            worker: worker.to_string(),
            attempt: unit.attempt,
            deadline: now + self.lease,
            nodes: 0,
        });
        LeaseOutcome::Unit(ask, unit.attempt, isolated)
    }

    /// A heartbeat for one unit: extends the lease while nodes grow. Returns false when the
    /// worker should stop the unit (no longer needed, or its lease is someone else's). A
    /// worker still searching a unit whose lease this coordinator does not know (it
    /// restarted) keeps it when nobody else holds it.
    pub fn heartbeat(&mut self, worker: &str, ask: Ask, attempt: u64, nodes: u64, now: Instant) -> bool {
        self.refresh();
        if self.answer().is_some() {
            return false;
        }
        let branch = self.units.get(&ask).and_then(|u| u.lease.as_ref()).and_then(|l| l.branch);
        let answered = self.answers.contains_key(&ask);
        // A unit matters while its question is open (in the list, or possibly beyond a
        // branch's cap), or while it is a check this worker may make.
        let needed = if answered {
            self.checks.contains(&ask) && self.may_take(worker, &ask)
        } else {
            self.needed.contains(&ask) || branch.is_some_and(|b| self.truncated.contains(&b)) && !self.top.answers(&ask)
        };
        if !needed {
            if self.units.get_mut(&ask).and_then(|u| u.lease.take()).is_some() {
                self.counters.cancelled += 1;
                tracing::debug!(unit = %ask.id(), worker, "unit no longer needed; cancelling it");
            }
            return false;
        }
        let unit = self.units.entry(ask).or_default();
        if unit.split {
            return false;
        }
        match &mut unit.lease {
            Some(l) if l.worker == worker && l.attempt == attempt => {
                if nodes > l.nodes {
                    l.deadline = now + self.lease;
                    l.nodes = nodes;
                }
                true
            }
            Some(_) => false,
            None => {
                unit.attempt = unit.attempt.max(attempt);
                unit.lease = Some(Lease {
                    branch: None,
                    worker: worker.to_string(),
                    attempt,
                    deadline: now + self.lease,
                    nodes,
                });
                tracing::info!(unit = %ask.id(), worker, attempt, "adopted a unit the worker was already searching");
                true
            }
        }
    }

    /// Decides what a result does, before anything is logged.
    pub fn judge(&mut self, s: &Submission) -> Verdict {
        let ask = s.ask;
        let record = |check| ResultRecord {
            unit: ask.id(),
            region: ask.region.key(),
            excluded: s.facts.excluded,
            upper: s.facts.upper,
            finished: s.finished,
            nodes: s.nodes,
            millis: s.millis,
            worker: s.worker.clone(),
            from_cache: s.from_cache,
            check,
            proof: None,
            shared: s.shared.iter().map(SharedRecord::of).collect(),
            uses: s.uses.clone(),
        };
        let refusal = |reason: &str| {
            Event::Refused(RefusedRecord {
                unit: ask.id(),
                region: ask.region.key(),
                excluded: s.facts.excluded,
                upper: s.facts.upper,
                worker: s.worker.clone(),
                reason: reason.to_string(),
            })
        };
        if s.uses.iter().any(|w| self.distrusted.contains_key(w)) {
            // Searched with a table that held a distrusted worker's facts: the unit goes
            // to whoever asks next.
            if let Some(u) = self.units.get_mut(&ask).filter(|u| u.lease.as_ref().is_some_and(|l| l.worker == s.worker))
            {
                u.lease = None;
            }
            return Verdict::Ignore("the result rests on facts shared by a distrusted worker");
        }
        if let Some(bad) = s.shared.iter().find(|l| !agree(self.top.certain(&l.region), l.facts)) {
            let reason = format!("a shared fact about {} contradicts what is certain", bad.region.key());
            let distrust = Event::Distrust { worker: s.worker.clone(), reason: format!("{reason} ({})", ask.id()) };
            return Verdict::Refuse { events: vec![refusal(&reason), distrust], reason, disconnect: true };
        }
        let answered = self.answers.contains_key(&ask);
        if !s.finished {
            // An unfinished result splits the unit only from the attempt that holds it (or
            // when nobody does): a stale one must not close a unit a live attempt works on.
            let unit = self.units.get(&ask);
            let live =
                unit.and_then(|u| u.lease.as_ref()).is_none_or(|l| l.worker == s.worker && l.attempt == s.attempt);
            return match () {
                _ if answered || unit.is_some_and(|u| u.split) => {
                    Verdict::Ignore("the unit is answered or split already")
                }
                _ if !live => Verdict::Ignore("the attempt lost its lease"),
                _ => Verdict::Accept(record(false)),
            };
        }
        if let Some(reason) = self.impossible(&ask, s.facts) {
            let distrust = Event::Distrust { worker: s.worker.clone(), reason: format!("{reason} ({})", ask.id()) };
            return Verdict::Refuse { events: vec![refusal(&reason), distrust], reason, disconnect: true };
        }
        if self.holds_from(&ask, &s.worker) || answered && !self.checks.contains(&ask) {
            self.counters.duplicates += 1;
            return Verdict::Ignore("the unit is answered already");
        }
        if !agree(self.top.held(&ask.region), s.facts) {
            let reason = "the facts contradict facts already held; the region is settled by search".to_string();
            return Verdict::Refuse { events: vec![refusal(&reason)], reason, disconnect: false };
        }
        Verdict::Accept(record(answered))
    }

    /// Why facts sent as a finished answer to `ask` cannot be true, if they cannot: they
    /// leave no value, do not answer the question, or contradict what the coordinator knows
    /// for certain (a small, paired, database or settled region; `g ≤ cells / 2`).
    fn impossible(&mut self, ask: &Ask, facts: Facts) -> Option<String> {
        if facts.is_contradictory() {
            return Some("the facts exclude every value".into());
        }
        if !ask.query.answered_by(facts) {
            return Some("a finished result must answer its unit".into());
        }
        (!agree(self.top.certain(&ask.region), facts)).then(|| "the facts contradict what is certain".into())
    }

    /// The next region for the coordinator to settle by its own search, when none is being
    /// settled: one whose results were refused or whose facts conflict, else one a check
    /// waits on that no live worker may make (not in the first moments of a run, while
    /// workers register again after a restart).
    pub fn next_settlement(&mut self, now: Instant) -> Option<AnyRegion> {
        self.refresh();
        if self.settling.is_some() {
            return None;
        }
        while let Some(r) = self.to_settle.pop_front() {
            let disputed = self.conflicts.contains(&r) || self.refused.contains_key(&r);
            if disputed && !self.top.is_settled(&r) {
                self.settling = Some(r);
                return Some(r);
            }
        }
        if now < self.since + self.lease.min(REGISTER_GRACE) {
            return None;
        }
        // Live: heard from within half a lease (a busy worker heartbeats every quarter).
        let live: Vec<&String> = self
            .workers
            .iter()
            .filter(|(_, w)| now.duration_since(w.last_seen) < self.lease / 2)
            .map(|(id, _)| id)
            .collect();
        let orphan = self.checks.iter().find(|a| !live.iter().any(|w| self.may_take(w, a))).copied();
        if let Some(a) = orphan {
            self.settling = Some(a.region);
        }
        orphan.map(|a| a.region)
    }

    /// The proof files of the results held (a distrusted worker's are gone with its
    /// results), for a certified job's certificate.
    pub fn proofs(&self) -> Vec<String> {
        let mut out: Vec<String> = self.answers.values().flatten().filter_map(|h| h.proof.clone()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// Every region the top knows the exact value of (from results held, derivations
    /// and settlements): what a certificate's prover need not ask a solver.
    pub fn exact_values(&mut self) -> Vec<(AnyRegion, u8)> {
        self.top.exact_values()
    }

    /// The events that record the coordinator's own value of `region` (found in `nodes`
    /// nodes, `millis` ms): the result, then the distrust of every worker whose held or
    /// refused facts about the region contradict it.
    pub fn settlement(&mut self, region: AnyRegion, value: u8, nodes: u64, millis: u64) -> Vec<Event> {
        let truth = Facts::exact(value);
        let mut events = vec![Event::Result(ResultRecord {
            unit: cram_proto::unit_id(&region, Query::Nimber),
            region: region.key(),
            excluded: truth.excluded,
            upper: truth.upper,
            finished: true,
            nodes,
            millis,
            worker: COORDINATOR.into(),
            from_cache: false,
            check: true,
            proof: None,
            shared: Vec::new(),
            uses: Vec::new(),
        })];
        let held = self
            .answers
            .iter()
            .filter(|(a, _)| a.region == region)
            .flat_map(|(a, l)| l.iter().map(move |h| (a.id(), &h.worker, h.facts)));
        let refused = self
            .refused
            .get(&region)
            .into_iter()
            .flatten()
            .map(|(w, f)| (cram_proto::unit_id(&region, Query::Nimber), w, *f));
        let mut wrong: BTreeMap<String, String> = BTreeMap::new();
        for (unit, worker, facts) in held.chain(refused) {
            if !agree(facts, truth) {
                wrong.entry(worker.clone()).or_insert_with(|| {
                    format!("its answer to {unit} contradicts the coordinator's own search (g = {value})")
                });
            }
        }
        events.extend(wrong.into_iter().map(|(worker, reason)| Event::Distrust { worker, reason }));
        events
    }

    /// Gives up a settlement that could not finish (the coordinator is stopping).
    pub fn settlement_dropped(&mut self) {
        if let Some(r) = self.settling.take() {
            self.to_settle.push_front(r);
        }
    }

    /// Frees the leases `worker` holds on `units` (all of them when empty); returns how many.
    pub fn release(&mut self, worker: &str, units: &[Ask]) -> u32 {
        let mut n = 0;
        for (ask, unit) in self.units.iter_mut() {
            let mine = unit.lease.as_ref().is_some_and(|l| l.worker == worker);
            if mine && (units.is_empty() || units.contains(ask)) {
                unit.lease = None;
                n += 1;
            }
        }
        self.counters.released += u64::from(n);
        n
    }

    /// Forgets a worker that is shutting down.
    pub fn leave(&mut self, worker: &str) {
        self.workers.remove(worker);
        self.affinity.retain(|(w, _), _| w != worker);
    }

    /// Expires overdue leases (their units go back to the pool) and forgets workers silent
    /// for three lease periods; returns the expired `(unit, worker)` pairs.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (ask, unit) in self.units.iter_mut() {
            if unit.lease.as_ref().is_some_and(|l| l.deadline <= now) {
                let l = unit.lease.take().expect("checked above");
                out.push((ask.id(), l.worker));
            }
        }
        self.counters.expired += out.len() as u64;
        let silent = self.lease * 3;
        self.workers.retain(|id, w| {
            let alive = now.duration_since(w.last_seen) < silent;
            if !alive {
                tracing::warn!(worker = %id, "worker silent for {:?}; forgetting it", silent);
            }
            alive
        });
        let workers = &self.workers;
        self.affinity.retain(|(id, _), _| workers.contains_key(id));
        out
    }

    /// Nodes the coordinator searched itself (small regions).
    pub fn local_nodes(&self) -> u64 {
        self.top.local_nodes()
    }

    /// Nodes searched so far in units still leased (from heartbeats).
    pub fn in_flight_nodes(&self) -> u64 {
        self.units.values().filter_map(|u| u.lease.as_ref()).fold(0u64, |n, l| n.saturating_add(l.nodes))
    }

    /// The facts the sled index mirrors: merged facts of the results held and settled, and
    /// the regions split.
    pub fn index_facts(&mut self) -> IndexFacts {
        let mut facts: HashMap<AnyRegion, Facts> = HashMap::new();
        for (ask, list) in &self.answers {
            for h in list {
                let e = facts.entry(ask.region).or_insert(Facts::UNKNOWN);
                *e = e.merge(h.facts);
            }
        }
        let splits = self.units.iter().filter(|(_, u)| u.split).map(|(a, _)| a.region).collect();
        IndexFacts { facts, splits }
    }

    /// Units waiting for a worker (in the frontier, not leased), and units leased.
    pub fn pending_and_leased(&mut self) -> (usize, usize) {
        self.refresh();
        let leased = self.units.values().filter(|u| u.lease.is_some()).count();
        let pending = self.open.iter().filter(|(ask, _)| self.is_free(ask)).count();
        (pending, leased)
    }

    /// The status document `cram status` prints.
    pub fn status(&mut self, job: &str, elapsed: Duration, nodes_per_sec: f64, now: Instant) -> Status {
        let (pending, leased) = self.pending_and_leased();
        let answer = self.answer();
        let c = self.counters.clone();
        let open = (pending + leased + self.checks.len()) as u64;
        let total = c.done + c.split + open;
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
                trusted: self.trusted(id),
                units: self
                    .units
                    .iter()
                    .filter(|(_, u)| u.lease.as_ref().is_some_and(|l| &l.worker == id))
                    .map(|(a, _)| a.id())
                    .collect(),
            })
            .collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        Status {
            job: job.to_string(),
            mode: crate::mode_name(self.mode).to_string(),
            state: if answer.is_some() { "done" } else { "running" }.to_string(),
            elapsed_secs: elapsed.as_secs_f64(),
            units: UnitCounts {
                total,
                pending: pending as u64,
                leased: leased as u64,
                checking: self.checks.len() as u64,
                counters: c,
            },
            nodes: self.nodes,
            nodes_per_sec,
            root: describe(self.root_facts),
            answer: answer.map(|a| AnswerStatus { outcome: a.outcome, nimber: a.nimber }),
            eta_secs,
            settling: self.settling.map(|r| r.key()),
            distrusted: self
                .distrusted
                .iter()
                .map(|(w, r)| DistrustedStatus { id: w.clone(), reason: r.clone() })
                .collect(),
            workers,
        }
    }
}

/// Text for what is known of the root's nimber, e.g. `g ≠ 0, 2; g ≤ 5`.
pub fn describe(b: Option<Facts>) -> String {
    let Some(b) = b else { return "no region to search".into() };
    if b.is_contradictory() {
        return "contradictory facts (being settled)".into();
    }
    if let Some(v) = b.value() {
        return format!("g = {v}");
    }
    let not: Vec<String> = (0..32).filter(|&j| b.excluded >> j & 1 == 1).map(|j: u32| j.to_string()).collect();
    let mut parts = Vec::new();
    if !not.is_empty() {
        parts.push(format!("g ≠ {}", not.join(", ")));
    }
    if b.upper < u8::MAX {
        parts.push(format!("g ≤ {}", b.upper));
    }
    if parts.is_empty() {
        "nothing known yet".into()
    } else {
        parts.join("; ")
    }
}

/// `cram status` output.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The job's spec.
    pub job: String,
    /// `nimber` or `outcome`.
    pub mode: String,
    /// `running` or `done`.
    pub state: String,
    /// Seconds since this coordinator started.
    pub elapsed_secs: f64,
    /// Unit counts.
    pub units: UnitCounts,
    /// Search nodes over all recorded results.
    pub nodes: u64,
    /// Recent search speed over all workers.
    pub nodes_per_sec: f64,
    /// What is known of the root (its largest region).
    pub root: String,
    /// The answer, once known.
    pub answer: Option<AnswerStatus>,
    /// A rough estimate of the seconds left (the frontier grows as the search advances).
    pub eta_secs: Option<u64>,
    /// The region the coordinator is settling by its own search.
    pub settling: Option<String>,
    /// Workers found wrong, with the reason.
    pub distrusted: Vec<DistrustedStatus>,
    /// Workers heard from recently.
    pub workers: Vec<WorkerStatus>,
}

/// Unit counts in the status.
#[derive(Debug, Serialize)]
pub struct UnitCounts {
    /// Units recorded or open now.
    pub total: u64,
    /// Open units nobody holds.
    pub pending: u64,
    /// Open units held by workers.
    pub leased: u64,
    /// Answered units waiting for a second answer.
    pub checking: u64,
    /// Lifetime counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// The answer in the status.
#[derive(Debug, Serialize)]
pub struct AnswerStatus {
    /// Who wins.
    pub outcome: Outcome,
    /// The nimber, when known.
    pub nimber: Option<u8>,
}

/// A distrusted worker in the status.
#[derive(Debug, Serialize)]
pub struct DistrustedStatus {
    /// Its id.
    pub id: String,
    /// What showed it wrong.
    pub reason: String,
}

/// One worker in the status.
#[derive(Debug, Serialize)]
pub struct WorkerStatus {
    /// Id given at registration.
    pub id: String,
    /// Name the worker gave.
    pub name: String,
    /// Search threads.
    pub threads: u32,
    /// Seconds since its last call.
    pub last_heartbeat_secs: f64,
    /// Nodes of its recorded results (this coordinator run).
    pub nodes: u64,
    /// Enough of its results were confirmed that only a sample is checked.
    pub trusted: bool,
    /// Units it holds.
    pub units: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use cram_engine::{Board, Config, DbSet, Solver};
    use std::sync::Arc;

    const NO_CHECKS: Checks = Checks::NONE;

    fn scheduler(checks: Checks) -> Scheduler {
        let top = Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), 2, false);
        Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), checks)
    }

    fn oracle() -> Solver {
        Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()))
    }

    /// The true answer to `ask`, as a worker would send it.
    fn truth(ask: Ask) -> Facts {
        let v = oracle().nimber(ask.region).unwrap();
        match ask.query {
            Query::IsValue(k) if k != v => {
                let mut f = Facts::UNKNOWN;
                f.exclude(k);
                f
            }
            _ => Facts::exact(v),
        }
    }

    fn sub(worker: &str, ask: Ask, attempt: u64, facts: Facts, finished: bool, nodes: u64) -> Submission {
        Submission {
            worker: worker.into(),
            ask,
            attempt,
            facts,
            finished,
            nodes,
            millis: 1,
            from_cache: false,
            proof: Vec::new(),
            shared: Vec::new(),
            uses: Vec::new(),
        }
    }

    /// Does what the job's task does with a submission, without the store; returns the
    /// events it would log.
    fn submit(s: &mut Scheduler, x: Submission) -> (Verdict, Vec<Event>) {
        let verdict = s.judge(&x);
        let events = match &verdict {
            Verdict::Accept(r) => vec![Event::Result(r.clone())],
            Verdict::Refuse { events, .. } => events.clone(),
            Verdict::Ignore(_) => vec![],
        };
        for e in &events {
            s.apply(e);
        }
        (verdict, events)
    }

    fn unit(s: &mut Scheduler, worker: &str, slot: u32, t: Instant) -> (Ask, u64) {
        match s.lease(worker, slot, t) {
            LeaseOutcome::Unit(a, n, _) => (a, n),
            other => panic!("no unit for {worker}: {other:?}"),
        }
    }

    #[test]
    fn leases_expire_are_reissued_with_a_new_attempt_and_results_count_once() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let b = s.register("b", "2", 1, t0).unwrap();
        let (u1, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
        let (u2, 1) = unit(&mut s, &b, 0, t0) else { panic!() };
        assert_ne!(u1, u2, "two workers get different units");
        // Progress extends a lease; without it the lease expires.
        assert!(s.heartbeat(&a, u1, 1, 100, t0 + Duration::from_secs(8)));
        let expired = s.expire(t0 + Duration::from_secs(11));
        assert_eq!(expired, vec![(u2.id(), b.clone())]);
        // The expired unit goes to a new asker with attempt 2 (a keeps to its own branch);
        // the old holder is cancelled.
        let c = s.register("c", "3", 1, t0).unwrap();
        let (again, 2) = unit(&mut s, &c, 0, t0 + Duration::from_secs(12)) else { panic!() };
        assert_eq!(again, u2);
        assert!(!s.heartbeat(&b, u2, 1, 500, t0 + Duration::from_secs(12)));
        // One result per unit.
        assert!(matches!(submit(&mut s, sub(&c, u2, 2, truth(u2), true, 10)).0, Verdict::Accept(_)));
        assert!(matches!(submit(&mut s, sub(&b, u2, 1, truth(u2), true, 10)).0, Verdict::Ignore(_)));
        assert_eq!((s.counters.done, s.counters.duplicates), (1, 1));
    }

    #[test]
    fn a_thread_keeps_to_its_branch_and_threads_spread_over_branches() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 2, t0).unwrap();
        let (first, _) = unit(&mut s, &a, 0, t0);
        let (second, _) = unit(&mut s, &a, 1, t0);
        let branch = |u: &Ask, s: &Scheduler| s.open.iter().find(|(x, _)| x == u).map(|(_, b)| *b).unwrap();
        assert_ne!(branch(&first, &s), branch(&second, &s), "two threads, two branches");
        submit(&mut s, sub(&a, first, 1, Facts::UNKNOWN, false, 1));
        let b0 = branch(&second, &s);
        let (next, _) = unit(&mut s, &a, 1, t0);
        assert_eq!(branch(&next, &s), b0, "thread 1 stays on its branch");
    }

    #[test]
    fn released_units_go_back_at_once_and_decided_ones_are_cancelled() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 2, t0).unwrap();
        let (u1, _) = unit(&mut s, &a, 0, t0);
        assert_eq!(s.release(&a, &[]), 1);
        let (u1_again, 2) = unit(&mut s, &a, 0, t0) else { panic!() };
        assert_eq!(u1, u1_again);
        // Answering the unit's region another way makes its lease useless.
        let other = Ask { region: u1.region, query: Query::Nimber };
        submit(&mut s, sub(&a, other, 1, truth(other), true, 1));
        assert!(!s.heartbeat(&a, u1, 2, 50, t0));
        assert_eq!(s.counters.cancelled, 1);
    }

    #[test]
    fn once_the_answer_is_known_every_unit_stops() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
        let (regions, _) = cram_engine::solver::board_regions(&Board::parse("4x6").unwrap());
        let whole = Ask { region: regions[0], query: Query::Nimber };
        submit(&mut s, sub(&a, whole, 1, truth(whole), true, 1));
        assert!(s.answer().is_some());
        assert!(!s.heartbeat(&a, u, 1, 50, t0), "a unit still searched after the answer is stopped");
        assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Done(_)));
    }

    #[test]
    fn a_logged_answer_stays_when_a_false_result_arrives_after_it() {
        let (regions, _) = cram_engine::solver::board_regions(&Board::parse("4x6").unwrap());
        let whole = Ask { region: regions[0], query: Query::Nimber };
        let v = oracle().nimber(whole.region).unwrap();
        let t0 = Instant::now();
        let run = |decide: bool| {
            let mut s = scheduler(NO_CHECKS);
            let a = s.register("a", "1", 1, t0).unwrap();
            let liar = s.register("liar", "2", 1, t0).unwrap();
            submit(&mut s, sub(&a, whole, 1, truth(whole), true, 1));
            let answer = s.answer().expect("answered");
            if decide {
                s.decide(answer);
            }
            // After the answer: a result that contradicts what is held, to be settled.
            let other = Ask { region: whole.region, query: Query::IsValue(v + 1) };
            let (verdict, _) = submit(&mut s, sub(&liar, other, 1, Facts::exact(v + 1), true, 1));
            assert!(matches!(verdict, Verdict::Refuse { .. }), "{verdict:?}");
            (answer, s.answer(), s.lease(&a, 0, t0))
        };
        let (_, undecided, _) = run(false);
        assert_eq!(undecided, None, "the false result takes back an answer not yet logged");
        let (answer, after, lease) = run(true);
        assert_eq!(after, Some(answer));
        assert!(matches!(lease, LeaseOutcome::Done(a) if a == answer), "{lease:?}");
    }

    #[test]
    fn a_worker_keeps_its_id_across_coordinator_runs_and_pending_excludes_leased() {
        let t0 = Instant::now();
        let (mut before, mut after) = (scheduler(NO_CHECKS), scheduler(NO_CHECKS));
        assert_eq!(before.register("w", "ab12", 1, t0), after.register("w", "ab12", 1, t0));
        assert_ne!(after.register("w", "ab12", 1, t0), after.register("w", "cd34", 1, t0));
        let a = after.register("a", "1", 1, t0).unwrap();
        let (pending, leased) = after.pending_and_leased();
        assert_eq!(leased, 0);
        unit(&mut after, &a, 0, t0);
        assert_eq!(after.pending_and_leased(), (pending - 1, 1));
    }

    #[test]
    fn a_stale_unfinished_result_does_not_drop_the_live_attempts_answer() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
        s.expire(t0 + Duration::from_secs(11));
        let b = s.register("b", "2", 1, t0).unwrap();
        let (again, 2) = unit(&mut s, &b, 0, t0 + Duration::from_secs(11)) else { panic!() };
        assert_eq!(again, u);
        // Attempt 1 ran out of budget after its lease expired; attempt 2 finishes.
        assert!(matches!(submit(&mut s, sub(&a, u, 1, Facts::UNKNOWN, false, 10)).0, Verdict::Ignore(_)));
        assert!(matches!(submit(&mut s, sub(&b, u, 2, truth(u), true, 10)).0, Verdict::Accept(_)));
        assert!(s.top_mut().answers(&u), "the finished answer was kept");
        assert_eq!((s.counters.done, s.counters.split), (1, 0));
    }

    #[test]
    fn node_counts_from_the_wire_saturate() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 2, t0).unwrap();
        let (u1, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
        let (u2, 1) = unit(&mut s, &a, 1, t0) else { panic!() };
        assert!(s.heartbeat(&a, u1, 1, u64::MAX, t0));
        assert!(s.heartbeat(&a, u2, 1, u64::MAX, t0));
        assert_eq!(s.in_flight_nodes(), u64::MAX);
        for u in [u1, u2] {
            submit(&mut s, sub(&a, u, 1, Facts::UNKNOWN, false, u64::MAX));
        }
        assert_eq!(s.nodes, u64::MAX);
        let status = s.status("4x6", Duration::from_secs(1), 0.0, t0);
        assert_eq!(status.workers[0].nodes, u64::MAX);
    }

    #[test]
    fn a_duplicated_log_line_counts_once() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 2, t0).unwrap();
        let (split, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
        let (done, 1) = unit(&mut s, &a, 1, t0) else { panic!() };
        let (_, mut log) = submit(&mut s, sub(&a, split, 1, Facts::UNKNOWN, false, 1000));
        log.extend(submit(&mut s, sub(&a, done, 1, truth(done), true, 500)).1);
        // Each line twice, as a log written twice over would hold it.
        let doubled: Vec<Event> = log.iter().flat_map(|e| [e.clone(), e.clone()]).collect();
        let mut replayed = scheduler(NO_CHECKS);
        replayed.replay(&doubled);
        let c = &replayed.counters;
        assert_eq!((c.done, c.split, replayed.nodes), (1, 1, 1500));
    }

    fn checks(trust_after: u32) -> Checks {
        Checks { trust_after, sample_one_in: 0 }
    }

    #[test]
    fn an_untrusted_workers_results_are_checked_by_another_before_the_answer() {
        let mut s = scheduler(checks(1));
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let b = s.register("b", "2", 1, t0).unwrap();
        let (regions, _) = cram_engine::solver::board_regions(&Board::parse("4x6").unwrap());
        let whole = Ask { region: regions[0], query: Query::Nimber };
        assert!(matches!(submit(&mut s, sub(&a, whole, 1, truth(whole), true, 7)).0, Verdict::Accept(_)));
        assert_eq!(s.answer(), None, "no answer from a result nobody checked");
        // The unit goes to another worker, never back to the one that answered it.
        assert_eq!(s.lease(&a, 0, t0), LeaseOutcome::Wait);
        let (again, _) = unit(&mut s, &b, 0, t0);
        assert_eq!(again, whole);
        let (v, events) = submit(&mut s, sub(&b, whole, 1, truth(whole), true, 7));
        assert!(matches!(&events[..], [Event::Result(r)] if r.check), "{v:?}");
        assert!(s.answer().is_some());
        assert_eq!(s.counters.done, 1, "a check is not a second solve");
        // Both agreed: both are trusted now, and a later result of theirs is not checked.
        assert!(!s.needs_check(&a, &again) && !s.needs_check(&b, &again));
    }

    #[test]
    fn a_false_result_is_caught_settled_and_its_worker_distrusted_also_after_a_replay() {
        let mut s = scheduler(checks(5));
        let t0 = Instant::now();
        let liar = s.register("liar", "1", 1, t0).unwrap();
        let honest = s.register("honest", "2", 1, t0).unwrap();
        let (u, _) = unit(&mut s, &liar, 0, t0);
        let right = truth(u);
        let v = oracle().nimber(u.region).unwrap();
        // Wrong (the other answer to the unit's question), but consistent with everything
        // held: accepted, to be checked.
        let wrong = match u.query {
            Query::IsValue(k) if k != v => Facts::exact(k),
            _ => Facts::exact(if v == 0 { 1 } else { v - 1 }),
        };
        assert!(u.query.answered_by(wrong) && !wrong.is_contradictory());
        let mut log = submit(&mut s, sub(&liar, u, 1, wrong, true, 9)).1;
        assert!(matches!(&log[..], [Event::Result(_)]), "{log:?}");
        // The check contradicts it: refused, and the region goes to the coordinator.
        let (again, _) = unit(&mut s, &honest, 0, t0);
        assert_eq!(again, u);
        let (verdict, events) = submit(&mut s, sub(&honest, u, 1, right, true, 9));
        assert!(matches!(verdict, Verdict::Refuse { disconnect: false, .. }), "{verdict:?}");
        log.extend(events);
        assert_eq!(s.next_settlement(t0), Some(u.region));
        assert_eq!(s.answer(), None);
        let settled = s.settlement(u.region, v, 100, 1);
        assert!(matches!(&settled[1..], [Event::Distrust { worker, .. }] if *worker == liar), "{settled:?}");
        for e in &settled {
            s.apply(e);
        }
        log.extend(settled);
        assert_eq!(s.caller(&liar, t0), Caller::Distrusted(s.distrusted[&liar].clone()));
        assert!(s.register("liar", "1", 1, t0).is_err(), "a distrusted worker cannot come back");
        assert_eq!(s.caller(&honest, t0), Caller::Known);
        assert!(s.top_mut().answers(&u));
        assert!(s.index_facts().facts.values().all(|f| !f.is_contradictory()));
        // A restarted coordinator reaches the same state from the log.
        let mut r = scheduler(checks(5));
        r.replay(&log);
        assert!(r.distrusted.contains_key(&liar) && r.top_mut().answers(&u));
        assert_eq!(r.index_facts(), s.index_facts());
        assert_eq!(r.checks, s.checks);
    }

    #[test]
    fn of_a_result_to_be_checked_only_the_answer_to_its_question_is_used() {
        let mut s = scheduler(checks(5));
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, _) = unit(&mut s, &a, 0, t0);
        let v = oracle().nimber(u.region).unwrap();
        let ask = Ask { region: u.region, query: Query::IsValue(v + 1) };
        // "g ≠ v+1" (true, and what a check compares) with "g = 0" riding along.
        let extra = Facts { excluded: 1 << (v + 1), upper: 0 };
        assert!(matches!(submit(&mut s, sub(&a, ask, 1, extra, true, 1)).0, Verdict::Accept(_)));
        let held = s.top_mut().held(&u.region);
        assert!(held.rules_out(v + 1) && held.upper > 0, "{held:?}");
    }

    #[test]
    fn an_impossible_result_disconnects_its_worker_at_once() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, _) = unit(&mut s, &a, 0, t0);
        let cells = u.region.cells() as u8;
        for bad in [Facts { excluded: 0b111, upper: 2 }, Facts::exact(cells / 2 + 1), Facts::UNKNOWN] {
            let mut s = scheduler(NO_CHECKS);
            let a = s.register("a", "1", 1, t0).unwrap();
            let (verdict, events) = submit(&mut s, sub(&a, u, 1, bad, true, 1));
            assert!(matches!(verdict, Verdict::Refuse { disconnect: true, .. }), "{bad:?}: {verdict:?}");
            assert!(matches!(&events[..], [Event::Refused(_), Event::Distrust { .. }]));
            assert!(matches!(s.caller(&a, t0), Caller::Distrusted(_)));
        }
    }

    #[test]
    fn an_untrusted_worker_waits_for_its_checks_before_running_ahead() {
        let mut s = scheduler(checks(2));
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        for _ in 0..2 {
            let (u, n) = unit(&mut s, &a, 0, t0);
            submit(&mut s, sub(&a, u, n, truth(u), true, 1));
        }
        assert_eq!(s.lease(&a, 0, t0), LeaseOutcome::Wait, "two results wait for their checks");
        // Another worker checks them (checks first), and then a may go on.
        let b = s.register("b", "2", 1, t0).unwrap();
        for _ in 0..2 {
            let (u, n) = unit(&mut s, &b, 0, t0);
            assert!(s.answers.contains_key(&u), "a check comes first");
            submit(&mut s, sub(&b, u, n, truth(u), true, 1));
        }
        assert!(s.trusted(&a) && s.trusted(&b));
        assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Unit(..)));
    }

    #[test]
    fn a_check_no_other_live_worker_can_make_goes_to_the_coordinator() {
        let mut s = scheduler(checks(3));
        let t0 = s.since;
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, _) = unit(&mut s, &a, 0, t0);
        submit(&mut s, sub(&a, u, 1, truth(u), true, 1));
        assert_eq!(s.next_settlement(t0), None, "workers may still register");
        let b = s.register("b", "2", 1, t0).unwrap();
        assert_eq!(s.caller(&b, t0 + Duration::from_secs(3)), Caller::Known);
        assert_eq!(s.next_settlement(t0 + Duration::from_secs(5)), None, "b may make the check");
        assert_eq!(s.next_settlement(t0 + Duration::from_secs(9)), Some(u.region), "b is silent");
        let v = oracle().nimber(u.region).unwrap();
        for e in s.settlement(u.region, v, 10, 1) {
            s.apply(&e);
        }
        assert!(s.checks.is_empty() && s.distrusted.is_empty());
        assert_eq!(s.confirmed[&a], 1);
    }

    /// A fact a worker would share: the true value of one of `ask`'s region's options.
    fn option_fact(ask: Ask) -> Learned {
        let child = cram_engine::options::options(&ask.region).into_iter().next().unwrap();
        let region = child.regions[0];
        Learned { region, facts: Facts::exact(oracle().nimber(region).unwrap()), nodes: 500 }
    }

    #[test]
    fn shared_facts_go_to_the_others_and_fall_with_their_worker() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let b = s.register("b", "2", 1, t0).unwrap();
        let (ua, na) = unit(&mut s, &a, 0, t0);
        let fact = option_fact(ua);
        let mut x = sub(&a, ua, na, truth(ua), true, 10);
        x.shared = vec![fact];
        submit(&mut s, x);
        assert_eq!(s.counters.facts_shared, 1);
        // Handed to b once, never back to a.
        assert!(s.shared_for(&a, 10).is_empty());
        assert_eq!(s.shared_for(&b, 10), vec![(fact, a.clone())]);
        assert!(s.shared_for(&b, 10).is_empty(), "sent once");
        // b answers with a's fact in its table.
        let (ub, nb) = unit(&mut s, &b, 0, t0);
        let mut y = sub(&b, ub, nb, truth(ub), true, 10);
        y.uses = vec![a.clone()];
        submit(&mut s, y);
        assert!(s.answers.contains_key(&ub));
        // a is found wrong: its facts are no longer handed out, and b's answer, which rests
        // on them, is discarded with a's own; a later result of b that used them is ignored.
        s.apply(&Event::Distrust { worker: a.clone(), reason: "test".into() });
        assert!(!s.answers.contains_key(&ub) && !s.answers.contains_key(&ua));
        let c = s.register("c", "3", 1, t0).unwrap();
        assert!(s.shared_for(&c, 10).is_empty());
        assert_eq!(s.distrusted_workers(), vec![a.clone()]);
        let (again, n) = unit(&mut s, &b, 0, t0);
        let mut z = sub(&b, again, n, truth(again), true, 10);
        z.uses = vec![a.clone()];
        assert!(matches!(submit(&mut s, z).0, Verdict::Ignore(_)));
        assert!(s.units[&again].lease.is_none(), "the unit goes back at once");
        // The log replays to the same: b's answer that used a's facts stays discarded.
        let mut replayed = scheduler(NO_CHECKS);
        let mut log = vec![];
        let mut x = sub(&a, ua, na, truth(ua), true, 10);
        x.shared = vec![fact];
        log.extend(submit(&mut replayed, x).1);
        let mut y = sub(&b, ub, nb, truth(ub), true, 10);
        y.uses = vec![a.clone()];
        log.extend(submit(&mut replayed, y).1);
        log.push(Event::Distrust { worker: a.clone(), reason: "test".into() });
        let mut fresh = scheduler(NO_CHECKS);
        for e in &log {
            fresh.apply(e);
        }
        assert!(fresh.answers.is_empty() && fresh.shared.is_empty());
    }

    #[test]
    fn a_shared_fact_against_what_is_certain_disconnects_its_worker() {
        let mut s = scheduler(NO_CHECKS);
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let (u, n) = unit(&mut s, &a, 0, t0);
        let mut fact = option_fact(u);
        // Regions of up to 16 cells are certain to the coordinator: lie about one.
        let small = cram_engine::region::AnyRegion::from_key("2x5:3ff").unwrap();
        let truth_small = oracle().nimber(small).unwrap();
        fact.region = small;
        fact.facts = Facts::exact(truth_small ^ 1);
        let mut x = sub(&a, u, n, truth(u), true, 10);
        x.shared = vec![fact];
        let (verdict, events) = submit(&mut s, x);
        assert!(matches!(verdict, Verdict::Refuse { disconnect: true, .. }), "{verdict:?}");
        assert!(matches!(&events[..], [Event::Refused(_), Event::Distrust { .. }]));
        assert_eq!(s.counters.facts_shared, 0);
    }

    #[test]
    fn isolated_leases_are_the_checks() {
        let mut s = scheduler(checks(3));
        let t0 = Instant::now();
        let a = s.register("a", "1", 1, t0).unwrap();
        let b = s.register("b", "2", 1, t0).unwrap();
        let LeaseOutcome::Unit(u, n, false) = s.lease(&a, 0, t0) else { panic!("a first solve is not isolated") };
        submit(&mut s, sub(&a, u, n, truth(u), true, 10));
        let LeaseOutcome::Unit(check, _, true) = s.lease(&b, 0, t0) else { panic!("b checks a's answer, isolated") };
        assert_eq!(check, u);
    }
}
