//! The command-line pieces several commands share: engine and database arguments, spec
//! parsing, and the record of one solved position with its printing (text or JSON).

use crate::report::thousands;
use crate::{default_db_dir, Failure};
use clap::Args;
use cram_engine::{Board, Config, DbSet, Outcome, Solver};
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
    /// The databases to use: none with `--no-db`; every file in the directory otherwise.
    /// A missing default directory means no databases; a missing explicit one is an error.
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
}

/// Engine settings shared by the commands that search.
#[derive(Args, Clone, Debug)]
pub struct EngineArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Do not use the half-turn pairing certificate.
    #[arg(long)]
    pub no_pairing: bool,
    /// Memory budget of the transposition table, in MiB [default: 2048, a limit the table
    /// grows to; with --workers N > 1, 512: the fixed size of the table they share].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub tt_mb: Option<u64>,
}

/// The default transposition table budget of one search thread: a limit its table grows to.
pub const DEFAULT_TT_MB: u64 = 2048;

/// The default size of the table the search threads of one process share. A shared table
/// cannot grow, so its probes spread over all of it, and memory first touched is costly
/// here: 4x11 with two workers takes 8.4–10.1 s with 512 MiB, 12.3–13.1 s with 2048.
/// Large boards want `--tt-mb` set.
pub const DEFAULT_SHARED_TT_MB: u64 = 512;

impl EngineArgs {
    /// A solver configured by these settings.
    pub fn solver(&self) -> Result<Solver, Failure> {
        let config =
            Config { tt_bytes: (self.tt_mb.unwrap_or(DEFAULT_TT_MB) as usize) << 20, pairing: !self.no_pairing };
        Ok(Solver::new(&config, self.db.databases()?))
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
}
