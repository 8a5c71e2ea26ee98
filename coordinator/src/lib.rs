//! The cram cluster coordinator: turns a job (a position and a mode) into work units,
//! serves them to workers over gRPC, checks and merges their results exactly, and keeps
//! everything it learns in a state directory so that a restarted coordinator resumes.
//!
//! Layout, from the inside out:
//!
//! - [`top`]: the top of the search, deciding the root from the facts known so far and
//!   naming the open questions (units) in the order a single search would take them.
//! - [`scheduler`]: the job's state apart from I/O, from named parts (units and leases,
//!   workers, the ledger of results and checks, shared knowledge, status); changed by
//!   logged [`events`] only.
//! - [`events`]: the event log's lines; [`store`]: the log (truth) and the sled index on
//!   disk, durable before a result is acknowledged, and the state directory's lock.
//! - [`job`]: the one task that owns the scheduler and the store, fed by [`request`]s; it
//!   runs the coordinator's own searches ([`settle`]), reports progress ([`report`]) and,
//!   in a certified job, checks each result's proof ([`prove`]) and assembles the
//!   certificate ([`certify`]).
//! - [`service`]: the gRPC glue and the token check, behind the [`gate`] that limits each
//!   call's size by its method; [`web`]: the status page, its JSON and the Prometheus
//!   metrics over HTTP.
//! - [`settings`]: what a run is told; [`outcome`]: what it ends with; [`import`]: the
//!   results of an earlier job on the same position that a new job starts from.
//!
//! [`run`] wires them together: it opens the state and replays its log, then serves until
//! the root is decided (or a shutdown signal arrives), and returns the answer.

#![warn(missing_docs)]

pub mod certify;
pub mod events;
pub mod gate;
pub mod import;
pub mod job;
pub mod outcome;
pub mod prove;
pub mod report;
pub mod request;
pub mod scheduler;
pub mod service;
pub mod settings;
pub mod settle;
pub mod store;
pub mod top;
pub mod web;

pub use outcome::{CertificateWritten, CoordError, Finished};
pub use settings::{CertificateTarget, Listeners, Settings, Share, Split};

use crate::events::Event;
use crate::job::Job;
use crate::request::JobHandle;
use crate::scheduler::Scheduler;
use crate::service::{check_token, Service};
use crate::store::Store;
use crate::top::{depth_for_units, Top};
use cram_proto::pb::coordinator_server::CoordinatorServer;
use std::future::Future;
use std::time::{Duration, Instant};

/// The log target of a job's progress lines and milestones (the periodic summary, the
/// answer, the certificate's assembly): what `cram solve --workers` shows of its coordinator
/// without the per-worker lines.
pub const PROGRESS: &str = "cram_coordinator::progress";

/// Calls one connection may carry at once (a worker makes one per search thread, and
/// heartbeats).
const MAX_CALLS_PER_CONNECTION: u32 = 256;

/// The longest a call may take, proofs of hundreds of megabytes included.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the servers may finish the calls under way once the job has ended.
const DRAIN: Duration = Duration::from_secs(5);

/// A finished log's answer is not taken as a claim: the replay of its results must reach
/// the same answer, from the same results (the digest in the `done` line), at the split
/// depth of the run that found it (`sched`: the replay at this run's depth, `depth`).
fn check_answer(
    sched: &mut Scheduler,
    depth: u32,
    settings: &Settings,
    replay: &events::Replay,
    store: &Store,
) -> Result<(), CoordError> {
    let Some(done) = &replay.done else { return Ok(()) };
    let at = replay.events.iter().position(|e| matches!(e, Event::Done(_))).expect("the log has its done line");
    let corrupt =
        |reason: String| CoordError::Store(store::StoreError::Corrupt { path: store.log_path(), line: at + 1, reason });
    let found_at = replay.events[..at].iter().rev().find_map(|e| match e {
        Event::Start { split_depth, .. } => *split_depth,
        _ => None,
    });
    // Only what came before the answer: results and verdicts that arrive while the
    // coordinator lingers are logged after it and are not what it rests on.
    let before = &replay.events[..at];
    let mut other;
    let replayed = if found_at.is_some_and(|d| d != depth) || at + 1 < replay.events.len() {
        other = scheduler(settings, found_at.unwrap_or(depth));
        other.replay(before);
        &mut other
    } else {
        sched
    };
    let logged = cram_engine::Solution { outcome: done.outcome, nimber: done.nimber };
    match replayed.answer() {
        Some(a) if a == logged => {}
        // A log of an earlier build used more of each result than the answer to its
        // question; its replay may stop short of the answer, which it did not seal.
        None if done.rests_on.is_none() => {
            tracing::warn!("the log's answer comes from an earlier build whose results this build uses less of; it is shown as logged")
        }
        derived => {
            return Err(corrupt(format!(
                "the log's answer ({} {:?}) is not what its results give ({derived:?})",
                logged.outcome, logged.nimber
            )))
        }
    }
    match &done.rests_on {
        Some(d) if *d != replayed.results_digest() => {
            Err(corrupt("the answer's digest is not that of the results the log holds".into()))
        }
        _ => Ok(()),
    }
}

/// What `--import source` adds to the job in the state directory: the earlier job's results
/// when the job has not started yet; nothing when they were taken at its first start.
/// Reads the job's log without touching it ([`Store::open`] checks it again).
fn to_import(source: &std::path::Path, settings: &Settings) -> Result<Option<import::Import>, CoordError> {
    let log = store::read_log(&settings.state_dir.join(store::LOG_FILE))?;
    let events = &log.replay.events;
    if let Some(Event::Imported { from, results }) = events.iter().find(|e| matches!(e, Event::Imported { .. })) {
        tracing::info!(%from, results, "the job's log holds the results imported when it first started");
        return Ok(None);
    }
    if events.iter().any(|e| matches!(e, Event::Start { .. })) {
        return Err(CoordError::ImportTooLate(settings.state_dir.clone()));
    }
    let proof_memory = settings.certificate.as_ref().map_or(prove::DEFAULT_PROOF_MEMORY, |c| c.proof_memory);
    Ok(Some(import::read(source, &settings.job_record(), proof_memory)?))
}

/// Writes the results `found` into a job that has not started yet (its log and `replay`).
async fn import(
    found: import::Import,
    settings: &Settings,
    store: &mut Store,
    replay: &mut events::Replay,
) -> Result<(), CoordError> {
    let taken = found.results.len();
    let head = Event::Imported { from: found.source.clone(), results: found.results.len() as u64 };
    store.append(&head).await?;
    replay.events.push(head);
    let (mut copied, mut missing) = (0u64, 0u64);
    for (mut r, proof) in found.results {
        let mut events = Vec::with_capacity(2);
        match proof {
            Some(import::CheckedProof { bytes, facts }) => {
                r.proof = Some(store.save_proof(bytes).await?);
                copied += 1;
                events.push(Event::Proved { unit: r.unit, worker: r.worker.clone(), facts });
            }
            // In a certified job its unit is searched and proved again.
            None => {
                missing += u64::from(settings.certificate.is_some());
                r.proof = None;
            }
        }
        events.insert(0, Event::Result(r));
        for event in events {
            store.append(&event).await?;
            replay.events.push(event);
        }
    }
    tracing::info!(target: PROGRESS, from = %found.source, results = taken, proofs_copied = copied, proofs_to_remake = missing, "imported the results of an earlier job on this position");
    Ok(())
}

/// The job's scheduler at split depth `depth`, before any event.
fn scheduler(settings: &Settings, depth: u32) -> Scheduler {
    let plain = settings.certificate.is_some();
    let top = Top::new(&settings.board, settings.mode, settings.pairing, settings.dbs.clone(), depth, plain);
    Scheduler::new(top, settings.mode, settings.lease, settings.unit_nodes, settings.checks, plain)
}

/// Runs the job on `listener` until its answer is known or `shutdown` completes.
pub async fn run(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<Finished, CoordError> {
    let Listeners { grpc: listener, http, metrics } = listeners;
    // Any client may be hostile: connections of clients that vanished (a worker's machine
    // lost) are found by pings and closed; a connection carries a bounded number of calls
    // at once, a call a bounded time, and resets are bounded as h2 bounds them by default.
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(cram_proto::KEEPALIVE))
        .http2_keepalive_timeout(Some(cram_proto::KEEPALIVE))
        .max_concurrent_streams(MAX_CALLS_PER_CONNECTION)
        .concurrency_limit_per_connection(MAX_CALLS_PER_CONNECTION as usize)
        .http2_max_pending_accept_reset_streams(Some(20))
        .http2_max_local_error_reset_streams(Some(1024))
        .timeout(CALL_TIMEOUT);
    // TLS first: a certificate or key that cannot be used stops the coordinator before it
    // touches its state.
    if let Some((cert, key)) = &settings.tls {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        let tls = tonic::transport::ServerTlsConfig::new().identity(identity).timeout(HANDSHAKE_TIMEOUT);
        builder = builder.tls_config(tls).map_err(|e| CoordError::Tls(cram_proto::why(&e)))?;
    }
    let started = Instant::now();
    // An import is read, and refused if it must be, before the state is touched.
    let found = match &settings.import {
        Some(source) => to_import(source, &settings)?,
        None => None,
    };
    let (mut store, mut replay) = Store::open(&settings.state_dir, &settings.job_record())?;
    if let Some(found) = found {
        import(found, &settings, &mut store, &mut replay).await?;
    }
    let depth = match settings.split {
        Split::Depth(d) => d,
        Split::TargetUnits(n) => depth_for_units(&settings.board, n),
    };
    let mut sched = scheduler(&settings, depth);
    sched.replay(&replay.events);
    let grants = store.grants()?;
    if replay.done.is_none() {
        for e in sched.owed_verdicts() {
            tracing::warn!(event = ?e, "the last run stopped between its own search and the distrust it showed; logging the distrust now");
            store.append(&e).await?;
            sched.apply(&e);
            replay.events.push(e);
        }
    }
    check_answer(&mut sched, depth, &settings, &replay, &store)?;
    let resumed = replay.events.iter().filter(|e| matches!(e, Event::Result(_))).count();
    store.append(&Event::Start { at: cram_proto::unix_secs(), split_depth: Some(depth) }).await?;
    let addr = listener.local_addr().map_err(|e| CoordError::Serve(e.to_string()))?;
    tracing::info!(
        job = %settings.spec,
        mode = %settings.mode,
        %addr,
        state = %settings.state_dir.display(),
        split_depth = depth,
        unit_nodes = settings.unit_nodes,
        resumed_results = resumed,
        databases = %settings.dbs.describe(),
        "coordinator serving"
    );
    let token = settings.token.clone();
    let job = Job::new(sched, store, settings, started, &replay.events, grants);
    let (requests, inbox) = tokio::sync::mpsc::channel(256);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (web_stop, _) = tokio::sync::watch::channel(false);
    let mut web = Vec::new();
    for (listener, pages) in [(http, web::Pages::All), (metrics, web::Pages::Metrics)] {
        let Some(listener) = listener else { continue };
        if let Ok(addr) = listener.local_addr() {
            let what = if pages == web::Pages::All { "the status page and metrics" } else { "metrics" };
            tracing::info!(target: PROGRESS, %addr, "serving {what} over HTTP");
        }
        let mut stop = web_stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        web.push(tokio::spawn(web::serve(listener, pages, JobHandle(requests.clone()), stopped)));
    }
    let server =
        CoordinatorServer::new(Service(JobHandle(requests))).max_decoding_message_size(cram_proto::MAX_MESSAGE_BYTES);
    let service = gate::Gate(tonic::service::interceptor::InterceptedService::new(server, check_token(token)));
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<CoordinatorServer<Service>>().await;
    let mut server =
        tokio::spawn(builder.add_service(health_service).add_service(service).serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async {
                let _ = stop_rx.await;
            },
        ));
    let outcome = job.run(inbox, shutdown, replay.done).await;
    let _ = stop_tx.send(());
    web_stop.send_replace(true);
    // The servers finish the calls under way, for a few seconds at most: a client that
    // holds a connection open (idle, never through its handshake, watching health) does
    // not keep the coordinator from ending.
    let drain = async {
        for w in &mut web {
            if let Ok(Err(e)) = w.await {
                tracing::warn!("the HTTP server stopped with an error: {e}");
            }
        }
        (&mut server).await
    };
    let drained = tokio::time::timeout(DRAIN, drain).await;
    match drained {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(CoordError::Serve(e.to_string())),
        Ok(Err(e)) => return Err(CoordError::Serve(e.to_string())),
        Err(_) => {
            tracing::info!("connections still open {} s after the end; closing them", DRAIN.as_secs());
            web.iter().for_each(|w| w.abort());
            server.abort();
        }
    }
    outcome
}
