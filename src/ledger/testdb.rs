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
///
/// Every test whose ledger the switch changes asks this, so each call also notes the calling
/// test (see `note_ledger_test`): `scripts/test` runs its PostgreSQL pass on exactly the tests
/// its SQLite pass noted, and the others, whose runs the switch cannot change, once.
#[must_use]
pub fn postgres_wanted() -> bool {
    note_ledger_test();
    std::env::var("TOLLGATE_TEST_DB").is_ok_and(|v| v == "postgres")
}

/// Appends the calling test's name, one line, to the file `TOLLGATE_LEDGER_TESTS` names (when
/// set), once per test and process. libtest runs each test on a thread named after it
/// (`ledger::holds::tests::name`), which is how the test is known.
///
/// # Panics
/// When called off a test's thread (a server's runtime worker, the main thread): the test
/// would then be missing from the PostgreSQL pass, so the SQLite pass stops instead. Ask
/// `postgres_wanted` (or `ledger_location` in `tests/it/common`) in the test's body.
fn note_ledger_test() {
    use std::io::Write;
    static NOTED: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let Some(file) = std::env::var_os("TOLLGATE_LEDGER_TESTS") else {
        return;
    };
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("");
    assert!(
        !name.is_empty() && name != "main" && !name.starts_with("tokio-"),
        "testdb::postgres_wanted asked on thread {name:?}, not a test's: the PostgreSQL pass \
         of scripts/test could not know the test; ask it in the test's body"
    );
    let mut noted = NOTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !noted.insert(name.to_owned()) {
        return;
    }
    // One write of one line to a file opened for appending: lines from test threads and from
    // the test binaries cargo runs one after another do not interleave.
    let line = format!("{name}\n");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = appended {
        panic!(
            "TOLLGATE_LEDGER_TESTS {}: {e}",
            std::path::Path::new(&file).display()
        );
    }
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
