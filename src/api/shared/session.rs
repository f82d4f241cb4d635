//! Dashboard session cookies as every surface reads them (the dashboard's `/api/v1` and the
//! playground's path of chat completions), and the same-site rule that keeps another site from
//! using a victim's cookie (OWASP CSRF cheat sheet, "verifying origin with standard headers").
//! May use: `auth::session`, `state`. Never: handlers.

use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum_extra::extract::cookie::CookieJar;

use super::state::Accounts;
use crate::accounts::AccountsError;
use crate::auth::session::{self, SessionPrincipal};

/// The session cookie's value, if the request carries one.
pub fn cookie(headers: &HeaderMap) -> Option<String> {
    CookieJar::from_headers(headers)
        .get(session::COOKIE)
        .map(|c| c.value().to_owned())
}

/// The signed-in account of session cookie `value` (expired, unknown or malformed: `None`),
/// looked up off the async workers; touches the session's idle timer.
///
/// # Errors
/// `AccountsError::Ledger` when the ledger cannot be read.
pub async fn resolve(
    state: &Accounts,
    value: String,
) -> Result<Option<SessionPrincipal>, AccountsError> {
    state
        .service
        .resolve_session(state.dashboard.sessions, value)
        .await
}

/// Whether a request may use the session cookie: neither `Sec-Fetch-Site` says another site
/// sent it nor is `Origin` another host. Requests without either header come from
/// non-browser clients, which cannot carry a victim's cookie.
pub fn same_site(h: &HeaderMap) -> bool {
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

/// `headers` with a `Host` header: HTTP/2 carries the host in the URI's authority instead.
pub fn with_host(headers: &HeaderMap, uri: &Uri) -> HeaderMap {
    let mut headers = headers.clone();
    if !headers.contains_key(header::HOST) {
        if let Some(v) = uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            headers.insert(header::HOST, v);
        }
    }
    headers
}
