//! Units and leases: for every unit a worker was ever given, its attempt number, the last
//! attempt handed to each worker (a result is taken only from a worker that was given the
//! unit, under the last attempt it was given), whether an unfinished result split it, who holds it
//! now (worker, attempt, deadline, nodes so far) and which workers had a result on it
//! refused; and for every worker thread, the branch of the top it worked on last. Nothing
//! here is logged: after a restart leases start afresh, and for one lease period
//! heartbeats and results may adopt the units workers are still searching.
//!
//! A unit held past [`BACKUP_AFTER`] lease periods may also be leased to any worker that has
//! nothing else to do, as a backup beside the first lease: heartbeats can hold a lease for
//! as long as they show progress, which a client may fake, and an honest search of a hard
//! unit can take hours; a backup lets an idle worker search it without taking it from
//! anyone. Every idle worker that asks gets one (a limit would be a race that a client with
//! many identities wins), spread over the units held long. The first holder's result ends
//! them all; another's (a backup's, or a late one of an attempt whose lease expired) ends
//! the backups but not the first holder's search, which the scheduler lets go on until that
//! answer is verified: nobody else, perhaps hostile, can take a long honest search down.

use crate::top::Branch;
use cram_engine::Question;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A unit held by a worker.
#[derive(Debug)]
pub struct Lease {
    /// The branch of the top the unit was handed out for (none: adopted).
    pub branch: Option<Branch>,
    /// The worker holding it.
    pub worker: String,
    /// The attempt number it holds.
    pub attempt: u64,
    /// When it was handed out; none when it was adopted (searched since before a restart).
    pub since: Option<Instant>,
    /// When it expires without a heartbeat that shows progress.
    pub deadline: Instant,
    /// Nodes searched so far (from heartbeats).
    pub nodes: u64,
    /// The node budget it was handed out with (0: to be searched whole; none: adopted after a
    /// restart, not known); an unfinished
    /// result is judged against it.
    pub budget: Option<u64>,
    /// Handed out by this run, or adopted as the first holder the state recorded: as the
    /// unit's first holder, its finished answer may be taken on the draw. A lease adopted
    /// otherwise (an earlier run's backup, or a grant that lapsed) never is.
    pub vouched: bool,
}

/// A grant to keep in the state (`Store::record_grant`): `worker` was leased `unit` under
/// `attempt`, as its first holder when `first`. After a restart only granted units may be
/// adopted, and only the recorded first holder adopts as the unit's first holder.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The unit.
    pub unit: Question,
    /// The worker's id.
    pub worker: String,
    /// The attempt.
    pub attempt: u64,
    /// As the unit's first holder (not a backup).
    pub first: bool,
}

/// Nodes a search may go past its budget before it looks (the engine looks every 4,096).
const OVERSHOOT: u64 = 1 << 16;

/// Lease periods a unit is held before it may also be leased as a backup.
pub const BACKUP_AFTER: u32 = 4;

/// One unit's state.
#[derive(Debug, Default)]
pub struct Unit {
    /// The last attempt number handed out.
    pub attempt: u64,
    /// An unfinished result split it.
    pub split: bool,
    /// Who holds it now.
    pub lease: Option<Lease>,
    /// Further holders, given the unit while the first held it past [`BACKUP_AFTER`] lease
    /// periods (only while `lease` is held: when that ends first, the oldest backup takes
    /// its place).
    pub backups: Vec<Lease>,
    /// Since when it has been leased in this run, with no answer, split or cancel in between:
    /// releasing it and leasing it again does not restart the wait for backups.
    pub held_since: Option<Instant>,
    /// Workers whose result for it was refused: it goes to others.
    pub refused: HashSet<String>,
    /// The last attempt each worker was handed it under (or adopted it by) in this run: one
    /// per worker, so that leasing and releasing it in a loop does not grow the list.
    pub grants: Vec<(String, u64)>,
    /// A backup that took the first lease (the first holder's ended), not yet noted for the
    /// state.
    promoted: Option<(String, u64)>,
}

impl Unit {
    /// Records that `worker` was handed it under `attempt` (its earlier attempts lapse).
    fn grant_to(&mut self, worker: &str, attempt: u64) {
        self.grants.retain(|(w, _)| w != worker);
        self.grants.push((worker.to_string(), attempt));
    }

    /// The leases on it: the first holder's, then the backups'.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.lease.iter().chain(self.backups.iter())
    }

    /// The lease of `worker` under `attempt`, if it holds one.
    pub fn lease_of(&self, worker: &str, attempt: u64) -> Option<&Lease> {
        self.leases().find(|l| l.worker == worker && l.attempt == attempt)
    }

    /// True when `worker` holds a lease on it.
    fn held_by(&self, worker: &str) -> bool {
        self.leases().any(|l| l.worker == worker)
    }

    /// True when `worker` holds the first lease on it.
    pub fn is_first(&self, worker: &str) -> bool {
        self.lease.as_ref().is_some_and(|l| l.worker == worker)
    }

    /// True when `worker` holds a backup lease on it.
    pub fn is_backup(&self, worker: &str) -> bool {
        self.backups.iter().any(|l| l.worker == worker)
    }

    /// Takes a finished result of `worker`: the first holder's (or one when nobody holds it)
    /// ends every lease; another's ends the backups and leaves the first holder searching
    /// (see the module documentation).
    pub fn answered_by(&mut self, worker: &str) {
        if self.lease.is_none() || self.is_first(worker) {
            self.end_leases();
        } else {
            self.backups.clear();
        }
    }

    /// Drops the leases `drop` picks (the oldest backup takes the first holder's place);
    /// returns them.
    fn drop_leases(&mut self, drop: impl Fn(&Lease) -> bool) -> Vec<Lease> {
        let mut out: Vec<Lease> = self.lease.take_if(|l| drop(l)).into_iter().collect();
        let (gone, kept): (Vec<Lease>, Vec<Lease>) =
            std::mem::take(&mut self.backups).into_iter().partition(|l| drop(l));
        self.backups = kept;
        out.extend(gone);
        if self.lease.is_none() && !self.backups.is_empty() {
            let next = self.backups.remove(0);
            if next.vouched {
                self.promoted = Some((next.worker.clone(), next.attempt));
            }
            self.lease = Some(next);
        }
        out
    }

    /// Ends every lease on it (it was answered, split or is no longer needed); true when
    /// there was one.
    pub fn end_leases(&mut self) -> bool {
        self.backups.clear();
        self.held_since = None;
        self.lease.take().is_some()
    }
}

/// Every unit handed out, and the branch each worker thread is on.
pub struct Units {
    units: HashMap<Question, Unit>,
    /// The branch each worker thread (worker id, slot) worked on last.
    affinity: HashMap<(String, u32), Branch>,
    /// The last attempt each worker was leased each unit under in earlier runs (the state's
    /// grants): only those may be adopted after a restart.
    earlier: HashMap<(Question, String), u64>,
    /// Each unit's first holder as the state records it (from earlier runs, then as noted).
    first: HashMap<Question, (String, u64)>,
    /// Units an earlier run recorded a first holder for: during a restarted run's adoption
    /// period they are kept for it (not leased as free), so that nobody else takes the
    /// first lease before it comes back.
    reserved: HashSet<Question>,
    /// Grants not written to the state yet.
    noted: Vec<Grant>,
    /// Grants withdrawn and not removed from the state yet (unit, worker).
    revoked: Vec<(Question, String)>,
    lease: Duration,
}

impl Units {
    /// No unit yet; leases of `lease` length.
    pub fn new(lease: Duration) -> Units {
        Units {
            units: HashMap::new(),
            affinity: HashMap::new(),
            earlier: HashMap::new(),
            first: HashMap::new(),
            reserved: HashSet::new(),
            noted: Vec::new(),
            revoked: Vec::new(),
            lease,
        }
    }

    /// Takes the grants the state kept from earlier runs, which adoption needs.
    pub fn granted_earlier(&mut self, grants: impl IntoIterator<Item = Grant>) {
        for g in grants {
            if g.first {
                self.first.insert(g.unit, (g.worker.clone(), g.attempt));
                self.reserved.insert(g.unit);
            }
            self.earlier.insert((g.unit, g.worker), g.attempt);
        }
    }

    /// The grants to write to the state since the last call.
    pub fn take_noted(&mut self) -> Vec<Grant> {
        std::mem::take(&mut self.noted)
    }

    /// The grants to remove from the state since the last call (unit, worker).
    pub fn take_revoked(&mut self) -> Vec<(Question, String)> {
        std::mem::take(&mut self.revoked)
    }

    /// Withdraws `worker`'s grants of the units `qs` (all units when none are named) that
    /// it no longer holds: units it released, or all once it is gone (left, silent for
    /// three lease periods, or found wrong). A late answer under such a grant is ignored;
    /// and throwaway identities that lease and let go would otherwise each leave a grant,
    /// in memory and in the state's index, for as long as the unit is open.
    pub fn revoke(&mut self, worker: &str, qs: &[Question]) {
        let mut gone = Vec::new();
        let mut revoke = |q: &Question, unit: &mut Unit| {
            if !unit.held_by(worker) && unit.grants.iter().any(|(w, _)| w == worker) {
                unit.grants.retain(|(w, _)| w != worker);
                gone.push(*q);
            }
        };
        if qs.is_empty() {
            self.units.iter_mut().for_each(|(q, u)| revoke(q, u));
        } else {
            for q in qs {
                if let Some(unit) = self.units.get_mut(q) {
                    revoke(q, unit);
                }
            }
        }
        for q in gone {
            if self.first.get(&q).is_some_and(|(w, _)| w == worker) {
                self.first.remove(&q);
                self.reserved.remove(&q);
            }
            self.earlier.remove(&(q, worker.to_string()));
            self.noted.retain(|g| g.unit != q || g.worker != worker);
            self.revoked.push((q, worker.to_string()));
        }
    }

    /// True when an earlier run recorded a first holder for `q` (see [`Units::reserved`]).
    pub fn is_reserved(&self, q: &Question) -> bool {
        self.reserved.contains(q)
    }

    /// Notes the backups that took a first lease on `qs` (all units when none are named),
    /// at once: a worker that let a unit go must not stay its recorded first holder.
    fn note_promotions(&mut self, qs: &[Question]) {
        let promoted: Vec<(Question, (String, u64))> = if qs.is_empty() {
            self.units.iter_mut().filter_map(|(q, u)| Some((*q, u.promoted.take()?))).collect()
        } else {
            qs.iter().filter_map(|q| Some((*q, self.units.get_mut(q)?.promoted.take()?))).collect()
        };
        for (q, (worker, attempt)) in promoted {
            self.note(q, &worker, attempt, true);
        }
    }

    /// Notes a grant for the state; a first holder's replaces the unit's recorded one.
    fn note(&mut self, unit: Question, worker: &str, attempt: u64, first: bool) {
        self.revoked.retain(|(q, w)| *q != unit || w != worker);
        if first {
            self.first.insert(unit, (worker.to_string(), attempt));
        }
        self.noted.push(Grant { unit, worker: worker.to_string(), attempt, first });
    }

    /// The lease length.
    pub fn lease_length(&self) -> Duration {
        self.lease
    }

    /// The unit, if it was ever handed out or answered.
    pub fn get(&self, q: &Question) -> Option<&Unit> {
        self.units.get(q)
    }

    /// The unit, made when new.
    pub fn entry(&mut self, q: Question) -> &mut Unit {
        self.units.entry(q).or_default()
    }

    /// True when an unfinished result split `q`.
    pub fn is_split(&self, q: &Question) -> bool {
        self.units.get(q).is_some_and(|u| u.split)
    }

    /// True when nobody holds `q` and it was not split.
    pub fn is_free(&self, q: &Question) -> bool {
        self.units.get(q).is_none_or(|u| !u.split && u.lease.is_none())
    }

    /// True when nobody holds `q`.
    pub fn is_unleased(&self, q: &Question) -> bool {
        self.units.get(q).is_none_or(|u| u.lease.is_none())
    }

    /// True when a result of `worker` on `q` was refused.
    pub fn refused(&self, q: &Question, worker: &str) -> bool {
        self.units.get(q).is_some_and(|u| u.refused.contains(worker))
    }

    /// Ends the leases on `q` (see [`Unit::end_leases`]).
    pub fn end_leases(&mut self, q: &Question) -> bool {
        self.units.get_mut(q).is_some_and(Unit::end_leases)
    }

    /// Drops the lease `worker` holds on `q`, if it holds one.
    pub fn drop_lease_of(&mut self, q: &Question, worker: &str) {
        if let Some(u) = self.units.get_mut(q) {
            u.drop_leases(|l| l.worker == worker);
        }
        self.note_promotions(std::slice::from_ref(q));
    }

    /// Forgets a worker found wrong: its leases go back, and so do its refusals. Other
    /// workers' refusals stay, even those its facts caused: each refused answer waits in the
    /// ledger for the coordinator's search, which decides it without the worker answering
    /// again (forgetting them let a refused answer be sent and logged again each time a
    /// throwaway identity was distrusted).
    pub fn forget_distrusted(&mut self, worker: &str) {
        for unit in self.units.values_mut() {
            unit.drop_leases(|l| l.worker == worker);
            unit.refused.remove(worker);
        }
        self.note_promotions(&[]);
        self.forget_worker(worker);
        self.revoke(worker, &[]);
    }

    /// The branch thread `slot` of `worker` worked on last.
    pub fn affinity(&self, worker: &str, slot: u32) -> Option<Branch> {
        self.affinity.get(&(worker.to_string(), slot)).copied()
    }

    /// Hands `q` to thread `slot` of `worker` under the next attempt number, which it
    /// returns, with a node budget of `budget` (0: to be searched whole); as a backup when
    /// someone holds it (see [`Units::backup_for`]).
    pub fn grant(
        &mut self,
        q: Question,
        worker: &str,
        slot: u32,
        branch: Option<Branch>,
        budget: u64,
        now: Instant,
    ) -> u64 {
        if let Some(b) = branch {
            self.affinity.insert((worker.to_string(), slot), b);
        }
        let deadline = now + self.lease;
        let unit = self.units.entry(q).or_default();
        unit.attempt += 1;
        unit.held_since.get_or_insert(now);
        let lease = Lease {
            branch,
            worker: worker.to_string(),
            attempt: unit.attempt,
            since: Some(now),
            deadline,
            nodes: 0,
            budget: Some(budget),
            vouched: true,
        };
        let first = unit.lease.is_none();
        if first {
            unit.lease = Some(lease);
        } else {
            unit.backups.push(lease);
        }
        let attempt = unit.attempt;
        unit.grant_to(worker, attempt);
        self.note(q, worker, attempt, first);
        attempt
    }

    /// A unit `worker` may take as a backup (see the module documentation): held by others,
    /// leased for [`BACKUP_AFTER`] lease periods or more ([`Unit::held_since`]), and for which `may` says yes
    /// (the scheduler: still needed, not answered); the one with the fewest holders first, then
    /// the longest held. With the branch its first holder has.
    pub fn backup_for(
        &self,
        worker: &str,
        now: Instant,
        may: impl Fn(&Question) -> bool,
    ) -> Option<(Question, Option<Branch>)> {
        let old = self.lease * BACKUP_AFTER;
        self.units
            .iter()
            .filter_map(|(q, u)| Some((q, u.lease.as_ref()?, u.held_since?, u)))
            .filter(|(q, _, since, u)| {
                !u.held_by(worker) && !u.split && now.saturating_duration_since(*since) >= old && may(q)
            })
            .min_by_key(|(q, _, since, u)| (u.backups.len(), *since, **q))
            .map(|(q, l, ..)| (*q, l.branch))
    }

    /// True when `q` was handed to `worker` under `attempt` in this run.
    pub fn granted(&self, q: &Question, worker: &str, attempt: u64) -> bool {
        self.units.get(q).is_some_and(|u| u.grants.iter().any(|(w, a)| w == worker && *a == attempt))
    }

    /// Gives `q` to `worker` under the attempt it searches it with, when an earlier run
    /// leased it `q` under that attempt (see [`Units::granted_earlier`]: a client cannot
    /// adopt a unit it was never given). The unit's recorded first holder takes the first
    /// lease (whoever came back before it becomes a backup); anyone else holds it unvouched
    /// (see [`Lease::vouched`]), as a backup when another worker holds it. False when it
    /// holds it, or was not granted it so. The budget it was leased with is not known (the
    /// earlier run may have had another `--unit-nodes`, or have leased it to be searched
    /// whole): the lease has none.
    pub fn adopt(&mut self, q: Question, worker: &str, attempt: u64, nodes: u64, now: Instant) -> bool {
        let key = (worker.to_string(), attempt);
        let vouched = self.first.get(&q) == Some(&key);
        if !vouched && self.earlier.get(&(q, key.0.clone())) != Some(&attempt) {
            return false;
        }
        let deadline = now + self.lease;
        let unit = self.units.entry(q).or_default();
        if unit.held_by(worker) || unit.split {
            return false;
        }
        unit.attempt = unit.attempt.max(attempt);
        unit.held_since.get_or_insert(now);
        let lease = Lease {
            branch: None,
            worker: worker.to_string(),
            attempt,
            since: None,
            deadline,
            nodes,
            budget: None,
            vouched,
        };
        if vouched {
            if let Some(other) = unit.lease.replace(lease) {
                unit.backups.insert(0, other);
            }
        } else if unit.lease.is_some() {
            unit.backups.push(lease);
        } else {
            unit.lease = Some(lease);
        }
        unit.grant_to(worker, attempt);
        tracing::info!(unit = %q, worker, attempt, "adopted a unit the worker was already searching");
        true
    }

    /// A heartbeat of `worker` for attempt `attempt` of `q`, which still matters: extends
    /// the lease while nodes grow. When `capped` (a plain job: nothing but the search
    /// counts nodes), a lease with a known node budget only up to twice that and [`OVERSHOOT`]:
    /// past its budget an honest worker sends its unfinished result, so one that only
    /// sends heartbeats cannot hold the unit for ever (in a certified job the proof that
    /// follows a search has no budget). False when the worker should stop (split, not its
    /// lease, or nobody's: see [`Units::adopt`]).
    pub fn heartbeat(
        &mut self,
        q: Question,
        worker: &str,
        attempt: u64,
        nodes: u64,
        capped: bool,
        now: Instant,
    ) -> bool {
        let lease = self.lease;
        let Some(unit) = self.units.get_mut(&q) else { return false };
        if unit.split {
            return false;
        }
        let mine =
            unit.lease.iter_mut().chain(unit.backups.iter_mut()).find(|l| l.worker == worker && l.attempt == attempt);
        let Some(l) = mine else { return false };
        if nodes > l.nodes {
            let within = |b: u64| b == 0 || nodes <= b.saturating_mul(2).saturating_add(OVERSHOOT);
            if !capped || l.budget.is_none_or(within) {
                l.deadline = now + lease;
            }
            l.nodes = nodes;
        }
        true
    }

    /// The branch the lease on `q` was handed out for.
    pub fn branch_of(&self, q: &Question) -> Option<Branch> {
        self.units.get(q).and_then(|u| u.lease.as_ref()).and_then(|l| l.branch)
    }

    /// Frees the leases `worker` holds on `qs` (all of them when empty); returns how many.
    pub fn release(&mut self, worker: &str, qs: &[Question]) -> u32 {
        let mut n = 0;
        let mut release = |unit: &mut Unit| {
            n += unit.drop_leases(|l| l.worker == worker).len() as u32;
        };
        if qs.is_empty() {
            self.units.values_mut().for_each(release);
        } else {
            let qs: HashSet<&Question> = qs.iter().collect();
            for q in qs {
                if let Some(unit) = self.units.get_mut(q) {
                    release(unit);
                }
            }
        }
        self.note_promotions(qs);
        self.revoke(worker, qs);
        n
    }

    /// Forgets which branch the threads of `worker` were on.
    pub fn forget_worker(&mut self, worker: &str) {
        self.affinity.retain(|(w, _), _| w != worker);
    }

    /// Keeps the branches of the threads of workers `alive` says are.
    pub fn keep_workers(&mut self, alive: impl Fn(&str) -> bool) {
        self.affinity.retain(|(id, _), _| alive(id));
    }

    /// Expires overdue leases (their units go back to the pool); returns the expired
    /// `(unit, worker)` pairs.
    pub fn expire(&mut self, now: Instant) -> Vec<(Question, String)> {
        let mut out = Vec::new();
        for (q, unit) in self.units.iter_mut() {
            out.extend(unit.drop_leases(|l| l.deadline <= now).into_iter().map(|l| (*q, l.worker)));
        }
        self.note_promotions(&[]);
        out
    }

    /// Nodes searched so far in units still leased (from heartbeats).
    pub fn in_flight_nodes(&self) -> u64 {
        self.units.values().flat_map(Unit::leases).fold(0u64, |n, l| n.saturating_add(l.nodes))
    }

    /// Units leased now.
    pub fn leased(&self) -> usize {
        self.units.values().filter(|u| u.lease.is_some()).count()
    }

    /// The units `worker` holds.
    pub fn held_by<'a>(&'a self, worker: &'a str) -> impl Iterator<Item = Question> + 'a {
        self.units.iter().filter(move |(_, u)| u.held_by(worker)).map(|(q, _)| *q)
    }

    /// The units split so far.
    pub fn splits(&self) -> impl Iterator<Item = Question> + '_ {
        self.units.iter().filter(|(_, u)| u.split).map(|(q, _)| *q)
    }
}
