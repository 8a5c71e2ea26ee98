//! Certificates and proof exports: whatever bytes arrive, `cram_certificate::check`, the
//! certificate reader, `proof::read_export`, `Prover::import` and a `Ledger` refuse them
//! with an error or accept them, and never panic; memory stays within what the compressed
//! length allows (a body or an export decompresses only so far). Besides the bytes as a
//! file (the seeds are real certificates), the first byte picks a way past the checksums:
//! the rest as a body in a file whose header and checksums match it, as a body under header
//! lengths of the input's choosing, or as a proof export (compressed here, or as it is).
#![no_main]

use cram_certificate::format::{reseal, wrap, Certificate};
use cram_certificate::check::check_certificate;
use cram_certificate::{check, Ledger};
use cram_engine::proof::{read_export, Prover};
use cram_engine::{Config, DbSet, Solver};
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::sync::Arc;

/// Regions up to this many cells are left to the mex rule (cheap at 4).
const SMALL: u32 = 4;

thread_local! {
    /// A solver for the provers that import (import does not search: a small table).
    static SOLVER: RefCell<Solver> =
        RefCell::new(Solver::new(&Config { tt_bytes: 1 << 20, pairing: false }, Arc::new(DbSet::default())));
}

fn compress(b: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(b, 1).expect("compressing to memory")
}

/// A file around `body`, checked when it reads (and its small regions are cheap).
fn as_file(file: &[u8]) {
    if let Ok(cert) = Certificate::from_bytes(file) {
        assert_eq!(Certificate::from_bytes(&cert.to_bytes()).as_ref(), Ok(&cert), "a certificate reads back");
        if cert.small <= 12 {
            match (check(file, 1), check_certificate(&cert, 2)) {
                (Ok(a), Ok(b)) => assert_eq!((a.claim, a.facts), (b.claim, b.facts)),
                (Err(a), Err(b)) => assert_eq!(a, b, "the same refusal on 1 and 2 threads"),
                (a, b) => panic!("1 thread: {a:?}, 2 threads: {b:?}"),
            }
        }
    }
}

fn as_export(bytes: &[u8]) {
    let read = read_export(bytes, u64::MAX);
    let imported = SOLVER.with(|s| Prover::new(&mut s.borrow_mut(), SMALL).import(bytes));
    match (&read, &imported) {
        (Ok(facts), Ok(new)) => assert!(*new <= facts.len()),
        (Ok(_), Err(e)) => assert!(e.contains("another"), "import refuses only a clash: {e}"),
        (Err(_), _) => assert!(imported.is_err(), "import reads as read_export does"),
    }
    if let Ok(facts) = read {
        let ledger = Ledger::new(SMALL);
        match ledger.verify(&facts) {
            Ok(new) => assert!(new <= facts.len() && ledger.len() == new),
            Err(_) => assert!(ledger.is_empty(), "a refusal adds nothing"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = check(data, 1);
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 4 {
        // The rest as a body, its fact count announced by its first byte.
        0 => {
            let Some((&facts, body)) = rest.split_first() else { return };
            as_file(&wrap(&compress(body), body.len() as u64, facts as u64));
        }
        // The rest as a body under header fields of its first 24 bytes (compressed length,
        // length uncompressed, fact count), or the first 4 (the chunk size).
        1 => {
            if rest.len() < 28 {
                return;
            }
            let (fields, body) = rest.split_at(28);
            let mut file = wrap(&compress(body), body.len() as u64, 0);
            for (i, at) in [16usize, 24, 32].into_iter().enumerate() {
                let v = &fields[8 * i..8 * i + 8];
                if v.iter().any(|&b| b != 0) {
                    file[at..at + 8].copy_from_slice(v);
                }
            }
            if fields[24..].iter().any(|&b| b != 0) {
                file[12..16].copy_from_slice(&fields[24..]);
            }
            reseal(&mut file);
            as_file(&file);
        }
        2 => as_export(&compress(rest)),
        _ => as_export(rest),
    }
});
