//! OpenAI's Responses API: `POST /v1/responses` (metered like chat completions, streamed as
//! typed events or whole), `GET /v1/responses/{id}` and `DELETE /v1/responses/{id}` of a
//! stored response.
//!
//! Order of `POST`: request id -> auth (401) -> rate limit (429) -> body (400/413/422, `param`s
//! in Responses names; `item_reference` inputs replaced by the stored items they name, 404
//! `item_not_found` otherwise) -> `previous_response_id` (404 if this account has no such stored
//! response; its conversation is prepended and billed as input) -> `Idempotency-Key` (400) ->
//! model (404/403) -> template + tokenize -> context (400) -> `metering` (the same money
//! lifecycle as chat completions: hold, settle, charge) -> `store` (kept 30 days, before the
//! response is sent). Another account's response id is a 404, never a 403: ids do not leak.

mod doc;
mod items;
mod object;
mod output;
mod references;
pub mod request;
mod sse;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use serde_json::Value;

use self::doc::DeletedResponse;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use self::doc::ResponsesRequestDoc;
use self::object::{ResponseMeta, ResponseObject};
use self::output::{output_as_chat, Outputs};
use self::request::ResponsesRequest;
use self::sse::Save;
use crate::accounts::SavedResponse;
use crate::api::shared::call::PaidCall;
use crate::api::shared::codes::Code;
use crate::api::shared::error::ApiError;
use crate::api::shared::paid;
#[allow(unused_imports)] // Named by the OpenAPI attributes.
use crate::api::shared::schema::{ErrorBody, SseEvent};
use crate::api::shared::state::AppState;
use crate::api::shared::text::{self, Surface};
use crate::engine::{ChoiceEvents, FinishReason};
use crate::ids::AccountId;
use crate::metering::{Render, Settlement, StoredResponse};

const ROUTE: &str = "/v1/responses";

/// The Responses API's field names; an image's `param` is its input item.
const SURFACE: Surface = Surface {
    prompt: "input",
    max_tokens: Some("max_output_tokens"),
    reasoning_effort: "reasoning.effort",
    prompt_words: "your messages",
    image_param: |img| format!("input[{}]", img.message),
};

/// `POST /v1/responses`.
#[utoipa::path(post, path = "/v1/responses", tag = "responses",
    request_body(content = ResponsesRequestDoc, content_type = "application/json"),
    security(("bearer" = []), ("session" = [])),
    responses(
        (status = 200, description = "The `response` object, or with `stream: true` server-sent events (`response.created` ... `response.completed`)",
            content((ResponseObject = "application/json"), (SseEvent = "text/event-stream"))),
        (status = 400, description = "A parameter, built-in tool, `include` value or input item the service does not implement; a prompt longer than the context", body = ErrorBody),
        (status = 401, description = "API key missing, malformed, unknown or revoked", body = ErrorBody),
        (status = 402, description = "Balance too low (`INSUFFICIENT_BALANCE`) or the key's spend limit reached (`KEY_SPEND_LIMIT`)", body = ErrorBody),
        (status = 403, description = "The model's licence forbids commercial serving", body = ErrorBody),
        (status = 404, description = "No such model, no weights for it here, or no such stored `previous_response_id`", body = ErrorBody),
        (status = 413, description = "Body larger than 4 MiB", body = ErrorBody),
        (status = 422, description = "A field failed validation", body = ErrorBody),
        (status = 429, description = "Rate limit, or the model's queue is full", body = ErrorBody),
        (status = 500, description = "Server fault", body = ErrorBody),
        (status = 502, description = "The model failed; nothing is charged", body = ErrorBody),
        (status = 503, description = "No capacity to load the model now (`model_capacity`), too many connections (`too_many_connections`), or the ledger cannot record the request (`ledger_unavailable`; nothing is charged); `Retry-After`", body = ErrorBody),
    ))]
pub async fn create(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call)).await
}

/// `GET /v1/responses/{id}`: a response this account stored.
#[utoipa::path(get, path = "/v1/responses/{id}", tag = "responses",
    params(("id" = String, Path, description = "`resp_...`")),
    security(("bearer" = []), ("session" = [])),
    responses((status = 200, description = "The stored response", body = ResponseObject),
              (status = 401, description = "API key missing or invalid", body = ErrorBody),
              (status = 404, description = "No such response for this account (or expired)", body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    call: PaidCall,
) -> Response {
    let (st, id) = (&state, &id);
    call.answer(|call| async move {
        let s = stored(st, id, call.caller.payer.account_id(), None).await?;
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            s.body,
        )
            .into_response())
    })
    .await
}

/// `DELETE /v1/responses/{id}`: forget a stored response.
#[utoipa::path(delete, path = "/v1/responses/{id}", tag = "responses",
    params(("id" = String, Path, description = "`resp_...`")),
    security(("bearer" = []), ("session" = [])),
    responses((status = 200, description = "Deleted", body = DeletedResponse),
              (status = 401, description = "API key missing or invalid", body = ErrorBody),
              (status = 404, description = "No such response for this account", body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    call: PaidCall,
) -> Response {
    let st = &state;
    call.answer(|call| async move {
        let deleted = (st.accounts.service)
            .delete_response(id.clone(), call.caller.payer.account_id())
            .await?;
        if !deleted {
            return Err(ApiError::ResponseNotFound { id, param: None });
        }
        Ok(axum::Json(DeletedResponse {
            id,
            object: "response",
            deleted: true,
        })
        .into_response())
    })
    .await
}

/// The stored response `id` of `account`.
async fn stored(
    state: &AppState,
    id: &str,
    account: AccountId,
    param: Option<&'static str>,
) -> Result<SavedResponse, ApiError> {
    (state.accounts.service)
        .saved_response(id.to_owned(), account)
        .await?
        .ok_or_else(|| ApiError::ResponseNotFound {
            id: id.to_owned(),
            param,
        })
}

/// Extract and check the request, admit it through metering, respond (and store).
async fn handle(state: &AppState, mut call: PaidCall) -> Result<Response, ApiError> {
    let body = call.json(state).await?;
    crate::api::shared::request::size::check(&body, "input", &state.http)?;
    let account = call.caller.payer.account_id();
    let resolved = references::resolve(state, body.clone(), account).await?;
    let draft = request::read(&resolved)?;
    let previous = match &draft.echo.previous_response_id {
        Some(id) => {
            let s = stored(state, id, account, Some("previous_response_id")).await?;
            serde_json::from_str::<Vec<Value>>(&s.conversation)
                .map_err(|e| ApiError::Internal(format!("stored conversation: {e}")))?
        }
        None => Vec::new(),
    };
    let req = draft.finish(previous.clone())?;
    if req.chat.input.messages.len() > state.http.max_messages {
        return Err(ApiError::BadRequest {
            param: Some("previous_response_id".into()),
            code: Code::TooManyMessages,
            message: format!(
                "With the conversation of `previous_response_id`, this request has more than {} messages; start a new conversation.",
                state.http.max_messages
            ),
        });
    }
    let stream = req.chat.stream;
    let idempotency = call.idempotency(&body, stream, ROUTE)?;
    let ResponsesRequest {
        chat,
        input_messages,
        echo,
    } = req;
    let (model, temperature, top_p) = (
        chat.model.clone(),
        chat.sampling.temperature,
        chat.sampling.top_p,
    );
    let store = echo.store;
    let remedy = SURFACE.remedy(chat.max_tokens);
    // A response has one output; the Responses API has no `n`.
    let (paid_request, syntax) =
        text::paid_request(state, &call.caller, chat, 1, idempotency, &SURFACE).await?;
    let meta = ResponseMeta::new(
        &model,
        &call.caller.request_id.0,
        syntax,
        echo,
        temperature,
        top_p,
    );
    let mut conversation = previous;
    conversation.extend(input_messages);
    let saver = store.then(|| saver(state, account, conversation));
    text::respond(state, paid_request, stream, remedy, Answer { meta, saver }).await
}

/// A response's answer: typed SSE events, or the whole object; either is saved when `store`.
struct Answer {
    meta: ResponseMeta,
    saver: Option<Save>,
}

impl text::Reply for Answer {
    /// The response object rendered from the text once it is charged.
    fn render(&self) -> Render {
        let meta = self.meta.clone();
        Box::new(move |charge, choices| {
            let generated = choices.into_iter().next().unwrap_or_default();
            let mut outputs = Outputs::new(&meta.id, &meta.syntax);
            outputs.push_logprobs(generated.logprobs);
            let _ = outputs.push(&generated.text);
            let (_, items) = outputs.finish(charge.finish == FinishReason::Length);
            StoredResponse {
                status: 200,
                body: serde_json::to_string(&meta.object(items, Some(charge))).unwrap_or_default(),
            }
        })
    }

    fn stream(self, events: ChoiceEvents, settlement: Settlement) -> Response {
        sse::stream_response(self.meta, events, settlement, self.saver).into_response()
    }

    async fn whole(self, response: StoredResponse) -> Response {
        if let Some(save) = self.saver {
            save(response.body.clone()).await;
        }
        paid::stored(response, false)
    }
}

/// Saves a finished response of `account` with the conversation it ends (`conversation` plus
/// its output as an assistant message). A failed save is logged; the answer is still sent
/// (it was charged), and a later `previous_response_id` naming it gets a 404.
fn saver(state: &AppState, account: AccountId, conversation: Vec<Value>) -> Save {
    let service = state.accounts.service.clone();
    Box::new(move |body: String| {
        async move {
            let object: Value = serde_json::from_str(&body).unwrap_or_default();
            let id = object["id"].as_str().unwrap_or_default().to_owned();
            let output = object["output"].as_array().cloned().unwrap_or_default();
            let mut conversation = conversation;
            conversation.extend(output_as_chat(&output));
            let saved = SavedResponse {
                body,
                conversation: Value::Array(conversation).to_string(),
            };
            if let Err(e) = service.save_response(id.clone(), account, saved).await {
                tracing::error!(response = %id, error = %e, "could not store the response");
            }
        }
        .boxed()
    })
}
