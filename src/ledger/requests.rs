//! The ledger side of one paid request, each step one `BEGIN IMMEDIATE` transaction so a crash
//! between steps can never leave money and idempotency records disagreeing:
//!
//! 1. `admit_request`: the idempotency claim (if any) and the hold, together. A 402 rolls both
//!    back, so the key stays unused.
//! 2. `settle_request`: the charge, the usage record and the stored idempotent response,
//!    together. After a crash either all three are there (a retry replays) or none is (start-up
//!    releases the hold and forgets the claim, and a retry runs once).
//! 3. `void_request`: the hold released free, the usage recorded, the claim forgotten, together
//!    (engine failure, a request that was never run, or a charge that could not be recorded).
//!
//! After Brandur Leach's "Implementing Stripe-like idempotency keys in Postgres": the response
//! is stored in the same transaction as the last business write.

use super::db::{args, Tx};

use super::holds::{close_hold, reserve_in, HoldOutcome, Reservation};
use super::idempotency::{claim_in, Claim};
use super::{AccountId, KeyId, Ledger, LedgerError, Micros, UsageRecord};

/// Where an `Idempotency-Key` lives: `(account, route, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyScope {
    pub account: AccountId,
    /// The route, e.g. `/v1/chat/completions`.
    pub route: String,
    /// The client's key (1-255 visible ASCII characters).
    pub key: String,
}

/// What admitting a request did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admitted {
    /// The hold is open (and the claim taken, if there was a key): run the request.
    Reserved(Reservation),
    /// The key's request is still running, or was used with another body, or finished: nothing
    /// was reserved. Never `Claim::New`.
    Claimed(Claim),
}

/// A response to keep for replays: HTTP status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
}

impl Ledger {
    /// Claim `scope` for a body with `fingerprint` (if given) and reserve `hold_micros` for
    /// `request_id`, paid by `account` through API key `key` (`None`: the playground), in one
    /// transaction.
    ///
    /// # Errors
    /// `InsufficientBalance`, `KeySpendLimit` (nothing is written, the idempotency key stays
    /// unused), `NoSuchAccount`, database errors.
    pub fn admit_request(
        &self,
        request_id: &str,
        account: AccountId,
        key: Option<KeyId>,
        hold_micros: Micros,
        claim: Option<(&IdempotencyScope, &[u8])>,
    ) -> Result<Admitted, LedgerError> {
        self.write(|tx| {
            if let Some((scope, fingerprint)) = claim {
                match claim_in(tx, scope, fingerprint, request_id)? {
                    Claim::New => {}
                    other => return Ok(Admitted::Claimed(other)),
                }
            }
            Ok(Admitted::Reserved(reserve_in(
                tx,
                request_id,
                account,
                key,
                hold_micros,
                &self.replica,
            )?))
        })
    }

    /// Charge `usage` against its hold, record it, and store `response` as the claim's replay
    /// (if the claim is still this request's), in one transaction. A hold already closed
    /// changes nothing and stores nothing (`applied: false`).
    ///
    /// # Errors
    /// Database errors (disk full, I/O): nothing is written.
    pub fn settle_request(
        &self,
        usage: &UsageRecord,
        response: Option<(&IdempotencyScope, &StoredResponse)>,
    ) -> Result<HoldOutcome, LedgerError> {
        self.write(|tx| {
            let outcome = close_hold(tx, usage, true)?;
            if let (Some((scope, r)), true) = (response, outcome.applied) {
                store_in(tx, scope, &usage.request_id, r)?;
            }
            Ok(outcome)
        })
    }

    /// Release the hold of `usage.request_id` free, record the usage (cost 0), and forget the
    /// claim if it is still running, in one transaction. Idempotent: a hold already closed (even
    /// settled) and a claim already stored are left as they are.
    ///
    /// # Errors
    /// Database errors: nothing is written.
    pub fn void_request(
        &self,
        usage: &UsageRecord,
        claim: Option<&IdempotencyScope>,
    ) -> Result<HoldOutcome, LedgerError> {
        self.write(|tx| {
            let outcome = close_hold(tx, usage, false)?;
            if let Some(scope) = claim {
                forget_in(tx, scope, &usage.request_id)?;
            }
            Ok(outcome)
        })
    }

    /// Mark a settled request's usage `undelivered` (its client went away before the answer
    /// was written). Leaves other statuses alone.
    ///
    /// # Errors
    /// Database errors.
    pub fn mark_undelivered(&self, request_id: &str) -> Result<(), LedgerError> {
        self.write(|tx| {
            tx.exec(
                "UPDATE usage SET status = 'undelivered' WHERE request_id = ?1 AND status = 'ok'",
                args![request_id],
            )?;
            Ok(())
        })
    }

    /// The request id that holds the claim on `scope`, if any (tests).
    ///
    /// # Errors
    /// Database errors.
    #[cfg(test)]
    pub fn claim_owner(&self, scope: &IdempotencyScope) -> Result<Option<String>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                "SELECT request_id FROM idempotency WHERE account_id = ?1 AND route = ?2 AND key = ?3",
                args![scope.account, scope.route, scope.key],
                |r| r.get(0),
            )?)
        })
    }
}

fn store_in(
    tx: &Tx<'_>,
    scope: &IdempotencyScope,
    request_id: &str,
    r: &StoredResponse,
) -> Result<(), LedgerError> {
    tx.exec(
        "UPDATE idempotency SET state = 'done', status = ?1, body = ?2 WHERE account_id = ?3 AND route = ?4 AND key = ?5 AND request_id = ?6",
        args![i64::from(r.status), r.body, scope.account, scope.route, scope.key, request_id],
    )?;
    Ok(())
}

fn forget_in(tx: &Tx<'_>, scope: &IdempotencyScope, request_id: &str) -> Result<(), LedgerError> {
    tx.exec(
        "DELETE FROM idempotency WHERE account_id = ?1 AND route = ?2 AND key = ?3 AND state = 'running' AND request_id = ?4",
        args![scope.account, scope.route, scope.key, request_id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{temp_ledger, UsageStatus};

    use crate::ledger::test_usage as usage;

    /// A ledger with an account of 100 micros and an idempotency scope of it.
    fn funded() -> (tempfile::TempDir, Ledger, AccountId, IdempotencyScope) {
        let (d, l) = temp_ledger();
        let a = l.create_account("r@example.com", Micros(100)).unwrap().id;
        let scope = IdempotencyScope {
            account: a,
            route: "/r".into(),
            key: "k".into(),
        };
        (d, l, a, scope)
    }

    #[test]
    fn a_402_takes_no_claim_and_a_settle_stores_the_replay_with_the_charge() {
        let (_d, l, a, scope) = funded();
        let e = l
            .admit_request("req_1", a, None, Micros(500), Some((&scope, b"fp")))
            .unwrap_err();
        assert!(matches!(e, LedgerError::InsufficientBalance { .. }));
        assert_eq!(
            l.claim_owner(&scope).unwrap(),
            None,
            "a 402 leaves the key unused"
        );
        assert!(matches!(
            l.admit_request("req_2", a, None, Micros(50), Some((&scope, b"fp")))
                .unwrap(),
            Admitted::Reserved(_)
        ));
        assert_eq!(
            l.admit_request("req_3", a, None, Micros(50), Some((&scope, b"fp")))
                .unwrap(),
            Admitted::Claimed(Claim::InFlight { age_s: 0 })
        );
        let stored = StoredResponse {
            status: 200,
            body: "{}".into(),
        };
        assert_eq!(
            l.settle_request(&usage("req_2", a, 7), Some((&scope, &stored)))
                .unwrap()
                .charged_micros,
            7
        );
        assert!(matches!(
            l.admit_request("req_4", a, None, Micros(50), Some((&scope, b"fp")))
                .unwrap(),
            Admitted::Claimed(Claim::Replay(_))
        ));
        // Voiding after the settle changes nothing: the charge and the replay stay.
        assert!(
            !l.void_request(&usage("req_2", a, 0), Some(&scope))
                .unwrap()
                .applied
        );
        assert_eq!(l.account(a).unwrap().balance_micros, 93);
        assert!(l.check().unwrap().is_empty());
    }

    #[test]
    fn void_releases_the_hold_and_forgets_the_claim() {
        let (_d, l, a, scope) = funded();
        l.admit_request("req_1", a, None, Micros(60), Some((&scope, b"fp")))
            .unwrap();
        assert_eq!(
            l.void_request(&usage("req_1", a, 9), Some(&scope))
                .unwrap()
                .charged_micros,
            0
        );
        assert_eq!(l.claim_owner(&scope).unwrap(), None);
        let acct = l.account(a).unwrap();
        assert_eq!((acct.balance_micros.0, acct.reserved_micros.0), (100, 0));
        assert_eq!(
            l.usage("req_1").unwrap().unwrap().status,
            UsageStatus::Failed
        );
        l.admit_request("req_2", a, None, Micros(10), None).unwrap();
        l.settle_request(&usage("req_2", a, 4), None).unwrap();
        l.mark_undelivered("req_2").unwrap();
        assert_eq!(
            l.usage("req_2").unwrap().unwrap().status,
            UsageStatus::Undelivered
        );
        assert!(l.check().unwrap().is_empty());
    }

    #[test]
    fn a_settle_whose_response_cannot_be_stored_charges_nothing() {
        let (_d, l, a, scope) = funded();
        l.admit_request("req_1", a, None, Micros(60), Some((&scope, b"fp")))
            .unwrap();
        // The response's write fails after the charge's writes, inside the same transaction.
        l.write(|tx| {
            tx.batch(if tx.is_postgres() {
                "CREATE FUNCTION no_store() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'store failed'; END $$ LANGUAGE plpgsql;
                 CREATE TRIGGER no_store BEFORE UPDATE ON idempotency FOR EACH ROW EXECUTE FUNCTION no_store();"
            } else {
                "CREATE TRIGGER no_store BEFORE UPDATE ON idempotency BEGIN SELECT RAISE(ABORT, 'store failed'); END;"
            })?;
            Ok(())
        })
        .unwrap();
        let stored = StoredResponse {
            status: 200,
            body: "{}".into(),
        };
        assert!(l
            .settle_request(&usage("req_1", a, 7), Some((&scope, &stored)))
            .is_err());
        let acct = l.account(a).unwrap();
        assert_eq!(
            (acct.balance_micros.0, acct.reserved_micros.0),
            (100, 60),
            "all or nothing"
        );
        assert_eq!(l.usage("req_1").unwrap(), None);
        l.write(|tx| {
            Ok(tx.batch(if tx.is_postgres() {
                "DROP TRIGGER no_store ON idempotency;"
            } else {
                "DROP TRIGGER no_store;"
            })?)
        })
        .unwrap();
        assert_eq!(
            l.settle_request(&usage("req_1", a, 7), Some((&scope, &stored)))
                .unwrap()
                .charged_micros,
            7
        );
        assert!(l.check().unwrap().is_empty());
    }
}
