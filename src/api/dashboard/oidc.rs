//! Sign-in through an OpenID Connect provider (`--oidc-issuer`), as browser navigations:
//! `GET /auth/oidc/start` sends the browser to the provider with a fresh `state` (also set as
//! the short-lived cookie `tollgate_oidc`, so a callback from another browser is refused);
//! `GET /auth/oidc/callback` checks that cookie, lets `auth::oidc` exchange and verify, resolves
//! the account (`ledger::sign_in_identity`) and starts a session exactly as a password sign-in
//! does. Failures end on a small page that says what happened and links back to sign-in.
//! `GET /api/v1/auth/providers` tells the web UI whether to offer the button.

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Deserialize;

use super::common::DashError;
use super::common::{base_url, link_page, normalize_email, start_session};
use crate::accounts::ExternalIdentity;
use crate::api::shared::state::Accounts;
use crate::auth::oidc::{OidcError, FLOW_TTL};

/// The cookie that binds a sign-in in progress to the browser that started it.
const STATE_COOKIE: &str = "tollgate_oidc";
/// Where the state cookie is sent: the callback only.
const CALLBACK_PATH: &str = "/auth/oidc/callback";

/// `GET /auth/oidc/start`: 303 to the provider's authorization endpoint. Throttled with
/// password sign-ins (per client IP).
pub async fn start(
    State(state): State<Accounts>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    headers: HeaderMap,
    jar: CookieJar,
) -> Response {
    let Some(rp) = state.oidc.clone() else {
        return not_configured();
    };
    let t = &state.throttles;
    if let Err(e) = t.check(
        &t.sign_in_ip,
        &crate::api::shared::limits::client_key(peer.ip()).to_string(),
        "sign-in",
    ) {
        let e = DashError::from(e);
        return page(e.status, "Too many attempts", &e.message);
    }
    let redirect = format!("{}{CALLBACK_PATH}", base_url(&state, &headers));
    match rp.begin(&redirect).await {
        Ok((url, flow_state)) => {
            let cookie = Cookie::build((STATE_COOKIE, flow_state))
                .http_only(true)
                // Lax: the provider's redirect back is a top-level GET from another site.
                .same_site(SameSite::Lax)
                .secure(!state.dashboard.insecure_cookies)
                .path(CALLBACK_PATH)
                .max_age(cookie::time::Duration::seconds(FLOW_TTL.as_secs() as i64))
                .build();
            (jar.add(cookie), Redirect::to(&url)).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "OpenID Connect sign-in could not start");
            page(
                StatusCode::BAD_GATEWAY,
                "Identity provider unavailable",
                "The identity provider could not be reached. Try again later or sign in with your password.",
            )
        }
    }
}

/// The provider's redirect back (RFC 6749 section 4.1.2): `code` and `state`, or `error`.
#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /auth/oidc/callback`: on success a new session and 303 to `/#/keys`.
pub async fn callback(
    State(state): State<Accounts>,
    jar: CookieJar,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let Some(rp) = state.oidc.clone() else {
        return not_configured();
    };
    let bound = jar.get(STATE_COOKIE).map(|c| c.value().to_owned());
    let jar = jar.remove(
        Cookie::build((STATE_COOKIE, ""))
            .path(CALLBACK_PATH)
            .build(),
    );
    let fail = |jar: CookieJar, status, title: &str, message: &str| {
        (jar, page(status, title, message)).into_response()
    };
    if let Some(error) = q.error {
        // The code is the provider's (RFC 6749 4.1.2.1); logged, not echoed into the page.
        let error: String = error
            .chars()
            .filter(char::is_ascii_graphic)
            .take(64)
            .collect();
        tracing::info!(%error, "the identity provider returned an error");
        return fail(
            jar,
            StatusCode::UNAUTHORIZED,
            "Sign-in cancelled",
            "The identity provider did not sign you in.",
        );
    }
    let (Some(code), Some(flow_state)) = (q.code, q.state) else {
        return fail(
            jar,
            StatusCode::BAD_REQUEST,
            "Sign-in failed",
            "The identity provider's answer had no code.",
        );
    };
    if bound.as_deref() != Some(flow_state.as_str()) {
        return fail(
            jar,
            StatusCode::BAD_REQUEST,
            "Sign-in failed",
            "This sign-in was started in another browser, or it expired. Start again.",
        );
    }
    let claims = match rp.finish(&flow_state, code).await {
        Ok(c) => c,
        Err(e @ (OidcError::UnknownState | OidcError::NoEmail)) => {
            return fail(
                jar,
                StatusCode::BAD_REQUEST,
                "Sign-in failed",
                &e.to_string(),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "OpenID Connect sign-in failed");
            return fail(
                jar,
                StatusCode::BAD_GATEWAY,
                "Sign-in failed",
                &e.to_string(),
            );
        }
    };
    let Ok(email) = normalize_email(&claims.email) else {
        return fail(
            jar,
            StatusCode::BAD_REQUEST,
            "Sign-in failed",
            "The identity provider's e-mail address cannot be used here.",
        );
    };
    let identity = ExternalIdentity {
        issuer: claims.issuer,
        subject: claims.subject,
        email,
        email_verified: claims.email_verified,
    };
    let starter = state.dashboard.starter_micros;
    let resolved = (state.service)
        .sign_in_identity(identity, starter)
        .await
        .map_err(DashError::from);
    match resolved {
        Ok(account) => match start_session(&state, jar, account).await {
            Ok(jar) => (jar, Redirect::to("/#/keys")).into_response(),
            Err(e) => page(e.status, "Sign-in failed", &e.message),
        },
        Err(e) => fail(jar, e.status, "Sign-in refused", &e.message),
    }
}

fn not_configured() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Not configured",
        "Sign-in through an identity provider is not configured on this server.",
    )
}

/// A page with `title`, `message` and a link back to sign-in (`common::link_page`).
fn page(status: StatusCode, title: &str, message: &str) -> Response {
    link_page(status, title, message, "Back to sign-in")
}
