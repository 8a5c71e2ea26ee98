//! End-to-end tests of the cluster: real `cram coordinator` and `cram worker` processes on
//! loopback ports the OS chooses, real sled files, real signals (SIGKILL, SIGTERM).
//!
//! Each answer is compared with the plain engine's (`cram solve`), and the event log is read
//! back to check that no finished unit was recorded twice.

mod common;
use common::*;

use serde_json::Value;
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The same answers as the engine on 24 boards and positions, through the in-process cluster
/// (coordinator and two workers over loopback gRPC), at several split depths, with tiny
/// unit budgets that force splitting, and in both modes.
/// Separate coordinator and worker processes: 4x8 without the pairing certificate and 5x6,
/// two workers each, a token on every call, status while running.
#[test]
fn separate_processes_solve_with_a_token() {
    let dir = scratch("procs");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let t = token.display().to_string();
    let want = engine(&["4x8", "5x6"], &["--no-pairing"]);
    for (job, extra) in [("4x8", vec!["--no-pairing", "--mode", "outcome"]), ("5x6", vec!["--no-pairing"])] {
        let state = dir.join(format!("state-{job}"));
        let mut args = extra.clone();
        args.extend(["--token-file", &t]);
        let c = start_coordinator(&dir, &state, job, &args);
        let st = status_json(&c.url, &["--token-file", &t]);
        assert_eq!(st["job"], job);
        let mut workers: Vec<Child> = (0..2).map(|_| start_worker(&dir, &c.url, &["--token-file", &t]).0).collect();
        let (outcome, nimber) = result_of(c, 120);
        assert_eq!(outcome, want[job].0, "{job}");
        if job == "5x6" {
            assert_eq!(nimber, want[job].1);
        }
        for w in &mut workers {
            assert!(wait(w, PATIENCE, "worker").success(), "workers exit 0 when the job is done");
        }
        no_unit_solved_twice(&state);
    }
}

/// kill -9 the coordinator mid-run; started again on the same state it resumes: the same
/// answer, and no finished unit solved twice. The worker rides through the outage.
#[test]
fn coordinator_killed_and_resumed() {
    let dir = scratch("coordkill");
    let state = dir.join("state");
    let job = "5x8";
    let want = engine(&[job], &[]);
    let split = ["--split-depth", "3"];
    let mut c = start_coordinator(&dir, &state, job, &split);
    let (mut worker, wlog) = start_worker(&dir, &c.url, &[]);
    wait_for("some results", 120, || results(&state).len() >= 5);
    kill9(&mut c.child);
    let before = results(&state).len();
    std::thread::sleep(Duration::from_millis(500));
    // Back on the same address, where the worker keeps calling.
    let addr = c.url.trim_start_matches("http://").to_string();
    let c2 = restart_coordinator_on(&dir, &state, job, &addr, &split);
    let (outcome, nimber) = result_of(c2, 300);
    assert_eq!((outcome, nimber), want[job].clone());
    assert!(wait(&mut worker, PATIENCE, "worker").success());
    assert!(results(&state).len() > before);
    no_unit_solved_twice(&state);
    let wl = std::fs::read_to_string(wlog).unwrap();
    assert!(wl.contains("coordinator unreachable") || wl.contains("registering again"), "{wl}");
}

/// A TCP relay between workers and a coordinator that can go silent: once [`Relay::silence`]
/// is called, the connections it carries stay open but pass nothing either way, the way a
/// network cut or a changed address leaves them (no reset ever arrives); connections made
/// afterwards pass again.
struct Relay {
    addr: String,
    silenced: std::sync::Arc<std::sync::atomic::AtomicU64>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Relay {
    fn to(target: &str) -> Relay {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (silenced, accepted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let target = target.trim_start_matches("http://").to_string();
        let (s, a) = (silenced.clone(), accepted.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { return };
                let Ok(outbound) = std::net::TcpStream::connect(&target) else { continue };
                // Connection n passes while fewer than n silences were asked.
                let n = a.fetch_add(1, SeqCst) + 1;
                for (mut from, mut to) in
                    [(inbound.try_clone().unwrap(), outbound.try_clone().unwrap()), (outbound, inbound)]
                {
                    let s = s.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            match std::io::Read::read(&mut from, &mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(k) if s.load(SeqCst) < n => {
                                    if to.write_all(&buf[..k]).is_err() {
                                        return;
                                    }
                                }
                                Ok(_) => {} // silenced: swallowed, and the socket kept open
                            }
                        }
                    });
                }
            }
        });
        Relay { addr: format!("http://{addr}"), silenced, accepted }
    }

    /// Every connection open now passes nothing from here on.
    fn silence(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.silenced.store(self.accepted.load(SeqCst), SeqCst);
    }

    fn connections(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A worker whose connection goes silent mid-job (no reset, no close: a network cut, or its
/// address changed) finds it dead by its pings, connects again and finishes the job, which
/// it alone searches: without the pings every call would time out on the dead connection,
/// for ever.
#[test]
fn a_worker_whose_connection_goes_silent_connects_again() {
    let dir = scratch("silent");
    let state = dir.join("state");
    let job = "5x8";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "2", "--lease-secs", "3"]);
    let relay = Relay::to(&c.url);
    let (mut worker, _) = start_worker(&dir, &relay.addr, &[]);
    wait_for("a first result", PATIENCE, || !results(&state).is_empty());
    relay.silence();
    let before = relay.connections();
    assert!(status_now(&c.url)["answer"].is_null(), "the job ended before the cut: the test shows nothing");
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut worker, PATIENCE, "worker").success());
    assert!(relay.connections() > before, "the worker never connected again");
    no_unit_solved_twice(&state);
}

/// A client that opens a connection and never says anything (no handshake, no call) does
/// not keep the coordinator from ending once the job is solved: the servers drain for a
/// few seconds, then close what is left.
#[test]
fn an_idle_connection_does_not_keep_the_coordinator_from_ending() {
    let dir = scratch("idleconn");
    let state = dir.join("state");
    let job = "4x6";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &[]);
    let _idle = std::net::TcpStream::connect(c.url.trim_start_matches("http://")).unwrap();
    let (mut worker, _) = start_worker(&dir, &c.url, &[]);
    let log = c.log.clone();
    assert_eq!(result_of(c, PATIENCE), want[job].clone());
    assert!(wait(&mut worker, PATIENCE, "worker").success());
    let clog = std::fs::read_to_string(log).unwrap();
    assert!(clog.contains("connections still open"), "{clog}");
}

/// kill -9 a worker mid-unit: its unit is reissued when the lease expires and a restarted
/// worker finishes the job. Its sled cache then answers a second run of the same job.
#[test]
fn worker_killed_lease_expires_and_cache_answers_again() {
    let dir = scratch("workerkill");
    let cache = dir.join("cache");
    let cache_s = cache.display().to_string();
    let state = dir.join("state");
    let job = "4x9";
    let want = engine(&[job], &[]);
    // One unit, the whole job: the worker is surely mid-unit when killed (the lease is seen
    // by polling from this process, not by starting a `cram status` per look).
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "0", "--lease-secs", "2"]);
    let (mut w1, _) = start_worker(&dir, &c.url, &["--cache", &cache_s]);
    wait_for("a lease", PATIENCE, || status_now(&c.url)["units"]["leased"] == 1);
    kill9(&mut w1);
    let (mut w2, _) = start_worker(&dir, &c.url, &["--cache", &cache_s]);
    let log = c.log.clone();
    let (outcome, nimber) = result_of(c, 300);
    assert_eq!((outcome, nimber), want[job].clone());
    assert!(wait(&mut w2, PATIENCE, "worker").success());
    let clog = std::fs::read_to_string(&log).unwrap();
    assert!(clog.contains("lease expired"), "{clog}");
    no_unit_solved_twice(&state);
    // Same job, new state, same cache: answered without search.
    let state2 = dir.join("state2");
    let c = start_coordinator(&dir, &state2, job, &["--split-depth", "0"]);
    let (mut w3, _) = start_worker(&dir, &c.url, &["--cache", &cache_s]);
    assert_eq!(result_of(c, PATIENCE), want[job].clone());
    assert!(wait(&mut w3, PATIENCE, "worker").success());
    // The worker's answers (the coordinator checks the lone worker's itself).
    let r: Vec<Value> = results(&state2).into_iter().filter(|r| r["worker"] != "coordinator").collect();
    assert!(!r.is_empty() && r.iter().all(|r| r["from_cache"] == true && r["nodes"] == 0), "{r:?}");
}

/// SIGTERM a worker: it hands its unit back at once (not when its lease expires), exits 0,
/// and another worker takes the unit over.
#[test]
fn sigterm_releases_leases_at_once() {
    let dir = scratch("sigterm");
    let state = dir.join("state");
    let job = "4x9";
    let want = engine(&[job], &[]);
    // A lease far longer than the job takes even on a busy machine: answered before it could
    // have expired, the unit did not wait for it.
    let lease = Duration::from_secs(120);
    let lease_arg = lease.as_secs().to_string();
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "0", "--lease-secs", &lease_arg]);
    // Before the worker starts: its lease, granted later, would expire after t0 + lease.
    let t0 = Instant::now();
    let (mut w1, w1log) = start_worker(&dir, &c.url, &[]);
    wait_for("a lease", PATIENCE, || status_now(&c.url)["units"]["leased"] == 1);
    sigterm(&w1);
    assert!(wait(&mut w1, PATIENCE, "worker after SIGTERM").success());
    let st = status_json(&c.url, &[]);
    assert_eq!(st["units"]["leased"], 0, "{st}");
    assert_eq!(st["units"]["released"], 1, "{st}");
    assert!(std::fs::read_to_string(w1log).unwrap().contains("handed units back"));
    let (mut w2, _) = start_worker(&dir, &c.url, &[]);
    wait_for("the answer", lease.as_secs() + PATIENCE, || events(&state).iter().any(|e| e["event"] == "done"));
    assert!(t0.elapsed() < lease, "the unit waited for its lease to expire ({:?})", t0.elapsed());
    assert_eq!(result_of(c, PATIENCE), want[job].clone());
    assert!(wait(&mut w2, PATIENCE, "worker").success());
}

/// A wrong token and a mismatched protocol are refused (exit 4, messages on both sides),
/// and the job's answer is unaffected.
#[test]
fn wrong_token_and_version_are_refused() {
    let dir = scratch("refuse");
    let state = dir.join("state");
    let (good, bad) = (dir.join("good"), dir.join("bad"));
    std::fs::write(&good, "right-token").unwrap();
    std::fs::write(&bad, "wrong-token").unwrap();
    let (g, b) = (good.display().to_string(), bad.display().to_string());
    let job = "5x6";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &["--token-file", &g]);
    let (mut w, wlog) = start_worker(&dir, &c.url, &["--token-file", &b]);
    assert_eq!(wait(&mut w, PATIENCE, "worker with a wrong token").code(), Some(4));
    assert!(std::fs::read_to_string(&wlog).unwrap().contains("refused"));
    let (mut w, wlog) = start_worker(&dir, &c.url, &[]);
    assert_eq!(wait(&mut w, PATIENCE, "worker without a token").code(), Some(4));
    assert!(std::fs::read_to_string(&wlog).unwrap().contains("refused"));
    let (mut w, wlog) = start_worker(&dir, &c.url, &["--token-file", &g, "--announce-protocol", "99"]);
    assert_eq!(wait(&mut w, PATIENCE, "worker with another protocol").code(), Some(4));
    let wl = std::fs::read_to_string(&wlog).unwrap();
    let ours = format!("protocol {}", cram_proto::PROTOCOL_VERSION);
    assert!(wl.contains("protocol 99") && wl.contains(&ours), "{wl}");
    let o = cram(&["status", "--coordinator", &c.url, "--token-file", &b]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(results(&state).is_empty(), "refused calls changed nothing");
    let (mut w, _) = start_worker(&dir, &c.url, &["--token-file", &g]);
    let log = c.log.clone();
    assert_eq!(result_of(c, 120), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    let clog = std::fs::read_to_string(log).unwrap();
    assert!(clog.contains("refused a call without the right token") && clog.contains("refused a worker"), "{clog}");
}

/// Damaged state: a corrupt sled index is rebuilt from the event log (same answer); a log
/// damaged before its end is refused with exit 3; another job on the state is refused
/// with exit 2; a torn last line is dropped.
#[test]
fn damaged_state_is_rebuilt_or_refused() {
    let dir = scratch("damage");
    let state = dir.join("state");
    let job = "5x7";
    let want = engine(&[job], &[]);
    let mut c = start_coordinator(&dir, &state, job, &["--split-depth", "3"]);
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    wait_for("some results", 120, || results(&state).len() >= 5);
    kill9(&mut c.child);
    kill9(&mut w);
    // Garbage over every file of the sled index.
    let mut damaged = 0;
    for e in walk(&state.join("index.sled")) {
        std::fs::write(&e, b"\x00garbage\xff".repeat(100)).unwrap();
        damaged += 1;
    }
    assert!(damaged > 0);
    // A torn last line, as a kill in the middle of a write leaves it.
    let log = state.join("events.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"{\"event\":\"result\",\"unit\":\"4x").unwrap();
    drop(f);
    let other = coordinator_once(&state, "5x8", &[]);
    assert_eq!(other.status.code(), Some(2), "{}", text(&other.stderr));
    let err = text(&other.stderr);
    assert!(err.contains("unfinished job 5x7") && err.contains("torn line"), "{err}");
    let c = start_coordinator(&dir, &state, job, &["--split-depth", "3"]);
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    let clog = c.log.clone();
    assert_eq!(result_of(c, 300), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    let cl = std::fs::read_to_string(clog).unwrap();
    assert!(cl.contains("does not say how far the log reached"), "{cl}");
    no_unit_solved_twice(&state);
    // A finished job on its state prints its answer again.
    let again = coordinator_once(&state, job, &["--json", "--linger-secs", "0"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(answer_of(&again.stdout), want[job].clone());
    // Damage in the middle of the log is refused, naming the line.
    let content = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<&str> = content.lines().collect();
    lines[2] = "{\"event\":\"result\",\"unit\":";
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let o = coordinator_once(&state, job, &[]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("damaged at line 3"), "{}", text(&o.stderr));
}

/// `cram solve --workers N --state DIR` is resumable: killed mid-run and run again, it
/// finishes with the engine's answer without solving a finished unit twice.
#[test]
fn local_solve_with_state_resumes() {
    let dir = scratch("localresume");
    let state = dir.join("state");
    let s = state.display().to_string();
    let job = "5x8";
    let want = engine(&[job], &[]);
    let args = ["solve", job, "--json", "--no-db", "--workers", "1", "--split-depth", "3", "--state", &s];
    let mut child = cram_cmd().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_for("some results", 120, || results(&state).len() >= 5);
    kill9(&mut child);
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(answer_of(&o.stdout), want[job].clone());
    no_unit_solved_twice(&state);
    let starts = std::fs::read_to_string(state.join("events.jsonl")).unwrap().matches("\"event\":\"start\"").count();
    assert_eq!(starts, 2);
}

/// `cram solve --workers` shows how a long solve goes: the coordinator's progress lines
/// (units done, nodes, rate, root bounds, first moves known, ETA) reach standard error every
/// `--progress-secs`,
/// each line's rate is that of the nodes since the line before, and the answer is the
/// published one.
#[test]
fn local_solve_prints_progress_lines() {
    let args = ["solve", "4x11", "--json", "--no-db", "--workers", "2", "--progress-secs", "1"];
    let o = cram(&args);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(answer_of(&o.stdout), ("first".to_string(), Value::from(1)));
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("4x11: units ")).collect();
    assert!(!lines.is_empty(), "no progress line in\n{err}");
    for want in ["done (", " nodes, ", " nodes/s, ", " workers, root ", " known, ETA "] {
        assert!(lines.iter().all(|l| l.contains(want)), "{want:?} missing from {lines:?}");
    }
    for l in &lines {
        let moves = l.split("first moves ").nth(1).and_then(|t| t.split(' ').next()).unwrap();
        let (known, all) = moves.split_once('/').unwrap();
        let (known, all): (u32, u32) = (known.parse().unwrap(), all.parse().unwrap());
        assert!(all > 0 && known <= all, "{l}");
    }
    // (seconds of the day of the line's timestamp, nodes, nodes/s)
    let parsed: Vec<(f64, f64, f64)> = lines
        .iter()
        .map(|l| {
            let clock = l.split('T').nth(1).and_then(|t| t.split('Z').next()).unwrap();
            let secs = clock.split(':').map(|x| x.parse::<f64>().unwrap()).fold(0.0, |a, x| a * 60.0 + x);
            let number_before = |tail: &str| {
                let head = &l[..l.find(tail).unwrap()];
                head.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
            };
            (secs, number_before(" nodes, "), number_before(" nodes/s, "))
        })
        .collect();
    assert!(parsed.len() >= 2, "a solve of several seconds writes several lines: {lines:?}");
    // A line's timestamp is taken a moment after the coordinator read its clock for the rate:
    // microseconds, unless the thread is preempted in between, which on a machine busy with
    // other work can take a few time slices. Each timestamp may be up to `LAG` late, so the
    // time between two lines is known within `LAG` either way (the rate within a few per
    // cent, where the lines' rates differ from one another by factors).
    const LAG: f64 = 0.05;
    for w in parsed.windows(2) {
        let ((t0, n0, _), (t1, n1, rate)) = (w[0], w[1]);
        let nodes = (n1 - n0).max(0.0);
        let (low, high) = (nodes / (t1 - t0 + LAG), nodes / (t1 - t0 - LAG).max(1e-3));
        assert!(
            0.98 * low - 1000.0 <= rate && rate <= 1.02 * high + 1000.0,
            "rate {rate}, nodes since the last line over its time {}: {lines:?}",
            nodes / (t1 - t0)
        );
    }
}

/// A small solve through the cluster path ends without warnings: its workers' goodbyes,
/// with no units to hand back, often find the coordinator gone after the answer, which is
/// nothing to warn about.
#[test]
fn small_local_solves_end_without_warnings() {
    for _ in 0..5 {
        let o = cram(&["solve", "3x4", "2x5", "1x7", "--workers", "2"]);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(!err.contains("WARN"), "{err}");
    }
}

/// `cram solve --workers --import`: a nimber job started from an outcome job's state gives
/// the engine's answer; an import that cannot be taken is exit 2 with the reason, and the
/// new job's state is left as it was.
#[test]
fn a_solve_imports_an_earlier_jobs_results() {
    let dir = scratch("import");
    let (outcome, nimber) = (dir.join("outcome"), dir.join("nimber"));
    let path = |p: &std::path::Path| p.display().to_string();
    let o = cram(&["solve", "3x9", "--outcome-only", "--workers", "2", "--state", &path(&outcome), "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cram(&["solve", "3x9", "--workers", "2", "--state", &path(&nimber), "--import", &path(&outcome), "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = engine(&["3x9"], &[]);
    let printed: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!((printed["outcome"].as_str().unwrap().to_string(), printed["nimber"].clone()), want["3x9"]);
    let fresh = dir.join("fresh");
    for (source, why) in [(dir.join("missing"), "is not an event log"), (outcome.clone(), "which is not 3x10")] {
        let spec = if why.contains("3x10") { "3x10" } else { "3x9" };
        let o = cram(&["solve", spec, "--workers", "1", "--state", &path(&fresh), "--import", &path(&source)]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains(why), "{}", text(&o.stderr));
        assert!(!fresh.join("events.jsonl").exists(), "a refused import wrote a job");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--separate-tables --model-owners`: workers with tables of their own, linked to the model
/// of knowledge with owners (with and without a network's delays), give the engine's answers
/// and report the model's messages; the model cannot be asked for with a certificate.
#[test]
fn the_owners_model_leaves_answers_right_and_counts_its_messages() {
    let want = engine(&["5x6", "4x7", "3x9"], &[]);
    for spec in ["8,1,0,0", "8,1,20,300"] {
        for job in ["5x6", "4x7", "3x9"] {
            let o = cram(&[
                "solve",
                job,
                "--no-db",
                "--workers",
                "2",
                "--separate-tables",
                "--model-owners",
                spec,
                "--json",
            ]);
            assert!(o.status.success(), "{}", text(&o.stderr));
            let v: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
            assert_eq!((v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone()), want[job], "{job} {spec}");
            let count = |k: &str| v["owners"][k].as_u64().unwrap_or_else(|| panic!("no owners.{k}: {v}"));
            assert!(count("asks") > 0 && count("tells") > 0, "{job} {spec}: {v}");
            assert!(count("used") <= count("answered") && count("answered") <= count("asks"), "{v}");
        }
    }
    let cert = scratch("owners").join("c.cert");
    let o = cram(&[
        "solve",
        "5x6",
        "--workers",
        "2",
        "--separate-tables",
        "--model-owners",
        "8,1,0,0",
        "--certificate",
        &cert.display().to_string(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("cannot be used with --certificate"), "{}", text(&o.stderr));
    let o = cram(&["solve", "5x6", "--workers", "2", "--separate-tables", "--model-owners", "8,1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("CELLS,NODES,DELAY_MS,LATENCY_US"), "{}", text(&o.stderr));
}

/// A test client speaking the protocol that answers every unit it leases falsely, and also
/// sends a false answer to the unit's region's nimber, which it was never given. Like a
/// worker it rides through coordinator restarts (it registers again under the same id and
/// sends a result until the coordinator answers), and it keeps at it until it is
/// disconnected (PERMISSION_DENIED) or stopped. Returns its id, the false results the
/// coordinator received, and whether it was disconnected.
async fn liar(url: String, secret: String, stop: tokio::sync::watch::Receiver<bool>) -> (String, u32, bool) {
    use common::client::{Oracle, ProtoClient};
    use tonic::Code;
    let mut c = ProtoClient::with_secret(&url, "liar", &secret);
    let mut oracle = Oracle::default();
    let id = c.id();
    let mut lies = 0u32;
    // The truth is searched within a budget (a liar busy with a long search would miss its
    // own disconnection), doubled after each unit it did not fit.
    let mut budget = 300_000u64;
    let pause = || tokio::time::sleep(Duration::from_millis(100));
    while !*stop.borrow() {
        let unit = match c.unit().await {
            Ok(Some(u)) => u,
            Ok(None) => break,
            Err(e) if e.code() == Code::PermissionDenied => return (id, lies, true),
            Err(_) => {
                pause().await;
                continue;
            }
        };
        let Some((_, wrong)) = oracle.truth_and_lie(&unit, budget) else {
            budget *= 2;
            continue;
        };
        let region = cram_proto::region_from_pb(unit.region.as_ref()).unwrap();
        let nimber_unit = cram_engine::Question::nimber(region).to_string();
        for unit_id in [unit.unit_id.clone(), nimber_unit] {
            loop {
                match c.submit(&unit, &unit_id, wrong, Vec::new()).await {
                    Ok(_) => lies += 1,
                    Err(e) if e.code() == Code::InvalidArgument => lies += 1,
                    Err(e) if e.code() == Code::PermissionDenied => return (id, lies, true),
                    Err(e) if e.code() == Code::NotFound => {
                        if let Err(e) = c.register(30).await {
                            if e.code() == Code::PermissionDenied {
                                return (id, lies, true);
                            }
                        }
                        continue;
                    }
                    Err(_) if !*stop.borrow() => {
                        pause().await;
                        continue;
                    }
                    Err(_) => {}
                }
                break;
            }
        }
    }
    (id, lies, false)
}

/// Chaos: one job (4x11) with two workers and a liar; the coordinator killed with SIGKILL 20
/// times at random moments (each after some progress) and started again, a worker killed 5
/// times and started again. The answer is the engine's, no unit was solved twice by honest
/// workers, and the liar's results were refused or discarded and the liar disconnected.
#[test]
fn chaos_kills_and_a_liar_leave_the_answer_right() {
    use rand::Rng;
    let started = Instant::now();
    let dir = scratch("chaos");
    let state = dir.join("state");
    let job = "4x11";
    let want = engine(&[job], &[]);
    // Every result verified: the liar is caught at its first lie, whatever the draws.
    let split = ["--split-depth", "2", "--lease-secs", "5", "--check-one-in", "1"];
    let mut c = start_coordinator(&dir, &state, job, &split);
    let addr = c.url.trim_start_matches("http://").to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let secret = cram_proto::new_worker_secret();
    let liar_id = format!("liar#{}", cram_proto::secret_digest(&secret));
    let liar = rt.spawn(liar(c.url.clone(), secret, stop_rx));
    // The honest workers and the kills begin once a false result of the liar's is in the
    // log: under kills a lie can be lost to every restart (its lease gone, its unit leased
    // to another), and on a busy machine honest workers can end the job before the liar
    // has searched a truth to lie about.
    let lied = |e: &Value| e["worker"] == liar_id.as_str() && (e["event"] == "result" || e["event"] == "refused");
    wait_for("a false result of the liar's in the log", 300, || events(&state).iter().any(lied));
    eprintln!("chaos: the liar's first false result logged after {:.1} s", started.elapsed().as_secs_f64());
    let cache = |i: usize| dir.join(format!("cache-{i}")).display().to_string();
    let mut workers: Vec<Child> = (0..2).map(|i| start_worker(&dir, &c.url, &["--cache", &cache(i)]).0).collect();
    let mut rng = rand::rng();
    let (mut coordinator_kills, mut worker_kills) = (0, 0);
    while coordinator_kills < 20 {
        // A random moment, once the coordinator started last has logged something.
        let logged = events(&state).len();
        wait_for("progress between kills", 120, || events(&state).len() > logged);
        std::thread::sleep(Duration::from_millis(rng.random_range(0..400)));
        assert!(c.child.try_wait().unwrap().is_none(), "the job finished after only {coordinator_kills} kills");
        kill9(&mut c.child);
        coordinator_kills += 1;
        if coordinator_kills % 4 == 0 && worker_kills < 5 {
            let i = rng.random_range(0..workers.len());
            kill9(&mut workers[i]);
            worker_kills += 1;
            workers[i] = start_worker(&dir, &c.url, &["--cache", &cache(i)]).0;
        }
        c = restart_coordinator_on(&dir, &state, job, &addr, &split);
    }
    let (outcome, nimber) = result_of(c, 600);
    stop_tx.send_replace(true);
    let (liar_named, lies, disconnected) = rt.block_on(liar).unwrap();
    assert_eq!(liar_named, liar_id);
    assert_eq!((outcome, nimber), want[job].clone(), "the answer is the engine's");
    for w in &mut workers {
        assert!(wait(w, PATIENCE, "worker").success(), "workers exit 0 when the job is done");
    }
    assert_eq!((coordinator_kills, worker_kills), (20, 5));
    no_unit_solved_twice(&state);
    // The liar: its false results were refused, ignored (units it was never given), or
    // accepted and then discarded with every other result of it when it was distrusted;
    // it was disconnected if it called again before the job ended (a distrust that lands
    // while the liar is between calls, searching its next lie or waiting out a restart, can
    // be followed by the end of the job; tests/hostile.rs has the refusal of every call of a
    // distrusted worker).
    assert!(lies >= 1, "the liar sent {lies} false results");
    assert!(distrusted(&state).contains(&liar_id), "{liar_id} not distrusted: {:?}", distrusted(&state));
    let log = events(&state);
    let from_liar = |kind: &str| log.iter().filter(|e| e["event"] == kind && e["worker"] == liar_id.as_str()).count();
    assert!(from_liar("refused") + from_liar("result") >= 1, "no false result reached the log");
    let honest_distrusted: Vec<String> = distrusted(&state).into_iter().filter(|w| *w != liar_id).collect();
    assert!(honest_distrusted.is_empty(), "honest workers distrusted: {honest_distrusted:?}");
    eprintln!(
        "chaos: {coordinator_kills} coordinator kills, {worker_kills} worker kills, {lies} lies ({} refused, {} discarded, disconnected: {disconnected}), {:.1} s",
        from_liar("refused"),
        from_liar("result"),
        started.elapsed().as_secs_f64()
    );
}

/// Knowledge shared across machines, and a false fact in it: a protocol-speaking client
/// answers its unit rightly but shares a false fact about a large region. The coordinator
/// verifies a shared fact by its own search before it hands it to anyone: the false one
/// shows its origin wrong, the client is disconnected, and no worker ever loads it (no
/// result rests on it). A worker still gets the verified facts of others. The answer is the
/// engine's.
#[test]
fn a_false_shared_fact_is_caught_before_anyone_loads_it() {
    use common::client::{truth_and_lie, ProtoClient};
    use cram_engine::{Config, DbSet, Facts, Solver};
    let dir = scratch("poison");
    let state = dir.join("state");
    let job = "4x11";
    let want = engine(&[job], &[]);
    // Leases long enough that the client's own searches below (the truth and the lie, in a
    // debug build, on a busy machine) end before the coordinator forgets a silent worker
    // (three leases); should they not, the client registers again under the same secret.
    let args = ["--check-one-in", "0", "--share-min-cells", "20", "--share-min-nodes", "10000", "--lease-secs", "60"];
    let c = start_coordinator(&dir, &state, job, &args);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let mut poisoner = ProtoClient::new(&c.url, "poisoner");
    let id = poisoner.id();
    let refused = rt.block_on(async {
        poisoner.register(PATIENCE).await.unwrap();
        let u = poisoner.unit().await.unwrap().expect("a unit");
        let (right, _) = truth_and_lie(&u, u64::MAX).unwrap();
        // The false fact: about a large region of one of the unit's options, one the
        // coordinator holds nothing certain about (over 16 cells, not paired).
        let region = cram_proto::region_from_pb(u.region.as_ref()).unwrap();
        let mut engine =
            Solver::new(&Config { tt_bytes: 64 << 20, pairing: true }, std::sync::Arc::new(DbSet::default()));
        let target = cram_engine::options::options(&region)
            .into_iter()
            .flat_map(|c| c.regions)
            .find(|r| r.cells() > 16 && engine.settled_value(r).is_none())
            .unwrap();
        let lie = cram_engine::SharedFact {
            region: target,
            facts: Facts::exact(engine.nimber(target).unwrap() ^ 1),
            nodes: 1_000_000,
        };
        let shared = vec![cram_proto::shared_to_pb(&lie)];
        let reply = match poisoner.submit(&u, &u.unit_id, right, shared.clone()).await {
            Err(e) if e.code() == tonic::Code::NotFound => {
                poisoner.register(PATIENCE).await.unwrap();
                poisoner.submit(&u, &u.unit_id, right, shared).await.unwrap()
            }
            reply => reply.unwrap(),
        };
        assert!(reply.recorded);
        // Found out by the coordinator's own search of the region: disconnected.
        poisoner.disconnected_within(PATIENCE).await
    });
    assert!(refused, "the poisoner was not disconnected");
    let (mut worker, _) = start_worker(&dir, &c.url, &[]);
    let (outcome, nimber) = result_of(c, 300);
    assert_eq!((outcome, nimber), want[job].clone(), "the answer is the engine's");
    assert!(wait(&mut worker, PATIENCE, "worker").success());
    assert_eq!(distrusted(&state), vec![id]);
}

/// A second coordinator on a state directory in use is refused with exit code 2 and a
/// message naming the holder, and cuts nothing from the log; the first one carries on.
#[test]
fn a_second_coordinator_on_a_live_state_is_refused() {
    let dir = scratch("second");
    let state = dir.join("state");
    let job = "5x6";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &[]);
    // The port file is written once the port is bound, the log once the state is open.
    wait_for("the coordinator to open its state", PATIENCE, || state.join("events.jsonl").exists());
    let log = std::fs::read(state.join("events.jsonl")).unwrap();
    let second = coordinator_once(&state, job, &[]);
    assert_eq!(second.status.code(), Some(2), "{}", text(&second.stderr));
    let err = text(&second.stderr);
    assert!(err.contains("in use by another coordinator") && err.contains(&c.child.id().to_string()), "{err}");
    // The live coordinator may have logged more meanwhile; nothing it had logged is cut.
    assert!(std::fs::read(state.join("events.jsonl")).unwrap().starts_with(&log), "the live log was cut");
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    assert_eq!(result_of(c, 120), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
}

/// A certified job with real processes: the coordinator killed with SIGKILL mid-run and
/// resumed from its state (proofs and all), a worker process proving its units; the
/// certificate written at the end checks with `cram check` and proves the engine's answer.
/// The same state started without `--certificate` is another job, refused with exit code 2.
#[test]
fn a_certified_job_survives_a_kill_and_its_certificate_checks() {
    let dir = scratch("certified");
    let state = dir.join("state");
    let cert = dir.join("job.cert");
    let job = "5x7";
    let want = engine(&[job], &[]);
    let c_arg = cert.display().to_string();
    let extra = ["--split-depth", "3", "--certificate", &c_arg];
    let mut c = start_coordinator(&dir, &state, job, &extra);
    let (mut worker, _) = start_worker(&dir, &c.url, &[]);
    wait_for("some results", 120, || results(&state).len() >= 5);
    kill9(&mut c.child);
    let proofs = std::fs::read_dir(state.join("proofs")).map_or(0, |d| d.count());
    assert!(proofs > 0, "results of a certified job carry proofs");
    let addr = c.url.trim_start_matches("http://").to_string();
    let c2 = restart_coordinator_on(&dir, &state, job, &addr, &extra);
    assert_eq!(result_of(c2, 300), want[job].clone());
    assert!(wait(&mut worker, PATIENCE, "worker").success());
    let o = cram(&["check", &c_arg, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!((v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone()), want[job].clone());
    // Resuming the certified job without --certificate is another job.
    let o = coordinator_once(&state, job, &["--split-depth", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("another"), "{}", text(&o.stderr));
}

/// `cram solve --workers N --certificate FILE`: the cluster path in one process, certified.
#[test]
fn a_local_cluster_solve_writes_a_certificate() {
    let dir = scratch("localcert");
    let cert = dir.join("c.cert");
    let c_arg = cert.display().to_string();
    for (job, extra) in [("4x8", &[][..]), ("5x6", &["--outcome-only"][..])] {
        let want = engine(&[job], extra);
        let mut args = vec!["solve", job, "--json", "--no-db", "--workers", "2", "--certificate", &c_arg];
        args.extend_from_slice(extra);
        let o = cram(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert_eq!(answer_of(&o.stdout), want[job].clone());
        let o = cram(&["check", &c_arg, "--json"]);
        assert!(o.status.success(), "{job}: {}", text(&o.stderr));
        let v: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
        assert_eq!((v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone()), want[job].clone(), "{job}");
    }
}

#[test]
fn a_certified_job_whose_proofs_are_lost_proves_them_again() {
    // Proof files of a finished certified job lost (a disk cleaned, a copy that missed
    // them): the same command assembles the certificate again, proving by its own search
    // what the lost proofs held, and the certificate checks.
    let dir = scratch("lostproofs");
    let (state, cert) = (dir.join("state"), dir.join("c.cert"));
    let (s_arg, c_arg) = (state.display().to_string(), cert.display().to_string());
    let args = ["solve", "5x6", "--json", "--no-db", "--workers", "2", "--state", &s_arg, "--certificate", &c_arg];
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let first = answer_of(&o.stdout);
    let mut proofs: Vec<_> = std::fs::read_dir(state.join("proofs")).unwrap().map(|e| e.unwrap().path()).collect();
    proofs.sort();
    assert!(proofs.len() > 20, "{} proofs", proofs.len());
    for p in proofs.iter().step_by(2) {
        std::fs::remove_file(p).unwrap();
    }
    std::fs::remove_file(&cert).unwrap();
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("left out of the certificate"), "{}", text(&o.stderr));
    assert_eq!(answer_of(&o.stdout), first);
    let o = cram(&["check", &c_arg, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!((v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone()), first);
}
