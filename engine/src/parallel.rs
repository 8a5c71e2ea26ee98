//! A solve on several threads. Each thread runs the whole search with its own solver; all
//! share one transposition table (what one learns, the others use at once) and a set of
//! the regions near the root being searched now, so that a thread looking for an option
//! of some value starts with options no other thread is on. The first thread to finish
//! has the answer (every thread's answer is exact) and stops the others.

use crate::board::Board;
use crate::db::DbSet;
use crate::solver::{Busy, Config, Mode, Res, Search, SharedTables, Solution, Solver};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Plies from the root in which threads spread over the options (regions of at least the
/// root's cells less twice this take part in the busy set). Measured on 5x8 with two
/// threads: 0 plies 1.81 s, 2: 1.58 s, 4 and 6: 1.48 s, 8: 1.81 s, 12: 2.4-2.8 s (deeper,
/// the busy set's lock costs more than the spreading saves); one thread 2.77 s.
const SPREAD_PLIES: u32 = 5;

/// The progress callback all threads report to (whichever holds it sums the counts).
type SharedProgress = Arc<Mutex<Option<Box<dyn FnMut(u64) + Send>>>>;

/// The solvers of a parallel solve; reuse it across positions to keep the table.
pub struct ParallelSolver {
    solvers: Vec<Solver>,
    tables: Option<SharedTables>,
    progress: SharedProgress,
}

impl ParallelSolver {
    /// `threads` solvers (at least one) with the given settings sharing `tables`; without
    /// shared tables each solver keeps its own, growing to `config.tt_bytes` (what one
    /// thread on a small board wants; several threads need shared tables to cooperate).
    pub fn new(threads: usize, config: &Config, dbs: Arc<DbSet>, tables: Option<SharedTables>) -> ParallelSolver {
        let threads = threads.max(1);
        let counts: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
        let progress: SharedProgress = Arc::new(Mutex::new(None));
        let solvers = (0..threads)
            .map(|i| {
                let mut s = match &tables {
                    Some(t) => {
                        // Its own tables are replaced at once: keep them tiny.
                        let mut s = Solver::new(&Config { tt_bytes: 1 << 16, ..config.clone() }, dbs.clone());
                        s.set_shared(t);
                        s
                    }
                    None => Solver::new(config, dbs.clone()),
                };
                let (counts, progress) = (counts.clone(), progress.clone());
                s.set_progress(Box::new(move |nodes| {
                    counts[i].store(nodes, Ordering::Relaxed);
                    if let Ok(mut p) = progress.try_lock() {
                        if let Some(f) = p.as_mut() {
                            f(counts.iter().map(|c| c.load(Ordering::Relaxed)).sum());
                        }
                    }
                }));
                s
            })
            .collect();
        ParallelSolver { solvers, tables, progress }
    }

    /// The databases the threads consult.
    pub fn databases(&self) -> &DbSet {
        self.solvers[0].databases()
    }

    /// The first thread's solver, which shares the table of all (to ask it more after a
    /// solve, e.g. to build a certificate).
    pub fn lead(&mut self) -> &mut Solver {
        &mut self.solvers[0]
    }

    /// Number of threads.
    pub fn threads(&self) -> usize {
        self.solvers.len()
    }

    /// Bytes held by the transposition tables (shared ones: their whole size, though their
    /// memory is taken as it is touched).
    pub fn table_bytes(&self) -> usize {
        match &self.tables {
            Some(t) => t.bytes(),
            None => self.solvers.iter().map(Solver::table_bytes).sum(),
        }
    }

    /// Search nodes of all threads so far.
    pub fn nodes(&self) -> u64 {
        self.solvers.iter().map(Solver::nodes).sum()
    }

    /// Calls `f` with the node count of all threads every few thousand nodes.
    pub fn set_progress(&mut self, f: Box<dyn FnMut(u64) + Send>) {
        *self.progress.lock().expect("progress lock") = Some(f);
    }

    /// Chooses how every thread's nodes decide the values asked about (the answers are the
    /// same; [`Search::Sets`] is there to compare).
    pub fn set_search(&mut self, search: Search) {
        for s in &mut self.solvers {
            s.set_search(search);
        }
    }

    /// Stops every thread with [`crate::Interrupted::Cancelled`] once `flag` is raised.
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        for s in &mut self.solvers {
            s.set_cancel(flag.clone());
        }
    }

    /// Solves a whole board on all threads.
    pub fn solve(&mut self, board: &Board, mode: Mode) -> Res<Solution> {
        if self.solvers.len() == 1 {
            return self.solvers[0].solve(board, mode);
        }
        let busy = Arc::new(Busy::new(board.empty_count().saturating_sub(2 * SPREAD_PLIES)));
        let stop = Arc::new(AtomicBool::new(false));
        let answers: Vec<Res<Solution>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .solvers
                .iter_mut()
                .map(|s| {
                    s.join_parallel(busy.clone(), stop.clone());
                    let stop = stop.clone();
                    scope.spawn(move || {
                        let answer = s.solve(board, mode);
                        if answer.is_ok() {
                            stop.store(true, Ordering::Relaxed);
                        }
                        answer
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a search thread panicked")).collect()
        });
        for s in &mut self.solvers {
            s.leave_parallel();
        }
        // Any thread's answer is exact; when none finished, they all report why.
        let mut first_error = None;
        for a in answers {
            match a {
                Ok(s) => return Ok(s),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.expect("at least one thread"))
    }
}
