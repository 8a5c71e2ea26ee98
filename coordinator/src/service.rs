//! The gRPC glue: reads and checks what arrives (unit names, regions, facts), hands each
//! call to the job's task as a typed [`Request`] with a oneshot reply, and passes the reply
//! back. No job state lives here.
//!
//! Every call but Register and Status names a registered worker; an unknown one (the
//! coordinator restarted) gets NOT_FOUND and registers again, a distrusted one gets
//! PERMISSION_DENIED. A malformed request gets INVALID_ARGUMENT.

use crate::job::Request;
use crate::state::Submission;
use crate::top::Ask;
use cram_proto::pb;
use cram_proto::pb::coordinator_server::Coordinator;
use cram_proto::{facts_from_pb, parse_unit_id, region_from_pb, shared_from_pb};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request as Call, Response, Status};

/// Longest worker name or instance accepted (they appear in ids, logs and the status).
pub const MAX_NAME: usize = 64;

/// The service object tonic serves: a sender to the job's task.
pub struct Service(pub mpsc::Sender<Request>);

impl Service {
    /// Sends a request to the job's task and waits for its reply.
    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, Status>>) -> Request,
    ) -> Result<Response<T>, Status> {
        let (tx, rx) = oneshot::channel();
        let gone = || Status::unavailable("the coordinator is stopping");
        self.0.send(make(tx)).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?.map(Response::new)
    }
}

/// The unit a name stands for.
pub fn unit_of(id: &str) -> Result<Ask, Status> {
    parse_unit_id(id)
        .map(|(region, query)| Ask { region, query })
        .ok_or_else(|| Status::invalid_argument(format!("{id:?} names no unit")))
}

/// Workers a result may say it rests on.
const MAX_USES: usize = 4096;

/// True for a worker name or instance the coordinator takes: 1 to [`MAX_NAME`] bytes,
/// without control characters or `#` (which separates the two in a worker's id).
pub fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && !s.contains(|c: char| c.is_control() || c == '#')
}

/// A registration, checked: a valid instance and name (an empty name means "worker").
pub fn registration_from_pb(r: &pb::RegisterRequest) -> Result<(), Status> {
    if !valid_name(&r.instance) || !(r.name.is_empty() || valid_name(&r.name)) {
        return Err(Status::invalid_argument(format!(
            "worker name and instance must be 1 to {MAX_NAME} bytes without control characters or '#'"
        )));
    }
    Ok(())
}

/// A submitted result, read and checked for form (what its facts say is judged later).
pub fn submission_from_pb(r: pb::SubmitRequest) -> Result<Submission, Status> {
    let ask = unit_of(&r.unit_id)?;
    if region_from_pb(r.region.as_ref())? != ask.region {
        return Err(Status::invalid_argument("the region does not match the unit"));
    }
    let worker_id = |w: &String| w.split_once('#').is_some_and(|(n, i)| valid_name(n) && valid_name(i));
    if r.uses.len() > MAX_USES || !r.uses.iter().all(worker_id) {
        return Err(Status::invalid_argument(format!(
            "`uses` must name at most {MAX_USES} workers by their ids (name#instance)"
        )));
    }
    Ok(Submission {
        worker: r.worker_id,
        ask,
        attempt: r.attempt,
        facts: facts_from_pb(r.facts.as_ref()),
        finished: r.finished,
        nodes: r.nodes,
        millis: r.millis,
        from_cache: r.from_cache,
        proof: r.proof,
        shared: r.shared.iter().map(shared_from_pb).collect::<Result<_, _>>()?,
        uses: r.uses,
    })
}

/// A heartbeat's units: (unit, attempt, nodes).
pub fn progress_from_pb(units: &[pb::UnitProgress]) -> Result<Vec<(Ask, u64, u64)>, Status> {
    units.iter().map(|p| Ok((unit_of(&p.unit_id)?, p.attempt, p.nodes))).collect()
}

#[tonic::async_trait]
impl Coordinator for Service {
    async fn register(&self, req: Call<pb::RegisterRequest>) -> Result<Response<pb::RegisterReply>, Status> {
        let r = req.into_inner();
        registration_from_pb(&r)?;
        self.ask(|reply| Request::Register(r, reply)).await
    }

    async fn lease(&self, req: Call<pb::LeaseRequest>) -> Result<Response<pb::LeaseReply>, Status> {
        let pb::LeaseRequest { worker_id: worker, slot } = req.into_inner();
        self.ask(|reply| Request::Lease { worker, slot, reply }).await
    }

    async fn heartbeat(&self, req: Call<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatReply>, Status> {
        let r = req.into_inner();
        let units = progress_from_pb(&r.units)?;
        self.ask(|reply| Request::Heartbeat { worker: r.worker_id, units, reply }).await
    }

    async fn submit(&self, req: Call<pb::SubmitRequest>) -> Result<Response<pb::SubmitReply>, Status> {
        let s = submission_from_pb(req.into_inner())?;
        self.ask(|reply| Request::Submit(s, reply)).await
    }

    async fn release(&self, req: Call<pb::ReleaseRequest>) -> Result<Response<pb::ReleaseReply>, Status> {
        let r = req.into_inner();
        let units = r.unit_ids.iter().map(|id| unit_of(id)).collect::<Result<Vec<_>, _>>()?;
        self.ask(|reply| Request::Release { worker: r.worker_id, units, leaving: r.leaving, reply }).await
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
