//! The job's task: the one owner of the scheduler and the store. gRPC handlers send it
//! [`Request`]s, each with a oneshot reply, and it answers them one at a time, so nothing
//! else touches job state and no lock guards it (the shape of Ballista's scheduler event
//! loop and fishnet's actors).
//!
//! A result is judged, logged (fsynced, then indexed in sled) and applied before it is
//! acknowledged; a refusal or a distrust is logged the same way. Besides requests the task
//! expires leases, logs a progress line, runs the coordinator's own searches (settlements)
//! on a blocking thread one at a time, and notices the answer, after which it keeps
//! answering "done" for the linger period.

use crate::state::{Caller, LeaseOutcome, Scheduler, Submission, Verdict};
use crate::store::{DoneRecord, Event, Store, StoreError};
use crate::top::Ask;
use crate::{CertificateTarget, CertificateWritten, CoordError, Finished, Settings};
use cram_certificate::Shape;
use cram_engine::proof::Prover;
use cram_engine::region::AnyRegion;
use cram_engine::{Config, Interrupted, Solution, Solver};
use cram_proto::pb::{self, lease_reply};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tonic::Status;

/// A reply to one request.
pub type Reply<T> = oneshot::Sender<Result<T, Status>>;

/// What gRPC handlers ask of the job.
pub enum Request {
    /// A worker registers (already checked for form).
    Register(pb::RegisterRequest, Reply<pb::RegisterReply>),
    /// A search thread asks for a unit.
    Lease {
        /// The worker's id.
        worker: String,
        /// Which of its threads.
        slot: u32,
        /// Where the answer goes.
        reply: Reply<pb::LeaseReply>,
    },
    /// Progress of the units a worker searches: (unit, attempt, nodes).
    Heartbeat {
        /// The worker's id.
        worker: String,
        /// Its units.
        units: Vec<(Ask, u64, u64)>,
        /// Where the answer goes.
        reply: Reply<pb::HeartbeatReply>,
    },
    /// A result.
    Submit(Submission, Reply<pb::SubmitReply>),
    /// A worker hands units back (all it holds when empty), maybe leaving.
    Release {
        /// The worker's id.
        worker: String,
        /// The units.
        units: Vec<Ask>,
        /// It is shutting down.
        leaving: bool,
        /// Where the answer goes.
        reply: Reply<pb::ReleaseReply>,
    },
    /// The status document, as JSON.
    Status(Reply<pb::StatusReply>),
    /// The status document with the history of the run, as JSON (for the status page).
    Page(oneshot::Sender<String>),
    /// The Prometheus metrics, as text.
    Metrics(oneshot::Sender<String>),
}

/// One point of the status page's chart.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Sample {
    /// Seconds since this coordinator started.
    pub secs: f64,
    /// Units done by then.
    pub done: u64,
    /// Nodes per second then.
    pub nodes_per_sec: f64,
}

/// How often the chart's history is sampled, and how many samples it keeps (then every
/// other one is dropped and the interval doubles).
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
const MAX_SAMPLES: usize = 1000;

/// Memory of the transposition table of the coordinator's own searches.
const SETTLE_TT_BYTES: usize = 256 << 20;

/// What a settlement's search gives back: its solver (kept for the next one, with its
/// table), the value, the nodes and the milliseconds it took.
type Searched = (Solver, Result<u8, Interrupted>, u64, u64);

/// A settlement under way: the coordinator's own search of one region.
struct Settling {
    region: AnyRegion,
    cancel: Arc<AtomicBool>,
    task: JoinHandle<Searched>,
}

/// The job's task and everything it owns.
pub struct Job {
    /// The scheduler.
    pub sched: Scheduler,
    /// The durable state.
    pub store: Store,
    settings: Settings,
    started: Instant,
    rate: f64,
    /// When the last progress line was written, and the nodes searched by then.
    line_mark: (Instant, u64),
    answered: Option<(Finished, Instant)>,
    settling: Option<Settling>,
    /// The solver of the coordinator's own searches, between them.
    solver: Option<Solver>,
    /// The status page's chart, and the interval between its samples now.
    history: Vec<Sample>,
    sample_every: Duration,
}

impl Job {
    /// A job over a scheduler already brought up to date with the log.
    pub fn new(sched: Scheduler, store: Store, settings: Settings, started: Instant) -> Job {
        let searched = sched.nodes;
        Job {
            sched,
            store,
            settings,
            started,
            rate: 0.0,
            line_mark: (Instant::now(), searched),
            answered: None,
            settling: None,
            solver: None,
            history: Vec::new(),
            sample_every: SAMPLE_EVERY,
        }
    }

    /// Serves requests until the answer is known (and the linger period over), a fatal
    /// store error, or `shutdown`. `already`: the answer a finished log holds.
    pub async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request>,
        shutdown: impl Future<Output = ()>,
        already: Option<DoneRecord>,
    ) -> Result<Finished, CoordError> {
        if let Some(d) = already {
            tracing::info!(target: crate::PROGRESS, job = %self.settings.spec, "the job in this state is already solved");
            let solution = Solution { outcome: d.outcome, nimber: d.nimber };
            self.sched.decide(solution);
            let f = Finished {
                solution,
                nodes: d.nodes,
                millis: d.millis,
                counters: self.sched.counters.clone(),
                certificate: None,
            };
            self.answered = Some((f, Instant::now() + self.settings.linger));
        }
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last_progress = Instant::now();
        // From the nodes replayed, so that a resumed job's first rate is not their sum.
        let mut last_sample = (Instant::now(), self.searched_nodes());
        let mut last_point = Instant::now() - SAMPLE_EVERY;
        let outcome = loop {
            let linger_end = self.answered.as_ref().map(|(_, t)| *t);
            let step = tokio::select! {
                _ = &mut shutdown => {
                    tracing::warn!("shutdown signal: stopping; the state is saved");
                    break Err(CoordError::Stopped(self.settings.state_dir.clone()));
                }
                _ = tokio::time::sleep_until(linger_end.unwrap_or_else(Instant::now).into()), if linger_end.is_some() => {
                    break Ok(self.answered.take().expect("answered").0);
                }
                Some(req) = requests.recv() => self.handle(req).await,
                done = settlement_done(&mut self.settling) => self.settled(done).await,
                _ = tick.tick() => {
                    let now = Instant::now();
                    for (unit, worker) in self.sched.expire(now) {
                        tracing::warn!(%unit, %worker, "lease expired without progress; reissuing the unit");
                    }
                    self.sample_rate(now, &mut last_sample);
                    if now.duration_since(last_point) >= self.sample_every {
                        last_point = now;
                        self.sample_history();
                    }
                    if now.duration_since(last_progress) >= self.settings.progress {
                        last_progress = now;
                        tracing::info!(target: crate::PROGRESS, "{}", self.progress_line());
                    }
                    Ok(())
                }
            };
            if let Err(e) = step {
                break Err(e.into());
            }
            if let Err(e) = self.after_step().await {
                break Err(e.into());
            }
        };
        if let Some(s) = self.settling.take() {
            s.cancel.store(true, Ordering::Relaxed);
        }
        let mut finished = outcome?;
        if let Some(target) = self.settings.certificate.clone() {
            finished.certificate = Some(self.certify(&finished.solution, &target).await?);
        }
        Ok(finished)
    }

    /// Assembles the certificate of a certified job from its results' proofs (a proof
    /// that contradicts one already taken is left out, with a warning: the check decides),
    /// proves the top with the values the job holds, checks it with the independent
    /// checker, and only then writes it.
    async fn certify(
        &mut self,
        solution: &Solution,
        target: &CertificateTarget,
    ) -> Result<CertificateWritten, CoordError> {
        let started = Instant::now();
        let (proofs, dir) = (self.sched.proofs(), self.store.proof_dir());
        let values: Vec<(Shape, u8)> = self
            .sched
            .exact_values()
            .into_iter()
            .map(|(r, v)| {
                let (h, w) = r.dims();
                (Shape::of(h, w, r.dense()), v)
            })
            .collect();
        tracing::info!(target: crate::PROGRESS, proofs = proofs.len(), values = values.len(), "assembling the certificate");
        let (board, solution, target) = (self.settings.board, *solution, target.clone());
        let config = Config { tt_bytes: SETTLE_TT_BYTES, pairing: self.settings.pairing };
        let dbs = self.settings.dbs.clone();
        let made = tokio::task::spawn_blocking(move || -> Result<CertificateWritten, String> {
            let mut solver = Solver::new(&config, dbs);
            let mut prover = Prover::new(&mut solver, target.small);
            prover.preload_values(values);
            // One file at a time: the proofs of a long job can be many GiB in all. One
            // that cannot be read or does not import only costs time: what the
            // certificate then lacks, the prover proves by its own search.
            for name in &proofs {
                let imported =
                    crate::store::read_proof(&dir, name).map_err(|e| e.to_string()).and_then(|b| prover.import(&b));
                if let Err(e) = imported {
                    tracing::warn!(proof = %name, "a result's proof is left out of the certificate: {e}");
                }
            }
            let cert = prover.prove(&board, &solution).map_err(|e| e.to_string())?;
            drop(prover);
            tracing::info!(target: crate::PROGRESS, nodes = solver.nodes(), "the top proved (nodes: the assembly's own searches)");
            let bytes = cert.to_bytes();
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            cram_certificate::check(&bytes, threads)
                .map_err(|e| format!("the assembled certificate does not check: {e}"))?;
            let tmp = target.path.with_extension("tmp");
            std::fs::write(&tmp, &bytes)
                .and_then(|()| std::fs::rename(&tmp, &target.path))
                .map_err(|e| format!("{}: {e}", target.path.display()))?;
            Ok(CertificateWritten {
                path: target.path.clone(),
                facts: cert.facts.len() as u64,
                bytes: bytes.len() as u64,
                millis: started.elapsed().as_millis() as u64,
            })
        })
        .await
        .expect("the certificate builder does not panic")
        .map_err(CoordError::Certificate)?;
        tracing::info!(
            target: crate::PROGRESS,
            file = %made.path.display(),
            facts = made.facts,
            bytes = made.bytes,
            ms = made.millis,
            "certificate written and checked"
        );
        Ok(made)
    }

    /// Starts a settlement when one is due, and logs the answer once it is known.
    async fn after_step(&mut self) -> Result<(), StoreError> {
        if self.settling.is_none() && self.answered.is_none() {
            if let Some(region) = self.sched.next_settlement(Instant::now()) {
                self.start_settlement(region);
            }
        }
        if self.answered.is_none() {
            if let Some(solution) = self.sched.answer() {
                self.finish(solution).await?;
            }
        }
        Ok(())
    }

    fn start_settlement(&mut self, region: AnyRegion) {
        tracing::warn!(region = %region.key(), "settling a region by the coordinator's own search");
        let cancel = Arc::new(AtomicBool::new(false));
        let config = Config { tt_bytes: SETTLE_TT_BYTES, pairing: self.settings.pairing };
        let mut solver = self.solver.take().unwrap_or_else(|| Solver::new(&config, self.settings.dbs.clone()));
        solver.set_cancel(cancel.clone());
        let task = tokio::task::spawn_blocking(move || {
            let (started, before) = (Instant::now(), solver.nodes());
            let value = solver.nimber(region);
            let nodes = solver.nodes() - before;
            (solver, value, nodes, started.elapsed().as_millis() as u64)
        });
        self.settling = Some(Settling { region, cancel, task });
    }

    /// Logs and applies a settlement's result and the distrusts it shows.
    async fn settled(&mut self, done: Result<Searched, tokio::task::JoinError>) -> Result<(), StoreError> {
        let region = self.settling.take().expect("a settlement ran").region;
        let (solver, value, nodes, millis) =
            done.unwrap_or_else(|e| panic!("the coordinator's own search failed: {e}"));
        self.solver = Some(solver);
        let value = match value {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(region = %region.key(), "settlement stopped: {e}");
                self.sched.settlement_dropped();
                return Ok(());
            }
        };
        tracing::info!(region = %region.key(), value, nodes, "region settled by the coordinator's own search");
        for event in self.sched.settlement(region, value, nodes, millis) {
            self.log(&event).await?;
        }
        Ok(())
    }

    /// Logs an event that is not a result, applies it, and rebuilds the index after a
    /// distrust (its facts are gone from the replay).
    async fn log(&mut self, event: &Event) -> Result<(), StoreError> {
        match event {
            Event::Result(r) => {
                let (region, _) = cram_proto::parse_unit_id(&r.unit).expect("results name units");
                self.store.record(&region, r).await?;
            }
            e => self.store.append(e).await?,
        }
        self.sched.apply(event);
        if let Event::Distrust { worker, reason } = event {
            tracing::error!(%worker, %reason, "worker distrusted: its results are discarded and it is disconnected");
            self.store.check_index(&self.sched.index_facts())?;
        }
        Ok(())
    }

    /// Answers one request.
    async fn handle(&mut self, req: Request) -> Result<(), StoreError> {
        let now = Instant::now();
        match req {
            Request::Register(r, reply) => {
                let _ = reply.send(self.register(r, now));
            }
            Request::Lease { worker, slot, reply } => {
                let _ = reply.send(self.known(&worker, now).map(|()| self.lease(&worker, slot, now)));
            }
            Request::Heartbeat { worker, units, reply } => {
                let answer = self.known(&worker, now).map(|()| {
                    let cancel = units
                        .into_iter()
                        .filter(|&(ask, attempt, nodes)| !self.sched.heartbeat(&worker, ask, attempt, nodes, now))
                        .map(|(ask, ..)| ask.id())
                        .collect();
                    pb::HeartbeatReply {
                        cancel,
                        done: self.sched.answer().is_some(),
                        distrusted: self.sched.distrusted_workers(),
                    }
                });
                let _ = reply.send(answer);
            }
            Request::Submit(s, reply) => {
                if let Err(e) = self.known(&s.worker, now) {
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                match self.submit(s).await {
                    Ok(answer) => {
                        let _ = reply.send(answer);
                    }
                    Err(e) => {
                        tracing::error!("cannot record a result: {e}");
                        let _ = reply.send(Err(Status::unavailable("the coordinator cannot write its state")));
                        return Err(e);
                    }
                }
            }
            Request::Release { worker, units, leaving, reply } => {
                let answer = self.known(&worker, now).map(|()| {
                    let released = self.sched.release(&worker, &units);
                    tracing::info!(%worker, released, leaving, "worker released its units");
                    if leaving {
                        self.sched.leave(&worker);
                    }
                    pb::ReleaseReply { released }
                });
                let _ = reply.send(answer);
            }
            Request::Status(reply) => {
                let status = self.sched.status(&self.settings.spec, self.started.elapsed(), self.rate, now);
                let json = serde_json::to_string(&status).expect("status serialises");
                let _ = reply.send(Ok(pb::StatusReply { json }));
            }
            Request::Page(reply) => {
                let status = self.sched.status(&self.settings.spec, self.started.elapsed(), self.rate, now);
                let mut v = serde_json::to_value(&status).expect("status serialises");
                v["history"] = serde_json::to_value(&self.history).expect("samples serialise");
                let _ = reply.send(v.to_string());
            }
            Request::Metrics(reply) => {
                let _ = reply.send(self.metrics(now));
            }
        }
        Ok(())
    }

    /// Ok when `worker` is registered; NOT_FOUND or PERMISSION_DENIED otherwise.
    fn known(&mut self, worker: &str, now: Instant) -> Result<(), Status> {
        match self.sched.caller(worker, now) {
            Caller::Known => Ok(()),
            Caller::Unknown => Err(Status::not_found(format!(
                "unknown worker {worker:?}: register again (the coordinator may have restarted)"
            ))),
            Caller::Distrusted(reason) => Err(disconnected(&reason)),
        }
    }

    fn register(&mut self, r: pb::RegisterRequest, now: Instant) -> Result<pb::RegisterReply, Status> {
        let db = self.settings.dbs.fingerprint();
        let ours = (cram_proto::PROTOCOL_VERSION, cram_proto::BUILD_ID, db.as_str());
        if (r.protocol, r.build.as_str(), r.db_fingerprint.as_str()) != ours {
            let msg = format!(
                "worker {:?} has protocol {}, build {}, databases {}; this coordinator has protocol {}, build {}, databases {}",
                r.name, r.protocol, r.build, r.db_fingerprint, ours.0, ours.1, ours.2
            );
            tracing::warn!("refused a worker: {msg}");
            return Err(Status::failed_precondition(msg));
        }
        let name = if r.name.is_empty() { "worker" } else { r.name.as_str() };
        let id =
            self.sched.register(name, &r.instance, r.threads.max(1), now).map_err(|reason| disconnected(&reason))?;
        tracing::info!(worker = %id, threads = r.threads, "worker registered");
        let lease = self.settings.lease;
        Ok(pb::RegisterReply {
            worker_id: id,
            job: self.settings.spec.clone(),
            heartbeat_millis: (lease.as_millis() / 4).max(50) as u32,
            lease_millis: lease.as_millis() as u32,
            pairing: self.settings.pairing,
            certificate_small: self.settings.certificate.as_ref().map(|c| c.small),
            share_min_cells: self.settings.share.min_cells,
            share_min_nodes: self.settings.share.min_nodes,
        })
    }

    fn lease(&mut self, worker: &str, slot: u32, now: Instant) -> pb::LeaseReply {
        let reply = match self.sched.lease(worker, slot, now) {
            LeaseOutcome::Unit(ask, attempt, isolated) => {
                tracing::debug!(unit = %ask.id(), attempt, %worker, isolated, "leased");
                let known = if isolated || self.settings.share.min_cells == 0 {
                    Vec::new()
                } else {
                    let facts = self.sched.shared_for(worker, crate::SHARED_PER_LEASE);
                    facts.iter().map(|(l, origin)| cram_proto::shared_to_pb(l, origin)).collect()
                };
                lease_reply::Reply::Unit(pb::Unit {
                    unit_id: ask.id(),
                    attempt,
                    region: Some(cram_proto::region_to_pb(&ask.region)),
                    query: Some(ask.query.to_pb()),
                    node_budget: self.settings.unit_nodes,
                    known,
                    isolated,
                })
            }
            LeaseOutcome::Wait => lease_reply::Reply::RetryMillis(200),
            LeaseOutcome::Done(a) => lease_reply::Reply::Done(cram_proto::done_to_pb(a)),
        };
        pb::LeaseReply { reply: Some(reply) }
    }

    /// Judges a result, logs what that calls for, applies it, and tells the worker.
    async fn submit(&mut self, s: Submission) -> Result<Result<pb::SubmitReply, Status>, StoreError> {
        let unit = s.ask.id();
        match self.sched.judge(&s) {
            Verdict::Ignore(why) => {
                tracing::debug!(%unit, worker = %s.worker, why, "result not recorded");
                Ok(Ok(pb::SubmitReply { recorded: false, distrusted: self.sched.distrusted_workers() }))
            }
            Verdict::Accept(mut record) => {
                if self.settings.certificate.is_some() && s.finished && !s.proof.is_empty() {
                    record.proof = Some(self.store.save_proof(s.proof.clone()).await?);
                }
                self.store.record(&s.ask.region, &record).await?;
                self.sched.apply(&Event::Result(record));
                if s.finished {
                    tracing::debug!(%unit, worker = %s.worker, nodes = s.nodes, cached = s.from_cache, "unit done");
                } else {
                    tracing::info!(%unit, worker = %s.worker, nodes = s.nodes, "unit ran out of budget; splitting it");
                }
                Ok(Ok(pb::SubmitReply { recorded: true, distrusted: Vec::new() }))
            }
            Verdict::Refuse { events, reason, disconnect } => {
                tracing::warn!(%unit, worker = %s.worker, %reason, "refused a result");
                for e in &events {
                    self.log(e).await?;
                }
                Ok(Err(if disconnect { disconnected(&reason) } else { Status::invalid_argument(reason) }))
            }
        }
    }

    /// Adds a point to the chart's history, halving it when full.
    fn sample_history(&mut self) {
        if self.history.len() >= MAX_SAMPLES {
            self.history = self.history.iter().step_by(2).copied().collect();
            self.sample_every *= 2;
        }
        let done = self.sched.counters.done;
        self.history.push(Sample { secs: self.started.elapsed().as_secs_f64(), done, nodes_per_sec: self.rate });
    }

    /// The Prometheus text (docs/cluster.md lists the metrics).
    fn metrics(&mut self, now: Instant) -> String {
        use cram_proto::metrics::Exposition;
        let s = self.sched.status(&self.settings.spec, self.started.elapsed(), self.rate, now);
        let c = &s.units.counters;
        let mut e = Exposition::new();
        let state = |st: &'static str| [("state", st)];
        let (pending, leased, checking) = (state("pending"), state("leased"), state("checking"));
        e.gauges(
            "cram_units",
            "Open units by state.",
            &[
                (&pending, s.units.pending as f64),
                (&leased, s.units.leased as f64),
                (&checking, s.units.checking as f64),
            ],
        );
        let kind = |k: &'static str| [("kind", k)];
        let kinds = [
            kind("done"),
            kind("split"),
            kind("from_cache"),
            kind("check"),
            kind("duplicate"),
            kind("cancelled"),
            kind("released"),
        ];
        let values = [c.done, c.split, c.from_cache, c.checks, c.duplicates, c.cancelled, c.released];
        let samples: Vec<(&[(&str, &str)], u64)> = kinds.iter().zip(values).map(|(k, v)| (&k[..], v)).collect();
        e.counters("cram_unit_events_total", "Units answered, split, cancelled, … since the job began.", &samples);
        e.counter(
            "cram_results_refused_total",
            "Results refused (contradicting held facts, or impossible).",
            c.refused,
        );
        e.counter("cram_lease_expiries_total", "Leases that expired without a result.", c.expired);
        e.counter("cram_settlements_total", "Regions the coordinator settled by its own search.", c.settled);
        e.counter(
            "cram_nodes_total",
            "Search nodes of every result held and of the coordinator's own searches.",
            s.nodes,
        );
        e.gauge(
            "cram_nodes_per_second",
            "Search speed over all workers, smoothed over about ten seconds.",
            s.nodes_per_sec,
        );
        e.counter(
            "cram_facts_shared_total",
            "Facts workers sent for the others (knowledge shared across machines) since the job began.",
            c.facts_shared,
        );
        e.counter(
            "cram_facts_handed_out_total",
            "Shared facts handed to workers with their leases by this coordinator process.",
            c.facts_handed_out,
        );
        e.gauge("cram_workers", "Workers heard from recently.", s.workers.len() as f64);
        e.gauge("cram_workers_distrusted", "Workers found wrong and disconnected.", s.distrusted.len() as f64);
        e.gauge("cram_job_solved", "1 once the answer is known.", s.answer.is_some() as u8 as f64);
        e.gauge("cram_eta_seconds", "Estimated seconds left (-1: unknown).", s.eta_secs.map_or(-1.0, |x| x as f64));
        e.histogram(
            "cram_log_append_seconds",
            "Time to write and fsync one event of the log.",
            self.store.fsync_latency(),
        );
        e.finish()
    }

    fn sample_rate(&mut self, now: Instant, last: &mut (Instant, u64)) {
        if now.duration_since(last.0) < Duration::from_secs(1) {
            return;
        }
        let total = self.searched_nodes();
        let rate = total.saturating_sub(last.1) as f64 / now.duration_since(last.0).as_secs_f64();
        // Smoothed over about ten seconds: heartbeats report in-flight nodes in steps.
        self.rate = if self.rate == 0.0 { rate } else { 0.9 * self.rate + 0.1 * rate };
        *last = (now, total);
    }

    /// Nodes searched: those of the results held and of the units in flight.
    fn searched_nodes(&self) -> u64 {
        self.sched.nodes.saturating_add(self.sched.in_flight_nodes())
    }

    /// The periodic one-line summary. Its nodes are those searched (results and units in
    /// flight), its rate theirs since the previous line: lines minutes apart, where the
    /// status page's ten-second rate would be one moment's.
    fn progress_line(&mut self) -> String {
        let now = Instant::now();
        let searched = self.searched_nodes();
        let (then, before) = std::mem::replace(&mut self.line_mark, (now, searched));
        let secs = now.duration_since(then).as_secs_f64().max(1e-3);
        let rate = searched.saturating_sub(before) as f64 / secs;
        let status = self.sched.status(&self.settings.spec, self.started.elapsed(), rate, now);
        let u = &status.units;
        let eta = status.eta_secs.map_or_else(|| "unknown".to_string(), |e| format!("{e} s"));
        format!(
            "{}: units {}/{} done ({} leased, {} split, {} cached, {} checking, {} refused), {} nodes, {:.0} nodes/s, {} workers, root {}, ETA {}",
            status.job,
            u.counters.done,
            u.total,
            u.leased,
            u.counters.split,
            u.counters.from_cache,
            u.checking,
            u.counters.refused,
            searched,
            status.nodes_per_sec,
            status.workers.len(),
            status.root,
            eta
        )
    }

    /// Logs the answer as the job's last event and starts the linger period.
    async fn finish(&mut self, solution: Solution) -> Result<(), StoreError> {
        let nodes = self.sched.nodes.saturating_add(self.sched.local_nodes());
        let counters = self.sched.counters.clone();
        let millis = self.started.elapsed().as_millis() as u64;
        let done = DoneRecord { outcome: solution.outcome, nimber: solution.nimber, nodes, millis };
        self.store.append(&Event::Done(done)).await?;
        self.sched.decide(solution);
        if let Some(a) = &self.settings.answered {
            a.send_replace(true);
        }
        tracing::info!(
            target: crate::PROGRESS,
            job = %self.settings.spec,
            outcome = solution.outcome.describe(),
            nimber = ?solution.nimber,
            units = counters.done,
            split = counters.split,
            nodes,
            seconds = millis as f64 / 1000.0,
            "job solved"
        );
        let f = Finished { solution, nodes, millis, counters, certificate: None };
        self.answered = Some((f, Instant::now() + self.settings.linger));
        Ok(())
    }
}

/// Completes when the settlement under way does (never when there is none).
async fn settlement_done(s: &mut Option<Settling>) -> Result<Searched, tokio::task::JoinError> {
    match s {
        Some(s) => (&mut s.task).await,
        None => std::future::pending().await,
    }
}

/// The refusal a distrusted worker gets on every call.
fn disconnected(reason: &str) -> Status {
    Status::permission_denied(format!("this worker is disconnected: its results were found wrong ({reason})"))
}
