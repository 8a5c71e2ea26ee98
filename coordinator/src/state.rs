//! The scheduler's state, apart from the gRPC glue: units and their leases (with attempt
//! numbers and deadlines), workers, counters, and the [`Top`] whose frontier says which
//! units are worth working on.
//!
//! A unit is leased to one worker at a time; its lease is extended by heartbeats that show
//! progress and expires otherwise, after which the unit is issued again with a higher
//! attempt number. A result is recorded once per unit: duplicates and late results are
//! answered OK and change nothing. A leased unit that leaves the frontier (its question was
//! decided by other results) is cancelled at the worker's next heartbeat.

use crate::top::{Ask, Branch, Top};
use cram_engine::facts::Facts;
use cram_engine::{Mode, Solution};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What a lease request gets.
#[derive(Debug, PartialEq)]
pub enum LeaseOutcome {
    /// Work on this unit under this attempt number.
    Unit(Ask, u64),
    /// Nothing to hand out now.
    Wait,
    /// The job is solved.
    Done(Solution),
}

#[derive(Debug)]
struct Lease {
    branch: Option<Branch>,
    worker: String,
    attempt: u64,
    deadline: Instant,
    nodes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnitState {
    Open,
    /// A result is being written; further results for it are duplicates.
    Recording,
    Done,
    Split,
}

#[derive(Debug)]
struct Unit {
    attempt: u64,
    state: UnitState,
    lease: Option<Lease>,
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
    /// Units answered (finished results recorded).
    pub done: u64,
    /// Units that ran out of budget and were split.
    pub split: u64,
    /// Leases cancelled because the unit stopped mattering.
    pub cancelled: u64,
    /// Leases that expired without a result.
    pub expired: u64,
    /// Leases handed back by workers shutting down.
    pub released: u64,
    /// Results that arrived for units already recorded.
    pub duplicates: u64,
    /// Units answered from a worker's cache.
    pub from_cache: u64,
}

/// The scheduler.
pub struct Scheduler {
    top: Top,
    mode: Mode,
    open: Vec<(Ask, Branch)>,
    needed: HashSet<Ask>,
    truncated: HashSet<Branch>,
    /// The branch each worker thread (worker id, slot) worked on last.
    affinity: HashMap<(String, u32), Branch>,
    answer: Option<Solution>,
    root_facts: Option<Facts>,
    dirty: bool,
    units: HashMap<Ask, Unit>,
    workers: HashMap<String, Worker>,
    next_worker: u64,
    /// Random per coordinator run, in worker ids: an id from before a restart is unknown
    /// to this run, so its worker registers again and nobody inherits another's leases.
    run_tag: u32,
    lease: Duration,
    /// Finished units restored from the log, not done by this run (for the ETA).
    resumed_done: u64,
    /// Counters since the job began (restored from the log on resume).
    pub counters: Counters,
    /// Search nodes of all recorded results.
    pub nodes: u64,
}

impl Scheduler {
    /// A scheduler over `top`, with leases of `lease` length.
    pub fn new(top: Top, mode: Mode, lease: Duration) -> Scheduler {
        Scheduler {
            top,
            mode,
            open: Vec::new(),
            needed: HashSet::new(),
            truncated: HashSet::new(),
            affinity: HashMap::new(),
            answer: None,
            root_facts: None,
            dirty: true,
            units: HashMap::new(),
            workers: HashMap::new(),
            next_worker: 1,
            run_tag: rand::random(),
            lease,
            resumed_done: 0,
            counters: Counters::default(),
            nodes: 0,
        }
    }

    /// Marks a unit recorded before this run (from the log).
    pub fn restore_recorded(&mut self, ask: Ask, finished: bool) {
        self.resumed_done += u64::from(finished);
        let state = if finished { UnitState::Done } else { UnitState::Split };
        self.units.insert(ask, Unit { attempt: 0, state, lease: None });
    }

    /// The top, for restoring facts.
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
        self.answer = f.answer;
        self.needed = f.open.iter().map(|(a, _)| *a).collect();
        self.truncated = f.truncated;
        self.open = f.open;
        self.root_facts = f.root_facts;
        self.dirty = false;
    }

    /// The answer, once decided.
    pub fn answer(&mut self) -> Option<Solution> {
        self.refresh();
        self.answer
    }

    /// True when `ask` waits for a worker: open and not leased.
    fn is_free(&self, ask: &Ask) -> bool {
        self.units.get(ask).is_none_or(|u| u.state == UnitState::Open && u.lease.is_none())
    }

    /// Registers a worker and returns its id.
    pub fn register(&mut self, name: &str, threads: u32, now: Instant) -> String {
        let id = format!("{name}#{:08x}.{}", self.run_tag, self.next_worker);
        self.next_worker += 1;
        self.workers.insert(id.clone(), Worker { name: name.to_string(), threads, last_seen: now, nodes: 0 });
        id
    }

    /// True when `worker` is registered; marks it seen.
    pub fn touch(&mut self, worker: &str, now: Instant) -> bool {
        self.workers.get_mut(worker).map(|w| w.last_seen = now).is_some()
    }

    /// Hands thread `slot` of `worker` a unit nobody holds: the next of the branch it worked
    /// on last, else the most useful one of a branch no other thread is on, else the most
    /// useful one.
    pub fn lease(&mut self, worker: &str, slot: u32, now: Instant) -> LeaseOutcome {
        self.refresh();
        if let Some(a) = self.answer {
            return LeaseOutcome::Done(a);
        }
        let free: Vec<(Ask, Branch)> = self.open.iter().copied().filter(|(ask, _)| self.is_free(ask)).collect();
        let busy: HashSet<Branch> = self.open.iter().filter(|(ask, _)| !self.is_free(ask)).map(|(_, b)| *b).collect();
        let key = (worker.to_string(), slot);
        let mine = self.affinity.get(&key).and_then(|b| free.iter().find(|(_, br)| br == b));
        let pick = mine.or_else(|| free.iter().find(|(_, br)| !busy.contains(br))).or_else(|| free.first());
        let Some(&(ask, branch)) = pick else { return LeaseOutcome::Wait };
        self.affinity.insert(key, branch);
        let unit = self.units.entry(ask).or_insert(Unit { attempt: 0, state: UnitState::Open, lease: None });
        unit.attempt += 1;
        unit.lease = Some(Lease {
            branch: Some(branch),
            worker: worker.to_string(),
            attempt: unit.attempt,
            deadline: now + self.lease,
            nodes: 0,
        });
        LeaseOutcome::Unit(ask, unit.attempt)
    }

    /// A heartbeat for one unit: extends the lease while nodes grow. Returns false when the
    /// worker should stop the unit (no longer needed, or its lease is someone else's). A
    /// worker still searching a unit whose lease this coordinator does not know (it
    /// restarted) keeps it when nobody else holds it.
    pub fn heartbeat(&mut self, worker: &str, ask: Ask, attempt: u64, nodes: u64, now: Instant) -> bool {
        self.refresh();
        if self.answer.is_some() {
            return false;
        }
        let branch = self.units.get(&ask).and_then(|u| u.lease.as_ref()).and_then(|l| l.branch);
        // Out of the list, the unit still matters when its branch was not walked to the end
        // and its question is open.
        let maybe = branch.is_some_and(|b| self.truncated.contains(&b)) && !self.top.answers(&ask);
        if !self.needed.contains(&ask) && !maybe {
            if self.units.get_mut(&ask).and_then(|u| u.lease.take()).is_some() {
                self.counters.cancelled += 1;
                tracing::debug!(unit = %ask.id(), worker, "unit no longer needed; cancelling it");
            }
            return false;
        }
        let unit = self.units.entry(ask).or_insert(Unit { attempt, state: UnitState::Open, lease: None });
        if unit.state != UnitState::Open {
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

    /// Starts recording a result: true when it is the unit's first (it must then be made
    /// durable and [`Scheduler::finish_record`] called); false for a duplicate.
    pub fn begin_record(&mut self, ask: Ask) -> bool {
        let unit = self.units.entry(ask).or_insert(Unit { attempt: 0, state: UnitState::Open, lease: None });
        if unit.state != UnitState::Open {
            self.counters.duplicates += 1;
            return false;
        }
        unit.state = UnitState::Recording;
        true
    }

    /// Applies a durable result: merges its facts, splits the unit when it ran out of
    /// budget, and frees the lease.
    pub fn finish_record(
        &mut self,
        ask: Ask,
        facts: Facts,
        finished: bool,
        nodes: u64,
        worker: &str,
        from_cache: bool,
    ) {
        self.top.report(ask.region, facts);
        if !finished {
            self.top.expand(ask.region);
        }
        let unit = self.units.get_mut(&ask).expect("begin_record made the unit");
        unit.state = if finished { UnitState::Done } else { UnitState::Split };
        unit.lease = None;
        self.count_result(finished, nodes, from_cache);
        if let Some(w) = self.workers.get_mut(worker) {
            w.nodes += nodes;
        }
        self.dirty = true;
    }

    /// Counts a recorded result (also used when replaying the log).
    pub fn count_result(&mut self, finished: bool, nodes: u64, from_cache: bool) {
        if finished {
            self.counters.done += 1;
        } else {
            self.counters.split += 1;
        }
        self.counters.from_cache += from_cache as u64;
        self.nodes += nodes;
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
        self.counters.released += n as u64;
        n
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
        self.units.values().filter_map(|u| u.lease.as_ref()).map(|l| l.nodes).sum()
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
        let c = self.counters.clone();
        let total = c.done + c.split + (pending + leased) as u64;
        let left = (pending + leased) as f64;
        let done_here = c.done.saturating_sub(self.resumed_done);
        let eta_secs = (done_here > 0 && self.answer.is_none())
            .then(|| elapsed.as_secs_f64() / done_here as f64 * left)
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
            mode: if self.mode == Mode::Nimber { "nimber" } else { "outcome" }.to_string(),
            state: if self.answer.is_some() { "done" } else { "running" }.to_string(),
            elapsed_secs: elapsed.as_secs_f64(),
            units: UnitCounts { total, pending: pending as u64, leased: leased as u64, counters: c },
            nodes: self.nodes,
            nodes_per_sec,
            root: describe(self.root_facts),
            answer: self.answer.map(|a| AnswerStatus { outcome: a.outcome.to_string(), nimber: a.nimber }),
            eta_secs,
            workers,
        }
    }
}

/// Text for what is known of the root's nimber, e.g. `g ≠ 0, 2; g ≤ 5`.
pub fn describe(b: Option<Facts>) -> String {
    let Some(b) = b else { return "no region to search".into() };
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
    /// Lifetime counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// The answer in the status.
#[derive(Debug, Serialize)]
pub struct AnswerStatus {
    /// `first` or `second`.
    pub outcome: String,
    /// The nimber, when known.
    pub nimber: Option<u8>,
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
    /// Nodes of its recorded results.
    pub nodes: u64,
    /// Units it holds.
    pub units: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use cram_engine::{Board, DbSet};
    use cram_proto::Query;
    use std::sync::Arc;

    fn scheduler() -> Scheduler {
        let top = Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), 2);
        Scheduler::new(top, Mode::Nimber, Duration::from_secs(10))
    }

    #[test]
    fn leases_expire_are_reissued_with_a_new_attempt_and_results_count_once() {
        let mut s = scheduler();
        let t0 = Instant::now();
        let a = s.register("a", 1, t0);
        let b = s.register("b", 1, t0);
        let LeaseOutcome::Unit(u1, 1) = s.lease(&a, 0, t0) else { panic!() };
        let LeaseOutcome::Unit(u2, 1) = s.lease(&b, 0, t0) else { panic!() };
        assert_ne!(u1, u2, "two workers get different units");
        // Progress extends a lease; without it the lease expires.
        assert!(s.heartbeat(&a, u1, 1, 100, t0 + Duration::from_secs(8)));
        let expired = s.expire(t0 + Duration::from_secs(11));
        assert_eq!(expired, vec![(u2.id(), b.clone())]);
        // The expired unit goes to a new asker with attempt 2 (a keeps to its own branch);
        // the old holder is cancelled.
        let c = s.register("c", 1, t0);
        let LeaseOutcome::Unit(again, 2) = s.lease(&c, 0, t0 + Duration::from_secs(12)) else { panic!() };
        assert_eq!(again, u2);
        assert!(!s.heartbeat(&b, u2, 1, 500, t0 + Duration::from_secs(12)));
        // One result per unit.
        assert!(s.begin_record(u2));
        s.finish_record(u2, Facts::exact(1), true, 10, &c, false);
        assert!(!s.begin_record(u2));
        assert_eq!((s.counters.done, s.counters.duplicates), (1, 1));
    }

    #[test]
    fn a_thread_keeps_to_its_branch_and_threads_spread_over_branches() {
        let mut s = scheduler();
        let t0 = Instant::now();
        let a = s.register("a", 2, t0);
        let LeaseOutcome::Unit(first, _) = s.lease(&a, 0, t0) else { panic!() };
        let LeaseOutcome::Unit(second, _) = s.lease(&a, 1, t0) else { panic!() };
        let branch = |u: &Ask, s: &Scheduler| s.open.iter().find(|(x, _)| x == u).map(|(_, b)| *b).unwrap();
        assert_ne!(branch(&first, &s), branch(&second, &s), "two threads, two branches");
        assert!(s.begin_record(first));
        s.finish_record(first, Facts::UNKNOWN, false, 1, &a, false);
        let b0 = branch(&second, &s);
        let LeaseOutcome::Unit(next, _) = s.lease(&a, 1, t0) else { panic!() };
        assert_eq!(branch(&next, &s), b0, "thread 1 stays on its branch");
    }

    #[test]
    fn released_units_go_back_at_once_and_decided_ones_are_cancelled() {
        let mut s = scheduler();
        let t0 = Instant::now();
        let a = s.register("a", 2, t0);
        let LeaseOutcome::Unit(u1, _) = s.lease(&a, 0, t0) else { panic!() };
        assert_eq!(s.release(&a, &[]), 1);
        let LeaseOutcome::Unit(u1_again, 2) = s.lease(&a, 0, t0) else { panic!() };
        assert_eq!(u1, u1_again);
        // Answering the unit's region another way makes its lease useless.
        let other = Ask { region: u1.region, query: Query::Nimber };
        assert!(s.begin_record(other));
        let mut oracle = cram_engine::Solver::new(&Default::default(), Arc::new(DbSet::default()));
        let v = oracle.nimber(u1.region).unwrap();
        s.finish_record(other, Facts::exact(v), true, 1, &a, false);
        assert!(!s.heartbeat(&a, u1, 2, 50, t0));
        assert_eq!(s.counters.cancelled, 1);
    }

    #[test]
    fn once_the_answer_is_known_every_unit_stops() {
        let mut s = scheduler();
        let t0 = Instant::now();
        let a = s.register("a", 1, t0);
        let LeaseOutcome::Unit(u, 1) = s.lease(&a, 0, t0) else { panic!() };
        let (regions, _) = cram_engine::solver::board_regions(&Board::parse("4x6").unwrap());
        let root = regions[0];
        let mut oracle = cram_engine::Solver::new(&Default::default(), Arc::new(DbSet::default()));
        let v = oracle.nimber(root).unwrap();
        let whole = Ask { region: root, query: Query::Nimber };
        assert!(s.begin_record(whole));
        s.finish_record(whole, Facts::exact(v), true, 1, &a, false);
        assert!(s.answer().is_some());
        assert!(!s.heartbeat(&a, u, 1, 50, t0), "a unit still searched after the answer is stopped");
        assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Done(_)));
    }

    #[test]
    fn worker_ids_differ_between_coordinator_runs_and_pending_excludes_leased() {
        let t0 = Instant::now();
        let (mut before, mut after) = (scheduler(), scheduler());
        assert_ne!(before.register("w", 1, t0), after.register("w", 1, t0));
        let a = after.register("a", 1, t0);
        let (pending, leased) = after.pending_and_leased();
        assert_eq!(leased, 0);
        let LeaseOutcome::Unit(..) = after.lease(&a, 0, t0) else { panic!() };
        assert_eq!(after.pending_and_leased(), (pending - 1, 1));
    }

    #[test]
    fn describes_root_facts() {
        assert_eq!(describe(Some(Facts::exact(3))), "g = 3");
        assert_eq!(describe(Some(Facts { excluded: 0b101, upper: 5 })), "g ≠ 0, 2; g ≤ 5");
        assert_eq!(describe(Some(Facts::UNKNOWN)), "nothing known yet");
    }
}
