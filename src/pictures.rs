//! Tables and pictures: `cram table` (the value table of empty boards, as Markdown, CSV or
//! SVG) and `cram show` (a position drawn as SVG with every move's resulting nimber and the
//! winning moves highlighted).

use crate::cli::{parse_spec, EngineArgs};
use crate::solve::analyze;
use crate::Failure;
use clap::{Args, ValueEnum};
use cram_engine::{Board, Interrupted, Mode, Solver};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Output formats of `cram table`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// A Markdown table.
    Md,
    /// Comma-separated values.
    Csv,
    /// An SVG picture.
    Svg,
}

/// Arguments of `cram table`.
#[derive(Args, Debug)]
pub struct TableArgs {
    /// Row range, e.g. 1..5.
    #[arg(long, value_name = "A..B")]
    pub rows: String,
    /// Column range, e.g. 1..9.
    #[arg(long, value_name = "C..D")]
    pub cols: String,
    /// Give up on a board after this many seconds (it is then shown with what is known).
    #[arg(long, default_value_t = 10)]
    pub budget_secs: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    pub format: TableFormat,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// What the table knows of one board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// The nimber was computed.
    Nimber(u8),
    /// Not computed in the budget, but even × even: the half-turn pairing makes it 0.
    ZeroByPairing,
    /// Not computed in the budget; one side even: the first player wins (centre, then pair).
    FirstByStrategy,
    /// Nothing known within the budget.
    Unknown,
}

impl Known {
    /// Short text for a table cell.
    pub fn label(&self) -> String {
        match self {
            Known::Nimber(n) => format!("*{n}"),
            Known::ZeroByPairing => "0 (pairing)".into(),
            Known::FirstByStrategy => "N (strategy)".into(),
            Known::Unknown => "?".into(),
        }
    }
}

fn range(text: &str, what: &str) -> Result<(u32, u32), Failure> {
    let bad = || Failure::input(format!("--{what} {text:?}: expected A..B with 1 ≤ A ≤ B, e.g. 1..6"));
    let (a, b) = text.split_once("..").ok_or_else(bad)?;
    let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// Solves `board` for at most `budget`; `None` when the budget ran out.
fn solve_within(solver: &mut Solver, board: &Board, budget: Duration) -> Result<Option<u8>, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    solver.set_cancel(stop.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::spawn(move || {
        if done_rx.recv_timeout(budget).is_err() {
            stop.store(true, Ordering::Relaxed);
        }
    });
    let result = solver.solve(board, Mode::Nimber);
    let _ = done_tx.send(());
    let _ = timer.join();
    match result {
        Ok(s) => Ok(s.nimber),
        Err(Interrupted::Cancelled) => Ok(None),
        Err(e) => Err(crate::cli::search_failure(e, solver.databases())),
    }
}

/// Runs `cram table`.
pub fn run_table(a: &TableArgs) -> Result<(), Failure> {
    let (r0, r1) = range(&a.rows, "rows")?;
    let (c0, c1) = range(&a.cols, "cols")?;
    let mut solver = a.engine.solver()?;
    let budget = Duration::from_secs(a.budget_secs);
    let mut grid = Vec::new();
    for r in r0..=r1 {
        let mut row = Vec::new();
        for c in c0..=c1 {
            let known = match Board::rectangle(r, c) {
                Err(_) => Known::Unknown,
                Ok(board) => match solve_within(&mut solver, &board, budget)? {
                    Some(n) => Known::Nimber(n),
                    None if r % 2 == 0 && c % 2 == 0 => Known::ZeroByPairing,
                    None if r % 2 == 0 || c % 2 == 0 => Known::FirstByStrategy,
                    None => Known::Unknown,
                },
            };
            row.push(known);
        }
        grid.push(row);
    }
    let cols: Vec<u32> = (c0..=c1).collect();
    match a.format {
        TableFormat::Md => {
            let head: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
            println!("| rows \\ cols | {} |", head.join(" | "));
            println!("|---|{}", "---|".repeat(cols.len()));
            for (i, row) in grid.iter().enumerate() {
                let cells: Vec<String> = row.iter().map(Known::label).collect();
                println!("| {} | {} |", r0 + i as u32, cells.join(" | "));
            }
        }
        TableFormat::Csv => {
            let head: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
            println!("rows,{}", head.join(","));
            for (i, row) in grid.iter().enumerate() {
                let cells: Vec<String> = row.iter().map(Known::label).collect();
                println!("{},{}", r0 + i as u32, cells.join(","));
            }
        }
        TableFormat::Svg => print!("{}", table_svg(r0, c0, &grid)),
    }
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The value table as SVG: one square per board, coloured by what is known.
pub fn table_svg(r0: u32, c0: u32, grid: &[Vec<Known>]) -> String {
    const CELL: u32 = 56;
    let (rows, cols) = (grid.len() as u32, grid.first().map_or(0, Vec::len) as u32);
    let (width, height) = ((cols + 1) * CELL, (rows + 1) * CELL);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, "<title>Cram values of empty boards</title>");
    for c in 0..cols {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (c + 1) * CELL + CELL / 2,
            CELL / 2 + 5,
            c0 + c
        );
    }
    for (i, row) in grid.iter().enumerate() {
        let y = (i as u32 + 1) * CELL;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            CELL / 2,
            y + CELL / 2 + 5,
            r0 + i as u32
        );
        for (j, k) in row.iter().enumerate() {
            let x = (j as u32 + 1) * CELL;
            let (fill, class) = match k {
                Known::Nimber(0) => ("#cfe8cf", "second"),
                Known::Nimber(_) => ("#f3d9b1", "first"),
                Known::ZeroByPairing => ("#e3f1e3", "second-known"),
                Known::FirstByStrategy => ("#f8ead5", "first-known"),
                Known::Unknown => ("#eeeeee", "unknown"),
            };
            let _ = writeln!(
                s,
                r##"<rect class="{class}" x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{fill}" stroke="#777"/>"##
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                x + CELL / 2,
                y + CELL / 2 + 5,
                escape(&k.label().replace(" (pairing)", "").replace(" (strategy)", ""))
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Arguments of `cram show`.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The position (same forms as `cram solve`).
    pub spec: String,
    /// Write the picture to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs `cram show`.
pub fn run_show(a: &ShowArgs) -> Result<(), Failure> {
    let board = parse_spec(&a.spec)?;
    let mut solver = a.engine.solver()?;
    let moves = analyze(&mut solver, &board)?;
    let svg = position_svg(&board, &moves);
    std::fs::write(&a.svg, svg).map_err(|e| Failure::runtime(format!("{}: {e}", a.svg.display())))?;
    let wins = moves.iter().filter(|m| m.wins).count();
    println!("{}: {} moves, {wins} winning; drawn to {}", a.spec, moves.len(), a.svg.display());
    Ok(())
}

/// The position as SVG: filled cells dark, every move's resulting nimber at the middle of
/// its domino, winning moves (resulting nimber 0) drawn as green dominoes.
pub fn position_svg(board: &Board, moves: &[crate::solve::MoveRecord]) -> String {
    const CELL: u32 = 48;
    let (w, h) = (board.cols() * CELL + 2, board.rows() * CELL + 2);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, "<title>{}</title>", escape(&board.rows_string()));
    for r in 0..board.rows() {
        for c in 0..board.cols() {
            let fill = if board.is_empty_cell(r, c) { "#ffffff" } else { "#555555" };
            let class = if board.is_empty_cell(r, c) { "empty" } else { "filled" };
            let _ = writeln!(
                s,
                r##"<rect class="{class}" x="{}" y="{}" width="{CELL}" height="{CELL}" fill="{fill}" stroke="#999"/>"##,
                1 + c * CELL,
                1 + r * CELL
            );
        }
    }
    for m in moves.iter().filter(|m| m.wins) {
        let [[r1, c1], [r2, c2]] = m.cells;
        let (x, y) = (1 + (c1 - 1) * CELL + 6, 1 + (r1 - 1) * CELL + 6);
        let (dw, dh) = ((c2 - c1 + 1) * CELL - 12, (r2 - r1 + 1) * CELL - 12);
        let _ = writeln!(
            s,
            r##"<rect class="win" data-move="({r1},{c1})-({r2},{c2})" x="{x}" y="{y}" width="{dw}" height="{dh}" rx="8" fill="#7bc67b" fill-opacity="0.55" stroke="#2e7d32" stroke-width="2"/>"##
        );
    }
    for m in moves {
        let [[r1, c1], [r2, c2]] = m.cells;
        let cx = 1 + (c1 - 1) * CELL + (c2 - c1 + 1) * CELL / 2;
        let cy = 1 + (r1 - 1) * CELL + (r2 - r1 + 1) * CELL / 2 + 4;
        let class = if m.wins { "value win-value" } else { "value" };
        let _ = writeln!(s, r#"<text class="{class}" x="{cx}" y="{cy}" text-anchor="middle">*{}</text>"#, m.nimber);
    }
    s.push_str("</svg>\n");
    s
}
