//! What a worker tells people: Prometheus text at `/metrics` (docs/cluster.md lists the
//! metrics) and a periodic one-line summary in its log.

use crate::{Worker, WorkerError};
use cram_proto::metrics::Exposition;
use std::sync::Arc;
use std::time::Instant;

/// Serves `/metrics` until the worker stops.
pub async fn serve(worker: Arc<Worker>, listener: tokio::net::TcpListener) -> Result<(), WorkerError> {
    use axum::http::header;
    let page = {
        let worker = worker.clone();
        move || {
            let worker = worker.clone();
            async move { ([(header::CONTENT_TYPE, cram_proto::metrics::CONTENT_TYPE)], text(&worker).await) }
        }
    };
    let app = axum::Router::new().route("/metrics", axum::routing::get(page));
    let mut stop = worker.stop.subscribe();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| WorkerError::Setup(format!("metrics server: {e}")))
}

/// The worker's Prometheus text.
async fn text(worker: &Worker) -> String {
    let s = worker.summary.lock().expect("summary lock").clone();
    let (active, in_flight) = worker.underway.load();
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
        nodes as f64 / worker.started.elapsed().as_secs_f64().max(1e-3),
    );
    e.counter("cram_worker_facts_shared_total", "Facts this worker sent for the other workers.", s.facts_shared);
    e.counter(
        "cram_worker_facts_loaded_total",
        "Facts of other workers loaded into this worker's tables.",
        s.facts_loaded,
    );
    e.gauge("cram_worker_units_active", "Units being searched now.", active as f64);
    e.gauge("cram_worker_threads", "Search threads.", worker.settings.threads as f64);
    let registered = worker.link.current().await.is_some();
    e.gauge("cram_worker_registered", "1 while registered with the coordinator.", registered as u8 as f64);
    e.finish()
}

/// Logs a one-line summary every `progress` interval.
pub async fn summary_loop(worker: Arc<Worker>) -> Result<(), WorkerError> {
    let mut last = (Instant::now(), 0u64);
    while worker.pause(worker.settings.progress).await {
        let s = worker.summary.lock().expect("summary lock").clone();
        let total = s.nodes + worker.underway.load().1;
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
