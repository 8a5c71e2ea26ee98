//! The cluster in this process (tests/harness): a real coordinator and real workers over
//! loopback gRPC. Answers in every mode and split agree with the engine; workers the
//! coordinator must refuse are refused.

mod harness;

use cram_coordinator::Split;
use cram_engine::Mode;
use cram_worker::WorkerError;
use harness::{engine, start_cluster, JobSpec};

/// Positions with several regions, holes, odd shapes and trivial ones, in both modes, with
/// and without pairing, at several splits and worker counts: the cluster's answer is the
/// engine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_answers_equal_the_engines() {
    let specs = [
        "3x11",
        "5x6",
        "4x7",
        "3x9",
        "2x12",
        "5x5",
        "4x6",
        "3x10",
        "1x20",
        "6x4",
        "4x5",
        "3x12",
        "....#..../....#..../....#....",
        "......#...../......#...../......#.....",
        "..#..../......./...#.../.......",
        "#....#/....../..##../....../#....#",
        ".........../.#.#.#.#.#./...........",
        "...../...../..#../...../.....",
        "......../.##..##./......../........",
        "..........#.../..........#.../...........##.",
        "1x31",
        "2x2",
        "3x3",
        "7x3",
    ];
    for (i, spec) in specs.iter().enumerate() {
        for pairing in [false, true] {
            for mode in [Mode::Nimber, Mode::Outcome] {
                let want = engine(spec, mode, pairing);
                // Each position at a few of the splits, so the whole runs in seconds.
                let splits =
                    [(Split::Depth(2), 50_000_000), (Split::Depth(1), 2_000), (Split::TargetUnits(40), 50_000_000)];
                let (split, unit_nodes) = splits[(i + pairing as usize + 2 * (mode == Mode::Outcome) as usize) % 3];
                let workers = 1 + i % 3;
                let job = JobSpec { mode, pairing, split, unit_nodes, ..JobSpec::new(spec) };
                let (finished, _) = start_cluster(&job, workers).await.finish(120).await;
                assert_eq!(finished.solution, want, "{spec} {mode:?} pairing {pairing} {split:?} {workers} workers");
            }
        }
    }
}

/// Workers with the wrong token, no token or another protocol are refused for good; the
/// job is answered by the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_the_coordinator_cannot_use_are_refused() {
    let job = JobSpec { token: Some("right-token".into()), ..JobSpec::new("5x6") };
    let mut c = start_cluster(&job, 0).await;
    c.add_worker("wrong-token", Some("wrong-token"), cram_proto::PROTOCOL_VERSION);
    c.add_worker("no-token", None, cram_proto::PROTOCOL_VERSION);
    c.add_worker("old", Some("right-token"), cram_proto::PROTOCOL_VERSION + 99);
    c.add_worker("good", Some("right-token"), cram_proto::PROTOCOL_VERSION);
    let (finished, workers) = c.finish(120).await;
    assert_eq!(finished.solution, engine("5x6", Mode::Nimber, true));
    for (i, w) in workers.iter().enumerate().take(3) {
        assert!(matches!(w, Err(WorkerError::Refused(_))), "worker {i}: {w:?}");
    }
    let Err(WorkerError::Refused(why)) = &workers[2] else { unreachable!() };
    assert!(why.contains(&format!("protocol {}", cram_proto::PROTOCOL_VERSION + 99)), "{why}");
    assert!(workers[3].as_ref().is_ok_and(|s| s.searched > 0), "{:?}", workers[3]);
}

/// The events of the log in `state`, one JSON value per line.
fn log_events(state: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(state.join("events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A nimber job started from an outcome job's state (`--import`), plain and certified: the
/// answer is the engine's, it begins with the outcome job's results, and no question the
/// outcome job answered is asked again (in a certified job the copied proofs are checked
/// again, and a result whose proof is missing is proved again). Started again with the same
/// import it takes nothing twice; a job that ran without it, or another position, is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nimber_job_starts_from_an_outcome_jobs_results() {
    // Odd by odd: no first move is settled by the half-turn pairing, so the outcome job's
    // answer rests on workers' results.
    let spec = "3x9";
    let want = engine(spec, Mode::Nimber, true);
    assert_ne!(want.nimber, Some(0), "the outcome job must leave the nimber open");
    for certificate in [None, Some(cram_engine::proof::DEFAULT_SMALL)] {
        let outcome = JobSpec { mode: Mode::Outcome, certificate, ..JobSpec::new(spec) };
        let first = start_cluster(&outcome, 2).await;
        let source = first.state.clone();
        let (done, _) = first.finish_keeping_state(120).await;
        assert_eq!(done.solution.outcome, want.outcome);
        let answered: std::collections::HashSet<String> = log_events(&source)
            .iter()
            .filter(|e| e["event"] == "result" && e["finished"] == true)
            .map(|e| e["unit"].as_str().unwrap().to_string())
            .collect();
        assert!(!answered.is_empty());
        if certificate.is_some() {
            // One proof lost with its machine: that unit is proved again.
            let proofs = source.join("proofs");
            let lost = std::fs::read_dir(&proofs).unwrap().next().unwrap().unwrap().path();
            std::fs::remove_file(lost).unwrap();
        }

        let nimber = JobSpec { certificate, import: Some(source.clone()), ..JobSpec::new(spec) };
        let second = start_cluster(&nimber, 2).await;
        let state = second.state.clone();
        let (done, _) = second.finish_keeping_state(120).await;
        assert_eq!(done.solution, want, "certificate {certificate:?}");
        let events = log_events(&state);
        assert_eq!(events[1]["event"], "imported");
        let taken = events[1]["results"].as_u64().unwrap() as usize;
        assert!(taken >= answered.len(), "{taken} results taken, {} units answered", answered.len());
        // The imported lines: results, each followed by its proof's check when it checked.
        let start = events.iter().position(|e| e["event"] == "start").unwrap();
        let unit_of = |e: &serde_json::Value| e["unit"].as_str().unwrap().to_string();
        let of_kind = |kind: &str| -> Vec<String> {
            events[2..start].iter().filter(|e| e["event"] == kind).map(unit_of).collect()
        };
        let (imported, proved) = (of_kind("result"), of_kind("proved"));
        assert!(!events.iter().any(|e| e["event"] == "distrust"), "nobody lied");
        assert_eq!(imported.len(), taken);
        let unproved: Vec<&String> = imported.iter().filter(|u| !proved.contains(u)).collect();
        let searched_again: Vec<String> = events[start..]
            .iter()
            .filter(|e| e["event"] == "result" && e["worker"] != "coordinator")
            .map(unit_of)
            .filter(|u| answered.contains(u))
            .collect();
        if certificate.is_some() {
            // The result whose proof was deleted (and any whose proof rests on its facts)
            // came without a proof; only those units are searched again.
            assert!(!unproved.is_empty() && !proved.is_empty(), "{} proved, {unproved:?} not", proved.len());
            assert!(
                searched_again.iter().all(|u| unproved.contains(&u)),
                "searched again: {searched_again:?}; imported without a proof: {unproved:?}"
            );
        } else {
            assert!(proved.is_empty() && searched_again.is_empty(), "asked again: {searched_again:?}");
        }

        // Started again on its state with the same import: the answer, nothing imported twice.
        let again = start_cluster(&JobSpec { state: Some(state.clone()), ..nimber.clone() }, 1).await;
        let (done, _) = again.finish_keeping_state(120).await;
        assert_eq!(done.solution, want);
        assert_eq!(log_events(&state).iter().filter(|e| e["event"] == "imported").count(), 1);
        std::fs::remove_dir_all(state.parent().unwrap()).unwrap();

        // A job that ran without the import, and another position, are refused.
        let plain = start_cluster(&JobSpec { certificate, ..JobSpec::new(spec) }, 1).await;
        let ran = plain.state.clone();
        plain.finish_keeping_state(120).await;
        let late = JobSpec { state: Some(ran.clone()), ..nimber.clone() };
        let e = start_cluster(&late, 0).await.coordinator_error(30).await;
        assert!(e.contains("--import is taken only when a job first starts"), "{e}");
        std::fs::remove_dir_all(ran.parent().unwrap()).unwrap();
        let other = JobSpec { certificate, import: Some(source.clone()), ..JobSpec::new("5x5") };
        let e = start_cluster(&other, 0).await.coordinator_error(30).await;
        assert!(e.contains("which is not 5x5"), "{e}");
        std::fs::remove_dir_all(source.parent().unwrap()).unwrap();
    }
}
