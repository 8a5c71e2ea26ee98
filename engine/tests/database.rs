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
    // A flipped bit in the header or the chunk table (bytes 64..72) is refused at once.
    for at in [9, 13, 33, 45, 50, 64, 71] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let p = dir.join(format!("flip{at}.cramdb"));
        std::fs::write(&p, &b).unwrap();
        let msg = refused(&p);
        assert!(msg.contains("refused"), "{msg}");
    }
    // A flipped bit in the entries: refused as soon as its chunk is read.
    for at in [72, 1000, bytes.len() - 1] {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        let p = dir.join(format!("flip{at}.cramdb"));
        std::fs::write(&p, &b).unwrap();
        let db = Database::load(&p).unwrap();
        let msg = db.check_all().unwrap_err().to_string();
        assert!(msg.contains("refused") && msg.contains("bytes 72.."), "{msg}");
        assert!(db.checked_value(0).is_err());
    }
    // A file of format version 1 (no chunk table) is refused with what to do.
    let mut v1 = bytes.clone();
    v1[8] = 1;
    let p = dir.join("v1.cramdb");
    std::fs::write(&p, &v1).unwrap();
    assert!(refused(&p).contains("rebuild"));
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

#[test]
fn entries_are_checked_as_they_are_read() {
    // 5x5: 2^25 entries in 256 chunks of 64 KiB. Damage the last chunk (cell sets with the
    // bottom-right cells empty).
    let dir = scratch_dir("lazy");
    let path = dir.join("cram-5x5.cramdb");
    Database::build(5, 5, 2).unwrap().save(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x44;
    std::fs::write(&path, &bytes).unwrap();
    let set = Arc::new(DbSet::load_dir(&dir).unwrap());
    let mut solver = Solver::new(&Config::default(), set.clone());
    // A solve that reads only the first chunk never sees the damage: exact, and no error.
    assert_eq!(solver.solve(&Board::parse("3x4").unwrap(), Mode::Nimber).unwrap().nimber, Some(1));
    assert!(set.damage().is_none());
    // One that reads the damaged chunk (the whole 5x5 is its last entry) stops with the
    // file and the bytes named.
    let stopped = solver.solve(&Board::parse("5x5").unwrap(), Mode::Nimber).err();
    assert!(
        set.damage().is_some_and(|d| d.contains("cram-5x5.cramdb") && d.contains("chunk 255")),
        "{:?}",
        set.damage()
    );
    assert_eq!(stopped, Some(cram_engine::Interrupted::Database));
    assert!(set.check_all().is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
