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
