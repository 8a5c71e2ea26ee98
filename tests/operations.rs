//! What the people who run the cluster see and how it is secured, with real processes:
//! Prometheus metrics scraped and parsed (coordinator and worker), the live status page in
//! a real headless Chromium (its numbers move while a job runs; a screenshot is written),
//! TLS (a worker with the right CA solves, one with another CA and a plaintext one are
//! refused with messages that say so), and results too large for gRPC's default limit.

mod common;
use common::*;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// One worker per job here: with spot checks, the coordinator would redo its first results
/// itself; these tests are about what is shown, not about trust.
const NO_CHECKS: [&str; 1] = ["--no-checks"];

/// The address a process logged for `what` ("… over HTTP addr=127.0.0.1:PORT").
fn logged_addr(log: &Path, what: &str) -> String {
    let mut found = None;
    wait_for(what, PATIENCE, || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        found = text
            .lines()
            .find(|l| l.contains(what))
            .and_then(|l| l.split("addr=").nth(1))
            .map(|a| a.split_whitespace().next().unwrap_or("").to_string());
        found.is_some()
    });
    found.unwrap()
}

/// A plain HTTP/1.1 GET; returns (status code, content type, body).
fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| l.to_lowercase().strip_prefix("content-type:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    (code, ctype, body.to_string())
}

/// What a child writes to `out`, read as it comes until `enough` holds of it, the pipe
/// closes or `secs` pass.
fn read_until(mut out: impl Read + Send + 'static, secs: u64, enough: impl Fn(&str) -> bool) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut shown = Vec::new();
    while !enough(&text(&shown)) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(bytes) => shown.extend(bytes),
            Err(_) => break,
        }
    }
    text(&shown)
}

/// The samples of a Prometheus text page, checked against the exposition format: every
/// sample's family has a `# TYPE`, values are numbers, counters are not negative, histogram
/// buckets are cumulative and end with `+Inf` equal to `_count`.
fn parse_exposition(text: &str) -> HashMap<String, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "family {name} declared twice");
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("not a number: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "bad name: {line}");
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "bad labels: {line}");
            }
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| types.get(*f).is_some_and(|k| k == "histogram")))
            .unwrap_or(name);
        let kind = types.get(family).unwrap_or_else(|| panic!("no # TYPE for {family}"));
        if kind == "counter" {
            assert!(v >= 0.0, "{line}");
        }
        samples.insert(series.to_string(), v);
    }
    for (family, kind) in &types {
        if kind != "histogram" {
            continue;
        }
        let mut buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|(s, v)| {
                let le = s.strip_prefix(&format!("{family}_bucket{{le=\""))?.strip_suffix("\"}")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{family}: buckets not cumulative");
        assert_eq!(buckets.last().map(|b| b.0), Some(f64::INFINITY), "{family}: no +Inf bucket");
        assert_eq!(buckets.last().unwrap().1, samples[&format!("{family}_count")], "{family}: +Inf is not _count");
    }
    samples
}

#[test]
fn metrics_are_prometheus_text_and_move() {
    let dir = scratch("metrics");
    let state = dir.join("state");
    let job = "5x8";
    let c = start_coordinator(
        &dir,
        &state,
        job,
        &[&NO_CHECKS[..], &["--split-depth", "3", "--metrics", "127.0.0.1:0"]].concat(),
    );
    let addr = logged_addr(&c.log, "serving metrics over HTTP");
    let (mut w, wlog) = start_worker(&dir, &c.url, &["--metrics", "127.0.0.1:0"]);
    let waddr = logged_addr(&wlog, "serving metrics over HTTP");
    wait_for("some results", 120, || results(&state).len() >= 3);
    let (code, ctype, first) = get(&addr, "/metrics");
    assert_eq!(code, 200);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let a = parse_exposition(&first);
    for name in [
        "cram_units{state=\"pending\"}",
        "cram_units{state=\"leased\"}",
        "cram_unit_events_total{kind=\"done\"}",
        "cram_results_refused_total",
        "cram_lease_expiries_total",
        "cram_nodes_total",
        "cram_nodes_per_second",
        "cram_workers",
        "cram_facts_shared_total",
        "cram_facts_handed_out_total",
        "cram_log_sync_seconds_count",
    ] {
        assert!(a.contains_key(name), "{name} missing from\n{first}");
    }
    // Results that arrive together share a sync (group commit): at least one ran, and no
    // more than one per event logged.
    let syncs = a["cram_log_sync_seconds_count"];
    assert!(syncs >= 1.0 && syncs <= events(&state).len() as f64, "{syncs} syncs");
    assert_eq!(a["cram_workers"], 1.0);
    let (code, _, wtext) = get(&waddr, "/metrics");
    assert_eq!(code, 200);
    let wm = parse_exposition(&wtext);
    assert_eq!(wm["cram_worker_threads"], 1.0);
    assert!(wm.contains_key("cram_worker_units_total{result=\"searched\"}"), "{wtext}");
    assert!(wm.contains_key("cram_worker_facts_shared_total") && wm.contains_key("cram_worker_facts_loaded_total"));
    // The numbers move while the job runs: read again until a later result shows in them
    // (however many results came between the log's count and the first reading).
    let done = "cram_unit_events_total{kind=\"done\"}";
    let mut b = a.clone();
    wait_for("the metrics to move", 120, || {
        b = parse_exposition(&get(&addr, "/metrics").2);
        b[done] > a[done] && b["cram_nodes_total"] > a["cram_nodes_total"]
    });
    // A metrics-only listener serves nothing else.
    assert_eq!(get(&addr, "/").0, 404);
    // `cram status --watch` redraws the status in the terminal: its output read as it comes
    // until the status was drawn twice (a second apart; later on a busy machine).
    let mut watch = cram_cmd()
        .args(["status", "--coordinator", &c.url, "--watch", "1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let shown = read_until(watch.stdout.take().unwrap(), PATIENCE, |s| s.matches("job 5x8 (nimber)").count() >= 2);
    kill9(&mut watch);
    assert!(shown.matches("job 5x8 (nimber)").count() >= 2 && shown.contains("\x1b[2J"), "{shown}");
    assert!(shown.contains("first moves: ") && shown.contains("......../"), "the first moves drawn: {shown}");
    result_of(c, 300);
    assert!(wait(&mut w, PATIENCE, "worker").success());
}

/// Group commit: results that reach the coordinator together are made durable by one fsync
/// of its log. A client with 24 threads leases 24 units and sends their true answers at
/// once: each is recorded and in the log when its reply comes, and the coordinator's
/// metrics count fewer syncs than results (up to three bursts: a machine busy enough to
/// serve one burst's calls one at a time gives each its own). That a reply waits for the
/// sync is `Job::commit`'s; from outside, the page cache hides the difference.
#[test]
fn results_sent_together_share_one_fsync() {
    use common::client::{truth_and_lie, ProtoClient};
    use cram_proto::pb;
    let dir = scratch("group-commit");
    let state = dir.join("state");
    let c = start_coordinator(
        &dir,
        &state,
        "5x8",
        &[&NO_CHECKS[..], &["--split-depth", "3", "--metrics", "127.0.0.1:0"]].concat(),
    );
    let addr = logged_addr(&c.log, "serving metrics over HTTP");
    let syncs = move || parse_exposition(&get(&addr, "/metrics").2)["cram_log_sync_seconds_count"];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let units = 24;
    let bursts = rt.block_on(async {
        let mut m = ProtoClient::new(&c.url, "burst");
        m.register.threads = units;
        m.register(PATIENCE).await.unwrap();
        let mut bursts = Vec::new();
        while bursts.len() < 3 {
            let mut answers = Vec::new();
            for slot in 0..units {
                let r = m.client.lease(pb::LeaseRequest { slot }).await.unwrap().into_inner();
                let Some(pb::lease_reply::Reply::Unit(u)) = r.reply else { panic!("no unit for slot {slot}: {r:?}") };
                let (right, _) = truth_and_lie(&u, u64::MAX).unwrap();
                answers.push(pb::SubmitRequest {
                    unit_id: u.unit_id.clone(),
                    attempt: u.attempt,
                    region: u.region.clone(),
                    facts: Some(cram_proto::facts_to_pb(right)),
                    finished: true,
                    nodes: 1000,
                    ..Default::default()
                });
            }
            let before = tokio::task::spawn_blocking(syncs.clone()).await.unwrap();
            let sent: Vec<_> = answers
                .into_iter()
                .map(|req| {
                    let mut client = m.client.clone();
                    let state = state.clone();
                    tokio::spawn(async move {
                        let unit = req.unit_id.clone();
                        let recorded = client.submit(req).await.unwrap().into_inner().recorded;
                        recorded && results(&state).iter().any(|r| r["unit"] == unit.as_str())
                    })
                })
                .collect();
            let mut recorded = 0;
            for s in sent {
                recorded += s.await.unwrap() as u32;
            }
            let used = tokio::task::spawn_blocking(syncs.clone()).await.unwrap() - before;
            bursts.push((recorded, used));
            if used < units as f64 {
                break;
            }
        }
        bursts
    });
    assert!(bursts.iter().all(|&(recorded, used)| recorded == units && used >= 1.0), "{bursts:?}");
    assert!(bursts.iter().any(|&(_, used)| used < units as f64), "no burst of {units} shared an fsync: {bursts:?}");
}

/// The browser, if this machine has one: `None` prints why the test is skipped, unless
/// `CRAM_REQUIRE_BROWSER` is set (CI installs Chromium and sets it), then it fails.
fn chromium() -> Option<String> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if std::process::Command::new(name).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return Some(name.to_string());
        }
    }
    assert!(std::env::var_os("CRAM_REQUIRE_BROWSER").is_none(), "no Chromium here: apt-get install chromium");
    eprintln!("skipped: no Chromium on this machine (apt-get install chromium; CI sets CRAM_REQUIRE_BROWSER)");
    None
}

/// Runs Chromium headless on `url` with `args`, letting the page's script run 3 s.
fn browse(browser: &str, url: &str, args: &[&str]) -> String {
    let profile = scratch("chromium-profile");
    let o = std::process::Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=3000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    assert!(o.status.success(), "chromium failed: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The number in the element with id `id` of a dumped page.
fn number(dom: &str, id: &str) -> u64 {
    let start = dom.find(&format!("id=\"{id}\">")).unwrap_or_else(|| panic!("no #{id} in\n{dom}")) + id.len() + 6;
    let digits: String = dom[start..].chars().take_while(|c| c.is_ascii_digit() || *c == ',').collect();
    digits.replace(',', "").parse().unwrap_or_else(|_| panic!("#{id} holds no number: {}", &dom[start..start + 40]))
}

#[test]
fn the_status_page_shows_the_job_live_in_a_browser() {
    let Some(browser) = chromium() else { return };
    let dir = scratch("page");
    let state = dir.join("state");
    let job = "5x8";
    let c = start_coordinator(
        &dir,
        &state,
        job,
        &[&NO_CHECKS[..], &["--split-depth", "3", "--http", "127.0.0.1:0"]].concat(),
    );
    let addr = logged_addr(&c.log, "serving the status page and metrics over HTTP");
    let (mut w, _) = start_worker(&dir, &c.url, &[]);
    wait_for("some results", 120, || results(&state).len() >= 2);
    let url = format!("http://{addr}/");
    let first = browse(&browser, &url, &["--dump-dom"]);
    assert!(first.contains("cram — <span id=\"job\">5x8</span>"), "{first}");
    assert!(first.contains("id=\"state\" class=\"\">running") || first.contains(">running<"), "{first}");
    assert!(first.contains("<td>1</td>"), "the worker's row (1 thread) is shown: {first}");
    let (done, nodes) = (number(&first, "done"), number(&first, "nodes"));
    assert!(nodes > 0, "{first}");
    // Without reloading: the same page's script fetches new numbers as the job runs.
    wait_for("more results", 120, || results(&state).len() >= 6);
    let later = browse(&browser, &url, &["--dump-dom"]);
    assert!(number(&later, "done") > done || number(&later, "nodes") > nodes, "numbers did not move");
    assert!(later.contains("points=\"10.0,"), "the chart was drawn: {later}");
    assert!(later.contains("class=\"move") && later.contains("<svg class=\"board\""), "first moves drawn: {later}");
    // The first moves are drawn as positions `cram solve` reads; a value shown is the
    // engine's value of that position.
    let status = status_now(&c.url);
    let moves = status["moves"].as_array().unwrap();
    assert!(moves.len() >= 5, "5x8 has more first moves than that, up to symmetry: {status}");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    browse(&browser, &url, &[&format!("--screenshot={}", shot.display()), "--window-size=1100,900"]);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "screenshot {}", shot.display());
    eprintln!("status page screenshot: {}", shot.display());
    let drawn: Vec<&str> =
        moves.iter().flat_map(|m| m["regions"].as_array().unwrap()).map(|r| r.as_str().unwrap()).collect();
    let solved = engine(&drawn, &[]);
    for m in moves {
        let regions = m["regions"].as_array().unwrap();
        let value =
            regions.iter().fold(m["xor"].as_u64().unwrap(), |x, r| x ^ solved[r.as_str().unwrap()].1.as_u64().unwrap());
        assert!(m["value"].is_null() || m["value"].as_u64() == Some(value), "{m} is worth *{value}");
    }
    result_of(c, 600);
    assert!(wait(&mut w, PATIENCE, "worker").success());
}

/// A CA and a certificate it signed for localhost and 127.0.0.1: (CA PEM, cert PEM, key PEM).
fn certificates(ca_name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[test]
fn tls_admits_the_right_ca_and_refuses_the_wrong_one_and_plaintext() {
    let dir = scratch("tls");
    let state = dir.join("state");
    let (ca, cert, key) = certificates("cram test CA");
    let (other_ca, _, _) = certificates("another CA");
    let file = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let (ca, other, cert, key) =
        (file("ca.pem", &ca), file("other.pem", &other_ca), file("cert.pem", &cert), file("key.pem", &key));
    let job = "4x7";
    let want = engine(&[job], &[]);
    let c = start_coordinator(&dir, &state, job, &[&NO_CHECKS[..], &["--tls-cert", &cert, "--tls-key", &key]].concat());
    let https = c.url.replace("http://127.0.0.1", "https://localhost");
    // Another CA: refused at once, saying why.
    let (mut w, wlog) = start_worker(&dir, &https, &["--tls-ca", &other]);
    assert_eq!(wait(&mut w, PATIENCE, "worker with another CA").code(), Some(4));
    let wl = std::fs::read_to_string(&wlog).unwrap();
    assert!(wl.contains("does not vouch for") && wl.contains("invalid peer certificate"), "{wl}");
    // Plaintext against TLS: refused, saying so.
    let (mut w, wlog) = start_worker(&dir, &c.url, &[]);
    let status = wait(&mut w, PATIENCE, "plaintext worker");
    let wl = std::fs::read_to_string(&wlog).unwrap();
    assert_eq!(status.code(), Some(4), "{status:?}: {wl}");
    assert!(wl.contains("did not answer plaintext gRPC") && wl.contains("https://"), "{wl}");
    let o = cram(&["status", "--coordinator", &https, "--tls-ca", &other]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("does not vouch for"), "{}", text(&o.stderr));
    // An https:// address needs a CA; a CA needs an https:// address.
    let o = cram(&["status", "--coordinator", &https]);
    assert!(!o.status.success() && text(&o.stderr).contains("give --tls-ca"), "{}", text(&o.stderr));
    assert!(results(&state).is_empty(), "refused workers changed nothing");
    // The right CA: status, health and a worker that solves the job.
    let v = status_json(&https, &["--tls-ca", &ca]);
    assert_eq!(v["job"], job);
    let port = c.url.rsplit(':').next().unwrap().to_string();
    let o = cram(&["health", "--addr", &format!("localhost:{port}"), "--tls-ca", &ca]);
    assert!(o.status.success() && text(&o.stdout).contains("serving"), "{}", text(&o.stderr));
    let (mut w, _) = start_worker(&dir, &https, &["--tls-ca", &ca]);
    assert_eq!(result_of(c, PATIENCE), want[job].clone());
    assert!(wait(&mut w, PATIENCE, "worker").success());
    // A key that is not one stops the coordinator before it touches a state.
    let bad = file("bad.pem", "not a key");
    let o = coordinator_once(&dir.join("other-state"), job, &["--tls-cert", &cert, "--tls-key", &bad]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("TLS: the certificate or key cannot be used"), "{}", text(&o.stderr));
    assert!(!dir.join("other-state").exists());
}

/// A certified job's results carry proofs larger than gRPC's default 4 MiB: the
/// coordinator reads them (a protocol client submits one of 6 MiB).
#[test]
fn results_larger_than_grpc_defaults_are_read() {
    use cram_proto::pb;
    let dir = scratch("large");
    let state = dir.join("state");
    let mut c = start_coordinator(&dir, &state, "5x8", &["--certificate", &dir.join("c.cert").display().to_string()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let recorded = rt.block_on(async {
        let mut c2 = common::client::ProtoClient::new(&c.url, "big");
        let reg = c2.register(PATIENCE).await.unwrap();
        assert!(reg.certificate_small.is_some(), "a certified job says so at registration");
        let unit = c2.unit().await.unwrap().expect("a unit");
        let (right, _) = common::client::truth_and_lie(&unit, u64::MAX).unwrap();
        let req = pb::SubmitRequest {
            unit_id: unit.unit_id,
            attempt: unit.attempt,
            region: unit.region,
            facts: Some(cram_proto::facts_to_pb(right)),
            finished: true,
            nodes: 1,
            millis: 1,
            from_cache: false,
            proof: vec![7; 6 << 20],
            ..Default::default()
        };
        let mut client = c2.client;
        client.submit(req).await.map(|r| r.into_inner().recorded)
    });
    // Read, and judged on what it says (its proof is no proof): not refused for its size.
    let too_large = |e: &tonic::Status| matches!(e.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange);
    assert!(!recorded.as_ref().is_err_and(too_large), "a 6 MiB result was not read: {recorded:?}");
    kill9(&mut c.child);
}

/// The cells of the rows of a Markdown table in `out` whose first cell is one of `first`.
fn table_rows(out: &str, first: &[&str]) -> Vec<Vec<String>> {
    out.lines()
        .filter(|l| first.iter().any(|f| l.starts_with(&format!("| {f} |"))))
        .map(|l| l.split('|').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
        .collect()
}

/// `cram simulate` replays a real run's job through the scheduler in virtual time: one row
/// per worker count, the first at 100 % efficiency, more workers finishing sooner while
/// units last, group commit shortening a job held up by a slow disk, and a log that is not
/// one refused with a message.
#[test]
fn simulate_scales_a_logged_run() {
    let dir = scratch("simulate");
    let state = dir.join("state");
    let st = state.display().to_string();
    let o = cram(&["solve", "5x6", "--no-db", "--workers", "2", "--state", &st, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let args = ["simulate", "--state", &st, "--no-db", "--workers", "1,4", "--split-depths", "2,3"];
    let o = cram(&[&args[..], &["--nodes-per-sec", "100000"]].concat());
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let rows = table_rows(&out, &["2", "3"]);
    assert_eq!(rows.len(), 4, "{out}");
    for pair in rows.chunks(2) {
        assert_eq!((pair[0][1].as_str(), pair[0][6].as_str()), ("1", "100 %"), "{out}");
        let makespan = |r: &Vec<String>| r[4].parse::<f64>().unwrap();
        assert!(makespan(&pair[1]) < makespan(&pair[0]), "four workers finish sooner: {out}");
    }
    // Group commit: with a slow disk, 16 workers whose results share fsyncs finish sooner
    // than with an fsync each (`--sync-group 1`, the coordinator before it).
    let makespan = |group: &str| -> f64 {
        let args = ["simulate", "--state", &st, "--no-db", "--workers", "16", "--split-depths", "3"];
        let o = cram(&[&args[..], &["--nodes-per-sec", "100000", "--fsync-ms", "20", "--sync-group", group]].concat());
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        table_rows(&out, &["3"])[0][4].parse().unwrap()
    };
    let (each, grouped) = (makespan("1"), makespan("64"));
    assert!(grouped < each * 0.8, "group commit: {grouped} s against {each} s");
    let missing = cram(&["simulate", "--state", &dir.join("nothing").display().to_string(), "--no-db"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing.stderr));
    assert!(text(&missing.stderr).contains("events.jsonl"), "{}", text(&missing.stderr));
}

/// A certified run's proofs: `cram bench --proofs` checks them again on one thread and on
/// two (all of them, adding facts), and `cram simulate` makes the answer wait for their
/// checks when checking is slow, and not when it is fast; a state directory of an
/// uncertified job is refused by the bench with a message.
#[test]
fn a_certified_runs_proofs_are_benched_and_their_checks_simulated() {
    let dir = scratch("proofs");
    let state = dir.join("state");
    let st = state.display().to_string();
    let cert = dir.join("c.cert").display().to_string();
    let o = cram(&["solve", "5x6", "--no-db", "--workers", "2", "--state", &st, "--certificate", &cert, "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cram(&["bench", "--proofs", &st, "--threads", "2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let rows = table_rows(&out, &["1", "2"]);
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r[2].parse::<f64>().unwrap() > 0.0), "facts per second: {out}");
    let first = out.lines().next().unwrap_or_default();
    let added: u64 = first.split(", ").find_map(|p| p.strip_suffix(" added")?.parse().ok()).expect("facts added");
    assert!(added > 100, "{out}");
    let waits = |rate: &str| -> Vec<f64> {
        let args = ["simulate", "--state", &st, "--no-db", "--workers", "1,4", "--nodes-per-sec", "100000"];
        let o = cram(&[&args[..], &["--check-threads", "1", "--proof-facts-per-sec", rate]].concat());
        assert!(o.status.success(), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(out.contains("proofs of"), "{out}");
        let rows = table_rows(&out, &["2"]);
        assert_eq!(rows.len(), 2, "{out}");
        rows.iter().map(|r| r[r.len() - 1].parse().unwrap()).collect()
    };
    let (slow, fast) = (waits("100"), waits("1e12"));
    assert!(slow.iter().all(|&w| w > 1.0), "checks at 100 facts a second hold the answer: {slow:?}");
    assert!(fast.iter().all(|&w| w < 0.1), "instant checks do not: {fast:?}");
    let plain = dir.join("plain").display().to_string();
    let o = cram(&["solve", "4x4", "--no-db", "--workers", "1", "--state", &plain]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = cram(&["bench", "--proofs", &plain]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("not a certified"), "{}", text(&o.stderr));
}

/// `cram solve --workers --http ADDR` serves a long local solve's status page and document,
/// as a coordinator does (the address logged when the port is 0), and answers as without
/// it; an address that cannot be bound is bad input, named with its flag.
#[test]
fn a_local_solve_serves_its_status_page() {
    let dir = scratch("local-page");
    let log = dir.join("solve.log");
    let child = cram_cmd()
        .args(["solve", "5x9", "--no-db", "--workers", "1", "--http", "127.0.0.1:0", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let addr = logged_addr(&log, "serving the status page and metrics over HTTP");
    let (code, ctype, body) = get(&addr, "/status.json");
    assert_eq!(code, 200, "{body}");
    assert!(ctype.starts_with("application/json"), "{ctype}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["job"], "5x9", "{status}");
    assert!(status["moves"].as_array().is_some_and(|m| m.len() >= 5), "5x9's first moves: {status}");
    assert_eq!(get(&addr, "/").0, 200, "the page");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", std::fs::read_to_string(&log).unwrap());
    assert_eq!(answer_of(&out.stdout), ("first".to_string(), serde_json::Value::from(1)));
    let o = cram(&["solve", "4x4", "--workers", "1", "--http", "nonsense"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("--http nonsense"), "{}", text(&o.stderr));
}
