//! The worker's cache of answers on disk: canonical region → what is known of its nimber.
//!
//! Facts are facts whatever job asked for them, so a restarted worker, or one serving a
//! later job, answers repeated units without search. The cache is disposable: one that
//! cannot be opened, or that another build or format wrote (its stamp differs: canonical
//! forms or the entry format may have changed), is moved aside with a warning and started
//! afresh; so is the cache of a worker the coordinator disconnected for wrong results.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// The version of the entry format (key: region key; value: [`Facts::to_bytes`]).
pub const FORMAT: u32 = 1;

/// Where the stamp is kept (outside the entries' key space: region keys start with a digit).
const STAMP_KEY: &[u8] = b"~stamp";

/// The stamp a cache of this build and format carries.
pub fn stamp() -> String {
    format!("cram-cache format {FORMAT} {}", cram_proto::BUILD_ID)
}

/// An open cache.
pub struct Cache {
    db: sled::Db,
    dir: PathBuf,
    /// Set once the cache was moved aside: it answers nothing more.
    retired: AtomicBool,
}

impl Cache {
    /// Opens the cache in `dir` (created if missing); one of another build or format is
    /// moved aside first.
    pub fn open(dir: &Path) -> Result<Cache, String> {
        let db = cram_proto::open_sled(dir, 64 << 20)?;
        let held = db.get(STAMP_KEY).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ours = stamp();
        let db = match held {
            Some(s) if s.as_ref() == ours.as_bytes() => db,
            None if db.is_empty() => db,
            held => {
                drop(db);
                let aside = cram_proto::move_aside(dir, "other-build")?;
                let theirs = held.map_or_else(|| "no stamp".to_string(), |s| String::from_utf8_lossy(&s).into_owned());
                tracing::warn!(cache = %dir.display(), moved_to = %aside.display(), found = %theirs, want = %ours, "the cache was written by another build or format; moved it aside, starting afresh");
                cram_proto::open_sled(dir, 64 << 20)?
            }
        };
        db.insert(STAMP_KEY, ours.as_bytes()).map_err(|e| format!("{}: {e}", dir.display()))?;
        db.flush().map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Cache { db, dir: dir.to_path_buf(), retired: AtomicBool::new(false) })
    }

    /// What the cache knows of `r`.
    pub fn get(&self, r: &AnyRegion) -> Facts {
        if self.retired.load(Ordering::Relaxed) {
            return Facts::UNKNOWN;
        }
        match self.db.get(r.key().as_bytes()) {
            Ok(Some(v)) => Facts::from_bytes(&v).unwrap_or(Facts::UNKNOWN),
            Ok(None) => Facts::UNKNOWN,
            Err(e) => {
                tracing::warn!(error = %e, "cache read failed; searching instead");
                Facts::UNKNOWN
            }
        }
    }

    /// Adds facts about `r` and makes them durable; a failure costs only a later search.
    pub async fn put(&self, r: &AnyRegion, facts: Facts) {
        if self.retired.load(Ordering::Relaxed) {
            return;
        }
        let merged = self.get(r).merge(facts);
        let written = self.db.insert(r.key().as_bytes(), &merged.to_bytes()[..]);
        if let Err(e) = written.map(|_| ()) {
            tracing::warn!(error = %e, "cache write failed");
            return;
        }
        if let Err(e) = self.db.flush_async().await {
            tracing::warn!(error = %e, "cache flush failed");
        }
    }

    /// Drops what the cache holds of `r` (the coordinator refused it).
    pub fn forget(&self, r: &AnyRegion) {
        if let Err(e) = self.db.remove(r.key().as_bytes()) {
            tracing::warn!(error = %e, "cache write failed");
        }
    }

    /// Moves the whole cache aside (`DIR.<why>-<time>`) and stops using it.
    pub fn move_aside(&self, why: &str) {
        if self.retired.swap(true, Ordering::Relaxed) {
            return;
        }
        let _ = self.db.flush();
        match cram_proto::move_aside(&self.dir, why) {
            Ok(aside) => tracing::warn!(moved_to = %aside.display(), "moved the cache aside"),
            Err(e) => tracing::warn!("{e}"),
        }
    }

    /// Regions held.
    pub fn len(&self) -> usize {
        self.db.len().saturating_sub(1)
    }

    /// True when the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aside(dir: &Path, why: &str) -> Vec<PathBuf> {
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&format!("{name}.{why}-"))))
            .map(|e| e.path())
            .collect()
    }

    fn fresh(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cram-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let olds = ["corrupt", "other-build", "distrusted"].into_iter().flat_map(|why| aside(&dir, why));
        for old in olds {
            let _ = std::fs::remove_dir_all(old);
        }
        dir
    }

    #[tokio::test]
    async fn facts_persist_merge_and_a_damaged_cache_is_moved_aside() {
        let dir = fresh("damaged");
        let r = AnyRegion::from_key("3x7:1fffff").unwrap();
        {
            let c = Cache::open(&dir).unwrap();
            assert!(c.is_empty());
            let mut not_one = Facts::UNKNOWN;
            not_one.exclude(1);
            c.put(&r, not_one).await;
            c.put(&r, Facts { excluded: 1, upper: 9 }).await;
            assert_eq!(c.get(&r), Facts { excluded: 3, upper: 9 });
            assert_eq!(c.len(), 1);
        }
        assert_eq!(Cache::open(&dir).unwrap().get(&r), Facts { excluded: 3, upper: 9 });
        // Overwrite sled's files with garbage: the cache starts cold, the old one is kept aside.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_file() {
                std::fs::write(&p, b"not a sled file at all").unwrap();
            }
        }
        let c = Cache::open(&dir).unwrap();
        assert_eq!(c.get(&r), Facts::UNKNOWN);
        let moved = aside(&dir, "corrupt");
        assert_eq!(moved.len(), 1);
        for p in moved {
            std::fs::remove_dir_all(p).unwrap();
        }
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_cache_of_another_build_or_format_is_moved_aside() {
        let r = AnyRegion::from_key("3x7:1fffff").unwrap();
        for other in [Some("cram-cache format 0 cram-0.0.9"), None] {
            let dir = fresh("stamp");
            {
                // A cache as another build left it (or one from before stamps).
                let db = sled::open(&dir).unwrap();
                db.insert(r.key().as_bytes(), &Facts::exact(2).to_bytes()[..]).unwrap();
                if let Some(s) = other {
                    db.insert(STAMP_KEY, s.as_bytes()).unwrap();
                }
                db.flush().unwrap();
            }
            let c = Cache::open(&dir).unwrap();
            assert_eq!(c.get(&r), Facts::UNKNOWN, "{other:?}: nothing of the other build is used");
            let moved = aside(&dir, "other-build");
            assert_eq!(moved.len(), 1, "{other:?}");
            drop(c);
            // Our own stamp is kept: the cache reopens as it is.
            let c = Cache::open(&dir).unwrap();
            c.put(&r, Facts::exact(1)).await;
            drop(c);
            assert_eq!(Cache::open(&dir).unwrap().get(&r), Facts::exact(1));
            assert!(aside(&dir, "other-build").len() == 1);
            for p in moved {
                std::fs::remove_dir_all(p).unwrap();
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[tokio::test]
    async fn a_cache_moved_aside_answers_nothing_more() {
        let dir = fresh("retired");
        let r = AnyRegion::from_key("3x7:1fffff").unwrap();
        let c = Cache::open(&dir).unwrap();
        c.put(&r, Facts::exact(2)).await;
        c.move_aside("distrusted");
        assert_eq!(c.get(&r), Facts::UNKNOWN);
        c.put(&r, Facts::exact(2)).await;
        let moved = aside(&dir, "distrusted");
        assert_eq!(moved.len(), 1);
        assert!(!dir.exists(), "the cache directory is out of the way");
        drop(c);
        for p in moved {
            std::fs::remove_dir_all(p).unwrap();
        }
    }
}
