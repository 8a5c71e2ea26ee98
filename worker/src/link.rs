//! The worker's link to its coordinator, as a stub and an actor (the shape of lichess
//! fishnet's `api.rs`): [`channel`] gives a [`Link`], cheap to clone, whose typed async
//! methods the search threads and the heartbeat task call, and a [`LinkActor`] that owns
//! the registration. Every call goes through [`Link::call`]: how a failure is handled
//! (retried with backoff, registered again, or final) is decided in one place.
//!
//! Every call carries the worker's secret (drawn when the process starts, see cram.proto):
//! the coordinator knows the worker by it. While the coordinator is away calls retry with
//! capped, randomised backoff; a coordinator that does not know the worker (it restarted)
//! gets a new registration, under the same id (`name#digest of the secret`). A refusal (other protocol, build or databases, wrong token, a TLS
//! setup that cannot work) or a disconnection (the worker's results were found wrong) is
//! final.

use crate::WorkerError;
use cram_proto::pb::{self, lease_reply};
use cram_proto::Client;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tonic::{Code, Status};

/// The registration in force.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The worker's id.
    pub id: String,
    /// How often to send heartbeats.
    pub heartbeat: Duration,
    /// The job's engine setting.
    pub pairing: bool,
    /// The job is certified: results carry proofs with facts on regions above this size.
    pub certificate_small: Option<u32>,
    /// Share facts about regions of at least this many cells that took at least this many
    /// nodes (none: share nothing).
    pub share: Option<(u32, u64)>,
}

/// Why a call gave up.
#[derive(Debug)]
pub enum CallError {
    /// Refused for good, or disconnected: the worker stops with this error.
    Fatal(WorkerError),
    /// The worker is stopping.
    Stopped,
}

/// How long a call waits for its answer (a submission: and its proof's travel) before it
/// is tried again.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// What a refused submission means.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted {
    /// The coordinator took it (a duplicate is answered OK too); `recorded` when it was new.
    Answered {
        /// New to the coordinator.
        recorded: bool,
    },
    /// Refused for what it says (or too large to read): sending it again would not help.
    Rejected(String),
}

/// How a failed call is handled.
enum Handling {
    Retry,
    Register,
    Fatal(WorkerError),
}

/// Sorts a failure: final refusals and a disconnection end the worker; an unknown worker
/// registers again; anything else waits and retries.
fn handling(e: &Status, url: &str) -> Handling {
    match e.code() {
        // INVALID_ARGUMENT here: the coordinator cannot read what this worker sends (a
        // submit refused for its facts is told apart by the caller).
        Code::FailedPrecondition | Code::Unauthenticated | Code::InvalidArgument => {
            tracing::error!("the coordinator refused this worker: {}", e.message());
            Handling::Fatal(WorkerError::Refused(e.message().to_string()))
        }
        Code::PermissionDenied => {
            tracing::error!("the coordinator disconnected this worker: {}", e.message());
            Handling::Fatal(WorkerError::Disconnected(e.message().to_string()))
        }
        Code::NotFound => Handling::Register,
        // A TLS setup that cannot work is a refusal too: retrying would not help.
        _ => match cram_proto::tls_mismatch(e, url) {
            Some(why) => {
                tracing::error!("cannot talk to the coordinator: {why}");
                Handling::Fatal(WorkerError::Refused(why))
            }
            None => Handling::Retry,
        },
    }
}

/// Randomised exponential backoff from 250 ms, capped at 5 s.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const CAP: Duration = Duration::from_secs(5);

    fn new() -> Backoff {
        Backoff { next: Backoff::FIRST }
    }

    /// A delay between half and all of the current step; the step doubles up to the cap.
    fn next(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(Backoff::CAP);
        step.mul_f64(rand::random_range(0.5..=1.0))
    }
}

/// What the actor is asked.
enum Message {
    /// The registration in force, registering first when there is none.
    Registration(oneshot::Sender<Result<Registration, CallError>>),
    /// The coordinator does not know worker `id`: forget that registration.
    Unknown(String),
    /// The registration, if any, without registering.
    Current(oneshot::Sender<Option<Registration>>),
}

/// What a registration announces.
pub struct Identity {
    /// Protocol version (tests announce a wrong one).
    pub protocol: u32,
    /// Build announced.
    pub build: String,
    /// Fingerprint of the databases.
    pub db_fingerprint: String,
    /// The worker's name.
    pub name: String,
    /// Search threads.
    pub threads: u32,
}

/// The stub: typed calls to the coordinator.
#[derive(Clone)]
pub struct Link {
    tx: mpsc::Sender<Message>,
    client: Client,
    url: String,
    stop: watch::Receiver<bool>,
    solved: Solved,
}

/// Raised once the coordinator said the job is solved: from then on a coordinator that
/// does not answer is taken as gone for good (it stays only a linger period after the
/// answer), and calls give up instead of retrying for ever.
#[derive(Clone, Default)]
struct Solved(Arc<AtomicBool>);

impl Solved {
    fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// What a failure that would be retried comes to: a retry, or, the job being solved,
    /// giving up.
    fn retry_or_give_up(&self, e: &Status) -> Result<(), CallError> {
        if self.is_raised() {
            tracing::info!(error = %e.message(), "the job is solved and the coordinator no longer answers; stopping");
            return Err(CallError::Stopped);
        }
        Ok(())
    }
}

/// The actor: owns the registration, registers (with backoff) when asked and there is
/// none.
pub struct LinkActor {
    rx: mpsc::Receiver<Message>,
    client: Client,
    url: String,
    identity: Identity,
    stop: watch::Receiver<bool>,
    registration: Option<Registration>,
    solved: Solved,
}

/// A link to the coordinator at `url` through `client`, registering as `identity`; calls
/// give up with [`CallError::Stopped`] once `stop` is raised.
pub fn channel(client: Client, url: &str, identity: Identity, stop: watch::Receiver<bool>) -> (Link, LinkActor) {
    let (tx, rx) = mpsc::channel(64);
    let solved = Solved::default();
    let link = Link { tx, client: client.clone(), url: url.to_string(), stop: stop.clone(), solved: solved.clone() };
    let actor = LinkActor { rx, client, url: url.to_string(), identity, stop, registration: None, solved };
    (link, actor)
}

/// Sleeps `d`, or less if `stop` is raised; false when stopping.
async fn pause(stop: &watch::Receiver<bool>, d: Duration) -> bool {
    let mut rx = stop.clone();
    if *rx.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = rx.wait_for(|s| *s) => false,
    }
}

impl LinkActor {
    /// Answers messages until every [`Link`] is dropped.
    pub async fn run(mut self) {
        while let Some(m) = self.rx.recv().await {
            match m {
                Message::Registration(reply) => {
                    let r = self.registration().await;
                    let _ = reply.send(r);
                }
                Message::Unknown(id) => {
                    if self.registration.as_ref().is_some_and(|r| r.id == id) {
                        tracing::info!("the coordinator does not know this worker (restarted?); registering again");
                        self.registration = None;
                    }
                }
                Message::Current(reply) => {
                    let _ = reply.send(self.registration.clone());
                }
            }
        }
    }

    async fn registration(&mut self) -> Result<Registration, CallError> {
        if let Some(r) = &self.registration {
            return Ok(r.clone());
        }
        let mut backoff = Backoff::new();
        loop {
            if *self.stop.borrow() {
                return Err(CallError::Stopped);
            }
            let i = &self.identity;
            let req = pb::RegisterRequest {
                protocol: i.protocol,
                build: i.build.clone(),
                db_fingerprint: i.db_fingerprint.clone(),
                name: i.name.clone(),
                threads: i.threads,
            };
            let attempt = tokio::time::timeout(CALL_LIMIT, self.client.clone().register(req)).await;
            let e = match attempt.unwrap_or_else(|_| Err(Status::deadline_exceeded("no answer to the registration"))) {
                Ok(r) => {
                    let r = r.into_inner();
                    tracing::info!(worker = %r.worker_id, job = %r.job, "registered with the coordinator");
                    let new = Registration {
                        id: r.worker_id,
                        heartbeat: Duration::from_millis(r.heartbeat_millis.max(50) as u64),
                        pairing: r.pairing,
                        certificate_small: r.certificate_small,
                        share: (r.share_min_cells > 0).then_some((r.share_min_cells, r.share_min_nodes)),
                    };
                    self.registration = Some(new.clone());
                    return Ok(new);
                }
                Err(e) => e,
            };
            match handling(&e, &self.url) {
                Handling::Fatal(f) => return Err(CallError::Fatal(f)),
                Handling::Retry | Handling::Register => {
                    self.solved.retry_or_give_up(&e)?;
                    let d = backoff.next();
                    tracing::warn!(code = ?e.code(), error = %e.message(), retry_in_ms = d.as_millis() as u64, "coordinator unreachable");
                    if !pause(&self.stop, d).await {
                        return Err(CallError::Stopped);
                    }
                }
            }
        }
    }
}

impl Link {
    /// The registration in force, registering first when there is none.
    pub async fn registration(&self) -> Result<Registration, CallError> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Message::Registration(tx)).await.map_err(|_| CallError::Stopped)?;
        rx.await.map_err(|_| CallError::Stopped)?
    }

    /// The registration, if there is one now (no call).
    pub async fn current(&self) -> Option<Registration> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Message::Current(tx)).await.ok()?;
        rx.await.ok().flatten()
    }

    /// The coordinator said the job is solved (a heartbeat's reply): calls stop retrying.
    pub fn heard_solved(&self) {
        self.solved.raise();
    }

    /// True once the coordinator said the job is solved.
    pub fn solved(&self) -> bool {
        self.solved.is_raised()
    }

    /// Makes `call` (with the registration in force) until it succeeds, a failure is final,
    /// or the worker stops: the one place where failures are sorted and backed off.
    /// Each attempt is given `limit` to be answered.
    async fn call<T, F, Fut>(&self, limit: Duration, mut call: F) -> Result<T, CallError>
    where
        F: FnMut(Client, Registration) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut backoff = Backoff::new();
        loop {
            let reg = self.registration().await?;
            let attempt = tokio::time::timeout(limit, call(self.client.clone(), reg.clone())).await;
            let e = match attempt {
                Ok(Ok(t)) => return Ok(t),
                Ok(Err(e)) => e,
                Err(_) => Status::deadline_exceeded(format!("no answer within {} s", limit.as_secs())),
            };
            if *self.stop.borrow() {
                return Err(CallError::Stopped);
            }
            match handling(&e, &self.url) {
                Handling::Fatal(f) => return Err(CallError::Fatal(f)),
                Handling::Register => {
                    let _ = self.tx.send(Message::Unknown(reg.id)).await;
                }
                Handling::Retry => {
                    self.solved.retry_or_give_up(&e)?;
                    let d = backoff.next();
                    tracing::warn!(code = ?e.code(), error = %e.message(), retry_in_ms = d.as_millis() as u64, "coordinator unreachable");
                    if !pause(&self.stop, d).await {
                        return Err(CallError::Stopped);
                    }
                }
            }
        }
    }

    /// Asks for a unit for search thread `slot`: the reply, and the registration it was
    /// asked under.
    pub async fn lease(&self, slot: usize) -> Result<(Registration, lease_reply::Reply), CallError> {
        self.call(CALL_LIMIT, |mut client, reg| async move {
            let req = pb::LeaseRequest { slot: slot as u32 };
            let reply = client.lease(req).await?.into_inner().reply;
            reply.map(|r| (reg, r)).ok_or_else(|| Status::internal("empty lease reply"))
        })
        .await
    }

    /// Reports the progress of `units`.
    pub async fn heartbeat(&self, units: Vec<pb::UnitProgress>) -> Result<pb::HeartbeatReply, CallError> {
        self.call(CALL_LIMIT, |mut client, _| {
            let req = pb::HeartbeatRequest { units: units.clone() };
            async move { Ok(client.heartbeat(req).await?.into_inner()) }
        })
        .await
    }

    /// Sends a result until the coordinator answers it.
    pub async fn submit(&self, req: pb::SubmitRequest) -> Result<Submitted, CallError> {
        let unit = req.unit_id.clone();
        // A result with a large proof is given the time to travel at 1 MB/s too.
        let limit = CALL_LIMIT + Duration::from_secs(prost::Message::encoded_len(&req) as u64 / 1_000_000);
        self.call(limit, |mut client, _| {
            let req = req.clone();
            let unit = unit.clone();
            async move {
                match client.submit(req).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        Ok(Submitted::Answered { recorded: r.recorded })
                    }
                    Err(e) if matches!(e.code(), Code::InvalidArgument | Code::OutOfRange) => {
                        tracing::error!(%unit, "the coordinator rejected a result: {}", e.message());
                        Ok(Submitted::Rejected(e.message().to_string()))
                    }
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// Hands units back (once, without retrying: the coordinator would otherwise reissue
    /// them only when their leases expire); `leaving`: the worker is shutting down.
    pub async fn release(&self, units: Vec<String>, leaving: bool) {
        if self.current().await.is_none() || units.is_empty() && !leaving {
            return;
        }
        let req = pb::ReleaseRequest { unit_ids: units.clone(), leaving };
        match tokio::time::timeout(Duration::from_secs(3), self.client.clone().release(req)).await {
            Ok(Ok(r)) => {
                tracing::info!(released = r.into_inner().released, units = ?units, "handed units back to the coordinator")
            }
            // A goodbye without units is a courtesy (the coordinator forgets a silent worker
            // anyway), and it often finds a coordinator already gone after the answer.
            Ok(Err(e)) if units.is_empty() => tracing::debug!(error = %e.message(), "could not say goodbye"),
            Err(_) if units.is_empty() => tracing::debug!("saying goodbye timed out"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e.message(), "could not hand units back; they will be reissued when their leases expire")
            }
            Err(_) => tracing::warn!("handing units back timed out; they will be reissued when their leases expire"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_randomised_doubling_and_capped() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(delays[0] >= Duration::from_millis(125) && delays[0] <= Duration::from_millis(250));
        assert!(delays.iter().all(|d| *d <= Backoff::CAP));
        assert!(delays[9] >= Backoff::CAP / 2);
    }

    /// Once the job is solved, a coordinator that does not answer is gone for good: a call
    /// gives up at its first failure instead of retrying for ever (here no coordinator
    /// ever answers, and the registration the call needs first fails).
    #[tokio::test]
    async fn calls_give_up_once_the_job_is_solved() {
        let url = "http://127.0.0.1:1";
        let client = cram_proto::client(url, None, &cram_proto::new_worker_secret(), None).unwrap();
        let identity =
            Identity { protocol: 0, build: String::new(), db_fingerprint: String::new(), name: "t".into(), threads: 1 };
        let (_stop, stopped) = watch::channel(false);
        let (link, actor) = channel(client, url, identity, stopped);
        tokio::spawn(actor.run());
        // Not solved: the call keeps retrying.
        assert!(tokio::time::timeout(Duration::from_secs(2), link.lease(0)).await.is_err());
        link.heard_solved();
        let r = tokio::time::timeout(Duration::from_secs(30), link.lease(0)).await.expect("gave up");
        assert!(matches!(r, Err(CallError::Stopped)), "{r:?}");
    }

    #[test]
    fn failures_are_sorted_once() {
        let url = "http://127.0.0.1:1";
        assert!(matches!(handling(&Status::not_found("x"), url), Handling::Register));
        assert!(matches!(handling(&Status::unavailable("x"), url), Handling::Retry));
        for code in [Code::FailedPrecondition, Code::Unauthenticated, Code::PermissionDenied] {
            assert!(matches!(handling(&Status::new(code, "x"), url), Handling::Fatal(_)), "{code:?}");
        }
    }
}
