//! The coordinator–worker protocol (`cram.proto`, gRPC via tonic/prost) and what both sides
//! share: the protocol version, conversions between wire messages and engine types with
//! validation of everything that arrives, the bearer-token check, and the
//! Prometheus text both sides serve ([`metrics`]).

#![warn(missing_docs)]

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::{Outcome, Query, Question, SharedFact, Solution};
use std::path::Path;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

pub mod metrics;

/// Generated messages and service stubs.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("cram.v1");
}

/// Bumped on every incompatible change of `cram.proto` or of what a unit means.
pub const PROTOCOL_VERSION: u32 = 5;

/// The most shared facts one result may carry: the coordinator refuses more, a worker
/// sends its costliest.
pub const MAX_SHARED_PER_RESULT: usize = 10_000;

/// The largest message either side accepts: a certified job's results carry proofs of
/// many megabytes (gRPC's default limit is 4 MiB).
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The build a worker must match: same package version and engine, so that both sides
/// agree on canonical forms and on what a search does.
pub const BUILD_ID: &str = concat!("cram-", env!("CARGO_PKG_VERSION"));

/// The wire form of a canonical region.
pub fn region_to_pb(r: &AnyRegion) -> pb::Region {
    let (h, w) = r.dims();
    let dense = r.dense().to_le_bytes();
    let len = dense.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    pb::Region { height: h, width: w, cells: dense[..len].to_vec() }
}

/// A region from the wire, checked: a nonempty, connected set inside its box of at most
/// 128 cells, returned in canonical form.
pub fn region_from_pb(r: Option<&pb::Region>) -> Result<AnyRegion, Status> {
    let r = r.ok_or_else(|| Status::invalid_argument("missing region"))?;
    if r.cells.len() > 16 {
        return Err(Status::invalid_argument("region cells longer than 16 bytes"));
    }
    let mut bytes = [0u8; 16];
    bytes[..r.cells.len()].copy_from_slice(&r.cells);
    AnyRegion::from_dense(r.height, r.width, u128::from_le_bytes(bytes))
        .ok_or_else(|| Status::invalid_argument(format!("not a connected region of a {}x{} box", r.height, r.width)))
}

/// The wire form of what is known of a nimber.
pub fn facts_to_pb(b: Facts) -> pb::Facts {
    pb::Facts { excluded: b.excluded, upper: b.upper as u32 }
}

/// Facts from the wire (an upper bound above 255 means none).
pub fn facts_from_pb(f: Option<&pb::Facts>) -> Facts {
    f.map_or(Facts::UNKNOWN, |f| Facts { excluded: f.excluded, upper: f.upper.min(255) as u8 })
}

/// The wire form of a shared fact.
pub fn shared_to_pb(l: &SharedFact) -> pb::SharedFact {
    pb::SharedFact { region: Some(region_to_pb(&l.region)), facts: Some(facts_to_pb(l.facts)), nodes: l.nodes }
}

/// A shared fact from the wire: the region must be one, and the facts must leave it a
/// possible value (contradictory facts come only from a faulty worker).
pub fn shared_from_pb(f: &pb::SharedFact) -> Result<SharedFact, Status> {
    let region = region_from_pb(f.region.as_ref())?;
    let fact = SharedFact { region, facts: facts_from_pb(f.facts.as_ref()), nodes: f.nodes };
    if !fact.is_possible() {
        return Err(Status::invalid_argument(format!("shared facts about {} leave it no value", region.key())));
    }
    Ok(fact)
}

/// The wire form of a job's answer.
pub fn done_to_pb(a: Solution) -> pb::Done {
    pb::Done { outcome: a.outcome.to_string(), nimber: a.nimber.map(u32::from) }
}

/// A job's answer from the wire, checked: a known outcome word, a nimber below 256 that
/// agrees with it.
pub fn done_from_pb(d: &pb::Done) -> Result<Solution, Status> {
    let outcome: Outcome = d.outcome.parse().map_err(|e| Status::invalid_argument(format!("{e}")))?;
    let nimber = d.nimber.map(u8::try_from).transpose().map_err(|_| Status::invalid_argument("nimber above 255"))?;
    if nimber.is_some_and(|n| Outcome::of_nimber(n) != outcome) {
        return Err(Status::invalid_argument("the nimber and the outcome disagree"));
    }
    Ok(Solution { outcome, nimber })
}

/// The wire form of a query.
pub fn query_to_pb(q: Query) -> pb::unit::Query {
    match q {
        Query::Nimber => pb::unit::Query::Nimber(true),
        Query::IsValue(k) => pb::unit::Query::IsValue(k as u32),
    }
}

/// A query from the wire; a missing query or a value above 255 is invalid.
pub fn query_from_pb(q: Option<&pb::unit::Query>) -> Result<Query, Status> {
    match q {
        Some(pb::unit::Query::Nimber(_)) => Ok(Query::Nimber),
        Some(pb::unit::Query::IsValue(k)) if *k <= 255 => Ok(Query::IsValue(*k as u8)),
        _ => Err(Status::invalid_argument("unit without a valid query")),
    }
}

/// The question a unit name stands for.
pub fn question_from_pb(id: &str) -> Result<Question, Status> {
    id.parse().map_err(|e: cram_engine::question::BadQuestion| Status::invalid_argument(e.to_string()))
}

/// Reads a token file: its content without surrounding whitespace, which must not be empty.
pub fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(format!("token file {}: empty or contains whitespace", path.display()));
    }
    Ok(token.to_string())
}

/// The metadata key of a worker's secret (see cram.proto).
pub const WORKER_SECRET: &str = "x-cram-worker";

/// A worker secret: 64 random hex digits, drawn once per worker process.
pub fn new_worker_secret() -> String {
    rand::random::<[u8; 32]>().iter().map(|b| format!("{b:02x}")).collect()
}

/// The part of a worker's id its secret makes: the first 16 hex digits of the secret's
/// SHA-256. Knowing it does not let anyone speak for the worker.
pub fn secret_digest(secret: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The calling worker, known by the secret in the request's metadata (its digest), or
/// UNAUTHENTICATED when the request carries none that can be one (32 to 128 printable
/// characters).
pub fn caller_of(metadata: &tonic::metadata::MetadataMap) -> Result<String, Status> {
    let secret = metadata.get(WORKER_SECRET).and_then(|v| v.to_str().ok());
    match secret {
        Some(s) if (32..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic()) => Ok(secret_digest(s)),
        _ => Err(Status::unauthenticated(format!("a worker's call must carry its secret in `{WORKER_SECRET}`"))),
    }
}

/// A client interceptor that adds `authorization: Bearer <token>` and a worker's secret
/// (`x-cram-worker`) to every request.
#[derive(Clone)]
pub struct AddToken {
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    secret: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl AddToken {
    /// An interceptor for `token` and a worker's `secret` (none: requests go out without).
    pub fn new(token: Option<&str>, secret: Option<&str>) -> Result<AddToken, String> {
        let value = token
            .map(|t| format!("Bearer {t}").parse().map_err(|_| "token is not printable ASCII".to_string()))
            .transpose()?;
        let secret =
            secret.map(|s| s.parse().map_err(|_| "a worker secret is not printable ASCII".to_string())).transpose()?;
        Ok(AddToken { token: value, secret })
    }
}

impl tonic::service::Interceptor for AddToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.token {
            req.metadata_mut().insert("authorization", v.clone());
        }
        if let Some(v) = &self.secret {
            req.metadata_mut().insert(WORKER_SECRET, v.clone());
        }
        Ok(req)
    }
}

/// True when the request carries `authorization: Bearer <token>` (compared in constant time).
pub fn has_token(req: &Request<()>, token: &str) -> bool {
    let Some(given) = req.metadata().get("authorization").and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let expected = format!("Bearer {token}");
    given.len() == expected.len() && given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The client type both workers and `cram status` use.
pub type Client = pb::coordinator_client::CoordinatorClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, AddToken>,
>;

/// How often each side of a connection pings the other, and how long it waits for the
/// answer before it closes the connection as dead.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// The endpoint of a coordinator at `url`: plaintext for `http://`, TLS for `https://`
/// with `tls_ca` (PEM) the certificate authority its certificate must be signed by.
pub fn endpoint(url: &str, tls_ca: Option<&[u8]>) -> Result<tonic::transport::Endpoint, String> {
    let e = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("coordinator address {url:?}: {e}"))?
        .connect_timeout(std::time::Duration::from_secs(5))
        // A connection whose peer vanished without a word (a network cut, the client's
        // address changed, the coordinator's machine lost) is found dead by its pings and
        // replaced on the next call; without them every call on it times out, forever.
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_timeout(KEEPALIVE)
        .keep_alive_while_idle(true);
    match (url.starts_with("https://"), tls_ca) {
        (true, Some(ca)) => {
            // A handshake the coordinator never finishes is given up, not waited on for as
            // long as TCP keeps the connection.
            let tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                .timeout(std::time::Duration::from_secs(10));
            e.tls_config(tls).map_err(|e| format!("TLS settings for {url}: {e}"))
        }
        (true, None) => Err(format!(
            "{url} is a TLS address: give --tls-ca, the certificate authority that signed the coordinator's certificate"
        )),
        (false, Some(_)) => Err(format!("--tls-ca is for a TLS coordinator: write its address as https://, not {url}")),
        (false, None) => Ok(e),
    }
}

/// Connects to a coordinator at `url` now (TLS with `tls_ca`, see [`endpoint`]), adding
/// `token` to every call (a client that is not a worker: `cram status`).
pub async fn connect(url: &str, token: Option<&str>, tls_ca: Option<&[u8]>) -> Result<Client, String> {
    let channel = endpoint(url, tls_ca)?
        .timeout(std::time::Duration::from_secs(30))
        .connect()
        .await
        .map_err(|e| format!("cannot reach the coordinator at {url}: {}", why(&e)))?;
    Ok(pb::coordinator_client::CoordinatorClient::with_interceptor(channel, AddToken::new(token, None)?)
        .max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// A worker's client for a coordinator at `url`, carrying `token` and the worker's
/// `secret` on every call; it connects on first use and reconnects after failures (calls
/// fail with UNAVAILABLE while the coordinator is away). Its calls have no time limit of
/// their own: the worker gives each one the time it needs (a large proof takes longer).
pub fn client(url: &str, token: Option<&str>, secret: &str, tls_ca: Option<&[u8]>) -> Result<Client, String> {
    let channel = endpoint(url, tls_ca)?.connect_lazy();
    Ok(pb::coordinator_client::CoordinatorClient::with_interceptor(channel, AddToken::new(token, Some(secret))?)
        .max_decoding_message_size(MAX_MESSAGE_BYTES))
}

/// What failed, down the chain of causes (a TLS failure is a few levels below the
/// transport error that carries it).
pub fn why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = c.source();
    }
    parts.join(": ")
}

/// When a failed call shows a TLS setup that cannot work — the coordinator's certificate
/// not signed by the CA given, or one side speaking TLS and the other not — what to tell
/// the user; `None` for any other failure (a coordinator away, a network fault).
pub fn tls_mismatch(status: &Status, url: &str) -> Option<String> {
    let text = match std::error::Error::source(status) {
        Some(e) => why(e),
        None => status.message().to_string(),
    };
    tls_mismatch_in(&text, url)
}

/// [`tls_mismatch`] of an error already written out (e.g. a failed connection's).
pub fn tls_mismatch_in(text: &str, url: &str) -> Option<String> {
    let lower = text.to_lowercase();
    if lower.contains("invalid peer certificate") || lower.contains("certificate") && lower.contains("unknown") {
        return Some(format!(
            "TLS: the coordinator at {url} has a certificate that --tls-ca does not vouch for ({text}); give the CA that signed it"
        ));
    }
    if url.starts_with("https://")
        && (lower.contains("corrupt message")
            || lower.contains("invalidcontenttype")
            || lower.contains("wrong version"))
    {
        return Some(format!("TLS: the coordinator at {url} does not speak TLS ({text}); use an http:// address, or start it with --tls-cert and --tls-key"));
    }
    if url.starts_with("http://") && lower.contains("frame with invalid size") {
        return Some(format!("TLS: the coordinator at {url} did not answer plaintext gRPC ({text}); if it uses TLS, write https:// and give --tls-ca"));
    }
    None
}

/// Seconds since the Unix epoch.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Renames `path` to `<path>.<why>-<unix time>` (kept for inspection, out of the way) and
/// returns the new name.
pub fn move_aside(path: &Path, why: &str) -> Result<std::path::PathBuf, String> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{why}-{}", unix_secs()));
    let aside = std::path::PathBuf::from(name);
    std::fs::rename(path, &aside).map_err(|e| format!("cannot move {} aside: {e}", path.display()))?;
    Ok(aside)
}

/// Opens a sled database with the given cache size (sled's default is 1 GiB). One held by
/// another process, or that the system will not let us use (permissions, a full disk, too
/// many open files), is an error naming that; one that cannot be opened otherwise (damaged by
/// a hard kill) is moved aside to `<path>.corrupt-<time>` with a warning and started afresh —
/// both of cram's sled databases can be rebuilt (the coordinator's from its event log, a
/// worker's cache by searching again).
pub fn open_sled(path: &Path, cache_bytes: u64) -> Result<sled::Db, String> {
    fn is_environment_error(e: &std::io::Error) -> bool {
        use std::io::ErrorKind::*;
        matches!(
            e.kind(),
            PermissionDenied | StorageFull | QuotaExceeded | ReadOnlyFilesystem | OutOfMemory | Interrupted
        ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE: too many open files
    }
    let open = || {
        let config = sled::Config::new().path(path).cache_capacity(cache_bytes);
        // sled can panic on some damaged files instead of returning an error.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| config.open()))
            .unwrap_or_else(|_| Err(sled::Error::Unsupported("sled panicked while opening".into())))
    };
    match open() {
        Ok(db) => Ok(db),
        Err(sled::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("lock") => {
            Err(format!("{} is in use by another process ({e})", path.display()))
        }
        // Not the files' fault: moving them aside would lose them for nothing.
        Err(sled::Error::Io(e)) if is_environment_error(&e) => Err(format!("{}: {e}", path.display())),
        Err(e) => {
            let aside = move_aside(path, "corrupt")?;
            tracing::warn!(path = %path.display(), moved_to = %aside.display(), error = %e, "sled database cannot be opened; moved it aside, starting afresh");
            open().map_err(|e| format!("{}: {e}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cram_engine::solver::board_regions;
    use cram_engine::Board;

    #[test]
    fn regions_survive_the_wire_and_bad_ones_are_refused() {
        for spec in ["3x11", "4x8", "8x16", "1x128", "..#/.../#.."] {
            for r in board_regions(&Board::parse(spec).unwrap()).0 {
                assert_eq!(region_from_pb(Some(&region_to_pb(&r))).unwrap(), r, "{spec}");
            }
        }
        let bad = |h, w, cells: Vec<u8>| region_from_pb(Some(&pb::Region { height: h, width: w, cells })).is_err();
        assert!(bad(2, 2, vec![0b1001]));
        assert!(bad(2, 2, vec![]));
        assert!(bad(1, 2, vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        assert!(bad(200, 1, vec![1]));
        assert!(region_from_pb(None).is_err());
    }

    #[test]
    fn queries_and_facts_survive_the_wire() {
        let not_two = Facts::excluding(2);
        assert_eq!(facts_from_pb(Some(&facts_to_pb(not_two))), not_two);
        assert_eq!(query_from_pb(Some(&query_to_pb(Query::IsValue(7)))).unwrap(), Query::IsValue(7));
        assert!(query_from_pb(Some(&pb::unit::Query::IsValue(300))).is_err());
        assert!(query_from_pb(None).is_err());
        assert!(question_from_pb("3x7:1fffff?2").is_ok());
        assert_eq!(question_from_pb("3x7:1fffff").unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn answers_survive_the_wire_and_bad_ones_are_refused() {
        for a in [
            Solution { outcome: Outcome::First, nimber: Some(3) },
            Solution { outcome: Outcome::First, nimber: None },
            Solution { outcome: Outcome::Second, nimber: Some(0) },
        ] {
            assert_eq!(done_from_pb(&done_to_pb(a)).unwrap(), a);
        }
        let bad = |outcome: &str, nimber| done_from_pb(&pb::Done { outcome: outcome.into(), nimber }).is_err();
        assert!(bad("First", None));
        assert!(bad("first", Some(0)));
        assert!(bad("second", Some(2)));
        assert!(bad("first", Some(300)));
    }

    #[test]
    fn tokens() {
        let secret = new_worker_secret();
        let mut add = AddToken::new(Some("s3cret"), Some(&secret)).unwrap();
        let req = tonic::service::Interceptor::call(&mut add, Request::new(())).unwrap();
        assert!(has_token(&req, "s3cret"));
        assert!(!has_token(&req, "s3creT"));
        assert!(!has_token(&Request::new(()), "s3cret"));
        // The worker is known by its secret's digest; a request without one is not a worker's.
        assert_eq!(caller_of(req.metadata()).unwrap(), secret_digest(&secret));
        assert_eq!(secret_digest(&secret).len(), 16);
        assert_ne!(secret_digest(&secret), secret_digest(&new_worker_secret()));
        assert_eq!(caller_of(Request::new(()).metadata()).unwrap_err().code(), tonic::Code::Unauthenticated);
    }
}
