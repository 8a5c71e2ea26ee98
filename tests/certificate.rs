//! `cram solve --certificate` and `cram check` as real processes: a certificate written by
//! a solve is accepted and proves the printed answer; a damaged, cut, forged or missing one
//! is refused with exit code 3 (2 for a file that cannot be read), the byte or fact named;
//! a forged header or a decompression bomb is refused within a small address space.

use cram_certificate::format::{max_raw_len, reseal, wrap};
use cram_certificate::{Certificate, Claim};
use std::path::PathBuf;
use std::process::{Command, Output};

fn cram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cram")).args(args).env_remove("CRAM_DB_DIR").output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cram-cert-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Solves `spec` with a certificate into `dir`; returns the certificate's path and the
/// solve's JSON record.
fn solve_certified(dir: &std::path::Path, spec: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let file = dir.join("c.cert");
    let mut args = vec!["solve", spec, "--no-db", "--json", "--certificate", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = cram(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    (file, serde_json::from_str(text(&o.stdout).trim()).unwrap())
}

#[test]
fn a_solve_writes_a_certificate_that_checks() {
    let dir = scratch("ok");
    for (spec, extra) in [("4x7", &[][..]), ("3x9", &["--threads", "2"][..]), ("..#..../......./.......", &[][..])] {
        let (file, solved) = solve_certified(&dir, spec, extra);
        let c = &solved["certificate"];
        assert!(c["facts"].as_u64().unwrap() > 0 && c["bytes"].as_u64().unwrap() > 64, "{solved}");
        let o = cram(&["check", file.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{spec}: {}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
        assert_eq!(v["nimber"], solved["nimber"], "{spec}");
        assert_eq!(v["outcome"], solved["outcome"], "{spec}");
        assert_eq!(v["facts"], c["facts"]);
        assert_eq!(v["position"], spec);
        // The text form names the position and the value.
        let o = cram(&["check", file.to_str().unwrap(), "--threads", "1"]);
        let out = text(&o.stdout);
        assert!(out.starts_with(&format!("{spec}: ")) && out.contains("checked"), "{out}");
    }
}

#[test]
fn an_outcome_certificate_proves_who_wins() {
    let dir = scratch("outcome");
    let (file, solved) = solve_certified(&dir, "4x5", &["--outcome-only"]);
    assert!(solved["nimber"].is_null());
    let o = cram(&["check", file.to_str().unwrap()]);
    assert!(
        o.status.success() && text(&o.stdout).contains("4x5: first player wins — certificate"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn damaged_cut_and_forged_certificates_are_refused() {
    let dir = scratch("bad");
    let (file, _) = solve_certified(&dir, "4x6", &["--certificate-small", "6"]);
    let bytes = std::fs::read(&file).unwrap();
    let path = dir.join("bad.cert");
    // Every thread count names the same byte or fact: the first refused in the file (a
    // forged fact also fails the facts that rest on it, later in the file).
    let refused = |b: &[u8], says: &str| {
        std::fs::write(&path, b).unwrap();
        for threads in ["1", "2", "5"] {
            let o = cram(&["check", path.to_str().unwrap(), "--threads", threads]);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(3), "{says}: {err}");
            assert!(
                err.contains("certificate refused") && err.contains(says),
                "wanted {says:?}, {threads} threads: {err}"
            );
        }
    };
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    refused(&flipped, "chunk 0 (bytes");
    refused(&bytes[..bytes.len() / 2], "truncated");
    refused(b"hello", "not a cram certificate");
    // A forged fact with every checksum right: a value changed, a fact dropped.
    let cert = Certificate::from_bytes(&bytes).unwrap();
    assert_eq!(cert.claim, Claim::Nimber(0));
    let mut forged = cert.clone();
    let i = forged.facts.len() / 2;
    forged.facts[i].value ^= 1;
    refused(&forged.to_bytes(), &format!("fact {i} ("));
    let mut dropped = cert.clone();
    dropped.facts.remove(0);
    refused(&dropped.to_bytes(), "without a fact");
    let mut claim = cert;
    claim.claim = Claim::Nimber(2);
    refused(&claim.to_bytes(), "the position 4x6: its regions add up to *0, not *2");
    // A file that is not there is bad input.
    let o = cram(&["check", dir.join("none.cert").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

#[test]
fn certificate_arguments_are_checked() {
    let o = cram(&["solve", "3x4", "4x4", "--certificate", "x.cert"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("exactly one spec"), "{}", text(&o.stderr));
    let o = cram(&["solve", "3x4", "--certificate", "x.cert", "--certificate-small", "40"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A zstd frame of `blocks` blocks of 128 KiB of zeros, 4 bytes each (RLE blocks): 2 GiB in
/// 64 KiB with 16,384 blocks.
fn zeros_frame(blocks: usize) -> Vec<u8> {
    // Magic; frame header: no content size, no single segment, a window of 2^17 bytes.
    let mut f = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (17 - 10) << 3];
    for i in 0..blocks {
        let header = (i + 1 == blocks) as u32 | 1 << 1 | (128 << 10) << 3;
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(0);
    }
    f
}

/// `bytes` with the header's u64 at `at` set to `v`, its checksum made right.
fn with_field(bytes: &[u8], at: usize, v: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    reseal(&mut b);
    b
}

#[test]
fn forged_headers_and_bombs_are_refused_in_a_small_address_space() {
    let dir = scratch("forged");
    // 4x7's certificate is 6.6 KB.
    let (file, _) = solve_certified(&dir, "4x7", &[]);
    let bytes = std::fs::read(&file).unwrap();
    let bomb = zeros_frame(16384);
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        // A compressed length near u64::MAX: the chunk table's length overflows.
        ("overflow", with_field(&bytes, 16, u64::MAX - 5), "more than any file holds".into()),
        // A body of 2^36 bytes announced on 6.6 KB.
        ("huge-body", with_field(&bytes, 24, 1 << 36), "bytes uncompressed (bytes 24-31)".into()),
        // More facts than the body holds.
        ("facts", with_field(&bytes, 32, u64::MAX), "facts (bytes 32-39)".into()),
        // 64 KiB that decompress to 2 GiB, announced as 2 GiB, or as the most 64 KiB may hold.
        ("bomb-announced", wrap(&bomb, 2 << 30, 0), "bytes uncompressed (bytes 24-31)".into()),
        (
            "bomb",
            wrap(&bomb, max_raw_len(bomb.len() as u64), 0),
            format!("decompresses to more than {} bytes", max_raw_len(bomb.len() as u64)),
        ),
    ];
    for (name, b, says) in cases {
        let path = dir.join(format!("{name}.cert"));
        std::fs::write(&path, &b).unwrap();
        for threads in ["1", "2"] {
            // 1 GB of address space: the bomb, read whole, would need 2 GiB.
            let o = Command::new("sh")
                .args(["-c", "ulimit -v 1000000; exec \"$0\" check \"$1\" --threads \"$2\""])
                .args([env!("CARGO_BIN_EXE_cram"), path.to_str().unwrap(), threads])
                .output()
                .unwrap();
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(3), "{name}: {err}");
            assert!(err.contains("certificate refused") && err.contains(&says), "{name}: wanted {says:?}: {err}");
            assert!(!err.contains("panicked"), "{name}: {err}");
        }
    }
}
