//! A certified job's certificate, assembled at the end from its results' proofs (a proof
//! that contradicts one already taken is left out, with a warning: the check decides), the
//! exact values the top holds, and the coordinator's own prover for the top; checked by the
//! independent checker, and written only then.

use crate::outcome::{CertificateWritten, CoordError};
use crate::settings::CertificateTarget;
use cram_certificate::Shape;
use cram_engine::proof::Prover;
use cram_engine::region::AnyRegion;
use cram_engine::{Board, Config, DbSet, Solution, Solver};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Memory of the table of the assembly's own searches (what the proofs lack).
const ASSEMBLY_TT_BYTES: usize = 256 << 20;

/// What the assembly starts from.
pub struct Assembly {
    /// The position.
    pub board: Board,
    /// Its answer.
    pub solution: Solution,
    /// Engine settings for the coordinator's own prover.
    pub pairing: bool,
    /// Databases for the coordinator's own prover.
    pub dbs: Arc<DbSet>,
    /// The proof files of the results held, and the directory they are in.
    pub proofs: Vec<String>,
    /// Where the proofs are.
    pub proof_dir: PathBuf,
    /// Regions whose exact values the top holds.
    pub values: Vec<(AnyRegion, u8)>,
}

/// Assembles, checks and writes the certificate (on a blocking thread).
pub async fn certify(a: Assembly, target: &CertificateTarget) -> Result<CertificateWritten, CoordError> {
    let started = Instant::now();
    let values: Vec<(Shape, u8)> = a
        .values
        .iter()
        .map(|(r, v)| {
            let (h, w) = r.dims();
            (Shape::of(h, w, r.dense()), *v)
        })
        .collect();
    tracing::info!(target: crate::PROGRESS, proofs = a.proofs.len(), values = values.len(), "assembling the certificate");
    let target = target.clone();
    let made = tokio::task::spawn_blocking(move || -> Result<CertificateWritten, String> {
        let config = Config { tt_bytes: ASSEMBLY_TT_BYTES, pairing: a.pairing };
        let mut solver = Solver::new(&config, a.dbs);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut prover = Prover::new(&mut solver, target.small);
        prover.set_threads(threads);
        prover.preload_values(values);
        // One file at a time: the proofs of a long job can be many GiB in all. One that
        // cannot be read or does not import only costs time: what the certificate then
        // lacks, the prover proves by its own search.
        for name in &a.proofs {
            let imported = crate::store::read_proof(&a.proof_dir, name)
                .map_err(|e| e.to_string())
                .and_then(|b| prover.import(&b));
            if let Err(e) = imported {
                tracing::warn!(proof = %name, "a result's proof is left out of the certificate: {e}");
            }
        }
        tracing::info!(target: crate::PROGRESS, facts = prover.facts(), ms = started.elapsed().as_millis() as u64, "the proofs read");
        let cert = prover.prove(&a.board, &a.solution).map_err(|e| e.to_string())?;
        drop(prover);
        tracing::info!(
            target: crate::PROGRESS,
            nodes = solver.nodes(),
            ms = started.elapsed().as_millis() as u64,
            "the top proved and the certificate's facts gathered (nodes: the assembly's own searches)"
        );
        let bytes = cert.to_bytes();
        cram_certificate::check(&bytes, threads).map_err(|e| format!("the assembled certificate does not check: {e}"))?;
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
