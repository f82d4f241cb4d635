//! `PaidCall`: the opening every paid route shares, as one axum extractor. It authenticates
//! the payer (a bearer key, or the playground's session cookie) and checks its rate limit
//! before the body is touched, so an unauthenticated or throttled body is never read; the
//! handler then reads the body (`json` or `multipart`), names its `Idempotency-Key`
//! (`idempotency`), and answers through `answer`, which puts the `x-ratelimit-*` headers on
//! every authenticated response.
//! May use: `paid`, `access`, `limits`, `state`, `error`, `metering`, `connections` (to mark
//! the connection as paying). Never: an endpoint file.

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{FromRequest, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::access::Payer;
use super::error::ApiError;
use super::limits::RateInfo;
use super::paid;
use super::state::{AppState, RequestId, RequestModel};
use crate::billing::Units;
use crate::metering::{Idempotency, PaidUnits};

/// Who made a paid request, and when: what metering records with it.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Who pays.
    pub payer: Payer,
    /// The request id (`req_` + 24 alphanumerics), set by the request-id layer.
    pub request_id: RequestId,
    /// When the payer was known (usage latency counts from here, ms).
    pub started: Instant,
}

impl Caller {
    /// Unit-priced work for `Meter::run_units` made by this caller: `units` of `model`,
    /// about `estimate_s` seconds long.
    pub fn paid_units(
        &self,
        model: &str,
        units: Units,
        idempotency: Option<Idempotency>,
        estimate_s: u64,
    ) -> PaidUnits {
        PaidUnits {
            request_id: self.request_id.0.clone(),
            account: self.payer.account_id(),
            key: self.payer.key_id(),
            model: model.to_owned(),
            units,
            idempotency,
            started: self.started,
            estimate_s,
        }
    }
}

/// An authenticated, rate-limited paid request whose body is not read yet. (Not `Sync`: hold
/// `caller`, not `&PaidCall`, across an `.await`.)
pub struct PaidCall {
    /// Who made it.
    pub caller: Caller,
    /// Where the handler records the model it read, for the request's log line.
    pub logged: RequestModel,
    rate: RateInfo,
    parts: Parts,
    body: Option<Body>,
}

impl FromRequest<AppState> for PaidCall {
    type Rejection = Response;

    /// # Errors
    /// The 401 or 429 response (a 429 with its `x-ratelimit-*` headers), or 500 when the
    /// request-id layer did not run.
    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let (request_id, logged) = match (
            parts.extensions.get::<RequestId>(),
            parts.extensions.get::<RequestModel>(),
        ) {
            (Some(id), Some(model)) => (id.clone(), model.clone()),
            _ => {
                return Err(ApiError::Internal("no request id".into()).into_response());
            }
        };
        let (payer, rate) = paid::payer(state, &parts.headers).await?;
        // A connection that sent a valid key may use the part of the connection cap that is
        // kept for paying clients (`connections::Registry`).
        if let Some(conn) = parts
            .extensions
            .get::<std::sync::Arc<super::connections::Conn>>()
        {
            conn.proven();
        }
        Ok(Self {
            caller: Caller {
                payer,
                request_id,
                started: Instant::now(),
            },
            logged,
            rate,
            parts,
            body: Some(body),
        })
    }
}

impl PaidCall {
    /// The JSON body (`paid::json_body`): its `Content-Type` checked, at most
    /// `--max-body-bytes`; the `model` it names is logged.
    ///
    /// # Errors
    /// As `paid::json_body`; 500 when the body was taken already.
    pub async fn json(&mut self, state: &AppState) -> Result<Bytes, ApiError> {
        let body = self.take_body()?;
        paid::json_body(state, &self.parts.headers, body, &self.logged).await
    }

    /// The body as `multipart/form-data` (axum's `Multipart`; its rejection is the handler's
    /// to answer).
    ///
    /// # Errors
    /// 500 when the body was taken already.
    pub async fn multipart(
        &mut self,
        state: &AppState,
    ) -> Result<Result<Multipart, MultipartRejection>, ApiError> {
        let body = self.take_body()?;
        let req = Request::from_parts(self.parts.clone(), body);
        Ok(Multipart::from_request(req, state).await)
    }

    /// The request's `Idempotency-Key` for `route`, with `body`'s fingerprint
    /// (`paid::idempotency`); `None` without the header.
    ///
    /// # Errors
    /// 400 `invalid_idempotency_key`; 400 `idempotency_key_with_stream` when `stream`.
    pub fn idempotency(
        &self,
        body: &[u8],
        stream: bool,
        route: &str,
    ) -> Result<Option<Idempotency>, ApiError> {
        paid::idempotency(&self.parts.headers, body, stream, route, &self.caller.payer)
    }

    /// Run `handle` and answer its response or error, with the `x-ratelimit-*` headers.
    pub async fn answer<F, Fut>(self, handle: F) -> Response
    where
        F: FnOnce(Self) -> Fut,
        Fut: std::future::Future<Output = Result<Response, ApiError>>,
    {
        let rate = self.rate;
        let mut resp = handle(self)
            .await
            .unwrap_or_else(IntoResponse::into_response);
        rate.apply(resp.headers_mut());
        resp
    }

    fn take_body(&mut self) -> Result<Body, ApiError> {
        self.body
            .take()
            .ok_or_else(|| ApiError::Internal("the request body was read twice".into()))
    }
}
