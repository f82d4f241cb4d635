//! Who may call and how often: bearer-key authentication (via `auth`), the playground's session
//! path (a dashboard session cookie on `POST /v1/chat/completions`, interface.md "Endpoints"
//! note 1), and request rate limits (the `governor` crate, GCRA) per key and, separately, per
//! session account, with OpenAI-style `x-ratelimit-*` headers.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::error::ApiError;
use super::AppState;
use crate::auth::session::{self, SessionPrincipal};
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

/// Per-key requests-per-minute limiter.
pub struct RateLimits {
    limiter:
        RateLimiter<KeyId, DefaultKeyedStateStore<KeyId>, DefaultClock, StateInformationMiddleware>,
    rpm: u32,
    clock: DefaultClock,
}

/// The limiter's state after a request, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateInfo {
    pub limit: u32,
    pub remaining: u32,
    /// Time until the full quota is available again.
    pub reset: Duration,
}

impl RateInfo {
    /// Set `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
    /// `x-ratelimit-reset-requests` (seconds, e.g. `1.5s`).
    pub fn apply(&self, h: &mut HeaderMap) {
        h.insert("x-ratelimit-limit-requests", HeaderValue::from(self.limit));
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from(self.remaining),
        );
        if let Ok(v) = HeaderValue::from_str(&format!("{:.3}s", self.reset.as_secs_f64())) {
            h.insert("x-ratelimit-reset-requests", v);
        }
    }
}

impl RateLimits {
    /// `rpm` requests per minute per key, with a burst of `rpm`.
    pub fn new(rpm: u32) -> Self {
        let rpm = rpm.max(1);
        let quota = Quota::per_minute(NonZeroU32::new(rpm).unwrap_or(NonZeroU32::MIN));
        Self {
            limiter: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            rpm,
            clock: DefaultClock::default(),
        }
    }

    fn per_request(&self) -> Duration {
        Duration::from_secs(60) / self.rpm
    }

    /// Count one request for `key`.
    ///
    /// # Errors
    /// `RateLimited` (with the headers' state) when the key is over its quota.
    pub fn check(&self, key: KeyId) -> Result<RateInfo, (RateInfo, ApiError)> {
        match self.limiter.check_key(&key) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                Ok(RateInfo {
                    limit: self.rpm,
                    remaining,
                    reset: self.per_request() * (self.rpm - remaining.min(self.rpm)),
                })
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                let info = RateInfo {
                    limit: self.rpm,
                    remaining: 0,
                    reset: self.per_request() * self.rpm,
                };
                let retry_after_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                Err((
                    info,
                    ApiError::RateLimited {
                        limit: self.rpm,
                        retry_after_ms,
                    },
                ))
            }
        }
    }
}

/// The key a client address is throttled under: IPv4 addresses as they are, IPv6 addresses by
/// their /64 prefix (one subscriber's allocation), so rotating within it buys nothing.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// Per-client-address limit of the public endpoints (`/v1/models*`, `/v1/openapi.json`,
/// `/mcp`), which need no key.
pub struct PublicLimits {
    limiter: RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, DefaultClock>,
    rpm: u32,
    clock: DefaultClock,
}

impl PublicLimits {
    /// `rpm` requests per minute per client IP address, with a burst of `rpm`.
    pub fn new(rpm: u32) -> Self {
        let rpm = rpm.max(1);
        Self {
            limiter: RateLimiter::keyed(Quota::per_minute(
                NonZeroU32::new(rpm).unwrap_or(NonZeroU32::MIN),
            )),
            rpm,
            clock: DefaultClock::default(),
        }
    }

    /// Count one request from `ip` (under its [`client_key`]).
    ///
    /// # Errors
    /// `PublicRateLimited` when the address is over its quota.
    pub fn check(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.limiter
            .check_key(&client_key(ip))
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(self.clock.now());
                ApiError::PublicRateLimited {
                    limit: self.rpm,
                    retry_after_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1),
                }
            })
    }

    /// Forget addresses whose quota is full again (bounds memory; called each minute).
    pub fn retain_recent(&self) {
        self.limiter.retain_recent();
    }
}

/// Middleware: the public endpoints' per-address limit.
pub async fn public_limit(
    axum::extract::State(state): axum::extract::State<AppState>,
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
pub async fn authenticate_payer(state: &AppState, headers: &HeaderMap) -> Result<Payer, ApiError> {
    if !headers.contains_key(axum::http::header::AUTHORIZATION) {
        let cookie = axum_extra::extract::cookie::CookieJar::from_headers(headers)
            .get(session::COOKIE)
            .map(|c| c.value().to_owned());
        if let Some(value) = cookie.filter(|_| super::dashboard::same_site(headers)) {
            let (ledger, policy) = (state.ledger.clone(), state.dashboard.sessions);
            let found =
                tokio::task::spawn_blocking(move || session::resolve(&ledger, policy, &value))
                    .await
                    .map_err(|e| ApiError::Internal(format!("session task: {e}")))?
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
    state: &AppState,
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
