//! API keys (stored only as SHA-256 plus a display prefix) and redeem codes (stored hashed).

use r2d2_sqlite::rusqlite::{params, OptionalExtension};

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
}

fn row_to_key(r: &r2d2_sqlite::rusqlite::Row<'_>) -> r2d2_sqlite::rusqlite::Result<ApiKeyRecord> {
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
    })
}

const KEY_SELECT: &str =
    "SELECT id, account_id, name, prefix, created_at, last_used_at, revoked_at FROM api_keys";

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
            tx.execute(
                "INSERT INTO api_keys (account_id, name, key_hash, prefix, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![account, name, key_hash, prefix, now()],
            )?;
            Ok(KeyId(tx.last_insert_rowid()))
        })?;
        self.key(id)
    }

    /// # Errors
    /// `NoSuchKey`, database errors.
    pub fn key(&self, id: KeyId) -> Result<ApiKeyRecord, LedgerError> {
        self.read(|c| {
            c.query_row(&format!("{KEY_SELECT} WHERE id = ?1"), [id], row_to_key)
                .optional()?
                .ok_or_else(|| LedgerError::NoSuchKey(id.to_string()))
        })
    }

    /// Look a key up by the SHA-256 of its full text.
    ///
    /// # Errors
    /// Database errors.
    pub fn key_by_hash(&self, key_hash: &[u8]) -> Result<Option<ApiKeyRecord>, LedgerError> {
        self.read(|c| {
            Ok(c.query_row(
                &format!("{KEY_SELECT} WHERE key_hash = ?1"),
                [key_hash],
                row_to_key,
            )
            .optional()?)
        })
    }

    /// Keys of an account, newest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn keys(&self, account: AccountId) -> Result<Vec<ApiKeyRecord>, LedgerError> {
        self.read(|c| {
            let mut st = c.prepare(&format!(
                "{KEY_SELECT} WHERE account_id = ?1 ORDER BY id DESC"
            ))?;
            let rows = st.query_map([account], row_to_key)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Revoke a key and bump the revocation epoch (running servers purge their caches).
    ///
    /// # Errors
    /// `NoSuchKey`, database errors.
    pub fn revoke_key(&self, id: KeyId) -> Result<ApiKeyRecord, LedgerError> {
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE id = ?2",
                params![now(), id],
            )?;
            if n == 0 {
                return Err(LedgerError::NoSuchKey(id.to_string()));
            }
            tx.execute("UPDATE key_epoch SET epoch = epoch + 1 WHERE id = 1", [])?;
            Ok(())
        })?;
        self.key(id)
    }

    /// The revocation epoch: changes whenever any key is revoked.
    ///
    /// # Errors
    /// Database errors.
    pub fn key_epoch(&self) -> Result<i64, LedgerError> {
        self.read(
            |c| Ok(c.query_row("SELECT epoch FROM key_epoch WHERE id = 1", [], |r| r.get(0))?),
        )
    }

    /// Record a key's last use (best effort, at most once a minute per key by the caller).
    ///
    /// # Errors
    /// Database errors.
    pub fn touch_key(&self, id: KeyId) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE api_keys SET last_used_at = ?1 WHERE id = ?2",
                params![now(), id],
            )?;
            Ok(())
        })
    }

    /// Store a redeem code by its hash.
    ///
    /// # Errors
    /// `BadAmount`, database errors.
    pub fn insert_code(&self, code: &str, amount_micros: Micros) -> Result<(), LedgerError> {
        if amount_micros <= Micros::ZERO {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            tx.execute(
                "INSERT INTO codes (code_hash, amount_micros, created_at) VALUES (?1, ?2, ?3)",
                params![sha256(code), amount_micros, now()],
            )?;
            Ok(())
        })
    }

    /// Redeem a code once, crediting its amount atomically. Returns the micros credited.
    ///
    /// # Errors
    /// `BadCode` (unknown or used), database errors.
    pub fn redeem(&self, account: AccountId, code: &str) -> Result<Micros, LedgerError> {
        self.write(|tx| {
            let amount: Option<Micros> = tx
                .query_row(
                    "SELECT amount_micros FROM codes WHERE code_hash = ?1 AND redeemed_by IS NULL",
                    [sha256(code)],
                    |r| r.get(0),
                )
                .optional()?;
            let amount = amount.ok_or(LedgerError::BadCode)?;
            tx.execute(
                "UPDATE codes SET redeemed_by = ?1, redeemed_at = ?2 WHERE code_hash = ?3",
                params![account, now(), sha256(code)],
            )?;
            add_balance(tx, account, amount)?;
            insert_entry(tx, account, "redeem", amount, None, Some("redeem code"))?;
            Ok(amount)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::ledger::{temp_ledger, LedgerError};
    use crate::money::Micros;

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
        assert!(matches!(
            l.redeem(a.id, "TG-NOPE"),
            Err(LedgerError::BadCode)
        ));
        assert_eq!(l.account(a.id).unwrap().balance_micros, 2_500_000);
        assert_eq!(l.entries(a.id, 10).unwrap()[0].kind, "redeem");
        assert!(l.check().unwrap().is_empty());
    }
}
