//! `POST /v1/completions`: OpenAI's legacy text completions, which code-completion clients
//! (fill-in-the-middle with `prompt` + `suffix`) and older tools call. Metered, streamed and
//! not, through the same paid pipeline as chat completions (`text::paid_request`, `metering`);
//! the prompt is run as raw text, without the chat template.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> body and parse (400/413/422) ->
//! `Idempotency-Key` (400) -> model (404/403) -> tokenize (400 `suffix` without FIM tokens) ->
//! context (400, `prompt`) -> `metering` (hold 402, engine 429/502, settle).

mod doc;
pub mod request;
mod sse;
mod wire;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

#[allow(unused_imports)] // Named by the OpenAPI attribute.
use self::doc::CompletionRequestDoc;
use self::wire::TextMeta;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use self::wire::{TextChoice, TextCompletion, TextLogprobs};
use crate::api::shared::call::PaidCall;
use crate::api::shared::error::ApiError;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ErrorBody, PaidErrors, SseEvent};
use crate::api::shared::state::AppState;
use crate::api::shared::text::{self, Surface};
use crate::engine::ChoiceEvents;
use crate::metering::{Render, Settlement};

const ROUTE: &str = "/v1/completions";

/// The legacy API's field names: the prompt is `prompt`, its images (none are accepted) too.
const SURFACE: Surface = Surface {
    prompt: "prompt",
    max_tokens: None,
    reasoning_effort: "reasoning_effort",
    prompt_words: "your prompt",
    image_param: |_| "prompt".into(),
};

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
    let req = request::parse(&body)?;
    let chat = req.chat;
    let idempotency = call.idempotency(&body, chat.stream, ROUTE)?;
    let (stream, include_usage) = (chat.stream, chat.include_usage);
    let logprobs = chat.sampling.logprobs.is_some();
    let (model, n) = (chat.model.clone(), chat.n);
    let remedy = SURFACE.remedy(chat.max_tokens);
    let (paid_request, _) =
        text::paid_request(state, &call.caller, chat, n, idempotency, &SURFACE).await?;
    let meta = TextMeta::new(
        &model,
        &call.caller.request_id.0,
        req.echo.then_some(req.prompt),
        logprobs,
    );
    let reply = Streamed(meta, include_usage);
    text::respond(state, paid_request, stream, remedy, reply).await
}

/// A text completion's SSE: `text_completion` chunks, with usage last when asked for.
struct Streamed(TextMeta, bool);

impl text::Reply for Streamed {
    fn render(&self) -> Render {
        let meta = self.0.clone();
        Box::new(move |charge, text| meta.completion(charge, text))
    }

    fn stream(self, events: ChoiceEvents, settlement: Settlement) -> Response {
        sse::stream_response(self.0, self.1, events, settlement).into_response()
    }
}
