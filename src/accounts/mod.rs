//! The accounts service: everything a person does to their account outside paid requests.
//!
//! Owns: sign-up and e-mail verification, password reset and change, sign-in by password or
//! by an identity provider, dashboard sessions, API keys and their limits, the account view
//! and its deletion, usage and ledger-entry queries, redeem codes, card top-ups, the admin's
//! adjustments, and the Responses API's stored responses of an account. Every call runs its
//! ledger work on the blocking pool and answers with typed records or an [`AccountsError`].
//! May use: `ledger`, `auth` (passwords, sessions, the key cache), `mail`, `payments`.
//! Never: axum or any HTTP type, wire formats (the dashboard renders what it gets), `metering`.
//!
//! Input checks that belong to a form (an e-mail's shape, a key's name, a password's policy)
//! stay with the handler that can name the form field; the rules that need the ledger (an
//! address is verified, a key is the caller's, a token is usable) live here.

mod email;
mod keys;
mod profile;
mod responses;
mod sessions;
mod topups;
mod usage;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use self::email::{EmailLinks, LINK_TTL_SECS};
pub use self::keys::KeyWithSpend;
pub use self::topups::NewCheckout;
pub use self::usage::{UsageLine, UsagePage};
use crate::auth::Authenticator;
pub use crate::ledger::{
    now, Account, ApiKeyRecord, DaySpend, EntryRow, ExternalIdentity, KeyFilter, KeySpend,
    KeyState, KeyUpdate, SavedResponse, TopupOutcome, TopupStatus, UsageFilter, UsageRecord,
};
use crate::ledger::{Ledger, LedgerError};
use crate::money::Micros;

/// Why an accounts call failed. Each variant is one answer the dashboard gives (its table is
/// `api::dashboard::common`'s `From<AccountsError>`); `Ledger` is a storage failure.
#[derive(Debug, thiserror::Error)]
pub enum AccountsError {
    /// Sign-up with an address that already has an account.
    #[error("an account with this e-mail address already exists")]
    EmailTaken,
    /// An identity provider's sign-in whose address the provider has not verified.
    #[error("the identity provider has not verified the address")]
    UnverifiedIdentity,
    /// An e-mailed link's token that is unknown, used or expired.
    #[error("the link is unknown, used or expired")]
    BadToken,
    /// A redeem code that is unknown or already redeemed.
    #[error("the code is unknown or already redeemed")]
    BadCode,
    /// Account deletion while a card payment of the last 24 hours is unconfirmed.
    #[error("a top-up of the account is still pending")]
    TopupPending,
    /// A key id that is not one of the caller's keys.
    #[error("no such API key")]
    NoSuchKey,
    /// Wrong e-mail address or password (the same answer for both: no account discovery).
    #[error("wrong e-mail address or password")]
    InvalidCredentials,
    /// Password sign-in of an address not confirmed yet.
    #[error("the e-mail address is not confirmed")]
    EmailNotVerified,
    /// Key creation on an account whose address is not confirmed yet.
    #[error("keys need a confirmed e-mail address")]
    KeysNeedVerifiedEmail,
    /// The password could not be hashed (`auth::password::PasswordError`, rendered).
    #[error("{0}")]
    PasswordHash(String),
    /// The new password of a password change could not be hashed (as `PasswordHash`).
    #[error("{0}")]
    NewPasswordHash(String),
    /// A password change whose current password is wrong.
    #[error("the current password is not right")]
    WrongPassword,
    /// Account deletion whose typed e-mail address is not the account's.
    #[error("the confirmation does not match the account's address")]
    ConfirmationMismatch,
    /// An admin call by an account that is not an admin.
    #[error("only admin accounts can do this")]
    AdminOnly,
    /// An admin adjustment of an account that does not exist.
    #[error("no such account")]
    NoSuchAccount,
    /// An admin debit larger than the available balance (micros).
    #[error("the debit exceeds the available balance ({available})")]
    WouldGoNegative { available: Micros },
    /// A first top-up under `payments::MIN_FIRST_TOPUP_MICROS`; `usd` is what it is worth.
    #[error("the first top-up must be at least 1.00 USD")]
    FirstTopupTooSmall {
        amount: String,
        currency: String,
        usd: Micros,
    },
    /// The payment provider could not start a checkout (logged at warn).
    #[error("the payment provider could not start a checkout: {0}")]
    PaymentProvider(String),
    /// A provider event that matches no pending top-up (checkout, currency and amount).
    #[error("no pending top-up matches this checkout, currency and amount")]
    UnknownCheckout,
    /// The ledger failed (database, pool, or the blocking task).
    #[error(transparent)]
    Ledger(LedgerError),
}

impl AccountsError {
    /// Whether the ledger could not be reached or written (disk full, I/O, unreachable, pool
    /// exhausted): callers answer 503 rather than 500.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Ledger(e) if e.is_unavailable())
    }
}

impl From<LedgerError> for AccountsError {
    /// The ledger's refusals a person can act on become their own variants; the rest are
    /// storage failures.
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::EmailTaken(_) => Self::EmailTaken,
            LedgerError::UnverifiedIdentity(_) => Self::UnverifiedIdentity,
            LedgerError::BadToken => Self::BadToken,
            LedgerError::BadCode => Self::BadCode,
            LedgerError::TopupPending => Self::TopupPending,
            LedgerError::NoSuchKey(_) => Self::NoSuchKey,
            other => Self::Ledger(other),
        }
    }
}

/// The accounts service over one ledger and the key cache in front of it. Cheap to clone.
#[derive(Clone)]
pub struct AccountService {
    ledger: Arc<Ledger>,
    auth: Arc<Authenticator>,
}

impl AccountService {
    /// The service over `ledger`; `auth` is the key cache that key changes must purge.
    pub fn new(ledger: Arc<Ledger>, auth: Arc<Authenticator>) -> Self {
        Self { ledger, auth }
    }

    /// The ledger, for the composition root (`app`: replica upkeep) only.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Run `f` on the blocking pool with the ledger and the key cache.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Ledger, &Authenticator) -> Result<T, AccountsError> + Send + 'static,
    ) -> Result<T, AccountsError> {
        let (ledger, auth) = (self.ledger.clone(), self.auth.clone());
        tokio::task::spawn_blocking(move || f(&ledger, &auth))
            .await
            .map_err(|e| AccountsError::Ledger(LedgerError::Join(e.to_string())))?
    }

    /// The account `id`.
    ///
    /// # Errors
    /// `Ledger` (including an unknown account).
    pub async fn account(&self, id: crate::ids::AccountId) -> Result<Account, AccountsError> {
        self.run(move |l, _| Ok(l.account(id)?)).await
    }
}
