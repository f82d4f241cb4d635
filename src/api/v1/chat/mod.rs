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
use crate::api::shared::schema::{
    ChatCompletion, ChatCompletionRequest, ErrorBody, PaidErrors, SseEvent,
};
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
        PaidErrors,
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
    let legacy_functions = req.legacy_functions;
    let (model, n) = (req.model.clone(), req.n);
    let remedy = Surface::Chat.remedy(req.max_tokens);
    let (paid_request, syntax) =
        text::paid_request(state, &call.caller, req, n, idempotency, Surface::Chat).await?;
    let mut meta = CompletionMeta::new(&model, &call.caller.request_id.0, syntax);
    meta.logprobs = logprobs;
    meta.legacy_functions = legacy_functions;
    let mode = if stream {
        Mode::Stream
    } else {
        let meta = meta.clone();
        Mode::Complete(Box::new(move |charge, text| meta.completion(charge, text)))
    };
    let admitted = state.paid.meter.admit(paid_request, mode).await;
    Ok(
        match admitted.map_err(|e| ApiError::from(e).with_remedy(remedy))? {
            Admission::Replay(stored) => paid::stored(stored, true),
            Admission::Streaming(events, settlement) => {
                self::sse::stream_response(meta, include_usage, events, settlement).into_response()
            }
            Admission::Completing(completion) => paid::stored(completion.wait().await?.1, false),
        },
    )
}
