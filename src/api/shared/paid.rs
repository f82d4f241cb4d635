//! The steps of a paid request around `metering`, used through `call::PaidCall` and
//! `text::paid_request`: the payer and its rate limit, the JSON body and its `Content-Type`,
//! the `Idempotency-Key` header and the body's fingerprint, the model's catalogue checks,
//! prompt preparation, the context check, and turning metering's results into responses.
//! Shared by the paid handlers (chat completions, Responses, audio), so no handler imports
//! another.
//! May use: `metering`, `engine` (prepare), `catalog`, `access`. Never: the ledger directly.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::access::{self, Payer};
use super::codes::Code;
use super::error::ApiError;
use super::limits::RateInfo;
use super::state::{AppState, RequestModel};
use crate::catalog::audio::{AudioKind, AudioModelEntry};
use crate::catalog::embedding::EmbeddingModelEntry;
use crate::catalog::ModelEntry;
use crate::engine::{ChatInput, EngineError, Prompt};
use crate::metering::IdempotencyScope;
use crate::metering::{Idempotency, StoredResponse};

/// The payer of a paid request and its rate-limit state (keys and playground sessions have
/// separate limits: `docs/reference/limits.md`).
///
/// # Errors
/// The 401 or 429 response, ready to send (a 429 with its `x-ratelimit-*` headers).
pub async fn payer(state: &AppState, headers: &HeaderMap) -> Result<(Payer, RateInfo), Response> {
    let payer = access::authenticate_payer(&state.accounts, headers)
        .await
        .map_err(IntoResponse::into_response)?;
    let checked = match payer {
        Payer::Key(k) => state.paid.limits.check_request(k.key_id),
        Payer::Session(s) => state.paid.session_limits.check_request(s.account_id),
    };
    match checked {
        Ok(info) => Ok((payer, info)),
        Err((info, e)) => {
            let mut r = e.into_response();
            info.apply(r.headers_mut());
            Err(r)
        }
    }
}

/// Read the body of an authenticated request, after its `Content-Type` is checked: at most
/// `--max-body-bytes`, with the body timeout applied by the server (tower-http's
/// `TimeoutBody`). Called only once the payer is known, so an unauthenticated body is never
/// buffered. The `model` it names goes to `logged` first, so the log line of a request that
/// fails validation names it.
///
/// # Errors
/// 400 `unsupported_content_type`; 413 `request_too_large`; 408 `request_timeout`; 400
/// `invalid_body` when the client broke off the body.
pub async fn json_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    logged: &RequestModel,
) -> Result<Bytes, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("").trim_start().to_ascii_lowercase();
        if !ct.starts_with("application/json") {
            return Err(ApiError::BadRequest {
                param: None,
                code: Code::UnsupportedContentType,
                message: "Content-Type must be application/json.".into(),
            });
        }
    }
    let body = read_body(body, state.http.max_body_bytes).await?;
    if let Some(m) = peek_model(&body) {
        logged.set(&m);
    }
    Ok(body)
}

/// The whole body, at most `limit` bytes (a declared `Content-Length` over it is refused before
/// anything is read).
///
/// # Errors
/// 413 `request_too_large`; 408 `request_timeout`; 400 `invalid_body`.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    use http_body::Body as _;
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(ApiError::TooLarge);
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(c) = cause {
            if c.is::<http_body_util::LengthLimitError>() {
                return ApiError::TooLarge;
            }
            if c.is::<tower_http::timeout::TimeoutError>() {
                return ApiError::BodyTimeout;
            }
            cause = c.source();
        }
        ApiError::BadRequest {
            param: None,
            code: Code::InvalidBody,
            message: "The request body could not be read.".into(),
        }
    })
}

/// The `model` a JSON body names, if any (read before the body is validated).
fn peek_model(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Peek {
        model: Option<String>,
    }
    serde_json::from_slice::<Peek>(body).ok()?.model
}

/// The request's `Idempotency-Key` (1-255 visible ASCII characters), scoped to the payer's
/// account and `route`, with the body's fingerprint; `None` without the header.
///
/// # Errors
/// 400 `invalid_idempotency_key`; 400 `idempotency_key_with_stream` when `stream` is set.
pub fn idempotency(
    headers: &HeaderMap,
    body: &[u8],
    stream: bool,
    route: &str,
    payer: &Payer,
) -> Result<Option<Idempotency>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bad = || ApiError::BadRequest {
        param: Some("Idempotency-Key".into()),
        code: Code::InvalidIdempotencyKey,
        message: "The Idempotency-Key header must be 1 to 255 visible ASCII characters.".into(),
    };
    let key = v.to_str().map_err(|_| bad())?;
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    if stream {
        return Err(ApiError::BadRequest {
            param: Some("stream".into()),
            code: Code::IdempotencyKeyWithStream,
            message: "The Idempotency-Key header cannot be combined with `stream: true`.".into(),
        });
    }
    Ok(Some(Idempotency {
        scope: IdempotencyScope {
            account: payer.account_id(),
            route: route.to_owned(),
            key: key.to_owned(),
        },
        fingerprint: fingerprint(body),
    }))
}

/// SHA-256 of the canonical JSON body (object keys sorted, no whitespace), so a retry that
/// reorders keys still matches (`docs/reference/idempotency.md`).
/// Keys are sorted here, not by `serde_json` (its `preserve_order` feature is on: llguidance
/// needs schema property order kept).
fn fingerprint(body: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    let canonical = serde_json::from_slice::<serde_json::Value>(body).map_or_else(
        |_| body.to_vec(),
        |mut v| {
            sort_keys(&mut v);
            v.to_string().into_bytes()
        },
    );
    sha2::Sha256::digest(&canonical).to_vec()
}

/// Sort the keys of every object in `v`, recursively.
fn sort_keys(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            o.sort_keys();
            o.values_mut().for_each(sort_keys);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

/// The catalogue entry of `model`, if it exists, may be served commercially and has weights
/// here (loaded, on disk, in the hub cache, or fetchable from a reachable hub). Checked before
/// anything is tokenized: a model we may not serve is never loaded or fetched, and a model
/// without weights is refused at once (no hub attempt when the hub did not answer its probe).
///
/// # Errors
/// 404 `model_not_found`; 400 `model_not_supported` for a speech model; 403
/// `model_license_forbids_commercial_use`; 404 `model_not_available` (the full reason is
/// logged at info).
pub async fn servable_model(state: &AppState, model: &str) -> Result<ModelEntry, ApiError> {
    let Some(entry) = state.models.catalog.get(model).cloned() else {
        return Err(match not_a_text_model(state, model) {
            Some((does, endpoint)) => ApiError::bad(
                "model",
                Code::ModelNotSupported,
                format!("The model `{model}` {does}; it does not generate text. Use {endpoint}."),
            ),
            None => ApiError::ModelNotFound(model.to_owned()),
        });
    };
    if !entry.commercial_use {
        return Err(ApiError::NotLicensed(model.to_owned()));
    }
    if state
        .models
        .engine
        .loaded()
        .iter()
        .any(|l| l.id == entry.id)
    {
        return Ok(entry);
    }
    let (e, dir) = (entry.clone(), state.models.weights_dir.clone());
    let availability = tokio::task::spawn_blocking(move || crate::engine::availability(&e, &dir))
        .await
        .map_err(|e| ApiError::Internal(format!("availability task: {e}")))?;
    match availability {
        Ok(()) => Ok(entry),
        Err((_, full)) => Err(not_available(&entry, &full)),
    }
}

/// The 404 for a model without weights here; `reason` (paths, URLs) goes to the log only.
fn not_available(entry: &ModelEntry, reason: &str) -> ApiError {
    tracing::info!(model = %entry.id, reason, "model has no weights on this server");
    ApiError::ModelNotAvailable {
        model: entry.id.clone(),
        hint: crate::engine::fetch_hint(entry),
    }
}

/// Load `model` if it is not loaded (`Engine::load`: may fetch its weights), then render and
/// tokenize `messages` with its chat template (`Engine::prepare`), off the async threads.
///
/// # Errors
/// 404 `model_not_available` (no weights found after all), 502 `model_unavailable` (cannot
/// load), 400 `invalid_messages` (the template refuses them), 400 `invalid_value` (a prompt
/// with no tokens), 503 `model_capacity`, 500.
pub async fn prepare(
    state: &AppState,
    model: &str,
    input: &ChatInput,
    image_params: &[String],
) -> Result<Prompt, ApiError> {
    let engine = state.models.engine.clone();
    let (owned, input) = (model.to_owned(), input.clone());
    let grammar_param = grammar_param(&input);
    let result = tokio::task::spawn_blocking(move || {
        engine
            .load(&owned)
            .and_then(|()| engine.prepare(&owned, &input))
    })
    .await
    .map_err(|_| ApiError::Internal("the prompt task stopped unexpectedly".into()))?;
    result.map_err(|e| prepare_error(state, model, e, image_params, grammar_param))
}

/// The fewest prompt tokens `input` (with `images` images, none fetched yet) can have on
/// `model` (`Engine::prompt_floor`), loading it first, and the model's context length.
///
/// # Errors
/// As `prepare`.
pub async fn prompt_floor(
    state: &AppState,
    model: &str,
    input: &ChatInput,
    image_params: &[String],
) -> Result<(usize, usize), ApiError> {
    let engine = state.models.engine.clone();
    let (owned, input) = (model.to_owned(), input.clone());
    let grammar_param = grammar_param(&input);
    let result = tokio::task::spawn_blocking(move || {
        engine.load(&owned)?;
        let floor = engine.prompt_floor(&owned, &input)?;
        let context = engine.loaded().into_iter().find(|m| m.id == owned);
        Ok((floor, context.map_or(usize::MAX, |m| m.context_length)))
    })
    .await
    .map_err(|_| ApiError::Internal("the prompt task stopped unexpectedly".into()))?;
    result.map_err(|e| prepare_error(state, model, e, image_params, grammar_param))
}

/// The field an output constraint of `input` came from.
fn grammar_param(input: &ChatInput) -> &'static str {
    match input.constraint {
        Some(crate::engine::OutputConstraint::Json(_)) => "response_format",
        _ => "tools",
    }
}

/// `prepare`'s answer to the engine's error `e` for model `id`.
fn prepare_error(
    state: &AppState,
    id: &str,
    e: EngineError,
    image_params: &[String],
    grammar_param: &str,
) -> ApiError {
    // The catalogue entry, looked up only when there is an error to name it in.
    match (e, state.models.catalog.get(id)) {
        (EngineError::ModelNotLoaded(m), Some(entry)) => not_available(
            entry,
            &format!("`{m}` is not loaded and this engine does not load models on demand"),
        ),
        (e @ EngineError::Unavailable { .. }, Some(entry)) => not_available(entry, &e.to_string()),
        (EngineError::Template(t), _) => ApiError::BadRequest {
            param: Some("messages".into()),
            code: Code::InvalidMessages,
            message: format!("The messages cannot be rendered with the model's chat template: {t}"),
        },
        (EngineError::EmptyPrompt, _) => ApiError::bad(
            "messages",
            Code::InvalidValue,
            "The prompt is empty: it has no tokens for the model to read. Send some text.".into(),
        ),
        (e @ EngineError::NoRoom { .. }, _) => ApiError::NoCapacity(e.to_string()),
        (EngineError::NoFim, _) => ApiError::bad(
            "suffix",
            Code::UnsupportedValue,
            format!("The model `{id}` has no fill-in-the-middle tokens, so `suffix` cannot be served; use a code model such as qwen2.5-coder."),
        ),
        (EngineError::NoReasoning, _) => ApiError::bad(
            "reasoning_effort",
            Code::UnsupportedValue,
            format!("The model `{id}` does not think (its chat template and vocabulary have no `<think>`), so `reasoning_effort` can only be `none` or `minimal` for it."),
        ),
        (EngineError::PromptTooLong { limit, counted }, _) => ApiError::BadRequest {
            param: Some("messages".into()),
            code: Code::ContextLengthExceeded,
            message: format!("This model's maximum context length is {} tokens. However, your messages have more than {limit} tokens (counting stopped at {counted}). Please reduce the length of the messages.", limit + 1),
        },
        (EngineError::Image { index, message, too_large }, _) => ApiError::BadRequest {
            param: image_params.get(index).cloned(),
            code: if too_large { Code::ImageTooLarge } else { Code::InvalidImage },
            message: format!("The image cannot be used: {message}."),
        },
        (EngineError::NoVision, _) => ApiError::BadRequest {
            param: image_params.first().cloned(),
            code: Code::ImageNotSupported,
            message: format!("The model `{id}` was loaded without its vision part, so it cannot read images."),
        },
        (EngineError::Grammar(g), _) => ApiError::BadRequest {
            param: Some(grammar_param.into()),
            code: Code::UnsupportedGrammar,
            message: format!("The output constraint cannot be compiled for this model: {g}"),
        },
        (
            e @ (EngineError::Load { .. }
            | EngineError::Unavailable { .. }
            | EngineError::ModelNotLoaded(_)),
            _,
        ) => ApiError::ModelUnavailable {
            model: id.to_owned(),
            detail: e.to_string(),
        },
        (other, _) => ApiError::Internal(other.to_string()),
    }
}

/// Tokens the request may generate: its limit, else the rest of the context.
///
/// # Errors
/// 400 `context_length_exceeded`, naming the field (`max_tokens`, `max_completion_tokens` or
/// `messages`).
pub fn max_new_tokens(
    prompt: &Prompt,
    max_tokens: Option<(usize, &'static str)>,
) -> Result<usize, ApiError> {
    output_room(prompt.token_ids.len(), prompt.context_length, max_tokens)
}

/// `max_new_tokens` for a prompt of `n` tokens in a context of `ctx`.
///
/// # Errors
/// As `max_new_tokens`.
pub fn output_room(
    n: usize,
    ctx: usize,
    max_tokens: Option<(usize, &'static str)>,
) -> Result<usize, ApiError> {
    let exceeded = |param: &str, asked: usize| {
        ApiError::BadRequest {
        param: Some(param.into()),
        code: Code::ContextLengthExceeded,
        message: format!("This model's maximum context length is {ctx} tokens. However, you requested {} tokens ({n} in the messages, {asked} in the completion). Please reduce the length of the messages or completion.", n.saturating_add(asked)),
    }
    };
    match max_tokens {
        // The messages alone fill the context: they are the field to shorten.
        Some((m, _)) if n >= ctx => Err(exceeded("messages", m)),
        Some((m, param)) if n.checked_add(m).is_none_or(|t| t > ctx) => Err(exceeded(param, m)),
        Some((m, _)) => Ok(m),
        None if n >= ctx => Err(exceeded("messages", 1)),
        None => Ok(ctx - n),
    }
}

/// A stored response as it is sent: its status and JSON body, `x-request-id` from the body's
/// `service.request_id`, and `Idempotent-Replayed: true` when `replayed`.
pub fn stored(r: StoredResponse, replayed: bool) -> Response {
    let request_id = serde_json::from_str::<serde_json::Value>(&r.body)
        .ok()
        .and_then(|v| v["service"]["request_id"].as_str().map(str::to_owned));
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::OK);
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], r.body).into_response();
    if replayed {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
        if let Some(v) = request_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            resp.headers_mut().insert("x-request-id", v);
        }
    }
    resp
}

/// A 200 whose body is not JSON (audio, subtitles): `content_type`, the charge in
/// `x-tollgate-cost-micros`, and on an idempotent replay `idempotent-replayed: true` with the
/// original `x-request-id` (a fresh response gets its own from the request-id layer).
pub fn priced_body(
    body: impl Into<axum::body::Body>,
    content_type: &str,
    cost_micros: i64,
    request_id: &str,
    replayed: bool,
) -> Response {
    let mut resp = (StatusCode::OK, body.into()).into_response();
    let h = resp.headers_mut();
    let mut set = |name: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(name, v);
        }
    };
    set(header::CONTENT_TYPE.as_str(), content_type);
    set("x-tollgate-cost-micros", &cost_micros.to_string());
    if replayed {
        set("idempotent-replayed", "true");
        set("x-request-id", request_id);
    }
    resp
}

/// What a speech model of `kind` does, for the message of a model named where it cannot serve.
fn audio_does(kind: AudioKind) -> &'static str {
    match kind {
        AudioKind::Transcription => "transcribes audio",
        AudioKind::Speech => "speaks text",
    }
}

/// What the speech or embedding model `model` does and the endpoint that serves it; `None`
/// for a chat model or an unknown id.
fn not_a_text_model(state: &AppState, model: &str) -> Option<(&'static str, &'static str)> {
    let catalog = &state.models.catalog;
    if let Some(a) = catalog.audio_model(model) {
        return Some(match a.kind {
            AudioKind::Transcription => (audio_does(a.kind), "`POST /v1/audio/transcriptions`"),
            AudioKind::Speech => (audio_does(a.kind), "`POST /v1/audio/speech`"),
        });
    }
    catalog
        .embedding_model(model)
        .map(|_| ("makes embeddings", "`POST /v1/embeddings`"))
}

/// The embedding model `model` names, if it is licensed for commercial serving.
///
/// # Errors
/// 404 `model_not_found`; 400 `model_not_supported` for a chat or speech model; 403 for a
/// licence that forbids commercial use.
pub fn embedding_model(state: &AppState, model: &str) -> Result<EmbeddingModelEntry, ApiError> {
    let catalog = &state.models.catalog;
    let other = |what: &str| {
        ApiError::bad(
            "model",
            Code::ModelNotSupported,
            format!("The model `{model}` {what}; it does not make embeddings. Use an embedding model (`kind: \"embedding\"` in `GET /v1/models`)."),
        )
    };
    let entry = match catalog.embedding_model(model) {
        Some(e) => e.clone(),
        None if catalog.get(model).is_some() => return Err(other("is a chat model")),
        None => match catalog.audio_model(model) {
            Some(a) => return Err(other(audio_does(a.kind))),
            None => return Err(ApiError::ModelNotFound(model.to_owned())),
        },
    };
    if !entry.commercial_use {
        return Err(ApiError::NotLicensed(entry.id.clone()));
    }
    Ok(entry)
}

/// The speech model `model` names, if it is of `kind` and licensed for commercial serving.
///
/// # Errors
/// 404 `model_not_found`; 400 `model_not_supported` for a chat model or an audio model of the
/// other kind; 403 for a licence that forbids commercial use.
pub fn audio_model(
    state: &AppState,
    model: &str,
    kind: AudioKind,
) -> Result<AudioModelEntry, ApiError> {
    let does = |k: AudioKind| match k {
        AudioKind::Transcription => "transcribe audio",
        AudioKind::Speech => "speak text",
    };
    let other = |what: &str| ApiError::BadRequest {
        param: Some("model".into()),
        code: Code::ModelNotSupported,
        message: format!("The model `{model}` {what}; it does not {}.", does(kind)),
    };
    let entry = match state.models.catalog.audio_model(model) {
        Some(e) if e.kind == kind => e.clone(),
        Some(e) => return Err(other(audio_does(e.kind))),
        None if state.models.catalog.get(model).is_some() => return Err(other("is a chat model")),
        None if state.models.catalog.embedding_model(model).is_some() => {
            return Err(other("makes embeddings"))
        }
        None => return Err(ApiError::ModelNotFound(model.to_owned())),
    };
    if !entry.commercial_use {
        return Err(ApiError::NotLicensed(entry.id.clone()));
    }
    Ok(entry)
}
