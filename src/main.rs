//! `cram`: the command-line front end of the Cram solver.
//!
//! Subcommands, by what they are for:
//! - solving: `solve` (outcome and nimber of positions; `--workers` through the cluster
//!   path in this process), `analyze` (every move and its value), `check` (verify a
//!   certificate with the independent checker);
//! - databases: `db build | info | verify`;
//! - the cluster: `coordinator`, `worker`, `status`, `health`, `simulate` (the scheduler in
//!   virtual time);
//! - measuring: `bench` (the performance table; `--cluster`, `--scaling`);
//! - the seed papers' analyses: `octal`, `pairing`, `shapes`, `root-check`, `table`, `show`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad input (board or arguments), 3 a
//! database, a certificate or the coordinator's event log was refused, 4 the coordinator
//! refused this worker or client (protocol, build, databases or token) or disconnected it.

mod analyses;
mod bench;
mod check;
mod cli;
mod cluster;
mod dbcmd;
mod pictures;
mod report;
mod simulate;
mod solve;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exact solver for the impartial game Cram: outcome and nimber of any position.
#[derive(Parser)]
#[command(name = "cram", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Solve positions: who wins, and the nimber.
    Solve(solve::SolveArgs),
    /// Verify a certificate (from `solve --certificate`) with the independent checker.
    Check(check::CheckArgs),
    /// List every legal move of a position with the nimber after it.
    Analyze(solve::AnalyzeArgs),
    /// Build, inspect and verify endgame databases.
    #[command(subcommand)]
    Db(dbcmd::DbCommand),
    /// Print the performance table (nimber, nodes, seconds, memory per board).
    Bench(bench::BenchArgs),
    /// Values of an octal game (0.07 is 1×n Cram) with its period, proved.
    Octal(analyses::OctalArgs),
    /// Which symmetries of the position are pairing strategies, and why the others fail.
    Pairing(analyses::PairingArgs),
    /// Every connected shape of at most N cells: value, symmetries, pairings.
    Shapes(analyses::ShapesArgs),
    /// How often the half-turn pairing check fires, by depth, over every reachable position.
    RootCheck(analyses::RootCheckArgs),
    /// The value table of empty boards (Markdown, CSV or SVG).
    Table(pictures::TableArgs),
    /// Draw a position as SVG with each move's resulting nimber and the winning moves.
    Show(pictures::ShowArgs),
    /// Serve a job to workers over gRPC, merge their results, resume after restarts.
    Coordinator(cluster::CoordinatorArgs),
    /// Lease units from a coordinator and solve them.
    Worker(cluster::WorkerArgs),
    /// How a job would scale to many workers: the real scheduler in virtual time, driven
    /// by a run's event log.
    Simulate(simulate::SimulateArgs),
    /// Ask a running coordinator how its job is going.
    Status(cluster::StatusArgs),
    /// Exit 0 when a coordinator is serving (for container health checks).
    Health(cluster::HealthArgs),
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code.
    pub code: u8,
    /// What to tell the user.
    pub message: String,
}

impl Failure {
    /// Bad input from the user (exit code 2).
    pub fn input(message: impl std::fmt::Display) -> Failure {
        Failure { code: 2, message: message.to_string() }
    }
    /// A database that cannot be used (exit code 3).
    pub fn database(message: impl std::fmt::Display) -> Failure {
        Failure { code: 3, message: message.to_string() }
    }
    /// Any other runtime failure (exit code 1).
    pub fn runtime(message: impl std::fmt::Display) -> Failure {
        Failure { code: 1, message: message.to_string() }
    }
}

/// Where databases are looked for when `--db-dir` is not given.
pub fn default_db_dir() -> PathBuf {
    std::env::var_os("CRAM_DB_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("db"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Die quietly when the reader of our output goes away (`cram shapes 10 | head`), as
    // command-line tools do, instead of panicking on a broken pipe. Not in the commands that
    // talk over the network: there a peer that closes a socket would kill the process
    // (writes of several buffers raise SIGPIPE), where it must see an error and carry on.
    let networked = match &cli.command {
        Command::Coordinator(_) | Command::Worker(_) | Command::Status(_) | Command::Health(_) => true,
        Command::Solve(a) => a.cluster.workers.is_some(),
        _ => false,
    };
    #[cfg(unix)]
    if !networked {
        // SAFETY: setting a signal's disposition to the default before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Solve(a) => solve::run_solve(&a),
        Command::Check(a) => check::run_check(&a),
        Command::Analyze(a) => solve::run_analyze(&a),
        Command::Db(c) => dbcmd::run(&c),
        Command::Bench(a) => bench::run(&a),
        Command::Octal(a) => analyses::run_octal(&a),
        Command::Pairing(a) => analyses::run_pairing(&a),
        Command::Shapes(a) => analyses::run_shapes(&a),
        Command::RootCheck(a) => analyses::run_root_check(&a),
        Command::Table(a) => pictures::run_table(&a),
        Command::Show(a) => pictures::run_show(&a),
        Command::Coordinator(a) => cluster::run_coordinator(&a),
        Command::Worker(a) => cluster::run_worker(&a),
        Command::Simulate(a) => simulate::run(&a),
        Command::Status(a) => cluster::run_status(&a),
        Command::Health(a) => cluster::run_health(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("cram: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
