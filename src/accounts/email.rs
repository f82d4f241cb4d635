//! E-mailed one-time links: sign-up with its verification link, confirming an address,
//! resending the link, and password reset. The one place that stores a link's token (as its
//! SHA-256) and writes the message.

use super::{AccountService, AccountsError};
use crate::auth::password;
use crate::auth::session::new_secret;
use crate::ids::AccountId;
use crate::ledger::{sha256, Account, Ledger, TokenPurpose};
use crate::mail::{Mail, Outbox};
use crate::money::Micros;

/// How long e-mailed links stay valid, in seconds.
pub const LINK_TTL_SECS: i64 = 24 * 3600;

/// Where links go out: the outbox and the base URL their paths hang under
/// (e.g. `https://llm.example.com`).
pub struct EmailLinks {
    pub outbox: std::sync::Arc<Outbox>,
    pub base: String,
}

impl EmailLinks {
    /// Store a new one-time token of `purpose` for `account` and e-mail its link to `email`.
    /// Blocking.
    fn send(
        &self,
        ledger: &Ledger,
        account: AccountId,
        email: String,
        purpose: TokenPurpose,
    ) -> Result<(), AccountsError> {
        let token = new_secret();
        ledger.insert_email_token(account, purpose, &sha256(&token), LINK_TTL_SECS)?;
        let base = &self.base;
        let (subject, body) = match purpose {
            TokenPurpose::Verify => (
                "Confirm your tollgate account",
                format!("Open this link to confirm your address (valid 24 hours):\n{base}/verify?token={token}\n"),
            ),
            TokenPurpose::Reset => (
                "Reset your tollgate password",
                format!("Open this link to choose a new password (valid 24 hours):\n{base}/reset?token={token}\nIf you did not ask for this, ignore this message.\n"),
            ),
        };
        self.outbox.send(Mail {
            to: email,
            subject: subject.into(),
            body,
        });
        Ok(())
    }
}

fn hash(password: &str) -> Result<String, AccountsError> {
    password::hash(password).map_err(|e| AccountsError::PasswordHash(e.to_string()))
}

impl AccountService {
    /// Create an unverified account for the normalized address `email` with `password`
    /// (already checked against the policy) and e-mail its verification link.
    ///
    /// # Errors
    /// `EmailTaken`, `PasswordHash`, `Ledger`.
    pub async fn sign_up(
        &self,
        email: String,
        password: String,
        links: EmailLinks,
    ) -> Result<Account, AccountsError> {
        self.run(move |l, _| {
            let account = l.sign_up(&email, &hash(&password)?)?;
            links.send(l, account.id, email, TokenPurpose::Verify)?;
            Ok(account)
        })
        .await
    }

    /// Confirm the address whose verification link carries `token`; the first confirmation
    /// grants `starter` micros.
    ///
    /// # Errors
    /// `BadToken`, `Ledger`.
    pub async fn verify_email(&self, token: String, starter: Micros) -> Result<(), AccountsError> {
        self.run(move |l, _| Ok(l.verify_email(&sha256(&token), starter)?))
            .await
            .map(|_| ())
    }

    /// E-mail a new verification link if `email` has an account not confirmed yet; nothing
    /// otherwise (the caller answers the same either way).
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn resend_verification(
        &self,
        email: String,
        links: EmailLinks,
    ) -> Result<(), AccountsError> {
        self.run(move |l, _| {
            if let Some(login) = l.login(&email)?.filter(|x| !x.verified) {
                links.send(l, login.account_id, email, TokenPurpose::Verify)?;
            }
            Ok(())
        })
        .await
    }

    /// E-mail a password-reset link if `email` has an account; nothing otherwise.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn request_reset(
        &self,
        email: String,
        links: EmailLinks,
    ) -> Result<(), AccountsError> {
        self.run(move |l, _| {
            if let Some(login) = l.login(&email)? {
                links.send(l, login.account_id, email, TokenPurpose::Reset)?;
            }
            Ok(())
        })
        .await
    }

    /// Set the password of the reset link's account to `password` (checked against the
    /// policy) and end its sessions; an unconfirmed address counts as confirmed (the link
    /// reached it) and gets `starter` micros once.
    ///
    /// # Errors
    /// `BadToken` (checked before any argon2 work), `PasswordHash`, `Ledger`.
    pub async fn confirm_reset(
        &self,
        token: String,
        password: String,
        starter: Micros,
    ) -> Result<(), AccountsError> {
        self.run(move |l, _| {
            if !l.email_token_usable(&sha256(&token), TokenPurpose::Reset)? {
                return Err(AccountsError::BadToken);
            }
            let hash = hash(&password)?;
            Ok(l.reset_password(&sha256(&token), &hash, starter)?)
        })
        .await
        .map(|_| ())
    }
}
