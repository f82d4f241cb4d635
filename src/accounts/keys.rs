//! API keys of an account: list with what each spent, create, change (name, spend limit,
//! expiry), revoke. Changes go through the key cache (`auth::Authenticator`), so a revoked or
//! limited key takes effect on this server's next request.

use super::{AccountService, AccountsError};
use crate::auth::{create_key, Authenticator};
use crate::ids::{AccountId, KeyId};
use crate::ledger::{ApiKeyRecord, KeySpend, KeyUpdate, Ledger};

/// A key's record with what it has spent and holds (micros) and its request count.
pub struct KeyWithSpend {
    pub record: ApiKeyRecord,
    pub spend: KeySpend,
}

fn with_spend(l: &Ledger, record: ApiKeyRecord) -> Result<KeyWithSpend, AccountsError> {
    let spend = l.key_spend_of(record.id)?;
    Ok(KeyWithSpend { record, spend })
}

/// `id` if it is one of `account`'s keys.
fn own_key(l: &Ledger, account: AccountId, id: KeyId) -> Result<KeyId, AccountsError> {
    match l.key(id) {
        Ok(k) if k.account_id == account => Ok(id),
        Ok(_) => Err(AccountsError::NoSuchKey),
        Err(e) => Err(e.into()),
    }
}

/// Apply `update` to `account`'s key `id` through the key cache.
fn update_own(
    l: &Ledger,
    auth: &Authenticator,
    account: AccountId,
    id: KeyId,
    update: &KeyUpdate,
) -> Result<KeyWithSpend, AccountsError> {
    let id = own_key(l, account, id)?;
    with_spend(l, auth.update(id, update)?)
}

impl AccountService {
    /// Every key of `account`, oldest first, with its spend.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn keys(&self, account: AccountId) -> Result<Vec<KeyWithSpend>, AccountsError> {
        self.run(move |l, _| {
            let mut spend = l.key_spend(account)?;
            Ok(l.keys(account)?
                .into_iter()
                .map(|record| KeyWithSpend {
                    spend: spend.remove(&record.id).unwrap_or_default(),
                    record,
                })
                .collect())
        })
        .await
    }

    /// Create a key named `name` (checked by the caller) for `account`, with `update`'s spend
    /// limit and expiry when it sets them; returns the secret (shown once) and the record.
    ///
    /// # Errors
    /// `KeysNeedVerifiedEmail`, `Ledger`.
    pub async fn create_key(
        &self,
        account: AccountId,
        name: String,
        update: KeyUpdate,
    ) -> Result<(String, KeyWithSpend), AccountsError> {
        self.run(move |l, auth| {
            if !l.account(account)?.verified {
                return Err(AccountsError::KeysNeedVerifiedEmail);
            }
            let (key, mut record) = create_key(l, account, &name)?;
            if update.spend_limit_micros.is_some() || update.expires_at.is_some() {
                record = auth.update(record.id, &update)?;
            }
            Ok((key, with_spend(l, record)?))
        })
        .await
    }

    /// Change `account`'s key `id` (name, spend limit, expiry: what `update` sets).
    ///
    /// # Errors
    /// `NoSuchKey` (unknown, or another account's), `Ledger`.
    pub async fn update_key(
        &self,
        account: AccountId,
        id: KeyId,
        update: KeyUpdate,
    ) -> Result<KeyWithSpend, AccountsError> {
        self.run(move |l, auth| update_own(l, auth, account, id, &update))
            .await
    }

    /// Revoke `account`'s key `id`.
    ///
    /// # Errors
    /// `NoSuchKey` (unknown, or another account's), `Ledger`.
    pub async fn revoke_key(
        &self,
        account: AccountId,
        id: KeyId,
    ) -> Result<KeyWithSpend, AccountsError> {
        self.run(move |l, auth| {
            let id = own_key(l, account, id)?;
            with_spend(l, auth.revoke(id)?)
        })
        .await
    }
}
