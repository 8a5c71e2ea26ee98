//! `cram bench`: the performance table. Each board is solved by a fresh `cram solve`
//! process (so start-up and memory are counted per board), with and without databases,
//! and the median of the runs is reported. Each run is paired with a run of a baseline board
//! just before it, and the median ratio of the two times is reported too: on a noisy
//! machine the ratio moves much less than the seconds.

use crate::report::thousands;
use crate::Failure;
use clap::Args;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The boards of the default table.
pub const DEFAULT_BOARDS: &str = "3x11,3x13,3x15,4x9,4x11,5x6,5x7,5x8,6x7,7x7";

/// Arguments of `cram bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Comma-separated boards.
    #[arg(long, default_value = DEFAULT_BOARDS)]
    pub boards: String,
    /// Runs per board and setting; the median is reported.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Give up on a board after this many seconds (6x7 takes about 15 minutes).
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Also run with the databases in this directory.
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
    /// Transposition table budget (MiB) passed to each solve.
    #[arg(long, default_value_t = 2048)]
    pub tt_mb: u64,
    /// The board each run is compared with (solved without databases).
    #[arg(long, default_value = "4x7")]
    pub baseline: String,
}

struct Run {
    nimber: String,
    nodes: u64,
    secs: f64,
    peak_mib: u64,
}

fn run_once(board: &str, db: Option<&PathBuf>, a: &BenchArgs) -> Result<Option<Run>, Failure> {
    let exe = std::env::current_exe().map_err(Failure::runtime)?;
    let mut cmd = Command::new(exe);
    cmd.args(["solve", board, "--json", "--tt-mb", &a.tt_mb.to_string()]);
    match db {
        Some(d) => cmd.arg("--db-dir").arg(d),
        None => cmd.arg("--no-db"),
    };
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().map_err(Failure::runtime)?;
    loop {
        if child.try_wait().map_err(Failure::runtime)?.is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(a.timeout_secs) {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = start.elapsed().as_secs_f64();
    let out = child.wait_with_output().map_err(Failure::runtime)?;
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim())
        .map_err(|e| Failure::runtime(format!("bench: {board}: unreadable solver output ({e}): {line}")))?;
    Ok(Some(Run {
        nimber: v["nimber"].as_u64().map_or("?".into(), |n| format!("*{n}")),
        nodes: v["nodes"].as_u64().unwrap_or(0),
        secs,
        peak_mib: v["peak_mib"].as_u64().unwrap_or(0),
    }))
}

/// The median run of a board and the median ratio of its time to the baseline's, each
/// run paired with a baseline run just before it; `None` when a run timed out.
fn median_run(board: &str, db: Option<&PathBuf>, a: &BenchArgs) -> Result<Option<(Run, f64)>, Failure> {
    let mut runs = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..a.runs.max(1) {
        let base = run_once(&a.baseline, None, a)?
            .ok_or_else(|| Failure::runtime(format!("bench: the baseline {} timed out", a.baseline)))?;
        match run_once(board, db, a)? {
            Some(r) => {
                ratios.push(r.secs / base.secs.max(1e-9));
                runs.push(r);
            }
            None => return Ok(None),
        }
    }
    runs.sort_by(|x, y| x.secs.total_cmp(&y.secs));
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    Ok(Some((runs.swap_remove(runs.len() / 2), ratio)))
}

fn cell(r: &Option<(Run, f64)>, timeout: u64) -> String {
    match r {
        Some((r, ratio)) => {
            format!("{} | {} | {:.3} | {:.2} | {}", r.nimber, thousands(r.nodes), r.secs, ratio, r.peak_mib)
        }
        None => format!("– | – | > {timeout} | – | –"),
    }
}

/// Runs the benchmark and prints a Markdown table.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    let boards: Vec<&str> = a.boards.split(',').map(str::trim).filter(|b| !b.is_empty()).collect();
    crate::solve::parse_spec(&a.baseline)?;
    let base = format!("× {}", a.baseline);
    let mut header = format!("| board | nimber | nodes | seconds | {base} | peak MiB |");
    let mut rule = "|---|---|---:|---:|---:|---:|".to_string();
    if a.db_dir.is_some() {
        header += &format!(" nimber (db) | nodes (db) | seconds (db) | {base} (db) | peak MiB (db) |");
        rule += "---|---:|---:|---:|---:|";
    }
    println!("{header}\n{rule}");
    for b in boards {
        crate::solve::parse_spec(b)?;
        let plain = median_run(b, None, a)?;
        let mut line = format!("| {b} | {} |", cell(&plain, a.timeout_secs));
        if let Some(d) = &a.db_dir {
            let with = median_run(b, Some(d), a)?;
            line += &format!(" {} |", cell(&with, a.timeout_secs));
        }
        println!("{line}");
    }
    Ok(())
}
