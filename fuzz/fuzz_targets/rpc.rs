//! Every RPC message: decoded from any bytes and converted with the checks both sides apply,
//! then (requests) handed to a real scheduler as the coordinator's task would. Nothing
//! panics, whatever a client sends and in whatever order.
//!
//! Input: records of [kind, length, bytes…].
#![no_main]

use cram_coordinator::scheduler::{Caller, CheckPolicy, Scheduler};
use cram_coordinator::service::{progress_from_pb, registration_from_pb, submission_from_pb};
use cram_coordinator::top::Top;
use cram_engine::{Board, DbSet, Mode};
use cram_proto::pb;
use cram_proto::{
    done_from_pb, done_to_pb, facts_from_pb, query_from_pb, question_from_pb, region_from_pb, region_to_pb,
    shared_from_pb, shared_to_pb,
};
use libfuzzer_sys::fuzz_target;
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let board = Board::parse("3x7").expect("a board");
    let top = Top::new(&board, Mode::Nimber, false, Arc::new(DbSet::default()), 1, false);
    let mut sched =
        Scheduler::new(top, Mode::Nimber, Duration::from_secs(10), 1000, CheckPolicy { sample_one_in: 2, decisive: true }, false);
    let t0 = Instant::now();
    let keys = ["aaaa", "bbbb"];
    let workers = [sched.register(keys[0], "a", 2, t0).expect("new"), sched.register(keys[1], "b", 1, t0).expect("new")];
    let mut rest = data;
    let mut step = 0u32;
    while let [kind, len, tail @ ..] = rest {
        let n = (*len as usize).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        step += 1;
        let now = t0 + Duration::from_millis(u64::from(step) * 700);
        let which = (*kind as usize >> 4) % 2;
        let worker = &workers[which];
        // As the coordinator's task does: calls of a worker it does not know change nothing.
        if (1..=4).contains(&(kind % 12)) && sched.caller(keys[which], now) != Caller::Known(worker.clone()) {
            continue;
        }
        match kind % 12 {
            0 => {
                if let Ok(m) = pb::RegisterRequest::decode(bytes) {
                    if registration_from_pb(&m).is_ok() {
                        let _ = sched.register(keys[which], if m.name.is_empty() { "worker" } else { &m.name }, m.threads, now);
                    }
                }
            }
            1 => {
                if let Ok(m) = pb::LeaseRequest::decode(bytes) {
                    let _ = sched.lease(worker, m.slot, now);
                    for fact in sched.shared_for(worker, 16) {
                        assert!(fact.region.cells() > 0);
                    }
                }
            }
            2 => {
                if let Ok(m) = pb::HeartbeatRequest::decode(bytes) {
                    if let Ok(units) = progress_from_pb(&m.units) {
                        for (unit, attempt, nodes) in units {
                            let _ = sched.heartbeat(worker, unit, attempt, nodes, now);
                        }
                    }
                }
            }
            3 => {
                if let Ok(m) = pb::SubmitRequest::decode(bytes) {
                    if let Ok(mut s) = submission_from_pb(m) {
                        s.worker = worker.clone();
                        sched.submit_unlogged(&s, now);
                    }
                }
            }
            4 => {
                if let Ok(m) = pb::ReleaseRequest::decode(bytes) {
                    if let Ok(units) = m.unit_ids.iter().map(|id| question_from_pb(id)).collect::<Result<Vec<_>, _>>() {
                        sched.release(worker, &units);
                    }
                }
            }
            5 => {
                // What a worker reads: a lease reply and its unit.
                if let Ok(m) = pb::LeaseReply::decode(bytes) {
                    match m.reply {
                        Some(pb::lease_reply::Reply::Unit(u)) => {
                            let _ = (region_from_pb(u.region.as_ref()), query_from_pb(u.query.as_ref()));
                            for f in &u.shared {
                                if let Ok(l) = shared_from_pb(f) {
                                    assert_eq!(shared_from_pb(&shared_to_pb(&l)).expect("round trip"), l);
                                }
                            }
                        }
                        Some(pb::lease_reply::Reply::Done(d)) => {
                            if let Ok(a) = done_from_pb(&d) {
                                assert_eq!(done_from_pb(&done_to_pb(a)).expect("round trip"), a);
                            }
                        }
                        _ => {}
                    }
                }
            }
            6 => {
                if let Ok(m) = pb::Region::decode(bytes) {
                    if let Ok(r) = region_from_pb(Some(&m)) {
                        assert_eq!(region_from_pb(Some(&region_to_pb(&r))).expect("round trip"), r);
                    }
                }
            }
            7 => {
                if let Ok(m) = pb::Facts::decode(bytes) {
                    let _ = facts_from_pb(Some(&m));
                }
            }
            8 => {
                for (unit, worker) in sched.expire(now) {
                    assert!(unit.region.cells() > 0 && !worker.is_empty());
                }
            }
            9 => {
                if let Some(q) = sched.next_search(true) {
                    let value = bytes.first().copied().unwrap_or(0) % 8;
                    for e in sched.searched(q, cram_engine::Facts::exact(value), 1, 1) {
                        sched.apply(&e);
                    }
                }
            }
            10 => {
                let _ = (
                    pb::HeartbeatReply::decode(bytes),
                    pb::SubmitReply::decode(bytes),
                    pb::RegisterReply::decode(bytes),
                );
                let _ = (pb::StatusReply::decode(bytes), pb::ReleaseReply::decode(bytes));
            }
            _ => {
                let status = sched.status("3x7", Duration::from_secs(1), 0.0, now);
                let _ = serde_json::to_string(&status).expect("status serialises");
            }
        }
        // As the job does after each call, which records them in its state.
        for grant in sched.take_grants() {
            assert!(grant.unit.region.cells() > 0 && !grant.worker.is_empty());
        }
        let drained = sched.take_revoked_grants().len() + sched.take_dropped_proofs().len();
        assert!(drained < 1 << 20);
    }
    let _ = sched.answer();
});
