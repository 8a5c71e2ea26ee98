//! The coordinator's HTTP side: a live status page (`/`), its data (`/status.json`: the
//! status document with the history of units done and nodes per second) and Prometheus
//! metrics (`/metrics`). Every answer comes from the job's task, asked like the gRPC
//! handlers ask it ([`Request::Page`], [`Request::Metrics`]).

use crate::request::{JobHandle, Request};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::future::Future;
use tokio::net::TcpListener;

/// What an HTTP listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    /// The status page, its JSON and the metrics.
    All,
    /// Only `/metrics`.
    Metrics,
}

const PAGE: &str = include_str!("status.html");

/// Serves `pages` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    pages: Pages,
    job: JobHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut app = Router::new().route("/metrics", get(metrics));
    if pages == Pages::All {
        app = app.route("/", get(|| async { Html(PAGE) })).route("/status.json", get(status));
    }
    axum::serve(listener, app.with_state(job)).with_graceful_shutdown(shutdown).await
}

fn unavailable() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "the coordinator is stopping").into_response()
}

/// 503 when the job's task is gone.
async fn status(State(job): State<JobHandle>) -> Response {
    match job.ask(Request::Page).await {
        Some(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        None => unavailable(),
    }
}

/// 503 when the job's task is gone.
async fn metrics(State(job): State<JobHandle>) -> Response {
    match job.ask(Request::Metrics).await {
        Some(text) => ([(header::CONTENT_TYPE, cram_proto::metrics::CONTENT_TYPE)], text).into_response(),
        None => unavailable(),
    }
}
