//! `cram bench`: the performance table. Each board is solved by a fresh `cram solve`
//! process, so start-up and memory count per board; the CPU time (user + system) and peak
//! memory are the child process's own, from `wait4`. With `--peer CMD` another solver's
//! command runs alternately with cram's, board by board, and the table gives the ratio of
//! their median CPU times: both measured in the same minutes, which a noisy machine needs.
//! With `--scaling LIST` each board is solved by a coordinator process and N separate
//! worker processes (one thread and one table each, as on N machines), for each N.

use crate::report::thousands;
use crate::Failure;
use clap::Args;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The boards of the default table.
pub const DEFAULT_BOARDS: &str = "3x11,5x6,4x9,3x13,5x7,3x15,5x8,3x14,4x11,3x17,5x9";

/// Arguments of `cram bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Comma-separated boards.
    #[arg(long, default_value = DEFAULT_BOARDS)]
    pub boards: String,
    /// Runs per board and solver; medians are reported.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Give up on a board after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Search threads of each solve.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Also run with the databases in this directory.
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
    /// Transposition table budget (MiB) passed to each solve [default: each solve's own].
    #[arg(long)]
    pub tt_mb: Option<u64>,
    /// Another solver to compare with: a command line where `{rows}` and `{cols}` stand
    /// for the board's size, e.g. 'igsolve cram {rows} {cols}'; run alternately with cram.
    #[arg(long, value_name = "CMD")]
    pub peer: Option<String>,
    /// Compare the cluster path instead: the engine, one in-process worker and two, per
    /// board (each run a fresh process, the three interleaved), and the cost of one unit.
    #[arg(long, conflicts_with = "peer")]
    pub cluster: bool,
    /// Scaling over machines: per board, a coordinator and N separate worker processes (one
    /// thread and one table each) for each N of this comma-separated list; total nodes
    /// and worker CPU relative to the first N, the coordinator's verification, wall time.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["peer", "cluster"])]
    pub scaling: Option<String>,
    /// With --scaling: the coordinator's split depth [default: the coordinator's].
    #[arg(long, value_name = "N", requires = "scaling")]
    pub split_depth: Option<u32>,
    /// With --scaling: extra arguments for the coordinator (e.g. '--share-min-cells 24').
    #[arg(long, value_name = "ARGS", requires = "scaling", allow_hyphen_values = true)]
    pub coordinator_args: Option<String>,
    /// With --scaling: the coordinator verifies nothing (`--no-checks`); by default it
    /// verifies as it would in a real cluster, and the table shows what that cost.
    #[arg(long, requires = "scaling")]
    pub no_checks: bool,
    /// The coordinator's proof checks instead: the proofs of the certified job in this state
    /// directory checked again, in the order their results came, on 1 to `--threads`
    /// threads (a worker's proofs one at a time, as a coordinator checks them); facts per
    /// second.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["peer", "cluster", "scaling"])]
    pub proofs: Option<PathBuf>,
}

/// What one child process used.
struct Measured {
    /// User plus system CPU seconds.
    cpu: f64,
    /// Wall-clock seconds.
    wall: f64,
    /// Peak resident memory, MiB.
    peak_mib: u64,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` to its end (or kills it after `timeout`: `None`), measuring its CPU time and
/// peak memory as the kernel accounts them for that child.
fn measure(mut cmd: Command, timeout: Duration) -> Result<Option<Measured>, Failure> {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(Failure::runtime)?;
    let read_all = |mut from: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = from.read_to_string(&mut s);
            s
        })
    };
    let reader = read_all(Box::new(child.stdout.take().expect("piped")));
    let errors = read_all(Box::new(child.stderr.take().expect("piped")));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child, with valid pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if r < 0 {
            return Err(Failure::runtime(format!("bench: wait4: {}", std::io::Error::last_os_error())));
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = start.elapsed().as_secs_f64();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let stdout = reader.join().unwrap_or_default();
    let stderr = errors.join().unwrap_or_default();
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
        return Err(Failure::runtime(format!("bench: {cmd:?} failed ({status:#x}): {stdout} {tail}")));
    }
    Ok(Some(Measured {
        cpu: secs(usage.ru_utime) + secs(usage.ru_stime),
        wall,
        peak_mib: usage.ru_maxrss as u64 / 1024,
        stdout,
        stderr,
    }))
}

/// One cram solve as the table reports it.
struct Run {
    nimber: String,
    nodes: u64,
    units: u64,
    used: Measured,
}

/// One fresh `cram solve` of `board` with `extra` arguments.
fn run_cram(board: &str, db: Option<&PathBuf>, a: &BenchArgs, extra: &[&str]) -> Result<Option<Run>, Failure> {
    let exe = std::env::current_exe().map_err(Failure::runtime)?;
    let mut cmd = Command::new(exe);
    cmd.args(["solve", board, "--json"]).args(extra);
    if !extra.contains(&"--workers") {
        cmd.args(["--threads", &a.threads.to_string()]);
    }
    if let Some(mb) = a.tt_mb {
        cmd.args(["--tt-mb", &mb.to_string()]);
    }
    match db {
        Some(d) => cmd.arg("--db-dir").arg(d),
        None => cmd.arg("--no-db"),
    };
    let Some(used) = measure(cmd, Duration::from_secs(a.timeout_secs))? else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(used.stdout.trim())
        .map_err(|e| Failure::runtime(format!("bench: {board}: unreadable solver output ({e}): {}", used.stdout)))?;
    Ok(Some(Run {
        nimber: v["nimber"].as_u64().map_or("?".into(), |n| format!("*{n}")),
        nodes: v["nodes"].as_u64().unwrap_or(0),
        units: v["units"].as_u64().unwrap_or(0),
        used,
    }))
}

/// One run of the peer's command for an R×C board, and the nimber it printed (the last
/// number after the word "nimber" in its output), if any.
fn run_peer(template: &str, rows: u32, cols: u32, a: &BenchArgs) -> Result<Option<(Measured, String)>, Failure> {
    let line = template.replace("{rows}", &rows.to_string()).replace("{cols}", &cols.to_string());
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &line]);
    let Some(used) = measure(cmd, Duration::from_secs(a.timeout_secs))? else { return Ok(None) };
    let lower = used.stdout.to_lowercase();
    let nimber = lower
        .rfind("nimber")
        .and_then(|i| lower[i..].split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()))
        .map_or("?".to_string(), |n| format!("*{n}"));
    Ok(Some((used, nimber)))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The engine table, optionally against a peer and with databases.
fn run_engine(boards: &[&str], a: &BenchArgs) -> Result<(), Failure> {
    let mut header = "| board | nimber | nodes | CPU s | wall s | peak MiB | threads |".to_string();
    let mut rule = "|---|---|---:|---:|---:|---:|---:|".to_string();
    if a.db_dir.is_some() {
        header += " nodes (db) | CPU s (db) | peak MiB (db) |";
        rule += "---:|---:|---:|";
    }
    if a.peer.is_some() {
        header += " peer nimber | peer CPU s | peer peak MiB | cram / peer |";
        rule += "---|---:|---:|---:|";
    }
    println!("{header}\n{rule}");
    for b in boards {
        let board = crate::cli::parse_spec(b)?;
        let (mut plain, mut with_db, mut peer) = (Vec::new(), Vec::new(), Vec::new());
        let mut peer_nimber = String::new();
        let mut timed_out = false;
        for _ in 0..a.runs.max(1) {
            // Alternate: cram, cram with databases, the peer; then again.
            match run_cram(b, None, a, &[])? {
                Some(r) => plain.push(r),
                None => timed_out = true,
            }
            if let Some(d) = &a.db_dir {
                match run_cram(b, Some(d), a, &[])? {
                    Some(r) => with_db.push(r),
                    None => timed_out = true,
                }
            }
            if let Some(p) = &a.peer {
                match run_peer(p, board.rows(), board.cols(), a)? {
                    Some((m, n)) => {
                        peer_nimber = n;
                        peer.push(m);
                    }
                    None => timed_out = true,
                }
            }
            if timed_out {
                break;
            }
        }
        if timed_out {
            println!("| {b} | – | – | > {} | – | – | {} |", a.timeout_secs, a.threads);
            continue;
        }
        let cpu = |rs: &[Run]| median(rs.iter().map(|r| r.used.cpu).collect());
        fn mid(rs: &[Run]) -> &Run {
            let m = median(rs.iter().map(|r| r.used.cpu).collect());
            rs.iter().find(|r| r.used.cpu == m).expect("the median is a run")
        }
        let p = mid(&plain);
        let mut line = format!(
            "| {b} | {} | {} | {:.3} | {:.3} | {} | {} |",
            p.nimber,
            thousands(p.nodes),
            p.used.cpu,
            median(plain.iter().map(|r| r.used.wall).collect()),
            p.used.peak_mib,
            a.threads
        );
        if a.db_dir.is_some() {
            let d = mid(&with_db);
            line += &format!(" {} | {:.3} | {} |", thousands(d.nodes), d.used.cpu, d.used.peak_mib);
        }
        if a.peer.is_some() {
            let peer_cpu = median(peer.iter().map(|m| m.cpu).collect());
            let peak = peer.iter().map(|m| m.peak_mib).max().unwrap_or(0);
            let flag = if peer_nimber != p.nimber { " (differs)" } else { "" };
            line +=
                &format!(" {peer_nimber}{flag} | {peer_cpu:.3} | {peak} | {:.2} |", cpu(&plain) / peer_cpu.max(1e-9));
        }
        println!("{line}");
    }
    Ok(())
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
            let re = run_cram(b, a.db_dir.as_ref(), a, &[])?.ok_or_else(timeout)?;
            let r1 = run_cram(b, a.db_dir.as_ref(), a, &["--workers", "1"])?.ok_or_else(timeout)?;
            let r2 = run_cram(b, a.db_dir.as_ref(), a, &["--workers", "2"])?.ok_or_else(timeout)?;
            over.push(r1.used.wall / re.used.wall - 1.0);
            up.push(r1.used.wall / r2.used.wall);
            e.push(re.used.wall);
            w1.push(r1.used.wall);
            w2.push(r2.used.wall);
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
        let r = run_cram("4x7", None, a, &["--workers", "1", "--split-depth", "3"])?.ok_or_else(timeout)?;
        units = r.units;
        per_unit.push(r.used.wall * 1000.0 / r.units.max(1) as f64);
    }
    println!(
        "\nper unit (4x7, split depth 3, {units} units of a few nodes each, one worker): {:.2} ms",
        median(per_unit)
    );
    Ok(())
}

/// One scaling run: what the coordinator reported and what its workers used.
#[derive(Clone)]
struct ScalingRun {
    nimber: String,
    units: u64,
    /// Nodes the workers searched (their own count: cancelled units included).
    nodes: u64,
    /// Worker CPU seconds, all workers.
    cpu: f64,
    /// Wall seconds of the coordinator, start to answer (its linger not counted).
    wall: f64,
    /// Facts the workers shared (from the coordinator's result).
    shared: u64,
    /// Nodes of the coordinator's own verifications, and its CPU seconds.
    check_nodes: u64,
    coordinator_cpu: f64,
}

/// Solves `board` with a coordinator process and `n` worker processes of one thread each.
fn run_scaling_once(board: &str, n: u32, a: &BenchArgs) -> Result<ScalingRun, Failure> {
    let exe = std::env::current_exe().map_err(Failure::runtime)?;
    let dir = std::env::temp_dir().join(format!("cram-bench-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).map_err(Failure::runtime)?;
    let port_file = dir.join("port");
    let mut coord = Command::new(&exe);
    // The default linger outlasts a worker's heartbeat interval and backoff: every worker
    // hears that the job is done.
    coord.args(["coordinator", "--listen", "127.0.0.1:0", "--job", board, "--json"]);
    coord.args(["--progress-secs", "3600"]);
    if a.no_checks {
        coord.arg("--no-checks");
    }
    coord.arg("--state").arg(dir.join("state")).arg("--port-file").arg(&port_file);
    if let Some(d) = a.split_depth {
        coord.args(["--split-depth", &d.to_string()]);
    }
    if let Some(extra) = &a.coordinator_args {
        coord.args(extra.split_whitespace());
    }
    let db_args = |cmd: &mut Command| {
        match &a.db_dir {
            Some(d) => cmd.arg("--db-dir").arg(d),
            None => cmd.arg("--no-db"),
        };
    };
    db_args(&mut coord);
    let timeout = Duration::from_secs(a.timeout_secs);
    let coordinator = std::thread::spawn(move || measure(coord, timeout));
    let started = Instant::now();
    let addr = loop {
        if let Ok(s) = std::fs::read_to_string(&port_file) {
            break s;
        }
        if started.elapsed() > Duration::from_secs(30) || coordinator.is_finished() {
            return Err(Failure::runtime("bench: the coordinator did not start"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let workers: Vec<_> = (0..n)
        .map(|i| {
            let mut w = Command::new(&exe);
            w.args(["worker", "--coordinator", &format!("http://{}", addr.trim()), "--threads", "1"]);
            w.args(["--name", &format!("bench-{i}"), "--log-format", "json", "--progress-secs", "3600"]);
            if let Some(mb) = a.tt_mb {
                w.args(["--tt-mb", &mb.to_string()]);
            }
            db_args(&mut w);
            std::thread::spawn(move || measure(w, timeout))
        })
        .collect();
    let joined = |h: std::thread::JoinHandle<Result<Option<Measured>, Failure>>| {
        h.join()
            .map_err(|_| Failure::runtime("bench: a measuring thread failed"))??
            .ok_or_else(|| Failure::runtime("bench: a run timed out"))
    };
    let c = joined(coordinator)?;
    let (mut nodes, mut cpu) = (0, 0.0);
    for w in workers {
        let m = joined(w)?;
        cpu += m.cpu;
        nodes += m
            .stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["fields"]["message"] == "worker finished")
            .and_then(|v| v["fields"]["nodes"].as_u64())
            .unwrap_or(0);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_str(c.stdout.trim())
        .map_err(|e| Failure::runtime(format!("bench: {board}: unreadable coordinator output ({e}): {}", c.stdout)))?;
    Ok(ScalingRun {
        nimber: v["nimber"].as_u64().map_or("?".into(), |n| format!("*{n}")),
        units: v["units"].as_u64().unwrap_or(0),
        nodes,
        cpu,
        wall: v["millis"].as_u64().map_or(c.wall, |ms| ms as f64 / 1000.0),
        shared: v["facts_shared"].as_u64().unwrap_or(0),
        check_nodes: v["check_nodes"].as_u64().unwrap_or(0),
        coordinator_cpu: c.cpu,
    })
}

/// The scaling table: per board and N, N worker processes against the first N of the list.
fn run_scaling(boards: &[&str], list: &str, a: &BenchArgs) -> Result<(), Failure> {
    let ns: Vec<u32> = list
        .split(',')
        .map(|x| x.trim().parse().ok().filter(|&n| (1..=256).contains(&n)))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            Failure::input(format!("--scaling {list}: a list of worker counts from 1 to 256, e.g. 1,2,4"))
        })?;
    println!("| board | nimber | workers | units | nodes | nodes / first | worker CPU s | CPU / first | verification nodes | verification / nodes | coordinator CPU s | wall s | speed-up | facts shared |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for b in boards {
        let mut first: Option<ScalingRun> = None;
        for &n in &ns {
            let mut runs: Vec<ScalingRun> =
                (0..a.runs.max(1)).map(|_| run_scaling_once(b, n, a)).collect::<Result<_, _>>()?;
            let wall = median(runs.iter().map(|r| r.wall).collect());
            runs.sort_by(|x, y| x.wall.total_cmp(&y.wall));
            let r = runs.swap_remove(runs.len() / 2);
            let f = first.get_or_insert_with(|| r.clone());
            let (base_nodes, base_cpu, base_wall) = (f.nodes.max(1) as f64, f.cpu.max(1e-9), f.wall);
            println!(
                "| {b} | {} | {n} | {} | {} | {:.2} | {:.1} | {:.2} | {} | {:.3} | {:.1} | {:.1} | {:.2}× | {} |",
                r.nimber,
                r.units,
                thousands(r.nodes),
                r.nodes as f64 / base_nodes,
                r.cpu,
                r.cpu / base_cpu,
                thousands(r.check_nodes),
                r.check_nodes as f64 / r.nodes.max(1) as f64,
                r.coordinator_cpu,
                wall,
                base_wall / wall,
                thousands(r.shared)
            );
        }
    }
    Ok(())
}

/// Runs the benchmark and prints a Markdown table.
pub fn run(a: &BenchArgs) -> Result<(), Failure> {
    if let Some(state) = &a.proofs {
        return run_proofs(state, a);
    }
    let boards: Vec<&str> = a.boards.split(',').map(str::trim).filter(|b| !b.is_empty()).collect();
    for b in &boards {
        crate::cli::parse_spec(b)?;
    }
    if let Some(list) = &a.scaling {
        return run_scaling(&boards, list, a);
    }
    if a.cluster {
        return run_cluster(&boards, a);
    }
    run_engine(&boards, a)
}

/// `cram bench --proofs DIR`: the proofs of a certified job checked again on 1 to
/// `--threads` threads, `--runs` times each, alternating; medians.
fn run_proofs(state: &std::path::Path, a: &BenchArgs) -> Result<(), Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(Failure::runtime)?;
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); a.threads as usize];
    let mut last = None;
    for _ in 0..a.runs.max(1) {
        for t in 1..=a.threads {
            let r = rt.block_on(cram_coordinator::prove::recheck(state, t as usize)).map_err(Failure::input)?;
            if let Some(why) = &r.first_failure {
                return Err(Failure::runtime(format!(
                    "{} of {} proofs did not check again ({why})",
                    r.failed, r.proofs
                )));
            }
            secs[t as usize - 1].push(r.secs);
            last = Some(r);
        }
    }
    let r = last.expect("at least one run");
    println!("{}: {} proofs, {} facts sent, {} added", state.display(), r.proofs, r.facts_sent, r.facts_added);
    println!("| threads | seconds (median of {}) | facts sent per second | speed-up |", a.runs.max(1));
    println!("|---:|---:|---:|---:|");
    let one = median(secs[0].clone());
    for (i, s) in secs.into_iter().enumerate() {
        let m = median(s);
        println!("| {} | {:.3} | {:.0} | {:.2} |", i + 1, m, r.facts_sent as f64 / m, one / m);
    }
    Ok(())
}
