//! Small helpers for reports: peak memory, number formatting and a terminal progress line.

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Memory the system reports available for new work (Linux `MemAvailable`), in MiB.
pub fn available_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Peak resident memory in MiB (0 when unknown).
pub fn peak_rss_mib() -> u64 {
    peak_rss_bytes().unwrap_or(0) / (1 << 20)
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A progress callback that redraws one status line on stderr when it is a terminal,
/// at most four times a second; `None` when stderr is not a terminal.
pub fn terminal_progress(label: String) -> Option<Box<dyn FnMut(u64) + Send>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let start = Instant::now();
    let mut last = start;
    Some(Box::new(move |nodes| {
        let now = Instant::now();
        if now.duration_since(last).as_millis() < 250 {
            return;
        }
        last = now;
        let secs = now.duration_since(start).as_secs_f64();
        let rate = nodes as f64 / secs.max(1e-9);
        let mut e = std::io::stderr();
        let _ = write!(e, "\r\x1b[2K{label}: {} nodes, {:.2} M nodes/s, {secs:.1} s", thousands(nodes), rate / 1e6);
        let _ = e.flush();
    }))
}

/// Erases the progress line, when one may have been drawn.
pub fn clear_progress() {
    if std::io::stderr().is_terminal() {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn reads_peak_memory() {
        assert!(peak_rss_bytes().unwrap_or(1) > 0);
    }
}
