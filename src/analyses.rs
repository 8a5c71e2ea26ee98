//! The seed papers' analyses as commands: `cram octal` (octal games and their periods),
//! `cram pairing` (which symmetries are pairing strategies, and an audit of the strategy)
//! `cram shapes` (the catalogue of connected shapes with values and pairings) and
//! `cram root-check` (how often the pairing check fires, by depth, over a whole game).

use crate::cli::parse_spec;
use crate::Failure;
use clap::Args;
use cram_engine::octal::{proved_period, OctalGame};
use cram_engine::pairing::{audit, check, depth_profile, Symmetry, Verdict};
use cram_engine::shapes::{shapes, Equivalence};
use cram_engine::{Config, DbSet, Mode, Solver};
use serde_json::json;
use std::sync::Arc;

/// Arguments of `cram octal`.
#[derive(Args, Debug)]
pub struct OctalArgs {
    /// The game's code, e.g. 0.07 (Dawson's Kayles = 1×n Cram), 0.77 (Kayles), 0.137.
    pub code: String,
    /// Compute heaps 0..=N.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub max: usize,
    /// Print JSON: {"code", "values", "period", "preperiod"} (period null when not proved).
    #[arg(long)]
    pub json: bool,
}

/// Runs `cram octal`.
pub fn run_octal(a: &OctalArgs) -> Result<(), Failure> {
    let game = OctalGame::parse(&a.code).map_err(Failure::input)?;
    if a.max > 1_000_000 {
        return Err(Failure::input("--max: at most 1000000 heaps"));
    }
    let values = game.values(a.max);
    let period = proved_period(&values, game.max_take());
    if a.json {
        let v = serde_json::json!({
            "code": game.to_string(),
            "values": values,
            "period": period.map(|p| p.period),
            "preperiod": period.map(|p| p.preperiod),
        });
        println!("{v}");
        return Ok(());
    }
    match period {
        Some(p) => println!(
            "{game}: period {} from heap {} (proved: the values repeat over heaps {}..{} and the \
             sufficient condition needs up to heap {})",
            p.period,
            p.preperiod,
            p.preperiod,
            a.max,
            2 * p.preperiod + 2 * p.period + game.max_take() - 1
        ),
        None => println!("{game}: no period proved within heaps 0..{}", a.max),
    }
    for (i, chunk) in values.chunks(20).enumerate() {
        let line: Vec<String> = chunk.iter().map(u32::to_string).collect();
        println!("{:>6}: {}", i * 20, line.join(" "));
    }
    Ok(())
}

/// Arguments of `cram pairing`.
#[derive(Args, Debug)]
pub struct PairingArgs {
    /// The position (same forms as `cram solve`).
    pub spec: String,
    /// Also walk every position each symmetry's strategy reaches, against every reply.
    #[arg(long)]
    pub audit: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn cell_json((r, c): (u32, u32)) -> serde_json::Value {
    json!([r + 1, c + 1])
}

/// The cells a verdict names, 1-based.
fn verdict_cells(v: &Verdict) -> Vec<(u32, u32)> {
    match *v {
        Verdict::FixedCell(a) => vec![a],
        Verdict::SelfMappedDomino(a, b) => vec![a, b],
        _ => vec![],
    }
}

/// Runs `cram pairing`.
pub fn run_pairing(a: &PairingArgs) -> Result<(), Failure> {
    let board = parse_spec(&a.spec)?;
    let mut rows = Vec::new();
    for sym in Symmetry::ALL {
        let verdict = check(&board, sym);
        let walk = if a.audit && verdict != Verdict::NotASymmetry { audit(&board, sym) } else { None };
        rows.push((sym, verdict, walk));
    }
    if a.json {
        let syms: Vec<serde_json::Value> = rows
            .iter()
            .map(|(sym, v, walk)| {
                let mut o = json!({
                    "name": sym.name(),
                    "pairing": *v == Verdict::Pairing,
                    "failure": v.failure(),
                    "cells": verdict_cells(v).into_iter().map(cell_json).collect::<Vec<_>>(),
                });
                if let Some(w) = walk {
                    o["audit"] = json!({
                        "positions": w.positions,
                        "failure": w.failure.as_ref().map(|(pos, m)| json!({
                            "position": pos.rows_string(),
                            "move": [cell_json(m[0]), cell_json(m[1])],
                        })),
                    });
                }
                o
            })
            .collect();
        println!("{}", json!({"spec": a.spec, "symmetries": syms}));
        return Ok(());
    }
    let maps = rows.iter().filter(|(_, v, _)| *v != Verdict::NotASymmetry).count();
    println!("{}: {maps} of 7 symmetries map the empty cells onto themselves", a.spec);
    for (sym, v, walk) in &rows {
        let cells: Vec<String> = verdict_cells(v).iter().map(|(r, c)| format!("({},{})", r + 1, c + 1)).collect();
        let what = match v.failure() {
            None => "pairing strategy: the second player wins".to_string(),
            Some(f) => format!("{f} {}", cells.join("-")),
        };
        println!("  {:<22}{}", sym.name(), what.trim_end());
        if let Some(w) = walk {
            match &w.failure {
                None => println!("  {:<22}audit: {} positions, every reply legal", "", w.positions),
                Some((pos, m)) => println!(
                    "  {:<22}audit: fails after {} positions, at {} when the opponent plays ({},{})-({},{})",
                    "",
                    w.positions,
                    pos.rows_string(),
                    m[0].0 + 1,
                    m[0].1 + 1,
                    m[1].0 + 1,
                    m[1].1 + 1
                ),
            }
        }
    }
    Ok(())
}

/// Which shapes `cram shapes` counts as one.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum UpTo {
    /// All 8 symmetries of the square: free polyominoes.
    Free,
    /// Top-bottom and left-right flips only: the catalogue of seed 003.
    Flips,
}

/// Arguments of `cram shapes`.
#[derive(Args, Debug)]
pub struct ShapesArgs {
    /// Largest number of cells (at most 12).
    #[arg(value_name = "N")]
    pub max: u32,
    /// Which shapes count as the same.
    #[arg(long, value_enum, default_value = "free")]
    pub up_to: UpTo,
    /// Print JSON: every shape, then counts by size.
    #[arg(long)]
    pub json: bool,
}

/// Counts of one size in `cram shapes`.
#[derive(serde::Serialize, Default, Clone)]
struct SizeRow {
    cells: u32,
    shapes: u64,
    second_player_wins: u64,
    with_involution: u64,
    paired: u64,
}

/// Runs `cram shapes`.
pub fn run_shapes(a: &ShapesArgs) -> Result<(), Failure> {
    if a.max == 0 || a.max > 12 {
        return Err(Failure::input("N must be 1 to 12"));
    }
    let eq = match a.up_to {
        UpTo::Free => Equivalence::Free,
        UpTo::Flips => Equivalence::Flips,
    };
    let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    let mut rows: Vec<SizeRow> = (1..=a.max).map(|n| SizeRow { cells: n, ..SizeRow::default() }).collect();
    let mut listed = Vec::new();
    let mut paired_shapes = Vec::new();
    for b in shapes(a.max, eq) {
        let nimber = solver.solve(&b, Mode::Nimber).map_err(Failure::runtime)?.nimber.expect("nimber mode");
        let verdicts: Vec<(Symmetry, Verdict)> = Symmetry::ALL.iter().map(|&s| (s, check(&b, s))).collect();
        let syms: Vec<&str> =
            verdicts.iter().filter(|(_, v)| *v != Verdict::NotASymmetry).map(|(s, _)| s.name()).collect();
        let involution = verdicts.iter().any(|(s, v)| {
            *v != Verdict::NotASymmetry && !matches!(s, Symmetry::QuarterTurnCw | Symmetry::QuarterTurnCcw)
        });
        let pairings: Vec<&str> =
            verdicts.iter().filter(|(_, v)| *v == Verdict::Pairing).map(|(s, _)| s.name()).collect();
        let row = &mut rows[b.empty_count() as usize - 1];
        row.shapes += 1;
        row.second_player_wins += (nimber == 0) as u64;
        row.with_involution += involution as u64;
        row.paired += !pairings.is_empty() as u64;
        if !pairings.is_empty() {
            paired_shapes.push((b.rows_string(), pairings.join(", ")));
        }
        if a.json {
            listed.push(json!({"cells": b.empty_count(), "shape": b.rows_string(), "nimber": nimber,
                "symmetries": syms, "pairings": pairings}));
        }
    }
    if a.json {
        println!("{}", json!({"up_to": format!("{:?}", a.up_to).to_lowercase(), "shapes": listed, "by_size": rows}));
        return Ok(());
    }
    println!("| cells | shapes | second-player wins | with an involution | paired |");
    println!("|---:|---:|---:|---:|---:|");
    let mut total = SizeRow::default();
    for r in &rows {
        println!("| {} | {} | {} | {} | {} |", r.cells, r.shapes, r.second_player_wins, r.with_involution, r.paired);
        total.shapes += r.shapes;
        total.second_player_wins += r.second_player_wins;
        total.with_involution += r.with_involution;
        total.paired += r.paired;
    }
    println!(
        "| all | {} | {} | {} | {} |",
        total.shapes, total.second_player_wins, total.with_involution, total.paired
    );
    println!("\npaired shapes:");
    for (shape, by) in paired_shapes {
        println!("  {shape}  ({by})");
    }
    Ok(())
}

/// Arguments of `cram root-check`.
#[derive(Args, Debug)]
pub struct RootCheckArgs {
    /// The starting position (same forms as `cram solve`).
    pub spec: String,
    /// Refuse positions with more reachable positions than this.
    #[arg(long, default_value_t = 20_000_000)]
    pub max_positions: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cram root-check`.
pub fn run_root_check(a: &RootCheckArgs) -> Result<(), Failure> {
    let board = parse_spec(&a.spec)?;
    let mut solver = Solver::new(&Config::default(), Arc::new(DbSet::default()));
    let rows = depth_profile(&board, &mut solver, a.max_positions).map_err(Failure::runtime)?.ok_or_else(|| {
        Failure::input(format!("{}: more than {} reachable positions (see --max-positions)", a.spec, a.max_positions))
    })?;
    let pct = |x: u64, of: u64| if of == 0 { 0.0 } else { 100.0 * x as f64 / of as f64 };
    if a.json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({"depth": r.depth, "positions": r.positions, "wins": r.wins, "fires": r.fires,
                "unsound_fires": r.unsound_fires, "unsound_wrong": r.unsound_wrong})
            })
            .collect();
        println!("{}", json!({"spec": a.spec, "depths": rows}));
        return Ok(());
    }
    println!("{}: the half-turn check one move away, over every reachable position", a.spec);
    println!("| depth | positions | wins | sound check fires | % of wins | unsound fires | unsound wrong |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.0} | {} | {} |",
            r.depth,
            r.positions,
            r.wins,
            r.fires,
            pct(r.fires, r.wins),
            r.unsound_fires,
            r.unsound_wrong
        );
    }
    Ok(())
}
