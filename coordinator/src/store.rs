//! Durable job state: an append-only event log of JSON lines, the source of truth, and a
//! sled index of the same facts beside it.
//!
//! Every result is appended to the log and fsynced, then written to sled and flushed,
//! before the worker is told it was recorded. On open the log is replayed; the sled index
//! is compared with the replay, and when it cannot be opened or disagrees (a hard kill can
//! leave sled damaged) it is moved aside and rebuilt from the log. A log whose last line
//! was torn by a kill loses that line (its result was never acknowledged); damage anywhere
//! else is refused, never guessed around.

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// The log's file name inside the state directory.
pub const LOG_FILE: &str = "events.jsonl";
/// The sled index's directory name inside the state directory.
pub const INDEX_DIR: &str = "index.sled";

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
}

impl JobRecord {
    /// True when both name the same question (same position, mode and engine settings).
    pub fn same_job(&self, other: &JobRecord) -> bool {
        (self.rows, self.cols, &self.empty, &self.mode, self.pairing)
            == (other.rows, other.cols, &other.empty, &other.mode, other.pairing)
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
}

impl ResultRecord {
    /// The facts the result carries.
    pub fn facts(&self) -> Facts {
        Facts { excluded: self.excluded, upper: self.upper }
    }
}

/// The job's answer as logged.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DoneRecord {
    /// `first` or `second`: who wins.
    pub outcome: String,
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
    /// A unit's result.
    Result(ResultRecord),
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
        /// Its mode.
        mode: String,
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

/// What the log holds, replayed.
#[derive(Default, Debug)]
pub struct Replay {
    /// Every logged event in order.
    pub events: Vec<Event>,
    /// Reported facts per region, merged.
    pub facts: HashMap<AnyRegion, Facts>,
    /// Regions split after running out of budget.
    pub splits: HashSet<AnyRegion>,
    /// Units with a logged result.
    pub recorded: HashSet<String>,
    /// The answer, when the job is done.
    pub done: Option<DoneRecord>,
}

/// The open state of one job.
pub struct Store {
    dir: PathBuf,
    log: File,
    /// Set when an append failed: the log may end in part of a line, and nothing more is
    /// written after it (the next start drops a torn last line).
    broken: bool,
    index: sled::Db,
    facts: sled::Tree,
    splits: sled::Tree,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

impl Store {
    /// Opens (or creates) the state of `job` in `dir` and replays it.
    pub fn open(dir: &Path, job: &JobRecord) -> Result<(Store, Replay), StoreError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let log_path = dir.join(LOG_FILE);
        let mut replay = read_log(&log_path)?;
        let mut log = OpenOptions::new().create(true).append(true).open(&log_path).map_err(io_err(&log_path))?;
        match replay.events.first() {
            None => {
                append_line(&mut log, &Event::Job(job.clone())).map_err(io_err(&log_path))?;
                // The new log's directory entry must be durable too.
                File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))?;
                replay.events.push(Event::Job(job.clone()));
            }
            Some(Event::Job(held)) if held.same_job(job) => {}
            Some(Event::Job(held)) => {
                return Err(StoreError::OtherJob {
                    path: dir.to_path_buf(),
                    state: if replay.done.is_some() { "the finished" } else { "an unfinished" },
                    spec: held.spec.clone(),
                    mode: held.mode.clone(),
                })
            }
            Some(_) => {
                return Err(StoreError::Corrupt {
                    path: log_path,
                    line: 1,
                    reason: "the first event is not the job".into(),
                })
            }
        }
        let index_path = dir.join(INDEX_DIR);
        let index = open_index(&index_path)?;
        let store = Store {
            dir: dir.to_path_buf(),
            log,
            broken: false,
            facts: tree(&index, "facts", &index_path)?,
            splits: tree(&index, "splits", &index_path)?,
            index,
        };
        let store = store.check_index(&replay)?;
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
        let written = tokio::task::spawn_blocking(move || append_line(&mut file, &event))
            .await
            .expect("the log writer does not panic");
        self.broken = written.is_err();
        written.map_err(io_err(&path))
    }

    /// Logs a result and indexes its facts (merged with what the index holds for the
    /// region), durable in both before returning.
    pub async fn record(&mut self, region: &AnyRegion, result: &ResultRecord) -> Result<(), StoreError> {
        self.append(&Event::Result(result.clone())).await?;
        let key = region.key();
        let err = |e: sled::Error| StoreError::Index { path: self.dir.join(INDEX_DIR), reason: e.to_string() };
        let held = self.facts.get(key.as_bytes()).map_err(err)?.and_then(|v| Facts::from_bytes(&v));
        let merged = held.unwrap_or(Facts::UNKNOWN).merge(result.facts());
        self.facts.insert(key.as_bytes(), &merged.to_bytes()[..]).map_err(err)?;
        if !result.finished {
            self.splits.insert(key.as_bytes(), &[][..]).map_err(err)?;
        }
        self.index.flush_async().await.map_err(err)?;
        Ok(())
    }

    /// Rebuilds the index from the replay unless it holds exactly the replay's facts.
    fn check_index(self, replay: &Replay) -> Result<Store, StoreError> {
        if self.index_matches(replay) {
            return Ok(self);
        }
        tracing::warn!(index = %self.dir.join(INDEX_DIR).display(), "state index disagrees with the event log; rebuilding it from the log");
        let err = |e: sled::Error| StoreError::Index { path: self.dir.join(INDEX_DIR), reason: e.to_string() };
        self.facts.clear().map_err(err)?;
        self.splits.clear().map_err(err)?;
        for (r, b) in &replay.facts {
            self.facts.insert(r.key().as_bytes(), &b.to_bytes()[..]).map_err(err)?;
        }
        for r in &replay.splits {
            self.splits.insert(r.key().as_bytes(), &[][..]).map_err(err)?;
        }
        self.index.flush().map_err(err)?;
        Ok(self)
    }

    fn index_matches(&self, replay: &Replay) -> bool {
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
        facts.as_ref() == Some(&replay.facts) && splits.as_ref() == Some(&replay.splits)
    }
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

/// Reads and replays the log; a torn last line is cut off.
fn read_log(path: &Path) -> Result<Replay, StoreError> {
    let mut replay = Replay::default();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(replay),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut reader = BufReader::new(file);
    let mut good_bytes = 0u64;
    let mut line = String::new();
    let mut n = 0;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(io_err(path))?;
        if read == 0 {
            break;
        }
        n += 1;
        if !line.ends_with('\n') {
            // Only the last line can lack its newline: the process died while writing it,
            // before the result was acknowledged.
            tracing::warn!(log = %path.display(), line = n, "event log ends in a torn line; dropping it");
            let f = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
            f.set_len(good_bytes).map_err(io_err(path))?;
            f.sync_data().map_err(io_err(path))?;
            break;
        }
        let parsed = serde_json::from_str::<Event>(line.trim_end()).map_err(|e| e.to_string());
        parsed.and_then(|e| apply(&mut replay, e)).map_err(|reason| StoreError::Corrupt {
            path: path.to_path_buf(),
            line: n,
            reason,
        })?;
        good_bytes += read as u64;
    }
    Ok(replay)
}

/// Adds one event to the replay.
fn apply(replay: &mut Replay, event: Event) -> Result<(), String> {
    match &event {
        Event::Job(_) if !replay.events.is_empty() => return Err("a second job event".into()),
        Event::Result(r) => {
            let region = AnyRegion::from_key(&r.region).ok_or_else(|| format!("bad region {:?}", r.region))?;
            if r.facts().is_contradictory() {
                return Err(format!("facts of {:?} exclude every value", r.unit));
            }
            let entry = replay.facts.entry(region).or_insert(Facts::UNKNOWN);
            *entry = entry.merge(r.facts());
            if !r.finished {
                replay.splits.insert(region);
            }
            if cram_proto::parse_unit_id(&r.unit).is_none_or(|(unit_region, _)| unit_region != region) {
                return Err(format!("bad unit {:?} for region {:?}", r.unit, r.region));
            }
            replay.recorded.insert(r.unit.clone());
        }
        Event::Done(d) => replay.done = Some(d.clone()),
        Event::Job(_) | Event::Start { .. } => {}
    }
    replay.events.push(event);
    Ok(())
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
        {
            let (mut store, replay) = Store::open(&dir, &job("3x7")).unwrap();
            assert_eq!(replay.events.len(), 1);
            store.record(&region, &result("3x7:1fffff?0", false)).await.unwrap();
            let mut second = result("3x7:1fffff?1", true);
            second.excluded = 2;
            store.record(&region, &second).await.unwrap();
            // The index merges the region's facts as the replay does.
            assert!(store.index_matches(&read_log(&dir.join(LOG_FILE)).unwrap()));
        }
        let (_, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert_eq!(replay.recorded.len(), 2);
        assert!(replay.splits.contains(&region));
        assert_eq!(replay.facts[&region], Facts { excluded: 3, upper: 9 });
        // A lost index is rebuilt, and then matches.
        std::fs::remove_dir_all(dir.join(INDEX_DIR)).unwrap();
        let (store, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert!(store.index_matches(&replay));
        drop(store);
        // Another job on the same state is refused.
        let mut other = job("3x8");
        other.cols = 8;
        assert!(matches!(Store::open(&dir, &other), Err(StoreError::OtherJob { .. })));
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
