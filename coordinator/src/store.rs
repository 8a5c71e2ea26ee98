//! Durable job state, in a state directory that one coordinator at a time holds (an
//! exclusive lock on `STATE/lock`, taken before anything is read): the event log of sealed
//! JSON lines ([`crate::events`]), the source of truth; the sled index, which records how
//! far the log reached (its line count and the seal of its last line); and, in a certified
//! job, the results' proofs.
//!
//! Every event is written to the log and fsynced, then the index is updated and flushed,
//! before the worker is told it was recorded; results that arrive together are fsynced
//! together (group commit: [`Store::write`], then one [`Store::sync`]). On open the log is
//! read back and its chain of seals checked; the index says whether it is whole: a log
//! shorter than the index records was cut (not torn by a kill) and is refused, as is a
//! missing or empty log in a directory whose index or proofs show it held a job. A log whose
//! last line was torn by a kill loses that line, and one damaged after the lines the index
//! records (written, not yet synced, when the power went) is cut there: none of those was
//! acknowledged. Damage anywhere else is refused, never guessed around. An index that cannot be opened (sled after a hard kill) is started
//! afresh from the log.

use crate::events::{read_events, sealed_line, Event, JobRecord, LogError, LogRead, Replay, ResultRecord};
use crate::scheduler::Grant;
use cram_engine::Question;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

/// The log's file name inside the state directory.
pub const LOG_FILE: &str = "events.jsonl";
/// The sled index's directory name inside the state directory.
pub const INDEX_DIR: &str = "index.sled";
/// The lock file inside the state directory (it holds the owner's process id).
pub const LOCK_FILE: &str = "lock";
/// The directory of the state where a certified job keeps its results' proofs.
pub const PROOF_DIR: &str = "proofs";
/// The index's key of the log's reach: its line count and last seal (16 bytes).
const REACH: &[u8] = b"log";
/// The index's tree of grants: unit id, a zero byte and worker id → the last attempt the
/// worker was leased the unit under (8 bytes), in any run.
const GRANTS: &[u8] = b"grants";
/// The index's tree of first holders: unit id → worker id, a zero byte and the attempt (8
/// bytes) of the unit's last first holder.
const FIRST: &[u8] = b"first";

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
    /// The log is damaged before its last line, cut, or missing from a directory that held
    /// a job.
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

/// The open state of one job.
pub struct Store {
    dir: PathBuf,
    /// Held (locked) for as long as the store is open.
    _lock: File,
    /// The log, opened for appending; shared with the blocking task that writes a line
    /// (no new file descriptor per event: a coordinator short of descriptors still logs).
    log: std::sync::Arc<File>,
    /// Set when an append failed: the log may end in part of a line, and nothing more is
    /// written after it (the next start drops a torn last line).
    broken: bool,
    /// Whole lines in the log, and the seal of the last.
    lines: u64,
    seal: u64,
    index: sled::Db,
    /// Lines written since the last sync.
    unsynced: u64,
    /// Time each sync of the log took (one per group of lines written together).
    fsync: cram_proto::metrics::Histogram,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.to_path_buf(), source }
}

/// A sled error of the index of the state in `dir`.
fn index_err(dir: &Path) -> impl Fn(sled::Error) -> StoreError {
    let path = dir.join(INDEX_DIR);
    move |e| StoreError::Index { path: path.clone(), reason: e.to_string() }
}

/// How far the index says the log reached: (lines, seal of the last), when it says.
fn reach(index: &sled::Db) -> Option<(u64, u64)> {
    let v = index.get(REACH).ok()??;
    let v: &[u8; 16] = v.as_ref().try_into().ok()?;
    Some((u64::from_le_bytes(v[..8].try_into().ok()?), u64::from_le_bytes(v[8..].try_into().ok()?)))
}

impl Store {
    /// Opens (or creates) the state of `job` in `dir` and reads its log back. The
    /// directory is locked first: a second coordinator on it is refused before it reads
    /// (or cuts) anything.
    pub fn open(dir: &Path, job: &JobRecord) -> Result<(Store, Replay), StoreError> {
        if dir.exists() && !dir.is_dir() {
            let source = std::io::Error::other("a file, not a directory: give --state a directory (new or a job's)");
            return Err(StoreError::Io { path: dir.to_path_buf(), source });
        }
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock = lock_dir(dir)?;
        let log_path = dir.join(LOG_FILE);
        let index_path = dir.join(INDEX_DIR);
        let held_a_job = index_path.exists() || dir.join(PROOF_DIR).exists();
        let index = open_index(&index_path)?;
        let recorded = reach(&index);
        let read = read_log_within(&log_path, recorded.map(|(n, _)| n))?;
        let corrupt = |line: usize, reason: String| StoreError::Corrupt { path: log_path.clone(), line, reason };
        let lines = read.replay.events.len() as u64;
        match recorded {
            Some((n, _)) if lines < n => {
                return Err(corrupt(
                    lines as usize + 1,
                    format!("the log holds {lines} whole lines but the state index records {n}: it was cut or replaced"),
                ))
            }
            Some((n, seal)) if n > 0 && read.seal_at(n) != Some(seal) => {
                return Err(corrupt(n as usize, "the line's seal is not the one the state index records".into()))
            }
            None if lines == 0 && held_a_job => {
                return Err(corrupt(
                    1,
                    "the log is missing or empty, but the directory held a job (its index or proofs are there); restore the log or use another --state".into(),
                ))
            }
            None if lines > 0 => tracing::warn!(index = %index_path.display(), "the state index does not say how far the log reached (new or lost); taking the log as it is"),
            _ => {}
        }
        cut_torn_line(&log_path, &read)?;
        if read.unsealed > 0 {
            tracing::warn!(log = %log_path.display(), lines = read.unsealed, "the log begins with lines of an earlier build, without seals; the lines from now on seal them too");
        }
        let LogRead { mut replay, seal, .. } = read;
        let log = OpenOptions::new().create(true).append(true).open(&log_path).map_err(io_err(&log_path))?;
        let mut store = Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            log: std::sync::Arc::new(log),
            broken: false,
            lines,
            seal,
            index,
            unsynced: 0,
            fsync: Default::default(),
        };
        // read_events saw to it that a log that is not empty begins with the job.
        match replay.events.first() {
            Some(Event::Job(held)) if held.same_job(job) => store.write_reach()?,
            Some(Event::Job(held)) => {
                return Err(StoreError::OtherJob {
                    path: dir.to_path_buf(),
                    state: if replay.done.is_some() { "the finished" } else { "an unfinished" },
                    spec: held.spec.clone(),
                    mode: held.settings(),
                })
            }
            _ => {
                store.append_now(&Event::Job(job.clone())).map_err(io_err(&log_path))?;
                // The new log's directory entry must be durable too.
                File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))?;
                store.write_reach()?;
                replay.events.push(Event::Job(job.clone()));
            }
        }
        Ok((store, replay))
    }

    /// Writes `event` as the next sealed line and fsyncs it (on this thread).
    fn append_now(&mut self, event: &Event) -> std::io::Result<()> {
        let (line, seal) = sealed_line(event, self.seal);
        (&*self.log).write_all(line.as_bytes())?;
        self.log.sync_data()?;
        (self.lines, self.seal) = (self.lines + 1, seal);
        Ok(())
    }

    /// Records in the index how far the log reached, once it is on disk: a reopened log
    /// may hold lines an earlier run wrote and never synced (killed while they were in
    /// the page cache).
    fn write_reach(&self) -> Result<(), StoreError> {
        self.log.sync_data().map_err(io_err(&self.dir.join(LOG_FILE)))?;
        let err = index_err(&self.dir);
        self.index.insert(REACH, &self.reach_value()[..]).map_err(&err)?;
        self.index.flush().map_err(err)?;
        Ok(())
    }

    /// The index's record of the log's reach: its whole lines, and the seal of the last.
    fn reach_value(&self) -> [u8; 16] {
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&self.lines.to_le_bytes());
        v[8..].copy_from_slice(&self.seal.to_le_bytes());
        v
    }

    /// Notes a grant, so that after a restart its worker may keep searching the unit
    /// (adoption needs a grant, and only the unit's last first holder adopts it as such).
    /// Written to the index without waiting for the disk (sled writes it within half a
    /// second): a grant lost with a crash costs only that worker's search of the unit, which
    /// then goes to another. A failure is logged and changes nothing else.
    pub fn record_grant(&self, g: &Grant) {
        let unit = g.unit.to_string();
        let key = [unit.as_bytes(), &[0], g.worker.as_bytes()].concat();
        let attempt = g.attempt.to_le_bytes();
        let mut written = self.index.open_tree(GRANTS).and_then(|t| t.insert(key, &attempt[..]).map(drop));
        if g.first && written.is_ok() {
            let holder = [g.worker.as_bytes(), &[0], &attempt[..]].concat();
            written = self.index.open_tree(FIRST).and_then(|t| t.insert(unit.as_bytes(), holder).map(drop));
        }
        if let Err(e) = written {
            tracing::warn!(unit = %g.unit, worker = %g.worker, "the grant could not be noted in the state index ({e}); the unit cannot be adopted after a restart");
        }
    }

    /// Forgets `worker`'s grant of `q` (it let the unit go, or is gone), and that it is
    /// the unit's first holder if it is recorded so. A failure is logged.
    pub fn forget_grant(&self, q: &Question, worker: &str) {
        let unit = q.to_string();
        let key = [unit.as_bytes(), &[0], worker.as_bytes()].concat();
        let forgot = self.index.open_tree(GRANTS).and_then(|t| t.remove(key)).and_then(|_| {
            let first = self.index.open_tree(FIRST)?;
            let names_worker = |holder: &[u8]| holder.split(|&b| b == 0).next() == Some(worker.as_bytes());
            if first.get(unit.as_bytes())?.is_some_and(|h| names_worker(&h)) {
                first.remove(unit.as_bytes())?;
            }
            Ok(())
        });
        if let Err(e) = forgot {
            tracing::warn!(unit = %q, worker, "the grant could not be removed from the state index ({e})");
        }
    }

    /// Forgets the grants of `q` (answered or split, and held by nobody: nobody will adopt
    /// it), so that the index holds the grants of open units only. A failure is logged.
    pub fn forget_grants(&self, q: &Question) {
        let unit = q.to_string();
        let prefix = [unit.as_bytes(), &[0]].concat();
        let forgot = self.index.open_tree(GRANTS).and_then(|t| {
            for key in t.scan_prefix(&prefix).keys() {
                t.remove(key?)?;
            }
            self.index.open_tree(FIRST)?.remove(unit.as_bytes()).map(drop)
        });
        if let Err(e) = forgot {
            tracing::warn!(unit = %q, "the unit's grants could not be removed from the state index ({e})");
        }
    }

    /// Every grant noted in earlier runs (and this one): each worker's last grant of each
    /// unit, and each unit's last first holder (`first`). Entries that do not read back are
    /// passed over.
    pub fn grants(&self) -> Result<Vec<Grant>, StoreError> {
        let err = &index_err(&self.dir);
        let split = |bytes: &[u8]| {
            let zero = bytes.iter().position(|&b| b == 0)?;
            Some((bytes[..zero].to_vec(), bytes[zero + 1..].to_vec()))
        };
        let read = |unit: &[u8], worker: &[u8], attempt: &[u8], first: bool| {
            let unit = std::str::from_utf8(unit).ok()?.parse::<Question>().ok()?;
            let worker = std::str::from_utf8(worker).ok()?.to_string();
            let attempt = u64::from_le_bytes(attempt.try_into().ok()?);
            Some(Grant { unit, worker, attempt, first })
        };
        let mut out = Vec::new();
        for entry in self.index.open_tree(GRANTS).map_err(err)?.iter() {
            let (k, v) = entry.map_err(err)?;
            out.extend(split(&k).and_then(|(unit, worker)| read(&unit, &worker, &v, false)));
        }
        for entry in self.index.open_tree(FIRST).map_err(err)?.iter() {
            let (k, v) = entry.map_err(err)?;
            out.extend(split(&v).and_then(|(worker, attempt)| read(&k, &worker, &attempt, true)));
        }
        Ok(out)
    }

    /// Appends `event` to the log and waits until it is on disk, with every line written
    /// before it, then records the log's reach in the index.
    pub async fn append(&mut self, event: &Event) -> Result<(), StoreError> {
        self.write(event).await?;
        self.sync().await
    }

    /// Writes `event` as the log's next line without waiting for the disk: it is durable
    /// once [`Store::sync`] (or an [`Store::append`]) returns. Results written together and
    /// made durable by one sync are the log's group commit: one fsync for all the results
    /// that arrived while the last one ran, instead of one each.
    pub async fn write(&mut self, event: &Event) -> Result<(), StoreError> {
        self.usable()?;
        let (line, seal) = sealed_line(event, self.seal);
        let file = self.log.clone();
        let written = tokio::task::spawn_blocking(move || (&*file).write_all(line.as_bytes()))
            .await
            .expect("the log writer does not panic");
        self.broken = written.is_err();
        written.map_err(io_err(&self.dir.join(LOG_FILE)))?;
        (self.lines, self.seal, self.unsynced) = (self.lines + 1, seal, self.unsynced + 1);
        Ok(())
    }

    /// Lines written and not yet made durable by [`Store::sync`].
    pub fn unsynced(&self) -> u64 {
        self.unsynced
    }

    /// Waits until every line written is on disk, then records the log's reach in the
    /// index (never beyond what is on disk: a reopened log shorter than the index says is
    /// refused as cut).
    pub async fn sync(&mut self) -> Result<(), StoreError> {
        if self.unsynced == 0 {
            return Ok(());
        }
        self.usable()?;
        let file = self.log.clone();
        let started = std::time::Instant::now();
        let synced =
            tokio::task::spawn_blocking(move || file.sync_data()).await.expect("the log writer does not panic");
        self.fsync.observe(started.elapsed().as_secs_f64());
        self.broken = synced.is_err();
        synced.map_err(io_err(&self.dir.join(LOG_FILE)))?;
        self.unsynced = 0;
        let err = index_err(&self.dir);
        self.index.insert(REACH, &self.reach_value()[..]).map_err(&err)?;
        self.index.flush_async().await.map_err(err)?;
        Ok(())
    }

    /// An error once a write to the log failed: it may end in part of a line, and nothing
    /// more is written after it.
    fn usable(&self) -> Result<(), StoreError> {
        if self.broken {
            let source = std::io::Error::other("an earlier write to the event log failed; restart to resume");
            return Err(StoreError::Io { path: self.dir.join(LOG_FILE), source });
        }
        Ok(())
    }

    /// How long syncs of the log took (each makes the lines written since the last durable).
    pub fn fsync_latency(&self) -> &cram_proto::metrics::Histogram {
        &self.fsync
    }

    /// Logs an accepted result; durable once [`Store::sync`] returns, and acknowledged to
    /// its worker only then.
    pub async fn record(&mut self, result: &ResultRecord) -> Result<(), StoreError> {
        self.write(&Event::Result(result.clone())).await
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

    /// Deletes a proof [`Store::save_proof`] wrote that is no longer needed (a discarded
    /// result's that no check passed); a name it could not have written is left alone. A
    /// failure is logged: the file only takes room.
    pub fn remove_proof(&self, name: &str) {
        let Some(stem) = name.strip_suffix(".proof") else { return };
        if stem.len() != 16 || !stem.bytes().all(|b| b.is_ascii_hexdigit()) {
            return;
        }
        match std::fs::remove_file(self.dir.join(PROOF_DIR).join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(proof = name, "a discarded result's proof could not be deleted ({e})");
            }
            _ => {}
        }
    }

    /// Where the proofs of [`Store::save_proof`] are read from ([`read_proof`]).
    pub fn proof_dir(&self) -> PathBuf {
        self.dir.join(PROOF_DIR)
    }

    /// The log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
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

/// Opens the sled index; one that cannot be opened is moved aside and started afresh (the
/// log is then taken as it is).
fn open_index(path: &Path) -> Result<sled::Db, StoreError> {
    cram_proto::open_sled(path, 16 << 20).map_err(|reason| StoreError::Index { path: path.to_path_buf(), reason })
}

/// Reads the event log at `path` (none: an empty read), its seals checked.
pub fn read_log(path: &Path) -> Result<LogRead, StoreError> {
    read_log_within(path, None)
}

/// [`read_log`], for a log whose first `durable` lines the index records as on disk: a
/// damaged line after them is one a power loss left half written (lines written together
/// and not yet synced reach the disk in no set order), never acknowledged; the log is cut
/// before it, and what is cut kept beside the log (`events.jsonl.cut-SECS`). Damage within
/// the durable lines is refused.
fn read_log_within(path: &Path, durable: Option<u64>) -> Result<LogRead, StoreError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LogRead::default()),
        Err(e) => return Err(io_err(path)(e)),
    };
    match read_events(BufReader::new(file)) {
        Ok(read) => Ok(read),
        Err(LogError::Io(source)) => Err(StoreError::Io { path: path.to_path_buf(), source }),
        Err(LogError::Line { line, offset, reason }) if durable.is_some_and(|n| line as u64 > n) => {
            let aside = path.with_extension(format!("jsonl.cut-{}", cram_proto::unix_secs()));
            tracing::warn!(log = %path.display(), line, %reason, aside = %aside.display(), "the event log is damaged after the lines its index records as on disk (a power loss while they were unsynced; none was acknowledged): cutting it there");
            let bytes = std::fs::read(path).map_err(io_err(path))?;
            std::fs::write(&aside, &bytes[offset as usize..]).map_err(io_err(&aside))?;
            let f = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
            f.set_len(offset).map_err(io_err(path))?;
            f.sync_data().map_err(io_err(path))?;
            read_log_within(path, None)
        }
        Err(LogError::Line { line, reason, .. }) => Err(StoreError::Corrupt { path: path.to_path_buf(), line, reason }),
    }
}

/// Cuts a torn last line off the log (once the log is known whole up to it).
fn cut_torn_line(path: &Path, read: &LogRead) -> Result<(), StoreError> {
    if let Some(good_bytes) = read.torn_at {
        // Only the last line can lack its newline: the process died while writing it,
        // before the result was acknowledged.
        tracing::warn!(log = %path.display(), "event log ends in a torn line; dropping it");
        let f = OpenOptions::new().write(true).open(path).map_err(io_err(path))?;
        f.set_len(good_bytes).map_err(io_err(path))?;
        f.sync_data().map_err(io_err(path))?;
    }
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
            mode: cram_engine::Mode::Nimber,
            pairing: true,
            build: "test".into(),
            certificate_small: None,
        }
    }

    fn result(unit: &str, finished: bool) -> ResultRecord {
        ResultRecord {
            unit: unit.parse().unwrap(),
            region: "3x7:1fffff".into(),
            excluded: 1,
            upper: 9,
            finished,
            nodes: 10,
            millis: 1,
            worker: "w".into(),
            from_cache: false,
            check: false,
            verify: false,
            proof: None,
            shared: Vec::new(),
        }
    }

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cram-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A state with the job, one unfinished and one finished result; its log's lines.
    async fn written(dir: &Path) -> Vec<String> {
        let (mut store, replay) = Store::open(dir, &job("3x7")).unwrap();
        assert_eq!(replay.events.len(), 1);
        store.record(&result("3x7:1fffff?0", false)).await.unwrap();
        store.record(&result("3x7:1fffff?1", true)).await.unwrap();
        // Written, not yet durable: the index's reach waits for the sync.
        assert_eq!((store.unsynced(), reach(&store.index).map(|r| r.0)), (2, Some(1)));
        store.sync().await.unwrap();
        assert_eq!((store.unsynced(), reach(&store.index).map(|r| r.0)), (0, Some(3)));
        std::fs::read_to_string(dir.join(LOG_FILE)).unwrap().lines().map(str::to_string).collect()
    }

    fn reopen(dir: &Path) -> Result<Replay, StoreError> {
        Store::open(dir, &job("3x7")).map(|(_, r)| r)
    }

    #[tokio::test]
    async fn results_survive_a_reopen_and_a_lost_index_is_started_afresh() {
        let dir = tempdir("reopen");
        let lines = written(&dir).await;
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.ends_with("\"}") && l.contains(",\"seal\":\"")), "{lines:?}");
        assert_eq!(reopen(&dir).unwrap().events.len(), 3);
        // A lost index: the log is taken as it is, and the index records it again.
        std::fs::remove_dir_all(dir.join(INDEX_DIR)).unwrap();
        assert_eq!(reopen(&dir).unwrap().events.len(), 3);
        let index = open_index(&dir.join(INDEX_DIR)).unwrap();
        assert_eq!(reach(&index).map(|r| r.0), Some(3));
        drop(index);
        // Another job on the same state is refused.
        let mut other = job("3x8");
        other.cols = 8;
        assert!(matches!(Store::open(&dir, &other), Err(StoreError::OtherJob { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_flipped_bit_a_cut_a_removed_line_and_an_emptied_log_are_refused() {
        let dir = tempdir("sealed");
        let lines = written(&dir).await;
        let log = dir.join(LOG_FILE);
        let put =
            |ls: &[String]| std::fs::write(&log, ls.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        let refused_at = |want: usize| match reopen(&dir) {
            Err(StoreError::Corrupt { line, .. }) => assert_eq!(line, want),
            other => panic!("not refused: {other:?}"),
        };
        // One changed character in the result's facts (a flipped bit that still parses).
        let mut changed = lines.clone();
        changed[2] = changed[2].replace("\"excluded\":1", "\"excluded\":3");
        assert_ne!(changed, lines);
        put(&changed);
        refused_at(3);
        // A line removed from the middle: the next line's seal fails.
        put(&[lines[0].clone(), lines[2].clone()]);
        refused_at(2);
        // Cut after a whole line: the index records three.
        put(&lines[..2]);
        refused_at(3);
        // Emptied, or gone, while the index says it held a job.
        put(&[]);
        refused_at(1);
        std::fs::remove_file(&log).unwrap();
        refused_at(1);
        // Put back whole, it opens again.
        put(&lines);
        assert_eq!(reopen(&dir).unwrap().events.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Lines written and not synced when the coordinator died: a kill leaves them in the
    /// page cache, and the next open syncs them before its index records them; a power
    /// loss can leave them damaged in any order, and as none was acknowledged the log is
    /// cut before the first damaged one (kept aside), where damage within the lines the
    /// index records is refused (the test above).
    #[tokio::test]
    async fn unsynced_lines_are_recorded_once_synced_and_cut_when_damaged() {
        let dir = tempdir("unsynced");
        let lines = written(&dir).await;
        let log = dir.join(LOG_FILE);
        {
            let (mut store, _) = Store::open(&dir, &job("3x7")).unwrap();
            store.record(&result("3x7:1fffff?2", true)).await.unwrap();
            store.record(&result("3x7:1fffff?3", true)).await.unwrap();
            assert_eq!(reach(&store.index).map(|r| r.0), Some(3));
        }
        let all: Vec<String> = std::fs::read_to_string(&log).unwrap().lines().map(str::to_string).collect();
        assert_eq!(all.len(), 5);
        // Killed with the lines in the page cache: the next open takes them and records them.
        let (store, replay) = Store::open(&dir, &job("3x7")).unwrap();
        assert_eq!((replay.events.len(), reach(&store.index).map(|r| r.0)), (5, Some(5)));
        drop(store);
        // The index back at three lines, and line 4 zeros as a power loss can leave it.
        let index = open_index(&dir.join(INDEX_DIR)).unwrap();
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&3u64.to_le_bytes());
        v[8..].copy_from_slice(&read_log(&log).unwrap().seals[2].to_le_bytes());
        index.insert(REACH, &v[..]).unwrap();
        index.flush().unwrap();
        drop(index);
        let zeros = "\0".repeat(all[3].len());
        let damaged = [&lines[..], &[zeros, all[4].clone()]].concat();
        std::fs::write(&log, damaged.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        assert_eq!(reopen(&dir).unwrap().events.len(), 3, "cut before the damaged line");
        let aside: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.display().to_string().contains("events.jsonl.cut-"))
            .collect();
        assert_eq!(aside.len(), 1, "what was cut is kept aside");
        assert!(std::fs::read_to_string(&aside[0]).unwrap().ends_with(&format!("{}\n", all[4])));
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_log_of_an_earlier_build_is_read_and_sealed_from_then_on() {
        let dir = tempdir("legacy");
        std::fs::create_dir_all(&dir).unwrap();
        let plain: Vec<String> = [Event::Job(job("3x7")), Event::Result(result("3x7:1fffff?1", true))]
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        let log = dir.join(LOG_FILE);
        // Earlier builds named the workers whose shared facts a search loaded: read, ignored.
        let with_uses = format!("{},\"uses\":[\"liar#1\"]}}", &plain[1][..plain[1].len() - 1]);
        std::fs::write(&log, format!("{}\n{with_uses}\n", plain[0])).unwrap();
        assert_eq!(reopen(&dir).unwrap().events.len(), 2);
        // The next run seals its lines, and the seal covers the old lines too.
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (mut store, _) = Store::open(&dir, &job("3x7")).unwrap();
            store.append(&Event::Start { at: 1, split_depth: Some(2) }).await.unwrap();
        });
        assert_eq!(reopen(&dir).unwrap().events.len(), 3);
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, text.replacen("\"excluded\":1", "\"excluded\":3", 1)).unwrap();
        assert!(matches!(reopen(&dir), Err(StoreError::Corrupt { line: 3, .. })), "a change to an old line shows");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_last_line_torn_inside_a_utf8_character_is_dropped() {
        let dir = tempdir("torn-utf8");
        std::fs::create_dir_all(&dir).unwrap();
        let (job_line, seal) = sealed_line(&Event::Job(job("3x7")), 0);
        let job_line = job_line.trim_end().to_string();
        let mut named = result("3x7:1fffff?0", true);
        named.worker = "café-7".into();
        let (line, _) = sealed_line(&Event::Result(named), seal);
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
    fn grants_survive_a_reopen_one_per_unit_and_worker_until_the_unit_is_done() {
        let dir = tempdir("grants");
        let q: Question = "3x7:1fffff?1".parse().unwrap();
        let r: Question = "3x7:1fffff?2".parse().unwrap();
        let g = |unit, worker: &str, attempt, first| Grant { unit, worker: worker.to_string(), attempt, first };
        {
            let (store, _) = Store::open(&dir, &job("3x7")).unwrap();
            assert!(store.grants().unwrap().is_empty());
            for grant in [g(q, "a#1", 1, true), g(q, "a#1", 3, false), g(q, "b#2", 2, true), g(r, "a#1", 1, true)] {
                store.record_grant(&grant);
            }
            store.index.flush().unwrap();
        }
        let (store, _) = Store::open(&dir, &job("3x7")).unwrap();
        let mut grants = store.grants().unwrap();
        grants.sort();
        // Each worker's last grant of each unit, and each unit's last first holder.
        let mut want = vec![
            g(q, "a#1", 3, false),
            g(q, "b#2", 2, false),
            g(r, "a#1", 1, false),
            g(q, "b#2", 2, true),
            g(r, "a#1", 1, true),
        ];
        want.sort();
        assert_eq!(grants, want);
        // A worker's grant withdrawn: the other's stays, and the unit's first holder when
        // it is another worker; the withdrawn first holder is forgotten as such.
        store.forget_grant(&q, "a#1");
        let mut left = store.grants().unwrap();
        left.sort();
        let mut want = vec![g(q, "b#2", 2, false), g(r, "a#1", 1, false), g(q, "b#2", 2, true), g(r, "a#1", 1, true)];
        want.sort();
        assert_eq!(left, want);
        store.forget_grant(&r, "a#1");
        assert!(store.grants().unwrap().iter().all(|x| x.unit != r), "nor its first holder");
        store.record_grant(&g(r, "a#1", 1, true));
        // A unit done with is forgotten, the others kept.
        store.forget_grants(&q);
        let mut left = store.grants().unwrap();
        left.sort();
        assert_eq!(left, vec![g(r, "a#1", 1, false), g(r, "a#1", 1, true)]);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_state_that_is_a_file_is_refused_and_left_alone() {
        let dir = tempdir("file");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("notes.txt");
        std::fs::write(&file, b"a user's file").unwrap();
        let err = Store::open(&file, &job("3x7")).err().expect("a file is no state");
        assert!(err.to_string().contains("a file, not a directory"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"a user's file");
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
