//! Signing in and out: password sign-in, sign-in through an identity provider, dashboard
//! sessions (start, resolve, end one or all).

use super::{AccountService, AccountsError};
use crate::auth::password;
use crate::auth::session::{self, SessionPolicy, SessionPrincipal};
use crate::ids::AccountId;
use crate::ledger::{Account, ExternalIdentity};
use crate::money::Micros;

impl AccountService {
    /// The account whose normalized address is `email` and whose password is `password`.
    /// An unknown address costs the same argon2 work as a wrong password.
    ///
    /// # Errors
    /// `InvalidCredentials` (unknown address, no password, wrong password),
    /// `EmailNotVerified`, `Ledger`.
    pub async fn sign_in(&self, email: String, password: String) -> Result<Account, AccountsError> {
        self.run(move |l, _| {
            let login = l.login(&email)?;
            let matched = match login.as_ref().and_then(|x| x.password_hash.as_deref()) {
                Some(phc) => password::verify(&password, phc),
                None => {
                    password::verify_dummy(&password);
                    false
                }
            };
            let login = login
                .filter(|_| matched)
                .ok_or(AccountsError::InvalidCredentials)?;
            if !login.verified {
                return Err(AccountsError::EmailNotVerified);
            }
            Ok(l.account(login.account_id)?)
        })
        .await
    }

    /// The account of an identity provider's verified claims, linked or created
    /// (`ledger::sign_in_identity`); a new account gets `starter` micros.
    ///
    /// # Errors
    /// `UnverifiedIdentity`, `Ledger`.
    pub async fn sign_in_identity(
        &self,
        identity: ExternalIdentity,
        starter: Micros,
    ) -> Result<AccountId, AccountsError> {
        self.run(move |l, _| Ok(l.sign_in_identity(&identity, starter)?))
            .await
    }

    /// Start a session for `account` and return its cookie value (a new id at every
    /// sign-in: no session fixation); the session of cookie value `old`, if any, ends.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn start_session(
        &self,
        account: AccountId,
        old: Option<String>,
    ) -> Result<String, AccountsError> {
        self.run(move |l, _| {
            if let Some(old) = old {
                session::end(l, &old)?;
            }
            Ok(session::start(l, account)?)
        })
        .await
    }

    /// The signed-in account of session cookie `value` under `policy` (expired, unknown or
    /// malformed: `None`); touches the session's idle timer.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn resolve_session(
        &self,
        policy: SessionPolicy,
        value: String,
    ) -> Result<Option<SessionPrincipal>, AccountsError> {
        self.run(move |l, _| Ok(session::resolve(l, policy, &value)?))
            .await
    }

    /// End the session of cookie value `cookie` (sign-out).
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn end_session(&self, cookie: String) -> Result<(), AccountsError> {
        self.run(move |l, _| Ok(session::end(l, &cookie)?))
            .await
            .map(|_| ())
    }

    /// End every session of `account`; returns how many there were.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn end_all_sessions(&self, account: AccountId) -> Result<usize, AccountsError> {
        self.run(move |l, _| Ok(l.delete_sessions(account)?)).await
    }
}
