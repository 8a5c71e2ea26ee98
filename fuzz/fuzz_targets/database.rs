//! Database files: whatever bytes a file holds, loading either refuses it with an error or
//! gives a database whose every lookup answers. Half the inputs get a correct checksum
//! written over them, so the checks behind the checksum are reached too.
#![no_main]

use cram_engine::region::AnyRegion;
use cram_engine::{Database, DbSet};
use libfuzzer_sys::fuzz_target;

/// Where the header keeps the checksum (engine/src/db.rs), and the header's length.
const CHECKSUM_AT: usize = 40;
const HEADER: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 && bytes.len() >= HEADER {
        bytes[CHECKSUM_AT..CHECKSUM_AT + 8].fill(0);
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&bytes[..HEADER]);
        h.update(&bytes[HEADER..]);
        let sum = h.digest().to_le_bytes();
        bytes[CHECKSUM_AT..CHECKSUM_AT + 8].copy_from_slice(&sum);
    }
    let path = std::env::temp_dir().join(format!("cram-fuzz-db-{}.cramdb", std::process::id()));
    std::fs::write(&path, &bytes).expect("temp file");
    let Ok(db) = Database::load(&path) else { return };
    let cells = db.rows() * db.cols();
    assert_eq!(db.entries(), 1u64 << cells);
    for mask in [0, 1, db.entries() - 1, u64::from_le_bytes(*b"cramfuzz") % db.entries()] {
        let _ = db.value(mask);
    }
    let (h, w) = (db.rows(), db.cols());
    let set = DbSet::new(vec![db]);
    if let Some(r) = AnyRegion::from_dense(h, w, (1u128 << (h * w)) - 1) {
        let _ = set.lookup(&r);
    }
    let _ = set.fingerprint();
});
