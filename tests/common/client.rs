//! A client that speaks the coordinator's protocol from the test process, as a hostile
//! client would: it registers under a secret of its choosing (or none), leases, submits
//! whatever it likes and rides through coordinator restarts like a worker.
#![allow(dead_code)]

use cram_proto::pb;
use std::time::{Duration, Instant};
use tonic::Code;

/// A protocol client of the tests.
pub struct ProtoClient {
    pub client: cram_proto::Client,
    pub register: pb::RegisterRequest,
    pub secret: String,
}

impl ProtoClient {
    /// A client for `url` named `name`, with a secret of its own.
    pub fn new(url: &str, name: &str) -> ProtoClient {
        ProtoClient::with_secret(url, name, &cram_proto::new_worker_secret())
    }

    /// A client for `url` named `name` that sends `secret` with its calls.
    pub fn with_secret(url: &str, name: &str, secret: &str) -> ProtoClient {
        ProtoClient {
            client: cram_proto::client(url, None, secret, None).unwrap(),
            register: pb::RegisterRequest {
                protocol: cram_proto::PROTOCOL_VERSION,
                build: cram_proto::BUILD_ID.into(),
                db_fingerprint: cram_engine::DbSet::default().fingerprint(),
                name: name.into(),
                threads: 1,
            },
            secret: secret.to_string(),
        }
    }

    /// Its id at the coordinator.
    pub fn id(&self) -> String {
        format!("{}#{}", self.register.name, cram_proto::secret_digest(&self.secret))
    }

    /// Registers, retrying while the coordinator is not up yet (at most `secs`).
    pub async fn register(&mut self, secs: u64) -> Result<pb::RegisterReply, tonic::Status> {
        let started = Instant::now();
        loop {
            match self.client.register(self.register.clone()).await {
                Err(e) if e.code() == Code::Unavailable && started.elapsed() < Duration::from_secs(secs) => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                other => return other.map(|r| r.into_inner()),
            }
        }
    }

    /// Leases a unit, waiting while there is none to hand out now; `None` when the job is
    /// done; registers again when the coordinator forgot it.
    pub async fn unit(&mut self) -> Result<Option<pb::Unit>, tonic::Status> {
        loop {
            match self.client.lease(pb::LeaseRequest { slot: 0 }).await {
                Ok(r) => match r.into_inner().reply {
                    Some(pb::lease_reply::Reply::Unit(u)) => return Ok(Some(u)),
                    Some(pb::lease_reply::Reply::Done(_)) => return Ok(None),
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                },
                Err(e) if e.code() == Code::NotFound => {
                    self.register(30).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// True once the coordinator refuses this client's leases as a distrusted worker's
    /// (PERMISSION_DENIED), false when it has not within `secs`.
    pub async fn disconnected_within(&mut self, secs: u64) -> bool {
        let started = Instant::now();
        loop {
            match self.client.lease(pb::LeaseRequest { slot: 0 }).await {
                Err(e) if e.code() == Code::PermissionDenied => return true,
                _ if started.elapsed() > Duration::from_secs(secs) => return false,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Submits `facts` (finished) as the answer to `unit_id` under `attempt`.
    pub async fn submit(
        &mut self,
        unit: &pb::Unit,
        unit_id: &str,
        facts: cram_engine::Facts,
        shared: Vec<pb::SharedFact>,
    ) -> Result<pb::SubmitReply, tonic::Status> {
        let req = pb::SubmitRequest {
            unit_id: unit_id.to_string(),
            attempt: unit.attempt,
            region: unit.region.clone(),
            facts: Some(cram_proto::facts_to_pb(facts)),
            finished: true,
            nodes: 1000,
            millis: 1,
            from_cache: false,
            proof: Vec::new(),
            shared,
        };
        self.client.submit(req).await.map(|r| r.into_inner())
    }
}

/// A solver that knows the truth about units, to answer them rightly or wrongly (its table
/// kept from unit to unit).
pub struct Oracle(cram_engine::Solver);

impl Default for Oracle {
    fn default() -> Oracle {
        use cram_engine::{Config, DbSet, Solver};
        Oracle(Solver::new(&Config { tt_bytes: 256 << 20, pairing: true }, std::sync::Arc::new(DbSet::default())))
    }
}

impl Oracle {
    /// The truth about a unit's question, and a lie that answers it wrongly (within
    /// `budget` nodes of search; `None` when that is not enough).
    pub fn truth_and_lie(&mut self, unit: &pb::Unit, budget: u64) -> Option<(cram_engine::Facts, cram_engine::Facts)> {
        use cram_engine::{Facts, Query};
        let region = cram_proto::region_from_pb(unit.region.as_ref()).unwrap();
        let query = cram_proto::query_from_pb(unit.query.as_ref()).unwrap();
        self.0.set_budget(budget);
        let truth = self.0.nimber(region).ok()?;
        let other = if truth == 0 { 1 } else { truth - 1 };
        Some(match query {
            Query::IsValue(k) if k == truth => (Facts::exact(k), Facts::excluding(k)),
            Query::IsValue(k) => (Facts::excluding(k), Facts::exact(k)),
            Query::Nimber => (Facts::exact(truth), Facts::exact(other)),
        })
    }
}

/// [`Oracle::truth_and_lie`] with a solver of its own.
pub fn truth_and_lie(unit: &pb::Unit, budget: u64) -> Option<(cram_engine::Facts, cram_engine::Facts)> {
    Oracle::default().truth_and_lie(unit, budget)
}
