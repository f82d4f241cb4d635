//! Top-ups through a payment provider: pending checkouts, and crediting one exactly once when
//! the provider confirms it (idempotent per provider event id and per checkout).

use super::db::args;

use super::accounts::{add_balance, insert_entry};
use super::{now, AccountId, Ledger, LedgerError, Micros};

/// A checkout about to be paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopup {
    pub account_id: AccountId,
    /// `stripe`.
    pub provider: String,
    /// The provider's id of the checkout (Stripe: the Checkout Session id).
    pub provider_ref: String,
    /// ISO 4217, lower case.
    pub currency: String,
    /// Amount in the currency's minor unit (cents; yen for zero-decimal currencies).
    pub amount_minor: i64,
    /// What will be credited, in micro-USD.
    pub usd_micros: Micros,
    /// The USD-per-unit rate used (decimal string, recorded on the ledger entry).
    pub rate: String,
}

/// A top-up as its owner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopupStatus {
    /// `pending` until the provider confirms payment, then `completed`.
    pub state: String,
    /// ISO 4217, lower case.
    pub currency: String,
    /// In the currency's minor unit.
    pub amount_minor: i64,
    /// Credited (or to be credited), micro-USD.
    pub usd_micros: Micros,
    /// Unix seconds of the credit, when completed.
    pub completed_at: Option<i64>,
}

/// What a confirmation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopupOutcome {
    /// The balance was credited now.
    Credited {
        account_id: AccountId,
        usd_micros: Micros,
    },
    /// This event id was handled before (a replay): nothing changed.
    DuplicateEvent,
    /// The checkout was already credited (by another event): nothing changed.
    AlreadyCredited,
}

impl Ledger {
    /// Record a pending top-up.
    ///
    /// # Errors
    /// `BadAmount` for non-positive amounts, database errors.
    pub fn insert_topup(&self, t: &NewTopup) -> Result<(), LedgerError> {
        if t.amount_minor <= 0 || t.usd_micros <= Micros::ZERO {
            return Err(LedgerError::BadAmount);
        }
        self.write(|tx| {
            tx.exec(
                "INSERT INTO topups (account_id, provider, provider_ref, currency, amount_minor, usd_micros, rate, state, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8)",
                args![t.account_id, t.provider, t.provider_ref, t.currency, t.amount_minor, t.usd_micros, t.rate, now()],
            )?;
            Ok(())
        })
    }

    /// The top-up of `account` with the provider's checkout id `provider_ref` (`None` if there
    /// is none, or it is another account's).
    ///
    /// # Errors
    /// Database errors.
    pub fn topup_status(
        &self,
        account: AccountId,
        provider_ref: &str,
    ) -> Result<Option<TopupStatus>, LedgerError> {
        self.read(|c| {
            Ok(c.query_opt(
                "SELECT state, currency, amount_minor, usd_micros, completed_at FROM topups WHERE account_id = ?1 AND provider_ref = ?2",
                args![account, provider_ref],
                |r| {
                    Ok(TopupStatus {
                        state: r.get(0)?,
                        currency: r.get(1)?,
                        amount_minor: r.get(2)?,
                        usd_micros: r.get(3)?,
                        completed_at: r.get(4)?,
                    })
                },
            )?)
        })
    }

    /// Whether the account has any credited top-up (the first one has a minimum).
    ///
    /// # Errors
    /// Database errors.
    pub fn has_topped_up(&self, account: AccountId) -> Result<bool, LedgerError> {
        self.read(|c| {
            Ok(c.query_one(
                "SELECT EXISTS (SELECT 1 FROM topups WHERE account_id = ?1 AND state = 'completed')",
                args![account],
                |r| r.get(0),
            )?)
        })
    }

    /// Credit a confirmed checkout, in one transaction: the event id is recorded (a replay is
    /// `DuplicateEvent`), the checkout must exist with this currency and amount, and it is
    /// credited only if still pending (`AlreadyCredited` otherwise). The `topup` entry's note
    /// names the provider, checkout, amount and rate.
    ///
    /// # Errors
    /// `NoSuchTopup` (unknown checkout, or the amount or currency differ: nothing is
    /// recorded, so the provider retries and an operator can look), database errors.
    pub fn complete_topup(
        &self,
        provider: &str,
        event_id: &str,
        provider_ref: &str,
        currency: &str,
        amount_minor: i64,
    ) -> Result<TopupOutcome, LedgerError> {
        self.write(|tx| {
            let fresh = tx.exec(
                "INSERT INTO provider_events (event_id, provider, received_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                args![event_id, provider, now()],
            )?;
            if fresh == 0 {
                return Ok(TopupOutcome::DuplicateEvent);
            }
            let row: Option<(i64, AccountId, Micros, String, String, i64)> = tx
                .query_opt(
                    "SELECT id, account_id, usd_micros, state, rate, amount_minor FROM topups
                     WHERE provider = ?1 AND provider_ref = ?2 AND currency = ?3",
                    args![provider, provider_ref, currency],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
                )?;
            let Some((id, account, usd, state, rate, amount)) =
                row.filter(|r| r.5 == amount_minor)
            else {
                return Err(LedgerError::NoSuchTopup(provider_ref.to_owned()));
            };
            if state == "completed" {
                return Ok(TopupOutcome::AlreadyCredited);
            }
            tx.exec(
                "UPDATE topups SET state = 'completed', completed_at = ?1 WHERE id = ?2",
                args![now(), id],
            )?;
            add_balance(tx, account, usd)?;
            let note = format!(
                "{provider} {provider_ref}: {amount} minor units of {} at {rate} USD each",
                currency.to_uppercase()
            );
            insert_entry(tx, account, "topup", usd, None, Some(&note))?;
            Ok(TopupOutcome::Credited {
                account_id: account,
                usd_micros: usd,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::temp_ledger;

    #[test]
    fn a_checkout_is_credited_once_whatever_the_events() {
        let (_d, l) = temp_ledger();
        let a = l.create_account("pay@example.com", Micros(0)).unwrap();
        l.insert_topup(&NewTopup {
            account_id: a.id,
            provider: "stripe".into(),
            provider_ref: "cs_1".into(),
            currency: "eur".into(),
            amount_minor: 1000,
            usd_micros: Micros(10_800_000),
            rate: "1.08".into(),
        })
        .unwrap();
        assert!(!l.has_topped_up(a.id).unwrap());
        // Wrong amount: refused, and the event is not burnt.
        assert!(matches!(
            l.complete_topup("stripe", "evt_1", "cs_1", "eur", 999),
            Err(LedgerError::NoSuchTopup(_))
        ));
        assert_eq!(
            l.complete_topup("stripe", "evt_1", "cs_1", "eur", 1000)
                .unwrap(),
            TopupOutcome::Credited {
                account_id: a.id,
                usd_micros: Micros(10_800_000)
            }
        );
        assert_eq!(
            l.complete_topup("stripe", "evt_1", "cs_1", "eur", 1000)
                .unwrap(),
            TopupOutcome::DuplicateEvent
        );
        assert_eq!(
            l.complete_topup("stripe", "evt_2", "cs_1", "eur", 1000)
                .unwrap(),
            TopupOutcome::AlreadyCredited
        );
        assert_eq!(l.account(a.id).unwrap().balance_micros, 10_800_000);
        assert!(l.has_topped_up(a.id).unwrap());
        assert!(l.entries(a.id, 5).unwrap()[0]
            .note
            .as_deref()
            .unwrap()
            .contains("1000 minor units of EUR at 1.08"));
        assert!(l.check().unwrap().is_empty());
    }
}
