//! Who may call and how often: bearer-key authentication (via `auth`) and per-key request rate
//! limits (the `governor` crate, GCRA), with OpenAI-style `x-ratelimit-*` headers.

use std::num::NonZeroU32;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::error::ApiError;
use super::AppState;
use crate::auth::{ApiKeyPrincipal, AuthError};
use crate::ledger::KeyId;

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
