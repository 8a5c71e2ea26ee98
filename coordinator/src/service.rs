//! The gRPC service: checks what arrives, then asks the [`Scheduler`] and the [`Store`].
//!
//! Registration refuses a worker whose protocol, build or databases differ
//! (FAILED_PRECONDITION, logged on both sides). Every other call names a registered worker;
//! an unknown one (the coordinator restarted) gets NOT_FOUND and registers again. A result
//! is acknowledged only after the log and the index hold it.

use crate::state::{LeaseOutcome, Scheduler};
use crate::store::{ResultRecord, Store, StoreError};
use crate::top::Ask;
use cram_proto::pb::coordinator_server::Coordinator;
use cram_proto::pb::{self, lease_reply};
use cram_proto::{facts_from_pb, parse_unit_id, region_from_pb, region_to_pb};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// What the service needs to know about the job and this coordinator.
pub struct Shared {
    /// The scheduler (held briefly, never across an await).
    pub sched: Mutex<Scheduler>,
    /// The durable state (held across the writes of one result, which keeps log order).
    pub store: tokio::sync::Mutex<Store>,
    /// The job's spec, for status.
    pub job: String,
    /// Engine setting the workers must use.
    pub pairing: bool,
    /// Node budget of one unit.
    pub unit_nodes: u64,
    /// Lease length.
    pub lease: Duration,
    /// Database fingerprint workers must match.
    pub db_fingerprint: String,
    /// When this coordinator started.
    pub started: Instant,
    /// Recent nodes per second, updated by the coordinator's ticker.
    pub rate: Mutex<f64>,
    /// A failure that must stop the coordinator (the state could not be written).
    pub fatal: mpsc::UnboundedSender<StoreError>,
    /// Signalled after each recorded result, so the answer is noticed at once.
    pub changed: tokio::sync::Notify,
}

impl Shared {
    fn sched(&self) -> std::sync::MutexGuard<'_, Scheduler> {
        self.sched.lock().expect("scheduler lock poisoned")
    }

    /// The status document as JSON.
    pub fn status_json(&self) -> String {
        let rate = *self.rate.lock().expect("rate lock poisoned");
        let status = self.sched().status(&self.job, self.started.elapsed(), rate, Instant::now());
        serde_json::to_string(&status).expect("status serialises")
    }
}

/// The service object tonic serves.
pub struct Service(pub Arc<Shared>);

fn unknown_worker(id: &str) -> Status {
    Status::not_found(format!("unknown worker {id:?}: register again (the coordinator may have restarted)"))
}

fn unit_of(id: &str) -> Result<Ask, Status> {
    parse_unit_id(id)
        .map(|(region, query)| Ask { region, query })
        .ok_or_else(|| Status::invalid_argument(format!("{id:?} names no unit")))
}

fn done_msg(a: cram_engine::Solution) -> pb::Done {
    pb::Done { outcome: a.outcome.to_string(), nimber: a.nimber.map(u32::from) }
}

#[tonic::async_trait]
impl Coordinator for Service {
    async fn register(&self, req: Request<pb::RegisterRequest>) -> Result<Response<pb::RegisterReply>, Status> {
        let r = req.into_inner();
        let s = &self.0;
        let ours = (cram_proto::PROTOCOL_VERSION, cram_proto::BUILD_ID, s.db_fingerprint.as_str());
        if (r.protocol, r.build.as_str(), r.db_fingerprint.as_str()) != ours {
            let msg = format!(
                "worker {:?} has protocol {}, build {}, databases {}; this coordinator has protocol {}, build {}, databases {}",
                r.name, r.protocol, r.build, r.db_fingerprint, ours.0, ours.1, ours.2
            );
            tracing::warn!("refused a worker: {msg}");
            return Err(Status::failed_precondition(msg));
        }
        let name = if r.name.is_empty() { "worker".to_string() } else { r.name.clone() };
        let id = s.sched().register(&name, r.threads.max(1), Instant::now());
        tracing::info!(worker = %id, threads = r.threads, "worker registered");
        Ok(Response::new(pb::RegisterReply {
            worker_id: id,
            job: s.job.clone(),
            heartbeat_millis: (s.lease.as_millis() / 4).max(50) as u32,
            lease_millis: s.lease.as_millis() as u32,
            pairing: s.pairing,
        }))
    }

    async fn lease(&self, req: Request<pb::LeaseRequest>) -> Result<Response<pb::LeaseReply>, Status> {
        let pb::LeaseRequest { worker_id: worker, slot } = req.into_inner();
        let s = &self.0;
        let mut sched = s.sched();
        let now = Instant::now();
        if !sched.touch(&worker, now) {
            return Err(unknown_worker(&worker));
        }
        let reply = match sched.lease(&worker, slot, now) {
            LeaseOutcome::Unit(ask, attempt) => {
                tracing::debug!(unit = %ask.id(), attempt, %worker, "leased");
                lease_reply::Reply::Unit(pb::Unit {
                    unit_id: ask.id(),
                    attempt,
                    region: Some(region_to_pb(&ask.region)),
                    query: Some(ask.query.to_pb()),
                    node_budget: s.unit_nodes,
                })
            }
            LeaseOutcome::Wait => lease_reply::Reply::RetryMillis(200),
            LeaseOutcome::Done(a) => lease_reply::Reply::Done(done_msg(a)),
        };
        Ok(Response::new(pb::LeaseReply { reply: Some(reply) }))
    }

    async fn heartbeat(&self, req: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatReply>, Status> {
        let r = req.into_inner();
        let mut sched = self.0.sched();
        let now = Instant::now();
        if !sched.touch(&r.worker_id, now) {
            return Err(unknown_worker(&r.worker_id));
        }
        let mut cancel = Vec::new();
        for p in &r.units {
            let ask = unit_of(&p.unit_id)?;
            if !sched.heartbeat(&r.worker_id, ask, p.attempt, p.nodes, now) {
                cancel.push(p.unit_id.clone());
            }
        }
        let done = sched.answer().is_some();
        Ok(Response::new(pb::HeartbeatReply { cancel, done }))
    }

    async fn submit(&self, req: Request<pb::SubmitRequest>) -> Result<Response<pb::SubmitReply>, Status> {
        let r = req.into_inner();
        let s = &self.0;
        let ask = unit_of(&r.unit_id)?;
        if region_from_pb(r.region.as_ref())? != ask.region {
            return Err(Status::invalid_argument("the region does not match the unit"));
        }
        let facts = facts_from_pb(r.facts.as_ref());
        if facts.is_contradictory() {
            return Err(Status::invalid_argument("the facts exclude every possible value"));
        }
        if r.finished && !ask.query.answered_by(facts) {
            return Err(Status::invalid_argument("a finished result must answer its unit"));
        }
        if facts.value().is_some_and(|v| u32::from(v) > ask.region.cells() / 2) {
            return Err(Status::invalid_argument("a nimber above half the cells is impossible"));
        }
        {
            let mut sched = s.sched();
            if !sched.touch(&r.worker_id, Instant::now()) {
                return Err(unknown_worker(&r.worker_id));
            }
            if !sched.begin_record(ask) {
                tracing::debug!(unit = %r.unit_id, worker = %r.worker_id, "duplicate result; already recorded");
                return Ok(Response::new(pb::SubmitReply { recorded: false }));
            }
        }
        let record = ResultRecord {
            unit: r.unit_id.clone(),
            region: ask.region.key(),
            excluded: facts.excluded,
            upper: facts.upper,
            finished: r.finished,
            nodes: r.nodes,
            millis: r.millis,
            worker: r.worker_id.clone(),
            from_cache: r.from_cache,
        };
        // Recorded in a task of its own, which runs to the end even when the caller hangs up:
        // a unit left half-recorded would never be leased or recorded again.
        let shared = s.clone();
        let recorded = tokio::spawn(async move {
            if let Err(e) = shared.store.lock().await.record(&ask.region, &record).await {
                tracing::error!("cannot record a result: {e}");
                let _ = shared.fatal.send(e);
                return false;
            }
            shared.sched().finish_record(ask, facts, r.finished, r.nodes, &r.worker_id, r.from_cache);
            shared.changed.notify_one();
            if r.finished {
                tracing::debug!(unit = %r.unit_id, worker = %r.worker_id, nodes = r.nodes, cached = r.from_cache, "unit done");
            } else {
                tracing::info!(unit = %r.unit_id, worker = %r.worker_id, nodes = r.nodes, "unit ran out of budget; splitting it");
            }
            true
        });
        if !recorded.await.map_err(|e| Status::internal(format!("recording failed: {e}")))? {
            return Err(Status::unavailable("the coordinator cannot write its state"));
        }
        Ok(Response::new(pb::SubmitReply { recorded: true }))
    }

    async fn release(&self, req: Request<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseReply>, Status> {
        let r = req.into_inner();
        let asks = r.unit_ids.iter().map(|id| unit_of(id)).collect::<Result<Vec<_>, _>>()?;
        let mut sched = self.0.sched();
        if !sched.touch(&r.worker_id, Instant::now()) {
            return Err(unknown_worker(&r.worker_id));
        }
        let released = sched.release(&r.worker_id, &asks);
        tracing::info!(worker = %r.worker_id, released, "worker released its units");
        Ok(Response::new(pb::ReleaseReply { released }))
    }

    async fn status(&self, _req: Request<pb::StatusRequest>) -> Result<Response<pb::StatusReply>, Status> {
        Ok(Response::new(pb::StatusReply { json: self.0.status_json() }))
    }
}

/// The server-side token check: without the right bearer token a call is refused and logged.
pub fn check_token(token: Option<String>) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |req: Request<()>| match &token {
        Some(t) if !cram_proto::has_token(&req, t) => {
            let from = req.remote_addr().map_or_else(|| "unknown".to_string(), |a| a.to_string());
            tracing::warn!(%from, "refused a call without the right token");
            Err(Status::unauthenticated("missing or wrong token"))
        }
        _ => Ok(req),
    }
}
