//! `cram simulate`: how a cluster job would scale to many more workers than this machine
//! can run, by a discrete-event simulation of the real scheduler (the coordinator's
//! `Scheduler`, the same code that serves real workers) in virtual time.
//!
//! A real run's event log supplies what each unit costs and answers (its nodes and facts);
//! units the run never searched (a simulated cluster speculates differently) are searched
//! here with the engine. Each worker is one search thread at `--nodes-per-sec`; every call
//! pays a network round trip; the coordinator serves one call at a time, each taking the
//! real time its scheduler needs here (its walk of the top), and syncs its log as the
//! job's task does (group commit: once no call waits, one fsync for the results written
//! since the last, their replies held until then). Heartbeats go every quarter lease and
//! cancel units no longer needed, as in a real run. What the simulation leaves out is the cost of separate tables (each unit costs
//! what the logged run paid): `cram bench --scaling` measures that on real processes.
//!
//! A certified job's log also gives each result's proof (the facts it added): the
//! coordinator checks proofs on `--check-threads` threads at `--proof-facts-per-sec` each,
//! a worker's one at a time, and the answer waits for the checks of every result before it.

use crate::cli::DbArgs;
use crate::Failure;
use clap::Args;
use cram_coordinator::events::{read_events, Event};
use cram_coordinator::scheduler::{CheckPolicy, LeaseOutcome, Scheduler, Submission, Verdict, COORDINATOR};
use cram_coordinator::top::Top;
use cram_engine::{Board, Config, Facts, Mode, Question, Solver};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `cram simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// The state directory of a run of the job: its event log gives the job, what units
    /// cost and what they answer.
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
    /// Numbers of workers to simulate, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "1,2,4,16,64,256")]
    pub workers: String,
    /// Split depths to simulate, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "2")]
    pub split_depths: String,
    /// One search thread's speed in nodes per second [default: the logged run's, which is
    /// too low when that run had more workers than cores].
    #[arg(long, value_name = "N")]
    pub nodes_per_sec: Option<f64>,
    /// Network round trip of one call, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0.5)]
    pub rpc_ms: f64,
    /// One fsync of the coordinator's event log, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1.0)]
    pub fsync_ms: f64,
    /// Calls the coordinator serves with results written and not synced while more calls
    /// wait, as its group commit does (1: an fsync of its own for every result, the
    /// coordinator before group commit).
    #[arg(long, value_name = "N", default_value_t = cram_coordinator::job::GROUP as usize, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub sync_group: usize,
    /// Lease length in seconds (heartbeats every quarter of it).
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub lease_secs: u64,
    /// Node budget of a unit before it comes back unfinished and is split.
    #[arg(long, value_name = "N", default_value_t = 50_000_000)]
    pub unit_nodes: u64,
    /// Transposition table of the searches of units the log lacks, in MiB.
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub tt_mb: u64,
    /// A certified job's proof checks: the coordinator's checking threads.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub check_threads: u32,
    /// A certified job's proof checks: facts added to the ledger per second and thread
    /// (`cram bench --proofs` measures it: 59,000 on this machine's proofs of 5x9).
    #[arg(long, value_name = "N", default_value_t = 60_000.0)]
    pub proof_facts_per_sec: f64,
    #[command(flatten)]
    pub db: DbArgs,
}

/// What one unit costs and answers.
#[derive(Clone, Copy)]
struct Cost {
    facts: Facts,
    nodes: u64,
    /// Facts its proof added to the coordinator's ledger (a certified job's; else 0).
    proof_facts: u64,
}

/// The job of a logged run, and what its units cost.
struct Logged {
    spec: String,
    board: Board,
    mode: Mode,
    pairing: bool,
    plain: bool,
    costs: HashMap<Question, Cost>,
    nodes_per_sec: f64,
    /// A certified job's proof facts per node searched, for units the log lacks.
    proof_facts_per_node: f64,
}

fn read_log(dir: &std::path::Path) -> Result<Logged, Failure> {
    let path = dir.join("events.jsonl");
    let file = std::fs::File::open(&path).map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
    let read = read_events(std::io::BufReader::new(file))
        .map_err(|e| Failure::database(format!("{}: {e:?}", path.display())))?;
    let mut job = None;
    let mut costs: HashMap<Question, Cost> = HashMap::new();
    let (mut nodes, mut millis) = (0u64, 0u64);
    let (mut proved_facts, mut proved_nodes) = (0u64, 0u64);
    for e in &read.replay.events {
        match e {
            Event::Job(j) => job = Some(j.clone()),
            Event::Result(r) if r.finished && r.worker != COORDINATOR => {
                nodes += r.nodes;
                millis += r.millis;
                costs.entry(r.unit).or_insert(Cost { facts: r.facts(), nodes: r.nodes.max(1), proof_facts: 0 });
            }
            Event::Proved { unit, facts, .. } => {
                if let Some(c) = costs.get_mut(unit).filter(|c| c.proof_facts == 0) {
                    c.proof_facts = *facts;
                    proved_facts += facts;
                    proved_nodes += c.nodes;
                }
            }
            _ => {}
        }
    }
    let j = job.ok_or_else(|| Failure::input(format!("{}: no job in the log", path.display())))?;
    let empty = u128::from_str_radix(&j.empty, 16).map_err(|e| Failure::input(format!("job record: {e}")))?;
    let board = Board::from_mask(j.rows, j.cols, empty).map_err(|e| Failure::input(format!("job record: {e}")))?;
    Ok(Logged {
        spec: j.spec.clone(),
        board,
        mode: j.mode,
        pairing: j.pairing,
        plain: j.certificate_small.is_some(),
        costs,
        nodes_per_sec: nodes as f64 * 1000.0 / millis.max(1) as f64,
        proof_facts_per_node: proved_facts as f64 / proved_nodes.max(1) as f64,
    })
}

/// The settings of one simulation.
struct Model {
    nodes_per_sec: f64,
    rpc: f64,
    fsync: f64,
    sync_group: usize,
    lease: Duration,
    unit_nodes: u64,
    check_threads: usize,
    proof_facts_per_sec: f64,
}

/// What one simulated run gave.
struct Outcome {
    makespan: f64,
    leased: u64,
    cancelled: u64,
    /// Seconds workers spent searching, all workers.
    busy: f64,
    /// Seconds the coordinator spent serving calls.
    coordinator: f64,
    /// Seconds the coordinator's threads spent checking proofs, all threads.
    checking: f64,
    /// Seconds the answer waited, after the last result it needed, for proof checks.
    waited: f64,
}

/// The coordinator's proof checks: its threads, a worker's proofs one at a time.
struct ProofChecks {
    /// When each thread is next free.
    free: Vec<f64>,
    /// When each worker's last check ends.
    worker_done: Vec<f64>,
}

impl ProofChecks {
    /// Checks a proof of worker `w` that takes `secs`, arriving at `t`: when it ends.
    fn check(&mut self, w: usize, t: f64, secs: f64) -> f64 {
        let (i, &free) = self.free.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1)).expect("a thread");
        let end = t.max(free).max(self.worker_done[w]) + secs;
        self.free[i] = end;
        self.worker_done[w] = end;
        end
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A worker asks for a unit.
    Lease(usize),
    /// A worker's heartbeat for the unit it searches (its lease number).
    Heartbeat(usize, u64),
    /// A worker finishes its unit (its lease number).
    Done(usize, u64),
    /// The check of a certified result's proof ends (the result's place in `proved`).
    Proved(usize),
}

/// The coordinator in virtual time: it serves one call at a time, each for the real time
/// its scheduler takes here, and syncs its log between calls.
struct Server {
    base: Instant,
    rpc: f64,
    /// When it is next free.
    free: f64,
    /// Seconds it spent serving calls and syncing.
    busy: f64,
}

impl Server {
    /// The instant of virtual time `t`.
    fn at(&self, t: f64) -> Instant {
        self.base + Duration::from_secs_f64(t)
    }

    /// One call sent at `t`: it reaches the coordinator after half a round trip, waits its
    /// turn, takes the scheduler's real time, and its reply takes the other half; returns
    /// when the reply would arrive, were it sent at once.
    fn call(&mut self, t: f64, f: impl FnOnce(Instant)) -> f64 {
        let start = (t + self.rpc / 2.0).max(self.free);
        let clock = Instant::now();
        f(self.at(start));
        let service = clock.elapsed().as_secs_f64();
        self.free = start + service;
        self.busy += service;
        self.free + self.rpc / 2.0
    }

    /// True when a call sent at `t` would wait for the coordinator.
    fn would_wait(&self, t: f64) -> bool {
        t + self.rpc / 2.0 <= self.free
    }

    /// Syncs the log for `secs` once it is free; returns when the replies held for it
    /// arrive.
    fn sync(&mut self, secs: f64) -> f64 {
        self.free += secs;
        self.busy += secs;
        self.free + self.rpc / 2.0
    }
}

/// A result served and written, its reply held until the log is synced.
struct Held {
    worker: usize,
    unit: Question,
    /// Accepted and finished: a certified job checks its proof.
    proof_facts: Option<u64>,
    /// It gave the answer.
    solved: bool,
}

/// A unit being searched by a simulated worker.
struct Busy {
    unit: Question,
    attempt: u64,
    lease_no: u64,
    start: f64,
    end: f64,
    cost: Cost,
    /// Nodes it searches: its cost, or its lease's budget when that runs out first.
    nodes: u64,
    finished: bool,
}

/// Simulates `workers` workers on the job at split depth `depth`.
fn simulate(
    log: &Logged,
    depth: u32,
    workers: usize,
    m: &Model,
    dbs: &std::sync::Arc<cram_engine::DbSet>,
    cost_of: &mut dyn FnMut(Question) -> Cost,
) -> Result<Outcome, Failure> {
    let top = Top::new(&log.board, log.mode, log.pairing, dbs.clone(), depth, log.plain);
    let mut s = Scheduler::new(top, log.mode, m.lease, m.unit_nodes, CheckPolicy::NONE, log.plain);
    let mut server = Server { base: Instant::now(), rpc: m.rpc, free: 0.0, busy: 0.0 };
    let ids: Vec<String> = (0..workers)
        .map(|i| s.register(&format!("{i:016x}"), "sim", 1, server.at(0.0)).expect("a new worker is not distrusted"))
        .collect();
    // Time-ordered events; virtual seconds as integer nanoseconds, so they order exactly.
    let mut queue: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<Reverse<(u64, u64, Ev)>>, t: f64, e: Ev| {
        seq += 1;
        q.push(Reverse(((t * 1e9) as u64, seq, e)));
    };
    for w in 0..workers {
        push(&mut queue, 0.0, Ev::Lease(w));
    }
    let mut busy: Vec<Option<Busy>> = (0..workers).map(|_| None).collect();
    let mut out =
        Outcome { makespan: 0.0, leased: 0, cancelled: 0, busy: 0.0, coordinator: 0.0, checking: 0.0, waited: 0.0 };
    let mut checks = ProofChecks { free: vec![0.0; m.check_threads.max(1)], worker_done: vec![0.0; workers] };
    // A certified job's results sent for their proofs' checks: unit, worker, facts.
    let mut proved: Vec<(Question, String, u64)> = Vec::new();
    let mut last_result = 0.0f64;
    let mut lease_no = 0u64;
    let heartbeat_every = m.lease.as_secs_f64() / 4.0;
    let mut held: Vec<Held> = Vec::new();
    let mut held_steps = 0usize;
    let mut steps = 0u64;
    // Names of the proofs of a certified job's results.
    let mut named = 0u64;
    let answered = 'run: loop {
        // Group commit, as the job's task does it: once no call waits for the coordinator,
        // or `sync_group` calls were served since a result was written, one sync makes the
        // results durable and their replies go.
        let waiting = queue
            .peek()
            .is_some_and(|Reverse((t, _, ev))| !matches!(ev, Ev::Proved(_)) && server.would_wait(*t as f64 / 1e9));
        if !held.is_empty() && (held_steps >= m.sync_group || !waiting) {
            held_steps = 0;
            let reply = server.sync(m.fsync);
            last_result = reply;
            for h in held.drain(..) {
                if let Some(facts) = h.proof_facts {
                    let secs = facts as f64 / m.proof_facts_per_sec;
                    out.checking += secs;
                    let end = checks.check(h.worker, reply, secs);
                    proved.push((h.unit, ids[h.worker].clone(), facts));
                    push(&mut queue, end, Ev::Proved(proved.len() - 1));
                }
                if h.solved {
                    out.makespan = reply;
                    break 'run true;
                }
                push(&mut queue, reply, Ev::Lease(h.worker));
            }
            continue 'run;
        }
        let Some(Reverse((t, _, ev))) = queue.pop() else { break false };
        let t = t as f64 / 1e9;
        steps += 1;
        if steps > 50_000_000 {
            return Err(Failure::runtime("simulate: no answer after 50 million events"));
        }
        match ev {
            Ev::Lease(w) => {
                let mut got = None;
                let reply = server.call(t, |now| got = Some(s.lease(&ids[w], 0, now)));
                // A simulated run has no state to record its grants in.
                s.take_grants();
                s.take_revoked_grants();
                match got.expect("the call ran") {
                    LeaseOutcome::Unit(unit, attempt, budget) => {
                        out.leased += 1;
                        lease_no += 1;
                        let cost = cost_of(unit);
                        let budget = if budget == 0 { u64::MAX } else { budget };
                        let finished = cost.nodes <= budget;
                        let nodes = cost.nodes.min(budget);
                        let end = reply + nodes as f64 / m.nodes_per_sec;
                        busy[w] = Some(Busy { unit, attempt, lease_no, start: reply, end, cost, nodes, finished });
                        push(&mut queue, end, Ev::Done(w, lease_no));
                        push(&mut queue, reply + heartbeat_every, Ev::Heartbeat(w, lease_no));
                    }
                    LeaseOutcome::Wait => push(&mut queue, reply + 0.2, Ev::Lease(w)),
                    LeaseOutcome::Done(_) => {}
                }
            }
            Ev::Heartbeat(w, n) => {
                let Some(b) = busy[w].as_ref().filter(|b| b.lease_no == n) else { continue };
                let (unit, attempt) = (b.unit, b.attempt);
                let nodes = ((t - b.start) * m.nodes_per_sec) as u64 + 1;
                let mut keep = true;
                let reply = server.call(t, |now| keep = s.heartbeat(&ids[w], unit, attempt, nodes, now));
                if keep {
                    push(&mut queue, t + heartbeat_every, Ev::Heartbeat(w, n));
                } else {
                    // Cancelled: the search stops when the reply comes.
                    let b = busy[w].take().expect("checked above");
                    out.cancelled += 1;
                    out.busy += reply.min(b.end) - b.start;
                    push(&mut queue, reply.min(b.end), Ev::Lease(w));
                }
            }
            Ev::Proved(i) => {
                let (unit, worker, facts) = proved[i].clone();
                s.apply(&Event::Proved { unit, worker, facts });
                if s.answer().is_some() {
                    out.makespan = t;
                    out.waited = t - last_result;
                    break 'run true;
                }
            }
            Ev::Done(w, n) => {
                let Some(b) = busy[w].take_if(|b| b.lease_no == n) else { continue };
                out.busy += b.end - b.start;
                let sub = Submission {
                    worker: ids[w].clone(),
                    unit: b.unit,
                    attempt: b.attempt,
                    facts: if b.finished { b.cost.facts } else { Facts::UNKNOWN },
                    finished: b.finished,
                    nodes: b.nodes,
                    millis: ((b.end - b.start) * 1000.0) as u64,
                    from_cache: false,
                    // A certified result must carry a proof; the simulation reads none.
                    proof: if log.plain { vec![0] } else { Vec::new() },
                    shared: Vec::new(),
                };
                let mut solved = false;
                let mut accepted = false;
                server.call(t, |now| {
                    if log.plain {
                        // A certified result is held with its proof's file, and counts once
                        // the proof is checked (`Ev::Proved`).
                        let verdict = s.judge(&sub, now);
                        accepted = matches!(verdict, Verdict::Accept(_));
                        for mut e in verdict.events() {
                            if let Event::Result(r) = &mut e {
                                r.proof = Some(format!("{named:016x}.proof"));
                                named += 1;
                            }
                            s.apply(&e);
                        }
                    } else {
                        s.submit_unlogged(&sub, now);
                    }
                    solved = s.answer().is_some();
                });
                let proof_facts = (accepted && b.finished).then_some(b.cost.proof_facts);
                held.push(Held { worker: w, unit: b.unit, proof_facts, solved });
                if solved {
                    // The job's task logs the answer, and syncs, in the same step.
                    held_steps = m.sync_group;
                }
            }
        }
        if !held.is_empty() && !matches!(ev, Ev::Proved(_)) {
            held_steps += 1;
        }
    };
    if !answered {
        return Err(Failure::runtime("simulate: the workers stopped without an answer"));
    }
    out.coordinator = server.busy;
    Ok(out)
}

/// Runs `cram simulate` and prints a Markdown table.
pub fn run(a: &SimulateArgs) -> Result<(), Failure> {
    let list = |s: &str, what: &str| -> Result<Vec<u32>, Failure> {
        s.split(',')
            .map(|x| x.trim().parse::<u32>().ok().filter(|&n| n >= 1 || what == "split depths"))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Failure::input(format!("{s:?}: a comma-separated list of {what}")))
    };
    let workers = list(&a.workers, "worker counts")?;
    let depths = list(&a.split_depths, "split depths")?;
    let log = read_log(&a.state)?;
    let dbs = a.db.checked_databases()?;
    let m = Model {
        nodes_per_sec: a.nodes_per_sec.unwrap_or(log.nodes_per_sec),
        rpc: a.rpc_ms / 1000.0,
        fsync: a.fsync_ms / 1000.0,
        sync_group: a.sync_group,
        lease: Duration::from_secs(a.lease_secs),
        unit_nodes: a.unit_nodes,
        check_threads: a.check_threads as usize,
        proof_facts_per_sec: a.proof_facts_per_sec,
    };
    let mut solver = Solver::new(&Config { tt_bytes: (a.tt_mb as usize) << 20, pairing: log.pairing }, dbs.clone());
    let mut searched = HashMap::new();
    let mut cost_of = |unit: Question| -> Cost {
        if let Some(c) = log.costs.get(&unit) {
            return *c;
        }
        *searched.entry(unit).or_insert_with(|| {
            let before = solver.nodes();
            let facts = unit.query.answer_only(solver.answer(unit).expect("no budget"));
            let nodes = (solver.nodes() - before).max(1);
            Cost { facts, nodes, proof_facts: (nodes as f64 * log.proof_facts_per_node).round() as u64 }
        })
    };
    let certified = log.proof_facts_per_node > 0.0;
    println!(
        "{} at {:.0} nodes/s per worker, {} ms round trip, {} ms per fsync of the log (synced at least every {} calls), {} logged units{}\n",
        log.spec,
        m.nodes_per_sec,
        a.rpc_ms,
        a.fsync_ms,
        m.sync_group,
        log.costs.len(),
        if certified {
            format!(
                "; proofs of {:.3} facts a node checked on {} threads at {:.0} facts/s",
                log.proof_facts_per_node, m.check_threads, m.proof_facts_per_sec
            )
        } else {
            String::new()
        }
    );
    println!("| split depth | workers | units leased | cancelled | makespan s | speed-up | efficiency | workers busy | coordinator busy | proof checks busy | answer waits for checks s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &depth in &depths {
        let mut first: Option<(u32, f64)> = None;
        for &n in &workers {
            let o = simulate(&log, depth, n as usize, &m, &dbs, &mut cost_of)?;
            let (n0, t0) = *first.get_or_insert((n, o.makespan));
            let speedup = t0 / o.makespan;
            println!(
                "| {depth} | {n} | {} | {} | {:.1} | {:.2}× | {:.0} % | {:.0} % | {:.1} % | {:.0} % | {:.1} |",
                o.leased,
                o.cancelled,
                o.makespan,
                speedup,
                100.0 * speedup * n0 as f64 / n as f64,
                100.0 * o.busy / (n as f64 * o.makespan),
                100.0 * o.coordinator / o.makespan,
                100.0 * o.checking / (m.check_threads as f64 * o.makespan),
                o.waited
            );
        }
    }
    Ok(())
}
