//! The dashboard's JSON surface, `/api/v1/*` (`docs/dashboard-api.md`: session cookie only, not a public
//! contract). Every response is an envelope: `{"ok": true, "data": ...}` on success,
//! `{"ok": false, "error": {"code", "message", ...}}` on failure, with the HTTP status set.
//!
//! Owns: sign-up, e-mail verification, sign-in/out (password, or an OpenID Connect provider),
//! password reset, resending the verification e-mail, the account view, password change and
//! deletion, key management (names, spend limits, expiry), usage and ledger entries, code redemption, top-ups (Stripe Checkout and its
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
mod profile;
mod topups;
mod usage;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;

use super::shared::codes::DashCode;
use super::shared::state::AppState;
use common::{csrf, DashError};

async fn not_found(req: Request) -> DashError {
    DashError::new(
        StatusCode::NOT_FOUND,
        DashCode::NotFound,
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
        .route("/auth/providers", get(profile::providers))
        .route(
            "/auth/resend-verification",
            post(account::resend_verification),
        )
        .route("/auth/password-reset", post(account::request_reset))
        .route("/auth/password-reset/confirm", post(account::confirm_reset))
        .route("/account", get(profile::show).delete(profile::delete))
        .route("/account/password", post(profile::change_password))
        .route("/keys", get(keys::list).post(keys::create))
        .route(
            "/keys/{id}",
            axum::routing::delete(keys::revoke).patch(keys::update),
        )
        .route("/usage", get(usage::usage))
        .route("/usage.csv", get(usage::usage_csv))
        .route("/usage/daily", get(usage::daily))
        .route("/entries", get(usage::entries))
        .route("/redeem", post(usage::redeem))
        .route("/topups", post(topups::create))
        .route("/topups/{checkout_id}", get(topups::status))
        .route("/admin/accounts", get(admin::accounts))
        .route("/admin/accounts/{id}/adjust", post(admin::adjust))
        .fallback(not_found)
        .method_not_allowed_fallback(|| async {
            DashError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                DashCode::MethodNotAllowed,
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
