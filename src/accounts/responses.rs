//! The Responses API's stored responses of an account (`ledger::responses` keeps them for
//! `RESPONSE_TTL_S`): read one, delete one, save one.

use super::{AccountService, AccountsError};
use crate::ids::AccountId;
use crate::ledger::SavedResponse;

impl AccountService {
    /// `account`'s stored response `id`, if it has one.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn saved_response(
        &self,
        id: String,
        account: AccountId,
    ) -> Result<Option<SavedResponse>, AccountsError> {
        self.run(move |l, _| Ok(l.response(&id, account)?)).await
    }

    /// Delete `account`'s stored response `id`; whether it existed.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn delete_response(
        &self,
        id: String,
        account: AccountId,
    ) -> Result<bool, AccountsError> {
        self.run(move |l, _| Ok(l.delete_response(&id, account)?))
            .await
    }

    /// Keep `saved` as `account`'s response `id` (replacing one with the same id).
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn save_response(
        &self,
        id: String,
        account: AccountId,
        saved: SavedResponse,
    ) -> Result<(), AccountsError> {
        self.run(move |l, _| Ok(l.save_response(&id, account, &saved)?))
            .await
    }
}
