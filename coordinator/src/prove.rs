//! A certified job's evidence: each result's proof, checked by the independent checker's
//! rules ([`cram_certificate::Ledger`]) against the facts of the proofs checked before it.
//! A proof that checks makes its result count; one that does not shows its worker wrong.
//!
//! Up to `threads` proofs are checked at once, all against one ledger, so that the checks
//! keep up with many workers. Every fact a ledger holds is true whatever order the checks
//! ran in; but a proof rests on facts of the proofs its worker sent before it, so a
//! worker's proofs are checked one at a time, in the order they came, and proofs of
//! different workers side by side. A proof can still rest on another worker's that came
//! before it (the workers of `cram solve --workers` share facts), so one that fails while a
//! proof that came before it is not done is checked again once every such proof is: only
//! a proof that fails against the facts of every proof that came before it is refused, as
//! when they were all checked one at a time. The ledger of checked facts is built again on
//! a restart from the proofs the log says were checked.
//!
//! A proof's facts being true is not enough: they must show what its result answers (the
//! unit's value, or that the value is not the one asked). A proof that holds no fact of
//! the unit's region, or true facts of other regions, is refused like a false one.

use crate::events::{Event, ResultRecord};
use crate::scheduler::status::describe;
use crate::store::{read_proof, StoreError};
use cram_certificate::{Ledger, Rejection, Shape};
use cram_engine::facts::Facts;
use cram_engine::Question;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinSet;

/// What checking one proof found.
pub enum Checked {
    /// It checks: the facts it added.
    Proved(u64),
    /// It does not: why (the worker is wrong).
    Refused(String),
    /// Its file cannot be read (lost with a machine): the unit is to be proved again.
    Lost(String),
}

/// A proof check's outcome, with what was checked.
pub struct ProofChecked {
    /// The unit whose result the proof is of.
    pub unit: Question,
    /// The worker that sent it.
    pub worker: String,
    /// The proof's file.
    pub file: String,
    /// What the check found.
    pub checked: Checked,
}

/// A result's proof to check.
#[derive(Clone, Debug)]
pub struct ProofDue {
    /// The unit the result answers.
    pub unit: Question,
    /// The worker that sent it.
    pub worker: String,
    /// The proof's file.
    pub file: String,
    /// What the result says in answer to its unit ([`cram_engine::Query::answer_only`]):
    /// what the proof must show.
    pub claim: Facts,
}

impl ProofDue {
    /// The proof of result `r`, if it has one.
    pub fn of(r: &ResultRecord) -> Option<ProofDue> {
        Some(ProofDue { unit: r.unit, worker: r.worker.clone(), file: r.proof.clone()?, claim: r.answer() })
    }
}

/// The memory reading the proofs of a certified job may take together, unless told
/// otherwise (`--proof-memory-mb`): real proofs take a few hundred MB at most to read
/// (3x22's largest, 60 MB sent, some 0.5 GB).
pub const DEFAULT_PROOF_MEMORY: u64 = 4 << 30;

/// Checks `bytes`, the proof of a result claiming `claim` about `unit`, against the facts
/// `ledger` holds (on up to `threads` threads), reading it in at most `memory` bytes, and
/// adds its facts to the ledger: how many it added, or why it does not check or does not
/// show the claim.
pub fn check_proof(
    ledger: &Ledger,
    unit: Question,
    claim: Facts,
    bytes: &[u8],
    threads: usize,
    memory: u64,
) -> Result<u64, String> {
    let facts = cram_engine::proof::read_export(bytes, memory)
        .map_err(|e| format!("its proof of {unit} cannot be read: {e}"))?;
    let added = match ledger.verify_on(&facts, threads) {
        Ok(n) => n as u64,
        Err(Rejection::Fact { region, value, why, .. }) => {
            return Err(format!("its proof of {unit} does not check: {region} = *{value}: {why}"))
        }
        Err(e) => return Err(format!("its proof of {unit} does not check: {e}")),
    };
    if !shows(ledger, &unit, claim) {
        return Err(format!("its proof of {unit} does not show its answer ({})", describe(Some(claim))));
    }
    Ok(added)
}

/// True when the facts `ledger` holds show `claim` about the region `unit` asks about: the
/// region's value is known and agrees with the claim; or, the value not known, each value
/// the claim rules out (up to half the region's cells: no region has a value above) is
/// that of a move into regions of known values, and the claim bounds the value by nothing
/// less than half the cells.
pub fn shows(ledger: &Ledger, unit: &Question, claim: Facts) -> bool {
    let (h, w) = unit.region.dims();
    let shape = Shape::of(h, w, unit.region.dense());
    if let Some(v) = ledger.value(&shape) {
        return claim.agrees_with(Facts::exact(v));
    }
    let most = (shape.size() / 2).min(u8::MAX as u32) as u8;
    if claim.upper < most {
        return false;
    }
    let mut shown = 0u32;
    for m in shape.moves() {
        let option = shape.after(m).iter().try_fold(0u8, |x, r| ledger.value(r).map(|v| x ^ v));
        if let Some(v) = option.filter(|&v| v < 32) {
            shown |= 1 << v;
        }
    }
    let ruled_out = claim.excluded & (u32::MAX >> (31 - most.min(31) as u32));
    ruled_out & !shown == 0
}

/// The memory a check of a proof of `size` bytes holds while it runs, out of `memory` for
/// all, and reads it in: 128 times the size (and 1 MiB), never more than all of `memory`.
/// Reading then allows the most the size can decompress to (16 times) and half a fact for
/// each byte sent, where real proofs hold at most 0.09 (measured on the 220 proofs of a
/// 4x11 and a 3x18 job, 2026-12-07) and decompress 1.5 to 1.75 times. A proof of 1 MB
/// holds 129 MiB; one of 32 MB or more, all of the default 4 GiB (it is read alone).
pub fn reservation(size: u64, memory: u64) -> u64 {
    size.saturating_mul(128).saturating_add(1 << 20).min(memory)
}

/// How far down the proofs not done [`ProofChecker`] looks for one it can start (the job's
/// event loop does the looking).
const MAX_SCAN: usize = 10_000;

/// A proof not yet found proved, refused or lost.
struct Pending {
    due: ProofDue,
    state: State,
}

/// Where a pending proof is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not checked yet.
    Waiting,
    /// Being checked; `first`: every proof that came before it was done when it started, so
    /// a failure is the proof's own.
    UnderWay { first: bool },
    /// Failed beside an earlier proof: checked again once every proof before it is done.
    Again,
}

/// The checker of a certified job's proofs.
pub struct ProofChecker {
    dir: PathBuf,
    ledger: Arc<Ledger>,
    threads: usize,
    /// The memory reading the proofs under way may take together ([`reservation`]).
    memory: u64,
    /// Of it, what no check under way holds.
    free: u64,
    running: JoinSet<(u64, Checked, u64)>,
    /// The proofs not yet done, by the order they came in.
    pending: BTreeMap<u64, Pending>,
    next_seq: u64,
}

impl ProofChecker {
    /// A checker of the proofs in `dir`, for regions above `small` cells, up to `threads`
    /// at once, reading them in at most `memory` bytes together (each check holds its
    /// [`reservation`]: a proof as large as `memory` allows is read alone), starting from
    /// the proofs a replay found checked (`proved`: their files, in log order). Returns the
    /// checker and the units whose checked proofs are gone (to be proved again).
    pub fn new(
        dir: &Path,
        small: u32,
        threads: usize,
        memory: u64,
        proved: &[(Question, String)],
    ) -> (ProofChecker, Vec<Question>) {
        let ledger = Ledger::new(small);
        let mut lost = Vec::new();
        for (unit, file) in proved {
            let read = read_proof(dir, file).map_err(|e| e.to_string());
            match read.and_then(|b| cram_engine::proof::read_export(&b, memory)) {
                Ok(facts) => {
                    for f in facts {
                        ledger.add_verified(f.shape, f.value);
                    }
                }
                Err(e) => {
                    tracing::warn!(proof = %file, unit = %unit, "a checked proof cannot be read: {e}; its unit is proved again");
                    lost.push(*unit);
                }
            }
        }
        let checker = ProofChecker {
            dir: dir.to_path_buf(),
            ledger: Arc::new(ledger),
            threads: threads.max(1),
            memory,
            free: memory,
            running: JoinSet::new(),
            pending: BTreeMap::new(),
            next_seq: 0,
        };
        (checker, lost)
    }

    /// Takes the proofs `next` hands out (in the order the results came), and starts checks
    /// while there is room: of each worker the first proof not done, if no check of that
    /// worker is under way, and a proof to check again only once every proof before it is
    /// done.
    pub fn start_due(&mut self, mut next: impl FnMut() -> Option<ProofDue>) {
        while let Some(due) = next() {
            self.pending.insert(self.next_seq, Pending { due, state: State::Waiting });
            self.next_seq += 1;
        }
        let mut starting = Vec::new();
        while self.running.len() + starting.len() < self.threads {
            let Some((seq, first)) = self.startable() else { break };
            // In the order they came: one that does not fit the memory free now waits for
            // checks under way to end (there is one, or all of `memory` is free).
            let size = std::fs::metadata(self.dir.join(&self.pending[&seq].due.file)).map_or(0, |m| m.len());
            let need = reservation(size, self.memory);
            if need > self.free {
                debug_assert!(self.running.len() + starting.len() > 0, "all the memory is free");
                break;
            }
            self.free -= need;
            self.pending.get_mut(&seq).expect("pending").state = State::UnderWay { first };
            starting.push((seq, need));
        }
        // Threads no other proof can have now go to those starting, to check a proof's
        // facts of one size side by side (a proof that can start later takes a thread of
        // its own: for a while there may be more threads than `threads`).
        let idle = self.threads - self.running.len() - starting.len();
        let n = starting.len();
        for (k, (seq, need)) in starting.into_iter().enumerate() {
            self.spawn(seq, 1 + idle / n + usize::from(k < idle % n), need);
        }
    }

    /// The first proof that can be checked now, and whether it is the first not done.
    /// (It looks at the first [`MAX_SCAN`] proofs not done: past a backlog that long,
    /// checks start as the ones before them end.)
    fn startable(&self) -> Option<(u64, bool)> {
        let mut behind: HashSet<&str> = HashSet::new();
        for (i, (&seq, p)) in self.pending.iter().enumerate().take(MAX_SCAN) {
            let ready = match p.state {
                State::Waiting => true,
                State::Again => i == 0,
                State::UnderWay { .. } => false,
            };
            if !behind.insert(&p.due.worker) {
                continue;
            }
            if ready {
                return Some((seq, i == 0));
            }
        }
        None
    }

    /// Starts checking pending proof `seq` (marked under way) on `threads` threads, reading
    /// it in at most `memory` bytes (reserved).
    fn spawn(&mut self, seq: u64, threads: usize, memory: u64) {
        let due = &self.pending[&seq].due;
        let (ledger, dir, unit, claim, file) =
            (self.ledger.clone(), self.dir.clone(), due.unit, due.claim, due.file.clone());
        self.running.spawn_blocking(move || {
            let checked = match read_proof(&dir, &file) {
                Err(e @ StoreError::Io { .. }) => Checked::Lost(e.to_string()),
                Err(e) => Checked::Lost(e.to_string()),
                Ok(bytes) => match check_proof(&ledger, unit, claim, &bytes, threads, memory) {
                    Ok(n) => Checked::Proved(n),
                    Err(why) => Checked::Refused(why),
                },
            };
            (seq, checked, memory)
        });
    }

    /// Completes when a check under way does (never when none is): what it found, or
    /// `None` when the proof is to be checked again once the proofs before it are.
    pub async fn done(&mut self) -> Option<ProofChecked> {
        let Some(joined) = self.running.join_next().await else { return std::future::pending().await };
        let (seq, checked, memory) = joined.unwrap_or_else(|e| panic!("the proof checker failed: {e}"));
        self.free += memory;
        let p = self.pending.get_mut(&seq).expect("a check of a pending proof");
        if matches!(checked, Checked::Refused(_)) && p.state == (State::UnderWay { first: false }) {
            tracing::debug!(unit = %p.due.unit, "a proof failed beside an earlier one; it is checked again after it");
            p.state = State::Again;
            return None;
        }
        let ProofDue { unit, worker, file, .. } = self.pending.remove(&seq).expect("pending").due;
        Some(ProofChecked { unit, worker, file, checked })
    }

    /// Drops the proofs of `worker` not under way (it was distrusted: its results count for
    /// nothing).
    pub fn forget(&mut self, worker: &str) {
        self.pending.retain(|_, p| p.due.worker != worker || matches!(p.state, State::UnderWay { .. }));
    }

    /// The event a check calls for, if any: `Proved`, or the worker's `Distrust`.
    pub fn event(c: &ProofChecked) -> Option<Event> {
        match &c.checked {
            Checked::Proved(n) => Some(Event::Proved { unit: c.unit, worker: c.worker.clone(), facts: *n }),
            Checked::Refused(why) => Some(Event::Distrust { worker: c.worker.clone(), reason: why.clone() }),
            Checked::Lost(_) => None,
        }
    }
}

/// Checks the proofs of `queue` (in the order they came) with `checker` as a job does, and
/// returns what each check found, in the order they ended.
pub async fn check_queue(checker: &mut ProofChecker, mut queue: VecDeque<ProofDue>) -> Vec<ProofChecked> {
    let mut found = Vec::new();
    loop {
        checker.start_due(|| queue.pop_front());
        if checker.running.is_empty() {
            return found;
        }
        found.extend(checker.done().await);
    }
}

/// What checking a job's proofs again found ([`recheck`]).
pub struct Rechecked {
    /// Proofs checked.
    pub proofs: usize,
    /// Facts they hold.
    pub facts_sent: u64,
    /// Facts added.
    pub facts_added: u64,
    /// Proofs refused or lost.
    pub failed: usize,
    /// Why the first proof refused or lost was.
    pub first_failure: Option<String>,
    /// Wall time of the checks, in seconds.
    pub secs: f64,
}

/// Checks again, on `threads` threads, the proofs of the certified job in state directory
/// `state` that it found checked, in the order their results came, against a fresh
/// ledger: how fast a coordinator checks proofs (`cram bench --proofs`).
pub async fn recheck(state: &Path, threads: usize) -> Result<Rechecked, String> {
    let read = crate::store::read_log(&state.join(crate::store::LOG_FILE)).map_err(|e| e.to_string())?;
    let events = read.replay.events;
    let small = match events.first() {
        Some(Event::Job(j)) => j.certificate_small.ok_or("the job is not a certified one")?,
        _ => return Err(format!("{} holds no job", state.display())),
    };
    // In the order the results came (the order the job checked them in), those whose
    // proofs checked.
    let proved: std::collections::HashSet<(Question, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Proved { unit, worker, .. } => Some((*unit, worker.as_str())),
            _ => None,
        })
        .collect();
    let queue: VecDeque<ProofDue> = events
        .iter()
        .filter_map(|e| match e {
            Event::Result(r) if proved.contains(&(r.unit, r.worker.as_str())) => Some(ProofDue::of(r)?),
            _ => None,
        })
        .collect();
    let dir = state.join(crate::store::PROOF_DIR);
    let mut facts_sent = 0;
    for due in &queue {
        let bytes = read_proof(&dir, &due.file).map_err(|e| e.to_string())?;
        facts_sent += cram_engine::proof::read_export(&bytes, DEFAULT_PROOF_MEMORY)?.len() as u64;
    }
    let proofs = queue.len();
    let (mut checker, _) = ProofChecker::new(&dir, small, threads, DEFAULT_PROOF_MEMORY, &[]);
    let started = std::time::Instant::now();
    let found = check_queue(&mut checker, queue).await;
    let secs = started.elapsed().as_secs_f64();
    let facts_added = found.iter().map(|c| if let Checked::Proved(n) = c.checked { n } else { 0 }).sum();
    let mut failures = found.iter().filter_map(|c| match &c.checked {
        Checked::Proved(_) => None,
        Checked::Refused(why) | Checked::Lost(why) => Some(format!("{} of {}: {why}", c.file, c.worker)),
    });
    let first_failure = failures.next();
    let failed = first_failure.iter().count() + failures.count();
    Ok(Rechecked { proofs, facts_sent, facts_added, failed, first_failure, secs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cram_engine::proof::{Proofs, Prover};
    use cram_engine::region::AnyRegion;
    use cram_engine::{Board, Config, DbSet, Solver};
    use std::collections::HashMap;

    /// The question of a shape's nimber.
    fn nimber_of(s: &Shape) -> Question {
        Question::nimber(AnyRegion::from_dense(s.h as u32, s.w as u32, s.cells).expect("a region"))
    }

    /// What the checks of `queue` (worker, file, unit, claim) found, by file: "proved",
    /// "refused" or "lost" (each proof is found once; that a worker's proofs are checked
    /// one at a time is asserted as each check starts).
    async fn check_all(dir: &Path, queue: &[(&str, &str, Question, Facts)]) -> HashMap<String, &'static str> {
        check_all_in(dir, queue, DEFAULT_PROOF_MEMORY).await
    }

    /// [`check_all`] with `memory` for reading the proofs.
    async fn check_all_in(
        dir: &Path,
        queue: &[(&str, &str, Question, Facts)],
        memory: u64,
    ) -> HashMap<String, &'static str> {
        let (mut checker, lost) = ProofChecker::new(dir, 4, 2, memory, &[]);
        assert!(lost.is_empty());
        let queue = queue
            .iter()
            .map(|&(w, f, unit, claim)| ProofDue { unit, worker: w.to_string(), file: f.to_string(), claim })
            .collect();
        let found = check_queue(&mut checker, queue).await;
        let n = found.len();
        let by_file: HashMap<String, &str> = found
            .into_iter()
            .map(|c| {
                let kind = match c.checked {
                    Checked::Proved(_) => "proved",
                    Checked::Refused(_) => "refused",
                    Checked::Lost(_) => "lost",
                };
                (c.file, kind)
            })
            .collect();
        assert_eq!(by_file.len(), n, "each proof found once");
        by_file
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn proofs_are_checked_side_by_side_and_only_an_unfounded_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("cram-prove-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let board = Board::parse("4x5").expect("a board");
        let root = Shape::of(4, 5, board.empty());
        let (r0, r1) = (root.after(root.moves()[0])[0], root.after(root.moves()[7])[0]);
        let fresh = || Solver::new(&Config::default(), Arc::new(DbSet::default()));
        // Worker w1: a proof of r0, then one of the root resting on it. Worker w2: r1 on
        // its own. Worker w3: the root, resting on the facts of w1's first proof (given to
        // it).
        let (mut s1, mut s2, mut s3, mut s4) = (fresh(), fresh(), fresh(), fresh());
        let mut p = Prover::new(&mut s1, 4);
        p.prove_value(&r0).expect("proved");
        std::fs::write(dir.join("w1-a"), p.export()).expect("written");
        let mut proofs = p.into_proofs();
        let sent = proofs.sent();
        let mut p = Prover::with_proofs(&mut s1, 4, proofs);
        p.prove_value(&root).expect("proved");
        std::fs::write(dir.join("w1-b"), p.export()).expect("written");
        let mut p = Prover::new(&mut s2, 4);
        p.prove_value(&r1).expect("proved");
        std::fs::write(dir.join("w2"), p.export()).expect("written");
        let mut given = Proofs::new(4);
        given.add_known(&sent);
        let mut p = Prover::with_proofs(&mut s3, 4, given);
        p.prove_value(&root).expect("proved");
        std::fs::write(dir.join("w3"), p.export()).expect("written");
        // A proof resting on facts nobody sent (proved by a prover whose proof is never
        // sent).
        let mut p = Prover::new(&mut s4, 4);
        p.prove_value(&r1).expect("proved");
        let mut hidden = p.into_proofs();
        let mut given = Proofs::new(4);
        given.add_known(&hidden.sent());
        let mut s5 = fresh();
        let mut p = Prover::with_proofs(&mut s5, 4, given);
        p.prove_value(&root).expect("proved");
        std::fs::write(dir.join("unfounded"), p.export()).expect("written");

        let value = |s: &Shape| Facts::exact(fresh().nimber(nimber_of(s).region).expect("solved"));
        let (root_q, r0_q, r1_q) = (nimber_of(&root), nimber_of(&r0), nimber_of(&r1));
        let (root_v, r0_v, r1_v) = (value(&root), value(&r0), value(&r1));
        let w1a = ("w1", "w1-a", r0_q, r0_v);
        let w1b = ("w1", "w1-b", root_q, root_v);
        let w3 = ("w3", "w3", root_q, root_v);

        // In every interleaving of the checks: w3's proof is checked beside w1's first (and
        // checked again if it came first), w1's second only after w1's first.
        // With memory for one proof at a time (each reserves all of it), the same.
        for memory in [DEFAULT_PROOF_MEMORY, DEFAULT_PROOF_MEMORY, DEFAULT_PROOF_MEMORY, 1 << 20, 1 << 20] {
            let queue = [w1a, w3, w1b, ("w2", "w2", r1_q, r1_v), ("w4", "gone", r1_q, r1_v)];
            let found = check_all_in(&dir, &queue, memory).await;
            let expected: HashMap<String, &str> =
                [("w1-a", "proved"), ("w3", "proved"), ("w1-b", "proved"), ("w2", "proved"), ("gone", "lost")]
                    .into_iter()
                    .map(|(f, k)| (f.to_string(), k))
                    .collect();
            assert_eq!(found, expected);
        }
        // A proof resting on one that comes after it is refused, as when checked one at a
        // time, and so is one resting on facts nobody sent.
        let found = check_all(&dir, &[w3, w1a, ("w5", "unfounded", root_q, root_v)]).await;
        assert_eq!((found["w3"], found["w1-a"], found["unfounded"]), ("refused", "proved", "refused"));
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn a_check_reserves_what_its_proof_can_take_and_never_more_than_all() {
        assert_eq!(reservation(0, 4 << 30), 1 << 20);
        assert_eq!(reservation(1 << 20, 4 << 30), 129 << 20);
        assert_eq!(reservation(60 << 20, 4 << 30), 4 << 30);
        assert_eq!(reservation(u64::MAX, 64 << 20), 64 << 20);
        assert_eq!(reservation(1000, 1 << 20), 1 << 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_proof_must_show_what_its_result_answers() {
        let dir = std::env::temp_dir().join(format!("cram-claims-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let root = Shape::of(4, 5, Board::parse("4x5").expect("a board").empty());
        let r1 = root.after(root.moves()[7])[0];
        let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
        let (root_q, r1_q) = (nimber_of(&root), nimber_of(&r1));
        let root_v = solver.nimber(root_q.region).expect("solved");
        let r1_v = solver.nimber(r1_q.region).expect("solved");
        let other = if root_v == 0 { 1 } else { 0 };
        let mut prove = |file: &str, how: &dyn Fn(&mut Prover) -> Result<(), cram_engine::Interrupted>| {
            let mut p = Prover::new(&mut solver, 4);
            how(&mut p).expect("proved");
            std::fs::write(dir.join(file), p.export()).expect("written");
        };
        prove("r1", &|p| p.prove_value(&r1));
        prove("not", &|p| p.prove_not(&root, other));
        prove("empty", &|_| Ok(()));
        let is_value = |k: u8| Question { region: root_q.region, query: cram_engine::Query::IsValue(k) };
        let not = |k: u8| Facts { excluded: 1 << k, upper: u8::MAX };
        let cases = [
            // True facts, of another region than the unit's.
            (("a", "r1", root_q, Facts::exact(root_v)), "refused"),
            // No facts at all, with any answer (what a liar sends).
            (("b", "empty", root_q, Facts::exact(root_v)), "refused"),
            (("c", "empty", is_value(other), not(other)), "refused"),
            // The value of its own region, with another value.
            (("d", "r1", r1_q, Facts::exact(r1_v ^ 1)), "refused"),
            // "Not k" shown by a move, and by nothing.
            (("e", "not", is_value(other), not(other)), "proved"),
            (("f", "not", is_value(other), Facts { excluded: 1 << other | 1 << root_v, upper: u8::MAX }), "refused"),
        ];
        for (due, want) in cases {
            // Each on a fresh ledger: what the proof itself shows.
            let found = check_all(&dir, &[due]).await;
            assert_eq!(found[due.1], want, "{} as {:?}", due.1, due.3);
        }
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
