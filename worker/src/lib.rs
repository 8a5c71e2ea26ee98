//! The cram cluster worker: registers with a coordinator, then each search thread leases a
//! unit, answers it from the cache or by searching with the engine, and submits what it
//! learnt; a separate heartbeat task reports progress (the search never blocks it) and
//! stops units the coordinator cancels.
//!
//! Layout:
//!
//! - [`link`]: the coordinator link, a stub the tasks call and an actor that owns the
//!   registration; backoff and the handling of failures in one place.
//! - [`search`]: a search thread (lease, answer, prove, submit).
//! - [`memory`]: what the searches know beyond one unit (shared tables, loaded facts,
//!   proofs kept).
//! - [`underway`]: the units being searched, what heartbeats report.
//! - [`cache`]: the sled cache of answers; [`metrics`]: Prometheus text and the summary
//!   line.
//! - [`owners_model`]: a model of knowledge with owners, for workers in one process, that
//!   measures what such knowledge would save.
//!
//! The worker exits when told the job is done, or on shutdown after handing its units back
//! at once. A refusal (other protocol, build or databases, wrong token) is final; so is a
//! disconnection (the coordinator found its results wrong), after which the cache is moved
//! aside.

#![warn(missing_docs)]

pub mod cache;
pub mod link;
pub mod memory;
pub mod metrics;
pub mod owners_model;
pub mod search;
pub mod underway;

pub use memory::{shared_tables, ProvedLog};

use crate::cache::Cache;
use crate::link::{CallError, Identity, Link};
use crate::memory::Memory;
use crate::underway::UnderWay;
use cram_engine::solver::SharedTables;
use cram_engine::{DbSet, Solution};
use cram_proto::pb;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Everything a worker run needs.
pub struct Settings {
    /// The coordinator's URL, `http://host:port`.
    pub url: String,
    /// A name for logs and status (the host name by default).
    pub name: String,
    /// Search threads, each leasing its own units.
    pub threads: usize,
    /// Directory of the answer cache (none: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Databases the search uses.
    pub dbs: Arc<DbSet>,
    /// Transposition table memory over all threads.
    pub tt_bytes: usize,
    /// Bearer token.
    pub token: Option<String>,
    /// Protocol version announced (tests announce a wrong one).
    pub protocol: u32,
    /// Build announced.
    pub build: String,
    /// Interval of the periodic summary line.
    pub progress: Duration,
    /// Transposition tables shared by the search threads of this process (see
    /// [`shared_tables`]); none: each thread has its own.
    pub shared: Option<SharedTables>,
    /// Serve Prometheus metrics (`/metrics`) over HTTP here.
    pub metrics: Option<std::net::SocketAddr>,
    /// The certificate authority (PEM) that signed a TLS coordinator's certificate.
    pub tls_ca: Option<Vec<u8>>,
    /// Facts of certified units' proofs that the coordinator kept, shared by the search
    /// threads of this process (and by the workers of one process that share `shared`).
    pub proved: ProvedLog,
    /// The model of knowledge with owners the searches ask and tell (workers in one
    /// process only, to measure it; [`owners_model`]). Never in a certified job: the facts
    /// it hands a search are not proved.
    pub owners: Option<owners_model::OwnersModel>,
}

/// What a worker run did.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Units answered by search.
    pub searched: u64,
    /// Units answered from the cache.
    pub from_cache: u64,
    /// Units that ran out of budget.
    pub unfinished: u64,
    /// Search nodes.
    pub nodes: u64,
    /// The job's answer, when the coordinator said it is done.
    pub done: Option<Solution>,
    /// Facts this worker sent for the others (knowledge shared across machines).
    pub facts_shared: u64,
    /// Facts of other workers this worker loaded into its tables.
    pub facts_loaded: u64,
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The coordinator refused this worker for good (version, build, databases, token).
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The coordinator disconnected this worker: its results were found wrong.
    #[error("the coordinator disconnected this worker: {0}")]
    Disconnected(String),
    /// The cache or the settings cannot be used.
    #[error("{0}")]
    Setup(String),
    /// A database was found damaged during a search (its unit's result was not sent).
    #[error("{0}")]
    Database(String),
}

/// The worker: what its tasks share.
pub struct Worker {
    settings: Settings,
    link: Link,
    underway: UnderWay,
    memory: Memory,
    cache: Option<Cache>,
    /// Raised on shutdown or when the job is done.
    stop: watch::Sender<bool>,
    done: Mutex<Option<Solution>>,
    summary: Mutex<Summary>,
    started: Instant,
}

impl Worker {
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`, or less if the worker is stopping; false when stopping.
    async fn pause(&self, d: Duration) -> bool {
        let mut rx = self.stop.subscribe();
        if *rx.borrow() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = rx.wait_for(|s| *s) => false,
        }
    }

    fn finish(&self, done: &pb::Done) {
        match cram_proto::done_from_pb(done) {
            Ok(a) => {
                tracing::info!(outcome = a.outcome.describe(), nimber = ?a.nimber, "the coordinator says the job is solved");
                *self.done.lock().expect("done lock") = Some(a);
            }
            Err(e) => tracing::error!(
                "the coordinator says the job is solved, with an answer this worker cannot read: {}",
                e.message()
            ),
        }
        self.stop.send_replace(true);
    }

    /// Stops the worker: every search, and the calls under way.
    fn stop_all(&self) {
        self.stop.send_replace(true);
        self.underway.cancel_all();
    }
}

/// Runs a worker until the job is done, a refusal, or `shutdown` (then units are handed back).
pub async fn run(settings: Settings, shutdown: impl Future<Output = ()>) -> Result<Summary, WorkerError> {
    let cache = match &settings.cache_dir {
        Some(dir) => Some(Cache::open(dir).map_err(|e| WorkerError::Setup(format!("cache: {e}")))?),
        None => None,
    };
    if let Some(c) = &cache {
        tracing::info!(regions = c.len(), "answer cache opened");
    }
    tracing::info!(databases = %settings.dbs.describe(), fingerprint = %settings.dbs.fingerprint(), "endgame databases");
    // The worker's secret: the coordinator knows it by this, and nothing else can speak for it.
    let secret = cram_proto::new_worker_secret();
    let client = cram_proto::client(&settings.url, settings.token.as_deref(), &secret, settings.tls_ca.as_deref())
        .map_err(WorkerError::Setup)?;
    let threads = settings.threads.max(1);
    let (stop, stopped) = watch::channel(false);
    let identity = Identity {
        protocol: settings.protocol,
        build: settings.build.clone(),
        db_fingerprint: settings.dbs.fingerprint(),
        name: settings.name.clone(),
        threads: threads as u32,
    };
    let (link, actor) = link::channel(client, &settings.url, identity, stopped);
    let memory = Memory::new(
        settings.dbs.clone(),
        threads,
        settings.tt_bytes,
        settings.shared.clone(),
        settings.proved.clone(),
        settings.owners.clone(),
    );
    let worker = Arc::new(Worker {
        settings,
        link,
        underway: UnderWay::default(),
        memory,
        cache,
        stop,
        done: Mutex::new(None),
        summary: Mutex::new(Summary::default()),
        started: Instant::now(),
    });
    let actor = tokio::spawn(actor.run());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..threads {
        tasks.spawn(search::search_loop(worker.clone(), i));
    }
    tasks.spawn(heartbeat_loop(worker.clone()));
    tasks.spawn(metrics::summary_loop(worker.clone()));
    if let Some(addr) = worker.settings.metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| WorkerError::Setup(format!("--metrics {addr}: {e}")))?;
        tracing::info!(addr = %listener.local_addr().map_or(addr, |a| a), "serving metrics over HTTP");
        tasks.spawn(metrics::serve(worker.clone(), listener));
    }
    tokio::pin!(shutdown);
    let mut fatal = None;
    loop {
        tokio::select! {
            _ = &mut shutdown, if !worker.stopping() => {
                tracing::info!("shutdown signal: handing units back and stopping");
                // Stopping first: no thread leases anything new while the units go back.
                worker.stop.send_replace(true);
                worker.link.release(worker.underway.names(), true).await;
                worker.stop_all();
            }
            next = tasks.join_next() => match next {
                None => break,
                Some(Ok(Err(e))) => {
                    fatal.get_or_insert(e);
                    worker.stop_all();
                }
                Some(Ok(Ok(()))) => {
                    if worker.stopping() || worker.link.solved() {
                        worker.stop_all();
                    }
                }
                Some(Err(e)) => {
                    fatal.get_or_insert(WorkerError::Setup(format!("a worker task failed: {e}")));
                    worker.stop_all();
                }
            },
        }
    }
    actor.abort();
    if let Some(e) = fatal {
        if let (WorkerError::Disconnected(_), Some(c)) = (&e, &worker.cache) {
            // Found wrong: what this worker knows is suspect, its cache first.
            c.move_aside("distrusted");
        }
        return Err(e);
    }
    let mut summary = worker.summary.lock().expect("summary lock").clone();
    summary.done = *worker.done.lock().expect("done lock");
    tracing::info!(
        searched = summary.searched,
        from_cache = summary.from_cache,
        unfinished = summary.unfinished,
        nodes = summary.nodes,
        facts_shared = summary.facts_shared,
        facts_loaded = summary.facts_loaded,
        "worker finished"
    );
    Ok(summary)
}

/// Reports the progress of the units being searched and stops those the coordinator
/// cancels.
async fn heartbeat_loop(worker: Arc<Worker>) -> Result<(), WorkerError> {
    loop {
        let every = worker.link.current().await.map_or(Duration::from_millis(500), |r| r.heartbeat);
        if !worker.pause(every).await {
            return Ok(());
        }
        let units = worker.underway.progress();
        if units.is_empty() {
            continue;
        }
        // Searches go on while the coordinator is away; only refusals end the worker.
        let reply = match worker.link.heartbeat(units).await {
            Ok(r) => r,
            Err(CallError::Fatal(e)) => return Err(e),
            Err(CallError::Stopped) => return Ok(()),
        };
        if reply.done {
            // The job is solved: every search stops, and the threads' next lease brings
            // the answer (or, the coordinator gone meanwhile, ends them).
            tracing::debug!("the coordinator says the job is solved; stopping the searches");
            worker.link.heard_solved();
            worker.underway.cancel_all();
            continue;
        }
        for id in &reply.cancel {
            if worker.underway.cancel(id) {
                tracing::debug!(unit = %id, "the coordinator cancelled the unit");
            }
        }
    }
}
