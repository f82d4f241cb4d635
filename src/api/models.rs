//! `GET /v1/models`, `GET /v1/models/{id}` (public; the price list, an OpenRouter-compatible
//! superset of OpenAI's model object) and `GET /health`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::request::ACCEPTED_PARAMETERS;
use super::AppState;
use crate::catalog::{ModelEntry, PricePerMTok};

/// USD per token as an exact decimal string (OpenRouter's `pricing.prompt` form): micro-USD per
/// 1M tokens times 1e-12.
pub fn usd_per_token(p: PricePerMTok) -> String {
    let (whole, frac) = (p.0 / 1_000_000_000_000, p.0 % 1_000_000_000_000);
    let frac = format!("{frac:012}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

/// USD per 1M tokens as an exact decimal string.
pub fn usd_per_million(p: PricePerMTok) -> String {
    let frac = format!("{:06}", p.0 % 1_000_000);
    let frac = frac.trim_end_matches('0');
    let frac = if frac.len() < 2 {
        format!("{frac:0<2}")
    } else {
        frac.to_owned()
    };
    format!("{}.{frac}", p.0 / 1_000_000)
}

fn record(state: &AppState, m: &ModelEntry) -> Value {
    let loaded = state.engine.loaded().iter().any(|l| l.id == m.id);
    let available = loaded || m.local_path(&state.weights_dir).is_some_and(|p| p.exists());
    json!({
        "id": m.id, "object": "model", "created": m.created, "owned_by": m.maker,
        "name": m.name, "family": m.family, "parameters": m.parameters,
        "context_length": m.context_length, "quantization": m.quantization,
        "architecture": {
            "input_modalities": m.input_modalities, "output_modalities": ["text"],
            "tokenizer": m.tokenizer.clone().unwrap_or_else(|| m.family.clone()),
        },
        "pricing": {
            "prompt": usd_per_token(m.pricing.input), "completion": usd_per_token(m.pricing.output),
            "input_per_million_usd": usd_per_million(m.pricing.input),
            "output_per_million_usd": usd_per_million(m.pricing.output),
            "input_micros_per_mtok": m.pricing.input.0, "output_micros_per_mtok": m.pricing.output.0,
            "currency": "USD",
        },
        "license": {"name": m.license, "url": m.license_url, "commercial_use": m.commercial_use},
        "supported_parameters": ACCEPTED_PARAMETERS,
        "languages": state.languages.get(&m.id).and_then(|l| l.languages.as_ref()).map(|langs| {
            langs.iter().map(|(code, c)| (code.clone(), json!(c.multiplier))).collect::<serde_json::Map<_, _>>()
        }),
        "loaded": loaded,
        "available": available,
    })
}

pub async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = state
        .catalog
        .models
        .iter()
        .map(|m| record(&state, m))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let m = state.catalog.get(&id).ok_or(ApiError::ModelNotFound(id))?;
    Ok(Json(record(&state, m)))
}

/// Measured token costs per language for one model: tokens per 1,000 characters and the
/// multiplier relative to English, with the tokenizer's provenance; `languages: null` with a
/// reason when the model's tokenizer could not be obtained.
pub async fn get_languages(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let m = state.catalog.get(&id).ok_or(ApiError::ModelNotFound(id))?;
    Ok(Json(match state.languages.get(&m.id) {
        Some(l) => {
            json!({"model": m.id, "tokenizer": l.tokenizer, "languages": l.languages, "reason": l.reason,
                          "corpus": "Universal Declaration of Human Rights"})
        }
        None => {
            json!({"model": m.id, "tokenizer": null, "languages": null, "reason": "not measured yet"})
        }
    }))
}

/// Liveness plus scheduler counters per loaded model.
pub async fn health(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"status": "ok", "models": state.engine.stats()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_render_exactly() {
        assert_eq!(usd_per_token(PricePerMTok(20_000)), "0.00000002");
        assert_eq!(usd_per_token(PricePerMTok(5_650_000)), "0.00000565");
        assert_eq!(usd_per_token(PricePerMTok(0)), "0");
        assert_eq!(usd_per_million(PricePerMTok(20_000)), "0.02");
        assert_eq!(usd_per_million(PricePerMTok(5_650_000)), "5.65");
        assert_eq!(usd_per_million(PricePerMTok(2_000_000)), "2.00");
        assert_eq!(usd_per_million(PricePerMTok(1_234_567)), "1.234567");
    }
}
