//! The cluster commands: `cram coordinator`, `cram worker`, `cram status`, `cram health`,
//! and `cram solve --workers N`, which runs the same coordinator and N workers in this
//! process over loopback gRPC, so the local and the cluster path are one code path.

use crate::cli::{parse_spec, print_record, CertificateRecord, DbArgs, EngineArgs, SolveRecord, DEFAULT_TT_MB};
use crate::Failure;
use clap::{Args, ValueEnum};
use cram_coordinator::scheduler::{CheckPolicy, Status};
use cram_coordinator::{CertificateTarget, CoordError, Finished, Settings as CoordSettings, Share, Split};
use cram_engine::{Board, Mode};
use cram_worker::owners_model::{OwnersModel, OwnersSpec};
use cram_worker::{Settings as WorkerSettings, WorkerError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging options of the long-running commands.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// Log format (levels from RUST_LOG, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How a job is split into units (shared by `coordinator` and `solve --workers`).
#[derive(Args, Clone, Debug)]
pub struct SplitArgs {
    /// Expand the root this many plies before asking workers [default: 2].
    #[arg(long, value_name = "N", conflicts_with = "target_units", value_parser = clap::value_parser!(u32).range(0..=8))]
    pub split_depth: Option<u32>,
    /// Instead of a depth: the least depth with at least N distinct regions to ask about.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub target_units: Option<u64>,
    /// Node budget of one unit; a unit that needs more comes back unfinished and is split.
    #[arg(long, value_name = "N", default_value_t = 50_000_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub unit_nodes: u64,
    /// A unit whose heartbeats show no progress for this long is reissued.
    #[arg(long, value_name = "S", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_secs: u64,
}

impl SplitArgs {
    fn split(&self) -> Split {
        match (self.split_depth, self.target_units) {
            (_, Some(n)) => Split::TargetUnits(n as usize),
            (d, None) => Split::Depth(d.unwrap_or(2)),
        }
    }
}

/// Arguments of `cram coordinator`.
#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// Address to serve on, e.g. 0.0.0.0:7700 (port 0: any free port, see --port-file).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// State directory: event log and index. Started again on it, the coordinator resumes.
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
    /// Start a new job from the results of an earlier job on the same position (its state
    /// directory, or only its event log), e.g. a nimber job from an outcome job.
    #[arg(long, value_name = "DIR|LOG")]
    pub import: Option<PathBuf>,
    /// The position (same forms as `cram solve`).
    #[arg(long, value_name = "SPEC")]
    pub job: String,
    /// What the job computes: `nimber`, or only the `outcome`.
    #[arg(long, value_name = "MODE", default_value_t = Mode::Nimber)]
    pub mode: Mode,
    #[command(flatten)]
    pub split: SplitArgs,
    /// File holding the token every call must carry.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds between progress lines in the log.
    #[arg(long, value_name = "S", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub progress_secs: u64,
    /// After the answer, keep telling polling workers "done" for this many seconds (more
    /// than a worker's longest retry backoff, 5 s, so that every live worker hears it).
    #[arg(long, value_name = "S", default_value_t = 10)]
    pub linger_secs: u64,
    /// Write the address actually bound to FILE once serving.
    #[arg(long, value_name = "FILE")]
    pub port_file: Option<PathBuf>,
    /// Serve the live status page (and /status.json, /metrics) over HTTP on ADDR.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Serve Prometheus metrics (/metrics) over HTTP on ADDR.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Serve gRPC over TLS with this certificate (PEM, the chain from the server's own
    /// certificate up); clients then use https:// and --tls-ca.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Do not use the half-turn pairing certificate (coordinator and workers).
    #[arg(long)]
    pub no_pairing: bool,
    /// Verify one result in N by the coordinator's own search of its question (0: none);
    /// results that decide the root or a first move are always verified.
    #[arg(long, value_name = "N", default_value_t = CheckPolicy::DEFAULT.sample_one_in)]
    pub check_one_in: u32,
    /// Verify nothing, not even the results that decide the root or a first move: only
    /// for workers you run yourself and trust (measurements). Without it, a worker that
    /// lies is caught: docs/decisions.md has the threat model.
    #[arg(long, conflicts_with = "check_one_in")]
    pub no_checks: bool,
    /// The coordinator's own searches (verifications), and in a certified job the checks of
    /// the results' proofs, run on this many threads at most [default: number of cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub check_threads: Option<u32>,
    /// Memory of the table of the coordinator's own searches, in MiB (a limit it grows to).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub check_tt_mb: u64,
    /// Workers send back facts about regions of at least N cells (found at a cost of
    /// --share-min-nodes), which the coordinator verifies by its own search and then hands
    /// to the other workers (0: none, the default: measured, it costs more than it saves).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub share_min_cells: u32,
    /// The least search nodes a fact cost to be worth sharing.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub share_min_nodes: u64,
    /// Print the result as the JSON object `cram solve --json` prints.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub certificate: CertificateArgs,
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Certificate options (shared by `solve` and `coordinator`).
#[derive(Args, Clone, Debug)]
pub struct CertificateArgs {
    /// Write a certificate of the answer to FILE, for `cram check` (one position). On the
    /// cluster path the job is certified: workers prove their units, and the coordinator
    /// assembles, checks and writes the certificate at the end.
    #[arg(long, value_name = "FILE")]
    pub certificate: Option<PathBuf>,
    /// Regions of at most this many cells get no facts in the certificate: the checker
    /// computes them itself (larger: smaller files, slower checks).
    #[arg(long, value_name = "N", default_value_t = cram_engine::proof::DEFAULT_SMALL, value_parser = clap::value_parser!(u32).range(0..=cram_certificate::format::MAX_SMALL as i64))]
    pub certificate_small: u32,
    /// The memory, in MiB, the coordinator's reading of the results' proofs may take
    /// together (a certified job; each check holds some 512 times its proof's size, a
    /// large proof is read alone); a proof that needs more than all of it is refused, and
    /// its worker with it.
    #[arg(long, value_name = "N", default_value_t = cram_coordinator::prove::DEFAULT_PROOF_MEMORY >> 20, value_parser = clap::value_parser!(u64).range(64..=1 << 24))]
    pub proof_memory_mb: u64,
}

impl CertificateArgs {
    /// Where a cluster job writes its certificate, if it is certified.
    pub fn target(&self) -> Option<CertificateTarget> {
        self.certificate.clone().map(|path| CertificateTarget {
            path,
            small: self.certificate_small,
            proof_memory: self.proof_memory_mb << 20,
        })
    }
}

/// Arguments of `cram worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The coordinator's URL, e.g. http://coordinator:7700.
    #[arg(long, value_name = "URL")]
    pub coordinator: String,
    /// Search threads [default: number of cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: Option<u32>,
    /// Directory of the answer cache (sled); kept across restarts. `{host}` in it is
    /// replaced by the host name, so replicas sharing a volume get a directory each.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// File holding the token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Transposition table memory over all threads, in MiB [default: 2048 for one thread,
    /// a limit its table grows to; 512 for the fixed-size table several threads share].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub tt_mb: Option<u64>,
    /// Name shown in the coordinator's status [default: host name]; at most 64 bytes,
    /// without control characters or '#'.
    #[arg(long, value_name = "NAME", value_parser = worker_name)]
    pub name: Option<String>,
    /// Seconds between summary lines in the log.
    #[arg(long, value_name = "S", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub progress_secs: u64,
    /// Protocol version to announce (for testing refusals).
    #[arg(long, hide = true)]
    pub announce_protocol: Option<u32>,
    /// Serve Prometheus metrics (/metrics) over HTTP on ADDR (e.g. 0.0.0.0:9101).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub tls: TlsClientArgs,
    #[command(flatten)]
    pub db: DbArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// Checks a worker name as the coordinator will.
fn worker_name(s: &str) -> Result<String, String> {
    let max = cram_coordinator::service::MAX_NAME;
    let ok = cram_coordinator::service::valid_name(s);
    ok.then(|| s.to_string()).ok_or_else(|| format!("1 to {max} bytes, without control characters or '#'"))
}

/// Arguments of `cram status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The coordinator's URL, e.g. http://127.0.0.1:7700.
    #[arg(long, value_name = "URL")]
    pub coordinator: String,
    /// File holding the token.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Print the status document as JSON.
    #[arg(long)]
    pub json: bool,
    /// Keep refreshing the status in the terminal every S seconds, until interrupted.
    #[arg(long, value_name = "S", num_args = 0..=1, default_missing_value = "2", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
    #[command(flatten)]
    pub tls: TlsClientArgs,
}

/// TLS for a client of the coordinator (worker, status, health).
#[derive(Args, Clone, Debug)]
pub struct TlsClientArgs {
    /// The certificate authority (PEM) that signed the coordinator's TLS certificate; the
    /// coordinator's address is then https://.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// Reads a PEM file named by `flag`, if given.
fn read_pem(path: &Option<PathBuf>, flag: &str) -> Result<Option<Vec<u8>>, Failure> {
    path.as_ref()
        .map(|p| std::fs::read(p).map_err(|e| Failure::input(format!("{flag} {}: {e}", p.display()))))
        .transpose()
}

/// Arguments of `cram health`.
#[derive(Args, Debug)]
pub struct HealthArgs {
    /// The coordinator's address, e.g. 127.0.0.1:7700.
    #[arg(long, value_name = "ADDR")]
    pub addr: String,
    /// Give up after this many seconds.
    #[arg(long, value_name = "S", default_value_t = 3)]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub tls: TlsClientArgs,
}

/// Settings of `cram solve --workers N`.
#[derive(Args, Debug, Clone)]
pub struct LocalClusterArgs {
    /// Solve through the cluster path with N workers in this process [N default: cores].
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "0")]
    pub workers: Option<u32>,
    /// With --workers: keep the job's state here, so an interrupted solve resumes.
    #[arg(long, value_name = "DIR", requires = "workers")]
    pub state: Option<PathBuf>,
    /// With --workers: start a new job from the results of an earlier job on the same
    /// position (its state directory, or only its event log), e.g. a nimber job from an
    /// outcome job.
    #[arg(long, value_name = "DIR|LOG", requires = "workers")]
    pub import: Option<PathBuf>,
    #[command(flatten)]
    pub split: SplitArgs,
    /// With --workers: seconds between the coordinator's progress lines on standard error
    /// (units done, nodes, nodes per second, root bounds, ETA).
    #[arg(long, value_name = "S", default_value_t = 120, requires = "workers", value_parser = clap::value_parser!(u64).range(1..))]
    pub progress_secs: u64,
    /// With --workers: serve the live status page (and /status.json, /metrics) over HTTP on
    /// ADDR, to watch a long solve from a browser (port 0: any; the address is logged).
    #[arg(long, value_name = "ADDR", requires = "workers")]
    pub http: Option<String>,
    /// With --workers: give each worker a table of its own, as on separate machines (by
    /// default the workers of one process share one table), to measure what separate
    /// memories cost without starting processes.
    #[arg(long, requires = "workers")]
    pub separate_tables: bool,
    /// With --separate-tables: link the workers' searches to a model of knowledge with
    /// owners, CELLS,NODES,DELAY_MS,LATENCY_US (docs/cluster.md, "Knowledge with owners,
    /// measured"), and report its messages.
    #[arg(long, value_name = "SPEC", requires = "separate_tables")]
    pub model_owners: Option<OwnersSpec>,
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(Failure::runtime)
}

/// Sets up logging to standard error; `RUST_LOG` overrides `default_level`.
pub fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colours only on a terminal: files, pipes and container logs get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Completes on SIGINT or SIGTERM.
async fn signalled() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn read_token(path: &Option<PathBuf>) -> Result<Option<String>, Failure> {
    path.as_deref().map(|p| cram_proto::read_token(p).map_err(Failure::input)).transpose()
}

fn coord_failure(e: CoordError) -> Failure {
    use cram_coordinator::store::StoreError;
    match e {
        CoordError::Store(StoreError::OtherJob { .. } | StoreError::Locked { .. })
        | CoordError::Tls(_)
        | CoordError::Import(_)
        | CoordError::ImportTooLate(_) => Failure::input(e),
        CoordError::Store(StoreError::Corrupt { .. }) => Failure::database(e),
        e => Failure::runtime(e),
    }
}

fn worker_failure(e: WorkerError) -> Failure {
    match e {
        WorkerError::Refused(_) | WorkerError::Disconnected(_) => Failure { code: 4, message: e.to_string() },
        WorkerError::Setup(_) => Failure::runtime(e),
        WorkerError::Database(_) => Failure::database(e),
    }
}

fn record(spec: &str, board: &Board, f: &Finished) -> SolveRecord {
    SolveRecord {
        spec: spec.to_string(),
        rows: board.rows(),
        cols: board.cols(),
        empty: board.empty_count(),
        outcome: f.solution.outcome,
        nimber: f.solution.nimber,
        nodes: f.nodes,
        millis: f.millis,
        peak_mib: crate::report::peak_rss_mib(),
        units: Some(f.counters.done + f.counters.split),
        facts_shared: (f.counters.facts_shared > 0).then_some(f.counters.facts_shared),
        check_nodes: (f.counters.check_nodes > 0).then_some(f.counters.check_nodes),
        certificate: f.certificate.as_ref().map(|c| CertificateRecord {
            file: c.path.display().to_string(),
            facts: c.facts,
            bytes: c.bytes,
            millis: c.millis,
        }),
        owners: None,
    }
}

/// Runs `cram coordinator`.
pub fn run_coordinator(a: &CoordinatorArgs) -> Result<(), Failure> {
    init_logging(a.log.log_format, "info");
    let board = parse_spec(&a.job)?;
    let token = read_token(&a.token_file)?;
    let settings = CoordSettings {
        board,
        spec: a.job.clone(),
        mode: a.mode,
        pairing: !a.no_pairing,
        split: a.split.split(),
        unit_nodes: a.split.unit_nodes,
        lease: Duration::from_secs(a.split.lease_secs),
        checks: if a.no_checks {
            CheckPolicy::NONE
        } else {
            CheckPolicy { sample_one_in: a.check_one_in, decisive: true }
        },
        check_threads: a.check_threads.unwrap_or_else(default_threads) as usize,
        check_tt_bytes: (a.check_tt_mb as usize) << 20,
        proof_threads: a.check_threads.unwrap_or_else(default_threads) as usize,
        progress: Duration::from_secs(a.progress_secs),
        token,
        dbs: a.db.checked_databases()?,
        linger: Duration::from_secs(a.linger_secs),
        state_dir: a.state.clone(),
        answered: None,
        certificate: a.certificate.target(),
        tls: match (read_pem(&a.tls_cert, "--tls-cert")?, read_pem(&a.tls_key, "--tls-key")?) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        },
        share: Share { min_cells: a.share_min_cells, min_nodes: a.share_min_nodes },
        import: a.import.clone(),
    };
    let rt = runtime()?;
    let finished = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .map_err(|e| Failure::input(format!("--listen {}: {e}", a.listen)))?;
        if let Some(p) = &a.port_file {
            let addr = listener.local_addr().map_err(Failure::runtime)?;
            write_atomically(p, &addr.to_string())?;
        }
        let (http, metrics) = (bind(&a.http, "--http").await?, bind(&a.metrics, "--metrics").await?);
        let listeners = cram_coordinator::Listeners { grpc: listener, http, metrics };
        cram_coordinator::run(settings, listeners, signalled()).await.map_err(coord_failure)
    })?;
    print_record(&record(&a.job, &board, &finished), a.json);
    Ok(())
}

/// A listener on the address given with `flag`, if one was; a bad or busy address is bad
/// input, named with its flag.
async fn bind(addr: &Option<String>, flag: &str) -> Result<Option<tokio::net::TcpListener>, Failure> {
    match addr {
        None => Ok(None),
        Some(a) => {
            tokio::net::TcpListener::bind(a).await.map(Some).map_err(|e| Failure::input(format!("{flag} {a}: {e}")))
        }
    }
}

/// Writes `text` to `path` through a temporary file, so readers never see half of it.
fn write_atomically(path: &Path, text: &str) -> Result<(), Failure> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))
}

/// Transposition table bytes of a worker: `tt_mb` if given, else the default (a limit its
/// table grows to, shared by its threads).
fn tt_budget(tt_mb: Option<u64>) -> usize {
    (tt_mb.unwrap_or(DEFAULT_TT_MB) as usize) << 20
}

fn default_threads() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "worker".to_string())
}

/// Runs `cram worker`.
pub fn run_worker(a: &WorkerArgs) -> Result<(), Failure> {
    init_logging(a.log.log_format, "info");
    let threads = a.threads.unwrap_or_else(default_threads) as usize;
    let tt_bytes = tt_budget(a.tt_mb);
    let settings = WorkerSettings {
        url: a.coordinator.clone(),
        name: a.name.clone().unwrap_or_else(host_name),
        threads,
        cache_dir: a.cache.as_ref().map(|p| PathBuf::from(p.to_string_lossy().replace("{host}", &host_name()))),
        dbs: a.db.checked_databases()?,
        tt_bytes,
        token: read_token(&a.token_file)?,
        protocol: a.announce_protocol.unwrap_or(cram_proto::PROTOCOL_VERSION),
        build: cram_proto::BUILD_ID.to_string(),
        progress: Duration::from_secs(a.progress_secs),
        shared: cram_worker::shared_tables(threads, tt_bytes),
        metrics: a
            .metrics
            .as_ref()
            .map(|m| {
                m.parse().map_err(|e| Failure::input(format!("--metrics {m}: {e} (an address like 0.0.0.0:9101)")))
            })
            .transpose()?,
        tls_ca: read_pem(&a.tls.tls_ca, "--tls-ca")?,
        proved: cram_worker::ProvedLog::default(),
        owners: None,
    };
    let summary = runtime()?.block_on(cram_worker::run(settings, signalled())).map_err(worker_failure)?;
    if let Some(d) = summary.done {
        let value = d.nimber.map_or_else(String::new, |n| format!(", nimber *{n}"));
        eprintln!("cram worker: job done: {}{value}", d.outcome.describe());
    }
    Ok(())
}

/// Runs `cram status`.
pub fn run_status(a: &StatusArgs) -> Result<(), Failure> {
    let token = read_token(&a.token_file)?;
    let ca = read_pem(&a.tls.tls_ca, "--tls-ca")?;
    let fetch = || {
        runtime()?.block_on(async {
            let mut client =
                cram_proto::connect(&a.coordinator, token.as_deref(), ca.as_deref()).await.map_err(|e| {
                    match cram_proto::tls_mismatch_in(&e, &a.coordinator) {
                        Some(why) => Failure { code: 4, message: why },
                        None => Failure::runtime(e),
                    }
                })?;
            let reply = client.status(cram_proto::pb::StatusRequest {}).await.map_err(|e| {
                match (e.code(), cram_proto::tls_mismatch(&e, &a.coordinator)) {
                    (_, Some(why)) => Failure { code: 4, message: why },
                    (tonic::Code::Unauthenticated, _) => {
                        Failure { code: 4, message: format!("refused: {}", e.message()) }
                    }
                    _ => Failure::runtime(format!("status: {}", e.message())),
                }
            })?;
            Ok::<_, Failure>(reply.into_inner().json)
        })
    };
    let Some(every) = a.watch else {
        let json = fetch()?;
        if a.json {
            println!("{json}");
        } else {
            print!("{}", status_text(&read_status(&json)?));
        }
        return Ok(());
    };
    loop {
        // Clear the screen and go home, then the status; a failed fetch is shown, not fatal.
        let shown = match fetch() {
            Ok(json) if a.json => json + "\n",
            Ok(json) => status_text(&read_status(&json)?),
            Err(f) => format!("{}: {}\n", a.coordinator, f.message),
        };
        println!("\x1b[2J\x1b[H{shown}(refreshed every {every} s; Ctrl-C to stop)");
        std::thread::sleep(Duration::from_secs(every));
    }
}

/// The status document a coordinator sent.
fn read_status(json: &str) -> Result<Status, Failure> {
    serde_json::from_str(json).map_err(|e| Failure::runtime(format!("the coordinator's status cannot be read: {e}")))
}

/// The status document as a few lines for people.
fn status_text(s: &Status) -> String {
    use crate::report::thousands;
    let (u, c) = (&s.units, &s.units.counters);
    let mut out = format!("job {} ({}): {}, {:.1} s\n", s.job, s.mode, s.state, s.elapsed_secs);
    out += &format!(
        "units: {} total, {} pending, {} leased, {} done, {} cancelled, {} split, {} expired, {} from cache, {} backups\n",
        u.total, u.pending, u.leased, c.done, c.cancelled, c.split, c.expired, c.from_cache, c.backups
    );
    out += &format!(
        "checks: {} results waiting, {} searches made by the coordinator ({} nodes), {} results refused\n",
        u.checking,
        c.checks,
        thousands(c.check_nodes),
        c.refused
    );
    out += &format!("shared facts: {} sent by workers, {} handed out\n", c.facts_shared, c.facts_handed_out);
    for d in &s.distrusted {
        out += &format!("distrusted: {} ({})\n", d.id, d.reason);
    }
    out +=
        &format!("nodes: {} ({} nodes/s)\nroot: {}\n", thousands(s.nodes), thousands(s.nodes_per_sec as u64), s.root);
    match (&s.answer, s.eta_secs) {
        (Some(a), _) => {
            let nimber = a.nimber.map_or_else(String::new, |x| format!(", nimber *{x}"));
            out += &format!("answer: {}{nimber}\n", a.outcome.describe());
        }
        (None, Some(eta)) if s.eta_lower_bound => {
            out += &format!("ETA: at least {eta} s (the open units are a window: more are certain to follow)\n")
        }
        (None, Some(eta)) => out += &format!("ETA: about {eta} s (for the units open now)\n"),
        (None, None) => out += "ETA: unknown\n",
    }
    if !s.moves.is_empty() {
        let known = s.first_moves_known();
        out += &format!("first moves: {} (each once up to symmetry), {known} with a known value\n", s.moves.len());
        for m in &s.moves {
            let mut position = m.regions.join(" + ");
            if m.xor != 0 || m.regions.is_empty() {
                position += &format!("{}*{}", if m.regions.is_empty() { "" } else { " + " }, m.xor);
            }
            let replies = m.replies.map_or_else(String::new, |r| {
                let open = r.total - r.settled - r.bounded;
                format!("  (replies: {} settled, {} bounded, {open} unknown)", r.settled, r.bounded)
            });
            out += &format!("  {:<16} {position}{replies}\n", m.known);
        }
    }
    out += &format!("workers: {}\n", s.workers.len());
    for w in &s.workers {
        out += &format!(
            "  {} ({} threads): heard {:.1} s ago, {} nodes, holding {} unit{}\n",
            w.id,
            w.threads,
            w.last_heartbeat_secs,
            thousands(w.nodes),
            w.units.len(),
            if w.units.len() == 1 { "" } else { "s" }
        );
        for u in &w.units {
            out += &format!("    {:<8} {}\n", u.asks, u.region);
        }
    }
    out
}

/// Runs `cram health`: exit 0 when the coordinator at `addr` serves (its state is loaded).
pub fn run_health(a: &HealthArgs) -> Result<(), Failure> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let ca = read_pem(&a.tls.tls_ca, "--tls-ca")?;
    let url = format!("{}://{}", if ca.is_some() { "https" } else { "http" }, a.addr);
    let status = runtime()?.block_on(async {
        let check = async {
            let channel =
                cram_proto::endpoint(&url, ca.as_deref())?.connect().await.map_err(|e| cram_proto::why(&e))?;
            let reply = HealthClient::new(channel)
                .check(HealthCheckRequest { service: String::new() })
                .await
                .map_err(|e| e.message().to_string())?;
            Ok::<_, String>(reply.into_inner().status)
        };
        tokio::time::timeout(Duration::from_secs(a.timeout_secs), check).await.unwrap_or(Err("timed out".into()))
    });
    match status {
        Ok(s) if s == ServingStatus::Serving as i32 => {
            println!("serving");
            Ok(())
        }
        Ok(s) => Err(Failure::runtime(format!("{}: not serving (status {s})", a.addr))),
        Err(e) => Err(Failure::runtime(format!("{}: {e}", a.addr))),
    }
}

/// Solves `board` through the cluster path: a coordinator and `workers` workers in this
/// process on a loopback port, with the state in `state` (a temporary directory if none).
pub fn solve_with_workers(
    spec: &str,
    board: &Board,
    mode: Mode,
    engine: &EngineArgs,
    local: &LocalClusterArgs,
    certificate: &CertificateArgs,
) -> Result<SolveRecord, Failure> {
    let (pairing, tt_mb, db) = (!engine.no_pairing, engine.tt_mb, &engine.db);
    // A solve through the cluster path can run for hours, in a terminal or into a file: the
    // coordinator's progress lines and milestones show how it goes; the rest only warns.
    init_logging(LogFormat::Text, &format!("warn,{}=info", cram_coordinator::PROGRESS));
    let n = match local.workers {
        Some(0) | None => default_threads(),
        Some(n) => n,
    };
    if local.model_owners.is_some() && certificate.target().is_some() {
        return Err(Failure::input(
            "--model-owners measures a search, not a proof: it cannot be used with --certificate",
        ));
    }
    let dbs = db.checked_databases()?;
    let temp = local
        .state
        .is_none()
        .then(|| std::env::temp_dir().join(format!("cram-solve-{}-{}", std::process::id(), cram_proto::unix_secs())));
    let state_dir = local.state.clone().or_else(|| temp.clone()).expect("one of them is set");
    let token = format!("{:032x}", rand::random::<u128>());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let settings = CoordSettings {
        board: *board,
        spec: spec.to_string(),
        mode,
        pairing,
        split: local.split.split(),
        unit_nodes: local.split.unit_nodes,
        lease: Duration::from_secs(local.split.lease_secs),
        // The workers are threads of this process, sharing its memory and engine: a second
        // answer from the coordinator would check nothing. Conflicts (none without a fault)
        // are still decided by its own search.
        checks: CheckPolicy::NONE,
        check_threads: 1,
        check_tt_bytes: 256 << 20,
        // The proofs are checked on every core: the answer waits for the last of them.
        proof_threads: default_threads() as usize,
        progress: Duration::from_secs(local.progress_secs),
        token: Some(token.clone()),
        dbs: dbs.clone(),
        // Long enough for the workers to see the stop signal before the server goes away.
        linger: Duration::from_millis(20),
        state_dir,
        answered: Some(stop_tx.clone()),
        certificate: certificate.target(),
        tls: None,
        // The workers are threads of this process: they share one table instead.
        share: Share::NONE,
        import: local.import.clone(),
    };
    let result = runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(Failure::runtime)?;
        let url = format!("http://{}", listener.local_addr().map_err(Failure::runtime)?);
        let http = bind(&local.http, "--http").await?;
        let tt_bytes = tt_budget(tt_mb);
        let shared = if local.separate_tables { None } else { cram_worker::shared_tables(n as usize, tt_bytes) };
        let owners = local.model_owners.map(OwnersModel::new);
        let proved = cram_worker::ProvedLog::default();
        let mut workers = Vec::new();
        for i in 0..n {
            let settings = WorkerSettings {
                url: url.clone(),
                name: format!("local-{i}"),
                threads: 1,
                cache_dir: None,
                dbs: dbs.clone(),
                tt_bytes: tt_bytes / n as usize,
                token: Some(token.clone()),
                protocol: cram_proto::PROTOCOL_VERSION,
                build: cram_proto::BUILD_ID.to_string(),
                progress: Duration::from_secs(120),
                shared: shared.clone(),
                metrics: None,
                tls_ca: None,
                proved: proved.clone(),
                owners: owners.clone(),
            };
            let mut stop = stop_rx.clone();
            workers.push(tokio::spawn(cram_worker::run(settings, async move {
                let _ = stop.wait_for(|s| *s).await;
            })));
        }
        // The workers hold the tables: once the answer stops them, their memory goes back
        // before the coordinator assembles a certificate (which may need many GiB).
        drop(shared);
        let listeners = cram_coordinator::Listeners { grpc: listener, http, metrics: None };
        let finished = cram_coordinator::run(settings, listeners, signalled()).await;
        stop_tx.send_replace(true);
        for w in workers {
            let _ = w.await;
        }
        finished.map(|f| (f, owners.map(|o| o.report()))).map_err(|e| match (e, &temp) {
            // The temporary state goes with the process: nothing to resume from.
            (CoordError::Stopped(_), Some(_)) => {
                Failure::runtime("stopped before the answer (with --state DIR a solve can be resumed)")
            }
            (e, _) => coord_failure(e),
        })
    });
    if let Some(t) = temp {
        let _ = std::fs::remove_dir_all(t);
    }
    let (finished, owners) = result?;
    Ok(SolveRecord { owners, ..record(spec, board, &finished) })
}

/// Shared by tests of the status text.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_names_every_count() {
        let v = serde_json::json!({
            "job": "4x8", "mode": "nimber", "state": "running", "elapsed_secs": 3.0,
            "units": {"total": 9, "pending": 2, "leased": 1, "done": 5, "cancelled": 1, "split": 1, "expired": 0, "from_cache": 2,
                      "checking": 3, "checks": 4, "check_nodes": 1200, "refused": 1, "facts_shared": 480, "facts_handed_out": 960,
                      "released": 0, "duplicates": 0},
            "distrusted": [{"id": "bad#7", "reason": "its answer to 4x7:f?1 contradicts"}],
            "nodes": 12345, "nodes_per_sec": 1000.0, "root": "g ≠ 0", "answer": null, "eta_secs": 7, "settling": [],
            "moves": [{"regions": ["##../...."], "xor": 0, "known": "g = 0", "value": 0},
                      {"regions": [".##/...", "..."], "xor": 1, "known": "g ≠ 0; g ≤ 3", "value": null},
                      {"regions": ["#../.../..."], "xor": 0, "known": "g ≤ 3", "value": null,
                       "replies": {"total": 9, "settled": 2, "bounded": 4}}],
            "workers": [{"id": "a#1", "name": "a", "threads": 2, "last_heartbeat_secs": 0.5, "nodes": 10, "strikes": 0,
                         "units": [{"id": "1x4:f?1", "asks": "g = 1?", "region": "...."}]}]
        });
        let status = read_status(&v.to_string()).unwrap();
        let t = status_text(&status);
        for want in [
            "job 4x8 (nimber): running",
            "9 total, 2 pending, 1 leased, 5 done, 1 cancelled, 1 split",
            "12,345",
            "root: g ≠ 0",
            "ETA: about 7 s (for the units open now)",
            "a#1 (2 threads)",
            "checks: 3 results waiting, 4 searches made by the coordinator (1,200 nodes), 1 results refused",
            "shared facts: 480 sent by workers, 960 handed out",
            "distrusted: bad#7 (its answer",
            "first moves: 3 (each once up to symmetry), 1 with a known value",
            "  g ≤ 3            #../.../...  (replies: 2 settled, 4 bounded, 3 unknown)\n",
            "  g = 0            ##../....\n",
            "  g ≠ 0; g ≤ 3     .##/... + ... + *1\n",
            "a#1 (2 threads): heard 0.5 s ago, 10 nodes, holding 1 unit\n",
            "    g = 1?   ....\n",
        ] {
            assert!(t.contains(want), "{want:?} missing from\n{t}");
        }
        // A window of the questions known to be needed: the ETA is said to be a lower bound.
        let mut cut = v;
        cut["eta_lower_bound"] = serde_json::json!(true);
        let t = status_text(&read_status(&cut.to_string()).unwrap());
        assert!(t.contains("ETA: at least 7 s (the open units are a window"), "{t}");
    }
}
