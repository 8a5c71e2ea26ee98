//! Hostile clients against a real coordinator process, each attack of issue 18 tried
//! again: the cluster ends with the published value or a clear refusal. The hostile client
//! speaks the protocol from this test process (tests/common/client.rs); honest workers are
//! real `cram worker` processes.

mod common;

use common::client::{truth_and_lie, Oracle, ProtoClient};
use common::*;
use cram_proto::pb;
use std::time::{Duration, Instant};
use tonic::Code;

/// A worker's results in the log.
fn results_of(state: &std::path::Path, worker: &str) -> usize {
    results(state).iter().filter(|r| r["worker"] == worker).count()
}

/// Impersonation and identities that cost nothing (attacks 1 and 2): a client learns the
/// honest worker's id and units from the status, and sends a false exact value for the
/// honest worker's unit and for the root's region, under two identities of its own; it
/// sends calls without a secret and with a secret nobody registered. Nothing of it counts,
/// nobody is disconnected but by its own doing, and 5x7 ends *1 as published.
#[test]
fn impersonation_and_identities_of_its_own_change_nothing() {
    let dir = scratch("impersonate");
    let state = dir.join("state");
    let job = "5x7";
    let want = engine(&[job], &[]);
    // A unit budget large enough that the honest worker is on one unit for a while.
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "1"]);
    let (mut honest, _) = start_worker(&dir, &c.url, &["--name", "honest"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (honest_id, tried) = rt.block_on(async {
        // The honest worker's id and a unit it holds, as anyone may read them.
        let started = Instant::now();
        let mut status = cram_proto::connect(&c.url, None, None).await.unwrap();
        let (id, unit_id) = loop {
            let json = status.status(pb::StatusRequest {}).await.unwrap().into_inner().json;
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let w = v["workers"].as_array().and_then(|ws| ws.iter().find(|w| w["name"] == "honest").cloned());
            if let Some(unit) =
                w.as_ref().and_then(|w| w["units"].as_array()?.first()?["id"].as_str().map(str::to_string))
            {
                break (w.unwrap()["id"].as_str().unwrap().to_string(), unit);
            }
            assert!(started.elapsed() < Duration::from_secs(PATIENCE), "the honest worker took no unit");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let question: cram_engine::Question = unit_id.parse().unwrap();
        let fake_unit = pb::Unit {
            unit_id: unit_id.clone(),
            attempt: 1,
            region: Some(cram_proto::region_to_pb(&question.region)),
            query: Some(cram_proto::query_to_pb(question.query)),
            ..Default::default()
        };
        let (_, lie) = truth_and_lie(&fake_unit, u64::MAX).unwrap();
        let board = cram_engine::Board::parse(job).unwrap();
        let root = cram_engine::Question::nimber(cram_engine::solver::board_regions(&board).0[0]);
        let root_unit = pb::Unit {
            unit_id: root.to_string(),
            region: Some(cram_proto::region_to_pb(&root.region)),
            ..fake_unit.clone()
        };
        let mut tried = 0;
        // Two identities of its own, both claiming the same false values.
        for name in ["mallory", "mallory-too"] {
            let mut m = ProtoClient::new(&c.url, name);
            m.register(PATIENCE).await.unwrap();
            for (target, facts) in [(&fake_unit, lie), (&root_unit, cram_engine::Facts::exact(0))] {
                for attempt in 1..=3 {
                    let unit = pb::Unit { attempt, ..target.clone() };
                    let reply = m.submit(&unit, &target.unit_id, facts, Vec::new()).await;
                    assert!(reply.as_ref().is_ok_and(|r| !r.recorded), "{name} on {}: {reply:?}", target.unit_id);
                    tried += 1;
                }
            }
        }
        // No secret: refused; a secret nobody registered: unknown.
        let mut anon = cram_proto::connect(&c.url, None, None).await.unwrap();
        let e = anon.lease(pb::LeaseRequest { slot: 0 }).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        let mut forged = ProtoClient::with_secret(&c.url, "honest", &"0".repeat(64));
        let e = forged.client.lease(pb::LeaseRequest { slot: 0 }).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
        (id, tried)
    });
    assert_eq!(tried, 12);
    assert_eq!(result_of(c, 600), want[job].clone(), "the published value");
    assert!(wait(&mut honest, PATIENCE, "honest worker").success());
    assert!(distrusted(&state).is_empty(), "nobody was disconnected: {:?}", distrusted(&state));
    assert!(results_of(&state, &honest_id) > 0);
    let strangers: Vec<_> = results(&state).into_iter().filter(|r| r["worker"] != honest_id.as_str()).collect();
    assert!(strangers.iter().all(|r| r["worker"] == "coordinator"), "results of others: {strangers:?}");
}

/// A client that answers honestly at first and then lies on everything it is given
/// (attacks 3 and 4): trust is not bought, the results it is given are verified by the
/// coordinator's secret draw (one in two here) and always when they decide a first move;
/// the first lie found disconnects it and discards everything it sent. 5x8 ends *1.
#[test]
fn honest_answers_buy_nothing_and_a_liar_cannot_dodge_the_draw() {
    let dir = scratch("turncoat");
    let state = dir.join("state");
    let job = "5x8";
    let want = engine(&[job], &[]);
    // Split deep, for many units; one honest worker, so that the turncoat gets its share.
    let c = start_coordinator(&dir, &state, job, &["--check-one-in", "2", "--split-depth", "3"]);
    let workers: Vec<_> = (0..1).map(|i| start_worker(&dir, &c.url, &["--name", &format!("w{i}")]).0).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut m = ProtoClient::new(&c.url, "turncoat");
    let id = m.id();
    let (honest, lies, out) = rt.block_on(async {
        m.register(PATIENCE).await.unwrap();
        let (mut honest, mut lies, mut oracle) = (0, 0, Oracle::default());
        loop {
            let unit = match m.unit().await {
                Ok(Some(u)) => u,
                Ok(None) => return (honest, lies, false),
                Err(e) if e.code() == Code::PermissionDenied => return (honest, lies, true),
                Err(e) => panic!("{e}"),
            };
            let Some((right, wrong)) = oracle.truth_and_lie(&unit, u64::MAX) else { continue };
            let facts = if honest < 3 { right } else { wrong };
            match m.submit(&unit, &unit.unit_id, facts, Vec::new()).await {
                Ok(_) if honest < 3 => honest += 1,
                Ok(_) => lies += 1,
                Err(e) if e.code() == Code::PermissionDenied => return (honest, lies, true),
                Err(e) if e.code() == Code::InvalidArgument => lies += 1,
                Err(e) => panic!("{e}"),
            }
        }
    });
    assert_eq!(result_of(c, 900), want[job].clone(), "the published value");
    for mut w in workers {
        assert!(wait(&mut w, PATIENCE, "worker").success());
    }
    assert_eq!(honest, 3);
    assert!(out && lies >= 1, "the turncoat was not caught ({lies} lies)");
    assert_eq!(distrusted(&state), vec![id.clone()]);
    // A replay holds nothing of it: its honest results went with its lies.
    let log = events(&state);
    let distrust_at = log.iter().position(|e| e["event"] == "distrust").unwrap();
    assert!(log[distrust_at..].iter().all(|e| e["worker"] != id.as_str() || e["event"] == "distrust"));
}

/// The log sealed (attack 6): a finished job's state, then one flipped character in the
/// answer, one in a result's facts, the log cut in its middle, the log emptied: each stops
/// the coordinator with exit code 3 naming the line, without touching the state; put back,
/// the same state prints the published value again.
#[test]
fn a_damaged_log_stops_the_coordinator_and_the_answer_is_rederived() {
    let dir = scratch("sealed");
    let state = dir.join("state");
    let job = "5x6";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &[]);
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    let log = state.join("events.jsonl");
    let whole = std::fs::read_to_string(&log).unwrap();
    let refused = |damaged: &str, what: &str| {
        std::fs::write(&log, damaged).unwrap();
        let o = coordinator_once(&state, job, &[]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{what}: {err}");
        assert!(err.contains("damaged at line"), "{what}: {err}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), damaged, "{what}: the log was changed");
    };
    let lines: Vec<&str> = whole.lines().collect();
    let done = lines.iter().position(|l| l.contains("\"event\":\"done\"")).unwrap();
    let nimber = want[job].1.as_u64().unwrap();
    let flip = |i: usize, from: &str, to: &str| {
        let mut ls: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        assert!(ls[i].contains(from), "{}", ls[i]);
        ls[i] = ls[i].replacen(from, to, 1);
        ls.join("\n") + "\n"
    };
    refused(&flip(done, &format!("\"nimber\":{nimber}"), &format!("\"nimber\":{}", nimber ^ 2)), "the answer");
    let result = lines.iter().position(|l| l.contains("\"event\":\"result\"") && l.contains("\"upper\":")).unwrap();
    let upper = lines[result].split("\"upper\":").nth(1).unwrap().split(',').next().unwrap();
    let other = if upper == "0" { "1" } else { "0" };
    refused(&flip(result, &format!("\"upper\":{upper},"), &format!("\"upper\":{other},")), "a result's facts");
    let half = whole[..whole.len() / 2].rfind('\n').unwrap() + 1;
    refused(&whole[..half], "the log cut at a line's end");
    refused(&whole[..half + 5], "the log cut in a line");
    refused("", "the log emptied");
    std::fs::write(&log, &whole).unwrap();
    let o = coordinator_once(&state, job, &["--json", "--linger-secs", "0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(answer_of(&o.stdout), want[job].clone());
    // What is logged while the coordinator lingers after its answer (late results, a
    // verification that distrusts the worker whose results it rested on) is not what the
    // answer rests on: the restart still prints it.
    let first: cram_coordinator::events::Event = serde_json::from_str(lines[0]).unwrap();
    let cram_coordinator::events::Event::Job(record) = first else { panic!("{}", lines[0]) };
    let worker = results(&state)[0]["worker"].as_str().unwrap().to_string();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (mut store, _) = cram_coordinator::store::Store::open(&state, &record).unwrap();
        let late = cram_coordinator::events::Event::Distrust { worker, reason: "found wrong after the answer".into() };
        store.append(&late).await.unwrap();
    });
    let o = coordinator_once(&state, job, &["--json", "--linger-secs", "0"]);
    assert!(o.status.success(), "events after the answer: {}", text(&o.stderr));
    assert_eq!(answer_of(&o.stdout), want[job].clone());
}

/// Messages too large or absurd (the denial of service of issue 18): a call other than a
/// result is refused past 1 MiB as it is read (a result of the same size is read, and
/// refused for what it says); a result carrying
/// 20,000 shared facts is refused whole; unfinished results that searched nothing are
/// struck, three and the client is disconnected; node counts of u64::MAX are cut. The job
/// ends with the published value.
#[test]
fn oversized_and_absurd_results_are_refused() {
    let dir = scratch("flood");
    let state = dir.join("state");
    let job = "4x9";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &["--share-min-cells", "10"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut m = ProtoClient::new(&c.url, "flood");
    rt.block_on(async {
        m.register(PATIENCE).await.unwrap();
        let long = "x".repeat(2 << 20);
        let progress = vec![pb::UnitProgress { unit_id: long.clone(), ..Default::default() }];
        let e = m.client.heartbeat(pb::HeartbeatRequest { units: progress }).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
        assert!(e.message().contains("a call may be at most"), "{e}");
        let e = m.client.submit(pb::SubmitRequest { unit_id: long, ..Default::default() }).await.unwrap_err();
        assert!(e.code() == Code::InvalidArgument && e.message().contains("names no question"), "{e:?}");
        let unit = m.unit().await.unwrap().expect("a unit");
        let region = cram_proto::region_from_pb(unit.region.as_ref()).unwrap();
        let fact = cram_engine::SharedFact { region, facts: cram_engine::Facts::UNKNOWN, nodes: 1 };
        let many = vec![cram_proto::shared_to_pb(&fact); 20_000];
        let (right, _) = truth_and_lie(&unit, u64::MAX).unwrap();
        let e = m.submit(&unit, &unit.unit_id, right, many).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        assert!(e.message().contains("shared facts"), "{e}");
        // Unfinished at once, claiming the whole budget and more nodes than a u64 sums.
        let mut codes = Vec::new();
        for _ in 0..3 {
            let unit = m.unit().await.unwrap().expect("a unit");
            let req = pb::SubmitRequest {
                unit_id: unit.unit_id.clone(),
                attempt: unit.attempt,
                region: unit.region.clone(),
                facts: None,
                finished: false,
                nodes: u64::MAX,
                ..Default::default()
            };
            codes.push(m.client.submit(req).await.unwrap_err().code());
        }
        assert_eq!(codes, [Code::InvalidArgument, Code::InvalidArgument, Code::PermissionDenied]);
    });
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    assert_eq!(distrusted(&state), vec![m.id()]);
    assert!(results(&state).iter().all(|r| r["nodes"].as_u64().unwrap() <= 1 << 48));
}

/// Splits bought with identities (the review's third item): five identities of one client
/// each send as many unfinished results as the coordinator takes, claiming the budget. The
/// job splits 256 units and no more, whoever asks (each identity alone could split 64);
/// then units go out to be searched whole (an unfinished result of one is refused as
/// absurd), and an honest worker ends 5x7 with the published value, nobody distrusted.
#[test]
fn splits_bought_with_free_identities_are_bounded_per_job() {
    let dir = scratch("splits");
    let state = dir.join("state");
    let job = "5x7";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &["--unit-nodes", "1000"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (split, refused, whole) = rt.block_on(async {
        let (mut split, mut refused) = (0, Vec::new());
        for name in ["s1", "s2", "s3", "s4", "s5"] {
            let mut m = ProtoClient::new(&c.url, name);
            m.register(PATIENCE).await.unwrap();
            loop {
                let unit = m.unit().await.unwrap().expect("a unit");
                let req = pb::SubmitRequest {
                    unit_id: unit.unit_id.clone(),
                    attempt: unit.attempt,
                    region: unit.region.clone(),
                    finished: false,
                    nodes: unit.node_budget,
                    ..Default::default()
                };
                match m.client.submit(req).await {
                    Ok(r) if r.get_ref().recorded => split += 1,
                    Ok(_) => {}
                    Err(e) => {
                        refused.push(e.message().to_string());
                        break;
                    }
                }
            }
        }
        // What a unit is leased with now: no budget.
        let mut m = ProtoClient::new(&c.url, "later");
        m.register(PATIENCE).await.unwrap();
        let whole = m.unit().await.unwrap().expect("a unit").node_budget;
        (split, refused, whole)
    });
    assert_eq!(split, 256, "refusals: {refused:?}");
    assert!(refused.iter().any(|r| r.contains("searched whole")), "{refused:?}");
    assert_eq!(whole, 0, "units are searched whole");
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 600), want[job].clone(), "the published value");
    assert!(wait(&mut w, PATIENCE, "worker").success());
    assert!(distrusted(&state).is_empty(), "nobody was distrusted: {:?}", distrusted(&state));
}

/// A certified 5x6 job against client `name`, which sends a finished result on a unit (the
/// right answer, or a lie when `lie`) with `proof`: the result is recorded, then the
/// proof's check disconnects the client. With `no_proof_first`, the client first sends a
/// result without a proof, which is refused (a strike). An honest worker then ends the job
/// with the published value; the client alone is distrusted, for a reason containing
/// `reason`, and the certificate written at the end checks and proves the value.
/// `extra`: more arguments of the coordinator.
fn a_certified_job_finds_out(
    name: &str,
    lie: bool,
    proof: Vec<u8>,
    reason: &str,
    no_proof_first: bool,
    extra: &[&str],
) {
    let dir = scratch(name);
    let state = dir.join("state");
    let cert = dir.join("job.cert");
    let job = "5x6";
    let want = engine(&[job], &[]);
    let cert_arg = cert.display().to_string();
    let c = start_coordinator(&dir, &state, job, &[&["--certificate", cert_arg.as_str()], extra].concat());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut m = ProtoClient::new(&c.url, name);
    let id = m.id();
    let out = rt.block_on(async {
        m.register(PATIENCE).await.unwrap();
        if no_proof_first {
            let unit = m.unit().await.unwrap().expect("a unit");
            let (right, _) = truth_and_lie(&unit, u64::MAX).unwrap();
            let e = m.submit(&unit, &unit.unit_id, right, Vec::new()).await.unwrap_err();
            assert!(e.code() == Code::InvalidArgument && e.message().contains("proof"), "{e}");
        }
        let unit = m.unit().await.unwrap().expect("a unit");
        let (right, wrong) = truth_and_lie(&unit, u64::MAX).unwrap();
        let req = pb::SubmitRequest {
            unit_id: unit.unit_id.clone(),
            attempt: unit.attempt,
            region: unit.region.clone(),
            facts: Some(cram_proto::facts_to_pb(if lie { wrong } else { right })),
            finished: true,
            nodes: 1000,
            proof,
            ..Default::default()
        };
        assert!(m.client.submit(req).await.unwrap().into_inner().recorded);
        m.disconnected_within(PATIENCE).await
    });
    assert!(out, "a proof that does not check, or does not show its answer, disconnects its worker");
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    assert_eq!(distrusted(&state), vec![id]);
    let why = events(&state).into_iter().find(|e| e["event"] == "distrust").unwrap()["reason"].to_string();
    assert!(why.contains(reason), "{why}");
    let o = cram(&["check", &cert.display().to_string(), "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(v["nimber"], want[job].1);
}

/// In a certified job a result counts only with a proof that checks: a client that sends
/// no proof is struck, and one that sends the right answer with a proof that is none is
/// disconnected when it is checked.
#[test]
fn in_a_certified_job_a_result_counts_only_with_a_proof_that_checks() {
    a_certified_job_finds_out("unproved", false, b"not a proof".to_vec(), "proof", true, &[]);
}

/// In a certified job a proof must show what its result answers, not only hold true facts:
/// a client that answers its unit falsely with a proof of no facts (a proof that checks,
/// having nothing to check) is disconnected when that proof is checked.
#[test]
fn in_a_certified_job_a_proof_must_show_the_answer_it_comes_with() {
    let mut solver = cram_engine::Solver::new(&cram_engine::Config::default(), Default::default());
    let empty = cram_engine::proof::Prover::new(&mut solver, 12).export();
    a_certified_job_finds_out("beside", true, empty, "does not show its answer", false, &[]);
}

/// A proof's memory is bounded before it is read: a client sends the right answer with a
/// proof of 600,000 well-formed facts (strips of random lengths and values, with random
/// replies: 2.9 MB sent, 6.9 MB decompressed, compressing no better than real proofs), more
/// than fit the 64 MiB the coordinator's checks may take (`--proof-memory-mb 64`: a quarter
/// for facts of 64 bytes, 262,144); it is refused unread, its worker distrusted, and the
/// job ends with the published value.
#[test]
fn a_proof_larger_than_the_checks_memory_is_refused_unread() {
    let mut raw = Vec::new();
    let facts = 600_000;
    cram_certificate::varint::put(&mut raw, facts);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    for _ in 0..facts {
        let w = 2 + next(40) as u8;
        raw.extend_from_slice(&[1, w]);
        cram_certificate::varint::put(&mut raw, (1u128 << w) - 1);
        raw.push(next(w as u64 / 2 + 1) as u8);
        raw.push(2);
        for _ in 0..4 {
            cram_certificate::varint::put(&mut raw, next(w as u64 - 1) as u128);
        }
    }
    let proof = zstd::bulk::compress(&raw, 3).unwrap();
    assert!(raw.len() < (64 << 20) / 8 && proof.len() * 16 > raw.len(), "{} bytes, {} sent", raw.len(), proof.len());
    let memory = ["--proof-memory-mb", "64"];
    a_certified_job_finds_out("huge-proof", false, proof, "MiB a proof may take", false, &memory);
}

/// Shared facts a job did not ask for are dropped unread: with sharing off (the default)
/// any, with sharing on those about regions no smaller than the unit's. A fact about a
/// 99-cell region, which the coordinator could not verify in any time, does not hold up its
/// one check thread, and the job ends with the published value. (With sharing on, such a
/// fact used to take the only check thread for ever: the verifications the answer waits for
/// never ran.)
#[test]
fn shared_facts_the_job_did_not_ask_for_are_dropped() {
    let job = "5x6";
    let want = engine(&[job], &[]);
    let sharing_on = ["--check-threads", "1", "--share-min-cells", "20", "--share-min-nodes", "1"];
    for (name, args) in [("unasked", &["--check-threads", "1"][..]), ("unasked-sharing", &sharing_on[..])] {
        let dir = scratch(name);
        let state = dir.join("state");
        let c = start_coordinator(&dir, &state, job, args);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let _in_runtime = rt.enter();
        let mut m = ProtoClient::new(&c.url, name);
        rt.block_on(async {
            m.register(PATIENCE).await.unwrap();
            let unit = m.unit().await.unwrap().expect("a unit");
            let huge = cram_engine::region::AnyRegion::from_dense(10, 10, ((1u128 << 100) - 1) & !1).unwrap();
            let fact = cram_engine::SharedFact { region: huge, facts: cram_engine::Facts::UNKNOWN, nodes: 1 << 40 };
            let (right, _) = truth_and_lie(&unit, u64::MAX).unwrap();
            let reply = m.submit(&unit, &unit.unit_id, right, vec![cram_proto::shared_to_pb(&fact); 4]).await;
            assert!(reply.is_ok_and(|r| r.recorded));
        });
        let (mut w, _) = start_worker(&dir, &c.url, &[]);
        assert_eq!(result_of(c, PATIENCE), want[job].clone(), "{name}");
        assert!(wait(&mut w, PATIENCE, "worker").success());
        let huge = cram_engine::region::AnyRegion::from_dense(10, 10, ((1u128 << 100) - 1) & !1).unwrap().key();
        let too_large = |f: &serde_json::Value| f[0].as_str() == Some(huge.as_str());
        assert!(
            results(&state).iter().all(|r| r["shared"].as_array().is_none_or(|a| !a.iter().any(too_large))),
            "{name}: the 99-cell fact was logged"
        );
    }
}

/// A worker that shares a true fact (verified by the coordinator, then loaded by an honest
/// worker) and afterwards lies takes down only its own answers: the honest worker's results
/// searched with the fact in its tables stay, no unit is solved twice, and 4x11 ends with the
/// engine's value. (Before 2026-12-07 the fact's origin falling discarded every result that
/// loaded it and made the honest worker drop its tables, cache and units under way.)
#[test]
fn a_liar_whose_true_facts_were_loaded_takes_no_honest_work_down() {
    use cram_engine::{Config, DbSet, Facts, Solver};
    let dir = scratch("mole");
    let state = dir.join("state");
    let job = "4x11";
    let want = engine(&[job], &[]);
    // Every result verified (the lie below is caught for sure); facts of regions of 20 cells
    // or more shared (verified on one of two check threads); leases that outlast the
    // test (the client sends no heartbeats).
    let args = [
        "--check-one-in",
        "1",
        "--share-min-cells",
        "20",
        "--share-min-nodes",
        "10000",
        "--lease-secs",
        "900",
        "--check-threads",
        "2",
    ];
    let c = start_coordinator(&dir, &state, job, &args);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut mole = ProtoClient::new(&c.url, "mole");
    mole.register.threads = 2;
    let id = mole.id();
    // Two units: one answered truly, with a true fact; one held, to lie about later (the
    // lie made now, so that it goes in at once: the job may not last long after).
    let (first, held) = rt.block_on(async {
        mole.register(PATIENCE).await.unwrap();
        let first = mole.unit().await.unwrap().expect("a unit");
        let held = match mole.client.lease(pb::LeaseRequest { slot: 1 }).await.unwrap().into_inner().reply {
            Some(pb::lease_reply::Reply::Unit(u)) => u,
            other => panic!("no second unit: {other:?}"),
        };
        (first, held)
    });
    let (_, wrong) = truth_and_lie(&held, u64::MAX).unwrap();
    let region = cram_proto::region_from_pb(first.region.as_ref()).unwrap();
    let mut solver = Solver::new(&Config { tt_bytes: 64 << 20, pairing: true }, std::sync::Arc::new(DbSet::default()));
    let target = cram_engine::options::options(&region)
        .into_iter()
        .flat_map(|c| c.regions)
        .find(|r| r.cells() >= 20 && solver.settled_value(r).is_none())
        .expect("an option with a large region");
    let fact = cram_engine::SharedFact {
        region: target,
        facts: Facts::exact(solver.nimber(target).unwrap()),
        nodes: 1_000_000,
    };
    let (right, _) = truth_and_lie(&first, u64::MAX).unwrap();
    let reply = rt.block_on(mole.submit(&first, &first.unit_id, right, vec![cram_proto::shared_to_pb(&fact)])).unwrap();
    assert!(reply.recorded);
    // An honest worker is handed the fact (once the coordinator verified it) and answers
    // the unit it leased with it.
    let (mut honest, _) = start_worker(&dir, &c.url, &["--name", "honest"]);
    let honest_results =
        || results(&state).iter().filter(|r| r["worker"].as_str().unwrap().starts_with("honest#")).count();
    let mut before = None;
    wait_for("the fact handed out and a result searched with it", PATIENCE, || {
        match before {
            None if status_now(&c.url)["units"]["facts_handed_out"].as_u64() >= Some(1) => {
                before = Some(honest_results())
            }
            Some(n) => return honest_results() > n,
            None => {}
        }
        false
    });
    // Then the lie, caught by the coordinator's search (every result is verified, and the
    // answer waits for the verifications): the mole is disconnected.
    let caught = rt.block_on(async {
        // Recorded, or refused for contradicting facts held (then the search decides too).
        let _ = mole.submit(&held, &held.unit_id, wrong, Vec::new()).await;
        mole.disconnected_within(PATIENCE).await
    });
    assert!(caught, "the lie did not disconnect the mole");
    assert_eq!(result_of(c, 300), want[job].clone(), "the answer is the engine's");
    assert!(wait(&mut honest, PATIENCE, "honest worker").success());
    assert_eq!(distrusted(&state), vec![id]);
    no_unit_solved_twice(&state);
}

/// A client that holds a unit with heartbeats faking progress does not hold the job: once
/// it has held the unit for four lease periods, an honest worker with nothing else to do is
/// given it as a backup, and 5x6 (one unit, not split) ends with the published value. Before
/// backups the job never ended.
#[test]
fn a_staller_faking_progress_does_not_hold_the_job() {
    let dir = scratch("staller");
    let state = dir.join("state");
    let job = "5x6";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "0", "--lease-secs", "1"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut staller = ProtoClient::new(&c.url, "staller");
    let u = rt.block_on(async {
        staller.register(PATIENCE).await.unwrap();
        staller.unit().await.unwrap().expect("a unit")
    });
    // Heartbeats with nodes rising slowly (never near the unit's budget), five a second,
    // until the coordinator says the job is done or goes away.
    let mut client = staller.client.clone();
    let unit_id = u.unit_id.clone();
    let beats = rt.spawn(async move {
        let mut nodes = 0;
        loop {
            nodes += 1000;
            let progress = pb::UnitProgress { unit_id: unit_id.clone(), attempt: u.attempt, nodes };
            match client.heartbeat(pb::HeartbeatRequest { units: vec![progress] }).await {
                Ok(r) if !r.get_ref().done => tokio::time::sleep(Duration::from_millis(200)).await,
                _ => return nodes,
            }
        }
    });
    let (mut honest, _) = start_worker(&dir, &c.url, &["--name", "honest"]);
    assert_eq!(result_of(c, 300), want[job].clone(), "the answer is the engine's");
    assert!(wait(&mut honest, PATIENCE, "honest worker").success());
    beats.abort();
    let answered_by = |r: &serde_json::Value| r["worker"].as_str().unwrap().starts_with("honest#");
    assert!(
        results(&state).iter().any(|r| r["unit"] == u.unit_id.as_str() && answered_by(r)),
        "the backup answered it"
    );
    assert!(distrusted(&state).is_empty());
}

/// In a certified job every accepted result's proof is written to STATE/proofs before it
/// is checked; those no check passed are deleted once their worker is distrusted, so that
/// throwaway identities sending junk proofs (up to 512 MiB each) do not fill the
/// coordinator's disk (a review found them all still there after the job).
#[test]
fn junk_proofs_are_deleted_with_their_distrusted_workers() {
    let dir = scratch("junk-proofs");
    let state = dir.join("state");
    let cert = dir.join("job.cert");
    let job = "5x6";
    let want = engine(&[job], &[]);
    let cert_arg = cert.display().to_string();
    let c = start_coordinator(&dir, &state, job, &["--certificate", cert_arg.as_str(), "--split-depth", "2"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let junk_size: usize = 1 << 20;
    let (recorded, ids) = rt.block_on(async {
        let (mut recorded, mut ids) = (0usize, Vec::new());
        for i in 0..3 {
            let mut m = ProtoClient::new(&c.url, &format!("junk{i}"));
            m.register.threads = 4;
            m.register(PATIENCE).await.unwrap();
            ids.push(m.id());
            let mut units = Vec::new();
            for slot in 0..4 {
                if let Ok(r) = m.client.lease(pb::LeaseRequest { slot }).await {
                    if let Some(pb::lease_reply::Reply::Unit(u)) = r.into_inner().reply {
                        units.push(u);
                    }
                }
            }
            for (k, unit) in units.iter().enumerate() {
                let (right, _) = truth_and_lie(unit, u64::MAX).unwrap();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (i * 16 + k) as u64;
                let junk: Vec<u8> = (0..junk_size)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed as u8
                    })
                    .collect();
                let req = pb::SubmitRequest {
                    unit_id: unit.unit_id.clone(),
                    attempt: unit.attempt,
                    region: unit.region.clone(),
                    facts: Some(cram_proto::facts_to_pb(right)),
                    finished: true,
                    nodes: 1000,
                    proof: junk,
                    ..Default::default()
                };
                if m.client.submit(req).await.is_ok_and(|r| r.into_inner().recorded) {
                    recorded += 1;
                }
            }
            assert!(m.disconnected_within(PATIENCE).await, "junk{i} distrusted");
        }
        (recorded, ids)
    });
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    let mut gone = distrusted(&state);
    gone.sort();
    let mut ids_sorted = ids.clone();
    ids_sorted.sort();
    assert_eq!(gone, ids_sorted);
    let junk_files: Vec<u64> = walk(&state.join("proofs"))
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.len()))
        .filter(|&n| n == junk_size as u64)
        .collect();
    assert!(recorded > 0, "junk proofs were taken before their checks");
    assert!(junk_files.is_empty(), "{} junk proofs left in the state", junk_files.len());
    assert!(cert.exists(), "the certificate is written");
}
