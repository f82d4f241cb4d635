//! The text generation request that chat completions and the Responses API share: once the
//! endpoint has parsed its body into a `ChatRequest` and named its `Idempotency-Key`, the
//! model is checked (catalogue, licence, weights), images are refused for a text-only model,
//! a request with images has its fewest prompt tokens checked against the context and the
//! balance before any image is read or fetched, the prompt is rendered and tokenized (images by
//! their headers only: pixels are decoded after the hold), the completion's token budget is
//! fitted to the context, and the `PaidRequest` for `metering` is built. Only the field names
//! in errors differ between the surfaces (`Surface`).
//! May use: `paid`, `call`, `request`, `images`, `error`, `state`, `engine`, `metering`.

use super::call::Caller;
use super::codes::Code;
use super::error::{ApiError, Remedy};
use super::images;
use super::paid;
use super::request::{self, ChatRequest, ImagePart};
use super::state::AppState;
use crate::engine::{GenerateRequest, OutputSyntax};
use crate::metering::{Idempotency, PaidRequest};

/// Which API a text request came through: the names its errors give the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `POST /v1/chat/completions`: `messages[i].content[j]`, `messages`, `max_tokens`.
    Chat,
    /// `POST /v1/responses`: `input[i]`, `input`, `max_output_tokens`.
    Responses,
    /// `POST /v1/completions`: `prompt`, `max_tokens`.
    Completions,
}

impl Surface {
    /// The `param` of an image part the model cannot read.
    fn image_param(self, img: &ImagePart) -> String {
        match self {
            Self::Chat => format!("messages[{}].content[{}]", img.message, img.part),
            Self::Responses => format!("input[{}]", img.message),
            Self::Completions => "prompt".into(),
        }
    }

    /// What the 402 of a request with output limit `max_tokens` (the field used, if any) tells
    /// the client to change, in this surface's field names.
    pub fn remedy(self, max_tokens: Option<(usize, &'static str)>) -> Remedy {
        match (self, max_tokens) {
            (Self::Chat, Some((_, field))) => Remedy::FewerTokens(field),
            (Self::Responses, Some(_)) => Remedy::FewerTokens("max_output_tokens"),
            (Self::Completions, Some(_)) => Remedy::FewerTokens("max_tokens"),
            (Self::Chat, None) => Remedy::ShorterPrompt("messages"),
            (Self::Responses, None) => Remedy::ShorterPrompt("input"),
            (Self::Completions, None) => Remedy::ShorterPrompt("prompt"),
        }
    }

    /// An error naming `messages`, `max_tokens` (for `context_length_exceeded`) or
    /// `reasoning_effort` in this surface's field names (other errors pass).
    pub fn in_its_terms(self, e: ApiError) -> ApiError {
        match (self, e) {
            (
                Self::Responses | Self::Completions,
                ApiError::BadRequest {
                    param,
                    code,
                    message,
                },
            ) if param.as_deref() == Some("messages") && code != Code::ContextLengthExceeded => {
                let field = if self == Self::Responses {
                    "input"
                } else {
                    "prompt"
                };
                ApiError::BadRequest {
                    param: Some(field.into()),
                    code,
                    message,
                }
            }
            (
                Self::Responses,
                ApiError::BadRequest {
                    param,
                    code,
                    message,
                },
            ) if param.as_deref() == Some("reasoning_effort") => ApiError::BadRequest {
                param: Some("reasoning.effort".into()),
                code,
                message: message.replace("`reasoning_effort`", "`reasoning.effort`"),
            },
            (
                Self::Responses,
                ApiError::BadRequest {
                    param,
                    code: Code::ContextLengthExceeded,
                    message,
                },
            ) => ApiError::BadRequest {
                param: param.map(|p| {
                    if p == "messages" {
                        "input"
                    } else {
                        "max_output_tokens"
                    }
                    .to_owned()
                }),
                code: Code::ContextLengthExceeded,
                message,
            },
            (
                Self::Completions,
                ApiError::BadRequest {
                    param,
                    code: Code::ContextLengthExceeded,
                    message,
                },
            ) => ApiError::BadRequest {
                param: param.map(|p| if p == "messages" { "prompt".into() } else { p }),
                code: Code::ContextLengthExceeded,
                message: message.replace("your messages", "your prompt"),
            },
            (_, other) => other,
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
    surface: Surface,
) -> Result<(PaidRequest, OutputSyntax), ApiError> {
    let entry = paid::servable_model(state, &chat.model).await?;
    if let (Some(img), false) = (chat.images.first(), entry.reads_images()) {
        return Err(ApiError::BadRequest {
            param: Some(surface.image_param(img)),
            code: Code::ImageNotSupported,
            message: format!("The model `{}` does not read images.", chat.model),
        });
    }
    let image_params: Vec<String> = chat.images.iter().map(|i| surface.image_param(i)).collect();
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
    let param = |i: &ImagePart| surface.image_param(i);
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
    surface: Surface,
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
