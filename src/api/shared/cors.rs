//! Cross-origin access to `/v1` (tower-http's `CorsLayer`): browser apps on other origins call
//! the API with a bearer key, as OpenAI's API allows. Preflight `OPTIONS` is answered here.
//! Credentials are never allowed cross-site: no `Access-Control-Allow-Credentials`, so a
//! browser neither sends the session cookie on a cross-origin `fetch` nor lets the page read
//! the answer, and `session::same_site` refuses a cookie that arrives from another origin
//! anyway. Not on the dashboard (`/api/v1`, same-origin only) nor on `/mcp` (its own Host
//! checks).

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// Response headers a cross-origin page may read (the SDKs read these for retries and ids).
const EXPOSED: [&str; 9] = [
    "x-request-id",
    "x-tollgate-cost-micros",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
    "idempotent-replayed",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];

/// The layer for `origins` (`--cors-origins`): `*` allows every origin; otherwise each entry is
/// an exact origin such as `https://app.example.com` (entries that are not valid header values
/// are skipped; an empty list allows none).
pub fn layer(origins: &[String]) -> CorsLayer {
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    CorsLayer::new()
        .allow_origin(allow_origin)
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        // Any request header: the SDKs send `x-stainless-*`, `openai-*` and `idempotency-key`.
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(
            EXPOSED
                .iter()
                .map(|h| HeaderName::from_static(h))
                .chain([header::CONTENT_TYPE])
                .collect::<Vec<_>>(),
        )
        .max_age(Duration::from_secs(600))
}
