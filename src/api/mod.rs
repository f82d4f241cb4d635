//! HTTP surface (axum): `/v1` (chat completions, responses, audio, models), `/health`, `/mcp`,
//! `/metrics`, and the dashboard's `/api/v1` (`dashboard`) and its web pages (`web`).
//! Owns: routing, wire formats, the error envelopes, request ids, panic recovery.
//! May use: `metering` (paid requests), `accounts` (everything else an account does), `engine`
//! (prompt preparation, model lists), `audio`, `auth`, `billing` (renderings), `catalog`,
//! `mcp`. Never: `ledger` (only the services touch it). Only this module uses axum/tower.
//!
//! Layout, one folder per surface: `v1/` (`chat/`, `responses/`, `audio/`, `models.rs`),
//! `dashboard/` (one file per page's routes, `common.rs` shared), `web/` (the pages),
//! `metrics.rs`, and `shared/` (state, errors, schema, limits, sessions, who pays, the paid-call
//! opening, request parsing, the HTTP layer). This file is the router and `openapi.rs` the
//! document; they alone name every handler. `scripts/ci/check-layers` reads the units off this
//! layout: no endpoint unit uses another and nothing shared uses one.

pub mod dashboard;
mod metrics;
pub mod openapi;
pub mod shared;
pub mod v1;
mod web;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;

use self::shared::error::ApiError;
use self::shared::state::{random_id, RequestId, RequestModel};
pub use self::shared::state::{AppState, DashboardConfig};
use self::shared::{access, cors, headers, request, schema};
use self::v1::models;

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
        request::SUPPORTED_PARAMETERS.as_slice(),
        openapi::document(&ids).to_string(),
    ));
    let (v1_public, _) = v1::public_routes().split_for_parts();
    let v1_public = v1_public.route("/v1/openapi.json", get(openapi::serve));
    let (v1, _) = v1::paid_routes().split_for_parts();
    let v1 = v1
        .route_layer(middleware::from_fn_with_state(
            state.public.clone(),
            access::unauthenticated_limit,
        ))
        .merge(v1_public.route_layer(middleware::from_fn_with_state(
            state.public.clone(),
            access::public_limit,
        )))
        // Set here, before the CORS layer wraps it: a later `method_not_allowed_fallback` would
        // replace the layered fallback that answers preflight `OPTIONS`.
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn(headers::guard))
        .layer(cors::layer(&state.public.cors_origins));
    let mcp = Router::new()
        .nest_service(
            "/mcp",
            crate::mcp::http_service(mcp_data, state.public.mcp.allowed_hosts.clone()),
        )
        .route_layer(middleware::from_fn_with_state(
            state.public.clone(),
            access::public_limit,
        ))
        .route_layer(middleware::from_fn(mcp_session_closed));
    let rest = Router::new()
        .merge(mcp)
        .route("/health", get(models::health))
        .route("/metrics", get(metrics::render))
        .merge(dashboard::router())
        .merge(web::router())
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed });
    Router::new()
        .merge(rest)
        .merge(v1)
        .fallback(fallback)
        .layer(DefaultBodyLimit::max(state.http.max_body_bytes))
        .with_state(state)
        .layer(CatchPanicLayer::custom(
            |_panic: Box<dyn std::any::Any + Send>| {
                ApiError::Internal("handler panicked".into()).into_response()
            },
        ))
        .route_layer(middleware::from_fn(metrics::track))
        .layer(middleware::from_fn(request_id_layer))
}

/// rmcp answers a session's `DELETE` with 202 Accepted, but the MCP SDKs count only 200 and
/// 204 as a closed session (the Python SDK logs "Session termination failed: 202" on every
/// close). The session is closed by then, so the answer becomes 204 No Content.
async fn mcp_session_closed(req: Request, next: Next) -> Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let mut resp = next.run(req).await;
    if delete && resp.status() == axum::http::StatusCode::ACCEPTED {
        *resp.status_mut() = axum::http::StatusCode::NO_CONTENT;
        *resp.body_mut() = Body::empty();
    }
    resp
}

async fn fallback(req: Request) -> ApiError {
    ApiError::UnknownRoute(req.uri().path().to_owned())
}

/// Gives every request a `req_...` id: in request extensions, in the `x-request-id` response
/// header, and as `error.request_id` inside `ApiError` 5xx bodies (rendered again from the
/// typed envelope the error left in the response's extensions; no body is parsed).
/// Logs every error response once at info: request id, status, `code`, `param`, route and the
/// model the handler read (`RequestModel`); never a key, a cookie or prompt text.
async fn request_id_layer(mut req: Request, next: Next) -> Response {
    let id = format!("req_{}", random_id(24));
    let model = RequestModel::default();
    req.extensions_mut().insert(RequestId(id.clone()));
    req.extensions_mut().insert(model.clone());
    let (method, route) = (req.method().clone(), req.uri().path().to_owned());
    let mut resp = next.run(req).await;
    if let Some(envelope) = resp.extensions().get::<schema::ErrorBody>() {
        let e = &envelope.error;
        tracing::info!(
            request_id = %id,
            status = resp.status().as_u16(),
            code = e.code,
            param = e.param.as_deref().unwrap_or(""),
            method = %method,
            route = %route,
            model = model.get().unwrap_or(""),
            "request rejected"
        );
    }
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
