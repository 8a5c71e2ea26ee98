//! A certified job's evidence: each result's proof, checked by the independent checker's
//! rules ([`cram_certificate::Ledger`]) against the facts of the proofs checked before it,
//! one at a time in the order the results came (a proof may rest on facts an earlier proof
//! of the same worker sent). A proof that checks makes its result count; one that does not
//! shows its worker wrong. The ledger of checked facts is built again on a restart from the
//! proofs the log says were checked.

use crate::events::Event;
use crate::store::{read_proof, StoreError};
use cram_certificate::{Ledger, Rejection};
use cram_engine::Question;
use std::path::{Path, PathBuf};
use tokio::task::JoinHandle;

/// What checking one proof found.
pub enum Checked {
    /// It checks: the facts it added.
    Proved(u64),
    /// It does not: why (the worker is wrong).
    Refused(String),
    /// Its file cannot be read (lost with a machine): the unit is to be proved again.
    Lost(String),
}

/// A proof check's outcome, with what was checked.
pub struct ProofChecked {
    /// The unit whose result the proof is of.
    pub unit: Question,
    /// The worker that sent it.
    pub worker: String,
    /// What the check found.
    pub checked: Checked,
}

/// Checks `bytes`, the proof of a result on `unit`, against the facts `ledger` holds, and
/// adds its facts to the ledger: how many it added, or why it does not check.
pub fn check_proof(ledger: &mut Ledger, unit: Question, bytes: &[u8]) -> Result<u64, String> {
    let facts =
        cram_engine::proof::read_export(bytes).map_err(|e| format!("its proof of {unit} cannot be read: {e}"))?;
    match ledger.verify(&facts) {
        Ok(n) => Ok(n as u64),
        Err(Rejection::Fact { region, value, why, .. }) => {
            Err(format!("its proof of {unit} does not check: {region} = *{value}: {why}"))
        }
        Err(e) => Err(format!("its proof of {unit} does not check: {e}")),
    }
}

/// The checker of a certified job's proofs.
pub struct ProofChecker {
    dir: PathBuf,
    /// The facts checked so far (away while a check runs).
    ledger: Option<Ledger>,
    running: Option<JoinHandle<(Ledger, ProofChecked)>>,
}

impl ProofChecker {
    /// A checker of the proofs in `dir`, for regions above `small` cells, starting from the
    /// proofs a replay found checked (`proved`: their files, in log order). Returns the
    /// checker and the units whose checked proofs are gone (to be proved again).
    pub fn new(dir: &Path, small: u32, proved: &[(Question, String)]) -> (ProofChecker, Vec<Question>) {
        let mut ledger = Ledger::new(small);
        let mut lost = Vec::new();
        for (unit, file) in proved {
            match read_proof(dir, file).map_err(|e| e.to_string()).and_then(|b| cram_engine::proof::read_export(&b)) {
                Ok(facts) => {
                    for f in facts {
                        ledger.add_verified(f.shape, f.value);
                    }
                }
                Err(e) => {
                    tracing::warn!(proof = %file, unit = %unit, "a checked proof cannot be read: {e}; its unit is proved again");
                    lost.push(*unit);
                }
            }
        }
        (ProofChecker { dir: dir.to_path_buf(), ledger: Some(ledger), running: None }, lost)
    }

    /// True when no check runs.
    pub fn is_idle(&self) -> bool {
        self.running.is_none()
    }

    /// Starts checking `file`, the proof of `worker`'s result on `unit` (when idle).
    pub fn start(&mut self, unit: Question, worker: String, file: String) {
        let mut ledger = self.ledger.take().expect("idle");
        let dir = self.dir.clone();
        self.running = Some(tokio::task::spawn_blocking(move || {
            let checked = match read_proof(&dir, &file) {
                Err(e @ StoreError::Io { .. }) => Checked::Lost(e.to_string()),
                Err(e) => Checked::Lost(e.to_string()),
                Ok(bytes) => match check_proof(&mut ledger, unit, &bytes) {
                    Ok(n) => Checked::Proved(n),
                    Err(why) => Checked::Refused(why),
                },
            };
            (ledger, ProofChecked { unit, worker, checked })
        }));
    }

    /// Completes when the check under way does (never when none is).
    pub async fn done(&mut self) -> ProofChecked {
        let Some(task) = self.running.as_mut() else { return std::future::pending().await };
        let (ledger, checked) = task.await.unwrap_or_else(|e| panic!("the proof checker failed: {e}"));
        self.running = None;
        self.ledger = Some(ledger);
        checked
    }

    /// The event a check calls for, if any: `Proved`, or the worker's `Distrust`.
    pub fn event(c: &ProofChecked) -> Option<Event> {
        match &c.checked {
            Checked::Proved(n) => Some(Event::Proved { unit: c.unit, worker: c.worker.clone(), facts: *n }),
            Checked::Refused(why) => Some(Event::Distrust { worker: c.worker.clone(), reason: why.clone() }),
            Checked::Lost(_) => None,
        }
    }
}
