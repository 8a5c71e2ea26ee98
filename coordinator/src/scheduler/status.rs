//! The status document: what `cram status`, the status page and the metrics show of a
//! running job (docs/cluster.md lists its fields). Typed both ways, so that a client reads
//! the coordinator's JSON with the same types it was written with.

use cram_engine::facts::Facts;
use cram_engine::{Mode, Outcome};
use serde::{Deserialize, Serialize};

/// Unit counts for progress reports, since the job began (restored from the log on
/// resume).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Counters {
    /// Units answered (a finished result held).
    pub done: u64,
    /// Units that ran out of budget and were split.
    pub split: u64,
    /// Leases cancelled because the unit stopped mattering.
    pub cancelled: u64,
    /// Leases that expired without a result.
    pub expired: u64,
    /// Leases handed back by workers shutting down.
    pub released: u64,
    /// Units held long by one worker and leased to another as a backup.
    #[serde(default)]
    pub backups: u64,
    /// Results that arrived for units already answered (not logged).
    pub duplicates: u64,
    /// Units answered from a worker's cache.
    pub from_cache: u64,
    /// The coordinator's own searches (verifications, disputes, conflicts, shared facts).
    pub checks: u64,
    /// Their search nodes.
    #[serde(default)]
    pub check_nodes: u64,
    /// Results refused.
    pub refused: u64,
    /// Facts workers shared (knowledge across machines).
    pub facts_shared: u64,
    /// Shared facts handed to workers with their leases.
    pub facts_handed_out: u64,
}

/// `cram status` output.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// The job's spec.
    pub job: String,
    /// What the job computes.
    pub mode: Mode,
    /// `running` or `done`.
    pub state: String,
    /// Seconds since this coordinator started.
    pub elapsed_secs: f64,
    /// Unit counts.
    pub units: UnitCounts,
    /// Search nodes over all recorded results.
    pub nodes: u64,
    /// Recent search speed over all workers.
    pub nodes_per_sec: f64,
    /// What is known of the root (its largest region).
    pub root: String,
    /// The answer, once known.
    pub answer: Option<AnswerStatus>,
    /// Seconds to answer the units open now at this run's pace so far; answers open new
    /// units, so the job may take longer (see `eta_lower_bound`).
    pub eta_secs: Option<u64>,
    /// True when the open units are only a window of the questions already known to be
    /// needed (the walk of the top stopped at its per-branch cap): more units are certain
    /// to follow, and `eta_secs` is a lower bound, often far below the time left.
    #[serde(default)]
    pub eta_lower_bound: bool,
    /// The first moves (options of the root's largest region, each once up to symmetry)
    /// and what is known of each one's value.
    #[serde(default)]
    pub moves: Vec<MoveStatus>,
    /// The questions the coordinator is searching itself now.
    pub settling: Vec<String>,
    /// Workers found wrong, with the reason.
    pub distrusted: Vec<DistrustedStatus>,
    /// Workers heard from recently.
    pub workers: Vec<WorkerStatus>,
}

impl Status {
    /// How many first moves have a known value (progress lines, metrics, `cram status`).
    pub fn first_moves_known(&self) -> usize {
        self.moves.iter().filter(|m| m.value.is_some()).count()
    }
}

/// Unit counts in the status.
#[derive(Debug, Serialize, Deserialize)]
pub struct UnitCounts {
    /// Units recorded or open now.
    pub total: u64,
    /// Open units nobody holds.
    pub pending: u64,
    /// Open units held by workers.
    pub leased: u64,
    /// Answered units whose results wait for the coordinator's verification.
    pub checking: u64,
    /// Lifetime counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// The answer in the status.
#[derive(Debug, Serialize, Deserialize)]
pub struct AnswerStatus {
    /// Who wins.
    pub outcome: Outcome,
    /// The nimber, when known.
    pub nimber: Option<u8>,
}

/// A distrusted worker in the status.
#[derive(Debug, Serialize, Deserialize)]
pub struct DistrustedStatus {
    /// Its id.
    pub id: String,
    /// What showed it wrong.
    pub reason: String,
}

/// One worker in the status.
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Id given at registration.
    pub id: String,
    /// Name the worker gave.
    pub name: String,
    /// Search threads.
    pub threads: u32,
    /// Seconds since its last call.
    pub last_heartbeat_secs: f64,
    /// Nodes of its recorded results (this coordinator run).
    pub nodes: u64,
    /// Its results refused as absurd (three and it is disconnected).
    pub strikes: u32,
    /// Units it holds.
    pub units: Vec<UnitStatus>,
}

/// A first move in the status: the position it leaves and what is known of its value.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MoveStatus {
    /// The regions it leaves that need search, largest first, each drawn as a rows string
    /// (`.` empty, `#` filled, rows joined by `/`: a position `cram solve` reads).
    pub regions: Vec<String>,
    /// XOR of the values of the regions too small to search (not drawn).
    pub xor: u8,
    /// What is known of its value, e.g. `g = 3` or `g ≠ 0, 2; g ≤ 5`.
    pub known: String,
    /// Its value, once known.
    pub value: Option<u8>,
    /// While its value is open and it leaves one region: what is known of the replies.
    #[serde(default)]
    pub replies: Option<crate::top::Replies>,
}

impl MoveStatus {
    /// The status of one first move.
    pub fn of(m: &crate::top::FirstMove) -> MoveStatus {
        MoveStatus {
            regions: m.regions.iter().map(drawn).collect(),
            xor: m.xor,
            known: describe(Some(m.value)),
            value: if m.value.is_contradictory() { None } else { m.value.value() },
            replies: m.replies,
        }
    }
}

/// A unit a worker holds: its id, what it asks, and its region drawn.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct UnitStatus {
    /// The unit's id (the region's key and the query), as logs name it.
    pub id: String,
    /// What it asks: `g = k?` or `g?`.
    pub asks: String,
    /// The region drawn as a rows string (see [`MoveStatus::regions`]).
    pub region: String,
}

impl UnitStatus {
    /// The status of the unit asking `q`.
    pub fn of(q: &cram_engine::Question) -> UnitStatus {
        let asks = match q.query {
            cram_engine::Query::Nimber => "g?".to_string(),
            cram_engine::Query::IsValue(k) => format!("g = {k}?"),
        };
        UnitStatus { id: q.to_string(), asks, region: drawn(&q.region) }
    }
}

/// A region as people read it: its bounding box's rows.
fn drawn(r: &cram_engine::region::AnyRegion) -> String {
    cram_engine::Board::of_region(r).rows_string()
}

/// Text for what is known of the root's nimber, e.g. `g ≠ 0, 2; g ≤ 5`.
pub fn describe(b: Option<Facts>) -> String {
    let Some(b) = b else { return "no region to search".into() };
    if b.is_contradictory() {
        return "contradictory facts (being settled)".into();
    }
    if let Some(v) = b.value() {
        return format!("g = {v}");
    }
    let not: Vec<String> = (0..32).filter(|&j| b.excluded >> j & 1 == 1).map(|j: u32| j.to_string()).collect();
    let mut parts = Vec::new();
    if !not.is_empty() {
        parts.push(format!("g ≠ {}", not.join(", ")));
    }
    if b.upper < u8::MAX {
        parts.push(format!("g ≤ {}", b.upper));
    }
    if parts.is_empty() {
        "nothing known yet".into()
    } else {
        parts.join("; ")
    }
}
