//! The scheduler's unit tests: leases and who may answer, branches, evidence (what is
//! verified, what a verification decides), absurd results, shared facts, replays.

use super::units::BACKUP_AFTER;
use super::*;
use cram_engine::{Board, Config, DbSet, Query, Solver};
use std::sync::Arc;

/// A unit's node budget in these tests.
const BUDGET: u64 = 1000;

fn scheduler_of(spec: &str, checks: CheckPolicy) -> Scheduler {
    scheduler_split_at(spec, checks, 2)
}

fn scheduler_split_at(spec: &str, checks: CheckPolicy, depth: u32) -> Scheduler {
    let top = Top::new(&Board::parse(spec).unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), depth, false);
    Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), BUDGET, checks, false)
}

fn scheduler(checks: CheckPolicy) -> Scheduler {
    scheduler_of("4x6", checks)
}

fn oracle() -> Solver {
    Solver::new(&Config { tt_bytes: 16 << 20, pairing: false }, Arc::new(DbSet::default()))
}

/// The true answer to `q`, as a worker would send it.
fn truth(q: Question) -> Facts {
    q.query.answer_only(oracle().answer(q).unwrap())
}

/// A false answer to `q` that answers it and leaves a value.
fn lie(q: Question) -> Facts {
    let v = oracle().nimber(q.region).unwrap();
    match q.query {
        Query::IsValue(k) if k != v => Facts::exact(k),
        _ => Facts::exact(if v == 0 { 1 } else { v - 1 }),
    }
}

fn sub(worker: &str, unit: Question, attempt: u64, facts: Facts, finished: bool, nodes: u64) -> Submission {
    Submission {
        worker: worker.into(),
        unit,
        attempt,
        facts,
        finished,
        nodes,
        millis: 1,
        from_cache: false,
        proof: Vec::new(),
        shared: Vec::new(),
    }
}

/// Does what the job's task does with a submission (a second after `t`), without the
/// store; returns the verdict and the events it would log.
fn submit_at(s: &mut Scheduler, x: Submission, t: Instant) -> (Verdict, Vec<Event>) {
    let verdict = s.submit_unlogged(&x, t + Duration::from_secs(1));
    let events = verdict.events();
    (verdict, events)
}

fn submit(s: &mut Scheduler, x: Submission) -> (Verdict, Vec<Event>) {
    let t = s.since;
    submit_at(s, x, t)
}

fn unit(s: &mut Scheduler, worker: &str, slot: u32, t: Instant) -> (Question, u64) {
    match s.lease(worker, slot, t) {
        LeaseOutcome::Unit(a, n, _) => (a, n),
        other => panic!("no unit for {worker}: {other:?}"),
    }
}

/// Makes the coordinator's own searches due now, logging their events; returns them.
fn search_all(s: &mut Scheduler) -> Vec<Event> {
    let mut log = Vec::new();
    while let Some(q) = s.next_search(true) {
        for e in s.searched(q, truth(q), 100, 1) {
            s.apply(&e);
            log.push(e);
        }
    }
    log
}

/// A worker is given no more units at once than the threads it registered with, and none
/// for a thread it does not have: one identity cannot hoard the free units.
#[test]
fn a_worker_holds_no_more_units_than_its_threads() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
    let (u1, k1) = unit(&mut s, &a, 0, t0);
    unit(&mut s, &a, 1, t0);
    assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Wait), "two threads, two units");
    assert!(matches!(s.lease(&a, 2, t0), LeaseOutcome::Wait), "no thread 2");
    let b = s.register("bb", "b", 1, t0).unwrap();
    assert!(matches!(s.lease(&b, 0, t0), LeaseOutcome::Unit(..)), "the others' units are still free");
    // A unit answered frees its thread for the next.
    submit(&mut s, sub(&a, u1, k1, truth(u1), true, 9));
    assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Unit(..) | LeaseOutcome::Done(_)));
}

#[test]
fn leases_expire_are_reissued_with_a_new_attempt_and_results_count_once() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (u1, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    let (u2, 1) = unit(&mut s, &b, 0, t0) else { panic!() };
    assert_ne!(u1, u2, "two workers get different units");
    // Progress extends a lease; without it the lease expires.
    assert!(s.heartbeat(&a, u1, 1, 100, t0 + Duration::from_secs(8)));
    let expired = s.expire(t0 + Duration::from_secs(11));
    assert_eq!(expired, vec![(u2, b.clone())]);
    // The expired unit goes to a new asker with attempt 2 (a keeps to its own branch);
    // the old holder is cancelled.
    let c = s.register("cc", "c", 1, t0).unwrap();
    let (again, 2) = unit(&mut s, &c, 0, t0 + Duration::from_secs(12)) else { panic!() };
    assert_eq!(again, u2);
    assert!(!s.heartbeat(&b, u2, 1, 500, t0 + Duration::from_secs(12)));
    // One result per unit: the late one of the expired attempt changes nothing.
    assert!(matches!(submit(&mut s, sub(&c, u2, 2, truth(u2), true, 10)).0, Verdict::Accept(_)));
    assert!(matches!(submit(&mut s, sub(&b, u2, 1, truth(u2), true, 10)).0, Verdict::Ignore(_)));
    assert_eq!((s.counters.done, s.counters.duplicates), (1, 1));
    // Heartbeats past twice its node budget extend a lease no more: an unfinished result
    // was due, and heartbeats alone do not hold a unit for ever.
    let t1 = t0 + Duration::from_secs(20);
    let d = s.register("dd", "d", 1, t1).unwrap();
    let (u3, k) = unit(&mut s, &d, 0, t1);
    let most = 2 * BUDGET + (1 << 16);
    assert!(s.heartbeat(&d, u3, k, most, t1 + Duration::from_secs(5)));
    assert!(s.heartbeat(&d, u3, k, most + 1, t1 + Duration::from_secs(14)));
    assert!(s.expire(t1 + Duration::from_secs(16)).contains(&(u3, d.clone())));
}

#[test]
fn results_count_only_from_the_worker_and_attempt_a_unit_was_leased_to() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    // After the adoption period of the run: another worker, another attempt, a unit never
    // leased: all ignored, nothing logged.
    let later = t0 + Duration::from_secs(60);
    for x in [sub(&b, u, 1, truth(u), true, 10), sub(&a, u, 2, truth(u), true, 10)] {
        let (v, events) = submit_at(&mut s, x, later);
        assert!(matches!(v, Verdict::Ignore(_)) && events.is_empty(), "{v:?}");
    }
    let root = Question::nimber(cram_engine::solver::board_regions(&Board::parse("4x6").unwrap()).0[0]);
    let (v, _) = submit_at(&mut s, sub(&b, root, 1, Facts::exact(0), true, 10), later);
    assert!(matches!(v, Verdict::Ignore(_)), "a root answer nobody asked for: {v:?}");
    assert_eq!(s.counters.done, 0);
    assert!(matches!(submit_at(&mut s, sub(&a, u, 1, truth(u), true, 10), later).0, Verdict::Accept(_)));
}

#[test]
fn a_restarted_coordinator_adopts_units_only_in_its_first_lease_period() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let open: Vec<Question> = {
        s.refresh();
        s.frontier.open.iter().map(|(q, _)| *q).collect()
    };
    // What the previous run leased (the state's grants).
    let earlier = [(0, &a, 7, true), (1, &a, 3, true), (0, &b, 5, false), (3, &b, 2, true), (2, &a, 4, true)];
    s.granted_earlier(grants(&open, &earlier));
    // A unit a worker was not leased under that attempt is not adopted.
    assert!(!s.heartbeat(&a, open[0], 6, 100, t0 + Duration::from_secs(1)), "another attempt");
    assert!(!s.heartbeat(&a, open[4], 1, 100, t0 + Duration::from_secs(1)), "never leased to it");
    let (v, _) = submit(&mut s, sub(&b, open[1], 3, truth(open[1]), true, 10));
    assert!(matches!(v, Verdict::Ignore(_)), "another worker's grant: {v:?}");
    // A worker still searching a unit of the previous run keeps it, by heartbeat or result.
    assert!(s.heartbeat(&a, open[0], 7, 100, t0 + Duration::from_secs(1)));
    assert!(matches!(submit(&mut s, sub(&a, open[1], 3, truth(open[1]), true, 10)).0, Verdict::Accept(_)));
    // A second worker still searching the same unit (a backup before the restart) keeps it
    // too, beside the first to come back.
    assert!(s.heartbeat(&b, open[0], 5, 50, t0 + Duration::from_secs(1)));
    assert!(s.units.get(&open[0]).unwrap().is_backup(&b));
    assert!(s.heartbeat(&b, open[0], 5, 60, t0 + Duration::from_secs(2)));
    // No more units than threads: b's one thread is taken.
    assert!(!s.heartbeat(&b, open[3], 2, 10, t0 + Duration::from_secs(2)));
    // Its budget is not known (it may have been leased to be searched whole): heartbeats
    // past any budget keep it, and an unfinished result short of this run's is no fault.
    assert!(s.heartbeat(&a, open[0], 7, 100 * BUDGET, t0 + Duration::from_secs(2)));
    assert!(s.expire(t0 + Duration::from_secs(11)).is_empty(), "the adopted lease was extended");
    let (v, events) = submit(&mut s, sub(&a, open[0], 7, Facts::UNKNOWN, false, BUDGET - 1));
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }) && events.is_empty(), "{v:?}");
    assert_eq!(s.workers.get_mut(&a).unwrap().strikes, 0);
    // An attempt no run granted is not adopted (the next lease's attempt would overflow).
    assert!(!s.heartbeat(&a, open[2], u64::MAX, 100, t0 + Duration::from_secs(1)));
    // After the first lease period, nobody adopts anything.
    let late = t0 + Duration::from_secs(11);
    assert!(!s.heartbeat(&a, open[2], 4, 100, late));
    assert!(matches!(submit_at(&mut s, sub(&a, open[2], 4, truth(open[2]), true, 10), late).0, Verdict::Ignore(_)));
}

#[test]
fn a_thread_keeps_to_its_branch_and_threads_spread_over_branches() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
    let (first, _) = unit(&mut s, &a, 0, t0);
    let (second, _) = unit(&mut s, &a, 1, t0);
    let branch = |u: &Question, s: &Scheduler| s.frontier.open.iter().find(|(x, _)| x == u).map(|(_, b)| *b).unwrap();
    assert_ne!(branch(&first, &s), branch(&second, &s), "two threads, two branches");
    submit(&mut s, sub(&a, first, 1, Facts::UNKNOWN, false, BUDGET));
    let b0 = branch(&second, &s);
    let (next, _) = unit(&mut s, &a, 1, t0);
    assert_eq!(branch(&next, &s), b0, "thread 1 stays on its branch");
}

#[test]
fn released_units_go_back_at_once_and_decided_ones_are_cancelled() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
    let (u1, _) = unit(&mut s, &a, 0, t0);
    assert_eq!(s.release(&a, &[]), 1);
    let (u1_again, 2) = unit(&mut s, &a, 0, t0) else { panic!() };
    assert_eq!(u1, u1_again);
    // The region decided another way makes its lease useless.
    let q = Question::nimber(u1.region);
    for e in s.searched(q, truth(q), 1, 1) {
        s.apply(&e);
    }
    assert!(!s.heartbeat(&a, u1, 2, 50, t0));
    assert_eq!(s.counters.cancelled, 1);
}

#[test]
fn once_the_answer_is_known_every_unit_stops() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    let (regions, _) = cram_engine::solver::board_regions(&Board::parse("4x6").unwrap());
    let whole = Question::nimber(regions[0]);
    for e in s.searched(whole, truth(whole), 1, 1) {
        s.apply(&e);
    }
    assert!(s.answer().is_some());
    assert!(!s.heartbeat(&a, u, 1, 50, t0), "a unit still searched after the answer is stopped");
    assert!(matches!(s.lease(&a, 0, t0), LeaseOutcome::Done(_)));
}

#[test]
fn a_logged_answer_stays_when_a_false_result_arrives_after_it() {
    let t0 = Instant::now();
    let run = |decide: bool| {
        let mut s = scheduler(CheckPolicy::NONE);
        let a = s.register("aa", "a", 1, t0).unwrap();
        let liar = s.register("11", "liar", 1, t0).unwrap();
        // Every unit answered truly: the answer.
        let mut n = 0;
        while s.answer().is_none() {
            let since = s.since;
            let (u, k) = unit(&mut s, &a, 0, since);
            submit(&mut s, sub(&a, u, k, truth(u), true, 1));
            n += 1;
            assert!(n < 10_000);
        }
        let answer = s.answer().expect("answered");
        if decide {
            s.decide(answer);
        }
        // After the answer: a false result that contradicts what is held, on a question
        // the liar was given, to be decided by search.
        let (q, _, f) = s.ledger.held().next().unwrap();
        let contra = match f.value() {
            Some(v) => Facts::exact(if v == 0 { 1 } else { v - 1 }),
            None => Facts::exact(f.excluded.trailing_zeros() as u8),
        };
        let nq = Question::nimber(q.region);
        let k = s.units.grant(nq, &liar, 0, None, BUDGET, t0);
        let (verdict, _) = submit(&mut s, sub(&liar, nq, k, contra, true, 1));
        (answer, verdict, s.answer(), s.lease(&a, 0, t0))
    };
    let (_, verdict, undecided, _) = run(false);
    assert!(matches!(verdict, Verdict::Refuse { disconnect: false, .. }), "{verdict:?}");
    assert_eq!(undecided, None, "a dispute takes back an answer not yet logged");
    let (answer, _, after, lease) = run(true);
    assert_eq!(after, Some(answer));
    assert!(matches!(lease, LeaseOutcome::Done(a) if a == answer), "{lease:?}");
}

#[test]
fn a_worker_keeps_its_id_across_coordinator_runs_and_pending_excludes_leased() {
    let t0 = Instant::now();
    let (mut before, mut after) = (scheduler(CheckPolicy::NONE), scheduler(CheckPolicy::NONE));
    assert_eq!(before.register("ab12", "w", 1, t0), after.register("ab12", "w", 1, t0));
    assert_ne!(after.register("ab12", "w", 1, t0), after.register("cd34", "w", 1, t0));
    assert_eq!(after.caller("ab12", t0), Caller::Known("w#ab12".into()));
    assert_eq!(after.caller("ffff", t0), Caller::Unknown);
    let a = after.register("aa", "a", 1, t0).unwrap();
    let (pending, leased) = after.pending_and_leased();
    assert_eq!(leased, 0);
    unit(&mut after, &a, 0, t0);
    assert_eq!(after.pending_and_leased(), (pending - 1, 1));
}

#[test]
fn a_stale_unfinished_result_does_not_drop_the_live_attempts_answer() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    s.expire(t0 + Duration::from_secs(11));
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (again, 2) = unit(&mut s, &b, 0, t0 + Duration::from_secs(11)) else { panic!() };
    assert_eq!(again, u);
    // Attempt 1 ran out of budget after its lease expired; attempt 2 finishes.
    let late = t0 + Duration::from_secs(12);
    assert!(matches!(submit_at(&mut s, sub(&a, u, 1, Facts::UNKNOWN, false, BUDGET), late).0, Verdict::Ignore(_)));
    assert!(matches!(submit_at(&mut s, sub(&b, u, 2, truth(u), true, 10), late).0, Verdict::Accept(_)));
    assert!(s.top_mut().answers(&u), "the finished answer was kept");
    assert_eq!((s.counters.done, s.counters.split), (1, 0));
}

#[test]
fn unfinished_results_that_searched_too_little_are_struck_and_three_disconnect() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let honest = s.register("bb", "b", 1, t0).unwrap();
    for strike in 1..=3 {
        let (u, k) = unit(&mut s, &a, 0, t0);
        let (v, events) = submit(&mut s, sub(&a, u, k, Facts::UNKNOWN, false, BUDGET - 1));
        let Verdict::Refuse { disconnect, .. } = v else { panic!("{v:?}") };
        assert_eq!(disconnect, strike == 3, "strike {strike}");
        assert_eq!(events.len(), usize::from(strike == 3));
        assert!(s.units.get(&u).unwrap().lease.is_none(), "the unit goes to another worker");
    }
    assert!(matches!(s.caller("aa", t0), Caller::Distrusted(_)));
    assert_eq!(s.counters.split, 0, "no unit was split");
    // One that spent its budget splits its unit.
    let (u, k) = unit(&mut s, &honest, 0, t0);
    assert!(matches!(submit(&mut s, sub(&honest, u, k, Facts::UNKNOWN, false, BUDGET)).0, Verdict::Accept(_)));
    assert_eq!(s.counters.split, 1);
}

#[test]
fn node_counts_saturate() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
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
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 2, t0).unwrap();
    let (split, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    let (done, 1) = unit(&mut s, &a, 1, t0) else { panic!() };
    let (_, mut log) = submit(&mut s, sub(&a, split, 1, Facts::UNKNOWN, false, BUDGET));
    log.extend(submit(&mut s, sub(&a, done, 1, truth(done), true, 500)).1);
    // Each line twice, as a log written twice over would hold it.
    let doubled: Vec<Event> = log.iter().flat_map(|e| [e.clone(), e.clone()]).collect();
    let mut replayed = scheduler(CheckPolicy::NONE);
    replayed.replay(&doubled);
    let c = &replayed.counters;
    assert_eq!((c.done, c.split, replayed.nodes), (1, 1, BUDGET + 500));
}

#[test]
fn decisive_results_are_always_verified_and_the_answer_waits_for_it() {
    // At split depth 1 every unit is a first move's region: decisive.
    let top = Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), 1, false);
    let policy = CheckPolicy { sample_one_in: 0, decisive: true };
    let mut s = Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), BUDGET, policy, false);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let mut log = Vec::new();
    while !matches!(s.lease(&a, 0, t0), LeaseOutcome::Wait | LeaseOutcome::Done(_)) {}
    for _ in 0..10_000 {
        let held: Vec<Question> = s.units.held_by(&a).collect();
        if held.is_empty() {
            break;
        }
        for u in held {
            let attempt = s.units.get(&u).unwrap().attempt;
            let (v, events) = submit(&mut s, sub(&a, u, attempt, truth(u), true, 1));
            let Verdict::Accept(r) = v else { panic!("{v:?}") };
            assert!(r.verify, "{u} decides a first move");
            log.extend(events);
        }
        while !matches!(s.lease(&a, 0, t0), LeaseOutcome::Wait | LeaseOutcome::Done(_)) {}
    }
    assert_eq!(s.answer(), None, "no answer before the verifications");
    log.extend(search_all(&mut s));
    let answer = s.answer().expect("verified: the answer");
    assert_eq!(Some(answer), oracle().solve(&Board::parse("4x6").unwrap(), Mode::Nimber).ok());
    // A replay reaches the same: nothing left to verify.
    let mut r = Scheduler::new(
        Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), 1, false),
        Mode::Nimber,
        Duration::from_secs(10),
        BUDGET,
        policy,
        false,
    );
    r.replay(&log);
    assert_eq!(r.answer(), Some(answer));
}

#[test]
fn a_false_result_chosen_for_verification_is_caught_and_everything_of_its_worker_falls() {
    // Every result verified.
    let mut s = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    let t0 = s.since;
    let liar = s.register("11", "liar", 2, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &liar, 0, t0);
    let (good, j) = unit(&mut s, &liar, 1, t0);
    let mut log = submit(&mut s, sub(&liar, u, k, lie(u), true, 9)).1;
    log.extend(submit(&mut s, sub(&liar, good, j, truth(good), true, 9)).1);
    assert!(matches!(&log[..], [Event::Result(a), Event::Result(b)] if a.verify && b.verify), "{log:?}");
    assert_eq!(s.answer(), None);
    let found = search_all(&mut s);
    assert!(
        found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == liar)),
        "the liar is found out: {found:?}"
    );
    log.extend(found);
    assert!(matches!(s.caller("11", t0), Caller::Distrusted(_)));
    assert!(s.register("11", "liar-again", 1, t0).is_err(), "a distrusted worker cannot come back under any name");
    assert!(!s.ledger.is_answered(&good), "its true results fall too");
    assert_eq!(s.caller("22", t0), Caller::Known(honest));
    // A restarted coordinator reaches the same state from the log.
    let mut r = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    r.replay(&log);
    assert!(r.workers.is_distrusted(&liar) && !r.ledger.is_answered(&good));
    assert_eq!(r.results_digest(), s.results_digest());
}

/// A coordinator killed after logging its own answer to a question and before logging the
/// distrust it showed: the replay owes that distrust, and once it is applied nothing waits.
#[test]
fn a_distrust_cut_off_by_a_kill_is_owed_by_the_replay() {
    let mut s = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    let t0 = s.since;
    let liar = s.register("11", "liar", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &liar, 0, t0);
    let mut log = submit(&mut s, sub(&liar, u, k, lie(u), true, 9)).1;
    let q = s.next_search(true).expect("the result is verified");
    let answer = s.searched(q, truth(q), 100, 1);
    assert!(matches!(&answer[..], [Event::Result(_), Event::Distrust { .. }]), "{answer:?}");
    // Killed after the first line.
    log.push(answer[0].clone());
    let mut r = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    r.replay(&log);
    assert!(!r.ledger.awaiting().is_empty(), "the false result waits");
    let owed = r.owed_verdicts();
    assert!(matches!(&owed[..], [Event::Distrust { worker, .. }] if *worker == liar), "{owed:?}");
    r.apply(&owed[0]);
    assert!(r.ledger.awaiting().is_empty() && r.workers.is_distrusted(&liar));
    assert!(r.owed_verdicts().is_empty(), "owed once");
    // A log with every line owes nothing.
    let mut whole = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    log.extend(answer[1..].iter().cloned());
    whole.replay(&log);
    assert!(whole.owed_verdicts().is_empty());
}

#[test]
fn a_result_that_contradicts_held_facts_is_decided_by_the_coordinators_search() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let liar = s.register("11", "liar", 1, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    // The liar's false answer is held (not sampled); the honest worker, given the region's
    // exact value, answers truly: that contradicts what is held.
    let (u, k) = unit(&mut s, &liar, 0, t0);
    let mut log = submit(&mut s, sub(&liar, u, k, lie(u), true, 9)).1;
    let nq = Question::nimber(u.region);
    let j = s.units.grant(nq, &honest, 0, None, BUDGET, t0);
    let (v, events) = submit(&mut s, sub(&honest, nq, j, truth(nq), true, 9));
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }), "no proof of a fault yet: {v:?}");
    log.extend(events);
    assert_eq!(s.answer(), None);
    log.extend(search_all(&mut s));
    assert!(s.workers.is_distrusted(&liar) && !s.workers.is_distrusted(&honest), "{log:?}");
}

#[test]
fn of_a_result_only_the_answer_to_its_question_is_used() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &a, 0, t0);
    let v = oracle().nimber(u.region).unwrap();
    // "g ≠ v+1" would be true; "g = 0" rides along (false when v > 0): only the answer to
    // the question asked is held.
    let asked = match u.query {
        Query::IsValue(j) if j != v => j,
        _ => return,
    };
    let extra = Facts { excluded: 1 << asked, upper: 0 };
    assert!(matches!(submit(&mut s, sub(&a, u, k, extra, true, 1)).0, Verdict::Accept(_)));
    let held = s.top_mut().held(&u.region);
    assert!(held.rules_out(asked) && held.upper > 0, "{held:?}");
}

#[test]
fn an_impossible_result_disconnects_its_worker_at_once() {
    let t0 = Instant::now();
    let mut s = scheduler(CheckPolicy::NONE);
    let (u, _) = {
        let a = s.register("aa", "a", 1, t0).unwrap();
        unit(&mut s, &a, 0, t0)
    };
    let cells = u.region.cells() as u8;
    for bad in [Facts { excluded: 0b111, upper: 2 }, Facts::exact(cells / 2 + 1), Facts::UNKNOWN] {
        let mut s = scheduler(CheckPolicy::NONE);
        let since = s.since;
        let a = s.register("aa", "a", 1, since).unwrap();
        let (u, k) = unit(&mut s, &a, 0, since);
        let (verdict, events) = submit(&mut s, sub(&a, u, k, bad, true, 1));
        assert!(matches!(verdict, Verdict::Refuse { disconnect: true, .. }), "{bad:?}: {verdict:?}");
        assert!(matches!(&events[..], [Event::Refused(_), Event::Distrust { .. }]));
        assert!(matches!(s.caller("aa", s.since), Caller::Distrusted(_)));
    }
}

/// A fact a worker would share: `facts` of one of `q`'s region's options.
fn option_fact(q: Question, facts: impl Fn(u8) -> Facts) -> SharedFact {
    let child = cram_engine::options::options(&q.region).into_iter().find(|c| c.regions[0].cells() > 16).unwrap();
    let region = child.regions[0];
    SharedFact { region, facts: facts(oracle().nimber(region).unwrap()), nodes: 500 }
}

/// `worker` leases a unit and answers it truly, sharing a true fact about one of its
/// options; returns the unit and the fact.
fn answer_sharing(s: &mut Scheduler, worker: &str, t: Instant) -> (Question, SharedFact) {
    let (u, n) = unit(s, worker, 0, t);
    let fact = option_fact(u, Facts::exact);
    let mut x = sub(worker, u, n, truth(u), true, 10);
    x.shared = vec![fact];
    submit(s, x);
    (u, fact)
}

#[test]
fn shared_facts_go_to_the_others_only_once_verified_and_a_false_one_shows_its_origin_wrong() {
    let mut s = scheduler_of("4x8", CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let liar = s.register("11", "liar", 1, t0).unwrap();
    let (_, fact) = answer_sharing(&mut s, &a, t0);
    assert_eq!(s.counters.facts_shared, 1);
    assert!(s.shared_for(&b, 10).is_empty(), "not verified yet");
    search_all(&mut s);
    assert!(s.shared_for(&a, 10).is_empty(), "never back to its origin");
    assert_eq!(s.shared_for(&b, 10), vec![fact]);
    assert!(s.shared_for(&b, 10).is_empty(), "sent once");
    // A false shared fact: its origin is distrusted by the verification, and what it
    // answered falls.
    let (ul, nl) = unit(&mut s, &liar, 0, t0);
    let false_fact = option_fact(ul, |v| Facts::exact(v ^ 1));
    let mut y = sub(&liar, ul, nl, truth(ul), true, 10);
    y.shared = vec![false_fact];
    submit(&mut s, y);
    if false_fact.region != fact.region {
        let found = search_all(&mut s);
        assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == liar)), "{found:?}");
        assert!(!s.ledger.is_answered(&ul));
        assert!(s.shared_for(&b, 10).is_empty(), "the false fact never went out");
    }
}

#[test]
fn a_verified_fact_stays_when_its_origin_is_found_wrong() {
    let mut s = scheduler_of("4x8", CheckPolicy { sample_one_in: 1, decisive: true });
    let t0 = s.since;
    let mole = s.register("11", "mole", 1, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    // The mole shares a true fact, which the coordinator verifies and hands out.
    let (u, fact) = answer_sharing(&mut s, &mole, t0);
    search_all(&mut s);
    assert_eq!(s.shared_for(&honest, 10), vec![fact]);
    // The honest worker answers a unit (its tables hold the mole's fact), then the mole
    // lies and falls.
    let (h, hn) = unit(&mut s, &honest, 0, t0);
    submit(&mut s, sub(&honest, h, hn, truth(h), true, 10));
    let (l, ln) = unit(&mut s, &mole, 0, t0);
    submit(&mut s, sub(&mole, l, ln, lie(l), true, 10));
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == mole)), "{found:?}");
    assert!(!s.ledger.is_answered(&l) && !s.ledger.is_answered(&u), "the mole's answers fall");
    assert!(s.ledger.is_answered(&h), "the honest answer stays");
    // The fact the coordinator showed true is still handed out, to a worker that joins now.
    let late = s.register("33", "late", 1, t0).unwrap();
    assert_eq!(s.shared_for(&late, 10), vec![fact]);
}

#[test]
fn a_shared_fact_against_what_is_certain_disconnects_its_worker() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, n) = unit(&mut s, &a, 0, t0);
    // Regions of up to 16 cells are certain to the coordinator: lie about one.
    let small = cram_engine::region::AnyRegion::from_key("2x5:3ff").unwrap();
    let fact = SharedFact { region: small, facts: Facts::exact(oracle().nimber(small).unwrap() ^ 1), nodes: 500 };
    let mut x = sub(&a, u, n, truth(u), true, 10);
    x.shared = vec![fact];
    let (verdict, events) = submit(&mut s, x);
    assert!(matches!(verdict, Verdict::Refuse { disconnect: true, .. }), "{verdict:?}");
    assert!(matches!(&events[..], [Event::Refused(_), Event::Distrust { .. }]));
    assert_eq!(s.counters.facts_shared, 0);
}

#[test]
fn the_sample_is_drawn_not_computed() {
    // One in two: over 200 draws both outcomes appear (a hash of names would give one).
    let p = CheckPolicy { sample_one_in: 2, decisive: true };
    let draws: Vec<bool> = (0..200).map(|_| p.draw(false)).collect();
    assert!(draws.iter().any(|&d| d) && draws.iter().any(|&d| !d));
    assert!(p.draw(true) && CheckPolicy::DEFAULT.draw(true));
    assert!(!CheckPolicy::NONE.draw(true) && !CheckPolicy::NONE.draw(false));
}

#[test]
fn a_result_on_a_question_the_coordinator_searched_already_waits_for_nothing() {
    let mut s = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    let t0 = s.since;
    let liar = s.register("11", "liar", 1, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    // The liar's answer is verified and found false: its unit goes back, to the honest one.
    let (u, k) = unit(&mut s, &liar, 0, t0);
    submit(&mut s, sub(&liar, u, k, lie(u), true, 9));
    search_all(&mut s);
    assert!(s.workers.is_distrusted(&liar));
    // A late answer to the same question (the honest worker had it leased too).
    let j = s.units.grant(u, &honest, 0, None, BUDGET, t0);
    let (v, _) = submit(&mut s, sub(&honest, u, j, truth(u), true, 9));
    assert!(matches!(v, Verdict::Accept(ref r) if !r.verify), "searched already: {v:?}");
    assert!(s.ledger.awaiting().is_empty() && s.next_search(true).is_none());
}

/// The ETA says it is a lower bound exactly while the walk of the top has cut a branch at
/// its cap (more units are then certain to follow): nearly always at split depth 2, never
/// at depth 1 (a first move has one open question at a time); none once the answer is known.
#[test]
fn the_eta_is_a_lower_bound_while_branches_are_cut() {
    for depth in [1, 2] {
        let top =
            Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), depth, false);
        let mut s = Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), BUDGET, CheckPolicy::NONE, false);
        let t0 = s.since;
        let a = s.register("aa", "a", 1, t0).unwrap();
        let (mut cut, mut n) = (0, 0);
        while s.answer().is_none() {
            let (u, k) = unit(&mut s, &a, 0, t0);
            submit(&mut s, sub(&a, u, k, truth(u), true, 1));
            let status = s.status("4x6", Duration::from_secs(1), 0.0, t0);
            if status.answer.is_none() {
                assert!(status.eta_secs.is_some(), "a unit is done: the pace is known");
                assert_eq!(status.eta_lower_bound, !s.frontier.truncated.is_empty());
                cut += usize::from(status.eta_lower_bound);
            }
            n += 1;
            assert!(n < 10_000);
        }
        assert_eq!(cut > 0, depth == 2, "depth {depth}: {cut} of {n} walks cut");
        let status = s.status("4x6", Duration::from_secs(1), 0.0, t0);
        assert!(status.eta_secs.is_none() && !status.eta_lower_bound);
    }
}

#[test]
fn past_the_jobs_splits_units_are_searched_whole_until_verified_results_earn_more() {
    let mut s = scheduler(CheckPolicy { sample_one_in: 1, decisive: true });
    s.splits_free = 1;
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let c = s.register("cc", "c", 1, t0).unwrap();
    let lease = |s: &mut Scheduler, w: &str| match s.lease(w, 0, t0) {
        LeaseOutcome::Unit(q, k, budget) => (q, k, budget),
        other => panic!("no unit for {w}: {other:?}"),
    };
    let (u, k, budget) = lease(&mut s, &a);
    let (v, j, _) = lease(&mut s, &b);
    assert_eq!(budget, BUDGET);
    assert!(matches!(submit(&mut s, sub(&a, u, k, Facts::UNKNOWN, false, BUDGET)).0, Verdict::Accept(_)));
    assert_eq!(s.counters.split, 1, "the one free split is spent");
    // Leased with a budget before it was spent: refused without blame.
    let (verdict, events) = submit(&mut s, sub(&b, v, j, Facts::UNKNOWN, false, BUDGET));
    let Verdict::Refuse { disconnect, reason, .. } = verdict else { panic!("{verdict:?}") };
    assert!(!disconnect && events.is_empty() && reason.contains("splits no more units"), "{reason}");
    assert!(s.units.get(&v).unwrap().lease.is_none(), "the unit goes to a worker that searches it whole");
    assert_eq!(s.workers.get_mut(&b).unwrap().strikes, 0, "b is not blamed");
    // Leased now, a unit is to be searched whole: an unfinished result of it is absurd.
    let (w, i, budget) = lease(&mut s, &c);
    assert_eq!(budget, 0);
    let verdict = submit(&mut s, sub(&c, w, i, Facts::UNKNOWN, false, BUDGET)).0;
    let Verdict::Refuse { reason, .. } = verdict else { panic!("{verdict:?}") };
    assert!(reason.contains("searched whole"), "{reason}");
    assert_eq!(s.workers.get_mut(&c).unwrap().strikes, 1, "c is struck");
    assert_eq!(s.counters.split, 1);
    // Answers held earn nothing until a verification agrees with one.
    let (x, k, _) = lease(&mut s, &b);
    assert!(matches!(submit(&mut s, sub(&b, x, k, truth(x), true, 10)).0, Verdict::Accept(_)));
    assert_eq!((s.ledger.verified(), s.node_budget()), (0, 0));
    search_all(&mut s);
    assert_eq!(s.ledger.verified(), 1);
    assert_eq!(lease(&mut s, &b).2, BUDGET, "a verified result earns splits");
}

#[test]
fn once_a_disputer_is_shown_wrong_its_other_disputes_are_not_searched() {
    // Every result is verified: the honest answers' searches must survive the drop.
    let policy = CheckPolicy { sample_one_in: 1, decisive: true };
    let mut s = scheduler(policy);
    let t0 = s.since;
    let honest = s.register("22", "honest", 3, t0).unwrap();
    let liar = s.register("11", "liar", 3, t0).unwrap();
    let (mut answered, mut log) = (Vec::new(), Vec::new());
    for slot in 0..3 {
        let (u, k) = unit(&mut s, &honest, slot, t0);
        let (verdict, events) = submit(&mut s, sub(&honest, u, k, truth(u), true, 9));
        assert!(matches!(verdict, Verdict::Accept(_)));
        log.extend(events);
        answered.push(u);
    }
    // The liar, asked other questions about the same regions, contradicts each answer:
    // each refusal queues a search.
    for (slot, &u) in answered.iter().enumerate() {
        let v = oracle().nimber(u.region).unwrap();
        let (d, claim) = match u.query {
            Query::Nimber => (Question { region: u.region, query: Query::IsValue(v) }, v + 1),
            Query::IsValue(j) => (Question::nimber(u.region), if j == v { v + 1 } else { j }),
        };
        let k = s.units.grant(d, &liar, slot as u32, None, BUDGET, t0);
        let (verdict, events) = submit(&mut s, sub(&liar, d, k, Facts::exact(claim), true, 9));
        assert!(matches!(verdict, Verdict::Refuse { disconnect: false, .. }), "{verdict:?}");
        log.extend(events);
    }
    // The first search shows it wrong; of the rest only the honest answers' verifications
    // are searched, and then nothing waits.
    let mut searched = Vec::new();
    while let Some(q) = s.next_search(true) {
        searched.push(q);
        for e in s.searched(q, truth(q), 100, 1) {
            s.apply(&e);
            log.push(e);
        }
    }
    assert!(s.workers.is_distrusted(&liar) && !s.workers.is_distrusted(&honest));
    assert_eq!(searched, answered, "the liar's other two disputes were not searched");
    assert_eq!(s.ledger.verified(), 3);
    assert!(s.ledger.is_quiet());
    // A replay of the log comes to the same: nothing left to search.
    let mut replayed = scheduler(policy);
    replayed.replay(&log);
    assert!(replayed.workers.is_distrusted(&liar) && replayed.ledger.verified() == 3);
    assert_eq!(replayed.next_search(true), None);
    assert!(replayed.ledger.is_quiet());
}

/// A certified job of 4x6, split at `depth`.
fn certified_split_at(depth: u32) -> Scheduler {
    let top = Top::new(&Board::parse("4x6").unwrap(), Mode::Nimber, false, Arc::new(DbSet::default()), depth, false);
    Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), BUDGET, CheckPolicy::DEFAULT, true)
}

fn certified_scheduler() -> Scheduler {
    certified_split_at(2)
}

#[test]
fn in_a_certified_job_heartbeats_past_the_budget_still_extend_the_lease() {
    // The proof after a search has no budget: its progress keeps the lease.
    let mut s = certified_scheduler();
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &a, 0, t0);
    assert!(s.heartbeat(&a, u, k, u64::MAX / 2, t0 + Duration::from_secs(9)));
    assert!(s.expire(t0 + Duration::from_secs(16)).is_empty(), "the lease was extended");
}

#[test]
fn a_unit_proved_again_is_searched_whole() {
    // A held result without its proof is proved again; an unfinished result of an answered
    // unit would be ignored, so a budget would hand it out again and again.
    let mut s = certified_scheduler();
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &a, 0, t0);
    let mut answer = sub(&a, u, k, truth(u), true, 10);
    answer.proof = vec![1];
    let (verdict, events) = submit(&mut s, answer);
    assert!(matches!(verdict, Verdict::Accept(_)), "{verdict:?}");
    for e in &events {
        s.apply(e);
    }
    assert!(s.ledger.to_reprove().contains(&u), "logged without a proof file: proved again");
    assert_eq!(s.lease(&a, 0, t0), LeaseOutcome::Unit(u, k + 1, 0));
    assert_eq!(s.units.get(&u).unwrap().lease.as_ref().unwrap().budget, Some(0), "the lease says so too");
}

/// A job of one unit at a time (4x6 not split), verifying as `checks` says.
fn one_unit(checks: CheckPolicy) -> Scheduler {
    scheduler_split_at("4x6", checks, 0)
}

/// A staller takes a unit and keeps its lease with heartbeats; an honest worker answers
/// every other unit it is given until none is free. Returns the two and the unit, and the
/// time the honest worker was first told to wait.
fn stall(s: &mut Scheduler) -> (String, String, Question, Instant) {
    let t0 = s.since;
    let staller = s.register("11", "staller", 1, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let (u, 1) = unit(s, &staller, 0, t0) else { panic!() };
    let mut t = t0;
    loop {
        t += Duration::from_millis(10);
        match s.lease(&honest, 0, t) {
            LeaseOutcome::Unit(q, k, _) => {
                submit_at(s, sub(&honest, q, k, truth(q), true, 10), t);
            }
            LeaseOutcome::Wait => return (staller, honest, u, t),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_unit_held_long_is_leased_as_a_backup_and_the_first_result_ends_both() {
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let (staller, honest, u, waited) = stall(&mut s);
    let t0 = s.since;
    let lease = s.units.lease_length();
    let old = lease * BACKUP_AFTER;
    assert!(waited < t0 + old);
    // Heartbeats that show "progress" keep the staller's lease; until the unit has been
    // held for BACKUP_AFTER lease periods the honest worker waits.
    let mut beat = 0;
    let mut at = waited;
    while at < t0 + old {
        beat += 1;
        assert!(s.heartbeat(&staller, u, 1, 100 * beat, at));
        assert!(matches!(s.lease(&honest, 0, at), LeaseOutcome::Wait));
        at += lease / 2;
    }
    assert!(s.heartbeat(&staller, u, 1, 100 * (beat + 1), at));
    // Then the idle honest worker gets it as a backup, to be searched whole (a backup
    // splits nothing); the staller keeps its lease. Every idle worker that asks gets one: a limit would be a
    // race that the staller's other identities win.
    let LeaseOutcome::Unit(backup, 2, budget) = s.lease(&honest, 0, at) else { panic!("no backup") };
    assert_eq!((backup, budget), (u, 0));
    assert!(s.heartbeat(&staller, u, 1, 100 * (beat + 2), at));
    assert!(s.heartbeat(&honest, u, 2, 10, at));
    let third = s.register("33", "third", 1, at).unwrap();
    let LeaseOutcome::Unit(_, 3, _) = s.lease(&third, 0, at) else { panic!("no second backup") };
    assert!(matches!(s.lease(&honest, 0, at), LeaseOutcome::Wait), "one lease per thread");
    assert_eq!(s.counters.backups, 2);
    // A backup's answer ends the backups; the first holder searches on until that answer is
    // verified (no backup can take a long search down).
    let later = at + Duration::from_secs(1);
    assert!(matches!(submit_at(&mut s, sub(&honest, u, 2, truth(u), true, 10), at).0, Verdict::Accept(_)));
    assert!(!s.heartbeat(&third, u, 3, 10, later));
    assert!(s.heartbeat(&staller, u, 1, 100 * (beat + 3), later));
    // Its answer, contradicting, is refused, and the coordinator's search decides: the
    // staller is shown wrong, the backup's answer verified.
    let (v, _) = submit_at(&mut s, sub(&staller, u, 1, lie(u), true, 10), later);
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }), "{v:?}");
    // Once: a dispute costs a search, and its lease is gone.
    let (v, _) = submit_at(&mut s, sub(&staller, u, 1, lie(u), true, 10), later);
    assert!(matches!(v, Verdict::Ignore(_)), "{v:?}");
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == staller)), "{found:?}");
    assert!(s.ledger.is_verified(&u));
}

#[test]
fn a_late_answer_leaves_the_first_holder_searching_until_it_is_verified() {
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (u, 1) = unit(&mut s, &a, 0, t0) else { panic!() };
    assert_eq!(s.expire(t0 + Duration::from_secs(11)), vec![(u, a.clone())]);
    let (_, 2) = unit(&mut s, &b, 0, t0 + Duration::from_secs(12)) else { panic!() };
    // The expired attempt's answer is taken, but does not cancel b's search...
    let late = t0 + Duration::from_secs(13);
    assert!(matches!(submit_at(&mut s, sub(&a, u, 1, truth(u), true, 10), late).0, Verdict::Accept(_)));
    assert!(s.heartbeat(&b, u, 2, 100, late + Duration::from_secs(1)));
    // ...until the coordinator verified it; b's agreeing answer would be a duplicate.
    search_all(&mut s);
    assert!(!s.heartbeat(&b, u, 2, 200, late + Duration::from_secs(2)));
    assert!(matches!(submit_at(&mut s, sub(&b, u, 2, truth(u), true, 10), late).0, Verdict::Ignore(_)));
}

#[test]
fn when_the_first_holder_lets_go_the_backup_holds_the_unit_and_a_trusting_job_makes_none() {
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let (staller, honest, u, _) = stall(&mut s);
    let late = s.since + s.units.lease_length() * BACKUP_AFTER;
    // Handing the unit back and leasing it again does not restart the wait for backups.
    assert!(s.heartbeat(&staller, u, 1, 100, late - Duration::from_secs(2)));
    assert_eq!(s.release(&staller, &[u]), 1);
    let (_, 2) = unit(&mut s, &staller, 0, late - Duration::from_secs(1)) else { panic!() };
    let LeaseOutcome::Unit(_, 3, _) = s.lease(&honest, 0, late) else { panic!("no backup") };
    // The staller's lease expires: the backup is now the unit's only lease, and goes on.
    assert_eq!(s.expire(late + Duration::from_secs(9)), vec![(u, staller.clone())]);
    assert!(s.heartbeat(&honest, u, 3, 500, late + Duration::from_secs(9)));
    assert!(!s.units.is_unleased(&u) && s.units.held_by(&honest).eq([u]));
    // A job that verifies nothing trusts its workers: no backups.
    let mut trusting = one_unit(CheckPolicy::NONE);
    let (staller, honest, u, _) = stall(&mut trusting);
    let late = trusting.since + trusting.units.lease_length() * BACKUP_AFTER;
    assert!(trusting.heartbeat(&staller, u, 1, 100, late - Duration::from_secs(1)));
    assert!(matches!(trusting.lease(&honest, 0, late), LeaseOutcome::Wait));
}

/// The grants a state would hold: (index into `units`, worker, attempt, as first holder).
fn grants(units: &[Question], list: &[(usize, &String, u64, bool)]) -> Vec<Grant> {
    list.iter().map(|&(i, w, attempt, first)| Grant { unit: units[i], worker: w.clone(), attempt, first }).collect()
}

/// A policy that verifies the decisive results and, in practice, none drawn: what a test
/// needs to see which results are verified whatever the draw.
const DECISIVE_ONLY: CheckPolicy = CheckPolicy { sample_one_in: u32::MAX, decisive: true };

/// A unit of `worker` that does not decide the root or a first move (those are always
/// verified), the decisive ones before it answered truly.
fn undecisive_unit(s: &mut Scheduler, worker: &str, t: Instant) -> (Question, u64) {
    loop {
        let (q, k) = unit(s, worker, 0, t);
        if !s.frontier.decisive.contains(&q) {
            return (q, k);
        }
        submit_at(s, sub(worker, q, k, truth(q), true, 10), t);
        search_all(s);
    }
}

/// Whether an accepted verdict's result is to be verified.
fn verified(v: &Verdict) -> bool {
    match v {
        Verdict::Accept(r) => r.verify,
        other => panic!("not accepted: {other:?}"),
    }
}

/// A finished answer is believed on a draw only from the unit's first holder under its
/// lease. From anyone else it is always verified: a backup's or a late attempt's lie could
/// otherwise end the job before the first holder disputes it (a review found 3x8 answered
/// \*1 instead of \*3 that way). After a restart the first to come back with a unit is its
/// first holder; an adopted unit's unfinished result splits nothing (adoption gives a unit
/// to whoever says it searched it).
#[test]
fn answers_not_from_the_first_holder_under_its_lease_are_always_verified() {
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    // A late answer: a's lease expired and b holds the unit now.
    let (u, k) = undecisive_unit(&mut s, &a, t0);
    let t1 = t0 + Duration::from_secs(11);
    assert!(s.expire(t1).iter().any(|(q, w)| *q == u && *w == a));
    let LeaseOutcome::Unit(again, k2, _) = s.lease(&b, 0, t1) else { panic!("the unit goes to b") };
    assert_eq!(again, u);
    assert!(verified(&submit_at(&mut s, sub(&a, u, k, lie(u), true, 10), t1).0), "a late answer");
    // Its lie is caught before any answer rests on it; b's answer, from the unit's first
    // holder, is taken on the draw.
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == a)), "{found:?}");
    let (v, _) = submit_at(&mut s, sub(&b, u, k2, truth(u), true, 10), t1);
    assert!(matches!(v, Verdict::Accept(_) | Verdict::Ignore(_)), "{v:?}");
    let (w, k3) = undecisive_unit(&mut s, &b, t1);
    assert!(!verified(&submit_at(&mut s, sub(&b, w, k3, truth(w), true, 10), t1).0), "the first holder's, not drawn");

    // A backup's answer.
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let hostile = s.register("11", "hostile", 1, t0).unwrap();
    let (u, k) = undecisive_unit(&mut s, &honest, t0);
    // (Leased as a backup: how it comes to be is `a_unit_held_long_is_leased_as_a_backup…`.)
    let kb = s.units.grant(u, &hostile, 0, None, 0, t0);
    assert!(s.units.get(&u).unwrap().is_backup(&hostile) && s.units.get(&u).unwrap().is_first(&honest));
    let at = t0;
    let (v, _) = submit_at(&mut s, sub(&hostile, u, kb, lie(u), true, 10), at);
    assert!(verified(&v), "a backup's answer");
    assert!(s.heartbeat(&honest, u, k, 100, at), "the first holder searches on");
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == hostile)), "{found:?}");

    // A restarted coordinator: the first to come back with a unit holds it as if leased it
    // (its answer taken on the draw); a second one searching it too is a backup.
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let c = s.register("cc", "c", 2, t0).unwrap();
    let d = s.register("dd", "d", 1, t0).unwrap();
    let open: Vec<Question> = {
        s.refresh();
        s.frontier.open.iter().map(|(q, _)| *q).filter(|q| !s.frontier.decisive.contains(q)).collect()
    };
    let earlier = [(0, &c, 3, true), (0, &d, 5, false), (1, &c, 3, true), (2, &c, 3, true)];
    s.granted_earlier(grants(&open, &earlier));
    assert!(s.heartbeat(&c, open[0], 3, 100, t0) && s.heartbeat(&d, open[0], 5, 100, t0));
    assert!(verified(&submit(&mut s, sub(&d, open[0], 5, truth(open[0]), true, 10)).0), "an adopted backup's");
    assert!(!verified(&submit(&mut s, sub(&c, open[2], 3, truth(open[2]), true, 10)).0), "the first to come back");
    // An adopted unit's unfinished result splits nothing, whatever it searched.
    let (v, events) = submit(&mut s, sub(&c, open[1], 3, Facts::UNKNOWN, false, 100 * BUDGET));
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }) && events.is_empty(), "{v:?}");
    assert!(!s.units.is_split(&open[1]), "an adopted unit splits nothing");
}

/// In a certified job a backup's answer does not push the first holder's agreeing one out:
/// both are held and both proofs are checked, so a backup whose proof fails does not take
/// the unit's answer (and the honest search and proof) down with it.
#[test]
fn a_certified_first_holders_answer_is_held_beside_a_backups_until_one_is_proved() {
    let mut s = certified_split_at(0);
    let t0 = s.since;
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let hostile = s.register("11", "hostile", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &honest, 0, t0);
    let lease = s.units.lease_length();
    let (mut at, mut n) = (t0, 0);
    while at <= t0 + lease * BACKUP_AFTER {
        n += 100;
        assert!(s.heartbeat(&honest, u, k, n, at));
        at += lease / 2;
    }
    let LeaseOutcome::Unit(b, kb, 0) = s.lease(&hostile, 0, at) else { panic!("no backup") };
    assert_eq!(b, u);
    // The backup: the right value, with a proof that will not check.
    let apply = |s: &mut Scheduler, worker: &str, attempt: u64, file: &str| {
        let mut x = sub(worker, u, attempt, truth(u), true, 10);
        x.proof = vec![1];
        let verdict = s.judge(&x, at);
        let Verdict::Accept(mut r) = verdict else { panic!("{worker}: {verdict:?}") };
        r.proof = Some(file.to_string());
        s.apply(&Event::Result(r));
    };
    apply(&mut s, &hostile, kb, "bad.proof");
    assert!(s.heartbeat(&honest, u, k, n + 100, at), "the first holder searches on");
    apply(&mut s, &honest, k, "good.proof");
    assert!(s.proofs().is_empty(), "a certificate takes only proofs that were checked");
    // The first holder's proof checks: the unit is verified (the answer may come) while the
    // backup's proof is not checked yet, and the certificate would not take that one.
    s.apply(&Event::Proved { unit: u, worker: honest.clone(), facts: 1 });
    assert!(s.ledger.is_verified(&u));
    assert_eq!(s.proofs(), vec!["good.proof".to_string()]);
    // The backup's proof fails: its worker falls, the first holder's answer stands.
    s.apply(&Event::Distrust { worker: hostile.clone(), reason: "its proof does not check".into() });
    assert!(s.ledger.is_answered(&u));
    assert_eq!(s.proofs(), vec!["good.proof".to_string()]);
    // Once an answer is proved, a further agreeing one is a duplicate again.
    let mut again = sub(&honest, u, k, truth(u), true, 10);
    again.proof = vec![1];
    assert!(matches!(s.judge(&again, at), Verdict::Ignore(_)));
}

/// Leasing and handing back a unit in a loop does not grow what the coordinator keeps of
/// it: one grant per worker, the last (an earlier attempt of the same worker lapses).
#[test]
fn a_lease_and_release_loop_keeps_one_grant_per_worker() {
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, first) = unit(&mut s, &a, 0, t0);
    for _ in 0..100 {
        assert_eq!(s.release(&a, &[u]), 1);
        unit(&mut s, &a, 0, t0);
    }
    assert_eq!(s.units.get(&u).unwrap().grants.len(), 1);
    assert!(!s.units.granted(&u, &a, first) && s.units.granted(&u, &a, first + 100));
}

/// In a certified job a dispute that a proof decides costs no search: once the held answer
/// is proved, the worker whose refused answer contradicts it is shown wrong, and the
/// coordinator's search of the question is dropped.
#[test]
fn a_dispute_a_proof_decides_is_not_searched() {
    let mut s = certified_split_at(0);
    let t0 = s.since;
    let disputer = s.register("11", "disputer", 1, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &disputer, 0, t0);
    let kb = s.units.grant(u, &honest, 0, None, 0, t0);
    let certified = |worker: &str, attempt: u64, facts: Facts| {
        let mut x = sub(worker, u, attempt, facts, true, 10);
        x.proof = vec![1];
        x
    };
    let Verdict::Accept(mut r) = s.judge(&certified(&honest, kb, truth(u)), t0) else { panic!("the backup's answer") };
    r.proof = Some("honest.proof".into());
    s.apply(&Event::Result(r));
    let (v, _) = submit_at(&mut s, certified(&disputer, k, lie(u)), t0);
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }), "{v:?}");
    assert!(!s.ledger.is_quiet(), "the dispute waits for the coordinator's search");
    s.apply(&Event::Proved { unit: u, worker: honest.clone(), facts: 1 });
    let wrong = s.shown_wrong_by_proof(u, &honest);
    assert!(matches!(&wrong[..], [Event::Distrust { worker, .. }] if *worker == disputer), "{wrong:?}");
    // A coordinator killed after logging the proof owes them on restart.
    assert_eq!(s.owed_verdicts(), wrong);
    for e in &wrong {
        s.apply(e);
    }
    assert_eq!(s.next_search(true), None, "no search left to make");
    assert!(s.ledger.is_verified(&u) && s.answer().is_some());
}

/// A distrust forgets only the distrusted worker's refusals: a worker refused on a unit is
/// not given it again, nor heard on it again, when someone else falls (a throwaway
/// identity's distrust used to let a refused answer be sent and logged once more); its
/// refused answer is still decided by the coordinator's search.
#[test]
fn a_distrust_forgets_only_its_workers_refusals() {
    let mut s = scheduler(CheckPolicy::NONE);
    let t0 = s.since;
    let liar = s.register("11", "liar", 1, t0).unwrap();
    let disputer = s.register("22", "disputer", 1, t0).unwrap();
    let throwaway = s.register("33", "throwaway", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &liar, 0, t0);
    submit(&mut s, sub(&liar, u, k, truth(u), true, 9));
    // The disputer's contradicting answer is refused once.
    let j = s.units.grant(u, &disputer, 0, None, BUDGET, t0);
    let (v, _) = submit(&mut s, sub(&disputer, u, j, lie(u), true, 9));
    assert!(matches!(v, Verdict::Refuse { disconnect: false, .. }), "{v:?}");
    // Another worker falls for something else.
    let (w, kw) = unit(&mut s, &throwaway, 0, t0);
    let (v, _) = submit(&mut s, sub(&throwaway, w, kw, Facts { excluded: 0b111, upper: 2 }, true, 9));
    assert!(matches!(v, Verdict::Refuse { disconnect: true, .. }), "{v:?}");
    assert!(s.workers.is_distrusted(&throwaway));
    // The disputer is still not heard on u again; the coordinator's search decides it.
    assert!(s.units.refused(&u, &disputer));
    let (v, _) = submit(&mut s, sub(&disputer, u, j, lie(u), true, 9));
    assert!(matches!(v, Verdict::Ignore(_)), "{v:?}");
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == disputer)), "{found:?}");
}

/// The search of a shared fact's region has the job's unit budget and is made only when
/// the check threads have room for it: one that runs out drops the facts waiting on the
/// region, blaming nobody, and a search the answer waits for is never held behind it.
#[test]
fn a_shared_facts_search_is_budgeted_and_gives_up_without_blame() {
    let mut s = scheduler_of("4x8", CheckPolicy::NONE);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (_, fact) = answer_sharing(&mut s, &a, t0);
    assert_eq!(s.next_search(false), None, "no room for it: not made");
    let q = s.next_search(true).expect("the shared fact's search");
    assert_eq!(q.region, fact.region);
    assert_eq!(s.search_budget(&q), Some(BUDGET));
    s.later_search_gave_up(q);
    assert_eq!(s.next_search(true), None, "not made again");
    assert!(s.shared_for(&b, 10).is_empty(), "never handed out");
    assert!(!s.workers.is_distrusted(&a));
    // A search the answer waits for has no budget: b's answer contradicts a's, held.
    let (w, k) = unit(&mut s, &a, 0, t0);
    submit(&mut s, sub(&a, w, k, lie(w), true, 10));
    let nq = Question::nimber(w.region);
    let j = s.units.grant(nq, &b, 0, None, BUDGET, t0);
    submit(&mut s, sub(&b, nq, j, truth(nq), true, 10));
    let d = s.next_search(false).expect("the dispute's search");
    assert_eq!(s.search_budget(&d), None);
}

/// After a restart only the unit's recorded first holder adopts it as such: an earlier
/// run's backup (or a worker whose grant lapsed) that comes back first holds it unvouched,
/// its answer always verified, and gives the first lease up when the recorded first holder
/// comes back. A backup that became the first holder is recorded as such at its next
/// heartbeat.
#[test]
fn only_the_recorded_first_holder_adopts_a_unit_as_its_first_holder() {
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let hostile = s.register("11", "hostile", 1, t0).unwrap();
    let open: Vec<Question> = {
        s.refresh();
        s.frontier.open.iter().map(|(q, _)| *q).filter(|q| !s.frontier.decisive.contains(q)).collect()
    };
    let u = open[0];
    s.granted_earlier(grants(&open, &[(0, &honest, 4, true), (0, &hostile, 3, false)]));
    // The hostile worker comes back first: it holds the unit, unvouched.
    assert!(s.heartbeat(&hostile, u, 3, 100, t0));
    assert!(s.units.get(&u).unwrap().is_first(&hostile));
    // The recorded first holder comes back and takes the first lease.
    assert!(s.heartbeat(&honest, u, 4, 100, t0));
    assert!(s.units.get(&u).unwrap().is_first(&honest) && s.units.get(&u).unwrap().is_backup(&hostile));
    // The hostile worker's lie is verified, and the honest one searches on.
    let (v, _) = submit(&mut s, sub(&hostile, u, 3, lie(u), true, 10));
    assert!(verified(&v), "{v:?}");
    assert!(s.heartbeat(&honest, u, 4, 200, t0));
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == hostile)), "{found:?}");

    // In a run: a backup promoted when the first holder lets go is recorded as the first
    // holder at its next heartbeat.
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let (staller, honest, u, _) = stall(&mut s);
    let late = s.since + s.units.lease_length() * BACKUP_AFTER;
    assert!(s.heartbeat(&staller, u, 1, 100, late - Duration::from_secs(1)));
    let LeaseOutcome::Unit(_, k, _) = s.lease(&honest, 0, late) else { panic!("no backup") };
    let noted = s.take_grants();
    assert!(
        noted.iter().any(|g| g.worker == staller && g.first) && noted.iter().any(|g| g.worker == honest && !g.first)
    );
    assert_eq!(s.release(&staller, &[u]), 1);
    assert_eq!(s.take_grants(), vec![Grant { unit: u, worker: honest.clone(), attempt: k, first: true }]);
    assert!(s.heartbeat(&honest, u, k, 100, late));
    assert!(s.take_grants().is_empty(), "recorded once, when it happened");
}

/// In a restarted run's adoption period a unit an earlier run had a first holder for is not
/// leased to anyone else (who would then hold it as its first holder and cut the returning
/// search off); after the period it is free again.
#[test]
fn a_restarted_run_keeps_a_unit_for_its_recorded_first_holder() {
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let eager = s.register("11", "eager", 64, t0).unwrap();
    let open: Vec<Question> = {
        s.refresh();
        s.frontier.open.iter().map(|(q, _)| *q).collect()
    };
    let u = open[0];
    s.granted_earlier(grants(&open, &[(0, &honest, 4, true)]));
    // The eager worker takes every free unit at once: not u.
    let mut taken = Vec::new();
    for slot in 0..64 {
        if let LeaseOutcome::Unit(q, ..) = s.lease(&eager, slot, t0) {
            taken.push(q);
        }
    }
    assert!(!taken.is_empty() && !taken.contains(&u), "{taken:?}");
    // The recorded first holder comes back and holds it, vouched.
    assert!(s.heartbeat(&honest, u, 4, 100, t0 + Duration::from_secs(1)));
    assert!(s.units.get(&u).unwrap().is_first(&honest));
    // After the adoption period a unit nobody came back for is free again.
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let eager = s.register("11", "eager", 64, t0).unwrap();
    s.granted_earlier(grants(&open, &[(0, &honest, 4, true)]));
    let late = t0 + s.units.lease_length();
    let mut taken = Vec::new();
    for slot in 0..64 {
        if let LeaseOutcome::Unit(q, ..) = s.lease(&eager, slot, late) {
            taken.push(q);
        }
    }
    assert!(taken.contains(&u), "{taken:?}");
}

/// A certified submission of `worker` on `u` with a proof of one byte (which the job's
/// checker would refuse; the scheduler judges results before their proofs are checked).
fn certified_sub(worker: &str, u: Question, attempt: u64, facts: Facts) -> Submission {
    let mut x = sub(worker, u, attempt, facts, true, 10);
    x.proof = vec![1];
    x
}

/// Judges and applies a certified result, with a proof file named after it, and marks it
/// proved when `proved`, as the job and its proof checker would. True when it is held.
fn certified_submit(s: &mut Scheduler, worker: &str, u: Question, k: u64, facts: Facts, proved: bool) -> bool {
    match s.judge(&certified_sub(worker, u, k, facts), s.since) {
        Verdict::Accept(mut r) => {
            r.proof = Some(format!("{:016x}.proof", k << 8 | worker.len() as u64));
            s.apply(&Event::Result(r));
            if proved {
                s.apply(&Event::Proved { unit: u, worker: worker.to_string(), facts: 1 });
            }
            true
        }
        v => {
            for e in v.events() {
                s.apply(&e);
            }
            false
        }
    }
}

/// Once a certified job's answer is logged, results that come during the linger are
/// ignored: they would be reported to the top before their proofs are checked, and the
/// certificate is assembled from the values the top holds (a review found a lie sent
/// then made the assembly fail).
#[test]
fn results_after_the_answer_change_nothing_the_certificate_is_assembled_from() {
    let mut s = certified_scheduler();
    let t0 = s.since;
    let hostile = s.register("11", "hostile", 8, t0).unwrap();
    let honest = s.register("22", "honest", 1, t0).unwrap();
    let mut held: Vec<(Question, u64)> = Vec::new();
    for slot in 0..8 {
        if let LeaseOutcome::Unit(q, k, _) = s.lease(&hostile, slot, t0) {
            held.push((q, k));
        }
    }
    let answer = loop {
        if let Some(a) = s.answer() {
            break a;
        }
        match s.lease(&honest, 0, t0) {
            LeaseOutcome::Unit(q, k, _) => {
                certified_submit(&mut s, &honest, q, k, truth(q), true);
            }
            LeaseOutcome::Done(a) => break a,
            LeaseOutcome::Wait => {
                let (q, k) = held.remove(0);
                certified_submit(&mut s, &hostile, q, k, truth(q), true);
            }
        }
        search_all(&mut s);
    };
    s.decide(answer);
    let sorted = |mut v: Vec<(cram_engine::region::AnyRegion, u8)>| {
        v.sort_by_key(|(r, x)| (r.key(), *x));
        v
    };
    let values = sorted(s.exact_values());
    assert!(!held.is_empty(), "the hostile worker still holds units");
    for (q, k) in held {
        assert!(matches!(s.judge(&certified_sub(&hostile, q, k, lie(q)), t0), Verdict::Ignore(_)));
    }
    assert_eq!(sorted(s.exact_values()), values);
    assert_eq!(s.answer(), Some(answer));
}

/// A certified job of one unit answered with a result whose proof file is not logged: the
/// unit is to be proved again. Returns the job, the unit and the log so far.
fn a_unit_to_prove_again() -> (Scheduler, Question, Vec<Event>) {
    let mut s = certified_split_at(0);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let (u, k) = unit(&mut s, &a, 0, t0);
    let (_, log) = submit(&mut s, certified_sub(&a, u, k, truth(u)));
    assert!(s.ledger.to_reprove().contains(&u), "held without its proof file");
    (s, u, log)
}

/// A unit to be proved again that gets a proof which is refused (its worker distrusted) is
/// to be proved again still, also after a restart: the result held before it waits for a
/// proof (a review found the unit leased to nobody and the job waiting for ever).
#[test]
fn a_refused_proof_of_a_unit_to_prove_again_leaves_it_to_prove_again() {
    let (mut s, u, mut log) = a_unit_to_prove_again();
    let t0 = s.since;
    let h = s.register("11", "hostile", 1, t0).unwrap();
    let LeaseOutcome::Unit(q, kh, 0) = s.lease(&h, 0, t0) else { panic!("the unit to prove again") };
    assert_eq!(q, u);
    let Verdict::Accept(mut r) = s.judge(&certified_sub(&h, u, kh, truth(u)), t0) else { panic!("held") };
    r.proof = Some("00000000000000ba.proof".into());
    let e = Event::Result(r);
    s.apply(&e);
    log.push(e);
    assert!(!s.ledger.to_reprove().contains(&u), "its proof is on the way");
    assert_eq!(s.next_proof().map(|p| p.worker), Some(h.clone()));
    let e = Event::Distrust { worker: h.clone(), reason: "its proof does not check".into() };
    s.apply(&e);
    log.push(e);
    assert_eq!(s.take_dropped_proofs(), vec!["00000000000000ba.proof".to_string()], "the refused proof may go");
    let honest = s.register("33", "honest", 1, t0).unwrap();
    assert!(matches!(s.lease(&honest, 0, t0), LeaseOutcome::Unit(q, _, 0) if q == u), "to be proved again");
    let mut again = certified_split_at(0);
    again.replay(&log);
    assert!(again.ledger.to_reprove().contains(&u), "also after a restart");
}

/// A unit to be proved again is not done with: a restart keeps the grant of the worker
/// proving it again, which adopts it (a review found its hours of search cut off).
#[test]
fn a_unit_to_prove_again_keeps_its_grants_at_a_restart() {
    let (mut s, u, log) = a_unit_to_prove_again();
    let t0 = s.since;
    let w = s.register("22", "reprover", 1, t0).unwrap();
    let LeaseOutcome::Unit(q, kw, 0) = s.lease(&w, 0, t0) else { panic!("the unit to prove again") };
    assert_eq!(q, u);
    let grants = s.take_grants();
    let mut s2 = certified_split_at(0);
    s2.replay(&log);
    assert!(!s2.done_with(&u), "to be proved again");
    let open: Vec<Grant> = grants.into_iter().filter(|g| !s2.done_with(&g.unit)).collect();
    s2.granted_earlier(open);
    let t1 = s2.since;
    assert_eq!(s2.register("22", "reprover", 1, t1).unwrap(), w);
    assert!(s2.heartbeat(&w, u, kw, 100, t1 + Duration::from_secs(1)), "adopted");
}

/// Throwaway identities that lease a unit and let it go (released, distrusted, silent)
/// leave no grant behind, in memory or for the state's index (a review grew one unit's
/// grants by one per identity, without bound).
#[test]
fn identities_that_let_a_unit_go_leave_no_grants_behind() {
    let mut s = one_unit(CheckPolicy::DEFAULT);
    let t0 = s.since;
    let mut index = std::collections::HashSet::new();
    let record = |s: &mut Scheduler, index: &mut std::collections::HashSet<(Question, String)>| {
        for g in s.take_grants() {
            index.insert((g.unit, g.worker));
        }
        for (q, w) in s.take_revoked_grants() {
            index.remove(&(q, w));
        }
    };
    let mut u = None;
    for i in 0..50 {
        let w = s.register(&format!("{i:016x}"), "x", 1, t0).unwrap();
        let (q, _) = unit(&mut s, &w, 0, t0);
        if i % 2 == 0 {
            assert_eq!(s.release(&w, &[q]), 1);
            s.leave(&w);
        } else {
            s.apply(&Event::Distrust { worker: w.clone(), reason: "r".into() });
        }
        record(&mut s, &mut index);
        u = Some(q);
    }
    let u = u.unwrap();
    assert!(s.units.get(&u).unwrap().grants.is_empty() && index.is_empty(), "{index:?}");
    // One that holds it keeps its grant until it goes silent for three lease periods.
    let w = s.register("ffffffffffffffff", "x", 1, t0).unwrap();
    unit(&mut s, &w, 0, t0);
    record(&mut s, &mut index);
    assert_eq!(index.len(), 1);
    s.expire(t0 + Duration::from_secs(10));
    record(&mut s, &mut index);
    assert_eq!(index.len(), 1, "its lease expired; its late answer still counts");
    s.expire(t0 + Duration::from_secs(31));
    record(&mut s, &mut index);
    assert!(s.units.get(&u).unwrap().grants.is_empty() && index.is_empty(), "{index:?}");
    // A recorded first holder that lets its unit go is no longer kept the unit for.
    let mut s = scheduler_of("4x6", DECISIVE_ONLY);
    let t0 = s.since;
    let x = s.register("77", "x", 1, t0).unwrap();
    let open: Vec<Question> = {
        s.refresh();
        s.frontier.open.iter().map(|(q, _)| *q).collect()
    };
    s.granted_earlier(grants(&open, &[(0, &x, 4, true)]));
    assert!(s.heartbeat(&x, open[0], 4, 100, t0) && s.units.is_reserved(&open[0]));
    assert_eq!(s.release(&x, &[open[0]]), 1);
    assert!(!s.units.is_reserved(&open[0]));
    assert_eq!(s.take_revoked_grants(), vec![(open[0], x)]);
}

/// An answer on a unit that decides the root is verified whoever sends it: the first
/// holder's agreeing answer after a late attempt's (or a backup's) is a duplicate, so two
/// identities of one client cannot pass a lie on the draw (a review showed 4x6 answered
/// wrong when the first holder's answer stood in for the late one's verification).
#[test]
fn a_lie_on_a_decisive_unit_is_verified_whatever_identities_send_it() {
    let truth_root = oracle().solve(&Board::parse("4x6").unwrap(), Mode::Nimber).unwrap();
    let mut s = one_unit(DECISIVE_ONLY);
    let t0 = s.since;
    let a = s.register("aa", "a", 1, t0).unwrap();
    let b = s.register("bb", "b", 1, t0).unwrap();
    let (u, ka) = unit(&mut s, &a, 0, t0);
    assert!(s.frontier.decisive.contains(&u), "the unit decides the root");
    let t1 = t0 + Duration::from_secs(11);
    assert!(s.expire(t1).contains(&(u, a.clone())));
    let LeaseOutcome::Unit(again, kb, _) = s.lease(&b, 0, t1) else { panic!("b gets the unit") };
    assert_eq!(again, u);
    assert!(verified(&submit_at(&mut s, sub(&a, u, ka, lie(u), true, 10), t1).0), "the late attempt's lie");
    assert!(matches!(submit_at(&mut s, sub(&b, u, kb, lie(u), true, 10), t1).0, Verdict::Ignore(_)));
    assert!(s.answer().is_none(), "the answer waits for the verification");
    let found = search_all(&mut s);
    assert!(found.iter().any(|e| matches!(e, Event::Distrust { worker, .. } if *worker == a)), "{found:?}");
    while let LeaseOutcome::Unit(q, k, _) = s.lease(&b, 0, t1) {
        submit_at(&mut s, sub(&b, q, k, truth(q), true, 10), t1);
        search_all(&mut s);
    }
    assert_eq!(s.answer(), Some(truth_root));
}
