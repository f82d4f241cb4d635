//! Two-phase charging: reserve at admission, settle (charge actual, release the rest) or
//! release at the end, each in one `BEGIN IMMEDIATE` transaction. After TigerBeetle's pending
//! transfers: a hold never moves the balance; it lowers what other requests may reserve.

use super::db::{args, Tx};
use super::leases::{db_now, LEASE_S};

use super::accounts::{add_balance, insert_entry, insert_usage, UsageRecord, UsageStatus};
use super::{now, AccountId, KeyId, Ledger, LedgerError, Micros};

/// A successful reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub reserved_micros: Micros,
    /// Balance minus all open holds, after this one.
    pub available_after: Micros,
}

/// What closing a hold did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldOutcome {
    /// Micros charged (0 for a release).
    pub charged_micros: Micros,
    /// False when the hold was already closed (a repeated settle changes nothing).
    pub applied: bool,
    /// True when the hold was already settled: an earlier settle of this request committed
    /// (on PostgreSQL, one whose commit reply was lost with its connection), so the charge
    /// stands. Only the request itself settles its hold; recovery and the lease sweep release.
    pub settled_before: bool,
}

impl Ledger {
    /// Reserve `amount` micros for `request_id` if `balance - open holds >= amount`; the check
    /// and the insert are one transaction, so parallel requests can never overspend.
    ///
    /// # Errors
    /// `InsufficientBalance` (with required and available micros), `NoSuchAccount`, database errors.
    pub fn reserve(
        &self,
        request_id: &str,
        account: AccountId,
        amount: Micros,
    ) -> Result<Reservation, LedgerError> {
        self.write(|tx| reserve_in(tx, request_id, account, None, amount, &self.replica))
    }

    /// Whether a hold of `amount` micros for `account` (and `key`'s spend limit) would be taken
    /// now, read without writing: the check before work that comes before the hold itself
    /// (fetching a request's remote images). A later `reserve` decides for real.
    ///
    /// # Errors
    /// `InsufficientBalance`, `KeySpendLimit`, `NoSuchAccount`, database errors.
    pub fn could_reserve(
        &self,
        account: AccountId,
        key: Option<KeyId>,
        amount: Micros,
    ) -> Result<(), LedgerError> {
        self.read(|tx| room_in(tx, account, key, amount).map(|_| ()))
    }

    /// Charge the actual cost (never more than reserved) and release the rest; records usage.
    /// Idempotent: a second settle of the same request changes nothing.
    ///
    /// # Errors
    /// Database errors; a missing hold is `NoSuchAccount`-free and reported as not applied.
    pub fn settle(&self, usage: &UsageRecord) -> Result<HoldOutcome, LedgerError> {
        self.close(usage, true)
    }

    /// Release a hold without charging (engine failure, error before any output); records
    /// the usage with cost 0. Idempotent.
    ///
    /// # Errors
    /// Database errors.
    pub fn release(&self, usage: &UsageRecord) -> Result<HoldOutcome, LedgerError> {
        self.close(usage, false)
    }

    fn close(&self, usage: &UsageRecord, charge: bool) -> Result<HoldOutcome, LedgerError> {
        self.write(|tx| close_hold(tx, usage, charge))
    }
}

/// Close the hold of `usage.request_id` inside `tx`: charge `usage.cost_micros` (clamped to the
/// hold) and release the rest when `charge`, else release it all; records the usage row. A hold
/// that is missing or already closed changes nothing (`applied: false`).
pub(super) fn close_hold(
    tx: &Tx<'_>,
    usage: &UsageRecord,
    charge: bool,
) -> Result<HoldOutcome, LedgerError> {
    let hold: Option<(AccountId, Micros, String)> = tx.query_opt(
        "SELECT account_id, reserved_micros, state FROM holds WHERE request_id = ?1",
        args![&usage.request_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let Some((account, reserved, state)) = hold else {
        return Ok(HoldOutcome {
            charged_micros: Micros::ZERO,
            applied: false,
            settled_before: false,
        });
    };
    if state != "open" {
        return Ok(HoldOutcome {
            charged_micros: Micros::ZERO,
            applied: false,
            settled_before: state == "settled",
        });
    }
    let cost = if charge {
        usage.cost_micros.clamp(Micros::ZERO, reserved)
    } else {
        Micros::ZERO
    };
    if cost < usage.cost_micros && charge {
        tracing::warn!(request_id = %usage.request_id, cost = usage.cost_micros.0, reserved = reserved.0, "cost above the hold; charged the hold");
    }
    if cost > Micros::ZERO {
        add_balance(tx, account, -cost)?;
        insert_entry(tx, account, "settle", -cost, Some(&usage.request_id), None)?;
    }
    if reserved - cost > Micros::ZERO {
        insert_entry(
            tx,
            account,
            "release",
            reserved - cost,
            Some(&usage.request_id),
            None,
        )?;
    }
    tx.exec(
        "UPDATE holds SET state = ?1, settled_micros = ?2, closed_at = ?3 WHERE request_id = ?4",
        args![
            if charge { "settled" } else { "released" },
            cost,
            now(),
            usage.request_id
        ],
    )?;
    let mut record = usage.clone();
    record.account_id = account;
    record.cost_micros = cost;
    if !charge && record.status == UsageStatus::Ok {
        record.status = UsageStatus::Failed;
    }
    insert_usage(tx, &record)?;
    Ok(HoldOutcome {
        charged_micros: cost,
        applied: true,
        settled_before: false,
    })
}

/// Insert an open hold of `amount` micros for `request_id` if `balance - open holds >= amount`,
/// inside `tx`, owned by replica `owner` with a lease of [`LEASE_S`].
pub(super) fn reserve_in(
    tx: &Tx<'_>,
    request_id: &str,
    account: AccountId,
    key: Option<KeyId>,
    amount: Micros,
    owner: &str,
) -> Result<Reservation, LedgerError> {
    if amount < Micros::ZERO {
        return Err(LedgerError::BadAmount);
    }
    let available = room_in(tx, account, key, amount)?;
    tx.exec(
        &format!(
            "INSERT INTO holds (request_id, account_id, reserved_micros, state, created_at, key_id, owner, lease_until)
             VALUES (?1, ?2, ?3, 'open', ?4, ?5, ?6, {} + ?7)",
            db_now(tx)
        ),
        args![request_id, account, amount, now(), key, owner, LEASE_S],
    )?;
    insert_entry(tx, account, "hold", amount, Some(request_id), None)?;
    Ok(Reservation {
        reserved_micros: amount,
        available_after: available - amount,
    })
}

/// Whether `key`'s spend limit and `account`'s balance less its open holds cover `amount`:
/// the account's available micros when they do.
///
/// # Errors
/// `KeySpendLimit`, `InsufficientBalance`, `NoSuchAccount`, database errors.
fn room_in(
    tx: &Tx<'_>,
    account: AccountId,
    key: Option<KeyId>,
    amount: Micros,
) -> Result<Micros, LedgerError> {
    if let Some(key) = key {
        super::keys::check_key_limit(tx, key, amount)?;
    }
    let available: Micros = tx
        .query_opt(
            "SELECT a.balance_micros - COALESCE((SELECT CAST(SUM(reserved_micros) AS BIGINT) FROM holds h WHERE h.account_id = a.id AND h.state = 'open'), 0)
             FROM accounts a WHERE a.id = ?1",
            args![account],
            |r| r.get(0),
        )?
        .ok_or_else(|| LedgerError::NoSuchAccount(account.to_string()))?;
    if available < amount {
        return Err(LedgerError::InsufficientBalance {
            required: amount,
            available,
        });
    }
    Ok(available)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::temp_ledger;

    use crate::ledger::test_usage as usage;

    #[test]
    fn reserve_settle_release_keep_the_books_balanced() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("a@example.com", Micros(1000)).unwrap();
        assert_eq!(
            l.reserve("r1", a.id, Micros(600)).unwrap().available_after,
            400
        );
        let e = l.reserve("r2", a.id, Micros(500)).unwrap_err();
        assert!(matches!(
            e,
            LedgerError::InsufficientBalance {
                required: Micros(500),
                available: Micros(400)
            }
        ));
        assert_eq!(
            l.settle(&usage("r1", a.id, 250)).unwrap(),
            HoldOutcome {
                charged_micros: Micros(250),
                applied: true,
                settled_before: false,
            }
        );
        let again = l.settle(&usage("r1", a.id, 250)).unwrap();
        assert!(!again.applied, "settle is idempotent");
        assert!(again.settled_before, "and says the charge stands");
        let acct = l.account(a.id).unwrap();
        assert_eq!((acct.balance_micros.0, acct.reserved_micros.0), (750, 0));
        l.reserve("r3", a.id, Micros(700)).unwrap();
        assert_eq!(l.release(&usage("r3", a.id, 99)).unwrap().charged_micros, 0);
        let late = l.settle(&usage("r3", a.id, 99)).unwrap();
        assert!(
            !late.applied && !late.settled_before,
            "released: not charged"
        );
        assert_eq!(l.account(a.id).unwrap().balance_micros, 750);
        assert_eq!(l.usage("r3").unwrap().unwrap().status, UsageStatus::Failed);
        assert!(l.check().unwrap().is_empty());
    }

    /// `could_reserve` answers what `reserve` would, open holds counted, and writes nothing.
    #[test]
    fn could_reserve_reads_what_reserve_would_decide() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("a@example.com", Micros(1000)).unwrap();
        l.could_reserve(a.id, None, Micros(1000))
            .expect("the whole balance");
        l.reserve("r1", a.id, Micros(600)).unwrap();
        l.could_reserve(a.id, None, Micros(400))
            .expect("what is left");
        let e = l.could_reserve(a.id, None, Micros(401)).unwrap_err();
        assert!(
            matches!(e, LedgerError::InsufficientBalance { required, available } if required == Micros(401) && available == Micros(400)),
            "{e:?}"
        );
        let acct = l.account(a.id).unwrap();
        assert_eq!((acct.balance_micros.0, acct.reserved_micros.0), (1000, 600));
        assert!(
            l.entries(a.id, 10).unwrap().len() == 2,
            "a credit and one hold, nothing more"
        );
    }

    #[test]
    fn settle_never_charges_more_than_reserved_and_start_up_releases_open_holds() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("b@example.com", Micros(100)).unwrap();
        l.reserve("r1", a.id, Micros(40)).unwrap();
        assert_eq!(l.settle(&usage("r1", a.id, 90)).unwrap().charged_micros, 40);
        l.reserve("r2", a.id, Micros(30)).unwrap();
        assert!(!l.check().unwrap().is_empty(), "an open hold is reported");
        assert_eq!(l.release_all_open().unwrap(), 1);
        assert_eq!(l.account(a.id).unwrap().available_micros(), 60);
        assert!(l.check().unwrap().is_empty());
    }
}
