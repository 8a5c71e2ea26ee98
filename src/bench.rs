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
    /// Transposition table budget (MiB) passed to each solve [default: each solve's own].
    #[arg(long)]
    pub tt_mb: Option<u64>,
    /// The board each run is compared with (solved without databases).
    #[arg(long, default_value = "4x7")]
    pub baseline: String,
    /// Compare the cluster path instead: the engine, one in-process worker and two, per
    /// board (each run a fresh process, the three interleaved), and the cost of one unit.
    #[arg(long)]
    pub cluster: bool,
}

struct Run {
    nimber: String,
    nodes: u64,
    secs: f64,
    peak_mib: u64,
    units: u64,
}

fn run_once(board: &str, db: Option<&PathBuf>, a: &BenchArgs) -> Result<Option<Run>, Failure> {
    run_with(board, db, a, &[])
}

/// One fresh `cram solve` of `board` with `extra` arguments.
fn run_with(board: &str, db: Option<&PathBuf>, a: &BenchArgs, extra: &[&str]) -> Result<Option<Run>, Failure> {
    let exe = std::env::current_exe().map_err(Failure::runtime)?;
    let mut cmd = Command::new(exe);
    cmd.args(["solve", board, "--json"]).args(extra);
    if let Some(mb) = a.tt_mb {
        cmd.args(["--tt-mb", &mb.to_string()]);
    }
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
        units: v["units"].as_u64().unwrap_or(0),
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

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The cluster table: per board, medians of the engine, one worker and two workers, and
/// the median per-round ratios; then the cost of one unit from a job of tiny units.
fn run_cluster(boards: &[&str], a: &BenchArgs) -> Result<(), Failure> {
    println!("| board | nimber | engine s | 1 worker s | overhead | 2 workers s | speed-up | units | nodes 1w / engine | nodes 2w / 1w |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let timeout = || Failure::runtime("bench: a run timed out");
    for b in boards {
        crate::cli::parse_spec(b)?;
        let (mut e, mut w1, mut w2, mut over, mut up) = (vec![], vec![], vec![], vec![], vec![]);
        let mut last = None;
        for _ in 0..a.runs.max(1) {
            let re = run_with(b, a.db_dir.as_ref(), a, &[])?.ok_or_else(timeout)?;
            let r1 = run_with(b, a.db_dir.as_ref(), a, &["--workers", "1"])?.ok_or_else(timeout)?;
            let r2 = run_with(b, a.db_dir.as_ref(), a, &["--workers", "2"])?.ok_or_else(timeout)?;
            over.push(r1.secs / re.secs - 1.0);
            up.push(r1.secs / r2.secs);
            e.push(re.secs);
            w1.push(r1.secs);
            w2.push(r2.secs);
            last = Some((re, r1, r2));
        }
        let (re, r1, r2) = last.expect("at least one run");
        println!(
            "| {b} | {} | {:.2} | {:.2} | {:+.1} % | {:.2} | {:.2}× | {} | {:.2} | {:.2} |",
            re.nimber,
            median(e),
            median(w1),
            median(over) * 100.0,
            median(w2),
            median(up),
            r1.units,
            r1.nodes as f64 / re.nodes.max(1) as f64,
            r2.nodes as f64 / r1.nodes.max(1) as f64
        );
    }
    // Tiny units: the time per unit is the coordinator round trip (lease, submit, log
    // fsync, sled flush, frontier walk).
    let mut per_unit = Vec::new();
    let mut units = 0;
    for _ in 0..a.runs.max(1) {
        let r = run_with("4x7", None, a, &["--workers", "1", "--split-depth", "3"])?.ok_or_else(timeout)?;
        units = r.units;
        per_unit.push(r.secs * 1000.0 / r.units.max(1) as f64);
    }
    println!(
        "\nper unit (4x7, split depth 3, {units} units of a few nodes each, one worker): {:.2} ms",
        median(per_unit)
    );
    Ok(())
}

/// Runs the benchmark and prints a Markdown table.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    let boards: Vec<&str> = a.boards.split(',').map(str::trim).filter(|b| !b.is_empty()).collect();
    if a.cluster {
        return run_cluster(&boards, a);
    }
    crate::cli::parse_spec(&a.baseline)?;
    let base = format!("× {}", a.baseline);
    let mut header = format!("| board | nimber | nodes | seconds | {base} | peak MiB |");
    let mut rule = "|---|---|---:|---:|---:|---:|".to_string();
    if a.db_dir.is_some() {
        header += &format!(" nimber (db) | nodes (db) | seconds (db) | {base} (db) | peak MiB (db) |");
        rule += "---|---:|---:|---:|---:|";
    }
    println!("{header}\n{rule}");
    for b in boards {
        crate::cli::parse_spec(b)?;
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
