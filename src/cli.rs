//! The command-line pieces several commands share: engine and database arguments, spec
//! parsing, and the record of one solved position with its printing (text or JSON).

use crate::report::thousands;
use crate::{default_db_dir, Failure};
use clap::Args;
use cram_engine::solver::SharedTables;
use cram_engine::{Board, Config, DbSet, Interrupted, Outcome, ParallelSolver, Solver};
use cram_worker::owners_model::OwnersReport;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Which endgame databases to load.
#[derive(Args, Clone, Debug)]
pub struct DbArgs {
    /// Do not load endgame databases.
    #[arg(long)]
    pub no_db: bool,
    /// Directory of endgame databases (*.cramdb) [default: $CRAM_DB_DIR, else ./db].
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
}

impl DbArgs {
    /// The databases to use: none with `--no-db`; every file in the directory otherwise
    /// (headers checked; their entries are checked as they are first read). A missing
    /// default directory means no databases; a missing explicit one is an error.
    pub fn databases(&self) -> Result<Arc<DbSet>, Failure> {
        if self.no_db {
            return Ok(Arc::new(DbSet::default()));
        }
        let dir = self.db_dir.clone().unwrap_or_else(default_db_dir);
        if self.db_dir.is_none() && !dir.is_dir() {
            return Ok(Arc::new(DbSet::default()));
        }
        DbSet::load_dir(&dir).map(Arc::new).map_err(Failure::database)
    }

    /// The databases, every entry checked against its checksum now: for the coordinator and
    /// workers, which run for hours and should refuse damage at start, not midway.
    pub fn checked_databases(&self) -> Result<Arc<DbSet>, Failure> {
        let dbs = self.databases()?;
        dbs.check_all().map_err(Failure::database)?;
        Ok(dbs)
    }
}

/// Engine settings shared by the commands that search.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Do not use the half-turn pairing certificate.
    #[arg(long)]
    pub no_pairing: bool,
    /// Memory budget of the transposition table, in MiB: it starts at 4 MiB and doubles
    /// while it is half full, up to this [default for `solve`: 3/4 of the memory available,
    /// rounded down to a power of two, printed for positions of 45 cells and more; for
    /// workers and `analyze`: 2048].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub tt_mb: Option<u64>,
}

/// The default transposition table budget of a worker's or `analyze`'s search: a limit the
/// table grows to.
pub const DEFAULT_TT_MB: u64 = 2048;

/// Positions of at least this many empty cells are searched on every core by default:
/// below it a solve takes a few hundredths of a second and threads gain nothing measurable
/// (docs/performance.md).
pub const PARALLEL_MIN_CELLS: u32 = 32;

/// Positions of at least this many empty cells have the table's budget (a share of the
/// memory available) printed at start: their solves may grow the table to gigabytes.
pub const LARGE_CELLS: u32 = 45;

impl EngineArgs {
    /// A solver configured by these settings, one thread.
    pub fn solver(&self) -> Result<Solver, Failure> {
        Ok(Solver::new(&self.config(DEFAULT_TT_MB), self.db.databases()?))
    }

    fn config(&self, default_mb: u64) -> Config {
        Config { tt_bytes: (self.tt_mb.unwrap_or(default_mb) as usize) << 20, pairing: !self.no_pairing }
    }

    /// The search for positions of up to `cells` empty cells on `threads` threads (default:
    /// every core from [`PARALLEL_MIN_CELLS`] cells), its table as the settings and
    /// defaults say (its size is reported on stderr when it is a share of the memory
    /// available).
    pub fn search(&self, cells: u32, threads: Option<u64>) -> Result<ParallelSolver, Failure> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = match threads {
            Some(n) => n as usize,
            None if cells >= PARALLEL_MIN_CELLS => cores,
            None => 1,
        };
        let dbs = self.db.databases()?;
        let mb = match self.tt_mb {
            Some(mb) => mb,
            None => {
                let (mb, available) = large_table_mb();
                if cells >= LARGE_CELLS {
                    eprintln!(
                        "cram: transposition table of up to {mb} MiB (3/4 of the {available} MiB available, a power of two; --tt-mb sets it)"
                    );
                }
                mb
            }
        };
        let config = self.config(mb);
        let tables = SharedTables::new(config.tt_bytes);
        Ok(ParallelSolver::new(threads, &config, dbs, Some(tables)))
    }
}

/// The default table budget of `cram solve`, in MiB, and the memory available (MiB): the
/// largest power of two within 3/4 of what the system reports available (at least 1 GiB).
/// The table grows to it only if the solve needs it.
pub fn large_table_mb() -> (u64, u64) {
    let available = crate::report::available_mib().unwrap_or(4096);
    let share = (available * 3 / 4).max(1024);
    (1 << (63 - share.leading_zeros()), available)
}

/// The failure a stopped search reports: a damaged database (exit code 3, naming the
/// file and the bytes), anything else a runtime failure.
pub fn search_failure(e: Interrupted, dbs: &DbSet) -> Failure {
    match (e, dbs.damage()) {
        (Interrupted::Database, Some(damage)) => Failure::database(damage),
        (e, _) => Failure::runtime(e),
    }
}

/// One solved position, as printed by `--json`.
#[derive(Serialize, Debug)]
pub struct SolveRecord {
    /// The spec as given.
    pub spec: String,
    /// Board rows.
    pub rows: u32,
    /// Board columns.
    pub cols: u32,
    /// Empty cells.
    pub empty: u32,
    /// "first" when the player to move wins, else "second".
    pub outcome: Outcome,
    /// The nimber (null only for an outcome-only first-player win).
    pub nimber: Option<u8>,
    /// Search nodes.
    pub nodes: u64,
    /// Wall time in milliseconds.
    pub millis: u64,
    /// Peak resident memory of the process so far, in MiB.
    pub peak_mib: u64,
    /// Work units recorded (cluster path only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<u64>,
    /// Facts workers shared with each other (cluster path only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts_shared: Option<u64>,
    /// Search nodes of the coordinator's own verifications (cluster path only, when any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_nodes: Option<u64>,
    /// The certificate written, with `--certificate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateRecord>,
    /// The messages of the model of knowledge with owners, with `--model-owners`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owners: Option<OwnersReport>,
}

/// A certificate written by a solve.
#[derive(Serialize, Debug, Clone)]
pub struct CertificateRecord {
    /// Where it was written.
    pub file: String,
    /// Facts it holds.
    pub facts: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// Time to build and write it, in milliseconds.
    pub millis: u64,
}

/// Reads a spec: `@FILE` or the text forms [`Board::parse`] accepts.
pub fn parse_spec(spec: &str) -> Result<Board, Failure> {
    if let Some(path) = spec.strip_prefix('@') {
        let text = std::fs::read_to_string(path).map_err(|e| Failure::input(format!("{spec}: {e}")))?;
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let end = lines.iter().rposition(|l| !l.is_empty()).map_or(0, |i| i + 1);
        return Board::from_rows(lines[..end].iter().copied()).map_err(|e| Failure::input(format!("{spec}: {e}")));
    }
    Board::parse(spec).map_err(|e| Failure::input(format!("{spec:?}: {e}")))
}

/// Prints one result line (text or JSON).
pub fn print_record(r: &SolveRecord, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).expect("records serialise"));
        return;
    }
    let who = r.outcome.describe();
    let value = match r.nimber {
        Some(n) => format!("nimber *{n}"),
        None => "nimber not computed".to_string(),
    };
    println!(
        "{}: {who}, {value} ({} nodes, {:.3} s, peak {} MiB)",
        r.spec,
        thousands(r.nodes),
        r.millis as f64 / 1000.0,
        r.peak_mib
    );
    if let Some(c) = &r.certificate {
        println!(
            "  certificate {}: {} facts, {} bytes, written in {:.3} s",
            c.file,
            thousands(c.facts),
            thousands(c.bytes),
            c.millis as f64 / 1000.0
        );
    }
    if let Some(o) = &r.owners {
        println!(
            "  owners model: {} asks ({} answered, {} exact, {} used), {} facts told, {} regions held",
            thousands(o.asks),
            thousands(o.answered),
            thousands(o.exact),
            thousands(o.used),
            thousands(o.tells),
            thousands(o.keys)
        );
    }
}
