//! HTTP surface (axum): `/v1` (chat completions, models), `/health`, and the dashboard's
//! `/api/v1` (`dashboard`) and its web pages (`web`).
//! Owns: routing, wire formats, the error envelope, request ids, panic recovery.
//! May use: `metering` (paid requests), `engine` (prompt preparation, model lists), `auth`,
//! `billing` (renderings), `catalog`. Only this module uses axum/tower.
//!
//! Files: this one is the router only (nothing uses it); `state.rs` (what handlers share),
//! `error.rs`, `schema.rs`, `limits.rs` (every rate limit), `session.rs` (session cookies and the
//! same-site rule), `access.rs` (who pays), `paid.rs` (around metering), `completion.rs` and
//! `sse.rs` (wire shapes) are shared; the handler files (`chat.rs`, `models.rs`, `metrics.rs`,
//! `web/`, `dashboard/*` but its `mod.rs` and `common.rs`) never use each other.

pub mod access;
mod chat;
mod completion;
pub mod dashboard;
pub mod error;
mod headers;
pub mod limits;
mod metrics;
mod models;
pub mod openapi;
mod paid;
pub mod schema;
mod session;
mod sse;
pub mod state;
mod web;

pub mod request;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;

use self::error::ApiError;
use self::state::{random_id, RequestId, MAX_BODY_BYTES};
pub use self::state::{AppState, DashboardConfig};

/// Build the application router.
pub fn router(state: AppState) -> Router {
    // Install the recorder before any request or engine step records a metric.
    let _ = metrics::handle();
    let ids: Vec<&str> = state
        .models
        .catalog
        .models
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    let mcp_data = Arc::new(crate::mcp::McpData::new(
        state.models.catalog.clone(),
        state.models.languages.clone(),
        Some(state.models.engine.clone()),
        state.models.weights_dir.clone(),
        state.public.mcp.tokenizers_dir.clone(),
        &request::ACCEPTED_PARAMETERS,
        openapi::document(&ids).to_string(),
    ));
    let public = Router::new()
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{id}", get(models::get_model))
        .route("/v1/models/{id}/languages", get(models::get_languages))
        .route("/v1/openapi.json", get(openapi::serve))
        .nest_service(
            "/mcp",
            crate::mcp::http_service(mcp_data, state.public.mcp.allowed_hosts.clone()),
        )
        .route_layer(middleware::from_fn_with_state(
            state.public.clone(),
            access::public_limit,
        ));
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .merge(public)
        .route("/health", get(models::health))
        .route("/metrics", get(metrics::render))
        .merge(dashboard::router())
        .merge(web::router())
        .fallback(fallback)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(CatchPanicLayer::custom(
            |_panic: Box<dyn std::any::Any + Send>| {
                ApiError::Internal("handler panicked".into()).into_response()
            },
        ))
        .route_layer(middleware::from_fn(metrics::track))
        .layer(middleware::from_fn(request_id_layer))
}

async fn fallback(req: Request) -> ApiError {
    ApiError::UnknownRoute(req.uri().path().to_owned())
}

/// Gives every request a `req_...` id: in request extensions, in the `x-request-id` response
/// header, and as `error.request_id` inside `ApiError` 5xx bodies (rendered again from the
/// typed envelope the error left in the response's extensions; no body is parsed).
async fn request_id_layer(mut req: Request, next: Next) -> Response {
    let id = format!("req_{}", random_id(24));
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if resp.status().is_server_error() {
        if let Some(mut envelope) = resp.extensions_mut().remove::<schema::ErrorBody>() {
            envelope.error.request_id = Some(id.clone());
            let (mut parts, _) = resp.into_parts();
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            let body = serde_json::to_vec(&envelope).unwrap_or_default();
            resp = Response::from_parts(parts, Body::from(body));
        }
    }
    // An idempotent replay keeps the original request's id; everything else gets this one.
    if !resp.headers().contains_key("x-request-id") {
        if let Ok(v) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert("x-request-id", v);
        }
    }
    resp
}
