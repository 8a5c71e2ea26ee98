//! The cram cluster worker: registers with a coordinator, then each search thread leases a
//! unit, answers it from the cache or by searching with the engine, and submits what it
//! learnt; a separate heartbeat task reports progress (the search never blocks it) and
//! stops units the coordinator cancels.
//!
//! While the coordinator is away the worker retries with capped, randomised backoff and
//! keeps searching; a coordinator that does not know it (restarted) gets a new
//! registration, under the same id (`name#instance`, the instance drawn at random when the
//! process starts). The worker exits when told the job is done, or on shutdown after
//! handing its units back at once. A refusal (other protocol, build or databases, wrong
//! token) is final; so is a disconnection (the coordinator found its results wrong), after
//! which the cache is moved aside.

#![warn(missing_docs)]

pub mod cache;

use crate::cache::Cache;
use cram_certificate::Shape;
use cram_engine::facts::Facts;
use cram_engine::proof::{Proofs, Prover};
use cram_engine::region::AnyRegion;
use cram_engine::solver::SharedTables;
use cram_engine::{Config, DbSet, Interrupted, Solution, Solver};
use cram_proto::pb::{self, lease_reply};
use cram_proto::{facts_to_pb, region_from_pb, region_to_pb, Client, Query};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Mutex as AsyncMutex};
use tonic::{Code, Status};

/// Everything a worker run needs.
pub struct Settings {
    /// The coordinator's URL, `http://host:port`.
    pub url: String,
    /// A name for logs and status (the host name by default).
    pub name: String,
    /// Search threads, each leasing its own units.
    pub threads: usize,
    /// Directory of the answer cache (none: no cache).
    pub cache_dir: Option<PathBuf>,
    /// Databases the search uses.
    pub dbs: Arc<DbSet>,
    /// Transposition table memory over all threads.
    pub tt_bytes: usize,
    /// Bearer token.
    pub token: Option<String>,
    /// Protocol version announced (tests announce a wrong one).
    pub protocol: u32,
    /// Build announced.
    pub build: String,
    /// Interval of the periodic summary line.
    pub progress: Duration,
    /// Transposition tables shared by the search threads of this process (see
    /// [`shared_tables`]); none: each thread has its own.
    pub shared: Option<SharedTables>,
    /// Serve Prometheus metrics (`/metrics`) over HTTP here.
    pub metrics: Option<std::net::SocketAddr>,
    /// The certificate authority (PEM) that signed a TLS coordinator's certificate.
    pub tls_ca: Option<Vec<u8>>,
    /// Facts of certified units' proofs that the coordinator kept, shared by the search
    /// threads of this process (and by the workers of one process that share `shared`).
    pub proved: ProvedLog,
}

/// The facts a coordinator kept from the proofs of a process's search threads, in the
/// order they were sent (region and value), and the generation of the tables they were
/// proved with (a reset empties it). Each thread takes the others' into its own proofs
/// before it proves a unit, so that no fact is proved twice in one process. A fact that
/// a coordinator later discards (its worker distrusted) costs only time: the
/// coordinator's assembly proves again what its certificate lacks, and checks it.
#[derive(Clone, Default)]
pub struct ProvedLog(Arc<Mutex<Generation>>);

/// Facts (region and value) proved with the tables of one generation.
type Generation = (u64, Vec<(Shape, u8)>);

impl ProvedLog {
    /// Appends facts proved with the tables of `generation` (a newer one empties the log).
    fn add(&self, generation: u64, facts: Vec<(Shape, u8)>) {
        let mut log = self.0.lock().expect("proved lock");
        if log.0 != generation {
            *log = (generation, Vec::new());
        }
        log.1.extend(facts);
    }

    /// Adds to `proofs` the facts of `generation` past the first `seen`, and moves `seen`
    /// past them.
    fn take_new(&self, proofs: &mut Proofs, seen: &mut usize, generation: u64) {
        let log = self.0.lock().expect("proved lock");
        if log.0 == generation && *seen < log.1.len() {
            proofs.add_known(&log.1[*seen..]);
            *seen = log.1.len();
        }
    }
}

/// The transposition tables `threads` search threads of one process share, `tt_bytes` in
/// all (none for a single thread, which keeps its own growing table).
pub fn shared_tables(threads: usize, tt_bytes: usize) -> Option<SharedTables> {
    (threads > 1).then(|| SharedTables::new(tt_bytes))
}

/// What a worker run did.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Units answered by search.
    pub searched: u64,
    /// Units answered from the cache.
    pub from_cache: u64,
    /// Units that ran out of budget.
    pub unfinished: u64,
    /// Search nodes.
    pub nodes: u64,
    /// The job's answer, when the coordinator said it is done.
    pub done: Option<Solution>,
    /// Facts this worker sent for the others (knowledge shared across machines).
    pub facts_shared: u64,
    /// Facts of other workers this worker loaded into its tables.
    pub facts_loaded: u64,
    /// Times this worker dropped its tables and cache because a worker whose facts they
    /// held was found wrong.
    pub resets: u64,
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The coordinator refused this worker for good (version, build, databases, token), or
    /// disconnected it (its results were found wrong).
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    /// The cache or the settings cannot be used.
    #[error("{0}")]
    Setup(String),
    /// A database was found damaged during a search (its unit's result was not sent).
    #[error("{0}")]
    Database(String),
}

/// The registration in force.
#[derive(Clone, Debug)]
struct Registration {
    id: String,
    heartbeat: Duration,
    pairing: bool,
    /// The job is certified: results carry proofs with facts on regions above this size.
    certificate_small: Option<u32>,
    /// Share facts about regions of at least this many cells that took at least this many
    /// nodes (none: share nothing).
    share: Option<(u32, u64)>,
}

/// A unit being searched: what the heartbeat reports and how it stops it.
struct Active {
    attempt: u64,
    nodes: Arc<AtomicU64>,
    cancel: Arc<AtomicBool>,
}

/// State shared by the search threads and the heartbeat task.
struct Shared {
    settings: Settings,
    client: Client,
    registration: AsyncMutex<Option<Registration>>,
    active: Mutex<HashMap<String, Active>>,
    /// Raised on shutdown or when the job is done.
    stop: watch::Sender<bool>,
    done: Mutex<Option<Solution>>,
    /// This process's part of its worker id.
    instance: String,
    summary: Mutex<Summary>,
    cache: Option<Cache>,
    started: Instant,
    /// The tables the search threads share (none: each thread has its own).
    tables: Mutex<Option<SharedTables>>,
    /// The workers whose shared facts the tables hold (since the last reset).
    loaded: Mutex<BTreeSet<String>>,
    /// Bumped when the tables are dropped: a thread whose solver is older builds a new one.
    generation: AtomicU64,
    /// In a certified job: the facts the coordinator kept from this process's proofs.
    proved: ProvedLog,
}

/// A failed call that is not worth retrying.
enum CallError {
    Fatal(WorkerError),
    Stopped,
}

impl Shared {
    /// Records facts of one thread's proof that the coordinator kept.
    fn add_proved(&self, generation: u64, facts: Vec<(Shape, u8)>) {
        self.proved.add(generation, facts);
    }

    /// Gives a search thread's proofs the facts kept since it last looked (its own among
    /// them, which it holds already), so that it does not prove them again.
    fn take_proved(&self, searcher: &mut Searcher, small: u32, generation: u64) {
        let proofs = searcher.proofs.get_or_insert_with(|| Proofs::new(small));
        self.proved.take_new(proofs, &mut searcher.seen, generation);
    }

    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`, or less if the worker is stopping; false when stopping.
    async fn pause(&self, d: Duration) -> bool {
        let mut rx = self.stop.subscribe();
        if *rx.borrow() {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = rx.wait_for(|s| *s) => false,
        }
    }

    /// The registration, registering (with backoff) when there is none.
    async fn registration(&self) -> Result<Registration, CallError> {
        let mut reg = self.registration.lock().await;
        if let Some(r) = reg.as_ref() {
            return Ok(r.clone());
        }
        let mut backoff = Backoff::new();
        loop {
            let s = &self.settings;
            let req = pb::RegisterRequest {
                protocol: s.protocol,
                build: s.build.clone(),
                db_fingerprint: s.dbs.fingerprint(),
                name: s.name.clone(),
                threads: s.threads as u32,
                instance: self.instance.clone(),
            };
            match self.client.clone().register(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    tracing::info!(worker = %r.worker_id, job = %r.job, "registered with the coordinator");
                    let new = Registration {
                        id: r.worker_id,
                        heartbeat: Duration::from_millis(r.heartbeat_millis.max(50) as u64),
                        pairing: r.pairing,
                        certificate_small: r.certificate_small,
                        share: (r.share_min_cells > 0).then_some((r.share_min_cells, r.share_min_nodes)),
                    };
                    *reg = Some(new.clone());
                    return Ok(new);
                }
                Err(e) => self.handle(e, "", &mut backoff).await?,
            }
        }
    }

    /// Sorts a failed call made as worker `used_id`: final refusals end the worker; an
    /// unknown worker registers again (unless another call already did); anything else
    /// waits and retries.
    async fn handle(&self, e: Status, used_id: &str, backoff: &mut Backoff) -> Result<(), CallError> {
        if self.stopping() {
            return Err(CallError::Stopped);
        }
        match e.code() {
            // INVALID_ARGUMENT: the coordinator cannot read what this worker sends (a submit
            // refused for its facts is handled where it is sent).
            Code::FailedPrecondition | Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument => {
                tracing::error!("the coordinator refused this worker: {}", e.message());
                if e.code() == Code::PermissionDenied {
                    // Found wrong: what this worker knows is suspect, its cache first.
                    if let Some(c) = &self.cache {
                        c.move_aside("distrusted");
                    }
                }
                Err(CallError::Fatal(WorkerError::Refused(e.message().to_string())))
            }
            Code::NotFound => {
                let mut reg = self.registration.lock().await;
                if reg.as_ref().is_some_and(|r| r.id == used_id) {
                    tracing::info!("the coordinator does not know this worker (restarted?); registering again");
                    *reg = None;
                }
                Ok(())
            }
            // A TLS setup that cannot work is a refusal too: retrying would not help.
            _ if cram_proto::tls_mismatch(&e, &self.settings.url).is_some() => {
                let why = cram_proto::tls_mismatch(&e, &self.settings.url).expect("checked");
                tracing::error!("cannot talk to the coordinator: {why}");
                Err(CallError::Fatal(WorkerError::Refused(why)))
            }
            _ => {
                let d = backoff.next();
                tracing::warn!(code = ?e.code(), error = %e.message(), retry_in_ms = d.as_millis() as u64, "coordinator unreachable");
                if self.pause(d).await {
                    Ok(())
                } else {
                    Err(CallError::Stopped)
                }
            }
        }
    }

    /// Leases a unit, retrying until it gets an answer.
    async fn lease(&self, slot: usize) -> Result<(Registration, lease_reply::Reply), CallError> {
        let mut backoff = Backoff::new();
        loop {
            let reg = self.registration().await?;
            let req = pb::LeaseRequest { worker_id: reg.id.clone(), slot: slot as u32 };
            match self.client.clone().lease(req).await {
                Ok(r) => match r.into_inner().reply {
                    Some(reply) => return Ok((reg, reply)),
                    None => self.handle(Status::internal("empty lease reply"), &reg.id, &mut backoff).await?,
                },
                Err(e) => self.handle(e, &reg.id, &mut backoff).await?,
            }
        }
    }

    /// Submits a result, retrying until the coordinator has it. A result the coordinator
    /// rejects as invalid is dropped (and forgotten by the cache it may have come from) and
    /// its unit handed back, to be searched again.
    /// Sends a result until the coordinator answers; true when it recorded it (false: a
    /// duplicate, or refused).
    async fn submit(&self, region: &AnyRegion, mut req: pb::SubmitRequest) -> Result<bool, CallError> {
        let mut backoff = Backoff::new();
        loop {
            req.worker_id = self.registration().await?.id;
            match self.client.clone().submit(req.clone()).await {
                Ok(r) => {
                    let r = r.into_inner();
                    self.drop_tainted(&r.distrusted).await;
                    return Ok(r.recorded);
                }
                // Refused for what it says, or too large to be read: sending it again would
                // not help. The unit goes back; the coordinator decides what to do with it.
                Err(e) if matches!(e.code(), Code::InvalidArgument | Code::OutOfRange) => {
                    tracing::error!(unit = %req.unit_id, "the coordinator rejected a result: {}", e.message());
                    if let Some(c) = &self.cache {
                        c.forget(region);
                    }
                    self.release(vec![req.unit_id], false).await;
                    return Ok(false);
                }
                Err(e) => self.handle(e, &req.worker_id, &mut backoff).await?,
            }
        }
    }

    /// Hands back every unit being searched and says goodbye (see [`Shared::release`]).
    async fn leave(&self) {
        let units: Vec<String> = self.active.lock().expect("active lock").keys().cloned().collect();
        self.release(units, true).await;
    }

    /// Hands units back (once, without retrying: the coordinator would otherwise reissue
    /// them only when their leases expire); `leaving`: the worker is shutting down.
    async fn release(&self, units: Vec<String>, leaving: bool) {
        let Some(reg) = self.registration.lock().await.clone() else { return };
        if units.is_empty() && !leaving {
            return;
        }
        let req = pb::ReleaseRequest { worker_id: reg.id, unit_ids: units.clone(), leaving };
        match tokio::time::timeout(Duration::from_secs(3), self.client.clone().release(req)).await {
            Ok(Ok(r)) => {
                tracing::info!(released = r.into_inner().released, units = ?units, "handed units back to the coordinator")
            }
            // A goodbye without units is a courtesy (the coordinator forgets a silent worker
            // anyway), and it often finds a coordinator already gone after the answer.
            Ok(Err(e)) if units.is_empty() => tracing::debug!(error = %e.message(), "could not say goodbye"),
            Err(_) if units.is_empty() => tracing::debug!("saying goodbye timed out"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e.message(), "could not hand units back; they will be reissued when their leases expire")
            }
            Err(_) => tracing::warn!("handing units back timed out; they will be reissued when their leases expire"),
        }
    }

    /// A solver for the job's settings, on the threads' shared tables if they have them
    /// (`own_table` bytes of its own otherwise).
    fn new_solver(&self, pairing: bool, own_table: usize) -> Solver {
        let mut s = Solver::new(&Config { tt_bytes: own_table, pairing }, self.settings.dbs.clone());
        if let Some(t) = self.tables.lock().expect("tables lock").as_ref() {
            s.set_shared(t);
        }
        s
    }

    /// Loads facts other workers shared into `solver`'s tables, noting their origins.
    fn preload(&self, solver: &mut Solver, known: &[pb::SharedFact]) {
        let mut loaded = self.loaded.lock().expect("loaded lock");
        let mut n = 0;
        for f in known {
            match cram_proto::shared_from_pb(f) {
                Ok(l) if !f.origin.is_empty() => {
                    solver.preload(&l.region, l.facts, l.nodes);
                    loaded.insert(f.origin.clone());
                    n += 1;
                }
                Ok(_) => tracing::warn!("a shared fact without its origin; not loaded"),
                Err(e) => tracing::warn!("a shared fact this worker cannot use: {}", e.message()),
            }
        }
        self.summary.lock().expect("summary lock").facts_loaded += n;
    }

    /// Resets (see [`Shared::reset`]) when any of `distrusted` is a worker whose facts the
    /// tables hold.
    async fn drop_tainted(&self, distrusted: &[String]) {
        let tainted: Vec<String> = {
            let loaded = self.loaded.lock().expect("loaded lock");
            distrusted.iter().filter(|w| loaded.contains(*w)).cloned().collect()
        };
        if !tainted.is_empty() {
            self.reset(&tainted).await;
        }
    }

    /// Drops everything that may rest on a distrusted worker's facts: the tables (each
    /// thread builds a new solver), the cache, and the units being searched (handed back).
    async fn reset(&self, because: &[String]) {
        tracing::warn!(distrusted = ?because, "a worker whose facts this worker loaded was found wrong: dropping the tables, the cache and the units under way");
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.loaded.lock().expect("loaded lock").clear();
        if let Some(t) = self.tables.lock().expect("tables lock").as_mut() {
            *t = SharedTables::new(self.settings.tt_bytes);
        }
        if let Some(c) = &self.cache {
            c.clear();
        }
        self.summary.lock().expect("summary lock").resets += 1;
        let units: Vec<String> = {
            let active = self.active.lock().expect("active lock");
            active.values().for_each(|a| a.cancel.store(true, Ordering::Relaxed));
            active.keys().cloned().collect()
        };
        self.release(units, false).await;
    }

    fn finish(&self, done: &pb::Done) {
        match cram_proto::done_from_pb(done) {
            Ok(a) => {
                tracing::info!(outcome = a.outcome.describe(), nimber = ?a.nimber, "the coordinator says the job is solved");
                *self.done.lock().expect("done lock") = Some(a);
            }
            Err(e) => tracing::error!(
                "the coordinator says the job is solved, with an answer this worker cannot read: {}",
                e.message()
            ),
        }
        self.stop.send_replace(true);
    }
}

/// Randomised exponential backoff from 250 ms, capped at 5 s.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const CAP: Duration = Duration::from_secs(5);

    fn new() -> Backoff {
        Backoff { next: Backoff::FIRST }
    }

    /// A delay between half and all of the current step; the step doubles up to the cap.
    fn next(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(Backoff::CAP);
        step.mul_f64(rand::random_range(0.5..=1.0))
    }
}

/// Runs a worker until the job is done, a refusal, or `shutdown` (then units are handed back).
pub async fn run(settings: Settings, shutdown: impl Future<Output = ()>) -> Result<Summary, WorkerError> {
    let cache = match &settings.cache_dir {
        Some(dir) => Some(Cache::open(dir).map_err(|e| WorkerError::Setup(format!("cache: {e}")))?),
        None => None,
    };
    if let Some(c) = &cache {
        tracing::info!(regions = c.len(), "answer cache opened");
    }
    tracing::info!(databases = %settings.dbs.describe(), fingerprint = %settings.dbs.fingerprint(), "endgame databases");
    let client = cram_proto::client(&settings.url, settings.token.as_deref(), settings.tls_ca.as_deref())
        .map_err(WorkerError::Setup)?;
    let threads = settings.threads.max(1);
    let (stop, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        client,
        registration: AsyncMutex::new(None),
        active: Mutex::new(HashMap::new()),
        stop,
        done: Mutex::new(None),
        summary: Mutex::new(Summary::default()),
        cache,
        instance: format!("{:016x}", rand::random::<u64>()),
        tables: Mutex::new(settings.shared.clone()),
        proved: settings.proved.clone(),
        settings,
        started: Instant::now(),
        loaded: Mutex::new(BTreeSet::new()),
        generation: AtomicU64::new(0),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..threads {
        tasks.spawn(search_loop(shared.clone(), i));
    }
    tasks.spawn(heartbeat_loop(shared.clone()));
    tasks.spawn(summary_loop(shared.clone()));
    if let Some(addr) = shared.settings.metrics {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| WorkerError::Setup(format!("--metrics {addr}: {e}")))?;
        tracing::info!(addr = %listener.local_addr().map_or(addr, |a| a), "serving metrics over HTTP");
        tasks.spawn(serve_metrics(shared.clone(), listener));
    }
    tokio::pin!(shutdown);
    let mut fatal = None;
    loop {
        tokio::select! {
            _ = &mut shutdown, if !shared.stopping() => {
                tracing::info!("shutdown signal: handing units back and stopping");
                // Stopping first: no thread leases anything new while the units go back.
                shared.stop.send_replace(true);
                shared.leave().await;
                cancel_all(&shared);
            }
            next = tasks.join_next() => match next {
                None => break,
                Some(Ok(Err(e))) => {
                    fatal.get_or_insert(e);
                    shared.stop.send_replace(true);
                    cancel_all(&shared);
                }
                Some(Ok(Ok(()))) => {
                    if shared.stopping() {
                        cancel_all(&shared);
                    }
                }
                Some(Err(e)) => {
                    fatal.get_or_insert(WorkerError::Setup(format!("a worker task failed: {e}")));
                    shared.stop.send_replace(true);
                    cancel_all(&shared);
                }
            },
        }
    }
    if let Some(e) = fatal {
        return Err(e);
    }
    let mut summary = shared.summary.lock().expect("summary lock").clone();
    summary.done = *shared.done.lock().expect("done lock");
    tracing::info!(
        searched = summary.searched,
        from_cache = summary.from_cache,
        unfinished = summary.unfinished,
        nodes = summary.nodes,
        facts_shared = summary.facts_shared,
        facts_loaded = summary.facts_loaded,
        resets = summary.resets,
        "worker finished"
    );
    Ok(summary)
}

fn cancel_all(shared: &Shared) {
    for a in shared.active.lock().expect("active lock").values() {
        a.cancel.store(true, Ordering::Relaxed);
    }
}

/// One search thread: lease, answer, submit, until stopped.
async fn search_loop(shared: Arc<Shared>, index: usize) -> Result<(), WorkerError> {
    // A thread's own table, unless the threads share one (which replaces it at once).
    let own_table =
        if shared.settings.shared.is_some() { 0 } else { shared.settings.tt_bytes / shared.settings.threads.max(1) };
    let mut engine: Option<(bool, u64, Searcher)> = None;
    loop {
        if shared.stopping() {
            return Ok(());
        }
        let (reg, reply) = match shared.lease(index).await {
            Ok(x) => x,
            Err(CallError::Stopped) => return Ok(()),
            Err(CallError::Fatal(e)) => return Err(e),
        };
        let unit = match reply {
            // Leased while the worker began to stop: straight back.
            lease_reply::Reply::Unit(u) if shared.stopping() => {
                shared.release(vec![u.unit_id], false).await;
                return Ok(());
            }
            lease_reply::Reply::Unit(u) => u,
            lease_reply::Reply::RetryMillis(ms) => {
                shared.pause(Duration::from_millis(ms.clamp(10, 5000) as u64)).await;
                continue;
            }
            lease_reply::Reply::Done(d) => {
                shared.finish(&d);
                return Ok(());
            }
        };
        let (region, query) = match (region_from_pb(unit.region.as_ref()), Query::from_pb(unit.query.as_ref())) {
            (Ok(r), Ok(q)) => (r, q),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(unit = %unit.unit_id, "the coordinator sent a unit this worker cannot read: {}", e.message());
                shared.pause(Duration::from_secs(1)).await;
                continue;
            }
        };
        // The job's engine settings decide the solver (a new job may change them); a reset
        // (a distrusted worker's facts in the tables) makes a new one.
        let generation = shared.generation.load(Ordering::Acquire);
        let kept = match engine.take() {
            Some((pairing, g, s)) if pairing == reg.pairing && g == generation => s,
            _ => Searcher { solver: shared.new_solver(reg.pairing, own_table), proofs: None, seen: 0 },
        };
        // A spot check is answered by a solver of its own, without shared facts: it must
        // not rest on what it checks.
        let (mut searcher, isolated) = if unit.isolated {
            let table = shared.settings.tt_bytes / shared.settings.threads.max(1);
            let solver = Solver::new(&Config { tt_bytes: table, pairing: reg.pairing }, shared.settings.dbs.clone());
            engine = Some((reg.pairing, generation, kept));
            (Searcher { solver, proofs: None, seen: 0 }, true)
        } else {
            let mut kept = kept;
            shared.preload(&mut kept.solver, &unit.known);
            if let Some(small) = reg.certificate_small {
                shared.take_proved(&mut kept, small, generation);
            }
            (kept, false)
        };
        searcher.solver.set_sharing(reg.share);
        let (mut searcher, outcome) =
            answer(&shared, searcher, &unit, region, query, index, reg.certificate_small).await;
        let learned = searcher.solver.take_learned();
        if !isolated {
            engine = Some((reg.pairing, generation, searcher));
        }
        if let Some(damage) = shared.settings.dbs.damage() {
            shared.release(vec![unit.unit_id.clone()], true).await;
            return Err(WorkerError::Database(damage.to_string()));
        }
        let Some(mut req) = outcome else { continue };
        req.shared = learned.iter().map(|l| cram_proto::shared_to_pb(l, "")).collect();
        shared.summary.lock().expect("summary lock").facts_shared += req.shared.len() as u64;
        if !isolated {
            req.uses = shared.loaded.lock().expect("loaded lock").iter().cloned().collect();
        }
        let proved = !req.proof.is_empty();
        match shared.submit(&region, req).await {
            // The coordinator keeps the proof's facts: later proofs need not carry them.
            Ok(true) if proved && !isolated => {
                if let Some((_, _, Searcher { proofs: Some(p), .. })) = engine.as_mut() {
                    shared.add_proved(generation, p.sent());
                }
            }
            Ok(_) => {}
            Err(CallError::Stopped) => return Ok(()),
            Err(CallError::Fatal(e)) => return Err(e),
        }
    }
}

/// A search thread's solver (its table kept from unit to unit) and, in a certified job,
/// the facts its earlier units' proofs found.
struct Searcher {
    solver: Solver,
    proofs: Option<Proofs>,
    /// How much of the process's log of kept facts ([`Shared::take_proved`]) the proofs
    /// hold.
    seen: usize,
}

/// Answers a unit from the cache or by search; `None` when it was cancelled. In a
/// certified job (`certificate_small`) the answer is proved after the search and the
/// cache is not used (a cached answer has no proof); nor for an isolated unit (a spot
/// check, which must not rest on what this worker loaded).
async fn answer(
    shared: &Arc<Shared>,
    searcher: Searcher,
    unit: &pb::Unit,
    region: AnyRegion,
    query: Query,
    thread: usize,
    certificate_small: Option<u32>,
) -> (Searcher, Option<pb::SubmitRequest>) {
    let Searcher { mut solver, mut proofs, seen } = searcher;
    let started = Instant::now();
    let submit = |facts: Facts, finished: bool, nodes: u64, from_cache: bool, proof: Vec<u8>| pb::SubmitRequest {
        worker_id: String::new(),
        unit_id: unit.unit_id.clone(),
        attempt: unit.attempt,
        region: Some(region_to_pb(&region)),
        facts: Some(facts_to_pb(facts)),
        finished,
        nodes,
        millis: started.elapsed().as_millis() as u64,
        from_cache,
        proof,
        shared: Vec::new(),
        uses: Vec::new(),
    };
    if let Some(cache) = shared.cache.as_ref().filter(|_| certificate_small.is_none() && !unit.isolated) {
        let known = cache.get(&region);
        if query.answered_by(known) {
            tracing::debug!(unit = %unit.unit_id, "answered from the cache");
            shared.summary.lock().expect("summary lock").from_cache += 1;
            return (Searcher { solver, proofs, seen }, Some(submit(known, true, 0, true, Vec::new())));
        }
    }
    let nodes = Arc::new(AtomicU64::new(0));
    let cancel = Arc::new(AtomicBool::new(false));
    let mine = Active { attempt: unit.attempt, nodes: nodes.clone(), cancel: cancel.clone() };
    if let Some(stale) = shared.active.lock().expect("active lock").insert(unit.unit_id.clone(), mine) {
        // This worker's earlier attempt at the unit lost its lease, or the unit would not
        // have come again: this attempt replaces it.
        stale.cancel.store(true, Ordering::Relaxed);
    }
    tracing::debug!(unit = %unit.unit_id, attempt = unit.attempt, thread, "unit started");
    let budget = if unit.node_budget == 0 { u64::MAX } else { unit.node_budget };
    let (solver, proofs, result, spent) = tokio::task::spawn_blocking(move || {
        let before = solver.nodes();
        let progress = nodes.clone();
        let reported = nodes.clone();
        solver.set_cancel(cancel);
        solver.set_budget(budget);
        solver.set_progress(Box::new(move |n| {
            reported.fetch_max(n - before, Ordering::Relaxed);
        }));
        let result = match query {
            Query::Nimber => solver.nimber(region).map(Facts::exact),
            Query::IsValue(k) => solver.is_value(region, k).map(|yes| {
                if yes {
                    Facts::exact(k)
                } else {
                    let mut b = Facts::UNKNOWN;
                    b.exclude(k);
                    b
                }
            }),
        };
        let result = result.map(|b| b.merge(solver.bounds(&region)));
        // The proof, by the same solver (its table knows what the search learnt), with no
        // budget: the answer is found, and a result without its proof is of no use here.
        let proof = match (&result, certificate_small) {
            (Ok(facts), Some(small)) => {
                solver.set_budget(u64::MAX);
                prove_unit(&mut solver, &mut proofs, &region, *facts, query, small, &progress)
            }
            _ => Ok(Vec::new()),
        };
        let spent = solver.nodes() - before;
        let result = result.and_then(|facts| proof.map(|p| (facts, p)));
        (solver, proofs, result, spent)
    })
    .await
    .expect("the search thread does not panic");
    {
        let mut active = shared.active.lock().expect("active lock");
        if active.get(&unit.unit_id).is_some_and(|a| a.attempt == unit.attempt) {
            active.remove(&unit.unit_id);
        }
    }
    {
        let mut summary = shared.summary.lock().expect("summary lock");
        summary.nodes += spent;
        match result {
            Ok(_) => summary.searched += 1,
            Err(Interrupted::Budget) => summary.unfinished += 1,
            Err(Interrupted::Cancelled | Interrupted::Database) => {}
        }
    }
    match result {
        Ok((facts, proof)) => {
            tracing::debug!(unit = %unit.unit_id, nodes = spent, ms = started.elapsed().as_millis() as u64, proof_bytes = proof.len(), "unit finished");
            if let Some(c) = &shared.cache {
                c.put(&region, facts).await;
            }
            (Searcher { solver, proofs, seen }, Some(submit(facts, true, spent, false, proof)))
        }
        Err(Interrupted::Budget) => {
            let facts = solver.bounds(&region);
            tracing::debug!(unit = %unit.unit_id, nodes = spent, "unit ran out of budget");
            (Searcher { solver, proofs, seen }, Some(submit(facts, false, spent, false, Vec::new())))
        }
        Err(Interrupted::Cancelled) => {
            tracing::debug!(unit = %unit.unit_id, nodes = spent, "unit cancelled");
            (Searcher { solver, proofs, seen }, None)
        }
        Err(Interrupted::Database) => {
            tracing::error!(unit = %unit.unit_id, "a database is damaged: {}", shared.settings.dbs.damage().unwrap_or("?"));
            (Searcher { solver, proofs, seen }, None)
        }
    }
}

/// The proof of a unit's answer (the region's value, or that it is not the value asked),
/// as a prover export for the coordinator to assemble into the job's certificate.
///
/// `proofs`: what the thread's earlier units proved (their shared facts are proved once);
/// dropped when it grows past [`MAX_KEPT_FACTS`].
fn prove_unit(
    solver: &mut Solver,
    proofs: &mut Option<Proofs>,
    region: &AnyRegion,
    answer: Facts,
    query: Query,
    small: u32,
    progress: &AtomicU64,
) -> Result<Vec<u8>, Interrupted> {
    let (h, w) = region.dims();
    let shape = Shape::of(h, w, region.dense());
    let mut prover = match proofs.take() {
        Some(p) if p.len() < MAX_KEPT_FACTS => Prover::with_proofs(solver, small, p),
        // Past the limit the thread starts afresh (and takes no more of the log than is
        // new: `seen` stays).
        _ => Prover::new(solver, small),
    };
    // A proof may take minutes of little search: each fact counts as progress in the
    // heartbeats, so the lease does not expire under it.
    prover.on_fact(|| {
        progress.fetch_add(1, Ordering::Relaxed);
    });
    match query {
        Query::IsValue(k) if answer.value() != Some(k) => prover.prove_not(&shape, k)?,
        _ => prover.prove_value(&shape)?,
    }
    let bytes = prover.export();
    *proofs = Some(prover.into_proofs());
    Ok(bytes)
}

/// Facts a search thread keeps from its earlier units' proofs (and the other threads')
/// before it starts afresh: facts already sent keep only their value, about 80 bytes
/// each, so this bounds a thread's proofs at about 2 GiB.
const MAX_KEPT_FACTS: usize = 24 << 20;

/// Reports progress of the units being searched and stops those the coordinator cancels.
async fn heartbeat_loop(shared: Arc<Shared>) -> Result<(), WorkerError> {
    let mut backoff = Backoff::new();
    loop {
        let every = shared.registration.lock().await.as_ref().map_or(Duration::from_millis(500), |r| r.heartbeat);
        if !shared.pause(every).await {
            return Ok(());
        }
        let units: Vec<pb::UnitProgress> = shared
            .active
            .lock()
            .expect("active lock")
            .iter()
            .map(|(id, a)| pb::UnitProgress {
                unit_id: id.clone(),
                attempt: a.attempt,
                nodes: a.nodes.load(Ordering::Relaxed),
            })
            .collect();
        if units.is_empty() {
            continue;
        }
        let reg = match shared.registration().await {
            Ok(r) => r,
            Err(CallError::Fatal(e)) => return Err(e),
            Err(CallError::Stopped) => return Ok(()),
        };
        match shared.client.clone().heartbeat(pb::HeartbeatRequest { worker_id: reg.id.clone(), units }).await {
            Ok(r) => {
                backoff = Backoff::new();
                let r = r.into_inner();
                if r.done {
                    // The job is solved: every search stops, and the threads' next lease
                    // brings the answer.
                    tracing::debug!("the coordinator says the job is solved; stopping the searches");
                    cancel_all(&shared);
                    continue;
                }
                shared.drop_tainted(&r.distrusted).await;
                let active = shared.active.lock().expect("active lock");
                for id in &r.cancel {
                    if let Some(a) = active.get(id) {
                        tracing::debug!(unit = %id, "the coordinator cancelled the unit");
                        a.cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
            // Searches go on while the coordinator is away; only refusals end the worker.
            Err(e) => match shared.handle(e, &reg.id, &mut backoff).await {
                Err(CallError::Fatal(e)) => return Err(e),
                Err(CallError::Stopped) => return Ok(()),
                Ok(()) => {}
            },
        }
    }
}

/// Serves `/metrics` until the worker stops.
async fn serve_metrics(shared: Arc<Shared>, listener: tokio::net::TcpListener) -> Result<(), WorkerError> {
    use axum::http::header;
    let page = {
        let shared = shared.clone();
        move || {
            let text = metrics_text(&shared);
            async move { ([(header::CONTENT_TYPE, cram_proto::metrics::CONTENT_TYPE)], text) }
        }
    };
    let app = axum::Router::new().route("/metrics", axum::routing::get(page));
    let mut stop = shared.stop.subscribe();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| WorkerError::Setup(format!("metrics server: {e}")))
}

/// The worker's Prometheus text (docs/cluster.md lists the metrics).
fn metrics_text(shared: &Shared) -> String {
    use cram_proto::metrics::Exposition;
    let s = shared.summary.lock().expect("summary lock").clone();
    let (active, in_flight) = {
        let a = shared.active.lock().expect("active lock");
        (a.len(), a.values().map(|a| a.nodes.load(Ordering::Relaxed)).sum::<u64>())
    };
    let nodes = s.nodes + in_flight;
    let mut e = Exposition::new();
    let r = |k: &'static str| [("result", k)];
    let (searched, cached, unfinished) = (r("searched"), r("from_cache"), r("unfinished"));
    e.counters(
        "cram_worker_units_total",
        "Units this worker answered, by how.",
        &[(&searched, s.searched), (&cached, s.from_cache), (&unfinished, s.unfinished)],
    );
    e.counter("cram_worker_nodes_total", "Search nodes, the units under way included.", nodes);
    e.gauge(
        "cram_worker_nodes_per_second",
        "Search nodes per second since the worker started.",
        nodes as f64 / shared.started.elapsed().as_secs_f64().max(1e-3),
    );
    e.counter("cram_worker_facts_shared_total", "Facts this worker sent for the other workers.", s.facts_shared);
    e.counter(
        "cram_worker_facts_loaded_total",
        "Facts of other workers loaded into this worker's tables.",
        s.facts_loaded,
    );
    e.gauge("cram_worker_units_active", "Units being searched now.", active as f64);
    e.gauge("cram_worker_threads", "Search threads.", shared.settings.threads as f64);
    let registered = shared.registration.try_lock().map_or(1.0, |r| r.is_some() as u8 as f64);
    e.gauge("cram_worker_registered", "1 while registered with the coordinator.", registered);
    e.finish()
}

/// Logs a one-line summary every `progress` interval.
async fn summary_loop(shared: Arc<Shared>) -> Result<(), WorkerError> {
    let mut last = (Instant::now(), 0u64);
    while shared.pause(shared.settings.progress).await {
        let s = shared.summary.lock().expect("summary lock").clone();
        let in_flight: u64 =
            shared.active.lock().expect("active lock").values().map(|a| a.nodes.load(Ordering::Relaxed)).sum();
        let total = s.nodes + in_flight;
        let rate = total.saturating_sub(last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), total);
        tracing::info!(
            "worker: {} units searched, {} from cache, {} split, {} nodes, {:.0} nodes/s",
            s.searched,
            s.from_cache,
            s.unfinished,
            total,
            rate
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_the_facts_kept_of_their_generation_once() {
        let shape = |cells: u128| Shape::of(1, 32, cells);
        let log = ProvedLog::default();
        let (mut proofs, mut seen) = (Proofs::new(12), 0);
        log.add(0, vec![(shape(0xffff), 1), (shape(0xfffff), 2)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (2, 2));
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (2, 2), "nothing new");
        log.add(0, vec![(shape(0xffffff), 0), (shape(0xffff), 1)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!((proofs.len(), seen), (3, 4), "a fact held already is not added twice");
        // A reset (a distrusted worker's facts were in the tables) starts a new log, which
        // a thread of the old generation does not take.
        log.add(1, vec![(shape(0xfffffff), 2)]);
        log.take_new(&mut proofs, &mut seen, 0);
        assert_eq!(proofs.len(), 3);
        let (mut fresh, mut from) = (Proofs::new(12), 0);
        log.take_new(&mut fresh, &mut from, 1);
        assert_eq!((fresh.len(), from), (1, 1));
    }

    #[test]
    fn backoff_is_randomised_doubling_and_capped() {
        let mut b = Backoff::new();
        let delays: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(delays[0] >= Duration::from_millis(125) && delays[0] <= Duration::from_millis(250));
        assert!(delays.iter().all(|d| *d <= Backoff::CAP));
        assert!(delays[9] >= Backoff::CAP / 2);
    }
}
