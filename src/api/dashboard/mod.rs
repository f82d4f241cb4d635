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

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{delete, get, post};
use axum::Router;

use super::state::AppState;
use common::{csrf, DashError};

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
