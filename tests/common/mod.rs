//! Helpers of the end-to-end tests that run real `cram` processes: starting coordinators
//! and workers on ports the OS chooses, waiting with deadlines, signals, and reading a
//! state directory's event log back.
#![allow(dead_code)]

pub mod client;

use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn cram_cmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cram"));
    c.env_remove("CRAM_DB_DIR").env("RUST_LOG", "info").env("NO_COLOR", "1");
    c
}

pub fn cram(args: &[&str]) -> Output {
    cram_cmd().args(args).output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cram-cluster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The engine's answers (`cram solve --json`) by spec.
pub fn engine(specs: &[&str], extra: &[&str]) -> HashMap<String, (String, Value)> {
    let mut args = vec!["solve", "--json", "--no-db"];
    args.extend_from_slice(extra);
    args.extend_from_slice(specs);
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["spec"].as_str().unwrap().to_string(), (v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone()))
        })
        .collect()
}

/// A coordinator process: its child, URL, state dir and log file.
pub struct Coordinator {
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
}

/// A test that fails leaves no coordinator behind (it would hold the test's pipes open).
impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_coordinator(dir: &Path, state: &Path, job: &str, extra: &[&str]) -> Coordinator {
    let port_file = dir.join("port");
    let _ = std::fs::remove_file(&port_file);
    let n = std::fs::read_dir(dir).unwrap().count();
    let log = dir.join(format!("coordinator-{n}.log"));
    let mut args: Vec<String> =
        ["coordinator", "--listen", "127.0.0.1:0", "--job", job, "--json", "--no-db", "--linger-secs", "6"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.extend(["--state".into(), state.display().to_string(), "--port-file".into(), port_file.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let child =
        cram_cmd().args(&args).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let mut c = Coordinator { child, url: String::new(), log };
    assert!(serving(&mut c, &port_file), "coordinator exited before it served: {}", c.log_text());
    c.url = format!("http://{}", std::fs::read_to_string(&port_file).unwrap());
    c
}

/// How long a test waits for something that takes a moment on an idle machine (a process
/// to start or to exit, a worker to hear that the job is done): long enough for a machine
/// whose cores are all busy with other work, never a measure of speed.
pub const PATIENCE: u64 = 120;

/// Waits until the coordinator has written its port file (it is listening), or exited
/// (false), failing after `PATIENCE`.
fn serving(c: &mut Coordinator, port_file: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(PATIENCE);
    loop {
        if port_file.exists() {
            return true;
        }
        if c.child.try_wait().unwrap().is_some() {
            return false;
        }
        assert!(Instant::now() < deadline, "coordinator did not start within {PATIENCE} s: {}", c.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Coordinator {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

pub fn start_worker(dir: &Path, url: &str, extra: &[&str]) -> (Child, PathBuf) {
    let n = std::fs::read_dir(dir).unwrap().count();
    let log = dir.join(format!("worker-{n}.log"));
    let mut args =
        vec!["worker", "--coordinator", url, "--threads", "1", "--tt-mb", "256", "--no-db", "--progress-secs", "1"];
    args.extend_from_slice(extra);
    let child =
        cram_cmd().args(&args).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    (child, log)
}

/// Waits for a child with a deadline; kills it and fails when it overruns.
pub fn wait(child: &mut Child, secs: u64, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The coordinator's printed result: (outcome, nimber).
pub fn result_of(mut c: Coordinator, secs: u64) -> (String, Value) {
    let status = wait(&mut c.child, secs, "coordinator");
    let mut out = String::new();
    std::io::Read::read_to_string(c.child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(status.success(), "coordinator failed: {}", std::fs::read_to_string(&c.log).unwrap());
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone())
}

/// Result events of the event log.
pub fn results(state: &Path) -> Vec<Value> {
    events(state).into_iter().filter(|v| v["event"] == "result").collect()
}

/// Workers the log says were distrusted.
pub fn distrusted(state: &Path) -> Vec<String> {
    events(state)
        .iter()
        .filter(|v| v["event"] == "distrust")
        .map(|v| v["worker"].as_str().unwrap().to_string())
        .collect()
}

/// Every event of the log.
pub fn events(state: &Path) -> Vec<Value> {
    std::fs::read_to_string(state.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect()
}

/// Asserts that no unit was solved twice by honest workers: at most one finished result per
/// unit that is not a spot check, from workers not distrusted.
pub fn no_unit_solved_twice(state: &Path) {
    let bad = distrusted(state);
    let mut seen = HashMap::new();
    for r in results(state) {
        let honest = !bad.iter().any(|w| r["worker"] == w.as_str());
        if r["finished"] == true && r["check"] != true && honest {
            *seen.entry(r["unit"].as_str().unwrap().to_string()).or_insert(0) += 1;
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "units solved twice: {twice:?}");
    assert!(!seen.is_empty(), "no results logged");
}

pub fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn kill9(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

pub fn sigterm(child: &Child) {
    // SAFETY: sending a signal to a child process we own.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
}

pub fn status_json(url: &str, extra: &[&str]) -> Value {
    let mut args = vec!["status", "--coordinator", url, "--json"];
    args.extend_from_slice(extra);
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    serde_json::from_str(&text(&o.stdout)).unwrap()
}

/// The coordinator's status document, asked over gRPC from this process: quicker than a
/// `cram status` process (which a busy machine can take a while to start), for polls that
/// must see a state that may not last long.
pub fn status_now(url: &str) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut client = cram_proto::connect(url, None, None).await.unwrap();
        let json = client.status(cram_proto::pb::StatusRequest {}).await.unwrap().into_inner().json;
        serde_json::from_str(&json).unwrap()
    })
}

/// Starts a coordinator on a given address (to come back where workers expect it), once it
/// listens there: a start that fails (the address not yet free) is tried again.
pub fn restart_coordinator_on(dir: &Path, state: &Path, job: &str, addr: &str, extra: &[&str]) -> Coordinator {
    let port_file = dir.join("port");
    let deadline = Instant::now() + Duration::from_secs(PATIENCE);
    loop {
        let _ = std::fs::remove_file(&port_file);
        let n = std::fs::read_dir(dir).unwrap().count();
        let log = dir.join(format!("coordinator-{n}.log"));
        let mut args = vec!["coordinator", "--listen", addr, "--job", job, "--json", "--no-db", "--linger-secs", "6"];
        let (s, p) = (state.display().to_string(), port_file.display().to_string());
        args.extend(["--state", &s, "--port-file", &p]);
        args.extend_from_slice(extra);
        let child =
            cram_cmd().args(&args).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        let mut c = Coordinator { child, url: format!("http://{addr}"), log };
        if serving(&mut c, &port_file) {
            return c;
        }
        let status = c.child.wait().unwrap();
        assert!(Instant::now() < deadline, "coordinator restart failed ({status}): {}", c.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A coordinator run to its end on `state` (for runs that stop at once: refusals, a job
/// already solved).
pub fn coordinator_once(state: &Path, job: &str, extra: &[&str]) -> Output {
    let mut args =
        vec!["coordinator", "--listen", "127.0.0.1:0", "--state", state.to_str().unwrap(), "--job", job, "--no-db"];
    args.extend_from_slice(extra);
    cram(&args)
}

/// `(outcome, nimber)` of a printed JSON result.
pub fn answer_of(stdout: &[u8]) -> (String, Value) {
    let v: Value = serde_json::from_str(text(stdout).trim()).unwrap();
    (v["outcome"].as_str().unwrap().to_string(), v["nimber"].clone())
}

pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
