//! API keys: generation, format, hashing, and authentication with a 60-second lookup cache;
//! dashboard passwords (`password`), sessions (`session`) and sign-in through an OpenID Connect
//! provider (`oidc`, the only part that makes outbound HTTP requests: to that provider).
//!
//! Owns: the key format (`sk-svc-` + 48 lowercase hex from the OS CSPRNG), SHA-256 storage,
//! the cache and its purge on revocation. May use: `ledger`. Never: HTTP, candle.
//!
//! The rule "an API key can spend but never manage keys" is kept in the types: authenticating a
//! bearer key yields an [`ApiKeyPrincipal`], which carries no capability to manage keys; key
//! management takes an operator (CLI) or a dashboard session ([`session::SessionPrincipal`]).

pub mod oidc;
pub mod password;
pub mod session;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::TryRngCore;

use crate::ledger::{sha256, AccountId, ApiKeyRecord, KeyId, KeyState, Ledger, LedgerError};

/// The literal prefix of every API key.
pub const KEY_PREFIX: &str = "sk-svc-";
/// How long a key lookup is cached (`docs/reference/limits.md`).
pub const CACHE_TTL: Duration = Duration::from_secs(60);

/// Who is calling, when the caller used an API key: may spend the account's balance, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiKeyPrincipal {
    pub account_id: AccountId,
    pub key_id: KeyId,
}

/// Authentication failures (all 401 on the wire).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("You didn't provide an API key. Send `Authorization: Bearer sk-svc-...`.")]
    Missing,
    #[error("The API key is malformed: keys are `sk-svc-` followed by 48 hexadecimal characters.")]
    Malformed,
    #[error("Incorrect API key provided.")]
    Unknown,
    #[error("This API key has been revoked.")]
    Revoked,
    /// The key passed the expiry its owner set in the dashboard.
    #[error(
        "This API key has expired; create a new key or extend this one's expiry in the dashboard."
    )]
    Expired,
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// A new random key: `sk-svc-` + 48 lowercase hex (24 bytes from the OS CSPRNG).
///
/// # Panics
/// If the operating system's random source fails (nothing safe can be done then).
pub fn generate_key() -> String {
    let mut bytes = [0u8; 24];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the OS random source failed");
    format!("{KEY_PREFIX}{}", hex::encode(bytes))
}

/// Whether `s` has the key format.
pub fn well_formed(s: &str) -> bool {
    s.strip_prefix(KEY_PREFIX)
        .is_some_and(|h| h.len() == 48 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The display prefix of a key, e.g. `sk-svc-3fa9`.
pub fn display_prefix(key: &str) -> String {
    key.chars().take(KEY_PREFIX.len() + 4).collect()
}

/// Create a key for an account: returns the full key (show it once) and its stored record.
///
/// # Errors
/// `NoSuchAccount`, database errors.
pub fn create_key(
    ledger: &Ledger,
    account: AccountId,
    name: &str,
) -> Result<(String, ApiKeyRecord), LedgerError> {
    let key = generate_key();
    let record = ledger.insert_key(account, name, &sha256(&key), &display_prefix(&key))?;
    Ok((key, record))
}

/// Cached key lookups: SHA-256 of the key -> (record, when cached).
type KeyCache = HashMap<Vec<u8>, (ApiKeyRecord, Instant)>;

/// Authenticates bearer keys with a cache of lookups.
pub struct Authenticator {
    ledger: Arc<Ledger>,
    /// SHA-256 of the key -> (record, when cached), and the purge generation: every purge
    /// bumps it, so a lookup that read the database before a purge does not cache its
    /// (possibly revoked since) record after it.
    cache: Mutex<(KeyCache, u64)>,
    /// The ledger's revocation epoch when the cache was last validated.
    epoch: AtomicI64,
}

impl Authenticator {
    pub fn new(ledger: Arc<Ledger>) -> Self {
        let epoch = ledger.key_epoch().unwrap_or(0);
        Self {
            ledger,
            cache: Mutex::new((HashMap::new(), 0)),
            epoch: AtomicI64::new(epoch),
        }
    }

    /// Authenticate the value of an `Authorization` header. Blocking (may read SQLite).
    ///
    /// # Errors
    /// `Missing`, `Malformed`, `Unknown`, `Revoked`, `Expired`, or a ledger error.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<ApiKeyPrincipal, AuthError> {
        let header = authorization
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .ok_or(AuthError::Missing)?;
        let token = header
            .strip_prefix("Bearer ")
            .or_else(|| header.strip_prefix("bearer "))
            .map(str::trim)
            .ok_or(AuthError::Malformed)?;
        if !well_formed(token) {
            return Err(AuthError::Malformed);
        }
        let hash = sha256(token);
        let (cached, generation) = {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            let hit = cache
                .0
                .get(&hash)
                .filter(|(_, at)| at.elapsed() < CACHE_TTL)
                .map(|(r, _)| r.clone());
            (hit, cache.1)
        };
        let record = match cached {
            Some(r) => r,
            None => {
                let r = self.ledger.key_by_hash(&hash)?.ok_or(AuthError::Unknown)?;
                self.remember(hash, &r, generation);
                if r.last_used_at.is_none_or(|t| crate::ledger::now() - t > 60) {
                    let _ = self.ledger.touch_key(r.id);
                }
                r
            }
        };
        if record.state == KeyState::Revoked {
            return Err(AuthError::Revoked);
        }
        if record.expired_at(crate::ledger::now()) {
            return Err(AuthError::Expired);
        }
        Ok(ApiKeyPrincipal {
            account_id: record.account_id,
            key_id: record.id,
        })
    }

    /// Revoke a key (operator or session action) and purge it from the cache, so the very next
    /// request with it gets 401.
    ///
    /// # Errors
    /// `NoSuchKey`, database errors.
    pub fn revoke(&self, key_id: KeyId) -> Result<ApiKeyRecord, LedgerError> {
        let r = self.ledger.revoke_key(key_id)?;
        self.purge(key_id);
        Ok(r)
    }

    /// Rename a key or change its spend limit or expiry, and purge it from the cache so an
    /// expiry takes effect on the very next request.
    ///
    /// # Errors
    /// `NoSuchKey`, `BadAmount`, database errors.
    pub fn update(
        &self,
        key_id: KeyId,
        update: &crate::ledger::KeyUpdate,
    ) -> Result<ApiKeyRecord, LedgerError> {
        let r = self.ledger.update_key(key_id, update)?;
        self.purge(key_id);
        Ok(r)
    }

    /// Forget every cached key: another replica changed a key, or the change feed was lost
    /// (see `ledger::notify`). The next request with each key reads it again.
    pub fn clear_cache(&self) {
        self.purge_where(|_| true);
    }

    fn purge(&self, key_id: KeyId) {
        self.purge_where(|r| r.id == key_id);
    }

    /// Cache `record`, read from the database when the purge generation was `generation`,
    /// unless a purge came since (it may have been this very key's revocation).
    fn remember(&self, hash: Vec<u8>, record: &ApiKeyRecord, generation: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.1 == generation {
            cache.0.insert(hash, (record.clone(), Instant::now()));
        }
    }

    /// Drop the cached records matching `gone` and bump the purge generation.
    fn purge_where(&self, gone: impl Fn(&ApiKeyRecord) -> bool) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.0.retain(|_, (r, _)| !gone(r));
        cache.1 = cache.1.wrapping_add(1);
    }

    /// Purge the whole cache if a key was revoked by another process (the CLI) since the last
    /// call. Called about once a second by the server.
    ///
    /// # Errors
    /// Database errors.
    pub fn sync_revocations(&self) -> Result<(), LedgerError> {
        let epoch = self.ledger.key_epoch()?;
        if self.epoch.swap(epoch, Ordering::Relaxed) != epoch {
            self.clear_cache();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_the_contract_format() {
        let k = generate_key();
        assert!(well_formed(&k), "{k}");
        assert_ne!(k, generate_key());
        assert_eq!(display_prefix(&k).len(), 11);
        for bad in [
            "",
            "sk-svc-",
            "sk-svc-ABCDEF000000000000000000000000000000000000000000",
            "sk-xyz-000000000000000000000000000000000000000000000000",
        ] {
            assert!(!well_formed(bad), "{bad}");
        }
    }

    #[test]
    fn revocation_purges_the_cache_at_once() {
        let (_d, l) = crate::ledger::temp_ledger();
        let l = Arc::new(l);
        let a = l
            .create_account("k@example.com", crate::money::Micros(0))
            .unwrap();
        let (key, rec) = create_key(&l, a.id, "test").unwrap();
        let auth = Authenticator::new(l.clone());
        let bearer = format!("Bearer {key}");
        assert_eq!(auth.authenticate(Some(&bearer)).unwrap().key_id, rec.id);
        auth.revoke(rec.id).unwrap();
        assert!(matches!(
            auth.authenticate(Some(&bearer)),
            Err(AuthError::Revoked)
        ));
        assert!(matches!(auth.authenticate(None), Err(AuthError::Missing)));
        assert!(matches!(
            auth.authenticate(Some("Basic abc")),
            Err(AuthError::Malformed)
        ));
        assert!(matches!(
            auth.authenticate(Some(&format!("Bearer {}", generate_key()))),
            Err(AuthError::Unknown)
        ));
    }

    #[test]
    fn a_lookup_that_raced_a_purge_is_not_cached() {
        let (_d, l) = crate::ledger::temp_ledger();
        let l = Arc::new(l);
        let a = l
            .create_account("race@example.com", crate::money::Micros(0))
            .unwrap();
        let (key, rec) = create_key(&l, a.id, "race").unwrap();
        let auth = Authenticator::new(l.clone());
        // A lookup reads the key valid; another replica revokes it and the notice purges the
        // cache before the lookup stores what it read.
        let before = auth.cache.lock().unwrap().1;
        l.revoke_key(rec.id).unwrap();
        auth.clear_cache();
        auth.remember(sha256(&key), &rec, before);
        assert!(
            auth.cache.lock().unwrap().0.is_empty(),
            "stale record cached"
        );
        assert!(matches!(
            auth.authenticate(Some(&format!("Bearer {key}"))),
            Err(AuthError::Revoked)
        ));
        // Without a purge in between, a lookup is cached.
        let now = auth.cache.lock().unwrap().1;
        auth.remember(sha256(&key), &rec, now);
        assert_eq!(auth.cache.lock().unwrap().0.len(), 1);
    }

    #[test]
    fn revocation_by_another_process_is_seen_after_sync() {
        let (_d, l) = crate::ledger::temp_ledger();
        let l = Arc::new(l);
        let a = l
            .create_account("c@example.com", crate::money::Micros(0))
            .unwrap();
        let (key, rec) = create_key(&l, a.id, "cli").unwrap();
        let auth = Authenticator::new(l.clone());
        let bearer = format!("Bearer {key}");
        auth.authenticate(Some(&bearer)).unwrap();
        l.revoke_key(rec.id).unwrap(); // as the CLI would, bypassing this cache
        auth.sync_revocations().unwrap();
        assert!(matches!(
            auth.authenticate(Some(&bearer)),
            Err(AuthError::Revoked)
        ));
    }
}
