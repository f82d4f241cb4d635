//! Header rules shared by several handler files: the pages' Content-Security-Policy, and the
//! `/v1` request-header guard (single-valued headers sent once, no compressed bodies).

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::codes::Code;
use super::error::ApiError;

/// Content-Security-Policy of every page and asset (the web pages and the OIDC callback page).
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Request headers that carry one value: sent more than once, the request is refused rather
/// than one copy silently winning (RFC 9110 5.3: only list-valued fields may repeat).
const SINGLE_VALUED: [(HeaderName, &str); 3] = [
    (header::AUTHORIZATION, "Authorization"),
    (
        HeaderName::from_static("idempotency-key"),
        "Idempotency-Key",
    ),
    (header::CONTENT_TYPE, "Content-Type"),
];

/// Middleware on `/v1`: [`check`] before anything else reads the request.
pub async fn guard(req: Request, next: Next) -> Response {
    match check(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Refuse a repeated single-valued header and any `Content-Encoding` but `identity`.
///
/// # Errors
/// 400 `duplicate_header` with `param` the header's name; 415 `unsupported_content_encoding`.
pub fn check(headers: &HeaderMap) -> Result<(), ApiError> {
    for (name, shown) in &SINGLE_VALUED {
        if headers.get_all(name).iter().nth(1).is_some() {
            return Err(ApiError::BadRequest {
                param: Some((*shown).into()),
                code: Code::DuplicateHeader,
                message: format!("The header `{shown}` was sent more than once."),
            });
        }
    }
    for v in headers.get_all(header::CONTENT_ENCODING) {
        let v = v.to_str().unwrap_or("(not text)").trim();
        if !v.is_empty() && !v.eq_ignore_ascii_case("identity") {
            return Err(ApiError::UnsupportedEncoding(v.chars().take(64).collect()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn repeated_single_valued_headers_are_refused() {
        let mut h = HeaderMap::new();
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        assert!(check(&h).is_ok());
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        let e = check(&h).unwrap_err();
        assert_eq!(e.parts().2, "duplicate_header");
        assert_eq!(e.parts().3.as_deref(), Some("Authorization"));
    }

    #[test]
    fn compressed_bodies_are_refused_identity_is_not() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        assert!(check(&h).is_ok());
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(check(&h).unwrap_err().parts().0.as_u16(), 415);
    }
}
