//! The cram cluster coordinator: turns a job (a position and a mode) into work units,
//! serves them to workers over gRPC, checks and merges their results exactly, and keeps
//! everything it learns in a state directory so that a restarted coordinator resumes.
//!
//! - [`top`]: the top of the search, deciding the root from the facts known so far and
//!   naming the open questions (units) in the order a single search would take them.
//! - [`state`]: the scheduler — units, leases with attempt numbers, workers and their
//!   trust, results held and their checks; changed by logged events only.
//! - [`store`]: the event log (truth) and the sled index, both durable before a result
//!   is acknowledged; the state directory's lock.
//! - [`job`]: the one task that owns the scheduler and the store, fed by typed requests.
//! - [`service`]: the gRPC glue and the token check.
//! - [`web`]: the status page, its JSON and the Prometheus metrics, over HTTP.
//!
//! [`run`] ties them together: it opens the state and replays its log, then serves until
//! the root is decided (or a shutdown signal arrives), and returns the answer.

#![warn(missing_docs)]

pub mod job;
pub mod service;
pub mod state;
pub mod store;
pub mod top;
pub mod web;

use crate::job::Job;
use crate::service::{check_token, Service};
use crate::state::{Checks, Counters, Scheduler};
use crate::store::{Event, JobRecord, Store, StoreError};
use crate::top::{depth_for_units, Top};
use cram_engine::{Board, DbSet, Mode, Solution};
use cram_proto::pb::coordinator_server::CoordinatorServer;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The log target of a job's progress lines and milestones (the periodic summary, the
/// answer, the certificate's assembly): what `cram solve --workers` shows of its coordinator
/// without the per-worker lines.
pub const PROGRESS: &str = "cram_coordinator::progress";

/// How deep the coordinator expands the root before asking workers.
#[derive(Clone, Copy, Debug)]
pub enum Split {
    /// This many plies.
    Depth(u32),
    /// The least depth with at least this many distinct regions to ask about.
    TargetUnits(usize),
}

/// Everything a coordinator run needs.
pub struct Settings {
    /// The position.
    pub board: Board,
    /// The position as the user wrote it.
    pub spec: String,
    /// Nimber or outcome.
    pub mode: Mode,
    /// Use the half-turn pairing certificate (coordinator and workers).
    pub pairing: bool,
    /// Split depth or unit target.
    pub split: Split,
    /// Node budget of one unit before it comes back unfinished and is split.
    pub unit_nodes: u64,
    /// Lease length: a unit without a progressing heartbeat for this long is reissued.
    pub lease: Duration,
    /// How results are spot-checked.
    pub checks: Checks,
    /// Interval of the progress line.
    pub progress: Duration,
    /// Bearer token every call must carry.
    pub token: Option<String>,
    /// Databases (the coordinator settles database-sized regions; workers must match).
    pub dbs: Arc<DbSet>,
    /// After the answer, keep answering "done" this long so that polling workers exit.
    pub linger: Duration,
    /// The state directory.
    pub state_dir: PathBuf,
    /// Raised as soon as the answer is known, before the server stops (an in-process
    /// caller stops its workers with it).
    pub answered: Option<tokio::sync::watch::Sender<bool>>,
    /// Certify the answer: workers send proofs with their results, and the certificate is
    /// written here at the end (docs/certificates.md).
    pub certificate: Option<CertificateTarget>,
    /// Serve gRPC over TLS with this certificate (chain) and key, both PEM.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// What workers share with each other (knowledge across machines).
    pub share: Share,
}

/// Which facts workers send back to be handed to the other workers: those about regions
/// of at least `min_cells` cells that took at least `min_nodes` nodes (docs/cluster.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Least region size; 0: nothing is shared.
    pub min_cells: u32,
    /// Least search nodes the fact cost.
    pub min_nodes: u64,
}

impl Share {
    /// Nothing is shared (workers of one process share a table instead).
    pub const NONE: Share = Share { min_cells: 0, min_nodes: 0 };
    /// The default, chosen by measurement (docs/cluster.md#knowledge-shared-across-machines).
    pub const DEFAULT: Share = Share { min_cells: 24, min_nodes: 20_000 };
}

/// Shared facts handed to a worker with one lease, at most.
pub const SHARED_PER_LEASE: usize = 100_000;

/// Where a certified job's certificate goes, and the size of the regions left to the
/// checker (no facts for them).
#[derive(Clone, Debug)]
pub struct CertificateTarget {
    /// The certificate file.
    pub path: PathBuf,
    /// Regions of at most this many cells get no facts.
    pub small: u32,
}

/// Where the coordinator serves: gRPC for workers and clients, and optionally the status
/// page (with `/status.json` and `/metrics`) and a listener for `/metrics` only.
pub struct Listeners {
    /// The gRPC service.
    pub grpc: TcpListener,
    /// The status page, its JSON and the metrics (`--http`).
    pub http: Option<TcpListener>,
    /// The metrics only (`--metrics`).
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Only the gRPC service.
    pub fn grpc(listener: TcpListener) -> Listeners {
        Listeners { grpc: listener, http: None, metrics: None }
    }
}

/// A finished job.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The answer.
    pub solution: Solution,
    /// Search nodes over all units (all runs) and the coordinator's own small searches.
    pub nodes: u64,
    /// Wall time of this run in milliseconds (the stored time when the job was already done).
    pub millis: u64,
    /// Unit counters.
    pub counters: Counters,
    /// The certificate written, in a certified job.
    pub certificate: Option<CertificateWritten>,
}

/// A certificate a job wrote.
#[derive(Debug, Clone)]
pub struct CertificateWritten {
    /// Where.
    pub path: PathBuf,
    /// Facts it holds.
    pub facts: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Time to assemble, check and write it, in milliseconds.
    pub millis: u64,
}

/// Why a coordinator run stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// The state directory cannot be used or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The server failed.
    #[error("gRPC server: {0}")]
    Serve(String),
    /// The TLS certificate or key cannot be used.
    #[error("TLS: the certificate or key cannot be used: {0}")]
    Tls(String),
    /// The certificate could not be made (a proof is missing a fact it needs and the
    /// search for it failed, or the assembled certificate did not check).
    #[error("certificate: {0}")]
    Certificate(String),
    /// A shutdown signal arrived; the state is saved.
    #[error("stopped before the answer; the state in {0} is saved, start the same command to resume")]
    Stopped(PathBuf),
}

impl Settings {
    fn job_record(&self) -> JobRecord {
        JobRecord {
            spec: self.spec.clone(),
            rows: self.board.rows(),
            cols: self.board.cols(),
            empty: format!("{:x}", self.board.empty()),
            mode: mode_name(self.mode).into(),
            pairing: self.pairing,
            build: cram_proto::BUILD_ID.into(),
            certificate_small: self.certificate.as_ref().map(|c| c.small),
        }
    }
}

/// `nimber` or `outcome`.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Nimber => "nimber",
        Mode::Outcome => "outcome",
    }
}

/// Runs the job on `listener` until its answer is known or `shutdown` completes.
pub async fn run(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<Finished, CoordError> {
    let Listeners { grpc: listener, http, metrics } = listeners;
    // TLS first: a certificate or key that cannot be used stops the coordinator before it
    // touches its state.
    let mut builder = tonic::transport::Server::builder();
    if let Some((cert, key)) = &settings.tls {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| CoordError::Tls(cram_proto::why(&e)))?;
    }
    let started = Instant::now();
    let (mut store, replay) = Store::open(&settings.state_dir, &settings.job_record())?;
    let depth = match settings.split {
        Split::Depth(d) => d,
        Split::TargetUnits(n) => depth_for_units(&settings.board, n),
    };
    let plain = settings.certificate.is_some();
    let top = Top::new(&settings.board, settings.mode, settings.pairing, settings.dbs.clone(), depth, plain);
    let mut sched = Scheduler::new(top, settings.mode, settings.lease, settings.checks);
    sched.replay(&replay.events);
    store.check_index(&sched.index_facts())?;
    let resumed = replay.events.iter().filter(|e| matches!(e, Event::Result(_))).count();
    store.append(&Event::Start { at: cram_proto::unix_secs() }).await?;
    let addr = listener.local_addr().map_err(|e| CoordError::Serve(e.to_string()))?;
    tracing::info!(
        job = %settings.spec,
        mode = mode_name(settings.mode),
        %addr,
        state = %settings.state_dir.display(),
        split_depth = depth,
        unit_nodes = settings.unit_nodes,
        resumed_results = resumed,
        databases = %settings.dbs.describe(),
        "coordinator serving"
    );
    let token = settings.token.clone();
    let job = Job::new(sched, store, settings, started);
    let (requests, inbox) = tokio::sync::mpsc::channel(256);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (web_stop, _) = tokio::sync::watch::channel(false);
    let mut web = Vec::new();
    for (listener, pages) in [(http, web::Pages::All), (metrics, web::Pages::Metrics)] {
        let Some(listener) = listener else { continue };
        if let Ok(addr) = listener.local_addr() {
            let what = if pages == web::Pages::All { "the status page and metrics" } else { "metrics" };
            tracing::info!(%addr, "serving {what} over HTTP");
        }
        let mut stop = web_stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        web.push(tokio::spawn(web::serve(listener, pages, requests.clone(), stopped)));
    }
    let server = CoordinatorServer::new(Service(requests)).max_decoding_message_size(cram_proto::MAX_MESSAGE_BYTES);
    let service = tonic::service::interceptor::InterceptedService::new(server, check_token(token));
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<CoordinatorServer<Service>>().await;
    let server = tokio::spawn(builder.add_service(health_service).add_service(service).serve_with_incoming_shutdown(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        async {
            let _ = stop_rx.await;
        },
    ));
    let outcome = job.run(inbox, shutdown, replay.done).await;
    let _ = stop_tx.send(());
    web_stop.send_replace(true);
    for w in web {
        if let Ok(Err(e)) = w.await {
            tracing::warn!("the HTTP server stopped with an error: {e}");
        }
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(CoordError::Serve(e.to_string())),
        Err(e) => return Err(CoordError::Serve(e.to_string())),
    }
    outcome
}
