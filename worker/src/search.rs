//! One search thread: lease a unit, answer it (from the cache, or by search and, in a
//! certified job, a proof), submit what was learnt; until the job is done or the worker
//! stops. A thread keeps its solver (and its table, or its share of the process's) and its
//! proofs from unit to unit, and builds new ones when the job's engine setting changes.

use crate::link::{CallError, Registration, Submitted};
use crate::{Worker, WorkerError};
use cram_certificate::Shape;
use cram_engine::facts::Facts;
use cram_engine::proof::{Proofs, Prover};
use cram_engine::region::AnyRegion;
use cram_engine::{Interrupted, Query, Question, SharedFact, Solver};
use cram_proto::pb::{self, lease_reply};
use cram_proto::{facts_to_pb, region_to_pb};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Facts a search thread keeps from its earlier units' proofs (and the other threads')
/// before it starts afresh: facts already sent keep only their value, about 80 bytes
/// each, so this bounds a thread's proofs at about 2 GiB.
const MAX_KEPT_FACTS: usize = 24 << 20;

/// A search thread's solver (its table kept from unit to unit) and, in a certified job,
/// the facts its earlier units' proofs found.
struct Searcher {
    solver: Solver,
    proofs: Option<Proofs>,
    /// How much of the process's log of kept facts the proofs hold.
    seen: usize,
    /// The engine setting the solver was built for.
    pairing: bool,
}

impl Searcher {
    /// A searcher for the job's settings in the worker's memory.
    fn new(worker: &Worker, pairing: bool) -> Searcher {
        Searcher { solver: worker.memory.solver(pairing), proofs: None, seen: 0, pairing }
    }
}

/// One search thread: lease, answer, submit, until stopped.
pub async fn search_loop(worker: Arc<Worker>, index: usize) -> Result<(), WorkerError> {
    let mut kept: Option<Searcher> = None;
    loop {
        if worker.stopping() {
            return Ok(());
        }
        let (reg, reply) = match worker.link.lease(index).await {
            Ok(x) => x,
            Err(CallError::Stopped) => return Ok(()),
            Err(CallError::Fatal(e)) => return Err(e),
        };
        let unit = match reply {
            // Leased while the worker began to stop: straight back.
            lease_reply::Reply::Unit(u) if worker.stopping() => {
                worker.link.release(vec![u.unit_id], false).await;
                return Ok(());
            }
            lease_reply::Reply::Unit(u) => u,
            lease_reply::Reply::RetryMillis(ms) => {
                worker.pause(Duration::from_millis(ms.clamp(10, 5000) as u64)).await;
                continue;
            }
            lease_reply::Reply::Done(d) => {
                worker.finish(&d);
                return Ok(());
            }
        };
        let question = match read_unit(&unit) {
            Ok(q) => q,
            Err(e) => {
                tracing::error!(unit = %unit.unit_id, "the coordinator sent a unit this worker cannot read: {}", e.message());
                worker.pause(Duration::from_secs(1)).await;
                continue;
            }
        };
        // The thread's searcher, made anew when the job's engine setting changed.
        let mut searcher = match kept.take() {
            Some(s) if s.pairing == reg.pairing => s,
            _ => Searcher::new(&worker, reg.pairing),
        };
        let loaded = worker.memory.preload(&mut searcher.solver, &unit.shared);
        worker.summary.lock().expect("summary lock").facts_loaded += loaded;
        if let Some(small) = reg.certificate_small {
            let proofs = searcher.proofs.get_or_insert_with(|| Proofs::new(small));
            worker.memory.take_proved(proofs, &mut searcher.seen);
        }
        searcher.solver.set_sharing(reg.share);
        let (mut searcher, outcome) = answer(&worker, searcher, &unit, question, index, &reg).await;
        let learned = costliest(searcher.solver.take_learned(), cram_proto::MAX_SHARED_PER_RESULT);
        let proved = outcome.as_ref().is_some_and(|r| !r.proof.is_empty());
        kept = Some(searcher);
        if let Some(damage) = worker.settings.dbs.damage() {
            worker.link.release(vec![unit.unit_id.clone()], true).await;
            return Err(WorkerError::Database(damage.to_string()));
        }
        let Some(mut req) = outcome else { continue };
        req.shared = learned.iter().map(cram_proto::shared_to_pb).collect();
        worker.summary.lock().expect("summary lock").facts_shared += req.shared.len() as u64;
        match worker.link.submit(req).await {
            Ok(Submitted::Answered { recorded }) => {
                // The coordinator keeps the proof's facts: later proofs need not carry them.
                if let Some(s) = kept.as_mut().filter(|_| recorded && proved) {
                    if let Some(p) = s.proofs.as_mut() {
                        worker.memory.add_proved(p.sent());
                    }
                }
            }
            Ok(Submitted::Rejected(_)) => {
                // Dropped (and forgotten by the cache it may have come from); the unit goes
                // back, to be searched again.
                if let Some(c) = &worker.cache {
                    c.forget(&question.region);
                }
                worker.link.release(vec![unit.unit_id.clone()], false).await;
            }
            Err(CallError::Stopped) => return Ok(()),
            Err(CallError::Fatal(e)) => return Err(e),
        }
    }
}

/// The question a unit asks, checked.
fn read_unit(unit: &pb::Unit) -> Result<Question, tonic::Status> {
    let region = cram_proto::region_from_pb(unit.region.as_ref())?;
    let query = cram_proto::query_from_pb(unit.query.as_ref())?;
    Ok(Question { region, query })
}

/// Answers a unit from the cache or by search; `None` when it was cancelled. In a
/// certified job the answer is proved after the search and the cache is not used (a
/// cached answer has no proof).
async fn answer(
    worker: &Arc<Worker>,
    searcher: Searcher,
    unit: &pb::Unit,
    question: Question,
    thread: usize,
    reg: &Registration,
) -> (Searcher, Option<pb::SubmitRequest>) {
    let started = Instant::now();
    let region = question.region;
    let submit = |facts: Facts, finished: bool, nodes: u64, from_cache: bool, proof: Vec<u8>| pb::SubmitRequest {
        unit_id: unit.unit_id.clone(),
        attempt: unit.attempt,
        region: Some(region_to_pb(&region)),
        facts: Some(facts_to_pb(facts)),
        finished,
        nodes,
        millis: started.elapsed().as_millis() as u64,
        from_cache,
        proof,
        shared: Vec::new(),
    };
    let certificate_small = reg.certificate_small;
    if let Some(cache) = worker.cache.as_ref().filter(|_| certificate_small.is_none()) {
        let known = cache.get(&region);
        if question.query.answered_by(known) {
            tracing::debug!(unit = %unit.unit_id, "answered from the cache");
            worker.summary.lock().expect("summary lock").from_cache += 1;
            return (searcher, Some(submit(known, true, 0, true, Vec::new())));
        }
    }
    let tracked = worker.underway.start(&unit.unit_id, unit.attempt);
    tracing::debug!(unit = %unit.unit_id, attempt = unit.attempt, thread, "unit started");
    let budget = if unit.node_budget == 0 { u64::MAX } else { unit.node_budget };
    let Searcher { mut solver, mut proofs, seen, pairing } = searcher;
    let (solver, proofs, result, spent) = tokio::task::spawn_blocking(move || {
        let before = solver.nodes();
        let progress = tracked.nodes.clone();
        let reported = tracked.nodes.clone();
        solver.set_cancel(tracked.cancel);
        solver.set_budget(budget);
        solver.set_progress(Box::new(move |n| {
            reported.fetch_max(n - before, Ordering::Relaxed);
        }));
        let result = solver.answer(question);
        // The proof, by the same solver (its table knows what the search learnt), with no
        // budget: the answer is found, and a result without its proof is of no use here.
        let proof = match (&result, certificate_small) {
            (Ok(facts), Some(small)) => {
                solver.set_budget(u64::MAX);
                prove_unit(&mut solver, &mut proofs, question, *facts, small, &progress)
            }
            _ => Ok(Vec::new()),
        };
        let spent = solver.nodes() - before;
        let result = result.and_then(|facts| proof.map(|p| (facts, p)));
        (solver, proofs, result, spent)
    })
    .await
    .expect("the search thread does not panic");
    worker.underway.finish(&unit.unit_id, unit.attempt);
    {
        let mut summary = worker.summary.lock().expect("summary lock");
        summary.nodes += spent;
        match result {
            Ok(_) => summary.searched += 1,
            Err(Interrupted::Budget) => summary.unfinished += 1,
            Err(Interrupted::Cancelled | Interrupted::Database) => {}
        }
    }
    let reply = match result {
        Ok((facts, proof)) => {
            tracing::debug!(unit = %unit.unit_id, nodes = spent, ms = started.elapsed().as_millis() as u64, proof_bytes = proof.len(), "unit finished");
            if let Some(c) = &worker.cache {
                c.put(&region, facts).await;
            }
            Some(submit(facts, true, spent, false, proof))
        }
        Err(Interrupted::Budget) => {
            tracing::debug!(unit = %unit.unit_id, nodes = spent, "unit ran out of budget");
            Some(submit(solver.bounds(&region), false, spent, false, Vec::new()))
        }
        Err(Interrupted::Cancelled) => {
            tracing::debug!(unit = %unit.unit_id, nodes = spent, "unit cancelled");
            None
        }
        Err(Interrupted::Database) => {
            tracing::error!(unit = %unit.unit_id, "a database is damaged: {}", worker.settings.dbs.damage().unwrap_or("?"));
            None
        }
    };
    (Searcher { solver, proofs, seen, pairing }, reply)
}

/// The proof of a unit's answer (the region's value, or that it is not the value asked),
/// as a prover export for the coordinator to assemble into the job's certificate.
///
/// `proofs`: what the thread's earlier units proved (their shared facts are proved once);
/// dropped when it grows past [`MAX_KEPT_FACTS`].
fn prove_unit(
    solver: &mut Solver,
    proofs: &mut Option<Proofs>,
    question: Question,
    answer: Facts,
    small: u32,
    progress: &AtomicU64,
) -> Result<Vec<u8>, Interrupted> {
    let region: AnyRegion = question.region;
    let (h, w) = region.dims();
    let shape = Shape::of(h, w, region.dense());
    let mut prover = match proofs.take() {
        Some(p) if p.len() < MAX_KEPT_FACTS => Prover::with_proofs(solver, small, p),
        // Past the limit the thread starts afresh (and takes no more of the log than is
        // new: `seen` stays).
        _ => Prover::new(solver, small),
    };
    // A proof may take minutes of little search: each fact counts as progress in the
    // heartbeats, so the lease does not expire under it.
    prover.on_fact(|| {
        progress.fetch_add(1, Ordering::Relaxed);
    });
    match question.query {
        Query::IsValue(k) if answer.value() != Some(k) => prover.prove_not(&shape, k)?,
        _ => prover.prove_value(&shape)?,
    }
    let bytes = prover.export();
    *proofs = Some(prover.into_proofs());
    Ok(bytes)
}

/// The `max` facts of `learned` that cost most (a result carries at most
/// [`cram_proto::MAX_SHARED_PER_RESULT`]: the coordinator refuses more).
fn costliest(mut learned: Vec<SharedFact>, max: usize) -> Vec<SharedFact> {
    if learned.len() > max {
        learned.sort_unstable_by_key(|l| std::cmp::Reverse(l.nodes));
        learned.truncate(max);
    }
    learned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_carries_the_costliest_facts_it_may() {
        let region = AnyRegion::from_key("3x7:1fffff").unwrap();
        let learned: Vec<SharedFact> =
            [5, 90, 7, 60, 1].iter().map(|&nodes| SharedFact { region, facts: Facts::exact(1), nodes }).collect();
        let kept: Vec<u64> = costliest(learned.clone(), 2).iter().map(|l| l.nodes).collect();
        assert_eq!(kept, [90, 60]);
        assert_eq!(costliest(learned, 10).len(), 5, "fewer than the limit: all");
    }
}
