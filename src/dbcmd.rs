//! `cram db`: build endgame databases, show their headers, and verify them (checksum plus
//! a sample of entries re-solved by search).

use crate::report::thousands;
use crate::Failure;
use clap::{Args, Subcommand};
use cram_engine::{Board, Config, Database, DbSet, Mode, Solver};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// `cram db` subcommands.
#[derive(Subcommand, Debug)]
pub enum DbCommand {
    /// Compute the database of every subset of an RxC rectangle (at most 32 cells).
    Build(BuildArgs),
    /// Show a database's header (the whole file is checked first).
    Info {
        /// The database file.
        file: PathBuf,
    },
    /// Check a database: header, checksum, and a sample of entries re-solved by search.
    Verify {
        /// The database file.
        file: PathBuf,
        /// Number of random entries to re-solve.
        #[arg(long, default_value_t = 2000)]
        samples: u32,
    },
}

/// Arguments of `cram db build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Rectangle sizes, e.g. 4x7 (several, or a comma-separated list: 4x7,3x9,5x5). A
    /// size whose file is already in the directory and checks out is kept, so the command
    /// can run at every start of a cluster (a damaged file is built again).
    #[arg(value_name = "RxC", required = true)]
    pub sizes: Vec<String>,
    /// Output directory (created if missing) [default: $CRAM_DB_DIR, else ./db].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Threads to use [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The file name a database of an RxC rectangle is saved under.
pub fn db_file_name(rows: u32, cols: u32) -> String {
    format!("cram-{rows}x{cols}.cramdb")
}

/// Runs a `cram db` subcommand.
pub fn run(cmd: &DbCommand) -> Result<(), Failure> {
    match cmd {
        DbCommand::Build(a) => build(a),
        DbCommand::Info { file } => {
            let db = load_checked(file)?;
            println!("{}", file.display());
            print_header(&db);
            Ok(())
        }
        DbCommand::Verify { file, samples } => verify(file, *samples),
    }
}

fn print_header(db: &Database) {
    println!("  rectangle        {}x{}", db.rows(), db.cols());
    println!("  entries          {}", thousands(db.entries()));
    println!("  bits per entry   {}", db.bits_per_entry());
    println!("  largest nimber   {}", db.max_value());
    println!("  checksum (xxh3)  {:016x}", db.checksum());
    println!("  payload          {} bytes", thousands(db.payload_bytes() as u64));
}

fn build(a: &BuildArgs) -> Result<(), Failure> {
    let mut boards = Vec::new();
    for size in a.sizes.iter().flat_map(|s| s.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        let board = Board::parse(size).map_err(|e| Failure::input(format!("{size:?}: {e}")))?;
        if !board.is_full_rectangle() {
            return Err(Failure::input(format!("{size:?}: give a rectangle size such as 4x7")));
        }
        boards.push(board);
    }
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let dir = a.out.clone().unwrap_or_else(crate::default_db_dir);
    std::fs::create_dir_all(&dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    for board in boards {
        let path = dir.join(db_file_name(board.rows(), board.cols()));
        if path.exists() {
            match load_checked(&path) {
                Ok(db) if (db.rows(), db.cols()) == (board.rows(), board.cols()) => {
                    println!("kept {} (it checks out)", path.display());
                    continue;
                }
                Ok(_) => eprintln!("cram: {}: holds another rectangle; building it again", path.display()),
                Err(f) => eprintln!("cram: {}; building it again", f.message),
            }
        }
        let start = Instant::now();
        let db = Database::build(board.rows(), board.cols(), threads).map_err(Failure::input)?;
        let built = start.elapsed();
        db.save(&path).map_err(Failure::runtime)?;
        println!(
            "built {} in {:.2} s with {threads} threads, saved in {:.2} s",
            path.display(),
            built.as_secs_f64(),
            (start.elapsed() - built).as_secs_f64()
        );
        print_header(&db);
    }
    Ok(())
}

/// A database file loaded and every entry checked against its checksum.
fn load_checked(file: &std::path::Path) -> Result<Database, Failure> {
    let db = Database::load(file).map_err(Failure::database)?;
    db.check_all().map_err(Failure::database)?;
    Ok(db)
}

fn verify(file: &std::path::Path, samples: u32) -> Result<(), Failure> {
    let db = load_checked(file)?;
    println!("{}: header and checksum ok", file.display());
    let (rows, cols) = (db.rows(), db.cols());
    let mut solver = Solver::new(&Config { tt_bytes: 256 << 20, pairing: true }, Arc::new(DbSet::default()));
    let mut seed = db.checksum() | 1;
    let cells = rows * cols;
    for i in 0..samples {
        // Sample masks of every density: about 3/8, 1/2 and 3/4 of the cells empty in turn.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let full = (1u64 << cells) - 1;
        let mask = match i % 3 {
            _ if i == 0 => full,
            0 => seed & (seed.rotate_left(23) | seed.rotate_left(41)),
            1 => seed,
            _ => seed | seed.rotate_left(29),
        } & full;
        let board = Board::from_mask(rows, cols, mask as u128).map_err(Failure::runtime)?;
        let searched = solver.solve(&board, Mode::Nimber).map_err(Failure::runtime)?.nimber.expect("nimber mode");
        let stored = db.value(mask);
        if stored != searched {
            return Err(Failure::database(format!(
                "{}: refused: entry {mask:#x} ({}) holds *{stored}, search gives *{searched}",
                file.display(),
                board.rows_string()
            )));
        }
    }
    println!("{}: {samples} sampled entries agree with search", file.display());
    Ok(())
}
