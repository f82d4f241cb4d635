//! Every request-rate limit, on one limiter type (`Limiter`, the `governor` crate's GCRA keyed
//! by whatever is limited): API keys and playground sessions (`x-ratelimit-*` headers,
//! `docs/reference/limits.md`), client addresses on the public endpoints, and the dashboard's
//! throttles against guessing. Also the key a client address is limited under.
//! May use: `governor`, `error` (`ApiError` for the public surface). Never: handlers.

use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::error::ApiError;
use crate::ids::{AccountId, KeyId};

/// How many replicas share each limit (1 on one machine), kept current by the server's
/// replica upkeep (`app::spawn_replica_upkeep`) from the ledger's heartbeat table.
pub type ReplicaShare = std::sync::Arc<std::sync::atomic::AtomicU32>;

/// A share of one replica.
#[must_use]
pub fn one_replica() -> ReplicaShare {
    std::sync::Arc::new(std::sync::atomic::AtomicU32::new(1))
}

/// `rpm` requests per minute per key `K`, with a burst of `rpm`, for the whole deployment:
/// with `n` replicas each one counts a request as `n` of its own (GCRA cells), so each lets
/// through `rpm / n` and, behind a load balancer that spreads a key's requests evenly, the key
/// gets `rpm` in all; spread unevenly it gets less, never more (plus up to `n - 1` while the
/// replica count changes). The headers then describe the whole deployment under even spread.
pub struct Limiter<K: Hash + Eq + Clone> {
    inner: RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>,
    rpm: u32,
    clock: DefaultClock,
    replicas: ReplicaShare,
}

/// The limiter's state after a request, for the `x-ratelimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateInfo {
    /// Requests per minute.
    pub limit: u32,
    pub remaining: u32,
    /// Time until the full quota is available again; on a refused request, time until the next
    /// request is allowed (what `Retry-After` says).
    pub reset: Duration,
}

/// A refused request: the state for the headers and how long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub info: RateInfo,
    /// Milliseconds until one more request is allowed (at least 1).
    pub retry_after_ms: u64,
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

impl<K: Hash + Eq + Clone> Limiter<K> {
    /// `rpm` requests per minute per key (at least 1), with a burst of `rpm`.
    pub fn new(rpm: u32) -> Self {
        let rpm = rpm.max(1);
        let quota = Quota::per_minute(NonZeroU32::new(rpm).unwrap_or(NonZeroU32::MIN));
        Self {
            inner: RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>(),
            rpm,
            clock: DefaultClock::default(),
            replicas: one_replica(),
        }
    }

    /// This limiter, shared among the replicas `share` counts.
    #[must_use]
    pub fn with_replicas(mut self, share: ReplicaShare) -> Self {
        self.replicas = share;
        self
    }

    /// Requests per minute.
    pub fn rpm(&self) -> u32 {
        self.rpm
    }

    fn per_request(&self) -> Duration {
        Duration::from_secs(60) / self.rpm
    }

    /// Count one request for `key`.
    ///
    /// # Errors
    /// `Limited` when the key is over its quota.
    pub fn check(&self, key: &K) -> Result<RateInfo, Limited> {
        let n = self
            .replicas
            .load(std::sync::atomic::Ordering::Relaxed)
            .clamp(1, self.rpm);
        let cells = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        // `n <= rpm`, the burst, so the cells always fit (`InsufficientCapacity` cannot occur).
        let outcome = self
            .inner
            .check_key_n(key, cells)
            .unwrap_or_else(|_| self.inner.check_key(key));
        match outcome {
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
                let retry_after_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
                // A refused request's reset is when the next request is allowed, the same
                // moment `Retry-After` names (rounded up to whole seconds there).
                Err(Limited {
                    info: RateInfo {
                        limit: self.rpm,
                        remaining: 0,
                        reset: Duration::from_millis(retry_after_ms),
                    },
                    retry_after_ms,
                })
            }
        }
    }

    /// Forget keys whose quota is full again (bounds memory; the server calls it each minute).
    pub fn retain_recent(&self) {
        self.inner.retain_recent();
    }
}

/// Per-key (`KeyId`) limits of `/v1` requests made with an API key.
pub type KeyLimits = Limiter<KeyId>;
/// Per-account limits of the playground's session path, separate from the keys'.
pub type SessionLimits = Limiter<AccountId>;

impl<K: Hash + Eq + Clone> Limiter<K> {
    /// Count one `/v1` request of `id`: the headers' state, or 429 with it.
    ///
    /// # Errors
    /// `RateLimited`, with the headers' state.
    pub fn check_request(&self, id: K) -> Result<RateInfo, (RateInfo, ApiError)> {
        self.check(&id).map_err(|l| {
            (
                l.info,
                ApiError::RateLimited {
                    limit: self.rpm,
                    retry_after_ms: l.retry_after_ms,
                },
            )
        })
    }
}

/// Per-client-address limit of the public endpoints (`/v1/models*`, `/v1/openapi.json`,
/// `/mcp`), which need no key; addresses are keyed by [`client_key`].
pub struct PublicLimits(Limiter<IpAddr>);

impl PublicLimits {
    /// `rpm` requests per minute per client address, with a burst of `rpm`.
    pub fn new(rpm: u32) -> Self {
        Self(Limiter::new(rpm))
    }

    /// These limits, shared among the replicas `share` counts (see [`Limiter`]).
    #[must_use]
    pub fn with_replicas(self, share: ReplicaShare) -> Self {
        Self(self.0.with_replicas(share))
    }

    /// Count one request from `ip`.
    ///
    /// # Errors
    /// `PublicRateLimited` when the address is over its quota.
    pub fn check(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.0
            .check(&client_key(ip))
            .map(|_| ())
            .map_err(|l| ApiError::PublicRateLimited {
                limit: self.0.rpm(),
                retry_after_ms: l.retry_after_ms,
            })
    }

    /// Forget addresses whose quota is full again.
    pub fn retain_recent(&self) {
        self.0.retain_recent();
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

/// The dashboard's throttles against guessing, per key string.
pub struct Throttles {
    pub sign_in_email: Limiter<String>,
    pub sign_in_ip: Limiter<String>,
    pub sign_up_ip: Limiter<String>,
    pub reset_ip: Limiter<String>,
    /// Verification e-mails asked for again, per address.
    pub resend_email: Limiter<String>,
    pub redeem_account: Limiter<String>,
}

/// A throttled dashboard attempt: what was tried and how long to wait (whole seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub what: &'static str,
    pub wait_s: u64,
}

impl Throttles {
    /// Sign-in attempts per minute per address `sign_in_per_minute` (4x per client IP);
    /// sign-ups 10, resets (and resent verifications) 5 per IP; resent verifications 3 per
    /// address; redeems 10 per account.
    pub fn new(sign_in_per_minute: u32) -> Self {
        Self {
            sign_in_email: Limiter::new(sign_in_per_minute),
            sign_in_ip: Limiter::new(sign_in_per_minute.saturating_mul(4)),
            sign_up_ip: Limiter::new(10),
            reset_ip: Limiter::new(5),
            resend_email: Limiter::new(3),
            redeem_account: Limiter::new(10),
        }
    }

    /// Forget keys whose quota is full again (the server calls it each minute).
    pub fn retain_recent(&self) {
        for l in [
            &self.sign_in_email,
            &self.sign_in_ip,
            &self.sign_up_ip,
            &self.reset_ip,
            &self.resend_email,
            &self.redeem_account,
        ] {
            l.retain_recent();
        }
    }

    /// Count one `what` attempt under `key` on `limiter`.
    ///
    /// # Errors
    /// `Throttled` with the wait in whole seconds.
    pub fn check(
        &self,
        limiter: &Limiter<String>,
        key: &str,
        what: &'static str,
    ) -> Result<(), Throttled> {
        limiter
            .check(&key.to_owned())
            .map(|_| ())
            .map_err(|l| Throttled {
                what,
                wait_s: l.retry_after_ms / 1000 + 1,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_shared_by_three_replicas_lets_a_third_through_each() {
        let share = one_replica();
        share.store(3, std::sync::atomic::Ordering::Relaxed);
        let limiter: Limiter<u32> = Limiter::new(30).with_replicas(share.clone());
        let accepted = (0..20).filter(|_| limiter.check(&7).is_ok()).count();
        assert_eq!(accepted, 10);
        let refused = limiter.check(&7).unwrap_err();
        assert_eq!(refused.info.limit, 30);
        // Back to one replica: the key's own quota again, counted one cell a request.
        share.store(1, std::sync::atomic::Ordering::Relaxed);
        let fresh: Limiter<u32> = Limiter::new(30).with_replicas(share);
        assert_eq!((0..40).filter(|_| fresh.check(&7).is_ok()).count(), 30);
    }
}
