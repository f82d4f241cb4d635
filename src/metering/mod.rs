//! Metering: the money lifecycle of every paid request, one call for every paid endpoint.
//!
//! Owns: admission (the `Idempotency-Key` claim and the hold, one ledger transaction),
//! submission to the engine, settlement (charge, usage record and the stored idempotent
//! response, one transaction), voiding holds that cannot be charged (retried in the background
//! until it commits), and marking answers nobody received `undelivered`.
//! May use: `billing` (costs, usage records), `ledger`, `engine`, `catalog` (prices).
//! Never: axum or any HTTP type, wire formats (the caller renders the response it wants
//! stored), `api`.
//!
//! Protocol of one request (`Meter::admit`):
//! 1. `ledger.admit_request`: claim + hold in one transaction. A replay, a claim in flight or
//!    a reused key returns before anything is reserved; a 402 writes nothing.
//! 2. `engine.encode_images` (a blocking task; nothing for a prompt without images), so the
//!    vision encoder only runs for money already held, then `engine.submit`. A failed encode,
//!    a full queue or a refused request voids the hold (and the claim).
//! 3. A settlement task, spawned before `admit` returns, so it runs even when the caller is
//!    dropped: it waits for the engine's `Outcome`, which resolves exactly once (a dropped
//!    engine counts as a failure), and then
//!    - `Failed`: voids the hold, answers `EngineFailed`;
//!    - otherwise renders the response (`Mode::Complete`) and settles: charge, usage and stored
//!      response commit together. If the commit fails three times (disk full, I/O), the
//!      caller gets `NotRecorded` and the hold is voided in the background, retried until it
//!      commits: a request whose charge cannot be recorded is not charged, and no hold
//!      outlives its request while the server runs.
//! 4. `Mode::Complete` without an idempotency claim cancels the generation when the caller
//!    goes away (tokens produced so far are charged, `cancelled`); with a claim it runs to the
//!    end so a retry can replay it. An answer that was settled but could not be handed to its
//!    caller is marked `undelivered` (still charged: the work was done).
//!
//! After a crash, `recover` (start-up, before listening) releases every open hold and forgets
//! every running claim: step 3's single transaction means a claim is only ever `done` together
//! with its charge.

mod error;
mod flights;
mod settle;
mod units;

use std::sync::Arc;
use std::time::Instant;

pub use self::error::MeterError;
pub use self::settle::{Charge, Completion, Generated, Render, Settlement};
pub use self::units::{PaidUnits, UnitsAdmission};
use crate::billing::{self, Metered};
use crate::catalog::Pricing;
use crate::engine::{ChoiceEvents, EngineError, GenerateRequest, SharedEngine};
pub use crate::ledger::{AccountId, IdempotencyScope, KeyId, KeyLimitBreach, StoredResponse};
use crate::ledger::{Admitted, Claim, Ledger, LedgerError};

/// The metering service: admits paid requests against the ledger and the engine.
#[derive(Clone)]
pub struct Meter {
    ledger: Arc<Ledger>,
    engine: SharedEngine,
    /// Requests between admission and the end of their settlement.
    flights: Arc<flights::Flights>,
}

/// A client's `Idempotency-Key` for a request: where it lives and the body's fingerprint.
#[derive(Debug, Clone)]
pub struct Idempotency {
    pub scope: IdempotencyScope,
    /// SHA-256 of the canonical request body; the same key with another body is refused.
    pub fingerprint: Vec<u8>,
}

/// One paid request, ready to run.
pub struct PaidRequest {
    /// `req_` + 24 alphanumerics; names the hold and the usage record.
    pub request_id: String,
    /// The account that pays.
    pub account: AccountId,
    /// The API key that made the request (`None` for the playground's session path).
    pub key: Option<KeyId>,
    /// Catalogue id of the model.
    pub model: String,
    /// List prices at admission (the charge uses these, whatever changes meanwhile).
    pub pricing: Pricing,
    /// What to generate: prompt token ids, sampling, `max_new_tokens`, stop strings.
    pub generate: GenerateRequest,
    /// The client's idempotency key, if any (never with `Mode::Stream`).
    pub idempotency: Option<Idempotency>,
    /// When the request arrived (usage latency, ms).
    pub started: Instant,
    /// The client set no output limit (`max_tokens` absent): when the balance, or the key's
    /// spend limit, does not cover `generate.max_new_tokens` (the rest of the context), the
    /// request runs with the most output tokens it does cover, instead of 402; 402 only when
    /// not even one output token after the prompt is covered.
    pub fit_to_balance: bool,
    /// How the client's request names each of the prompt's images (its field path, e.g.
    /// `messages[0].content[1]`), in `ChatInput::images` order: an image that fails to decode
    /// after the hold is reported by that name (`MeterError::Image`).
    pub image_labels: Vec<String>,
}

/// What `Meter::hold` did.
enum Held {
    /// A finished request's stored response: nothing reserved.
    Replay(StoredResponse),
    /// Reserved this many micros.
    Reserved(crate::money::Micros),
}

/// How the caller consumes the generation.
pub enum Mode {
    /// Streamed: the caller gets the events; dropping them cancels the generation.
    Stream,
    /// Whole: metering collects the text and settles with `Render`'s response.
    Complete(Render),
}

/// The result of `Meter::admit`.
pub enum Admission {
    /// The key's request finished before: this is its stored response. Nothing new is charged.
    Replay(StoredResponse),
    /// `Mode::Stream`: every choice's events, and the settlement that resolves exactly once
    /// after them.
    Streaming(ChoiceEvents, Settlement),
    /// `Mode::Complete`: resolves once with the settled charge and the stored response.
    Completing(Completion),
}

impl Meter {
    /// A metering service over `ledger` and `engine`.
    pub fn new(ledger: Arc<Ledger>, engine: SharedEngine) -> Self {
        Self {
            ledger,
            engine,
            flights: Arc::default(),
        }
    }

    /// Paid requests admitted whose settlement (charge or void) has not committed yet.
    pub fn in_flight(&self) -> usize {
        self.flights.open()
    }

    /// Wait, at most `limit`, until every admitted request has settled (charged, or its hold
    /// voided): a clean stop waits on this before the process exits, so no hold is left open.
    /// Whether all have.
    pub async fn wait_settled(&self, limit: std::time::Duration) -> bool {
        self.flights.wait_landed(limit).await
    }

    /// Start-up recovery after a crash, before the server listens: release the open holds
    /// the last run left (on SQLite every open hold; on PostgreSQL this replica's own and any
    /// whose lease expired), since those clients got no complete response and nothing is
    /// charged, and forget the running claims that no longer hold anything (none of them was
    /// charged, see the module doc), so retries run once. Returns (holds released, claims
    /// forgotten).
    ///
    /// # Errors
    /// Database errors.
    pub fn recover(ledger: &Ledger) -> Result<(usize, usize), LedgerError> {
        // One process owns a SQLite file; replicas sharing PostgreSQL release only their own
        // holds here, and the others' expired leases in the lease sweep.
        let released = if ledger.is_postgres() {
            let own = if ledger.claim_replica_id()? {
                ledger.release_own_open()?
            } else {
                // Another live process runs with this replica id: its holds are not leftovers.
                // This process renews only its own, so none is kept open forever.
                tracing::warn!(replica = ledger.replica(), "another process uses this replica id (TOLLGATE_REPLICA_ID); its holds are left to their leases");
                ledger.renew_only_from(crate::ledger::now());
                0
            };
            own + ledger.release_expired_leases()?
        } else {
            ledger.release_all_open()?
        };
        Ok((released, ledger.clear_running_idempotency()?))
    }

    /// Admit `req`: claim and reserve, submit, and start its settlement (module doc, steps
    /// 1-3). Runs to the end of admission even if the caller is dropped meanwhile.
    ///
    /// # Errors
    /// `InsufficientBalance`, `KeySpendLimit`, `IdempotencyInFlight`, `IdempotencyMismatch`, `Overloaded`,
    /// `EngineFailed`, `StreamWithIdempotency`, `Storage` (the ledger could not take the
    /// hold; nothing is charged), `Internal`.
    pub async fn admit(&self, req: PaidRequest, mode: Mode) -> Result<Admission, MeterError> {
        if matches!(mode, Mode::Stream) && req.idempotency.is_some() {
            return Err(MeterError::StreamWithIdempotency);
        }
        let flight = self.flights.start();
        let me = self.clone();
        tokio::spawn(async move { me.admit_detached(req, mode, flight).await })
            .await
            .unwrap_or_else(|e| Err(MeterError::Internal(format!("admission task: {e}"))))
    }

    async fn admit_detached(
        self,
        mut req: PaidRequest,
        mode: Mode,
        flight: flights::Flight,
    ) -> Result<Admission, MeterError> {
        let prompt_tokens = req.generate.prompt.token_ids.len();
        let hold = match self.hold(&mut req).await? {
            Held::Replay(replay) => return Ok(Admission::Replay(replay)),
            Held::Reserved(hold) => hold,
        };
        let ctx = settle::Context {
            ledger: self.ledger.clone(),
            metered: Metered {
                request_id: req.request_id.clone(),
                account_id: req.account,
                key_id: req.key,
                model: req.model.clone(),
                pricing: req.pricing,
                started: req.started,
            },
            prompt_tokens,
            hold_micros: hold,
            claim: req.idempotency.map(|c| c.scope),
            units: None,
            flight,
        };
        let submitted = match self.encode_images(req.generate).await {
            Ok(generate) => self.engine.submit(generate),
            Err(e) => Err(e),
        };
        let generations = match submitted {
            Ok(g) => g,
            Err(e) => {
                settle::void(&ctx, 0).await;
                return Err(MeterError::refused(e, &req.model, &req.image_labels));
            }
        };
        let (events, outcomes): (Vec<_>, Vec<_>) = generations
            .into_iter()
            .map(|g| (g.events, g.outcome))
            .unzip();
        let events = ChoiceEvents::new(events);
        Ok(match mode {
            Mode::Stream => {
                let (settlement, tx) = Settlement::channel();
                tokio::spawn(settle::after_stream(ctx, outcomes, tx));
                Admission::Streaming(events, settlement)
            }
            Mode::Complete(render) => {
                let (completion, tx) = Completion::channel();
                tokio::spawn(settle::after_completion(ctx, events, outcomes, render, tx));
                Admission::Completing(completion)
            }
        })
    }

    /// Whether `account` (and `key`'s spend limit) covers the least a request can cost, its
    /// `prompt_tokens` and `output_tokens` (`billing::hold_micros`), read without holding
    /// anything: the check before work that comes before the hold (fetching a request's remote
    /// images), so a payer who cannot pay gets the 402 before that work is done. The hold
    /// itself still decides (`admit`).
    ///
    /// # Errors
    /// `InsufficientBalance`, `KeySpendLimit`, `Storage`.
    pub async fn precheck(
        &self,
        (account, key): (AccountId, Option<KeyId>),
        pricing: &Pricing,
        prompt_tokens: usize,
        output_tokens: usize,
    ) -> Result<(), MeterError> {
        let least = billing::hold_micros(pricing, prompt_tokens, output_tokens);
        self.ledger
            .run(move |l| l.could_reserve(account, key, least))
            .await
            .map_err(MeterError::from_admission)
    }

    /// Step 2's encoder run for `generate`'s images, off the async threads; `generate` back
    /// unchanged when it has none.
    ///
    /// # Errors
    /// As `Engine::encode_images`.
    async fn encode_images(
        &self,
        mut generate: GenerateRequest,
    ) -> Result<GenerateRequest, EngineError> {
        if generate.prompt.pending_images.is_none() {
            return Ok(generate);
        }
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || {
            engine
                .encode_images(&mut generate.prompt)
                .map(|()| generate)
        })
        .await
        .unwrap_or_else(|e| Err(EngineError::Encoder(format!("encoder task: {e}"))))
    }

    /// Step 1 for `req`: claim and hold its worst case. With `fit_to_balance`, a refusal for
    /// the balance or the key's limit is retried once with `generate.max_new_tokens` cut to
    /// what the money left covers (`billing::affordable_output_tokens`), if that is at least
    /// one token.
    ///
    /// # Errors
    /// As `claim_and_hold`.
    async fn hold(&self, req: &mut PaidRequest) -> Result<Held, MeterError> {
        let err = match self.hold_max_new(req).await {
            Err(e) => e,
            done => return done,
        };
        let prompt_tokens = req.generate.prompt.token_ids.len();
        let left = match &err {
            MeterError::InsufficientBalance { available, .. } => *available,
            MeterError::KeySpendLimit(b) => crate::money::Micros(b.limit.0 - b.used.0),
            _ => return Err(err),
        };
        let choices = req.generate.n.max(1);
        let fits = billing::affordable_output_tokens(&req.pricing, prompt_tokens, choices, left);
        if !req.fit_to_balance || fits == 0 || fits >= req.generate.max_new_tokens {
            return Err(err);
        }
        req.generate.max_new_tokens = fits;
        self.hold_max_new(req).await
    }

    /// Claim and hold `req`'s worst case: its prompt, billed once however many choices share
    /// it, and `generate.max_new_tokens` output tokens per choice.
    ///
    /// # Errors
    /// As `claim_and_hold`.
    async fn hold_max_new(&self, req: &PaidRequest) -> Result<Held, MeterError> {
        let max_new = req.generate.max_new_tokens;
        let output = max_new * req.generate.n.max(1);
        let hold = billing::hold_micros(&req.pricing, req.generate.prompt.token_ids.len(), output);
        // Roughly 50 tokens a second; the openai SDK waits at most 120 s.
        let estimate_s = u64::try_from(max_new / 50).unwrap_or(120);
        let replay = self
            .claim_and_hold(
                &req.request_id,
                (req.account, req.key),
                hold,
                req.idempotency.as_ref(),
                estimate_s,
            )
            .await?;
        Ok(replay.map_or(Held::Reserved(hold), Held::Replay))
    }

    /// Step 1 of the protocol: the idempotency claim and the hold of `hold` micros, paid by
    /// `payer` (account, and the API key that counts it against its spend limit), in one
    /// transaction. `Ok(Some(_))` is a finished request's stored response (nothing reserved);
    /// `Ok(None)`: reserved, go on. `estimate_s` is how long the request takes, for the
    /// `Retry-After` of a claim still in flight.
    ///
    /// # Errors
    /// `InsufficientBalance`, `KeySpendLimit`, `IdempotencyInFlight`, `IdempotencyMismatch`,
    /// `Storage`, `Internal`.
    async fn claim_and_hold(
        &self,
        request_id: &str,
        (account, key): (AccountId, Option<KeyId>),
        hold: crate::money::Micros,
        idempotency: Option<&Idempotency>,
        estimate_s: u64,
    ) -> Result<Option<StoredResponse>, MeterError> {
        let (rid, claim) = (request_id.to_string(), idempotency.cloned());
        let admitted = self
            .ledger
            .run(move |l| {
                l.admit_request(
                    &rid,
                    account,
                    key,
                    hold,
                    claim.as_ref().map(|c| (&c.scope, c.fingerprint.as_slice())),
                )
            })
            .await
            .map_err(MeterError::from_admission)?;
        let age_s = match admitted {
            Admitted::Reserved(_) => return Ok(None),
            Admitted::Claimed(Claim::Replay(r)) => {
                return Ok(Some(StoredResponse {
                    status: r.status,
                    body: r.body,
                }))
            }
            Admitted::Claimed(Claim::Mismatch) => return Err(MeterError::IdempotencyMismatch),
            Admitted::Claimed(Claim::InFlight { age_s }) => age_s,
            // `admit_request` never answers `New`; treat it as in flight rather than run twice.
            Admitted::Claimed(Claim::New) => 0,
        };
        let left = estimate_s.saturating_sub(u64::try_from(age_s).unwrap_or(0));
        Err(MeterError::IdempotencyInFlight {
            retry_after_s: left.clamp(1, 120),
        })
    }
}

#[cfg(test)]
mod tests;
