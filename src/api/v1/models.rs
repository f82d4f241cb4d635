//! `GET /v1/models`, `GET /v1/models/{id}` (public; the price list, an OpenRouter-compatible
//! superset of OpenAI's model object) and `GET /health`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::api::shared::error::ApiError;
use crate::api::shared::request::SUPPORTED_PARAMETERS;
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::shared::schema::ErrorBody;
use crate::api::shared::state::Models;
use crate::catalog::audio::{AudioKind, AudioModelEntry};
use crate::catalog::embedding::EmbeddingModelEntry;
use crate::catalog::record::{
    AudioModelRecord, EmbeddingModelRecord, ListedModel, ModelList, ModelRecord,
};
use crate::catalog::ModelEntry;

/// The model record of `m` (its `loaded` and `available` as of now). Blocking the first time
/// the hub is probed (`engine::hub`), so handlers call it off the async threads.
pub(super) fn record(state: &Models, m: &ModelEntry) -> ModelRecord {
    let loaded = state.engine.loaded().iter().any(|l| l.id == m.id);
    let available = if loaded {
        Ok(())
    } else {
        crate::engine::availability(m, &state.weights_dir).map_err(|(short, _)| short)
    };
    let languages = state.languages.get(&m.id).and_then(|l| l.multipliers());
    let mut record = ModelRecord::of(m, &SUPPORTED_PARAMETERS, languages, loaded, available);
    record.preparing = state
        .engine
        .preparing()
        .into_iter()
        .find(|p| p.model == m.id)
        .map(Box::new);
    record
}

/// The record of speech model `m`, with whether it can run here now.
pub(super) fn audio_record(state: &Models, m: &AudioModelEntry) -> AudioModelRecord {
    let path = state.weights_dir.join(&m.path);
    let available = match m.kind {
        AudioKind::Transcription => state.speech.transcription_available(&path),
        AudioKind::Speech => state.speech.speech_available(&state.weights_dir, &path),
    };
    AudioModelRecord::of(m, available)
}

/// The record of embedding model `m`, with whether its weights are here.
pub(super) fn embedding_record(state: &Models, m: &EmbeddingModelEntry) -> EmbeddingModelRecord {
    let available = state.embedder.available(&state.weights_dir.join(&m.path));
    EmbeddingModelRecord::of(m, available)
}

/// `GET /v1/models`: every catalogue model, servable here or not: chat models, then speech
/// models, then embedding models (the entries with a `kind`).
#[utoipa::path(get, path = "/v1/models", tag = "models",
    responses((status = 200, description = "The price list: every model in the catalogue", body = ModelList),
              (status = 429, description = "Too many requests from this address (`--public-rpm`)", body = ErrorBody,
                  headers(("Retry-After" = String, description = "Seconds")))))]
pub async fn list_models(State(state): State<Models>) -> Result<Json<ModelList>, ApiError> {
    let data = tokio::task::spawn_blocking(move || {
        state
            .catalog
            .models
            .iter()
            .map(|m| ListedModel::Chat(record(&state, m)))
            .chain(
                state
                    .catalog
                    .audio
                    .iter()
                    .map(|m| ListedModel::Audio(audio_record(&state, m))),
            )
            .chain(
                state
                    .catalog
                    .embedding
                    .iter()
                    .map(|m| ListedModel::Embedding(embedding_record(&state, m))),
            )
            .collect()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("model list task: {e}")))?;
    Ok(Json(ModelList {
        object: "list",
        data,
    }))
}

/// `GET /v1/models/{id}`: one model.
///
/// # Errors
/// 404 `model_not_found`.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, description = "The model (a chat model, or a speech or embedding model with `kind`)", body = ListedModel),
              (status = 404, description = "No such model", body = ErrorBody),
              (status = 429, description = "Too many requests from this address (`--public-rpm`)", body = ErrorBody,
                  headers(("Retry-After" = String, description = "Seconds")))))]
pub async fn get_model(
    State(state): State<Models>,
    Path(id): Path<String>,
) -> Result<Json<ListedModel>, ApiError> {
    if let Some(a) = state.catalog.audio_model(&id) {
        return Ok(Json(ListedModel::Audio(audio_record(&state, a))));
    }
    if let Some(e) = state.catalog.embedding_model(&id) {
        return Ok(Json(ListedModel::Embedding(embedding_record(&state, e))));
    }
    let m = state
        .catalog
        .get(&id)
        .ok_or(ApiError::ModelNotFound(id))?
        .clone();
    tokio::task::spawn_blocking(move || Json(ListedModel::Chat(record(&state, &m))))
        .await
        .map_err(|e| ApiError::Internal(format!("model record task: {e}")))
}

/// Measured token costs per language for one model: tokens per 1,000 characters and the
/// multiplier relative to English, with the tokenizer's provenance; `languages: null` with a
/// reason when the model's tokenizer could not be obtained.
///
/// # Errors
/// 404 `model_not_found`.
#[utoipa::path(get, path = "/v1/models/{id}/languages", tag = "models",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, description = "Measured per-language token costs", body = LanguageCosts),
              (status = 404, description = "No such model", body = ErrorBody),
              (status = 429, description = "Too many requests from this address (`--public-rpm`)", body = ErrorBody,
                  headers(("Retry-After" = String, description = "Seconds")))))]
pub async fn get_languages(
    State(state): State<Models>,
    Path(id): Path<String>,
) -> Result<Json<LanguageCosts>, ApiError> {
    let m = state.catalog.get(&id).ok_or(ApiError::ModelNotFound(id))?;
    Ok(Json(language_costs(&state, m)))
}

/// The language costs of `m` (shared with the MCP server).
pub(super) fn language_costs(state: &Models, m: &ModelEntry) -> LanguageCosts {
    match state.languages.get(&m.id) {
        Some(l) => LanguageCosts {
            model: m.id.clone(),
            tokenizer: l.tokenizer.clone(),
            languages: l.languages.as_ref().map(|x| json!(x)),
            reason: l.reason.clone(),
            corpus: Some("Universal Declaration of Human Rights"),
        },
        None => LanguageCosts {
            model: m.id.clone(),
            tokenizer: None,
            languages: None,
            reason: Some("not measured yet".into()),
            corpus: None,
        },
    }
}

/// The body of `GET /health`.
#[derive(Debug, serde::Serialize)]
pub struct Health {
    /// Always `ok` (the process answers).
    pub status: &'static str,
    /// Scheduler counters per loaded model.
    pub models: Vec<crate::engine::ModelStats>,
    /// Models being fetched or loaded now, with their progress.
    pub preparing: Vec<crate::catalog::record::Preparation>,
}

/// Liveness, scheduler counters per loaded model, and the models being prepared.
pub async fn health(State(state): State<Models>) -> Json<Health> {
    Json(Health {
        status: "ok",
        models: state.engine.stats(),
        preparing: state.engine.preparing(),
    })
}

/// `GET /v1/models/{id}/languages`: measured token costs per language.
#[derive(Debug, Serialize, ToSchema)]
pub struct LanguageCosts {
    pub model: String,
    /// Where the tokenizer came from, when measured.
    pub tokenizer: Option<String>,
    /// Per language code: tokens per 1,000 characters and the multiplier vs English.
    #[schema(value_type = Option<Object>)]
    pub languages: Option<Value>,
    /// Why `languages` is null, or notes on the measurement.
    pub reason: Option<String>,
    /// The text measured on.
    pub corpus: Option<&'static str>,
}
