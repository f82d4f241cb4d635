//! `POST /v1/chat/completions`, metered, streamed (SSE, OpenAI chunk format) and not.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> body and parse (400/413/422) ->
//! `Idempotency-Key` (400) -> model (404) -> licence (403) -> template + tokenize (502 if it
//! cannot load) -> context (400) -> `metering` (claim 409/422/replay, hold 402, engine 429/502,
//! settle). The money lifecycle lives in `metering`; this file only extracts, admits and
//! responds.

mod doc;
mod sse;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

#[allow(unused_imports)] // Named by the OpenAPI attribute.
use self::doc::ChatCompletionRequest;
use crate::api::shared::call::PaidCall;
use crate::api::shared::completion::CompletionMeta;
use crate::api::shared::error::ApiError;
use crate::api::shared::request;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ChatCompletion, ErrorBody, PaidErrors, SseEvent};
use crate::api::shared::state::AppState;
use crate::api::shared::text::{self, Surface};
use crate::engine::ChoiceEvents;
use crate::metering::{Render, Settlement};

const ROUTE: &str = "/v1/chat/completions";

/// Chat's own field names: those the parsed request already speaks.
const SURFACE: Surface = Surface {
    prompt: "messages",
    max_tokens: None,
    reasoning_effort: "reasoning_effort",
    prompt_words: "your messages",
    image_param: |img| format!("messages[{}].content[{}]", img.message, img.part),
};

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
    let remedy = SURFACE.remedy(req.max_tokens);
    let (paid_request, syntax) =
        text::paid_request(state, &call.caller, req, n, idempotency, &SURFACE).await?;
    let mut meta = CompletionMeta::new(&model, &call.caller.request_id.0, syntax);
    meta.logprobs = logprobs;
    meta.legacy_functions = legacy_functions;
    let reply = Streamed(meta, include_usage);
    text::respond(state, paid_request, stream, remedy, reply).await
}

/// A chat completion's SSE: `chat.completion.chunk`s, with usage last when asked for.
struct Streamed(CompletionMeta, bool);

impl text::Reply for Streamed {
    fn render(&self) -> Render {
        let meta = self.0.clone();
        Box::new(move |charge, text| meta.completion(charge, text))
    }

    fn stream(self, events: ChoiceEvents, settlement: Settlement) -> Response {
        self::sse::stream_response(self.0, self.1, events, settlement).into_response()
    }
}
