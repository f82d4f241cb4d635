//! The account itself: its password, its deletion (`ledger::profile` says what is kept), and
//! the admin role's account list and balance adjustments.

use super::{AccountService, AccountsError};
use crate::auth::password;
use crate::ids::AccountId;
use crate::ledger::{sha256, Account, Ledger, LedgerError};
use crate::money::Micros;

/// The admin's e-mail address, if `account` is an admin.
fn require_admin(l: &Ledger, account: AccountId) -> Result<String, AccountsError> {
    let me = l.account(account)?;
    if me.admin {
        Ok(me.email)
    } else {
        Err(AccountsError::AdminOnly)
    }
}

impl AccountService {
    /// Set `account`'s password to `new` (checked against the policy by the caller); `current`
    /// must match when the account has a password. Every other session ends; the one of cookie
    /// value `keep_cookie` stays. Returns how many sessions ended.
    ///
    /// # Errors
    /// `WrongPassword`, `NewPasswordHash`, `Ledger`.
    pub async fn change_password(
        &self,
        account: AccountId,
        current: Option<String>,
        new: String,
        keep_cookie: String,
    ) -> Result<usize, AccountsError> {
        self.run(move |l, _| {
            let a = l.account(account)?;
            if let Some(phc) = l.login(&a.email)?.and_then(|x| x.password_hash) {
                if !password::verify(current.as_deref().unwrap_or(""), &phc) {
                    return Err(AccountsError::WrongPassword);
                }
            }
            let hash =
                password::hash(&new).map_err(|e| AccountsError::NewPasswordHash(e.to_string()))?;
            Ok(l.change_password(account, &hash, &sha256(&keep_cookie))?)
        })
        .await
    }

    /// Delete `account` once `confirm_email` is its address (any case, trimmed); its keys are
    /// revoked on this server's very next request.
    ///
    /// # Errors
    /// `ConfirmationMismatch`, `TopupPending`, `Ledger`.
    pub async fn delete_account(
        &self,
        account: AccountId,
        confirm_email: String,
    ) -> Result<(), AccountsError> {
        self.run(move |l, auth| {
            let a = l.account(account)?;
            if !confirm_email.trim().eq_ignore_ascii_case(&a.email) {
                return Err(AccountsError::ConfirmationMismatch);
            }
            l.delete_account(account)?;
            // Revoked keys must fail on this server's very next request too.
            auth.sync_revocations()?;
            Ok(())
        })
        .await
    }

    /// Up to `limit` accounts with ids above `after`, for admin `admin`.
    ///
    /// # Errors
    /// `AdminOnly`, `Ledger`.
    pub async fn accounts_page(
        &self,
        admin: AccountId,
        after: AccountId,
        limit: usize,
    ) -> Result<Vec<Account>, AccountsError> {
        self.run(move |l, _| {
            require_admin(l, admin)?;
            Ok(l.accounts_page(after, limit)?)
        })
        .await
    }

    /// Credit (or, negative, debit) `target` by `micros`, by admin `admin` for `reason`: an
    /// `adjustment` entry whose note names the admin.
    ///
    /// # Errors
    /// `AdminOnly`, `NoSuchAccount`, `WouldGoNegative`, `Ledger`.
    pub async fn adjust(
        &self,
        admin: AccountId,
        target: AccountId,
        micros: Micros,
        reason: String,
    ) -> Result<Account, AccountsError> {
        self.run(move |l, _| {
            let admin = require_admin(l, admin)?;
            l.adjust(target, micros, &format!("by {admin}: {reason}"))
                .map_err(|e| match e {
                    LedgerError::InsufficientBalance { available, .. } => {
                        AccountsError::WouldGoNegative { available }
                    }
                    LedgerError::NoSuchAccount(_) => AccountsError::NoSuchAccount,
                    other => other.into(),
                })
        })
        .await
    }
}
