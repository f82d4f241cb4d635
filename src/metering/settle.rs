//! Settlement tasks of admitted requests (module doc of `metering`, steps 3 and 4): wait for
//! the engine's outcome, then settle or void the hold, retrying a void in the background until
//! it commits.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::error::MeterError;
use crate::billing::{self, Ending, Metered};
use crate::engine::{ChoiceEvents, FinishReason, GenerationEvent, Outcome, TokenLogprob};
use crate::ledger::{IdempotencyScope, Ledger, StoredResponse};
use crate::money::Micros;

/// Attempts at a settle before giving up on charging (SQLite's busy timeout already covers
/// lock waits; this covers short I/O hiccups).
const SETTLE_ATTEMPTS: u32 = 3;
/// First and largest wait between background void attempts.
const VOID_BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// What a whole (non-streamed) generation produced: its text and, when the request asked for
/// them, its tokens' log-probabilities in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Generated {
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
}

/// Renders the response to keep and send once the charge is known: the charge and each
/// choice's whole generated text (in choice order) in, status and JSON body out.
pub type Render = Box<dyn FnOnce(&Charge, Vec<Generated>) -> StoredResponse + Send>;

/// What a settled request cost, as billed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// Input tokens billed: the prompt once, however many choices shared it.
    pub prompt_tokens: usize,
    /// Of `prompt_tokens`, those the prefix cache supplied (billed at the cached-input price).
    pub cached_tokens: usize,
    /// Output tokens billed, every choice's together (a final EOS included).
    pub completion_tokens: usize,
    /// Of `completion_tokens`, the thinking ones (billed as output like the rest).
    pub reasoning_tokens: usize,
    /// Tokens of the request's `prediction` that became output.
    pub accepted_prediction_tokens: usize,
    /// Of `completion_tokens`, the `prediction` tokens computed and rejected (billed as
    /// output: OpenAI's rule for predicted outputs).
    pub rejected_prediction_tokens: usize,
    /// Micro-USD charged (`billing::cost_micros`, never above the hold).
    pub cost_micros: Micros,
    /// How the generation ended (`Stop`, `Length` or `Cancelled`; never `Failed`):
    /// `Cancelled` when any choice was, else choice 0's.
    pub finish: FinishReason,
    /// How each choice ended, in choice order.
    pub finishes: Vec<FinishReason>,
}

/// The settlement of a streamed request; resolves exactly once.
pub struct Settlement(oneshot::Receiver<Result<Charge, MeterError>>);

/// The sending half of a `Settlement`.
pub(super) type SettlementTx = oneshot::Sender<Result<Charge, MeterError>>;

impl Settlement {
    pub(super) fn channel() -> (Self, SettlementTx) {
        let (tx, rx) = oneshot::channel();
        (Self(rx), tx)
    }

    /// Wait for the charge (after the last event).
    ///
    /// # Errors
    /// `EngineFailed` (nothing charged), `NotRecorded` (the charge could not be written; the
    /// hold is voided in the background), `Internal` if the settlement task died.
    pub async fn wait(self) -> Result<Charge, MeterError> {
        self.0.await.unwrap_or_else(|_| {
            Err(MeterError::Internal(
                "settlement task ended without a result".into(),
            ))
        })
    }
}

/// The outcome of a whole (non-streamed) request; resolves exactly once.
pub struct Completion(oneshot::Receiver<Result<(Charge, StoredResponse), MeterError>>);

/// The sending half of a `Completion`.
pub(super) type CompletionTx = oneshot::Sender<Result<(Charge, StoredResponse), MeterError>>;

impl Completion {
    pub(super) fn channel() -> (Self, CompletionTx) {
        let (tx, rx) = oneshot::channel();
        (Self(rx), tx)
    }

    /// Wait for the settled charge and the response stored with it.
    ///
    /// # Errors
    /// As `Settlement::wait`.
    pub async fn wait(self) -> Result<(Charge, StoredResponse), MeterError> {
        self.0.await.unwrap_or_else(|_| {
            Err(MeterError::Internal(
                "completion task ended without a result".into(),
            ))
        })
    }
}

/// What a settlement needs to know about its request.
pub(super) struct Context {
    pub(super) ledger: Arc<Ledger>,
    pub(super) metered: Metered,
    /// Prompt tokens, for an outcome that never arrives.
    pub(super) prompt_tokens: usize,
    /// The hold's micros: no charge is ever above it.
    pub(super) hold_micros: Micros,
    /// The idempotency claim to store the response under, or forget on failure.
    pub(super) claim: Option<IdempotencyScope>,
    /// For a unit-priced request (speech), what it bills instead of tokens.
    pub(super) units: Option<billing::PricedUnits>,
    /// Keeps the request counted in flight until its settlement ends.
    pub(super) flight: super::flights::Flight,
}

/// Wait for a streamed generation's outcomes (one per choice) and settle them; the caller owns
/// the events.
pub(super) async fn after_stream(
    ctx: Context,
    outcomes: Vec<oneshot::Receiver<Outcome>>,
    tx: SettlementTx,
) {
    let outcomes = wait_outcomes(&ctx, outcomes).await;
    let result = match charge_of(&ctx, &outcomes) {
        Err(e) => {
            void(&ctx, completion_tokens(&outcomes)).await;
            Err(e)
        }
        Ok(charge) => settle(&ctx, &charge, None).await.map(|()| charge),
    };
    let _ = tx.send(result);
}

/// Collect a whole generation's text, wait for its outcome, render and settle it, and hand the
/// result to the caller; marks it `undelivered` when the caller is gone.
pub(super) async fn after_completion(
    ctx: Context,
    events: ChoiceEvents,
    outcomes: Vec<oneshot::Receiver<Outcome>>,
    render: Render,
    mut tx: CompletionTx,
) {
    let text = collect(events, &mut tx, ctx.claim.is_some()).await;
    let outcomes = wait_outcomes(&ctx, outcomes).await;
    let result = match charge_of(&ctx, &outcomes) {
        Err(e) => {
            void(&ctx, completion_tokens(&outcomes)).await;
            Err(e)
        }
        Ok(charge) => {
            let response = render(&charge, text);
            settle(&ctx, &charge, Some(&response))
                .await
                .map(|()| (charge, response))
        }
    };
    let settled_ok = matches!(&result, Ok((c, _)) if c.finish != FinishReason::Cancelled);
    if tx.send(result).is_err() && settled_ok {
        let (ledger, rid) = (ctx.ledger.clone(), ctx.metered.request_id.clone());
        if let Err(e) = ledger.run(move |l| l.mark_undelivered(&rid)).await {
            tracing::warn!(request_id = %ctx.metered.request_id, "could not mark usage undelivered: {e}");
        }
    }
}

/// Each choice's text from its deltas and its logprobs. Without a claim, stops early
/// (dropping the events cancels the generation) when the caller goes away.
async fn collect<T>(
    mut events: ChoiceEvents,
    caller: &mut oneshot::Sender<T>,
    run_to_end: bool,
) -> Vec<Generated> {
    let mut out = vec![Generated::default(); events.len()];
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some((i, GenerationEvent::Delta(d))) => out[i].text.push_str(&d),
                Some((i, GenerationEvent::Logprob(l))) => out[i].logprobs.push(l),
                Some((_, GenerationEvent::Started)) => {}
                None => break,
            },
            () = caller.closed(), if !run_to_end => break,
        }
    }
    out
}

/// Every choice's outcome, in choice order; a dropped engine (its thread died) is a failure.
async fn wait_outcomes(ctx: &Context, outcomes: Vec<oneshot::Receiver<Outcome>>) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        out.push(o.await.unwrap_or(Outcome {
            prompt_tokens: ctx.prompt_tokens,
            cached_tokens: 0,
            completion_tokens: 0,
            reasoning_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
            finish: FinishReason::Failed("the engine dropped the request".into()),
        }));
    }
    out
}

/// Output tokens of every choice together.
fn completion_tokens(outcomes: &[Outcome]) -> usize {
    outcomes.iter().map(|o| o.completion_tokens).sum()
}

/// The charge of the choices' outcomes, or why nothing is charged: the first failure
/// (`EngineFailed`: one failed choice fails the request) or a job the engine ended unrun
/// while stopping (`ShuttingDown`). The prompt counts once: every choice read the same
/// prefill.
fn charge_of(ctx: &Context, outcomes: &[Outcome]) -> Result<Charge, MeterError> {
    if let Some(e) = outcomes.iter().find_map(|o| match &o.finish {
        FinishReason::Failed(msg) => Some(MeterError::EngineFailed(msg.clone())),
        FinishReason::NotRun => Some(MeterError::ShuttingDown),
        _ => None,
    }) {
        return Err(e);
    }
    let prompt = outcomes
        .first()
        .map_or(ctx.prompt_tokens, |o| o.prompt_tokens);
    let cached = outcomes.first().map_or(0, |o| o.cached_tokens);
    let completion = completion_tokens(outcomes);
    let finishes: Vec<FinishReason> = outcomes.iter().map(|o| o.finish.clone()).collect();
    let finish = if finishes.contains(&FinishReason::Cancelled) {
        FinishReason::Cancelled
    } else {
        finishes.first().cloned().unwrap_or(FinishReason::Stop)
    };
    let p = &ctx.metered.pricing;
    Ok(Charge {
        prompt_tokens: prompt,
        cached_tokens: cached,
        completion_tokens: completion,
        reasoning_tokens: outcomes.iter().map(|o| o.reasoning_tokens).sum(),
        accepted_prediction_tokens: outcomes.iter().map(|o| o.accepted_prediction_tokens).sum(),
        rejected_prediction_tokens: outcomes.iter().map(|o| o.rejected_prediction_tokens).sum(),
        cost_micros: billing::cost_micros(p, prompt as u64, cached as u64, completion as u64)
            .min(ctx.hold_micros),
        finish,
        finishes,
    })
}

/// Charge, usage record and stored response in one transaction, tried `SETTLE_ATTEMPTS` times;
/// then the hold is voided in the background and the caller gets `NotRecorded`.
async fn settle(
    ctx: &Context,
    charge: &Charge,
    response: Option<&StoredResponse>,
) -> Result<(), MeterError> {
    let ending = if charge.finish == FinishReason::Cancelled {
        Ending::Cancelled
    } else {
        Ending::Completed
    };
    let usage = billing::usage_record(
        &ctx.metered,
        charge.prompt_tokens,
        charge.cached_tokens,
        charge.completion_tokens,
        ending,
    );
    settle_usage(ctx, usage, response, charge.completion_tokens).await
}

/// Commit `usage` (the charge) with the stored `response`, retrying short failures; on a
/// final failure void the hold (`completion_tokens` for its record) and answer `NotRecorded`.
pub(super) async fn settle_usage(
    ctx: &Context,
    usage: crate::ledger::UsageRecord,
    response: Option<&StoredResponse>,
    completion_tokens: usize,
) -> Result<(), MeterError> {
    // Only a claimed request keeps its response (for replays); others are not copied.
    let stored = ctx
        .claim
        .clone()
        .and_then(|c| response.map(|r| (c, r.clone())));
    let (mut attempt, mut wait) = (1, Duration::from_millis(50));
    let result = loop {
        let (u, s) = (usage.clone(), stored.clone());
        match ctx
            .ledger
            .run(move |l| l.settle_request(&u, s.as_ref().map(|(c, r)| (c, r))))
            .await
        {
            Err(e) if attempt < SETTLE_ATTEMPTS => {
                tracing::warn!(request_id = %usage.request_id, attempt, "settle failed; retrying: {e}");
                tokio::time::sleep(wait).await;
                (attempt, wait) = (attempt + 1, wait * 4);
            }
            other => break other,
        }
    };
    match result {
        Ok(outcome) if outcome.settled_before => {
            // An earlier attempt committed but its reply was lost (a PostgreSQL connection
            // dropped at COMMIT): the charge and the stored response stand.
            tracing::warn!(request_id = %usage.request_id, "settled by an earlier attempt whose reply was lost");
            Ok(())
        }
        Ok(outcome) if !outcome.applied => {
            // Someone else closed the hold (a second process recovering this ledger): this
            // request was not charged, so it must not be answered as if it were.
            tracing::error!(request_id = %usage.request_id, "the hold was already closed; not charged");
            Err(MeterError::NotRecorded(
                "the hold was already closed".into(),
            ))
        }
        Ok(_) => {
            tracing::info!(request_id = %usage.request_id, model = %usage.model,
                prompt_tokens = usage.prompt_tokens, completion_tokens = usage.completion_tokens,
                audio_ms = usage.audio_ms, input_characters = usage.input_characters,
                cost_micros = usage.cost_micros.0, ms = usage.latency_ms, status = usage.status.as_str(), "settled");
            Ok(())
        }
        Err(e) => {
            tracing::error!(request_id = %usage.request_id, "settle failed {attempt} times; voiding the hold: {e}");
            // Voided before the answer when the ledger allows it, so a retry with the same
            // key runs at once; otherwise in the background until it commits.
            if void(ctx, completion_tokens).await {
                // The last attempt committed after all; its reply was lost.
                tracing::warn!(request_id = %usage.request_id, "settled by an attempt whose reply was lost");
                return Ok(());
            }
            Err(MeterError::NotRecorded(e.to_string()))
        }
    }
}

/// Release the hold free and forget the claim (one transaction): once now, and if that
/// fails, in the background until it commits (backoff 100 ms doubling to 5 s), so a hold never
/// outlives its request while the server runs, even through a full disk. Returns true when the
/// first try found the hold already settled (a settle whose reply was lost committed): the
/// request was charged, and nothing was released.
pub(super) async fn void(ctx: &Context, completion_tokens: usize) -> bool {
    let usage = match &ctx.units {
        Some(units) => billing::units_usage_record(&ctx.metered, units, Ending::Failed),
        None => billing::usage_record(
            &ctx.metered,
            ctx.prompt_tokens,
            0,
            completion_tokens,
            Ending::Failed,
        ),
    };
    let (ledger, claim) = (ctx.ledger.clone(), ctx.claim.clone());
    let try_void = move || {
        let (ledger, u, c) = (ledger.clone(), usage.clone(), claim.clone());
        async move { ledger.run(move |l| l.void_request(&u, c.as_ref())).await }
    };
    if let Ok(outcome) = try_void().await {
        return outcome.settled_before;
    }
    let request_id = ctx.metered.request_id.clone();
    let flight = ctx.flight.clone();
    tokio::spawn(async move {
        let _flight = flight;
        let mut wait = VOID_BACKOFF.0;
        loop {
            tokio::time::sleep(wait).await;
            match try_void().await {
                Ok(o) if o.settled_before => {
                    // A settle whose reply was lost had committed: charged, though answered
                    // as not recorded (the ledger's usage row is the truth).
                    tracing::error!(%request_id, "a settle answered as failed had committed; the request was charged");
                    return;
                }
                Ok(_) => break,
                Err(e) => tracing::warn!(%request_id, "void failed; retrying in {wait:?}: {e}"),
            }
            wait = (wait * 2).min(VOID_BACKOFF.1);
        }
        tracing::warn!(%request_id, "hold released after a failed write; not charged");
    });
    false
}
