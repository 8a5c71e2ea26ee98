//! Durable job state: an append-only event log of JSON lines, the source of truth, and a
//! sled index of the same facts beside it, in a state directory that one coordinator at a
//! time holds (an exclusive lock on `STATE/lock`, taken before anything is read).
//!
//! Every result is appended to the log and fsynced, then written to sled and flushed,
//! before the worker is told it was recorded. On open the log is read back; the caller
//! replays it and hands the facts to [`Store::check_index`], which rebuilds the index when
//! it cannot be opened or disagrees (a hard kill can leave sled damaged). A log whose last
//! line was torn by a kill loses that line (its result was never acknowledged); damage
//! anywhere else is refused, never guessed around.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::solver::Learned;
use cram_engine::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// The log's file name inside the state directory.
pub const LOG_FILE: &str = "events.jsonl";
/// The sled index's directory name inside the state directory.
pub const INDEX_DIR: &str = "index.sled";
/// The lock file inside the state directory (it holds the owner's process id).
pub const LOCK_FILE: &str = "lock";
/// The directory of the state where a certified job keeps its results' proofs.
pub const PROOF_DIR: &str = "proofs";

/// The proof saved under `name` in the proof directory `dir` ([`Store::save_proof`],
/// [`Store::proof_dir`]).
pub fn read_proof(dir: &Path, name: &str) -> Result<Vec<u8>, StoreError> {
    let path = dir.join(name);
    if name.contains('/') || name.contains("..") {
        let source = std::io::Error::other("a proof name that is not a file name");
        return Err(StoreError::Io { path, source });
    }
    std::fs::read(&path).map_err(io_err(&path))
}

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
    /// `nimber` or `outcome`.
    pub mode: String,
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
        let mut s = self.mode.clone();
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
        (self.rows, self.cols, &self.empty, &self.mode, self.pairing, self.certificate_small)
            == (other.rows, other.cols, &other.empty, &other.mode, other.pairing, other.certificate_small)
    }
}

/// A unit's result as logged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResultRecord {
    /// The unit's name.
    pub unit: String,
    /// The region's key ([`AnyRegion::key`]).
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
    /// A second answer to a unit already answered (a spot check), not a solve of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub check: bool,
    /// In a certified job: the file (in the state directory's `proofs/`) holding the
    /// result's proof, written before the result is logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Facts about large regions the worker's search found, for the other workers
    /// (knowledge shared across machines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<SharedRecord>,
    /// The workers whose shared facts the worker's tables held when it searched: if one of
    /// them is found wrong, this result is discarded with theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uses: Vec<String>,
}

/// A shared fact in the log, `[region key, excluded, upper, nodes]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SharedRecord(pub String, pub u32, pub u8, pub u64);

impl SharedRecord {
    /// The record of a fact.
    pub fn of(l: &Learned) -> SharedRecord {
        SharedRecord(l.region.key(), l.facts.excluded, l.facts.upper, l.nodes)
    }

    /// The fact, if the record names a region.
    pub fn learned(&self) -> Option<Learned> {
        let region = AnyRegion::from_key(&self.0)?;
        Some(Learned { region, facts: Facts { excluded: self.1, upper: self.2 }, nodes: self.3 })
    }
}

impl ResultRecord {
    /// The facts the result carries.
    pub fn facts(&self) -> Facts {
        Facts { excluded: self.excluded, upper: self.upper }
    }
}

/// A result refused before it was used, with the reason.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefusedRecord {
    /// The unit's name.
    pub unit: String,
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

/// The job's answer as logged.
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
    },
    /// A unit's result, checked and accepted.
    Result(ResultRecord),
    /// A result refused (impossible, or contradicting facts already held).
    Refused(RefusedRecord),
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

/// Why a state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing failed.
    #[error("state {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The log is damaged before its last line.
    #[error("event log {path} is damaged at line {line} ({reason}); it is the job's record and is not repaired automatically")]
    Corrupt {
        /// The log file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The directory holds another job.
    #[error("state {path} holds {state} job {spec} ({mode}); resume it with the same job, or use another --state")]
    OtherJob {
        /// The state directory.
        path: PathBuf,
        /// "an unfinished" or "the finished".
        state: &'static str,
        /// Its spec.
        spec: String,
        /// Its mode and settings ([`JobRecord::settings`]).
        mode: String,
    },
    /// Another coordinator holds the state directory.
    #[error("state {path} is in use by another coordinator ({holder}); stop it first, or use another --state")]
    Locked {
        /// The state directory.
        path: PathBuf,
        /// Who holds it, as its lock file says.
        holder: String,
    },
    /// sled failed while running.
    #[error("state index {path}: {reason}")]
    Index {
        /// The index directory.
        path: PathBuf,
        /// sled's message.
        reason: String,
    },
}

/// What the log holds.
#[derive(Default, Debug)]
pub struct Replay {
    /// Every logged event in order.
    pub events: Vec<Event>,
    /// The answer, when the job is done.
    pub done: Option<DoneRecord>,
}

/// The facts the sled index mirrors: per region, the merged facts of the results in force,
/// and the regions split.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct IndexFacts {
    /// Merged facts per region.
    pub facts: HashMap<AnyRegion, Facts>,
    /// Regions whose units ran out of budget.
    pub splits: HashSet<AnyRegion>,
}

/// The open state of one job.
pub struct Store {
    dir: PathBuf,
    /// Held (locked) for as long as the store is open.
    _lock: File,
    log: File,
    /// Set when an append failed: the log may end in part of a line, and nothing more is
    /// written after it (the next start drops a torn last line).
    broken: bool,
    index: sled::Db,
    facts: sled::Tree,
    splits: sled::Tree,
    /// Time each append took to be written and fsynced.
    fsync: cram_proto::metrics::Histogram,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

impl Store {
    /// Opens (or creates) the state of `job` in `dir` and reads its log back. The
    /// directory is locked first: a second coordinator on it is refused before it reads
    /// (or cuts) anything.
    pub fn open(dir: &Path, job: &JobRecord) -> Result<(Store, Replay), StoreError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock = lock_dir(dir)?;
        let log_path = dir.join(LOG_FILE);
        let mut replay = read_log(&log_path)?;
        let mut log = OpenOptions::new().create(true).append(true).open(&log_path).map_err(io_err(&log_path))?;
        // read_events saw to it that a log that is not empty begins with the job.
        match replay.events.first() {
            Some(Event::Job(held)) if held.same_job(job) => {}
            Some(Event::Job(held)) => {
                return Err(StoreError::OtherJob {
                    path: dir.to_path_buf(),
                    state: if replay.done.is_some() { "the finished" } else { "an unfinished" },
                    spec: held.spec.clone(),
                    mode: held.settings(),
                })
            }
            _ => {
                append_line(&mut log, &Event::Job(job.clone())).map_err(io_err(&log_path))?;
                // The new log's directory entry must be durable too.
                File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))?;
                replay.events.push(Event::Job(job.clone()));
            }
        }
        let index_path = dir.join(INDEX_DIR);
        let index = open_index(&index_path)?;
        let store = Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            log,
            broken: false,
            facts: tree(&index, "facts", &index_path)?,
            splits: tree(&index, "splits", &index_path)?,
            index,
            fsync: Default::default(),
        };
        Ok((store, replay))
    }

    /// Appends `event` to the log and waits until it is on disk.
    pub async fn append(&mut self, event: &Event) -> Result<(), StoreError> {
        let path = self.dir.join(LOG_FILE);
        if self.broken {
            let source = std::io::Error::other("an earlier write to the event log failed; restart to resume");
            return Err(StoreError::Io { path, source });
        }
        let mut file = self.log.try_clone().map_err(io_err(&path))?;
        let event = event.clone();
        let started = std::time::Instant::now();
        let written = tokio::task::spawn_blocking(move || append_line(&mut file, &event))
            .await
            .expect("the log writer does not panic");
        self.fsync.observe(started.elapsed().as_secs_f64());
        self.broken = written.is_err();
        written.map_err(io_err(&path))
    }

    /// How long appends took to be on disk (write and fsync).
    pub fn fsync_latency(&self) -> &cram_proto::metrics::Histogram {
        &self.fsync
    }

    /// Logs an accepted result and indexes it (a finished one's facts merged with what the
    /// index holds for the region; an unfinished one's region as split), durable in both
    /// before returning.
    pub async fn record(&mut self, region: &AnyRegion, result: &ResultRecord) -> Result<(), StoreError> {
        self.append(&Event::Result(result.clone())).await?;
        let key = region.key();
        let err = |e: sled::Error| StoreError::Index { path: self.dir.join(INDEX_DIR), reason: e.to_string() };
        if result.finished {
            let held = self.facts.get(key.as_bytes()).map_err(err)?.and_then(|v| Facts::from_bytes(&v));
            let merged = held.unwrap_or(Facts::UNKNOWN).merge(result.facts());
            self.facts.insert(key.as_bytes(), &merged.to_bytes()[..]).map_err(err)?;
        } else {
            self.splits.insert(key.as_bytes(), &[][..]).map_err(err)?;
        }
        self.index.flush_async().await.map_err(err)?;
        Ok(())
    }

    /// Writes a result's proof to `proofs/` under a new name, durable (file and directory
    /// entry) before it returns; the name goes into the result's record.
    pub async fn save_proof(&mut self, proof: Vec<u8>) -> Result<String, StoreError> {
        let dir = self.dir.join(PROOF_DIR);
        let name = format!("{:016x}.proof", rand::random::<u64>());
        let path = dir.join(&name);
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let tmp = path.with_extension("tmp");
            let mut f = File::create(&tmp)?;
            f.write_all(&proof)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            File::open(&dir)?.sync_all()
        })
        .await
        .expect("the proof writer does not panic");
        written.map_err(io_err(&self.dir.join(PROOF_DIR)))?;
        Ok(name)
    }

    /// Where the proofs of [`Store::save_proof`] are read from ([`read_proof`]).
    pub fn proof_dir(&self) -> PathBuf {
        self.dir.join(PROOF_DIR)
    }

    /// Makes the index hold exactly `want` (the facts the log's replay gives), rewriting it
    /// when it does not.
    pub fn check_index(&self, want: &IndexFacts) -> Result<(), StoreError> {
        if self.index_matches(want) {
            return Ok(());
        }
        tracing::warn!(index = %self.dir.join(INDEX_DIR).display(), "state index disagrees with the event log; rebuilding it from the log");
        let err = |e: sled::Error| StoreError::Index { path: self.dir.join(INDEX_DIR), reason: e.to_string() };
        self.facts.clear().map_err(err)?;
        self.splits.clear().map_err(err)?;
        for (r, b) in &want.facts {
            self.facts.insert(r.key().as_bytes(), &b.to_bytes()[..]).map_err(err)?;
        }
        for r in &want.splits {
            self.splits.insert(r.key().as_bytes(), &[][..]).map_err(err)?;
        }
        self.index.flush().map_err(err)?;
        Ok(())
    }

    fn index_matches(&self, want: &IndexFacts) -> bool {
        let facts: Option<HashMap<AnyRegion, Facts>> = self
            .facts
            .iter()
            .map(|kv| {
                let (k, v) = kv.ok()?;
                Some((AnyRegion::from_key(std::str::from_utf8(&k).ok()?)?, Facts::from_bytes(&v)?))
            })
            .collect();
        let splits: Option<HashSet<AnyRegion>> =
            self.splits.iter().map(|kv| AnyRegion::from_key(std::str::from_utf8(&kv.ok()?.0).ok()?)).collect();
        facts.as_ref() == Some(&want.facts) && splits.as_ref() == Some(&want.splits)
    }
}

/// Locks the state directory for this process (released when the file is closed, also by
/// a kill); refuses when another process holds it.
fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join(LOCK_FILE);
    let mut file =
        OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).map_err(io_err(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "a process that has not written its id yet".to_string(),
                pid => format!("process {pid}"),
            };
            return Err(StoreError::Locked { path: dir.to_path_buf(), holder });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&path)(e)),
    }
    file.set_len(0).and_then(|()| file.write_all(std::process::id().to_string().as_bytes())).map_err(io_err(&path))?;
    Ok(file)
}

fn tree(db: &sled::Db, name: &str, path: &Path) -> Result<sled::Tree, StoreError> {
    db.open_tree(name).map_err(|e| StoreError::Index { path: path.to_path_buf(), reason: e.to_string() })
}

/// Opens the sled index; one that cannot be opened is moved aside and started afresh (the
/// log rebuilds it).
fn open_index(path: &Path) -> Result<sled::Db, StoreError> {
    cram_proto::open_sled(path, 64 << 20).map_err(|reason| StoreError::Index { path: path.to_path_buf(), reason })
}

fn append_line(file: &mut File, event: &Event) -> std::io::Result<()> {
    let line = serde_json::to_string(event).expect("events serialise");
    file.write_all(format!("{line}\n").as_bytes())?;
    file.sync_data()
}

/// What [`read_events`] read: the events of the whole lines, and where a torn last line
/// (one without its newline) begins, if there is one.
#[derive(Debug, Default)]
pub struct LogRead {
    /// The events, in order.
    pub replay: Replay,
    /// Byte offset of a torn last line.
    pub torn_at: Option<u64>,
}

/// Reads the log; a torn last line is cut off the file.
fn read_log(path: &Path) -> Result<Replay, StoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Replay::default()),
        Err(e) => return Err(io_err(path)(e)),
    };
    let read = read_events(BufReader::new(file)).map_err(|e| match e {
        LogError::Io(source) => StoreError::Io { path: path.to_path_buf(), source },
        LogError::Line { line, reason } => StoreError::Corrupt { path: path.to_path_buf(), line, reason },
    })?;
    if let Some(good_bytes) = read.torn_at {
        // Only the last line can lack its newline: the process died while writing it,
        // before the result was acknowledged.
        tracing::warn!(log = %path.display(), "event log ends in a torn line; dropping it");
        let f = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
        f.set_len(good_bytes).map_err(io_err(path))?;
        f.sync_data().map_err(io_err(path))?;
    }
    Ok(read.replay)
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
        /// What is wrong.
        reason: String,
    },
}

/// Reads an event log: every whole line must be a valid event; a last line without its
/// newline (torn by a kill, maybe inside a character) is left out and reported.
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
        let event = std::str::from_utf8(&line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|text| serde_json::from_str::<Event>(text.trim_end()).map_err(|e| e.to_string()))
            .and_then(|e| check_event(&out.replay, &e).map(|()| e))
            .map_err(|reason| LogError::Line { line: n, reason })?;
        if let Event::Done(d) = &event {
            out.replay.done = Some(d.clone());
        }
        out.replay.events.push(event);
        good_bytes += read as u64;
    }
}

/// Checks one event against the rules every log keeps: the job first and once, unit names
/// that name their region, no accepted result whose facts exclude every value.
fn check_event(replay: &Replay, event: &Event) -> Result<(), String> {
    let unit_of = |unit: &str, region: &str| {
        let r = AnyRegion::from_key(region).ok_or_else(|| format!("bad region {region:?}"))?;
        match cram_proto::parse_unit_id(unit) {
            Some((unit_region, _)) if unit_region == r => Ok(()),
            _ => Err(format!("bad unit {unit:?} for region {region:?}")),
        }
    };
    match event {
        Event::Job(_) if !replay.events.is_empty() => Err("a second job event".into()),
        _ if replay.events.is_empty() && !matches!(event, Event::Job(_)) => {
            Err("the first event is not the job".into())
        }
        Event::Result(r) if r.finished && r.facts().is_contradictory() => {
            Err(format!("facts of {:?} exclude every value", r.unit))
        }
        Event::Result(r) => {
            if let Some(bad) = r.shared.iter().find(|f| f.learned().is_none_or(|l| l.facts.is_contradictory())) {
                return Err(format!(
                    "a shared fact of {:?} about {:?} is unreadable or leaves no value",
                    r.unit, bad.0
                ));
            }
            unit_of(&r.unit, &r.region)
        }
        Event::Refused(r) => unit_of(&r.unit, &r.region),
        Event::Job(_) | Event::Start { .. } | Event::Distrust { .. } | Event::Done(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: &str) -> JobRecord {
        JobRecord {
            spec: spec.into(),
            rows: 3,
            cols: 7,
            empty: "1fffff".into(),
            mode: "nimber".into(),
            pairing: true,
            build: "test".into(),
            certificate_small: None,
        }
    }

    fn result(unit: &str, finished: bool) -> ResultRecord {
        ResultRecord {
            unit: unit.into(),
            region: "3x7:1fffff".into(),
            excluded: 1,
            upper: 9,
            finished,
            nodes: 10,
            millis: 1,
            worker: "w".into(),
            from_cache: false,
            check: false,
            proof: None,
            shared: Vec::new(),
            uses: Vec::new(),
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cram-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[tokio::test]
    async fn results_survive_a_reopen_and_the_index_is_rebuilt_when_lost() {
        let dir = tempdir("reopen");
        let region = AnyRegion::from_key("3x7:1fffff").unwrap();
        let want = IndexFacts { facts: [(region, Facts { excluded: 2, upper: 9 })].into(), splits: [region].into() };
        {
            let (mut store, replay) = Store::open(&dir, &job("3x7")).unwrap();
            assert_eq!(replay.events.len(), 1);
            store.record(&region, &result("3x7:1fffff?0", false)).await.unwrap();
            let mut second = result("3x7:1fffff?1", true);
            second.excluded = 2;
            store.record(&region, &second).await.unwrap();
            // The index holds the finished result's facts and the split.
            assert!(store.index_matches(&want));
        }
        let (store, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert_eq!(replay.events.len(), 3);
        assert!(store.index_matches(&want));
        drop(store);
        // A lost index is rebuilt, and then matches.
        std::fs::remove_dir_all(dir.join(INDEX_DIR)).unwrap();
        let (store, _) = Store::open(&dir, &job("3x7")).unwrap();
        assert!(!store.index_matches(&want));
        store.check_index(&want).unwrap();
        assert!(store.index_matches(&want));
        drop(store);
        // Another job on the same state is refused.
        let mut other = job("3x8");
        other.cols = 8;
        assert!(matches!(Store::open(&dir, &other), Err(StoreError::OtherJob { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_last_line_torn_inside_a_utf8_character_is_dropped() {
        let dir = tempdir("torn-utf8");
        std::fs::create_dir_all(&dir).unwrap();
        let job_line = serde_json::to_string(&Event::Job(job("3x7"))).unwrap();
        let mut named = result("3x7:1fffff?0", true);
        named.worker = "café-7".into();
        let line = serde_json::to_string(&Event::Result(named)).unwrap();
        // Cut inside the two bytes of "é": a kill in the middle of the write.
        let cut = line.find('é').unwrap() + 1;
        let log = dir.join(LOG_FILE);
        let mut bytes = format!("{job_line}\n").into_bytes();
        bytes.extend_from_slice(&line.as_bytes()[..cut]);
        std::fs::write(&log, &bytes).unwrap();
        let (_, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert_eq!(replay.events.len(), 1);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{job_line}\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_store_on_a_live_directory_is_refused_before_touching_the_log() {
        let dir = tempdir("locked");
        let (_live, _) = Store::open(&dir, &job("3x7")).unwrap();
        // The live coordinator is in the middle of appending a line.
        let log = dir.join(LOG_FILE);
        let mut f = OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"{\"event\":\"start\",").unwrap();
        let before = std::fs::read(&log).unwrap();
        let err = Store::open(&dir, &job("3x7")).err().expect("a second store is refused");
        assert!(matches!(err, StoreError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("in use by another coordinator"), "{err}");
        assert_eq!(std::fs::read(&log).unwrap(), before, "the live log was not touched");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_damage_elsewhere_refused() {
        let dir = tempdir("torn");
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            serde_json::to_string(&Event::Job(job("3x7"))).unwrap(),
            serde_json::to_string(&Event::Result(result("3x7:1fffff?0", true))).unwrap(),
        ];
        let log = dir.join(LOG_FILE);
        std::fs::write(&log, format!("{}\n{}\n{{\"event\":\"res", lines[0], lines[1])).unwrap();
        let (_, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert_eq!(replay.events.len(), 2);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), format!("{}\n{}\n", lines[0], lines[1]));
        std::fs::write(&log, format!("{}\ngarbage\n{}\n", lines[0], lines[1])).unwrap();
        let err = Store::open(&dir, &job("3x7")).err().unwrap();
        assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
        // Well-formed lines that cannot be true are damage too: a unit name that is not its
        // region's, facts that exclude every value.
        let bad_unit = serde_json::to_string(&Event::Result(result("3x7:fffff?0", true))).unwrap();
        let mut no_value = result("3x7:1fffff?0", true);
        (no_value.excluded, no_value.upper) = (0b111, 2);
        let no_value = serde_json::to_string(&Event::Result(no_value)).unwrap();
        for bad in [bad_unit, no_value] {
            std::fs::write(&log, format!("{}\n{bad}\n{}\n", lines[0], lines[1])).unwrap();
            let err = Store::open(&dir, &job("3x7")).err().unwrap();
            assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
