//! What a worker's searches know beyond the unit at hand, in one place with one
//! [`Memory::reset`]: the transposition tables its search threads share, the workers whose
//! shared facts the tables hold, the generation of the tables (bumped by a reset, so that a
//! thread with an older solver builds a new one), and in a certified job the facts of its
//! proofs that the coordinator kept.

use crate::owners_model::OwnersModel;
use cram_certificate::Shape;
use cram_engine::proof::Proofs;
use cram_engine::solver::SharedTables;
use cram_engine::{Config, DbSet, Solver};
use cram_proto::pb;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The facts a coordinator kept from the proofs of a process's search threads, in the
/// order they were sent (region and value), and the generation of the tables they were
/// proved with (a reset empties it). Each thread takes the others' into its own proofs
/// before it proves a unit, so that no fact is proved twice in one process. A fact that
/// a coordinator later discards (its worker distrusted) costs only time: the
/// coordinator's assembly proves again what its certificate lacks, and checks it.
#[derive(Clone, Default)]
pub struct ProvedLog(Arc<Mutex<Generation>>);

/// Facts (region and value) proved with the tables of one generation.
type Generation = (u64, Vec<(Shape, u8)>);

impl ProvedLog {
    /// Appends facts proved with the tables of `generation` (a newer one empties the log).
    pub fn add(&self, generation: u64, facts: Vec<(Shape, u8)>) {
        let mut log = self.0.lock().expect("proved lock");
        if log.0 != generation {
            *log = (generation, Vec::new());
        }
        log.1.extend(facts);
    }

    /// Adds to `proofs` the facts of `generation` past the first `seen`, and moves `seen`
    /// past them.
    pub fn take_new(&self, proofs: &mut Proofs, seen: &mut usize, generation: u64) {
        let log = self.0.lock().expect("proved lock");
        if log.0 == generation && *seen < log.1.len() {
            proofs.add_known(&log.1[*seen..]);
            *seen = log.1.len();
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
    tables: Mutex<Option<SharedTables>>,
    /// The workers whose shared facts the tables hold (since the last reset).
    loaded: Mutex<BTreeSet<String>>,
    generation: AtomicU64,
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
        Memory {
            dbs,
            tt_bytes,
            threads: threads.max(1),
            tables: Mutex::new(tables),
            loaded: Mutex::new(BTreeSet::new()),
            generation: AtomicU64::new(0),
            proved,
            owners,
        }
    }

    /// The generation of the tables now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A solver for the job's engine settings: on the threads' shared tables if they have
    /// them, else with a table of its own (its share of the budget).
    pub fn solver(&self, pairing: bool) -> Solver {
        let shared = self.tables.lock().expect("tables lock").clone();
        let own = if shared.is_some() { 0 } else { self.tt_bytes / self.threads };
        let mut s = Solver::new(&Config { tt_bytes: own, pairing }, self.dbs.clone());
        if let Some(t) = &shared {
            s.set_shared(t);
        }
        if let Some(model) = &self.owners {
            s.set_remote(Some(model.link()));
        }
        s
    }

    /// Loads facts other workers shared into `solver`'s tables, noting their origins;
    /// returns how many were loaded.
    pub fn preload(&self, solver: &mut Solver, shared: &[pb::SharedFact]) -> u64 {
        let mut loaded = self.loaded.lock().expect("loaded lock");
        let mut n = 0;
        for f in shared {
            match cram_proto::shared_from_pb(f) {
                Ok(fact) if !f.origin.is_empty() => {
                    solver.preload(&fact.region, fact.facts, fact.nodes);
                    loaded.insert(f.origin.clone());
                    n += 1;
                }
                Ok(_) => tracing::warn!("a shared fact without its origin; not loaded"),
                Err(e) => tracing::warn!("a shared fact this worker cannot use: {}", e.message()),
            }
        }
        n
    }

    /// The workers whose shared facts the tables hold.
    pub fn uses(&self) -> Vec<String> {
        self.loaded.lock().expect("loaded lock").iter().cloned().collect()
    }

    /// Those of `distrusted` whose facts the tables hold.
    pub fn tainted_by(&self, distrusted: &[String]) -> Vec<String> {
        let loaded = self.loaded.lock().expect("loaded lock");
        distrusted.iter().filter(|w| loaded.contains(*w)).cloned().collect()
    }

    /// Drops everything the tables hold: new tables, a new generation (each thread builds
    /// a new solver), nothing loaded.
    pub fn reset(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.loaded.lock().expect("loaded lock").clear();
        if let Some(t) = self.tables.lock().expect("tables lock").as_mut() {
            *t = SharedTables::new(self.tt_bytes);
        }
    }

    /// Records facts of one thread's proof that the coordinator kept, proved with the
    /// tables of `generation`.
    pub fn add_proved(&self, generation: u64, facts: Vec<(Shape, u8)>) {
        self.proved.add(generation, facts);
    }

    /// Gives a search thread's proofs the facts kept since it last looked (its own among
    /// them, which it holds already), so that it does not prove them again.
    pub fn take_proved(&self, proofs: &mut Proofs, seen: &mut usize, generation: u64) {
        self.proved.take_new(proofs, seen, generation);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_the_facts_kept_of_their_generation_once() {
        let shape = |cells: u128| Shape::of(1, 32, cells);
        let log = ProvedLog::default();
        let (mut proofs, mut seen) = (Proofs::new(12), 0);
        log.add(0, vec![(shape(0xffff), 1), (shape(0xfffff), 2)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (2, 2));
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (2, 2), "nothing new");
        log.add(0, vec![(shape(0xffffff), 0), (shape(0xffff), 1)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (3, 4), "a fact held already is not added twice");
        // A reset (a distrusted worker's facts were in the tables) starts a new log, which
        // a thread of the old generation does not take.
        log.add(1, vec![(shape(0xfffffff), 2)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!(proofs.len(), 3);
        let (mut fresh, mut from) = (Proofs::new(12), 0);
        log.take_new(&mut fresh, &mut from, 1);
        assert_eq!((fresh.len(), from), (1, 1));
    }
}
