//! `POST /v1/completions`: OpenAI's legacy text completions, which code-completion clients
//! (fill-in-the-middle with `prompt` + `suffix`) and older tools call. Metered, streamed and
//! not, through the same paid pipeline as chat completions (`text::paid_request`, `metering`);
//! the prompt is run as raw text, without the chat template.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> body and parse (400/413/422) ->
//! `Idempotency-Key` (400) -> model (404/403) -> tokenize (400 `suffix` without FIM tokens) ->
//! context (400, `prompt`) -> `metering` (hold 402, engine 429/502, settle).

mod sse;
mod wire;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use self::wire::TextMeta;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use self::wire::{TextChoice, TextCompletion, TextLogprobs};
use crate::api::shared::call::PaidCall;
use crate::api::shared::error::ApiError;
use crate::api::shared::paid;
use crate::api::shared::request::completions;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{CompletionRequestDoc, ErrorBody, PaidErrors, SseEvent};
use crate::api::shared::state::AppState;
use crate::api::shared::text::{self, Surface};
use crate::metering::{Admission, Mode};

const ROUTE: &str = "/v1/completions";

/// The handler: the payer and its rate limit, then `handle`.
#[utoipa::path(post, path = "/v1/completions", tag = "completions",
    request_body(content = CompletionRequestDoc, content_type = "application/json"),
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Makes a non-streamed request safe to retry: a retry with the same key and body replays the first answer (and its charge) instead of running again")),
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "The completion (`application/json`), or with `stream: true` server-sent events of `text_completion` chunks ending with `data: [DONE]`",
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics")),
            content((TextCompletion = "application/json"), (SseEvent = "text/event-stream"))),
        PaidErrors,
    ))]
pub async fn completions(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call)).await
}

/// Extract and check the request, admit it through metering, respond.
async fn handle(state: &AppState, mut call: PaidCall) -> Result<Response, ApiError> {
    let body = call.json(state).await?;
    let req = completions::parse(&body)?;
    let chat = req.chat;
    let idempotency = call.idempotency(&body, chat.stream, ROUTE)?;
    let (stream, include_usage) = (chat.stream, chat.include_usage);
    let logprobs = chat.sampling.logprobs.is_some();
    let (model, n) = (chat.model.clone(), chat.n);
    let remedy = Surface::Completions.remedy(chat.max_tokens);
    let (paid_request, _) = text::paid_request(
        state,
        &call.caller,
        chat,
        n,
        idempotency,
        Surface::Completions,
    )
    .await?;
    let meta = TextMeta::new(
        &model,
        &call.caller.request_id.0,
        req.echo.then_some(req.prompt),
        logprobs,
    );
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
                sse::stream_response(meta, include_usage, events, settlement).into_response()
            }
            Admission::Completing(completion) => paid::stored(completion.wait().await?.1, false),
        },
    )
}
