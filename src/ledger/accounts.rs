//! Accounts, journal entries, credits and usage records.

use super::db::{args, DbError, Row, Tx};

use super::{now, AccountId, KeyId, Ledger, LedgerError, Micros};

/// An account and its money, in micros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub id: AccountId,
    pub email: String,
    pub created_at: i64,
    /// Settled balance (sum of balance-moving entries).
    pub balance_micros: Micros,
    /// Sum of open holds.
    pub reserved_micros: Micros,
    /// E-mail address confirmed (always for operator-made accounts).
    pub verified: bool,
    /// May list accounts and adjust balances on the dashboard.
    pub admin: bool,
    /// Has a password (accounts made by single sign-on or by the operator may not).
    pub has_password: bool,
    /// Unix seconds of the account's deletion (`profile.rs`), if deleted.
    pub deleted_at: Option<i64>,
}

impl Account {
    /// What new requests may reserve: balance minus open holds.
    pub fn available_micros(&self) -> Micros {
        self.balance_micros - self.reserved_micros
    }
}

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRow {
    pub id: i64,
    pub kind: String,
    pub amount_micros: Micros,
    pub request_id: Option<String>,
    pub note: Option<String>,
    pub created_at: i64,
}

/// How a metered request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageStatus {
    Ok,
    Cancelled,
    Failed,
    /// Charged (the work was done) but the client had gone before the answer was written.
    Undelivered,
}

impl UsageStatus {
    /// The stored name: `ok`, `cancelled`, `failed` or `undelivered`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Undelivered => "undelivered",
        }
    }
}

/// A usage record, written when a hold closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRecord {
    pub request_id: String,
    pub account_id: AccountId,
    pub key_id: Option<KeyId>,
    pub model: String,
    pub prompt_tokens: i64,
    /// Of `prompt_tokens`, those served from the prefix cache (cached-input price).
    pub cached_tokens: i64,
    pub completion_tokens: i64,
    /// Milliseconds of audio transcribed (0 for text requests).
    pub audio_ms: i64,
    /// Characters of text spoken (0 for other requests).
    pub input_characters: i64,
    pub cost_micros: Micros,
    pub status: UsageStatus,
    pub latency_ms: i64,
}

pub(super) fn insert_entry(
    tx: &Tx<'_>,
    account: AccountId,
    kind: &str,
    amount: Micros,
    request_id: Option<&str>,
    note: Option<&str>,
) -> Result<(), LedgerError> {
    tx.exec(
        "INSERT INTO entries (account_id, kind, amount_micros, request_id, note, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![account, kind, amount, request_id, note, now()],
    )?;
    Ok(())
}

/// Move the cached balance by `delta`; the CHECK constraint refuses a negative balance.
pub(super) fn add_balance(
    tx: &Tx<'_>,
    account: AccountId,
    delta: Micros,
) -> Result<(), LedgerError> {
    let n = tx.exec(
        "UPDATE accounts SET balance_micros = balance_micros + ?1 WHERE id = ?2",
        args![delta, account],
    )?;
    if n == 0 {
        return Err(LedgerError::NoSuchAccount(account.to_string()));
    }
    Ok(())
}

pub(super) fn insert_usage(tx: &Tx<'_>, u: &UsageRecord) -> Result<(), LedgerError> {
    tx.exec(
        "INSERT INTO usage (request_id, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micros, status, cancelled, latency_ms, created_at, cached_tokens, audio_ms, input_characters)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT (request_id) DO UPDATE SET account_id = excluded.account_id, key_id = excluded.key_id, model = excluded.model, prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, cost_micros = excluded.cost_micros, status = excluded.status, cancelled = excluded.cancelled, latency_ms = excluded.latency_ms, created_at = excluded.created_at, cached_tokens = excluded.cached_tokens, audio_ms = excluded.audio_ms, input_characters = excluded.input_characters",
        args![u.request_id, u.account_id, u.key_id, u.model, u.prompt_tokens, u.completion_tokens, u.cost_micros,
                u.status.as_str(), i64::from(u.status == UsageStatus::Cancelled), u.latency_ms, now(), u.cached_tokens,
                u.audio_ms, u.input_characters],
    )?;
    Ok(())
}

/// The columns `row_to_usage` reads, in order.
pub(super) const USAGE_COLUMNS: &str = "request_id, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micros, status, latency_ms, cached_tokens, audio_ms, input_characters";

/// A usage record from `USAGE_COLUMNS` starting at column `at`.
pub(super) fn row_to_usage(r: &Row, at: usize) -> Result<UsageRecord, DbError> {
    let status: String = r.get(at + 7)?;
    Ok(UsageRecord {
        request_id: r.get(at)?,
        account_id: r.get(at + 1)?,
        key_id: r.get(at + 2)?,
        model: r.get(at + 3)?,
        prompt_tokens: r.get(at + 4)?,
        completion_tokens: r.get(at + 5)?,
        cost_micros: r.get(at + 6)?,
        status: match status.as_str() {
            "ok" => UsageStatus::Ok,
            "cancelled" => UsageStatus::Cancelled,
            "undelivered" => UsageStatus::Undelivered,
            _ => UsageStatus::Failed,
        },
        latency_ms: r.get(at + 8)?,
        cached_tokens: r.get(at + 9)?,
        audio_ms: r.get(at + 10)?,
        input_characters: r.get(at + 11)?,
    })
}

/// Insert an account row (no balance yet); `EmailTaken` if the address has one.
pub(super) fn insert_account(
    tx: &Tx<'_>,
    email: &str,
    password_hash: Option<&str>,
    verified: bool,
) -> Result<AccountId, LedgerError> {
    let exists: Option<i64> = tx.query_opt(
        "SELECT id FROM accounts WHERE email = ?1",
        args![email],
        |r| r.get(0),
    )?;
    if exists.is_some() {
        return Err(LedgerError::EmailTaken(email.to_owned()));
    }
    let t = now();
    Ok(tx.query_one(
        "INSERT INTO accounts (email, created_at, balance_micros, password_hash, verified_at) VALUES (?1, ?2, 0, ?3, ?4) RETURNING id",
        args![email, t, password_hash, verified.then_some(t)],
        |r| r.get(0),
    )?)
}

fn row_to_account(r: &Row) -> Result<Account, DbError> {
    Ok(Account {
        id: r.get(0)?,
        email: r.get(1)?,
        created_at: r.get(2)?,
        balance_micros: r.get(3)?,
        reserved_micros: r.get(4)?,
        verified: r.get(5)?,
        admin: r.get(6)?,
        has_password: r.get(7)?,
        deleted_at: r.get(8)?,
    })
}

const ACCOUNT_SELECT: &str = "SELECT a.id, a.email, a.created_at, a.balance_micros,
    COALESCE((SELECT CAST(SUM(reserved_micros) AS BIGINT) FROM holds h WHERE h.account_id = a.id AND h.state = 'open'), 0),
    a.verified_at IS NOT NULL, a.role = 'admin', a.password_hash IS NOT NULL, a.deleted_at
    FROM accounts a";

impl Ledger {
    /// Create an account (operator action: counted as verified) with `starter_micros` granted
    /// as its first entry.
    ///
    /// # Errors
    /// `EmailTaken`, `BadAmount` (negative starter), database errors.
    pub fn create_account(
        &self,
        email: &str,
        starter_micros: Micros,
    ) -> Result<Account, LedgerError> {
        if starter_micros < Micros::ZERO {
            return Err(LedgerError::BadAmount);
        }
        let id = self.write(|tx| {
            let id = insert_account(tx, email, None, true)?;
            if starter_micros > Micros::ZERO {
                insert_entry(
                    tx,
                    id,
                    "grant",
                    starter_micros,
                    None,
                    Some("starter balance"),
                )?;
                add_balance(tx, id, starter_micros)?;
            }
            Ok(id)
        })?;
        self.account(id)
    }

    /// # Errors
    /// `NoSuchAccount`, database errors.
    pub fn account(&self, id: AccountId) -> Result<Account, LedgerError> {
        self.read(|c| {
            c.query_opt(
                &format!("{ACCOUNT_SELECT} WHERE a.id = ?1"),
                args![id],
                row_to_account,
            )?
            .ok_or_else(|| LedgerError::NoSuchAccount(id.to_string()))
        })
    }

    /// Find an account by id (digits) or e-mail.
    ///
    /// # Errors
    /// `NoSuchAccount`, database errors.
    pub fn find_account(&self, id_or_email: &str) -> Result<Account, LedgerError> {
        if let Ok(id) = id_or_email.parse::<i64>() {
            return self.account(AccountId(id));
        }
        self.read(|c| {
            c.query_opt(
                &format!("{ACCOUNT_SELECT} WHERE a.email = ?1"),
                args![id_or_email],
                row_to_account,
            )?
            .ok_or_else(|| LedgerError::NoSuchAccount(id_or_email.to_owned()))
        })
    }

    /// Make an account an admin or a plain user.
    ///
    /// # Errors
    /// `NoSuchAccount`, database errors.
    pub fn set_admin(&self, account: AccountId, admin: bool) -> Result<Account, LedgerError> {
        let n = self.write(|tx| {
            Ok(tx.exec(
                "UPDATE accounts SET role = ?1 WHERE id = ?2",
                args![if admin { "admin" } else { "user" }, account],
            )?)
        })?;
        if n == 0 {
            return Err(LedgerError::NoSuchAccount(account.to_string()));
        }
        self.account(account)
    }

    /// Accounts in id order after `after` (paging), at most `limit`.
    ///
    /// # Errors
    /// Database errors.
    pub fn accounts_page(
        &self,
        after: AccountId,
        limit: usize,
    ) -> Result<Vec<Account>, LedgerError> {
        self.read(|c| {
            let rows = c.query_all(
                &format!("{ACCOUNT_SELECT} WHERE a.id > ?1 ORDER BY a.id LIMIT ?2"),
                args![after, i64::try_from(limit).unwrap_or(i64::MAX)],
                row_to_account,
            )?;
            Ok(rows)
        })
    }

    /// Adjust a balance by `amount_micros` (signed) with a reason, as an `adjustment` entry. A
    /// debit may not take the balance below what running requests hold (checked in the same
    /// transaction).
    ///
    /// # Errors
    /// `BadAmount` (zero), `InsufficientBalance` (the debit exceeds the available balance),
    /// `NoSuchAccount`, database errors.
    pub fn adjust(
        &self,
        account: AccountId,
        amount_micros: Micros,
        note: &str,
    ) -> Result<Account, LedgerError> {
        if amount_micros == Micros::ZERO {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            let (balance, held): (Micros, Micros) = tx
                .query_opt(
                    "SELECT balance_micros, COALESCE((SELECT CAST(SUM(reserved_micros) AS BIGINT) FROM holds WHERE account_id = ?1 AND state = 'open'), 0)
                     FROM accounts WHERE id = ?1",
                    args![account],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?
                .ok_or_else(|| LedgerError::NoSuchAccount(account.to_string()))?;
            let after = balance.checked_add(amount_micros).ok_or(LedgerError::BadAmount)?;
            if after - held < Micros::ZERO {
                return Err(LedgerError::InsufficientBalance {
                    required: -amount_micros,
                    available: balance - held,
                });
            }
            add_balance(tx, account, amount_micros)?;
            insert_entry(tx, account, "adjustment", amount_micros, None, Some(note))
        })?;
        self.account(account)
    }

    /// Add money: `kind` is `grant`, `topup` or `adjustment` (the latter may be negative but
    /// never takes the balance below zero).
    ///
    /// # Errors
    /// `BadAmount`, `NoSuchAccount`, database errors (a negative result violates a CHECK).
    pub fn credit(
        &self,
        account: AccountId,
        kind: &str,
        amount_micros: Micros,
        note: &str,
    ) -> Result<Account, LedgerError> {
        if !matches!(kind, "grant" | "topup" | "adjustment")
            || (kind != "adjustment" && amount_micros <= Micros::ZERO)
        {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            add_balance(tx, account, amount_micros)?;
            insert_entry(tx, account, kind, amount_micros, None, Some(note))
        })?;
        self.account(account)
    }

    /// The newest `limit` journal entries of an account.
    ///
    /// # Errors
    /// Database errors.
    pub fn entries(&self, account: AccountId, limit: usize) -> Result<Vec<EntryRow>, LedgerError> {
        self.read(|c| {
            let rows = c.query_all("SELECT id, kind, amount_micros, request_id, note, created_at FROM entries WHERE account_id = ?1 ORDER BY id DESC LIMIT ?2", args![account, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok(EntryRow { id: r.get(0)?, kind: r.get(1)?, amount_micros: r.get(2)?, request_id: r.get(3)?, note: r.get(4)?, created_at: r.get(5)? })
            })?;
            Ok(rows)
        })
    }

    /// The usage record of a request, if any.
    ///
    /// # Errors
    /// Database errors.
    pub fn usage(&self, request_id: &str) -> Result<Option<UsageRecord>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                &format!("SELECT {USAGE_COLUMNS} FROM usage WHERE request_id = ?1"),
                args![request_id],
                |r| row_to_usage(r, 0),
            )?)
        })
    }

    /// The newest usage records of an account.
    ///
    /// # Errors
    /// Database errors.
    pub fn recent_usage(
        &self,
        account: AccountId,
        limit: usize,
    ) -> Result<Vec<UsageRecord>, LedgerError> {
        self.read(|c| {
            let rows = c.query_all(&format!(
                "SELECT {USAGE_COLUMNS} FROM usage WHERE account_id = ?1 ORDER BY created_at DESC, rowid DESC LIMIT ?2"
            ), args![account, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| row_to_usage(r, 0),)?;
            Ok(rows)
        })
    }
}
