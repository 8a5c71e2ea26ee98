//! The event log's vocabulary: one [`Event`] per line of `STATE/events.jsonl`, the job's
//! record from which a restarted coordinator rebuilds everything (docs/cluster.md lists
//! the fields), the seal every line carries, and the rules every line must keep to be read
//! back ([`read_events`]).
//!
//! **The seal.** Each line ends with `"seal":"<16 hex digits>"`: the xxh3-64 of the line
//! (with sixteen zeros in place of its seal), seeded with the seal of the line before (0
//! before the first). A changed byte anywhere fails its line's seal; a line removed,
//! added or moved fails the next line's. Lines written by builds before the seal have
//! none; they are taken only before the first sealed line, and the chain runs over them
//! too, so once a log is sealed its older lines are covered as well.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::{Mode, Outcome, Question, SharedFact};
use serde::{Deserialize, Serialize};
use std::io::BufRead;

/// The job a state directory holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct JobRecord {
    /// The position as the user gave it.
    pub spec: String,
    /// Board rows.
    pub rows: u32,
    /// Board columns.
    pub cols: u32,
    /// Empty cells, row-major, in hex.
    pub empty: String,
    /// What the job computes.
    pub mode: Mode,
    /// Whether the half-turn pairing certificate is used.
    pub pairing: bool,
    /// The build that created the job.
    pub build: String,
    /// The job is certified: its top is over plain regions and results carry proofs
    /// (facts on regions of more than this many cells).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_small: Option<u32>,
}

impl JobRecord {
    /// The mode and the settings that make a job another, in words.
    pub fn settings(&self) -> String {
        let mut s = self.mode.to_string();
        if !self.pairing {
            s += ", no pairing";
        }
        if let Some(small) = self.certificate_small {
            s += &format!(", certified with --certificate-small {small}");
        }
        s
    }

    /// True when both name the same question (same position, mode and engine settings).
    pub fn same_job(&self, other: &JobRecord) -> bool {
        (self.rows, self.cols, &self.empty, self.mode, self.pairing, self.certificate_small)
            == (other.rows, other.cols, &other.empty, other.mode, other.pairing, other.certificate_small)
    }
}

/// A unit's result as logged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResultRecord {
    /// The unit answered.
    pub unit: Question,
    /// The region's key ([`AnyRegion::key`]); the unit's region, written out for readers.
    pub region: String,
    /// Values the region's nimber is known not to have (bit j: not j).
    pub excluded: u32,
    /// Upper bound of the nimber.
    pub upper: u8,
    /// False when the unit ran out of budget and was split.
    pub finished: bool,
    /// Search nodes the worker spent.
    pub nodes: u64,
    /// Worker's wall time in milliseconds.
    pub millis: u64,
    /// The worker that answered.
    pub worker: String,
    /// Answered from the worker's cache.
    pub from_cache: bool,
    /// The coordinator's own search (worker `coordinator`), or, in logs of earlier builds,
    /// a second answer by another worker: not a solve of the unit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check: bool,
    /// The coordinator chose this result for verification by its own search (decided from
    /// a random draw when the result arrived).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify: bool,
    /// In a certified job: the file (in the state directory's `proofs/`) holding the
    /// result's proof, written before the result is logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Facts about large regions the worker's search found, for the other workers
    /// (knowledge shared across machines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<SharedFact>,
    // Logs of earlier builds may hold `uses` (the workers whose shared facts the search's
    // tables held): read and ignored, since every fact handed out is verified first.
}

impl ResultRecord {
    /// The facts the result carries.
    pub fn facts(&self) -> Facts {
        Facts { excluded: self.excluded, upper: self.upper }
    }

    /// The part of its facts that answers its unit: all of it that is used, and what a
    /// certified result's proof must show.
    pub fn answer(&self) -> Facts {
        self.unit.query.answer_only(self.facts())
    }
}

/// A result refused before it was used, with the reason.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefusedRecord {
    /// The unit answered.
    pub unit: Question,
    /// The region's key.
    pub region: String,
    /// The facts sent (bit j of `excluded`: not j).
    pub excluded: u32,
    /// The upper bound sent.
    pub upper: u8,
    /// The worker that sent it.
    pub worker: String,
    /// Why it was refused.
    pub reason: String,
}

impl RefusedRecord {
    /// The facts the refused result carried.
    pub fn facts(&self) -> Facts {
        Facts { excluded: self.excluded, upper: self.upper }
    }
}

/// The job's answer as logged. A restarted coordinator does not take it as a claim: it
/// replays the results and must reach the same answer from the same results.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DoneRecord {
    /// Who wins.
    pub outcome: Outcome,
    /// The nimber, when known.
    pub nimber: Option<u8>,
    /// Search nodes over all units.
    pub nodes: u64,
    /// Wall time of the coordinator run that found the answer, in milliseconds.
    pub millis: u64,
    /// The digest of the results the answer rests on (see `Ledger::digest`; none in logs of
    /// earlier builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rests_on: Option<String>,
}

/// One line of the event log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The job (always the first line).
    Job(JobRecord),
    /// The coordinator (re)started on this state.
    Start {
        /// Unix time in seconds.
        at: u64,
        /// The split depth of this run (the answer is re-derived at the depth it was found).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        split_depth: Option<u32>,
    },
    /// The results that follow were taken from an earlier job on the same position
    /// (`--import`, coordinator/src/import.rs), before this job first started.
    Imported {
        /// The state directory or log they came from, as given.
        from: String,
        /// How many results were taken.
        results: u64,
    },
    /// A unit's result, checked and accepted.
    Result(ResultRecord),
    /// A result refused (impossible, or contradicting facts already held).
    Refused(RefusedRecord),
    /// In a certified job, a result's proof was checked by the independent checker's rules
    /// against the facts of the proofs checked before it: the result is verified.
    Proved {
        /// The unit the result answered.
        unit: Question,
        /// The worker that sent it.
        worker: String,
        /// Facts the proof added.
        facts: u64,
    },
    /// A worker found wrong: everything it reported is discarded, and it is disconnected.
    Distrust {
        /// The worker.
        worker: String,
        /// What showed it wrong.
        reason: String,
    },
    /// The job is solved.
    Done(DoneRecord),
}

/// What the log holds.
#[derive(Default, Debug)]
pub struct Replay {
    /// Every logged event in order.
    pub events: Vec<Event>,
    /// The answer, when the job is done.
    pub done: Option<DoneRecord>,
}

/// What [`read_events`] read: the events of the whole lines, the chain's seal after them,
/// and where a torn last line (one without its newline) begins, if there is one.
#[derive(Debug, Default)]
pub struct LogRead {
    /// The events, in order.
    pub replay: Replay,
    /// Byte offset of a torn last line.
    pub torn_at: Option<u64>,
    /// The seal of the last whole line (0: no line).
    pub seal: u64,
    /// Whole lines without a seal (written by an earlier build), all before the sealed ones.
    pub unsealed: usize,
    /// The seal after each whole line.
    pub seals: Vec<u64>,
}

impl LogRead {
    /// The seal after line `n` (1-based), if the log has that many whole lines.
    pub fn seal_at(&self, n: u64) -> Option<u64> {
        n.checked_sub(1).and_then(|i| self.seals.get(i as usize)).copied()
    }
}

/// The end of a sealed line: `,"seal":"` + 16 hex digits + `"}`.
const SEAL_TAIL: usize = 27;
const SEAL_KEY: &[u8] = b",\"seal\":\"";

/// The seal of `line` (without its newline; its own seal, if any, as zeros) after a line
/// sealed `prev`.
fn seal_of(line: &[u8], prev: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(line, prev)
}

/// `event` as a sealed line (with its newline), after a line sealed `prev`; and its seal.
pub fn sealed_line(event: &Event, prev: u64) -> (String, u64) {
    let json = serde_json::to_string(event).expect("events serialise");
    let open = &json[..json.len() - 1];
    let zeros = format!("{open},\"seal\":\"{:016x}\"}}", 0);
    let seal = seal_of(zeros.as_bytes(), prev);
    (format!("{open},\"seal\":\"{seal:016x}\"}}\n"), seal)
}

/// The seal a line carries, checked against the chain (`Ok(None)`: an unsealed line).
fn check_seal(line: &[u8], prev: u64) -> Result<Option<u64>, String> {
    if line.len() < SEAL_TAIL || !line[line.len() - SEAL_TAIL..].starts_with(SEAL_KEY) || !line.ends_with(b"\"}") {
        return Ok(None);
    }
    let at = line.len() - SEAL_TAIL + SEAL_KEY.len();
    let hex = std::str::from_utf8(&line[at..at + 16]).map_err(|_| "a seal that is not hex".to_string())?;
    let claimed = u64::from_str_radix(hex, 16).map_err(|_| format!("a seal that is not hex: {hex:?}"))?;
    let mut zeroed = line.to_vec();
    zeroed[at..at + 16].fill(b'0');
    let want = seal_of(&zeroed, prev);
    if claimed != want {
        return Err("the line fails its seal: it was changed, or a line before it was changed, added or removed".into());
    }
    Ok(Some(claimed))
}

/// Why a log cannot be read.
#[derive(Debug)]
pub enum LogError {
    /// Reading failed.
    Io(std::io::Error),
    /// A whole line is damaged.
    Line {
        /// 1-based line number.
        line: usize,
        /// Where the line begins, in bytes.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Reads an event log: every whole line must be a valid event that keeps the seal chain
/// (lines without a seal only before the sealed ones); a last line without its newline
/// (torn by a kill, maybe inside a character) is left out and reported.
pub fn read_events(mut reader: impl BufRead) -> Result<LogRead, LogError> {
    let mut out = LogRead::default();
    let mut good_bytes = 0u64;
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).map_err(LogError::Io)?;
        if read == 0 {
            return Ok(out);
        }
        n += 1;
        if line.last() != Some(&b'\n') {
            out.torn_at = Some(good_bytes);
            return Ok(out);
        }
        let body = &line[..line.len() - 1];
        let fail = |reason: String| LogError::Line { line: n, offset: good_bytes, reason };
        match check_seal(body, out.seal).map_err(fail)? {
            Some(seal) => out.seal = seal,
            None if out.unsealed + 1 == n => {
                out.unsealed += 1;
                out.seal = seal_of(body, out.seal);
            }
            None => return Err(fail("a line without its seal after sealed lines".into())),
        }
        let event = std::str::from_utf8(body)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|text| serde_json::from_str::<Event>(text).map_err(|e| e.to_string()))
            .and_then(|e| check_event(&out.replay, &e).map(|()| e))
            .map_err(fail)?;
        if let Event::Done(d) = &event {
            out.replay.done = Some(d.clone());
        }
        out.replay.events.push(event);
        out.seals.push(out.seal);
        good_bytes += read as u64;
    }
}

/// Checks one event against the rules every log keeps: the job first and once, units
/// that name their region, no accepted result whose facts exclude every value.
fn check_event(replay: &Replay, event: &Event) -> Result<(), String> {
    let names_region = |unit: &Question, region: &str| match AnyRegion::from_key(region) {
        Some(r) if r == unit.region => Ok(()),
        _ => Err(format!("unit {unit} is not about region {region:?}")),
    };
    match event {
        Event::Job(_) if !replay.events.is_empty() => Err("a second job event".into()),
        _ if replay.events.is_empty() && !matches!(event, Event::Job(_)) => {
            Err("the first event is not the job".into())
        }
        Event::Result(r) if r.finished && r.facts().is_contradictory() => {
            Err(format!("facts of {} exclude every value", r.unit))
        }
        Event::Result(r) => {
            if let Some(bad) = r.shared.iter().find(|f| !f.is_possible()) {
                return Err(format!("a shared fact of {} about {} leaves no value", r.unit, bad.region.key()));
            }
            names_region(&r.unit, &r.region)
        }
        Event::Refused(r) => names_region(&r.unit, &r.region),
        Event::Done(d) if d.nimber.is_some_and(|n| Outcome::of_nimber(n) != d.outcome) => {
            Err(format!("the answer's nimber *{} and outcome {} disagree", d.nimber.unwrap_or(0), d.outcome))
        }
        Event::Done(_) if replay.done.is_some() => Err("a second answer".into()),
        Event::Imported { .. } if replay.events.iter().any(|e| matches!(e, Event::Start { .. })) => {
            Err("results imported after the job started".into())
        }
        Event::Job(_)
        | Event::Start { .. }
        | Event::Imported { .. }
        | Event::Proved { .. }
        | Event::Distrust { .. }
        | Event::Done(_) => Ok(()),
    }
}
