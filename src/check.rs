//! `cram check`: verifies a certificate with the independent checker of
//! `cram_certificate`, which shares no search code with the solver, and says what it
//! proves. A certificate that does not prove its claim is refused with exit code 3, the
//! failing fact or byte named.

use crate::report::thousands;
use crate::Failure;
use clap::Args;
use cram_certificate::{Checked, Claim};
use cram_engine::Outcome;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `cram check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The certificate file (written by `cram solve --certificate`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Checking threads [default: every core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `cram check --json` prints.
#[derive(Serialize)]
struct CheckRecord {
    file: String,
    position: String,
    outcome: Outcome,
    /// The nimber proved, or null when only a first-player win is proved.
    nimber: Option<u8>,
    facts: u64,
    small_regions: u64,
    bytes: u64,
    millis: u64,
}

/// Runs `cram check`.
pub fn run_check(a: &CheckArgs) -> Result<(), Failure> {
    let name = a.file.display().to_string();
    let bytes = std::fs::read(&a.file).map_err(|e| Failure::input(format!("{name}: {e}")))?;
    let threads = a.threads.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |n| n as usize);
    let start = Instant::now();
    let checked: Checked = cram_certificate::check(&bytes, threads)
        .map_err(|e| Failure::database(format!("{name}: certificate refused: {e}")))?;
    let millis = start.elapsed().as_millis() as u64;
    let nimber = match checked.claim {
        Claim::Nimber(n) => Some(n),
        Claim::FirstPlayerWins => None,
    };
    let outcome = if nimber == Some(0) { Outcome::Second } else { Outcome::First };
    if a.json {
        let r = CheckRecord {
            file: name,
            position: checked.position,
            outcome,
            nimber,
            facts: checked.facts,
            small_regions: checked.small_regions,
            bytes: bytes.len() as u64,
            millis,
        };
        println!("{}", serde_json::to_string(&r).expect("records serialise"));
        return Ok(());
    }
    let proved = match nimber {
        Some(n) => format!("{}, nimber *{n}", outcome.describe()),
        None => outcome.describe().to_string(),
    };
    println!(
        "{}: {proved} — certificate {name} checked ({} facts, {} small regions computed, {} bytes, {:.3} s)",
        checked.position,
        thousands(checked.facts),
        thousands(checked.small_regions),
        thousands(bytes.len() as u64),
        millis as f64 / 1000.0
    );
    Ok(())
}
