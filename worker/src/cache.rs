//! The worker's cache of answers on disk: canonical region → what is known of its nimber.
//!
//! Facts are facts whatever job asked for them, so a restarted worker, or one serving a
//! later job, answers repeated units without search. The cache is disposable: one that
//! cannot be opened is moved aside with a warning and started afresh.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use std::path::Path;

/// An open cache.
pub struct Cache {
    db: sled::Db,
}

impl Cache {
    /// Opens the cache in `dir` (created if missing).
    pub fn open(dir: &Path) -> Result<Cache, String> {
        Ok(Cache { db: cram_proto::open_sled(dir, 64 << 20)? })
    }

    /// What the cache knows of `r`.
    pub fn get(&self, r: &AnyRegion) -> Facts {
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

    /// Drops what the cache holds of `r` (the coordinator rejected it).
    pub fn forget(&self, r: &AnyRegion) {
        if let Err(e) = self.db.remove(r.key().as_bytes()) {
            tracing::warn!(error = %e, "cache write failed");
        }
    }

    /// Regions held.
    pub fn len(&self) -> usize {
        self.db.len()
    }

    /// True when the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.db.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn facts_persist_merge_and_a_damaged_cache_is_moved_aside() {
        let dir = std::env::temp_dir().join(format!("cram-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = AnyRegion::from_key("3x7:1fffff").unwrap();
        {
            let c = Cache::open(&dir).unwrap();
            assert!(c.is_empty());
            let mut not_one = Facts::UNKNOWN;
            not_one.exclude(1);
            c.put(&r, not_one).await;
            c.put(&r, Facts { excluded: 1, upper: 9 }).await;
            assert_eq!(c.get(&r), Facts { excluded: 3, upper: 9 });
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
        let parent = dir.parent().unwrap();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let aside: Vec<_> = std::fs::read_dir(parent)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&format!("{name}.corrupt-"))))
            .collect();
        assert_eq!(aside.len(), 1);
        for e in aside {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
