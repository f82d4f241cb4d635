//! Dashboard sign-in records: password hashes (opaque PHC strings made by `auth`), e-mail
//! verification, server-side sessions and one-time e-mail tokens. Secrets (session ids, link
//! tokens) arrive here already hashed (SHA-256) and are stored only so.

use super::db::{args, Tx};

use super::accounts::{add_balance, insert_account, insert_entry};
use super::{now, Account, AccountId, Ledger, LedgerError, Micros};

/// What an e-mailed one-time token is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenPurpose {
    /// Confirm the address (and activate the account).
    Verify,
    /// Set a new password.
    Reset,
}

impl TokenPurpose {
    fn as_str(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Reset => "reset",
        }
    }
}

/// What sign-in needs to know about an e-mail address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    pub account_id: AccountId,
    /// argon2id PHC string; `None` for operator-made accounts that never set a password.
    pub password_hash: Option<String>,
    pub verified: bool,
}

/// A stored session (looked up by the SHA-256 of its cookie value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionRecord {
    pub account_id: AccountId,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds of the last request that used it.
    pub last_seen_at: i64,
}

/// Mark `account` verified inside `tx`; the first time only, grant it `starter_micros` (a
/// `grant` entry). Returns whether it was newly verified.
pub(super) fn mark_verified(
    tx: &Tx<'_>,
    account: AccountId,
    starter_micros: Micros,
) -> Result<bool, LedgerError> {
    let newly = tx.exec(
        "UPDATE accounts SET verified_at = ?1 WHERE id = ?2 AND verified_at IS NULL",
        args![now(), account],
    )? == 1;
    if newly && starter_micros > Micros::ZERO {
        insert_entry(
            tx,
            account,
            "grant",
            starter_micros,
            None,
            Some("starter balance"),
        )?;
        add_balance(tx, account, starter_micros)?;
    }
    Ok(newly)
}

impl Ledger {
    /// Create a dashboard account: unverified, no balance until verification.
    ///
    /// # Errors
    /// `EmailTaken`, database errors.
    pub fn sign_up(&self, email: &str, password_hash: &str) -> Result<Account, LedgerError> {
        let id = self.write(|tx| insert_account(tx, email, Some(password_hash), false))?;
        self.account(id)
    }

    /// The sign-in record of an e-mail address, if an account has it.
    ///
    /// # Errors
    /// Database errors.
    pub fn login(&self, email: &str) -> Result<Option<Login>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                "SELECT id, password_hash, verified_at IS NOT NULL FROM accounts WHERE email = ?1",
                args![email],
                |r| {
                    Ok(Login {
                        account_id: r.get(0)?,
                        password_hash: r.get(1)?,
                        verified: r.get(2)?,
                    })
                },
            )?)
        })
    }

    /// Store a one-time token (by hash) for `account`, valid for `ttl_secs`.
    ///
    /// # Errors
    /// Database errors.
    pub fn insert_email_token(
        &self,
        account: AccountId,
        purpose: TokenPurpose,
        token_hash: &[u8],
        ttl_secs: i64,
    ) -> Result<(), LedgerError> {
        self.write(|tx| {
            let t = now();
            tx.exec(
                "INSERT INTO email_tokens (token_hash, account_id, purpose, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                args![token_hash, account, purpose.as_str(), t, t.saturating_add(ttl_secs)],
            )?;
            Ok(())
        })
    }

    /// Whether an unused, unexpired token of `purpose` has this hash (a read; `verify_email`
    /// and `reset_password` consume tokens atomically).
    ///
    /// # Errors
    /// Database errors.
    pub fn email_token_usable(
        &self,
        token_hash: &[u8],
        purpose: TokenPurpose,
    ) -> Result<bool, LedgerError> {
        self.read(|c| {
            Ok(c.query_one(
                "SELECT EXISTS (SELECT 1 FROM email_tokens WHERE token_hash = ?1 AND purpose = ?2 AND used_at IS NULL AND expires_at > ?3)",
                args![token_hash, purpose.as_str(), now()],
                |r| r.get(0),
            )?)
        })
    }

    /// Consume an unused, unexpired token of `purpose` inside `tx`; returns its account.
    fn take_token(
        tx: &Tx<'_>,
        token_hash: &[u8],
        purpose: TokenPurpose,
    ) -> Result<AccountId, LedgerError> {
        let t = now();
        let account: Option<AccountId> = tx
            .query_opt(
                "SELECT account_id FROM email_tokens WHERE token_hash = ?1 AND purpose = ?2 AND used_at IS NULL AND expires_at > ?3",
                args![token_hash, purpose.as_str(), t],
                |r| r.get(0),
            )?;
        let account = account.ok_or(LedgerError::BadToken)?;
        tx.exec(
            "UPDATE email_tokens SET used_at = ?1 WHERE token_hash = ?2",
            args![t, token_hash],
        )?;
        Ok(account)
    }

    /// Confirm an address with its verification token, in one transaction: the token is used
    /// up, the account marked verified and, the first time only, granted `starter_micros`.
    /// Returns the account.
    ///
    /// # Errors
    /// `BadToken` (unknown, used or expired), database errors.
    pub fn verify_email(
        &self,
        token_hash: &[u8],
        starter_micros: Micros,
    ) -> Result<AccountId, LedgerError> {
        self.write(|tx| {
            let account = Self::take_token(tx, token_hash, TokenPurpose::Verify)?;
            mark_verified(tx, account, starter_micros)?;
            Ok(account)
        })
    }

    /// Set a new password with a reset token, in one transaction: the token is used up, the
    /// address counts as verified (the link reached it) and, if it was not yet, granted
    /// `starter_micros` as a verification link would, and every session of the account ends.
    /// Returns the account.
    ///
    /// # Errors
    /// `BadToken`, database errors.
    pub fn reset_password(
        &self,
        token_hash: &[u8],
        password_hash: &str,
        starter_micros: Micros,
    ) -> Result<AccountId, LedgerError> {
        self.write(|tx| {
            let account = Self::take_token(tx, token_hash, TokenPurpose::Reset)?;
            tx.exec(
                "UPDATE accounts SET password_hash = ?1 WHERE id = ?2",
                args![password_hash, account],
            )?;
            mark_verified(tx, account, starter_micros)?;
            tx.exec("DELETE FROM sessions WHERE account_id = ?1", args![account])?;
            Ok(account)
        })
    }

    /// Store a new session (by the hash of its cookie value).
    ///
    /// # Errors
    /// Database errors.
    pub fn insert_session(&self, id_hash: &[u8], account: AccountId) -> Result<(), LedgerError> {
        self.write(|tx| {
            let t = now();
            tx.exec(
                "INSERT INTO sessions (id_hash, account_id, created_at, last_seen_at) VALUES (?1, ?2, ?3, ?3)",
                args![id_hash, account, t],
            )?;
            Ok(())
        })
    }

    /// The session with this hash, if it exists.
    ///
    /// # Errors
    /// Database errors.
    pub fn session(&self, id_hash: &[u8]) -> Result<Option<SessionRecord>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                "SELECT account_id, created_at, last_seen_at FROM sessions WHERE id_hash = ?1",
                args![id_hash],
                |r| {
                    Ok(SessionRecord {
                        account_id: r.get(0)?,
                        created_at: r.get(1)?,
                        last_seen_at: r.get(2)?,
                    })
                },
            )?)
        })
    }

    /// Record a session's use now.
    ///
    /// # Errors
    /// Database errors.
    pub fn touch_session(&self, id_hash: &[u8]) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec(
                "UPDATE sessions SET last_seen_at = ?1 WHERE id_hash = ?2",
                args![now(), id_hash],
            )?;
            Ok(())
        })
    }

    /// End one session. Returns whether it existed.
    ///
    /// # Errors
    /// Database errors.
    pub fn delete_session(&self, id_hash: &[u8]) -> Result<bool, LedgerError> {
        self.write(|tx| Ok(tx.exec("DELETE FROM sessions WHERE id_hash = ?1", args![id_hash])? > 0))
    }

    /// Delete sessions past their idle or absolute lifetime (seconds) and e-mail tokens that
    /// expired or were used more than a day ago. Returns how many rows went. Run at start-up.
    ///
    /// # Errors
    /// Database errors.
    pub fn purge_expired_sign_in(
        &self,
        idle_secs: i64,
        absolute_secs: i64,
    ) -> Result<usize, LedgerError> {
        self.write(|tx| {
            let t = now();
            let s = tx.exec(
                "DELETE FROM sessions WHERE last_seen_at < ?1 OR created_at < ?2",
                args![t - idle_secs, t - absolute_secs],
            )?;
            let e = tx.exec(
                "DELETE FROM email_tokens WHERE expires_at < ?1 OR used_at < ?2",
                args![t, t - 24 * 3600],
            )?;
            Ok(s + e)
        })
    }

    /// End every session of an account ("sign out everywhere"). Returns how many ended.
    ///
    /// # Errors
    /// Database errors.
    pub fn delete_sessions(&self, account: AccountId) -> Result<usize, LedgerError> {
        self.write(|tx| Ok(tx.exec("DELETE FROM sessions WHERE account_id = ?1", args![account])?))
    }
}

#[cfg(test)]
mod tests {
    use crate::ledger::{sha256, temp_ledger, LedgerError, TokenPurpose};
    use crate::money::Micros;

    #[test]
    fn verification_grants_the_starter_balance_once_and_tokens_are_single_use() {
        let (_d, l) = temp_ledger();
        let a = l.sign_up("new@example.com", "$argon2id$fake").unwrap();
        assert!(!a.verified);
        assert_eq!(a.balance_micros, 0);
        assert!(matches!(
            l.sign_up("new@example.com", "x"),
            Err(LedgerError::EmailTaken(_))
        ));
        let t = sha256("token-1");
        l.insert_email_token(a.id, TokenPurpose::Verify, &t, 3600)
            .unwrap();
        // A verify token is not a reset token.
        assert!(matches!(
            l.reset_password(&t, "h", Micros(0)),
            Err(LedgerError::BadToken)
        ));
        assert_eq!(l.verify_email(&t, Micros(100_000)).unwrap(), a.id);
        assert!(matches!(
            l.verify_email(&t, Micros(100_000)),
            Err(LedgerError::BadToken)
        ));
        let t2 = sha256("token-2");
        l.insert_email_token(a.id, TokenPurpose::Verify, &t2, 3600)
            .unwrap();
        l.verify_email(&t2, Micros(100_000)).unwrap();
        let acc = l.account(a.id).unwrap();
        assert!(acc.verified);
        assert_eq!(acc.balance_micros, 100_000, "granted once");
        // Expired tokens are refused.
        let t3 = sha256("token-3");
        l.insert_email_token(a.id, TokenPurpose::Reset, &t3, -1)
            .unwrap();
        assert!(matches!(
            l.reset_password(&t3, "h", Micros(0)),
            Err(LedgerError::BadToken)
        ));
        assert!(l.check().unwrap().is_empty());
    }

    #[test]
    fn password_reset_ends_every_session() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("op@example.com", Micros(0)).unwrap();
        assert!(a.verified, "operator accounts count as verified");
        assert_eq!(
            l.login("op@example.com").unwrap().unwrap().password_hash,
            None
        );
        l.insert_session(&sha256("s1"), a.id).unwrap();
        l.insert_session(&sha256("s2"), a.id).unwrap();
        assert!(l.session(&sha256("s1")).unwrap().is_some());
        let t = sha256("reset");
        l.insert_email_token(a.id, TokenPurpose::Reset, &t, 3600)
            .unwrap();
        l.reset_password(&t, "$argon2id$new", Micros(7)).unwrap();
        assert_eq!(
            l.account(a.id).unwrap().balance_micros,
            0,
            "already verified: no grant"
        );
        assert!(l.session(&sha256("s1")).unwrap().is_none());
        assert!(l.session(&sha256("s2")).unwrap().is_none());
        assert_eq!(
            l.login("op@example.com")
                .unwrap()
                .unwrap()
                .password_hash
                .as_deref(),
            Some("$argon2id$new")
        );
        // Start-up purge: a stale session goes, a fresh one stays. (The used reset token is
        // younger than a day, so it stays too.)
        l.insert_session(&sha256("fresh"), a.id).unwrap();
        assert_eq!(l.purge_expired_sign_in(3600, 86_400).unwrap(), 0);
        assert!(l.session(&sha256("fresh")).unwrap().is_some());
        assert_eq!(l.purge_expired_sign_in(-1, 86_400).unwrap(), 1);
        assert!(l.session(&sha256("fresh")).unwrap().is_none());
    }
}
