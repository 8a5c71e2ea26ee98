//! What a running job tells people: the periodic progress line, the search rate, the
//! status page's chart and the Prometheus metrics, all read off the scheduler.

use crate::scheduler::{Scheduler, Status};
use cram_proto::metrics::{Exposition, Histogram};
use std::time::{Duration, Instant};

/// One point of the status page's chart.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Sample {
    /// Seconds since this coordinator started.
    pub secs: f64,
    /// Units done by then.
    pub done: u64,
    /// Nodes per second then.
    pub nodes_per_sec: f64,
}

/// How often the chart's history is sampled, and how many samples it keeps (then every
/// other one is dropped and the interval doubles).
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
const MAX_SAMPLES: usize = 1000;

/// The running job's rate, chart and progress lines.
pub struct Reporter {
    job: String,
    started: Instant,
    /// Nodes per second, smoothed over about ten seconds.
    rate: f64,
    /// When the rate was last sampled, and the nodes searched by then.
    rate_mark: (Instant, u64),
    /// When the last progress line was written, and the nodes searched by then.
    line_mark: (Instant, u64),
    /// The status page's chart, the interval between its samples now, and the last one.
    history: Vec<Sample>,
    sample_every: Duration,
    last_sample: Instant,
}

/// Nodes searched: those of the results held and of the units in flight.
pub fn searched_nodes(sched: &Scheduler) -> u64 {
    sched.nodes.saturating_add(sched.in_flight_nodes())
}

impl Reporter {
    /// A reporter for `job`, started at `started`, from the nodes `sched` holds (a resumed
    /// job's first rate does not count the nodes replayed).
    pub fn new(job: &str, started: Instant, sched: &Scheduler) -> Reporter {
        let now = Instant::now();
        let searched = searched_nodes(sched);
        Reporter {
            job: job.to_string(),
            started,
            rate: 0.0,
            rate_mark: (now, searched),
            line_mark: (now, searched),
            history: Vec::new(),
            sample_every: SAMPLE_EVERY,
            last_sample: now - SAMPLE_EVERY,
        }
    }

    /// The status document, with the smoothed rate.
    pub fn status(&self, sched: &mut Scheduler, now: Instant) -> Status {
        sched.status(&self.job, self.started.elapsed(), self.rate, now)
    }

    /// The status document with the chart's history, as JSON (the status page's data).
    pub fn page(&self, sched: &mut Scheduler, now: Instant) -> String {
        let mut v = serde_json::to_value(self.status(sched, now)).expect("status serialises");
        v["history"] = serde_json::to_value(&self.history).expect("samples serialise");
        v.to_string()
    }

    /// Samples the rate (at most once a second) and the chart (every interval).
    pub fn tick(&mut self, sched: &Scheduler, now: Instant) {
        if now.duration_since(self.rate_mark.0) >= Duration::from_secs(1) {
            let total = searched_nodes(sched);
            let (then, before) = std::mem::replace(&mut self.rate_mark, (now, total));
            let rate = total.saturating_sub(before) as f64 / now.duration_since(then).as_secs_f64();
            // Smoothed over about ten seconds: heartbeats report in-flight nodes in steps.
            self.rate = if self.rate == 0.0 { rate } else { 0.9 * self.rate + 0.1 * rate };
        }
        if now.duration_since(self.last_sample) >= self.sample_every {
            self.last_sample = now;
            if self.history.len() >= MAX_SAMPLES {
                self.history = self.history.iter().step_by(2).copied().collect();
                self.sample_every *= 2;
            }
            let done = sched.counters.done;
            self.history.push(Sample { secs: self.started.elapsed().as_secs_f64(), done, nodes_per_sec: self.rate });
        }
    }

    /// The periodic one-line summary. Its nodes are those searched (results and units in
    /// flight), its rate theirs since the previous line: lines minutes apart, where the
    /// status page's ten-second rate would be one moment's.
    pub fn progress_line(&mut self, sched: &mut Scheduler) -> String {
        let now = Instant::now();
        let searched = searched_nodes(sched);
        let (then, before) = std::mem::replace(&mut self.line_mark, (now, searched));
        let secs = now.duration_since(then).as_secs_f64().max(1e-3);
        let rate = searched.saturating_sub(before) as f64 / secs;
        let status = sched.status(&self.job, self.started.elapsed(), rate, now);
        let u = &status.units;
        let eta = match status.eta_secs {
            None => "unknown".to_string(),
            Some(e) if status.eta_lower_bound => format!("≥ {e} s (more units to come)"),
            Some(e) => format!("{e} s"),
        };
        let known = status.first_moves_known();
        format!(
            "{}: units {}/{} done ({} leased, {} split, {} cached, {} checking, {} refused), {} nodes, {:.0} nodes/s, {} workers, root {}, first moves {}/{} known, ETA {}",
            status.job,
            u.counters.done,
            u.total,
            u.leased,
            u.counters.split,
            u.counters.from_cache,
            u.checking,
            u.counters.refused,
            searched,
            status.nodes_per_sec,
            status.workers.len(),
            status.root,
            known,
            status.moves.len(),
            eta
        )
    }

    /// The Prometheus text (docs/cluster.md lists the metrics); `fsync`: how long the
    /// log's appends took.
    pub fn metrics(&self, sched: &mut Scheduler, fsync: &Histogram, now: Instant) -> String {
        let s = self.status(sched, now);
        let c = &s.units.counters;
        let mut e = Exposition::new();
        let state = |st: &'static str| [("state", st)];
        let (pending, leased, checking) = (state("pending"), state("leased"), state("checking"));
        e.gauges(
            "cram_units",
            "Open units by state.",
            &[
                (&pending, s.units.pending as f64),
                (&leased, s.units.leased as f64),
                (&checking, s.units.checking as f64),
            ],
        );
        let kind = |k: &'static str| [("kind", k)];
        let kinds = [
            kind("done"),
            kind("split"),
            kind("from_cache"),
            kind("duplicate"),
            kind("cancelled"),
            kind("released"),
            kind("backup"),
        ];
        let values = [c.done, c.split, c.from_cache, c.duplicates, c.cancelled, c.released, c.backups];
        let samples: Vec<(&[(&str, &str)], u64)> = kinds.iter().zip(values).map(|(k, v)| (&k[..], v)).collect();
        e.counters("cram_unit_events_total", "Units answered, split, cancelled, … since the job began.", &samples);
        e.counter(
            "cram_results_refused_total",
            "Results refused (contradicting held facts, or impossible).",
            c.refused,
        );
        e.counter("cram_lease_expiries_total", "Leases that expired without a result.", c.expired);
        e.counter(
            "cram_checks_total",
            "The coordinator's own searches (verifications, disputes, conflicts, shared facts).",
            c.checks,
        );
        e.counter("cram_check_nodes_total", "Search nodes of the coordinator's own searches.", c.check_nodes);
        e.counter(
            "cram_nodes_total",
            "Search nodes of every result held and of the coordinator's own searches.",
            s.nodes,
        );
        e.gauge(
            "cram_nodes_per_second",
            "Search speed over all workers, smoothed over about ten seconds.",
            s.nodes_per_sec,
        );
        e.counter(
            "cram_facts_shared_total",
            "Facts workers sent for the others (knowledge shared across machines) since the job began.",
            c.facts_shared,
        );
        e.counter(
            "cram_facts_handed_out_total",
            "Shared facts handed to workers with their leases by this coordinator process.",
            c.facts_handed_out,
        );
        e.gauge("cram_workers", "Workers heard from recently.", s.workers.len() as f64);
        e.gauge("cram_workers_distrusted", "Workers found wrong and disconnected.", s.distrusted.len() as f64);
        e.gauge("cram_job_solved", "1 once the answer is known.", s.answer.is_some() as u8 as f64);
        e.gauge(
            "cram_eta_seconds",
            "Seconds to answer the units open now (-1: unknown); a lower bound when cram_eta_lower_bound is 1.",
            s.eta_secs.map_or(-1.0, |x| x as f64),
        );
        e.gauge(
            "cram_eta_lower_bound",
            "1 when more units are certain to follow those open now, so the job needs longer than cram_eta_seconds.",
            s.eta_lower_bound as u8 as f64,
        );
        e.gauge("cram_first_moves", "First moves of the root, each once up to symmetry.", s.moves.len() as f64);
        e.gauge("cram_first_moves_known", "First moves whose value is known.", s.first_moves_known() as f64);
        e.histogram(
            "cram_log_sync_seconds",
            "Time to fsync the log once (the events written together since the last).",
            fsync,
        );
        e.finish()
    }
}
