//! Prometheus metrics at `GET /metrics` (text exposition format), through the `metrics` facade
//! and `metrics-exporter-prometheus`. The recorder is process-global and installed once; the
//! engine records its own series (`tollgate_time_to_first_token_seconds`, running/waiting
//! sequences, batch size, KV cache use, token totals; see `engine::scheduler`) and this module
//! adds HTTP request counts and durations by route and status. Names follow vLLM's series in
//! Prometheus style (`tollgate_...`).
//!
//! `/metrics` answers only peers on the loopback interface (OWASP API8: no public debug
//! surface); put a scraper on the same host or behind the same reverse proxy.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::shared::error::ApiError;

/// Latency buckets in seconds (TTFT, inter-token latency, request duration).
const LATENCY_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Sequences or tokens per engine step.
const SIZE_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The process's Prometheus handle, installing the global recorder on first use. `None` when
/// another recorder was installed first (metrics then go there).
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_size".into()), &SIZE_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("tollgate_step_tokens".into()),
                        &SIZE_BUCKETS,
                    )
                });
            match builder.and_then(PrometheusBuilder::install_recorder) {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::warn!("metrics recorder not installed: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// `GET /metrics`: the exposition text, for loopback peers only (others get 404).
pub async fn render(req: Request) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if peer.is_some_and(|ip| !ip.is_loopback()) {
        return ApiError::UnknownRoute(req.uri().path().to_owned()).into_response();
    }
    let Some(h) = handle() else {
        return ApiError::Internal("metrics recorder unavailable".into()).into_response();
    };
    h.run_upkeep();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        h.render(),
    )
        .into_response()
}

/// Count every request by method, matched route (not the raw path, to bound label values) and
/// status, and time it: `tollgate_http_requests_total`,
/// `tollgate_http_request_duration_seconds`. Streaming responses are timed to their headers.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    ::metrics::counter!("tollgate_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    ::metrics::histogram!("tollgate_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}
