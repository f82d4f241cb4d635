//! Replicas sharing one database: hold leases and heartbeats. Every hold names the replica
//! that took it (`holds.owner`) and a lease (`holds.lease_until`); the owner renews its leases
//! while its requests run, and any replica releases an open hold whose lease expired (its
//! replica died: the client got no complete response, so nothing is charged). Heartbeat rows
//! (`replicas`) count the live replicas, which share the rate limits. All times here are the
//! database's clock ([`db_now`]), so replicas whose clocks disagree still agree on a lease.
//!
//! Owns: the lease and heartbeat statements, and releasing holds at start-up. May use: `db`,
//! `accounts`, `idempotency`. Never:
//! the upkeep schedule (the server's `app::spawn_replica_upkeep`).

use super::accounts::insert_entry;
use super::db::Value;
use super::db::{args, Tx};
use super::{now, AccountId, Ledger, LedgerError, Micros};

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
        self.write(|tx| {
            release_open_where(
                tx,
                "owner = ?1",
                args![&*me],
                "released at the replica's start-up",
            )
        })
    }

    /// Whether a process with this replica's id wrote a heartbeat in the last two rounds
    /// (another process runs with the same id: its holds are not leftovers).
    ///
    /// # Errors
    /// Database errors.
    pub fn replica_seen_recently(&self) -> Result<bool, LedgerError> {
        let me = self.replica.clone();
        self.read(|tx| {
            let n: i64 = tx.query_one(
                &format!(
                    "SELECT COUNT(*) FROM replicas WHERE id = ?1 AND seen_at >= {} - ?2",
                    db_now(tx)
                ),
                args![&*me, 2 * round()],
                |r| r.get(0),
            )?;
            Ok(n > 0)
        })
    }

    /// Extend the lease of every open hold of this replica to [`LEASE_S`] from now; the
    /// server calls it every [`LEASE_RENEW_S`] while it runs. Returns how many were renewed.
    ///
    /// # Errors
    /// Database errors.
    pub fn renew_leases(&self) -> Result<usize, LedgerError> {
        let me = self.replica.clone();
        self.write(|tx| {
            Ok(tx.exec(
                &format!(
                    "UPDATE holds SET lease_until = {} + ?1 WHERE owner = ?2 AND state = 'open'",
                    db_now(tx)
                ),
                args![LEASE_S, &*me],
            )?)
        })
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
        assert!(dead.replica_seen_recently().unwrap());
        assert_eq!(l.release_own_open().unwrap(), 1);
        assert!(l.check().unwrap().is_empty());
    }
}
