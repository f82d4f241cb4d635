//! Dashboard sessions: random ids in an `HttpOnly` cookie, stored server-side only as SHA-256
//! (ledger `sessions` table), with idle and absolute expiry. A [`SessionPrincipal`] is the only
//! identity that may manage API keys.

use rand::TryRngCore;

use crate::ledger::{now, sha256, AccountId, Ledger, LedgerError};

/// The session cookie's name.
pub const COOKIE: &str = "tollgate_session";

/// A signed-in dashboard user: may manage the account's keys and spend from the playground.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPrincipal {
    pub account_id: AccountId,
}

/// Session lifetimes, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct SessionPolicy {
    /// A session unused for this long ends (default 7 days).
    pub idle_secs: i64,
    /// A session ends this long after sign-in whatever its use (default 30 days).
    pub absolute_secs: i64,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        Self {
            idle_secs: 7 * 24 * 3600,
            absolute_secs: 30 * 24 * 3600,
        }
    }
}

/// A new random secret: 32 bytes from the OS CSPRNG as 64 lowercase hex characters (session
/// ids and e-mailed link tokens).
///
/// # Panics
/// If the operating system's random source fails.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the OS random source failed");
    hex::encode(bytes)
}

/// Start a session for `account`; returns the cookie value (a new id on every sign-in).
///
/// # Errors
/// Database errors.
pub fn start(ledger: &Ledger, account: AccountId) -> Result<String, LedgerError> {
    let id = new_secret();
    ledger.insert_session(&sha256(&id), account)?;
    Ok(id)
}

/// The principal of a cookie value, or `None` when it is unknown or expired (an expired
/// session is deleted). Records use at most once a minute.
///
/// # Errors
/// Database errors.
pub fn resolve(
    ledger: &Ledger,
    policy: SessionPolicy,
    cookie: &str,
) -> Result<Option<SessionPrincipal>, LedgerError> {
    if cookie.len() != 64 || !cookie.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(None);
    }
    let hash = sha256(cookie);
    let Some(s) = ledger.session(&hash)? else {
        return Ok(None);
    };
    let t = now();
    if t - s.last_seen_at > policy.idle_secs || t - s.created_at > policy.absolute_secs {
        ledger.delete_session(&hash)?;
        return Ok(None);
    }
    if t - s.last_seen_at >= 60 {
        ledger.touch_session(&hash)?;
    }
    Ok(Some(SessionPrincipal {
        account_id: s.account_id,
    }))
}

/// End the session with this cookie value (sign-out). Returns whether it existed.
///
/// # Errors
/// Database errors.
pub fn end(ledger: &Ledger, cookie: &str) -> Result<bool, LedgerError> {
    ledger.delete_session(&sha256(cookie))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_resolve_until_they_end_or_expire() {
        let (_d, l) = crate::ledger::temp_ledger();
        let a = l
            .create_account("s@example.com", crate::money::Micros(0))
            .unwrap();
        let policy = SessionPolicy::default();
        let id = start(&l, a.id).unwrap();
        assert_eq!(id.len(), 64);
        assert_ne!(id, start(&l, a.id).unwrap(), "a new id per sign-in");
        assert_eq!(
            resolve(&l, policy, &id).unwrap(),
            Some(SessionPrincipal { account_id: a.id })
        );
        assert_eq!(resolve(&l, policy, "nope").unwrap(), None);
        assert_eq!(resolve(&l, policy, &new_secret()).unwrap(), None);
        // Idle expiry: a policy of -1 s makes every session stale.
        let stale = SessionPolicy {
            idle_secs: -1,
            absolute_secs: 3600,
        };
        assert_eq!(resolve(&l, stale, &id).unwrap(), None);
        assert_eq!(
            resolve(&l, policy, &id).unwrap(),
            None,
            "deleted when expired"
        );
        let id2 = start(&l, a.id).unwrap();
        assert!(end(&l, &id2).unwrap());
        assert_eq!(resolve(&l, policy, &id2).unwrap(), None);
    }
}
