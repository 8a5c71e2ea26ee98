//! An in-process cluster for tests, the way mini-redis's tests start their server: a real
//! coordinator (`cram_coordinator::run`) on `127.0.0.1:0` and real workers
//! (`cram_worker::run`), each with its own tables, talking real gRPC over loopback, in
//! this test's process. For tests that compare answers or exercise the protocol; kills,
//! signals, resume and exit codes are tested on real `cram` processes (tests/cluster.rs).
#![allow(dead_code)]

use cram_coordinator::scheduler::CheckPolicy;
use cram_coordinator::{CertificateTarget, CoordError, Finished, Listeners, Settings, Share, Split};
use cram_engine::{Board, Config, DbSet, Mode, Solution, Solver};
use cram_worker::WorkerError;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A job for [`start_cluster`], with the settings tests vary.
#[derive(Clone)]
pub struct JobSpec {
    pub spec: String,
    pub mode: Mode,
    pub pairing: bool,
    pub split: Split,
    pub unit_nodes: u64,
    pub checks: CheckPolicy,
    pub share: Share,
    pub token: Option<String>,
    pub certificate: Option<u32>,
    pub import: Option<PathBuf>,
    /// The state directory to use (a new one when none).
    pub state: Option<PathBuf>,
}

impl JobSpec {
    /// The nimber of `spec`, split at depth 2, no checks, nothing shared, no token.
    pub fn new(spec: &str) -> JobSpec {
        JobSpec {
            spec: spec.to_string(),
            mode: Mode::Nimber,
            pairing: true,
            split: Split::Depth(2),
            unit_nodes: 50_000_000,
            checks: CheckPolicy::NONE,
            share: Share::NONE,
            token: None,
            certificate: None,
            import: None,
            state: None,
        }
    }
}

/// A running in-process cluster.
pub struct Cluster {
    /// The coordinator's URL.
    pub url: String,
    /// Its state directory (removed when the cluster is dropped).
    pub state: PathBuf,
    coordinator: JoinHandle<Result<Finished, CoordError>>,
    workers: Vec<JoinHandle<Result<cram_worker::Summary, WorkerError>>>,
    stop: watch::Sender<bool>,
}

/// A scratch directory of this test process.
pub fn scratch(name: &str) -> PathBuf {
    let d =
        std::env::temp_dir().join(format!("cram-inprocess-{name}-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts a coordinator for `job` and `workers` workers of one thread each (separate
/// tables, as on separate machines), on a port the OS chooses.
pub async fn start_cluster(job: &JobSpec, workers: usize) -> Cluster {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (dir, state) = match &job.state {
        Some(s) => (s.parent().unwrap().to_path_buf(), s.clone()),
        None => {
            let dir = scratch(&job.spec.replace(['/', '#', '.'], "_"));
            (dir.clone(), dir.join("state"))
        }
    };
    let (stop, _) = watch::channel(false);
    let settings = Settings {
        board: Board::parse(&job.spec).unwrap(),
        spec: job.spec.clone(),
        mode: job.mode,
        pairing: job.pairing,
        split: job.split,
        unit_nodes: job.unit_nodes,
        lease: Duration::from_secs(30),
        checks: job.checks,
        check_threads: 2,
        check_tt_bytes: 64 << 20,
        proof_threads: 2,
        progress: Duration::from_secs(3600),
        token: job.token.clone(),
        dbs: Arc::new(DbSet::default()),
        // The workers stop as soon as the answer is known (as `cram solve --workers` does).
        linger: Duration::from_millis(50),
        state_dir: state.clone(),
        answered: Some(stop.clone()),
        certificate: job.certificate.map(|small| CertificateTarget {
            path: dir.join("cert"),
            small,
            proof_memory: cram_coordinator::prove::DEFAULT_PROOF_MEMORY,
        }),
        tls: None,
        share: job.share,
        import: job.import.clone(),
    };
    let coordinator = tokio::spawn(cram_coordinator::run(settings, Listeners::grpc(listener), std::future::pending()));
    let mut cluster = Cluster { url, state, coordinator, workers: Vec::new(), stop };
    for i in 0..workers {
        cluster.add_worker(&format!("w{i}"), job.token.as_deref(), cram_proto::PROTOCOL_VERSION);
    }
    cluster
}

impl Cluster {
    /// Starts one more worker of one thread, named `name`, announcing `protocol`.
    pub fn add_worker(&mut self, name: &str, token: Option<&str>, protocol: u32) {
        let settings = worker_settings(&self.url, name, token, protocol);
        let mut stop = self.stop.subscribe();
        self.workers.push(tokio::spawn(cram_worker::run(settings, async move {
            let _ = stop.wait_for(|s| *s).await;
        })));
    }

    /// Waits for the job's answer (at most `secs` seconds), then for the workers; the
    /// state directory is removed.
    pub async fn finish(self, secs: u64) -> (Finished, Vec<Result<cram_worker::Summary, WorkerError>>) {
        let state = self.state.clone();
        let out = self.finish_keeping_state(secs).await;
        let _ = std::fs::remove_dir_all(state.parent().unwrap());
        out
    }

    /// The message of the error the coordinator stops with (within `secs` seconds).
    pub async fn coordinator_error(self, secs: u64) -> String {
        let stopped = tokio::time::timeout(Duration::from_secs(secs), self.coordinator)
            .await
            .expect("the coordinator stops in time")
            .expect("the coordinator task does not panic");
        self.stop.send_replace(true);
        match stopped {
            Ok(f) => panic!("the coordinator answered {:?}", f.solution),
            Err(e) => e.to_string(),
        }
    }

    /// [`Cluster::finish`], the state directory kept (the caller removes it).
    pub async fn finish_keeping_state(self, secs: u64) -> (Finished, Vec<Result<cram_worker::Summary, WorkerError>>) {
        let finished = tokio::time::timeout(Duration::from_secs(secs), self.coordinator)
            .await
            .expect("the job finishes in time")
            .expect("the coordinator task does not panic")
            .expect("the coordinator answers");
        self.stop.send_replace(true);
        let mut out = Vec::new();
        for w in self.workers {
            out.push(w.await.expect("a worker task does not panic"));
        }
        (finished, out)
    }
}

/// The settings of one worker of one thread with its own table, no cache.
pub fn worker_settings(url: &str, name: &str, token: Option<&str>, protocol: u32) -> cram_worker::Settings {
    cram_worker::Settings {
        url: url.to_string(),
        name: name.to_string(),
        threads: 1,
        cache_dir: None,
        dbs: Arc::new(DbSet::default()),
        tt_bytes: 64 << 20,
        token: token.map(str::to_string),
        protocol,
        build: cram_proto::BUILD_ID.to_string(),
        progress: Duration::from_secs(3600),
        shared: None,
        metrics: None,
        tls_ca: None,
        proved: cram_worker::ProvedLog::default(),
        owners: None,
    }
}

/// The engine's answer.
pub fn engine(spec: &str, mode: Mode, pairing: bool) -> Solution {
    let mut s = Solver::new(&Config { tt_bytes: 64 << 20, pairing }, Arc::new(DbSet::default()));
    s.solve(&Board::parse(spec).unwrap(), mode).unwrap()
}
