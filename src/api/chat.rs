//! `POST /v1/chat/completions`, metered, streamed (SSE, OpenAI chunk format) and not.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> parse and validate (400/422) ->
//! model (404) -> licence (403) -> template + tokenize (502 if it cannot load) -> context (400) -> idempotency claim
//! (409/422/replay) -> reserve (402) -> generate -> settle. Settlement runs in a detached task
//! fed by the engine's `Outcome`, so it happens even when the client goes away.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::access;
use super::error::ApiError;
use super::request::{self, ChatRequest};
#[allow(unused_imports)]
// ChatCompletionRequest and ErrorBody: named by the OpenAPI attribute.
use super::schema::{
    AssistantMessage, ChatCompletion, ChatCompletionRequest, Choice, ErrorBody, ServiceCost,
    SseEvent, Usage,
};
use super::{AppState, RequestId};
use crate::api::access::Payer;
use crate::billing::{self, Ending, Metered};
use crate::engine::{EngineError, FinishReason, GenerateRequest, GenerationEvent, Outcome, Prompt};
use crate::ledger::{Claim, LedgerError};

const ROUTE: &str = "/v1/chat/completions";

/// Identity of one completion, shared by all its chunks.
pub(super) struct Meta {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) request_id: String,
}

/// The settled result of a generation.
pub(super) struct Settled {
    pub(super) outcome: Outcome,
    pub(super) cost_micros: i64,
}

impl Meta {
    pub(super) fn usage(&self, s: &Settled) -> (Usage, ServiceCost) {
        let o = &s.outcome;
        (
            Usage {
                prompt_tokens: o.prompt_tokens,
                completion_tokens: o.completion_tokens,
                total_tokens: o.prompt_tokens + o.completion_tokens,
            },
            ServiceCost {
                cost_micros: s.cost_micros,
                cost_usd: billing::micros_to_usd(s.cost_micros),
                request_id: self.request_id.clone(),
            },
        )
    }

    pub(super) fn chunk(&self, delta: Value, finish: Option<&str>, include_usage: bool) -> Value {
        let mut c = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    }
}

pub(super) fn finish_str(f: &FinishReason) -> &'static str {
    match f {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// The handler: authentication and rate limiting, then `handle`; every authenticated response
/// carries the `x-ratelimit-*` headers.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "chat",
    request_body(content = ChatCompletionRequest, content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Makes a non-streamed request safe to retry: a retry with the same key and body replays the first answer (and its charge) instead of running again")),
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "The completion (`application/json`), or with `stream: true` server-sent events of `chat.completion.chunk` objects ending with `data: [DONE]`",
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics")),
            content((ChatCompletion = "application/json"), (SseEvent = "text/event-stream"))),
        (status = 400, description = "Malformed JSON, a parameter the service does not implement or the model does not support, an image for a text-only model, a prompt longer than the context, `Idempotency-Key` with `stream: true`; `param` names it", body = ErrorBody),
        (status = 401, description = "API key missing, malformed, unknown or revoked", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`"))),
        (status = 402, description = "Balance too low: `code` `INSUFFICIENT_BALANCE`, `details` with required and available micros and USD", body = ErrorBody),
        (status = 403, description = "The model's licence forbids commercial serving", body = ErrorBody),
        (status = 404, description = "No such model", body = ErrorBody),
        (status = 409, description = "A request with this `Idempotency-Key` is still in flight", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
        (status = 413, description = "Body larger than 4 MiB", body = ErrorBody),
        (status = 422, description = "A field failed validation (`details.errors` lists every one), or `Idempotency-Key` reused with another body", body = ErrorBody),
        (status = 429, description = "Rate limit, or the model's queue is full", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
        (status = 500, description = "Server fault; `error.request_id` names the request", body = ErrorBody),
        (status = 502, description = "The model failed or could not be loaded; nothing is charged", body = ErrorBody),
        (status = 503, description = "No capacity to load the model now", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
    ))]
pub async fn chat_completions(
    State(state): State<AppState>,
    Extension(rid): Extension<RequestId>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let principal = match access::authenticate_payer(&state, &headers).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    // Keys and playground sessions have separate limits (interface.md, Limits 1).
    let checked = match principal {
        Payer::Key(k) => state.limits.check(k.key_id),
        Payer::Session(s) => state.session_limits.check(s.account_id),
    };
    let rate = match checked {
        Ok(info) => info,
        Err((info, e)) => {
            let mut r = e.into_response();
            info.apply(r.headers_mut());
            return r;
        }
    };
    let mut resp = handle(state, rid, principal, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    rate.apply(resp.headers_mut());
    resp
}

/// `Idempotency-Key`: 1-255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest {
        param: Some("Idempotency-Key".into()),
        code: "invalid_idempotency_key",
        message: "The Idempotency-Key header must be 1 to 255 visible ASCII characters.".into(),
    };
    let s = v.to_str().map_err(|_| bad())?;
    if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(s.to_owned()))
}

/// SHA-256 of the canonical JSON body (object keys sorted, no whitespace).
fn fingerprint(body: &[u8]) -> Vec<u8> {
    let canonical = serde_json::from_slice::<Value>(body)
        .map_or_else(|_| body.to_vec(), |v| v.to_string().into_bytes());
    use sha2::Digest;
    sha2::Sha256::digest(&canonical).to_vec()
}

fn ledger_err(e: LedgerError) -> ApiError {
    match e {
        LedgerError::InsufficientBalance {
            required,
            available,
        } => ApiError::InsufficientBalance {
            required,
            available,
        },
        other => ApiError::Internal(other.to_string()),
    }
}

/// Forgets an idempotency claim unless disarmed (the request was not executed).
struct ClaimGuard {
    state: AppState,
    account: i64,
    key: Option<String>,
}

impl ClaimGuard {
    fn disarm(&mut self) -> Option<String> {
        self.key.take()
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let (ledger, account) = (self.state.ledger.clone(), self.account);
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(async move {
                    ledger
                        .run(move |l| l.abandon_idempotency(account, ROUTE, &key))
                        .await
                });
            }
        }
    }
}

async fn handle(
    state: AppState,
    rid: RequestId,
    principal: Payer,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let body = body.map_err(|_| ApiError::TooLarge)?;
    if let Some(ct) = headers.get(axum::http::header::CONTENT_TYPE) {
        if !ct
            .to_str()
            .unwrap_or("")
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("application/json")
        {
            return Err(ApiError::BadRequest {
                param: None,
                code: "unsupported_content_type",
                message: "Content-Type must be application/json.".into(),
            });
        }
    }
    let req = request::parse(&body)?;
    let idem = idempotency_key(&headers)?;
    if req.stream && idem.is_some() {
        return Err(ApiError::BadRequest {
            param: Some("stream".into()),
            code: "idempotency_key_with_stream",
            message: "The Idempotency-Key header cannot be combined with `stream: true`.".into(),
        });
    }
    let entry = state
        .catalog
        .get(&req.model)
        .ok_or_else(|| ApiError::ModelNotFound(req.model.clone()))?
        .clone();
    if req.n != 1 {
        return Err(ApiError::BadRequest {
            param: Some("n".into()),
            code: "unsupported_value",
            message: "Only `n: 1` is supported.".into(),
        });
    }
    if let (Some(img), false) = (req.images.first(), entry.reads_images()) {
        return Err(ApiError::BadRequest {
            param: Some(format!("messages[{}].content[{}]", img.message, img.part)),
            code: "image_not_supported",
            message: format!("The model `{}` does not read images.", req.model),
        });
    }
    // The licence is checked before the prompt is tokenized: tokenizing needs the model loaded,
    // and a model we may not serve is never loaded or fetched.
    if !entry.commercial_use {
        return Err(ApiError::NotLicensed(req.model.clone()));
    }
    let prompt = prepare(&state, &req).await?;
    let max_new = context_check(&prompt, req.max_tokens)?;
    let account = principal.account_id();
    let mut guard = ClaimGuard {
        state: state.clone(),
        account,
        key: None,
    };
    if let Some(key) = idem.clone() {
        let (fp, rid_s) = (fingerprint(&body), rid.0.clone());
        match state
            .ledger
            .run(move |l| l.claim_idempotency(account, ROUTE, &key, &fp, &rid_s))
            .await
            .map_err(ledger_err)?
        {
            Claim::New => guard.key = idem.clone(),
            Claim::Mismatch => return Err(ApiError::IdempotencyMismatch),
            Claim::InFlight { age_s } => {
                let estimate = u64::try_from(max_new / 50)
                    .unwrap_or(120)
                    .saturating_sub(u64::try_from(age_s).unwrap_or(0));
                return Err(ApiError::IdempotencyInFlight {
                    retry_after_s: estimate.clamp(1, 120),
                });
            }
            Claim::Replay(rec) => return Ok(replay(rec.status, rec.body)),
        }
    }
    let metered = Metered {
        request_id: rid.0.clone(),
        account_id: account,
        key_id: principal.key_id(),
        model: req.model.clone(),
        pricing: entry.pricing,
        started,
    };
    let hold = billing::hold_micros(&entry.pricing, prompt.token_ids.len(), max_new);
    let gen_req = GenerateRequest {
        request_id: rid.0.clone(),
        prompt,
        sampling: req.sampling.clone(),
        max_new_tokens: max_new,
        stop: req.stop.clone(),
    };
    // Reserve, submit and start settlement in a task of its own: if the client goes away
    // meanwhile, the task still finishes, and dropping its result cancels the generation, whose
    // settlement then closes the hold. No hold is left behind by a dropped handler.
    let admitted = tokio::spawn(admit(state.clone(), metered, hold, gen_req))
        .await
        .unwrap_or_else(|e| Err(ApiError::Internal(format!("admission task: {e}"))));
    let (events, settled) = match admitted {
        Ok(a) => a,
        Err(e) => {
            // Not executed (402, 429, engine fault): forget the claim before answering, so an
            // immediate retry with the same key runs again.
            if let Some(key) = guard.disarm() {
                let _ = state
                    .ledger
                    .run(move |l| l.abandon_idempotency(account, ROUTE, &key))
                    .await;
            }
            return Err(e);
        }
    };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let meta = Meta {
        id: format!("chatcmpl-{}", super::random_id(24)),
        created,
        model: req.model.clone(),
        request_id: rid.0.clone(),
    };
    if req.stream {
        return Ok(super::sse::stream_response(meta, &req, events, settled).into_response());
    }
    let idem_key = guard.disarm();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(complete(
        state, meta, account, idem_key, events, settled, tx,
    ));
    rx.await
        .map_err(|_| ApiError::Internal("completion task ended without a result".into()))?
}

type Admitted = (
    mpsc::UnboundedReceiver<GenerationEvent>,
    oneshot::Receiver<Result<Settled, ApiError>>,
);

/// Reserve the hold (402 when the balance is short), submit to the engine (releasing the hold
/// if the queue is full), and start the settlement task.
async fn admit(
    state: AppState,
    metered: Metered,
    hold: i64,
    gen_req: GenerateRequest,
) -> Result<Admitted, ApiError> {
    let (rid, account) = (metered.request_id.clone(), metered.account_id);
    state
        .ledger
        .run(move |l| l.reserve(&rid, account, hold))
        .await
        .map_err(ledger_err)?;
    let prompt_tokens = gen_req.prompt.token_ids.len();
    match state.engine.submit(gen_req) {
        Ok(g) => Ok((
            g.events,
            spawn_settle(state.ledger.clone(), metered, prompt_tokens, g.outcome),
        )),
        Err(e) => {
            let m = metered.clone();
            let _ = state
                .ledger
                .run(move |l| billing::close(l, &m, prompt_tokens, 0, Ending::Failed))
                .await;
            Err(match e {
                EngineError::Overloaded => ApiError::Overloaded(metered.model.clone()),
                other => ApiError::EngineFailed(other.to_string()),
            })
        }
    }
}

async fn prepare(state: &AppState, req: &ChatRequest) -> Result<Prompt, ApiError> {
    let engine = state.engine.clone();
    let (model, messages) = (req.model.clone(), req.messages.clone());
    tokio::task::spawn_blocking(move || engine.prepare(&model, &messages))
        .await
        .map_err(|e| ApiError::Internal(format!("prepare task: {e}")))?
        .map_err(|e| match e {
            EngineError::ModelNotLoaded(m) => ApiError::ModelUnavailable(format!(
                "The model `{m}` is in the catalogue but not loaded on this server."
            )),
            EngineError::Template(t) => ApiError::BadRequest {
                param: Some("messages".into()),
                code: "invalid_messages",
                message: format!(
                    "The messages cannot be rendered with the model's chat template: {t}"
                ),
            },
            e @ (EngineError::Unavailable { .. } | EngineError::Load { .. }) => {
                ApiError::ModelUnavailable(e.to_string())
            }
            e @ EngineError::NoRoom { .. } => ApiError::NoCapacity(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        })
}

fn replay(status: u16, body: String) -> Response {
    let request_id = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["service"]["request_id"].as_str().map(str::to_owned));
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    r.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    if let Some(v) = request_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        r.headers_mut().insert("x-request-id", v);
    }
    r
}

/// Tokens the request may generate: its limit, else the rest of the context.
fn context_check(
    prompt: &Prompt,
    max_tokens: Option<(usize, &'static str)>,
) -> Result<usize, ApiError> {
    let (n, ctx) = (prompt.token_ids.len(), prompt.context_length);
    let exceeded = |param: &str, asked: usize| {
        ApiError::BadRequest {
        param: Some(param.into()),
        code: "context_length_exceeded",
        message: format!("This model's maximum context length is {ctx} tokens. However, you requested {} tokens ({n} in the messages, {asked} in the completion). Please reduce the length of the messages or completion.", n + asked),
    }
    };
    match max_tokens {
        Some((m, param)) if n + m > ctx => Err(exceeded(param, m)),
        Some((m, _)) => Ok(m),
        None if n >= ctx => Err(exceeded("messages", 1)),
        None => Ok(ctx - n),
    }
}

/// Wait for the engine's outcome, then settle (or release) the hold; runs even if the client
/// is gone. An outcome that never arrives (engine thread panicked) is a failure: released.
fn spawn_settle(
    ledger: Arc<crate::ledger::Ledger>,
    m: Metered,
    prompt_tokens: usize,
    outcome: oneshot::Receiver<Outcome>,
) -> oneshot::Receiver<Result<Settled, ApiError>> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let outcome = outcome.await.unwrap_or(Outcome {
            prompt_tokens,
            completion_tokens: 0,
            finish: FinishReason::Failed("engine dropped the request".into()),
        });
        let ending = match &outcome.finish {
            FinishReason::Failed(_) => Ending::Failed,
            FinishReason::Cancelled => Ending::Cancelled,
            FinishReason::Stop | FinishReason::Length => Ending::Completed,
        };
        let (p, c) = (outcome.prompt_tokens, outcome.completion_tokens);
        let m2 = m.clone();
        let charged = ledger
            .run(move |l| billing::close(l, &m2, p, c, ending))
            .await;
        let result = match (charged, &outcome.finish) {
            (_, FinishReason::Failed(msg)) => Err(ApiError::EngineFailed(msg.clone())),
            (Ok(cost_micros), _) => Ok(Settled {
                outcome,
                cost_micros,
            }),
            (Err(e), _) => Err(ApiError::Internal(format!("settle failed: {e}"))),
        };
        tracing::info!(request_id = %m.request_id, model = %m.model, prompt_tokens = p, completion_tokens = c,
            ms = m.started.elapsed().as_millis() as u64, ending = ?ending, "chat completion settled");
        let _ = tx.send(result);
    });
    rx
}

/// Non-stream completion, detached from the handler: collects the text, waits for settlement,
/// stores the idempotent outcome, and answers through `reply`. Without an Idempotency-Key a
/// client that goes away cancels the generation; with one, generation finishes so that a retry
/// can replay the result.
async fn complete(
    state: AppState,
    meta: Meta,
    account: i64,
    idem_key: Option<String>,
    mut events: mpsc::UnboundedReceiver<GenerationEvent>,
    settled: oneshot::Receiver<Result<Settled, ApiError>>,
    mut reply: oneshot::Sender<Result<Response, ApiError>>,
) {
    let mut text = String::new();
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(GenerationEvent::Delta(d)) => text.push_str(&d),
                Some(GenerationEvent::Started) => {}
                None => break,
            },
            () = reply.closed(), if idem_key.is_none() => break,
        }
    }
    drop(events);
    let result = match settled.await {
        Ok(Ok(s)) => {
            let (usage, service) = meta.usage(&s);
            let body = json!(ChatCompletion {
                id: meta.id.clone(),
                object: "chat.completion",
                created: meta.created,
                model: meta.model.clone(),
                system_fingerprint: None,
                choices: vec![Choice {
                    index: 0,
                    message: AssistantMessage {
                        role: "assistant",
                        content: std::mem::take(&mut text),
                        refusal: None,
                    },
                    logprobs: None,
                    finish_reason: finish_str(&s.outcome.finish),
                }],
                usage,
                service,
            })
            .to_string();
            if let Some(key) = idem_key.clone() {
                let b = body.clone();
                if let Err(e) = state
                    .ledger
                    .run(move |l| l.complete_idempotency(account, ROUTE, &key, 200, &b))
                    .await
                {
                    tracing::error!(request_id = %meta.request_id, "failed to store idempotent outcome: {e}");
                }
            }
            Ok((
                StatusCode::OK,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response())
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ApiError::Internal(
            "settlement task ended without a result".into(),
        )),
    };
    if result.is_err() {
        if let Some(key) = idem_key {
            let _ = state
                .ledger
                .run(move |l| l.abandon_idempotency(account, ROUTE, &key))
                .await;
        }
    }
    let _ = reply.send(result);
}
