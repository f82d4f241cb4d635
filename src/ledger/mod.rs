//! The ledger: accounts, the append-only journal of money movements, two-phase holds, usage
//! records, API keys, redeem codes, idempotency records, and dashboard sign-in (password hashes,
//! sessions, e-mail tokens), in SQLite.
//!
//! Owns: all SQL (only this module uses rusqlite/r2d2). May use: `std`, `sha2`. Never: HTTP,
//! candle, `engine`, `api`.
//!
//! Settings (reliability.md, SQLite): WAL, `synchronous=FULL`, `foreign_keys=ON`,
//! `busy_timeout=5000`; every write runs in `BEGIN IMMEDIATE` so concurrent writers serialise
//! before reading balances; STRICT tables; versioned migrations (`PRAGMA user_version`) applied
//! at open. Money is `i64` micro-USD.

mod accounts;
mod check;
mod holds;
mod idempotency;
mod identities;
mod keys;
mod profile;
mod requests;
mod responses;
mod sessions;
mod topups;
mod usage;

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use r2d2_sqlite::rusqlite::{self, Connection, TransactionBehavior};
use r2d2_sqlite::SqliteConnectionManager;

pub use accounts::{Account, EntryRow, UsageRecord, UsageStatus};
pub use check::Violation;
pub use holds::{HoldOutcome, Reservation};
pub use idempotency::{Claim, IdempotencyRecord};
pub use identities::ExternalIdentity;
pub use keys::{canonical_code, ApiKeyRecord, KeyLimitBreach, KeySpend, KeyState, KeyUpdate};
pub use profile::deleted_email;
pub use requests::{Admitted, IdempotencyScope, StoredResponse};
pub use responses::{SavedResponse, RESPONSE_TTL_S};
pub use sessions::{Login, SessionRecord, TokenPurpose};
pub use topups::{NewTopup, TopupOutcome, TopupStatus};
pub use usage::{DaySpend, KeyFilter, UsageFilter};

/// Migrations in order; `PRAGMA user_version` = how many are applied.
const MIGRATIONS: [&str; 10] = [
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_sign_in.sql"),
    include_str!("migrations/0003_topups.sql"),
    include_str!("migrations/0004_roles.sql"),
    include_str!("migrations/0005_identities.sql"),
    include_str!("migrations/0006_undelivered.sql"),
    include_str!("migrations/0007_responses.sql"),
    include_str!("migrations/0008_cached_tokens.sql"),
    include_str!("migrations/0009_audio_usage.sql"),
    include_str!("migrations/0010_key_limits.sql"),
];

pub use crate::ids::{AccountId, KeyId};
pub use crate::money::Micros;

/// Ids and money are stored as SQLite integers.
macro_rules! sql_integer_id {
    ($t:ty) => {
        impl rusqlite::types::ToSql for $t {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(rusqlite::types::ToSqlOutput::from(self.0))
            }
        }
        impl rusqlite::types::FromSql for $t {
            fn column_result(
                v: rusqlite::types::ValueRef<'_>,
            ) -> rusqlite::types::FromSqlResult<Self> {
                i64::column_result(v).map(Self)
            }
        }
    };
}
sql_integer_id!(AccountId);
sql_integer_id!(KeyId);
sql_integer_id!(Micros);

/// Ledger failures the caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("insufficient balance: {required} required, {available} available")]
    InsufficientBalance { required: Micros, available: Micros },
    /// The key's spend limit refuses this hold.
    #[error("the key's spend limit of {} would be passed: {} used, {} required", .0.limit, .0.used, .0.required)]
    KeySpendLimit(KeyLimitBreach),
    #[error("no such account `{0}`")]
    NoSuchAccount(String),
    /// The account has a card payment started in the last day and not yet confirmed.
    #[error("a top-up of the account is still pending")]
    TopupPending,
    #[error("no such API key `{0}`")]
    NoSuchKey(String),
    #[error("an account with e-mail `{0}` already exists")]
    EmailTaken(String),
    #[error("no pending top-up `{0}` with that amount and currency")]
    NoSuchTopup(String),
    #[error("the identity provider has not verified the address `{0}`")]
    UnverifiedIdentity(String),
    #[error("the link is unknown, used or expired")]
    BadToken,
    #[error("the code is unknown or already redeemed")]
    BadCode,
    #[error("amount must be positive and fit in micros")]
    BadAmount,
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("connection pool error: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("blocking task failed: {0}")]
    Join(String),
}

/// Handle to the ledger database; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    pool: r2d2::Pool<SqliteConnectionManager>,
    /// `PRAGMA max_page_count` applied before every write; `NO_PAGE_CAP` = never set.
    page_cap: Arc<std::sync::atomic::AtomicI64>,
}

/// `page_cap` when `cap_pages` was never called (no pragma is sent).
const NO_PAGE_CAP: i64 = -1;
/// SQLite's largest `max_page_count`, which lifts a cap.
const MAX_PAGES: i64 = 4_294_967_294;

/// Unix time in seconds.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Make the ledger file owner-only (mode 0600) whatever the umask: create it so when it is
/// missing; an existing file (and its `-wal`/`-shm` companions) readable by other users is
/// narrowed to 0600, with a warning. SQLite creates its journal files with the database
/// file's mode, so they follow. Names SQLite treats specially (`:memory:`, `file:` URIs) are
/// left alone.
fn owner_only(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let name = path.as_os_str().to_string_lossy();
        if name.is_empty() || name.starts_with(':') || name.starts_with("file:") {
            return;
        }
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        for suffix in ["", "-wal", "-shm"] {
            let file = std::path::PathBuf::from(format!("{name}{suffix}"));
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            if meta.permissions().mode() & 0o077 != 0 {
                let narrowed =
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
                tracing::warn!(
                    file = %file.display(),
                    narrowed = narrowed.is_ok(),
                    "the ledger file was readable by other users; made it owner-only (0600)"
                );
            }
        }
    }
}

impl Ledger {
    /// Open (creating if needed) the database at `path` and apply pending migrations.
    ///
    /// # Errors
    /// I/O, SQLite and migration errors.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        owner_only(path);
        let manager = SqliteConnectionManager::file(path).with_init(|c| {
            c.execute_batch(
                "PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
            )
        });
        // busy_timeout first, so a connection opened while another migrates waits instead of failing.
        let pool = r2d2::Pool::builder()
            .max_size(8)
            .min_idle(Some(1))
            .build(manager)?;
        let ledger = Self {
            pool,
            page_cap: Arc::new(std::sync::atomic::AtomicI64::new(NO_PAGE_CAP)),
        };
        ledger.migrate()?;
        Ok(ledger)
    }

    fn migrate(&self) -> Result<(), LedgerError> {
        let mut conn = self.pool.get()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        for (i, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(version).unwrap_or(0))
        {
            tx.execute_batch(sql)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(i + 1).unwrap_or(i64::MAX),
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction; commits on `Ok`, rolls back on `Err`.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let mut conn = self.pool.get()?;
        let cap = self.page_cap.load(std::sync::atomic::Ordering::Relaxed);
        if cap != NO_PAGE_CAP {
            // Per connection, so set on whichever pooled connection runs this write.
            let _: i64 =
                conn.query_row(&format!("PRAGMA max_page_count = {cap}"), [], |r| r.get(0))?;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let conn = self.pool.get()?;
        f(&conn)
    }

    /// Cap the database at its current size (`Some(0)`), at `n` pages (`Some(n)`, never below
    /// the current size), or lift the cap (`None`): SQLite's `PRAGMA max_page_count`, applied
    /// before every later write. A write that needs more pages then fails with `SQLITE_FULL`,
    /// exactly as on a full disk; the disk-full tests use it. Returns the cap in pages.
    ///
    /// # Errors
    /// Database errors.
    pub fn cap_pages(&self, pages: Option<u32>) -> Result<i64, LedgerError> {
        let cap = match pages {
            None => MAX_PAGES,
            Some(n) => {
                let conn = self.pool.get()?;
                let current: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                current.max(i64::from(n))
            }
        };
        self.page_cap
            .store(cap, std::sync::atomic::Ordering::Relaxed);
        Ok(cap)
    }

    /// Run blocking ledger work on tokio's blocking pool.
    ///
    /// # Errors
    /// The closure's error, or `Join` if the task panicked.
    pub async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Ledger) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, LedgerError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| LedgerError::Join(e.to_string()))?
    }
}

/// SHA-256 of a secret (API key, redeem code), as stored.
pub fn sha256(secret: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).to_vec()
}

#[cfg(test)]
pub(crate) fn temp_ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(&dir.path().join("t.db")).unwrap();
    (dir, l)
}

/// A usage record of `cost` micros for `request_id` (10 prompt and 5 completion tokens, `ok`).
#[cfg(test)]
pub(crate) fn test_usage(request_id: &str, account: AccountId, cost: i64) -> UsageRecord {
    UsageRecord {
        request_id: request_id.into(),
        account_id: account,
        key_id: None,
        model: "m".into(),
        prompt_tokens: 10,
        cached_tokens: 0,
        audio_ms: 0,
        input_characters: 0,
        completion_tokens: 5,
        cost_micros: Micros(cost),
        status: UsageStatus::Ok,
        latency_ms: 1,
    }
}

#[cfg(all(test, unix))]
mod file_mode_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_ledger_and_its_wal_are_owner_only() {
        let (dir, l) = temp_ledger();
        l.write(|_| Ok(())).unwrap();
        let db = dir.path().join("t.db");
        assert_eq!(mode(&db), 0o600);
        let wal = dir.path().join("t.db-wal");
        if wal.exists() {
            assert_eq!(mode(&wal), 0o600);
        }
    }

    #[test]
    fn an_existing_world_readable_ledger_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("old.db");
        drop(Ledger::open(&db).unwrap());
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Ledger::open(&db).unwrap());
        assert_eq!(mode(&db), 0o600);
    }
}
