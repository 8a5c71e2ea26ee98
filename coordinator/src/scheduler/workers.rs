//! Workers: the registrations of this run, each known by the digest of the secret its
//! calls carry (its id is `name#digest`), when each was last heard from, the nodes of its
//! results and its strikes (results refused as absurd); and the workers found wrong, with
//! the reason (logged, so a distrusted worker stays disconnected across restarts).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Strikes (absurd results) after which a worker is distrusted.
pub const MAX_STRIKES: u32 = 3;

/// Who is calling.
#[derive(Debug, PartialEq, Eq)]
pub enum Caller {
    /// A registered worker, with its id.
    Known(String),
    /// Not registered with this coordinator run (it restarted): register again.
    Unknown,
    /// Found wrong and disconnected, for this reason.
    Distrusted(String),
}

/// A registered worker.
#[derive(Debug)]
pub struct Worker {
    /// The name it gave.
    pub name: String,
    /// Its search threads.
    pub threads: u32,
    /// When it last called.
    pub last_seen: Instant,
    /// Nodes of its results held (this run).
    pub nodes: u64,
    /// Its results refused as absurd (this run).
    pub strikes: u32,
    /// Its finished and its unfinished results accepted (this run).
    pub finished: u64,
    /// Its unfinished results accepted (this run).
    pub unfinished: u64,
}

/// The workers of this run and those found wrong.
#[derive(Default)]
pub struct Workers {
    /// Registered workers by id.
    live: HashMap<String, Worker>,
    /// The id of each registered worker's secret digest.
    by_key: HashMap<String, String>,
    distrusted: BTreeMap<String, String>,
    /// The secret digests of the workers found wrong, with the reason (looked up on every
    /// call of a distrusted secret).
    distrusted_keys: HashMap<String, String>,
}

/// The secret digest in a worker's id (`name#digest`).
fn key_of(id: &str) -> &str {
    id.rsplit_once('#').map_or(id, |(_, k)| k)
}

impl Workers {
    /// Registers the worker whose secret has digest `key` under `name`: its id is
    /// `name#key`, the same across coordinator restarts; refused with the reason when it
    /// was distrusted (under any name).
    pub fn register(&mut self, key: &str, name: &str, threads: u32, now: Instant) -> Result<String, String> {
        if let Some(reason) = self.distrusted_keys.get(key) {
            return Err(reason.clone());
        }
        let id = format!("{name}#{key}");
        if let Some(old) = self.by_key.insert(key.to_string(), id.clone()) {
            self.live.remove(&old);
        }
        let worker = Worker {
            name: name.to_string(),
            threads,
            last_seen: now,
            nodes: 0,
            strikes: 0,
            finished: 0,
            unfinished: 0,
        };
        self.live.insert(id.clone(), worker);
        Ok(id)
    }

    /// Who the worker with secret digest `key` is to this coordinator; a known worker is
    /// marked seen.
    pub fn caller(&mut self, key: &str, now: Instant) -> Caller {
        if let Some(id) = self.by_key.get(key) {
            if let Some(w) = self.live.get_mut(id) {
                w.last_seen = now;
                return Caller::Known(id.clone());
            }
        }
        if let Some(reason) = self.distrusted_keys.get(key) {
            return Caller::Distrusted(reason.clone());
        }
        Caller::Unknown
    }

    /// Records that `worker` was found wrong; false when it was already.
    pub fn distrust(&mut self, worker: &str, reason: &str) -> bool {
        if self.distrusted.contains_key(worker) {
            return false;
        }
        self.distrusted.insert(worker.to_string(), reason.to_string());
        self.distrusted_keys.entry(key_of(worker).to_string()).or_insert_with(|| reason.to_string());
        self.leave(worker);
        true
    }

    /// True when `worker` was found wrong.
    pub fn is_distrusted(&self, worker: &str) -> bool {
        self.distrusted.contains_key(worker)
    }

    /// The workers found wrong, with the reason.
    pub fn distrusted(&self) -> &BTreeMap<String, String> {
        &self.distrusted
    }

    /// Forgets a worker that is shutting down.
    pub fn leave(&mut self, worker: &str) {
        if self.live.remove(worker).is_some() {
            self.by_key.remove(key_of(worker));
        }
    }

    /// The registered worker `id`.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Worker> {
        self.live.get_mut(id)
    }

    /// Counts one absurd result of `worker`; true when that makes [`MAX_STRIKES`].
    pub fn strike(&mut self, worker: &str) -> bool {
        self.live.get_mut(worker).is_some_and(|w| {
            w.strikes += 1;
            w.strikes >= MAX_STRIKES
        })
    }

    /// Adds an accepted result's nodes and kind to its worker's counts.
    pub fn count_result(&mut self, worker: &str, nodes: u64, finished: bool) {
        if let Some(w) = self.live.get_mut(worker) {
            w.nodes = w.nodes.saturating_add(nodes);
            if finished {
                w.finished += 1;
            } else {
                w.unfinished += 1;
            }
        }
    }

    /// The search threads `worker` registered with (0 when it is not known).
    pub fn threads(&self, worker: &str) -> u32 {
        self.live.get(worker).map_or(0, |w| w.threads)
    }

    /// True when `worker` is registered now.
    pub fn is_live(&self, worker: &str) -> bool {
        self.live.contains_key(worker)
    }

    /// Forgets workers silent for `silent`; returns them.
    pub fn forget_silent(&mut self, now: Instant, silent: Duration) -> Vec<String> {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, w)| now.duration_since(w.last_seen) >= silent)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            tracing::warn!(worker = %id, "worker silent for {:?}; forgetting it", silent);
            self.leave(id);
        }
        gone
    }

    /// The registered workers.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Worker)> {
        self.live.iter()
    }
}
