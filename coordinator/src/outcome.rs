//! What a coordinator run ends with: the answer and its counts, or why it stopped.

use crate::scheduler::Counters;
use crate::store::StoreError;
use cram_engine::Solution;
use std::path::PathBuf;

/// A finished job.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The answer.
    pub solution: Solution,
    /// Search nodes over all units (all runs) and the coordinator's own small searches.
    pub nodes: u64,
    /// Wall time of this run in milliseconds (the stored time when the job was already done).
    pub millis: u64,
    /// Unit counters.
    pub counters: Counters,
    /// The certificate written, in a certified job.
    pub certificate: Option<CertificateWritten>,
}

/// A certificate a job wrote.
#[derive(Debug, Clone)]
pub struct CertificateWritten {
    /// Where.
    pub path: PathBuf,
    /// Facts it holds.
    pub facts: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Time to assemble, check and write it, in milliseconds.
    pub millis: u64,
}

/// Why a coordinator run stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    /// The state directory cannot be used or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The earlier job given to `--import` cannot be taken.
    #[error(transparent)]
    Import(#[from] crate::import::ImportError),
    /// `--import` on a job that has already run (its log says what it holds).
    #[error("--import is taken only when a job first starts: the job in {0} has run without it; start a new --state to import into")]
    ImportTooLate(PathBuf),
    /// The server failed.
    #[error("gRPC server: {0}")]
    Serve(String),
    /// The TLS certificate or key cannot be used.
    #[error("TLS: the certificate or key cannot be used: {0}")]
    Tls(String),
    /// The certificate could not be made (a proof is missing a fact it needs and the
    /// search for it failed, or the assembled certificate did not check).
    #[error("certificate: {0}")]
    Certificate(String),
    /// A shutdown signal arrived; the state is saved.
    #[error("stopped before the answer; the state in {0} is saved, start the same command to resume")]
    Stopped(PathBuf),
}
