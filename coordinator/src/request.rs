//! The job task's requests: what the gRPC handlers and the HTTP pages ask of it, each with
//! a oneshot for the reply. Handlers only read and check the wire; every decision is the
//! job's.

use crate::scheduler::Submission;
use cram_engine::Question;
use cram_proto::pb;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// A reply to one request.
pub type Reply<T> = oneshot::Sender<Result<T, Status>>;

/// What gRPC handlers and HTTP pages ask of the job.
pub enum Request {
    /// A worker registers (already checked for form).
    Register {
        /// The digest of the worker's secret.
        key: String,
        /// What it says of itself.
        request: pb::RegisterRequest,
        /// Where the answer goes.
        reply: Reply<pb::RegisterReply>,
    },
    /// A search thread asks for a unit.
    Lease {
        /// The digest of the worker's secret.
        key: String,
        /// Which of its threads.
        slot: u32,
        /// Where the answer goes.
        reply: Reply<pb::LeaseReply>,
    },
    /// Progress of the units a worker searches: (unit, attempt, nodes).
    Heartbeat {
        /// The digest of the worker's secret.
        key: String,
        /// Its units.
        units: Vec<(Question, u64, u64)>,
        /// Where the answer goes.
        reply: Reply<pb::HeartbeatReply>,
    },
    /// A result (its `worker` is filled in by the job, from `key`).
    Submit {
        /// The digest of the worker's secret.
        key: String,
        /// The result.
        submission: Submission,
        /// Where the answer goes.
        reply: Reply<pb::SubmitReply>,
    },
    /// A worker hands units back (all it holds when empty), maybe leaving.
    Release {
        /// The digest of the worker's secret.
        key: String,
        /// The units.
        units: Vec<Question>,
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

/// The way in to the job's task: a sender of [`Request`]s.
#[derive(Clone)]
pub struct JobHandle(pub mpsc::Sender<Request>);

impl JobHandle {
    /// Sends a request made around a oneshot and waits for its answer; `None` when the
    /// job's task is gone (the coordinator is stopping).
    pub async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Option<T> {
        let (tx, rx) = oneshot::channel();
        self.0.send(make(tx)).await.ok()?;
        rx.await.ok()
    }
}
