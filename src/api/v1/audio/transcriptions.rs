//! `POST /v1/audio/transcriptions` and `POST /v1/audio/translations`: multipart uploads
//! transcribed by a Whisper model, billed per second of decoded audio through `metering`.
//!
//! Order: request id -> auth (401) -> rate limit (429) -> multipart fields (400; a file over
//! 25 MB is 413 `file_too_large`) -> model (404/403/400 for a model of another kind) ->
//! `Idempotency-Key` (fingerprint of the fields and the file's bytes, so a retry with another
//! multipart boundary still matches) -> the `prompt` (400 `prompt_too_long` over 224 tokens)
//! -> decode the file (400 `param: file`, naming the format; the sample rate is checked
//! before decoding; nothing is reserved before the audio's length is known) -> `metering`
//! (claim 409/422/replay, hold of the exact cost 402, run, settle).

use std::collections::BTreeMap;

use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::State;
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::format::{self, Format};
use crate::api::shared::call::PaidCall;
use crate::api::shared::codes::Code;
use crate::api::shared::error::{ApiError, Remedy};
use crate::api::shared::paid;
#[allow(unused_imports)] // Named by the OpenAPI attribute.
use crate::api::shared::schema::{ErrorBody, PaidErrors};
use crate::api::shared::state::AppState;
use crate::audio::{languages, Options, Task};
use crate::audio::{pcm, AudioError};
use crate::billing::Units;
use crate::catalog::audio::{AudioKind, AudioModelEntry};
use crate::metering::UnitsAdmission;

/// Largest uploaded file, bytes (OpenAI's limit: 25 MB).
pub const MAX_FILE_BYTES: usize = 25 * 1024 * 1024;
/// Longest audio transcribed in one request, seconds (20 minutes: about two minutes of work
/// on two cores). Longer audio gets 400 `audio_too_long`.
pub const MAX_AUDIO_SECONDS: u64 = 1200;

/// The fields of a transcription or translation request.
struct Form {
    file: Vec<u8>,
    filename: String,
    /// Every text field by name (`model`, `language`, ...), for checks and the fingerprint.
    fields: BTreeMap<String, String>,
}

/// `POST /v1/audio/transcriptions`.
#[utoipa::path(post, path = "/v1/audio/transcriptions", tag = "audio",
    request_body(content_type = "multipart/form-data", description = "`file` (wav, flac, mp3, ogg, m4a, webm...), `model`, optional `language` (ISO 639-1), `prompt`, `response_format` (`json`, `verbose_json`, `text`, `srt`, `vtt`), `temperature`, `timestamp_granularities[]` (`segment`)"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The transcript: JSON with `service` for `json` and `verbose_json`, else text with `x-tollgate-cost-micros`",
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics"))),
        PaidErrors,
    ))]
pub async fn transcriptions(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call, Task::Transcribe))
        .await
}

/// `POST /v1/audio/translations`: English text from speech in any language.
#[utoipa::path(post, path = "/v1/audio/translations", tag = "audio",
    request_body(content_type = "multipart/form-data", description = "`file`, `model`, optional `prompt`, `response_format`, `temperature`"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The English transcript, shaped as for transcriptions",
            headers(("x-request-id" = String, description = "`req_` + 24 alphanumerics"))),
        PaidErrors,
    ))]
pub async fn translations(State(state): State<AppState>, call: PaidCall) -> Response {
    call.answer(|call| handle(&state, call, Task::Translate))
        .await
}

/// Read every part: `file` whole (up to `MAX_FILE_BYTES`), the rest as text.
async fn read_form(form: Result<Multipart, MultipartRejection>) -> Result<Form, ApiError> {
    let mut form = form.map_err(|e| {
        ApiError::bad(
            "file",
            Code::InvalidMultipart,
            format!("The body must be multipart/form-data with a `file` part: {e}"),
        )
    })?;
    let (mut file, mut filename, mut fields) = (None, String::new(), BTreeMap::new());
    loop {
        let field = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::FileTooLarge {
                    limit_bytes: MAX_FILE_BYTES,
                })
            }
            Err(e) => {
                return Err(ApiError::bad(
                    "file",
                    Code::InvalidMultipart,
                    format!("The multipart body could not be read: {e}"),
                ))
            }
        };
        let name = field.name().unwrap_or("").to_string();
        if name == "file" {
            filename = field.file_name().unwrap_or("").to_string();
            let bytes = field.bytes().await.map_err(|e| match e.status() {
                axum::http::StatusCode::PAYLOAD_TOO_LARGE => ApiError::FileTooLarge {
                    limit_bytes: MAX_FILE_BYTES,
                },
                _ => ApiError::bad(
                    "file",
                    Code::InvalidMultipart,
                    format!("The file could not be read: {e}"),
                ),
            })?;
            if bytes.len() > MAX_FILE_BYTES {
                return Err(ApiError::FileTooLarge {
                    limit_bytes: MAX_FILE_BYTES,
                });
            }
            file = Some(bytes.to_vec());
        } else {
            let text = field.text().await.map_err(|e| {
                ApiError::bad(
                    &name,
                    Code::InvalidMultipart,
                    format!("The field `{name}` could not be read: {e}"),
                )
            })?;
            // Repeated fields (`timestamp_granularities[]`) are joined with commas.
            fields
                .entry(name)
                .and_modify(|v: &mut String| {
                    v.push(',');
                    v.push_str(&text);
                })
                .or_insert(text);
        }
    }
    let file = file.filter(|f| !f.is_empty()).ok_or_else(|| {
        ApiError::bad(
            "file",
            Code::MissingFile,
            "An audio `file` is required and must not be empty.".into(),
        )
    })?;
    Ok(Form {
        file,
        filename,
        fields,
    })
}

/// The checked options of a request.
struct Checked {
    entry: AudioModelEntry,
    format: Format,
    opts: Options,
}

fn check(state: &AppState, form: &Form, task: Task) -> Result<Checked, ApiError> {
    let allowed: &[&str] = match task {
        Task::Transcribe => &[
            "model",
            "language",
            "prompt",
            "response_format",
            "temperature",
            "timestamp_granularities[]",
            "timestamp_granularities",
        ],
        Task::Translate => &["model", "prompt", "response_format", "temperature"],
    };
    let unknown: Vec<String> = form
        .fields
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(ApiError::UnsupportedParameter(unknown));
    }
    let field = |k: &str| {
        form.fields
            .get(k)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };
    let model = field("model")
        .ok_or_else(|| ApiError::bad("model", Code::MissingModel, "`model` is required.".into()))?;
    let entry = paid::audio_model(state, model, AudioKind::Transcription)?;
    let format = match field("response_format") {
        None => Format::Json,
        Some(f) => Format::parse(f).ok_or_else(|| {
            ApiError::bad("response_format", Code::InvalidResponseFormat, format!("`response_format` must be one of json, text, srt, verbose_json, vtt; got `{f}`."))
        })?,
    };
    let granularities = field("timestamp_granularities[]").or(field("timestamp_granularities"));
    for g in granularities
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
    {
        if g != "segment" {
            return Err(ApiError::bad("timestamp_granularities[]", Code::UnsupportedTimestampGranularity,
                format!("Only `segment` timestamps are available; `{g}` is not (word timings are not implemented).")));
        }
    }
    let temperature = match field("temperature") {
        None => 0.0,
        Some(t) => t
            .parse::<f64>()
            .ok()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| {
                ApiError::bad(
                    "temperature",
                    Code::InvalidTemperature,
                    format!("`temperature` must be a number from 0 to 1; got `{t}`."),
                )
            })?,
    };
    let language = match field("language") {
        None => None,
        Some(l) => Some(languages::code_of(l).map(str::to_owned).ok_or_else(|| {
            ApiError::bad(
                "language",
                Code::UnsupportedLanguage,
                format!(
                    "`language` must be an ISO 639-1 code Whisper knows, such as `en`; got `{l}`."
                ),
            )
        })?),
    };
    Ok(Checked {
        entry,
        format,
        opts: Options {
            task,
            language,
            prompt: field("prompt").map(str::to_owned),
            temperature,
            seed: 0,
        },
    })
}

/// The request's fingerprint bytes: its fields and the file's SHA-256 (not the raw body, whose
/// multipart boundary changes on every retry).
fn canonical(form: &Form) -> Vec<u8> {
    let file_sha = hex::encode(Sha256::digest(&form.file));
    serde_json::to_vec(&(&form.fields, &form.filename, file_sha)).unwrap_or_default()
}

async fn handle(state: &AppState, mut call: PaidCall, task: Task) -> Result<Response, ApiError> {
    let form = read_form(call.multipart(state).await?).await?;
    if let Some(m) = form.fields.get("model") {
        call.logged.set(m);
    }
    let Checked {
        entry,
        format,
        opts,
    } = check(state, &form, task)?;
    let dir = state.models.weights_dir.join(&entry.path);
    if state.models.speech.transcription_available(&dir).is_err() {
        tracing::info!(model = %entry.id, dir = %dir.display(), "speech model has no weights on this server");
        return Err(ApiError::ModelNotAvailable {
            model: entry.id.clone(),
            hint: format!("an operator can fetch them with `{}`", entry.fetch),
        });
    }
    let route = match task {
        Task::Transcribe => "/v1/audio/transcriptions",
        Task::Translate => "/v1/audio/translations",
    };
    let idempotency = call.idempotency(&canonical(&form), false, route)?;
    let caller = call.caller;
    let Form { file, filename, .. } = form;
    let (speech, model_dir, prompt) = (
        state.models.speech.clone(),
        dir.clone(),
        opts.prompt.clone(),
    );
    let audio = tokio::task::spawn_blocking(move || {
        if let Some(p) = prompt {
            speech.check_prompt(&model_dir, &p)?;
        }
        pcm::decode(file, &filename, MAX_AUDIO_SECONDS)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("decode task: {e}")))?
    .map_err(|e| ApiError::from_audio(&entry.id, e))?;
    let audio_ms =
        (audio.samples.len() as u64 * 1000).div_ceil(crate::audio::mel::SAMPLE_RATE as u64);
    let billed_seconds = audio.billed_seconds();
    let units = Units::AudioMs {
        ms: audio_ms,
        per_minute: entry.pricing.per_minute,
    };
    let speech = state.models.speech.clone();
    let work = async move {
        speech
            .transcribe(dir, audio, opts)
            .await
            .unwrap_or_else(|_| Err(AudioError::Inference("the speech worker stopped".into())))
    };
    let request_id = caller.request_id.0.clone();
    let translate = task == Task::Translate;
    let render =
        move |cost, t| format::render(&t, format, translate, billed_seconds, cost, &request_id);
    let req = caller.paid_units(&entry.id, units, idempotency, billed_seconds / 5 + 5);
    Ok(
        match state
            .paid
            .meter
            .run_units(req, work, render)
            .await
            .map_err(|e| ApiError::from(e).with_remedy(Remedy::ShorterAudio))?
        {
            UnitsAdmission::Replay(stored) => format::respond(format, stored, true),
            UnitsAdmission::Done(_, stored) => format::respond(format, stored, false),
            UnitsAdmission::Failed(e) => return Err(ApiError::from_audio(&entry.id, e)),
        },
    )
}
