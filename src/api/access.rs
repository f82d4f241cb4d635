//! Who may call: bearer-key authentication (via `auth`), the playground's session path (a
//! dashboard session cookie on `POST /v1/chat/completions`, interface.md "Endpoints" note 1),
//! and the public endpoints' per-address limit (the limiters themselves are in `limits`).

use std::net::IpAddr;

use axum::http::HeaderMap;

use super::error::ApiError;
use super::session;
use super::state::{Accounts, Public};
use crate::auth::session::SessionPrincipal;
use crate::auth::{ApiKeyPrincipal, AuthError};
use crate::ledger::{AccountId, KeyId};

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
    let ip = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
    match state.public_limits.check(ip) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
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
            let found = session::resolve(state, value)
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?;
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
/// 401 `Unauthenticated` with the contract's codes; 500 on ledger failure.
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
        AuthError::Ledger(l) => ApiError::Internal(l.to_string()),
        other => unauthenticated(&other),
    })
}

fn unauthenticated(e: &AuthError) -> ApiError {
    let code = match e {
        AuthError::Missing => "missing_api_key",
        AuthError::Revoked => "revoked_api_key",
        _ => "invalid_api_key",
    };
    ApiError::Unauthenticated {
        code,
        message: e.to_string(),
    }
}
