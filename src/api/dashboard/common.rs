//! Helpers shared by the dashboard's handler files (so none imports another): e-mail
//! normalization, the account as JSON, the base URL of e-mailed links, and starting a session
//! with its cookie.

use axum::http::{header, HeaderMap};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde_json::json;

use super::{blocking, DashError};
use crate::api::AppState;
use crate::auth::session;
use crate::billing::micros_to_usd;
use crate::ledger::{Account, AccountId};

/// Trimmed, lower-cased address with one `@`, a dot in the domain, no spaces, at most 254
/// bytes (RFC 5321's path limit); a deliberately plain check, the link proves the rest.
pub fn normalize_email(raw: &str) -> Result<String, DashError> {
    let e = raw.trim().to_lowercase();
    let valid = e.len() <= 254
        && !e.chars().any(char::is_whitespace)
        && e.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        });
    if valid {
        Ok(e)
    } else {
        Err(DashError::bad_request(
            "invalid_email",
            "Enter an e-mail address like name@example.com.",
        ))
    }
}

/// The account as the dashboard shows it (micros, with USD renderings).
pub fn account_json(a: &Account) -> serde_json::Value {
    json!({
        "id": a.id,
        "email": a.email,
        "verified": a.verified,
        "admin": a.admin,
        "created_at": a.created_at,
        "balance_micros": a.balance_micros,
        "reserved_micros": a.reserved_micros,
        "available_micros": a.available_micros(),
        "balance_usd": micros_to_usd(a.balance_micros),
        "available_usd": micros_to_usd(a.available_micros()),
    })
}

/// Base URL for e-mailed links.
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    state.dashboard.public_url.clone().unwrap_or_else(|| {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}")
    })
}

fn session_cookie(state: &AppState, value: String) -> Cookie<'static> {
    Cookie::build((session::COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(!state.dashboard.insecure_cookies)
        .path("/")
        .max_age(cookie::time::Duration::seconds(
            state.dashboard.sessions.absolute_secs,
        ))
        .build()
}

/// Start a session for `account` and add its cookie to `jar`. A new id at every sign-in (no
/// session fixation); the session of a cookie already in `jar` ends.
pub async fn start_session(
    state: &AppState,
    jar: CookieJar,
    account: AccountId,
) -> Result<CookieJar, DashError> {
    let (ledger, old) = (
        state.ledger.clone(),
        jar.get(session::COOKIE).map(|c| c.value().to_owned()),
    );
    let value = blocking(move || {
        if let Some(old) = old {
            session::end(&ledger, &old)?;
        }
        Ok(session::start(&ledger, account)?)
    })
    .await?;
    Ok(jar.add(session_cookie(state, value)))
}
