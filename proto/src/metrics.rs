//! Prometheus text exposition (format 0.0.4) for the coordinator's and workers' `/metrics`:
//! families of counters, gauges and histograms, written by hand (a few dozen lines, no
//! metrics library: the values are read from state that already exists when scraped).

use std::fmt::Write;

/// A metrics page being written: each family once, with its help and type.
#[derive(Default)]
pub struct Exposition {
    text: String,
}

/// A fixed-bucket histogram of seconds (e.g. the event log's fsync latency).
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Counts per bucket of [`Histogram::BOUNDS`] (not cumulative), then above the last.
    counts: [u64; 12],
    sum: f64,
}

impl Histogram {
    /// Upper bounds of the buckets, in seconds.
    pub const BOUNDS: [f64; 11] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

    /// Records one observation.
    pub fn observe(&mut self, secs: f64) {
        let i = Self::BOUNDS.iter().position(|&b| secs <= b).unwrap_or(Self::BOUNDS.len());
        self.counts[i] += 1;
        self.sum += secs;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Escapes a label value (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    format!("{{{}}}", inner.join(","))
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// A counter family with one sample per label set.
    pub fn counters(&mut self, name: &str, help: &str, samples: &[(&[(&str, &str)], u64)]) {
        self.family(name, "counter", help);
        for (l, v) in samples {
            let _ = writeln!(self.text, "{name}{} {v}", labels(l));
        }
    }

    /// A counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.counters(name, help, &[(&[], value)]);
    }

    /// A gauge family with one sample per label set.
    pub fn gauges(&mut self, name: &str, help: &str, samples: &[(&[(&str, &str)], f64)]) {
        self.family(name, "gauge", help);
        for (l, v) in samples {
            let _ = writeln!(self.text, "{name}{} {v}", labels(l));
        }
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.gauges(name, help, &[(&[], value)]);
    }

    /// A histogram: cumulative buckets, `+Inf`, sum and count.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.family(name, "histogram", help);
        let mut cumulative = 0;
        for (i, b) in Histogram::BOUNDS.iter().enumerate() {
            cumulative += h.counts[i];
            let _ = writeln!(self.text, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(self.text, "{name}_bucket{{le=\"+Inf\"}} {}", h.count());
        let _ = writeln!(self.text, "{name}_sum {}", h.sum);
        let _ = writeln!(self.text, "{name}_count {}", h.count());
    }

    /// The page.
    pub fn finish(self) -> String {
        self.text
    }
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_in_the_text_format() {
        let mut e = Exposition::new();
        e.counter("cram_nodes_total", "Search nodes.", 42);
        e.gauges("cram_units", "Units by state.", &[(&[("state", "pending")], 3.0), (&[("state", "a\"b")], 1.5)]);
        let mut h = Histogram::default();
        h.observe(0.0007);
        h.observe(3.0);
        e.histogram("cram_fsync_seconds", "Fsync latency.", &h);
        let t = e.finish();
        assert!(t.contains("# TYPE cram_nodes_total counter\ncram_nodes_total 42\n"), "{t}");
        assert!(t.contains("cram_units{state=\"pending\"} 3\n"), "{t}");
        assert!(t.contains("cram_units{state=\"a\\\"b\"} 1.5\n"), "{t}");
        assert!(
            t.contains("cram_fsync_seconds_bucket{le=\"0.0005\"} 0\ncram_fsync_seconds_bucket{le=\"0.001\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "cram_fsync_seconds_bucket{le=\"+Inf\"} 2\ncram_fsync_seconds_sum 3.0007\ncram_fsync_seconds_count 2\n"
            ),
            "{t}"
        );
    }
}
