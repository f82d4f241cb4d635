//! Idempotency records for `Idempotency-Key`, scoped `(account, route, key)`. A claim is taken
//! before money is reserved; only executed outcomes are stored; records expire after 24 h.

use super::db::{args, Tx};

#[cfg(test)]
use super::AccountId;
use super::{now, Ledger, LedgerError};

/// Records older than this are forgotten (seconds).
pub const IDEMPOTENCY_TTL_S: i64 = 24 * 3600;

/// (fingerprint, state, status, body, created_at) of a stored record.
type Row = (Vec<u8>, String, Option<i64>, Option<String>, i64);

/// A stored outcome to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    pub status: u16,
    pub body: String,
}

/// The result of claiming a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is ours: run the request, then `complete` or `abandon`.
    New,
    /// The same key with the same body is running; it started `age_s` seconds ago.
    InFlight { age_s: i64 },
    /// The same key was used with a different body.
    Mismatch,
    /// Finished before: replay this.
    Replay(IdempotencyRecord),
}

impl Ledger {
    /// Claim `(account, route, key)` for a request with body `fingerprint`.
    /// Test-only: the server does this through `requests.rs`, in the same transaction as
    /// the money.
    ///
    /// # Errors
    /// Database errors.
    #[cfg(test)]
    pub fn claim_idempotency(
        &self,
        account: AccountId,
        route: &str,
        key: &str,
        fingerprint: &[u8],
        request_id: &str,
    ) -> Result<Claim, LedgerError> {
        let scope = super::IdempotencyScope {
            account,
            route: route.to_owned(),
            key: key.to_owned(),
        };
        self.write(|tx| claim_in(tx, &scope, fingerprint, request_id))
    }

    /// Store the executed outcome of a claimed key.
    /// Test-only: the server does this through `requests.rs`, in the same transaction as
    /// the money.
    ///
    /// # Errors
    /// Database errors.
    #[cfg(test)]
    pub fn complete_idempotency(
        &self,
        account: AccountId,
        route: &str,
        key: &str,
        status: u16,
        body: &str,
    ) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec(
                "UPDATE idempotency SET state = 'done', status = ?1, body = ?2 WHERE account_id = ?3 AND route = ?4 AND key = ?5",
                args![i64::from(status), body, account, route, key],
            )?;
            Ok(())
        })
    }

    /// Forget a claim (402, 5xx, or a request that never ran), so a retry runs again.
    /// Test-only: the server does this through `requests.rs`, in the same transaction as
    /// the money.
    ///
    /// # Errors
    /// Database errors.
    #[cfg(test)]
    pub fn abandon_idempotency(
        &self,
        account: AccountId,
        route: &str,
        key: &str,
    ) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec("DELETE FROM idempotency WHERE account_id = ?1 AND route = ?2 AND key = ?3 AND state = 'running'", args![account, route, key])?;
            Ok(())
        })
    }

    /// Drop claims left running by a process that died (start-up, after its holds were
    /// released): every running claim whose request holds nothing open any more. Claims of
    /// requests still running on other replicas keep their open holds, so they stay.
    ///
    /// # Errors
    /// Database errors.
    pub fn clear_running_idempotency(&self) -> Result<usize, LedgerError> {
        self.write(forget_unheld_claims)
    }
}

/// Inside `tx`, delete every running claim whose request has no open hold. Returns how many.
pub(super) fn forget_unheld_claims(tx: &Tx<'_>) -> Result<usize, LedgerError> {
    Ok(tx.exec(
        "DELETE FROM idempotency WHERE state = 'running' AND NOT EXISTS
           (SELECT 1 FROM holds h WHERE h.request_id = idempotency.request_id AND h.state = 'open')",
        args![],
    )?)
}

/// Claim `scope` for a body with `fingerprint` inside `tx` (see `Ledger::claim_idempotency`).
pub(super) fn claim_in(
    tx: &Tx<'_>,
    scope: &super::IdempotencyScope,
    fingerprint: &[u8],
    request_id: &str,
) -> Result<Claim, LedgerError> {
    let (account, route, key) = (scope.account, scope.route.as_str(), scope.key.as_str());
    let t = now();
    tx.exec(
        "DELETE FROM idempotency WHERE account_id = ?1 AND route = ?2 AND key = ?3 AND created_at < ?4",
        args![account, route, key, t - IDEMPOTENCY_TTL_S],
    )?;
    let row: Option<Row> = tx
        .query_opt(
            "SELECT fingerprint, state, status, body, created_at FROM idempotency WHERE account_id = ?1 AND route = ?2 AND key = ?3",
            args![account, route, key],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
    match row {
        None => {
            tx.exec(
                "INSERT INTO idempotency (account_id, route, key, fingerprint, state, request_id, created_at) VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
                args![account, route, key, fingerprint, request_id, t],
            )?;
            Ok(Claim::New)
        }
        Some((fp, _, _, _, _)) if fp != fingerprint => Ok(Claim::Mismatch),
        Some((_, state, Some(status), Some(body), _)) if state == "done" => {
            Ok(Claim::Replay(IdempotencyRecord {
                status: u16::try_from(status).unwrap_or(500),
                body,
            }))
        }
        Some((_, _, _, _, created)) => Ok(Claim::InFlight { age_s: t - created }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::temp_ledger;
    use crate::money::Micros;

    #[test]
    fn claim_lifecycle() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("i@example.com", Micros(0)).unwrap().id;
        let r = "/v1/chat/completions";
        assert_eq!(
            l.claim_idempotency(a, r, "k", b"fp1", "req_1").unwrap(),
            Claim::New
        );
        assert!(matches!(
            l.claim_idempotency(a, r, "k", b"fp1", "req_2").unwrap(),
            Claim::InFlight { .. }
        ));
        assert_eq!(
            l.claim_idempotency(a, r, "k", b"fp2", "req_2").unwrap(),
            Claim::Mismatch
        );
        l.complete_idempotency(a, r, "k", 200, "{}").unwrap();
        assert_eq!(
            l.claim_idempotency(a, r, "k", b"fp1", "req_3").unwrap(),
            Claim::Replay(IdempotencyRecord {
                status: 200,
                body: "{}".into()
            })
        );
        assert_eq!(
            l.claim_idempotency(a, r, "k2", b"fp1", "req_4").unwrap(),
            Claim::New
        );
        l.abandon_idempotency(a, r, "k2").unwrap();
        assert_eq!(
            l.claim_idempotency(a, r, "k2", b"fp1", "req_5").unwrap(),
            Claim::New
        );
    }
}
