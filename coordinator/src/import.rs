//! Taking an earlier job's results into a new job on the same position (`--import`): a
//! nimber job starts from what an outcome job of the same board established (its "is the
//! value 0?" answers), a job on a new machine from a job whose proofs are elsewhere.
//!
//! What is taken: the finished results the earlier log kept (those of workers it distrusted
//! are left out), the coordinator's own answers among them, in
//! the order the earlier job checked their proofs. They are written into the new job's log
//! after an [`Event::Imported`] line naming the source, so the new log alone resumes the
//! new job. In a certified job each result's proof is read from the source's `proofs/` and
//! checked again here, in the order the earlier job checked them, by the independent
//! checker's rules; a result whose proof is missing, or does not check (it may rest on
//! facts of a missing one), is taken without it, and its unit is searched and proved again.
//!
//! What is refused, before anything is written: a source that is not a sealed event log
//! whole up to its last line, or that holds a job on another position, with other pairing
//! or other certificate settings (its facts would not be this job's facts).

use crate::events::{Event, JobRecord, ResultRecord};
use crate::prove::check_proof;
use crate::store::{read_log, read_proof, StoreError, LOG_FILE, PROOF_DIR};
use cram_certificate::Ledger;
use cram_engine::Question;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// An earlier job's results, ready to be written into a new job.
#[derive(Debug)]
pub struct Import {
    /// The source as given (a state directory or an event log).
    pub source: String,
    /// Its results to take, in order; in a certified job each with its proof when the proof
    /// is there and checks.
    pub results: Vec<(ResultRecord, Option<CheckedProof>)>,
}

/// An imported result's proof, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct CheckedProof {
    /// The proof file's bytes.
    pub bytes: Vec<u8>,
    /// The facts it added to the checked ones.
    pub facts: u64,
}

/// Why an import is refused.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The source cannot be read, or its log is damaged.
    #[error("--import {from}: {reason}")]
    Unreadable {
        /// The source as given.
        from: String,
        /// What is wrong.
        reason: String,
    },
    /// The source holds a job whose facts are not this job's.
    #[error("--import {from}: it holds job {spec} ({settings}), which is not {wanted} on the same position with the same settings")]
    OtherPosition {
        /// The source as given.
        from: String,
        /// Its job's spec.
        spec: String,
        /// Its job's settings.
        settings: String,
        /// This job's spec and settings.
        wanted: String,
    },
}

/// True when facts established by `source`'s job are facts of `job`: the same position,
/// pairing and certificate settings (the mode may differ).
fn compatible(source: &JobRecord, job: &JobRecord) -> bool {
    (source.rows, source.cols, &source.empty, source.pairing, source.certificate_small)
        == (job.rows, job.cols, &job.empty, job.pairing, job.certificate_small)
}

/// Reads what `source` (a state directory, or its `events.jsonl`) holds for `job`, checking
/// each proof (a certified job) in at most `proof_memory` bytes.
pub fn read(source: &Path, job: &JobRecord, proof_memory: u64) -> Result<Import, ImportError> {
    let name = source.display().to_string();
    let unreadable = |reason: String| ImportError::Unreadable { from: name.clone(), reason };
    let (log, proofs): (PathBuf, Option<PathBuf>) = if source.is_dir() {
        (source.join(LOG_FILE), Some(source.join(PROOF_DIR)))
    } else {
        (source.to_path_buf(), None)
    };
    if !log.is_file() {
        return Err(unreadable(format!("{} is not an event log", log.display())));
    }
    let read = read_log(&log).map_err(|e| unreadable(e.to_string()))?;
    if read.torn_at.is_some() {
        tracing::warn!(log = %log.display(), "the imported log ends in a torn line; it is left out");
    }
    let events = read.replay.events;
    let Some(Event::Job(held)) = events.first() else {
        return Err(unreadable("its log holds no job".into()));
    };
    if !compatible(held, job) {
        return Err(ImportError::OtherPosition {
            from: name,
            spec: held.spec.clone(),
            settings: held.settings(),
            wanted: format!("{} ({})", job.spec, job.settings()),
        });
    }
    let distrusted: HashSet<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Distrust { worker, .. } => Some(worker.as_str()),
            _ => None,
        })
        .collect();
    let kept = |r: &ResultRecord| r.finished && !distrusted.contains(r.worker.as_str());
    // The order the source checked proofs in: a proof may rest on facts of proofs checked
    // before it.
    let proved: HashMap<(Question, &str), usize> = events
        .iter()
        .filter_map(|e| match e {
            Event::Proved { unit, worker, .. } => Some((*unit, worker.as_str())),
            _ => None,
        })
        .enumerate()
        .map(|(i, k)| (k, i))
        .collect();
    let mut results: Vec<&ResultRecord> = events
        .iter()
        .filter_map(|e| match e {
            Event::Result(r) if kept(r) => Some(r),
            _ => None,
        })
        .collect();
    results.sort_by_key(|r| proved.get(&(r.unit, r.worker.as_str())).copied().unwrap_or(usize::MAX));
    let ledger = job.certificate_small.map(Ledger::new);
    let mut out: Vec<(ResultRecord, Option<CheckedProof>)> = Vec::with_capacity(results.len());
    // The proofs to check: (the result's place in `out`, the proof, why it last failed).
    let mut pending: Vec<(usize, Vec<u8>, String)> = Vec::new();
    for r in results {
        let bytes = match (&r.proof, &proofs) {
            (Some(file), Some(dir)) => match read_proof(dir, file) {
                Ok(b) => Some(b),
                Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(unreadable(e.to_string())),
            },
            _ => None,
        };
        if let (Some(b), Some(_)) = (bytes, &ledger) {
            pending.push((out.len(), b, String::new()));
        }
        out.push((r.clone(), None));
    }
    // The source checked several proofs at once, so a proof may rest on one logged after
    // it: those that fail are tried again after the others, while any more check. Each
    // proof's facts of one size are checked on every core.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(ledger) = &ledger {
        loop {
            let tried = pending.len();
            let mut failed = Vec::new();
            for (i, bytes, _) in pending {
                let r = &out[i].0;
                match check_proof(ledger, r.unit, r.answer(), &bytes, threads, proof_memory) {
                    Ok(facts) => out[i].1 = Some(CheckedProof { bytes, facts }),
                    Err(why) => failed.push((i, bytes, why)),
                }
            }
            pending = failed;
            if pending.is_empty() || pending.len() == tried {
                break;
            }
        }
    }
    for (i, _, why) in &pending {
        tracing::warn!(unit = %out[*i].0.unit, "an imported proof does not check ({why}); its unit is proved again");
    }
    Ok(Import { source: name, results: out })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::sealed_line;
    use cram_engine::{Board, Mode};

    fn job(spec: &str, mode: Mode) -> JobRecord {
        let board = Board::parse(spec).expect("a board");
        JobRecord {
            spec: spec.into(),
            rows: board.rows(),
            cols: board.cols(),
            empty: format!("{:x}", board.empty()),
            mode,
            pairing: true,
            build: "test".into(),
            certificate_small: None,
        }
    }

    fn result(unit: &str, worker: &str) -> ResultRecord {
        let unit: Question = unit.parse().expect("a question");
        ResultRecord {
            unit,
            region: unit.region.key(),
            excluded: 1,
            upper: 255,
            finished: true,
            nodes: 10,
            millis: 1,
            worker: worker.into(),
            from_cache: false,
            check: false,
            verify: false,
            proof: None,
            shared: vec![],
        }
    }

    fn write_log(path: &Path, events: &[Event]) {
        let mut seal = 0;
        let mut text = String::new();
        for e in events {
            let (line, s) = sealed_line(e, seal);
            text += &line;
            seal = s;
        }
        std::fs::write(path, text).expect("written");
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cram-import-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[test]
    fn takes_the_kept_results_of_a_job_on_the_same_position_in_proof_order() {
        let dir = tempdir("kept");
        let log = dir.join(LOG_FILE);
        let a = result("3x4:fff?0", "w1");
        let b = result("3x3:1ff?0", "liar");
        let c = result("2x4:ff?0", "w2");
        let mut d = result("2x5:3ff?0", "w2");
        d.proof = Some("0123456789abcdef.proof".into());
        let mut unfinished = result("3x4:fff?1", "w3");
        unfinished.finished = false;
        write_log(
            &log,
            &[
                Event::Job(job("4x4", Mode::Outcome)),
                Event::Result(a.clone()),
                Event::Result(b),
                Event::Result(c.clone()),
                Event::Result(d.clone()),
                Event::Result(unfinished),
                Event::Distrust { worker: "liar".into(), reason: "test".into() },
                Event::Proved { unit: d.unit, worker: "w2".into(), facts: 3 },
            ],
        );
        let import = read(&dir, &job("4x4", Mode::Nimber), crate::prove::DEFAULT_PROOF_MEMORY).expect("imported");
        // The proved result first; a result whose search loaded the liar's (verified)
        // shared facts is kept.
        assert_eq!(import.results, vec![(d, None), (a, None), (c, None)]);
    }

    #[test]
    fn refuses_another_position_a_damaged_log_and_a_missing_one() {
        let dir = tempdir("refused");
        let log = dir.join(LOG_FILE);
        write_log(&log, &[Event::Job(job("4x5", Mode::Outcome))]);
        let e =
            read(&log, &job("4x4", Mode::Nimber), crate::prove::DEFAULT_PROOF_MEMORY).expect_err("another position");
        assert!(matches!(e, ImportError::OtherPosition { .. }), "{e}");
        let mut other_pairing = job("4x4", Mode::Outcome);
        other_pairing.pairing = false;
        write_log(&log, &[Event::Job(other_pairing)]);
        assert!(matches!(
            read(&log, &job("4x4", Mode::Nimber), crate::prove::DEFAULT_PROOF_MEMORY),
            Err(ImportError::OtherPosition { .. })
        ));
        write_log(&log, &[Event::Job(job("4x4", Mode::Outcome)), Event::Result(result("3x4:fff?0", "w"))]);
        let text = std::fs::read_to_string(&log).expect("read").replacen("\"nodes\":10", "\"nodes\":11", 1);
        std::fs::write(&log, text).expect("written");
        let e = read(&log, &job("4x4", Mode::Nimber), crate::prove::DEFAULT_PROOF_MEMORY).expect_err("damaged");
        assert!(e.to_string().contains("damaged"), "{e}");
        let e = read(&dir.join("nothing"), &job("4x4", Mode::Nimber), crate::prove::DEFAULT_PROOF_MEMORY)
            .expect_err("missing");
        assert!(e.to_string().contains("not an event log"), "{e}");
    }
}
