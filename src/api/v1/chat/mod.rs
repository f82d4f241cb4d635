//! `POST /v1/chat/completions`, metered, streamed (SSE, OpenAI chunk format) and not.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> body and parse (400/413/422) ->
//! `Idempotency-Key` (400) -> model (404) -> licence (403) -> template + tokenize (502 if it
//! cannot load) -> context (400) -> `metering` (claim 409/422/replay, hold 402, engine 429/502,
//! settle). The money lifecycle lives in `metering`; this file only extracts, admits and
//! responds.

mod sse;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::api::shared::call::PaidCall;
use crate::api::shared::completion::CompletionMeta;
use crate::api::shared::error::ApiError;
use crate::api::shared::paid;
use crate::api::shared::request;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ChatCompletion, ChatCompletionRequest, ErrorBody, SseEvent};
use crate::api::shared::state::AppState;
use crate::api::shared::text::{self, Surface};
use crate::metering::{Admission, Mode};

const ROUTE: &str = "/v1/chat/completions";

/// The handler: the payer and its rate limit, then `handle`; every authenticated response
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
        (status = 402, description = "Balance too low (`code` `INSUFFICIENT_BALANCE`, `details` with required and available micros and USD), or the key's spend limit reached (`KEY_SPEND_LIMIT`, `details` with limit, used and required micros)", body = ErrorBody),
        (status = 403, description = "The model's licence forbids commercial serving", body = ErrorBody),
        (status = 404, description = "No such model (`model_not_found`), or no weights for it on this server (`model_not_available`, with `x-should-retry: false`)", body = ErrorBody),
        (status = 409, description = "A request with this `Idempotency-Key` is still in flight", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
        (status = 413, description = "Body larger than 4 MiB", body = ErrorBody),
        (status = 422, description = "A field failed validation (`details.errors` lists every one), or `Idempotency-Key` reused with another body", body = ErrorBody),
        (status = 429, description = "Rate limit, or the model's queue is full", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
        (status = 500, description = "Server fault; `error.request_id` names the request", body = ErrorBody),
        (status = 502, description = "The model failed or could not be loaded; nothing is charged", body = ErrorBody),
        (status = 503, description = "No capacity to load the model now (`model_capacity`), too many connections (`too_many_connections`), or the ledger cannot record the request (`ledger_unavailable`; nothing is charged)", body = ErrorBody,
            headers(("Retry-After" = String, description = "Seconds"))),
    ))]
pub async fn chat_completions(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call)).await
}

/// Extract and check the request, admit it through metering, respond.
async fn handle(state: &AppState, mut call: PaidCall) -> Result<Response, ApiError> {
    let body = call.json(state).await?;
    request::size::check(&body, "messages", &state.http)?;
    let req = request::parse(&body)?;
    let idempotency = call.idempotency(&body, req.stream, ROUTE)?;
    let (stream, include_usage) = (req.stream, req.include_usage);
    let logprobs = req.sampling.logprobs.is_some();
    let (model, n) = (req.model.clone(), req.n);
    let (paid_request, tool_syntax) =
        text::paid_request(state, &call.caller, req, n, idempotency, Surface::Chat).await?;
    let mut meta = CompletionMeta::new(&model, &call.caller.request_id.0, tool_syntax);
    meta.logprobs = logprobs;
    let mode = if stream {
        Mode::Stream
    } else {
        let meta = meta.clone();
        Mode::Complete(Box::new(move |charge, text| meta.completion(charge, text)))
    };
    Ok(match state.paid.meter.admit(paid_request, mode).await? {
        Admission::Replay(stored) => paid::stored(stored, true),
        Admission::Streaming(events, settlement) => {
            self::sse::stream_response(meta, include_usage, events, settlement).into_response()
        }
        Admission::Completing(completion) => paid::stored(completion.wait().await?.1, false),
    })
}
