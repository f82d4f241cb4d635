//! What an account spent: metered requests (filtered, paged), spend per day and model, ledger
//! entries; and redeeming a code.

use std::collections::HashMap;

use super::{AccountService, AccountsError};
use crate::ids::{AccountId, KeyId};
use crate::ledger::{now, Account, DaySpend, EntryRow, UsageFilter, UsageRecord};
use crate::money::Micros;

/// One metered request with the name its key has now.
pub struct UsageLine {
    /// Unix seconds.
    pub created_at: i64,
    pub record: UsageRecord,
    /// `None` for the playground's session path (no key).
    pub key_name: Option<String>,
}

/// A page of usage, newest first, and the cursor of the next page (`None` at the end).
pub struct UsagePage {
    pub lines: Vec<UsageLine>,
    pub next_before: Option<i64>,
}

impl AccountService {
    /// Up to `limit` of `account`'s metered requests matching `filter`, older than cursor
    /// `before` (newest first when `None`).
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn usage(
        &self,
        account: AccountId,
        filter: UsageFilter,
        before: Option<i64>,
        limit: usize,
    ) -> Result<UsagePage, AccountsError> {
        self.run(move |l, _| {
            let names: HashMap<KeyId, String> = l
                .keys(account)?
                .into_iter()
                .map(|k| (k.id, k.name))
                .collect();
            let page = l.usage_page(account, &filter, before, limit)?;
            let next_before = (page.len() == limit)
                .then(|| page.last().map(|r| r.0))
                .flatten();
            let lines = page
                .into_iter()
                .map(|(_, created_at, record)| UsageLine {
                    created_at,
                    key_name: record.key_id.and_then(|k| names.get(&k).cloned()),
                    record,
                })
                .collect();
            Ok(UsagePage { lines, next_before })
        })
        .await
    }

    /// `account`'s spend per UTC day and model over the last `days` days (today included).
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn daily_spend(
        &self,
        account: AccountId,
        days: i64,
    ) -> Result<Vec<DaySpend>, AccountsError> {
        self.run(move |l, _| Ok(l.daily_spend(account, now(), days)?))
            .await
    }

    /// `account`'s newest `limit` ledger entries.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn entries(
        &self,
        account: AccountId,
        limit: usize,
    ) -> Result<Vec<EntryRow>, AccountsError> {
        self.run(move |l, _| Ok(l.entries(account, limit)?)).await
    }

    /// Redeem `code` into `account`; returns what it credited and the account after.
    ///
    /// # Errors
    /// `BadCode`, `Ledger`.
    pub async fn redeem(
        &self,
        account: AccountId,
        code: String,
    ) -> Result<(Micros, Account), AccountsError> {
        self.run(move |l, _| {
            let credited = l.redeem(account, &code)?;
            Ok((credited, l.account(account)?))
        })
        .await
    }
}
