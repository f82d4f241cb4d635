//! The text generation request that chat completions and the Responses API share: once the
//! endpoint has parsed its body into a `ChatRequest` and named its `Idempotency-Key`, the
//! model is checked (catalogue, licence, weights), images are refused for a text-only model,
//! a request with images has its fewest prompt tokens checked against the context and the
//! balance before any image is read or fetched, the prompt is rendered and tokenized (images by
//! their headers only: pixels are decoded after the hold), the completion's token budget is
//! fitted to the context, and the `PaidRequest` for `metering` is built. Only the field names
//! in errors differ between the endpoints: each passes its own (`Surface`). Once admitted,
//! every text endpoint answers through `respond`: a replay, its stream, or its whole answer.
//! May use: `paid`, `call`, `request`, `images`, `error`, `state`, `engine`, `metering`.

use std::future::Future;

use axum::response::Response;

use super::call::Caller;
use super::codes::Code;
use super::error::{ApiError, Remedy};
use super::images;
use super::paid;
use super::request::{self, ChatRequest, ImagePart};
use super::state::AppState;
use crate::engine::{ChoiceEvents, GenerateRequest, OutputSyntax};
use crate::metering::{
    Admission, Idempotency, Mode, PaidRequest, Render, Settlement, StoredResponse,
};

/// A text endpoint's field names, as its errors give them: each endpoint that generates text
/// through `paid_request` names its own (`SURFACE` in its unit), so the pipeline knows no
/// endpoint. The parsed `ChatRequest` speaks chat's names (`messages`, `max_tokens`,
/// `reasoning_effort`); these say what an endpoint calls them.
#[derive(Debug, Clone, Copy)]
pub struct Surface {
    /// The field that holds the prompt: `messages`, `input`, `prompt`.
    pub prompt: &'static str,
    /// The output limit's name when it is always the same (`max_output_tokens`); `None`: the
    /// name the request itself used (chat's `max_tokens` or `max_completion_tokens`).
    pub max_tokens: Option<&'static str>,
    /// `reasoning_effort`'s name (`reasoning.effort` in the Responses API).
    pub reasoning_effort: &'static str,
    /// The words that stand for the prompt in a `context_length_exceeded` message, in place
    /// of chat's "your messages".
    pub prompt_words: &'static str,
    /// The `param` of an image part the model cannot read: `messages[i].content[j]`,
    /// `input[i]`, `prompt`.
    pub image_param: fn(&ImagePart) -> String,
}

impl Surface {
    /// What the 402 of a request with output limit `max_tokens` (the field used, if any) tells
    /// the client to change, in this surface's field names.
    pub fn remedy(&self, max_tokens: Option<(usize, &'static str)>) -> Remedy {
        match max_tokens {
            Some((_, field)) => Remedy::FewerTokens(self.max_tokens.unwrap_or(field)),
            None => Remedy::ShorterPrompt(self.prompt),
        }
    }

    /// An error naming `messages`, `max_tokens` (for `context_length_exceeded`) or
    /// `reasoning_effort` in this surface's field names (other errors pass).
    pub fn in_its_terms(&self, e: ApiError) -> ApiError {
        let ApiError::BadRequest {
            param,
            code,
            message,
        } = e
        else {
            return e;
        };
        let rename = |field: &str| format!("`{field}`");
        let (param, message) = match param.as_deref() {
            Some("reasoning_effort") => (
                Some(self.reasoning_effort.to_owned()),
                message.replace(&rename("reasoning_effort"), &rename(self.reasoning_effort)),
            ),
            _ if code == Code::ContextLengthExceeded => (
                param.map(|p| match (p.as_str(), self.max_tokens) {
                    ("messages", _) => self.prompt.to_owned(),
                    (_, Some(limit)) => limit.to_owned(),
                    (_, None) => p,
                }),
                message.replace("your messages", self.prompt_words),
            ),
            Some("messages") => (Some(self.prompt.to_owned()), message),
            _ => (param, message),
        };
        ApiError::BadRequest {
            param,
            code,
            message,
        }
    }
}

/// `chat` made ready for metering: the paid request, and how to read its text back (tool
/// calls, thinking). `n` is the choices to generate.
///
/// # Errors
/// 404 `model_not_found` / `model_not_available`, 403 `model_license_forbids_commercial_use`,
/// 400 `image_not_supported`, the errors of `images::input_images` and `paid::prepare`, 400
/// `context_length_exceeded`
/// (in `surface`'s field names).
pub async fn paid_request(
    state: &AppState,
    caller: &Caller,
    chat: ChatRequest,
    n: usize,
    idempotency: Option<Idempotency>,
    surface: &Surface,
) -> Result<(PaidRequest, OutputSyntax), ApiError> {
    let entry = paid::servable_model(state, &chat.model).await?;
    if let (Some(img), false) = (chat.images.first(), entry.reads_images()) {
        return Err(ApiError::BadRequest {
            param: Some((surface.image_param)(img)),
            code: Code::ImageNotSupported,
            message: format!("The model `{}` does not read images.", chat.model),
        });
    }
    let image_params: Vec<String> = chat
        .images
        .iter()
        .map(|i| (surface.image_param)(i))
        .collect();
    let urls = state.models.image_urls;
    if !chat.images.is_empty() {
        before_images(
            state,
            caller,
            &chat,
            n,
            (&entry.pricing, &image_params),
            surface,
        )
        .await?;
    }
    let mut chat = chat;
    let param = |i: &ImagePart| (surface.image_param)(i);
    let remote = images::Remote {
        urls,
        slots: &state.models.image_fetches,
        payer: payer_name(caller),
    };
    chat.input.images = images::input_images(&chat.images, &param, &remote).await?;
    let prompt = paid::prepare(state, &chat.model, &chat.input, &image_params)
        .await
        .map_err(|e| surface.in_its_terms(e))?;
    if let Some(vocab) = prompt.vocab_size {
        request::sampling::check_logit_bias(&chat.sampling.logit_bias, vocab)?;
    }
    let max_new_tokens =
        paid::max_new_tokens(&prompt, chat.max_tokens).map_err(|e| surface.in_its_terms(e))?;
    let syntax = prompt.output_syntax();
    let request_id = caller.request_id.0.clone();
    let request = PaidRequest {
        request_id: request_id.clone(),
        account: caller.payer.account_id(),
        key: caller.payer.key_id(),
        model: chat.model,
        pricing: entry.pricing,
        generate: GenerateRequest {
            request_id,
            tenant: crate::engine::Tenant {
                account: caller.payer.account_id(),
                key: caller.payer.key_id(),
            },
            prompt,
            sampling: chat.sampling,
            max_new_tokens,
            stop: chat.stop,
            n,
        },
        idempotency,
        started: caller.started,
        fit_to_balance: chat.max_tokens.is_none(),
        image_labels: image_params,
    };
    Ok((request, syntax))
}

/// The checks of a request with images, before any is read or fetched: its prompt's fewest
/// tokens (each image at its family's cheapest, `Engine::prompt_floor`) must leave room in
/// the context for its output, and the payer must cover them and the output the hold will
/// need (all of `max_tokens`, or one token per choice without it). So a key that cannot pay
/// gets its 402 before an image's header is read or a URL fetched.
///
/// # Errors
/// 400 `context_length_exceeded`, 402, and `paid::prompt_floor`'s errors.
async fn before_images(
    state: &AppState,
    caller: &Caller,
    chat: &ChatRequest,
    n: usize,
    (pricing, image_params): (&crate::catalog::Pricing, &[String]),
    surface: &Surface,
) -> Result<(), ApiError> {
    let mut input = chat.input.clone();
    input.images = chat
        .images
        .iter()
        .map(|_| crate::engine::InputImage {
            bytes: std::sync::Arc::from(Vec::new()),
        })
        .collect();
    let (floor, context) = paid::prompt_floor(state, &chat.model, &input, image_params)
        .await
        .map_err(|e| surface.in_its_terms(e))?;
    paid::output_room(floor, context, chat.max_tokens).map_err(|e| surface.in_its_terms(e))?;
    let choices = n.max(1);
    let output = chat
        .max_tokens
        .map_or(choices, |(m, _)| m.saturating_mul(choices));
    let payer = (caller.payer.account_id(), caller.payer.key_id());
    state
        .paid
        .meter
        .precheck(payer, pricing, floor, output)
        .await
        .map_err(|e| ApiError::from(e).with_remedy(surface.remedy(chat.max_tokens)))
}

/// The payer's name for its fetch places: its key, or its account on the session path.
fn payer_name(caller: &Caller) -> String {
    match caller.payer.key_id() {
        Some(k) => format!("key {k}"),
        None => format!("account {}", caller.payer.account_id()),
    }
}

/// How a text endpoint answers a request metering admitted, streamed or whole (a replay is
/// sent as stored, by `respond`).
pub trait Reply: Send + Sized {
    /// How metering renders the whole answer from the settled charge and the choices' text
    /// (`Mode::Complete`); not called for a streamed request.
    fn render(&self) -> Render;

    /// The streamed answer: every choice's events in the endpoint's SSE format, then the
    /// settlement's charge (or its error).
    fn stream(self, events: ChoiceEvents, settlement: Settlement) -> Response;

    /// The whole answer once it is charged: by default the stored response as it is (the
    /// Responses API saves it first).
    fn whole(self, stored: StoredResponse) -> impl Future<Output = Response> + Send {
        async move { paid::stored(stored, false) }
    }
}

/// The one path after a text request is paid for: metering admits `request`, streamed when
/// `stream` and otherwise whole as `reply` renders it (its refusals carry `remedy`, the field
/// to change in the endpoint's names), and the admission is answered: a replay of the stored
/// response, or `reply`'s stream or whole answer.
///
/// # Errors
/// Metering's refusals (402 with `remedy`, 409/422 for `Idempotency-Key`, 429/502 from the
/// engine) and a whole answer's failed settlement.
pub async fn respond(
    state: &AppState,
    request: PaidRequest,
    stream: bool,
    remedy: Remedy,
    reply: impl Reply,
) -> Result<Response, ApiError> {
    let mode = if stream {
        Mode::Stream
    } else {
        Mode::Complete(reply.render())
    };
    let admitted = state.paid.meter.admit(request, mode).await;
    Ok(
        match admitted.map_err(|e| ApiError::from(e).with_remedy(remedy))? {
            Admission::Replay(stored) => paid::stored(stored, true),
            Admission::Streaming(events, settlement) => reply.stream(events, settlement),
            Admission::Completing(completion) => reply.whole(completion.wait().await?.1).await,
        },
    )
}
