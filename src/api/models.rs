//! `GET /v1/models`, `GET /v1/models/{id}` (public; the price list) and `GET /health`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use crate::catalog::ModelEntry;

fn record(m: &ModelEntry, loaded: bool) -> Value {
    json!({
        "id": m.id, "object": "model", "created": m.created, "owned_by": m.maker,
        "name": m.name, "family": m.family, "parameters": m.parameters,
        "context_length": m.context_length, "quantization": m.quantization,
        "input_modalities": m.input_modalities,
        "license": m.license, "license_url": m.license_url, "commercial_use": m.commercial_use,
        "pricing": {
            "currency": "USD", "unit": "1M tokens",
            "input": m.pricing.input.usd(), "output": m.pricing.output.usd(),
            "input_micros_per_mtok": m.pricing.input.0, "output_micros_per_mtok": m.pricing.output.0,
        },
        "loaded": loaded,
    })
}

fn is_loaded(state: &AppState, id: &str) -> bool {
    state.engine.loaded().iter().any(|l| l.id == id)
}

pub async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = state
        .catalog
        .models
        .iter()
        .map(|m| record(m, is_loaded(&state, &m.id)))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let m = state.catalog.get(&id).ok_or(ApiError::ModelNotFound(id))?;
    Ok(Json(record(m, is_loaded(&state, &m.id))))
}

/// Liveness plus scheduler counters per loaded model.
pub async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"status": "ok", "models": state.engine.stats()}))
}
