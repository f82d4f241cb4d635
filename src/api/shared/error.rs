//! `ApiError`: the one error type that becomes an HTTP response, in the interface's envelope
//! `{"error": {"message", "type", "param", "code", "details"?}}` (`docs/reference/errors.md`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::codes::Code;
use super::schema::{ErrorBody, ErrorObject};
use crate::accounts::AccountsError;
use crate::audio::AudioError;
use crate::engine::EmbedError;
use crate::metering::{KeyLimitBreach, MeterError};
use crate::money::Micros;

/// `Retry-After` of a 503 `ledger_unavailable`, seconds: long enough for an operator's
/// alert to matter, short enough that SDKs (which wait up to 60 s) retry rather than fail.
pub const LEDGER_RETRY_AFTER_S: u64 = 5;

/// One field that failed validation (422 `details.errors[]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    pub param: String,
    pub message: String,
}

/// Every failure the HTTP surface reports. Each variant fixes status, `type` and `code`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid_json`: the body is not JSON.
    #[error("We could not parse the JSON body of your request: {0}")]
    InvalidJson(String),
    /// 400 `unsupported_parameter`: fields we do not implement, in body order (never empty).
    /// `param` names the first; `details.unsupported` lists them all.
    #[error("Unrecognized request argument supplied: {}", .0.join(", "))]
    UnsupportedParameter(Vec<String>),
    /// 400 with a specific code and param (image to a text model, context too long, ...).
    #[error("{message}")]
    BadRequest {
        param: Option<String>,
        code: Code,
        message: String,
    },
    /// 422 `invalid_request`: well-formed JSON that fails validation.
    #[error("The request body failed validation: {}", .0.iter().map(|e| format!("{}: {}", e.param, e.message)).collect::<Vec<_>>().join("; "))]
    Validation(Vec<FieldError>),
    /// 401 `missing_api_key` / `invalid_api_key` / `revoked_api_key`, with `WWW-Authenticate`.
    #[error("{message}")]
    Unauthenticated { code: Code, message: String },
    /// 402 `INSUFFICIENT_BALANCE`: the balance does not cover the request's hold.
    #[error("Insufficient balance: this request needs up to {required} but {available} is available. Top up your balance or {remedy}.")]
    InsufficientBalance {
        required: Micros,
        available: Micros,
        remedy: Remedy,
    },
    /// 402 `KEY_SPEND_LIMIT`: the API key's spend limit (set in the dashboard) does not cover
    /// the request's hold, though the balance may; other keys of the account keep working.
    #[error("This API key's spend limit of {} would be passed: it has used {} and this request needs up to {}. Raise the key's limit in the dashboard, use another key, or {remedy}.", .breach.limit, .breach.used, .breach.required)]
    KeySpendLimit {
        breach: KeyLimitBreach,
        remedy: Remedy,
    },
    /// 403 `model_license_forbids_commercial_use`: the licence forbids commercial serving.
    #[error("The model `{0}` exists but its licence does not allow commercial serving.")]
    NotLicensed(String),
    /// 409 `idempotency_key_in_flight` with `Retry-After` (seconds).
    #[error("A request with this Idempotency-Key is still in progress; retry shortly.")]
    IdempotencyInFlight { retry_after_s: u64 },
    /// 422 `idempotency_key_reused`: the key was used with a different body.
    #[error("This Idempotency-Key was already used with a different request body.")]
    IdempotencyMismatch,
    /// 429 `rate_limit_exceeded` with `Retry-After` and `retry-after-ms`.
    #[error("Rate limit reached: {limit} requests per minute for this key (or, in the playground, this account). Retry after {retry_after_ms} ms.")]
    RateLimited { limit: u32, retry_after_ms: u64 },
    /// 429 `rate_limit_exceeded` on the public endpoints (per client address).
    #[error("Rate limit reached: {limit} requests per minute from one address to the public endpoints. Retry after {retry_after_ms} ms.")]
    PublicRateLimited { limit: u32, retry_after_ms: u64 },
    /// 404 `model_not_found`.
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    /// 404 `response_not_found`: no stored response with this id for this account (another
    /// account's id reads the same). `param` is `previous_response_id` when it named it.
    #[error("No response with id `{id}` is stored for this account.")]
    ResponseNotFound {
        id: String,
        param: Option<&'static str>,
    },
    /// 404 `item_not_found`: an `item_reference` input names no output item of this account's
    /// stored responses. `param` is the item's place (`input[3]`).
    #[error("No stored output item with id `{id}` exists for this account.")]
    ItemNotFound { id: String, param: String },
    /// 404 `unknown_route`.
    #[error("Unknown route: {0}")]
    UnknownRoute(String),
    /// 405 `method_not_allowed`.
    #[error("Method not allowed for this route.")]
    MethodNotAllowed,
    /// 413 `request_too_large`.
    #[error("The request body is too large.")]
    TooLarge,
    /// 408 `request_timeout`: the request body paused longer than `--body-timeout`.
    #[error("The request body was not received in time.")]
    BodyTimeout,
    /// 415 `unsupported_content_encoding`, `param` `Content-Encoding`: request bodies are
    /// accepted uncompressed only.
    #[error("Request bodies must not be compressed: Content-Encoding `{0}` is not accepted.")]
    UnsupportedEncoding(String),
    /// 503 `too_many_connections` with `Retry-After`: the server's connection cap, or the
    /// client address's, is reached (answered by the accept loop after reading the request
    /// head, `connections::refuse`).
    #[error("The server has too many open connections; retry shortly.")]
    TooManyConnections,
    /// 413 `file_too_large`, `param` `file`: an uploaded file over the limit (bytes).
    #[error("The file is larger than the limit of {limit_bytes} bytes (25 MB).")]
    FileTooLarge { limit_bytes: usize },
    /// 429 `engine_overloaded` with `Retry-After`.
    #[error("The model `{0}` is at capacity; retry shortly.")]
    Overloaded(String),
    /// 429 `too_many_concurrent_requests` with `Retry-After`: the payer's share of the engine
    /// queue is taken (`scope`: its account's queued requests or its key's requests waiting
    /// and running, `limit` the cap), so one tenant cannot fill the queue for the others.
    #[error("Too many concurrent requests: {scope} has {limit} requests waiting or running, the most this server allows; retry when one finishes.")]
    TooManyConcurrent { scope: &'static str, limit: usize },
    /// 503 `image_decode_busy` with `Retry-After`: the server's budget for decoding images at
    /// once had no room within its wait; nothing was charged.
    #[error("The server is decoding other requests' images and had no room for this one in time; retry shortly. Nothing was charged.")]
    ImagesBusy(String),
    /// 503 `shutting_down` with `Retry-After`: the server is stopping; nothing was charged.
    #[error(
        "The server is shutting down; retry (another replica may answer). Nothing was charged."
    )]
    ShuttingDown,
    /// 503 `model_capacity` with `Retry-After`: the memory budget is held by busy models.
    #[error("{0}")]
    NoCapacity(String),
    /// 404 `model_not_available` with `x-should-retry: false`: in the catalogue, but this
    /// server has no weights for it and cannot fetch them. A 404, not a 502: the condition lasts
    /// until an operator acts, so SDKs must not retry it (the contract's 502 is "usually
    /// transient"); the model is not served here, which is what the 404 row says.
    /// `hint` is what an operator can do; the full reason (paths, URLs) goes to the log only.
    #[error("The model `{model}` has no weights on this server; {hint}.")]
    ModelNotAvailable { model: String, hint: String },
    /// 502 `model_unavailable`: its weights are here but it could not be loaded now. The
    /// message is short; `detail` (paths, loader errors) goes to the log only.
    #[error("The model `{model}` could not be loaded on this server; the operator's log has the reason.")]
    ModelUnavailable { model: String, detail: String },
    /// 502 `engine_error`: the model failed while generating. The caller is not charged.
    #[error("The model failed while generating; retry shortly.")]
    EngineFailed(String),
    /// 503 `ledger_unavailable` with `Retry-After`: the ledger could not record the request
    /// (disk full, I/O error, database unreachable); nothing was charged. The detail goes to
    /// the log only.
    #[error("The server cannot record requests right now (its ledger is unavailable); nothing was charged. Retry shortly.")]
    LedgerUnavailable(String),
    /// 500 `internal_error`: our fault. The body carries the request id.
    #[error("The server had an error while processing your request.")]
    Internal(String),
}

impl ApiError {
    /// (status, `type`, `code`, `param`) for each variant; exhaustive, no catch-all arm.
    #[rustfmt::skip]
    pub fn parts(&self) -> (StatusCode, &'static str, Code, Option<String>) {
        use ApiError as E;
        const INVALID: &str = "invalid_request_error";
        let model = || Some("model".to_owned());
        match self {
            E::InvalidJson(_) => (StatusCode::BAD_REQUEST, INVALID, Code::InvalidJson, None),
            E::UnsupportedParameter(p) => (StatusCode::BAD_REQUEST, INVALID, Code::UnsupportedParameter, p.first().cloned()),
            E::BadRequest { param, code, .. } => (StatusCode::BAD_REQUEST, INVALID, *code, param.clone()),
            E::Validation(errs) => (StatusCode::UNPROCESSABLE_ENTITY, INVALID, Code::InvalidRequest, errs.first().map(|e| e.param.clone())),
            E::Unauthenticated { code, .. } => (StatusCode::UNAUTHORIZED, "authentication_error", *code, None),
            E::InsufficientBalance { .. } => (StatusCode::PAYMENT_REQUIRED, "insufficient_quota", Code::InsufficientBalance, None),
            E::KeySpendLimit { .. } => (StatusCode::PAYMENT_REQUIRED, "insufficient_quota", Code::KeySpendLimit, None),
            E::NotLicensed(_) => (StatusCode::FORBIDDEN, "permission_error", Code::ModelLicenseForbidsCommercialUse, model()),
            E::ModelNotFound(_) => (StatusCode::NOT_FOUND, "not_found_error", Code::ModelNotFound, model()),
            E::ResponseNotFound { param, .. } => (StatusCode::NOT_FOUND, "not_found_error", Code::ResponseNotFound, param.map(str::to_owned)),
            E::ItemNotFound { param, .. } => (StatusCode::NOT_FOUND, "not_found_error", Code::ItemNotFound, Some(param.clone())),
            E::UnknownRoute(_) => (StatusCode::NOT_FOUND, "not_found_error", Code::UnknownRoute, None),
            E::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, INVALID, Code::MethodNotAllowed, None),
            E::IdempotencyInFlight { .. } => (StatusCode::CONFLICT, INVALID, Code::IdempotencyKeyInFlight, None),
            E::IdempotencyMismatch => (StatusCode::UNPROCESSABLE_ENTITY, INVALID, Code::IdempotencyKeyReused, Some("Idempotency-Key".into())),
            E::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, INVALID, Code::RequestTooLarge, None),
            E::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, INVALID, Code::RequestTimeout, None),
            E::UnsupportedEncoding(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, INVALID, Code::UnsupportedContentEncoding, Some("Content-Encoding".into())),
            E::TooManyConnections => (StatusCode::SERVICE_UNAVAILABLE, "api_error", Code::TooManyConnections, None),
            E::FileTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, INVALID, Code::FileTooLarge, Some("file".into())),
            E::RateLimited { .. } | E::PublicRateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", Code::RateLimitExceeded, None),
            E::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", Code::EngineOverloaded, None),
            E::TooManyConcurrent { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", Code::TooManyConcurrentRequests, None),
            E::ImagesBusy(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", Code::ImageDecodeBusy, None),
            E::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "api_error", Code::ShuttingDown, None),
            E::NoCapacity(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", Code::ModelCapacity, None),
            E::ModelNotAvailable { .. } => (StatusCode::NOT_FOUND, "not_found_error", Code::ModelNotAvailable, model()),
            E::ModelUnavailable { .. } => (StatusCode::BAD_GATEWAY, "api_error", Code::ModelUnavailable, model()),
            E::EngineFailed(_) => (StatusCode::BAD_GATEWAY, "api_error", Code::EngineError, None),
            E::LedgerUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "api_error", Code::LedgerUnavailable, None),
            E::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "api_error", Code::InternalError, None),
        }
    }

    /// The envelope `{"error": {...}}`, with `request_id` when given (5xx bodies carry it).
    pub fn envelope(&self, request_id: Option<String>) -> ErrorBody {
        let (_, kind, code, param) = self.parts();
        let details = match self {
            ApiError::Validation(errors) => Some(json!({ "errors": errors })),
            ApiError::UnsupportedParameter(params) => Some(json!({ "unsupported": params })),
            ApiError::IdempotencyMismatch => Some(
                json!({ "errors": [{"param": "Idempotency-Key", "message": "was used with a different body"}] }),
            ),
            ApiError::InsufficientBalance {
                required,
                available,
                ..
            } => Some(json!({
                "required_micros": required, "required_usd": required.usd(),
                "available_micros": available, "available_usd": available.usd(),
            })),
            ApiError::KeySpendLimit {
                breach:
                    KeyLimitBreach {
                        limit,
                        used,
                        required,
                    },
                ..
            } => Some(json!({
                "limit_micros": limit, "limit_usd": limit.usd(),
                "used_micros": used, "used_usd": used.usd(),
                "required_micros": required, "required_usd": required.usd(),
            })),
            _ => None,
        };
        ErrorBody {
            error: ErrorObject {
                message: self.to_string(),
                kind,
                param,
                code: code.as_str(),
                details,
                request_id,
            },
        }
    }

    /// Log a server-side failure (5xx) with its detail; client errors are not logged here.
    pub fn log(&self) {
        let (status, ..) = self.parts();
        if status.is_server_error() {
            let detail = match self {
                ApiError::EngineFailed(d)
                | ApiError::ImagesBusy(d)
                | ApiError::Internal(d)
                | ApiError::LedgerUnavailable(d)
                | ApiError::ModelUnavailable { detail: d, .. } => d.as_str(),
                _ => "",
            };
            tracing::error!(status = status.as_u16(), "{self}: {detail}");
        }
    }
}

/// What a client can change when its balance or key limit does not cover a request (the end
/// of the 402 message), by what the endpoint bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// Token-priced with an output limit: lower that field (`max_tokens`,
    /// `max_output_tokens`).
    FewerTokens(&'static str),
    /// Token-priced with no output limit (the output was already cut to the balance): the
    /// prompt alone is not covered; shorten that field (`messages`, `input`).
    ShorterPrompt(&'static str),
    /// Transcriptions and translations, billed per second of audio.
    ShorterAudio,
    /// Speech, billed per character of `input`.
    ShorterInput,
}

impl std::fmt::Display for Remedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::FewerTokens(field) => write!(f, "lower `{field}`"),
            Self::ShorterPrompt(field) => write!(f, "shorten `{field}`"),
            Self::ShorterAudio => f.write_str("send shorter audio (billed per second)"),
            Self::ShorterInput => f.write_str("send a shorter `input` (billed per character)"),
        }
    }
}

impl ApiError {
    /// This error with `remedy` in its 402 message (other errors pass unchanged).
    #[must_use]
    pub fn with_remedy(self, remedy: Remedy) -> Self {
        match self {
            Self::InsufficientBalance {
                required,
                available,
                ..
            } => Self::InsufficientBalance {
                required,
                available,
                remedy,
            },
            Self::KeySpendLimit { breach, .. } => Self::KeySpendLimit { breach, remedy },
            other => other,
        }
    }
}

impl From<MeterError> for ApiError {
    fn from(e: MeterError) -> Self {
        match e {
            MeterError::InsufficientBalance {
                required,
                available,
            } => Self::InsufficientBalance {
                required,
                available,
                remedy: Remedy::FewerTokens("max_tokens"),
            },
            MeterError::KeySpendLimit(breach) => Self::KeySpendLimit {
                breach,
                remedy: Remedy::FewerTokens("max_tokens"),
            },
            MeterError::IdempotencyInFlight { retry_after_s } => {
                Self::IdempotencyInFlight { retry_after_s }
            }
            MeterError::IdempotencyMismatch => Self::IdempotencyMismatch,
            MeterError::StreamWithIdempotency => Self::BadRequest {
                param: Some("stream".into()),
                code: Code::IdempotencyKeyWithStream,
                message: "The Idempotency-Key header cannot be combined with `stream: true`."
                    .into(),
            },
            MeterError::Overloaded(model) => Self::Overloaded(model),
            MeterError::TenantLimit { scope, limit } => Self::TooManyConcurrent { scope, limit },
            MeterError::ImagesBusy(d) => Self::ImagesBusy(d),
            MeterError::ShuttingDown => Self::ShuttingDown,
            MeterError::Image {
                label,
                message,
                too_large,
            } => Self::BadRequest {
                param: label,
                code: if too_large {
                    Code::ImageTooLarge
                } else {
                    Code::InvalidImage
                },
                message: format!("The image cannot be used: {message}."),
            },
            MeterError::EngineFailed(d) => Self::EngineFailed(d),
            e @ (MeterError::Storage(_) | MeterError::NotRecorded(_)) => {
                Self::LedgerUnavailable(e.to_string())
            }
            e @ MeterError::Internal(_) => Self::Internal(e.to_string()),
        }
    }
}

impl From<AccountsError> for ApiError {
    /// A ledger read or write the database failed (disk full, I/O error, unreachable, pool
    /// exhausted) is 503 `ledger_unavailable`; anything else reaching here is our fault (500).
    fn from(e: AccountsError) -> Self {
        Self::storage(e.is_unavailable(), e.to_string())
    }
}

impl ApiError {
    /// A storage failure: 503 `ledger_unavailable` when the ledger could not be reached or
    /// written (`unavailable`), else 500.
    pub fn storage(unavailable: bool, detail: String) -> Self {
        if unavailable {
            Self::LedgerUnavailable(detail)
        } else {
            Self::Internal(detail)
        }
    }
}

impl ApiError {
    /// 400 with `code`, naming the request field `param` (a JSON path such as
    /// `tools[1].function.name`, or a form field).
    pub fn bad(param: impl Into<String>, code: Code, message: String) -> Self {
        Self::BadRequest {
            param: Some(param.into()),
            code,
            message,
        }
    }

    /// The answer to audio work on `model` that failed with `e`: 400 for what the client sent
    /// (`param` names the field: `file`, `input`, `prompt`, `language`), 502 for a model that
    /// could not load or run.
    pub fn from_audio(model: &str, e: AudioError) -> Self {
        let bad = Self::bad;
        match e {
            AudioError::TooLong { limit_seconds } => bad("file", Code::AudioTooLong, format!("The audio is longer than the limit of {limit_seconds} seconds ({} minutes).", limit_seconds / 60)),
            AudioError::Empty => bad("file", Code::EmptyAudio, "The file holds no audio samples.".into()),
            AudioError::Unsupported(m) => bad("file", Code::UnsupportedAudioFormat, format!("The file is not audio this server can decode (wav, flac, mp3, ogg/vorbis, m4a/aac, webm/mkv): {m}.")),
            AudioError::Corrupt(m) => bad("file", Code::InvalidAudio, format!("The audio file is damaged: {m}.")),
            AudioError::SampleRate { rate, min, max } => bad("file", Code::InvalidAudio, format!("The audio's sample rate is {rate} Hz; this server decodes {min} to {max} Hz.")),
            AudioError::NoSpeech => bad("input", Code::NoSpeakableText, "The input has nothing to speak (no letters or digits the voice can read); nothing was charged.".into()),
            AudioError::SpeechTooLong { seconds, limit_seconds } => bad("input", Code::InputTooLong, format!("The input would take about {} minutes to say at this speed; one request may make at most {} minutes of speech. Split the text (or raise `speed`); nothing was charged.", seconds.div_ceil(60), limit_seconds / 60)),
            AudioError::PromptTooLong { limit_tokens } => bad("prompt", Code::PromptTooLong, format!("The prompt is longer than {limit_tokens} tokens, the most the model reads.")),
            AudioError::UnknownLanguage(l) => bad("language", Code::UnsupportedLanguage, format!("Unknown language `{l}`.")),
            AudioError::Load(m) | AudioError::Unavailable(m) => Self::ModelUnavailable { model: model.to_owned(), detail: m },
            AudioError::Inference(m) => Self::EngineFailed(m),
        }
    }

    /// The answer to embedding work on `model` that failed with `e`: 400 naming the input
    /// (`input[i]`, or `input` when `single`, the request's one string) for what the client
    /// sent, 503 for a model that failed to load, 502 for a failed forward.
    pub fn from_embed(model: &str, e: EmbedError, single: bool) -> Self {
        let at = |index: usize| {
            if single {
                "input".to_owned()
            } else {
                format!("input[{index}]")
            }
        };
        match e {
            EmbedError::TooLong { index, tokens, limit } => Self::bad(at(index), Code::InputTooLong, format!("The input has {tokens} tokens; `{model}` reads at most {limit} (special tokens included). Split it; nothing is truncated and nothing was charged.")),
            EmbedError::TextTooLong { index, bytes, limit } => Self::bad(at(index), Code::InputTooLong, format!("The input has {bytes} bytes; `{model}` reads at most {limit} tokens, and no text that long fits. Split it; nothing is truncated and nothing was charged.")),
            EmbedError::RequestTooLong { counted, limit, .. } => Self::bad("input", Code::InputTooLong, format!("The inputs have more than {limit} tokens in all (counting stopped at {counted}); one request may have at most {limit}. Send them in several requests; nothing was charged.")),
            EmbedError::Empty { index } => Self::bad(at(index), Code::InvalidValue, "The input is empty.".into()),
            EmbedError::BadToken { index, id, vocab } => Self::bad(at(index), Code::InvalidValue, format!("Token id {id} is outside the vocabulary of `{model}` (ids 0 to {}).", vocab.saturating_sub(1))),
            EmbedError::Load(m) => Self::ModelUnavailable { model: model.to_owned(), detail: m },
            EmbedError::Tokenize(m) | EmbedError::Forward(m) => Self::EngineFailed(m),
        }
    }
}

impl IntoResponse for ApiError {
    /// The status, the envelope, and the variant's headers. The envelope also rides in the
    /// response's extensions, so the request-id layer can add `request_id` to a 5xx body
    /// without parsing it.
    fn into_response(self) -> Response {
        let (status, ..) = self.parts();
        self.log();
        let envelope = self.envelope(None);
        let mut resp = (status, axum::Json(&envelope)).into_response();
        resp.extensions_mut().insert(envelope);
        let h = resp.headers_mut();
        match &self {
            ApiError::Overloaded(_)
            | ApiError::NoCapacity(_)
            | ApiError::TooManyConnections
            | ApiError::TooManyConcurrent { .. }
            | ApiError::ImagesBusy(_)
            | ApiError::ShuttingDown => {
                h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            ApiError::LedgerUnavailable(_) => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(LEDGER_RETRY_AFTER_S));
            }
            ApiError::Unauthenticated { .. } => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::IdempotencyInFlight { retry_after_s } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            ApiError::RateLimited { retry_after_ms, .. }
            | ApiError::PublicRateLimited { retry_after_ms, .. } => {
                h.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_ms.div_ceil(1000).max(1)),
                );
                h.insert("retry-after-ms", HeaderValue::from(*retry_after_ms));
            }
            ApiError::InsufficientBalance { .. }
            | ApiError::KeySpendLimit { .. }
            | ApiError::ModelNotAvailable { .. } => {
                h.insert("x-should-retry", HeaderValue::from_static("false"));
            }
            _ => {}
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_envelope_lists_every_field() {
        let e = ApiError::Validation(vec![
            FieldError {
                param: "temperature".into(),
                message: "must be <= 2".into(),
            },
            FieldError {
                param: "model".into(),
                message: "is required".into(),
            },
        ]);
        let b = serde_json::to_value(e.envelope(None)).unwrap();
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["param"], "temperature");
        assert_eq!(b["error"]["details"]["errors"][1]["param"], "model");
        assert_eq!(e.parts().0, StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn overloaded_sets_retry_after() {
        let r = ApiError::Overloaded("m".into()).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
