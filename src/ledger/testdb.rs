//! Throwaway PostgreSQL databases for tests: one cluster per test process, started by
//! `scripts/ops/pgtmp` (stopped and removed when the process ends) unless `TOLLGATE_TEST_PG_URL`
//! names one already running, and a fresh database on it per call. `TOLLGATE_TEST_DB=postgres`
//! switches the test suites' ledgers from SQLite files to such databases.
//!
//! Owns: test set-up only; the server never calls it. May use: `db`. Never: money rules.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::db::{pg_execute, DbError};

/// Whether the tests should run their ledgers on PostgreSQL (`TOLLGATE_TEST_DB=postgres`).
#[must_use]
pub fn postgres_wanted() -> bool {
    std::env::var("TOLLGATE_TEST_DB").is_ok_and(|v| v == "postgres")
}

/// The URL of this process's test cluster's `postgres` database, starting the cluster on
/// first use.
///
/// # Errors
/// A message when `scripts/ops/pgtmp` fails (no PostgreSQL binaries, no free port).
pub fn cluster_url() -> Result<String, String> {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("TOLLGATE_TEST_PG_URL") {
            return Ok(url);
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ops/pgtmp");
        let out = std::process::Command::new(script)
            .arg(std::process::id().to_string())
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || !url.starts_with("postgres://") {
            return Err(format!("{script} failed: {}", out.status));
        }
        Ok(url)
    })
    .clone()
}

/// A new, empty database on the test cluster; returns its URL.
///
/// # Errors
/// The cluster's start-up or `CREATE DATABASE` failing.
pub fn fresh_database() -> Result<String, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = cluster_url()?;
    let name = format!(
        "t{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    pg_execute(&base, &format!("CREATE DATABASE {name}")).map_err(|e: DbError| e.to_string())?;
    let (server, _) = base.rsplit_once('/').ok_or("a URL with a database")?;
    Ok(format!("{server}/{name}"))
}
