//! Replicas sharing one database: hold leases and heartbeats. Every hold names the replica
//! that took it (`holds.owner`) and a lease (`holds.lease_until`); the owner renews its leases
//! while its requests run, and any replica releases an open hold whose lease expired (its
//! replica died: the client got no complete response, so nothing is charged). Heartbeat rows
//! (`replicas`) count the live replicas, which share the rate limits. All times here are the
//! database's clock ([`db_now`]), so replicas whose clocks disagree still agree on a lease.
//! A running replica holds an advisory lock on its id ([`Ledger::claim_replica_id`]), so a
//! restart can tell its dead predecessor's holds (lock free) from a live twin's (lock held).
//!
//! Owns: the lease and heartbeat statements, and releasing holds at start-up. May use: `db`,
//! `accounts`, `idempotency`. Never:
//! the upkeep schedule (the server's `app::spawn_replica_upkeep`).

use super::accounts::insert_entry;
use super::db::Value;
use super::db::{args, block, DbError, PgPool, Tx};
use super::{now, AccountId, Backend, Ledger, LedgerError, Micros};

/// How long a hold's lease lasts (seconds) without renewal.
pub const LEASE_S: i64 = 15;

/// How often (seconds) a server renews its leases and writes its heartbeat.
pub const LEASE_RENEW_S: u64 = 5;

/// How often (seconds) a server releases expired leases: a replica that stops renewing has
/// its holds released at most `LEASE_S + LEASE_SWEEP_S` after its last renewal.
pub const LEASE_SWEEP_S: u64 = 1;

/// SQL for the database's clock in Unix seconds (the transaction's start on PostgreSQL).
#[must_use]
pub fn db_now(tx: &Tx<'_>) -> &'static str {
    if tx.is_postgres() {
        "CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)"
    } else {
        "unixepoch()"
    }
}

/// The first key of replica-id advisory locks (the second is `hashtext(id)`); two-key locks
/// never collide with the one-key lock that serializes migrations.
const REPLICA_LOCK_CLASS: i32 = 7411;

/// How many times (100 ms apart) a replica id's lock is tried again before another live
/// process is taken to hold it.
const CLAIM_RETRIES: u32 = 20;

/// `LEASE_RENEW_S` as database seconds.
fn round() -> i64 {
    i64::try_from(LEASE_RENEW_S).unwrap_or(5)
}

impl Ledger {
    /// Release every open hold (start-up of the one process that owns a SQLite file: the
    /// clients got no complete response, so nothing is charged). Returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn release_all_open(&self) -> Result<usize, LedgerError> {
        self.write(|tx| release_open_where(tx, "TRUE", &[], "released at start-up"))
    }

    /// Release the open holds this replica's id left (start-up of a replica that shares the
    /// database: the others' holds belong to requests still running). Returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn release_own_open(&self) -> Result<usize, LedgerError> {
        let me = self.replica.clone();
        self.write(|tx| release_open_where(tx, "owner = ?1", args![&*me], "released at start-up"))
    }

    /// Take this replica id's advisory lock in PostgreSQL, on a connection of its own kept for
    /// the life of this ledger (all its clones): `true` when taken now or earlier, so no other
    /// live process runs with this id and the open holds it names are a dead run's leftovers;
    /// `false` when another live process holds it (two replicas were given one
    /// `TOLLGATE_REPLICA_ID`). A killed process's connection closes with it, so a restart
    /// takes the lock at once. Always `true` on SQLite (one process owns the file).
    ///
    /// # Errors
    /// Connection and statement errors.
    pub fn claim_replica_id(&self) -> Result<bool, LedgerError> {
        self.take_replica_id(CLAIM_RETRIES)
    }

    /// `claim_replica_id` without waiting: the server's upkeep calls it every round, so a
    /// lock lost with its connection is taken again at once.
    ///
    /// # Errors
    /// Connection and statement errors.
    pub fn keep_replica_id(&self) -> Result<bool, LedgerError> {
        self.take_replica_id(0)
    }

    fn take_replica_id(&self, retries: u32) -> Result<bool, LedgerError> {
        let Backend::Postgres(_, url) = &self.backend else {
            return Ok(true);
        };
        let mut held = self
            .id_lock
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(true);
        }
        // Not taken yet, or its connection was lost (and the lock with it): take it again.
        *held = None;
        let client = PgPool::listener(url, |_| {})?;
        // The server notices a dead holder (a crashed host, a cut network) by keepalives within
        // about 25 s, instead of the operating system's default of hours.
        block(client.batch_execute(
            "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3",
        ))
        .map_err(DbError::from)?;
        // A predecessor killed a moment ago frees the lock once the server notices its
        // connection closed (milliseconds); a live twin never does.
        for attempt in 0..=retries {
            let row = block(client.query_one(
                "SELECT pg_try_advisory_lock($1, hashtext($2))",
                &[&REPLICA_LOCK_CLASS, &&*self.replica],
            ))
            .map_err(DbError::from)?;
            if row.get::<_, bool>(0) {
                *held = Some(client);
                return Ok(true);
            }
            if attempt < retries {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        Ok(false)
    }

    /// Extend the lease of every open hold of this replica (those taken since
    /// [`Ledger::renew_only_from`], when it was called) to [`LEASE_S`] from now; the server
    /// calls it every [`LEASE_RENEW_S`] while it runs. Returns how many were renewed.
    ///
    /// # Errors
    /// Database errors.
    pub fn renew_leases(&self) -> Result<usize, LedgerError> {
        let me = self.replica.clone();
        let from = self.renew_from.load(std::sync::atomic::Ordering::Relaxed);
        self.write(|tx| {
            Ok(tx.exec(
                &format!(
                    "UPDATE holds SET lease_until = {} + ?1
                     WHERE owner = ?2 AND state = 'open' AND created_at >= ?3",
                    db_now(tx)
                ),
                args![LEASE_S, &*me, from],
            )?)
        })
    }

    /// From now on renew only the holds taken from Unix second `t` on (by this process): set
    /// at start-up when another process may hold this replica id (`claim_replica_id` failed),
    /// so the open holds under the id from before are left to expire, not kept forever.
    pub fn renew_only_from(&self, t: i64) {
        self.renew_from
            .store(t, std::sync::atomic::Ordering::Relaxed);
    }

    /// Release every open hold whose lease has expired: its replica stopped renewing (it
    /// died), so its client got no complete response and nothing is charged; running
    /// idempotency claims of those requests are forgotten, so a retry runs. Any replica may
    /// call it; the server does every [`LEASE_SWEEP_S`]. Returns how many holds.
    ///
    /// # Errors
    /// Database errors.
    pub fn release_expired_leases(&self) -> Result<usize, LedgerError> {
        // Almost always nothing has expired: look first in a read, so the sweep's write (a
        // SERIALIZABLE scan of open holds) does not conflict with every running reserve.
        let any: bool = self.read(|tx| {
            let n: i64 = tx.query_one(
                &format!(
                    "SELECT COUNT(*) FROM holds WHERE state = 'open' AND lease_until < {}",
                    db_now(tx)
                ),
                args![],
                |r| r.get(0),
            )?;
            Ok(n > 0)
        })?;
        if !any {
            return Ok(0);
        }
        self.write(|tx| {
            let n = release_open_where(
                tx,
                &format!("lease_until < {}", db_now(tx)),
                args![],
                "released: the replica's lease expired",
            )?;
            if n > 0 {
                super::idempotency::forget_unheld_claims(tx)?;
            }
            Ok(n)
        })
    }

    /// Record this replica as alive now, forget replicas unseen for three rounds of
    /// [`LEASE_RENEW_S`], and return how many were seen in the last two rounds (this one
    /// included, so at least 1): the number the rate limits are shared among.
    ///
    /// # Errors
    /// Database errors.
    pub fn heartbeat(&self) -> Result<u32, LedgerError> {
        let me = self.replica.clone();
        self.write(|tx| {
            let now = db_now(tx);
            tx.exec(
                &format!(
                    "INSERT INTO replicas (id, seen_at) VALUES (?1, {now})
                     ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at"
                ),
                args![&*me],
            )?;
            tx.exec(
                &format!("DELETE FROM replicas WHERE seen_at < {now} - ?1"),
                args![3 * round()],
            )?;
            Ok(tx.query_one(
                &format!("SELECT COUNT(*) FROM replicas WHERE seen_at >= {now} - ?1"),
                args![2 * round()],
                |r| r.get(0),
            )?)
        })
    }
}

/// Release, inside `tx`, every open hold matching `condition` (SQL over `holds`, with `args`):
/// a `release` entry of the whole reservation each, nothing charged. Returns how many.
fn release_open_where(
    tx: &Tx<'_>,
    condition: &str,
    args: &[Value],
    note: &str,
) -> Result<usize, LedgerError> {
    let open: Vec<(String, AccountId, Micros)> = tx.query_all(
        &format!(
            "SELECT request_id, account_id, reserved_micros FROM holds WHERE state = 'open' AND ({condition})"
        ),
        args,
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    for (rid, account, reserved) in &open {
        insert_entry(tx, *account, "release", *reserved, Some(rid), Some(note))?;
        tx.exec(
            "UPDATE holds SET state = 'released', settled_micros = 0, closed_at = ?1 WHERE request_id = ?2",
            args![now(), rid],
        )?;
    }
    Ok(open.len())
}

#[cfg(test)]
mod tests {
    use crate::ledger::{temp_ledger, Micros};

    #[test]
    fn only_expired_leases_are_released_and_renewal_keeps_a_hold() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("lease@example.com", Micros(1000)).unwrap();
        l.reserve("live", a.id, Micros(100)).unwrap();
        let dead = l.clone().with_replica("dead");
        dead.reserve("orphan", a.id, Micros(200)).unwrap();
        assert_eq!(l.renew_leases().unwrap(), 1, "only this replica's hold");
        // Another process held the id at start-up: holds from before it are not renewed.
        l.renew_only_from(crate::ledger::now() + 3600);
        assert_eq!(l.renew_leases().unwrap(), 0);
        l.renew_only_from(0);
        assert_eq!(
            l.release_expired_leases().unwrap(),
            0,
            "no lease expired yet"
        );
        // The dead replica's lease ends (as if 15 s passed without renewal).
        l.write(|tx| {
            Ok(tx.exec(
                "UPDATE holds SET lease_until = 0 WHERE request_id = 'orphan'",
                &[],
            )?)
        })
        .unwrap();
        assert_eq!(l.release_expired_leases().unwrap(), 1);
        let acct = l.account(a.id).unwrap();
        assert_eq!((acct.balance_micros.0, acct.reserved_micros.0), (1000, 100));
        assert_eq!(dead.release_own_open().unwrap(), 0, "already released");
        assert_eq!(l.heartbeat().unwrap(), 1);
        assert_eq!(dead.heartbeat().unwrap(), 2);
        // One process per replica id: the id's lock is taken once (a second ledger with the
        // same id stands for a second process; on SQLite there is nothing to share).
        assert!(dead.claim_replica_id().unwrap());
        assert!(dead.claim_replica_id().unwrap(), "already held");
        let twin = l.clone().with_replica("dead");
        assert_eq!(twin.claim_replica_id().unwrap(), !l.is_postgres());
        drop(dead);
        // The server frees the lock when it sees the connection close.
        let t = std::time::Instant::now();
        while !twin.claim_replica_id().unwrap() {
            assert!(t.elapsed().as_secs() < 5, "the lock outlived its holder");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(l.release_own_open().unwrap(), 1);
        assert!(l.check().unwrap().is_empty());
    }
}
