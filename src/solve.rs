//! `cram solve` and `cram analyze`: positions in, outcome and nimber out, as text or JSON
//! lines, one result per position in input order, with shared caches across positions.

use crate::cli::{parse_spec, print_record, search_failure, CertificateRecord, EngineArgs, SolveRecord};
use crate::cluster::{solve_with_workers, CertificateArgs, LocalClusterArgs};
use crate::report::{clear_progress, peak_rss_mib, terminal_progress};
use crate::Failure;
use clap::Args;
use cram_engine::proof::Prover;
use cram_engine::{Board, Mode, ParallelSolver, Search, Solution, Solver};
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;
use std::time::Instant;

/// Arguments of `cram solve`.
#[derive(Args, Debug)]
pub struct SolveArgs {
    /// Positions: RxC (empty rectangle), rows like ..#/... ('.' empty, '#' filled, rows
    /// joined by '/'), or @FILE (one row per line).
    #[arg(value_name = "SPEC", required_unless_present = "batch")]
    pub specs: Vec<String>,
    /// Read specs from FILE ('-' for standard input), one per line; blank lines and lines
    /// starting with ';' are skipped.
    #[arg(long, value_name = "FILE")]
    pub batch: Option<String>,
    /// Print one JSON object per position.
    #[arg(long)]
    pub json: bool,
    /// Decide only who wins; the nimber is printed only when it is 0.
    #[arg(long)]
    pub outcome_only: bool,
    /// Search threads sharing one table [default: every core for positions of 32 cells
    /// and more, else 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024), conflicts_with = "workers")]
    pub threads: Option<u64>,
    /// How nodes decide the values asked about: `values` ("is it n?", the default: fewest
    /// nodes) or `sets` (Beling and Rogalski's set queries, kept to compare; engine path).
    #[arg(long, value_enum, default_value_t = SearchKind::Values, conflicts_with = "workers")]
    pub search: SearchKind,
    #[command(flatten)]
    pub certificate: CertificateArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub cluster: LocalClusterArgs,
}

/// The searches `--search` chooses between.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum SearchKind {
    /// "Is the value n?", then each value below n (the default).
    Values,
    /// Set queries: each option asked once for its value among the remaining candidates.
    Sets,
}

impl From<SearchKind> for Search {
    fn from(k: SearchKind) -> Search {
        match k {
            SearchKind::Values => Search::Values,
            SearchKind::Sets => Search::Sets,
        }
    }
}

/// Builds a certificate of `board` (just solved by `solver`) and writes it to `path`.
fn certify(
    solver: &mut ParallelSolver,
    spec: &str,
    board: &Board,
    solution: &Solution,
    path: &Path,
    small: u32,
) -> Result<CertificateRecord, Failure> {
    let start = Instant::now();
    if let Some(p) = terminal_progress(format!("{spec} certificate")) {
        solver.set_progress(p);
    }
    let threads = solver.threads();
    let mut prover = Prover::new(solver.lead(), small);
    prover.set_threads(threads);
    let proved = prover.prove(board, solution);
    drop(prover);
    clear_progress();
    let cert = proved.map_err(|e| search_failure(e, solver.databases()))?;
    let bytes = cert.to_bytes();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| Failure::runtime(format!("--certificate {}: {e}", path.display())))?;
    Ok(CertificateRecord {
        file: path.display().to_string(),
        facts: cert.facts.len() as u64,
        bytes: bytes.len() as u64,
        millis: start.elapsed().as_millis() as u64,
    })
}

/// Solves one board with `solver`, showing progress on a terminal.
pub fn solve_one(solver: &mut ParallelSolver, spec: &str, board: &Board, mode: Mode) -> Result<SolveRecord, Failure> {
    if let Some(p) = terminal_progress(spec.to_string()) {
        solver.set_progress(p);
    }
    let before = solver.nodes();
    let start = Instant::now();
    let solution = solver.solve(board, mode).map_err(|e| search_failure(e, solver.databases()));
    clear_progress();
    let solution = solution?;
    Ok(SolveRecord {
        spec: spec.to_string(),
        rows: board.rows(),
        cols: board.cols(),
        empty: board.empty_count(),
        outcome: solution.outcome,
        nimber: solution.nimber,
        nodes: solver.nodes() - before,
        millis: start.elapsed().as_millis() as u64,
        peak_mib: peak_rss_mib(),
        units: None,
        facts_shared: None,
        check_nodes: None,
        certificate: None,
        owners: None,
    })
}

fn batch_specs(source: &str) -> Result<Vec<String>, Failure> {
    let reader: Box<dyn BufRead> = if source == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(source).map_err(|e| Failure::input(format!("--batch {source}: {e}")))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut out = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(|e| Failure::input(format!("--batch {source}: {e}")))?;
        let t = line.trim();
        if !t.is_empty() && !t.starts_with(';') {
            out.push(t.to_string());
        }
    }
    Ok(out)
}

/// Runs `cram solve`. A spec that cannot be read is reported in its place (as an
/// `{"spec", "error"}` object with `--json`) and the exit code is 2 at the end.
pub fn run_solve(args: &SolveArgs) -> Result<(), Failure> {
    let mut specs = args.specs.clone();
    if let Some(b) = &args.batch {
        specs.extend(batch_specs(b)?);
    }
    if args.cluster.state.is_some() && specs.len() != 1 {
        return Err(Failure::input("--state holds one job: give exactly one spec"));
    }
    if args.certificate.certificate.is_some() && specs.len() != 1 {
        return Err(Failure::input("--certificate proves one position: give exactly one spec"));
    }
    let split = &args.cluster.split;
    if args.cluster.workers.is_none() && (split.split_depth.is_some() || split.target_units.is_some()) {
        return Err(Failure::input("--split-depth and --target-units split a cluster solve: add --workers"));
    }
    // The engine path's search (the cluster path sets up its own), sized for the largest
    // position.
    let largest = specs.iter().filter_map(|s| parse_spec(s).ok()).map(|b| b.empty_count()).max().unwrap_or(0);
    let mut solver = match args.cluster.workers {
        Some(_) => None,
        None => Some(args.engine.search(largest, args.threads)?),
    };
    if let Some(s) = solver.as_mut() {
        s.set_search(args.search.into());
    }
    let mode = if args.outcome_only { Mode::Outcome } else { Mode::Nimber };
    let mut bad = None;
    for spec in &specs {
        match parse_spec(spec) {
            Ok(board) if args.cluster.workers.is_some() => {
                let record = solve_with_workers(spec, &board, mode, &args.engine, &args.cluster, &args.certificate)?;
                print_record(&record, args.json);
            }
            Ok(board) => {
                let solver = solver.as_mut().expect("built for the engine path");
                let mut record = solve_one(solver, spec, &board, mode)?;
                if let Some(path) = &args.certificate.certificate {
                    let solution = Solution { outcome: record.outcome, nimber: record.nimber };
                    let small = args.certificate.certificate_small;
                    record.certificate = Some(certify(solver, spec, &board, &solution, path, small)?);
                }
                print_record(&record, args.json)
            }
            Err(f) => {
                if args.json {
                    println!("{}", serde_json::json!({"spec": spec, "error": f.message}));
                } else if specs.len() > 1 {
                    eprintln!("cram: error: {}", f.message);
                }
                bad = Some(f);
            }
        }
    }
    match bad {
        Some(f) if specs.len() == 1 => Err(f),
        Some(_) => Err(Failure::input("some specs could not be read (see above)")),
        None => Ok(()),
    }
}

/// Arguments of `cram analyze`.
#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// The position (same forms as `cram solve`).
    #[arg(value_name = "SPEC")]
    pub spec: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// One move of `cram analyze`.
#[derive(Serialize, Debug)]
pub struct MoveRecord {
    /// The two cells, as 1-based (row, column) pairs.
    pub cells: [[u32; 2]; 2],
    /// The nimber of the position after the move.
    pub nimber: u8,
    /// True when the move wins (leaves a position of nimber 0).
    pub wins: bool,
}

/// Every legal move of `board` with the nimber after it.
pub fn analyze(solver: &mut Solver, board: &Board) -> Result<Vec<MoveRecord>, Failure> {
    let cols = board.cols();
    let mut out = Vec::new();
    for m in board.moves() {
        let a = m.trailing_zeros();
        let b = 127 - m.leading_zeros();
        let after = board.with_filled(m);
        let nimber = solver
            .solve(&after, Mode::Nimber)
            .map_err(|e| search_failure(e, solver.databases()))?
            .nimber
            .expect("nimber mode");
        out.push(MoveRecord {
            cells: [[a / cols + 1, a % cols + 1], [b / cols + 1, b % cols + 1]],
            nimber,
            wins: nimber == 0,
        });
    }
    Ok(out)
}

/// Runs `cram analyze`.
pub fn run_analyze(args: &AnalyzeArgs) -> Result<(), Failure> {
    let board = parse_spec(&args.spec)?;
    let mut solver = args.engine.solver()?;
    let moves = analyze(&mut solver, &board)?;
    let mut seen = 0u64;
    for m in &moves {
        seen |= 1 << m.nimber.min(63);
    }
    let nimber = (!seen).trailing_zeros();
    if args.json {
        let v = serde_json::json!({"spec": args.spec, "nimber": nimber, "moves": moves});
        println!("{v}");
        return Ok(());
    }
    let wins = moves.iter().filter(|m| m.wins).count();
    println!("{}: nimber *{nimber}, {} moves, {wins} winning", args.spec, moves.len());
    for m in &moves {
        let [[r1, c1], [r2, c2]] = m.cells;
        let mark = if m.wins { "  wins" } else { "" };
        println!("  ({r1},{c1})-({r2},{c2})  -> *{}{mark}", m.nimber);
    }
    Ok(())
}
