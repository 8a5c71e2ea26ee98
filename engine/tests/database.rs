//! Endgame databases: built, saved and loaded, every entry equals the brute-force value,
//! lookups agree with search, and damaged or foreign files are refused.

use cram_engine::{Board, Config, Database, DbError, DbSet, Mode, Solver};
use std::path::PathBuf;
use std::sync::Arc;

mod common;
use common::{all_values, Lcg};

fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cram-db-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn build_save_load_every_entry() {
    let dir = scratch_dir("roundtrip");
    for (r, c) in [(3, 4), (2, 7), (1, 13), (4, 4)] {
        let built = Database::build(r, c, 2).unwrap();
        let path = dir.join(format!("t-{r}x{c}.cramdb"));
        built.save(&path).unwrap();
        let db = Database::load(&path).unwrap();
        assert_eq!((db.rows(), db.cols(), db.checksum()), (r, c, built.checksum()));
        let truth = all_values(r, c);
        for (m, &v) in truth.iter().enumerate() {
            assert_eq!(db.value(m as u64), v, "{r}x{c} entry {m}");
        }
    }
    // Every entry of a database also equals the engine's search (without databases).
    let db = Database::build(3, 4, 2).unwrap();
    let mut search = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    for m in 0..db.entries() {
        let b = Board::from_mask(3, 4, m as u128).unwrap();
        assert_eq!(search.solve(&b, Mode::Nimber).unwrap().nimber, Some(db.value(m)), "{}", b.rows_string());
    }
    // Loaded as a set, the databases answer the regions that fit them, in either orientation.
    let set = DbSet::load_dir(&dir).unwrap();
    assert_eq!(set.databases().len(), 4);
    let mut with = Solver::new(&Config::default(), Arc::new(set));
    let mut without = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    let mut rng = Lcg(11);
    for _ in 0..300 {
        let (rows, cols) = if rng.next().is_multiple_of(2) { (4, 7) } else { (7, 3) };
        let mask = rng.next() as u128 & rng.next() as u128 | rng.next() as u128;
        let b = Board::from_mask(rows, cols, mask).unwrap();
        let x = with.solve(&b, Mode::Nimber).unwrap();
        let y = without.solve(&b, Mode::Nimber).unwrap();
        assert_eq!(x, y, "{}", b.rows_string());
    }
    // A board that fits a database is answered without search.
    let before = with.nodes();
    with.solve(&Board::parse("4x3").unwrap(), Mode::Nimber).unwrap();
    assert_eq!(with.nodes(), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn refused(path: &std::path::Path) -> String {
    match Database::load(path) {
        Err(e @ DbError::Invalid { .. }) => e.to_string(),
        Err(e) => panic!("unexpected error kind: {e}"),
        Ok(_) => panic!("{} was accepted", path.display()),
    }
}

#[test]
fn damaged_and_foreign_files_are_refused() {
    let dir = scratch_dir("damage");
    let good = dir.join("good.cramdb");
    Database::build(3, 5, 1).unwrap().save(&good).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    // A flipped bit anywhere: header fields or payload.
    for at in [9, 13, 33, 45, 64, 1000, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let p = dir.join(format!("flip{at}.cramdb"));
        std::fs::write(&p, &b).unwrap();
        let msg = refused(&p);
        assert!(msg.contains("refused"), "{msg}");
    }
    let p = dir.join("short.cramdb");
    std::fs::write(&p, &bytes[..bytes.len() - 100]).unwrap();
    assert!(refused(&p).contains("truncated"));
    let p = dir.join("foreign.cramdb");
    std::fs::write(&p, b"PK\x03\x04 certainly not a database").unwrap();
    assert!(refused(&p).contains("magic"));
    let p = dir.join("empty.cramdb");
    std::fs::write(&p, b"").unwrap();
    assert!(refused(&p).contains("magic"));
    // A directory holding a damaged file is refused as a whole, naming the file.
    let set_dir = scratch_dir("damaged-set");
    std::fs::copy(&good, set_dir.join("a.cramdb")).unwrap();
    std::fs::write(set_dir.join("b.cramdb"), &bytes[..bytes.len() - 1]).unwrap();
    let err = DbSet::load_dir(&set_dir).err().expect("damaged set accepted").to_string();
    assert!(err.contains("b.cramdb"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&set_dir).unwrap();
}
