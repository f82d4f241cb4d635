//! `POST /v1/embeddings`: texts (or token ids) turned into unit-length vectors by an embedding
//! model, billed per input token through `metering`.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> JSON body (400/422) -> model (404,
//! 403, 400 `model_not_supported` for a chat or speech model) -> `dimensions` (400
//! `unsupported_value` unless the model offers it) -> weights present (404
//! `model_not_available`) -> `prompt_name` (400 `unsupported_value`) -> tokenize (400 naming
//! `input[i]`: empty, a token id outside the vocabulary, more tokens than the model reads;
//! 400 `input_too_long` over `MAX_REQUEST_TOKENS` in all) -> `Idempotency-Key` -> `metering`
//! (claim, hold of the exact cost 402, the forward on the `Embedder`, settle). Nothing is
//! truncated: an input longer than the model reads is refused, never cut.

pub mod request;
mod wire;

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use self::request::{EmbeddingsRequest, EncodingFormat};
use self::wire::{Embedding, EmbeddingList, EmbeddingUsage, Vector};
use crate::api::shared::call::PaidCall;
use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, Remedy};
use crate::api::shared::paid;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ErrorBody, PaidErrors, ServiceCost};
use crate::api::shared::state::AppState;
use crate::billing::Units;
use crate::catalog::embedding::EmbeddingModelEntry;
use crate::engine::{truncate_embedding, EmbedError, EmbedInput, EmbeddingEncoder};
use crate::metering::{StoredResponse, UnitsAdmission};
use crate::money::Micros;

/// Most tokens in one request, all inputs together (about 10 s of MiniLM's work on two cores;
/// OpenAI's limit is 300,000). More is 400 `input_too_long`.
pub const MAX_REQUEST_TOKENS: usize = 65_536;

/// `POST /v1/embeddings`.
#[utoipa::path(post, path = "/v1/embeddings", tag = "embeddings",
    request_body(content_type = "application/json", description = "`model`, `input` (a string, an array of up to 2048 strings, an array of token ids, or an array of token-id arrays; at most 65,536 tokens in all), optional `encoding_format` (`float` default, `base64`), `dimensions` (one of the model's `dimensions`), `user`, and tollgate's `prompt_name` (a task prompt of the model, e.g. EmbeddingGemma's `query` or `document`)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "One unit-length vector per input, with `usage` and the `service` cost", body = EmbeddingList,
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics"))),
        PaidErrors,
    ))]
pub async fn create(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call)).await
}

async fn handle(state: &AppState, call: PaidCall) -> Result<Response, ApiError> {
    let mut call = call;
    let body = call.json(state).await?;
    let req = request::parse(&body)?;
    let entry = paid::embedding_model(state, &req.model)?;
    let dimensions = dimensions(&entry, req.dimensions)?;
    let model = load(state, &entry).await?;
    let rows = tokenize(&entry, &model, &req).await?;
    let count: usize = rows.iter().map(Vec::len).sum();
    let idempotency = call.idempotency(&body, false, "/v1/embeddings")?;
    let units = Units::InputTokens {
        count: count as u64,
        per_million: entry.pricing.input,
    };
    let (request_id, format, id) = (
        call.caller.request_id.0.clone(),
        req.encoding_format,
        entry.id.clone(),
    );
    let render = move |cost: Micros, vectors: Vec<Vec<f32>>| {
        render(&id, &request_id, cost, vectors, dimensions, format, count)
    };
    let rx = state.models.embedder.submit(model, rows);
    let work = async move {
        rx.await
            .unwrap_or_else(|_| Err(EmbedError::Forward("the embedding worker stopped".into())))
    };
    // About 2 ms a token on two cores for the larger model, at least a second.
    let estimate_s = count as u64 / 500 + 1;
    let req = call
        .caller
        .paid_units(&entry.id, units, idempotency, estimate_s);
    match state
        .paid
        .meter
        .run_units(req, work, render)
        .await
        .map_err(|e| ApiError::from(e).with_remedy(Remedy::ShorterPrompt("input")))?
    {
        UnitsAdmission::Replay(stored) => Ok(paid::stored(stored, true)),
        UnitsAdmission::Done(_, stored) => Ok(paid::stored(stored, false)),
        UnitsAdmission::Failed(e) => Err(ApiError::from_embed(&entry.id, e, false)),
    }
}

/// The vector length to answer with: `asked` if the model offers it, else its own.
///
/// # Errors
/// 400 `unsupported_value` (`param: dimensions`) for a length the model does not offer.
fn dimensions(entry: &EmbeddingModelEntry, asked: Option<usize>) -> Result<usize, ApiError> {
    match asked {
        None => Ok(entry.native_dimensions()),
        Some(d) if entry.dimensions.contains(&d) => Ok(d),
        Some(d) => {
            let offered: Vec<String> = entry.dimensions.iter().map(usize::to_string).collect();
            Err(ApiError::bad(
                "dimensions",
                Code::UnsupportedValue,
                format!(
                    "`{}` makes vectors of {} dimensions, not {d}.",
                    entry.id,
                    offered.join(", "),
                ),
            ))
        }
    }
}

/// The loaded model of `entry`, loading it on first use (off the async threads).
///
/// # Errors
/// 404 `model_not_available` without weights; 503 `model_unavailable` when they fail to load.
async fn load(
    state: &AppState,
    entry: &EmbeddingModelEntry,
) -> Result<Arc<dyn EmbeddingEncoder>, ApiError> {
    let dir = state.models.weights_dir.join(&entry.path);
    if let Err(reason) = state.models.embedder.available(&dir) {
        tracing::info!(model = %entry.id, dir = %dir.display(), "embedding model not servable here: {reason}");
        return Err(ApiError::ModelNotAvailable {
            model: entry.id.clone(),
            hint: format!("an operator can fetch them with `{}`", entry.fetch),
        });
    }
    let embedder = state.models.embedder.clone();
    tokio::task::spawn_blocking(move || embedder.model(&dir))
        .await
        .map_err(|e| ApiError::Internal(format!("embedding load task: {e}")))?
        .map_err(|e| ApiError::from_embed(&entry.id, e, false))
}

/// The token-id rows of the request's inputs, with the prompt it names (off the async threads:
/// a 4 MB body takes a few hundred milliseconds to tokenize).
///
/// # Errors
/// 400 `unsupported_value` for an unknown `prompt_name` or one with token-id inputs; the
/// model's refusals (`ApiError::from_embed`).
async fn tokenize(
    entry: &EmbeddingModelEntry,
    model: &Arc<dyn EmbeddingEncoder>,
    req: &EmbeddingsRequest,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let prompt = match req.prompt_name.as_deref() {
        None => None,
        Some(name) => Some(prompt(entry, model.as_ref(), &req.input, name)?),
    };
    let (m, inputs) = (model.clone(), req.input.clone());
    let single = matches!(inputs.as_slice(), [EmbedInput::Text(_)]);
    tokio::task::spawn_blocking(move || {
        m.tokenize_within(&inputs, prompt.as_deref(), MAX_REQUEST_TOKENS)
    })
    .await
    .map_err(|_| ApiError::Internal("the tokenize task stopped unexpectedly".into()))?
    .map_err(|e| ApiError::from_embed(&entry.id, e, single))
}

/// The text of the task prompt `name`.
///
/// # Errors
/// 400 `unsupported_value` (`param: prompt_name`).
fn prompt(
    entry: &EmbeddingModelEntry,
    model: &dyn EmbeddingEncoder,
    input: &[EmbedInput],
    name: &str,
) -> Result<String, ApiError> {
    let bad = |message: String| ApiError::bad("prompt_name", Code::UnsupportedValue, message);
    if input.iter().any(|i| matches!(i, EmbedInput::Tokens(_))) {
        return Err(bad(
            "`prompt_name` applies to text inputs; token-id inputs carry their own prompt.".into(),
        ));
    }
    match model.prompts().get(name) {
        Some(p) => Ok(p.clone()),
        None if model.prompts().is_empty() => {
            Err(bad(format!("`{}` has no task prompts.", entry.id)))
        }
        None => {
            let names: Vec<&str> = model.prompts().keys().map(String::as_str).collect();
            Err(bad(format!(
                "`{}` has no prompt `{name}`; it has {}.",
                entry.id,
                names.join(", ")
            )))
        }
    }
}

/// The response body of a finished request (what an `Idempotency-Key` replays).
fn render(
    model: &str,
    request_id: &str,
    cost: Micros,
    vectors: Vec<Vec<f32>>,
    dimensions: usize,
    format: EncodingFormat,
    tokens: usize,
) -> StoredResponse {
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            object: "embedding",
            index,
            embedding: Vector::of(truncate_embedding(v, dimensions), format),
        })
        .collect();
    let list = EmbeddingList {
        object: "list",
        data,
        model: model.to_owned(),
        usage: EmbeddingUsage {
            prompt_tokens: tokens as u64,
            total_tokens: tokens as u64,
        },
        service: ServiceCost {
            cost_micros: cost,
            cost_usd: cost.usd(),
            request_id: request_id.to_owned(),
        },
    };
    StoredResponse {
        status: 200,
        body: serde_json::to_string(&list).unwrap_or_default(),
    }
}
