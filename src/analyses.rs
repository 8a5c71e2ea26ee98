//! The seed papers' analyses as commands: `cram octal` (octal games and their periods) and
//! `cram pairing` (which symmetries are pairing strategies, and an audit of the strategy).

use crate::solve::parse_spec;
use crate::Failure;
use clap::Args;
use cram_engine::octal::{proved_period, OctalGame};
use cram_engine::pairing::{audit, check, Symmetry, Verdict};
use serde_json::json;

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
