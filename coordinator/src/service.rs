//! The gRPC glue: reads and checks what arrives (unit names, regions, facts), hands each
//! call to the job's task as a typed [`Request`] with a oneshot reply, and passes the reply
//! back. No job state lives here.
//!
//! Every call of a worker carries its secret (`x-cram-worker`): the worker is known by the
//! secret's digest, never by anything in the request's body. An unknown worker (the
//! coordinator restarted) gets NOT_FOUND and registers again, a distrusted one gets
//! PERMISSION_DENIED, a call without a secret UNAUTHENTICATED. A malformed request, or one
//! over the limits (shared facts, proof size, names), gets INVALID_ARGUMENT.

use crate::request::{JobHandle, Reply, Request};
use crate::scheduler::Submission;
use cram_engine::Question;
use cram_proto::pb;
use cram_proto::pb::coordinator_server::Coordinator;
use cram_proto::MAX_SHARED_PER_RESULT;
use cram_proto::{facts_from_pb, question_from_pb, region_from_pb, shared_from_pb};
use tonic::{Request as Call, Response, Status};

/// Longest worker name accepted (it appears in ids, logs and the status).
pub const MAX_NAME: usize = 64;

/// The service object tonic serves: the way in to the job's task.
pub struct Service(pub JobHandle);

impl Service {
    /// Sends a request to the job's task and waits for its reply.
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Result<Response<T>, Status> {
        let answer = self.0.ask(make).await;
        answer.unwrap_or_else(|| Err(Status::unavailable("the coordinator is stopping"))).map(Response::new)
    }
}

/// True for a worker name the coordinator takes: 1 to [`MAX_NAME`] bytes,
/// without control characters or `#` (which separates the two in a worker's id).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && !s.contains(|c: char| c.is_control() || c == '#')
}

/// A registration, checked: a valid name (an empty name means "worker").
pub fn registration_from_pb(r: &pb::RegisterRequest) -> Result<(), Status> {
    if !(r.name.is_empty() || valid_name(&r.name)) {
        return Err(Status::invalid_argument(format!(
            "a worker's name must be 1 to {MAX_NAME} bytes without control characters or '#'"
        )));
    }
    Ok(())
}

/// The largest proof one result may carry, compressed (a certified unit's proof is a few
/// MB; 3x22's largest was 60 MB).
pub const MAX_PROOF_BYTES: usize = 512 << 20;

/// A submitted result, read and checked for form (what its facts say is judged later).
pub fn submission_from_pb(r: pb::SubmitRequest) -> Result<Submission, Status> {
    let unit = question_from_pb(&r.unit_id)?;
    if region_from_pb(r.region.as_ref())? != unit.region {
        return Err(Status::invalid_argument("the region does not match the unit"));
    }
    if r.shared.len() > MAX_SHARED_PER_RESULT {
        return Err(Status::invalid_argument(format!(
            "{} shared facts in one result; at most {MAX_SHARED_PER_RESULT}",
            r.shared.len()
        )));
    }
    if r.proof.len() > MAX_PROOF_BYTES {
        return Err(Status::invalid_argument(format!("a proof of {} bytes; at most {MAX_PROOF_BYTES}", r.proof.len())));
    }
    Ok(Submission {
        worker: String::new(),
        unit,
        attempt: r.attempt,
        facts: facts_from_pb(r.facts.as_ref()),
        finished: r.finished,
        nodes: r.nodes.min(MAX_NODES),
        millis: r.millis.min(MAX_NODES),
        from_cache: r.from_cache,
        proof: r.proof,
        shared: r.shared.iter().map(shared_from_pb).collect::<Result<_, _>>()?,
    })
}

/// The largest node count (and milliseconds) taken from a worker: 2^48, far above any
/// search, so that sums over a job never overflow (what a worker says above it is cut).
pub const MAX_NODES: u64 = 1 << 48;

/// Units one heartbeat may report or one release hand back (a worker's threads).
const MAX_HEARTBEAT_UNITS: usize = 1024;

/// A heartbeat's units: (unit, attempt, nodes).
pub fn progress_from_pb(units: &[pb::UnitProgress]) -> Result<Vec<(Question, u64, u64)>, Status> {
    if units.len() > MAX_HEARTBEAT_UNITS {
        return Err(Status::invalid_argument(format!("at most {MAX_HEARTBEAT_UNITS} units in one heartbeat")));
    }
    units.iter().map(|p| Ok((question_from_pb(&p.unit_id)?, p.attempt, p.nodes.min(MAX_NODES)))).collect()
}

#[tonic::async_trait]
impl Coordinator for Service {
    async fn register(&self, req: Call<pb::RegisterRequest>) -> Result<Response<pb::RegisterReply>, Status> {
        let key = cram_proto::caller_of(req.metadata())?;
        let request = req.into_inner();
        registration_from_pb(&request)?;
        self.ask(|reply| Request::Register { key, request, reply }).await
    }

    async fn lease(&self, req: Call<pb::LeaseRequest>) -> Result<Response<pb::LeaseReply>, Status> {
        let key = cram_proto::caller_of(req.metadata())?;
        let slot = req.into_inner().slot;
        self.ask(|reply| Request::Lease { key, slot, reply }).await
    }

    async fn heartbeat(&self, req: Call<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatReply>, Status> {
        let key = cram_proto::caller_of(req.metadata())?;
        let units = progress_from_pb(&req.into_inner().units)?;
        self.ask(|reply| Request::Heartbeat { key, units, reply }).await
    }

    async fn submit(&self, req: Call<pb::SubmitRequest>) -> Result<Response<pb::SubmitReply>, Status> {
        let key = cram_proto::caller_of(req.metadata())?;
        let submission = submission_from_pb(req.into_inner())?;
        self.ask(|reply| Request::Submit { key, submission, reply }).await
    }

    async fn release(&self, req: Call<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseReply>, Status> {
        let key = cram_proto::caller_of(req.metadata())?;
        let r = req.into_inner();
        if r.unit_ids.len() > MAX_HEARTBEAT_UNITS {
            return Err(Status::invalid_argument(format!("at most {MAX_HEARTBEAT_UNITS} units in one release")));
        }
        let units = r.unit_ids.iter().map(|id| question_from_pb(id)).collect::<Result<Vec<_>, _>>()?;
        self.ask(|reply| Request::Release { key, units, leaving: r.leaving, reply }).await
    }

    async fn status(&self, _req: Call<pb::StatusRequest>) -> Result<Response<pb::StatusReply>, Status> {
        self.ask(Request::Status).await
    }
}

/// The server-side token check: without the right bearer token a call is refused and logged.
pub fn check_token(token: Option<String>) -> impl FnMut(Call<()>) -> Result<Call<()>, Status> + Clone {
    move |req: Call<()>| match &token {
        Some(t) if !cram_proto::has_token(&req, t) => {
            let from = req.remote_addr().map_or_else(|| "unknown".to_string(), |a| a.to_string());
            tracing::warn!(%from, "refused a call without the right token");
            Err(Status::unauthenticated("missing or wrong token"))
        }
        _ => Ok(req),
    }
}
