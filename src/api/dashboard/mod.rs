//! The dashboard's JSON surface, `/api/v1/*` (interface.md: session cookie only, not a public
//! contract). Every response is an envelope: `{"ok": true, "data": ...}` on success,
//! `{"ok": false, "error": {"code", "message", ...}}` on failure, with the HTTP status set.
//!
//! Owns: sign-up, e-mail verification, sign-in/out (password, or an OpenID Connect provider),
//! password reset, the account view, key
//! management, usage and ledger entries, code redemption, top-ups (Stripe Checkout and its
//! webhook); the session cookie
//! (`HttpOnly`, `SameSite=Lax`, `Secure` unless `--insecure-cookies`), CSRF checks on writes
//! (the `Origin` and `Sec-Fetch-Site` headers, OWASP CSRF cheat sheet "verifying origin with
//! standard headers"), and the sign-in/sign-up/redeem throttles (governor).
//! May use: `auth`, `ledger`, `mail`, `billing`, `payments`.

mod account;
mod admin;
mod common;
mod keys;
mod oidc;
mod topups;

use std::num::NonZeroU32;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use axum_extra::extract::cookie::CookieJar;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use serde_json::{json, Value};

use super::AppState;
use crate::auth::session::{self, SessionPolicy, SessionPrincipal};
use crate::ledger::LedgerError;

/// Dashboard settings.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// Leave `Secure` off the session cookie (plain-HTTP local use only).
    pub insecure_cookies: bool,
    /// Granted once, when a signed-up account verifies its address (micros).
    pub starter_micros: i64,
    /// Base URL for links in e-mails (e.g. `https://llm.example.com`); default: `http://` + the
    /// request's `Host`.
    pub public_url: Option<String>,
    pub sessions: SessionPolicy,
    /// Sign-in attempts per minute per e-mail address (and 4x that per client IP).
    pub sign_in_per_minute: u32,
    /// Chat requests per minute per account through the playground's session path.
    pub playground_rpm: u32,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            insecure_cookies: false,
            starter_micros: 100_000,
            public_url: None,
            sessions: SessionPolicy::default(),
            sign_in_per_minute: 5,
            playground_rpm: 20,
        }
    }
}

type Keyed = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>;

/// Throttles against guessing (GCRA, per key string).
pub struct Throttles {
    sign_in_email: Keyed,
    sign_in_ip: Keyed,
    sign_up_ip: Keyed,
    reset_ip: Keyed,
    redeem_account: Keyed,
    clock: DefaultClock,
}

fn per_minute(n: u32) -> Keyed {
    RateLimiter::keyed(Quota::per_minute(
        NonZeroU32::new(n.max(1)).unwrap_or(NonZeroU32::MIN),
    ))
}

impl Throttles {
    pub fn new(cfg: &DashboardConfig) -> Self {
        Self {
            sign_in_email: per_minute(cfg.sign_in_per_minute),
            sign_in_ip: per_minute(cfg.sign_in_per_minute.saturating_mul(4)),
            sign_up_ip: per_minute(10),
            reset_ip: per_minute(5),
            redeem_account: per_minute(10),
            clock: DefaultClock::default(),
        }
    }

    /// Forget keys whose quota is full again (bounds memory; the server calls it each minute).
    pub fn retain_recent(&self) {
        for l in [
            &self.sign_in_email,
            &self.sign_in_ip,
            &self.sign_up_ip,
            &self.reset_ip,
            &self.redeem_account,
        ] {
            l.retain_recent();
        }
    }

    fn check(&self, limiter: &Keyed, key: &str, what: &str) -> Result<(), DashError> {
        limiter.check_key(&key.to_owned()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now()).as_secs() + 1;
            DashError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_attempts",
                format!("Too many {what} attempts; try again in {wait} s."),
            )
            .retry_after(wait)
        })
    }
}

/// A dashboard failure: status, stable `code`, readable `message`.
#[derive(Debug)]
pub struct DashError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry_after: Option<u64>,
}

impl DashError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl From<LedgerError> for DashError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::EmailTaken(_) => Self::new(
                StatusCode::CONFLICT,
                "email_taken",
                "An account with this e-mail address already exists; sign in or reset the password.",
            ),
            LedgerError::UnverifiedIdentity(_) => Self::new(
                StatusCode::FORBIDDEN,
                "email_not_verified_by_provider",
                "Your identity provider has not verified your e-mail address, so it cannot sign you in here. Verify the address with the provider, or sign up with e-mail and a password.",
            ),
            LedgerError::BadToken => Self::bad_request(
                "invalid_token",
                "This link is unknown, already used or expired; ask for a new one.",
            ),
            LedgerError::BadCode => Self::bad_request(
                "invalid_code",
                "This code is unknown or has already been redeemed.",
            ),
            LedgerError::NoSuchKey(_) => {
                Self::new(StatusCode::NOT_FOUND, "key_not_found", "No such API key.")
            }
            other => {
                tracing::error!(error = %other, "dashboard ledger failure");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "The server failed; try again.",
                )
            }
        }
    }
}

impl From<JsonRejection> for DashError {
    fn from(r: JsonRejection) -> Self {
        Self::new(r.status(), "invalid_body", r.body_text())
    }
}

impl IntoResponse for DashError {
    fn into_response(self) -> Response {
        let body = json!({"ok": false, "error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        resp
    }
}

/// A JSON request body whose rejections use the dashboard envelope.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(DashError))]
pub struct Body<T>(pub T);

/// `{"ok": true, "data": data}` with `status`.
fn ok(status: StatusCode, data: Value) -> Response {
    (status, Json(json!({"ok": true, "data": data}))).into_response()
}

/// Run blocking ledger/auth work off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DashError> + Send + 'static,
) -> Result<T, DashError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        tracing::error!(error = %e, "dashboard task failed");
        DashError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "The server failed; try again.",
        )
    })?
}

/// The signed-in user of a request (from the session cookie) and the cookie's value.
pub struct Session {
    pub principal: SessionPrincipal,
    pub cookie: String,
}

impl FromRequestParts<AppState> for Session {
    type Rejection = DashError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, DashError> {
        let jar = CookieJar::from_headers(&parts.headers);
        let cookie = jar.get(session::COOKIE).map(|c| c.value().to_owned());
        let resolved = match cookie.clone() {
            Some(value) => {
                let (ledger, policy) = (state.ledger.clone(), state.dashboard.sessions);
                blocking(move || Ok(session::resolve(&ledger, policy, &value)?)).await?
            }
            None => None,
        };
        match (resolved, cookie) {
            (Some(principal), Some(cookie)) => Ok(Self { principal, cookie }),
            _ if parts.headers.contains_key(header::AUTHORIZATION) => Err(DashError::new(
                StatusCode::UNAUTHORIZED,
                "session_required",
                "The dashboard API takes a signed-in session, not an API key: an API key can spend but never create, list or revoke keys.",
            )),
            _ => Err(DashError::new(
                StatusCode::UNAUTHORIZED,
                "session_required",
                "Sign in first: this needs a dashboard session.",
            )),
        }
    }
}

/// Whether a request may use the session cookie for a write: neither `Sec-Fetch-Site` says
/// another site sent it nor is `Origin` another host. Requests without either header come from
/// non-browser clients, which cannot carry a victim's cookie.
pub fn same_site(h: &axum::http::HeaderMap) -> bool {
    let fetch_site_ok = h
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| matches!(v, "same-origin" | "none"));
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_ok = match h.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("")) {
        None => true,
        Some(origin) => {
            let origin_host = origin
                .split_once("://")
                .map_or("", |(_, rest)| rest.trim_end_matches('/'));
            host.is_some_and(|h| h.eq_ignore_ascii_case(origin_host))
        }
    };
    fetch_site_ok && origin_ok
}

/// Refuse cross-site writes with 403 (`same_site`).
async fn csrf(req: Request, next: Next) -> Response {
    // HTTP/2 carries the host in the URI's authority, not a `Host` header.
    let mut headers = req.headers().clone();
    if !headers.contains_key(header::HOST) {
        if let Some(v) = req
            .uri()
            .authority()
            .and_then(|a| header::HeaderValue::from_str(a.as_str()).ok())
        {
            headers.insert(header::HOST, v);
        }
    }
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) || same_site(&headers)
    {
        next.run(req).await
    } else {
        DashError::new(
            StatusCode::FORBIDDEN,
            "cross_site_request",
            "Cross-site requests cannot change dashboard state.",
        )
        .into_response()
    }
}

async fn not_found(req: Request) -> DashError {
    DashError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("No dashboard route {} {}.", req.method(), req.uri().path()),
    )
}

/// The `/api/v1` router (nested by `api::router`) and the `/verify` link target.
pub fn router() -> Router<AppState> {
    let api = Router::new()
        .route("/auth/signup", post(account::sign_up))
        .route("/auth/verify", post(account::verify))
        .route("/auth/signin", post(account::sign_in))
        .route("/auth/signout", post(account::sign_out))
        .route(
            "/auth/signout-everywhere",
            post(account::sign_out_everywhere),
        )
        .route("/auth/providers", get(oidc::providers))
        .route("/auth/password-reset", post(account::request_reset))
        .route("/auth/password-reset/confirm", post(account::confirm_reset))
        .route("/account", get(account::show))
        .route("/keys", get(keys::list).post(keys::create))
        .route("/keys/{id}", delete(keys::revoke))
        .route("/usage", get(keys::usage))
        .route("/usage.csv", get(keys::usage_csv))
        .route("/entries", get(keys::entries))
        .route("/redeem", post(keys::redeem))
        .route("/topups", post(topups::create))
        .route("/topups/{checkout_id}", get(topups::status))
        .route("/admin/accounts", get(admin::accounts))
        .route("/admin/accounts/{id}/adjust", post(admin::adjust))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            DashError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "This route does not take that method.",
            )
        })
        .route_layer(middleware::from_fn(csrf));
    Router::new()
        .nest("/api/v1", api)
        .route("/verify", get(account::verify_link))
        .route("/auth/oidc/start", get(oidc::start))
        .route("/auth/oidc/callback", get(oidc::callback))
        .route("/webhooks/stripe", post(topups::webhook))
}
