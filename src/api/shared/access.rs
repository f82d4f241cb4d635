//! Who may call: bearer-key authentication (via `auth`), the playground's session path (a
//! dashboard session cookie on `POST /v1/chat/completions`, `docs/reference/endpoints.md`),
//! and the public endpoints' per-address limit (the limiters themselves are in `limits`).

use std::net::IpAddr;

use axum::http::HeaderMap;

use super::codes::Code;
use super::error::ApiError;
use super::session;
use super::state::{Accounts, Public};
use crate::auth::session::SessionPrincipal;
use crate::auth::{ApiKeyPrincipal, AuthError};
use crate::ids::{AccountId, KeyId};

/// Who pays for a chat completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payer {
    /// A bearer API key.
    Key(ApiKeyPrincipal),
    /// A signed-in dashboard session (the playground).
    Session(SessionPrincipal),
}

impl Payer {
    pub fn account_id(&self) -> AccountId {
        match self {
            Self::Key(k) => k.account_id,
            Self::Session(s) => s.account_id,
        }
    }

    /// The key that made the request (`None` for the playground).
    pub fn key_id(&self) -> Option<KeyId> {
        match self {
            Self::Key(k) => Some(k.key_id),
            Self::Session(_) => None,
        }
    }
}

/// Middleware: the public endpoints' per-address limit.
pub async fn public_limit(
    axum::extract::State(state): axum::extract::State<Public>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match state.public_limits.check(client_ip(&req)) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Middleware on the paid `/v1` routes: the cheap per-address limit of requests that cannot be
/// authenticated, under the public endpoints' quota (`--public-rpm` per client address). A
/// request with neither `Authorization` nor a session cookie counts before anything else is
/// done (over the quota: 429, before any key lookup or body read); a request whose credential
/// fails (401) counts when it is answered, and an address over the quota gets the 429 instead.
/// Authenticated traffic never counts: many clients behind one proxy share its address.
pub async fn unauthenticated_limit(
    axum::extract::State(state): axum::extract::State<Public>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let ip = client_ip(&req);
    let bare = !req
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION)
        && session::cookie(req.headers()).is_none();
    if bare {
        if let Err(e) = state.public_limits.check(ip) {
            return e.into_response();
        }
        return next.run(req).await;
    }
    let resp = next.run(req).await;
    if resp.status() == axum::http::StatusCode::UNAUTHORIZED {
        if let Err(e) = state.public_limits.check(ip) {
            return e.into_response();
        }
    }
    resp
}

/// The client's address (0.0.0.0 when the server did not record it).
fn client_ip(req: &axum::extract::Request) -> IpAddr {
    req.extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip())
}

/// Authenticate a chat request: its bearer key when it sends `Authorization`; otherwise a
/// dashboard session cookie, honoured only when the request comes from this site (a cross-site
/// request is treated as carrying no cookie, see `dashboard::same_site`).
///
/// # Errors
/// As `authenticate`: 401 when there is neither a valid key nor a usable session.
pub async fn authenticate_payer(state: &Accounts, headers: &HeaderMap) -> Result<Payer, ApiError> {
    if !headers.contains_key(axum::http::header::AUTHORIZATION) {
        if let Some(value) = session::cookie(headers).filter(|_| session::same_site(headers)) {
            let found = session::resolve(state, value).await?;
            if let Some(s) = found {
                return Ok(Payer::Session(s));
            }
        }
    }
    authenticate(state, headers).await.map(Payer::Key)
}

/// Authenticate the request's bearer key (blocking lookups run on the blocking pool).
///
/// # Errors
/// 401 `Unauthenticated` with the contract's codes; 503 `ledger_unavailable` when the ledger
/// cannot be read.
pub async fn authenticate(
    state: &Accounts,
    headers: &HeaderMap,
) -> Result<ApiKeyPrincipal, ApiError> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|v| v.to_str().map(str::to_owned));
    let value = match value {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => return Err(unauthenticated(&AuthError::Malformed)),
    };
    let auth = state.auth.clone();
    let result = tokio::task::spawn_blocking(move || auth.authenticate(value.as_deref()))
        .await
        .map_err(|e| ApiError::Internal(format!("auth task: {e}")))?;
    result.map_err(|e| match e {
        AuthError::Ledger(l) => ApiError::storage(l.is_unavailable(), l.to_string()),
        other => unauthenticated(&other),
    })
}

fn unauthenticated(e: &AuthError) -> ApiError {
    let code = match e {
        AuthError::Missing => Code::MissingApiKey,
        AuthError::Revoked => Code::RevokedApiKey,
        AuthError::Expired => Code::ExpiredApiKey,
        _ => Code::InvalidApiKey,
    };
    ApiError::Unauthenticated {
        code,
        message: e.to_string(),
    }
}
