//! Card top-ups through Stripe Checkout: start a checkout with its pending top-up, read a
//! top-up's state, and credit it once when the provider's signed event confirms it.

use std::sync::Arc;

use super::{AccountService, AccountsError};
use crate::ids::AccountId;
use crate::ledger::{LedgerError, NewTopup, TopupOutcome, TopupStatus};
use crate::money::Micros;
use crate::payments::{self, Checkout, StripeConfig, MIN_FIRST_TOPUP_MICROS};

/// A checkout to start: the amount as the user typed it, converted by the caller
/// (`payments::Rates::convert`).
pub struct NewCheckout {
    pub account: AccountId,
    /// The amount as typed (for the first-top-up message).
    pub amount: String,
    /// ISO 4217, lower case.
    pub currency: String,
    /// In the currency's minor unit.
    pub amount_minor: i64,
    /// What it credits, micro-USD.
    pub usd: Micros,
    /// The USD-per-unit rate used (decimal string).
    pub rate: String,
    /// Where Stripe sends the browser after paying (`{CHECKOUT_SESSION_ID}` is filled in).
    pub success_url: String,
    /// Where Stripe sends the browser when the user cancels.
    pub cancel_url: String,
}

impl AccountService {
    /// Create a Stripe Checkout Session for `c` and record its pending top-up. A first top-up
    /// must be worth at least `MIN_FIRST_TOPUP_MICROS`.
    ///
    /// # Errors
    /// `FirstTopupTooSmall`, `PaymentProvider` (logged at warn), `Ledger`.
    pub async fn start_topup(
        &self,
        cfg: Arc<StripeConfig>,
        c: NewCheckout,
    ) -> Result<Checkout, AccountsError> {
        self.run(move |l, _| {
            if c.usd < MIN_FIRST_TOPUP_MICROS && !l.has_topped_up(c.account)? {
                return Err(AccountsError::FirstTopupTooSmall {
                    amount: c.amount.trim().to_owned(),
                    currency: c.currency.to_uppercase(),
                    usd: c.usd,
                });
            }
            let checkout = payments::create_checkout(
                &cfg,
                c.account,
                &c.currency,
                c.amount_minor,
                &c.success_url,
                &c.cancel_url,
            )
            .map_err(|e| {
                tracing::warn!(error = %e, "stripe checkout failed");
                AccountsError::PaymentProvider(e.to_string())
            })?;
            l.insert_topup(&NewTopup {
                account_id: c.account,
                provider: "stripe".into(),
                provider_ref: checkout.id.clone(),
                currency: c.currency,
                amount_minor: c.amount_minor,
                usd_micros: c.usd,
                rate: c.rate,
            })?;
            Ok(checkout)
        })
        .await
    }

    /// The state of `account`'s top-up with checkout id `checkout_id`, if it has one.
    ///
    /// # Errors
    /// `Ledger`.
    pub async fn topup_status(
        &self,
        account: AccountId,
        checkout_id: String,
    ) -> Result<Option<TopupStatus>, AccountsError> {
        self.run(move |l, _| Ok(l.topup_status(account, &checkout_id)?))
            .await
    }

    /// Credit the Stripe checkout `session_id` confirmed by event `event_id`, once per event
    /// and once per checkout, if its currency and amount (minor unit) match.
    ///
    /// # Errors
    /// `UnknownCheckout` (logged at warn), `Ledger`.
    pub async fn complete_topup(
        &self,
        event_id: String,
        session_id: String,
        currency: String,
        amount_minor: i64,
    ) -> Result<TopupOutcome, AccountsError> {
        self.run(move |l, _| {
            l.complete_topup("stripe", &event_id, &session_id, &currency, amount_minor)
                .map_err(|e| match e {
                    LedgerError::NoSuchTopup(id) => {
                        tracing::warn!(checkout = %id, "stripe event for an unknown checkout or amount");
                        AccountsError::UnknownCheckout
                    }
                    other => other.into(),
                })
        })
        .await
    }
}
