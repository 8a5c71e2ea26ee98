//! The cram cluster coordinator: turns a job (a position and a mode) into work units,
//! serves them to workers over gRPC, merges their results exactly, and keeps everything
//! it learns in a state directory so that a restarted coordinator resumes the job.
//!
//! - [`top`]: the top of the search, deciding the root from the facts known so far and
//!   naming the open questions (units) in the order a single search would take them.
//! - [`state`]: the scheduler — units, leases with attempt numbers, workers, counters.
//! - [`store`]: the event log (truth) and the sled index, both durable before a result
//!   is acknowledged.
//! - [`service`]: the gRPC glue and the token check.
//!
//! [`run`] ties them together: it resumes or creates the job, serves until the root is
//! decided (or a shutdown signal arrives), logs a progress line periodically, and returns
//! the answer.

#![warn(missing_docs)]

pub mod service;
pub mod state;
pub mod store;
pub mod top;

use crate::service::{check_token, Service, Shared};
use crate::state::{Counters, Scheduler};
use crate::store::{DoneRecord, Event, JobRecord, Store, StoreError};
use crate::top::{depth_for_units, Ask, Top};
use cram_engine::{Board, DbSet, Mode, Outcome, Solution};
use cram_proto::pb::coordinator_server::CoordinatorServer;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

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
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<Finished, CoordError> {
    let started = Instant::now();
    let (mut store, replay) = Store::open(&settings.state_dir, &settings.job_record())?;
    let depth = match settings.split {
        Split::Depth(d) => d,
        Split::TargetUnits(n) => depth_for_units(&settings.board, n),
    };
    let top = Top::new(&settings.board, settings.mode, settings.pairing, settings.dbs.clone(), depth);
    let mut sched = Scheduler::new(top, settings.mode, settings.lease);
    for event in &replay.events {
        if let Event::Result(r) = event {
            let (region, query) = cram_proto::parse_unit_id(&r.unit).expect("the replay checked unit names");
            let top = sched.top_mut();
            top.report(region, r.facts());
            if !r.finished {
                top.expand(region);
            }
            sched.restore_recorded(Ask { region, query }, r.finished);
            sched.count_result(r.finished, r.nodes, r.from_cache);
        }
    }
    let resumed = replay.recorded.len();
    store.append(&Event::Start { at: cram_proto::unix_secs() }).await?;
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        sched: Mutex::new(sched),
        store: tokio::sync::Mutex::new(store),
        job: settings.spec.clone(),
        pairing: settings.pairing,
        unit_nodes: settings.unit_nodes,
        lease: settings.lease,
        db_fingerprint: settings.dbs.fingerprint(),
        started,
        rate: Mutex::new(0.0),
        fatal: fatal_tx,
        changed: tokio::sync::Notify::new(),
    });
    let addr = listener.local_addr().map_err(|e| CoordError::Serve(e.to_string()))?;
    tracing::info!(
        job = %settings.spec,
        mode = mode_name(settings.mode),
        %addr,
        state = %settings.state_dir.display(),
        split_depth = depth,
        unit_nodes = settings.unit_nodes,
        resumed_results = resumed,
        "coordinator serving"
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let service = CoordinatorServer::with_interceptor(Service(shared.clone()), check_token(settings.token.clone()));
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<CoordinatorServer<Service>>().await;
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(listener), async {
                let _ = stop_rx.await;
            }),
    );
    let outcome = supervise(&settings, &shared, &mut fatal_rx, shutdown, replay.done.clone()).await;
    if outcome.is_ok() {
        tokio::time::sleep(settings.linger).await;
    }
    let _ = stop_tx.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(CoordError::Serve(e.to_string())),
        Err(e) => return Err(CoordError::Serve(e.to_string())),
    }
    outcome
}

/// Expires leases, reports progress and waits for the answer, a fatal error or shutdown.
async fn supervise(
    settings: &Settings,
    shared: &Arc<Shared>,
    fatal: &mut mpsc::UnboundedReceiver<StoreError>,
    shutdown: impl Future<Output = ()>,
    already: Option<DoneRecord>,
) -> Result<Finished, CoordError> {
    let sched = || shared.sched.lock().expect("scheduler lock poisoned");
    if let Some(d) = already {
        let solution = Solution { outcome: Outcome::of(d.outcome == Outcome::First.as_str()), nimber: d.nimber };
        tracing::info!(job = %settings.spec, "the job in this state is already solved");
        return Ok(Finished { solution, nodes: d.nodes, millis: d.millis, counters: sched().counters.clone() });
    }
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_progress = Instant::now();
    let mut last_sample = (Instant::now(), 0u64);
    loop {
        tokio::select! {
            _ = &mut shutdown => {
                tracing::warn!("shutdown signal: stopping; the state is saved");
                return Err(CoordError::Stopped(settings.state_dir.clone()));
            }
            Some(e) = fatal.recv() => return Err(e.into()),
            _ = tick.tick() => {}
            _ = shared.changed.notified() => {}
        }
        let now = Instant::now();
        let (answer, total_nodes) = {
            let mut s = sched();
            for (unit, worker) in s.expire(now) {
                tracing::warn!(%unit, %worker, "lease expired without progress; reissuing the unit");
            }
            (s.answer(), s.nodes + s.in_flight_nodes())
        };
        if now.duration_since(last_sample.0) >= Duration::from_secs(1) {
            let dt = now.duration_since(last_sample.0).as_secs_f64();
            let rate = total_nodes.saturating_sub(last_sample.1) as f64 / dt;
            // Smoothed over about ten seconds: heartbeats report in-flight nodes in steps.
            let mut smooth = shared.rate.lock().expect("rate lock poisoned");
            *smooth = if *smooth == 0.0 { rate } else { 0.9 * *smooth + 0.1 * rate };
            last_sample = (now, total_nodes);
        }
        if let Some(solution) = answer {
            return finish(settings, shared, solution).await;
        }
        if now.duration_since(last_progress) >= settings.progress {
            last_progress = now;
            tracing::info!("{}", progress_line(shared));
        }
    }
}

/// The periodic one-line summary.
fn progress_line(shared: &Shared) -> String {
    let rate = *shared.rate.lock().expect("rate lock poisoned");
    let mut s = shared.sched.lock().expect("scheduler lock poisoned");
    let status = s.status(&shared.job, shared.started.elapsed(), rate, Instant::now());
    let u = &status.units;
    let eta = status.eta_secs.map_or_else(|| "unknown".to_string(), |e| format!("{e} s"));
    format!(
        "{}: units {}/{} done ({} leased, {} split, {} cached), {} nodes, {:.0} nodes/s, {} workers, root {}, ETA {}",
        status.job,
        u.counters.done,
        u.total,
        u.leased,
        u.counters.split,
        u.counters.from_cache,
        status.nodes,
        status.nodes_per_sec,
        status.workers.len(),
        status.root,
        eta
    )
}

/// Logs the answer as the job's last event and reports it.
async fn finish(settings: &Settings, shared: &Arc<Shared>, solution: Solution) -> Result<Finished, CoordError> {
    let (nodes, counters) = {
        let s = shared.sched.lock().expect("scheduler lock poisoned");
        (s.nodes + s.local_nodes(), s.counters.clone())
    };
    let millis = shared.started.elapsed().as_millis() as u64;
    let done = DoneRecord { outcome: solution.outcome.to_string(), nimber: solution.nimber, nodes, millis };
    shared.store.lock().await.append(&Event::Done(done)).await?;
    if let Some(a) = &settings.answered {
        a.send_replace(true);
    }
    tracing::info!(
        job = %settings.spec,
        outcome = solution.outcome.describe(),
        nimber = ?solution.nimber,
        units = counters.done,
        split = counters.split,
        nodes,
        seconds = millis as f64 / 1000.0,
        "job solved"
    );
    Ok(Finished { solution, nodes, millis, counters })
}
