//! `ApiError`: the one error type that becomes an HTTP response, in the interface's envelope
//! `{"error": {"message", "type", "param", "code", "details"?}}` (interface.md, "Errors").

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

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
    /// 400 `unsupported_parameter`: a field we do not implement.
    #[error("Unrecognized request argument supplied: {0}")]
    UnsupportedParameter(String),
    /// 400 with a specific code and param (image to a text model, context too long, ...).
    #[error("{message}")]
    BadRequest {
        param: Option<String>,
        code: &'static str,
        message: String,
    },
    /// 422 `invalid_request`: well-formed JSON that fails validation.
    #[error("The request body failed validation: {}", .0.iter().map(|e| format!("{}: {}", e.param, e.message)).collect::<Vec<_>>().join("; "))]
    Validation(Vec<FieldError>),
    /// 403 `model_not_licensed`: the licence forbids commercial serving.
    #[error("The model `{0}` exists but its licence does not allow commercial serving.")]
    NotLicensed(String),
    /// 404 `model_not_found`.
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    /// 404 `unknown_route`.
    #[error("Unknown route: {0}")]
    UnknownRoute(String),
    /// 405 `method_not_allowed`.
    #[error("Method not allowed for this route.")]
    MethodNotAllowed,
    /// 413 `request_too_large`.
    #[error("The request body is too large.")]
    TooLarge,
    /// 429 `engine_overloaded` with `Retry-After`.
    #[error("The model `{0}` is at capacity; retry shortly.")]
    Overloaded(String),
    /// 502 `model_unavailable`: in the catalogue but cannot run here now.
    #[error("{0}")]
    ModelUnavailable(String),
    /// 502 `engine_error`: the model failed while generating. The caller is not charged.
    #[error("The model failed while generating; retry shortly.")]
    EngineFailed(String),
    /// 500 `internal_error`: our fault. The body carries the request id.
    #[error("The server had an error while processing your request.")]
    Internal(String),
}

impl ApiError {
    /// (status, `type`, `code`, `param`) for each variant; exhaustive, no catch-all arm.
    pub fn parts(&self) -> (StatusCode, &'static str, &'static str, Option<String>) {
        use ApiError as E;
        match self {
            E::InvalidJson(_) => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_json",
                None,
            ),
            E::UnsupportedParameter(p) => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "unsupported_parameter",
                Some(p.clone()),
            ),
            E::BadRequest { param, code, .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                code,
                param.clone(),
            ),
            E::Validation(errs) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request_error",
                "invalid_request",
                errs.first().map(|e| e.param.clone()),
            ),
            E::NotLicensed(_) => (
                StatusCode::FORBIDDEN,
                "permission_error",
                "model_not_licensed",
                Some("model".into()),
            ),
            E::ModelNotFound(_) => (
                StatusCode::NOT_FOUND,
                "not_found_error",
                "model_not_found",
                Some("model".into()),
            ),
            E::UnknownRoute(_) => (
                StatusCode::NOT_FOUND,
                "not_found_error",
                "unknown_route",
                None,
            ),
            E::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
                None,
            ),
            E::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
                None,
            ),
            E::Overloaded(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "engine_overloaded",
                None,
            ),
            E::ModelUnavailable(_) => (
                StatusCode::BAD_GATEWAY,
                "api_error",
                "model_unavailable",
                Some("model".into()),
            ),
            E::EngineFailed(_) => (StatusCode::BAD_GATEWAY, "api_error", "engine_error", None),
            E::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "internal_error",
                None,
            ),
        }
    }

    /// The envelope as JSON (without `request_id`; the request-id layer adds it to 5xx bodies).
    pub fn body(&self) -> Value {
        let (_, kind, code, param) = self.parts();
        let mut err =
            json!({"message": self.to_string(), "type": kind, "param": param, "code": code});
        if let ApiError::Validation(errors) = self {
            err["details"] = json!({ "errors": errors });
        }
        json!({ "error": err })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, ..) = self.parts();
        if status.is_server_error() {
            let detail = match &self {
                ApiError::EngineFailed(d)
                | ApiError::Internal(d)
                | ApiError::ModelUnavailable(d) => d.as_str(),
                _ => "",
            };
            tracing::error!(status = status.as_u16(), "{self}: {detail}");
        }
        let mut resp = (status, axum::Json(self.body())).into_response();
        if matches!(self, ApiError::Overloaded(_)) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
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
        let b = e.body();
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
