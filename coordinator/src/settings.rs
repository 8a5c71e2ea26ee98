//! What a coordinator run is told: the job, how to split it, leases, checks, sharing,
//! certification, security and where it serves.

use crate::events::JobRecord;
use crate::scheduler::CheckPolicy;
use cram_engine::{Board, DbSet, Mode};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

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
    /// How results are verified.
    pub checks: CheckPolicy,
    /// The coordinator's own searches: at most this many at once (its cores), on one table
    /// of `check_tt_bytes`.
    pub check_threads: usize,
    /// The table of the coordinator's own searches, in bytes (a limit it grows to).
    pub check_tt_bytes: usize,
    /// A certified job's proofs: at most this many checked at once.
    pub proof_threads: usize,
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
    /// Certify the answer: workers send proofs with their results, and the certificate is
    /// written here at the end (docs/certificates.md).
    pub certificate: Option<CertificateTarget>,
    /// Serve gRPC over TLS with this certificate (chain) and key, both PEM.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// What workers share with each other (knowledge across machines).
    pub share: Share,
    /// An earlier job on the same position (its state directory or event log) whose
    /// results a new job starts from (coordinator/src/import.rs).
    pub import: Option<PathBuf>,
}

impl Settings {
    /// The job's record, the first line of its event log.
    pub fn job_record(&self) -> JobRecord {
        JobRecord {
            spec: self.spec.clone(),
            rows: self.board.rows(),
            cols: self.board.cols(),
            empty: format!("{:x}", self.board.empty()),
            mode: self.mode,
            pairing: self.pairing,
            build: cram_proto::BUILD_ID.into(),
            certificate_small: self.certificate.as_ref().map(|c| c.small),
        }
    }
}

/// Which facts workers send back to be handed to the other workers: those about regions
/// of at least `min_cells` cells that took at least `min_nodes` nodes (docs/cluster.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Least region size; 0: nothing is shared.
    pub min_cells: u32,
    /// Least search nodes the fact cost.
    pub min_nodes: u64,
}

impl Share {
    /// Nothing is shared: the default (measured, sharing through the coordinator costs more
    /// than it saves; docs/decisions.md), and for the workers of one process, which share
    /// a table instead.
    pub const NONE: Share = Share { min_cells: 0, min_nodes: 0 };
}

/// Shared facts handed to a worker with one lease, at most.
pub const SHARED_PER_LEASE: usize = 100_000;

/// Where a certified job's certificate goes, and the size of the regions left to the
/// checker (no facts for them).
#[derive(Clone, Debug)]
pub struct CertificateTarget {
    /// The certificate file.
    pub path: PathBuf,
    /// Regions of at most this many cells get no facts.
    pub small: u32,
    /// The memory reading the results' proofs may take together, in bytes
    /// ([`crate::prove::reservation`]): a proof that needs more than all of it is refused
    /// (what a worker could make a coordinator hold is bounded).
    pub proof_memory: u64,
}

/// Where the coordinator serves: gRPC for workers and clients, and optionally the status
/// page (with `/status.json` and `/metrics`) and a listener for `/metrics` only.
pub struct Listeners {
    /// The gRPC service.
    pub grpc: TcpListener,
    /// The status page, its JSON and the metrics (`--http`).
    pub http: Option<TcpListener>,
    /// The metrics only (`--metrics`).
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Only the gRPC service.
    pub fn grpc(listener: TcpListener) -> Listeners {
        Listeners { grpc: listener, http: None, metrics: None }
    }
}
