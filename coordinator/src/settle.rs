//! The coordinator's own searches: verifications of results it chose, decisions between
//! results that contradict each other, conflicts, shared facts. The coordinator is the one
//! party whose answer is not in question, so it searches with the engine's full strength:
//! up to `threads` searches at once, each asking its question (not more), all on one
//! transposition table kept from search to search.

use cram_engine::facts::Facts;
use cram_engine::solver::SharedTables;
use cram_engine::{Config, DbSet, Interrupted, Question, Solver};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::task::JoinSet;

/// A search's outcome: the question and its answer (or why the search stopped), with the
/// nodes and milliseconds it took.
pub struct Searched {
    /// The question searched.
    pub question: Question,
    /// The answer, or why the search stopped.
    pub facts: Result<Facts, Interrupted>,
    /// Search nodes.
    pub nodes: u64,
    /// Wall time in milliseconds.
    pub millis: u64,
}

/// The coordinator's own searches: those under way and the solvers between them.
pub struct Checker {
    threads: usize,
    idle: Vec<Solver>,
    running: JoinSet<(Solver, Searched)>,
    cancel: Arc<AtomicBool>,
    tables: SharedTables,
    config: Config,
    dbs: Arc<DbSet>,
}

impl Checker {
    /// Up to `threads` searches at once on one table of `tt_bytes`, with `pairing` and `dbs`
    /// like the workers.
    pub fn new(threads: usize, tt_bytes: usize, pairing: bool, dbs: Arc<DbSet>) -> Checker {
        Checker {
            threads: threads.max(1),
            idle: Vec::new(),
            running: JoinSet::new(),
            cancel: Arc::new(AtomicBool::new(false)),
            tables: SharedTables::new(tt_bytes),
            config: Config { tt_bytes: 0, pairing },
            dbs,
        }
    }

    /// True when another search can start now.
    pub fn has_room(&self) -> bool {
        self.running.len() < self.threads
    }

    /// True when a search the answer does not wait for (a shared fact's region) may start
    /// now: such searches take at most half the threads, rounded down (none of one), so that the
    /// searches the answer waits for always find a thread.
    pub fn has_room_for_later(&self) -> bool {
        self.running.len() < self.threads / 2
    }

    /// Starts searching `q` (when [`Checker::has_room`]), within `budget` nodes when given.
    pub fn start(&mut self, q: Question, budget: Option<u64>) {
        tracing::info!(question = %q, "the coordinator searches a question itself");
        let mut solver = self.idle.pop().unwrap_or_else(|| {
            let mut s = Solver::new(&self.config, self.dbs.clone());
            s.set_shared(&self.tables);
            s
        });
        solver.set_cancel(self.cancel.clone());
        solver.set_budget(budget.unwrap_or(u64::MAX));
        self.running.spawn_blocking(move || {
            let (started, before) = (Instant::now(), solver.nodes());
            let facts = solver.answer(q).map(|f| q.query.answer_only(f));
            let nodes = solver.nodes() - before;
            (solver, Searched { question: q, facts, nodes, millis: started.elapsed().as_millis() as u64 })
        });
    }

    /// Completes when a search under way does (never when none is).
    pub async fn done(&mut self) -> Searched {
        match self.running.join_next().await {
            Some(joined) => {
                let (solver, searched) = joined.unwrap_or_else(|e| panic!("the coordinator's own search failed: {e}"));
                self.idle.push(solver);
                searched
            }
            None => std::future::pending().await,
        }
    }

    /// Stops the searches under way.
    pub fn cancel(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.running.abort_all();
    }
}
