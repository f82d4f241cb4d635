//! Unit-priced requests (speech): the same protocol as `Meter::admit` (module doc of
//! `metering`), for work whose cost is known before it runs: seconds of decoded audio,
//! characters of text. The hold is the exact charge; a failed run voids it and hands the
//! work's own error back, so the caller answers it (a 400 for input the work found unusable,
//! a 502 for a failed model) knowing nothing was charged.

use std::future::Future;
use std::time::Instant;

use super::settle::{self, Context};
use super::{Idempotency, Meter, MeterError};
use crate::billing::{self, Ending, Metered, Units};
use crate::catalog::{PricePerMTok, Pricing};
use crate::ledger::{AccountId, KeyId, StoredResponse};
use crate::money::Micros;

/// One unit-priced request, ready to run.
pub struct PaidUnits {
    /// `req_` + 24 alphanumerics; names the hold and the usage record.
    pub request_id: String,
    pub account: AccountId,
    /// The API key that made the request.
    pub key: Option<KeyId>,
    /// Catalogue id of the model.
    pub model: String,
    /// What is billed, at its list price (priced here, before the hold).
    pub units: Units,
    pub idempotency: Option<Idempotency>,
    /// When the request arrived (usage latency, ms).
    pub started: Instant,
    /// About how long the work takes, seconds (the `Retry-After` of a duplicate in flight).
    pub estimate_s: u64,
}

/// The result of `Meter::run_units` whose work fails with `E`.
pub enum UnitsAdmission<E> {
    /// The key's request finished before: its stored response; nothing new is charged.
    Replay(StoredResponse),
    /// Ran and settled: the micros charged and the response stored with the charge.
    Done(Micros, StoredResponse),
    /// The work failed with this error: the hold was voided (and the idempotency claim
    /// released), nothing is charged.
    Failed(E),
}

/// Token prices of a unit-priced request's `Metered`: none (its charge is `PricedUnits`).
const NO_TOKEN_PRICES: Pricing = Pricing {
    input: PricePerMTok(0),
    cached_input: None,
    output: PricePerMTok(0),
};

impl Meter {
    /// Admit `req` (claim and hold its exact cost), await `work`, then settle: the charge,
    /// usage record and `render`'s response commit together. Runs to the end even if the
    /// caller is dropped (a retry with the same idempotency key replays it).
    ///
    /// # Errors
    /// `InsufficientBalance`, `IdempotencyInFlight`, `IdempotencyMismatch`, `Storage` (nothing
    /// reserved); `NotRecorded`, `Internal`. A failure of `work` itself is
    /// `Ok(UnitsAdmission::Failed)`.
    pub async fn run_units<T, E, W, R>(
        &self,
        req: PaidUnits,
        work: W,
        render: R,
    ) -> Result<UnitsAdmission<E>, MeterError>
    where
        T: Send + 'static,
        E: Send + 'static,
        W: Future<Output = Result<T, E>> + Send + 'static,
        R: FnOnce(Micros, T) -> StoredResponse + Send + 'static,
    {
        let me = self.clone();
        let flight = self.flights.start();
        tokio::spawn(async move { me.run_units_detached(req, work, render, flight).await })
            .await
            .unwrap_or_else(|e| Err(MeterError::Internal(format!("admission task: {e}"))))
    }

    async fn run_units_detached<T, E, W, R>(
        self,
        req: PaidUnits,
        work: W,
        render: R,
        flight: super::flights::Flight,
    ) -> Result<UnitsAdmission<E>, MeterError>
    where
        W: Future<Output = Result<T, E>>,
        R: FnOnce(Micros, T) -> StoredResponse,
    {
        let units = req.units.priced();
        let cost = units.cost;
        if let Some(replay) = self
            .claim_and_hold(
                &req.request_id,
                (req.account, req.key),
                cost,
                req.idempotency.as_ref(),
                req.estimate_s,
            )
            .await?
        {
            return Ok(UnitsAdmission::Replay(replay));
        }
        let ctx = Context {
            ledger: self.ledger.clone(),
            metered: Metered {
                request_id: req.request_id,
                account_id: req.account,
                key_id: req.key,
                model: req.model,
                pricing: NO_TOKEN_PRICES,
                started: req.started,
            },
            prompt_tokens: 0,
            hold_micros: cost,
            claim: req.idempotency.map(|c| c.scope),
            units: Some(units),
            flight,
        };
        match work.await {
            Err(e) => {
                settle::void(&ctx, 0).await;
                Ok(UnitsAdmission::Failed(e))
            }
            Ok(out) => {
                let response = render(cost, out);
                let usage = billing::units_usage_record(&ctx.metered, &units, Ending::Completed);
                settle::settle_usage(&ctx, usage, Some(&response), 0)
                    .await
                    .map(|()| UnitsAdmission::Done(cost, response))
            }
        }
    }
}
