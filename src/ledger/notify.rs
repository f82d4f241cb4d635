//! Change notices between replicas sharing a PostgreSQL ledger: a transaction that changes API
//! keys (revocation, expiry, limits) sends `NOTIFY tollgate_keys` (see `keys::bump_key_epoch`),
//! delivered when it commits, and every replica's watcher purges its key cache at once. A
//! watcher whose connection drops may have missed notices, so it reports the loss (the caller
//! purges everything) and reconnects. On SQLite there is nothing to watch: one process owns the
//! file, and the server's once-a-second epoch poll covers the CLI.
//!
//! Owns: the `LISTEN` connections. May use: `db`. Never: what a notice means to a cache.

use std::sync::mpsc;
use std::time::Duration;

use super::db::{block, PgPool};
use super::{Backend, Ledger};

/// The channel key changes are announced on.
pub const KEYS_CHANNEL: &str = "tollgate_keys";

/// Pause before a lost watch reconnects.
const RECONNECT: Duration = Duration::from_secs(1);

/// What a watcher reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyNotice {
    /// A replica committed a key change.
    Changed,
    /// The watch was (re)established after a loss, or lost: notices may have been missed.
    Resync,
}

impl Ledger {
    /// Watch key changes made by any replica, on a thread of its own for the life of the
    /// process: `on_notice` gets `Changed` for each committed change and `Resync` whenever
    /// the connection is lost or re-made. Returns `false` (and starts nothing) on SQLite.
    #[must_use]
    pub fn watch_key_changes(&self, on_notice: impl Fn(KeyNotice) + Send + Sync + 'static) -> bool {
        let Backend::Postgres(_, url) = &self.backend else {
            return false;
        };
        let url = url.to_string();
        let spawned = std::thread::Builder::new()
            .name("tollgate-key-watch".into())
            .spawn(move || loop {
                match listen_once(&url, &on_notice) {
                    Ok(()) => {
                        tracing::warn!("the key-change watch lost its connection; reconnecting")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the key-change watch failed; reconnecting")
                    }
                }
                on_notice(KeyNotice::Resync);
                std::thread::sleep(RECONNECT);
            });
        spawned.is_ok()
    }
}

/// One `LISTEN` connection, until it ends.
fn listen_once(url: &str, on_notice: &impl Fn(KeyNotice)) -> Result<(), super::db::DbError> {
    let (tx, rx) = mpsc::channel();
    let client = PgPool::listener(url, move |n| {
        let _ = tx.send(n.is_some());
    })?;
    block(client.batch_execute(&format!("LISTEN {KEYS_CHANNEL}")))?;
    on_notice(KeyNotice::Resync);
    while let Ok(true) = rx.recv() {
        on_notice(KeyNotice::Changed);
    }
    drop(client);
    Ok(())
}
