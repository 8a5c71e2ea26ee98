//! The job's task: the one owner of the scheduler and the store. gRPC handlers and HTTP
//! pages send it [`Request`]s, each with a oneshot reply, and it answers them one at a
//! time, so nothing else touches job state and no lock guards it (the shape of Ballista's
//! scheduler event loop and fishnet's actors).
//!
//! A result is judged, logged (fsynced, then indexed in sled) and applied before it is
//! acknowledged; a refusal or a distrust is logged the same way. Besides requests the task
//! expires leases, reports progress ([`Reporter`]), runs the coordinator's own searches
//! ([`Checker`]) and notices the answer, after which it keeps answering "done" for the
//! linger period; a certified job's certificate is assembled last ([`certify`]).

use crate::certify::{certify, Assembly};
use crate::events::{DoneRecord, Event};
use crate::outcome::{CoordError, Finished};
use crate::prove::{Checked, ProofChecked, ProofChecker};
use crate::report::Reporter;
use crate::request::Request;
use crate::scheduler::{Caller, Grant, LeaseOutcome, Scheduler, Submission, Verdict};
use crate::settings::Settings;
use crate::settle::{Checker, Searched};
use crate::store::{Store, StoreError};
use cram_engine::{Question, Solution};
use cram_proto::pb::{self, lease_reply};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::Status;

/// The job's task and everything it owns.
pub struct Job {
    /// The scheduler.
    pub sched: Scheduler,
    /// The durable state.
    pub store: Store,
    settings: Settings,
    started: Instant,
    report: Reporter,
    answered: Option<(Finished, Instant)>,
    checker: Checker,
    /// A certified job's proof checker.
    proofs: Option<ProofChecker>,
    /// The status as last rendered for readers: the gRPC status, the page's JSON, the
    /// metrics; dropped by every call that may change the state.
    rendered: [Option<(Instant, String)>; 3],
    /// Replies to results written to the log and not yet on disk, sent once it is synced
    /// (group commit: [`Job::commit`]).
    held: Vec<Box<dyn FnOnce() + Send>>,
    /// Steps taken since the log was last synced with lines written.
    unsynced_steps: u64,
    /// Units whose grants the state may forget once the log is synced.
    done_with: Vec<Question>,
}

/// Steps (requests served, mostly) the job's task takes with lines written and not synced
/// while further requests wait: a result's reply waits for at most this many others to be
/// served before it is made durable and sent, however many calls keep the queue full.
pub const GROUP: u64 = 64;

/// How long a rendering of the status is served again while no call changed the state:
/// any client may ask for it as often as it likes, and each rendering walks every unit, in
/// the job's task.
const RENDERED_FOR: Duration = Duration::from_millis(250);

/// The rendering in `slot` when it is fresh at `now`, else a new one from `render`.
fn fresh(slot: &mut Option<(Instant, String)>, now: Instant, render: impl FnOnce() -> String) -> String {
    match slot {
        Some((at, text)) if now.saturating_duration_since(*at) < RENDERED_FOR => text.clone(),
        _ => {
            let text = render();
            *slot = Some((now, text.clone()));
            text
        }
    }
}

impl Job {
    /// A job over a scheduler already brought up to date with the log `events`, and the
    /// grants of units the state recorded (`Store::grants`).
    pub fn new(
        mut sched: Scheduler,
        store: Store,
        settings: Settings,
        started: Instant,
        events: &[Event],
        grants: Vec<Grant>,
    ) -> Job {
        let report = Reporter::new(&settings.spec, started, &sched);
        let checker =
            Checker::new(settings.check_threads, settings.check_tt_bytes, settings.pairing, settings.dbs.clone());
        // A certified job checks its results' proofs; the facts of those checked before a
        // restart are read back from their files.
        let proofs = settings.certificate.as_ref().map(|c| {
            let files: std::collections::HashMap<(Question, &str), &str> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Result(r) => Some(((r.unit, r.worker.as_str()), r.proof.as_deref()?)),
                    _ => None,
                })
                .collect();
            let proved: Vec<(Question, String)> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Proved { unit, worker, .. } => {
                        files.get(&(*unit, worker.as_str())).map(|f| (*unit, f.to_string()))
                    }
                    _ => None,
                })
                .collect();
            let (checker, lost) =
                ProofChecker::new(&store.proof_dir(), c.small, settings.proof_threads, c.proof_memory, &proved);
            for q in lost {
                sched.proof_lost(q);
            }
            checker
        });
        // The grants of units answered or split since are forgotten, now that the units
        // whose proofs were lost are known (those are to be proved again: their grants
        // stay): the index keeps the open units' only.
        let (done, open): (Vec<_>, Vec<_>) = grants.into_iter().partition(|g| sched.done_with(&g.unit));
        for g in &done {
            store.forget_grants(&g.unit);
        }
        sched.granted_earlier(open);
        Job {
            sched,
            store,
            settings,
            started,
            report,
            answered: None,
            checker,
            proofs,
            rendered: Default::default(),
            held: Vec::new(),
            unsynced_steps: 0,
            done_with: Vec::new(),
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
        self.sched.serving_from(Instant::now());
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut last_progress = Instant::now();
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
                done = self.checker.done() => {
                    self.state_changed();
                    self.searched(done).await
                }
                checked = proof_done(&mut self.proofs) => match checked {
                    Some(c) => {
                        self.state_changed();
                        self.proof_checked(c).await
                    }
                    None => Ok(()),
                },
                _ = tick.tick() => {
                    let now = Instant::now();
                    for (unit, worker) in self.sched.expire(now) {
                        tracing::warn!(%unit, %worker, "lease expired without progress; reissuing the unit");
                        self.state_changed();
                    }
                    self.report.tick(&self.sched, now);
                    if now.duration_since(last_progress) >= self.settings.progress {
                        last_progress = now;
                        tracing::info!(target: crate::PROGRESS, "{}", self.report.progress_line(&mut self.sched));
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
            if let Err(e) = self.commit(!requests.is_empty()).await {
                break Err(e.into());
            }
        };
        // What was written is made durable, and its replies sent, however the loop ended.
        let committed = self.commit(false).await;
        self.checker.cancel();
        // Calls from now on are answered UNAVAILABLE at once, not queued unread while the
        // certificate is assembled (which can take an hour).
        drop(requests);
        let mut finished = outcome?;
        if let Err(e) = committed {
            // The answer's `done` line was synced before the linger began: only what came
            // after it is lost, and the same command prints the answer again.
            tracing::warn!("the event log could not be synced after the answer: {e}");
        }
        if let Some(target) = self.settings.certificate.clone() {
            let assembly = Assembly {
                board: self.settings.board,
                solution: finished.solution,
                pairing: self.settings.pairing,
                dbs: self.settings.dbs.clone(),
                proofs: self.sched.proofs(),
                proof_dir: self.store.proof_dir(),
                values: self.sched.exact_values(),
            };
            finished.certificate = Some(certify(assembly, &target).await?);
        }
        Ok(finished)
    }

    /// Starts the coordinator's own searches that are due, and logs the answer once it is
    /// known.
    async fn after_step(&mut self) -> Result<(), StoreError> {
        for grant in self.sched.take_grants() {
            self.store.record_grant(&grant);
        }
        for (unit, worker) in self.sched.take_revoked_grants() {
            self.store.forget_grant(&unit, &worker);
        }
        for name in self.sched.take_dropped_proofs() {
            self.store.remove_proof(&name);
        }
        while self.answered.is_none() && self.checker.has_room() {
            let Some(q) = self.sched.next_search(self.checker.has_room_for_later()) else { break };
            self.checker.start(q, self.sched.search_budget(&q));
        }
        if let Some(p) = self.proofs.as_mut() {
            p.start_due(|| self.sched.next_proof());
        }
        if self.answered.is_none() {
            if let Some(solution) = self.sched.answer() {
                self.finish(solution).await?;
            }
        }
        Ok(())
    }

    /// Logs and applies the answer of one of the coordinator's own searches and the
    /// distrusts it shows.
    async fn searched(&mut self, s: Searched) -> Result<(), StoreError> {
        let facts = match s.facts {
            Ok(f) => f,
            Err(cram_engine::Interrupted::Budget) => {
                tracing::info!(question = %s.question, nodes = s.nodes, "a shared fact's region took more than a unit's budget; its facts are dropped unverified");
                self.sched.later_search_gave_up(s.question);
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(question = %s.question, "the coordinator's search stopped: {e}");
                self.sched.search_dropped(s.question);
                return Ok(());
            }
        };
        tracing::info!(question = %s.question, nodes = s.nodes, "the coordinator answered a question itself");
        for event in self.sched.searched(s.question, facts, s.nodes, s.millis) {
            self.log(&event).await?;
        }
        Ok(())
    }

    /// Logs what a proof's check found: the result proved, or its worker distrusted; a
    /// proof whose file is gone has its unit proved again.
    async fn proof_checked(&mut self, c: ProofChecked) -> Result<(), StoreError> {
        if !self.sched.holds_result(&c.unit, &c.worker) {
            // Its worker was distrusted while the check ran: its result is discarded and
            // its file may be deleted already, so what the check found says nothing.
            return Ok(());
        }
        match &c.checked {
            Checked::Proved(n) => tracing::debug!(unit = %c.unit, worker = %c.worker, facts = n, "proof checked"),
            Checked::Refused(why) => tracing::warn!(unit = %c.unit, worker = %c.worker, %why, "a proof does not check"),
            Checked::Lost(why) => {
                tracing::warn!(unit = %c.unit, %why, "a proof cannot be read; its unit is proved again");
                self.sched.proof_lost(c.unit);
            }
        }
        if let Some(e) = ProofChecker::event(&c) {
            self.log(&e).await?;
            if matches!(c.checked, Checked::Proved(_)) {
                for wrong in self.sched.shown_wrong_by_proof(c.unit, &c.worker) {
                    self.log(&wrong).await?;
                }
            }
        }
        Ok(())
    }

    /// Group commit: once no request waits, or [`GROUP`] steps after a line was written,
    /// makes the log durable and sends the replies held for it. Results that arrive while
    /// one sync runs are written one by one and made durable by the next, together.
    async fn commit(&mut self, requests_waiting: bool) -> Result<(), StoreError> {
        if self.store.unsynced() > 0 {
            self.unsynced_steps += 1;
            if requests_waiting && self.unsynced_steps < GROUP {
                return Ok(());
            }
        }
        self.unsynced_steps = 0;
        self.store.sync().await?;
        for send in self.held.drain(..) {
            send();
        }
        for q in std::mem::take(&mut self.done_with) {
            if self.sched.done_with(&q) {
                self.store.forget_grants(&q);
            }
        }
        Ok(())
    }

    /// Logs an event, applies it, and rebuilds the index after a distrust (its facts are
    /// gone from the replay).
    async fn log(&mut self, event: &Event) -> Result<(), StoreError> {
        match event {
            Event::Result(r) => self.store.record(r).await?,
            e => self.store.append(e).await?,
        }
        self.sched.apply(event);
        if let Event::Distrust { worker, reason } = event {
            tracing::error!(%worker, %reason, "worker distrusted: its results are discarded and it is disconnected");
            if let Some(p) = self.proofs.as_mut() {
                p.forget(worker);
            }
        }
        Ok(())
    }

    /// The state may have changed: readers get a new rendering.
    fn state_changed(&mut self) {
        self.rendered = Default::default();
    }

    /// Answers one request.
    async fn handle(&mut self, req: Request) -> Result<(), StoreError> {
        let now = Instant::now();
        if !matches!(req, Request::Status(_) | Request::Page(_) | Request::Metrics(_)) {
            // A call that may change the state: the next reader sees it.
            self.state_changed();
        }
        match req {
            Request::Register { key, request, reply } => {
                let _ = reply.send(self.register(&key, request, now));
            }
            Request::Lease { key, slot, reply } => {
                let _ = reply.send(self.known(&key, now).map(|worker| self.lease(&worker, slot, now)));
            }
            Request::Heartbeat { key, units, reply } => {
                let answer = self.known(&key, now).map(|worker| {
                    let cancel = units
                        .into_iter()
                        .filter(|&(q, attempt, nodes)| !self.sched.heartbeat(&worker, q, attempt, nodes, now))
                        .map(|(q, ..)| q.to_string())
                        .collect();
                    pb::HeartbeatReply { cancel, done: self.sched.answer().is_some() }
                });
                let _ = reply.send(answer);
            }
            Request::Submit { key, mut submission, reply } => {
                match self.known(&key, now) {
                    Ok(worker) => submission.worker = worker,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                }
                match self.submit(submission, now).await {
                    // Acknowledged once what it logged is on disk.
                    Ok(answer) if self.store.unsynced() > 0 => self.held.push(Box::new(move || {
                        let _ = reply.send(answer);
                    })),
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
            Request::Release { key, units, leaving, reply } => {
                let answer = self.known(&key, now).map(|worker| {
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
                let (report, sched) = (&self.report, &mut self.sched);
                let json = fresh(&mut self.rendered[0], now, || {
                    serde_json::to_string(&report.status(sched, now)).expect("status serialises")
                });
                let _ = reply.send(Ok(pb::StatusReply { json }));
            }
            Request::Page(reply) => {
                let (report, sched) = (&self.report, &mut self.sched);
                let _ = reply.send(fresh(&mut self.rendered[1], now, || report.page(sched, now)));
            }
            Request::Metrics(reply) => {
                let (report, sched, fsync) = (&self.report, &mut self.sched, self.store.fsync_latency());
                let _ = reply.send(fresh(&mut self.rendered[2], now, || report.metrics(sched, fsync, now)));
            }
        }
        Ok(())
    }

    /// The id of the worker whose secret has digest `key`, when it is registered;
    /// NOT_FOUND or PERMISSION_DENIED otherwise.
    fn known(&mut self, key: &str, now: Instant) -> Result<String, Status> {
        match self.sched.caller(key, now) {
            Caller::Known(id) => Ok(id),
            Caller::Unknown => Err(Status::not_found(
                "this coordinator does not know this worker: register again (the coordinator may have restarted)",
            )),
            Caller::Distrusted(reason) => Err(disconnected(&reason)),
        }
    }

    fn register(&mut self, key: &str, r: pb::RegisterRequest, now: Instant) -> Result<pb::RegisterReply, Status> {
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
        let threads = r.threads.clamp(1, 4096);
        let id = self.sched.register(key, name, threads, now).map_err(|reason| disconnected(&reason))?;
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
            LeaseOutcome::Unit(q, attempt, node_budget) => {
                tracing::debug!(unit = %q, attempt, %worker, "leased");
                let shared = if self.settings.share.min_cells == 0 {
                    Vec::new()
                } else {
                    let facts = self.sched.shared_for(worker, crate::settings::SHARED_PER_LEASE);
                    facts.iter().map(cram_proto::shared_to_pb).collect()
                };
                lease_reply::Reply::Unit(pb::Unit {
                    unit_id: q.to_string(),
                    attempt,
                    region: Some(cram_proto::region_to_pb(&q.region)),
                    query: Some(cram_proto::query_to_pb(q.query)),
                    node_budget,
                    shared,
                })
            }
            LeaseOutcome::Wait => lease_reply::Reply::RetryMillis(200),
            LeaseOutcome::Done(a) => lease_reply::Reply::Done(cram_proto::done_to_pb(a)),
        };
        pb::LeaseReply { reply: Some(reply) }
    }

    /// Judges a result, logs what that calls for, applies it, and tells the worker.
    async fn submit(&mut self, mut s: Submission, now: Instant) -> Result<Result<pb::SubmitReply, Status>, StoreError> {
        let unit = s.unit;
        // Facts the job did not ask for are not taken: each would cost a search of its
        // region by the coordinator (with sharing off, any worker could otherwise keep the
        // coordinator's verifications busy with regions it cannot finish).
        // Nor facts about regions as large as the unit's or larger: a search of the unit
        // meets only smaller ones, and a fact about any other region (a rectangle larger
        // than the board) would cost a search longer than the unit's.
        let share = self.settings.share;
        let below = unit.region.cells();
        s.shared.retain(|f| {
            share.min_cells > 0
                && f.region.cells() >= share.min_cells
                && f.region.cells() < below
                && f.nodes >= share.min_nodes
        });
        match self.sched.judge(&s, now) {
            Verdict::Ignore(why) => {
                tracing::debug!(%unit, worker = %s.worker, why, "result not recorded");
                Ok(Ok(pb::SubmitReply { recorded: false }))
            }
            Verdict::Accept(mut record) => {
                if self.settings.certificate.is_some() && s.finished && !s.proof.is_empty() {
                    record.proof = Some(self.store.save_proof(s.proof.clone()).await?);
                }
                self.log(&Event::Result(record)).await?;
                if self.sched.done_with(&unit) {
                    // Once the result is on disk: sled writes on its own, and a grant
                    // forgotten before a power loss took the result would refuse its
                    // worker's resubmission.
                    self.done_with.push(unit);
                }
                if s.finished {
                    tracing::debug!(%unit, worker = %s.worker, nodes = s.nodes, cached = s.from_cache, "unit done");
                } else {
                    tracing::info!(%unit, worker = %s.worker, nodes = s.nodes, "unit ran out of budget; splitting it");
                }
                Ok(Ok(pb::SubmitReply { recorded: true }))
            }
            verdict @ Verdict::Refuse { .. } => {
                for e in &verdict.events() {
                    self.log(e).await?;
                }
                let Verdict::Refuse { reason, disconnect, .. } = verdict else { unreachable!("matched above") };
                tracing::warn!(%unit, worker = %s.worker, %reason, "refused a result");
                Ok(Err(if disconnect { disconnected(&reason) } else { Status::invalid_argument(reason) }))
            }
        }
    }

    /// Logs the answer as the job's last event and starts the linger period.
    async fn finish(&mut self, solution: Solution) -> Result<(), StoreError> {
        let nodes = self.sched.nodes.saturating_add(self.sched.local_nodes());
        let counters = self.sched.counters.clone();
        let millis = self.started.elapsed().as_millis() as u64;
        let rests_on = Some(self.sched.results_digest());
        let done = DoneRecord { outcome: solution.outcome, nimber: solution.nimber, nodes, millis, rests_on };
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

/// Completes when a proof check under way does (never without a checker); `None` when
/// the proof is to be checked again.
async fn proof_done(p: &mut Option<ProofChecker>) -> Option<ProofChecked> {
    match p {
        Some(p) => p.done().await,
        None => std::future::pending().await,
    }
}

/// The refusal a distrusted worker gets on every call.
fn disconnected(reason: &str) -> Status {
    Status::permission_denied(format!("this worker is disconnected: its results were found wrong ({reason})"))
}
