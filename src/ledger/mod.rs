//! The ledger: accounts, the append-only journal of money movements, two-phase holds, usage
//! records, API keys, redeem codes, idempotency records, and dashboard sign-in (password hashes,
//! sessions, e-mail tokens), in SQLite (one machine) or PostgreSQL (several replicas).
//!
//! Owns: all SQL (only this module uses rusqlite/r2d2 and tokio-postgres/deadpool). May use:
//! `std`, `sha2`. Never: HTTP, candle, `engine`, `api`.
//!
//! Both engines run the same statements through [`db::Tx`], and every write is one
//! transaction that sees the database as if alone:
//! - SQLite: WAL, `synchronous=FULL`, `foreign_keys=ON`, `busy_timeout=5000`;
//!   every write runs in `BEGIN IMMEDIATE`, so concurrent writers serialise before reading
//!   balances; STRICT tables; versioned migrations (`PRAGMA user_version`) applied at open.
//! - PostgreSQL: every write runs at `SERIALIZABLE` and is run again (up to
//!   [`PG_ATTEMPTS`] times, with a short random pause) when PostgreSQL reports a
//!   serialization failure or deadlock, so reserve/settle stay atomic across processes
//!   exactly as under SQLite's single writer; reads run in a `REPEATABLE READ READ ONLY`
//!   transaction (one snapshot). Migrations are applied at open under an advisory lock, so
//!   replicas starting together migrate once; the version is in `tollgate_schema`.
//!
//! Money is `i64` micro-USD.

mod accounts;
mod check;
pub mod db;
mod holds;
mod idempotency;
mod identities;
mod keys;
mod leases;
mod notify;
mod pg;
mod profile;
mod requests;
mod responses;
mod sessions;
pub mod testdb;
mod topups;
mod usage;
pub mod value;

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use r2d2_sqlite::rusqlite::{self, TransactionBehavior};
use r2d2_sqlite::SqliteConnectionManager;

use db::{DbError, IdLock, PgPool, Tx};

pub use accounts::{Account, EntryRow, UsageRecord, UsageStatus};
pub use check::Violation;
pub use holds::{HoldOutcome, Reservation};
pub use idempotency::{Claim, IdempotencyRecord};
pub use identities::ExternalIdentity;
pub use keys::{canonical_code, ApiKeyRecord, KeyLimitBreach, KeySpend, KeyState, KeyUpdate};
pub use leases::{LEASE_RENEW_S, LEASE_S, LEASE_SWEEP_S};
pub use notify::{KeyNotice, KEYS_CHANNEL};
pub use profile::deleted_email;
pub use requests::{Admitted, IdempotencyScope, StoredResponse};
pub use responses::{SavedResponse, RESPONSE_TTL_S};
pub use sessions::{Login, SessionRecord, TokenPurpose};
pub use topups::{NewTopup, TopupOutcome, TopupStatus};
pub use usage::{DaySpend, KeyFilter, UsageFilter};

/// PostgreSQL migrations: (the version it brings the schema to, its SQL). The first builds
/// what SQLite's first ten build; later ones come in pairs with SQLite's.
const PG_MIGRATIONS: [(i64, &str); 3] = [
    (10, include_str!("migrations/pg/0010_schema.sql")),
    (11, include_str!("migrations/pg/0011_hold_leases.sql")),
    (12, include_str!("migrations/pg/0012_sweep_indexes.sql")),
];

/// SQLite migrations in order; `PRAGMA user_version` = how many are applied.
const MIGRATIONS: [&str; 12] = [
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
    include_str!("migrations/0011_hold_leases.sql"),
    include_str!("migrations/0012_sweep_indexes.sql"),
];

pub use crate::ids::{AccountId, KeyId};
pub use crate::money::Micros;

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
    Database(#[from] DbError),
    #[error("connection pool error: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("blocking task failed: {0}")]
    Join(String),
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Database(DbError::Sqlite(e))
    }
}

impl LedgerError {
    /// The database could not be read or written (disk full, I/O error, unreachable, pool
    /// exhausted), as opposed to a refusal: callers answer 503 and nothing was recorded.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Database(_) | Self::Pool(_))
    }

    /// A PostgreSQL serialization failure or deadlock: the transaction may run again.
    fn is_retryable(&self) -> bool {
        matches!(self, Self::Database(e) if e.is_retryable())
    }
}

/// How many times a PostgreSQL write transaction runs before its serialization failure is
/// returned.
pub const PG_ATTEMPTS: u32 = 40;

/// The database behind a ledger.
#[derive(Clone)]
enum Backend {
    Sqlite(r2d2::Pool<SqliteConnectionManager>),
    /// The pool and the URL it connects to (for `LISTEN` connections).
    Postgres(PgPool, Arc<str>),
}

/// Handle to the ledger database; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    backend: Backend,
    /// This process's replica id, written on the holds it takes (see `holds`).
    replica: Arc<str>,
    /// On PostgreSQL, the connection holding this replica id's advisory lock once
    /// `claim_replica_id` took it (dropped with the last clone, which frees the lock).
    id_lock: IdLock,
    /// `renew_leases` renews open holds created at or after this Unix second (0: all).
    renew_from: Arc<std::sync::atomic::AtomicI64>,
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
    /// Open the ledger named by `db` and apply pending migrations: a `postgres://` or
    /// `postgresql://` URL opens PostgreSQL ([`Ledger::open_postgres`]); anything else is a
    /// SQLite file, created if needed.
    ///
    /// # Errors
    /// I/O, database and migration errors.
    pub fn open(db: &Path) -> Result<Self, LedgerError> {
        if let Some(url) = db
            .to_str()
            .filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
        {
            return Self::open_postgres(url);
        }
        let path = db;
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
            backend: Backend::Sqlite(pool),
            replica: new_replica_id(),
            id_lock: IdLock::default(),
            renew_from: Arc::default(),
            page_cap: Arc::new(std::sync::atomic::AtomicI64::new(NO_PAGE_CAP)),
        };
        ledger.migrate_sqlite()?;
        Ok(ledger)
    }

    /// Connect to the PostgreSQL database at `url` (a pool of up to 16 connections) and apply
    /// pending migrations under an advisory lock.
    ///
    /// # Errors
    /// Connection and migration errors.
    pub fn open_postgres(url: &str) -> Result<Self, LedgerError> {
        let ledger = Self {
            backend: Backend::Postgres(PgPool::new(url, 16)?, Arc::from(url)),
            replica: new_replica_id(),
            id_lock: IdLock::default(),
            renew_from: Arc::default(),
            page_cap: Arc::new(std::sync::atomic::AtomicI64::new(NO_PAGE_CAP)),
        };
        ledger.migrate_postgres()?;
        Ok(ledger)
    }

    /// This ledger with replica id `id` (non-empty), written on every hold it takes, so that
    /// a restart with the same id releases exactly the holds its previous run left open.
    #[must_use]
    pub fn with_replica(mut self, id: &str) -> Self {
        if !id.trim().is_empty() {
            self.replica = Arc::from(id.trim());
            self.id_lock = IdLock::default();
        }
        self
    }

    /// This process's replica id.
    #[must_use]
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether this ledger is on PostgreSQL.
    #[must_use]
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(..))
    }

    fn migrate_sqlite(&self) -> Result<(), LedgerError> {
        let Backend::Sqlite(pool) = &self.backend else {
            return Ok(());
        };
        let mut conn = pool.get()?;
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

    fn migrate_postgres(&self) -> Result<(), LedgerError> {
        let Backend::Postgres(pool, _) = &self.backend else {
            return Ok(());
        };
        let mut client = pool.get()?;
        let tx = db::block(client.transaction()).map_err(DbError::from)?;
        let t = Tx::Postgres(&tx);
        // Replicas starting together: the first migrates, the others wait here, then see it.
        t.batch("SET LOCAL client_min_messages = warning; SELECT pg_advisory_xact_lock(7411770001); CREATE TABLE IF NOT EXISTS tollgate_schema (version BIGINT NOT NULL);")?;
        let version: i64 = t
            .query_opt("SELECT version FROM tollgate_schema", &[], |r| r.get(0))?
            .unwrap_or(0);
        for (v, sql) in PG_MIGRATIONS.iter().filter(|(v, _)| *v > version) {
            t.batch(sql)?;
            t.exec("DELETE FROM tollgate_schema", &[])?;
            t.exec(
                "INSERT INTO tollgate_schema (version) VALUES (?1)",
                db::args![v],
            )?;
        }
        db::block(tx.commit()).map_err(DbError::from)?;
        Ok(())
    }

    /// Run `f` in one write transaction (SQLite `BEGIN IMMEDIATE`; PostgreSQL `SERIALIZABLE`,
    /// run again on a serialization failure, so `f` may run more than once and must only
    /// touch the database); commits on `Ok`, rolls back on `Err`.
    fn write<T>(
        &self,
        mut f: impl FnMut(&Tx<'_>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        match &self.backend {
            Backend::Sqlite(pool) => {
                let mut conn = pool.get()?;
                let cap = self.page_cap.load(std::sync::atomic::Ordering::Relaxed);
                if cap != NO_PAGE_CAP {
                    // Per connection, so set on whichever pooled connection runs this write.
                    let _: i64 =
                        conn.query_row(&format!("PRAGMA max_page_count = {cap}"), [], |r| {
                            r.get(0)
                        })?;
                }
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let out = f(&Tx::Sqlite(&tx))?;
                tx.commit()?;
                Ok(out)
            }
            Backend::Postgres(pool, _) => {
                let mut client = pool.get()?;
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let result = pg_transaction(&mut client, false, &mut f);
                    match result {
                        Err(e) if e.is_retryable() && attempt < PG_ATTEMPTS => {
                            retry_pause(attempt);
                        }
                        other => return other,
                    }
                }
            }
        }
    }

    /// Run `f` on one consistent snapshot (SQLite: a pooled connection; PostgreSQL: a
    /// `REPEATABLE READ READ ONLY` transaction).
    fn read<T>(
        &self,
        mut f: impl FnMut(&Tx<'_>) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        match &self.backend {
            Backend::Sqlite(pool) => {
                let conn = pool.get()?;
                f(&Tx::Sqlite(&conn))
            }
            Backend::Postgres(pool, _) => {
                let mut client = pool.get()?;
                pg_transaction(&mut client, true, &mut f)
            }
        }
    }

    /// Cap the database at its current size (`Some(0)`), at `n` pages (`Some(n)`, never below
    /// the current size), or lift the cap (`None`): SQLite's `PRAGMA max_page_count`, applied
    /// before every later write. A write that needs more pages then fails with `SQLITE_FULL`,
    /// exactly as on a full disk; the disk-full tests use it. Returns the cap in pages.
    ///
    /// # Errors
    /// Database errors; `Unsupported` on PostgreSQL.
    pub fn cap_pages(&self, pages: Option<u32>) -> Result<i64, LedgerError> {
        let Backend::Sqlite(pool) = &self.backend else {
            return Err(DbError::Unsupported("cap_pages (SQLite's max_page_count)").into());
        };
        let cap = match pages {
            None => MAX_PAGES,
            Some(n) => {
                let conn = pool.get()?;
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

/// One PostgreSQL transaction around `f`: `SERIALIZABLE` for writes, `REPEATABLE READ READ
/// ONLY` for reads; commits on `Ok`.
fn pg_transaction<T>(
    client: &mut deadpool_postgres::Object,
    read_only: bool,
    f: &mut impl FnMut(&Tx<'_>) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    use tokio_postgres::IsolationLevel;
    let level = if read_only {
        IsolationLevel::RepeatableRead
    } else {
        IsolationLevel::Serializable
    };
    let tx = db::block(
        client
            .build_transaction()
            .isolation_level(level)
            .read_only(read_only)
            .start(),
    )
    .map_err(DbError::from)?;
    let out = f(&Tx::Postgres(&tx))?;
    db::block(tx.commit()).map_err(DbError::from)?;
    Ok(out)
}

/// A pause before attempt `attempt + 1` of a serialization failure: random, up to
/// 1 ms x 2^attempt, at most 64 ms, so contending transactions spread out.
fn retry_pause(attempt: u32) {
    let ceiling_us = 1000u64 << attempt.min(6);
    let pause = rand::random::<u64>() % ceiling_us;
    std::thread::sleep(std::time::Duration::from_micros(pause));
}

/// A random replica id, `r-` and 16 hex digits, for a process not given one.
fn new_replica_id() -> Arc<str> {
    Arc::from(format!("r-{:016x}", rand::random::<u64>()))
}

/// SHA-256 of a secret (API key, redeem code), as stored.
pub fn sha256(secret: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(secret.as_bytes()).to_vec()
}

/// A ledger for a test: a SQLite file in a new temporary directory, or, with
/// `TOLLGATE_TEST_DB=postgres`, a fresh database on the test cluster (the directory is then
/// empty).
#[cfg(test)]
pub(crate) fn temp_ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let l = if testdb::postgres_wanted() {
        Ledger::open_postgres(&testdb::fresh_database().unwrap()).unwrap()
    } else {
        Ledger::open(&dir.path().join("t.db")).unwrap()
    };
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
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::open(&dir.path().join("t.db")).unwrap();
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

#[cfg(test)]
mod pg_worker_tests {
    use super::*;

    /// A statement awaited on an async worker does not stall that worker's other tasks: with
    /// one worker, a task ticking every 5 ms keeps ticking through a 400 ms statement. (The
    /// server calls the ledger from the blocking pool; this guards any caller that forgets.)
    /// Runs in the PostgreSQL pass (`TOLLGATE_TEST_DB=postgres`).
    #[test]
    fn a_statement_on_an_async_worker_leaves_its_other_tasks_running() {
        use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
        if !testdb::postgres_wanted() {
            return;
        }
        let url = testdb::cluster_url().unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let during = rt.block_on(async move {
            let ticks = std::sync::Arc::new(AtomicU32::new(0));
            let t = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    t.fetch_add(1, Relaxed);
                }
            });
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let before = ticks.load(Relaxed);
            tokio::spawn(async move { db::pg_execute(&url, "SELECT pg_sleep(0.4)") })
                .await
                .unwrap()
                .unwrap();
            ticks.load(Relaxed) - before
        });
        assert!(
            during >= 20,
            "{during} ticks in 400 ms: the worker was blocked"
        );
    }
}
