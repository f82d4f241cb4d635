//! Account self-service on the dashboard: changing the password and deleting the account.
//!
//! Deletion keeps the books: ledger entries, usage records, holds and top-ups stay under the
//! account's id (bookkeeping and tax law require payment records to be kept, e.g. 6-10 years
//! in the EU member states and the US IRS's record-keeping rules; GDPR Art. 17(3)(b) exempts
//! data kept to meet such a legal obligation). Everything that identifies or authenticates
//! the person goes: the e-mail address (replaced by `deleted-<id>@deleted.invalid`), the
//! password hash, sessions, e-mailed tokens, single sign-on identities; every API key is
//! revoked. The remaining balance stays on the closed account and is not paid out. An account
//! with a card payment started in the last 24 hours and not confirmed yet cannot be deleted
//! (the payment would credit a closed account): Stripe Checkout sessions expire after 24 hours.

use super::db::args;

use super::{now, AccountId, Ledger, LedgerError};

/// How long a pending top-up blocks deletion (Stripe Checkout's session lifetime), seconds.
const PENDING_TOPUP_SECS: i64 = 86_400;

/// The e-mail address a deleted account keeps (`.invalid` is reserved by RFC 2606).
pub fn deleted_email(account: AccountId) -> String {
    format!("deleted-{account}@deleted.invalid")
}

impl Ledger {
    /// Set a new password hash for `account` and end its other sessions (all but the one
    /// whose hash is `keep_session`). Returns how many sessions ended.
    ///
    /// # Errors
    /// `NoSuchAccount`, database errors.
    pub fn change_password(
        &self,
        account: AccountId,
        password_hash: &str,
        keep_session: &[u8],
    ) -> Result<usize, LedgerError> {
        self.write(|tx| {
            let n = tx.exec(
                "UPDATE accounts SET password_hash = ?1 WHERE id = ?2 AND deleted_at IS NULL",
                args![password_hash, account],
            )?;
            if n == 0 {
                return Err(LedgerError::NoSuchAccount(account.to_string()));
            }
            Ok(tx.exec(
                "DELETE FROM sessions WHERE account_id = ?1 AND id_hash != ?2",
                args![account, keep_session],
            )?)
        })
    }

    /// Delete `account` as the module doc says, in one transaction; running servers drop
    /// their cached keys (the key epoch is bumped).
    ///
    /// # Errors
    /// `NoSuchAccount` (unknown or already deleted), `TopupPending`, database errors.
    pub fn delete_account(&self, account: AccountId) -> Result<(), LedgerError> {
        self.write(|tx| {
            let t = now();
            let pending: i64 = tx.query_one(
                "SELECT COUNT(*) FROM topups WHERE account_id = ?1 AND state = 'pending' AND created_at > ?2",
                args![account, t - PENDING_TOPUP_SECS],
                |r| r.get(0),
            )?;
            if pending > 0 {
                return Err(LedgerError::TopupPending);
            }
            let n = tx.exec(
                "UPDATE accounts SET email = ?1, password_hash = NULL, role = 'user', deleted_at = ?2
                 WHERE id = ?3 AND deleted_at IS NULL",
                args![deleted_email(account), t, account],
            )?;
            if n == 0 {
                return Err(LedgerError::NoSuchAccount(account.to_string()));
            }
            tx.exec(
                "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?1) WHERE account_id = ?2",
                args![t, account],
            )?;
            for table in ["sessions", "email_tokens", "identities"] {
                tx.exec(&format!("DELETE FROM {table} WHERE account_id = ?1"), args![account])?;
            }
            super::keys::bump_key_epoch(tx)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{sha256, temp_ledger, test_usage, KeyState};
    use crate::money::Micros;

    #[test]
    fn deletion_keeps_the_books_and_removes_the_person() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("gone@example.com", Micros(1_000)).unwrap();
        let k = l.insert_key(a.id, "k", b"hash", "sk-svc-abcd").unwrap();
        l.reserve("r1", a.id, Micros(100)).unwrap();
        l.settle(&test_usage("r1", a.id, 40)).unwrap();
        l.insert_session(&sha256("s1"), a.id).unwrap();
        l.insert_topup(&crate::ledger::NewTopup {
            account_id: a.id,
            provider: "stripe".into(),
            provider_ref: "cs_pending".into(),
            currency: "usd".into(),
            amount_minor: 500,
            usd_micros: Micros(5_000_000),
            rate: "1".into(),
        })
        .unwrap();
        assert!(
            matches!(l.delete_account(a.id), Err(LedgerError::TopupPending)),
            "a card payment under way would credit a closed account"
        );
        l.write(|tx| Ok(tx.exec("UPDATE topups SET created_at = created_at - 90000", args![])?))
            .unwrap();
        l.delete_account(a.id).unwrap();
        let after = l.account(a.id).unwrap();
        assert_eq!(after.email, deleted_email(a.id));
        assert_eq!(after.balance_micros, 960, "the balance is not moved");
        assert!(l.login("gone@example.com").unwrap().is_none());
        assert!(l.session(&sha256("s1")).unwrap().is_none());
        assert_eq!(l.key(k.id).unwrap().state, KeyState::Revoked);
        assert!(l.usage("r1").unwrap().is_some(), "usage kept");
        assert_eq!(
            l.entries(a.id, 10).unwrap().len(),
            4,
            "grant, hold, settle, release kept"
        );
        assert!(matches!(
            l.delete_account(a.id),
            Err(LedgerError::NoSuchAccount(_))
        ));
        // The address is free for a new account.
        l.create_account("gone@example.com", Micros(0)).unwrap();
        assert!(l.check().unwrap().is_empty());
    }

    #[test]
    fn a_password_change_ends_the_other_sessions_only() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("pw@example.com", Micros(0)).unwrap();
        for s in ["mine", "other1", "other2"] {
            l.insert_session(&sha256(s), a.id).unwrap();
        }
        assert_eq!(
            l.change_password(a.id, "$argon2id$x", &sha256("mine"))
                .unwrap(),
            2
        );
        assert!(l.session(&sha256("mine")).unwrap().is_some());
        assert!(l.session(&sha256("other1")).unwrap().is_none());
        assert_eq!(
            l.login("pw@example.com")
                .unwrap()
                .unwrap()
                .password_hash
                .as_deref(),
            Some("$argon2id$x")
        );
    }
}
