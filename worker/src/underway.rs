//! The units a worker is searching now: for each, the attempt it holds, the nodes searched
//! so far and the flag that stops it; what the heartbeat task reports, and how the
//! coordinator's cancellations reach the searches.

use cram_proto::pb;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A unit being searched.
struct Active {
    attempt: u64,
    nodes: Arc<AtomicU64>,
    cancel: Arc<AtomicBool>,
}

/// The counters one search reports into: nodes so far, and the flag that stops it.
pub struct Tracked {
    /// Nodes searched so far.
    pub nodes: Arc<AtomicU64>,
    /// Raised to stop the search.
    pub cancel: Arc<AtomicBool>,
}

/// The units under way, by name.
#[derive(Default)]
pub struct UnderWay(Mutex<HashMap<String, Active>>);

impl UnderWay {
    /// Starts tracking attempt `attempt` of `unit`; an earlier attempt of this worker at
    /// the same unit (it lost its lease, or the unit would not have come again) is stopped.
    pub fn start(&self, unit: &str, attempt: u64) -> Tracked {
        let nodes = Arc::new(AtomicU64::new(0));
        let cancel = Arc::new(AtomicBool::new(false));
        let mine = Active { attempt, nodes: nodes.clone(), cancel: cancel.clone() };
        if let Some(stale) = self.0.lock().expect("under way lock").insert(unit.to_string(), mine) {
            stale.cancel.store(true, Ordering::Relaxed);
        }
        Tracked { nodes, cancel }
    }

    /// Stops tracking attempt `attempt` of `unit` (a newer attempt stays).
    pub fn finish(&self, unit: &str, attempt: u64) {
        let mut active = self.0.lock().expect("under way lock");
        if active.get(unit).is_some_and(|a| a.attempt == attempt) {
            active.remove(unit);
        }
    }

    /// Stops the search of `unit`, if it is under way.
    pub fn cancel(&self, unit: &str) -> bool {
        let active = self.0.lock().expect("under way lock");
        active.get(unit).inspect(|a| a.cancel.store(true, Ordering::Relaxed)).is_some()
    }

    /// Stops every search and returns their units.
    pub fn cancel_all(&self) -> Vec<String> {
        let active = self.0.lock().expect("under way lock");
        active.values().for_each(|a| a.cancel.store(true, Ordering::Relaxed));
        active.keys().cloned().collect()
    }

    /// The units under way.
    pub fn names(&self) -> Vec<String> {
        self.0.lock().expect("under way lock").keys().cloned().collect()
    }

    /// Each unit's progress, as a heartbeat reports it.
    pub fn progress(&self) -> Vec<pb::UnitProgress> {
        let active = self.0.lock().expect("under way lock");
        active
            .iter()
            .map(|(id, a)| pb::UnitProgress {
                unit_id: id.clone(),
                attempt: a.attempt,
                nodes: a.nodes.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// How many units are under way, and their nodes so far.
    pub fn load(&self) -> (usize, u64) {
        let active = self.0.lock().expect("under way lock");
        (active.len(), active.values().map(|a| a.nodes.load(Ordering::Relaxed)).sum())
    }
}
