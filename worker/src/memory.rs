//! What a worker's searches know beyond the unit at hand, in one place: the transposition
//! tables its search threads share (with the facts other workers shared loaded into them,
//! each verified by the coordinator first, so nothing in them falls with its origin), and in
//! a certified job the facts of its proofs that the coordinator kept.

use crate::owners_model::OwnersModel;
use cram_certificate::Shape;
use cram_engine::proof::Proofs;
use cram_engine::solver::SharedTables;
use cram_engine::{Config, DbSet, Solver};
use cram_proto::pb;
use std::sync::{Arc, Mutex};

/// The facts a coordinator kept from the proofs of a process's search threads, in the
/// order they were sent (region and value). Each thread takes the others' into its own proofs
/// before it proves a unit, so that no fact is proved twice in one process. A fact that
/// a coordinator later discards (its worker distrusted) costs only time: the
/// coordinator's assembly proves again what its certificate lacks, and checks it.
#[derive(Clone, Default)]
pub struct ProvedLog(Arc<Mutex<Vec<(Shape, u8)>>>);

impl ProvedLog {
    /// Appends facts the coordinator kept.
    pub fn add(&self, facts: Vec<(Shape, u8)>) {
        self.0.lock().expect("proved lock").extend(facts);
    }

    /// Adds to `proofs` the facts past the first `seen`, and moves `seen` past them.
    pub fn take_new(&self, proofs: &mut Proofs, seen: &mut usize) {
        let log = self.0.lock().expect("proved lock");
        if *seen < log.len() {
            proofs.add_known(&log[*seen..]);
            *seen = log.len();
        }
    }
}

/// The transposition tables `threads` search threads of one process share, `tt_bytes` in
/// all (none for a single thread, which keeps its own growing table).
pub fn shared_tables(threads: usize, tt_bytes: usize) -> Option<SharedTables> {
    (threads > 1).then(|| SharedTables::new(tt_bytes))
}

/// What the worker's searches know (see the module documentation).
pub struct Memory {
    dbs: Arc<DbSet>,
    tt_bytes: usize,
    threads: usize,
    /// The tables the search threads share (none: each thread has its own).
    tables: Option<SharedTables>,
    /// In a certified job: the facts the coordinator kept from this process's proofs.
    proved: ProvedLog,
    /// The model of knowledge with owners every solver is linked to, if any.
    owners: Option<OwnersModel>,
}

impl Memory {
    /// The memory of `threads` search threads with `tt_bytes` of tables in all (`tables`:
    /// shared ones, if the threads share), searching with `dbs` (and `owners`, a model of
    /// knowledge with owners, if any).
    pub fn new(
        dbs: Arc<DbSet>,
        threads: usize,
        tt_bytes: usize,
        tables: Option<SharedTables>,
        proved: ProvedLog,
        owners: Option<OwnersModel>,
    ) -> Memory {
        Memory { dbs, tt_bytes, threads: threads.max(1), tables, proved, owners }
    }

    /// A solver for the job's engine settings: on the threads' shared tables if they have
    /// them, else with a table of its own (its share of the budget).
    pub fn solver(&self, pairing: bool) -> Solver {
        let own = if self.tables.is_some() { 0 } else { self.tt_bytes / self.threads };
        let mut s = Solver::new(&Config { tt_bytes: own, pairing }, self.dbs.clone());
        if let Some(t) = &self.tables {
            s.set_shared(t);
        }
        if let Some(model) = &self.owners {
            s.set_remote(Some(model.link()));
        }
        s
    }

    /// Loads facts other workers shared (each verified by the coordinator) into `solver`'s
    /// tables; returns how many were loaded.
    pub fn preload(&self, solver: &mut Solver, shared: &[pb::SharedFact]) -> u64 {
        let mut n = 0;
        for f in shared {
            match cram_proto::shared_from_pb(f) {
                Ok(fact) => {
                    solver.preload(&fact.region, fact.facts, fact.nodes);
                    n += 1;
                }
                Err(e) => tracing::warn!("a shared fact this worker cannot use: {}", e.message()),
            }
        }
        n
    }

    /// Records facts of one thread's proof that the coordinator kept.
    pub fn add_proved(&self, facts: Vec<(Shape, u8)>) {
        self.proved.add(facts);
    }

    /// Gives a search thread's proofs the facts kept since it last looked (its own among
    /// them, which it holds already), so that it does not prove them again.
    pub fn take_proved(&self, proofs: &mut Proofs, seen: &mut usize) {
        self.proved.take_new(proofs, seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_the_facts_kept_once() {
        let shape = |cells: u128| Shape::of(1, 32, cells);
        let log = ProvedLog::default();
        let (mut proofs, mut seen) = (Proofs::new(12), 0);
        log.add(vec![(shape(0xffff), 1), (shape(0xfffff), 2)]);
        log.take_new(&mut proofs, &mut seen);
        assert_eq!((proofs.len(), seen), (2, 2));
        log.take_new(&mut proofs, &mut seen);
        assert_eq!((proofs.len(), seen), (2, 2), "nothing new");
        log.add(vec![(shape(0xffffff), 0), (shape(0xffff), 1)]);
        log.take_new(&mut proofs, &mut seen);
        assert_eq!((proofs.len(), seen), (3, 4), "a fact held already is not added twice");
        let (mut fresh, mut from) = (Proofs::new(12), 0);
        log.take_new(&mut fresh, &mut from);
        assert_eq!((fresh.len(), from), (3, 4), "a new thread takes them all");
    }
}
