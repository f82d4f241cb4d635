//! `POST /v1/audio/speech`: text spoken by a Piper voice, billed per input character through
//! `metering`.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> JSON body (400/422) -> model (404,
//! 403, 400 for a transcription model) -> voice (400 `unsupported_voice`) -> format (400
//! `unsupported_response_format` for opus and aac) -> something to speak (400
//! `no_speakable_text`) -> weights present (404 `model_not_available`) -> `Idempotency-Key` ->
//! `metering` (claim, hold of the exact cost 402, synthesis, settle; a synthesis refused for
//! its length, 400 `input_too_long`, voids the hold). The audio comes back whole (no streaming), with
//! `x-tollgate-cost-micros` and `x-request-id`.

mod request;

use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::State;
use axum::response::Response;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::api::shared::call::PaidCall;
use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, Remedy};
use crate::api::shared::paid;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ErrorBody, PaidErrors};
use crate::api::shared::state::AppState;
use crate::audio::encode::Container;
use crate::audio::{AudioError, SpeechJob};
use crate::billing::Units;
use crate::catalog::audio::{AudioKind, AudioModelEntry};
use crate::metering::StoredResponse;
use crate::metering::UnitsAdmission;

/// OpenAI's voice names: each is an alias of the model's first voice (we have one voice per
/// model; the names keep existing code working).
pub const OPENAI_VOICES: [&str; 13] = [
    "alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage",
    "shimmer", "verse",
];

/// A finished synthesis as stored for an idempotent replay.
#[derive(Serialize, Deserialize)]
struct Stored {
    content_type: String,
    cost_micros: i64,
    request_id: String,
    /// The audio, base64.
    audio: String,
}

/// `POST /v1/audio/speech`.
#[utoipa::path(post, path = "/v1/audio/speech", tag = "audio",
    request_body(content_type = "application/json", description = "`model`, `input` (1-4096 characters), `voice` (`joe`, or any OpenAI voice name as its alias), optional `response_format` (`mp3` default, `flac`, `wav`, `pcm`; `opus` and `aac` get 400), `speed` (0.25-4.0)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The audio (`audio/mpeg`, `audio/flac`, `audio/wav` or `audio/pcm`); `x-tollgate-cost-micros` has its price",
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics"))),
        PaidErrors,
    ))]
pub async fn create(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call)).await
}

/// Refuses a `voice` that is neither one of `entry`'s voices nor an OpenAI alias of them.
fn check_voice(entry: &AudioModelEntry, voice: &str) -> Result<(), ApiError> {
    if entry.voices.iter().any(|v| v == voice) || OPENAI_VOICES.contains(&voice) {
        return Ok(());
    }
    Err(ApiError::bad("voice", Code::UnsupportedVoice, format!(
        "`{voice}` is not a voice of `{}`; use {} or an OpenAI voice name ({}), which are its aliases.",
        entry.id, entry.voices.join(", "), OPENAI_VOICES.join(", "))))
}

/// The response for a stored synthesis.
fn respond(stored: StoredResponse, replayed: bool) -> Response {
    let Ok(s) = serde_json::from_str::<Stored>(&stored.body) else {
        return paid::stored(stored, replayed);
    };
    let audio = base64::engine::general_purpose::STANDARD
        .decode(s.audio)
        .unwrap_or_default();
    paid::priced_body(
        audio,
        &s.content_type,
        s.cost_micros,
        &s.request_id,
        replayed,
    )
}

async fn handle(state: &AppState, mut call: PaidCall) -> Result<Response, ApiError> {
    let body = call.json(state).await?;
    let req = request::parse(&body)?;
    let entry = paid::audio_model(state, &req.model, AudioKind::Speech)?;
    // One voice per model for now, so the voice only needs checking, not choosing.
    check_voice(&entry, &req.voice)?;
    if !req.response_format.supported() {
        return Err(ApiError::bad(
            "response_format",
            Code::UnsupportedResponseFormat,
            format!(
                "This server has no {:?} encoder; use mp3, flac, wav or pcm.",
                req.response_format
            ),
        ));
    }
    // Text with nothing to speak (emoji, symbols) is refused before money moves; the voice
    // also refuses phonemes it has no ids for (`AudioError::NoSpeech`, after the hold, voided).
    if !state.models.speech.has_speech(&req.input) {
        return Err(ApiError::from_audio(&entry.id, AudioError::NoSpeech));
    }
    let weights = &state.models.weights_dir;
    let voice_path = weights.join(&entry.path);
    let runtime = weights.join(crate::audio::piper::RUNTIME_LIBRARY);
    if let Err(reason) = state.models.speech.speech_available(weights, &voice_path) {
        tracing::info!(model = %entry.id, voice = %voice_path.display(), "speech model not servable here: {reason}");
        return Err(if reason.starts_with("espeak") {
            ApiError::ModelUnavailable {
                model: entry.id.clone(),
                detail: format!("{reason} (apt install espeak-ng)"),
            }
        } else {
            ApiError::ModelNotAvailable {
                model: entry.id.clone(),
                hint: format!("an operator can fetch them with `{}`", entry.fetch),
            }
        });
    }
    let idempotency = call.idempotency(&body, false, "/v1/audio/speech")?;
    let characters = req.input.chars().count() as u64;
    let units = Units::Characters {
        count: characters,
        per_million: entry.pricing.per_million_characters,
    };
    let container: Container = req.response_format;
    let job = SpeechJob {
        runtime,
        voice: voice_path,
        text: req.input,
        speed: req.speed,
        container,
    };
    let speech_worker = state.models.speech.clone();
    let work = async move {
        speech_worker
            .synthesize(job)
            .await
            .unwrap_or_else(|_| Err(AudioError::Inference("the speech worker stopped".into())))
    };
    // The audio reaches the answer through `made`; the stored body (base64, 4/3 of the audio)
    // is built only when an `Idempotency-Key` will keep it for a replay.
    let made = Arc::new(Mutex::new(None::<Vec<u8>>));
    let caller = call.caller;
    let (request_id, keyed, slot) = (
        caller.request_id.0.clone(),
        idempotency.is_some(),
        made.clone(),
    );
    let render = move |cost: crate::money::Micros, audio: Vec<u8>| {
        let body = keyed.then(|| {
            serde_json::to_string(&Stored {
                content_type: container.content_type().to_owned(),
                cost_micros: cost.0,
                request_id,
                audio: base64::engine::general_purpose::STANDARD.encode(&audio),
            })
            .unwrap_or_default()
        });
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(audio);
        StoredResponse {
            status: 200,
            body: body.unwrap_or_default(),
        }
    };
    let req = caller.paid_units(&entry.id, units, idempotency, characters / 100 + 5);
    Ok(
        match state
            .paid
            .meter
            .run_units(req, work, render)
            .await
            .map_err(|e| ApiError::from(e).with_remedy(Remedy::ShorterInput))?
        {
            UnitsAdmission::Replay(stored) => respond(stored, true),
            UnitsAdmission::Done(cost, _) => {
                let audio = made.lock().unwrap_or_else(PoisonError::into_inner).take();
                paid::priced_body(
                    audio.unwrap_or_default(),
                    container.content_type(),
                    cost.0,
                    "",
                    false,
                )
            }
            UnitsAdmission::Failed(e) => return Err(ApiError::from_audio(&entry.id, e)),
        },
    )
}
