//! What the dashboard's handler files share (so none imports another, and none uses the
//! router in `mod.rs`): the `{ok, data}` / `{ok: false, error}` envelope and `DashError`, the
//! JSON body extractor, the `Session` extractor, the CSRF middleware, e-mail normalization,
//! the account as JSON, the base URL of e-mailed links, and starting a session with its cookie.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::Serialize;

use crate::api::shared::codes::DashCode;
use crate::money::Micros;

use crate::accounts::{Account, AccountsError};
use crate::api::shared::limits::Throttled;
use crate::api::shared::session as api_session;
use crate::api::shared::state::Accounts;
use crate::auth::session::{self, SessionPrincipal};
use crate::ids::AccountId;

/// A dashboard failure: status, stable `code`, readable `message`.
#[derive(Debug)]
pub struct DashError {
    pub(super) status: StatusCode,
    pub(super) code: DashCode,
    pub(super) message: String,
    pub(super) retry_after: Option<u64>,
    /// The request field (form control) the error is about, for feedback next to it.
    pub(super) field: Option<&'static str>,
}

impl DashError {
    pub fn new(status: StatusCode, code: DashCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
            field: None,
        }
    }

    /// Name the request field the error is about (`error.field` in the envelope).
    pub(super) fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    pub(super) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub(super) fn bad_request(code: DashCode, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 500 `internal_error`: our failure, logged where it happened.
    pub(super) fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            DashCode::InternalError,
            "The server failed; try again.",
        )
    }
}

impl From<AccountsError> for DashError {
    /// The dashboard's answer to each accounts failure: status, `code`, message, form field.
    fn from(e: AccountsError) -> Self {
        use AccountsError as E;
        match e {
            E::EmailTaken => Self::new(
                StatusCode::CONFLICT,
                DashCode::EmailTaken,
                "An account with this e-mail address already exists; sign in or reset the password.",
            ),
            E::UnverifiedIdentity => Self::new(
                StatusCode::FORBIDDEN,
                DashCode::EmailNotVerifiedByProvider,
                "Your identity provider has not verified your e-mail address, so it cannot sign you in here. Verify the address with the provider, or sign up with e-mail and a password.",
            ),
            E::BadToken => Self::bad_request(
                DashCode::InvalidToken,
                "This link is unknown, already used or expired; ask for a new one.",
            ),
            E::BadCode => Self::bad_request(
                DashCode::InvalidCode,
                "This code is unknown or has already been redeemed.",
            )
            .field("code"),
            E::TopupPending => Self::new(
                StatusCode::CONFLICT,
                DashCode::TopupPending,
                "A card payment you started in the last 24 hours is not confirmed yet; delete the account once it is confirmed or has expired.",
            ),
            E::NoSuchKey => Self::new(StatusCode::NOT_FOUND, DashCode::KeyNotFound, "No such API key."),
            E::InvalidCredentials => Self::new(
                StatusCode::UNAUTHORIZED,
                DashCode::InvalidCredentials,
                "Wrong e-mail address or password.",
            ),
            E::EmailNotVerified => Self::new(
                StatusCode::FORBIDDEN,
                DashCode::EmailNotVerified,
                "Confirm your e-mail address first: open the link we sent, or ask for a new one.",
            ),
            E::KeysNeedVerifiedEmail => Self::new(
                StatusCode::FORBIDDEN,
                DashCode::EmailNotVerified,
                "Confirm your e-mail address before creating keys.",
            ),
            E::PasswordHash(m) => Self::bad_request(DashCode::WeakPassword, format!("{}.", capitalize(&m))),
            E::NewPasswordHash(m) => {
                Self::bad_request(DashCode::WeakPassword, m).field("new_password")
            }
            E::WrongPassword => {
                Self::bad_request(DashCode::WrongPassword, "The current password is not right.")
                    .field("current_password")
            }
            E::ConfirmationMismatch => Self::bad_request(
                DashCode::ConfirmationMismatch,
                "Type the account's e-mail address exactly to confirm.",
            )
            .field("confirm_email"),
            E::AdminOnly => Self::new(
                StatusCode::FORBIDDEN,
                DashCode::AdminOnly,
                "Only admin accounts can do this.",
            ),
            E::NoSuchAccount => Self::new(
                StatusCode::NOT_FOUND,
                DashCode::AccountNotFound,
                "No such account.",
            ),
            E::WouldGoNegative { available } => Self::bad_request(
                DashCode::WouldGoNegative,
                format!(
                    "The debit exceeds the available balance ({available}, {} micros).",
                    available.0
                ),
            ),
            E::FirstTopupTooSmall {
                amount,
                currency,
                usd,
            } => Self::bad_request(
                DashCode::AmountTooSmall,
                format!(
                    "The first top-up must be at least 1.00 USD; {amount} {currency} is {:.2} USD.",
                    usd.usd()
                ),
            ),
            E::PaymentProvider(_) => Self::new(
                StatusCode::BAD_GATEWAY,
                DashCode::PaymentProviderError,
                "The payment provider could not start a checkout; try again.",
            ),
            E::UnknownCheckout => Self::bad_request(
                DashCode::UnknownCheckout,
                "No pending top-up matches this checkout, currency and amount.",
            ),
            E::Ledger(other) => {
                tracing::error!(error = %other, "dashboard ledger failure");
                Self::internal()
            }
        }
    }
}

/// `s` with its first letter in upper case.
pub(super) fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

impl From<JsonRejection> for DashError {
    fn from(r: JsonRejection) -> Self {
        Self::new(r.status(), DashCode::InvalidBody, r.body_text())
    }
}

impl IntoResponse for DashError {
    fn into_response(self) -> Response {
        let body = Failure {
            ok: false,
            error: FailureBody {
                code: self.code.as_str(),
                message: &self.message,
                field: self.field,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        resp
    }
}

impl From<QueryRejection> for DashError {
    fn from(r: QueryRejection) -> Self {
        Self::new(r.status(), DashCode::InvalidQuery, r.body_text())
    }
}

/// A query string whose rejections (a wrong type, an unknown parameter) use the dashboard
/// envelope with code `invalid_query`.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(DashError))]
pub struct Q<T>(pub T);

/// A JSON request body whose rejections use the dashboard envelope.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(DashError))]
pub struct Body<T>(pub T);

/// `{"ok": false, "error": {...}}`: a dashboard failure on the wire.
#[derive(Serialize)]
struct Failure<'a> {
    ok: bool,
    error: FailureBody<'a>,
}

#[derive(Serialize)]
struct FailureBody<'a> {
    code: &'static str,
    message: &'a str,
    /// The form field the error is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'static str>,
}

/// `{"ok": true, "data": ...}`: a dashboard success on the wire.
#[derive(Serialize)]
struct Success<T> {
    ok: bool,
    data: T,
}

/// `{"ok": true, "data": data}` with `status`.
pub(super) fn ok<T: Serialize>(status: StatusCode, data: T) -> Response {
    (status, Json(Success { ok: true, data })).into_response()
}

/// The signed-in user of a request (from the session cookie) and the cookie's value.
pub struct Session {
    pub principal: SessionPrincipal,
    pub cookie: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Session
where
    Accounts: FromRef<S>,
{
    type Rejection = DashError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, DashError> {
        let state = &Accounts::from_ref(state);
        let cookie = api_session::cookie(&parts.headers);
        let resolved = match cookie.clone() {
            Some(value) => api_session::resolve(state, value).await?,
            None => None,
        };
        match (resolved, cookie) {
            (Some(principal), Some(cookie)) => Ok(Self { principal, cookie }),
            _ if parts.headers.contains_key(header::AUTHORIZATION) => Err(DashError::new(
                StatusCode::UNAUTHORIZED,
                DashCode::SessionRequired,
                "The dashboard API takes a signed-in session, not an API key: an API key can spend but never create, list or revoke keys.",
            )),
            _ => Err(DashError::new(
                StatusCode::UNAUTHORIZED,
                DashCode::SessionRequired,
                "Sign in first: this needs a dashboard session.",
            )),
        }
    }
}

/// Refuse cross-site writes with 403 (`session::same_site`).
pub(super) async fn csrf(req: Request, next: Next) -> Response {
    let headers = api_session::with_host(req.headers(), req.uri());
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || api_session::same_site(&headers)
    {
        next.run(req).await
    } else {
        DashError::new(
            StatusCode::FORBIDDEN,
            DashCode::CrossSiteRequest,
            "Cross-site requests cannot change dashboard state.",
        )
        .into_response()
    }
}

impl From<Throttled> for DashError {
    fn from(t: Throttled) -> Self {
        DashError::new(
            StatusCode::TOO_MANY_REQUESTS,
            DashCode::TooManyAttempts,
            format!("Too many {} attempts; try again in {} s.", t.what, t.wait_s),
        )
        .retry_after(t.wait_s)
    }
}

/// Trimmed, lower-cased address with one `@`, a dot in the domain, no spaces, at most 254
/// bytes (RFC 5321's path limit), not under the reserved `.invalid` domain (RFC 2606; deleted
/// accounts keep such a placeholder); a deliberately plain check, the link proves the rest.
pub fn normalize_email(raw: &str) -> Result<String, DashError> {
    let e = raw.trim().to_lowercase();
    let valid = e.len() <= 254
        && !e.chars().any(char::is_whitespace)
        && e.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !domain.ends_with(".invalid")
        });
    if valid {
        Ok(e)
    } else {
        Err(DashError::bad_request(
            DashCode::InvalidEmail,
            "Enter an e-mail address like name@example.com.",
        )
        .field("email"))
    }
}

/// The account as the dashboard shows it (micros, with USD renderings).
#[derive(Serialize)]
pub struct AccountView<'a> {
    id: AccountId,
    email: &'a str,
    verified: bool,
    admin: bool,
    has_password: bool,
    /// Unix seconds.
    created_at: i64,
    balance_micros: Micros,
    reserved_micros: Micros,
    available_micros: Micros,
    balance_usd: f64,
    available_usd: f64,
}

impl<'a> AccountView<'a> {
    pub fn of(a: &'a Account) -> Self {
        Self {
            id: a.id,
            email: &a.email,
            verified: a.verified,
            admin: a.admin,
            has_password: a.has_password,
            created_at: a.created_at,
            balance_micros: a.balance_micros,
            reserved_micros: a.reserved_micros,
            available_micros: a.available_micros(),
            balance_usd: a.balance_micros.usd(),
            available_usd: a.available_micros().usd(),
        }
    }
}

/// `{"account": ...}`.
#[derive(Serialize)]
pub struct WithAccount<'a> {
    pub account: AccountView<'a>,
}

impl<'a> WithAccount<'a> {
    pub fn of(a: &'a Account) -> Self {
        Self {
            account: AccountView::of(a),
        }
    }
}

/// HTML text escaping of the five significant characters.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A small page in the dashboard's style (header, stylesheet) under the strict CSP: `title`,
/// `message` and one link on to sign-in labelled `sign_in`, all escaped. What browser
/// navigations outside the single-page app land on (the e-mailed verification link, the single
/// sign-on callback).
pub(super) fn link_page(status: StatusCode, title: &str, message: &str, sign_in: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{t} · tollgate</title><link rel=\"stylesheet\" href=\"/assets/app.css\"></head><body><header><a class=\"brand\" href=\"/#/\">tollgate</a></header><main id=\"main\"><h1>{t}</h1><p>{m}</p><p><a class=\"button\" href=\"/#/signin\">{l}</a></p></main></body></html>",
        t = escape(title),
        m = escape(message),
        l = escape(sign_in),
    );
    let mut r = (status, axum::response::Html(html)).into_response();
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(crate::api::shared::headers::CSP),
    );
    r
}

/// A cookie that removes the session cookie.
pub(super) fn removal_cookie() -> Cookie<'static> {
    Cookie::build((session::COOKIE, "")).path("/").build()
}

/// Base URL for e-mailed links.
pub fn base_url(state: &Accounts, headers: &HeaderMap) -> String {
    state.dashboard.public_url.clone().unwrap_or_else(|| {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}")
    })
}

fn session_cookie(state: &Accounts, value: String) -> Cookie<'static> {
    Cookie::build((session::COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(!state.dashboard.insecure_cookies)
        .path("/")
        .max_age(cookie::time::Duration::seconds(
            state.dashboard.sessions.absolute_secs,
        ))
        .build()
}

/// Start a session for `account` and add its cookie to `jar`. A new id at every sign-in (no
/// session fixation); the session of a cookie already in `jar` ends.
pub async fn start_session(
    state: &Accounts,
    jar: CookieJar,
    account: AccountId,
) -> Result<CookieJar, DashError> {
    let old = jar.get(session::COOKIE).map(|c| c.value().to_owned());
    let value = state.service.start_session(account, old).await?;
    Ok(jar.add(session_cookie(state, value)))
}
