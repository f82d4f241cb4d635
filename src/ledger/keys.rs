//! API keys (stored only as SHA-256 plus a display prefix) and redeem codes (stored hashed).

use super::db::{args, DbError, Row, Tx};

use super::accounts::{add_balance, insert_entry};
use super::{now, sha256, AccountId, KeyId, Ledger, LedgerError, Micros};

/// Key state, as the contract names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    Active,
    Revoked,
}

/// A stored API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub id: KeyId,
    pub account_id: AccountId,
    pub name: String,
    /// Display prefix, e.g. `sk-svc-3fa9`.
    pub prefix: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub state: KeyState,
    /// The most the key may spend in its life (settled charges plus open holds), or `None`.
    pub spend_limit_micros: Option<Micros>,
    /// Unix seconds after which the key is refused, or `None` (never).
    pub expires_at: Option<i64>,
}

impl ApiKeyRecord {
    /// Whether the key has passed its expiry at Unix time `now` (seconds).
    pub fn expired_at(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|t| now >= t)
    }
}

/// What a key has spent: settled charges and open holds (micros) and requests recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeySpend {
    /// Settled charges of the key's requests.
    pub spent_micros: Micros,
    /// Holds of the key's requests still running.
    pub reserved_micros: Micros,
    /// Usage records with the key.
    pub requests: i64,
}

/// A change to a key's settings: `None` leaves a field as it is; `Some(None)` clears a limit
/// or an expiry.
#[derive(Debug, Clone, Default)]
pub struct KeyUpdate {
    /// A new display name.
    pub name: Option<String>,
    /// A new lifetime spend limit (micros), or `Some(None)` to remove it.
    pub spend_limit_micros: Option<Option<Micros>>,
    /// A new expiry (Unix seconds), or `Some(None)` to remove it.
    pub expires_at: Option<Option<i64>>,
}

fn row_to_key(r: &Row) -> Result<ApiKeyRecord, DbError> {
    let revoked: Option<i64> = r.get(6)?;
    Ok(ApiKeyRecord {
        id: r.get(0)?,
        account_id: r.get(1)?,
        name: r.get(2)?,
        prefix: r.get(3)?,
        created_at: r.get(4)?,
        last_used_at: r.get(5)?,
        state: if revoked.is_some() {
            KeyState::Revoked
        } else {
            KeyState::Active
        },
        spend_limit_micros: r.get(7)?,
        expires_at: r.get(8)?,
    })
}

const KEY_SELECT: &str =
    "SELECT id, account_id, name, prefix, created_at, last_used_at, revoked_at, spend_limit_micros, expires_at FROM api_keys";

/// Key `k.id`'s settled charges, open holds and usage records, as three columns (`row_to_spend`);
/// each reads only the key's rows, through the `usage_key` and `holds_open_key` indexes.
const SPEND_COLUMNS: &str =
    "COALESCE((SELECT CAST(SUM(cost_micros) AS BIGINT) FROM usage u WHERE u.key_id = k.id), 0),
     COALESCE((SELECT CAST(SUM(reserved_micros) AS BIGINT) FROM holds h WHERE h.key_id = k.id AND h.state = 'open'), 0),
     (SELECT COUNT(*) FROM usage u WHERE u.key_id = k.id)";

fn row_to_spend(r: &Row, at: usize) -> Result<KeySpend, DbError> {
    Ok(KeySpend {
        spent_micros: r.get(at)?,
        reserved_micros: r.get(at + 1)?,
        requests: r.get(at + 2)?,
    })
}

/// What key `key` has spent, holds open and recorded, read on `c` (a transaction too).
fn spend_in(c: &Tx<'_>, key: KeyId) -> Result<KeySpend, LedgerError> {
    Ok(c.query_opt(
        &format!("SELECT {SPEND_COLUMNS} FROM api_keys k WHERE k.id = ?1"),
        args![key],
        |r| row_to_spend(r, 0),
    )?
    .unwrap_or_default())
}

/// Bump the key epoch inside `tx`: running servers purge their cached keys within a second.
pub(super) fn bump_key_epoch(tx: &Tx<'_>) -> Result<(), LedgerError> {
    tx.exec(
        "UPDATE key_epoch SET epoch = epoch + 1 WHERE id = 1",
        args![],
    )?;
    if tx.is_postgres() {
        // Delivered to every replica's `watch_key_changes` when this transaction commits.
        tx.exec(
            "SELECT pg_notify(?1, '')",
            args![super::notify::KEYS_CHANNEL],
        )?;
    }
    Ok(())
}

/// A request its key's spend limit refuses: the key's settled charges and open holds (`used`)
/// plus the request's hold (`required`) would pass `limit` (all micros).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLimitBreach {
    pub limit: Micros,
    pub used: Micros,
    pub required: Micros,
}

/// Check inside the admission transaction that `key` may take a hold of `amount` more: its
/// settled charges plus open holds plus `amount` stay within its spend limit (a key without
/// a limit always may). Same transaction as the hold, so concurrent requests cannot both pass.
///
/// # Errors
/// `KeySpendLimit` with the limit, what is spent or reserved, and `amount`; database errors.
pub(super) fn check_key_limit(tx: &Tx<'_>, key: KeyId, amount: Micros) -> Result<(), LedgerError> {
    // Most keys have no limit: one indexed row read, and no sums, for them.
    let limit: Option<Micros> = tx
        .query_opt(
            "SELECT spend_limit_micros FROM api_keys WHERE id = ?1",
            args![key],
            |r| r.get(0),
        )?
        .flatten();
    let Some(limit) = limit else {
        return Ok(());
    };
    let spend = spend_in(tx, key)?;
    let used = spend.spent_micros + spend.reserved_micros;
    if used.0.saturating_add(amount.0) > limit.0 {
        return Err(LedgerError::KeySpendLimit(KeyLimitBreach {
            limit,
            used,
            required: amount,
        }));
    }
    Ok(())
}

impl Ledger {
    /// Store a new key for `account` by its hash and display prefix.
    ///
    /// # Errors
    /// `NoSuchAccount`, database errors.
    pub fn insert_key(
        &self,
        account: AccountId,
        name: &str,
        key_hash: &[u8],
        prefix: &str,
    ) -> Result<ApiKeyRecord, LedgerError> {
        self.account(account)?;
        let id = self.write(|tx| {
            Ok(tx.query_one(
                "INSERT INTO api_keys (account_id, name, key_hash, prefix, created_at) VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                args![account, name, key_hash, prefix, now()],
                |r| r.get(0),
            )?)
        })?;
        self.key(id)
    }

    /// Rename a key, or set or clear its spend limit (micros) or expiry (Unix seconds). Bumps
    /// the key epoch so running servers re-read the key at once (an expiry moved into the
    /// past takes effect on the next request).
    ///
    /// # Errors
    /// `NoSuchKey`, `BadAmount` (a negative limit), database errors.
    pub fn update_key(&self, id: KeyId, u: &KeyUpdate) -> Result<ApiKeyRecord, LedgerError> {
        if matches!(u.spend_limit_micros, Some(Some(m)) if m < Micros::ZERO) {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            // Each `CASE WHEN given THEN new ELSE old END` leaves a field alone when the update
            // does not set it.
            let n = tx.exec(
                "UPDATE api_keys SET name = CASE WHEN ?1 THEN ?2 ELSE name END,
                        spend_limit_micros = CASE WHEN ?3 THEN ?4 ELSE spend_limit_micros END,
                        expires_at = CASE WHEN ?5 THEN ?6 ELSE expires_at END
                 WHERE id = ?7",
                args![
                    u.name.is_some(),
                    u.name,
                    u.spend_limit_micros.is_some(),
                    u.spend_limit_micros.flatten(),
                    u.expires_at.is_some(),
                    u.expires_at.flatten(),
                    id
                ],
            )?;
            if n == 0 {
                return Err(LedgerError::NoSuchKey(id.to_string()));
            }
            bump_key_epoch(tx)
        })?;
        self.key(id)
    }

    /// What each key of `account` has spent (settled charges), holds open and requests
    /// recorded, by key id. Keys with no requests are absent (zero).
    ///
    /// # Errors
    /// Database errors.
    pub fn key_spend(
        &self,
        account: AccountId,
    ) -> Result<std::collections::HashMap<KeyId, KeySpend>, LedgerError> {
        self.read(|c| {
            let rows = c.query_all(
                &format!("SELECT k.id, {SPEND_COLUMNS} FROM api_keys k WHERE k.account_id = ?1"),
                args![account],
                |r| Ok((r.get::<_, KeyId>(0)?, row_to_spend(r, 1)?)),
            )?;
            Ok(rows.into_iter().collect())
        })
    }

    /// What key `id` has spent (settled charges), holds open and requests recorded; zero for
    /// an unknown key.
    ///
    /// # Errors
    /// Database errors.
    pub fn key_spend_of(&self, id: KeyId) -> Result<KeySpend, LedgerError> {
        self.read(|c| spend_in(c, id))
    }

    /// # Errors
    /// `NoSuchKey`, database errors.
    pub fn key(&self, id: KeyId) -> Result<ApiKeyRecord, LedgerError> {
        self.read(|c| {
            c.query_opt(
                &format!("{KEY_SELECT} WHERE id = ?1"),
                args![id],
                row_to_key,
            )?
            .ok_or_else(|| LedgerError::NoSuchKey(id.to_string()))
        })
    }

    /// Look a key up by the SHA-256 of its full text.
    ///
    /// # Errors
    /// Database errors.
    pub fn key_by_hash(&self, key_hash: &[u8]) -> Result<Option<ApiKeyRecord>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                &format!("{KEY_SELECT} WHERE key_hash = ?1"),
                args![key_hash],
                row_to_key,
            )?)
        })
    }

    /// Keys of an account, newest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        self.read(|c| {
            let rows = c.query_all(
                &format!("{KEY_SELECT} WHERE account_id = ?1 ORDER BY id DESC"),
                args![account],
                row_to_key,
            )?;
            Ok(rows)
        })
    }

    /// Revoke a key and bump the revocation epoch (running servers purge their caches).
    ///
    /// # Errors
    /// `NoSuchKey`, database errors.
    pub fn revoke_key(&self, id: KeyId) -> Result<ApiKeyRecord, LedgerError> {
        self.write(|tx| {
            let n = tx.exec(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2",
                args![now(), id],
            )?;
            if n == 0 {
                return Err(LedgerError::NoSuchKey(id.to_string()));
            }
            bump_key_epoch(tx)
        })?;
        self.key(id)
    }

    /// The revocation epoch: changes whenever any key is revoked.
    ///
    /// # Errors
    /// Database errors.
    pub fn key_epoch(&self) -> Result<i64, LedgerError> {
        self.read(|c| {
            Ok(
                c.query_one("SELECT epoch FROM key_epoch WHERE id = 1", args![], |r| {
                    r.get(0)
                })?,
            )
        })
    }

    /// Record a key's last use (best effort, at most once a minute per key by the caller).
    ///
    /// # Errors
    /// Database errors.
    pub fn touch_key(&self, id: KeyId) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec(
                "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2",
                args![now(), id],
            )?;
            Ok(())
        })
    }

    /// Store a redeem code by the hash of its canonical form (`canonical_code`: trimmed, upper
    /// case), so users may type it in any case.
    ///
    /// # Errors
    /// `BadAmount`, database errors.
    pub fn insert_code(&self, code: &str, amount_micros: Micros) -> Result<(), LedgerError> {
        if amount_micros <= Micros::ZERO {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            tx.exec(
                "INSERT INTO codes (code_hash, amount_micros, created_at) VALUES (?1, ?2, ?3)",
                args![sha256(&canonical_code(code)), amount_micros, now()],
            )?;
            Ok(())
        })
    }

    /// Redeem a code once, crediting its amount atomically. Returns the micros credited. The
    /// code is matched in any case; codes stored before version 10 (hashed as typed) match
    /// as typed too.
    ///
    /// # Errors
    /// `BadCode` (unknown or used), database errors.
    pub fn redeem(&self, account: AccountId, code: &str) -> Result<Micros, LedgerError> {
        self.write(|tx| {
            let mut found = None;
            for hash in [sha256(&canonical_code(code)), sha256(code.trim())] {
                found = tx
                    .query_opt(
                        "SELECT amount_micros FROM codes WHERE code_hash = ?1 AND redeemed_by IS NULL",
                        args![&hash],
                        |r| r.get::<_, Micros>(0),
                    )?
                    .map(|a| (a, hash));
                if found.is_some() {
                    break;
                }
            }
            let (amount, hash) = found.ok_or(LedgerError::BadCode)?;
            tx.exec(
                "UPDATE codes SET redeemed_by = ?1, redeemed_at = ?2 WHERE code_hash = ?3",
                args![account, now(), hash],
            )?;
            add_balance(tx, account, amount)?;
            insert_entry(tx, account, "redeem", amount, None, Some("redeem code"))?;
            Ok(amount)
        })
    }
}

/// The form a redeem code is stored and matched in: without surrounding whitespace, in upper
/// case (ASCII), so `tg-abc` and ` TG-ABC ` are the same code.
pub fn canonical_code(code: &str) -> String {
    code.trim().to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::KeyUpdate;
    use crate::ledger::{temp_ledger, test_usage, LedgerError};
    use crate::money::Micros;

    #[test]
    fn open_holds_and_charges_count_against_a_key_limit() {
        let (_d, l) = temp_ledger();
        let a = l
            .create_account("k@example.com", Micros(1_000_000))
            .unwrap();
        let k = l.insert_key(a.id, "k", b"hash", "sk-svc-abcd").unwrap();
        let other = l
            .insert_key(a.id, "other", b"hash2", "sk-svc-ef01")
            .unwrap();
        let limit = KeyUpdate {
            spend_limit_micros: Some(Some(Micros(100))),
            ..KeyUpdate::default()
        };
        l.update_key(k.id, &limit).unwrap();
        l.admit_request("r1", a.id, Some(k.id), Micros(60), None)
            .unwrap();
        // 60 held + 60 > 100: refused while the first hold is open, nothing written.
        let e = l
            .admit_request("r2", a.id, Some(k.id), Micros(60), None)
            .unwrap_err();
        assert!(matches!(
            e,
            LedgerError::KeySpendLimit(b)
                if b.limit == 100 && b.used == 60 && b.required == 60
        ));
        // Another key of the account is not limited by it.
        l.admit_request("r3", a.id, Some(other.id), Micros(500), None)
            .unwrap();
        // The first request settles at 30: 30 spent, so 60 more fits, 71 would not.
        let mut u = test_usage("r1", a.id, 30);
        u.key_id = Some(k.id);
        l.settle(&u).unwrap();
        assert!(l
            .admit_request("r4", a.id, Some(k.id), Micros(71), None)
            .is_err());
        l.admit_request("r5", a.id, Some(k.id), Micros(70), None)
            .unwrap();
        let spend = l.key_spend(a.id).unwrap()[&k.id];
        assert_eq!(
            (spend.spent_micros, spend.reserved_micros, spend.requests),
            (Micros(30), Micros(70), 1)
        );
        for (r, key) in [("r3", other.id), ("r5", k.id)] {
            let mut u = test_usage(r, a.id, 0);
            u.key_id = Some(key);
            l.release(&u).unwrap();
        }
        assert!(l.check().unwrap().is_empty());
    }

    #[test]
    fn codes_redeem_once_and_atomically() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("r@example.com", Micros(0)).unwrap();
        l.insert_code("TG-ONE", Micros(2_500_000)).unwrap();
        assert_eq!(l.redeem(a.id, "TG-ONE").unwrap(), 2_500_000);
        assert!(matches!(
            l.redeem(a.id, "TG-ONE"),
            Err(LedgerError::BadCode)
        ));
        l.insert_code("tg-Two", Micros(1)).unwrap();
        assert_eq!(l.redeem(a.id, " TG-two ").unwrap(), 1);
        assert!(matches!(
            l.redeem(a.id, "TG-NOPE"),
            Err(LedgerError::BadCode)
        ));
        assert_eq!(l.account(a.id).unwrap().balance_micros, 2_500_001);
        assert_eq!(l.entries(a.id, 10).unwrap()[0].kind, "redeem");
        assert!(l.check().unwrap().is_empty());
    }
}
